"""gpufile.safetensors with JAX (framework "flax", alias "jax"): jax.Array results read straight
into memory JAX allocated, JAX arrays saved from their own memory.

The CPU tests run with JAX's CPU wheel (tests/requirements.txt) and skip with the reason where
JAX is not installed. The GPU tests at the end need a JAX with its CUDA backend
(jax[cuda12] or jax[cuda13]) and skip with the reason elsewhere.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import gpufile.safetensors as gs

jax = pytest.importorskip("jax", reason="JAX is not installed (pip install jax)")
jnp = pytest.importorskip("jax.numpy")
ml_dtypes = pytest.importorskip("ml_dtypes")

# Every safetensors dtype JAX has a type for, by the NumPy (ml_dtypes) name JAX uses.
TYPES_32 = ["float32", "float16", "bfloat16", "int32", "uint32", "int16", "uint16", "int8",
            "uint8", "bool", "complex64", "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu",
            "float8_e4m3fnuz", "float8_e5m2fnuz"]
TYPES_64 = ["float64", "int64", "uint64"]
CPU = jax.devices("cpu")[0]


def _host(dtype, shape, seed):
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape))
    if dtype == "bool":
        return rng.integers(0, 2, n).astype(bool).reshape(shape)
    if dtype == "complex64":
        return (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(np.complex64) \
            .reshape(shape)
    if dtype.startswith(("float8", "bfloat")):
        return rng.standard_normal(n).astype(getattr(ml_dtypes, dtype)).reshape(shape)
    if dtype.startswith("float"):
        return rng.standard_normal(n).astype(dtype).reshape(shape)
    return rng.integers(0, 100, n).astype(dtype).reshape(shape)


def _tensors(types, seed=0):
    """Host arrays of each dtype, odd shapes, a scalar and an empty one."""
    out = {f"t.{d}": _host(d, (3, 5, 7), seed + i) for i, d in enumerate(types)}
    out["scalar"] = np.array(3.5, dtype=np.float32)
    out["empty"] = np.zeros((0, 4), dtype=np.float16)
    out["odd"] = np.arange(3, dtype=np.uint8)
    return out


def _same(got, want, name=""):
    assert isinstance(got, jax.Array), (name, type(got))
    assert got.dtype == want.dtype and got.shape == want.shape, (name, got.dtype, got.shape)
    assert np.asarray(got).tobytes() == np.asarray(want).tobytes(), name


@pytest.fixture
def x64():
    """64-bit types enabled for the test (JAX holds F64, I64 and U64 only then)."""
    with jax.enable_x64(True):
        yield


def test_every_dtype_round_trips_through_save_file_and_load_file(tmp_path):
    host = _tensors(TYPES_32)
    arrays = {k: jnp.asarray(v) for k, v in host.items()}
    path = tmp_path / "model.safetensors"
    gs.save_file(arrays, path, metadata={"format": "flax"})
    # The file is what safetensors writes for the same values.
    import safetensors.numpy as stn
    assert path.read_bytes() == stn.save(host, metadata={"format": "flax"})
    got = gs.load_file(path, framework="flax")
    assert list(got) == gs.safe_open(path, "flax").offset_keys()
    for name, want in host.items():
        _same(got[name], want, name)
        assert got[name].devices() == {CPU}, name
    assert gs.load_file(path, framework="jax").keys() == got.keys()


def test_64_bit_types_round_trip_with_x64(tmp_path, x64):
    host = _tensors(TYPES_64 + ["bfloat16"])
    path = tmp_path / "model.safetensors"
    gs.save_file({k: jnp.asarray(v) for k, v in host.items()}, path)
    got = gs.load_file(path, framework="flax")
    for name, want in host.items():
        _same(got[name], want, name)


def test_64_bit_types_without_x64_are_converted_as_jax_does_and_said_so(tmp_path):
    host = {"f64": _host("float64", (4, 3), 1), "i64": np.arange(6, dtype=np.int64) - 3,
            "u64": np.arange(5, dtype=np.uint64), "f32": _host("float32", (2,), 2)}
    path = tmp_path / "model.safetensors"
    import safetensors.numpy as stn
    stn.save_file(host, path)
    with pytest.warns(UserWarning, match="jax_enable_x64") as caught:
        got = gs.load_file(path, framework="flax")
    said = sorted(str(w.message) for w in caught if "jax_enable_x64" in str(w.message))
    assert [m.split(" while")[0] for m in said] == [
        "tensor 'f64' is F64, which JAX holds as float32",
        "tensor 'i64' is I64, which JAX holds as int32",
        "tensor 'u64' is U64, which JAX holds as uint32"]
    assert all(w.filename == __file__ for w in caught)  # the caller's line
    assert got["f64"].dtype == jnp.float32 and got["i64"].dtype == jnp.int32
    assert got["u64"].dtype == jnp.uint32
    for name, want in host.items():
        np.testing.assert_array_equal(np.asarray(got[name]), jnp.asarray(want))
    # What safetensors.flax gives for the same file (it converts with jnp.array).
    try:
        import safetensors.flax as stf
    except ImportError:
        return
    ref = stf.load_file(path)
    for name in host:
        assert ref[name].dtype == got[name].dtype, name
        np.testing.assert_array_equal(np.asarray(ref[name]), np.asarray(got[name]))


def test_files_saved_by_safetensors_flax_load_the_same(tmp_path):
    stf = pytest.importorskip("safetensors.flax")
    host = _tensors(["float32", "float16", "bfloat16", "int8", "bool"])
    path = tmp_path / "flax.safetensors"
    stf.save_file({k: jnp.asarray(v) for k, v in host.items()}, path)
    ref = stf.load_file(path)
    got = gs.load_file(path, framework="flax")
    assert set(got) == set(ref)
    for name in ref:
        _same(got[name], np.asarray(ref[name]), name)
    # And gpufile writes the bytes safetensors.flax writes.
    ours = tmp_path / "ours.safetensors"
    gs.save_file({k: jnp.asarray(v) for k, v in host.items()}, ours)
    assert ours.read_bytes() == path.read_bytes()
    assert gs.save({k: jnp.asarray(v) for k, v in host.items()}) == path.read_bytes()


def test_load_checkpoint_of_a_sharded_checkpoint_saved_by_gpufile(tmp_path):
    host = {f"model.layers.{i}.w": _host("bfloat16", (64, 33), i) for i in range(6)}
    host["lm_head"] = _host("float32", (17, 64), 9)
    index = gs.save_checkpoint({k: jnp.asarray(v) for k, v in host.items()}, tmp_path / "ck",
                               max_shard_size=10_000)
    files = sorted(set(index["weight_map"].values()))
    assert len(files) > 1, files
    got = gs.load_checkpoint(tmp_path / "ck", framework="flax")
    assert set(got) == set(host)
    for name, want in host.items():
        _same(got[name], want, name)
    some = gs.load_checkpoint(tmp_path / "ck", framework="jax", filter=["model.layers.1.*"])
    assert list(some) == ["model.layers.1.w"]


def test_load_checkpoint_of_shards_written_by_safetensors_flax(tmp_path):
    stf = pytest.importorskip("safetensors.flax")
    host = {f"layer{i}.w": _host("float16", (8, 9), i) for i in range(4)}
    shards = {"model-00001-of-00002.safetensors": ["layer0.w", "layer1.w"],
              "model-00002-of-00002.safetensors": ["layer2.w", "layer3.w"]}
    weight_map = {}
    for fname, names in shards.items():
        stf.save_file({n: jnp.asarray(host[n]) for n in names}, tmp_path / fname)
        weight_map.update({n: fname for n in names})
    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": 4 * 8 * 9 * 2}, "weight_map": weight_map}))
    got = gs.load_checkpoint(tmp_path, framework="flax", device=CPU)
    assert set(got) == set(host)
    for name, want in host.items():
        _same(got[name], want, name)


def test_safe_open_gets_tensors_and_slices(tmp_path):
    host = _tensors(["float32", "bfloat16", "int16", "float8_e4m3fn"])
    path = tmp_path / "model.safetensors"
    gs.save_file({k: jnp.asarray(v) for k, v in host.items()}, path, metadata={"k": "v"})
    with gs.safe_open(path, framework="flax", device="cpu") as f:
        assert f.keys() == sorted(host)
        assert f.metadata() == {"k": "v"}
        for name, want in host.items():
            _same(f.get_tensor(name), want, name)
        s = f.get_slice("t.bfloat16")
        assert s.get_shape() == [3, 5, 7] and s.get_dtype() == "BF16"
        for key in [(slice(1, 3),), (slice(0, 3, 2), Ellipsis, 1), (2,), (-1, slice(None, None, 2)),
                    (slice(2, 1),)]:
            part = s[key]
            _same(part, host["t.bfloat16"][key], str(key))
        assert f.get_slice("scalar")[...].shape == ()
        with pytest.raises(KeyError, match="^File does not contain tensor nope$"):
            f.get_tensor("nope")


def test_a_read_that_fails_raises_gpufile_s_error_not_jax_s(tmp_path):
    """The reads run inside JAX's computation; their error comes out as gpufile raised it."""
    import gpufile
    host = _tensors(["float32", "int8"])
    path = tmp_path / "m.safetensors"
    gs.save_file(host, path)
    with gs.safe_open(path, "flax") as f:
        last = f.offset_keys()[-1]
        with open(path, "r+b") as w:
            w.truncate(path.stat().st_size - 1)
        with pytest.raises(gpufile.EndOfFileError):
            f.get_tensor(last)
        _same(f.get_tensor("t.int8"), host["t.int8"])
    with pytest.raises(gs.SafetensorError, match="truncated file"):
        gs.load_file(path, framework="flax")


def test_device_arguments_of_the_jax_framework(tmp_path):
    path = tmp_path / "m.safetensors"
    gs.save_file({"a": jnp.arange(6.0)}, path)
    for device in ("cpu", CPU, None):
        got = gs.load_file(path, device, framework="flax")
        assert got["a"].devices() == {CPU}, device
    if not any(d.platform == "gpu" for d in jax.devices()):
        for device in ("cuda:0", 0, "cuda"):
            with pytest.raises(ValueError, match=r"JAX's GPU backend.*jax\[cuda"):
                gs.load_file(path, device, framework="flax")
    with pytest.raises(ValueError, match="device"):
        gs.load_file(path, "cuda:x", framework="flax")


def test_sub_byte_types_are_refused_by_name_and_the_rest_loads(tmp_path):
    torch = pytest.importorskip("torch")
    if not hasattr(torch, "float4_e2m1fn_x2"):
        pytest.skip("this PyTorch has no float4_e2m1fn_x2")
    path = tmp_path / "f4.safetensors"
    gs.save_file({"f4": torch.zeros((2, 4), dtype=torch.uint8).view(torch.float4_e2m1fn_x2),
                  "w": torch.ones(3)}, path)
    with pytest.raises(TypeError, match=r"tensor 'f4' is F4, which JAX .*framework='pt'"):
        gs.load_file(path, framework="flax")
    got = gs.load_file(path, framework="flax", filter=["w"])
    np.testing.assert_array_equal(np.asarray(got["w"]), np.ones(3, np.float32))


_HUGE_EMPTY = """
import sys
import gpufile.safetensors as gs
path, api = sys.argv[1], sys.argv[2]
try:
    if api == "load_file":
        gs.load_file(path, framework="flax")
    elif api == "safe_open":
        with gs.safe_open(path, framework="flax") as f:
            f.get_tensor("huge")
    else:
        import safetensors.flax
        safetensors.flax.load_file(path)
except ValueError as e:
    print("ValueError:", e)
"""


@pytest.mark.parametrize("shape,dtype", [([2**62, 0], "F32"), ([2**31, 2**30, 0], "F32"),
                                         ([0, 2**63], "U8")])
def test_a_shape_xla_cannot_hold_is_a_value_error_not_an_abort(tmp_path, shape, dtype):
    """A valid file whose empty tensor has dimensions too big for XLA (their product times the
    item size past int64): XLA aborts the process when such an array is made, so the loads run
    in a child; each raises ValueError, as safetensors.flax does (NumPy's "array is too big"),
    and the other tensors of the file load where the filter leaves it out."""
    path = tmp_path / "huge.safetensors"
    header = json.dumps({"huge": {"dtype": dtype, "shape": shape, "data_offsets": [0, 0]},
                         "w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
    path.write_bytes(len(header).to_bytes(8, "little") + header
                     + np.array([1.0, 2.0], np.float32).tobytes())
    apis = ["load_file", "safe_open"]
    try:
        import safetensors.flax  # noqa: F401
        apis.append("safetensors.flax")
    except ImportError:
        pass
    for api in apis:
        out = subprocess.run([sys.executable, "-c", _HUGE_EMPTY, str(path), api],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, (api, out.returncode, out.stderr[-2000:])
        assert out.stdout.startswith("ValueError:"), (api, out.stdout, out.stderr[-2000:])
        if api != "safetensors.flax":
            assert f"tensor 'huge' of shape {shape} and {dtype} is too big for framework " \
                   "'flax'" in out.stdout, out.stdout
    got = gs.load_file(path, framework="flax", filter=["w"])
    np.testing.assert_array_equal(np.asarray(got["w"]), [1.0, 2.0])
    with gs.safe_open(path, framework="flax") as f:
        if shape[0]:
            # Rows of it that XLA can hold load: only the slice becomes an array.
            assert f.get_slice("huge")[:1].shape == (1, *shape[1:])


def test_without_jax_the_error_names_jax(tmp_path, monkeypatch):
    path = tmp_path / "m.safetensors"
    gs.save_file({"a": np.arange(3.0)}, path)
    monkeypatch.setitem(sys.modules, "jax", None)
    for fw in ("flax", "jax"):
        with pytest.raises(ModuleNotFoundError, match=r"framework 'flax' needs JAX; install it"):
            gs.load_file(path, framework=fw)
        with pytest.raises(ModuleNotFoundError, match="needs JAX"):
            gs.safe_open(path, framework=fw)


def test_async_save_copies_jax_arrays_before_returning(tmp_path):
    host = _tensors(["float32", "bfloat16", "int8"])
    arrays = {k: jnp.asarray(v) for k, v in host.items()}
    fut = gs.async_save(arrays, tmp_path / "a.safetensors")
    # A deleted (or donated) array's memory is gone: the save wrote from its own copy.
    for a in arrays.values():
        a.delete()
    fut.result()
    got = gs.load_file(tmp_path / "a.safetensors", framework="flax")
    for name, want in host.items():
        _same(got[name], want, name)
    arrays = {k: jnp.asarray(v) for k, v in host.items()}
    fut = gs.async_save(arrays, tmp_path / "ck", sharded=True, max_shard_size=200)
    index = fut.result()
    assert len(set(index["weight_map"].values())) > 1
    got = gs.load_checkpoint(tmp_path / "ck", framework="flax")
    for name, want in host.items():
        _same(got[name], want, name)


def test_bad_jax_arrays_are_refused_before_a_file_appears(tmp_path):
    path = tmp_path / "x.safetensors"
    gone = jnp.arange(4.0)
    gone.delete()
    with pytest.raises(ValueError, match=r"tensor 'gone' is a deleted JAX array"):
        gs.save_file({"ok": jnp.ones(2), "gone": gone}, path)
    with pytest.raises(TypeError, match=r"tensor 'i4' is int4, which safetensors has no type"):
        gs.save_file({"i4": jnp.zeros(4, dtype=jnp.int4)}, path)

    @jax.jit
    def inside(x):
        gs.save_file({"traced": x}, path)
        return x
    with pytest.raises(TypeError, match=r"tensor 'traced' is a traced value"):
        inside(jnp.ones(2))
    assert not path.exists() and os.listdir(tmp_path) == []


def test_sharded_arrays_over_two_devices_save_their_whole_value(tmp_path):
    """A jax.Array split over two (CPU) devices is saved as its global value."""
    code = f"""
import numpy as np, jax, jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
import gpufile.safetensors as gs
mesh = Mesh(np.array(jax.devices("cpu")[:2]), ("x",))
a = jax.device_put(jnp.arange(16.0).reshape(4, 4), NamedSharding(mesh, P("x")))
r = jax.device_put(jnp.arange(6, dtype=jnp.int8), NamedSharding(mesh, P()))
assert len(a.addressable_shards) == 2
gs.save_file({{"a": a, "r": r}}, {str(tmp_path / 's.safetensors')!r})
got = gs.load_file({str(tmp_path / 's.safetensors')!r}, framework="flax")
assert np.asarray(got["a"]).tolist() == np.arange(16.0).reshape(4, 4).tolist()
assert np.asarray(got["r"]).tolist() == list(range(6))
print("ok")
"""
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2",
               JAX_PLATFORMS="cpu")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-3000:]


_PEAK = """
import sys
import jax
import gpufile.safetensors as gs
def peak():  # this process's peak resident memory (ru_maxrss would count the parent's too)
    return int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0]) * 1024
path, tiny = sys.argv[1], sys.argv[2]
gs.load_file(tiny, framework="flax")  # imports and the first compile, before measuring
before = peak()
got = gs.load_file(path, framework="flax")
jax.block_until_ready(got)
print(peak() - before)
"""


def test_a_cpu_load_makes_no_copy_of_the_data(tmp_path):
    """The arrays are the memory gpufile read into: peak memory grows by the data once, not
    twice (a read into NumPy then jnp.asarray would double it)."""
    size = 256 << 20
    path = tmp_path / "big.safetensors"
    gs.save_file({f"w{i}": np.full(size // 4 // 8, i, np.float32) for i in range(8)}, path)
    tiny = tmp_path / "tiny.safetensors"
    gs.save_file({"w": np.zeros(4, np.float32)}, tiny)
    out = subprocess.run([sys.executable, "-c", _PEAK, str(path), str(tiny)],
                         env=dict(os.environ, JAX_PLATFORMS="cpu"), capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    grew = int(out.stdout.split()[-1])
    assert size * 0.9 < grew < size * 1.4, (grew, size)


# --- on the GPU ---------------------------------------------------------------------------------

def _gpus():
    try:
        return [d for d in jax.devices() if d.platform == "gpu"]
    except RuntimeError:
        return []


needs_gpu = pytest.mark.skipif(not _gpus(), reason="JAX has no GPU backend here (a GPU machine "
                                                   "with jax[cuda12] or jax[cuda13] runs these)")


@needs_gpu
def test_gpu_load_puts_every_dtype_on_the_requested_gpu(tmp_path):
    host = _tensors(TYPES_32)
    path = tmp_path / "model.safetensors"
    gs.save_file({k: jnp.asarray(v, device=CPU) for k, v in host.items()}, path)
    gpu = _gpus()[0]
    for device in ("cuda:0", 0, gpu):
        got = gs.load_file(path, device, framework="flax")
        for name, want in host.items():
            _same(got[name], want, name)
            assert got[name].devices() == {gpu}, (device, name)
    with gs.safe_open(path, framework="flax", device=gpu) as f:
        t = f.get_tensor("t.bfloat16")
        assert t.devices() == {gpu}
        _same(t, host["t.bfloat16"])
        _same(f.get_slice("t.float32")[1:, 2], host["t.float32"][1:, 2])
    # The arrays take part in computations on that GPU.
    total = jnp.sum(got["t.float32"])
    assert abs(float(total) - float(host["t.float32"].sum())) < 1e-3


_GPU_PEAK = """
import sys
import jax
import gpufile.safetensors as gs
gpu = [d for d in jax.devices() if d.platform == "gpu"][0]
path, tiny = sys.argv[1], sys.argv[2]
jax.block_until_ready(gs.load_file(tiny, gpu, framework="flax"))  # JAX's start, a first compile
stats = gpu.memory_stats()
if not stats or "peak_bytes_in_use" not in stats:
    print("no-stats")
    sys.exit()
base = stats["bytes_in_use"]
got = gs.load_file(path, gpu, framework="flax")
jax.block_until_ready(got)
stats = gpu.memory_stats()
print(base, stats["bytes_in_use"], stats["peak_bytes_in_use"], float(got["w3"][0]))
"""


@needs_gpu
def test_gpu_load_reads_into_jax_memory_with_no_extra_copy(tmp_path):
    """Device memory grows by the data once, at its peak too: the arrays are the buffers
    gpufile read into (a staging buffer, or a read into CuPy then a copy into JAX, would show as
    twice the data at the peak). In a fresh process, whose peak is its own."""
    size = 1 << 30
    path = tmp_path / "big.safetensors"
    gs.save_file({f"w{i}": np.full(size // 2 // 16, i, ml_dtypes.bfloat16) for i in range(16)},
                 path)
    tiny = tmp_path / "tiny.safetensors"
    gs.save_file({"w": np.zeros(4, ml_dtypes.bfloat16)}, tiny)
    out = subprocess.run([sys.executable, "-c", _GPU_PEAK, str(path), str(tiny)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    if out.stdout.strip() == "no-stats":
        pytest.skip("this JAX reports no device memory statistics")
    base, in_use, peak, w3 = out.stdout.split()
    base, in_use, peak = int(base), int(in_use), int(peak)
    assert in_use - base >= size, out.stdout
    assert peak - base < size * 1.1, out.stdout
    assert float(w3) == 3.0


@needs_gpu
def test_gpu_arrays_save_from_device_memory_byte_identical(tmp_path):
    import safetensors.numpy as stn
    gpu = _gpus()[0]
    host = _tensors(TYPES_32)
    arrays = {k: jax.device_put(v, gpu) for k, v in host.items()}
    path = tmp_path / "g.safetensors"
    gs.save_file(arrays, path)
    assert path.read_bytes() == stn.save(host)
    assert gs.save(arrays) == stn.save(host)
    fut = gs.async_save(arrays, tmp_path / "a.safetensors")
    for a in arrays.values():
        a.delete()
    fut.result()
    assert (tmp_path / "a.safetensors").read_bytes() == stn.save(host)
    index = gs.save_checkpoint({k: jax.device_put(v, gpu) for k, v in host.items()},
                               tmp_path / "ck", max_shard_size=1000)
    assert len(set(index["weight_map"].values())) > 1
    got = gs.load_checkpoint(tmp_path / "ck", gpu, framework="flax")
    for name, want in host.items():
        _same(got[name], want, name)


@pytest.mark.skipif(len(_gpus()) < 2, reason="needs two GPUs that JAX sees")
def test_gpu_device_map_over_two_gpus(tmp_path):
    g0, g1 = _gpus()[:2]
    host = {"model.a.w": _host("float32", (4, 4), 0), "lm_head.w": _host("bfloat16", (3,), 1)}
    path = tmp_path / "m.safetensors"
    gs.save_file({k: jnp.asarray(v, device=CPU) for k, v in host.items()}, path)
    got = gs.load_file(path, framework="flax", device_map={"model": g0, "lm_head": "cuda:1"})
    assert got["model.a.w"].devices() == {g0} and got["lm_head.w"].devices() == {g1}
    for name, want in host.items():
        _same(got[name], want, name)

