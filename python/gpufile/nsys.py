"""``nsys_plugin_search_dir``, as ``kvikio.nsys``: where Nsight Systems plugins would be found."""

from __future__ import annotations

import os

__all__ = ["nsys_plugin_search_dir"]


def nsys_plugin_search_dir() -> str:
    """The folder that would hold gpufile's bundled Nsight Systems plugins.

    KvikIO ships one plugin there (``kvikio_nic``, network counters of its remote backends).
    gpufile ships none, so the folder it names (``share/nsys-plugins`` inside the installed
    package) does not exist; the path is still returned, as KvikIO returns its own where the
    plugin was not built, so that code passing it to ``nsys`` keeps running. What a run did is
    told by ``gpufile.observe()`` and ``gpufile.stats()`` instead.

    Returns
    -------
    str
        An absolute path inside the installed ``gpufile`` package.
    """
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "share", "nsys-plugins")
