"""Hot-file → host memory: gpufile against a plain single-thread pread loop, same file, same run.

    python benches/host_read.py [FILE] [--runs 5] [--json out.json]

Every read is verified against the first (plain) read. Prints a table of medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import numpy as np

import gpufile


def plain_pread_loop(path: str, buf: np.ndarray, chunk: int = 4 << 20) -> int:
    mv = memoryview(buf).cast("B")
    fd = os.open(path, os.O_RDONLY)
    try:
        done = 0
        while done < len(mv):
            n = os.preadv(fd, [mv[done:done + chunk]], done)
            if n == 0:
                raise EOFError(path)
            done += n
        return done
    finally:
        os.close(fd)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("file", nargs="?", default=os.path.join(os.environ.get("TMPDIR", "/tmp"),
                                                            "gpufile-demo.bin"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--json")
    args = ap.parse_args()
    size = os.path.getsize(args.file)
    ref = np.empty(size, dtype=np.uint8)
    plain_pread_loop(args.file, ref)  # warms the page cache and is the reference
    buf = np.empty(size, dtype=np.uint8)
    buf.fill(0)

    def gpufile_read(threads: int | None):
        def run():
            opts = {} if threads is None else {"num_threads": threads}
            with gpufile.defaults.set(opts), gpufile.CuFile(args.file) as f:
                return f.read(buf)
        return run

    cases = [("plain pread loop, 1 thread", lambda: plain_pread_loop(args.file, buf))]
    cases += [(f"gpufile, {t} threads", gpufile_read(t)) for t in (1, 2, 4)]
    cases += [(f"gpufile, default ({gpufile.defaults.get('num_threads')} threads)",
               gpufile_read(None))]
    rows = []
    for name, fn in cases:
        times = []
        for _ in range(args.runs):
            buf[:4096] = 0
            t = time.perf_counter()
            n = fn()
            times.append(time.perf_counter() - t)
            assert n == size and np.array_equal(buf, ref), name
        med = statistics.median(times)
        rows.append({"case": name, "median_s": med, "gb_per_s": size / med / 1e9, "runs": times})
    print(f"{size / 2**30:.2f} GiB hot file, {os.cpu_count()} cores, median of {args.runs}")
    print(f"{'case':<34} {'GB/s':>8}")
    for r in rows:
        print(f"{r['case']:<34} {r['gb_per_s']:>8.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"file_bytes": size, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
