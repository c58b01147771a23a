//! What a node forwards to a group's leader, and how the leader answers
//! it.
//!
//! A binary client told `not_leader` goes to the leader itself; an SQS SDK
//! or a browser cannot, so a request of the SQS API or the console that
//! reaches a follower is forwarded; so is what a node needs of another
//! group's leader for any caller (a queue's placement from the metadata
//! leader, each partition's part of a list, of the server's stats, of a
//! cluster change): the follower sends it over the peer
//! protocol ([`fila_cluster::peer::Forwarder`], authenticated with the
//! cluster's secret, inside TLS when the nodes speak it), the leader runs it
//! on its replica exactly as its own requests and sends back the answer.
//! The follower checked the caller's credentials and grants before: the
//! leader trusts its peers to have done so (every node holds the same
//! tokens, docs/cluster.md). A receive that waits is forwarded once and
//! held by the leader until messages come or its wait ends, on one of the
//! connections kept for such forwards; while all of those are taken, or
//! when the leader is of an earlier version (it refuses the kind), it is
//! forwarded once per look instead ([`super::POLL`]), holding no peer
//! connection while it waits.
//!
//! The bytes: a request is its kind, then a run (the answer's room, the
//! request's frame), a held receive (the answer's room, the milliseconds
//! already waited, the request's frame), a list (its cursor, limit and the caller's visible
//! ranges), leases given back (receipts) or a placement (the queue, and
//! whether to place it, beside which), then the group (`u32`, last); an
//! answer is the wait a
//! receive asked for or its queue's default, then the answer's frame, and
//! for messages each one's first delivery time (the frame does not carry
//! it). Every length is checked against the bytes left: a peer's bytes
//! never panic a node.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use fila_core::{DeadLetter, DeadLetterReason, MessageId, Payload, Receipt, State};
use fila_proto::{self as proto, Decoded, ErrorCode, Opcode, Request, Response};

use crate::auth;
use crate::dispatch::{error, Answer};

/// A forwarded request, to the leader of one group.
#[derive(Debug, PartialEq)]
pub(super) enum Ask {
    /// A request on a partition, and the bytes of messages its answer may
    /// carry — for a cluster change, instead, the metadata log index its
    /// partition's step waits for (`change::change_here`).
    Run {
        group: u32,
        room: usize,
        req: Box<Request>,
    },
    /// A list of a partition's queues: what the caller may see, from
    /// where, how many.
    List {
        group: u32,
        ranges: Vec<auth::Range>,
        after: String,
        limit: usize,
    },
    /// A receive that waits for messages, held by the leader until
    /// messages come or its wait ends (`waited` of it already spent on the
    /// follower): sent on a connection kept for such forwards
    /// ([`fila_cluster::peer::Forwarder::forward_held`]). An earlier
    /// version refuses it as unknown, and the follower then polls.
    Wait {
        group: u32,
        room: usize,
        waited: std::time::Duration,
        req: Box<Request>,
    },
    /// Leases of a partition whose answer nobody took.
    Abandon { group: u32, receipts: Vec<Receipt> },
    /// To the metadata leader: the partition a queue lives in, placing it
    /// first or taking its placement away. The answer is `Ok` with the
    /// partition plus one (0: placed nowhere) where a receive's wait goes.
    Place { queue: String, placing: Placing },
    /// To a replica of a partition this node holds none of: the leader it
    /// knows of. The answer is `Ok` with the leader's id plus one (0: not
    /// known) where a receive's wait goes.
    Leader { group: u32 },
}

/// What a placement does.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Placing {
    /// Finds the queue's partition.
    Find,
    /// Places the queue unless it is placed (beside the queue named).
    Create(Option<String>),
    /// Takes the queue's placement away (it was deleted).
    Remove,
}

const RUN: u8 = 1;
const LIST: u8 = 2;
const ABANDON: u8 = 3;
const PLACE: u8 = 4;
const LEADER: u8 = 5;
const WAIT: u8 = 6;

const WIRE: u8 = 0;
const MESSAGES: u8 = 1;

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u32).to_be_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// Reads a peer's bytes, every length checked.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.0.len() < n {
            return Err("a forward cut short".into());
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_be_bytes(self.take(4)?.try_into().expect("4")))
    }

    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_be_bytes(self.take(8)?.try_into().expect("8")))
    }

    fn str(&mut self) -> Result<String, String> {
        let n = self.u32()? as usize;
        String::from_utf8(self.take(n)?.to_vec()).map_err(|_| "a name that is not UTF-8".into())
    }

    /// A count of items of at least `each` bytes, no more than the bytes
    /// left can hold.
    fn count(&mut self, each: usize) -> Result<usize, String> {
        let n = self.u32()? as usize;
        if n.saturating_mul(each) > self.0.len() {
            return Err("a count past the bytes".into());
        }
        Ok(n)
    }

    fn frame(&mut self) -> Result<(proto::FrameHeader, Bytes), String> {
        match proto::decode_frame(self.0, proto::FRAME_LEN_LIMIT) {
            Ok(Decoded::Frame {
                header,
                body,
                consumed,
            }) if consumed == self.0.len() => Ok((header, Bytes::copy_from_slice(body))),
            Ok(_) => Err("a frame that is not the whole rest".into()),
            Err(e) => Err(e.to_string()),
        }
    }

    /// An answer's room.
    fn room(&mut self) -> Result<usize, String> {
        usize::try_from(self.u64()?).map_err(|_| "a room past memory".into())
    }

    /// A request's frame, the rest of the bytes.
    fn request(&mut self) -> Result<Request, String> {
        let (header, body) = self.frame()?;
        Request::decode(&header, body).map_err(|e| e.to_string())
    }
}

/// Appends `req`'s frame (the rest of an ask, before its group).
fn push_request(out: &mut Vec<u8>, req: &Request) {
    let mut frame = BytesMut::new();
    req.encode(0, &mut frame);
    out.extend_from_slice(&frame);
}

impl Ask {
    /// The group it goes to.
    pub(super) fn group(&self) -> u32 {
        match self {
            Ask::Run { group, .. }
            | Ask::Wait { group, .. }
            | Ask::List { group, .. }
            | Ask::Abandon { group, .. }
            | Ask::Leader { group } => *group,
            Ask::Place { .. } => super::groups::META,
        }
    }

    pub(super) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        match self {
            Ask::Run { room, req, .. } => {
                out.push(RUN);
                out.extend_from_slice(&(*room as u64).to_be_bytes());
                push_request(&mut out, req);
            }
            Ask::Wait {
                room, waited, req, ..
            } => {
                out.push(WAIT);
                out.extend_from_slice(&(*room as u64).to_be_bytes());
                let waited = u64::try_from(waited.as_millis()).unwrap_or(u64::MAX);
                out.extend_from_slice(&waited.to_be_bytes());
                push_request(&mut out, req);
            }
            Ask::List {
                ranges,
                after,
                limit,
                ..
            } => {
                out.push(LIST);
                put_str(&mut out, after);
                out.extend_from_slice(&(*limit as u64).to_be_bytes());
                out.extend_from_slice(&(ranges.len() as u32).to_be_bytes());
                for r in ranges {
                    out.push(u8::from(r.exact));
                    put_str(&mut out, &r.prefix);
                }
            }
            Ask::Abandon { receipts, .. } => {
                out.push(ABANDON);
                out.extend_from_slice(&(receipts.len() as u32).to_be_bytes());
                for r in receipts {
                    out.extend_from_slice(&r.to_bytes());
                }
            }
            Ask::Place { queue, placing } => {
                out.push(PLACE);
                put_str(&mut out, queue);
                match placing {
                    Placing::Find => out.push(0),
                    Placing::Create(None) => out.push(1),
                    Placing::Create(Some(near)) => {
                        out.push(2);
                        put_str(&mut out, near);
                    }
                    Placing::Remove => out.push(3),
                }
            }
            Ask::Leader { .. } => out.push(LEADER),
        }
        out.extend_from_slice(&self.group().to_be_bytes());
        out
    }

    pub(super) fn decode(bytes: &[u8]) -> Result<Ask, String> {
        // The group is the last four bytes (after a run's frame).
        let Some(cut) = bytes.len().checked_sub(4) else {
            return Err("a forward cut short".into());
        };
        let (bytes, group) = bytes.split_at(cut);
        let group = u32::from_be_bytes(group.try_into().expect("4"));
        let mut r = Reader(bytes);
        let ask = match r.u8()? {
            RUN => {
                let room = r.room()?;
                let req = r.request()?;
                return Ok(Ask::Run {
                    group,
                    room,
                    req: Box::new(req),
                });
            }
            WAIT => {
                let room = r.room()?;
                let waited = std::time::Duration::from_millis(r.u64()?);
                let req = r.request()?;
                if !matches!(req, Request::Receive(_)) {
                    return Err("a held forward that is not a receive".into());
                }
                return Ok(Ask::Wait {
                    group,
                    room,
                    waited,
                    req: Box::new(req),
                });
            }
            LIST => {
                let after = r.str()?;
                let limit = usize::try_from(r.u64()?).map_err(|_| "a limit past memory")?;
                let n = r.count(5)?;
                let mut ranges = Vec::with_capacity(n);
                for _ in 0..n {
                    let exact = r.u8()? != 0;
                    ranges.push(auth::Range {
                        prefix: r.str()?,
                        exact,
                    });
                }
                Ask::List {
                    group,
                    ranges,
                    after,
                    limit,
                }
            }
            ABANDON => {
                let n = r.count(fila_core::RECEIPT_LEN)?;
                let receipts = (0..n)
                    .map(|_| {
                        Receipt::from_bytes(r.take(fila_core::RECEIPT_LEN)?)
                            .map_err(|e| e.to_string())
                    })
                    .collect::<Result<_, String>>()?;
                Ask::Abandon { group, receipts }
            }
            PLACE => {
                let queue = r.str()?;
                let placing = match r.u8()? {
                    0 => Placing::Find,
                    1 => Placing::Create(None),
                    2 => Placing::Create(Some(r.str()?)),
                    3 => Placing::Remove,
                    k => return Err(format!("an unknown placement ({k})")),
                };
                if group != super::groups::META {
                    return Err("a placement not to the metadata group".into());
                }
                Ask::Place { queue, placing }
            }
            LEADER => Ask::Leader { group },
            k => return Err(format!("{UNKNOWN_ASK}{k})")),
        };
        if !r.0.is_empty() {
            return Err("bytes after a forward".into());
        }
        Ok(ask)
    }
}

/// The bytes of `answer` to a request of `opcode`, with the wait a
/// receive goes on with.
pub(super) fn encode_answer(answer: &Answer, opcode: u8, wait_ms: u64) -> Vec<u8> {
    let mut out = wait_ms.to_be_bytes().to_vec();
    match answer {
        Answer::Wire(_) => out.push(WIRE),
        Answer::Messages(_, ms) => {
            out.push(MESSAGES);
            out.extend_from_slice(&(ms.len() as u32).to_be_bytes());
            for m in ms {
                match m.first_received_at_ms {
                    Some(at) => {
                        out.push(1);
                        out.extend_from_slice(&at.to_be_bytes());
                    }
                    None => out.push(0),
                }
            }
        }
    }
    let mut frame = BytesMut::new();
    answer.encode(fila_proto::VERSION, opcode, 0, &mut frame);
    out.extend_from_slice(&frame);
    out
}

/// The answer and wait `bytes` hold.
pub(super) fn decode_answer(bytes: &[u8]) -> Result<(Answer, u64), String> {
    let mut r = Reader(bytes);
    let wait_ms = r.u64()?;
    let first = match r.u8()? {
        WIRE => None,
        MESSAGES => {
            let n = r.count(1)?;
            let mut first = Vec::with_capacity(n);
            for _ in 0..n {
                first.push(match r.u8()? {
                    0 => None,
                    _ => Some(r.u64()?),
                });
            }
            Some(first)
        }
        k => return Err(format!("an unknown answer ({k})")),
    };
    let (header, body) = r.frame()?;
    let response = Response::decode(&header, body).map_err(|e| e.to_string())?;
    let answer = match (first, response) {
        (None, response) => Answer::Wire(response),
        (Some(first), Response::Messages(ms)) => messages(proto::Fields::ALL, ms, first)?,
        (Some(first), Response::Selected(fields, ms)) => messages(fields, ms, first)?,
        (Some(_), _) => return Err("messages that are not messages".into()),
    };
    Ok((answer, wait_ms))
}

fn messages(
    fields: proto::Fields,
    ms: Vec<proto::Message>,
    first: Vec<Option<u64>>,
) -> Result<Answer, String> {
    if ms.len() != first.len() {
        return Err("first deliveries that are not the messages'".into());
    }
    let ms = ms
        .into_iter()
        .zip(first)
        .map(|(m, first)| message_of(m, first))
        .collect::<Result<_, String>>()?;
    Ok(Answer::Messages(fields, ms))
}

/// The engine's message a wire message shows (the inverse of the
/// dispatch's view of one).
fn message_of(
    m: proto::Message,
    first_received_at_ms: Option<u64>,
) -> Result<fila_core::Message, String> {
    let state = match m.state {
        1 => State::Visible,
        2 => State::InFlight,
        3 => State::Delayed,
        4 => State::Deferred,
        5 => State::DeadLettered,
        s => return Err(format!("an unknown state ({s})")),
    };
    let receipt = m
        .receipt
        .map(|r| Receipt::from_bytes(&r))
        .transpose()
        .map_err(|e| e.to_string())?;
    let dead_letter = m.dead_letter.map(|d| {
        let reason = match d.reason {
            1 => DeadLetterReason::MaxDeliveries,
            2 => DeadLetterReason::Expired,
            _ => DeadLetterReason::Consumer {
                reason: d.consumer_reason,
                description: d.description,
            },
        };
        Arc::new(DeadLetter {
            source_queue: Arc::from(d.source_queue),
            at_ms: d.at_ms,
            reason,
            delivery_count: d.delivery_count,
        })
    });
    let attributes = (!m.attributes.is_empty()).then(|| {
        m.attributes
            .into_iter()
            .map(|(k, v)| (k.into_boxed_str(), v.into_boxed_str()))
            .collect()
    });
    Ok(fila_core::Message {
        id: MessageId(m.id),
        seq: m.seq,
        payload: Payload::from(&m.payload[..]),
        attributes,
        channel: m.channel.map(Arc::from),
        inserted_at_ms: m.inserted_at_ms,
        expires_at_ms: m.expires_at_ms,
        next_visible_at_ms: m.next_visible_at_ms,
        delivery_count: m.delivery_count,
        first_received_at_ms,
        state,
        receipt,
        dead_letter,
        group: m.group.map(Arc::from),
        priority: m.priority,
    })
}

/// The answer of a forward that failed on the way (the leader may or may
/// not have run it).
pub(super) fn lost(leader: u64, e: &std::io::Error) -> Answer {
    error(
        ErrorCode::OUTCOME_UNKNOWN,
        format!("outcome_unknown: forwarding to the leader (node {leader}) failed: {e}"),
    )
    .into()
}

/// Whether `answer` is a leader's refusal of an ask of a kind it does not
/// know (an earlier version's, [`refused`]).
pub(super) fn unknown_ask(answer: &Answer) -> bool {
    matches!(answer, Answer::Wire(Response::Error(e))
        if e.code == ErrorCode::INVALID_ARGUMENT && e.message.contains(UNKNOWN_ASK))
}

/// What [`Ask::decode`] says of a kind it does not know.
const UNKNOWN_ASK: &str = "an unknown forward (";

/// The answer to bytes that are no forward.
pub(super) fn refused(why: &str) -> Vec<u8> {
    let answer: Answer = error(
        ErrorCode::INVALID_ARGUMENT,
        format!("invalid_argument: a forward that does not parse: {why}"),
    )
    .into();
    // An error's frame reads the same whatever its opcode.
    encode_answer(&answer, Opcode::Auth as u8, 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proto::QueueRef;

    fn message(first: Option<u64>, dead: bool) -> fila_core::Message {
        let mut receipt = [9u8; fila_core::RECEIPT_LEN];
        receipt[0] = 3;
        receipt[21..24].fill(0);
        fila_core::Message {
            id: MessageId(0x1234_5678_9abc),
            seq: 42,
            payload: Payload::from(&b"a body"[..]),
            attributes: Some(Arc::from(vec![("k".into(), "v".into())])),
            channel: Some(Arc::from("eu")),
            inserted_at_ms: 1_000,
            expires_at_ms: 9_000,
            next_visible_at_ms: 5_000,
            delivery_count: 3,
            first_received_at_ms: first,
            state: if dead {
                State::DeadLettered
            } else {
                State::InFlight
            },
            receipt: Some(Receipt::from_bytes(&receipt).unwrap()),
            dead_letter: dead.then(|| {
                Arc::new(DeadLetter {
                    source_queue: Arc::from("orders"),
                    at_ms: 4_000,
                    reason: DeadLetterReason::Consumer {
                        reason: "bad".into(),
                        description: "no good".into(),
                    },
                    delivery_count: 2,
                })
            }),
            group: Some(Arc::from("g")),
            priority: 4,
        }
    }

    fn receive() -> Box<Request> {
        Box::new(Request::Receive(proto::Receive {
            queue: QueueRef {
                name: "orders".into(),
                dlq: false,
            },
            max_messages: 10,
            visibility_ms: Some(30_000),
            wait_ms: Some(20_000),
            channel: None,
            fields: proto::Fields::ALL,
        }))
    }

    #[test]
    fn asks_decode_back() {
        let asks = [
            Ask::Run {
                group: 3,
                room: 1 << 20,
                req: receive(),
            },
            Ask::Wait {
                group: 2,
                room: 1 << 20,
                waited: std::time::Duration::from_millis(1_500),
                req: receive(),
            },
            Ask::List {
                group: 0,
                ranges: vec![
                    auth::Range::all("or"),
                    auth::Range {
                        prefix: "x".into(),
                        exact: true,
                    },
                ],
                after: "ab".into(),
                limit: 100,
            },
            Ask::Abandon {
                group: 7,
                receipts: vec![message(None, false).receipt.unwrap()],
            },
            Ask::Place {
                queue: "orders".into(),
                placing: Placing::Create(Some("orders-dlq".into())),
            },
            Ask::Place {
                queue: "orders".into(),
                placing: Placing::Create(None),
            },
            Ask::Place {
                queue: "orders".into(),
                placing: Placing::Find,
            },
            Ask::Place {
                queue: "orders".into(),
                placing: Placing::Remove,
            },
            Ask::Leader { group: 5 },
        ];
        for ask in asks {
            let bytes = ask.encode();
            assert_eq!(Ask::decode(&bytes).unwrap(), ask);
            // Cut anywhere, or with a byte more: refused, never a panic.
            let body = bytes.len() - 4;
            for cut in 0..body {
                let mut cut_short = bytes[..cut].to_vec();
                cut_short.extend_from_slice(&bytes[body..]);
                assert!(Ask::decode(&cut_short).is_err(), "cut at {cut}");
                assert!(Ask::decode(&bytes[..cut]).is_err(), "cut at {cut}");
            }
            let mut more = bytes[..body].to_vec();
            more.push(0);
            more.extend_from_slice(&bytes[body..]);
            assert!(Ask::decode(&more).is_err());
        }
        // A held forward is a receive's, nothing else's.
        let mut bytes = Ask::Wait {
            group: 2,
            room: 1,
            waited: std::time::Duration::ZERO,
            req: receive(),
        }
        .encode();
        let not_receive = Ask::Run {
            group: 2,
            room: 1,
            req: Box::new(Request::ServerStats),
        }
        .encode();
        bytes.truncate(17);
        bytes.extend_from_slice(&not_receive[9..]);
        assert_eq!(
            Ask::decode(&bytes),
            Err("a held forward that is not a receive".to_owned())
        );
    }

    /// A leader that does not know an ask's kind (an earlier version's,
    /// meeting `Ask::Wait`) answers so, and the follower tells that answer
    /// from any other refusal: it then polls instead of holding.
    #[test]
    fn an_ask_of_an_unknown_kind_is_told_apart() {
        let mut bytes = vec![99];
        bytes.extend_from_slice(&0u32.to_be_bytes());
        let why = Ask::decode(&bytes).unwrap_err();
        let (answer, _) = decode_answer(&refused(&why)).unwrap();
        assert!(unknown_ask(&answer), "{why}");
        let cut = refused("a forward cut short");
        assert!(!unknown_ask(&decode_answer(&cut).unwrap().0));
        let not_leader: Answer = error(ErrorCode::NOT_LEADER, "not_leader: node 2").into();
        let bytes = encode_answer(&not_leader, Opcode::Receive as u8, 0);
        assert!(!unknown_ask(&decode_answer(&bytes).unwrap().0));
    }

    #[test]
    fn messages_come_back_whole_with_their_first_delivery() {
        let ms = vec![message(Some(2_000), false), message(None, true)];
        for fields in [proto::Fields::ALL, proto::Fields(proto::Fields::ALL.0 & !1)] {
            let answer = Answer::Messages(fields, ms.clone());
            let bytes = encode_answer(&answer, Opcode::Receive as u8, 20_000);
            let (back, wait) = decode_answer(&bytes).unwrap();
            assert_eq!(wait, 20_000);
            match back {
                Answer::Messages(f, got) if fields == proto::Fields::ALL => {
                    assert_eq!(f, fields);
                    assert_eq!(got, ms);
                }
                Answer::Messages(f, got) => {
                    assert_eq!(f, fields);
                    assert_eq!(got.len(), 2);
                    assert_eq!(got[0].receipt, ms[0].receipt);
                }
                Answer::Wire(w) => panic!("{w:?}"),
            }
            for cut in 0..bytes.len() {
                assert!(decode_answer(&bytes[..cut]).is_err(), "cut at {cut}");
            }
        }
    }

    #[test]
    fn wire_answers_come_back_as_they_were() {
        let answers: [Response; 2] = [
            Response::Ok,
            error(ErrorCode::NOT_LEADER, "not_leader: elsewhere"),
        ];
        for want in answers {
            let bytes = encode_answer(&want.clone().into(), Opcode::DeleteQueue as u8, 0);
            match decode_answer(&bytes).unwrap() {
                (Answer::Wire(got), 0) => assert_eq!(got, want),
                _ => panic!("not a wire answer"),
            }
        }
        match decode_answer(&refused("why")).unwrap() {
            (Answer::Wire(Response::Error(e)), 0) => {
                assert_eq!(e.code, ErrorCode::INVALID_ARGUMENT)
            }
            _ => panic!("not refused"),
        }
    }
}
