"""Stream-ordered reads (``raw_read_async``) into device memory: what one costs, end to end.

    python benches/stream_bench.py [--sizes 4KiB,64KiB,1MiB,64MiB] [--runs 200] [--json out.json]

For each size, a hot file of that size is read with ``CuFile.raw_read_async`` into a CuPy
array on a non-blocking stream, then ``check_bytes_done()`` and the stream synchronized: the
time from the call to the stream having copied the bytes. Side by side in the same run: a
device-to-host copy of the same size on the same stream alone (what gpufile's restore copy
adds to a read, docs/async.md), and KvikIO's ``raw_read_async`` where it imports (compat mode:
it reads at the call). Medians of --runs runs after 5 untimed ones; every run's bytes verified
against the file. Where an earlier gpufile is installed under another path, run this script
with each on PYTHONPATH for a before/after table (scripts/device_round.sh --before does).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_bench import parse_size  # noqa: E402

def median_seconds(fn, runs: int, check) -> float:
    for _ in range(5):
        fn()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        check()
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="4KiB,64KiB,1MiB,64MiB")
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("--json")
    args = ap.parse_args()
    import cupy as cp

    import gpufile

    try:
        import kvikio
        if kvikio is gpufile:
            kvikio = None
    except ImportError:
        kvikio = None
    stream = cp.cuda.Stream(non_blocking=True)
    rows = []
    for text in args.sizes.split(","):
        n = parse_size(text)
        data = np.random.default_rng(n).integers(0, 256, n, dtype=np.uint8)
        path = os.path.join(args.dir, f"gpufile-stream-bench-{n}.bin")
        data.tofile(path)
        want = cp.asarray(data)
        out = cp.zeros(n, dtype=cp.uint8)
        host = cp.cuda.alloc_pinned_memory(n)
        host_view = np.frombuffer(host, np.uint8, n)
        runs = max(5, args.runs if n <= (1 << 20) else args.runs // 10)

        def verify() -> None:
            if not bool((out == want).all()):
                raise SystemExit(f"{text}: the bytes read differ from the file")
            out.fill(0)

        row = {"size": text, "bytes": n, "runs": runs}
        with gpufile.CuFile(path) as f:
            def gf() -> None:
                f.raw_read_async(out, stream.ptr).check_bytes_done()
                stream.synchronize()
            row["gpufile_s"] = median_seconds(gf, runs, verify)

        def d2h() -> None:
            cp.cuda.runtime.memcpyAsync(host_view.ctypes.data, want.data.ptr, n,
                                        cp.cuda.runtime.memcpyDeviceToHost, stream.ptr)
            stream.synchronize()
        row["d2h_s"] = median_seconds(d2h, runs, lambda: None)
        if kvikio is not None:
            with kvikio.CuFile(path, "r") as f:
                def kv() -> None:
                    f.raw_read_async(out, stream.ptr).check_bytes_done()
                    stream.synchronize()
                row["kvikio_s"] = median_seconds(kv, runs, verify)
        os.unlink(path)
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(f"\n{'size':>8} {'gpufile us':>11} {'GB/s':>7} {'D2H alone us':>13} {'kvikio us':>10}")
    for r in rows:
        kv = f"{r['kvikio_s'] * 1e6:10.1f}" if "kvikio_s" in r else f"{'-':>10}"
        print(f"{r['size']:>8} {r['gpufile_s'] * 1e6:11.1f} {r['bytes'] / r['gpufile_s'] / 1e9:7.2f} "
              f"{r['d2h_s'] * 1e6:13.1f} {kv}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
