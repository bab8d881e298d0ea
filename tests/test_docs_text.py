"""What the pages say of the repository holds: every path of it that docs/*.md and the README
name exists, and their code blocks fit the site's columns."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]

# A path of this repository, named from its root: one of its top folders, then at least one more
# part (`tests/c/test_save_file.c`, `docs/remote.md`); not the tail of a longer path.
_PATH = re.compile(r"(?<![\w./-])((?:benches|cmake|crates|docs|examples|include|python|scripts|"
                   r"tests)/[\w.+-]+(?:/[\w.+-]+)*/?)")
# Paths the pages name in other repositories, not this one.
ELSEWHERE = {
    "python/kvikio/kvikio": "rapidsai/kvikio's Python package (docs/compatibility.md)",
    "python/kvikio/tests": "rapidsai/kvikio's test suite (docs/compatibility.md)",
}
_FENCE = re.compile(r"^(```+|~~~+)[^\n]*\n(.*?)^\1", re.S | re.M)
WIDTH = 100


def _named_paths():
    for page in PAGES:
        for m in _PATH.finditer(page.read_text()):
            yield page.relative_to(ROOT), m.group(1).rstrip(".")


def test_every_repository_path_the_pages_name_exists():
    missing = sorted({f"{page}: {path}" for page, path in _named_paths()
                      if path not in ELSEWHERE and not (ROOT / path).exists()})
    assert not missing, "paths the pages name that are not in the repository:\n" + "\n".join(missing)


def test_the_paths_of_other_repositories_are_still_named():
    assert set(ELSEWHERE) <= {path for _, path in _named_paths()}


def test_code_blocks_fit_in_100_columns():
    long = [f"{page.relative_to(ROOT)}: {line}" for page in PAGES
            for m in _FENCE.finditer(page.read_text())
            for line in m.group(2).splitlines() if len(line) > WIDTH]
    assert not long, f"code block lines over {WIDTH} columns (wrap them):\n" + "\n".join(long)
