"""fila's Python client over TLS (certificates minted by
scripts/mint-certs.sh with openssl) and with tokens: the server's
certificate checked against its CA, a wrong CA refused, a client
certificate standing for a token, tokens and their grants, a wrong token
refused."""

import os
import shutil
import ssl
import subprocess

import pytest

import fila
from conftest import ROOT, Server

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is not installed")


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory):
    d = tmp_path_factory.mktemp("tls")
    pki, other = str(d / "pki"), str(d / "other")
    for where in (pki, other):
        subprocess.run([os.path.join(ROOT, "scripts", "mint-certs.sh"), where, "--client", "worker-1"],
                       check=True, capture_output=True)
    config = d / "fila.toml"
    config.write_text(
        f'tls_cert = "{pki}/server.crt"\ntls_key = "{pki}/server.key"\n'
        f'tls_client_ca = "{pki}/ca.crt"\n'
        '[[tokens]]\nid = "admin"\ntoken = "admin secret"\n'
        '[[tokens.grants]]\nqueues = "*"\npermissions = ["send", "receive", "manage"]\n'
        '[[tokens]]\nid = "reader"\ntoken = "reader secret"\n'
        '[[tokens.grants]]\nqueues = "jobs"\npermissions = ["receive"]\n'
        '[[tokens]]\ncertificates = ["worker-1"]\n'
        '[[tokens.grants]]\nqueues = "jobs"\npermissions = ["send", "receive"]\n'
    )
    s = Server(str(d / "data"), config=str(config)).start()
    s.pki, s.other = pki, other
    try:
        yield s
    finally:
        s.stop()


def url(s):
    return "filas://localhost:" + s.addr.rsplit(":", 1)[1]


def test_tls_with_a_token(tls_server):
    with fila.Client(url(tls_server), token="admin secret", tls=f"{tls_server.pki}/ca.crt") as c:
        c.create_queue("jobs")
        c.put("jobs", b"over tls")
        [m] = c.receive("jobs", wait_ms=0)
        assert m.payload == b"over tls"
        c.delete("jobs", m.receipt)
        assert c.reload().tls is True


def test_a_server_certificate_from_another_ca_is_refused(tls_server):
    with fila.Client(url(tls_server), token="admin secret", tls=f"{tls_server.other}/ca.crt") as c:
        with pytest.raises(fila.TlsError, match="CERTIFICATE_VERIFY_FAILED"):
            c.list_queues()


def test_plain_tcp_to_a_tls_listener_fails_clearly(tls_server):
    with fila.Client(tls_server.addr, token="admin secret", connect_timeout=3, request_timeout=3) as c:
        with pytest.raises((fila.ConnectionLost, fila.Timeout, fila.ProtocolError)):
            c.list_queues()


def test_a_client_certificate_stands_for_a_token(tls_server):
    ctx = ssl.create_default_context(cafile=f"{tls_server.pki}/ca.crt")
    ctx.load_cert_chain(f"{tls_server.pki}/client-worker-1.crt", f"{tls_server.pki}/client-worker-1.key")
    with fila.Client(url(tls_server), tls=ctx) as c:
        c.put("jobs", b"by certificate")
        with pytest.raises(fila.Forbidden):
            c.create_queue("elsewhere")


def test_tokens_and_their_grants(tls_server):
    ca = f"{tls_server.pki}/ca.crt"
    with fila.Client(url(tls_server), token="wrong", tls=ca) as c:
        with pytest.raises(fila.Unauthenticated) as e:
            c.list_queues()
        assert e.value.kind == "unauthenticated" and e.value.code == 11
    with fila.Client(url(tls_server), tls=ca) as c:
        with pytest.raises(fila.Unauthenticated):
            c.stats("jobs")
    with fila.Client(url(tls_server), token="reader secret", tls=ca) as c:
        with pytest.raises(fila.Forbidden):
            c.put("jobs", b"not mine to send")
        assert c.list_queues() == ["jobs"]
        c.receive("jobs", wait_ms=0)
