"""Each rank reads its own bytes: ``get_slice`` reads only the bytes an index touches in every
dimension (one request), and ``load_checkpoint(..., shard=...)`` reads only this rank's part of
each sharded tensor (transformers' ``tp_plan`` words, dimensions), equal to slicing a full load;
ranks as real processes (gloo) whose bytes read add up to the checkpoint once."""

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

import gpufile
import gpufile.safetensors as gs
from conftest import gpu_reason

torch = pytest.importorskip("torch")
st = pytest.importorskip("safetensors")
stn = pytest.importorskip("safetensors.numpy")
st_torch = pytest.importorskip("safetensors.torch")

WORKER = os.path.join(os.path.dirname(__file__), "tp_shard_worker.py")


def _bytes_read(obs) -> int:
    return obs.report["gpufile-posix"]["bytes"]


def _model(dtype=torch.float32, seed=0):
    """A small model's tensors: odd sizes, a 1-byte and a bf16 tensor, an empty one, a scalar
    (names as transformers' Llama, so a tp_plan's patterns match)."""
    g = torch.Generator().manual_seed(seed)

    def r(*shape, dt=dtype):
        return (torch.randn(*shape, generator=g) * 50).to(dt)
    return {
        "model.embed_tokens.weight": r(11, 6),
        "model.layers.0.self_attn.q_proj.weight": r(7, 6),
        "model.layers.0.self_attn.q_proj.bias": r(7),
        "model.layers.0.self_attn.o_proj.weight": r(6, 7),
        "model.layers.0.self_attn.o_proj.bias": r(6),
        "model.layers.0.mlp.up_proj.weight": r(9, 6, dt=torch.int8),
        "model.layers.0.mlp.down_proj.weight": r(6, 9, dt=torch.bfloat16),
        "model.layers.1.self_attn.q_proj.weight": r(0, 6),
        "model.layers.1.self_attn.o_proj.weight": r(6, 0),
        "model.norm.weight": r(6),
        "model.step": torch.tensor(3.0),
        "lm_head.weight": r(11, 6, dt=torch.uint8),
    }


PLAN = {
    "layers.*.self_attn.q_proj": "colwise",
    "layers.*.self_attn.o_proj": "rowwise",
    "layers.*.mlp.up_proj": "colwise",
    "layers.*.mlp.down_proj": "rowwise",
    "lm_head": "colwise_rep",
    "model.embed_tokens.weight": 1,
}


def _expected(name, t, rank, world):
    """This rank's part as transformers' get_tensor_shard cuts it (torch.chunk's split)."""
    word = next((w for p, w in [("q_proj", "colwise"), ("up_proj", "colwise"),
                                ("lm_head", "colwise"), ("o_proj", "rowwise"),
                                ("down_proj", "rowwise"), ("embed_tokens", 1)] if p in name),
                None)
    if word is None or (word == "rowwise" and name.endswith(".bias")):
        return t
    dim = word if isinstance(word, int) else \
        (-1 if word == "rowwise" or name.endswith(".bias") or t.dim() == 1 else -2)
    dim %= t.dim()
    n = t.shape[dim]
    size = -(-n // world)
    start = min(rank * size, n)
    return t.narrow(dim, start, min(size, n - start))


@pytest.fixture
def checkpoint(tmp_path):
    tensors = _model()
    path = tmp_path / "model.safetensors"
    st_torch.save_file(tensors, str(path))
    return path, tensors


@pytest.mark.parametrize("world", [1, 2, 3, 4, 8])
def test_every_ranks_shard_equals_slicing_a_full_load(checkpoint, world):
    path, tensors = checkpoint
    full = gs.load_checkpoint(path)
    total = 0
    for rank in range(world):
        with gpufile.observe() as obs:
            got = gs.load_checkpoint(path, shard=PLAN, rank=rank, world_size=world)
        assert list(got) == list(full)
        for name, t in got.items():
            want = _expected(name, full[name], rank, world)
            assert t.dtype == want.dtype and t.shape == want.shape, name
            assert torch.equal(t, want), name
        # Only this rank's bytes are read.
        assert _bytes_read(obs) == sum(t.numel() * t.element_size() for t in got.values())
        total += _bytes_read(obs)
    replicated = sum(t.numel() * t.element_size() for n, t in tensors.items()
                     if _expected(n, t, 0, 2) is t)
    size = sum(t.numel() * t.element_size() for t in tensors.values())
    assert total == size + (world - 1) * replicated


def test_own_memory_a_filter_and_numpy_read_the_same_shards(checkpoint):
    path, tensors = checkpoint
    names = ["model.layers.0.self_attn.o_proj.weight", "model.layers.0.mlp.down_proj.weight"]
    got = gs.load_checkpoint(path, filter=names, shard=PLAN, rank=1, world_size=2,
                             own_memory=True)
    for n in names:
        assert torch.equal(got[n], _expected(n, tensors[n], 1, 2))
        assert got[n].is_contiguous()
    got = gs.load_checkpoint(path, framework="numpy", filter=names[:1],
                             shard={"*o_proj": -1}, rank=0, world_size=2)
    np.testing.assert_array_equal(got[names[0]], tensors[names[0]][:, :4].numpy())


@pytest.mark.parametrize("shard,kw,message", [
    ({"*q_proj": "colwize"}, {}, 'unknown split "colwize"'),
    ({"*q_proj": 2}, {}, "dimension 2 (Dim(2)) is out of range"),
    ({"model.step": "colwise"}, {}, 'tensor "model.step" of shape []'),
    (PLAN, {"rank": 2, "world_size": 2}, "rank 2 is not one of world_size 2 ranks"),
    (PLAN, {"rank": 0, "world_size": 0}, "world_size 0"),
])
def test_a_bad_sharding_is_a_valueerror_and_reads_nothing(checkpoint, shard, kw, message):
    path, _ = checkpoint
    kw = {"rank": 0, "world_size": 2, **kw}
    with gpufile.observe() as obs:
        with pytest.raises(ValueError) as e:
            gs.load_checkpoint(path, shard=shard, **kw)
    assert message in str(e.value)
    assert _bytes_read(obs) == 0


def test_shard_arguments_are_checked_in_python(checkpoint):
    path, _ = checkpoint
    with pytest.raises(ValueError, match="needs rank= and world_size="):
        gs.load_checkpoint(path, shard=PLAN)
    with pytest.raises(ValueError, match="pass shard= too"):
        gs.load_checkpoint(path, rank=0, world_size=2)
    with pytest.raises(TypeError, match="shard must be a mapping"):
        gs.load_checkpoint(path, shard=["colwise"], rank=0, world_size=2)
    with pytest.raises(ValueError, match="rank must not be negative"):
        gs.load_checkpoint(path, shard=PLAN, rank=-1, world_size=2)


# Index forms safetensors' get_slice takes (and NumPy's steps it does not).
KEYS = [np.s_[:], np.s_[1:3], np.s_[:, 2:4], np.s_[:, :, 1:5], np.s_[1, :, 3:], np.s_[..., 2],
        np.s_[:, 1], np.s_[2:2], np.s_[:, 0:0], np.s_[-1, 1:, -2], np.s_[0:3:2, 1:4],
        np.s_[:, ::2, 1:6:2], np.s_[..., ::3], np.s_[::-1], np.s_[:, ::-2, 5:1:-1], (),
        np.s_[1:, ...]]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.uint8, torch.float64])
@pytest.mark.parametrize("key", KEYS, ids=[repr(k) for k in KEYS])
def test_get_slice_equals_safetensors_and_reads_only_what_it_returns(tmp_path, dtype, key):
    g = torch.Generator().manual_seed(3)
    t = (torch.randn(4, 5, 7, generator=g) * 50).to(dtype)
    path = tmp_path / "t.safetensors"
    st_torch.save_file({"t": t, "e": torch.zeros(0, 3, dtype=dtype)}, str(path))
    steps = [k.step for k in (key if isinstance(key, tuple) else (key,))
             if isinstance(k, slice) and k.step is not None]
    with gs.safe_open(path, "pt") as f:
        with gpufile.observe() as obs:
            got = f.get_slice("t")[key]
        assert f.get_slice("e")[:, 1:].shape == (0, 2)
    n = np.arange(t.numel()).reshape(t.shape)[key]  # which elements the index names
    want = t.flatten()[torch.from_numpy(np.ascontiguousarray(n).reshape(-1))].reshape(n.shape)
    assert got.dtype == dtype and got.shape == want.shape and torch.equal(got, want)
    assert got.is_contiguous()
    if all(s > 0 for s in steps):  # safetensors takes positive steps only
        with st.safe_open(str(path), "pt") as ref:
            assert torch.equal(ref.get_slice("t")[key], got)
    if not steps or key == np.s_[0:3:2, 1:4]:  # no step in the last dimension: exact
        assert _bytes_read(obs) == got.numel() * got.element_size()
    assert obs.report["gpufile-posix"]["ops"] == (1 if got.numel() else 0)


def test_get_slice_of_a_column_block_reads_only_those_columns(tmp_path):
    a = np.arange(64 * 100, dtype=np.float32).reshape(64, 100)
    path = tmp_path / "w.safetensors"
    stn.save_file({"w": a}, str(path))
    with gs.safe_open(path, "numpy") as f:
        sl = f.get_slice("w")
        for r in range(4):  # a row-parallel rank's columns: one range per row, one request
            with gpufile.observe() as obs:
                part = sl[:, r * 25:(r + 1) * 25]
            np.testing.assert_array_equal(part, a[:, r * 25:(r + 1) * 25])
            assert _bytes_read(obs) == 64 * 25 * 4
            assert obs.report["gpufile-posix"]["ops"] == 1


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ranks_as_processes_read_the_checkpoint_once(checkpoint):
    world = 2
    dist = pytest.importorskip("torch.distributed")
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    path, tensors = checkpoint
    port = _port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KVIKIO_", "GPUFILE_"))}
    env["GPUFILE_NUM_THREADS"] = "2"
    replicated = {n for n, t in tensors.items() if _expected(n, t, 0, 2) is t}
    procs = [subprocess.Popen([sys.executable, WORKER, str(r), str(world), str(port), str(path),
                               json.dumps(PLAN), json.dumps(sorted(replicated))],
                              stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env)
             for r in range(world)]
    outs = [p.communicate(timeout=120) for p in procs]
    reports = []
    for r, (p, (out, err)) in enumerate(zip(procs, outs)):
        assert p.returncode == 0 and out.strip(), f"rank {r}: {err[-3000:]}"
        reports.append(json.loads(out.strip().splitlines()[-1]))
    size = lambda names: sum(tensors[n].numel() * tensors[n].element_size() for n in names)
    sharded = set(tensors) - replicated
    for rep in reports:
        assert rep["bytes"] == rep["sharded"] + rep["replicated"]
        assert rep["replicated"] == size(replicated)  # read whole on every rank
        assert rep["gathered_equal"], rep  # rank 0 put the shards back together
    # The sharded tensors' bytes are read once, over all ranks.
    assert sum(rep["sharded"] for rep in reports) == size(sharded)


GPU_REASON = gpu_reason()


@pytest.mark.gpu
@pytest.mark.skipif(GPU_REASON is not None, reason=GPU_REASON or "no CUDA device")
@pytest.mark.parametrize("framework", ["pt", "cupy"])
def test_shards_and_slices_land_in_gpu_memory_the_framework_allocated(checkpoint, framework):
    import cupy as cp
    path, tensors = checkpoint
    names = [n for n, t in tensors.items() if framework == "pt" or t.dtype != torch.bfloat16]
    for rank in range(3):
        with gpufile.observe() as obs:
            got = gs.load_checkpoint(path, "cuda:0", framework=framework, filter=names,
                                     shard=PLAN, rank=rank, world_size=3)
        for n in names:
            want = _expected(n, tensors[n], rank, 3)
            host = got[n].cpu() if framework == "pt" else torch.from_numpy(cp.asnumpy(got[n]))
            assert tuple(host.shape) == tuple(want.shape) and torch.equal(host, want), n
        paths = obs.report.paths
        assert paths["gpufile-posix"]["bytes"] + paths["cufile"]["bytes"] == \
            sum(_expected(n, tensors[n], rank, 3).numel() * tensors[n].element_size()
                for n in names)
    with gs.safe_open(path, framework, device=0) as f:
        w = "model.layers.0.self_attn.o_proj.weight"
        part = f.get_slice(w)[:, 2:5]
        host = part.cpu() if framework == "pt" else torch.from_numpy(cp.asnumpy(part))
        assert torch.equal(host, tensors[w][:, 2:5])
