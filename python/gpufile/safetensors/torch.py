"""``safetensors.torch``, by gpufile: the same names, signatures, behaviour and errors, so that
code switches by its import (``from gpufile.safetensors.torch import load_file, save_file``).

Loads go through gpufile's engine (a named CUDA device: straight into GPU memory, no host copy
of the model); every tensor owns its memory, as ``safetensors``' do. Saves write the bytes
``safetensors`` writes, from the tensors' own memory (GPU tensors too), published whole (crash
safe: docs/checkpoints.md). Deliberate differences: docs/compatibility.md, "safetensors".
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Set, Tuple, Union

import torch

from .._saving import local, rows
from ._open import safe_open
from ._serialize import load_bytes

__all__ = ["load", "load_file", "load_model", "save", "save_file", "save_model",
           "storage_ptr", "storage_size"]


def storage_ptr(tensor: torch.Tensor) -> int:
    """The address of the storage ``tensor`` views (0 for a meta tensor)."""
    try:
        return tensor.untyped_storage().data_ptr()
    except (NotImplementedError, RuntimeError):
        return 0


def storage_size(tensor: torch.Tensor) -> int:
    """The bytes of the storage ``tensor`` views."""
    try:
        return tensor.untyped_storage().nbytes()
    except (NotImplementedError, RuntimeError):
        return tensor.nelement() * tensor.element_size()


def _end_ptr(tensor: torch.Tensor) -> int:
    """One past the last byte of ``tensor``'s last element."""
    return rows.end_ptr(tensor)


def _find_shared_tensors(state_dict: Dict[str, torch.Tensor]) -> List[Set[str]]:
    """Names grouped by the memory they share (a group per tensor that shares none)."""
    return rows.shared_groups(state_dict)


def _is_complete(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` covers its whole storage, from its start."""
    return (tensor.data_ptr() == storage_ptr(tensor)
            and tensor.nelement() * tensor.element_size() == storage_size(tensor))


def _remove_duplicate_names(state_dict: Dict[str, torch.Tensor], *,
                            preferred_names: Optional[List[str]] = None,
                            discard_names: Optional[List[str]] = None) -> Dict[str, List[str]]:
    """For each group of tensors sharing memory, the name to keep → the names to drop. The
    kept name covers the whole storage: the first by name, else of ``preferred_names``, not of
    ``discard_names``.

    Raises
    ------
    RuntimeError
        A group none of whose tensors covers the whole storage (saving one would store more
        memory than it holds).
    """
    preferred = set(preferred_names or [])
    discard = set(discard_names or [])
    to_remove: Dict[str, List[str]] = {}
    for shared in _find_shared_tensors(state_dict):
        complete = sorted(n for n in shared if _is_complete(state_dict[n]))
        if not complete:
            raise RuntimeError(
                "Error while trying to find names to remove to save state dict, but found no "
                f"suitable name to keep for saving amongst: {shared}. None is covering the entire "
                "storage.Refusing to save/load the model since you could be storing much more "
                "memory than needed. Please refer to "
                "https://huggingface.co/docs/safetensors/torch_shared_tensors for more "
                "information. Or open an issue.")
        keep = ([n for n in complete if n in preferred]
                or [n for n in complete if n not in discard] or complete)[0]
        dropped = [n for n in sorted(shared) if n != keep]
        if dropped:
            to_remove.setdefault(keep, []).extend(dropped)
    return to_remove


def save_model(model: torch.nn.Module, filename: str,
               metadata: Optional[Dict[str, str]] = None, force_contiguous: bool = True) -> None:
    """Saves ``model``'s state dict, each group of shared tensors once (the dropped names
    recorded in ``metadata``: dropped → kept, where the caller did not set them)."""
    state_dict = model.state_dict()
    for kept, dropped in _remove_duplicate_names(state_dict).items():
        for name in dropped:
            metadata = {} if metadata is None else metadata
            metadata.setdefault(name, kept)
            del state_dict[name]
    if force_contiguous:
        state_dict = {k: v.contiguous() for k, v in state_dict.items()}
    try:
        save_file(state_dict, filename, metadata=metadata)
    except ValueError as e:
        raise ValueError(f"{e} Or use save_model(..., force_contiguous=True), read the docs for "
                         "potential caveats.") from None


def load_model(model: torch.nn.Module, filename: Union[str, os.PathLike],
               strict: bool = True, device: Union[str, int] = "cpu", *,
               backend: str = "mmap") -> Tuple[List[str], List[str]]:
    """Loads a file saved by :func:`save_model` (or any state dict) into ``model``, shared
    tensors restored. Returns (missing, unexpected) names.

    Raises
    ------
    RuntimeError
        With ``strict``: names the model has and the file lacks, or the reverse.
    """
    state_dict = load_file(filename, device=device, backend=backend)
    to_remove = _remove_duplicate_names(model.state_dict(), preferred_names=list(state_dict))
    missing_list, unexpected = model.load_state_dict(state_dict, strict=False)
    missing = set(missing_list)
    for names in to_remove.values():
        for name in names:
            if name in missing:
                missing.remove(name)
            else:
                unexpected.append(name)
    if strict and (missing or unexpected):
        error = f"Error(s) in loading state_dict for {model.__class__.__name__}:"
        if missing:
            names = ", ".join(f'"{k}"' for k in sorted(missing))
            error += f"\n    Missing key(s) in state_dict: {names}"
        if unexpected:
            names = ", ".join(f'"{k}"' for k in sorted(unexpected))
            error += f"\n    Unexpected key(s) in state_dict: {names}"
        raise RuntimeError(error)
    return missing, unexpected  # type: ignore[return-value] - a set, as safetensors returns


def save(tensors: Dict[str, torch.Tensor], metadata: Optional[Dict[str, str]] = None) -> bytes:
    """The bytes of a safetensors file of ``tensors`` (contiguous, dense, no shared memory)."""
    return local.save(tensors, metadata, expected="torch")


def save_file(tensors: Dict[str, torch.Tensor], filename: Union[str, os.PathLike],
              metadata: Optional[Dict[str, str]] = None) -> None:
    """Saves ``tensors`` (contiguous, dense, no shared memory) to ``filename``.

    Raises
    ------
    ValueError
        Not a dict; a value that is not a ``torch.Tensor``; sparse or non-contiguous tensors.
    RuntimeError
        Tensors that share memory (use :func:`save_model`); a meta tensor.
    """
    local.save_file(tensors, filename, metadata, expected="torch")


def load_file(filename: Union[str, os.PathLike], device: Union[str, int] = "cpu", *,
              backend: str = "mmap") -> Dict[str, torch.Tensor]:
    """The tensors of ``filename`` on ``device`` (``"cpu"``, ``"cuda:N"``, ``N``), in offset
    order, each owning its memory; read straight into a GPU's memory where one is named."""
    with safe_open(filename, framework="pt", device=device, backend=backend) as f:
        return f.get_tensors()


def load(data: bytes) -> Dict[str, torch.Tensor]:
    """The tensors of a safetensors file held in ``data``, on the CPU, each owning its memory.

    Raises
    ------
    SafetensorError
        ``data`` is not a valid file ("Error while deserializing: ...").
    """
    return load_bytes(data, "pt")
