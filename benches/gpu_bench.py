"""gpufile vs KvikIO vs naive and plain-POSIX references, one process, same file: every row of the
performance table (issue 14) in one command.

    python benches/gpu_bench.py [--size 4GiB] [--runs 3] [--file PATH] [--json out.json]
                                [--threads 1,4,8,16] [--only GROUPS | --skip GROUPS]
                                [--cold-sweep] [--dry-run]

Row groups (``--only``/``--skip`` take a comma list; the default is every group but cold-sweep):

    ceilings     page cache -> pinned host memory through gpufile (the CPU half of the device path)
    hot          hot file -> GPU at each library's defaults and at --threads; naive
                 np.fromfile + cp.asarray
    experiments  gpufile task sizes; mmap + cuMemHostRegister
    off          compat_mode OFF (through cuFile), both libraries
    host         hot file -> host memory (NumPy)
    cpu          CPU seconds per GB, hot file -> GPU at --cpu-threads (getrusage, all threads)
    files        --files-count files of --files-size, hot -> GPU: open/read/close loop (both
                 libraries) and gpufile.read_batch (when the gpufile under test has it)
    random       random reads -> GPU, --random-threads threads, --random-depth reads in flight,
                 --random-sizes, IOPS; the same seeded offsets for both libraries
    first        first read into fresh memory vs steady state (``gpufile read`` semantics), each in
                 a fresh process: CuPy and NumPy destinations, both libraries
    writes       GPU -> file, --write-size + fsync
    cold         cold file -> GPU at defaults (page cache dropped before each run); dd and a
                 plain-POSIX O_DIRECT reference (no GPU)
    cold-sweep   (long; --cold-sweep or --only) gpufile buffered vs O_DIRECT x threads x task
                 sizes, KvikIO x threads, and the plain-POSIX O_DIRECT reference x threads x block
                 sizes, each reading the first --sweep-bytes of the file cold

Every run starts with two rows about the machine itself: one thread's memory copy (NumPy, 1 GiB)
and the pinned host-to-device copy (CuPy, 1 GiB), so runs on different lent machines of the same
kind can be compared. Every timed read is verified against the file's bytes (a reference copy on the GPU, or in host
memory for host rows), every write by reading the file back; random reads are verified on a
sample (the last read that landed in each in-flight slot); the plain-POSIX references and dd only
count bytes. Each row is the median of --runs runs (after one untimed run for hot rows, so the
numbers are steady state: first-touch costs are reported apart by the "first" group); each
library's settings are applied before a run, untimed (KvikIO rebuilds its thread pool whenever
num_threads is set), and each row's CPU seconds are recorded (getrusage). Cold runs
drop the page cache first: all of it as root (/proc/sys/vm/drop_caches), else the file's pages
(gpufile.drop_file_page_cache); each cold row records how much of the file was still cached.

Without CuPy the GPU rows are skipped (host, plain-POSIX and NumPy rows still run); without
KvikIO its rows are skipped; each skip is a note in the output and the JSON. ``--dry-run`` checks
the arguments and lists the rows it would run, touching no file and no GPU.

The default run (4 GiB file, --runs 3, one H200) is planned at about 5 minutes; the cold sweep
with --sweep-bytes 2GiB at about 4 minutes more, so run it on its own (``--only cold-sweep``).
The output ends with every row, then the issue-14 table (gpufile, KvikIO, the limit).
"""

from __future__ import annotations

import argparse
import collections
import json
import mmap
import os
import re
import resource
import statistics
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Iterable, Sequence

import numpy as np

import gpufile

# The "first" group's children import only the library they time (a gpufile child has no
# KvikIO loaded, as in a `gpufile read` process): the parent names them in this variable.
_IMPORTS = os.environ.get("GPU_BENCH_IMPORTS")
CUPY_ERROR: str | None = None
KVIKIO_ERROR: str | None = None
if _IMPORTS is None or "cupy" in _IMPORTS.split(","):
    try:
        import cupy as cp
    except Exception as e:  # GPU rows are skipped, each with this note
        cp = None
        CUPY_ERROR = f"{type(e).__name__}: {e}"
else:
    cp = None
    CUPY_ERROR = "not imported in this child"
if _IMPORTS is None or "kvikio" in _IMPORTS.split(","):
    try:
        import kvikio
        import kvikio.defaults
    except Exception as e:  # the table then shows gpufile, naive and the references only
        kvikio = None
        KVIKIO_ERROR = f"{type(e).__name__}: {e}"
else:
    kvikio = None
    KVIKIO_ERROR = "not imported in this child"

GROUPS = ("ceilings", "hot", "experiments", "off", "host", "cpu", "files", "random", "first",
          "writes", "cold", "cold-sweep")
DEFAULT_GROUPS = tuple(g for g in GROUPS if g != "cold-sweep")
GROUP_ALIASES = {"write": "writes", "cold_sweep": "cold-sweep", "ceiling": "ceilings"}
PAGE = 4096


# ---------------------------------------------------------------------------------------------
# Helpers that need neither CuPy nor KvikIO (tests/test_bench_helpers.py tests them on CPU)
# ---------------------------------------------------------------------------------------------

def parse_size(text: str) -> int:
    """``"4GiB"``, ``"64k"``, ``"1M"``, ``"4096"`` -> bytes (binary units).

    Raises
    ------
    ValueError
        Not a size, or a negative one.
    """
    units = {"k": 10, "m": 20, "g": 30, "t": 40}
    t = text.strip().lower().removesuffix("ib").removesuffix("b")
    try:
        n = int(t[:-1]) << units[t[-1]] if t and t[-1] in units else int(t)
    except (ValueError, IndexError):
        raise ValueError(f"not a size: {text!r} (examples: 4096, 64KiB, 4MiB, 1GiB)") from None
    if n < 0:
        raise ValueError(f"a size must not be negative: {text!r}")
    return n


def parse_list(text: str, parse: Callable[[str], int] = int, name: str = "list") -> list[int]:
    """``"1,4,16"`` -> ``[1, 4, 16]``; each item parsed by ``parse`` and positive."""
    items = [s for s in text.split(",") if s.strip()]
    if not items:
        raise ValueError(f"{name}: empty list")
    out = []
    for s in items:
        try:
            v = parse(s.strip())
        except ValueError as e:
            raise ValueError(f"{name}: {e}") from None
        if v <= 0:
            raise ValueError(f"{name}: {s.strip()!r} must be positive")
        out.append(v)
    return out


def select_groups(only: str | None, skip: str, cold_sweep: bool) -> list[str]:
    """The row groups to run, in the canonical order of ``GROUPS``.

    Raises
    ------
    ValueError
        An unknown group name (the message lists the known ones).
    """
    def names(text: str) -> set[str]:
        out = set()
        for n in filter(None, (s.strip() for s in text.split(","))):
            n = GROUP_ALIASES.get(n, n)
            if n not in GROUPS:
                raise ValueError(f"unknown row group {n!r}; known: {', '.join(GROUPS)}")
            out.add(n)
        return out

    chosen = names(only) if only is not None else set(DEFAULT_GROUPS)
    if cold_sweep:
        chosen.add("cold-sweep")
    chosen -= names(skip)
    return [g for g in GROUPS if g in chosen]


def random_offsets(file_size: int, size: int, count: int, seed: int,
                   align: int = PAGE) -> list[int]:
    """``count`` offsets, uniform over the file, each a multiple of ``align`` and with
    ``offset + size <= file_size``; the same for the same arguments (seeded).

    Raises
    ------
    ValueError
        ``size`` larger than the file, or a non-positive ``align``/``count``.
    """
    if align <= 0 or count < 0 or size <= 0:
        raise ValueError("align and size must be positive, count not negative")
    if size > file_size:
        raise ValueError(f"reads of {size} bytes do not fit in a file of {file_size} bytes")
    last = (file_size - size) // align
    rng = np.random.default_rng(seed)
    return (rng.integers(0, last + 1, count, dtype=np.int64) * align).tolist()


def pipelined_reads(pread: Callable[[Any, int, int], Any], slots: Sequence[Any],
                    offsets: Iterable[int], size: int) -> int:
    """Issue ``pread(slot, size, offset)`` for each offset, keeping ``len(slots)`` in flight.

    Read ``i`` lands in ``slots[i % depth]``; the slot is reused only after the read that used it
    (``i - depth``, the oldest in flight) has completed. Returns the number of reads.
    """
    depth = len(slots)
    inflight: collections.deque = collections.deque()
    n = 0
    for i, off in enumerate(offsets):
        if len(inflight) == depth:
            got = inflight.popleft().get()
            if got != size:
                raise RuntimeError(f"a read returned {got} bytes, not {size}")
        inflight.append(pread(slots[i % depth], size, off))
        n += 1
    while inflight:
        got = inflight.popleft().get()
        if got != size:
            raise RuntimeError(f"a read returned {got} bytes, not {size}")
    return n


def last_read_per_slot(count: int, depth: int) -> dict[int, int]:
    """``{slot: index of the last read that landed in it}`` after ``pipelined_reads`` of
    ``count`` reads with ``depth`` slots."""
    return {i % depth: i for i in range(max(0, count - depth), count)}


class PosixDirectReader:
    """Plain POSIX reads of a file's first bytes, the disk's reference for the cold rows: no GPU,
    no copy, nothing but the reads.

    ``threads`` Python threads each ``os.preadv`` ``block``-byte pieces (taken in file order from
    a shared counter) into a page-aligned anonymous ``mmap`` buffer of their own, with
    ``O_DIRECT`` unless ``direct`` is False. The buffers are made and faulted in here, once, so
    that ``read()`` times the reads alone. With ``O_DIRECT`` each read asks for a whole number of
    pages (the last may come back short at the end of the file). Use as a context manager, or
    call ``close()``.

    Raises
    ------
    ValueError
        ``block`` not a positive multiple of 4096, or ``threads`` < 1.
    OSError
        The file cannot be opened (``EINVAL`` where the file system refuses ``O_DIRECT``).
    """

    def __init__(self, path: str, threads: int, block: int, *, direct: bool = True) -> None:
        if block <= 0 or block % PAGE:
            raise ValueError(f"block must be a positive multiple of {PAGE}, not {block}")
        if threads < 1:
            raise ValueError("threads must be at least 1")
        self.path, self.threads, self.block, self.direct = path, threads, block, direct
        self.fd = os.open(path, os.O_RDONLY | (os.O_DIRECT if direct else 0))
        self.buffers: list[mmap.mmap] = []
        try:
            for _ in range(threads):
                buf = mmap.mmap(-1, block)
                self.buffers.append(buf)
                for off in range(0, block, PAGE):  # fault the pages in now, not in read()
                    buf[off] = 0
        except BaseException:
            self.close()
            raise

    def read(self, nbytes: int,
             sink: Callable[[int, memoryview], None] | None = None) -> int:
        """Read the first ``nbytes`` of the file; ``sink(offset, data)`` sees each piece.

        Returns
        -------
        int
            Bytes read (``nbytes``).

        Raises
        ------
        ValueError
            ``nbytes`` beyond the end of the file, or the reader is closed.
        OSError
            A read failed; the first error of any thread is raised after all have stopped.
        EOFError
            The file ended early.
        """
        if self.fd < 0:
            raise ValueError("the reader is closed")
        size = os.fstat(self.fd).st_size
        if nbytes > size:
            raise ValueError(f"{self.path} has {size} bytes, not {nbytes}")
        pieces = iter(range(0, nbytes, self.block))
        lock = threading.Lock()
        done = [0] * self.threads
        errors: list[BaseException] = []

        def worker(w: int) -> None:
            try:
                with memoryview(self.buffers[w]) as mv:
                    while not errors:
                        with lock:
                            off = next(pieces, None)
                        if off is None:
                            return
                        want = min(self.block, nbytes - off)
                        ask = -(-want // PAGE) * PAGE if self.direct else want
                        got = 0
                        while got < want:
                            n = os.preadv(self.fd, [mv[got:ask]], off + got)
                            if n == 0:
                                raise EOFError(f"{self.path}: end of file at {off + got}")
                            got += n
                        if sink is not None:
                            sink(off, mv[:want])
                        done[w] += want
            except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
                errors.append(e)

        pool = [threading.Thread(target=worker, args=(w,), daemon=True)
                for w in range(self.threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
        if errors:
            raise errors[0]
        return sum(done)

    def close(self) -> None:
        """Unmap the buffers and close the file; closing twice is harmless."""
        for buf in self.buffers:
            buf.close()
        self.buffers = []
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> "PosixDirectReader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def posix_direct_read(path: str, nbytes: int, threads: int, block: int, *, direct: bool = True,
                      sink: Callable[[int, memoryview], None] | None = None) -> int:
    """One ``PosixDirectReader(path, threads, block, direct=direct).read(nbytes, sink)``."""
    with PosixDirectReader(path, threads, block, direct=direct) as r:
        return r.read(nbytes, sink)


def arrays_equal(a: Any, b: Any, chunk: int = 64 << 20) -> bool:
    """``a == b`` element-wise, compared ``chunk`` elements at a time (no n-byte temporary);
    NumPy or CuPy arrays alike (the array's own module compares)."""
    if a.shape != b.shape:
        return False
    a1, b1 = a.reshape(-1), b.reshape(-1)
    xp = _array_module(a1)
    for off in range(0, a1.size, chunk):
        if not bool(xp.array_equal(a1[off:off + chunk], b1[off:off + chunk])):
            return False
    return True


def equal_to_file(path: str, size: int, get_chunk: Callable[[int, int], np.ndarray],
                  chunk: int = 64 << 20) -> bool:
    """Whether the first ``size`` bytes of ``path`` equal ``get_chunk(offset, n)`` (a host array
    of ``n`` bytes, for example ``buf[offset:offset + n].get()`` of a CuPy array), chunk by
    chunk."""
    tmp = np.empty(min(chunk, max(size, 1)), dtype=np.uint8)
    with open(path, "rb", buffering=0) as f:
        for off in range(0, size, chunk):
            n = min(chunk, size - off)
            view, got = memoryview(tmp)[:n], 0
            while got < n:
                r = f.readinto(view[got:])
                if not r:
                    return False
                got += r
            if not np.array_equal(tmp[:n], np.asarray(get_chunk(off, n)).reshape(-1)):
                return False
    return True


def files_layout(count: int, each: int, size: int) -> list[int]:
    """Where in the big file each of ``count`` small files of ``each`` bytes takes its bytes:
    consecutive, wrapping around inside the big file's whole multiples of ``each``.

    Raises
    ------
    ValueError
        The big file is smaller than one small file.
    """
    whole = (size // each) * each
    if whole == 0:
        raise ValueError(f"the file ({size} bytes) is smaller than one small file ({each})")
    return [(i * each) % whole for i in range(count)]


def cpu_seconds() -> float:
    """User + system CPU seconds of this process so far (all its threads)."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def drop_page_cache(path: str, method: str = "auto") -> str:
    """Drop the page cache before a cold run; returns how (``"system"`` or ``"file"``).

    ``auto``: all of it as root (``/proc/sys/vm/drop_caches``), else the file's pages
    (``gpufile.drop_file_page_cache``). ``file``: the file's pages only. gpufile's page-cache
    DMA registrations are let go first (registered pages cannot be dropped).
    """
    getattr(gpufile, "dma_cache_clear", lambda: None)()
    if method in ("auto", "system"):
        os.sync()
        try:
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("3\n")
            return "system"
        except OSError:
            if method == "system":
                raise
    gpufile.drop_file_page_cache(path)
    return "file"


def cached_fraction(path: str) -> float:
    """Fraction of the file's pages in the page cache (mincore, through gpufile)."""
    cached, total = gpufile.get_page_cache_info(path)
    return cached / total if total else 0.0


def fmt_value(value: float | None, unit: str) -> str:
    """A row's value for the tables: ``"82.1k"`` IOPS, ``"0.327"`` CPU s/GB, ``"50.90"`` GB/s."""
    if value is None:
        return "—"
    if unit == "IOPS":
        return f"{value / 1e3:.1f}k"
    if unit == "CPU s/GB":
        return f"{value:.3f}"
    return f"{value:.2f}"


def _array_module(a: Any) -> Any:
    if cp is not None and isinstance(a, cp.ndarray):
        return cp
    return np


def _sync() -> None:
    if cp is not None:
        cp.cuda.runtime.deviceSynchronize()


def _human(n: int, sep: str = " ") -> str:
    """``4 MiB`` (or ``4MiB`` with ``sep=""``); bytes where no binary unit divides ``n``."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{sep}{unit}"
    return f"{n}{sep}B"


# ---------------------------------------------------------------------------------------------
# The bench: rows, measurement, dry runs, notes
# ---------------------------------------------------------------------------------------------

class Bench:
    """Rows, notes and the measurement loop; with ``dry`` it lists rows and runs nothing."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.dry: bool = args.dry_run
        self.size: int = args.size_bytes
        self.path: str = args.file
        self.rows: list[dict] = []
        self.notes: list[str] = []
        self.group = ""
        self.failures: list[str] = []
        self.drop_method: str | None = None
        self._host_ref: np.ndarray | None = None
        self._ref = None
        self._dev = None
        self.kv_defaults = _kvikio_defaults()
        self.gf_defaults = _gpufile_defaults()

    # availability: in a dry run, rows are listed even where they would be skipped
    @property
    def gpu(self) -> bool:
        return cp is not None or self.dry

    @property
    def kv(self) -> bool:
        return kvikio is not None or self.dry

    def note(self, text: str) -> None:
        self.notes.append(f"{self.group}: {text}" if self.group else text)
        print(f"  note: {text}", flush=True)

    def need_gpu(self) -> bool:
        """Whether the group's GPU rows can run; notes why not."""
        if cp is None:
            self.note(("would be skipped" if self.dry else "skipped") + f": no CuPy ({CUPY_ERROR})")
        return self.gpu

    # shared data, made on first use (never in a dry run)
    @property
    def host_ref(self) -> np.ndarray:
        if self._host_ref is None:
            self._host_ref = np.fromfile(self.path, dtype=np.uint8)
        return self._host_ref

    @property
    def ref(self):
        if self._ref is None:
            self._ref = cp.asarray(self.host_ref)
        return self._ref

    @property
    def dev(self):
        if self._dev is None:
            self._dev = cp.empty(self.size, dtype=cp.uint8)
        return self._dev

    def warm(self, path: str | None = None) -> None:
        """Bring the file into the page cache if any of it is missing (a cold group ran)."""
        if self.dry:
            return
        path = path or self.path
        if cached_fraction(path) < 1.0:
            with open(path, "rb", buffering=0) as f:
                buf = bytearray(16 << 20)
                while f.readinto(buf):
                    pass

    def add_row(self, row: dict) -> None:
        row.setdefault("group", self.group)
        self.rows.append(row)
        extra = f"  ({row['detail']})" if row.get("detail") else ""
        print(f"  {row['kind']:<16} {row['case']:<46} {fmt_value(row['value'], row['unit']):>9} "
              f"{row['unit']}{extra}", flush=True)

    def measure(self, name: str, kind: str, setup: Callable[[], Any], run: Callable[[], Any],
                verify: Callable[[], bool], *, nbytes: int | None = None, cold: bool = False,
                unit: str = "GB/s", ops: int | None = None, warmup: bool | None = None) -> None:
        """Median of --runs timed ``run()`` calls, each after ``setup()`` and followed by
        ``verify()`` (which must say True). Hot rows get one untimed run first (steady state);
        cold rows drop the page cache before each run. CPU seconds (getrusage) are recorded
        around each ``run()``; ``unit`` picks the row's value: GB/s, IOPS (``ops`` per run) or
        CPU s/GB."""
        nbytes = self.size if nbytes is None else nbytes
        if self.dry:
            print(f"  {kind:<16} {name:<46} [{unit}, {_human(nbytes)}"
                  f"{', cold' if cold else ''}]", flush=True)
            self.rows.append({"group": self.group, "case": name, "kind": kind, "unit": unit,
                              "value": None})
            return
        if warmup is None:
            warmup = not cold
        times, cpu, cached = [], [], []
        try:
            for i in range(self.args.runs + (1 if warmup else 0)):
                setup()
                if cold:
                    self.drop_method = drop_page_cache(self.path, self.args.drop_caches)
                    cached.append(cached_fraction(self.path))
                _sync()
                c0 = cpu_seconds()
                t0 = time.perf_counter()
                n = run()
                c1 = cpu_seconds()
                _sync()
                dt = time.perf_counter() - t0
                _check_count(name, n, nbytes)
                if warmup and i == 0:
                    continue  # untimed: caches, pools and pages warm; checked in the timed runs
                if not verify():
                    raise DataMismatch(f"{kind} / {name}: DATA DIFFER from the file")
                times.append(dt)
                cpu.append(c1 - c0)
        except DataMismatch as e:  # the row is void; the run goes on, and exits 1 at the end
            self.failures.append(str(e))
            self.note(str(e))
            return
        except Exception as e:  # a library refusing a case is a note, not the end of the run
            self.note(f"{name} failed: {type(e).__name__}: {e}")
            return
        med = statistics.median(times)
        cpu_per_gb = statistics.median(c / (nbytes / 1e9) for c in cpu) if nbytes else None
        value = {"GB/s": nbytes / med / 1e9, "IOPS": (ops or 0) / med,
                 "CPU s/GB": cpu_per_gb}[unit]
        row = {"case": name, "kind": kind, "unit": unit, "value": value,
               "gb_per_s": nbytes / med / 1e9, "median_s": med, "runs_s": times,
               "cpu_s": cpu, "cpu_s_per_gb": cpu_per_gb, "bytes": nbytes}
        if ops:
            row["ops"] = ops
        if cold:
            row["cached_fraction_after_drop"] = max(cached)
            row["drop"] = self.drop_method
        self.add_row(row)


class DataMismatch(Exception):
    """A row's bytes differ from the file's (or a count is wrong): the row is void."""


def _check_count(name: str, n: Any, nbytes: int) -> None:
    """A run returns None, the bytes it moved, or a list of per-item counts summing to them."""
    if n is None:
        return
    if isinstance(n, (list, tuple)):
        n = sum(n)
    if int(n) != nbytes:
        raise DataMismatch(f"{name}: moved {n} bytes, not {nbytes}")


def _kvikio_defaults() -> dict:
    """KvikIO's own defaults as this process found them (restored for its "defaults" rows)."""
    if kvikio is None:
        return {}
    out = {"num_threads": 1, "compat_mode": kvikio.CompatMode.AUTO}
    for name in out:
        try:
            out[name] = kvikio.defaults.get(name)
        except Exception:  # older KvikIO: the documented defaults above
            pass
    return out


GPUFILE_SETTINGS = ("compat_mode", "num_threads", "task_size", "gds_threshold",
                    "bounce_buffer_size", "auto_direct_io_read", "auto_direct_io_write",
                    "direct_io_uncached", "dma_cache_size")


def _gpufile_defaults() -> dict:
    """gpufile's settings as this process found them (each row starts from these)."""
    out = {}
    for name in GPUFILE_SETTINGS:
        try:
            out[name] = gpufile.defaults.get(name)
        except KeyError:  # an older gpufile without this setting
            pass
    return out


def gpufile_opts(threads: int | None, extra: dict | None = None) -> dict:
    """gpufile settings for a row at ``threads`` threads (POSIX path, as KvikIO's rows)."""
    opts: dict = {"compat_mode": "on"}
    if threads is not None:
        opts["num_threads"] = threads
    opts.update(extra or {})
    return opts


def gf_set(b: Bench, opts: dict) -> None:
    """gpufile's settings for a row: the process's defaults with ``opts`` over them."""
    gpufile.defaults.set({**b.gf_defaults, **opts})


def kv_set(b: Bench, threads: int | None, extra: dict | None = None) -> None:
    """KvikIO settings: its defaults for ``None``, else POSIX (compat ON) at ``threads``."""
    if threads is None:
        kvikio.defaults.set(dict(b.kv_defaults))
    else:
        kvikio.defaults.set({"num_threads": threads, "compat_mode": kvikio.CompatMode.ON,
                             **(extra or {})})


# Settings are applied in a row's setup, not in its timed run: KvikIO rebuilds its thread pool
# on every num_threads change, which is not the cost of a read.
def gf_setup(b: Bench, opts: dict, then: Callable[[], Any] = lambda: None) -> Callable[[], None]:
    return lambda: (gf_set(b, opts), then()) and None


def kv_setup(b: Bench, threads: int | None,
             then: Callable[[], Any] = lambda: None) -> Callable[[], None]:
    return lambda: (kv_set(b, threads), then()) and None


def read_file(mod: Any, path: str, buf: Any, size: int | None = None) -> int:
    """One ``mod.CuFile(path, "r").read(buf, size)`` (gpufile or kvikio), opened and closed."""
    with mod.CuFile(path, "r") as f:
        return f.read(buf, size)


# ---------------------------------------------------------------------------------------------
# Row groups
# ---------------------------------------------------------------------------------------------

def pinned_ceiling(b: Bench) -> None:
    """Pinned host -> device copy of 1 GiB with CuPy: the hot rows' limit."""
    if b.dry or cp is None:
        return
    pinned = cp.cuda.alloc_pinned_memory(1 << 30)
    src = np.frombuffer(pinned, dtype=np.uint8, count=1 << 30)
    d1 = cp.empty(1 << 30, dtype=cp.uint8)
    ts = []
    for _ in range(5):
        _sync()
        t = time.perf_counter()
        d1.set(src)
        _sync()
        ts.append(time.perf_counter() - t)
    v = (1 << 30) / statistics.median(ts) / 1e9
    b.add_row({"case": "pinned H2D copy (1 GiB, cupy)", "kind": "ceiling", "unit": "GB/s",
               "value": v, "gb_per_s": v, "group": "ceiling"})
    del d1, src, pinned


def host_copy_ceiling(b: Bench) -> None:
    """One thread's memory copy (1 GiB, NumPy): says how fast this lent machine's CPU and memory
    are, so runs on different machines of the same kind can be told apart."""
    if b.dry:
        return
    src = np.ones(1 << 30, dtype=np.uint8)
    dst = np.empty_like(src)
    ts = []
    for _ in range(5):
        t = time.perf_counter()
        np.copyto(dst, src)
        ts.append(time.perf_counter() - t)
    v = (1 << 30) / statistics.median(ts) / 1e9
    b.add_row({"case": "host memcpy, 1 thread (1 GiB, numpy)", "kind": "ceiling", "unit": "GB/s",
               "value": v, "gb_per_s": v, "group": "ceiling"})
    del src, dst


def g_ceilings(b: Bench) -> None:
    """The CPU half of the POSIX device path alone: page cache -> pinned host memory."""
    if not b.need_gpu():
        return
    b.warm()
    holder: dict = {}
    if not b.dry:
        holder["pinned"] = cp.cuda.alloc_pinned_memory(b.size)
        holder["host"] = np.frombuffer(holder["pinned"], dtype=np.uint8, count=b.size)
    for t in b.args.thread_list:
        b.measure(f"page cache -> pinned host, gpufile {t} thr", "ceiling",
                  gf_setup(b, gpufile_opts(t)),
                  lambda: read_file(gpufile, b.path, holder["host"]), lambda: True)
    holder.clear()


# The page-cache DMA budget of the "+ page-cache DMA" rows (the setting is off by default).
DMA_CACHE = 32 << 30


def warm_dma(b: Bench) -> None:
    """Reads the file into the GPU until page-cache DMA has registered all of it (the first
    read of a file never registers; a file changed less than a tick ago neither): the steady
    state of data read again and again. At most 10 reads."""
    time.sleep(0.05)
    for _ in range(10):
        if gpufile.dma_cache_registered() >= b.size:
            return
        read_file(gpufile, b.path, b.dev)


def _dev_clear_ok(b: Bench) -> tuple[Callable[[], None], Callable[[], bool]]:
    return (lambda: b.dev.fill(0)), (lambda: bool(cp.array_equal(b.dev, b.ref)))


def g_hot(b: Bench) -> None:
    if not b.need_gpu():
        return
    b.warm()
    clear, ok = _dev_clear_ok(b)
    for t in b.args.thread_list:
        b.measure(f"gpufile {t} thr", "read gpu hot", gf_setup(b, gpufile_opts(t), clear),
                  lambda: read_file(gpufile, b.path, b.dev), ok)
        if b.kv:
            b.measure(f"kvikio {t} thr", "read gpu hot", kv_setup(b, t, clear),
                      lambda: read_file(kvikio, b.path, b.dev), ok)
    b.measure("gpufile defaults", "read gpu hot", gf_setup(b, {}, clear),
              lambda: read_file(gpufile, b.path, b.dev), ok)
    if "dma_cache_size" in b.gf_defaults:
        # Page-cache DMA turned on (it is off by default): data read before (registered), the
        # first read (cache emptied before each run) and the read that registers.
        dma = {"dma_cache_size": DMA_CACHE}
        b.measure("gpufile defaults + page-cache DMA, data read before", "read gpu hot",
                  gf_setup(b, dma, lambda: (warm_dma(b), clear())),
                  lambda: read_file(gpufile, b.path, b.dev), ok)
        b.measure("gpufile defaults + page-cache DMA, first read", "read gpu hot",
                  gf_setup(b, dma, lambda: (gpufile.dma_cache_clear(), clear())),
                  lambda: read_file(gpufile, b.path, b.dev), ok)
        b.measure("gpufile defaults + page-cache DMA, second read (registers)", "read gpu hot",
                  gf_setup(b, dma, lambda: (gpufile.dma_cache_clear(),
                                            read_file(gpufile, b.path, b.dev), clear())),
                  lambda: read_file(gpufile, b.path, b.dev), ok)
        gpufile.dma_cache_clear()
    if b.kv:
        b.measure("kvikio defaults", "read gpu hot", kv_setup(b, None, clear),
                  lambda: read_file(kvikio, b.path, b.dev), ok)
    b.measure("naive np.fromfile + cp.asarray", "read gpu hot", clear,
              lambda: b.dev.set(np.fromfile(b.path, dtype=np.uint8)), ok)


def g_experiments(b: Bench) -> None:
    if not b.need_gpu():
        return
    b.warm()
    clear, ok = _dev_clear_ok(b)
    for t in (1, 16):
        for ts in (16 << 20, 64 << 20):
            b.measure(f"gpufile {t} thr task {ts >> 20}MiB", "exp gpu hot",
                      gf_setup(b, gpufile_opts(t, {"task_size": ts}), clear),
                      lambda: read_file(gpufile, b.path, b.dev), ok)


def g_off(b: Bench) -> None:
    """compat_mode OFF: through cuFile (its own compat path where nvidia-fs is not loaded)."""
    if not b.need_gpu():
        return
    b.warm()
    clear, ok = _dev_clear_ok(b)
    made = None
    if not b.dry:
        # cuFile looks the file system up in the udev database; containers often lack it
        st = os.stat(b.path)
        entry = f"/run/udev/data/b{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
        if not os.path.exists(entry) and os.geteuid() == 0:
            os.makedirs(os.path.dirname(entry), exist_ok=True)
            with open(entry, "w") as f:
                f.write("E:ID_FS_USAGE=filesystem\nE:ID_FS_TYPE=ext4\n")
            made = entry
    try:
        b.measure("gpufile compat_mode OFF", "read gpu hot",
                  gf_setup(b, {"compat_mode": "off"}, clear),
                  lambda: read_file(gpufile, b.path, b.dev), ok)
        if b.kv:
            def kv_off() -> None:
                kvikio.defaults.set({"num_threads": 1, "compat_mode": kvikio.CompatMode.OFF})
                clear()
            b.measure("kvikio compat_mode OFF", "read gpu hot", kv_off,
                      lambda: read_file(kvikio, b.path, b.dev), ok)
    finally:
        if made:
            os.remove(made)


def g_host(b: Bench) -> None:
    b.warm()
    holder: dict = {}
    if not b.dry:
        holder["host"] = np.empty(b.size, dtype=np.uint8)

    def clear() -> None:
        holder["host"][:: 1 << 20] = 0

    def ok() -> bool:
        return arrays_equal(holder["host"], b.host_ref)

    for t in b.args.thread_list:
        b.measure(f"gpufile {t} thr", "read host hot", gf_setup(b, gpufile_opts(t), clear),
                  lambda: read_file(gpufile, b.path, holder["host"]), ok)
        if b.kv:
            b.measure(f"kvikio {t} thr", "read host hot", kv_setup(b, t, clear),
                      lambda: read_file(kvikio, b.path, holder["host"]), ok)
    b.measure("gpufile defaults", "read host hot", gf_setup(b, {}, clear),
              lambda: read_file(gpufile, b.path, holder["host"]), ok)
    b.measure("naive np.fromfile", "read host hot", clear,
              lambda: holder["host"].__setitem__(slice(None), np.fromfile(b.path, np.uint8)), ok)
    holder.clear()


def g_cpu(b: Bench) -> None:
    """CPU seconds (user + system, every thread of this process) per GB moved, hot -> GPU."""
    if not b.need_gpu():
        return
    b.warm()
    t = b.args.cpu_threads
    clear, ok = _dev_clear_ok(b)
    b.measure(f"gpufile {t} thr", "cpu gpu hot", gf_setup(b, gpufile_opts(t), clear),
              lambda: read_file(gpufile, b.path, b.dev), ok, unit="CPU s/GB")
    if b.kv:
        b.measure(f"kvikio {t} thr", "cpu gpu hot", kv_setup(b, t, clear),
                  lambda: read_file(kvikio, b.path, b.dev), ok, unit="CPU s/GB")


def make_file_set(b: Bench) -> tuple[list[str], list[int]]:
    """--files-count small files cut from the big one (made once, then reused)."""
    count, each = b.args.files_count, b.args.files_size_bytes
    offsets = files_layout(count, each, b.size)
    folder = f"{b.path}.files-{count}x{each}-{b.size}"
    paths = [os.path.join(folder, f"{i:05d}.bin") for i in range(count)]
    if b.dry:
        return paths, offsets
    if not all(os.path.exists(p) and os.path.getsize(p) == each for p in paths):
        os.makedirs(folder, exist_ok=True)
        with open(b.path, "rb") as src:
            for p, off in zip(paths, offsets):
                src.seek(off)
                with open(p, "wb") as f:
                    f.write(src.read(each))
    for p in paths:
        b.warm(p)
    return paths, offsets


def g_files(b: Bench) -> None:
    if not b.need_gpu():
        return
    count, each = b.args.files_count, b.args.files_size_bytes
    total = count * each
    paths, offsets = make_file_set(b)
    st: dict = {}
    if not b.dry:
        st["dst"] = cp.empty(total, dtype=cp.uint8)
        st["views"] = [st["dst"][i * each:(i + 1) * each] for i in range(count)]
        st["expect"] = cp.concatenate([b.ref[o:o + each] for o in offsets])

    def clear() -> None:
        st["dst"].fill(0)

    def ok() -> bool:
        return bool(cp.array_equal(st["dst"], st["expect"]))

    def loop(mod: Any) -> Callable[[], int]:
        def run() -> int:
            n = 0
            for p, v in zip(paths, st["views"]):
                with mod.CuFile(p, "r") as f:
                    n += f.read(v)
            return n
        return run

    label = f"{count} x {_human(each)}"
    t = b.args.cpu_threads
    b.measure(f"gpufile loop, defaults ({label})", "files gpu hot", gf_setup(b, {}, clear),
              loop(gpufile), ok, nbytes=total)
    b.measure(f"gpufile loop, {t} thr ({label})", "files gpu hot",
              gf_setup(b, gpufile_opts(t), clear), loop(gpufile), ok, nbytes=total)
    if b.kv:
        b.measure(f"kvikio loop, defaults ({label})", "files gpu hot", kv_setup(b, None, clear),
                  loop(kvikio), ok, nbytes=total)
        b.measure(f"kvikio loop, {t} thr ({label})", "files gpu hot", kv_setup(b, t, clear),
                  loop(kvikio), ok, nbytes=total)
    if not hasattr(gpufile, "read_batch"):
        b.note(f"gpufile.read_batch rows {'would be ' if b.dry else ''}skipped: this gpufile "
               f"has no read_batch")
        if not b.dry:
            return

    def batch(sources: Callable[[], list]) -> Callable[[], Any]:
        def run() -> Any:
            return gpufile.read_batch([(f, v, each, 0)
                                       for f, v in zip(sources(), st["views"])]).get()
        return run

    b.measure(f"gpufile read_batch, paths ({label})", "files gpu hot", gf_setup(b, {}, clear),
              batch(lambda: paths), ok, nbytes=total)
    if "dma_cache_size" in b.gf_defaults:
        dma = {"dma_cache_size": DMA_CACHE}
        b.measure(f"gpufile loop + page-cache DMA ({label})", "files gpu hot",
                  gf_setup(b, dma, clear), loop(gpufile), ok, nbytes=total)
        b.measure(f"gpufile read_batch + page-cache DMA ({label})", "files gpu hot",
                  gf_setup(b, dma, clear), batch(lambda: paths), ok, nbytes=total)
        gpufile.dma_cache_clear()
    if not b.dry:
        st["files"] = [gpufile.CuFile(p) for p in paths]
    try:
        b.measure(f"gpufile read_batch, open CuFiles ({label}; opened untimed)",
                  "files gpu hot", gf_setup(b, {}, clear), batch(lambda: st["files"]), ok,
                  nbytes=total)
    finally:
        for f in st.get("files", []):
            f.close()


def g_random(b: Bench) -> None:
    if not b.need_gpu():
        return
    b.warm()
    a = b.args
    depth, threads, count = a.random_depth, a.random_threads, a.random_reads
    for size in a.random_size_list:
        offsets = random_offsets(b.size, size, count, a.seed)
        st: dict = {}
        if not b.dry:
            st["slots"] = cp.empty((depth, size), dtype=cp.uint8)
            st["views"] = [st["slots"][i] for i in range(depth)]
            sample = last_read_per_slot(count, depth)
            st["expect"] = cp.stack([b.ref[offsets[sample[s]]:offsets[sample[s]] + size]
                                     for s in range(min(depth, count))])

        def clear() -> None:
            st["slots"].fill(0)

        def ok() -> bool:
            return bool(cp.array_equal(st["slots"][:len(st["expect"])], st["expect"]))

        def reads(mod: Any) -> Callable[[], None]:
            def run() -> None:
                with mod.CuFile(b.path, "r") as f:
                    pipelined_reads(f.pread, st["views"], offsets, size)
            return run

        label = f"{_human(size)}, {threads} thr, {depth} in flight"
        b.measure(f"gpufile random {label}", "random gpu hot",
                  gf_setup(b, gpufile_opts(threads), clear), reads(gpufile), ok,
                  nbytes=count * size, unit="IOPS", ops=count)
        if "dma_cache_size" in b.gf_defaults:
            b.measure(f"gpufile random {label}, page-cache DMA", "random gpu hot",
                      gf_setup(b, gpufile_opts(threads, {"dma_cache_size": DMA_CACHE}), clear),
                      reads(gpufile), ok, nbytes=count * size, unit="IOPS", ops=count)
            gpufile.dma_cache_clear()
        if b.kv:
            b.measure(f"kvikio random {label}", "random gpu hot", kv_setup(b, threads, clear),
                      reads(kvikio), ok, nbytes=count * size, unit="IOPS", ops=count)
        st.clear()


def g_first(b: Bench) -> None:
    """First read into fresh memory vs steady state, each in a fresh process (``gpufile read``
    semantics: a whole-file read at the library's defaults into a buffer of the file's size)."""
    b.warm()
    if not b.gpu:
        b.note("CuPy rows skipped: no CuPy")
    for lib in ("gpufile", "kvikio"):
        for mem in ("cupy", "numpy"):
            if (lib == "kvikio" and not b.kv) or (mem == "cupy" and not b.gpu):
                continue
            base = f"{lib}, fresh process, {'CuPy' if mem == 'cupy' else 'NumPy'}"
            cases = (("first read (process start: engine + fresh buffer)", "first_s"),
                     ("read into a second fresh buffer", "fresh_s"),
                     (f"steady state (median of {b.args.runs})", "steady_s"))
            if b.dry:
                for what, _ in cases:
                    b.measure(f"{base}: {what}", "first read", lambda: None, lambda: None,
                              lambda: True)
                continue
            cmd = [sys.executable, os.path.abspath(__file__), "--first-child", f"{lib}:{mem}",
                   "--file", b.path, "--size", str(b.size), "--runs", str(b.args.runs)]
            env = dict(os.environ, GPU_BENCH_IMPORTS=",".join(
                {lib, mem} & {"cupy", "kvikio"}))
            try:
                p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
                res = json.loads(p.stdout.strip().splitlines()[-1]) if p.returncode == 0 else None
            except (subprocess.TimeoutExpired, ValueError, IndexError) as e:
                res, p = None, e
            if not res:
                tail = getattr(p, "stderr", "") or str(p)
                b.note(f"{base} failed: {tail.strip().splitlines()[-1] if tail.strip() else p}")
                continue
            if not res["verified"]:
                b.failures.append(f"{base}: DATA DIFFER from the file")
                b.note(b.failures[-1])
                continue
            for what, key in cases:
                s = statistics.median(res[key]) if isinstance(res[key], list) else res[key]
                b.add_row({"case": f"{base}: {what}", "kind": "first read", "unit": "GB/s",
                           "value": b.size / s / 1e9, "gb_per_s": b.size / s / 1e9,
                           "median_s": s, "runs_s": res[key] if isinstance(res[key], list)
                           else [s], "bytes": b.size, "detail": f"{s:.3f} s"})


def first_child(args: argparse.Namespace) -> None:
    """The "first" group's child: one fresh process, one library, one kind of memory."""
    lib, mem = args.first_child.split(":")
    mod = gpufile if lib == "gpufile" else kvikio
    if mod is None:
        raise SystemExit(f"kvikio: {KVIKIO_ERROR}")
    size, path = args.size_bytes, args.file
    if mem == "cupy":
        import cupy
        cupy.empty(1, dtype=cupy.uint8)  # CUDA context: the process's, not the read's, cost
        cupy.cuda.runtime.deviceSynchronize()

        def fresh() -> Any:
            return cupy.empty(size, dtype=cupy.uint8)

        def chunk(buf: Any) -> Callable[[int, int], np.ndarray]:
            return lambda off, n: buf[off:off + n].get()

        sync = cupy.cuda.runtime.deviceSynchronize
    else:
        def fresh() -> Any:
            return np.empty(size, dtype=np.uint8)

        def chunk(buf: Any) -> Callable[[int, int], np.ndarray]:
            return lambda off, n: buf[off:off + n]

        def sync() -> None:
            pass

    def timed(buf: Any) -> float:
        t = time.perf_counter()
        with mod.CuFile(path, "r") as f:
            n = f.read(buf)
        sync()
        dt = time.perf_counter() - t
        if n != size:
            raise RuntimeError(f"read {n} bytes, not {size}")
        return dt

    buf = fresh()
    first = timed(buf)
    buf2 = fresh()
    second = timed(buf2)
    verified = equal_to_file(path, size, chunk(buf2))
    del buf2
    steady = [timed(buf) for _ in range(args.runs)]
    verified = verified and equal_to_file(path, size, chunk(buf))
    print(json.dumps({"first_s": first, "fresh_s": second, "steady_s": steady,
                      "verified": verified}))


def g_writes(b: Bench) -> None:
    """GPU -> file, --write-size bytes, timed up to fsync (the data is on disk when it stops)."""
    if not b.need_gpu():
        return
    n = min(b.args.write_size_bytes, b.size)
    out = b.path + ".out"
    if not b.dry:
        cp.copyto(b.dev, b.ref)

    def fsync(path: str) -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def written_ok() -> bool:
        back = np.fromfile(out, dtype=np.uint8)
        return back.size == n and arrays_equal(back, b.host_ref[:n])

    def write(mod: Any) -> Callable[[], int]:
        def run() -> int:
            with mod.CuFile(out, "w") as f:
                w = f.write(b.dev, n)
            fsync(out)
            return w
        return run

    tag = f"{_human(n)} + fsync"
    ts = b.args.thread_list
    for t in sorted({ts[0], ts[-1]}):
        b.measure(f"gpufile {t} thr, {tag}", "write gpu", gf_setup(b, gpufile_opts(t), os.sync),
                  write(gpufile), written_ok, nbytes=n, warmup=False)
        if b.kv:
            b.measure(f"kvikio {t} thr, {tag}", "write gpu", kv_setup(b, t, os.sync),
                      write(kvikio), written_ok, nbytes=n, warmup=False)
    b.measure(f"gpufile defaults, {tag}", "write gpu", gf_setup(b, {}, os.sync), write(gpufile),
              written_ok, nbytes=n, warmup=False)
    b.measure(f"gpufile defaults, buffered writes, {tag}", "write gpu",
              gf_setup(b, {"auto_direct_io_write": False}, os.sync), write(gpufile), written_ok,
              nbytes=n, warmup=False)
    if b.kv:
        b.measure(f"kvikio defaults, {tag}", "write gpu", kv_setup(b, None, os.sync),
                  write(kvikio), written_ok, nbytes=n, warmup=False)
    if not b.dry and os.path.exists(out):
        os.remove(out)


def posix_reference(b: Bench, name: str, kind: str, threads: int, block: int,
                    nbytes: int) -> None:
    """A cold row of the plain-POSIX O_DIRECT reader (buffers made before the timed runs)."""
    reader = None
    try:
        if not b.dry:
            reader = PosixDirectReader(b.path, threads, block)
        b.measure(name, kind, lambda: None, lambda: reader.read(nbytes), lambda: True,
                  nbytes=nbytes, cold=True)
    except OSError as e:
        b.note(f"{name} failed: {type(e).__name__}: {e}")
    finally:
        if reader is not None:
            reader.close()


def g_cold(b: Bench) -> None:
    path = b.path
    b.measure("dd iflag=direct bs=16M (to /dev/null)", "read cold", lambda: None,
              lambda: subprocess.run(["dd", f"if={path}", "of=/dev/null", "bs=16M",
                                      "iflag=direct"], check=True, capture_output=True) and None,
              lambda: True, cold=True)
    t_ref = max(b.args.sweep_thread_list)
    posix_reference(b, f"posix O_DIRECT preadv {t_ref} thr 16MiB (no GPU)", "read cold", t_ref,
                    16 << 20, b.size)
    if not b.need_gpu():
        return
    clear, ok = _dev_clear_ok(b)
    b.measure("gpufile defaults", "read cold", gf_setup(b, {}, clear),
              lambda: read_file(gpufile, path, b.dev), ok, cold=True)
    b.measure("gpufile defaults, O_DIRECT reads", "read cold",
              gf_setup(b, {"auto_direct_io_read": True}, clear),
              lambda: read_file(gpufile, path, b.dev), ok, cold=True)
    if "direct_io_uncached" in b.gf_defaults:
        # O_DIRECT only where mincore says no page is cached. The second row reads again without
        # dropping the cache: a direct read fills no page, so it measures what a repeated read
        # of data first read directly costs.
        b.measure("gpufile direct_io_uncached", "read cold",
                  gf_setup(b, {"direct_io_uncached": True}, clear),
                  lambda: read_file(gpufile, path, b.dev), ok, cold=True)
        b.measure("gpufile direct_io_uncached, read again", "read gpu",
                  gf_setup(b, {"direct_io_uncached": True}, clear),
                  lambda: read_file(gpufile, path, b.dev), ok)
    b.measure("gpufile 1 thr (one sequential stream)", "read cold",
              gf_setup(b, {"num_threads": 1}, clear),
              lambda: read_file(gpufile, path, b.dev), ok, cold=True)
    if b.kv:
        b.measure("kvikio defaults", "read cold", kv_setup(b, None, clear),
                  lambda: read_file(kvikio, path, b.dev), ok, cold=True)
        t = b.args.cpu_threads
        b.measure(f"kvikio {t} thr", "read cold", kv_setup(b, t, clear),
                  lambda: read_file(kvikio, path, b.dev), ok, cold=True)


def g_cold_sweep(b: Bench) -> None:
    """Cold strategies: the first --sweep-bytes of the file, page cache dropped before each run."""
    a, path = b.args, b.path
    n = min(a.sweep_bytes_n, b.size)
    tag = _human(n)
    for t in a.sweep_thread_list:
        for blk in a.sweep_task_size_list:
            posix_reference(b, f"posix O_DIRECT preadv {t} thr {_human(blk, '')}, {tag} (no GPU)",
                            "cold sweep", t, blk, n)
    if not b.need_gpu():
        return
    clear = lambda: b.dev[:n].fill(0)  # noqa: E731
    ok = lambda: bool(cp.array_equal(b.dev[:n], b.ref[:n]))  # noqa: E731
    for direct in (False, True):
        how = "O_DIRECT" if direct else "buffered"
        for t in a.sweep_thread_list:
            for ts in a.sweep_task_size_list:
                opts = gpufile_opts(t, {"task_size": ts, "auto_direct_io_read": direct})
                b.measure(f"gpufile {how} {t} thr task {_human(ts, '')}, {tag}", "cold sweep",
                          gf_setup(b, opts, clear), lambda: read_file(gpufile, path, b.dev, n),
                          ok, nbytes=n, cold=True)
    if b.kv:
        for t in a.sweep_thread_list:
            b.measure(f"kvikio {t} thr, {tag}", "cold sweep", kv_setup(b, t, clear),
                      lambda: read_file(kvikio, path, b.dev, n), ok, nbytes=n, cold=True)


GROUP_FUNCS: dict[str, Callable[[Bench], None]] = {
    "ceilings": g_ceilings, "hot": g_hot, "experiments": g_experiments, "off": g_off,
    "host": g_host, "cpu": g_cpu, "files": g_files, "random": g_random, "first": g_first,
    "writes": g_writes, "cold": g_cold, "cold-sweep": g_cold_sweep,
}


# ---------------------------------------------------------------------------------------------
# The issue-14 table
# ---------------------------------------------------------------------------------------------

def summary(rows: list[dict], args: argparse.Namespace) -> list[tuple[str, str, str, str, str]]:
    """``(workload, gpufile, KvikIO, gpufile/KvikIO, limit)`` lines of the issue-14 table, from
    the rows measured (``—`` where a row did not run)."""
    by = {(r["kind"], r["case"]): r for r in rows}

    def val(kind: str, case: str) -> float | None:
        r = by.get((kind, case))
        return r["value"] if r else None

    def f(kind: str, case: str) -> str:
        r = by.get((kind, case))
        return fmt_value(r["value"], r["unit"]) if r else "—"

    def ratio(pairs: list[tuple[float | None, float | None]]) -> str:
        return " / ".join(f"{g / k:.2f}x" if g and k else "—" for g, k in pairs)

    def best(kind: str, prefix: str) -> str:
        rs = [r for r in rows if r["kind"] == kind and r["case"].startswith(prefix)
              and r["value"] is not None]
        if not rs:
            return "—"
        r = max(rs, key=lambda r: r["value"])
        return f"{fmt_value(r['value'], r['unit'])} ({r['case'].removeprefix(prefix).strip()})"

    lines = []
    pinned = f("ceiling", "pinned H2D copy (1 GiB, cupy)")
    h, t16 = "read gpu hot", args.cpu_threads
    lines.append(("hot file→GPU, each library's defaults", f(h, "gpufile defaults"),
                  f"{f(h, 'kvikio defaults')} (defaults) / {f(h, f'kvikio {t16} thr')} (t{t16})",
                  ratio([(val(h, "gpufile defaults"), val(h, "kvikio defaults"))]),
                  f"pinned H2D {pinned}"))
    ts = args.thread_list
    lines.append((f"hot file→GPU, {' / '.join(map(str, ts))} threads",
                  " / ".join(f(h, f"gpufile {t} thr") for t in ts),
                  " / ".join(f(h, f"kvikio {t} thr") for t in ts),
                  ratio([(val(h, f"gpufile {t} thr"), val(h, f"kvikio {t} thr")) for t in ts]),
                  ""))
    c, t_ref = "read cold", max(args.sweep_thread_list)
    lines.append(("cold file→GPU, defaults", f(c, "gpufile defaults"),
                  f"{f(c, 'kvikio defaults')} (defaults) / {f(c, f'kvikio {t16} thr')} (t{t16})",
                  ratio([(val(c, "gpufile defaults"), val(c, "kvikio defaults"))]),
                  f"disk O_DIRECT {t_ref} thr "
                  f"{f(c, f'posix O_DIRECT preadv {t_ref} thr 16MiB (no GPU)')}"
                  f"; dd {f(c, 'dd iflag=direct bs=16M (to /dev/null)')}"))
    if any(r["kind"] == "cold sweep" for r in rows):
        lines.append(("cold sweep, best of each", best("cold sweep", "gpufile"),
                      best("cold sweep", "kvikio"), "",
                      f"posix {best('cold sweep', 'posix O_DIRECT preadv')}"))
    fl = "files gpu hot"
    label = f"{args.files_count} x {_human(args.files_size_bytes)}"
    lines.append((f"{label}, hot → GPU (open, read, close each; defaults / t{t16})",
                  f"{f(fl, f'gpufile loop, defaults ({label})')} / "
                  f"{f(fl, f'gpufile loop, {t16} thr ({label})')}",
                  f"{f(fl, f'kvikio loop, defaults ({label})')} / "
                  f"{f(fl, f'kvikio loop, {t16} thr ({label})')}",
                  ratio([(val(fl, f"gpufile loop, defaults ({label})"),
                          val(fl, f"kvikio loop, defaults ({label})")),
                         (val(fl, f"gpufile loop, {t16} thr ({label})"),
                          val(fl, f"kvikio loop, {t16} thr ({label})"))]),
                  f"pinned H2D {pinned}"))
    lines.append((f"{label}, hot → GPU, gpufile.read_batch (paths / open CuFiles)",
                  f"{f(fl, f'gpufile read_batch, paths ({label})')} / "
                  f"{f(fl, f'gpufile read_batch, open CuFiles ({label}; opened untimed)')}",
                  "", "", f"pinned H2D {pinned}"))
    a = args
    rl = f"{a.random_threads} thr, {a.random_depth} in flight"
    sizes = a.random_size_list
    rk = "random gpu hot"
    lines.append((f"random reads → GPU, {rl}: {' / '.join(_human(s) for s in sizes)} (IOPS)",
                  " / ".join(f(rk, f"gpufile random {_human(s)}, {rl}") for s in sizes),
                  " / ".join(f(rk, f"kvikio random {_human(s)}, {rl}") for s in sizes),
                  ratio([(val(rk, f"gpufile random {_human(s)}, {rl}"),
                          val(rk, f"kvikio random {_human(s)}, {rl}")) for s in sizes]), ""))
    w = "write gpu"
    tag = f"{_human(min(a.write_size_bytes, a.size_bytes))} + fsync"
    lines.append((f"GPU→file writes, {tag}, defaults", f(w, f"gpufile defaults, {tag}"),
                  f(w, f"kvikio defaults, {tag}"),
                  ratio([(val(w, f"gpufile defaults, {tag}"), val(w, f"kvikio defaults, {tag}"))]),
                  "disk"))
    cu = "cpu gpu hot"
    lines.append((f"CPU seconds per GB, hot → GPU, {t16} threads (lower is better)",
                  f(cu, f"gpufile {t16} thr"), f(cu, f"kvikio {t16} thr"),
                  ratio([(val(cu, f"gpufile {t16} thr"), val(cu, f"kvikio {t16} thr"))]), ""))
    fr = "first read"
    for mem in ("CuPy", "NumPy"):
        def three(lib: str) -> str:
            base = f"{lib}, fresh process, {mem}"
            return " / ".join(f(fr, f"{base}: {w}") for w in (
                "first read (process start: engine + fresh buffer)",
                "read into a second fresh buffer", f"steady state (median of {a.runs})"))
        lines.append((f"whole-file read into {mem}: first / fresh buffer / steady (GB/s)",
                      three("gpufile"), three("kvikio"), "", ""))
    return lines


def print_tables(b: Bench) -> list[tuple[str, str, str, str, str]]:
    w = max([len(r["case"]) for r in b.rows] + [40])
    print()
    print(f"{'kind':<16} {'case':<{w}} {'value':>9} unit")
    for r in b.rows:
        print(f"{r['kind']:<16} {r['case']:<{w}} {fmt_value(r['value'], r['unit']):>9} "
              f"{r['unit']}")
    if b.notes:
        print("\nnotes:")
        for n in b.notes:
            print(f"  {n}")
    # lines of groups that did not run are left out (a dry run shows them all); every measured
    # value is printed with a decimal point, no label has one
    lines = [line for line in summary(b.rows, b.args)
             if b.dry or re.search(r"\d\.\d", line[1] + line[2] + line[4])]
    print(f"\nissue 14 table (GB/s unless noted; medians of {b.args.runs} runs, data verified):")
    print("| workload | gpufile | KvikIO | gpufile / KvikIO | limit |")
    print("| --- | --- | --- | --- | --- |")
    for line in lines:
        print("| " + " | ".join(line) + " |")
    return lines


# ---------------------------------------------------------------------------------------------

def make_file(path: str, size: int) -> None:
    if os.path.exists(path) and os.path.getsize(path) == size:
        return
    rng = np.random.default_rng(0)
    chunk = 256 << 20
    with open(path, "wb") as f:
        for off in range(0, size, chunk):
            f.write(rng.integers(0, 256, min(chunk, size - off), dtype=np.uint8).tobytes())


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line, checked: sizes and lists parsed into ``*_bytes``/``*_list`` fields."""
    ap = argparse.ArgumentParser(prog="gpu_bench.py", description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="4GiB", help="file size (default 4GiB)")
    ap.add_argument("--runs", type=int, default=3, help="timed runs per row (median)")
    ap.add_argument("--file", default="/tmp/gpufile-bench.bin")
    ap.add_argument("--threads", default="1,4,8,16", help="thread counts of the hot/host rows")
    ap.add_argument("--only", help=f"comma list of row groups: {', '.join(GROUPS)}")
    ap.add_argument("--skip", default="", help="comma list of row groups to leave out")
    ap.add_argument("--cold-sweep", action="store_true", help="add the (long) cold sweep")
    ap.add_argument("--drop-caches", choices=("auto", "system", "file"), default="auto",
                    help="cold runs: all caches as root (auto falls back to the file's pages)")
    ap.add_argument("--cpu-threads", type=int, default=16,
                    help="threads of the CPU-per-GB, file-set and cold KvikIO rows")
    ap.add_argument("--files-count", type=int, default=256)
    ap.add_argument("--files-size", default="4MiB")
    ap.add_argument("--random-sizes", default="4KiB,64KiB,1MiB")
    ap.add_argument("--random-threads", type=int, default=16)
    ap.add_argument("--random-depth", type=int, default=64, help="reads in flight")
    ap.add_argument("--random-reads", type=int, default=32768, help="reads per run and size")
    ap.add_argument("--seed", type=int, default=0, help="random offsets' seed")
    ap.add_argument("--write-size", default="1GiB")
    ap.add_argument("--sweep-bytes", default="2GiB", help="bytes each cold-sweep run reads")
    ap.add_argument("--sweep-threads", default="1,4,16,32,64")
    ap.add_argument("--sweep-task-sizes", default="4MiB,16MiB,64MiB")
    ap.add_argument("--dry-run", action="store_true",
                    help="check the arguments, list the rows, run nothing")
    ap.add_argument("--json")
    ap.add_argument("--first-child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    try:
        args.size_bytes = parse_size(args.size)
        args.files_size_bytes = parse_size(args.files_size)
        args.write_size_bytes = parse_size(args.write_size)
        args.sweep_bytes_n = parse_size(args.sweep_bytes)
        args.thread_list = parse_list(args.threads, name="--threads")
        args.random_size_list = parse_list(args.random_sizes, parse_size, "--random-sizes")
        args.sweep_thread_list = parse_list(args.sweep_threads, name="--sweep-threads")
        args.sweep_task_size_list = parse_list(args.sweep_task_sizes, parse_size,
                                               "--sweep-task-sizes")
        args.groups = select_groups(args.only, args.skip, args.cold_sweep)
        for name in ("runs", "cpu_threads", "files_count", "random_threads", "random_depth",
                     "random_reads"):
            if getattr(args, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be at least 1")
        for name, opt in (("size_bytes", "--size"), ("files_size_bytes", "--files-size"),
                          ("write_size_bytes", "--write-size"), ("sweep_bytes_n", "--sweep-bytes")):
            if getattr(args, name) == 0:
                raise ValueError(f"{opt} must not be 0")
        if "random" in args.groups and args.size_bytes < max(args.random_size_list):
            raise ValueError("--size is smaller than the largest --random-sizes")
        if "files" in args.groups and args.size_bytes < args.files_size_bytes:
            raise ValueError("--size is smaller than --files-size")
        if any(s % PAGE for s in args.sweep_task_size_list):
            raise ValueError(f"--sweep-task-sizes must be multiples of {PAGE}")
    except ValueError as e:
        ap.error(str(e))
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.first_child:
        first_child(args)
        return 0
    b = Bench(args)
    t_all = time.perf_counter()
    print(f"file {args.file}: {_human(b.size)}; gpufile {gpufile.__version__} "
          f"(default threads {gpufile.defaults.get('num_threads')}, read_batch "
          f"{'yes' if hasattr(gpufile, 'read_batch') else 'no'}); "
          f"kvikio {getattr(kvikio, '__version__', None) or KVIKIO_ERROR}; "
          f"cupy {getattr(cp, '__version__', None) or CUPY_ERROR}", flush=True)
    print(f"groups: {', '.join(args.groups)}{' (dry run: nothing runs)' if b.dry else ''}",
          flush=True)
    if cp is None:
        b.note(f"no CuPy ({CUPY_ERROR}): GPU rows are "
               f"{'listed but would be skipped' if b.dry else 'skipped'}")
    if kvikio is None:
        b.note(f"no KvikIO ({KVIKIO_ERROR}): its rows are "
               f"{'listed but would be skipped' if b.dry else 'skipped'}")
    if not b.dry:
        make_file(args.file, b.size)
        host_copy_ceiling(b)
        pinned_ceiling(b)
    elapsed: dict[str, float] = {}
    for g in args.groups:
        b.group = g
        print(f"[{g}]", flush=True)
        t = time.perf_counter()
        try:
            GROUP_FUNCS[g](b)
        finally:  # every group starts from each library's defaults
            if not b.dry:
                gf_set(b, {})
                if kvikio is not None:
                    kv_set(b, None)
        elapsed[g] = time.perf_counter() - t
        if not b.dry:
            print(f"  ({g}: {elapsed[g]:.0f} s)", flush=True)
    b.group = ""
    lines = print_tables(b)
    total = time.perf_counter() - t_all
    if not b.dry:
        print(f"\ntotal {total:.0f} s; by group: "
              + ", ".join(f"{g} {s:.0f}" for g, s in elapsed.items()))
    if b.failures:
        print(f"\nFAILED: {len(b.failures)} row(s) with wrong data:", *b.failures, sep="\n  ")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"size": b.size, "runs": args.runs, "groups": args.groups,
                       "rows": b.rows, "notes": b.notes, "elapsed_s": elapsed,
                       "total_s": total, "summary": [list(line) for line in lines],
                       "gpufile_version": gpufile.__version__,
                       "kvikio_version": getattr(kvikio, "__version__", None),
                       "kvikio_error": KVIKIO_ERROR, "cupy_error": CUPY_ERROR,
                       "failures": b.failures, "dry_run": b.dry}, f, indent=2)
    return 1 if b.failures else 0


if __name__ == "__main__":
    sys.exit(main())
