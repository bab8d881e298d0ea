"""One rank of a Distributed Checkpoint test (tests/test_dcp.py starts one process per rank).

Usage: dcp_worker.py ACTION WRITER_OR_READER RANK WORLD PORT DIRECTORY SEED
ACTION: save, async_save, load; WRITER_OR_READER: gpufile or torch. Prints "ok" on success.
"""

import os
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor

import gpufile.torch as gt


def state(rank: int, world: int, seed: int, mesh) -> dict:
    g = torch.Generator().manual_seed(seed)
    full = torch.randn(12, 5, generator=g)  # the same on every rank: sharded below
    return {
        "model": {
            "w": torch.randn(64, 33, generator=g),
            "b": torch.randn(7, generator=g).to(torch.bfloat16),
            "empty": torch.zeros(0, 3),
            "scalar": torch.tensor(3.5 + seed),
            "f8": torch.randn(16, generator=g).to(torch.float8_e4m3fn),
            "view": torch.arange(40.0).reshape(8, 5)[:, 1:4],  # not contiguous
            "sharded": distribute_tensor(full, mesh, [Shard(0)]),
        },
        "step": 100 + seed,
        "extra": {"lr": 0.5 * seed, "names": ["a", "b"]},
        f"rank{rank}": torch.full((3,), float(rank + 10 * seed)),
    }


def zeros_like(sd):
    if isinstance(sd, dict):
        return {k: zeros_like(v) for k, v in sd.items()}
    if isinstance(sd, torch.Tensor):
        z = torch.zeros_like(sd)
        return z
    return None


def check(got, want, where=""):
    if isinstance(want, dict):
        assert set(got) == set(want), (where, set(got), set(want))
        for k in want:
            check(got[k], want[k], f"{where}.{k}")
    elif isinstance(want, torch.Tensor):
        a, b = got, want
        if hasattr(a, "full_tensor"):
            a, b = a.full_tensor(), b.full_tensor()
        assert a.dtype == b.dtype and a.shape == b.shape, (where, a.dtype, b.dtype)
        assert torch.equal(a.view(torch.uint8) if a.dtype.itemsize == 1 else a,
                           b.view(torch.uint8) if b.dtype.itemsize == 1 else b), where
    else:
        assert got == want, (where, got, want)


def main() -> None:
    action, kind, rank, world, port, directory, seed = sys.argv[1:8]
    rank, world, seed = int(rank), int(world), int(seed)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    mesh = init_device_mesh("cpu", (world,))
    sd = state(rank, world, seed, mesh)
    if action in ("save", "async_save"):
        writer = (gt.FileSystemWriter(directory) if kind == "gpufile"
                  else dcp.FileSystemWriter(directory))
        if action == "save":
            dcp.save(sd, storage_writer=writer)
        else:
            expect = state(rank, world, seed, mesh)
            fut = dcp.async_save(sd, storage_writer=writer)
            # Changes after async_save returned do not reach the checkpoint.
            sd["model"]["w"].fill_(-1)
            sd[f"rank{rank}"].fill_(-1)
            fut.result()
            sd = expect
    elif action == "load_sharded":
        # A checkpoint saved by another number of ranks: each rank reads its new shard, a slice
        # of a saved one (read through torch.load and narrowed).
        reader = (gt.FileSystemReader(directory) if kind == "gpufile"
                  else dcp.FileSystemReader(directory))
        target = {"model": {"sharded": distribute_tensor(torch.zeros(12, 5), mesh, [Shard(0)]),
                            "w": torch.zeros(64, 33)}}
        dcp.load(target, storage_reader=reader)
        check(target, {"model": {"sharded": sd["model"]["sharded"], "w": sd["model"]["w"]}})
    else:
        reader = (gt.FileSystemReader(directory) if kind == "gpufile"
                  else dcp.FileSystemReader(directory))
        target = zeros_like(sd)
        target["model"]["sharded"] = distribute_tensor(torch.zeros(12, 5), mesh, [Shard(0)])
        target["step"] = 0
        target["extra"] = {"lr": 0.0, "names": []}
        dcp.load(target, storage_reader=reader)
        check(target, sd)
    dist.barrier()
    dist.destroy_process_group()
    print("ok", flush=True)
    # What this rank checks is done; the interpreter's teardown of gloo's threads aborts now
    # and then ("terminate called without an active exception"), which says nothing of the
    # checkpoint.
    os._exit(0)


if __name__ == "__main__":
    main()
