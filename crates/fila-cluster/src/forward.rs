//! What a node forwards to a group's leader (an [`Ask`]), and the
//! envelope of the leader's answer ([`Reply`]).
//!
//! A binary client told `not_leader` goes to the leader itself; an SQS SDK
//! or a browser cannot, so a request of the SQS API or the console that
//! reaches a follower is forwarded; so is what a node needs of another
//! group's leader for any caller (a queue's placement from the metadata
//! leader, each partition's part of a list, of the server's stats, of a
//! cluster change, who leads a partition this node holds no replica of).
//! The follower sends it over the peer protocol
//! ([`crate::peer::Forwarder`]: authenticated with the cluster's secret,
//! inside TLS when the nodes speak it; [`crate::node::Transport`]), the
//! leader runs it on its replica exactly as its own requests and sends
//! back the answer. The follower checked the caller's credentials and
//! grants before: the leader trusts its peers to have done so.
//!
//! The bytes: an ask is its kind, then a run (the answer's room, the
//! request's frame), a held receive (the answer's room, the milliseconds
//! already waited, the request's frame), a list (its cursor, limit and the
//! caller's visible ranges), leases given back (receipts) or a placement
//! (the queue, and whether to place it, beside which), then the group
//! (`u32`, last). A reply is the wait a receive asked for or its queue's
//! default (for a placement, the partition plus one; for a leader's name,
//! its id plus one), then for messages each one's first delivery time
//! (the frame does not carry it), then the answer's frame of the binary
//! protocol. Every length is checked against the bytes left: a peer's
//! bytes never panic a node.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use fila_core::Receipt;
use fila_proto::{self as proto, Decoded, ErrorCode, Opcode, Request, Response, WireError};

use crate::codec::{self, Reader};

/// The metadata group's number on the peer protocol (a partition's is its
/// own number).
pub const META: u32 = u32::MAX;
/// A cluster change's first step, on the metadata leader: the partitions'
/// replicas placed anew in the map (before any partition's members
/// change; its number on the peer protocol).
pub const MAP: u32 = u32::MAX - 1;

/// How long a forward to a leader may take.
pub const FORWARD_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a replica may take to name its partition's leader.
pub const LEADER_ASK_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a forwarded cluster change may take (a move runs until done,
/// within a minute).
pub const CHANGE_FORWARD_TIMEOUT: Duration = Duration::from_secs(70);

/// Queue names a list shows: those starting with `prefix`, or exactly it
/// (the caller's grants, as the node it reached read them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Range {
    /// Every name of the range starts with it.
    pub prefix: String,
    /// The range is this one name.
    pub exact: bool,
}

/// A forwarded request, to the leader of one group.
#[derive(Debug, PartialEq)]
pub enum Ask {
    /// A request on a partition, and the bytes of messages its answer may
    /// carry — for a cluster change, instead, the metadata log index its
    /// partition's step waits for.
    Run {
        /// The group.
        group: u32,
        /// The room (or the index).
        room: usize,
        /// The request.
        req: Box<Request>,
    },
    /// A list of a partition's queues: what the caller may see, from
    /// where, how many.
    List {
        /// The partition.
        group: u32,
        /// What the caller may see.
        ranges: Vec<Range>,
        /// The names after this one.
        after: String,
        /// At most this many.
        limit: usize,
    },
    /// A receive that waits for messages, held by the leader until
    /// messages come or its wait ends (`waited` of it already spent on the
    /// follower): sent on a connection kept for such forwards
    /// ([`crate::peer::Forwarder::forward_held`]). An earlier version
    /// refuses it as unknown ([`unknown_ask`]), and the follower then
    /// polls.
    Wait {
        /// The partition.
        group: u32,
        /// The room its answer may take.
        room: usize,
        /// How long it waited already.
        waited: Duration,
        /// The receive.
        req: Box<Request>,
    },
    /// Leases of a partition whose answer nobody took.
    Abandon {
        /// The partition.
        group: u32,
        /// The leases' receipts.
        receipts: Vec<Receipt>,
    },
    /// To the metadata leader: the partition a queue lives in, placing it
    /// first or taking its placement away. The reply is `Ok` with the
    /// partition plus one (0: placed nowhere) as its wait.
    Place {
        /// The queue.
        queue: String,
        /// What to do.
        placing: Placing,
    },
    /// To a replica of a partition this node holds none of: the leader it
    /// knows of. The reply is `Ok` with the leader's id plus one (0: not
    /// known) as its wait.
    Leader {
        /// The partition.
        group: u32,
    },
}

/// What a placement does.
#[derive(Clone, Debug, PartialEq)]
pub enum Placing {
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
    codec::put_u32(out, s.len());
    out.extend_from_slice(s.as_bytes());
}

/// The rest of the bytes, one frame of the binary protocol.
fn frame(r: &mut Reader<'_>) -> Result<(proto::FrameHeader, Bytes), String> {
    let rest = std::mem::take(&mut r.data);
    match proto::decode_frame(rest, proto::FRAME_LEN_LIMIT) {
        Ok(Decoded::Frame {
            header,
            body,
            consumed,
        }) if consumed == rest.len() => Ok((header, Bytes::copy_from_slice(body))),
        Ok(_) => Err("a frame that is not the whole rest".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// An answer's room.
fn room(r: &mut Reader<'_>) -> Result<usize, String> {
    usize::try_from(r.u64()?).map_err(|_| "a room past memory".into())
}

/// A request's frame, the rest of the bytes.
fn request(r: &mut Reader<'_>) -> Result<Request, String> {
    let (header, body) = frame(r)?;
    Request::decode(&header, body).map_err(|e| e.to_string())
}

/// Appends `req`'s frame (the rest of an ask, before its group).
fn push_request(out: &mut Vec<u8>, req: &Request) {
    let mut frame = BytesMut::new();
    req.encode(0, &mut frame);
    out.extend_from_slice(&frame);
}

impl Ask {
    /// The group it goes to.
    pub fn group(&self) -> u32 {
        match self {
            Ask::Run { group, .. }
            | Ask::Wait { group, .. }
            | Ask::List { group, .. }
            | Ask::Abandon { group, .. }
            | Ask::Leader { group } => *group,
            Ask::Place { .. } => META,
        }
    }

    /// How long its forward may take.
    pub fn timeout(&self) -> Duration {
        match self {
            Ask::Run { req, .. } if req.opcode() == Opcode::ChangeCluster => CHANGE_FORWARD_TIMEOUT,
            // Asked of each replica in turn: one that does not answer
            // soon is passed over.
            Ask::Leader { .. } => LEADER_ASK_TIMEOUT,
            // Held until its wait (at most the longest) ends.
            Ask::Wait { .. } => {
                FORWARD_TIMEOUT + Duration::from_millis(fila_core::limits::WAIT_MS_MAX)
            }
            _ => FORWARD_TIMEOUT,
        }
    }

    /// Its bytes.
    pub fn encode(&self) -> Vec<u8> {
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

    /// The ask `bytes` hold, or why they are none.
    pub fn decode(bytes: &[u8]) -> Result<Ask, String> {
        // The group is the last four bytes (after a run's frame).
        let Some(cut) = bytes.len().checked_sub(4) else {
            return Err("a forward cut short".into());
        };
        let (bytes, group) = bytes.split_at(cut);
        let group = u32::from_be_bytes(group.try_into().expect("4"));
        let mut r = Reader { data: bytes };
        let ask = match r.u8()? {
            RUN => {
                let room = room(&mut r)?;
                let req = request(&mut r)?;
                return Ok(Ask::Run {
                    group,
                    room,
                    req: Box::new(req),
                });
            }
            WAIT => {
                let room = room(&mut r)?;
                let waited = Duration::from_millis(r.u64()?);
                let req = request(&mut r)?;
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
                let after = codec::text(&mut r)?;
                let limit = usize::try_from(r.u64()?).map_err(|_| "a limit past memory")?;
                let n = codec::count(&mut r, 5)?;
                let mut ranges = Vec::with_capacity(n);
                for _ in 0..n {
                    let exact = r.u8()? != 0;
                    ranges.push(Range {
                        prefix: codec::text(&mut r)?,
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
                let n = codec::count(&mut r, fila_core::RECEIPT_LEN)?;
                let receipts = (0..n)
                    .map(|_| {
                        Receipt::from_bytes(r.take(fila_core::RECEIPT_LEN)?)
                            .map_err(|e| e.to_string())
                    })
                    .collect::<Result<_, String>>()?;
                Ask::Abandon { group, receipts }
            }
            PLACE => {
                let queue = codec::text(&mut r)?;
                let placing = match r.u8()? {
                    0 => Placing::Find,
                    1 => Placing::Create(None),
                    2 => Placing::Create(Some(codec::text(&mut r)?)),
                    3 => Placing::Remove,
                    k => return Err(format!("an unknown placement ({k})")),
                };
                if group != META {
                    return Err("a placement not to the metadata group".into());
                }
                Ask::Place { queue, placing }
            }
            LEADER => Ask::Leader { group },
            k => return Err(format!("{UNKNOWN_ASK}{k})")),
        };
        r.end()?;
        Ok(ask)
    }
}

/// A leader's reply to an ask, read back.
#[derive(Debug, PartialEq)]
pub struct Reply {
    /// The wait a receive goes on with (a placement's partition plus one,
    /// a leader's id plus one).
    pub wait: u64,
    /// For an answer of messages, each one's first delivery time.
    pub firsts: Option<Vec<Option<u64>>>,
    /// The answer.
    pub response: Response,
}

impl Reply {
    /// The bytes of a reply: `wait`, the first delivery times of the
    /// messages it carries (`None`: it carries none), then `frame`, the
    /// answer's frame.
    pub fn encode(wait: u64, firsts: Option<&[Option<u64>]>, frame: &[u8]) -> Vec<u8> {
        let mut out = wait.to_be_bytes().to_vec();
        match firsts {
            None => out.push(WIRE),
            Some(firsts) => {
                out.push(MESSAGES);
                out.extend_from_slice(&(firsts.len() as u32).to_be_bytes());
                for first in firsts {
                    match first {
                        Some(at) => {
                            out.push(1);
                            out.extend_from_slice(&at.to_be_bytes());
                        }
                        None => out.push(0),
                    }
                }
            }
        }
        out.extend_from_slice(frame);
        out
    }

    /// The bytes of a reply of `response` (no messages) to a request of
    /// `opcode`.
    pub fn of(response: &Response, opcode: u8, wait: u64) -> Vec<u8> {
        let mut frame = BytesMut::new();
        response.encode_in(proto::VERSION, opcode, 0, &mut frame);
        Reply::encode(wait, None, &frame)
    }

    /// The reply `bytes` hold, or why they are none.
    pub fn decode(bytes: &[u8]) -> Result<Reply, String> {
        let mut r = Reader { data: bytes };
        let wait = r.u64()?;
        let firsts = match r.u8()? {
            WIRE => None,
            MESSAGES => {
                let n = codec::count(&mut r, 1)?;
                let mut firsts = Vec::with_capacity(n);
                for _ in 0..n {
                    firsts.push(match r.u8()? {
                        0 => None,
                        _ => Some(r.u64()?),
                    });
                }
                Some(firsts)
            }
            k => return Err(format!("an unknown answer ({k})")),
        };
        let (header, body) = frame(&mut r)?;
        let response = Response::decode(&header, body).map_err(|e| e.to_string())?;
        Ok(Reply {
            wait,
            firsts,
            response,
        })
    }
}

/// What [`Ask::decode`] says of a kind it does not know.
const UNKNOWN_ASK: &str = "an unknown forward (";

/// The reply to bytes that are no ask.
pub fn refused(why: &str) -> Vec<u8> {
    let refusal = Response::Error(WireError {
        code: ErrorCode::INVALID_ARGUMENT,
        message: format!("invalid_argument: a forward that does not parse: {why}"),
    });
    // An error's frame reads the same whatever its opcode.
    Reply::of(&refusal, Opcode::Auth as u8, 0)
}

/// Whether `response` is a leader's refusal of an ask of a kind it does
/// not know (an earlier version's, [`refused`]).
pub fn unknown_ask(response: &Response) -> bool {
    matches!(response, Response::Error(e)
        if e.code == ErrorCode::INVALID_ARGUMENT && e.message.contains(UNKNOWN_ASK))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proto::QueueRef;

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

    fn receipt() -> Receipt {
        let mut receipt = [9u8; fila_core::RECEIPT_LEN];
        receipt[0] = 3;
        receipt[21..24].fill(0);
        Receipt::from_bytes(&receipt).unwrap()
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
                waited: Duration::from_millis(1_500),
                req: receive(),
            },
            Ask::List {
                group: 0,
                ranges: vec![
                    Range {
                        prefix: "or".into(),
                        exact: false,
                    },
                    Range {
                        prefix: "x".into(),
                        exact: true,
                    },
                ],
                after: "ab".into(),
                limit: 100,
            },
            Ask::Abandon {
                group: 7,
                receipts: vec![receipt()],
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
            waited: Duration::ZERO,
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

    /// The bytes of the asks a node of an earlier version sends and reads
    /// (the forward kinds are the peers' protocol: a node being upgraded
    /// meets nodes that are not yet).
    #[test]
    fn asks_keep_their_bytes() {
        let place = Ask::Place {
            queue: "q".into(),
            placing: Placing::Create(Some("d".into())),
        };
        assert_eq!(
            place.encode(),
            [&[4, 0, 0, 0, 1, b'q', 2, 0, 0, 0, 1, b'd'][..], &[0xff; 4]].concat()
        );
        assert_eq!(Ask::Leader { group: 2 }.encode(), [5, 0, 0, 0, 2]);
        let abandon = Ask::Abandon {
            group: 1,
            receipts: vec![],
        };
        assert_eq!(abandon.encode(), [3, 0, 0, 0, 0, 0, 0, 0, 1]);
        let reply = Reply::of(&Response::Ok, Opcode::Auth as u8, 3);
        assert_eq!(reply[..9], [0, 0, 0, 0, 0, 0, 0, 3, 0]);
        let back = Reply::decode(&reply).unwrap();
        assert_eq!(
            (back.wait, back.firsts, back.response),
            (3, None, Response::Ok)
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
        let reply = Reply::decode(&refused(&why)).unwrap();
        assert!(unknown_ask(&reply.response), "{why}");
        let cut = Reply::decode(&refused("a forward cut short")).unwrap();
        assert!(!unknown_ask(&cut.response));
        let not_leader = Response::Error(WireError {
            code: ErrorCode::NOT_LEADER,
            message: "not_leader: node 2".into(),
        });
        let reply = Reply::decode(&Reply::of(&not_leader, Opcode::Receive as u8, 0)).unwrap();
        assert!(!unknown_ask(&reply.response));
    }

    #[test]
    fn replies_cut_short_are_refused() {
        let firsts = [Some(2_000), None];
        let mut frame = BytesMut::new();
        Response::Ok.encode_in(proto::VERSION, Opcode::Auth as u8, 0, &mut frame);
        let bytes = Reply::encode(7, Some(&firsts), &frame);
        let back = Reply::decode(&bytes).unwrap();
        assert_eq!(back.firsts.as_deref(), Some(&firsts[..]));
        for cut in 0..bytes.len() {
            assert!(Reply::decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
    }
}
