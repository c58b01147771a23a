//! Random operation sequences through the engine and the reference model
//! side by side (the model and the harness of fila-core's property test):
//! every answer, receipt outcome, delivery count, completed long poll and
//! queue's stats must agree after every step. The bytes pick the
//! operations the way the property test's strategy does.
#![no_main]

#[path = "../../crates/fila-core/tests/model/mod.rs"]
mod model;

use libfuzzer_sys::fuzz_target;
use model::harness::{Harness, Op};

/// Reads small numbers off the fuzzer's bytes; `None` when they run out.
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn u8(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }
    fn below(&mut self, n: u8) -> Option<u8> {
        Some(self.u8()? % n)
    }
    fn u16_below(&mut self, n: u16) -> Option<u16> {
        Some(u16::from_be_bytes([self.u8()?, self.u8()?]) % n)
    }
    fn bool(&mut self) -> Option<bool> {
        Some(self.u8()? & 1 == 1)
    }
    fn opt<T>(&mut self, f: impl FnOnce(&mut Self) -> Option<T>) -> Option<Option<T>> {
        if self.bool()? {
            f(self).map(Some)
        } else {
            Some(None)
        }
    }
    /// 0, or 1..n (a long poll or a timeout that is zero or not).
    fn zero_or(&mut self, n: u16) -> Option<u16> {
        if self.below(4)? == 0 {
            Some(0)
        } else {
            Some(1 + self.u16_below(n - 1)?)
        }
    }
    fn list<T>(&mut self, max: u8, mut f: impl FnMut(&mut Self) -> Option<T>) -> Option<Vec<T>> {
        let n = self.below(max + 1)?;
        (0..n).map(|_| f(self)).collect()
    }

    fn op(&mut self) -> Option<Op> {
        let q = self.below(4)?;
        Some(match self.below(48)? {
            0..=1 => Op::Create {
                q,
                vis: self.u16_below(4000)?,
                max_deliveries: self.below(4)?,
                max_messages: 1 + self.below(11)?,
                small_bytes: self.bool()?,
                pct: if self.bool()? { 100 } else { 50 },
                dloe: self.bool()?,
                target: self.opt(|b| b.below(4))?,
                wait: self.zero_or(3000)?,
            },
            2 => Op::Update {
                q,
                vis: self.opt(|b| b.u16_below(4000))?,
                max_deliveries: self.opt(|b| b.below(4))?,
                target: self.opt(|b| b.opt(|b| b.below(4)))?,
                dloe: self.opt(Self::bool)?,
                max_messages: self.opt(|b| Some(1 + b.below(11)?))?,
            },
            3 => Op::DeleteQueue(q),
            4 => Op::Purge(q, self.bool()?),
            5..=12 => Op::Put(
                q,
                self.list(4, |b| {
                    Some((
                        b.below(40)?,
                        b.below(4)?,
                        b.below(8)?,
                        b.u16_below(5000)?,
                        b.opt(|b| b.u16_below(6000))?,
                    ))
                })?,
            ),
            13..=20 => Op::Receive {
                q,
                dlq: self.bool()?,
                max: self.below(5)?,
                vis: self.opt(|b| b.u16_below(4000))?,
                wait: self.opt(|b| b.zero_or(4000))?,
                filter: self.below(6)?,
            },
            21..=23 => Op::UpdateVisibility(
                q,
                self.bool()?,
                self.list(3, |b| Some((b.u8()?, b.zero_or(4000)?)))?,
            ),
            24..=27 => Op::Delete(q, self.bool()?, self.list(3, Self::u8)?),
            28..=29 => Op::Defer(q, self.u8()?),
            30 => Op::DeadLetter(q, self.u8()?, self.bool()?),
            31..=32 => Op::ReceiveDeferred(
                q,
                self.list(3, |b| b.below(14))?,
                self.opt(|b| b.zero_or(4000))?,
            ),
            33 => Op::Peek(q, self.bool()?, self.below(14)?, self.below(6)?),
            34 => Op::Cancel(q, self.below(14)?),
            35 => Op::Redrive(
                q,
                self.opt(|b| b.below(4))?,
                self.opt(|b| b.below(3))?,
                self.below(9)?,
            ),
            42 => Op::Preview(
                q,
                self.bool()?,
                self.bool()?,
                self.below(9)?,
                self.below(14)?,
            ),
            36 => Op::CancelWait(self.u8()?),
            37 => Op::BySeq {
                q,
                dlq: self.bool()?,
                seq: self.below(14)?,
                dead_letter: self.bool()?,
                long: self.below(10)? == 0,
            },
            38..=39 => Op::Release(q, self.bool()?, self.list(3, Self::u8)?),
            40..=41 => Op::Pause(q, self.below(4)?, self.bool()?),
            _ => Op::Advance(if self.below(9)? == 0 {
                59_000 + u32::from(self.u16_below(3000)?)
            } else {
                u32::from(self.u16_below(3000)?)
            }),
        })
    }
}

fuzz_target!(|data: &[u8]| {
    let mut bytes = Bytes(data);
    let mut h = Harness::new();
    // Bounded: at most 80 operations an input.
    for _ in 0..80 {
        let Some(op) = bytes.op() else { break };
        h.step(&op);
    }
    // Let every lease, delay, poll and redrive run out.
    for _ in 0..4 {
        h.step(&Op::Advance(61_000));
    }
});
