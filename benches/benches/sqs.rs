//! `sqs/...`: the SQS dialect's own cost per message, with no sockets and
//! no engine: a request's head and body read (`read_message`, the server's
//! way for a message operation), its operation's steps run against
//! answers made here, its answer's body written. What the SQS
//! front end spends beside the engine and the network, whichever thread
//! or loop runs it.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use fila_core::{Message, MessageId, Payload, Receipt, State};
use fila_proto::{self as proto, Response};
use fila_sqs::messages::{self, Answer, Step};
use fila_sqs::{Head, Headers, Protocol};

const URL: &str = "http://127.0.0.1:9324/000000000000/jobs";

/// Reads a JSON-protocol request of `op` with `body`, runs its steps with
/// `answer` for its one call, writes its answer's body.
fn round(op: &str, body: &[u8], answer: impl Fn() -> Answer) -> Vec<u8> {
    let target = format!("AmazonSQS.{op}");
    let head = Head {
        method: "POST",
        path: "/",
        query: "",
        headers: Headers::new(vec![
            ("host", b"127.0.0.1:9324"),
            ("content-type", b"application/x-amz-json-1.0"),
            ("x-amz-target", target.as_bytes()),
            ("x-amz-date", b"20261204T120000Z"),
        ]),
    };
    let protocol = Protocol::of(&head.headers);
    // As the server reads a message operation: its input borrowing from
    // the body.
    let (operation, input) = fila_sqs::read_message(&head, protocol, body)
        .expect("a message operation")
        .expect("a good request");
    let (mut machine, step) = messages::start(&operation, &input).expect("starts");
    let Step::Call { .. } = step else {
        panic!("one call")
    };
    let Step::Done(output) = machine.resume(answer()).expect("answered") else {
        panic!("done after one call")
    };
    fila_sqs::output_body(protocol, &operation, &output, "id")
}

fn send_batch_body() -> Vec<u8> {
    let entries: Vec<serde_json::Value> = (0..10)
        .map(|i| {
            serde_json::json!({
                "Id": format!("m{i}"),
                "MessageBody": "x".repeat(100),
                "MessageAttributes": {"kind": {"DataType": "String", "StringValue": "job"}},
            })
        })
        .collect();
    serde_json::to_vec(&serde_json::json!({"QueueUrl": URL, "Entries": entries})).unwrap()
}

fn handles() -> Vec<String> {
    (0..10u8)
        .map(|i| fila_sqs::attrs::receipt_handle(&[i; proto::RECEIPT_LEN]))
        .collect()
}

fn received(n: usize) -> Vec<Message> {
    let receipt = Receipt::from_bytes(&[1; proto::RECEIPT_LEN]).ok();
    (0..n)
        .map(|i| Message {
            id: MessageId(i as u128 + 1),
            seq: i as u64,
            payload: Payload::copy_from_slice(&[b'x'; 100]),
            attributes: None,
            channel: None,
            inserted_at_ms: 1_796_000_000_000,
            expires_at_ms: 1_796_400_000_000,
            next_visible_at_ms: 1_796_000_030_000,
            delivery_count: 1,
            first_received_at_ms: Some(1_796_000_000_000),
            state: State::InFlight,
            receipt,
            dead_letter: None,
            group: None,
            priority: 1,
            attempts: None,
        })
        .collect()
}

fn sqs(c: &mut Criterion) {
    let mut g = c.benchmark_group("sqs");
    g.throughput(Throughput::Elements(10));
    let body = send_batch_body();
    g.bench_function("send_batch10", |b| {
        b.iter(|| {
            black_box(round("SendMessageBatch", black_box(&body), || {
                Answer::Wire(Response::Put(
                    (0..10)
                        .map(|i| {
                            Ok(proto::PutAck {
                                id: i + 1,
                                seq: i as u64,
                            })
                        })
                        .collect(),
                ))
            }))
        })
    });
    let body = serde_json::to_vec(&serde_json::json!({
        "QueueUrl": URL, "MaxNumberOfMessages": 10, "WaitTimeSeconds": 1,
        "MessageAttributeNames": ["All"], "MessageSystemAttributeNames": ["ApproximateReceiveCount"],
    }))
    .unwrap();
    let messages = received(10);
    g.bench_function("receive10", |b| {
        b.iter(|| {
            black_box(round("ReceiveMessage", black_box(&body), || {
                Answer::Messages(messages.clone())
            }))
        })
    });
    let entries: Vec<serde_json::Value> = handles()
        .into_iter()
        .enumerate()
        .map(|(i, h)| serde_json::json!({"Id": format!("d{i}"), "ReceiptHandle": h}))
        .collect();
    let body =
        serde_json::to_vec(&serde_json::json!({"QueueUrl": URL, "Entries": entries})).unwrap();
    g.bench_function("delete_batch10", |b| {
        b.iter(|| {
            black_box(round("DeleteMessageBatch", black_box(&body), || {
                Answer::Wire(Response::Deleted((0..10).map(|_| Ok(())).collect()))
            }))
        })
    });
    g.finish();
}

criterion_group!(benches, sqs);
criterion_main!(benches);
