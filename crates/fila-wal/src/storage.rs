//! Where the log's files live: a directory of the file system
//! ([`FsStorage`]), or a simulated disk for tests ([`SimDisk`]) that keeps
//! written and synced bytes apart and can crash, tear a write, flip a bit or
//! fail a sync.

use std::collections::{BTreeMap, HashMap};
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::PathBuf;

/// The file operations the log needs, on the files of one directory.
pub trait Storage: Send {
    /// The names of the directory's files.
    fn list(&self) -> io::Result<Vec<String>>;
    /// A whole file.
    fn read(&self, name: &str) -> io::Result<Vec<u8>>;
    /// Creates an empty file (an error if it exists).
    fn create(&mut self, name: &str) -> io::Result<()>;
    /// Appends to a file.
    fn append(&mut self, name: &str, data: &[u8]) -> io::Result<()>;
    /// Writes `data` at `offset` of a file, over what is there and past
    /// its end. A storage that can only append answers `Unsupported` for
    /// an offset that is not the file's end.
    fn write_at(&mut self, name: &str, offset: u64, data: &[u8]) -> io::Result<()> {
        if offset != self.file_len(name)? {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "this storage only appends",
            ));
        }
        self.append(name, data)
    }
    /// Makes a file's written bytes durable (`fdatasync`).
    fn sync(&mut self, name: &str) -> io::Result<()>;
    /// Makes the directory's entries durable (creates, removes, renames).
    fn sync_dir(&mut self) -> io::Result<()>;
    /// Cuts a file to `len` bytes, durably.
    fn truncate(&mut self, name: &str, len: u64) -> io::Result<()>;
    /// Removes a file.
    fn remove(&mut self, name: &str) -> io::Result<()>;
    /// Renames a file, replacing `to` if it exists.
    fn rename(&mut self, from: &str, to: &str) -> io::Result<()>;
    /// Where the files are, for messages.
    fn describe(&self, name: &str) -> String;

    /// Reads up to `buf.len()` bytes of a file from `offset`; answers how
    /// many (0 at its end).
    fn read_at(&self, name: &str, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        let data = self.read(name)?;
        let start = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(data.len());
        let n = buf.len().min(data.len() - start);
        buf[..n].copy_from_slice(&data[start..start + n]);
        Ok(n)
    }
    /// A file's length.
    fn file_len(&self, name: &str) -> io::Result<u64> {
        Ok(self.read(name)?.len() as u64)
    }
    /// Makes room on the disk for a file's first `len` bytes without
    /// changing its length, so appends up to there cannot run out of space
    /// (`fallocate` with `FALLOC_FL_KEEP_SIZE`). Where the file system
    /// cannot, it does nothing; no room is `StorageFull`.
    fn preallocate(&mut self, _name: &str, _len: u64) -> io::Result<()> {
        Ok(())
    }
    /// Starts filling a file's first `len` bytes with zeros and making
    /// them durable, away from the caller (on a thread of its own), so
    /// that later writes there change only data: an `fdatasync` after
    /// them then has no file size or extent to commit. `None`: this
    /// storage does not (the file stays as it is). Until the answer is
    /// dropped the caller must not write to the file.
    fn zero_fill(&mut self, _name: &str, _len: u64) -> io::Result<Option<Zeroing>> {
        Ok(None)
    }
    /// What syncs a file's written bytes from another thread while this
    /// storage goes on writing (`None`: it cannot — a simulated disk syncs
    /// only through [`Storage::sync`]).
    fn sync_handle(&mut self, _name: &str) -> io::Result<Option<crate::SyncHandle>> {
        Ok(None)
    }
    /// Bytes free for this user on the disk the files are on, if known.
    fn free_bytes(&self) -> io::Result<Option<u64>> {
        Ok(None)
    }
    /// Whether files can be made in the directory (made and removed at
    /// once): a directory made read-only is found at start, not when a
    /// segment is due.
    fn check_writable(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Replaces the file `name` with `data` so that a crash leaves the old
/// contents or the new, whole: written to `<name>.tmp`, synced, renamed
/// over `name`, the directory synced. For small files kept beside a log (a
/// Raft vote, a state machine's snapshot).
pub fn replace_file<S: Storage + ?Sized>(
    storage: &mut S,
    name: &str,
    data: &[u8],
) -> io::Result<()> {
    replace_file_from(storage, name, &[data])
}

/// [`replace_file`] with the new contents in parts, written one after the
/// other (no copy of them joined).
pub fn replace_file_from<S: Storage + ?Sized>(
    storage: &mut S,
    name: &str,
    parts: &[&[u8]],
) -> io::Result<()> {
    let tmp = format!("{name}.tmp");
    match storage.remove(&tmp) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    storage.create(&tmp)?;
    for part in parts {
        storage.append(&tmp, part)?;
    }
    storage.sync(&tmp)?;
    storage.rename(&tmp, name)?;
    storage.sync_dir()
}

/// The whole file `name`, or `None` when there is none.
pub fn read_file<S: Storage + ?Sized>(storage: &S, name: &str) -> io::Result<Option<Vec<u8>>> {
    match storage.read(name) {
        Ok(data) => Ok(Some(data)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Whether `e` says the disk is full or the directory is closed to
/// writing: conditions that can pass (space freed, permissions mended),
/// after which what failed may be tried again.
pub fn out_of_room(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::StorageFull
            | io::ErrorKind::QuotaExceeded
            | io::ErrorKind::PermissionDenied
            | io::ErrorKind::ReadOnlyFilesystem
    )
}

/// A file being filled with zeros ([`Storage::zero_fill`]). Dropping it
/// stops the filling: it waits out the chunk being written, never the
/// final sync, and nothing more is written to the file after.
#[derive(Debug)]
pub struct Zeroing {
    /// Held while a chunk is written; `true` once told to stop.
    stop: std::sync::Arc<std::sync::Mutex<bool>>,
    /// The thread filling it, if one does.
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Zeroing {
    /// A filling already done (a storage that fills where it is asked).
    pub fn done() -> Zeroing {
        Zeroing {
            stop: std::sync::Arc::new(std::sync::Mutex::new(true)),
            thread: None,
        }
    }

    /// Waits until the whole file is filled and synced (or the filling
    /// failed).
    pub fn wait(mut self) {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Zeroing {
    fn drop(&mut self) {
        *self.stop.lock().unwrap_or_else(|p| p.into_inner()) = true;
    }
}

/// Bytes of zeros [`FsStorage`] writes at a time when it fills a file
/// (what dropping a [`Zeroing`] may wait for).
const ZERO_CHUNK: usize = 1 << 20;

/// Writes zeros over `file`'s first `len` bytes a chunk at a time, each
/// under `stop`'s lock, then syncs them; stops early once `stop` says so
/// or a write fails (the file is then partly filled: still correct).
fn fill_with_zeros(file: &File, len: u64, stop: &std::sync::Mutex<bool>) {
    use std::os::unix::fs::FileExt;
    let zeros = vec![0u8; ZERO_CHUNK];
    let mut at = 0u64;
    while at < len {
        let stopped = stop.lock().unwrap_or_else(|p| p.into_inner());
        if *stopped {
            return;
        }
        let n = (len - at).min(ZERO_CHUNK as u64) as usize;
        if file.write_all_at(&zeros[..n], at).is_err() {
            return;
        }
        drop(stopped);
        at += n as u64;
    }
    let _ = file.sync_data();
}

/// A directory of the file system.
#[derive(Debug)]
pub struct FsStorage {
    dir: PathBuf,
    open: HashMap<String, File>,
}

/// The mode of a data directory the log creates: its owner's alone.
pub const DIR_MODE: u32 = 0o700;
/// The mode of every file the log creates: its owner's alone (payloads and
/// attributes are in them).
pub const FILE_MODE: u32 = 0o600;

/// Creates `dir` (and missing parents) readable by its owner alone,
/// whatever the umask; an existing directory is left as it is.
pub fn create_private_dir(dir: &std::path::Path) -> io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    if dir.is_dir() {
        return Ok(());
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(dir)?;
    // The umask may have taken bits off (or a racing creator made it):
    // set exactly.
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(DIR_MODE))
}

/// Sets a file the log owns to [`FILE_MODE`], whatever the umask.
fn make_private(file: &File) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    if file.metadata()?.permissions().mode() & 0o777 != FILE_MODE {
        file.set_permissions(std::fs::Permissions::from_mode(FILE_MODE))?;
    }
    Ok(())
}

impl FsStorage {
    /// The directory `dir`, created if missing (mode [`DIR_MODE`]). The
    /// log's files in it (`wal-*.seg`, `snap-*.snap`, `snap.tmp`) are made
    /// [`FILE_MODE`], those found there too.
    pub fn new(dir: impl Into<PathBuf>) -> io::Result<FsStorage> {
        let dir = dir.into();
        create_private_dir(&dir)?;
        let storage = FsStorage {
            dir,
            open: HashMap::new(),
        };
        for name in storage.list()? {
            let ours = (name.starts_with("wal-") && name.ends_with(".seg"))
                || (name.starts_with("snap")
                    && (name.ends_with(".snap") || name.ends_with(".tmp")));
            if ours {
                make_private(&File::open(storage.dir.join(&name))?)?;
            }
        }
        Ok(storage)
    }

    /// The existing directory `dir`, to read: nothing is created and no
    /// file's mode changed (what `--check-data` reads through).
    pub fn existing(dir: impl Into<PathBuf>) -> FsStorage {
        FsStorage {
            dir: dir.into(),
            open: HashMap::new(),
        }
    }

    fn file(&mut self, name: &str) -> io::Result<&mut File> {
        if !self.open.contains_key(name) {
            // Not in append mode: segments are written at an offset.
            let f = OpenOptions::new().write(true).open(self.dir.join(name))?;
            self.open.insert(name.to_owned(), f);
        }
        Ok(self.open.get_mut(name).expect("just opened"))
    }
}

impl Storage for FsStorage {
    fn list(&self) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(&self.dir)? {
            let entry = entry?;
            if entry.file_type()?.is_file() {
                if let Some(n) = entry.file_name().to_str() {
                    names.push(n.to_owned());
                }
            }
        }
        names.sort();
        Ok(names)
    }

    fn read(&self, name: &str) -> io::Result<Vec<u8>> {
        // Sized from the file's length: one allocation, no regrowth.
        std::fs::read(self.dir.join(name))
    }

    fn create(&mut self, name: &str) -> io::Result<()> {
        use std::os::unix::fs::OpenOptionsExt;
        let f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(FILE_MODE)
            .open(self.dir.join(name))?;
        make_private(&f)?;
        self.open.insert(name.to_owned(), f);
        Ok(())
    }

    fn append(&mut self, name: &str, data: &[u8]) -> io::Result<()> {
        use std::io::Seek;
        let f = self.file(name)?;
        f.seek(io::SeekFrom::End(0))?;
        f.write_all(data)
    }

    fn write_at(&mut self, name: &str, offset: u64, data: &[u8]) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        self.file(name)?.write_all_at(data, offset)
    }

    fn zero_fill(&mut self, name: &str, len: u64) -> io::Result<Option<Zeroing>> {
        let file = self.file(name)?.try_clone()?;
        let stop = std::sync::Arc::new(std::sync::Mutex::new(false));
        let held = stop.clone();
        let thread = std::thread::Builder::new()
            .name("fila-wal-zeros".into())
            .spawn(move || fill_with_zeros(&file, len, &held))?;
        Ok(Some(Zeroing {
            stop,
            thread: Some(thread),
        }))
    }

    fn sync(&mut self, name: &str) -> io::Result<()> {
        self.file(name)?.sync_data()
    }

    fn sync_dir(&mut self) -> io::Result<()> {
        File::open(&self.dir)?.sync_all()
    }

    fn sync_handle(&mut self, name: &str) -> io::Result<Option<crate::SyncHandle>> {
        // A second descriptor of the same file: its `fdatasync` makes
        // what either wrote durable.
        let file = self.file(name)?.try_clone()?;
        Ok(Some(std::sync::Arc::new(move || file.sync_data())))
    }

    fn truncate(&mut self, name: &str, len: u64) -> io::Result<()> {
        let f = self.file(name)?;
        f.set_len(len)?;
        f.sync_all()
    }

    fn remove(&mut self, name: &str) -> io::Result<()> {
        self.open.remove(name);
        std::fs::remove_file(self.dir.join(name))
    }

    fn rename(&mut self, from: &str, to: &str) -> io::Result<()> {
        self.open.remove(from);
        self.open.remove(to);
        std::fs::rename(self.dir.join(from), self.dir.join(to))
    }

    fn describe(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    fn read_at(&self, name: &str, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        use std::os::unix::fs::FileExt;
        let f = File::open(self.dir.join(name))?;
        let mut n = 0;
        while n < buf.len() {
            match f.read_at(&mut buf[n..], offset + n as u64) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(n)
    }

    fn file_len(&self, name: &str) -> io::Result<u64> {
        Ok(std::fs::metadata(self.dir.join(name))?.len())
    }

    fn preallocate(&mut self, name: &str, len: u64) -> io::Result<()> {
        let f = self.file(name)?;
        match rustix::fs::fallocate(&*f, rustix::fs::FallocateFlags::KEEP_SIZE, 0, len) {
            Ok(()) => Ok(()),
            // The file system cannot: appends take room as they go.
            Err(e) if e == rustix::io::Errno::OPNOTSUPP || e == rustix::io::Errno::NOSYS => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    fn free_bytes(&self) -> io::Result<Option<u64>> {
        let st = rustix::fs::statvfs(&self.dir)?;
        Ok(Some(st.f_bavail.saturating_mul(st.f_frsize)))
    }

    fn check_writable(&mut self) -> io::Result<()> {
        use std::os::unix::fs::OpenOptionsExt;
        let probe = self.dir.join(".write-probe");
        let _ = std::fs::remove_file(&probe);
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(FILE_MODE)
            .open(&probe)?;
        std::fs::remove_file(&probe)
    }
}

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
