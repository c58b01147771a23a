"""The Azure Queue API over TLS, as every listener speaks it: the Azure
SDK for Python over HTTPS with the server's certificate (minted by
scripts/mint-certs.sh) checked against its CA, a token's account, and a
SAS that allows HTTPS only; a wrong CA is refused."""

import base64
import datetime
import os
import shutil
import subprocess
import tempfile

import pytest
from azure.core.exceptions import ServiceRequestError
from azure.storage.queue import QueueClient, QueueSasPermissions, QueueServiceClient, generate_queue_sas

from conftest import Server

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is not installed")

SECRET = "app secret"
KEY = base64.b64encode(SECRET.encode()).decode()


@pytest.fixture(scope="module")
def tls_server():
    with tempfile.TemporaryDirectory() as d:
        pki = os.path.join(d, "pki")
        subprocess.run([os.path.join(ROOT, "scripts", "mint-certs.sh"), pki], check=True, capture_output=True)
        config = os.path.join(d, "fila.toml")
        with open(config, "w") as f:
            f.write(
                f'tls_cert = "{pki}/server.crt"\ntls_key = "{pki}/server.key"\n'
                f'[[tokens]]\nid = "app"\ntoken = "{SECRET}"\n'
                '[[tokens.grants]]\nqueues = "*"\npermissions = ["send", "receive", "manage"]\n'
            )
        s = Server(os.path.join(d, "data"), config=config).start()
        s.pki = pki
        try:
            yield s
        finally:
            s.stop()


def endpoint(s):
    port = s.azure_addr.rsplit(":", 1)[1]
    return f"https://localhost:{port}/app"


def test_an_sdk_speaks_https_with_a_tokens_account(tls_server):
    service = QueueServiceClient(endpoint(tls_server), credential={"account_name": "app", "account_key": KEY},
                                 connection_verify=os.path.join(tls_server.pki, "ca.crt"))
    q = service.create_queue("over-tls")
    q.send_message("secret")
    assert [m.content for m in q.peek_messages()] == ["secret"]
    sas = generate_queue_sas("app", "over-tls", KEY, permission=QueueSasPermissions(read=True),
                             expiry=datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1),
                             protocol="https")
    reader = QueueClient(endpoint(tls_server), "over-tls", credential=sas,
                         connection_verify=os.path.join(tls_server.pki, "ca.crt"))
    assert [m.content for m in reader.peek_messages()] == ["secret"]
    q.delete_queue()


def test_a_certificate_the_client_does_not_trust_is_refused(tls_server):
    service = QueueServiceClient(endpoint(tls_server), credential={"account_name": "app", "account_key": KEY},
                                 connection_verify=True, retry_total=0)
    with pytest.raises(ServiceRequestError):
        list(service.list_queues())
