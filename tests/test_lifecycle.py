"""Process life: fork, interpreter exit with requests in flight, Ctrl-C, futures let go.

Each case runs in a fresh interpreter with a timeout, so a hang fails the test instead of the
suite.
"""

import textwrap

from conftest import run_python, time_scale


def run(code: str, timeout_note: str = "") -> str:
    r = run_python(textwrap.dedent(code))
    assert r.returncode == 0, f"{timeout_note}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    return r.stdout


def test_a_forked_child_reads_after_the_parent_did(tmp_path):
    f = tmp_path / "d.bin"
    f.write_bytes(bytes(range(256)) * 4096)
    out = run(f"""
        import os, time, numpy as np, gpufile
        path = {str(f)!r}
        expect = np.fromfile(path, dtype=np.uint8)
        gpufile.defaults.set("task_size", 64 << 10)
        buf = np.empty_like(expect)
        assert gpufile.CuFile(path).read(buf) == buf.nbytes          # the parent's pool runs
        pending = gpufile.CuFile(path).pread(np.empty_like(expect))  # in flight at the fork
        pid = os.fork()
        if pid == 0:
            try:
                b = np.empty_like(expect)
                ok = gpufile.CuFile(path).read(b) == b.nbytes and (b == expect).all()
                ok = ok and gpufile.defaults.get("task_size") == 64 << 10  # settings carried
                os._exit(0 if ok else 3)
            except BaseException as e:
                print("child:", repr(e), flush=True)
                os._exit(4)
        deadline = time.time() + 20
        while time.time() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.05)
        else:
            os.kill(pid, 9)
            raise SystemExit("the forked child hung")
        pending.get()
        print("child status", os.waitstatus_to_exitcode(status))
    """)
    assert "child status 0" in out


def test_multiprocessing_pool_with_fork(tmp_path):
    f = tmp_path / "d.bin"
    f.write_bytes(bytes(range(256)) * 1024)
    out = run(f"""
        import multiprocessing as mp, numpy as np, gpufile
        path = {str(f)!r}
        def part(i):
            b = np.empty(1024, dtype=np.uint8)
            gpufile.CuFile(path).read(b, file_offset=i * 1024)
            return int(b.sum())
        gpufile.CuFile(path).read(np.empty(4096, dtype=np.uint8))
        with mp.get_context("fork").Pool(2) as p:
            sums = p.map(part, range(8), chunksize=1)
        assert sums == [sum(range(256)) * 4] * 8, sums
        print("ok")
    """)
    assert "ok" in out


def test_exit_with_daemon_threads_still_reading_is_prompt(tmp_path):
    f = tmp_path / "d.bin"
    f.write_bytes(b"\x01" * (4 << 20))
    out = run(f"""
        import threading, time, numpy as np, gpufile
        path = {str(f)!r}
        def reader():
            b = np.empty(4 << 20, dtype=np.uint8)
            h = gpufile.CuFile(path)
            while True:
                try:
                    h.read(b, task_size=64 << 10)
                except gpufile.GpufileError as e:  # shutting down: no new requests
                    return
        for _ in range(6):
            threading.Thread(target=reader, daemon=True).start()
        time.sleep(0.3)
        print("exiting", flush=True)
    """)
    assert "exiting" in out  # and run_python's timeout was not hit


def test_ctrl_c_interrupts_a_long_read_promptly(tmp_path):
    f = tmp_path / "sparse.bin"
    with open(f, "wb") as fh:
        fh.truncate(64 << 20)
    out = run(f"""
        import os, signal, threading, time, numpy as np, gpufile
        buf = np.zeros(64 << 20, dtype=np.uint8)
        h = gpufile.CuFile({str(f)!r})
        sent = []
        def interrupt():
            time.sleep(0.3)
            sent.append(time.monotonic())
            os.kill(os.getpid(), signal.SIGINT)
        threading.Thread(target=interrupt).start()
        start = time.monotonic()
        try:
            h.read(buf, task_size=8)  # 8 M tasks of 8 bytes: many seconds
        except KeyboardInterrupt:
            late = time.monotonic() - sent[0]
            print(f"interrupted after {{late:.3f}} s")
            assert late < {1.0 * time_scale()!r}, late
            assert gpufile._native.in_flight() == 0  # cancelled and drained
        else:
            raise SystemExit(f"not interrupted; the read took {{time.monotonic() - start:.1f}} s")
    """)
    assert "interrupted after" in out


def test_get_releases_the_buffer_and_dropping_a_future_holds_no_gil(tmp_path):
    f = tmp_path / "d.bin"
    f.write_bytes(b"\x02" * (1 << 20))
    out = run(f"""
        import numpy as np, gpufile
        h = gpufile.CuFile({str(f)!r})
        b = bytearray(1 << 20)
        fut = h.pread(b)
        assert fut.get() == 1 << 20
        b.extend(b"x")  # the export ended with get(): the bytearray may resize again
        assert len(b) == (1 << 20) + 1
        print("ok")
    """)
    assert "ok" in out


def test_a_failed_write_nobody_waited_for_is_noticed(tmp_path):
    out = run("""
        import gc, logging, numpy as np, gpufile
        from gpufile import _native
        h = gpufile.CuFile("/dev/full", "w")
        fut = h.pwrite(np.ones(1 << 20, dtype=np.uint8))
        del fut
        gc.collect()
        notices = _native.take_notices()
        assert any("nobody waited" in n and "No space" in n for n in notices), notices
        print("ok")
    """)
    assert "ok" in out


def test_a_path_with_a_nul_byte_is_a_value_error_as_in_open():
    import pytest
    import gpufile
    with pytest.raises(ValueError, match="NUL byte"):
        gpufile.CuFile("bad\0name")
