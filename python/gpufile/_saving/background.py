"""``gpufile.safetensors.async_save``: the tensors are snapshotted before the call returns, then
written in the background by ``local``'s ``save_file`` or ``save_checkpoint``.

Where a snapshot of PyTorch tensors goes, decided per call (``SaveFuture.staging()`` says which
and why):

1. GPU tensors into spare memory of their own GPU, by device-to-device copies, where the
   snapshot fits ``async_save_device_limit`` and takes at most half the memory the driver
   reports free on each GPU (the training step that follows keeps room). The caller waits only
   for those copies: about 2 ms per 4 GiB on an H200, against 1.4 s to allocate as much pinned
   host memory (docs/performance.md, "Async saves"). The background write then moves the
   snapshot to the file through gpufile's bounce buffers, which it reuses, and lets it go.
2. Otherwise (and for CPU tensors) into one pinned host buffer, kept and reused by later saves
   and allocated ahead by :func:`reserve`, at most ``async_save_pinned_limit`` bytes.

NumPy, CuPy and JAX arrays are copied into host arrays of their own.
"""

from __future__ import annotations

import functools
import threading
from typing import Any, Mapping

from .._future import call_back, wake
from .local import save_checkpoint, save_file
from .rows import (
    check_metadata,
    describe,
    is_cupy,
    is_jax,
    is_torch,
    parse_size,
    storage_size,
)


class SaveFuture:
    """The background part of an :func:`async_save`: ``result()`` waits (and raises what the
    write raised), ``done()``, ``add_done_callback()`` and ``await``, which call back as
    ``IOFuture`` does (the same helpers run the callbacks); ``staging()`` says where the
    tensors were snapshotted and why."""

    def __init__(self, target: Any, args: tuple, kwargs: dict,
                 staging: dict[str, Any] | None = None) -> None:
        self._result: Any = None
        self._error: BaseException | None = None
        self._staging = dict(staging or {"where": "host", "bytes": 0, "reason": ""})
        self._done = threading.Event()
        # Callbacks not run yet, in the order added; None once every one has run.
        self._callbacks: list | None = []
        self._lock = threading.Lock()
        # The write to run, let go once it ends: a snapshot in GPU memory goes back then, not
        # when the future does.
        self._job: tuple | None = (target, args, kwargs)
        self._thread = threading.Thread(target=self._run, name="gpufile-async-save",
                                        daemon=False)
        self._thread.start()

    def _run(self) -> None:
        job, self._job = self._job, None
        assert job is not None
        try:
            self._result = job[0](*job[1], **job[2])
        except BaseException as e:  # noqa: BLE001 - handed to result()
            self._error = e
        del job
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

    def staging(self) -> dict[str, Any]:
        """Where the save's PyTorch tensors were snapshotted before the call returned (gpufile's
        addition): ``where`` (``"device"``: spare GPU memory, ``"pinned"``: pinned host
        memory, ``"host"``: no PyTorch tensor), ``bytes`` and ``reason``."""
        return dict(self._staging)

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
    "Saving checkpoints"), or a new one. Call with ``_pinned_lock`` held."""
    global _pinned
    import torch
    if _pinned_user is not None and not _pinned_user.done():
        _pinned_user.exception()  # waits; the error is the earlier save's to report
    if _pinned is None or _pinned.numel() < nbytes:
        _pinned = None
        _pinned = torch.empty(nbytes, dtype=torch.uint8, pin_memory=torch.cuda.is_available())
    return _pinned


def reserve(nbytes: int, limit: int) -> int:
    """Allocates the pinned staging buffer of at least ``nbytes`` now, so that no later
    ``async_save`` that falls back to pinned memory pays for the allocation while its caller
    waits; returns the buffer's size."""
    if not isinstance(nbytes, int) or isinstance(nbytes, bool) or nbytes < 0:
        raise ValueError(f"nbytes must be a non-negative int, not {nbytes!r}")
    if nbytes > limit:
        raise ValueError(f"{nbytes} bytes is more than async_save_pinned_limit ({limit} bytes); "
                         "raise the setting (gpufile.defaults.set) first")
    with _pinned_lock:
        return int(_staging_buffer(max(nbytes, 1)).numel())


_ALIGN = 256


def aligned(v: Any) -> int:
    """Bytes ``v`` takes in a staging buffer, each tensor at a 256-byte boundary."""
    return -(-int(v.numel() * v.element_size()) // _ALIGN) * _ALIGN


def device_snapshot(items: list[tuple[Any, Any]], limit: int
                     ) -> tuple[dict[str, Any], str]:
    """Buffers in GPU memory for the CUDA tensors of ``items`` (one per GPU, as uint8 tensors
    keyed by device), or none, with the reason either way."""
    import torch

    per_device: dict[Any, int] = {}
    for _, v in items:
        if v.device.type == "cuda":
            per_device[v.device] = per_device.get(v.device, 0) + aligned(v)
    total = sum(per_device.values())
    if not per_device:
        return {}, "no GPU tensor"
    if limit == 0:
        return {}, "async_save_device_limit is 0"
    if total > limit:
        return {}, (f"a snapshot of {total} bytes is more than async_save_device_limit "
                    f"({limit} bytes)")
    for d, n in per_device.items():
        free, _ = torch.cuda.mem_get_info(d)
        if n > free // 2:
            return {}, (f"a snapshot of {n} bytes on {d} would take more than half of its "
                        f"{free} free bytes, which the training step that follows may need")
    bufs = {}
    try:
        for d, n in per_device.items():
            bufs[d] = torch.empty(n, dtype=torch.uint8, device=d)
    except torch.cuda.OutOfMemoryError as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        return {}, f"allocating the snapshot in GPU memory failed ({first})"
    return bufs, (f"a snapshot of {total} bytes fits async_save_device_limit ({limit} bytes) "
                  "and half the free memory of each GPU")


def stage(tensors: Mapping[str, Any], limit: int, device_limit: int
          ) -> tuple[dict[str, Any], dict[str, Any]]:
    """Copies of ``tensors`` that later changes to them do not reach, and where they went
    (``SaveFuture.staging``). GPU tensors go to spare GPU memory where ``device_limit`` and the
    GPUs' free memory allow, else with the CPU ones into one pinned host buffer, at most
    ``limit`` bytes (``async_save_pinned_limit``; more is a ``ValueError`` before anything is
    copied); every copy is queued, then each GPU's stream waited for once. NumPy, CuPy and JAX
    arrays go into host arrays of their own. Call with ``_pinned_lock`` held."""
    torch_items = [(k, v) for k, v in tensors.items() if is_torch(v)]
    on_device, why = device_snapshot(torch_items, device_limit) if torch_items else ({}, "")
    pinned_items = [(k, v) for k, v in torch_items
                    if not (v.device.type == "cuda" and v.device in on_device)]
    total = sum(aligned(v) for _, v in pinned_items)
    if total > limit:
        raise ValueError(f"async_save needs {total} bytes of pinned host memory to stage its "
                         f"PyTorch tensors, more than async_save_pinned_limit ({limit} bytes); "
                         "raise the setting (gpufile.defaults.set) or save with save_file")
    out: dict[str, Any] = {}
    devices = set()
    at: dict[Any, int] = {d: 0 for d in on_device}
    for name, v in torch_items:
        if v.device.type == "cuda" and v.device in on_device:
            n = int(v.numel() * v.element_size())
            off = at[v.device]
            at[v.device] = off + aligned(v)
            dst = on_device[v.device][off:off + n].view(v.dtype).reshape(v.shape)
            dst.copy_(v.detach(), non_blocking=True)
            devices.add(v.device)
            out[name] = dst
    if pinned_items:
        buf = _staging_buffer(max(total, 1))
        off = 0
        for name, v in pinned_items:
            n = int(v.numel() * v.element_size())
            dst = buf[off:off + n].view(v.dtype).reshape(v.shape)
            off += aligned(v)
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
    gpu_bytes = sum(aligned(v) for _, v in torch_items if v.device.type == "cuda")
    if not torch_items:
        staging = {"where": "host", "bytes": 0, "reason": "no PyTorch tensor"}
    elif not pinned_items:
        staging = {"where": "device", "bytes": gpu_bytes, "reason": why}
    else:
        reason = why if gpu_bytes and not on_device else "CPU tensors"
        staging = {"where": "pinned", "bytes": total, "reason": reason}
    return {k: out[k] for k in tensors}, staging


def async_save(tensors: Mapping[str, Any], path: Any, metadata: Any, sharded: bool,
               max_shard_size: int | str, durable: bool, limit: int,
               device_limit: int) -> SaveFuture:
    global _pinned_user
    describe(tensors)  # every refusal before anything is copied
    meta = check_metadata(metadata)
    if sharded:
        parse_size(max_shard_size)
    sizes = {k: storage_size(v) for k, v in tensors.items()}
    with _pinned_lock:
        staged, staging = stage(tensors, limit, device_limit)
        if sharded:
            fut = SaveFuture(save_checkpoint, (staged, path, max_shard_size),
                             {"metadata": meta, "durable": durable, "sizes": sizes}, staging)
        else:
            fut = SaveFuture(save_file, (staged, path, meta), {"durable": durable}, staging)
        del staged
        if staging["where"] == "pinned":
            _pinned_user = fut
    return fut
