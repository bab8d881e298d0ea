"""gpufile._native.open_remote, the one native way in under RemoteFile's open_* methods: what it
opens, and the typed errors of arguments it does not take (raised before any request)."""

import numpy as np
import pytest

import gpufile
from gpufile import _native
from gpufile._http_server import LocalHttpServer
from conftest import pattern

RET = gpufile.RemoteEndpointType
AWS = {
    "aws_region_name": "us-east-1",
    "aws_access_key_id": "key",
    "aws_secret_access_key": "secret",
    "aws_endpoint_url": "http://127.0.0.1:9",
}


def test_open_remote_reads_what_the_open_methods_read(tmp_path):
    data = pattern(4099, 7)
    data.tofile(tmp_path / "a.bin")
    with LocalHttpServer(tmp_path, max_lifetime=60) as server:
        url = f"{server.url}/a.bin"
        for how, kw in [("http", {}), ("infer", {"remote_endpoint_type": RET.HTTP.value})]:
            f = gpufile.RemoteFile(_native.open_remote(how, url, **kw))
            assert f.nbytes() == data.nbytes
            out = np.empty_like(data)
            assert f.read(out) == data.nbytes
            assert np.array_equal(out, data)
            f.close()


def test_the_aws_mapping_signs_the_object(monkeypatch):
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    # Nothing is sent at open for writing: the options alone make the signer.
    w = _native.open_remote("s3", "bkt", write=True, object_name="k", aws=AWS)
    assert w.credentials_source() == "arguments or environment"
    assert w.url() == "http://127.0.0.1:9/bkt/k"
    w.abort()


@pytest.mark.parametrize(
    "args, kw, error, words",
    [
        (("ftp", "http://h/a"), {}, ValueError, "unknown opener 'ftp'"),
        (("s3", "bkt"), {}, TypeError, "needs object_name"),
        (("http", "http://h/a"), {"object_name": "k"}, TypeError, "takes no object_name"),
        (("s3_url", "s3://b/k"), {"aws": {"region": "x"}}, TypeError, "AWS option 'region'"),
        (("s3_url", "s3://b/k"), {"aws": {"aws_region_name": 1}}, TypeError, "'aws_region_name'"),
        (("http", "http://h/a"), {"nbytes": "10"}, TypeError, "nbytes must be an int"),
        (("infer", "http://h/a"), {"remote_endpoint_type": 99}, ValueError, "value 99"),
        (("s3_public", "http://h/b/k"), {"write": True}, RuntimeError, "cannot be written"),
    ],
)
def test_bad_arguments_are_typed_errors(args, kw, error, words):
    with pytest.raises(error, match=words):
        _native.open_remote(*args, **kw)
