import ctypes
import functools
import os
import subprocess
import sys

import numpy as np
import pytest

import gpufile


@functools.cache
def driver_reason() -> str | None:
    """Why the CUDA driver offers no GPU here (None: it has at least one device). Asked of the
    driver itself, so that a machine without a GPU says so whether CuPy is installed or not."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return "no GPU: libcuda.so.1, the NVIDIA driver, does not load"
    count = ctypes.c_int(0)
    rc = cuda.cuInit(0)
    if rc == 0:
        rc = cuda.cuDeviceGetCount(ctypes.byref(count))
    if rc == 100:  # CUDA_ERROR_NO_DEVICE
        return "no GPU: the CUDA driver finds no device"
    if rc != 0:
        return f"no GPU: the CUDA driver fails to start (CUresult {rc})"
    if count.value < 1:
        return "no GPU: the CUDA driver finds no device"
    return None


def gpu_reason() -> str | None:
    """Why the GPU tests cannot run here: no GPU, or no CuPy to hand it arrays (None: CuPy sees
    a CUDA device)."""
    reason = driver_reason()
    if reason is not None:
        return reason
    try:
        import cupy
    except ImportError:
        return "CuPy is not installed (this machine has a GPU)"
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return "no GPU: CuPy finds no CUDA device"
    except Exception as e:  # CuPy's CUDA runtime does not work with this driver
        return f"CuPy cannot use the GPU ({e.__class__.__name__}: {e})"
    return None


def pattern(nbytes: int, seed: int = 0) -> np.ndarray:
    """Bytes that differ at every task boundary used in the tests."""
    return np.random.default_rng(seed).integers(0, 256, nbytes, dtype=np.uint8)


@pytest.fixture
def data_file(tmp_path):
    """make(nbytes, seed) -> (path, bytes written)."""

    def make(nbytes: int, seed: int = 0):
        data = pattern(nbytes, seed)
        path = tmp_path / f"data-{nbytes}-{seed}.bin"
        data.tofile(path)
        return path, data

    return make


def run_python(code: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """Runs code in a fresh interpreter (settings read the environment once per process)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("KVIKIO_", "GPUFILE_"))}
    clean.update(env or {})
    return subprocess.run([sys.executable, "-c", code], env=clean, capture_output=True,
                          text=True, timeout=120)


TMP_PREFIX = ".gpufile-tmp-"


def interrupt_when(started, code: str, what: str) -> tuple[str, str, float]:
    """Runs ``code`` in a Python subprocess and sends it SIGINT 0.3 s after ``started`` is set
    (the request it waits for has reached the server): (its stdout, stderr, seconds from SIGINT
    to exit). Fails the test when it is still running 20 s after the signal (``what`` says
    doing what)."""
    import signal
    import time

    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        assert started.wait(60), "the request never reached the server"
        time.sleep(0.3)
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            out = err = None
        if out is None:
            pytest.fail(f"still {what} 20 s after Ctrl-C")
        return out.decode(), err.decode(), time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def kill_during_a_save(proc, directory: str, rng, round_: int, poll_s: float = 5.0) -> None:
    """SIGKILLs `proc`, a child saving into `directory` in a loop: on even rounds at a random
    moment (0-250 ms), on odd rounds as soon as one of its saves has a temporary open (then
    0-2 ms later), so that some kills land in the middle of a save however fast saves are on
    this machine. Waits for the child to end."""
    import signal
    import time

    if round_ % 2 == 0:
        time.sleep(rng.uniform(0.0, 0.25))
    else:
        old = {f for f in os.listdir(directory) if f.startswith(TMP_PREFIX)}
        deadline = time.monotonic() + poll_s
        while time.monotonic() < deadline:
            if any(f.startswith(TMP_PREFIX) and f not in old for f in os.listdir(directory)):
                time.sleep(rng.uniform(0.0, 0.002))
                break
    proc.send_signal(signal.SIGKILL)
    proc.wait()


@pytest.fixture(autouse=True)
def _restore_settings():
    """No test leaks settings into the next."""
    snapshot = gpufile._native.settings_snapshot()
    try:
        yield
    finally:
        snapshot.restore()


def set_s3_env(monkeypatch, endpoint: str, key_id: str, secret: str) -> None:
    """S3 credentials and endpoint in the environment for one test (no session token)."""
    for k, v in {
        "AWS_ACCESS_KEY_ID": key_id,
        "AWS_SECRET_ACCESS_KEY": secret,
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": endpoint,
    }.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)


@pytest.fixture(scope="module")
def moto_endpoint():
    """moto's S3 server on 127.0.0.1, one per test module (each module's buckets its own)."""
    import socket

    moto_server = pytest.importorskip("moto.server", reason="moto[server] is not installed")
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()
