"""AWS's MD5 digests of message attributes, written from AWS's description
(docs: "Calculating the MD5 message digest for message attributes"),
independently of the server's code."""

import base64
import hashlib
import struct

TRANSPORT = {"String": 1, "Number": 1, "Binary": 2}


def _field(b):
    return struct.pack(">I", len(b)) + b


def md5_of_attributes(attributes):
    """The digest of a MessageAttributes map as boto3 sends it."""
    h = hashlib.md5()
    for name in sorted(attributes):
        a = attributes[name]
        data_type = a["DataType"]
        h.update(_field(name.encode()))
        h.update(_field(data_type.encode()))
        base = data_type.split(".", 1)[0]
        h.update(bytes([TRANSPORT[base]]))
        if base == "Binary":
            v = a["BinaryValue"]
            if isinstance(v, str):
                v = base64.b64decode(v)
            h.update(_field(v))
        else:
            h.update(_field(a["StringValue"].encode()))
    return h.hexdigest()


def md5_of_body(body):
    return hashlib.md5(body.encode()).hexdigest()
