"""A checkpoint that cannot be loaded fails by its kind in the core's one error table
(``FormatError::kind``), in Python, C (libgpufile's ``gpufile_load_checkpoint``, called with
ctypes) and the CLI alike: a missing file is the same error as a missing file opened any other
way, a FIFO says ESPIPE, a file that breaks the format is Python's ``SafetensorError`` and C's
``GPUFILE_BAD_ARGUMENT`` with the same message."""

import ctypes
import errno
import json
import os
import struct
import subprocess
import sys

import pytest

import gpufile
from gpufile.safetensors import SafetensorError, load_file
from test_capi_save import _library

GPUFILE_NOT_FOUND, GPUFILE_BAD_ARGUMENT = 1, 5


def load_c(path):
    """gpufile_load_checkpoint of no tensor (every header is still read and checked): the
    status, the last error's message and errno."""
    lib = _library()
    lib.gpufile_load_checkpoint.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t]
    status = lib.gpufile_load_checkpoint(os.fsencode(path), None, 0)
    message = ctypes.create_string_buffer(1024)
    lib.gpufile_last_error_message(message, len(message))
    return status, message.value.decode(), lib.gpufile_last_error_errno()


def load_cli(path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KVIKIO_", "GPUFILE_"))}
    r = subprocess.run([sys.executable, "-m", "gpufile", "load", str(path), "--json"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode != 0
    return json.loads(r.stdout or r.stderr)["error"]


def test_a_missing_checkpoint_is_the_error_of_any_missing_file(tmp_path):
    path = tmp_path / "missing.safetensors"
    with pytest.raises(FileNotFoundError) as opened:
        gpufile.CuFile(path, "r")
    with pytest.raises(FileNotFoundError) as loaded:
        load_file(path)
    # The same class, KvikIO's RuntimeError too, and the path as the exception's filename.
    assert type(loaded.value) is type(opened.value)
    assert isinstance(loaded.value, RuntimeError)
    assert loaded.value.filename == str(path)
    status, _, err = load_c(path)
    assert (status, err) == (GPUFILE_NOT_FOUND, errno.ENOENT)
    assert load_cli(path)["errno"] == errno.ENOENT


def test_a_file_that_breaks_the_format_is_the_same_error_in_python_c_and_the_cli(tmp_path):
    path = tmp_path / "broken.safetensors"
    path.write_bytes(struct.pack("<Q", 1 << 40) + b"{}")
    with pytest.raises(SafetensorError) as python:
        load_file(path)
    status, message, err = load_c(path)
    assert (status, err) == (GPUFILE_BAD_ARGUMENT, errno.EINVAL)
    assert message == str(python.value)
    cli = load_cli(path)
    assert (cli["type"], cli["message"], cli["path"]) == ("safetensors", message, str(path))


def test_a_fifo_is_espipe_in_python_c_and_the_cli(tmp_path):
    path = tmp_path / "fifo.safetensors"
    os.mkfifo(path)
    with pytest.raises(OSError) as python:
        load_file(path)
    assert python.value.errno == errno.ESPIPE
    status, _, err = load_c(path)
    assert (status, err) == (GPUFILE_BAD_ARGUMENT, errno.ESPIPE)
    cli = load_cli(path)
    assert (cli["type"], cli["errno"]) == ("not-a-regular-file", errno.ESPIPE)
