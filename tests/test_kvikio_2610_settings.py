"""KvikIO 26.10's new settings and names: the reactor settings of its MULTI_POLL backend with
their rules, ``RemoteReactorDispatch``, ``nsys_plugin_search_dir``, and the logger variables
(``KVIKIO_LOG_LEVEL``, ``KVIKIO_LOG_FILE``) honoured for gpufile's notices.

The reactor settings are fixed for the rest of the process once a remote read has run under
MULTI_POLL, and the logger variables are read once per process, so those checks run in fresh
interpreters.
"""

import os

import pytest

import gpufile
from gpufile import defaults
from gpufile.defaults import RemoteIOBackend, RemoteReactorDispatch
from conftest import run_python

REACTOR = ("remote_io_num_reactors", "remote_io_reactor_dispatch",
           "remote_io_max_concurrent_requests")


def test_top_level_names_are_kvikios():
    assert gpufile.RemoteIOBackend is RemoteIOBackend
    assert gpufile.RemoteReactorDispatch is RemoteReactorDispatch
    assert [(m.name, int(m)) for m in RemoteReactorDispatch] == [("PER_CHUNK", 0),
                                                                  ("PER_PREAD", 1)]
    for name in ("RemoteIOBackend", "RemoteReactorDispatch", "nsys_plugin_search_dir"):
        assert name in gpufile.__all__
    path = gpufile.nsys_plugin_search_dir()
    assert isinstance(path, str) and os.path.isabs(path)
    assert path.endswith(os.path.join("share", "nsys-plugins"))
    assert os.path.dirname(os.path.dirname(path)) == os.path.dirname(gpufile.__file__)


def test_reactor_settings_have_kvikios_defaults():
    assert defaults.get("remote_io_num_reactors") == 1
    assert defaults.get("remote_io_reactor_dispatch") is RemoteReactorDispatch.PER_CHUNK
    assert defaults.get("remote_io_max_concurrent_requests") == 256
    sources = {n: s for n, _, s in defaults.report()}
    assert all(sources[n] in ("default", "set") for n in REACTOR)


def test_set_by_name_returns_none_and_takes_kvikios_values():
    before = [defaults.get(n) for n in REACTOR]
    try:
        assert defaults.set("remote_io_num_reactors", 4) is None
        assert defaults.get("remote_io_num_reactors") == 4
        for value in (RemoteReactorDispatch.PER_PREAD, 1, " per_pread "):
            defaults.set("remote_io_reactor_dispatch", RemoteReactorDispatch.PER_CHUNK)
            assert defaults.set("remote_io_reactor_dispatch", value) is None
            assert defaults.get("remote_io_reactor_dispatch") is RemoteReactorDispatch.PER_PREAD
        assert defaults.set("remote_io_max_concurrent_requests", 0) is None  # 0: no limit
        assert defaults.get("remote_io_max_concurrent_requests") == 0
    finally:
        for n, v in zip(REACTOR, before):
            defaults.set(n, v)


@pytest.mark.parametrize("name, value, error, words", [
    ("remote_io_num_reactors", 0, ValueError, "must be a positive integer"),
    ("remote_io_num_reactors", -1, OverflowError, "negative"),
    ("remote_io_num_reactors", 1 << 32, OverflowError, "too large"),
    ("remote_io_reactor_dispatch", 2, ValueError, "PER_CHUNK=0 or PER_PREAD=1"),
    ("remote_io_reactor_dispatch", "chunk", ValueError, "PER_CHUNK=0 or PER_PREAD=1"),
    ("remote_io_reactor_dispatch", 1.0, TypeError, "RemoteReactorDispatch"),
    ("remote_io_max_concurrent_requests", -1, OverflowError, "negative"),
    ("remote_io_max_concurrent_requests", "many", ValueError, "integer"),
])
def test_bad_values_are_typed_errors_naming_the_setting(name, value, error, words):
    before = defaults.get(name)
    with pytest.raises(error, match=words) as e:
        defaults.set(name, value)
    assert name in str(e.value)
    assert defaults.get(name) == before


def test_the_dict_form_refuses_them_and_changes_nothing():
    before = defaults.get("task_size")
    for updates in ({"remote_io_num_reactors": 2},
                    {"task_size": 1 << 20, "remote_io_max_concurrent_requests": 8,
                     "remote_io_reactor_dispatch": 1}):
        with pytest.raises(ValueError, match="not in a dict") as e:
            defaults.set(updates)
        for key in updates:
            assert (key in str(e.value)) == (key in REACTOR), (key, str(e.value))
    assert defaults.get("task_size") == before
    assert defaults.get("remote_io_num_reactors") == 1


def test_environment_is_honoured_and_a_bad_value_names_the_variable():
    code = ("import gpufile.defaults as d\n"
            "src = {n: s for n, _, s in d.report()}\n"
            "for n in ('remote_io_num_reactors', 'remote_io_reactor_dispatch',"
            " 'remote_io_max_concurrent_requests'):\n"
            "    print(n, repr(d.get(n)), src[n])\n")
    r = run_python("import warnings; warnings.simplefilter('error')\n" + code, {
        "KVIKIO_REMOTE_IO_NUM_REACTORS": "3",
        "KVIKIO_REMOTE_IO_REACTOR_DISPATCH": "Per_Pread",
        "GPUFILE_REMOTE_IO_MAX_CONCURRENT_REQUESTS": "7",
        "KVIKIO_REMOTE_IO_MAX_CONCURRENT_REQUESTS": "9",
    })
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "remote_io_num_reactors 3 env KVIKIO_REMOTE_IO_NUM_REACTORS",
        "remote_io_reactor_dispatch <RemoteReactorDispatch.PER_PREAD: 1> "
        "env KVIKIO_REMOTE_IO_REACTOR_DISPATCH",
        "remote_io_max_concurrent_requests 7 env GPUFILE_REMOTE_IO_MAX_CONCURRENT_REQUESTS",
    ]
    for var, value, words in [("KVIKIO_REMOTE_IO_NUM_REACTORS", "0", "positive integer"),
                              ("KVIKIO_REMOTE_IO_REACTOR_DISPATCH", "pread", "PER_PREAD"),
                              ("KVIKIO_REMOTE_IO_MAX_CONCURRENT_REQUESTS", "-3", "negative")]:
        r = run_python(code, {var: value})
        assert r.returncode != 0
        last = r.stderr.strip().splitlines()[-1]
        assert last.startswith("ValueError") and var in last and words in last, last


FIXED = """
import numpy as np
import gpufile
from gpufile import defaults, GpufileError
from gpufile._http_server import LocalHttpServer

def read(server):
    with gpufile.RemoteFile.open_http(server.url + "/a") as f:
        buf = np.empty(1000, dtype=np.uint8)
        assert f.read(buf) == 1000

def try_set(name, value):
    try:
        defaults.set(name, value)
        print(name, "set")
    except RuntimeError as e:
        print(name, type(e).__name__, isinstance(e, GpufileError), e)

with LocalHttpServer({root!r}) as server:
    read(server)  # EASY_THREADPOOL: KvikIO starts no reactor pool
    try_set("remote_io_num_reactors", 2)
    defaults.set("remote_io_backend", "MULTI_POLL")
    try_set("remote_io_num_reactors", 3)  # no read under MULTI_POLL yet
    read(server)
    for name, value in [("remote_io_num_reactors", 4), ("remote_io_reactor_dispatch", 1),
                        ("remote_io_max_concurrent_requests", 8)]:
        try_set(name, value)
    try:
        defaults.set({{"remote_io_num_reactors": 5}})
    except ValueError as e:
        print("dict", type(e).__name__)
    try_set("task_size", 1 << 20)
    print(defaults.get("remote_io_num_reactors"))
"""


def test_they_are_fixed_after_a_remote_read_under_multi_poll(tmp_path):
    (tmp_path / "a").write_bytes(bytes(range(256)) * 8)
    r = run_python(FIXED.format(root=str(tmp_path)))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[:2] == ["remote_io_num_reactors set", "remote_io_num_reactors set"]
    for line, name in zip(lines[2:5], REACTOR):
        assert line.startswith(f"{name} GpufileError True {name} cannot be changed after the "
                               "MULTI_POLL reactor pool has already started"), line
    assert lines[5:] == ["dict ValueError", "task_size set", "3"]


NOTICE = """
import numpy as np
import gpufile
from gpufile._http_server import LocalHttpServer
with LocalHttpServer({root!r}, range_support=False) as server:
    with gpufile.RemoteFile.open_http(server.url + "/a") as f:
        buf = np.empty(100, dtype=np.uint8)
        assert f.pread(buf, file_offset=5).get() == 100
        # The second read knows the server ignores Range, and says so.
        assert f.read(np.empty(1024, dtype=np.uint8)) == 1024
print("done")
"""


@pytest.fixture
def notice_code(tmp_path):
    (tmp_path / "a").write_bytes(bytes(range(256)) * 4)
    return NOTICE.format(root=str(tmp_path))


def _notices(text):
    return [line for line in text.splitlines()
            if line.startswith("[gpufile] [INFO]") and "ignores Range" in line]


def test_notices_go_to_the_log_file_at_info_and_below(tmp_path, notice_code):
    for level in ("INFO", "debug", "Trace"):
        log = tmp_path / f"{level}.log"
        log.write_text("left from an earlier run\n")
        r = run_python(notice_code, {"KVIKIO_LOG_LEVEL": level, "KVIKIO_LOG_FILE": str(log)})
        assert r.returncode == 0 and r.stdout.strip() == "done", r.stderr
        text = log.read_text()
        assert len(_notices(text)) == 1, text
        assert "earlier run" not in text  # overwritten, as KvikIO's log file is
        assert _notices(r.stderr) == [], r.stderr


def test_without_a_file_notices_go_to_stderr_and_gpufile_wins(tmp_path, notice_code):
    r = run_python(notice_code, {"KVIKIO_LOG_LEVEL": "ERROR", "GPUFILE_LOG_LEVEL": "info"})
    assert r.returncode == 0, r.stderr
    assert len(_notices(r.stderr)) == 1, r.stderr


def test_above_info_or_unset_nothing_is_written(tmp_path, notice_code):
    for env in ({"KVIKIO_LOG_LEVEL": "WARN", "KVIKIO_LOG_FILE": str(tmp_path / "w.log")},
                {"KVIKIO_LOG_LEVEL": "OFF"}, {"KVIKIO_LOG_FILE": str(tmp_path / "u.log")}):
        r = run_python(notice_code, env)
        assert r.returncode == 0 and r.stdout.strip() == "done", r.stderr
        assert "[gpufile]" not in r.stderr, r.stderr
    assert not (tmp_path / "w.log").exists() and not (tmp_path / "u.log").exists()


def test_a_log_file_that_cannot_be_opened_falls_back_to_stderr(tmp_path, notice_code):
    bad = tmp_path / "no-such-dir" / "x.log"
    r = run_python(notice_code, {"KVIKIO_LOG_LEVEL": "INFO", "KVIKIO_LOG_FILE": str(bad)})
    assert r.returncode == 0, r.stderr
    assert f"[gpufile] [WARN] cannot open KVIKIO_LOG_FILE={bad}" in r.stderr
    assert len(_notices(r.stderr)) == 1, r.stderr


def test_kvikios_conftest_setting_imports_without_a_warning():
    """KvikIO 26.10's conftest sets KVIKIO_LOG_LEVEL=WARN before importing, under
    ``filterwarnings = error``: an import warning would fail the whole suite's collection."""
    r = run_python("import gpufile, gpufile.defaults as d; print(d.get('task_size'))",
                   {"KVIKIO_LOG_LEVEL": "WARN", "PYTHONWARNINGS": "error"})
    assert r.returncode == 0, r.stderr
    assert r.stderr == "" and r.stdout.strip() == str(4 << 20)


@pytest.mark.parametrize("var, value, words", [
    ("KVIKIO_LOG_LEVEL", "WARNING", "TRACE, DEBUG, INFO, WARN, ERROR, CRITICAL or OFF"),
    ("GPUFILE_LOG_LEVEL", "loud", "TRACE, DEBUG, INFO, WARN, ERROR, CRITICAL or OFF"),
    ("KVIKIO_LOG_FILE", "", "empty"),
])
def test_a_bad_logger_variable_is_a_value_error_naming_it(var, value, words):
    r = run_python("import gpufile.defaults as d; d.get('task_size')", {var: value})
    assert r.returncode != 0
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("ValueError") and var in last and words in last, last
