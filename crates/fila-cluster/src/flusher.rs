//! A Raft log's syncs off openraft's path: [`Flusher`], one thread per log
//! (started at its first append), that syncs the log's newest segment and
//! then tells openraft the appends waiting for it are flushed.
//!
//! An append writes its entries and hands its callback here; every
//! callback waiting when a sync starts is completed by that sync (their
//! entries were written before they were handed over), so one `fdatasync`
//! covers every append made while the last one ran — a group commit — and
//! openraft goes on (replicating the entries, taking the next ones) while
//! the disk works. Callbacks complete in the order their appends were
//! made. A sync that fails fails the log: the callbacks waiting get the
//! error, and every later append is refused.

use std::io;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use fila_wal::SyncHandle;
use openraft::storage::IOFlushed;

use crate::TypeConfig;

/// What the thread and the log share.
#[derive(Default)]
struct State {
    /// The newest segment's sync, and the callbacks waiting for it.
    handle: Option<SyncHandle>,
    waiting: Vec<IOFlushed<TypeConfig>>,
    /// Why a sync failed, once one did.
    failed: Option<String>,
    stop: bool,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    wake: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The sync thread of one log; stopped (after the syncs waiting) when
/// dropped.
pub(crate) struct Flusher {
    shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Flusher {
    /// Starts the thread.
    pub(crate) fn start() -> io::Result<Flusher> {
        let shared = Arc::new(Shared::default());
        let thread = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("fila-raft-sync".into())
                .spawn(move || run(&shared))?
        };
        Ok(Flusher {
            shared,
            thread: Some(thread),
        })
    }

    /// Why the log takes nothing more: a sync failed.
    pub(crate) fn failed(&self) -> Option<io::Error> {
        self.shared.lock().failed.clone().map(io::Error::other)
    }

    /// Fails the log from outside (another thread's sync of it failed):
    /// the appends waiting and every later one get `why`.
    pub(crate) fn fail(&self, why: String) {
        self.shared.lock().failed.get_or_insert(why);
    }

    /// `callback` is completed once `handle` (the segment its entries were
    /// written to, after every one before it) is synced.
    pub(crate) fn after_sync(&self, handle: SyncHandle, callback: IOFlushed<TypeConfig>) {
        let mut state = self.shared.lock();
        if let Some(why) = &state.failed {
            callback.io_completed(Err(io::Error::other(why.clone())));
            return;
        }
        state.handle = Some(handle);
        state.waiting.push(callback);
        drop(state);
        self.shared.wake.notify_one();
    }
}

impl Drop for Flusher {
    fn drop(&mut self) {
        self.shared.lock().stop = true;
        self.shared.wake.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(shared: &Shared) {
    loop {
        let (handle, waiting) = {
            let mut state = shared.lock();
            while state.waiting.is_empty() && !state.stop {
                state = shared.wake.wait(state).unwrap_or_else(|p| p.into_inner());
            }
            if state.waiting.is_empty() {
                return;
            }
            let waiting = std::mem::take(&mut state.waiting);
            // After a failed sync nothing written is known to be durable,
            // whatever a later sync says.
            let handle = state.failed.is_none().then(|| state.handle.clone());
            (handle, waiting)
        };
        let failed = match handle {
            Some(handle) => match handle.map_or(Ok(()), |sync| sync()) {
                Ok(()) => None,
                Err(e) => {
                    let why = format!("syncing the Raft log: {e}");
                    shared.lock().failed.get_or_insert_with(|| why.clone());
                    Some(why)
                }
            },
            None => shared.lock().failed.clone(),
        };
        for callback in waiting {
            callback.io_completed(match &failed {
                None => Ok(()),
                Some(why) => Err(io::Error::other(why.clone())),
            });
        }
    }
}
