"""gpufile.SummaryMonitor / gpufile.Summary (KvikIO 26.10's statistics) on real files: one
observation per call however many tasks it runs as, and gpufile's path and reason in every row,
from the same record as gpufile.observe()."""

from __future__ import annotations

import json
import pickle
import threading
from http.server import BaseHTTPRequestHandler

import numpy as np
import pytest

import gpufile
from conftest import pattern
from gpufile._http_server import LocalHttpServer, RangeRequestHandler

HOST_REASON = "host buffer: cuFile gains nothing for host memory"


@pytest.fixture
def table(tmp_path):
    """A 4 MiB file of known bytes: (path, data)."""
    data = pattern(4 << 20, 7)
    path = tmp_path / "table.bin"
    data.tofile(path)
    return path, data


def test_a_read_split_into_many_tasks_is_one_operation_with_its_path_and_reason(table):
    path, data = table
    out = np.empty_like(data)
    with gpufile.SummaryMonitor() as monitor, gpufile.CuFile(path) as f:
        assert f.pread(out, task_size=64 << 10).get() == data.nbytes
        s = monitor.get()
    np.testing.assert_array_equal(out, data)
    assert (s.num_ops, s.num_reads, s.bytes_read, s.num_errors) == (1, 1, data.nbytes, 0)
    row = s.by_backend["POSIX"]
    assert (row["num_ops"], row["bytes_transferred"]) == (1, data.nbytes)
    assert (row["path"], row["reason"]) == ("gpufile-posix", HOST_REASON)
    assert s.by_backend["GDS"]["path"] == "" and s.by_backend["GDS"]["num_ops"] == 0
    p = s.by_path["gpufile-posix"]
    assert (p["backend"], p["num_ops"], p["bytes_transferred"]) == ("POSIX", 1, data.nbytes)
    assert p["num_tasks"] == data.nbytes // (64 << 10), "the tasks are the operation's, not ops"
    assert p["reasons"] == {HOST_REASON: 1}
    assert list(s.by_path) == ["gpufile-posix"]
    text = str(s)
    assert "path gpufile-posix" in text and HOST_REASON in text
    assert json.loads(s.to_json())["by_backend"]["POSIX"]["path"] == "gpufile-posix"


def test_read_rows_of_100_000_rows_is_one_operation(table):
    path, data = table
    rng = np.random.default_rng(3)
    rows = rng.integers(0, data.nbytes // 64, 100_000)
    out = np.empty(100_000 * 64, dtype=np.uint8)
    monitor = gpufile.SummaryMonitor()
    with gpufile.CuFile(path) as f:
        assert f.read_rows(out, rows, 64).get() == out.nbytes
    s = monitor.get()
    monitor.stop()
    raw = data.view(np.uint8).reshape(-1, 64)
    np.testing.assert_array_equal(out.reshape(-1, 64), raw[rows])
    assert (s.num_ops, s.bytes_requested, s.bytes_transferred) == (1, out.nbytes, out.nbytes)
    assert s.by_path["gpufile-posix"]["num_ops"] == 1


def test_a_refused_call_is_a_failed_operation_that_says_why(table):
    path, data = table
    with gpufile.SummaryMonitor() as monitor:
        with gpufile.CuFile(path, "r") as f, pytest.raises(RuntimeError):
            f.write(data)
    s = monitor.get()
    assert (s.num_ops, s.num_writes, s.num_errors, s.bytes_transferred) == (1, 1, 1, 0)
    assert s.bytes_requested == data.nbytes
    assert s.by_backend["POSIX"]["num_errors"] == 1
    (reason, n), = s.by_path["gpufile-posix"]["reasons"].items()
    assert n == 1
    assert reason.startswith("refused before any byte moved: ") and "not open for writing" in reason


def test_a_mapping_and_a_write_are_counted_under_their_backends(table, tmp_path):
    path, data = table
    out = np.empty(1 << 20, dtype=np.uint8)
    with gpufile.SummaryMonitor() as monitor:
        with gpufile.Mmap(path) as m:
            assert m.read(out, size=out.nbytes, offset=4096) == out.nbytes
        with gpufile.CuFile(tmp_path / "w.bin", "w") as f:
            assert f.write(out) == out.nbytes
    s = monitor.get()
    np.testing.assert_array_equal(out, data.view(np.uint8)[4096:4096 + out.nbytes])
    assert (tmp_path / "w.bin").read_bytes() == out.tobytes()
    assert s.by_backend["MMAP"]["num_ops"] == 1 and s.by_backend["MMAP"]["path"] == "mmap"
    assert s.by_path["mmap"]["bytes_transferred"] == out.nbytes
    assert s.by_backend["POSIX"]["num_ops"] == 1
    assert (s.num_reads, s.num_writes, s.bytes_written) == (1, 1, out.nbytes)


def test_nothing_before_a_monitor_is_counted_and_observe_agrees_with_it(table):
    path, data = table
    out = np.empty_like(data)
    with gpufile.CuFile(path) as f:
        f.read(out)  # no monitor: not counted anywhere but the process totals
        with gpufile.observe() as obs, gpufile.SummaryMonitor() as monitor:
            for _ in range(3):
                f.read(out)
    s = monitor.get()
    posix = obs.report["gpufile-posix"]
    assert s.num_ops == posix["ops"] == 3
    assert s.bytes_transferred == posix["bytes"] == 3 * data.nbytes
    assert s.by_path["gpufile-posix"]["num_tasks"] == posix["tasks"]


def test_threads_each_call_counted_once(table):
    path, data = table
    monitor = gpufile.SummaryMonitor()
    errors = []

    def reader(seed):
        out = np.empty(1 << 20, dtype=np.uint8)
        try:
            with gpufile.CuFile(path) as f:
                for i in range(5):
                    off = (seed * 5 + i) % 3 << 20
                    f.read(out, file_offset=off)
                    assert out.tobytes() == data.view(np.uint8)[off:off + out.nbytes].tobytes()
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    s = monitor.get()
    monitor.stop()
    assert errors == []
    assert (s.num_ops, s.bytes_transferred) == (20, 20 << 20)
    assert 0 < s.busy_ns <= s.wall_ns
    assert s.busy_ns <= s.total_duration_ns, "overlapping reads are busy once"


def test_a_summary_keeps_its_paths_through_bytes_and_pickle(table):
    path, data = table
    monitor = gpufile.SummaryMonitor()
    with gpufile.CuFile(path) as f:
        f.read(np.empty_like(data))
    s = monitor.get()
    back = pickle.loads(pickle.dumps(s))
    assert back == s and hash(back) == hash(s)
    assert back.by_path == s.by_path and str(back) == str(s)
    with gpufile.CuFile(path) as f:
        f.read(np.empty_like(data))
    interval = monitor.since(back)
    assert interval.num_ops == 1 and interval.by_path["gpufile-posix"]["reasons"] == {HOST_REASON: 1}
    monitor.stop()
    other = gpufile.SummaryMonitor()
    with pytest.raises(ValueError, match="another monitor"):
        other.since(s)
    other.stop()


class FailOnce(RangeRequestHandler):
    """The first HEAD gets 503: one retry, with its back-off. HEADs do not say
    `Accept-Ranges`, so a read first probes byte 0 (a request that is part of the read)."""

    failed = threading.Event()
    log = None  # a file each GET's Range header goes to (the server may run in another process)

    def do_GET(self):
        with open(self.log, "a") as f:
            f.write(f"{self.headers.get('Range')}\n")
        super().do_GET()

    def end_headers(self):
        if self.command == "HEAD":
            BaseHTTPRequestHandler.end_headers(self)
        else:
            super().end_headers()

    def do_HEAD(self):
        if not self.failed.is_set():
            self.failed.set()
            self.send_error(503)
            return
        super().do_HEAD()


def test_a_remote_read_is_one_operation_and_its_probe_connections_and_retry_are_counted(tmp_path):
    data = pattern(300_000, 4)
    data.tofile(tmp_path / "obj")
    log = tmp_path / "ranges.log"
    handler = type("H", (FailOnce,), {"failed": threading.Event(), "log": str(log)})
    with LocalHttpServer(tmp_path, max_lifetime=60, handler=handler) as server:
        with gpufile.observe() as obs, gpufile.SummaryMonitor() as monitor, gpufile.defaults.set(
                {"http_max_attempts": 2, "task_size": 64 << 10}):
            with gpufile.RemoteFile.open_http(f"{server.url}/obj") as f:
                out = np.empty_like(data)
                assert f.pread(out).get() == data.nbytes
            s = monitor.get()
    np.testing.assert_array_equal(out, data)
    ranges = log.read_text().splitlines()
    assert ranges[0] == "bytes=0-0", f"the byte-0 range probe ran first: {ranges}"
    assert obs.report["remote"]["ops"] == 1, "observe() too counts the read, not its probe"
    assert obs.report["gpufile-posix"]["ops"] == 0, "a remote read is not a local POSIX one"
    assert (s.num_ops, s.bytes_read) == (1, data.nbytes), "the read, not its range probe or tasks"
    row = s.by_backend["REMOTE_HTTP"]
    assert (row["num_ops"], row["path"]) == (1, "remote")
    assert s.by_path["remote"]["num_tasks"] >= 2
    c = s.counters
    assert c["remote_size_probes"] == 1 and c["remote_size_probing_ns"] >= 500_000_000
    assert c["http_retries"] == 1 and c["http_retry_backoff_ns"] == 500_000_000
    assert c["http_connections"] >= 1 and c["http_tcp_ns"] > 0 and c["http_tls_ns"] == 0
    assert "http retries         1 retries, 500 ms backoff" in s.report()
    assert gpufile.statistics.counters()["http_retries"] >= 1
