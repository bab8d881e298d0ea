"""asyncio helpers for gpufile's futures (gpufile's addition; KvikIO has none).

Every ``IOFuture`` is awaitable on its own (``n = await f.pread(buf)``), with no thread per
future. :func:`gather` awaits many at once with one wake-up of the event loop for all of them,
where ``asyncio.gather`` of the same futures wakes the loop once per future.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any, Iterable

from . import _future, _native
from ._future import IOFuture

__all__ = ["gather"]


async def gather(futures: Iterable[IOFuture], return_exceptions: bool = False) -> list:
    """Wait for every future of ``futures``; their results, in the same order.

    Parameters
    ----------
    futures : iterable of IOFuture
        Futures of ``pread``, ``pwrite``, ``read_batch``, ``raw_read_async``, ... (any mix).
    return_exceptions : bool, optional
        As ``asyncio.gather``: a failed request's exception takes its place in the list instead
        of being raised.

    Returns
    -------
    list of int
        The bytes each request transferred.

    Raises
    ------
    OSError, gpufile.GpufileError, ...
        Unless ``return_exceptions``, the first failed request's error (in the order given),
        raised once every request has ended, so no worker still uses any buffer.
    TypeError
        An item is not a gpufile future.

    Notes
    -----
    Cancelling the awaiting task stops the wait only: the requests go on to their end and keep
    their buffers until then; each future still gives its result.

    Examples
    --------
    >>> futs = [f.pread(buf[i * n:(i + 1) * n], n, i * n) for i in range(k)]   # doctest: +SKIP
    >>> sizes = await gpufile.aio.gather(futs)                               # doctest: +SKIP
    """
    futures = list(futures)
    for f in futures:
        if not isinstance(f, IOFuture):
            raise TypeError(f"expected gpufile IOFutures, got {type(f).__name__}")
    loop = asyncio.get_running_loop()
    waiter = loop.create_future()
    # One callback for the whole list; it holds the futures until they have all ended.
    wake = functools.partial(_future.wake, loop, waiter, futures)
    if _native.when_all([f._fut for f in futures], wake):
        await waiter
    results: list[Any] = []
    for f in futures:
        try:
            results.append(f.get())
        except Exception as e:  # noqa: BLE001 - returned or raised below, as asyncio does
            if not return_exceptions:
                raise
            results.append(e)
    return results
