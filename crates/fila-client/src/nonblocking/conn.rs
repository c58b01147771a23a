//! One connection of the async client: what its callers and its two
//! tasks share (the output not yet written, the calls waiting by request
//! id), the writer and reader tasks, and a request sent and its answer.

use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::BytesMut;
use fila_proto::{split_frame, Encode, FRAME_LEN_LIMIT};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{oneshot, Notify};
use tokio::task::JoinHandle;

use crate::*;

type Answer = oneshot::Sender<Result<Response>>;

/// What callers and the connection's two tasks share.
pub(super) struct Shared {
    pub(super) state: Mutex<State>,
    /// Wakes the writer: there are bytes to send, or the connection is
    /// lost.
    pub(super) wake_writer: Notify,
}

pub(super) struct State {
    /// Requests encoded and not yet written.
    pub(super) output: BytesMut,
    /// Calls waiting for an answer, by request id.
    pub(super) pending: HashMap<u64, Answer>,
    pub(super) next_id: u64,
    /// Why the connection is gone; no request is taken any more.
    pub(super) lost: Option<String>,
}

impl Shared {
    pub(super) fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain data behind: keep
        // going with it.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Marks the connection lost: every waiting call fails at once with
    /// [`ClientError::ConnectionLost`]; nothing is sent again.
    pub(super) fn lose(&self, why: String) {
        let pending = {
            let mut st = self.state();
            st.lost.get_or_insert(why);
            std::mem::take(&mut st.pending)
        };
        drop(pending);
        self.wake_writer.notify_one();
    }

    pub(super) fn lost(&self) -> Option<String> {
        self.state().lost.clone()
    }
}

/// A connection: its shared state and its two tasks, stopped when it is
/// dropped.
pub(super) struct Conn {
    pub(super) shared: Arc<Shared>,
    pub(super) tasks: [JoinHandle<()>; 2],
}

impl Drop for Conn {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// A request sent and not yet answered.
pub(super) struct Sent {
    pub(super) shared: Arc<Shared>,
    id: u64,
    answer: oneshot::Receiver<Result<Response>>,
}

pub(super) fn not_connected(why: String) -> ClientError {
    ClientError::ConnectionLost(io::Error::new(io::ErrorKind::NotConnected, why))
}

/// Encodes `req` into the connection's output and registers its answer.
pub(super) fn register<R: Encode + ?Sized>(shared: &Arc<Shared>, req: &R) -> Result<Sent> {
    let (tx, rx) = oneshot::channel();
    let id = {
        let mut st = shared.state();
        if let Some(why) = &st.lost {
            return Err(not_connected(why.clone()));
        }
        let id = st.next_id;
        st.next_id += 1;
        req.encode(id, &mut st.output);
        st.pending.insert(id, tx);
        id
    };
    shared.wake_writer.notify_one();
    Ok(Sent {
        shared: shared.clone(),
        id,
        answer: rx,
    })
}

impl Sent {
    /// The answer, within `limit`. A call that times out is forgotten; the
    /// connection stays for the others.
    pub(super) async fn answer(self, limit: Duration) -> Result<Response> {
        match tokio::time::timeout(limit, self.answer).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => Err(not_connected(
                self.shared
                    .lost()
                    .unwrap_or_else(|| "connection closed".into()),
            )),
            Err(_) => {
                self.shared.state().pending.remove(&self.id);
                Err(ClientError::Timeout(limit))
            }
        }
    }
}

pub(super) async fn write_loop<W: AsyncWrite + Unpin>(shared: Arc<Shared>, mut w: W) {
    let mut buf = BytesMut::new();
    loop {
        shared.wake_writer.notified().await;
        {
            let mut st = shared.state();
            if st.lost.is_some() {
                return;
            }
            std::mem::swap(&mut buf, &mut st.output);
        }
        if buf.is_empty() {
            continue;
        }
        // TLS holds what it encrypted until flushed.
        if let Err(e) = async {
            w.write_all(&buf).await?;
            w.flush().await
        }
        .await
        {
            shared.lose(format!("write failed: {e}"));
            return;
        }
        buf.clear();
    }
}

pub(super) async fn read_loop<R: AsyncRead + Unpin>(shared: Arc<Shared>, mut r: R) {
    let mut input = BytesMut::with_capacity(64 << 10);
    loop {
        if input.capacity() - input.len() < 16 << 10 {
            input.reserve(64 << 10);
        }
        match r.read_buf(&mut input).await {
            Ok(0) => return shared.lose("server closed the connection".into()),
            Ok(_) => {}
            Err(e) => return shared.lose(format!("read failed: {e}")),
        }
        loop {
            let (header, body) = match split_frame(&mut input, FRAME_LEN_LIMIT) {
                Ok(Some(frame)) => frame,
                Ok(None) => break,
                Err(e) => return shared.lose(format!("protocol error: {e}")),
            };
            let answer = Response::decode(&header, body).map_err(ClientError::from);
            if header.request_id == 0 {
                // The server could not read a frame's id: it refused the
                // stream and is closing it.
                let why = match answer {
                    Ok(r) => refused(r).to_string(),
                    Err(e) => e.to_string(),
                };
                return shared.lose(format!("refused by the server: {why}"));
            }
            let waiting = shared.state().pending.remove(&header.request_id);
            if let Some(tx) = waiting {
                let _ = tx.send(answer);
            }
        }
    }
}
