"""fila for Python: a client for every operation of fila's wire protocol
(`Client`, blocking; `AsyncClient`, asyncio) and the queue trigger
(`fila.worker`). docs/python.md in the repository says how to use them."""

from . import errors
from ._ops import PutEntry
from .aio import AsyncClient
from .client import Client
from .errors import *  # noqa: F401,F403  (every error kind)
from .errors import BatchError, FilaError, ServerError
from .types import (
    FIELDS_ALL, FIELDS_ATTRIBUTES, FIELDS_DELIVERY, FIELDS_ID, FIELDS_PAYLOAD_AND_RECEIPT,
    FIELDS_TIMES, Attempt, Channel, ClusterStatus, DeadLetter, Member, Message, Move, MoveFilter,
    MovePreview, Partition, PutResult, QueueSettings, Redrive, Reload, Replica,
)

__version__ = "0.1.0"

__all__ = [
    "AsyncClient", "Attempt", "BatchError", "Channel", "Client", "ClusterStatus", "DeadLetter",
    "FIELDS_ALL", "FIELDS_ATTRIBUTES", "FIELDS_DELIVERY", "FIELDS_ID",
    "FIELDS_PAYLOAD_AND_RECEIPT", "FIELDS_TIMES", "FilaError", "Member", "Message", "Move",
    "MoveFilter", "MovePreview",
    "Partition", "PutEntry", "PutResult", "QueueSettings", "Redrive", "Reload", "Replica",
    "ServerError", "errors",
]
