"""Fixtures of the SQS suite: a real fila-server started per test module,
boto3 clients pointed at it, and the fila CLI for the binary protocol.

The binaries come from FILA_BIN_DIR (scripts/sqs-tests.sh builds them into
target/debug). Every server is stopped (SIGTERM, then SIGKILL) when its
fixture ends."""

import os
import sys
import tempfile
import time
import uuid

import boto3
import botocore.config
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from fila_server import BIN_DIR, ROOT, FilaServer  # noqa: E402,F401  (tests/fila_server.py)


class Server(FilaServer):
    """One fila-server process with the SQS API on ephemeral loopback ports."""

    def __init__(self, data_dir, extra=(), config=None):
        super().__init__()
        self.data_dir = data_dir
        self.extra = list(extra)
        self.config = config

    def args(self):
        args = [
            "--listen", "127.0.0.1:0",
            "--sqs-listen", "127.0.0.1:0",
            "--metrics-listen", "off",
            "--console-listen", "off",
            "--data-dir", self.data_dir,
            "--shards", "2",
            "--event-loops", "2",
        ]
        if self.config:
            args += ["--config", self.config]
        return args + self.extra

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
