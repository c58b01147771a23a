//! A request's bytes: its opcode, encoding and decoding.

use super::*;

impl Request {
    /// The queue a request names: none for hello, auth, server stats,
    /// cluster status and changes, reload and a list of queues.
    pub fn queue(&self) -> Option<&str> {
        Some(match self {
            Request::Hello { .. }
            | Request::Auth { .. }
            | Request::ListQueues { .. }
            | Request::ServerStats
            | Request::ClusterStatus
            | Request::ChangeCluster(_)
            | Request::Reload => return None,
            Request::CreateQueue { name, .. }
            | Request::GetQueue { name }
            | Request::UpdateQueue { name, .. }
            | Request::DeleteQueue { name, .. }
            | Request::QueueStats { name }
            | Request::PauseQueue { name, .. }
            | Request::ResumeQueue { name, .. } => name,
            Request::Purge { queue } => &queue.name,
            Request::Redrive { queue, .. }
            | Request::StartMove { queue, .. }
            | Request::PreviewMove { queue, .. }
            | Request::ListMoves { queue }
            | Request::CancelMove { queue, .. }
            | Request::DeadLetterSeq { queue, .. }
            | Request::Channels { queue, .. }
            | Request::Put { queue, .. }
            | Request::CancelScheduled { queue, .. }
            | Request::Defer { queue, .. }
            | Request::ReceiveDeferred { queue, .. }
            | Request::DeadLetter { queue, .. } => queue,
            Request::Receive(r) => &r.queue.name,
            Request::UpdateVisibility { queue, .. }
            | Request::UpdateMessage { queue, .. }
            | Request::Delete { queue, .. }
            | Request::Release { queue, .. }
            | Request::DeleteSeq { queue, .. }
            | Request::Peek { queue, .. } => &queue.name,
        })
    }

    /// The request's opcode.
    pub fn opcode(&self) -> Opcode {
        match self {
            Request::Hello { .. } => Opcode::Hello,
            Request::Auth { .. } => Opcode::Auth,
            Request::ServerStats => Opcode::ServerStats,
            Request::ClusterStatus => Opcode::ClusterStatus,
            Request::ChangeCluster(_) => Opcode::ChangeCluster,
            Request::Reload => Opcode::Reload,
            Request::CreateQueue { .. } => Opcode::CreateQueue,
            Request::GetQueue { .. } => Opcode::GetQueue,
            Request::UpdateQueue { .. } => Opcode::UpdateQueue,
            Request::ListQueues { .. } => Opcode::ListQueues,
            Request::DeleteQueue { .. } => Opcode::DeleteQueue,
            Request::Purge { .. } => Opcode::Purge,
            Request::QueueStats { .. } => Opcode::QueueStats,
            Request::Put { .. } => Opcode::Put,
            Request::CancelScheduled { .. } => Opcode::CancelScheduled,
            Request::Receive(_) => Opcode::Receive,
            Request::UpdateVisibility { .. } => Opcode::UpdateVisibility,
            Request::UpdateMessage { .. } => Opcode::UpdateMessage,
            Request::Delete { .. } => Opcode::Delete,
            Request::Release { .. } => Opcode::Release,
            Request::PauseQueue { .. } => Opcode::PauseQueue,
            Request::ResumeQueue { .. } => Opcode::ResumeQueue,
            Request::Defer { .. } => Opcode::Defer,
            Request::ReceiveDeferred { .. } => Opcode::ReceiveDeferred,
            Request::DeadLetter { .. } => Opcode::DeadLetter,
            Request::Peek { .. } => Opcode::Peek,
            Request::Redrive { .. } => Opcode::Redrive,
            Request::StartMove { .. } => Opcode::StartMove,
            Request::PreviewMove { .. } => Opcode::PreviewMove,
            Request::ListMoves { .. } => Opcode::ListMoves,
            Request::CancelMove { .. } => Opcode::CancelMove,
            Request::DeleteSeq { .. } => Opcode::DeleteSeq,
            Request::DeadLetterSeq { .. } => Opcode::DeadLetterSeq,
            Request::Channels { .. } => Opcode::Channels,
        }
    }

    /// Appends the whole frame of this request to `buf`.
    pub fn encode(&self, request_id: u64, buf: &mut BytesMut) {
        // The hot path's requests share the borrowed encoders.
        match self {
            Request::Put { queue, messages } => {
                return PutRef { queue, messages }.encode(request_id, buf)
            }
            Request::Receive(rc) => return ReceiveRef::of(rc).encode(request_id, buf),
            Request::UpdateVisibility { queue, entries } => {
                return VisibilityRef {
                    queue: &queue.name,
                    dlq: queue.dlq,
                    entries,
                }
                .encode(request_id, buf)
            }
            Request::Delete { queue, receipts } => {
                return DeleteRef {
                    queue: &queue.name,
                    dlq: queue.dlq,
                    receipts,
                }
                .encode(request_id, buf)
            }
            Request::ReceiveDeferred {
                queue,
                seqs,
                visibility_ms,
            } => {
                return DeferredRef {
                    queue,
                    seqs,
                    visibility_ms: *visibility_ms,
                }
                .encode(request_id, buf)
            }
            _ => {}
        }
        let start = begin_frame(buf, self.opcode() as u8, 0, request_id);
        let w = &mut Writer(buf);
        match self {
            Request::Hello {
                client,
                max_version,
            } => {
                w.str(client);
                if let Some(v) = max_version {
                    w.u8(*v);
                }
            }
            Request::Auth { token } => w.str(token),
            Request::ServerStats | Request::Reload | Request::ClusterStatus => {}
            Request::ChangeCluster(change) => put_change(w, change),
            Request::CreateQueue { name, settings } | Request::UpdateQueue { name, settings } => {
                w.str(name);
                put_patch(w, settings);
            }
            Request::GetQueue { name } | Request::QueueStats { name } => w.str(name),
            Request::DeleteQueue { name, if_exists } => {
                w.str(name);
                w.bool(*if_exists);
            }
            Request::ListQueues {
                prefix,
                after,
                limit,
            } => {
                w.str(prefix);
                w.str(after);
                w.u16(*limit);
            }
            Request::Purge { queue } => put_queue_ref(w, queue),
            Request::CancelScheduled { queue, seq } => {
                w.str(queue);
                w.u64(*seq);
            }
            Request::Defer { queue, receipt } => {
                w.str(queue);
                w.array(receipt);
            }
            Request::DeadLetter {
                queue,
                receipt,
                reason,
                description,
            } => {
                w.str(queue);
                w.array(receipt);
                w.str(reason);
                w.str(description);
            }
            Request::Peek {
                queue,
                from_seq,
                max_messages,
                fields,
            } => {
                put_queue_ref(w, queue);
                w.u64(*from_seq);
                w.u8(*max_messages);
                // Added later: written only when not every field.
                if *fields != Fields::ALL {
                    w.u8(fields.0);
                }
            }
            Request::Redrive {
                queue,
                max_messages,
                rate_per_second,
                filter,
            } => {
                w.str(queue);
                w.opt(max_messages, |w, v| w.u64(*v));
                w.opt(rate_per_second, |w, v| w.u32(*v));
                // Added at the end in version 6: written only when there
                // is a condition.
                if !filter.is_empty() {
                    put_filter(w, filter);
                }
            }
            Request::StartMove {
                queue,
                to,
                max_messages,
                rate_per_second,
                filter,
            } => {
                w.str(queue);
                w.opt(to, |w, v| w.str(v));
                w.opt(max_messages, |w, v| w.u64(*v));
                w.opt(rate_per_second, |w, v| w.u32(*v));
                if !filter.is_empty() {
                    put_filter(w, filter);
                }
            }
            Request::PreviewMove {
                queue,
                dlq,
                back_to_source,
                filter,
                from_seq,
            } => {
                w.str(queue);
                w.bool(*dlq);
                w.bool(*back_to_source);
                w.u64(*from_seq);
                put_filter(w, filter);
            }
            Request::UpdateMessage {
                queue,
                receipt,
                timeout_ms,
                payload,
            } => {
                put_queue_ref(w, queue);
                w.array(receipt);
                w.u64(*timeout_ms);
                w.opt(payload, |w, p| w.bytes(p));
            }
            Request::ListMoves { queue } => w.str(queue),
            Request::CancelMove { queue, id } => {
                w.str(queue);
                w.u64(*id);
            }
            Request::DeleteSeq { queue, seq } => {
                put_queue_ref(w, queue);
                w.u64(*seq);
            }
            Request::DeadLetterSeq {
                queue,
                seq,
                reason,
                description,
            } => {
                w.str(queue);
                w.u64(*seq);
                w.str(reason);
                w.str(description);
            }
            Request::Channels {
                queue,
                after,
                limit,
            } => {
                w.str(queue);
                w.str(after);
                w.u16(*limit);
            }
            Request::PauseQueue { name, halves } | Request::ResumeQueue { name, halves } => {
                w.str(name);
                w.u8(halves.bits());
            }
            Request::Release {
                queue,
                receipts,
                reason,
                description,
            } => {
                w.str(&queue.name);
                w.bool(queue.dlq);
                w.list(receipts, |w, r| w.array(r));
                // Added at the end: written only when there is one.
                if !reason.is_empty() || !description.is_empty() {
                    w.str(reason);
                    w.str(description);
                }
            }
            Request::Put { .. }
            | Request::Receive(_)
            | Request::UpdateVisibility { .. }
            | Request::Delete { .. }
            | Request::ReceiveDeferred { .. } => unreachable!("encoded above"),
        }
        end_frame(buf, start);
    }

    /// Decodes a request frame's body. Payloads are slices of `body`.
    pub fn decode(header: &FrameHeader, body: Bytes) -> Result<Request, ProtoError> {
        check_header(header)?;
        if header.is_response() || header.flags & flags::FIELDS != 0 {
            return Err(ProtoError::Malformed(
                "a request has no response or fields flag",
            ));
        }
        let op = Opcode::from_u8(header.opcode)?;
        let r = &mut Reader::new(body);
        let req = match op {
            Opcode::Hello => Request::Hello {
                client: r.str()?,
                // Added in version 2: a version-1 hello ends with its name.
                max_version: r.flagged(r.remaining() > 0, Reader::u8)?,
            },
            Opcode::Auth => Request::Auth { token: r.str()? },
            Opcode::ServerStats => Request::ServerStats,
            Opcode::ClusterStatus => Request::ClusterStatus,
            Opcode::ChangeCluster => Request::ChangeCluster(get_change(r)?),
            Opcode::Reload => Request::Reload,
            Opcode::CreateQueue => Request::CreateQueue {
                name: r.str()?,
                settings: get_patch(r, header.version)?,
            },
            Opcode::GetQueue => Request::GetQueue { name: r.str()? },
            Opcode::UpdateQueue => Request::UpdateQueue {
                name: r.str()?,
                settings: get_patch(r, header.version)?,
            },
            Opcode::ListQueues => Request::ListQueues {
                prefix: r.str()?,
                after: r.str()?,
                limit: r.u16()?,
            },
            Opcode::DeleteQueue => Request::DeleteQueue {
                name: r.str()?,
                if_exists: r.bool()?,
            },
            Opcode::Purge => Request::Purge {
                queue: get_queue_ref(r)?,
            },
            Opcode::QueueStats => Request::QueueStats { name: r.str()? },
            Opcode::Put => {
                let queue = r.str()?;
                let mut messages = r.list(9, get_entry)?;
                get_more(r, &mut messages)?;
                Request::Put { queue, messages }
            }
            Opcode::CancelScheduled => Request::CancelScheduled {
                queue: r.str()?,
                seq: r.u64()?,
            },
            Opcode::Receive => Request::Receive(Receive {
                queue: get_queue_ref(r)?,
                max_messages: r.u8()?,
                visibility_ms: r.opt(Reader::u64)?,
                wait_ms: r.opt(Reader::u64)?,
                channel: r.opt(Reader::str)?,
                fields: get_fields_tail(r, Fields::ALL)?,
            }),
            Opcode::UpdateVisibility => Request::UpdateVisibility {
                queue: get_queue_ref(r)?,
                entries: r.list(RECEIPT_LEN + 8, |r| {
                    Ok((r.array::<RECEIPT_LEN>()?, r.u64()?))
                })?,
            },
            Opcode::Delete => Request::Delete {
                queue: get_queue_ref(r)?,
                receipts: r.list(RECEIPT_LEN, Reader::array::<RECEIPT_LEN>)?,
            },
            Opcode::PauseQueue | Opcode::ResumeQueue => {
                let name = r.str()?;
                let halves = Halves::of_bits(r.u8()?)
                    .ok_or(ProtoError::Malformed("an unknown half of a queue"))?;
                if header.opcode == Opcode::PauseQueue as u8 {
                    Request::PauseQueue { name, halves }
                } else {
                    Request::ResumeQueue { name, halves }
                }
            }
            Opcode::Release => {
                let queue = get_queue_ref(r)?;
                let receipts = r.list(RECEIPT_LEN, Reader::array::<RECEIPT_LEN>)?;
                let (reason, description) = if r.remaining() == 0 {
                    (String::new(), String::new())
                } else {
                    (r.str()?, r.str()?)
                };
                Request::Release {
                    queue,
                    receipts,
                    reason,
                    description,
                }
            }
            Opcode::Defer => Request::Defer {
                queue: r.str()?,
                receipt: r.array::<RECEIPT_LEN>()?,
            },
            Opcode::ReceiveDeferred => Request::ReceiveDeferred {
                queue: r.str()?,
                seqs: r.list(8, Reader::u64)?,
                visibility_ms: r.opt(Reader::u64)?,
            },
            Opcode::DeadLetter => Request::DeadLetter {
                queue: r.str()?,
                receipt: r.array::<RECEIPT_LEN>()?,
                reason: r.str()?,
                description: r.str()?,
            },
            Opcode::Peek => Request::Peek {
                queue: get_queue_ref(r)?,
                from_seq: r.u64()?,
                max_messages: r.u8()?,
                fields: get_fields_tail(r, Fields::KNOWN)?,
            },
            Opcode::Redrive => Request::Redrive {
                queue: r.str()?,
                max_messages: r.opt(Reader::u64)?,
                rate_per_second: r.opt(Reader::u32)?,
                filter: get_filter_tail(r)?,
            },
            Opcode::StartMove => Request::StartMove {
                queue: r.str()?,
                to: r.opt(Reader::str)?,
                max_messages: r.opt(Reader::u64)?,
                rate_per_second: r.opt(Reader::u32)?,
                filter: get_filter_tail(r)?,
            },
            Opcode::PreviewMove => Request::PreviewMove {
                queue: r.str()?,
                dlq: r.bool()?,
                back_to_source: r.bool()?,
                from_seq: r.u64()?,
                filter: get_filter(r)?,
            },
            Opcode::UpdateMessage => Request::UpdateMessage {
                queue: get_queue_ref(r)?,
                receipt: r.array::<RECEIPT_LEN>()?,
                timeout_ms: r.u64()?,
                payload: r.opt(Reader::bytes)?,
            },
            Opcode::ListMoves => Request::ListMoves { queue: r.str()? },
            Opcode::CancelMove => Request::CancelMove {
                queue: r.str()?,
                id: r.u64()?,
            },
            Opcode::DeleteSeq => Request::DeleteSeq {
                queue: get_queue_ref(r)?,
                seq: r.u64()?,
            },
            Opcode::DeadLetterSeq => Request::DeadLetterSeq {
                queue: r.str()?,
                seq: r.u64()?,
                reason: r.str()?,
                description: r.str()?,
            },
            Opcode::Channels => Request::Channels {
                queue: r.str()?,
                after: r.str()?,
                limit: r.u16()?,
            },
        };
        r.finish()?;
        Ok(req)
    }
}

fn put_change(w: &mut Writer<'_>, change: &ClusterChange) {
    match change {
        ClusterChange::AddLearner { id, peer, client } => {
            w.u8(1);
            w.u64(*id);
            w.str(peer);
            w.str(client);
        }
        ClusterChange::Promote { id } => {
            w.u8(2);
            w.u64(*id);
        }
        ClusterChange::Remove { id } => {
            w.u8(3);
            w.u64(*id);
        }
        ClusterChange::TransferLeader { to } => {
            w.u8(4);
            w.opt(to, |w, to| w.u64(*to));
        }
        ClusterChange::Move {
            from,
            to,
            peer,
            client,
        } => {
            w.u8(5);
            w.u64(*from);
            w.u64(*to);
            w.str(peer);
            w.str(client);
        }
    }
}

fn get_change(r: &mut Reader) -> Result<ClusterChange, ProtoError> {
    Ok(match r.u8()? {
        1 => ClusterChange::AddLearner {
            id: r.u64()?,
            peer: r.str()?,
            client: r.str()?,
        },
        2 => ClusterChange::Promote { id: r.u64()? },
        3 => ClusterChange::Remove { id: r.u64()? },
        4 => ClusterChange::TransferLeader {
            to: r.opt(Reader::u64)?,
        },
        5 => ClusterChange::Move {
            from: r.u64()?,
            to: r.u64()?,
            peer: r.str()?,
            client: r.str()?,
        },
        _ => return Err(ProtoError::Malformed("unknown cluster change")),
    })
}

/// A request's optional `fields` byte at its end: absent, every field of
/// the layout before fields existed ([`Fields::ALL`]); a bit outside
/// `allowed` is malformed.
fn get_fields_tail(r: &mut Reader, allowed: Fields) -> Result<Fields, ProtoError> {
    if r.remaining() == 0 {
        return Ok(Fields::ALL);
    }
    match r.u8()? {
        m if m & !allowed.0 == 0 => Ok(Fields(m)),
        _ => Err(ProtoError::Malformed("unknown message fields")),
    }
}
