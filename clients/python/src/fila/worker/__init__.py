"""`fila.worker`: the queue trigger. A handler runs for every message of a
queue the way the Azure Functions queue trigger runs one (docs/worker.md
has the semantics, docs/python.md this module):

    app = fila.worker.App("127.0.0.1:7700")

    @app.queue_trigger("jobs", batch_size=16, max_dequeue_count=5)
    def handle(msg: fila.Message) -> None:
        ...

    app.run()            # or: python -m fila.worker module:app

The runtime leases a batch, runs the handler for each message (an `async
def` on the event loop, a plain function on a thread of its own), renews
each lease while its handler runs (from a thread of its own, so a handler
that blocks cannot starve it), deletes the message when the handler
returns, makes it visible again after `visibility_timeout_on_failure_ms`
when it raises (when that is 0, releases it as failed: the queue's retry
policy decides when it comes back, at once without one), and
dead-letters it to `<queue>-poison` on its
`max_dequeue_count`-th failure. Two messages of one group never run at
once. SIGTERM or SIGINT stops fetching and lets running handlers finish
within `shutdown_deadline_ms`; what is left is given back."""

from __future__ import annotations

import asyncio
import base64
import binascii
import collections
import inspect
import logging
import random
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Deque, Dict, List, Optional, Set, Tuple

from ..aio import AsyncClient
from ..client import Client
from ..errors import FilaError, Forbidden, QueueExists, ReceiptStale
from ..types import Message

log = logging.getLogger("fila.worker")


def _cut(text: str, max_bytes: int) -> str:
    """`text` cut to at most `max_bytes` bytes of UTF-8, whole characters."""
    return text.encode()[:max_bytes].decode(errors="ignore")

Handler = Callable[[Message], Any]


class WorkerError(Exception):
    """The worker cannot start (a queue it cannot read or set up)."""


@dataclass
class Settings:
    """A trigger's settings (every default is the Azure trigger's)."""

    batch_size: int = 16
    new_batch_threshold: Optional[int] = None  # None: batch_size // 2
    max_dequeue_count: int = 5
    visibility_timeout_ms: int = 600_000
    visibility_timeout_on_failure_ms: int = 0
    max_polling_interval_ms: int = 60_000
    long_poll_ms: int = 2_000
    shutdown_deadline_ms: int = 30_000
    message_encoding: Optional[str] = None  # "base64": payloads decoded first

    def check(self) -> None:
        if not 1 <= self.batch_size <= 20:
            raise ValueError(f"batch_size {self.batch_size}: 1 to 20")
        if self.threshold() < 0 or self.threshold() > self.batch_size * 2:
            raise ValueError(f"new_batch_threshold {self.new_batch_threshold}: 0 to {self.batch_size * 2}")
        if self.max_dequeue_count < 1:
            raise ValueError(f"max_dequeue_count {self.max_dequeue_count}: at least 1")
        if not 1_000 <= self.visibility_timeout_ms <= 43_200_000:
            raise ValueError(f"visibility_timeout_ms {self.visibility_timeout_ms}: 1000 to 43200000")
        if not 0 <= self.visibility_timeout_on_failure_ms <= 43_200_000:
            raise ValueError("visibility_timeout_on_failure_ms: 0 to 43200000")
        if not 0 <= self.long_poll_ms <= 30_000:
            raise ValueError(f"long_poll_ms {self.long_poll_ms}: 0 to 30000")
        if self.max_polling_interval_ms < 100:
            raise ValueError("max_polling_interval_ms: at least 100")
        if self.message_encoding not in (None, "base64"):
            raise ValueError(f"message_encoding {self.message_encoding!r}: None or 'base64'")

    def threshold(self) -> int:
        if self.new_batch_threshold is None:
            return self.batch_size // 2
        return self.new_batch_threshold


@dataclass
class Stats:
    """What a worker has done so far (readable while it runs)."""

    processed: int = 0
    failed: int = 0
    poisoned: int = 0
    renewals: int = 0
    in_flight: int = 0
    released: int = 0
    poll_errors: int = 0


@dataclass
class _Trigger:
    queue: str
    handler: Handler
    settings: Settings
    poison: str = ""
    running: int = 0
    groups: Set[str] = field(default_factory=set)
    waiting: Dict[str, Deque[Message]] = field(default_factory=dict)
    tasks: Set["asyncio.Task[None]"] = field(default_factory=set)
    # The messages whose handler runs, by id.
    live: Dict[int, Message] = field(default_factory=dict)
    # Set when a handler ends (or the worker stops): the fetcher looks again.
    wake: Optional[asyncio.Event] = None


class _Leases:
    """The leases of the messages the worker holds, renewed by a thread
    of its own with a client (and connection) of its own."""

    def __init__(self, app: "App") -> None:
        self.app = app
        self.lock = threading.Lock()
        # (queue, receipt) -> (visibility ms, when renewed last)
        self.held: Dict[Tuple[str, bytes], List[float]] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="fila-worker-leases", daemon=True)

    def add(self, queue: str, receipt: bytes, visibility_ms: int) -> None:
        with self.lock:
            self.held[(queue, receipt)] = [visibility_ms, time.monotonic()]

    def remove(self, queue: str, receipt: bytes) -> None:
        with self.lock:
            self.held.pop((queue, receipt), None)

    def _due(self) -> Dict[str, List[Tuple[bytes, int]]]:
        now = time.monotonic()
        due: Dict[str, List[Tuple[bytes, int]]] = {}
        with self.lock:
            for (queue, receipt), lease in self.held.items():
                if now - lease[1] >= lease[0] / 3000.0:
                    due.setdefault(queue, []).append((receipt, int(lease[0])))
                    lease[1] = now
        return due

    def _run(self) -> None:
        client = Client(**self.app.client_args)
        try:
            while not self.stop.wait(self._tick()):
                for queue, items in self._due().items():
                    try:
                        out = client.change_visibility_batch(queue, items, check=False)
                    except FilaError as e:
                        log.warning("renewing %d leases of %s failed: %s", len(items), queue, e)
                        continue
                    for (receipt, _), r in zip(items, out):
                        if isinstance(r, FilaError):
                            log.warning("a lease of %s could not be renewed: %s", queue, r)
                            self.remove(queue, receipt)
                        else:
                            self.app.stats.renewals += 1
        finally:
            client.close()

    def _tick(self) -> float:
        with self.lock:
            shortest = min((lease[0] for lease in self.held.values()), default=3000.0)
        return max(0.05, min(1.0, shortest / 12000.0))


class App:
    """A worker: one or more queue triggers on one fila server (a
    `Client`'s arguments: `addr`, `token`, `tls`, ...)."""

    def __init__(self, addr: str = "127.0.0.1:7700", token: Optional[str] = None, tls: Any = None, **client: Any) -> None:
        self.client_args: Dict[str, Any] = dict(addr=addr, token=token, tls=tls, **client)
        self.triggers: List[_Trigger] = []
        self.stats = Stats()
        self._stop: Optional[asyncio.Event] = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._stop_asked = False

    def queue_trigger(self, queue: str, **settings: Any) -> Callable[[Handler], Handler]:
        """Registers the decorated function (sync or `async`) as the
        handler of `queue`'s messages; `settings` are `Settings`' fields."""
        s = Settings(**settings)
        s.check()

        def register(fn: Handler) -> Handler:
            self.triggers.append(_Trigger(queue, fn, s))
            return fn

        return register

    def stop(self) -> None:
        """Asks a running worker to stop (from any thread), as SIGTERM does."""
        self._stop_asked = True
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)

    def run(self) -> None:
        """Runs until SIGTERM or SIGINT (or `stop()`), then drains."""
        asyncio.run(self.run_async(signals=True))

    async def run_async(self, signals: bool = False) -> None:
        """Runs on the running event loop until `stop()` (and SIGTERM or
        SIGINT with `signals`)."""
        if not self.triggers:
            raise WorkerError("no queue trigger registered")
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        if self._stop_asked:
            self._stop.set()
        if signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._loop.add_signal_handler(sig, self._stop.set)
        for trig in self.triggers:
            trig.wake = asyncio.Event()  # made on the loop that runs it
        client = AsyncClient(**self.client_args)
        leases = _Leases(self)
        try:
            for trig in self.triggers:
                await self._prepare(client, trig)
            leases.thread.start()
            fetchers = [
                asyncio.ensure_future(self._fetch(client, leases, trig)) for trig in self.triggers
            ]
            await self._stop.wait()
            log.info("stopping: no more fetching; running handlers get until their deadline")
            # A poll in flight is answered within its long poll; what it
            # brought is given back at once.
            for trig in self.triggers:
                assert trig.wake is not None
                trig.wake.set()
            await asyncio.gather(*fetchers, return_exceptions=True)
            await self._drain(client, leases)
        finally:
            if signals:
                for sig in (signal.SIGTERM, signal.SIGINT):
                    self._loop.remove_signal_handler(sig)
            leases.stop.set()
            if leases.thread.is_alive():
                await asyncio.get_running_loop().run_in_executor(None, leases.thread.join, 10)
            await client.close()

    async def _prepare(self, client: AsyncClient, trig: _Trigger) -> None:
        """The poison queue: the queue's dead-letter target, or
        `<queue>-poison` made its target."""
        try:
            settings = await client.get_queue(trig.queue)
        except FilaError as e:
            raise WorkerError(f"queue {trig.queue}: {e}") from None
        if settings.max_deliveries and settings.max_deliveries < trig.settings.max_dequeue_count:
            log.warning(
                "queue %s dead-letters after %d deliveries, before the trigger's max_dequeue_count of %d",
                trig.queue, settings.max_deliveries, trig.settings.max_dequeue_count,
            )
        if settings.dead_letter_target is not None:
            trig.poison = settings.dead_letter_target
            return
        poison = f"{trig.queue}-poison"
        try:
            try:
                await client.create_queue(poison)
            except QueueExists:
                pass
            await client.update_queue(trig.queue, dead_letter_target=poison)
        except Forbidden as e:
            raise WorkerError(
                f"queue {trig.queue} has no dead-letter target and this token may not set one ({e}); "
                f"an operator runs once: fila queue create {poison} && "
                f"fila queue update {trig.queue} --dead-letter-target {poison}"
            ) from None
        trig.poison = poison

    async def _fetch(self, client: AsyncClient, leases: _Leases, trig: _Trigger) -> None:
        s = trig.settings
        wake, stop = trig.wake, self._stop
        assert wake is not None and stop is not None
        failures = 0
        while not stop.is_set():
            while trig.running > s.threshold() and not stop.is_set():
                wake.clear()
                await wake.wait()
            if stop.is_set():
                return
            try:
                batch = await client.receive(
                    trig.queue, max=s.batch_size, wait_ms=s.long_poll_ms,
                    visibility_ms=s.visibility_timeout_ms,
                )
            except FilaError as e:
                self.stats.poll_errors += 1
                failures += 1
                pause = _backoff(failures, s.max_polling_interval_ms)
                log.warning("polling %s failed (%s); next poll in %.2f s", trig.queue, e, pause)
                await _pause(stop, pause)
                continue
            # Short polls (long_poll_ms = 0) follow the Azure trigger's
            # sequence: an empty one backs off as a failed one does, one
            # that found messages waits 100 ms.
            failures = failures + 1 if not batch and s.long_poll_ms == 0 else 0
            for m in batch:
                if self._stop is not None and self._stop.is_set():
                    await self._release(client, trig.queue, [m])
                    continue
                assert m.receipt is not None
                running = trig.live.get(m.id)
                if running is not None and running.receipt is not None:
                    # Its lease ran out while its handler runs and it came
                    # back here: the run goes on with the newer lease.
                    leases.remove(trig.queue, running.receipt)
                    running.receipt = m.receipt
                    leases.add(trig.queue, m.receipt, s.visibility_timeout_ms)
                    continue
                leases.add(trig.queue, m.receipt, s.visibility_timeout_ms)
                trig.running += 1
                self.stats.in_flight += 1
                if m.group is not None and m.group in trig.groups:
                    trig.waiting.setdefault(m.group, collections.deque()).append(m)
                    continue
                self._start(client, leases, trig, m, wake)
            if s.long_poll_ms == 0:
                await _pause(stop, _backoff(failures, s.max_polling_interval_ms) if failures else 0.1)

    def _start(self, client: AsyncClient, leases: _Leases, trig: _Trigger, m: Message, wake: asyncio.Event) -> None:
        if m.group is not None:
            trig.groups.add(m.group)
        trig.live[m.id] = m
        task = asyncio.ensure_future(self._one(client, leases, trig, m, wake))
        trig.tasks.add(task)
        task.add_done_callback(trig.tasks.discard)

    async def _one(self, client: AsyncClient, leases: _Leases, trig: _Trigger, m: Message, wake: asyncio.Event) -> None:
        s = trig.settings
        assert m.receipt is not None
        try:
            if m.delivery_count > s.max_dequeue_count:
                await self._poison(client, trig, m, f"delivered {m.delivery_count} times, more than max_dequeue_count")
                return
            if s.message_encoding == "base64":
                try:
                    m.payload = base64.b64decode(m.payload, validate=True)
                except (binascii.Error, ValueError) as e:
                    # Trying again would not help: poisoned at once.
                    self.stats.failed += 1
                    await self._poison(client, trig, m, f"the payload is not base64: {e}")
                    return
            error = await self._handle(trig, m)
            if error is None:
                try:
                    await client.delete(trig.queue, m.receipt)
                    self.stats.processed += 1
                except ReceiptStale:
                    log.warning("message %s of %s ran after its lease ended: it comes back", m.id_hex, trig.queue)
                return
            self.stats.failed += 1
            # Given back now: should it come back here before this run has
            # ended, it is a new run, not this one's newer lease.
            if trig.live.get(m.id) is m:
                del trig.live[m.id]
            leases.remove(trig.queue, m.receipt)
            if m.delivery_count >= s.max_dequeue_count:
                await self._poison(client, trig, m, error)
            elif s.visibility_timeout_on_failure_ms:
                # The worker's own wait wins.
                await client.change_visibility(trig.queue, m.receipt, s.visibility_timeout_on_failure_ms)
            else:
                # The queue's retry policy decides (at once without one);
                # the failure is kept in the message's attempts.
                await client.release(trig.queue, m.receipt, reason="handler_failed",
                                     description=_cut(error, 4096))
        except asyncio.CancelledError:
            await self._release(client, trig.queue, [m])
            raise
        except FilaError as e:
            log.warning("message %s of %s: %s (its lease runs out and it comes back)", m.id_hex, trig.queue, e)
        finally:
            # (A new run of the same message may be live by now.)
            if trig.live.get(m.id) is m:
                del trig.live[m.id]
            leases.remove(trig.queue, m.receipt)
            trig.running -= 1
            self.stats.in_flight -= 1
            if m.group is not None:
                trig.groups.discard(m.group)
                queued = trig.waiting.get(m.group)
                if queued:
                    nxt = queued.popleft()
                    if not queued:
                        del trig.waiting[m.group]
                    if self._stop is not None and self._stop.is_set():
                        await self._release(client, trig.queue, [nxt])
                        leases.remove(trig.queue, nxt.receipt or b"")
                        trig.running -= 1
                        self.stats.in_flight -= 1
                    else:
                        self._start(client, leases, trig, nxt, wake)
            wake.set()

    async def _handle(self, trig: _Trigger, m: Message) -> Optional[str]:
        """Runs the handler; answers None, or the failure's text."""
        try:
            if inspect.iscoroutinefunction(trig.handler):
                await trig.handler(m)
            else:
                await _in_thread(trig.handler, m)
            return None
        except asyncio.CancelledError:
            raise
        except Exception as e:  # a handler's failure, whatever it is
            log.warning("handler of %s failed on %s: %r", trig.queue, m.id_hex, e)
            return f"{type(e).__name__}: {e}"

    async def _poison(self, client: AsyncClient, trig: _Trigger, m: Message, why: str) -> None:
        assert m.receipt is not None
        await client.dead_letter(trig.queue, m.receipt, "max_dequeue_count", _cut(why, 4096))
        self.stats.poisoned += 1
        log.warning("message %s of %s went to %s: %s", m.id_hex, trig.queue, trig.poison, why)

    async def _release(self, client: AsyncClient, queue: str, ms: List[Message]) -> None:
        for m in ms:
            if m.receipt is None:
                continue
            try:
                await client.change_visibility(queue, m.receipt, 0)
                self.stats.released += 1
            except FilaError as e:
                log.warning("giving back %s of %s failed: %s", m.id_hex, queue, e)

    async def _drain(self, client: AsyncClient, leases: _Leases) -> None:
        """Waits for the running handlers up to the deadline; cancels the
        rest (an async handler stops; a sync one's thread cannot be
        stopped, its message is given back all the same)."""
        waiting = [(trig, task) for trig in self.triggers for task in list(trig.tasks)]
        for trig in self.triggers:
            # Messages queued behind their group's running one: back now.
            for queued in trig.waiting.values():
                for m in queued:
                    leases.remove(trig.queue, m.receipt or b"")
                    trig.running -= 1
                    self.stats.in_flight -= 1
                await self._release(client, trig.queue, list(queued))
            trig.waiting.clear()
        if not waiting:
            return
        deadline = max(t.settings.shutdown_deadline_ms for t in self.triggers) / 1000.0
        _, late = await asyncio.wait([task for _, task in waiting], timeout=deadline)
        for task in late:
            task.cancel()
        if late:
            log.warning("%d handlers still ran at the shutdown deadline: their messages are given back", len(late))
            await asyncio.gather(*late, return_exceptions=True)


def _backoff(failures: int, most_ms: int) -> float:
    """The pause after `failures` failed (or empty short) polls in a row:
    about 200 ms doubling, at most `most_ms`, ±20 %."""
    pause = min(0.2 * 2 ** min(failures - 1, 30), most_ms / 1000.0)
    return pause * (0.8 + 0.4 * random.random())


async def _pause(stop: asyncio.Event, secs: float) -> None:
    """Waits `secs`, or less when the worker stops."""
    try:
        await asyncio.wait_for(stop.wait(), secs)
    except asyncio.TimeoutError:
        pass


async def _in_thread(fn: Handler, m: Message) -> None:
    """Runs a sync handler on a daemon thread of its own: the event loop
    goes on, and a stop past the deadline need not wait for it."""
    loop = asyncio.get_running_loop()
    done: "asyncio.Future[None]" = loop.create_future()

    def settle(error: Optional[BaseException]) -> None:
        if done.done():
            return
        if error is None:
            done.set_result(None)
        else:
            done.set_exception(error)

    def body() -> None:
        try:
            fn(m)
        except BaseException as e:  # handed to the awaiting task
            loop.call_soon_threadsafe(settle, e)
        else:
            loop.call_soon_threadsafe(settle, None)

    threading.Thread(target=body, name="fila-handler", daemon=True).start()
    await done


__all__ = ["App", "Settings", "Stats", "WorkerError"]
