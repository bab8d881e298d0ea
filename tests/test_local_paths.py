"""Local paths (issue 24, items 7 and 8): a FIFO is refused at open instead of blocking there;
a checkpoint's symlinked shards may not lead out of its directory (a Hugging Face snapshot's
links into its blobs folder excepted); bytes paths are taken as Python's ``open`` takes them.
"""

import errno
import json
import os
import struct
import subprocess
import sys

import numpy as np
import pytest

import gpufile
from gpufile.safetensors import SafetensorError, load_checkpoint, load_file


def _run(code: str, cwd, timeout=30):
    """Runs `code` in a child; a child that blocks fails the test instead of hanging it."""
    try:
        return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"still blocked after {timeout} s: {code}")


# ---- item 7: a FIFO is refused, not waited on -------------------------------------------------

FIFO_CALLS = {
    "CuFile": "gpufile.CuFile('fifo')",
    "CuFile-w": "gpufile.CuFile('fifo', 'w')",
    "CuFile-r+": "gpufile.CuFile('fifo', 'r+')",
    "Mmap": "gpufile.Mmap('fifo')",
    "load_file": "gpufile.safetensors.load_file('fifo', framework='numpy')",
    "load_checkpoint-index": "gpufile.safetensors.load_checkpoint('fifo.safetensors.index.json',"
                             " framework='numpy')",
}


@pytest.mark.parametrize("call", sorted(FIFO_CALLS))
def test_a_fifo_is_refused_promptly_not_waited_on(tmp_path, call):
    os.mkfifo(tmp_path / "fifo")
    os.mkfifo(tmp_path / "fifo.safetensors.index.json")
    code = f"""
import gpufile, gpufile.safetensors
try:
    {FIFO_CALLS[call]}
except OSError as e:
    print(type(e).__name__, isinstance(e, RuntimeError), e.errno, e.filename)
    print(e)
"""
    r = _run(code, tmp_path)
    assert r.returncode == 0, r.stderr
    kind, runtime, code_, filename = r.stdout.splitlines()[0].split()
    assert int(code_) == errno.ESPIPE and filename.startswith("fifo"), r.stdout
    assert "is a FIFO" in r.stdout
    # Every OS error gpufile raises is also KvikIO's RuntimeError, a checkpoint load's too (one
    # error table: docs/errors.md).
    assert runtime == "True", r.stdout


def test_the_cli_refuses_a_fifo_promptly(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    for args in (["read", "fifo"], ["read", "fifo", "--json"], ["check", "fifo"],
                 ["explain", "fifo"], ["load", "fifo", "--host", "--json"]):
        try:
            r = subprocess.run([sys.executable, "-m", "gpufile", *args], cwd=tmp_path,
                               capture_output=True, text=True, timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail(f"gpufile {' '.join(args)} still blocked after 30 s")
        assert r.returncode == 1, (args, r.stdout, r.stderr)
        assert "fifo is a FIFO" in r.stderr, r.stderr
        if "--json" in args:
            err = json.loads(r.stdout)["error"]
            assert (err["type"], err["errno"], err["path"]) == \
                ("not-a-regular-file", errno.ESPIPE, "fifo")


def test_devices_still_open(tmp_path):
    # A character device reads and writes by offset as before; O_NONBLOCK is not left set.
    with gpufile.CuFile("/dev/null", "r+") as f:
        assert f.write(np.zeros(3, np.uint8)) == 3
        assert not f.open_flags() & os.O_NONBLOCK
    with gpufile.CuFile(tmp_path / "r.bin", "w") as f:
        assert not f.open_flags() & os.O_NONBLOCK


# ---- item 8: a checkpoint's symlinks stay inside it -----------------------------------------

def _safetensors(tensors: dict) -> bytes:
    """A safetensors file of uint8 tensors."""
    header, data = {}, b""
    for name, payload in tensors.items():
        header[name] = {"dtype": "U8", "shape": [len(payload)],
                        "data_offsets": [len(data), len(data) + len(payload)]}
        data += payload
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def test_a_shard_linked_out_of_the_checkpoint_is_refused(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "secret.safetensors"
    secret.write_bytes(_safetensors({"s": b"secret"}))
    passwd = outside / "passwd"
    passwd.write_bytes(b"root:x:0:0:root:/root:/bin/bash\n")
    ck = tmp_path / "ck"
    ck.mkdir()
    (ck / "a.safetensors").write_bytes(_safetensors({"a": b"ab"}))
    (ck / "b.safetensors").symlink_to(passwd)
    with pytest.raises(SafetensorError, match="outside the checkpoint's directory") as e:
        load_checkpoint(ck, framework="numpy")
    # The error names the link and where it leads; no byte of the target is read.
    assert "b.safetensors resolves to" in str(e.value) and "header" not in str(e.value)
    (ck / "b.safetensors").unlink()
    (ck / "sub").symlink_to(outside, target_is_directory=True)
    (ck / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"a": "a.safetensors", "s": "sub/secret.safetensors"}}))
    for path in (ck, ck / "model.safetensors.index.json"):
        with pytest.raises(SafetensorError, match="sub/secret.safetensors resolves to"):
            load_checkpoint(path, framework="numpy")
    # Links inside the directory are followed; a file named by the caller is read as named.
    (ck / "sub").unlink()
    (ck / "inner").mkdir()
    (ck / "inner" / "s.safetensors").write_bytes(_safetensors({"s": b"inside"}))
    (ck / "sub").symlink_to("inner", target_is_directory=True)
    (ck / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"a": "a.safetensors", "s": "sub/s.safetensors"}}))
    got = load_checkpoint(ck, framework="numpy")
    assert bytes(got["s"]) == b"inside" and bytes(got["a"]) == b"ab"
    assert bytes(load_file(secret, framework="numpy")["s"]) == b"secret"


def test_a_hugging_face_snapshot_loads_through_its_blob_links(tmp_path):
    repo = tmp_path / "hub" / "models--org--tiny"
    blobs = repo / "blobs"
    snap = repo / "snapshots" / "5f2c0e1"
    blobs.mkdir(parents=True)
    snap.mkdir(parents=True)
    (blobs / "1a").write_bytes(_safetensors({"x": b"xxxx"}))
    (blobs / "2b").write_bytes(_safetensors({"y": b"yy"}))
    (blobs / "3c").write_text(json.dumps({"weight_map": {
        "x": "model-00001-of-00002.safetensors", "y": "model-00002-of-00002.safetensors"}}))
    (snap / "model-00001-of-00002.safetensors").symlink_to("../../blobs/1a")
    (snap / "model-00002-of-00002.safetensors").symlink_to("../../blobs/2b")
    (snap / "model.safetensors.index.json").symlink_to("../../blobs/3c")
    for path in (snap, snap / "model.safetensors.index.json"):
        got = load_checkpoint(path, framework="numpy")
        assert (bytes(got["x"]), bytes(got["y"])) == (b"xxxx", b"yy")
    got = load_file(snap / "model-00002-of-00002.safetensors", framework="numpy")
    assert bytes(got["y"]) == b"yy"


# ---- item 8: bytes paths --------------------------------------------------------------------

class _BytesPathLike:
    def __init__(self, path: bytes) -> None:
        self.path = path

    def __fspath__(self) -> bytes:
        return self.path


def test_bytes_paths_are_taken_as_open_takes_them(tmp_path):
    data = np.arange(64, dtype=np.uint8)
    # A name that is not UTF-8: only bytes (or surrogate escapes) can name it.
    raw = os.fsencode(tmp_path) + b"/d\xff.bin"
    for path in (raw, _BytesPathLike(raw)):
        with gpufile.CuFile(path, "w") as f:
            assert f.write(data) == 64
        with open(path, "rb") as f:
            assert f.read() == data.tobytes()
        out = np.zeros(64, np.uint8)
        with gpufile.CuFile(path) as f:
            assert f.read(out) == 64 and os.fsencode(f._file.path) == raw
        assert (out == data).all()
        out[:] = 0
        m = gpufile.Mmap(path)
        assert m.read(out) == 64 and (out == data).all()
        m.close()
        out[:] = 0
        assert gpufile.read_batch([(path, out, 64, 0)]).get() == 64 and (out == data).all()
    st = os.fsencode(tmp_path) + b"/m\xfe.safetensors"
    with open(st, "wb") as f:
        f.write(_safetensors({"w": b"bytes"}))
    assert bytes(load_file(st, framework="numpy")["w"]) == b"bytes"
    assert bytes(load_checkpoint(_BytesPathLike(st), framework="numpy")["w"]) == b"bytes"
    # A bytes path that names nothing is the same FileNotFoundError as a str one.
    with pytest.raises(FileNotFoundError) as e:
        gpufile.CuFile(raw + b".missing")
    assert e.value.errno == errno.ENOENT
    # What open refuses, gpufile refuses alike.
    for bad in (3, None, 1.5):
        with pytest.raises(TypeError, match="expected str, bytes or os.PathLike"):
            gpufile.CuFile(bad)
        with pytest.raises(TypeError, match="expected str, bytes or os.PathLike"):
            gpufile.Mmap(bad)
