//! Redis Streams with a consumer group: XADD (pipelined) to put;
//! XREADGROUP COUNT 20 BLOCK to receive; XACK then XDEL to delete.

use std::collections::VecDeque;
use std::time::Instant;

use bytes::Bytes;

use super::Conn;
use crate::target::{unsupported, Consumer, Got, Producer, QueueCycle, Target};

/// A Redis server.
pub struct Redis {
    /// Its address.
    pub addr: String,
    /// Label in reports (AOF mode).
    pub label: String,
}

/// A RESP value.
#[derive(Debug)]
enum Value {
    Simple,
    Int,
    Bulk(Option<Vec<u8>>),
    Array(Option<Vec<Value>>),
}

fn command(conn: &mut Conn, parts: &[&[u8]]) {
    conn.put(format!("*{}\r\n", parts.len()).as_bytes());
    for p in parts {
        conn.put(format!("${}\r\n", p.len()).as_bytes());
        conn.put(p);
        conn.put(b"\r\n");
    }
}

fn read(conn: &mut Conn) -> Result<Value, String> {
    let line = conn.line()?;
    let (tag, rest) = line.split_at(1.min(line.len()));
    let int = |s: &str| {
        s.parse::<i64>()
            .map_err(|_| format!("bad RESP line {line:?}"))
    };
    match tag {
        "+" => Ok(Value::Simple),
        "-" => Err(format!("redis: {rest}")),
        ":" => int(rest).map(|_| Value::Int),
        "$" => match int(rest)? {
            -1 => Ok(Value::Bulk(None)),
            n => Ok(Value::Bulk(Some(conn.bytes(n as usize)?))),
        },
        "*" => match int(rest)? {
            -1 => Ok(Value::Array(None)),
            n => (0..n)
                .map(|_| read(conn))
                .collect::<Result<Vec<_>, _>>()
                .map(|v| Value::Array(Some(v))),
        },
        _ => Err(format!("bad RESP line {line:?}")),
    }
}

const GROUP: &[u8] = b"loadgen";

impl Target for Redis {
    fn name(&self) -> String {
        format!("redis streams ({})", self.label)
    }

    fn prepare(&self, queues: &[String]) -> Result<(), String> {
        let mut c = Conn::open(&self.addr)?;
        for chunk in queues.chunks(1_000) {
            for queue in chunk {
                command(&mut c, &[b"DEL", queue.as_bytes()]);
                command(
                    &mut c,
                    &[
                        b"XGROUP",
                        b"CREATE",
                        queue.as_bytes(),
                        GROUP,
                        b"$",
                        b"MKSTREAM",
                    ],
                );
            }
            c.flush()?;
            for _ in 0..2 * chunk.len() {
                read(&mut c)?;
            }
        }
        Ok(())
    }

    fn producer(&self, queues: &[String]) -> Result<Box<dyn Producer>, String> {
        Ok(Box::new(RedisProducer {
            conn: Conn::open(&self.addr)?,
            queues: queues.to_vec(),
            next: 0,
            in_flight: VecDeque::new(),
        }))
    }

    fn consumer(&self, queues: &[String], delete: bool) -> Result<Box<dyn Consumer>, String> {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        if !delete {
            // A stream redelivers only when a consumer claims what another
            // left (XAUTOCLAIM): a different code path, not a lease.
            return Err(unsupported("redis streams", "redelivery"));
        }
        Ok(Box::new(RedisConsumer {
            conn: Conn::open(&self.addr)?,
            queues: QueueCycle::new(queues),
            name: format!(
                "c{}",
                NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            ),
            previous: Vec::new(),
            deletes: VecDeque::new(),
        }))
    }
}

struct RedisProducer {
    conn: Conn,
    queues: Vec<String>,
    next: usize,
    in_flight: VecDeque<usize>,
}

impl Producer for RedisProducer {
    fn send(&mut self, batch: &[Bytes]) -> Result<(), String> {
        let queue = &self.queues[self.next % self.queues.len()];
        self.next += 1;
        for p in batch {
            command(&mut self.conn, &[b"XADD", queue.as_bytes(), b"*", b"d", p]);
        }
        self.in_flight.push_back(batch.len());
        self.conn.flush()
    }

    fn confirm(&mut self) -> Result<(), String> {
        let n = self.in_flight.pop_front().ok_or("nothing in flight")?;
        for _ in 0..n {
            match read(&mut self.conn)? {
                Value::Bulk(Some(_)) => {}
                other => return Err(format!("XADD answered {other:?}")),
            }
        }
        Ok(())
    }
}

struct RedisConsumer {
    conn: Conn,
    queues: QueueCycle,
    name: String,
    /// Ids the last read brought, from `queues.last()`.
    previous: Vec<Vec<u8>>,
    /// Deletes sent (an XACK and an XDEL each), not yet confirmed.
    deletes: VecDeque<Instant>,
}

impl RedisConsumer {
    fn send_delete(&mut self) {
        if self.previous.is_empty() {
            return;
        }
        let ids = std::mem::take(&mut self.previous);
        let queue = self.queues.last().as_bytes();
        let mut ack: Vec<&[u8]> = vec![b"XACK", queue, GROUP];
        ack.extend(ids.iter().map(|i| i.as_slice()));
        command(&mut self.conn, &ack);
        let mut del: Vec<&[u8]> = vec![b"XDEL", queue];
        del.extend(ids.iter().map(|i| i.as_slice()));
        command(&mut self.conn, &del);
        self.deletes.push_back(Instant::now());
    }

    fn confirm_delete(&mut self) -> Result<u64, String> {
        let at = self.deletes.pop_front().ok_or("no delete in flight")?;
        for _ in 0..2 {
            match read(&mut self.conn)? {
                Value::Int => {}
                other => return Err(format!("XACK/XDEL answered {other:?}")),
            }
        }
        Ok(at.elapsed().as_micros() as u64)
    }
}

impl Consumer for RedisConsumer {
    fn step(
        &mut self,
        max: u32,
        _visibility_ms: u64,
        wait_ms: u64,
        depth: usize,
    ) -> Result<Got, String> {
        // Redis answers in order: a delete is confirmed before the read
        // after it, so no more than one is ever in flight.
        self.send_delete();
        let mut deletes_us = Vec::new();
        if depth == 0 {
            // One request in flight: the delete is answered before the
            // read is sent.
            self.conn.flush()?;
            while !self.deletes.is_empty() {
                deletes_us.push(self.confirm_delete()?);
            }
        }
        let count = max.to_string();
        let block = wait_ms.max(1).to_string();
        let mut read_group: Vec<&[u8]> = vec![
            b"XREADGROUP",
            b"GROUP",
            GROUP,
            self.name.as_bytes(),
            b"COUNT",
            count.as_bytes(),
        ];
        // BLOCK 0 would wait for ever: no BLOCK at all does not wait.
        if wait_ms > 0 {
            read_group.extend([&b"BLOCK"[..], block.as_bytes()]);
        }
        read_group.extend([&b"STREAMS"[..], self.queues.current().as_bytes(), b">"]);
        command(&mut self.conn, &read_group);
        self.conn.flush()?;
        let sent = Instant::now();
        // Answers come in order: the deletes sent before this read first.
        while !self.deletes.is_empty() {
            deletes_us.push(self.confirm_delete()?);
        }
        let mut payloads = Vec::new();
        if let Value::Array(Some(streams)) = read(&mut self.conn)? {
            for s in streams {
                let Value::Array(Some(mut pair)) = s else {
                    continue;
                };
                let Some(Value::Array(Some(entries))) = pair.pop() else {
                    continue;
                };
                for e in entries {
                    let Value::Array(Some(mut e)) = e else {
                        continue;
                    };
                    let fields = e.pop();
                    let id = e.pop();
                    if let (Some(Value::Bulk(Some(id))), Some(Value::Array(Some(mut f)))) =
                        (id, fields)
                    {
                        if let Some(Value::Bulk(Some(v))) = f.pop() {
                            payloads.push(Bytes::from(v));
                        }
                        self.previous.push(id);
                    }
                }
            }
        }
        self.queues.received(payloads.len());
        Ok(Got::new(payloads, sent.elapsed(), deletes_us))
    }

    fn finish(&mut self) -> Result<Vec<u64>, String> {
        self.send_delete();
        let mut out = Vec::new();
        while !self.deletes.is_empty() {
            out.push(self.confirm_delete()?);
        }
        Ok(out)
    }
}
