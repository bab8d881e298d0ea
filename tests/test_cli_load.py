"""``gpufile load``: safetensors checkpoints (one file, a sharded directory, an index) through the
command line, as a user runs it (``python -m gpufile load ...``)."""

import json
import os
import struct
import subprocess
import sys

import numpy as np
import pytest
import safetensors.numpy as stn
from conftest import gpu_reason  # noqa: E402


GPU_REASON = gpu_reason()


def gpufile_cli(*args):
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("KVIKIO_", "GPUFILE_"))}
    return subprocess.run([sys.executable, "-m", "gpufile", "load", *map(str, args)],
                          capture_output=True, text=True, env=clean, timeout=120)


def load_json(*args):
    r = gpufile_cli(*args, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def model_tensors():
    rng = np.random.default_rng(7)
    return {
        "model.embed.weight": rng.standard_normal((128, 64)).astype(np.float32),
        "model.layers.0.attn.q": rng.standard_normal((64, 64)).astype(np.float16),
        "model.layers.0.attn.k": rng.standard_normal((64, 33)).astype(np.float16),
        "model.layers.0.mlp.up": rng.integers(-99, 99, (17, 3), dtype=np.int64),
        "model.layers.1.attn.q": rng.standard_normal((64, 64)).astype(np.float16),
        "model.layers.1.mask": rng.integers(0, 2, 101).astype(bool),
        "model.norm.scale": rng.standard_normal(7).astype(np.float64),
        "lm_head.weight": rng.integers(0, 255, (31, 5), dtype=np.uint8),
    }


def nbytes(tensors, names=None):
    return sum(tensors[n].nbytes for n in (names if names is not None else tensors))


def write_shards(directory, tensors, n=3, index=True):
    """A Hugging Face sharded checkpoint: n files and (optionally) model.safetensors.index.json."""
    names = sorted(tensors)
    weight_map = {}
    for i in range(n):
        fname = f"model-{i + 1:05d}-of-{n:05d}.safetensors"
        part = names[i::n]
        stn.save_file({k: tensors[k] for k in part}, directory / fname)
        weight_map.update({k: fname for k in part})
    if index:
        (directory / "model.safetensors.index.json").write_text(json.dumps(
            {"metadata": {"total_size": nbytes(tensors)}, "weight_map": weight_map}))
    return weight_map


def test_one_file_loads_every_tensor_into_host_memory(tmp_path):
    tensors = model_tensors()
    path = tmp_path / "model.safetensors"
    stn.save_file(tensors, path)
    rep = load_json(path, "--host", "--verify")
    assert rep["schema_version"] == 2 and rep["command"] == "load"
    assert rep["tensors"] == rep["tensors_total"] == len(tensors)
    assert rep["bytes"] == rep["checkpoint_bytes"] == nbytes(tensors)
    assert rep["memory"] == "host" and rep["device"] is None
    assert rep["verified"] is True
    assert rep["files"] == [{"path": str(path), "tensors": len(tensors),
                             "bytes": nbytes(tensors)}]
    # Every byte read went through gpufile's engine, and only those bytes.
    assert rep["observed"]["by_path"]["gpufile-posix"]["bytes"] == nbytes(tensors)
    assert rep["observed"]["by_path"]["gpufile-posix"]["ops"] == rep["requests"]
    assert rep["path"]["backend"] == "gpufile-posix"
    assert rep["path"]["reason"]["kind"] == "host-buffer"
    assert rep["throughput_gb_per_s"] > 0 and rep["tensors_per_s"] > 0
    assert rep["allocation_bytes"] >= rep["bytes"]


@pytest.mark.parametrize("target", ["dir", "index"])
def test_sharded_checkpoint_is_one_load(tmp_path, target):
    tensors = model_tensors()
    write_shards(tmp_path, tensors, n=3)
    path = tmp_path if target == "dir" else tmp_path / "model.safetensors.index.json"
    rep = load_json(path, "--host", "--verify")
    assert rep["tensors"] == len(tensors)
    assert rep["bytes"] == nbytes(tensors)
    assert len(rep["files"]) == 3
    assert sum(f["tensors"] for f in rep["files"]) == len(tensors)
    assert sum(f["bytes"] for f in rep["files"]) == nbytes(tensors)
    assert all(f["bytes"] > 0 for f in rep["files"])
    assert rep["observed"]["by_path"]["gpufile-posix"]["bytes"] == nbytes(tensors)
    assert rep["verified"] is True


def test_directory_without_index_reads_every_shard(tmp_path):
    tensors = model_tensors()
    write_shards(tmp_path, tensors, n=2, index=False)
    rep = load_json(tmp_path, "--host", "--verify")
    assert rep["tensors"] == len(tensors) and rep["bytes"] == nbytes(tensors)


def test_index_loads_only_the_tensors_it_maps(tmp_path):
    # As transformers does: a tensor a shard holds but the index does not name is not loaded.
    tensors = model_tensors()
    weight_map = write_shards(tmp_path, tensors, n=2)
    dropped = "model.norm.scale"
    del weight_map[dropped]
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    rep = load_json(tmp_path, "--host", "--verify")
    assert rep["tensors"] == len(tensors) - 1
    assert rep["bytes"] == nbytes(tensors) - tensors[dropped].nbytes


def test_filter_reads_only_the_selected_bytes(tmp_path):
    tensors = model_tensors()
    write_shards(tmp_path, tensors, n=3)
    chosen = [n for n in tensors if n.startswith("model.layers.0.")] + ["lm_head.weight"]
    rep = load_json(tmp_path, "--host", "--verify", "--filter", "model.layers.0.*,lm_head.weight")
    assert rep["tensors"] == len(chosen)
    assert rep["tensors_total"] == len(tensors)
    assert rep["bytes"] == nbytes(tensors, chosen)
    assert rep["checkpoint_bytes"] == nbytes(tensors)
    # What the engine moved: the selected bytes, nothing more.
    assert rep["observed"]["by_path"]["gpufile-posix"]["bytes"] == nbytes(tensors, chosen)
    assert rep["verified"] is True
    # A single tensor, named twice: once.
    rep = load_json(tmp_path, "--host", "--filter", "model.norm.scale",
                    "--filter", "model.norm.scale")
    assert rep["tensors"] == 1 and rep["requests"] == 1
    assert rep["bytes"] == tensors["model.norm.scale"].nbytes
    assert sum(f["tensors"] for f in rep["files"]) == 1


def test_text_output(tmp_path):
    tensors = model_tensors()
    path = tmp_path / "model.safetensors"
    stn.save_file(tensors, path)
    r = gpufile_cli(path, "--host", "--verify", "--filter", "lm_head.weight")
    assert r.returncode == 0, r.stderr
    rows = {line[:12].strip(): line[12:] for line in r.stdout.splitlines()}
    assert rows["tensors"].startswith(f"1 of {len(tensors)}")
    assert rows["bytes"].startswith(f"{tensors['lm_head.weight'].nbytes} (155 B) in 1 request")
    assert "GB/s" in rows["throughput"] and "tensors/s" in rows["throughput"]
    assert rows["memory"].startswith("host")
    assert rows["observed"].startswith("gpufile-posix")
    assert rows["verified"] == "every tensor matches the file"


def test_without_a_gpu_it_loads_to_host_and_says_why(tmp_path):
    if GPU_REASON is None:
        pytest.skip("a CUDA device is present: the default is GPU 0")
    path = tmp_path / "model.safetensors"
    stn.save_file(model_tensors(), path)
    rep = load_json(path)
    assert rep["memory"] == "host"
    assert rep["memory_note"]


def write_raw(path, header, data=b""):
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)


def f32(name, n, start=0, nbytes=None):
    return {name: {"dtype": "F32", "shape": [n], "data_offsets": [start, start + (nbytes or 4 * n)]}}


@pytest.mark.parametrize("case", [
    "truncated", "header_past_end", "bad_json", "shape_mismatch", "unknown_dtype", "overlap",
    "out_of_bounds",
])
def test_bad_files_exit_1_naming_file_and_tensor(tmp_path, case):
    path = tmp_path / "bad.safetensors"
    tensor = "w"
    if case == "truncated":
        stn.save_file({"w": np.zeros(1000, np.float32)}, path)
        path.write_bytes(path.read_bytes()[:-100])
        says = "truncated"
    elif case == "header_past_end":
        path.write_bytes(struct.pack("<Q", 10_000) + b"{}")
        says, tensor = "past the end of the file", None
    elif case == "bad_json":
        write_raw(path, b'{"w": {"dtype": ')
        says, tensor = "invalid header", None
    elif case == "shape_mismatch":
        write_raw(path, f32("w", 4, nbytes=12), bytes(12))
        says = "needs 16 bytes"
    elif case == "unknown_dtype":
        write_raw(path, {"w": {"dtype": "F13", "shape": [1], "data_offsets": [0, 1]}}, b"x")
        says = "F13"
    elif case == "overlap":
        write_raw(path, {**f32("v", 4), **f32("w", 4, start=8)}, bytes(24))
        says = "overlaps"
    else:
        write_raw(path, f32("w", 4), bytes(8))
        says = "past the data area"
    r = gpufile_cli(path, "--host")
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert r.stdout == ""
    assert str(path) in r.stderr and says in r.stderr, r.stderr
    if tensor:
        assert f'tensor "{tensor}"' in r.stderr, r.stderr


def test_argument_errors(tmp_path):
    r = gpufile_cli(tmp_path / "missing.safetensors")
    assert r.returncode == 1 and "No such file" in r.stderr
    r = gpufile_cli(tmp_path)
    assert r.returncode == 1 and "no *.safetensors file" in r.stderr
    path = tmp_path / "model.safetensors"
    stn.save_file(model_tensors(), path)
    r = gpufile_cli(path, "--host", "--filter", "model.layers.9.*")
    assert r.returncode == 1 and str(path) in r.stderr and "model.layers.9." in r.stderr
    r = gpufile_cli(path, "--host", "--filter", "nope")
    assert r.returncode == 1 and 'no tensor named "nope"' in r.stderr
    r = gpufile_cli(path, "--host", "--device", "0")
    assert r.returncode == 2


def _chunk(a, dim, rank, world):
    """This rank's part as torch.chunk (and transformers' get_tensor_shard) cuts it."""
    n = a.shape[dim]
    size = -(-n // world)
    start = min(rank * size, n)
    return a.take(range(start, min(start + size, n)), axis=dim)


def test_shard_reads_only_this_ranks_part_and_verifies_it(tmp_path):
    tensors = model_tensors()
    write_shards(tmp_path, tensors, n=3)
    rules = {"*.attn.q": ("rowwise", 1), "model.embed.weight": ("0", 0), "*.attn.k": ("1", 1)}
    spec = ",".join(f"{p}={w}" for p, (w, _) in rules.items())
    sharded = [n for n in tensors if n.endswith(("attn.q", "attn.k")) or n.startswith("model.e")]
    replicated = nbytes(tensors) - nbytes(tensors, sharded)
    total = 0
    for rank in range(2):
        rep = load_json(tmp_path, "--host", "--verify", "--shard", spec, "--rank", rank,
                        "--world-size", 2)
        dim = {n: d for n in sharded for p, (_, d) in rules.items()
               if n.endswith(p.lstrip("*")) or n == p}
        want = replicated + sum(_chunk(tensors[n], dim[n], rank, 2).nbytes for n in sharded)
        assert rep["bytes"] == want and rep["verified"] is True
        assert rep["observed"]["by_path"]["gpufile-posix"]["bytes"] == want
        total += rep["bytes"] - replicated
    assert total == nbytes(tensors, sharded)  # every sharded byte read once over the ranks
    r = gpufile_cli(tmp_path, "--host", "--shard", "*.attn.q=colwize", "--rank", 0,
                    "--world-size", 2)
    assert r.returncode == 1 and 'invalid sharding: unknown split "colwize"' in r.stderr
    r = gpufile_cli(tmp_path, "--host", "--shard", "*.attn.q=0", "--rank", 2, "--world-size", 2)
    assert r.returncode == 1 and "rank 2 is not one of world_size 2 ranks" in r.stderr
    r = gpufile_cli(tmp_path, "--host", "--shard", "colwise", "--rank", 0, "--world-size", 2)
    assert r.returncode == 1 and "is not PATTERN=SPLIT" in r.stderr
    r = gpufile_cli(tmp_path, "--host", "--rank", 0)
    assert r.returncode == 2 and "--shard" in r.stderr


@pytest.mark.gpu
@pytest.mark.skipif(GPU_REASON is not None, reason=GPU_REASON or "")
def test_sharded_checkpoint_to_gpu_0(tmp_path):
    tensors = model_tensors()
    write_shards(tmp_path, tensors, n=3)
    rep = load_json(tmp_path, "--device", "0", "--verify")
    assert rep["memory"] == "device" and rep["device"] == 0 and rep["device_name"]
    assert rep["bytes"] == nbytes(tensors)
    assert rep["verified"] is True
    moved = sum(p["bytes"] for p in rep["observed"]["by_path"].values())
    assert moved == nbytes(tensors)


def test_json_follows_docs_json_md(tmp_path):
    from test_cli_json import check_object

    tensors = model_tensors()
    write_shards(tmp_path, tensors, n=2)
    check_object(load_json(tmp_path, "--host", "--verify"), "load")
    check_object(load_json(tmp_path, "--host", "--filter", "lm_head.weight"), "load")


def test_json_errors_name_file_tensor_and_type(tmp_path):
    from test_cli_json import check_object

    path = tmp_path / "bad.safetensors"
    write_raw(path, f32("w", 4, nbytes=12), bytes(12))
    r = gpufile_cli(path, "--host", "--json")
    assert r.returncode == 1
    out = json.loads(r.stdout)
    check_object(out, "error-output")
    assert out["command"] == "load"
    assert out["error"]["type"] == "safetensors"
    assert out["error"]["path"] == str(path)
    assert 'tensor "w"' in out["error"]["message"]
    stn.save_file(model_tensors(), path)
    out = json.loads(gpufile_cli(path, "--host", "--json", "--filter", "nope").stdout)
    assert out["error"]["type"] == "unknown-tensor" and out["error"]["path"] == str(path)


@pytest.mark.parametrize("patterns", [["model.layers.0*"], ["model.layers.0.*", "lm_head.weight"],
                                      ["model.norm.scale", "model.*"], ["*"]])
def test_load_file_filter_takes_the_patterns_of_the_cli(tmp_path, patterns):
    import gpufile.safetensors as gs
    tensors = model_tensors()
    path = tmp_path / "m.safetensors"
    stn.save_file(tensors, path)
    got = gs.load_file(path, framework="numpy", filter=patterns)
    rep = load_json(path, "--host", "--filter", ",".join(patterns))
    assert rep["tensors"] == len(got) > 0
    assert rep["bytes"] == nbytes(tensors, list(got))
    for name, arr in got.items():
        assert any(name == p or (p.endswith("*") and name.startswith(p[:-1])) for p in patterns)
        np.testing.assert_array_equal(arr, tensors[name])
    with pytest.raises(KeyError, match=r"no tensor name starts with 'model\.layers\.9\.'"):
        gs.load_file(path, framework="numpy", filter=["model.layers.9.*"])
