//! Primitive encodings: big-endian integers, length-prefixed strings and
//! bytes, options, lists. The reader never panics and never allocates more
//! than the input could hold.

use bytes::{BufMut, Bytes, BytesMut};

use crate::error::ProtoError;

/// Reads primitives from a frame body. Byte strings are slices of the body
/// (no copy).
pub(crate) struct Reader {
    body: Bytes,
    pos: usize,
}

type R<T> = Result<T, ProtoError>;

impl Reader {
    pub(crate) fn new(body: Bytes) -> Reader {
        Reader { body, pos: 0 }
    }

    pub(crate) fn remaining(&self) -> usize {
        self.body.len() - self.pos
    }

    fn take(&mut self, n: usize) -> R<&[u8]> {
        if self.remaining() < n {
            return Err(ProtoError::Malformed("body ends early"));
        }
        let s = &self.body[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    pub(crate) fn u8(&mut self) -> R<u8> {
        Ok(self.take(1)?[0])
    }

    pub(crate) fn u16(&mut self) -> R<u16> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    pub(crate) fn u32(&mut self) -> R<u32> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub(crate) fn u64(&mut self) -> R<u64> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_be_bytes(a))
    }

    pub(crate) fn u128(&mut self) -> R<u128> {
        let mut a = [0u8; 16];
        a.copy_from_slice(self.take(16)?);
        Ok(u128::from_be_bytes(a))
    }

    pub(crate) fn bool(&mut self) -> R<bool> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(ProtoError::Malformed("a boolean is 0 or 1")),
        }
    }

    pub(crate) fn array<const N: usize>(&mut self) -> R<[u8; N]> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    /// A string: u16 length, UTF-8 bytes.
    pub(crate) fn str(&mut self) -> R<String> {
        let n = usize::from(self.u16()?);
        let b = self.take(n)?;
        std::str::from_utf8(b)
            .map(str::to_owned)
            .map_err(|_| ProtoError::Malformed("a string is not UTF-8"))
    }

    /// Bytes: u32 length, then the bytes, shared with the frame.
    pub(crate) fn bytes(&mut self) -> R<Bytes> {
        let n = self.u32()? as usize;
        if self.remaining() < n {
            return Err(ProtoError::Malformed("body ends early"));
        }
        let b = self.body.slice(self.pos..self.pos + n);
        self.pos += n;
        Ok(b)
    }

    /// A field a flag says is there (`present`), or none.
    pub(crate) fn flagged<T>(
        &mut self,
        present: bool,
        f: impl FnOnce(&mut Reader) -> R<T>,
    ) -> R<Option<T>> {
        if present {
            f(self).map(Some)
        } else {
            Ok(None)
        }
    }

    pub(crate) fn opt<T>(&mut self, f: impl FnOnce(&mut Reader) -> R<T>) -> R<Option<T>> {
        match self.u8()? {
            0 => Ok(None),
            1 => f(self).map(Some),
            _ => Err(ProtoError::Malformed("an option tag is 0 or 1")),
        }
    }

    /// A list: u16 count, then the items. Each item takes at least
    /// `min_item` bytes, which bounds the allocation by the input.
    pub(crate) fn list<T>(
        &mut self,
        min_item: usize,
        mut f: impl FnMut(&mut Reader) -> R<T>,
    ) -> R<Vec<T>> {
        let n = usize::from(self.u16()?);
        if n.saturating_mul(min_item.max(1)) > self.remaining() {
            return Err(ProtoError::Malformed("a list is longer than its frame"));
        }
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            v.push(f(self)?);
        }
        Ok(v)
    }

    /// Fails unless every byte was read.
    pub(crate) fn finish(&self) -> R<()> {
        if self.remaining() != 0 {
            return Err(ProtoError::Malformed("bytes left after the body"));
        }
        Ok(())
    }
}

/// Writes primitives into a caller's buffer.
pub(crate) struct Writer<'a>(pub(crate) &'a mut BytesMut);

impl Writer<'_> {
    pub(crate) fn u8(&mut self, v: u8) {
        self.0.put_u8(v);
    }
    pub(crate) fn u16(&mut self, v: u16) {
        self.0.put_u16(v);
    }
    pub(crate) fn u32(&mut self, v: u32) {
        self.0.put_u32(v);
    }
    pub(crate) fn u64(&mut self, v: u64) {
        self.0.put_u64(v);
    }
    pub(crate) fn u128(&mut self, v: u128) {
        self.0.put_u128(v);
    }
    pub(crate) fn bool(&mut self, v: bool) {
        self.0.put_u8(u8::from(v));
    }
    pub(crate) fn array<const N: usize>(&mut self, v: &[u8; N]) {
        self.0.put_slice(v);
    }

    /// Strings longer than 65 535 bytes are cut at a character boundary
    /// (no string field allows that many).
    pub(crate) fn str(&mut self, s: &str) {
        let mut end = s.len().min(usize::from(u16::MAX));
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        self.0.put_u16(end as u16);
        self.0.put_slice(&s.as_bytes()[..end]);
    }

    pub(crate) fn bytes(&mut self, b: &[u8]) {
        self.0
            .put_u32(u32::try_from(b.len()).expect("payloads are under 4 GiB"));
        self.0.put_slice(b);
    }

    pub(crate) fn opt<T>(&mut self, v: &Option<T>, f: impl FnOnce(&mut Self, &T)) {
        match v {
            None => self.u8(0),
            Some(x) => {
                self.u8(1);
                f(self, x);
            }
        }
    }

    /// Lists longer than 65 535 items are cut (no list allows that many).
    /// Panics on more than 65 535 items: every list the protocol carries
    /// is bounded (batches of 20, pages of 1 000), so a longer one is a
    /// bug, never something to cut short silently.
    pub(crate) fn list<T>(&mut self, items: &[T], mut f: impl FnMut(&mut Self, &T)) {
        let n = u16::try_from(items.len()).unwrap_or_else(|_| {
            panic!(
                "a list of {} items does not fit the protocol's u16 count",
                items.len()
            )
        });
        self.u16(n);
        for item in items {
            f(self, item);
        }
    }
}
