//! # fila-client: the blocking and async clients
//!
//! fila-client owns the client side of the protocol: typed helpers for
//! every operation, requests pipelined on one connection (answers matched
//! by request id, in any order), batch helpers that split any number of
//! entries into requests of 20 and keep up to 32 of them in flight, and
//! errors that mirror the protocol's codes. Two clients share that code
//! (the `call` module) and fila-proto's codec:
//!
//! - [`Client`], blocking, on `std::net` — no runtime, no extra
//!   dependencies;
//! - `AsyncClient` (feature `async`), on tokio: cheap to clone, every
//!   clone pipelines on the same connection, each call has its own timeout.
//!
//! Reconnection never repeats a request: when the connection breaks, every
//! request sent and not yet answered fails with
//! [`ClientError::ConnectionLost`], and the next call opens a new connection
//! (presenting the token again).
//!
//! ```no_run
//! use fila_client::{Client, ClientOptions};
//! use fila_proto::{PutEntry, SettingsPatch};
//!
//! let mut c = Client::connect(ClientOptions::new("127.0.0.1:7700"))?;
//! c.create_queue("jobs", SettingsPatch::default())?;
//! c.put_one("jobs", "hello")?;
//! for m in c.receive("jobs", 10, Some(0))? {
//!     c.delete("jobs", &[m.receipt.unwrap()])?;
//! }
//! # Ok::<(), fila_client::ClientError>(())
//! ```
#![forbid(unsafe_code)]

use std::io;
use std::time::Duration;

use fila_proto::ProtoError;
pub use fila_proto::{
    limits, Availability, ChannelInfo, ClusterChange, ClusterMemberStatus, ClusterStatus,
    DeferredRef, DeleteRef, Encode, ErrorCode, Fields, Halves, Message, MoveFilter, MoveInfo,
    Opcode, PartitionStatus, PayloadsRef, PutAck, PutEntry, PutRef, QueueRef, Receipt, Receive,
    ReceiveRef, ReplicaStatus, Request, Response, Settings, SettingsPatch, Stats, VisibilityRef,
    WireError, RECEIPT_LEN,
};

mod blocking;
mod call;
#[cfg(feature = "async")]
mod nonblocking;
mod tls;

pub use tls::TlsOptions;

pub use blocking::Client;
#[cfg(feature = "async")]
pub use nonblocking::AsyncClient;

/// What a preview of a move found in one bounded look (see
/// [`Client::preview_move`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MovePreview {
    /// Visible messages the move would take in the part looked at.
    pub matched: u64,
    /// The sequence number to go on from when the look stopped before
    /// the end of the queue (10 000 entries a look); `None`: it reached it.
    pub next: Option<u64>,
    /// The first of them (at most 20), with their failed attempts.
    pub messages: Vec<Message>,
}

/// What an update of a leased message answered (see
/// [`Client::update_message`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MessageUpdate {
    /// The renewed lease's receipt (the old one is stale); `None` when
    /// the update released the message (a timeout of 0).
    pub receipt: Option<Receipt>,
    /// When the message is visible next (ms since the epoch).
    pub visible_at_ms: u64,
}

/// What a reload put in place on the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reloaded {
    /// Which reload since the server started (from 1).
    pub generation: u64,
    /// Tokens configured now.
    pub tokens: u32,
    /// Whether TLS is on.
    pub tls: bool,
}

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server answered with an error.
    #[error("{code}: {message}")]
    Server {
        /// The protocol's code.
        code: ErrorCode,
        /// The server's line.
        message: String,
    },
    /// The connection could not be opened.
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        /// Where.
        addr: String,
        /// Why.
        source: io::Error,
    },
    /// TLS could not be set up: a file, a name, or the handshake.
    #[error("TLS: {0}")]
    Tls(String),
    /// The connection broke with this request unanswered; it was not sent
    /// again.
    #[error("connection lost before the answer: {0}")]
    ConnectionLost(io::Error),
    /// No answer within the request timeout; the connection is dropped.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// The server sent bytes that are not a valid answer.
    #[error("protocol error: {0}")]
    Protocol(#[from] ProtoError),
    /// One entry of a batch failed (from [`AllOk::all_ok`]).
    #[error("entry {index}: {code}: {message}")]
    Entry {
        /// Its place in the batch, from 0.
        index: usize,
        /// The protocol's code.
        code: ErrorCode,
        /// The server's line.
        message: String,
    },
    /// An answer of the wrong shape for the request.
    #[error("unexpected answer to {op:?}: {answer}")]
    Unexpected {
        /// The request's opcode.
        op: Opcode,
        /// What came instead.
        answer: String,
    },
}

impl ClientError {
    /// The protocol error code, for a server error.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            ClientError::Server { code, .. } | ClientError::Entry { code, .. } => Some(*code),
            _ => None,
        }
    }
}

/// How to connect.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// `host:port`.
    pub addr: String,
    /// A token to present after connecting.
    pub token: Option<String>,
    /// Connection timeout (the TLS handshake included).
    pub connect_timeout: Duration,
    /// How long a call waits for its answer beyond its own long-poll wait.
    pub request_timeout: Duration,
    /// Speak TLS (`None`: clear text).
    pub tls: Option<TlsOptions>,
    /// On a cluster (docs/cluster.md): a request answered `not_leader`
    /// naming the leader is sent again there, the connection moved to it
    /// (as [`Hops`] says). Nothing was done by the
    /// node that refused it, so nothing is done twice.
    pub follow_leader: bool,
    /// Every node of a cluster the client may talk to (`host:port` each;
    /// empty: only `addr`). When the node it talks to cannot be reached
    /// at a (re)connect, the others are tried in turn, and the first that
    /// answers is where it talks from then on (it follows `not_leader`
    /// from there). [`ClientOptions::new`] reads them from an address
    /// list, `host:port,host:port,...`.
    pub nodes: Vec<String>,
}

/// How many times one request follows `not_leader` to another node at
/// once; past that it follows after a pause ([`Hops`]).
pub const LEADER_HOPS: usize = 3;

/// How long one request follows `not_leader` answers at most.
pub const LEADER_WAIT: Duration = Duration::from_secs(10);

/// The hops of one request that follows `not_leader` answers: the first
/// [`LEADER_HOPS`] at once; then, for a moment while a leadership moves
/// two nodes may name each other (the old leader its successor, the
/// successor, not elected yet, the old leader), each after a pause — 10
/// ms, doubling up to 200 ms — for [`LEADER_WAIT`] at most.
#[derive(Debug)]
pub struct Hops {
    made: usize,
    pause: Duration,
    wait: Duration,
    until: Option<std::time::Instant>,
}

impl Default for Hops {
    fn default() -> Hops {
        Hops::within(LEADER_WAIT)
    }
}

impl Hops {
    /// Hops that end `wait` after the first pause.
    fn within(wait: Duration) -> Hops {
        Hops {
            made: 0,
            pause: Duration::from_millis(10),
            wait,
            until: None,
        }
    }
}

impl Iterator for Hops {
    type Item = Duration;

    /// One more hop: the pause before the request is sent again, or
    /// `None` once they are spent.
    fn next(&mut self) -> Option<Duration> {
        self.made += 1;
        if self.made <= LEADER_HOPS {
            return Some(Duration::ZERO);
        }
        let now = std::time::Instant::now();
        if now >= *self.until.get_or_insert(now + self.wait) {
            return None;
        }
        let pause = self.pause;
        self.pause = (pause * 2).min(Duration::from_millis(200));
        Some(pause)
    }
}

/// The leader's client address a `not_leader` message names (`... leader
/// <id> at <host:port>`).
pub fn leader_in(message: &str) -> Option<&str> {
    let at = message.rfind(" at ")?;
    let addr = message[at + 4..].split_whitespace().next()?;
    (message[..at].contains("leader") && addr.contains(':')).then_some(addr)
}

impl ClientOptions {
    /// Defaults: no token, 5 s to connect, 30 s per answer. `addr` is
    /// `host:port`, `fila://host:port` (the same), or `filas://host:port`
    /// (TLS, the certificate checked against the CA of
    /// [`ClientOptions::tls`], which must then be set).
    ///
    /// A list of a cluster's nodes, `host:port,host:port,...` (after the
    /// scheme), talks to the first and falls back on the others
    /// ([`ClientOptions::nodes`]).
    pub fn new(addr: impl Into<String>) -> ClientOptions {
        let addr: String = addr.into();
        let (addr, tls) = if let Some(rest) = addr.strip_prefix("filas://") {
            (rest.to_owned(), Some(TlsOptions::default()))
        } else if let Some(rest) = addr.strip_prefix("fila://") {
            (rest.to_owned(), None)
        } else {
            (addr, None)
        };
        let mut nodes: Vec<String> = addr
            .split(',')
            .map(|a| a.trim().trim_end_matches('/').to_owned())
            .filter(|a| !a.is_empty())
            .collect();
        let first = nodes.first().cloned().unwrap_or_default();
        if nodes.len() < 2 {
            nodes.clear();
        }
        ClientOptions {
            addr: first,
            token: None,
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(30),
            tls,
            follow_leader: true,
            nodes,
        }
    }

    /// The addresses to try at a (re)connect: `addr` first, then the other
    /// nodes in their order.
    pub(crate) fn candidates(&self) -> Vec<String> {
        let mut out = vec![self.addr.clone()];
        out.extend(self.nodes.iter().filter(|n| **n != self.addr).cloned());
        out
    }

    /// With a token.
    pub fn token(mut self, token: impl Into<String>) -> ClientOptions {
        self.token = Some(token.into());
        self
    }

    /// Over TLS.
    pub fn tls(mut self, tls: TlsOptions) -> ClientOptions {
        self.tls = Some(tls);
        self
    }
}

type Result<T> = std::result::Result<T, ClientError>;

/// One entry of a batch answer, with the server's error as a
/// [`ClientError`].
pub type EntryResult<T> = Result<T>;

/// A batch answer as one `Result`: every entry's value, or the first failed
/// entry as [`ClientError::Entry`] (its index and the server's error).
pub trait AllOk<T> {
    /// Every value, or the first failure.
    fn all_ok(self) -> Result<Vec<T>>;
}

impl<T> AllOk<T> for Vec<EntryResult<T>> {
    fn all_ok(self) -> Result<Vec<T>> {
        let mut out = Vec::with_capacity(self.len());
        for (index, e) in self.into_iter().enumerate() {
            out.push(e.map_err(|e| match e {
                ClientError::Server { code, message } => ClientError::Entry {
                    index,
                    code,
                    message,
                },
                other => other,
            })?);
        }
        Ok(out)
    }
}

/// The error a server sends with request id 0 when it cannot read a frame's
/// id: it refuses the stream and closes it.
fn refused(r: Response) -> ClientError {
    match r {
        Response::Error(e) => ClientError::Server {
            code: e.code,
            message: e.message,
        },
        other => ClientError::Unexpected {
            op: Opcode::Hello,
            answer: format!("{other:?}"),
        },
    }
}

/// Put entries of `payloads`, in order, in message group `group`.
fn grouped(group: &str, payloads: &[bytes::Bytes]) -> Vec<PutEntry> {
    payloads
        .iter()
        .map(|p| PutEntry {
            payload: p.clone(),
            group: Some(group.to_owned()),
            ..PutEntry::default()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{leader_in, ClientOptions, Hops, LEADER_HOPS};

    #[test]
    fn an_address_list_names_the_nodes_to_fall_back_on() {
        let o = ClientOptions::new("filas://a:1, b:2,c:3/");
        assert_eq!(o.addr, "a:1");
        assert_eq!(o.nodes, ["a:1", "b:2", "c:3"]);
        assert!(o.tls.is_some());
        let mut o = o;
        o.addr = "b:2".into();
        assert_eq!(o.candidates(), ["b:2", "a:1", "c:3"]);
        let one = ClientOptions::new("fila://x:7700/");
        assert_eq!(one.addr, "x:7700");
        assert!(one.nodes.is_empty());
        assert_eq!(one.candidates(), ["x:7700"]);
    }

    #[test]
    fn hops_follow_at_once_then_after_growing_pauses_until_the_wait_ends() {
        let ms = Duration::from_millis;
        let pauses: Vec<Duration> = Hops::default().take(10).collect();
        assert_eq!(
            pauses,
            [0, 0, 0, 10, 20, 40, 80, 160, 200, 200].map(ms),
            "three at once, then doubling up to 200 ms"
        );
        let spent: Vec<Duration> = Hops::within(Duration::ZERO).collect();
        assert_eq!(spent, [Duration::ZERO; LEADER_HOPS], "no pause left");
    }

    #[test]
    fn a_not_leader_message_names_the_leaders_address() {
        let m = "not_leader: this node does not lead the partition; leader 2 at 127.0.0.1:7720";
        assert_eq!(leader_in(m), Some("127.0.0.1:7720"));
        let unknown = "not_leader: this node does not lead the partition; the leader is not known yet (try another node)";
        assert_eq!(leader_in(unknown), None);
        assert_eq!(leader_in("queue_not_found: no queue at all"), None);
        assert_eq!(leader_in("leader 1 at nowhere"), None);
    }
}
