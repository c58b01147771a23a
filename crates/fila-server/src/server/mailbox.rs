//! How the loops (and the log writer and the metrics endpoint) reach one
//! another: one bounded mailbox per loop, of one closed message type.
//!
//! Every message a loop receives is a [`Msg`] in its mailbox, a bounded
//! lock-free `ArrayQueue` of [`MAILBOX_CAPACITY`]: requests for the shards
//! it owns, answers for its connections (late ones of parked receives
//! too), dead letters in transit, connections accepted or moved to it,
//! pauses, snapshot pieces and scrapes asked by other threads. The loop
//! takes at most [`MESSAGES_PER_TURN`] a turn, then gives its own
//! connections their turns (the shape of iggy's shard pump).
//!
//! A loop sends through its [`Post`]: messages gathered during a turn,
//! kept in order per destination, pushed at the end of the turn, and each
//! destination woken once — and only when it is about to block (its
//! [`Doorbell`]). A full mailbox refuses a push: what did not fit stays in
//! the post, in order, and is pushed again next turn, so nothing is
//! lost and nothing overtakes what was sent before it from the same loop
//! (a parked receive's late answer never overtakes the news that it
//! parked). Other threads push with a deadline ([`Loops::push_within`]).
//!
//! [`Loops`] is the one handle to every loop: its mailbox, doorbell and
//! waker, and the few flags other threads read.

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;
use fila_core::doorbell::Doorbell;
use fila_core::sync::Bounded;
use fila_core::Transit;
use mio::net::TcpStream;
use mio::Waker;

use super::front::Conn;
use super::host::{Done, ListJob, Route, RunJob};
use super::view::{ExportAsk, Pause, ScrapeAsk};

/// Messages one loop's mailbox holds; a loop with more for it keeps them
/// (in order) and tries again next turn.
pub const MAILBOX_CAPACITY: usize = 4_096;

/// Messages a loop takes from its mailbox in one turn: what other loops
/// (and threads) sent waits at most this many behind one another before
/// this loop's own connections get their turns again.
pub const MESSAGES_PER_TURN: usize = 256;

/// Everything a loop is sent.
pub(in crate::server) enum Msg {
    /// A connection accepted for this loop.
    Accepted(TcpStream, SocketAddr),
    /// A connection moved here from another loop (whose shard it uses).
    Moved(Box<Conn>),
    /// Close your oldest connection that has not authenticated: the server
    /// is at max_connections and a new one was let in in its place.
    EvictUnauthenticated,
    /// (To the accepting loop.) A connection from this address failed to
    /// authenticate.
    AuthFailed(IpAddr),
    /// A request for a shard this loop owns.
    Run(RunJob),
    /// A list of queues visiting this loop's shards.
    List(Box<ListJob>),
    /// A dead letter for a shard this loop owns.
    Transit(Transit),
    /// Cancel a parked receive of a shard owned here; answer `Cancelled`
    /// to `reply` if it was still parked.
    Cancel {
        wait: fila_core::WaitId,
        reply: Option<Route>,
    },
    /// Leases of an answer its connection closed before it could be
    /// written: end them (visible again at once).
    Abandon {
        shard: usize,
        receipts: Vec<fila_core::Receipt>,
    },
    /// What became of a request of one of this loop's connections.
    Done { route: Route, done: Done },
    /// (A cluster node.) An entry of a partition this node leads
    /// committed: answers held for one may go.
    #[cfg_attr(loom, allow(dead_code))]
    Committed,
    /// Stop until let go: a snapshot begins.
    Pause(Arc<Pause>),
    /// The log writer asks for a piece of a shard for a snapshot.
    Export(ExportAsk),
    /// A metrics scrape's question.
    Scrape(ScrapeAsk),
}

/// What other threads see of one loop.
pub(in crate::server) struct LoopShared {
    mailbox: Bounded<Msg>,
    /// Set while the loop is about to block in poll: only then is it woken
    /// (an eventfd write) after a push.
    doorbell: CachePadded<Doorbell>,
    waker: Wake,
    /// Nothing of this loop is in progress while the server stops: the
    /// loops stop together, since each owns shards the others need.
    pub(in crate::server) drained: AtomicBool,
    /// The loop holds answers or connections for the log and wants a
    /// wake-up when a batch is durable.
    pub(in crate::server) waiting_for_log: AtomicBool,
    /// With tokens: its connections not yet authenticated.
    pub(in crate::server) unauthenticated: AtomicU64,
}

/// How an endpoint is woken: an event loop's poll, or a task of another
/// front end's runtime (the SQS gateway's).
pub(in crate::server) enum Wake {
    Poll(Arc<Waker>),
    Task(Arc<tokio::sync::Notify>),
}

impl Wake {
    fn wake(&self) {
        match self {
            Wake::Poll(w) => {
                let _ = w.wake();
            }
            Wake::Task(n) => n.notify_one(),
        }
    }
}

/// The one handle to every loop, and to the gateways (front ends that own
/// no shard, as the SQS listener) that send them requests: each has a
/// mailbox, numbered after the loops.
#[derive(Clone)]
pub(in crate::server) struct Loops {
    all: Arc<[LoopShared]>,
    /// The event loops (they own the shards): the first `owners`.
    owners: usize,
}

impl Loops {
    /// One event loop for each of `wakers`, then one gateway for each of
    /// `gateways`.
    pub(in crate::server) fn new(
        wakers: Vec<Arc<Waker>>,
        gateways: Vec<Arc<tokio::sync::Notify>>,
    ) -> Loops {
        let owners = wakers.len();
        let wakes = wakers
            .into_iter()
            .map(Wake::Poll)
            .chain(gateways.into_iter().map(Wake::Task));
        Loops {
            all: wakes
                .map(|waker| LoopShared {
                    mailbox: Bounded::new(MAILBOX_CAPACITY),
                    doorbell: CachePadded::new(Doorbell::new()),
                    waker,
                    drained: AtomicBool::new(false),
                    waiting_for_log: AtomicBool::new(false),
                    unauthenticated: AtomicU64::new(0),
                })
                .collect(),
            owners,
        }
    }

    /// How many event loops there are (shard `i` is loop `i mod owners`).
    pub(in crate::server) fn owners(&self) -> usize {
        self.owners
    }

    /// Every endpoint: the loops, then the gateways.
    pub(in crate::server) fn endpoints(&self) -> usize {
        self.all.len()
    }

    pub(in crate::server) fn get(&self, index: usize) -> &LoopShared {
        &self.all[index]
    }

    /// Every endpoint: the loops, then the gateways (the loops stop
    /// together with the gateways, which have requests at their shards).
    pub(in crate::server) fn iter(&self) -> impl Iterator<Item = &LoopShared> {
        self.all.iter()
    }

    /// Wakes endpoint `index` whatever it is doing (a stop, a durable
    /// batch).
    pub(in crate::server) fn wake(&self, index: usize) {
        self.all[index].waker.wake();
    }

    /// Pushes `msg` to loop `dest` from a thread that is not a loop,
    /// retrying while its mailbox is full until `deadline`; wakes it.
    /// `false` when it stayed full.
    pub(in crate::server) fn push_within(
        &self,
        dest: usize,
        mut msg: Msg,
        deadline: Instant,
    ) -> bool {
        let l = &self.all[dest];
        loop {
            match l.mailbox.push(msg) {
                Ok(()) => {
                    l.waker.wake();
                    return true;
                }
                Err(back) if Instant::now() < deadline => {
                    msg = back;
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(_) => return false,
            }
        }
    }
}

impl LoopShared {
    /// Takes the next message sent to this loop.
    pub(in crate::server) fn take(&self) -> Option<Msg> {
        self.mailbox.pop()
    }

    /// Whether anything was sent to this loop and not taken yet.
    pub(in crate::server) fn has_mail(&self) -> bool {
        !self.mailbox.is_empty()
    }

    /// This loop is about to block: see [`Doorbell::about_to_sleep`].
    pub(in crate::server) fn about_to_sleep(&self) {
        self.doorbell.about_to_sleep();
    }

    /// This loop is awake.
    pub(in crate::server) fn awake(&self) {
        self.doorbell.awake();
    }
}

/// A loop's messages to other loops, gathered during a turn.
pub(in crate::server) struct Post {
    /// The loop sending.
    index: usize,
    loops: Loops,
    /// By destination, in the order sent.
    pending: Vec<VecDeque<Msg>>,
    /// Destinations pushed to this turn, to wake.
    wake: Vec<bool>,
}

impl Post {
    /// Loop `index`'s post.
    pub(in crate::server) fn new(index: usize, loops: Loops) -> Post {
        let n = loops.endpoints();
        Post {
            index,
            loops,
            pending: (0..n).map(|_| VecDeque::new()).collect(),
            wake: vec![false; n],
        }
    }

    /// Sends `msg` to loop `dest` (another loop) at the end of this turn.
    pub(in crate::server) fn send(&mut self, dest: usize, msg: Msg) {
        debug_assert_ne!(dest, self.index, "a loop does not post to itself");
        self.pending[dest].push_back(msg);
    }

    /// Whether anything waits to be pushed.
    pub(in crate::server) fn is_empty(&self) -> bool {
        self.pending.iter().all(|p| p.is_empty())
    }

    /// Pushes what this turn sent, in order, each destination woken once
    /// when it is about to block; answers whether some is left (a mailbox
    /// was full: it goes next turn).
    pub(in crate::server) fn flush(&mut self) -> bool {
        let loops = &self.loops;
        let mut left = false;
        for (dest, pending) in self.pending.iter_mut().enumerate() {
            let l = loops.get(dest);
            while let Some(msg) = pending.pop_front() {
                match l.mailbox.push(msg) {
                    Ok(()) => self.wake[dest] = true,
                    Err(msg) => {
                        pending.push_front(msg);
                        left = true;
                        break;
                    }
                }
            }
        }
        for (dest, wake) in self.wake.iter_mut().enumerate() {
            // After the push: the doorbell (loom-checked) says whether that
            // loop may be blocking without having seen it.
            if std::mem::take(wake) && loops.get(dest).doorbell.must_wake() {
                loops.wake(dest);
            }
        }
        left
    }

    /// Messages left for loops that stopped: dropped at the end (each
    /// owner of a connection or request in them is stopping too).
    pub(in crate::server) fn clear(&mut self) {
        for p in &mut self.pending {
            p.clear();
        }
    }
}
