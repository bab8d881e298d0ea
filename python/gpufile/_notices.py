"""Path decisions worth knowing (a fallback, say), logged once each through the ``gpufile``
logger (at INFO): the core says each once per process, and every call into a source (``CuFile``,
``Mmap``, ``RemoteFile``, batches) hands on what it said."""

from __future__ import annotations

import logging
from typing import Any, Callable, TypeVar

from . import _native

_log = logging.getLogger("gpufile")

T = TypeVar("T")


def log_notices() -> None:
    """Logs the notices the core has said since the last time (from any call or thread)."""
    for text in _native.take_notices():
        _log.info(text)


def logged(call: Callable[..., T], *args: Any) -> T:
    """``call(*args)``; then the notices, whether it returned or raised (a refusal is often
    what a notice explains)."""
    try:
        return call(*args)
    finally:
        log_notices()
