"""Which path really ran: ``gpufile.observe()``, ``gpufile.stats()``, ``check()`` and ``explain()``."""

from __future__ import annotations

from typing import Any

from . import _native


class Report:
    """Requests by path over a span, with cuFile's own counters for the same span.

    ``str(report)`` is a table for people; ``as_dict()`` the same data for programs;
    ``report["gpufile-posix"]`` one path's counters.

    Attributes
    ----------
    paths : dict
        ``{"gpufile-posix": {...}, "cufile": {...}, "remote": {...}}`` (``remote``: requests on
        remote objects, HTTP, S3, GCS or WebHDFS, whose bytes crossed the network), each with
        ``ops`` (requests),
        ``tasks``, ``bytes``, ``seconds`` (busy time, summed over requests), ``gb_per_s``
        (decimal GB/s), ``errors`` and ``dma_bytes`` (of ``bytes``, those the GPU copied
        straight from registered page cache, with no bounce buffer: see ``dma_cache_size``).
    cufile_path : str or None
        ``"cufile-nvfs"`` (GPUDirect Storage's accelerated path), ``"cufile-compat"``
        (cuFile's own POSIX path), or None where cuFile did nothing or its counters are
        unavailable.
    cufile_stats : dict or None
        cuFile's counters over the span (``n_reads``, ``nvfs_reads``, ``posix_reads``,
        ``n_writes``, ... as ``gds_stats`` shows them), or None.
    cufile_stats_note : str or None
        Why ``cufile_stats`` is None.
    """

    def __init__(self, data: dict[str, Any]) -> None:
        self._data = data
        self.paths = {k: data[k] for k in ("gpufile-posix", "cufile", "remote")}
        self.cufile_path: str | None = data["cufile_path"]
        self.cufile_stats: dict[str, int] | None = data["cufile_stats"]
        self.cufile_stats_note: str | None = data["cufile_stats_note"]

    def as_dict(self) -> dict[str, Any]:
        """The report as plain data.

        Returns
        -------
        dict
        """
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
        posix = self.paths["gpufile-posix"]
        if posix.get("dma_bytes"):
            share = 100.0 * posix["dma_bytes"] / max(posix["bytes"], 1)
            lines.append(f"gpufile-posix: {posix['dma_bytes']} bytes ({share:.0f} %) by DMA from "
                         "registered page cache (no bounce copy)")
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
    """Observe the requests of a span: ``with gpufile.observe() as obs: ...`` then ``obs.report``.

    While it is open, cuFile's statistics are on (level 3), so the report says how many cuFile
    operations went through nvidia-fs and how many through cuFile's compat path, read
    in-process through cuFile's statistics API (no ``gds_stats`` needed).

    Attributes
    ----------
    report : Report or None
        Set on exit; None while the span is open.

    Examples
    --------
    >>> with gpufile.observe() as obs, gpufile.CuFile("data.bin") as f:   # doctest: +SKIP
    ...     f.read(buf)
    >>> print(obs.report)                                                   # doctest: +SKIP
    path               ops   tasks          bytes   seconds    GB/s errors
    gpufile-posix        1     256     1073741824    0.0214   50.10      0
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
    """Totals by path since the process started.

    Returns
    -------
    Report
    """
    return Report(_native.stats())


class _Text:
    """A report with a JSON-like ``as_dict()`` and a text rendering (``str()``)."""

    def __init__(self, data: dict[str, Any], text: str) -> None:
        self._data = data
        self._text = text

    def as_dict(self) -> dict[str, Any]:
        """The report as plain data: the same object as the CLI's ``--json``.

        Its shape, with ``schema_version`` and ``command``, is documented in the JSON output
        page of the documentation (docs/json.md): named fields, sizes in bytes, the path as
        ``{"backend", "reason": {"kind", "detail", "text"}}``.

        Returns
        -------
        dict
        """
        return dict(self._data)

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __str__(self) -> str:
        return self._text

    def __repr__(self) -> str:
        return self._text


def check(path: Any = None) -> _Text:
    """What this machine offers for GPU file I/O, and the path each compat_mode would take.

    The same report as ``gpufile check``: libraries, GPUs, nvidia-fs, udev, IOMMU, WSL,
    cufile.json, and for ``path`` its file system, O_DIRECT and cuFile registration.

    Parameters
    ----------
    path : str or os.PathLike, optional
        A file to check too.

    Returns
    -------
    report
        ``str()`` for people, ``as_dict()`` for programs (``gpufile check --json``: ``gpus``,
        ``libcufile``, ``cufile_json``, ``file``, ``verdicts`` = ``[{"compat_mode", "path",
        "error"}]``, ...).

    Examples
    --------
    >>> print(gpufile.check("data.bin"))                          # doctest: +SKIP
    >>> gpufile.check()["verdicts"][0]["path"]["backend"]         # doctest: +SKIP
    'gpufile-posix'
    """
    import os
    data, text = _native.check(None if path is None else os.fspath(path))
    return _Text(data, text)


def explain(size: int, *, file_offset: int = 0, device: bool | None = None,
            task_size: int | None = None, num_threads: int | None = None,
            compat_mode: Any = None, gds_threshold: int | None = None, cufile: str = "probe",
            cufile_json: Any = None, registered: bool = False, file: Any = None,
            run: bool = False) -> _Text:
    """How a read of ``size`` bytes will be split, and which path each piece takes.

    The answer comes from the planner that executes reads, with the work units cuFile makes of
    each request (from cufile.json). The same report as ``gpufile explain``.

    Parameters
    ----------
    size : int
        Bytes to read.
    file_offset : int, optional
        Where the read starts.
    device : bool, optional
        Into device memory (True) or host memory (False). Default: GPU 0 where CUDA has a
        device, else host memory (with a note saying why), with or without ``run``, as
        ``gpufile explain``; ``device=True`` plans for another machine's GPU.
    task_size, num_threads, gds_threshold : int, optional
        Override the settings of the same name for this prediction.
    compat_mode : CompatMode or str, optional
        Override ``compat_mode`` (``"on"``, ``"off"``, ``"auto"``).
    cufile : str, optional
        ``"probe"`` this machine (the default), or assume ``"nvfs"``, ``"compat"`` or
        ``"none"``: predict for another machine.
    cufile_json : str or os.PathLike, optional
        The cufile.json to read instead of ``CUFILE_ENV_PATH_JSON`` or ``/etc/cufile.json``;
        one that does not exist raises ``FileNotFoundError``, one that is not valid cufile.json
        ``ValueError`` (never cuFile's defaults in its place).
    registered : bool, optional
        Whether the buffer would be registered with cuFile (``gpufile.memory_register()``).
    file : str or os.PathLike, optional
        The file to read with ``run=True``.
    run : bool, optional
        Perform the read of ``file`` and report prediction and observation side by side.

    Returns
    -------
    report
        ``str()`` for people, ``as_dict()`` for programs (``gpufile explain --json``:
        ``prediction`` with ``request``, ``settings``, ``path``/``error``, ``tasks`` =
        ``{"count", "runs": [{"count", "bytes"}]}``, ``cufile``; ``observed`` with ``run``).

    Raises
    ------
    ValueError
        Bad sizes or mode names.

    Examples
    --------
    >>> print(gpufile.explain(1 << 30, compat_mode="off", cufile="compat"))   # doctest: +SKIP
    """
    import os
    data, text = _native.explain(
        size, file_offset, device, task_size, num_threads,
        None if compat_mode is None else (compat_mode if isinstance(compat_mode, str)
                                          else int(compat_mode)),
        gds_threshold, cufile, None if cufile_json is None else os.fspath(cufile_json),
        registered, None if file is None else os.fspath(file), run)
    return _Text(data, text)
