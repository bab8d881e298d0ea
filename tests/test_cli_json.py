"""Every `--json` of the CLI (and `as_dict()` of check/explain) against docs/json.md.

The schema is the documentation itself: the tables of docs/json.md are parsed here, and each
output must have exactly the documented fields with the documented types (a small checker,
rather than a jsonschema dependency and a second copy of the schema to keep in step).
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import gpufile

DOC = Path(__file__).resolve().parent.parent / "docs" / "json.md"


def load_schema():
    """`{object name: {field: type text}}` from the `### `name`` sections' tables."""
    objects, current = {}, None
    for line in DOC.read_text().splitlines():
        m = re.match(r"^### `([a-z0-9-]+)`", line)
        if m:
            current = objects.setdefault(m.group(1), {})
            continue
        m = re.match(r"^\| `([a-z_0-9]+)` \| `(.+?)` \|", line.replace("\\|", "¦"))
        if m and current is not None:
            current[m.group(1)] = m.group(2).replace("¦", "|")
    return objects


SCHEMA = load_schema()


def check(value, type_text, where="$"):
    """Asserts that `value` has the type `type_text` (docs/json.md's notation)."""
    alternatives = [t.strip() for t in type_text.split("|")]
    errors = []
    for t in alternatives:
        try:
            check_one(value, t, where)
            return
        except AssertionError as e:
            errors.append(str(e))
    raise AssertionError(f"{where}: {value!r} is not {type_text}: {errors}")


def check_one(value, t, where):
    simple = {"int": int, "number": (int, float), "string": str, "bool": bool, "object": dict}
    if t == "any":
        return
    if t == "null":
        assert value is None, where
    elif t in simple:
        assert isinstance(value, simple[t]), f"{where}: expected {t}"
        if t in ("int", "number"):
            assert not isinstance(value, bool), f"{where}: a bool is not {t}"
    elif t.startswith("[") and t.endswith("]"):
        assert isinstance(value, list), f"{where}: expected a list"
        for i, item in enumerate(value):
            check(item, t[1:-1], f"{where}[{i}]")
    elif t.startswith("map<") and t.endswith(">"):
        assert isinstance(value, dict), f"{where}: expected a map"
        for k, v in value.items():
            check(v, t[4:-1], f"{where}.{k}")
    elif t.startswith("{") and t.endswith("}"):
        check_object(value, t[1:-1], where)
    else:
        raise AssertionError(f"docs/json.md: unknown type {t!r}")


def check_object(value, name, where="$"):
    fields = SCHEMA[name]
    assert isinstance(value, dict), f"{where}: expected the object {name}"
    assert set(value) == set(fields), (
        f"{where} ({name}): undocumented {sorted(set(value) - set(fields))}, "
        f"missing {sorted(set(fields) - set(value))}")
    for field, t in fields.items():
        check(value[field], t, f"{where}.{field}")


def no_rust_leaks(value):
    text = json.dumps(value)
    assert '"Ok"' not in text and '"Err"' not in text, text


def cli(*args, env=None):
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("KVIKIO_", "GPUFILE_"))}
    clean.update(env or {})
    return subprocess.run([sys.executable, "-m", "gpufile", *args], capture_output=True,
                          env=clean, timeout=120)


def cli_json(*args, status=0, env=None):
    r = cli(*args, "--json", env=env)
    assert r.returncode == status, (r.returncode, r.stdout, r.stderr)
    out = json.loads(r.stdout)
    assert out["schema_version"] == 2
    no_rust_leaks(out)
    return out, r


@pytest.fixture
def data(tmp_path):
    p = tmp_path / "d.bin"
    p.write_bytes(os.urandom(3 << 20))
    return p


def test_the_documented_schema_is_complete():
    # Every object named in a type is defined, and every definition is used or is a command.
    used = {m for types in SCHEMA.values() for t in types.values()
            for m in re.findall(r"\{([a-z0-9-]+)\}", t)}
    # An outcome's value may be an object of this page, named in its meaning: `[{cufile-bar}]`.
    used |= set(re.findall(r"value: `\[?\{([a-z0-9-]+)\}\]?`", DOC.read_text()))
    assert used <= set(SCHEMA), used - set(SCHEMA)
    commands = {"config", "read", "check", "explain", "bench", "load", "digest", "verify",
                "error-output"}
    assert set(SCHEMA) - used <= commands | {"outcome"}, set(SCHEMA) - used - commands


def test_config_json():
    out, _ = cli_json("config", env={"KVIKIO_COMPAT_MODE": "off"})
    check_object(out, "config")
    assert out["command"] == "config"
    assert out["settings"]["compat_mode"] == {
        "value": "OFF", "source": "env KVIKIO_COMPAT_MODE", "error": None,
        "variables": ["GPUFILE_COMPAT_MODE", "KVIKIO_COMPAT_MODE"]}
    assert out["settings"]["task_size"]["value"] == 4 << 20
    assert out["error"] is None
    for setting in out["settings"].values():
        check_object(setting, "setting")


def test_config_json_with_a_bad_variable_shows_it_and_the_error():
    out, _ = cli_json("config", status=1, env={"GPUFILE_TASK_SIZE": "banana"})
    check_object(out, "config")
    check_object(out["error"], "error")
    assert out["error"]["type"] == "invalid-env" and "GPUFILE_TASK_SIZE" in out["error"]["message"]
    assert out["settings"]["task_size"]["value"] == "banana"
    assert out["settings"]["task_size"]["error"].startswith("expected a size")


def test_read_json(data):
    out, _ = cli_json("read", str(data), "--host", "--repeat", "2", "--offset", "1MiB",
                      "--verify")
    check_object(out, "read")
    assert out["bytes"] == 2 << 20 and out["offset"] == 1 << 20
    assert out["memory"] == "host" and out["device"] is None
    assert out["path"]["reason"]["kind"] == "host-buffer"
    assert out["verified"] is True and len(out["seconds_per_run"]) == 2
    assert out["observed"]["by_path"]["gpufile-posix"]["bytes"] == 4 << 20
    # The one throughput field agrees with the median time.
    assert out["throughput_gb_per_s"] == pytest.approx(out["bytes"] / out["seconds"] / 1e9)


def test_read_default_memory_json(data):
    out, _ = cli_json("read", str(data))
    check_object(out, "read")
    if out["memory"] == "host":  # no GPU here: the fallback says why
        assert out["memory_note"]


def test_check_json(data):
    out, _ = cli_json("check", str(data))
    check_object(out, "check")
    check_object(out["file"], "file-check", "$.file")
    assert [v["compat_mode"] for v in out["verdicts"]] == ["AUTO", "ON", "OFF"]
    on = out["verdicts"][1]
    assert on["path"] == {"backend": "gpufile-posix", "reason": {
        "kind": "compat-mode-on", "detail": None, "text": "compat_mode is ON"}}
    assert out["cufile_json"]["values"]["ok"] in (True, False)
    for name in ("libcuda", "libcufile", "cufile_properties", "cufile_parameters"):
        check_object(out[name], "outcome", f"$.{name}")


def test_check_json_shows_what_cufile_1_15_tells_or_not_in_this_cufile():
    out, _ = cli_json("check")
    items = {"cufile_bar_sizes": "cufile-bar", "cufile_p2p_flags": "cufile-p2p",
             "cufile_parameter_limits": "cufile-limit"}
    for name, item in items.items():
        check_object(out[name], "outcome", f"$.{name}")
        if out[name]["ok"]:
            for i, v in enumerate(out[name]["value"]):
                check_object(v, item, f"$.{name}[{i}]")
        else:
            assert out[name]["value"] is None
            if not out["libcufile"]["ok"]:
                assert out[name]["error"].startswith("not in this cuFile"), out[name]
    r = cli("check")
    text = r.stdout.decode()
    for label in ("cuFile BAR ", "cuFile P2P ", "cuFile limits"):
        line = next(l for l in text.splitlines() if l.startswith(label))
        if not out["libcufile"]["ok"]:
            assert line.endswith("not in this cuFile (libcufile not loaded)"), text


def test_check_without_cufile_json_uses_cufiles_defaults(tmp_path):
    missing = tmp_path / "cufile.json"
    out, _ = cli_json("check", env={"CUFILE_ENV_PATH_JSON": str(missing)})
    cj = out["cufile_json"]
    assert cj["path"] == str(missing) and cj["exists"] is False
    values = {kv["key"]: kv["value"] for kv in cj["values"]["value"]}
    assert values["execution.max_io_threads"] == "4"
    r = cli("check", env={"CUFILE_ENV_PATH_JSON": str(missing)})
    assert b"cuFile uses its built-in defaults" in r.stdout


def test_explain_json(data):
    out, _ = cli_json("explain", "--size", "1GiB", "--compat-mode", "off", "--cufile", "nvfs",
                      "--task-size", "4MiB", "--device", "0")
    check_object(out, "explain")
    p = out["prediction"]
    check_object(p["cufile"], "cufile-plan", "$.prediction.cufile")
    assert p["path"]["backend"] == "cufile"
    assert p["path"]["reason"]["kind"] == "compat-mode-off"
    assert p["tasks"] == {"task_size": 4 << 20, "count": 256,
                          "runs": [{"count": 256, "bytes": 4 << 20}]}
    assert p["cufile"]["pieces"] == [{"requests": 256, "piece_bytes": [4 << 20]}]
    assert out["observed"] is None

    out, _ = cli_json("explain", str(data), "--host", "--run", "--task-size", "1MiB")
    check_object(out, "explain")
    assert out["prediction"]["request"]["size"] == 3 << 20  # the file's size
    assert out["observed"]["by_path"]["gpufile-posix"]["tasks"] == 3
    assert out["observed"]["throughput_gb_per_s"] > 0

    out, _ = cli_json("explain", "--size", "1MiB", "--compat-mode", "off", "--cufile", "none",
                      "--device", "0")
    check_object(out, "explain")
    assert out["prediction"]["path"] is None and "cuFile" in out["prediction"]["error"]


def test_explain_json_settings_hold_the_setting_and_tasks_the_plan_s_task_size():
    # A read alone of 4 MiB over 4 workers is cut into 1 MiB tasks: the plan's task size, not
    # the setting (4 MiB, as `gpufile config` reports it).
    env = {"GPUFILE_TASK_SIZE": "4MiB"}
    config, _ = cli_json("config", env=env)
    out, _ = cli_json("explain", "--size", "4MiB", "--threads", "4", "--host", env=env)
    check_object(out, "explain")
    p = out["prediction"]
    assert p["settings"]["task_size"] == config["settings"]["task_size"]["value"] == 4 << 20
    assert p["tasks"]["task_size"] == 1 << 20
    assert p["tasks"]["runs"] == [{"count": 4, "bytes": 1 << 20}]
    # `--task-size` is the setting, and as the request's own task size the plan keeps it.
    out, _ = cli_json("explain", "--size", "4MiB", "--threads", "4", "--host",
                      "--task-size", "2MiB", env=env)
    assert out["prediction"]["settings"]["task_size"] == 2 << 20
    assert out["prediction"]["tasks"]["task_size"] == 2 << 20


def test_bench_json(tmp_path):
    f = tmp_path / "b.bin"
    out, _ = cli_json("bench", "--file", str(f), "--create", "--sizes", "64k,256k",
                      "--threads", "1,2", "--runs", "2", "--memory", "host")
    check_object(out, "bench")
    assert len(out["results"]) == 4
    r = out["results"][0]
    assert r["throughput_gb_per_s"] == pytest.approx(r["size"] / r["seconds"] / 1e9)
    assert r["path"]["reason"]["kind"] == "host-buffer"


@pytest.mark.parametrize("args, kind, errno", [
    (("read", "/nonexistent/x.bin"), "os", 2),
    (("check", "/nonexistent/x.bin"), "os", 2),
    (("explain", "/nonexistent/x.bin"), "os", 2),
    (("bench", "--file", "/nonexistent/x.bin", "--sizes", "1k"), "os", 2),
    (("read", "/proc/self/status"), "not-a-regular-file", None),
    (("read", "/dev/zero"), "not-a-regular-file", None),
])
def test_errors_are_json_objects_with_a_nonzero_exit(args, kind, errno):
    out, r = cli_json(*args, status=1)
    check_object(out, "error-output")
    assert out["command"] == args[0]
    e = out["error"]
    assert e["type"] == kind and e["errno"] == errno
    assert e["path"] == next(a for a in args if a.startswith("/"))
    assert e["message"] in r.stderr.decode()


def test_eof_errors_have_one_type(data):
    past_offset, _ = cli_json("read", str(data), "--offset", "4MiB", status=1)
    past_size, _ = cli_json("read", str(data), "--size", "4MiB", status=1)
    assert past_offset["error"]["type"] == past_size["error"]["type"] == "unexpected-eof"
    assert "past the end" in past_offset["error"]["message"]
    assert past_offset["error"]["path"] == str(data)


def test_usage_errors_are_json_too():
    out, r = cli_json("explain", "--size", "1GiB", "--threads", "0", status=1)
    check_object(out, "error-output")
    assert out["error"]["type"] == "invalid-argument" and "--threads" in out["error"]["message"]
    out, _ = cli_json("read", "--frobnicate", status=2)
    assert out["command"] == "read" and out["error"]["type"] == "usage"


def test_python_as_dict_follows_the_schema(data, tmp_path):
    c = gpufile.check(data).as_dict()
    check_object(c, "check")
    e = gpufile.explain(1 << 20, device=False, task_size=199).as_dict()
    check_object(e, "explain")
    assert e["prediction"]["tasks"]["count"] == -(-(1 << 20) // 199)
    e = gpufile.explain(3 << 20, device=False, file=data, run=True).as_dict()
    check_object(e, "explain")
    no_rust_leaks([c, e])
