"""Many small ranges of one file into one array: gathers side by side (issue 27).

    python benches/ranges_bench.py [--file-size 4GiB] [--rows 4KiB:100000,4KiB:1000000,...]
                                   [--dest host,device] [--runs 5] [--num-threads 16]
                                   [--depth 64] [--cold-size 8GiB] [--cold-rows 100000]
                                   [--only GROUPS] [--libs gpufile,kvikio] [--dir DIR]
                                   [--json out.json]

Groups (``--only`` takes a comma list; default: all):

    hot    for each --rows entry (row size:count) and each --dest: random rows (row-aligned,
           seeded) of a hot file of --file-size gathered into one array (NumPy for host, CuPy
           for device) by
             gpufile read_rows          ``CuFile.read_rows(out, rows, row_bytes)``
             gpufile read_ranges        ``CuFile.read_ranges(out, offsets, row_bytes)``
             gpufile read_rows, GPU gather   (device only) ``read_rows`` with page-cache DMA
                                        allowed (``dma_cache_size``): gpufile's gather kernel
                                        copies the rows from the registered page cache
             gpufile pread loop         ``pread`` into row views, --depth futures in flight
             kvikio pread loop          the same with KvikIO (where it imports)
             naive preadv + 1 copy      one Python thread, ``os.preadv`` per row into pinned
                                        host memory (the output itself for host), then one
                                        copy to the GPU
    cold   --cold-rows random 4 KiB rows of a file of --cold-size, out of the page cache
           (``posix_fadvise(DONTNEED)`` before every run), read with O_DIRECT into aligned host
           memory: gpufile ``read_rows`` with ``auto_direct_io_read`` on, against a reference
           of --depth Python threads each doing O_DIRECT ``os.preadv`` of one row at a time
           (queue depth --depth, what ``fio --ioengine=psync --numjobs=64`` measures; fio is
           not carried).

Each row is the median of --runs runs after one untimed run: rows per second, GB/s, and the
submitting thread's CPU per range (``time.thread_time`` across the call that submits, for the
one-call gathers; across the whole loop for the loops). Every run is verified: 2,000 sampled
rows of the output (all of them if fewer) against the file. The JSON (--json) has every run;
the table comes last.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import pathlib
import statistics
import sys
import tempfile
import threading
import time
from typing import Any, Callable

import numpy as np

import gpufile

GROUPS = ("hot", "cold")
UNITS = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "B": 1}


def size(text: str) -> int:
    for unit, mul in UNITS.items():
        if text.endswith(unit):
            return int(float(text[: -len(unit)]) * mul)
    return int(text)


def human(n: int) -> str:
    for unit in ("GiB", "MiB", "KiB"):
        if n >= UNITS[unit] and n % UNITS[unit] == 0:
            return f"{n // UNITS[unit]}{unit}"
    return f"{n}B"


def make_file(path: pathlib.Path, nbytes: int) -> None:
    """A file of `nbytes` whose every 8-byte word is its own offset (any row verifies alone)."""
    if path.exists() and path.stat().st_size == nbytes:
        return
    chunk = 64 << 20
    with open(path, "wb") as f:
        for at in range(0, nbytes, chunk):
            n = min(chunk, nbytes - at)
            f.write(np.arange(at, at + n, 8, dtype=np.uint64)[: n // 8].tobytes())


def warm(path: pathlib.Path) -> None:
    with open(path, "rb") as f:
        while f.read(64 << 20):
            pass


def drop_cache(path: pathlib.Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.results: list[dict[str, Any]] = []

    def measure(self, group: str, name: str, case: str, n_rows: int, row_bytes: int,
                run: Callable[[], tuple[int, float]], ok: Callable[[], bool],
                before: Callable[[], None] = lambda: None) -> None:
        walls, cpus = [], []
        for i in range(self.args.runs + 1):
            before()
            t0 = time.perf_counter()
            nbytes, cpu = run()
            wall = time.perf_counter() - t0
            if nbytes != n_rows * row_bytes or not ok():
                raise SystemExit(f"{name} {case}: wrong bytes (got {nbytes}, or data differ)")
            if i:  # the first run is untimed (pools, rings and pinned buffers warm up)
                walls.append(wall)
                cpus.append(cpu)
        wall = statistics.median(walls)
        row = {
            "group": group, "name": name, "case": case, "rows": n_rows, "row_bytes": row_bytes,
            "median_s": wall, "rows_per_s": n_rows / wall,
            "gb_per_s": n_rows * row_bytes / wall / 1e9,
            "submit_cpu_us_per_range": statistics.median(cpus) / n_rows * 1e6,
            "runs_s": walls,
        }
        self.results.append(row)
        print(f"  {name:<26} {case:<22} {row['rows_per_s'] / 1e3:>10.1f} k rows/s "
              f"{row['gb_per_s']:>7.2f} GB/s  cpu {row['submit_cpu_us_per_range']:.3f} us/range",
              flush=True)


def verifier(out_host: Callable[[], np.ndarray], rows: np.ndarray, row_bytes: int
             ) -> Callable[[], bool]:
    pick = np.random.default_rng(7).choice(rows.size, min(rows.size, 2000), replace=False)
    words = row_bytes // 8

    def ok() -> bool:
        got = out_host()
        for i in pick:
            start = int(rows[i]) * row_bytes
            want = np.arange(start, start + row_bytes, 8, dtype=np.uint64)[:words]
            if not np.array_equal(got[i * row_bytes:(i + 1) * row_bytes].view(np.uint64), want):
                return False
        return True

    return ok


def g_hot(b: Bench, path: pathlib.Path, libs: dict[str, Any], cp: Any) -> None:
    args = b.args
    warm(path)
    for spec in args.rows.split(","):
        rb_text, count = spec.split(":")
        row_bytes, n = size(rb_text), int(count)
        n_file_rows = args.file_size // row_bytes
        rows = np.random.default_rng(n).integers(0, n_file_rows, n)
        offsets = rows * row_bytes
        for dest in args.dest.split(","):
            if dest == "device" and cp is None:
                print(f"  (device rows skipped: {CUPY_WHY})")
                continue
            case = f"{human(row_bytes)} x {n} {dest}"
            print(f"{case}:", flush=True)
            nbytes = n * row_bytes
            if dest == "host":
                out = np.zeros(nbytes, dtype=np.uint8)
                host = lambda out=out: out  # noqa: E731
            else:
                out = cp.zeros(nbytes, dtype=cp.uint8)
                host = lambda out=out: out.get()  # noqa: E731
            ok = verifier(host, rows, row_bytes)
            f = gpufile.CuFile(path)

            seen: dict[str, Any] = {}

            def rows_run() -> tuple[int, float]:
                c0 = time.thread_time()
                fut = f.read_rows(out, rows, row_bytes)
                cpu = time.thread_time() - c0
                got = fut.get()
                seen["report"] = fut.report()
                return got, cpu

            def ranges_run() -> tuple[int, float]:
                c0 = time.thread_time()
                fut = f.read_ranges(out, offsets, row_bytes)
                cpu = time.thread_time() - c0
                return fut.get(), cpu

            def loop(mod_file: Any) -> Callable[[], tuple[int, float]]:
                def run() -> tuple[int, float]:
                    c0 = time.thread_time()
                    q: collections.deque = collections.deque()
                    total = 0
                    for i in range(n):
                        if len(q) >= args.depth:
                            total += q.popleft().get()
                        view = out[i * row_bytes:(i + 1) * row_bytes]
                        q.append(mod_file.pread(view, row_bytes, int(offsets[i])))
                    while q:
                        total += q.popleft().get()
                    return total, time.thread_time() - c0
                return run

            b.measure("hot", "gpufile read_rows", case, n, row_bytes, rows_run, ok)
            b.results[-1]["report"] = seen["report"]
            print(f"    path: {seen['report']}")
            b.measure("hot", "gpufile read_ranges", case, n, row_bytes, ranges_run, ok)
            if dest == "device":
                # The GPU's own gather: page-cache DMA allowed for the whole file. The first
                # read of the file under it stages (a first read never registers), the next
                # ones register the granules the rows touch (timed apart), then the kernel
                # copies every row.
                with gpufile.defaults.set("dma_cache_size", args.file_size + (64 << 20)):
                    # Until every granule the rows touch is registered (one registration at a
                    # time, by whichever worker gets to it first: several reads).
                    warm_s, before = [], -1
                    while len(warm_s) < 2 or (len(warm_s) < 20
                                              and gpufile.dma_cache_registered() != before):
                        before = gpufile.dma_cache_registered()
                        t0 = time.perf_counter()
                        rows_run()
                        warm_s.append(round(time.perf_counter() - t0, 4))
                    print(f"    reads until registered: {warm_s} s "
                          f"({gpufile.dma_cache_registered() / 2**30:.2f} GiB registered)")
                    b.measure("hot", "gpufile read_rows, GPU gather", case, n, row_bytes,
                              rows_run, ok)
                    b.results[-1]["report"] = seen["report"]
                    print(f"    path: {seen['report']}")
                gpufile.dma_cache_clear()
            if n <= args.loop_max:
                b.measure("hot", f"gpufile pread loop {args.depth}", case, n, row_bytes,
                          loop(f), ok)
                if "kvikio" in libs:
                    kf = libs["kvikio"].CuFile(path, "r")
                    b.measure("hot", f"kvikio pread loop {args.depth}", case, n, row_bytes,
                              loop(kf), ok)
                    kf.close()
            b.measure("hot", "naive preadv + 1 copy", case, n, row_bytes,
                      naive(path, out, offsets, row_bytes, dest, cp), ok)
            f.close()


def naive(path: pathlib.Path, out: Any, offsets: np.ndarray, row_bytes: int, dest: str,
          cp: Any) -> Callable[[], tuple[int, float]]:
    n = offsets.size
    if dest == "host":
        staging = out
    else:
        mem = cp.cuda.alloc_pinned_memory(n * row_bytes)
        staging = np.frombuffer(mem, dtype=np.uint8, count=n * row_bytes)
    mv = memoryview(staging)
    offs = offsets.tolist()

    def run() -> tuple[int, float]:
        c0 = time.thread_time()
        fd = os.open(path, os.O_RDONLY)
        total = 0
        try:
            for i, off in enumerate(offs):
                total += os.preadv(fd, [mv[i * row_bytes:(i + 1) * row_bytes]], off)
        finally:
            os.close(fd)
        if dest != "host":
            out.set(staging)
            cp.cuda.runtime.deviceSynchronize()
        return total, time.thread_time() - c0

    return run


def g_cold(b: Bench, libs: dict[str, Any]) -> None:
    args = b.args
    path = pathlib.Path(args.dir) / f"ranges-cold-{args.cold_size}.bin"
    make_file(path, args.cold_size)
    row_bytes, n = 4096, args.cold_rows
    rows = np.random.default_rng(99).integers(0, args.cold_size // row_bytes, n)
    offsets = (rows * row_bytes).tolist()
    raw = np.zeros(n * row_bytes + 4096, dtype=np.uint8)
    shift = (-raw.ctypes.data) % 4096
    out = raw[shift:shift + n * row_bytes]  # 4 KiB-aligned: O_DIRECT takes it
    ok = verifier(lambda: out, rows, row_bytes)
    case = f"4KiB x {n} cold O_DIRECT"
    print(f"{case} (file {human(args.cold_size)}):", flush=True)
    before = lambda: drop_cache(path)  # noqa: E731

    def gather() -> tuple[int, float]:
        with gpufile.defaults.set({"auto_direct_io_read": True}):
            f = gpufile.CuFile(path)
            c0 = time.thread_time()
            fut = f.read_rows(out, rows, row_bytes)
            cpu = time.thread_time() - c0
            got = fut.get()
            f.close()
        return got, cpu

    def reference() -> tuple[int, float]:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
        mv = memoryview(out)
        cursor = iter(range(n))
        lock = threading.Lock()
        done = [0]

        def worker() -> None:
            got = 0
            while True:
                with lock:
                    i = next(cursor, None)
                if i is None:
                    break
                got += os.preadv(fd, [mv[i * row_bytes:(i + 1) * row_bytes]], offsets[i])
            with lock:
                done[0] += got

        c0 = time.thread_time()
        threads = [threading.Thread(target=worker) for _ in range(args.depth)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        os.close(fd)
        return done[0], time.thread_time() - c0

    b.measure("cold", "gpufile read_rows O_DIRECT", case, n, row_bytes, gather, ok, before)
    b.measure("cold", f"reference {args.depth} threads O_DIRECT", case, n, row_bytes,
              reference, ok, before)


CUPY_WHY = ""


def main(argv: list[str] | None = None) -> None:
    global CUPY_WHY
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--file-size", type=size, default=size("4GiB"))
    ap.add_argument("--rows", default="4KiB:100000,4KiB:1000000,64KiB:50000,1MiB:4000")
    ap.add_argument("--dest", default="host,device")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--num-threads", type=int, default=16)
    ap.add_argument("--depth", type=int, default=64)
    ap.add_argument("--loop-max", type=int, default=200_000,
                    help="largest row count the per-row pread loops run for")
    ap.add_argument("--cold-size", type=size, default=size("8GiB"))
    ap.add_argument("--cold-rows", type=int, default=100_000)
    ap.add_argument("--only", default=",".join(GROUPS))
    ap.add_argument("--libs", default="gpufile,kvikio")
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    groups = set(args.only.split(","))
    try:
        import cupy as cp
        cp.cuda.runtime.getDeviceCount()
    except Exception as e:  # noqa: BLE001 - no CuPy or no GPU: host rows only
        cp, CUPY_WHY = None, f"no CuPy/GPU: {e.__class__.__name__}"
    libs: dict[str, Any] = {}
    if "kvikio" in args.libs.split(","):
        try:
            import kvikio
            import kvikio.defaults
            # Its POSIX path (compat ON), as gpufile's rows run: AUTO would take cuFile's own
            # compat path where nvidia-fs is not loaded, an order of magnitude slower.
            kvikio.defaults.set({"num_threads": args.num_threads,
                                 "compat_mode": kvikio.CompatMode.ON})
            libs["kvikio"] = kvikio
        except Exception as e:  # noqa: BLE001 - not installed here
            print(f"(kvikio rows skipped: {e.__class__.__name__}: {e})")
    gpufile.defaults.set({"num_threads": args.num_threads})
    b = Bench(args)
    hot = pathlib.Path(args.dir) / f"ranges-hot-{args.file_size}.bin"
    if "hot" in groups:
        make_file(hot, args.file_size)
        g_hot(b, hot, libs, cp)
    if "cold" in groups:
        g_cold(b, libs)
    meta = {
        "gpufile": gpufile.__version__, "num_threads": args.num_threads, "depth": args.depth,
        "file_size": args.file_size, "runs": args.runs, "python": sys.version.split()[0],
        "kvikio": getattr(libs.get("kvikio"), "__version__", None),
        "device": None if cp is None else cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
    }
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({"meta": meta, "results": b.results},
                                                      indent=1))
    print("\n| case | name | k rows/s | GB/s | submit CPU us/range |")
    print("| --- | --- | ---: | ---: | ---: |")
    for r in b.results:
        print(f"| {r['case']} | {r['name']} | {r['rows_per_s'] / 1e3:.1f} | "
              f"{r['gb_per_s']:.2f} | {r['submit_cpu_us_per_range']:.3f} |")


if __name__ == "__main__":
    main()
