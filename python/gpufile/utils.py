"""Helpers KvikIO exports from ``kvikio.utils``: deprecation notices, ``call_once`` and
``LocalHttpServer`` (a local HTTP server for tests and examples of remote reads).

Differences from KvikIO 26.10: the deprecated function keeps its name, module and signature
(``functools.wraps``), and ``call_once`` is safe to call from several threads at once (the
function runs exactly once; the others wait for its result). ``LocalHttpServer`` is imported on
first use, so that ``import gpufile`` does not load an HTTP server.
"""

from __future__ import annotations

import functools
import importlib.util
import threading
import warnings
from typing import Any, Callable, TypeVar

__all__ = ["LocalHttpServer", "call_once", "kvikio_deprecate_module", "kvikio_deprecation_notice"]

_F = TypeVar("_F", bound=Callable[..., Any])

if importlib.util.find_spec(f"{__package__}._http_server") is None:  # not in this build yet
    __all__.remove("LocalHttpServer")


def __getattr__(name: str) -> Any:
    # LocalHttpServer is imported on first use: it pulls in http.server and multiprocessing,
    # which `import gpufile` (which imports this module) should not pay for.
    if name == "LocalHttpServer":
        try:
            from ._http_server import LocalHttpServer
        except ImportError as e:
            raise AttributeError(
                f"gpufile.utils.LocalHttpServer is not available in this build: {e}") from e
        return LocalHttpServer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def call_once(func: _F) -> _F:
    """Decorates ``func`` so that it runs once; later calls return the first call's result.

    Arguments of later calls are ignored, as in KvikIO. Thread-safe: concurrent first calls run
    ``func`` once and all get its result. If the first call raises, the next call tries again.

    Parameters
    ----------
    func : Callable
        The function to run once.

    Returns
    -------
    Callable
        The decorated function.
    """
    lock = threading.Lock()
    done = False
    result: Any = None

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        nonlocal done, result
        if done:
            return result
        with lock:
            if not done:
                result = func(*args, **kwargs)
                done = True
        return result

    return wrapper  # type: ignore[return-value]


def kvikio_deprecation_notice(msg: str = "This function is deprecated.", *,
                              since: str) -> Callable[[_F], _F]:
    """Decorates a function so that each call warns (``FutureWarning``) with ``msg``, and puts
    ``.. deprecated:: since msg`` at the top of its docstring (for Sphinx).

    Parameters
    ----------
    msg : str
        The notice, e.g. "Use bar() instead."
    since : str
        The version in which the function became deprecated.

    Returns
    -------
    Callable
        A decorator.
    """

    def decorator(func: _F) -> _F:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            warnings.warn(msg, category=FutureWarning, stacklevel=2)
            return func(*args, **kwargs)

        wrapper.__doc__ = f".. deprecated:: {since} {msg}\n\n{func.__doc__ or ''}"
        return wrapper  # type: ignore[return-value]

    return decorator


def kvikio_deprecate_module(msg: str = "", *, since: str) -> None:
    """Warns (``FutureWarning``) that the calling module is deprecated; call it at the module's
    top level.

    Parameters
    ----------
    msg : str
        The notice, e.g. "Use gpufile.foo instead."
    since : str
        The version in which the module became deprecated.
    """
    warnings.warn(f"This module is deprecated since {since}. {msg}", category=FutureWarning,
                  stacklevel=2)
