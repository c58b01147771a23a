"""FIFO queues through the SQS API, as boto3 uses them: groups in order,
one in flight per group while other groups go on, deduplication ids and
content-based deduplication within five minutes, sequence numbers, the
FIFO attributes, and what a FIFO queue refuses."""

import hashlib
import uuid

import pytest
from botocore.exceptions import ClientError

from conftest import aws_decides, fila_differs


def code(e):
    return e.value.response["Error"]["Code"]


def fifo_queue(sqs, **attrs):
    name = f"f-{uuid.uuid4().hex[:12]}.fifo"
    attributes = {"FifoQueue": "true", **attrs}
    return sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]


def receive(sqs, url, n=10, wait=0):
    return sqs.receive_message(
        QueueUrl=url,
        MaxNumberOfMessages=n,
        WaitTimeSeconds=wait,
        MessageSystemAttributeNames=["All"],
    ).get("Messages", [])


def test_a_group_comes_in_order_one_in_flight_while_other_groups_go_on(sqs):
    url = fifo_queue(sqs)
    seqs = []
    for i in range(3):
        for g in ("a", "b"):
            r = sqs.send_message(
                QueueUrl=url,
                MessageBody=f"{g}{i}",
                MessageGroupId=g,
                MessageDeduplicationId=f"{g}-{i}",
            )
            seqs.append(int(r["SequenceNumber"]))
    if aws_decides("SendMessage reference, SequenceNumber: 'SequenceNumber continues to "
                   "increase for a particular MessageGroupId' (moto draws them at random)"):
        for g in (0, 1):
            assert seqs[g::2] == sorted(seqs[g::2]), "sequence numbers grow within a group"
    first = receive(sqs, url)
    if not fila_differs("the developer guide's 'FIFO queue logic': a receive returns as many "
                        "messages of one group as it can, in order (fila: one in flight per "
                        "group, docs/sqs.md)"):
        return
    assert sorted(m["Body"] for m in first) == ["a0", "b0"]
    assert receive(sqs, url) == [], "both groups have one in flight"
    a0 = next(m for m in first if m["Body"] == "a0")
    assert a0["Attributes"]["MessageGroupId"] == "a"
    assert a0["Attributes"]["MessageDeduplicationId"] == "a-0"
    assert int(a0["Attributes"]["SequenceNumber"]) == seqs[0]
    sqs.delete_message(QueueUrl=url, ReceiptHandle=a0["ReceiptHandle"])
    assert [m["Body"] for m in receive(sqs, url)] == ["a1"]
    # A released message comes back first in its group.
    b0 = next(m for m in first if m["Body"] == "b0")
    sqs.change_message_visibility(
        QueueUrl=url, ReceiptHandle=b0["ReceiptHandle"], VisibilityTimeout=0
    )
    again = receive(sqs, url)
    assert [m["Body"] for m in again] == ["b0"]
    assert again[0]["Attributes"]["ApproximateReceiveCount"] == "2"


def test_a_resend_with_the_same_deduplication_id_is_one_message(sqs):
    url = fifo_queue(sqs)
    first = sqs.send_message(
        QueueUrl=url, MessageBody="pay", MessageGroupId="o", MessageDeduplicationId="pay-1"
    )
    again = sqs.send_message(
        QueueUrl=url, MessageBody="pay (resent)", MessageGroupId="o", MessageDeduplicationId="pay-1"
    )
    if aws_decides("the developer guide's 'Exactly-once processing' says a duplicate is "
                   "accepted and not delivered, not which MessageId it is answered; fila answers "
                   "the one that will be delivered (moto a new one, never delivered)"):
        assert again["MessageId"] == first["MessageId"]
        assert again["SequenceNumber"] == first["SequenceNumber"]
    got = receive(sqs, url)
    assert [m["Body"] for m in got] == ["pay"]
    # In a batch too: the duplicate entry answers as the first did.
    r = sqs.send_message_batch(
        QueueUrl=url,
        Entries=[
            {"Id": "x", "MessageBody": "dup", "MessageGroupId": "o", "MessageDeduplicationId": "pay-1"},
            {"Id": "y", "MessageBody": "new", "MessageGroupId": "p", "MessageDeduplicationId": "new-1"},
        ],
    )
    ids = {e["Id"]: e for e in r["Successful"]}
    if aws_decides("as above: which MessageId a duplicate is answered"):
        assert ids["x"]["MessageId"] == first["MessageId"]
    assert ids["y"]["MessageId"] != first["MessageId"]


def test_content_based_deduplication_uses_the_bodys_sha256(sqs):
    url = fifo_queue(sqs, ContentBasedDeduplication="true")
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert attrs["FifoQueue"] == "true"
    assert attrs["ContentBasedDeduplication"] == "true"
    assert attrs["DeduplicationScope"] == "queue"
    assert attrs["FifoThroughputLimit"] == "perQueue"
    a = sqs.send_message(QueueUrl=url, MessageBody="same", MessageGroupId="g")
    b = sqs.send_message(
        QueueUrl=url,
        MessageBody="same",
        MessageGroupId="g",
        MessageAttributes={"k": {"DataType": "String", "StringValue": "differs"}},
    )
    if aws_decides("as for a deduplication id: which MessageId a duplicate is answered"):
        assert a["MessageId"] == b["MessageId"], "the body alone decides, as SQS"
    # ContentBasedDeduplication (CreateQueue reference): "a SHA-256 hash ...
    # using the body of the message (but not the attributes of the message)".
    got = receive(sqs, url)
    assert len(got) == 1
    want = hashlib.sha256(b"same").hexdigest()
    assert got[0]["Attributes"]["MessageDeduplicationId"] == want
    # Turned off, a send without an id is refused.
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"ContentBasedDeduplication": "false"})
    with pytest.raises(ClientError) as e:
        sqs.send_message(QueueUrl=url, MessageBody="x", MessageGroupId="g")
    assert code(e) == "InvalidParameterValue"
    assert "ContentBasedDeduplication" in e.value.response["Error"]["Message"]


def test_what_a_fifo_queue_refuses_and_a_standard_queue_refuses(sqs, queue):
    url = fifo_queue(sqs)
    if aws_decides("SendMessage reference, MessageGroupId: 'You must associate a non-empty "
                   "MessageGroupId with a message. If you don't provide a MessageGroupId, the "
                   "action fails' (moto accepts it)"):
        with pytest.raises(ClientError) as e:
            sqs.send_message(QueueUrl=url, MessageBody="x", MessageDeduplicationId="d")
        assert code(e) == "MissingParameter"
    if aws_decides("SendMessage reference, DelaySeconds: 'When you set FifoQueue, you can't "
                   "set DelaySeconds per message' (moto takes it)"):
        with pytest.raises(ClientError) as e:
            sqs.send_message(
                QueueUrl=url, MessageBody="x", MessageGroupId="g", MessageDeduplicationId="d", DelaySeconds=5
            )
        assert code(e) == "InvalidParameterValue"
    refused = [
        (lambda: sqs.send_message(QueueUrl=url, MessageBody="x", MessageGroupId="g" * 129, MessageDeduplicationId="d"),
         "InvalidParameterValue", aws_decides,
         "SendMessage reference, MessageGroupId: 'The length of MessageGroupId is 128 characters'"),
        (lambda: sqs.set_queue_attributes(QueueUrl=url, Attributes={"FifoQueue": "false"}),
         "InvalidAttributeName", aws_decides,
         "SetQueueAttributes reference: FifoQueue is not among the attributes it sets (a queue's "
         "type is chosen when it is made: CreateQueue reference, FifoQueue)"),
        (lambda: sqs.create_queue(QueueName=f"f-{uuid.uuid4().hex[:8]}.fifo",
                                  Attributes={"FifoQueue": "true", "DeduplicationScope": "messageGroup"}),
         "InvalidAttributeValue", fila_differs,
         "CreateQueue reference, DeduplicationScope: messageGroup is a valid value (high "
         "throughput FIFO); fila keeps deduplication per queue (docs/sqs.md)"),
        (lambda: sqs.send_message(QueueUrl=queue, MessageBody="x", MessageGroupId="g"),
         "InvalidParameterValue", fila_differs,
         "SendMessage reference, MessageGroupId: a standard queue takes it for fair queues; fila "
         "refuses it there (docs/sqs.md)"),
        (lambda: sqs.set_queue_attributes(QueueUrl=queue, Attributes={"DeduplicationScope": "queue"}),
         "InvalidAttributeName", aws_decides,
         "SetQueueAttributes reference: 'The following attributes apply only to FIFO queues' "
         "(DeduplicationScope among them)"),
        (lambda: sqs.set_queue_attributes(QueueUrl=queue, Attributes={"ContentBasedDeduplication": "true"}),
         "InvalidAttributeName", aws_decides,
         "SetQueueAttributes reference: 'The following attributes apply only to FIFO queues' "
         "(ContentBasedDeduplication among them)"),
    ]
    for call, error, guard, doc in refused:
        if guard(doc):
            with pytest.raises(ClientError) as e:
                call()
            assert code(e) == error, doc


@pytest.mark.fila_only
def test_a_fifo_queue_keeps_its_order_and_ids_through_a_restart(server):
    sqs = server.client()
    url = fifo_queue(sqs)
    sent = [
        sqs.send_message(
            QueueUrl=url, MessageBody=f"m{i}", MessageGroupId="g", MessageDeduplicationId=f"d{i}"
        )
        for i in range(3)
    ]
    server.restart()
    sqs = server.client()
    again = sqs.send_message(
        QueueUrl=url, MessageBody="m0 again", MessageGroupId="g", MessageDeduplicationId="d0"
    )
    assert again["SequenceNumber"] == sent[0]["SequenceNumber"], "remembered through the restart"
    bodies = []
    for _ in range(3):
        got = receive(sqs, url)
        assert len(got) == 1
        bodies.append(got[0]["Body"])
        sqs.delete_message(QueueUrl=url, ReceiptHandle=got[0]["ReceiptHandle"])
    assert bodies == ["m0", "m1", "m2"]
    assert receive(sqs, url) == []
