"""PyTorch Distributed Checkpoint on gpufile: several ranks as real processes (gloo on CPU),
checkpoints interoperable both ways with torch's FileSystemWriter/Reader, async saves, and
a previous checkpoint intact after kill -9 at random moments."""

import os
import pickle
import random
import socket
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)
dcp = pytest.importorskip("torch.distributed.checkpoint")

import gpufile.torch as gt  # noqa: E402
from conftest import kill_during_a_save  # noqa: E402

WORKER = os.path.join(os.path.dirname(__file__), "dcp_worker.py")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(action, kind, world, directory, seed=1):
    port = _port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KVIKIO_", "GPUFILE_"))}
    env["GPUFILE_NUM_THREADS"] = "2"
    procs = [subprocess.Popen([sys.executable, WORKER, action, kind, str(r), str(world),
                               str(port), str(directory), str(seed)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for r in range(world)]
    outs = [p.communicate(timeout=300) for p in procs]
    for r, (p, (out, err)) in enumerate(zip(procs, outs)):
        assert p.returncode == 0 and out.strip().endswith("ok"), f"rank {r}: {err[-3000:]}"


@pytest.mark.parametrize("writer,reader", [("gpufile", "torch"), ("torch", "gpufile"),
                                           ("gpufile", "gpufile")])
def test_checkpoints_interoperate_with_torch_both_ways(tmp_path, writer, reader):
    run_ranks("save", writer, 2, tmp_path / "ck")
    run_ranks("load", reader, 2, tmp_path / "ck")
    files = sorted(os.listdir(tmp_path / "ck"))
    assert ".metadata" in files and all(f.endswith(".distcp") for f in files if f != ".metadata")
    assert {f.split("_")[2] for f in files if f != ".metadata"} == {"0", "1"}
    assert not [f for f in files if f.startswith(".gpufile-tmp-")]


def test_a_checkpoint_of_two_ranks_loads_resharded_on_three(tmp_path):
    run_ranks("save", "gpufile", 2, tmp_path / "ck")
    run_ranks("load_sharded", "gpufile", 3, tmp_path / "ck")
    run_ranks("load_sharded", "torch", 3, tmp_path / "ck")


def test_async_save_with_the_gpufile_writer(tmp_path):
    run_ranks("async_save", "gpufile", 2, tmp_path / "ck")
    run_ranks("load", "torch", 2, tmp_path / "ck")


def test_a_new_save_replaces_the_old_and_removes_its_data_files(tmp_path):
    run_ranks("save", "gpufile", 2, tmp_path / "ck", seed=1)
    first = set(os.listdir(tmp_path / "ck"))
    run_ranks("save", "gpufile", 2, tmp_path / "ck", seed=2)
    second = set(os.listdir(tmp_path / "ck"))
    assert first & second == {".metadata"}
    run_ranks("load", "torch", 2, tmp_path / "ck", seed=2)


def test_single_process_save_and_load_without_a_process_group(tmp_path):
    sd = {"a": torch.arange(10.0), "b": {"c": torch.ones(2, 2, dtype=torch.bfloat16)}, "n": 3}
    dcp.save(sd, storage_writer=gt.FileSystemWriter(tmp_path / "ck"))
    out = {"a": torch.zeros(10), "b": {"c": torch.zeros(2, 2, dtype=torch.bfloat16)}, "n": 0}
    dcp.load(out, storage_reader=gt.FileSystemReader(tmp_path / "ck"))
    assert torch.equal(out["a"], sd["a"]) and torch.equal(out["b"]["c"], sd["b"]["c"])
    assert out["n"] == 3
    with open(tmp_path / "ck" / ".metadata", "rb") as f:
        meta = pickle.load(f)
    assert meta.version == dcp.filesystem.CURRENT_DCP_VERSION
    assert {s.relative_path for s in meta.storage_data.values()} == \
        {f for f in os.listdir(tmp_path / "ck") if f.endswith(".distcp")}


def test_whole_tensors_are_read_straight_into_their_targets(tmp_path, monkeypatch):
    sd = {"w": torch.randn(256, 64), "h": torch.ones(3, dtype=torch.float16),
          "v": torch.arange(12.0).reshape(3, 4).t()}
    dcp.save(sd, storage_writer=dcp.FileSystemWriter(tmp_path / "ck"))  # torch's own files
    slow = []
    real = gt.FileSystemReader._slow
    monkeypatch.setattr(gt.FileSystemReader, "_slow",
                        lambda self, req, *a: slow.append(req.storage_index.fqn) or real(self, req, *a))
    out = {"w": torch.zeros(256, 64), "h": torch.zeros(3, dtype=torch.float16),
           "v": torch.zeros(4, 3)}
    dcp.load(out, storage_reader=gt.FileSystemReader(tmp_path / "ck"))
    for k in sd:
        assert torch.equal(out[k], sd[k])
    # "v" was saved with the strides of a transposed view: torch.load reads it.
    assert slow == ["v"]


def test_a_failed_write_publishes_nothing_and_keeps_the_previous_checkpoint(tmp_path):
    from gpufile import _native
    sd = {"a": torch.arange(1 << 18, dtype=torch.float32)}
    dcp.save(sd, storage_writer=gt.FileSystemWriter(tmp_path / "ck"))
    before = sorted(os.listdir(tmp_path / "ck"))
    _native._inject_faults([("write", 0, "enospc", 1000)])
    try:
        with pytest.raises(dcp.api.CheckpointException) as e:
            dcp.save({"a": torch.zeros(1 << 18)},
                     storage_writer=gt.FileSystemWriter(tmp_path / "ck"))
    finally:
        _native._inject_faults([])
    assert "No space left on device" in str(e.value)
    assert sorted(os.listdir(tmp_path / "ck")) == before
    out = {"a": torch.zeros(1 << 18)}
    dcp.load(out, storage_reader=dcp.FileSystemReader(tmp_path / "ck"))
    assert torch.equal(out["a"], sd["a"])


_CHILD = textwrap.dedent("""
    import sys, torch, torch.distributed.checkpoint as dcp
    import gpufile.torch as gt
    i = 0
    while True:
        i += 1
        v = float(i % 2 + 1)
        sd = {f"t{k}": torch.full((1 << 20,), v) for k in range(16)}
        dcp.save(sd, storage_writer=gt.FileSystemWriter(sys.argv[1]))
        print(i, flush=True)
""")


def test_kill_9_during_dcp_save_leaves_the_previous_checkpoint_whole(tmp_path):
    # 64 MiB a save: its data files (written, then synced) are open for most of each save, so
    # random kills land in the middle of one.
    target = str(tmp_path / "ck")
    rng = random.Random(7)
    mid_save, before = 0, set()
    for round_ in range(6):
        p = subprocess.Popen([sys.executable, "-W", "ignore", "-c", _CHILD, target],
                             stdout=subprocess.PIPE, text=True)
        p.stdout.readline()
        kill_during_a_save(p, target, rng, round_)
        p.stdout.close()
        out = {f"t{k}": torch.zeros(1 << 20) for k in range(16)}
        dcp.load(out, storage_reader=dcp.FileSystemReader(target))
        values = {float(t[0]) for t in out.values()} | {float(t[-1]) for t in out.values()}
        assert len(values) == 1 and values <= {1.0, 2.0}, values
        left = {f for f in os.listdir(target) if f.startswith(".gpufile-tmp-")}
        mid_save += bool(left - before)
        before = left
    assert mid_save >= 2, mid_save  # the kills did land in the middle of saves


def test_several_files_are_written_together_in_task_size_pieces(tmp_path, monkeypatch):
    import gpufile
    sd = {f"t{k}": torch.full((1 << 15,), float(k)) for k in range(6)}  # 128 KiB each
    batches = []
    real_batch = gt.write_batch
    monkeypatch.setattr(gt, "write_batch", lambda e: batches.append(list(e)) or real_batch(e))
    dir_syncs = []
    real_sync = gt._native.sync_dir
    monkeypatch.setattr(gt._native, "sync_dir", lambda d: dir_syncs.append(d) or real_sync(d))
    with gpufile.defaults.set({"task_size": 32 << 10}):
        dcp.save(sd, storage_writer=gt.FileSystemWriter(tmp_path / "ck", thread_count=3))
    [entries] = batches
    assert all(size <= 32 << 10 for _, _, size, _ in entries)
    # A piece of each of the three files in turn, from the first piece on.
    handles = [f for f, *_ in entries]
    assert len({id(f) for f in handles[:3]}) == 3
    assert [id(f) for f in handles[3:6]] == [id(f) for f in handles[:3]]
    # The data files are renamed after all of them are synced, with one sync of the directory.
    assert len(dir_syncs) == 1
    out = {k: torch.zeros_like(v) for k, v in sd.items()}
    dcp.load(out, storage_reader=dcp.FileSystemReader(tmp_path / "ck"))
    assert all(torch.equal(out[k], sd[k]) for k in sd)
    assert len([f for f in os.listdir(tmp_path / "ck") if f.endswith(".distcp")]) == 3


def test_a_rank_writes_four_files_unless_thread_count_says_otherwise(tmp_path):
    sd = {f"t{k}": torch.full((1000 + k,), float(k)) for k in range(6)}

    def data_files(d):
        return [f for f in os.listdir(d) if f.endswith(".distcp")]
    dcp.save(sd, storage_writer=gt.FileSystemWriter(tmp_path / "four"))
    assert len(data_files(tmp_path / "four")) == 4
    dcp.save(sd, storage_writer=gt.FileSystemWriter(tmp_path / "one", thread_count=1))
    assert len(data_files(tmp_path / "one")) == 1
    # Fewer tensors than files: no empty files.
    dcp.save({"a": sd["t0"], "b": sd["t1"]}, storage_writer=gt.FileSystemWriter(tmp_path / "two"))
    assert len(data_files(tmp_path / "two")) == 2
    for d in ("four", "one"):
        out = {k: torch.zeros_like(v) for k, v in sd.items()}
        dcp.load(out, storage_reader=dcp.FileSystemReader(tmp_path / d))
        assert all(torch.equal(out[k], sd[k]) for k in sd), d


def test_a_record_is_made_once_per_dtype_and_shape(tmp_path, monkeypatch):
    made = []
    real = gt._save_record
    monkeypatch.setattr(gt, "_save_record", lambda t: made.append((t.dtype, t.shape)) or real(t))
    sd = {f"w{k}": torch.randn(8, 3) for k in range(20)}
    sd |= {f"b{k}": torch.randn(3).to(torch.bfloat16) for k in range(20)}
    sd["h"] = torch.randn(8, 3).half()
    dcp.save(sd, storage_writer=gt.FileSystemWriter(tmp_path / "ck"))
    assert sorted(map(str, made)) == sorted(map(str, [
        (torch.float32, torch.Size([8, 3])), (torch.bfloat16, torch.Size([3])),
        (torch.float16, torch.Size([8, 3]))]))
    out = {k: torch.zeros_like(v) for k, v in sd.items()}
    dcp.load(out, storage_reader=dcp.FileSystemReader(tmp_path / "ck"))
    assert all(torch.equal(out[k], sd[k]) for k in sd)


def _append_record(ck, fqn, record: bytes, offset=None):
    """Appends ``record`` to the data file of ``fqn``'s item and points the checkpoint's
    metadata at it (edited through torch's own classes); ``offset`` overrides where the
    metadata says it starts."""
    import dataclasses
    with open(ck / ".metadata", "rb") as f:
        meta = pickle.load(f)
    (index, info), = [(k, v) for k, v in meta.storage_data.items() if k.fqn == fqn]
    data = ck / info.relative_path
    at = data.stat().st_size
    with open(data, "ab") as f:
        f.write(record)
    meta.storage_data[index] = dataclasses.replace(
        info, offset=at if offset is None else offset, length=len(record))
    with open(ck / ".metadata", "wb") as f:
        pickle.dump(meta, f)


def _load_error(state_dict, reader):
    """The error a load raised on rank 0 (DCP wraps it in a CheckpointException)."""
    with pytest.raises(dcp.api.CheckpointException) as e:
        dcp.load(state_dict, storage_reader=reader)
    return e.value.failures[0][0]


def test_a_record_with_a_negative_storage_offset_is_refused(tmp_path):
    """A record whose tensor starts before its storage (a negative storage offset in its
    pickle) would be read from earlier bytes of the data file; torch refuses it, and so does
    gpufile's reader, as it refuses a record placed at a negative offset of its file."""
    import io
    import struct
    ck = tmp_path / "ck"
    dcp.save({"t": torch.arange(4.0)}, storage_writer=gt.FileSystemWriter(ck))
    # torch.save of a view 70000 items into its storage: the offset is pickled as 4 bytes.
    buf = io.BytesIO()
    torch.save(torch.arange(70004.0)[70000:], buf)
    good = buf.getvalue()
    packed = b"J" + struct.pack("<i", 70000)
    assert good.count(packed) == 1
    _append_record(ck, "t", good.replace(packed, b"J" + struct.pack("<i", -1)))
    out = {"t": torch.full((4,), 7.0)}
    err = _load_error(out, gt.FileSystemReader(ck))
    assert isinstance(err, ValueError), err
    assert "'t' in __0_0." in str(err) and "storage offset -1: a negative" in str(err)
    assert torch.equal(out["t"], torch.full((4,), 7.0))
    # torch's own reader refuses the record too.
    assert "storage offset" in str(_load_error({"t": torch.zeros(4)}, dcp.FileSystemReader(ck)))

    # The same record, sound, loads; placed at a negative offset of its file, it is refused.
    ck2 = tmp_path / "ck2"
    dcp.save({"t": torch.arange(4.0)}, storage_writer=gt.FileSystemWriter(ck2))
    _append_record(ck2, "t", good)
    out = {"t": torch.zeros(4)}
    dcp.load(out, storage_reader=gt.FileSystemReader(ck2))
    assert torch.equal(out["t"], torch.arange(70000.0, 70004.0))
    _append_record(ck2, "t", good, offset=-len(good))
    err = _load_error({"t": torch.zeros(4)}, gt.FileSystemReader(ck2))
    assert isinstance(err, ValueError) and "at a negative offset" in str(err), err


def test_the_writers_stager_says_where_it_staged(tmp_path):
    sd = {"b": torch.arange(10.0), "n": 3}
    writer = gt.FileSystemWriter(tmp_path / "ck")
    fut = dcp.async_save(sd, storage_writer=writer)
    sd["b"].fill_(0)  # after the call: the staged copy keeps the values
    assert writer.staging == {"where": "pinned", "bytes": 256, "reason": "CPU tensors"}
    fut.result()
    out = {"b": torch.zeros(10), "n": 0}
    dcp.load(out, storage_reader=gt.FileSystemReader(tmp_path / "ck"))
    assert torch.equal(out["b"], torch.arange(10.0)) and out["n"] == 3
