"""Saves that overlap in one directory (docs/checkpoints.md, "Saves that overlap"): whatever
the interleaving of saves of threads, processes or hosts, every save publishes a complete
checkpoint or raises, and the directory then loads as one complete checkpoint that one of them
published, with nothing else left in it.

Each shape runs TEST_SAVE_TRIALS trials (100 by default): two saves started together, then
the directory checked. Hosts are simulated by a second process in a UTS namespace of its own
with another host name (the name its temporaries carry)."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import gpufile.safetensors as gs
from gpufile import _native

TRIALS = int(os.environ.get("TEST_SAVE_TRIALS", "100"))
WORKER = os.path.join(os.path.dirname(__file__), "save_worker.py")
N_TENSORS, ELEMS = 12, (1 << 20) // 4


class Saver:
    """A save_worker.py process: save(value) starts a save, wait() returns its answer."""

    def __init__(self, kind, directory, *args, host=None):
        cmd = [sys.executable, WORKER, kind, str(directory), *args]
        if host is not None:
            cmd = ["unshare", "--uts", "sh", "-c", f'hostname {host} && exec "$@"', "sh", *cmd]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("KVIKIO_", "GPUFILE_"))}
        env["GPUFILE_NUM_THREADS"] = "2"
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env=env)
        ready = self.p.stdout.readline().strip()
        assert ready == "ready", self.p.stderr.read()[-3000:]

    def save(self, value):
        self.p.stdin.write(f"save {value}\n")
        self.p.stdin.flush()

    def wait(self):
        return self.p.stdout.readline().strip()

    def close(self):
        self.p.stdin.close()
        self.p.wait(timeout=60)


def _leftovers(directory, published):
    return sorted(set(os.listdir(directory)) - set(published))


def check_safetensors(directory, values):
    """The directory holds one complete checkpoint of one of `values`, and nothing else."""
    names = os.listdir(directory)
    if "model.safetensors.index.json" in names:
        with open(os.path.join(directory, "model.safetensors.index.json")) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
        published = files + ["model.safetensors.index.json"]
    else:
        files = published = ["model.safetensors"]
    assert _leftovers(directory, published) == [], names
    got = gs.load_checkpoint(directory, framework="numpy")
    assert sorted(got) == [f"t{i:02d}" for i in range(N_TENSORS)]
    firsts = {float(v[0]) for v in got.values()}
    assert len(firsts) == 1 and firsts <= set(values), firsts
    v = firsts.pop()
    assert all((a == v).all() for a in got.values())
    return v


def check_dcp(directory, values):
    import torch
    import torch.distributed.checkpoint as dcp

    with open(os.path.join(directory, ".metadata"), "rb") as f:
        raw = f.read()
    import pickle
    md = pickle.loads(raw)  # the test's own checkpoint
    files = sorted({s.relative_path for s in md.storage_data.values()})
    assert _leftovers(directory, files + [".metadata"]) == [], sorted(os.listdir(directory))
    sd = {f"t{i:02d}": torch.zeros(ELEMS) for i in range(N_TENSORS)}
    dcp.load(sd, storage_reader=dcp.FileSystemReader(directory))  # torch's own reader
    firsts = {float(t[0]) for t in sd.values()}
    assert len(firsts) == 1 and firsts <= set(values), firsts
    v = firsts.pop()
    assert all(bool((t == v).all()) for t in sd.values())
    return v


def run_two(tmp_path, a, b, check):
    """TRIALS trials of the two savers saving at once; returns which value won how often."""
    d = tmp_path / "ck"
    won = {}
    try:
        for trial in range(TRIALS):
            va, vb = 2.0 * trial + 1, 2.0 * trial + 2
            a.save(va)
            b.save(vb)
            answers = (a.wait(), b.wait())
            assert answers == ("ok", "ok"), (trial, answers)
            v = check(d, (va, vb))
            won[v == va] = won.get(v == va, 0) + 1
    finally:
        a.close()
        b.close()
    return won


def test_two_processes_saving_checkpoints_of_different_shard_counts(tmp_path):
    d = tmp_path / "ck"
    d.mkdir()
    won = run_two(tmp_path, Saver("safetensors", d, "2MB"), Saver("safetensors", d, "5MB"),
                  check_safetensors)
    assert sum(won.values()) == TRIALS


def test_two_hosts_saving_checkpoints_into_one_directory(tmp_path):
    """A second "host": a process whose host name differs (its own UTS namespace). A
    temporary of a third host, whose process id is no process here, is never removed; one of
    this host's, of a process that is gone, is."""
    if shutil.which("unshare") is None or subprocess.run(
            ["unshare", "--uts", "true"], capture_output=True).returncode != 0:
        pytest.skip("needs unshare --uts (root, or a user namespace) to simulate a second host")
    d = tmp_path / "ck"
    d.mkdir()
    dead = subprocess.Popen(["true"])
    dead.wait()
    other = f".gpufile-tmp-hotherhost-{dead.pid}-1-00000000.model-00001-of-00002.safetensors"
    here = f".gpufile-tmp-h{_host_tag()}-{dead.pid}-1-00000000.model.safetensors"
    a = Saver("safetensors", d, "2MB")
    b = Saver("safetensors", d, "5MB", host="gpufilehostb")
    (d / other).write_bytes(b"another host's save in progress")
    (d / here).write_bytes(b"a killed save's leftover")

    def check(directory, values):
        os.rename(directory / other, tmp_path / other)  # not part of the checkpoint
        try:
            return check_safetensors(directory, values)
        finally:
            os.rename(tmp_path / other, directory / other)

    won = run_two(tmp_path, a, b, check)
    assert sum(won.values()) == TRIALS
    assert (d / other).read_bytes() == b"another host's save in progress"
    assert not (d / here).exists()


def _host_tag():
    import socket
    return "".join(c for c in socket.gethostname() if c.isascii() and c.isalnum())[:32] \
        or "unknown"


def test_two_async_sharded_saves_in_one_process_without_waiting(tmp_path):
    d = tmp_path / "ck"
    for trial in range(TRIALS):
        va, vb = 2.0 * trial + 1, 2.0 * trial + 2
        f1 = gs.async_save({f"t{i:02d}": np.full(ELEMS, va, np.float32) for i in range(N_TENSORS)},
                           d, sharded=True, max_shard_size="2MB")
        f2 = gs.async_save({f"t{i:02d}": np.full(ELEMS, vb, np.float32) for i in range(N_TENSORS)},
                           d, sharded=True, max_shard_size="5MB")
        f1.result(timeout=120)
        f2.result(timeout=120)
        check_safetensors(d, (va, vb))


def test_two_dcp_async_saves_in_one_process_without_waiting(tmp_path):
    torch = pytest.importorskip("torch")
    dcp = pytest.importorskip("torch.distributed.checkpoint")
    import warnings

    import gpufile.torch as gt

    d = tmp_path / "ck"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for trial in range(TRIALS):
            va, vb = 2.0 * trial + 1, 2.0 * trial + 2
            f1 = dcp.async_save({f"t{i:02d}": torch.full((ELEMS,), va) for i in range(N_TENSORS)},
                                storage_writer=gt.FileSystemWriter(d))
            f2 = dcp.async_save({f"t{i:02d}": torch.full((ELEMS,), vb) for i in range(N_TENSORS)},
                                storage_writer=gt.FileSystemWriter(d))
            f1.result(timeout=120)
            f2.result(timeout=120)
            check_dcp(d, (va, vb))


def test_two_processes_saving_dcp_checkpoints(tmp_path):
    pytest.importorskip("torch.distributed.checkpoint")
    d = tmp_path / "ck"
    d.mkdir()
    won = run_two(tmp_path, Saver("dcp", d), Saver("dcp", d), check_dcp)
    assert sum(won.values()) == TRIALS


def test_the_lock_file_exists_only_while_a_commit_holds_it(tmp_path):
    with _native.DirLock(tmp_path):
        assert os.listdir(tmp_path) == [".gpufile-lock"]
    assert os.listdir(tmp_path) == []


def test_a_dcp_save_whose_data_files_are_gone_at_its_commit_raises_and_publishes_nothing(
        tmp_path):
    torch = pytest.importorskip("torch")
    dcp = pytest.importorskip("torch.distributed.checkpoint")
    import warnings

    import gpufile.torch as gt

    class Losing(gt.FileSystemWriter):
        """Its data files are removed (by something other than a gpufile save) after they are
        written and before the commit."""

        def write_data(self, plan, planner):
            fut = super().write_data(plan, planner)
            for wr in fut.value():
                os.unlink(os.path.join(self.path, wr.storage_data.relative_path))
            return fut

    d = tmp_path / "ck"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save({"a": torch.ones(8)}, storage_writer=gt.FileSystemWriter(d))
        before = sorted(os.listdir(d))
        # torch wraps it in a CheckpointException, a BaseException.
        with pytest.raises(BaseException, match="(?s)nothing was published at .*data files of this "
                                            "save are gone"):
            dcp.save({"a": torch.zeros(8)}, storage_writer=Losing(d))
        assert sorted(os.listdir(d)) == before
        sd = {"a": torch.zeros(8)}
        dcp.load(sd, storage_reader=dcp.FileSystemReader(d))
    assert bool((sd["a"] == 1).all())
