"""NIXL's storage backends side by side through NIXL's own agent (issue 54): blocks of a hot file
into DRAM (and VRAM where --vram), NIXL's POSIX plugin against gpufile's GPUFILE plugin.

    python benches/nixl_bench.py [--file-size 1GiB] [--cases 2MiB:512:seq,64KiB:4096:random]
                                 [--backends POSIX,GPUFILE] [--runs 5] [--vram] [--poll-us 0] [--dir DIR]
                                 [--json out.json]

Each case is block size:count:order; "seq" reads blocks 0..count-1 in order, "random" a seeded
random choice of distinct blocks of the file, landing in order in one registered buffer. One
agent holds both backends; the buffer and the file (by descriptor) are registered with each.
A third row, "gpufile", is gpufile's own `gpufile_file_pread_ranges` of the same blocks into the
same buffer through the libgpufile.so the plugin loaded (no NIXL): the ceiling the plugin is
measured against. Per run and backend: `initialize_xfer` (timed apart: NIXL's per-descriptor preparation, the
agent's overhead), then `transfer` and `check_xfer_state` polled until DONE (the transfer's
time; --poll-us pauses between polls: a poll without pause takes a core from the readers on a
small machine), then every byte of the buffer checked against the file. Runs interleave the backends;
each row is the median of --runs runs after one untimed run. Backend parameters are each
plugin's defaults (GPUFILE: gpufile's settings, its thread count chosen from the machine).

The GPUFILE plugin is $GPUFILE_NIXL_PLUGIN, or built by scripts/build_nixl_plugin.sh against
libgpufile's release build (NIXL's headers: $NIXL_INCLUDE_DIR or build/nixl-headers/*).
NIXL comes from the nixl-cu13 wheel; its plugin folder is made as tests/nixl_support.py makes
it. The table comes last; --json writes every run.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import nixl_support  # noqa: E402

UNITS = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "B": 1}


def size(text: str) -> int:
    for unit, mult in UNITS.items():
        if text.endswith(unit):
            return int(float(text[: -len(unit)]) * mult)
    return int(text)


def blocks_of(case: str, file_size: int) -> tuple[int, np.ndarray, str]:
    bs, count, order = case.split(":")
    block = size(bs)
    n = int(count)
    total = file_size // block
    assert n <= total, f"{case}: the file has {total} blocks"
    if order == "seq":
        idx = np.arange(n)
    else:
        idx = np.random.default_rng(54).choice(total, n, replace=False)
    return block, idx, order


class Range(ctypes.Structure):
    _fields_ = [("file_offset", ctypes.c_uint64), ("size", ctypes.c_size_t),
                ("buf_offset", ctypes.c_size_t)]


class Direct:
    """gpufile's own many-range read through its C ABI (the plugin's libgpufile.so)."""

    def __init__(self, lib: Path, path: Path):
        self.lib = ctypes.CDLL(str(lib))
        self.fh = ctypes.c_void_p()
        assert self.lib.gpufile_file_open(str(path).encode(), b"r", ctypes.byref(self.fh)) == 0

    def read(self, ptr: int, block: int, idx: np.ndarray) -> None:
        n = len(idx)
        ranges = (Range * n)(*[Range(int(b) * block, block, i * block) for i, b in enumerate(idx)])
        fut = ctypes.c_void_p()
        rc = self.lib.gpufile_file_pread_ranges(self.fh, ctypes.c_void_p(ptr),
                                                ctypes.c_size_t(n * block), ranges,
                                                ctypes.c_size_t(n), None, ctypes.byref(fut))
        assert rc == 0 and self.lib.gpufile_future_wait(fut, None) == 0
        self.lib.gpufile_future_free(fut)

    def close(self) -> None:
        self.lib.gpufile_file_close(self.fh)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--file-size", default="1GiB")
    ap.add_argument("--cases", default="2MiB:512:seq,64KiB:4096:random")
    ap.add_argument("--backends", default="POSIX,GPUFILE")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--vram", action="store_true", help="also into GPU memory (CuPy)")
    ap.add_argument("--poll-us", type=float, default=0.0,
                    help="sleep between check_xfer_state polls (0: poll without pause)")
    ap.add_argument("--dir", default=None)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    api = nixl_support.nixl_api()
    if api is None:
        print("nixl-cu13 is not installed", file=sys.stderr)
        return 2
    plugin = nixl_support.build_plugin("release")
    work = Path(tempfile.mkdtemp(prefix="nixl-bench-", dir=args.dir))
    os.environ["NIXL_PLUGIN_DIR"] = str(nixl_support.plugin_dir(plugin, work / "plugins"))
    backends = args.backends.split(",")
    agent = api.nixl_agent("bench", api.nixl_agent_config(backends=backends))

    file_size = size(args.file_size)
    path = work / "data.bin"
    data = np.random.default_rng(1).integers(0, 256, file_size, dtype=np.uint8)
    data.tofile(path)
    with open(path, "rb") as f:  # hot: every page in the page cache
        while f.read(64 << 20):
            pass
    fd = os.open(path, os.O_RDONLY)
    file_reg = agent.register_memory([(0, file_size, fd, "")], "FILE", backends=backends)
    direct = Direct(plugin.parent / "libgpufile.so", path)

    mems = [("DRAM", None)]
    if args.vram:
        import cupy
        mems.append(("VRAM", cupy))
    rows, runs_out = [], []
    for case in args.cases.split(","):
        block, idx, order = blocks_of(case, file_size)
        n = len(idx)
        want = data.reshape(-1, block)[idx]
        for mem, cupy in mems:
            if cupy is None:
                buf = np.zeros(n * block, dtype=np.uint8)
                ptr, dev = buf.ctypes.data, 0
            else:
                buf = cupy.zeros(n * block, dtype=cupy.uint8)
                ptr, dev = buf.data.ptr, buf.device.id
            mem_backends = [b for b in backends if mem == "DRAM" or b != "POSIX"]
            reg = agent.register_memory([(ptr, n * block, dev, "")], mem, backends=mem_backends)
            ldescs = agent.get_xfer_descs([(ptr + i * block, block, dev) for i in range(n)], mem)
            rdescs = agent.get_xfer_descs([(int(b) * block, block, fd) for b in idx], "FILE")
            times = {b: [] for b in mem_backends + ["gpufile"]}
            preps = {b: [] for b in mem_backends + ["gpufile"]}
            for run in range(args.runs + 1):
                for b in mem_backends + ["gpufile"]:
                    buf.fill(0)
                    if b == "gpufile":
                        t1 = time.perf_counter()
                        direct.read(ptr, block, idx)
                        t2 = time.perf_counter()
                        got = buf if cupy is None else cupy.asnumpy(buf)
                        assert np.array_equal(got.reshape(n, block), want), "gpufile: bytes differ"
                        if run > 0:
                            times[b].append(t2 - t1)
                            preps[b].append(0.0)
                        continue
                    t0 = time.perf_counter()
                    h = agent.initialize_xfer("READ", ldescs, rdescs, "bench", backends=[b])
                    t1 = time.perf_counter()
                    state = agent.transfer(h)
                    while state == "PROC":
                        if args.poll_us:
                            time.sleep(args.poll_us / 1e6)
                        state = agent.check_xfer_state(h)
                    t2 = time.perf_counter()
                    agent.release_xfer_handle(h)
                    assert state == "DONE", (b, state)
                    got = buf if cupy is None else cupy.asnumpy(buf)
                    assert np.array_equal(got.reshape(n, block), want), f"{b}: bytes differ"
                    if run > 0:
                        times[b].append(t2 - t1)
                        preps[b].append(t1 - t0)
                        runs_out.append({"case": case, "mem": mem, "backend": b,
                                         "xfer_s": t2 - t1, "prep_s": t1 - t0})
            for b in mem_backends + ["gpufile"]:
                t = statistics.median(times[b])
                p = statistics.median(preps[b])
                rows.append((case, mem, b, n * block / t / 1e9, n / t, p / n * 1e6))
            agent.deregister_memory(reg, backends=mem_backends)
            del buf
    agent.deregister_memory(file_reg, backends=backends)
    direct.close()
    os.close(fd)
    path.unlink()

    if args.json:
        Path(args.json).write_text(json.dumps({"runs": runs_out, "rows": rows}, indent=1))
    print(f"\nhot {args.file_size} file, median of {args.runs} runs, every byte verified")
    print(f"{'case':22} {'mem':5} {'backend':8} {'GB/s':>7} {'blocks/s':>10} {'prep us/desc':>13}")
    for case, mem, b, gbs, bps, prep in rows:
        print(f"{case:22} {mem:5} {b:8} {gbs:7.2f} {bps:10.0f} {prep:13.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
