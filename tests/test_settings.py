import pytest

import gpufile
import gpufile as kvikio
from gpufile import defaults
from conftest import run_python


def test_spec_step2_snippet():
    """The spec's Step 2 with `import gpufile as kvikio`: AUTO and 16384."""
    assert isinstance(kvikio.__version__, str) and kvikio.__version__
    assert defaults.get("compat_mode").name == "AUTO"
    assert defaults.get("gds_threshold") == 16384
    defaults.set({"task_size": 1024**3, "num_threads": 8})
    assert defaults.get("task_size") == 1024**3
    assert defaults.get("num_threads") == 8
    defaults.set("compat_mode", kvikio.CompatMode.OFF)
    assert defaults.get("compat_mode") is kvikio.CompatMode.OFF


def test_defaults():
    assert defaults.get("task_size") == 4 * 1024**2
    assert defaults.get("bounce_buffer_size") == 16 * 1024**2
    assert 1 <= defaults.get("num_threads") <= 16
    assert defaults.get("compat_mode") == gpufile.CompatMode.AUTO == 2
    assert int(gpufile.CompatMode.OFF) == 0 and int(gpufile.CompatMode.ON) == 1
    assert defaults.get("http_status_codes") == [429, 500, 502, 503, 504]


def test_set_as_nesting_context_manager_restores():
    before = defaults.get("task_size")
    with defaults.set("task_size", 1 << 20):
        assert defaults.get("task_size") == 1 << 20
        with defaults.set({"task_size": 199, "num_threads": 3}):
            assert defaults.get("task_size") == 199
            assert defaults.get("num_threads") == 3
        assert defaults.get("task_size") == 1 << 20
    assert defaults.get("task_size") == before
    assert dict((n, s) for n, _, s in defaults.report())["task_size"] != "set"


@pytest.mark.parametrize("text,mode", [
    ("on", "ON"), ("ON", "ON"), ("true", "ON"), ("Yes", "ON"), ("1", "ON"),
    ("off", "OFF"), ("False", "OFF"), ("NO", "OFF"), ("0", "OFF"), ("auto", "AUTO"),
])
def test_compat_mode_strings(text, mode):
    with defaults.set("compat_mode", text):
        assert defaults.get("compat_mode").name == mode


def test_compat_mode_ints_and_bools():
    with defaults.set("compat_mode", 1):
        assert defaults.get("compat_mode") is gpufile.CompatMode.ON
    with defaults.set("compat_mode", False):
        assert defaults.get("compat_mode") is gpufile.CompatMode.OFF


@pytest.mark.parametrize("name,value,exc", [
    ("task_size", 0, ValueError),
    ("task_size", -1, ValueError),
    ("num_threads", 0, ValueError),
    ("num_threads", 100000, ValueError),
    ("compat_mode", 7, ValueError),
    ("compat_mode", "maybe", ValueError),
    ("task_size", 1.5, TypeError),
    ("task_size", None, TypeError),
    ("gds_threshold", "lots", ValueError),
    ("http_status_codes", [42], ValueError),
    ("auto_direct_io_read", "perhaps", ValueError),
])
def test_bad_values_raise_at_set_and_change_nothing(name, value, exc):
    before = defaults.report()
    with pytest.raises(exc, match=name):
        defaults.set(name, value)
    assert defaults.report() == before


def test_set_is_all_or_nothing():
    before = defaults.get("task_size")
    with pytest.raises(ValueError):
        defaults.set({"task_size": 1024, "num_threads": 0})
    assert defaults.get("task_size") == before


def test_unknown_name_is_keyerror():
    with pytest.raises(KeyError, match="task_size"):
        defaults.get("colour")
    with pytest.raises(KeyError):
        defaults.set("colour", 1)


def test_size_strings():
    with defaults.set({"task_size": "2MiB", "gds_threshold": "0"}):
        assert defaults.get("task_size") == 2 << 20
        assert defaults.get("gds_threshold") == 0


def test_report_sources():
    with defaults.set("num_threads", 5):
        sources = {n: s for n, _, s in defaults.report()}
        assert sources["num_threads"] == "set"
        assert sources["gds_threshold"] == "default"


def test_env_variables_and_precedence():
    code = ("import gpufile.defaults as d; "
            "print(d.get('compat_mode').name, d.get('task_size'), d.get('num_threads'), "
            "d.get('gds_threshold'), d.get('bounce_buffer_size'), d.get('auto_direct_io_read'))")
    r = run_python(code, {
        "KVIKIO_COMPAT_MODE": "ON", "KVIKIO_TASK_SIZE": "1048576", "GPUFILE_TASK_SIZE": "2097152",
        "KVIKIO_NTHREADS": "3", "KVIKIO_GDS_THRESHOLD": "4096",
        "KVIKIO_BOUNCE_BUFFER_SIZE": "8MiB", "KVIKIO_AUTO_DIRECT_IO_READ": "true",
    })
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["ON", "2097152", "3", "4096", "8388608", "True"]
    r = run_python("import gpufile.defaults as d; print(d.get('num_threads'))",
                   {"KVIKIO_NUM_THREADS": "6"})
    assert r.stdout.strip() == "6", r.stderr


def test_bad_env_value_names_the_variable():
    r = run_python("import gpufile.defaults as d; d.get('task_size')",
                   {"KVIKIO_TASK_SIZE": "zero"})
    assert r.returncode != 0
    assert "ValueError" in r.stderr and "KVIKIO_TASK_SIZE" in r.stderr and "zero" in r.stderr


def test_bad_env_value_is_one_error_once():
    env = {"KVIKIO_COMPAT_MODE": "maybe"}
    r = run_python("import gpufile", env)  # nothing reads the settings: nothing to report
    assert (r.returncode, r.stderr) == (0, "")
    r = run_python("import gpufile.defaults as d; d.get('compat_mode')", env)
    assert r.returncode == 1
    assert r.stderr.count("Traceback") == 1 and "atexit" not in r.stderr, r.stderr
    assert r.stderr.count('KVIKIO_COMPAT_MODE="maybe" is invalid') == 1, r.stderr


def test_a_bad_env_value_fails_every_call_and_set_until_the_variable_is_fixed():
    """What the README says: each call that needs the settings raises the same ValueError (not
    only the first), `defaults.set` too (it cannot override the variable, whichever setting it
    names), and a process that fixes its environment goes on."""
    code = """
import os
import gpufile.defaults as d
for call in (lambda: d.get("num_threads"), lambda: d.get("task_size"),
             lambda: d.set("num_threads", 4), lambda: d.set({"task_size": "1MiB"})):
    try:
        call()
        print("no error")
    except ValueError as e:
        print(e)
os.environ["KVIKIO_NTHREADS"] = "3"
print(d.get("num_threads"))
"""
    r = run_python(code, {"KVIKIO_NTHREADS": "abc"})
    assert r.returncode == 0, r.stderr
    error = ('environment variable KVIKIO_NTHREADS="abc" is invalid: expected an integer from 1 '
             'to 1024 (threads)')
    assert r.stdout.splitlines() == [error] * 4 + ["3"], r.stdout


def test_unknown_env_variable_warns_once_with_the_nearest_name():
    r = run_python("import gpufile, gpufile.defaults as d; import gpufile; print(d.get('num_threads'))",
                   {"KVIKIO_NTHREAD": "8", "GPUFILE_CUFILE_PATH": "/nonexistent",
                    "KVIKIO_REMOTE_VERBOSE": "1", "KVIKIO_WEBHDFS_USERNAME": "me"})
    assert r.returncode == 0, r.stderr
    text = ("UserWarning: environment variable KVIKIO_NTHREAD is not one gpufile reads; "
            "did you mean KVIKIO_NTHREADS?")
    assert r.stderr.count(text) == 1, r.stderr
    assert r.stderr.startswith("<string>:1: "), r.stderr  # the importing line, not gpufile's
    assert "CUFILE_PATH" not in r.stderr and "REMOTE" not in r.stderr and "WEBHDFS" not in r.stderr
