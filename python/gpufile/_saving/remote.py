"""Saving safetensors files and checkpoints to object stores by URL (``s3://``, ``http(s)://``,
WebHDFS): the bodies of :func:`gpufile.safetensors.save_file` and ``save_checkpoint`` for a URL.

A file is one remote object written with ``RemoteFile.open(url, mode="w")``: the header and every
tensor's bytes as one batch of writes from the tensors' own memory (GPU memory through the pinned
bounce buffers), an S3 multipart upload for a large file, made at close and aborted on any
failure, so that the object appears whole or not at all. A checkpoint is the core's
(``gpufile_remote::save_checkpoint``): every shard's bytes as one batch, every shard made, then
the index, which is the commit.
"""

from __future__ import annotations

from typing import Any, Mapping

from .. import _native
from ..remote_file import RemoteFile
from .rows import check_metadata, describe, parse_size, storage_size, sync_producers


def write_url(rows: Any, url: str, meta: dict[str, str] | None) -> None:
    """Writes ``rows`` as one safetensors object at ``url``; no object on any failure."""
    with RemoteFile.open(url, mode="w") as f:
        _native.write_safetensors_remote(f._handle, list(rows), meta)


def save_file(tensors: Mapping[str, Any], url: str, metadata: Any = None) -> None:
    rows = describe(tensors)
    meta = check_metadata(metadata)
    sync_producers(tensors)
    try:
        write_url(rows, url, meta)
    except BaseException as e:
        e.add_note(f"gpufile: nothing was made at {_native.redact_url(url)}")
        raise


def save_checkpoint(state_dict: Mapping[str, Any], prefix: str, max_shard_size: int | str = "5GB",
                    *, metadata: Any = None, sizes: Mapping[str, int] | None = None
                    ) -> dict[str, Any]:
    """The shards (``model.safetensors``, or ``model-0000k-of-0000n.safetensors`` and the index)
    under ``prefix``: one native call (GIL released; Ctrl-C stops it, every upload not yet
    made aborted). A signed URL is refused as a prefix (``ValueError``)."""
    rows = describe(state_dict)
    if sizes is None:
        sizes = {k: storage_size(v) for k, v in state_dict.items()}
    meta = check_metadata(metadata) or {}
    limit = parse_size(max_shard_size)
    sync_producers(state_dict)
    try:
        weight_map = _native.save_checkpoint_url(prefix, rows,
                            [sizes[r[0]] for r in rows], limit, meta)
    except (ValueError, TypeError):
        raise  # refused before anything was sent
    except BaseException as e:
        e.add_note(f"gpufile: the index of {_native.redact_url(prefix)} was not written; shards "
                   "that were made before the failure stay")
        raise
    return {"metadata": {"total_size": sum(sizes.values()), **meta},
            "weight_map": dict(weight_map)}
