"""SigV4 with tokens: the access key id names a token, the token is the
secret, and the token's grants apply per operation."""

import os
import tempfile

import botocore
import pytest
from botocore.exceptions import ClientError

from conftest import Server

CONFIG = """
[[tokens]]
id = "admin"
token = "admin secret"
[[tokens.grants]]
queues = "*"
permissions = ["send", "receive", "manage"]

[[tokens]]
id = "producer"
token = "producer secret"
[[tokens.grants]]
queues = "orders*"
permissions = ["send"]
"""


@pytest.fixture(scope="module")
def secured():
    with tempfile.TemporaryDirectory() as d:
        config = os.path.join(d, "fila.toml")
        with open(config, "w") as f:
            f.write(CONFIG)
        s = Server(os.path.join(d, "data"), config=config).start()
        try:
            yield s
        finally:
            s.stop()


def code(e):
    return e.value.response["Error"]["Code"]


def test_a_token_signs_and_acts_within_its_grants(secured):
    admin = secured.client("admin", "admin secret")
    url = admin.create_queue(QueueName="orders-eu")["QueueUrl"]
    producer = secured.client("producer", "producer secret")
    # A producer finds its queue by name, and not another's.
    assert producer.get_queue_url(QueueName="orders-eu")["QueueUrl"] == url
    admin.create_queue(QueueName="hidden")
    with pytest.raises(ClientError) as e:
        producer.get_queue_url(QueueName="hidden")
    assert code(e) == "AWS.SimpleQueueService.NonExistentQueue"
    producer.send_message(QueueUrl=url, MessageBody="signed")
    with pytest.raises(ClientError) as e:
        producer.receive_message(QueueUrl=url)
    assert code(e) == "AccessDenied"
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    with pytest.raises(ClientError) as e:
        producer.create_queue(QueueName="orders-us")
    assert code(e) == "AccessDenied"
    other = admin.create_queue(QueueName="billing")["QueueUrl"]
    with pytest.raises(ClientError) as e:
        producer.send_message(QueueUrl=other, MessageBody="x")
    assert code(e) == "AccessDenied"
    assert admin.receive_message(QueueUrl=url)["Messages"][0]["Body"] == "signed"


def test_a_wrong_secret_an_unknown_id_and_no_signature_are_refused(secured):
    with pytest.raises(ClientError) as e:
        secured.client("admin", "wrong").list_queues()
    assert code(e) == "SignatureDoesNotMatch"
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    with pytest.raises(ClientError) as e:
        secured.client("nobody", "admin secret").list_queues()
    assert code(e) == "InvalidClientTokenId"
    with pytest.raises(ClientError) as e:
        secured.client(signature_version=botocore.UNSIGNED).list_queues()
    assert code(e) == "MissingAuthenticationToken"
    # The token itself as the access key id names nothing.
    with pytest.raises(ClientError) as e:
        secured.client("admin secret", "admin secret").list_queues()
    assert code(e) == "InvalidClientTokenId"


def test_a_request_changed_after_signing_is_refused(secured):
    client = secured.client("admin", "admin secret")
    url = client.create_queue(QueueName="tamper")["QueueUrl"]

    def tamper(request, **_):
        request.body = request.body.replace(b"original", b"tampered")

    client.meta.events.register_last("before-send.sqs.SendMessage", tamper)
    with pytest.raises(ClientError) as e:
        client.send_message(QueueUrl=url, MessageBody="original")
    assert code(e) == "SignatureDoesNotMatch"
    admin = secured.client("admin", "admin secret")
    assert "Messages" not in admin.receive_message(QueueUrl=url)
