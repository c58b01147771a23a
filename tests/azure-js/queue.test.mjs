// fila's Azure Queue Storage API through the Azure SDK for JavaScript
// (@azure/storage-queue): queues, metadata, messages (put, get, peek,
// update with a new pop receipt, delete, clear), dequeue counts, a wrong
// key and SAS tokens refused. Starts its own fila-server (FILA_BIN_DIR,
// else target/debug) and stops it.

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import {
  QueueServiceClient,
  QueueClient,
  StorageSharedKeyCredential,
  QueueSASPermissions,
  generateQueueSASQueryParameters,
} from "@azure/storage-queue";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const binDir = process.env.FILA_BIN_DIR ?? path.join(root, "target", "debug");
const ACCOUNT = "devstoreaccount1";
const KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";
let server;
let dataDir;
let endpoint;
let service;

before(async () => {
  dataDir = mkdtempSync(path.join(tmpdir(), "fila-azure-js-"));
  server = spawn(
    path.join(binDir, "fila-server"),
    ["--listen", "127.0.0.1:0", "--azure-listen", "127.0.0.1:0", "--sqs-listen", "off", "--metrics-listen", "off", "--console-listen", "off", "--data-dir", dataDir],
    { stdio: ["ignore", "pipe", "pipe"] },
  );
  const addr = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("fila-server did not start in 30 s")), 30_000);
    let seen = "";
    const look = (chunk) => {
      seen += chunk;
      const m = seen.match(/fila-server listening .*azure=(\S+)/);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    };
    server.stdout.on("data", look);
    server.stderr.on("data", look);
    server.on("exit", (code) => reject(new Error(`fila-server exited ${code}: ${seen}`)));
  });
  endpoint = `http://${addr}/${ACCOUNT}`;
  // The connection string a user gives the SDK.
  service = QueueServiceClient.fromConnectionString(
    `DefaultEndpointsProtocol=http;AccountName=${ACCOUNT};AccountKey=${KEY};QueueEndpoint=${endpoint};`,
    { retryOptions: { maxTries: 1 } },
  );
});

after(() => {
  if (server && server.exitCode === null) server.kill("SIGTERM");
  rmSync(dataDir, { recursive: true, force: true });
});

let n = 0;
const fresh = async () => {
  const name = `js-${process.pid}-${n++}`;
  const q = service.getQueueClient(name);
  await q.create({ metadata: { team: "js" } });
  return q;
};

test("queues are made, listed with metadata, and deleted", async () => {
  const q = await fresh();
  const listed = [];
  for await (const item of service.listQueues({ prefix: q.name, includeMetadata: true })) listed.push(item);
  assert.deepEqual(listed.map((i) => [i.name, i.metadata]), [[q.name, { team: "js" }]]);
  const props = await q.getProperties();
  assert.equal(props.approximateMessagesCount, 0);
  await q.setMetadata({ owner: "ops" });
  assert.deepEqual((await q.getProperties()).metadata, { owner: "ops" });
  // Again with other metadata: 409 QueueAlreadyExists.
  await assert.rejects(q.create({ metadata: { other: "x" } }), (e) => e.statusCode === 409 && e.code === "QueueAlreadyExists");
  await q.delete();
  await assert.rejects(q.getProperties(), (e) => e.statusCode === 404 && e.code === "QueueNotFound");
});

test("a message goes round: put, peek, get, update with a new pop receipt, delete", async () => {
  const q = await fresh();
  const sent = await q.sendMessage("hello from node <&>");
  assert.ok(sent.messageId && sent.popReceipt);
  const peeked = await q.peekMessages({ numberOfMessages: 5 });
  assert.deepEqual(peeked.peekedMessageItems.map((m) => [m.messageText, m.dequeueCount]), [["hello from node <&>", 0]]);
  const got = await q.receiveMessages({ numberOfMessages: 32, visibilityTimeout: 60 });
  assert.equal(got.receivedMessageItems.length, 1);
  const m = got.receivedMessageItems[0];
  assert.equal(m.messageId, sent.messageId);
  assert.equal(m.dequeueCount, 1);
  const u = await q.updateMessage(m.messageId, m.popReceipt, "changed", 30);
  assert.notEqual(u.popReceipt, m.popReceipt);
  await assert.rejects(q.deleteMessage(m.messageId, m.popReceipt), (e) => e.statusCode === 404);
  // Released: visible again at once.
  await q.updateMessage(m.messageId, u.popReceipt, "changed", 0);
  const again = (await q.receiveMessages()).receivedMessageItems[0];
  assert.equal(again.messageText, "changed");
  assert.equal(again.dequeueCount, 2);
  await q.deleteMessage(again.messageId, again.popReceipt);
  assert.equal((await q.peekMessages()).peekedMessageItems.length, 0);
  await q.delete();
});

test("get takes up to 32, and clear empties the queue", async () => {
  const q = await fresh();
  for (let i = 0; i < 35; i++) await q.sendMessage(`m${i}`);
  const got = await q.receiveMessages({ numberOfMessages: 32 });
  assert.equal(got.receivedMessageItems.length, 32);
  await assert.rejects(q.receiveMessages({ numberOfMessages: 33 }), (e) => e.statusCode === 400);
  await q.clearMessages();
  assert.equal((await q.getProperties()).approximateMessagesCount, 0);
  await q.delete();
});

test("a wrong key is refused, and a read-only SAS may peek and not put", async () => {
  const q = await fresh();
  await q.sendMessage("readable");
  const wrong = new QueueServiceClient(endpoint, new StorageSharedKeyCredential(ACCOUNT, Buffer.from("not the key at all").toString("base64")), { retryOptions: { maxTries: 1 } });
  await assert.rejects(wrong.getQueueClient(q.name).getProperties(), (e) => e.statusCode === 403);
  const sas = generateQueueSASQueryParameters(
    { queueName: q.name, permissions: QueueSASPermissions.parse("r"), expiresOn: new Date(Date.now() + 3600_000) },
    new StorageSharedKeyCredential(ACCOUNT, KEY),
  ).toString();
  const reader = new QueueClient(`${endpoint}/${q.name}?${sas}`, undefined, { retryOptions: { maxTries: 1 } });
  const peeked = await reader.peekMessages();
  assert.equal(peeked.peekedMessageItems[0].messageText, "readable");
  await assert.rejects(reader.sendMessage("no"), (e) => e.statusCode === 403 && e.code === "AuthorizationPermissionMismatch");
  const expired = generateQueueSASQueryParameters(
    { queueName: q.name, permissions: QueueSASPermissions.parse("r"), startsOn: new Date(Date.now() - 7200_000), expiresOn: new Date(Date.now() - 3600_000) },
    new StorageSharedKeyCredential(ACCOUNT, KEY),
  ).toString();
  const late = new QueueClient(`${endpoint}/${q.name}?${expired}`, undefined, { retryOptions: { maxTries: 1 } });
  await assert.rejects(late.peekMessages(), (e) => e.statusCode === 403 && e.code === "AuthenticationFailed");
  await q.delete();
});
