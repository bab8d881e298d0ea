"""``safetensors``' low-level functions (``TensorSpec``, ``serialize``, ``serialize_file``,
``deserialize``) and loads from bytes (``torch.load``, ``numpy.load``): a file held in memory is
validated by gpufile's core (``_native.safetensors_parse``: the rules every file read obeys), and
only sliced here by the offsets the core gives."""

from __future__ import annotations

import ctypes
import os
from typing import Any, Mapping, Sequence

from .. import _native
from .._saving import local
from .._saving.rows import TORCH_CODES, check_metadata
from ._checkpoint import PathArg, Tensor
from ._frameworks import Framework

SafetensorError = _native.SafetensorError


#: The dtype names ``TensorSpec`` takes, in the order ``safetensors``' message lists them.
_SPEC_DTYPES = ("bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
                "float16", "float32", "float64", "bfloat16", "float8_e4m3fn", "float8_e4m3fnuz",
                "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu", "float4_e2m1fn_x2",
                "complex64")


class TensorSpec:
    """One tensor for :func:`serialize` and :func:`serialize_file` (``safetensors.TensorSpec``):
    its dtype by the framework's name (``"float32"``, ``"bfloat16"``, ``"float8_e4m3fn"``), its
    shape, and the address and length of its contiguous bytes in host memory.

    ``dtype`` reads back as the format's code (``"F32"``); for ``float4_e2m1fn_x2`` (two values a
    byte) the shape is the storage shape and reads back with the last dimension doubled, the
    element count the header records. The memory at ``data_ptr`` must stay valid while a
    ``serialize`` call that takes this spec runs (as in ``safetensors``).

    Raises
    ------
    SafetensorError
        A dtype safetensors has no type for.
    """

    __slots__ = ("_dtype", "_shape", "_data_ptr", "_data_len")

    def __init__(self, *, dtype: str, shape: Sequence[int], data_ptr: int,
                 data_len: int) -> None:
        code = TORCH_CODES.get(dtype) if isinstance(dtype, str) else None
        if code is None:
            raise SafetensorError(f'Unknown dtype "{dtype}". Supported dtypes: '
                                  f"{', '.join(_SPEC_DTYPES)}")
        dims = [int(d) for d in shape]
        if code == "F4" and dims:
            dims[-1] *= 2
        self._dtype, self._shape = code, dims
        self._data_ptr, self._data_len = int(data_ptr), int(data_len)

    @property
    def dtype(self) -> str:
        """The format's dtype code (``"F32"``)."""
        return self._dtype

    @property
    def shape(self) -> list[int]:
        """The shape the header records."""
        return list(self._shape)

    @property
    def data_ptr(self) -> int:
        """The address of the tensor's bytes."""
        return self._data_ptr

    @property
    def data_len(self) -> int:
        """Their length."""
        return self._data_len

    def __repr__(self) -> str:
        return (f"TensorSpec(dtype={self._dtype!r}, shape={self._shape}, "
                f"data_ptr={self._data_ptr}, data_len={self._data_len})")


def _memory(spec: TensorSpec) -> Any:
    """A NumPy byte view of a spec's memory (no copy)."""
    import numpy
    if spec.data_len == 0:
        return numpy.empty(0, dtype=numpy.uint8)
    raw = (ctypes.c_ubyte * spec.data_len).from_address(spec.data_ptr)
    return numpy.ctypeslib.as_array(raw)


def _rows(tensor_dict: Mapping[str, TensorSpec]) -> list[tuple]:
    if not isinstance(tensor_dict, Mapping):
        raise TypeError(f"tensor_dict must be a dict of str to TensorSpec, got "
                        f"{type(tensor_dict).__name__}")
    rows = []
    for name, spec in tensor_dict.items():
        if not isinstance(spec, TensorSpec):
            raise TypeError(f"tensor {name!r} must be a TensorSpec, got {type(spec).__name__} "
                            f"(safetensors takes TensorSpec since 0.8)")
        rows.append((name, spec.dtype, spec.shape, _memory(spec)))
    return rows


def serialize(tensor_dict: Mapping[str, TensorSpec],
              metadata: Mapping[str, str] | None = None) -> bytes:
    """The bytes of a safetensors file of ``tensor_dict`` (``safetensors.serialize``): the
    header built by gpufile's core, byte-identical to ``safetensors``'."""
    return local.save_rows(_rows(tensor_dict), check_metadata(metadata))


def serialize_file(tensor_dict: Mapping[str, TensorSpec], filename: PathArg,
                   metadata: Mapping[str, str] | None = None) -> None:
    """Writes a safetensors file of ``tensor_dict`` (``safetensors.serialize_file``), published
    whole as :func:`gpufile.safetensors.save_file` publishes it."""
    local.write_file(_rows(tensor_dict), os.fspath(filename), check_metadata(metadata),
                     durable=True)


def _parse(data: bytes) -> tuple[dict[str, str] | None, list[tuple]]:
    if not isinstance(data, bytes):
        raise TypeError(f"argument 'bytes': {type(data).__name__!r} object is not an instance "
                        f"of 'bytes'")
    try:
        return _native.safetensors_parse(data)
    except SafetensorError as e:
        raise SafetensorError(f"Error while deserializing: {e}") from None


def deserialize(data: bytes) -> list[tuple[str, dict[str, Any]]]:
    """The tensors of a safetensors file held in ``data`` (``safetensors.deserialize``), in
    offset order: ``[(name, {"dtype": "F32", "shape": [2, 3], "data": bytearray}), ...]``.

    Raises
    ------
    SafetensorError
        ``data`` is not a valid file ("Error while deserializing: ..." and the core's reason).
    TypeError
        ``data`` is not ``bytes``.
    """
    _, rows = _parse(data)
    view = memoryview(data)
    return [(name, {"dtype": dtype, "shape": list(shape),
                    "data": bytearray(view[off:off + n])})
            for name, _, dtype, shape, off, n in rows]


def load_bytes(data: bytes, framework: str) -> dict[str, Any]:
    """The tensors of the file held in ``data`` as host tensors of ``framework``, each in memory
    of its own (zero-size ones too), in offset order."""
    import numpy
    _, rows = _parse(data)
    fw = Framework(framework)
    view = memoryview(data)
    out: dict[str, Any] = {}
    for i, row in enumerate(rows):
        t = Tensor((row[0], 0, row[2], row[3], 0, row[5]), i)
        dtype = fw.dtype(t, "bytes")
        fw.check_shape(t, dtype, "bytes")
        off, n = row[4], row[5]
        raw = numpy.frombuffer(bytearray(view[off:off + n]), dtype=numpy.uint8)
        if fw.name == "pt":
            raw = fw.mod.from_numpy(raw)
        out[t.name] = fw.view(raw, 0, t, dtype)
    return out
