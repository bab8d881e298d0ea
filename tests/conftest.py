import ctypes
import functools
import math
import os
import random
import re
import signal
import subprocess
import sys
import tempfile

import numpy as np
import pytest

import gpufile

# A run started in the background (nohup, `cmd &` in a script) inherits SIGINT ignored, and an
# ignored signal stays ignored across exec: the child interpreters that the Ctrl-C tests send
# SIGINT to would never see it, and those tests would fail for the launcher's sake. The suite
# takes Python's own handler back; the processes it starts then get SIGINT's default.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


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


NOBODY = 65534  # the unprivileged user and group of Debian and most distributions


def without_root(fn) -> None:
    """Runs ``fn()`` as a user that file permission bits apply to: here where this process is not
    root, else in a forked child that drops root first (uid and gid 65534, no groups, so no
    capability either); a failure or exception in the child fails the test with its traceback."""
    import traceback

    if os.geteuid() != 0:
        fn()
        return
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        status = 0
        try:
            os.close(r)
            os.setgroups([])
            os.setresgid(NOBODY, NOBODY, NOBODY)
            os.setresuid(NOBODY, NOBODY, NOBODY)
            fn()
        except BaseException:
            status = 1
            os.write(w, traceback.format_exc().encode())
        finally:
            os._exit(status)
    os.close(w)
    with os.fdopen(r, "rb") as pipe:
        out = pipe.read().decode(errors="replace")
    _, status = os.waitpid(pid, 0)
    if status != 0:
        pytest.fail(f"as uid {NOBODY} (dropped from root in a forked child):\n{out}",
                    pytrace=False)


# The temporary directory as the run found it: folders other users must reach are made here
# (the run's own folder is root's alone) and removed by the fixtures that make them.
SHARED_TMP = tempfile.gettempdir()

# What the run writes to the temporary directory goes into a folder of its own, in this process
# and the ones it starts: the tests' files, pytest's tmp_path folders, and what libraries put
# there for them (dask's scratch space, PyG's generated modules, torch's compile cache, made as
# early as collection). A passing run removes it, so a test run leaves the user's TMPDIR as it
# was (scripts/test.sh checks); a failing one keeps it for a look and says where.
RUN_TMP = tempfile.mkdtemp(prefix="gpufile-test-run-", dir=SHARED_TMP)
tempfile.tempdir = RUN_TMP
os.environ["TMPDIR"] = RUN_TMP


_run_passed = []  # set by pytest_sessionfinish below


def pytest_unconfigure(config):
    # After pytest's own clean-up of its folders, which sit inside RUN_TMP.
    import shutil

    if _run_passed:
        shutil.rmtree(RUN_TMP, ignore_errors=True)
    else:
        print(f"\nthe run's temporary files are kept in {RUN_TMP}")


@pytest.fixture
def open_tmp_path():
    """A fresh folder every user may look into (pytest's tmp_path sits in root's private
    folder), for files a test opens after dropping root (without_root)."""
    import shutil
    from pathlib import Path

    d = tempfile.mkdtemp(prefix="gpufile-test-", dir=SHARED_TMP)
    os.chmod(d, 0o755)
    try:
        yield Path(d)
    finally:
        shutil.rmtree(d, ignore_errors=True)


TMP_PREFIX = ".gpufile-tmp-"


def interrupt_when(started, code: str, what: str) -> tuple[str, str, float]:
    """Runs ``code`` in a Python subprocess and sends it SIGINT 0.3 s after ``started`` is set
    (the request it waits for has reached the server): (its stdout, stderr, seconds from SIGINT
    to exit). Fails the test when it is still running 20 s (times time_scale()) after the
    signal (``what`` says doing what)."""
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
            out, err = proc.communicate(timeout=20 * time_scale())
        except subprocess.TimeoutExpired:
            out = err = None
        if out is None:
            pytest.fail(f"still {what} {20 * time_scale():g} s after Ctrl-C")
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


# --- How the run is judged: time limits, GPU tests that must run, allowed skips, shuffled order.
# The variables are the interface scripts/test.sh, .ci/run and scripts/device_round.sh use.


@functools.cache
def time_scale() -> float:
    """The factor every wall-clock limit in the tests is multiplied by: GPUFILE_TEST_TIME_SCALE
    (default 1), raised on a slow or loaded machine, where a fixed 50 ms or 1 s limit fails for
    want of a core and not for a fault of gpufile's."""
    raw = os.environ.get("GPUFILE_TEST_TIME_SCALE", "").strip() or "1"
    try:
        scale = float(raw)
    except ValueError:
        scale = math.nan
    if not (math.isfinite(scale) and scale > 0):
        raise pytest.UsageError(f"GPUFILE_TEST_TIME_SCALE={raw!r}: a number above 0, e.g. 3")
    return scale


def require_gpu() -> bool:
    """GPUFILE_REQUIRE_GPU=1 (on the GPU machine): a test skipped for want of a GPU, a CUDA
    driver or CuPy fails instead, showing the reason it would have skipped with."""
    return os.environ.get("GPUFILE_REQUIRE_GPU", "").strip() not in ("", "0")


def machine() -> str:
    """GPUFILE_TEST_MACHINE: which allow-list of skip reasons applies (cpu by default)."""
    name = os.environ.get("GPUFILE_TEST_MACHINE", "").strip() or "cpu"
    if name not in SKIPS_ALLOWED:
        raise pytest.UsageError(f"GPUFILE_TEST_MACHINE={name!r}: cpu or gpu")
    return name


# The skips a run may have, per machine: (a pattern searched for in the skip reason, why such a
# skip is no gap on that machine). Any other skip fails the run, listed at its end, so that a
# test which silently stopped running (a missing package, a fixture that cannot start) is seen.
# A skip for want of a GPU (GPU_MISSING) is also what GPUFILE_REQUIRE_GPU=1 turns into a failure.
GPU_MISSING = (r"\bno GPU\b|no CUDA device|CuPy is not installed|CuPy cannot use the GPU"
               r"|JAX has no GPU backend")
_TWO_GPUS = r"needs (2|two)( or more)? GPUs"
SKIPS_ALLOWED: dict[str, list[tuple[str, str]]] = {
    "cpu": [
        (GPU_MISSING, "the CPU machine has no GPU: the GPU tests run on the GPU machine, where "
                      "this skip is a failure"),
        (_TWO_GPUS, "the CPU machine has no GPU, let alone two"),
        (r"refuses O_DIRECT|takes O_DIRECT|keeps its pages \(tmpfs\?\)",
         "what they test (O_DIRECT reads, pages evicted) does not exist on a file system that "
         "has no O_DIRECT or keeps every page (tmpfs, some overlays), as a CI machine's "
         "temporary folder and checkout may be; the GPU machine's ext4 disk runs them"),
        (r"^nixl-cu13 \(NIXL's wheel\) is not installed|^NIXL's plugin headers are not here",
         "the GPUFILE plugin builds against NIXL's plugin headers, which only NIXL's source "
         "repository carries (not its wheel, not its crate) and which gpufile does not commit; "
         "CI reaches PyPI, crates.io and Debian but not GitHub, so it neither fetches them nor "
         "installs the 59 MB wheel whose agent the tests drive. Where a clone is at hand: "
         "pip install nixl-cu13==1.5.1, then scripts/nixl_headers.sh (docs/nixl.md)"),
        (r"needs unshare --uts",
         "a second host name needs root or a user namespace, which a CI runner may not grant "
         "(Ubuntu's AppArmor restricts unprivileged user namespaces); the GPU machine runs it "
         "as root"),
    ],
    "gpu": [
        (_TWO_GPUS, "the GPU round runs on one GPU; the two-GPU tests run on a two-GPU kind"),
        (r"^this machine has (a CUDA driver|libcufile|a GPU\b)|a CUDA device is present"
         r"|on a machine without a GPU$",
         "they test what gpufile does where there is no GPU, driver or libcufile: the CPU "
         "machine runs them"),
        (r"no gpufile entry point beside this interpreter",
         "the round installs the wheel with pip --target, which writes no console script; the "
         "CLI runs there as python -m gpufile, and the entry point is tested on the CPU machine"),
        (r"no libgpufile\.so under .*cargo test",
         "the GPU machine has no Rust toolchain to build the C library; the CPU machine runs it"),
        (r"the C and C\+\+ section needs .*cargo",
         "the README's C/C++ section builds with cargo, which the GPU machine lacks; the CPU "
         "machine runs it"),
        (r"^nixl-cu13 \(NIXL's wheel\) is not installed|^NIXL's plugin headers are not here",
         "the round carries gpufile's and KvikIO's wheels only (the carry limit is below NIXL's "
         "59 MB wheel): the GPUFILE plugin's tests run where NIXL's wheel and headers are "
         "(docs/nixl.md)"),
        (r"^mkdocs is not installed here",
         "the documentation site is built on the CPU machine (scripts/docs.sh)"),
        (r"^could not import '(moto|boto3|dask|distributed|dask_cuda|zarr|numcodecs|matplotlib"
         r"|huggingface_hub|cryptography)\b|^(moto\[server\]|dask\[array\]|distributed|dask_cuda"
         r"|zarr|cryptography|rclone|fake-gcs-server \(PyPI: [a-z-]+\)) is not installed",
         "the GPU machine has no network and the round carries gpufile's and KvikIO's wheels "
         "only (device_round.sh --extra DIR adds others): these integrations with CPU-side "
         "packages (object-store servers, Dask, Zarr, plots) run on the CPU machine"),
    ],
}


def pytest_configure(config):
    """A misspelt value of the run's variables stops the run before any test (even with -q,
    where the header that shows them is not printed)."""
    time_scale()
    machine()


def _skip_reason(report) -> str:
    """The reason a skipped report gives (pytest keeps it as "Skipped: REASON")."""
    longrepr = report.longrepr
    text = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return text.removeprefix("Skipped: ")


def skip_allowed(reason: str, machine: str) -> str | None:
    """Why a skip with `reason` is allowed on `machine`, or None where it is not."""
    for pattern_, why in SKIPS_ALLOWED[machine]:
        if re.search(pattern_, reason):
            return why
    return None


_SKIPPED: list[tuple[str, str]] = []  # (node id, reason) of every skip in this run


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.skipped and not hasattr(report, "wasxfail"):
        reason = _skip_reason(report)
        if require_gpu() and re.search(GPU_MISSING, reason):
            report.outcome = "failed"
            report.longrepr = (f"GPUFILE_REQUIRE_GPU=1, and this test would have skipped for "
                               f"want of a GPU: {reason}")
        else:
            _SKIPPED.append((report.nodeid, reason))
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector):
    report = yield
    if report.skipped:  # a whole module skipped (importorskip, allow_module_level)
        _SKIPPED.append((report.nodeid, _skip_reason(report)))
    return report


def _skips_not_allowed() -> list[tuple[str, str]]:
    """The skips of this run that fail it: a reason not on the machine's list, and with
    GPUFILE_REQUIRE_GPU=1 a whole module skipped for want of a GPU (a test's own such skip has
    already failed it)."""
    here = machine()
    return [(node, reason) for node, reason in _SKIPPED
            if skip_allowed(reason, here) is None
            or (require_gpu() and re.search(GPU_MISSING, reason))]


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session, exitstatus):
    if _skips_not_allowed() and exitstatus in (pytest.ExitCode.OK,
                                               pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if session.exitstatus == pytest.ExitCode.OK:
        _run_passed.append(True)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    tr = terminalreporter
    seed = _shuffle_seed()
    if seed is not None:  # also where -q left the header out
        tr.line(f"test order shuffled with GPUFILE_TEST_SHUFFLE={seed}: the same seed gives the "
                f"same order")
    bad = _skips_not_allowed()
    if bad:
        tr.section(f"skips not allowed on the {machine()} machine (conftest.SKIPS_ALLOWED)",
                   red=True)
        for node, reason in bad:
            tr.line(f"{node}: {reason}", red=True)
        tr.line(f"{len(bad)} skip(s) not allowed here: the run fails", red=True)


def _shuffle_seed() -> str | None:
    seed = os.environ.get("GPUFILE_TEST_SHUFFLE", "").strip()
    return seed or None


def pytest_report_header(config):
    lines = [f"gpufile: GPUFILE_TEST_MACHINE={machine()}, "
             f"GPUFILE_REQUIRE_GPU={int(require_gpu())}, GPUFILE_TEST_TIME_SCALE={time_scale():g}"]
    seed = _shuffle_seed()
    if seed is not None:
        lines.append(f"gpufile: test order shuffled with GPUFILE_TEST_SHUFFLE={seed} "
                     f"(the same seed gives the same order)")
    return lines


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session, config, items):
    """GPUFILE_TEST_SHUFFLE=SEED: the modules in an order drawn from SEED, and each module's
    tests too, so that a test that passes only after another is found. A module's tests stay
    together (its module-scoped fixtures, servers among them, start once), and so do a class's."""
    seed = _shuffle_seed()
    if seed is None:
        return
    rng = random.Random(seed)
    modules: dict[str, dict[object, list]] = {}
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        # a class's tests are one block; every other test a block of its own
        cls = getattr(item, "cls", None)
        key = cls if cls is not None else item.nodeid
        modules.setdefault(module, {}).setdefault(key, []).append(item)
    order = list(modules)
    rng.shuffle(order)
    shuffled = []
    for module in order:
        blocks = list(modules[module].values())
        rng.shuffle(blocks)
        for block in blocks:
            rng.shuffle(block)
            shuffled.extend(block)
    items[:] = shuffled
