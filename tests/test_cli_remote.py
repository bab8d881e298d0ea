"""`gpufile read URL`: remote objects in the CLI, against a real HTTP server on 127.0.0.1."""

import http
import json
import os
import subprocess
import sys

import pytest

from gpufile._http_server import RangeRequestHandler
from gpufile.utils import LocalHttpServer
from test_cli_json import check_object


def cli(*args):
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("KVIKIO_", "GPUFILE_"))}
    return subprocess.run([sys.executable, "-m", "gpufile", *args], capture_output=True,
                          env=clean, timeout=120)


def cli_json(*args, status=0):
    r = cli(*args, "--json")
    assert r.returncode == status, (r.returncode, r.stdout, r.stderr)
    return json.loads(r.stdout), r


class FirstRangeGetFails(RangeRequestHandler):
    """Answers the first ranged GET with 503 (retryable), the rest as a range server."""

    failed = False

    def send_head(self):  # type: ignore[override]
        if self.headers.get("Range") and not type(self).failed:
            type(self).failed = True
            self.send_response(http.HTTPStatus.SERVICE_UNAVAILABLE)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None
        return super().send_head()


@pytest.fixture
def served(tmp_path):
    data = os.urandom((1 << 20) + 7)
    (tmp_path / "f.bin").write_bytes(data)
    with LocalHttpServer(tmp_path, max_lifetime=60) as server:
        yield server.url, data


def test_read_url_into_host_memory_verified(served):
    url, data = served
    out, _ = cli_json("read", f"{url}/f.bin", "--host", "--verify", "--threads", "3",
                      "--task-size", "100KiB")
    check_object(out, "read")
    assert out["bytes"] == len(data)
    assert out["file"] == f"{url}/f.bin"
    assert out["verified"] is True
    assert out["path"]["backend"] == "remote"
    assert out["path"]["reason"]["detail"] == "HTTP"
    remote = out["remote"]
    assert remote["endpoint"] == "HTTP" and remote["url"] == f"{url}/f.bin"
    # 11 ranged GETs of 100 KiB; the size request and --verify's read are not counted.
    assert remote["bytes"] == len(data)
    assert remote["requests"] == 11 and remote["retries"] == 0
    # What ran is the remote path, not a local POSIX read.
    assert out["observed"]["path"] == "remote"
    assert out["observed"]["by_path"]["remote"]["bytes"] == len(data)
    assert out["observed"]["by_path"]["gpufile-posix"]["ops"] == 0


def test_read_url_range_and_text_report(served):
    url, data = served
    r = cli("read", f"{url}/f.bin", "--host", "--offset", "1000", "--size", "5000", "--verify")
    assert r.returncode == 0, r.stderr
    text = r.stdout.decode()
    assert "bytes       5000 " in text
    assert "remote (HTTP)" in text and f"{url}/f.bin" in text
    assert "1 request, 0 retries, 5000 bytes" in text
    assert "verified    bytes match a plain ranged read of the object" in text


def test_read_url_counts_retries(tmp_path):
    (tmp_path / "f.bin").write_bytes(b"x" * 4096)
    with LocalHttpServer(tmp_path, max_lifetime=60, handler=FirstRangeGetFails) as server:
        out, r = cli_json("read", f"{server.url}/f.bin", "--host")
    assert out["remote"]["retries"] == 1 and out["remote"]["requests"] == 2
    assert out["remote"]["bytes"] == 4096
    assert b"Got HTTP code 503" in r.stderr


def test_read_url_not_found_is_a_json_error_with_the_url(served):
    url, _ = served
    out, r = cli_json("read", f"{url}/missing.bin", "--host", status=1)
    check_object(out, "error-output")
    assert out["error"]["type"] == "remote"
    assert out["error"]["path"] == f"{url}/missing.bin"
    assert "404" in out["error"]["message"] and f"{url}/missing.bin" in out["error"]["message"]
    assert b"404" in r.stderr


def test_read_url_never_shows_a_signature(served):
    url, _ = served
    signed = f"{url}/missing.bin?X-Amz-Signature=topsecret&X-Amz-Credential=AKIDKEY"
    out, r = cli_json("read", signed, "--host", status=1)
    assert b"topsecret" not in r.stdout + r.stderr
    assert b"AKIDKEY" not in r.stdout + r.stderr
    assert "/missing.bin" in out["error"]["path"]


def test_read_url_past_the_end_is_refused(served):
    url, data = served
    out, _ = cli_json("read", f"{url}/f.bin", "--host", "--size", str(len(data) + 1), status=1)
    assert out["error"]["type"] == "unexpected-eof"
    assert out["error"]["path"] == f"{url}/f.bin"
    out, _ = cli_json("read", f"{url}/f.bin", "--host", "--offset", str(len(data) + 1), status=1)
    assert out["error"]["type"] == "unexpected-eof"


def test_read_url_never_shows_userinfo_credentials(served):
    url, data = served
    host = url.removeprefix("http://")
    out, r = cli_json("read", f"http://alice:pw-secret@{host}/f.bin", "--host")
    assert out["bytes"] == len(data)
    assert out["file"] == f"http://REDACTED@{host}/f.bin"
    assert out["remote"]["url"] == out["file"]
    out, r = cli_json("read", f"http://alice:pw-secret@{host}/missing.bin", "--host", status=1)
    assert "404" in out["error"]["message"]
    assert out["error"]["path"] == f"http://REDACTED@{host}/missing.bin"
    for run in (r,):
        assert b"pw-secret" not in run.stdout + run.stderr
        assert b"alice" not in run.stdout + run.stderr


@pytest.mark.parametrize("password", ["p#ss", "p?ss", "p/ss", "p@ss", "p%40ss", "p#s?s/s@s"])
def test_read_and_load_never_show_a_password_however_typed(served, password):
    """`#`, `?`, `/` unencoded (the URL names no reachable host: an error), `@` and `%40` (read
    with the credentials): the report, the error and stderr show none of the password."""
    url, data = served
    host = url.removeprefix("http://")
    given = f"http://alice:{password}@{host}"
    runs = [cli("read", f"{given}/f.bin", "--host"),
            cli("read", f"{given}/f.bin", "--host", "--json"),
            cli("load", f"{given}/missing.safetensors", "--host"),
            cli("load", f"{given}/missing.safetensors", "--host", "--json")]
    for r in runs:
        text = (r.stdout + r.stderr).decode(errors="replace")
        for secret in ("alice", password, "ss@", "s@s"):
            assert secret not in text, (secret, text)
    if not any(c in password for c in "#?/"):
        assert runs[0].returncode == 0, runs[0].stderr
        out = json.loads(runs[1].stdout)
        assert out["bytes"] == len(data) and out["file"] == f"http://REDACTED@{host}/f.bin"
    assert json.loads(runs[3].stdout)["error"]["message"]
    assert all(r.returncode != 0 for r in runs[2:])


def test_read_url_from_a_server_ignoring_ranges_says_so_in_the_path(tmp_path):
    data = os.urandom((1 << 20) + 7)
    (tmp_path / "f.bin").write_bytes(data)
    with LocalHttpServer(tmp_path, range_support=False, max_lifetime=60) as server:
        out, _ = cli_json("read", f"{server.url}/f.bin", "--host", "--verify", "--offset", "1000",
                          "--threads", "4", "--task-size", "64KiB")
    assert out["verified"] is True and out["bytes"] == len(data) - 1000
    assert "server ignores Range: one whole-body GET" in out["path"]["reason"]["text"]
    # One GET for the read (the probe of byte 0 and --verify's read are not counted).
    assert out["remote"]["requests"] == 1


def test_a_remote_load_reports_the_remote_path_and_its_endpoint(tmp_path):
    import numpy as np
    from safetensors.numpy import save_file

    tensors = {f"t{i}": np.full((1000,), i, dtype=np.float32) for i in range(3)}
    save_file(tensors, str(tmp_path / "model.safetensors"))
    with LocalHttpServer(tmp_path, max_lifetime=60) as server:
        url = f"{server.url}/model.safetensors"
        out, _ = cli_json("load", url, "--host", "--verify")
        r = cli("load", url, "--host", "--verify")
    check_object(out, "load")
    assert out["verified"] is True and out["tensors"] == 3
    assert out["observed"]["path"] == "remote", out["observed"]
    assert out["observed"]["by_path"]["gpufile-posix"]["ops"] == 0
    assert out["remote"] == {"endpoint": "HTTP", "credentials": None}
    assert r.returncode == 0, r.stderr
    text = r.stdout.decode()
    assert "remote      HTTP\n" in text, text
    assert "observed    remote (remote: " in text, text
    assert "gpufile-posix" not in text, text
