//! What both clients share beyond fila-proto's codec: each operation as a
//! [`Call`] — the request to send and how its answer becomes a typed value
//! — the split of large batches into requests of 20, and the conversion of
//! answers into [`ClientError`]s. The blocking and async clients only move
//! bytes; what an operation means is written once, here.

use bytes::Bytes;
use fila_proto::{
    limits::BATCH_LEN_MAX, ChannelInfo, DeferredRef, DeleteRef, Encode, Entry, Fields, Halves,
    Message, MoveFilter, MoveInfo, Opcode, PayloadsRef, PutAck, PutEntry, PutRef, QueueRef,
    Receipt, ReceiveRef, Request, Response, Settings, SettingsPatch, Stats, VisibilityRef,
};

use crate::{ClientError, EntryResult, MessageUpdate, MovePreview, Result};

/// Requests of a pipelined batch helper in flight at once: enough to keep a
/// connection busy, few enough that neither side buffers much.
pub(crate) const WINDOW: usize = 32;

/// An operation: its request and how its answer reads.
pub(crate) struct Call<R, T> {
    pub(crate) req: R,
    pub(crate) parse: fn(Response) -> std::result::Result<T, Response>,
}

impl<R: Encode, T> Call<R, T> {
    /// The answer as the operation's value, or why not.
    pub(crate) fn read(&self, r: Response) -> Result<T> {
        read(self.req.opcode(), self.parse, r)
    }
}

/// An answer to a request of `op` as a value, or why not.
pub(crate) fn read<T>(
    op: Opcode,
    parse: fn(Response) -> std::result::Result<T, Response>,
    r: Response,
) -> Result<T> {
    match r {
        Response::Error(e) => Err(ClientError::Server {
            code: e.code,
            message: e.message,
        }),
        other => parse(other).map_err(|r| ClientError::Unexpected {
            op,
            answer: format!("{r:?}"),
        }),
    }
}

fn entry_results<T>(v: Vec<Entry<T>>) -> Vec<EntryResult<T>> {
    v.into_iter()
        .map(|e| {
            e.map_err(|e| ClientError::Server {
                code: e.code,
                message: e.message,
            })
        })
        .collect()
}

fn ok(r: Response) -> std::result::Result<(), Response> {
    match r {
        Response::Ok => Ok(()),
        other => Err(other),
    }
}

fn simple(req: Request) -> Call<Request, ()> {
    Call { req, parse: ok }
}

fn queue_ref(name: &str, dlq: bool) -> QueueRef {
    QueueRef {
        name: name.into(),
        dlq,
    }
}

pub(crate) fn auth(token: &str) -> Call<Request, ()> {
    simple(Request::Auth {
        token: token.into(),
    })
}

pub(crate) fn hello() -> Call<Request, (String, u32)> {
    Call {
        req: Request::Hello {
            client: format!("fila-client/{}", env!("CARGO_PKG_VERSION")),
            max_version: Some(fila_proto::VERSION),
        },
        parse: |r| match r {
            Response::Hello {
                server,
                max_frame_len,
                ..
            } => Ok((server, max_frame_len)),
            other => Err(other),
        },
    }
}

pub(crate) fn server_stats() -> Call<Request, Vec<(String, u64)>> {
    Call {
        req: Request::ServerStats,
        parse: |r| match r {
            Response::ServerStats(v) => Ok(v),
            other => Err(other),
        },
    }
}

pub(crate) fn cluster_status() -> Call<Request, fila_proto::ClusterStatus> {
    Call {
        req: Request::ClusterStatus,
        parse: |r| match r {
            Response::ClusterStatus(v) => Ok(*v),
            other => Err(other),
        },
    }
}

pub(crate) fn change_cluster(change: fila_proto::ClusterChange) -> Call<Request, ()> {
    Call {
        req: Request::ChangeCluster(change),
        parse: |r| match r {
            Response::Ok => Ok(()),
            other => Err(other),
        },
    }
}

pub(crate) fn reload() -> Call<Request, crate::Reloaded> {
    Call {
        req: Request::Reload,
        parse: |r| match r {
            Response::Reloaded {
                generation,
                tokens,
                tls,
            } => Ok(crate::Reloaded {
                generation,
                tokens,
                tls,
            }),
            other => Err(other),
        },
    }
}

pub(crate) fn create_queue(name: &str, settings: SettingsPatch) -> Call<Request, bool> {
    Call {
        req: Request::CreateQueue {
            name: name.into(),
            settings,
        },
        parse: |r| match r {
            Response::Created(c) => Ok(c),
            other => Err(other),
        },
    }
}

fn settings(r: Response) -> std::result::Result<Settings, Response> {
    match r {
        Response::Queue(s) => Ok(*s),
        other => Err(other),
    }
}

pub(crate) fn get_queue(name: &str) -> Call<Request, Settings> {
    Call {
        req: Request::GetQueue { name: name.into() },
        parse: settings,
    }
}

pub(crate) fn update_queue(name: &str, patch: SettingsPatch) -> Call<Request, Settings> {
    Call {
        req: Request::UpdateQueue {
            name: name.into(),
            settings: patch,
        },
        parse: settings,
    }
}

/// A page of names and the next page's cursor.
pub(crate) type Page = (Vec<String>, Option<String>);

pub(crate) fn list_queues_page(prefix: &str, after: &str, limit: u16) -> Call<Request, Page> {
    Call {
        req: Request::ListQueues {
            prefix: prefix.into(),
            after: after.into(),
            limit,
        },
        parse: |r| match r {
            Response::Queues { names, next } => Ok((names, next)),
            other => Err(other),
        },
    }
}

/// Where the next page starts, or `None` after the last one (a cursor that
/// does not move on would loop forever).
pub(crate) fn next_page(after: &str, next: Option<String>) -> Option<String> {
    next.filter(|n| n.as_str() > after)
}

pub(crate) fn delete_queue(name: &str, if_exists: bool) -> Call<Request, ()> {
    simple(Request::DeleteQueue {
        name: name.into(),
        if_exists,
    })
}

pub(crate) fn purge(name: &str, dlq: bool) -> Call<Request, ()> {
    simple(Request::Purge {
        queue: queue_ref(name, dlq),
    })
}

/// A pause (`pause`) or a resume of the halves `halves` names.
pub(crate) fn pause(name: &str, halves: Halves, pause: bool) -> Call<Request, Halves> {
    let name = name.into();
    Call {
        req: if pause {
            Request::PauseQueue { name, halves }
        } else {
            Request::ResumeQueue { name, halves }
        },
        parse: |r| match r {
            Response::Paused(h) => Ok(h),
            other => Err(other),
        },
    }
}

pub(crate) fn stats(name: &str) -> Call<Request, Stats> {
    Call {
        req: Request::QueueStats { name: name.into() },
        parse: |r| match r {
            Response::Stats(s) => Ok(*s),
            other => Err(other),
        },
    }
}

fn put_acks(r: Response) -> std::result::Result<Vec<EntryResult<PutAck>>, Response> {
    match r {
        Response::Put(v) => Ok(entry_results(v)),
        other => Err(other),
    }
}

/// Puts of up to 20 entries each.
pub(crate) fn puts<'a>(
    queue: &'a str,
    messages: &'a [PutEntry],
) -> impl Iterator<Item = Call<PutRef<'a>, Vec<EntryResult<PutAck>>>> + 'a {
    messages.chunks(BATCH_LEN_MAX).map(move |messages| Call {
        req: PutRef { queue, messages },
        parse: put_acks,
    })
}

/// Puts of up to 20 bare payloads each.
pub(crate) fn payload_puts<'a>(
    queue: &'a str,
    payloads: &'a [Bytes],
) -> impl Iterator<Item = Call<PayloadsRef<'a>, Vec<EntryResult<PutAck>>>> + 'a {
    payloads.chunks(BATCH_LEN_MAX).map(move |payloads| Call {
        req: PayloadsRef { queue, payloads },
        parse: put_acks,
    })
}

pub(crate) fn cancel_scheduled(queue: &str, seq: u64) -> Call<Request, ()> {
    simple(Request::CancelScheduled {
        queue: queue.into(),
        seq,
    })
}

pub(crate) fn receive(r: ReceiveRef<'_>) -> Call<ReceiveRef<'_>, Vec<Message>> {
    Call {
        req: r,
        parse: Response::into_messages,
    }
}

/// Visibility changes of up to 20 leases each.
pub(crate) fn visibilities<'a>(
    queue: &'a str,
    dlq: bool,
    changes: &'a [(Receipt, u64)],
) -> impl Iterator<Item = Call<VisibilityRef<'a>, Vec<EntryResult<u64>>>> + 'a {
    changes.chunks(BATCH_LEN_MAX).map(move |entries| Call {
        req: VisibilityRef {
            queue,
            dlq,
            entries,
        },
        parse: |r| match r {
            Response::Visibility(v) => Ok(entry_results(v)),
            other => Err(other),
        },
    })
}

/// Deletes of up to 20 receipts each.
pub(crate) fn deletes<'a>(
    queue: &'a str,
    dlq: bool,
    receipts: &'a [Receipt],
) -> impl Iterator<Item = Call<DeleteRef<'a>, Vec<EntryResult<()>>>> + 'a {
    receipts.chunks(BATCH_LEN_MAX).map(move |receipts| Call {
        req: DeleteRef {
            queue,
            dlq,
            receipts,
        },
        parse: |r| match r {
            Response::Deleted(v) => Ok(entry_results(v)),
            other => Err(other),
        },
    })
}

/// Releases as failed of up to 20 receipts each.
pub(crate) fn releases<'a>(
    queue: &'a str,
    dlq: bool,
    receipts: &'a [Receipt],
    (reason, description): (&'a str, &'a str),
) -> impl Iterator<Item = Call<Request, Vec<EntryResult<u64>>>> + 'a {
    receipts.chunks(BATCH_LEN_MAX).map(move |receipts| Call {
        req: Request::Release {
            queue: queue_ref(queue, dlq),
            receipts: receipts.to_vec(),
            reason: reason.into(),
            description: description.into(),
        },
        parse: |r| match r {
            Response::Released(v) => Ok(entry_results(v)),
            other => Err(other),
        },
    })
}

pub(crate) fn defer(queue: &str, receipt: Receipt) -> Call<Request, ()> {
    simple(Request::Defer {
        queue: queue.into(),
        receipt,
    })
}

/// Takes of up to 20 deferred messages each.
pub(crate) fn deferred<'a>(
    queue: &'a str,
    seqs: &'a [u64],
    visibility_ms: Option<u64>,
) -> impl Iterator<Item = Call<DeferredRef<'a>, Vec<EntryResult<Message>>>> + 'a {
    seqs.chunks(BATCH_LEN_MAX).map(move |seqs| Call {
        req: DeferredRef {
            queue,
            seqs,
            visibility_ms,
        },
        parse: |r| match r {
            Response::Deferred(v) => Ok(entry_results(v)),
            other => Err(other),
        },
    })
}

pub(crate) fn dead_letter(
    queue: &str,
    receipt: Receipt,
    reason: &str,
    description: &str,
) -> Call<Request, ()> {
    simple(Request::DeadLetter {
        queue: queue.into(),
        receipt,
        reason: reason.into(),
        description: description.into(),
    })
}

pub(crate) fn peek(
    queue: QueueRef,
    from_seq: u64,
    max: u8,
    fields: Fields,
) -> Call<Request, Vec<Message>> {
    Call {
        req: Request::Peek {
            queue,
            from_seq,
            max_messages: max,
            fields,
        },
        parse: Response::into_messages,
    }
}

pub(crate) fn redrive(
    queue: &str,
    max: Option<u64>,
    rate_per_second: Option<u32>,
    filter: &MoveFilter,
) -> Call<Request, (u64, u64)> {
    Call {
        req: Request::Redrive {
            queue: queue.into(),
            max_messages: max,
            rate_per_second,
            filter: filter.clone(),
        },
        parse: |r| match r {
            Response::Redrive { moved, scheduled } => Ok((moved, scheduled)),
            other => Err(other),
        },
    }
}

pub(crate) fn start_move(
    queue: &str,
    to: Option<&str>,
    max: Option<u64>,
    rate_per_second: Option<u32>,
    filter: &MoveFilter,
) -> Call<Request, MoveInfo> {
    Call {
        req: Request::StartMove {
            queue: queue.into(),
            to: to.map(str::to_owned),
            max_messages: max,
            rate_per_second,
            filter: filter.clone(),
        },
        parse: |r| match r {
            Response::Move(m) => Ok(*m),
            other => Err(other),
        },
    }
}

pub(crate) fn preview_move(
    queue: &str,
    dlq: bool,
    to: Option<&str>,
    filter: &MoveFilter,
    from_seq: u64,
) -> Call<Request, MovePreview> {
    Call {
        req: Request::PreviewMove {
            queue: queue.into(),
            dlq,
            back_to_source: !dlq && to.is_none(),
            filter: filter.clone(),
            from_seq,
        },
        parse: |r| match r {
            Response::Preview {
                matched,
                next,
                messages,
            } => Ok(MovePreview {
                matched,
                next,
                messages,
            }),
            other => Err(other),
        },
    }
}

pub(crate) fn update_message(
    queue: &QueueRef,
    receipt: Receipt,
    timeout_ms: u64,
    payload: Option<Bytes>,
) -> Call<Request, MessageUpdate> {
    Call {
        req: Request::UpdateMessage {
            queue: queue.clone(),
            receipt,
            timeout_ms,
            payload,
        },
        parse: |r| match r {
            Response::Updated {
                receipt,
                visible_at_ms,
            } => Ok(MessageUpdate {
                receipt,
                visible_at_ms,
            }),
            other => Err(other),
        },
    }
}

pub(crate) fn list_moves(queue: &str) -> Call<Request, Vec<MoveInfo>> {
    Call {
        req: Request::ListMoves {
            queue: queue.into(),
        },
        parse: |r| match r {
            Response::Moves(ms) => Ok(ms),
            other => Err(other),
        },
    }
}

pub(crate) fn cancel_move(queue: &str, id: u64) -> Call<Request, MoveInfo> {
    Call {
        req: Request::CancelMove {
            queue: queue.into(),
            id,
        },
        parse: |r| match r {
            Response::Move(m) => Ok(*m),
            other => Err(other),
        },
    }
}

pub(crate) fn delete_seq(queue: &str, dlq: bool, seq: u64) -> Call<Request, ()> {
    simple(Request::DeleteSeq {
        queue: queue_ref(queue, dlq),
        seq,
    })
}

pub(crate) fn dead_letter_seq(
    queue: &str,
    seq: u64,
    reason: &str,
    description: &str,
) -> Call<Request, ()> {
    simple(Request::DeadLetterSeq {
        queue: queue.into(),
        seq,
        reason: reason.into(),
        description: description.into(),
    })
}

pub(crate) type ChannelsPage = (Vec<ChannelInfo>, Option<String>);

pub(crate) fn channels(queue: &str, after: &str, limit: u16) -> Call<Request, ChannelsPage> {
    Call {
        req: Request::Channels {
            queue: queue.into(),
            after: after.into(),
            limit,
        },
        parse: |r| match r {
            Response::Channels { channels, next } => Ok((channels, next)),
            other => Err(other),
        },
    }
}

/// A receive of the queue (not its DLQ) with the queue's defaults.
pub(crate) fn simple_receive(queue: &str, max: u8, wait_ms: Option<u64>) -> ReceiveRef<'_> {
    ReceiveRef {
        queue,
        dlq: false,
        max_messages: max,
        visibility_ms: None,
        wait_ms,
        channel: None,
        fields: fila_proto::Fields::ALL,
    }
}
