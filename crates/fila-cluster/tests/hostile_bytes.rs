//! What a peer or a damaged disk can hand the decoders: arbitrary bytes,
//! and good encodings cut short or with a bit flipped. Every decoder
//! answers an error or a value; none panics, and none allocates past what
//! the bytes could hold (counts are checked against the bytes left).

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use fila_cluster::codec::{self, PeerAnswer, PeerRequest};
use fila_cluster::forward::{Ask, Placing, Range, Reply};
use fila_cluster::meta;
use fila_cluster::{
    Batch, ClusterMap, Entry, LogId, MapChange, Member, Membership, Partition, Vote,
};
use openraft::entry::RaftEntry;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, TransferLeaderError, TransferLeaderRequest,
    VoteRequest,
};
use openraft::EntryPayload;
use proptest::prelude::*;

fn log_id(term: u64, index: u64) -> LogId {
    LogId::new(
        openraft::impls::leader_id_adv::LeaderId { term, node_id: 2 },
        index,
    )
}

fn membership() -> Membership {
    let nodes: BTreeMap<u64, Member> = (1..=3)
        .map(|n| {
            (
                n,
                Member {
                    addr: format!("10.0.0.{n}:7711"),
                    client: format!("10.0.0.{n}:7710"),
                },
            )
        })
        .collect();
    Membership::new(vec![(1..=3).collect::<BTreeSet<u64>>()], nodes).unwrap()
}

/// Good encodings of every kind the decoders read.
fn samples() -> Vec<Vec<u8>> {
    let entries = vec![
        Entry::new(log_id(1, 1), EntryPayload::Blank),
        Entry::new(log_id(1, 2), EntryPayload::Membership(membership())),
        Entry::new(
            log_id(1, 3),
            EntryPayload::Normal(Batch(Bytes::from_static(b"\x04\x00\x00\x00\x02hi"))),
        ),
    ];
    let mut out = Vec::new();
    let mut b = Vec::new();
    codec::encode_request(
        &PeerRequest::Append(AppendEntriesRequest {
            vote: Vote::new_committed(1, 2),
            prev_log_id: Some(log_id(1, 0)),
            entries: entries.clone(),
            leader_commit: Some(log_id(1, 2)),
        }),
        &mut b,
    );
    out.push(std::mem::take(&mut b));
    codec::encode_request(
        &PeerRequest::Vote(VoteRequest::new(Vote::new(3, 1), Some(log_id(2, 9)))),
        &mut b,
    );
    out.push(std::mem::take(&mut b));
    codec::encode_answer(
        &PeerAnswer::Append(AppendEntriesResponse::HigherVote(Vote::new(4, 3))),
        &mut b,
    );
    out.push(std::mem::take(&mut b));
    codec::encode_answer(&PeerAnswer::Refused("no".into()), &mut b);
    out.push(std::mem::take(&mut b));
    for e in &entries {
        codec::encode_entry(e, &mut b);
        out.push(std::mem::take(&mut b));
    }
    out.push(codec::encode_vote(&Vote::new_committed(5, 1)));
    out.push(codec::encode_start(Some(&log_id(1, 7))));
    let stored = fila_cluster::StoredMembership::new(Some(log_id(1, 2)), membership());
    codec::encode_sm_head(Some(&log_id(1, 3)), &stored, &mut b);
    out.push(std::mem::take(&mut b));
    for req in transfers() {
        codec::encode_request(&req, &mut b);
        out.push(std::mem::take(&mut b));
    }
    for answer in transfer_answers() {
        codec::encode_answer(&answer, &mut b);
        out.push(std::mem::take(&mut b));
    }
    // The metadata group's changes and its map.
    let partitions: Vec<Partition> = (0..2)
        .map(|i| Partition {
            replicas: BTreeSet::from([1, 2, 3]),
            key: [i, i + 9],
        })
        .collect();
    let mut map = ClusterMap::default();
    for change in [
        MapChange::Init { partitions },
        MapChange::Place {
            queue: "jobs".into(),
            partition: 1,
        },
        MapChange::Replicas {
            partition: 0,
            replicas: BTreeSet::from([2, 4]),
        },
    ] {
        meta::encode_change(&change, &mut b);
        out.push(std::mem::take(&mut b));
        map.apply(change);
    }
    meta::encode_map(&map, &mut b);
    out.push(std::mem::take(&mut b));
    out.extend(forwards());
    out
}

/// Good encodings of the asks a node forwards and of a leader's replies.
fn forwards() -> Vec<Vec<u8>> {
    let receive = || {
        Box::new(fila_proto::Request::Receive(fila_proto::Receive {
            queue: fila_proto::QueueRef {
                name: "jobs".into(),
                dlq: false,
            },
            max_messages: 5,
            visibility_ms: Some(1_000),
            wait_ms: Some(2_000),
            channel: Some("eu".into()),
            fields: fila_proto::Fields::ALL,
        }))
    };
    let asks = [
        Ask::Run {
            group: 1,
            room: 4_096,
            req: receive(),
        },
        Ask::Wait {
            group: 1,
            room: 4_096,
            waited: std::time::Duration::from_millis(300),
            req: receive(),
        },
        Ask::List {
            group: 0,
            ranges: vec![Range {
                prefix: "jo".into(),
                exact: false,
            }],
            after: "a".into(),
            limit: 10,
        },
        Ask::Place {
            queue: "jobs".into(),
            placing: Placing::Create(Some("dlq".into())),
        },
        Ask::Leader { group: 2 },
    ];
    let mut out: Vec<Vec<u8>> = asks.iter().map(Ask::encode).collect();
    let mut frame = bytes::BytesMut::new();
    fila_proto::Response::Messages(Vec::new()).encode_in(
        fila_proto::VERSION,
        fila_proto::Opcode::Receive as u8,
        0,
        &mut frame,
    );
    out.push(Reply::encode(20_000, Some(&[Some(7), None]), &frame));
    out.push(Reply::of(
        &fila_proto::Response::Ok,
        fila_proto::Opcode::Auth as u8,
        3,
    ));
    out
}

fn transfers() -> Vec<PeerRequest> {
    vec![
        PeerRequest::TransferLeader(TransferLeaderRequest::new(
            Vote::new_committed(3, 1),
            2,
            Some(log_id(3, 40)),
        )),
        PeerRequest::TransferLeader(TransferLeaderRequest::new(Vote::new(1, 1), 3, None)),
    ]
}

fn transfer_answers() -> Vec<PeerAnswer> {
    vec![
        PeerAnswer::TransferLeader(Ok(())),
        PeerAnswer::TransferLeader(Err(TransferLeaderError::VoteChanged {
            expected: Vote::new_committed(3, 1),
            actual: Vote::new_committed(4, 2),
        })),
        PeerAnswer::TransferLeader(Err(TransferLeaderError::LogNotFlushed {
            expected: Some(log_id(3, 40)),
            actual: None,
        })),
    ]
}

/// Every decoder on `bytes`: none may panic.
fn decode_all(bytes: &[u8]) {
    let _ = codec::decode_request(bytes);
    let _ = codec::decode_answer(bytes);
    let _ = codec::decode_entry(bytes);
    let _ = codec::decode_vote(bytes);
    let _ = codec::decode_start(bytes);
    let _ = codec::decode_sm_head(bytes);
    let _ = meta::decode_change(bytes);
    let _ = meta::decode_map(bytes);
    let _ = Ask::decode(bytes);
    let _ = Reply::decode(bytes);
}

#[test]
fn good_encodings_decode_back() {
    let s = samples();
    assert!(
        matches!(codec::decode_request(&s[0]), Ok(PeerRequest::Append(a)) if a.entries.len() == 3)
    );
    assert!(matches!(
        codec::decode_request(&s[1]),
        Ok(PeerRequest::Vote(_))
    ));
    assert!(matches!(
        codec::decode_answer(&s[2]),
        Ok(PeerAnswer::Append(_))
    ));
    assert!(matches!(codec::decode_answer(&s[3]), Ok(PeerAnswer::Refused(w)) if w == "no"));
    assert_eq!(
        codec::decode_vote(&s[7]).unwrap(),
        Vote::new_committed(5, 1)
    );
    assert_eq!(codec::decode_start(&s[8]).unwrap(), Some(log_id(1, 7)));
    for (i, want) in transfers().iter().enumerate() {
        let got = codec::decode_request(&s[10 + i]).unwrap();
        assert_eq!(format!("{got:?}"), format!("{want:?}"));
    }
    for (i, want) in transfer_answers().iter().enumerate() {
        let got = codec::decode_answer(&s[12 + i]).unwrap();
        assert_eq!(format!("{got:?}"), format!("{want:?}"));
    }
    // A forward and its answer carry their bytes as they are, empty ones
    // too.
    for body in [Vec::new(), b"\x00\xffany bytes".to_vec()] {
        let mut b = Vec::new();
        codec::encode_request(&PeerRequest::Forward(body.clone()), &mut b);
        assert!(matches!(codec::decode_request(&b), Ok(PeerRequest::Forward(f)) if f == body));
        b.clear();
        codec::encode_answer(&PeerAnswer::Forwarded(body.clone()), &mut b);
        assert!(matches!(codec::decode_answer(&b), Ok(PeerAnswer::Forwarded(f)) if f == body));
    }
}

#[test]
fn forwards_decode_back() {
    let forwards = forwards();
    for ask in &forwards[..5] {
        assert_eq!(Ask::decode(ask).unwrap().encode(), *ask);
    }
    let reply = Reply::decode(&forwards[5]).unwrap();
    assert_eq!(reply.wait, 20_000);
    assert_eq!(reply.firsts, Some(vec![Some(7), None]));
    assert_eq!(Reply::decode(&forwards[6]).unwrap().wait, 3);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        decode_all(&bytes);
    }

    #[test]
    fn cut_or_flipped_encodings_never_panic(which in 0usize..26, cut in any::<usize>(), flip in any::<usize>(), bit in 0u8..8) {
        let s = samples();
        let good = &s[which % s.len()];
        decode_all(&good[..cut % (good.len() + 1)]);
        let mut bad = good.clone();
        let i = flip % bad.len();
        bad[i] ^= 1 << bit;
        decode_all(&bad);
    }
}
