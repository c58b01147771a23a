"""One queue, three doors: a queue made over Azure is the fila queue the
SQS API and the binary protocol reach; messages go in by one and out by
another with the same id."""

import base64
import json


def sqs(server):
    import boto3
    import botocore.config
    return boto3.client(
        "sqs", endpoint_url="http://" + server.listening["sqs"], region_name="us-east-1",
        aws_access_key_id="any", aws_secret_access_key="any",
        config=botocore.config.Config(retries={"max_attempts": 1}))


def test_a_message_put_over_sqs_comes_back_from_get_messages(server, queue):
    client = sqs(server)
    url = client.get_queue_url(QueueName=queue.queue_name)["QueueUrl"]
    sent = client.send_message(QueueUrl=url, MessageBody="from sqs")
    [m] = list(queue.receive_messages())
    assert m.content == "from sqs"
    assert m.id == sent["MessageId"]
    queue.delete_message(m)


def test_a_message_put_over_azure_comes_back_over_sqs_and_the_cli(server, queue):
    queue.send_message("from azure")
    client = sqs(server)
    url = client.get_queue_url(QueueName=queue.queue_name)["QueueUrl"]
    got = client.receive_message(QueueUrl=url, VisibilityTimeout=0)["Messages"]
    assert got[0]["Body"] == "from azure"
    # Its tags are the queue's metadata, both ways.
    client.tag_queue(QueueUrl=url, Tags={"owner": "ops"})
    assert queue.get_queue_properties().metadata == {"owner": "ops"}
    out = server.run_fila(["peek", queue.queue_name]).stdout
    assert "from azure" in out
    stats = json.loads(server.run_fila(["--json", "queue", "stats", queue.queue_name]).stdout)
    assert stats["visible"] + stats["in_flight"] == 1


def test_a_payload_that_is_not_xml_text_comes_as_base64(server, queue):
    # Put over the binary protocol: a control character XML cannot carry.
    server.run_fila(["put", queue.queue_name, "bell \u0007"])
    [m] = list(queue.receive_messages())
    assert base64.b64decode(m.content) == "bell \u0007".encode()
