//! Lease renewal, on a thread of its own with its own runtime and
//! connection, so handlers that hold their threads (CPU-bound or blocking
//! work on the worker's runtime) cannot starve it: every message whose
//! handler runs is renewed once a third of its lease has passed, 20
//! receipts a request.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use fila_client::{AsyncClient, ClientOptions, QueueRef, Receipt};
use tracing::warn;

use crate::stats::Counters;

/// A message whose handler runs (or is about to).
pub(crate) struct Lease {
    /// Its binding.
    pub(crate) binding: usize,
    /// The newest receipt the host holds for it.
    pub(crate) receipt: Receipt,
    /// When to renew next.
    pub(crate) renew_at: Instant,
    /// Stops its handler (at the end of a drain).
    pub(crate) abort: Option<tokio::task::AbortHandle>,
}

/// The running messages of a host, by message id.
#[derive(Clone, Default)]
pub(crate) struct Leases(Arc<Mutex<HashMap<u128, Lease>>>);

impl Leases {
    pub(crate) fn lock(&self) -> MutexGuard<'_, HashMap<u128, Lease>> {
        // Plain data: a panic elsewhere leaves nothing half-done in it.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// One binding as the renewer sees it: its queue and lease.
pub(crate) struct Renewed {
    pub(crate) queue: Arc<str>,
    pub(crate) lease: Duration,
}

/// Renews until `stop`; returns the thread.
pub(crate) fn spawn(
    options: ClientOptions,
    leases: Leases,
    bindings: Vec<Renewed>,
    counters: Arc<Counters>,
    stop: Arc<AtomicBool>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    let tick = bindings
        .iter()
        .map(|b| b.lease / 6)
        .min()
        .unwrap_or(Duration::from_secs(1))
        .clamp(Duration::from_millis(20), Duration::from_secs(1));
    std::thread::Builder::new()
        .name("fila-worker-renew".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => return warn!(error = %e, "the lease renewer could not start"),
            };
            rt.block_on(async move {
                let mut client: Option<AsyncClient> = None;
                while !stop.load(Ordering::Acquire) {
                    tokio::time::sleep(tick).await;
                    let now = Instant::now();
                    let mut due: Vec<Vec<(u128, Receipt)>> = vec![Vec::new(); bindings.len()];
                    for (id, l) in leases.lock().iter() {
                        if l.renew_at <= now {
                            due[l.binding].push((*id, l.receipt));
                        }
                    }
                    if due.iter().all(Vec::is_empty) {
                        continue;
                    }
                    let c = match &client {
                        Some(c) => c.clone(),
                        None => match AsyncClient::connect(options.clone()).await {
                            Ok(c) => {
                                client = Some(c.clone());
                                c
                            }
                            Err(e) => {
                                warn!(error = %e, "the lease renewer cannot connect");
                                continue;
                            }
                        },
                    };
                    for (b, msgs) in due.iter().enumerate().filter(|(_, m)| !m.is_empty()) {
                        let binding = &bindings[b];
                        if !renew(&c, binding, msgs, &leases, &counters).await {
                            client = None;
                        }
                    }
                }
            })
        })
}

/// Renews `msgs` of one binding; `false` when the connection failed.
async fn renew(
    c: &AsyncClient,
    binding: &Renewed,
    msgs: &[(u128, Receipt)],
    leases: &Leases,
    counters: &Counters,
) -> bool {
    let ms = binding.lease.as_millis() as u64;
    let changes: Vec<(Receipt, u64)> = msgs.iter().map(|(_, r)| (*r, ms)).collect();
    let queue = QueueRef {
        name: binding.queue.to_string(),
        dlq: false,
    };
    let results = match c.update_visibility(&queue, &changes).await {
        Ok(r) => r,
        Err(e) => {
            warn!(queue = %binding.queue, error = %e, "renewing leases failed");
            return false;
        }
    };
    let next = Instant::now() + binding.lease / 3;
    let mut held = leases.lock();
    for ((id, receipt), result) in msgs.iter().zip(results) {
        if let Some(l) = held.get_mut(id).filter(|l| l.receipt == *receipt) {
            l.renew_at = next;
        }
        match result {
            Ok(_) => {
                counters.renewals.fetch_add(1, Ordering::Relaxed);
            }
            // The lease ran out before it could be renewed (a pause longer
            // than two thirds of it): the message may be delivered again;
            // the host keeps one run of it (see Worker).
            Err(e) => {
                warn!(queue = %binding.queue, id = %format!("{id:032x}"), error = %e, "a lease could not be renewed")
            }
        }
    }
    true
}
