//! Receipts: what names one lease, and the key that signs them so only the
//! engine that issued one can make one.

use crate::error::Error;

/// Names one delivery of one message. Opaque to users: it prints as 64 hex
/// digits and parses back; anything else is `receipt_invalid`.
///
/// Only the server that issued a receipt can make one: it carries a 64-bit
/// SipHash-2-4 tag of its fields under the [`ReceiptKey`] the engine drew at
/// start, checked (in constant time) before anything else, and the key's
/// boot epoch, so a receipt of an earlier run is refused.
///
/// A receipt names its lease one of two ways, as its key says: by the slot
/// the message holds and the lease's generation (version 2: a single
/// node), or by the message's sequence number, sub-queue and delivery
/// count (version 3: a cluster's partition, whose every leader holds the
/// same message under the same sequence number and count, so a committed
/// lease's receipt works on the next leader).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Receipt {
    pub(crate) epoch: u32,
    pub(crate) queue_id: u32,
    /// By slot: the slot. By sequence: the delivery count, and the DLQ in
    /// the top bit.
    pub(crate) slot: u32,
    /// By slot: the lease's generation. By sequence: the sequence number.
    pub(crate) generation: u64,
    pub(crate) tag: u64,
    pub(crate) by_seq: bool,
}

const RECEIPT_VERSION: u8 = 2;
const RECEIPT_VERSION_SEQ: u8 = 3;
const DLQ_BIT: u32 = 1 << 31;
/// Length of a receipt in bytes.
pub const RECEIPT_LEN: usize = 32;
/// The bytes of a receipt covered by its tag.
const RECEIPT_BODY: usize = 24;

/// The secret that signs receipts, and the boot epoch they carry. An engine
/// draws a random one at start ([`ReceiptKey::random`]); tests may fix one.
#[derive(Clone, Copy)]
pub struct ReceiptKey {
    /// Keyed once; each tag is a one-shot hash from this state.
    sip: siphasher::sip::SipHasher24,
    epoch: u32,
    /// Receipts name leases by sequence number (version 3).
    by_seq: bool,
}

impl PartialEq for ReceiptKey {
    fn eq(&self, other: &ReceiptKey) -> bool {
        self.sip.keys() == other.sip.keys()
            && self.epoch == other.epoch
            && self.by_seq == other.by_seq
    }
}

impl Eq for ReceiptKey {}

impl std::fmt::Debug for ReceiptKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the secret.
        f.debug_struct("ReceiptKey")
            .field("epoch", &self.epoch)
            .field("by_seq", &self.by_seq)
            .finish_non_exhaustive()
    }
}

impl ReceiptKey {
    /// A key from the operating system's random source, with a random epoch.
    pub fn random() -> ReceiptKey {
        let mut b = [0u8; 20];
        if getrandom::fill(&mut b).is_err() {
            // No OS randomness (never on the platforms fila runs on): fall
            // back to std's randomly seeded hasher keys and the time.
            use std::hash::{BuildHasher, Hasher};
            for (i, chunk) in b.chunks_mut(8).enumerate() {
                let mut h = std::collections::hash_map::RandomState::new().build_hasher();
                h.write_usize(i);
                h.write_u128(
                    std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| d.as_nanos()),
                );
                let v = h.finish().to_le_bytes();
                chunk.copy_from_slice(&v[..chunk.len()]);
            }
        }
        let u = |r: std::ops::Range<usize>| {
            let mut x = [0u8; 8];
            x[..r.len()].copy_from_slice(&b[r]);
            u64::from_le_bytes(x)
        };
        ReceiptKey::fixed(u(0..8), u(8..16), u(16..20) as u32)
    }

    /// A fixed key (tests, benches, the reference model).
    pub fn fixed(k0: u64, k1: u64, epoch: u32) -> ReceiptKey {
        ReceiptKey {
            sip: siphasher::sip::SipHasher24::new_with_keys(k0, k1),
            epoch,
            by_seq: false,
        }
    }

    /// The same key, naming leases by sequence number (version 3
    /// receipts): what a cluster's partition uses, so that every leader
    /// with the key takes the receipts of the leases it holds.
    pub fn by_sequence(mut self) -> ReceiptKey {
        self.by_seq = true;
        self
    }

    /// Whether receipts name leases by sequence number.
    pub fn names_by_sequence(&self) -> bool {
        self.by_seq
    }

    /// The boot epoch receipts carry.
    pub fn epoch(&self) -> u32 {
        self.epoch
    }

    fn tag(&self, body: &[u8]) -> u64 {
        self.sip.hash(body)
    }

    /// A signed receipt for this lease: by slot and generation, or by
    /// sequence number, sub-queue and delivery count, as the key says.
    pub(crate) fn mint(&self, queue_id: u32, lease: Lease) -> Receipt {
        let (slot, generation) = if self.by_seq {
            (lease.count | if lease.dlq { DLQ_BIT } else { 0 }, lease.seq)
        } else {
            (lease.slot, lease.generation)
        };
        let mut r = Receipt {
            epoch: self.epoch,
            queue_id,
            slot,
            generation,
            tag: 0,
            by_seq: self.by_seq,
        };
        r.tag = self.tag(&r.body());
        r
    }

    /// Whether this server issued `receipt`: `receipt_stale` for one of an
    /// earlier run (another epoch), `receipt_invalid` for a bad tag.
    pub(crate) fn verify(&self, receipt: &Receipt) -> Result<(), Error> {
        let want = self.tag(&receipt.body());
        // Constant time: every byte is compared whatever the first
        // difference, and the comparison is hidden from the optimizer.
        let diff = std::hint::black_box(want.to_le_bytes())
            .iter()
            .zip(receipt.tag.to_le_bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b));
        if std::hint::black_box(diff) != 0 {
            return Err(Error::ReceiptInvalid(
                "receipt was not issued by this server",
            ));
        }
        if receipt.by_seq != self.by_seq {
            return Err(Error::ReceiptInvalid(
                "receipt was not issued by this server",
            ));
        }
        if receipt.epoch != self.epoch {
            return Err(Error::ReceiptStale);
        }
        Ok(())
    }
}

/// What names a lease, whichever way a receipt names it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Lease {
    pub(crate) slot: u32,
    pub(crate) generation: u64,
    pub(crate) dlq: bool,
    pub(crate) seq: u64,
    pub(crate) count: u32,
}

impl Receipt {
    /// A version 3 receipt's lease: sub-queue, sequence number, delivery
    /// count.
    pub(crate) fn by_sequence(&self) -> Option<(bool, u64, u32)> {
        self.by_seq.then_some((
            self.slot & DLQ_BIT != 0,
            self.generation,
            self.slot & !DLQ_BIT,
        ))
    }

    fn body(&self) -> [u8; RECEIPT_BODY] {
        let mut b = [0u8; RECEIPT_BODY];
        b[0] = if self.by_seq {
            RECEIPT_VERSION_SEQ
        } else {
            RECEIPT_VERSION
        };
        b[1..5].copy_from_slice(&self.epoch.to_be_bytes());
        b[5..9].copy_from_slice(&self.queue_id.to_be_bytes());
        b[9..13].copy_from_slice(&self.slot.to_be_bytes());
        b[13..21].copy_from_slice(&self.generation.to_be_bytes());
        b
    }

    /// The receipt's 32 bytes: version, epoch, queue id, slot, generation,
    /// three zero bytes, then the 8-byte tag.
    pub fn to_bytes(&self) -> [u8; RECEIPT_LEN] {
        let mut b = [0u8; RECEIPT_LEN];
        b[..RECEIPT_BODY].copy_from_slice(&self.body());
        b[RECEIPT_BODY..].copy_from_slice(&self.tag.to_be_bytes());
        b
    }

    /// Parses 32 bytes made by [`Receipt::to_bytes`]. Only the shape is
    /// checked here; the engine checks the tag.
    pub fn from_bytes(b: &[u8]) -> Result<Receipt, Error> {
        if b.len() != RECEIPT_LEN {
            return Err(Error::ReceiptInvalid("a receipt is 32 bytes"));
        }
        let by_seq = match b[0] {
            RECEIPT_VERSION => false,
            RECEIPT_VERSION_SEQ => true,
            _ => return Err(Error::ReceiptInvalid("unknown receipt version")),
        };
        if b[21..RECEIPT_BODY] != [0, 0, 0] {
            return Err(Error::ReceiptInvalid(
                "receipt was not issued by this server",
            ));
        }
        let u32_at = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u64_at = |i: usize| {
            let mut x = [0u8; 8];
            x.copy_from_slice(&b[i..i + 8]);
            u64::from_be_bytes(x)
        };
        Ok(Receipt {
            epoch: u32_at(1),
            queue_id: u32_at(5),
            slot: u32_at(9),
            generation: u64_at(13),
            tag: u64_at(RECEIPT_BODY),
            by_seq,
        })
    }
}

impl std::fmt::Display for Receipt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for b in self.to_bytes() {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for Receipt {
    type Err = Error;

    fn from_str(s: &str) -> Result<Receipt, Error> {
        if s.len() != RECEIPT_LEN * 2 || !s.is_ascii() {
            return Err(Error::ReceiptInvalid("a receipt is 64 hex digits"));
        }
        let mut b = [0u8; RECEIPT_LEN];
        for (i, byte) in b.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&s[i * 2..i * 2 + 2], 16)
                .map_err(|_| Error::ReceiptInvalid("a receipt is 64 hex digits"))?;
        }
        Receipt::from_bytes(&b)
    }
}
