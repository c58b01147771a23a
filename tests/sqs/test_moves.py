"""Message move tasks: fila's redrive made whole, through the SQS API and
the fila CLI."""

import base64
import json
import uuid

import pytest
from botocore.exceptions import ClientError

from conftest import until

ARN = "arn:aws:sqs:us-east-1:000000000000:"


def code(e):
    return e.value.response["Error"]["Code"]


def fresh(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def dead_letters(sqs, per_source=2, sources=2):
    """A dead-letter queue holding `per_source` dead letters from each of
    `sources` queues; answers (dlq name, {source name: bodies})."""
    dlq = fresh("dlq")
    sqs.create_queue(QueueName=dlq)
    policy = json.dumps({"deadLetterTargetArn": ARN + dlq, "maxReceiveCount": 1})
    sent = {}
    for _ in range(sources):
        src = fresh("src")
        url = sqs.create_queue(QueueName=src, Attributes={"RedrivePolicy": policy})["QueueUrl"]
        bodies = [f"{src}-{i}" for i in range(per_source)]
        for b in bodies:
            sqs.send_message(QueueUrl=url, MessageBody=b)
        # One delivery each with an immediate lease end; the next receive
        # dead-letters them (past maxReceiveCount).
        got = 0
        for _ in range(10):
            got += len(sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=0).get("Messages", []))
            if got >= per_source:
                break
        assert "Messages" not in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)
        sent[src] = sorted(bodies)
    dlq_url = sqs.get_queue_url(QueueName=dlq)["QueueUrl"]
    total = per_source * sources
    assert until(lambda: sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["ApproximateNumberOfMessages"])["Attributes"]["ApproximateNumberOfMessages"] == str(total))
    return dlq, sent


def drain(sqs, name):
    url = sqs.get_queue_url(QueueName=name)["QueueUrl"]
    out = []
    for _ in range(10):
        ms = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
        out += [m["Body"] for m in ms]
        if not ms:
            break
    return sorted(out)


def test_a_move_task_sends_dead_letters_back_to_their_sources(sqs):
    dlq, sent = dead_letters(sqs)
    handle = sqs.start_message_move_task(SourceArn=ARN + dlq)["TaskHandle"]
    assert handle

    def done():
        r = sqs.list_message_move_tasks(SourceArn=ARN + dlq)["Results"]
        return r if r and r[0]["Status"] == "COMPLETED" else None

    results = until(done)
    assert results, sqs.list_message_move_tasks(SourceArn=ARN + dlq)
    t = results[0]
    assert t["SourceArn"] == ARN + dlq
    assert t["ApproximateNumberOfMessagesMoved"] == 4
    assert t["ApproximateNumberOfMessagesToMove"] == 4
    assert "TaskHandle" not in t and "DestinationArn" not in t
    for src, bodies in sent.items():
        assert drain(sqs, src) == bodies
    assert drain(sqs, dlq) == []
    with pytest.raises(ClientError) as e:
        sqs.cancel_message_move_task(TaskHandle=handle)
    assert code(e) == "ResourceNotFoundException"


def test_a_paced_move_can_be_listed_and_cancelled_and_only_one_runs(server, sqs):
    dlq, sent = dead_letters(sqs, per_source=5, sources=1)
    other = fresh("other")
    sqs.create_queue(QueueName=other)
    handle = sqs.start_message_move_task(SourceArn=ARN + dlq, DestinationArn=ARN + other, MaxNumberOfMessagesPerSecond=1)["TaskHandle"]
    running = sqs.list_message_move_tasks(SourceArn=ARN + dlq, MaxResults=10)["Results"]
    assert running[0]["Status"] == "RUNNING"
    assert running[0]["TaskHandle"] == handle
    assert running[0]["DestinationArn"] == ARN + other
    assert running[0]["MaxNumberOfMessagesPerSecond"] == 1
    with pytest.raises(ClientError) as e:
        sqs.start_message_move_task(SourceArn=ARN + dlq)
    assert code(e) == "InvalidParameterValue"
    # The binary protocol's CLI sees the same task.
    out = json.loads(server.fila("--json", "moves", dlq).stdout)
    assert out[-1]["status"] == "running" and out[-1]["to"] == other
    moved = sqs.cancel_message_move_task(TaskHandle=handle)["ApproximateNumberOfMessagesMoved"]
    assert 1 <= moved < 5
    r = sqs.list_message_move_tasks(SourceArn=ARN + dlq)["Results"][0]
    assert r["Status"] == "CANCELLED"
    assert r["ApproximateNumberOfMessagesMoved"] == moved
    assert len(drain(sqs, other)) == moved
    assert len(drain(sqs, dlq)) == 5 - moved


def test_bad_move_requests_are_refused(sqs):
    """The errors are those the StartMessageMoveTask and
    CancelMessageMoveTask references list (boto's model has the same):
    ResourceNotFoundException for a source or destination that is not
    there, for a source that is no queue's dead-letter queue ("only ARNs
    of dead-letter queues (DLQs) whose sources are other Amazon SQS
    queues are accepted") and for a task handle that names no running
    task."""
    # The outside reference: the errors boto's own service model lists.
    model = sqs.meta.service_model
    for op in ("StartMessageMoveTask", "CancelMessageMoveTask"):
        names = [e.name for e in model.operation_model(op).error_shapes]
        assert "ResourceNotFoundException" in names, (op, names)
    dlq, _ = dead_letters(sqs, per_source=1, sources=1)
    with pytest.raises(ClientError) as e:
        sqs.start_message_move_task(SourceArn=ARN + dlq, DestinationArn=ARN + fresh("missing"))
    assert code(e) == "ResourceNotFoundException"
    with pytest.raises(ClientError) as e:
        sqs.start_message_move_task(SourceArn=ARN + dlq, MaxNumberOfMessagesPerSecond=501)
    assert code(e) == "InvalidParameterValue"
    with pytest.raises(ClientError) as e:
        sqs.start_message_move_task(SourceArn=ARN + fresh("nope"))
    assert code(e) == "ResourceNotFoundException"
    lone = fresh("lone")
    sqs.create_queue(QueueName=lone)
    with pytest.raises(ClientError) as e:
        sqs.start_message_move_task(SourceArn=ARN + lone)
    assert code(e) == "ResourceNotFoundException"
    unknown = base64.b64encode(f"999:{dlq}".encode()).decode()
    for handle in ["not a handle", "MTox", unknown]:
        with pytest.raises(ClientError) as e:
            sqs.cancel_message_move_task(TaskHandle=handle)
        assert code(e) == "ResourceNotFoundException", handle
    assert sqs.list_message_move_tasks(SourceArn=ARN + dlq)["Results"] == []
    assert sqs.list_message_move_tasks(SourceArn=ARN + lone)["Results"] == []


def test_the_cli_moves_and_a_running_move_survives_a_restart(server):
    sqs = server.client()
    dlq, sent = dead_letters(sqs, per_source=3, sources=1)
    (src,) = sent
    out = json.loads(server.fila("--json", "move", dlq, "--rate", "1").stdout)
    assert out[0]["status"] == "running" and out[0]["moved"] == 1
    server.restart()
    sqs = server.client()
    tasks = json.loads(server.fila("--json", "moves", dlq).stdout)
    assert tasks[-1]["status"] in ("running", "completed")
    assert tasks[-1]["moved"] >= 1

    def done():
        r = sqs.list_message_move_tasks(SourceArn=ARN + dlq)["Results"]
        return r and r[0]["Status"] == "COMPLETED"

    assert until(done, secs=15)
    assert drain(sqs, src) == sent[src]

