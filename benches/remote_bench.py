"""Remote reads over loopback: gpufile vs KvikIO vs a plain HTTP client, same server, same run.

    python benches/remote_bench.py [--size 4GiB] [--threads 16] [--runs 3] [--server-procs N]
                                   [--host-only] [--json PATH]

Serves one file (default 4 GiB, in the page cache) from 127.0.0.1 with a multi-process HTTP
server that answers ranges with sendfile(2), and reads the whole object:

    plain client   http.client threads (--threads), 16 MiB ranges, readinto the destination
                   (GPU rows: into a pinned buffer per thread, then copied to the GPU): what the
                   server delivers to a simple reader, the ceiling the libraries are held to
    curl           one stream to /dev/null, when curl is installed (not verified: bytes dropped)
    gpufile        RemoteFile.open_http + read, at its defaults and at --threads threads
    kvikio         the same, when KvikIO is importable

each into host memory (NumPy) and, where CuPy and a GPU are present and --host-only is not
given, into GPU memory. Every timed read is verified against the file's bytes (after the run,
untimed; the destination is zeroed before each run). Each row is the median of --runs runs after
one untimed run; a run includes the open (the size request) and the close. The runs are
interleaved: each round runs every reader once (settings applied untimed before each), so a
server whose rate drifts weighs on all of them alike; the equal-thread ratio is also given as
the median of the rounds' own ratios. Prints the rows, the
ratios the remote issue sets targets for (gpufile / KvikIO at defaults and at equal threads,
gpufile / plain client), and writes JSON to --json (default $OUT/remote_bench.json, else
./remote_bench.json). No network needed.

On a CPU-only machine, a quick check that the script works:
``python benches/remote_bench.py --size 64MiB --threads 2 --runs 1 --host-only``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import nullcontext
from http.server import ThreadingHTTPServer
from typing import Any, Callable

import numpy as np

import gpufile
from gpufile._http_server import RangeRequestHandler

try:
    import cupy
except ImportError:  # host-only machine
    cupy = None

try:
    import kvikio
    import kvikio.defaults
except ImportError:
    kvikio = None

# The file repeats a random block whose length is no multiple of any task size, so that a range
# landing at the wrong offset is caught by the verification.
BLOCK = (64 << 20) + 4093
PLAIN_TASK = 16 << 20

_UNITS = {"": 1, "b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30,
          "kb": 10**3, "mb": 10**6, "gb": 10**9}


def parse_size(text: str) -> int:
    """Bytes of "4GiB", "64MiB", "1e6" or "123"."""
    m = re.fullmatch(r"\s*([0-9.e+]+)\s*([a-zA-Z]*)\s*", text)
    if m is None or m.group(2).lower() not in _UNITS:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 4GiB, 64MiB, 1000000)")
    n = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    if n <= 0:
        raise argparse.ArgumentTypeError(f"the size must be positive: {text!r}")
    return n


def write_file(path: str, nbytes: int, block: np.ndarray) -> None:
    with open(path, "wb") as f:
        for off in range(0, nbytes, block.nbytes):
            f.write(block[: min(block.nbytes, nbytes - off)].tobytes())


def serve(httpd: ThreadingHTTPServer) -> None:
    httpd.serve_forever()


def start_server(root: str, procs: int):
    """A listening socket shared by `procs` forked processes, each a threading server."""
    handler = lambda *a, **k: RangeRequestHandler(*a, directory=root, **k)  # noqa: E731
    ThreadingHTTPServer.request_queue_size = 1024
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    ctx = multiprocessing.get_context("fork")
    children = [ctx.Process(target=serve, args=(httpd,), daemon=True) for _ in range(procs)]
    for c in children:
        c.start()
    httpd.server_close()  # the children hold the socket
    return f"http://127.0.0.1:{httpd.server_address[1]}", children


def plain_client(url: str, nbytes: int, threads: int, dst: Any, gpu: bool) -> None:
    """http.client threads reading PLAIN_TASK-byte ranges into `dst` (host), or into a pinned
    buffer per thread then copied into `dst` (GPU)."""
    host, port = url.removeprefix("http://").rsplit("/", 1)[0].split(":")
    path = "/" + url.split("/", 3)[3]
    offsets = list(range(0, nbytes, PLAIN_TASK))
    lock = threading.Lock()
    errors: list[BaseException] = []

    def worker() -> None:
        conn = http.client.HTTPConnection(host, int(port))
        if gpu:
            pinned = cupy.cuda.alloc_pinned_memory(PLAIN_TASK)
            staging = np.frombuffer(pinned, dtype=np.uint8, count=PLAIN_TASK)
            stream = cupy.cuda.Stream(non_blocking=True)
        host_view = None if gpu else memoryview(dst)
        try:
            while True:
                with lock:
                    if not offsets or errors:
                        break
                    off = offsets.pop()
                n = min(PLAIN_TASK, nbytes - off)
                conn.request("GET", path, headers={"Range": f"bytes={off}-{off + n - 1}"})
                resp = conn.getresponse()
                if resp.status != 206:
                    raise RuntimeError(f"HTTP {resp.status} for bytes {off}-{off + n - 1}")
                view = memoryview(staging)[:n] if gpu else host_view[off: off + n]
                got = 0
                while got < n:
                    k = resp.readinto(view[got:])
                    if not k:
                        raise RuntimeError(f"short body at {off}: {got} of {n} bytes")
                    got += k
                resp.read()
                if gpu:
                    dst[off: off + n].set(staging[:n], stream=stream)
                    stream.synchronize()
        except BaseException as e:  # noqa: BLE001 - reported by the caller
            errors.append(e)
        finally:
            conn.close()

    ts = [threading.Thread(target=worker) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise errors[0]


def curl_seconds(url: str) -> float | None:
    if shutil.which("curl") is None:
        return None
    out = subprocess.run(["curl", "-sf", "-o", "/dev/null", "-w", "%{time_total}", url],
                         capture_output=True, text=True, check=False)
    try:
        return float(out.stdout)
    except ValueError:
        return None


class Verifier:
    """Checks a destination against the file's bytes, block by block (host or GPU)."""

    def __init__(self, block: np.ndarray, nbytes: int, gpu: bool) -> None:
        self.nbytes = nbytes
        self.gpu = gpu
        self.block = cupy.asarray(block) if gpu else block

    def __call__(self, dst: Any) -> None:
        size = self.block.size
        for off in range(0, self.nbytes, size):
            n = min(size, self.nbytes - off)
            if self.gpu:
                equal = bool(cupy.array_equal(dst[off: off + n], self.block[:n]))
            else:
                equal = np.array_equal(dst[off: off + n], self.block[:n])
            if not equal:
                raise AssertionError(f"wrong bytes in {off}..{off + n}")


def timed_run(run: Callable[[], None], dst: Any, verify: Verifier, gpu: bool) -> float:
    """Seconds of one run into a zeroed `dst`, verified after (untimed)."""
    dst.fill(0)
    if gpu:
        cupy.cuda.runtime.deviceSynchronize()
    t0 = time.perf_counter()
    run()
    if gpu:
        cupy.cuda.runtime.deviceSynchronize()
    elapsed = time.perf_counter() - t0
    verify(dst)
    return elapsed


def interleaved(cases: list[tuple[str, Callable[[], Any], Callable[[], None]]], dst: Any,
                verify: Verifier, runs: int, gpu: bool) -> dict[str, dict | BaseException]:
    """Runs every case once per round, `runs` timed rounds after an untimed one, so that a
    server whose rate drifts during the benchmark weighs on every case alike. A case is
    (name, settings context factory, run); its result is the median of its rounds, or the error
    that stopped it."""
    secs: dict[str, list[float]] = {name: [] for name, _, _ in cases}
    failed: dict[str, BaseException] = {}
    for i in range(runs + 1):
        for name, settings, run in cases:
            if name in failed:
                continue
            try:
                with settings():  # applied untimed (KvikIO rebuilds its pool)
                    elapsed = timed_run(run, dst, verify, gpu)
            except Exception as e:  # noqa: BLE001 - report, keep measuring the others
                failed[name] = e
                continue
            if i > 0:
                secs[name].append(elapsed)
    return {name: failed.get(name) or {"seconds": statistics.median(s), "runs": s,
                                       "verified": True}
            for name, s in secs.items()}


def library_read(lib: Any, url: str, dst: Any, nbytes: int) -> Callable[[], None]:
    def run() -> None:
        with lib.RemoteFile.open_http(url) as f:
            got = f.read(dst)
            if got != nbytes:
                raise RuntimeError(f"read {got} of {nbytes} bytes")
    return run


def gpu_present() -> bool:
    if cupy is None:
        return False
    try:
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # noqa: BLE001 - no driver or no device: host rows only
        return False


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=parse_size, default=4 << 30, help="object size (4GiB)")
    ap.add_argument("--threads", type=int, default=16,
                    help="the equal thread count, and the plain client's threads")
    ap.add_argument("--runs", type=int, default=3, help="timed runs per row (median)")
    ap.add_argument("--server-procs", type=int, default=os.cpu_count() or 8)
    ap.add_argument("--host-only", action="store_true", help="no GPU rows, even with a GPU")
    ap.add_argument("--json", help="where the JSON goes (default $OUT/remote_bench.json)")
    args = ap.parse_args()
    if args.threads < 1 or args.runs < 1 or args.server_procs < 1:
        ap.error("--threads, --runs and --server-procs must be positive")
    nbytes = args.size
    json_path = args.json or os.path.join(os.environ.get("OUT", "."), "remote_bench.json")
    rows: list[dict] = []
    notes: list[str] = []
    paired: dict[str, float] = {}
    block = np.random.default_rng(0).integers(0, 256, min(BLOCK, nbytes), dtype=np.uint8)

    def row(reader: str, memory: str, settings: str, result: dict | None = None,
            error: BaseException | None = None) -> None:
        r = {"reader": reader, "memory": memory, "settings": settings}
        if result is not None:
            r.update(result, gbps=nbytes / result["seconds"] / 1e9)
        if error is not None:
            r.update(gbps=None, error=f"{type(error).__name__}: {error}")
        rows.append(r)
        g = "-" if r.get("gbps") is None else f"{r['gbps']:.2f}"
        print(f"  {reader:<24} {memory:<5} {settings:<34} {g:>8} GB/s  {r.get('error', '')}",
              flush=True)

    with tempfile.TemporaryDirectory() as root:
        write_file(os.path.join(root, "data.bin"), nbytes, block)
        base, children = start_server(root, args.server_procs)
        url = f"{base}/data.bin"
        try:
            targets = [("host", False)]
            if args.host_only:
                notes.append("GPU rows skipped: --host-only")
            elif gpu_present():
                targets.append(("gpu", True))
            else:
                notes.append("GPU rows skipped: no CuPy or no GPU")
            libs: list[tuple[str, Any]] = [("gpufile", gpufile)]
            if kvikio is not None:
                libs.append(("kvikio", kvikio))
            else:
                notes.append("KvikIO rows skipped: kvikio does not import")

            secs = curl_seconds(url)
            if secs:
                row("curl (1 stream)", "host", "to /dev/null, not verified",
                    {"seconds": secs, "runs": [secs], "verified": False})
            for memory, gpu in targets:
                dst = cupy.empty(nbytes, dtype=cupy.uint8) if gpu else np.empty(nbytes, np.uint8)
                verify = Verifier(block, nbytes, gpu)
                plain_label = f"{args.threads} threads, 16 MiB ranges"
                cases: list[tuple[str, Callable[[], Any], Callable[[], None]]] = [(
                    "plain client", nullcontext,
                    lambda dst=dst, gpu=gpu: plain_client(url, nbytes, args.threads, dst, gpu))]
                shown: dict[str, tuple[str, str]] = {"plain client": ("plain client", plain_label)}
                for name, lib in libs:
                    for label, settings in (("defaults", None),
                                            ("equal threads", {"num_threads": args.threads})):
                        def ctx(lib: Any = lib, settings: dict | None = settings) -> Any:
                            return lib.defaults.set(settings) if settings else nullcontext()
                        with ctx():
                            text = (f"{label} (num_threads={lib.defaults.get('num_threads')}"
                                    f", task_size={lib.defaults.get('task_size')})")
                        key = f"{name} {label}"
                        shown[key] = (name, text)
                        cases.append((key, ctx, library_read(lib, url, dst, nbytes)))
                results = interleaved(cases, dst, verify, args.runs, gpu)
                for key, result in results.items():
                    reader, text = shown[key]
                    if isinstance(result, BaseException):
                        row(reader, memory, text, error=result)
                    else:
                        row(reader, memory, text, result)
                pair = [results.get(f"{n} equal threads") for n in ("gpufile", "kvikio")]
                if all(isinstance(r, dict) for r in pair):
                    # Same round, same server state: the ratio of each round, then the median.
                    per_round = [k / g for g, k in zip(pair[0]["runs"], pair[1]["runs"])]
                    paired[memory] = statistics.median(per_round)
                del dst
        finally:
            for c in children:
                c.kill()

    def rate(reader: str, memory: str, label: str | None = None) -> float | None:
        for r in rows:
            if (r["reader"] == reader and r["memory"] == memory and r.get("gbps")
                    and (label is None or r["settings"].startswith(label))):
                return r["gbps"]
        return None

    ratios = {}
    for memory, _ in targets:
        g_def, g_eq = rate("gpufile", memory, "defaults"), rate("gpufile", memory, "equal")
        k_def, k_eq = rate("kvikio", memory, "defaults"), rate("kvikio", memory, "equal")
        plain = rate("plain client", memory)
        for key, a, b in ((f"{memory}: gpufile/kvikio at defaults (target >= 1.5)", g_def, k_def),
                          (f"{memory}: gpufile/kvikio at equal threads (target >= 1.0)", g_eq, k_eq),
                          (f"{memory}: best gpufile/plain client (target >= 0.9)",
                           max(filter(None, (g_def, g_eq)), default=None), plain)):
            if a and b:
                ratios[key] = a / b
    print(f"\nsize {nbytes} bytes, {args.runs} runs per row (median), "
          f"server {args.server_procs} processes")
    for memory, value in paired.items():
        ratios[f"{memory}: gpufile/kvikio at equal threads, median of per-round ratios"] = value
    for key, value in ratios.items():
        print(f"  {key:<58} {value:.2f}x")
    for note in notes:
        print(f"  note: {note}")
    result = {"size_bytes": nbytes, "threads": args.threads, "runs": args.runs,
              "server_procs": args.server_procs, "gpufile": gpufile.__version__,
              "kvikio": getattr(kvikio, "__version__", None), "rows": rows, "ratios": ratios,
              "notes": notes}
    with open(json_path, "w") as f:
        json.dump(result, f, indent=2)
    print(f"  JSON: {json_path}")
    return 1 if any(r.get("error") for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
