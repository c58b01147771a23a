//! `codec/...`: decoding and encoding put frames of 20 messages with
//! 100-byte payloads, a client's put built from its payloads (owned
//! request or borrowed view), and a client decoding receive answers of 20
//! messages with every field or with payload and receipt only.

use std::hint::black_box;

use bytes::{Bytes, BytesMut};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use fila_proto::{
    split_frame, Encode, Fields, Message, Opcode, PayloadsRef, PutEntry, Request, Response,
    FRAME_LEN_DEFAULT,
};

fn put_frame() -> Request {
    Request::Put {
        queue: "orders".into(),
        messages: (0..20)
            .map(|_| PutEntry {
                payload: Bytes::from(vec![0x42u8; 100]),
                ..PutEntry::default()
            })
            .collect(),
    }
}

fn codec(c: &mut Criterion) {
    let req = put_frame();
    // 64 frames back to back, as a pipelining client sends them.
    let mut stream = BytesMut::new();
    for id in 0..64 {
        req.encode(id, &mut stream);
    }
    let stream = stream.freeze();
    let mut g = c.benchmark_group("codec");
    g.throughput(Throughput::Bytes(stream.len() as u64));
    g.bench_function("decode/put20x100B/64frames", |b| {
        b.iter(|| {
            let mut buf = BytesMut::from(&stream[..]);
            let mut n = 0;
            while let Some((header, body)) = split_frame(&mut buf, FRAME_LEN_DEFAULT).unwrap() {
                black_box(Request::decode(&header, body).unwrap());
                n += 1;
            }
            assert_eq!(n, 64);
        })
    });
    g.bench_function("encode/put20x100B/64frames", |b| {
        let mut buf = BytesMut::with_capacity(stream.len());
        b.iter(|| {
            buf.clear();
            for id in 0..64 {
                req.encode(id, &mut buf);
            }
            black_box(buf.len());
        })
    });
    g.finish();

    // What a client's hot path pays to send 20 payloads it holds.
    let payloads: Vec<Bytes> = (0..20).map(|_| Bytes::from(vec![0x42u8; 100])).collect();
    let mut g = c.benchmark_group("codec");
    g.throughput(Throughput::Elements(20 * 64));
    g.bench_function("client-put/owned/20x100B-64frames", |b| {
        let mut buf = BytesMut::with_capacity(stream.len());
        b.iter(|| {
            buf.clear();
            for id in 0..64 {
                Request::Put {
                    queue: "orders".into(),
                    messages: payloads
                        .iter()
                        .map(|p| PutEntry {
                            payload: p.clone(),
                            ..PutEntry::default()
                        })
                        .collect(),
                }
                .encode(id, &mut buf);
            }
            black_box(buf.len());
        })
    });
    g.bench_function("client-put/borrowed/20x100B-64frames", |b| {
        let mut buf = BytesMut::with_capacity(stream.len());
        b.iter(|| {
            buf.clear();
            for id in 0..64 {
                PayloadsRef {
                    queue: "orders",
                    payloads: &payloads,
                }
                .encode(id, &mut buf);
            }
            black_box(buf.len());
        })
    });
    // A client decoding receive answers (20 messages of 100 B, 64 frames).
    let message = Message {
        id: 7,
        seq: 9,
        payload: Bytes::from(vec![0x42u8; 100]),
        attributes: Vec::new(),
        channel: None,
        inserted_at_ms: 1,
        expires_at_ms: 2,
        next_visible_at_ms: 3,
        delivery_count: 1,
        state: 2,
        receipt: Some([5; 32]),
        dead_letter: None,
        group: None,
        priority: 1,
        attempts: Vec::new(),
    };
    for (name, answer) in [
        ("all-fields", Response::Messages(vec![message.clone(); 20])),
        (
            "payload-receipt",
            Response::Selected(Fields::PAYLOAD_AND_RECEIPT, vec![message.clone(); 20]),
        ),
    ] {
        let mut frames = BytesMut::new();
        for id in 0..64 {
            answer.encode(Opcode::Receive as u8, id, &mut frames);
        }
        let frames = frames.freeze();
        g.throughput(Throughput::Elements(20 * 64));
        g.bench_function(format!("client-receive/{name}/20x100B-64frames"), |b| {
            b.iter(|| {
                let mut buf = BytesMut::from(&frames[..]);
                while let Some((header, body)) = split_frame(&mut buf, FRAME_LEN_DEFAULT).unwrap() {
                    black_box(Response::decode(&header, body).unwrap());
                }
            })
        });
    }
    g.finish();
}

criterion_group!(benches, codec);
criterion_main!(benches);
