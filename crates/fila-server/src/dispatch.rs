//! From a decoded request to an engine call and back to an answer: the
//! conversions between wire types and engine types live here and nowhere
//! else.

use fila_core::{
    Address, Availability, ChannelFilter, Error, ErrorKind, Message, NewMessage, Owner,
    QueueSettings, Receipt, ReceiveOptions, Received, SettingsUpdate, State, VisibilityChange,
    WaitId, Wake,
};
use fila_proto::{self as proto, ErrorCode, Request, Response, WireError};

use crate::auth::{self, TokenId};

/// Names one list page holds at most (and when the request says 0).
pub(crate) const LIST_PAGE_MAX: usize = 1_000;

/// Bytes of an error message at most; a longer one is cut with a marker.
const ERROR_MESSAGE_MAX: usize = 4_096;

/// What handling a request came to.
pub(crate) enum Outcome {
    /// Answer now.
    Answer(Answer),
    /// A receive parked in the engine; its answer is a completion of the
    /// owner's, reported under its `WaitId`.
    Parked(WaitId),
}

/// Who is asking: the connection's authentication.
pub(crate) struct Caller<'a> {
    /// The token table (empty: no authentication).
    pub tokens: &'a crate::auth::TokenTable,
    /// The token this connection presented, if any.
    pub token: Option<TokenId>,
}

pub(crate) fn code_of(kind: ErrorKind) -> ErrorCode {
    match kind {
        ErrorKind::InvalidArgument => ErrorCode::INVALID_ARGUMENT,
        ErrorKind::QueueNotFound => ErrorCode::QUEUE_NOT_FOUND,
        ErrorKind::QueueExists => ErrorCode::QUEUE_EXISTS,
        ErrorKind::QueueFull => ErrorCode::QUEUE_FULL,
        ErrorKind::QueueDeleted => ErrorCode::QUEUE_DELETED,
        ErrorKind::MessageTooLarge => ErrorCode::MESSAGE_TOO_LARGE,
        ErrorKind::ReceiptStale => ErrorCode::RECEIPT_STALE,
        ErrorKind::ReceiptInvalid => ErrorCode::RECEIPT_INVALID,
        ErrorKind::NotFound => ErrorCode::NOT_FOUND,
        ErrorKind::Expired => ErrorCode::EXPIRED,
        ErrorKind::ResourceExhausted => ErrorCode::RESOURCE_EXHAUSTED,
        ErrorKind::QueuePaused => ErrorCode::QUEUE_PAUSED,
    }
}

pub(crate) fn wire_error(e: &Error) -> WireError {
    WireError {
        code: code_of(e.kind()),
        message: bounded(e.to_string()),
    }
}

pub(crate) fn error(code: ErrorCode, message: impl Into<String>) -> Response {
    Response::Error(WireError {
        code,
        message: bounded(message.into()),
    })
}

/// An error message may quote what the client sent (a queue name of any
/// length, say): keep it to [`ERROR_MESSAGE_MAX`] bytes, saying so.
fn bounded(mut message: String) -> String {
    if message.len() > ERROR_MESSAGE_MAX {
        let mut end = ERROR_MESSAGE_MAX - 32;
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        message.truncate(end);
        message.push_str(" … (message cut at 4 KiB)");
    }
    message
}

fn update_of(p: proto::SettingsPatch) -> SettingsUpdate {
    SettingsUpdate {
        visibility_timeout_ms: p.visibility_timeout_ms,
        max_deliveries: p.max_deliveries,
        retention_ms: p.retention_ms,
        max_message_bytes: p.max_message_bytes,
        receive_wait_default_ms: p.receive_wait_default_ms,
        dead_letter_on_expiration: p.dead_letter_on_expiration,
        dead_letter_target: p.dead_letter_target,
        max_messages: p.max_messages,
        max_bytes: p.max_bytes,
        channel_capacity_pct: p.channel_capacity_pct,
        delay_ms: p.delay_ms,
        redrive_allow: p.redrive_allow,
        dedup_window_ms: p.dedup_window_ms,
        content_dedup: p.content_dedup,
        ordered: p.ordered,
        priority_levels: p.priority_levels,
        priority_fairness: p.priority_fairness,
        retry_initial_ms: p.retry_initial_ms,
        retry_multiplier_pct: p.retry_multiplier_pct,
        retry_max_ms: p.retry_max_ms,
        retry_jitter_pct: p.retry_jitter_pct,
        attempt_history: p.attempt_history,
        tags_set: p.tags_set,
        tags_remove: p.tags_remove,
    }
}

/// The halves a request names, as the engine's.
fn pause_of(h: proto::Halves) -> fila_core::Pause {
    fila_core::Pause {
        receive: h.receive,
        send: h.send,
    }
}

/// What is paused, as the protocol's.
fn halves_of(p: fila_core::Pause) -> proto::Halves {
    proto::Halves {
        receive: p.receive,
        send: p.send,
    }
}

fn settings_of(s: QueueSettings) -> proto::Settings {
    proto::Settings {
        visibility_timeout_ms: s.visibility_timeout_ms,
        max_deliveries: s.max_deliveries,
        retention_ms: s.retention_ms,
        max_message_bytes: s.max_message_bytes,
        receive_wait_default_ms: s.receive_wait_default_ms,
        dead_letter_on_expiration: s.dead_letter_on_expiration,
        dead_letter_target: s.dead_letter_target,
        max_messages: s.max_messages,
        max_bytes: s.max_bytes,
        channel_capacity_pct: s.channel_capacity_pct,
        delay_ms: s.delay_ms,
        redrive_allow: s.redrive_allow,
        tags: s.tags,
        dedup_window_ms: s.dedup_window_ms,
        content_dedup: s.content_dedup,
        ordered: s.ordered,
        priority_levels: s.priority_levels,
        priority_fairness: s.priority_fairness,
        retry_initial_ms: s.retry_initial_ms,
        retry_multiplier_pct: s.retry_multiplier_pct,
        retry_max_ms: s.retry_max_ms,
        retry_jitter_pct: s.retry_jitter_pct,
        paused: proto::Halves {
            receive: s.receive_paused,
            send: s.send_paused,
        },
        attempt_history: s.attempt_history,
    }
}

/// An engine message as an owned wire message (a receive-deferred's
/// entries; receives and peeks are encoded from views instead).
pub(crate) fn message_of(m: Message) -> proto::Message {
    view_of(&m).to_message(m.payload.to_bytes())
}

/// A receive's or peek's answer with the fields it asked for: the engine's
/// messages, encoded from borrowed views when written (with their failed
/// attempts — asked for by few, a debugging look — from owned wire
/// messages).
pub(crate) fn messages_of(ms: Vec<Message>, fields: proto::Fields) -> Answer {
    Answer::Messages(fields, ms)
}

/// An engine message as an owned wire message with its failed attempts.
fn with_attempts(m: &Message) -> proto::Message {
    let mut wire = view_of(m).to_message(m.payload.to_bytes());
    wire.attempts = attempts_of(m);
    wire
}

/// An engine message's failed attempts as the wire shows them.
fn attempts_of(m: &Message) -> Vec<proto::Attempt> {
    m.attempts.as_deref().map_or_else(Vec::new, |attempts| {
        attempts
            .iter()
            .map(|a| proto::Attempt {
                at_ms: a.at_ms,
                delivery: a.delivery,
                end: match a.end {
                    fila_core::AttemptEnd::Expired => 1,
                    fila_core::AttemptEnd::Released => 2,
                    fila_core::AttemptEnd::DeadLettered => 3,
                },
                reason: a.reason.clone(),
                description: a.description.clone(),
            })
            .collect()
    })
}

/// An answer to write: a wire response, or messages encoded straight from
/// the engine's (no conversion to wire types: the payload is written from
/// its stored buffer, attributes and names from their stored strings).
pub(crate) enum Answer {
    Wire(Response),
    Messages(proto::Fields, Vec<Message>),
}

impl From<Response> for Answer {
    fn from(r: Response) -> Answer {
        Answer::Wire(r)
    }
}

impl Answer {
    /// The error answer of `e`.
    pub(crate) fn failed(e: &Error) -> Answer {
        Answer::Wire(Response::Error(wire_error(e)))
    }

    /// The latest insertion time of the messages it hands out (a
    /// receive's, a peek's, a receive-deferred's); `None` when it hands
    /// out none.
    pub(crate) fn newest_message(&self) -> Option<u64> {
        match self {
            Answer::Messages(_, ms) => ms.iter().map(|m| m.inserted_at_ms).max(),
            Answer::Wire(
                Response::Messages(ms)
                | Response::Selected(_, ms)
                | Response::Preview { messages: ms, .. },
            ) => ms.iter().map(|m| m.inserted_at_ms).max(),
            Answer::Wire(Response::Deferred(entries)) => entries
                .iter()
                .filter_map(|e| e.as_ref().ok())
                .map(|m| m.inserted_at_ms)
                .max(),
            Answer::Wire(_) => None,
        }
    }

    /// The receipts of the leases it hands out (none for answers that
    /// lease nothing).
    pub(crate) fn receipts(&self) -> Vec<Receipt> {
        match self {
            Answer::Messages(_, ms) => ms.iter().filter_map(|m| m.receipt).collect(),
            Answer::Wire(Response::Deferred(entries)) => entries
                .iter()
                .filter_map(|e| e.as_ref().ok()?.receipt.as_ref())
                .filter_map(|r| Receipt::from_bytes(r).ok())
                .collect(),
            Answer::Wire(Response::Messages(ms) | Response::Selected(_, ms)) => ms
                .iter()
                .filter_map(|m| m.receipt.as_ref())
                .filter_map(|r| Receipt::from_bytes(r).ok())
                .collect(),
            Answer::Wire(_) => Vec::new(),
        }
    }

    /// Whether it is an error answer.
    pub(crate) fn is_error(&self) -> bool {
        matches!(self, Answer::Wire(Response::Error(_)))
    }

    /// An error answer's code.
    pub(crate) fn code(&self) -> Option<ErrorCode> {
        match self {
            Answer::Wire(Response::Error(e)) => Some(e.code),
            _ => None,
        }
    }

    /// Appends its whole frame, answering request `request_id` of
    /// `opcode`, to `buf`, in protocol version `version`.
    pub(crate) fn encode(
        &self,
        version: u8,
        opcode: u8,
        request_id: u64,
        buf: &mut bytes::BytesMut,
    ) {
        match self {
            Answer::Wire(r) => r.encode_in(version, opcode, request_id, buf),
            Answer::Messages(fields, ms) if fields.contains(proto::Fields::ATTEMPTS) => {
                let ms = ms.iter().map(with_attempts).collect();
                Response::Selected(*fields, ms).encode_in(version, opcode, request_id, buf)
            }
            Answer::Messages(fields, ms) => proto::encode_messages_in(
                version,
                opcode,
                request_id,
                *fields,
                ms.iter().map(view_of),
                buf,
            ),
        }
    }
}

/// An engine message as the wire shows it, borrowed.
fn view_of(m: &Message) -> proto::MessageRef<'_, Box<str>> {
    proto::MessageRef {
        id: m.id.0,
        seq: m.seq,
        payload: &m.payload,
        attributes: m.attributes.as_deref().unwrap_or_default(),
        channel: m.channel.as_deref(),
        inserted_at_ms: m.inserted_at_ms,
        expires_at_ms: m.expires_at_ms,
        next_visible_at_ms: m.next_visible_at_ms,
        delivery_count: m.delivery_count,
        state: state_code(m.state),
        receipt: m.receipt.map(|r| r.to_bytes()),
        dead_letter: m.dead_letter.as_deref().map(|d| {
            let (reason, consumer_reason, description) = reason_of(&d.reason);
            proto::DeadLetterRef {
                source_queue: &d.source_queue,
                at_ms: d.at_ms,
                reason,
                consumer_reason,
                description,
                delivery_count: d.delivery_count,
            }
        }),
        group: m.group.as_deref(),
        priority: m.priority,
        // Written only when asked for, from owned messages (`messages_of`).
        attempts: &[],
    }
}

fn state_code(s: State) -> u8 {
    match s {
        State::Visible => 1,
        State::InFlight => 2,
        State::Delayed => 3,
        State::Deferred => 4,
        State::DeadLettered => 5,
    }
}

/// A dead-letter reason's code, and the consumer's reason and description.
fn reason_of(r: &fila_core::DeadLetterReason) -> (u8, &str, &str) {
    match r {
        fila_core::DeadLetterReason::MaxDeliveries => (1, "", ""),
        fila_core::DeadLetterReason::Expired => (2, "", ""),
        fila_core::DeadLetterReason::Consumer {
            reason,
            description,
        } => (3, reason, description),
    }
}

fn entries<T, U>(v: Vec<Result<T, Error>>, f: impl Fn(T) -> U) -> Vec<proto::Entry<U>> {
    v.into_iter()
        .map(|r| r.map(&f).map_err(|e| wire_error(&e)))
        .collect()
}

/// Runs a batch operation on the entries whose receipts parsed; an entry
/// whose receipt did not parse fails alone, in its place.
fn parsed_entries<T: Copy, U>(
    parsed: Vec<Result<T, Error>>,
    op: impl FnOnce(&[T]) -> Result<Vec<Result<U, Error>>, Error>,
) -> Result<Vec<Result<U, Error>>, Error> {
    let good: Vec<T> = parsed
        .iter()
        .filter_map(|p| p.as_ref().ok().copied())
        .collect();
    let mut done = if good.is_empty() {
        Vec::new()
    } else {
        op(&good)?
    }
    .into_iter();
    Ok(parsed
        .into_iter()
        .map(|p| match p {
            Ok(_) => done.next().expect("one answer per good entry"),
            Err(e) => Err(e),
        })
        .collect())
}

fn receipt(r: &proto::Receipt) -> Result<Receipt, Error> {
    Receipt::from_bytes(r)
}

fn address(q: &proto::QueueRef) -> Address<'_> {
    Address {
        queue: &q.name,
        dlq: q.dlq,
    }
}

/// The error answer of `e`.
fn failed(e: &Error) -> Outcome {
    Outcome::Answer(Answer::failed(e))
}

fn answer<T, A: Into<Answer>>(r: Result<T, Error>, f: impl FnOnce(T) -> A) -> Outcome {
    match r {
        Ok(v) => Outcome::Answer(f(v).into()),
        Err(e) => failed(&e),
    }
}

/// Receive-deferred of the entries whose messages fit `room`, in order;
/// one that would not fit (behind one that did) is left deferred and
/// answers `resource_exhausted`, to be taken by a later request.
fn receive_deferred_within(
    engine: &mut Owner,
    queue: &str,
    seqs: &[u64],
    visibility_ms: Option<u64>,
    room: usize,
) -> Result<Vec<Result<Message, Error>>, Error> {
    fila_core::check_batch("sequence_numbers", seqs.len())?;
    let mut used = 0u64;
    let mut out = Vec::with_capacity(seqs.len());
    for &seq in seqs {
        let size = engine
            .peek(Address::queue(queue), seq, 1)?
            .first()
            .filter(|m| m.seq == seq)
            .map_or(0, |m| {
                fila_core::answer_bytes(
                    m.payload.len(),
                    m.attributes.as_ref(),
                    m.channel.as_deref(),
                    m.dead_letter.as_deref(),
                )
            });
        if used > 0 && used + size > room as u64 {
            out.push(Err(Error::ResourceExhausted {
                limit: "the answer room of this connection (ask for this entry again)",
                max: room as u64,
            }));
            continue;
        }
        used += size;
        out.push(
            engine
                .receive_deferred(queue, &[seq], visibility_ms)?
                .remove(0),
        );
    }
    Ok(out)
}

/// Whether the caller may make this request: `Some(forbidden)` when not.
/// Checked where the connection lives, before the request goes to the
/// owner of its queue's shard.
pub(crate) fn authorize(caller: &Caller<'_>, req: &Request) -> Option<Response> {
    let token = caller.token?;
    let forbidden = |queue: &str, permission: auth::Permission| {
        Some(error(
            ErrorCode::FORBIDDEN,
            format!("forbidden: this token may not {permission:?} on queue {queue:?}")
                .to_lowercase(),
        ))
    };
    // A queue's settings are read by anyone granted anything on it (a
    // consumer needs its visibility timeout and dead-letter target, as a
    // worker does at start).
    if let Request::GetQueue { name } = req {
        if caller.tokens.sees(token, name) {
            return None;
        }
    }
    if let Some((queue, permission)) = auth::needs(req) {
        if !caller.tokens.allows(token, queue, permission) {
            return forbidden(queue, permission);
        }
    }
    // Naming a dead-letter target sends messages there: it needs send on
    // the target, checked before anything about the target (whether it
    // exists) is looked at.
    if let Request::CreateQueue { settings, .. } | Request::UpdateQueue { settings, .. } = req {
        if let Some(Some(target)) = &settings.dead_letter_target {
            if !caller.tokens.allows(token, target, auth::Permission::Send) {
                return forbidden(target, auth::Permission::Send);
            }
        }
    }
    None
}

/// The dead-letter target a create or update names: its existence is
/// checked on the target's shard before the request runs on its own.
pub(crate) fn target_of(req: &Request) -> Option<&str> {
    match req {
        Request::CreateQueue { settings, .. } | Request::UpdateQueue { settings, .. } => {
            settings.dead_letter_target.as_ref()?.as_deref()
        }
        _ => None,
    }
}

/// The checks of a create or update that come before its target's
/// existence (what the in-process engine checks first too).
pub(crate) fn precheck(req: &Request) -> Result<(), Response> {
    let r = match req {
        Request::CreateQueue { name, settings } => fila_core::precheck_create(
            name,
            &update_of(settings.clone()).apply(&QueueSettings::default()),
        ),
        Request::UpdateQueue { name, settings } => {
            fila_core::precheck_update(name, &update_of(settings.clone()))
        }
        _ => Ok(()),
    };
    r.map_err(|e| Response::Error(wire_error(&e)))
}

/// Runs one request on the owner of its queue's shard (authorized, and a
/// dead-letter target it names checked, beforehand). A receive that parks
/// is completed later through [`Owner::take_completions`].
///
/// `room` is the output the answer may take: receives and peeks answer
/// only as many messages as fit (at least one always fits: the server keeps
/// that much room before it handles a request).
pub(crate) fn run(engine: &mut Owner, req: Request, room: usize) -> Outcome {
    match req {
        Request::Hello { .. }
        | Request::Auth { .. }
        | Request::ServerStats
        | Request::ClusterStatus
        | Request::ChangeCluster(_)
        | Request::Reload
        | Request::ListQueues { .. } => Outcome::Answer(
            error(
                ErrorCode::INTERNAL,
                "hello, auth, server stats, cluster status and changes, reload and list are not a shard's",
            )
            .into(),
        ),
        Request::CreateQueue { name, settings } => {
            let s = update_of(settings).apply(&QueueSettings::default());
            answer(engine.create_queue(&name, s), Response::Created)
        }
        Request::GetQueue { name } => answer(engine.queue_settings(&name), |s| {
            Response::Queue(Box::new(settings_of(s)))
        }),
        Request::UpdateQueue { name, settings } => {
            answer(engine.update_queue(&name, &update_of(settings)), |s| {
                Response::Queue(Box::new(settings_of(s)))
            })
        }
        Request::DeleteQueue { name, if_exists } => answer(
            match engine.delete_queue(&name) {
                Err(Error::QueueNotFound(_)) if if_exists => Ok(()),
                other => other,
            },
            |_| Response::Ok,
        ),
        Request::Purge { queue } => answer(engine.purge(address(&queue)), |_| Response::Ok),
        Request::QueueStats { name } => answer(engine.stats(&name), |s| {
            Response::Stats(Box::new(proto::Stats {
                visible: s.visible,
                in_flight: s.in_flight,
                delayed: s.delayed,
                deferred: s.deferred,
                dead_lettered: s.dead_lettered,
                bytes: s.bytes,
                oldest_age_ms: s.oldest_age_ms,
                puts: s.puts,
                deliveries: s.deliveries,
                deletes: s.deletes,
                expiries: s.expiries,
                dead_letterings: s.dead_letterings,
                redriven: s.redriven,
                created_at_ms: s.times.created_at_ms,
                modified_at_ms: s.times.modified_at_ms,
                dedup_entries: s.dedup_entries,
                groups: s.groups,
                groups_in_flight: s.groups_in_flight,
                retries: s.retries,
            }))
        }),
        Request::Put { queue, messages } => {
            let batch = messages
                .into_iter()
                .map(|m| NewMessage {
                    payload: m.payload,
                    attributes: m.attributes,
                    channel: m.channel,
                    availability: match m.availability {
                        proto::Availability::Now => Availability::Now,
                        proto::Availability::DelayMs(d) => Availability::DelayMs(d),
                        proto::Availability::At(t) => Availability::At(t),
                    },
                    ttl_ms: m.ttl_ms,
                    dedup_id: m.dedup_id,
                    group: m.group,
                    priority: m.priority,
                })
                .collect();
            answer(engine.put(&queue, batch), |v| {
                Response::Put(entries(v, |p| proto::PutAck {
                    id: p.id.0,
                    seq: p.seq,
                }))
            })
        }
        Request::CancelScheduled { queue, seq } => {
            answer(engine.cancel_scheduled(&queue, seq), |_| Response::Ok)
        }
        Request::Receive(r) => {
            let channel = match r.channel.as_deref().map(ChannelFilter::parse).transpose() {
                Ok(c) => c,
                Err(e) => return failed(&e),
            };
            let opts = ReceiveOptions {
                max_messages: u32::from(r.max_messages),
                visibility_ms: r.visibility_ms,
                wait_ms: r.wait_ms,
                channel,
                max_answer_bytes: Some(room as u64),
            };
            match engine.receive(address(&r.queue), &opts, Some(Wake::Report)) {
                Ok(Received::Ready(ms)) => Outcome::Answer(messages_of(ms, r.fields)),
                Ok(Received::Parked(id)) => Outcome::Parked(id),
                Err(e) => failed(&e),
            }
        }
        Request::UpdateVisibility {
            queue,
            entries: changes,
        } => {
            if let Err(e) = fila_core::check_batch("entries", changes.len()) {
                return failed(&e);
            }
            let parsed: Vec<Result<VisibilityChange, Error>> = changes
                .iter()
                .map(|(r, t)| {
                    receipt(r).map(|receipt| VisibilityChange {
                        receipt,
                        timeout_ms: *t,
                    })
                })
                .collect();
            answer(
                parsed_entries(parsed, |good| {
                    engine.update_visibility(address(&queue), good)
                }),
                |done| Response::Visibility(entries(done, |t| t)),
            )
        }
        Request::UpdateMessage {
            queue,
            receipt: r,
            timeout_ms,
            payload,
        } => match receipt(&r) {
            Ok(r) => answer(
                engine.update_message(address(&queue), &r, payload.as_deref(), timeout_ms),
                |u| Response::Updated {
                    receipt: u.receipt.map(|r| r.to_bytes()),
                    visible_at_ms: u.visible_at_ms,
                },
            ),
            Err(e) => failed(&e),
        },
        Request::Delete { queue, receipts } => {
            if let Err(e) = fila_core::check_batch("receipts", receipts.len()) {
                return failed(&e);
            }
            let parsed: Vec<Result<Receipt, Error>> = receipts.iter().map(receipt).collect();
            answer(
                parsed_entries(parsed, |good| engine.delete(address(&queue), good)),
                |done| Response::Deleted(entries(done, |()| ())),
            )
        }
        Request::PauseQueue { name, halves } => answer(engine.set_paused(&name, pause_of(halves), true), |p| {
            Response::Paused(halves_of(p))
        }),
        Request::ResumeQueue { name, halves } => answer(engine.set_paused(&name, pause_of(halves), false), |p| {
            Response::Paused(halves_of(p))
        }),
        Request::Release {
            queue,
            receipts,
            reason,
            description,
        } => {
            if let Err(e) = fila_core::check_batch("receipts", receipts.len()) {
                return failed(&e);
            }
            let parsed: Vec<Result<Receipt, Error>> = receipts.iter().map(receipt).collect();
            answer(
                parsed_entries(parsed, |good| {
                    engine.release(address(&queue), good, &reason, &description)
                }),
                |done| Response::Released(entries(done, |t| t)),
            )
        }
        Request::Defer { queue, receipt: r } => match receipt(&r) {
            Ok(r) => answer(engine.defer(&queue, &r), |_| Response::Ok),
            Err(e) => failed(&e),
        },
        Request::ReceiveDeferred {
            queue,
            seqs,
            visibility_ms,
        } => answer(
            receive_deferred_within(engine, &queue, &seqs, visibility_ms, room),
            |v| Response::Deferred(entries(v, message_of)),
        ),
        Request::DeadLetter {
            queue,
            receipt: r,
            reason,
            description,
        } => match receipt(&r) {
            Ok(r) => answer(
                engine.dead_letter(&queue, &r, &reason, &description),
                |_| Response::Ok,
            ),
            Err(e) => failed(&e),
        },
        Request::Peek {
            queue,
            from_seq,
            max_messages,
            fields,
        } => answer(
            engine.peek(address(&queue), from_seq, u32::from(max_messages)),
            |mut ms| {
                // A peek of 100 large messages may not fit the connection's
                // output room: answer the first ones that fit (at least one);
                // the client goes on from the last sequence number + 1.
                let keep = fitting(&ms, room, fields.contains(proto::Fields::ATTEMPTS));
                ms.truncate(keep);
                messages_of(ms, fields)
            },
        ),
        Request::Redrive {
            queue,
            max_messages,
            rate_per_second,
            filter,
        } => answer(
            engine.redrive(&queue, max_messages, rate_per_second, filter_of(filter)),
            |o| Response::Redrive {
                moved: o.moved,
                scheduled: o.scheduled,
            },
        ),
        Request::StartMove {
            queue,
            to,
            max_messages,
            rate_per_second,
            filter,
        } => answer(
            engine.start_move(
                &queue,
                to,
                max_messages,
                rate_per_second,
                filter_of(filter),
            ),
            |t| Response::Move(Box::new(move_of(t))),
        ),
        Request::PreviewMove {
            queue,
            dlq,
            back_to_source,
            filter,
            from_seq,
        } => {
            let filter = filter_of(filter).unwrap_or_default();
            answer(
                engine.preview_move(&queue, dlq, back_to_source, &filter, from_seq),
                |mut p| {
                    // Twenty large messages may not fit the connection's
                    // output room: the first ones that fit (at least one).
                    let keep = fitting(&p.first, room, true);
                    p.first.truncate(keep);
                    Response::Preview {
                        matched: p.matched,
                        next: p.next,
                        messages: p.first.iter().map(with_attempts).collect(),
                    }
                },
            )
        }
        Request::ListMoves { queue } => answer(engine.moves(&queue), |ts| {
            Response::Moves(ts.into_iter().map(move_of).collect())
        }),
        Request::CancelMove { queue, id } => answer(engine.cancel_move(&queue, id), |t| {
            Response::Move(Box::new(move_of(t)))
        }),
        Request::DeleteSeq { queue, seq } => {
            answer(engine.delete_seq(address(&queue), seq), |_| Response::Ok)
        }
        Request::DeadLetterSeq {
            queue,
            seq,
            reason,
            description,
        } => answer(
            engine.dead_letter_seq(&queue, seq, &reason, &description),
            |_| Response::Ok,
        ),
        Request::Channels {
            queue,
            after,
            limit,
        } => answer(
            engine.channels(&queue, &after, limit.into()),
            |(channels, next)| Response::Channels {
                channels: channels
                    .into_iter()
                    .map(|c| proto::ChannelInfo {
                        name: c.name,
                        visible: c.visible,
                        held: c.held,
                    })
                    .collect(),
                next,
            },
        ),
    }
}

/// How many of `ms`, from the first, fit `room` bytes of answer (at
/// least one), with their attempts or not.
fn fitting(ms: &[Message], room: usize, attempts: bool) -> usize {
    let mut total = 0u64;
    ms.iter()
        .take_while(|m| {
            total += fila_core::answer_bytes(
                m.payload.len(),
                m.attributes.as_ref(),
                m.channel.as_deref(),
                m.dead_letter.as_deref(),
            );
            if attempts {
                total += fila_core::attempts_bytes(m.attempts.as_ref());
            }
            total <= room as u64
        })
        .count()
        .max(1)
}

/// A move filter as the engine takes it (`None`: no condition).
fn filter_of(f: proto::MoveFilter) -> Option<fila_core::MoveFilter> {
    if f.is_empty() {
        return None;
    }
    Some(fila_core::MoveFilter {
        attributes: f.attributes,
        reason: f.reason,
        text: f.text,
        since_ms: f.since_ms,
        until_ms: f.until_ms,
    })
}

/// A move task as the wire shows it.
fn move_of(t: fila_core::MoveTask) -> proto::MoveInfo {
    proto::MoveInfo {
        id: t.id,
        from_dlq: t.from_dlq,
        to: t.to,
        rate_per_second: t.rate,
        started_at_ms: t.started_at_ms,
        moved: t.moved,
        to_move: t.to_move,
        max_messages: t.max,
        status: t.status.code(),
        failure: t.failure,
        filter: t.filter.map_or_else(proto::MoveFilter::default, |f| {
            let f = *f;
            proto::MoveFilter {
                attributes: f.attributes,
                reason: f.reason,
                text: f.text,
                since_ms: f.since_ms,
                until_ms: f.until_ms,
            }
        }),
    }
}
