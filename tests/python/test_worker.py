"""fila.worker against a real server: handlers run and their messages are
deleted, leases are renewed while a handler runs, failures are retried and
then poisoned, two messages of one group never run at once, and SIGTERM
lets running handlers finish (python -m fila.worker, a real process)."""

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid

import pytest

import fila
import fila.worker
from conftest import until


class Running:
    """An App run on a thread of its own until `stop()`."""

    def __init__(self, app):
        self.app = app
        self.error = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        try:
            asyncio.run(self.app.run_async())
        except BaseException as e:  # noqa: BLE001 (asserted by stop)
            self.error = e

    def stop(self):
        self.app.stop()
        self.thread.join(30)
        assert not self.thread.is_alive(), "the worker did not stop"
        if self.error:
            raise self.error


def fresh(client, **settings):
    name = "w-" + uuid.uuid4().hex[:10]
    client.create_queue(name, **settings)
    return name


def test_handlers_run_and_messages_are_deleted(server, client):
    q = fresh(client)
    client.put(q, [b"%d" % i for i in range(40)])
    seen, lock = [], threading.Lock()
    app = fila.worker.App(server.addr)

    @app.queue_trigger(q, batch_size=8, long_poll_ms=200)
    def handle(msg):
        with lock:
            seen.append(int(msg.payload))

    run = Running(app)
    try:
        assert until(lambda: app.stats.processed == 40, secs=30)
    finally:
        run.stop()
    assert sorted(seen) == list(range(40))
    st = client.stats(q)
    assert (st["visible"], st["in_flight"], st["deletes"]) == (0, 0, 40)
    # The queue had no dead-letter target: the worker made <queue>-poison.
    assert client.get_queue(q).dead_letter_target == q + "-poison"


def test_async_handlers_run_on_the_loop(server, client):
    q = fresh(client)
    client.put(q, [b"a", b"b", b"c"])
    seen = []
    app = fila.worker.App(server.addr)

    @app.queue_trigger(q, long_poll_ms=200)
    async def handle(msg):
        await asyncio.sleep(0.01)
        seen.append(msg.payload)

    run = Running(app)
    try:
        assert until(lambda: app.stats.processed == 3, secs=30)
    finally:
        run.stop()
    assert sorted(seen) == [b"a", b"b", b"c"]


def test_a_lease_is_renewed_while_its_handler_runs(server, client):
    q = fresh(client)
    client.put(q, b"slow")
    app = fila.worker.App(server.addr)
    runs = []

    @app.queue_trigger(q, visibility_timeout_ms=1000, long_poll_ms=200)
    def handle(msg):
        runs.append(msg.delivery_count)
        time.sleep(3.0)  # three leases' worth of work

    run = Running(app)
    try:
        assert until(lambda: app.stats.processed == 1, secs=30)
    finally:
        run.stop()
    assert runs == [1]
    assert app.stats.renewals >= 2
    st = client.stats(q)
    assert (st["deliveries"], st["deletes"]) == (1, 1)


def test_failures_are_retried_then_poisoned(server, client):
    q = fresh(client)
    client.put(q, b"bad")
    client.put(q, b"good")
    app = fila.worker.App(server.addr)
    attempts = []

    @app.queue_trigger(q, max_dequeue_count=3, long_poll_ms=200)
    def handle(msg):
        attempts.append((msg.payload, msg.delivery_count))
        if msg.payload == b"bad":
            raise ValueError("cannot parse field x")

    run = Running(app)
    try:
        assert until(lambda: app.stats.poisoned == 1 and app.stats.processed == 1, secs=30)
    finally:
        run.stop()
    assert [n for p, n in attempts if p == b"bad"] == [1, 2, 3]
    assert app.stats.failed == 3
    [dead] = client.peek(q + "-poison")
    assert dead.payload == b"bad"
    assert dead.dead_letter.consumer_reason == "max_dequeue_count"
    assert "ValueError: cannot parse field x" in dead.dead_letter.description
    assert client.stats(q)["visible"] == 0


def test_a_failure_waits_for_the_queues_retry_policy(server, client):
    q = fresh(client, retry_initial_ms=3_600_000, retry_max_ms=3_600_000)
    client.put(q, b"bad")
    app = fila.worker.App(server.addr)

    @app.queue_trigger(q, long_poll_ms=200)
    def handle(msg):
        raise ValueError("not yet")

    run = Running(app)
    try:
        assert until(lambda: app.stats.failed == 1, secs=30)
    finally:
        run.stop()
    # Released as failed: the policy holds it back an hour, where the
    # worker's own wait (0) would have shown it again at once.
    st = client.stats(q)
    assert (st["visible"], st["in_flight"], st["delayed"], st["retries"]) == (0, 0, 1, 1)
    assert app.stats.failed == 1
    # The failure is kept in the message's attempts.
    [held] = client.peek(q, attempts=True)
    [a] = held.attempts
    assert a.ended == "released" and a.reason == "handler_failed"
    assert "ValueError: not yet" in a.description


def test_two_messages_of_a_group_never_run_at_once(server, client):
    q = fresh(client)
    for i in range(4):
        client.put(q, b"a%d" % i, group="a")
        client.put(q, b"b%d" % i, group="b")
    spans, lock = [], threading.Lock()
    app = fila.worker.App(server.addr)

    @app.queue_trigger(q, batch_size=16, long_poll_ms=200)
    def handle(msg):
        start = time.monotonic()
        time.sleep(0.05)
        with lock:
            spans.append((msg.group, msg.payload, start, time.monotonic()))

    run = Running(app)
    try:
        assert until(lambda: app.stats.processed == 8, secs=30)
    finally:
        run.stop()
    for g in ("a", "b"):
        mine = sorted((s for s in spans if s[0] == g), key=lambda s: s[2])
        assert [s[1] for s in mine] == [b"%s%d" % (g.encode(), i) for i in range(4)]
        for earlier, later in zip(mine, mine[1:]):
            assert earlier[3] <= later[2], f"group {g} ran two at once"


def test_a_worker_that_may_not_make_its_poison_queue_says_what_to_run(tmp_path):
    from conftest import Server

    config = tmp_path / "fila.toml"
    config.write_text(
        '[[tokens]]\nid = "w"\ntoken = "worker secret"\n'
        '[[tokens.grants]]\nqueues = "*"\npermissions = ["send", "receive"]\n'
        '[[tokens]]\nid = "admin"\ntoken = "admin secret"\n'
        '[[tokens.grants]]\nqueues = "*"\npermissions = ["send", "receive", "manage"]\n'
    )
    s = Server(str(tmp_path / "data"), config=str(config)).start()
    try:
        with fila.Client(s.addr, token="admin secret") as admin:
            admin.create_queue("jobs")
        app = fila.worker.App(s.addr, token="worker secret")
        app.queue_trigger("jobs")(lambda m: None)
        with pytest.raises(fila.worker.WorkerError, match="fila queue create jobs-poison"):
            asyncio.run(app.run_async())
    finally:
        s.stop()


WORKER = """
import time, fila.worker
app = fila.worker.App({addr!r})

@app.queue_trigger({queue!r}, long_poll_ms=200, shutdown_deadline_ms={deadline})
def handle(msg):
    open({started!r}, "a").write(msg.payload.decode() + "\\n")
    time.sleep({secs})
    open({done!r}, "a").write(msg.payload.decode() + "\\n")
"""


def start_worker(tmp_path, server, queue, secs, deadline):
    started, done = str(tmp_path / "started"), str(tmp_path / "done")
    (tmp_path / "jobs_app.py").write_text(textwrap.dedent(WORKER.format(
        addr=server.addr, queue=queue, deadline=deadline, started=started, done=done, secs=secs,
    )))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path)] + sys.path))
    proc = subprocess.Popen(
        [sys.executable, "-m", "fila.worker", "jobs_app:app"], cwd=str(tmp_path), env=env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    return proc, started, done


def lines(path):
    return open(path).read().split() if os.path.exists(path) else []


def test_sigterm_lets_a_running_handler_finish(tmp_path, server, client):
    q = fresh(client)
    client.put(q, b"job-1")
    proc, started, done = start_worker(tmp_path, server, q, secs=1.5, deadline=10_000)
    try:
        assert until(lambda: lines(started) == ["job-1"], secs=30), proc.stdout and ""
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert lines(done) == ["job-1"]
    st = client.stats(q)
    assert (st["visible"], st["in_flight"], st["deletes"]) == (0, 0, 1)


def test_past_the_deadline_the_message_is_given_back(tmp_path, server, client):
    q = fresh(client)
    client.put(q, b"job-2")
    proc, started, done = start_worker(tmp_path, server, q, secs=60, deadline=300)
    try:
        assert until(lambda: lines(started) == ["job-2"], secs=30)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0
        assert time.monotonic() - t0 < 10
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert lines(done) == []
    # Given back: visible at once, its delivery counted.
    [m] = client.receive(q, wait_ms=5_000)
    assert m.payload == b"job-2" and m.delivery_count == 2


def test_python_m_fila_worker_names_a_bad_target(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "fila.worker", "no_such_module:app"], cwd=str(tmp_path),
        capture_output=True, text=True, timeout=60,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)),
    )
    assert out.returncode == 2 and "cannot load no_such_module:app" in out.stderr


def test_a_message_back_while_its_handler_runs_is_not_run_twice(server, client, monkeypatch):
    # Renewal off: the lease runs out while the handler runs, and the
    # message comes back to this host.
    monkeypatch.setattr(fila.worker._Leases, "_due", lambda self: {})
    q = fresh(client)
    client.put(q, b"long")
    app = fila.worker.App(server.addr)
    runs = []

    @app.queue_trigger(q, visibility_timeout_ms=1000, long_poll_ms=200)
    def handle(msg):
        runs.append(msg.delivery_count)
        time.sleep(2.5)

    run = Running(app)
    try:
        assert until(lambda: app.stats.processed == 1, secs=30)
    finally:
        run.stop()
    assert runs == [1]
    st = client.stats(q)
    # Delivered again each time its lease ran out, run once, deleted once
    # with the newest lease's receipt.
    assert st["deliveries"] >= 2
    assert (st["deletes"], st["visible"], st["in_flight"]) == (1, 0, 0)


def test_what_a_poll_brings_after_a_stop_is_given_back(server, client):
    q = fresh(client)
    app = fila.worker.App(server.addr)
    app.queue_trigger(q, long_poll_ms=5_000)(lambda m: None)
    before = client.server_stats()["receives_parked"]
    run = Running(app)
    try:
        assert until(lambda: client.server_stats()["receives_parked"] > before, secs=30)
    finally:
        app.stop()
        client.put(q, b"arrived during the stop")
        run.stop()
    assert app.stats.processed == 0 and app.stats.released == 1
    st = client.stats(q)
    assert (st["visible"], st["in_flight"]) == (1, 0)


def test_polls_back_off_while_the_server_is_gone_and_resume(tmp_path):
    from conftest import Server

    s = Server(str(tmp_path / "data")).start()
    port = s.addr.rsplit(":", 1)[1]
    orig = s.args
    s.args = lambda: ["--listen", f"127.0.0.1:{port}"] + orig()[2:]
    app = fila.worker.App(s.addr, connect_timeout=1)
    seen = []
    with fila.Client(s.addr) as c:
        c.create_queue("jobs")
    app.queue_trigger("jobs", long_poll_ms=200, max_polling_interval_ms=400)(lambda m: seen.append(m.payload))
    run = Running(app)
    try:
        with fila.Client(s.addr) as c:
            assert until(lambda: c.server_stats()["receives_parked"] >= 1, secs=30)
        s.stop()
        assert until(lambda: app.stats.poll_errors >= 3, secs=30)
        errors = app.stats.poll_errors
        # Each poll is refused at once now; without back-off a second
        # would see hundreds. With it: pauses of 0.2, 0.4, then 0.4 s
        # (each ±20 %), so at most four in any second.
        time.sleep(1.0)
        assert app.stats.poll_errors - errors <= 4
        s.start()
        with fila.Client(s.addr) as c:
            c.put("jobs", b"after the restart")
        assert until(lambda: seen == [b"after the restart"], secs=30)
    finally:
        run.stop()
        s.stop()


def test_short_polls_back_off_while_the_queue_is_empty(server, client):
    q = fresh(client)
    app = fila.worker.App(server.addr)
    seen = []
    app.queue_trigger(q, long_poll_ms=0, max_polling_interval_ms=400)(lambda m: seen.append(m.payload))
    run = Running(app)
    try:
        # Prepared (its poison queue set): from here on it only polls.
        assert until(lambda: client.get_queue(q).dead_letter_target == q + "-poison")
        before = client.server_stats()["requests"]
        time.sleep(1.5)
        polls = client.server_stats()["requests"] - before - 1
        # Empty short polls pause 0.2, 0.4, then 0.4 s (±20 %): about five
        # in 1.5 s; 100 ms apart would be fifteen, no pause hundreds.
        assert 1 <= polls <= 8, polls
        client.put(q, b"found")
        assert until(lambda: seen == [b"found"], secs=30)
    finally:
        run.stop()


def test_base64_payloads_are_decoded_and_a_bad_one_is_poisoned_at_once(server, client):
    q = fresh(client)
    client.put(q, b"aGVsbG8=")  # "hello"
    client.put(q, b"not base64!")
    seen = []
    app = fila.worker.App(server.addr)
    app.queue_trigger(q, message_encoding="base64", long_poll_ms=200)(lambda m: seen.append(m.payload))
    run = Running(app)
    try:
        assert until(lambda: app.stats.processed == 1 and app.stats.poisoned == 1, secs=30)
    finally:
        run.stop()
    assert seen == [b"hello"]
    [dead] = client.peek(q + "-poison")
    assert dead.payload == b"not base64!" and dead.delivery_count == 0
    assert "not base64" in dead.dead_letter.description and dead.dead_letter.delivery_count == 1
