"""gpufile.safetensors against the `safetensors` package: same bytes, same names, clear errors.

Files are written with safetensors' NumPy API (never torch here). The GPU tests at the end (torch
and CuPy on cuda:0, device_map over two GPUs) skip with the reason where there is no GPU.
"""

import json
import re
import struct
import subprocess
import sys

import numpy as np
import pytest
import safetensors.numpy as stn

import gpufile
import gpufile.safetensors as gs
from gpufile.safetensors import SafetensorError
from conftest import gpu_reason

ml_dtypes = pytest.importorskip("ml_dtypes")

NUMPY_TYPES = ["float64", "float32", "float16", "int64", "uint64", "int32", "uint32", "int16",
               "uint16", "int8", "uint8", "bool", "complex64"]
ML_TYPES = ["bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu", "float8_e4m3fnuz",
            "float8_e5m2fnuz"]


def _array(dtype, shape, seed):
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape))
    if dtype == "bool":
        return rng.integers(0, 2, n).astype(bool).reshape(shape)
    if dtype == "complex64":
        return (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(np.complex64) \
            .reshape(shape)
    if dtype in ML_TYPES:
        return rng.standard_normal(n).astype(getattr(ml_dtypes, dtype)).reshape(shape)
    return rng.integers(0, 100, n).astype(dtype).reshape(shape)


@pytest.fixture
def model(tmp_path):
    """A file of every NumPy-expressible dtype, odd shapes and sizes, a scalar and an empty one."""
    tensors = {f"t.{d}": _array(d, (3, 5, 7), i) for i, d in enumerate(NUMPY_TYPES + ML_TYPES)}
    tensors["scalar"] = np.array(3.5, dtype=np.float32)
    tensors["empty"] = np.zeros((0, 4), dtype=np.float16)
    tensors["odd"] = np.arange(3, dtype=np.uint8)
    path = tmp_path / "model.safetensors"
    stn.save_file(tensors, path, metadata={"format": "np", "note": "x"})
    return path, tensors


def _craft(path, header, data=b"", raw=None):
    """A file with the given header (a dict, or raw bytes) and data area."""
    h = raw if raw is not None else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(h)) + h + data)
    return path


def test_every_dtype_is_byte_identical_to_safetensors(model):
    path, tensors = model
    ours = gs.load_file(path, framework="numpy")
    assert list(ours) == gs.safe_open(path, "numpy").offset_keys()
    for name, arr in tensors.items():
        got = ours[name]
        assert got.dtype == arr.dtype and got.shape == arr.shape, name
        assert got.tobytes() == arr.tobytes(), name
    # safetensors.numpy cannot load the FP8 types (it looks for numpy.float8_*); compare it on
    # everything else, bfloat16 included (ml_dtypes registers it with NumPy).
    with pytest.raises(AttributeError):
        stn.load_file(path)
    only = [n for n in tensors if not n.startswith("t.float8")]
    small = path.parent / "small.safetensors"
    stn.save_file({n: tensors[n] for n in only}, small)
    ref = stn.load_file(small)
    ours = gs.load_file(small, framework="numpy")
    assert set(ours) == set(ref)
    for name in ref:
        assert ours[name].dtype == ref[name].dtype, name
        assert ours[name].shape == ref[name].shape, name
        assert ours[name].tobytes() == ref[name].tobytes(), name


def test_views_into_one_buffer_or_own_memory(model):
    path, tensors = model
    views = gs.load_file(path, framework="numpy")
    a, b = views["t.float32"], views["t.int8"]
    assert a.base is not None and np.shares_memory(a.base, b.base)
    own = gs.load_file(path, framework="numpy", own_memory=True)
    assert not np.shares_memory(own["t.float32"], own["t.int8"])
    for name, arr in tensors.items():
        assert own[name].tobytes() == arr.tobytes()
        assert views[name].ctypes.data % max(1, arr.dtype.alignment) == 0


def test_safe_open_keys_metadata_and_get_tensor(model):
    path, tensors = model
    with gs.safe_open(path, framework="np", device="cpu") as f:
        assert f.keys() == sorted(tensors)
        assert f.metadata() == {"format": "np", "note": "x"}
        t = f.get_tensor("t.int32")
        np.testing.assert_array_equal(t, tensors["t.int32"])
        assert f.get_tensor("scalar").shape == ()
        assert f.get_tensor("empty").shape == (0, 4)
        # safetensors' error and message, also the KeyError of a lookup
        with pytest.raises(gs.SafetensorError, match="^File does not contain tensor nope$") as e:
            f.get_tensor("nope")
        assert isinstance(e.value, KeyError)
    with stn.safe_open(path, "np") as ref:
        assert ref.keys() == gs.safe_open(path, "numpy").keys()
        assert ref.metadata() == gs.safe_open(path, "numpy").metadata()
    unnamed = path.parent / "nometa.safetensors"
    stn.save_file({"x": np.zeros(2)}, unnamed)
    assert gs.safe_open(unnamed, "numpy").metadata() is None


# (index, whether safetensors' get_slice takes it: plain in-range slices and indices)
SLICES = [
    (np.s_[1:3], True), (np.s_[:, 2:4], True), (np.s_[1], True), (np.s_[-1, 1:], True),
    (np.s_[1, 2, 3], True), (np.s_[:, :, 6], True), (np.s_[2:2], True),
    (np.s_[0:3:2, ::3], False), (np.s_[...], False), (np.s_[::-1], False),
    (np.s_[-2:], False), (np.s_[:, -3:-1], False),  # safetensors: OverflowError
]


@pytest.mark.parametrize("key,reference", SLICES, ids=[repr(k) for k, _ in SLICES])
def test_get_slice_matches_safetensors_and_numpy(model, key, reference):
    path, tensors = model
    arr = tensors["t.float32"]
    with gs.safe_open(path, "numpy") as f:
        sl = f.get_slice("t.float32")
        assert sl.get_shape() == [3, 5, 7] and sl.get_dtype() == "F32"
        got = sl[key]
    want = arr[key]
    assert got.shape == want.shape and got.tobytes() == np.ascontiguousarray(want).tobytes()
    if reference:
        with stn.safe_open(path, "np") as ref:
            assert ref.get_slice("t.float32")[key].tobytes() == got.tobytes()


def test_get_slice_reads_only_the_bytes_it_needs(model):
    path, tensors = model
    with gs.safe_open(path, "numpy") as f:
        sl = f.get_slice("t.float64")
        with gpufile.observe() as obs:
            part = sl[1:2, 3]
        assert obs.report["gpufile-posix"]["bytes"] == part.nbytes  # not the row it lies in
        np.testing.assert_array_equal(part, tensors["t.float64"][1:2, 3])
        with pytest.raises(IndexError, match="index 3 out of bounds for tensor dimension #0"):
            sl[3]


def test_selective_loading_reads_only_the_selected_ranges(model):
    path, tensors = model
    names = ["t.int16", "t.float32", "odd"]
    with gpufile.observe() as obs:
        got = gs.load_file(path, framework="numpy", filter=names)
    assert sorted(got) == sorted(names)
    for n in names:
        assert got[n].tobytes() == tensors[n].tobytes()
    posix = obs.report["gpufile-posix"]
    assert posix["bytes"] == sum(tensors[n].nbytes for n in names)
    # A callable filter, and adjacent tensors read as one request.
    order = gs.safe_open(path, "numpy").offset_keys()
    adjacent = set(order[2:5])
    with gpufile.observe() as obs:
        got = gs.load_file(path, framework="numpy", filter=lambda n: n in adjacent)
    assert set(got) == adjacent
    assert obs.report["gpufile-posix"]["ops"] == 1
    assert obs.report["gpufile-posix"]["bytes"] == sum(tensors[n].nbytes for n in adjacent)
    with pytest.raises(KeyError, match="no tensor named 'missing'"):
        gs.load_file(path, framework="numpy", filter=["t.int8", "missing"])
    with pytest.raises(TypeError, match="not a string"):
        gs.load_file(path, framework="numpy", filter="t.int8")


@pytest.fixture
def sharded(tmp_path):
    """A 3-shard checkpoint with an index, as transformers writes it."""
    rng = np.random.default_rng(7)
    tensors = {f"model.layers.{i}.{w}": rng.standard_normal((16, 8 + i)).astype(np.float32)
               for i in range(4) for w in ("q", "k")}
    tensors["lm_head.weight"] = rng.standard_normal((5, 3)).astype(np.float16)
    names = sorted(tensors)
    shards = [names[0:3], names[3:6], names[6:]]
    weight_map = {}
    for i, shard in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-00003.safetensors"
        stn.save_file({n: tensors[n] for n in shard}, tmp_path / fname)
        weight_map.update({n: fname for n in shard})
    index = {"metadata": {"total_size": sum(t.nbytes for t in tensors.values())},
             "weight_map": weight_map}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    return tmp_path, tensors


def test_sharded_directory_and_index(sharded):
    d, tensors = sharded
    for path in (d, d / "model.safetensors.index.json"):
        with gpufile.observe() as obs:
            got = gs.load_checkpoint(path, framework="numpy")
        assert set(got) == set(tensors)
        for n, a in tensors.items():
            assert got[n].tobytes() == a.tobytes() and got[n].dtype == a.dtype
        assert obs.report["gpufile-posix"]["ops"] == 3  # one request per shard
    # Without the index: every *.safetensors file of the directory.
    (d / "model.safetensors.index.json").unlink()
    got = gs.load_checkpoint(d, framework="numpy", filter=lambda n: n.startswith("lm_head"))
    assert list(got) == ["lm_head.weight"]
    with gs.safe_open(d, "numpy") as f:
        assert f.keys() == sorted(tensors)
        np.testing.assert_array_equal(f.get_tensor("model.layers.3.k"),
                                      tensors["model.layers.3.k"])
    with pytest.raises(IsADirectoryError, match="use load_checkpoint"):
        gs.load_file(d, framework="numpy")


def test_index_limits_the_tensors_and_is_checked(sharded):
    d, tensors = sharded
    index = json.loads((d / "model.safetensors.index.json").read_text())
    dropped = index["weight_map"].pop("lm_head.weight")
    (d / "model.safetensors.index.json").write_text(json.dumps(index))
    assert "lm_head.weight" not in gs.load_checkpoint(d, framework="numpy")
    index["weight_map"]["lm_head.weight"] = "../" + dropped
    (d / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(SafetensorError, match="is not a file name inside the checkpoint"):
        gs.load_checkpoint(d, framework="numpy")
    index["weight_map"]["lm_head.weight"] = "model-00002-of-00003.safetensors"
    (d / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(SafetensorError, match="maps tensor 'lm_head.weight'|maps tensor \"lm_head"):
        gs.load_checkpoint(d, framework="numpy")
    index["weight_map"]["lm_head.weight"] = "gone.safetensors"
    (d / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(FileNotFoundError) as e:
        gs.load_checkpoint(d, framework="numpy")
    assert e.value.filename.endswith("gone.safetensors")


def test_duplicate_tensor_across_files(tmp_path):
    stn.save_file({"w": np.zeros(2)}, tmp_path / "a.safetensors")
    stn.save_file({"w": np.ones(2)}, tmp_path / "b.safetensors")
    with pytest.raises(SafetensorError, match=r'tensor "w" is in both .*a\.safetensors and'):
        gs.load_checkpoint(tmp_path, framework="numpy")
    (tmp_path / "empty").mkdir()
    with pytest.raises(SafetensorError, match=r"empty: no \*\.safetensors file"):
        gs.load_checkpoint(tmp_path / "empty", framework="numpy")


def _t(dtype, shape, start, end):
    return {"dtype": dtype, "shape": shape, "data_offsets": [start, end]}


BAD = [
    ("truncated_length", None, b"\x01\x00\x00", "file of 3 bytes is too short"),
    ("header_past_end", None, struct.pack("<Q", 1000) + b"{}",
     "header of 1000 bytes goes past the end of the file (10 bytes; truncated file?)"),
    ("absurd_header", None, struct.pack("<Q", 1 << 60) + b"{}",
     "is larger than the limit of 100000000 bytes"),
    ("malformed_json", b'{"w": {"dtype": ', b"", "invalid header: EOF while parsing"),
    ("not_an_object", b"[1, 2]", b"", "invalid header: invalid type: sequence"),
    ("duplicate_key", b'{"w": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}, '
                      b'"w": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}', b"\x00",
     'key "w" appears twice'),
    ("bad_metadata", {"__metadata__": {"n": 1}}, b"", "invalid __metadata__"),
    ("missing_field", {"w": {"dtype": "F32", "shape": [1]}}, b"\x00" * 4,
     'tensor "w": invalid entry (expected dtype, shape, data_offsets): missing field'),
    ("unknown_dtype", {"w": _t("F31", [1], 0, 4)}, b"\x00" * 4,
     'tensor "w": unknown dtype "F31"'),
    ("reversed_offsets", {"w": _t("F32", [1], 4, 0)}, b"\x00" * 4,
     'tensor "w": data_offsets [4, 0] end before they begin'),
    ("size_mismatch", {"w": _t("F32", [3], 0, 8)}, b"\x00" * 8,
     'tensor "w": shape [3] of F32 needs 12 bytes, but data_offsets [0, 8] hold 8'),
    ("shape_overflow", {"w": _t("F64", [1 << 40, 1 << 40], 0, 8)}, b"\x00" * 8,
     'tensor "w": shape [1099511627776, 1099511627776] of F64 overflows'),
    ("outside_data", {"a": _t("U8", [4], 0, 4), "b": _t("U8", [8], 4, 12)}, b"\x00" * 6,
     'tensor "b" (data bytes 4..12) ends past the data area of 6 bytes (truncated file?)'),
    ("overlap", {"a": _t("U8", [4], 0, 4), "b": _t("U8", [4], 2, 6)}, b"\x00" * 6,
     'tensor "b" (data bytes 2..6) overlaps tensor "a", which ends at 4'),
    ("gap", {"a": _t("U8", [2], 0, 2), "b": _t("U8", [2], 4, 6)}, b"\x00" * 6,
     'data bytes 2..4 belong to no tensor (before tensor "b")'),
    ("trailing_bytes", {"a": _t("U8", [2], 0, 2)}, b"\x00" * 5,
     "data bytes 2..5 belong to no tensor (after the last tensor)"),
    ("sub_byte_misaligned", {"a": _t("F4", [3], 0, 2)}, b"\x00" * 2,
     "is 12 bits, not a whole number of bytes"),
]


@pytest.mark.parametrize("case,header,data,message", BAD, ids=[b[0] for b in BAD])
def test_bad_files_are_refused_naming_file_and_tensor(tmp_path, case, header, data, message):
    path = tmp_path / f"{case}.safetensors"
    if header is None:
        path.write_bytes(data)
    elif isinstance(header, bytes):
        _craft(path, None, data, raw=header)
    else:
        _craft(path, header, data)
    for call in (lambda: gs.load_file(path, framework="numpy"),
                 lambda: gs.safe_open(path, "numpy")):
        with pytest.raises(SafetensorError) as e:
            call()
        text = str(e.value)
        assert text.startswith(str(path) + ": "), text
        assert message in text, text
        assert isinstance(e.value, ValueError)
    # The reference refuses these files too, but for a key given twice (it keeps the last).
    if case != "duplicate_key":
        with pytest.raises(Exception):
            stn.load_file(path)


def test_missing_file_and_directory_errors(tmp_path):
    with pytest.raises(FileNotFoundError) as e:
        gs.load_file(tmp_path / "nope.safetensors", framework="numpy")
    assert e.value.filename.endswith("nope.safetensors")


def test_device_and_framework_arguments(model):
    path, _ = model
    for device in ("cuda:0", 0, "cuda"):
        with pytest.raises(ValueError, match="framework 'numpy' holds host memory only"):
            gs.load_file(path, device, framework="numpy")
    for device, exc in (("gpu", ValueError), ("cuda:x", ValueError), (-1, ValueError),
                        (True, TypeError), (1.5, TypeError)):
        with pytest.raises(exc, match="device"):
            gs.load_file(path, device, framework="numpy")
    with pytest.raises(ValueError, match="framework must be one of"):
        gs.load_file(path, framework="tensorflow")
    with pytest.raises(TypeError, match="device_map must be a mapping or a callable"):
        gs.load_file(path, framework="numpy", device_map=[("", 0)])
    got = gs.load_file(path, framework="numpy", device_map={"t": "cpu", "": "cpu"})
    assert len(got) == 22


def test_numpy_without_ml_dtypes_names_the_package(model, monkeypatch):
    path, _ = model
    monkeypatch.setitem(sys.modules, "ml_dtypes", None)
    with pytest.raises(TypeError, match=r"tensor 't.bfloat16' is BF16, which NumPy has no type "
                                        r"for; install ml_dtypes"):
        gs.load_file(path, framework="numpy")
    got = gs.load_file(path, framework="numpy", filter=lambda n: n == "t.int64")
    assert got["t.int64"].dtype == np.int64


def test_f4_and_f6_need_pytorch(tmp_path):
    path = _craft(tmp_path / "mx.safetensors",
                  {"a": _t("F4", [2, 4], 0, 4), "b": _t("F6_E2M3", [4], 4, 7)}, bytes(range(7)))
    with pytest.raises(TypeError, match="tensor 'a' is F4, which numpy has no type for"):
        gs.load_file(path, framework="numpy")
    with gs.safe_open(path, "numpy") as f:
        assert f.get_slice("b").get_shape() == [4] and f.get_slice("b").get_dtype() == "F6_E2M3"


@pytest.mark.parametrize("shape,dtype", [([2**62, 0], "F32"), ([2**40, 2**23, 0], "U8"),
                                         ([0, 2**63], "U8")])
def test_a_shape_numpy_cannot_hold_is_a_value_error_naming_the_tensor(tmp_path, shape, dtype):
    """An empty tensor whose non-zero dimensions times the item size pass int64: NumPy cannot
    make it, so ValueError (safetensors.numpy's type) naming the file and the tensor, before
    any memory is allocated; PyTorch holds such a shape and loads it, as safetensors.torch."""
    path = _craft(tmp_path / "huge.safetensors",
                  {"huge": _t(dtype, shape, 0, 0), "w": _t("F32", [2], 0, 8)},
                  np.array([1.0, 2.0], np.float32).tobytes())
    with pytest.raises(ValueError):
        stn.load_file(path)
    want = f"huge.safetensors: tensor 'huge' of shape {shape} and {dtype} is too big for " \
           "framework 'numpy'"
    for own in (False, True):
        with pytest.raises(ValueError, match=re.escape(want)):
            gs.load_file(path, framework="numpy", own_memory=own)
    with gs.safe_open(path, "numpy") as f, pytest.raises(ValueError, match=re.escape(want)):
        f.get_tensor("huge")
    np.testing.assert_array_equal(gs.load_file(path, framework="numpy", filter=["w"])["w"],
                                  [1.0, 2.0])
    torch = pytest.importorskip("torch")
    if shape[-1] < 2**63:
        assert gs.load_file(path, framework="pt")["huge"].shape == torch.Size(shape)


def test_cli_prints_speed_and_path_report(model):
    path, tensors = model
    out = subprocess.run([sys.executable, "-m", "gpufile.safetensors", str(path), "--json",
                          "--framework", "numpy", "--device", "cpu"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    assert r["tensors"] == len(tensors)
    assert r["bytes"] == sum(a.nbytes for a in tensors.values())
    assert r["gb_per_s"] > 0 and r["tensors_per_s"] > 0
    assert r["report"]["gpufile-posix"]["bytes"] == r["bytes"]
    text = subprocess.run([sys.executable, "-m", "gpufile.safetensors", str(path),
                           "--framework", "numpy", "--device", "cpu"],
                          capture_output=True, text=True, timeout=60)
    assert f"{len(tensors)} tensors" in text.stdout and "gpufile-posix" in text.stdout
    bad = subprocess.run([sys.executable, "-m", "gpufile.safetensors", str(path) + ".nope",
                          "--framework", "numpy", "--device", "cpu"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1 and "gpufile: error:" in bad.stderr


def _torch_bytes(t):
    import torch
    return t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def _torch_has(torch, tensors):
    """The tensors whose safetensors dtype this PyTorch has a type for."""
    names = {"bfloat16": "bfloat16", "float8_e4m3fn": "float8_e4m3fn",
             "float8_e5m2": "float8_e5m2", "float8_e8m0fnu": "float8_e8m0fnu",
             "float8_e4m3fnuz": "float8_e4m3fnuz", "float8_e5m2fnuz": "float8_e5m2fnuz"}
    return [n for n, a in tensors.items()
            if a.dtype.name not in names or hasattr(torch, names[a.dtype.name])]


def test_pt_on_cpu_matches(model):
    torch = pytest.importorskip("torch")
    path, tensors = model
    names = _torch_has(torch, tensors)
    got = gs.load_file(path, filter=names)
    for name in names:
        arr = tensors[name]
        t = got[name]
        assert t.device.type == "cpu"
        assert _torch_bytes(t) == arr.tobytes(), name


# ---- GPU (skips with the reason without one) ----

def _gpus():
    reason = gpu_reason()
    if reason is not None:
        return 0, reason
    import cupy
    return cupy.cuda.runtime.getDeviceCount(), None


NGPU, GPU_REASON = _gpus()


@pytest.mark.parametrize("device", ["cuda:0", 0])
@pytest.mark.gpu
@pytest.mark.skipif(NGPU < 1, reason=GPU_REASON or "no CUDA device")
def test_cupy_on_gpu(model, device):
    import cupy as cp
    path, tensors = model
    numpy_only = [n for n in tensors if not n.startswith(("t.bfloat16", "t.float8"))]
    got = gs.load_file(path, device, framework="cupy", filter=numpy_only)
    for n in numpy_only:
        assert isinstance(got[n], cp.ndarray) and got[n].device.id == 0
        assert cp.asnumpy(got[n]).tobytes() == tensors[n].tobytes(), n
    with gs.safe_open(path, "cupy", device=device) as f:
        assert cp.asnumpy(f.get_slice("t.float32")[1:, 2]).tobytes() == \
            np.ascontiguousarray(tensors["t.float32"][1:, 2]).tobytes()
    with pytest.raises(TypeError, match="is BF16, which cupy has no type for"):
        gs.load_file(path, device, framework="cupy")


@pytest.mark.gpu
@pytest.mark.skipif(NGPU < 1, reason=GPU_REASON or "no CUDA device")
def test_torch_on_gpu_every_dtype(model):
    torch = pytest.importorskip("torch")
    path, tensors = model
    names = _torch_has(torch, tensors)
    for own in (False, True):
        got = gs.load_file(path, "cuda:0", own_memory=own, filter=names)
        for name in names:
            t, arr = got[name], tensors[name]
            assert t.device == torch.device("cuda:0") and tuple(t.shape) == arr.shape
            assert _torch_bytes(t) == arr.tobytes(), name
    with gs.safe_open(path, "pt", device=0) as f:
        t = f.get_tensor("t.bfloat16")
        assert t.dtype == torch.bfloat16 and t.is_cuda


@pytest.mark.gpu
@pytest.mark.skipif(NGPU < 2, reason=f"needs 2 GPUs; this machine has {NGPU}")
def test_device_map_over_two_gpus(sharded):
    import cupy as cp
    d, tensors = sharded
    got = gs.load_checkpoint(d, 0, framework="cupy",
                             device_map={"model.layers.1": 1, "lm_head": "cuda:1"})
    for n, a in tensors.items():
        want = 1 if n.startswith(("model.layers.1.", "lm_head")) else 0
        assert got[n].device.id == want, n
        assert cp.asnumpy(got[n]).tobytes() == a.tobytes()


def test_file_shrunk_after_open_is_an_eof_error_not_a_read_past_it(model):
    path, tensors = model
    with gs.safe_open(path, "numpy") as f:
        last = f.offset_keys()[-1]
        size = path.stat().st_size
        with open(path, "r+b") as w:
            w.truncate(size - 1)
        with pytest.raises(gpufile.EndOfFileError):
            f.get_tensor(last)
        np.testing.assert_array_equal(f.get_tensor("t.int8"), tensors["t.int8"])
