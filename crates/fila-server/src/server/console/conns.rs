//! The console's open connections: at most [`super::CONNECTIONS_MAX`].
//! When they are all open, a newcomer takes the place of the one that has
//! been idle the longest (between requests, or still sending a request's
//! head — what a client that holds connections without using them does);
//! only when every one is in the middle of a request is it refused. So
//! connections held open cannot keep the console from its users.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Instant;

use tokio::sync::Notify;

/// One open connection.
pub(super) struct Conn {
    id: u64,
    /// Since when it has had no request in progress (`None` while one is).
    idle_since: Cell<Option<Instant>>,
    /// Told when it must close (a newcomer took its place).
    pub(super) close: Notify,
}

impl Conn {
    /// A request began.
    pub(super) fn busy(&self) {
        self.idle_since.set(None);
    }

    /// A request was answered.
    pub(super) fn idle(&self, now: Instant) {
        self.idle_since.set(Some(now));
    }
}

/// Every open connection.
#[derive(Default)]
pub(super) struct Conns {
    open: RefCell<Vec<Rc<Conn>>>,
    next: Cell<u64>,
}

impl Conns {
    /// Takes a newcomer in, making room when `max` are open by closing the
    /// one idle the longest; `None` when every one is busy.
    pub(super) fn admit(&self, max: usize, now: Instant) -> Option<Rc<Conn>> {
        let mut open = self.open.borrow_mut();
        if open.len() >= max {
            let victim = open
                .iter()
                .enumerate()
                .filter_map(|(i, c)| c.idle_since.get().map(|t| (t, i)))
                .min()?
                .1;
            open.swap_remove(victim).close.notify_one();
        }
        let id = self.next.get();
        self.next.set(id + 1);
        let conn = Rc::new(Conn {
            id,
            idle_since: Cell::new(Some(now)),
            close: Notify::new(),
        });
        open.push(conn.clone());
        Some(conn)
    }

    /// A connection ended.
    pub(super) fn gone(&self, conn: &Conn) {
        self.open.borrow_mut().retain(|c| c.id != conn.id);
    }

    /// Connections open now.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.open.borrow().len()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_newcomer_takes_the_place_of_the_longest_idle_and_busy_ones_stay() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let conns = Conns::default();
        let a = conns.admit(3, at(0)).unwrap();
        let b = conns.admit(3, at(1)).unwrap();
        let c = conns.admit(3, at(2)).unwrap();
        a.busy();
        // Full: b is the longest idle (a is busy).
        let d = conns.admit(3, at(3)).unwrap();
        assert_eq!(conns.len(), 3);
        let open: Vec<u64> = conns.open.borrow().iter().map(|c| c.id).collect();
        assert!(!open.contains(&b.id) && open.contains(&a.id) && open.contains(&c.id));
        // Every one busy: refused.
        c.busy();
        d.busy();
        assert!(conns.admit(3, at(4)).is_none());
        a.idle(at(5));
        assert!(conns.admit(3, at(6)).is_some(), "a made room");
        conns.gone(&c);
        assert_eq!(conns.len(), 2);
    }
}
