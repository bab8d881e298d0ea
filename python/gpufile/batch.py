"""``BatchHandle`` and ``BatchOp``: KvikIO C++'s batch API (``kvikio/batch.hpp``) in Python.

KvikIO's batch goes to cuFile's batch API (device memory only, GDS only). gpufile runs a batch
as requests of many ranges: the operations on one file, one buffer and one direction become
one ``read_ranges``/``write_ranges`` request (the core's batch, which C++'s
``kvikio::BatchHandle`` uses too), so a batch of 10,000 small reads is a few groups per worker,
through io_uring where the kernel allows it, host or device memory alike.
"""

from __future__ import annotations

import enum
import os
import time
from typing import Any, NamedTuple, Sequence

from . import _native
from ._future import IOFuture
from .cufile import CuFile


class OpCode(enum.IntEnum):
    """The direction of a ``BatchOp`` (cuFile's ``CUfileOpcode_t``)."""

    READ = 0
    WRITE = 1


class IOStatus(enum.IntEnum):
    """The state of one operation of a batch (cuFile's ``CUfileStatus_t`` values)."""

    WAITING = 0x1
    PENDING = 0x2
    INVALID = 0x4
    CANCELED = 0x8
    COMPLETE = 0x10
    TIMEOUT = 0x20
    FAILED = 0x40


class IOEvent(NamedTuple):
    """The outcome of one operation (cuFile's ``CUfileIOEvents_t``).

    ``cookie`` is the operation's index in the list given to ``submit()``; ``ret`` the bytes
    moved, or ``-errno`` (``-1`` where the error has none) for a failed operation.
    """

    cookie: int
    status: IOStatus
    ret: int


class BatchOp:
    """One operation of a batch, with KvikIO C++'s fields.

    Parameters
    ----------
    file_handle : CuFile
        The file to read or write.
    devPtr_base : host or device buffer
        The buffer (gpufile takes host memory too, where cuFile's batch API does not).
    file_offset : int
        Offset in the file.
    devPtr_offset : int
        Offset in the buffer.
    size : int
        Bytes.
    opcode : OpCode or int, optional
        ``OpCode.READ`` (0, the default) or ``OpCode.WRITE`` (1).
    """

    __slots__ = ("file_handle", "devPtr_base", "file_offset", "devPtr_offset", "size", "opcode")

    def __init__(self, file_handle: CuFile, devPtr_base: Any, file_offset: int,
                 devPtr_offset: int, size: int, opcode: OpCode | int = OpCode.READ) -> None:
        if not isinstance(file_handle, CuFile):
            raise TypeError(f"file_handle must be a CuFile, not {type(file_handle).__name__}")
        try:
            opcode = OpCode(opcode)
        except ValueError:
            raise ValueError(f"opcode must be OpCode.READ (0) or OpCode.WRITE (1), got {opcode!r}"
                             ) from None
        self.file_handle = file_handle
        self.devPtr_base = devPtr_base
        self.file_offset = file_offset
        self.devPtr_offset = devPtr_offset
        self.size = size
        self.opcode = opcode

    def __repr__(self) -> str:
        return (f"BatchOp({self.file_handle!r}, <buffer>, file_offset={self.file_offset}, "
                f"devPtr_offset={self.devPtr_offset}, size={self.size}, "
                f"opcode={self.opcode.name})")


class _Group:
    """The operations of one file, buffer and direction: one request."""

    __slots__ = ("cookies", "sizes", "future", "result")

    def __init__(self, cookies: list[int], sizes: list[int], future: IOFuture) -> None:
        self.cookies = cookies
        self.sizes = sizes
        self.future = future
        self.result: BaseException | None | bool = None  # None: not seen done yet


class BatchHandle:
    """A batch of reads and writes, KvikIO C++'s ``BatchHandle``.

    1. Make one with a large enough ``max_num_events``.
    2. ``submit()`` a list of ``BatchOp`` (at most ``max_num_events``).
    3. ``status()`` waits for operations to finish and returns their events, or
       ``cancel()`` stops those not started.
    4. Submit again once every event was returned, or ``close()``.

    One submission at a time, as KvikIO's. Also a context manager (``close()`` on exit).

    Parameters
    ----------
    max_num_events : int
        The most operations one ``submit()`` takes.

    Raises
    ------
    ValueError
        ``max_num_events`` is less than 1.
    """

    def __init__(self, max_num_events: int) -> None:
        if isinstance(max_num_events, bool) or not isinstance(max_num_events, int):
            raise TypeError(
                f"max_num_events must be an int, not {type(max_num_events).__name__}")
        if max_num_events < 1:
            raise ValueError(f"max_num_events must be at least 1, got {max_num_events}")
        self._max = max_num_events
        self._groups: list[_Group] = []
        self._reported: set[int] = set()
        self._total = 0
        self._cancelled = False
        self._closed = False

    @property
    def max_num_events(self) -> int:
        """The most operations one ``submit()`` takes."""
        return self._max

    def closed(self) -> bool:
        """Whether ``close()`` was called."""
        return self._closed

    def submit(self, operations: Sequence[BatchOp]) -> None:
        """Start ``operations``; returns at once.

        Every operation is checked before any starts: a bad one raises and nothing moves.

        Raises
        ------
        ValueError
            More operations than ``max_num_events``; a handle closed, or with a submission
            whose events were not all returned (``RuntimeError``); a negative offset or size,
            a range past its buffer, reads whose destinations overlap (in one buffer or in
            views of the same memory), writes to the same bytes of one file (whatever their
            buffers and handles: "operations i and j of the batch write the same bytes ...").
        TypeError
            An item that is not a ``BatchOp``.
        gpufile.EndOfFileError
            A read past the end of its file.
        """
        if self._closed:
            raise ValueError("the batch handle is closed")
        if self._groups and len(self._reported) < self._total:
            raise RuntimeError("a submission is in flight: wait for its events with status() or "
                               "cancel() it first")
        ops = list(operations)
        if len(ops) > self._max:
            raise ValueError(f"Cannot submit more than max_num_events ({self._max}): got "
                             f"{len(ops)} operations")
        # Each file and buffer once; the core groups the operations (one request per file,
        # buffer and direction) and checks and plans every group before the first starts: a
        # refused one (a range past its buffer, reads overlapping in their destination) moves
        # no byte.
        files: dict[int, int] = {}
        buffers: dict[int, int] = {}
        file_list: list[Any] = []
        buffer_list: list[Any] = []
        file_sizes: dict[int, int] = {}
        columns: tuple[list[int], list[int], list[bool], list[int], list[int], list[int]] = (
            [], [], [], [], [], [])
        file_index, buffer_index, writes, file_offsets, sizes, buf_offsets = columns
        for i, op in enumerate(ops):
            if not isinstance(op, BatchOp):
                raise TypeError(f"operations[{i}] must be a BatchOp, not {type(op).__name__}")
            for name in ("file_offset", "devPtr_offset", "size"):
                v = getattr(op, name)
                if isinstance(v, bool) or not hasattr(v, "__index__"):
                    raise TypeError(f"operations[{i}].{name} must be an int, not "
                                    f"{type(v).__name__}")
                if v < 0:
                    raise ValueError(f"operations[{i}].{name} must not be negative, got {v}")
            fh, buf = op.file_handle, op.devPtr_base
            f = files.get(id(fh))
            if f is None:
                f = files[id(fh)] = len(file_list)
                file_list.append(fh._file)
            b = buffers.get(id(buf))
            if b is None:
                b = buffers[id(buf)] = len(buffer_list)
                buffer_list.append(buf)
            write = op.opcode == OpCode.WRITE
            if not write:
                _check_read_in_file(i, op, file_sizes)
            file_index.append(f)
            buffer_index.append(b)
            writes.append(write)
            file_offsets.append(op.file_offset)
            sizes.append(op.size)
            buf_offsets.append(op.devPtr_offset)
        futures, members = _native.submit_ops(file_list, buffer_list, *columns)
        groups = [_Group(c, [sizes[i] for i in c], IOFuture(f)) for c, f in zip(members, futures)]
        self._groups = groups
        self._reported = set()
        self._total = len(ops)
        self._cancelled = False

    def _events_ready(self) -> list[IOEvent]:
        out = []
        for g in self._groups:
            if g.result is None and g.future.done():
                try:
                    g.future.get()
                    g.result = True
                except BaseException as e:  # noqa: BLE001 - reported as the events' status
                    g.result = e
            if g.result is None:
                continue
            for cookie, size in zip(g.cookies, g.sizes):
                if cookie in self._reported:
                    continue
                if g.result is True:
                    out.append(IOEvent(cookie, IOStatus.COMPLETE, size))
                elif self._cancelled:
                    out.append(IOEvent(cookie, IOStatus.CANCELED, 0))
                else:
                    errno = getattr(g.result, "errno", None)
                    out.append(IOEvent(cookie, IOStatus.FAILED, -errno if errno else -1))
        return out

    def status(self, min_nr: int, max_nr: int, timeout: float | None = None) -> list[IOEvent]:
        """Wait until at least ``min_nr`` operations not yet reported have finished (or
        ``timeout`` seconds passed), then return the events of at most ``max_nr`` of them.

        Parameters
        ----------
        min_nr : int
            Events to wait for (at most the operations not yet reported).
        max_nr : int
            Most events to return.
        timeout : float, optional
            Seconds to wait at most (``None``: no limit); on timeout fewer than ``min_nr``
            events may come back.

        Returns
        -------
        list of IOEvent
            ``(cookie, status, ret)`` per finished operation, in submission order.

        Raises
        ------
        ValueError
            The handle is closed (``close()`` dropped its operations: there is nothing left to
            wait for), or ``min_nr`` or ``max_nr`` is negative.
        """
        if self._closed:
            raise ValueError("the batch handle is closed")
        if min_nr < 0 or max_nr < 0:
            raise ValueError(f"min_nr and max_nr must not be negative, got {min_nr}, {max_nr}")
        want = min(min_nr, self._total - len(self._reported))
        deadline = None if timeout is None else time.monotonic() + timeout
        pause = 20e-6
        while True:
            events = self._events_ready()
            if len(events) >= want or (deadline is not None and time.monotonic() >= deadline):
                break
            # Without completion callbacks a wait is a poll; the pause grows to 1 ms.
            time.sleep(pause)
            pause = min(pause * 2, 1e-3)
        events = events[:max_nr]
        self._reported.update(e.cookie for e in events)
        return events

    def cancel(self) -> None:
        """Stop the operations not started; those running finish. Their events say
        ``CANCELED`` unless they had completed."""
        self._cancelled = True
        for g in self._groups:
            g.future._fut.cancel()

    def close(self) -> None:
        """Cancel what is in flight, wait for it, and free the handle; closing twice is
        harmless."""
        if self._closed:
            return
        self.cancel()
        for g in self._groups:
            try:
                g.future.get()
            except Exception:  # noqa: BLE001 - cancelled on purpose
                pass
        self._groups = []
        self._reported = set()
        self._total = 0
        self._closed = True

    def __enter__(self) -> "BatchHandle":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _check_read_in_file(i: int, op: BatchOp, sizes: dict[int, int]) -> None:
    """A read past the end of its file is refused before any operation starts (`sizes`: the
    files' sizes looked up so far in this submission, by the handle's id)."""
    size = sizes.get(id(op.file_handle))
    if size is None:
        size = sizes[id(op.file_handle)] = os.fstat(op.file_handle.fileno()).st_size
    end = op.file_offset + op.size
    if op.size and end > size:
        raise _native.EndOfFileError(
            f"operations[{i}]: a read of {op.size} bytes at offset {op.file_offset} ends past "
            f"the end of the file ({size} bytes)")
