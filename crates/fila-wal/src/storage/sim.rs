//! The simulated disk for tests ([`SimDisk`]): written and synced bytes
//! kept apart, crashes, torn writes, flipped bits, failed syncs, a
//! capacity and a read-only directory.

use std::collections::BTreeMap;
use std::io;

use super::{Storage, Zeroing};

/// Bytes a torn write keeps whole: a write cut short by a crash keeps a
/// prefix of this many bytes at a time.
pub const SECTOR: usize = 512;

#[derive(Clone, Debug, Default)]
struct SimFile {
    /// Every byte written.
    data: Vec<u8>,
    /// How many of them are durable.
    synced: usize,
    /// Whether the directory entry is durable.
    entry_synced: bool,
    /// Room preallocated for it (its length stays `data.len()`).
    reserved: usize,
    /// Writes over durable bytes since the last sync, in the order made:
    /// where, and the bytes they replaced (a crash may bring those back).
    overwrites: Vec<(usize, Vec<u8>)>,
}

impl SimFile {
    /// The room it takes on the disk.
    fn room(&self) -> usize {
        self.data.len().max(self.reserved)
    }
}

/// A simulated disk for tests. Writes land in memory; only synced bytes
/// (and directory entries made durable by [`Storage::sync_dir`]) are sure
/// to survive [`SimDisk::crash`], which keeps a random prefix of each
/// file's unsynced bytes, cut at a sector boundary or not.
#[derive(Clone, Debug, Default)]
pub struct SimDisk {
    files: BTreeMap<String, SimFile>,
    /// Files removed since the last directory sync: a crash may bring
    /// them back with their synced bytes.
    removed: BTreeMap<String, SimFile>,
    /// Files a rename replaced since the last directory sync: a rename is
    /// atomic, so a crash that loses the new entry brings the old one back.
    replaced: BTreeMap<String, SimFile>,
    fail_syncs: u32,
    /// Mutating operations left before the process "dies": every later
    /// one fails until [`SimDisk::crash`].
    ops_left: Option<u32>,
    rng: u64,
    /// Bytes the disk holds at most (`None`: no limit).
    capacity: Option<usize>,
    /// The directory refuses new entries, renames and removals.
    read_only: bool,
}

impl SimDisk {
    /// An empty disk whose crashes are drawn from `seed`.
    pub fn new(seed: u64) -> SimDisk {
        SimDisk {
            rng: seed | 1,
            ..SimDisk::default()
        }
    }

    fn next(&mut self) -> u64 {
        // xorshift64*
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// The process dies and the machine restarts: each file keeps its
    /// synced bytes and a random prefix of the rest (at a sector boundary
    /// half of the time); entries not made durable may vanish, removes not
    /// made durable may be undone (a file a rename replaced is back when
    /// the new entry vanished).
    pub fn crash(&mut self) {
        self.ops_left = None;
        let names: Vec<String> = self.files.keys().cloned().collect();
        for name in names {
            let keep_entry = self.next().is_multiple_of(2);
            let roll = self.next();
            let f = self.files.get_mut(&name).expect("listed");
            if !f.entry_synced && !keep_entry {
                self.files.remove(&name);
                continue;
            }
            // Writes over durable bytes: a prefix of them, in the order
            // made, reached the disk, cut at a sector boundary (the file's
            // length did not change, so only whole sectors are written).
            let over: usize = f.overwrites.iter().map(|o| o.1.len()).sum();
            let mut left = if over == 0 {
                0
            } else {
                (roll.rotate_left(17) % (over as u64 + 1)) as usize
            };
            let mut cut_short = false;
            let mut keep = Vec::with_capacity(f.overwrites.len());
            for (at, old) in &f.overwrites {
                let k = if cut_short { 0 } else { left.min(old.len()) };
                left -= k;
                let k = if k < old.len() {
                    cut_short = true;
                    let end = at + k;
                    (end - end % SECTOR).max(*at) - at
                } else {
                    k
                };
                keep.push(k);
            }
            for ((at, old), k) in f.overwrites.drain(..).zip(keep).rev() {
                let end = (at + old.len()).min(f.data.len());
                if at + k < end {
                    f.data[at + k..end].copy_from_slice(&old[k..end - at]);
                }
            }
            if cut_short {
                // Nothing written after the cut reached the disk.
                f.data.truncate(f.synced);
            }
            let unsynced = f.data.len() - f.synced;
            let mut kept = if unsynced == 0 {
                0
            } else {
                (roll % (unsynced as u64 + 1)) as usize
            };
            if roll & (1 << 40) != 0 {
                // Torn at a sector boundary (never below what was synced).
                let end = f.synced + kept;
                kept = (end - end % SECTOR).max(f.synced) - f.synced;
            }
            f.data.truncate(f.synced + kept);
            f.synced = f.data.len();
            f.entry_synced = true;
        }
        for (name, mut f) in std::mem::take(&mut self.replaced) {
            if let std::collections::btree_map::Entry::Vacant(e) = self.files.entry(name) {
                f.data.truncate(f.synced);
                f.entry_synced = true;
                e.insert(f);
            }
        }
        let removed = std::mem::take(&mut self.removed);
        for (name, mut f) in removed {
            if self.next().is_multiple_of(2) && !self.files.contains_key(&name) {
                f.data.truncate(f.synced);
                f.entry_synced = true;
                self.files.insert(name, f);
            }
        }
    }

    /// Makes the disk hold at most `bytes` (every file's length or
    /// preallocated room, whichever is more), or no limit: writes past it
    /// fail `StorageFull` after writing what fits.
    pub fn set_capacity(&mut self, bytes: Option<usize>) {
        self.capacity = bytes;
    }

    /// Makes the directory read-only (its files stay writable), or not.
    pub fn set_read_only(&mut self, read_only: bool) {
        self.read_only = read_only;
    }

    /// Bytes the files take on the disk.
    pub fn used(&self) -> usize {
        self.files.values().map(SimFile::room).sum()
    }

    fn no_room() -> io::Error {
        io::Error::new(io::ErrorKind::StorageFull, "simulated disk full")
    }

    fn refuse_entry(&self) -> io::Result<()> {
        if self.read_only {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "simulated read-only directory",
            ));
        }
        Ok(())
    }

    /// Flips one bit of a file (a bad sector, a cosmic ray).
    pub fn flip_bit(&mut self, name: &str, offset: usize, bit: u8) {
        if let Some(f) = self.files.get_mut(name) {
            if let Some(b) = f.data.get_mut(offset) {
                *b ^= 1 << (bit % 8);
            }
        }
    }

    /// The next `n` syncs fail.
    pub fn fail_syncs(&mut self, n: u32) {
        self.fail_syncs = n;
    }

    /// The process dies after `n` more mutating operations (appends,
    /// syncs, creates, renames, removes, truncates): every one after that
    /// fails, as if nothing more reached the disk, until [`SimDisk::crash`].
    pub fn die_after(&mut self, n: u32) {
        self.ops_left = Some(n);
    }

    fn op(&mut self) -> io::Result<()> {
        match &mut self.ops_left {
            Some(0) => Err(io::Error::other("simulated process death")),
            Some(n) => {
                *n -= 1;
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// A file's length, written bytes included.
    pub fn len(&self, name: &str) -> Option<usize> {
        self.files.get(name).map(|f| f.data.len())
    }

    fn get(&mut self, name: &str) -> io::Result<&mut SimFile> {
        self.files
            .get_mut(name)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, name.to_owned()))
    }
}

impl Storage for SimDisk {
    fn list(&self) -> io::Result<Vec<String>> {
        Ok(self.files.keys().cloned().collect())
    }

    fn read(&self, name: &str) -> io::Result<Vec<u8>> {
        self.files
            .get(name)
            .map(|f| f.data.clone())
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, name.to_owned()))
    }

    fn create(&mut self, name: &str) -> io::Result<()> {
        self.op()?;
        self.refuse_entry()?;
        if self.files.contains_key(name) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                name.to_owned(),
            ));
        }
        self.files.insert(name.to_owned(), SimFile::default());
        Ok(())
    }

    fn append(&mut self, name: &str, data: &[u8]) -> io::Result<()> {
        self.op()?;
        let free = self
            .capacity
            .map(|c| c.saturating_sub(self.used()))
            .unwrap_or(usize::MAX);
        let f = self.get(name)?;
        // Room it holds already (preallocated) plus what the disk has.
        let fits = f.reserved.saturating_sub(f.data.len()).saturating_add(free);
        let n = data.len().min(fits);
        f.data.extend_from_slice(&data[..n]);
        if n < data.len() {
            return Err(SimDisk::no_room());
        }
        Ok(())
    }

    fn write_at(&mut self, name: &str, offset: u64, data: &[u8]) -> io::Result<()> {
        let f = self.get(name)?;
        let at = usize::try_from(offset).unwrap_or(usize::MAX);
        if at > f.data.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a simulated write past a file's end",
            ));
        }
        // Over what is there (durable bytes remembered, for a crash),
        // then appended.
        let over = data.len().min(f.data.len() - at);
        if over > 0 {
            self.op()?;
            let f = self.get(name)?;
            let durable = f.synced.saturating_sub(at).min(over);
            if durable > 0 {
                let old = f.data[at..at + durable].to_vec();
                f.overwrites.push((at, old));
            }
            f.data[at..at + over].copy_from_slice(&data[..over]);
        }
        if over < data.len() {
            self.append(name, &data[over..])?;
        }
        Ok(())
    }

    fn zero_fill(&mut self, name: &str, len: u64) -> io::Result<Option<Zeroing>> {
        // Done where it is asked, and durable at once.
        self.op()?;
        let used = self.used();
        let capacity = self.capacity;
        let f = self.get(name)?;
        let want = usize::try_from(len).unwrap_or(usize::MAX);
        if want > f.data.len() {
            let more = want.saturating_sub(f.data.len().max(f.reserved));
            if capacity.is_some_and(|c| used.saturating_add(more) > c) {
                return Err(SimDisk::no_room());
            }
            f.data.resize(want, 0);
        }
        f.synced = f.data.len();
        f.overwrites.clear();
        Ok(Some(Zeroing::done()))
    }

    fn sync(&mut self, name: &str) -> io::Result<()> {
        self.op()?;
        if self.fail_syncs > 0 {
            self.fail_syncs -= 1;
            return Err(io::Error::other("simulated fsync failure"));
        }
        let f = self.get(name)?;
        f.synced = f.data.len();
        f.overwrites.clear();
        Ok(())
    }

    fn sync_dir(&mut self) -> io::Result<()> {
        self.op()?;
        if self.fail_syncs > 0 {
            self.fail_syncs -= 1;
            return Err(io::Error::other("simulated fsync failure"));
        }
        for f in self.files.values_mut() {
            f.entry_synced = true;
        }
        self.removed.clear();
        self.replaced.clear();
        Ok(())
    }

    fn truncate(&mut self, name: &str, len: u64) -> io::Result<()> {
        self.op()?;
        let f = self.get(name)?;
        f.data.truncate(len as usize);
        f.synced = f.synced.min(f.data.len());
        // What a write replaced past the cut is gone either way.
        let end = f.data.len();
        f.overwrites.retain_mut(|(at, old)| {
            old.truncate(end.saturating_sub(*at));
            !old.is_empty()
        });
        Ok(())
    }

    fn remove(&mut self, name: &str) -> io::Result<()> {
        self.op()?;
        self.refuse_entry()?;
        let f = self
            .files
            .remove(name)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, name.to_owned()))?;
        if f.entry_synced {
            self.removed.insert(name.to_owned(), f);
        }
        Ok(())
    }

    fn rename(&mut self, from: &str, to: &str) -> io::Result<()> {
        self.op()?;
        self.refuse_entry()?;
        let mut f = self
            .files
            .remove(from)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, from.to_owned()))?;
        f.entry_synced = false;
        if let Some(old) = self.files.insert(to.to_owned(), f) {
            if old.entry_synced {
                self.replaced.entry(to.to_owned()).or_insert(old);
            }
        }
        Ok(())
    }

    fn describe(&self, name: &str) -> String {
        format!("sim:{name}")
    }

    fn read_at(&self, name: &str, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        let f = self
            .files
            .get(name)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, name.to_owned()))?;
        let start = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(f.data.len());
        let n = buf.len().min(f.data.len() - start);
        buf[..n].copy_from_slice(&f.data[start..start + n]);
        Ok(n)
    }

    fn file_len(&self, name: &str) -> io::Result<u64> {
        self.files
            .get(name)
            .map(|f| f.data.len() as u64)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, name.to_owned()))
    }

    fn preallocate(&mut self, name: &str, len: u64) -> io::Result<()> {
        self.op()?;
        let used = self.used();
        let capacity = self.capacity;
        let f = self.get(name)?;
        let want = usize::try_from(len).unwrap_or(usize::MAX);
        let more = want.saturating_sub(f.room());
        if capacity.is_some_and(|c| used.saturating_add(more) > c) {
            return Err(SimDisk::no_room());
        }
        f.reserved = f.reserved.max(want);
        Ok(())
    }

    fn free_bytes(&self) -> io::Result<Option<u64>> {
        Ok(self.capacity.map(|c| c.saturating_sub(self.used()) as u64))
    }

    fn check_writable(&mut self) -> io::Result<()> {
        self.refuse_entry()
    }
}
