"""A checkpoint's commit seen from outside (docs/checkpoints.md, "Crash safety" and "Saves that
overlap"): loads during saves that change the layout see one whole checkpoint; a forked child
saves into a directory whose lock its parent was waiting for; another user's lock file or
leftover temporary does not stop saves where the user may write.

The commit's order step by step (each instant, a failure at each step, an fsync that fails) is
tested in Rust: crates/gpufile/src/formats/safetensors/save/commit_tests.rs."""

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback

import numpy as np
import pytest

import gpufile.safetensors as gs
from gpufile import _native

N = 12


def _state(v):
    return {f"t{k:02d}": np.full(1 << 14, v, np.float32) for k in range(N)}  # 64 KiB each


def _version(directory):
    state = gs.load_checkpoint(directory, framework="numpy")
    assert sorted(state) == [f"t{k:02d}" for k in range(N)]
    values = {float(a[0]) for a in state.values()} | {float(a[-1]) for a in state.values()}
    assert len(values) == 1, values
    return values.pop()


def test_loads_during_saves_that_change_the_layout_see_one_whole_checkpoint(tmp_path):
    d = tmp_path / "ck"
    gs.save_checkpoint(_state(0), d, "100KB", durable=False)
    stop = threading.Event()
    failures, loads = [], [0]

    def load_loop():
        while not stop.is_set():
            try:
                _version(d)
            except Exception as e:  # reported below
                failures.append(f"{type(e).__name__}: {e}")
            loads[0] += 1

    t = threading.Thread(target=load_loop)
    t.start()
    try:
        for i in range(1, 41):  # one file, three shards, one file, ...
            gs.save_checkpoint(_state(i), d, "1MB" if i % 2 else "300KB", durable=False)
    finally:
        stop.set()
        t.join()
    assert loads[0] > 20, loads
    assert not failures, f"{len(failures)} of {loads[0]} loads failed: {failures[:3]}"
    assert _version(d) == 40.0


# --- a forked child and the commit lock ---------------------------------------------------------

_HOLD = """
import sys, time
from gpufile import _native
lock = _native.DirLock(sys.argv[1])
print("held", flush=True)
time.sleep(float(sys.argv[2]))
lock.release()
"""


def _wait_child(pid, seconds):
    """The child's exit status, or None (and the child killed) past `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return None


def _save(how, v, d):
    """A save by `how`, waited for."""
    if how == "async_save":
        gs.async_save(_state(v), d, sharded=True, durable=False).result()
    elif how == "dcp":
        import warnings

        import torch
        import torch.distributed.checkpoint as dcp

        import gpufile.torch as gt

        warnings.simplefilter("ignore")
        state = {k: torch.from_numpy(a) for k, a in _state(v).items()}
        dcp.save(state, storage_writer=gt.FileSystemWriter(d))
    else:
        gs.save_checkpoint(_state(v), d, durable=False)


@pytest.mark.parametrize("how", ["save_checkpoint", "async_save", "dcp"])
def test_a_forked_child_saves_where_its_parent_was_waiting_for_the_lock(tmp_path, how):
    if how == "dcp":
        pytest.importorskip("torch.distributed.checkpoint")
    d = tmp_path / "ck"
    d.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(d), "0.5"],
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    waiting = threading.Thread(target=_save, args=(how, 1, d))
    waiting.start()
    time.sleep(0.2)  # the thread (async_save: its commit) now waits for the holder's lock
    assert waiting.is_alive()
    pid = os.fork()
    if pid == 0:  # the child: its parent's waiting thread does not exist here
        code = 1
        try:
            _save(how, 2, d)
            # Whole, of one save: the parent's commit, waiting too, may come after.
            code = 0 if how == "dcp" or _version(d) in (1.0, 2.0) else 3
        except BaseException:
            traceback.print_exc()  # the child's failure, in the test's captured output
        finally:
            os._exit(code)
    status = _wait_child(pid, 15)
    waiting.join()
    holder.wait()
    assert status == 0, "the child's save never returned" if status is None else status
    if how != "dcp":
        assert _version(d) in (1.0, 2.0)


def test_a_lock_copied_into_a_forked_child_stays_the_parents(tmp_path):
    """A child forked while its parent holds the lock neither releases nor keeps it: the
    parent's release lets a waiting process in at once, the child still alive."""
    d = tmp_path / "ck"
    d.mkdir()
    lock = _native.DirLock(d)
    pid = os.fork()
    if pid == 0:
        try:
            lock.release()  # the child's copy: not its to release
            time.sleep(5)
        finally:
            os._exit(0)
    try:
        waiter = subprocess.Popen([sys.executable, "-c", _HOLD, str(d), "0"],
                                  stdout=subprocess.PIPE, text=True)
        time.sleep(0.3)
        assert waiter.poll() is None, "the child released its parent's lock"
        assert (d / ".gpufile-lock").exists()
        lock.release()
        assert waiter.wait(timeout=3) == 0  # not kept held by the child's copy
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


# --- another user's files in a shared directory -------------------------------------------------

NOBODY, OTHER = 65534, 65533


def _host_tag():
    return "".join(c for c in socket.gethostname() if c.isascii() and c.isalnum())[:32] or "unknown"


def _dead_pid():
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def _as_user(uid, fn):
    """Runs `fn()` in a forked child as `uid`; its exception text, or None."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        text = ""
        try:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            fn()
        except BaseException as e:
            text = f"{type(e).__name__}: {e} | " + " | ".join(getattr(e, "__notes__", []))
        finally:
            os.write(w, text.encode() or b"-")
            os._exit(0)
    os.close(w)
    status = _wait_child(pid, 30)
    out = os.read(r, 65536).decode()
    os.close(r)
    assert status == 0, status
    return None if out == "-" else out


@pytest.fixture
def shared_dir():
    """A sticky directory every user may write in, as /tmp."""
    if os.geteuid() != 0:
        pytest.skip("acts as other users: needs root")
    d = tempfile.mkdtemp(prefix="gpufile-shared-", dir="/tmp")
    os.chmod(d, 0o1777)
    yield d
    shutil.rmtree(d)


def test_another_users_lock_file_left_by_a_killed_commit_does_not_stop_saves(shared_dir):
    lock = os.path.join(shared_dir, ".gpufile-lock")
    os.close(os.open(lock, os.O_CREAT | os.O_WRONLY, 0o644))  # as a killed commit leaves it
    os.chown(lock, NOBODY, NOBODY)
    for i, limit in enumerate(["300KB", "1MB"]):
        err = _as_user(OTHER, lambda: gs.save_checkpoint(_state(i), shared_dir, limit,
                                                          durable=False))
        assert err is None, err
        assert _version(shared_dir) == float(i)


def test_another_users_held_lock_is_waited_for(shared_dir):
    """A lock file the holder made is one other users can wait on and take, whatever its
    holder's umask."""
    r, w = os.pipe()

    def hold():
        os.umask(0o077)
        lock = _native.DirLock(shared_dir)
        os.write(w, b"held")
        time.sleep(0.5)
        lock.release()

    holder = threading.Thread(target=_as_user, args=(NOBODY, hold))
    holder.start()
    assert os.read(r, 4) == b"held"
    t0 = time.monotonic()
    err = _as_user(OTHER, lambda: gs.save_checkpoint(_state(6), shared_dir, durable=False))
    holder.join()
    os.close(r)
    os.close(w)
    assert err is None, err
    assert time.monotonic() - t0 > 0.2, "the save waited for the holder's commit"
    assert _version(shared_dir) == 6.0


def test_a_lock_file_no_one_may_read_is_named_in_the_error(shared_dir):
    lock = os.path.join(shared_dir, ".gpufile-lock")
    os.close(os.open(lock, os.O_CREAT | os.O_WRONLY, 0o600))
    os.chown(lock, NOBODY, NOBODY)
    err = _as_user(OTHER, lambda: gs.save_checkpoint(_state(1), shared_dir, durable=False))
    assert err is not None and err.startswith("PermissionError"), err
    assert ".gpufile-lock" in err, err
    assert [f for f in os.listdir(shared_dir) if not f.startswith(".gpufile-lock")] == []


def test_leftover_temporaries_the_cleanup_cannot_remove_do_not_stop_saves(shared_dir):
    dead = _dead_pid()
    theirs = f".gpufile-tmp-h{_host_tag()}-{dead}-1-00000000.model.safetensors"
    path = os.path.join(shared_dir, theirs)
    with open(path, "wb") as f:
        f.write(b"x" * 100)
    os.chown(path, NOBODY, NOBODY)  # another user's, in a sticky directory
    as_dir = f".gpufile-tmp-h{_host_tag()}-{dead}-2-00000000.x"
    os.mkdir(os.path.join(shared_dir, as_dir))  # a directory with a temporary's name
    for i, limit in enumerate(["1MB", "300KB", "1MB"]):
        err = _as_user(OTHER, lambda: gs.save_checkpoint(_state(i), shared_dir, limit,
                                                          durable=False))
        assert err is None, err
        assert _version(shared_dir) == float(i)
    assert theirs in os.listdir(shared_dir) and as_dir in os.listdir(shared_dir)
    # Root may remove them: its next save does.
    gs.save_checkpoint(_state(9), shared_dir, durable=False)
    assert theirs not in os.listdir(shared_dir)
    assert as_dir in os.listdir(shared_dir)  # not a file: never a temporary of gpufile's


def test_a_shard_name_another_user_holds_is_named_and_the_new_checkpoint_still_loads(shared_dir):
    """A shard's final name that this user may not replace (another user's file in a sticky
    directory) fails the save after its commit: the error names the file and says the new
    checkpoint is published, and the directory loads as it."""
    stray = os.path.join(shared_dir, "model-00002-of-00003.safetensors")
    with open(stray, "wb") as f:
        f.write(b"not a shard of this checkpoint")
    os.chown(stray, NOBODY, NOBODY)
    err = _as_user(OTHER, lambda: gs.save_checkpoint(_state(4), shared_dir, "300KB",
                                                      durable=False))
    assert err is not None and err.startswith("PermissionError"), err
    assert "model-00002-of-00003.safetensors" in err, err
    assert "the new checkpoint is published" in err, err
    assert _version(shared_dir) == 4.0
