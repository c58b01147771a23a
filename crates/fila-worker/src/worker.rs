//! The runtime: a fetch loop per queue (its own connection), a supervising
//! task per message, the renewer thread, and the drain.

use std::collections::HashMap;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fila_client::{
    AllOk, AsyncClient, ClientOptions, ErrorCode, Fields, Message, PutEntry, QueueRef, Receipt,
    ReceiveRef, SettingsPatch,
};
use tokio::sync::{mpsc, watch, Notify};
use tracing::{info, warn, Instrument};

use crate::backoff::{Backoff, Jitter};
use crate::groups::Held;
use crate::handler::{base64_decode, time_of, Delivery, Erased, Failure, Handler, Outputs, Typed};
use crate::renew::{self, Lease, Leases, Renewed};
use crate::settings::{Encoding, Settings};
use crate::stats::{Counters, StatsHandle};
use crate::{WorkerError, INPUT_ID_ATTRIBUTE};

struct Binding {
    queue: Arc<str>,
    settings: Settings,
    handler: Arc<dyn Erased>,
    /// Handlers running for this queue.
    running: AtomicUsize,
    /// A handler of this queue ended (wakes its fetch loop).
    finished: Notify,
}

/// A worker: queues, each with its settings and handler.
pub struct Worker {
    options: ClientOptions,
    bindings: Vec<Binding>,
    counters: Arc<Counters>,
    seed: Option<u64>,
}

/// What every task of a running worker shares.
struct Run {
    work: AsyncClient,
    bindings: Vec<Binding>,
    leases: Leases,
    counters: Arc<Counters>,
    /// Handlers running on every queue.
    running: AtomicUsize,
    /// `running` fell to zero.
    idle: Notify,
    /// Each queue's deleter: done messages' receipts, deleted 20 a request
    /// (closed at the end of a drain: a send then fails).
    deletes: Vec<mpsc::UnboundedSender<Receipt>>,
    /// The message groups running here, and their messages waiting.
    held: Held,
}

impl Worker {
    /// A worker connecting with `options` (a token among them, when the
    /// server wants one).
    pub fn new(options: ClientOptions) -> Worker {
        Worker {
            options,
            bindings: Vec::new(),
            counters: Arc::default(),
            seed: None,
        }
    }

    /// Runs `handler` for every message of `queue`.
    pub fn queue<H, Args>(mut self, queue: &str, settings: Settings, handler: H) -> Worker
    where
        H: Handler<Args>,
        Args: 'static,
    {
        self.bindings.push(Binding {
            queue: queue.into(),
            settings,
            handler: Arc::new(Typed(handler, PhantomData)),
            running: AtomicUsize::new(0),
            finished: Notify::new(),
        });
        self
    }

    /// Seeds the polling back-off's jitter (for tests; the clock seeds it
    /// otherwise).
    pub fn seed(mut self, seed: u64) -> Worker {
        self.seed = Some(seed);
        self
    }

    /// The counters, readable while the worker runs.
    pub fn stats(&self) -> StatsHandle {
        StatsHandle(self.counters.clone())
    }

    /// Runs until SIGINT or SIGTERM, then drains.
    pub async fn run(self) -> Result<(), WorkerError> {
        self.run_until(shutdown_signal()).await
    }

    /// Runs until `stop` resolves, then drains: no more fetching, running
    /// handlers get until their `shutdown_deadline`, leases renewed
    /// meanwhile; what did not finish, and what was fetched and never
    /// started, is made visible again at once.
    pub async fn run_until(self, stop: impl Future<Output = ()>) -> Result<(), WorkerError> {
        for b in &self.bindings {
            b.settings.validate()?;
        }
        let work = AsyncClient::connect(self.options.clone()).await?;
        for b in &self.bindings {
            prepare(&work, b).await?;
        }
        let mut fetchers = Vec::new();
        for _ in &self.bindings {
            fetchers.push(AsyncClient::connect(self.options.clone()).await?);
        }
        let leases = Leases::default();
        let stop_renewing = Arc::new(AtomicBool::new(false));
        let renewer = renew::spawn(
            self.options.clone(),
            leases.clone(),
            self.bindings
                .iter()
                .map(|b| Renewed {
                    queue: b.queue.clone(),
                    lease: b.settings.visibility_timeout,
                })
                .collect(),
            self.counters.clone(),
            stop_renewing.clone(),
        )
        .map_err(|e| WorkerError::Setting {
            field: "renewer",
            why: format!("cannot start its thread: {e}"),
        })?;
        let deadline = self
            .bindings
            .iter()
            .map(|b| b.settings.shutdown_deadline)
            .max()
            .unwrap_or_default();
        let mut receivers = Vec::new();
        let mut deletes = Vec::new();
        for _ in &self.bindings {
            let (tx, rx) = mpsc::unbounded_channel();
            deletes.push(tx);
            receivers.push(rx);
        }
        let run = Arc::new(Run {
            work,
            bindings: self.bindings,
            leases,
            counters: self.counters,
            running: AtomicUsize::new(0),
            idle: Notify::new(),
            deletes,
            held: Held::default(),
        });
        let (close_tx, close_rx) = watch::channel(false);
        let deleters: Vec<_> = receivers
            .into_iter()
            .enumerate()
            .map(|(b, rx)| tokio::spawn(deleter(run.clone(), b, rx, close_rx.clone())))
            .collect();
        let (stop_tx, stop_rx) = watch::channel(false);
        let mut loops = Vec::new();
        for (b, client) in fetchers.into_iter().enumerate() {
            let jitter = Jitter::new(
                self.seed
                    .map_or_else(|| Jitter::from_time().next_u64(), |s| s + b as u64),
            );
            loops.push(tokio::spawn(fetch(
                run.clone(),
                b,
                client,
                stop_rx.clone(),
                jitter,
            )));
        }
        stop.await;
        info!("stopping: no more fetching, running handlers may finish");
        let _ = stop_tx.send(true);
        for l in loops {
            let _ = l.await;
        }
        wait_idle(&run, deadline).await;
        release_running(&run).await;
        // The supervisors of what was released wrap up, and the deleters
        // finish what they were handed.
        wait_idle(&run, Duration::from_secs(5)).await;
        let _ = close_tx.send(true);
        for d in deleters {
            let _ = d.await;
        }
        stop_renewing.store(true, Ordering::Release);
        // Joined off the runtime's threads (it sleeps up to one tick).
        let _ = tokio::task::spawn_blocking(move || renewer.join()).await;
        Ok(())
    }
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

fn poison_of(queue: &str) -> String {
    format!("{queue}-poison")
}

/// The one-time set-up of a queue's poison queue, for an operator.
fn setup_commands(queue: &str) -> String {
    let poison = poison_of(queue);
    format!("fila queue create {poison} && fila queue update {queue} --dead-letter-target {poison}")
}

/// Checks the queue (any grant on it reads its settings) and uses its
/// dead-letter target when one is set; else points its dead letters at
/// `<queue>-poison` (created when missing), which needs `manage` on the
/// queue and `send` on the poison queue: without them the error says what
/// an operator runs once.
async fn prepare(work: &AsyncClient, b: &Binding) -> Result<(), WorkerError> {
    let queue = b.queue.to_string();
    let err = |why: String| WorkerError::Queue {
        queue: queue.clone(),
        why,
    };
    let settings = work
        .get_queue(&queue)
        .await
        .map_err(|e| err(e.to_string()))?;
    if settings.max_deliveries != 0 && settings.max_deliveries < b.settings.max_dequeue_count {
        warn!(
            queue = %queue,
            max_deliveries = settings.max_deliveries,
            max_dequeue_count = b.settings.max_dequeue_count,
            "the queue dead-letters before the worker's max_dequeue_count is reached"
        );
    }
    match settings.dead_letter_target {
        Some(target) => {
            info!(queue = %queue, target = %target, "poison messages go to the queue's own dead-letter target");
        }
        None => {
            let poison = poison_of(&queue);
            let unset = |e: &fila_client::ClientError| {
                if e.code() == Some(ErrorCode::FORBIDDEN) {
                    format!(
                        "it has no dead-letter target and this token may not set one ({e}); \
                         the worker needs only receive on {queue} and send on {poison} once an \
                         operator has run: {}",
                        setup_commands(&queue)
                    )
                } else {
                    format!("pointing its dead letters at {poison}: {e}")
                }
            };
            match work.create_queue(&poison, SettingsPatch::default()).await {
                Ok(_) => {}
                Err(e) if e.code() == Some(ErrorCode::QUEUE_EXISTS) => {}
                Err(e) => return Err(err(unset(&e))),
            }
            work.update_queue(
                &queue,
                SettingsPatch {
                    dead_letter_target: Some(Some(poison.clone())),
                    ..SettingsPatch::default()
                },
            )
            .await
            .map_err(|e| err(unset(&e)))?;
        }
    }
    Ok(())
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// One queue's fetch loop.
async fn fetch(
    run: Arc<Run>,
    b: usize,
    client: AsyncClient,
    mut stop: watch::Receiver<bool>,
    jitter: Jitter,
) {
    let binding = &run.bindings[b];
    let s = &binding.settings;
    let mut backoff = Backoff::new(s.max_polling_interval, jitter);
    loop {
        // Room for a batch: the running fell to the threshold.
        while binding.running.load(Ordering::Acquire) > s.new_batch_threshold {
            if *stop.borrow() {
                return;
            }
            tokio::select! {
                _ = binding.finished.notified() => {}
                _ = stop.changed() => {}
            }
        }
        if *stop.borrow() {
            return;
        }
        let polled = client
            .receive_with(ReceiveRef {
                queue: &binding.queue,
                dlq: false,
                max_messages: s.batch_size,
                visibility_ms: Some(millis(s.visibility_timeout)),
                wait_ms: Some(millis(s.long_poll)),
                channel: None,
                fields: Fields::ALL,
            })
            .await;
        let delay = match polled {
            Err(e) => {
                run.counters.poll_errors.fetch_add(1, Ordering::Relaxed);
                warn!(queue = %binding.queue, error = %e, "a poll failed");
                backoff.empty()
            }
            Ok(ms) if ms.is_empty() => {
                // A long poll already waited (and succeeded: the failures'
                // back-off starts again); short polls back off.
                if s.long_poll.is_zero() {
                    backoff.empty()
                } else {
                    backoff.reset();
                    Duration::ZERO
                }
            }
            Ok(ms) => {
                if *stop.borrow() {
                    // Fetched while stopping: never started, given back.
                    release(&run, b, ms.iter().filter_map(|m| m.receipt).collect()).await;
                    return;
                }
                for m in ms {
                    start(&run, b, m);
                }
                let found = backoff.found();
                if s.long_poll.is_zero() {
                    found
                } else {
                    Duration::ZERO
                }
            }
        };
        if !delay.is_zero() {
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = stop.changed() => {}
            }
        }
    }
}

/// Starts a fetched message's supervisor, unless the same message already
/// runs in this host (its lease ran out and it came back): then the run
/// goes on with the newer lease. A message of a group that runs here waits
/// behind it, leased and counted as running ([`Held`]).
fn start(run: &Arc<Run>, b: usize, m: Message) {
    let Some(receipt) = m.receipt else { return };
    let third = run.bindings[b].settings.visibility_timeout / 3;
    {
        let mut leases = run.leases.lock();
        if let Some(l) = leases.get_mut(&m.id) {
            l.receipt = receipt;
            l.renew_at = Instant::now() + third;
            return;
        }
        leases.insert(
            m.id,
            Lease {
                binding: b,
                receipt,
                renew_at: Instant::now() + third,
                abort: None,
            },
        );
    }
    run.bindings[b].running.fetch_add(1, Ordering::AcqRel);
    run.running.fetch_add(1, Ordering::AcqRel);
    run.counters.in_flight.fetch_add(1, Ordering::Relaxed);
    if let Some(m) = run.held.admit(b, m) {
        tokio::spawn(supervise(run.clone(), b, m));
    }
}

/// How a message's run ended.
enum Verdict {
    Done(Outputs),
    Failed(String),
    Poison(&'static str, String),
    /// Stopped at the end of a drain (already released).
    Cancelled,
}

async fn supervise(run: Arc<Run>, b: usize, m: Message) {
    let mut next = Some(m);
    while let Some(m) = next.take() {
        let group = m.group.clone();
        // A message that waited behind its group whose lease a drain gave
        // back meanwhile does not run.
        if run.leases.lock().contains_key(&m.id) {
            supervise_one(&run, b, m).await;
        }
        finished(&run, b);
        next = group.and_then(|g| run.held.next(b, &g));
    }
}

/// A message's handler ran (or will not): it no longer counts as running.
fn finished(run: &Run, b: usize) {
    let binding = &run.bindings[b];
    run.counters.in_flight.fetch_sub(1, Ordering::Relaxed);
    binding.running.fetch_sub(1, Ordering::AcqRel);
    binding.finished.notify_one();
    if run.running.fetch_sub(1, Ordering::AcqRel) == 1 {
        run.idle.notify_waiters();
    }
}

async fn supervise_one(run: &Arc<Run>, b: usize, m: Message) {
    let binding = &run.bindings[b];
    let s = &binding.settings;
    let (id, count) = (m.id, m.delivery_count);
    let verdict = if count > s.max_dequeue_count {
        Verdict::Poison(
            "max_dequeue_count",
            format!(
                "delivered {count} times, more than max_dequeue_count {}; the last error is \
                 not known to this host",
                s.max_dequeue_count
            ),
        )
    } else {
        match delivery(binding, m) {
            Err(why) => Verdict::Poison("decode", why),
            Ok(d) => {
                let span = tracing::info_span!(
                    "message",
                    queue = %binding.queue,
                    id = %d.id_hex(),
                    dequeue_count = count
                );
                let task = tokio::spawn(binding.handler.call(d).instrument(span));
                if let Some(l) = run.leases.lock().get_mut(&id) {
                    l.abort = Some(task.abort_handle());
                }
                match task.await {
                    Ok(Ok(outputs)) => Verdict::Done(outputs),
                    Ok(Err(Failure::Decode(why))) => Verdict::Poison("decode", why),
                    Ok(Err(Failure::Handler(text))) => Verdict::Failed(text),
                    Err(e) if e.is_panic() => {
                        let p = e.into_panic();
                        let text = p
                            .downcast_ref::<&str>()
                            .map(|s| s.to_string())
                            .or_else(|| p.downcast_ref::<String>().cloned())
                            .unwrap_or_else(|| "(no message)".into());
                        Verdict::Failed(format!("the handler panicked: {text}"))
                    }
                    Err(_) => Verdict::Cancelled,
                }
            }
        }
    };
    // Whoever takes the lease out of the map acts on the message: this
    // supervisor, or the drain that released it.
    let lease = run.leases.lock().remove(&id);
    if let Some(lease) = lease {
        conclude(run, b, id, count, lease.receipt, verdict).await;
    }
}

/// The handler's view of a fetched message.
fn delivery(binding: &Binding, m: Message) -> Result<Delivery, String> {
    let payload = match binding.settings.message_encoding {
        Encoding::None => m.payload,
        Encoding::Base64 => base64_decode(&m.payload).map_err(|e| e.0)?,
    };
    Ok(Delivery {
        queue: binding.queue.clone(),
        id: m.id,
        seq: m.seq,
        dequeue_count: m.delivery_count,
        inserted_at: time_of(m.inserted_at_ms),
        expires_at: time_of(m.expires_at_ms),
        next_visible_at: time_of(m.next_visible_at_ms),
        receipt: m.receipt.unwrap_or([0; 32]),
        attributes: m.attributes,
        channel: m.channel,
        group: m.group,
        priority: m.priority,
        payload,
    })
}

/// Cuts `text` to at most `max` bytes at a character boundary.
fn cut(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

async fn conclude(run: &Run, b: usize, id: u128, count: u32, receipt: Receipt, verdict: Verdict) {
    let binding = &run.bindings[b];
    let s = &binding.settings;
    let counters = &run.counters;
    let failed = match verdict {
        Verdict::Cancelled => return,
        Verdict::Done(outputs) => match put_outputs(&run.work, id, outputs).await {
            Ok(()) => {
                // Deleted by the queue's deleter, with others done meanwhile.
                if run.deletes[b].send(receipt).is_err() {
                    delete_done(run, b, &[receipt]).await;
                }
                return;
            }
            Err(e) => format!("putting the handler's outputs failed: {e}"),
        },
        Verdict::Failed(text) => text,
        Verdict::Poison(reason, why) => {
            poison(run, b, id, receipt, reason, why).await;
            return;
        }
    };
    counters.failed.fetch_add(1, Ordering::Relaxed);
    if count >= s.max_dequeue_count {
        poison(run, b, id, receipt, "max_dequeue_count", failed).await;
        return;
    }
    let queue = QueueRef {
        name: binding.queue.to_string(),
        dlq: false,
    };
    // A wait of the worker's own wins; without one the queue's retry
    // policy decides (a release as failed: at once without a policy).
    let back = millis(s.visibility_timeout_on_failure);
    let released = if back == 0 {
        // Kept in the message's attempts.
        let why = cut(failed, fila_client::limits::DEAD_LETTER_DESCRIPTION_LEN_MAX);
        run.work
            .release_with(&queue, &[receipt], "handler_failed", &why)
            .await
            .and_then(AllOk::all_ok)
            .map(drop)
    } else {
        run.work
            .update_visibility(&queue, &[(receipt, back)])
            .await
            .and_then(AllOk::all_ok)
            .map(drop)
    };
    if let Err(e) = released {
        warn!(queue = %binding.queue, id = %format!("{id:032x}"), error = %e, "releasing a failed message failed; it comes back when its lease ends");
    }
}

/// A queue's deleter: deletes the receipts of done messages, as many as
/// came meanwhile in one request (20 at most), one request at a time.
/// Closed by `close` at the end of a drain: it deletes what it was handed
/// and ends.
async fn deleter(
    run: Arc<Run>,
    b: usize,
    mut rx: mpsc::UnboundedReceiver<Receipt>,
    mut close: watch::Receiver<bool>,
) {
    let max = fila_client::limits::BATCH_LEN_MAX;
    let mut batch = Vec::with_capacity(max);
    let mut closed = false;
    loop {
        let first = if closed {
            rx.recv().await
        } else {
            tokio::select! {
                r = rx.recv() => r,
                _ = close.changed() => {
                    // No more sends; what was sent is still received.
                    rx.close();
                    closed = true;
                    continue;
                }
            }
        };
        let Some(first) = first else { return };
        batch.clear();
        batch.push(first);
        while batch.len() < max {
            match rx.try_recv() {
                Ok(r) => batch.push(r),
                Err(_) => break,
            }
        }
        delete_done(&run, b, &batch).await;
    }
}

/// Deletes done messages of binding `b`; counts each as processed, or as
/// failed when its delete was refused (its lease was lost: it comes back,
/// and its outputs carry its id).
async fn delete_done(run: &Run, b: usize, receipts: &[Receipt]) {
    let binding = &run.bindings[b];
    let counters = &run.counters;
    match run.work.delete(&binding.queue, receipts).await {
        Ok(results) => {
            for r in results {
                match r {
                    Ok(()) => counters.processed.fetch_add(1, Ordering::Relaxed),
                    Err(e) => {
                        warn!(queue = %binding.queue, error = %e, "deleting a done message failed");
                        counters.failed.fetch_add(1, Ordering::Relaxed)
                    }
                };
            }
        }
        Err(e) => {
            warn!(queue = %binding.queue, error = %e, n = receipts.len(), "deleting done messages failed");
            counters
                .failed
                .fetch_add(receipts.len() as u64, Ordering::Relaxed);
        }
    }
}

/// Dead-letters the message: the queue's dead-letter target is its poison
/// queue, so it moves there in one step, with `reason` and `why` in its
/// dead-letter record.
async fn poison(run: &Run, b: usize, id: u128, receipt: Receipt, reason: &str, why: String) {
    let binding = &run.bindings[b];
    let why = cut(why, fila_client::limits::DEAD_LETTER_DESCRIPTION_LEN_MAX);
    warn!(queue = %binding.queue, id = %format!("{id:032x}"), reason, why = %why, "poison message");
    match run
        .work
        .dead_letter(&binding.queue, receipt, reason, &why)
        .await
    {
        Ok(()) => {
            run.counters.poisoned.fetch_add(1, Ordering::Relaxed);
        }
        Err(e) => {
            warn!(queue = %binding.queue, id = %format!("{id:032x}"), error = %e, "moving a poison message failed; it comes back when its lease ends")
        }
    }
}

/// A handler's outputs as they are put, grouped by queue: each with the
/// input's id as an attribute and, unless the handler named one, a
/// deduplication id made of the input's id and the output's place
/// (`<input id>/<n>`), so a retried handler that makes the same outputs
/// stores none of them twice (within the queues' dedup windows).
pub fn output_entries(input: u128, outputs: Outputs) -> HashMap<String, Vec<PutEntry>> {
    let mut by_queue: HashMap<String, Vec<PutEntry>> = HashMap::new();
    for (n, (queue, mut entry)) in outputs.items.into_iter().enumerate() {
        entry
            .attributes
            .push((INPUT_ID_ATTRIBUTE.into(), format!("{input:032x}")));
        if entry.dedup_id.is_none() {
            entry.dedup_id = Some(format!("{input:032x}/{n}"));
        }
        by_queue.entry(queue).or_default().push(entry);
    }
    by_queue
}

/// Puts a handler's outputs ([`output_entries`]).
async fn put_outputs(
    work: &AsyncClient,
    input: u128,
    outputs: Outputs,
) -> Result<(), fila_client::ClientError> {
    for (queue, entries) in output_entries(input, outputs) {
        work.put_many(&queue, entries).await?.all_ok()?;
    }
    Ok(())
}

/// Makes messages of binding `b` visible again at once.
async fn release(run: &Run, b: usize, receipts: Vec<Receipt>) {
    if receipts.is_empty() {
        return;
    }
    let binding = &run.bindings[b];
    let changes: Vec<(Receipt, u64)> = receipts.iter().map(|r| (*r, 0)).collect();
    let queue = QueueRef {
        name: binding.queue.to_string(),
        dlq: false,
    };
    match run.work.update_visibility(&queue, &changes).await {
        Ok(results) => {
            let n = results.iter().filter(|r| r.is_ok()).count();
            run.counters.released.fetch_add(n as u64, Ordering::Relaxed);
        }
        Err(e) => {
            warn!(queue = %binding.queue, error = %e, "releasing messages failed; they come back when their leases end")
        }
    }
}

/// At the end of a drain: stops the handlers still running and gives their
/// messages back.
async fn release_running(run: &Run) {
    let left: Vec<Lease> = run.leases.lock().drain().map(|(_, l)| l).collect();
    let mut by_binding: Vec<Vec<Receipt>> = vec![Vec::new(); run.bindings.len()];
    for l in left {
        if let Some(a) = &l.abort {
            a.abort();
        }
        by_binding[l.binding].push(l.receipt);
    }
    for (b, receipts) in by_binding.into_iter().enumerate() {
        if !receipts.is_empty() {
            warn!(queue = %run.bindings[b].queue, n = receipts.len(), "handlers still running at the deadline: stopped, their messages released");
        }
        release(run, b, receipts).await;
    }
}

/// Waits until no handler runs, `limit` at most.
async fn wait_idle(run: &Run, limit: Duration) {
    let until = tokio::time::Instant::now() + limit;
    loop {
        let idle = run.idle.notified();
        tokio::pin!(idle);
        idle.as_mut().enable();
        if run.running.load(Ordering::Acquire) == 0 {
            return;
        }
        if tokio::time::timeout_at(until, idle).await.is_err() {
            return;
        }
    }
}
