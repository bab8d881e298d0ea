"""Every read and write goes to the file that was opened (issue 24, item 1), on the CPU.

A handle's O_DIRECT descriptor and a file object given to ``gpufile.numpy`` used to be opened
again by path: after a rename over the path (the atomic-replace pattern) or a ``chdir`` under a
relative path, aligned writes landed in the file that now has the name and aligned reads returned
its bytes. The GPU halves (bounce chunks, cuFile registration) are in test_reliability_gpu.py.
"""

import mmap
import os
import tempfile

import numpy as np
import pytest

import gpufile
import gpufile.numpy as gnp
from conftest import pattern

MIB = 1 << 20


def _takes_o_direct(folder) -> bool:
    probe = os.path.join(folder, ".o-direct-probe")
    with open(probe, "wb") as f:
        f.write(b"\0" * 4096)
    try:
        os.close(os.open(probe, os.O_RDONLY | os.O_DIRECT))
        return True
    except OSError:
        return False
    finally:
        os.unlink(probe)


@pytest.fixture
def direct_dir(tmp_path):
    """A folder on a file system that takes O_DIRECT: tmp_path, else one under the tests folder
    (tmpfs refuses O_DIRECT, and these bugs only show on the direct descriptor)."""
    if _takes_o_direct(tmp_path):
        yield tmp_path
        return
    here = os.path.dirname(os.path.abspath(__file__))
    with tempfile.TemporaryDirectory(dir=here, prefix=".direct-") as d:
        if not _takes_o_direct(d):
            pytest.skip("neither the temporary folder nor the tests folder takes O_DIRECT")
        yield d


def aligned(data: np.ndarray) -> mmap.mmap:
    """`data` in page-aligned memory (an anonymous mapping), as O_DIRECT needs."""
    m = mmap.mmap(-1, len(data))
    m[:] = data.tobytes()
    return m


def two_files(folder, n=4 * MIB):
    """`f.bin` (seed 1) and `other.bin` (seed 2) in `folder`, with their bytes."""
    old, new = pattern(n, 1), pattern(n, 2)
    p, other = os.path.join(folder, "f.bin"), os.path.join(folder, "other.bin")
    old.tofile(p)
    new.tofile(other)
    return p, other, old, new


def opened_bytes(f) -> bytes:
    """The bytes of the file a handle has open (not of what its path names)."""
    with open(f"/proc/self/fd/{f.fileno()}", "rb") as g:
        return g.read()


@pytest.mark.parametrize("direct", [True, False])
def test_a_write_after_a_rename_over_the_path_lands_in_the_opened_file(direct_dir, direct):
    p, other, old, new = two_files(direct_dir)
    data = pattern(MIB, 3)
    with gpufile.defaults.set({"auto_direct_io_write": direct}), gpufile.CuFile(p, "r+") as f:
        os.rename(other, p)
        assert f.write(aligned(data), file_offset=MIB) == MIB
        got = opened_bytes(f)
    assert got == old[:MIB].tobytes() + data.tobytes() + old[2 * MIB:].tobytes()
    assert np.fromfile(p, np.uint8).tobytes() == new.tobytes(), "the file now at the path changed"


@pytest.mark.parametrize("direct", [True, False])
def test_a_read_after_a_rename_over_the_path_reads_the_opened_file(direct_dir, direct):
    p, other, old, _ = two_files(direct_dir)
    buf = aligned(np.zeros(4 * MIB, np.uint8))
    with gpufile.defaults.set({"auto_direct_io_read": direct}), gpufile.CuFile(p, "r") as f:
        os.rename(other, p)
        assert f.read(buf) == 4 * MIB
    assert bytes(buf) == old.tobytes()


def test_a_relative_path_after_a_chdir_reads_and_writes_the_opened_file(direct_dir, monkeypatch):
    a, b = os.path.join(direct_dir, "a"), os.path.join(direct_dir, "b")
    os.mkdir(a)
    os.mkdir(b)
    old, new = pattern(2 * MIB, 4), pattern(2 * MIB, 5)
    old.tofile(os.path.join(a, "f.bin"))
    new.tofile(os.path.join(b, "f.bin"))
    monkeypatch.chdir(a)
    data = pattern(MIB, 6)
    buf = aligned(np.zeros(MIB, np.uint8))
    settings = {"auto_direct_io_read": True, "auto_direct_io_write": True}
    with gpufile.defaults.set(settings), gpufile.CuFile("f.bin", "r+") as f:
        os.chdir(b)
        assert f.read(buf, file_offset=MIB) == MIB
        assert f.write(aligned(data)) == MIB
    assert bytes(buf) == old[MIB:].tobytes()
    assert np.fromfile(os.path.join(a, "f.bin"), np.uint8).tobytes() == data.tobytes() + bytes(buf)
    assert np.fromfile(os.path.join(b, "f.bin"), np.uint8).tobytes() == new.tobytes()


def test_is_direct_io_supported_answers_for_the_opened_file(direct_dir, tmp_path):
    p = os.path.join(direct_dir, "f.bin")
    pattern(4096).tofile(p)
    with gpufile.CuFile(p) as f:
        os.unlink(p)
        assert f.is_direct_io_supported()


def test_numpy_tofile_to_a_file_object_after_a_rename_writes_the_opened_file(direct_dir):
    p, other, old, new = two_files(direct_dir)
    data = pattern(2 * MIB, 7)
    with open(p, "r+b") as obj:
        obj.seek(MIB)
        os.rename(other, p)
        gnp.tofile(data, obj)
        assert obj.tell() == 3 * MIB
        obj.seek(0)
        got = obj.read()
    assert got == old[:MIB].tobytes() + data.tobytes() + old[3 * MIB:].tobytes()
    assert np.fromfile(p, np.uint8).tobytes() == new.tobytes()


def test_numpy_fromfile_of_a_file_object_after_a_rename_reads_the_opened_file(direct_dir):
    p, other, old, _ = two_files(direct_dir)
    os.truncate(other, MIB)  # the size comes from the opened file too
    with open(p, "rb") as obj:
        obj.seek(4096)
        os.rename(other, p)
        got = gnp.fromfile(obj, np.uint8)
        assert obj.tell() == 4 * MIB
    assert got.tobytes() == old[4096:].tobytes()


def test_numpy_tofile_to_an_appending_or_write_only_file_object(direct_dir):
    p, other, old, _ = two_files(direct_dir, MIB)
    data = pattern(3 * MIB, 8)
    with open(p, "ab") as obj:
        os.rename(other, p)
        with gpufile.defaults.set("task_size", MIB // 4):  # many tasks, each at its offset
            gnp.tofile(data, obj)
        assert obj.tell() == 4 * MIB
        with open(f"/proc/self/fd/{obj.fileno()}", "rb") as g:
            assert g.read() == old.tobytes() + data.tobytes()
    w = os.path.join(direct_dir, "w.bin")
    with open(w, "wb") as obj:
        os.unlink(w)
        gnp.tofile(data, obj)
        with open(f"/proc/self/fd/{obj.fileno()}", "rb") as g:
            assert g.read() == data.tobytes()


def test_numpy_with_a_file_object_of_a_closed_descriptor_is_an_os_error(tmp_path):
    p = tmp_path / "f.bin"
    pattern(4096).tofile(p)
    obj = open(p, "rb")
    os.close(obj.fileno())
    try:
        with pytest.raises(OSError):
            gnp.fromfile(obj, np.uint8)
    finally:
        try:
            obj.close()
        except OSError:
            pass


def test_safe_open_refuses_data_of_a_file_renamed_over_its_path(tmp_path):
    """safe_open reads the header at open and the data at the first get_tensor, by path: after
    a rename over the path the bytes of another file were returned under the first header."""
    stn = pytest.importorskip("safetensors.numpy")
    import gpufile.safetensors as gs
    p, other = tmp_path / "m.safetensors", tmp_path / "other.safetensors"
    stn.save_file({"a": np.arange(1024, dtype=np.float32)}, p)
    stn.save_file({"a": np.full(1024, 7, dtype=np.float32), "b": np.zeros(3, np.uint8)}, other)
    with gs.safe_open(p, framework="np") as f:
        os.rename(other, p)
        with pytest.raises(gs.SafetensorError, match="replaced since its header was read"):
            f.get_tensor("a")
    with gs.safe_open(p, framework="np") as f:  # opened again: the new file, consistent
        assert (f.get_tensor("a") == 7).all()
