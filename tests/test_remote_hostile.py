"""RemoteFile against hostile servers on 127.0.0.1: redirects that would carry credentials to
another host or downgrade https to http, encoded bodies, wrong Content-Range headers, URLs with
credentials in their userinfo, and Ctrl-C while a server answers 503 slowly."""

import os
import signal
import ssl
import subprocess
import sys
import textwrap
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

import gpufile
from conftest import pattern, time_scale
from test_remote_tls import CA_VARS, CRYPTOGRAPHY, make_ca, make_leaf, pem

DATA = pattern(10_007, 21)
TOKEN = "SESSION-TOKEN-never-elsewhere"


class Recorder(BaseHTTPRequestHandler):
    """Serves DATA (ranges honoured) or, with `redirect_to`, answers every request with 307 to
    that base URL plus the path; records each request's headers in `log`."""

    protocol_version = "HTTP/1.1"
    log: list = []
    redirect_to = None
    extra_headers: dict = {}
    content_range = None  # a format string of start, end, total, to lie with

    def log_message(self, format, *args):  # noqa: A002
        pass

    def _answer(self, body: bool) -> None:
        type(self).log.append({k.lower(): v for k, v in self.headers.items()})
        if self.redirect_to is not None:
            self.send_response(307)
            self.send_header("Location", self.redirect_to + self.path)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        rng = self.headers.get("Range")
        if rng is None:
            start, end, status = 0, len(DATA) - 1, 200
        else:
            a, b = rng.removeprefix("bytes=").split("-")
            start, end, status = int(a), int(b), 206
        payload = DATA[start:end + 1].tobytes()
        self.send_response(status)
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("Accept-Ranges", "bytes")
        if status == 206:
            cr = self.content_range or "bytes {0}-{1}/{2}"
            self.send_header("Content-Range", cr.format(start, end, len(DATA)))
        for k, v in self.extra_headers.items():
            self.send_header(k, v)
        self.end_headers()
        if body:
            self.wfile.write(payload)

    def do_GET(self):
        self._answer(True)

    def do_HEAD(self):
        self._answer(False)


def serve(handler, tls_context=None):
    """A server of `handler` on 127.0.0.1 (https with `tls_context`): (httpd, port)."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    if tls_context is not None:
        httpd.socket = tls_context.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, httpd.server_address[1]


def handler(**attrs):
    """A fresh Recorder class (its own log) with `attrs`."""
    return type("R", (Recorder,), {"log": [], **attrs})


@pytest.fixture
def servers():
    started = []

    def start(h, tls_context=None):
        httpd, port = serve(h, tls_context)
        started.append(httpd)
        return port

    yield start
    for httpd in started:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def tls_context(tmp_path, monkeypatch):
    """A server TLS context for 127.0.0.1 whose CA this process trusts (SSL_CERT_FILE)."""
    if not CRYPTOGRAPHY:
        pytest.skip("cryptography is not installed (the TLS test makes its certificates with it)")
    from cryptography.hazmat.primitives import serialization
    for var in CA_VARS:
        monkeypatch.delenv(var, raising=False)
    ca_cert, ca_key = make_ca("gpufile hostile test CA")
    leaf, leaf_key = make_leaf(ca_cert, ca_key)
    chain, key = tmp_path / "server.pem", tmp_path / "server.key"
    chain.write_bytes(pem(leaf) + pem(ca_cert))
    key.write_bytes(leaf_key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    (tmp_path / "ca.pem").write_bytes(pem(ca_cert))
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "ca.pem"))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(chain, key)
    return ctx


def s3_options(endpoint):
    return dict(aws_region_name="us-east-1", aws_access_key_id="AKIDTEST",
                aws_secret_access_key="secret-key", aws_endpoint_url=endpoint,
                aws_session_token=TOKEN)


# ---------------------------------------------------------------- redirects


@pytest.mark.parametrize("nbytes", [None, len(DATA)], ids=["head", "get"])
def test_signed_request_is_not_redirected_to_another_host(servers, nbytes):
    second = handler()
    port_b = servers(second)
    first = handler(redirect_to=f"http://localhost:{port_b}")
    port_a = servers(first)
    with pytest.raises(RuntimeError) as e:
        with gpufile.RemoteFile.open_s3("bkt", "key", nbytes=nbytes,
                                        **s3_options(f"http://127.0.0.1:{port_a}")) as f:
            f.read(bytearray(100))
    assert e.match("a signed request follows no redirect")
    assert e.match(f"localhost:{port_b}/bkt/key")
    assert TOKEN not in str(e.value)
    assert first.log and first.log[0]["x-amz-security-token"] == TOKEN
    assert second.log == [], "the redirect was followed"


def test_https_to_http_redirect_is_refused(servers, tls_context):
    plain = handler()
    port_b = servers(plain)
    secure = handler(redirect_to=f"http://127.0.0.1:{port_b}")
    port_a = servers(secure, tls_context)
    with pytest.raises(RuntimeError) as e:
        gpufile.RemoteFile.open_http(f"https://127.0.0.1:{port_a}/a.bin")
    assert e.match(r"a redirect from https to plain http \(http://127\.0\.0\.1:\d+/a\.bin\), refused")
    with gpufile.RemoteFile.open_http(f"https://127.0.0.1:{port_a}/a.bin", nbytes=len(DATA)) as f:
        buf = np.zeros(100, dtype=np.uint8)
        with pytest.raises(RuntimeError, match="from https to plain http"):
            f.read(buf)
        assert (buf == 0).all()
    # Signed over https: refused too, and the token never reaches the plain-HTTP server.
    with pytest.raises(RuntimeError, match="a signed request follows no redirect"):
        gpufile.RemoteFile.open_s3("bkt", "key", **s3_options(f"https://127.0.0.1:{port_a}"))
    assert len(secure.log) == 3
    assert plain.log == []


def test_unsigned_redirect_to_another_host_is_followed(servers):
    second = handler()
    port_b = servers(second)
    first = handler(redirect_to=f"http://localhost:{port_b}")
    port_a = servers(first)
    with gpufile.defaults.set({"num_threads": 3, "task_size": 1000}):
        with gpufile.RemoteFile.open_http(f"http://127.0.0.1:{port_a}/a.bin") as f:
            buf = np.zeros(len(DATA), dtype=np.uint8)
            assert f.read(buf) == len(DATA)
    np.testing.assert_array_equal(buf, DATA)
    assert len(first.log) == len(second.log) == 1 + 11


# ---------------------------------------------------------------- bodies and headers


def test_encoded_body_is_refused_and_identity_asked(servers):
    gzip = handler(extra_headers={"Content-Encoding": "gzip"})
    port = servers(gzip)
    with gpufile.RemoteFile.open_http(f"http://127.0.0.1:{port}/a.bin") as f:
        buf = np.zeros(100, dtype=np.uint8)
        with pytest.raises(RuntimeError) as e:
            f.read(buf, file_offset=10)
    assert e.match("Content-Encoding: gzip, not the stored bytes")
    assert all(h.get("accept-encoding") == "identity" for h in gzip.log), gzip.log


@pytest.mark.parametrize("lie", ["bytes {0}-{2}/{2}", "bytes {0}-{1}/99999", "bytes {1}-{1}/{2}",
                                 "bytes {0}-{1}", "bytes {0}-{1}/*x"])
def test_content_range_start_end_and_total_are_checked(servers, lie):
    liar = handler(content_range=lie)
    port = servers(liar)
    with gpufile.RemoteFile.open_http(f"http://127.0.0.1:{port}/a.bin") as f:
        buf = np.zeros(100, dtype=np.uint8)
        with pytest.raises(RuntimeError, match='not "bytes 10-109/10007"'):
            f.read(buf, file_offset=10)


def test_content_range_with_unknown_total_is_accepted(servers):
    port = servers(handler(content_range="bytes {0}-{1}/*"))
    with gpufile.RemoteFile.open_http(f"http://127.0.0.1:{port}/a.bin") as f:
        buf = np.zeros(100, dtype=np.uint8)
        assert f.read(buf, file_offset=10) == 100
    np.testing.assert_array_equal(buf, DATA[10:110])


def test_userinfo_credentials_are_redacted(servers):
    port = servers(handler())
    url = f"http://alice:pw-secret@127.0.0.1:{port}/a.bin"
    with gpufile.RemoteFile.open_http(url) as f:
        assert str(f) == f"http://REDACTED@127.0.0.1:{port}/a.bin"
        assert "pw-secret" not in repr(f) and "alice" not in repr(f)
        with pytest.raises(ValueError) as e:
            f.read(bytearray(10), file_offset=len(DATA))
        assert "pw-secret" not in str(e.value) and "REDACTED@" in str(e.value)
    bad = handler(extra_headers={"Content-Encoding": "br"})
    port = servers(bad)
    with gpufile.RemoteFile.open_http(f"http://alice:pw-secret@127.0.0.1:{port}/a.bin") as f:
        with pytest.raises(RuntimeError) as e:
            f.read(bytearray(10))
    assert "pw-secret" not in str(e.value) and "REDACTED@" in str(e.value)
    with pytest.raises(ValueError, match="Unsupported protocol") as e:
        gpufile.RemoteFile.open_s3_url("ftp://alice:pw-secret@h/b/k")
    assert "pw-secret" not in str(e.value)


# Passwords as users type them: `#`, `?`, `/` unencoded (no client reads them as userinfo: such
# a URL is refused), `@` unencoded, `%40`. None is ever shown, in part or whole.
PASSWORDS = ["p#ss", "p?ss", "p/ss", "p@ss", "p%40ss", "p#s?s/s@s"]


def assert_no_password(text: str, password: str) -> None:
    for secret in ("alice", password, "ss@", "s@s"):
        assert secret not in text, f"{secret!r} shown in {text!r}"


@pytest.mark.parametrize("password", PASSWORDS)
def test_a_password_with_hash_question_mark_slash_or_at_is_never_shown(servers, password):
    port = servers(handler(extra_headers={"Content-Encoding": "br"}))
    base = f"http://alice:{password}@127.0.0.1:{port}"
    shown = []
    for open_ in (lambda: gpufile.RemoteFile.open_http(f"{base}/a.bin"),
                  lambda: gpufile.RemoteFile.open_http(f"{base}/a.bin", nbytes=len(DATA)),
                  lambda: gpufile.RemoteFile.open(f"{base}/a.bin"),
                  lambda: gpufile.RemoteFile.open_s3_public(f"{base}/b/a.bin", nbytes=9),
                  lambda: gpufile.RemoteFile.open_webhdfs(f"{base}/webhdfs/v1/a.bin", nbytes=9)):
        try:
            f = open_()
        except Exception as e:  # refused: the error shows none of it
            shown.append(f"{e!r} {getattr(e, '__notes__', '')}")
            continue
        with f:
            assert str(f).startswith("http://REDACTED@127.0.0.1:")
            shown += [str(f), repr(f)]
            for offset in (0, len(DATA)):  # refused by the server (br), past the end
                with pytest.raises(Exception) as e:
                    f.read(bytearray(10), file_offset=offset)
                shown.append(f"{e.value!r}")
    assert len(shown) >= 5
    for text in shown:
        assert_no_password(text, password)
    if any(c in password for c in "#?/"):
        # No client would read it as a password (the user name would be looked up as the
        # host): refused before any request, saying how to write it.
        assert sum("that is not percent-encoded (write %23, %3F, %2F)" in t for t in shown) == 4
    else:
        # `@` and `%40`: the URL is a good one, read with the credentials.
        assert f"http://REDACTED@127.0.0.1:{port}/a.bin" in shown


def test_tokens_in_the_query_are_not_shown(servers):
    port = servers(handler(extra_headers={"Content-Encoding": "br"}))
    url = (f"http://127.0.0.1:{port}/a.bin?access_token=T0K1&token=T0K2&key=K3Y&%73ig=S1G"
           "&X-Amz-Signature=S1G2&alt=media")
    with gpufile.RemoteFile.open_http(url) as f:
        assert str(f) == (f"http://127.0.0.1:{port}/a.bin?access_token=REDACTED&token=REDACTED"
                          "&key=REDACTED&%73ig=REDACTED&X-Amz-Signature=REDACTED&alt=media")
        with pytest.raises(RuntimeError) as e:
            f.read(bytearray(10))
    for text in (str(f), repr(f), str(e.value)):
        for secret in ("T0K1", "T0K2", "K3Y", "S1G"):
            assert secret not in text, text
    assert gpufile._native.redact_url(url) == str(f)


# ---------------------------------------------------------------- Ctrl-C


class Slow503(BaseHTTPRequestHandler):
    """Answers every request with 503 after `delay` seconds; `started` is set at the first."""

    protocol_version = "HTTP/1.1"
    delay = 1.5
    started = threading.Event()

    def log_message(self, format, *args):  # noqa: A002
        pass

    def do_GET(self):
        type(self).started.set()
        time.sleep(self.delay)
        try:
            self.send_response(503)
            self.send_header("Content-Length", "0")
            self.end_headers()
        except OSError:
            pass


def test_ctrl_c_stops_a_remote_read_of_a_slow_503_server(servers, tmp_path):
    slow = type("S", (Slow503,), {"started": threading.Event()})
    port = servers(slow)
    script = textwrap.dedent(f"""
        import numpy as np, gpufile
        gpufile.defaults.set({{"http_max_attempts": 50, "http_timeout": 30,
                              "num_threads": 4, "task_size": 1000}})
        f = gpufile.RemoteFile.open_http("http://127.0.0.1:{port}/a.bin", nbytes=10_000)
        try:
            f.read(np.zeros(10_000, dtype=np.uint8))
        except KeyboardInterrupt:
            print("KeyboardInterrupt", flush=True)
            raise
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        assert slow.started.wait(60), "no request reached the server"
        time.sleep(0.3)  # the GETs are in flight, waiting for the server's answers
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20 * time_scale())
        elapsed = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode != 0
    assert b"KeyboardInterrupt" in out, (out, err)
    assert b"KeyboardInterrupt" in err
    assert elapsed < 2.0 * time_scale(), f"Ctrl-C took {elapsed:.2f} s"
