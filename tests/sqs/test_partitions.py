"""The SQS API on a cluster of three partitions (docs/cluster.md): three
fila-server processes, each partition led by another node once the map is
made. boto3 pointed at one node creates a queue in each partition, lists
them all, and sends, receives and deletes on each — every call the node
does not lead forwarded to that queue's partition leader."""

import time

from test_cluster import Node, receive_all

from fila_server import running_cluster


def partition_leaders(node, within=30):
    """Each partition's leader, once each has one and they differ."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        status = node.status()
        leaders = [p.get("leader") for p in status.get("partitions", [])] if status else []
        if len(leaders) == 3 and None not in leaders and len(set(leaders)) == 3:
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
