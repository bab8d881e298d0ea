"""Stream-ordered raw_read_async / raw_write_async on a GPU: the call returns at once, the
transfer runs after the work queued before it, the work queued after it sees its result, errors
end the future, and many transfers on one stream keep their order. Each test runs with every
order the device can do ("wait-value", "host-function"), forced through the native call.

Run on a machine with an NVIDIA GPU and CuPy (`pytest -m gpu`); elsewhere every test here skips
with the reason.
"""

import os
import threading
import time

import numpy as np
import pytest

import gpufile
from gpufile import defaults
from gpufile.aio import gather
from gpufile.cufile import IOFutureStream
from conftest import gpu_reason, pattern, time_scale

REASON = gpu_reason()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(REASON is not None, reason=REASON or "")]

if REASON is None:
    import cupy as cp

    # Spins for `ns` nanoseconds of the GPU's global timer, then writes `value` into out[0..n):
    # work that is still running when the host queues what follows it.
    _SPIN = cp.RawKernel(
        r"""
        extern "C" __global__ void spin(unsigned long long ns, unsigned char* out,
                                        unsigned long long n, unsigned char value) {
            unsigned long long start, now;
            asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
            do {
                asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
            } while (now - start < ns);
            for (unsigned long long i = threadIdx.x; i < n; i += blockDim.x) out[i] = value;
        }
        """,
        "spin",
    )

ORDERS = ["wait-value", "host-function"]
SPIN_NS = 200_000_000  # 200 ms


@pytest.fixture(autouse=True)
def _posix_path():
    """gpufile's own device path (cuFile's stream behaviour is not what these tests check)."""
    with defaults.set("compat_mode", "on"):
        yield


def spin(stream, out=None, value=0, ns=SPIN_NS):
    n = 0 if out is None else out.size
    ptr = 0 if out is None else out.data.ptr
    with stream:
        _SPIN((1,), (256,), (np.uint64(ns), np.uint64(ptr), np.uint64(n), np.uint8(value)))


def queue(f, how, buf, stream, order, **kw):
    """raw_read_async / raw_write_async with `order` forced (skips where the device cannot)."""
    call = f._file.raw_read_async if how == "read" else f._file.raw_write_async
    try:
        fut = IOFutureStream(call(buf, stream.ptr, kw.get("size"), kw.get("file_offset", 0),
                                  kw.get("dev_offset", 0), order))
    except ValueError as e:
        if "cannot be used here" in str(e):
            pytest.skip(str(e))
        raise
    assert fut.stream_order[0] == order, fut.stream_order
    return fut


def warm_up(f, stream, order):
    """One small transfer first, so that the timed call pays no first-use cost (the engine's
    start, the launcher thread, the flag page)."""
    small = cp.zeros(4096, dtype=cp.uint8)
    assert within(30, queue(f, "read", small, stream, order).check_bytes_done) == 4096
    within(30, stream.synchronize)


def within(seconds, fn):
    """fn()'s result, or a failure (not a hang) if it takes longer than `seconds`."""
    out = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - re-raised below
            out["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"still waiting after {seconds} s (a deadlock?)"
    if "error" in out:
        raise out["error"]
    return out["value"]


def test_the_best_order_is_wait_value_on_this_device(tmp_path):
    path = tmp_path / "o.bin"
    pattern(4096).tofile(path)
    stream = cp.cuda.Stream(non_blocking=True)
    buf = cp.zeros(4096, dtype=cp.uint8)
    with gpufile.CuFile(path) as f:
        fut = f.raw_read_async(buf, stream)
        assert within(30, fut.check_bytes_done) == 4096
    how, why = fut.stream_order
    print("stream order:", how, "-", why)
    assert how in ("wait-value", "host-function"), why


@pytest.mark.parametrize("order", ORDERS)
def test_the_caller_is_not_blocked_and_the_next_kernel_sees_the_data(tmp_path, order):
    data = pattern(8 << 20, 21)
    path = tmp_path / "r.bin"
    data.tofile(path)
    stream = cp.cuda.Stream(non_blocking=True)
    buf = cp.zeros(data.size, dtype=cp.uint8)
    seen = cp.zeros(data.size, dtype=cp.uint8)
    with gpufile.CuFile(path) as f:
        warm_up(f, stream, order)
        spin(stream, buf, 7)  # writes 7s after 200 ms: the read must come after it
        t0 = time.perf_counter()
        fut = queue(f, "read", buf, stream, order)
        took = time.perf_counter() - t0
        assert not fut.done(), "the read ran before the kernel queued ahead of it ended"
        with stream:
            seen[...] = buf  # queued after the read: must see the file's bytes
        after = time.perf_counter() - t0
        assert within(30, fut.check_bytes_done) == data.size
        within(30, stream.synchronize)
    assert took < 0.05 * time_scale(), f"raw_read_async took {took * 1e3:.1f} ms (the kernel spins 200 ms)"
    assert after < 0.1 * time_scale()
    np.testing.assert_array_equal(cp.asnumpy(seen), data)
    np.testing.assert_array_equal(cp.asnumpy(buf), data)


def test_caller_waits_does_wait(tmp_path):
    """The fallback order, for contrast: the call returns after the kernel and the read."""
    data = pattern(1 << 20, 22)
    path = tmp_path / "c.bin"
    data.tofile(path)
    stream = cp.cuda.Stream(non_blocking=True)
    buf = cp.zeros(data.size, dtype=cp.uint8)
    with gpufile.CuFile(path) as f:
        spin(stream, buf, 7)
        t0 = time.perf_counter()
        fut = queue(f, "read", buf, stream, "caller-waits")
        took = time.perf_counter() - t0
        assert fut.done() and fut.check_bytes_done() == data.size
    assert took > 0.15, took
    np.testing.assert_array_equal(cp.asnumpy(buf), data)


def test_a_write_after_a_producing_kernel_writes_its_result(tmp_path):
    """A stream-ordered write is staged: the call returns at once, the stream copies the
    kernel's result into pinned memory after the kernel and goes on, so work queued after the
    write may change the source at once; the file gets the kernel's bytes. A wait asked for on
    a write is refused with why."""
    path = tmp_path / "w.bin"
    np.zeros(4 << 20, dtype=np.uint8).tofile(path)
    stream = cp.cuda.Stream(non_blocking=True)
    src = cp.zeros(4 << 20, dtype=cp.uint8)
    with gpufile.CuFile(path, "r+") as f:
        warm_up(f, stream, "wait-value")
        spin(stream, src, 42)  # the producer: 42s after 200 ms
        t0 = time.perf_counter()
        fut = within(30, lambda: f.raw_write_async(src, stream))
        took = time.perf_counter() - t0
        how, why = fut.stream_order
        assert how == "staged" and "copies the source" in why, why
        with stream:
            src.fill(1)  # queued after the write: must not be what lands in the file
        assert within(30, fut.check_bytes_done) == src.size
        within(30, stream.synchronize)
        for order in ORDERS:
            with pytest.raises(ValueError, match="a write from device memory is staged"):
                f._file.raw_write_async(src, stream.ptr, None, 0, 0, order)
    assert took < 0.05 * time_scale(), f"raw_write_async took {took * 1e3:.1f} ms (the kernel spins 200 ms)"
    got = np.fromfile(path, dtype=np.uint8)
    assert (got == 42).all(), np.unique(got)


def _fresh_kernel():
    """A kernel CUDA has not loaded yet (a source no other test compiles): its first launch
    loads its module, which synchronizes the whole context."""
    tag = int(time.time_ns() % 1_000_000_007)
    return cp.RawKernel(
        f'extern "C" __global__ void fresh_{tag}(unsigned char* p) {{ p[0] += {tag % 200 + 1}; }}',
        f"fresh_{tag}")


@pytest.mark.parametrize("how", ["read wait-value", "read host-function", "write staged"])
def test_a_kernel_loaded_behind_a_queued_transfer_does_not_deadlock(tmp_path, how):
    """While the stream waits for gpufile, the application launches a kernel for the first time
    (CUDA loads its module and synchronizes the context): gpufile's part makes no CUDA call, so
    the transfer, the kernel and the stream all finish. (A write staged on gpufile's own stream
    deadlocked exactly so.)"""
    direction, order = how.split()
    data = pattern(4 << 20, 27)
    path = tmp_path / "k.bin"
    data.tofile(path)
    stream = cp.cuda.Stream(non_blocking=True)
    buf = cp.asarray(data) if direction == "write" else cp.zeros(data.size, dtype=cp.uint8)
    other = cp.zeros(1, dtype=cp.uint8)
    with gpufile.CuFile(path, "r+") as f:
        warm_up(f, stream, "wait-value")
        spin(stream, ns=100_000_000)
        fut = queue(f, direction, buf, stream, order)
        kernel = _fresh_kernel()
        within(30, lambda: kernel((1,), (1,), (other,)))  # the module load waits for the stream
        with stream:
            kernel((1,), (1,), (other,))
        assert within(30, fut.check_bytes_done) == data.size
        within(30, stream.synchronize)
    if direction == "read":
        np.testing.assert_array_equal(cp.asnumpy(buf), data)
    else:
        np.testing.assert_array_equal(np.fromfile(path, dtype=np.uint8), data)


@pytest.mark.parametrize("order", ORDERS)
def test_a_read_after_a_staged_write_on_the_stream_sees_the_written_bytes(tmp_path, order):
    """The stream does not wait for a staged write's file write, but the next request on the
    same stream does: a read queued right after a write reads what it wrote."""
    path = tmp_path / "rw.bin"
    np.zeros(8 << 20, dtype=np.uint8).tofile(path)
    stream = cp.cuda.Stream(non_blocking=True)
    data = pattern(8 << 20, 28)
    src = cp.asarray(data)
    back = cp.zeros_like(src)
    with gpufile.CuFile(path, "r+") as f:
        warm_up(f, stream, order)
        spin(stream, ns=50_000_000)
        w = within(30, lambda: f.raw_write_async(src, stream))
        r = queue(f, "read", back, stream, order)
        assert within(30, r.check_bytes_done) == src.size
        assert w.done() and w.check_bytes_done() == src.size
        within(30, stream.synchronize)
    np.testing.assert_array_equal(cp.asnumpy(back), data)


@pytest.mark.parametrize("order", ORDERS)
def test_what_is_known_at_the_call_fails_the_call_and_moves_nothing(tmp_path, order):
    """A read past the end of the file as it is at the call, or of a file opened "w", raises
    at the call with nothing queued: the destination keeps its bytes (KvikIO's own
    test_async_io.py::test_read_write reads the same array back after such a call)."""
    path = tmp_path / "e.bin"
    pattern(4096, 23).tofile(path)
    stream = cp.cuda.Stream(non_blocking=True)
    buf = cp.full(8192, 7, dtype=cp.uint8)
    with gpufile.CuFile(path) as f:
        spin(stream, ns=20_000_000)
        with pytest.raises(gpufile.EndOfFileError):
            queue(f, "read", buf, stream, order)  # 8 KiB of a 4 KiB file
        within(30, stream.synchronize)
        assert (cp.asnumpy(buf) == 7).all()
    with gpufile.CuFile(path, "w") as f:
        with pytest.raises(RuntimeError, match="Operation not permitted"):
            queue(f, "read", buf, stream, order)
        within(30, stream.synchronize)
        assert (cp.asnumpy(buf) == 7).all()


@pytest.mark.parametrize("order", ORDERS)
def test_a_read_that_fails_when_the_stream_gets_there_leaves_unread_bytes_as_they_were(
        tmp_path, order):
    """The file shrinks after the call and before the stream reaches the read: the future
    raises, the stream's later work is let go, and every byte of the destination holds what it
    held or what the read read, never zeros or stale staging."""
    path = tmp_path / "s.bin"
    data = pattern(8192, 29)
    data.tofile(path)
    before = pattern(8192, 31)
    stream = cp.cuda.Stream(non_blocking=True)
    buf = cp.asarray(before)
    cp.cuda.Device().synchronize()
    with gpufile.CuFile(path) as f:
        warm_up(f, stream, order)
        spin(stream, ns=SPIN_NS)
        fut = queue(f, "read", buf, stream, order)  # the whole file: accepted at the call
        os.truncate(path, 1000)  # while the stream still spins
        with pytest.raises(gpufile.EndOfFileError):
            within(30, fut.check_bytes_done)
        within(30, stream.synchronize)
    got = cp.asnumpy(buf)
    np.testing.assert_array_equal(got[1000:], before[1000:])
    assert ((got[:1000] == before[:1000]) | (got[:1000] == data[:1000])).all()


@pytest.mark.parametrize("order", ORDERS)
def test_a_read_of_what_an_earlier_write_on_the_stream_appends_is_not_refused_at_the_call(
        tmp_path, order):
    """The file is 4 KiB at the call, but a write queued before on the same stream makes it
    long enough by the time the stream gets to the read."""
    path = tmp_path / "grow.bin"
    np.zeros(4096, dtype=np.uint8).tofile(path)  # for warm_up's 4 KiB
    data = pattern(1 << 20, 30)
    src = cp.asarray(data)
    back = cp.zeros_like(src)
    stream = cp.cuda.Stream(non_blocking=True)
    with gpufile.CuFile(path, "r+") as f:
        warm_up(f, stream, order)
        spin(stream, ns=50_000_000)
        w = within(30, lambda: f.raw_write_async(src, stream))
        r = queue(f, "read", back, stream, order)
        assert within(30, r.check_bytes_done) == src.size
        assert w.check_bytes_done() == src.size
        within(30, stream.synchronize)
    np.testing.assert_array_equal(cp.asnumpy(back), data)


@pytest.mark.parametrize("order", ORDERS)
def test_many_reads_on_one_stream_keep_their_order(tmp_path, order):
    """32 reads into ONE staging buffer, each followed on the stream by a copy of it into its
    own slot: only a stream that runs read, copy, read, copy, ... in order gets every slot
    right."""
    chunk, n = 256 << 10, 32
    data = pattern(chunk * n, 24)
    path = tmp_path / "m.bin"
    data.tofile(path)
    stream = cp.cuda.Stream(non_blocking=True)
    staging = cp.zeros(chunk, dtype=cp.uint8)
    out = cp.zeros(chunk * n, dtype=cp.uint8)
    with gpufile.CuFile(path) as f:
        spin(stream, ns=50_000_000)
        futs = []
        for i in range(n):
            futs.append(queue(f, "read", staging, stream, order, file_offset=i * chunk))
            with stream:
                out[i * chunk:(i + 1) * chunk] = staging
        assert [within(60, g.check_bytes_done) for g in futs] == [chunk] * n
        within(60, stream.synchronize)
    np.testing.assert_array_equal(cp.asnumpy(out), data)


@pytest.mark.parametrize("order", ORDERS)
def test_a_dropped_future_never_waits_and_the_stream_still_orders(tmp_path, order):
    data = pattern(1 << 20, 25)
    path = tmp_path / "d.bin"
    data.tofile(path)
    stream = cp.cuda.Stream(non_blocking=True)
    buf = cp.zeros(data.size, dtype=cp.uint8)
    seen = cp.zeros(data.size, dtype=cp.uint8)
    with gpufile.CuFile(path) as f:
        warm_up(f, stream, order)
        spin(stream, buf, 3)
        t0 = time.perf_counter()
        queue(f, "read", buf, stream, order)  # dropped at once
        took = time.perf_counter() - t0
        with stream:
            seen[...] = buf
        within(30, stream.synchronize)
    assert took < 0.05 * time_scale(), took
    np.testing.assert_array_equal(cp.asnumpy(seen), data)


@pytest.mark.parametrize("order", ORDERS)
def test_stream_futures_can_be_awaited(tmp_path, order):
    import asyncio

    data = pattern(1 << 20, 26)
    path = tmp_path / "a.bin"
    data.tofile(path)
    stream = cp.cuda.Stream(non_blocking=True)
    bufs = [cp.zeros(data.size // 4, dtype=cp.uint8) for _ in range(4)]

    async def main(f):
        spin(stream, ns=50_000_000)
        futs = [queue(f, "read", b, stream, order, file_offset=i * b.size)
                for i, b in enumerate(bufs)]
        return await gather(futs)

    with gpufile.CuFile(path) as f:
        assert within(30, lambda: asyncio.run(main(f))) == [data.size // 4] * 4
    within(30, stream.synchronize)
    np.testing.assert_array_equal(cp.asnumpy(cp.concatenate(bufs)), data)
