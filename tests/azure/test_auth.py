"""Who may do what: SharedKey and SharedKeyLite signatures by the
development account (or a token's account), service and account SAS
tokens with their expiry and permissions, stored access policies, and a
token's grants over the Azure API."""

import base64
import datetime
import os
import tempfile
import uuid

import pytest
from azure.core.exceptions import ClientAuthenticationError, HttpResponseError
from azure.storage.queue import (
    AccessPolicy,
    AccountSasPermissions,
    QueueClient,
    QueueSasPermissions,
    QueueServiceClient,
    ResourceTypes,
    generate_account_sas,
    generate_queue_sas,
)

from conftest import ACCOUNT, KEY, Server, raw

WRONG_KEY = base64.b64encode(b"not the key" * 4).decode()


def hours(h):
    return datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=h)


def test_a_wrong_key_and_an_unknown_account_are_refused(server, queue):
    with pytest.raises(ClientAuthenticationError) as e:
        list(server.service(key=WRONG_KEY).list_queues())
    assert e.value.status_code == 403
    assert e.value.error_code == "AuthenticationFailed"
    with pytest.raises(HttpResponseError) as e:
        list(server.service(account="nobody").list_queues())
    assert e.value.status_code == 403
    # No signature at all.
    status, headers, _ = raw(server, "GET", "", "comp=list", sign_it=False)
    assert status == 403 and headers["x-ms-error-code"] == "AuthenticationFailed"


def test_shared_key_and_shared_key_lite_made_by_hand_are_taken(server, queue):
    path = f"/{queue.queue_name}/messages"
    body = b"<QueueMessage><MessageText>signed by hand</MessageText></QueueMessage>"
    status, _, _ = raw(server, "POST", path, body=body)
    assert status == 201
    status, _, body = raw(server, "GET", path, "peekonly=true", lite=True)
    assert status == 200 and b"signed by hand" in body
    status, headers, _ = raw(server, "GET", path, "peekonly=true", lite=True, key=WRONG_KEY)
    assert status == 403
    # A date too far from the server's clock.
    status, headers, _ = raw(server, "GET", path, "peekonly=true",
                             headers={"x-ms-date": "Mon, 01 Jan 2024 00:00:00 GMT"})
    assert status == 403 and headers["x-ms-error-code"] == "AuthenticationFailed"


def test_a_read_only_queue_sas_peeks_and_may_not_put(server, queue):
    queue.send_message("visible to readers")
    sas = generate_queue_sas(ACCOUNT, queue.queue_name, KEY, permission=QueueSasPermissions(read=True),
                             expiry=hours(1))
    reader = QueueClient(server.endpoint(), queue.queue_name, credential=sas)
    assert [m.content for m in reader.peek_messages()] == ["visible to readers"]
    assert reader.get_queue_properties().approximate_message_count == 1
    with pytest.raises(HttpResponseError) as e:
        reader.send_message("no")
    assert e.value.status_code == 403
    assert e.value.error_code == "AuthorizationPermissionMismatch"
    with pytest.raises(HttpResponseError) as e:
        reader.receive_message()
    assert e.value.status_code == 403
    # It reaches its queue only.
    other = QueueClient(server.endpoint(), queue.queue_name + "x", credential=sas)
    with pytest.raises(HttpResponseError) as e:
        other.peek_messages()
    assert e.value.status_code == 403


def test_an_expired_or_not_yet_valid_sas_is_refused(server, queue):
    for start, expiry in [(hours(-2), hours(-1)), (hours(1), hours(2))]:
        sas = generate_queue_sas(ACCOUNT, queue.queue_name, KEY, permission=QueueSasPermissions(read=True),
                                 start=start, expiry=expiry)
        with pytest.raises(ClientAuthenticationError) as e:
            QueueClient(server.endpoint(), queue.queue_name, credential=sas).peek_messages()
        assert e.value.error_code == "AuthenticationFailed"
    # Changed after signing: its signature no longer matches.
    sas = generate_queue_sas(ACCOUNT, queue.queue_name, KEY, permission=QueueSasPermissions(read=True),
                             expiry=hours(1))
    forged = sas.replace("sp=r", "sp=raup")
    with pytest.raises(ClientAuthenticationError):
        QueueClient(server.endpoint(), queue.queue_name, credential=forged).send_message("x")


def test_a_sas_for_https_only_or_another_address_is_refused_over_plain_http(server, queue):
    for kw in [{"protocol": "https"}, {"ip": "10.1.2.3"}, {"ip": "10.0.0.0-10.255.255.255"}]:
        sas = generate_queue_sas(ACCOUNT, queue.queue_name, KEY, permission=QueueSasPermissions(read=True),
                                 expiry=hours(1), **kw)
        with pytest.raises(HttpResponseError) as e:
            QueueClient(server.endpoint(), queue.queue_name, credential=sas).peek_messages()
        assert e.value.status_code == 403, kw
        assert e.value.error_code == "AuthorizationFailure", kw
    sas = generate_queue_sas(ACCOUNT, queue.queue_name, KEY, permission=QueueSasPermissions(read=True),
                             expiry=hours(1), ip="127.0.0.0-127.255.255.255")
    assert QueueClient(server.endpoint(), queue.queue_name, credential=sas).peek_messages() == []


def test_a_sas_on_a_stored_access_policy_follows_the_policy(server, queue):
    queue.set_queue_access_policy(signed_identifiers={
        "workers": AccessPolicy(permission=QueueSasPermissions(process=True, add=True), expiry=hours(1)),
    })
    sas = generate_queue_sas(ACCOUNT, queue.queue_name, KEY, policy_id="workers")
    worker = QueueClient(server.endpoint(), queue.queue_name, credential=sas)
    worker.send_message("work")
    [m] = list(worker.receive_messages())
    worker.delete_message(m)
    with pytest.raises(HttpResponseError) as e:
        worker.peek_messages()
    assert e.value.error_code == "AuthorizationPermissionMismatch"
    # The policy taken away, its SAS stops working.
    queue.set_queue_access_policy(signed_identifiers={})
    with pytest.raises(ClientAuthenticationError):
        worker.send_message("again")


def test_an_account_sas_covers_its_resource_types_and_permissions(server, queue):
    sas = generate_account_sas(ACCOUNT, KEY, resource_types=ResourceTypes(service=True, object=True),
                               permission=AccountSasPermissions(list=True, add=True), expiry=hours(1))
    svc = QueueServiceClient(server.endpoint(), credential=sas)
    assert queue.queue_name in [q.name for q in svc.list_queues()]
    svc.get_queue_client(queue.queue_name).send_message("by account sas")
    with pytest.raises(HttpResponseError) as e:
        svc.create_queue("made-" + uuid.uuid4().hex[:8])
    assert e.value.status_code == 403
    with pytest.raises(HttpResponseError) as e:
        svc.get_queue_client(queue.queue_name).receive_message()
    assert e.value.error_code == "AuthorizationPermissionMismatch"


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


def b64(secret):
    return base64.b64encode(secret.encode()).decode()


def test_with_tokens_an_account_is_a_token_and_its_grants_apply(secured):
    admin = secured.service("admin", b64("admin secret"))
    admin.create_queue("orders-eu")
    admin.create_queue("billing")
    producer = secured.service("producer", b64("producer secret"))
    producer.get_queue_client("orders-eu").send_message("signed")
    for call in [lambda: producer.get_queue_client("orders-eu").receive_message(),
                 lambda: producer.get_queue_client("billing").send_message("x"),
                 lambda: producer.create_queue("orders-us")]:
        with pytest.raises(HttpResponseError) as e:
            call()
        assert e.value.status_code == 403
        assert e.value.error_code == "AuthorizationFailure"
    [m] = list(admin.get_queue_client("orders-eu").receive_messages())
    assert m.content == "signed"
    # The development account is no account once tokens are set.
    with pytest.raises(ClientAuthenticationError):
        list(secured.service().list_queues())
