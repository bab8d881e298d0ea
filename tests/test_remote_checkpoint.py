"""Safetensors checkpoints loaded by URL (load_checkpoint, load_file, safe_open, `gpufile load`)
from moto's S3 server and gpufile's range server on 127.0.0.1, checked against the
``safetensors`` package's own reading of the same files."""

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler

import numpy as np
import pytest

import gpufile
from conftest import interrupt_when, time_scale
from gpufile.safetensors import SafetensorError, load_checkpoint, load_file, safe_open
from gpufile._http_server import LocalHttpServer

st_numpy = pytest.importorskip("safetensors.numpy")

SECRET = "ckpt-secret-never-shown"


def tensors(seed: int, n: int) -> dict:
    rng = np.random.default_rng(seed)
    out = {}
    for i in range(n):
        shape = (int(rng.integers(1, 40)), int(rng.integers(1, 70)))
        out[f"model.layers.{seed}.w{i}"] = rng.standard_normal(shape).astype(
            [np.float32, np.float16, np.int64][i % 3]
        )
    return out


@pytest.fixture(scope="module")
def checkpoint_dir(tmp_path_factory):
    """A sharded checkpoint (two shards + index), a single-file one, and a broken file."""
    root = tmp_path_factory.mktemp("ck")
    shards = {"model-00001-of-00002.safetensors": tensors(1, 7), "model-00002-of-00002.safetensors": tensors(2, 5)}
    (root / "sharded").mkdir()
    weight_map = {}
    for name, ts in shards.items():
        st_numpy.save_file(ts, str(root / "sharded" / name), metadata={"format": "np"})
        weight_map.update({k: name for k in ts})
    (root / "sharded" / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": 1}, "weight_map": weight_map})
    )
    (root / "single").mkdir()
    # A header longer than the first ranged request (64 KiB): a long metadata value.
    single = tensors(3, 4)
    st_numpy.save_file(single, str(root / "single" / "model.safetensors"), metadata={"pad": "x" * 100_000})
    (root / "empty").mkdir()
    (root / "empty" / "README").write_text("nothing here")
    (root / "broken.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all")
    expected = {k: v for ts in shards.values() for k, v in ts.items()}
    return root, expected, single


def check(got: dict, want: dict) -> None:
    assert set(got) == set(want)
    for k, v in want.items():
        assert got[k].dtype == v.dtype and got[k].shape == v.shape, k
        assert np.array_equal(got[k], v), k


@pytest.fixture
def s3(moto_endpoint, checkpoint_dir, monkeypatch):
    boto3 = pytest.importorskip("boto3")
    env = {
        "AWS_ACCESS_KEY_ID": "AKIDCKPT",
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": moto_endpoint,
    }
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    client = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")
    client.create_bucket(Bucket="models")
    root = checkpoint_dir[0]
    for dirpath, _, names in os.walk(root):
        for n in names:
            full = os.path.join(dirpath, n)
            client.upload_file(full, "models", os.path.relpath(full, root))
    return env


def test_load_checkpoint_from_s3_by_prefix_index_and_file(s3, checkpoint_dir):
    _, expected, single = checkpoint_dir
    with gpufile.defaults.set({"num_threads": 4, "task_size": 4096}):
        check(load_checkpoint("s3://models/sharded/", framework="numpy"), expected)
        check(load_checkpoint("s3://models/sharded", framework="numpy"), expected)
        check(load_checkpoint("s3://models/sharded/model.safetensors.index.json", framework="numpy"), expected)
    shard = "s3://models/sharded/model-00002-of-00002.safetensors"
    want = {k: v for k, v in expected.items() if k.startswith("model.layers.2.")}
    check(load_file(shard, framework="numpy"), want)
    # A prefix without an index: its model.safetensors (whose header is longer than 64 KiB).
    check(load_checkpoint("s3://models/single/", framework="numpy"), single)
    # Only the selected tensors.
    name = sorted(expected)[3]
    got = load_checkpoint("s3://models/sharded/", framework="numpy", filter=[name])
    check(got, {name: expected[name]})


def test_safe_open_by_url(s3, checkpoint_dir):
    _, _, single = checkpoint_dir
    with safe_open("s3://models/single/model.safetensors", framework="numpy") as f:
        assert f.keys() == sorted(single)
        assert f.metadata()["pad"] == "x" * 100_000
        for k, v in single.items():
            assert np.array_equal(f.get_tensor(k), v)
        k = sorted(single)[0]
        assert np.array_equal(f.get_slice(k)[1:3], single[k][1:3])
    # As safetensors' safe_open: after its with block, every call is "File is closed".
    with pytest.raises(SafetensorError, match="^File is closed$"):
        f.get_tensor(k)


def test_load_by_http_url(checkpoint_dir):
    root, expected, _ = checkpoint_dir
    with LocalHttpServer(root, max_lifetime=60) as server:
        got = load_checkpoint(f"{server.url}/sharded/model.safetensors.index.json", framework="numpy")
        check(got, expected)
        check(load_checkpoint(f"{server.url}/sharded/", framework="numpy"), expected)


def test_load_by_gs_url_through_the_emulator_variable(checkpoint_dir, monkeypatch, tmp_path):
    root, expected, _ = checkpoint_dir
    bucket = tmp_path / "bkt"
    os.symlink(root / "sharded", bucket)
    with LocalHttpServer(tmp_path, max_lifetime=60) as server:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", server.url)
        check(load_checkpoint("gs://bkt/model.safetensors.index.json", framework="numpy"), expected)


def test_bad_remote_checkpoints_say_what_and_where(s3):
    with pytest.raises(SafetensorError, match=r"s3://models/broken.safetensors|models/broken.safetensors"):
        load_file("s3://models/broken.safetensors", framework="numpy")
    with pytest.raises(SafetensorError, match="no model.safetensors.index.json and no model.safetensors"):
        load_checkpoint("s3://models/empty/", framework="numpy")
    with pytest.raises(RuntimeError, match="404") as e:
        load_file("s3://models/missing.safetensors", framework="numpy")
    assert SECRET not in str(e.value) and "AKIDCKPT" not in str(e.value)


def cli(*args, env=None):
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("KVIKIO_", "GPUFILE_"))}
    clean.update(env or {})
    return subprocess.run([sys.executable, "-m", "gpufile", *args], capture_output=True, env=clean, timeout=120)


def test_cli_load_s3_checkpoint(s3, checkpoint_dir):
    _, expected, _ = checkpoint_dir
    r = cli("load", "s3://models/sharded/", "--host", "--verify", "--json", env=s3)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["tensors"] == len(expected)
    assert out["checkpoint_bytes"] == sum(v.nbytes for v in expected.values())
    text = r.stdout.decode() + r.stderr.decode()
    assert SECRET not in text and "AKIDCKPT" not in text
    r = cli("load", "s3://models/empty/", "--host", "--json", env=s3)
    assert r.returncode == 1
    err = json.loads(r.stdout)["error"]
    assert err["type"] == "safetensors" and "no model.safetensors.index.json" in err["message"]


# ---------------------------------------------------------------- saving by URL


def big_tensors(n_mib: int) -> dict:
    rng = np.random.default_rng(n_mib)
    return {f"t{i}": rng.standard_normal((1 << 18,)).astype(np.float32) for i in range(n_mib)}


def test_save_file_to_s3_is_byte_identical_to_safetensors(s3):
    import boto3
    from gpufile.safetensors import save_file

    client = boto3.client("s3", region_name="us-east-1")
    small = tensors(5, 6)
    save_file(small, "s3://models/saved/small.safetensors", metadata={"k": "v"})
    got = client.get_object(Bucket="models", Key="saved/small.safetensors")["Body"].read()
    assert got == st_numpy.save(small, metadata={"k": "v"})
    # Large enough for a multipart upload of three parts.
    big = big_tensors(11)
    with gpufile.defaults.set("remote_part_size", 5 << 20):
        save_file(big, "s3://models/saved/big.safetensors")
    got = client.get_object(Bucket="models", Key="saved/big.safetensors")["Body"].read()
    assert got == st_numpy.save(big)
    etag = client.head_object(Bucket="models", Key="saved/big.safetensors")["ETag"]
    assert etag.strip('"').endswith("-3"), etag
    assert client.list_multipart_uploads(Bucket="models").get("Uploads", []) == []
    check(load_file("s3://models/saved/big.safetensors", framework="numpy"), big)


class Replies(BaseHTTPRequestHandler):
    """HTTP/1.1 replies with a body and headers, no logging: the base of the servers here."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _send(self, status, body=b"", headers=()):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


class RecordingPut(Replies):
    """Stores PUT bodies in ``store`` (path → bytes) and records the order; answers GET and HEAD
    with ranges of what it stored, each recorded in ``seen`` as (method, path, Range header);
    fails the PUTs ``fail(path)`` picks with 500; never answers those ``stall(path)`` picks
    (``stalled`` set once one arrived whole; held until ``release`` is set)."""

    def __init__(self, *args, store=None, order=None, fail=None, seen=None, stall=None,
                 stalled=None, release=None, **kw):
        self.store, self.order, self.fail, self.seen = store, order, fail, seen
        self.stall, self.stalled, self.release = stall, stalled, release
        super().__init__(*args, **kw)

    def do_PUT(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.stall(self.path):
            self.stalled.set()
            self.release.wait(60)
            self.close_connection = True
            return
        if self.fail(self.path):
            return self._send(500)
        self.store[self.path] = body
        self.order.append(self.path)
        self._send(201)

    def do_GET(self):
        self.seen.append((self.command, self.path, self.headers.get("Range")))
        data = self.store.get(self.path)
        if data is None:
            return self._send(404)
        rng = self.headers.get("Range")
        if rng:
            a, b = (int(x) for x in rng.split("=")[1].split("-"))
            return self._send(206, data[a : b + 1], [("Content-Range", f"bytes {a}-{b}/{len(data)}")])
        self._send(200, data, [("Accept-Ranges", "bytes")])

    do_HEAD = do_GET


@pytest.fixture
def put_server():
    from http.server import ThreadingHTTPServer

    servers = []
    release = threading.Event()

    def start(fail=lambda path: False, seen=None, stall=lambda path: False, stalled=None):
        store, order = {}, []
        seen = [] if seen is None else seen
        stalled = threading.Event() if stalled is None else stalled
        handler = lambda *a, **k: RecordingPut(  # noqa: E731
            *a, store=store, order=order, fail=fail, seen=seen, stall=stall, stalled=stalled,
            release=release, **k)
        httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        httpd.daemon_threads = True
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        servers.append(httpd)
        return f"http://127.0.0.1:{httpd.server_address[1]}", store, order

    yield start
    release.set()
    for h in servers:
        h.shutdown()
        h.server_close()


def test_save_checkpoint_by_url_uploads_shards_then_the_index(put_server):
    from gpufile.safetensors import save_checkpoint

    url, store, order = put_server()
    state = big_tensors(5)  # 1 MiB tensors: five shards of at most 1 MiB
    index = save_checkpoint(state, f"{url}/run/step-10/", max_shard_size=1 << 20)
    assert order[-1] == "/run/step-10/model.safetensors.index.json"  # the index is the commit
    assert len(order) == 6
    assert json.loads(store[order[-1]]) == index
    check(load_checkpoint(f"{url}/run/step-10/", framework="numpy"), state)


def test_a_checkpoint_load_asks_each_size_once_and_the_data_in_16_mib_ranges(put_server):
    """A load from a server asks each file's size once (HEAD), its header with one ranged GET,
    and each shard's data in ranges of 16 MiB (a request costs a round trip and the server's
    fixed cost; `task_size`'s 4 MiB is KvikIO's default for any remote read), the ranges never
    cut smaller for idle workers (16 workers: two 20 MiB shards are two GETs each)."""
    from gpufile.safetensors import save_checkpoint

    seen: list = []
    url, store, _ = put_server(seen=seen)
    state = big_tensors(40)  # 1 MiB tensors: two shards of 20 MiB
    save_checkpoint(state, f"{url}/ck/", max_shard_size=20 << 20)
    shards = sorted(p for p in store if p.endswith(".safetensors"))
    assert len(shards) == 2
    seen.clear()
    with gpufile.defaults.set({"num_threads": 16, "task_size": 4 << 20}):
        check(load_checkpoint(f"{url}/ck/", framework="numpy"), state)
    index = "/ck/model.safetensors.index.json"
    heads = sorted(p for m, p, _ in seen if m == "HEAD")
    assert heads == sorted([index, *shards])
    for shard in shards:
        gets = sorted(int(r.split("=")[1].split("-")[0]) for m, p, r in seen if m == "GET" and p == shard)
        assert gets[0] == 0  # the header, then the data from its end in 16 MiB ranges
        data_start = gets[1]
        assert gets[1:] == list(range(data_start, len(store[shard]), 16 << 20)), (shard, gets)
        assert len(gets) == 1 + 2
    assert [p for m, p, _ in seen if m == "GET" and p == index] == [index]
    assert len(seen) == 3 + 1 + 2 * 3


def test_a_remote_read_keeps_task_size_ranges_however_many_workers_idle(put_server):
    """RemoteFile reads in task_size ranges, as KvikIO's RemoteHandle asks them: a 4 MiB object
    with 2 MiB tasks on 16 workers is two GETs, not sixteen of 256 KiB."""
    from gpufile.safetensors import save_checkpoint

    seen: list = []
    url, store, _ = put_server(seen=seen)
    save_checkpoint(big_tensors(4), f"{url}/one/", max_shard_size=8 << 20)
    (name,) = [p for p in store if p.endswith(".safetensors")]
    size = len(store[name])
    seen.clear()
    with gpufile.defaults.set({"num_threads": 16, "task_size": 2 << 20}):
        with gpufile.RemoteFile.open_http(f"{url}{name}", nbytes=size) as f:
            buf = np.empty(size, dtype=np.uint8)
            assert f.read(buf) == size
    assert bytes(buf) == store[name]
    gets = sorted(int(r.split("=")[1].split("-")[0]) for m, p, r in seen if m == "GET")
    assert gets[-1] > 0, gets  # not one whole-object GET
    body = [g for g in gets if g > 0]
    assert [0, *body] == list(range(0, size, 2 << 20)), gets


def test_a_failing_shard_leaves_no_index(put_server):
    from gpufile.safetensors import save_checkpoint

    url, store, order = put_server(fail=lambda p: p.endswith("model-00002-of-00003.safetensors"))
    with gpufile.defaults.set("http_max_attempts", 1):
        with pytest.raises(RuntimeError, match="500") as e:
            save_checkpoint(big_tensors(3), f"{url}/run/", max_shard_size=1 << 20)
    assert "/run/model.safetensors.index.json" not in store
    assert any("index of" in n and "was not written" in n for n in e.value.__notes__)


def test_a_url_is_told_from_a_local_path_by_the_cores_rule():
    """Saves and loads ask the core's rule (gpufile_remote::is_url): an s3, gs, http or https
    scheme in any case; anything else, and anything but a str, is a local path."""
    import pathlib

    from gpufile import _native

    urls = ["s3://b/k", "S3://b/k", "gs://b/o", "Gs://b/o", "http://h/p", "HTTPS://h/p",
            "http://127.0.0.1:1/webhdfs/v1/ck/", "s3://b/run/?X-Amz-Signature=s"]
    paths = ["model.safetensors", "/tmp/s3://x", "./gs://b", "ftp://h/x", "webhdfs://h/x",
             "s3:/b/k", " s3://b/k", "", b"s3://b/k", pathlib.Path("s3://b/k"), None, 3]
    assert [u for u in urls if not _native.is_url(u)] == []
    assert [p for p in paths if _native.is_url(p)] == []


def test_a_signed_url_is_refused_as_a_checkpoint_prefix_before_any_request(put_server):
    from gpufile.safetensors import save_checkpoint

    url, store, order = put_server()
    prefix = f"{url}/run/?X-Amz-Signature=ckpt-signature-never-shown"
    with pytest.raises(ValueError, match="a checkpoint is saved under a prefix of several "
                       "objects, which a signed URL") as e:
        save_checkpoint(big_tensors(2), prefix, max_shard_size=1 << 20)
    assert "ckpt-signature-never-shown" not in str(e.value)
    assert order == [] and store == {}


# Saves three 1 MiB shards to a server that never answers their PUTs; http_timeout 60 s.
STALLED_SAVE = """
import numpy as np, gpufile
from gpufile.safetensors import save_checkpoint
gpufile.defaults.set({{"http_timeout": 60, "http_max_attempts": 1}})
state = {{f"t{{i}}": np.ones(1 << 18, np.float32) for i in range(3)}}
try:
    save_checkpoint(state, "{url}/ck/", max_shard_size=1 << 20)
except KeyboardInterrupt as e:
    print("KeyboardInterrupt:", *getattr(e, "__notes__", []), flush=True)
    raise
"""


def test_ctrl_c_ends_a_checkpoint_save_whose_uploads_get_no_answer(put_server):
    """Ctrl-C during a save by URL ends the process within seconds, every upload stopped and
    no index written (the uploads ran on Python threads that Ctrl-C did not reach: the process
    then waited for each PUT's `http_timeout` before it could exit)."""
    stalled = threading.Event()
    url, store, order = put_server(stall=lambda path: True, stalled=stalled)
    out, err, elapsed = interrupt_when(stalled, STALLED_SAVE.format(url=url), "saving")
    assert elapsed < 5.0 * time_scale(), f"Ctrl-C took {elapsed:.2f} s"
    assert "KeyboardInterrupt: gpufile: the index of" in out and "was not written" in out, \
        (out, err)
    assert "KeyboardInterrupt" in err
    assert order == [] and store == {}


class WebHdfsStore(Replies):
    """A WebHDFS name node and data node over an in-memory store (path under ``/webhdfs/v1`` →
    bytes): CREATE answers 307 to the data node, which stores the body; GETFILESTATUS and OPEN
    (``offset``, ``length``) serve what was stored; ``order`` records each file made."""

    def __init__(self, *args, store=None, order=None, users=None, **kw):
        self.store, self.order, self.users = store, order, users
        super().__init__(*args, **kw)

    def _parse(self):
        import urllib.parse

        parsed = urllib.parse.urlsplit(self.path)
        q = dict(urllib.parse.parse_qsl(parsed.query))
        if parsed.path.startswith("/webhdfs/v1/"):  # the data node's URL is the name node's
            self.users.append(q.get("user.name"))
        return parsed.path, q

    def do_PUT(self):
        path, q = self._parse()
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if path.startswith("/webhdfs/v1/") and q.get("op") == "CREATE":
            port = self.server.server_address[1]
            where = f"http://127.0.0.1:{port}/datanode{path[len('/webhdfs/v1'):]}?op=CREATE"
            return self._send(307, headers=[("Location", where)])
        if path.startswith("/datanode/"):
            name = path[len("/datanode"):]
            self.store[name] = body
            self.order.append(name)
            return self._send(201)
        self._send(400)

    def do_GET(self):
        path, q = self._parse()
        data = self.store.get(path[len("/webhdfs/v1"):]) if path.startswith("/webhdfs/v1/") else None
        if data is None:
            msg = b'{"RemoteException":{"exception":"FileNotFoundException","message":"no file"}}'
            return self._send(404, msg, [("Content-Type", "application/json")])
        if q.get("op") == "GETFILESTATUS":
            body = json.dumps({"FileStatus": {"length": len(data), "type": "FILE"}}).encode()
            return self._send(200, body, [("Content-Type", "application/json")])
        if q.get("op") == "OPEN":
            off = int(q.get("offset", 0))
            n = int(q.get("length", len(data) - off))
            return self._send(200, data[off : off + n])
        self._send(400)


@pytest.fixture
def webhdfs_store():
    from http.server import ThreadingHTTPServer
    import threading

    store, order, users = {}, [], []
    handler = lambda *a, **k: WebHdfsStore(*a, store=store, order=order, users=users, **k)  # noqa: E731
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/webhdfs/v1", store, order, users
    httpd.shutdown()
    httpd.server_close()


def test_webhdfs_checkpoint_round_trip_shards_first_index_last(webhdfs_store, monkeypatch):
    """save_checkpoint to a WebHDFS prefix: every shard made through CREATE's two steps, the
    index last; load_checkpoint of the prefix and load_file of a shard read them back, each
    name-node request carrying the user of KVIKIO_WEBHDFS_USERNAME."""
    from gpufile.safetensors import save_checkpoint, save_file

    base, store, order, users = webhdfs_store
    monkeypatch.setenv("KVIKIO_WEBHDFS_USERNAME", "carol")
    state = big_tensors(3)
    index = save_checkpoint(state, f"{base}/ckpt/step-7/", max_shard_size=1 << 20)
    names = [f"/ckpt/step-7/model-0000{k}-of-00003.safetensors" for k in (1, 2, 3)]
    assert sorted(order[:-1]) == names and order[-1] == "/ckpt/step-7/model.safetensors.index.json"
    assert json.loads(store[order[-1]]) == index
    for name in names:  # each shard is what safetensors writes for its tensors
        keys = [k for k, v in index["weight_map"].items() if v == name.rsplit("/", 1)[1]]
        assert store[name] == st_numpy.save({k: state[k] for k in keys}, metadata={"format": "pt"})
    check(load_checkpoint(f"{base}/ckpt/step-7/", framework="numpy"), state)
    second = {k: state[k] for k, v in index["weight_map"].items() if names[1].endswith("/" + v)}
    assert second
    check(load_file(f"{base}{names[1]}", framework="numpy"), second)
    small = tensors(9, 4)
    save_file(small, f"{base}/one/small.safetensors", metadata={"k": "v"})
    assert store["/one/small.safetensors"] == st_numpy.save(small, metadata={"k": "v"})
    assert set(users) == {"carol"}


def test_a_webhdfs_checkpoint_that_is_not_there_names_the_prefix(webhdfs_store):
    base, _, _, _ = webhdfs_store
    with pytest.raises(SafetensorError, match="no model.safetensors.index.json and no model.safetensors"):
        load_checkpoint(f"{base}/nothing/", framework="numpy")


def test_gpufile_load_asks_a_checkpoints_data_in_16_mib_ranges_as_python_does(put_server):
    """`gpufile load URL` and Python's loader read a checkpoint's objects alike: the core opens
    them to be read in ranges of at least 16 MiB (`task_size` 4 MiB here), never cut for idle
    workers."""
    from gpufile.safetensors import save_checkpoint

    seen: list = []
    url, store, _ = put_server(seen=seen)
    state = big_tensors(40)  # 1 MiB tensors: two shards of 20 MiB
    save_checkpoint(state, f"{url}/ck/", max_shard_size=20 << 20)
    shards = sorted(p for p in store if p.endswith(".safetensors"))
    seen.clear()
    r = cli("load", f"{url}/ck/", "--host",
            env={"KVIKIO_NTHREADS": "16", "KVIKIO_TASK_SIZE": str(4 << 20)})
    assert r.returncode == 0, r.stderr.decode()
    for shard in shards:
        gets = sorted(int(r.split("=")[1].split("-")[0]) for m, p, r in seen if m == "GET" and p == shard)
        assert gets[1:] == list(range(gets[1], len(store[shard]), 16 << 20)), (shard, gets)
