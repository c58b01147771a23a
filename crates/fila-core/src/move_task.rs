//! Move tasks as the engine answers them: a redrive, or a move out of a
//! queue (docs/engine.md "The DLQ and redrive").

/// Where a move task stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MoveStatus {
    /// Moving, a batch a second.
    Running,
    /// Everything it was to move is moved (or gone).
    Completed,
    /// Cancelled before the end.
    Cancelled,
    /// A destination refused a message (gone, or full): see `failure`.
    Failed,
}

impl MoveStatus {
    /// Its name (`RUNNING`, ... as the SQS API writes it).
    pub fn name(self) -> &'static str {
        match self {
            MoveStatus::Running => "RUNNING",
            MoveStatus::Completed => "COMPLETED",
            MoveStatus::Cancelled => "CANCELLED",
            MoveStatus::Failed => "FAILED",
        }
    }

    /// Its code on the wire and in the log.
    pub fn code(self) -> u8 {
        match self {
            MoveStatus::Running => 0,
            MoveStatus::Completed => 1,
            MoveStatus::Cancelled => 2,
            MoveStatus::Failed => 3,
        }
    }

    /// The status of a code.
    pub fn of_code(code: u8) -> Option<MoveStatus> {
        Some(match code {
            0 => MoveStatus::Running,
            1 => MoveStatus::Completed,
            2 => MoveStatus::Cancelled,
            3 => MoveStatus::Failed,
            _ => return None,
        })
    }
}

/// A move of messages out of a queue's DLQ (a redrive) or out of a queue
/// that is another's dead-letter target, back to where they came from or
/// to one named queue, a batch a second. A queue keeps its last
/// [`MOVE_TASKS_KEPT`] tasks; at most one runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MoveTask {
    /// Its number, counting from 1 per queue.
    pub id: u64,
    /// From the queue's own DLQ (a redrive), else from the queue itself.
    pub from_dlq: bool,
    /// Where to: `None` sends each message back to the queue it was
    /// dead-lettered from (from the DLQ: the queue itself).
    pub to: Option<String>,
    /// Messages a second.
    pub rate: u32,
    /// When it started (ms since the epoch).
    pub started_at_ms: u64,
    /// Messages moved so far.
    pub moved: u64,
    /// Messages there were to move when it started (at most its maximum).
    pub to_move: u64,
    /// At most this many (`None`: all there were at the start).
    pub max: Option<u64>,
    /// Where it stands.
    pub status: MoveStatus,
    /// Why it failed.
    pub failure: Option<String>,
    /// The first sequence number not yet looked at, and the end: messages
    /// put after the start are not moved.
    pub cursor: u64,
    /// See `cursor`.
    pub end: u64,
}

/// Move tasks a queue keeps (the running one and the last ended ones).
pub const MOVE_TASKS_KEPT: usize = 10;

/// What a redrive did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RedriveOutcome {
    /// Moved back now.
    pub moved: u64,
    /// Left to move at the requested rate (0 without a rate).
    pub scheduled: u64,
}
