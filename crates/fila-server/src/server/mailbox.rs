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
//! parked). What waits in a post is bounded: past [`POST_BACKLOG_MAX`]
//! messages a loop reads no more requests from its connections (it still
//! takes its mailbox, so what it owes others keeps flowing) until the
//! backlog went out; a gateway refuses new calls meanwhile (503).
//!
//! Tasks of a tokio runtime (a cluster node's) push with
//! [`Loops::push`]: while the mailbox is full the task waits, without
//! blocking its thread, until the loop has taken some of it, and then
//! pushes: nothing is dropped, however long the loop is busy. Threads that
//! are no loop and no task (the log writer, the metrics endpoint) push with
//! a deadline ([`Loops::push_within`]) and handle its expiry themselves.
//! A cluster's word that an entry committed is no message at all: a flag
//! and a wake-up ([`Loops::tell_committed`]), which never fill.
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

/// Messages a post holds for full mailboxes before its loop stops reading
/// requests (and its gateway refuses new calls) until they went out.
pub const POST_BACKLOG_MAX: usize = MAILBOX_CAPACITY;

/// Everything a loop is sent.
pub(in crate::server) enum Msg {
    /// A connection accepted for this loop, and what it speaks.
    Accepted(TcpStream, SocketAddr, super::front::Door),
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
    /// (A cluster node.) A put, receive or delete for a partition whose
    /// engine this loop keeps (`cluster/fast.rs`).
    #[cfg(not(loom))]
    Lead(RunJob),
    /// (A cluster node.) Work of the node's tasks for the engine of
    /// partition `part`, which this loop keeps.
    #[cfg(not(loom))]
    Engine { part: usize, job: fila_cluster::Job },
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
    /// (A cluster node.) Cancel a receive parked in the engine of
    /// partition `part`, kept here, if it is still the receive of
    /// connection `conn` of loop `lp`; answer it with no messages when
    /// `answer` (`ShardHost::cancel_part`).
    #[cfg(not(loom))]
    CancelPart {
        part: usize,
        wait: fila_core::WaitId,
        lp: usize,
        conn: super::front::ConnRef,
        answer: bool,
    },
    /// Leases of an answer its connection closed before it could be
    /// written: end them (visible again at once).
    Abandon {
        shard: usize,
        receipts: Vec<fila_core::Receipt>,
    },
    /// What became of a request of one of this loop's connections.
    Done { route: Route, done: Done },
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
    /// (A cluster node.) An entry of a partition this node leads
    /// committed since the loop last looked: answers it holds may go.
    committed: fila_core::sync::AtomicBool,
    /// A task waits for room in the mailbox ([`Loops::push`]).
    room_wanted: AtomicBool,
    /// Told when the loop took messages while a task waited for room.
    room: tokio::sync::Notify,
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
                    committed: fila_core::sync::AtomicBool::new(false),
                    room_wanted: AtomicBool::new(false),
                    room: tokio::sync::Notify::new(),
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

    /// Pushes `msg` to endpoint `dest` from a task: while its mailbox is
    /// full the task waits (its thread runs other tasks) until the loop
    /// took some, then tries again; wakes it. Never gives up: nothing sent
    /// this way is dropped.
    pub(in crate::server) async fn push(&self, dest: usize, mut msg: Msg) {
        let l = &self.all[dest];
        loop {
            // Registered before the push is tried: a loop that takes
            // messages after a failed push wakes this task.
            let room = l.room.notified();
            let mut room = std::pin::pin!(room);
            room.as_mut().enable();
            l.room_wanted
                .store(true, std::sync::atomic::Ordering::SeqCst);
            match l.mailbox.push(msg) {
                Ok(()) => {
                    l.waker.wake();
                    return;
                }
                Err(back) => {
                    msg = back;
                    // It is full: the loop is woken to take from it.
                    l.waker.wake();
                    room.await;
                }
            }
        }
    }

    /// Tells loop `dest` that an entry committed (a cluster node's held
    /// answers): a flag and a wake-up, which never fill or block.
    pub(in crate::server) fn tell_committed(&self, dest: usize) {
        let l = &self.all[dest];
        l.committed.store(true, fila_core::sync::Ordering::SeqCst);
        l.waker.wake();
    }

    /// Pushes `msg` to loop `dest` from a thread that is not a loop,
    /// retrying while its mailbox is full until `deadline`; wakes it.
    /// `false` when it stayed full. Not for tasks ([`Loops::push`]).
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

    /// The loop took messages from its mailbox: tasks waiting for room are
    /// woken ([`Loops::push`]).
    pub(in crate::server) fn took(&self) {
        if self.room_wanted.load(std::sync::atomic::Ordering::SeqCst)
            && self
                .room_wanted
                .swap(false, std::sync::atomic::Ordering::SeqCst)
        {
            self.room.notify_waiters();
        }
    }

    /// Whether an entry committed since the last look (and forgets it).
    pub(in crate::server) fn take_committed(&self) -> bool {
        self.committed.load(fila_core::sync::Ordering::SeqCst)
            && self
                .committed
                .swap(false, fila_core::sync::Ordering::SeqCst)
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
    /// Messages in `pending`, all destinations.
    backlog: usize,
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
            backlog: 0,
            wake: vec![false; n],
        }
    }

    /// Sends `msg` to loop `dest` (another loop) at the end of this turn.
    pub(in crate::server) fn send(&mut self, dest: usize, msg: Msg) {
        debug_assert_ne!(dest, self.index, "a loop does not post to itself");
        self.pending[dest].push_back(msg);
        self.backlog += 1;
    }

    /// Whether it holds [`POST_BACKLOG_MAX`] messages or more: its loop
    /// reads no more requests (a gateway takes no more calls) until they
    /// went out.
    pub(in crate::server) fn is_backlogged(&self) -> bool {
        self.backlog >= POST_BACKLOG_MAX
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
                    Ok(()) => {
                        self.wake[dest] = true;
                        self.backlog -= 1;
                    }
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
        self.backlog = 0;
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// Two endpoints woken as tasks (no poll needed).
    fn loops() -> Loops {
        Loops::new(
            Vec::new(),
            vec![
                Arc::new(tokio::sync::Notify::new()),
                Arc::new(tokio::sync::Notify::new()),
            ],
        )
    }

    fn msg(n: u32) -> Msg {
        Msg::AuthFailed(IpAddr::from(n.to_be_bytes()))
    }

    fn number(m: Msg) -> u32 {
        match m {
            Msg::AuthFailed(IpAddr::V4(ip)) => u32::from_be_bytes(ip.octets()),
            _ => panic!("not a test message"),
        }
    }

    fn fill(loops: &Loops, dest: usize) {
        for n in 0..MAILBOX_CAPACITY as u32 {
            assert!(loops.get(dest).mailbox.push(msg(n)).is_ok());
        }
        assert!(loops.get(dest).mailbox.push(msg(u32::MAX)).is_err(), "full");
    }

    /// A task pushing to a full mailbox waits without holding its thread
    /// (another task of the same one-thread runtime runs meanwhile), for
    /// as long as it takes — a minute of the runtime's clock here, where
    /// the push of threads gave up after 5 s and dropped the message —
    /// and pushes once the loop took some.
    #[test]
    fn a_task_waits_for_room_without_blocking_its_thread_and_drops_nothing() {
        let loops = loops();
        fill(&loops, 0);
        // On a thread of its own: a push that held its thread would hang
        // the runtime, and the test fails at its deadline instead.
        let (done, finished) = std::sync::mpsc::channel();
        let on_runtime = loops.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .start_paused(true)
                .build()
                .unwrap();
            rt.block_on(run_pushes(on_runtime));
            let _ = done.send(());
        });
        finished
            .recv_timeout(Duration::from_secs(30))
            .expect("the pushes ran to their end (not: a failed check there, or a push that held its thread)");
        let mut last = None;
        while let Some(m) = loops.get(0).take() {
            last = Some(number(m));
        }
        assert_eq!(last, Some(7_777), "delivered last, nothing dropped");
    }

    async fn run_pushes(loops: Loops) {
        let sender = loops.clone();
        let pushed = tokio::spawn(async move { sender.push(0, msg(7_777)).await });
        let other = tokio::spawn(async { 42 });
        // The pushing task is parked, not spinning the thread: the
        // other task runs, and a minute passes.
        assert_eq!(other.await.unwrap(), 42);
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(!pushed.is_finished());
        // The loop takes one message: the push goes in after the rest.
        assert_eq!(number(loops.get(0).take().unwrap()), 0);
        loops.get(0).took();
        pushed.await.unwrap();
    }

    /// A loop's post keeps what a full mailbox refused for its next turns,
    /// in order, counts it, and says when it holds too much (the loop then
    /// reads no more requests) until it went out.
    #[test]
    fn a_post_keeps_what_did_not_fit_in_order_and_says_when_it_is_backlogged() {
        let loops = loops();
        fill(&loops, 1);
        let mut post = Post::new(0, loops.clone());
        for n in 0..POST_BACKLOG_MAX as u32 {
            assert!(!post.is_backlogged());
            post.send(1, msg(100_000 + n));
        }
        assert!(post.is_backlogged());
        assert!(post.flush(), "nothing fits: all of it is left");
        assert!(post.is_backlogged());
        // The loop takes its mailbox in turns; the post pushes what fits.
        let mut seen = Vec::new();
        for _ in 0..4 {
            for _ in 0..MAILBOX_CAPACITY {
                match loops.get(1).take() {
                    Some(m) => seen.push(number(m)),
                    None => break,
                }
            }
            post.flush();
        }
        while let Some(m) = loops.get(1).take() {
            seen.push(number(m));
        }
        assert!(!post.is_backlogged());
        assert!(!post.flush(), "everything went out");
        let want: Vec<u32> = (0..MAILBOX_CAPACITY as u32)
            .chain((0..POST_BACKLOG_MAX as u32).map(|n| 100_000 + n))
            .collect();
        assert_eq!(seen, want, "in order, nothing lost");
    }
}
