//! beanstalkd: `put` (pipelined) into a tube of the run's own; up to 20
//! `reserve-with-timeout 0` pipelined to receive (one blocking reserve when
//! none was ready); `delete` per job.

use std::collections::VecDeque;
use std::time::Instant;

use bytes::Bytes;

use super::Conn;
use crate::target::{unsupported, Consumer, Got, Producer, Target};

/// A beanstalkd server.
pub struct Beanstalkd {
    /// Its address.
    pub addr: String,
    /// Label in reports (binlog or not).
    pub label: String,
    /// The tube of this run (tubes cannot be emptied: a fresh one).
    pub tube: String,
    /// Each job's time to run (its lease), whole seconds.
    pub ttr_s: u64,
}

fn expect(conn: &mut Conn, prefix: &str) -> Result<String, String> {
    let line = conn.line()?;
    if line.starts_with(prefix) {
        Ok(line)
    } else {
        Err(format!("beanstalkd answered {line:?}, wanted {prefix}"))
    }
}

impl Beanstalkd {
    fn open(&self, watch: bool) -> Result<Conn, String> {
        let mut c = Conn::open(&self.addr)?;
        if watch {
            c.put(format!("watch {}\r\nignore default\r\n", self.tube).as_bytes());
            expect(&mut c, "WATCHING")?;
            expect(&mut c, "WATCHING")?;
        } else {
            c.put(format!("use {}\r\n", self.tube).as_bytes());
            expect(&mut c, "USING")?;
        }
        Ok(c)
    }
}

impl Target for Beanstalkd {
    fn name(&self) -> String {
        format!("beanstalkd ({})", self.label)
    }

    fn prepare(&self, queues: &[String]) -> Result<(), String> {
        if queues.len() > 1 {
            // A tube per queue would cost a `use` per put and a
            // `watch`/`ignore` pair per switch: not the same code path.
            return Err(unsupported("beanstalkd", "many-queues"));
        }
        self.open(false).map(|_| ())
    }

    fn producer(&self, _queues: &[String]) -> Result<Box<dyn Producer>, String> {
        Ok(Box::new(BeanProducer {
            conn: self.open(false)?,
            ttr_s: self.ttr_s.max(1),
            in_flight: VecDeque::new(),
        }))
    }

    fn consumer(&self, _queues: &[String], delete: bool) -> Result<Box<dyn Consumer>, String> {
        Ok(Box::new(BeanConsumer {
            conn: self.open(true)?,
            delete,
            previous: Vec::new(),
        }))
    }
}

struct BeanProducer {
    conn: Conn,
    ttr_s: u64,
    in_flight: VecDeque<usize>,
}

impl Producer for BeanProducer {
    fn send(&mut self, batch: &[Bytes]) -> Result<(), String> {
        for p in batch {
            // Priority 1024, no delay, the lease as the time to run.
            self.conn
                .put(format!("put 1024 0 {} {}\r\n", self.ttr_s, p.len()).as_bytes());
            self.conn.put(p);
            self.conn.put(b"\r\n");
        }
        self.in_flight.push_back(batch.len());
        self.conn.flush()
    }

    fn confirm(&mut self) -> Result<(), String> {
        let n = self.in_flight.pop_front().ok_or("nothing in flight")?;
        for _ in 0..n {
            expect(&mut self.conn, "INSERTED")?;
        }
        Ok(())
    }
}

struct BeanConsumer {
    conn: Conn,
    delete: bool,
    previous: Vec<u64>,
}

impl BeanConsumer {
    /// Reads one reserve answer: the job, or `None` when it timed out.
    fn reserved(&mut self) -> Result<Option<(u64, Bytes)>, String> {
        let line = self.conn.line()?;
        // DEADLINE_SOON: a job this connection holds is about to run out
        // of time (only when it never deletes); nothing was reserved.
        if line.starts_with("TIMED_OUT") || line.starts_with("DEADLINE_SOON") {
            return Ok(None);
        }
        let mut parts = line.split(' ');
        match (parts.next(), parts.next(), parts.next()) {
            (Some("RESERVED"), Some(id), Some(len)) => {
                let id: u64 = id.parse().map_err(|_| format!("bad line {line:?}"))?;
                let len: usize = len.parse().map_err(|_| format!("bad line {line:?}"))?;
                Ok(Some((id, Bytes::from(self.conn.bytes(len)?))))
            }
            _ => Err(format!("beanstalkd answered {line:?} to a reserve")),
        }
    }
}

impl Consumer for BeanConsumer {
    fn step(
        &mut self,
        max: u32,
        _visibility_ms: u64,
        wait_ms: u64,
        _depth: usize,
    ) -> Result<Got, String> {
        // Deletes of the last step, then `max` non-blocking reserves, in one
        // write; beanstalkd answers in order.
        let deleting = std::mem::take(&mut self.previous);
        for id in &deleting {
            self.conn.put(format!("delete {id}\r\n").as_bytes());
        }
        for _ in 0..max {
            self.conn.put(b"reserve-with-timeout 0\r\n");
        }
        let sent = Instant::now();
        let mut deletes_us = Vec::new();
        if !deleting.is_empty() {
            for _ in &deleting {
                expect(&mut self.conn, "DELETED")?;
            }
            deletes_us.push(sent.elapsed().as_micros() as u64);
        }
        let mut payloads = Vec::new();
        let mut ids = Vec::new();
        for _ in 0..max {
            if let Some((id, p)) = self.reserved()? {
                ids.push(id);
                payloads.push(p);
            }
        }
        if payloads.is_empty() && wait_ms > 0 {
            // Whole seconds only: wait one at most.
            self.conn.put(b"reserve-with-timeout 1\r\n");
            if let Some((id, p)) = self.reserved()? {
                ids.push(id);
                payloads.push(p);
            }
        }
        if self.delete {
            self.previous = ids;
        }
        Ok(Got::new(payloads, sent.elapsed(), deletes_us))
    }

    fn finish(&mut self) -> Result<Vec<u64>, String> {
        let deleting = std::mem::take(&mut self.previous);
        let at = Instant::now();
        for id in &deleting {
            self.conn.put(format!("delete {id}\r\n").as_bytes());
        }
        for _ in &deleting {
            expect(&mut self.conn, "DELETED")?;
        }
        Ok(if deleting.is_empty() {
            Vec::new()
        } else {
            vec![at.elapsed().as_micros() as u64]
        })
    }
}
