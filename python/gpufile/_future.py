"""``IOFuture`` and ``IOFutureStream``: requests in flight, waited for, awaited or called back.

``call_back`` and ``wake`` are the callbacks every gpufile future runs (``IOFuture``,
``aio.gather``, the saves' ``SaveFuture``), so that all of them call back and wake an event loop
the same way.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

_log = logging.getLogger("gpufile")


def call_back(fn: Any, fut: Any) -> None:
    """Calls ``fn(fut)``; an exception it raises is logged (as ``concurrent.futures`` does), never
    lost and never raised into gpufile's callback thread."""
    try:
        fn(fut)
    except Exception:  # noqa: BLE001 - a callback's failure is the caller's, logged
        _log.exception("exception calling callback for %r", fut)


def wake(loop: Any, waiter: Any, _fut: Any) -> None:
    """The end of a request, told to the event loop awaiting it (from gpufile's callback thread).

    ``_fut`` is held until here, so an ``await`` that is cancelled leaves the future (and the
    buffer it holds) alive until the request has ended, and it is never dropped, waiting, on the
    loop's thread.
    """
    try:
        loop.call_soon_threadsafe(_resolve, waiter)
    except RuntimeError:  # the loop is closed: nobody awaits any more
        pass


def _resolve(waiter: Any) -> None:
    if not waiter.done():  # a cancelled await has cancelled it already
        waiter.set_result(None)


class IOFuture:
    """A request in flight, returned by ``CuFile.pread()`` and ``CuFile.pwrite()``.

    It keeps its buffer and its file alive until the request is done, so dropping the future,
    closing the file or exiting the interpreter while it runs is safe (KvikIO's futures hold no
    such references).

    It can be awaited (``n = await f.pread(buf)``) with no thread per future, and calls back
    (``add_done_callback``) as ``concurrent.futures.Future`` does; see the async page of the
    documentation.
    """

    __slots__ = ("_fut",)

    def __init__(self, fut: Any) -> None:
        self._fut = fut

    def get(self) -> int:
        """Wait for the request to finish.

        Returns
        -------
        int
            The bytes transferred.

        Raises
        ------
        OSError, ValueError, gpufile.GpufileError
            The request's own error, as ``CuFile.read()`` or ``CuFile.write()`` would
            raise it.
        """
        return self._fut.get()

    def done(self) -> bool:
        """Whether the request has finished (successfully or not); never blocks.

        Returns
        -------
        bool
        """
        return self._fut.done()

    def report(self) -> dict[str, Any] | None:
        """What the request's plan decided (gpufile's addition), for ``read_ranges``,
        ``write_ranges`` and ``read_rows``; ``None`` for other requests.

        Returns
        -------
        dict or None
            ``backend`` and ``reason`` (the data path and why), ``ranges``, ``tasks`` (groups
            of ranges when ``gathered``), ``host_io`` (``"io_uring"`` or ``"pread"``) and
            ``host_io_reason`` for a gather, ``copies`` (host-to-GPU copies of a gathered
            device read: one per contiguous run of the destination in each group).
        """
        return self._fut.report()

    def add_done_callback(self, fn: Any) -> None:
        """Call ``fn(future)`` once the request has finished (successfully or not).

        As ``concurrent.futures.Future.add_done_callback``: each callback is called once, in
        the order added; a callback added to a finished future whose earlier callbacks have run
        is called at once, on the calling thread. Otherwise it runs on gpufile's callback
        thread (one for the process, holding the GIL; the I/O workers never wait for Python),
        in the order the requests finish. An exception raised by ``fn`` is logged (logger
        ``"gpufile"``) and ignored.
        ``fn`` may call ``future.get()`` (it returns at once) and start or wait for other
        requests, but a callback that blocks delays the callbacks after it.

        Parameters
        ----------
        fn : callable
            Called with this future as its only argument.
        """
        if not self._fut.add_done_callback(functools.partial(call_back, fn, self)):
            call_back(fn, self)

    def __await__(self):
        if not self._fut.done():
            import asyncio

            loop = asyncio.get_running_loop()
            waiter = loop.create_future()
            if self._fut.add_done_callback(functools.partial(wake, loop, waiter, self)):
                # Cancelling the awaiting task cancels ``waiter`` only: the request goes on to
                # its end (its result stays on this future), holding the buffer until then.
                yield from waiter
        return self._fut.get()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {'done' if self.done() else 'pending'}>"


class IOFutureStream(IOFuture):
    """The result of ``CuFile.raw_read_async()`` and ``CuFile.raw_write_async()``.

    The transfer is queued on the stream: it starts once the work queued on the stream before it
    has finished, and work queued on the stream after it waits for its end; the call that made
    it returned at once. ``check_bytes_done()`` (KvikIO's name) and ``get()`` wait for the
    transfer (not for the rest of the stream) and raise its error; ``done()``,
    ``add_done_callback()`` and ``await`` work as for every ``IOFuture``. ``stream_order`` says
    how the stream was made to wait, and why.
    """

    __slots__ = ()

    def check_bytes_done(self) -> int:
        """Wait for the transfer; the bytes transferred.

        Returns
        -------
        int
            Bytes read or written by the stream-ordered request.

        Raises
        ------
        gpufile.EndOfFileError, OSError, gpufile.CudaError, gpufile.CufileError
            The transfer's own error (a read past the end of the file, a failed ``pread``):
            errors found when the stream reached the transfer are raised here, not by the call
            that queued it.
        """
        return self._fut.get()

    @property
    def stream_order(self) -> tuple[str, str]:
        """``(how, reason)``: how later work on the stream waits for this transfer.

        ``"wait-value"`` (the stream waits on a flag gpufile sets when the file read ends,
        ``cuStreamWaitValue32``, then copies the bytes), ``"host-function"`` (a host function
        on the stream blocks until the file read ends), ``"staged"`` (a write: the stream
        copies the source into pinned memory and goes on; the file write follows), or
        ``"caller-waits"`` (the call itself waited: no CUDA device, the driver cannot queue, or
        more staging than gpufile keeps), with the reason.
        """
        return self._fut.stream_order
