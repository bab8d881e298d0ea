"""What the CPU half of the bounce path costs on this machine, without gpufile: reads of a hot
file (page cache) into pageable memory, into pinned memory, and into pinned memory that the GPU
then copies from (the bounce pattern: read, copy to the device, wait), from 1 and N threads, at
random offsets; and the same bytes copied from a mapping of the file instead of read.

    python benches/copy_probe.py [--file PATH] [--size 2GiB] [--sizes 256KiB,1MiB,4MiB]
                                 [--threads 1,16] [--ops 2000] [--json out.json]

Each row: operations per second over all threads, GB/s, and per operation the mean microseconds
spent in the read (or the copy out of the mapping) and in waiting for the device copy. The mapped
rows run in child processes under each GLIBC_TUNABLES non-temporal threshold given by
--nt-thresholds (glibc's memcpy switches to non-temporal stores above it), so the cost of leaving
the copied lines dirty in the CPU's caches while the GPU reads them shows as a difference.
Data is checked on a sample of each row (the destination equals the file's bytes).
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import subprocess
import sys
import threading
import time

import numpy as np


def parse_size(s: str) -> int:
    units = {"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "k": 1 << 10, "m": 1 << 20,
             "g": 1 << 30, "": 1}
    s = s.strip().lower()
    num = s.rstrip("abcdefghijklmnopqrstuvwxyz")
    return int(float(num) * units[s[len(num):]])


def human(n: int) -> str:
    for u, f in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= f and n % f == 0:
            return f"{n // f}{u}"
    return f"{n}B"


def make_file(path: str, size: int) -> None:
    if os.path.exists(path) and os.path.getsize(path) >= size:
        return
    rng = np.random.default_rng(7)
    with open(path, "wb") as f:
        left = size
        while left:
            n = min(left, 64 << 20)
            f.write(rng.integers(0, 256, n, dtype=np.uint8).tobytes())
            left -= n


def run_row(path: str, file_size: int, size: int, threads: int, ops: int, dest: str,
            source: str) -> dict:
    cp = None
    if dest != "pageable":
        import cupy as cp
    fd = os.open(path, os.O_RDONLY)
    mm = np.frombuffer(mmap.mmap(fd, file_size, prot=mmap.PROT_READ), dtype=np.uint8) \
        if source == "mmap" else None
    if mm is not None:
        mm[::4096].sum()  # map every page once (no faults in the timed loop)
    per = ops // threads
    rngs = [np.random.default_rng(100 + i) for i in range(threads)]
    offs = [r.integers(0, file_size // size, per) * size for r in rngs]
    bufs, devs, streams = [], [], []
    for _ in range(threads):
        if dest == "pageable":
            b = np.empty(size, dtype=np.uint8)
        else:
            b = cp.cuda.alloc_pinned_memory(size)
            b = np.frombuffer(b, dtype=np.uint8, count=size)
        b.fill(1)
        bufs.append(b)
        devs.append(cp.empty(size, dtype=cp.uint8) if dest == "pinned+h2d" else None)
        streams.append(cp.cuda.Stream(non_blocking=True) if dest == "pinned+h2d" else None)
    read_t = [0.0] * threads
    wait_t = [0.0] * threads
    barrier = threading.Barrier(threads + 1)
    ok = [True] * threads

    def worker(i: int) -> None:
        b, d, s = bufs[i], devs[i], streams[i]
        mv = memoryview(b)
        barrier.wait()
        for k, off in enumerate(offs[i]):
            t0 = time.perf_counter()
            if mm is None:
                os.preadv(fd, [mv], int(off))
            else:
                np.copyto(b, mm[off:off + size])
            t1 = time.perf_counter()
            read_t[i] += t1 - t0
            if d is not None:
                d.data.copy_from_host_async(b.ctypes.data, size, s)
                s.synchronize()
                wait_t[i] += time.perf_counter() - t1
            if k == per - 1:
                with open(path, "rb") as f:
                    f.seek(int(off))
                    want = np.frombuffer(f.read(size), dtype=np.uint8)
                got = cp.asnumpy(d) if d is not None else b
                ok[i] = bool(np.array_equal(got, want))

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in ts:
        t.join()
    wall = time.perf_counter() - t0
    os.close(fd)
    n = per * threads
    return {"size": size, "threads": threads, "dest": dest, "source": source,
            "ops_per_s": n / wall, "gbps": n * size / wall / 1e9,
            "read_us": sum(read_t) / n * 1e6, "wait_us": sum(wait_t) / n * 1e6,
            "verified": all(ok)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--file", default="/tmp/gpufile-probe.bin")
    ap.add_argument("--size", type=parse_size, default=parse_size("2GiB"))
    ap.add_argument("--sizes", default="256KiB,1MiB,4MiB")
    ap.add_argument("--threads", default="1,16")
    ap.add_argument("--ops", type=int, default=2000)
    ap.add_argument("--nt-thresholds", default="default,0x10000")
    ap.add_argument("--json")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    sizes = [parse_size(s) for s in a.sizes.split(",")]
    threads = [int(t) for t in a.threads.split(",")]
    if a.child:
        dest, source = a.child.split(":")
        rows = [run_row(a.file, a.size, s, t, a.ops, dest, source) for s in sizes
                for t in threads]
        print(json.dumps(rows))
        return
    make_file(a.file, a.size)
    with open(a.file, "rb") as f:  # hot
        while f.read(64 << 20):
            pass
    rows = []
    cases = [("pageable", "pread", None), ("pinned", "pread", None),
             ("pinned+h2d", "pread", None)]
    for nt in a.nt_thresholds.split(","):
        cases += [("pinned", "mmap", nt), ("pinned+h2d", "mmap", nt)]
    for dest, source, nt in cases:
        env = dict(os.environ)
        if nt and nt != "default":
            env["GLIBC_TUNABLES"] = f"glibc.cpu.x86_non_temporal_threshold={nt}"
        p = subprocess.run([sys.executable, __file__, "--child", f"{dest}:{source}", "--file",
                            a.file, "--size", str(a.size), "--sizes", a.sizes, "--threads",
                            a.threads, "--ops", str(a.ops)], capture_output=True, text=True,
                           env=env, timeout=600)
        if p.returncode != 0:
            print(f"{dest} {source} nt={nt}: failed: {p.stderr.strip()[-500:]}")
            continue
        for r in json.loads(p.stdout.strip().splitlines()[-1]):
            r["nt_threshold"] = nt or ""
            rows.append(r)
            print(f"{human(r['size']):>6} {r['threads']:>3} thr  {dest:<10} {source:<5} "
                  f"nt={nt or '-':<8} {r['ops_per_s']:>9.0f} op/s {r['gbps']:6.2f} GB/s  "
                  f"read {r['read_us']:8.1f} us  wait {r['wait_us']:7.1f} us  "
                  f"{'ok' if r['verified'] else 'DATA DIFFER'}", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
