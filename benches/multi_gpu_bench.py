"""Aggregate hot file → GPUs bandwidth with 1..N GPUs: gpufile vs KvikIO, same file, same run.

    python benches/multi_gpu_bench.py [--size 8GiB] [--runs 3] [--json out.json]

The file is split evenly across the GPUs in use; each GPU's part is read with one pread (gpufile:
its POSIX path, compat_mode ON; KvikIO: compat_mode ON, its threads set to gpufile's default).
Every part is verified. Scaling is reported against the sum of each GPU's measured pinned
host→device copy rate.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import cupy as cp
import numpy as np

import gpufile

try:
    import kvikio
    import kvikio.defaults
except Exception:  # noqa: BLE001 - the table then shows gpufile only
    kvikio = None


def pinned_rate(device: int, nbytes: int = 1 << 30) -> float:
    with cp.cuda.Device(device):
        src = np.frombuffer(cp.cuda.alloc_pinned_memory(nbytes), dtype=np.uint8, count=nbytes)
        dst = cp.empty(nbytes, dtype=cp.uint8)
        ts = []
        for _ in range(3):
            cp.cuda.runtime.deviceSynchronize()
            t = time.perf_counter()
            dst.set(src)
            cp.cuda.runtime.deviceSynchronize()
            ts.append(time.perf_counter() - t)
        return nbytes / statistics.median(ts) / 1e9


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=lambda s: int(float(s.rstrip("GiB")) * (1 << 30)),
                    default=8 << 30)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--file", default="/tmp/gpufile-multi.bin")
    ap.add_argument("--json")
    args = ap.parse_args()
    n_gpus = cp.cuda.runtime.getDeviceCount()
    rng = np.random.default_rng(0)
    with open(args.file, "wb") as f:
        for off in range(0, args.size, 256 << 20):
            f.write(rng.integers(0, 256, min(256 << 20, args.size - off), dtype=np.uint8).tobytes())
    ref = np.fromfile(args.file, dtype=np.uint8)
    rates = [pinned_rate(d) for d in range(n_gpus)]
    rows = []
    counts = [g for g in (1, 2, 4, 8) if g <= n_gpus]
    threads = gpufile.defaults.get("num_threads")
    for g in counts:
        part = -(-args.size // g)
        bufs = []
        for d in range(g):
            with cp.cuda.Device(d):
                bufs.append(cp.empty(min(part, args.size - d * part), dtype=cp.uint8))
        libs = [("gpufile", gpufile)] + ([("kvikio", kvikio)] if kvikio else [])
        for name, lib in libs:
            if name == "kvikio":
                kvikio.defaults.set({"num_threads": threads, "compat_mode": kvikio.CompatMode.ON})
            times = []
            for _ in range(args.runs):
                t = time.perf_counter()
                if name == "gpufile":
                    with gpufile.defaults.set("compat_mode", "on"), gpufile.CuFile(args.file) as f:
                        futs = [f.pread(b, file_offset=d * part) for d, b in enumerate(bufs)]
                        for x in futs:
                            x.get()
                else:
                    with kvikio.CuFile(args.file, "r") as f:
                        futs = [f.pread(b, file_offset=d * part) for d, b in enumerate(bufs)]
                        for x in futs:
                            x.get()
                times.append(time.perf_counter() - t)
                for d, b in enumerate(bufs):
                    with cp.cuda.Device(d):
                        assert np.array_equal(cp.asnumpy(b), ref[d * part:d * part + b.size])
            gbps = args.size / statistics.median(times) / 1e9
            limit = sum(rates[:g])
            rows.append({"lib": name, "gpus": g, "gb_per_s": gbps, "pinned_sum": limit,
                         "fraction": gbps / limit, "runs_s": times})
            print(f"{name:<8} {g} GPU(s) {gbps:7.2f} GB/s  ({gbps / limit:.0%} of {limit:.1f})",
                  flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"size": args.size, "pinned_rates": rates, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
