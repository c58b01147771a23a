use fila_proto::{Availability, ErrorCode, WireError};
use serde_json::json;

use super::*;

const URL: &str = "http://127.0.0.1:9324/000000000000/jobs";

fn handle(n: u8) -> String {
    attrs::receipt_handle(&[n; proto::RECEIPT_LEN])
}

fn stale() -> WireError {
    WireError {
        code: ErrorCode::RECEIPT_STALE,
        message: "stale".into(),
    }
}

/// [`super::start`] on `input` as a `Value` (as the query protocol and
/// [`crate::run`] give it) and as a `Doc` read from its JSON (as the
/// server reads a JSON body): both must come to the same first step or
/// error. Answers the `Value`'s.
fn start(op: &str, input: &Value) -> Result<(MessageOp, Step), SqsError> {
    let body = serde_json::to_vec(input).unwrap();
    let doc = crate::Doc::parse(&body).unwrap();
    let by_value = super::start(op, input);
    let by_doc = super::start(op, &doc);
    assert_eq!(
        format!("{:?}", by_value.as_ref().map(|(_, s)| s)),
        format!("{:?}", by_doc.as_ref().map(|(_, s)| s)),
        "{op} {input}"
    );
    by_value
}

/// The request of a step that must be a call.
fn call(step: Step) -> (Request, usize) {
    match step {
        Step::Call { request, room } => (request, room),
        Step::Done(v) => panic!("a call, not {v:?}"),
    }
}

/// The output of a step that must be the last, as JSON.
fn done(step: Step) -> Value {
    match step {
        Step::Done(v) => {
            // The JSON written straight says the same as the `Value`.
            let mut json = Vec::new();
            v.write_json(&mut json);
            let value = v.to_value();
            assert_eq!(serde_json::from_slice::<Value>(&json).unwrap(), value);
            value
        }
        Step::Call { request, .. } => panic!("done, not {request:?}"),
    }
}

#[test]
fn a_send_puts_then_answers_its_id_and_digests() {
    let input = json!({"QueueUrl": URL, "MessageBody": "hello", "DelaySeconds": 3});
    let (mut op, step) = start("SendMessage", &input).unwrap();
    let (Request::Put { queue, messages }, 0) = call(step) else {
        panic!("a put")
    };
    assert_eq!(queue, "jobs");
    assert_eq!(&messages[0].payload[..], b"hello");
    assert_eq!(messages[0].availability, Availability::DelayMs(3000));
    let ack = proto::PutAck { id: 7, seq: 1 };
    let out = done(
        op.resume(Answer::Wire(Response::Put(vec![Ok(ack)])))
            .unwrap(),
    );
    assert_eq!(out["MD5OfMessageBody"], attrs::md5_hex(b"hello"));
    assert_eq!(out["MessageId"], attrs::message_id(7));
    assert!(out.get("SequenceNumber").is_none());
    // Answered: nothing more to take.
    assert!(op.resume(Answer::Wire(Response::Put(vec![]))).is_err());
}

#[test]
fn a_fifo_send_without_a_dedup_id_asks_the_queue_first() {
    let url = "http://h/000000000000/jobs.fifo";
    let input = json!({"QueueUrl": url, "MessageBody": "b", "MessageGroupId": "g"});
    for by_content in [true, false] {
        let (mut op, step) = start("SendMessage", &input).unwrap();
        let (Request::GetQueue { name }, _) = call(step) else {
            panic!("the queue's settings first")
        };
        assert_eq!(name, "jobs.fifo");
        let settings = proto::Settings {
            content_dedup: by_content,
            ..Default::default()
        };
        let next = op.resume(Answer::Wire(Response::Queue(Box::new(settings))));
        if !by_content {
            assert_eq!(next.unwrap_err().kind, Kind::InvalidParameterValue);
            continue;
        }
        let (Request::Put { messages, .. }, _) = call(next.unwrap()) else {
            panic!("a put")
        };
        assert_eq!(
            messages[0].dedup_id.as_deref(),
            Some(fifo::content_id("b").as_str())
        );
        assert_eq!(messages[0].group.as_deref(), Some("g"));
        let ack = proto::PutAck { id: 1, seq: 42 };
        let out = done(
            op.resume(Answer::Wire(Response::Put(vec![Ok(ack)])))
                .unwrap(),
        );
        assert_eq!(out["SequenceNumber"], "42");
    }
}

#[test]
fn a_batch_send_fails_bad_entries_alone_and_puts_the_rest() {
    let input = json!({"QueueUrl": URL, "Entries": [
        {"Id": "a", "MessageBody": "one"},
        {"Id": "b", "MessageBody": ""},
        {"Id": "c", "MessageBody": "three"},
    ]});
    let (mut op, step) = start("SendMessageBatch", &input).unwrap();
    let (Request::Put { messages, .. }, _) = call(step) else {
        panic!("a put")
    };
    assert_eq!(messages.len(), 2);
    let full = WireError {
        code: ErrorCode::QUEUE_FULL,
        message: "full".into(),
    };
    let acks = vec![Ok(proto::PutAck { id: 1, seq: 1 }), Err(full)];
    let out = done(op.resume(Answer::Wire(Response::Put(acks))).unwrap());
    let ids = |k: &str| -> Vec<String> {
        out[k]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["Id"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(ids("Successful"), ["a"]);
    assert_eq!(ids("Failed"), ["b", "c"]);
    // A batch whose every entry is bad asks nothing.
    let input = json!({"QueueUrl": URL, "Entries": [{"Id": "a", "MessageBody": ""}]});
    let (_, step) = start("SendMessageBatch", &input).unwrap();
    assert_eq!(done(step)["Failed"].as_array().unwrap().len(), 1);
    // Repeated ids refuse the whole batch.
    let input = json!({"QueueUrl": URL, "Entries": [
        {"Id": "a", "MessageBody": "x"}, {"Id": "a", "MessageBody": "y"}]});
    assert_eq!(
        start("SendMessageBatch", &input).err().unwrap().kind,
        Kind::BatchEntryIdsNotDistinct
    );
}

#[test]
fn a_receive_asks_for_its_room_and_maps_what_came() {
    let input = json!({"QueueUrl": URL, "MaxNumberOfMessages": 5, "WaitTimeSeconds": 2});
    let (mut op, step) = start("ReceiveMessage", &input).unwrap();
    let (Request::Receive(r), room) = call(step) else {
        panic!("a receive")
    };
    assert_eq!(
        (r.max_messages, r.wait_ms, room),
        (5, Some(2000), RECEIVE_ROOM)
    );
    assert_eq!(
        done(op.resume(Answer::Messages(vec![])).unwrap()),
        json!({})
    );
    let (mut op, _) = start("ReceiveMessage", &input).unwrap();
    let e = fila_core::Error::QueueNotFound("jobs".into());
    assert_eq!(
        op.resume(Answer::Engine(e)).unwrap_err().kind,
        Kind::QueueDoesNotExist
    );
    assert_eq!(
        start(
            "ReceiveMessage",
            &json!({"QueueUrl": URL, "MaxNumberOfMessages": 11})
        )
        .err()
        .unwrap()
        .kind,
        Kind::InvalidParameterValue
    );
}

#[test]
fn receipts_judge_a_stale_lease_as_sqs_does() {
    // A delete of an ended lease is done; a visibility change of one
    // is MessageNotInflight.
    let input = json!({"QueueUrl": URL, "ReceiptHandle": handle(1)});
    let (mut op, step) = start("DeleteMessage", &input).unwrap();
    let (Request::Delete { receipts, .. }, _) = call(step) else {
        panic!("a delete")
    };
    assert_eq!(receipts, [[1; proto::RECEIPT_LEN]]);
    assert_eq!(
        done(
            op.resume(Answer::Wire(Response::Deleted(vec![Err(stale())])))
                .unwrap()
        ),
        json!({})
    );
    let input = json!({"QueueUrl": URL, "ReceiptHandle": handle(1), "VisibilityTimeout": 5});
    let (mut op, step) = start("ChangeMessageVisibility", &input).unwrap();
    let (Request::UpdateVisibility { entries, .. }, _) = call(step) else {
        panic!("a change")
    };
    assert_eq!(entries[0].1, 5000);
    let e = op
        .resume(Answer::Wire(Response::Visibility(vec![Err(stale())])))
        .unwrap_err();
    assert_eq!(e.kind, Kind::MessageNotInflight);
    // In a batch, each entry on its own.
    let input = json!({"QueueUrl": URL, "Entries": [
        {"Id": "a", "ReceiptHandle": handle(1), "VisibilityTimeout": 1},
        {"Id": "b", "ReceiptHandle": "not a handle", "VisibilityTimeout": 1},
        {"Id": "c", "ReceiptHandle": handle(3), "VisibilityTimeout": 1},
    ]});
    let (mut op, step) = start("ChangeMessageVisibilityBatch", &input).unwrap();
    let (Request::UpdateVisibility { entries, .. }, _) = call(step) else {
        panic!("a change")
    };
    assert_eq!(entries.len(), 2);
    let out = done(
        op.resume(Answer::Wire(Response::Visibility(vec![
            Ok(1),
            Err(stale()),
        ])))
        .unwrap(),
    );
    assert_eq!(out["Successful"], json!([{"Id": "a"}]));
    let failed: Vec<&str> = out["Failed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["Code"].as_str().unwrap())
        .collect();
    assert_eq!(
        failed,
        [
            "ReceiptHandleIsInvalid",
            "AWS.SimpleQueueService.MessageNotInflight"
        ]
    );
}

#[test]
fn a_wire_error_or_an_answer_of_another_kind_is_the_operation_s_error() {
    let input = json!({"QueueUrl": URL, "ReceiptHandle": handle(1)});
    let (mut op, _) = start("DeleteMessage", &input).unwrap();
    let gone = WireError {
        code: ErrorCode::QUEUE_NOT_FOUND,
        message: "no queue".into(),
    };
    assert_eq!(
        op.resume(Answer::Wire(Response::Error(gone)))
            .unwrap_err()
            .kind,
        Kind::QueueDoesNotExist
    );
    let (mut op, _) = start("DeleteMessage", &input).unwrap();
    assert!(op.resume(Answer::Messages(vec![])).is_err());
    let (mut op, _) = start("DeleteMessage", &input).unwrap();
    assert!(op.resume(Answer::Wire(Response::Deleted(vec![]))).is_err());
    assert_eq!(
        start("PurgeQueue", &json!({"QueueUrl": URL}))
            .err()
            .unwrap()
            .kind,
        Kind::InvalidAction
    );
}
