//! Snapshot bodies: a version and frames (queues, messages, the end),
//! written a part at a time and read back a frame at a time; the first
//! format (version 1, whole in memory) still reads.

use fila_core::event::{DedupImage, EngineImage, ImagePart, MessageImage, QueueImage, Spot};
use fila_core::{MoveTask, QueueSettings, QueueTimes};

use super::{
    any_filter, bad, bytes_, extension, filters, keyed, message, message_more, needs_more,
    settings, tasks, u32_, u64_, CodecError, MessageParts, Reader,
};
use crate::replay::Replay;

/// The snapshot body written before frames (read only).
const SNAPSHOT_VERSION_1: u32 = 1;
/// The snapshot body of frames.
pub const SNAPSHOT_VERSION: u32 = 2;
/// A snapshot frame's kinds.
mod frame {
    /// Read only: a queue without the settings' extension.
    pub const QUEUE: u8 = 1;
    pub const MESSAGE: u8 = 2;
    pub const END: u8 = 3;
    /// Read only: a queue without the settings' keyed extension.
    pub const QUEUE_2: u8 = 4;
    /// A queue: id, name, settings, next sequence number, extension, move
    /// tasks, keyed extension.
    pub const QUEUE_3: u8 = 5;
    /// A queue some of whose move tasks have a filter: what [`QUEUE_3`]
    /// carries (still written when none has one), then the filters.
    pub const QUEUE_4: u8 = 8;
    /// Deduplication keys of a queue: id, count, (key, seq, expiry) each.
    pub const DEDUP: u8 = 6;
    /// A message with optional parts (its group): the message, then
    /// `codec::more` flags and the parts.
    pub const MESSAGE_2: u8 = 7;
}
/// The largest snapshot frame read (a message of 1 MiB with its
/// attributes and dead-letter record is far smaller).
const FRAME_MAX: usize = 16 << 20;

/// A snapshot body in the first format (version 1, whole in memory): what
/// earlier versions wrote, kept so tests show it still reads.
pub fn encode_snapshot(image: &EngineImage) -> Vec<u8> {
    let queues = &image.queues;
    let bytes: usize = queues
        .iter()
        .flat_map(|q| &q.messages)
        .map(|m| m.payload.len() + 96)
        .sum();
    let mut out = Vec::with_capacity(bytes + 16 + queues.len() * 128);
    u32_(&mut out, SNAPSHOT_VERSION_1);
    u32_(&mut out, image.next_queue_id);
    u64_(&mut out, queues.len() as u64);
    for q in queues {
        u32_(&mut out, q.id);
        bytes_(&mut out, q.name.as_bytes());
        settings(&mut out, &q.settings);
        u64_(&mut out, q.next_seq);
        u64_(&mut out, q.messages.len() as u64);
        for m in &q.messages {
            message(&mut out, &image_parts(q.id, m));
        }
    }
    out
}

/// A whole image as a snapshot body of frames (the current format), in
/// one buffer: what a replica sends another that is too far behind.
pub fn encode_image(image: &EngineImage, out: &mut Vec<u8>) {
    encode_snapshot_start(out);
    for q in &image.queues {
        encode_queue_part(
            q.id,
            &q.name,
            &q.settings,
            q.times,
            q.next_seq,
            &q.moves,
            out,
        );
        encode_dedup_part(q.id, &q.dedup, out);
        for m in &q.messages {
            encode_message_part(q.id, m, out);
        }
    }
    encode_snapshot_end(image.next_queue_id, out);
}

/// The start of a snapshot body of frames.
pub fn encode_snapshot_start(out: &mut Vec<u8>) {
    u32_(out, SNAPSHOT_VERSION);
}

/// Appends one part of the state as a snapshot frame.
pub fn encode_part(part: &ImagePart, out: &mut Vec<u8>) {
    match part {
        ImagePart::Queue {
            id,
            name,
            settings,
            times,
            next_seq,
            moves,
        } => encode_queue_part(*id, name, settings, *times, *next_seq, moves, out),
        ImagePart::Dedup { queue, entries } => encode_dedup_part(*queue, entries, out),
        ImagePart::Message { queue, message } => encode_message_part(*queue, message, out),
    }
}

/// Appends a queue's frame ([`ImagePart::Queue`] from its fields).
pub fn encode_queue_part(
    id: u32,
    name: &str,
    s: &QueueSettings,
    times: QueueTimes,
    next_seq: u64,
    moves: &[MoveTask],
    out: &mut Vec<u8>,
) {
    let start = out.len();
    out.extend_from_slice(&[0; 5]);
    u32_(out, id);
    bytes_(out, name.as_bytes());
    settings(out, s);
    u64_(out, next_seq);
    extension(out, s, times);
    tasks(out, moves);
    keyed(out, s);
    if any_filter(moves) {
        filters(out, moves);
        end_frame(out, start, frame::QUEUE_4);
    } else {
        end_frame(out, start, frame::QUEUE_3);
    }
}

/// Deduplication keys in one snapshot frame, at most (32 bytes each: a
/// frame of 2 MiB, well below what a reader takes).
const DEDUP_PER_FRAME: usize = 1 << 16;

/// Appends frames of queue `queue`'s deduplication keys, at most
/// [`DEDUP_PER_FRAME`] a frame (none when `entries` is empty).
pub fn encode_dedup_part<'a>(
    queue: u32,
    entries: impl IntoIterator<Item = &'a DedupImage>,
    out: &mut Vec<u8>,
) {
    let mut entries = entries.into_iter().peekable();
    while entries.peek().is_some() {
        let start = out.len();
        out.extend_from_slice(&[0; 5]);
        u32_(out, queue);
        let count_at = out.len();
        u32_(out, 0);
        let mut count = 0u32;
        for e in entries.by_ref().take(DEDUP_PER_FRAME) {
            out.extend_from_slice(&e.key.to_be_bytes());
            u64_(out, e.seq);
            u64_(out, e.expires_at_ms);
            count += 1;
        }
        out[count_at..count_at + 4].copy_from_slice(&count.to_be_bytes());
        end_frame(out, start, frame::DEDUP);
    }
}

/// Appends a frame of one message of queue `queue`.
pub fn encode_message_part(queue: u32, m: &MessageImage, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&[0; 5]);
    message(out, &image_parts(queue, m));
    let kind = if needs_more(
        m.group.as_deref(),
        m.priority,
        m.lease_until_ms,
        &m.attempts,
    ) {
        message_more(
            out,
            None,
            m.group.as_deref(),
            m.priority,
            m.lease_until_ms,
            &m.attempts,
        );
        frame::MESSAGE_2
    } else {
        frame::MESSAGE
    };
    end_frame(out, start, kind);
}

/// Appends the snapshot's last frame: the next queue id.
pub fn encode_snapshot_end(next_queue_id: u32, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&[0; 5]);
    u32_(out, next_queue_id);
    end_frame(out, start, frame::END);
}

fn end_frame(out: &mut [u8], start: usize, kind: u8) {
    let len = u32::try_from(out.len() - start - 5).expect("a frame is below 4 GiB");
    out[start] = kind;
    out[start + 1..start + 5].copy_from_slice(&len.to_be_bytes());
}

fn image_parts(queue: u32, m: &MessageImage) -> MessageParts<'_> {
    MessageParts {
        at: Spot {
            queue,
            dlq: m.dlq,
            seq: m.seq,
        },
        id: m.id,
        payload: &m.payload,
        attributes: m.attributes.as_deref(),
        channel: m.channel.as_deref(),
        inserted_at_ms: m.inserted_at_ms,
        visible_at_ms: m.visible_at_ms,
        expires_at_ms: m.expires_at_ms,
        delivery_count: m.delivery_count,
        deferred: m.deferred,
        dead_letter: m.dead_letter.as_deref(),
    }
}

/// Reads a snapshot body from `body` into `replay`, a frame at a time
/// (a version 1 body is read whole).
pub fn read_snapshot(body: &mut dyn std::io::Read, replay: &mut Replay) -> Result<(), CodecError> {
    let io = |_| bad("the snapshot could not be read");
    let mut v = [0u8; 4];
    body.read_exact(&mut v).map_err(io)?;
    match u32::from_be_bytes(v) {
        SNAPSHOT_VERSION_1 => {
            let mut rest = v.to_vec();
            body.read_to_end(&mut rest).map_err(io)?;
            *replay = Replay::from_image(decode_snapshot(&rest)?);
            Ok(())
        }
        SNAPSHOT_VERSION => {
            let mut buf = Vec::new();
            loop {
                let mut head = [0u8; 5];
                body.read_exact(&mut head)
                    .map_err(|_| bad("the snapshot ends without its last frame"))?;
                let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
                if len > FRAME_MAX {
                    return Err(bad("a snapshot frame over the limit"));
                }
                buf.clear();
                buf.resize(len, 0);
                body.read_exact(&mut buf)
                    .map_err(|_| bad("a snapshot frame runs past the end"))?;
                let mut r = Reader::new(&buf);
                match head[0] {
                    kind @ (frame::QUEUE | frame::QUEUE_2 | frame::QUEUE_3 | frame::QUEUE_4) => {
                        let id = r.u32()?;
                        let name = r.str()?.to_owned();
                        let mut settings = r.settings()?;
                        let next_seq = r.u64()?;
                        let (times, mut moves) = if kind == frame::QUEUE {
                            (QueueTimes::default(), Vec::new())
                        } else {
                            (r.extension(&mut settings)?, r.tasks()?)
                        };
                        if kind == frame::QUEUE_3 || kind == frame::QUEUE_4 {
                            r.keyed(&mut settings)?;
                        }
                        if kind == frame::QUEUE_4 {
                            r.filters(&mut moves)?;
                        }
                        replay.apply_part(ImagePart::Queue {
                            id,
                            name,
                            settings,
                            times,
                            next_seq,
                            moves,
                        });
                    }
                    frame::DEDUP => {
                        let queue = r.u32()?;
                        let n = r.u32()? as usize;
                        // An entry takes 32 bytes.
                        if n > buf.len() / 32 {
                            return Err(bad("more deduplication keys than bytes"));
                        }
                        let entries = (0..n)
                            .map(|_| {
                                Ok(DedupImage {
                                    key: r.u128()?,
                                    seq: r.u64()?,
                                    expires_at_ms: r.u64()?,
                                })
                            })
                            .collect::<Result<_, CodecError>>()?;
                        replay.apply_part(ImagePart::Dedup { queue, entries });
                    }
                    kind @ (frame::MESSAGE | frame::MESSAGE_2) => {
                        let (queue, mut message) = r.message()?;
                        if kind == frame::MESSAGE_2 {
                            let (dedup, group, priority, lease, attempts) = r.more()?;
                            if dedup.is_some() {
                                return Err(bad(
                                    "a snapshot's message carries no deduplication key",
                                ));
                            }
                            (message.group, message.priority) = (group, priority);
                            message.lease_until_ms = lease;
                            message.attempts = attempts;
                        }
                        replay.apply_part(ImagePart::Message { queue, message });
                    }
                    frame::END => {
                        let next_queue_id = r.u32()?;
                        r.end()?;
                        replay.saw_next_queue_id(next_queue_id);
                        let mut extra = [0u8; 1];
                        return match body.read(&mut extra).map_err(io)? {
                            0 => Ok(()),
                            _ => Err(bad("bytes after the snapshot's last frame")),
                        };
                    }
                    _ => return Err(bad("unknown snapshot frame")),
                }
                r.end()?;
            }
        }
        _ => Err(bad("unknown snapshot version")),
    }
}

/// Decodes a snapshot body.
pub fn decode_snapshot(body: &[u8]) -> Result<EngineImage, CodecError> {
    let mut r = Reader::new(body);
    if r.u32()? != SNAPSHOT_VERSION_1 {
        return Err(bad("unknown snapshot version"));
    }
    let next_queue_id = r.u32()?;
    let queues = r.u64()?;
    // A queue takes at least 60 bytes.
    if queues > (body.len() / 60) as u64 {
        return Err(bad("more queues than bytes"));
    }
    let mut out = Vec::with_capacity(queues as usize);
    for _ in 0..queues {
        let id = r.u32()?;
        let name = r.str()?.to_owned();
        let settings = r.settings()?;
        let next_seq = r.u64()?;
        let n = r.u64()?;
        // A message takes at least 50 bytes.
        if n > ((body.len() - r.at) / 50) as u64 {
            return Err(bad("more messages than bytes"));
        }
        let mut messages = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let (queue, m) = r.message()?;
            if queue != id {
                return Err(bad("a message names another queue"));
            }
            messages.push(m);
        }
        out.push(QueueImage {
            id,
            name,
            settings,
            times: QueueTimes::default(),
            next_seq,
            moves: Vec::new(),
            dedup: Vec::new(),
            messages,
        });
    }
    r.end()?;
    Ok(EngineImage {
        next_queue_id,
        queues: out,
    })
}
