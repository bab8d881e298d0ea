"""Pinned bounce buffers of the POSIX device path, and cuFile buffer registration (KvikIO's
``kvikio.buffer``)."""

from __future__ import annotations

from . import _native
from .cufile import memory_deregister, memory_register

__all__ = [
    "bounce_buffer_free",
    "bounce_buffer_pooled",
    "dma_cache_clear",
    "dma_cache_registered",
    "memory_deregister",
    "memory_register",
]


def bounce_buffer_free() -> int:
    """Free the pooled pinned bounce buffers of the POSIX device path.

    Buffers lent to requests still running go back to the pool when those finish.

    Returns
    -------
    int
        The bytes freed.
    """
    return _native.bounce_buffer_free()


def bounce_buffer_pooled() -> int:
    """Bytes of pinned bounce buffers held by the pool now (a gpufile addition).

    Returns
    -------
    int
    """
    return _native.bounce_buffer_pooled()


def dma_cache_registered() -> int:
    """Bytes of page cache registered with CUDA now, for DMA to the GPU (a gpufile addition).

    With the ``dma_cache_size`` setting above 0 (it is 0, off, by default), hot file data read
    again into GPU memory on gpufile's POSIX path is copied by the GPU straight from the page
    cache once its pages are registered; registrations are kept (at most ``dma_cache_size``
    bytes) so that a file read again while it stays in the page cache skips the CPU copy.
    Registered pages cannot be reclaimed, nor invalidated by another process's ``O_DIRECT``
    write (see the documentation's "Page-cache DMA").

    Returns
    -------
    int
    """
    return _native.dma_cache_registered()


def dma_cache_clear() -> None:
    """Unregister all page cache kept for DMA (a gpufile addition).

    Copies still running keep what they read until they finish. Setting ``dma_cache_size`` to
    0 does the same and keeps it off.
    """
    _native.dma_cache_clear()
