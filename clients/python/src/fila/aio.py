"""`AsyncClient`: the client on asyncio, pipelined by request id over one
connection per node (docs/python.md). `Client` runs it on a thread of its
own."""

from __future__ import annotations

import asyncio
import random
import ssl
from collections import OrderedDict
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from . import _addr, _ops
from . import types as t
from ._ops import Call, PutEntry, Receipt, receipt_bytes
from ._wire import FLAG_ERROR, FRAME_MAX, HEADER, VERSION, Reader, frame
from .errors import (
    ConnectError, ConnectionLost, FilaError, FrameTooLarge, NotLeader, ProtocolError,
    ServerError, Timeout, TlsError, UnsupportedVersion, server_error,
)

CLIENT_NAME = "fila-python/0.1.0"
#: A `not_leader` that names the leader is followed this many times at once,
LEADER_HOPS = 3
#: then after pauses of 10 ms doubling up to 200 ms, for up to this long.
LEADER_WAIT = 10.0
#: Queues whose route (the node that leads their partition) is kept.
ROUTES_MAX = 4096
#: Connections kept to nodes other than the one talked to.
ROUTE_CONNS_MAX = 8
#: Batches in flight at once on a connection (each of up to 20 entries).
IN_FLIGHT_MAX = 32
_WRITE_HIGH = 1 << 20


class _Conn:
    """One connection: requests written as they come, answers matched to
    them by request id by one reading task."""

    def __init__(self, addr: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.addr = addr
        self.reader = reader
        self.writer = writer
        self.pending: Dict[int, asyncio.Future] = {}
        self.next_id = 1
        self.lost: Optional[FilaError] = None
        self.max_frame = FRAME_MAX
        self.server = ""
        self.version = VERSION
        self.task = asyncio.get_running_loop().create_task(self._read())

    def send(self, call: Call) -> Tuple[int, asyncio.Future]:
        if self.lost is not None:
            raise self.lost
        rid = self.next_id
        self.next_id = rid + 1 if rid < (1 << 64) - 1 else 1
        data = frame(call.opcode, rid, call.body)
        if len(data) - 4 > self.max_frame:
            raise FrameTooLarge(
                f"a request of {len(data) - 4} bytes: the server takes frames of at most {self.max_frame}"
            )
        fut = asyncio.get_running_loop().create_future()
        self.pending[rid] = fut
        self.writer.write(data)
        return rid, fut

    async def drain(self) -> None:
        t = self.writer.transport
        if t is not None and t.get_write_buffer_size() > _WRITE_HIGH:
            try:
                await self.writer.drain()
            except (OSError, ConnectionError) as e:
                self._fail(ConnectionLost(f"writing to {self.addr}: {e}"))

    async def _read(self) -> None:
        why: FilaError
        try:
            while True:
                try:
                    head = await self.reader.readexactly(16)
                except asyncio.IncompleteReadError as e:
                    if e.partial:
                        raise
                    why = ConnectionLost(f"{self.addr} closed the connection")
                    break
                length, _version, _op, flags, rid = HEADER.unpack(head)
                if length < 12 or length > FRAME_MAX:
                    why = ProtocolError(f"{self.addr} sent a frame of length {length}")
                    break
                body = await self.reader.readexactly(length - 12)
                fut = self.pending.pop(rid, None)
                if fut is not None:
                    if not fut.done():
                        fut.set_result((flags, body))
                elif rid == 0 and flags & FLAG_ERROR:
                    # An error that closes the connection (a limit, a
                    # blocked address): every call waiting fails with it.
                    try:
                        why = server_error(*Reader(body).error())
                    except ProtocolError as e:
                        why = e
                    break
        except asyncio.IncompleteReadError:
            why = ConnectionLost(f"{self.addr} closed the connection in the middle of an answer")
        except (OSError, ConnectionError, ssl.SSLError) as e:
            why = ConnectionLost(f"the connection to {self.addr} broke: {e}")
        except asyncio.CancelledError:
            why = ConnectionLost(f"the connection to {self.addr} was closed")
            self._fail(why)
            raise
        self._fail(why)

    def _fail(self, why: FilaError) -> None:
        if self.lost is None:
            self.lost = why
        pending, self.pending = self.pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(why)
                # Marked retrieved: a call that stopped waiting (it raised
                # for another reason) leaves no "never retrieved" warning;
                # one that awaits it still gets the error.
                fut.exception()
        self.writer.close()

    def forget(self, rid: int) -> None:
        self.pending.pop(rid, None)

    def close(self) -> None:
        if self.lost is None:
            self.task.cancel()
            self._fail(ConnectionLost(f"the connection to {self.addr} was closed"))


def _answer(call: Call, flags: int, body: bytes) -> Any:
    r = Reader(body)
    if flags & FLAG_ERROR:
        raise server_error(*r.error())
    return call.parse(r, flags)


class AsyncClient:
    """The fila client for asyncio. One connection to the node it talks
    to (and one to each node a cluster's route names), opened at the first
    call; every call on it pipelined. Not shared across event loops."""

    def __init__(
        self,
        addr: str = "127.0.0.1:7700",
        token: Optional[str] = None,
        tls: _addr.TlsArg = None,
        *,
        server_name: Optional[str] = None,
        connect_timeout: float = 5.0,
        request_timeout: float = 30.0,
        follow_leader: bool = True,
        name: str = CLIENT_NAME,
    ) -> None:
        self._nodes, wanted = _addr.parse(addr)
        self._tls = _addr.context(tls, wanted)
        self._server_name = server_name
        self._token = token
        self.connect_timeout = connect_timeout
        self.request_timeout = request_timeout
        self.follow_leader = follow_leader
        self._name = name
        self._at = 0  # the node talked to: self._nodes[self._at] or a leader named
        self._addr = self._nodes[0]
        self._conns: "OrderedDict[str, _Conn]" = OrderedDict()
        self._connecting: Dict[str, asyncio.Future] = {}
        self._routes: Dict[str, str] = {}
        self._closed = False

    # ---- connections ----------------------------------------------------

    @property
    def addr(self) -> str:
        """The node it talks to now."""
        return self._addr

    @property
    def server_version(self) -> str:
        """What the server said it is in the hello (empty before)."""
        c = self._conns.get(self._addr)
        return c.server if c else ""

    async def connect(self) -> "AsyncClient":
        """Connects now (else the first call does)."""
        await self._conn(None)
        return self

    async def __aenter__(self) -> "AsyncClient":
        return await self.connect()

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        """Closes every connection; calls waiting fail with
        `ConnectionLost`."""
        self._closed = True
        for c in list(self._conns.values()):
            c.close()
        self._conns.clear()

    async def _open(self, addr: str) -> _Conn:
        host, port = _addr.split(addr)
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(
                    host, port, ssl=self._tls,
                    server_hostname=(self._server_name or host) if self._tls else None,
                    limit=1 << 20,
                ),
                self.connect_timeout,
            )
        except ssl.SSLError as e:
            raise TlsError(f"TLS with {addr}: {e.reason or e}") from None
        except asyncio.TimeoutError:
            raise ConnectError(f"{addr}: no connection within {self.connect_timeout} s") from None
        except OSError as e:
            raise ConnectError(f"{addr}: {e.strerror or e}") from None
        sock = writer.get_extra_info("socket")
        if sock is not None:
            import socket

            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        c = _Conn(addr, reader, writer)
        try:
            name, version, max_frame = await self._ask(c, _ops.hello(self._name, VERSION))
            if version != VERSION:
                raise UnsupportedVersion(
                    f"{addr} speaks protocol version {version}; this client speaks {VERSION} (upgrade the server)"
                )
            c.server, c.version, c.max_frame = name, version, min(max_frame, FRAME_MAX)
            if self._token is not None:
                await self._ask(c, _ops.auth(self._token))
        except BaseException:
            c.close()
            raise
        return c

    async def _ask(self, c: _Conn, call: Call) -> Any:
        rid, fut = c.send(call)
        flags, body = await self._wait(c, rid, fut, call)
        return _answer(call, flags, body)

    async def _wait(self, c: _Conn, rid: int, fut: asyncio.Future, call: Call) -> Tuple[int, bytes]:
        secs = self.request_timeout + call.wait_ms / 1000.0
        loop = asyncio.get_running_loop()
        timer = loop.call_later(secs, _expire, fut, secs)
        try:
            return await fut
        finally:
            timer.cancel()
            c.forget(rid)

    async def _conn(self, route: Optional[str]) -> _Conn:
        if self._closed:
            raise ConnectionLost("the client is closed")
        addr = route or self._addr
        c = self._conns.get(addr)
        if c is not None and c.lost is None:
            return c
        if c is not None:
            del self._conns[addr]
        waiting = self._connecting.get(addr)
        if waiting is not None:
            return await asyncio.shield(waiting)
        fut = asyncio.get_running_loop().create_future()
        self._connecting[addr] = fut
        try:
            if route is None:
                c = await self._connect_default()
            else:
                c = await self._open(addr)
            self._conns[c.addr] = c
            self._trim()
            fut.set_result(c)
            return c
        except BaseException as e:
            fut.set_exception(e)
            fut.exception()  # retrieved: no warning when nobody else waited
            raise
        finally:
            del self._connecting[addr]

    async def _connect_default(self) -> _Conn:
        """The node talked to, or the next of the list that answers."""
        first: Optional[FilaError] = None
        tried = [self._addr] + [n for n in self._nodes if n != self._addr]
        for addr in tried:
            try:
                c = await self._open(addr)
            except ConnectError as e:
                first = first or e
                continue
            self._addr = addr
            return c
        assert first is not None
        raise first

    def _trim(self) -> None:
        others = [a for a in self._conns if a != self._addr]
        while len(others) > ROUTE_CONNS_MAX:
            self._conns.pop(others.pop(0)).close()

    def _route(self, call: Call) -> Optional[str]:
        if call.queue is None:
            return None
        r = self._routes.get(call.queue)
        return None if r == self._addr else r

    async def _conn_for(self, call: Call) -> _Conn:
        """The connection for `call`: to its queue's route, or (a route
        whose node cannot be reached is dropped) to the node talked to."""
        route = self._route(call)
        try:
            return await self._conn(route)
        except ConnectError:
            if route is None:
                raise
            self._routes.pop(call.queue or "", None)
            return await self._conn(None)

    def _learn(self, call: Call, leader: str) -> None:
        if call.queue is None:
            self._addr = leader
            return
        if len(self._routes) >= ROUTES_MAX:
            self._routes.clear()
        self._routes[call.queue] = leader

    # ---- calls -------------------------------------------------------------

    async def call(self, call: Call) -> Any:
        """Sends one request and answers what its answer reads as,
        following a cluster's `not_leader` (docs/python.md)."""
        return (await self._calls([call]))[0]

    async def _calls(self, calls: Sequence[Call]) -> List[Any]:
        """Sends the requests pipelined; answers each one's value (raising
        the first failure once every answer is in)."""
        out: List[Any] = [None] * len(calls)
        sent = []
        first: Optional[BaseException] = None
        for i, call in enumerate(calls):
            c = await self._conn_for(call)
            rid, fut = c.send(call)
            sent.append((i, c, rid, fut))
            await c.drain()
        for i, c, rid, fut in sent:
            try:
                flags, body = await self._wait(c, rid, fut, calls[i])
                out[i] = _answer(calls[i], flags, body)
            except NotLeader as e:
                try:
                    out[i] = await self._follow(calls[i], e)
                except BaseException as e2:
                    first = first or e2
            except BaseException as e:
                first = first or e
        if first is not None:
            raise first
        return out

    async def _follow(self, call: Call, refused: NotLeader) -> Any:
        if not self.follow_leader:
            raise refused
        loop = asyncio.get_running_loop()
        deadline = loop.time() + LEADER_WAIT
        hops, pause = 0, 0.01
        while True:
            leader = _addr.leader_of(refused.message)
            hops += 1
            if leader is not None:
                self._learn(call, leader)
            if hops > LEADER_HOPS or leader is None:
                if loop.time() + pause > deadline:
                    raise refused
                await asyncio.sleep(pause * (0.8 + 0.4 * random.random()))
                pause = min(pause * 2, 0.2)
            c = await self._conn_for(call)
            try:
                return await self._ask(c, call)
            except NotLeader as e:
                refused = e

    async def _batched(self, calls: List[Call]) -> List[Any]:
        out: List[Any] = []
        for i in range(0, len(calls), IN_FLIGHT_MAX):
            for part in await self._calls(calls[i : i + IN_FLIGHT_MAX]):
                out.extend(part)
        return out

    # ---- queues --------------------------------------------------------------

    async def create_queue(self, name: str, **settings: Any) -> bool:
        """Creates a queue with the settings given (the others at their
        defaults); answers False when it existed with the same settings.
        `queue_exists` when it exists with others."""
        return await self.call(_ops.create_queue(name, settings))

    async def get_queue(self, name: str) -> t.QueueSettings:
        return await self.call(_ops.get_queue(name))

    async def update_queue(self, name: str, **settings: Any) -> t.QueueSettings:
        """Changes the settings given; answers the settings now in force.
        `dead_letter_target=None` goes back to the built-in dead-letter
        queue; `tags` adds or changes tags, `remove_tags` removes keys."""
        return await self.call(_ops.update_queue(name, settings))

    async def list_queues_page(
        self, prefix: str = "", after: str = "", limit: int = 1000
    ) -> Tuple[List[str], Optional[str]]:
        """One page of names after `after`; the second value, when not
        None, is the `after` of the next page."""
        return await self.call(_ops.list_queues(prefix, after, limit))

    async def list_queues(self, prefix: str = "") -> List[str]:
        """Every queue's name that starts with `prefix` (the token's own,
        with tokens), sorted."""
        names: List[str] = []
        after: Optional[str] = ""
        while after is not None:
            page, after = await self.list_queues_page(prefix, after)
            names.extend(page)
        return names

    async def delete_queue(self, name: str, if_exists: bool = False) -> None:
        await self.call(_ops.delete_queue(name, if_exists))

    async def purge(self, queue: str, dlq: bool = False) -> None:
        """Removes every message of the queue (of its dead-letter queue
        with `dlq`)."""
        await self.call(_ops.purge(queue, dlq))

    async def pause_queue(self, queue: str, receive: bool = False, send: bool = False) -> Tuple[bool, bool]:
        """Pauses the queue's receiving, sending, or (neither named) both
        (needs manage): its receives find nothing — those that wait, wait —
        and its puts are refused `QueuePaused`, until `resume_queue`.
        Answers what is paused now, (receive, send)."""
        return await self.call(_ops.pause(queue, receive, send, True))

    async def resume_queue(self, queue: str, receive: bool = False, send: bool = False) -> Tuple[bool, bool]:
        """Resumes what a pause paused (neither named: both); answers what
        is paused now, (receive, send)."""
        return await self.call(_ops.pause(queue, receive, send, False))

    async def stats(self, queue: str) -> Dict[str, int]:
        """The queue's counts and counters (names as docs/protocol.md's
        `stats`)."""
        return await self.call(_ops.queue_stats(queue))

    async def channels(self, queue: str) -> List[t.Channel]:
        """The default channel and every named channel with messages ready
        (needs manage)."""
        out: List[t.Channel] = []
        after: Optional[str] = ""
        while after is not None:
            page, after = await self.call(_ops.channels(queue, after, 100))
            out.extend(page)
        return out

    # ---- messages ------------------------------------------------------------

    async def put(
        self,
        queue: str,
        payload: Union[bytes, str, Sequence[Union[bytes, str]]],
        attributes: Optional[Dict[str, str]] = None,
        channel: Optional[str] = None,
        delay_ms: Optional[int] = None,
        at_ms: Optional[int] = None,
        ttl_ms: Optional[int] = None,
        dedup_id: Optional[str] = None,
        group: Optional[str] = None,
        priority: Optional[int] = None,
        check: bool = True,
    ) -> List[Any]:
        """Puts one payload, or each of a list with the same options (any
        number: sent as requests of 20, pipelined). Answers a `PutResult`
        each, in order; an entry that failed raises `BatchError` (with
        `check=False` it is its `FilaError` in the list instead)."""
        payloads: List[Union[bytes, str]]
        if isinstance(payload, (bytes, bytearray, memoryview, str)):
            payloads = [payload if isinstance(payload, str) else bytes(payload)]
        else:
            payloads = list(payload)
        if dedup_id is not None and len(payloads) != 1:
            raise ValueError("dedup_id names one message: put the others with put_entries")
        es = [
            PutEntry(p, attributes, channel, delay_ms, at_ms, ttl_ms, dedup_id, group, priority)
            for p in payloads
        ]
        return await self.put_entries(queue, es, check)

    async def put_entries(self, queue: str, entries: Sequence[PutEntry], check: bool = True) -> List[Any]:
        """Puts messages that differ in their options (`fila.PutEntry`)."""
        if not entries:
            raise ValueError("a put needs at least one message")
        calls = [_ops.put(queue, part) for part in _ops.chunks(entries)]
        return _ops.checked(await self._batched(calls), check)

    async def cancel(self, queue: str, seq: int) -> None:
        """Cancels a scheduled (delayed) message before it is due."""
        await self.call(_ops.cancel(queue, seq))

    async def receive(
        self,
        queue: str,
        max: int = 1,
        wait_ms: Optional[int] = None,
        visibility_ms: Optional[int] = None,
        channel: Optional[str] = None,
        dlq: bool = False,
        fields: Optional[int] = None,
    ) -> List[t.Message]:
        """Leases up to `max` (1–20) messages, waiting up to `wait_ms` for
        one (None: the queue's default wait); each is leased for
        `visibility_ms` (None: the queue's timeout). `channel`: a name or
        `prefix*`. `fields`: a mask of `fila.FIELDS_*` (the payload and
        the receipt always come)."""
        return await self.call(_ops.receive(queue, max, wait_ms, visibility_ms, channel, dlq, fields))

    async def delete(
        self, queue: str, receipts: Union[Receipt, Sequence[Receipt]], dlq: bool = False, check: bool = True
    ) -> List[Optional[FilaError]]:
        """Deletes leased messages by receipt (one or a list of any
        length); answers None for each deleted (see `put` for `check`)."""
        rs = _receipts(receipts)
        calls = [_ops.delete(queue, dlq, part) for part in _ops.chunks(rs)]
        return _ops.checked(await self._batched(calls), check)

    async def release(
        self,
        queue: str,
        receipts: Union[Receipt, Sequence[Receipt]],
        dlq: bool = False,
        check: bool = True,
        reason: str = "",
        description: str = "",
    ) -> List[Any]:
        """Ends leases as failed (a "nack"; one receipt or a list of any
        length), with a reason and a description each message keeps in its
        attempts: each message is visible again after its queue's retry
        policy's delay, at once without one. Answers when each is visible
        next (ms since the epoch; see `put` for `check`)."""
        rs = _receipts(receipts)
        calls = [_ops.release(queue, dlq, part, reason, description) for part in _ops.chunks(rs)]
        return _ops.checked(await self._batched(calls), check)

    async def change_visibility(self, queue: str, receipt: Receipt, ms: int, dlq: bool = False) -> int:
        """Sets a lease to end `ms` from now (0: visible again at once);
        answers when it is visible next (ms since the epoch)."""
        out = await self.call(_ops.update_visibility(queue, dlq, [(receipt_bytes(receipt), ms)]))
        return _ops.checked(out, True)[0]

    async def change_visibility_batch(
        self, queue: str, items: Sequence[Tuple[Receipt, int]], dlq: bool = False, check: bool = True
    ) -> List[Any]:
        """`change_visibility` for many (receipt, ms) pairs."""
        pairs = [(receipt_bytes(r), ms) for r, ms in items]
        calls = [_ops.update_visibility(queue, dlq, part) for part in _ops.chunks(pairs)]
        return _ops.checked(await self._batched(calls), check)

    async def defer(self, queue: str, receipt: Receipt) -> None:
        """Sets a leased message aside until `receive_deferred` asks for
        it by sequence number."""
        await self.call(_ops.defer(queue, receipt_bytes(receipt)))

    async def receive_deferred(
        self, queue: str, seqs: Sequence[int], visibility_ms: Optional[int] = None, check: bool = True
    ) -> List[Any]:
        """Leases deferred messages by sequence number."""
        seqs = list(seqs)
        calls = [_ops.receive_deferred(queue, part, visibility_ms) for part in _ops.chunks(seqs)]
        return _ops.checked(await self._batched(calls), check)

    async def dead_letter(
        self, queue: str, receipt: Receipt, reason: Optional[str] = None, description: Optional[str] = None
    ) -> None:
        """Moves a leased message to the dead-letter queue with a reason."""
        await self.call(
            _ops.dead_letter_receipt(queue, receipt_bytes(receipt), reason or "", description or "")
        )

    async def peek(
        self, queue: str, from_seq: int = 0, max: int = 20, dlq: bool = False, attempts: bool = False
    ) -> List[t.Message]:
        """Reads messages in sequence order from `from_seq`, leasing
        nothing (1–100; fewer when they pass 16 MiB); with `attempts`, each
        message's failed attempts too (`Message.attempts`)."""
        return await self.call(_ops.peek(queue, dlq, from_seq, max, attempts))

    async def delete_seq(self, queue: str, seq: int, dlq: bool = False) -> None:
        """An operator's delete of one message in any state (manage)."""
        await self.call(_ops.delete_seq(queue, dlq, seq))

    async def dead_letter_seq(self, queue: str, seq: int, reason: str = "", description: str = "") -> None:
        """An operator's dead-letter of one message in any state (manage)."""
        await self.call(_ops.dead_letter_seq(queue, seq, reason, description))

    async def redrive(
        self,
        queue: str,
        max: Optional[int] = None,
        rate: Optional[int] = None,
        filter: Optional[t.MoveFilter] = None,
    ) -> t.Redrive:
        """Moves the dead-letter queue's messages back (`max` of them, at
        `rate` a second; with a `filter`, only those it takes: `scheduled`
        then counts every visible dead letter left, matching or not)."""
        return await self.call(_ops.redrive(queue, max, rate, filter))

    async def start_move(
        self,
        queue: str,
        to: Optional[str] = None,
        max: Optional[int] = None,
        rate: Optional[int] = None,
        filter: Optional[t.MoveFilter] = None,
    ) -> t.Move:
        """Starts a move task of the queue's visible messages (a
        dead-letter target's back to their sources, or all `to`; with a
        `filter`, only those it takes)."""
        return await self.call(_ops.start_move(queue, to, max, rate, filter))

    async def preview_move(
        self,
        queue: str,
        dlq: bool = False,
        to: Optional[str] = None,
        filter: Optional[t.MoveFilter] = None,
        from_seq: int = 0,
    ) -> t.MovePreview:
        """What a redrive (`dlq`) or a move to `to` (None: back to each
        message's source) with `filter` would take, looking at 10 000
        entries from `from_seq` at most: call again from `next` while it
        is not None to count a longer queue. Moves nothing; needs
        receive."""
        return await self.call(_ops.preview_move(queue, dlq, to, filter, from_seq))

    async def list_moves(self, queue: str) -> List[t.Move]:
        return await self.call(_ops.list_moves(queue))

    async def cancel_move(self, queue: str, number: int) -> t.Move:
        return await self.call(_ops.cancel_move(queue, number))

    # ---- the server ----------------------------------------------------------

    async def server_stats(self) -> Dict[str, int]:
        return await self.call(_ops.server_stats())

    async def reload(self) -> t.Reload:
        """Makes the server read its tokens and TLS files again."""
        return await self.call(_ops.reload())

    async def cluster_status(self) -> t.ClusterStatus:
        return await self.call(_ops.get_cluster_status())

    async def add_learner(self, node_id: int, peer: str, client: str) -> None:
        await self.call(_ops.change_cluster(1, lambda w: w.u64(node_id).str(peer).str(client)))

    async def promote(self, node_id: int) -> None:
        await self.call(_ops.change_cluster(2, lambda w: w.u64(node_id)))

    async def remove_node(self, node_id: int) -> None:
        await self.call(_ops.change_cluster(3, lambda w: w.u64(node_id)))

    async def transfer_leader(self, to: Optional[int] = None) -> None:
        await self.call(_ops.change_cluster(4, lambda w: w.opt(to, w.u64)))

    async def move_replicas(self, from_id: int, to_id: int, peer: str, client: str) -> None:
        await self.call(
            _ops.change_cluster(5, lambda w: w.u64(from_id).u64(to_id).str(peer).str(client))
        )


def _expire(fut: asyncio.Future, secs: float) -> None:
    if not fut.done():
        fut.set_exception(Timeout(f"no answer within {secs:g} s"))
        fut.exception()  # as in `_Conn._fail`


def _receipts(rs: Union[Receipt, Sequence[Receipt]]) -> List[bytes]:
    if isinstance(rs, (bytes, bytearray, str)):
        return [receipt_bytes(rs)]
    return [receipt_bytes(r) for r in rs]


__all__ = ["AsyncClient", "ServerError"]
