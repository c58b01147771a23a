"""The SQS API over TLS with boto3: the server's certificate minted by
scripts/mint-certs.sh, checked by botocore against its CA; a wrong CA is
refused; SIGHUP swaps the tokens without a restart."""

import os
import shutil
import signal
import subprocess
import tempfile

import boto3
import botocore.config
import pytest
from botocore.exceptions import ClientError, SSLError

from conftest import ROOT, Server, until

pytestmark = pytest.mark.skipif(
    shutil.which("openssl") is None, reason="openssl is not installed"
)


def config_text(pki, tokens):
    text = f'tls_cert = "{pki}/server.crt"\ntls_key = "{pki}/server.key"\n'
    for key, secret in tokens:
        text += (
            f'[[tokens]]\nid = "{key}"\ntoken = "{secret}"\n'
            '[[tokens.grants]]\nqueues = "*"\npermissions = ["send", "receive", "manage"]\n'
        )
    return text


@pytest.fixture(scope="module")
def tls_server():
    with tempfile.TemporaryDirectory() as d:
        pki = os.path.join(d, "pki")
        subprocess.run(
            [os.path.join(ROOT, "scripts", "mint-certs.sh"), pki],
            check=True,
            capture_output=True,
        )
        config = os.path.join(d, "fila.toml")
        with open(config, "w") as f:
            f.write(config_text(pki, [("app", "app secret"), ("old", "old secret")]))
        s = Server(os.path.join(d, "data"), config=config).start()
        s.pki, s.config_path = pki, config
        try:
            yield s
        finally:
            s.stop()


def client(s, key, secret, verify):
    port = s.sqs_addr.rsplit(":", 1)[1]
    return boto3.client(
        "sqs",
        endpoint_url=f"https://localhost:{port}",
        region_name="us-east-1",
        aws_access_key_id=key,
        aws_secret_access_key=secret,
        verify=verify,
        config=botocore.config.Config(retries={"max_attempts": 1, "mode": "standard"}),
    )


def test_boto3_speaks_https_with_the_servers_certificate(tls_server):
    sqs = client(tls_server, "app", "app secret", os.path.join(tls_server.pki, "ca.crt"))
    url = sqs.create_queue(QueueName="tls-jobs")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="over https")
    got = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=1)["Messages"]
    assert got[0]["Body"] == "over https"


def test_a_wrong_ca_is_refused_by_botocore(tls_server):
    with tempfile.TemporaryDirectory() as d:
        subprocess.run(
            [os.path.join(ROOT, "scripts", "mint-certs.sh"), d],
            check=True,
            capture_output=True,
        )
        sqs = client(tls_server, "app", "app secret", os.path.join(d, "ca.crt"))
        with pytest.raises(SSLError):
            sqs.list_queues()


def test_sighup_removes_a_token_without_a_restart(tls_server):
    ca = os.path.join(tls_server.pki, "ca.crt")
    old = client(tls_server, "old", "old secret", ca)
    old.list_queues()
    with open(tls_server.config_path + ".tmp", "w") as f:
        f.write(config_text(tls_server.pki, [("app", "app secret")]))
    os.rename(tls_server.config_path + ".tmp", tls_server.config_path)
    tls_server.proc.send_signal(signal.SIGHUP)

    def refused():
        try:
            old.list_queues()
            return False
        except ClientError as e:
            return e.response["Error"]["Code"] == "InvalidClientTokenId"

    assert until(refused), "the removed token is refused after SIGHUP"
    client(tls_server, "app", "app secret", ca).list_queues()
