#!/usr/bin/env python3
"""What a write and its fdatasync cost in a file prepared three ways
(docs/benchmarks.md, "A segment's preparation and fdatasync"): appended
to (the file grows), preallocated with fallocate(KEEP_SIZE) as fila-wal
makes its segments today, and written with zeros beforehand (and synced),
so that a write changes neither the file's size nor its extents.

  python3 scripts/fdatasync-cost.py [DIR] [ROUNDS]"""

import ctypes
import ctypes.util
import os
import sys
import time

libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
FALLOC_FL_KEEP_SIZE = 1
WRITES = 2000


def cost(path, prepare, record):
    fd = os.open(path, os.O_CREAT | os.O_RDWR | os.O_TRUNC, 0o600)
    try:
        prepare(fd, WRITES * len(record))
        os.fsync(fd)
        start = time.perf_counter()
        for i in range(WRITES):
            os.pwrite(fd, record, i * len(record))
            os.fdatasync(fd)
        return (time.perf_counter() - start) / WRITES * 1e6
    finally:
        os.close(fd)
        os.unlink(path)


def appended(fd, size):
    pass


def keep_size(fd, size):
    if libc.fallocate(fd, FALLOC_FL_KEEP_SIZE, ctypes.c_long(0), ctypes.c_long(size)) != 0:
        raise OSError(ctypes.get_errno(), "fallocate")


def zeroed(fd, size):
    os.pwrite(fd, bytes(size), 0)


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else "."
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    for record in (4096, 512):
        for r in range(rounds):
            row = [f"{name} {cost(os.path.join(d, 'fdatasync-cost.tmp'), prep, b'x' * record):.0f}"
                   for name, prep in (("appended", appended), ("fallocate-keep-size", keep_size), ("zeroed", zeroed))]
            print(f"{record} B writes, round {r + 1}: " + ", ".join(row) + " µs per write + fdatasync")


if __name__ == "__main__":
    main()
