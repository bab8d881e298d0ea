"""gpufile vs KvikIO vs naive on one file, same run: reads and writes, GPU and host, hot and cold.

    python benches/gpu_bench.py [--size 4GiB] [--runs 3] [--file PATH] [--json out.json]
                                [--threads 1,4,8,16] [--skip cold,write,host]

Every read is verified against the file's bytes (a reference copy on the GPU), every write by
reading the written file back. KvikIO runs its POSIX path (compat_mode ON) at each thread count,
and once more with its own defaults. Prints one table of medians (GB/s) last.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time

import cupy as cp
import numpy as np

import gpufile

try:
    import kvikio
    import kvikio.defaults
except Exception as e:  # the table then shows gpufile and naive only
    kvikio = None
    KVIKIO_ERROR = f"{type(e).__name__}: {e}"
else:
    KVIKIO_ERROR = None


def parse_size(text: str) -> int:
    units = {"k": 10, "m": 20, "g": 30}
    t = text.lower().removesuffix("ib").removesuffix("b")
    return int(t[:-1]) << units[t[-1]] if t[-1] in units else int(t)


def drop_caches() -> None:
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def make_file(path: str, size: int) -> None:
    if os.path.exists(path) and os.path.getsize(path) == size:
        return
    rng = np.random.default_rng(0)
    chunk = 256 << 20
    with open(path, "wb") as f:
        for off in range(0, size, chunk):
            f.write(rng.integers(0, 256, min(chunk, size - off), dtype=np.uint8).tobytes())


class Bench:
    def __init__(self, args):
        self.args = args
        self.size = parse_size(args.size)
        self.rows: list[dict] = []

    def measure(self, name, kind, setup, run, verify, cold=False):
        times = []
        for _ in range(self.args.runs):
            setup()
            if cold:
                drop_caches()
            cp.cuda.runtime.deviceSynchronize()
            t = time.perf_counter()
            n = run()
            cp.cuda.runtime.deviceSynchronize()
            times.append(time.perf_counter() - t)
            assert n in (None, self.size), (name, n)
            assert verify(), f"{name}: data differ"
        med = statistics.median(times)
        row = {"case": name, "kind": kind, "gb_per_s": self.size / med / 1e9,
               "median_s": med, "runs_s": times}
        self.rows.append(row)
        print(f"  {kind:<16} {name:<40} {row['gb_per_s']:7.2f} GB/s", flush=True)


def gpufile_opts(threads, extra=None):
    opts = {"compat_mode": "on"}
    if threads is not None:
        opts["num_threads"] = threads
    opts.update(extra or {})
    return opts


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="4GiB")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--file", default="/tmp/gpufile-bench.bin")
    ap.add_argument("--threads", default="1,4,8,16")
    ap.add_argument("--skip", default="")
    ap.add_argument("--json")
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    threads = [int(t) for t in args.threads.split(",")]
    b = Bench(args)
    size, path = b.size, args.file
    make_file(path, size)
    ref = cp.asarray(np.fromfile(path, dtype=np.uint8))
    dev = cp.empty(size, dtype=cp.uint8)
    print(f"file {path}: {size / 2**30:.2f} GiB; gpufile {gpufile.__version__}; "
          f"kvikio {getattr(kvikio, '__version__', KVIKIO_ERROR)}; "
          f"gpufile default threads {gpufile.defaults.get('num_threads')}", flush=True)

    def dev_clear():
        dev.fill(0)

    def dev_ok():
        return bool(cp.array_equal(dev, ref))

    def gf_read(buf, opts):
        def run():
            with gpufile.defaults.set(opts), gpufile.CuFile(path) as f:
                return f.read(buf)
        return run

    def kv_read(buf, nthreads):
        def run():
            if nthreads is not None:
                kvikio.defaults.set({"num_threads": nthreads,
                                     "compat_mode": kvikio.CompatMode.ON})
            with kvikio.CuFile(path, "r") as f:
                return f.read(buf)
        return run

    def kv_default_reset():
        kvikio.defaults.set({"num_threads": 1, "compat_mode": kvikio.CompatMode.AUTO})

    # Pinned host→device copy ceiling, for the table.
    pinned = cp.cuda.alloc_pinned_memory(1 << 30)
    src = np.frombuffer(pinned, dtype=np.uint8, count=1 << 30)
    d1 = cp.empty(1 << 30, dtype=cp.uint8)
    ts = []
    for _ in range(5):
        cp.cuda.runtime.deviceSynchronize()
        t = time.perf_counter()
        d1.set(src)
        cp.cuda.runtime.deviceSynchronize()
        ts.append(time.perf_counter() - t)
    b.rows.append({"case": "pinned H2D copy (1 GiB, cupy)", "kind": "ceiling",
                   "gb_per_s": (1 << 30) / statistics.median(ts) / 1e9})
    print(f"  ceiling          pinned H2D {b.rows[-1]['gb_per_s']:.2f} GB/s", flush=True)
    del d1, src, pinned

    np.fromfile(path, dtype=np.uint8)  # warm the page cache
    if "ceilings" not in skip:
        # The CPU half of the POSIX device path alone: page cache -> pinned host memory.
        pinned = cp.cuda.alloc_pinned_memory(size)
        host_pinned = np.frombuffer(pinned, dtype=np.uint8, count=size)
        for t in threads:
            b.measure(f"page cache -> pinned host, gpufile {t} thr", "ceiling", lambda: None,
                      gf_read(host_pinned, gpufile_opts(t)), lambda: True)
        del host_pinned, pinned

    print("hot file -> GPU", flush=True)
    for t in threads:
        b.measure(f"gpufile {t} thr", "read gpu hot", dev_clear, gf_read(dev, gpufile_opts(t)),
                  dev_ok)
        if kvikio:
            b.measure(f"kvikio {t} thr", "read gpu hot", dev_clear, kv_read(dev, t), dev_ok)
    b.measure("gpufile defaults", "read gpu hot", dev_clear, gf_read(dev, {}), dev_ok)
    if kvikio:
        kv_default_reset()
        b.measure("kvikio defaults", "read gpu hot", dev_clear, kv_read(dev, None), dev_ok)
    b.measure("naive np.fromfile + cp.asarray", "read gpu hot", dev_clear,
              lambda: dev.set(np.fromfile(path, dtype=np.uint8)), dev_ok)

    if "experiments" not in skip:
        print("experiments: task size, bounce buffer size, mmap + cuMemHostRegister", flush=True)
        for t in (1, 16):
            for ts in (16 << 20, 64 << 20):
                b.measure(f"gpufile {t} thr task {ts >> 20}MiB", "exp gpu hot", dev_clear,
                          gf_read(dev, gpufile_opts(t, {"task_size": ts})), dev_ok)
        os.environ["GPUFILE_EXPERIMENTAL_MMAP_READ"] = "1"
        try:
            for t in (1, 4):
                for ts in (4 << 20, 64 << 20):
                    b.measure(f"gpufile mmap+register {t} thr task {ts >> 20}MiB", "exp gpu hot",
                              dev_clear, gf_read(dev, gpufile_opts(t, {"task_size": ts})), dev_ok)
        except Exception as e:
            print(f"  mmap+register failed: {type(e).__name__}: {e}", flush=True)
        finally:
            del os.environ["GPUFILE_EXPERIMENTAL_MMAP_READ"]

    if "off" not in skip:
        print("compat_mode OFF: through cuFile (its compat path here: nvidia-fs is not loaded)",
              flush=True)
        st = os.stat(path)
        entry = f"/run/udev/data/b{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
        made = False
        if not os.path.exists(entry) and os.geteuid() == 0:
            os.makedirs(os.path.dirname(entry), exist_ok=True)
            with open(entry, "w") as f:
                f.write("E:ID_FS_USAGE=filesystem\nE:ID_FS_TYPE=ext4\n")
            made = True
        try:
            b.measure("gpufile compat_mode OFF", "read gpu hot", dev_clear,
                      gf_read(dev, {"compat_mode": "off"}), dev_ok)
            if kvikio:
                def kv_off():
                    kvikio.defaults.set({"num_threads": 1, "compat_mode": kvikio.CompatMode.OFF})
                    with kvikio.CuFile(path, "r") as f:
                        return f.read(dev)
                b.measure("kvikio compat_mode OFF", "read gpu hot", dev_clear, kv_off, dev_ok)
                kv_default_reset()
        except Exception as e:
            print(f"  compat_mode OFF failed: {type(e).__name__}: {e}", flush=True)
        finally:
            if made:
                os.remove(entry)

    if "host" not in skip:
        print("hot file -> host", flush=True)
        host = np.empty(size, dtype=np.uint8)
        host_ref = cp.asnumpy(ref)

        def host_clear():
            host[:: 1 << 20] = 0

        def host_ok():
            return bool(np.array_equal(host, host_ref))

        for t in threads:
            b.measure(f"gpufile {t} thr", "read host hot", host_clear,
                      gf_read(host, gpufile_opts(t)), host_ok)
            if kvikio:
                b.measure(f"kvikio {t} thr", "read host hot", host_clear, kv_read(host, t),
                          host_ok)
        b.measure("gpufile defaults", "read host hot", host_clear, gf_read(host, {}), host_ok)
        b.measure("naive np.fromfile", "read host hot", host_clear,
                  lambda: host.__setitem__(slice(None), np.fromfile(path, dtype=np.uint8)),
                  host_ok)
        del host, host_ref

    if "cold" not in skip:
        print("cold file -> GPU (page cache dropped before each run)", flush=True)
        b.measure("dd iflag=direct bs=16M (to /dev/null)", "read cold", lambda: None,
                  lambda: subprocess.run(["dd", f"if={path}", "of=/dev/null", "bs=16M",
                                          "iflag=direct"], check=True, capture_output=True)
                  and None, lambda: True, cold=True)
        b.measure("gpufile defaults", "read cold", dev_clear, gf_read(dev, {}), dev_ok, cold=True)
        b.measure("gpufile defaults, O_DIRECT reads", "read cold", dev_clear,
                  gf_read(dev, {"auto_direct_io_read": True}), dev_ok, cold=True)
        if kvikio:
            kv_default_reset()
            b.measure("kvikio defaults", "read cold", dev_clear, kv_read(dev, None), dev_ok,
                      cold=True)

    if "write" not in skip:
        print("GPU -> file (page cache; O_DIRECT where each library's default says)", flush=True)
        out = path + ".out"
        cp.copyto(dev, ref)

        def written_ok():
            back = np.fromfile(out, dtype=np.uint8)
            return back.size == size and bool(cp.array_equal(cp.asarray(back), ref))

        def gf_write(opts):
            def run():
                with gpufile.defaults.set(opts), gpufile.CuFile(out, "w") as f:
                    return f.write(dev)
            return run

        def kv_write(nthreads):
            def run():
                if nthreads is not None:
                    kvikio.defaults.set({"num_threads": nthreads,
                                         "compat_mode": kvikio.CompatMode.ON})
                with kvikio.CuFile(out, "w") as f:
                    return f.write(dev)
            return run

        for t in [threads[0], threads[-1]]:
            b.measure(f"gpufile {t} thr", "write gpu", os.sync, gf_write(gpufile_opts(t)),
                      written_ok)
            if kvikio:
                b.measure(f"kvikio {t} thr", "write gpu", os.sync, kv_write(t), written_ok)
        b.measure("gpufile defaults", "write gpu", os.sync, gf_write({}), written_ok)
        b.measure("gpufile defaults, buffered writes", "write gpu", os.sync,
                  gf_write({"auto_direct_io_write": False}), written_ok)
        if kvikio:
            kv_default_reset()
            b.measure("kvikio defaults", "write gpu", os.sync, kv_write(None), written_ok)
        os.remove(out)

    print()
    print(f"{'kind':<16} {'case':<42} {'GB/s':>8}")
    for r in b.rows:
        print(f"{r['kind']:<16} {r['case']:<42} {r['gb_per_s']:>8.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"size": size, "rows": b.rows, "kvikio_error": KVIKIO_ERROR}, f, indent=2)


if __name__ == "__main__":
    main()
