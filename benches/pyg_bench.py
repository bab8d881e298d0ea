"""Node features for sampled subgraphs: feature rows per second into the GPU (issue 41, item 5).

    python benches/pyg_bench.py [--table-gb 32] [--dim 1024] [--batch-size 1024]
                                [--num-neighbors 10,10] [--batches 20] [--runs 5]
                                [--num-threads 16] [--degree 10] [--cold] [--device cuda]
                                [--dir DIR] [--json out.json]
    python benches/pyg_bench.py --quick          # a small table, runs on any machine (CPU)

A float32 table of --dim features a node (4 KiB rows at the default 1024) and --table-gb
gigabytes (default 32: more than a GPU that trains would keep for features) is made in (pinned)
host memory and put into a ``gpufile.pyg.FeatureStore`` (written through gpufile). A random graph
of one node per row (--degree edges a node) is sampled by PyG's ``NeighborSampler`` (two hops of
--num-neighbors, batches of --batch-size seeds); the same --batches subgraphs, sampled once
before any timing, are fetched by each way:

    pinned + torch index   the table in pinned host memory, ``torch.index_select`` of a batch's
                           nodes into a pinned staging buffer, copied to the device
    memmap + copy          ``np.memmap`` of the store's rows file, indexed by NumPy, copied
    gpufile FeatureStore   ``FeatureStore(device=...).multi_get_tensor``: ``read_rows`` of the
                           rows file straight into a tensor on the device

and ``NeighborLoader((features, graph))`` end to end (sampling included; PyG's in-memory
``LocalGraphStore``) with PyG's in-memory ``LocalFeatureStore`` and with the gpufile store.
Each row is the median of --runs runs after one untimed run: feature rows per second (and
GB/s). Every run is verified: 256 sampled rows of every batch against the table's formula.
--cold drops the rows file from the page cache (``posix_fadvise(DONTNEED)``) before every run
of the file-backed ways. --device cpu (the default where torch sees no CUDA device) fetches
into host memory: no pinning and no copy.

PyG samples with pyg-lib or torch-sparse; where neither is installed (pyg-lib is not on PyPI,
torch-sparse only as a 2023 source package), ``gpufile.pyg.TorchNeighborSampler`` samples the
same way (uniform, without replacement) in plain torch, so the loaders run anywhere.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import sys
import tempfile
import time
import warnings
from typing import Any, Callable

import numpy as np
import torch
import torch_geometric.typing
from torch_geometric.distributed import LocalFeatureStore, LocalGraphStore
from torch_geometric.sampler import NodeSamplerInput

import gpufile
from gpufile.pyg import FeatureStore, TorchNeighborSampler, neighbor_loader


def sampler_for(data: Any, num_neighbors: list[int]) -> TorchNeighborSampler:
    with warnings.catch_warnings():
        # PyG's notice that it samples best with pyg-lib: known, and said in the header.
        warnings.filterwarnings("ignore", message=".*without a 'pyg-lib' installation")
        return TorchNeighborSampler(data, num_neighbors)


# --- the table -----------------------------------------------------------------------------

def expected_rows(nodes: torch.Tensor, dim: int) -> torch.Tensor:
    """The int32 words of rows ``nodes``: word j of row i is i * dim + j (mod 2**32), word 0
    is i itself, so a row read from the wrong place never matches."""
    nodes = nodes.to("cpu", torch.int64)
    words = nodes[:, None] * dim + torch.arange(dim)
    words[:, 0] = nodes
    return ((words + 2**31) % 2**32 - 2**31).to(torch.int32)


def make_table(n_rows: int, dim: int, pinned: bool) -> torch.Tensor:
    x = torch.empty((n_rows, dim), dtype=torch.float32, pin_memory=pinned)
    words = x.view(torch.int32)
    step = max(1, (64 << 20) // (dim * 8))
    for r0 in range(0, n_rows, step):
        words[r0:r0 + step] = expected_rows(torch.arange(r0, min(n_rows, r0 + step)), dim)
    return x


def random_graph(n_nodes: int, degree: int, seed: int = 0) -> LocalGraphStore:
    """A random graph of ``n_nodes`` nodes and ``degree`` edges a node in PyG's in-memory
    graph store."""
    g = torch.Generator().manual_seed(seed)
    edge_index = torch.randint(0, n_nodes, (2, n_nodes * degree), generator=g)
    return LocalGraphStore.from_data(edge_id=torch.arange(edge_index.shape[1]),
                                     edge_index=edge_index, num_nodes=n_nodes)


def presample(data: Any, num_neighbors: list[int], batch_size: int, batches: int,
              seed: int = 0) -> list[torch.Tensor]:
    """The nodes of --batches sampled subgraphs (seeds first), as PyG's loader samples them."""
    torch.manual_seed(seed)
    sampler = sampler_for(data, num_neighbors)
    seeds = torch.randperm(sampler.num_nodes)[: batch_size * batches].view(batches, -1)
    return [sampler.sample_from_nodes(NodeSamplerInput(input_id=None, node=s)).node
            for s in seeds]


def drop_cache(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


# --- the ways ------------------------------------------------------------------------------

def check(name: str, nodes: torch.Tensor, out: torch.Tensor, dim: int) -> None:
    pick = torch.randperm(nodes.numel(), generator=torch.Generator().manual_seed(7))[:256]
    got = out[pick.to(out.device)].view(torch.int32).cpu()
    if out.shape != (nodes.numel(), dim) or not torch.equal(got, expected_rows(nodes[pick], dim)):
        raise SystemExit(f"{name}: the rows fetched differ from the table")


def way_pinned(x: torch.Tensor, device: torch.device, max_rows: int) -> Callable:
    cuda = device.type == "cuda"
    staging = torch.empty((max_rows if cuda else 0, x.shape[1]), dtype=x.dtype,
                          pin_memory=cuda)

    def fetch(nodes: torch.Tensor) -> torch.Tensor:
        if not cuda:
            return torch.index_select(x, 0, nodes)
        buf = staging[: nodes.numel()]
        torch.index_select(x, 0, nodes, out=buf)
        out = buf.to(device, non_blocking=True)
        torch.cuda.current_stream(device).synchronize()  # the staging buffer is reused
        return out

    return fetch


def way_memmap(path: str, shape: tuple[int, int], device: torch.device) -> Callable:
    mm = np.memmap(path, dtype=np.float32, mode="r", shape=shape)

    def fetch(nodes: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(mm[nodes.numpy()]).to(device)

    return fetch


def way_gpufile(store: FeatureStore) -> Callable:
    attrs = store.get_all_tensor_attrs()

    def fetch(nodes: torch.Tensor) -> torch.Tensor:
        attrs[0].index = nodes
        return store.multi_get_tensor(attrs)[0]

    return fetch


class Bench:
    def __init__(self, args: argparse.Namespace, device: torch.device) -> None:
        self.args, self.device = args, device
        self.results: list[dict[str, Any]] = []

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def measure(self, name: str, batches: list[torch.Tensor], fetch: Callable,
                before: Callable[[], None] = lambda: None) -> None:
        dim = self.args.dim
        n_rows = sum(b.numel() for b in batches)
        walls = []
        for i in range(self.args.runs + 1):
            before()
            self.sync()
            t0 = time.perf_counter()
            outs = [fetch(b) for b in batches]
            self.sync()
            wall = time.perf_counter() - t0
            for nodes, out in zip(batches, outs):
                check(name, nodes, out, dim)
            del outs
            if i:  # the first run is untimed (pools, pinned buffers, page tables warm up)
                walls.append(wall)
        self.record(name, n_rows, walls)

    def record(self, name: str, n_rows: int, walls: list[float], extra: str = "") -> None:
        wall = statistics.median(walls)
        row = {"name": name, "rows": n_rows, "row_bytes": self.args.dim * 4, "median_s": wall,
               "rows_per_s": n_rows / wall, "gb_per_s": n_rows * self.args.dim * 4 / wall / 1e9,
               "runs_s": walls, "device": str(self.device), "cold": self.args.cold}
        self.results.append(row)
        print(f"  {name:<38} {row['rows_per_s'] / 1e6:>8.3f} M rows/s {row['gb_per_s']:>7.2f} "
              f"GB/s{extra}", flush=True)

    def loader(self, name: str, data: Any, before: Callable[[], None]) -> None:
        """``NeighborLoader`` end to end over --batches batches, sampling included."""
        args, walls, n_rows = self.args, [], 0
        for i in range(args.runs + 1):
            before()
            torch.manual_seed(0)
            loader = neighbor_loader(data, args.num_neighbors, batch_size=args.batch_size,
                                     input_nodes=torch.arange(args.n_rows), shuffle=True)
            self.sync()
            t0 = time.perf_counter()
            got = []
            for b, batch in enumerate(loader):
                x = batch.x.to(self.device, non_blocking=True)
                got.append((batch.n_id, x))
                if b + 1 == args.batches:
                    break
            self.sync()
            walls.append(time.perf_counter() - t0)
            for nodes, x in got:
                check(name, nodes, x, args.dim)
            n_rows = sum(n.numel() for n, _ in got)
        self.record(name, n_rows, walls[1:], "  (sampling included)")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--table-gb", type=float, default=32.0)
    ap.add_argument("--dim", type=int, default=1024, help="float32 features a row")
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--num-neighbors", default="10,10")
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--degree", type=int, default=10)
    ap.add_argument("--num-threads", type=int, default=16)
    ap.add_argument("--cold", action="store_true")
    ap.add_argument("--device", default=None, help="cuda or cpu (default: cuda where it works)")
    ap.add_argument("--quick", action="store_true",
                    help="a 32 MiB table, 3 batches of 256, 2 runs: a smoke test")
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    if args.quick:
        args.table_gb, args.batches, args.batch_size, args.runs = 1 / 32, 3, 256, 2
    args.num_neighbors = [int(k) for k in args.num_neighbors.split(",")]
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    with gpufile.defaults.set({"num_threads": args.num_threads}):  # restored after
        run(args, device)


def run(args: argparse.Namespace, device: torch.device) -> None:
    row_bytes = args.dim * 4
    n_rows = int(args.table_gb * 1e9) // row_bytes
    n_rows = args.n_rows = max(n_rows, args.batch_size * args.batches)
    print(f"table: {n_rows} rows of {row_bytes} B ({n_rows * row_bytes / 1e9:.2f} GB), "
          f"device {device}, batches of {args.batch_size} seeds, {args.num_neighbors} "
          f"neighbours, {args.batches} batches, median of {args.runs}"
          f"{', cold' if args.cold else ''}; sampler: "
          f"{'PyG native' if torch_geometric.typing.WITH_PYG_LIB else 'TorchNeighborSampler'}; "
          f"torch threads {torch.get_num_threads()}, gpufile threads {args.num_threads}",
          flush=True)
    t0 = time.perf_counter()
    x = make_table(n_rows, args.dim, pinned=device.type == "cuda")
    graph = random_graph(n_rows, args.degree)
    print(f"  made the table and graph in {time.perf_counter() - t0:.1f} s", flush=True)
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="pyg-bench-") as root:
        store = FeatureStore(root, device=device, durable=False)
        t0 = time.perf_counter()
        store.put_tensor(x, group_name=None, attr_name="x", index=None)
        put_s = time.perf_counter() - t0
        print(f"  put_tensor: {x.nbytes / put_s / 1e9:.2f} GB/s", flush=True)
        rows_path = store.rows_path(None, "x")
        before = (lambda: drop_cache(rows_path)) if args.cold else (lambda: None)
        in_memory = LocalFeatureStore.from_data(node_id=torch.arange(n_rows), x=x)
        batches = presample((in_memory, graph), args.num_neighbors, args.batch_size,
                            args.batches)
        per_batch = statistics.mean(b.numel() for b in batches)
        print(f"  {per_batch:.0f} nodes a batch on average", flush=True)
        b = Bench(args, device)
        b.measure("pinned + torch index + copy", batches,
                  way_pinned(x, device, max(t.numel() for t in batches)))
        b.measure("memmap + copy", batches, way_memmap(rows_path, tuple(x.shape), device),
                  before)
        b.measure("gpufile FeatureStore", batches, way_gpufile(store), before)
        b.loader("NeighborLoader, PyG in-memory store", (in_memory, graph), lambda: None)
        b.loader("NeighborLoader, gpufile FeatureStore", (store, graph), before)
        store.close()
    base = b.results[0]["rows_per_s"]
    print(f"\n{'way':<38} {'M rows/s':>9} {'GB/s':>7} {'x pinned':>9}")
    for r in b.results:
        print(f"{r['name']:<38} {r['rows_per_s'] / 1e6:>9.3f} {r['gb_per_s']:>7.2f} "
              f"{r['rows_per_s'] / base:>9.2f}")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(
            {"args": {k: v for k, v in vars(args).items()}, "put_gb_per_s": x.nbytes / put_s / 1e9,
             "rows": b.results}, indent=1))


if __name__ == "__main__":
    sys.exit(main())
