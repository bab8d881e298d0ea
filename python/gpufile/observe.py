"""Which path really ran: ``gpufile.observe()`` and ``gpufile.stats()``."""

from __future__ import annotations

from typing import Any

from . import _native


class Report:
    """Requests by path over a span, with cuFile's own counters for the same span.

    ``paths``: ``{"gpufile-posix": {...}, "cufile": {...}}``, each with ops (requests), tasks,
    bytes, seconds (busy, summed over requests), gb_per_s and errors. ``cufile_path``:
    "cufile-nvfs", "cufile-compat" (cuFile's POSIX path) or None, from ``cufile_stats``, which
    holds cuFile's counters (n_reads, nvfs_reads, posix_reads, ... as gds_stats shows them), or
    None with ``cufile_stats_note`` saying why.
    """

    def __init__(self, data: dict[str, Any]) -> None:
        self._data = data
        self.paths = {k: data[k] for k in ("gpufile-posix", "cufile")}
        self.cufile_path: str | None = data["cufile_path"]
        self.cufile_stats: dict[str, int] | None = data["cufile_stats"]
        self.cufile_stats_note: str | None = data["cufile_stats_note"]

    def as_dict(self) -> dict[str, Any]:
        return dict(self._data)

    def __getitem__(self, path: str) -> dict[str, Any]:
        return self.paths[path]

    def __str__(self) -> str:
        lines = [f"{'path':<15} {'ops':>6} {'tasks':>7} {'bytes':>14} {'seconds':>9} "
                 f"{'GB/s':>7} {'errors':>6}"]
        for name, p in self.paths.items():
            if not p["ops"]:
                continue
            label = self.cufile_path or name if name == "cufile" else name
            lines.append(f"{label:<15} {p['ops']:>6} {p['tasks']:>7} {p['bytes']:>14} "
                         f"{p['seconds']:>9.4f} {p['gb_per_s']:>7.2f} {p['errors']:>6}")
        s = self.cufile_stats
        if s is not None:
            lines.append(f"cuFile reads: n={s['n_reads']} nvfs={s['nvfs_reads']} "
                         f"posix={s['posix_reads']}; writes: n={s['n_writes']} "
                         f"nvfs={s['nvfs_writes']} posix={s['posix_writes']}")
        elif self.paths["cufile"]["ops"]:
            lines.append(f"cuFile counters unavailable: {self.cufile_stats_note}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"Report({self._data!r})"


class observe:  # noqa: N801 - used like a function: `with gpufile.observe() as r:`
    """Context manager: ``with gpufile.observe() as obs: ...`` then ``obs.report``.

    While it is open, cuFile's statistics are on (level 3), so the report says how many cuFile
    operations went through nvidia-fs and how many through cuFile's compat path.
    """

    def __init__(self) -> None:
        self._obs: Any = None
        self.report: Report | None = None

    def __enter__(self) -> "observe":
        self._obs = _native.observe_begin()
        return self

    def __exit__(self, *exc: object) -> None:
        self.report = Report(_native.observe_end(self._obs))

    def __str__(self) -> str:
        return str(self.report) if self.report else "<observation in progress>"


def stats() -> Report:
    """Totals since the process started."""
    return Report(_native.stats())


class _Text:
    """A report with a JSON-like ``as_dict()`` and a text rendering (``str()``)."""

    def __init__(self, data: dict[str, Any], text: str) -> None:
        self._data = data
        self._text = text

    def as_dict(self) -> dict[str, Any]:
        return dict(self._data)

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __str__(self) -> str:
        return self._text

    def __repr__(self) -> str:
        return self._text


def check(path: Any = None) -> _Text:
    """What this machine offers for GPU file I/O (libraries, GPUs, nvidia-fs, udev, IOMMU,
    cufile.json, and for ``path`` its file system, O_DIRECT and cuFile registration), and the path
    each compat_mode would take. ``str()`` for people, ``as_dict()`` for programs."""
    import os
    data, text = _native.check(None if path is None else os.fspath(path))
    return _Text(data, text)


def explain(size: int, *, file_offset: int = 0, device: bool = True,
            task_size: int | None = None, num_threads: int | None = None,
            compat_mode: Any = None, gds_threshold: int | None = None, cufile: str = "probe",
            cufile_json: Any = None, registered: bool = False, file: Any = None,
            run: bool = False) -> _Text:
    """How a read of ``size`` bytes will be split and which path each piece takes, from the
    planner that executes reads, with the work units cuFile makes of each request (from
    cufile.json). ``cufile``: "probe" this machine, or assume "nvfs", "compat" or "none".
    With ``file`` and ``run=True`` the read is performed and observed too."""
    import os
    data, text = _native.explain(
        size, file_offset, device, task_size, num_threads,
        None if compat_mode is None else (compat_mode if isinstance(compat_mode, str)
                                          else int(compat_mode)),
        gds_threshold, cufile, None if cufile_json is None else os.fspath(cufile_json),
        registered, None if file is None else os.fspath(file), run)
    return _Text(data, text)
