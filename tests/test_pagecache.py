"""KvikIO's page-cache helpers and is_compat_mode_preferred."""

import os

import numpy as np
import pytest

import gpufile
from gpufile import defaults


@pytest.fixture
def cached_file(tmp_path):
    path = tmp_path / "pc.bin"
    np.arange(1 << 18, dtype=np.uint32).tofile(path)  # 1 MiB
    path.read_bytes()
    return path


def test_info_drop_and_refill(cached_file):
    page = os.sysconf("SC_PAGE_SIZE")
    cached, total = gpufile.get_page_cache_info(cached_file)
    assert total == (1 << 20) // page and cached == total
    gpufile.drop_file_page_cache(cached_file)
    after, total2 = gpufile.get_page_cache_info(cached_file)
    assert total2 == total and after < total
    buf = np.empty(1 << 18, dtype=np.uint32)
    with gpufile.CuFile(cached_file) as f:
        f.read(buf)
    assert gpufile.get_page_cache_info(cached_file) == (total, total)
    np.testing.assert_array_equal(buf, np.arange(1 << 18, dtype=np.uint32))


def test_ranges_descriptors_and_file_objects(cached_file):
    page = os.sysconf("SC_PAGE_SIZE")
    assert gpufile.get_page_cache_info(cached_file, offset=10 << 20) == (0, 0)
    assert gpufile.get_page_cache_info(cached_file, offset=1, length=page)[1] == 2
    assert gpufile.get_page_cache_info(os.fsencode(cached_file))[1] == (1 << 20) // page
    with open(cached_file, "rb") as f:
        assert gpufile.get_page_cache_info(f)[1] == (1 << 20) // page
        gpufile.drop_file_page_cache(f.fileno(), offset=0, length=page, sync_first=False)


def test_bad_arguments(cached_file, tmp_path):
    with pytest.raises(FileNotFoundError):
        gpufile.get_page_cache_info(tmp_path / "missing")
    with pytest.raises(TypeError):
        gpufile.get_page_cache_info(3.5)
    with pytest.raises(ValueError):
        gpufile.drop_file_page_cache(cached_file, offset=-1)
    with pytest.raises(OSError):
        gpufile.get_page_cache_info(987654)  # not an open descriptor


def test_drop_system_page_cache_says_whether_it_worked():
    assert isinstance(gpufile.drop_system_page_cache(sync_first=False), bool)


def test_is_compat_mode_preferred():
    with defaults.set("compat_mode", "on"):
        assert defaults.is_compat_mode_preferred() is True
    with defaults.set("compat_mode", "off"):
        assert defaults.is_compat_mode_preferred() is False
    assert isinstance(defaults.is_compat_mode_preferred(), bool)


def test_kvikio_error_types_for_bad_files(tmp_path):
    """KvikIO raises RuntimeError("Unable to open file") and ValueError for a non-path; gpufile's
    errors are those and the precise builtin types too."""
    import pytest
    with pytest.raises(RuntimeError, match="Unable to open file") as e:
        gpufile.get_page_cache_info(tmp_path / "missing")
    assert isinstance(e.value, FileNotFoundError) and e.value.errno == 2
    for bad in (123.456, ["in a list"]):
        with pytest.raises(ValueError):
            gpufile.get_page_cache_info(bad)
        with pytest.raises(TypeError):
            gpufile.get_page_cache_info(bad)


@pytest.mark.parametrize("call", ["get_page_cache_info('fifo')",
                                  "drop_file_page_cache('fifo')",
                                  "drop_file_page_cache('fifo', sync_first=False)"])
def test_a_fifo_is_refused_at_once_not_waited_on(tmp_path, call):
    """Page-cache helpers open a path as every other entry does: a FIFO is refused at once
    (before, ``open(2)`` waited for a writer, deaf to Ctrl-C)."""
    import errno
    import subprocess
    import sys
    os.mkfifo(tmp_path / "fifo")
    code = f"""
import gpufile
try:
    gpufile.{call}
except OSError as e:
    print(type(e).__name__, isinstance(e, RuntimeError), e.errno, e.filename)
    print(e)
"""
    try:
        r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                           text=True, timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail(f"still blocked after 30 s: {call}")
    assert r.returncode == 0, r.stderr
    kind, runtime, code_, filename = r.stdout.splitlines()[0].split()
    assert (int(code_), filename, runtime) == (errno.ESPIPE, "fifo", "True"), r.stdout
    assert "Unable to open file: is a FIFO" in r.stdout


def test_a_drop_at_a_huge_offset_names_the_argument(cached_file):
    for kw in ({"offset": 1 << 63}, {"offset": (1 << 64) - 1}, {"length": 1 << 63}):
        with pytest.raises(ValueError, match=f"{next(iter(kw))} {next(iter(kw.values()))} "
                                             "is past the largest file offset"):
            gpufile.drop_file_page_cache(cached_file, **kw)
    # The largest offset a file can have is taken (nothing there to drop).
    gpufile.drop_file_page_cache(cached_file, offset=(1 << 63) - 1)
