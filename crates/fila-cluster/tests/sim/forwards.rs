//! How the simulated nodes reach each other's leaders, as servers do: a
//! [`Transport`] over the in-process network (a cut link or a node down
//! fails the forward, and every forward is delayed both ways), and the
//! leader's side of an ask: the node's own asks (a placement, a
//! partition's leader) answered by [`Node::answer_own`], an ask of a
//! request run on the partition's replica by [`serve`] — a small stand-in
//! for the server's dispatch that knows a create, a put, a receive and a
//! delete, answering in the binary protocol's responses.

use std::collections::BTreeMap;
use std::future::Future;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use fila_cluster::forward::{self, Ask, Reply};
use fila_cluster::node::{Node, Transport};
use fila_cluster::{NodeId, Replica, ReplicaError};
use fila_core::{Address, NewMessage, Owner, QueueSettings, Receipt, ReceiveOptions, Received};
use fila_proto::{self as proto, ErrorCode, Opcode, Request, Response, WireError};

use super::net::{Disk, Net};

/// A simulated node: its groups, reaching the others through a [`Wire`].
pub type SimNode = Node<Disk, Wire>;

/// Placements allowed in the simulated cluster.
pub const MAX_QUEUES: usize = 100;

/// The nodes up, by id.
#[derive(Default)]
pub struct Nodes(Mutex<BTreeMap<NodeId, Arc<SimNode>>>);

impl Nodes {
    pub fn up(&self, id: NodeId, node: Arc<SimNode>) {
        self.0.lock().unwrap().insert(id, node);
    }

    pub fn down(&self, id: NodeId) -> Option<Arc<SimNode>> {
        self.0.lock().unwrap().remove(&id)
    }

    pub fn get(&self, id: NodeId) -> Option<Arc<SimNode>> {
        self.0.lock().unwrap().get(&id).cloned()
    }
}

/// Node `from`'s way to the others.
pub struct Wire {
    pub from: NodeId,
    pub net: Arc<Net>,
    pub nodes: Arc<Nodes>,
}

impl Wire {
    async fn call(&self, target: NodeId, body: Vec<u8>, timeout: Duration) -> io::Result<Vec<u8>> {
        let (from, net, nodes) = (self.from, self.net.clone(), self.nodes.clone());
        let call = async move {
            net.link(from, target).await?;
            let node = nodes
                .get(target)
                .ok_or_else(|| io::Error::other(format!("node {target} is down")))?;
            let reply = answer(&node, body).await;
            // The reply comes back over the same link.
            net.link(target, from).await?;
            Ok(reply)
        };
        tokio::time::timeout(timeout, call)
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "no answer in time"))?
    }
}

impl Transport for Wire {
    fn forward(
        &self,
        target: NodeId,
        _addr: &str,
        body: Vec<u8>,
        timeout: Duration,
    ) -> impl Future<Output = io::Result<Vec<u8>>> + Send {
        self.call(target, body, timeout)
    }

    async fn forward_held(
        &self,
        target: NodeId,
        _addr: &str,
        body: Vec<u8>,
        timeout: Duration,
    ) -> Option<io::Result<Vec<u8>>> {
        Some(self.call(target, body, timeout).await)
    }
}

/// The answer of a replica's refusal.
pub fn refusal(e: &ReplicaError) -> Response {
    let code = match e {
        ReplicaError::NotLeader { .. } | ReplicaError::Unready(_) => ErrorCode::NOT_LEADER,
        ReplicaError::Unknown { .. } => ErrorCode::OUTCOME_UNKNOWN,
        _ => ErrorCode::INTERNAL,
    };
    Response::Error(WireError {
        code,
        message: e.to_string(),
    })
}

/// The leader's side of an ask `node` was sent.
async fn answer(node: &SimNode, body: Vec<u8>) -> Vec<u8> {
    let ask = match Ask::decode(&body) {
        Ok(ask) => ask,
        Err(why) => return forward::refused(&why),
    };
    if let Some(own) = node.answer_own(&ask, MAX_QUEUES).await {
        return own.unwrap_or_else(|(_, e)| Reply::of(&refusal(&e), Opcode::Auth as u8, 0));
    }
    let (group, req, waited) = match ask {
        Ask::Run { group, req, .. } => (group, req, None),
        Ask::Wait {
            group, req, waited, ..
        } => (group, req, Some(waited)),
        _ => return forward::refused("an ask the simulation does not make"),
    };
    let Some(part) = node.parts.get(group as usize).cloned() else {
        return forward::refused("no such partition");
    };
    let opcode = req.opcode() as u8;
    let ran = match waited {
        Some(waited) => held_here(&part, *req, waited, true).await,
        None => {
            part.execute(shard_for(&part, &req), move |owner| serve(owner, *req))
                .await
        }
    };
    let response = ran.unwrap_or_else(|e| refusal(&e));
    Reply::of(&response, opcode, 0)
}

/// A receive that waits (`waited` of its wait spent already), run until
/// messages come or its wait ends, looking every 25 ms — a stand-in for
/// the server's endpoint, which is woken by what makes messages visible
/// instead. On the node a request reached (not `patient`) a refusal is
/// answered at once, as the server's endpoint answers it, for the
/// request's [`fila_cluster::node::Course`] to follow. On the leader
/// holding a forwarded receive (`patient`) — unlike the server, which
/// answers `not_leader` at once when it stops leading — it goes on
/// holding the receive until its wait ends, as a leader that stopped
/// answering (a paused process) would: the node that forwarded it gives
/// it up itself once it sees another node lead (`Held::Moved`).
pub async fn held_here(
    part: &Replica<Disk>,
    req: Request,
    waited: Duration,
    patient: bool,
) -> Result<Response, ReplicaError> {
    let mut look = req.clone();
    let wait = match &mut look {
        Request::Receive(r) => Duration::from_millis(r.wait_ms.replace(0).unwrap_or(0)),
        _ => Duration::ZERO,
    };
    let deadline = tokio::time::Instant::now() + wait.saturating_sub(waited);
    loop {
        let req = look.clone();
        let ran = part
            .execute(shard_for(part, &req), move |owner| serve(owner, req))
            .await;
        let more = tokio::time::Instant::now() < deadline;
        match ran {
            Ok(Response::Messages(ms)) if ms.is_empty() && more => {}
            Err(_) if more && patient => {}
            done => return done,
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

fn failed(e: fila_core::Error) -> WireError {
    WireError {
        code: ErrorCode::INVALID_ARGUMENT,
        message: e.to_string(),
    }
}

/// Runs `req` on a partition's engine (see the module docs).
/// The shard of `part`'s engine that serves `req` (its queue's).
pub fn shard_for(part: &Replica<Disk>, req: &Request) -> usize {
    match req {
        Request::CreateQueue { name, .. } => part.shard_of(name),
        Request::Put { queue, .. } => part.shard_of(queue),
        Request::Delete { queue, .. } => part.shard_of(&queue.name),
        Request::Receive(r) => part.shard_of(&r.queue.name),
        _ => 0,
    }
}

pub fn serve(owner: &mut Owner, req: Request) -> Response {
    match req {
        Request::CreateQueue { name, .. } => {
            match owner.create_queue(&name, QueueSettings::default()) {
                Ok(made) => Response::Created(made),
                Err(e) => Response::Error(failed(e)),
            }
        }
        Request::Put { queue, messages } => {
            let batch = messages
                .into_iter()
                .map(|m| {
                    let mut message = NewMessage::new(m.payload);
                    message.dedup_id = m.dedup_id;
                    message
                })
                .collect();
            match owner.put(&queue, batch) {
                Ok(entries) => Response::Put(
                    entries
                        .into_iter()
                        .map(|r| {
                            r.map(|p| proto::PutAck {
                                id: p.id.0,
                                seq: p.seq,
                            })
                            .map_err(failed)
                        })
                        .collect(),
                ),
                Err(e) => Response::Error(failed(e)),
            }
        }
        Request::Receive(r) => {
            let options = ReceiveOptions::now(u32::from(r.max_messages));
            match owner.receive(Address::queue(&r.queue.name), &options, None) {
                Ok(Received::Ready(ms)) => Response::Messages(ms.into_iter().map(wire).collect()),
                Ok(_) => Response::Messages(Vec::new()),
                Err(e) => Response::Error(failed(e)),
            }
        }
        Request::Delete { queue, receipts } => {
            let receipts: Result<Vec<Receipt>, _> =
                receipts.iter().map(|r| Receipt::from_bytes(r)).collect();
            let deleted = receipts
                .map_err(|e| WireError {
                    code: ErrorCode::RECEIPT_INVALID,
                    message: e.to_string(),
                })
                .and_then(|receipts| {
                    owner
                        .delete(Address::queue(&queue.name), &receipts)
                        .map_err(failed)
                });
            match deleted {
                Ok(results) => {
                    Response::Deleted(results.into_iter().map(|r| r.map_err(failed)).collect())
                }
                Err(e) => Response::Error(e),
            }
        }
        other => Response::Error(WireError {
            code: ErrorCode::INVALID_ARGUMENT,
            message: format!("{:?} is not simulated", other.opcode()),
        }),
    }
}

/// A delivered message as the binary protocol carries it (what the
/// simulation reads of it).
fn wire(m: fila_core::Message) -> proto::Message {
    proto::Message {
        id: m.id.0,
        seq: m.seq,
        payload: Bytes::copy_from_slice(&m.payload),
        attributes: Vec::new(),
        channel: None,
        inserted_at_ms: m.inserted_at_ms,
        expires_at_ms: m.expires_at_ms,
        next_visible_at_ms: m.next_visible_at_ms,
        delivery_count: m.delivery_count,
        state: 2,
        receipt: m.receipt.map(|r| r.to_bytes()),
        dead_letter: None,
        group: None,
        priority: m.priority,
        attempts: Vec::new(),
    }
}
