"""A fila-server process for the Python suites (tests/sqs, tests/console):
started with the flags given on ephemeral loopback ports, its addresses
read from its "fila-server listening" line, stopped with SIGTERM (then
SIGKILL); and the fila CLI against it.

The binaries come from FILA_BIN_DIR (the suites' scripts build them into
target/debug)."""

import os
import re
import signal
import subprocess
import threading

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN_DIR = os.environ.get("FILA_BIN_DIR", os.path.join(ROOT, "target", "debug"))
START_SECS = 30
LISTENING = re.compile(r"fila-server listening (.*)")
FIELD = re.compile(r"(\w+)=(\S+)")


class FilaServer:
    """One fila-server process; `listening` holds what its listening line
    says (listen, sqs, metrics, console: an address or "off")."""

    def __init__(self):
        self.proc = None
        self.listening = {}
        self.log = []

    def args(self):
        """The flags it starts with."""
        raise NotImplementedError

    def start(self):
        self.listening = {}
        self.proc = subprocess.Popen(
            [os.path.join(BIN_DIR, "fila-server")] + self.args(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        found = threading.Event()

        def read():
            for line in self.proc.stdout:
                self.log.append(line)
                m = LISTENING.search(line)
                if m and not found.is_set():
                    self.listening = dict(FIELD.findall(m.group(1)))
                    found.set()
            found.set()

        threading.Thread(target=read, daemon=True).start()
        if not found.wait(START_SECS) or not self.listening:
            self.stop()
            raise RuntimeError("fila-server did not start:\n" + "".join(self.log[-20:]))
        return self

    @property
    def addr(self):
        return self.listening.get("listen")

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

    def run_fila(self, args, token=None, check=True, stdin=None):
        """Runs the fila CLI against the binary protocol; answers the
        finished process (an AssertionError when it failed and `check`)."""
        cmd = [os.path.join(BIN_DIR, "fila"), "--addr", self.addr]
        if token:
            cmd += ["--token", token]
        out = subprocess.run(
            cmd + list(args), input=stdin, capture_output=True, text=True, timeout=60
        )
        if check and out.returncode != 0:
            raise AssertionError(f"fila {args} exited {out.returncode}: {out.stderr}")
        return out
