"""What a SummaryMonitor costs a Python call: 4 KiB random reads and ``read_rows`` of 100,000
rows from a hot file into host memory, with no monitor and with one, rounds alternated.

    python benches/observe_cost.py [--reads 50000] [--rounds 7] [--json out.json]

Each row is the median over --rounds of the mean per call; every read is verified (the last
4 KiB read and the gathered rows against the file's bytes), and the monitor's count is checked
against the calls made. The core's own figure, without Python between the calls, is
``cargo run --release -p gpufile --example observe_cost``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

import numpy as np

import gpufile


def per_call(n: int, call) -> float:
    t = time.perf_counter_ns()
    for i in range(n):
        call(i)
    return (time.perf_counter_ns() - t) / n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reads", type=int, default=50_000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--gathers", type=int, default=20)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    size = 64 << 20
    data = (np.arange(size, dtype=np.uint64) * 7 % 251).astype(np.uint8)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "observe-cost.bin")
        data.tofile(path)
        rng = np.random.default_rng(1)
        offsets = (rng.integers(0, size // 4096, args.reads) * 4096).tolist()
        rows = rng.integers(0, size // 64, 100_000)
        buf = np.empty(4096, dtype=np.uint8)
        out = np.empty(100_000 * 64, dtype=np.uint8)
        with gpufile.CuFile(path) as f:
            def random(i):
                f.read(buf, file_offset=offsets[i])

            def gather(_):
                f.read_rows(out, rows, 64).get()

            per_call(args.reads, random)  # warm
            per_call(args.gathers, gather)
            r_off, r_on, g_off, g_on = [], [], [], []
            for _ in range(args.rounds):
                r_off.append(per_call(args.reads, random))
                g_off.append(per_call(args.gathers, gather))
                with gpufile.SummaryMonitor() as monitor:
                    r_on.append(per_call(args.reads, random))
                    g_on.append(per_call(args.gathers, gather))
                    seen = monitor.get()
                assert seen.num_ops == args.reads + args.gathers, seen.num_ops
        last = offsets[-1]
        np.testing.assert_array_equal(buf, data[last:last + 4096])
        np.testing.assert_array_equal(out.reshape(-1, 64), data.reshape(-1, 64)[rows])

    ro, rn = statistics.median(r_off), statistics.median(r_on)
    go, gn = statistics.median(g_off), statistics.median(g_on)
    print("| Python call | monitor off | monitor on | cost of the monitor |")
    print("| --- | --- | --- | --- |")
    print(f"| `read` of 4 KiB at a random offset (hot) | {ro:.0f} ns | {rn:.0f} ns | "
          f"{rn - ro:+.0f} ns ({100 * (rn - ro) / ro:+.1f} %) |")
    print(f"| `read_rows`, 100,000 rows of 64 B | {go / 1e6:.2f} ms | {gn / 1e6:.2f} ms | "
          f"{(gn - go) / 1e3:+.1f} us ({100 * (gn - go) / go:+.2f} %) |")
    result = {"random_4k_ns": [ro, rn], "read_rows_100k_ns": [go, gn], "reads": args.reads,
              "rounds": args.rounds}
    print(json.dumps(result))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh)


if __name__ == "__main__":
    main()
