"""Model checkpoint → GPU: gpufile.safetensors vs safetensors, fastsafetensors, InstantTensor.

Generates a Llama-like bf16 checkpoint (default 8 GB: 20 layers x 7 matrices, hidden 4096,
intermediate 11008) as one file and as 4 shards with a model.safetensors.index.json, then loads
each with every loader, cold (page cache dropped) and hot, the median of `--repeats` runs. Every
loader's tensors are compared bit for bit with safetensors' own result. A loader whose package is
missing is skipped with the reason. Prints a table; writes JSON to $OUT (or --out).

    python benches/safetensors_bench.py [--dir DIR] [--gb 8] [--device 0] [--repeats 3]
    python benches/safetensors_bench.py --ranks 2 4 8 [--gb 1]     # tensor-parallel ranks

`--ranks N...`: N simulated tensor-parallel ranks in turn (hot), each loading its shard of the
one-file checkpoint with `load_checkpoint(..., shard=...)` (q/k/v/gate/up "colwise", o/down
"rowwise"): the bytes each rank reads (from `gpufile.observe()`), its GB/s, and that of a plain
read of the same byte count from the same file into memory allocated for it; every shard
compared with slicing the full tensor. Host memory where CUDA is missing.

Cold runs evict the files with gpufile.drop_file_page_cache (no root needed) and, as root, also
write 3 to /proc/sys/vm/drop_caches.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import struct
import sys
import time

import numpy as np

HIDDEN, INTER = 4096, 11008


def llama_layout(gb: float) -> list[tuple[str, tuple[int, int]]]:
    """20 layers x 7 matrices at 8 GB; the layer count scales with --gb."""
    per_layer = 2 * (4 * HIDDEN * HIDDEN + 3 * HIDDEN * INTER)
    layers = max(1, round(gb * 1e9 / per_layer))
    out = []
    for i in range(layers):
        p = f"model.layers.{i}."
        for w in ("q_proj", "k_proj", "v_proj", "o_proj"):
            out.append((p + f"self_attn.{w}.weight", (HIDDEN, HIDDEN)))
        out.append((p + "mlp.gate_proj.weight", (INTER, HIDDEN)))
        out.append((p + "mlp.up_proj.weight", (INTER, HIDDEN)))
        out.append((p + "mlp.down_proj.weight", (HIDDEN, INTER)))
    return out


def write_safetensors(path: str, tensors: list[tuple[str, tuple[int, int]]], block: np.ndarray,
                      first: int) -> None:
    """Writes bf16 tensors; tensor k of the whole layout (`first` + index here) takes its bytes
    from `block` at its own rotation, so shards hold the single file's bytes and tensors differ,
    without generating gigabytes of random numbers."""
    header, offset = {}, 0
    for name, shape in tensors:
        n = shape[0] * shape[1] * 2
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for j, (name, shape) in enumerate(tensors):
            n = shape[0] * shape[1] * 2
            start = (first + j) * 104729 % len(block)
            while n:
                chunk = block[start:start + n]
                f.write(chunk.data)
                n -= len(chunk)
                start = 0


def generate(d: str, gb: float) -> tuple[str, str, list]:
    os.makedirs(d, exist_ok=True)
    layout = llama_layout(gb)
    single = os.path.join(d, "single", "model.safetensors")
    shard_dir = os.path.join(d, "sharded")
    marker = os.path.join(d, f"done-{gb}")
    if not os.path.exists(marker):
        os.makedirs(os.path.dirname(single), exist_ok=True)
        os.makedirs(shard_dir, exist_ok=True)
        block = np.random.default_rng(0).integers(0, 256, 256 << 20, dtype=np.uint8)
        t0 = time.perf_counter()
        write_safetensors(single, layout, block, 0)
        quarter = -(-len(layout) // 4)
        weight_map = {}
        for s in range(4):
            part = layout[s * quarter:(s + 1) * quarter]
            name = f"model-{s + 1:05d}-of-00004.safetensors"
            write_safetensors(os.path.join(shard_dir, name), part, block, s * quarter)
            weight_map.update({n: name for n, _ in part})
        with open(os.path.join(shard_dir, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": sum(2 * a * b for _, (a, b) in layout)},
                       "weight_map": weight_map}, f)
        os.sync()
        open(marker, "w").close()
        print(f"generated {len(layout)} tensors x2 in {time.perf_counter() - t0:.0f} s",
              file=sys.stderr)
    return single, shard_dir, layout


def files_of(path: str) -> list[str]:
    if os.path.isdir(path):
        return sorted(os.path.join(path, f) for f in os.listdir(path)
                      if f.endswith(".safetensors"))
    return [path]


def drop_caches(path: str) -> str:
    import gpufile
    for f in files_of(path):
        gpufile.drop_file_page_cache(f)
    if os.geteuid() == 0:
        try:
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("3\n")
            return "fadvise+drop_caches"
        except OSError:
            pass
    return "fadvise"


# ---- loaders: each returns (tensors, keep-alive); tensors are torch CUDA tensors ----

def load_gpufile(path, dev):
    import gpufile.safetensors as gs
    return gs.load_checkpoint(path, f"cuda:{dev}"), None


def load_safetensors(path, dev):
    from safetensors.torch import load_file
    out = {}
    for f in files_of(path):
        out.update(load_file(f, device=f"cuda:{dev}"))
    return out, None


def load_fastsafetensors(path, dev):
    import torch
    from fastsafetensors import SafeTensorsFileLoader, SingleGroup
    loader = SafeTensorsFileLoader(SingleGroup(), torch.device(f"cuda:{dev}"), nogds=True)
    loader.add_filenames({0: files_of(path)})
    fb = loader.copy_files_to_device()
    out = {k: fb.get_tensor(k) for k in fb.key_to_rank_lidx}
    return out, (fb, loader)


def load_instanttensor(path, dev):
    from instanttensor import safe_open
    out = {}
    with safe_open(files_of(path), framework="pt", device=dev) as f:
        for name, t in f.tensors():
            out[name] = t.clone()
    return out, None


def load_plain_read(path, dev):
    """The ceiling a checkpoint load is measured against: each file read whole by one plain
    gpufile read into one CUDA buffer (header bytes included), the tensors views of it."""
    import torch

    import gpufile
    dtypes = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32}
    out, bufs = {}, []
    for f in files_of(path):
        size = os.path.getsize(f)
        buf = torch.empty(size, dtype=torch.uint8, device=f"cuda:{dev}")
        with gpufile.CuFile(f, "r") as fh:
            if fh.read(buf) != size:
                raise AssertionError(f"{f}: short read")
        bufs.append(buf)
        n = struct.unpack("<Q", bytes(buf[:8].cpu().numpy()))[0]
        header = json.loads(bytes(buf[8:8 + n].cpu().numpy()))
        for name, meta in header.items():
            if name == "__metadata__":
                continue
            a, b = meta["data_offsets"]
            out[name] = buf[8 + n + a:8 + n + b].view(dtypes[meta["dtype"]]).view(meta["shape"])
    return out, None


LOADERS = {
    "gpufile": ("gpufile", load_gpufile),
    "plain read (gpufile, whole files)": ("gpufile", load_plain_read),
    "safetensors": ("safetensors", load_safetensors),
    "fastsafetensors (nogds)": ("fastsafetensors", load_fastsafetensors),
    "InstantTensor": ("instanttensor", load_instanttensor),
}


def release(keep):
    if keep is None:
        return
    fb, loader = keep
    fb.close()
    loader.close()


def verify(got: dict, ref: dict) -> str | None:
    import torch
    if set(got) != set(ref):
        return f"names differ: {len(set(got) ^ set(ref))} not in both"
    for k, r in ref.items():
        t = got[k]
        if t.shape != r.shape or t.dtype != r.dtype:
            return f"{k}: {t.dtype}{tuple(t.shape)} != {r.dtype}{tuple(r.shape)}"
        if not torch.equal(t.view(torch.int16), r.view(torch.int16)):
            return f"{k}: bytes differ"
    return None


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dir", default=os.path.join(os.environ.get("TMPDIR", "/tmp"),
                                                 "gpufile-st-bench"))
    p.add_argument("--gb", type=float, default=8.0)
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", default=os.environ.get("OUT", "."))
    p.add_argument("--only", nargs="*", help="loader names to run (default: all)")
    p.add_argument("--ranks", type=int, nargs="*",
                   help="tensor-parallel world sizes to simulate (each rank in turn)")
    args = p.parse_args()
    if args.ranks:
        return tp_ranks(args)

    import importlib.util

    import torch
    dev = args.device
    single, sharded, layout = generate(args.dir, args.gb)
    nbytes = sum(2 * a * b for _, (a, b) in layout)
    torch.cuda.set_device(dev)

    from safetensors.torch import load_file
    ref = load_file(single, device=f"cuda:{dev}")  # the reference result
    rows, results = [], []
    for label, (module, fn) in LOADERS.items():
        if args.only and label not in args.only and module not in args.only:
            continue
        if importlib.util.find_spec(module) is None:
            rows.append((label, "-", "-", "-", "-", f"skipped: {module} is not installed"))
            results.append({"loader": label, "skipped": f"{module} is not installed"})
            continue
        for layout_name, path in (("1 file", single), ("4 shards", sharded)):
            entry = {"loader": label, "layout": layout_name, "bytes": nbytes}
            try:
                for temp in ("cold", "hot"):
                    times, how = [], None
                    if temp == "hot":  # warm the page cache
                        got, keep = fn(path, dev)
                        torch.cuda.synchronize(dev)
                        del got
                        release(keep)
                    for _ in range(args.repeats):
                        if temp == "cold":
                            how = drop_caches(path)
                        torch.cuda.synchronize(dev)
                        t0 = time.perf_counter()
                        got, keep = fn(path, dev)
                        torch.cuda.synchronize(dev)
                        times.append(time.perf_counter() - t0)
                        problem = verify(got, ref)
                        del got
                        release(keep)
                        torch.cuda.empty_cache()
                        if problem:
                            raise AssertionError(f"wrong result: {problem}")
                    med = statistics.median(times)
                    entry[temp] = {"seconds": times, "median_s": med,
                                   "gb_per_s": nbytes / med / 1e9, "cache_drop": how}
                entry["verified"] = True
            except Exception as e:  # noqa: BLE001 - one loader's failure is a row, not the end
                entry["error"] = f"{type(e).__name__}: {e}"
            results.append(entry)
            if "error" in entry:
                rows.append((label, layout_name, "-", "-", "-", entry["error"][:60]))
            else:
                c, h = entry["cold"], entry["hot"]
                rows.append((label, layout_name, f"{c['median_s']:.2f}", f"{c['gb_per_s']:.2f}",
                             f"{h['gb_per_s']:.2f}", f"verified ({len(layout)} tensors)"))

    import gpufile
    head = ("loader", "layout", "cold s", "cold GB/s", "hot GB/s", "check")
    widths = [max(len(str(r[i])) for r in rows + [head]) for i in range(len(head))]
    print(f"{nbytes / 1e9:.2f} GB bf16, {len(layout)} tensors, cuda:{dev}, medians of "
          f"{args.repeats}; gpufile {gpufile.__version__}")
    for r in [head] + rows:
        print("  ".join(str(v).ljust(w) for v, w in zip(r, widths)))
    os.makedirs(args.out, exist_ok=True)
    out = os.path.join(args.out, "safetensors_bench.json")
    with open(out, "w") as f:
        json.dump({"bytes": nbytes, "tensors": len(layout), "device": dev,
                   "gpu": torch.cuda.get_device_name(dev), "repeats": args.repeats,
                   "results": results}, f, indent=1)
    print(f"wrote {out}")
    return 0


TP_PLAN = {"layers.*.self_attn.q_proj": "colwise", "layers.*.self_attn.k_proj": "colwise",
           "layers.*.self_attn.v_proj": "colwise", "layers.*.self_attn.o_proj": "rowwise",
           "layers.*.mlp.gate_proj": "colwise", "layers.*.mlp.up_proj": "colwise",
           "layers.*.mlp.down_proj": "rowwise"}


def tp_ranks(args) -> int:
    """`--ranks`: each simulated rank's shard load against a plain read of its byte count."""
    import torch

    import gpufile
    import gpufile.safetensors as gs
    single, _, layout = generate(args.dir, args.gb)
    nbytes = sum(2 * a * b for _, (a, b) in layout)
    device = f"cuda:{args.device}" if torch.cuda.is_available() else "cpu"
    sync = (lambda: torch.cuda.synchronize(args.device)) if device != "cpu" else (lambda: None)
    full = gs.load_checkpoint(single, "cpu")  # the reference (and the page cache warmed)
    with open(single, "rb") as f:
        data_start = 8 + struct.unpack("<Q", f.read(8))[0]

    def timed(fn):
        times = []
        for _ in range(args.repeats):
            sync()
            t0 = time.perf_counter()
            out = fn()
            sync()
            times.append(time.perf_counter() - t0)
        return out, statistics.median(times)

    rows, results = [], []
    for world in args.ranks:
        for rank in range(world):
            with gpufile.observe() as obs:
                got = gs.load_checkpoint(single, device, shard=TP_PLAN, rank=rank,
                                         world_size=world)
            read = obs.report["gpufile-posix"]["bytes"] + obs.report["cufile"]["bytes"]
            for name, t in got.items():
                word = next(w for k, w in TP_PLAN.items() if k.split(".")[-1] in name)
                dim = 0 if word == "colwise" else 1
                want = full[name].chunk(world, dim)[rank] if full[name].shape[dim] else full[name]
                if not torch.equal(t.cpu().view(torch.int16), want.view(torch.int16)):
                    raise AssertionError(f"rank {rank} of {world}: {name} differs")
            del got
            _, shard_s = timed(lambda: gs.load_checkpoint(single, device, shard=TP_PLAN,
                                                          rank=rank, world_size=world))
            def plain():  # into memory allocated for it, as the load allocates its own
                buf = torch.empty(read, dtype=torch.uint8, device=device)
                with gpufile.CuFile(single, "r") as f:
                    f.read(buf.numpy() if device == "cpu" else buf, read, data_start)
            _, plain_s = timed(plain)
            entry = {"world": world, "rank": rank, "bytes": read, "share": read / nbytes,
                     "shard_gb_per_s": read / shard_s / 1e9,
                     "plain_gb_per_s": read / plain_s / 1e9}
            entry["ratio"] = entry["shard_gb_per_s"] / entry["plain_gb_per_s"]
            results.append(entry)
            rows.append((world, rank, read, f"{entry['share']:.4f}",
                         f"{entry['shard_gb_per_s']:.2f}", f"{entry['plain_gb_per_s']:.2f}",
                         f"{entry['ratio']:.2f}"))
    head = ("N", "rank", "bytes read", "share", "shard GB/s", "plain GB/s", "ratio")
    widths = [max(len(str(r[i])) for r in rows + [head]) for i in range(len(head))]
    print(f"{nbytes / 1e9:.2f} GB bf16, {len(layout)} tensors, {device}, hot, medians of "
          f"{args.repeats}; every shard verified")
    for r in [head] + rows:
        print("  ".join(str(v).ljust(w) for v, w in zip(r, widths)))
    os.makedirs(args.out, exist_ok=True)
    out = os.path.join(args.out, "safetensors_tp_bench.json")
    with open(out, "w") as f:
        json.dump({"bytes": nbytes, "device": device, "results": results}, f, indent=1)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
