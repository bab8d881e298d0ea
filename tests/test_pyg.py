"""gpufile.pyg.FeatureStore: PyG's FeatureStore on files, read with read_rows (issue 41, item 5)."""

import importlib.util
import json
import os
import pathlib
import pickle
import signal
import subprocess
import sys
import textwrap
import time
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_geometric")

from torch_geometric.distributed import LocalFeatureStore, LocalGraphStore  # noqa: E402
from torch_geometric.nn import GraphSAGE  # noqa: E402

from gpufile.pyg import FeatureStore, neighbor_loader  # noqa: E402
from test_docs_commands import blocks  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _bench():
    """benches/pyg_bench.py as a module: its table, its timings."""
    spec = importlib.util.spec_from_file_location("pyg_bench", ROOT / "benches" / "pyg_bench.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def _files(root):
    """Every file of the store's directory with its bytes: what a bad input must not change."""
    return {p.name: p.read_bytes() for p in sorted(pathlib.Path(root).iterdir())}


def _graph(n, degree, seed=0):
    g = torch.Generator().manual_seed(seed)
    edge_index = torch.randint(0, n, (2, n * degree), generator=g)
    return LocalGraphStore.from_data(edge_id=torch.arange(edge_index.shape[1]),
                                     edge_index=edge_index, num_nodes=n)


def _batches(data, n, steps):
    torch.manual_seed(0)
    loader = neighbor_loader(data, [5, 5], batch_size=64, input_nodes=torch.arange(n),
                             shuffle=True)
    out = []
    for batch in loader:
        out.append(batch)
        if len(out) == steps:
            return out
    return out


def _train(batches, in_channels, classes):
    torch.manual_seed(1)
    model = GraphSAGE(in_channels, hidden_channels=32, num_layers=2, out_channels=classes)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for batch in batches:
        opt.zero_grad()
        out = model(batch.x, batch.edge_index)[: batch.batch_size]
        loss = torch.nn.functional.cross_entropy(out, batch.y[: batch.batch_size])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [p.detach().clone() for p in model.parameters()]


def test_neighbor_loader_batches_equal_pygs_in_memory_store_and_graphsage_trains(tmp_path):
    """NeighborLoader over (gpufile store, PyG's in-memory graph store) gives, batch by batch,
    the nodes, edges, features and labels that PyG's in-memory feature store gives for the
    same seeds; GraphSAGE trained on either takes the same steps."""
    n, dim, classes = 3000, 24, 5
    g = torch.Generator().manual_seed(3)
    x = torch.randn(n, dim, generator=g)
    y = torch.randint(0, classes, (n,), generator=g)
    graph = _graph(n, 8)
    reference = LocalFeatureStore.from_data(node_id=torch.arange(n), x=x, y=y)
    store = FeatureStore(tmp_path / "features")
    store.put_tensor(x, group_name=None, attr_name="x", index=None)
    store.put_tensor(y, group_name=None, attr_name="y", index=None)

    want = _batches((reference, graph), n, 6)
    got = _batches((store, graph), n, 6)
    assert len(want) == len(got) == 6
    for w, b in zip(want, got):
        assert torch.equal(w.n_id, b.n_id)
        assert torch.equal(w.edge_index, b.edge_index)
        assert b.batch_size == w.batch_size == 64
        assert b.x.dtype == torch.float32 and b.y.dtype == torch.int64
        assert torch.equal(b.x, w.x) and torch.equal(b.y, w.y)
        assert torch.equal(b.x, x[b.n_id])  # and what the rows are
        assert b.n_id.numel() > 64  # two hops sampled something

    losses_want, params_want = _train(want, dim, classes)
    losses_got, params_got = _train(got, dim, classes)
    assert all(np.isfinite(losses_got))
    assert losses_got == losses_want
    assert all(torch.equal(a, b) for a, b in zip(params_got, params_want))


def test_get_tensor_indexes_as_torch_does(tmp_path):
    store = FeatureStore(tmp_path)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(50, 3, 4, generator=g).to(torch.bfloat16)
    y = torch.arange(50, dtype=torch.int64) * 7
    store.put_tensor(x, group_name="paper", attr_name="x", index=None)
    store["paper", "y", None] = y
    idx = torch.tensor([4, 0, 49, 4, -1, -50])
    cases = [None, slice(None), slice(3, 20), slice(2, 40, 5), slice(-10, None),
             slice(45, 100), slice(30, 10), 7, -3, np.int64(9), idx, idx.to(torch.int32),
             [1, 2, 3], torch.tensor([[1, 2], [3, 4]]),
             torch.tensor([], dtype=torch.long), torch.arange(50) % 3 == 0]
    for index in cases:
        want = x if index is None else x[torch.as_tensor(index) if isinstance(index, list)
                                          else index]
        got = store.get_tensor(group_name="paper", attr_name="x", index=index)
        assert got.dtype == torch.bfloat16 and got.device.type == "cpu"
        assert got.shape == want.shape and torch.equal(got, want), index
        size = store.get_tensor_size(group_name="paper", attr_name="x", index=index)
        assert tuple(size) == tuple(want.shape), index
    assert torch.equal(store["paper", "y", idx], y[idx])
    assert torch.equal(store["paper"].y[2:5], y[2:5])
    assert tuple(store.get_tensor_size("paper", "y")) == (50,)
    # multi_get across attributes and groups, edge types included.
    e = torch.randn(20, 2, generator=g)
    store.put_tensor(e, group_name=("paper", "cites", "paper"), attr_name="edge_attr", index=None)
    a, b, c = store.multi_get_tensor([
        ("paper", "x", idx), ("paper", "y", slice(1, 3)),
        (("paper", "cites", "paper"), "edge_attr", torch.tensor([19, 0]))])
    assert torch.equal(a, x[idx]) and torch.equal(b, y[1:3]) and torch.equal(c, e[[19, 0]])
    attrs = {(t.group_name, t.attr_name) for t in store.get_all_tensor_attrs()}
    assert attrs == {("paper", "x"), ("paper", "y"), (("paper", "cites", "paper"), "edge_attr")}


def test_a_store_reopened_or_unpickled_reads_what_was_put(tmp_path):
    x = torch.arange(40, dtype=torch.float64).view(10, 4)
    first = FeatureStore(tmp_path)
    read_only = x.numpy().copy()
    read_only.flags.writeable = False
    first.put_tensor(read_only, group_name=None, attr_name="x", index=None)  # NumPy too
    assert torch.equal(first[None, "x", torch.tensor([9, 1])], x[[9, 1]])
    again = FeatureStore(tmp_path)
    assert [(a.group_name, a.attr_name) for a in again.get_all_tensor_attrs()] == [(None, "x")]
    assert torch.equal(again[None, "x", None], x)
    copy = pickle.loads(pickle.dumps(first))
    assert torch.equal(copy[None, "x", 3], x[3])
    # A put through one store is seen by another open on the same directory.
    again.put_tensor(-x, group_name=None, attr_name="x", index=None)
    assert torch.equal(first[None, "x", None], -x)
    rows = [p for p in os.listdir(tmp_path) if p.endswith(".rows")]
    assert len(rows) == 1 and first.rows_path(None, "x") == str(tmp_path / rows[0])
    assert np.array_equal(np.memmap(first.rows_path(None, "x"), np.float64, "r", shape=(10, 4)),
                          -x.numpy())
    assert first.remove_tensor(None, "x", None) is True
    assert os.listdir(tmp_path) == []
    assert first.remove_tensor(None, "x", None) is False
    first.close()


def test_bad_input_is_a_typed_error_and_leaves_the_store_as_it_was(tmp_path):
    store = FeatureStore(tmp_path)
    x = torch.randn(10, 4)
    store.put_tensor(x, group_name=None, attr_name="x", index=None)
    before = _files(tmp_path)
    get = store.get_tensor

    with pytest.raises(KeyError, match=r"no tensor \(None, 'z'\) in the feature store"):
        get(group_name=None, attr_name="z", index=None)
    with pytest.raises(KeyError, match="no tensor"):
        store.multi_get_tensor([(None, "x", None), ("other", "x", None)])
    assert store.get_tensor_size(None, "z") is None
    assert store.remove_tensor(None, "z", None) is False
    with pytest.raises(IndexError,
                       match=r"index 10 is out of range for the 10 rows of \(None, 'x'\)"):
        get(None, "x", torch.tensor([0, 10]))
    with pytest.raises(IndexError, match="index -11 is out of range"):
        get(None, "x", torch.tensor([-11]))
    with pytest.raises(IndexError, match="index 12 is out of range"):
        get(None, "x", 12)
    with pytest.raises(IndexError, match="a boolean index must be one flag per row"):
        get(None, "x", torch.ones(9, dtype=torch.bool))
    with pytest.raises(TypeError, match="index must hold integers .*torch.float32"):
        get(None, "x", torch.tensor([1.0]))
    with pytest.raises(TypeError, match="index must be a torch.Tensor or a NumPy array, not str"):
        get(None, "x", "3")
    with pytest.raises(TypeError, match="group_name must be None, a str or a tuple"):
        get(7, "x", None)
    with pytest.raises(ValueError, match="put_tensor writes a whole tensor"):
        store.put_tensor(x[:2], group_name=None, attr_name="x", index=torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="has no dimension"):
        store.put_tensor(torch.tensor(1.0), group_name=None, attr_name="s", index=None)
    with warnings.catch_warnings():  # torch: "ComplexHalf support is experimental"
        warnings.simplefilter("ignore")
        half = torch.zeros(3, 2, dtype=torch.complex32)
    with pytest.raises(TypeError, match="torch.complex32, which a table does not hold"):
        store.put_tensor(half, group_name=None, attr_name="c", index=None)
    with pytest.raises(TypeError, match="must be a torch.Tensor or a NumPy array, not list"):
        store.put_tensor([1, 2], group_name=None, attr_name="l", index=None)
    with pytest.raises(ValueError, match="is on meta"):
        store.put_tensor(torch.empty(3, 2, device="meta"), group_name=None, attr_name="m",
                         index=None)
    assert _files(tmp_path) == before
    assert torch.equal(get(None, "x", None), x)

    with pytest.raises(ValueError, match="device must be the CPU or a CUDA device"):
        FeatureStore(tmp_path, device="meta")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="torch sees no CUDA device"):
            FeatureStore(tmp_path, device="cuda")
    with pytest.raises(NotADirectoryError, match="the feature store's root is not a directory"):
        FeatureStore(tmp_path / next(iter(before)))
    assert _files(tmp_path) == before


def test_a_rows_file_that_does_not_match_its_descriptor_is_refused(tmp_path):
    store = FeatureStore(tmp_path)
    store.put_tensor(torch.zeros(8, 2), group_name=None, attr_name="x", index=None)
    rows = store.rows_path(None, "x")
    store.close()
    with open(rows, "r+b") as f:
        f.truncate(40)
    with pytest.raises(ValueError, match=r"holds 40 bytes, but its descriptor .* says \(8, 2\) "
                                         r"of float32: 64 bytes"):
        FeatureStore(tmp_path)[None, "x", torch.tensor([0])]


def test_indices_out_of_range_are_index_errors_whatever_their_type(tmp_path):
    """2**64 - 1 as uint64 (torch or NumPy) or as a Python int in a list used to wrap to -1,
    the last row; every index outside [-rows, rows) is an IndexError naming it (in-range
    negatives count from the end, as torch's indexing and PyG's in-memory store do)."""
    store = FeatureStore(tmp_path)
    x = torch.arange(10.0).view(5, 2)
    store.put_tensor(x, group_name=None, attr_name="x", index=None)
    get = store.get_tensor
    big = 2**64 - 1
    for index, shown in [(torch.tensor([1, big], dtype=torch.uint64), big),
                         (np.array([big], np.uint64), big), (np.array([2**63], np.uint64), 2**63),
                         (torch.tensor([5], dtype=torch.uint64), 5), ([0, big], big),
                         ([[1], [2**63]], 2**63), ([-2**63 - 1], -2**63 - 1),
                         (np.uint64(big), big), (torch.tensor([-6]), -6), (-6, -6)]:
        with pytest.raises(IndexError, match=rf"index {shown} is out of range for the 5 rows"):
            get(group_name=None, attr_name="x", index=index)
    assert torch.equal(get(None, "x", torch.tensor([4, 0], dtype=torch.uint64)), x[[4, 0]])
    assert torch.equal(get(None, "x", np.array([3], np.uint64)), x[[3]])
    assert torch.equal(get(None, "x", [-1, -5]), x[[-1, -5]])


def _descriptor(root, shape, dtype="float32", rows_bytes=b""):
    """A descriptor of attribute "x" (no group) and its rows file, as a put writes them."""
    store = FeatureStore(root)
    store.put_tensor(torch.zeros(1, dtype=getattr(torch, dtype)), group_name=None,
                     attr_name="x", index=None)
    rows = store.rows_path(None, "x")
    store.close()
    desc = next(pathlib.Path(root).glob("*.tensor.json"))
    d = json.loads(desc.read_text())
    d["shape"] = shape
    desc.write_text(json.dumps(d))
    pathlib.Path(rows).write_bytes(rows_bytes)
    return desc, pathlib.Path(rows)


@pytest.mark.parametrize("shape", [[1, 2**32, 2**32], [0, 2**62, 2], [3, 2**62],
                                   [2**63, 0], [2**62, 1]])
def test_a_descriptor_whose_sizes_overflow_int64_is_refused(tmp_path, shape):
    """Row size (row dimensions times the item size) or table size past 2**63 - 1: NumPy's
    int64 product wrapped to 0, which matched an empty rows file, and reads went on with a
    shape no tensor can have. Each is a ValueError naming the descriptor, on every use."""
    desc, _ = _descriptor(tmp_path, shape)
    store = FeatureStore(tmp_path)
    want = rf"{desc} is not a gpufile.pyg descriptor: shape .* past what torch can index"
    with pytest.raises(ValueError, match=want):
        store.get_tensor_size(None, "x")
    with pytest.raises(ValueError, match=want):
        store.get_tensor(None, "x", torch.tensor([0]))


def test_a_descriptor_of_huge_dimensions_and_no_bytes_is_a_table_torch_can_hold(tmp_path):
    _descriptor(tmp_path, [2**62, 0, 2**62])
    store = FeatureStore(tmp_path)
    assert tuple(store.get_tensor_size(None, "x")) == (2**62, 0, 2**62)
    assert store.get_tensor(None, "x", torch.tensor([7, 2**62 - 1])).shape == (2, 0, 2**62)


def test_a_rows_file_linked_out_of_the_root_is_refused_as_checkpoints_refuse_it(tmp_path):
    """A rows file that is a symlink leading out of the store's root (to another user's data)
    is not read: ValueError before it is opened, as a checkpoint's shard linked out of its
    directory is refused. A link that stays inside the root is followed."""
    root = tmp_path / "store"
    secret = tmp_path / "secret.bin"
    secret.write_bytes(np.arange(8, dtype=np.float32).tobytes())
    desc, rows = _descriptor(root, [4, 2])
    rows.unlink()
    os.symlink(secret, rows)
    store = FeatureStore(root)
    with pytest.raises(ValueError, match=r"names rows file .* which leads out of the feature "
                                         r"store's root: .* resolves to .*secret\.bin, outside"):
        store.get_tensor(None, "x", None)
    # The same rule as a checkpoint's (gpufile's checkpoint loader refuses such a shard).
    ck = tmp_path / "ck"
    ck.mkdir()
    os.symlink(secret, ck / "model.safetensors")
    with pytest.raises(ValueError, match="outside the checkpoint's directory"):
        import gpufile.safetensors as gs
        gs.load_checkpoint(ck, framework="numpy")
    inside = root / "kept.bin"
    inside.write_bytes(secret.read_bytes())
    rows.unlink()
    os.symlink("kept.bin", rows)
    assert torch.equal(FeatureStore(root).get_tensor(None, "x", None),
                       torch.arange(8.0).view(4, 2))


def test_a_put_keeps_the_temporaries_a_checkpoint_in_the_same_directory_names(tmp_path):
    """A sharded save killed between its two index publishes leaves an index that names its
    shards under their temporary names (of a process that is gone): that is the directory's
    checkpoint. A put into a feature store on the same directory removes only its own
    temporaries; the checkpoint still loads, and a killed put's leftovers still go."""
    import gpufile.safetensors as gs
    d = tmp_path / "shared"
    state = {f"t{i}": np.full(1000, i, np.float32) for i in range(4)}
    gs.save_checkpoint(state, d, max_shard_size="5KB")
    index_path = d / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    dead = subprocess.Popen(["true"])
    dead.wait()
    host = "".join(c for c in os.uname().nodename if c.isascii() and c.isalnum())[:32]
    renamed = {}
    for shard in sorted(set(index["weight_map"].values())):
        temp = f".gpufile-tmp-h{host or 'unknown'}-{dead.pid}-1-00000000.{shard}"
        os.rename(d / shard, d / temp)
        renamed[shard] = temp
    index["weight_map"] = {k: renamed[v] for k, v in index["weight_map"].items()}
    index_path.write_text(json.dumps(index))
    killed_put = d / f".gpufile-tmp-h{host or 'unknown'}-{dead.pid}-2-00000000.x-0.rows"
    killed_put.write_bytes(b"a killed put's leftover")
    before = {k: v.copy() for k, v in gs.load_checkpoint(d, framework="numpy").items()}
    assert before.keys() == state.keys()

    store = FeatureStore(d)
    store.put_tensor(torch.ones(3, 2), group_name=None, attr_name="x", index=None)
    got = gs.load_checkpoint(d, framework="numpy")
    assert got.keys() == state.keys()
    for k, v in state.items():
        np.testing.assert_array_equal(got[k], v)
    assert all((d / t).exists() for t in renamed.values())
    assert not killed_put.exists()
    assert torch.equal(store.get_tensor(None, "x", None), torch.ones(3, 2))


_WRITER = textwrap.dedent("""
    import sys, torch
    from gpufile.pyg import FeatureStore
    store = FeatureStore(sys.argv[1], durable=False)
    k = 1
    while True:
        store.put_tensor(torch.full((4096, 1024), float(k)), group_name=None, attr_name="x",
                         index=None)
        print(k, flush=True)
        k += 1
""")


def test_a_put_killed_midway_leaves_a_whole_table(tmp_path):
    """A writer killed (SIGKILL) while it puts leaves the last table it published, whole: each
    read, during the puts and after the kill, gives one put's values in every row, never a mix
    or a short table."""
    store = FeatureStore(tmp_path)
    store.put_tensor(torch.zeros(4096, 1024), group_name=None, attr_name="x", index=None)
    for delay in (0.05, 0.3, 0.7):
        with subprocess.Popen([sys.executable, "-c", _WRITER, str(tmp_path)],
                              stdout=subprocess.PIPE, text=True) as p:
            try:
                assert p.stdout.readline().strip() == "1"  # one put done
                # Reads while it puts: each is one put's table, whole.
                end = time.monotonic() + delay
                while time.monotonic() < end:
                    got = store[None, "x", torch.tensor([0, 4095, 17])]
                    assert torch.equal(got, torch.full_like(got, got[0, 0].item()))
            finally:
                p.send_signal(signal.SIGKILL)
                p.wait(timeout=60)
        got = store[None, "x", None]
        assert got.shape == (4096, 1024)
        assert torch.equal(got, torch.full_like(got, got[0, 0].item())) and got[0, 0] >= 1
        assert [(a.group_name, a.attr_name) for a in store.get_all_tensor_attrs()] == [(None, "x")]
    # The next put removes what the killed ones left: rows files no descriptor names, and
    # their temporaries.
    store.put_tensor(torch.ones(2, 2), group_name=None, attr_name="x", index=None)
    left = sorted(os.listdir(tmp_path))
    assert len(left) == 2 and left[0].endswith(".rows") and left[1].endswith(".tensor.json")


def test_neighbor_loader_hands_sampling_arguments_to_its_sampler(tmp_path):
    """NeighborLoader ignores its sampling arguments where it is given a sampler; neighbor_loader
    hands them to the sampler it builds: a bidirectional subgraph holds each edge both ways, and
    a sampling the plain-torch sampler cannot do is refused, not silently done another way."""
    import torch_geometric.typing as typing

    n = 300
    store = FeatureStore(tmp_path)
    store.put_tensor(torch.randn(n, 4), group_name=None, attr_name="x", index=None)
    data = (store, _graph(n, 4))
    torch.manual_seed(0)
    seeds = torch.arange(n)
    batch = next(iter(neighbor_loader(data, [3, 3], batch_size=50, input_nodes=seeds,
                                      subgraph_type="bidirectional")))
    edges = set(map(tuple, batch.edge_index.t().tolist()))
    assert edges and edges == {(c, r) for r, c in edges}
    loader = neighbor_loader(data, [3], batch_size=50, input_nodes=seeds, replace=True)
    if typing.WITH_PYG_LIB or typing.WITH_TORCH_SPARSE:
        assert next(iter(loader)).num_nodes >= 50  # PyG's own sampling does it
    else:
        with pytest.raises(NotImplementedError, match="replace, disjoint, temporal, weighted"):
            next(iter(loader))


def test_the_pages_example_runs_as_written(tmp_path):
    """docs/pyg.md's example, taken from the page, runs in an empty folder on what
    `pip install "gpufile[pyg]"` installs (no pyg-lib, no torch-sparse here), on the CPU or the
    GPU, and trains: it prints the last batch's loss."""
    (code,) = [text for lang, text in blocks("docs/pyg.md") if lang == "python"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KVIKIO_", "GPUFILE_"))}
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("last batch's loss: "), r.stdout
    assert [a.attr_name for a in FeatureStore(tmp_path / "features").get_all_tensor_attrs()] \
        == ["x", "y"]


def test_the_benchmark_runs_quick_on_the_cpu(tmp_path):
    out = tmp_path / "rows.json"
    _bench().main(["--quick", "--device", "cpu", "--dir", str(tmp_path), "--json", str(out)])
    names = [r["name"] for r in json.loads(out.read_text())["rows"]]
    assert names == ["pinned + torch index + copy", "memmap + copy", "gpufile FeatureStore",
                     "NeighborLoader, PyG in-memory store", "NeighborLoader, gpufile FeatureStore"]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="torch sees no CUDA device")
def test_rows_land_in_cuda_tensors_and_the_loader_gives_them(tmp_path):
    n, dim = 2000, 16
    x = torch.randn(n, dim, generator=torch.Generator().manual_seed(0))
    y = torch.randint(0, 3, (n,))
    graph = _graph(n, 6)
    store = FeatureStore(tmp_path, device="cuda")
    store.put_tensor(x.cuda(), group_name=None, attr_name="x", index=None)  # from the GPU
    store.put_tensor(y, group_name=None, attr_name="y", index=None)
    idx = torch.randint(0, n, (500,))
    got = store[None, "x", idx.cuda()]
    assert got.device.type == "cuda" and torch.equal(got.cpu(), x[idx])
    reference = LocalFeatureStore.from_data(node_id=torch.arange(n), x=x, y=y)
    want = _batches((reference, graph), n, 3)
    for w, b in zip(want, _batches((store, graph), n, 3)):
        assert b.x.device.type == "cuda" and b.y.device.type == "cuda"
        assert torch.equal(b.n_id, w.n_id) and torch.equal(b.x.cpu(), w.x)
        assert torch.equal(b.y.cpu(), w.y)
