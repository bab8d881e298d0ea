"""A remote read's range probe is the engine's (the object decides it when the engine has
planned a read of several tasks): Python, C (libgpufile, called with ctypes) and the CLI ask a
server that has not said whether it honours Range the same requests, and ``task_size`` 0 is
the engine's one refusal, for a remote file as for a local one."""

import ctypes
import json
import os
import subprocess
import sys
from http.server import SimpleHTTPRequestHandler

import numpy as np
import pytest

import gpufile
from gpufile._http_server import LocalHttpServer, RangeRequestHandler
from conftest import pattern
from test_capi_save import _library

GPUFILE_REMOTE_HTTP = 5
NBYTES = 4000


class SilentOnRanges(RangeRequestHandler):
    """Serves ranges, but its HEAD says nothing of them (no ``Accept-Ranges``), so a client
    learns only from a ranged GET; logs each request's method and Range header to ``log``."""

    def __init__(self, *args, log=None, **kw):
        self.log = log
        super().__init__(*args, **kw)

    def end_headers(self):
        SimpleHTTPRequestHandler.end_headers(self)

    def _note(self) -> None:
        with open(self.log, "a") as f:
            f.write(f"{self.command} {self.headers.get('Range')}\n")

    def do_GET(self):
        self._note()
        super().do_GET()

    def do_HEAD(self):
        self._note()
        super().do_HEAD()


@pytest.fixture
def silent(tmp_path):
    """(url of a 4000-byte object, its bytes, a function that returns and clears the log)."""
    data = pattern(NBYTES, 9)
    data.tofile(tmp_path / "a.bin")
    log = tmp_path / "requests.log"
    log.touch()

    def requests() -> list[str]:
        seen = sorted(log.read_text().splitlines())
        log.write_text("")
        return seen

    with LocalHttpServer(tmp_path, max_lifetime=60, handler=SilentOnRanges,
                         handler_options={"log": str(log)}) as server:
        yield f"{server.url}/a.bin", data, requests


def split(task: int) -> list[str]:
    """What a read of the whole object asks where the HEAD said nothing of ranges: the size,
    byte 0 where the read is split, then its tasks."""
    if task >= NBYTES:
        return ["GET bytes=0-3999", "HEAD None"]
    tasks = [f"GET bytes={o}-{min(o + task, NBYTES) - 1}" for o in range(0, NBYTES, task)]
    return sorted(["HEAD None", "GET bytes=0-0", *tasks])


def c_read(url: str, task_size: int) -> bytes:
    """The whole object read through the C API (`gpufile_remote_open`, `_pread`), `task_size`
    as C passes it (0: the setting)."""
    lib = _library()
    remote = ctypes.c_void_p()
    status = lib.gpufile_remote_open(url.encode(), GPUFILE_REMOTE_HTTP, None, ctypes.c_size_t(0),
                                     ctypes.c_int64(-1), ctypes.byref(remote))
    assert status == 0, status
    buf = ctypes.create_string_buffer(NBYTES)
    fut = ctypes.c_void_p()
    status = lib.gpufile_remote_pread(remote, buf, ctypes.c_size_t(NBYTES), ctypes.c_uint64(0),
                                      ctypes.c_size_t(task_size), ctypes.byref(fut))
    assert status == 0, status
    got = ctypes.c_size_t()
    assert lib.gpufile_future_wait(fut, ctypes.byref(got)) == 0
    assert got.value == NBYTES
    lib.gpufile_future_free(fut)
    assert lib.gpufile_remote_close(remote) == 0
    return buf.raw


def test_python_c_and_the_cli_ask_a_silent_server_the_same_requests(silent):
    url, data, requests = silent
    for task in (1000, None):
        with gpufile.defaults.set("task_size", task or gpufile.defaults.get("task_size")):
            with gpufile.RemoteFile.open_http(url) as f:
                buf = np.zeros(NBYTES, dtype=np.uint8)
                assert f.pread(buf).get() == NBYTES
        np.testing.assert_array_equal(buf, data)
        python = requests()
        assert c_read(url, task or 0) == data.tobytes()
        c = requests()
        want = split(task or gpufile.defaults.get("task_size"))
        assert python == c == want, (task, python, c)

    clean = {k: v for k, v in os.environ.items() if not k.startswith(("KVIKIO_", "GPUFILE_"))}
    r = subprocess.run([sys.executable, "-m", "gpufile", "read", url, "--host", "--task-size",
                        "1000", "--json"], capture_output=True, env=clean, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["bytes"] == NBYTES
    assert requests() == split(1000)


def test_task_size_zero_is_the_engine_s_one_refusal_for_remote_and_local_files(silent, tmp_path):
    url, _, requests = silent
    buf = np.zeros(NBYTES, dtype=np.uint8)
    with gpufile.RemoteFile.open_http(url, nbytes=NBYTES) as f:
        with pytest.raises(ValueError) as remote:
            f._handle.pread(buf, task_size=0)  # the binding's own argument
    with gpufile.CuFile(tmp_path / "a.bin", "r") as f:
        with pytest.raises(ValueError) as local:
            f.pread(buf, task_size=0)
    assert str(remote.value) == str(local.value) == "task_size must be at least 1 byte"
    assert requests() == [], "refused before any request"
