"""Fixtures of the SQS suite: a real fila-server started per test module,
boto3 clients pointed at it, and the fila CLI for the binary protocol.

The binaries come from FILA_BIN_DIR (scripts/sqs-tests.sh builds them into
target/debug). Every server is stopped (SIGTERM, then SIGKILL) when its
fixture ends."""

import os
import re
import signal
import subprocess
import tempfile
import threading
import time
import uuid

import boto3
import botocore.config
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN_DIR = os.environ.get("FILA_BIN_DIR", os.path.join(ROOT, "target", "debug"))
START_SECS = 30
LINE = re.compile(r"fila-server listening listen=(\S+) sqs=(\S+)")


class Server:
    """One fila-server process on ephemeral loopback ports."""

    def __init__(self, data_dir, extra=(), config=None):
        self.data_dir = data_dir
        self.extra = list(extra)
        self.config = config
        self.proc = None
        self.addr = None
        self.sqs_addr = None
        self.log = []

    def start(self):
        args = [
            os.path.join(BIN_DIR, "fila-server"),
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
        args += self.extra
        self.proc = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        found = threading.Event()

        def read():
            for line in self.proc.stdout:
                self.log.append(line)
                m = LINE.search(line)
                if m and not found.is_set():
                    self.addr, self.sqs_addr = m.group(1), m.group(2)
                    found.set()
            found.set()

        threading.Thread(target=read, daemon=True).start()
        if not found.wait(START_SECS) or self.sqs_addr is None:
            self.stop()
            raise RuntimeError("fila-server did not start:\n" + "".join(self.log[-20:]))
        return self

    @property
    def endpoint(self):
        return "http://" + self.sqs_addr

    def stop(self):
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None

    def restart(self):
        self.stop()
        return self.start()

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
        """Runs the fila CLI against the binary protocol; answers its
        standard output."""
        cmd = [os.path.join(BIN_DIR, "fila"), "--addr", self.addr]
        if token:
            cmd += ["--token", token]
        out = subprocess.run(
            cmd + list(args), capture_output=True, text=True, timeout=60
        )
        if check and out.returncode != 0:
            raise AssertionError(f"fila {args} exited {out.returncode}: {out.stderr}")
        return out


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
