"""Remote writes from GPU memory and checkpoints loaded by URL into GPU memory, against moto's S3
server and gpufile's range server on 127.0.0.1 (issue 29).

Run on a machine with an NVIDIA GPU and CuPy (`pytest -m gpu`); elsewhere every test here skips
with the reason.
"""

import pytest

import gpufile
from gpufile._http_server import LocalHttpServer
from conftest import pattern
from test_gpu import REASON as GPU_REASON
from test_remote_write import MiB, s3, stored, uploads_left  # noqa: F401 - fixtures
from test_remote_checkpoint import check, checkpoint_dir  # noqa: F401 - fixtures

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(GPU_REASON is not None, reason=GPU_REASON or "")]

if GPU_REASON is None:
    import cupy as cp


def test_s3_multipart_from_gpu_memory_is_byte_exact(s3):
    _, client = s3
    data = pattern(21 * MiB + 7, 21)
    dev = cp.asarray(data)
    with gpufile.defaults.set({"remote_part_size": 5 * MiB, "num_threads": 4, "compat_mode": "on"}):
        with gpufile.RemoteFile.open("s3://bkt/gpu.bin", mode="w") as f:
            assert f.write(dev) == len(data)
    assert stored(client, "gpu.bin") == data.tobytes()
    assert client.head_object(Bucket="bkt", Key="gpu.bin")["ETag"].strip('"').endswith("-5")
    assert uploads_left(client) == []


def test_s3_gpu_parts_larger_than_the_bounce_buffer_are_collected(s3):
    _, client = s3
    data = pattern(13 * MiB + 1, 22)
    dev = cp.asarray(data)
    settings = {"remote_part_size": 6 * MiB, "bounce_buffer_size": 1 * MiB, "compat_mode": "on"}
    with gpufile.defaults.set(settings):
        with gpufile.RemoteFile.open_s3("bkt", "gpu-pieces.bin", mode="w") as f:
            futs = [f.pwrite(dev[7 * MiB :], file_offset=7 * MiB), f.pwrite(dev[: 7 * MiB], file_offset=0)]
            assert sum(x.get() for x in futs) == len(data)
    assert stored(client, "gpu-pieces.bin") == data.tobytes()


def test_an_exception_during_a_gpu_write_aborts(s3):
    _, client = s3
    dev = cp.asarray(pattern(11 * MiB, 23))
    with gpufile.defaults.set("remote_part_size", 5 * MiB):
        with pytest.raises(ZeroDivisionError):
            with gpufile.RemoteFile.open("s3://bkt/gpu-aborted.bin", mode="w") as f:
                f.write(dev)
                1 / 0
    assert uploads_left(client) == []


def test_http_put_from_gpu_memory(tmp_path):
    data = pattern(3 * MiB + 5, 24)
    with LocalHttpServer(tmp_path, max_lifetime=60) as server:
        with gpufile.RemoteFile.open_http(f"{server.url}/g.bin", mode="w") as f:
            f.write(cp.asarray(data))
    assert (tmp_path / "g.bin").read_bytes() == data.tobytes()


def test_load_checkpoint_from_s3_into_gpu_memory(s3, checkpoint_dir, monkeypatch):  # noqa: F811
    import boto3
    import os

    root, expected, _ = checkpoint_dir
    endpoint, _ = s3
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    client.create_bucket(Bucket="models")
    for n in os.listdir(root / "sharded"):
        client.upload_file(str(root / "sharded" / n), "models", f"sharded/{n}")
    from gpufile.safetensors import load_checkpoint

    got = load_checkpoint("s3://models/sharded/", device="cuda:0", framework="cupy")
    check({k: cp.asnumpy(v) for k, v in got.items()}, expected)
