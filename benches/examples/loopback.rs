//! Messages through a running server over loopback: P producer threads put
//! batches of 20 (100-byte payloads, K requests pipelined), C consumer
//! threads receive 20 and delete them (the delete of one batch pipelined
//! with the receive of the next), for S seconds; prints messages/s
//! through the whole cycle, and the median and 99th percentile of put and
//! delete round trips (from sending a request to its answer, pipelined).
//! A rough figure until the load generator exists.
//!
//! ```sh
//! target/release/fila-server --metrics-listen off --sqs-listen off --console-listen off --listen 127.0.0.1:7790 & SERVER=$!
//! target/release/examples/loopback 127.0.0.1:7790 2 2 8 10
//! kill $SERVER
//! ```

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use fila_client::{Client, ClientOptions, PutEntry, Request, Response, SettingsPatch};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let addr = args
        .first()
        .cloned()
        .unwrap_or_else(|| "127.0.0.1:7700".into());
    let producers: usize = args.get(1).map_or(2, |v| v.parse().unwrap());
    let consumers: usize = args.get(2).map_or(2, |v| v.parse().unwrap());
    let depth: usize = args.get(3).map_or(8, |v| v.parse().unwrap());
    let secs: u64 = args.get(4).map_or(10, |v| v.parse().unwrap());
    let mut admin = Client::connect(ClientOptions::new(addr.clone())).unwrap();
    let _ = admin.delete_queue("loopback");
    admin
        .create_queue(
            "loopback",
            SettingsPatch {
                max_messages: Some(1 << 32),
                max_bytes: Some(64 << 30),
                ..SettingsPatch::default()
            },
        )
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let put = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let put_lat = Arc::new(Mutex::new(Vec::<u64>::new()));
    let del_lat = Arc::new(Mutex::new(Vec::<u64>::new()));
    let mut threads = Vec::new();
    for _ in 0..producers {
        let (addr, stop, put, lat) = (addr.clone(), stop.clone(), put.clone(), put_lat.clone());
        threads.push(std::thread::spawn(move || {
            let mut mine = Vec::new();
            let mut c = Client::connect(ClientOptions::new(addr)).unwrap();
            let payload = Bytes::from(vec![0x42u8; 100]);
            let req = Request::Put {
                queue: "loopback".into(),
                messages: (0..20)
                    .map(|_| PutEntry {
                        payload: payload.clone(),
                        ..PutEntry::default()
                    })
                    .collect(),
            };
            while !stop.load(Ordering::Relaxed) {
                let sent = Instant::now();
                let ids: Vec<u64> = (0..depth).map(|_| c.send(&req).unwrap()).collect();
                for id in ids {
                    match c.wait(id, Duration::ZERO).unwrap() {
                        Response::Put(v) => put.fetch_add(v.len() as u64, Ordering::Relaxed),
                        other => panic!("{other:?}"),
                    };
                    mine.push(sent.elapsed().as_micros() as u64);
                }
            }
            lat.lock().unwrap().extend(mine);
        }));
    }
    for _ in 0..consumers {
        let (addr, stop, done, lat) = (addr.clone(), stop.clone(), done.clone(), del_lat.clone());
        threads.push(std::thread::spawn(move || {
            let mut mine = Vec::new();
            let mut c = Client::connect(ClientOptions::new(addr)).unwrap();
            let queue = fila_client::QueueRef {
                name: "loopback".into(),
                dlq: false,
            };
            let mut previous: Vec<fila_client::Receipt> = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                // Delete the last batch and receive the next in one round trip.
                let sent = Instant::now();
                let delete = if previous.is_empty() {
                    None
                } else {
                    Some(
                        c.send(&Request::Delete {
                            queue: queue.clone(),
                            receipts: std::mem::take(&mut previous),
                        })
                        .unwrap(),
                    )
                };
                let receive = c
                    .send(&Request::Receive(fila_client::Receive {
                        queue: queue.clone(),
                        max_messages: 20,
                        visibility_ms: None,
                        wait_ms: Some(100),
                        channel: None,
                        fields: Default::default(),
                    }))
                    .unwrap();
                if let Some(id) = delete {
                    match c.wait(id, Duration::ZERO).unwrap() {
                        Response::Deleted(v) => done.fetch_add(
                            v.iter().filter(|r| r.is_ok()).count() as u64,
                            Ordering::Relaxed,
                        ),
                        other => panic!("{other:?}"),
                    };
                    mine.push(sent.elapsed().as_micros() as u64);
                }
                match c.wait(receive, Duration::from_secs(1)).unwrap() {
                    Response::Messages(ms) => {
                        previous = ms.iter().map(|m| m.receipt.unwrap()).collect()
                    }
                    other => panic!("{other:?}"),
                }
            }
            lat.lock().unwrap().extend(mine);
        }));
    }
    let start = Instant::now();
    std::thread::sleep(Duration::from_secs(secs));
    stop.store(true, Ordering::Relaxed);
    let elapsed = start.elapsed().as_secs_f64();
    for t in threads {
        t.join().unwrap();
    }
    let put = put.load(Ordering::Relaxed) as f64;
    let done = done.load(Ordering::Relaxed) as f64;
    let pct = |v: &Mutex<Vec<u64>>, p: f64| {
        let mut v = v.lock().unwrap().clone();
        v.sort_unstable();
        v.get(((v.len() as f64 - 1.0) * p) as usize)
            .copied()
            .unwrap_or(0)
    };
    println!(
        "{producers} producers (depth {depth}), {consumers} consumers, {secs} s: put {:.0}/s, received+deleted {:.0}/s; put round trip p50 {} us p99 {} us; delete p50 {} us p99 {} us",
        put / elapsed,
        done / elapsed,
        pct(&put_lat, 0.5),
        pct(&put_lat, 0.99),
        pct(&del_lat, 0.5),
        pct(&del_lat, 0.99),
    );
}
