//! `codec/...`: decoding and encoding put frames of 20 messages with
//! 100-byte payloads. Throughput is bytes of frames.

use std::hint::black_box;

use bytes::{Bytes, BytesMut};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use fila_proto::{split_frame, PutEntry, Request, FRAME_LEN_DEFAULT};

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
}

criterion_group!(benches, codec);
criterion_main!(benches);
