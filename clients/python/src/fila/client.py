"""`Client`: the blocking client. It runs an `AsyncClient` on an event
loop of its own, on one daemon thread: every method blocks its caller
until its answer, and calls from many threads are pipelined on the one
connection (docs/python.md)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Coroutine, Dict, List, Optional, Sequence, Tuple, TypeVar, Union

from . import _addr
from . import types as t
from ._ops import PutEntry, Receipt
from .aio import CLIENT_NAME, AsyncClient
from .errors import FilaError

T = TypeVar("T")


class _Waiter:
    """A blocking call's answer, handed from the loop's thread to its
    caller's: `lock` is held until `value` or `error` is set."""

    __slots__ = ("lock", "value", "error")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.lock.acquire()
        self.value: Any = None
        self.error: Optional[BaseException] = None


def _start(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any], w: _Waiter) -> None:
    """On the loop: runs `coro` as a task whose end releases `w`."""

    def done(task: "asyncio.Task[Any]") -> None:
        try:
            w.value = task.result()
        except BaseException as e:  # handed to the caller, whatever it is
            w.error = e
        w.lock.release()

    try:
        task = loop.create_task(coro)
    except BaseException as e:
        w.error = e
        w.lock.release()
        return
    task.add_done_callback(done)


class Client:
    """The blocking fila client; safe to share between threads.

    `Client(addr="127.0.0.1:7700", token=None, tls=None)`: `addr` one
    node or a cluster's nodes separated by commas (`filas://` for TLS);
    `tls` an `ssl.SSLContext`, a CA file's path or True (the system's
    CAs). Connects at the first call; `close()` (or `with`) ends it."""

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
        self._a = AsyncClient(
            addr, token, tls, server_name=server_name, connect_timeout=connect_timeout,
            request_timeout=request_timeout, follow_leader=follow_leader, name=name,
        )
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fila-client", daemon=True)
        self._thread.start()
        self._closed = False

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Runs `coro` on the client's loop; blocks until it ends. A lock
        taken here and released by the task's end is the hand-back (less
        work per call than `run_coroutine_threadsafe`'s futures)."""
        if self._closed:
            coro.close()
            raise FilaError("the client is closed")
        w = _Waiter()
        self._loop.call_soon_threadsafe(_start, self._loop, coro, w)
        w.lock.acquire()
        if w.error is not None:
            raise w.error
        return w.value  # type: ignore[no-any-return]

    @property
    def addr(self) -> str:
        """The node it talks to now."""
        return self._a.addr

    @property
    def server_version(self) -> str:
        return self._a.server_version

    def connect(self) -> "Client":
        """Connects now (else the first call does)."""
        self._run(self._a.connect())
        return self

    def close(self) -> None:
        """Closes the connections and stops the client's thread."""
        if self._closed:
            return
        self._run(self._a.close())
        self._closed = True
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        if not getattr(self, "_closed", True) and self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)

    def create_queue(self, name: str, **settings: Any) -> bool:
        """Creates a queue with the settings given (the others at their
        defaults); answers False when it existed with the same settings.
        `queue_exists` when it exists with others."""
        return self._run(self._a.create_queue(name, **settings))

    def get_queue(self, name: str) -> t.QueueSettings:
        return self._run(self._a.get_queue(name))

    def update_queue(self, name: str, **settings: Any) -> t.QueueSettings:
        """Changes the settings given; answers the settings now in force.
        `dead_letter_target=None` goes back to the built-in dead-letter
        queue; `tags` adds or changes tags, `remove_tags` removes keys."""
        return self._run(self._a.update_queue(name, **settings))

    def list_queues_page(
        self, prefix: str = "", after: str = "", limit: int = 1000
    ) -> Tuple[List[str], Optional[str]]:
        """One page of names after `after`; the second value, when not
        None, is the `after` of the next page."""
        return self._run(self._a.list_queues_page(prefix, after, limit))

    def list_queues(self, prefix: str = "") -> List[str]:
        """Every queue's name that starts with `prefix` (the token's own,
        with tokens), sorted."""
        return self._run(self._a.list_queues(prefix))

    def delete_queue(self, name: str, if_exists: bool = False) -> None:
        return self._run(self._a.delete_queue(name, if_exists))

    def purge(self, queue: str, dlq: bool = False) -> None:
        """Removes every message of the queue (of its dead-letter queue
        with `dlq`)."""
        return self._run(self._a.purge(queue, dlq))

    def pause_queue(self, queue: str, receive: bool = False, send: bool = False) -> Tuple[bool, bool]:
        """Pauses the queue's receiving, sending, or (neither named) both
        (needs manage): its receives find nothing — those that wait, wait —
        and its puts are refused `QueuePaused`, until `resume_queue`.
        Answers what is paused now, (receive, send)."""
        return self._run(self._a.pause_queue(queue, receive, send))

    def resume_queue(self, queue: str, receive: bool = False, send: bool = False) -> Tuple[bool, bool]:
        """Resumes what a pause paused (neither named: both); answers what
        is paused now, (receive, send)."""
        return self._run(self._a.resume_queue(queue, receive, send))

    def stats(self, queue: str) -> Dict[str, int]:
        """The queue's counts and counters (names as docs/protocol.md's
        `stats`)."""
        return self._run(self._a.stats(queue))

    def channels(self, queue: str) -> List[t.Channel]:
        """The default channel and every named channel with messages ready
        (needs manage)."""
        return self._run(self._a.channels(queue))

    def put(
        self, queue: str, payload: Union[bytes, str, Sequence[Union[bytes, str]]], attributes: Optional[Dict[str, str]] = None, channel: Optional[str] = None, delay_ms: Optional[int] = None, at_ms: Optional[int] = None, ttl_ms: Optional[int] = None, dedup_id: Optional[str] = None, group: Optional[str] = None, priority: Optional[int] = None, check: bool = True,
    ) -> List[Any]:
        """Puts one payload, or each of a list with the same options (any
        number: sent as requests of 20, pipelined). Answers a `PutResult`
        each, in order; an entry that failed raises `BatchError` (with
        `check=False` it is its `FilaError` in the list instead)."""
        return self._run(self._a.put(queue, payload, attributes, channel, delay_ms, at_ms, ttl_ms, dedup_id, group, priority, check))

    def put_entries(self, queue: str, entries: Sequence[PutEntry], check: bool = True) -> List[Any]:
        """Puts messages that differ in their options (`fila.PutEntry`)."""
        return self._run(self._a.put_entries(queue, entries, check))

    def cancel(self, queue: str, seq: int) -> None:
        """Cancels a scheduled (delayed) message before it is due."""
        return self._run(self._a.cancel(queue, seq))

    def receive(
        self, queue: str, max: int = 1, wait_ms: Optional[int] = None, visibility_ms: Optional[int] = None, channel: Optional[str] = None, dlq: bool = False, fields: Optional[int] = None,
    ) -> List[t.Message]:
        """Leases up to `max` (1–20) messages, waiting up to `wait_ms` for
        one (None: the queue's default wait); each is leased for
        `visibility_ms` (None: the queue's timeout). `channel`: a name or
        `prefix*`. `fields`: a mask of `fila.FIELDS_*` (the payload and
        the receipt always come)."""
        return self._run(self._a.receive(queue, max, wait_ms, visibility_ms, channel, dlq, fields))

    def delete(
        self, queue: str, receipts: Union[Receipt, Sequence[Receipt]], dlq: bool = False, check: bool = True
    ) -> List[Optional[FilaError]]:
        """Deletes leased messages by receipt (one or a list of any
        length); answers None for each deleted (see `put` for `check`)."""
        return self._run(self._a.delete(queue, receipts, dlq, check))

    def release(
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
        return self._run(self._a.release(queue, receipts, dlq, check, reason, description))

    def change_visibility(self, queue: str, receipt: Receipt, ms: int, dlq: bool = False) -> int:
        """Sets a lease to end `ms` from now (0: visible again at once);
        answers when it is visible next (ms since the epoch)."""
        return self._run(self._a.change_visibility(queue, receipt, ms, dlq))

    def change_visibility_batch(
        self, queue: str, items: Sequence[Tuple[Receipt, int]], dlq: bool = False, check: bool = True
    ) -> List[Any]:
        """`change_visibility` for many (receipt, ms) pairs."""
        return self._run(self._a.change_visibility_batch(queue, items, dlq, check))

    def defer(self, queue: str, receipt: Receipt) -> None:
        """Sets a leased message aside until `receive_deferred` asks for
        it by sequence number."""
        return self._run(self._a.defer(queue, receipt))

    def receive_deferred(
        self, queue: str, seqs: Sequence[int], visibility_ms: Optional[int] = None, check: bool = True
    ) -> List[Any]:
        """Leases deferred messages by sequence number."""
        return self._run(self._a.receive_deferred(queue, seqs, visibility_ms, check))

    def dead_letter(
        self, queue: str, receipt: Receipt, reason: Optional[str] = None, description: Optional[str] = None
    ) -> None:
        """Moves a leased message to the dead-letter queue with a reason."""
        return self._run(self._a.dead_letter(queue, receipt, reason, description))

    def peek(
        self, queue: str, from_seq: int = 0, max: int = 20, dlq: bool = False, attempts: bool = False
    ) -> List[t.Message]:
        """Reads messages in sequence order from `from_seq`, leasing
        nothing (1–100; fewer when they pass 16 MiB); with `attempts`, each
        message's failed attempts too (`Message.attempts`)."""
        return self._run(self._a.peek(queue, from_seq, max, dlq, attempts))

    def delete_seq(self, queue: str, seq: int, dlq: bool = False) -> None:
        """An operator's delete of one message in any state (manage)."""
        return self._run(self._a.delete_seq(queue, seq, dlq))

    def dead_letter_seq(
        self, queue: str, seq: int, reason: str = "", description: str = ""
    ) -> None:
        """An operator's dead-letter of one message in any state (manage)."""
        return self._run(self._a.dead_letter_seq(queue, seq, reason, description))

    def redrive(
        self,
        queue: str,
        max: Optional[int] = None,
        rate: Optional[int] = None,
        filter: Optional[t.MoveFilter] = None,
    ) -> t.Redrive:
        """Moves the dead-letter queue's messages back (`max` of them, at
        `rate` a second; with a `filter`, only those it takes: `scheduled`
        then counts every visible dead letter left, matching or not)."""
        return self._run(self._a.redrive(queue, max, rate, filter))

    def start_move(
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
        return self._run(self._a.start_move(queue, to, max, rate, filter))

    def preview_move(
        self,
        queue: str,
        dlq: bool = False,
        to: Optional[str] = None,
        filter: Optional[t.MoveFilter] = None,
        from_seq: int = 0,
    ) -> t.MovePreview:
        """What a redrive (`dlq`) or a move would take, one bounded look
        (see `AsyncClient.preview_move`). Moves nothing."""
        return self._run(self._a.preview_move(queue, dlq, to, filter, from_seq))

    def list_moves(self, queue: str) -> List[t.Move]:
        return self._run(self._a.list_moves(queue))

    def cancel_move(self, queue: str, number: int) -> t.Move:
        return self._run(self._a.cancel_move(queue, number))

    def server_stats(self) -> Dict[str, int]:
        return self._run(self._a.server_stats())

    def reload(self) -> t.Reload:
        """Makes the server read its tokens and TLS files again."""
        return self._run(self._a.reload())

    def cluster_status(self) -> t.ClusterStatus:
        return self._run(self._a.cluster_status())

    def add_learner(self, node_id: int, peer: str, client: str) -> None:
        return self._run(self._a.add_learner(node_id, peer, client))

    def promote(self, node_id: int) -> None:
        return self._run(self._a.promote(node_id))

    def remove_node(self, node_id: int) -> None:
        return self._run(self._a.remove_node(node_id))

    def transfer_leader(self, to: Optional[int] = None) -> None:
        return self._run(self._a.transfer_leader(to))

    def move_replicas(self, from_id: int, to_id: int, peer: str, client: str) -> None:
        return self._run(self._a.move_replicas(from_id, to_id, peer, client))
