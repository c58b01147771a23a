"""Messages through the Azure SDK for Python: put (a visibility delay, a
time to live, -1), get up to 32 with their dequeue counts, peek, update
(visibility and content; a new pop receipt each time), delete by pop
receipt, clear; the 64 KiB limit and the parameters' ranges."""

import time

import pytest
from azure.core.exceptions import HttpResponseError, ResourceNotFoundError

from conftest import raw


def receive_all(queue, **kw):
    return list(queue.receive_messages(messages_per_page=32, **kw))


def wait_for(get, deadline_s=10.0):
    """Polls `get` (bounded in time) until it answers something."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        got = get()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError("nothing came in time")


def test_a_message_goes_round(queue):
    sent = queue.send_message("hello <world> & \"friends\"")
    assert sent.id and sent.pop_receipt
    assert sent.inserted_on <= sent.next_visible_on < sent.expires_on
    # Seven days by default, as Azure has it.
    assert 6.9 * 86400 < (sent.expires_on - sent.inserted_on).total_seconds() <= 7 * 86400
    [m] = receive_all(queue, visibility_timeout=30)
    assert m.id == sent.id
    assert m.content == "hello <world> & \"friends\""
    assert m.dequeue_count == 1
    assert (m.next_visible_on - m.inserted_on).total_seconds() >= 29
    # Leased: nothing else to get.
    assert receive_all(queue) == []
    queue.delete_message(m)
    assert queue.peek_messages() == []


def test_get_takes_up_to_32_and_peek_counts_nothing(queue):
    for i in range(40):
        queue.send_message(f"m{i:02}")
    peeked = queue.peek_messages(max_messages=32)
    assert [p.content for p in peeked] == [f"m{i:02}" for i in range(32)]
    assert all(p.dequeue_count == 0 and p.pop_receipt is None for p in peeked)
    page = next(queue.receive_messages(messages_per_page=32, visibility_timeout=60).by_page())
    got = list(page)
    assert len(got) == 32
    assert [m.content for m in got] == [f"m{i:02}" for i in range(32)]
    # Peek shows the visible ones only.
    assert [p.content for p in queue.peek_messages(max_messages=32)] == [f"m{i:02}" for i in range(32, 40)]
    with pytest.raises(ValueError):
        queue.peek_messages(max_messages=33)
    status, headers, _ = raw(queue_server(queue), "GET", f"/{queue.queue_name}/messages", "numofmessages=33")
    assert status == 400
    assert headers["x-ms-error-code"] == "OutOfRangeQueryParameterValue"


def queue_server(queue):
    """The server a queue client points at (for raw requests)."""
    class At:
        azure_addr = queue.url.split("/")[2]
    return At()


def test_a_visibility_delay_and_a_lease_end_bring_a_message_back_counted(queue):
    queue.send_message("later", visibility_timeout=1)
    assert receive_all(queue) == []
    [m] = wait_for(lambda: receive_all(queue, visibility_timeout=1))
    assert m.dequeue_count == 1
    [again] = wait_for(lambda: receive_all(queue, visibility_timeout=1))
    assert again.id == m.id and again.dequeue_count == 2
    # The first lease's receipt is stale now.
    with pytest.raises(ResourceNotFoundError) as e:
        queue.delete_message(m)
    assert e.value.error_code == "MessageNotFound"
    queue.delete_message(again)


def test_update_moves_visibility_and_changes_content_with_a_new_pop_receipt(queue):
    queue.send_message("draft")
    [m] = receive_all(queue, visibility_timeout=60)
    u = queue.update_message(m, content="final", visibility_timeout=30)
    assert u.pop_receipt != m.pop_receipt
    assert u.content == "final"
    # The old pop receipt is no longer good.
    with pytest.raises(ResourceNotFoundError) as e:
        queue.delete_message(m.id, m.pop_receipt)
    assert e.value.error_code == "MessageNotFound"
    # Still leased, with its new content.
    assert receive_all(queue) == []
    [p] = queue.peek_messages() or [None]
    assert p is None
    # Released (a visibility of 0): visible at once.
    queue.update_message(m.id, u.pop_receipt, visibility_timeout=0)
    [again] = receive_all(queue, visibility_timeout=60)
    assert again.id == m.id
    assert again.content == "final"
    assert again.dequeue_count == 2
    u = queue.update_message(again.id, again.pop_receipt, visibility_timeout=120)
    assert (u.next_visible_on - again.inserted_on).total_seconds() > 60
    queue.delete_message(again.id, u.pop_receipt)
    assert queue.peek_messages() == []
    # A lease longer than fila's longest (12 hours) is refused by name.
    queue.send_message("x")
    [x] = receive_all(queue)
    with pytest.raises(HttpResponseError) as e:
        queue.update_message(x, visibility_timeout=12 * 3600 + 1)
    assert e.value.error_code == "OutOfRangeQueryParameterValue"


def test_a_visibility_delay_may_be_longer_than_a_put_delay(queue):
    # fila's own put delays end at 15 minutes; Azure's reach 7 days.
    sent = queue.send_message("next week", visibility_timeout=6 * 86400)
    assert (sent.next_visible_on - sent.inserted_on).total_seconds() == 6 * 86400
    assert queue.peek_messages() == []
    assert queue.get_queue_properties().approximate_message_count == 1


def test_time_to_live_and_never_expiring(queue):
    short = queue.send_message("short", time_to_live=60)
    assert 59 <= (short.expires_on - short.inserted_on).total_seconds() <= 60
    forever = queue.send_message("forever", time_to_live=-1)
    # As long as the queue keeps messages (docs/azure.md).
    assert (forever.expires_on - forever.inserted_on).total_seconds() >= 6.9 * 86400
    with pytest.raises(HttpResponseError) as e:
        queue.send_message("x", visibility_timeout=10, time_to_live=5)
    assert e.value.status_code == 400


def test_clear_and_the_size_limit(queue):
    for i in range(5):
        queue.send_message(f"m{i}")
    queue.clear_messages()
    assert queue.peek_messages() == []
    big = "x" * (64 << 10)
    queue.send_message(big)
    [m] = receive_all(queue)
    assert m.content == big
    with pytest.raises(HttpResponseError) as e:
        queue.send_message(big + "x")
    assert e.value.status_code == 413
    assert e.value.error_code == "RequestBodyTooLarge"


def test_a_bad_pop_receipt_is_refused_clearly(queue):
    sent = queue.send_message("x")
    with pytest.raises(HttpResponseError) as e:
        queue.delete_message(sent.id, "not-a-receipt")
    assert e.value.status_code == 400
    # A put's pop receipt names no lease here.
    with pytest.raises(HttpResponseError) as e:
        queue.delete_message(sent.id, sent.pop_receipt)
    assert e.value.error_code == "PopReceiptMismatch"
    [m] = receive_all(queue)
    # Another message's id with this pop receipt.
    with pytest.raises(ResourceNotFoundError):
        queue.delete_message("00000000-0000-0000-0000-000000000000", m.pop_receipt)
    queue.delete_message(m)
