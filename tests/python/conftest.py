"""Fixtures of the Python client's suite: a real fila-server per test
module (tests/fila_server.py starts it from FILA_BIN_DIR on ephemeral
loopback ports and stops it), and the `fila` package installed from
clients/python (scripts/python-tests.sh)."""

import os
import sys
import tempfile
import time
import uuid

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from fila_server import BIN_DIR, ROOT, LocalServer  # noqa: E402,F401  (tests/fila_server.py)


# One fila-server process with the binary protocol only.
Server = LocalServer


@pytest.fixture(scope="module")
def server():
    with tempfile.TemporaryDirectory() as d:
        s = Server(d).start()
        try:
            yield s
        finally:
            s.stop()


@pytest.fixture
def client(server):
    import fila

    c = fila.Client(server.addr, request_timeout=20)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def queue(client):
    """A fresh queue's name."""
    name = "q-" + uuid.uuid4().hex[:12]
    client.create_queue(name)
    return name


def until(check, secs=10.0, step=0.02):
    """Polls `check` until it answers something true or `secs` pass."""
    deadline = time.monotonic() + secs
    while True:
        v = check()
        if v or time.monotonic() >= deadline:
            return v
        time.sleep(step)
