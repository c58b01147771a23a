"""What a hostile or careless client meets: XML with a DTD, entities or
too deep, bodies and heads past their limits, parameters out of range,
verbs a resource does not take, metadata that is not ASCII; each gets a
clear error, and the server goes on serving."""

import socket

import pytest

from conftest import raw


def messages(queue):
    return f"/{queue.queue_name}/messages"


@pytest.mark.parametrize("body,why", [
    (b'<!DOCTYPE a [<!ENTITY x "yyyy">]><QueueMessage><MessageText>&x;</MessageText></QueueMessage>',
     b"document type"),
    (b"<QueueMessage><MessageText>&x;</MessageText></QueueMessage>", b"not defined"),
    (b"<a>" * 40 + b"</a>" * 40, b"deeper"),
    (b"<QueueMessage><MessageText>unclosed</QueueMessage>", b"does not match"),
    (b"<Other><MessageText>x</MessageText></Other>", b"QueueMessage"),
    (b"\xff\xfe<QueueMessage/>", b"UTF-8"),
])
def test_hostile_xml_is_refused_and_nothing_is_put(server, queue, body, why):
    status, headers, answer = raw(server, "POST", messages(queue), body=body)
    assert status == 400, answer
    assert headers["x-ms-error-code"] == "InvalidXmlDocument"
    assert why in answer
    assert queue.peek_messages() == []


def test_a_missing_message_text_is_named(server, queue):
    status, headers, _ = raw(server, "POST", messages(queue), body=b"<QueueMessage></QueueMessage>")
    assert status == 400 and headers["x-ms-error-code"] == "MissingRequiredXmlNode"


@pytest.mark.parametrize("query,code", [
    ("numofmessages=0", "OutOfRangeQueryParameterValue"),
    ("numofmessages=x", "InvalidQueryParameterValue"),
    ("visibilitytimeout=604801", "OutOfRangeQueryParameterValue"),
    ("visibilitytimeout=0", "OutOfRangeQueryParameterValue"),
    ("timeout=-1", "OutOfRangeQueryParameterValue"),
])
def test_parameters_out_of_range_are_refused(server, queue, query, code):
    status, headers, _ = raw(server, "GET", messages(queue), query)
    assert status == 400
    assert headers["x-ms-error-code"] == code


def test_verbs_and_uris_the_service_does_not_have(server, queue):
    status, headers, _ = raw(server, "PATCH", f"/{queue.queue_name}")
    assert status == 405 and headers["x-ms-error-code"] == "UnsupportedHttpVerb"
    status, headers, _ = raw(server, "GET", f"/{queue.queue_name}/messages/a/b")
    assert status == 400 and headers["x-ms-error-code"] == "InvalidUri"
    status, headers, _ = raw(server, "GET", f"/{queue.queue_name}", "comp=nothing")
    assert status == 400
    status, headers, _ = raw(server, "DELETE", f"/{queue.queue_name}/messages/some-id")
    assert status == 400 and headers["x-ms-error-code"] == "MissingRequiredQueryParameter"


def test_metadata_that_azure_refuses_is_refused(server, queue):
    for headers in [{"x-ms-meta-1bad": "x"}, {"x-ms-meta-ok": "caf\u00e9".encode().decode("latin-1")}]:
        status, answer_headers, _ = raw(server, "PUT", f"/{queue.queue_name}", "comp=metadata", headers=headers)
        assert status == 400
        assert answer_headers["x-ms-error-code"] == "InvalidMetadata"
    assert queue.get_queue_properties().metadata == {}


def send_raw(server, data):
    """Bytes as they are, then what comes back until the server closes or
    10 s pass."""
    host, port = server.azure_addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(data)
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
        except (socket.timeout, ConnectionResetError):
            pass
        return out


def test_a_body_past_the_limit_is_refused_and_the_connection_closed(server, queue):
    head = (f"POST /devstoreaccount1/{queue.queue_name}/messages HTTP/1.1\r\nHost: x\r\n"
            f"Content-Length: {1 << 20}\r\n\r\n").encode()
    out = send_raw(server, head + b"x" * 1024)
    assert out.startswith(b"HTTP/1.1 413"), out[:200]
    assert b"RequestBodyTooLarge" in out


def test_a_head_past_its_limits_and_garbage_are_refused(server, queue):
    many = "".join(f"x-h{i}: v\r\n" for i in range(100))
    out = send_raw(server, f"GET /devstoreaccount1 HTTP/1.1\r\n{many}\r\n".encode())
    assert out.startswith(b"HTTP/1.1 4"), out[:200]
    out = send_raw(server, b"\x16\x03\x01 not http at all\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 4"), out[:200]
    # The server still serves.
    queue.send_message("still here")
    assert [m.content for m in queue.peek_messages()] == ["still here"]
