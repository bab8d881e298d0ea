"""One load, one home: the CLI (`gpufile load --json`), Python (`load_checkpoint` under
`gpufile.observe()`) and C (libgpufile's `gpufile_load_checkpoint`, called with ctypes, under
`gpufile_observe_begin`) select the same tensors by the core's rule and make the same tasks for
the same load: the core's `formats::safetensors::load` does it for all three. The library is the
one `cargo test -p gpufile-capi` builds (as tests/test_capi_save.py finds it)."""

import ctypes
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import gpufile
from gpufile import _native
from gpufile.safetensors import load_checkpoint
from test_capi_save import _library
from test_cli_load import GPU_REASON, write_shards

stn = pytest.importorskip("safetensors.numpy")

MiB = 1 << 20
THREADS, TASK = 8, 4 * MiB
# 24 of the 32 tensors. Shard 1 holds the `.a` tensors, shard 2 the `.b` ones (names sorted,
# alternating): runs of 11 (00.a-10.a) and 10 (00.b-09.b) adjacent tensors, and 3 lone ones.
FILTER = ["model.layers.0*", "model.layers.10.a", "model.layers.11.b", "model.layers.12.a",
          "model.layers.13.b"]


class TensorBuffer(ctypes.Structure):
    """gpufile_tensor_buffer."""

    _fields_ = [("name", ctypes.c_char_p), ("data", ctypes.c_void_p), ("size", ctypes.c_size_t)]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """32 tensors of 3 MiB in two shards and an index."""
    d = tmp_path_factory.mktemp("ck")
    rng = np.random.default_rng(11)
    tensors = {f"model.layers.{i:02d}.{p}": rng.integers(0, 255, 3 * MiB, dtype=np.uint8)
               for i in range(16) for p in "ab"}
    write_shards(d, tensors, n=2)
    return d, tensors


def tasks_of(report):
    """(requests, tasks, bytes) of the host path of an observation's report."""
    t = report["gpufile-posix"]
    return t["ops"], t["tasks"], t["bytes"]


def load_cli(path, *args):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KVIKIO_", "GPUFILE_"))}
    env.update(KVIKIO_NTHREADS=str(THREADS), KVIKIO_TASK_SIZE=str(TASK))
    r = subprocess.run([sys.executable, "-m", "gpufile", "load", str(path), "--json", *args],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def load_c(lib, path, rows):
    """gpufile_load_checkpoint of `rows` ((name, address, size)) under an observation: the
    status, the last error's message and the observation's report."""
    lib.gpufile_load_checkpoint.argtypes = [ctypes.c_char_p, ctypes.POINTER(TensorBuffer),
                                            ctypes.c_size_t]
    lib.gpufile_observe_begin.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
    lib.gpufile_observe_end.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t,
                                        ctypes.POINTER(ctypes.c_size_t)]
    lib.gpufile_settings_set_int.argtypes = [ctypes.c_char_p, ctypes.c_int64]
    assert lib.gpufile_settings_set_int(b"num_threads", THREADS) == 0
    assert lib.gpufile_settings_set_int(b"task_size", TASK) == 0
    arr = (TensorBuffer * len(rows))(*[TensorBuffer(n.encode(), a, s) for n, a, s in rows])
    obs = ctypes.c_void_p()
    assert lib.gpufile_observe_begin(ctypes.byref(obs)) == 0
    status = lib.gpufile_load_checkpoint(os.fsencode(path), arr, len(rows))
    text = ctypes.create_string_buffer(1 << 16)
    assert lib.gpufile_observe_end(obs, text, len(text), None) == 0
    message = ctypes.create_string_buffer(1024)
    lib.gpufile_last_error_message(message, len(message))
    return status, message.value.decode(), json.loads(text.value)


def test_cli_python_and_c_make_the_same_tasks_for_the_same_load(checkpoint):
    d, tensors = checkpoint
    want = sorted(n for n in tensors if n.startswith("model.layers.0") or n in FILTER)
    assert len(want) == 24

    cli = load_cli(d, "--host", "--filter", ",".join(FILTER))
    assert cli["tensors"] == 24
    cli_tasks = tasks_of(cli["observed"]["by_path"])

    with gpufile.defaults.set({"num_threads": THREADS, "task_size": TASK}):
        with gpufile.observe() as obs:
            got = load_checkpoint(d, framework="numpy", filter=FILTER)
    assert sorted(got) == want
    for n in want:
        np.testing.assert_array_equal(got[n], tensors[n])
    py_tasks = tasks_of(obs.report)
    assert cli_tasks == py_tasks
    # The runs of 33 and 30 MiB (9 and 8 tasks of 4 MiB) and the lone ones (one task each).
    assert cli_tasks == (5, 9 + 8 + 3, 24 * 3 * MiB)

    # C (where cargo built libgpufile): the caller's buffers, laid out in one arena as the
    # core's plan lays them out.
    lib = _library()
    ck = _native.SafetensorsCheckpoint.open(d)
    names = [row[0] for row in ck.tensors()]
    selection = [names.index(n) for n in want]
    total, _, dests = ck.plan(selection)
    arena = np.zeros(total, np.uint8)
    base = arena.ctypes.data
    rows = [(n, base + at, tensors[n].nbytes) for n, at in zip(want, dests)]
    status, message, report = load_c(lib, d / "model.safetensors.index.json", rows)
    assert status == 0, message
    for n, at in zip(want, dests):
        np.testing.assert_array_equal(arena[at:at + tensors[n].nbytes], tensors[n])
    assert tasks_of(report) == cli_tasks


def test_c_refuses_a_missing_name_or_a_wrong_size_before_reading(checkpoint):
    d, tensors = checkpoint
    lib = _library()
    dst = np.full(3 * MiB, 7, np.uint8)
    rows = [("model.layers.00.a", dst.ctypes.data, dst.nbytes), ("nope", dst.ctypes.data, 4),
            ("nope.2", dst.ctypes.data, 4)]
    status, message, report = load_c(lib, d, rows)
    assert status == 5  # GPUFILE_BAD_ARGUMENT
    assert f"{d / 'model.safetensors.index.json'}: no tensor named \"nope\"; no tensor named " \
        f"\"nope.2\"" in message
    status, message, _ = load_c(lib, d, [("model.layers.00.a", dst.ctypes.data, 4)])
    assert status == 5 and "tensor \"model.layers.00.a\": a buffer of 4 bytes" in message
    assert (dst == 7).all()
    assert "gpufile-posix" not in report or report["gpufile-posix"]["ops"] == 0


@pytest.mark.gpu
@pytest.mark.skipif(GPU_REASON is not None, reason=GPU_REASON or "")
def test_a_load_into_cuda_makes_the_tasks_of_the_same_load_into_host_memory(checkpoint):
    torch = pytest.importorskip("torch")
    d, tensors = checkpoint
    counts = {}
    with gpufile.defaults.set({"num_threads": THREADS, "task_size": TASK}):
        for device in ("cpu", "cuda:0"):
            with gpufile.observe() as obs:
                got = load_checkpoint(d, device, filter=FILTER)
            counts[device] = sum(p["tasks"] for p in obs.report.paths.values())
            for n, t in got.items():
                np.testing.assert_array_equal(t.cpu().numpy(), tensors[n])
    assert counts["cuda:0"] == counts["cpu"] == 9 + 8 + 3, counts


def test_python_selects_by_the_core_rule_naming_every_miss(checkpoint):
    d, _ = checkpoint
    assert load_checkpoint(d, framework="numpy", filter=[]) == {}
    got = load_checkpoint(d, framework="numpy", filter=["model.layers.1*", "model.layers.00.a"])
    assert sorted(got) == ["model.layers.00.a"] + [f"model.layers.{i}.{p}"
                                                    for i in range(10, 16) for p in "ab"]
    with pytest.raises(KeyError, match="no tensor named 'nope'; no tensor name starts with "
                                       "'model.layers.9'"):
        load_checkpoint(d, framework="numpy", filter=["nope", "model.layers.00.a",
                                                      "model.layers.9*"])
