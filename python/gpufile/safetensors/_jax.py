"""JAX arrays for ``gpufile.safetensors`` (framework ``"flax"``, alias ``"jax"``).

A load reads each tensor's bytes straight into the buffer that becomes its ``jax.Array``: the
buffers are the outputs of a ``jax.experimental.buffer_callback``, JAX's API for filling memory
it allocates (on the CPU and on GPUs), so there is no staging buffer and no copy, and GPU memory
comes from JAX's own pool (which holds most of the GPU by default: memory allocated beside it,
by CuPy say, would compete with it). Every array owns its memory, as JAX arrays do.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import warnings
from typing import Any

from .. import _native
from ._checkpoint import wait_all
from ._frameworks import device_name

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _user_stacklevel() -> int:
    """The ``stacklevel`` that makes a warning raised by this module's caller name the first
    frame outside gpufile (the user's line), however deep the package's own calls go."""
    level, frame = 1, sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        level, frame = level + 1, frame.f_back
    return level


#: A tensor to read: its (possibly partial) row, the open file, the dtype JAX gets.
Read = tuple


def device(jax: Any, dev: int | None) -> Any:
    """The ``jax.Device`` of gpufile's device number (None: the host)."""
    if dev is None:
        try:
            return jax.devices("cpu")[0]
        except RuntimeError as e:
            raise ValueError(f"JAX has no CPU backend here ({e}); pass a CUDA device") from None
    try:
        gpus = jax.local_devices(backend="gpu")
    except RuntimeError:
        gpus = []
    if not gpus:
        raise ValueError(f"framework 'flax' puts tensors on {device_name(dev)} with JAX's GPU "
                         f"backend, which this JAX does not have (its devices: "
                         f"{jax.devices()}); install jax[cuda12] or jax[cuda13], or pass "
                         f"device='cpu'")
    for d in gpus:
        if getattr(d, "local_hardware_id", d.id) == dev:
            return d
    raise ValueError(f"JAX has no GPU with CUDA ordinal {dev} (its GPUs: {gpus})")


class _Destination:
    """An output buffer of a reader as a read's destination, through its DLPack export. gpufile
    refuses objects of JAX's modules as destinations (a ``jax.Array`` is immutable); an output
    of ``buffer_callback`` is JAX's mutable buffer, filled before its array exists."""

    __slots__ = ("_buf",)

    def __init__(self, buf: Any) -> None:
        self._buf = buf

    def __dlpack__(self, stream: Any = None, max_version: Any = None, dl_device: Any = None,
                   copy: Any = None) -> Any:
        return self._buf.__dlpack__(stream=stream, max_version=max_version)

    def __dlpack_device__(self) -> Any:
        return self._buf.__dlpack_device__()


class _Job:
    """The reads of one device's reader call, and their first error."""

    __slots__ = ("reads", "error")

    def __init__(self, reads: list[tuple[Any, int, int]]) -> None:
        self.reads = reads  # (file, offset, nbytes) per output
        self.error: BaseException | None = None


# The jobs of the load running now, by JAX device. Loads hold _lock from setting their jobs
# until their arrays are ready: a compiled reader (cached, shared by loads of one layout) finds
# its reads here.
_lock = threading.Lock()
_jobs: dict[Any, _Job] = {}


def _fill(key: Any, ctx: Any, outs: list) -> None:
    """The readers' callback: reads every tensor of the job into its output buffer, all started
    at once, then waits. Errors are kept for the caller (raised here, JAX would turn them into
    a ``JaxRuntimeError``)."""
    job = _jobs.get(key)
    if job is None:
        return
    futures: list = []
    try:
        dests = [_Destination(b) for b in outs]
        if key.platform != "cpu":
            # XLA hands out memory in its stream's order: work queued on that stream before
            # (on memory since freed to its pool) must end before gpufile writes.
            first = next((d for d, (_, _, n) in zip(dests, job.reads) if n), None)
            if first is not None:
                _native.stream_synchronize(ctx.stream, first)
        for (f, offset, nbytes), dest in zip(job.reads, dests):
            if nbytes:
                futures.append(f.pread(dest, nbytes, offset))
    except BaseException as e:  # noqa: BLE001 - handed to the caller
        job.error = e
    # Every started read ends before the buffers go back to JAX.
    error = wait_all(futures)
    if job.error is None:
        job.error = error


@functools.lru_cache(maxsize=64)
def _reader(jdev: Any, layout: tuple) -> Any:
    """A compiled function whose outputs, on ``jdev``, are ``layout``'s (shape, dtype) arrays,
    filled by :func:`_fill`."""
    import jax
    from jax.experimental.buffer_callback import buffer_callback
    out = [jax.ShapeDtypeStruct(shape, dt) for shape, dt in layout]
    fill = buffer_callback(functools.partial(_fill, jdev), out, has_side_effect=True)
    return jax.jit(fill, out_shardings=jax.sharding.SingleDeviceSharding(jdev))


def _canonical(jax: Any, dt: Any) -> Any:
    return jax.numpy.dtype(jax.dtypes.canonicalize_dtype(dt))


def read_groups(jax: Any, groups: dict[int | None, list[Read]]) -> dict[int | None, list]:
    """The arrays of each device's reads ``(tensor, file, dtype)``, in order.

    Every device's reads start before any is waited for. A 64-bit type while JAX's
    ``jax_enable_x64`` is off is read into host memory and converted as ``jnp.asarray``
    converts it (JAX has no 64-bit arrays then), with a warning naming the tensor."""
    import numpy as np
    devices = {dev: device(jax, dev) for dev in groups}
    direct: dict[int | None, list[int]] = {}
    host: list[tuple[int | None, int, Any, Any]] = []
    futures: list = []
    out: dict[int | None, list] = {dev: [None] * len(reads) for dev, reads in groups.items()}
    jobs: dict[Any, tuple[int | None, Any, _Job]] = {}
    try:
        for dev, reads in groups.items():
            for i, (t, f, dt) in enumerate(reads):
                if _canonical(jax, dt) == dt:
                    direct.setdefault(dev, []).append(i)
                    continue
                buf = np.empty(t.nbytes, np.uint8)
                if t.nbytes:
                    futures.append(f.pread(buf, t.nbytes, t.offset))
                host.append((dev, i, buf, (t, dt)))
        with _lock:
            try:
                for dev, idx in direct.items():
                    reads = [groups[dev][i] for i in idx]
                    jdev = devices[dev]
                    job = _Job([(f, t.offset, t.nbytes) for t, f, _ in reads])
                    _jobs[jdev] = job
                    reader = _reader(jdev, tuple((tuple(t.shape), dt) for t, _, dt in reads))
                    jobs[jdev] = (dev, reader(), job)
                for _, arrays, _ in jobs.values():
                    jax.block_until_ready(arrays)
            finally:
                for dev in direct:
                    _jobs.pop(devices[dev], None)
    finally:
        error = wait_all(futures)
    for _, _, job in jobs.values():
        if job.error is not None:
            raise job.error
    if error is not None:
        raise error
    for dev, arrays, _ in jobs.values():
        for i, a in zip(direct[dev], arrays):
            out[dev][i] = a
    for dev, i, buf, (t, dt) in host:
        to = _canonical(jax, dt)
        warnings.warn(f"tensor {t.name!r} is {t.dtype}, which JAX holds as {to} while "
                      f"jax_enable_x64 is off: its values are converted as jnp.asarray converts "
                      f"them (enable x64 to keep {t.dtype})", UserWarning,
                      stacklevel=_user_stacklevel())
        value = buf.view(dt).reshape(t.shape).astype(to)
        out[dev][i] = jax.device_put(value, devices[dev])
    return out
