"""The SQS API on a cluster (docs/cluster.md): three fila-server processes
on loopback, each with its own SQS endpoint. SDKs cannot follow a
`not_leader` answer, so a follower forwards every call to the leader: boto3
pointed at followers creates, sends, receives (long polls too), changes
visibility and deletes, a receipt handle from one node works on another,
a long poll given up by its client is cancelled on the leader, and after
the leader is killed with SIGKILL every acknowledged message that
was not deleted is still there, through the nodes left. /metrics shows
the partition's queues on the leader and who leads on every node."""

import threading
import time
import urllib.request

import boto3
import botocore.config
import botocore.exceptions
import pytest

from fila_server import ClusterNode, running_cluster


class Node(ClusterNode):
    """One node of the cluster, its SQS endpoint and /metrics on."""

    def client(self):
        return boto3.client(
            "sqs",
            endpoint_url="http://" + self.listening["sqs"],
            region_name="us-east-1",
            aws_access_key_id="any",
            aws_secret_access_key="any",
            config=botocore.config.Config(
                # An election answers 503 for a moment: SDKs try again.
                retries={"max_attempts": 8, "mode": "standard"},
                read_timeout=40,
            ),
        )

    def kill(self):
        self.proc.kill()
        self.proc.wait(10)
        self.proc = None


@pytest.fixture(scope="module")
def nodes():
    listeners = 'sqs_listen = "127.0.0.1:0"\nmetrics_listen = "127.0.0.1:0"\nconsole_listen = "off"\nazure_listen = "off"'
    with running_cluster(Node, listeners) as started:
        yield started


def scrape(node):
    """The node's /metrics text."""
    with urllib.request.urlopen(f"http://{node.listening['metrics']}/metrics", timeout=10) as r:
        return r.read().decode()


def long_poll_filled(client, url, leader, send, body):
    """A 10 s long poll on `url` through `client` parks on the leader (its
    /metrics shows it), `send` then sends `body`, and the poll is answered
    with that message before its wait ends."""
    waited = {}

    def poll():
        start = time.monotonic()
        r = client.receive_message(QueueUrl=url, WaitTimeSeconds=10)
        waited["took"] = time.monotonic() - start
        waited["messages"] = r.get("Messages", [])

    t = threading.Thread(target=poll)
    t.start()
    deadline = time.monotonic() + 10
    while "fila_receives_parked 1" not in scrape(leader):
        assert time.monotonic() < deadline, "the long poll never waited on the leader"
        time.sleep(0.02)
    send()
    t.join(30)
    assert [m["Body"] for m in waited["messages"]] == [body]
    assert waited["took"] < 10


def leader_of(nodes, within=30):
    """The id of the node that leads, once one does."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        for n in nodes.values():
            if n.proc is None:
                continue
            leader = n.leader()
            if leader is not None and nodes[leader].proc is not None:
                return leader
        time.sleep(0.1)
    raise AssertionError("no leader")


def receive_all(client, url, want, within=30):
    """Receives until `want` bodies came (each deleted), or time runs out."""
    got = {}
    deadline = time.monotonic() + within
    while len(got) < want and time.monotonic() < deadline:
        r = client.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1)
        for m in r.get("Messages", []):
            got[m["Body"]] = m["MessageId"]
            client.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    return got


def test_followers_forward_every_call_and_nothing_acknowledged_is_lost(nodes):
    leader = leader_of(nodes)
    follower, other = [i for i in nodes if i != leader]
    f, g, lead = nodes[follower].client(), nodes[other].client(), nodes[leader].client()

    url = f.create_queue(QueueName="orders", Attributes={"VisibilityTimeout": "30"})["QueueUrl"]
    assert "orders" in "".join(g.list_queues().get("QueueUrls", []))
    assert f.get_queue_attributes(QueueUrl=url, AttributeNames=["VisibilityTimeout"])[
        "Attributes"
    ]["VisibilityTimeout"] == "30"

    acked = {}
    for i in range(20):
        r = f.send_message(QueueUrl=url, MessageBody=f"one-{i}")
        acked[f"one-{i}"] = r["MessageId"]
    batch = g.send_message_batch(
        QueueUrl=url,
        Entries=[{"Id": str(i), "MessageBody": f"batch-{i}"} for i in range(10)],
    )
    assert len(batch["Successful"]) == 10, batch
    for e in batch["Successful"]:
        acked[f"batch-{e['Id']}"] = e["MessageId"]

    # Received through one follower, its receipt works on the other and on
    # the leader: receipts are the partition's.
    r = f.receive_message(QueueUrl=url, MaxNumberOfMessages=3, AttributeNames=["All"])
    ms = r["Messages"]
    assert len(ms) == 3
    assert all(m["Attributes"]["ApproximateReceiveCount"] == "1" for m in ms)
    assert all(acked[m["Body"]] == m["MessageId"] for m in ms)
    g.change_message_visibility(QueueUrl=url, ReceiptHandle=ms[0]["ReceiptHandle"], VisibilityTimeout=0)
    g.delete_message(QueueUrl=url, ReceiptHandle=ms[1]["ReceiptHandle"])
    lead.delete_message(QueueUrl=url, ReceiptHandle=ms[2]["ReceiptHandle"])
    deleted = {ms[1]["Body"], ms[2]["Body"]}
    # A deleted message's receipt is refused (on a follower too).
    with pytest.raises(f.exceptions.ClientError):
        f.change_message_visibility(QueueUrl=url, ReceiptHandle=ms[1]["ReceiptHandle"], VisibilityTimeout=5)

    # A long poll on a follower is answered when a message comes through
    # another node: the follower forwards it once and the leader holds it
    # (its /metrics shows it parked there), woken by the send.
    later = f.create_queue(QueueName="orders-later")["QueueUrl"]
    assert later == url + "-later"
    long_poll_filled(
        g, later, nodes[leader], lambda: lead.send_message(QueueUrl=later, MessageBody="late"), "late"
    )

    # A long poll on the leader parks in the partition's engine, on the
    # event loop that keeps it, and a send through a follower (forwarded
    # to the leader) fills it.
    long_poll_filled(
        lead, later, nodes[leader], lambda: f.send_message(QueueUrl=later, MessageBody="later still"), "later still"
    )

    # A long poll on the leader whose client gives up first (its read
    # times out and its connection closes) is cancelled there at once, as
    # on a single node: the leader counts it parked no more, long before
    # its 20 s wait would end.
    impatient = boto3.client(
        "sqs",
        endpoint_url="http://" + nodes[leader].listening["sqs"],
        region_name="us-east-1",
        aws_access_key_id="any",
        aws_secret_access_key="any",
        config=botocore.config.Config(retries={"max_attempts": 1}, read_timeout=2),
    )
    gave_up = {}

    def poll_and_give_up():
        try:
            impatient.receive_message(QueueUrl=later, WaitTimeSeconds=20)
        except botocore.exceptions.ReadTimeoutError as e:
            gave_up["error"] = e
        impatient.close()

    t = threading.Thread(target=poll_and_give_up)
    t.start()
    deadline = time.monotonic() + 10
    while "fila_receives_parked 1" not in scrape(nodes[leader]):
        assert time.monotonic() < deadline, "the long poll never waited on the leader"
        time.sleep(0.02)
    t.join(30)
    assert "error" in gave_up, "the long poll was answered"
    deadline = time.monotonic() + 5
    while "fila_receives_parked 0" not in scrape(nodes[leader]):
        assert time.monotonic() < deadline, "the long poll given up stayed parked on the leader"
        time.sleep(0.02)

    # /metrics: the queues' series are the partition's, on its leader; every
    # node says who leads.
    lead_metrics = scrape(nodes[leader])
    assert "fila_cluster_leads 1" in lead_metrics
    assert "fila_queues 2" in lead_metrics, lead_metrics
    assert 'fila_queue_visible{queue="orders"}' in lead_metrics
    follower_metrics = scrape(nodes[follower])
    assert "fila_cluster_leads 0" in follower_metrics
    assert f'fila_cluster_leader{{group="0"}} {leader}' in follower_metrics

    # The leader dies: what was acknowledged and not deleted is all there,
    # through the nodes left, and the cluster takes more.
    nodes[leader].kill()
    survivor = nodes[follower].client()
    r = survivor.send_message(QueueUrl=url, MessageBody="after")
    acked["after"] = r["MessageId"]
    want = {b: i for b, i in acked.items() if b not in deleted}
    got = receive_all(nodes[other].client(), url, len(want))
    assert got == want
    attrs = survivor.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert attrs["ApproximateNumberOfMessages"] == "0"
