"""``python -m gpufile.safetensors PATH``: load a checkpoint, print the speed and the data path."""

from __future__ import annotations

import math
from typing import Any

from .. import _native
from ._frameworks import FRAMEWORKS, device_name, device_number, framework_name
from ._load import load_checkpoint

SafetensorError = _native.SafetensorError


def main(argv: list[str] | None = None) -> int:
    import argparse
    import json
    import sys
    import time

    from ..observe import observe

    p = argparse.ArgumentParser(prog="python -m gpufile.safetensors",
                                description="Load a safetensors checkpoint with gpufile and "
                                            "report the speed and the data path.")
    p.add_argument("path", help="a .safetensors file, an index.json or a directory")
    p.add_argument("--device", default=None,
                   help="GPU number or 'cuda:N' (default: 0 if CuPy or PyTorch sees a GPU, "
                        "else cpu)")
    p.add_argument("--framework", default=None, choices=sorted(set(FRAMEWORKS)),
                   help="default: pt if PyTorch is installed, else cupy for a GPU, numpy "
                        "for cpu")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args(argv)

    device = args.device
    if device is not None and device.isdigit():
        device = int(device)
    framework = args.framework
    if framework is None:
        try:
            import torch  # noqa: F401
            framework = "pt"
        except ImportError:
            framework = "numpy" if device_number(device or "cpu") is None else "cupy"
    if device is None:
        device = "cpu"
        if framework in ("pt", "torch", "pytorch"):
            import torch
            device = "cuda:0" if torch.cuda.is_available() else "cpu"
        elif framework == "cupy":
            device = 0
    try:
        t0 = time.perf_counter()
        with observe() as obs:
            tensors = load_checkpoint(args.path, device, framework=framework)
            if device_number(device) is not None:
                _synchronize(framework, device_number(device))
        seconds = time.perf_counter() - t0
    except (SafetensorError, OSError, KeyError, TypeError, ValueError, ImportError) as e:
        print(f"gpufile: error: {e}", file=sys.stderr)
        return 1
    nbytes = sum(_nbytes(v) for v in tensors.values())
    result = {
        "path": args.path, "device": device_name(device_number(device)), "framework": framework,
        "tensors": len(tensors), "bytes": nbytes, "seconds": seconds,
        "gb_per_s": nbytes / seconds / 1e9 if seconds else math.inf,
        "tensors_per_s": len(tensors) / seconds if seconds else math.inf,
        "report": obs.report.as_dict() if obs.report else None,
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{result['tensors']} tensors, {nbytes} bytes to {result['device']} "
              f"({framework}) in {seconds:.3f} s: {result['gb_per_s']:.2f} GB/s, "
              f"{result['tensors_per_s']:.0f} tensors/s")
        print(obs.report)
    return 0


def _nbytes(v: Any) -> int:
    n = getattr(v, "nbytes", None)
    if n is None:  # torch
        n = v.numel() * v.element_size()
    return int(n)


def _synchronize(framework: str, dev: int) -> None:
    if framework_name(framework) == "pt":
        import torch
        torch.cuda.synchronize(dev)
    else:
        import cupy
        with cupy.cuda.Device(dev):
            cupy.cuda.runtime.deviceSynchronize()
