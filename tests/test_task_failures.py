"""Requests whose tasks fail (issue 24, items 2 and 6, on the CPU): every setting is bounded at
`set` and in the environment, so a huge `http_timeout` can no longer panic the workers; a task
that panics anyway fails its own request with `GpufileError` while the workers live on; a write
that fails in several tasks names every failed range and the bytes that landed.

The GPU half (a device read after a panicking task) is in test_reliability_gpu.py.
"""

import errno
import os
import subprocess
import sys

import numpy as np
import pytest

import gpufile
from gpufile import _native, defaults
from gpufile.utils import LocalHttpServer
from conftest import pattern, run_python

MiB = 1 << 20


@pytest.fixture(autouse=True)
def _no_faults_after():
    yield
    _native._inject_faults([])


@pytest.fixture
def src(tmp_path):
    data = pattern(4 * MiB, 24)
    path = tmp_path / "src.bin"
    data.tofile(path)
    return path, data


def multi_task_read(path, data):
    """A read of `path` in 16 tasks over 4 workers: its bytes, or the error."""
    buf = np.zeros_like(data)
    with defaults.set({"num_threads": 4, "task_size": data.nbytes // 16}):
        with gpufile.CuFile(path) as f:
            n = f.pread(buf).get()
    assert n == data.nbytes
    np.testing.assert_array_equal(buf, data)


# --- item 2 (a): every setting is bounded at set -------------------------------------------

@pytest.mark.parametrize("name,value,largest", [
    ("http_timeout", 2**63 - 1, 86400),
    ("http_timeout", 86401, 86400),
    ("bounce_buffer_size", 2**64 - 1, 1 << 30),
    ("bounce_buffer_size", (1 << 30) + 1, 1 << 30),
    ("task_size", 2**70, 2**63 - 1),
    ("gds_threshold", 2**64, 2**63 - 1),
    ("dma_cache_size", 2**64, 2**63 - 1),
    ("num_threads", 1025, 1024),
    ("http_max_attempts", 1001, 1000),
    ("task_size", 2**200, 2**63 - 1),
])
def test_a_value_past_a_settings_bound_is_refused_naming_the_range(name, value, largest):
    before = defaults.report()
    with pytest.raises(OverflowError) as e:
        defaults.set(name, value)
    assert isinstance(e.value, ValueError)
    text = str(e.value)
    for part in (name, str(value), "too large", str(largest)):
        assert part in text, text
    assert "negative" not in text
    assert defaults.report() == before
    # The largest value itself is accepted (and restored on leaving).
    with defaults.set(name, largest):
        assert defaults.get(name) == largest


def test_a_value_past_a_bound_in_the_environment_names_the_variable():
    r = run_python("import gpufile.defaults as d; d.get('http_timeout')",
                   {"KVIKIO_HTTP_TIMEOUT": str(2**63 - 1)})
    assert r.returncode != 0
    for part in ("ValueError", "KVIKIO_HTTP_TIMEOUT", str(2**63 - 1), "too large", "86400"):
        assert part in r.stderr, r.stderr
    assert "PanicException" not in r.stderr


def test_a_huge_http_timeout_is_refused_and_remote_and_local_reads_run(tmp_path, src):
    """The issue's reproducer: `http_timeout = 2**63-1` was accepted, the next remote read panicked
    both workers ("overflow when adding duration to instant") and every later multi-task read
    hung."""
    data = pattern(3 * MiB, 25)
    data.tofile(tmp_path / "r.bin")
    with pytest.raises(OverflowError, match="http_timeout"):
        defaults.set("http_timeout", 2**63 - 1)
    with LocalHttpServer(tmp_path, max_lifetime=60) as server:
        with defaults.set({"num_threads": 2, "task_size": 256 << 10}):
            with gpufile.RemoteFile.open_http(f"{server.url}/r.bin") as f:
                buf = np.zeros_like(data)
                assert f.pread(buf).get() == data.nbytes
    np.testing.assert_array_equal(buf, data)
    multi_task_read(*src)


def test_the_cli_refuses_a_huge_http_timeout_without_a_panic(tmp_path):
    data = os.urandom(MiB)
    (tmp_path / "f.bin").write_bytes(data)
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("KVIKIO_", "GPUFILE_"))}
    clean["KVIKIO_HTTP_TIMEOUT"] = str(2**63 - 1)
    with LocalHttpServer(tmp_path, max_lifetime=60) as server:
        r = subprocess.run([sys.executable, "-m", "gpufile", "read", f"{server.url}/f.bin"],
                           capture_output=True, text=True, env=clean, timeout=120)
    assert r.returncode not in (0, 101), (r.returncode, r.stderr)
    assert "KVIKIO_HTTP_TIMEOUT" in r.stderr and "too large" in r.stderr, r.stderr
    assert "panicked" not in r.stderr and "Traceback" not in r.stderr, r.stderr


# --- item 2 (b): a task that panics fails its request, the workers live on ------------------

def test_a_panicking_task_fails_its_request_and_later_reads_run(src):
    path, data = src
    for _ in range(6):  # more panics than workers: none of them is lost
        _native._inject_faults([("read", 0, "panic", 1)])
        buf = np.zeros_like(data)
        with defaults.set({"num_threads": 4, "task_size": data.nbytes // 16}):
            with gpufile.CuFile(path) as f:
                fut = f.pread(buf)
                try:
                    fut.get()
                except Exception as e:  # a PanicException is not an Exception
                    err = e
        assert type(err) is gpufile.GpufileError, repr(err)
        assert "panicked" in str(err) and "injected panic" in str(err), str(err)
        _native._inject_faults([])
        multi_task_read(path, data)
    # One task on the calling thread (a small blocking read): the same error, not a panic.
    _native._inject_faults([("read", 0, "panic", 1)])
    with gpufile.CuFile(path) as f:
        with pytest.raises(gpufile.GpufileError, match="panicked"):
            f.read(bytearray(4096))
    _native._inject_faults([])
    multi_task_read(path, data)


# --- item 6: a failed write names every failed range -----------------------------------------

def chunks_written(path, data, chunk):
    """Which `chunk`-sized pieces of `path` hold `data`'s bytes (the others must be zeros)."""
    back = np.fromfile(path, dtype=np.uint8)
    back = np.concatenate([back, np.zeros(data.nbytes - back.nbytes, np.uint8)])
    landed = []
    for i in range(0, data.nbytes, chunk):
        if np.array_equal(back[i:i + chunk], data[i:i + chunk]):
            landed.append(i)
        else:
            assert not back[i:i + chunk].any(), f"chunk at {i} holds other bytes"
    return landed


def test_two_tasks_failing_together_are_both_named_with_the_bytes_that_landed(tmp_path):
    """Two concurrent pwrites fail with ENOSPC (as on a full disk): the error named only the first
    range, while the second was never written either."""
    data = pattern(12 * MiB, 26)
    path = tmp_path / "out.bin"
    _native._inject_faults([("write", 0, "enospc_together", 2)])
    with defaults.set({"num_threads": 4, "task_size": MiB}):
        with gpufile.CuFile(path, "w") as f:
            with pytest.raises(OSError) as e:
                f.pwrite(data).get()
    _native._inject_faults([])
    err = e.value
    assert err.errno == errno.ENOSPC and isinstance(err, RuntimeError)
    ranges = err.failed_ranges
    assert len(ranges) == 2 and len(set(ranges)) == 2, ranges
    for offset, length in ranges:
        assert length == MiB and offset % MiB == 0, ranges
        assert f"offset {offset}" in str(err), str(err)
    assert "1 other task(s) of the request failed too" in str(err), str(err)
    landed = chunks_written(path, data, MiB)
    assert err.bytes_done == len(landed) * MiB, (err.bytes_done, landed)
    assert not {o for o, _ in ranges} & set(landed)


def test_a_write_past_the_file_size_limit_names_the_failed_ranges(tmp_path):
    """A real limit (RLIMIT_FSIZE at 8 MiB: EFBIG past it, unprivileged, in a child process):
    every range named as failed lies past the limit, and what landed is what the error's
    `bytes_done` says, whether one task failed or several."""
    path = tmp_path / "out.bin"
    code = f"""
import errno, json, resource, signal, sys
import numpy as np
import gpufile
sys.path.insert(0, {os.path.dirname(__file__)!r})
from conftest import pattern
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (8 << 20, 8 << 20))
data = pattern(12 << 20, 27)
with gpufile.defaults.set({{"num_threads": 4, "task_size": 1 << 20}}):
    with gpufile.CuFile({str(path)!r}, "w") as f:
        try:
            f.pwrite(data).get()
        except OSError as e:
            print(json.dumps([e.errno, str(e), e.failed_ranges, getattr(e, "bytes_done", None)]))
"""
    r = run_python(code)
    assert r.returncode == 0, r.stderr
    import json
    code_, text, ranges, bytes_done = json.loads(r.stdout)
    assert code_ == errno.EFBIG, text
    assert ranges, text
    for offset, length in ranges:
        assert offset >= 8 * MiB and f"offset {offset}" in text, (ranges, text)
    landed = chunks_written(path, pattern(12 * MiB, 27), MiB)
    assert all(o < 8 * MiB for o in landed), landed
    # One failed range or several: the count of what landed is on the exception either way.
    assert bytes_done == len(landed) * MiB, (bytes_done, landed, text)
