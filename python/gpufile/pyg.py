"""A PyTorch Geometric feature store on files: ``gpufile.pyg.FeatureStore``.

Each (group, attribute) is a table of fixed-size rows in a file of its own, with a small JSON
descriptor beside it (dtype, shape, the rows file's name). A sampled subgraph's features are
many random rows of such a table, what ``CuFile.read_rows`` gathers as one request::

    import torch
    from gpufile.pyg import FeatureStore, neighbor_loader

    store = FeatureStore("features", device="cuda")     # rows land in GPU memory
    store.put_tensor(x, group_name=None, attr_name="x", index=None)
    store.put_tensor(y, group_name=None, attr_name="y", index=None)
    loader = neighbor_loader((store, graph_store), num_neighbors=[10, 10], batch_size=1024,
                             input_nodes=torch.arange(len(x)))

What it does:

* ``put_tensor`` writes the tensor from its own memory (CPU or CUDA) through gpufile under a
  temporary name, publishes it under a name of its own per put, then publishes the descriptor
  that names it: the descriptor is the commit, so a reader sees the old table or the new one,
  never a mix, and a crash leaves the old one.
* ``get_tensor(index=...)`` and ``multi_get_tensor`` gather the rows with ``read_rows`` straight
  into a tensor on the store's ``device`` (no Python loop over rows, no host copy for CUDA);
  ``multi_get_tensor`` submits every attribute's gather before it waits for any.
* ``neighbor_loader`` is PyG's ``NeighborLoader`` sampled by ``TorchNeighborSampler``, which
  samples in plain torch where pyg-lib and torch-sparse (neither on PyPI as a wheel) are absent.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import secrets
import threading
import warnings
from typing import Any

import numpy as np
import torch
import torch_geometric.typing
from torch_geometric.data import FeatureStore as _PygFeatureStore
from torch_geometric.data import TensorAttr
from torch_geometric.loader import NeighborLoader
from torch_geometric.sampler import NeighborSampler, SamplerOutput
from torch_geometric.sampler.base import SubgraphType

from . import _native
from .cufile import CuFile

__all__ = ["FeatureStore", "TorchNeighborSampler", "neighbor_loader"]

#: A descriptor's name ends with this; other files in the root are not the store's business.
DESCRIPTOR_SUFFIX = ".tensor.json"
ROWS_SUFFIX = ".rows"
FORMAT = "gpufile.pyg/1"
_INT64_MAX = 2**63 - 1

# The dtypes a table may hold: every torch dtype with a fixed byte size that a byte view can
# carry (quantized and bit-packed dtypes have no such view); those this torch has.
_DTYPES = {
    name: getattr(torch, name) for name in (
        "float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8",
        "uint8", "bool", "complex64", "complex128", "uint16", "uint32", "uint64",
        "float8_e4m3fn", "float8_e5m2")
    if isinstance(getattr(torch, name, None), torch.dtype)
}
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
_UINT64 = getattr(torch, "uint64", None)


def _group_json(group: Any) -> Any:
    if group is None or isinstance(group, str):
        return group
    if isinstance(group, tuple) and all(isinstance(p, str) for p in group):
        return list(group)
    raise TypeError(f"group_name must be None, a str or a tuple of str (an edge type), "
                    f"not {type(group).__name__}")


def _group_of(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def _stem(group: Any, attr: str) -> str:
    """The file name stem of (group, attr): readable, and unique through a hash of both (two
    groups that differ only in characters a file name cannot hold get different stems)."""
    key = json.dumps([_group_json(group), attr], ensure_ascii=False)
    if group is None:
        readable = attr
    else:
        parts = [group] if isinstance(group, str) else list(group)
        readable = "__".join(parts) + "." + attr
    readable = _UNSAFE.sub("_", readable).strip(".")[:80] or "_"
    return f"{readable}-{hashlib.sha256(key.encode()).hexdigest()[:12]}"


def _as_tensor(value: Any, what: str) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, np.ndarray):
        with warnings.catch_warnings():
            # torch's notice for read-only arrays: the store only reads them.
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            return torch.from_numpy(np.ascontiguousarray(value))
    raise TypeError(f"{what} must be a torch.Tensor or a NumPy array, not {type(value).__name__}")


def _ints(value: Any) -> Any:
    """The Python ints of a (nested) list or tuple."""
    for v in value:
        if isinstance(v, (list, tuple)):
            yield from _ints(v)
        elif isinstance(v, int) and not isinstance(v, bool):
            yield v


def _byte_view(t: torch.Tensor) -> Any:
    """A flat uint8 view of a contiguous tensor's memory, as gpufile takes buffers."""
    flat = t.reshape(-1).view(torch.uint8)
    return flat.numpy() if flat.device.type == "cpu" else flat


def _index_name(attr: TensorAttr) -> str:
    return f"({attr.group_name!r}, {attr.attr_name!r})"


class _Table:
    """An open table: its descriptor's values and the rows file opened for reading."""

    def __init__(self, root: str, desc_path: str, stat: os.stat_result) -> None:
        self.stat_key = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
        self.pid = os.getpid()
        try:
            with open(desc_path, encoding="utf-8") as f:
                desc = json.load(f)
            if not isinstance(desc, dict) or desc.get("format") != FORMAT:
                raise ValueError(f"its format is not {FORMAT!r}")
            dtype = _DTYPES.get(desc["dtype"])
            if dtype is None:
                raise TypeError(f"dtype {desc['dtype']!r} is not one a table holds "
                                f"({', '.join(sorted(_DTYPES))})")
            shape = desc["shape"]
            if (not isinstance(shape, list) or not shape
                    or not all(isinstance(s, int) and s >= 0 for s in shape)):
                raise ValueError(f"shape {shape!r} is not a list of sizes")
            rows = desc["rows"]
            if not isinstance(rows, str) or os.sep in rows or not rows.endswith(ROWS_SUFFIX):
                raise ValueError(f"rows file {rows!r} is not a name in the store")
        except (KeyError, json.JSONDecodeError) as e:
            raise ValueError(f"{desc_path} is not a gpufile.pyg descriptor: {e!r}") from None
        except (TypeError, ValueError) as e:
            raise type(e)(f"{desc_path} is not a gpufile.pyg descriptor: {e}") from None
        self.dtype: torch.dtype = dtype
        self.shape: tuple[int, ...] = tuple(shape)
        self.row_shape = self.shape[1:]
        # Python ints: NumPy's int64 product wraps, and a wrapped size can match the file.
        self.row_bytes = dtype.itemsize
        for s in self.row_shape:
            self.row_bytes *= s
        self.nbytes = self.shape[0] * self.row_bytes
        if max(self.shape + (self.row_bytes, self.nbytes)) > _INT64_MAX:
            raise ValueError(f"{desc_path} is not a gpufile.pyg descriptor: shape {shape} of "
                             f"{desc['dtype']} is {self.nbytes} bytes ({self.row_bytes} a row), "
                             f"past what torch can index (2**63 - 1)")
        self.path = os.path.join(root, rows)
        try:
            # The rule of a checkpoint directory's files: a rows file that is a symlink is
            # followed only while it stays inside the store's root.
            real = _native.resolve_inside(root, self.path)
        except _native.SafetensorError as e:
            raise ValueError(f"{desc_path} names rows file {rows!r}, which leads out of the "
                             f"feature store's root: {e}") from None
        self.file = CuFile(real, "r")
        size = os.fstat(self.file.fileno()).st_size
        if size != self.nbytes:
            self.file.close()
            raise ValueError(
                f"{self.path} holds {size} bytes, but its descriptor "
                f"({desc_path}) says {self.shape} of {desc['dtype']}: {self.nbytes} bytes")

    def close(self) -> None:
        self.file.close()


class FeatureStore(_PygFeatureStore):
    """A ``torch_geometric.data.FeatureStore`` whose tensors are files under ``root``.

    Each (group, attribute) is a file of fixed-size rows (row ``i`` is the tensor's
    ``tensor[i]``, in its dtype's bytes) and a JSON descriptor beside it. Reads gather the
    rows asked for with ``CuFile.read_rows`` straight into a tensor on ``device``.

    Parameters
    ----------
    root : str or os.PathLike
        The store's directory; made (with its parents) where it does not exist. A store
        opened on a directory sees the tensors put there before, by any process.
    device : str or torch.device, optional
        Where ``get_tensor`` and ``multi_get_tensor`` put their results: ``"cpu"`` (the
        default) or a CUDA device (``"cuda"``, ``"cuda:1"``), filled from the files with no
        host tensor in between.
    durable : bool, optional
        Whether ``put_tensor`` and ``remove_tensor`` sync the files and the directory before
        they return (default ``True``): a put that returned survives a power loss.

    Raises
    ------
    ValueError
        ``device`` is neither the CPU nor a CUDA device, or CUDA was asked for and torch
        sees no CUDA device.
    NotADirectoryError
        ``root`` is a file.

    Examples
    --------
    >>> store = FeatureStore("features")                                   # doctest: +SKIP
    >>> store.put_tensor(x, group_name=None, attr_name="x", index=None)    # doctest: +SKIP
    >>> store.get_tensor(group_name=None, attr_name="x", index=torch.tensor([3, 1]))
    ... # doctest: +SKIP
    """

    def __init__(self, root: str | os.PathLike[str], device: str | torch.device = "cpu",
                 durable: bool = True) -> None:
        super().__init__()
        dev = torch.device(device)
        if dev.type not in ("cpu", "cuda"):
            raise ValueError(f"device must be the CPU or a CUDA device, not {dev}")
        if dev.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"device {dev} was asked for, but torch sees no CUDA device")
        self.root = os.path.abspath(os.fspath(root))
        try:
            os.makedirs(self.root, exist_ok=True)
        except FileExistsError:
            raise NotADirectoryError(errno.ENOTDIR, "the feature store's root is not a "
                                     "directory", self.root) from None
        self.device = dev
        self.durable = bool(durable)
        self._tables: dict[tuple, _Table] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"gpufile.pyg.FeatureStore({self.root!r}, device={str(self.device)!r})"

    # Open files do not cross a pickle (DataLoader workers): each process opens its own.
    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_tables"] = {}
        state["_lock"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.__dict__["_lock"] = threading.Lock()

    def close(self) -> None:
        """Closes the rows files this store has open (a later read opens them again)."""
        with self._lock:
            tables, self._tables = list(self._tables.values()), {}
        for t in tables:
            t.close()

    # --- names ---------------------------------------------------------------------------

    def _paths(self, attr: TensorAttr) -> tuple[tuple, str]:
        if not isinstance(attr.attr_name, str):
            raise TypeError(f"attr_name must be a str, not {type(attr.attr_name).__name__}")
        group = attr.group_name
        _group_json(group)
        stem = _stem(group, attr.attr_name)
        return (group, attr.attr_name), os.path.join(self.root, stem + DESCRIPTOR_SUFFIX)

    def _table(self, attr: TensorAttr) -> _Table:
        """The open table of ``attr``, reopened where its descriptor changed on disk (a put
        by another store or process) or the process forked."""
        key, desc_path = self._paths(attr)
        for attempt in range(3):
            try:
                st = os.stat(desc_path)
            except FileNotFoundError:
                raise KeyError(f"no tensor {_index_name(attr)} in the feature store at "
                               f"{self.root}") from None
            with self._lock:
                table = self._tables.get(key)
                if (table is not None and table.pid == os.getpid()
                        and table.stat_key == (st.st_ino, st.st_mtime_ns, st.st_size)):
                    return table
            try:
                fresh = _Table(self.root, desc_path, st)
                break
            except FileNotFoundError:
                # A put by another process replaced the descriptor and removed the rows file
                # it named between the two opens: the new descriptor names the new one.
                if attempt == 2:
                    raise
        # A replaced table is not closed here: a read on another thread may still use it; it
        # closes when the last reference goes.
        with self._lock:
            self._tables[key] = fresh
        return fresh

    def rows_path(self, group_name: Any, attr_name: str) -> str:
        """The file that holds the rows of (``group_name``, ``attr_name``) now.

        Row ``i`` is at byte ``i * row_bytes``, in the tensor's dtype, with nothing before
        the first row: ``np.memmap(path, dtype, shape=...)`` maps it. A later
        ``put_tensor`` of the same attribute writes a new file (and removes this one).

        Parameters
        ----------
        group_name : None, str or tuple of str
            The group (``None`` for a homogeneous graph).
        attr_name : str
            The attribute.

        Returns
        -------
        str
            The absolute path.

        Raises
        ------
        KeyError
            No such tensor in the store.
        """
        attr = self._tensor_attr_cls(group_name=group_name, attr_name=attr_name, index=None)
        return self._table(attr).path

    def _forget(self, key: tuple) -> None:
        with self._lock:
            self._tables.pop(key, None)

    # --- writing -------------------------------------------------------------------------

    def _put_tensor(self, tensor: Any, attr: TensorAttr) -> bool:
        index = attr.index
        if not (index is None or (isinstance(index, slice) and index == slice(None))):
            raise ValueError(
                f"put_tensor writes a whole tensor ({_index_name(attr)} was given index "
                f"{index!r}): pass index=None, with every row")
        key, desc_path = self._paths(attr)
        t = _as_tensor(tensor, "the tensor to put")
        if t.dim() == 0:
            raise ValueError(f"tensor {_index_name(attr)} has no dimension: a table needs rows "
                             "(shape (rows, ...))")
        dtype = str(t.dtype).split(".")[-1]
        if _DTYPES.get(dtype) is not t.dtype:
            raise TypeError(f"tensor {_index_name(attr)} is {t.dtype}, which a table does not "
                            f"hold ({', '.join(sorted(_DTYPES))})")
        if t.device.type not in ("cpu", "cuda"):
            raise ValueError(f"tensor {_index_name(attr)} is on {t.device}: gpufile writes "
                             "from the CPU and CUDA devices")
        t = t.detach().contiguous()
        if t.device.type == "cuda":
            torch.cuda.current_stream(t.device).synchronize()
        stem = os.path.basename(desc_path)[: -len(DESCRIPTOR_SUFFIX)]
        rows_name = f"{stem}.{secrets.token_hex(6)}{ROWS_SUFFIX}"
        desc = {"format": FORMAT, "group_name": _group_json(key[0]), "attr_name": key[1],
                "dtype": dtype, "shape": list(t.shape), "rows": rows_name}
        # The rows are written under a temporary name outside the lock (the long part); the
        # commit (rows file named, descriptor published, what it replaced removed) runs under
        # it, so a rows file of this stem that no descriptor names is never a put's in flight.
        pending = _native.PendingFile(os.path.join(self.root, rows_name))
        published = committed = False
        try:
            if self.durable:
                pending.start_write_behind()
            if t.numel():
                pending.file.write(_byte_view(t))
            with _native.DirLock(self.root):
                pending.publish(self.durable)
                published = True
                self._publish_bytes(desc_path, json.dumps(desc, indent=1).encode() + b"\n")
                committed = True
                self._remove_unnamed(stem, keep=rows_name)
        except BaseException:
            if not published:
                pending.discard()
            elif not committed:
                self._unlink(rows_name)
            raise
        self._forget(key)
        return True

    def _publish_bytes(self, path: str, data: bytes) -> None:
        pending = _native.PendingFile(path)
        try:
            pending.file.write(memoryview(data))
            pending.publish(self.durable)
        except BaseException:
            pending.discard()
            raise

    def _remove_unnamed(self, stem: str, keep: str | None) -> None:
        """Removes the rows files of ``stem`` but ``keep`` (the one its descriptor names): the
        table a put replaced, and any that a put killed before its commit left; and the
        temporaries of rows files and descriptors that killed writers left. Call it holding the
        directory's lock."""
        pattern = re.compile(re.escape(stem) + r"\.[0-9a-f]{12}" + re.escape(ROWS_SUFFIX))
        names = os.listdir(self.root)
        for name in names:
            if name != keep and pattern.fullmatch(name):
                self._unlink(name)
        # Only the store's own temporaries (of rows files and descriptors): others in the root
        # are another writer's, which may still need them (a checkpoint save killed between
        # its two index publishes leaves an index that names its shards' temporaries).
        others = [n for n in names if _native.is_temporary_name(n)
                  and not n.endswith((ROWS_SUFFIX, DESCRIPTOR_SUFFIX))]
        _native.remove_stale_temporaries(self.root, others)

    def _unlink(self, name: str) -> None:
        try:
            os.unlink(os.path.join(self.root, name))
        except FileNotFoundError:
            pass

    def _remove_tensor(self, attr: TensorAttr) -> bool:
        key, desc_path = self._paths(attr)
        stem = os.path.basename(desc_path)[: -len(DESCRIPTOR_SUFFIX)]
        with _native.DirLock(self.root):
            try:
                os.unlink(desc_path)
            except FileNotFoundError:
                return False
            if self.durable:
                _native.sync_dir(self.root)
            self._remove_unnamed(stem, keep=None)
        self._forget(key)
        return True

    # --- reading -------------------------------------------------------------------------

    def _plan(self, table: _Table, attr: TensorAttr) -> tuple[tuple[int, ...], Any]:
        """(output shape, rows to read): rows is a NumPy int64 array of row indices, or a
        (first row, count) run for a whole table, a slice of step 1 or one int."""
        n = table.shape[0]
        index = attr.index
        if index is None:
            return table.shape, (0, n)
        if isinstance(index, slice):
            start, stop, step = index.indices(n)
            if step == 1:
                count = max(0, stop - start)
                return (count,) + table.row_shape, (start, count)
            rows = np.arange(start, stop, step, dtype=np.int64)
            return (rows.size,) + table.row_shape, rows
        if isinstance(index, (int, np.integer)) and not isinstance(index, (bool, np.bool_)):
            i = int(index)
            if not -n <= i < n:
                raise IndexError(f"index {i} is out of range for the {n} rows of "
                                 f"{_index_name(attr)}")
            return table.row_shape, (i % n, 1)
        if isinstance(index, (list, tuple)):
            try:
                index = torch.as_tensor(index)
            except (OverflowError, ValueError, RuntimeError):
                bad = next((i for i in _ints(index) if not -n <= i < n), None)
                if bad is None:
                    raise
                raise IndexError(f"index {bad} is out of range for the {n} rows of "
                                 f"{_index_name(attr)}") from None
        idx = _as_tensor(index, "index")
        if idx.dtype == torch.bool:
            if idx.dim() != 1 or idx.numel() != n:
                raise IndexError(f"a boolean index must be one flag per row ({n} for "
                                 f"{_index_name(attr)}), got shape {tuple(idx.shape)}")
            idx = idx.nonzero().view(-1)
        elif idx.is_floating_point() or idx.is_complex():
            raise TypeError(f"index must hold integers (or booleans), got {idx.dtype}")
        elif idx.dtype == _UINT64 and idx.numel():
            # Values from 2**63 would wrap to negative int64s, which count from the end.
            hi = int(idx.detach().cpu().reshape(-1).numpy().max())
            if hi >= n:
                raise IndexError(f"index {hi} is out of range for the {n} rows of "
                                 f"{_index_name(attr)}")
        idx = idx.detach().to("cpu", torch.int64)
        shape = tuple(idx.shape) + table.row_shape
        flat = idx.reshape(-1)
        if flat.numel():
            lo, hi = int(flat.min()), int(flat.max())
            if lo < -n or hi >= n:
                bad = lo if lo < -n else hi
                raise IndexError(f"index {bad} is out of range for the {n} rows of "
                                 f"{_index_name(attr)}")
            if lo < 0:
                flat = torch.where(flat < 0, flat + n, flat)
        return shape, np.ascontiguousarray(flat.numpy())

    def _submit(self, table: _Table, shape: tuple[int, ...], rows: Any) -> tuple[Any, Any]:
        out = torch.empty(shape, dtype=table.dtype, device=self.device)
        if not out.numel():
            return out, None
        buf = _byte_view(out)
        if isinstance(rows, tuple):
            first, count = rows
            fut = table.file.pread(buf, count * table.row_bytes, first * table.row_bytes)
        else:
            fut = table.file.read_rows(buf, rows, table.row_bytes)
        return out, fut

    def _get_tensor(self, attr: TensorAttr) -> torch.Tensor:
        return self._multi_get_tensor([attr])[0]

    def _multi_get_tensor(self, attrs: list[TensorAttr]) -> list[torch.Tensor]:
        # Every check first (nothing is read where one attribute is bad), then every gather
        # submitted before any is waited for.
        plans = []
        for attr in attrs:
            table = self._table(attr)
            plans.append((table,) + self._plan(table, attr))
        submitted = [self._submit(table, shape, rows) for table, shape, rows in plans]
        error: BaseException | None = None
        outs = []
        for out, fut in submitted:
            if fut is not None:
                try:
                    fut.get()
                except BaseException as e:  # wait for the others before raising
                    error = error or e
            outs.append(out)
        if error is not None:
            raise error
        return outs

    def _get_tensor_size(self, attr: TensorAttr) -> tuple[int, ...] | None:
        try:
            table = self._table(attr)
        except KeyError:
            return None
        if attr.index is None:
            return torch.Size(table.shape)
        return torch.Size(self._plan(table, attr)[0])

    def get_all_tensor_attrs(self) -> list[TensorAttr]:
        """Every (group, attribute) in the store, from the descriptors in ``root``.

        Returns
        -------
        list of TensorAttr
            ``group_name`` and ``attr_name`` set, ``index`` unset.
        """
        out = []
        for name in sorted(os.listdir(self.root)):
            if not name.endswith(DESCRIPTOR_SUFFIX) or _native.is_temporary_name(name):
                continue
            try:
                with open(os.path.join(self.root, name), encoding="utf-8") as f:
                    desc = json.load(f)
                group, attr_name = _group_of(desc["group_name"]), desc["attr_name"]
            except FileNotFoundError:  # removed since the listing
                continue
            except (ValueError, KeyError, TypeError) as e:
                raise ValueError(f"{os.path.join(self.root, name)} is not a gpufile.pyg "
                                 f"descriptor: {e!r}") from None
            out.append(self._tensor_attr_cls(group_name=group, attr_name=attr_name))
        return out


# --- sampling without pyg-lib ---------------------------------------------------------------

class TorchNeighborSampler(NeighborSampler):
    """PyG's ``NeighborSampler`` that samples homogeneous graphs in plain torch where neither
    pyg-lib nor torch-sparse is installed (``pip install "gpufile[pyg]"`` installs neither:
    pyg-lib's wheels are on PyG's own index).

    Each hop takes up to ``k`` distinct in-neighbours of every frontier node, uniformly, new
    nodes numbered in the order they are first seen (as pyg-lib does). Vectorised per hop: no
    Python loop over nodes. Where pyg-lib or torch-sparse is installed, and for heterogeneous
    graphs, it hands over to PyG's own sampling. ``neighbor_loader`` builds a
    ``NeighborLoader`` on it.

    Raises
    ------
    NotImplementedError
        At the first batch, a sampling PyG's own samplers do and this one does not (with
        replacement, disjoint, temporal, weighted, induced subgraphs) where neither pyg-lib
        nor torch-sparse is installed.
    """

    def _sample(self, seed: torch.Tensor, seed_time: Any = None, **kwargs: Any) -> Any:
        native = torch_geometric.typing.WITH_PYG_LIB or torch_geometric.typing.WITH_TORCH_SPARSE
        if native or self.is_hetero:
            return super()._sample(seed, seed_time, **kwargs)
        if (self.replace or self.disjoint or seed_time is not None
                or self.edge_weight is not None or self.subgraph_type == SubgraphType.induced):
            raise NotImplementedError(
                "without pyg-lib or torch-sparse, gpufile.pyg.TorchNeighborSampler samples "
                "uniformly and without replacement; replace, disjoint, temporal, weighted and "
                "induced sampling need pyg-lib (https://data.pyg.org/whl/)")
        colptr, row = self.colptr, self.row
        local = getattr(self, "_local", None)
        if local is None or local.numel() != colptr.numel() - 1:
            local = self._local = torch.full((colptr.numel() - 1,), -1, dtype=torch.long)
        node = seed.to(torch.long)
        local[node] = torch.arange(node.numel())
        frontier = node
        rows, cols, edges = [], [], []
        sampled_nodes, sampled_edges = [node.numel()], []
        try:
            for k in self.num_neighbors.get_mapped_values():
                start = colptr[frontier]
                deg = colptr[frontier + 1] - start
                dst = torch.repeat_interleave(torch.arange(frontier.numel()), deg)
                first = torch.cumsum(deg, 0) - deg
                pos = start[dst] + torch.arange(dst.numel()) - first[dst]
                if k >= 0:
                    # Random keys within each node's group: the k smallest are its sample.
                    order = torch.argsort(dst.double() + torch.rand(dst.numel(),
                                                                    dtype=torch.double))
                    rank = torch.arange(dst.numel()) - first[dst[order]]
                    keep = order[rank < k]
                    pos, dst = pos[keep], dst[keep]
                src = row[pos]
                fresh = src[local[src] < 0]
                uniq, inv = torch.unique(fresh, return_inverse=True)
                seen = torch.full((uniq.numel(),), fresh.numel(), dtype=torch.long)
                seen.scatter_reduce_(0, inv, torch.arange(fresh.numel()), "amin")
                new = uniq[torch.argsort(seen)]
                local[new] = torch.arange(node.numel(), node.numel() + new.numel())
                node = torch.cat([node, new])
                rows.append(local[src])
                cols.append(local[frontier[dst]])
                edges.append(pos)
                sampled_nodes.append(new.numel())
                sampled_edges.append(src.numel())
                frontier = new
        finally:
            local[node] = -1
        edge = torch.cat(edges) if edges else torch.empty(0, dtype=torch.long)
        if self.perm is not None:
            edge = self.perm[edge]
        empty = torch.empty(0, dtype=torch.long)
        return SamplerOutput(node=node, row=torch.cat(rows) if rows else empty,
                             col=torch.cat(cols) if cols else empty, edge=edge, batch=None,
                             num_sampled_nodes=sampled_nodes, num_sampled_edges=sampled_edges)


# NeighborLoader's arguments that it hands to the sampler it builds (and ignores where it is
# given one): the sampler built here takes them, so none is dropped without a word.
_SAMPLING_ARGS = ("replace", "subgraph_type", "disjoint", "temporal_strategy", "time_attr",
                  "weight_attr", "is_sorted", "directed")


def neighbor_loader(data: Any, num_neighbors: list[int], **kwargs: Any) -> NeighborLoader:
    """``torch_geometric.loader.NeighborLoader(data, num_neighbors, **kwargs)`` sampled by
    ``TorchNeighborSampler``: runs where neither pyg-lib nor torch-sparse is installed (PyG's
    own ``NeighborLoader`` raises there), and samples with them where they are.

    Parameters
    ----------
    data : tuple of (FeatureStore, GraphStore) or torch_geometric.data.Data
        What ``NeighborLoader`` takes: ``(FeatureStore(...), graph_store)`` reads features from
        files.
    num_neighbors : list of int
        Neighbours sampled per node, one entry a hop (``-1``: all of them).
    **kwargs
        ``NeighborLoader``'s other arguments: those of its sampling (``replace``,
        ``subgraph_type``, ``disjoint``, ``temporal_strategy``, ``time_attr``, ``weight_attr``,
        ``is_sorted``, ``directed``) go to the sampler as ``NeighborLoader`` passes them to its
        own; the rest (``batch_size``, ``input_nodes``, ``shuffle``, ...) to the loader.

    Returns
    -------
    torch_geometric.loader.NeighborLoader
        Batches as PyG's own loader gives them.

    Examples
    --------
    >>> loader = neighbor_loader((store, graph), [10, 10], batch_size=1024)  # doctest: +SKIP
    """
    with warnings.catch_warnings():
        # PyG's notice that it samples faster with pyg-lib: this sampler is the answer to it.
        warnings.filterwarnings("ignore", message=".*without a 'pyg-lib' installation")
        sampling = {k: kwargs.pop(k) for k in _SAMPLING_ARGS if k in kwargs}
        sampler = TorchNeighborSampler(data, num_neighbors=num_neighbors,
                                       share_memory=kwargs.get("num_workers", 0) > 0,
                                       **sampling)
    return NeighborLoader(data, num_neighbors, neighbor_sampler=sampler, **kwargs)
