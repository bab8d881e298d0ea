"""Every command of the README and the getting-started page runs as written.

The fenced ``sh`` and ``python`` blocks of each page are taken from the page itself. A page's
Python blocks run in order in one interpreter, in an empty folder, as a reader pasting them into
one session would (a block that imports CuPy runs on its own, where CuPy sees a GPU); its shell
commands then run one by one in that folder. ``.venv/bin/`` (the demo's virtualenv) is this
interpreter's folder, which holds the build under test. The commands listed in ``NOT_RUN`` are
not run here, each for the reason given; one the pages no longer hold fails the test, so the
list stays true. ``text`` blocks (the CLI synopsis, help texts) are not commands.

The README's "C and C++" section runs in a test of its own: its install commands from the
repository root, then its C and C++ programs built against that install, as a reader would.
"""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import gpu_reason

ROOT = Path(__file__).resolve().parent.parent
PAGES = ["README.md", "docs/getting-started.md"]
BIN = str(Path(sys.executable).parent)

NOT_RUN = {
    "bash scripts/demo.sh": "the demo: a release build of the extension and a 1 GiB file to read "
                            "(minutes); the README's first command, run as such",
    "bash scripts/test.sh": "the test command, which runs this test",
    "pip install gpufile-0.1.0-cp311-abi3-manylinux_2_28_x86_64.whl":
        "needs the wheel that bash scripts/build_wheels.sh builds",
    "pip install maturin": "installs from PyPI into the reader's own virtualenv",
    "maturin develop --release": "a release build into the reader's own virtualenv (the test "
                                 "command makes the same build, as a debug build)",
}

_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
CPP_SECTION = "C and C++"


def _split(page, title):
    """(the page without its `## title` section, that section's text)."""
    text = (ROOT / page).read_text()
    m = re.search(rf"^## {re.escape(title)}\n.*?(?=^## |\Z)", text, re.S | re.M)
    if m is None:
        return text, ""
    return text[:m.start()] + text[m.end():], m.group(0)


def blocks(page, section=None):
    """(language, text) of every fenced block of `page`, in order: of its `## section` alone
    where one is named, else of the page without the README's C and C++ section (which needs a
    build of its own: test_the_c_and_cpp_section_installs_builds_and_runs)."""
    rest, part = _split(page, section or CPP_SECTION)
    return [(m.group(1), m.group(2)) for m in _FENCE.finditer(part if section else rest)]


def _commands(text):
    """The commands of an sh block: one a line, comments dropped."""
    lines = (re.sub(r"(^|\s+)#.*$", "", line).strip() for line in text.splitlines())
    return [line for line in lines if line]


def shell_commands(page):
    """The commands of the page's sh blocks: one a line, comments dropped."""
    return [c for lang, text in blocks(page) if lang in ("sh", "bash", "console")
            for c in _commands(text)]


def _env():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KVIKIO_", "GPUFILE_"))}
    return env


def _in_this_venv(command):
    """The page's `.venv/bin/` programs as this interpreter's: its `gpufile` entry point where it
    has one, else `python -m gpufile` (a wheel installed with pip's `--target` has no script
    beside the interpreter)."""
    def program(m):
        name = m.group(1)
        if name == "gpufile" and not os.path.exists(os.path.join(BIN, "gpufile")):
            return f"{sys.executable} -m gpufile"
        return os.path.join(BIN, name)
    return re.sub(r"\.venv/bin/([\w.-]+)", program, command)


@pytest.mark.parametrize("page", PAGES)
def test_every_command_of_the_page_runs_as_written(page, tmp_path):
    python = [text for lang, text in blocks(page) if lang == "python"]
    gpu = [text for text in python if "import cupy" in text]
    host = [text for text in python if text not in gpu]
    assert host or gpu, f"{page}: no Python block found (is the fence still ```python?)"
    r = subprocess.run([sys.executable, "-c", "\n".join(host)], cwd=tmp_path, env=_env(),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"{page}: its Python blocks fail:\n{r.stderr}"
    for text in gpu:
        if gpu_reason() is None:
            r = subprocess.run([sys.executable, "-c", text], cwd=tmp_path, env=_env(),
                               capture_output=True, text=True, timeout=120)
            assert r.returncode == 0, f"{page}: its CuPy block fails:\n{r.stderr}"
    for command in shell_commands(page):
        if command in NOT_RUN:
            continue
        r = subprocess.run(["bash", "-c", _in_this_venv(command)],
                           cwd=tmp_path, env=_env(), capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, f"{page}: `{command}` fails ({r.returncode}):\n{r.stderr}"
        assert "warning" not in r.stderr, f"{page}: `{command}` warns:\n{r.stderr}"
    if gpu and gpu_reason() is not None:
        pytest.skip(f"{page}: its CuPy example does not run here ({gpu_reason()}); the rest ran")


def test_the_getting_started_blocks_paste_into_the_interactive_interpreter(tmp_path):
    """docs/getting-started.md's Python blocks, pasted one after another into one interactive
    session (`python -i`, which reads stdin line by line as the REPL does, each block followed
    by the Enter that runs it), raise nothing: an indented block must end with an empty line
    before the next statement, and hold none of its own."""
    python = [text for lang, text in blocks("docs/getting-started.md") if lang == "python"]
    assert python, "no Python block found (is the fence still ```python?)"
    r = subprocess.run([sys.executable, "-q", "-i"], input="".join(t + "\n" for t in python),
                       cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=120)
    errors = [line for line in r.stderr.splitlines()
              if "Traceback" in line or re.match(r"\w+(Error|Exception|Warning)\b", line)]
    assert r.returncode == 0 and not errors, r.stderr
    assert "('gpufile-posix'" in r.stdout, r.stdout  # print(f.io_path) ran: the second block


def test_the_commands_not_run_are_still_on_the_pages():
    on_pages = {c for page in PAGES for c in shell_commands(page)}
    assert set(NOT_RUN) <= on_pages, set(NOT_RUN) - on_pages


def _run(command, cwd, env, timeout):
    r = subprocess.run(["bash", "-euo", "pipefail", "-c", command], cwd=cwd, env=env,
                       capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"`{command}` fails ({r.returncode}):\n{r.stdout}\n{r.stderr}"
    return r


def test_the_c_and_cpp_section_installs_builds_and_runs(tmp_path):
    """The README's C and C++ section as a reader runs it: the install commands from the
    repository root into `$HOME/.local/gpufile` (HOME is a temporary folder here; the build
    folder too), then in a folder of the reader's own the C++ program built with the section's
    CMakeLists.txt (`find_package(gpufile)`) and the C program with `pkg-config`'s flags, each
    run. The library is the debug build the test command's cargo made (the build folder's
    `GPUFILE_CARGO_PROFILE` is `dev`: a release build takes minutes, for the same code)."""
    missing = [t for t in ("cmake", "c++", "cc", "pkg-config", "cargo") if shutil.which(t) is None]
    if missing:
        pytest.skip(f"the C and C++ section needs {', '.join(missing)} (Debian: cmake g++ "
                    "pkg-config; cargo from rustup)")
    found = blocks("README.md", CPP_SECTION)
    sh = [text for lang, text in found if lang == "sh"]
    code = {lang: text for lang, text in found if lang in ("cpp", "c", "cmake")}
    assert len(sh) == 2 and set(code) == {"cpp", "c", "cmake"}, [lang for lang, _ in found]
    env = _env()
    # cargo and rustup find their homes from HOME unless told.
    env["CARGO_HOME"] = env.get("CARGO_HOME", str(Path.home() / ".cargo"))
    env["RUSTUP_HOME"] = env.get("RUSTUP_HOME", str(Path.home() / ".rustup"))
    env["HOME"] = str(tmp_path / "home")
    (tmp_path / "home").mkdir()
    build = tmp_path / "gpufile-build"
    _run(f"cmake -S . -B {build} -DGPUFILE_CARGO_PROFILE=dev", ROOT, env, 300)
    install = re.sub(r"(-B|--build|--install) build\b", rf"\1 {build}", sh[0])
    assert str(build) in install, install
    for command in _commands(install):
        _run(command, ROOT, env, 900)
    app = tmp_path / "app"
    app.mkdir()
    for lang, name in (("cpp", "app.cpp"), ("c", "app.c"), ("cmake", "CMakeLists.txt")):
        (app / name).write_text(code[lang])
    out = _run(sh[1], app, env, 300).stdout  # one script: its `export` holds for what follows
    assert out.count("read 1048576 bytes, the same bytes\n") == 2, out
    assert "open missing.bin: No such file or directory\n" in out, out
    assert (app / "data.bin").read_bytes() == b"g" * (1 << 20)


def test_the_demo_refuses_a_mistyped_file_before_it_builds(tmp_path):
    venv = tmp_path / "venv"
    env = {**os.environ, "GPUFILE_VENV": str(venv)}
    r = subprocess.run(["bash", str(ROOT / "scripts/demo.sh"), str(tmp_path / "typo.bni")],
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stderr == (f"demo: {tmp_path / 'typo.bni'} does not exist (give an existing file, "
                        "or no FILE for the demo's own)\n")
    assert r.stdout == "" and not venv.exists()  # nothing installed, nothing built


def test_the_demos_python_part_prints_a_warm_median_first(tmp_path):
    """The first figure the demo's Python part prints is a warm one, said to be: the median of
    repeated reads after an untimed first read into the fresh buffer (which faults its pages
    in: 0.29 GB/s on a machine that reads a warm file at several GB/s)."""
    script = (ROOT / "scripts/demo.sh").read_text()
    m = re.search(r"<<'PY'\n(.*?)^PY$", script, re.S | re.M)
    assert m, "the demo's Python part (a <<'PY' heredoc) is gone"
    data = tmp_path / "data.bin"
    data.write_bytes(os.urandom(1 << 20))
    r = subprocess.run([sys.executable, "-", str(data)], input=m.group(1), env=_env(),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    first = r.stdout.splitlines()[0]
    assert re.fullmatch(r"warm read: 1048576 bytes into (host|GPU) memory in [0-9.]+ s = "
                        r"[0-9.]+ GB/s \(median of 3 reads after an untimed first one, which "
                        r"also maps the fresh buffer in\)", first), r.stdout
