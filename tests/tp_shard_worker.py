"""One rank of a tensor-parallel load (tests/test_tp_shard.py starts one process per rank).

Usage: tp_shard_worker.py RANK WORLD PORT CHECKPOINT PLAN_JSON REPLICATED_JSON
Loads its shard (rank and world size from the gloo process group), gathers every rank's shards
to check they tile each full tensor, and prints a JSON line: bytes read, of them the sharded
and the replicated tensors', and whether the gathered shards equal a full load.
"""

import json
import sys

import torch
import torch.distributed as dist

import gpufile
import gpufile.safetensors as gs


def main() -> None:
    rank, world, port = (int(a) for a in sys.argv[1:4])
    path, plan, replicated = sys.argv[4], json.loads(sys.argv[5]), set(json.loads(sys.argv[6]))
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    with gpufile.observe() as obs:
        mine = gs.load_checkpoint(path, shard=plan)  # rank and world size: the group's
    nbytes = {n: t.numel() * t.element_size() for n, t in mine.items()}
    parts: list = [None] * world
    dist.all_gather_object(parts, mine)
    full = gs.load_checkpoint(path)
    equal = True
    for name, whole in full.items():
        shards = [p[name] for p in parts]
        dims = [d for d in range(whole.dim()) if any(s.shape[d] != whole.shape[d] for s in shards)]
        if name in replicated or not dims:
            equal &= all(torch.equal(s, whole) for s in shards)
        else:
            equal &= len(dims) == 1 and torch.equal(torch.cat(shards, dims[0]), whole)
    dist.destroy_process_group()
    print(json.dumps({
        "bytes": obs.report["gpufile-posix"]["bytes"],
        "sharded": sum(b for n, b in nbytes.items() if n not in replicated),
        "replicated": sum(b for n, b in nbytes.items() if n in replicated),
        "gathered_equal": bool(equal),
    }), flush=True)


if __name__ == "__main__":
    main()
