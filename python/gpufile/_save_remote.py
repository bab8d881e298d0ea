"""Saving safetensors files and checkpoints to object stores by URL (``s3://``, ``http(s)://``,
WebHDFS): the bodies of :func:`gpufile.safetensors.save_file` and ``save_checkpoint`` for a URL.

A file is one remote object written with ``RemoteFile.open(url, mode="w")``: the header and every
tensor's bytes as one batch of writes from the tensors' own memory (GPU memory through the pinned
bounce buffers), an S3 multipart upload for a large file, made at close and aborted on any
failure, so that the object appears whole or not at all. A checkpoint's shards are uploaded in
parallel and its index is written last, once every shard is whole: the index is the commit.
"""

from __future__ import annotations

import json
import re
import threading
from typing import Any, Mapping

from . import _native
from ._notices import logged
from ._save_rows import (
    INDEX_NAME,
    SINGLE_NAME,
    check_metadata,
    describe,
    parse_size,
    split,
    storage_size,
    sync_producers,
)
from .remote_file import RemoteFile

_URL = re.compile(r"^(s3|gs|https?)://", re.IGNORECASE)

# Shards uploaded at once (each upload already spreads its parts over every worker).
_PARALLEL_SHARDS = 4


def is_url(path: Any) -> bool:
    """Whether ``path`` is an object's URL (``s3://``, ``gs://``, ``http(s)://``, WebHDFS)."""
    return isinstance(path, str) and _URL.match(path) is not None


def _child(prefix: str, name: str) -> str:
    if "?" in prefix:
        raise ValueError(
            f"{_native.redact_url(prefix)}: a checkpoint is saved under a prefix of several "
            "objects, which a signed URL (it names one object) cannot give; save each file to "
            "its own signed URL with save_file"
        )
    return f"{prefix.rstrip('/')}/{name}"


def write_url(rows: Any, url: str, meta: dict[str, str] | None) -> None:
    """Writes ``rows`` as one safetensors object at ``url``; no object on any failure."""
    with RemoteFile.open(url, mode="w") as f:
        logged(_native.write_safetensors_remote, f._handle, list(rows), meta)


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
    under ``prefix``, uploaded in parallel; the index after every shard is whole."""
    rows = describe(state_dict)
    if sizes is None:
        sizes = {k: storage_size(v) for k, v in state_dict.items()}
    meta = check_metadata(metadata) or {}
    shards = split(sizes, parse_size(max_shard_size))
    sync_producers(state_dict)
    by_name = {r[0]: r for r in rows}
    n = len(shards)
    names = ([SINGLE_NAME] if n == 1 else
             [f"model-{k + 1:05d}-of-{n:05d}.safetensors" for k in range(n)])
    file_meta = {"format": "pt", **meta} if n == 1 else {"format": "pt"}
    weight_map = {key: names[k] for k, keys in enumerate(shards) for key in keys}
    index = {"metadata": {"total_size": sum(sizes.values()), **meta}, "weight_map": weight_map}
    urls = [_child(prefix, name) for name in names]
    jobs = list(zip(urls, shards))
    errors: list[BaseException] = []
    lock = threading.Lock()

    def worker() -> None:
        while True:
            with lock:
                if not jobs or errors:
                    return
                url, keys = jobs.pop(0)
            try:
                write_url([by_name[k] for k in keys], url, file_meta)
            except BaseException as e:  # noqa: BLE001 - raised below, on the caller's thread
                with lock:
                    errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(min(n, _PARALLEL_SHARDS))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        e = errors[0]
        e.add_note(f"gpufile: the index of {_native.redact_url(prefix)} was not written; shards "
                   "that were made before the failure stay")
        raise e
    if n > 1:
        body = (json.dumps(index, indent=2, sort_keys=True) + "\n").encode()
        with RemoteFile.open(_child(prefix, INDEX_NAME), mode="w") as f:
            f.write(body)
    return index
