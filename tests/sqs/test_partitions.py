"""The SQS API on a cluster of three partitions (docs/cluster.md): three
fila-server processes, each partition led by another node once the map is
made. boto3 pointed at one node creates a queue in each partition, lists
them all, and sends, receives and deletes on each — every call the node
does not lead forwarded to that queue's partition leader. Then four nodes,
four partitions of three replicas: boto3 pointed at a node that holds no
replica of one of them serves that partition's queue too (the node learns
its leader from one of its replicas). And the CLI: `fila cluster add`
of a fourth node that the map gives no replica (every partition has its
three) returns once it caught up in the metadata group, and `fila
cluster move` then gives it a node's replicas."""

import tempfile
import time

from test_cluster import Node, receive_all

from fila_server import ClusterNode, joiner_config, running_cluster


def partition_leaders(node, within=30, count=3):
    """Each partition's leader, once each has one and they differ."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        status = node.status()
        leaders = [p.get("leader") for p in status.get("partitions", [])] if status else []
        if len(leaders) == count and None not in leaders and len(set(leaders)) == count:
            return leaders
        time.sleep(0.1)
    raise AssertionError(f"the partitions' leaders never spread: {status}")


def test_one_node_serves_every_partition_through_its_leader():
    listeners = 'sqs_listen = "127.0.0.1:0"\nmetrics_listen = "off"\nconsole_listen = "off"\nazure_listen = "off"'
    with running_cluster(Node, listeners, partitions=3) as nodes:
        partition_leaders(nodes[1])
        sqs = nodes[1].client()
        # The first create waits for the map (an election answers 503 for
        # a moment: the SDK tries again).
        urls = [sqs.create_queue(QueueName=f"q{i}")["QueueUrl"] for i in range(3)]
        listed = sqs.list_queues().get("QueueUrls", [])
        assert sorted(listed) == sorted(urls), listed
        for url in urls:
            sent = {}
            for i in range(5):
                body = f"{url} {i}"
                sent[body] = sqs.send_message(QueueUrl=url, MessageBody=body)["MessageId"]
            got = receive_all(sqs, url, len(sent))
            assert got == sent, url
            attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])
            assert attrs["Attributes"]["ApproximateNumberOfMessages"] == "0"


def test_a_node_holding_no_replica_of_a_partition_serves_its_queues():
    listeners = 'sqs_listen = "127.0.0.1:0"\nmetrics_listen = "off"\nconsole_listen = "off"\nazure_listen = "off"'
    with running_cluster(Node, listeners, partitions=4, n=4, replicas=3) as nodes:
        # Partition p on nodes p+1, p+2, p+3 (wrapping): node 4 holds no
        # replica of partition 0, which node 1 leads.
        assert partition_leaders(nodes[4], count=4) == [1, 2, 3, 4]
        status = nodes[4].status()
        assert [r["id"] for r in status["partitions"][0]["replicas"]] == [1, 2, 3], status
        sqs = nodes[4].client()
        urls = [sqs.create_queue(QueueName=f"q{i}")["QueueUrl"] for i in range(4)]
        assert sorted(sqs.list_queues().get("QueueUrls", [])) == sorted(urls)
        for url in urls:
            sent = {}
            for i in range(3):
                body = f"{url} {i}"
                sent[body] = sqs.send_message(QueueUrl=url, MessageBody=body)["MessageId"]
            assert receive_all(sqs, url, len(sent)) == sent, url


def replica_ids(node):
    """Each partition's replicas as `node` sees them."""
    status = node.status() or {}
    return [sorted(r["id"] for r in p["replicas"]) for p in status.get("partitions", [])]


def test_the_cli_adds_a_node_holding_no_replica_and_moves_replicas_to_it():
    listeners = 'sqs_listen = "off"\nmetrics_listen = "off"\nconsole_listen = "off"\nazure_listen = "off"'
    with running_cluster(ClusterNode, listeners, partitions=2) as nodes, tempfile.TemporaryDirectory() as d:
        deadline = time.monotonic() + 30
        while replica_ids(nodes[1]) != [[1, 2, 3], [1, 2, 3]]:
            assert time.monotonic() < deadline, nodes[1].status()
            time.sleep(0.1)
        path, peer, client = joiner_config(d, listeners, 4, partitions=2)
        four = ClusterNode(path).start()
        try:
            started = time.monotonic()
            out = nodes[1].run_fila(["cluster", "add", "4", "--peer", peer, "--client", client, "--wait", "30"])
            assert "node 4 added as a learner" in out.stdout, out.stdout
            # Every partition has its three replicas: node 4 holds none,
            # and the wait was for the metadata group alone.
            assert time.monotonic() - started < 20
            assert replica_ids(nodes[1]) == [[1, 2, 3], [1, 2, 3]]
            status = nodes[1].status()
            assert 4 in [m["id"] for m in status["members"]], status
            out = nodes[1].run_fila(["cluster", "move", "3", "4", "--peer", peer, "--client", client])
            assert "moved to node 4" in out.stdout, out.stdout
            deadline = time.monotonic() + 30
            while replica_ids(four) != [[1, 2, 4], [1, 2, 4]]:
                assert time.monotonic() < deadline, four.status()
                time.sleep(0.1)
        finally:
            four.stop()
