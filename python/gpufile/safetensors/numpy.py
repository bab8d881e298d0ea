"""``safetensors.numpy``, by gpufile: the same names, signatures, behaviour and errors
(``from gpufile.safetensors.numpy import load_file, save_file``). Loads read through gpufile's
engine, each array in memory of its own; BF16 and FP8 load as ``ml_dtypes`` arrays where it is
installed (``safetensors.numpy`` refuses them). Saves write the bytes ``safetensors`` writes,
published whole. Deliberate differences: docs/compatibility.md, "safetensors"."""

from __future__ import annotations

import os
from typing import Dict, Optional, Union

import numpy as np

from .._saving import local
from ._open import safe_open
from ._serialize import load_bytes

__all__ = ["load", "load_file", "save", "save_file"]


def save(tensor_dict: Dict[str, np.ndarray], metadata: Optional[Dict[str, str]] = None) -> bytes:
    """The bytes of a safetensors file of ``tensor_dict`` (big-endian arrays written
    little-endian, as the format is)."""
    return local.save(tensor_dict, metadata, expected="numpy")


def save_file(tensor_dict: Dict[str, np.ndarray], filename: Union[str, os.PathLike],
              metadata: Optional[Dict[str, str]] = None) -> None:
    """Saves ``tensor_dict`` to ``filename``.

    Raises
    ------
    ValueError
        Not a dict; a value that is not a NumPy array.
    TypeError
        A dtype safetensors has no type for.
    """
    local.save_file(tensor_dict, filename, metadata, expected="numpy")


def load(data: bytes) -> Dict[str, np.ndarray]:
    """The arrays of a safetensors file held in ``data``, each in memory of its own (writable).

    Raises
    ------
    SafetensorError
        ``data`` is not a valid file ("Error while deserializing: ...").
    """
    return load_bytes(data, "numpy")


def load_file(filename: Union[str, os.PathLike], *, backend: str = "mmap"
              ) -> Dict[str, np.ndarray]:
    """The arrays of ``filename``, in offset order."""
    with safe_open(filename, framework="np", backend=backend) as f:
        return f.get_tensors()
