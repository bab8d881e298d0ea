"""Pinned bounce buffers of the POSIX device path, and cuFile buffer registration (KvikIO's
``kvikio.buffer``)."""

from __future__ import annotations

from . import _native
from .cufile import memory_deregister, memory_register

__all__ = ["bounce_buffer_free", "bounce_buffer_pooled", "memory_deregister", "memory_register"]


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
