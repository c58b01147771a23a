//! What a request holds on the cluster node while it runs and while it
//! waits: a turn among the [`super::RUNNING_MAX`] requests running on the
//! replica (given back while it waits), and — for a receive waiting for
//! messages — a place among the server's `max_parked` waiting receives.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use fila_proto::ErrorCode;
use tokio::sync::Semaphore;

use crate::dispatch::{error, Answer};
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

    /// Sleeps `d`, or until `woken` is notified, without holding a turn;
    /// then waits for one.
    pub(super) async fn sleep_or(&mut self, d: Duration, woken: &tokio::sync::Notify) {
        self.permit = None;
        let _ = tokio::time::timeout(d, woken.notified()).await;
        self.permit = self.turns.clone().acquire_owned().await.ok();
    }
}

/// A receive waiting on this node: counted against the server's
/// `max_parked`, as a parked receive is on a single node.
pub(super) struct Waiting<'a>(&'a Shared);

impl<'a> Waiting<'a> {
    /// Counts one more, or says which limit refuses it.
    pub(super) fn start(shared: &'a Shared, may_park: bool) -> Result<Waiting<'a>, Answer> {
        let config = &shared.config;
        let full = |limit: &str, max: usize| {
            Err(error(
                ErrorCode::RESOURCE_EXHAUSTED,
                format!("resource_exhausted: {limit} of {max} parked receives reached"),
            )
            .into())
        };
        if !may_park {
            return full(
                "max_parked_per_connection",
                config.max_parked_per_connection,
            );
        }
        let counted = shared
            .parked
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < config.max_parked as u64).then_some(n + 1)
            });
        if counted.is_err() {
            return full("max_parked", config.max_parked);
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
