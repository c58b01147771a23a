"""What the operations answer: plain dataclasses."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional

STATES = {1: "visible", 2: "in_flight", 3: "delayed", 4: "deferred", 5: "dead_lettered"}
DEAD_LETTER_REASONS = {1: "max_deliveries", 2: "expired", 3: "consumer"}
MOVE_STATUS = {0: "running", 1: "completed", 2: "cancelled", 3: "failed"}

#: Receive `fields`: which groups of a message's fields travel (the
#: payload and the receipt always do). docs/protocol.md, "Asking for
#: fewer fields".
FIELDS_ID = 0x01
FIELDS_ATTRIBUTES = 0x02
FIELDS_TIMES = 0x04
FIELDS_DELIVERY = 0x08
FIELDS_ALL = 0x0F
FIELDS_ATTEMPTS = 0x10
FIELDS_PAYLOAD_AND_RECEIPT = 0x00


@dataclass
class DeadLetter:
    """Why and where from a message was dead-lettered."""

    source_queue: str
    at_ms: int
    reason: str  # max_deliveries, expired or consumer
    consumer_reason: str
    description: str
    delivery_count: int


@dataclass
class Message:
    """A message as a receive, a peek or a receive-deferred answers it.
    Times are milliseconds since the Unix epoch. Fields a receive did not
    ask for (`fields`) read as zero or empty."""

    id: int
    seq: int
    payload: bytes
    attributes: Dict[str, str] = field(default_factory=dict)
    channel: Optional[str] = None
    group: Optional[str] = None
    priority: int = 1
    inserted_at_ms: int = 0
    expires_at_ms: int = 0
    next_visible_at_ms: int = 0
    delivery_count: int = 0
    state: str = ""
    receipt: Optional[bytes] = None
    dead_letter: Optional[DeadLetter] = None
    attempts: List["Attempt"] = field(default_factory=list)

    @property
    def id_hex(self) -> str:
        """The id as 32 hex digits (as the CLI and the console show it)."""
        return f"{self.id:032x}"


@dataclass
class Attempt:
    """One failed attempt at a message: a delivery whose lease ended
    without a delete (`ended`: `expired`, `released` or `dead_lettered`)."""

    at_ms: int
    delivery: int
    ended: str
    reason: str = ""
    description: str = ""


ATTEMPT_ENDS = {1: "expired", 2: "released", 3: "dead_lettered"}


@dataclass
class PutResult:
    """One put entry's result: the message's id and sequence number."""

    id: int
    seq: int

    @property
    def id_hex(self) -> str:
        return f"{self.id:032x}"


@dataclass
class QueueSettings:
    """A queue's settings (docs/protocol.md, `settings`)."""

    visibility_timeout_ms: int
    max_deliveries: int
    retention_ms: int
    max_message_bytes: int
    receive_wait_default_ms: int
    dead_letter_on_expiration: bool
    dead_letter_target: Optional[str]
    max_messages: int
    max_bytes: int
    channel_capacity_pct: int
    delay_ms: int
    redrive_allow: Optional[str]
    tags: Dict[str, str]
    dedup_window_ms: int
    content_dedup: bool
    ordered: bool
    priority_levels: int
    priority_fairness: int
    retry_initial_ms: int = 0
    retry_multiplier_pct: int = 200
    retry_max_ms: int = 900_000
    retry_jitter_pct: int = 0
    receive_paused: bool = False
    send_paused: bool = False
    attempt_history: int = 0


@dataclass
class MoveFilter:
    """Which messages a redrive or a move takes: every condition given
    must hold (docs/engine.md, "Filtered redrive and move").

    `attributes`: each with exactly this value; `reason`: a reason it
    failed for, exactly (its dead-letter record's `max_deliveries`,
    `expired` or `consumer`, the consumer's reason, or an attempt's);
    `text`: contained in a consumer's reason or description; `since_ms`
    and `until_ms`: when it failed (dead-lettered, else put), ms since the
    epoch, at or after `since_ms` and before `until_ms`."""

    attributes: Dict[str, str] = field(default_factory=dict)
    reason: Optional[str] = None
    text: Optional[str] = None
    since_ms: Optional[int] = None
    until_ms: Optional[int] = None

    def empty(self) -> bool:
        """Whether it has no condition (it takes every message)."""
        return self == MoveFilter()


@dataclass
class MovePreview:
    """What a redrive or a move would take, in one bounded look: how many
    (`matched`), the first 20 (`messages`, with their failed attempts), and
    the sequence number to go on from (`next`) when the look stopped
    before the end of the queue."""

    matched: int
    next: Optional[int]
    messages: List["Message"]


@dataclass
class Move:
    """A move task or a redrive (`filter`: None when it takes every
    message)."""

    number: int
    from_dlq: bool
    to: Optional[str]
    rate_per_second: int
    started_at_ms: int
    moved: int
    to_move: int
    max_messages: Optional[int]
    status: str
    failure: Optional[str]
    filter: Optional[MoveFilter] = None


@dataclass
class Channel:
    """A channel's counts (`name` None: the default channel)."""

    name: Optional[str]
    visible: int
    held: int


@dataclass
class Redrive:
    """A redrive's counts: moved now, and scheduled to move at its rate."""

    moved: int
    scheduled: int


@dataclass
class Reload:
    """A reload's answer."""

    generation: int
    tokens: int
    tls: bool


@dataclass
class Member:
    id: int
    peer: str
    client: str
    voter: bool
    matched_index: Optional[int]


@dataclass
class Replica:
    id: int
    voter: bool
    matched_index: Optional[int]


@dataclass
class Partition:
    partition: int
    leader: Optional[int]
    term: int
    last_log_index: Optional[int]
    committed_index: Optional[int]
    applied_index: Optional[int]
    replicas: List[Replica]


@dataclass
class ClusterStatus:
    """A cluster node's view of its cluster (the metadata group's leader,
    term and indexes, its members, its partitions)."""

    node_id: int
    leader: Optional[int]
    term: int
    last_log_index: Optional[int]
    committed_index: Optional[int]
    applied_index: Optional[int]
    members: List[Member]
    partitions: List[Partition]
