"""RemoteFile against real servers on 127.0.0.1: a range-capable HTTP server, one without
ranges, fault servers, moto's S3 server and a WebHDFS endpoint written here."""

import functools
import http
import json
import socket
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, SimpleHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

import gpufile
from gpufile._http_server import LocalHttpServer, RangeRequestHandler
from conftest import gpu_reason, pattern, time_scale

RET = gpufile.RemoteEndpointType


@pytest.fixture
def served(tmp_path):
    """A directory with a few files, served with range support: (url, {name: bytes})."""
    files = {"a.bin": pattern(10_007, 1), "ten.bin": pattern(10, 2), "big.bin": pattern(3 << 20, 3)}
    for name, data in files.items():
        data.tofile(tmp_path / name)
    with LocalHttpServer(tmp_path, max_lifetime=60) as server:
        yield server.url, files


# ---------------------------------------------------------------- HTTP


def _cupy_with_a_device():
    """CuPy, or the test skips saying why (no GPU, CuPy not installed)."""
    reason = gpu_reason()
    if reason is not None:
        pytest.skip(reason)
    import cupy
    return cupy


@pytest.mark.parametrize("threads,task", [(1, 4 << 20), (3, 199), (4, 1000)])
def test_http_read_whole_and_parts(served, threads, task):
    url, files = served
    data = files["a.bin"]
    with gpufile.defaults.set({"num_threads": threads, "task_size": task}):
        with gpufile.RemoteFile.open_http(f"{url}/a.bin") as f:
            assert f.nbytes() == data.nbytes
            assert str(f) == f"{url}/a.bin"
            assert f.remote_endpoint_type() == RET.HTTP
            buf = np.zeros_like(data)
            assert f.read(buf) == data.nbytes
            np.testing.assert_array_equal(buf, data)
            part = bytearray(777)
            assert f.read(part, file_offset=1234) == 777
            assert bytes(part) == data[1234:2011].tobytes()
            fut = f.pread(buf, size=5, file_offset=10_002)
            assert fut.get() == 5
            np.testing.assert_array_equal(buf[:5], data[10_002:])


def test_http_large_read_many_tasks(served):
    url, files = served
    data = files["big.bin"]
    with gpufile.defaults.set({"num_threads": 8, "task_size": 256 << 10}):
        with gpufile.RemoteFile.open(f"{url}/big.bin") as f:
            assert f.remote_endpoint_type() == RET.HTTP
            buf = np.empty_like(data)
            assert f.read(buf) == data.nbytes
    np.testing.assert_array_equal(buf, data)


class PeerLogHandler(RangeRequestHandler):
    """Serves ranges and appends each request's method and client port to `log`."""

    def __init__(self, *args, log=None, **kw):
        self.log = log
        super().__init__(*args, **kw)

    def _note(self) -> None:
        with open(self.log, "a") as f:
            f.write(f"{self.command} {self.client_address[1]}\n")

    def do_GET(self):
        self._note()
        super().do_GET()

    def do_HEAD(self):
        self._note()
        super().do_HEAD()


@pytest.mark.parametrize("endpoint", ["http", "presigned"])
def test_one_worker_reuses_one_connection(tmp_path, endpoint):
    """Each range is read to the body's end, so the connection goes back to the pool: one
    worker sends the size request and every range over one connection."""
    data = pattern(10_000, 7)
    data.tofile(tmp_path / "a")
    log = tmp_path / "requests.log"
    with LocalHttpServer(tmp_path, max_lifetime=60, handler=PeerLogHandler,
                         handler_options={"log": str(log)}) as server:
        with gpufile.defaults.set({"num_threads": 1, "task_size": 1000}):
            if endpoint == "http":  # the size from HEAD
                f = gpufile.RemoteFile.open_http(f"{server.url}/a")
            else:  # the size from a GET of byte 0, whose body is read to its end too
                f = gpufile.RemoteFile.open_s3_presigned_url(f"{server.url}/a")
            with f:
                buf = np.empty_like(data)
                assert f.read(buf) == data.nbytes
                assert f.read(buf[:10], file_offset=20) == 10
    np.testing.assert_array_equal(buf[:10], data[20:30])
    requests = log.read_text().split("\n")[:-1]
    assert len(requests) == 1 + 10 + 1
    assert len({r.split()[1] for r in requests}) == 1, requests


def test_http_nbytes_given_skips_the_size_request_and_zero_reads(served):
    url, _ = served
    # No such file: with nbytes given, opening makes no request, so it succeeds.
    with gpufile.RemoteFile.open_http(f"{url}/missing.bin", nbytes=3) as f:
        assert f.nbytes() == 3
        assert f.read(bytearray(0)) == 0
        with pytest.raises(RuntimeError, match="URL returned error: 404"):
            f.read(bytearray(3))


def test_read_past_the_end_is_refused_before_any_request(served):
    url, _ = served
    with gpufile.RemoteFile.open_http(f"{url}/ten.bin") as f:
        b = np.full(100, 7, dtype=np.uint8)
        with pytest.raises(ValueError, match=r"cannot read 0\+100 bytes into a 10 bytes file"):
            f.read(b)
        with pytest.raises(ValueError, match=r"cannot read 100\+5 bytes into a 10 bytes file"):
            f.read(b, size=5, file_offset=100)
        assert (b == 7).all()
        with pytest.raises(ValueError, match="larger than the buffer"):
            f.read(b, size=101)


def test_http_missing_file_is_404(served):
    url, _ = served
    with pytest.raises(RuntimeError, match=r"URL returned error: 404.*missing\.bin"):
        gpufile.RemoteFile.open_http(f"{url}/missing.bin")


def test_remote_failures_are_kvikio_s_exact_types_and_name_the_url(tmp_path, served):
    """What the server did wrong is KvikIO's type itself (RuntimeError, OverflowError for a server
    ignoring ranges), not one of gpufile's subclasses, its message ending with the URL."""
    url, _ = served
    with pytest.raises(RuntimeError) as e:
        gpufile.RemoteFile.open_http(f"{url}/missing.bin")
    assert type(e.value) is RuntimeError
    assert str(e.value).endswith(f"({url}/missing.bin)"), str(e.value)
    pattern(100, 4).tofile(tmp_path / "a")
    with LocalHttpServer(tmp_path, range_support=False, max_lifetime=60) as server:
        with gpufile.RemoteFile.open_http(f"{server.url}/a", nbytes=200) as f:
            with pytest.raises(OverflowError) as e:
                f.read(np.zeros(10, dtype=np.uint8), file_offset=150)
    assert type(e.value) is OverflowError
    assert str(e.value).endswith(f"({server.url}/a)"), str(e.value)


class CountingPlainHandler(SimpleHTTPRequestHandler):
    """Python's own file server, which ignores Range (200 and the whole file), counting GETs."""

    protocol_version = "HTTP/1.1"

    def __init__(self, *args, counter=None, **kw):
        self.counter = counter
        super().__init__(*args, **kw)

    def log_message(self, format, *args):  # noqa: A002
        pass

    def do_GET(self):
        with self.counter.lock:
            self.counter.n += 1
        super().do_GET()


@pytest.fixture
def plain_server(tmp_path):
    """A real http.server.SimpleHTTPRequestHandler on 127.0.0.1: (url, counter)."""
    counter = Counter()
    httpd = ThreadingHTTPServer(
        ("127.0.0.1", 0),
        functools.partial(CountingPlainHandler, directory=str(tmp_path), counter=counter))
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", counter
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_server_ignoring_ranges_serves_each_read_from_one_whole_body_get(tmp_path, plain_server):
    url, gets = plain_server
    data = pattern((3 << 20) + 11, 4)
    data.tofile(tmp_path / "a")
    with gpufile.defaults.set({"num_threads": 4, "task_size": 64 << 10}):
        with gpufile.RemoteFile.open_http(f"{url}/a") as f:
            assert f.nbytes() == data.nbytes
            # The HEAD says nothing of ranges: the first read larger than a task asks with one
            # GET of byte 0, which comes back whole; every read after is one GET.
            for offset, size in [(0, data.nbytes), (12_345, 1 << 20), ((2 << 20) + 5, 700_001),
                                 (data.nbytes - 3, 3)]:
                before = gets.n
                buf = np.zeros(size, dtype=np.uint8)
                assert f.read(buf, file_offset=offset) == size
                np.testing.assert_array_equal(buf, data[offset:offset + size])
                assert gets.n - before == (2 if offset == 0 else 1), (offset, gets.n - before)
            # pread, tiny tasks: still one GET.
            before = gets.n
            buf = np.zeros(1 << 20, dtype=np.uint8)
            with gpufile.defaults.set("task_size", 4096):
                assert f.pread(buf, file_offset=99).get() == buf.nbytes
            np.testing.assert_array_equal(buf, data[99:99 + buf.nbytes])
            assert gets.n - before == 1
            # Reads that continue where the last one ended continue its GET.
            before = gets.n
            buf = np.zeros(100_000, dtype=np.uint8)
            for offset in range(500_000, 1_500_000, buf.nbytes):
                assert f.read(buf, file_offset=offset) == buf.nbytes
                np.testing.assert_array_equal(buf, data[offset:offset + buf.nbytes])
            assert gets.n - before == 1


def test_server_ignoring_ranges_serves_gpu_reads_from_one_get(tmp_path, plain_server):
    """Into GPU memory a read arrives in bounce-buffer chunks: each continues the one GET."""
    cp = _cupy_with_a_device()
    url, gets = plain_server
    data = pattern((3 << 20) + 11, 5)
    data.tofile(tmp_path / "a")
    with gpufile.defaults.set({"num_threads": 4, "task_size": 64 << 10,
                               "bounce_buffer_size": 256 << 10}):
        with gpufile.RemoteFile.open_http(f"{url}/a") as f:
            f.read(np.zeros(1, dtype=np.uint8))  # the size request and a first GET
            for offset in (0, 77_777):
                before = gets.n
                dev = cp.zeros(data.nbytes - offset, dtype=cp.uint8)
                assert f.read(dev, file_offset=offset) == dev.nbytes
                np.testing.assert_array_equal(cp.asnumpy(dev), data[offset:])
                assert gets.n - before == 1


def test_server_ignoring_ranges_keeps_the_error_where_the_body_cannot_serve(tmp_path):
    data = pattern(100, 4)
    data.tofile(tmp_path / "a")
    with LocalHttpServer(tmp_path, range_support=False, max_lifetime=60) as server:
        # nbytes larger than the object: the whole body does not hold bytes 150-159.
        with gpufile.RemoteFile.open_http(f"{server.url}/a", nbytes=200) as f:
            b = np.zeros(10, dtype=np.uint8)
            with pytest.raises(OverflowError, match="maybe the server doesn't support file ranges?"):
                f.read(b, file_offset=150)
            assert (b == 0).all(), "nothing written from a wrong answer"
            assert f.read(b, file_offset=90) == 10
            np.testing.assert_array_equal(b, data[90:])


def test_closed_file_and_bad_arguments(served):
    url, _ = served
    f = gpufile.RemoteFile.open_http(f"{url}/ten.bin")
    with pytest.raises(TypeError):
        f.read(b"read-only bytes")
    with pytest.raises(TypeError):
        f.read(3)
    f.close()
    assert f.closed
    assert str(f) == f"{url}/ten.bin"
    with pytest.raises(ValueError, match="closed"):
        f.read(bytearray(1))
    with pytest.raises(TypeError):
        gpufile.RemoteFile.open_http(f"{url}/ten.bin", nbytes="3")
    with pytest.raises(ValueError, match="negative"):
        gpufile.RemoteFile.open_http(f"{url}/ten.bin", nbytes=-1)


# ---------------------------------------------------------------- faults


class Counter:
    def __init__(self):
        self.n = 0
        self.lock = threading.Lock()

    def next(self) -> int:
        with self.lock:
            self.n += 1
            return self.n


class FlakyHandler(RangeRequestHandler):
    """The first `failures` requests get `status`; later ones are served after `delay` s for
    the first `slow` requests."""

    def __init__(self, *args, counter=None, failures=1, status=503, delay=0.0, slow=0, **kw):
        self.counter, self.failures, self.status = counter, failures, status
        self.delay, self.slow = delay, slow
        super().__init__(*args, **kw)

    def _maybe_fail(self) -> bool:
        n = self.counter.next()
        if n <= self.failures:
            self.send_error(self.status)
            return True
        if n <= self.failures + self.slow:
            time.sleep(self.delay)
        return False

    def do_GET(self):
        if not self._maybe_fail():
            super().do_GET()

    def do_HEAD(self):
        if not self._maybe_fail():
            super().do_HEAD()


class ShortBodyHandler(RangeRequestHandler):
    """Announces the full range, sends half of it, closes."""

    def __init__(self, *args, counter=None, **kw):
        super().__init__(*args, **kw)

    def do_GET(self):
        self.send_response(206)
        self.send_header("Content-Range", "bytes 0-99/100")
        self.send_header("Content-Length", "100")
        self.end_headers()
        self.wfile.write(b"x" * 50)
        self.wfile.flush()
        self.close_connection = True


def fault_server(tmp_path, handler, **options):
    return LocalHttpServer(
        tmp_path, max_lifetime=60, handler=handler, handler_options={"counter": Counter(), **options}
    )


def test_retry_503_then_success(tmp_path, capfd):
    data = pattern(1000, 5)
    data.tofile(tmp_path / "a")
    with fault_server(tmp_path, FlakyHandler, failures=2) as server:
        with gpufile.defaults.set({"http_max_attempts": 3}):
            with gpufile.RemoteFile.open_http(f"{server.url}/a") as f:  # HEAD: 503, 503, 200
                b = np.empty_like(data)
                assert f.read(b) == 1000
    np.testing.assert_array_equal(b, data)
    err = capfd.readouterr().err
    # KvikIO's record after the library's name, then the request; on stderr (stdout is data).
    records = [line for line in err.splitlines() if line.startswith("gpufile:")]
    assert records == [
        f"gpufile: Got HTTP code 503. Retrying after 500ms (attempt 1 of 3). Request: HEAD {server.url}/a",
        f"gpufile: Got HTTP code 503. Retrying after 1000ms (attempt 2 of 3). Request: HEAD {server.url}/a",
    ]


def test_retries_exhausted_say_how_many(tmp_path):
    (tmp_path / "a").write_bytes(b"0123456789")
    with fault_server(tmp_path, FlakyHandler, failures=100) as server:
        with gpufile.defaults.set({"http_max_attempts": 2}):
            with pytest.raises(RuntimeError) as e:
                gpufile.RemoteFile.open_http(f"{server.url}/a")
    assert e.match(r"HTTP request reached maximum number of attempts \(2\)")
    assert e.match("Got HTTP code 503")
    assert e.match(f"{server.url}/a")


def test_status_outside_retry_list_fails_at_once(tmp_path):
    (tmp_path / "a").write_bytes(b"0123456789")
    with fault_server(tmp_path, FlakyHandler, failures=100) as server:
        with gpufile.defaults.set({"http_status_codes": [429]}):
            t0 = time.monotonic()
            with pytest.raises(RuntimeError, match="URL returned error: 503"):
                gpufile.RemoteFile.open_http(f"{server.url}/a")
            assert time.monotonic() - t0 < 0.5 * time_scale(), "no backoff for a status that is not retried"


def test_403_forbidden(tmp_path):
    (tmp_path / "a").write_bytes(b"0123456789")
    with fault_server(tmp_path, FlakyHandler, failures=100, status=403) as server:
        with pytest.raises(RuntimeError, match="URL returned error: 403 Forbidden"):
            gpufile.RemoteFile.open_http(f"{server.url}/a")
        with gpufile.RemoteFile.open_http(f"{server.url}/a", nbytes=10) as f:
            with pytest.raises(RuntimeError, match=r"bytes 2-5: URL returned error: 403"):
                f.read(bytearray(4), file_offset=2)


def test_short_body(tmp_path):
    with fault_server(tmp_path, ShortBodyHandler) as server:
        with gpufile.RemoteFile.open_http(f"{server.url}/a", nbytes=100) as f:
            with pytest.raises(RuntimeError, match="ended after 50 of 100 bytes"):
                f.read(bytearray(100))


def test_timeout_then_success(tmp_path):
    data = pattern(100, 6)
    data.tofile(tmp_path / "a")
    with fault_server(tmp_path, FlakyHandler, failures=0, delay=2, slow=1) as server:
        with gpufile.defaults.set({"http_timeout": 1, "http_max_attempts": 2}):
            with gpufile.RemoteFile.open_http(f"{server.url}/a", nbytes=100) as f:
                b = np.empty_like(data)
                assert f.read(b) == 100
    np.testing.assert_array_equal(b, data)


def test_timeouts_exhausted(tmp_path, capfd):
    (tmp_path / "a").write_bytes(bytes(100))
    with fault_server(tmp_path, FlakyHandler, failures=0, delay=2, slow=10) as server:
        with gpufile.defaults.set({"http_timeout": 1, "http_max_attempts": 2}):
            with gpufile.RemoteFile.open_http(f"{server.url}/a", nbytes=100) as f:
                with pytest.raises(RuntimeError) as e:
                    f.read(bytearray(100))
    assert e.match(r"HTTP request reached maximum number of attempts \(2\)")
    assert e.match(r"Operation timed out after 1 s \(http_timeout\)")
    captured = capfd.readouterr()
    assert captured.out == ""
    records = [line for line in captured.err.splitlines() if line.startswith("gpufile:")]
    assert records == [
        "gpufile: Timeout error. Retrying after 500ms (attempt 1 of 2). "
        f"Request: GET of bytes 0-99 {server.url}/a"
    ]


def test_connection_refused():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with pytest.raises(RuntimeError, match=f"127.0.0.1:{port}/x"):
        gpufile.RemoteFile.open_http(f"http://127.0.0.1:{port}/x")


# ---------------------------------------------------------------- URLs and endpoint types


def test_infer_remote_endpoint_type():
    assert gpufile.infer_remote_endpoint_type("s3://bucket/key") == RET.S3
    assert gpufile.infer_remote_endpoint_type("https://h:1234/webhdfs/v1/d.bin") == RET.WEBHDFS
    assert gpufile.infer_remote_endpoint_type("https://example.com/p/f.bin") == RET.HTTP
    presigned = (
        "https://b.s3.us-east-1.amazonaws.com/k?X-Amz-Algorithm=AWS4-HMAC-SHA256"
        "&X-Amz-Signature=sig&X-Amz-Credential=cred"
    )
    assert gpufile.infer_remote_endpoint_type(presigned) == RET.S3_PRESIGNED_URL
    with pytest.raises(RuntimeError, match="Bad scheme"):
        gpufile.infer_remote_endpoint_type("example.com/path")
    with pytest.raises(RuntimeError, match="Unsupported endpoint URL"):
        gpufile.infer_remote_endpoint_type("unsupported://example.com/path")
    assert gpufile.is_remote_file_available()


def test_allow_list(served):
    url, files = served
    with pytest.raises(RuntimeError, match="HTTP is not in the allowlist"):
        gpufile.RemoteFile.open(f"{url}/a.bin", RET.HTTP, allow_list=[RET.S3])
    with pytest.raises(RuntimeError, match="Unsupported endpoint URL"):
        gpufile.RemoteFile.open(f"{url}/a.bin", allow_list=[RET.S3, RET.WEBHDFS])
    with pytest.raises(RuntimeError, match="Invalid URL for WebHDFS endpoint"):
        gpufile.RemoteFile.open(f"{url}/a.bin", RET.WEBHDFS)
    with pytest.raises(TypeError):
        gpufile.RemoteFile.open(f"{url}/a.bin", allow_list=["HTTP"])
    with gpufile.RemoteFile.open(f"{url}/a.bin", RET.HTTP, allow_list=[RET.HTTP]) as f:
        assert f.nbytes() == files["a.bin"].nbytes


def test_bad_schemes():
    with pytest.raises(ValueError, match="Unsupported protocol"):
        gpufile.RemoteFile.open_s3_url("unknown://bucket/object")
    with pytest.raises(RuntimeError, match="Unsupported protocol"):
        gpufile.RemoteFile.open_http("ftp://example.com/file")
    with pytest.raises(RuntimeError, match="Bad scheme"):
        gpufile.RemoteFile.open_http("example.com/file")


# ---------------------------------------------------------------- WebHDFS


class WebHdfsHandler(BaseHTTPRequestHandler):
    """GETFILESTATUS and OPEN over one in-memory file at /webhdfs/v1/data.bin; records users."""

    protocol_version = "HTTP/1.1"

    def __init__(self, *args, data=b"", users=None, **kw):
        self.data, self.users = data, users
        super().__init__(*args, **kw)

    def log_message(self, *args):
        pass

    def _reply(self, status, body, ctype="application/octet-stream"):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        parsed = urllib.parse.urlparse(self.path)
        q = dict(urllib.parse.parse_qsl(parsed.query))
        self.users.append(q.get("user.name"))
        if parsed.path != "/webhdfs/v1/data.bin":
            return self._reply(404, b'{"RemoteException":{"message":"File does not exist"}}')
        if q.get("op") == "GETFILESTATUS":
            body = json.dumps({"FileStatus": {"length": len(self.data), "type": "FILE"}})
            return self._reply(200, body.encode(), "application/json")
        if q.get("op") == "OPEN":
            off, n = int(q["offset"]), int(q["length"])
            return self._reply(200, self.data[off : off + n])
        self._reply(400, b"bad op")


@pytest.fixture
def webhdfs():
    data = pattern(5000, 7).tobytes()
    users: list = []
    handler = lambda *a, **k: WebHdfsHandler(*a, data=data, users=users, **k)  # noqa: E731
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/webhdfs/v1", data, users
    httpd.shutdown()
    httpd.server_close()


def test_webhdfs(webhdfs, monkeypatch):
    base, data, users = webhdfs
    with gpufile.defaults.set({"num_threads": 3, "task_size": 999}):
        with gpufile.RemoteFile.open(f"{base}/data.bin?user.name=alice") as f:
            assert f.remote_endpoint_type() == RET.WEBHDFS
            assert f.nbytes() == len(data)
            buf = bytearray(len(data) - 100)
            assert f.read(buf, file_offset=100) == len(buf)
            assert bytes(buf) == data[100:]
    assert set(users) == {"alice"}
    users.clear()
    monkeypatch.setenv("KVIKIO_WEBHDFS_USERNAME", "bob")
    with gpufile.RemoteFile.open_webhdfs(f"{base}/data.bin") as f:
        buf = np.empty(len(data), dtype=np.uint8)
        f.read(buf)
    assert buf.tobytes() == data
    assert set(users) == {"bob"}
    with pytest.raises(RuntimeError, match="URL returned error: 404"):
        gpufile.RemoteFile.open_webhdfs(f"{base}/missing.bin")


# ---------------------------------------------------------------- S3 (moto)


@pytest.fixture
def s3(moto_endpoint, monkeypatch):
    boto3 = pytest.importorskip("boto3")
    for k, v in {
        "AWS_ACCESS_KEY_ID": "testing-key",
        "AWS_SECRET_ACCESS_KEY": "testing-secret",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": moto_endpoint,
    }.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    client = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")
    client.create_bucket(Bucket="bkt")
    objects = {"obj.bin": pattern(100_003, 8), "dir/with space.bin": pattern(4096, 9)}
    for key, data in objects.items():
        client.put_object(Bucket="bkt", Key=key, Body=data.tobytes())
    client.put_object(Bucket="bkt", Key="public.bin", Body=objects["obj.bin"].tobytes(), ACL="public-read")
    yield moto_endpoint, client, objects


def boto3_client(endpoint, config=None):
    import boto3

    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", config=config)


def read_all(f) -> np.ndarray:
    buf = np.empty(f.nbytes(), dtype=np.uint8)
    assert f.read(buf) == f.nbytes()
    return buf


@pytest.mark.parametrize("threads,task", [(1, 4 << 20), (4, 9999)])
def test_s3_read(s3, threads, task):
    endpoint, _, objects = s3
    data = objects["obj.bin"]
    with gpufile.defaults.set({"num_threads": threads, "task_size": task}):
        for f in (
            gpufile.RemoteFile.open_s3("bkt", "obj.bin"),
            gpufile.RemoteFile.open_s3_url("s3://bkt/obj.bin"),
            gpufile.RemoteFile.open_s3_url(f"{endpoint}/bkt/obj.bin"),
            gpufile.RemoteFile.open("s3://bkt/obj.bin"),
        ):
            with f:
                assert f.remote_endpoint_type() == RET.S3
                assert f.nbytes() == data.nbytes
                np.testing.assert_array_equal(read_all(f), data)
                part = np.empty(1000, dtype=np.uint8)
                f.read(part, file_offset=99_003)
                np.testing.assert_array_equal(part, data[99_003:])
    key = "dir/with space.bin"
    with gpufile.RemoteFile.open_s3("bkt", key) as f:
        np.testing.assert_array_equal(read_all(f), objects[key])


def test_s3_bucket_with_underscore_signed_in_headers(s3):
    # A request signed in its query (or not at all) leaves moto unable to tell that a path
    # "/test_read/..." is S3's (it answers 500); SigV4 in the Authorization header names the
    # service, as KvikIO (libcurl) and the AWS SDKs send it.
    endpoint, client, _ = s3
    data = pattern(50_001, 11)
    client.create_bucket(Bucket="test_read")
    client.put_object(Bucket="test_read", Key="Aa1", Body=data.tobytes())
    with gpufile.defaults.set({"num_threads": 3, "task_size": 4099}):
        for f in (
            gpufile.RemoteFile.open_s3("test_read", "Aa1"),
            gpufile.RemoteFile.open_s3_url("s3://test_read/Aa1"),
            gpufile.RemoteFile.open_s3_url(f"{endpoint}/test_read/Aa1"),
            gpufile.RemoteFile.open("s3://test_read/Aa1"),
        ):
            with f:
                assert f.remote_endpoint_type() == RET.S3
                assert f.nbytes() == data.nbytes
                assert str(f).endswith("/test_read/Aa1")
                assert "testing-secret" not in str(f) and "testing-key" not in str(f)
                np.testing.assert_array_equal(read_all(f), data)
                part = np.empty(5000, dtype=np.uint8)
                assert f.read(part, file_offset=45_001) == 5000
                np.testing.assert_array_equal(part, data[45_001:])


def test_s3_arguments_win_over_environment(s3, monkeypatch):
    endpoint, _, objects = s3
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    with gpufile.RemoteFile.open_s3(
        "bkt", "obj.bin", aws_region_name="us-east-1", aws_endpoint_url=endpoint,
        aws_session_token="session-token",
    ) as f:
        np.testing.assert_array_equal(read_all(f), objects["obj.bin"])


def test_s3_errors(s3, monkeypatch):
    with pytest.raises(RuntimeError, match="URL returned error: 404"):
        gpufile.RemoteFile.open_s3("unknown-bucket", "obj.bin")
    with pytest.raises(RuntimeError, match="URL returned error: 404"):
        gpufile.RemoteFile.open_s3("bkt", "unknown-file")
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    with pytest.raises(RuntimeError, match="AWS_DEFAULT_REGION"):
        gpufile.RemoteFile.open_s3("bkt", "obj.bin")


def test_s3_public_and_presigned(s3):
    endpoint, client, objects = s3
    data = objects["obj.bin"]
    with gpufile.RemoteFile.open_s3_public(f"{endpoint}/bkt/public.bin") as f:
        assert f.remote_endpoint_type() == RET.S3_PUBLIC
        np.testing.assert_array_equal(read_all(f), data)
    with gpufile.RemoteFile.open_s3_public("s3://bkt/public.bin") as f:
        np.testing.assert_array_equal(read_all(f), data)
    # Unsigned requests for a private object are refused by the server.
    with pytest.raises(RuntimeError, match="URL returned error: 403"):
        gpufile.RemoteFile.open_s3_public(f"{endpoint}/bkt/obj.bin")
    from botocore.config import Config

    v4 = boto3_client(endpoint, Config(signature_version="s3v4"))
    url = v4.generate_presigned_url(
        "get_object", Params={"Bucket": "bkt", "Key": "obj.bin"}, ExpiresIn=600
    )
    with gpufile.defaults.set({"num_threads": 3, "task_size": 7777}):
        with gpufile.RemoteFile.open_s3_presigned_url(url) as f:
            assert f.remote_endpoint_type() == RET.S3_PRESIGNED_URL
            assert f.nbytes() == data.nbytes
            signature = urllib.parse.parse_qs(urllib.parse.urlparse(url).query)["X-Amz-Signature"][0]
            assert signature not in str(f) and "X-Amz-Signature=REDACTED" in str(f)
            np.testing.assert_array_equal(read_all(f), data)


def test_str_and_repr_show_the_s3_url_the_user_gave(s3):
    """An S3 object shows as the user named it: ``s3://bucket/key`` (not the endpoint's
    ``http://`` address it reads), or the endpoint URL where that is what was given; never the
    credentials."""
    endpoint, _, _ = s3
    RF = gpufile.RemoteFile
    for open_it, shown, mode in (
        (lambda: RF.open_s3("bkt", "obj.bin"), "s3://bkt/obj.bin", ""),
        (lambda: RF.open_s3("bkt", "dir/with space.bin"), "s3://bkt/dir/with space.bin", ""),
        (lambda: RF.open_s3_url("s3://bkt/obj.bin"), "s3://bkt/obj.bin", ""),
        (lambda: RF.open("s3://bkt/obj.bin"), "s3://bkt/obj.bin", ""),
        (lambda: RF.open_s3_public("s3://bkt/public.bin"), "s3://bkt/public.bin", ""),
        (lambda: RF.open("s3://bkt/new.bin", mode="w"), "s3://bkt/new.bin", " mode='w'"),
        (lambda: RF.open_s3_url(f"{endpoint}/bkt/obj.bin"), f"{endpoint}/bkt/obj.bin", ""),
    ):
        with open_it() as f:
            kind = f.remote_endpoint_type().name
            assert (str(f), repr(f)) == (shown, f"<gpufile.RemoteFile {kind} {shown!r}{mode}>")
            assert "testing" not in str(f) + repr(f)


# ---------------------------------------------------------------- GPU memory


def test_http_into_gpu_memory_through_the_bounce_pipeline(served):
    """A remote read into CuPy memory: each range lands in a pinned buffer and is copied to the
    GPU while the next one is received; byte-exact for awkward task sizes and offsets."""
    cp = _cupy_with_a_device()
    url, files = served
    data = files["big.bin"]
    with gpufile.RemoteFile.open_http(f"{url}/big.bin") as f:
        for task_size, offset in [(1 << 20, 0), (199_999, 12_345), (4 << 20, 1)]:
            n = data.nbytes - offset
            dev = cp.zeros(n, dtype=cp.uint8)
            with gpufile.defaults.set("task_size", task_size):
                assert f.read(dev, file_offset=offset) == n
            np.testing.assert_array_equal(cp.asnumpy(dev), data[offset:])
        fut = f.pread(cp.zeros(10, dtype=cp.uint8), file_offset=data.nbytes - 10)
        assert fut.get() == 10
