//! The peers fila is measured against (and fila's own SQS and Azure Queue
//! APIs),
//! each speaking its own protocol over
//! a plain blocking socket, pipelined like fila's client, behind the same
//! [`crate::target`] traits. What each lacks next to fila is in
//! docs/benchmarks.md ("What the peers do not do").

pub mod azure;
pub mod beanstalkd;
pub mod nats;
pub mod redis;
pub mod sqs;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// Reads one HTTP answer: its status and body (by `content-length`).
pub fn http_answer(conn: &mut Conn) -> Result<(u16, Vec<u8>), String> {
    let status_line = conn.line()?;
    let status: u16 = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad status line {status_line:?}"))?;
    let mut len = 0usize;
    loop {
        let line = conn.line()?;
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                len = value.trim().parse().map_err(|_| "bad content-length")?;
            }
        }
    }
    Ok((status, conn.exact(len)?))
}

/// A buffered connection: writes gathered until flushed, reads by line or
/// by length.
pub struct Conn {
    reader: BufReader<TcpStream>,
    out: Vec<u8>,
}

impl Conn {
    /// Connects (5 s at most per read once connected).
    pub fn open(addr: &str) -> Result<Conn, String> {
        let stream = TcpStream::connect(addr).map_err(|e| format!("{addr}: {e}"))?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        stream
            .set_read_timeout(Some(Duration::from_secs(40)))
            .map_err(|e| e.to_string())?;
        Ok(Conn {
            reader: BufReader::with_capacity(256 << 10, stream),
            out: Vec::with_capacity(64 << 10),
        })
    }

    /// Queues bytes to send.
    pub fn put(&mut self, bytes: &[u8]) {
        self.out.extend_from_slice(bytes);
    }

    /// Sends what is queued.
    pub fn flush(&mut self) -> Result<(), String> {
        if self.out.is_empty() {
            return Ok(());
        }
        self.reader
            .get_mut()
            .write_all(&self.out)
            .map_err(|e| e.to_string())?;
        self.out.clear();
        Ok(())
    }

    /// One line without its CR LF (flushing first).
    pub fn line(&mut self) -> Result<String, String> {
        self.flush()?;
        let mut line = String::new();
        let n = self
            .reader
            .read_line(&mut line)
            .map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("the peer closed the connection".into());
        }
        while line.ends_with('\n') || line.ends_with('\r') {
            line.pop();
        }
        Ok(line)
    }

    /// Exactly `n` bytes.
    pub fn exact(&mut self, n: usize) -> Result<Vec<u8>, String> {
        self.flush()?;
        let mut data = vec![0u8; n];
        self.reader
            .read_exact(&mut data)
            .map_err(|e| e.to_string())?;
        Ok(data)
    }

    /// Exactly `n` bytes, then the CR LF after them.
    pub fn bytes(&mut self, n: usize) -> Result<Vec<u8>, String> {
        self.flush()?;
        let mut data = vec![0u8; n + 2];
        self.reader
            .read_exact(&mut data)
            .map_err(|e| e.to_string())?;
        data.truncate(n);
        Ok(data)
    }
}
