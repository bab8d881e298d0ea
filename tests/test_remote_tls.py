"""HTTPS reads from a server on 127.0.0.1 whose certificate is signed by a CA made here, trusted
through KvikIO's variables: SSL_CERT_DIR (a directory of PEM files), SSL_CERT_FILE and
CURL_CA_BUNDLE (a PEM file, which win over the directory), and nothing else."""

import datetime
import ipaddress
import ssl
import threading
from http.server import ThreadingHTTPServer

import numpy as np
import pytest
try:  # the tests make their certificates with it; without it they skip, saying so
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
except ImportError:
    x509 = None

import gpufile
from conftest import pattern
from gpufile._http_server import RangeRequestHandler

pytestmark = pytest.mark.skipif(x509 is None, reason="cryptography is not installed (the TLS "
                                "tests make their certificates with it)")
CRYPTOGRAPHY = x509 is not None

CA_VARS = ("CURL_CA_BUNDLE", "SSL_CERT_FILE", "SSL_CERT_DIR", "AWS_CA_BUNDLE")


def _name(cn: str) -> "x509.Name":
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def make_ca(cn: str):
    """A self-signed CA: (certificate, private key)."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(_name(cn))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                          content_commitment=False, key_encipherment=False,
                          data_encipherment=False, key_agreement=False,
                          encipher_only=False, decipher_only=False),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return cert, key


def make_leaf(ca_cert, ca_key):
    """A server certificate for 127.0.0.1 signed by the CA: (certificate, private key)."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("127.0.0.1"))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return cert, key


def pem(cert) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


@pytest.fixture
def https(tmp_path, monkeypatch):
    """An HTTPS server with range support: (url of a 10,007-byte file, its bytes, CA PEM)."""
    for var in CA_VARS:
        monkeypatch.delenv(var, raising=False)
    ca_cert, ca_key = make_ca("gpufile test CA")
    leaf, leaf_key = make_leaf(ca_cert, ca_key)
    served = tmp_path / "served"
    served.mkdir()
    data = pattern(10_007, 11)
    data.tofile(served / "a.bin")
    chain = tmp_path / "server.pem"
    chain.write_bytes(pem(leaf) + pem(ca_cert))
    key = tmp_path / "server.key"
    key.write_bytes(leaf_key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(chain, key)
    httpd = ThreadingHTTPServer(
        ("127.0.0.1", 0), lambda *a, **k: RangeRequestHandler(*a, directory=str(served), **k))
    httpd.daemon_threads = True
    httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{httpd.server_address[1]}/a.bin", data, pem(ca_cert)
    finally:
        httpd.shutdown()
        httpd.server_close()


def read_all(url: str) -> np.ndarray:
    with gpufile.defaults.set({"num_threads": 3, "task_size": 1000}):
        with gpufile.RemoteFile.open_http(url) as f:
            out = np.empty(f.nbytes(), dtype=np.uint8)
            assert f.read(out) == out.nbytes
    return out


def test_ssl_cert_dir_trusts_its_certificates(https, tmp_path, monkeypatch):
    url, data, ca = https
    certs = tmp_path / "certs"
    certs.mkdir()
    (certs / "test-ca.pem").write_bytes(ca)
    (certs / "README").write_text("not a certificate: skipped")
    monkeypatch.setenv("SSL_CERT_DIR", str(certs))
    np.testing.assert_array_equal(read_all(url), data)


def test_ssl_cert_dir_with_several_directories(https, tmp_path, monkeypatch):
    url, data, ca = https
    empty, certs = tmp_path / "empty", tmp_path / "certs"
    empty.mkdir()
    certs.mkdir()
    (certs / "5ed36f99.0").write_bytes(ca)  # c_rehash's naming
    monkeypatch.setenv("SSL_CERT_DIR", f"{empty}:{certs}")
    np.testing.assert_array_equal(read_all(url), data)


def test_unknown_ca_is_refused_with_the_url(https):
    url, _, _ = https
    with pytest.raises(RuntimeError, match="certificate") as e:
        gpufile.RemoteFile.open_http(url)
    assert e.match(url)


@pytest.mark.parametrize("var", ["SSL_CERT_FILE", "CURL_CA_BUNDLE"])
def test_a_bundle_file_wins_over_the_directory(https, tmp_path, monkeypatch, var):
    url, data, ca = https
    certs = tmp_path / "certs"
    certs.mkdir()
    (certs / "test-ca.pem").write_bytes(ca)
    other = tmp_path / "other.pem"
    other.write_bytes(pem(make_ca("another CA")[0]))
    monkeypatch.setenv("SSL_CERT_DIR", str(certs))
    monkeypatch.setenv(var, str(other))
    with pytest.raises(RuntimeError, match="certificate"):
        gpufile.RemoteFile.open_http(url)
    monkeypatch.setenv(var, str(certs / "test-ca.pem"))
    np.testing.assert_array_equal(read_all(url), data)


def test_ssl_cert_dir_without_certificates_is_a_clear_error(https, tmp_path, monkeypatch):
    url, _, _ = https
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("no certificate here")
    monkeypatch.setenv("SSL_CERT_DIR", str(empty))
    with pytest.raises(ValueError, match="SSL_CERT_DIR") as e:
        gpufile.RemoteFile.open_http(url)
    assert e.match("no PEM certificate")
    monkeypatch.setenv("SSL_CERT_DIR", str(tmp_path / "absent"))
    with pytest.raises(ValueError, match="cannot list the CA directory"):
        gpufile.RemoteFile.open_http(url)


def test_plain_http_ignores_a_bad_ssl_cert_dir(tmp_path, monkeypatch):
    from gpufile._http_server import LocalHttpServer

    data = pattern(100, 12)
    data.tofile(tmp_path / "a")
    monkeypatch.setenv("SSL_CERT_DIR", str(tmp_path / "absent"))
    with LocalHttpServer(tmp_path, max_lifetime=60) as server:
        with gpufile.RemoteFile.open_http(f"{server.url}/a") as f:
            out = np.empty(100, dtype=np.uint8)
            assert f.read(out) == 100
    np.testing.assert_array_equal(out, data)


def test_a_monitor_counts_the_tls_handshakes_of_the_connections_opened(https, tmp_path,
                                                                      monkeypatch):
    url, data, ca = https
    bundle = tmp_path / "ca.pem"
    bundle.write_bytes(ca)
    monkeypatch.setenv("SSL_CERT_FILE", str(bundle))
    with gpufile.SummaryMonitor() as monitor:
        np.testing.assert_array_equal(read_all(url), data)
        s = monitor.get()
    c = s.counters
    assert 1 <= c["http_connections"] <= 4, c  # the size probe's, then at most one per worker
    assert c["http_tls_ns"] > 0 and c["http_tcp_ns"] > 0, c
    assert s.by_backend["REMOTE_HTTP"]["num_ops"] == 1
    assert s.by_backend["REMOTE_HTTP"]["path"] == "remote"
