//! The loopback floor: what this machine allows over the same kind of
//! sockets with no queue at all. An echo server in this process (a thread
//! per connection writing back what it reads); P connections each keep D
//! frames of F bytes in flight and wait for each echo. Frames per second
//! and round trips show how close a system gets to the machine.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::report::{histogram, record};

/// What the floor measured.
pub struct Floor {
    /// Frames echoed per second, all connections.
    pub frames_per_s: f64,
    /// Round trip of one frame (send to its echo), µs: p50, p99, p99.9.
    pub rtt_us: [u64; 3],
}

fn echo(mut s: TcpStream) {
    let _ = s.set_nodelay(true);
    let mut buf = vec![0u8; 256 << 10];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if s.write_all(&buf[..n]).is_err() {
                    return;
                }
            }
        }
    }
}

/// Runs `connections` × `depth` frames of `size` bytes for `secs` seconds.
pub fn run(connections: usize, depth: usize, size: usize, secs: u64) -> Result<Floor, String> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let stop = Arc::new(AtomicBool::new(false));
    let frames = Arc::new(AtomicU64::new(0));
    std::thread::spawn(move || {
        for s in listener.incoming().flatten() {
            std::thread::spawn(move || echo(s));
        }
    });
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut hist = histogram();
    std::thread::scope(|scope| -> Result<(), String> {
        let mut clients = Vec::new();
        for _ in 0..connections {
            let (stop, frames) = (stop.clone(), frames.clone());
            clients.push(scope.spawn(move || -> Result<_, String> {
                let mut h = histogram();
                let mut s = TcpStream::connect(addr).map_err(|e| e.to_string())?;
                s.set_nodelay(true).map_err(|e| e.to_string())?;
                let frame = vec![0x5Au8; size];
                let mut back = vec![0u8; size];
                let mut sent: std::collections::VecDeque<Instant> = Default::default();
                while Instant::now() < deadline && !stop.load(Ordering::Relaxed) {
                    while sent.len() < depth {
                        s.write_all(&frame).map_err(|e| e.to_string())?;
                        sent.push_back(Instant::now());
                    }
                    s.read_exact(&mut back).map_err(|e| e.to_string())?;
                    let at = sent.pop_front().expect("one in flight");
                    record(&mut h, at.elapsed().as_micros() as u64);
                    frames.fetch_add(1, Ordering::Relaxed);
                }
                Ok(h)
            }));
        }
        for c in clients {
            let h = c.join().map_err(|_| "a floor client panicked")??;
            hist.add(h).map_err(|e| e.to_string())?;
        }
        Ok(())
    })?;
    stop.store(true, Ordering::Relaxed);
    Ok(Floor {
        frames_per_s: frames.load(Ordering::Relaxed) as f64 / secs.max(1) as f64,
        rtt_us: [
            hist.value_at_percentile(50.0),
            hist.value_at_percentile(99.0),
            hist.value_at_percentile(99.9),
        ],
    })
}
