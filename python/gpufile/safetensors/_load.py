"""Loading: the selected tensors of a checkpoint placed on their devices, every range of every
file read as one stream of requests (``load_file``, ``load_checkpoint``)."""

from __future__ import annotations

import os
from typing import Any, Callable, Iterable, Mapping, Union

from .. import _native
from . import _jax
from ._checkpoint import Checkpoint, PathArg, Tensor
from ._frameworks import DeviceLike, Framework, device_number

Filter = Union[Callable[[str], bool], Iterable[str], None]
DeviceMap = Union[Mapping[str, DeviceLike], Callable[[str], DeviceLike], None]
Shard = Union[Mapping[str, Union[str, int]], None]
#: The core's sharding: rules of (pattern, split as text), rank, world size.
Sharding = tuple[list[tuple[str, str]], int, int]


def _selected(ck: Checkpoint, filter: Filter) -> list[Tensor]:
    """The tensors ``filter`` selects, by the core's rule (that of ``gpufile load --filter``)."""
    if filter is None:
        return list(ck.tensors)
    if callable(filter):
        return [ck.tensors[i] for i in ck.native.select(keep=filter)]
    if isinstance(filter, (str, bytes)):
        raise TypeError("filter must be a callable or a list of tensor names, not a string")
    return [ck.tensors[i] for i in ck.native.select(list(filter))]


def _placement(device: DeviceLike, device_map: DeviceMap) -> Callable[[str], int | None]:
    """Tensor name → device: ``device_map`` as accelerate reads it (module-name keys, longest
    match wins, ``""`` for everything) or a callable; unmatched names go to ``device``."""
    default = device_number(device)
    if device_map is None:
        return lambda name: default
    if callable(device_map):
        return lambda name: device_number(device_map(name))
    if not isinstance(device_map, Mapping):
        raise TypeError(f"device_map must be a mapping or a callable, not "
                        f"{type(device_map).__name__}")
    prefixes = sorted(((k, device_number(v)) for k, v in device_map.items()),
                      key=lambda kv: len(kv[0]), reverse=True)

    def place(name: str) -> int | None:
        for key, dev in prefixes:
            if key == "" or name == key or name.startswith(key + "."):
                return dev
        return default
    return place


class _Vanished(Exception):
    """A file of a checkpoint directory went or was replaced between its header's read and its
    open (the cause): a save committed into the directory meanwhile."""


def _open_files(ck: Checkpoint, path: PathArg) -> list:
    """A handle on each file of ``ck``; :class:`_Vanished` where ``path`` is a directory one
    of whose files went or was replaced since its header was read."""
    handles: list = []
    try:
        for i in range(len(ck.files)):
            handles.append(ck.open_file(i))
        return handles
    except (FileNotFoundError, _native.SafetensorError) as e:
        for h in handles:
            h.close()
        if os.path.isdir(path):
            raise _Vanished() from e
        raise


def sharding(shard: Shard, rank: int | None, world_size: int | None) -> Sharding | None:
    """``shard=``, ``rank=``, ``world_size=`` as the core takes them: (pattern, split word or
    dimension as text) rules, the rank and the world size (torch.distributed's where it is
    initialized and they are not given)."""
    if shard is None:
        if rank is not None or world_size is not None:
            raise ValueError("rank= and world_size= say which part of each tensor shard= "
                             "reads; pass shard= too")
        return None
    if not isinstance(shard, Mapping):
        raise TypeError(f"shard must be a mapping of tensor name patterns to 'colwise', "
                        f"'rowwise', 'replicate' or a dimension, not {type(shard).__name__}")
    rules = []
    for pattern, split in shard.items():
        if isinstance(split, bool) or not isinstance(split, (str, int)) or \
                not isinstance(pattern, str):
            raise TypeError(f"shard[{pattern!r}] = {split!r}: patterns are str, splits a "
                            f"tp_plan word (str) or a dimension (int)")
        rules.append((pattern, str(split)))
    if rank is None or world_size is None:
        dist = _initialized_distributed()
        if dist is None:
            raise ValueError("shard= needs rank= and world_size= (or an initialized "
                             "torch.distributed process group)")
        rank = dist.get_rank() if rank is None else rank
        world_size = dist.get_world_size() if world_size is None else world_size
    for what, v in (("rank", rank), ("world_size", world_size)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"{what} must be an int, not {type(v).__name__}")
        if v < 0:
            raise ValueError(f"{what} must not be negative, got {v}")
    return rules, rank, world_size


def _initialized_distributed() -> Any:
    """``torch.distributed`` where a process group is initialized, else None."""
    import sys
    if "torch" not in sys.modules:
        return None
    dist = getattr(sys.modules["torch"], "distributed", None)
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return dist


def shaped(t: Tensor, shape: list[int], itemsize: int) -> Tensor:
    """``t`` as read in part: its part's shape and bytes."""
    if tuple(shape) == t.shape:
        return t
    nbytes = itemsize
    for d in shape:
        nbytes *= d
    return Tensor((t.name, t.file, t.dtype, shape, t.offset, nbytes), t.index)


def load_tensors(path: PathArg, device: DeviceLike, framework: str, filter: Filter,
                 device_map: DeviceMap, own_memory: bool,
                 shard: Sharding | None = None) -> dict[str, Any]:
    """The tensors of the checkpoint at ``path``. A directory is read again where a save
    committing into it meanwhile removed or replaced one of its files: it holds one whole
    checkpoint at every instant (docs/checkpoints.md, "The commit's order")."""
    for attempt in range(16):
        try:
            return _load_tensors(path, device, framework, filter, device_map, own_memory,
                                 shard=shard)
        except _Vanished as e:
            if attempt == 15 and e.__cause__ is not None:
                raise e.__cause__ from None
    raise AssertionError("a checkpoint directory that changed 16 times while it was read")


def tensors_of(ck: Checkpoint, device: DeviceLike, framework: str) -> dict[str, Any]:
    """Every tensor of the opened checkpoint ``ck``, each in memory of its own
    (``safe_open.get_tensors``)."""
    try:
        return _load_tensors(ck.path, device, framework, None, None, True, ck)
    except _Vanished as e:
        raise e.__cause__ from None  # type: ignore[misc]


def _load_tensors(path: PathArg, device: DeviceLike, framework: str, filter: Filter,
                  device_map: DeviceMap, own_memory: bool,
                  ck: Checkpoint | None = None, shard: Sharding | None = None) -> dict[str, Any]:
    fw = Framework(framework)
    ck = Checkpoint(path) if ck is None else ck
    selected = _selected(ck, filter)
    if shard is not None:
        if fw.name == "flax":
            raise ValueError("shard= reads into buffers gpufile allocates; framework 'flax' "
                             "has JAX allocate each array: load with framework='numpy' or "
                             "'pt' and place the shards with jax.device_put")
        # The core's rule, before anything is allocated or read: a bad sharding reads nothing.
        found = ck.native.shard_parts([t.index for t in selected], *shard)
        return _load_parts(ck, path, fw, selected, dict(zip((t.index for t in selected), found)),
                           device, device_map, own_memory)
    place = _placement(device, device_map)
    groups: dict[int | None, list[Tensor]] = {}
    for t in selected:
        dev = place(t.name)
        fw.check_device(dev)
        groups.setdefault(dev, []).append(t)
    dtypes = {t.name: fw.dtype(t, ck.files[t.file]) for t in selected}
    for t in selected:
        fw.check_shape(t, dtypes[t.name], ck.files[t.file])
    views: dict[str, Any] = {}

    if fw.name == "flax":
        handles = _open_files(ck, path)
        # JAX arrays own their memory (JAX has no views): each tensor is read into its own.
        try:
            arrays = _jax.read_groups(fw.mod, {
                dev: [(t, handles[t.file], dtypes[t.name]) for t in tensors]
                for dev, tensors in groups.items()})
        finally:
            for h in handles:
                h.close()
        for dev, tensors in groups.items():
            views.update((t.name, a) for t, a in zip(tensors, arrays[dev]))
        return {t.name: views[t.name] for t in selected}
    # Every device's memory allocated first; then the core reads every range of every file
    # into it as one batch (one native call, the same requests as `gpufile load`).
    targets: list[tuple[list[int], Any]] = []
    for dev, tensors in groups.items():
        if own_memory:
            for t in tensors:
                buf = fw.empty(t.nbytes, dev)
                targets.append(([t.index], fw.io_target(buf) if t.nbytes else None))
                views[t.name] = fw.view(buf, 0, t, dtypes[t.name])
            continue
        indices = [t.index for t in tensors]
        total, _, dests = ck.native.plan(indices)
        buf = fw.empty(total, dev)
        targets.append((indices, fw.io_target(buf) if total else None))
        for t, dest in zip(tensors, dests):
            views[t.name] = fw.view(buf, dest, t, dtypes[t.name])
    try:
        ck.native.load(targets)
    except (FileNotFoundError, _native.SafetensorError) as e:
        # The core opens each file by its name and checks it is the one whose header was read.
        if os.path.isdir(path):
            raise _Vanished() from e
        raise
    return {t.name: views[t.name] for t in selected}


def _load_parts(ck: Checkpoint, path: PathArg, fw: Framework, selected: list[Tensor],
                parts: dict[int, Any], device: DeviceLike, device_map: DeviceMap,
                own_memory: bool) -> dict[str, Any]:
    """The tensors ``selected``, each read whole or as its part in ``parts`` (the core's
    ``shard_parts``): every device's memory (each tensor's, with ``own_memory``) allocated as
    the core plans the parts, then one batch of every range (a part in several ranges is one
    request of its own)."""
    place = _placement(device, device_map)
    groups: dict[int | None, list[Tensor]] = {}
    for t in selected:
        dev = place(t.name)
        fw.check_device(dev)
        groups.setdefault(dev, []).append(t)
    units = [(dev, [t]) for dev, ts in groups.items() for t in ts] if own_memory \
        else list(groups.items())
    dtypes = {t.name: fw.dtype(t, ck.files[t.file]) for t in selected}
    targets: list[tuple[list[int], Any]] = []
    target_parts: list[list[Any]] = []
    plans = []
    for dev, tensors in units:
        indices = [t.index for t in tensors]
        wanted = [parts[i] for i in indices]
        total, dests, shapes = ck.native.plan_parts(indices, wanted)
        read = [shaped(t, sh, dtypes[t.name].itemsize) for t, sh in zip(tensors, shapes)]
        for t in read:
            fw.check_shape(t, dtypes[t.name], ck.files[t.file])
        plans.append((dev, indices, wanted, total, dests, read))
    views: dict[str, Any] = {}
    for dev, indices, wanted, total, dests, read in plans:
        buf = fw.empty(total, dev)
        targets.append((indices, fw.io_target(buf) if total else None))
        target_parts.append(wanted)
        for t, dest in zip(read, dests):
            views[t.name] = fw.view(buf, dest, t, dtypes[t.name])
    try:
        ck.native.load(targets, target_parts)
    except (FileNotFoundError, _native.SafetensorError) as e:
        if os.path.isdir(path):
            raise _Vanished() from e
        raise
    return {t.name: views[t.name] for t in selected}


def load_checkpoint(path: PathArg, device: DeviceLike = "cpu", *,
                    framework: str = "pt", filter: Filter = None, device_map: DeviceMap = None,
                    own_memory: bool = False, shard: Shard = None, rank: int | None = None,
                    world_size: int | None = None) -> dict[str, Any]:
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
        Where tensors go unless ``device_map`` says otherwise: ``"cpu"``, ``"cuda:N"``, ``N``,
        a ``torch.device`` or a ``jax.Device``.
    framework
        ``"pt"`` (PyTorch tensors), ``"numpy"`` (host only), ``"cupy"`` (GPU only) or
        ``"flax"`` (alias ``"jax"``: ``jax.Array``s, each read into memory JAX allocates).
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
        tensor owns its memory (JAX arrays always do).
    shard
        Tensor-parallel loading: ``{pattern: split}``, each split ``"colwise"`` (a Linear's
        weight ``[out, in]`` along dimension 0, its bias along 0), ``"rowwise"`` (the weight
        along dimension 1, the bias whole), ``"replicate"`` or a dimension (an int, negative
        from the end), as transformers' ``tp_plan`` says (``"colwise_rep"``,
        ``"local_colwise"``, ... alike). A pattern (``*`` any run of characters) matches a
        tensor's name or its module's, in whole or after a dot; the longest match wins. This
        rank reads only its part (``torch.chunk``'s split: parts of ``ceil(n / world_size)``,
        the last ones shorter or empty) and gets tensors of the part's shape; a tensor no
        pattern matches is read whole. Not with ``framework="flax"``.
    rank, world_size
        This rank and the number of ranks (default: torch.distributed's, where it is
        initialized). Only with ``shard``.

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
        A dtype the framework has no type for; a bad device or framework; a bad ``shard``
        (an unknown split word, a dimension the tensor lacks, ``rank`` not below
        ``world_size``: ``ValueError`` naming it, before any byte is read).
    """
    sharded = sharding(shard, rank, world_size)
    return load_tensors(path, device, framework, filter, device_map, own_memory, sharded)


def load_file(filename: PathArg, device: DeviceLike = "cpu", *,
              framework: str = "pt", filter: Filter = None, device_map: DeviceMap = None,
              own_memory: bool = False) -> dict[str, Any]:
    """Loads one ``.safetensors`` file (``safetensors.torch.load_file``'s name and arguments;
    ``framework="numpy"`` for ``safetensors.numpy.load_file``, ``framework="flax"`` for
    ``safetensors.flax.load_file``).

    Parameters, returns and errors as :func:`load_checkpoint`; ``filename`` must be a file
    (a directory is ``IsADirectoryError``: use :func:`load_checkpoint`).
    """
    if _native.is_url(filename):
        return load_tensors(filename, device, framework, filter, device_map, own_memory)
    name = os.fspath(filename)
    if os.path.isdir(name):
        raise IsADirectoryError(21, "is a directory (use load_checkpoint)", name)
    return load_tensors(name, device, framework, filter, device_map, own_memory)
