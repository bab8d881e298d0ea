"""GPU memory through gpufile's POSIX path, with CuPy, PyTorch and raw driver allocations.

Run on a machine with an NVIDIA GPU and CuPy (`pytest -m gpu`); elsewhere every test here skips
with the reason.
"""

import ctypes
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import gpufile
from gpufile import defaults
from conftest import gpu_reason, pattern, time_scale


REASON = gpu_reason()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(REASON is not None, reason=REASON or "")]

if REASON is None:
    import cupy as cp


@pytest.fixture(autouse=True)
def _posix_path():
    """This suite tests gpufile's own device path: compat_mode ON wherever the path matters."""
    with defaults.set("compat_mode", "on"):
        yield


@pytest.mark.parametrize("nbytes", [1, 4095, 4097, 1 << 20, (16 << 20) + 3, (40 << 20) + 1])
@pytest.mark.parametrize("task_size", [199 * 1024, 1 << 20, 4 << 20])
def test_cupy_round_trip(tmp_path, nbytes, task_size):
    data = pattern(nbytes, nbytes ^ task_size)
    path = tmp_path / "d.bin"
    data.tofile(path)
    dev = cp.zeros(nbytes, dtype=cp.uint8)
    with gpufile.CuFile(path, "r") as f:
        assert f.read(dev, task_size=task_size) == nbytes
    np.testing.assert_array_equal(cp.asnumpy(dev), data)
    out = tmp_path / "out.bin"
    with gpufile.CuFile(out, "w") as f:
        assert f.write(dev, task_size=task_size) == nbytes
    np.testing.assert_array_equal(np.fromfile(out, dtype=np.uint8), data)


@pytest.mark.parametrize("mode", ["on", "auto"])
def test_spec_step3_with_cupy(tmp_path, mode):
    file_path = tmp_path / "kvikio-example.bin"
    data = pattern(64 << 20, 5)
    data.tofile(file_path)
    with defaults.set("compat_mode", mode):
        gpu_buffer = cp.empty(file_path.stat().st_size, dtype=cp.uint8)
        with gpufile.CuFile(file_path, "r") as file:
            bytes_read = file.read(gpu_buffer)
            backend, reason = file.io_path
        assert bytes_read == gpu_buffer.nbytes
    np.testing.assert_array_equal(cp.asnumpy(gpu_buffer), data)
    assert backend == "gpufile-posix"
    assert reason == ("compat_mode is ON" if mode == "on" else "nvidia-fs not loaded")


def test_small_bounce_buffers_many_chunks(tmp_path):
    data = pattern((5 << 20) + 7, 8)
    path = tmp_path / "d.bin"
    data.tofile(path)
    dev = cp.zeros(data.size, dtype=cp.uint8)
    with defaults.set({"bounce_buffer_size": 64 << 10, "num_threads": 3}):
        with gpufile.CuFile(path) as f:
            f.read(dev, task_size=1 << 20)
        np.testing.assert_array_equal(cp.asnumpy(dev), data)
        with gpufile.CuFile(tmp_path / "w.bin", "w") as f:
            f.write(dev, task_size=(1 << 20) + 5)
    np.testing.assert_array_equal(np.fromfile(tmp_path / "w.bin", dtype=np.uint8), data)


def test_offsets_and_device_slices(tmp_path):
    data = pattern(1 << 20, 9)
    path = tmp_path / "d.bin"
    data.tofile(path)
    dev = cp.zeros(1 << 20, dtype=cp.uint8)
    with gpufile.CuFile(path) as f:
        assert f.read(dev[1000:501000], file_offset=333) == 500000
        assert f.read(dev[600000:], size=4097, file_offset=77777) == 4097
    host = cp.asnumpy(dev)
    np.testing.assert_array_equal(host[1000:501000], data[333:500333])
    np.testing.assert_array_equal(host[600000:604097], data[77777:81874])
    assert not host[:1000].any() and not host[501000:600000].any() and not host[604097:].any()
    with gpufile.CuFile(path, "r+") as f:
        f.write(dev[1000:2000], file_offset=10)
    expect = data.copy()
    expect[10:1010] = data[333:1333]
    np.testing.assert_array_equal(np.fromfile(path, dtype=np.uint8), expect)


@pytest.mark.parametrize("dtype", ["float32", "int64", "float16"])
def test_dtypes_and_2d(tmp_path, dtype):
    a = cp.arange(3 * 1024 * 257, dtype=dtype).reshape(3 * 1024, 257)
    path = tmp_path / "a.bin"
    with gpufile.CuFile(path, "w") as f:
        assert f.write(a) == a.nbytes
    np.testing.assert_array_equal(np.fromfile(path, dtype=dtype).reshape(a.shape), cp.asnumpy(a))
    b = cp.empty_like(a)
    with gpufile.CuFile(path) as f:
        f.read(b)
    assert bool((a == b).all())


def test_torch_tensors(tmp_path):
    torch = pytest.importorskip("torch")
    data = pattern((3 << 20) + 11, 10)
    path = tmp_path / "t.bin"
    data.tofile(path)
    t = torch.zeros(data.size, dtype=torch.uint8, device="cuda")
    with gpufile.CuFile(path) as f:
        assert f.read(t) == data.size
    np.testing.assert_array_equal(t.cpu().numpy(), data)
    f32 = torch.arange(1 << 20, dtype=torch.float32, device="cuda")
    with gpufile.CuFile(tmp_path / "f.bin", "w") as f:
        f.write(f32)
    np.testing.assert_array_equal(np.fromfile(tmp_path / "f.bin", dtype=np.float32),
                                  np.arange(1 << 20, dtype=np.float32))


def test_managed_memory(tmp_path):
    data = pattern(3 << 20, 11)
    path = tmp_path / "m.bin"
    data.tofile(path)
    mem = cp.cuda.ManagedMemory(data.size)
    arr = cp.ndarray(data.size, dtype=cp.uint8, memptr=cp.cuda.MemoryPointer(mem, 0))
    with gpufile.CuFile(path) as f:
        assert f.read(arr) == data.size
    cp.cuda.runtime.deviceSynchronize()
    np.testing.assert_array_equal(cp.asnumpy(arr), data)


def test_cai_stream_is_waited_for(tmp_path):
    """Work queued on the array's stream finishes before gpufile writes into the array."""
    data = pattern(64 << 20, 12)
    path = tmp_path / "s.bin"
    data.tofile(path)
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        dev = cp.empty(data.size, dtype=cp.uint8)
        for _ in range(20):
            dev.fill(7)  # queued on `stream`, still running when the read starts
        assert dev.__cuda_array_interface__.get("stream") == stream.ptr
        with gpufile.CuFile(path) as f:
            f.read(dev)
    stream.synchronize()
    np.testing.assert_array_equal(cp.asnumpy(dev), data)


@pytest.mark.parametrize("how", ["pread", "read_batch", "raw_read"])
def test_cai_stream_is_waited_for_by_every_read(tmp_path, how):
    """The wait for a busy producer stream is left to the workers: the data that lands is the
    file's, never the producer's, whatever entry point made the request."""
    data = pattern(32 << 20, 13)
    path = tmp_path / "s.bin"
    data.tofile(path)
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        dev = cp.empty(data.size, dtype=cp.uint8)
        for _ in range(20):
            dev.fill(7)  # still running on `stream` when the read is made
        with gpufile.CuFile(path) as f:
            if how == "pread":
                assert f.pread(dev).get() == data.size
            elif how == "read_batch":
                assert gpufile.read_batch([(f, dev, data.size, 0)]).get() == data.size
            else:
                assert f.raw_read(dev) == data.size
    stream.synchronize()
    np.testing.assert_array_equal(cp.asnumpy(dev), data)


def test_cai_stream_is_waited_for_before_a_write(tmp_path):
    """A write copies the array only after the work queued on its stream: the file gets the
    last value the producer wrote."""
    path = tmp_path / "w.bin"
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        dev = cp.zeros(32 << 20, dtype=cp.uint8)
        for v in range(1, 21):
            dev.fill(v)
        with gpufile.CuFile(path, "w") as f:
            assert f.write(dev) == dev.size
    stream.synchronize()
    got = np.fromfile(path, dtype=np.uint8)
    assert got.size == dev.size and (got == 20).all()


def test_per_thread_default_stream_is_waited_for(tmp_path):
    """Stream 2 (per-thread default) names another stream on every thread: it is waited for on
    the caller's thread, before the workers start."""
    data = pattern(32 << 20, 14)
    path = tmp_path / "p.bin"
    data.tofile(path)
    with cp.cuda.Stream.ptds:
        dev = cp.empty(data.size, dtype=cp.uint8)
        for _ in range(20):
            dev.fill(7)
        assert dev.__cuda_array_interface__.get("stream") == 2
        with gpufile.CuFile(path) as f:
            assert f.pread(dev).get() == data.size
        cp.cuda.Stream.ptds.synchronize()
    np.testing.assert_array_equal(cp.asnumpy(dev), data)


def _batch_into_slices(path, dev, size):
    """read_batch entries: `path` in `size` pieces, each into its own slice of `dev`."""
    return [(path, dev[i:i + size], size, i) for i in range(0, dev.size, size)]


def test_cai_stream_may_be_destroyed_once_the_read_is_submitted(tmp_path):
    """A producer may destroy its stream as soon as the read is submitted (CuPy does when the
    Stream object goes): the runs that start later wait for what was queued on it at the
    submit, never use the gone stream's handle, and the data is the file's."""
    size = 1 << 20
    data = pattern(256 * size, 15)
    path = tmp_path / "d.bin"
    data.tofile(path)
    dev = cp.empty(data.size, dtype=cp.uint8)
    stream = cp.cuda.Stream(non_blocking=True)
    # 256 runs (a request each): most start after the destroy, whatever the pool's size.
    with defaults.set("num_threads", 4):
        with stream:
            for _ in range(3):
                dev.fill(7)
            fut = gpufile.read_batch(_batch_into_slices(path, dev, size))
        del stream  # CuPy destroys the stream here (the driver frees it when its work is done)
        assert fut.get() == data.size
    np.testing.assert_array_equal(cp.asnumpy(dev), data)


def test_work_queued_after_the_submit_is_not_waited_for(tmp_path):
    """CUDA Array Interface v3: the consumer waits for the work queued on the stream when it
    takes the array, not for work queued later. Here the later work is a consumer on the same
    stream that waits for the read itself: waiting for it too would never end."""
    size = 1 << 20
    data = pattern(256 * size, 16)
    path = tmp_path / "d.bin"
    data.tofile(path)
    dev = cp.empty(data.size, dtype=cp.uint8)
    stream = cp.cuda.Stream(non_blocking=True)
    gate = threading.Event()
    with defaults.set("num_threads", 4):
        with stream:
            for _ in range(20):
                dev.fill(7)
            fut = gpufile.read_batch(_batch_into_slices(path, dev, size))
            stream.launch_host_func(lambda _: gate.wait(60), None)
        try:
            deadline = time.monotonic() + 20
            while not fut.done() and time.monotonic() < deadline:
                time.sleep(0.01)
            assert fut.done(), "the read waited for work queued after it was submitted"
        finally:
            gate.set()
        assert fut.get() == data.size
    stream.synchronize()
    np.testing.assert_array_equal(cp.asnumpy(dev), data)


def test_calls_that_never_touch_the_bytes_do_not_wait_for_the_stream(tmp_path):
    """`io_path_for` (and `memory_register`, through the same view) looks at where an array
    lives, not at its bytes: a stream held up by a host function does not hold it up."""
    path = tmp_path / "p.bin"
    pattern(1 << 20, 17).tofile(path)
    stream = cp.cuda.Stream(non_blocking=True)
    gate = threading.Event()
    with stream:
        dev = cp.zeros(1 << 20, dtype=cp.uint8)
        stream.launch_host_func(lambda _: gate.wait(60), None)
        assert dev.__cuda_array_interface__.get("stream") == stream.ptr
        timer = threading.Timer(20, gate.set)  # never leave the stream blocked
        timer.start()
        try:
            t0 = time.monotonic()
            with gpufile.CuFile(path) as f:
                assert f.io_path_for(dev)[0] in ("gpufile-posix", "cufile")
            assert time.monotonic() - t0 < 10 * time_scale(), "waited for the producer's stream"
        finally:
            gate.set()
            timer.cancel()
    stream.synchronize()


class _PinnedCAI:
    """A CUDA Array Interface (v3, with a stream) over page-locked host memory."""

    def __init__(self, host, stream):
        self.host = host
        self.__cuda_array_interface__ = {
            "shape": (host.nbytes,), "typestr": "|u1", "data": (host.ctypes.data, False),
            "version": 3, "strides": None, "stream": stream.ptr,
        }


def test_pinned_host_cai_is_written_after_its_stream(tmp_path):
    """Pinned host memory behind a CUDA Array Interface takes the host path, inline on the
    calling thread for one task: that path too waits for the producer's stream first."""
    n = 32 << 20
    pinned = cp.cuda.alloc_pinned_memory(n)
    host = np.frombuffer(pinned, dtype=np.uint8, count=n)
    host[:] = 0
    dev = cp.empty(n, dtype=cp.uint8)
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        for v in range(1, 21):
            dev.fill(v)
            cp.cuda.runtime.memcpyAsync(host.ctypes.data, dev.data.ptr, n,
                                        cp.cuda.runtime.memcpyDeviceToHost, stream.ptr)
        buf = _PinnedCAI(host, stream)
        with gpufile.CuFile(tmp_path / "p.bin", "w") as f:
            assert f.raw_write(buf) == n  # one task, host memory: runs on this thread
    stream.synchronize()
    got = np.fromfile(tmp_path / "p.bin", dtype=np.uint8)
    assert got.size == n and (got == 20).all()


class _RawDeviceArray:
    """A CUDA Array Interface over a raw cuMemAlloc pointer."""

    def __init__(self, ptr, nbytes):
        self.__cuda_array_interface__ = {
            "shape": (nbytes,), "typestr": "|u1", "data": (ptr, False), "version": 3,
            "strides": None, "stream": None,
        }


def test_buffer_on_a_context_that_is_not_current(tmp_path):
    """A buffer of a context the calling thread does not have current is still read right."""
    cu = ctypes.CDLL("libcuda.so.1")
    data = pattern((2 << 20) + 1, 13)
    path = tmp_path / "c.bin"
    data.tofile(path)
    dev, ctx, ptr = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
    assert cu.cuInit(0) == 0
    assert cu.cuDeviceGet(ctypes.byref(dev), 0) == 0
    assert cu.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev) == 0  # a new, non-primary context
    try:
        assert cu.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(data.size)) == 0
        popped = ctypes.c_void_p()
        assert cu.cuCtxPopCurrent_v2(ctypes.byref(popped)) == 0  # not current any more
        result = {}

        def read_from_another_thread():
            with gpufile.CuFile(path) as f:
                result["n"] = f.read(_RawDeviceArray(ptr.value, data.size), task_size=1 << 20)

        t = threading.Thread(target=read_from_another_thread)
        t.start()
        t.join()
        assert result["n"] == data.size
        back = np.empty_like(data)
        assert cu.cuCtxPushCurrent_v2(ctx) == 0
        assert cu.cuMemcpyDtoH_v2(back.ctypes.data_as(ctypes.c_void_p), ptr,
                                  ctypes.c_size_t(data.size)) == 0
        np.testing.assert_array_equal(back, data)
        cu.cuMemFree_v2(ptr)
    finally:
        cu.cuCtxDestroy_v2(ctx)


def test_range_past_the_allocation_is_refused(tmp_path):
    path = tmp_path / "d.bin"
    pattern(1 << 20).tofile(path)
    mem = cp.cuda.Memory(1 << 20)  # one cudaMalloc of its own (CuPy's pool would hide the end)
    dev = cp.ndarray(1 << 20, dtype=cp.uint8, memptr=cp.cuda.MemoryPointer(mem, 0))
    dev.fill(0)
    liar = _RawDeviceArray(mem.ptr + 4096, 1 << 20)  # claims 4 KiB more than exists
    with gpufile.CuFile(path) as f:
        with pytest.raises(ValueError, match="past the end of their allocation"):
            f.read(liar)
    assert not dev.any()


def test_device_errors_leave_buffers_alone(tmp_path):
    path = tmp_path / "d.bin"
    pattern(1000).tofile(path)
    dev = cp.full(2000, 5, dtype=cp.uint8)
    with gpufile.CuFile(path) as f:
        with pytest.raises(gpufile.EndOfFileError):
            f.read(dev)
        with pytest.raises(ValueError, match="contiguous"):
            f.read(dev[::2])
        with pytest.raises(ValueError, match="larger than the buffer"):
            f.read(dev[:10], size=11)
    assert bool((dev == 5).all())
    big = tmp_path / "big.bin"
    pattern(1 << 20).tofile(big)
    dev = cp.full(1 << 20, 5, dtype=cp.uint8)
    with defaults.set("compat_mode", "off"), gpufile.CuFile(big) as f:
        with pytest.raises(gpufile.CufileError, match="compat_mode is OFF"):
            f.read(dev)
        assert bool((dev == 5).all())
        # below gds_threshold, OFF still reads through gpufile's path, as in KvikIO
        assert f.read(dev[:100]) == 100
        assert f.io_path_for(dev[:100]) == ("gpufile-posix", "request smaller than gds_threshold")


def test_small_hot_reads_and_a_file_that_changes_under_an_open_handle(tmp_path):
    """Chunks up to 1 MiB of hot files reach the GPU through a mapping of the file (copied past
    the CPU's caches): the bytes are the file's, a shrunk file fails as a pread would, a grown
    one is read in full."""
    path = tmp_path / "m.bin"
    data = pattern(4 << 20, 21)
    data.tofile(path)
    dev = cp.zeros(1 << 20, dtype=cp.uint8)
    with gpufile.CuFile(path, "r") as f:
        for size, off in ((1, 0), (4097, 12345), (65536, 1 << 20), (1 << 20, 3 << 20)):
            assert f.pread(dev[:size], size, off).get() == size
            np.testing.assert_array_equal(cp.asnumpy(dev[:size]), data[off:off + size])
        os.truncate(path, 8192)
        dev.fill(5)
        with pytest.raises(gpufile.EndOfFileError):
            f.pread(dev[:65536], 65536, 4096).get()
        with open(path, "r+b") as w:
            w.truncate(0)
            (data[::-1]).tofile(w)
        assert f.pread(dev[:65536], 65536, (4 << 20) - 65536).get() == 65536
        np.testing.assert_array_equal(cp.asnumpy(dev[:65536]), data[::-1][-65536:])


def test_a_read_alone_is_cut_for_every_worker_and_one_beside_others_is_not(tmp_path):
    """A device read with no other request in flight is cut into 256 KiB pieces (a 4 MiB read:
    16 tasks for 16 workers); beside a request in flight it keeps 1 MiB pieces (4 tasks). The
    path report's task count says which."""
    path = tmp_path / "a.bin"
    data = pattern(4 << 20, 23)
    data.tofile(path)
    dev = cp.zeros(data.size, dtype=cp.uint8)
    with defaults.set("num_threads", 16), gpufile.CuFile(path) as f:
        with gpufile.observe() as alone:
            assert f.read(dev) == data.size
        assert alone.report.paths["gpufile-posix"]["tasks"] == 16
        np.testing.assert_array_equal(cp.asnumpy(dev), data)
        # A request held in flight: its producer's stream is blocked by a host function.
        stream = cp.cuda.Stream(non_blocking=True)
        gate = threading.Event()
        timer = threading.Timer(20, gate.set)  # never leave the stream blocked
        timer.start()
        try:
            with stream:
                held = cp.zeros(1 << 20, dtype=cp.uint8)
                stream.launch_host_func(lambda _: gate.wait(60), None)
                first = f.pread(held, held.size, 0)
            dev.fill(0)
            with gpufile.observe() as beside:
                assert f.read(dev) == data.size
            assert not first.done(), "the first request must still be in flight"
            assert beside.report.paths["gpufile-posix"]["tasks"] == 4
        finally:
            gate.set()
            timer.cancel()
        assert first.get() == held.size
        np.testing.assert_array_equal(cp.asnumpy(dev), data)
        np.testing.assert_array_equal(cp.asnumpy(held), data[:held.size])


def test_truncation_racing_small_reads_never_kills_the_process(tmp_path):
    """A file cut short under small reads (which go through each worker's cache-resident buffer):
    each read returns the file's bytes or fails with a typed error, in a child process so that a
    crash fails this test instead of the run."""
    code = f"""
import os, threading, numpy as np, cupy as cp, gpufile
from gpufile import defaults
path = {str(tmp_path / "race.bin")!r}
data = (np.arange(8 << 20) % 251).astype(np.uint8)
defaults.set("compat_mode", "on")
stop = threading.Event()
def cutter():
    while not stop.is_set():
        os.truncate(path, 1 << 20)
        with open(path, "r+b") as w:
            w.seek(0); data.tofile(w)
ok = err = 0
data.tofile(path)
f = gpufile.CuFile(path, "r")
t = threading.Thread(target=cutter); t.start()
dev = cp.zeros(1 << 20, dtype=cp.uint8)
for i in range(3000):
    off = (i * 7919 % 7) << 20
    try:
        f.pread(dev, 1 << 20, off).get()
        got = cp.asnumpy(dev)
        # The cutter rewrites the same bytes: a read that succeeds has the file's bytes.
        assert (got == data[off:off + (1 << 20)]).all(), off
        ok += 1
    except (gpufile.EndOfFileError, OSError):
        err += 1
stop.set(); t.join(); f.close()
print("done", ok, err)
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, (p.returncode, p.stderr[-2000:])
    assert p.stdout.startswith("done"), p.stdout
    assert int(p.stdout.split()[1]) > 0, p.stdout  # offset 0 is always there


def test_pread_futures_into_device(tmp_path):
    data = pattern(32 << 20, 14)
    path = tmp_path / "p.bin"
    data.tofile(path)
    dev = cp.zeros(data.size, dtype=cp.uint8)
    with gpufile.CuFile(path) as f:
        futs = [f.pread(dev[i:i + (8 << 20)], file_offset=i) for i in range(0, 32 << 20, 8 << 20)]
        assert sum(x.get() for x in futs) == data.size
    np.testing.assert_array_equal(cp.asnumpy(dev), data)


def test_bounce_buffers_are_pooled_and_freed(tmp_path):
    path = tmp_path / "d.bin"
    pattern(8 << 20).tofile(path)
    dev = cp.empty(8 << 20, dtype=cp.uint8)
    with gpufile.CuFile(path) as f:
        f.read(dev)
    assert gpufile.buffer.bounce_buffer_pooled() > 0
    assert gpufile.bounce_buffer_free() > 0
    assert gpufile.buffer.bounce_buffer_pooled() == 0
    with gpufile.CuFile(path) as f:  # and they come back on demand
        f.read(dev)


def test_clean_exit_with_pending_device_io(tmp_path):
    path = tmp_path / "d.bin"
    pattern(64 << 20).tofile(path)
    code = (
        "import cupy as cp, gpufile\n"
        "gpufile.defaults.set('compat_mode', 'on')\n"
        f"f = gpufile.CuFile({str(path)!r})\n"
        "a = cp.empty(64 << 20, dtype=cp.uint8)\n"
        "fut = f.pread(a, task_size=1 << 20)\n"
        "print('started')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "started"


class _DlpackOnly:
    """Exposes only the DLPack protocol of the wrapped array (as JAX arrays do)."""

    def __init__(self, arr):
        self._arr = arr

    def __dlpack__(self, stream=None):
        return self._arr.__dlpack__(stream=stream)

    def __dlpack_device__(self):
        return self._arr.__dlpack_device__()


def test_dlpack_intake(tmp_path):
    torch = pytest.importorskip("torch")
    data = pattern((2 << 20) + 3, 21)
    path = tmp_path / "dl.bin"
    data.tofile(path)
    t = torch.zeros(data.size, dtype=torch.uint8, device="cuda")
    with gpufile.CuFile(path) as f:
        assert f.read(_DlpackOnly(t)) == data.size
        assert f.read(_DlpackOnly(t[1000:2000]), file_offset=5) == 1000
    expect = data.copy()
    expect[1000:2000] = data[5:1005]
    np.testing.assert_array_equal(t.cpu().numpy(), expect)
    with pytest.raises(ValueError, match="contiguous"):
        with gpufile.CuFile(path) as f:
            f.read(_DlpackOnly(t[::2]))


def test_jax_arrays_through_dlpack(tmp_path):
    pytest.importorskip("jax")
    data = pattern(1 << 20, 22)
    src = tmp_path / "j.bin"
    data.tofile(src)
    code = f"""
import os
os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
import jax, jax.numpy as jnp, numpy as np, gpufile
gpufile.defaults.set("compat_mode", "on")
x = jnp.asarray(np.fromfile({str(src)!r}, dtype=np.uint8), device=jax.devices("gpu")[0])
with gpufile.CuFile({str(tmp_path / 'out.bin')!r}, "w") as f:
    print(f.write(x))
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    if r.returncode != 0 and "gpu" in r.stderr.lower() and "backend" in r.stderr.lower():
        pytest.skip("JAX has no GPU backend here")
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == str(data.size)
    np.testing.assert_array_equal(np.fromfile(tmp_path / "out.bin", dtype=np.uint8), data)
