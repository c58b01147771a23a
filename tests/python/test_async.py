"""fila.AsyncClient against a real server: pipelining on one connection,
long polls beside other calls, timeouts, and a server that closes in the
middle of an answer (a clear error, never a hang)."""

import asyncio
import socket
import struct
import threading
import time
import uuid

import pytest

import fila


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def test_every_call_of_a_task_group_shares_one_connection(server):
    async def main():
        async with fila.AsyncClient(server.addr) as c:
            q = "a-" + uuid.uuid4().hex[:8]
            assert await c.create_queue(q)

            async def produce(i):
                await c.put(q, [b"%d-%d" % (i, j) for j in range(25)])

            await asyncio.gather(*(produce(i) for i in range(8)))
            got = []
            while len(got) < 200:
                got += await c.receive(q, max=20, wait_ms=0)
            assert len({m.payload for m in got}) == 200
            await c.delete(q, [m.receipt for m in got])
            st = await c.stats(q)
            assert (st["puts"], st["deletes"]) == (200, 200)
            assert (await c.server_stats())["connections"] == 1

    run(main())


def test_a_parked_receive_does_not_hold_up_other_calls(server):
    async def main():
        async with fila.AsyncClient(server.addr) as c:
            q = "p-" + uuid.uuid4().hex[:8]
            await c.create_queue(q)
            waiting = asyncio.ensure_future(c.receive(q, wait_ms=10_000))
            await asyncio.sleep(0.1)
            t0 = time.monotonic()
            for _ in range(20):
                await c.stats(q)
            assert time.monotonic() - t0 < 5 and not waiting.done()
            await c.put(q, b"wake")
            got = await waiting
            assert [m.payload for m in got] == [b"wake"]

    run(main())


def test_a_call_times_out_alone():
    addr = fake_server(hello_answer, hold=True)

    async def main():
        async with fila.AsyncClient(addr, request_timeout=0.3) as c:
            t0 = time.monotonic()
            with pytest.raises(fila.Timeout) as e:
                await c.stats("q")
            assert e.value.kind == "timeout" and time.monotonic() - t0 < 5

    run(main())


def test_errors_carry_their_kind(server):
    async def main():
        async with fila.AsyncClient(server.addr) as c:
            with pytest.raises(fila.QueueNotFound) as e:
                await c.receive("missing-" + uuid.uuid4().hex[:6], wait_ms=0)
            assert isinstance(e.value, fila.FilaError) and e.value.code == 2
            with pytest.raises(fila.InvalidArgument):
                await c.create_queue("bad name!")

    run(main())


def fake_server(answer, hold=False):
    """A listener that reads one hello frame and writes `answer(request
    id)` back, then closes (with `hold`, once the client has). Answers
    its address."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)

    def serve():
        conn, _ = sock.accept()
        with conn:
            head = conn.recv(16)
            length, _, _, _, rid = struct.unpack(">IBBHQ", head)
            conn.recv(length - 12)
            conn.sendall(answer(rid))
            while hold and conn.recv(1 << 16):
                pass
        sock.close()

    threading.Thread(target=serve, daemon=True).start()
    return "127.0.0.1:%d" % sock.getsockname()[1]


def hello_answer(rid):
    """A hello's answer in the protocol version this client speaks."""
    from fila._wire import VERSION

    name = b"fake"
    body = struct.pack(">H", len(name)) + name + bytes((VERSION,)) + struct.pack(">I", 1 << 20)
    return struct.pack(">IBBHQ", 12 + len(body), VERSION, 1, 1, rid) + body


def test_a_server_that_closes_mid_answer_fails_the_call():
    addr = fake_server(lambda rid: hello_answer(rid)[:20])
    c = fila.Client(addr, connect_timeout=2, request_timeout=10)
    try:
        t0 = time.monotonic()
        with pytest.raises(fila.ConnectionLost, match="middle of an answer"):
            c.list_queues()
        assert time.monotonic() - t0 < 5
    finally:
        c.close()


def test_a_server_that_closes_after_the_hello_fails_the_pending_call():
    addr = fake_server(hello_answer)

    async def main():
        c = fila.AsyncClient(addr, request_timeout=10)
        try:
            with pytest.raises(fila.ConnectionLost, match="closed the connection|broke"):
                await c.stats("q")
        finally:
            await c.close()

    run(main())


def test_a_frame_over_the_limit_is_refused_before_it_is_sent():
    addr = fake_server(hello_answer)
    c = fila.Client(addr)
    try:
        with pytest.raises(fila.FrameTooLarge, match="at most 1048576"):
            c.put("q", b"x" * (2 << 20))
    finally:
        c.close()


def test_an_old_server_is_named():
    def v1(rid):
        name = b"old"
        body = struct.pack(">H", len(name)) + name + bytes((1,)) + struct.pack(">I", 1 << 20)
        return struct.pack(">IBBHQ", 12 + len(body), 1, 1, 1, rid) + body

    c = fila.Client(fake_server(v1))
    try:
        with pytest.raises(fila.UnsupportedVersion, match="version 1"):
            c.list_queues()
    finally:
        c.close()
