"""The query protocol (form-encoded Action=..., XML answers) over raw HTTP,
as SDKs pinned to it speak it."""

import hashlib
import http.client
import urllib.parse
import xml.etree.ElementTree as ET

from conftest import MOTO, aws_decides

NS = {"q": "http://queue.amazonaws.com/doc/2012-11-05/"}
# moto's server serves every AWS service on one port and tells them apart
# by the credential scope of the request's signature (fila, without
# tokens, takes unsigned requests).
MOTO_ROUTE = {"Authorization": "AWS4-HMAC-SHA256 Credential=any/20260101/us-east-1/sqs/aws4_request, "
                                "SignedHeaders=host, Signature=00"}


def call(server, params, path="/", method="POST"):
    conn = http.client.HTTPConnection(server.sqs_addr, timeout=30)
    form = urllib.parse.urlencode(params)
    route = MOTO_ROUTE if MOTO else {}
    if method == "GET":
        conn.request("GET", path + "?" + form, headers=route)
    else:
        conn.request(method, path, body=form, headers={"Content-Type": "application/x-www-form-urlencoded", **route})
    r = conn.getresponse()
    body = r.read()
    conn.close()
    return r.status, r.getheader("Content-Type"), ET.fromstring(body)


def text(root, path):
    e = root.find(path, NS)
    return None if e is None else e.text


def test_a_message_goes_round_through_the_query_protocol(server):
    status, ctype, root = call(server, {"Action": "CreateQueue", "QueueName": "query-q", "Attribute.1.Name": "VisibilityTimeout", "Attribute.1.Value": "40", "Version": "2012-11-05"})
    assert status == 200 and ctype in ("text/xml", "application/xml")
    url = text(root, "q:CreateQueueResult/q:QueueUrl")
    assert url.endswith("/000000000000/query-q")
    assert text(root, "q:ResponseMetadata/q:RequestId")

    body = "a <b> & \"c\" \r\n é"
    status, _, root = call(server, {
        "Action": "SendMessage", "QueueUrl": url, "MessageBody": body,
        "MessageAttribute.1.Name": "n", "MessageAttribute.1.Value.DataType": "Number", "MessageAttribute.1.Value.StringValue": "7",
    })
    assert status == 200
    assert text(root, "q:SendMessageResult/q:MD5OfMessageBody") == hashlib.md5(body.encode()).hexdigest()
    message_id = text(root, "q:SendMessageResult/q:MessageId")

    # A GET with the parameters in its query, the queue named by the path.
    receive = {"Action": "ReceiveMessage", "AttributeName.1": "All", "MessageAttributeName.1": "All"}
    if aws_decides("the developer guide's 'Making query API requests': a GET with the "
                   "parameters in its query string, to the queue's URL (moto answers no XML)"):
        status, _, root = call(server, receive, path="/000000000000/query-q", method="GET")
    else:
        status, _, root = call(server, {**receive, "QueueUrl": url})
    assert status == 200
    m = root.find("q:ReceiveMessageResult/q:Message", NS)
    assert text(m, "q:MessageId") == message_id
    assert text(m, "q:Body") == body
    attrs = {text(a, "q:Name"): text(a, "q:Value") for a in m.findall("q:Attribute", NS)}
    assert attrs["ApproximateReceiveCount"] == "1"
    ma = m.find("q:MessageAttribute", NS)
    assert text(ma, "q:Name") == "n"
    assert text(ma, "q:Value/q:DataType") == "Number"
    assert text(ma, "q:Value/q:StringValue") == "7"

    status, _, root = call(server, {
        "Action": "DeleteMessageBatch", "QueueUrl": url,
        "DeleteMessageBatchRequestEntry.1.Id": "ok", "DeleteMessageBatchRequestEntry.1.ReceiptHandle": text(m, "q:ReceiptHandle"),
        "DeleteMessageBatchRequestEntry.2.Id": "bad", "DeleteMessageBatchRequestEntry.2.ReceiptHandle": "garbage",
    })
    assert status == 200
    assert text(root, "q:DeleteMessageBatchResult/q:DeleteMessageBatchResultEntry/q:Id") == "ok"
    assert text(root, "q:DeleteMessageBatchResult/q:BatchResultErrorEntry/q:Code") == "ReceiptHandleIsInvalid"

    status, _, root = call(server, {"Action": "GetQueueAttributes", "QueueUrl": url, "AttributeName.1": "All"})
    attrs = {text(a, "q:Name"): text(a, "q:Value") for a in root.findall("q:GetQueueAttributesResult/q:Attribute", NS)}
    assert attrs["VisibilityTimeout"] == "40"
    assert attrs["ApproximateNumberOfMessages"] == "0"
    assert attrs["ApproximateNumberOfMessagesNotVisible"] == "0"


def test_query_errors_are_xml_with_the_query_code(server):
    status, ctype, root = call(server, {"Action": "GetQueueUrl", "QueueName": "query-missing"})
    assert status == 400 and ctype in ("text/xml", "application/xml")
    assert root.tag == "{http://queue.amazonaws.com/doc/2012-11-05/}ErrorResponse"
    assert text(root, "q:Error/q:Type") == "Sender"
    assert text(root, "q:Error/q:Code") == "AWS.SimpleQueueService.NonExistentQueue"
    assert text(root, "q:RequestId")
    if aws_decides("Common Errors (the SQS API reference): MissingAction, 'The request is "
                   "missing an action or a required parameter', and InvalidAction, 'The action "
                   "or operation requested is invalid', both 400 (moto answers no XML)"):
        status, _, root = call(server, {"QueueName": "no-action"})
        assert status == 400
        assert text(root, "q:Error/q:Code") == "MissingAction"
        # An Action given empty names no action either.
        status, _, root = call(server, {"Action": "", "QueueName": "no-action"})
        assert status == 400
        assert text(root, "q:Error/q:Code") == "MissingAction"
        status, _, root = call(server, {"Action": "Explode"})
        assert status == 400
        assert text(root, "q:Error/q:Code") == "InvalidAction"
