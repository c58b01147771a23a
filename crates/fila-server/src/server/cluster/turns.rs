//! What a request holds on the cluster node while it runs and while it
//! waits: a turn among the [`super::RUNNING_MAX`] requests running on the
//! replica (given back while it waits), and — for a receive waiting for
//! messages — a place among the server's `max_parked` waiting receives.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;

use crate::dispatch::Answer;
use crate::server::Shared;

/// A request's turn on the replica: held while it runs, given back while
/// it waits (a receive between its looks, a gateway's request while no
/// leader is known), so that waiting requests never hold up the others.
pub(super) struct Turn {
    pub(super) permit: Option<tokio::sync::OwnedSemaphorePermit>,
    pub(super) turns: Arc<Semaphore>,
}

impl Turn {
    /// Sleeps `d` without holding a turn, then waits for one.
    pub(super) async fn sleep(&mut self, d: Duration) {
        self.permit = None;
        tokio::time::sleep(d).await;
        self.permit = self.turns.clone().acquire_owned().await.ok();
    }

    /// Sleeps `d`, or until `woken` wakes it, without holding a turn;
    /// then waits for one. `seen` is what [`Woken::seen`] said before the
    /// look this sleep follows: when a request woke the partition's
    /// receives since, it does not sleep at all.
    pub(super) async fn sleep_or(&mut self, d: Duration, woken: &Woken, seen: u64) {
        self.permit = None;
        let notified = woken.notify.notified();
        tokio::pin!(notified);
        // Listening first, then the count: a wake after this look is
        // either counted or heard.
        notified.as_mut().enable();
        if woken.seen() == seen {
            let _ = tokio::time::timeout(d, notified).await;
        }
        self.permit = self.turns.clone().acquire_owned().await.ok();
    }
}

/// What wakes the receives of one queue waiting on its partition's leader
/// here: a count of the requests that may have made its messages visible
/// (a receive that looked before one of them looks again at once), and a
/// `Notify` for those asleep.
#[derive(Default)]
pub(super) struct Woken {
    count: std::sync::atomic::AtomicU64,
    notify: tokio::sync::Notify,
}

impl Woken {
    /// The count, read before a look.
    pub(super) fn seen(&self) -> u64 {
        self.count.load(Ordering::SeqCst)
    }

    /// `n` messages were put: as many receives asleep wake (one is kept
    /// for a receive about to sleep), and every receive that looked before
    /// looks again.
    fn wake(&self, n: usize) {
        self.count.fetch_add(1, Ordering::SeqCst);
        for _ in 0..n {
            self.notify.notify_one();
        }
    }

    /// Every receive waiting looks again.
    fn wake_all(&self) {
        self.count.fetch_add(1, Ordering::SeqCst);
        self.notify.notify_waiters();
    }
}

/// The receives waiting on one partition's leader here, by queue: what a
/// request that may have made messages visible wakes. Receives are woken by
/// such requests and by the engine's timers ([`super::run`]'s `nap`), never
/// looked at on a fixed period.
#[derive(Default)]
pub(in crate::server) struct Waiters {
    /// Receives listening (any queue): while none do, a put does not look
    /// its queue up.
    listening: std::sync::atomic::AtomicUsize,
    queues: dashmap::DashMap<String, Arc<Woken>>,
}

/// A receive listening for its queue's messages (from before its first
/// look until it is answered).
pub(super) struct Listening<'a> {
    waiters: &'a Waiters,
    queue: String,
    woken: Option<Arc<Woken>>,
}

impl Listening<'_> {
    /// What wakes it.
    pub(super) fn woken(&self) -> &Woken {
        self.woken.as_ref().expect("set until dropped")
    }
}

impl Drop for Listening<'_> {
    fn drop(&mut self) {
        self.woken = None;
        // Nobody else listening: the queue's entry goes (a receive that
        // starts listening takes the map's lock first, so it either shares
        // this entry or makes a new one).
        self.waiters
            .queues
            .remove_if(&self.queue, |_, w| Arc::strong_count(w) == 1);
        self.waiters.listening.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Waiters {
    /// A receive of `queue` listens, before its first look.
    pub(super) fn listen(&self, queue: &str) -> Listening<'_> {
        // Counted first: a put that finds none listening ran before this,
        // so the look that follows sees its messages.
        self.listening.fetch_add(1, Ordering::SeqCst);
        let woken = self.queues.entry(queue.to_owned()).or_default().clone();
        Listening {
            waiters: self,
            queue: queue.to_owned(),
            woken: Some(woken),
        }
    }

    /// `n` messages were put to `queue`.
    pub(super) fn put(&self, queue: &str, n: usize) {
        if self.listening.load(Ordering::SeqCst) == 0 {
            return;
        }
        if let Some(w) = self.queues.get(queue) {
            w.wake(n);
        }
    }

    /// A request may have made messages of `queue` visible.
    pub(super) fn changed(&self, queue: &str) {
        if self.listening.load(Ordering::SeqCst) == 0 {
            return;
        }
        if let Some(w) = self.queues.get(queue) {
            w.wake_all();
        }
    }

    /// A request may have made messages of any queue of the partition
    /// visible (one that moves messages between queues), or the
    /// partition's engine here was dropped (the receives find out who
    /// leads now): every receive waiting looks again.
    pub(super) fn wake_all(&self) {
        if self.listening.load(Ordering::SeqCst) == 0 {
            return;
        }
        for w in self.queues.iter() {
            w.wake_all();
        }
    }
}
/// A receive waiting on this node: counted against the server's
/// `max_parked`, as a parked receive is on a single node.
pub(super) struct Waiting<'a>(&'a Shared);

impl<'a> Waiting<'a> {
    /// Counts one more, or says which limit refuses it.
    pub(super) fn start(shared: &'a Shared, may_park: bool) -> Result<Waiting<'a>, Answer> {
        if let Some((limit, max)) = crate::server::host::park_limit(shared, may_park) {
            return Err(crate::server::host::park_refused(limit, max));
        }
        shared.metrics.parked.fetch_add(1, Ordering::Relaxed);
        Ok(Waiting(shared))
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.parked.fetch_sub(1, Ordering::AcqRel);
        self.0.metrics.parked.fetch_sub(1, Ordering::Relaxed);
    }
}
