"""`max_shard_size` is read by the one size parser every size goes through: "5GiB", "5 GiB",
"5GB" (powers of 1000, as huggingface_hub) and bytes all work (it refused "5GiB" with
"Unit 'IB' not supported")."""

import json

import numpy as np
import pytest

import gpufile
from gpufile.safetensors import save_checkpoint


def shard_sizes(directory):
    index = json.loads((directory / "model.safetensors.index.json").read_text())
    return index["metadata"]["total_size"], sorted(set(index["weight_map"].values()))


@pytest.mark.parametrize("limit, expected", [("5GiB", 1), ("5 GiB", 1), ("5GB", 1),
                                             ("8KiB", 2), ("8 kib", 2), ("8KB", 3), (8192, 2),
                                             ("8192", 2)])
def test_max_shard_size_takes_every_size_the_config_takes(tmp_path, limit, expected):
    # Three 4048-byte tensors: 8 KiB (8192) holds two, 8 kB (8000) one.
    state = {f"t{i}": np.full(1012, i, np.float32) for i in range(3)}
    save_checkpoint(state, tmp_path / "ck", max_shard_size=limit)
    files = sorted(p.name for p in (tmp_path / "ck").iterdir())
    if expected == 1:
        assert files == ["model.safetensors"]
    else:
        assert len(shard_sizes(tmp_path / "ck")[1]) == expected, files
    loaded = gpufile.safetensors.load_checkpoint(tmp_path / "ck", framework="numpy")
    assert all((np.asarray(loaded[k]) == v).all() for k, v in state.items())


@pytest.mark.parametrize("limit, message", [
    ("0", 'max_shard_size must be positive, got "0"'),
    ("5 parsecs", 'max_shard_size "5 parsecs": unknown size unit "parsecs"'),
])
def test_a_bad_max_shard_size_says_why(tmp_path, limit, message):
    with pytest.raises(ValueError, match=message):
        save_checkpoint({"t": np.ones(4, np.float32)}, tmp_path / "ck", max_shard_size=limit)
    assert not (tmp_path / "ck").exists()
