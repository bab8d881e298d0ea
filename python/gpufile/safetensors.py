"""Model checkpoints in the safetensors format, read with gpufile: host memory or straight to GPUs.

The names of the ``safetensors`` package where it has one (``load_file``, ``safe_open`` with
``keys``, ``metadata``, ``get_tensor``, ``get_slice``), so that its users change an import::

    from gpufile.safetensors import load_file, load_checkpoint

    state = load_file("model.safetensors", device="cuda:0")            # dict of torch tensors
    state = load_checkpoint("Llama-3-8B/", device="cuda:0")            # a sharded checkpoint
    state = load_checkpoint("Llama-3-8B/", filter=lambda n: "layers.0." in n,
                            device_map={"model.layers.0": 0, "lm_head": 1})

How a load runs: every header is read and validated first (by gpufile's Rust core; a bad file
is refused, naming the file and the tensor, before a byte of data is read). The core then plans
the reads: only the selected tensors' bytes, adjacent tensors of a file merged into one range.
gpufile allocates **one buffer per device** for the tensors placed there and starts every range's
read, of every file, at once (``CuFile.pread``), then waits: one stream of requests, no per-file
gaps. To a GPU, the data moves through gpufile's bounded pinned bounce buffers (or cuFile), never
through a host copy of the model: peak host memory does not grow with the model.

Memory: by default the tensors of a device are **views into that device's one allocation**
(each aligned to 256 bytes where a read range starts, to its element size within one); the
allocation lives as long as any of its tensors. With ``own_memory=True`` every tensor has an
allocation of its own (``safetensors``' semantics: deleting a tensor frees its memory), still
read by one stream of requests. ``safe_open(...).get_tensor`` always returns a tensor that owns
its memory.

Frameworks: ``"pt"`` (PyTorch; alias ``"torch"``), ``"numpy"`` (``"np"``), ``"cupy"``. Devices:
``"cpu"``, ``"cuda"``, ``"cuda:N"``, ``N`` or a ``torch.device``. NumPy has no bfloat16 or FP8
types: as in ``safetensors.numpy``, BF16 (and here the FP8 types too) load as ``ml_dtypes``
arrays when ``ml_dtypes`` is installed, else a ``TypeError`` says so. The sub-byte MX types
(F4, F6) load with PyTorch only (F4 as ``float4_e2m1fn_x2``, the last dimension halved, as
``safetensors`` does).

By URL: every function takes an ``s3://``, ``gs://``, ``http(s)://`` or WebHDFS URL where it takes a
path (a file, an index, or a prefix holding ``model.safetensors.index.json`` or
``model.safetensors``): each header is read with one small ranged request, then the tensors'
ranges go to the destination (a GPU through the pinned bounce buffers) as ranged requests over
the workers, of at least 16 MiB each (``task_size`` where it is larger: a server's cost is per
request)::

    state = load_checkpoint("s3://models/llama/", device="cuda:0")

Saving: ``save_file(tensors, filename, metadata=None)`` and ``save(tensors, metadata=None)``
(safetensors' names; the file is byte-identical to ``safetensors.torch.save_file``'s for the
same tensors), ``save_checkpoint(state_dict, directory, max_shard_size="5GB")`` (the Hugging
Face sharded layout) and ``async_save(...)`` (returns once the tensors are copied, writes in
the background). Tensors are written from their own memory, GPU or host, by the engine; files
appear whole or not at all (docs/checkpoints.md).

Run ``python -m gpufile.safetensors PATH [--device N] [--json]`` to load a checkpoint and print
tensors, bytes, seconds, GB/s, tensors/s and the path report (``gpufile.observe()``).
"""

from __future__ import annotations

import math
import operator
import os
import re
from typing import Any, Callable, Iterable, Mapping, Union

from . import _native, _save, defaults
from ._future import IOFuture
from .cufile import CuFile
from .remote_file import RemoteFile

SafetensorError = _native.SafetensorError

__all__ = [
    "SafeTensorsSaveFuture",
    "SafetensorError",
    "async_save",
    "load_checkpoint",
    "load_file",
    "safe_open",
    "save",
    "save_checkpoint",
    "save_file",
]

#: What :func:`async_save` returns.
SafeTensorsSaveFuture = _save.SaveFuture

DeviceLike = Union[str, int, Any]
Filter = Union[Callable[[str], bool], Iterable[str], None]
DeviceMap = Union[Mapping[str, DeviceLike], Callable[[str], DeviceLike], None]
#: A path as Python's ``open`` takes one.
PathArg = Union[str, bytes, os.PathLike[str], os.PathLike[bytes]]

_FRAMEWORKS = {"pt": "pt", "torch": "pt", "pytorch": "pt", "numpy": "numpy", "np": "numpy",
               "cupy": "cupy"}

_NUMPY_NAMES = {
    "F64": "float64", "F32": "float32", "F16": "float16", "I64": "int64", "U64": "uint64",
    "I32": "int32", "U32": "uint32", "I16": "int16", "U16": "uint16", "I8": "int8",
    "U8": "uint8", "BOOL": "bool", "C64": "complex64",
}
# Types NumPy lacks, from ml_dtypes (as safetensors.numpy takes bfloat16 from it).
_ML_DTYPES_NAMES = {
    "BF16": "bfloat16", "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2",
    "F8_E8M0": "float8_e8m0fnu", "F8_E4M3FNUZ": "float8_e4m3fnuz",
    "F8_E5M2FNUZ": "float8_e5m2fnuz",
}
_TORCH_NAMES = {
    "F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64",
    "U64": "uint64", "I32": "int32", "U32": "uint32", "I16": "int16", "U16": "uint16",
    "I8": "int8", "U8": "uint8", "BOOL": "bool", "C64": "complex64",
    "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2", "F8_E8M0": "float8_e8m0fnu",
    "F8_E4M3FNUZ": "float8_e4m3fnuz", "F8_E5M2FNUZ": "float8_e5m2fnuz",
    "F4": "float4_e2m1fn_x2",
}
_BITS = {"F4": 4, "F6_E2M3": 6, "F6_E3M2": 6}


def _framework(framework: str) -> str:
    if not isinstance(framework, str) or framework.lower() not in _FRAMEWORKS:
        raise ValueError(f"framework must be one of {sorted(set(_FRAMEWORKS))}, got {framework!r}")
    return _FRAMEWORKS[framework.lower()]


def _device(device: DeviceLike) -> int | None:
    """The CUDA device number of ``device``, or None for the host."""
    if device is None:
        return None
    if isinstance(device, bool):
        raise TypeError("device must be 'cpu', 'cuda', 'cuda:N', N or a torch.device, not bool")
    if isinstance(device, int):
        if device < 0:
            raise ValueError(f"device must not be negative, got {device}")
        return device
    if not isinstance(device, str):
        if type(device).__name__ == "device" and hasattr(device, "type"):  # torch.device
            if device.type == "cpu":
                return None
            if device.type == "cuda":
                return device.index or 0
        raise TypeError(f"device must be 'cpu', 'cuda', 'cuda:N', N or a torch.device, "
                        f"not {device!r}")
    text = device.strip().lower()
    if text == "cpu":
        return None
    if text == "cuda":
        return 0
    if text.startswith("cuda:") and text[5:].isdigit():
        return int(text[5:])
    raise ValueError(f"device must be 'cpu', 'cuda', 'cuda:N' or N, got {device!r}")


def _device_name(dev: int | None) -> str:
    return "cpu" if dev is None else f"cuda:{dev}"


class _Tensor:
    """A tensor's row of the checkpoint table."""

    __slots__ = ("name", "file", "dtype", "shape", "offset", "nbytes", "index")

    def __init__(self, row: tuple, index: int) -> None:
        self.name, self.file, self.dtype, shape, self.offset, self.nbytes = row
        self.shape = tuple(shape)
        self.index = index


_URL = re.compile(r"^(s3|gs|https?)://", re.IGNORECASE)


def _is_url(path: Any) -> bool:
    """Whether ``path`` is an object's URL (``s3://``, ``gs://``, ``http(s)://``, WebHDFS)."""
    return isinstance(path, str) and _URL.match(path) is not None


# A checkpoint's shards on a server are read in ranges of at least this many bytes (the
# `task_size` setting where it is larger): each range is a request, and a server's cost is per
# request (S3's time to first byte, moto's cost of a GET, which grows with the object). boto3
# and the S3 tools move 8-16 MiB parts; over moto, 16 MiB ranges made 0.98x a plain
# 16-connection client where the 4 MiB of `task_size`'s default made 0.3x
# (docs/performance.md, "Object stores both ways"). `RemoteFile` itself keeps KvikIO's
# `task_size` ranges.
_REMOTE_RANGE_MIN = 16 << 20


class _SharedRemote:
    """A checkpoint's remote file, lent to a load: ``close()`` leaves it open for the next;
    reads go in ranges of at least ``_REMOTE_RANGE_MIN``."""

    def __init__(self, f: RemoteFile) -> None:
        self._f = f

    def pread(self, buf: Any, size: int | None = None, file_offset: int = 0) -> Any:
        task = max(int(defaults.get("task_size")), _REMOTE_RANGE_MIN)
        return IOFuture(self._f._handle.pread(buf, size, file_offset, task))

    def read(self, buf: Any, size: int | None = None, file_offset: int = 0) -> int:
        return self.pread(buf, size, file_offset).get()

    def close(self) -> None:
        pass


class _Checkpoint:
    """Validated headers of one or more files (the Rust core's table) and their open files."""

    def __init__(self, path: PathArg) -> None:
        self._remote: list[RemoteFile] | None = None
        if isinstance(path, str) and _is_url(path):
            self.path = _native.redact_url(path)
            self.native, handles = _native.SafetensorsCheckpoint.open_url(path)
            self._remote = [RemoteFile(h) for h in handles]
            self.files = [str(f) for f in self._remote]
        else:
            self.path = os.fsdecode(path)
            self.native = _native.SafetensorsCheckpoint.open(self.path)
            self.files = [os.fspath(p) for p in self.native.files()]
        self.tensors = [_Tensor(row, i) for i, row in enumerate(self.native.tensors())]
        self.by_name = {t.name: t for t in self.tensors}

    def open_file(self, i: int) -> Any:
        """File ``i`` opened for its data; ``SafetensorError`` where the file at its path is no
        longer the one whose header was read (renamed over since, say). A remote file is the
        one whose header was read, opened once."""
        if self._remote is not None:
            return _SharedRemote(self._remote[i])
        f = CuFile(self.files[i], "r")
        try:
            st = os.fstat(f.fileno())
            self.native.check_file(i, st.st_dev, st.st_ino)
        except BaseException:
            f.close()
            raise
        return f

    def get(self, name: str) -> _Tensor:
        try:
            return self.by_name[name]
        except KeyError:
            raise KeyError(f"{self.path}: no tensor named {name!r}") from None


class _Framework:
    """Allocation and views for one framework: flat byte buffers on a device, typed views."""

    def __init__(self, framework: str) -> None:
        self.name = _framework(framework)
        if self.name == "pt":
            try:
                import torch
            except ImportError as e:
                raise ImportError("framework 'pt' needs PyTorch; install it or pass "
                                  "framework='numpy' or 'cupy'") from e
            self.mod = torch
        elif self.name == "cupy":
            try:
                import cupy
            except ImportError as e:
                raise ImportError("framework 'cupy' needs CuPy; install it or pass "
                                  "framework='numpy' or 'pt'") from e
            self.mod = cupy
        else:
            import numpy
            self.mod = numpy

    def check_device(self, dev: int | None) -> None:
        if self.name == "numpy" and dev is not None:
            raise ValueError(f"framework 'numpy' holds host memory only; got device "
                             f"{_device_name(dev)!r} (use framework='cupy' or 'pt')")
        if self.name == "cupy" and dev is None:
            raise ValueError("framework 'cupy' holds GPU memory only; got device 'cpu' "
                             "(use framework='numpy' or 'pt')")

    def empty(self, nbytes: int, dev: int | None) -> Any:
        """A flat uint8 buffer of ``nbytes`` on ``dev``."""
        m = self.mod
        if self.name == "pt":
            return m.empty(nbytes, dtype=m.uint8, device=_device_name(dev))
        if self.name == "cupy":
            with m.cuda.Device(dev):
                return m.empty(nbytes, dtype=m.uint8)
        return m.empty(nbytes, dtype=m.uint8)

    def io_target(self, buf: Any) -> Any:
        """What ``CuFile.pread`` reads into: host torch tensors via NumPy (no buffer protocol)."""
        if self.name == "pt" and buf.device.type == "cpu":
            return buf.numpy()
        return buf

    def dtype(self, t: _Tensor, path: str) -> Any:
        if self.name == "pt":
            name = _TORCH_NAMES.get(t.dtype)
            dt = getattr(self.mod, name, None) if name else None
            if dt is None:
                raise TypeError(f"{path}: tensor {t.name!r} is {t.dtype}, which this PyTorch "
                                f"({self.mod.__version__}) has no type for")
            return dt
        if t.dtype in _NUMPY_NAMES:
            return self.mod.dtype(_NUMPY_NAMES[t.dtype])
        if t.dtype in _ML_DTYPES_NAMES and self.name == "numpy":
            try:
                import ml_dtypes
            except ImportError:
                raise TypeError(f"{path}: tensor {t.name!r} is {t.dtype}, which NumPy has no "
                                f"type for; install ml_dtypes (pip install ml_dtypes) or use "
                                f"framework='pt'") from None
            return self.mod.dtype(getattr(ml_dtypes, _ML_DTYPES_NAMES[t.dtype]))
        raise TypeError(f"{path}: tensor {t.name!r} is {t.dtype}, which {self.name} has no "
                        f"type for; use framework='pt'")

    def view(self, buf: Any, dest: int, t: _Tensor, dtype: Any) -> Any:
        """The tensor ``t`` as a typed view of ``buf[dest:dest + t.nbytes]``."""
        raw = buf[dest:dest + t.nbytes]
        shape = list(t.shape)
        if self.name == "pt":
            if t.dtype == "F4":
                # Two F4 values per byte: safetensors' storage shape halves the last dimension.
                if not shape or shape[-1] % 2:
                    raise TypeError(f"tensor {t.name!r}: F4 needs an even last dimension in "
                                    f"PyTorch, got shape {list(t.shape)}")
                shape[-1] //= 2
            return raw.view(dtype).view(shape)
        return raw.view(dtype).reshape(shape)


def _wait_all(futures: list) -> BaseException | None:
    """Waits for every future (a failed read must not leave others writing into memory about
    to be freed); returns the first error."""
    first: BaseException | None = None
    for fut in futures:
        try:
            fut.get()
        except BaseException as e:  # noqa: BLE001 - returned to the caller, who raises it
            if first is None:
                first = e
    return first


def _select(ck: _Checkpoint, filter: Filter) -> list[_Tensor]:
    if filter is None:
        return list(ck.tensors)
    if callable(filter):
        return [t for t in ck.tensors if filter(t.name)]
    if isinstance(filter, (str, bytes)):
        raise TypeError("filter must be a callable or a list of tensor names, not a string")
    # The rule of `gpufile load --filter`: a name, or a prefix followed by `*`.
    names = list(filter)
    wanted: set[str] = set()
    missing = []
    for pattern in names:
        if isinstance(pattern, str) and pattern.endswith("*"):
            matched = {t.name for t in ck.tensors if t.name.startswith(pattern[:-1])}
            if not matched:
                missing.append(f"{pattern[:-1]!r}* (no tensor name starts with {pattern[:-1]!r})")
            wanted |= matched
        elif pattern in ck.by_name:
            wanted.add(pattern)
        else:
            missing.append(repr(pattern))
    if missing:
        raise KeyError(f"{ck.path}: no tensor named {', '.join(missing)}")
    return [t for t in ck.tensors if t.name in wanted]


def _placement(device: DeviceLike, device_map: DeviceMap) -> Callable[[str], int | None]:
    """Tensor name → device: ``device_map`` as accelerate reads it (module-name keys, longest
    match wins, ``""`` for everything) or a callable; unmatched names go to ``device``."""
    default = _device(device)
    if device_map is None:
        return lambda name: default
    if callable(device_map):
        return lambda name: _device(device_map(name))
    if not isinstance(device_map, Mapping):
        raise TypeError(f"device_map must be a mapping or a callable, not "
                        f"{type(device_map).__name__}")
    prefixes = sorted(((k, _device(v)) for k, v in device_map.items()),
                      key=lambda kv: len(kv[0]), reverse=True)

    def place(name: str) -> int | None:
        for key, dev in prefixes:
            if key == "" or name == key or name.startswith(key + "."):
                return dev
        return default
    return place


def _load(path: PathArg, device: DeviceLike, framework: str, filter: Filter,
          device_map: DeviceMap, own_memory: bool) -> dict[str, Any]:
    fw = _Framework(framework)
    ck = _Checkpoint(path)
    selected = _select(ck, filter)
    place = _placement(device, device_map)
    groups: dict[int | None, list[_Tensor]] = {}
    for t in selected:
        dev = place(t.name)
        fw.check_device(dev)
        groups.setdefault(dev, []).append(t)
    dtypes = {t.name: fw.dtype(t, ck.files[t.file]) for t in selected}

    handles = [ck.open_file(i) for i in range(len(ck.files))]
    futures: list = []
    views: dict[str, Any] = {}
    try:
        # Allocate every device's memory first, then start every read of every device and
        # file, then wait once.
        for dev, tensors in groups.items():
            if own_memory:
                for t in tensors:
                    buf = fw.empty(t.nbytes, dev)
                    if t.nbytes:
                        futures.append(handles[t.file].pread(fw.io_target(buf), t.nbytes,
                                                             t.offset))
                    views[t.name] = fw.view(buf, 0, t, dtypes[t.name])
                continue
            total, ranges, dests = ck.native.plan([t.index for t in tensors])
            buf = fw.empty(total, dev)
            target = fw.io_target(buf)
            for file, offset, length, dest in ranges:
                futures.append(handles[file].pread(target[dest:dest + length], length, offset))
            for t, dest in zip(tensors, dests):
                views[t.name] = fw.view(buf, dest, t, dtypes[t.name])
    finally:
        error = _wait_all(futures)
        for h in handles:
            h.close()
    if error is not None:
        raise error
    return {t.name: views[t.name] for t in selected}


def load_checkpoint(path: PathArg, device: DeviceLike = "cpu", *,
                    framework: str = "pt", filter: Filter = None, device_map: DeviceMap = None,
                    own_memory: bool = False) -> dict[str, Any]:
    """Loads a checkpoint: one ``.safetensors`` file, a Hugging Face sharded checkpoint's
    ``model.safetensors.index.json``, or a directory (its index if it has one, else every
    ``*.safetensors`` file in it), as one plan over all its files.

    Parameters
    ----------
    path
        A file, an index file or a directory. With an index, the tensors of its ``weight_map``.
        Or the URL of a file, an index, or a prefix holding ``model.safetensors.index.json``
        (else ``model.safetensors``): ``s3://``, ``gs://``, ``http(s)://``, WebHDFS (the
        shards of an index are its siblings).
    device
        Where tensors go unless ``device_map`` says otherwise: ``"cpu"``, ``"cuda:N"``, ``N``.
    framework
        ``"pt"`` (PyTorch tensors), ``"numpy"`` (host only) or ``"cupy"`` (GPU only).
    filter
        Which tensors to load: a callable ``name -> bool`` or a list of patterns, each a tensor
        name or a prefix followed by ``*`` (``"model.layers.0.*"``: every tensor whose name
        starts with ``model.layers.0.``), as ``gpufile load --filter``. Only their bytes are
        read.
    device_map
        Placement over several devices: ``{"model.layers.0": 0, "lm_head": "cuda:1", "": 0}``
        (keys are tensor names or module prefixes, longest match wins, ``""`` matches all), or
        a callable ``name -> device``.
    own_memory
        ``False`` (default): a device's tensors are views into one allocation. ``True``: every
        tensor owns its memory.

    Returns
    -------
    dict
        Tensor name → tensor, in file order then offset order.

    Raises
    ------
    SafetensorError
        A file that breaks the format (the message names the file and the tensor).
    FileNotFoundError, OSError
        A file that cannot be read.
    KeyError
        A name in ``filter`` that the checkpoint does not hold, or a ``prefix*`` that no tensor
        name starts with.
    TypeError, ValueError
        A dtype the framework has no type for; a bad device or framework.
    """
    return _load(path, device, framework, filter, device_map, own_memory)


def load_file(filename: PathArg, device: DeviceLike = "cpu", *,
              framework: str = "pt", filter: Filter = None, device_map: DeviceMap = None,
              own_memory: bool = False) -> dict[str, Any]:
    """Loads one ``.safetensors`` file (``safetensors.torch.load_file``'s name and arguments;
    ``framework="numpy"`` for ``safetensors.numpy.load_file``).

    Parameters, returns and errors as :func:`load_checkpoint`; ``filename`` must be a file
    (a directory is ``IsADirectoryError``: use :func:`load_checkpoint`).
    """
    if _is_url(filename):
        return _load(filename, device, framework, filter, device_map, own_memory)
    name = os.fspath(filename)
    if os.path.isdir(name):
        raise IsADirectoryError(21, "is a directory (use load_checkpoint)", name)
    return _load(name, device, framework, filter, device_map, own_memory)


def save_file(tensors: Mapping[str, Any], filename: PathArg,
              metadata: Mapping[str, str] | None = None, *, durable: bool = True) -> None:
    """Saves ``tensors`` to ``filename`` in the safetensors format (``safetensors.torch.save_file``'s
    name and arguments; ``safetensors.numpy.save_file``'s for NumPy arrays).

    The file is byte-identical to what ``safetensors`` writes for the same tensors and metadata
    (the same order, offsets and padding; metadata keys sorted, where ``safetensors`` writes
    them in a different order in each process). The header is built by gpufile's core; each
    tensor's bytes are written by the engine straight from its memory, GPU or host (no
    ``.cpu()`` copy), all tensors as one stream of requests.

    Crash-safe: written under a hidden temporary name in the same directory, then (with
    ``durable``) ``fsync``-ed, renamed over ``filename`` and the directory ``fsync``-ed. Until
    the rename, whatever ``filename`` held is untouched; a process killed at any moment leaves
    either the old file or the complete new one. ``durable=False`` skips both syncs: faster
    (the bytes stay in the page cache), still whole after a crash of the process, but a crash
    of the machine may lose the new file's data.

    Parameters
    ----------
    tensors
        Name → tensor: PyTorch tensors (CPU or CUDA), NumPy or CuPy arrays.
    filename
        The file to write.
    metadata
        Text-only ``__metadata__`` (str → str).
    durable
        Sync file and directory before returning (default).

    Raises
    ------
    RuntimeError
        Tensors that share memory (safetensors' message: save one of them, or use
        ``safetensors.torch.save_model``).
    ValueError
        A non-contiguous PyTorch tensor (safetensors' message; NumPy and CuPy arrays are written
        in C order, as ``ascontiguousarray`` gives them), a sparse or meta tensor, not a dict.
    TypeError
        A dtype safetensors has no type for; metadata that is not str → str.
    OSError
        The file could not be written (``ENOSPC``, ``EIO``, ...): the error names ``filename``;
        nothing was published and the temporary file is removed.
    """
    _save.save_file(tensors, filename, metadata, durable=durable)


def save(tensors: Mapping[str, Any], metadata: Mapping[str, str] | None = None) -> bytes:
    """The bytes of a safetensors file of ``tensors`` (``safetensors.torch.save``): the same
    bytes :func:`save_file` writes. Checks and errors as :func:`save_file`."""
    return _save.save(tensors, metadata)


def save_checkpoint(state_dict: Mapping[str, Any], directory: PathArg,
                    max_shard_size: int | str = "5GB", *,
                    metadata: Mapping[str, str] | None = None,
                    durable: bool = True) -> dict[str, Any]:
    """Saves a state dict as a Hugging Face checkpoint in ``directory`` (created if needed):
    ``model.safetensors`` when it fits in one shard, else ``model-0000k-of-0000n.safetensors``
    and ``model.safetensors.index.json`` (``{"metadata": {"total_size": ...}, "weight_map":
    {...}}``), split as ``huggingface_hub.split_torch_state_dict_into_shards`` splits it and
    named as ``transformers``' ``save_pretrained`` names the files (each shard's metadata
    ``{"format": "pt"}``), so ``from_pretrained`` and :func:`load_checkpoint` load it.

    Crash-safe (see :func:`save_file`): every shard is written and synced under a temporary
    name first, the previous checkpoint in ``directory`` untouched meanwhile; then an index
    naming the new files replaces the old one in one rename (the commit), the shards take
    their final names and files of the previous checkpoint that the new one does not have
    (its ``model.safetensors`` or index, shards of another count) are removed. A process
    killed at any moment leaves a directory whose index (or single file) names complete files
    of one checkpoint, the old or the new. Other files in ``directory`` are left alone.

    Parameters
    ----------
    state_dict
        Name → tensor, as :func:`save_file` takes them; shards follow its order.
    directory
        Where the checkpoint goes.
    max_shard_size
        Bytes per shard, an int or ``"5GB"``, ``"500MB"`` (decimal units, as huggingface_hub).
        A tensor larger than the limit gets a shard of its own.
    metadata
        Text metadata: the file's ``__metadata__`` for a single file (with ``format``), else
        merged into the index's ``metadata``.
    durable
        ``fsync`` files and the directory (default).

    Returns
    -------
    dict
        The index (``metadata``, ``weight_map``), also for a single file (no index file is
        written then).
    """
    return _save.save_checkpoint(state_dict, directory, max_shard_size, metadata=metadata,
                                 durable=durable)


def async_save(tensors: Mapping[str, Any], path: PathArg,
               metadata: Mapping[str, str] | None = None, *, sharded: bool = False,
               max_shard_size: int | str = "5GB", durable: bool = True) -> SafeTensorsSaveFuture:
    """Starts a save and returns once the tensors are safe from later changes: PyTorch tensors
    copied into pinned host memory (GPU tensors by the copy engine), NumPy and CuPy arrays
    copied to host arrays. The file (``sharded=False``: :func:`save_file`) or checkpoint
    (``sharded=True``: :func:`save_checkpoint` into the directory ``path``) is then written in
    the background; the future's ``result()`` (or ``await``) waits and raises its error.

    The pinned memory is one buffer that later async saves reuse (pinning is slow), at most
    ``async_save_pinned_limit`` bytes (a setting; 32 GiB by default): a save that needs more
    is a ``ValueError`` before anything is copied. A save started while the previous one still
    writes from that buffer waits for it first.
    """
    limit = int(defaults.get("async_save_pinned_limit"))
    return _save.async_save(tensors, path, metadata, sharded, max_shard_size, durable, limit)


class _Slice:
    """``safe_open(...).get_slice(name)``: shape and dtype without reading, and ``[...]`` to
    read part of the tensor."""

    def __init__(self, handle: "safe_open", t: _Tensor) -> None:
        self._h = handle
        self._t = t

    def get_shape(self) -> list[int]:
        """The full tensor's shape."""
        return list(self._t.shape)

    def get_dtype(self) -> str:
        """The safetensors dtype name ("BF16")."""
        return self._t.dtype

    def __getitem__(self, key: Any) -> Any:
        """Indexes like NumPy (ints, slices with steps, ``...``). Only the rows of the first
        dimension that the index touches are read; the result owns its memory."""
        t = self._t
        key = key if isinstance(key, tuple) else (key,)
        rows, key = _row_range(t, key)
        return self._h._read(t, rows, key)


def _row_range(t: _Tensor, key: tuple) -> tuple[tuple[int, int] | None, tuple]:
    """The first-dimension rows ``[lo, hi)`` that ``key`` touches, and ``key`` re-based on
    them; None: read everything (scalars, sub-byte types, negative steps, fancy indexing)."""
    if not t.shape or t.dtype in _BITS or not key:
        return None, key
    k0, n = key[0], t.shape[0]
    if isinstance(k0, slice):
        start, stop, step = k0.indices(n)
        if step < 0:
            return None, key
        count = len(range(start, stop, step))
        if count == 0:
            return (0, 0), (slice(0, 0),) + key[1:]
        hi = start + (count - 1) * step + 1
        return (start, hi), (slice(0, hi - start, step),) + key[1:]
    try:
        i = operator.index(k0)
    except TypeError:
        return None, key
    if not -n <= i < n:
        raise IndexError(f"index {i} is out of bounds for dimension 0 of tensor {t.name!r} "
                         f"with size {n}")
    i %= n
    return (i, i + 1), (0,) + key[1:]


class safe_open:  # noqa: N801 - safetensors' name
    """A checkpoint opened for reading tensors one by one (``safetensors.safe_open``).

    Works on one file, an index or a directory (``metadata()`` is the first file's).

    Parameters
    ----------
    filename
        The file (or index, or directory).
    framework
        ``"pt"``, ``"numpy"`` or ``"cupy"``.
    device
        ``"cpu"``, ``"cuda:N"`` or ``N``.

    Raises
    ------
    SafetensorError, OSError, ValueError, ImportError
        As :func:`load_checkpoint`; the headers are read and validated here.
    """

    def __init__(self, filename: PathArg, framework: str = "pt",
                 device: DeviceLike = "cpu") -> None:
        self._fw = _Framework(framework)
        self._dev = _device(device)
        self._fw.check_device(self._dev)
        self._ck = _Checkpoint(filename)
        self._handles: list[CuFile | None] = [None] * len(self._ck.files)

    def __enter__(self) -> "safe_open":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Closes the files (a closed handle reopens them on the next read)."""
        for i, h in enumerate(self._handles):
            if h is not None:
                h.close()
                self._handles[i] = None

    def keys(self) -> list[str]:
        """Tensor names, sorted (as ``safetensors`` does)."""
        return sorted(self._ck.by_name)

    def offset_keys(self) -> list[str]:
        """Tensor names in file order, then offset order."""
        return [t.name for t in self._ck.tensors]

    def metadata(self) -> dict[str, str] | None:
        """The file's ``__metadata__`` (the first file's for a checkpoint of several)."""
        return self._ck.native.metadata(0) if self._ck.files else None

    def get_tensor(self, name: str) -> Any:
        """The tensor ``name``, read now into memory of its own.

        Raises
        ------
        KeyError
            No tensor of that name.
        """
        return self._read(self._ck.get(name), None, None)

    def get_slice(self, name: str) -> _Slice:
        """A lazily read view of tensor ``name``: ``get_shape()``, ``get_dtype()``, ``[...]``."""
        return _Slice(self, self._ck.get(name))

    def _file(self, i: int) -> CuFile:
        h = self._handles[i]
        if h is None:
            h = self._handles[i] = self._ck.open_file(i)
        return h

    def _read(self, t: _Tensor, rows: tuple[int, int] | None, key: tuple | None) -> Any:
        fw = self._fw
        dtype = fw.dtype(t, self._ck.files[t.file])
        if rows is None:
            part, offset, nbytes = t, t.offset, t.nbytes
        else:
            row_bytes = t.nbytes // t.shape[0] if t.shape[0] else 0
            lo, hi = rows
            offset, nbytes = t.offset + lo * row_bytes, (hi - lo) * row_bytes
            part = _Tensor((t.name, t.file, t.dtype, (hi - lo,) + t.shape[1:], offset, nbytes),
                           t.index)
        buf = fw.empty(nbytes, self._dev)
        if nbytes:
            self._file(t.file).read(fw.io_target(buf), nbytes, offset)
        out = fw.view(buf, 0, part, dtype)
        if key is None:
            return out
        # A copy of its own, C-ordered (a 0-d array for an index of every dimension), that does
        # not keep the rows read for it alive.
        out = out[key]
        if fw.name == "pt":
            return out.clone(memory_format=fw.mod.contiguous_format)
        return fw.mod.array(out, order="C")


def _main(argv: list[str] | None = None) -> int:
    import argparse
    import json
    import sys
    import time

    from .observe import observe

    p = argparse.ArgumentParser(prog="python -m gpufile.safetensors",
                                description="Load a safetensors checkpoint with gpufile and "
                                            "report the speed and the data path.")
    p.add_argument("path", help="a .safetensors file, an index.json or a directory")
    p.add_argument("--device", default=None,
                   help="GPU number or 'cuda:N' (default: 0 if CuPy or PyTorch sees a GPU, "
                        "else cpu)")
    p.add_argument("--framework", default=None, choices=sorted(set(_FRAMEWORKS)),
                   help="default: pt if PyTorch is installed, else cupy for a GPU, numpy "
                        "for cpu")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args(argv)

    device = args.device
    if device is not None and device.isdigit():
        device = int(device)
    framework = args.framework
    if framework is None:
        try:
            import torch  # noqa: F401
            framework = "pt"
        except ImportError:
            framework = "numpy" if _device(device or "cpu") is None else "cupy"
    if device is None:
        device = "cpu"
        if framework in ("pt", "torch", "pytorch"):
            import torch
            device = "cuda:0" if torch.cuda.is_available() else "cpu"
        elif framework == "cupy":
            device = 0
    try:
        t0 = time.perf_counter()
        with observe() as obs:
            tensors = load_checkpoint(args.path, device, framework=framework)
            if _device(device) is not None:
                _synchronize(framework, _device(device))
        seconds = time.perf_counter() - t0
    except (SafetensorError, OSError, KeyError, TypeError, ValueError, ImportError) as e:
        print(f"gpufile: error: {e}", file=sys.stderr)
        return 1
    nbytes = sum(_nbytes(v) for v in tensors.values())
    result = {
        "path": args.path, "device": _device_name(_device(device)), "framework": framework,
        "tensors": len(tensors), "bytes": nbytes, "seconds": seconds,
        "gb_per_s": nbytes / seconds / 1e9 if seconds else math.inf,
        "tensors_per_s": len(tensors) / seconds if seconds else math.inf,
        "report": obs.report.as_dict() if obs.report else None,
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{result['tensors']} tensors, {nbytes} bytes to {result['device']} "
              f"({framework}) in {seconds:.3f} s: {result['gb_per_s']:.2f} GB/s, "
              f"{result['tensors_per_s']:.0f} tensors/s")
        print(obs.report)
    return 0


def _nbytes(v: Any) -> int:
    n = getattr(v, "nbytes", None)
    if n is None:  # torch
        n = v.numel() * v.element_size()
    return int(n)


def _synchronize(framework: str, dev: int) -> None:
    if _framework(framework) == "pt":
        import torch
        torch.cuda.synchronize(dev)
    else:
        import cupy
        with cupy.cuda.Device(dev):
            cupy.cuda.runtime.deviceSynchronize()


if __name__ == "__main__":
    raise SystemExit(_main())
