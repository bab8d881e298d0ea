"""A sharded Hugging Face checkpoint into a `transformers` model on the GPU, hot.

Writes a Llama-shaped model of random bf16 weights (about 1.9 GB: hidden 2048, 16 layers,
intermediate 5632, vocabulary 32000, untied head) with `save_pretrained` in five shards, reads
the shards once so the page cache holds them, then times, alternating, medians of --runs:

  transformers from_pretrained     ``AutoModelForCausalLM.from_pretrained(dir,
                                   torch_dtype=bfloat16, device_map="cuda:0")``
  gpufile load_checkpoint + assign the model built with its parameters on the meta device, then
                                   ``gpufile.safetensors.load_checkpoint(dir, device="cuda:0")``
                                   and ``model.load_state_dict(state, assign=True)``: the model
                                   ready on the GPU, as the first row
  gpufile load_checkpoint          the state dict alone (the read and the tensors' views)
  the model on meta (no weights)   the first row's model built, with no weight: Python's
                                   share of that row (GB/s as if it moved the bytes)
  gpufile load_checkpoint, page-cache DMA
                                   the same, ``dma_cache_size`` allowing the whole checkpoint
                                   (registered by the untimed first round)
  gpufile CuFile.read of the shards the five files whole into one device buffer (the copy's
                                   ceiling for the same bytes, no format)

GB/s is the bytes of the tensors over the wall time. Every load is checked: the gpufile model's
tensors equal the transformers model's, and both give the same logits for the same tokens.

With ``--cold N``, N more rounds of the loads with every shard evicted from the page cache
before each (``gpufile.drop_file_page_cache``), beside ``dd iflag=direct`` of the shards: the
disk's own rate.

    python benches/hf_model_bench.py [--dir DIR] [--runs 5] [--cold 3] [--json FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import json
import os
import statistics
import subprocess
import tempfile
import time

import torch
import transformers

import gpufile
from gpufile.safetensors import load_checkpoint


def make_model(directory: str) -> str:
    path = os.path.join(directory, "hf-llama-1.9g")
    if os.path.exists(os.path.join(path, "model.safetensors.index.json")):
        return path
    config = transformers.LlamaConfig(
        hidden_size=2048, intermediate_size=5632, num_hidden_layers=16,
        num_attention_heads=16, num_key_value_heads=16, vocab_size=32000,
        tie_word_embeddings=False, torch_dtype="bfloat16")
    torch.manual_seed(0)
    with torch.device("cuda:0"):
        model = transformers.AutoModelForCausalLM.from_config(config, torch_dtype=torch.bfloat16)
    model.save_pretrained(path, max_shard_size="400MB", safe_serialization=True)
    del model
    torch.cuda.empty_cache()
    return path


@contextlib.contextmanager
def parameters_on_meta():
    """Modules built here get their parameters on the meta device (no memory, no init) and
    their buffers as usual: non-persistent buffers (a rotary embedding's ``inv_freq``) are not in
    a checkpoint and must be computed. What ``transformers`` does for ``from_pretrained``
    (accelerate's ``init_empty_weights``)."""
    register = torch.nn.Module.register_parameter

    def on_meta(module, name, param):
        register(module, name, param)
        if param is not None:
            p = module._parameters[name]
            module._parameters[name] = torch.nn.Parameter(p.to("meta"),
                                                          requires_grad=p.requires_grad)

    torch.nn.Module.register_parameter = on_meta
    try:
        yield
    finally:
        torch.nn.Module.register_parameter = register


def warm(path: str) -> int:
    total = 0
    for name in glob.glob(os.path.join(path, "*.safetensors")):
        with open(name, "rb") as f:
            while chunk := f.read(64 << 20):
                total += len(chunk)
    return total


def timed(fn):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return out, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--cold", type=int, default=0, metavar="RUNS",
                    help="also time cold loads (each file evicted from the page cache first)")
    ap.add_argument("--json")
    args = ap.parse_args()

    path = make_model(args.dir)
    shards = sorted(glob.glob(os.path.join(path, "*.safetensors")))
    file_bytes = warm(path)
    config = transformers.AutoConfig.from_pretrained(path)

    def hf():
        return transformers.AutoModelForCausalLM.from_pretrained(
            path, torch_dtype=torch.bfloat16, device_map="cuda:0")

    def state():
        return load_checkpoint(path, device="cuda:0")

    def ours():
        with parameters_on_meta():
            model = transformers.AutoModelForCausalLM.from_config(config,
                                                                  torch_dtype=torch.bfloat16)
        model.load_state_dict(load_checkpoint(path, device="cuda:0"), assign=True, strict=True)
        return model.to("cuda:0").eval()  # the computed buffers; the weights are there already

    whole = torch.empty(file_bytes, dtype=torch.uint8, device="cuda:0")

    def raw():
        at = 0
        futures = []
        handles = [gpufile.CuFile(s) for s in shards]
        for h, s in zip(handles, shards):
            n = os.path.getsize(s)
            futures.append(h.pread(whole[at:at + n], n, 0))
            at += n
        got = sum(f.get() for f in futures)
        for h in handles:
            h.close()
        assert got == file_bytes
        return got

    def dd():
        for s in shards:
            subprocess.run(["dd", f"if={s}", "of=/dev/null", "bs=16M", "iflag=direct"],
                           check=True, capture_output=True)

    # Checked once, outside the timing: the same tensors and the same logits.
    reference = hf().eval()
    mine = ours()
    tensor_bytes = 0
    for name, t in reference.state_dict().items():
        assert torch.equal(t, mine.state_dict()[name]), name
        tensor_bytes += t.numel() * t.element_size()
    tokens = torch.randint(0, config.vocab_size, (2, 64), device="cuda:0",
                           generator=torch.Generator("cuda:0").manual_seed(1))
    with torch.no_grad():
        assert torch.equal(reference(tokens).logits, mine(tokens).logits)
    state_on_host = {k: v.cpu() for k, v in reference.state_dict().items()}
    del reference, mine
    torch.cuda.empty_cache()

    def skeleton():
        with parameters_on_meta():
            return transformers.AutoModelForCausalLM.from_config(config,
                                                                 torch_dtype=torch.bfloat16)

    rows = {"transformers from_pretrained": hf, "gpufile load_checkpoint + assign": ours,
            "the model on meta (no weights)": skeleton,
            "gpufile load_checkpoint": state,
            "gpufile CuFile.read of the shards": raw}
    # Timed runs only: the first round warms allocators and pools and is not kept.
    walls: dict[str, list[float]] = {k: [] for k in rows}
    for i in range(args.runs + 1):
        for name, fn in rows.items():
            out, wall = timed(fn)
            if i:
                walls[name].append(wall)
            del out
            torch.cuda.empty_cache()
    # Page-cache DMA apart: the setting must stay on between the reads (turned off, it unpins),
    # and two reads register the files (a first read never does).
    dma = "gpufile load_checkpoint, page-cache DMA"
    walls[dma] = []
    with gpufile.defaults.set("dma_cache_size", file_bytes + (1 << 30)):
        for i in range(args.runs + 2):
            out, wall = timed(state)
            if i == args.runs + 1:
                for name, t in out.items():  # the bytes the GPU copied itself, checked
                    assert torch.equal(t, state_on_host[name].to("cuda:0")), name
            if i >= 2:
                walls[dma].append(wall)
            del out
    cold_rows = {"cold: transformers from_pretrained": hf,
                 "cold: gpufile load_checkpoint + assign": ours,
                 "cold: gpufile load_checkpoint": state,
                 "cold: gpufile CuFile.read of the shards": raw,
                 "cold: dd iflag=direct bs=16M of the shards (the disk)": dd}
    for _ in range(args.cold):
        for name, fn in cold_rows.items():
            for s in shards:
                gpufile.drop_file_page_cache(s)
            out, wall = timed(fn)
            walls.setdefault(name, []).append(wall)
            del out
            torch.cuda.empty_cache()
    print(f"{len(shards)} shards, {tensor_bytes / 1e9:.2f} GB of tensors "
          f"({file_bytes / 1e9:.2f} GB of files), medians of {args.runs} hot, {args.cold} cold:")
    result = {}
    for name, w in walls.items():
        med = statistics.median(w)
        nbytes = file_bytes if "shards" in name else tensor_bytes
        result[name] = {"median_s": med, "gb_per_s": nbytes / med / 1e9, "runs_s": w}
        print(f"  {name:<36} {med * 1e3:8.1f} ms {nbytes / med / 1e9:7.2f} GB/s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
