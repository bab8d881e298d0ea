"""``CudaCodec``: the base class of CUDA compression codecs for Numcodecs, as
``kvikio.numcodecs`` (gpufile ships no codec of its own; nvCOMP-based ones subclass this).

Needs the optional ``numcodecs`` package. Unlike KvikIO's, importing this module does not
import CuPy.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

try:
    from numcodecs.abc import Codec
except ImportError as e:
    raise ImportError(
        f"gpufile.numcodecs requires the optional 'numcodecs' dependency: {e}") from e

__all__ = ["BufferLike", "CudaCodec"]

BufferLike = Any
"""A NumPy or CuPy array, or any object with the buffer protocol or the CUDA array interface."""


class CudaCodec(Codec):
    """Abstract base class of codecs that compress and decompress on the GPU."""

    @abstractmethod
    def encode(self, buf: BufferLike) -> Any:
        """Compresses ``buf`` (host or device memory).

        Parameters
        ----------
        buf : BufferLike
            The data.

        Returns
        -------
        cupy.ndarray
            The compressed bytes.
        """

    @abstractmethod
    def decode(self, buf: BufferLike, out: BufferLike | None = None) -> BufferLike:
        """Decompresses ``buf`` (host or device memory).

        Parameters
        ----------
        buf : BufferLike
            The compressed bytes.
        out : BufferLike, optional
            Where to write; exactly the size of the decoded data.

        Returns
        -------
        BufferLike
            The decoded data: in ``out``'s memory if given, else in ``buf``'s kind of memory.
        """
