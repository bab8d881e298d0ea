"""Model checkpoints in the safetensors format, read with gpufile: host memory or straight to GPUs.

The names of the ``safetensors`` package where it has one (``load_file``, ``safe_open`` with
``keys``, ``metadata``, ``get_tensor``, ``get_slice``), so that its users change an import::

    from gpufile.safetensors import load_file, load_checkpoint

    state = load_file("model.safetensors", device="cuda:0")            # dict of torch tensors
    state = load_checkpoint("Llama-3-8B/", device="cuda:0")            # a sharded checkpoint
    state = load_checkpoint("Llama-3-8B/", filter=lambda n: "layers.0." in n,
                            device_map={"model.layers.0": 0, "lm_head": 1})

A drop-in for the ``safetensors`` package: ``gpufile.safetensors.torch``, ``.numpy`` and ``.flax``
have ``safetensors.torch``'s, ``.numpy``'s and ``.flax``'s functions (``load_file(filename,
device)``, ``save_file``, ``load(bytes)``, ``save``, ``save_model``, ``load_model``) with their
signatures, errors and messages; this module has ``safe_open``, ``SafetensorError``,
``serialize``, ``serialize_file``, ``deserialize`` and ``TensorSpec``. The deliberate
differences: docs/compatibility.md, "Hugging Face safetensors".

How a load runs: every header is read and validated first (by gpufile's Rust core; a bad file
is refused, naming the file and the tensor, before a byte of data is read). The core then plans
the reads: only the selected tensors' bytes, adjacent tensors of a file merged into one range.
gpufile allocates **one buffer per device** for the tensors placed there and starts every range's
read, of every file, at once (``CuFile.pread``), then waits: one stream of requests, no per-file
gaps. To a GPU, the data moves through gpufile's bounded pinned bounce buffers (or cuFile), never
through a host copy of the model: peak host memory does not grow with the model.

Memory: by default the tensors of a device are **views into that device's one allocation**
(each aligned to 256 bytes where a read range starts, to its element size within one); the
allocation lives as long as any of its tensors. With ``own_memory=True`` every tensor has an
allocation of its own (``safetensors``' semantics: deleting a tensor frees its memory), still
read by one stream of requests. ``safe_open(...).get_tensor`` always returns a tensor that owns
its memory.

Frameworks: ``"pt"`` (PyTorch; alias ``"torch"``), ``"numpy"`` (``"np"``), ``"cupy"``,
``"flax"`` (JAX arrays; alias ``"jax"``: each tensor read straight into memory JAX allocates, see
docs/checkpoints.md). Devices: ``"cpu"``, ``"cuda"``, ``"cuda:N"``, ``N``, a ``torch.device`` or a
``jax.Device``. NumPy has no bfloat16 or FP8
types: as in ``safetensors.numpy``, BF16 (and here the FP8 types too) load as ``ml_dtypes``
arrays when ``ml_dtypes`` is installed, else a ``TypeError`` says so. The sub-byte MX types
(F4, F6) load with PyTorch only (F4 as ``float4_e2m1fn_x2``, the last dimension halved, as
``safetensors`` does).

By URL: every function takes an ``s3://``, ``gs://``, ``http(s)://`` or WebHDFS URL where it takes a
path (a file, an index, or a prefix holding ``model.safetensors.index.json`` or
``model.safetensors``): each header is read with one small ranged request, then the tensors'
ranges go to the destination (a GPU through the pinned bounce buffers) as ranged requests over
the workers, of at least 16 MiB each (``task_size`` where it is larger: a server's cost is per
request)::

    state = load_checkpoint("s3://models/llama/", device="cuda:0")

Saving: ``save_file(tensors, filename, metadata=None)`` and ``save(tensors, metadata=None)``
(safetensors' names; the file is byte-identical to ``safetensors.torch.save_file``'s for the
same tensors), ``save_checkpoint(state_dict, directory, max_shard_size="5GB")`` (the Hugging
Face sharded layout) and ``async_save(...)`` (returns once the tensors are snapshotted, in spare
GPU memory or pinned host memory, and writes in the background; ``reserve_async_staging``
allocates the pinned buffer ahead). Tensors are written from their own memory, GPU or host, by the engine; files
appear whole or not at all (docs/checkpoints.md).

Run ``python -m gpufile.safetensors PATH [--device N] [--json]`` to load a checkpoint and print
tensors, bytes, seconds, GB/s, tensors/s and the path report (``gpufile.observe()``).
"""

from __future__ import annotations

from typing import Any

from .. import _native
# The type aliases are public names of this module, as they were before it became a package.
from ._checkpoint import PathArg  # noqa: F401
from ._frameworks import DeviceLike  # noqa: F401
from ._load import DeviceMap, Filter, load_checkpoint, load_file  # noqa: F401
from ._open import safe_open
from .._saving.api import (
    SafeTensorsSaveFuture,
    async_save,
    reserve_async_staging,
    save,
    save_checkpoint,
    save_file,
)

from ._serialize import TensorSpec, deserialize, serialize, serialize_file

SafetensorError = _native.SafetensorError


def _safe_open_handle(f: Any, framework: str, device: DeviceLike = "cpu", *,
                      backend: str = "mmap") -> safe_open:
    """``safetensors._safe_open_handle``: :class:`safe_open` on an open file object (one with a
    ``fileno()``: a Python file, ``fsspec``'s local files). gpufile reads the file it refers to;
    a file object without a descriptor (``s3fs``) is a ``SafetensorError``: pass its URL to
    :class:`safe_open` instead."""
    try:
        fd = f.fileno()
    except (AttributeError, OSError, ValueError) as e:
        raise SafetensorError(f"{f!r} has no file descriptor: gpufile reads files by "
                              f"descriptor; open the file by its path or URL with safe_open"
                              ) from e
    return safe_open(f"/proc/self/fd/{int(fd)}", framework, device, backend=backend)

__all__ = [
    "SafeTensorsSaveFuture",
    "SafetensorError",
    "TensorSpec",
    "async_save",
    "deserialize",
    "load_checkpoint",
    "load_file",
    "reserve_async_staging",
    "safe_open",
    "save",
    "save_checkpoint",
    "save_file",
    "serialize",
    "serialize_file",
]
