"""Async saves that block for milliseconds: GPU tensors snapshotted in spare GPU memory by
device-to-device copies where ``async_save_device_limit`` and the GPU's free memory allow, else
in pinned host memory; the future (and the DCP writer) say which and why. Every file is checked
against the tensors as they were when the call returned.

Needs a GPU with PyTorch; elsewhere every test here skips with the reason.
"""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")

import gpufile.safetensors as gs  # noqa: E402
from gpufile import defaults  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(),
                                                  reason="no CUDA device for PyTorch")]

MiB = 1 << 20


def _state(n_tensors=4, mib=16, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return {f"layer.{i}.w": torch.randn(mib * MiB // 2, generator=g, device="cuda",
                                        dtype=torch.bfloat16).view(-1, 1024)
            for i in range(n_tensors)}


def _changed_after_return(state):
    for v in state.values():
        v.fill_(-7)  # queued on the current stream right after async_save returned


def test_a_snapshot_in_gpu_memory_holds_the_tensors_as_they_were(tmp_path):
    state = _state()
    expect = {k: v.cpu() for k, v in state.items()}
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    fut = gs.async_save(state, tmp_path / "m.safetensors")
    _changed_after_return(state)
    staging = fut.staging()
    assert staging["where"] == "device", staging
    assert staging["bytes"] == 4 * 16 * MiB
    assert staging["reason"].startswith("a snapshot of 67108864 bytes fits async_save_device_limit")
    assert fut.result(timeout=120) is None
    back = gs.load_file(tmp_path / "m.safetensors")
    for k, v in expect.items():
        assert torch.equal(back[k], v), k
    assert torch.cuda.memory_allocated() == before, "the snapshot is let go once written"


def test_a_sharded_checkpoint_from_a_gpu_snapshot(tmp_path):
    state = _state(6, 4, seed=1)
    expect = {k: v.cpu() for k, v in state.items()}
    fut = gs.async_save(state, tmp_path / "ck", sharded=True, max_shard_size=10 * MiB)
    _changed_after_return(state)
    assert fut.staging()["where"] == "device"
    index = fut.result(timeout=120)
    assert len(set(index["weight_map"].values())) == 3
    for k, v in gs.load_checkpoint(tmp_path / "ck", device="cpu").items():
        assert torch.equal(v, expect[k]), k


def test_over_the_device_limit_the_snapshot_goes_to_pinned_memory(tmp_path):
    state = _state()
    expect = {k: v.cpu() for k, v in state.items()}
    for limit, why in [(0, "async_save_device_limit is 0"),
                       (MiB, "a snapshot of 67108864 bytes is more than async_save_device_limit "
                             "(1048576 bytes)")]:
        with defaults.set("async_save_device_limit", limit):
            fut = gs.async_save(state, tmp_path / f"m{limit}.safetensors")
        assert fut.staging() == {"where": "pinned", "bytes": 4 * 16 * MiB, "reason": why}
        fut.result(timeout=120)
        back = gs.load_file(tmp_path / f"m{limit}.safetensors")
        assert all(torch.equal(back[k], v) for k, v in expect.items())


def test_with_little_free_gpu_memory_the_snapshot_goes_to_pinned_memory(tmp_path):
    state = _state(2, 64, seed=2)  # 128 MiB
    expect = {k: v.cpu() for k, v in state.items()}
    free, _ = torch.cuda.mem_get_info()
    # Leave less than twice the snapshot free: a snapshot would take over half of it.
    hog = torch.empty(free - 200 * MiB, dtype=torch.uint8, device="cuda")
    try:
        fut = gs.async_save(state, tmp_path / "m.safetensors")
        _changed_after_return(state)
        staging = fut.staging()
        assert staging["where"] == "pinned", staging
        assert "would take more than half of its" in staging["reason"], staging
        fut.result(timeout=120)
    finally:
        del hog
        torch.cuda.empty_cache()
    back = gs.load_file(tmp_path / "m.safetensors")
    assert all(torch.equal(back[k], v) for k, v in expect.items())


def test_the_dcp_writer_stages_in_gpu_memory_too(tmp_path):
    dcp = pytest.importorskip("torch.distributed.checkpoint")
    import gpufile.torch as gt

    sd = {"w": _state(1, 8)["layer.0.w"], "b": torch.arange(10.0), "n": 3}
    expect = {"w": sd["w"].cpu(), "b": sd["b"].clone()}
    writer = gt.FileSystemWriter(tmp_path / "ck")
    fut = dcp.async_save(sd, storage_writer=writer)
    sd["w"].fill_(0)
    assert writer.staging["where"] == "pinned"  # a CPU tensor is in it
    fut.result()
    out = {"w": torch.zeros_like(expect["w"]), "b": torch.zeros(10), "n": 0}
    dcp.load(out, storage_reader=gt.FileSystemReader(tmp_path / "ck"))
    assert torch.equal(out["w"], expect["w"]) and torch.equal(out["b"], expect["b"])
    gpu_only = {"w": _state(1, 8, seed=3)["layer.0.w"]}
    expect_w = gpu_only["w"].cpu()
    writer = gt.FileSystemWriter(tmp_path / "ck2")
    fut = dcp.async_save(gpu_only, storage_writer=writer)
    gpu_only["w"].fill_(0)
    assert writer.staging["where"] == "device", writer.staging
    fut.result()
    out = {"w": torch.zeros_like(expect_w)}
    dcp.load(out, storage_reader=gt.FileSystemReader(tmp_path / "ck2"))
    assert torch.equal(out["w"], expect_w)
    assert os.path.exists(tmp_path / "ck2" / ".metadata")
