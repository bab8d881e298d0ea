"""Saving entry points with safetensors' names (``save_file``, ``save``) and gpufile's
``save_checkpoint``, ``async_save`` and ``reserve_async_staging``, as ``gpufile.safetensors``
exports them; the work is ``local``'s and ``background``'s."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from .. import defaults
from . import background, local

if TYPE_CHECKING:  # a name for annotations only: importing gpufile.safetensors imports this
    from ..safetensors._checkpoint import PathArg

#: What :func:`async_save` returns.
SafeTensorsSaveFuture = background.SaveFuture


def save_file(tensors: Mapping[str, Any], filename: PathArg,
              metadata: Mapping[str, str] | None = None, *, durable: bool = True) -> None:
    """Saves ``tensors`` to ``filename`` in the safetensors format (``safetensors.torch.save_file``'s
    name and arguments; ``safetensors.numpy.save_file``'s and ``safetensors.flax.save_file``'s
    for NumPy and JAX arrays).

    The file is byte-identical to what ``safetensors`` writes for the same tensors and metadata
    (the same order, offsets and padding; metadata keys sorted, where ``safetensors`` writes
    them in a different order in each process). The header is built by gpufile's core; each
    tensor's bytes are written by the engine straight from its memory, GPU or host (no
    ``.cpu()`` copy), all tensors as one stream of requests.

    Crash-safe: written under a hidden temporary name in the same directory, then (with
    ``durable``) ``fsync``-ed, renamed over ``filename`` and the directory ``fsync``-ed. Until
    the rename, whatever ``filename`` held is untouched; a process killed at any moment leaves
    either the old file or the complete new one. ``durable=False`` skips both syncs: faster
    (the bytes stay in the page cache), still whole after a crash of the process, but a crash
    of the machine may lose the new file's data.

    Parameters
    ----------
    tensors
        Name → tensor: PyTorch tensors (CPU or CUDA), NumPy, CuPy or JAX arrays (a GPU one
        written from its device buffer).
    filename
        The file to write.
    metadata
        Text-only ``__metadata__`` (str → str).
    durable
        Sync file and directory before returning (default).

    Raises
    ------
    RuntimeError
        Tensors that share memory (safetensors' message: save one of them, or use
        ``safetensors.torch.save_model``); a meta tensor ("Cannot copy out of meta tensor",
        PyTorch's words, as safetensors raises it).
    ValueError
        A non-contiguous PyTorch tensor (safetensors' message; NumPy and CuPy arrays are written
        in C order, as ``ascontiguousarray`` gives them), sparse tensors (all named), not a dict.
    TypeError
        A dtype safetensors has no type for; metadata that is not str → str.
    OSError
        The file could not be written (``ENOSPC``, ``EIO``, ...): the error names ``filename``;
        nothing was published and the temporary file is removed.
    """
    local.save_file(tensors, filename, metadata, durable=durable)


def save(tensors: Mapping[str, Any], metadata: Mapping[str, str] | None = None) -> bytes:
    """The bytes of a safetensors file of ``tensors`` (``safetensors.torch.save``): the same
    bytes :func:`save_file` writes. Checks and errors as :func:`save_file`."""
    return local.save(tensors, metadata)


def save_checkpoint(state_dict: Mapping[str, Any], directory: PathArg,
                    max_shard_size: int | str = "5GB", *,
                    metadata: Mapping[str, str] | None = None,
                    durable: bool = True) -> dict[str, Any]:
    """Saves a state dict as a Hugging Face checkpoint in ``directory`` (created if needed):
    ``model.safetensors`` when it fits in one shard, else ``model-0000k-of-0000n.safetensors``
    and ``model.safetensors.index.json`` (``{"metadata": {"total_size": ...}, "weight_map":
    {...}}``), split as ``huggingface_hub.split_torch_state_dict_into_shards`` splits it and
    named as ``transformers``' ``save_pretrained`` names the files (each shard's metadata
    ``{"format": "pt"}``), so ``from_pretrained`` and :func:`load_checkpoint` load it.

    Crash-safe (see :func:`save_file`): every shard is written and synced under a temporary
    name first, the previous checkpoint in ``directory`` untouched meanwhile; then an index
    naming the new files replaces the old one in one rename (the commit), the shards take
    their final names and files of the previous checkpoint that the new one does not have
    (its ``model.safetensors`` or index, shards of another count) are removed. A process
    killed at any moment leaves a directory whose index (or single file) names complete files
    of one checkpoint, the old or the new. Other files in ``directory`` are left alone.

    Parameters
    ----------
    state_dict
        Name → tensor, as :func:`save_file` takes them; shards follow its order.
    directory
        Where the checkpoint goes.
    max_shard_size
        Bytes per shard, an int or a size as every size is typed: ``"5GB"``, ``"500MB"``
        (decimal units, as huggingface_hub), ``"5GiB"``, ``"5 GiB"`` (binary).
        A tensor larger than the limit gets a shard of its own.
    metadata
        Text metadata: the file's ``__metadata__`` for a single file (with ``format``), else
        merged into the index's ``metadata``.
    durable
        ``fsync`` files and the directory (default).

    Returns
    -------
    dict
        The index (``metadata``, ``weight_map``), also for a single file (no index file is
        written then).
    """
    return local.save_checkpoint(state_dict, directory, max_shard_size, metadata=metadata,
                                 durable=durable)


def async_save(tensors: Mapping[str, Any], path: PathArg,
               metadata: Mapping[str, str] | None = None, *, sharded: bool = False,
               max_shard_size: int | str = "5GB", durable: bool = True) -> SafeTensorsSaveFuture:
    """Starts a save and returns once the tensors are safe from later changes; the file
    (``sharded=False``: :func:`save_file`) or checkpoint (``sharded=True``:
    :func:`save_checkpoint` into the directory ``path``) is then written in the background; the
    future's ``result()`` (or ``await``) waits and raises its error, and its ``staging()`` says
    where the tensors were snapshotted and why.

    PyTorch GPU tensors are snapshotted in spare memory of their own GPU (device-to-device
    copies: milliseconds) where the snapshot fits ``async_save_device_limit`` (a setting; 8 GiB
    by default) and takes at most half the memory the driver reports free on each GPU; the
    snapshot is let go once written. Otherwise they, and CPU tensors, are copied into one pinned
    host buffer that later async saves reuse (pinning is slow; :func:`reserve_async_staging`
    allocates it ahead), at most ``async_save_pinned_limit`` bytes (32 GiB by default): a save
    that needs more is a ``ValueError`` before anything is copied. A save started while the
    previous one still writes from that buffer waits for it first. NumPy, CuPy and JAX arrays
    are copied to host arrays (a JAX array may be deleted or donated once this returns).
    """
    return background.async_save(tensors, path, metadata, sharded, max_shard_size, durable,
                                  int(defaults.get("async_save_pinned_limit")),
                                  int(defaults.get("async_save_device_limit")))


def reserve_async_staging(nbytes: int) -> int:
    """Allocates the pinned host buffer :func:`async_save` stages in (where GPU memory cannot
    take a snapshot) now, at least ``nbytes`` bytes, so that no save pays for the allocation
    (about 1.4 s per 4 GiB) while its caller waits (gpufile's addition). Returns the buffer's
    size; at most ``async_save_pinned_limit`` bytes (more is a ``ValueError``)."""
    return background.reserve(nbytes, int(defaults.get("async_save_pinned_limit")))
