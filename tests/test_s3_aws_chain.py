"""The AWS default credential chain for S3 objects given no key: each source alone, their order,
refresh of temporary credentials during a read, a wrong key, and no source at all. Reads go to
rclone's ``serve s3``, which verifies every SigV4 signature, so a read that passes proves the
chain's key signed it; STS (web identity) and IMDSv2 are moto's servers, on 127.0.0.1."""

import datetime
import json
import os
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

import gpufile
from test_s3_rclone import (  # noqa: F401 (rclone_endpoint: the fixture)
    KEY_ID, ROTATED_KEY_ID, ROTATED_SECRET, SECRET, rclone_endpoint)

MiB = 1 << 20
TOKEN = "container-auth-token-never-shown"


@pytest.fixture
def no_aws(tmp_path, monkeypatch):
    """No credentials anywhere: no AWS variable, a HOME without ~/.aws, IMDS off."""
    for k in list(os.environ):
        if k.startswith("AWS_"):
            monkeypatch.delenv(k)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    return tmp_path


@pytest.fixture
def s3(rclone_endpoint, no_aws, monkeypatch):  # noqa: F811
    """rclone as the S3 endpoint through the per-service variable, region us-east-1."""
    endpoint, data = rclone_endpoint
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", endpoint)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    payload = np.random.default_rng(7).integers(0, 256, 3 * MiB, dtype=np.uint8)
    (data / "bkt" / "chain.bin").write_bytes(payload.tobytes())
    return payload


def read_all(payload, **kw):
    f = gpufile.RemoteFile.open_s3("bkt", "chain.bin", **kw)
    out = np.zeros_like(payload)
    assert f.read(out) == payload.nbytes
    assert np.array_equal(out, payload)
    return f


def write_profile(path, text):
    path.write_text(text)
    return str(path)


class Container:
    """A container-credentials endpoint (ECS, EKS Pod Identity): it checks the authorization
    token and hands out credentials from `issue`, counting the calls."""

    def __init__(self, issue):
        self.issue = issue
        self.calls = 0
        self.bad_auth = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                if self.headers.get("Authorization") != TOKEN:
                    outer.bad_auth += 1
                    self.send_response(401)
                    self.end_headers()
                    return
                outer.calls += 1
                key, secret, life = outer.issue(outer.calls)
                exp = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=life)
                body = json.dumps({
                    "AccessKeyId": key, "SecretAccessKey": secret, "Token": "session-token",
                    "Expiration": exp.strftime("%Y-%m-%dT%H:%M:%SZ"),
                }).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/creds"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def container(no_aws, monkeypatch):
    made = []

    def start(issue):
        c = Container(issue)
        made.append(c)
        token_file = no_aws / "container-token"
        token_file.write_text(TOKEN)
        monkeypatch.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", c.url)
        monkeypatch.setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", str(token_file))
        return c

    yield start
    for c in made:
        c.close()


def test_environment_keys_alone_sign_the_reads(s3, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    assert read_all(s3).credentials_source() == "arguments or environment"


def test_a_shared_credentials_file_profile_alone_signs_the_reads(s3, no_aws, monkeypatch):
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", write_profile(
        no_aws / "credentials",
        f"[default]\naws_access_key_id = WRONG\naws_secret_access_key = wrong\n\n"
        f"[work]\naws_access_key_id = {KEY_ID}\naws_secret_access_key = {SECRET}\n"))
    # The region from the profile in the config file too.
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    monkeypatch.setenv("AWS_CONFIG_FILE", write_profile(
        no_aws / "config", "[profile work]\nregion = us-east-1\n"))
    monkeypatch.setenv("AWS_PROFILE", "work")
    f = read_all(s3)
    assert f.credentials_source() == "shared config/credentials files"
    assert SECRET not in repr(f) + str(f)


def test_a_profile_credential_process_alone_signs_the_reads(s3, no_aws, monkeypatch):
    script = no_aws / "creds.py"
    script.write_text("import json\nprint(json.dumps({'Version': 1, 'AccessKeyId': %r, "
                      "'SecretAccessKey': %r}))\n" % (KEY_ID, SECRET))
    monkeypatch.setenv("AWS_CONFIG_FILE", write_profile(
        no_aws / "config", f"[default]\ncredential_process = {sys.executable} {script}\n"))
    assert read_all(s3).credentials_source() == "shared config/credentials files"


def test_container_credentials_alone_sign_the_reads(s3, container):
    c = container(lambda n: (KEY_ID, SECRET, 3600))
    f = read_all(s3)
    assert f.credentials_source() == "container credentials"
    # A second object under the same environment shares the credentials: no second fetch.
    read_all(s3)
    assert c.calls == 1 and c.bad_auth == 0


def test_web_identity_through_sts_alone_gives_the_credentials(moto_endpoint, no_aws, monkeypatch):
    import boto3  # moto brings it

    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    s3c = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1",
                       aws_access_key_id="x", aws_secret_access_key="y")
    s3c.create_bucket(Bucket="webid")
    s3c.put_object(Bucket="webid", Key="o.bin", Body=b"web identity" * 100)
    token = no_aws / "token"
    token.write_text("a.jwt.token")
    monkeypatch.setenv("AWS_WEB_IDENTITY_TOKEN_FILE", str(token))
    monkeypatch.setenv("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/reader")
    monkeypatch.setenv("AWS_ROLE_SESSION_NAME", "gpufile-test")
    monkeypatch.setenv("AWS_ENDPOINT_URL_STS", moto_endpoint)
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", moto_endpoint)
    f = gpufile.RemoteFile.open_s3("webid", "o.bin")
    assert f.credentials_source() == "web identity (STS)"
    out = bytearray(f.nbytes())
    f.read(out)
    assert bytes(out) == b"web identity" * 100


def test_a_profile_role_through_sts_assume_role_gives_the_credentials(moto_endpoint, no_aws,
                                                                      monkeypatch):
    import boto3

    s3c = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1",
                       aws_access_key_id="x", aws_secret_access_key="y")
    s3c.create_bucket(Bucket="role")
    s3c.put_object(Bucket="role", Key="o.bin", Body=b"assumed role" * 100)
    monkeypatch.setenv("AWS_CONFIG_FILE", write_profile(
        no_aws / "config",
        "[profile base]\naws_access_key_id = AKIDBASE\naws_secret_access_key = base-secret\n\n"
        "[profile reader]\nrole_arn = arn:aws:iam::123456789012:role/reader\n"
        "source_profile = base\nregion = us-east-1\n"))
    monkeypatch.setenv("AWS_PROFILE", "reader")
    monkeypatch.setenv("AWS_ENDPOINT_URL_STS", moto_endpoint)
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", moto_endpoint)
    f = gpufile.RemoteFile.open_s3("role", "o.bin")
    assert f.credentials_source() == "shared config/credentials files"
    out = bytearray(f.nbytes())
    f.read(out)
    assert bytes(out) == b"assumed role" * 100
    assert "base-secret" not in repr(f) + str(f)


class Imds:
    """An EC2 instance metadata service answering IMDSv2 only: a session token from
    ``PUT /latest/api/token`` (with its TTL header), required on every ``GET``."""

    SESSION = "imds-session-token-never-shown"

    def __init__(self, role, key, secret):
        outer = self
        self.tokenless = 0

        class Handler(BaseHTTPRequestHandler):
            def reply(self, status, body=b"", headers=()):
                self.send_response(status)
                for k, v in headers:
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_PUT(self):
                ttl = self.headers.get("x-aws-ec2-metadata-token-ttl-seconds")
                if self.path != "/latest/api/token" or not ttl:
                    return self.reply(400)
                self.reply(200, outer.SESSION.encode(),
                           [("x-aws-ec2-metadata-token-ttl-seconds", ttl)])

            def do_GET(self):
                if self.headers.get("x-aws-ec2-metadata-token") != outer.SESSION:
                    outer.tokenless += 1
                    return self.reply(401)
                base = "/latest/meta-data/iam/security-credentials/"
                if self.path in (base, base.rstrip("/")):
                    return self.reply(200, role.encode())
                if self.path == base + role:
                    exp = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=6)
                    return self.reply(200, json.dumps({
                        "Code": "Success", "Type": "AWS-HMAC", "AccessKeyId": key,
                        "SecretAccessKey": secret, "Token": "session-token",
                        "Expiration": exp.strftime("%Y-%m-%dT%H:%M:%SZ"),
                    }).encode())
                self.reply(404)

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def test_imdsv2_alone_signs_the_reads(s3, monkeypatch):
    imds = Imds("reader-role", KEY_ID, SECRET)
    try:
        monkeypatch.delenv("AWS_EC2_METADATA_DISABLED")
        monkeypatch.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.url)
        f = read_all(s3)
        assert f.credentials_source() == "EC2 instance metadata (IMDSv2)"
        assert imds.tokenless == 0
    finally:
        imds.server.shutdown()
        imds.server.server_close()


def test_the_chain_takes_its_sources_in_the_sdks_order(s3, no_aws, container, monkeypatch):
    c = container(lambda n: ("WRONG", "wrong", 3600))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", write_profile(
        no_aws / "credentials",
        f"[default]\naws_access_key_id = {KEY_ID}\naws_secret_access_key = {SECRET}\n"))
    # The profile comes before the container: the container's wrong key is never asked for.
    assert read_all(s3).credentials_source() == "shared config/credentials files"
    assert c.calls == 0
    # The environment comes before the profile, arguments before the environment.
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", write_profile(
        no_aws / "credentials2", "[default]\naws_access_key_id = W\naws_secret_access_key = w\n"))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "WRONG-ENV")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong-env")
    f = read_all(s3, aws_access_key_id=KEY_ID, aws_secret_access_key=SECRET)
    assert f.credentials_source() == "arguments or environment"
    assert c.calls == 0


def rotating(n):
    """The n-th issue of credentials that live two seconds: the two accepted keys in turn."""
    return (KEY_ID, SECRET, 2) if n % 2 else (ROTATED_KEY_ID, ROTATED_SECRET, 2)


def test_credentials_expiring_in_seconds_are_refreshed_and_rotated_during_reads(s3, container):
    # A refresh comes halfway through the two seconds: reads of one open object spread over
    # more than that are signed with each new key in turn (rclone checks each signature).
    c = container(rotating)
    with gpufile.defaults.set({"num_threads": 4, "task_size": 256 << 10}):
        f = read_all(s3)
        for _ in range(3):
            time.sleep(1.2)
            out = np.zeros_like(s3)
            assert f.read(out) == s3.nbytes and np.array_equal(out, s3)
    assert c.calls >= 4, c.calls


def test_each_request_of_one_multi_part_read_takes_the_current_credentials(s3, container):
    # Credentials already due for refresh (their expiry is now): every ranged GET of the one
    # read fetches again and is signed with the next of the two keys; rclone accepts each.
    c = container(lambda n: rotating(n)[:2] + (0,))
    with gpufile.defaults.set({"num_threads": 1, "task_size": 256 << 10}):
        f = gpufile.RemoteFile.open_s3("bkt", "chain.bin")
        before = c.calls
        out = np.zeros_like(s3)
        assert f.read(out) == s3.nbytes and np.array_equal(out, s3)
    assert c.calls - before >= s3.nbytes // (256 << 10), (before, c.calls)


def test_credentials_are_refreshed_and_rotated_during_a_multipart_upload(s3, rclone_endpoint,
                                                                         container):
    _, data = rclone_endpoint
    c = container(rotating)
    with gpufile.RemoteFile.open_s3("bkt", "up.bin", mode="w") as w:
        assert w.credentials_source() == "container credentials"
        part = w.part_size()
        payload = np.random.default_rng(3).integers(0, 256, 3 * part, dtype=np.uint8)
        for i in range(3):
            w.write(payload[i * part:(i + 1) * part], file_offset=i * part)
            time.sleep(1.2)
    assert (data / "bkt" / "up.bin").read_bytes() == payload.tobytes()
    assert c.calls >= 4, c.calls


def test_a_wrong_key_from_the_chain_is_a_clear_403(s3, container):
    container(lambda n: (KEY_ID, "wrong-secret-never-shown", 3600))
    with pytest.raises(RuntimeError) as e:
        gpufile.RemoteFile.open_s3("bkt", "chain.bin").nbytes()
    text = str(e.value) + repr(e.value)
    assert "403" in text
    assert "wrong-secret-never-shown" not in text and TOKEN not in text


def test_no_source_at_all_names_the_sources_tried(s3):
    with pytest.raises(Exception) as e:
        gpufile.RemoteFile.open_s3("bkt", "chain.bin")
    text = str(e.value)
    for source in ["arguments", "environment", "shared config/credentials files",
                   "web identity", "container credentials", "EC2 instance metadata"]:
        assert source in text, text


def test_the_cli_read_report_names_the_source_never_the_key(s3, container):
    import subprocess

    from test_cli_json import check_object

    container(lambda n: (KEY_ID, SECRET, 3600))
    r = subprocess.run([sys.executable, "-m", "gpufile", "read", "s3://bkt/chain.bin", "--json"],
                       capture_output=True, timeout=120)
    assert r.returncode == 0, (r.stdout, r.stderr)
    out = json.loads(r.stdout)
    check_object(out["remote"], "read-remote")
    assert out["remote"]["credentials"] == "container credentials"
    text = subprocess.run([sys.executable, "-m", "gpufile", "read", "s3://bkt/chain.bin"],
                          capture_output=True, timeout=120)
    assert b"credentials container credentials" in text.stdout, text.stdout
    for secret in (SECRET, TOKEN):
        assert secret.encode() not in r.stdout + r.stderr + text.stdout + text.stderr


# --- Credential sources that fail or hang: bounded, interruptible, never leaking, never
# --- read anonymously behind the user's back.

try:
    from conftest import time_scale
except ImportError:  # the shared helper may not be there yet
    def time_scale() -> float:
        return float(os.environ.get("GPUFILE_TEST_TIME_SCALE", "1"))

HELPER_SECRET = "helper-secret-printed-on-failure"


class Silent:
    """A server on 127.0.0.1 that accepts connections and never answers: ``got`` is set once
    one arrived (an STS, IMDS or metadata server that hangs)."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.got, self.conns = threading.Event(), []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            self.got.set()

    def close(self):
        self.sock.close()
        for c in self.conns:
            c.close()


class Public:
    """An S3-like server on 127.0.0.1 that serves every object to anyone (a public bucket),
    recording the requests: an anonymous read would succeed here."""

    BODY = b"public bytes" * 10

    def __init__(self):
        outer = self
        self.requests = []

        class Handler(BaseHTTPRequestHandler):
            def do_HEAD(self):
                outer.requests.append(("HEAD", self.path, self.headers.get("Authorization")))
                self.send_response(200)
                self.send_header("Content-Length", str(len(outer.BODY)))
                self.end_headers()

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def public(no_aws, monkeypatch):
    p = Public()
    monkeypatch.setenv("AWS_ENDPOINT_URL", p.url)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    yield p
    p.close()


def failing_helper(directory) -> str:
    """A credential_process that prints a secret to stderr and exits 1."""
    script = directory / "failing_helper.py"
    script.write_text(f"import sys\nprint({HELPER_SECRET!r}, file=sys.stderr)\nsys.exit(1)\n")
    return f"{sys.executable} {script}"


def hanging_helper(directory) -> tuple[str, object]:
    """A credential_process that writes its pid to a file, then sleeps forever: (the command,
    the pid file)."""
    pid_file = directory / "helper.pid"
    script = directory / "hanging_helper.py"
    script.write_text(f"import os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
                      "time.sleep(3600)\n")
    return f"{sys.executable} {script}", pid_file


def test_a_failing_credential_process_is_an_error_that_never_shows_its_stderr(public, no_aws,
                                                                             monkeypatch):
    monkeypatch.setenv("AWS_CONFIG_FILE", write_profile(
        no_aws / "config", f"[default]\ncredential_process = {failing_helper(no_aws)}\n"))
    for open_ in (lambda: gpufile.RemoteFile.open_s3_url("s3://bkt/o.bin"),
                  lambda: gpufile.RemoteFile.open("s3://bkt/o.bin")):
        with pytest.raises(RuntimeError) as e:
            open_()
        text = str(e.value) + repr(e.value)
        assert "S3 credentials from shared config/credentials files" in text, text
        assert "exit status: 1" in text and "stderr is not shown" in text, text
        assert HELPER_SECRET not in text
    # Not read anonymously instead.
    assert public.requests == []


def test_auto_open_with_a_profile_that_does_not_exist_is_an_error_not_an_anonymous_read(
        public, monkeypatch):
    monkeypatch.setenv("AWS_PROFILE", "no-such-profile")
    with pytest.raises(RuntimeError, match="the profile \"no-such-profile\" named by AWS_PROFILE "
                                           "does not exist"):
        gpufile.RemoteFile.open("s3://bkt/o.bin")
    assert public.requests == []


def test_auto_open_without_any_source_still_reads_a_public_bucket_anonymously(public):
    f = gpufile.RemoteFile.open("s3://bkt/o.bin")
    assert f.nbytes() == len(Public.BODY)
    assert f.remote_endpoint_type() == gpufile.RemoteEndpointType.S3_PUBLIC
    assert public.requests == [("HEAD", "/bkt/o.bin", None)]


class FailingImds(Imds):
    """IMDSv2 that hands out its session token, then answers the credentials request 400 (not
    retried, unlike a 5xx) with secrets in its headers and body."""

    def __init__(self):
        super().__init__("role", "AKID", "imds-secret-in-body")
        handler = self.server.RequestHandlerClass

        def do_GET(h):
            body = b'{"Code": "Failure", "Message": "imds-secret-in-body"}'
            h.send_response(400)
            h.send_header("X-Leak", "imds-secret-in-header")
            h.send_header("Content-Length", str(len(body)))
            h.end_headers()
            h.wfile.write(body)

        handler.do_GET = do_GET


def test_an_imds_error_answer_is_summarised_never_shown_raw(no_aws, monkeypatch):
    imds = FailingImds()
    try:
        monkeypatch.delenv("AWS_EC2_METADATA_DISABLED")
        monkeypatch.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.url)
        monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
        monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
        with pytest.raises(RuntimeError) as e:
            gpufile.RemoteFile.open_s3_url("s3://bkt/o.bin")
    finally:
        imds.server.shutdown()
        imds.server.server_close()
    text = str(e.value) + repr(e.value)
    assert "EC2 instance metadata (IMDSv2)" in text and "(code: 400)" in text, text
    for secret in ("imds-secret-in-body", "imds-secret-in-header", Imds.SESSION):
        assert secret not in text, text


OPEN_SCRIPT = """
import gpufile
try:
    gpufile.RemoteFile.open({url!r})
except KeyboardInterrupt:
    print("KeyboardInterrupt", flush=True)
    raise
print("returned", flush=True)
"""


def pid_written(pid_file):
    """An event set once the helper wrote its pid (it runs)."""
    ev = threading.Event()

    def poll():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if pid_file.exists() and pid_file.read_text():
                ev.set()
                return
            time.sleep(0.02)

    threading.Thread(target=poll, daemon=True).start()
    return ev


def ended(pid: int) -> bool:
    """Whether process `pid` has ended (gone, or a zombie left to be reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def wait_ended(pid: int, within: float) -> bool:
    deadline = time.monotonic() + within
    while not ended(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_ctrl_c_ends_an_open_waiting_on_a_credential_process_and_kills_it(public, no_aws,
                                                                        monkeypatch):
    from conftest import interrupt_when

    command, pid_file = hanging_helper(no_aws)
    monkeypatch.setenv("AWS_CONFIG_FILE", write_profile(
        no_aws / "config", f"[default]\ncredential_process = {command}\n"))
    out, err, elapsed = interrupt_when(pid_written(pid_file), OPEN_SCRIPT.format(url="s3://bkt/o"),
                                       "waiting on a credential_process")
    assert elapsed < 5.0 * time_scale(), f"Ctrl-C took {elapsed:.2f} s"
    assert "KeyboardInterrupt" in out and "KeyboardInterrupt" in err, (out, err)
    assert "panicked" not in err, err
    pid = int(pid_file.read_text())
    assert wait_ended(pid, 5.0 * time_scale()), f"the credential_process {pid} still runs"
    assert public.requests == []


def test_ctrl_c_ends_an_open_waiting_on_an_sts_that_never_answers(public, no_aws, monkeypatch):
    from conftest import interrupt_when

    sts = Silent()
    try:
        token = no_aws / "token"
        token.write_text("a.jwt.token")
        monkeypatch.setenv("AWS_WEB_IDENTITY_TOKEN_FILE", str(token))
        monkeypatch.setenv("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/reader")
        monkeypatch.setenv("AWS_ENDPOINT_URL_STS", sts.url)
        out, err, elapsed = interrupt_when(sts.got, OPEN_SCRIPT.format(url="s3://bkt/o"),
                                           "waiting on STS")
    finally:
        sts.close()
    assert elapsed < 5.0 * time_scale(), f"Ctrl-C took {elapsed:.2f} s"
    assert "KeyboardInterrupt" in out and "KeyboardInterrupt" in err, (out, err)
    assert "panicked" not in err, err
    assert public.requests == []


def gpufile_cli(*args):
    import subprocess

    return subprocess.run([sys.executable, "-m", "gpufile", *args], capture_output=True,
                          timeout=120)


def test_cli_read_with_a_profile_that_does_not_exist_is_an_error_not_an_anonymous_read(
        public, monkeypatch):
    monkeypatch.setenv("AWS_PROFILE", "no-such-profile")
    r = gpufile_cli("read", "s3://bkt/o.bin", "--json")
    assert r.returncode == 1, (r.stdout, r.stderr)
    error = json.loads(r.stdout)["error"]
    assert "named by AWS_PROFILE does not exist" in error["message"], error
    assert public.requests == []


def test_cli_read_with_a_failing_credential_process_never_shows_its_stderr(public, no_aws,
                                                                          monkeypatch):
    monkeypatch.setenv("AWS_CONFIG_FILE", write_profile(
        no_aws / "config", f"[default]\ncredential_process = {failing_helper(no_aws)}\n"))
    r = gpufile_cli("read", "s3://bkt/o.bin")
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert b"exit status: 1" in r.stderr, r.stderr
    assert HELPER_SECRET.encode() not in r.stdout + r.stderr
    assert public.requests == []


def test_ctrl_c_ends_cli_read_waiting_on_a_credential_process(public, no_aws, monkeypatch):
    import signal
    import subprocess

    command, pid_file = hanging_helper(no_aws)
    monkeypatch.setenv("AWS_CONFIG_FILE", write_profile(
        no_aws / "config", f"[default]\ncredential_process = {command}\n"))
    proc = subprocess.Popen([sys.executable, "-m", "gpufile", "read", "s3://bkt/o.bin"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert pid_written(pid_file).wait(60), "the credential_process never ran"
        time.sleep(0.3)
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)
        elapsed = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 128 + signal.SIGINT, (proc.returncode, out, err)
    assert b"interrupted (SIGINT)" in err and b"panicked" not in err, err
    assert elapsed < 5.0 * time_scale(), f"Ctrl-C took {elapsed:.2f} s"
    pid = int(pid_file.read_text())
    assert wait_ended(pid, 5.0 * time_scale()), f"the credential_process {pid} still runs"
    assert public.requests == []


REFRESH_HELPER = """
import datetime, json, os, time
if not os.path.exists({marker!r}):
    open({marker!r}, "w").close()
    exp = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=1)
    print(json.dumps({{"Version": 1, "AccessKeyId": "AKIDREFRESH", "SecretAccessKey": "s",
                      "SessionToken": "t", "Expiration": exp.strftime("%Y-%m-%dT%H:%M:%SZ")}}))
else:
    open({pid!r}, "w").write(str(os.getpid()))
    time.sleep(3600)
"""

READ_SCRIPT = """
import time
import gpufile
f = gpufile.RemoteFile.open_s3_url("s3://refresh/o.bin")
time.sleep(1.5)  # the credentials are due for refresh
buf = bytearray(f.nbytes())
try:
    with gpufile.defaults.set({"num_threads": 4, "task_size": 1 << 20}):
        f.read(buf)
except KeyboardInterrupt:
    print("KeyboardInterrupt", flush=True)
    raise
print("returned", flush=True)
"""


def test_ctrl_c_ends_a_read_whose_credential_refresh_waits_on_a_credential_process(
        moto_endpoint, no_aws, monkeypatch):
    # The first call of the helper gives credentials that expire in a second; the refresh
    # during the read runs it again, and it never exits.
    import boto3
    from conftest import interrupt_when

    boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1",
                 aws_access_key_id="x", aws_secret_access_key="y").create_bucket(Bucket="refresh")
    boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1",
                 aws_access_key_id="x", aws_secret_access_key="y").put_object(
        Bucket="refresh", Key="o.bin", Body=b"r" * (4 * MiB))
    pid_file = no_aws / "refresh.pid"
    script = no_aws / "refresh_helper.py"
    script.write_text(REFRESH_HELPER.format(marker=str(no_aws / "first-done"), pid=str(pid_file)))
    monkeypatch.setenv("AWS_CONFIG_FILE", write_profile(
        no_aws / "config", f"[default]\ncredential_process = {sys.executable} {script}\n"))
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)
    out, err, elapsed = interrupt_when(pid_written(pid_file), READ_SCRIPT,
                                       "reading while a credential refresh waits")
    assert elapsed < 5.0 * time_scale(), f"Ctrl-C took {elapsed:.2f} s"
    assert "KeyboardInterrupt" in out and "KeyboardInterrupt" in err, (out, err)
    assert "panicked" not in err, err
    pid = int(pid_file.read_text())
    assert wait_ended(pid, 5.0 * time_scale()), f"the credential_process {pid} still runs"
