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


class InvalidArgument(ServerError):
    """A field is out of range; the message names it."""

    kind = "invalid_argument"
    code = 1


class QueueNotFound(ServerError):
    """No queue has that name."""

    kind = "queue_not_found"
    code = 2


class QueueExists(ServerError):
    """The queue exists with other settings."""

    kind = "queue_exists"
    code = 3


class QueueFull(ServerError):
    """The put would pass the queue's limits."""

    kind = "queue_full"
    code = 4


class QueueDeleted(ServerError):
    """The queue was deleted while the receive waited."""

    kind = "queue_deleted"
    code = 5


class MessageTooLarge(ServerError):
    """The payload is over the queue's max_message_bytes."""

    kind = "message_too_large"
    code = 6


class ReceiptStale(ServerError):
    """The lease the receipt names has ended; nothing changed."""

    kind = "receipt_stale"
    code = 7


class ReceiptInvalid(ServerError):
    """The receipt is not one this server issued."""

    kind = "receipt_invalid"
    code = 8


class NotFound(ServerError):
    """No message with that sequence number in the state asked for."""

    kind = "not_found"
    code = 9


class Expired(ServerError):
    """The message expired."""

    kind = "expired"
    code = 10


class Unauthenticated(ServerError):
    """The connection has not presented a valid token."""

    kind = "unauthenticated"
    code = 11


class Forbidden(ServerError):
    """The token lacks the permission for that queue."""

    kind = "forbidden"
    code = 12


class ResourceExhausted(ServerError):
    """A server or connection limit is reached."""

    kind = "resource_exhausted"
    code = 13


class QueuePaused(ServerError):
    """The queue is paused for what was asked (a put while its sending is
    paused, a receive-deferred while its receiving is)."""

    kind = "queue_paused"
    code = 14


class FrameTooLarge(ServerError):
    """A frame was over the limit."""

    kind = "frame_too_large"
    code = 100


class MalformedFrame(ServerError):
    """A frame's body did not parse."""

    kind = "malformed_frame"
    code = 101


class UnsupportedVersion(ServerError):
    """No protocol version both sides speak."""

    kind = "unsupported_version"
    code = 102


class UnknownOpcode(ServerError):
    """The server does not know the operation."""

    kind = "unknown_opcode"
    code = 103


class Internal(ServerError):
    """The server failed through no fault of the request."""

    kind = "internal"
    code = 200


class ShuttingDown(ServerError):
    """The server is stopping and takes no new work."""

    kind = "shutting_down"
    code = 201


class NotLeader(ServerError):
    """This cluster node does not lead the queue's partition."""

    kind = "not_leader"
    code = 202


class OutcomeUnknown(ServerError):
    """The change may or may not have been made."""

    kind = "outcome_unknown"
    code = 203


# Each kind's class by its code (each kind sets its code).
SERVER_KINDS: Dict[int, Type[ServerError]] = {
    c.code: c  # type: ignore[misc]
    for c in (
        InvalidArgument, QueueNotFound, QueueExists, QueueFull, QueueDeleted,
        MessageTooLarge, ReceiptStale, ReceiptInvalid, NotFound, Expired,
        Unauthenticated, Forbidden, ResourceExhausted, QueuePaused, FrameTooLarge, MalformedFrame,
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
