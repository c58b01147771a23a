"""Queues through the SQS API: create, URLs, list, attributes, purge,
delete, and the operations fila refuses."""

import json
import uuid

import pytest
from botocore.exceptions import ClientError

from conftest import aws_decides, fila_differs

# CreateQueue reference, Attributes: each attribute's valid values.
ATTRIBUTE_VALUES = "CreateQueue reference, Attributes: the valid values of each"


def code(e):
    return e.value.response["Error"]["Code"]


def fresh(prefix="q"):
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def test_create_is_idempotent_with_equal_attributes_and_refused_with_others(sqs):
    name = fresh()
    a = sqs.create_queue(QueueName=name, Attributes={"VisibilityTimeout": "45"})
    b = sqs.create_queue(QueueName=name, Attributes={"VisibilityTimeout": "45"})
    assert a["QueueUrl"] == b["QueueUrl"]
    assert a["QueueUrl"].endswith("/000000000000/" + name)
    with pytest.raises(ClientError) as e:
        sqs.create_queue(QueueName=name, Attributes={"VisibilityTimeout": "46"})
    assert code(e) == "QueueAlreadyExists"
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400


@pytest.mark.parametrize("name", ["", "has space", "x" * 81, "dots.not.ok"])
def test_a_bad_queue_name_is_refused(sqs, name):
    with pytest.raises(ClientError) as e:
        sqs.create_queue(QueueName=name)
    assert code(e) in ("InvalidParameterValue", "MissingParameter")


def test_fifo_names_and_the_fifo_attribute_must_agree(sqs):
    standard_names = ("CreateQueue reference, QueueName: a standard queue's name is letters, "
                      "digits, hyphens and underscores, a FIFO queue's ends with .fifo (moto "
                      "makes a standard queue named x.fifo)")
    for name, attrs, guard in [
        (fresh() + ".fifo", {}, aws_decides(standard_names)),
        (fresh() + ".fifo", {"FifoQueue": "false"}, aws_decides(standard_names)),
        (fresh(), {"FifoQueue": "true"}, True),
        ("bad.name" + ".fifo", {"FifoQueue": "true"}, True),
    ]:
        if guard:
            with pytest.raises(ClientError) as e:
                sqs.create_queue(QueueName=name, Attributes=attrs)
            assert code(e) == "InvalidParameterValue", name
    if aws_decides("CreateQueue reference, Attributes: 'The following attributes apply only to "
                   "FIFO queues' (ContentBasedDeduplication among them; moto takes it)"):
        with pytest.raises(ClientError) as e:
            sqs.create_queue(QueueName=fresh(), Attributes={"ContentBasedDeduplication": "true"})
        assert code(e) == "InvalidAttributeName"


def test_get_queue_url_and_a_missing_queue(sqs, queue):
    name = queue.rsplit("/", 1)[1]
    assert sqs.get_queue_url(QueueName=name)["QueueUrl"] == queue
    with pytest.raises(sqs.exceptions.QueueDoesNotExist) as e:
        sqs.get_queue_url(QueueName=fresh("missing"))
    assert code(e) == "AWS.SimpleQueueService.NonExistentQueue"


def test_the_url_is_looked_up_by_its_path_whatever_its_host(sqs, queue):
    name = queue.rsplit("/", 1)[1]
    other = f"https://sqs.eu-west-1.amazonaws.com/000000000000/{name}"
    sqs.send_message(QueueUrl=other, MessageBody="by path")
    assert sqs.receive_message(QueueUrl=queue)["Messages"][0]["Body"] == "by path"
    if aws_decides("Common errors: InvalidAddress, 'The address ... is not valid for this "
                   "endpoint'; a queue of another account is not this server's, "
                   "QueueDoesNotExist (moto looks the name up whatever the path says)"):
        with pytest.raises(ClientError) as e:
            sqs.send_message(QueueUrl="http://localhost/not-an-account/" + name, MessageBody="x")
        assert code(e) == "InvalidAddress"
        with pytest.raises(sqs.exceptions.QueueDoesNotExist):
            sqs.send_message(QueueUrl="http://localhost/111122223333/" + name, MessageBody="x")


def test_list_queues_by_prefix_in_pages(sqs):
    prefix = fresh("list")
    names = sorted(f"{prefix}-{i:02}" for i in range(7))
    for n in names:
        sqs.create_queue(QueueName=n)
    everything = sqs.list_queues(QueueNamePrefix=prefix)
    assert [u.rsplit("/", 1)[1] for u in everything["QueueUrls"]] == names
    assert "NextToken" not in everything
    seen, token = [], None
    for _ in range(10):
        kw = {"QueueNamePrefix": prefix, "MaxResults": 3}
        if token:
            kw["NextToken"] = token
        page = sqs.list_queues(**kw)
        assert len(page["QueueUrls"]) <= 3
        seen += [u.rsplit("/", 1)[1] for u in page["QueueUrls"]]
        token = page.get("NextToken")
        if not token:
            break
    assert seen == names
    assert "QueueUrls" not in sqs.list_queues(QueueNamePrefix=fresh("none"))


def test_attributes_read_back_as_set(sqs, queue):
    dlq = sqs.create_queue(QueueName=fresh("dlq"))["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    assert dlq_arn == "arn:aws:sqs:us-east-1:000000000000:" + dlq.rsplit("/", 1)[1]
    sqs.set_queue_attributes(
        QueueUrl=queue,
        Attributes={
            "VisibilityTimeout": "120",
            "MessageRetentionPeriod": "3600",
            "ReceiveMessageWaitTimeSeconds": "2",
            "MaximumMessageSize": "2048",
            "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 3}),
        },
    )
    a = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["All"])["Attributes"]
    assert a["VisibilityTimeout"] == "120"
    assert a["MessageRetentionPeriod"] == "3600"
    assert a["ReceiveMessageWaitTimeSeconds"] == "2"
    assert a["MaximumMessageSize"] == "2048"
    assert json.loads(a["RedrivePolicy"]) == {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 3}
    assert a["ApproximateNumberOfMessages"] == "0"
    only = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["VisibilityTimeout"])["Attributes"]
    assert only == {"VisibilityTimeout": "120"}


def test_a_queue_delay_holds_messages_that_name_none(sqs):
    url = sqs.create_queue(QueueName=fresh(), Attributes={"DelaySeconds": "900"})["QueueUrl"]
    assert sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["DelaySeconds"])["Attributes"] == {"DelaySeconds": "900"}
    sqs.send_message(QueueUrl=url, MessageBody="held")
    sqs.send_message(QueueUrl=url, MessageBody="now", DelaySeconds=0)
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert [m["Body"] for m in got] == ["now"]
    a = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessagesDelayed"])["Attributes"]
    assert a == {"ApproximateNumberOfMessagesDelayed": "1"}
    if aws_decides(ATTRIBUTE_VALUES + " (DelaySeconds: 0 to 900; moto takes 901)"):
        with pytest.raises(ClientError) as e:
            sqs.set_queue_attributes(QueueUrl=url, Attributes={"DelaySeconds": "901"})
        assert code(e) == "InvalidAttributeValue"


def test_created_and_last_modified_timestamps(sqs):
    import time

    before = int(time.time())
    url = sqs.create_queue(QueueName=fresh())["QueueUrl"]
    a = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["CreatedTimestamp", "LastModifiedTimestamp"])["Attributes"]
    if not aws_decides("GetQueueAttributes reference, CreatedTimestamp: 'the time when the "
                       "queue was created in seconds (epoch time)', whole seconds (moto adds "
                       "a fraction)"):
        return
    created = int(a["CreatedTimestamp"])
    assert before - 1 <= created <= int(time.time()) + 1
    assert int(a["LastModifiedTimestamp"]) == created
    sqs.tag_queue(QueueUrl=url, Tags={"a": "b"})
    a = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["LastModifiedTimestamp"])["Attributes"]
    assert int(a["LastModifiedTimestamp"]) == created


def test_tags_are_set_listed_and_removed(sqs):
    url = sqs.create_queue(QueueName=fresh(), tags={"team": "core", "env": "test"})["QueueUrl"]
    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"team": "core", "env": "test"}
    sqs.tag_queue(QueueUrl=url, Tags={"env": "prod", "cost": "42"})
    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"team": "core", "env": "prod", "cost": "42"}
    sqs.untag_queue(QueueUrl=url, TagKeys=["team", "cost", "absent"])
    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"env": "prod"}
    sqs.untag_queue(QueueUrl=url, TagKeys=["env"])
    assert not sqs.list_queue_tags(QueueUrl=url).get("Tags")
    with pytest.raises(ClientError) as e:
        sqs.tag_queue(QueueUrl=url, Tags={f"k{i}": "v" for i in range(51)})
    assert code(e) == "InvalidParameterValue"
    if aws_decides("the developer guide's 'Tagging' limits: a tag key is at most 128 "
                   "characters (moto takes 129)"):
        with pytest.raises(ClientError) as e:
            sqs.tag_queue(QueueUrl=url, Tags={"k" * 129: "v"})
        assert code(e) == "InvalidParameterValue"
    assert not sqs.list_queue_tags(QueueUrl=url).get("Tags")


def test_redrive_allow_policy_decides_which_sources_may_use_a_dead_letter_queue(sqs):
    if not aws_decides("SetQueueAttributes reference, RedriveAllowPolicy (moto does not know "
                       "the attribute)"):
        pytest.skip("moto has no RedriveAllowPolicy")
    dlq_name, allowed, other = fresh("dlq"), fresh("src"), fresh("src")
    allowed_arn = "arn:aws:sqs:us-east-1:000000000000:" + allowed
    dlq = sqs.create_queue(QueueName=dlq_name, Attributes={
        "RedriveAllowPolicy": json.dumps({"redrivePermission": "byQueue", "sourceQueueArns": [allowed_arn]}),
    })["QueueUrl"]
    got = json.loads(sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["RedriveAllowPolicy"])["Attributes"]["RedriveAllowPolicy"])
    assert got == {"redrivePermission": "byQueue", "sourceQueueArns": [allowed_arn]}
    policy = json.dumps({"deadLetterTargetArn": "arn:aws:sqs:us-east-1:000000000000:" + dlq_name, "maxReceiveCount": 3})
    sqs.create_queue(QueueName=allowed, Attributes={"RedrivePolicy": policy})
    with pytest.raises(ClientError) as e:
        sqs.create_queue(QueueName=other, Attributes={"RedrivePolicy": policy})
    assert code(e) == "InvalidParameterValue"
    other_url = sqs.create_queue(QueueName=other)["QueueUrl"]
    sqs.set_queue_attributes(QueueUrl=dlq, Attributes={"RedriveAllowPolicy": json.dumps({"redrivePermission": "denyAll"})})
    with pytest.raises(ClientError) as e:
        sqs.set_queue_attributes(QueueUrl=other_url, Attributes={"RedrivePolicy": policy})
    assert code(e) == "InvalidParameterValue"
    sqs.set_queue_attributes(QueueUrl=dlq, Attributes={"RedriveAllowPolicy": json.dumps({"redrivePermission": "allowAll"})})
    sqs.set_queue_attributes(QueueUrl=other_url, Attributes={"RedrivePolicy": policy})
    for bad in ["{", json.dumps({"redrivePermission": "some"}), json.dumps({"redrivePermission": "byQueue"}),
                json.dumps({"redrivePermission": "allowAll", "sourceQueueArns": [allowed_arn]})]:
        with pytest.raises(ClientError) as e:
            sqs.set_queue_attributes(QueueUrl=dlq, Attributes={"RedriveAllowPolicy": bad})
        assert code(e) == "InvalidAttributeValue", bad
    missing = json.dumps({"deadLetterTargetArn": "arn:aws:sqs:us-east-1:000000000000:" + fresh("nope"), "maxReceiveCount": 3})
    with pytest.raises(ClientError) as e:
        sqs.set_queue_attributes(QueueUrl=other_url, Attributes={"RedrivePolicy": missing})
    assert code(e) == "InvalidParameterValue"


def test_list_dead_letter_source_queues(sqs):
    dlq_name = fresh("dlq")
    dlq = sqs.create_queue(QueueName=dlq_name)["QueueUrl"]
    policy = json.dumps({"deadLetterTargetArn": "arn:aws:sqs:us-east-1:000000000000:" + dlq_name, "maxReceiveCount": 2})
    sources = sorted(fresh("source") for _ in range(3))
    for s in sources:
        sqs.create_queue(QueueName=s, Attributes={"RedrivePolicy": policy})
    sqs.create_queue(QueueName=fresh("unrelated"))
    got = sqs.list_dead_letter_source_queues(QueueUrl=dlq)
    assert sorted(u.rsplit("/", 1)[1] for u in got["queueUrls"]) == sources
    seen, token = [], None
    for _ in range(10):
        kw = {"QueueUrl": dlq, "MaxResults": 2}
        if token:
            kw["NextToken"] = token
        page = sqs.list_dead_letter_source_queues(**kw)
        if aws_decides("ListDeadLetterSourceQueues reference, MaxResults: 'Maximum number of "
                       "results to include in the response' (moto answers all)"):
            assert len(page["queueUrls"]) <= 2
        seen += [u.rsplit("/", 1)[1] for u in page["queueUrls"]]
        token = page.get("NextToken")
        if not token:
            break
    assert sorted(seen) == sources


def test_new_queues_take_sqs_defaults(sqs, queue):
    a = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["All"])["Attributes"]
    assert a["VisibilityTimeout"] == "30"
    assert a["MessageRetentionPeriod"] == "345600"
    assert a["ReceiveMessageWaitTimeSeconds"] == "0"
    assert a["MaximumMessageSize"] == "1048576"
    assert a["DelaySeconds"] == "0"
    assert "RedrivePolicy" not in a


def test_messages_past_max_receive_count_go_to_the_dead_letter_queue(sqs, queue):
    dlq = sqs.create_queue(QueueName=fresh("dlq"))["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    sqs.set_queue_attributes(QueueUrl=queue, Attributes={"RedrivePolicy": json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": "2"})})
    sqs.send_message(QueueUrl=queue, MessageBody="poison")
    for _ in range(2):
        assert sqs.receive_message(QueueUrl=queue, VisibilityTimeout=0)["Messages"][0]["Body"] == "poison"
    assert "Messages" not in sqs.receive_message(QueueUrl=queue)
    assert sqs.receive_message(QueueUrl=dlq)["Messages"][0]["Body"] == "poison"


def test_a_dead_letter_keeps_its_receive_count_and_names_its_source(sqs, queue):
    """AWS counts a message's receives across queues: one moved to the
    dead-letter queue by maxReceiveCount keeps its ApproximateReceiveCount,
    and a message received from a dead-letter queue carries the
    DeadLetterQueueSourceArn system attribute (ReceiveMessage reference,
    MessageSystemAttributeNames)."""
    dlq = sqs.create_queue(QueueName=fresh("dlq"))["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    source_arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    policy = json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": "1"})
    sqs.set_queue_attributes(QueueUrl=queue, Attributes={"RedrivePolicy": policy})
    sqs.send_message(QueueUrl=queue, MessageBody="poison")
    assert sqs.receive_message(QueueUrl=queue, VisibilityTimeout=0)["Messages"][0]["Body"] == "poison"
    assert "Messages" not in sqs.receive_message(QueueUrl=queue)
    m = sqs.receive_message(QueueUrl=dlq, MessageSystemAttributeNames=["All"], VisibilityTimeout=0)["Messages"][0]
    # Once in the source, once here.
    assert m["Attributes"]["ApproximateReceiveCount"] == "2"
    if aws_decides("ReceiveMessage reference, MessageSystemAttributeNames: "
                   "DeadLetterQueueSourceArn, 'the ARN of the source queue' of a message "
                   "moved to a dead-letter queue (moto leaves it out)"):
        assert m["Attributes"]["DeadLetterQueueSourceArn"] == source_arn
    m = sqs.receive_message(QueueUrl=dlq, MessageSystemAttributeNames=["ApproximateReceiveCount"])["Messages"][0]
    assert m["Attributes"] == {"ApproximateReceiveCount": "3"}
    plain = sqs.create_queue(QueueName=fresh("plain"))["QueueUrl"]
    sqs.send_message(QueueUrl=plain, MessageBody="x")
    m = sqs.receive_message(QueueUrl=plain, MessageSystemAttributeNames=["All"])["Messages"][0]
    assert "DeadLetterQueueSourceArn" not in m["Attributes"]
    assert m["Attributes"]["ApproximateReceiveCount"] == "1"


@pytest.mark.parametrize(
    "attributes, error",
    [
        ({"VisibilityTimeout": "43201"}, "InvalidAttributeValue"),
        ({"VisibilityTimeout": "abc"}, "InvalidAttributeValue"),
        ({"MessageRetentionPeriod": "59"}, "InvalidAttributeValue"),
        ({"MaximumMessageSize": "1048577"}, "InvalidAttributeValue"),
        ({"RedrivePolicy": "{not json"}, "InvalidAttributeValue"),
        ({"NoSuchAttribute": "1"}, "InvalidAttributeName"),
    ],
)
def test_bad_attributes_are_refused_and_change_nothing(sqs, queue, attributes, error):
    if not aws_decides(ATTRIBUTE_VALUES + "; an attribute no queue has is InvalidAttributeName "
                       "(SetQueueAttributes reference, Errors). moto takes the values out of "
                       "range and the unknown name, and fails (500) on 'abc' and bad JSON"):
        pytest.skip("moto does not check queue attributes")
    with pytest.raises(ClientError) as e:
        sqs.set_queue_attributes(QueueUrl=queue, Attributes=attributes)
    assert code(e) == error
    assert sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["VisibilityTimeout"])["Attributes"] == {"VisibilityTimeout": "30"}


def test_unknown_attribute_names_are_refused(sqs, queue):
    with pytest.raises(ClientError) as e:
        sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["Bogus"])
    assert code(e) == "InvalidAttributeName"


def test_purge_empties_and_a_second_within_60_s_is_in_progress(sqs, queue):
    sqs.send_message_batch(QueueUrl=queue, Entries=[{"Id": str(i), "MessageBody": "x"} for i in range(5)])
    sqs.purge_queue(QueueUrl=queue)
    assert "Messages" not in sqs.receive_message(QueueUrl=queue)
    with pytest.raises(ClientError) as e:
        sqs.purge_queue(QueueUrl=queue)
    assert code(e) == "AWS.SimpleQueueService.PurgeQueueInProgress"
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403


def test_delete_queue_then_it_does_not_exist(sqs):
    url = sqs.create_queue(QueueName=fresh())["QueueUrl"]
    sqs.delete_queue(QueueUrl=url)
    with pytest.raises(sqs.exceptions.QueueDoesNotExist):
        sqs.send_message(QueueUrl=url, MessageBody="x")
    with pytest.raises(sqs.exceptions.QueueDoesNotExist):
        sqs.delete_queue(QueueUrl=url)


@pytest.mark.parametrize(
    "call",
    [
        lambda sqs, q: sqs.add_permission(QueueUrl=q, Label="l", AWSAccountIds=["111122223333"], Actions=["SendMessage"]),
        lambda sqs, q: sqs.remove_permission(QueueUrl=q, Label="l"),
    ],
)
def test_permissions_are_unsupported(sqs, queue, call):
    if not fila_differs("AddPermission / RemovePermission reference: AWS shares a queue with "
                        "other accounts; fila has one account (docs/sqs.md)"):
        pytest.skip("moto implements permissions")
    with pytest.raises(ClientError) as e:
        call(sqs, queue)
    assert code(e) == "AWS.SimpleQueueService.UnsupportedOperation"


@pytest.mark.fila_only
def test_fila_retry_policy_is_a_queue_attribute_of_fila_s_own(sqs):
    """docs/sqs.md, "fila's own attributes": FilaRetryPolicy sets the
    queue's retry policy; shown while it is on, and with All."""
    policy = {"initialMs": 3600000, "multiplier": 1.5, "maxMs": 7200000, "jitterPercent": 10}
    url = sqs.create_queue(QueueName=fresh("retry"),
                           Attributes={"FilaRetryPolicy": json.dumps(policy)})["QueueUrl"]
    got = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["FilaRetryPolicy"])["Attributes"]
    assert json.loads(got["FilaRetryPolicy"]) == policy
    every = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert json.loads(every["FilaRetryPolicy"]) == policy
    for bad in ['{"initialMs": 1000, "maxMs": 10}', '{"multiplier": 0.5}', '{"multiplier": 1.234}',
                '{"jitterPercent": 101}', '{"initialMs": -1}', '{"backoff": 2}', "[1]", "{nope"]:
        with pytest.raises(ClientError) as e:
            sqs.set_queue_attributes(QueueUrl=url, Attributes={"FilaRetryPolicy": bad})
        assert code(e) == "InvalidAttributeValue", bad
    # A message whose lease a visibility change of 0 ends is visible at
    # once: ChangeMessageVisibility wins over the policy.
    sqs.send_message(QueueUrl=url, MessageBody="work")
    [m] = sqs.receive_message(QueueUrl=url)["Messages"]
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=0)
    [again] = sqs.receive_message(QueueUrl=url)["Messages"]
    assert again["MessageId"] == m["MessageId"]
    # "" turns it off: no longer shown.
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"FilaRetryPolicy": ""})
    every = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert "FilaRetryPolicy" not in every


@pytest.mark.fila_only
def test_a_paused_queue_refuses_sends_and_gives_nothing_to_receives(sqs, server, queue):
    """docs/sqs.md, "A paused queue": paused with the fila CLI, a queue
    refuses SendMessage with fila's own QueuePaused error and its
    ReceiveMessage finds nothing (a long poll waits), until resumed."""
    name = queue.rsplit("/", 1)[1]
    sqs.send_message(QueueUrl=queue, MessageBody="before")
    server.fila("queue", "pause", name)
    with pytest.raises(ClientError) as e:
        sqs.send_message(QueueUrl=queue, MessageBody="refused")
    assert code(e) == "QueuePaused"
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert "Messages" not in sqs.receive_message(QueueUrl=queue, WaitTimeSeconds=0)
    server.fila("queue", "resume", name)
    [m] = sqs.receive_message(QueueUrl=queue, WaitTimeSeconds=0)["Messages"]
    assert m["Body"] == "before"
