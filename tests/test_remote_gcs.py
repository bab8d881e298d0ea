"""Public ``gs://`` objects and signed (query-string) URLs, against real servers on 127.0.0.1.

GCS's XML API serves an object as ``<endpoint>/<bucket>/<object>``: a directory laid out as
``BUCKET/OBJECT`` served with ranges is that API for anonymous reads, and
``STORAGE_EMULATOR_HOST`` (the variable Google's clients read) points gpufile at it.
"""

import http
import urllib.parse

import numpy as np
import pytest

import gpufile
from conftest import gpu_reason, pattern
from gpufile._http_server import RangeRequestHandler
from gpufile.utils import LocalHttpServer
from test_cli_remote import cli_json

RET = gpufile.RemoteEndpointType

# Object names with a space, UTF-8, slashes and characters that must be percent-encoded.
NAMES = ["plain.bin", "dir/sub dir/naïve é.bin", "x+y 100%#?.bin"]
HINT = ("No Google credentials were found (GOOGLE_APPLICATION_CREDENTIALS, gcloud's "
        "application_default_credentials.json, the GCE metadata server were tried), so the "
        "object was asked for anonymously, which reads public objects only")


@pytest.fixture(autouse=True)
def no_google_credentials(tmp_path, monkeypatch):
    """These objects are read anonymously: no Google credentials in the environment."""
    for var in ("GOOGLE_APPLICATION_CREDENTIALS", "GCE_METADATA_HOST"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "no-gcloud"))
    monkeypatch.setenv("NO_GCE_CHECK", "true")


@pytest.fixture
def bucket(tmp_path):
    """A bucket `bkt` of three objects: (server, {object name: bytes})."""
    objects = {name: pattern(10_007 + 1000 * i, i) for i, name in enumerate(NAMES)}
    for name, data in objects.items():
        path = tmp_path / "bkt" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        data.tofile(path)
    with LocalHttpServer(tmp_path, max_lifetime=60) as server:
        yield server, objects


@pytest.fixture
def emulator(bucket, monkeypatch):
    """`bucket` with STORAGE_EMULATOR_HOST pointing at it."""
    server, objects = bucket
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", server.url)
    return server, objects


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("opener", ["open", "open_gcs_public"])
def test_gs_objects_read_whole_and_ranged(emulator, name, opener):
    _, objects = emulator
    data = objects[name]
    url = f"gs://bkt/{name}"
    assert gpufile.infer_remote_endpoint_type(url) == RET.HTTP
    with gpufile.defaults.set({"num_threads": 3, "task_size": 999}):
        with getattr(gpufile.RemoteFile, opener)(url) as f:
            assert f.nbytes() == data.nbytes
            assert str(f) == url
            assert f.remote_endpoint_type() == RET.HTTP
            buf = np.zeros_like(data)
            assert f.read(buf) == data.nbytes
            np.testing.assert_array_equal(buf, data)
            part = np.zeros(4321, dtype=np.uint8)
            assert f.read(part, file_offset=1234) == 4321
            np.testing.assert_array_equal(part, data[1234:5555])
            tail = bytearray(7)
            assert f.pread(tail, file_offset=data.nbytes - 7).get() == 7
            assert bytes(tail) == data[-7:].tobytes()


def test_emulator_host_without_scheme_and_explicit_http_type(bucket, monkeypatch):
    server, objects = bucket
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"127.0.0.1:{server.port}")
    with gpufile.RemoteFile.open("gs://bkt/plain.bin", RET.HTTP, [RET.HTTP]) as f:
        buf = np.empty_like(objects["plain.bin"])
        assert f.read(buf) == buf.nbytes
    np.testing.assert_array_equal(buf, objects["plain.bin"])


def test_missing_object_is_404_with_both_addresses(emulator):
    server, _ = emulator
    with pytest.raises(RuntimeError) as e:
        gpufile.RemoteFile.open("gs://bkt/dir/none here.bin")
    text = str(e.value)
    assert "URL returned error: 404" in text
    assert f"from {server.url}/bkt/dir/none%20here.bin" in text
    assert text.endswith("(gs://bkt/dir/none here.bin)")
    assert "public objects only" not in text, "a 404 is not a permissions problem"
    with pytest.raises(RuntimeError, match="URL returned error: 404"):
        gpufile.RemoteFile.open_gcs_public("gs://nobucket/plain.bin")


class Forbidden(RangeRequestHandler):
    """Answers every request 403, as GCS answers an anonymous read of a private object."""

    def send_head(self):  # type: ignore[override]
        self.send_response(http.HTTPStatus.FORBIDDEN)
        self.send_header("Content-Length", "0")
        self.end_headers()
        return None


def test_private_object_403_says_no_credentials_were_found(tmp_path, monkeypatch):
    (tmp_path / "bkt").mkdir()
    (tmp_path / "bkt" / "secret.bin").write_bytes(b"0123456789")
    with LocalHttpServer(tmp_path, max_lifetime=60, handler=Forbidden) as server:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", server.url)
        with pytest.raises(RuntimeError) as e:  # at open: HEAD
            gpufile.RemoteFile.open("gs://bkt/secret.bin")
        assert "HEAD: URL returned error: 403 Forbidden" in str(e.value)
        assert HINT in str(e.value) and "(gs://bkt/secret.bin)" in str(e.value)
        with gpufile.RemoteFile.open_gcs_public("gs://bkt/secret.bin", nbytes=10) as f:
            buf = np.full(10, 7, dtype=np.uint8)
            with pytest.raises(RuntimeError) as e:  # at read: GET
                f.read(buf)
            assert (buf == 7).all()
        assert "GET of bytes 0-9: URL returned error: 403" in str(e.value)
        assert HINT in str(e.value)


@pytest.mark.parametrize("url,why", [
    ("gs://bkt", "no object name"),
    ("gs://bkt/", "no object name"),
    ("gs:///obj.bin", "no bucket name"),
    ("gs://My_Bucket/o", '"My_Bucket" is not a bucket name'),
])
def test_bad_gs_urls(url, why):
    # gpufile's own method: a ValueError naming the URL and what is missing.
    with pytest.raises(ValueError, match=why) as e:
        gpufile.RemoteFile.open_gcs_public(url)
    assert url in str(e.value) and "expected gs://<bucket>/<object>" in str(e.value)
    assert not isinstance(e.value, RuntimeError)
    # KvikIO's entry points raise RuntimeError for bad URLs ("Unsupported endpoint URL", as
    # for s3://bucket), with the same explanation.
    for call in (gpufile.RemoteFile.open, gpufile.infer_remote_endpoint_type):
        with pytest.raises(RuntimeError, match=f"Unsupported endpoint URL: .*{why}"):
            call(url)


def test_gs_url_needs_http_in_the_allow_list(emulator):
    with pytest.raises(RuntimeError, match="read as HTTP, which the allow list leaves out"):
        gpufile.RemoteFile.open("gs://bkt/plain.bin", allow_list=[RET.S3, RET.WEBHDFS])
    with pytest.raises(RuntimeError, match="Invalid URL for S3 endpoint"):
        gpufile.RemoteFile.open("gs://bkt/plain.bin", RET.S3)
    with pytest.raises(RuntimeError, match="Unsupported protocol for HTTP"):
        gpufile.RemoteFile.open_http("gs://bkt/plain.bin")
    with pytest.raises(ValueError, match="for an http\\(s\\):// URL use RemoteFile.open_http"):
        gpufile.RemoteFile.open_gcs_public("https://storage.googleapis.com/bkt/plain.bin")


@pytest.mark.parametrize("value", ["ftp://127.0.0.1:1", "127.0.0.1:notaport", "http://h:1/?x=1"])
def test_bad_emulator_host_is_a_valueerror_naming_it(monkeypatch, value):
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", value)
    with pytest.raises(ValueError, match="STORAGE_EMULATOR_HOST"):
        gpufile.RemoteFile.open_gcs_public("gs://bkt/o", nbytes=1)


def test_cli_reads_gs_urls(emulator):
    _, objects = emulator
    data = objects["dir/sub dir/naïve é.bin"]
    url = "gs://bkt/dir/sub dir/naïve é.bin"
    out, _ = cli_json("read", url, "--host", "--verify", "--threads", "2", "--task-size", "4KiB")
    assert out["file"] == url
    assert out["bytes"] == data.nbytes
    assert out["verified"] is True
    assert out["remote"]["endpoint"] == "HTTP" and out["remote"]["url"] == url
    assert out["remote"]["bytes"] == data.nbytes


def test_gs_object_into_gpu_memory(emulator):
    reason = gpu_reason()
    if reason:
        pytest.skip(reason)
    import cupy

    _, objects = emulator
    data = objects["plain.bin"]
    with gpufile.defaults.set({"task_size": 1000}):
        with gpufile.RemoteFile.open("gs://bkt/plain.bin") as f:
            buf = cupy.zeros(data.nbytes, dtype=cupy.uint8)
            assert f.read(buf) == data.nbytes
    np.testing.assert_array_equal(buf.get(), data)


# ---------------------------------------------------------------- signed URLs (Azure SAS)

SAS = {"sv": "2022-11-02", "sr": "b", "sp": "r", "se": "2030-01-01T00:00:00Z",
       "sig": "c2VjcmV0+/sig="}


class SasHandler(RangeRequestHandler):
    """Serves ranges only to requests whose query holds the shared access signature `SAS`
    (403 otherwise, as Azure Blob Storage answers); the path is the blob's, without the query."""

    def send_head(self):  # type: ignore[override]
        query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(self.path).query))
        if query != SAS:
            self.send_response(http.HTTPStatus.FORBIDDEN)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None
        return super().send_head()


def test_sas_url_query_goes_with_every_request(tmp_path):
    data = pattern(50_000, 9)
    (tmp_path / "container").mkdir()
    data.tofile(tmp_path / "container" / "blob.bin")
    with LocalHttpServer(tmp_path, max_lifetime=60, handler=SasHandler) as server:
        base = f"{server.url}/container/blob.bin"
        url = f"{base}?{urllib.parse.urlencode(SAS)}"
        with gpufile.defaults.set({"num_threads": 4, "task_size": 7000}):
            with gpufile.RemoteFile.open_http(url) as f:  # HEAD with the query
                assert f.nbytes() == data.nbytes
                assert f.remote_endpoint_type() == RET.HTTP
                buf = np.zeros_like(data)
                assert f.read(buf) == data.nbytes  # 8 ranged GETs with the query
                np.testing.assert_array_equal(buf, data)
                part = np.zeros(100, dtype=np.uint8)
                assert f.read(part, file_offset=49_900) == 100
                np.testing.assert_array_equal(part, data[49_900:])
                # The signature is a bearer credential: never shown.
                assert "c2VjcmV0" not in str(f) and "sig=REDACTED" in str(f)
                assert str(f).startswith(f"{base}?sv=2022-11-02&")
            # AUTO infers HTTP for it too.
            with gpufile.RemoteFile.open(url) as f:
                assert f.remote_endpoint_type() == RET.HTTP
        with pytest.raises(RuntimeError, match="URL returned error: 403"):
            gpufile.RemoteFile.open_http(base)  # the server does check the query
        bad = url.replace("sp=r", "sp=w")
        with pytest.raises(RuntimeError, match="URL returned error: 403") as e:
            gpufile.RemoteFile.open_http(bad)
        assert "c2VjcmV0" not in str(e.value) and "sig=REDACTED" in str(e.value)
