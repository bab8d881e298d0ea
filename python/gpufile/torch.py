"""PyTorch Distributed Checkpoint (``torch.distributed.checkpoint``) storage on gpufile.

``FileSystemWriter`` and ``FileSystemReader`` are drop-in replacements for torch's classes of
the same names, with the same arguments and the same checkpoint layout (``__{rank}_{n}...distcp``
data files holding one ``torch.save`` record per item, and a pickled ``.metadata``), so a
checkpoint written by one loads with the other, both ways::

    import torch.distributed.checkpoint as dcp
    from gpufile.torch import FileSystemReader, FileSystemWriter

    dcp.save(state_dict, storage_writer=FileSystemWriter("ckpt/step-100"))
    future = dcp.async_save(state_dict, storage_writer=FileSystemWriter("ckpt/step-200"))
    dcp.load(state_dict, storage_reader=FileSystemReader("ckpt/step-100"))

What changes:

* ``write_data`` writes every tensor from its own memory (GPU or host) through gpufile's engine,
  all items of all the rank's files as one stream of requests: each item's ``torch.save``
  record is built around an empty stand-in of the tensor (its zip headers and pickle only, made
  once per dtype and shape), and the tensor's bytes go straight into the record's data field.
  No ``.cpu()`` copy. A rank's data files (``thread_count`` of them: four where it is not
  given, torch's default being one; or one per item with ``single_file_per_rank=False``) are
  written together, their writes interleaved in ``task_size`` pieces: one file's buffered
  writes go one writer at a time, several files' at once.
* Crash-safe: data files are written under temporary names and published under names of their
  own per save (``__0_0.<save id>.distcp``: a new save never rewrites a file that the previous
  checkpoint's metadata names); ``finish`` publishes ``.metadata`` last, in one rename, as the
  commit, then removes the data files that the metadata it replaced named and the new one does
  not. Commits of saves sharing the directory take turns (``.gpufile-lock``, docs/checkpoints.md),
  and a data file named by no published metadata (a save still running) is never removed. ``sync_files`` syncs files and
  directory (torch's meaning): a durable save writes behind while it writes, syncs every data
  file, renames them, and syncs the directory once.
* ``read_data`` reads each tensor's bytes straight into the target tensor on its device (the
  record's data field located from its zip headers), all reads as one stream; an item that
  must be resharded (a slice of a saved tensor), or a record of another shape, goes through
  ``torch.load`` as torch's reader does.
* As an ``AsyncStager`` (``dcp.async_save``), ``stage`` snapshots GPU tensors in spare memory of
  their own GPU (device-to-device copies: milliseconds) where ``async_save_device_limit`` and the
  GPU's free memory allow, else into one pinned host buffer kept by the writer and reused by its
  later saves (at most ``async_save_pinned_limit`` bytes), so the caller is blocked for those
  copies only; ``writer.staging`` says which and why.
"""

from __future__ import annotations

import errno
import io
import os
import pickle
import re
import struct
import threading
from typing import Any

import torch
from torch.distributed.checkpoint import filesystem as _fs
from torch.distributed.checkpoint.planner import LoadItemType, WriteItemType
from torch.distributed.checkpoint.storage import WriteResult
from torch.futures import Future

from . import _native
from .cufile import CuFile, read_batch, write_batch

__all__ = ["FileSystemReader", "FileSystemWriter"]

# A data file's name inside a pickled ``.metadata`` (names are ASCII, without separators).
_DATA_FILE_BYTES = re.compile(rb"__\d+_\d+[A-Za-z0-9_.-]*?\.distcp")


def _sync_devices(tensors: list) -> None:
    for d in {t.device for t in tensors if t.device.type == "cuda"}:
        torch.cuda.current_stream(d).synchronize()


def _byte_view(t: torch.Tensor) -> Any:
    """A flat uint8 view of a contiguous tensor's bytes, as gpufile takes buffers."""
    flat = t.reshape(-1).view(torch.uint8)
    return flat.numpy() if flat.device.type == "cpu" else flat


class _Recorder(io.RawIOBase):
    """The stream ``torch.save`` writes a stand-in tensor into: its bytes are kept, except those
    of the stand-in's storage, which become a hole for the real tensor's bytes."""

    def __init__(self, ptr: int, nbytes: int) -> None:
        self.ptr, self.end = ptr, ptr + nbytes
        self.pieces: list[Any] = []  # bytes, or (offset into the tensor, length)
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        mv = memoryview(b).cast("B")
        n = mv.nbytes
        if n:
            import numpy
            addr = numpy.frombuffer(mv, numpy.uint8).ctypes.data
            if self.ptr <= addr < self.end:
                self.pieces.append((addr - self.ptr, n))
            else:
                self.pieces.append(bytes(mv))
        self.size += n
        return n


def _save_record(t: torch.Tensor) -> tuple[list[Any], int]:
    """The ``torch.save`` record of ``t`` (contiguous) as pieces: host bytes, and ``(offset,
    length)`` runs of ``t``'s own bytes; and its length. The stand-in is an uninitialised host
    tensor of the same dtype and shape that nothing reads (its CRC is not computed)."""
    stand_in = torch.empty(t.shape, dtype=t.dtype)
    rec = _Recorder(stand_in.data_ptr(), stand_in.numel() * stand_in.element_size())
    from torch.utils.serialization import config
    old = config.save.compute_crc32
    config.save.compute_crc32 = False
    try:
        torch.save(stand_in, rec)
    finally:
        config.save.compute_crc32 = old
    return rec.pieces, rec.size


def _record(t: torch.Tensor, cache: dict) -> tuple[list[Any], int]:
    """``_save_record`` of ``t``, its adjacent host bytes joined, made once per dtype and shape
    (the record depends on nothing else: the stand-in's bytes are not in it): a model's layers
    repeat a few shapes, and each ``torch.save`` call is slow (docs/performance.md, "PyTorch
    records made once per dtype and shape")."""
    key = (t.dtype, tuple(t.shape))
    found = cache.get(key)
    if found is None:
        pieces, length = _save_record(t)
        joined: list[Any] = []
        for piece in pieces:
            if isinstance(piece, bytes) and joined and isinstance(joined[-1], bytes):
                joined[-1] += piece
            else:
                joined.append(piece)
        found = cache[key] = (joined, length)
    return found


class _DataFile:
    """One data file's writes in file order: host bytes (records' headers, ``BYTE_IO`` items)
    gathered into runs, each tensor's bytes written from its own memory."""

    def __init__(self, pending: Any) -> None:
        self.pending = pending
        self.pos = 0
        self.host = bytearray()  # host bytes not yet in `writes`, ending at `pos`
        self.writes: list[tuple[Any, int, int]] = []  # (buffer, length, file offset)

    def add_bytes(self, b: Any) -> None:
        self.host += b
        self.pos += memoryview(b).nbytes

    def add_tensor(self, view: Any, offset: int, length: int) -> None:
        self.flush()
        self.writes.append((view[offset:offset + length], length, self.pos))
        self.pos += length

    def flush(self) -> None:
        if self.host:
            b = bytes(self.host)
            self.writes.append((memoryview(b), len(b), self.pos - len(b)))
            self.host = bytearray()


def _batch(files: list[_DataFile]) -> list[tuple]:
    """The write batch of ``files``, in the core's order and pieces (``gpufile::batch::
    interleave``, as ``save_checkpoint``'s shards are written)."""
    out = []
    for i, w, at, k in _native.interleave([[n for _, n, _ in f.writes] for f in files]):
        f = files[i]
        b, n, off = f.writes[w]
        out.append((f.pending.file, b if k == n else b[at:at + k], k, off + at))
    return out


# The data files a rank writes when ``thread_count`` is not given (torch's default is one).
# Buffered writes to one file go one writer at a time (ext4 and XFS take the inode's lock for
# each): one file fills the page cache at about one core's rate whatever the thread count, by
# pwrite or by a shared mapping, while separate files scale with the writers
# (docs/performance.md, "What one file can take"). Four files written together also let a
# durable save reach the disk's rate.
_FILES_PER_RANK = 4


class FileSystemWriter(_fs.FileSystemWriter):
    """torch's ``FileSystemWriter`` (same arguments, same layout) writing through gpufile; see the
    module's documentation. ``thread_count`` is, as in torch, the number of data files a rank
    writes with ``single_file_per_rank``; left out, it is four (torch's is one), written
    together."""

    def __init__(self, path: str | os.PathLike, single_file_per_rank: bool = True,
                 sync_files: bool = True, thread_count: int | None = None,
                 per_thread_copy_ahead: int = 10_000_000, cache_staged_state_dict: bool = False,
                 overwrite: bool = True, **kwargs: Any) -> None:
        if thread_count is None:
            thread_count = _FILES_PER_RANK
        super().__init__(path, single_file_per_rank=single_file_per_rank, sync_files=sync_files,
                         thread_count=thread_count, per_thread_copy_ahead=per_thread_copy_ahead,
                         cache_staged_state_dict=cache_staged_state_dict, overwrite=overwrite,
                         **kwargs)
        self._staging: torch.Tensor | None = None
        #: Where the last ``stage`` put the tensors and why (gpufile's addition).
        self.staging: dict[str, Any] = {}
        self._staging_free = threading.Event()
        self._staging_free.set()

    # --- async staging ---------------------------------------------------------------------

    def stage(self, state_dict: Any) -> Any:
        """Copies of the state dict's tensors, other values as they are: GPU tensors in spare
        memory of their own GPU where ``async_save_device_limit`` and the GPU's free memory
        allow (as ``gpufile.safetensors.async_save`` decides), the others in one pinned host
        buffer reused by this writer's later saves, once the save that used it has written.
        ``self.staging`` says where and why. DTensors and other tensor subclasses are staged
        by torch's own stager."""
        from torch.utils import _pytree

        from . import defaults
        from ._saving import background
        leaves = [v for v in _pytree.tree_leaves(state_dict) if isinstance(v, torch.Tensor)]
        if any(type(v) is not torch.Tensor and not isinstance(v, torch.nn.Parameter)
               for v in leaves):
            self.staging = {"where": "torch", "bytes": 0,
                            "reason": "tensor subclasses: torch's own stager"}
            return super().stage(state_dict)
        limit = int(defaults.get("async_save_pinned_limit"))
        on_device, why = background.device_snapshot(
            [(None, v) for v in leaves], int(defaults.get("async_save_device_limit")))
        snapshot = {id(v) for v in leaves if v.device.type == "cuda" and v.device in on_device}
        total = sum(background.aligned(v) for v in leaves if id(v) not in snapshot)
        if total > limit:
            raise ValueError(f"staging needs {total} bytes of pinned host memory, more than "
                             f"async_save_pinned_limit ({limit} bytes); raise the setting")
        self._staging_free.wait()
        pinned = len(snapshot) < len(leaves)
        if pinned and (self._staging is None or self._staging.numel() < max(total, 1)):
            self._staging = None
            self._staging = torch.empty(max(total, 1), dtype=torch.uint8,
                                        pin_memory=torch.cuda.is_available())
        offsets: dict[Any, int] = {}
        devices = set()

        def copy(v: torch.Tensor) -> torch.Tensor:
            on_gpu = id(v) in snapshot
            buf = on_device[v.device] if on_gpu else self._staging
            key = v.device if on_gpu else None
            at = offsets.get(key, 0)
            n = v.numel() * v.element_size()
            dst = buf[at:at + n].view(v.dtype).reshape(v.shape)
            offsets[key] = at + background.aligned(v)
            if v.is_contiguous():
                dst.copy_(v.detach(), non_blocking=v.device.type == "cuda")
            else:
                dst.copy_(v.detach().contiguous())
            if v.device.type == "cuda":
                devices.add(v.device)
            return dst
        self._staging_free.clear()
        try:
            staged = _pytree.tree_map_only(torch.Tensor, copy, state_dict)
            for d in devices:
                torch.cuda.current_stream(d).synchronize()
        except BaseException:
            self._staging_free.set()
            raise
        gpu = sum(background.aligned(v) for v in leaves if v.device.type == "cuda")
        self.staging = ({"where": "device", "bytes": gpu, "reason": why} if not pinned else
                        {"where": "pinned", "bytes": total,
                         "reason": why if gpu and not snapshot else "CPU tensors"})
        return staged

    # --- writing ---------------------------------------------------------------------------

    def write_data(self, plan: Any, planner: Any) -> Future:
        if self.serialization_format != _fs.SerializationFormat.TORCH_SAVE:
            return super().write_data(plan, planner)
        try:
            return self._write_all(plan, planner)
        finally:
            self._staging_free.set()

    def _write_all(self, plan: Any, planner: Any) -> Future:
        prefix = plan.storage_data.prefix
        if self.single_file_per_rank:
            # Fewer items than files: no empty files.
            buckets = [b for b in _fs._split_by_size_and_type(self.thread_count, plan.items) if b]
        else:
            buckets = [[item] for item in plan.items]
        directory = os.fspath(self.path)
        results: list[WriteResult] = []
        files: list[_DataFile] = []
        tensors: list[torch.Tensor] = []
        records: dict[tuple, tuple[list[Any], int]] = {}
        try:
            for n, items in enumerate(buckets):
                name = f"{prefix}{n}.{self.save_id}{_fs.DEFAULT_SUFFIX}"
                f = _DataFile(_native.PendingFile(os.path.join(directory, name)))
                files.append(f)
                if self.sync_files:
                    f.pending.start_write_behind()
                for item in ([i for i in items if i.type == WriteItemType.BYTE_IO]
                             + [i for i in items if i.type != WriteItemType.BYTE_IO]):
                    data = planner.resolve_data(item)
                    start = f.pos
                    if item.type == WriteItemType.BYTE_IO:
                        f.add_bytes(data.getbuffer())
                    else:
                        t = data.detach()
                        if not t.is_contiguous():
                            t = t.contiguous()
                        tensors.append(t)
                        pieces, length = _record(t, records)
                        view = _byte_view(t) if t.numel() else None
                        for piece in pieces:
                            if isinstance(piece, bytes):
                                f.add_bytes(piece)
                            else:
                                f.add_tensor(view, *piece)
                        if f.pos - start != length:
                            raise AssertionError(f"record of {item.index} is {f.pos - start} "
                                                 f"bytes, torch.save wrote {length}")
                    results.append(WriteResult(
                        index=item.index, size_in_bytes=f.pos - start,
                        storage_data=_fs._StorageInfo(name, start, f.pos - start)))
                f.flush()
            _sync_devices(tensors)
            entries = _batch(files)
            if entries:
                write_batch(entries).get()
            # Every file synced before any is renamed, and one directory sync for all the
            # renames: the files are named by no metadata yet, so their order does not matter.
            if self.sync_files:
                for f in files:
                    f.pending.sync()
            for f in files:
                f.pending.publish(False)
            if self.sync_files and files:
                _native.sync_dir(directory)
        except BaseException:
            for f in files:
                f.pending.discard()
            raise
        fut: Future = Future()
        fut.set_result(results)
        return fut

    def finish(self, metadata: Any, results: list) -> None:
        version = getattr(_fs, "CURRENT_DCP_VERSION", None)
        if version is not None:
            metadata.version = version
        storage_md = {}
        for wr_list in results:
            storage_md.update({wr.index: wr.storage_data for wr in wr_list})
        metadata.storage_data = storage_md
        metadata.storage_meta = self.storage_meta()
        per_rank = not self.use_collectives and self.rank is not None
        path = os.fspath(self._get_metadata_path(self.rank if per_rank else None))
        data = pickle.dumps(metadata)
        named = {getattr(s, "relative_path", None) for s in storage_md.values()} - {None}
        directory = os.fspath(self.path)
        # The commit, one save at a time (threads, processes, hosts sharing the directory).
        # What it removes after is what the metadata it replaces named and this one does not:
        # never a data file of a save still running (named by no metadata yet), nor one that a
        # later commit named.
        with _native.DirLock(directory):
            missing = sorted(f for f in named if not os.path.exists(os.path.join(directory, f)))
            if missing:
                raise FileNotFoundError(
                    errno.ENOENT, f"gpufile: nothing was published at {path}: data files of "
                    f"this save are gone (removed by something other than a gpufile save): "
                    f"{missing[:3]}", os.path.join(directory, missing[0]))
            replaced = _names_in_metadata(path)
            pending = _native.PendingFile(path)
            try:
                pending.file.write(memoryview(data))
                pending.publish(self.sync_files)
            except BaseException:
                pending.discard()
                raise
            removed = False
            for f in sorted(replaced - named):
                try:
                    os.unlink(os.path.join(directory, f))
                    removed = True
                except FileNotFoundError:
                    pass
            # And temporaries that killed saves left (their process is gone).
            from ._saving.local import remove_stale_temporaries
            remove_stale_temporaries(directory)
            if removed and self.sync_files:
                _native.sync_dir(directory)


def _names_in_metadata(path: str) -> set[str]:
    """The data files a published ``.metadata`` names, found in its bytes without unpickling it
    (a save must not run code from the directory it writes to): each name is a plain string of
    the pickle, of the form DCP gives data files."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return set()
    return {m.decode() for m in _DATA_FILE_BYTES.findall(raw)}


# --- reading -------------------------------------------------------------------------------

_LOCAL_HEADER = struct.Struct("<IHHHHHIIIHH")
_HEAD_BYTES = 4096


def _zip_entries(head: bytes) -> dict[str, tuple[int, int]]:
    """Local zip entries found in the first bytes of a ``torch.save`` record: name → (offset of
    its data, offset where the next entry's header starts or the end of ``head``). torch's
    writer puts sizes in data descriptors after the data (the local header's are 0), so entries
    are found by their signatures."""
    found = []
    pos = head.find(b"PK\x03\x04")
    while 0 <= pos and pos + 30 <= len(head):
        fields = _LOCAL_HEADER.unpack_from(head, pos)
        name_len, extra_len = fields[9], fields[10]
        name_end = pos + 30 + name_len
        if name_end > len(head):
            break
        name = head[pos + 30:name_end].decode("utf-8", "replace")
        data = name_end + extra_len
        found.append((name, data))
        pos = head.find(b"PK\x03\x04", data)
    out = {}
    for i, (name, data) in enumerate(found):
        nxt = found[i + 1][1] if i + 1 < len(found) else len(head)
        out[name] = (data, nxt)
    return out


class _Layout:
    """What a record's pickle says of its one tensor."""

    __slots__ = ("key", "dtype", "offset", "size", "stride")


class _LayoutUnpickler(pickle.Unpickler):
    """Reads ``data.pkl`` of a one-tensor record: which storage, dtype, offset, size, stride;
    refuses anything but the names a plain tensor's pickle uses."""

    def __init__(self, data: bytes) -> None:
        super().__init__(io.BytesIO(data))
        self.layouts: list[_Layout] = []

    def find_class(self, module: str, name: str) -> Any:
        if module == "torch._utils" and name == "_rebuild_tensor_v2":
            return self._rebuild_v2
        if module == "torch._utils" and name == "_rebuild_tensor_v3":
            return self._rebuild_v3
        if module == "collections" and name == "OrderedDict":
            import collections
            return collections.OrderedDict
        if module == "torch" and name.endswith("Storage"):
            return _DTYPE_NAMES.get(name[:-len("Storage")], "unknown")
        if module == "torch.storage" and name == "UntypedStorage":
            return "untyped"
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not part of a plain tensor")

    def persistent_load(self, pid: Any) -> Any:
        _, storage_type, key, _location, _numel = pid
        return (key, storage_type)

    def _add(self, storage: Any, offset: int, size: Any, stride: Any, dtype: Any) -> _Layout:
        layout = _Layout()
        layout.key, layout.dtype = storage[0], dtype
        layout.offset, layout.size, layout.stride = offset, tuple(size), tuple(stride)
        self.layouts.append(layout)
        return layout

    def _rebuild_v2(self, storage: Any, offset: int, size: Any, stride: Any, *args: Any) -> Any:
        return self._add(storage, offset, size, stride, storage[1])

    def _rebuild_v3(self, storage: Any, offset: int, size: Any, stride: Any, requires_grad: Any,
                    hooks: Any, dtype: Any, *args: Any) -> Any:
        return self._add(storage, offset, size, stride, dtype)


_DTYPE_NAMES = {"Float": torch.float32, "Double": torch.float64, "Half": torch.float16,
                "BFloat16": torch.bfloat16, "Long": torch.int64, "Int": torch.int32,
                "Short": torch.int16, "Char": torch.int8, "Byte": torch.uint8,
                "Bool": torch.bool, "ComplexFloat": torch.complex64,
                "ComplexDouble": torch.complex128}


def _layout(head: bytes) -> tuple[_Layout, int] | None:
    """The tensor's layout and the offset of its bytes in the record, where the record's first
    bytes show both; None otherwise (the caller falls back to ``torch.load``)."""
    entries = _zip_entries(head)
    pkl = next((k for k in entries if k.endswith("/data.pkl")), None)
    if pkl is None:
        return None
    start, end = entries[pkl]
    try:
        # The pickle ends at its STOP opcode; what follows it (a data descriptor) is not read.
        u = _LayoutUnpickler(head[start:end])
        obj = u.load()
    except Exception:  # noqa: BLE001 - anything unexpected reads the slow, general way
        return None
    if len(u.layouts) != 1 or obj is not u.layouts[0]:
        return None
    layout = u.layouts[0]
    if not isinstance(layout.dtype, torch.dtype):
        return None
    root = pkl[:-len("data.pkl")]
    data = entries.get(f"{root}data/{layout.key}")
    if data is None:
        return None
    return layout, data[0]


def _contiguous(size: tuple, stride: tuple) -> bool:
    expect = 1
    for n, s in zip(reversed(size), reversed(stride)):
        if n > 1 and s != expect:
            return False
        expect *= n
    return True


class FileSystemReader(_fs.FileSystemReader):
    """torch's ``FileSystemReader`` (same arguments) reading through gpufile straight into the
    target tensors; see the module's documentation."""

    def read_data(self, plan: Any, planner: Any) -> Future:
        directory = os.fspath(self.path)
        files: dict[str, CuFile] = {}

        def handle(rel: str) -> CuFile:
            if rel not in files:
                files[rel] = CuFile(os.path.join(directory, rel), "r")
            return files[rel]
        try:
            self._read(plan, planner, handle)
        finally:
            for f in files.values():
                f.close()
        fut: Future = Future()
        fut.set_result(None)
        return fut

    def _read(self, plan: Any, planner: Any, handle: Any) -> None:
        import numpy
        items = [(req, self.storage_data[req.storage_index]) for req in plan.items]
        for req, info in items:
            if info.offset < 0 or info.length < 0:
                raise ValueError(
                    f"the checkpoint's metadata places the record of "
                    f"{req.storage_index.fqn!r} at a negative offset ({info.offset}) or length "
                    f"({info.length}) of {info.relative_path}")
        # First bytes of every record (zip headers, pickle), one stream of reads.
        heads = {}
        batch = []
        for req, info in items:
            n = min(info.length, _HEAD_BYTES) if req.type != LoadItemType.BYTE_IO else info.length
            buf = numpy.empty(n, numpy.uint8)
            heads[id(req)] = buf
            batch.append((handle(info.relative_path), buf, n, info.offset))
        if batch:
            read_batch(batch).get()
        direct = []  # (req, target)
        batch = []
        for req, info in items:
            head = heads[id(req)]
            if req.type == LoadItemType.BYTE_IO:
                planner.load_bytes(req, io.BytesIO(head.tobytes()))
                continue
            if getattr(info, "transform_descriptors", None):
                self._slow(req, info, handle, planner)
                continue
            found = _layout(head.tobytes())
            target = planner.resolve_tensor(req).detach()
            if found is not None:
                layout, data_at = found
                if layout.offset < 0:
                    # The tensor would start before its storage: read from earlier bytes of
                    # the data file. torch.load refuses such a record too.
                    raise ValueError(
                        f"the record of {req.storage_index.fqn!r} in {info.relative_path} (at "
                        f"byte {info.offset}) gives its tensor storage offset {layout.offset}: "
                        "a negative storage offset, which no tensor has")
                whole = (all(o == 0 for o in req.storage_offsets)
                         and tuple(req.lengths) == layout.size)
                nbytes = target.numel() * target.element_size()
                at = data_at + layout.offset * target.element_size()
                if (whole and layout.dtype == target.dtype and _contiguous(layout.size,
                        layout.stride) and target.is_contiguous()
                        and tuple(target.shape) == layout.size
                        and target.device.type in ("cpu", "cuda")
                        and at + nbytes <= info.length):
                    if nbytes:
                        batch.append((handle(info.relative_path), _byte_view(target), nbytes,
                                      info.offset + at))
                    direct.append((req, target))
                    continue
            self._slow(req, info, handle, planner, target)
        _sync_devices([t for _, t in direct])
        if batch:
            read_batch(batch).get()
        for req, target in direct:
            planner.commit_tensor(req, target)

    def _slow(self, req: Any, info: Any, handle: Any, planner: Any,
              target: torch.Tensor | None = None) -> None:
        """torch's own way for one item: the record read whole, ``torch.load``, narrowed,
        copied into the target."""
        import numpy
        from torch.distributed._shard._utils import narrow_tensor_by_index
        buf = numpy.empty(info.length, numpy.uint8)
        if info.length:
            handle(info.relative_path).read(buf, info.length, info.offset)
        stream: Any = io.BytesIO(buf.tobytes())
        descriptors = getattr(info, "transform_descriptors", None) or ()
        if descriptors:
            stream = self.transforms.transform_load_stream(req, descriptors, stream)
            if not stream.seekable():
                stream = io.BytesIO(stream.read(-1))
        tensor = torch.load(stream, map_location="cpu", weights_only=True)
        tensor = narrow_tensor_by_index(tensor, req.storage_offsets, req.lengths)
        if target is None:
            target = planner.resolve_tensor(req).detach()
        if target.size() != tensor.size():
            raise AssertionError(f"req {req.storage_index} mismatch sizes {target.size()} vs "
                                 f"{tensor.size()}")
        target.copy_(tensor)
        planner.commit_tensor(req, target)

