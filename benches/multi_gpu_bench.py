"""Aggregate hot file → GPUs bandwidth with 1..N GPUs: gpufile vs KvikIO, same file, same run.

    python benches/multi_gpu_bench.py [--size 8GiB] [--runs 3] [--threads 16,32] [--json out.json]

The file is split evenly across the GPUs in use; each GPU's part is read with one pread
(gpufile: its POSIX path, compat_mode ON; KvikIO: compat_mode ON). Rows per GPU count:
gpufile with page-cache DMA turned on (``dma_cache_size``; off by default) and its cache warm
(read until every byte is registered: the steady state of data read again and again), its
first read (cache emptied before each run) and its second read (the one that registers),
gpufile with page-cache DMA off (its default: the bounce path alone) at each --threads, and
KvikIO at each --threads. Every part is verified
against a copy of the file on its GPU. Medians of --runs; scaling is reported against the sum
of each GPU's measured pinned host→device copy rate.
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
    ap.add_argument("--threads", default="16,32")
    ap.add_argument("--file", default="/tmp/gpufile-multi.bin")
    ap.add_argument("--json")
    args = ap.parse_args()
    n_gpus = cp.cuda.runtime.getDeviceCount()
    thread_list = [int(t) for t in args.threads.split(",")]
    rng = np.random.default_rng(0)
    with open(args.file, "wb") as f:
        for off in range(0, args.size, 256 << 20):
            f.write(rng.integers(0, 256, min(256 << 20, args.size - off), dtype=np.uint8).tobytes())
    rates = [pinned_rate(d) for d in range(n_gpus)]
    print("pinned H2D per GPU:", " ".join(f"{r:.1f}" for r in rates), "GB/s", flush=True)
    base = {n: v for n, v, _ in gpufile.defaults.report()}
    has_dma = "dma_cache_size" in base
    rows = []
    counts = [g for g in (1, 2, 4, 8) if g <= n_gpus]
    for g in counts:
        part = -(-args.size // g)
        bufs, refs = [], []
        for d in range(g):
            n = min(part, args.size - d * part)
            with cp.cuda.Device(d):
                bufs.append(cp.empty(n, dtype=cp.uint8))
                refs.append(cp.asarray(np.fromfile(args.file, dtype=np.uint8, count=n,
                                                   offset=d * part)))

        def gf_read() -> None:
            with gpufile.CuFile(args.file) as f:
                futs = [f.pread(b, file_offset=d * part) for d, b in enumerate(bufs)]
                for x in futs:
                    x.get()

        def kv_read() -> None:
            with kvikio.CuFile(args.file, "r") as f:
                futs = [f.pread(b, file_offset=d * part) for d, b in enumerate(bufs)]
                for x in futs:
                    x.get()

        def warm_cache() -> None:
            """Reads until every byte is registered (at most 10 reads): the steady state."""
            time.sleep(0.05)  # a file changed less than a timestamp tick ago is not registered
            for _ in range(10):
                gf_read()
                if gpufile.dma_cache_registered() >= args.size:
                    break

        # (lib, label, settings, before each run, once before the runs, read)
        variants = []
        gf_on = {**base, "compat_mode": "on"}
        if has_dma:  # page-cache DMA is off by default: these rows turn it on
            dma = {**gf_on, "dma_cache_size": 2 * args.size}
            variants.append(("gpufile", "+ page-cache DMA, warm", dma, None, warm_cache,
                             gf_read))
            variants.append(("gpufile", "+ page-cache DMA, first read", dma,
                             gpufile.dma_cache_clear, None, gf_read))
            variants.append(("gpufile", "+ page-cache DMA, second read", dma,
                             lambda: (gpufile.dma_cache_clear(), gf_read()), None, gf_read))
        for t in thread_list:
            off = {**gf_on, "num_threads": t, **({"dma_cache_size": 0} if has_dma else {})}
            variants.append(("gpufile", f"{t} thr, bounce only", off, None, None, gf_read))
        if kvikio is not None:
            for t in thread_list:
                variants.append(("kvikio", f"{t} thr", {"num_threads": t}, None, None, kv_read))
        for lib, label, opts, before, once, read in variants:
            if lib == "gpufile":
                gpufile.defaults.set(opts)
            else:
                kvikio.defaults.set({**opts, "compat_mode": kvikio.CompatMode.ON})
            if once is not None:
                once()
            times = []
            for i in range(args.runs + 1):  # the first run is untimed (warm-up)
                for d, b in enumerate(bufs):
                    with cp.cuda.Device(d):
                        b.fill(0)
                if before is not None:
                    before()
                for d in range(g):
                    cp.cuda.Device(d).synchronize()
                t0 = time.perf_counter()
                read()
                if i:
                    times.append(time.perf_counter() - t0)
                for d, b in enumerate(bufs):
                    with cp.cuda.Device(d):
                        assert bool(cp.array_equal(b, refs[d])), f"{lib} {label}: GPU {d} differs"
            gbps = args.size / statistics.median(times) / 1e9
            limit = sum(rates[:g])
            rows.append({"lib": lib, "case": label, "gpus": g, "gb_per_s": gbps,
                         "pinned_sum": limit, "fraction": gbps / limit, "runs_s": times})
            print(f"{lib:<8} {label:<30} {g} GPU(s) {gbps:7.2f} GB/s  "
                  f"({gbps / limit:.0%} of {limit:.1f})", flush=True)
        del bufs, refs
        if has_dma:
            gpufile.dma_cache_clear()
    gpufile.defaults.set(base)
    print("\n| case | " + " | ".join(f"{g} GPU" for g in counts) + " |")
    print("| --- |" + " --- |" * len(counts))
    for key in dict.fromkeys((r["lib"], r["case"]) for r in rows):
        vals = {r["gpus"]: r["gb_per_s"] for r in rows if (r["lib"], r["case"]) == key}
        print(f"| {key[0]} {key[1]} | " + " | ".join(f"{vals.get(g, float('nan')):.1f}"
                                                    for g in counts) + " |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"size": args.size, "pinned_rates": rates, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
