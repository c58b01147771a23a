"""A fila-server process for the Python suites (tests/sqs, tests/console):
started with the flags given on ephemeral loopback ports, its addresses
read from its "fila-server listening" line, stopped with SIGTERM (then
SIGKILL); and the fila CLI against it. A cluster's nodes and their
configuration files too.

The binaries come from FILA_BIN_DIR (the suites' scripts build them into
target/debug)."""

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import tempfile
import threading

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN_DIR = os.environ.get("FILA_BIN_DIR", os.path.join(ROOT, "target", "debug"))
START_SECS = 30
LISTENING = re.compile(r"fila-server listening (.*)")
FIELD = re.compile(r"(\w+)=(\S+)")


class FilaServer:
    """One fila-server process; `listening` holds what its listening line
    says (listen, sqs, azure, metrics, console: an address or "off")."""

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


class LocalServer(FilaServer):
    """One fila-server on ephemeral loopback ports: the binary protocol,
    the SQS API when the class says `sqs`, the Azure Queue API when it says
    `azure`; its data directory, a configuration file and extra flags."""

    sqs = False
    azure = False

    def __init__(self, data_dir, extra=(), config=None):
        super().__init__()
        self.data_dir = data_dir
        self.extra = list(extra)
        self.config = config

    def args(self):
        args = [
            "--listen", "127.0.0.1:0",
            "--sqs-listen", "127.0.0.1:0" if self.sqs else "off",
            "--azure-listen", "127.0.0.1:0" if self.azure else "off",
            "--metrics-listen", "off",
            "--console-listen", "off",
            "--data-dir", self.data_dir,
            "--shards", "2",
            "--event-loops", "2",
        ]
        if self.config:
            args += ["--config", self.config]
        return args + self.extra


def free_port():
    """A free port on loopback (bound and let go)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ClusterNode(FilaServer):
    """A node of a cluster, started from its configuration file alone."""

    def __init__(self, config):
        super().__init__()
        self.config = config

    def args(self):
        return ["--config", self.config]

    def status(self, token=None):
        """Its cluster status (`fila --json cluster status`); None while it
        starts."""
        out = self.run_fila(["--json", "cluster", "status"], token=token, check=False)
        if out.returncode != 0:
            return None
        return json.loads(out.stdout)

    def leader(self, token=None):
        """The leader its cluster status names: of the one partition (where
        the queues are), or with several of the metadata group; None while
        it starts or knows none."""
        status = self.status(token)
        if not status:
            return None
        partitions = status.get("partitions", [])
        if len(partitions) == 1:
            return partitions[0].get("leader")
        return status.get("leader")


SECRET = "a secret the nodes of the test share"


def member(node_id, client, peer):
    """A `[[cluster.members]]` entry."""
    return f'[[cluster.members]]\nid = {node_id}\npeer = "127.0.0.1:{peer}"\nclient = "127.0.0.1:{client}"\n'


def write_node(d, node_id, ports, listeners, extra, cluster, members):
    """Writes node `node_id`'s configuration file under `d` (its client
    and peer `ports`, `listeners` and `extra` lines, the `cluster`
    section's own lines, the `members`); answers its path."""
    client, peer = ports
    path = os.path.join(d, f"node-{node_id}.toml")
    with open(path, "w") as f:
        f.write(
            f'listen = "127.0.0.1:{client}"\n{listeners}\n'
            f'shards = 1\nevent_loops = 1\ndata_dir = "{d}/node-{node_id}"\n{extra}\n'
            f'[cluster]\nnode_id = {node_id}\nlisten = "127.0.0.1:{peer}"\n{cluster}'
            f'secret = "{SECRET}"\n{members}'
        )
    return path


def cluster_configs(d, listeners, extra="", n=3, partitions=1, replicas=3):
    """Writes the configuration files of an `n`-node cluster of
    `partitions` partitions of `replicas` replicas on loopback under `d`
    (every node's `listeners` and `extra` lines, its own client and peer
    ports, the shared secret, the members); answers their paths by node
    id."""
    ports = {i: (free_port(), free_port()) for i in range(1, n + 1)}
    members = "".join(member(i, c, p) for i, (c, p) in ports.items())
    shape = f"partitions = {partitions}\nreplicas = {replicas}\n"
    return {i: write_node(d, i, p, listeners, extra, shape, members) for i, p in ports.items()}


def joiner_config(d, listeners, node_id, partitions=1, replicas=3):
    """Writes the configuration file of node `node_id`, which joins a
    cluster of `cluster_configs` (`join = true`, itself its only member);
    answers its path, its peer address and its client address."""
    client, peer = free_port(), free_port()
    shape = f"join = true\npartitions = {partitions}\nreplicas = {replicas}\n"
    path = write_node(d, node_id, (client, peer), listeners, "", shape, member(node_id, client, peer))
    return path, f"127.0.0.1:{peer}", f"127.0.0.1:{client}"


@contextlib.contextmanager
def running_cluster(node_class, listeners, extra="", partitions=1, n=3, replicas=3):
    """An `n`-node cluster of `node_class` (a ClusterNode) with
    `partitions` partitions of `replicas` replicas started in a temporary
    directory; every node is stopped at the end."""
    with tempfile.TemporaryDirectory() as d:
        started = {}
        try:
            configs = cluster_configs(d, listeners, extra, n=n, partitions=partitions, replicas=replicas)
            for i, config in configs.items():
                started[i] = node_class(config).start()
            yield started
        finally:
            for node in started.values():
                node.stop()
