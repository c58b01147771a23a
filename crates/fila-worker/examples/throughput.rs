//! Messages a second through the worker with a no-op handler, beside a
//! hand-written loop on the async client doing the same work (receive 16,
//! delete them), on the same queue size in the same run; with the server's
//! CPU per message when its pid is given.
//!
//! ```sh
//! fila-server --sync none &
//! cargo run --release -p fila-worker --example throughput -- 127.0.0.1:7700 200000 $(pgrep -n fila-server)
//! ```

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use fila_client::{AllOk, AsyncClient, ClientOptions, Fields, ReceiveRef, SettingsPatch};
use fila_worker::{Delivery, Settings, Worker};

fn cpu_s(pid: Option<u32>) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", pid?)).ok()?;
    let f: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    Some((f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?) / 100.0)
}

async fn fill(c: &AsyncClient, queue: &str, n: usize) {
    let _ = c.delete_queue_if_exists(queue).await;
    c.create_queue(queue, SettingsPatch::default())
        .await
        .unwrap();
    let batch: Vec<Bytes> = (0..1000).map(|_| Bytes::from(vec![b'x'; 100])).collect();
    for _ in 0..n / 1000 {
        c.put_payloads(queue, &batch)
            .await
            .unwrap()
            .all_ok()
            .unwrap();
    }
}

fn report(what: &str, n: usize, secs: f64, cpu: Option<f64>) {
    let cpu = cpu.map_or(String::new(), |c| {
        format!(", server {:.2} µs CPU a message", c * 1e6 / n as f64)
    });
    println!(
        "{what}: {n} messages in {secs:.2} s: {:.0} msg/s{cpu}",
        n as f64 / secs
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let addr = args
        .first()
        .cloned()
        .unwrap_or_else(|| "127.0.0.1:7700".into());
    let n: usize = args.get(1).and_then(|v| v.parse().ok()).unwrap_or(100_000);
    let pid: Option<u32> = args.get(2).and_then(|v| v.parse().ok());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let c = AsyncClient::connect(ClientOptions::new(addr.clone()))
            .await
            .unwrap();

        // The hand-written loop: receive 16, delete them, again.
        fill(&c, "bench-loop", n).await;
        let (t, cpu0) = (Instant::now(), cpu_s(pid));
        let mut done = 0;
        while done < n {
            let ms = c
                .receive_with(ReceiveRef {
                    queue: "bench-loop",
                    dlq: false,
                    max_messages: 16,
                    visibility_ms: None,
                    wait_ms: Some(1_000),
                    channel: None,
                    fields: Fields::ALL,
                })
                .await
                .unwrap();
            let receipts: Vec<_> = ms.iter().filter_map(|m| m.receipt).collect();
            c.delete("bench-loop", &receipts)
                .await
                .unwrap()
                .all_ok()
                .unwrap();
            done += ms.len();
        }
        let cpu = cpu_s(pid).zip(cpu0).map(|(a, b)| a - b);
        report(
            "hand-written loop (receive 16, delete them)",
            n,
            t.elapsed().as_secs_f64(),
            cpu,
        );

        // The worker, a no-op handler, batch 16 / threshold 8.
        fill(&c, "bench-worker", n).await;
        let worker = Worker::new(ClientOptions::new(addr.clone())).queue(
            "bench-worker",
            Settings::default(),
            |_: Delivery| async { Ok::<(), String>(()) },
        );
        let stats = worker.stats();
        let (t, cpu0) = (Instant::now(), cpu_s(pid));
        // The time and CPU when the last message is done (the drain after
        // it is not counted).
        let end = Arc::new(Mutex::new(None));
        let e = end.clone();
        worker
            .run_until(async move {
                while stats.get().processed < n as u64 {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                *e.lock().unwrap() = Some((t.elapsed().as_secs_f64(), cpu_s(pid)));
            })
            .await
            .unwrap();
        let (secs, cpu1) = end.lock().unwrap().take().expect("all processed");
        let cpu = cpu1.zip(cpu0).map(|(a, b)| a - b);
        report(
            "worker (no-op handler, batch 16, threshold 8)",
            n,
            secs,
            cpu,
        );
    });
}
