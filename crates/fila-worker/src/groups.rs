//! A host never runs two messages of one group at once.
//!
//! The server leases one message of a group at a time, but a lease can be
//! lost while its handler still runs here (a renewal that failed): the
//! group's next message may then come to this host before that handler
//! ends. `Held` keeps, per queue and group, whether one of the group runs
//! here and the messages of it fetched meanwhile, in the order they came:
//! each waits (its lease renewed like any other) until the one before it
//! ends.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use fila_client::Message;

/// The groups running on this host and the messages waiting behind them.
#[derive(Default)]
pub(crate) struct Held(Mutex<HashMap<(usize, String), VecDeque<Message>>>);

impl Held {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(usize, String), VecDeque<Message>>> {
        // Plain data: a panic elsewhere leaves nothing half-done in it.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Admits message `m` of binding `b`: an ungrouped one, or the first of
    /// its group here, is answered to run now; a later one of a running
    /// group waits behind it (`None`).
    pub(crate) fn admit(&self, b: usize, m: Message) -> Option<Message> {
        let Some(group) = m.group.clone() else {
            return Some(m);
        };
        let mut held = self.lock();
        match held.get_mut(&(b, group.clone())) {
            Some(waiting) => {
                waiting.push_back(m);
                None
            }
            None => {
                held.insert((b, group), VecDeque::new());
                Some(m)
            }
        }
    }

    /// A message of `group` (binding `b`) ended here: the next one waiting
    /// behind it, which now runs, or none (the group no longer runs here).
    pub(crate) fn next(&self, b: usize, group: &str) -> Option<Message> {
        let mut held = self.lock();
        let key = (b, group.to_owned());
        let next = held.get_mut(&key).and_then(VecDeque::pop_front);
        if next.is_none() {
            held.remove(&key);
        }
        next
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(id: u128, group: Option<&str>) -> Message {
        Message {
            id,
            seq: id as u64,
            payload: Default::default(),
            attributes: Vec::new(),
            channel: None,
            inserted_at_ms: 0,
            expires_at_ms: 0,
            next_visible_at_ms: 0,
            delivery_count: 1,
            state: 2,
            receipt: None,
            dead_letter: None,
            group: group.map(str::to_owned),
            priority: 1,
            attempts: Vec::new(),
        }
    }

    #[test]
    fn a_group_runs_one_message_at_a_time_in_the_order_they_came() {
        let held = Held::default();
        assert!(held.admit(0, msg(1, Some("g"))).is_some());
        assert!(held.admit(0, msg(2, Some("g"))).is_none());
        assert!(held.admit(0, msg(3, Some("g"))).is_none());
        // Another group, another binding and ungrouped messages run.
        assert!(held.admit(0, msg(4, Some("h"))).is_some());
        assert!(held.admit(1, msg(5, Some("g"))).is_some());
        assert!(held.admit(0, msg(6, None)).is_some());
        assert_eq!(held.next(0, "g").map(|m| m.id), Some(2));
        assert_eq!(held.next(0, "g").map(|m| m.id), Some(3));
        assert_eq!(held.next(0, "g").map(|m| m.id), None);
        // The group is free here again.
        assert!(held.admit(0, msg(7, Some("g"))).is_some());
    }
}
