"""Tensors described for the core's safetensors writers, as ``safetensors`` checks them (a row
per tensor: name, dtype code, shape, a flat byte view of its memory), and the arguments of a
checkpoint save; shared by the local saves (``local``) and the saves by URL (``remote``)."""

from __future__ import annotations

import sys
from typing import Any, Mapping

from .. import _native

# A tensor as the core takes it: (name, safetensors dtype, logical shape, buffer).
Row = tuple

TORCH_CODES = {
    "float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16", "int64": "I64",
    "uint64": "U64", "int32": "I32", "uint32": "U32", "int16": "I16", "uint16": "U16",
    "int8": "I8", "uint8": "U8", "bool": "BOOL", "complex64": "C64",
    "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2", "float8_e8m0fnu": "F8_E8M0",
    "float8_e4m3fnuz": "F8_E4M3FNUZ", "float8_e5m2fnuz": "F8_E5M2FNUZ",
    "float4_e2m1fn_x2": "F4",
}
# NumPy's (and ml_dtypes', and CuPy's) names: the ones safetensors.numpy accepts.
_NUMPY_CODES = {k: v for k, v in TORCH_CODES.items() if k != "float4_e2m1fn_x2"}

#: The message of ``safetensors.torch`` for tensors that share memory (kept word for word:
#: code that catches it matches on it).
_SHARED_MESSAGE = """
            Some tensors share memory, this will lead to duplicate memory on disk and potential differences when loading them again: {failing}.
            A potential way to correctly save your model is to use `save_model`.
            More information at https://huggingface.co/docs/safetensors/torch_shared_tensors
            """


def _non_contiguous_message(name: str) -> str:
    return (f"You are trying to save a non contiguous tensor: `{name}` which is not allowed. It "
            "either means you are trying to save tensors which are reference of each other in "
            "which case it's recommended to save only the full tensors, and reslice at load "
            "time, or simply call `.contiguous()` on your tensor to pack it before saving.")


def is_torch(v: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(v, torch.Tensor)


def is_cupy(v: Any) -> bool:
    cupy = sys.modules.get("cupy")
    return cupy is not None and isinstance(v, cupy.ndarray)


def is_jax(v: Any) -> bool:
    jax = sys.modules.get("jax")
    return jax is not None and isinstance(v, jax.Array)


class JaxDeviceBytes:
    """The bytes of a JAX array on a GPU, as the core writes them: a flat byte view of its
    buffer (``__cuda_array_interface__`` of JAX's arrays refuses bfloat16 and FP8, and its DLPack
    export FP8). Holds the array, whose buffer lives as long as it does."""

    __slots__ = ("array", "nbytes", "_ptr")

    def __init__(self, array: Any) -> None:
        self.array = array
        self.nbytes = int(array.nbytes)
        self._ptr = array.unsafe_buffer_pointer() if self.nbytes else 0

    @property
    def __cuda_array_interface__(self) -> dict:
        return {"shape": (self.nbytes,), "typestr": "|u1", "data": (self._ptr, True),
                "strides": None, "version": 3, "stream": None}


def _jax_row(name: str, v: Any) -> Row:
    import jax
    import numpy
    if isinstance(v, jax.core.Tracer):
        raise TypeError(f"tensor {name!r} is a traced value inside a JAX transformation (jit, "
                        "grad, vmap, ...), which has no data: save concrete arrays")
    if v.is_deleted():
        raise ValueError(f"tensor {name!r} is a deleted JAX array (deleted, or donated to a "
                         "computation): it has no data to save")
    dtype = numpy.dtype(v.dtype)
    code = _NUMPY_CODES.get(dtype.name)
    if code is None:
        raise TypeError(f"tensor {name!r} is {dtype}, which safetensors has no type for")
    if not v.is_fully_addressable:
        raise ValueError(f"tensor {name!r} is a JAX array with shards in other processes: "
                         "gather it first (jax.experimental.multihost_utils.process_allgather)")
    shape = list(v.shape)
    if len(v.sharding.device_set) > 1:
        if not v.sharding.is_fully_replicated:
            # Its pieces live on several devices: the value, gathered into host memory.
            return _array_row(name, numpy.asarray(v), cupy=False)
        v = v.addressable_shards[0].data
    dev = next(iter(v.devices()))
    if dev.platform == "cpu":
        # The array's own host buffer (NumPy's view of it is not a copy).
        a = numpy.asarray(v)
        buf = a.reshape(-1).view(numpy.uint8) if a.size else numpy.empty(0, numpy.uint8)
        return (name, code, shape, buf)
    if dev.platform != "gpu":
        raise ValueError(f"tensor {name!r} is on {dev}: gpufile saves from the CPU and CUDA "
                         "GPUs")
    return (name, code, shape, JaxDeviceBytes(v))


def _torch_row(name: str, t: Any) -> Row:
    import torch
    if t.layout != torch.strided:
        raise ValueError(_sparse_message([name]))
    if t.device.type == "meta":
        # PyTorch's words (what `safetensors` raises, copying the tensor out), then why.
        raise RuntimeError(f"Cannot copy out of meta tensor; no data! (tensor {name!r} is on "
                           "the meta device: it has no data to save)")
    if not t.is_contiguous():
        raise ValueError(_non_contiguous_message(name))
    t = t.detach()
    dtype = str(t.dtype).split(".")[-1]
    code = TORCH_CODES.get(dtype)
    if code is None:
        raise TypeError(f"tensor {name!r} is {t.dtype}, which safetensors has no type for")
    shape = list(t.shape)
    if code == "F4" and shape:
        shape[-1] *= 2  # two F4 values a byte: the header counts elements
    if t.device.type not in ("cpu", "cuda"):
        raise ValueError(f"tensor {name!r} is on {t.device}: gpufile saves from the CPU and "
                         "CUDA devices")
    # A flat byte view of the same memory: CUDA Array Interface and NumPy know no bfloat16
    # or FP8, and a 0-d tensor has no byte view of its own.
    flat = t.reshape(-1).view(torch.uint8) if t.numel() else torch.empty(0, dtype=torch.uint8)
    buf = flat.numpy() if flat.device.type == "cpu" else flat
    return (name, code, shape, buf)


def _array_row(name: str, a: Any, cupy: bool) -> Row:
    mod = sys.modules["cupy" if cupy else "numpy"]
    dtype = a.dtype
    code = _NUMPY_CODES.get(dtype.name)
    if code is None:
        raise TypeError(f"tensor {name!r} is {dtype}, which safetensors has no type for")
    if dtype.byteorder == ">":
        a = a.byteswap().view(dtype.newbyteorder("<"))
    # What the reader gives back is C order: a strided view is copied into it (this one
    # tensor, on its own device).
    shape = list(a.shape)  # before the copy: ascontiguousarray makes a 0-d array 1-d
    if not a.flags.c_contiguous:
        a = mod.ascontiguousarray(a)
    buf = a.reshape(-1).view(mod.uint8) if a.size else mod.empty(0, dtype=mod.uint8)
    return (name, code, shape, buf)


def _storage_key(t: Any) -> tuple | None:
    """What identifies a torch tensor's storage for the shared-memory check (as safetensors)."""
    try:
        storage = t.untyped_storage()
        ptr, size = storage.data_ptr(), storage.nbytes()
    except (NotImplementedError, RuntimeError):
        return None
    if t.device.type == "meta" or ptr == 0 or size == 0:
        return None
    return (t.device, ptr, size)


def end_ptr(t: Any) -> int:
    """One past the last byte of a torch tensor's last element (its data pointer when empty)."""
    start = t.data_ptr()
    if not t.numel():
        return start
    last = sum((n - 1) * st for n, st in zip(t.shape, t.stride()))
    return start + (last + 1) * t.element_size()


def shared_groups(tensors: Mapping[str, Any]) -> list[set[str]]:
    """Names of the torch tensors grouped by the memory they share, as ``safetensors.torch``'s
    ``_find_shared_tensors`` groups them: by storage (meta tensors and empty storages in none),
    views of one storage that do not overlap each in a group of its own."""
    by_storage: dict[tuple, set[str]] = {}
    for name, v in tensors.items():
        if is_torch(v):
            key = _storage_key(v)
            if key is not None:
                by_storage.setdefault(key, set()).add(name)
    groups: list[set[str]] = []
    # safetensors' order: its sets sorted (by inclusion, so insertion order for disjoint ones).
    for names in sorted(by_storage.values()):  # type: ignore[type-var]
        if len(names) < 2:
            groups.append(names)
            continue
        spans = sorted((tensors[n].data_ptr(), end_ptr(tensors[n]), n) for n in names)
        groups.append({spans[0][2]})
        last_stop = spans[0][1]
        for start, stop, n in spans[1:]:
            if start >= last_stop:
                groups.append({n})
            else:
                groups[-1].add(n)
            last_stop = stop
    return groups


def _shared_groups(tensors: Mapping[str, Any]) -> list[set[str]]:
    """Groups of torch tensors whose bytes overlap: safetensors refuses to save them."""
    return [g for g in shared_groups(tensors) if len(g) > 1]


def _sparse_message(names: list[str]) -> str:
    return (f"You are trying to save a sparse tensors: `{names}` which this library does not "
            "support. You can make it a dense tensor before saving with `.to_dense()` but be "
            "aware this might make a much larger file than needed.")


def _is_numpy(v: Any) -> bool:
    return type(v).__module__ == "numpy" and hasattr(v, "dtype")


#: The one kind of tensor ``safetensors.torch`` and ``safetensors.numpy`` take, and its name
#: in their message.
_EXPECTED = {"torch": (is_torch, "torch.Tensor"), "numpy": (_is_numpy, "numpy.ndarray")}


def describe(tensors: Mapping[str, Any], expected: str | None = None) -> list[Row]:
    """The rows of a dict of tensors (PyTorch CPU or CUDA, NumPy, CuPy, JAX; only those of
    kind ``expected`` where given), checked in safetensors' order: a dict, tensors only, none
    sparse, no shared memory, each contiguous."""
    if not isinstance(tensors, Mapping):
        raise ValueError(f"Expected a dict of [str, torch.Tensor] but received {type(tensors)}")
    if expected is not None:
        accepts, what = _EXPECTED[expected]
        for name, v in tensors.items():
            if not accepts(v):
                raise ValueError(f"Key `{name}` is invalid, expected {what} but received "
                                 f"{type(v)}")
    sparse = [n for n, v in tensors.items()
              if is_torch(v) and v.layout != sys.modules["torch"].strided]
    if sparse:
        raise ValueError(_sparse_message(sparse))
    failing = _shared_groups(tensors)
    if failing:
        raise RuntimeError(_SHARED_MESSAGE.format(failing=failing))
    rows = []
    for name, v in tensors.items():
        if not isinstance(name, str):
            raise TypeError(f"tensor names must be str, got {type(name).__name__} {name!r}")
        if is_torch(v):
            rows.append(_torch_row(name, v))
        elif is_cupy(v):
            rows.append(_array_row(name, v, cupy=True))
        elif is_jax(v):
            rows.append(_jax_row(name, v))
        elif _is_numpy(v):
            rows.append(_array_row(name, v, cupy=False))
        else:
            raise ValueError(f"Key `{name}` is invalid, expected torch.Tensor, numpy.ndarray, "
                             f"cupy.ndarray or jax.Array but received {type(v)}")
    return rows


def sync_producers(tensors: Mapping[str, Any]) -> None:
    """Waits for the work queued on PyTorch's current stream of every CUDA device holding a
    tensor (PyTorch's array interface names no stream), and for the computations of JAX arrays
    (dispatched asynchronously): the bytes written are the tensors' values, as ``.cpu()`` or
    ``numpy.asarray`` would see them."""
    arrays = [v for v in tensors.values() if is_jax(v)]
    if arrays:
        import jax
        jax.block_until_ready(arrays)
    devices = {v.device for v in tensors.values() if is_torch(v) and v.device.type == "cuda"}
    if devices:
        import torch
        for d in devices:
            torch.cuda.current_stream(d).synchronize()


def check_metadata(metadata: Any) -> dict[str, str] | None:
    if metadata is None:
        return None
    if not isinstance(metadata, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise TypeError(f"metadata must be a dict of str to str, got {metadata!r}")
    return dict(metadata)


INDEX_NAME = "model.safetensors.index.json"


def parse_size(size: int | str) -> int:
    """``max_shard_size``: bytes, or a size as every size is typed (``"5GB"`` as huggingface_hub
    reads it, ``"5GiB"``, ``"5 GiB"``; the core's ``parse_size``)."""
    if isinstance(size, bool):
        raise TypeError("max_shard_size must be an int or a str like '5GB', not bool")
    if not isinstance(size, (int, str)):
        raise TypeError(f"max_shard_size must be an int or a str like '5GB', got {size!r}")
    return _native.parse_shard_size(size)


def storage_size(v: Any) -> int:
    """A tensor's size for sharding, as huggingface_hub counts it (a torch tensor's storage)."""
    if is_torch(v):
        try:
            return int(v.untyped_storage().nbytes())
        except (NotImplementedError, RuntimeError):
            return v.numel() * v.element_size()
    return int(v.nbytes)
