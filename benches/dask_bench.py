"""Dask arrays from a hot file into GPU blocks: gpufile.dask.read_array against dask's usual
per-block ``np.fromfile`` + ``cupy.asarray``, one dask_cuda worker per GPU, 1 and 2 GPUs.

    python benches/dask_bench.py [--size 8GiB] [--chunk 256MiB] [--runs 3] [--threads 1,4]
                                 [--workers 1,2] [--file PATH] [--json out.json] [--host]
                                 [--compat-mode on]

The file (random bytes, read once beforehand so that it is in the page cache) is a 1-D uint8
array cut into ``--chunk`` blocks. Each run persists the whole array on the cluster (every block
read into its worker's GPU) and waits: aggregate GB/s = file size / wall time; one untimed run
first (worker imports, gpufile's threads and pinned buffers). Every block is
then checked on its worker against the same bytes read with plain Python I/O. Prints a table
and writes JSON to ``--json`` or, if set, ``$OUT/dask_bench.json``.

Needs CuPy, dask[array], distributed and dask_cuda, and at least one GPU; exits with status 2
and the reason otherwise. ``--host`` runs the same comparison with NumPy blocks on a
``LocalCluster`` of worker processes (no GPU needed): the script's own check, and host numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np


def _size(text: str) -> int:
    units = {"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40, "b": 1}
    t = text.strip().lower()
    for unit, mult in units.items():
        if t.endswith(unit):
            return int(float(t[: -len(unit)]) * mult)
    return int(t)


def _ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v]


def requirements(host: bool) -> str | None:
    """Why the benchmark cannot run here, or None."""
    try:
        import dask.array  # noqa: F401
        import distributed  # noqa: F401
    except ImportError as e:
        return f"needs dask[array] and distributed ({e})"
    if host:
        return None
    try:
        import cupy
    except ImportError as e:
        return f"needs CuPy ({e}); --host runs the host-memory variant"
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # noqa: BLE001 - no driver, no device: say which
        return f"no usable CUDA device ({type(e).__name__}: {e}); --host runs the host variant"
    if n < 1:
        return "no CUDA device; --host runs the host-memory variant"
    try:
        import dask_cuda  # noqa: F401
    except ImportError as e:
        return f"needs dask_cuda for one worker per GPU ({e})"
    return None


# --- per-block functions (run on the workers) ----------------------------------------------------


def _fromfile_block(path: str, host: bool, block_info=None):
    """dask's usual raw reader: np.fromfile of the block's bytes, then onto the GPU."""
    start, stop = block_info[None]["array-location"][0]
    data = np.fromfile(path, dtype=np.uint8, count=stop - start, offset=start)
    if host:
        return data
    import cupy

    return cupy.asarray(data)


def _check_block(block, path: str, block_info=None):
    """True when ``block`` holds the file's bytes, read here with plain Python I/O."""
    start, stop = block_info[0]["array-location"][0]
    ref = np.empty(stop - start, dtype=np.uint8)
    with open(path, "rb", buffering=0) as f:
        f.seek(start)
        assert f.readinto(memoryview(ref)) == stop - start
    got = block if isinstance(block, np.ndarray) else block.get()
    return np.array([bool(np.array_equal(got, ref))])


# --- the benchmark --------------------------------------------------------------------------------


def make_file(path: str, size: int) -> None:
    if not (os.path.exists(path) and os.path.getsize(path) == size):
        rng = np.random.default_rng(0)
        with open(path, "wb") as f:
            for off in range(0, size, 256 << 20):
                f.write(rng.integers(0, 256, min(256 << 20, size - off), dtype=np.uint8).data)
    with open(path, "rb", buffering=0) as f:  # into the page cache
        buf = bytearray(64 << 20)
        while f.readinto(buf):
            pass


def build(reader: str, path: str, size: int, chunk: int, host: bool):
    import dask.array as da

    import gpufile.dask

    if reader == "gpufile":
        like = None
        if not host:
            import cupy

            like = cupy.empty(())
        return gpufile.dask.read_array(path, (size,), np.uint8, chunk, like=like)
    if host:
        meta = np.empty((0,), np.uint8)
    else:
        import cupy

        meta = cupy.empty((0,), np.uint8)
    chunks = ((chunk,) * (size // chunk) + ((size % chunk,) if size % chunk else ()),)
    return da.map_blocks(_fromfile_block, path=path, host=host, chunks=chunks, dtype=np.uint8,
                         meta=meta)


def cluster(workers: int, threads: int, host: bool):
    import distributed

    if host:
        return distributed.LocalCluster(n_workers=workers, threads_per_worker=threads,
                                        processes=True, dashboard_address=None)
    import dask_cuda

    return dask_cuda.LocalCUDACluster(CUDA_VISIBLE_DEVICES=list(range(workers)),
                                      threads_per_worker=threads, dashboard_address=None)


def run_config(client, reader, path, size, chunk, runs, host):
    """Wall times of ``runs`` persists (after one untimed warm-up); checks the last one."""
    import distributed

    times = []
    for i in range(runs + 1):
        x = build(reader, path, size, chunk, host)
        t = time.perf_counter()
        x = x.persist()
        distributed.wait(x)
        if i:
            times.append(time.perf_counter() - t)
        if i == runs:
            ok = x.map_blocks(_check_block, path=path, chunks=(1,), dtype=bool,
                              meta=np.empty((0,), bool)).compute()
            if not ok.all():
                raise SystemExit(f"dask_bench: {reader}: {int((~ok).sum())} of {ok.size} blocks "
                                 "differ from the file")
        client.cancel(x)
        del x
        _wait_released(client)
    return times


def _wait_released(client, timeout: float = 60.0) -> None:
    """Until the workers hold no blocks, then their CuPy pools are emptied."""
    end = time.monotonic() + timeout
    while any(client.has_what().values()) and time.monotonic() < end:
        time.sleep(0.05)
    client.run(_free_pools)


def _free_pools():
    try:
        import cupy

        cupy.get_default_memory_pool().free_all_blocks()
    except ImportError:
        pass


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=_size, default=8 << 30)
    ap.add_argument("--chunk", type=_size, default=256 << 20)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=_ints, default=[1, 4], help="threads per worker, e.g. 1,4")
    ap.add_argument("--workers", type=_ints, default=[1, 2], help="worker counts (GPUs), e.g. 1,2")
    ap.add_argument("--readers", default="gpufile,fromfile")
    ap.add_argument("--file", default="/tmp/gpufile-dask-bench.bin")
    ap.add_argument("--json")
    ap.add_argument("--host", action="store_true", help="NumPy blocks on a LocalCluster")
    ap.add_argument("--compat-mode", default="on",
                    help="gpufile's compat_mode in the workers (default on, as multi_gpu_bench)")
    args = ap.parse_args()
    if args.size <= 0 or args.chunk <= 0 or args.runs <= 0:
        ap.error("--size, --chunk and --runs must be positive")

    why = requirements(args.host)
    if why:
        print(f"dask_bench: cannot run: {why}", file=sys.stderr)
        return 2

    import distributed

    import gpufile

    if args.host:
        n_gpus = max(args.workers)
    else:
        import cupy

        n_gpus = cupy.cuda.runtime.getDeviceCount()
    counts = [w for w in args.workers if w <= n_gpus]
    skipped = [w for w in args.workers if w > n_gpus]
    if not counts:
        print(f"dask_bench: cannot run: {n_gpus} GPU(s), asked for {args.workers} workers",
              file=sys.stderr)
        return 2

    os.environ["GPUFILE_COMPAT_MODE"] = args.compat_mode  # the workers inherit it
    make_file(args.file, args.size)
    cached, total = gpufile.get_page_cache_info(args.file)
    rows = []
    for workers in counts:
        for threads in args.threads:
            with cluster(workers, threads, args.host) as c, distributed.Client(c) as client:
                num_threads = sorted(set(client.run(
                    lambda: gpufile.defaults.get("num_threads")).values()))
                modes = sorted(set(client.run(
                    lambda: gpufile.defaults.get("compat_mode").name).values()))
                for reader in args.readers.split(","):
                    times = run_config(client, reader, args.file, args.size, args.chunk,
                                       args.runs, args.host)
                    rows.append({
                        "reader": reader, "workers": workers, "threads_per_worker": threads,
                        "gpufile_num_threads": num_threads, "gpufile_compat_mode": modes,
                        "times_s": times,
                        "gbps_median": args.size / statistics.median(times) / 1e9,
                        "gbps_best": args.size / min(times) / 1e9,
                    })
                    r = rows[-1]
                    print(f"  {reader:9} workers={workers} threads={threads}: "
                          f"{r['gbps_median']:.1f} GB/s (best {r['gbps_best']:.1f})", flush=True)

    where = "host memory (NumPy blocks, LocalCluster)" if args.host else \
        "GPU memory (CuPy blocks, LocalCUDACluster, one worker per GPU)"
    print(f"\n{args.size / (1 << 30):.2f} GiB hot file ({cached / max(total, 1):.0%} in page "
          f"cache), {args.chunk >> 20} MiB blocks, into {where}; median of {args.runs}; "
          f"all blocks verified")
    print("| reader | workers | threads/worker | GB/s (median) | GB/s (best) |")
    print("| --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['reader']} | {r['workers']} | {r['threads_per_worker']} | "
              f"{r['gbps_median']:.1f} | {r['gbps_best']:.1f} |")
    if skipped:
        print(f"not run: {skipped} workers (only {n_gpus} GPU(s))")

    result = {"size": args.size, "chunk": args.chunk, "runs": args.runs, "host": args.host,
              "page_cache_fraction": cached / max(total, 1), "gpus": n_gpus,
              "gpufile_version": gpufile.__version__, "rows": rows, "not_run_workers": skipped}
    out = args.json or (os.path.join(os.environ["OUT"], "dask_bench.json")
                        if os.environ.get("OUT") else None)
    if out:
        with open(out, "w") as f:
            json.dump(result, f, indent=1)
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
