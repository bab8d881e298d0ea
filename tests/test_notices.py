"""Path decisions worth knowing (a fallback, say) reach the ``gpufile`` logger once each, from the
calls of every source: ``CuFile``, ``Mmap`` and ``RemoteFile``.

The core says each text once per process and at most a few texts per kind, so every test here
makes a text of its own (it names the test's own file or server).
"""

import gc
import logging
import time

import numpy as np
import pytest

import gpufile
from gpufile import _native
from gpufile._http_server import LocalHttpServer
from conftest import pattern


@pytest.fixture
def no_faults():
    _native._inject_faults([])
    yield
    _native._inject_faults([])


def _said(caplog, *parts):
    return [r for r in caplog.records
            if r.name == "gpufile" and r.levelno == logging.INFO
            and all(p in r.getMessage() for p in parts)]


def test_a_remote_file_logs_that_the_server_ignores_ranges_once(tmp_path, caplog):
    data = pattern((1 << 20) + 7, 3)
    data.tofile(tmp_path / "a")
    with caplog.at_level(logging.INFO, logger="gpufile"), \
            LocalHttpServer(tmp_path, range_support=False, max_lifetime=60) as server, \
            gpufile.defaults.set("task_size", 64 << 10):
        url = f"{server.url}/a"
        with gpufile.RemoteFile.open_http(url) as f:
            for _ in range(2):
                buf = np.zeros(data.nbytes, dtype=np.uint8)
                assert f.read(buf) == data.nbytes
                np.testing.assert_array_equal(buf, data)
            buf = np.zeros(1000, dtype=np.uint8)
            assert f.pread(buf, file_offset=5).get() == 1000
    said = _said(caplog, "the server ignores Range", url)
    assert len(said) == 1, [r.getMessage() for r in caplog.records]


def test_an_mmap_logs_a_failed_read_nobody_waited_for_once(tmp_path, caplog, no_faults):
    data = pattern(1 << 20, 5)
    path = tmp_path / "m.bin"
    data.tofile(path)
    with caplog.at_level(logging.INFO, logger="gpufile"), gpufile.Mmap(path) as m:
        _native._inject_faults([("read", 0, "eio", 1)])
        fut = m.pread(np.empty(data.nbytes, dtype=np.uint8))
        deadline = time.monotonic() + 60
        while not fut.done():  # done() is no wait: nobody has waited for the read
            assert time.monotonic() < deadline, "the read did not end"
            time.sleep(0.01)
        _native._inject_faults([])
        del fut  # failed, never waited for: the core notices it
        gc.collect()
        for _ in range(2):
            buf = np.empty(data.nbytes, dtype=np.uint8)
            assert m.read(buf) == data.nbytes
            np.testing.assert_array_equal(buf, data)
    said = _said(caplog, "nobody waited for failed", str(path))
    assert len(said) == 1, [r.getMessage() for r in caplog.records]
