"""Fixtures of the Azure Queue Storage suite: a real fila-server started
per test module with the Azure Queue API (and the SQS API, for the tests
of one queue through both), the Azure SDK for Python pointed at it with
the development account's connection string, and raw HTTP for what the
SDK will not send.

The binaries come from FILA_BIN_DIR (scripts/azure-tests.sh builds them
into target/debug). Every server is stopped (SIGTERM, then SIGKILL) when
its fixture ends."""

import base64
import datetime
import hashlib
import hmac
import http.client
import os
import sys
import tempfile
import urllib.parse
import uuid

import pytest
from azure.storage.queue import QueueServiceClient

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from fila_server import LocalServer  # noqa: E402  (tests/fila_server.py)

ACCOUNT = "devstoreaccount1"
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


class Server(LocalServer):
    """One fila-server with the Azure Queue API and the SQS API on
    ephemeral loopback ports."""

    azure = True
    sqs = True

    @property
    def azure_addr(self):
        return self.listening.get("azure")

    def endpoint(self, account=ACCOUNT):
        return f"http://{self.azure_addr}/{account}"

    def connection_string(self, account=ACCOUNT, key=KEY):
        return (
            f"DefaultEndpointsProtocol=http;AccountName={account};AccountKey={key};"
            f"QueueEndpoint={self.endpoint(account)};"
        )

    def service(self, account=ACCOUNT, key=KEY):
        return QueueServiceClient.from_connection_string(self.connection_string(account, key))


@pytest.fixture(scope="module")
def server():
    with tempfile.TemporaryDirectory() as d:
        s = Server(os.path.join(d, "data")).start()
        try:
            yield s
        finally:
            s.stop()


@pytest.fixture
def service(server):
    return server.service()


@pytest.fixture
def queue(service):
    """A new queue of its own for the test, deleted after."""
    name = "q-" + uuid.uuid4().hex[:12]
    q = service.create_queue(name)
    yield q
    try:
        q.delete_queue()
    except Exception:  # noqa: BLE001  (a test may have deleted it)
        pass


def now_rfc1123():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%a, %d %b %Y %H:%M:%S GMT")


def sign(key, text):
    mac = hmac.new(base64.b64decode(key), text.encode(), hashlib.sha256)
    return base64.b64encode(mac.digest()).decode()


def raw(server, method, path, query="", body=b"", headers=None, lite=False, key=KEY, account=ACCOUNT,
        sign_it=True):
    """One request over a fresh connection, signed with SharedKey (or
    SharedKeyLite) as the REST reference gives the string to sign, made
    here independently of the SDK; answers (status, headers, body)."""
    headers = dict(headers or {})
    headers.setdefault("x-ms-date", now_rfc1123())
    headers.setdefault("x-ms-version", "2021-12-02")
    if body:
        headers.setdefault("Content-Type", "application/xml")
    full = f"/{account}{path}"
    if sign_it:
        xms = sorted((k.lower(), v.strip()) for k, v in headers.items() if k.lower().startswith("x-ms-"))
        canon_headers = "".join(f"{k}:{v}\n" for k, v in xms)
        params = urllib.parse.parse_qsl(query, keep_blank_values=True)
        get = {k.lower(): v for k, v in headers.items()}
        if lite:
            resource = f"/{account}{full}"
            comp = dict(params).get("comp")
            if comp:
                resource += "?comp=" + comp
            text = f"{method}\n{get.get('content-md5', '')}\n{get.get('content-type', '')}\n\n{canon_headers}{resource}"
        else:
            resource = f"/{account}{full}" + "".join(f"\n{k.lower()}:{v}" for k, v in sorted(params))
            length = str(len(body)) if body else ""
            fields = ["", "", length, "", get.get("content-type", ""), "", "", "", "", "", ""]
            text = method + "\n" + "\n".join(fields) + "\n" + canon_headers + resource
        scheme = "SharedKeyLite" if lite else "SharedKey"
        headers["Authorization"] = f"{scheme} {account}:{sign(key, text)}"
    host, port = server.azure_addr.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        target = full + ("?" + query if query else "")
        conn.request(method, target, body=body, headers=headers)
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()
