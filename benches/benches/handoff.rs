//! `engine/one-queue/...`: one queue hammered from both cores, in process:
//! two producer threads put batches of 20 (100-byte payloads), two consumer
//! threads receive 20 and delete them, until every message went through.
//!
//! * `mutex`: the threads call the in-process `Engine` (a mutex per
//!   shard: all four take the one queue's lock);
//! * `owner`: the shape a server runs: one thread owns the shard (an
//!   `Owner`) and the four hand it typed requests through a bounded
//!   lock-free queue (crossbeam `ArrayQueue`), ring its `Doorbell` to wake
//!   it only when it is about to sleep, and wait for their answers.
//!
//! Throughput is messages through the whole cycle (put, receive, delete).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use crossbeam_queue::ArrayQueue;
use fila_benches::{engine_with_queues, payload_100};
use fila_core::doorbell::Doorbell;
use fila_core::{Address, Engine, Message, NewMessage, Owner, Receipt, ReceiveOptions, Received};

const BATCH: usize = 20;

/// What a client asks the owning thread.
enum Job {
    Put(Vec<NewMessage>, Sender<Vec<Message>>),
    Receive(Sender<Vec<Message>>),
    Delete(Vec<Receipt>, Sender<Vec<Message>>),
}

/// The owner's side: its queue of jobs and its doorbell.
struct Inbox {
    jobs: ArrayQueue<Job>,
    bell: Doorbell,
    stop: AtomicBool,
}

fn owner_loop(mut owner: Owner, queue: &str, inbox: &Inbox) {
    let opts = ReceiveOptions::now(BATCH as u32);
    loop {
        while let Some(job) = inbox.jobs.pop() {
            match job {
                Job::Put(batch, reply) => {
                    assert!(owner.put(queue, batch).unwrap().iter().all(|r| r.is_ok()));
                    let _ = reply.send(Vec::new());
                }
                Job::Receive(reply) => {
                    let got = match owner.receive(Address::queue(queue), &opts, None).unwrap() {
                        Received::Ready(ms) => ms,
                        Received::Parked(_) => unreachable!("no notify, no parking"),
                    };
                    let _ = reply.send(got);
                }
                Job::Delete(receipts, reply) => {
                    let done = owner.delete(Address::queue(queue), &receipts).unwrap();
                    assert!(done.iter().all(|r| r.is_ok()));
                    let _ = reply.send(Vec::new());
                }
            }
        }
        inbox.bell.about_to_sleep();
        if !inbox.jobs.is_empty() {
            inbox.bell.awake();
            continue;
        }
        if inbox.stop.load(Ordering::Acquire) {
            return;
        }
        std::thread::park_timeout(Duration::from_millis(10));
        inbox.bell.awake();
    }
}

/// A client's way to the owner: push, ring, wait for the answer.
fn ask(
    inbox: &Inbox,
    owner: &std::thread::Thread,
    job: impl FnOnce(Sender<Vec<Message>>) -> Job,
) -> Vec<Message> {
    let (tx, rx) = channel();
    let mut job = job(tx);
    while let Err(back) = inbox.jobs.push(job) {
        job = back;
        std::thread::yield_now();
    }
    if inbox.bell.must_wake() {
        owner.unpark();
    }
    rx.recv().expect("the owner answers")
}

/// Runs two producers and two consumers; `put`, `receive`, `delete` are
/// how a thread reaches the queue. Answers the slowest thread's time.
fn hammer(
    iters: u64,
    put: &(dyn Fn(Vec<NewMessage>) + Sync),
    receive: &(dyn Fn() -> Vec<Message> + Sync),
    delete: &(dyn Fn(Vec<Receipt>) + Sync),
) -> Duration {
    let total = 2 * iters * BATCH as u64;
    let consumed = AtomicU64::new(0);
    let barrier = Barrier::new(4);
    std::thread::scope(|s| {
        let mut handles = Vec::new();
        for _ in 0..2 {
            let barrier = &barrier;
            handles.push(s.spawn(move || {
                let payload = payload_100();
                barrier.wait();
                let start = Instant::now();
                for _ in 0..iters {
                    put((0..BATCH)
                        .map(|_| NewMessage::new(payload.clone()))
                        .collect());
                }
                start.elapsed()
            }));
        }
        for _ in 0..2 {
            let (barrier, consumed) = (&barrier, &consumed);
            handles.push(s.spawn(move || {
                barrier.wait();
                let start = Instant::now();
                while consumed.load(Ordering::Acquire) < total {
                    let got = receive();
                    if got.is_empty() {
                        std::thread::yield_now();
                        continue;
                    }
                    consumed.fetch_add(got.len() as u64, Ordering::AcqRel);
                    delete(got.iter().map(|m| m.receipt.unwrap()).collect());
                }
                start.elapsed()
            }));
        }
        handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .max()
            .unwrap()
    })
}

fn one_queue(c: &mut Criterion) {
    let mut g = c.benchmark_group("engine");
    g.throughput(Throughput::Elements(2 * BATCH as u64));
    g.sample_size(20);
    g.bench_function("one-queue/4threads/mutex", |b| {
        let (engine, queues) = engine_with_queues(1);
        let (engine, q): (&Engine, &str) = (&engine, &queues[0]);
        let opts = ReceiveOptions::now(BATCH as u32);
        b.iter_custom(|iters| {
            hammer(
                iters,
                &|batch| assert!(engine.put(q, batch).unwrap().iter().all(|r| r.is_ok())),
                &|| engine.receive_now(Address::queue(q), &opts).unwrap(),
                &|receipts| {
                    let done = engine.delete(Address::queue(q), &receipts).unwrap();
                    assert!(done.iter().all(|r| r.is_ok()));
                },
            )
        });
    });
    g.bench_function("one-queue/4threads/owner", |b| {
        let (engine, queues) = engine_with_queues(1);
        let q = queues[0].clone();
        let owner = engine.into_owners(1, 1_024).pop().unwrap();
        let inbox = Arc::new(Inbox {
            jobs: ArrayQueue::new(1_024),
            bell: Doorbell::new(),
            stop: AtomicBool::new(false),
        });
        let thread = {
            let inbox = inbox.clone();
            std::thread::spawn(move || owner_loop(owner, &q, &inbox))
        };
        let handle = thread.thread().clone();
        b.iter_custom(|iters| {
            let (inbox, handle) = (&*inbox, &handle);
            hammer(
                iters,
                &|batch| {
                    ask(inbox, handle, |tx| Job::Put(batch, tx));
                },
                &|| ask(inbox, handle, Job::Receive),
                &|receipts| {
                    ask(inbox, handle, |tx| Job::Delete(receipts, tx));
                },
            )
        });
        inbox.stop.store(true, Ordering::Release);
        handle.unpark();
        thread.join().unwrap();
    });
    g.finish();
}

criterion_group!(benches, one_queue);
criterion_main!(benches);
