"""Messages through the SQS API: send, receive, delete, visibility,
attributes and their digests, batches."""

import concurrent.futures
import json
import time

import pytest
from botocore.exceptions import ClientError

from conftest import aws_decides
from md5 import md5_of_attributes, md5_of_body

# SendMessage reference, MessageBody: "Any characters not included in this
# list will be rejected" (#x9, #xA, #xD, #x20 to #xD7FF, #xE000 to #xFFFD,
# #x10000 to #x10FFFF); moto stores them.
BODY_CHARACTERS = "SendMessage reference, MessageBody: the characters allowed"


def code(e):
    return e.value.response["Error"]["Code"]


ATTRS = {
    "s": {"DataType": "String", "StringValue": "héllo"},
    "n": {"DataType": "Number", "StringValue": "-12.5e3"},
    "b": {"DataType": "Binary", "BinaryValue": b"\x00\x01\xff"},
    "custom": {"DataType": "Number.int", "StringValue": "42"},
    "app.trace": {"DataType": "String.label", "StringValue": "x"},
    "app.user": {"DataType": "String", "StringValue": "y"},
}


def test_send_then_receive_round_trips_body_and_attributes_with_aws_digests(sqs, queue):
    body = "héllo wörld \u2603"
    sent = sqs.send_message(QueueUrl=queue, MessageBody=body, MessageAttributes=ATTRS)
    assert sent["MD5OfMessageBody"] == md5_of_body(body)
    assert sent["MD5OfMessageAttributes"] == md5_of_attributes(ATTRS)
    assert "MD5OfMessageSystemAttributes" not in sent

    got = sqs.receive_message(QueueUrl=queue, MessageAttributeNames=["All"])["Messages"]
    assert len(got) == 1
    m = got[0]
    assert m["MessageId"] == sent["MessageId"]
    assert m["Body"] == body
    assert m["MD5OfBody"] == md5_of_body(body)
    assert m["MessageAttributes"] == ATTRS
    assert m["MD5OfMessageAttributes"] == md5_of_attributes(ATTRS)


def test_a_message_without_attributes_has_no_attribute_digest(sqs, queue):
    sent = sqs.send_message(QueueUrl=queue, MessageBody="plain")
    assert "MD5OfMessageAttributes" not in sent
    m = sqs.receive_message(QueueUrl=queue, MessageAttributeNames=["All"])["Messages"][0]
    assert "MD5OfMessageAttributes" not in m
    assert "MessageAttributes" not in m


@pytest.mark.parametrize(
    "names, expected",
    [
        (["All"], set(ATTRS)),
        ([".*"], set(ATTRS)),
        (["s", "b"], {"s", "b"}),
        (["app.*"], {"app.trace", "app.user"}),
        (["nothing"], set()),
        ([], set()),
    ],
)
def test_message_attribute_names_choose_what_comes_back(sqs, queue, names, expected):
    sqs.send_message(QueueUrl=queue, MessageBody="m", MessageAttributes=ATTRS)
    m = sqs.receive_message(QueueUrl=queue, MessageAttributeNames=names)["Messages"][0]
    got = m.get("MessageAttributes", {})
    assert set(got) == expected
    if expected:
        assert m["MD5OfMessageAttributes"] == md5_of_attributes(got)


def test_system_attributes_count_receives_and_carry_the_trace_header(sqs, queue):
    before = int(time.time() * 1000)
    sent = sqs.send_message(
        QueueUrl=queue,
        MessageBody="t",
        MessageSystemAttributes={
            "AWSTraceHeader": {"DataType": "String", "StringValue": "Root=1-5759e988-bd862e3fe1be46a994272793"}
        },
    )
    trace_attrs = {"AWSTraceHeader": {"DataType": "String", "StringValue": "Root=1-5759e988-bd862e3fe1be46a994272793"}}
    if aws_decides("SendMessage reference, response MD5OfMessageSystemAttributes: 'An MD5 "
                   "digest of the non-URL-encoded message system attribute string' (moto leaves it out)"):
        assert sent["MD5OfMessageSystemAttributes"] == md5_of_attributes(trace_attrs)
    first = sqs.receive_message(QueueUrl=queue, VisibilityTimeout=0, MessageSystemAttributeNames=["All"])
    a = first["Messages"][0]["Attributes"]
    assert a["ApproximateReceiveCount"] == "1"
    assert a["SenderId"]
    if aws_decides("ReceiveMessage reference, SenderId: the sender's principal id; fila has "
                   "one account and answers its id, as AWS does for an account's root user "
                   "(moto answers a user id of its own)"):
        assert a["SenderId"] == "000000000000"
    assert before - 1000 <= int(a["SentTimestamp"]) <= int(time.time() * 1000) + 1000
    assert int(a["ApproximateFirstReceiveTimestamp"]) >= int(a["SentTimestamp"])
    assert a["AWSTraceHeader"] == "Root=1-5759e988-bd862e3fe1be46a994272793"
    # The first receive's time stays (to the second after the send).
    first = int(a["ApproximateFirstReceiveTimestamp"])
    assert int(a["SentTimestamp"]) <= first <= int(time.time() * 1000) + 1000
    second = sqs.receive_message(
        QueueUrl=queue, VisibilityTimeout=0, AttributeNames=["ApproximateReceiveCount"]
    )["Messages"][0]
    assert second["Attributes"] == {"ApproximateReceiveCount": "2"}
    third = sqs.receive_message(
        QueueUrl=queue, MessageSystemAttributeNames=["ApproximateFirstReceiveTimestamp", "ApproximateReceiveCount"]
    )["Messages"][0]
    assert third["Attributes"] == {"ApproximateFirstReceiveTimestamp": str(first), "ApproximateReceiveCount": "3"}


def test_a_delete_with_the_handle_of_an_ended_lease_succeeds_and_deletes_nothing(sqs, queue):
    sqs.send_message(QueueUrl=queue, MessageBody="once")
    old = sqs.receive_message(QueueUrl=queue, VisibilityTimeout=0)["Messages"][0]
    new = sqs.receive_message(QueueUrl=queue, VisibilityTimeout=30)["Messages"][0]
    assert new["MessageId"] == old["MessageId"]
    assert new["ReceiptHandle"] != old["ReceiptHandle"]
    sqs.delete_message(QueueUrl=queue, ReceiptHandle=old["ReceiptHandle"])
    attrs = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["All"])["Attributes"]
    if aws_decides("DeleteMessage reference: 'you must provide the most recently received "
                   "ReceiptHandle for the message (otherwise, the request succeeds, but the "
                   "message will not be deleted)' (moto deletes it)"):
        assert attrs["ApproximateNumberOfMessagesNotVisible"] == "1"
    sqs.delete_message(QueueUrl=queue, ReceiptHandle=new["ReceiptHandle"])
    # A second delete with the same handle is no error either.
    sqs.delete_message(QueueUrl=queue, ReceiptHandle=new["ReceiptHandle"])
    attrs = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["All"])["Attributes"]
    assert attrs["ApproximateNumberOfMessagesNotVisible"] == "0"
    assert attrs["ApproximateNumberOfMessages"] == "0"


@pytest.mark.parametrize("handle", ["", "not base64!", "AAAA", "x" * 4000])
def test_a_malformed_receipt_handle_is_receipt_handle_is_invalid(sqs, queue, handle):
    with pytest.raises(ClientError) as e:
        sqs.delete_message(QueueUrl=queue, ReceiptHandle=handle)
    assert code(e) in ("ReceiptHandleIsInvalid", "MissingParameter")
    if handle:
        assert code(e) == "ReceiptHandleIsInvalid"


def test_change_visibility_releases_and_a_stale_handle_is_not_in_flight(sqs, queue):
    sqs.send_message(QueueUrl=queue, MessageBody="v")
    m = sqs.receive_message(QueueUrl=queue, VisibilityTimeout=300)["Messages"][0]
    assert "Messages" not in sqs.receive_message(QueueUrl=queue)
    sqs.change_message_visibility(QueueUrl=queue, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=0)
    again = sqs.receive_message(QueueUrl=queue, VisibilityTimeout=300)["Messages"][0]
    assert again["MessageId"] == m["MessageId"]
    if aws_decides("ChangeMessageVisibility reference, Errors: MessageNotInflight, 'The "
                   "specified message isn't in flight' (the lease this handle names ended; "
                   "moto changes the message's current lease)"):
        with pytest.raises(ClientError) as e:
            sqs.change_message_visibility(QueueUrl=queue, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=10)
        assert code(e) == "AWS.SimpleQueueService.MessageNotInflight"
    with pytest.raises(ClientError) as e:
        sqs.change_message_visibility(QueueUrl=queue, ReceiptHandle=again["ReceiptHandle"], VisibilityTimeout=43201)
    assert code(e) == "InvalidParameterValue"


def test_send_batch_answers_each_entry(sqs, queue):
    entries = [{"Id": f"e{i}", "MessageBody": f"body {i}"} for i in range(9)]
    bad = aws_decides(BODY_CHARACTERS)
    if bad:
        entries.append({"Id": "bad", "MessageBody": "nul \u0000 inside"})
    r = sqs.send_message_batch(QueueUrl=queue, Entries=entries)
    assert sorted(s["Id"] for s in r["Successful"]) == sorted(f"e{i}" for i in range(9))
    for s in r["Successful"]:
        assert s["MD5OfMessageBody"] == md5_of_body("body " + s["Id"][1:])
    if bad:
        assert [(f["Id"], f["SenderFault"], f["Code"]) for f in r["Failed"]] == [
            ("bad", True, "InvalidMessageContents")
        ]
    got = []
    for _ in range(5):
        got += sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10).get("Messages", [])
        if len(got) >= 9:
            break
    assert sorted(m["Body"] for m in got) == sorted(f"body {i}" for i in range(9))


@pytest.mark.parametrize(
    "entries, error",
    [
        ([], "AWS.SimpleQueueService.EmptyBatchRequest"),
        ([{"Id": f"e{i}", "MessageBody": "x"} for i in range(11)], "AWS.SimpleQueueService.TooManyEntriesInBatchRequest"),
        ([{"Id": "same", "MessageBody": "x"}, {"Id": "same", "MessageBody": "y"}], "AWS.SimpleQueueService.BatchEntryIdsNotDistinct"),
        ([{"Id": "no spaces", "MessageBody": "x"}], "AWS.SimpleQueueService.InvalidBatchEntryId"),
        ([{"Id": "a", "MessageBody": "x" * (600 << 10)}, {"Id": "b", "MessageBody": "y" * (600 << 10)}], "AWS.SimpleQueueService.BatchRequestTooLong"),
    ],
)
def test_a_bad_batch_is_refused_whole(sqs, queue, entries, error):
    with pytest.raises(ClientError) as e:
        sqs.send_message_batch(QueueUrl=queue, Entries=entries)
    assert code(e) == error
    assert "Messages" not in sqs.receive_message(QueueUrl=queue)


def test_delete_and_change_visibility_batches_answer_each_entry(sqs, queue):
    sqs.send_message_batch(QueueUrl=queue, Entries=[{"Id": str(i), "MessageBody": str(i)} for i in range(3)])
    got = []
    for _ in range(5):
        got += sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10, VisibilityTimeout=300).get("Messages", [])
        if len(got) == 3:
            break
    assert len(got) == 3
    r = sqs.change_message_visibility_batch(
        QueueUrl=queue,
        Entries=[{"Id": "a", "ReceiptHandle": got[0]["ReceiptHandle"], "VisibilityTimeout": 0},
                 {"Id": "b", "ReceiptHandle": "garbage", "VisibilityTimeout": 0}],
    )
    assert [s["Id"] for s in r["Successful"]] == ["a"]
    assert [(f["Id"], f["Code"]) for f in r["Failed"]] == [("b", "ReceiptHandleIsInvalid")]
    r = sqs.delete_message_batch(
        QueueUrl=queue,
        Entries=[{"Id": "x", "ReceiptHandle": got[1]["ReceiptHandle"]},
                 {"Id": "y", "ReceiptHandle": got[2]["ReceiptHandle"]},
                 {"Id": "z", "ReceiptHandle": "garbage"}],
    )
    assert sorted(s["Id"] for s in r["Successful"]) == ["x", "y"]
    assert [(f["Id"], f["Code"], f["SenderFault"]) for f in r["Failed"]] == [("z", "ReceiptHandleIsInvalid", True)]
    attrs = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"])["Attributes"]
    assert attrs == {"ApproximateNumberOfMessages": "1", "ApproximateNumberOfMessagesNotVisible": "0"}


@pytest.mark.parametrize(
    "params",
    [
        {"MaxNumberOfMessages": 0},
        {"MaxNumberOfMessages": 11},
        {"WaitTimeSeconds": 21},
        {"VisibilityTimeout": 43201},
    ],
)
def test_receive_parameters_out_of_range_are_invalid(sqs, queue, params):
    with pytest.raises(ClientError) as e:
        sqs.receive_message(QueueUrl=queue, **params)
    assert code(e) == "InvalidParameterValue"


def test_receive_takes_at_most_max_number_of_messages(sqs, queue):
    sqs.send_message_batch(QueueUrl=queue, Entries=[{"Id": str(i), "MessageBody": str(i)} for i in range(10)])
    got = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=3)["Messages"]
    assert 1 <= len(got) <= 3
    assert len({m["MessageId"] for m in got}) == len(got)


def test_a_delayed_message_is_counted_delayed_and_not_received(sqs, queue):
    sqs.send_message(QueueUrl=queue, MessageBody="later", DelaySeconds=900)
    attrs = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["ApproximateNumberOfMessagesDelayed", "ApproximateNumberOfMessages"])["Attributes"]
    assert attrs == {"ApproximateNumberOfMessagesDelayed": "1", "ApproximateNumberOfMessages": "0"}
    assert "Messages" not in sqs.receive_message(QueueUrl=queue)
    with pytest.raises(ClientError) as e:
        sqs.send_message(QueueUrl=queue, MessageBody="x", DelaySeconds=901)
    assert code(e) == "InvalidParameterValue"


def test_bad_message_contents_are_refused(sqs, queue):
    if aws_decides(BODY_CHARACTERS):
        with pytest.raises(ClientError) as e:
            sqs.send_message(QueueUrl=queue, MessageBody="\u0001")
        assert code(e) == "InvalidMessageContents"
    if aws_decides("SendMessage reference, MessageAttributes name: 'must not start with "
                   "AWS-reserved prefixes such as AWS. or Amazon.' (moto takes it)"):
        with pytest.raises(ClientError) as e:
            sqs.send_message(QueueUrl=queue, MessageBody="x", MessageAttributes={"AWS.x": {"DataType": "String", "StringValue": "v"}})
        assert code(e) == "InvalidParameterValue"
    if aws_decides("the developer guide's 'Message attribute data types': a Number holds a "
                   "number (moto takes '12a')"):
        with pytest.raises(ClientError) as e:
            sqs.send_message(QueueUrl=queue, MessageBody="x", MessageAttributes={"n": {"DataType": "Number", "StringValue": "12a"}})
        assert code(e) == "InvalidParameterValue"
    with pytest.raises(ClientError) as e:
        sqs.send_message(QueueUrl=queue, MessageBody="x", MessageAttributes={"n": {"DataType": "Decimal", "StringValue": "1"}})
    assert code(e) == "InvalidParameterValue"
    assert "Messages" not in sqs.receive_message(QueueUrl=queue)


def test_a_message_over_the_queue_maximum_is_refused(sqs, queue):
    sqs.set_queue_attributes(QueueUrl=queue, Attributes={"MaximumMessageSize": "1024"})
    sqs.send_message(QueueUrl=queue, MessageBody="x" * 1024)
    with pytest.raises(ClientError) as e:
        sqs.send_message(QueueUrl=queue, MessageBody="x" * 1025)
    assert code(e) == "InvalidParameterValue"


def test_a_long_poll_is_answered_by_a_send_as_soon_as_it_comes(server, queue):
    waiting, sender = server.client(), server.client()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        f = pool.submit(lambda: waiting.receive_message(QueueUrl=queue, WaitTimeSeconds=20))
        # The receive is parked (nothing to take yet) before the send.
        with pytest.raises(concurrent.futures.TimeoutError):
            f.result(timeout=0.5)
        started = time.monotonic()
        sender.send_message(QueueUrl=queue, MessageBody="wake")
        got = f.result(timeout=20)
        assert got["Messages"][0]["Body"] == "wake"
        assert time.monotonic() - started < 15


def test_a_long_poll_with_nothing_comes_back_empty_after_its_wait(sqs, queue):
    started = time.monotonic()
    r = sqs.receive_message(QueueUrl=queue, WaitTimeSeconds=1)
    assert "Messages" not in r
    assert time.monotonic() - started >= 0.9


@pytest.mark.fila_only
def test_a_waiting_receive_is_answered_within_50_ms_of_the_lease_end(sqs, server):
    """Issue 37: a ReceiveMessage waiting on a queue whose only message is
    leased gets it when the lease ends (it came up to a second late). The
    leases of 0.5 and 1.1 s are taken over the binary protocol (SQS
    visibility timeouts are whole seconds) and say when they end by the
    server's clock; those of 1, 3 and 7 s are taken over SQS and end no
    later than the receive's answer plus the timeout. All at once, one
    queue each."""

    def over_fila(ms):
        name = f"lease-fila-{ms}"
        url = sqs.create_queue(QueueName=name)["QueueUrl"]
        sqs.send_message(QueueUrl=url, MessageBody="only")
        out = server.fila("--json", "receive", name, "--visibility", str(ms),
                          "--max", "1", "--wait", "0").stdout
        ends = json.loads(out)[0]["next_visible_at_ms"]
        got = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=20, VisibilityTimeout=60)
        return ms, len(got.get("Messages", [])), time.time() * 1000 - ends

    def over_sqs(secs):
        url = sqs.create_queue(QueueName=f"lease-sqs-{secs}")["QueueUrl"]
        sqs.send_message(QueueUrl=url, MessageBody="only")
        first = sqs.receive_message(QueueUrl=url, VisibilityTimeout=secs)
        assert len(first["Messages"]) == 1
        ends = time.time() * 1000 + secs * 1000
        got = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=20, VisibilityTimeout=60)
        return secs * 1000, len(got.get("Messages", [])), time.time() * 1000 - ends

    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        runs = [pool.submit(over_fila, ms) for ms in (500, 1100, 2500)]
        runs += [pool.submit(over_sqs, s) for s in (1, 3, 7)]
        for run in runs:
            ms, n, late = run.result()
            assert n == 1, f"{ms} ms: the wait ended empty"
            assert late <= 50, f"{ms} ms: answered {late:.0f} ms after the lease ended"


def test_message_attribute_names_take_prefixes(sqs, queue):
    """`bar.*` returns "all message attributes starting with a prefix"
    (ReceiveMessage reference, MessageAttributeNames): every name that
    starts with `bar`, with or without a period after it."""
    attrs = {n: {"DataType": "String", "StringValue": n} for n in ("Name", "NameFirst", "Name.x", "Other")}
    sqs.send_message(QueueUrl=queue, MessageBody="b", MessageAttributes=attrs)
    m = sqs.receive_message(QueueUrl=queue, MessageAttributeNames=["Name.*"], VisibilityTimeout=0)["Messages"][0]
    assert sorted(m["MessageAttributes"]) == ["Name", "Name.x", "NameFirst"]
    m = sqs.receive_message(QueueUrl=queue, MessageAttributeNames=["Other", "NameF.*"], VisibilityTimeout=0)["Messages"][0]
    assert sorted(m["MessageAttributes"]) == ["NameFirst", "Other"]
    m = sqs.receive_message(QueueUrl=queue, MessageAttributeNames=[".*"])["Messages"][0]
    assert sorted(m["MessageAttributes"]) == sorted(attrs)
