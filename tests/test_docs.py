"""The documentation check of scripts/test.sh (scripts/docs.sh) fails on any warning: a copy of
the site's sources with one warning put in must not build. (The real sources build clean in the
test command's last step.)"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MKDOCS = Path(sys.executable).with_name("mkdocs")

pytestmark = pytest.mark.skipif(
    not MKDOCS.exists(), reason="mkdocs is not installed here (pip install -r docs/requirements.txt)")


def _copy(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for name in ("mkdocs.yml", "CHANGELOG.md"):
        shutil.copy(ROOT / name, src / name)
    # examples: docs/rust.md includes the Rust example's source.
    for name in ("docs", "python", "scripts", "examples"):
        shutil.copytree(ROOT / name, src / name,
                        ignore=shutil.ignore_patterns("*.so", "__pycache__", "target"))
    return src


def _build(src, tmp_path):
    env = dict(os.environ, MKDOCS=str(MKDOCS))
    return subprocess.run(["bash", "scripts/docs.sh", str(tmp_path / "site")], cwd=src, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("inject", ["broken link", "docstring parameter"])
def test_a_warning_fails_the_docs_check(tmp_path, inject):
    src = _copy(tmp_path)
    if inject == "broken link":
        page = src / "docs" / "concepts.md"
        page.write_text(page.read_text() + "\nSee [the missing page](no-such-page.md).\n")
        expect = "no-such-page.md"
    else:  # a documented parameter the signature lacks: what griffe warned of in GDSStore
        mod = src / "python" / "gpufile" / "observe.py"
        text = mod.read_text()
        marker = "    size : int\n        Bytes to read.\n"
        assert marker in text
        mod.write_text(text.replace(marker, marker + "    bogus : int\n        Not a parameter.\n"))
        expect = "'bogus' does not appear in the function signature"
    r = _build(src, tmp_path)
    out = r.stdout + r.stderr
    assert r.returncode != 0, out
    assert expect in out and "Aborted with 1 warnings in strict mode" in out, out
