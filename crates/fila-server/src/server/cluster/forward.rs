//! A forwarded request's answer, both ways: the leader's answer (a wire
//! answer, or messages with each one's first delivery time) in a reply's
//! envelope ([`fila_cluster::forward::Reply`]), and read back on the
//! node that forwarded it. What is forwarded and why is
//! [`fila_cluster::forward`]'s. A receive that waits is forwarded once and
//! held by the leader until messages come or its wait ends, on one of the
//! connections kept for such forwards; while all of those are taken, or
//! when the leader is of an earlier version (it refuses the kind), it is
//! forwarded once per look instead ([`super::POLL`]), holding no peer
//! connection while it waits.

use std::sync::Arc;

use bytes::BytesMut;
use fila_cluster::forward::Reply;
use fila_core::{DeadLetter, DeadLetterReason, MessageId, Payload, Receipt, State};
use fila_proto::{self as proto, ErrorCode, Response};

use crate::dispatch::{error, Answer};
pub(super) use fila_cluster::forward::{refused, Ask, Placing};

/// The bytes of `answer` to a request of `opcode`, with the wait a
/// receive goes on with.
pub(super) fn encode_answer(answer: &Answer, opcode: u8, wait_ms: u64) -> Vec<u8> {
    let mut frame = BytesMut::new();
    answer.encode(fila_proto::VERSION, opcode, 0, &mut frame);
    match answer {
        Answer::Wire(_) => Reply::encode(wait_ms, None, &frame),
        Answer::Messages(_, ms) => {
            let firsts: Vec<Option<u64>> = ms.iter().map(|m| m.first_received_at_ms).collect();
            Reply::encode(wait_ms, Some(&firsts), &frame)
        }
    }
}

/// The answer and wait `bytes` hold.
pub(super) fn decode_answer(bytes: &[u8]) -> Result<(Answer, u64), String> {
    let reply = Reply::decode(bytes)?;
    let answer = match (reply.firsts, reply.response) {
        (None, response) => Answer::Wire(response),
        (Some(first), Response::Messages(ms)) => messages(proto::Fields::ALL, ms, first)?,
        (Some(first), Response::Selected(fields, ms)) => messages(fields, ms, first)?,
        (Some(_), _) => return Err("messages that are not messages".into()),
    };
    Ok((answer, reply.wait))
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
        attempts: (!m.attempts.is_empty()).then(|| {
            Arc::new(
                m.attempts
                    .into_iter()
                    .filter_map(|a| {
                        let end = match a.end {
                            1 => fila_core::AttemptEnd::Expired,
                            2 => fila_core::AttemptEnd::Released,
                            3 => fila_core::AttemptEnd::DeadLettered,
                            _ => return None,
                        };
                        Some(fila_core::Attempt {
                            at_ms: a.at_ms,
                            delivery: a.delivery,
                            end,
                            reason: a.reason,
                            description: a.description,
                        })
                    })
                    .collect(),
            )
        }),
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
/// know (an earlier version's, [`fila_cluster::forward::refused`]).
pub(super) fn unknown_ask(answer: &Answer) -> bool {
    matches!(answer, Answer::Wire(r) if fila_cluster::forward::unknown_ask(r))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proto::Opcode;

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
            attempts: None,
        }
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
        match decode_answer(&fila_cluster::forward::refused("why")).unwrap() {
            (Answer::Wire(Response::Error(e)), 0) => {
                assert_eq!(e.code, ErrorCode::INVALID_ARGUMENT)
            }
            _ => panic!("not refused"),
        }
    }
}
