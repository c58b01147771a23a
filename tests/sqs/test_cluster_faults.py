"""Issue 37: the SQS API on a cluster where SDKs meet its faults. Three
fila-server processes on loopback, one partition of three replicas:

- a create right after the nodes start waits for the partitions (or
  answers a retriable 503), never a 400 that SDKs do not retry;
- a call forwarded to a leader that stopped answering (SIGSTOP) goes to
  the new leader once one is elected, within 2.5 s, and is done;
- a `not_leader` answer given to an SQS client (no quorum) is a 503 that
  names no binary-protocol address."""

import os
import signal
import time

import boto3
import botocore.config
import pytest
from botocore.exceptions import ClientError

from fila_server import ClusterNode, running_cluster


class Node(ClusterNode):
    def client(self, attempts=1):
        return boto3.client(
            "sqs",
            endpoint_url="http://" + self.listening["sqs"],
            region_name="us-east-1",
            aws_access_key_id="any",
            aws_secret_access_key="any",
            config=botocore.config.Config(
                retries={"max_attempts": attempts, "mode": "standard"},
                read_timeout=40,
            ),
        )

    def signal(self, sig):
        os.kill(self.proc.pid, sig)


LISTENERS = 'sqs_listen = "127.0.0.1:0"\nmetrics_listen = "off"\nconsole_listen = "off"\nazure_listen = "off"'


@pytest.fixture(scope="module")
def nodes():
    with running_cluster(Node, LISTENERS) as started:
        yield started


def leader_of(nodes, within=30, but=None):
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        for i, n in nodes.items():
            if i == but:
                continue
            leader = n.leader()
            if leader is not None and leader != but:
                return leader
        time.sleep(0.05)
    raise AssertionError("no leader")


def test_a_create_right_after_start_is_never_a_400(nodes):
    # The fixture has just started the nodes: no retries, so an error
    # would show.
    url = nodes[1].client().create_queue(QueueName="first")["QueueUrl"]
    assert url.endswith("/first")


def test_a_forward_to_a_paused_leader_goes_to_the_next_one(nodes):
    leader = leader_of(nodes)
    follower = next(i for i in nodes if i != leader)
    c = nodes[follower].client()
    url = c.create_queue(QueueName="paused")["QueueUrl"]
    c.send_message(QueueUrl=url, MessageBody="before")
    nodes[leader].signal(signal.SIGSTOP)
    try:
        started = time.monotonic()
        sent = c.send_message(QueueUrl=url, MessageBody="during")
        took = time.monotonic() - started
        assert took <= 2.5, f"answered after {took:.2f} s"
        assert leader_of(nodes, but=leader) != leader
    finally:
        nodes[leader].signal(signal.SIGCONT)
    got = {}
    deadline = time.monotonic() + 20
    while len(got) < 2 and time.monotonic() < deadline:
        for m in c.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1).get("Messages", []):
            got[m["Body"]] = m["MessageId"]
            c.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    assert got.get("during") == sent["MessageId"]
    assert "before" in got


def test_no_quorum_answers_503_naming_no_binary_address(nodes):
    leader_of(nodes)
    c = nodes[1].client()
    url = c.create_queue(QueueName="quorum")["QueueUrl"]
    others = [i for i in nodes if i != 1]
    for i in others:
        nodes[i].signal(signal.SIGSTOP)
    try:
        with pytest.raises(ClientError) as e:
            c.send_message(QueueUrl=url, MessageBody="alone")
    finally:
        for i in others:
            nodes[i].signal(signal.SIGCONT)
    err = e.value.response
    assert err["ResponseMetadata"]["HTTPStatusCode"] == 503, err
    message = err["Error"]["Message"]
    for n in nodes.values():
        assert n.listening["listen"] not in message, message
        port = n.listening["listen"].rsplit(":", 1)[1]
        assert port not in message, message
    # The nodes back, the same call goes through.
    leader_of(nodes)
    assert nodes[1].client(attempts=8).send_message(QueueUrl=url, MessageBody="back")["MessageId"]
