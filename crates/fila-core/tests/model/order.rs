//! What a receive takes next, as the model decides it: a channel's
//! ready messages (its ungrouped visible ones and its groups' queued
//! heads) and the round of channels, groups' heads queued when they may
//! be given, and the priority level a channel's next delivery comes from.

use std::sync::Arc;

use super::{idx, Model, St, Sub, M};

impl Sub {
    pub(super) fn ready_in(&self, channel: &Option<Arc<str>>) -> usize {
        self.msgs
            .values()
            .filter(|m| m.ready() && &m.channel == channel)
            .count()
    }
    pub(super) fn visible(&self) -> usize {
        self.msgs.values().filter(|m| m.st == St::Visible).count()
    }
    /// The priority level a channel's next delivery comes from.
    pub(super) fn pick_level(&mut self, channel: &Option<Arc<str>>, fairness: u32) -> u8 {
        let mut ready = [false; 11];
        for m in self
            .msgs
            .values()
            .filter(|m| m.ready() && &m.channel == channel)
        {
            ready[usize::from(m.level)] = true;
        }
        let top = (1..=10u8)
            .rev()
            .find(|l| ready[usize::from(*l)])
            .unwrap_or(1);
        let below = |under: u8| (1..under).rev().find(|l| ready[usize::from(*l)]);
        if fairness == 0 || below(top).is_none() {
            return top;
        }
        let state = self.fairness.entry(channel.clone()).or_default();
        state.0 = state.0.wrapping_add(1);
        if !state.0.is_multiple_of(fairness) {
            return top;
        }
        let level = below(state.1.min(top)).or_else(|| below(top)).unwrap();
        state.1 = level;
        level
    }

    /// Drops a channel from the round when it has nothing ready left.
    pub(super) fn fix_rr(&mut self, channel: &Option<Arc<str>>) {
        if self.ready_in(channel) == 0 {
            self.rr.retain(|c| c != channel);
        }
    }
    pub(super) fn rotate(&mut self, channel: &Option<Arc<str>>) {
        if let Some(pos) = self.rr.iter().position(|c| c == channel) {
            let c = self.rr.remove(pos);
            self.rr.push(c);
        }
    }
}

impl Model {
    /// A message becomes visible: it joins the end of its channel, and its
    /// channel joins the round if it had nothing visible.
    /// A grouped message (of a queue's own half) becomes visible: its
    /// group decides whether it is ready.
    pub(super) fn enter_visible(&mut self, name: &str, dlq: bool, seq: u64) {
        let sub = &mut self.queues.get_mut(name).unwrap().subs[idx(dlq)];
        let m = sub.msgs.get_mut(&seq).unwrap();
        m.st = St::Visible;
        m.queued = false;
        if !dlq && m.group.is_some() {
            self.refresh_group(name, seq);
        } else {
            self.make_ready(name, dlq, seq);
        }
    }

    /// Puts a message on its channel's ring (the back of its channel's
    /// turn; the channel joins the round if it had nothing ready).
    pub(super) fn make_ready(&mut self, name: &str, dlq: bool, seq: u64) {
        self.stamp += 1;
        let stamp = self.stamp;
        let sub = &mut self.queues.get_mut(name).unwrap().subs[idx(dlq)];
        let m = sub.msgs.get_mut(&seq).unwrap();
        m.stamp = stamp;
        m.queued = true;
        let channel = m.channel.clone();
        if sub.ready_in(&channel) == 1 {
            sub.rr.push(channel);
        }
        let key = (name.to_owned(), dlq);
        if !self.gained.contains(&key) {
            self.gained.push(key);
        }
    }

    /// The group of message `seq` (its channel and key, in the queue's own
    /// half) after a change: its head is queued when it may be given (the
    /// first member, visible, none leased), and nothing else is.
    pub(super) fn refresh_group(&mut self, name: &str, seq: u64) {
        let sub = &self.queues[name].subs[0];
        let (channel, key) = {
            let m = &sub.msgs[&seq];
            (m.channel.clone(), m.group.clone())
        };
        self.refresh_group_of(name, channel, key);
    }

    pub(super) fn refresh_group_of(
        &mut self,
        name: &str,
        channel: Option<Arc<str>>,
        key: Option<Arc<str>>,
    ) {
        if key.is_none() {
            return;
        }
        let sub = &mut self.queues.get_mut(name).unwrap().subs[0];
        let mine = |m: &M| m.channel == channel && m.group == key;
        let head = sub
            .msgs
            .values()
            .find(|m| mine(m) && m.member())
            .map(|m| m.seq);
        let busy = sub
            .msgs
            .values()
            .any(|m| mine(m) && matches!(m.st, St::InFlight(_)));
        let queued = sub
            .msgs
            .values()
            .find(|m| mine(m) && m.queued)
            .map(|m| m.seq);
        let may = !busy && head.is_some_and(|h| sub.msgs[&h].st == St::Visible);
        if may && queued == head {
            return;
        }
        if let Some(old) = queued {
            sub.msgs.get_mut(&old).unwrap().queued = false;
            sub.fix_rr(&channel);
        }
        if may {
            self.make_ready(name, false, head.unwrap());
        }
    }
}
