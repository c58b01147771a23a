// fila's SQS API through the AWS SDK for JavaScript v3: the JSON
// protocol's requests, answers and error shape as this SDK reads them.
// Starts its own fila-server (FILA_BIN_DIR, else target/debug) and stops it.

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import {
  SQSClient,
  CreateQueueCommand,
  GetQueueUrlCommand,
  SendMessageCommand,
  SendMessageBatchCommand,
  ReceiveMessageCommand,
  DeleteMessageCommand,
  GetQueueAttributesCommand,
  PurgeQueueCommand,
  AddPermissionCommand,
  QueueDoesNotExist,
} from "@aws-sdk/client-sqs";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const binDir = process.env.FILA_BIN_DIR ?? path.join(root, "target", "debug");
let server;
let dataDir;
let sqs;

before(async () => {
  dataDir = mkdtempSync(path.join(tmpdir(), "fila-sqs-js-"));
  server = spawn(
    path.join(binDir, "fila-server"),
    ["--listen", "127.0.0.1:0", "--sqs-listen", "127.0.0.1:0", "--azure-listen", "off", "--metrics-listen", "off", "--console-listen", "off", "--data-dir", dataDir],
    { stdio: ["ignore", "pipe", "pipe"] },
  );
  const endpoint = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("fila-server did not start in 30 s")), 30_000);
    let seen = "";
    const look = (chunk) => {
      seen += chunk;
      const m = seen.match(/fila-server listening listen=\S+ sqs=(\S+)/);
      if (m) {
        clearTimeout(timer);
        resolve(`http://${m[1]}`);
      }
    };
    server.stdout.on("data", look);
    server.stderr.on("data", look);
    server.on("exit", (code) => reject(new Error(`fila-server exited ${code}: ${seen}`)));
  });
  sqs = new SQSClient({
    endpoint,
    region: "us-east-1",
    credentials: { accessKeyId: "any", secretAccessKey: "any" },
    maxAttempts: 1,
  });
});

after(() => {
  sqs?.destroy();
  if (server && server.exitCode === null) server.kill("SIGTERM");
  rmSync(dataDir, { recursive: true, force: true });
});

const md5 = (s) => createHash("md5").update(s, "utf8").digest("hex");

test("a queue is created, its URL found, and a message goes round", async () => {
  const { QueueUrl } = await sqs.send(new CreateQueueCommand({ QueueName: "js-round" }));
  assert.match(QueueUrl, /\/000000000000\/js-round$/);
  const found = await sqs.send(new GetQueueUrlCommand({ QueueName: "js-round" }));
  assert.equal(found.QueueUrl, QueueUrl);
  const sent = await sqs.send(
    new SendMessageCommand({
      QueueUrl,
      MessageBody: "hello from node",
      MessageAttributes: { kind: { DataType: "String", StringValue: "greeting" }, n: { DataType: "Number", StringValue: "3" } },
    }),
  );
  assert.equal(sent.MD5OfMessageBody, md5("hello from node"));
  const got = await sqs.send(
    new ReceiveMessageCommand({ QueueUrl, MessageAttributeNames: ["All"], MessageSystemAttributeNames: ["ApproximateReceiveCount"] }),
  );
  assert.equal(got.Messages.length, 1);
  const m = got.Messages[0];
  assert.equal(m.MessageId, sent.MessageId);
  assert.equal(m.Body, "hello from node");
  assert.equal(m.MD5OfMessageAttributes, sent.MD5OfMessageAttributes);
  assert.deepEqual(m.MessageAttributes.n, { DataType: "Number", StringValue: "3" });
  assert.equal(m.Attributes.ApproximateReceiveCount, "1");
  await sqs.send(new DeleteMessageCommand({ QueueUrl, ReceiptHandle: m.ReceiptHandle }));
  const attrs = await sqs.send(new GetQueueAttributesCommand({ QueueUrl, AttributeNames: ["All"] }));
  assert.equal(attrs.Attributes.ApproximateNumberOfMessages, "0");
  assert.equal(attrs.Attributes.ApproximateNumberOfMessagesNotVisible, "0");
});

test("a missing queue is the modeled QueueDoesNotExist with its query code", async () => {
  await assert.rejects(sqs.send(new GetQueueUrlCommand({ QueueName: "js-missing" })), (e) => {
    assert.ok(e instanceof QueueDoesNotExist, `${e.name}: ${e.message}`);
    assert.equal(e.name, "QueueDoesNotExist");
    assert.equal(e.$metadata.httpStatusCode, 400);
    assert.equal(e.$fault, "client");
    assert.equal(e.Code, "AWS.SimpleQueueService.NonExistentQueue");
    return true;
  });
});

test("batch entries answer one by one", async () => {
  const { QueueUrl } = await sqs.send(new CreateQueueCommand({ QueueName: "js-batch" }));
  const r = await sqs.send(
    new SendMessageBatchCommand({
      QueueUrl,
      Entries: [
        { Id: "ok", MessageBody: "fine" },
        { Id: "bad", MessageBody: "\u0001" },
      ],
    }),
  );
  assert.deepEqual(r.Successful.map((s) => s.Id), ["ok"]);
  assert.equal(r.Failed.length, 1);
  assert.equal(r.Failed[0].Id, "bad");
  assert.equal(r.Failed[0].Code, "InvalidMessageContents");
  assert.equal(r.Failed[0].SenderFault, true);
});

test("a second purge within 60 s and an unsupported operation are errors of their names", async () => {
  const { QueueUrl } = await sqs.send(new CreateQueueCommand({ QueueName: "js-errors" }));
  await sqs.send(new PurgeQueueCommand({ QueueUrl }));
  await assert.rejects(sqs.send(new PurgeQueueCommand({ QueueUrl })), (e) => {
    assert.equal(e.name, "PurgeQueueInProgress");
    assert.equal(e.$metadata.httpStatusCode, 403);
    return true;
  });
  await assert.rejects(
    sqs.send(new AddPermissionCommand({ QueueUrl, Label: "l", AWSAccountIds: ["111122223333"], Actions: ["SendMessage"] })),
    (e) => {
      assert.equal(e.name, "UnsupportedOperation");
      assert.equal(e.Code, "AWS.SimpleQueueService.UnsupportedOperation");
      return true;
    },
  );
});

test("a FIFO queue: groups in order, a resend deduplicated, sequence numbers", async () => {
  const { QueueUrl } = await sqs.send(
    new CreateQueueCommand({ QueueName: "js-orders.fifo", Attributes: { FifoQueue: "true" } }),
  );
  const send = (body, group, id) =>
    sqs.send(new SendMessageCommand({ QueueUrl, MessageBody: body, MessageGroupId: group, MessageDeduplicationId: id }));
  const first = await send("created", "order-1", "c-1");
  const second = await send("paid", "order-1", "p-1");
  const again = await send("created (resent)", "order-1", "c-1");
  assert.equal(again.MessageId, first.MessageId);
  assert.equal(again.SequenceNumber, first.SequenceNumber);
  assert.ok(BigInt(second.SequenceNumber) > BigInt(first.SequenceNumber));
  const receive = () =>
    sqs.send(new ReceiveMessageCommand({ QueueUrl, MaxNumberOfMessages: 10, MessageSystemAttributeNames: ["All"] }));
  const r1 = await receive();
  assert.deepEqual(r1.Messages.map((m) => m.Body), ["created"], "one of the group at a time");
  assert.equal(r1.Messages[0].Attributes.MessageGroupId, "order-1");
  assert.equal(r1.Messages[0].Attributes.SequenceNumber, first.SequenceNumber);
  assert.equal((await receive()).Messages, undefined);
  await sqs.send(new DeleteMessageCommand({ QueueUrl, ReceiptHandle: r1.Messages[0].ReceiptHandle }));
  const r2 = await receive();
  assert.deepEqual(r2.Messages.map((m) => m.Body), ["paid"]);
  const attrs = await sqs.send(new GetQueueAttributesCommand({ QueueUrl, AttributeNames: ["All"] }));
  assert.equal(attrs.Attributes.FifoQueue, "true");
});
