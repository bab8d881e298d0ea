"""KvikIO 26.10's I/O statistics: :class:`SummaryMonitor` and the :class:`Summary` it reads.

Every operation is one user-facing call (one ``read``, ``pread``, ``read_ranges`` or
``read_rows``), however many tasks it ran as. On top of KvikIO's fields, each summary says which
of gpufile's paths carried the bytes and why: every ``by_backend`` row has ``path`` and
``reason``, and :attr:`Summary.by_path` has a row per path (``gpufile-posix``,
``page-cache-dma``, ``gpu-gather``, ``cufile-nvfs``, ``cufile-compat``, ``mmap``, ``remote``)
with the reasons given and how many operations each was given for. The numbers come from the
same record that feeds :func:`gpufile.observe`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, TypedDict

from . import _native

__all__ = ["Summary", "SummaryMonitor", "counters"]


@dataclass(frozen=True)
class Summary:
    """Totals of the I/O gpufile performed over a monitor's span.

    A snapshot from :meth:`SummaryMonitor.get` or :meth:`SummaryMonitor.since`; its values do
    not change once read. Fields named ``_ns`` are nanoseconds; the two timestamps are
    nanoseconds since the Unix epoch (comparable with ``time.time_ns()``), measured on a
    monotonic clock and mapped through an anchor the monitor took when it was made.
    """

    class BackendTotals(TypedDict):
        """What one KvikIO backend carried (a value of :attr:`Summary.by_backend`)."""

        num_ops: int
        bytes_transferred: int
        total_duration_ns: int
        num_errors: int
        path: str
        reason: str

    class PathTotals(TypedDict):
        """What one of gpufile's paths carried (a value of :attr:`Summary.by_path`)."""

        backend: str
        num_ops: int
        bytes_transferred: int
        total_duration_ns: int
        num_errors: int
        num_tasks: int
        dma_bytes: int
        reasons: dict[str, int]

    start_unix_ns: int
    """When counting started, or was last reset."""
    end_unix_ns: int
    """When the summary was read (or the monitor stopped)."""
    num_ops: int
    """Number of user-facing operations."""
    num_reads: int
    """Of them, reads."""
    num_writes: int
    """Of them, writes."""
    bytes_requested: int
    """Bytes the operations asked for."""
    bytes_transferred: int
    """Bytes actually moved (differs from :attr:`bytes_requested` on a failed operation)."""
    bytes_read: int
    """Of the bytes moved, those read."""
    bytes_written: int
    """Of the bytes moved, those written."""
    num_errors: int
    """Operations that failed (a call refused before any byte moved included)."""
    busy_ns: int
    """Time with at least one operation in flight (overlaps counted once; at most
    :attr:`wall_ns`)."""
    total_duration_ns: int
    """The operations' durations added up (every completed operation counted)."""
    by_backend: dict[str, BackendTotals] = field(hash=False)
    """What each KvikIO backend (``POSIX``, ``GDS``, ``MMAP``, ``REMOTE_HTTP``,
    ``REMOTE_HDFS``) carried; the rows add up to the summary's totals. gpufile adds ``path``
    (the gpufile paths that carried the row, ``+``-joined, ``""`` where unused) and ``reason``
    (why, ``; ``-joined). Excluded from :func:`hash` (a dict), not from ``==``."""
    counters: dict[str, int] = field(hash=False)
    """Work in the span that belongs to no single operation: remote size probes, HTTP
    connections opened (DNS, TCP, TLS time) and HTTP retries (back-off time)."""
    by_path: dict[str, PathTotals] = field(hash=False)
    """gpufile only: a row per path used, with the reasons given for taking it."""
    wall_ns: int
    """The span, from :attr:`start_unix_ns` to :attr:`end_unix_ns`."""
    busy_bytes_per_sec: float
    """Throughput while busy (0 if never busy); times :attr:`busy_fraction` is the whole-span
    rate."""
    busy_fraction: float
    """Share of the span with an operation in flight, between 0 and 1."""
    mean_duration_ns: int
    """Average duration of an operation (0 if none completed)."""

    # The core's summary, kept for `since`, the renderings and the bytes.
    _handle: ClassVar[Any] = None

    @classmethod
    def _from_handle(cls, handle: Any) -> "Summary":
        ret = cls(**handle.as_dict())
        object.__setattr__(ret, "_handle", handle)
        return ret

    def since(self, previous: "Summary") -> "Summary":
        """Totals for the interval between an earlier reading and this one.

        Parameters
        ----------
        previous : Summary
            An earlier reading of the same span.

        Returns
        -------
        Summary
            The interval's totals, spanning ``[previous.end_unix_ns, self.end_unix_ns)``.

        Raises
        ------
        ValueError
            If ``previous`` is not an earlier reading of the same span: an interval, a reading
            of another monitor, one from before a reset.
        """
        return Summary._from_handle(self._handle.since(previous._handle))

    def to_json(self) -> str:
        """The summary as a JSON object (KvikIO's keys, plus ``by_path``).

        Returns
        -------
        str
        """
        return self._handle.to_json()

    def serialize(self) -> bytes:
        """The summary as bytes, exactly (the clock anchor and the span too), so that a summary
        sent through a pipe is still a baseline for :meth:`SummaryMonitor.since`. Only this
        version of gpufile reads them back; pickling uses them.

        Returns
        -------
        bytes
        """
        return self._handle.serialize()

    @staticmethod
    def deserialize(data: bytes) -> "Summary":
        """Rebuilds a summary from :meth:`serialize`.

        Parameters
        ----------
        data : bytes
            What :meth:`serialize` produced.

        Returns
        -------
        Summary

        Raises
        ------
        ValueError
            If the bytes are not a summary, are truncated, or come from another version.
        """
        return Summary._from_handle(_native.NativeSummary.deserialize(bytes(data)))

    def __reduce__(self) -> tuple[Any, ...]:
        return (Summary.deserialize, (self.serialize(),))

    def report(self, all_rows: bool = False) -> str:
        """Every field for people, one a line, in scaled units; then gpufile's paths, each with
        its reasons.

        Parameters
        ----------
        all_rows : bool, optional
            Print every row, the backends the span never reached and the counter groups it
            never touched included.

        Returns
        -------
        str
            Newline-terminated.
        """
        return self._handle.report(all_rows)

    def __str__(self) -> str:
        return self.report()


class SummaryMonitor:
    """Counts every operation of the process while it exists, and reads the totals.

    ::

        monitor = gpufile.SummaryMonitor()
        ...
        print(monitor.get())

    or scoped to a phase::

        with gpufile.SummaryMonitor() as monitor:
            before = monitor.get()
            run_a_phase()
            print(monitor.since(before).busy_bytes_per_sec)

    Nothing is counted while no monitor exists (an operation then costs one atomic load).
    Monitors are independent: any number at once, nested or overlapping; resetting one leaves
    the others alone. A monitor counts every thread's I/O, not a scope's.
    """

    __slots__ = ("_handle",)

    def __init__(self) -> None:
        self._handle = _native.NativeSummaryMonitor()

    def get(self) -> Summary:
        """The totals since construction or the last reset.

        Returns
        -------
        Summary
        """
        return Summary._from_handle(self._handle.get())

    def reset(self) -> None:
        """Zero the totals and restart the span, as if the monitor had just been made."""
        self._handle.reset()

    def since(self, previous: Summary) -> Summary:
        """Totals for the interval since an earlier reading of this monitor.

        Parameters
        ----------
        previous : Summary
            An earlier reading of this monitor's current span.

        Returns
        -------
        Summary
            Spanning ``[previous.end_unix_ns, now)``.

        Raises
        ------
        ValueError
            See :meth:`Summary.since`.
        """
        return Summary._from_handle(self._handle.since(previous._handle))

    def stop(self) -> None:
        """Stop counting (idempotent, one-way): the span ends here, and later readings describe
        it unchanged."""
        self._handle.stop()

    def __enter__(self) -> "SummaryMonitor":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def counters() -> dict[str, int]:
    """The process's counters of work that belongs to no single operation, since it started.

    Returns
    -------
    dict
        ``remote_size_probes``, ``remote_size_probing_ns``, ``http_connections``,
        ``http_dns_ns``, ``http_tcp_ns``, ``http_tls_ns``, ``http_retries``,
        ``http_retry_backoff_ns``.
    """
    return dict(_native.statistics_counters())
