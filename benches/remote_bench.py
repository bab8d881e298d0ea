"""Remote reads over loopback: gpufile vs KvikIO vs a plain HTTP client, same server, same run.

    python benches/remote_bench.py [--size-gib 4] [--threads 16] [--repeat 3] [--server-procs 8]

Serves a file (default 4 GiB, in the page cache) from 127.0.0.1 with a multi-process HTTP
server that answers ranges with sendfile(2), measures first what a plain client gets from it
(http.client threads with readinto, and curl when installed), then reads the whole object into
host memory (NumPy) and, where CuPy and a GPU are present, into GPU memory, with gpufile and (if
installed) KvikIO, at each library's default settings and at equal thread counts. Prints a table
and writes JSON to $OUT/remote_bench.json (or ./remote_bench.json). No network needed.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from http.server import ThreadingHTTPServer

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


def serve(httpd: ThreadingHTTPServer) -> None:
    httpd.serve_forever()


def start_server(root: str, procs: int):
    """A listening socket shared by `procs` forked processes, each a threading server."""
    handler = lambda *a, **k: RangeRequestHandler(*a, directory=root, **k)  # noqa: E731
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.request_queue_size = 1024
    httpd.daemon_threads = True
    ctx = multiprocessing.get_context("fork")
    children = [ctx.Process(target=serve, args=(httpd,), daemon=True) for _ in range(procs)]
    for c in children:
        c.start()
    return f"http://127.0.0.1:{httpd.server_address[1]}", children


def plain_client(url: str, nbytes: int, threads: int, task: int = 16 << 20) -> float:
    """GB/s of http.client threads reading `task`-byte ranges into one host buffer."""
    host, port = url.removeprefix("http://").split(":")
    buf = np.empty(nbytes, dtype=np.uint8)
    view = memoryview(buf)
    offsets = list(range(0, nbytes, task))
    lock = threading.Lock()

    def worker():
        conn = http.client.HTTPConnection(host, int(port))
        while True:
            with lock:
                if not offsets:
                    break
                off = offsets.pop()
            n = min(task, nbytes - off)
            conn.request("GET", "/data.bin", headers={"Range": f"bytes={off}-{off + n - 1}"})
            resp = conn.getresponse()
            got = 0
            while got < n:
                k = resp.readinto(view[off + got : off + n])
                if not k:
                    raise RuntimeError("short body")
                got += k
            resp.read()
        conn.close()

    t0 = time.perf_counter()
    ts = [threading.Thread(target=worker) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return nbytes / (time.perf_counter() - t0) / 1e9


def curl_rate(url: str) -> float | None:
    if shutil.which("curl") is None:
        return None
    out = subprocess.run(
        ["curl", "-s", "-o", "/dev/null", "-w", "%{speed_download}", f"{url}/data.bin"],
        capture_output=True, text=True, check=False,
    )
    try:
        return float(out.stdout) / 1e9
    except ValueError:
        return None


def timed(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-gib", type=float, default=4.0)
    ap.add_argument("--threads", type=int, default=16, help="the equal thread count")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--server-procs", type=int, default=os.cpu_count() or 8)
    args = ap.parse_args()
    nbytes = int(args.size_gib * (1 << 30))
    out_dir = os.environ.get("OUT", ".")
    rows: list[dict] = []

    with tempfile.TemporaryDirectory() as root:
        path = os.path.join(root, "data.bin")
        chunk = np.random.default_rng(0).integers(0, 256, 64 << 20, dtype=np.uint8)
        with open(path, "wb") as f:
            for off in range(0, nbytes, chunk.nbytes):
                f.write(chunk[: min(chunk.nbytes, nbytes - off)].tobytes())
        url, children = start_server(root, args.server_procs)
        obj = f"{url}/data.bin"
        try:
            plain_client(url, min(nbytes, 1 << 30), args.threads)  # warm the page cache
            rows.append({"reader": "http.client threads", "memory": "host", "settings": f"{args.threads} threads",
                         "gbps": plain_client(url, nbytes, args.threads)})
            c = curl_rate(url)
            if c is not None:
                rows.append({"reader": "curl (1 stream)", "memory": "host", "settings": "-", "gbps": c})

            targets = [("host", lambda: np.empty(nbytes, dtype=np.uint8))]
            if cupy is not None:
                try:
                    cupy.cuda.runtime.getDeviceCount()
                    targets.append(("gpu", lambda: cupy.empty(nbytes, dtype=cupy.uint8)))
                except Exception:  # noqa: BLE001 - no GPU: host rows only
                    pass

            libs = [("gpufile", gpufile)] + ([("kvikio", kvikio)] if kvikio is not None else [])
            for memory, alloc in targets:
                buf = alloc()
                for name, lib in libs:
                    for label, settings in (("defaults", {}), (f"{args.threads} threads", {"num_threads": args.threads})):
                        def run(lib=lib):
                            with lib.RemoteFile.open_http(obj) as f:
                                assert f.read(buf) == nbytes
                        try:
                            with lib.defaults.set(settings) if settings else _null():
                                threads = lib.defaults.get("num_threads")
                                secs = timed(run, args.repeat)
                            rows.append({"reader": name, "memory": memory, "settings": f"{label} (num_threads={threads})",
                                         "gbps": nbytes / secs / 1e9})
                        except Exception as e:  # noqa: BLE001 - report, keep measuring
                            rows.append({"reader": name, "memory": memory, "settings": label, "gbps": None,
                                         "error": f"{type(e).__name__}: {e}"})
                del buf
        finally:
            for c in children:
                c.kill()

    print(f"{'reader':<22} {'memory':<6} {'settings':<34} {'GB/s':>8}")
    for r in rows:
        g = "-" if r["gbps"] is None else f"{r['gbps']:.2f}"
        print(f"{r['reader']:<22} {r['memory']:<6} {r['settings']:<34} {g:>8}  {r.get('error', '')}")
    result = {"size_bytes": nbytes, "threads": args.threads, "server_procs": args.server_procs,
              "gpufile": gpufile.__version__, "kvikio": getattr(kvikio, "__version__", None), "rows": rows}
    with open(os.path.join(out_dir, "remote_bench.json"), "w") as f:
        json.dump(result, f, indent=2)


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


if __name__ == "__main__":
    sys.exit(main())
