"""Saving safetensors files and Hugging Face checkpoints (``gpufile.safetensors.save_file``,
``save_checkpoint``; ``async_save`` stages in ``background`` and calls these): tensors
described for the core (``rows``), written from their own memory, published whole; a URL goes
to ``remote``."""

from __future__ import annotations

import json
import os
from typing import Any, Mapping, Sequence

from .. import _native
from . import remote
from .rows import (
    INDEX_NAME,
    JaxDeviceBytes,
    Row,
    check_metadata,
    describe,
    is_cupy,
    is_torch,
    parse_size,
    storage_size,
    sync_producers,
)


def _annotate(e: BaseException, what: str) -> None:
    if getattr(e, "gpufile_published", False):
        # A step of the commit after its commit point (docs/checkpoints.md, "Crash safety").
        e.add_note(f"gpufile: the new checkpoint is published at {what} and loads; a step after "
                   "its commit failed (its index may name the shards by their temporary names "
                   "until the next save)")
    elif isinstance(e, OSError):
        e.add_note(f"gpufile: nothing was published at {what} (what was there is as it was; "
                   "no temporary file is left)")


def write_file(rows: Sequence[Row], filename: Any, metadata: dict[str, str] | None,
               durable: bool) -> None:
    """Writes ``rows`` to ``filename`` under a temporary name, then publishes it (the core's
    ``save::file::save_file``, GIL released)."""
    try:
        _native.save_file(filename, list(rows), metadata, durable)
    except BaseException as e:
        _annotate(e, os.fsdecode(filename))
        raise


def save_file(tensors: Mapping[str, Any], filename: Any, metadata: Any = None, *,
              durable: bool = True, expected: str | None = None) -> None:
    """``expected``: the one kind of tensor the caller takes (``"torch"``, ``"numpy"``), as
    ``safetensors.torch`` and ``safetensors.numpy`` check it (``rows.describe``)."""
    if _native.is_url(filename):
        return remote.save_file(tensors, filename, metadata)
    rows = describe(tensors, expected)
    meta = check_metadata(metadata)
    sync_producers(tensors)
    write_file(rows, filename, meta, durable)


def _host_bytes(row: Row) -> bytes:
    buf = row[3]
    if is_torch(buf):
        return buf.cpu().numpy().tobytes()
    if is_cupy(buf):
        return buf.get().tobytes()
    if isinstance(buf, JaxDeviceBytes):
        return _jax_to_host(buf.array).tobytes()
    return buf.tobytes()


def _jax_to_host(a: Any) -> Any:
    """A NumPy copy of a JAX array's value, in memory of its own (``numpy.asarray`` of a GPU
    array would also keep a host copy cached on the array)."""
    import jax
    import numpy
    host = jax.device_put(a, jax.devices("cpu")[0], may_alias=False)
    return numpy.asarray(host).reshape(-1).view(numpy.uint8)


def save(tensors: Mapping[str, Any], metadata: Any = None, expected: str | None = None
         ) -> bytes:
    rows = describe(tensors, expected)
    meta = check_metadata(metadata)
    sync_producers(tensors)
    return save_rows(rows, meta)


def save_rows(rows: Sequence[Row], meta: dict[str, str] | None) -> bytes:
    """The bytes of a safetensors file of ``rows``: the core's header, then each tensor."""
    header, offsets, size = _native.safetensors_header(
        [(n, c, s, int(b.nbytes)) for n, c, s, b in rows], meta)
    out = bytearray(size)
    out[:len(header)] = header
    for row, off in zip(rows, offsets):
        data = _host_bytes(row)
        out[off:off + len(data)] = data
    return bytes(out)


# --- Hugging Face sharded checkpoints ---------------------------------------------------------

def _referenced(directory: str) -> set[str]:
    try:
        with open(os.path.join(directory, INDEX_NAME), encoding="utf-8") as f:
            return set(json.load(f).get("weight_map", {}).values())
    except (OSError, ValueError, AttributeError):
        return set()


def remove_stale_temporaries(directory: str) -> None:
    """Removes temporaries that killed saves left in ``directory``: written by a process of
    this host that is gone, held by no writer, and named by no index. Call it holding the
    directory's ``_native.DirLock``."""
    _native.remove_stale_temporaries(directory, sorted(_referenced(directory)))


def save_checkpoint(state_dict: Mapping[str, Any], directory: Any,
                    max_shard_size: int | str = "5GB", *, metadata: Any = None,
                    durable: bool = True, sizes: Mapping[str, int] | None = None
                    ) -> dict[str, Any]:
    """``sizes``: each tensor's size for sharding where ``state_dict`` holds staged copies
    (views of one buffer) of the tensors the caller gave. A local directory is saved by the
    core (``gpufile::formats::safetensors::save::checkpoint``), GIL released."""
    if _native.is_url(directory):
        return remote.save_checkpoint(state_dict, directory, max_shard_size,
                                            metadata=metadata, sizes=sizes)
    rows = describe(state_dict)
    if sizes is None:
        sizes = {k: storage_size(v) for k, v in state_dict.items()}
    meta = check_metadata(metadata) or {}
    limit = parse_size(max_shard_size)
    directory = os.fsdecode(directory)
    sync_producers(state_dict)
    try:
        weight_map = _native.save_checkpoint(directory, rows,
                            [sizes[r[0]] for r in rows], limit, meta, durable)
    except BaseException as e:
        _annotate(e, directory)
        raise
    return {"metadata": {"total_size": sum(sizes.values()), **meta},
            "weight_map": dict(weight_map)}
