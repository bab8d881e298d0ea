"""KvikIO's ``remote_io_backend`` setting and the CA bundle variables of remote files."""

import pytest

from gpufile import defaults
from gpufile.defaults import RemoteIOBackend
from conftest import run_python


def test_default_is_kvikio_s():
    assert defaults.get("remote_io_backend") is RemoteIOBackend.EASY_THREADPOOL
    assert int(RemoteIOBackend.EASY_THREADPOOL) == 0 and int(RemoteIOBackend.MULTI_POLL) == 1
    assert dict((n, s) for n, _, s in defaults.report())["remote_io_backend"] == "default"


@pytest.mark.parametrize("value", [RemoteIOBackend.MULTI_POLL, 1, "multi_poll", " MULTI_POLL "])
def test_set_accepts_enum_int_and_names(value):
    with defaults.set("remote_io_backend", value):
        assert defaults.get("remote_io_backend") is RemoteIOBackend.MULTI_POLL
    assert defaults.get("remote_io_backend") is RemoteIOBackend.EASY_THREADPOOL


@pytest.mark.parametrize("value", ["multi", "easy", "multipoll", "", 2])
def test_bad_value_is_a_value_error_naming_the_values(value):
    with pytest.raises(ValueError, match="EASY_THREADPOOL=0 or MULTI_POLL=1") as e:
        defaults.set("remote_io_backend", value)
    assert "remote_io_backend" in str(e.value)
    assert defaults.get("remote_io_backend") is RemoteIOBackend.EASY_THREADPOOL


def test_wrong_type_is_a_type_error():
    with pytest.raises(TypeError, match="RemoteIOBackend"):
        defaults.set("remote_io_backend", 1.5)


def test_env_is_honoured_and_bad_env_names_the_variable():
    code = ("import gpufile.defaults as d; b = d.get('remote_io_backend'); "
            "print(b.name, dict((n, s) for n, _, s in d.report())['remote_io_backend'])")
    r = run_python(code, {"KVIKIO_REMOTE_IO_BACKEND": "Multi_Poll"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["MULTI_POLL", "env", "KVIKIO_REMOTE_IO_BACKEND"]
    r = run_python(code, {"KVIKIO_REMOTE_IO_BACKEND": "multi"})
    assert r.returncode != 0
    assert "ValueError" in r.stderr and "KVIKIO_REMOTE_IO_BACKEND" in r.stderr
    assert "MULTI_POLL" in r.stderr


OPEN = ("import gpufile\n"
        "try:\n"
        "    gpufile.RemoteFile.open_http('https://127.0.0.1:9/x', nbytes=10)\n"
        "except ValueError as e:\n"
        "    print('ValueError:', e)\n")


def run_with_bundle(code, **bundle):
    """Runs code with only the given CA bundle variables set (an empty one counts as unset)."""
    env = {"CURL_CA_BUNDLE": "", "SSL_CERT_FILE": "", "SSL_CERT_DIR": "", "AWS_CA_BUNDLE": ""}
    env.update(bundle)
    return run_python(code, env)


@pytest.mark.parametrize("var", ["CURL_CA_BUNDLE", "SSL_CERT_FILE", "AWS_CA_BUNDLE"])
def test_missing_ca_bundle_is_a_value_error_naming_variable_and_file(tmp_path, var):
    missing = tmp_path / "absent.pem"
    r = run_with_bundle(OPEN, **{var: str(missing)})
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("ValueError:"), r.stdout
    assert var in r.stdout and str(missing) in r.stdout
    assert "cannot open the CA bundle" in r.stdout


def test_ca_bundle_without_certificates_is_an_error_and_the_first_variable_wins(tmp_path):
    empty = tmp_path / "empty.pem"
    empty.write_text("no certificates here\n")
    r = run_with_bundle(OPEN, CURL_CA_BUNDLE=str(empty), SSL_CERT_FILE=str(tmp_path / "x"))
    assert r.stdout.startswith("ValueError:"), (r.stdout, r.stderr)
    assert "CURL_CA_BUNDLE" in r.stdout and "holds no PEM certificate" in r.stdout


def test_a_valid_ca_bundle_opens():
    import pathlib
    bundle = (pathlib.Path(__file__).parents[1]
              / "crates/gpufile-remote/tests/data/test-ca-bundle.pem")
    r = run_with_bundle(OPEN + "else:\n    print('opened')\n", SSL_CERT_FILE=str(bundle))
    assert r.stdout.strip() == "opened", (r.stdout, r.stderr)


def test_a_bad_bundle_does_not_break_plain_http(tmp_path):
    """The bundle is read for https objects only: a plain-HTTP object opens whatever it says."""
    code = ("import gpufile\n"
            "f = gpufile.RemoteFile.open_http('http://127.0.0.1:9/x', nbytes=10)\n"
            "print('opened', f.nbytes())\n")
    r = run_with_bundle(code, CURL_CA_BUNDLE=str(tmp_path / "absent.pem"))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "opened 10"
