"""A checkpoint's validated headers (the Rust core's table) and its files, local or remote."""

from __future__ import annotations

import os
from typing import Any, Union

from .. import _native
from .._future import IOFuture
from ..cufile import CuFile
from ..remote_file import RemoteFile

#: A path as Python's ``open`` takes one.
PathArg = Union[str, bytes, os.PathLike[str], os.PathLike[bytes]]


def wait_all(futures: list) -> BaseException | None:
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


class Tensor:
    """A tensor's row of the checkpoint table."""

    __slots__ = ("name", "file", "dtype", "shape", "offset", "nbytes", "index")

    def __init__(self, row: tuple, index: int) -> None:
        self.name, self.file, self.dtype, shape, self.offset, self.nbytes = row
        self.shape = tuple(shape)
        self.index = index


class SharedRemote:
    """A checkpoint's remote file, lent to a load: ``close()`` leaves it open for the next.
    The core opened it to be read in ranges of at least 16 MiB (the ``task_size`` setting where
    it is larger; ``gpufile_remote::CHECKPOINT_RANGE_MIN``): the plan reads that from the file."""

    def __init__(self, f: RemoteFile) -> None:
        self._f = f

    def pread(self, buf: Any, size: int | None = None, file_offset: int = 0) -> Any:
        return IOFuture(self._f._handle.pread(buf, size, file_offset))

    def read(self, buf: Any, size: int | None = None, file_offset: int = 0) -> int:
        return self.pread(buf, size, file_offset).get()

    def close(self) -> None:
        pass


class Checkpoint:
    """Validated headers of one or more files (the Rust core's table) and their open files."""

    def __init__(self, path: PathArg) -> None:
        self._remote: list[RemoteFile] | None = None
        if _native.is_url(path):
            self.path = _native.redact_url(path)
            self.native, handles = _native.SafetensorsCheckpoint.open_url(path)
            self._remote = [RemoteFile(h) for h in handles]
            self.files = [str(f) for f in self._remote]
        else:
            self.path = os.fsdecode(path)
            self.native = _native.SafetensorsCheckpoint.open(self.path)
            self.files = [os.fspath(p) for p in self.native.files()]
        self.tensors = [Tensor(row, i) for i, row in enumerate(self.native.tensors())]
        self.by_name = {t.name: t for t in self.tensors}

    def open_file(self, i: int) -> Any:
        """File ``i`` opened for its data; ``SafetensorError`` where the file at its path is no
        longer the one whose header was read (renamed over since, say). A remote file is the
        one whose header was read, opened once."""
        if self._remote is not None:
            return SharedRemote(self._remote[i])
        f = CuFile(self.files[i], "r")
        try:
            st = os.fstat(f.fileno())
            self.native.check_file(i, st.st_dev, st.st_ino)
        except BaseException:
            f.close()
            raise
        return f

    def get(self, name: str) -> Tensor:
        try:
            return self.by_name[name]
        except KeyError:
            raise TensorNotFound(f"File does not contain tensor {name}") from None


class TensorNotFound(_native.SafetensorError, KeyError):
    """A tensor name the checkpoint does not hold: ``safetensors``' error (``SafetensorError``,
    its message) that is also the ``KeyError`` a name lookup raises."""

    def __str__(self) -> str:
        return Exception.__str__(self)  # KeyError's would quote the message
