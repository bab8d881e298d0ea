"""IOFuture callbacks and asyncio: add_done_callback, await, gpufile.aio.gather, on real files
and real threads (host memory: no GPU needed)."""

import asyncio
import logging
import os
import sys
import threading
import time

import numpy as np
import pytest

import gpufile
from gpufile import _native
from gpufile.aio import gather


def _threads() -> int:
    """Threads of this process, Rust's included (``threading`` sees only Python's)."""
    return len(os.listdir("/proc/self/task"))


def _io_workers() -> int:
    """gpufile's I/O workers alive in this process (threads named gpufile-io-N). The pool grows
    to the largest num_threads any request of the process asked for and never shrinks, so after
    a test that raised num_threads there are more of them than the setting says."""
    n = 0
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                n += f.read().startswith("gpufile-io-")
        except FileNotFoundError:  # the thread ended meanwhile
            pass
    return n


@pytest.fixture
def data_file(tmp_path):
    data = np.random.default_rng(7).integers(0, 256, 10_000 * 4096, dtype=np.uint8)
    path = tmp_path / "data.bin"
    data.tofile(path)
    return path, data


@pytest.fixture
def no_faults():
    _native._inject_faults([])
    yield
    _native._inject_faults([])


def test_callbacks_run_once_each_in_order_with_the_future(data_file):
    path, data = data_file
    buf = np.empty(1 << 20, dtype=np.uint8)
    seen = []
    ended = threading.Event()
    with gpufile.CuFile(path) as f:
        fut = f.pread(buf, file_offset=4096)
        for i in range(3):
            fut.add_done_callback(lambda g, i=i: seen.append((i, g is fut, g.get())))
        fut.add_done_callback(lambda g: ended.set())
        assert ended.wait(30)
        assert seen == [(0, True, 1 << 20), (1, True, 1 << 20), (2, True, 1 << 20)]
        assert np.array_equal(buf, data[4096:4096 + (1 << 20)])
        # Added to a finished future: called at once, on this thread.
        where = []
        fut.add_done_callback(lambda g: where.append(threading.get_ident()))
        assert where == [threading.get_ident()]


def test_a_callback_added_once_done_still_runs_after_the_earlier_ones(data_file, no_faults):
    """The request has ended but its first callback is still running on the callback thread: a
    callback added now runs after it, not at once on this thread."""
    path, _ = data_file
    order = []
    first_runs = threading.Event()
    both = threading.Event()

    def first(_fut):
        first_runs.set()
        time.sleep(0.3)
        order.append("first")

    # The read is held in its pread until a second read arrives.
    _native._inject_faults([("read", 0, "enospc_together", 2)])
    with gpufile.CuFile(path) as f:
        fut = f.pread(np.empty(4096, dtype=np.uint8))
        fut.add_done_callback(first)
        assert not fut.done()
        with pytest.raises(OSError):
            f.read(np.empty(4096, dtype=np.uint8))  # the second arrival: both end
        assert first_runs.wait(30) and fut.done()
        fut.add_done_callback(lambda _: (order.append("second"), both.set()))
        assert both.wait(30)
    assert order == ["first", "second"]


def test_a_callback_that_raises_is_logged_and_the_next_still_runs(data_file, caplog):
    path, _ = data_file
    buf = np.empty(4096, dtype=np.uint8)
    ran = threading.Event()

    def bad(_fut):
        raise ValueError("a callback's bug")

    with caplog.at_level(logging.ERROR, logger="gpufile"), gpufile.CuFile(path) as f:
        fut = f.pread(buf)
        fut.add_done_callback(bad)
        fut.add_done_callback(lambda g: ran.set())
        assert ran.wait(30)
        fut.add_done_callback(bad)  # done: raises into the log, not into the caller
    bugs = [r for r in caplog.records if "exception calling callback" in r.getMessage()]
    assert len(bugs) == 2
    assert all(r.exc_info and r.exc_info[0] is ValueError for r in bugs)


def test_a_failed_request_calls_back_and_get_raises_its_error(data_file, no_faults):
    path, _ = data_file
    got = []
    ended = threading.Event()
    _native._inject_faults([("read", 0, "eio", 1)])
    with gpufile.CuFile(path) as f:
        fut = f.pread(np.empty(4096, dtype=np.uint8))
        fut.add_done_callback(lambda g: (got.append(g.done()), ended.set()))
        assert ended.wait(30)
        assert got == [True]
        with pytest.raises(OSError) as e:
            fut.get()
        assert e.value.errno == 5


def test_callbacks_never_wait_for_a_thread_that_holds_the_gil(data_file):
    """A thread that polls futures holding the GIL (switch interval of 10 s: it never lets go on
    its own) while callbacks are due: the workers must not need the GIL to finish a request,
    or the poll never ends."""
    path, _ = data_file
    bufs = [np.empty(4096, dtype=np.uint8) for _ in range(200)]
    calls = []
    old = sys.getswitchinterval()
    with gpufile.CuFile(path) as f:
        futs = [f.pread(b, file_offset=i * 4096) for i, b in enumerate(bufs)]
        for fut in futs:
            fut.add_done_callback(lambda g: calls.append(g.get()))
        sys.setswitchinterval(10)
        try:
            while not all(g.done() for g in futs):  # native calls, GIL held throughout
                pass
        finally:
            sys.setswitchinterval(old)
        deadline = threading.Event()
        for _ in range(300):
            if len(calls) == 200:
                break
            deadline.wait(0.1)
    assert calls == [4096] * 200


def test_many_threads_add_callbacks_and_wait_at_once(data_file):
    path, data = data_file
    errors = []
    counts = [0] * 8
    lock = threading.Lock()

    def worker(t):
        try:
            bufs = [np.empty(4096, dtype=np.uint8) for _ in range(100)]
            with gpufile.CuFile(path) as f:
                futs = [f.pread(b, file_offset=(t * 100 + i) * 4096) for i, b in enumerate(bufs)]

                def bump(g):
                    assert g.get() == 4096
                    with lock:
                        counts[t] += 1

                for g in futs:
                    g.add_done_callback(bump)
                for g in futs:
                    g.get()
            for i, b in enumerate(bufs):
                off = (t * 100 + i) * 4096
                assert np.array_equal(b, data[off:off + 4096])
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert not errors
    done = threading.Event()
    for _ in range(300):
        with lock:
            if sum(counts) == 800:
                break
        done.wait(0.1)
    assert counts == [100] * 8


def test_await_ten_thousand_futures_without_a_thread_each(data_file, no_faults):
    """10,000 reads awaited with asyncio.gather while every worker is held inside its pread (an
    injected fault that waits for one more read than there are workers): each await finds its
    future pending, and the process gains no thread per future."""
    path, data = data_file
    n = 10_000
    out = np.zeros(n * 4096, dtype=np.uint8)

    async def main(f):
        futs = [f.pread(out[i * 4096:(i + 1) * 4096], file_offset=i * 4096) for i in range(n)]
        both = asyncio.ensure_future(asyncio.gather(*futs, return_exceptions=True))
        await asyncio.sleep(0.3)  # every gather task now awaits a pending future
        assert sum(not g.done() for g in futs) > n - workers - 1
        peak[0] = max(peak[0], _threads())
        with pytest.raises(OSError):
            f.read(np.empty(4096, dtype=np.uint8))  # the last arrival: the held reads fail
        return await both

    with gpufile.CuFile(path) as f:
        f.pread(np.empty(4096, dtype=np.uint8)).get()  # the workers exist before counting
        # Every worker takes one of the reads, however many an earlier test left (not
        # num_threads: see _io_workers).
        workers = _io_workers()
        assert workers >= gpufile.defaults.get("num_threads")
        before = _threads()
        peak = [before]
        stop = threading.Event()

        def sample():
            while not stop.is_set():
                peak[0] = max(peak[0], _threads())
                stop.wait(0.005)

        sampler = threading.Thread(target=sample)
        sampler.start()
        _native._inject_faults([("read", 0, "enospc_together", workers + 1)])
        try:
            results = asyncio.run(main(f))
        finally:
            _native._inject_faults([])
            stop.set()
            sampler.join()
    failed = [i for i, r in enumerate(results) if isinstance(r, OSError)]
    assert len(failed) == workers and all(results[i].errno == 28 for i in failed)
    for i, r in enumerate(results):
        if i not in failed:
            assert r == 4096
            assert np.array_equal(out[i * 4096:(i + 1) * 4096], data[i * 4096:(i + 1) * 4096])
    # The sampler and gpufile's callback thread: nothing per future.
    assert peak[0] <= before + 2, (before, peak[0])


def test_aio_gather_returns_results_in_order_and_raises_after_all(data_file):
    path, data = data_file
    bufs = [np.empty(8192, dtype=np.uint8) for _ in range(50)]

    async def main(f):
        futs = [f.pread(b, file_offset=i * 8192) for i, b in enumerate(bufs)]
        return await gather(futs)

    with gpufile.CuFile(path) as f:
        assert asyncio.run(main(f)) == [8192] * 50
    for i, b in enumerate(bufs):
        assert np.array_equal(b, data[i * 8192:(i + 1) * 8192])

    async def failing(f):
        ok = f.pread(np.empty(4096, dtype=np.uint8))
        bad = f.pread(np.empty(4096, dtype=np.uint8), file_offset=4096)
        got = await gather([ok, bad], return_exceptions=True)
        # Whichever read ran second failed; the other read its 4096 bytes.
        assert sorted(map(type, got), key=str) == sorted([int, type(_eio(got))], key=str)
        assert _eio(got).errno == 5 and 4096 in got
        with pytest.raises(OSError):
            await gather([ok, bad])
        return True

    def _eio(got):
        return next(g for g in got if isinstance(g, OSError))

    _native._inject_faults([("read", 1, "eio", 1)])
    try:
        with gpufile.CuFile(path) as f:
            assert asyncio.run(failing(f))
    finally:
        _native._inject_faults([])

    async def not_futures():
        await gather([1])

    with pytest.raises(TypeError, match="IOFuture"):
        asyncio.run(not_futures())


def test_await_of_a_batch_and_of_a_done_future(data_file):
    path, data = data_file
    bufs = [np.empty(4096, dtype=np.uint8) for _ in range(4)]

    async def main():
        batch = gpufile.read_batch([(path, b, None, i * 4096) for i, b in enumerate(bufs)])
        n = await batch
        again = await batch  # done: at once, same result
        return n, again

    assert asyncio.run(main()) == (4 * 4096, 4 * 4096)
    assert np.array_equal(np.concatenate(bufs), data[:4 * 4096])


def test_cancelling_the_awaiting_task_leaves_the_request_running(data_file, no_faults):
    """The read blocks inside its pread (an injected fault that waits for a second read);
    cancelling the task that awaits it raises CancelledError in the task at once, while the
    request goes on holding its buffer; once released, the future gives the read's own result."""
    path, _ = data_file
    buf = np.empty(4096, dtype=np.uint8)
    _native._inject_faults([("read", 0, "enospc_together", 2)])
    with gpufile.CuFile(path) as f:
        fut = f.pread(buf)

        async def main():
            task = asyncio.ensure_future(_aw(fut))
            await asyncio.sleep(0.05)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            return fut.done()

        async def _aw(g):
            return await g

        assert asyncio.run(main()) is False, "the read is still blocked in its pread"
        # The second read meets the first: both end, with the injected error.
        with pytest.raises(OSError):
            f.read(np.empty(4096, dtype=np.uint8))
        with pytest.raises(OSError) as e:
            fut.get()
        assert e.value.errno == 28
        assert fut.done()


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # fork with threads running
def test_callbacks_run_in_a_forked_child(data_file, no_faults):
    """The parent's callback thread does not exist in a forked child: the child starts its
    own, so its callbacks still run."""
    path, data = data_file
    with gpufile.CuFile(path) as f:
        ran = threading.Event()
        g = f.pread(np.empty(1 << 20, dtype=np.uint8))
        g.add_done_callback(lambda _: ran.set())
        assert ran.wait(30)
        pid = os.fork()
        if pid == 0:  # the child: exit 0 only if a callback ran there
            code = 1
            try:
                # The read is held in its pread until a second read arrives: the callback is
                # surely added to a pending future.
                _native._inject_faults([("read", 0, "enospc_together", 2)])
                seen = threading.Event()
                h = f.pread(np.empty(4096, dtype=np.uint8))
                h.add_done_callback(lambda _: seen.set())
                pending = not h.done()
                try:
                    f.read(np.empty(4096, dtype=np.uint8))
                except OSError:
                    pass
                if pending and seen.wait(20):
                    code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status


_EXIT_SCRIPT = r"""
import sys, threading, time
import numpy as np
import gpufile
from gpufile import _native

f = gpufile.CuFile(sys.argv[1])
_native._inject_faults([("read", 0, "enospc_together", 2)])
fut = f.pread(np.empty(4096, dtype=np.uint8))
started = threading.Event()

def slow(_fut):
    started.set()
    time.sleep(0.3)
    print("slow callback done", flush=True)

fut.add_done_callback(slow)
try:
    f.read(np.empty(4096, dtype=np.uint8))  # the second arrival: both reads end
except OSError:
    pass
assert started.wait(10)
print("main exits", flush=True)
"""


def test_a_callback_running_at_exit_finishes_before_the_interpreter_finalizes(data_file):
    """The main thread ends while a callback runs on the callback thread: gpufile's exit handler
    lets it finish, then no callback enters Python (a thread that does while the interpreter
    finalizes kills the process: "PyGILState_Release: thread state ... must be current")."""
    import subprocess

    path, _ = data_file
    for _ in range(3):
        r = subprocess.run([sys.executable, "-c", _EXIT_SCRIPT, str(path)],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr[-2000:]
        assert r.stdout.split() == ["main", "exits", "slow", "callback", "done"], r.stdout


def test_a_save_future_whose_callback_raises_runs_the_next_and_wakes_await(tmp_path, caplog):
    """``async_save``'s future calls back as ``IOFuture`` does: a callback that raises is
    logged, the callbacks after it still run, and ``await`` returns."""
    import gpufile.safetensors as gs
    state = {"a": np.arange(16 << 20, dtype=np.float32)}  # 64 MiB: the save is still running
    ran = []

    def bad(_fut):
        raise ValueError("a callback's bug")

    async def main():
        fut = gs.async_save(state, tmp_path / "m.safetensors")
        fut.add_done_callback(bad)
        fut.add_done_callback(lambda f: ran.append(f.done()))
        # Bounded: a future that never wakes fails here instead of hanging the suite.
        assert await asyncio.wait_for(fut, 60) is None
        fut.add_done_callback(bad)  # done: logged, not raised into the caller
        fut.add_done_callback(lambda f: ran.append(f.done()))
        return fut

    with caplog.at_level(logging.ERROR, logger="gpufile"):
        fut = asyncio.run(main())
        # Callbacks added after the await may still be queued behind the save thread's last
        # one (they run there, in order, right after it): bounded wait, not a sleep.
        fut._thread.join(timeout=30)
    assert fut.done() and ran == [True, True]
    bugs = [r for r in caplog.records if "exception calling callback" in r.getMessage()]
    assert len(bugs) == 2 and all(r.exc_info[0] is ValueError for r in bugs)
    np.testing.assert_array_equal(gs.load_file(tmp_path / "m.safetensors")["a"], state["a"])
