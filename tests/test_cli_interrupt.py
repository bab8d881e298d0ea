"""Ctrl-C in the installed ``gpufile`` command (``python -m gpufile``): ``read`` of a file or an
``s3://`` object with ``--repeat``, and ``load``, stop as ``bench`` does: one line on stderr,
exit status 130, nothing reported of the cut runs, no Python traceback. A real subprocess gets a
real SIGINT while its reads run (a local file's, seen in /proc; a remote one's, held by the
server)."""

import json
import os
import signal
import struct
import subprocess
import sys
import threading
import time
from http.server import ThreadingHTTPServer

import pytest

from conftest import set_s3_env, time_scale
from gpufile._http_server import RangeRequestHandler

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and signals")


def cli_env():
    return {k: v for k, v in os.environ.items() if not k.startswith(("KVIKIO_", "GPUFILE_"))}


def sigint_when(args, ready, what):
    """Runs ``gpufile ARGS``, sends SIGINT once ``ready(proc)`` holds; (rc, stdout, stderr,
    seconds from SIGINT to exit)."""
    proc = subprocess.Popen([sys.executable, "-m", "gpufile", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=cli_env())
    try:
        deadline = time.monotonic() + 60 * time_scale()
        while not ready(proc):
            assert proc.poll() is None, ("ended before Ctrl-C", proc.communicate())
            assert time.monotonic() < deadline, f"never {what}"
            time.sleep(0.02)
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=10 * time_scale())
        except subprocess.TimeoutExpired:
            pytest.fail(f"still {what} {10 * time_scale():g} s after Ctrl-C")
        return proc.returncode, out.decode(), err.decode(), time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def bytes_read(proc):
    """Bytes the process has read so far (read and pread calls of all its threads)."""
    try:
        with open(f"/proc/{proc.pid}/io") as f:
            return int(next(line for line in f if line.startswith("rchar:")).split()[1])
    except (OSError, StopIteration):
        return 0


def assert_one_line_130(rc, out, err, what):
    assert rc == 130, (rc, out, err)
    assert out == "", out  # no report of the runs that were cut
    assert err == f"gpufile: error: interrupted (SIGINT); {what}\n", err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err


def test_ctrl_c_stops_read_repeat_of_a_file(tmp_path):
    """``gpufile read FILE --repeat N``: Ctrl-C once reads run stops the command at once (it
    ran every repeat, printed the report, then a KeyboardInterrupt traceback)."""
    size = 8 << 20
    f = tmp_path / "f.bin"
    f.write_bytes(os.urandom(size))
    rc, out, err, elapsed = sigint_when(
        ["read", str(f), "--host", "--repeat", "100000"],
        lambda p: bytes_read(p) > 4 * size, "reading")
    assert_one_line_130(rc, out, err, "the read was stopped; nothing is reported")
    assert elapsed < 5 * time_scale(), elapsed


def test_ctrl_c_stops_read_repeat_json_with_one_error_object(tmp_path):
    size = 8 << 20
    f = tmp_path / "f.bin"
    f.write_bytes(os.urandom(size))
    rc, out, err, _ = sigint_when(
        ["read", str(f), "--host", "--repeat", "100000", "--json"],
        lambda p: bytes_read(p) > 4 * size, "reading")
    assert rc == 130, (rc, out, err)
    v = json.loads(out)
    assert v["command"] == "read" and v["error"]["type"] == "interrupted", v
    assert "Traceback" not in err


class Stalling(RangeRequestHandler):
    """A range server (path style: /bucket/key under the served folder) that holds every ranged
    GET starting at or past ``stall_from`` after the first ``free`` of them, unanswered until the
    test ends; ``stalled`` is set when one is held."""

    stall_from = 0
    free = 0
    seen = 0
    stalled = threading.Event()
    release = threading.Event()

    def send_head(self):  # type: ignore[override]
        rng = self.headers.get("Range")
        if self.command == "GET" and rng and int(rng.split("=")[1].split("-")[0]) >= \
                type(self).stall_from:
            type(self).seen += 1
            if type(self).seen > type(self).free:
                type(self).stalled.set()
                type(self).release.wait(120)
                self.close_connection = True
                return None
        return super().send_head()


@pytest.fixture
def stalling_s3(tmp_path, monkeypatch):
    """start(stall_from, free) -> the s3:// URL prefix of tmp_path/bkt on a Stalling server."""
    servers = []
    (tmp_path / "bkt").mkdir()

    def start(stall_from, free):
        handler_cls = type("H", (Stalling,), {"stall_from": stall_from, "free": free, "seen": 0,
                                              "stalled": threading.Event(),
                                              "release": threading.Event()})
        handler = lambda *a, **k: handler_cls(*a, directory=str(tmp_path), **k)  # noqa: E731
        httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        httpd.daemon_threads = True
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        servers.append((httpd, handler_cls))
        set_s3_env(monkeypatch, f"http://127.0.0.1:{httpd.server_address[1]}", "AKID", "SECRET")
        return "s3://bkt", handler_cls

    yield start
    for httpd, cls in servers:
        cls.release.set()
        httpd.shutdown()
        httpd.server_close()


def test_ctrl_c_stops_read_repeat_of_an_s3_object(tmp_path, stalling_s3):
    """``gpufile read s3://... --repeat 20``: the third run's request gets no answer; Ctrl-C
    ends the command within seconds, one line, status 130."""
    (tmp_path / "bkt" / "f.bin").write_bytes(os.urandom(1 << 20))
    url, server = stalling_s3(stall_from=0, free=2)
    rc, out, err, elapsed = sigint_when(
        ["read", f"{url}/f.bin", "--host", "--repeat", "20", "--task-size", "1MiB"],
        lambda p: server.stalled.is_set(), "reading")
    assert_one_line_130(rc, out, err, "the read was stopped; nothing is reported")
    assert elapsed < 5 * time_scale(), elapsed


def test_ctrl_c_stops_load_of_an_s3_checkpoint(tmp_path, stalling_s3):
    """``gpufile load s3://...``: the tensors' request gets no answer; Ctrl-C ends the command
    within seconds, one line, status 130."""
    header = json.dumps({"w": {"dtype": "U8", "shape": [1 << 20],
                               "data_offsets": [0, 1 << 20]}}).encode()
    header += b" " * (-len(header) % 8)
    (tmp_path / "bkt" / "model.safetensors").write_bytes(
        struct.pack("<Q", len(header)) + header + os.urandom(1 << 20))
    url, server = stalling_s3(stall_from=8 + len(header), free=0)
    rc, out, err, elapsed = sigint_when(
        ["load", f"{url}/model.safetensors", "--host"],
        lambda p: server.stalled.is_set(), "loading")
    assert_one_line_130(rc, out, err, "the load was stopped; nothing is reported")
    assert elapsed < 5 * time_scale(), elapsed


def test_ctrl_c_that_python_sees_ends_in_one_line_not_a_traceback():
    """A command that does not catch Ctrl-C itself (`config`): Python's handler sees the signal
    and raises once the call returns; the `gpufile` script turns that into the same line and
    status 130 (the signal is sent from inside the call, the way a Ctrl-C lands mid-command)."""
    code = """
import os, signal, sys
import gpufile.__main__ as cli
from gpufile import _native
real = _native.cli_main
def command(argv):
    os.kill(os.getpid(), signal.SIGINT)
    return real(argv)
_native.cli_main = command
sys.exit(cli.main(["config"]))
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=cli_env(), timeout=60)
    assert r.returncode == 130, r
    assert r.stderr == "gpufile: error: interrupted (SIGINT)\n", r.stderr
