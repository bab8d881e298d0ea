"""Frameworks, devices and dtypes of ``gpufile.safetensors``: the safetensors dtype names each
framework has a type for, device arguments read as CUDA device numbers, and per framework the
flat byte buffers a load reads into and the typed views it returns."""

from __future__ import annotations

from typing import Any, Union

from ._checkpoint import Tensor

DeviceLike = Union[str, int, Any]

FRAMEWORKS = {"pt": "pt", "torch": "pt", "pytorch": "pt", "numpy": "numpy", "np": "numpy",
              "cupy": "cupy", "flax": "flax", "jax": "flax"}

NUMPY_NAMES = {
    "F64": "float64", "F32": "float32", "F16": "float16", "I64": "int64", "U64": "uint64",
    "I32": "int32", "U32": "uint32", "I16": "int16", "U16": "uint16", "I8": "int8",
    "U8": "uint8", "BOOL": "bool", "C64": "complex64",
}
# Types NumPy lacks, from ml_dtypes (as safetensors.numpy takes bfloat16 from it).
ML_DTYPES_NAMES = {
    "BF16": "bfloat16", "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2",
    "F8_E8M0": "float8_e8m0fnu", "F8_E4M3FNUZ": "float8_e4m3fnuz",
    "F8_E5M2FNUZ": "float8_e5m2fnuz",
}
TORCH_NAMES = {
    "F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64",
    "U64": "uint64", "I32": "int32", "U32": "uint32", "I16": "int16", "U16": "uint16",
    "I8": "int8", "U8": "uint8", "BOOL": "bool", "C64": "complex64",
    "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2", "F8_E8M0": "float8_e8m0fnu",
    "F8_E4M3FNUZ": "float8_e4m3fnuz", "F8_E5M2FNUZ": "float8_e5m2fnuz",
    "F4": "float4_e2m1fn_x2",
}
BITS = {"F4": 4, "F6_E2M3": 6, "F6_E3M2": 6}
INT64_MAX = 2**63 - 1
_DEVICE_FORMS = "'cpu', 'cuda', 'cuda:N', N, a torch.device or a jax.Device"


def import_jax() -> Any:
    """The ``jax`` module, with the API loads need; ``ModuleNotFoundError`` naming JAX."""
    try:
        import jax
        import jax.numpy  # noqa: F401 - the dtypes
    except ImportError as e:
        raise ModuleNotFoundError("framework 'flax' needs JAX; install it (pip install jax, or "
                                  "jax[cuda12] for NVIDIA GPUs) or pass framework='numpy'",
                                  name="jax") from e
    try:
        from jax.experimental import buffer_callback  # noqa: F401
    except ImportError as e:
        raise ModuleNotFoundError(f"framework 'flax' reads into buffers JAX allocates "
                                  f"(jax.experimental.buffer_callback), which JAX "
                                  f"{jax.__version__} lacks; upgrade it (pip install -U jax)",
                                  name="jax.experimental.buffer_callback") from e
    return jax


def jax_dtype(jax: Any, t: Tensor, path: str) -> Any:
    """The dtype JAX gets for ``t`` (before JAX's 64-bit rule: ``_jax.read_groups``)."""
    if t.dtype in BITS:
        raise TypeError(f"{path}: tensor {t.name!r} is {t.dtype}, which JAX has no packed type "
                        f"for; use framework='pt'")
    name = NUMPY_NAMES.get(t.dtype) or ML_DTYPES_NAMES.get(t.dtype)
    dt = getattr(jax.numpy, name, None) if name else None
    if dt is None:
        raise TypeError(f"{path}: tensor {t.name!r} is {t.dtype}, which this JAX "
                        f"({jax.__version__}) has no type for; use framework='pt'")
    return jax.numpy.dtype(dt)


def framework_name(framework: str) -> str:
    if not isinstance(framework, str) or framework.lower() not in FRAMEWORKS:
        raise ValueError(f"framework must be one of {sorted(set(FRAMEWORKS))}, got {framework!r}")
    return FRAMEWORKS[framework.lower()]


def device_number(device: DeviceLike) -> int | None:
    """The CUDA device number of ``device``, or None for the host."""
    if device is None:
        return None
    if isinstance(device, bool):
        raise TypeError(f"device must be {_DEVICE_FORMS}, not bool")
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
        platform = getattr(device, "platform", None)
        if type(device).__module__.startswith("jaxlib") and isinstance(platform, str):
            if platform == "cpu":  # jax.Device
                return None
            if platform == "gpu":
                ordinal = getattr(device, "local_hardware_id", None)
                return int(device.id if ordinal is None else ordinal)
            raise ValueError(f"device {device} is a JAX {platform} device: gpufile reads into "
                             "the host and CUDA GPUs")
        raise TypeError(f"device must be {_DEVICE_FORMS}, not {device!r}")
    text = device.strip().lower()
    if text == "cpu":
        return None
    if text == "cuda":
        return 0
    if text.startswith("cuda:") and text[5:].isdigit():
        return int(text[5:])
    raise ValueError(f"device must be 'cpu', 'cuda', 'cuda:N' or N, got {device!r}")


def device_name(dev: int | None) -> str:
    return "cpu" if dev is None else f"cuda:{dev}"


class Framework:
    """Allocation and views for one framework: flat byte buffers on a device, typed views."""

    def __init__(self, framework: str) -> None:
        self.name = framework_name(framework)
        if self.name == "pt":
            try:
                import torch
            except ImportError as e:
                raise ImportError("framework 'pt' needs PyTorch; install it or pass "
                                  "framework='numpy' or 'cupy'") from e
            self.mod = torch
        elif self.name == "flax":
            self.mod = import_jax()
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
                             f"{device_name(dev)!r} (use framework='cupy' or 'pt')")
        if self.name == "cupy" and dev is None:
            raise ValueError("framework 'cupy' holds GPU memory only; got device 'cpu' "
                             "(use framework='numpy' or 'pt')")

    def empty(self, nbytes: int, dev: int | None) -> Any:
        """A flat uint8 buffer of ``nbytes`` on ``dev``."""
        m = self.mod
        if self.name == "pt":
            return m.empty(nbytes, dtype=m.uint8, device=device_name(dev))
        if self.name == "cupy":
            with m.cuda.Device(dev):
                return m.empty(nbytes, dtype=m.uint8)
        return m.empty(nbytes, dtype=m.uint8)

    def io_target(self, buf: Any) -> Any:
        """What ``CuFile.pread`` reads into: host torch tensors via NumPy (no buffer protocol)."""
        if self.name == "pt" and buf.device.type == "cpu":
            return buf.numpy()
        return buf

    def dtype(self, t: Tensor, path: str) -> Any:
        if self.name == "flax":
            return jax_dtype(self.mod, t, path)
        if self.name == "pt":
            name = TORCH_NAMES.get(t.dtype)
            dt = getattr(self.mod, name, None) if name else None
            if dt is None:
                raise TypeError(f"{path}: tensor {t.name!r} is {t.dtype}, which this PyTorch "
                                f"({self.mod.__version__}) has no type for")
            return dt
        if t.dtype in NUMPY_NAMES:
            return self.mod.dtype(NUMPY_NAMES[t.dtype])
        if t.dtype in ML_DTYPES_NAMES and self.name == "numpy":
            try:
                import ml_dtypes
            except ImportError:
                raise TypeError(f"{path}: tensor {t.name!r} is {t.dtype}, which NumPy has no "
                                f"type for; install ml_dtypes (pip install ml_dtypes) or use "
                                f"framework='pt'") from None
            return self.mod.dtype(getattr(ml_dtypes, ML_DTYPES_NAMES[t.dtype]))
        raise TypeError(f"{path}: tensor {t.name!r} is {t.dtype}, which {self.name} has no "
                        f"type for; use framework='pt'")

    def check_shape(self, t: Tensor, dtype: Any, path: str) -> None:
        """Refuses a shape NumPy, CuPy and JAX cannot hold, before any array exists: the
        product of its non-zero dimensions times the item size must fit an ``int64``. It is
        NumPy's rule, so ``ValueError`` as ``safetensors.numpy`` and ``safetensors.flax`` raise
        it; XLA aborts the process on such a shape even where it has no element. PyTorch takes
        any dimension that fits an ``int64`` (a larger one is its ``TypeError``)."""
        if self.name == "pt":
            return
        size = int(dtype.itemsize)
        for d in t.shape:
            size *= d or 1
        if size > INT64_MAX:
            raise ValueError(f"{path}: tensor {t.name!r} of shape {list(t.shape)} and "
                             f"{t.dtype} is too big for framework {self.name!r}: the product "
                             f"of its non-zero dimensions times its item size ({dtype.itemsize}) "
                             f"is larger than 2**63 - 1 (array is too big, as NumPy says)")

    def view(self, buf: Any, dest: int, t: Tensor, dtype: Any) -> Any:
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
