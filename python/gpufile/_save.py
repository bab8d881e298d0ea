"""Saving safetensors files and Hugging Face checkpoints (``gpufile.safetensors.save_file``,
``save_checkpoint``, ``async_save``): tensors described for the core, written from their own
memory, published whole."""

from __future__ import annotations

import functools
import json
import os
import sys
import threading
from typing import Any, Mapping, Sequence

from . import _native
from ._future import call_back, wake

# A tensor as the core takes it: (name, safetensors dtype, logical shape, buffer).
Row = tuple

_TORCH_CODES = {
    "float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16", "int64": "I64",
    "uint64": "U64", "int32": "I32", "uint32": "U32", "int16": "I16", "uint16": "U16",
    "int8": "I8", "uint8": "U8", "bool": "BOOL", "complex64": "C64",
    "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2", "float8_e8m0fnu": "F8_E8M0",
    "float8_e4m3fnuz": "F8_E4M3FNUZ", "float8_e5m2fnuz": "F8_E5M2FNUZ",
    "float4_e2m1fn_x2": "F4",
}
# NumPy's (and ml_dtypes', and CuPy's) names: the ones safetensors.numpy accepts.
_NUMPY_CODES = {k: v for k, v in _TORCH_CODES.items() if k != "float4_e2m1fn_x2"}

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


def _is_torch(v: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(v, torch.Tensor)


def _is_cupy(v: Any) -> bool:
    cupy = sys.modules.get("cupy")
    return cupy is not None and isinstance(v, cupy.ndarray)


def _torch_row(name: str, t: Any) -> Row:
    import torch
    if t.layout != torch.strided:
        raise ValueError(f"You are trying to save a sparse tensors: `{[name]}` which this library "
                         "does not support. You can make it a dense tensor before saving with "
                         "`.to_dense()` but be aware this might make a much larger file than "
                         "needed.")
    if t.device.type == "meta":
        raise ValueError(f"tensor {name!r} is on the meta device: it has no data to save")
    if not t.is_contiguous():
        raise ValueError(_non_contiguous_message(name))
    t = t.detach()
    dtype = str(t.dtype).split(".")[-1]
    code = _TORCH_CODES.get(dtype)
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


def _shared_groups(tensors: Mapping[str, Any]) -> list[set[str]]:
    """Names of torch tensors whose bytes overlap, by storage: safetensors' rule (views of one
    storage that do not overlap are fine)."""
    by_storage: dict[tuple, list[str]] = {}
    for name, v in tensors.items():
        if _is_torch(v):
            key = _storage_key(v)
            if key is not None:
                by_storage.setdefault(key, []).append(name)
    failing = []
    for names in by_storage.values():
        if len(names) < 2:
            continue
        spans = []
        for n in names:
            t = tensors[n]
            start = t.data_ptr()
            stop = start + t.numel() * t.element_size() if t.numel() else start
            spans.append((start, stop, n))
        spans.sort()
        group = {spans[0][2]}
        last_stop = spans[0][1]
        for start, stop, n in spans[1:]:
            if start >= last_stop:
                if len(group) > 1:
                    failing.append(group)
                group = {n}
            else:
                group.add(n)
            last_stop = stop
        if len(group) > 1:
            failing.append(group)
    return failing


def describe(tensors: Mapping[str, Any]) -> list[Row]:
    """The rows of a dict of tensors (PyTorch CPU or CUDA, NumPy, CuPy), checked as
    safetensors checks them: a dict, tensors only, no shared memory, contiguous."""
    if not isinstance(tensors, Mapping):
        raise ValueError(f"Expected a dict of [str, torch.Tensor] but received {type(tensors)}")
    failing = _shared_groups(tensors)
    if failing:
        raise RuntimeError(_SHARED_MESSAGE.format(failing=failing))
    rows = []
    for name, v in tensors.items():
        if not isinstance(name, str):
            raise TypeError(f"tensor names must be str, got {type(name).__name__} {name!r}")
        if _is_torch(v):
            rows.append(_torch_row(name, v))
        elif _is_cupy(v):
            rows.append(_array_row(name, v, cupy=True))
        elif type(v).__module__ == "numpy" and hasattr(v, "dtype"):
            rows.append(_array_row(name, v, cupy=False))
        else:
            raise ValueError(f"Key `{name}` is invalid, expected torch.Tensor, numpy.ndarray or "
                             f"cupy.ndarray but received {type(v)}")
    return rows


def sync_producers(tensors: Mapping[str, Any]) -> None:
    """Waits for the work queued on PyTorch's current stream of every CUDA device holding a
    tensor (PyTorch's array interface names no stream): the bytes written are the tensor's
    values after it, as ``.cpu()`` would see them."""
    devices = {v.device for v in tensors.values() if _is_torch(v) and v.device.type == "cuda"}
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


def _annotate(e: BaseException, what: str) -> None:
    if isinstance(e, OSError):
        e.add_note(f"gpufile: nothing was published at {what} (what was there is as it was; "
                   "no temporary file is left)")


def write_file(rows: Sequence[Row], filename: Any, metadata: dict[str, str] | None,
               durable: bool) -> None:
    """Writes ``rows`` to ``filename`` under a temporary name, then publishes it."""
    try:
        pending = _native.PendingFile(filename)
    except OSError as e:
        _annotate(e, os.fsdecode(filename))
        raise
    try:
        if durable:
            pending.start_write_behind()
        _native.write_safetensors(pending.file, list(rows), metadata)
        pending.publish(durable)
    except BaseException as e:
        pending.discard()
        _annotate(e, os.fsdecode(filename))
        raise


def save_file(tensors: Mapping[str, Any], filename: Any, metadata: Any = None, *,
              durable: bool = True) -> None:
    from . import _save_remote  # imports this module

    if _save_remote.is_url(filename):
        return _save_remote.save_file(tensors, filename, metadata)
    rows = describe(tensors)
    meta = check_metadata(metadata)
    sync_producers(tensors)
    write_file(rows, filename, meta, durable)


def _host_bytes(row: Row) -> bytes:
    buf = row[3]
    if _is_torch(buf):
        return buf.cpu().numpy().tobytes()
    if _is_cupy(buf):
        return buf.get().tobytes()
    return buf.tobytes()


def save(tensors: Mapping[str, Any], metadata: Any = None) -> bytes:
    rows = describe(tensors)
    meta = check_metadata(metadata)
    sync_producers(tensors)
    header, offsets, size = _native.safetensors_header(
        [(n, c, s, int(b.nbytes)) for n, c, s, b in rows], meta)
    out = bytearray(size)
    out[:len(header)] = header
    for row, off in zip(rows, offsets):
        data = _host_bytes(row)
        out[off:off + len(data)] = data
    return bytes(out)


# --- Hugging Face sharded checkpoints ---------------------------------------------------------

INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"


def parse_size(size: int | str) -> int:
    """``max_shard_size`` as huggingface_hub reads it: bytes, or ``"5GB"``, ``"500MB"`` (the
    core's ``parse_size``)."""
    if isinstance(size, bool):
        raise TypeError("max_shard_size must be an int or a str like '5GB', not bool")
    if not isinstance(size, (int, str)):
        raise TypeError(f"max_shard_size must be an int or a str like '5GB', got {size!r}")
    return _native.parse_shard_size(size)


def storage_size(v: Any) -> int:
    """A tensor's size for sharding, as huggingface_hub counts it (a torch tensor's storage)."""
    if _is_torch(v):
        try:
            return int(v.untyped_storage().nbytes())
        except (NotImplementedError, RuntimeError):
            return v.numel() * v.element_size()
    return int(v.nbytes)


def split(sizes: Mapping[str, int], max_shard_size: int) -> list[list[str]]:
    """The shards, as ``split_torch_state_dict_into_shards`` fills them (the core's
    ``split``)."""
    keys = list(sizes)
    return [[keys[i] for i in shard]
            for shard in _native.split_shards([sizes[k] for k in keys], max_shard_size)]


def _referenced(directory: str) -> set[str]:
    try:
        with open(os.path.join(directory, INDEX_NAME), encoding="utf-8") as f:
            return set(json.load(f).get("weight_map", {}).values())
    except (OSError, ValueError, AttributeError):
        return set()


def remove_stale_temporaries(directory: str) -> None:
    """Removes temporaries that killed saves left in ``directory``: written by a process of
    this host that is gone, held by no writer, and named by no index. Call it holding the
    directory's ``_native.DirLock``."""
    _native.remove_stale_temporaries(directory, sorted(_referenced(directory)))


def save_checkpoint(state_dict: Mapping[str, Any], directory: Any,
                    max_shard_size: int | str = "5GB", *, metadata: Any = None,
                    durable: bool = True, sizes: Mapping[str, int] | None = None
                    ) -> dict[str, Any]:
    """``sizes``: each tensor's size for sharding where ``state_dict`` holds staged copies
    (views of one buffer) of the tensors the caller gave. A local directory is saved by the
    core (``gpufile::formats::safetensors::save::checkpoint``), GIL released."""
    from . import _save_remote  # imports this module

    if _save_remote.is_url(directory):
        return _save_remote.save_checkpoint(state_dict, directory, max_shard_size,
                                            metadata=metadata, sizes=sizes)
    rows = describe(state_dict)
    if sizes is None:
        sizes = {k: storage_size(v) for k, v in state_dict.items()}
    meta = check_metadata(metadata) or {}
    limit = parse_size(max_shard_size)
    directory = os.fsdecode(directory)
    sync_producers(state_dict)
    try:
        weight_map = _native.save_checkpoint(directory, rows, [sizes[r[0]] for r in rows],
                                             limit, meta, durable)
    except BaseException as e:
        _annotate(e, directory)
        raise
    return {"metadata": {"total_size": sum(sizes.values()), **meta},
            "weight_map": dict(weight_map)}


# --- async_save ---------------------------------------------------------------------------------


class SaveFuture:
    """The background part of an :func:`async_save`: ``result()`` waits (and raises what the
    write raised), ``done()``, ``add_done_callback()`` and ``await``, which call back as
    ``IOFuture`` does (the same helpers run the callbacks)."""

    def __init__(self, target: Any, args: tuple, kwargs: dict) -> None:
        self._result: Any = None
        self._error: BaseException | None = None
        self._done = threading.Event()
        # Callbacks not run yet, in the order added; None once every one has run.
        self._callbacks: list | None = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, args=(target, args, kwargs),
                                        name="gpufile-async-save", daemon=False)
        self._thread.start()

    def _run(self, target: Any, args: tuple, kwargs: dict) -> None:
        try:
            self._result = target(*args, **kwargs)
        except BaseException as e:  # noqa: BLE001 - handed to result()
            self._error = e
        self._done.set()
        while True:
            with self._lock:
                if not self._callbacks:
                    self._callbacks = None
                    return
                callback = self._callbacks.pop(0)
            callback()  # a partial of call_back or wake, as IOFuture's: it never raises

    def _add(self, callback: Any) -> bool:
        """Arranges for ``callback()`` to run once the save has ended, after the callbacks
        added before it, on the save's thread; False, and nothing arranged, once the save ended
        and every earlier callback ran (the caller calls back itself)."""
        with self._lock:
            if self._callbacks is None:
                return False
            self._callbacks.append(callback)
            return True

    def done(self) -> bool:
        """Whether the file is published (or the save failed)."""
        return self._done.is_set()

    def result(self, timeout: float | None = None) -> Any:
        """Waits for the save; raises its error. ``TimeoutError`` after ``timeout`` seconds."""
        if not self._done.wait(timeout):
            raise TimeoutError(f"the save did not end within {timeout} s")
        if self._error is not None:
            raise self._error
        return self._result

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """The save's error, or None, once it ended."""
        if not self._done.wait(timeout):
            raise TimeoutError(f"the save did not end within {timeout} s")
        return self._error

    def add_done_callback(self, fn: Any) -> None:
        """Calls ``fn(future)`` when the save ends, in the order added (at once, on the calling
        thread, if it has ended and the earlier callbacks have run). An exception ``fn`` raises
        is logged (logger ``"gpufile"``) and the next callbacks still run."""
        if not self._add(functools.partial(call_back, fn, self)):
            call_back(fn, self)

    def __await__(self):
        if not self.done():
            import asyncio

            loop = asyncio.get_running_loop()
            waiter = loop.create_future()
            if self._add(functools.partial(wake, loop, waiter, self)):
                yield from waiter
        return self.result()


_pinned_lock = threading.Lock()
_pinned: Any = None  # the pinned staging buffer async saves reuse (a torch uint8 tensor)
_pinned_user: SaveFuture | None = None  # the save whose background write still reads it


def _staging_buffer(nbytes: int) -> Any:
    """A host buffer of at least ``nbytes`` for staging: the pinned one of the last save,
    reused once that save's background write is done (pinning is slow: docs/performance.md,
    "Saving checkpoints"), or a new one."""
    global _pinned
    import torch
    if _pinned_user is not None and not _pinned_user.done():
        _pinned_user.exception()  # waits; the error is the earlier save's to report
    if _pinned is None or _pinned.numel() < nbytes:
        _pinned = None
        _pinned = torch.empty(nbytes, dtype=torch.uint8, pin_memory=torch.cuda.is_available())
    return _pinned


_ALIGN = 256


def stage(tensors: Mapping[str, Any], limit: int) -> dict[str, Any]:
    """Copies of ``tensors`` that later changes to them do not reach. PyTorch tensors (CUDA or
    CPU) are copied into one pinned host buffer (CUDA ones by the copy engine, every copy queued
    then one wait per device), at most ``limit`` bytes (``async_save_pinned_limit``; a larger
    save is a ``ValueError`` before anything is copied); NumPy and CuPy arrays into host
    arrays of their own. Call with ``_pinned_lock`` held."""
    torch_items = [(k, v) for k, v in tensors.items() if _is_torch(v)]
    spans = []
    total = 0
    for _, v in torch_items:
        spans.append(total)
        total += -(-int(v.numel() * v.element_size()) // _ALIGN) * _ALIGN
    if total > limit:
        raise ValueError(f"async_save needs {total} bytes of pinned host memory to stage its "
                         f"PyTorch tensors, more than async_save_pinned_limit ({limit} bytes); "
                         "raise the setting (gpufile.defaults.set) or save with save_file")
    out: dict[str, Any] = {}
    devices = set()
    if torch_items:
        buf = _staging_buffer(max(total, 1))
        for (name, v), off in zip(torch_items, spans):
            n = int(v.numel() * v.element_size())
            dst = buf[off:off + n].view(v.dtype).reshape(v.shape)
            dst.copy_(v.detach(), non_blocking=v.device.type == "cuda")
            if v.device.type == "cuda":
                devices.add(v.device)
            out[name] = dst
    for name, v in tensors.items():
        if name in out:
            continue
        if _is_cupy(v):
            out[name] = v.get()
        else:
            out[name] = v.copy() if hasattr(v, "copy") else v
    if devices:
        import torch
        for d in devices:
            torch.cuda.current_stream(d).synchronize()
    return {k: out[k] for k in tensors}


def async_save(tensors: Mapping[str, Any], path: Any, metadata: Any, sharded: bool,
               max_shard_size: int | str, durable: bool, limit: int) -> SaveFuture:
    global _pinned_user
    describe(tensors)  # every refusal before anything is copied
    meta = check_metadata(metadata)
    if sharded:
        parse_size(max_shard_size)
    sizes = {k: storage_size(v) for k, v in tensors.items()}
    with _pinned_lock:
        staged = stage(tensors, limit)
        if sharded:
            fut = SaveFuture(save_checkpoint, (staged, path, max_shard_size),
                             {"metadata": meta, "durable": durable, "sizes": sizes})
        else:
            fut = SaveFuture(save_file, (staged, path, meta), {"durable": durable})
        if any(_is_torch(v) for v in tensors.values()):
            _pinned_user = fut
    return fut
