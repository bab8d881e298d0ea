"""gpufile.dask: dask arrays read and written by gpufile, on the threaded scheduler and on a
dask.distributed cluster of worker processes (spawned, as LocalCluster does by default).

Every read is checked byte for byte against NumPy reading the same file. The GPU variants (CuPy
blocks, dask_cuda.LocalCUDACluster with one worker per GPU) skip with the reason elsewhere.
"""

import logging
import os
import pickle
import zlib

import numpy as np
import pytest

da = pytest.importorskip("dask.array", reason="dask[array] is not installed")
distributed = pytest.importorskip("distributed", reason="distributed is not installed")

import dask  # noqa: E402

import gpufile  # noqa: E402
import gpufile.dask as gd  # noqa: E402
from conftest import gpu_reason  # noqa: E402


@pytest.fixture(scope="module")
def cluster_client():
    """Two worker processes, one thread each; shared by the module's tests (it takes seconds)."""
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=":0", silence_logs=logging.CRITICAL) as c:
        with distributed.Client(c, set_as_default=False) as client:
            yield client


@pytest.fixture(params=["threads", "processes"])
def scheduler(request):
    """``scheduler=`` for compute: dask's threads, or the cluster's worker processes."""
    if request.param == "threads":
        return "threads"
    return request.getfixturevalue("cluster_client")


def write_array(path, ref: np.ndarray, offset: int = 0, tail: int = 0) -> None:
    """``ref``'s C-order bytes at ``offset`` of ``path``, after header bytes, before ``tail``."""
    with open(path, "wb") as f:
        f.write(bytes(range(256)) * (offset // 256) + bytes(offset % 256))
        f.write(ref.tobytes())
        f.write(b"\xee" * tail)


def reference(shape, dtype, seed=0) -> np.ndarray:
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    raw = np.random.default_rng(seed).integers(0, 256, nbytes, dtype=np.uint8)
    return raw.view(dtype).reshape(shape)


def same_bytes(got, ref):
    got = np.asarray(got)
    assert got.shape == ref.shape and got.dtype == ref.dtype
    assert got.tobytes() == ref.tobytes()


# shape, dtype, chunks, offset: awkward on purpose (odd sizes, blocks cutting the trailing axes,
# explicit uneven chunks, big-endian and structured dtypes, 0-d and empty arrays).
CASES = [
    ((1000,), "u1", 199, 0),
    ((37, 41, 5), ">f4", (10, 7, 3), 13),
    ((64, 33), "c16", (64, 5), 8),  # column blocks: rows read whole, then cut
    ((4, 300_000), "i1", (4, 100_000), 1),  # column blocks read as 4 runs each
    ((5, 6, 7, 8), "<i2", ((2, 3), (1, 5), (7,), (3, 3, 2)), 1),
    ((9, 11), [("a", "<i2"), ("b", "u1")], (4, 4), 3),
    ((17, 3), "?", "auto", 0),
    ((), "f8", (), 5),
    ((0, 5), "f4", (1, 5), 0),
]


@pytest.mark.parametrize("shape,dtype,chunks,offset", CASES)
def test_read_array_matches_numpy(tmp_path, scheduler, shape, dtype, chunks, offset):
    ref = reference(shape, dtype)
    path = tmp_path / "a.bin"
    write_array(path, ref, offset, tail=7)
    x = gd.read_array(path, shape, dtype, chunks, offset=offset)
    assert x.shape == ref.shape and x.dtype == ref.dtype
    assert type(x._meta) is np.ndarray
    same_bytes(x.compute(scheduler=scheduler), ref)


def test_slices_and_blocks(tmp_path, scheduler):
    ref = reference((50, 40, 3), "<u2", seed=1)
    path = tmp_path / "a.bin"
    write_array(path, ref, 100)
    x = gd.read_array(path, ref.shape, ref.dtype, (16, 9, 2), offset=100)
    for key in [(slice(3, 44, 5), slice(None, None, -3), 1), (7, 8, 2), (Ellipsis, 0),
                (slice(10, 10),), (slice(None), 39)]:
        same_bytes(x[key].compute(scheduler=scheduler), ref[key])
    same_bytes(x.blocks[2, 4, 1].compute(scheduler=scheduler), ref[32:48, 36:40, 2:3])
    assert int((x.astype(np.int64) * 3).sum().compute(scheduler=scheduler)) == \
        int(ref.astype(np.int64).sum() * 3)


def test_read_stack(tmp_path, scheduler):
    refs = [reference((13, 7), ">i4", seed=s) for s in range(5)]
    paths, offsets = [], [0, 4, 9, 0, 4096]
    for i, (r, o) in enumerate(zip(refs, offsets)):
        paths.append(tmp_path / f"s{i}.bin")
        write_array(paths[-1], r, o, tail=i)
    s = gd.read_stack(paths, (13, 7), ">i4", offset=offsets)
    assert s.chunks == ((1,) * 5, (13,), (7,))
    same_bytes(s.compute(scheduler=scheduler), np.stack(refs))
    c = gd.read_stack([str(p) for p in paths[:3]], (13, 7), ">i4", chunks=(5, 3),
                      offset=offsets[:3])
    assert c.chunks == ((1, 1, 1), (5, 5, 3), (3, 3, 1))
    same_bytes(c.compute(scheduler=scheduler), np.stack(refs[:3]))
    same_bytes(s[1:4, 2].compute(scheduler=scheduler), np.stack(refs)[1:4, 2])
    same_bytes(s[4:1].compute(scheduler=scheduler), np.stack(refs)[4:1])


def test_to_file_round_trip(tmp_path, scheduler):
    ref = reference((45, 23, 3), "<i8", seed=2)
    x = da.from_array(ref, chunks=(7, 10, 2))
    out = tmp_path / "out.bin"
    out.write_bytes(b"H" * 10 + b"\x11" * 99_999)  # a header to keep, a longer file to cut
    assert gd.to_file(x, out, offset=10, scheduler=scheduler) is None
    raw = out.read_bytes()
    assert raw[:10] == b"H" * 10 and len(raw) == 10 + ref.nbytes
    assert raw[10:] == ref.tobytes()
    # read -> compute -> write, all on the same scheduler, column blocks included
    y = gd.read_array(out, ref.shape, ref.dtype, (45, 4, 3), offset=10)
    out2 = tmp_path / "new" / "out2.bin"
    out2.parent.mkdir()
    gd.to_file(y * 2 + 1, out2, scheduler=scheduler)
    same_bytes(np.fromfile(out2, dtype="<i8").reshape(ref.shape), ref * 2 + 1)


def test_to_file_compute_false_writes_on_compute(tmp_path, scheduler):
    ref = reference((100, 9), "u1", seed=3)
    out = tmp_path / "lazy.bin"
    lazy = gd.to_file(da.from_array(ref, chunks=(33, 4)), out, offset=3, compute=False)
    assert dask.is_dask_collection(lazy)
    assert out.read_bytes() == bytes(3 + ref.nbytes)  # created and sized, nothing written yet
    dask.compute(lazy, scheduler=scheduler)
    assert out.read_bytes() == bytes(3) + ref.tobytes()


def test_graph_is_small_and_picklable(tmp_path):
    ref = reference((1 << 22,), "u1")
    path = tmp_path / "big.bin"
    write_array(path, ref)
    x = gd.read_array(path, ref.shape, ref.dtype, 1 << 20)
    graph = pickle.dumps(dict(x.__dask_graph__()))
    assert len(graph) < 4096, len(graph)  # paths and offsets, not 4 MiB of data
    assert str(path).encode() in graph
    same_bytes(pickle.loads(pickle.dumps(x)).compute(scheduler="sync"), ref)


def test_name_follows_the_file(tmp_path):
    ref = reference((64,), "u1")
    path = tmp_path / "a.bin"
    write_array(path, ref)
    a = gd.read_array(path, 64, "u1", 16)
    assert gd.read_array(path, 64, "u1", 16).name == a.name  # deterministic
    assert gd.read_array(path, 64, "u1", 8).name != a.name
    assert gd.read_array(path, 63, "u1", 16, offset=1).name != a.name
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert gd.read_array(path, 64, "u1", 16).name != a.name  # rewritten: not dask's cached result


def test_relative_paths_are_made_absolute(tmp_path, monkeypatch):
    ref = reference((10,), "u1")
    write_array(tmp_path / "rel.bin", ref)
    monkeypatch.chdir(tmp_path)
    x = gd.read_array("rel.bin", 10, "u1", 3)
    monkeypatch.chdir("/")
    same_bytes(x.compute(scheduler="threads"), ref)


def test_read_plan():
    # exact: the box spans the trailing axes, or its runs are long
    assert gd._read_plan((10, 20), 4, [2, 0], [5, 20]) == ([2, 0], [5, 20])
    assert gd._read_plan((4, 300_000), 1, [0, 0], [4, 100_000]) == ([0, 0], [4, 100_000])
    # column block: whole rows are cheaper than one request per row
    assert gd._read_plan((4000, 1000), 4, [0, 7], [4000, 8]) == ([0, 0], [4000, 1000])
    # never widened past the scratch bound (here 100 MB of rows for an 8 KB block)
    assert gd._read_plan((1000, 25_000_000), 1, [0, 5], [1000, 13]) == ([0, 5], [1000, 13])
    offsets, run = gd._runs((3, 4, 5), 2, [1, 1, 0], [3, 3, 5])
    # rows 1..2 of each plane are one run (the last axis is whole); one run per plane 1..2
    assert run == 2 * 2 * 5 and offsets.tolist() == [2 * (20 + 5), 2 * (40 + 5)]
    offsets, run = gd._runs((3, 4, 5), 2, [1, 1, 1], [3, 3, 4])
    assert run == 2 * 3 and offsets.tolist() == [2 * (20 + 5 + 1), 2 * (20 + 10 + 1),
                                                 2 * (40 + 5 + 1), 2 * (40 + 10 + 1)]


# --- errors -----------------------------------------------------------------------------------


def test_array_larger_than_the_file(tmp_path):
    path = tmp_path / "small.bin"
    path.write_bytes(bytes(1000))
    with pytest.raises(ValueError, match=r"small\.bin.*needs.*1004 bytes.*file has 1000 bytes"):
        gd.read_array(path, (251,), "f4", 10)
    with pytest.raises(ValueError, match=r"offset 1.*needs bytes 1\.\.1001.*file has 1000 bytes"):
        gd.read_array(path, (10, 25), "f4", 10, offset=1)
    gd.read_array(path, (10, 25), "f4", 10)  # exactly fits


@pytest.mark.parametrize("kwargs,exc,match", [
    (dict(offset=-1), ValueError, "offset must be >= 0"),
    (dict(offset=1.5), TypeError, "offset must be an int"),
    (dict(shape=(-1, 4)), ValueError, "negative"),
    (dict(shape=(2.0, 4)), TypeError, "shape"),
    (dict(chunks=((3, 3), (4,))), ValueError, "Chunks do not add up to shape"),
    (dict(chunks=None), ValueError, "chunks"),
    (dict(dtype=object), TypeError, "objects"),
    (dict(like=[1, 2]), TypeError, "NumPy or CuPy"),
])
def test_bad_arguments(tmp_path, kwargs, exc, match):
    path = tmp_path / "a.bin"
    path.write_bytes(bytes(100))
    args = dict(shape=(5, 4), dtype="u2", chunks=(2, 2)) | kwargs
    with pytest.raises(exc, match=match):
        gd.read_array(path, **args)


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(FileNotFoundError):
        gd.read_array(tmp_path / "nope.bin", 4, "u1", 2)
    with pytest.raises(IsADirectoryError):
        gd.read_array(tmp_path, 4, "u1", 2)


def test_read_stack_errors(tmp_path):
    good, short = tmp_path / "good.bin", tmp_path / "short.bin"
    good.write_bytes(bytes(40))
    short.write_bytes(bytes(39))
    with pytest.raises(ValueError, match="at least one path"):
        gd.read_stack([], (10,), "f4")
    with pytest.raises(ValueError, match=r"short\.bin.*file has 39 bytes"):
        gd.read_stack([good, short], (10,), "f4")
    with pytest.raises(ValueError, match="2 entries for 3 paths"):
        gd.read_stack([good, good, good], (10,), "f4", offset=[0, 0])
    with pytest.raises(TypeError, match="sequence of paths"):
        gd.read_stack(str(good), (10,), "f4")


def test_to_file_errors(tmp_path):
    with pytest.raises(TypeError, match="dask array"):
        gd.to_file(np.zeros(3), tmp_path / "x.bin")
    with pytest.raises(ValueError, match="offset must be >= 0"):
        gd.to_file(da.zeros(3, chunks=1), tmp_path / "x.bin", offset=-4)
    unknown = da.from_array(np.arange(10), chunks=5)
    unknown = unknown[unknown > 3]
    with pytest.raises(ValueError, match="unknown chunk sizes"):
        gd.to_file(unknown, tmp_path / "x.bin")
    with pytest.raises(TypeError, match="objects"):
        gd.to_file(da.from_array(np.array([None, 1], dtype=object), chunks=1), tmp_path / "x.bin")
    with pytest.raises(FileNotFoundError):
        gd.to_file(da.zeros(3, chunks=1), tmp_path / "no" / "x.bin")
    assert not (tmp_path / "x.bin").exists()  # no bad call created the file


def test_file_shrunk_after_the_graph_was_built(tmp_path, scheduler):
    ref = reference((1000,), "u1")
    path = tmp_path / "a.bin"
    write_array(path, ref)
    x = gd.read_array(path, 1000, "u1", 250)
    os.truncate(path, 600)
    with pytest.raises(gpufile.EndOfFileError, match="past the end"):
        x.compute(scheduler=scheduler)


# --- GPU: CuPy blocks, one dask_cuda worker per GPU ---------------------------------------------


GPU_REASON = gpu_reason()
needs_gpu = pytest.mark.skipif(GPU_REASON is not None, reason=GPU_REASON or "")


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("shape,dtype,chunks,offset",  # CuPy has no structured or big-endian dtypes
                         [c for c in CASES if not isinstance(c[1], list) and c[1][0] != ">"])
def test_cupy_blocks(tmp_path, shape, dtype, chunks, offset):
    import cupy as cp

    ref = reference(shape, dtype)
    path = tmp_path / "a.bin"
    write_array(path, ref, offset)
    x = gd.read_array(path, shape, dtype, chunks, offset=offset, like=cp.empty(()))
    assert type(x._meta) is cp.ndarray
    got = x.compute(scheduler="threads")
    assert isinstance(got, cp.ndarray)
    same_bytes(cp.asnumpy(got), ref)
    out = tmp_path / "out.bin"
    gd.to_file(x, out, offset=offset, scheduler="threads")
    assert out.read_bytes()[offset:] == ref.tobytes()


@pytest.fixture(scope="module")
def cuda_client():
    if GPU_REASON:
        pytest.skip(GPU_REASON)
    dask_cuda = pytest.importorskip("dask_cuda", reason="dask_cuda is not installed")
    with dask_cuda.LocalCUDACluster(dashboard_address=None, silence_logs=logging.CRITICAL) as c:
        with distributed.Client(c, set_as_default=False) as client:
            yield client


@pytest.mark.gpu
def test_local_cuda_cluster(tmp_path, cuda_client):
    import cupy as cp

    def physical_gpu(block):  # nested: cloudpickle ships it by value to the workers
        """The GPU holding ``block``, numbered as before dask_cuda's CUDA_VISIBLE_DEVICES."""
        ids = [v for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v]
        name = ids[block.device.id] if ids else str(block.device.id)
        return np.full((1, 1), zlib.crc32(name.encode()), dtype=np.int64)

    workers = len(cuda_client.scheduler_info()["workers"])
    ref = reference((8 * workers, 1 << 16), "<i4", seed=4)  # ints: x * 2 is exact
    path = tmp_path / "a.bin"
    write_array(path, ref, 4096)
    x = gd.read_array(path, ref.shape, ref.dtype, (1, 1 << 16), offset=4096, like=cp.empty(()))
    # each worker reads onto its own GPU: the blocks report the GPU they are on
    devices = x.map_blocks(physical_gpu, chunks=(1, 1), dtype=np.int64,
                           meta=np.empty((0, 0), np.int64)).compute(scheduler=cuda_client)
    assert len(set(devices.ravel().tolist())) == workers
    got = x.compute(scheduler=cuda_client)
    same_bytes(cp.asnumpy(got), ref)
    out = tmp_path / "out.bin"
    gd.to_file(x * 2, out, scheduler=cuda_client)
    same_bytes(np.fromfile(out, dtype="<i4").reshape(ref.shape), ref * 2)


def test_from_zarr_through_gdsstore(tmp_path, scheduler):
    """Zarr arrays in dask through gpufile's store: ``da.from_zarr`` and ``da.to_zarr`` with a
    GDSStore, on the threaded scheduler and on worker processes (the store is pickled to them)."""
    zarr = pytest.importorskip("zarr", reason="zarr is not installed")
    from gpufile.zarr import GDSStore

    ref = reference((300, 70), "<u4", seed=7)
    src = zarr.create_array(store=GDSStore(tmp_path / "src"), shape=ref.shape, chunks=(64, 32),
                            dtype=ref.dtype)
    src[...] = ref
    x = da.from_zarr(zarr.open_array(store=GDSStore(tmp_path / "src", read_only=True)))
    assert x.chunks == ((64, 64, 64, 64, 44), (32, 32, 6))
    same_bytes(x.compute(scheduler=scheduler), ref)
    # Written back block by block through the store, then read with zarr's own LocalStore.
    out = zarr.create_array(store=GDSStore(tmp_path / "out"), shape=ref.shape, chunks=(64, 32),
                            dtype=ref.dtype)
    da.store(x + np.uint32(1), out, scheduler=scheduler, lock=False)
    back = zarr.open_array(store=zarr.storage.LocalStore(tmp_path / "out"), mode="r")
    same_bytes(back[...], ref + np.uint32(1))
