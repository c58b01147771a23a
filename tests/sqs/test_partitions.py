"""The SQS API on a cluster of three partitions (docs/cluster.md): three
fila-server processes, each partition led by another node once the map is
made. boto3 pointed at one node creates a queue in each partition, lists
them all, and sends, receives and deletes on each — every call the node
does not lead forwarded to that queue's partition leader. Then four nodes,
four partitions of three replicas: boto3 pointed at a node that holds no
replica of one of them serves that partition's queue too (the node learns
its leader from one of its replicas)."""

import time

from test_cluster import Node, receive_all

from fila_server import running_cluster


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
    listeners = 'sqs_listen = "127.0.0.1:0"\nmetrics_listen = "off"\nconsole_listen = "off"'
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
    listeners = 'sqs_listen = "127.0.0.1:0"\nmetrics_listen = "off"\nconsole_listen = "off"'
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
