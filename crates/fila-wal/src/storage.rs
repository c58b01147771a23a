//! Where the log's files live: a directory of the file system
//! ([`FsStorage`]), or a simulated disk for tests ([`SimDisk`]) that keeps
//! written and synced bytes apart and can crash, tear a write, flip a bit or
//! fail a sync.

use std::collections::HashMap;
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
    /// A second handle on the same directory, for work done on another
    /// thread while the log goes on with this one (a snapshot written and
    /// synced away from it: [`crate::DetachedSnapshot`]). `None`: this
    /// storage has no other (a simulated disk is one value).
    fn beside(&self) -> Option<Self>
    where
        Self: Sized,
    {
        None
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

    fn beside(&self) -> Option<Self> {
        Some(FsStorage {
            dir: self.dir.clone(),
            open: HashMap::new(),
        })
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

mod sim;
pub use sim::{SimDisk, SECTOR};
