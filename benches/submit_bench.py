"""Per-request and per-open cost into host memory: what a small request costs from the Python call
to its result, and what opening, reading and closing many small files costs (issue 14, items 2
and 3, measured where no GPU is needed: host memory shares the whole request path but the
executor with device memory).

    python benches/submit_bench.py [--runs 5] [--requests 20000] [--sizes 4KiB,64KiB]
                                   [--py-threads 16] [--depth 64] [--num-threads 16]
                                   [--files-count 256] [--files-size 4MiB]
                                   [--only GROUPS | --skip GROUPS] [--libs gpufile,kvikio]
                                   [--dir DIR] [--json out.json]

Row groups (``--only``/``--skip`` take a comma list; default: all):

    serial     one Python thread, one request at a time: ``read()`` and ``pread().get()``, and
               ``os.preadv`` (the floor a Python loop of reads cannot go under)
    threads    --py-threads Python threads, each its own loop of ``read()``
    pipelined  one Python thread keeping --depth ``pread`` futures in flight (the random row of
               benches/gpu_bench.py, into host memory)
    files      --files-count files of --files-size, hot: a CuFile open/read/close loop, and
               ``gpufile.read_batch`` of paths and of open CuFiles; Python's open/readinto loop
    device     (needs CuPy and a GPU) the pipelined row into GPU memory, once per kind of
               destination, to split what a device request costs the submitting thread: CuPy
               views (a ``__cuda_array_interface__`` dict built per call, v3 ``stream`` 1: a
               wait on the legacy stream), the same interface precomputed with ``stream`` 1 (no
               CuPy dict), precomputed with no stream (no wait either); and ``pread().get()``
               and ``read()`` one at a time (the latency of one request). Not in the default
               set.

Offsets are random (seeded, page-aligned) over a hot file of --file-size; each row is the median of
--runs runs after one untimed run, and says wall microseconds per request (or per file), requests
(files) per second and the process's CPU microseconds per request (all threads, getrusage) and, where one thread makes every request, that thread's own CPU
microseconds per request (``time.thread_time``: what limits a Python thread that submits). Every
run is verified: the last read into each buffer against the file's bytes. ``num_threads`` is set
to --num-threads for every row (KvikIO too, where --libs names it).
"""

from __future__ import annotations

import argparse
import importlib.util
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

_HERE = pathlib.Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("gpu_bench", _HERE / "gpu_bench.py")
gb = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gb)  # its helpers: sizes, offsets, the pipelined loop, file layout

import gpufile  # noqa: E402

GROUPS = ("serial", "threads", "pipelined", "files", "device")
DEFAULT_GROUPS = ("serial", "threads", "pipelined", "files")


def _libs(names: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in [n.strip() for n in names.split(",") if n.strip()]:
        if name == "gpufile":
            out[name] = gpufile
        elif name == "kvikio":
            if gb.kvikio is None:
                print(f"note: kvikio rows skipped ({gb.KVIKIO_ERROR})")
            else:
                out[name] = gb.kvikio
        else:
            raise SystemExit(f"--libs: unknown library {name!r} (gpufile, kvikio)")
    return out


def _set_threads(mod: Any, n: int) -> None:
    if mod is gpufile:
        gpufile.defaults.set("num_threads", n)
    else:
        mod.defaults.set({"num_threads": n})


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rows: list[dict] = []
        self.dir = args.dir or tempfile.mkdtemp(prefix="submit-bench-")
        self.path = os.path.join(self.dir, "data.bin")
        size = args.file_size
        if not (os.path.exists(self.path) and os.path.getsize(self.path) == size):
            rng = np.random.default_rng(1)
            with open(self.path, "wb") as f:
                for off in range(0, size, 64 << 20):
                    f.write(rng.integers(0, 256, min(64 << 20, size - off), dtype=np.uint8))
        self.data = np.fromfile(self.path, dtype=np.uint8)  # the reference, and warms the file

    def expect(self, off: int, size: int) -> np.ndarray:
        return self.data[off:off + size]

    def measure(self, name: str, run: Callable[[], int], ok: Callable[[], bool],
                ops: int, nbytes: int, unit: str = "req", caller: bool = True) -> None:
        """Median of --runs runs of ``run`` (after one untimed); ``ok`` verifies each.
        ``caller``: the calling thread makes the requests, so its own CPU time is reported."""
        run()
        if not ok():
            raise RuntimeError(f"{name}: the data read is wrong (warm-up run)")
        walls, cpus, callers = [], [], []
        for _ in range(self.args.runs):
            c0, t0, th0 = gb.cpu_seconds(), time.perf_counter(), time.thread_time()
            n = run()
            wall, cpu = time.perf_counter() - t0, gb.cpu_seconds() - c0
            callers.append(time.thread_time() - th0)
            if n != nbytes:
                raise RuntimeError(f"{name}: {n} bytes moved, not {nbytes}")
            if not ok():
                raise RuntimeError(f"{name}: the data read is wrong")
            walls.append(wall)
            cpus.append(cpu)
        wall, cpu = statistics.median(walls), statistics.median(cpus)
        row = {
            "name": name,
            f"us_per_{unit}": wall / ops * 1e6,
            f"{unit}_per_s": ops / wall,
            "GB_per_s": nbytes / wall / 1e9,
            f"cpu_us_per_{unit}": cpu / ops * 1e6,
            "runs_us": [w / ops * 1e6 for w in walls],
        }
        if caller:
            row[f"caller_cpu_us_per_{unit}"] = statistics.median(callers) / ops * 1e6
        self.rows.append(row)
        mine = f"  caller cpu {row[f'caller_cpu_us_per_{unit}']:7.2f}" if caller else ""
        print(f"{name:52s} {row[f'us_per_{unit}']:8.2f} us/{unit} {row[f'{unit}_per_s']:9.0f} "
              f"{unit}/s {row['GB_per_s']:6.2f} GB/s  cpu {row[f'cpu_us_per_{unit}']:7.2f}{mine}",
              flush=True)


def g_serial(b: Bench, libs: dict[str, Any]) -> None:
    a = b.args
    count = a.requests
    for size in a.sizes:
        offsets = gb.random_offsets(a.file_size, size, count, a.seed)
        buf = np.empty(size, dtype=np.uint8)

        def ok() -> bool:
            return bool(np.array_equal(buf, b.expect(offsets[-1], size)))

        def posix() -> int:
            fd = os.open(b.path, os.O_RDONLY)
            try:
                n = 0
                for off in offsets:
                    n += os.preadv(fd, [buf], off)
                return n
            finally:
                os.close(fd)

        b.measure(f"os.preadv {gb._human(size)}, 1 py thread", posix, ok, count, count * size)
        for lib, mod in libs.items():
            _set_threads(mod, a.num_threads)

            def read(mod: Any = mod) -> int:
                with mod.CuFile(b.path, "r") as f:
                    return sum(f.read(buf, size, off) for off in offsets)

            def pread_get(mod: Any = mod) -> int:
                with mod.CuFile(b.path, "r") as f:
                    return sum(f.pread(buf, size, off).get() for off in offsets)

            b.measure(f"{lib} read() {gb._human(size)}, 1 py thread", read, ok, count,
                      count * size)
            b.measure(f"{lib} pread().get() {gb._human(size)}, 1 py thread", pread_get, ok,
                      count, count * size)


def g_threads(b: Bench, libs: dict[str, Any]) -> None:
    a = b.args
    t = a.py_threads
    per = a.requests // t
    for size in a.sizes:
        offsets = gb.random_offsets(a.file_size, size, per * t, a.seed)
        bufs = [np.empty(size, dtype=np.uint8) for _ in range(t)]

        def ok() -> bool:
            return all(np.array_equal(bufs[i], b.expect(offsets[i * per + per - 1], size))
                       for i in range(t))

        def threaded(body: Callable[[int], int]) -> Callable[[], int]:
            def run() -> int:
                got = [0] * t
                errors: list[BaseException] = []
                start = threading.Barrier(t)

                def worker(i: int) -> None:
                    try:
                        start.wait()
                        got[i] = body(i)
                    except BaseException as e:  # reported after the join
                        errors.append(e)
                threads = [threading.Thread(target=worker, args=(i,)) for i in range(t)]
                for th in threads:
                    th.start()
                for th in threads:
                    th.join()
                if errors:
                    raise errors[0]
                return sum(got)
            return run

        def posix(i: int) -> int:
            fd = os.open(b.path, os.O_RDONLY)
            try:
                return sum(os.preadv(fd, [bufs[i]], off)
                           for off in offsets[i * per:(i + 1) * per])
            finally:
                os.close(fd)

        n = per * t
        b.measure(f"os.preadv {gb._human(size)}, {t} py threads", threaded(posix), ok, n,
                  n * size, caller=False)
        for lib, mod in libs.items():
            _set_threads(mod, a.num_threads)
            f = mod.CuFile(b.path, "r")
            try:
                def read(i: int, f: Any = f) -> int:
                    return sum(f.read(bufs[i], size, off)
                               for off in offsets[i * per:(i + 1) * per])

                def pread_get(i: int, f: Any = f) -> int:
                    return sum(f.pread(bufs[i], size, off).get()
                               for off in offsets[i * per:(i + 1) * per])

                b.measure(f"{lib} read() {gb._human(size)}, {t} py threads", threaded(read),
                          ok, n, n * size, caller=False)
                b.measure(f"{lib} pread().get() {gb._human(size)}, {t} py threads",
                          threaded(pread_get), ok, n, n * size, caller=False)
            finally:
                f.close()


def g_pipelined(b: Bench, libs: dict[str, Any]) -> None:
    a = b.args
    count, depth = a.requests, a.depth
    for size in a.sizes:
        offsets = gb.random_offsets(a.file_size, size, count, a.seed)
        slots = np.empty((depth, size), dtype=np.uint8)
        views = [slots[i] for i in range(depth)]
        last = gb.last_read_per_slot(count, depth)

        def ok() -> bool:
            return all(np.array_equal(slots[s], b.expect(offsets[i], size))
                       for s, i in last.items())

        for lib, mod in libs.items():
            _set_threads(mod, a.num_threads)

            def run(mod: Any = mod) -> int:
                with mod.CuFile(b.path, "r") as f:
                    return gb.pipelined_reads(f.pread, views, offsets, size) * size

            b.measure(f"{lib} pread {gb._human(size)}, {depth} in flight, "
                      f"{a.num_threads} workers", run, ok, count, count * size)


def g_files(b: Bench, libs: dict[str, Any]) -> None:
    a = b.args
    count, each = a.files_count, a.files_size
    folder = os.path.join(b.dir, f"files-{count}x{each}")
    offsets = gb.files_layout(count, each, a.file_size)
    paths = [os.path.join(folder, f"{i:05d}.bin") for i in range(count)]
    if not all(os.path.exists(p) and os.path.getsize(p) == each for p in paths):
        os.makedirs(folder, exist_ok=True)
        for p, off in zip(paths, offsets):
            b.data[off:off + each].tofile(p)
    dst = np.empty(count * each, dtype=np.uint8)
    views = [dst[i * each:(i + 1) * each] for i in range(count)]
    expect = np.concatenate([b.expect(o, each) for o in offsets])
    total = count * each

    def ok() -> bool:
        ok_ = bool(np.array_equal(dst, expect))
        dst[:: 1 << 12] = 0  # the next run must write every page again to pass
        return ok_

    def py_loop() -> int:
        n = 0
        for p, v in zip(paths, views):
            with open(p, "rb", buffering=0) as f:
                n += f.readinto(v)
        return n

    label = f"{count} x {gb._human(each)}"
    b.measure(f"python open/readinto/close loop ({label})", py_loop, ok, count, total, "file")
    for lib, mod in libs.items():
        _set_threads(mod, a.num_threads)

        def loop(mod: Any = mod) -> int:
            n = 0
            for p, v in zip(paths, views):
                with mod.CuFile(p, "r") as f:
                    n += f.read(v)
            return n

        b.measure(f"{lib} open/read/close loop ({label})", loop, ok, count, total, "file")
    if "gpufile" in libs:
        def batch_paths() -> int:
            return gpufile.read_batch([(p, v, each, 0) for p, v in zip(paths, views)]).get()

        b.measure(f"gpufile read_batch, paths ({label})", batch_paths, ok, count, total, "file")
        files = [gpufile.CuFile(p) for p in paths]
        try:
            def batch_files() -> int:
                return gpufile.read_batch([(f, v, each, 0)
                                           for f, v in zip(files, views)]).get()

            b.measure(f"gpufile read_batch, open CuFiles ({label})", batch_files, ok, count,
                      total, "file")
        finally:
            for f in files:
                f.close()


class FixedCAI:
    """A device buffer whose ``__cuda_array_interface__`` is a dict made once (v3, with the given
    ``stream``, or without one): a destination that costs its exporter nothing per request."""

    def __init__(self, arr: Any, stream: int | None) -> None:
        cai = dict(arr.__cuda_array_interface__)
        cai["version"] = 3
        cai["stream"] = stream
        self.__cuda_array_interface__ = cai
        self.owner = arr


def g_device(b: Bench, libs: dict[str, Any]) -> None:
    try:
        import cupy as cp
        cp.cuda.runtime.getDeviceCount()
    except Exception as e:  # no CuPy, or no GPU
        print(f"note: device rows skipped ({type(e).__name__}: {e})")
        return
    a = b.args
    count, depth = a.requests, a.depth
    for size in a.sizes:
        offsets = gb.random_offsets(a.file_size, size, count, a.seed)
        slots = cp.empty((depth, size), dtype=cp.uint8)
        views = [slots[i] for i in range(depth)]

        def check(reads: int) -> Callable[[], bool]:
            """Verifies the last read of each slot after `reads` pipelined reads, then zeroes
            the slots (the next run must write them again to pass)."""
            last = gb.last_read_per_slot(reads, depth)
            expect = cp.asarray(np.stack([b.expect(offsets[i], size) for i in last.values()]))
            order = list(last.keys())

            def ok() -> bool:
                good = bool(cp.array_equal(slots[order], expect))
                slots.fill(0)
                return good
            return ok

        ok = check(count)

        t0 = time.perf_counter()
        for v in views * max(1, 20000 // depth):
            v.__cuda_array_interface__
        per = (time.perf_counter() - t0) / (depth * max(1, 20000 // depth)) * 1e6
        print(f"note: CuPy builds __cuda_array_interface__ in {per:.2f} us (stream "
              f"{views[0].__cuda_array_interface__.get('stream')!r})")
        kinds = {
            "CuPy views": views,
            "fixed CAI, stream 1": [FixedCAI(v, 1) for v in views],
            "fixed CAI, no stream": [FixedCAI(v, None) for v in views],
        }
        for lib, mod in libs.items():
            _set_threads(mod, a.num_threads)
            for kind, dst in kinds.items():
                def run(mod: Any = mod, dst: list = dst) -> int:
                    with mod.CuFile(b.path, "r") as f:
                        return gb.pipelined_reads(f.pread, dst, offsets, size) * size

                b.measure(f"{lib} GPU pread {gb._human(size)}, {kind}, {depth} in flight",
                          run, ok, count, count * size)

            one = count // 4
            ok_one = check(one)

            def serial(mod: Any = mod) -> int:
                with mod.CuFile(b.path, "r") as f:
                    return sum(f.pread(views[i % depth], size, off).get()
                               for i, off in enumerate(offsets[:one]))

            b.measure(f"{lib} GPU pread().get() {gb._human(size)}, CuPy views, one at a time",
                      serial, ok_one, one, one * size)

            def blocking(mod: Any = mod) -> int:
                with mod.CuFile(b.path, "r") as f:
                    return sum(f.read(views[i % depth], size, off)
                               for i, off in enumerate(offsets[:one]))

            b.measure(f"{lib} GPU read() {gb._human(size)}, CuPy views, one at a time",
                      blocking, ok_one, one, one * size)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--requests", type=int, default=20000, help="requests per run")
    ap.add_argument("--sizes", default="4KiB,64KiB")
    ap.add_argument("--py-threads", type=int, default=16)
    ap.add_argument("--depth", type=int, default=64)
    ap.add_argument("--num-threads", type=int, default=16)
    ap.add_argument("--file-size", default="1GiB")
    ap.add_argument("--files-count", type=int, default=256)
    ap.add_argument("--files-size", default="4MiB")
    ap.add_argument("--seed", type=int, default=14)
    ap.add_argument("--only")
    ap.add_argument("--skip", default="")
    ap.add_argument("--libs", default="gpufile,kvikio")
    ap.add_argument("--dir", help="where the data files are made (reused when present)")
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    a.sizes = gb.parse_list(a.sizes, gb.parse_size, "--sizes")
    a.file_size = gb.parse_size(a.file_size)
    a.files_size = gb.parse_size(a.files_size)
    for name in ("runs", "requests", "py_threads", "depth", "num_threads", "files_count"):
        if getattr(a, name) < 1:
            raise SystemExit(f"--{name.replace('_', '-')} must be at least 1")
    chosen = set(DEFAULT_GROUPS) if a.only is None else {g.strip() for g in a.only.split(",")}
    chosen -= {g.strip() for g in a.skip.split(",")}
    unknown = chosen - set(GROUPS)
    if unknown:
        raise SystemExit(f"unknown groups {sorted(unknown)} (known: {', '.join(GROUPS)})")
    libs = _libs(a.libs)
    b = Bench(a)
    print(f"gpufile {gpufile.__version__}, {os.cpu_count()} CPUs, python {sys.version.split()[0]}, "
          f"medians of {a.runs} runs, host memory")
    for g in GROUPS:
        if g in chosen:
            globals()[f"g_{g}"](b, libs)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": {k: v for k, v in vars(a).items()}, "rows": b.rows}, f, indent=1)


if __name__ == "__main__":
    main()
