"""Saving a state dict from GPU memory, side by side (the checkpoint-saving issue).

    python benches/save_bench.py [--gb 4] [--runs 3] [--dir DIR] [--json out.json]

One bf16 state dict of --gb GB on cuda:0 (tensors of 64 MiB), written into --dir (same disk for
every row) by:

    dd                       the disk's own write limit: ``dd oflag=direct conv=fsync bs=16M``,
                             and its read limit: ``dd iflag=direct bs=16M`` of the DCP files
    safetensors save_file    ``safetensors.torch.save_file`` then ``fsync``
    torch.save               ``torch.save`` then ``fsync``
    gpufile save_file        ``gpufile.safetensors.save_file`` (durable: fsync, rename, dir fsync)
    gpufile save_file, not durable   ``durable=False`` (page cache only)
    gpufile save_checkpoint  four shards (written together), durable and not
    safetensors / torch.save without fsync  (the page-cache peers of the row above)
    async_save blocked       time ``gpufile.safetensors.async_save`` blocks its caller (its
                             first call in the process apart; a GPU snapshot, and pinned staging
                             with ``async_save_device_limit`` 0), beside the D2H copy of the same
                             bytes into pinned memory and their D2D copy; ``dcp.async_save`` with
                             gpufile's and torch's writers
    dcp.save torch / gpufile ``dcp.save`` with torch's and gpufile's ``FileSystemWriter``
    dcp.load torch / gpufile ``dcp.load`` into GPU tensors, hot and cold (the files' pages
                             dropped with ``posix_fadvise(DONTNEED)`` before each cold run)

Every file written is checked by reading it back (a checksum of every tensor against the
source). Medians of --runs; the JSON has every run; the table comes last.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time


def _fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _drop(paths) -> None:
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def _files(d: str) -> list[str]:
    return [os.path.join(r, f) for r, _, fs in os.walk(d) for f in fs]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gb", type=float, default=4.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--dir", default=None, help="where files go (default: a new folder in /tmp)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--skip", default="", help="comma list: dd,peers,save,ckpt,async,dcp")
    a = ap.parse_args()
    skip = set(filter(None, a.skip.split(",")))

    import torch
    import safetensors.torch as st

    import gpufile
    import gpufile.safetensors as gst

    dev = "cuda:0" if torch.cuda.is_available() else "cpu"
    per = 64 << 20
    n = max(1, int(a.gb * 1e9) // per)
    g = torch.Generator(device=dev).manual_seed(0)
    sd = {f"layer.{i}.weight": torch.randn(per // 2, generator=g, device=dev,
                                           dtype=torch.float32).to(torch.bfloat16)
          for i in range(n)}
    nbytes = n * per
    sums = {k: float(v.float().sum()) for k, v in sd.items()}
    base = a.dir or tempfile.mkdtemp(prefix="gpufile-save-", dir="/tmp")
    os.makedirs(base, exist_ok=True)
    rows: list[dict] = []

    def check(loaded) -> None:
        for k, v in loaded.items():
            got = float(v.to(dev).float().sum())
            if got != sums[k]:
                raise SystemExit(f"verification failed: {k}: {got} != {sums[k]}")

    def measure(name: str, fn, verify=None, setup=None, unit="GB/s") -> None:
        times = []
        for _ in range(a.runs):
            if setup:
                setup()
            if dev.startswith("cuda"):
                torch.cuda.synchronize()
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
            if verify:
                verify()
        med = statistics.median(times)
        value = nbytes / med / 1e9 if unit == "GB/s" else med
        rows.append({"case": name, "value": value, "unit": unit, "runs_s": times})
        print(f"  {name:<48} {value:8.2f} {unit}", flush=True)

    path = os.path.join(base, "one.safetensors")

    def rm(p=path):
        if os.path.isdir(p):
            shutil.rmtree(p)
        elif os.path.exists(p):
            os.remove(p)

    # The disk's write limit.
    ddf = os.path.join(base, "dd.bin")
    count = max(1, nbytes // (16 << 20))
    if "dd" not in skip:
        measure("dd oflag=direct conv=fsync bs=16M", lambda: subprocess.run(
            ["dd", "if=/dev/zero", f"of={ddf}", "bs=16M", f"count={count}", "oflag=direct",
             "conv=fsync"], check=True, capture_output=True), setup=lambda: rm(ddf))
        rm(ddf)

    if "peers" not in skip:
        def st_save(sync=True):
            st.save_file(sd, path)
            if sync:
                _fsync_path(path)

        def torch_save(sync=True):
            torch.save(sd, path)
            if sync:
                _fsync_path(path)

        measure("safetensors save_file + fsync", st_save, setup=rm,
                verify=lambda: check(st.load_file(path)))
        measure("torch.save + fsync", torch_save, setup=rm)
        measure("safetensors save_file, no fsync", lambda: st_save(False), setup=rm)
        measure("torch.save, no fsync", lambda: torch_save(False), setup=rm)
    if "save" not in skip:
        measure("gpufile save_file (durable)", lambda: gst.save_file(sd, path), setup=rm,
                verify=lambda: check(st.load_file(path)))
        measure("gpufile save_file, durable=False", lambda: gst.save_file(sd, path, durable=False),
                setup=rm, verify=lambda: check(gst.load_file(path, device=dev)))
    ck = os.path.join(base, "ckpt")
    shard = max(1, nbytes // 4)  # four shards, written together
    if "ckpt" not in skip:
        measure("gpufile save_checkpoint (durable, 4 shards)",
                lambda: gst.save_checkpoint(sd, ck, max_shard_size=shard),
                setup=lambda: rm(ck), verify=lambda: check(gst.load_checkpoint(ck, device=dev)))
        measure("gpufile save_checkpoint, durable=False, 4 shards",
                lambda: gst.save_checkpoint(sd, ck, max_shard_size=shard, durable=False),
                setup=lambda: rm(ck), verify=lambda: check(gst.load_checkpoint(ck, device=dev)))
        rm(ck)

    if "async" not in skip and dev.startswith("cuda"):
        pinned = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)

        def d2h():
            off = 0
            for v in sd.values():
                b = v.view(torch.uint8).reshape(-1)
                pinned[off:off + b.numel()].copy_(b, non_blocking=True)
                off += b.numel()
            torch.cuda.synchronize()

        measure("D2H copy into pinned memory (the floor)", d2h, unit="s")
        del pinned

        futs = []

        def blocked(name: str) -> None:
            def save():
                futs.append(gst.async_save(sd, path))
                if hasattr(futs[-1], "staging"):  # an earlier gpufile has no staging()
                    print(f"    staging: {futs[-1].staging()}", flush=True)

            def finish():
                futs.pop().result()
                check(st.load_file(path))
            measure(name, save, unit="s", setup=rm, verify=finish)

        # The first call of the process is the one that used to pay for pinning its buffer.
        runs = a.runs
        a.runs = 1
        blocked("async_save: caller blocked, first call")
        a.runs = runs

        def d2d():
            snap = {k: v.clone() for k, v in sd.items()}
            torch.cuda.synchronize()
            return snap

        measure("D2D copy of the same tensors (the floor of a GPU snapshot)", d2d, unit="s")
        blocked("async_save: caller blocked (GPU snapshot)")
        if any(r[0] == "async_save_device_limit" for r in gpufile.defaults.report()):
            with gpufile.defaults.set("async_save_device_limit", 0):  # not in earlier gpufiles
                blocked("async_save: caller blocked, pinned staging (device limit 0)")
        if "dcp" not in skip:
            import torch.distributed.checkpoint as dcp

            from gpufile.torch import FileSystemWriter
            dfuts = []
            adir = os.path.join(base, "dcp-async")
            measure("dcp.async_save, gpufile's writer: caller blocked",
                    lambda: dfuts.append(dcp.async_save(sd, storage_writer=FileSystemWriter(adir))),
                    unit="s", setup=lambda: rm(adir), verify=lambda: dfuts.pop().result())
            measure("dcp.async_save, torch's writer: caller blocked",
                    lambda: dfuts.append(dcp.async_save(
                        sd, storage_writer=torch.distributed.checkpoint.FileSystemWriter(adir))),
                    unit="s", setup=lambda: rm(adir), verify=lambda: dfuts.pop().result())
            rm(adir)

    if "dcp" not in skip:
        import torch.distributed.checkpoint as dcp

        from gpufile.torch import FileSystemReader, FileSystemWriter

        tdir, gdir = os.path.join(base, "dcp-torch"), os.path.join(base, "dcp-gpufile")
        fs = torch.distributed.checkpoint

        def target():
            return {k: torch.empty_like(v) for k, v in sd.items()}

        def load_check(d, reader):
            t = target()
            dcp.load(t, storage_reader=reader(d))
            check(t)

        measure("dcp.save, torch's FileSystemWriter", lambda: dcp.save(
            sd, storage_writer=fs.FileSystemWriter(tdir)), setup=lambda: rm(tdir))
        measure("dcp.save, gpufile's FileSystemWriter", lambda: dcp.save(
            sd, storage_writer=FileSystemWriter(gdir)), setup=lambda: rm(gdir),
            verify=lambda: load_check(gdir, fs.FileSystemReader))
        # The disk's read limit, on the same files: O_DIRECT reads of 16 MiB, one file after
        # another (what a cold load can reach with one stream of requests).
        measure("dd iflag=direct bs=16M (the disk's read limit)", lambda: [subprocess.run(
            ["dd", f"if={f}", "of=/dev/null", "bs=16M", "iflag=direct"], check=True,
            capture_output=True) for f in _files(gdir)])
        for name, d, reader in (("torch's", tdir, fs.FileSystemReader),
                                ("gpufile's", gdir, FileSystemReader)):
            t = target()
            measure(f"dcp.load hot, {name} FileSystemReader",
                    lambda: dcp.load(t, storage_reader=reader(d)), verify=lambda: check(t))
            measure(f"dcp.load cold, {name} FileSystemReader",
                    lambda: dcp.load(t, storage_reader=reader(d)),
                    setup=lambda: _drop(_files(d)), verify=lambda: check(t))
    if not a.dir:
        shutil.rmtree(base, ignore_errors=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"gb": nbytes / 1e9, "runs": a.runs, "rows": rows}, f, indent=1)
    print(f"\nstate dict {nbytes / 1e9:.2f} GB bf16 on {dev}; medians of {a.runs}, verified")
    print("| case | value |\n| --- | --- |")
    for r in rows:
        print(f"| {r['case']} | {r['value']:.2f} {r['unit']} |")


if __name__ == "__main__":
    main()
