//! Round trips of every request and answer through frames, whole and cut at
//! every point, and the decoder on arbitrary bytes.

use bytes::{Bytes, BytesMut};
use fila_proto::*;
use proptest::prelude::*;

#[path = "roundtrip/strategies.rs"]
mod strategies;

use strategies::*;

/// Decodes frames from `bytes` fed in pieces cut at `cuts`, as a socket
/// would deliver them.
fn frames_from_pieces(bytes: &[u8], cuts: &[usize]) -> Vec<(FrameHeader, Bytes)> {
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    let mut at = 0;
    let mut points: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
    points.push(bytes.len());
    points.sort_unstable();
    for p in points {
        buf.extend_from_slice(&bytes[at..p.max(at)]);
        at = p.max(at);
        while let Some(frame) = split_frame(&mut buf, FRAME_LEN_DEFAULT).expect("valid frames") {
            out.push(frame);
        }
    }
    assert!(buf.is_empty(), "every byte was a frame");
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

    #[test]
    fn every_request_round_trips(reqs in proptest::collection::vec(request(), 1..5), id in any::<u64>(), cuts in proptest::collection::vec(any::<usize>(), 0..6)) {
        let mut buf = BytesMut::new();
        for (i, r) in reqs.iter().enumerate() {
            r.encode(id.wrapping_add(i as u64), &mut buf);
        }
        let frames = frames_from_pieces(&buf, &cuts);
        prop_assert_eq!(frames.len(), reqs.len());
        for (i, ((header, body), want)) in frames.into_iter().zip(&reqs).enumerate() {
            prop_assert_eq!(header.request_id, id.wrapping_add(i as u64));
            prop_assert_eq!(header.opcode, want.opcode() as u8);
            prop_assert_eq!(&Request::decode(&header, body)?, want);
        }
    }

    #[test]
    fn every_response_round_trips((op, resp) in response(), id in any::<u64>(), cuts in proptest::collection::vec(any::<usize>(), 0..6)) {
        let mut buf = BytesMut::new();
        resp.encode(op as u8, id, &mut buf);
        let frames = frames_from_pieces(&buf, &cuts);
        prop_assert_eq!(frames.len(), 1);
        let (header, body) = frames.into_iter().next().unwrap();
        prop_assert!(header.is_response());
        prop_assert_eq!(header.request_id, id);
        prop_assert_eq!(Response::decode(&header, body)?, resp);
    }

    #[test]
    fn messages_encoded_from_views_are_the_owned_answer(ms in proptest::collection::vec(message(), 0..4), f in 0u8..16, id in any::<u64>()) {
        let fields = Fields(f);
        let mut borrowed = BytesMut::new();
        encode_messages(Opcode::Receive as u8, id, fields, ms.iter().map(MessageRef::of), &mut borrowed);
        let selected: Vec<Message> = ms.iter().map(|m| only(m.clone(), fields)).collect();
        let owned = if fields == Fields::ALL {
            Response::Messages(selected)
        } else {
            Response::Selected(fields, selected)
        };
        let mut want = BytesMut::new();
        owned.encode(Opcode::Receive as u8, id, &mut want);
        prop_assert_eq!(&borrowed[..], &want[..]);
        let frames = frames_from_pieces(&borrowed, &[]);
        let (header, body) = frames.into_iter().next().unwrap();
        prop_assert_eq!(Response::decode(&header, body)?, owned);
    }

    #[test]
    fn arbitrary_bytes_never_panic_the_decoder(bytes in proptest::collection::vec(any::<u8>(), 0..256), max in 0usize..512) {
        match decode_frame(&bytes, max) {
            Ok(Decoded::Frame { header, body, consumed }) => {
                prop_assert!(consumed <= bytes.len());
                prop_assert_eq!(body.len() + LEN_PREFIX + HEADER_LEN, consumed);
                let _ = Request::decode(&header, Bytes::copy_from_slice(body));
                let _ = Response::decode(&header, Bytes::copy_from_slice(body));
            }
            Ok(Decoded::NeedMore(n)) => prop_assert!(n > bytes.len()),
            Err(e) => {
                let expected = matches!(e, ProtoError::FrameTooLarge { .. } | ProtoError::Malformed(_));
                prop_assert!(expected, "unexpected error {:?}", e);
            }
        }
    }

    #[test]
    fn a_truncated_body_is_malformed_never_a_panic(req in request(), cut in any::<usize>()) {
        let mut buf = BytesMut::new();
        req.encode(1, &mut buf);
        let Ok(Decoded::Frame { header, body, .. }) = decode_frame(&buf, FRAME_LEN_DEFAULT) else { panic!("a frame") };
        if !body.is_empty() {
            let short = &body[..cut % body.len()];
            let got = Request::decode(&header, Bytes::copy_from_slice(short));
            // Parts added to a request later are optional at its end (a
            // receive's fields, a patch's dedup settings, a put's
            // extension): cut where one begins, the body is the same request
            // in the layout before it, and nothing else decodes.
            if let Ok(g) = &got {
                prop_assert_eq!(g.opcode(), req.opcode());
                let mut again = BytesMut::new();
                g.encode(1, &mut again);
                let Ok(Decoded::Frame { body: b2, .. }) = decode_frame(&again, FRAME_LEN_DEFAULT) else { panic!("a frame") };
                prop_assert_eq!(b2, short, "a cut body decodes only as a whole older layout");
                return Ok(());
            }
            prop_assert!(matches!(got, Err(ProtoError::Malformed(_))), "{:?}", got);
        }
    }
}

#[test]
fn payloads_are_slices_of_the_frame_not_copies() {
    let mut buf = BytesMut::new();
    let payload = Bytes::from(vec![7u8; 100]);
    Request::Put {
        queue: "q".into(),
        messages: vec![PutEntry {
            payload: payload.clone(),
            ..PutEntry::default()
        }],
    }
    .encode(1, &mut buf);
    let (header, body) = split_frame(&mut buf, FRAME_LEN_DEFAULT).unwrap().unwrap();
    let range = body.as_ptr() as usize..body.as_ptr() as usize + body.len();
    let Request::Put { messages, .. } = Request::decode(&header, body).unwrap() else {
        panic!("a put")
    };
    let p = messages[0].payload.as_ptr() as usize;
    assert!(range.contains(&p), "the payload points into the frame");
    assert_eq!(messages[0].payload, payload);
}

#[test]
fn an_oversized_length_prefix_is_refused_before_buffering() {
    let mut bytes = vec![0u8; 16];
    bytes[..4].copy_from_slice(&(FRAME_LEN_DEFAULT as u32 + 1).to_be_bytes());
    let e = decode_frame(&bytes, FRAME_LEN_DEFAULT).unwrap_err();
    assert_eq!(e.code(), ErrorCode::FRAME_TOO_LARGE);
    assert!(!e.is_recoverable());
    // Clamped to the absolute limit whatever the caller asks.
    bytes[..4].copy_from_slice(&(FRAME_LEN_LIMIT as u32 + 1).to_be_bytes());
    assert!(matches!(
        decode_frame(&bytes, usize::MAX),
        Err(ProtoError::FrameTooLarge { .. })
    ));
}

#[test]
fn version_flags_and_opcodes_are_checked() {
    let mut buf = BytesMut::new();
    Request::ServerStats.encode(9, &mut buf);
    for v in [0, VERSION + 1, 255] {
        let mut bad_version = buf.clone();
        bad_version[4] = v;
        let Ok(Decoded::Frame { header, body, .. }) = decode_frame(&bad_version, 1 << 20) else {
            panic!()
        };
        assert_eq!(
            Request::decode(&header, Bytes::copy_from_slice(body)),
            Err(ProtoError::UnsupportedVersion(v))
        );
    }
    // Every version from the oldest on is spoken.
    for v in OLDEST_VERSION..=VERSION {
        let mut spoken = buf.clone();
        spoken[4] = v;
        let Ok(Decoded::Frame { header, body, .. }) = decode_frame(&spoken, 1 << 20) else {
            panic!()
        };
        assert_eq!(
            Request::decode(&header, Bytes::copy_from_slice(body)),
            Ok(Request::ServerStats)
        );
    }
    let mut bad_op = buf.clone();
    bad_op[5] = 0xEE;
    let Ok(Decoded::Frame { header, body, .. }) = decode_frame(&bad_op, 1 << 20) else {
        panic!()
    };
    let e = Request::decode(&header, Bytes::copy_from_slice(body)).unwrap_err();
    assert_eq!(
        (e.clone(), e.code(), e.is_recoverable()),
        (
            ProtoError::UnknownOpcode(0xEE),
            ErrorCode::UNKNOWN_OPCODE,
            true
        )
    );
    let mut bad_flags = buf.clone();
    bad_flags[7] = 0x80;
    let Ok(Decoded::Frame { header, body, .. }) = decode_frame(&bad_flags, 1 << 20) else {
        panic!()
    };
    assert!(matches!(
        Request::decode(&header, Bytes::copy_from_slice(body)),
        Err(ProtoError::Malformed(_))
    ));
    let mut trailing = buf.clone();
    trailing.extend_from_slice(&[0]);
    let len = u32::from_be_bytes([trailing[0], trailing[1], trailing[2], trailing[3]]) + 1;
    trailing[..4].copy_from_slice(&len.to_be_bytes());
    let Ok(Decoded::Frame { header, body, .. }) = decode_frame(&trailing, 1 << 20) else {
        panic!()
    };
    assert!(matches!(
        Request::decode(&header, Bytes::copy_from_slice(body)),
        Err(ProtoError::Malformed(_))
    ));
}

#[test]
fn a_list_count_beyond_the_frame_is_refused_without_allocating_it() {
    // A delete claiming 65 535 receipts in a 30-byte body.
    let mut buf = BytesMut::new();
    Request::Delete {
        queue: QueueRef {
            name: "q".into(),
            dlq: false,
        },
        receipts: vec![],
    }
    .encode(1, &mut buf);
    let n = buf.len();
    buf[n - 2..].copy_from_slice(&u16::MAX.to_be_bytes());
    let Ok(Decoded::Frame { header, body, .. }) = decode_frame(&buf, 1 << 20) else {
        panic!()
    };
    assert_eq!(
        Request::decode(&header, Bytes::copy_from_slice(body)),
        Err(ProtoError::Malformed("a list is longer than its frame"))
    );
}

#[test]
fn error_codes_are_stable_and_named() {
    let names: Vec<(u16, &str)> = ErrorCode::ALL.iter().map(|(c, n)| (c.0, *n)).collect();
    assert_eq!(names[0], (1, "invalid_argument"));
    assert_eq!(names[11], (12, "forbidden"));
    assert_eq!(ErrorCode(100).as_str(), "frame_too_large");
    assert_eq!(ErrorCode(9999).as_str(), "unknown");
    let mut codes: Vec<u16> = names.iter().map(|(c, _)| *c).collect();
    codes.dedup();
    assert_eq!(codes.len(), ErrorCode::ALL.len(), "no code is used twice");
}

#[test]
fn the_put_example_of_docs_protocol_md_is_byte_exact() {
    let mut buf = BytesMut::new();
    Request::Put {
        queue: "q".into(),
        messages: vec![PutEntry {
            payload: Bytes::from_static(b"hi"),
            ..PutEntry::default()
        }],
    }
    .encode(1, &mut buf);
    let want: Vec<u8> = vec![
        0, 0, 0, 0x1c, 6, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1, b'q', 0, 1, 0, 0, 0, 2, b'h',
        b'i', 0, 0, 0, 0, 0,
    ];
    assert_eq!(&buf[..], &want[..]);
}

#[test]
fn borrowed_encoders_write_the_same_bytes_as_owned_requests() {
    let payloads = [Bytes::from_static(b"one"), Bytes::from_static(b"two")];
    let entries: Vec<PutEntry> = payloads
        .iter()
        .map(|p| PutEntry {
            payload: p.clone(),
            ..PutEntry::default()
        })
        .collect();
    let (mut a, mut b) = (BytesMut::new(), BytesMut::new());
    PayloadsRef {
        queue: "jobs",
        payloads: &payloads,
    }
    .encode(3, &mut a);
    Request::Put {
        queue: "jobs".into(),
        messages: entries,
    }
    .encode(3, &mut b);
    assert_eq!(a, b);

    let receipts = [[7u8; 32], [9u8; 32]];
    let (mut a, mut b) = (BytesMut::new(), BytesMut::new());
    DeleteRef {
        queue: "jobs",
        dlq: true,
        receipts: &receipts,
    }
    .encode(4, &mut a);
    Request::Delete {
        queue: QueueRef {
            name: "jobs".into(),
            dlq: true,
        },
        receipts: receipts.to_vec(),
    }
    .encode(4, &mut b);
    assert_eq!(a, b);
}

#[test]
fn a_receive_of_every_field_keeps_the_original_layout() {
    let r = Receive {
        queue: QueueRef {
            name: "q".into(),
            dlq: false,
        },
        max_messages: 20,
        visibility_ms: None,
        wait_ms: Some(5),
        channel: None,
        fields: Fields::ALL,
    };
    let (mut all, mut fewer) = (BytesMut::new(), BytesMut::new());
    Request::Receive(r.clone()).encode(1, &mut all);
    Request::Receive(Receive {
        fields: Fields::PAYLOAD_AND_RECEIPT,
        ..r
    })
    .encode(1, &mut fewer);
    // The fields byte is appended only when the consumer asks for less.
    assert_eq!(fewer.len(), all.len() + 1);
    assert_eq!(fewer[fewer.len() - 1], 0);
    // An unknown field bit is refused.
    let mut bad = fewer.clone();
    let last = bad.len() - 1;
    bad[last] = 0x10;
    let (header, body) = split_frame(&mut bad, FRAME_LEN_DEFAULT).unwrap().unwrap();
    assert!(Request::decode(&header, body).is_err());
}

#[test]
fn payload_and_receipt_answers_are_mostly_payload() {
    let m = Message {
        id: 1,
        seq: 2,
        payload: Bytes::from(vec![b'x'; 100]),
        attributes: Vec::new(),
        channel: None,
        inserted_at_ms: 3,
        expires_at_ms: 4,
        next_visible_at_ms: 5,
        delivery_count: 1,
        state: 2,
        receipt: Some([1; 32]),
        dead_letter: None,
        group: None,
        priority: 1,
        attempts: Vec::new(),
    };
    let (mut full, mut few) = (BytesMut::new(), BytesMut::new());
    Response::Messages(vec![m.clone(); 20]).encode(Opcode::Receive as u8, 1, &mut full);
    Response::Selected(Fields::PAYLOAD_AND_RECEIPT, vec![m.clone(); 20]).encode(
        Opcode::Receive as u8,
        1,
        &mut few,
    );
    // A frame's 16-byte head and the list's count, then per message
    // 4 + 100 + 1 + 32 bytes against 194 with every field (the fields'
    // mask takes one more byte per answer).
    assert_eq!(full.len(), 16 + 2 + 20 * 194);
    assert_eq!(few.len(), 16 + 1 + 2 + 20 * 137);
    let (header, body) = split_frame(&mut few, FRAME_LEN_DEFAULT).unwrap().unwrap();
    let got = Response::decode(&header, body)
        .unwrap()
        .into_messages()
        .unwrap();
    assert_eq!(got[0].payload, m.payload);
    assert_eq!(got[0].receipt, m.receipt);
    assert_eq!((got[0].id, got[0].delivery_count), (0, 0));
}

#[test]
fn all_ok_names_the_first_failed_entry() {
    let e = |code| WireError {
        code,
        message: String::new(),
    };
    let v: Vec<Entry<u32>> = vec![
        Ok(1),
        Err(e(ErrorCode::NOT_FOUND)),
        Err(e(ErrorCode::INVALID_ARGUMENT)),
    ];
    let (i, err) = all_ok(v).unwrap_err();
    assert_eq!((i, err.code), (1, ErrorCode::NOT_FOUND));
    assert_eq!(all_ok::<u32>(vec![Ok(1), Ok(2)]).unwrap(), vec![1, 2]);
    assert_eq!(
        Response::Error(e(ErrorCode::NOT_FOUND))
            .into_result()
            .unwrap_err()
            .code,
        ErrorCode::NOT_FOUND
    );
}

/// Decodes the one frame in `buf`, as its header says.
fn answer_of(buf: &BytesMut) -> (FrameHeader, Response) {
    let Ok(Decoded::Frame { header, body, .. }) = decode_frame(buf, 1 << 20) else {
        panic!("one frame")
    };
    let r = Response::decode(&header, Bytes::copy_from_slice(body)).unwrap();
    (header, r)
}

/// Versions 2 and 3 (docs/protocol.md, "Versions"): answers in version 2
/// are laid out as before version 3 — settings without the retry policy's
/// four fields, stats of eighteen counters — and in version 3 as before
/// version 4 (settings without the paused halves); each the same bytes as
/// the next version's up to there, and read back as such (the policy as
/// its defaults, no retries, nothing paused).
#[test]
fn version_2_and_3_answers_keep_their_layout() {
    let settings = Settings {
        visibility_timeout_ms: 45_000,
        tags: vec![("k".into(), "v".into())],
        priority_levels: 3,
        retry_initial_ms: 100,
        retry_multiplier_pct: 150,
        retry_max_ms: 1_000,
        retry_jitter_pct: 10,
        paused: Halves::BOTH,
        attempt_history: 7,
        ..Settings::default()
    };
    let (mut v2, mut v3, mut v4) = (BytesMut::new(), BytesMut::new(), BytesMut::new());
    let answer = Response::Queue(Box::new(settings.clone()));
    answer.encode_in(2, Opcode::GetQueue as u8, 4, &mut v2);
    answer.encode_in(3, Opcode::GetQueue as u8, 4, &mut v3);
    answer.encode_in(4, Opcode::GetQueue as u8, 4, &mut v4);
    assert_eq!(v3.len() - v2.len(), 8 + 4 + 8 + 1);
    assert_eq!(&v2[5..], &v3[5..v2.len()]);
    // Version 3's: all but the paused halves, version 4's last byte; and
    // version 4's all but the attempt history's number, version 5's last
    // four.
    assert_eq!(v4.len() - v3.len(), 1);
    assert_eq!(&v3[5..], &v4[5..v3.len()]);
    let mut v5 = BytesMut::new();
    answer.encode_in(5, Opcode::GetQueue as u8, 4, &mut v5);
    assert_eq!(v5.len() - v4.len(), 4);
    assert_eq!(&v4[5..], &v5[5..v4.len()]);
    let (header, got) = answer_of(&v3);
    assert_eq!(header.version, 3);
    let unpaused = Settings {
        paused: Halves::default(),
        attempt_history: 0,
        ..settings.clone()
    };
    assert_eq!(got, Response::Queue(Box::new(unpaused)));
    let (header, got) = answer_of(&v2);
    assert_eq!(header.version, 2);
    let before = Settings {
        retry_initial_ms: 0,
        retry_multiplier_pct: 200,
        retry_max_ms: 900_000,
        retry_jitter_pct: 0,
        paused: Halves::default(),
        attempt_history: 0,
        ..settings.clone()
    };
    assert_eq!(got, Response::Queue(Box::new(before)));
    let v4_settings = Settings {
        attempt_history: 0,
        ..settings.clone()
    };
    assert_eq!(answer_of(&v4).1, Response::Queue(Box::new(v4_settings)));
    assert_eq!(answer_of(&v5).1, answer);

    let stats = Stats {
        visible: 1,
        groups_in_flight: 18,
        retries: 19,
        ..Stats::default()
    };
    let mut buf = BytesMut::new();
    Response::Stats(Box::new(stats.clone())).encode_in(2, Opcode::QueueStats as u8, 5, &mut buf);
    assert_eq!(buf.len(), 16 + 18 * 8);
    let want = Stats {
        retries: 0,
        ..stats
    };
    assert_eq!(answer_of(&buf).1, Response::Stats(Box::new(want)));
}

/// Version 1 (docs/protocol.md, "Versions"): answers in it are laid out as
/// they were (settings of ten fields, thirteen counters, messages without
/// group keys or priority levels), with version 1 in their headers, and
/// read back as such; a version-1 patch is its ten fields and nothing else.
#[test]
fn version_1_answers_and_patches_keep_their_layout() {
    let settings = Settings {
        visibility_timeout_ms: 45_000,
        max_deliveries: 3,
        retention_ms: 60_000,
        max_message_bytes: 1024,
        receive_wait_default_ms: 0,
        dead_letter_on_expiration: true,
        dead_letter_target: Some("dlq".into()),
        max_messages: 10,
        max_bytes: 4096,
        channel_capacity_pct: 50,
        delay_ms: 5,
        redrive_allow: Some("{}".into()),
        tags: vec![("k".into(), "v".into())],
        dedup_window_ms: 1000,
        content_dedup: true,
        ordered: true,
        priority_levels: 3,
        priority_fairness: 7,
        retry_initial_ms: 100,
        retry_multiplier_pct: 150,
        retry_max_ms: 1_000,
        retry_jitter_pct: 10,
        paused: Halves::BOTH,
        attempt_history: 12,
    };
    let mut buf = BytesMut::new();
    Response::Queue(Box::new(settings.clone())).encode_in(1, Opcode::GetQueue as u8, 4, &mut buf);
    // Head, then 8+4+8+4+8+1+(1+2+3)+8+8+1 bytes.
    assert_eq!(buf.len(), 16 + 56);
    let (header, got) = answer_of(&buf);
    assert_eq!(header.version, 1);
    let v1 = Settings {
        delay_ms: 0,
        redrive_allow: None,
        tags: Vec::new(),
        dedup_window_ms: 0,
        content_dedup: false,
        ordered: false,
        priority_levels: 1,
        priority_fairness: 0,
        retry_initial_ms: 0,
        retry_multiplier_pct: 200,
        retry_max_ms: 900_000,
        retry_jitter_pct: 0,
        paused: Halves::default(),
        attempt_history: 0,
        ..settings.clone()
    };
    assert_eq!(got, Response::Queue(Box::new(v1)));
    let mut buf = BytesMut::new();
    Response::Queue(Box::new(settings.clone())).encode(Opcode::GetQueue as u8, 4, &mut buf);
    let (header, got) = answer_of(&buf);
    assert_eq!(header.version, VERSION);
    assert_eq!(got, Response::Queue(Box::new(settings)));

    let stats = Stats {
        visible: 1,
        redriven: 13,
        created_at_ms: 14,
        groups_in_flight: 18,
        ..Stats::default()
    };
    let mut buf = BytesMut::new();
    Response::Stats(Box::new(stats.clone())).encode_in(1, Opcode::QueueStats as u8, 5, &mut buf);
    assert_eq!(buf.len(), 16 + 13 * 8);
    let want = Stats {
        created_at_ms: 0,
        groups_in_flight: 0,
        ..stats
    };
    assert_eq!(answer_of(&buf).1, Response::Stats(Box::new(want)));

    let grouped = Message {
        id: 7,
        seq: 2,
        payload: Bytes::from_static(b"p"),
        attributes: vec![("a".into(), "b".into())],
        channel: Some("c".into()),
        inserted_at_ms: 1,
        expires_at_ms: 2,
        next_visible_at_ms: 3,
        delivery_count: 1,
        state: 2,
        receipt: Some([9; 32]),
        dead_letter: None,
        group: Some("g".into()),
        priority: 3,
        attempts: Vec::new(),
    };
    let mut buf = BytesMut::new();
    Response::Messages(vec![grouped.clone()]).encode_in(1, Opcode::Peek as u8, 6, &mut buf);
    let plain = Message {
        group: None,
        priority: 1,
        ..grouped.clone()
    };
    assert_eq!(answer_of(&buf).1, Response::Messages(vec![plain.clone()]));
    // The server's encoder from views writes the same bytes.
    let mut views = BytesMut::new();
    encode_messages_in(
        1,
        Opcode::Peek as u8,
        6,
        Fields::ALL,
        [MessageRef::of(&grouped)].into_iter(),
        &mut views,
    );
    assert_eq!(views, buf);

    // A version-1 create: ten optional fields, nothing after them.
    let mut frame = BytesMut::new();
    Request::CreateQueue {
        name: "q".into(),
        settings: SettingsPatch {
            visibility_timeout_ms: Some(60_000),
            ..SettingsPatch::default()
        },
    }
    .encode(3, &mut frame);
    let Ok(Decoded::Frame {
        mut header, body, ..
    }) = decode_frame(&frame, 1 << 20)
    else {
        panic!()
    };
    // The newest layout has twelve options and two lists after the name.
    let ten = 3 + 9 + 9;
    header.version = 1;
    let v1_body = Bytes::copy_from_slice(&body[..ten]);
    assert_eq!(
        Request::decode(&header, v1_body).unwrap(),
        Request::CreateQueue {
            name: "q".into(),
            settings: SettingsPatch {
                visibility_timeout_ms: Some(60_000),
                ..SettingsPatch::default()
            },
        }
    );
    // The layout written between 5db3f1f and the versions, in frames that
    // still said 1, reads as version 2's; a stray byte after the tenth
    // field is malformed.
    let interim = Request::CreateQueue {
        name: "q".into(),
        settings: SettingsPatch {
            visibility_timeout_ms: Some(60_000),
            ..SettingsPatch::default()
        },
    };
    assert_eq!(
        Request::decode(&header, Bytes::copy_from_slice(body)).unwrap(),
        interim
    );
    let mut stray = body[..ten].to_vec();
    stray.push(9);
    assert!(matches!(
        Request::decode(&header, Bytes::from(stray)),
        Err(ProtoError::Malformed(_))
    ));
}

/// A peek may ask for each message's failed attempts (a fields byte at its
/// end, absent in an older client's peek: every field but them); the
/// answer carries them with the fields flag. A release may end with the
/// consumer's reason and description.
#[test]
fn attempts_travel_when_asked_for_and_a_release_carries_its_reason() {
    let peek = |fields| Request::Peek {
        queue: QueueRef {
            name: "q".into(),
            dlq: true,
        },
        from_seq: 3,
        max_messages: 10,
        fields,
    };
    let mut old = BytesMut::new();
    peek(Fields::ALL).encode(1, &mut old);
    let mut new = BytesMut::new();
    peek(Fields::KNOWN).encode(1, &mut new);
    assert_eq!(new.len(), old.len() + 1, "one byte more, at the end");
    for (frame, fields) in [(&old, Fields::ALL), (&new, Fields::KNOWN)] {
        let Ok(Decoded::Frame { header, body, .. }) = decode_frame(frame, 1 << 20) else {
            panic!("one frame")
        };
        assert_eq!(
            Request::decode(&header, Bytes::copy_from_slice(body)).unwrap(),
            peek(fields)
        );
    }
    let attempts = vec![
        Attempt {
            at_ms: 5,
            delivery: 1,
            end: 1,
            ..Attempt::default()
        },
        Attempt {
            at_ms: 9,
            delivery: 2,
            end: 2,
            reason: "bad input".into(),
            description: "field x".into(),
        },
    ];
    let m = Message {
        id: 1,
        seq: 2,
        payload: Bytes::from_static(b"p"),
        attributes: Vec::new(),
        channel: None,
        inserted_at_ms: 1,
        expires_at_ms: 2,
        next_visible_at_ms: 3,
        delivery_count: 2,
        state: 5,
        receipt: None,
        dead_letter: None,
        group: None,
        priority: 1,
        attempts,
    };
    let mut buf = BytesMut::new();
    let answer = Response::Selected(Fields::KNOWN, vec![m.clone()]);
    answer.encode(Opcode::Peek as u8, 4, &mut buf);
    assert_eq!(answer_of(&buf).1, answer);
    // Without the bit, no attempts travel.
    let mut buf = BytesMut::new();
    Response::Messages(vec![m.clone()]).encode(Opcode::Peek as u8, 4, &mut buf);
    let without = Message {
        attempts: Vec::new(),
        ..m
    };
    assert_eq!(answer_of(&buf).1, Response::Messages(vec![without]));
    // A receive does not ask for them.
    let mut frame = BytesMut::new();
    Request::Receive(Receive {
        queue: QueueRef {
            name: "q".into(),
            dlq: false,
        },
        max_messages: 1,
        visibility_ms: None,
        wait_ms: None,
        channel: None,
        fields: Fields::KNOWN,
    })
    .encode(1, &mut frame);
    let Ok(Decoded::Frame { header, body, .. }) = decode_frame(&frame, 1 << 20) else {
        panic!("one frame")
    };
    assert!(Request::decode(&header, Bytes::copy_from_slice(body)).is_err());
}

/// Version 6: a move task's filter ends `move` (a version-5 answer is the
/// same bytes without it, read back with an empty filter); a redrive or a
/// start move without a filter is the bytes it always was, and one with a
/// filter those bytes and the filter.
#[test]
fn a_move_filter_is_an_answers_tail_in_version_6_and_a_requests_tail() {
    let filter = MoveFilter {
        attributes: vec![("tenant".into(), "a".into())],
        reason: Some("timeout".into()),
        text: None,
        since_ms: Some(5),
        until_ms: None,
    };
    let task = MoveInfo {
        id: 3,
        from_dlq: true,
        to: None,
        rate_per_second: 10,
        started_at_ms: 7,
        moved: 1,
        to_move: 2,
        max_messages: None,
        status: 0,
        failure: None,
        filter: filter.clone(),
    };
    let answer = Response::Moves(vec![task.clone()]);
    let (mut v5, mut v6) = (BytesMut::new(), BytesMut::new());
    answer.encode_in(5, Opcode::ListMoves as u8, 4, &mut v5);
    answer.encode_in(6, Opcode::ListMoves as u8, 4, &mut v6);
    assert_eq!(&v6[16..v5.len()], &v5[16..], "version 5's bytes come first");
    assert!(v6.len() > v5.len());
    let (header, old) = answer_of(&v5);
    assert_eq!(header.version, 5);
    let unfiltered = MoveInfo {
        filter: MoveFilter::default(),
        ..task
    };
    assert_eq!(old, Response::Moves(vec![unfiltered]));
    assert_eq!(answer_of(&v6).1, answer);
    let redrive = |filter: MoveFilter| Request::Redrive {
        queue: "q".into(),
        max_messages: Some(2),
        rate_per_second: None,
        filter,
    };
    let (mut plain, mut filtered) = (BytesMut::new(), BytesMut::new());
    redrive(MoveFilter::default()).encode(1, &mut plain);
    redrive(filter.clone()).encode(1, &mut filtered);
    // The same body (past the 4-byte length) up to the filter.
    assert_eq!(&filtered[4..plain.len()], &plain[4..]);
    for (frame, f) in [(&plain, MoveFilter::default()), (&filtered, filter)] {
        let Ok(Decoded::Frame { header, body, .. }) = decode_frame(frame, 1 << 20) else {
            panic!("one frame")
        };
        assert_eq!(
            Request::decode(&header, Bytes::copy_from_slice(body)).unwrap(),
            redrive(f)
        );
    }
}
