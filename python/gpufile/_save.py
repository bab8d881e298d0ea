"""Saving safetensors files and Hugging Face checkpoints (``gpufile.safetensors.save_file``,
``save_checkpoint``, ``async_save``): tensors described for the core (``_save_rows``), written
from their own memory, published whole; a URL goes to ``_save_remote``."""

from __future__ import annotations

import functools
import json
import os
import threading
from typing import Any, Mapping, Sequence

from . import _native, _save_remote
from ._future import call_back, wake
from ._save_rows import (
    INDEX_NAME,
    JaxDeviceBytes,
    Row,
    check_metadata,
    describe,
    is_cupy,
    is_jax,
    is_torch,
    parse_size,
    storage_size,
    sync_producers,
)


def _annotate(e: BaseException, what: str) -> None:
    if isinstance(e, OSError):
        e.add_note(f"gpufile: nothing was published at {what} (what was there is as it was; "
                   "no temporary file is left)")


def write_file(rows: Sequence[Row], filename: Any, metadata: dict[str, str] | None,
               durable: bool) -> None:
    """Writes ``rows`` to ``filename`` under a temporary name, then publishes it (the core's
    ``save::file::save_file``, GIL released)."""
    try:
        _native.save_file(filename, list(rows), metadata, durable)
    except BaseException as e:
        _annotate(e, os.fsdecode(filename))
        raise


def save_file(tensors: Mapping[str, Any], filename: Any, metadata: Any = None, *,
              durable: bool = True) -> None:
    if _native.is_url(filename):
        return _save_remote.save_file(tensors, filename, metadata)
    rows = describe(tensors)
    meta = check_metadata(metadata)
    sync_producers(tensors)
    write_file(rows, filename, meta, durable)


def _host_bytes(row: Row) -> bytes:
    buf = row[3]
    if is_torch(buf):
        return buf.cpu().numpy().tobytes()
    if is_cupy(buf):
        return buf.get().tobytes()
    if isinstance(buf, JaxDeviceBytes):
        return _jax_to_host(buf.array).tobytes()
    return buf.tobytes()


def _jax_to_host(a: Any) -> Any:
    """A NumPy copy of a JAX array's value, in memory of its own (``numpy.asarray`` of a GPU
    array would also keep a host copy cached on the array)."""
    import jax
    import numpy
    host = jax.device_put(a, jax.devices("cpu")[0], may_alias=False)
    return numpy.asarray(host).reshape(-1).view(numpy.uint8)


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
    if _native.is_url(directory):
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
        weight_map = _native.save_checkpoint(directory, rows,
                            [sizes[r[0]] for r in rows], limit, meta, durable)
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
    save is a ``ValueError`` before anything is copied); NumPy, CuPy and JAX arrays into host
    arrays of their own. Call with ``_pinned_lock`` held."""
    torch_items = [(k, v) for k, v in tensors.items() if is_torch(v)]
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
    jax_items = [(k, v) for k, v in tensors.items() if is_jax(v)]
    if jax_items:
        # Host copies of their own: a JAX array is immutable, but deleting or donating it frees
        # its buffer. The copies are queued together, then waited for once.
        import jax
        cpu = jax.devices("cpu")[0]
        for name, v in jax_items:
            out[name] = jax.device_put(v, cpu, may_alias=False)
        jax.block_until_ready([out[k] for k, _ in jax_items])
    for name, v in tensors.items():
        if name in out:
            continue
        if is_cupy(v):
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
        if any(is_torch(v) for v in tensors.values()):
            _pinned_user = fut
    return fut
