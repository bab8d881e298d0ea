"""Saving safetensors files and Hugging Face checkpoints: byte-identical to safetensors, the
refusals safetensors makes, crash-safe publishing (faults, a real EFBIG, kill -9), async saves."""

import errno
import json
import os
import random
import signal
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import safetensors.numpy as stn

import gpufile.safetensors as gs
from gpufile import _native, defaults
from conftest import kill_during_a_save, time_scale

torch = pytest.importorskip("torch")
stt = pytest.importorskip("safetensors.torch")
ml_dtypes = pytest.importorskip("ml_dtypes")


@pytest.fixture(autouse=True)
def _no_faults_after():
    yield
    _native._inject_faults([])


def _names(d):
    return sorted(os.listdir(d))


TORCH_DTYPES = [n for n in [
    "float64", "float32", "float16", "bfloat16", "int64", "uint64", "int32", "uint32", "int16",
    "uint16", "int8", "uint8", "bool", "complex64", "float8_e4m3fn", "float8_e5m2",
    "float8_e8m0fnu", "float8_e4m3fnuz", "float8_e5m2fnuz", "float4_e2m1fn_x2",
] if hasattr(torch, n)]


def _torch_tensor(dtype_name, shape, seed):
    g = torch.Generator().manual_seed(seed)
    dtype = getattr(torch, dtype_name)
    n = int(np.prod(shape)) if shape else 1
    raw = torch.randint(0, 256, (n * torch.empty((), dtype=dtype).element_size(),),
                        dtype=torch.uint8, generator=g)
    return raw.view(dtype).reshape(shape)


def _state(seed=0):
    """Every dtype, with awkward shapes: scalar, zero-size, odd, 3-d."""
    shapes = [(), (0,), (3,), (2, 5), (0, 4), (3, 1, 2)]
    out = {}
    for i, name in enumerate(TORCH_DTYPES):
        for j, shape in enumerate(shapes):
            if name == "float4_e2m1fn_x2" and not shape:
                continue  # a 0-d packed F4 is half a value: neither library writes one
            out[f"layer.{(i * 7 + j * 3) % 11}.{name}.{j}"] = _torch_tensor(name, shape, seed + i * 10 + j)
    return out


@pytest.mark.parametrize("metadata", [None, {}, {"format": "pt"}])
def test_save_file_is_byte_identical_to_safetensors_torch_for_every_dtype(tmp_path, metadata):
    state = _state()
    ours, theirs = tmp_path / "ours.safetensors", tmp_path / "theirs.safetensors"
    gs.save_file(state, ours, metadata)
    stt.save_file(state, theirs, metadata)
    assert ours.read_bytes() == theirs.read_bytes()
    assert gs.save(state, metadata) == stt.save(state, metadata)
    back = gs.load_file(ours)
    assert set(back) == set(stt.load_file(theirs)) == set(state)
    for k, v in state.items():
        assert back[k].dtype == v.dtype and back[k].shape == v.shape
        assert torch.equal(back[k].view(torch.uint8), v.view(torch.uint8)) if v.dim() else \
            back[k].reshape(1).view(torch.uint8).tolist() == v.reshape(1).view(torch.uint8).tolist()
    assert _names(tmp_path) == ["ours.safetensors", "theirs.safetensors"]


@pytest.mark.parametrize("name", TORCH_DTYPES)
def test_one_tensor_of_each_dtype_is_byte_identical(tmp_path, name):
    state = {"w": _torch_tensor(name, (4, 6), 3)}
    if name != "float4_e2m1fn_x2":
        state["s"] = _torch_tensor(name, (), 4)
    gs.save_file(state, tmp_path / "a")
    stt.save_file(state, tmp_path / "b")
    assert (tmp_path / "a").read_bytes() == (tmp_path / "b").read_bytes()


def test_metadata_of_several_keys_is_written_sorted_and_reads_the_same(tmp_path):
    meta = {"z": "1", "format": "pt", "k": "é \" \\ \n", "": "empty"}
    state = {"a": torch.arange(6, dtype=torch.float32)}
    gs.save_file(state, tmp_path / "a", meta)
    stt.save_file(state, tmp_path / "b", meta)
    ours, theirs = (tmp_path / "a").read_bytes(), (tmp_path / "b").read_bytes()
    # safetensors writes metadata keys in a hash order of its own (different per process):
    # same length, same header as JSON, same data; gpufile's order is sorted.
    assert len(ours) == len(theirs)
    n = struct.unpack("<Q", ours[:8])[0]
    assert json.loads(ours[8:8 + n]) == json.loads(theirs[8:8 + n])
    assert ours[8 + n:] == theirs[8 + n:]
    assert list(json.loads(ours[8:8 + n])["__metadata__"]) == sorted(meta)
    with gs.safe_open(tmp_path / "a") as f:
        assert f.metadata() == meta


def test_numpy_arrays_are_byte_identical_to_safetensors_numpy(tmp_path):
    rng = np.random.default_rng(0)
    state = {
        "f64": rng.standard_normal((3, 4)), "f32": rng.standard_normal(5).astype(np.float32),
        "i8": rng.integers(-128, 127, 7, dtype=np.int8), "u64": np.arange(3, dtype=np.uint64),
        "b": rng.integers(0, 2, (2, 2)).astype(bool), "c64": np.ones(3, np.complex64),
        "bf16": rng.standard_normal(9).astype(ml_dtypes.bfloat16),
        "f8": rng.standard_normal(4).astype(ml_dtypes.float8_e4m3fn),
        "empty": np.zeros((0, 3), np.float16), "scalar": np.array(3.5, np.float32),
        "big_endian": np.arange(6, dtype=">i4"),
    }
    gs.save_file(state, tmp_path / "a")
    stn.save_file(state, tmp_path / "b")
    assert (tmp_path / "a").read_bytes() == (tmp_path / "b").read_bytes()


def test_a_strided_numpy_array_is_written_in_c_order(tmp_path):
    a = np.arange(24, dtype=np.int32).reshape(4, 6)[:, ::2]
    gs.save_file({"a": a}, tmp_path / "a")
    stn.save_file({"a": np.ascontiguousarray(a)}, tmp_path / "b")
    assert (tmp_path / "a").read_bytes() == (tmp_path / "b").read_bytes()
    np.testing.assert_array_equal(gs.load_file(tmp_path / "a", framework="numpy")["a"], a)


def _their_error(fn):
    with pytest.raises(Exception) as e:
        fn()
    return e.type, str(e.value)


def test_shared_and_non_contiguous_tensors_are_refused_with_safetensors_messages(tmp_path):
    target = tmp_path / "m.safetensors"
    target.write_bytes(b"previous")
    a = torch.zeros(10)
    for bad in [{"a": a, "b": a}, {"a": a, "b": a[2:4]},
                {"t": torch.arange(12.0).reshape(3, 4).t()}]:
        kind, message = _their_error(lambda: stt.save_file(bad, tmp_path / "x"))
        with pytest.raises(kind) as e:
            gs.save_file(bad, target)
        assert str(e.value) == message
        with pytest.raises(kind):
            gs.save(bad)
    # Views of one storage that do not overlap are saved (safetensors does too).
    x = torch.arange(10.0)
    ok = {"lo": x[:5], "hi": x[5:]}
    gs.save_file(ok, target)
    stt.save_file(ok, tmp_path / "x")
    assert target.read_bytes() == (tmp_path / "x").read_bytes()
    assert _names(tmp_path) == ["m.safetensors", "x"]


def test_bad_arguments_are_refused_before_a_file_appears(tmp_path):
    target = tmp_path / "m.safetensors"
    with pytest.raises(ValueError, match="Expected a dict"):
        gs.save_file([torch.zeros(1)], target)
    with pytest.raises(ValueError, match="Key `a` is invalid"):
        gs.save_file({"a": [1, 2]}, target)
    with pytest.raises(TypeError, match="metadata must be a dict of str to str"):
        gs.save_file({"a": torch.zeros(1)}, target, {"k": 1})
    with pytest.raises(TypeError, match="no type for"):
        gs.save_file({"a": np.zeros(2, np.float128)}, target)
    with pytest.raises(gs.SafetensorError, match="key for metadata"):
        gs.save_file({"__metadata__": torch.zeros(1)}, target)
    with pytest.raises(FileNotFoundError) as e:
        gs.save_file({"a": torch.zeros(1)}, tmp_path / "no" / "such.safetensors")
    # The directory is what refused: the error names it, and says that nothing was published.
    assert e.value.filename == str(tmp_path / "no")
    assert "Unable to create a file in the directory" in str(e.value)
    assert any("nothing was published" in n for n in e.value.__notes__)
    assert _names(tmp_path) == []


def test_a_directory_that_refuses_new_files_is_named_and_nothing_is_published():
    """Run as a user without write permission on the directory (root is made nobody in a
    child process, whose permissions are then checked)."""
    code = textwrap.dedent("""
        import os, sys
        import numpy as np
        import gpufile.safetensors as gs
        d = sys.argv[1]
        if os.getuid() == 0:
            os.setgid(65534)
            os.setuid(65534)
        for call in (lambda: gs.save_file({"a": np.zeros(3)}, os.path.join(d, "m.safetensors")),
                     lambda: gs.save_checkpoint({"a": np.zeros(3)}, d)):
            try:
                call()
            except PermissionError as e:
                assert e.filename == d, e.filename
                assert "Unable to create a file in the directory" in str(e), str(e)
                assert any("nothing was published" in n for n in e.__notes__), e.__notes__
            else:
                raise AssertionError("saved into a read-only directory")
        print("ok")
    """)
    import shutil
    import tempfile
    from conftest import SHARED_TMP

    top = tempfile.mkdtemp(dir=SHARED_TMP)  # pytest's own folder is closed to other users
    d = Path(top) / "ro"
    d.mkdir()
    (d / "m.safetensors").write_bytes(b"old")
    os.chmod(top, 0o755)
    d.chmod(0o555)
    try:
        out = subprocess.run([sys.executable, "-c", code, str(d)], capture_output=True,
                             text=True, timeout=120)
    finally:
        d.chmod(0o755)
    try:
        assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
        assert sorted(os.listdir(d)) == ["m.safetensors"]
        assert (d / "m.safetensors").read_bytes() == b"old"
    finally:
        shutil.rmtree(top)


def test_a_symlink_at_the_target_is_replaced_not_written_through(tmp_path):
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep me")
    link = tmp_path / "m.safetensors"
    link.symlink_to(victim)
    gs.save_file({"a": torch.ones(3)}, link)
    assert victim.read_bytes() == b"keep me"
    assert not link.is_symlink()
    assert torch.equal(gs.load_file(link)["a"], torch.ones(3))


@pytest.mark.parametrize("fault", ["enospc", "eio"])
def test_a_failed_write_names_the_file_keeps_the_old_one_and_removes_the_temporary(
        tmp_path, fault):
    target = tmp_path / "m.safetensors"
    old = {"a": torch.arange(4.0)}
    gs.save_file(old, target)
    before = target.read_bytes()
    big = {f"t{i}": torch.full((1 << 18,), float(i)) for i in range(8)}  # 8 MiB
    with defaults.set("num_threads", 2):
        _native._inject_faults([("write", 3, fault, 1)])
        with pytest.raises(OSError) as e:
            gs.save_file(big, target)
    assert e.value.errno == {"enospc": errno.ENOSPC, "eio": errno.EIO}[fault]
    assert e.value.filename == str(target)
    assert any("nothing was published" in n for n in getattr(e.value, "__notes__", []))
    assert target.read_bytes() == before
    assert _names(tmp_path) == ["m.safetensors"]
    _native._inject_faults([])
    gs.save_file(big, target)
    assert torch.equal(gs.load_file(target)["t7"], big["t7"])


def _write_behind_threads() -> int:
    """gpufile's write-behind threads alive in this process (Linux shows 15 characters of a
    thread's name)."""
    n = 0
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/comm") as f:
                n += f.read().strip() == "gpufile-write-b"
        except FileNotFoundError:
            pass
    return n


def test_a_durable_save_writes_behind_and_leaves_no_thread_when_it_ends_or_fails(tmp_path):
    """The write-behind of a durable save runs while the file is written (a thread of its
    own), and ends with the save, whether it publishes or fails."""
    target = tmp_path / "m.safetensors"
    big = {f"t{i}": torch.full((1 << 18,), float(i)) for i in range(8)}  # 8 MiB
    pending = _native.PendingFile(target)
    pending.start_write_behind()
    pending.start_write_behind()  # idempotent: still one thread
    for _ in range(200):  # a thread names itself once it runs
        if _write_behind_threads():
            break
        time.sleep(0.01)
    assert _write_behind_threads() == 1
    pending.discard()
    assert _write_behind_threads() == 0
    gs.save_file(big, target)
    gs.save_checkpoint(big, tmp_path / "ckpt", max_shard_size=3 << 20)
    assert _write_behind_threads() == 0
    _native._inject_faults([("write", 3, "eio", 1)])
    try:
        with pytest.raises(OSError):
            gs.save_file(big, tmp_path / "f.safetensors")
    finally:
        _native._inject_faults([])
    assert _write_behind_threads() == 0
    assert torch.equal(gs.load_file(target)["t7"], big["t7"])
    assert torch.equal(gs.load_checkpoint(tmp_path / "ckpt")["t5"], big["t5"])


def test_a_real_efbig_from_the_file_size_limit(tmp_path):
    # RLIMIT_FSIZE makes the kernel refuse the write past the limit (EFBIG, SIGXFSZ ignored).
    code = textwrap.dedent(f"""
        import errno, os, resource, signal, sys
        import numpy as np
        import gpufile.safetensors as gs
        target = {str(tmp_path / "m.safetensors")!r}
        gs.save_file({{"a": np.arange(4, dtype=np.float32)}}, target)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
        try:
            gs.save_file({{"big": np.ones(1 << 20, dtype=np.float32)}}, target)
        except OSError as e:
            print(e.errno == errno.EFBIG, e.filename == target, sorted(os.listdir({str(tmp_path)!r})))
            sys.exit(0)
        sys.exit("no error")
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split(None, 2) == ["True", "True", "['m.safetensors']\n"]
    np.testing.assert_array_equal(
        gs.load_file(tmp_path / "m.safetensors", framework="numpy")["a"], np.arange(4.0))


def test_durable_false_writes_the_same_bytes(tmp_path):
    state = _state(5)
    gs.save_file(state, tmp_path / "a", durable=False)
    stt.save_file(state, tmp_path / "b")
    assert (tmp_path / "a").read_bytes() == (tmp_path / "b").read_bytes()


# --- save_checkpoint ----------------------------------------------------------------------------


def _model(seed, n=10, size=1000):
    g = torch.Generator().manual_seed(seed)
    return {f"model.layers.{i}.weight": torch.randn(size, generator=g) for i in range(n)}


def _hub_split(state, limit):
    """huggingface_hub's shards for the same state dict, where it is installed."""
    hub = pytest.importorskip("huggingface_hub")
    split = hub.split_torch_state_dict_into_shards(state, max_shard_size=limit)
    return split.filename_to_tensors, split.metadata


@pytest.mark.parametrize("limit", [10**9, 12_000, 4000, 3999, "8KB"])
def test_checkpoint_shards_as_huggingface_hub_and_loads_back(tmp_path, limit):
    state = _model(0)
    state["lm_head.weight"] = torch.randn(3000)  # 12 kB, over some limits: a shard of its own
    state["tiny"] = torch.ones(2, dtype=torch.bfloat16)
    index = gs.save_checkpoint(state, tmp_path / "ck", limit)
    files = _names(tmp_path / "ck")
    shards = sorted(set(index["weight_map"].values()))
    if len(shards) == 1:
        assert files == ["model.safetensors"]
    else:
        assert files == shards + ["model.safetensors.index.json"]
        on_disk = json.loads((tmp_path / "ck" / "model.safetensors.index.json").read_text())
        assert on_disk == index
        assert (tmp_path / "ck" / "model.safetensors.index.json").read_text() == \
            json.dumps(index, indent=2, sort_keys=True) + "\n"
    assert index["metadata"]["total_size"] == sum(v.numel() * v.element_size()
                                                  for v in state.values())
    try:
        by_file, meta = _hub_split(state, limit)
    except pytest.skip.Exception:
        by_file = None
    if by_file is not None:
        assert {f: sorted(k) for f, k in by_file.items()} == \
            {f: sorted(k for k, v in index["weight_map"].items() if v == f) for f in shards}
        assert meta == {"total_size": index["metadata"]["total_size"]}
    back = gs.load_checkpoint(tmp_path / "ck")
    assert set(back) == set(state)
    for k, v in state.items():
        assert torch.equal(back[k], v)
    for f in shards:
        with stt.safe_open(str(tmp_path / "ck" / f), "pt") as h:
            assert h.metadata() == {"format": "pt"}


def test_shards_written_together_in_small_pieces_are_each_what_safetensors_writes(tmp_path):
    """The shards of a checkpoint are written as one batch, their pieces interleaved: with a
    task size of 4 KiB every tensor is many pieces at odd offsets, and each shard is still
    byte for byte what safetensors writes for its tensors."""
    state = {f"w{i}": torch.randn(5000 + 37 * i) for i in range(7)}  # 20 kB each, odd sizes
    with defaults.set({"task_size": 4096, "num_threads": 4}):
        index = gs.save_checkpoint(state, tmp_path / "ck", 45_000)
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) >= 3
    for f in shards:
        keys = [k for k, v in index["weight_map"].items() if v == f]
        want = stt.save({k: state[k] for k in keys}, metadata={"format": "pt"})
        assert (tmp_path / "ck" / f).read_bytes() == want, f


def test_a_new_checkpoint_replaces_one_of_another_layout_and_leaves_other_files(tmp_path):
    d = tmp_path / "ck"
    d.mkdir()
    (d / "config.json").write_text("{}")
    gs.save_checkpoint(_model(1), d, 4000)  # 10 shards
    assert len([f for f in _names(d) if f.startswith("model-")]) == 10
    gs.save_checkpoint(_model(2), d, 8000)  # 5 shards: the other 10 go
    assert _names(d) == ["config.json"] + [f"model-0000{k}-of-00005.safetensors"
                                           for k in range(1, 6)] + ["model.safetensors.index.json"]
    gs.save_checkpoint(_model(3), d)  # one file: index and shards go
    assert _names(d) == ["config.json", "model.safetensors"]
    for k, v in gs.load_checkpoint(d).items():
        assert torch.equal(v, _model(3)[k])
    gs.save_checkpoint(_model(4), d, 8000)  # sharded again: the single file goes
    assert "model.safetensors" not in _names(d)
    for k, v in gs.load_checkpoint(d).items():
        assert torch.equal(v, _model(4)[k])


def test_from_pretrained_loads_a_gpufile_checkpoint(tmp_path):
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=64, n_positions=16)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config).eval()
    state = {k: v for k, v in model.state_dict().items() if k != "lm_head.weight"}  # tied
    d = tmp_path / "gpt2"
    config.save_pretrained(d)
    gs.save_checkpoint(state, d, "20KB")
    assert (d / "model.safetensors.index.json").exists()
    loaded = transformers.GPT2LMHeadModel.from_pretrained(d).eval()
    ids = torch.arange(8).reshape(1, 8)
    with torch.no_grad():
        assert torch.equal(loaded(ids).logits, model(ids).logits)


# --- kill -9 at random moments ------------------------------------------------------------------

_CHILD = textwrap.dedent("""
    import sys
    import numpy as np
    import gpufile.safetensors as gs
    mode, target = sys.argv[1], sys.argv[2]
    i = 0
    while True:
        i += 1
        v = float(i % 2 + 1)  # versions 1 and 2 alternate
        state = {f"t{k:02d}": np.full(1 << 16, v, np.float32) for k in range(24)}  # 6 MiB
        if mode == "file":
            gs.save_file(state, target, {"v": str(v)})
        elif mode == "layouts":  # six shards, then one file (a commit that changes the layout)
            gs.save_checkpoint(state, target, 1_100_000 if i % 2 else "100MB", durable=False)
        else:
            gs.save_checkpoint(state, target, 1_100_000)
        print(i, flush=True)
""")


def _check_whole(path):
    """Every tensor of the checkpoint at ``path`` holds one version; returns it."""
    state = gs.load_checkpoint(path, framework="numpy")
    assert sorted(state) == [f"t{k:02d}" for k in range(24)]
    values = {float(v[0]) for v in state.values()} | {float(v[-1]) for v in state.values()}
    assert len(values) == 1 and values <= {1.0, 2.0}, values
    return values.pop()


def _final_files_complete(d):
    for f in os.listdir(d):
        if f.endswith(".safetensors") and not f.startswith("."):
            gs.load_file(os.path.join(d, f), framework="numpy")  # validates the whole file


@pytest.mark.parametrize("mode", ["file", "checkpoint", "layouts"])
def test_kill_9_at_random_moments_leaves_a_whole_old_or_new_checkpoint(tmp_path, mode):
    target = str(tmp_path / ("m.safetensors" if mode == "file" else "ck"))
    rng = random.Random(1234)
    seen = set()
    mid_save, before = 0, set()
    for round_ in range(12):
        p = subprocess.Popen([sys.executable, "-c", _CHILD, mode, target],
                             stdout=subprocess.PIPE, text=True)
        first = p.stdout.readline()  # one save complete: there is a previous checkpoint
        assert first.strip() == "1" or round_ > 0 or first, first
        kill_during_a_save(p, os.path.dirname(target) if mode == "file" else target, rng, round_)
        p.stdout.close()
        seen.add(_check_whole(target))
        directory = os.path.dirname(target) if mode == "file" else target
        _final_files_complete(directory)
        left = [f for f in os.listdir(directory) if f.startswith(".gpufile-tmp-")]
        mid_save += bool(set(left) - before)
        before = set(left)
    # The kills did land in the middle of saves (each such kill leaves a new temporary).
    assert mid_save >= 3, mid_save
    # Leftover temporaries are hidden, and the next save removes those of dead processes.
    if mode != "file":
        gs.save_checkpoint({f"t{k:02d}": np.zeros(4, np.float32) for k in range(24)}, target,
                           1_100_000)
        assert not [f for f in os.listdir(target) if f.startswith(".gpufile-tmp-")]
    else:
        assert all(f.startswith(".gpufile-tmp-") for f in os.listdir(directory)
                   if f != "m.safetensors")


# --- async_save ---------------------------------------------------------------------------------


def test_async_save_returns_a_future_and_later_changes_do_not_reach_the_file(tmp_path):
    state = {"a": torch.arange(1 << 16, dtype=torch.float32), "n": np.arange(5)}
    expect = {k: (v.clone() if isinstance(v, torch.Tensor) else v.copy()) for k, v in state.items()}
    fut = gs.async_save(state, tmp_path / "m.safetensors", {"format": "pt"})
    state["a"].fill_(-1)
    state["n"][:] = -1
    assert fut.result(timeout=60) is None and fut.done()
    stt.save_file({"a": expect["a"]}, tmp_path / "ref")
    back = gs.load_file(tmp_path / "m.safetensors")
    assert torch.equal(back["a"], expect["a"])
    np.testing.assert_array_equal(back["n"].numpy(), expect["n"])


def test_async_save_sharded_and_awaited(tmp_path):
    import asyncio
    state = _model(7)

    async def main():
        return await gs.async_save(state, tmp_path / "ck", sharded=True, max_shard_size=8000)
    index = asyncio.run(main())
    assert len(set(index["weight_map"].values())) == 5
    for k, v in gs.load_checkpoint(tmp_path / "ck").items():
        assert torch.equal(v, state[k])


def test_async_save_over_the_pinned_limit_is_refused_before_copying(tmp_path):
    with defaults.set("async_save_pinned_limit", 1000):
        with pytest.raises(ValueError, match="async_save_pinned_limit"):
            gs.async_save({"a": torch.zeros(1000)}, tmp_path / "m.safetensors")
    assert _names(tmp_path) == []


def test_async_save_says_where_it_staged_and_reserve_allocates_the_pinned_buffer_ahead(tmp_path):
    fut = gs.async_save({"a": torch.arange(100)}, tmp_path / "a.safetensors")
    assert fut.staging() == {"where": "pinned", "bytes": 1024, "reason": "CPU tensors"}
    fut.result(timeout=60)
    fut = gs.async_save({"n": np.arange(5)}, tmp_path / "n.safetensors")
    assert fut.staging() == {"where": "host", "bytes": 0, "reason": "no PyTorch tensor"}
    fut.result(timeout=60)
    assert gs.reserve_async_staging(3 << 20) >= 3 << 20
    for bad in (-1, 1.5, "1MB", True):
        with pytest.raises(ValueError, match="nbytes must be a non-negative int"):
            gs.reserve_async_staging(bad)
    with defaults.set("async_save_pinned_limit", 1000):
        with pytest.raises(ValueError, match="async_save_pinned_limit"):
            gs.reserve_async_staging(1001)


def test_async_save_errors_come_from_result(tmp_path):
    fut = gs.async_save({"a": torch.zeros(4)}, tmp_path / "no" / "m.safetensors")
    with pytest.raises(FileNotFoundError):
        fut.result(timeout=60)
    assert isinstance(fut.exception(), FileNotFoundError)


@pytest.mark.gpu
def test_save_from_gpu_memory_is_byte_identical():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device for PyTorch")
    import tempfile
    state = {k: v.cuda() for k, v in _state(9).items()}
    with tempfile.TemporaryDirectory() as d:
        gs.save_file(state, os.path.join(d, "a"))
        stt.save_file(state, os.path.join(d, "b"))
        with open(os.path.join(d, "a"), "rb") as a, open(os.path.join(d, "b"), "rb") as b:
            assert a.read() == b.read()
        fut = gs.async_save(state, os.path.join(d, "c"))
        assert fut.staging()["where"] == "device", fut.staging()
        for v in state.values():
            # Through bytes: CUDA has no fill for every dtype saved here (float4 pairs).
            (v.view(torch.uint8) if v.element_size() == 1 else v).zero_()
        fut.result()
        with open(os.path.join(d, "c"), "rb") as c, open(os.path.join(d, "b"), "rb") as b:
            assert c.read() == b.read()


def test_ctrl_c_stops_a_sharded_save_and_publishes_nothing(tmp_path):
    """SIGINT while the shards are written: KeyboardInterrupt soon after, nothing published,
    no temporary left, the previous checkpoint intact."""
    d = tmp_path / "ck"
    gs.save_checkpoint({"old": np.arange(10, dtype=np.int64)}, d)
    before = sorted(os.listdir(d))
    code = textwrap.dedent("""
        import os, signal, sys, threading, time
        import numpy as np
        import gpufile.safetensors as gs
        big = {f"t{i:02d}": np.zeros(64 << 20, np.uint8) for i in range(48)}  # 3 GiB
        threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
        t0 = time.monotonic()
        try:
            gs.save_checkpoint(big, sys.argv[1], "1GB")
        except KeyboardInterrupt:
            print(f"interrupted {time.monotonic() - t0:.2f}")
        else:
            print(f"finished {time.monotonic() - t0:.2f}")
    """)
    out = subprocess.run([sys.executable, "-c", code, str(d)], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    what, seconds = out.stdout.split()
    if what == "finished" and float(seconds) < 0.3:
        pytest.skip(f"the 3 GiB save ended in {seconds} s, before the signal")
    assert what == "interrupted", f"the signal came while saving, and the save went on ({seconds} s)"
    assert float(seconds) < 10 * time_scale(), seconds
    assert sorted(os.listdir(d)) == before
    assert (gs.load_checkpoint(d, framework="numpy")["old"] == np.arange(10)).all()
