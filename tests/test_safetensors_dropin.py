"""gpufile.safetensors as a drop-in for Hugging Face's `safetensors`: `gpufile.safetensors.torch`
and `.numpy`, `safe_open`, `SafetensorError`, `serialize`/`deserialize`/`TensorSpec` at the top,
checked against the real package: the same bytes, the same values, the same error types and
messages. The transformers test runs a tiny BERT through `sys.modules["safetensors"]` pointed at
gpufile, in a process of its own (transformers binds safetensors' functions when imported)."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

torch = pytest.importorskip("torch")
st = pytest.importorskip("safetensors")
import safetensors.numpy as st_np  # noqa: E402
import safetensors.torch as st_pt  # noqa: E402

import gpufile.safetensors as gs  # noqa: E402
import gpufile.safetensors.numpy as gs_np  # noqa: E402
import gpufile.safetensors.torch as gs_pt  # noqa: E402
from conftest import gpu_reason  # noqa: E402


def _tensors():
    g = torch.Generator().manual_seed(0)
    return {
        "f32": torch.randn((3, 4), generator=g),
        "bf16": torch.randn((2, 5), generator=g).to(torch.bfloat16),
        "i64": torch.arange(6).reshape(2, 3),
        "flag": torch.tensor([True, False, True]),
        "c64": torch.complex(torch.ones(2), -torch.ones(2)),
        "empty": torch.zeros((2, 0)),
        "empty2": torch.zeros((0, 3), dtype=torch.float16),
        "scalar": torch.tensor(2.5),
    }


def _same(a, b):
    assert list(a) == list(b)
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, k
        assert torch.equal(a[k], b[k]), k


def _raises_like(reference, ours):
    """Both calls raise: the same type (by name: each package has its own SafetensorError)
    and the same message."""
    with pytest.raises(Exception) as want:
        reference()
    with pytest.raises(Exception) as got:
        ours()
    assert type(want.value).__name__ in [c.__name__ for c in type(got.value).__mro__]
    assert str(got.value) == str(want.value)
    return got.value


def test_torch_bytes_files_and_loads_match_safetensors(tmp_path):
    tensors = _tensors()
    data = gs_pt.save(tensors, metadata={"format": "pt"})
    assert data == st_pt.save(tensors, metadata={"format": "pt"})
    gs_pt.save_file(tensors, tmp_path / "a.safetensors")
    st_pt.save_file(tensors, tmp_path / "b.safetensors")
    assert (tmp_path / "a.safetensors").read_bytes() == (tmp_path / "b.safetensors").read_bytes()
    want = st_pt.load_file(tmp_path / "b.safetensors")
    for got in (gs_pt.load_file(tmp_path / "a.safetensors"), gs_pt.load(data)):
        _same(got, want)
        # each tensor owns its memory, zero-size ones too, as safetensors' do
        assert all(len(g) == 1 for g in gs_pt._find_shared_tensors(got))
        got["f32"].add_(1)  # writable
    assert list(gs_pt.load_file(tmp_path / "a.safetensors")) == list(want)  # offset order


def test_numpy_module_matches_safetensors_numpy(tmp_path):
    arrays = {"a": np.arange(6, dtype=">i4").reshape(2, 3), "b": np.asarray(False),
              "c": np.zeros((0, 2)), "d": np.linspace(0, 1, 5, dtype=np.float32)}
    data = gs_np.save(arrays, metadata={"k": "v"})
    assert data == st_np.save(arrays, metadata={"k": "v"})
    gs_np.save_file(arrays, tmp_path / "n.safetensors")
    assert (tmp_path / "n.safetensors").read_bytes() == st_np.save(arrays)
    for got in (gs_np.load(data), gs_np.load_file(tmp_path / "n.safetensors")):
        want = st_np.load(data)
        assert sorted(got) == sorted(want)  # safetensors' order varies from call to call
        for k in want:
            assert got[k].dtype == want[k].dtype and got[k].tobytes() == want[k].tobytes()
        assert got["d"].flags.writeable
    with pytest.raises(ValueError, match=r"^Key `t` is invalid, expected numpy.ndarray but "
                                         r"received <class 'torch.Tensor'>$"):
        gs_np.save({"t": torch.zeros(2)})


def test_serialize_deserialize_and_tensor_spec_match_safetensors(tmp_path):
    a = np.arange(4, dtype=np.float32)
    spec = dict(dtype="float32", shape=[4], data_ptr=a.ctypes.data, data_len=a.nbytes)
    ours, theirs = gs.TensorSpec(**spec), st.TensorSpec(**spec)
    assert (ours.dtype, ours.shape, ours.data_len) == (theirs.dtype, theirs.shape, theirs.data_len)
    data = gs.serialize({"a": ours}, metadata={"m": "x"})
    assert data == st.serialize({"a": theirs}, metadata={"m": "x"})
    gs.serialize_file({"a": ours}, tmp_path / "s.safetensors")
    assert (tmp_path / "s.safetensors").read_bytes() == st.serialize({"a": theirs})
    assert gs.deserialize(data) == st.deserialize(data)
    two = gs_np.save({"zz": np.zeros(2, np.int8), "b": np.ones(3), "a": np.zeros(1, np.int8)})
    # safetensors' order varies from call to call; gpufile's is the offset order
    assert dict(gs.deserialize(two)) == dict(st.deserialize(two))
    assert [k for k, _ in gs.deserialize(two)] == ["b", "a", "zz"]
    assert gs.TensorSpec(dtype="float4_e2m1fn_x2", shape=[2, 2], data_ptr=0,
                         data_len=0).shape == [2, 4]
    _raises_like(lambda: st.TensorSpec(dtype="nonsense", shape=[1], data_ptr=0, data_len=0),
                 lambda: gs.TensorSpec(dtype="nonsense", shape=[1], data_ptr=0, data_len=0))
    raw = {"t": {"dtype": "float32", "shape": [1], "data_ptr": 0, "data_len": 0}}
    with pytest.raises(TypeError, match="must be a TensorSpec"):
        gs.serialize(raw)


@pytest.mark.parametrize("data,reason", [
    (b"", "is too short"), (b"\xff" * 8 + b"{}", "is larger than the limit"),
    (b"\x04\x00\x00\x00\x00\x00\x00\x00{}xx", "invalid header: trailing characters"),
    (b"\x0a\x00\x00\x00\x00\x00\x00\x00not json!!", "invalid header"),
    (b'<\x00\x00\x00\x00\x00\x00\x00{"test":{"dtype":"I32","shape":[2,2],'
     b'"data_offsets":[0,16]}}', "ends past the data area"),
])
def test_bogus_bytes_are_a_safetensor_error_as_in_safetensors(data, reason):
    with pytest.raises(st.SafetensorError, match="^Error while deserializing: "):
        st_pt.load(data)
    for load in (gs_pt.load, gs_np.load, gs.deserialize):
        with pytest.raises(gs.SafetensorError,
                           match=f"^Error while deserializing: bytes: .*{reason}"):
            load(data)
    for not_bytes in ("str", bytearray(b"x")):
        with pytest.raises(TypeError, match="is not an instance of 'bytes'"):
            gs_pt.load(not_bytes)


def test_safe_open_errors_match_safetensors(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    st_np.save_file({"a": np.zeros(2)}, "x.safetensors")
    (tmp_path / "bad.safetensors").write_bytes(b"\xff" * 8 + b"{}")
    e = _raises_like(lambda: st.safe_open("notafile", framework="pt"),
                     lambda: gs.safe_open("notafile", framework="pt"))
    assert isinstance(e, FileNotFoundError) and e.errno == 2 and e.filename == "notafile"
    for call in (lambda m: m.safe_open("x.safetensors", framework="pt", backend="x"),
                 lambda m: m.safe_open("x.safetensors", framework="np").get_tensor("nope"),
                 lambda m: m.safe_open("x.safetensors", framework="np").get_slice("nope")):
        _raises_like(lambda: call(st), lambda: call(gs))
    with pytest.raises(gs.SafetensorError, match="is larger than the limit"):
        gs.safe_open("bad.safetensors", framework="np")
    for fw, dev in (("bogus", "cpu"), ("np", "cuda:0"), ("pt", "bogus")):
        with pytest.raises(st.SafetensorError):
            st.safe_open("x.safetensors", framework=fw, device=dev)
        with pytest.raises(gs.SafetensorError):
            gs.safe_open("x.safetensors", framework=fw, device=dev)
    with gs.safe_open("x.safetensors", framework="pt", backend="pread") as f:
        assert list(f.get_tensors()) == ["a"]
        part = f.get_slice("a")
    with st.safe_open("x.safetensors", framework="pt") as ref:
        ref_part = ref.get_slice("a")
    assert torch.equal(part[1:], ref_part[1:])  # a slice still reads after the with block
    for method in ("keys", "metadata", "offset_keys", "get_tensors"):
        with pytest.raises(gs.SafetensorError, match="^File is closed$"):
            getattr(f, method)()
    with pytest.raises(gs.SafetensorError, match="^File is closed$"):
        f.get_tensor("a")


SLICE_KEYS = [np.s_[:], (), np.s_[:2], np.s_[:, :2], np.s_[0, :2], np.s_[2:, -1], np.s_[2:, -5],
              [], np.s_[5:5], np.s_[..., 1], np.s_[1, 2], np.s_[-10], np.s_[::2], np.s_[1:8:3],
              # errors: safetensors' type and message
              np.s_[2:, -6], [0, 1], np.s_[2:, 20], np.s_[:20], np.s_[:, :20], np.s_[10:],
              np.s_[:, :, :], np.s_[-11], np.s_[1.5], np.s_[None], np.s_[:, 9:]]


@pytest.mark.parametrize("key", SLICE_KEYS, ids=[repr(k) for k in SLICE_KEYS])
def test_get_slice_matches_safetensors(tmp_path, key):
    a = np.arange(50.0).reshape(10, 5)
    st_np.save_file({"a": a}, tmp_path / "s.safetensors")
    with st.safe_open(tmp_path / "s.safetensors", framework="np") as ref, \
            gs.safe_open(tmp_path / "s.safetensors", framework="np") as f:
        try:
            want = ref.get_slice("a")[key]
        except Exception as e:  # noqa: BLE001 - compared below
            with pytest.raises(gs.SafetensorError) as got:
                f.get_slice("a")[key]
            assert str(got.value) == str(e)
            return
        got = f.get_slice("a")[key]
        assert got.shape == want.shape and got.tobytes() == want.tobytes()


@pytest.mark.filterwarnings("ignore:Sparse invariant checks:UserWarning")  # PyTorch's, on creation
def test_save_errors_match_safetensors(tmp_path):
    path = tmp_path / "e.safetensors"
    a = torch.arange(6.0).reshape(2, 3)
    cases = [{"test": {"some": "thing"}}, "notadict", {"s": torch.sparse_coo_tensor(size=(2, 3))},
             {"t": a.t()}, {"A": a, "B": a[:1]}]
    for case in cases:
        _raises_like(lambda: st_pt.save_file(case, path), lambda: gs_pt.save_file(case, path))
        _raises_like(lambda: st_pt.save(case), lambda: gs_pt.save(case))
    with pytest.raises(RuntimeError, match="Cannot copy out of meta tensor"):
        gs_pt.save_file({"m": torch.zeros(2, device="meta")}, path)
    assert not path.exists()
    gs_pt.save_file({"B": a[1:], "A": a[:1]}, path)  # views that do not overlap: fine
    _same(gs_pt.load_file(path), {"A": a[:1], "B": a[1:]})


class _Tied(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(4, 4)
        self.b = self.a


class _Untied(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(4, 4)
        self.b = torch.nn.Linear(4, 4)


def test_save_model_and_load_model_restore_shared_tensors(tmp_path):
    model = _Tied()
    gs_pt.save_model(model, tmp_path / "g.safetensors")
    with gs.safe_open(tmp_path / "g.safetensors", framework="pt") as f:
        assert f.metadata() == {"b.bias": "a.bias", "b.weight": "a.weight"}
        assert f.keys() == ["a.bias", "a.weight"]
    for load_model in (gs_pt.load_model, st_pt.load_model):  # either reads the other's file
        fresh = _Tied()
        load_model(fresh, tmp_path / "g.safetensors")
        assert fresh.a.weight is fresh.b.weight
        assert torch.equal(fresh.a.weight, model.a.weight)
    st_pt.save_model(model, tmp_path / "s.safetensors")
    fresh = _Tied()
    gs_pt.load_model(fresh, tmp_path / "s.safetensors")
    assert torch.equal(fresh.b.bias, model.a.bias)
    # strict: names the model has and the file lacks, as safetensors says them
    _raises_like(lambda: st_pt.load_model(_Untied(), tmp_path / "s.safetensors"),
                 lambda: gs_pt.load_model(_Untied(), tmp_path / "g.safetensors"))
    assert gs_pt.load_model(_Untied(), tmp_path / "g.safetensors", strict=False) == \
        st_pt.load_model(_Untied(), tmp_path / "s.safetensors", strict=False)
    bad = torch.nn.Linear(3, 3)
    bad.weight = torch.nn.Parameter(torch.zeros(3, 3).t())
    with pytest.raises(ValueError, match=r"use save_model\(\.\.\., force_contiguous=True\)"):
        gs_pt.save_model(bad, tmp_path / "c.safetensors", force_contiguous=False)


def test_shared_tensor_helpers_match_safetensors():
    a = torch.zeros(4, 4)
    m = torch.randn(10)
    n = torch.empty([], dtype=m.dtype)
    n.set_(source=m.untyped_storage()[:16])
    dicts = [{"A": a, "B": a[:1]}, {"A": a, "B": a[:1], "C": a}, {"B": a[:2], "C": a[2:]},
             {"B": a[:2], "C": a[1:], "D": a[:1]}, {"m": m, "n": n},
             {"x": torch.zeros(2, device="meta")}, {"p": torch.zeros(3), "q": torch.ones(3)}]
    for d in dicts:
        assert gs_pt._find_shared_tensors(d) == st_pt._find_shared_tensors(d)
        for kw in ({}, {"preferred_names": ["C"]}, {"discard_names": ["A"]}):
            try:
                want = st_pt._remove_duplicate_names(d, **kw)
            except RuntimeError as e:
                with pytest.raises(RuntimeError) as got:
                    gs_pt._remove_duplicate_names(d, **kw)
                assert str(got.value) == str(e)
                continue
            assert gs_pt._remove_duplicate_names(d, **kw) == want
    for t in (a, a[:1], a[::2], a[:, ::2], torch.zeros(2, device="meta"), m[::4]):
        assert gs_pt._is_complete(t) == st_pt._is_complete(t)
        if t.device.type != "meta" and t.is_contiguous():
            assert gs_pt._end_ptr(t) == st_pt._end_ptr(t)
        assert (gs_pt.storage_ptr(t), gs_pt.storage_size(t)) == \
            (st_pt.storage_ptr(t), st_pt.storage_size(t))
    assert gs_pt._end_ptr(m[::4]) - m.data_ptr() == 8 * 4 + 4


def test_safe_open_handle_reads_an_open_file(tmp_path):
    st_np.save_file({"a": np.arange(3.0), "b": np.ones((2, 2), np.uint8)}, tmp_path / "h.st")
    with open(tmp_path / "h.st") as f, gs._safe_open_handle(f, framework="np") as g:
        assert g.keys() == ["a", "b"]
        np.testing.assert_array_equal(g.get_tensor("a"), np.arange(3.0))
    with pytest.raises(gs.SafetensorError, match="has no file descriptor"):
        gs._safe_open_handle(object(), framework="np")


@pytest.mark.skipif(gpu_reason() is not None, reason=str(gpu_reason()))
def test_torch_load_file_reads_onto_the_named_gpu(tmp_path):
    tensors = _tensors()
    gs_pt.save_file(tensors, tmp_path / "g.safetensors")
    got = gs_pt.load_file(tmp_path / "g.safetensors", device="cuda:0")
    assert {t.device.type for t in got.values()} == {"cuda"}
    # The real package's result, its order of names included (the file's, not the dict's).
    _same({k: v.cpu() for k, v in got.items()}, st_pt.load_file(tmp_path / "g.safetensors"))
    fresh = _Tied().cuda()
    gs_pt.save_model(_Tied(), tmp_path / "m.safetensors")
    gs_pt.load_model(fresh, tmp_path / "m.safetensors", device=0)
    assert fresh.a.weight.device.type == "cuda"


TRANSFORMERS_SCRIPT = textwrap.dedent("""
    import sys, tempfile
    import gpufile.safetensors, gpufile.safetensors.torch
    sys.modules["safetensors"] = gpufile.safetensors
    sys.modules["safetensors.torch"] = gpufile.safetensors.torch
    import torch, transformers
    from transformers.modeling_utils import _safe_load_bytes, safe_open, safe_save_file
    for f in (safe_save_file, _safe_load_bytes, safe_open):
        assert f.__module__.startswith("gpufile.safetensors"), f.__module__
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=2,
                                     num_attention_heads=2, intermediate_size=32,
                                     max_position_embeddings=32)
    model = transformers.BertForMaskedLM(config).eval()  # its decoder is tied to the embeddings
    ids = torch.randint(0, 64, (2, 7))
    with tempfile.TemporaryDirectory() as d:
        model.save_pretrained(d)
        again = transformers.BertForMaskedLM.from_pretrained(d).eval()
    with torch.no_grad():
        want, got = model(ids).logits, again(ids).logits
    assert torch.equal(want, got), (want - got).abs().max()
    print("identical logits", tuple(got.shape))
""")


def test_transformers_saves_and_loads_through_gpufile_with_identical_logits():
    pytest.importorskip("transformers", reason="transformers is not installed")
    env = dict(os.environ, TRANSFORMERS_OFFLINE="1", HF_HUB_OFFLINE="1",
               TRANSFORMERS_VERBOSITY="error")
    out = subprocess.run([sys.executable, "-c", TRANSFORMERS_SCRIPT], capture_output=True,
                         text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "identical logits (2, 7, 64)" in out.stdout


def test_flax_module_matches_safetensors_flax(tmp_path):
    jnp = pytest.importorskip("jax.numpy")
    st_fx = pytest.importorskip("safetensors.flax")
    import gpufile.safetensors.flax as gs_fx
    arrays = {"a": jnp.arange(6, dtype=jnp.float32).reshape(2, 3),
              "b": jnp.ones((2,), dtype=jnp.int8), "c": jnp.zeros((0, 2))}
    data = gs_fx.save(arrays)
    assert data == st_fx.save(arrays)
    gs_fx.save_file(arrays, tmp_path / "f.safetensors")
    assert (tmp_path / "f.safetensors").read_bytes() == data
    want = st_fx.load(data)
    for got in (gs_fx.load(data), gs_fx.load_file(tmp_path / "f.safetensors")):
        assert sorted(got) == sorted(want)
        for k in want:
            assert got[k].dtype == want[k].dtype and got[k].shape == want[k].shape
            assert np.asarray(got[k]).tobytes() == np.asarray(want[k]).tobytes()
    # BF16, which safetensors.flax.load refuses (KeyError 'BF16'): gpufile loads it
    bf = gs_fx.save({"h": jnp.full((3,), 1.5, dtype=jnp.bfloat16)})
    assert gs_fx.load(bf)["h"].dtype == jnp.bfloat16 and float(gs_fx.load(bf)["h"][1]) == 1.5
