"""The SQS API and the binary protocol on one server: one queue, one
engine, each protocol's long poll answered by the other's put, and what
each writes readable by the other."""

import concurrent.futures
import json
import os
import subprocess
import time
import uuid

import pytest

from conftest import BIN_DIR


def test_a_binary_put_answers_an_sqs_long_poll(server, sqs, queue):
    name = queue.rsplit("/", 1)[1]
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        f = pool.submit(lambda: sqs.receive_message(QueueUrl=queue, WaitTimeSeconds=20, MessageAttributeNames=["All"]))
        with pytest.raises(concurrent.futures.TimeoutError):
            f.result(timeout=0.5)
        out = json.loads(server.fila("--json", "put", name, "from the binary protocol", "--attr", "k=v").stdout)
        got = f.result(timeout=20)["Messages"][0]
    assert got["Body"] == "from the binary protocol"
    assert got["MessageId"].replace("-", "") == out[0]["id"]
    assert got["MessageAttributes"] == {"k": {"DataType": "String", "StringValue": "v"}}


def test_an_sqs_send_answers_a_binary_long_poll(server, sqs, queue):
    name = queue.rsplit("/", 1)[1]
    fila = subprocess.Popen(
        [os.path.join(BIN_DIR, "fila"), "--addr", server.addr, "--json", "receive", name, "--wait", "20000"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            fila.wait(0.5)
        sent = sqs.send_message(
            QueueUrl=queue,
            MessageBody="from SQS",
            MessageAttributes={"n": {"DataType": "Number", "StringValue": "7"}, "s": {"DataType": "String", "StringValue": "t"}},
        )
        out, err = fila.communicate(timeout=20)
    finally:
        if fila.poll() is None:
            fila.kill()
            fila.wait()
    got = json.loads(out)
    assert len(got) == 1
    assert got[0]["payload"] == "from SQS"
    assert got[0]["id"] == sent["MessageId"].replace("-", "")
    # Native clients read the values as plain attributes; the SQS types
    # travel in one reserved attribute.
    assert got[0]["attributes"]["n"] == "7"
    assert got[0]["attributes"]["s"] == "t"
    assert got[0]["attributes"]["fila.sqs.types"] == "n=Number"


def test_a_message_sent_through_sqs_survives_a_restart(server):
    sqs = server.client()
    url = sqs.create_queue(QueueName="durable-" + uuid.uuid4().hex[:8])["QueueUrl"]
    sent = sqs.send_message(QueueUrl=url, MessageBody="kept")
    server.restart()
    sqs = server.client()
    got = sqs.receive_message(QueueUrl=url)["Messages"][0]
    assert got["MessageId"] == sent["MessageId"]
    assert got["Body"] == "kept"
