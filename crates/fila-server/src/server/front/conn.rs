//! One connection: what state it is in, its buffers, the room its answers
//! may take, its parked receives.
//!
//! A connection's life is a small state machine ([`Phase`]); whether it
//! has authenticated is another ([`Auth`]). Both change only through the
//! methods here and in the front end, never from the other parts of a
//! loop, which name a connection by [`ConnRef`] (a slot and the
//! generation of the connection in it: a slot reused by a later connection
//! never takes an answer meant for the one before).

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::time::Instant;

use crate::auth::TokenId;
use crate::limits::{ANSWER_ROOM_MIN, SMALL_ANSWER_ROOM};
use crate::tls::Stream;
use bytes::{Buf, BytesMut};
use fila_core::WaitId;
use fila_proto as proto;

/// A connection of a loop: its slot and the generation of the connection
/// that holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(in crate::server) struct ConnRef {
    pub(in crate::server) slot: usize,
    pub(in crate::server) generation: u64,
}

/// Where a connection is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Phase {
    /// Reading requests and answering them.
    Open,
    /// Reading nothing more here: it moves to loop `to` once nothing of it
    /// is away (a parked receive keeps it where it is: back to `Open`).
    Moving { to: usize },
    /// Its client closed its side: what it sent is still answered, its
    /// parked receives were ended, and a late answer with messages is not
    /// written (what it leased goes back).
    Draining,
    /// Nothing more is read: it closes once its answers (and those of its
    /// requests away) are written. `peer_gone`: its client closed its side
    /// (as in `Draining`), rather than the server deciding to close it (a
    /// broken frame, too many failed auths).
    Closing { peer_gone: bool },
}

/// Whether a connection has authenticated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Auth {
    /// No tokens are configured.
    NotNeeded,
    /// Tokens are configured and it has not authenticated (counted in its
    /// loop's unauthenticated connections): only hello and auth are
    /// answered.
    Pending,
    /// Authenticated with this token.
    As(TokenId),
}

/// What a connection authenticated with, to find its token again after a
/// reload.
pub(super) enum Credential {
    /// A token's text, from an auth frame.
    Secret(Box<str>),
    /// The names of its verified client certificate.
    Certificate(Box<[String]>),
}

/// A parked receive of a connection.
pub(super) struct Parked {
    pub(super) wait: WaitId,
    pub(super) request_id: u64,
    /// Output room held for its answer.
    pub(super) reserved: usize,
    /// The fields its answer carries.
    pub(super) fields: proto::Fields,
}

pub(in crate::server) struct Conn {
    pub(super) stream: Stream,
    pub(super) peer: SocketAddr,
    pub(super) generation: u64,
    pub(super) phase: Phase,
    pub(super) auth: Auth,
    /// What it authenticated with, and the reload its token was found in
    /// (a later reload finds it again, or takes its grants away).
    pub(super) credential: Option<Credential>,
    pub(super) auth_generation: u64,
    pub(super) auth_failures: u32,
    /// The protocol version of its last request frame: its answers are
    /// written in it (docs/protocol.md, "Versions"); until one came, the
    /// oldest.
    pub(super) version: u8,
    pub(super) input: BytesMut,
    pub(super) output: BytesMut,
    /// Answers held until the log is durable up to their marks, in order.
    pub(super) held: BytesMut,
    /// The regions of `held`: bytes and mark.
    pub(super) holds: VecDeque<(usize, u64)>,
    /// Listed with the loop's log wait as holding answers.
    pub(super) listed_holding: bool,
    /// Listed with the loop's log wait as paused for the log's backlog.
    pub(super) listed_paused: bool,
    /// Parked receives by a number of this connection (request ids are the
    /// client's and may repeat).
    pub(super) parked: HashMap<u64, Parked>,
    /// (A cluster node.) Its receives parked in a partition's engine on
    /// the loop that keeps it, by their number: the partition and the
    /// wait, to cancel them there if it closes first.
    pub(super) part_parked: HashMap<u64, (usize, WaitId)>,
    pub(super) next_park: u64,
    /// Output room held for parked receives and for the answers of
    /// requests at other loops.
    pub(super) reserved: usize,
    /// Requests sent to shards' owners whose answers have not come back
    /// (at most [`crate::IN_FLIGHT_MAX`]).
    pub(super) in_flight: usize,
    /// Receives among them.
    pub(super) receives_out: usize,
    /// The loop its last requests all went to, and how many in a row
    /// (`usize::MAX`: none).
    pub(super) streak: (usize, u32),
    /// A create or update naming a dead-letter target is away (it visits
    /// the target's loop, then the queue's): later requests wait for it,
    /// so they never overtake it. (Its number, as a route's park number.)
    pub(super) barrier: Option<u64>,
    pub(super) opened: Instant,
    pub(super) last_active: Instant,
    /// Stopped reading until it has output room again (or for good after a
    /// fatal frame error).
    pub(super) read_paused: bool,
    /// Stopped reading until answers come back from other loops (at
    /// [`crate::IN_FLIGHT_MAX`], behind a barrier, or moving).
    pub(super) owners_paused: bool,
    /// In the loop's round-robin queue of connections with work left.
    pub(super) queued: bool,
    pub(super) writable_interest: bool,
    /// An SQS API connection's HTTP state (`None`: the binary protocol).
    pub(super) http: Option<Box<super::http::HttpConn>>,
}

impl Conn {
    pub(super) fn new(stream: Stream, peer: SocketAddr, generation: u64, auth: Auth) -> Conn {
        let now = Instant::now();
        Conn {
            stream,
            peer,
            generation,
            phase: Phase::Open,
            auth,
            credential: None,
            auth_generation: 0,
            auth_failures: 0,
            version: fila_proto::OLDEST_VERSION,
            input: BytesMut::new(),
            output: BytesMut::new(),
            held: BytesMut::new(),
            holds: VecDeque::new(),
            listed_holding: false,
            listed_paused: false,
            parked: HashMap::new(),
            part_parked: HashMap::new(),
            next_park: 0,
            reserved: 0,
            in_flight: 0,
            receives_out: 0,
            streak: (usize::MAX, 0),
            barrier: None,
            opened: now,
            last_active: now,
            read_paused: false,
            owners_paused: false,
            queued: false,
            writable_interest: false,
            http: None,
        }
    }

    /// Its client closed its side (read-closed, or a read of 0 bytes).
    pub(super) fn peer_gone(&self) -> bool {
        matches!(
            self.phase,
            Phase::Draining | Phase::Closing { peer_gone: true }
        )
    }

    /// Whether it closes once its answers are written.
    pub(super) fn closing(&self) -> bool {
        matches!(self.phase, Phase::Closing { .. })
    }

    /// It closes once its answers are written; `peer_gone`: because its
    /// client closed its side.
    pub(super) fn close_when_written(&mut self, peer_gone: bool) {
        let peer_gone = peer_gone || self.peer_gone();
        self.phase = Phase::Closing { peer_gone };
    }

    /// Whether it has not authenticated while tokens are configured.
    pub(super) fn unauthenticated(&self) -> bool {
        self.auth == Auth::Pending
    }

    /// The token it authenticated with.
    pub(super) fn token(&self) -> Option<TokenId> {
        match self.auth {
            Auth::As(t) => Some(t),
            _ => None,
        }
    }

    /// Counts `len` bytes just appended to `held`, held on `mark`.
    pub(super) fn held_on(&mut self, len: usize, mark: u64) {
        match self.holds.back_mut() {
            Some(last) if last.1 == mark => last.0 += len,
            _ => self.holds.push_back((len, mark)),
        }
    }

    /// Moves the held answers whose mark is durable to the output;
    /// answers whether any was.
    pub(super) fn release(&mut self, durable: u64) -> bool {
        let mut bytes = 0;
        while let Some(&(len, mark)) = self.holds.front() {
            if mark > durable {
                break;
            }
            self.holds.pop_front();
            bytes += len;
        }
        if bytes > 0 {
            self.output.extend_from_slice(&self.held[..bytes]);
            self.held.advance(bytes);
        }
        bytes > 0
    }

    /// Answer bytes buffered: to be written (here and in TLS's hands), and
    /// held for the log.
    pub(super) fn buffered(&self) -> usize {
        self.output.len() + self.stream.unsent() + self.held.len()
    }

    pub(super) fn room(&self, max_output: usize) -> usize {
        max_output.saturating_sub(self.buffered() + self.reserved)
    }

    /// The room the next frame's answer needs before it is handled (as far
    /// as its head is in): answers that carry messages need room for at
    /// least one largest message, the others far less.
    pub(super) fn room_needed(&self) -> usize {
        if self.http.is_some()
            || self
                .input
                .get(5)
                .is_none_or(|op| crate::ops::carries_messages(*op))
        {
            ANSWER_ROOM_MIN
        } else {
            SMALL_ANSWER_ROOM
        }
    }

    /// Whether anything of it is in progress: answers to write, requests
    /// away, receives parked.
    pub(super) fn busy(&self) -> bool {
        self.buffered() > 0
            || self.in_flight > 0
            || !self.parked.is_empty()
            || self.http.as_ref().is_some_and(|h| h.answering())
    }
}
