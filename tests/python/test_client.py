"""fila.Client against a real server: every operation of
docs/protocol.md, its answers and its errors."""

import os
import threading
import time
import uuid

import pytest

import fila
from conftest import until


def test_queue_settings_round_trip_and_conflicts(client):
    name = "s-" + uuid.uuid4().hex[:8]
    assert client.create_queue(
        name, visibility_timeout_ms=5000, max_deliveries=7, dedup_window_ms=60_000,
        content_dedup=True, priority_levels=3, priority_fairness=4, tags={"team": "a"},
    )
    assert client.create_queue(name, visibility_timeout_ms=5000, max_deliveries=7,
                               dedup_window_ms=60_000, content_dedup=True,
                               priority_levels=3, priority_fairness=4) is False
    with pytest.raises(fila.QueueExists) as e:
        client.create_queue(name, visibility_timeout_ms=6000)
    assert e.value.kind == "queue_exists" and e.value.code == 3
    s = client.get_queue(name)
    assert (s.visibility_timeout_ms, s.max_deliveries, s.dedup_window_ms) == (5000, 7, 60_000)
    assert (s.content_dedup, s.priority_levels, s.priority_fairness) == (True, 3, 4)
    assert s.tags == {"team": "a"} and s.dead_letter_target is None and not s.ordered
    client.create_queue(name + "-dlq")
    s = client.update_queue(name, dead_letter_target=name + "-dlq", delay_ms=10,
                            tags={"env": "test"}, remove_tags=["team"], ordered=True)
    assert s.dead_letter_target == name + "-dlq" and s.delay_ms == 10 and s.ordered
    assert s.tags == {"env": "test"}
    s = client.update_queue(name, dead_letter_target=None)
    assert s.dead_letter_target is None and s.visibility_timeout_ms == 5000
    with pytest.raises(TypeError, match="visibility_timeout"):
        client.update_queue(name, visibility_timeout=1)
    with pytest.raises(fila.InvalidArgument, match="visibility_timeout_ms"):
        client.update_queue(name, visibility_timeout_ms=10**12)


def test_list_delete_and_stats(client):
    prefix = "l-" + uuid.uuid4().hex[:8]
    names = [f"{prefix}-{i:02}" for i in range(12)]
    for n in names:
        client.create_queue(n)
    assert client.list_queues(prefix) == names
    page, nxt = client.list_queues_page(prefix, limit=5)
    assert page == names[:5] and nxt == names[4]
    page, nxt = client.list_queues_page(prefix, after=nxt, limit=10)
    assert page == names[5:] and nxt is None
    client.delete_queue(names[0])
    with pytest.raises(fila.QueueNotFound):
        client.delete_queue(names[0])
    client.delete_queue(names[0], if_exists=True)
    assert client.list_queues(prefix) == names[1:]
    st = client.stats(names[1])
    assert st["visible"] == 0 and st["created_at_ms"] > 0 and "groups_in_flight" in st
    server = client.server_stats()
    assert server["queues"] >= 11 and server["connections"] >= 1


def test_put_receive_delete(client, queue):
    results = client.put(queue, [b"a", "b"], attributes={"k": "v"})
    assert [r.seq for r in results] == [1, 2] and len(results[0].id_hex) == 32
    got = client.receive(queue, max=5, wait_ms=0, visibility_ms=60_000)
    assert [m.payload for m in got] == [b"a", b"b"]
    m = got[0]
    assert m.attributes == {"k": "v"} and m.delivery_count == 1 and m.state == "in_flight"
    assert m.id == results[0].id and len(m.receipt) == 32
    assert m.next_visible_at_ms >= m.inserted_at_ms + 59_000
    assert client.delete(queue, [x.receipt for x in got]) == [None, None]
    with pytest.raises(fila.ReceiptStale):
        client.delete(queue, m.receipt)
    with pytest.raises(fila.ReceiptInvalid):
        client.delete(queue, os.urandom(32))
    assert client.delete(queue, [m.receipt, m.receipt.hex()], check=False)[0].kind == "receipt_stale"
    with pytest.raises(ValueError, match="32 bytes"):
        client.delete(queue, b"short")
    st = client.stats(queue)
    assert (st["puts"], st["deliveries"], st["deletes"]) == (2, 2, 2)


def test_batches_of_any_size(client, queue):
    results = client.put(queue, [b"%d" % i for i in range(65)])
    assert [r.seq for r in results] == list(range(1, 66))
    got = []
    while len(got) < 65:
        got += client.receive(queue, max=20, wait_ms=0)
    assert sorted(int(m.payload) for m in got) == list(range(65))
    assert client.delete(queue, [m.receipt for m in got]) == [None] * 65
    with pytest.raises(ValueError, match="1 to 20"):
        client.receive(queue, max=21)


def test_entries_fail_alone(client):
    name = "small-" + uuid.uuid4().hex[:8]
    client.create_queue(name, max_message_bytes=10)
    with pytest.raises(fila.BatchError) as e:
        client.put(name, [b"ok", b"x" * 11, b"ok too"])
    assert e.value.kind == "message_too_large" and e.value.index == 1
    assert isinstance(e.value.results[0], fila.PutResult)
    out = client.put(name, [b"fine", b"y" * 11], check=False)
    assert isinstance(out[0], fila.PutResult) and isinstance(out[1], fila.MessageTooLarge)
    assert client.stats(name)["visible"] == 3


def test_options_of_a_put(client):
    name = "opts-" + uuid.uuid4().hex[:8]
    client.create_queue(name, priority_levels=3)
    now = int(time.time() * 1000)
    client.put(name, b"later", delay_ms=60_000)
    scheduled = client.put(name, b"at", at_ms=now + 60_000)[0]
    client.put(name, b"low", priority=1)
    client.put(name, b"high", priority=3, ttl_ms=120_000)
    first = client.put(name, b"once", dedup_id="d-1")[0]
    again = client.put(name, b"once", dedup_id="d-1")[0]
    assert again.seq == first.seq
    client.put(name, [b"g1", b"g2"], group="order-7")
    client.cancel(name, scheduled.seq)
    with pytest.raises(fila.NotFound):
        client.cancel(name, scheduled.seq)
    got = client.receive(name, max=20, wait_ms=0)
    assert got[0].payload == b"high" and got[0].priority == 3
    assert got[0].expires_at_ms <= now + 121_000 + 5_000
    payloads = [m.payload for m in got]
    assert b"later" not in payloads and b"at" not in payloads
    assert payloads.count(b"once") == 1
    # One message of a group at a time.
    assert b"g1" in payloads and b"g2" not in payloads
    assert [m.group for m in got if m.payload == b"g1"] == ["order-7"]
    st = client.stats(name)
    assert st["delayed"] == 1 and st["groups"] == 1
    with pytest.raises(ValueError, match="not both"):
        client.put(name, b"x", delay_ms=1, at_ms=now)
    with pytest.raises(ValueError, match="dedup_id"):
        client.put(name, [b"x", b"y"], dedup_id="z")
    entries = [fila.PutEntry(b"p1", dedup_id="e-1"), fila.PutEntry(b"p2", attributes={"a": "b"})]
    assert len(client.put_entries(name, entries)) == 2


def test_channels_and_fields(client, queue):
    client.put(queue, b"eu1", channel="eu-west")
    client.put(queue, b"us1", channel="us-east")
    client.put(queue, b"plain")
    chans = client.channels(queue)
    assert [c.name for c in chans] == [None, "eu-west", "us-east"]
    assert chans[0].visible == 1
    got = client.receive(queue, max=5, wait_ms=0, channel="eu*")
    assert [m.payload for m in got] == [b"eu1"]
    got = client.receive(queue, max=5, wait_ms=0, fields=fila.FIELDS_PAYLOAD_AND_RECEIPT)
    assert sorted(m.payload for m in got) == [b"plain", b"us1"]
    assert all(m.id == 0 and m.attributes == {} and m.receipt for m in got)
    with pytest.raises(ValueError, match="mask"):
        client.receive(queue, fields=0x10)


def test_visibility_defer_and_dead_letters(client, queue):
    client.put(queue, [b"one", b"two", b"three"])
    one, two, three = client.receive(queue, max=3, wait_ms=0)
    visible_at = client.change_visibility(queue, one.receipt, 0)
    assert visible_at <= int(time.time() * 1000) + 1000
    again = client.receive(queue, wait_ms=0)[0]
    assert again.payload == b"one" and again.delivery_count == 2
    out = client.change_visibility_batch(queue, [(again.receipt, 60_000), (one.receipt, 5)], check=False)
    assert isinstance(out[0], int) and isinstance(out[1], fila.ReceiptStale)
    client.defer(queue, two.receipt)
    assert client.stats(queue)["deferred"] == 1
    [back] = client.receive_deferred(queue, [two.seq], visibility_ms=30_000)
    assert back.payload == b"two" and back.receipt
    out = client.receive_deferred(queue, [two.seq, 999], check=False)
    assert isinstance(out[0], fila.NotFound) and isinstance(out[1], fila.NotFound)
    client.dead_letter(queue, three.receipt, reason="bad_input", description="field x")
    [dead] = client.peek(queue, dlq=True)
    assert dead.payload == b"three" and dead.dead_letter.reason == "consumer"
    assert dead.dead_letter.consumer_reason == "bad_input" and dead.dead_letter.description == "field x"
    assert dead.dead_letter.source_queue == queue
    [leased] = client.receive(queue, dlq=True, wait_ms=0)
    client.delete(queue, leased.receipt, dlq=True)
    assert client.peek(queue, dlq=True) == []


def test_a_retry_policy_holds_a_released_message_back(client):
    name = "r-" + uuid.uuid4().hex[:8]
    client.create_queue(name, retry_initial_ms=3_600_000, retry_multiplier_pct=150,
                        retry_max_ms=7_200_000, retry_jitter_pct=10)
    s = client.get_queue(name)
    assert (s.retry_initial_ms, s.retry_multiplier_pct, s.retry_max_ms, s.retry_jitter_pct) == (
        3_600_000, 150, 7_200_000, 10)
    with pytest.raises(fila.InvalidArgument, match="retry_max_ms"):
        client.update_queue(name, retry_max_ms=1000)
    client.put(name, [b"fails", b"handed back"])
    fails, handed = client.receive(name, max=2, wait_ms=0)
    now = int(time.time() * 1000)
    [at] = client.release(name, fails.receipt)
    # An hour, less up to 10 % jitter.
    assert now + 3_240_000 - 1000 <= at <= now + 3_600_000 + 1000
    # A visibility change of 0 still shows a message at once.
    client.change_visibility(name, handed.receipt, 0)
    [back] = client.receive(name, max=2, wait_ms=0)
    assert back.payload == b"handed back"
    stats = client.stats(name)
    assert (stats["delayed"], stats["retries"]) == (1, 1)
    out = client.release(name, [fails.receipt], check=False)
    assert isinstance(out[0], fila.ReceiptStale)


def test_a_peek_shows_a_messages_failed_attempts(client, queue):
    assert client.get_queue(queue).attempt_history == 10
    client.update_queue(queue, attempt_history=3)
    assert client.get_queue(queue).attempt_history == 3
    client.put(queue, b"work")
    [m] = client.receive(queue, wait_ms=0)
    client.release(queue, m.receipt, reason="timeout", description="upstream 504")
    [m] = client.receive(queue, wait_ms=0)
    client.dead_letter(queue, m.receipt, reason="bad_input", description="field x")
    [plain] = client.peek(queue, dlq=True)
    assert plain.attempts == []
    [dead] = client.peek(queue, dlq=True, attempts=True)
    assert [(a.delivery, a.ended, a.reason, a.description) for a in dead.attempts] == [
        (1, "released", "timeout", "upstream 504"),
        (2, "dead_lettered", "bad_input", "field x"),
    ]
    assert isinstance(dead.attempts[0], fila.Attempt) and dead.attempts[0].at_ms > 0


def test_a_paused_queue_refuses_puts_and_holds_receives_until_resumed(client, server, queue):
    assert client.pause_queue(queue, send=True) == (False, True)
    with pytest.raises(fila.QueuePaused, match="sending is paused") as e:
        client.put(queue, b"refused")
    assert e.value.kind == "queue_paused" and e.value.code == 14
    assert client.pause_queue(queue) == (True, True)
    s = client.get_queue(queue)
    assert s.receive_paused and s.send_paused
    assert client.resume_queue(queue, send=True) == (True, False)
    client.put(queue, b"held")
    assert client.receive(queue, wait_ms=0) == []
    got = []
    other = fila.Client(server.addr, request_timeout=30)
    t = threading.Thread(target=lambda: got.extend(other.receive(queue, wait_ms=20_000)))
    t.start()
    try:
        assert until(lambda: client.server_stats()["receives_parked"] >= 1)
        assert client.resume_queue(queue) == (False, False)
        t.join(10)
    finally:
        other.close()
    assert [m.payload for m in got] == [b"held"]


def test_peek_by_seq_and_an_operators_changes(client, queue):
    client.put(queue, [b"%d" % i for i in range(10)])
    page = client.peek(queue, from_seq=4, max=3)
    assert [m.seq for m in page] == [4, 5, 6] and all(m.receipt is None for m in page)
    assert page[0].state == "visible"
    client.delete_seq(queue, 4)
    client.dead_letter_seq(queue, 5, reason="operator", description="by hand")
    assert [m.seq for m in client.peek(queue, from_seq=4, max=2)] == [6, 7]
    [dead] = client.peek(queue, dlq=True)
    assert dead.seq == 5 or dead.payload == b"4"
    with pytest.raises(fila.NotFound):
        client.delete_seq(queue, 4)
    with pytest.raises(ValueError, match="1 to 100"):
        client.peek(queue, max=101)
    client.purge(queue)
    assert client.stats(queue)["visible"] == 0
    client.purge(queue, dlq=True)
    assert client.stats(queue)["dead_lettered"] == 0


def test_redrive_and_moves(client, queue):
    client.put(queue, [b"a", b"b", b"c"])
    for m in client.receive(queue, max=3, wait_ms=0):
        client.dead_letter(queue, m.receipt, reason="r")
    r = client.redrive(queue, max=2)
    assert (r.moved, r.scheduled) == (2, 0)
    assert client.stats(queue)["visible"] == 2
    moves = client.list_moves(queue)
    assert moves and moves[-1].from_dlq and moves[-1].status == "completed"
    target = queue + "-to"
    client.create_queue(target)
    mv = client.start_move(queue, to=target, rate=1)
    assert mv.to == target and mv.number > 0
    cancelled = client.cancel_move(queue, mv.number)
    assert cancelled.status in ("cancelled", "completed")
    with pytest.raises(fila.NotFound):
        client.cancel_move(queue, 10**9)


def test_a_filtered_redrive_is_previewed_then_moves_only_its_matches(client, queue):
    for body, tenant, reason in [(b"a1", "a", "timeout"), (b"b1", "b", "timeout"), (b"a2", "a", "bad")]:
        client.put(queue, body, attributes={"tenant": tenant})
        [m] = client.receive(queue, wait_ms=0)
        client.dead_letter(queue, m.receipt, reason=reason, description="upstream 504")
    f = fila.MoveFilter(attributes={"tenant": "a"}, reason="timeout")
    p = client.preview_move(queue, dlq=True, filter=f)
    assert (p.matched, p.next) == (1, None)
    assert [m.payload for m in p.messages] == [b"a1"]
    assert p.messages[0].attempts[-1].reason == "timeout"
    assert client.preview_move(queue, dlq=True, filter=fila.MoveFilter(text="504")).matched == 3
    assert client.stats(queue)["dead_lettered"] == 3, "a preview moves nothing"
    r = client.redrive(queue, filter=f)
    assert (r.moved, r.scheduled) == (1, 0)
    assert client.list_moves(queue)[-1].filter == f
    assert [m.payload for m in client.receive(queue, max=10, wait_ms=0)] == [b"a1"]
    with pytest.raises(fila.InvalidArgument, match="filter.until_ms"):
        client.redrive(queue, filter=fila.MoveFilter(since_ms=5, until_ms=5))
    # A move's filter, and no filter at all.
    target = queue + "-to"
    client.create_queue(target)
    mv = client.start_move(queue, to=target, filter=fila.MoveFilter(attributes={"tenant": "b"}))
    assert mv.moved == 0 and mv.filter == fila.MoveFilter(attributes={"tenant": "b"})
    assert client.redrive(queue).moved == 2 and client.list_moves(queue)[-1].filter is None


def test_a_waiting_receive_is_woken_by_a_put(client, server, queue):
    other = fila.Client(server.addr)
    try:
        timer = threading.Timer(0.3, lambda: other.put(queue, b"late"))
        timer.start()
        t0 = time.monotonic()
        got = client.receive(queue, wait_ms=10_000)
        assert [m.payload for m in got] == [b"late"] and time.monotonic() - t0 < 5
        assert client.receive(queue, wait_ms=200) == []
    finally:
        other.close()


def test_threads_share_one_connection(client, server, queue):
    errors = []

    def work(i):
        try:
            for j in range(20):
                client.put(queue, [b"%d-%d" % (i, j)] * 3)
                for m in client.receive(queue, max=3, wait_ms=0):
                    client.delete(queue, m.receipt)
        except Exception as e:  # noqa: BLE001 (collected and asserted)
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert client.stats(queue)["puts"] == 8 * 20 * 3
    assert client.server_stats()["connections"] == 1


def test_the_server_side_operations_on_a_single_node(client):
    r = client.reload()
    assert r.generation >= 1 and r.tokens == 0 and r.tls is False
    with pytest.raises(fila.InvalidArgument):
        client.cluster_status()
    with pytest.raises(fila.InvalidArgument):
        client.transfer_leader()
    assert "fila" in client.server_version


def test_connection_errors_are_clear(server):
    from fila_server import free_port

    c = fila.Client(f"127.0.0.1:{free_port()}", connect_timeout=2)
    try:
        with pytest.raises(fila.ConnectError) as e:
            c.list_queues()
        assert e.value.kind == "connect"
    finally:
        c.close()
    with pytest.raises(ValueError, match="port"):
        fila.Client("127.0.0.1:http")


def test_a_restarted_server_is_reconnected_to(tmp_path):
    from conftest import Server

    s = Server(str(tmp_path)).start()
    c = fila.Client(s.addr)
    try:
        c.create_queue("kept")
        c.put("kept", b"durable")
        port = s.addr.rsplit(":", 1)[1]
        s.stop()
        with pytest.raises((fila.ConnectionLost, fila.ConnectError)):
            c.stats("kept")
        orig = s.args
        s.args = lambda: ["--listen", f"127.0.0.1:{port}"] + orig()[2:]
        s.start()
        assert until(lambda: _try(lambda: c.stats("kept")["visible"]) == 1)
    finally:
        c.close()
        s.stop()


def _try(f):
    try:
        return f()
    except fila.FilaError:
        return None
