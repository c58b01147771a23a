"""Every operation once: its request's body and the reading of its answer,
shared by `Client` and `AsyncClient` (docs/protocol.md). No I/O here."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

from . import types as t
from ._wire import BATCH_MAX, FLAG_FIELDS, Reader, Writer
from .errors import BatchError, FilaError, ProtocolError, server_error

HELLO = 0x01
AUTH = 0x02
SERVER_STATS = 0x03
RELOAD = 0x04
CLUSTER_STATUS = 0x05
CHANGE_CLUSTER = 0x06
CREATE_QUEUE = 0x10
GET_QUEUE = 0x11
UPDATE_QUEUE = 0x12
LIST_QUEUES = 0x13
DELETE_QUEUE = 0x14
PURGE = 0x15
QUEUE_STATS = 0x16
PAUSE_QUEUE = 0x17
RESUME_QUEUE = 0x18
PUT = 0x20
CANCEL = 0x21
RECEIVE = 0x22
UPDATE_VISIBILITY = 0x23
DELETE = 0x24
DEFER = 0x25
RECEIVE_DEFERRED = 0x26
DEAD_LETTER = 0x27
PEEK = 0x28
REDRIVE = 0x29
START_MOVE = 0x2A
LIST_MOVES = 0x2B
CANCEL_MOVE = 0x2C
DELETE_SEQ = 0x2D
DEAD_LETTER_SEQ = 0x2E
CHANNELS = 0x2F
RELEASE = 0x30
PREVIEW_MOVE = 0x31

Receipt = Union[bytes, str]
Parse = Callable[[Reader, int], Any]


@dataclass
class Call:
    """One request: its opcode and body, how its answer reads (from the
    body and the frame's flags), and the queue it concerns (for a
    cluster's routes; None for the server's own requests)."""

    opcode: int
    body: bytes
    parse: Parse
    queue: Optional[str] = None
    wait_ms: int = 0


def _empty(r: Reader, flags: int) -> None:
    r.end()


def _ended(get: Callable[[Reader], Any]) -> Parse:
    def parse(r: Reader, flags: int) -> Any:
        v = get(r)
        r.end()
        return v

    return parse


def receipt_bytes(r: Receipt) -> bytes:
    """A receipt as its 32 bytes (given as bytes or 64 hex digits)."""
    if isinstance(r, str):
        try:
            b = bytes.fromhex(r)
        except ValueError:
            raise ValueError("a receipt in hex is 64 hex digits") from None
    else:
        b = bytes(r)
    if len(b) != 32:
        raise ValueError(f"a receipt is 32 bytes (64 hex digits), not {len(b)} bytes")
    return b


# ---- structures ---------------------------------------------------------

SETTINGS = (
    "visibility_timeout_ms", "max_deliveries", "retention_ms", "max_message_bytes",
    "receive_wait_default_ms", "dead_letter_on_expiration", "dead_letter_target",
    "max_messages", "max_bytes", "channel_capacity_pct", "delay_ms", "redrive_allow",
    "tags", "remove_tags", "dedup_window_ms", "content_dedup", "ordered",
    "priority_levels", "priority_fairness",
    "retry_initial_ms", "retry_multiplier_pct", "retry_max_ms", "retry_jitter_pct",
    "attempt_history",
)


def patch(w: Writer, s: Dict[str, Any]) -> None:
    """A settings patch: the settings named in `s` (every other absent)."""
    unknown = sorted(set(s) - set(SETTINGS))
    if unknown:
        raise TypeError(f"unknown queue setting {unknown[0]!r}; the settings are: {', '.join(SETTINGS)}")
    g = s.get
    w.opt(g("visibility_timeout_ms"), w.u64)
    w.opt(g("max_deliveries"), w.u32)
    w.opt(g("retention_ms"), w.u64)
    w.opt(g("max_message_bytes"), w.u32)
    w.opt(g("receive_wait_default_ms"), w.u64)
    w.opt(g("dead_letter_on_expiration"), w.boolean)
    # Present with None: back to the built-in dead-letter queue.
    _set_or_clear(w, s, "dead_letter_target")
    w.opt(g("max_messages"), w.u64)
    w.opt(g("max_bytes"), w.u64)
    w.opt(g("channel_capacity_pct"), w.u8)
    w.opt(g("delay_ms"), w.u64)
    _set_or_clear(w, s, "redrive_allow")
    w.pairs(dict(g("tags") or {}))
    remove = list(g("remove_tags") or [])
    w.count(len(remove))
    for k in remove:
        w.str(k)
    later = [g(k) is not None for k in SETTINGS[14:]]
    if any(later):
        w.opt(g("dedup_window_ms"), w.u64)
        w.opt(g("content_dedup"), w.boolean)
        if any(later[2:]):
            w.opt(g("ordered"), w.boolean)
            if any(later[3:]):
                w.opt(g("priority_levels"), w.u8)
                w.opt(g("priority_fairness"), w.u32)
                if any(later[5:]):
                    w.opt(g("retry_initial_ms"), w.u64)
                    w.opt(g("retry_multiplier_pct"), w.u32)
                    w.opt(g("retry_max_ms"), w.u64)
                    w.opt(g("retry_jitter_pct"), w.u8)
                    if any(later[9:]):
                        w.opt(g("attempt_history"), w.u32)


def _set_or_clear(w: Writer, s: Dict[str, Any], key: str) -> None:
    """An `opt<opt<str>>` setting: absent (unchanged), or present with a
    value or None (cleared)."""
    if key in s:
        w.u8(1).opt(s[key], w.str)
    else:
        w.u8(0)


def settings(r: Reader) -> t.QueueSettings:
    vis, maxd, ret, maxb = r.u64(), r.u32(), r.u64(), r.u32()
    wait, dloe = r.u64(), r.boolean()
    target = r.opt(r.str)
    max_messages, max_bytes, pct, delay = r.u64(), r.u64(), r.u8(), r.u64()
    redrive_allow = r.opt(r.str)
    tags = r.pairs()
    dedup_window, content_dedup = (r.u64(), r.boolean()) if r.left() else (0, False)
    ordered = r.boolean() if r.left() else False
    levels, fairness = (r.u8(), r.u32()) if r.left() else (1, 0)
    retry = (r.u64(), r.u32(), r.u64(), r.u8()) if r.left() else (0, 200, 900_000, 0)
    paused = r.u8() if r.left() else 0
    history = r.u32() if r.left() else 0
    return t.QueueSettings(
        vis, maxd, ret, maxb, wait, dloe, target, max_messages, max_bytes, pct, delay,
        redrive_allow, tags, dedup_window, content_dedup, ordered, levels, fairness, *retry,
        bool(paused & 1), bool(paused & 2), history,
    )


STATS = (
    "visible", "in_flight", "delayed", "deferred", "dead_lettered", "bytes", "oldest_age_ms",
    "puts", "deliveries", "deletes", "expiries", "dead_letterings", "redriven",
    "created_at_ms", "modified_at_ms", "dedup_entries", "groups", "groups_in_flight",
    "retries",
)


def stats(r: Reader) -> Dict[str, int]:
    out = {}
    for name in STATS:
        out[name] = r.u64() if r.left() else 0
    return out


def dead_letter(r: Reader) -> t.DeadLetter:
    source, at = r.str(), r.u64()
    reason = r.u8()
    return t.DeadLetter(
        source, at, t.DEAD_LETTER_REASONS.get(reason, str(reason)), r.str(), r.str(), r.u32()
    )


_ID_SEQ = struct.Struct(">QQQ")
_U32 = struct.Struct(">I")
_TIMES_DELIVERY = struct.Struct(">QQQIB")


def message(r: Reader, f: int = t.FIELDS_ALL) -> t.Message:
    """A message laid out with the field groups of `f` (the others read
    as zero or empty). The fixed parts are read a struct at a time: this
    is the client's hottest loop."""
    buf, at = r.buf, r.at
    try:
        if f & t.FIELDS_ID:
            hi, lo, seq = _ID_SEQ.unpack_from(buf, at)
            id_, at = (hi << 64) | lo, at + 24
        else:
            id_ = seq = 0
        (n,) = _U32.unpack_from(buf, at)
        at += 4
        payload = buf[at : at + n]
        if len(payload) != n:
            raise ProtocolError("an answer ended before its fields did")
        at += n
        attributes: Dict[str, str] = {}
        channel = group = None
        priority = 1
        if f & t.FIELDS_ATTRIBUTES:
            r.at = at
            if buf[at] or buf[at + 1]:
                attributes = r.pairs()
            else:
                r.at += 2
            tag = r.u8()
            if tag:
                if tag & ~0x07:
                    raise ProtocolError(f"a message's channel tag of {tag}")
                if tag & 0x01:
                    channel = r.str()
                if tag & 0x02:
                    group = r.str()
                if tag & 0x04:
                    priority = r.u8()
            at = r.at
        inserted = expires = visible = count = 0
        state = ""
        if f & t.FIELDS_TIMES:
            inserted, expires, visible = _ID_SEQ.unpack_from(buf, at)
            at += 24
        if f & t.FIELDS_DELIVERY:
            count, st = _U32.unpack_from(buf, at)[0], buf[at + 4]
            state = t.STATES.get(st, str(st))
            at += 5
        flag = buf[at]
        at += 1
        receipt = None
        if flag == 1:
            receipt = buf[at : at + 32]
            if len(receipt) != 32:
                raise ProtocolError("an answer ended before its fields did")
            at += 32
        elif flag != 0:
            raise ProtocolError(f"an option flag of {flag}")
    except (struct.error, IndexError):
        raise ProtocolError("an answer ended before its fields did") from None
    r.at = at
    dead = r.opt(lambda: dead_letter(r)) if f & t.FIELDS_DELIVERY else None
    attempts = r.list(lambda: attempt(r)) if f & t.FIELDS_ATTEMPTS else []
    return t.Message(
        id_, seq, payload, attributes, channel, group, priority, inserted, expires, visible,
        count, state, receipt, dead, attempts,
    )


def attempt(r: Reader) -> t.Attempt:
    at, delivery, end = r.u64(), r.u32(), r.u8()
    return t.Attempt(at, delivery, t.ATTEMPT_ENDS.get(end, str(end)), r.str(), r.str())


def messages(r: Reader, flags: int) -> List[t.Message]:
    f = t.FIELDS_ALL
    if flags & FLAG_FIELDS:
        f = r.u8()
    out = r.list(lambda: message(r, f))
    r.end()
    return out


def move(r: Reader) -> t.Move:
    number, dlq, to = r.u64(), r.boolean(), r.opt(r.str)
    rate, started, moved, to_move = r.u32(), r.u64(), r.u64(), r.u64()
    max_messages = r.opt(r.u64)
    status = r.u8()
    failure = r.opt(r.str)
    f = move_filter(r)
    return t.Move(
        number, dlq, to, rate, started, moved, to_move, max_messages,
        t.MOVE_STATUS.get(status, str(status)), failure, None if f.empty() else f,
    )


def move_filter(r: Reader) -> t.MoveFilter:
    attributes = r.pairs()
    reason, text = r.opt(r.str), r.opt(r.str)
    return t.MoveFilter(attributes, reason, text, r.opt(r.u64), r.opt(r.u64))


def put_filter(w: Writer, f: t.MoveFilter) -> Writer:
    w.pairs(f.attributes).opt(f.reason, w.str).opt(f.text, w.str)
    return w.opt(f.since_ms, w.u64).opt(f.until_ms, w.u64)


def entries(r: Reader, get: Callable[[], Any]) -> List[Any]:
    """A batch's entries: each a value or its `FilaError`."""
    out: List[Any] = []
    for _ in range(r.u16()):
        if r.u8() == 0:
            out.append(get())
        else:
            out.append(server_error(*r.error()))
    r.end()
    return out


def cluster_status(r: Reader) -> t.ClusterStatus:
    def member() -> t.Member:
        return t.Member(r.u64(), r.str(), r.str(), r.boolean(), r.opt(r.u64))

    def replica() -> t.Replica:
        return t.Replica(r.u64(), r.boolean(), r.opt(r.u64))

    def partition() -> t.Partition:
        return t.Partition(
            r.u32(), r.opt(r.u64), r.u64(), r.opt(r.u64), r.opt(r.u64), r.opt(r.u64),
            r.list(replica),
        )

    s = t.ClusterStatus(
        r.u64(), r.opt(r.u64), r.u64(), r.opt(r.u64), r.opt(r.u64), r.opt(r.u64),
        r.list(member), r.list(partition),
    )
    r.end()
    return s


# ---- the operations -----------------------------------------------------


def hello(name: str, newest: int) -> Call:
    def parse(r: Reader, flags: int) -> Tuple[str, int, int]:
        v = (r.str(), r.u8(), r.u32())
        r.end()
        return v

    return Call(HELLO, Writer().str(name).u8(newest).done(), parse)


def auth(token: str) -> Call:
    return Call(AUTH, Writer().str(token).done(), _empty)


def server_stats() -> Call:
    def parse(r: Reader, flags: int) -> Dict[str, int]:
        out = {}
        for _ in range(r.u16()):
            k = r.str()
            out[k] = r.u64()
        r.end()
        return out

    return Call(SERVER_STATS, b"", parse)


def reload() -> Call:
    return Call(RELOAD, b"", _ended(lambda r: t.Reload(r.u64(), r.u32(), r.boolean())))


def get_cluster_status() -> Call:
    return Call(CLUSTER_STATUS, b"", lambda r, f: cluster_status(r))


def change_cluster(kind: int, write: Callable[[Writer], Any]) -> Call:
    w = Writer().u8(kind)
    write(w)
    return Call(CHANGE_CLUSTER, w.done(), _empty)


def create_queue(name: str, s: Dict[str, Any]) -> Call:
    w = Writer().str(name)
    patch(w, s)
    return Call(CREATE_QUEUE, w.done(), _ended(lambda r: r.boolean()), name)


def get_queue(name: str) -> Call:
    return Call(GET_QUEUE, Writer().str(name).done(), _ended(settings), name)


def update_queue(name: str, s: Dict[str, Any]) -> Call:
    w = Writer().str(name)
    patch(w, s)
    return Call(UPDATE_QUEUE, w.done(), _ended(settings), name)


def list_queues(prefix: str, after: str, limit: int) -> Call:
    if not 0 <= limit <= 1000:
        raise ValueError(f"limit {limit}: 1 to 1000")

    def parse(r: Reader, flags: int) -> Tuple[List[str], Optional[str]]:
        names = r.list(r.str)
        nxt = r.opt(r.str)
        r.end()
        return names, nxt

    return Call(LIST_QUEUES, Writer().str(prefix).str(after).u16(limit).done(), parse)


def delete_queue(name: str, if_exists: bool) -> Call:
    return Call(DELETE_QUEUE, Writer().str(name).boolean(if_exists).done(), _empty, name)


def purge(name: str, dlq: bool) -> Call:
    return Call(PURGE, Writer().queue_ref(name, dlq).done(), _empty, name)


def pause(name: str, receive: bool, send: bool, paused: bool) -> Call:
    """A pause (`paused`) or a resume of the halves named (neither: both);
    answers what is paused now as (receive, send)."""
    if not (receive or send):
        receive = send = True
    bits = int(receive) | int(send) << 1

    def parse(r: Reader) -> Tuple[bool, bool]:
        b = r.u8()
        return bool(b & 1), bool(b & 2)

    return Call(PAUSE_QUEUE if paused else RESUME_QUEUE, Writer().str(name).u8(bits).done(),
                _ended(parse), name)


def queue_stats(name: str) -> Call:
    return Call(QUEUE_STATS, Writer().str(name).done(), _ended(stats), name)


@dataclass
class PutEntry:
    """One message of a put (what `Client.put` builds from its arguments;
    `put_entries` takes a list of these for messages that differ)."""

    payload: Union[bytes, str]
    attributes: Optional[Dict[str, str]] = None
    channel: Optional[str] = None
    delay_ms: Optional[int] = None
    at_ms: Optional[int] = None
    ttl_ms: Optional[int] = None
    dedup_id: Optional[str] = None
    group: Optional[str] = None
    priority: Optional[int] = None


def _payload(p: Any) -> bytes:
    if isinstance(p, (bytes, bytearray, memoryview)):
        return bytes(p)
    if isinstance(p, str):
        return p.encode()
    raise TypeError(f"a payload is bytes or str, not {type(p).__name__}")


def put(queue: str, es: Sequence[PutEntry]) -> Call:
    if not 1 <= len(es) <= BATCH_MAX:
        raise ValueError(f"a put of {len(es)} entries: 1 to {BATCH_MAX}")
    w = Writer().str(queue).count(len(es))
    more = False
    for e in es:
        if (
            e.attributes is None and e.channel is None and e.delay_ms is None
            and e.at_ms is None and e.ttl_ms is None and e.dedup_id is None
            and e.group is None and e.priority is None
        ):
            # A plain entry: the payload, then no attributes, no channel,
            # available now, no TTL.
            p = _payload(e.payload)
            w.parts.append(_U32.pack(len(p)))
            w.parts.append(p)
            w.parts.append(b"\x00\x00\x00\x00\x00")
            continue
        if e.delay_ms is not None and e.at_ms is not None:
            raise ValueError("a put takes delay_ms or at_ms, not both")
        w.bytes(_payload(e.payload)).pairs(e.attributes or {}).opt(e.channel, w.str)
        if e.delay_ms is not None:
            w.u8(1).u64(e.delay_ms)
        elif e.at_ms is not None:
            w.u8(2).u64(e.at_ms)
        else:
            w.u8(0)
        w.opt(e.ttl_ms, w.u64)
        more = more or e.dedup_id is not None or e.group is not None or e.priority is not None
    if more:
        w.count(len(es))
        for e in es:
            flags = (1 if e.dedup_id is not None else 0) | (2 if e.group is not None else 0)
            flags |= 4 if e.priority is not None else 0
            w.u8(flags)
            if e.dedup_id is not None:
                w.str(e.dedup_id)
            if e.group is not None:
                w.str(e.group)
            if e.priority is not None:
                w.u8(e.priority)

    def parse(r: Reader, flags: int) -> List[Any]:
        def one() -> t.PutResult:
            try:
                hi, lo, seq = _ID_SEQ.unpack_from(r.buf, r.at)
            except struct.error:
                raise ProtocolError("an answer ended before its fields did") from None
            r.at += 24
            return t.PutResult((hi << 64) | lo, seq)

        return entries(r, one)

    return Call(PUT, w.done(), parse, queue)


def cancel(queue: str, seq: int) -> Call:
    return Call(CANCEL, Writer().str(queue).u64(seq).done(), _empty, queue)


def receive(
    queue: str, max_messages: int, wait_ms: Optional[int], visibility_ms: Optional[int],
    channel: Optional[str], dlq: bool, fields: Optional[int],
) -> Call:
    if not 1 <= max_messages <= BATCH_MAX:
        raise ValueError(f"max {max_messages}: a receive takes 1 to {BATCH_MAX} messages")
    w = Writer().queue_ref(queue, dlq).u8(max_messages)
    w.opt(visibility_ms, w.u64).opt(wait_ms, w.u64).opt(channel, w.str)
    if fields is not None and fields != t.FIELDS_ALL:
        if fields & ~t.FIELDS_ALL:
            raise ValueError(f"fields {fields:#x}: a mask of FIELDS_ID, FIELDS_ATTRIBUTES, FIELDS_TIMES, FIELDS_DELIVERY")
        w.u8(fields)
    # Without a wait the queue's default (at most 30 s) applies.
    return Call(RECEIVE, w.done(), messages, queue, wait_ms if wait_ms is not None else 30_000)


def update_visibility(queue: str, dlq: bool, items: Sequence[Tuple[bytes, int]]) -> Call:
    w = Writer().queue_ref(queue, dlq).count(len(items))
    for receipt, ms in items:
        w.receipt(receipt).u64(ms)

    def parse(r: Reader, flags: int) -> List[Any]:
        return entries(r, r.u64)

    return Call(UPDATE_VISIBILITY, w.done(), parse, queue)


def delete(queue: str, dlq: bool, receipts: Sequence[bytes]) -> Call:
    w = Writer().queue_ref(queue, dlq).count(len(receipts))
    for rc in receipts:
        w.receipt(rc)

    def parse(r: Reader, flags: int) -> List[Any]:
        return entries(r, lambda: None)

    return Call(DELETE, w.done(), parse, queue)


def release(queue: str, dlq: bool, receipts: Sequence[bytes], reason: str = "", description: str = "") -> Call:
    w = Writer().queue_ref(queue, dlq).count(len(receipts))
    for rc in receipts:
        w.receipt(rc)
    if reason or description:
        w.str(reason).str(description)

    def parse(r: Reader, flags: int) -> List[Any]:
        return entries(r, r.u64)

    return Call(RELEASE, w.done(), parse, queue)


def defer(queue: str, receipt: bytes) -> Call:
    return Call(DEFER, Writer().str(queue).receipt(receipt).done(), _empty, queue)


def receive_deferred(queue: str, seqs: Sequence[int], visibility_ms: Optional[int]) -> Call:
    w = Writer().str(queue).count(len(seqs))
    for s in seqs:
        w.u64(s)
    w.opt(visibility_ms, w.u64)

    def parse(r: Reader, flags: int) -> List[Any]:
        return entries(r, lambda: message(r))

    return Call(RECEIVE_DEFERRED, w.done(), parse, queue)


def dead_letter_receipt(queue: str, receipt: bytes, reason: str, description: str) -> Call:
    w = Writer().str(queue).receipt(receipt).str(reason).str(description)
    return Call(DEAD_LETTER, w.done(), _empty, queue)


def peek(queue: str, dlq: bool, from_seq: int, max_messages: int, attempts: bool = False) -> Call:
    if not 1 <= max_messages <= 100:
        raise ValueError(f"max {max_messages}: a peek takes 1 to 100 messages")
    w = Writer().queue_ref(queue, dlq).u64(from_seq).u8(max_messages)
    if attempts:
        w.u8(t.FIELDS_ALL | t.FIELDS_ATTEMPTS)
    return Call(PEEK, w.done(), messages, queue)


def redrive(
    queue: str, max_messages: Optional[int], rate: Optional[int], f: Optional[t.MoveFilter] = None
) -> Call:
    w = Writer().str(queue)
    w.opt(max_messages, w.u64).opt(rate, w.u32)
    if f is not None and not f.empty():
        put_filter(w, f)
    return Call(REDRIVE, w.done(), _ended(lambda r: t.Redrive(r.u64(), r.u64())), queue)


def start_move(
    queue: str,
    to: Optional[str],
    max_messages: Optional[int],
    rate: Optional[int],
    f: Optional[t.MoveFilter] = None,
) -> Call:
    w = Writer().str(queue)
    w.opt(to, w.str).opt(max_messages, w.u64).opt(rate, w.u32)
    if f is not None and not f.empty():
        put_filter(w, f)
    return Call(START_MOVE, w.done(), _ended(move), queue)


def preview_move(
    queue: str, dlq: bool, to: Optional[str], f: Optional[t.MoveFilter], from_seq: int
) -> Call:
    w = Writer().str(queue).boolean(dlq).boolean(not dlq and to is None).u64(from_seq)
    put_filter(w, f or t.MoveFilter())

    def parse(r: Reader, flags: int) -> t.MovePreview:
        matched, nxt = r.u64(), r.opt(r.u64)
        ms = r.list(lambda: message(r, t.FIELDS_ALL | t.FIELDS_ATTEMPTS))
        r.end()
        return t.MovePreview(matched, nxt, ms)

    return Call(PREVIEW_MOVE, w.done(), parse, queue)


def list_moves(queue: str) -> Call:
    return Call(LIST_MOVES, Writer().str(queue).done(), _ended(lambda r: r.list(lambda: move(r))), queue)


def cancel_move(queue: str, number: int) -> Call:
    return Call(CANCEL_MOVE, Writer().str(queue).u64(number).done(), _ended(move), queue)


def delete_seq(queue: str, dlq: bool, seq: int) -> Call:
    return Call(DELETE_SEQ, Writer().queue_ref(queue, dlq).u64(seq).done(), _empty, queue)


def dead_letter_seq(queue: str, seq: int, reason: str, description: str) -> Call:
    w = Writer().str(queue).u64(seq).str(reason).str(description)
    return Call(DEAD_LETTER_SEQ, w.done(), _empty, queue)


def channels(queue: str, after: str, limit: int) -> Call:
    def parse(r: Reader, flags: int) -> Tuple[List[t.Channel], Optional[str]]:
        chans = r.list(lambda: t.Channel(r.opt(r.str), r.u64(), r.u64()))
        nxt = r.opt(r.str)
        r.end()
        return chans, nxt

    return Call(CHANNELS, Writer().str(queue).str(after).u16(limit).done(), parse, queue)


def chunks(items: Sequence[Any], n: int = BATCH_MAX) -> Iterable[Sequence[Any]]:
    for i in range(0, len(items), n):
        yield items[i : i + n]


def checked(results: List[Any], check: bool) -> List[Any]:
    """`results` as they are, or (`check`) the first failure raised: a
    lone entry's own error, a `BatchError` for a batch of several."""
    if check:
        for i, r in enumerate(results):
            if isinstance(r, FilaError):
                if len(results) == 1:
                    raise r
                raise BatchError(results, i, r)
    return results
