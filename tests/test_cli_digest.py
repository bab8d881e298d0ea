"""``gpufile digest`` and ``gpufile verify``: BLAKE3 digests of every tensor of a safetensors
checkpoint, written to a manifest and checked against it (or against the table a file carries in
its ``__metadata__``), as a user runs them (``python -m gpufile digest ...``)."""

import json
import os
import struct
import subprocess
import sys

import numpy as np
import safetensors.numpy as stn

from test_cli_json import check_object
from test_cli_load import model_tensors, write_shards


def cli(*args):
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("KVIKIO_", "GPUFILE_"))}
    return subprocess.run([sys.executable, "-m", "gpufile", *map(str, args)],
                          capture_output=True, text=True, env=clean, timeout=120)


def ok(*args):
    r = cli(*args)
    assert r.returncode == 0, (r.stdout, r.stderr)
    return r


def tensor_at(path, name):
    """(file offset, length) of `name`'s bytes, from the file's own header."""
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    begin, end = json.loads(raw[8:8 + n])[name]["data_offsets"]
    return 8 + n + begin, end - begin


def flip(path, offset):
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x01]))


def one_file(tmp_path):
    rng = np.random.default_rng(3)
    path = tmp_path / "m.safetensors"
    stn.save_file({
        "empty": np.zeros(0, np.float32),
        "one": np.ones(1, np.uint8),
        "odd": rng.integers(0, 255, 1001, dtype=np.uint8),
        "big": rng.standard_normal((3 << 20) // 4 + 3).astype(np.float32),  # > 3 MiB, odd
    }, path)
    return path


def test_digest_then_verify_passes_and_follows_docs_json_md(tmp_path):
    path = one_file(tmp_path)
    before = path.read_bytes()
    out = json.loads(ok("digest", path, "--json").stdout)
    check_object(out, "digest")
    manifest = tmp_path / "m.safetensors.blake3.json"
    assert out["manifest"] == str(manifest) and out["tensors"] == 4
    m = json.loads(manifest.read_text())
    assert m["format"] == "gpufile-blake3/1"
    entry = m["files"]["m.safetensors"]
    assert entry["size"] == path.stat().st_size
    assert sorted(entry["tensors"]) == ["big", "empty", "odd", "one"]
    # BLAKE3 of no bytes, and every digest 64 hex digits.
    assert entry["tensors"]["empty"] == (
        "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262")
    assert all(len(d) == 64 and int(d, 16) >= 0 for d in entry["tensors"].values())
    assert path.read_bytes() == before  # digest reads only

    for threads in ("1", "2"):
        out = json.loads(ok("verify", path, "--json", "--threads", threads).stdout)
        check_object(out, "verify")
        assert out["verified"] is True and out["mismatches"] == [] and out["error"] is None
        assert out["threads"] == int(threads) and out["files"][0]["digests"] == "manifest"
        assert out["bytes"] == sum(tensor_at(path, n)[1] for n in entry["tensors"])
    text = ok("verify", path).stdout
    assert "verified    every tensor matches its digest" in text
    assert "m.safetensors: 4 tensors" in text and "GB/s, ok" in text


def test_a_flipped_byte_in_a_tensor_is_caught_and_named(tmp_path):
    path = one_file(tmp_path)
    ok("digest", path)
    manifest = json.loads((tmp_path / "m.safetensors.blake3.json").read_text())
    expected = manifest["files"]["m.safetensors"]["tensors"]["big"]
    at, n = tensor_at(path, "big")
    flip(path, at + n - 5)  # in the last leaf of a tensor hashed in parallel
    r = cli("verify", path)
    assert r.returncode == 1
    lines = [line for line in r.stdout.splitlines() if line.startswith("mismatch")]
    assert len(lines) == 1, r.stdout
    assert f'{path}: tensor "big": expected {expected}, computed ' in lines[0]
    assert lines[0].split("computed ")[1] != expected
    assert "verification failed: 1 tensor of" in r.stderr

    r = cli("verify", path, "--json")
    assert r.returncode == 1
    out = json.loads(r.stdout)
    check_object(out, "verify")
    assert out["verified"] is False and out["error"]["type"] == "verification-failed"
    [m] = out["mismatches"]
    assert (m["file"], m["tensor"], m["expected"]) == (str(path), "big", expected)
    assert m["computed"] != expected and out["files"][0]["mismatches"] == 1


def test_a_flipped_digest_in_the_manifest_is_caught(tmp_path):
    path = one_file(tmp_path)
    ok("digest", path)
    manifest = tmp_path / "m.safetensors.blake3.json"
    m = json.loads(manifest.read_text())
    good = m["files"]["m.safetensors"]["tensors"]["odd"]
    bad = good[:10] + ("0" if good[10] != "0" else "1") + good[11:]
    m["files"]["m.safetensors"]["tensors"]["odd"] = bad
    manifest.write_text(json.dumps(m))
    r = cli("verify", path)
    assert r.returncode == 1
    assert f'tensor "odd": expected {bad}, computed {good}' in r.stdout


def test_no_digests_is_a_clear_error_saying_how_to_make_them(tmp_path):
    path = one_file(tmp_path)
    r = cli("verify", path, "--json")
    assert r.returncode == 1
    out = json.loads(r.stdout)
    check_object(out, "error-output")
    assert out["error"]["type"] == "no-digest"
    assert f"gpufile digest {path}" in out["error"]["message"]
    r = cli("verify", path, "--manifest", tmp_path / "none.json")
    assert r.returncode == 1 and "no such manifest" in r.stderr and "gpufile digest" in r.stderr


def test_an_existing_manifest_needs_force(tmp_path):
    path = one_file(tmp_path)
    out = tmp_path / "sums.json"
    ok("digest", path, "--out", out)
    first = out.read_text()
    out.write_text("mine")
    r = cli("digest", path, "--out", out, "--json")
    assert r.returncode == 1
    err = json.loads(r.stdout)["error"]
    assert err["type"] == "os" and err["errno"] == 17 and "--force" in err["message"]
    assert out.read_text() == "mine"
    ok("digest", path, "--out", out, "--force")
    assert out.read_text() == first
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".gpufile-tmp-")]
    ok("verify", path, "--manifest", out)


def test_a_sharded_directory_checkpoint(tmp_path):
    write_shards(tmp_path, model_tensors(), n=3)
    out = json.loads(ok("digest", tmp_path, "--json").stdout)
    assert len(out["files"]) == 3
    manifest = tmp_path / "gpufile.blake3.json"
    assert sorted(json.loads(manifest.read_text())["files"]) == [
        f"model-{i:05d}-of-00003.safetensors" for i in (1, 2, 3)]
    # The index and the directory find the same manifest.
    for target in (tmp_path, tmp_path / "model.safetensors.index.json"):
        assert json.loads(ok("verify", target, "--json").stdout)["verified"] is True
    shard = tmp_path / "model-00002-of-00003.safetensors"
    at, _ = tensor_at(shard, "model.layers.0.mlp.up")
    flip(shard, at)
    r = cli("verify", tmp_path, "--json")
    assert r.returncode == 1
    out = json.loads(r.stdout)
    assert [(m["file"], m["tensor"]) for m in out["mismatches"]] == [
        (str(shard), "model.layers.0.mlp.up")]
    assert [f["mismatches"] for f in out["files"]] == [0, 1, 0]


def test_digests_in_the_files_metadata_are_checked(tmp_path):
    path = one_file(tmp_path)
    ok("digest", path)
    table = json.loads((tmp_path / "m.safetensors.blake3.json").read_text())["files"]
    table = table["m.safetensors"]
    (tmp_path / "m.safetensors.blake3.json").unlink()
    tensors = stn.load_file(path)
    with_meta = tmp_path / "w.safetensors"
    stn.save_file(tensors, with_meta,
                  metadata={"gpufile.blake3": json.dumps({"tensors": table["tensors"]})})
    out = json.loads(ok("verify", with_meta, "--json").stdout)
    assert out["manifest"] is None and out["files"][0]["digests"] == "metadata"
    assert "each file's __metadata__" in ok("verify", with_meta).stdout
    at, _ = tensor_at(with_meta, "one")
    flip(with_meta, at)
    r = cli("verify", with_meta)
    assert r.returncode == 1 and 'tensor "one": expected' in r.stdout
