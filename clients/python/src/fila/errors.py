"""Errors: every failure is a `FilaError` whose `.kind` names it.

The server's error kinds are the contract's (docs/protocol.md, "Error
codes"), each a subclass; the client adds its own kinds for what happens on
its side of the wire (`connect`, `connection_lost`, `timeout`, `tls`,
`protocol`)."""

from __future__ import annotations

from typing import Dict, List, Optional, Type, Union


class FilaError(Exception):
    """A failed call. `kind` is the error's name (`queue_not_found`,
    `connection_lost`, ...), `code` the protocol's stable number for the
    server's kinds (None for the client's own), `message` what it said."""

    kind: str = "unknown"
    code: Optional[int] = None

    def __init__(self, message: str, *, code: Optional[int] = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def __str__(self) -> str:
        if self.message.startswith(self.kind + ":"):
            return self.message
        return f"{self.kind}: {self.message}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r})"


class ServerError(FilaError):
    """An error the server answered."""


def _kind(name: str, code: int, doc: str) -> Type[ServerError]:
    cls = type(
        "".join(p.capitalize() for p in name.split("_")),
        (ServerError,),
        {"kind": name, "code": code, "__doc__": doc, "__module__": __name__},
    )
    return cls


InvalidArgument = _kind("invalid_argument", 1, "A field is out of range; the message names it.")
QueueNotFound = _kind("queue_not_found", 2, "No queue has that name.")
QueueExists = _kind("queue_exists", 3, "The queue exists with other settings.")
QueueFull = _kind("queue_full", 4, "The put would pass the queue's limits.")
QueueDeleted = _kind("queue_deleted", 5, "The queue was deleted while the receive waited.")
MessageTooLarge = _kind("message_too_large", 6, "The payload is over the queue's max_message_bytes.")
ReceiptStale = _kind("receipt_stale", 7, "The lease the receipt names has ended; nothing changed.")
ReceiptInvalid = _kind("receipt_invalid", 8, "The receipt is not one this server issued.")
NotFound = _kind("not_found", 9, "No message with that sequence number in the state asked for.")
Expired = _kind("expired", 10, "The message expired.")
Unauthenticated = _kind("unauthenticated", 11, "The connection has not presented a valid token.")
Forbidden = _kind("forbidden", 12, "The token lacks the permission for that queue.")
ResourceExhausted = _kind("resource_exhausted", 13, "A server or connection limit is reached.")
FrameTooLarge = _kind("frame_too_large", 100, "A frame was over the limit.")
MalformedFrame = _kind("malformed_frame", 101, "A frame's body did not parse.")
UnsupportedVersion = _kind("unsupported_version", 102, "No protocol version both sides speak.")
UnknownOpcode = _kind("unknown_opcode", 103, "The server does not know the operation.")
Internal = _kind("internal", 200, "The server failed through no fault of the request.")
ShuttingDown = _kind("shutting_down", 201, "The server is stopping and takes no new work.")
NotLeader = _kind("not_leader", 202, "This cluster node does not lead the queue's partition.")
OutcomeUnknown = _kind("outcome_unknown", 203, "The change may or may not have been made.")

SERVER_KINDS: Dict[int, Type[ServerError]] = {
    c.code: c  # type: ignore[misc]
    for c in (
        InvalidArgument, QueueNotFound, QueueExists, QueueFull, QueueDeleted,
        MessageTooLarge, ReceiptStale, ReceiptInvalid, NotFound, Expired,
        Unauthenticated, Forbidden, ResourceExhausted, FrameTooLarge, MalformedFrame,
        UnsupportedVersion, UnknownOpcode, Internal, ShuttingDown, NotLeader, OutcomeUnknown,
    )
}


def server_error(code: int, message: str) -> ServerError:
    """The error the server answered with `code` (an unknown code is a
    plain `ServerError` of kind `unknown`, keeping its number)."""
    cls = SERVER_KINDS.get(code)
    if cls is None:
        return ServerError(message, code=code)
    return cls(message)


class ConnectError(FilaError):
    """No node of the address could be connected to."""

    kind = "connect"


class ConnectionLost(FilaError):
    """The connection broke before the answer came: the server may or may
    not have done the request (nothing is sent again)."""

    kind = "connection_lost"


class Timeout(FilaError):
    """No answer within the request's timeout; the connection is closed."""

    kind = "timeout"


class TlsError(FilaError):
    """The TLS handshake failed."""

    kind = "tls"


class ProtocolError(FilaError):
    """The server answered something this client cannot read."""

    kind = "protocol"


class BatchError(FilaError):
    """Some entries of a batch failed. `results` holds every entry's
    result in order, the failed ones as their `FilaError`; `kind`, `code`
    and `index` are the first failure's."""

    def __init__(self, results: List[object], index: int, first: FilaError) -> None:
        super().__init__(f"entry {index} of {len(results)}: {first.message}", code=first.code)
        self.kind = first.kind
        self.results = results
        self.index = index
        self.first = first


AnyError = Union[FilaError, Exception]
