//! What clients were told, and the checks the end state must pass.

use std::collections::{BTreeMap, HashMap, HashSet};

/// What clients were told.
#[derive(Default)]
pub struct History {
    pub attempted: HashSet<String>,
    pub acked: HashSet<String>,
    /// The highest delivery count a committed receive answered.
    pub delivered: HashMap<String, u32>,
    /// The receipt of that delivery.
    pub receipts: HashMap<String, fila_core::Receipt>,
    /// When the lease of that delivery ends.
    pub lease_ends: HashMap<String, u64>,
    /// Deliveries checked against the lease before them.
    pub leases_checked: usize,
    /// Deletes by a receipt of a lease another leader granted.
    pub receipts_moved: usize,
    /// Old receipts tried after their message was delivered again.
    pub stale_tried: usize,
    pub deleted: HashSet<String>,
}

/// An image in one order, so that equal replicas compare equal.
pub fn normal(mut image: fila_core::event::EngineImage) -> fila_core::event::EngineImage {
    image.queues.sort_by(|a, b| a.name.cmp(&b.name));
    for q in &mut image.queues {
        q.messages.sort_by_key(|m| (m.dlq, m.seq));
    }
    image
}

/// Holds the end state (body → delivery count) to what clients were
/// told.
pub fn check(seed: u64, h: &History, end: &BTreeMap<String, u32>) {
    for body in &h.acked {
        assert!(
            end.contains_key(body) || h.delivered.contains_key(body),
            "seed {seed}: acknowledged put {body} is gone and was never delivered"
        );
    }
    for body in &h.deleted {
        assert!(
            !end.contains_key(body),
            "seed {seed}: acknowledged delete of {body} came back"
        );
    }
    for (body, count) in end {
        assert!(
            h.attempted.contains(body),
            "seed {seed}: {body} was never put"
        );
        if let Some(seen) = h.delivered.get(body) {
            assert!(
                count >= seen,
                "seed {seed}: {body} has delivery count {count} after {seen} was acknowledged"
            );
        }
    }
}
