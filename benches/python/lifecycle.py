"""The lifecycle through a Python client, for docs/benchmarks.md (issue
40): producers put batches of 20 messages of 100 B, consumers receive 20
at a time and acknowledge them, until every message is consumed. fila's
Python client against redis-py on Redis Streams (XADD pipelined /
XREADGROUP COUNT 20 / XACK), the same shape on both: each producer and
each consumer has one call in flight at a time.

  python lifecycle.py --system fila|redis --mode async|threads --addr HOST:PORT
                      [--messages N] [--producers 4] [--consumers 4] [--server-pid PID]

Prints one JSON line: messages/s, the client process's CPU per message
(every thread), and the server's when --server-pid is given."""

import argparse
import asyncio
import json
import os
import threading
import time
import uuid

BATCH = 20
PAYLOAD = b"x" * 100
GROUP = "g"


def server_cpu(pid):
    if not pid:
        return 0.0
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Count:
    def __init__(self, total):
        self.total, self.done, self.end = total, 0, None
        self.lock = threading.Lock()

    def add(self, n):
        with self.lock:
            self.done += n
            if self.done >= self.total and self.end is None:
                self.end = time.perf_counter()
            return self.done >= self.total


# ---- fila ------------------------------------------------------------------

async def fila_async(a):
    import fila

    q = "py-" + uuid.uuid4().hex[:8]
    c = fila.AsyncClient(a.addr)
    await c.create_queue(q)
    count = Count(a.messages)
    per = a.messages // BATCH // a.producers
    batch = [PAYLOAD] * BATCH

    async def produce():
        for _ in range(per):
            await c.put(q, batch)

    async def consume():
        while count.done < count.total:
            ms = await c.receive(q, max=BATCH, wait_ms=200)
            if ms:
                await c.delete(q, [m.receipt for m in ms])
                if count.add(len(ms)):
                    return

    start = time.perf_counter()
    consumers = [asyncio.ensure_future(consume()) for _ in range(a.consumers)]
    await asyncio.gather(*(produce() for _ in range(a.producers)))
    await asyncio.wait(consumers)
    await c.delete_queue(q)
    await c.close()
    return start, count


def fila_threads(a):
    import fila

    q = "py-" + uuid.uuid4().hex[:8]
    c = fila.Client(a.addr)
    c.create_queue(q)
    count = Count(a.messages)
    per = a.messages // BATCH // a.producers
    batch = [PAYLOAD] * BATCH

    def produce():
        for _ in range(per):
            c.put(q, batch)

    def consume():
        while count.done < count.total:
            ms = c.receive(q, max=BATCH, wait_ms=200)
            if ms:
                c.delete(q, [m.receipt for m in ms])
                if count.add(len(ms)):
                    return

    start = time.perf_counter()
    ts = [threading.Thread(target=produce) for _ in range(a.producers)]
    ts += [threading.Thread(target=consume) for _ in range(a.consumers)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    c.delete_queue(q)
    c.close()
    return start, count


# ---- redis -----------------------------------------------------------------

async def redis_async(a):
    import redis.asyncio as aredis

    host, port = a.addr.split(":")
    r = aredis.Redis(host=host, port=int(port), max_connections=a.producers + a.consumers + 2)
    stream = "py-" + uuid.uuid4().hex[:8]
    await r.xgroup_create(stream, GROUP, id="$", mkstream=True)
    count = Count(a.messages)
    per = a.messages // BATCH // a.producers

    async def produce():
        for _ in range(per):
            p = r.pipeline(transaction=False)
            for _ in range(BATCH):
                p.xadd(stream, {"d": PAYLOAD})
            await p.execute()

    async def consume(i):
        while count.done < count.total:
            got = await r.xreadgroup(GROUP, f"c{i}", {stream: ">"}, count=BATCH, block=200)
            if got:
                ids = [mid for mid, _ in got[0][1]]
                await r.xack(stream, GROUP, *ids)
                if count.add(len(ids)):
                    return

    start = time.perf_counter()
    consumers = [asyncio.ensure_future(consume(i)) for i in range(a.consumers)]
    await asyncio.gather(*(produce() for _ in range(a.producers)))
    await asyncio.wait(consumers)
    await r.delete(stream)
    await r.aclose()
    return start, count


def redis_threads(a):
    import redis

    host, port = a.addr.split(":")
    r = redis.Redis(host=host, port=int(port), max_connections=a.producers + a.consumers + 2)
    stream = "py-" + uuid.uuid4().hex[:8]
    r.xgroup_create(stream, GROUP, id="$", mkstream=True)
    count = Count(a.messages)
    per = a.messages // BATCH // a.producers

    def produce():
        for _ in range(per):
            p = r.pipeline(transaction=False)
            for _ in range(BATCH):
                p.xadd(stream, {"d": PAYLOAD})
            p.execute()

    def consume(i):
        while count.done < count.total:
            got = r.xreadgroup(GROUP, f"c{i}", {stream: ">"}, count=BATCH, block=200)
            if got:
                ids = [mid for mid, _ in got[0][1]]
                r.xack(stream, GROUP, *ids)
                if count.add(len(ids)):
                    return

    start = time.perf_counter()
    ts = [threading.Thread(target=produce) for _ in range(a.producers)]
    ts += [threading.Thread(target=consume, args=(i,)) for i in range(a.consumers)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    r.delete(stream)
    r.close()
    return start, count


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--system", choices=["fila", "redis"], required=True)
    p.add_argument("--mode", choices=["async", "threads"], required=True)
    p.add_argument("--addr", required=True)
    p.add_argument("--messages", type=int, default=200_000)
    p.add_argument("--producers", type=int, default=4)
    p.add_argument("--consumers", type=int, default=4)
    p.add_argument("--server-pid", type=int, default=0)
    a = p.parse_args()
    a.messages -= a.messages % (BATCH * a.producers)
    run = {("fila", "async"): fila_async, ("fila", "threads"): fila_threads,
           ("redis", "async"): redis_async, ("redis", "threads"): redis_threads}[(a.system, a.mode)]
    cpu0, srv0 = time.process_time(), server_cpu(a.server_pid)
    if a.mode == "async":
        start, count = asyncio.run(run(a))
    else:
        start, count = run(a)
    cpu1, srv1 = time.process_time(), server_cpu(a.server_pid)
    secs = count.end - start
    print(json.dumps({
        "system": a.system, "mode": a.mode, "messages": count.done,
        "messages_per_s": round(count.done / secs),
        "client_cpu_us_per_message": round((cpu1 - cpu0) / count.done * 1e6, 2),
        "server_cpu_us_per_message": round((srv1 - srv0) / count.done * 1e6, 2) if a.server_pid else None,
    }))


if __name__ == "__main__":
    main()
