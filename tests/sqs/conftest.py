"""Fixtures of the SQS suite: a real fila-server started per test module,
boto3 clients pointed at it, and the fila CLI for the binary protocol.

The binaries come from FILA_BIN_DIR (scripts/sqs-tests.sh builds them into
target/debug). Every server is stopped (SIGTERM, then SIGKILL) when its
fixture ends.

The suite is differential: with `SQS_BACKEND=moto` the same tests run
against moto's server (the reference implementation of the SQS API for
tests, `moto[server]` from PyPI), started in this process on a loopback
port. Tests of what only fila has (the binary protocol and its CLI,
restarts, tokens, TLS, clusters, message move tasks, which moto does not
implement) are marked `fila_only` and skipped there. Where fila and moto
answer differently, the assertion branches on `MOTO` and names the AWS
documentation that decides which is right."""

import os
import sys
import tempfile
import time
import uuid

import boto3
import botocore.config
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from fila_server import BIN_DIR, ROOT, FilaServer, LocalServer  # noqa: E402,F401  (tests/fila_server.py)


BACKEND = os.environ.get("SQS_BACKEND", "fila")
assert BACKEND in ("fila", "moto"), f"SQS_BACKEND={BACKEND}: fila or moto"
MOTO = BACKEND == "moto"
# The account the queues' URLs and ARNs name: fila's own, and moto's set to
# the same (before moto is imported).
ACCOUNT = "000000000000"
os.environ.setdefault("MOTO_ACCOUNT_ID", ACCOUNT)

# Modules whose every test needs fila itself.
FILA_ONLY_MODULES = {
    "test_auth", "test_cluster", "test_cluster_faults", "test_interop", "test_moves",
    "test_partitions", "test_readme", "test_tls",
}


def aws_decides(doc):
    """Guards an assertion on which fila and moto answer differently: it
    runs against fila only; `doc` names the AWS documentation that decides
    for fila's answer (where it does not decide, `doc` says so and why the
    assertion stands)."""
    assert doc
    return not MOTO


def fila_differs(doc):
    """Guards an assertion of a difference from AWS that fila keeps and
    docs/sqs.md lists: it runs against fila only; `doc` names the AWS
    documentation that says otherwise."""
    assert doc
    return not MOTO


def pytest_configure(config):
    config.addinivalue_line("markers", "fila_only: needs fila itself (skipped against moto)")


def pytest_collection_modifyitems(config, items):
    if not MOTO:
        return
    skip = pytest.mark.skip(reason="fila only: not part of the SQS API moto implements")
    for item in items:
        if item.module.__name__ in FILA_ONLY_MODULES or item.get_closest_marker("fila_only"):
            item.add_marker(skip)


class MotoServer:
    """moto's SQS server on a loopback port, in this process."""

    def __init__(self):
        from moto.server import ThreadedMotoServer  # noqa: PLC0415 (only with SQS_BACKEND=moto)
        from fila_server import free_port  # noqa: PLC0415

        port = free_port()
        self.sqs_addr = f"127.0.0.1:{port}"
        self.moto = ThreadedMotoServer(ip_address="127.0.0.1", port=port)

    def start(self):
        self.moto.start()
        return self

    def stop(self):
        self.moto.stop()

    @property
    def endpoint(self):
        return "http://" + self.sqs_addr

    def client(self, key="any", secret="any", **config):
        return Server.client(self, key, secret, **config)


class Server(LocalServer):
    """One fila-server process with the SQS API on ephemeral loopback ports."""

    sqs = True

    @property
    def sqs_addr(self):
        return self.listening.get("sqs")

    @property
    def endpoint(self):
        return "http://" + self.sqs_addr

    def client(self, key="any", secret="any", **config):
        return boto3.client(
            "sqs",
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id=key,
            aws_secret_access_key=secret,
            config=botocore.config.Config(
                retries={"max_attempts": 1, "mode": "standard"},
                read_timeout=40,
                **config,
            ),
        )

    def fila(self, *args, token=None, check=True):
        """Runs the fila CLI against the binary protocol; answers the
        finished process."""
        return self.run_fila(args, token=token, check=check)


@pytest.fixture(scope="module")
def server():
    if MOTO:
        s = MotoServer().start()
        try:
            yield s
        finally:
            s.stop()
        return
    with tempfile.TemporaryDirectory() as d:
        s = Server(d).start()
        try:
            yield s
        finally:
            s.stop()


@pytest.fixture
def sqs(server):
    return server.client()


@pytest.fixture
def queue(sqs):
    """A fresh queue's URL."""
    name = "q-" + uuid.uuid4().hex[:12]
    return sqs.create_queue(QueueName=name)["QueueUrl"]


def until(check, secs=10.0, step=0.05):
    """Polls `check` until it answers something true or `secs` pass."""
    deadline = time.monotonic() + secs
    while True:
        v = check()
        if v or time.monotonic() >= deadline:
            return v
        time.sleep(step)
