"""NIXL's GPUFILE backend (libplugin_GPUFILE.so, docs/nixl.md) driven through NIXL's own Python
agent from the nixl-cu13 wheel: DRAM <-> FILE by descriptor and by path, many descriptors as one
gpufile request, DRAM <- OBJ over HTTP and S3 (moto), errors as NIXL error states with gpufile's message, a release mid-transfer,
VRAM behind a GPU check. The plugin is built against libgpufile's debug build
(scripts/build_nixl_plugin.sh; GPUFILE_NIXL_PLUGIN names a prebuilt one)."""

from __future__ import annotations

import json
import os
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import nixl_support
from conftest import gpu_reason, pattern, run_python, set_s3_env

API = nixl_support.nixl_api()
pytestmark = pytest.mark.skipif(
    API is None, reason="nixl-cu13 (NIXL's wheel) is not installed: pip install nixl-cu13")

BLOCK = 64 << 10


@pytest.fixture(scope="module")
def plugin(tmp_path_factory) -> Path:
    if os.environ.get("GPUFILE_NIXL_PLUGIN") is None and nixl_support.headers_dir() is None:
        pytest.skip("NIXL's plugin headers are not here: run scripts/nixl_headers.sh (GitHub), "
                    "or NIXL_GIT_DIR=CLONE/.git scripts/nixl_headers.sh REF, or set "
                    "NIXL_INCLUDE_DIR")
    return nixl_support.build_plugin()


@pytest.fixture(scope="module")
def plugin_dir(plugin, tmp_path_factory) -> Path:
    """NIXL reads NIXL_PLUGIN_DIR once per process, at its first agent."""
    folder = nixl_support.plugin_dir(plugin, tmp_path_factory.mktemp("nixl"))
    os.environ["NIXL_PLUGIN_DIR"] = str(folder)
    return folder


@pytest.fixture(scope="module")
def agent(plugin_dir):
    a = API.nixl_agent("gpufile-test", API.nixl_agent_config(backends=["GPUFILE"]))
    assert "GPUFILE" in a.backends, a.get_plugin_list()
    return a


@pytest.fixture(scope="module")
def report(plugin) -> nixl_support.PluginReport:
    return nixl_support.PluginReport(plugin)


class Registered:
    """DRAM and FILE registrations of one test, deregistered (and fds closed) at its end."""

    def __init__(self, agent):
        self.agent = agent
        self.regs = []
        self.fds = []

    def dram(self, buf: np.ndarray):
        self.regs.append(self.agent.register_memory(
            [(buf.ctypes.data, buf.nbytes, 0, "")], "DRAM", backends=["GPUFILE"]))

    def file_fd(self, path: Path, flags: int, size: int) -> int:
        fd = os.open(path, flags)
        self.fds.append(fd)
        self.regs.append(self.agent.register_memory([(0, size, fd, "")], "FILE",
                                                    backends=["GPUFILE"]))
        return fd

    def file_path(self, meta: str, dev_id: int, size: int) -> int:
        self.regs.append(self.agent.register_memory([(0, size, dev_id, meta)], "FILE",
                                                    backends=["GPUFILE"]))
        return dev_id

    def close(self):
        for r in reversed(self.regs):
            self.agent.deregister_memory(r, backends=["GPUFILE"])
        for fd in self.fds:
            os.close(fd)
        self.regs, self.fds = [], []


@pytest.fixture
def reg(agent):
    r = Registered(agent)
    yield r
    r.close()


def run(agent, op: str, local: list, remote: list, mem: str = "DRAM") -> str:
    """One transfer of the (addr, len) local and (offset, len, devId) remote lists, waited for."""
    ldescs = agent.get_xfer_descs([(a, n, 0) for a, n in local], mem)
    rdescs = agent.get_xfer_descs(remote, "FILE")
    h = agent.initialize_xfer(op, ldescs, rdescs, agent.name, backends=["GPUFILE"])
    try:
        assert agent.query_xfer_backend(h) == "GPUFILE"
        state = agent.transfer(h)
        deadline = time.monotonic() + 30
        while state == "PROC" and time.monotonic() < deadline:
            state = agent.check_xfer_state(h)
        return state
    finally:
        agent.release_xfer_handle(h)


def test_the_engine_s_vtable_is_the_one_the_wheel_s_own_plugins_have(plugin):
    """NIXL's agent calls a plugin's engine through nixlBackendEngine's vtable, and checks only
    the plugin API's version number: the headers the plugin was built with must give the
    virtual functions of the installed NIXL, slot by slot, signatures (and libstdc++'s string
    ABI) included. The wheel's own POSIX plugin was built with that NIXL's headers."""
    posix = (Path(API.__file__).resolve().parent.parent / ".nixl_cu13.mesonpy.libs/plugins"
             / "libplugin_POSIX.so")
    want = nixl_support.vtable_methods(posix, "_ZTV15nixlPosixEngine")
    got = nixl_support.vtable_methods(plugin, "_ZTVN12gpufile_nixl6EngineE")
    assert len(want) == 27 and got == want


def test_many_ranges_by_descriptor_are_one_gpufile_request(agent, reg, report, tmp_path):
    n = 256
    data = pattern(n * BLOCK, seed=1)
    path = tmp_path / "kv.bin"
    data.tofile(path)
    buf = np.zeros_like(data)
    reg.dram(buf)
    fd = reg.file_fd(path, os.O_RDONLY, data.nbytes)
    order = np.random.default_rng(2).permutation(n)  # block i of the buffer <- block order[i]
    local = [(buf.ctypes.data + i * BLOCK, BLOCK) for i in range(n)]
    remote = [(int(b) * BLOCK, BLOCK, fd) for b in order]
    assert run(agent, "READ", local, remote) == "DONE"
    assert np.array_equal(buf.reshape(n, BLOCK), data.reshape(n, BLOCK)[order])
    # One request of 256 ranges (one file, one registered buffer), and why its path.
    assert report.last_path().splitlines() == [
        "256 ranges: POSIX: host buffer: cuFile gains nothing for host memory"]


def test_write_by_path_then_read_by_path(agent, reg, tmp_path):
    n = 32
    data = pattern(n * BLOCK, seed=3)
    path = tmp_path / "new.bin"
    src = data.copy()
    reg.dram(src)
    dev = reg.file_path(f"rw,create:{path}", 1001, data.nbytes)
    local = [(src.ctypes.data + i * BLOCK, BLOCK) for i in range(n)]
    remote = [(i * BLOCK, BLOCK, dev) for i in range(n)]
    assert run(agent, "WRITE", local, remote) == "DONE"
    assert np.array_equal(np.fromfile(path, dtype=np.uint8), data)

    back = np.zeros_like(data)
    reg.dram(back)
    dev2 = reg.file_path(f"ro:{path}", 1002, data.nbytes)
    local = [(back.ctypes.data + i * BLOCK, BLOCK) for i in range(n)]
    assert run(agent, "READ", local, [(i * BLOCK, BLOCK, dev2) for i in range(n)]) == "DONE"
    assert np.array_equal(back, data)


def test_write_by_descriptor_keeps_the_rest_of_the_file(agent, reg, tmp_path):
    old = pattern(8 * BLOCK, seed=4)
    path = tmp_path / "f.bin"
    old.tofile(path)
    new = pattern(2 * BLOCK, seed=5)
    reg.dram(new)
    fd = reg.file_fd(path, os.O_RDWR, old.nbytes)
    local = [(new.ctypes.data, BLOCK), (new.ctypes.data + BLOCK, BLOCK)]
    assert run(agent, "WRITE", local, [(5 * BLOCK, BLOCK, fd), (BLOCK, BLOCK, fd)]) == "DONE"
    want = old.copy()
    want[5 * BLOCK:6 * BLOCK] = new[:BLOCK]
    want[BLOCK:2 * BLOCK] = new[BLOCK:]
    assert np.array_equal(np.fromfile(path, dtype=np.uint8), want)


def test_a_read_past_the_end_is_a_backend_error_with_gpufile_s_message(agent, reg, report,
                                                                        tmp_path):
    data = pattern(4 * BLOCK, seed=6)
    path = tmp_path / "short.bin"
    data.tofile(path)
    buf = np.full(8 * BLOCK, 7, dtype=np.uint8)
    reg.dram(buf)
    fd = reg.file_fd(path, os.O_RDONLY, 8 * BLOCK)
    local = [(buf.ctypes.data + i * BLOCK, BLOCK) for i in range(8)]
    remote = [(i * BLOCK, BLOCK, fd) for i in range(8)]
    with pytest.raises(Exception, match="NIXL_ERR_BACKEND") as e:
        run(agent, "READ", local, remote)
    assert type(e.value).__name__ == "nixlBackendError"
    msg = report.last_error()
    assert "goes past the end of" in msg and str(path) in msg, msg
    assert (buf == 7).all()  # refused before any byte moved


def test_overlapping_destinations_are_refused_and_nothing_moves(agent, reg, report, tmp_path):
    data = pattern(4 * BLOCK, seed=7)
    path = tmp_path / "o.bin"
    data.tofile(path)
    buf = np.full(4 * BLOCK, 9, dtype=np.uint8)
    reg.dram(buf)
    fd = reg.file_fd(path, os.O_RDONLY, data.nbytes)
    local = [(buf.ctypes.data, 2 * BLOCK), (buf.ctypes.data + BLOCK, 2 * BLOCK)]
    with pytest.raises(Exception, match="NIXL_ERR_BACKEND"):
        run(agent, "READ", local, [(0, 2 * BLOCK, fd), (2 * BLOCK, 2 * BLOCK, fd)])
    assert "overlap" in report.last_error()
    assert (buf == 9).all()


def test_a_missing_path_or_a_closed_descriptor_is_refused_at_registration(agent, report,
                                                                           tmp_path):
    missing = tmp_path / "nope" / "x.bin"
    with pytest.raises(Exception, match="NIXL_ERR_BACKEND"):
        agent.register_memory([(0, 10, 2001, f"ro:{missing}")], "FILE", backends=["GPUFILE"])
    assert report.last_error() == f"registerMem: open {missing}: No such file or directory"
    fd = os.open(tmp_path, os.O_RDONLY)
    os.close(fd)  # a number that names no open file now
    with pytest.raises(Exception, match="NIXL_ERR_BACKEND"):
        agent.register_memory([(0, 10, fd, "")], "FILE", backends=["GPUFILE"])
    assert "Bad file descriptor" in report.last_error()
    # The agent reports every refused registration as NIXL_ERR_BACKEND (the plugin's
    # NIXL_ERR_INVALID_PARAM included); the plugin's text says which.
    with pytest.raises(Exception, match="NIXL_ERR_BACKEND"):
        agent.register_memory([(0, 10, 2002, f"ro,turbo:{tmp_path}/a")], "FILE",
                              backends=["GPUFILE"])
    assert 'unknown path-mode flag "turbo"' in report.last_error()


def test_query_memory_gives_file_sizes(agent, tmp_path):
    path = tmp_path / "q.bin"
    pattern(12345).tofile(path)
    got = agent.query_memory([(0, 0, 0, str(path)), (0, 0, 0, f"ro:{path}"),
                              (0, 0, 0, str(tmp_path / "missing"))], "GPUFILE", "FILE")
    assert [g and g["size"] for g in got] == ["12345", "12345", None]


def test_query_memory_gives_the_path_and_reason_of_the_last_transfer_on_each_file(
        agent, reg, tmp_path):
    """NIXL's agent gives a caller no text of a transfer (its telemetry is numbers, its
    query_xfer_backend a backend's name): query_memory's answer for a file is where the path
    and reason of the last transfer that ended on it come back, each file its own lines."""
    a, b = tmp_path / "a.bin", tmp_path / "b.bin"
    da, db = pattern(4 * BLOCK, seed=5), pattern(2 * BLOCK, seed=6)
    da.tofile(a)
    db.tofile(b)
    buf = np.zeros(6 * BLOCK, dtype=np.uint8)
    reg.dram(buf)
    fd = reg.file_fd(a, os.O_RDONLY, da.nbytes)
    dev = reg.file_path(f"ro:{b}", 1 << 20, db.nbytes)  # no fd has this number

    def query():
        got = agent.query_memory([(0, 0, 0, str(a)), (0, 0, 0, f"ro:{b}")], "GPUFILE", "FILE")
        return [g.get("gpufile_path") for g in got]

    assert query() == [None, None]  # no transfer yet
    local = [(buf.ctypes.data + i * BLOCK, BLOCK) for i in range(6)]
    remote = ([(i * BLOCK, BLOCK, fd) for i in range(4)]
              + [(i * BLOCK, BLOCK, dev) for i in range(2)])
    assert run(agent, "READ", local, remote) == "DONE"
    assert np.array_equal(buf, np.concatenate([da, db]))
    why = "POSIX: host buffer: cuFile gains nothing for host memory\n"
    assert query() == [f"4 ranges: {why}", f"2 ranges: {why}"]
    reg.close()  # kept while a file is registered
    assert query() == [None, None]


def test_backend_options_are_gpufile_settings_with_their_values(plugin_dir, plugin):
    """In a process of its own, with a setting from the environment: the plugin's options are
    every setting libgpufile knows, each with its value, and the backend's parameters say what
    it runs with (those given to create_backend as given, the rest as gpufile has them)."""
    code = textwrap.dedent(f"""
        import ctypes, json, os, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        import nixl_support
        api = nixl_support.nixl_api()
        a = api.nixl_agent("options", api.nixl_agent_config(backends=[]))
        plugin = a.get_plugin_params("GPUFILE")
        a.create_backend("GPUFILE", {{"num_threads": "3", "dma_cache_size": "1MiB"}})
        backend = a.get_backend_params("GPUFILE")
        lib = ctypes.CDLL(os.path.join(os.environ["NIXL_PLUGIN_DIR"], "libgpufile.so"))
        assert lib.gpufile_settings_get_str(b"no_such_setting", None, 0, None) != 0
        lib.gpufile_last_error_message.restype = ctypes.c_size_t
        msg = ctypes.create_string_buffer(4096)
        lib.gpufile_last_error_message(msg, 4096)
        print(json.dumps({{"plugin": plugin, "backend": backend, "error": msg.value.decode()}}))
    """)
    out = run_python(code, env={"NIXL_PLUGIN_DIR": str(plugin_dir),
                                "GPUFILE_TASK_SIZE": "1MiB", "GPUFILE_HTTP_TIMEOUT": "7"})
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.splitlines()[-1])
    known = got["error"].split("known settings: ", 1)[1].split(", ")
    plugin, backend = got["plugin"], got["backend"]
    assert sorted(plugin) == sorted(known) and "remote_part_size" in known
    assert (plugin["task_size"], plugin["http_timeout"], plugin["num_threads"] != "3",
            plugin["dma_cache_size"], plugin["compat_mode"]) == ("1048576", "7", True, "0", "AUTO")
    assert sorted(backend) == sorted(known)
    assert {k: v for k, v in backend.items() if plugin[k] != v} == {
        "num_threads": "3", "dma_cache_size": "1MiB"}


def test_backend_parameters_are_gpufile_settings(agent):
    params = agent.get_plugin_params("GPUFILE")
    assert {"num_threads", "task_size", "dma_cache_size", "compat_mode"} <= set(params)
    assert set(agent.get_backend_mem_types("GPUFILE")) == {"DRAM_SEG", "VRAM_SEG", "FILE_SEG",
                                                           "OBJ_SEG"}


def read_objects(agent, reg, urls: dict[str, np.ndarray], block: int):
    """Every object of `urls` read in blocks, in reverse block order, by one transfer into one
    DRAM buffer, through OBJ descriptors whose metaInfo is the URL; the buffer."""
    total = sum(len(d) for d in urls.values())
    buf = np.zeros(total, dtype=np.uint8)
    reg.dram(buf)
    local, remote, at = [], [], 0
    for dev, (url, data) in enumerate(urls.items(), start=3000):
        reg.regs.append(agent.register_memory([(0, len(data), dev, url)], "OBJ",
                                              backends=["GPUFILE"]))
        for off in reversed(range(0, len(data), block)):
            n = min(block, len(data) - off)
            local.append((buf.ctypes.data + at + off, n))
            remote.append((off, n, dev))
        at += len(data)
    ldescs = agent.get_xfer_descs([(a, n, 0) for a, n in local], "DRAM")
    rdescs = agent.get_xfer_descs(remote, "OBJ")
    h = agent.initialize_xfer("READ", ldescs, rdescs, agent.name, backends=["GPUFILE"])
    state = agent.transfer(h)
    deadline = time.monotonic() + 30
    while state == "PROC" and time.monotonic() < deadline:
        state = agent.check_xfer_state(h)
    agent.release_xfer_handle(h)
    assert state == "DONE"
    return buf


def test_objects_over_http_read_into_dram(agent, reg, report, tmp_path):
    from gpufile._http_server import LocalHttpServer

    files = {"a.bin": pattern(300_001, 10), "b.bin": pattern(65_536, 11)}
    for name, data in files.items():
        data.tofile(tmp_path / name)
    with LocalHttpServer(tmp_path, max_lifetime=60) as server:
        urls = {f"{server.url}/{name}": data for name, data in files.items()}
        buf = read_objects(agent, reg, urls, 50_000)
        assert np.array_equal(buf, np.concatenate(list(files.values())))
        got = agent.query_memory([(0, 0, 0, u) for u in urls] + [(0, 0, 0, f"{server.url}/no")],
                                 "GPUFILE", "OBJ")
        assert [g and g["size"] for g in got] == ["300001", "65536", None]
        # A range past an object's end is refused when the transfer is made, naming it.
        url = next(iter(urls))
        out = np.zeros(16, dtype=np.uint8)
        reg.dram(out)
        # Registered longer than the object (NIXL knows no object sizes): the agent passes
        # the descriptor on, the backend refuses it.
        reg.regs.append(agent.register_memory([(0, 1 << 20, 3100, url)], "OBJ",
                                              backends=["GPUFILE"]))
        with pytest.raises(Exception, match="NIXL_ERR"):
            agent.initialize_xfer(
                "READ", agent.get_xfer_descs([(out.ctypes.data, 16, 0)], "DRAM"),
                agent.get_xfer_descs([(300_000, 16, 3100)], "OBJ"), agent.name,
                backends=["GPUFILE"])
        assert "past its end (300001 bytes)" in report.last_error()
        with pytest.raises(Exception, match="NIXL_ERR_NOT_SUPPORTED"):
            agent.initialize_xfer(
                "WRITE", agent.get_xfer_descs([(out.ctypes.data, 16, 0)], "DRAM"),
                agent.get_xfer_descs([(0, 16, 3100)], "OBJ"), agent.name, backends=["GPUFILE"])
        assert "writes to objects are not supported" in report.last_error()
    with pytest.raises(Exception, match="NIXL_ERR_BACKEND"):
        agent.register_memory([(0, 10, 3101, url)], "OBJ", backends=["GPUFILE"])
    assert "registerMem" in report.last_error() and "127.0.0.1" in report.last_error()


def test_an_s3_object_reads_into_dram_with_gpufile_s_credential_chain(agent, reg, moto_endpoint,
                                                                      monkeypatch):
    boto3 = pytest.importorskip("boto3", reason="boto3 is not installed")
    set_s3_env(monkeypatch, moto_endpoint, "testing-key", "testing-secret")
    client = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")
    client.create_bucket(Bucket="kvcache")
    data = pattern(1_000_003, 12)
    client.put_object(Bucket="kvcache", Key="layer/0.bin", Body=data.tobytes())
    buf = read_objects(agent, reg, {"s3://kvcache/layer/0.bin": data}, 128 << 10)
    assert np.array_equal(buf, data)


def test_release_mid_transfer_cancels_what_has_not_started(plugin_dir, plugin, tmp_path):
    """In a process of its own: the backend's parameters (one worker, 4 KiB tasks) are the
    process's gpufile settings."""
    path = tmp_path / "big.bin"
    np.full(16 << 20, 0xAB, dtype=np.uint8).tofile(path)
    code = textwrap.dedent(f"""
        import os, sys, time
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        import numpy as np
        import nixl_support
        api = nixl_support.nixl_api()
        a = api.nixl_agent("cancel", api.nixl_agent_config(backends=[]))
        a.create_backend("GPUFILE", {{"num_threads": "1", "task_size": "4096"}})
        buf = np.zeros(16 << 20, dtype=np.uint8)
        a.register_memory([(buf.ctypes.data, buf.nbytes, 0, "")], "DRAM")
        a.register_memory([(0, buf.nbytes, 7, "ro:{path}")], "FILE")
        l = a.get_xfer_descs([(buf.ctypes.data, buf.nbytes, 0)], "DRAM")
        r = a.get_xfer_descs([(0, buf.nbytes, 7)], "FILE")
        h = a.initialize_xfer("READ", l, r, "cancel")
        print("posted", a.transfer(h))
        a.release_xfer_handle(h)   # returns once no worker touches buf
        done = int((buf == 0xAB).sum())
        time.sleep(0.2)
        print("moved", done, int((buf == 0xAB).sum()), buf.nbytes)
    """)
    out = run_python(code, env={"NIXL_PLUGIN_DIR": str(plugin_dir)})
    assert out.returncode == 0, out.stderr
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines())
    assert lines["posted"] == "PROC"
    moved, later, total = map(int, lines["moved"].split())
    assert moved == later < total  # nothing moves after the release; most never did


@pytest.mark.skipif(gpu_reason() is not None, reason=str(gpu_reason()))
def test_vram_reads_and_writes_through_gpufile(agent, reg, tmp_path):
    import cupy

    n = 64
    data = pattern(n * BLOCK, seed=8)
    path = tmp_path / "v.bin"
    data.tofile(path)
    dev = cupy.zeros(data.nbytes, dtype=cupy.uint8)
    ptr = dev.data.ptr
    reg.regs.append(agent.register_memory([(ptr, dev.nbytes, dev.device.id, "")], "VRAM",
                                          backends=["GPUFILE"]))
    fd = reg.file_fd(path, os.O_RDWR, data.nbytes)
    order = np.random.default_rng(9).permutation(n)
    ldescs = agent.get_xfer_descs([(ptr + i * BLOCK, BLOCK, dev.device.id) for i in range(n)],
                                  "VRAM")
    rdescs = agent.get_xfer_descs([(int(b) * BLOCK, BLOCK, fd) for b in order], "FILE")
    for op in ("READ", "WRITE"):
        h = agent.initialize_xfer(op, ldescs, rdescs, agent.name, backends=["GPUFILE"])
        state = agent.transfer(h)
        while state == "PROC":
            state = agent.check_xfer_state(h)
        agent.release_xfer_handle(h)
        assert state == "DONE"
        if op == "READ":
            assert np.array_equal(cupy.asnumpy(dev).reshape(n, BLOCK),
                                  data.reshape(n, BLOCK)[order])
            dev[:] = dev[::-1].copy()  # new bytes for the write back
            want = cupy.asnumpy(dev)
    got = np.fromfile(path, dtype=np.uint8).reshape(n, BLOCK)
    assert np.array_equal(got[order], want.reshape(n, BLOCK))


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
