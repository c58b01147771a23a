//! Splits the in-process lifecycle into its three calls and times each
//! (a profiling aid): `cargo run --release -p fila-benches --example phases`.
use std::time::{Duration, Instant};

use fila_benches::{engine_with_queues, payload_100};
use fila_core::{Address, NewMessage, ReceiveOptions};

fn main() {
    let (engine, queues) = engine_with_queues(1);
    let q = &queues[0];
    let payload = payload_100();
    let opts = ReceiveOptions::now(20);
    let (mut put, mut recv, mut del) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    let rounds = 200_000;
    let mut receipts = Vec::with_capacity(20);
    for _ in 0..rounds {
        let batch: Vec<NewMessage> = (0..20).map(|_| NewMessage::new(payload.clone())).collect();
        let t = Instant::now();
        let answers = engine.put(q, batch).unwrap();
        put += t.elapsed();
        drop(answers);
        let t = Instant::now();
        let got = engine.receive_now(Address::queue(q), &opts).unwrap();
        recv += t.elapsed();
        receipts.clear();
        receipts.extend(got.iter().map(|m| m.receipt.unwrap()));
        drop(got);
        let t = Instant::now();
        let answers = engine.delete(Address::queue(q), &receipts).unwrap();
        del += t.elapsed();
        drop(answers);
    }
    let per = |d: Duration| d.as_nanos() as f64 / (rounds * 20) as f64;
    println!(
        "ns per message: put {:.1}  receive {:.1}  delete {:.1}  total {:.1}",
        per(put),
        per(recv),
        per(del),
        per(put + recv + del)
    );
}
