"""``safetensors.flax``, by gpufile: the same names and signatures for JAX arrays
(``from gpufile.safetensors.flax import load_file, save_file``). Loads read each array straight
into memory JAX allocates (``framework="flax"``: docs/checkpoints.md); saves write a GPU array
from its device buffer, the bytes ``safetensors`` writes. Deliberate differences:
docs/compatibility.md, "safetensors"."""

from __future__ import annotations

import os
from typing import Any, Dict, Optional, Union

from .._saving import local
from ._frameworks import import_jax
from ._open import safe_open
from ._serialize import load_bytes

__all__ = ["load", "load_file", "save", "save_file"]


def save(tensors: Dict[str, Any], metadata: Optional[Dict[str, str]] = None) -> bytes:
    """The bytes of a safetensors file of ``tensors`` (JAX or NumPy arrays)."""
    return local.save(tensors, metadata)


def save_file(tensors: Dict[str, Any], filename: Union[str, os.PathLike],
              metadata: Optional[Dict[str, str]] = None) -> None:
    """Saves ``tensors`` (JAX or NumPy arrays) to ``filename``, published whole."""
    local.save_file(tensors, filename, metadata)


def load(data: bytes) -> Dict[str, Any]:
    """The arrays of a safetensors file held in ``data``, as ``jax.Array``s on JAX's default
    device.

    Raises
    ------
    SafetensorError
        ``data`` is not a valid file ("Error while deserializing: ...").
    """
    jnp = import_jax().numpy
    return {k: jnp.array(v) for k, v in load_bytes(data, "numpy").items()}


def load_file(filename: Union[str, os.PathLike], *, backend: str = "mmap") -> Dict[str, Any]:
    """The arrays of ``filename`` as ``jax.Array``s on JAX's default device (a GPU's read
    straight into its memory), in offset order."""
    device = import_jax().devices()[0]
    with safe_open(filename, framework="flax", device=device, backend=backend) as f:
        return f.get_tensors()
