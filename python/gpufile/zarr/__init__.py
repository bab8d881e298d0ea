"""Zarr v3 storage through gpufile, as ``kvikio.zarr``: :class:`GDSStore`.

Needs the optional ``zarr>=3`` package; without it, ``import gpufile.zarr`` raises ImportError.
"""

try:
    from ._store import GDSStore
except ImportError as e:
    raise ImportError(
        "gpufile.zarr requires the optional 'zarr>=3' dependency (pip install 'zarr>=3'): "
        f"{e}"
    ) from e

__all__ = ["GDSStore"]
