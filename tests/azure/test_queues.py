"""Queues through the Azure SDK for Python: create (with metadata; again
with the same or other metadata), list (prefix, pages, metadata), get and
set metadata with the approximate count, stored access policies, service
properties, delete."""

import datetime
import uuid

from conftest import raw

import pytest
from azure.core.exceptions import HttpResponseError, ResourceExistsError, ResourceNotFoundError
from azure.storage.queue import AccessPolicy, QueueSasPermissions


def name(prefix="q"):
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def test_a_queue_is_made_listed_and_deleted(service):
    n = name()
    q = service.create_queue(n, metadata={"team": "billing"})
    listed = {x.name: x for x in service.list_queues(name_starts_with=n, include_metadata=True)}
    assert listed[n].metadata == {"team": "billing"}
    # Again with the same metadata: 204, which the SDK reports as existing;
    # with other metadata: 409 QueueAlreadyExists.
    with pytest.raises(ResourceExistsError):
        service.create_queue(n, metadata={"team": "billing"})
    with pytest.raises(ResourceExistsError) as e:
        service.create_queue(n, metadata={"team": "other"})
    assert e.value.error_code == "QueueAlreadyExists"
    assert e.value.status_code == 409
    q.delete_queue()
    assert n not in [x.name for x in service.list_queues(name_starts_with=n)]
    with pytest.raises(ResourceNotFoundError) as e:
        q.delete_queue()
    assert e.value.error_code == "QueueNotFound"


def test_queue_names_azure_refuses_are_refused(service):
    for bad in ["ab", "Upper", "a--b", "-ab", "ab-", "a_b", "x" * 64]:
        with pytest.raises(HttpResponseError) as e:
            service.create_queue(bad)
        assert e.value.status_code == 400, bad
        assert e.value.error_code == "InvalidResourceName", bad


def test_a_listing_pages_by_marker(service):
    prefix = name("page")
    names = sorted(f"{prefix}-{i:02}" for i in range(7))
    for n in names:
        service.create_queue(n)
    pages = list(service.list_queues(name_starts_with=prefix, results_per_page=3).by_page())
    got = [[q.name for q in page] for page in pages]
    assert got == [names[0:3], names[3:6], names[6:7]]
    assert [q.name for q in service.list_queues(name_starts_with=prefix)] == names
    for n in names:
        service.delete_queue(n)


def test_metadata_is_replaced_and_the_count_is_approximate(queue):
    props = queue.get_queue_properties()
    assert props.metadata == {}
    assert props.approximate_message_count == 0
    queue.set_queue_metadata({"a": "1", "b": "2"})
    assert queue.get_queue_properties().metadata == {"a": "1", "b": "2"}
    queue.set_queue_metadata({"b": "3"})
    assert queue.get_queue_properties().metadata == {"b": "3"}
    for i in range(3):
        queue.send_message(f"m{i}")
    queue.receive_message(visibility_timeout=60)
    # Leased messages count too.
    assert queue.get_queue_properties().approximate_message_count == 3
    queue.set_queue_metadata({})
    assert queue.get_queue_properties().metadata == {}


def test_a_missing_queue_is_queue_not_found(service):
    q = service.get_queue_client(name())
    for call in [q.get_queue_properties, lambda: q.send_message("x"), q.receive_message,
                 lambda: q.peek_messages(), q.clear_messages, lambda: q.set_queue_metadata({"a": "b"})]:
        with pytest.raises(ResourceNotFoundError) as e:
            call()
        assert e.value.error_code == "QueueNotFound"


def test_stored_access_policies_round_trip(queue):
    start = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
    expiry = datetime.datetime(2030, 1, 1, 12, 30, tzinfo=datetime.timezone.utc)
    queue.set_queue_access_policy(signed_identifiers={
        "readers": AccessPolicy(permission=QueueSasPermissions(read=True), start=start, expiry=expiry),
        "workers": AccessPolicy(permission=QueueSasPermissions(process=True, update=True), expiry=expiry),
    })
    got = queue.get_queue_access_policy()
    assert set(got) == {"readers", "workers"}
    assert got["readers"].permission == "r"
    assert got["workers"].permission == "up"
    # The SDK gives the times as the service wrote them.
    assert got["readers"].start == "2026-01-01T00:00:00.0000000Z"
    assert got["readers"].expiry == "2030-01-01T12:30:00.0000000Z"
    assert got["workers"].start is None
    queue.set_queue_access_policy(signed_identifiers={})
    assert queue.get_queue_access_policy() == {}
    # At most five.
    with pytest.raises(HttpResponseError) as e:
        queue.set_queue_access_policy(signed_identifiers={
            f"p{i}": AccessPolicy(permission="r", expiry=expiry) for i in range(6)})
    assert e.value.status_code == 400


def test_service_properties_are_kept_and_stats_answer(server, service):
    props = service.get_service_properties()
    assert props["analytics_logging"].read is False
    from azure.storage.queue import CorsRule, Metrics, RetentionPolicy
    service.set_service_properties(
        hour_metrics=Metrics(enabled=True, include_apis=True, retention_policy=RetentionPolicy(enabled=True, days=5)),
        cors=[CorsRule(["http://example.com"], ["GET"])],
    )
    props = service.get_service_properties()
    assert props["hour_metrics"].enabled is True
    assert props["hour_metrics"].retention_policy.days == 5
    assert props["cors"][0].allowed_origins == "http://example.com"
    # The SDK asks a secondary endpoint for stats, which a path-style
    # endpoint does not have: asked by hand.
    status, _, body = raw(server, "GET", "/", "restype=service&comp=stats")
    assert status == 200 and b"<Status>live</Status>" in body
