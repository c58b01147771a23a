//! A fila producer's or consumer's connections: one to each node that
//! leads one of its queues (a cluster's partitions may be led by
//! different nodes; a single node is one connection), each queue's
//! requests pipelined on its leader's connection. A request answered
//! `not_leader` naming the leader (its partition's leadership moved during
//! the run) is sent again there, and its queue's requests go there from
//! then on.

use std::collections::HashMap;
use std::time::Duration;

use fila_client::{Client, ClientOptions, Encode, ErrorCode, Response};

/// The most nodes one producer or consumer connects to: one per node
/// leading one of its queues; a server naming ever new leaders is refused
/// past it rather than followed.
const NODES_MAX: usize = 64;

/// A request sent on one of the connections: which, and its id.
pub type Sent = (usize, u64);

/// The connections of one producer or consumer.
pub struct Nodes {
    options: ClientOptions,
    clients: Vec<Client>,
    /// Each connection's node.
    addrs: Vec<String>,
    /// Each queue's connection.
    of_queue: HashMap<String, usize>,
}

impl Nodes {
    /// Connects to each node `route` names for one of `queues` (once per
    /// node), with `options` otherwise.
    pub fn connect(
        options: &ClientOptions,
        queues: &[String],
        route: impl Fn(&str) -> String,
    ) -> Result<Nodes, String> {
        let mut addrs: Vec<String> = Vec::new();
        let mut of_queue = HashMap::new();
        for q in queues {
            let addr = route(q);
            let i = match addrs.iter().position(|a| *a == addr) {
                Some(i) => i,
                None => {
                    addrs.push(addr);
                    addrs.len() - 1
                }
            };
            of_queue.insert(q.clone(), i);
        }
        let clients = addrs
            .iter()
            .map(|addr| connect(options, addr))
            .collect::<Result<_, _>>()?;
        Ok(Nodes {
            options: options.clone(),
            clients,
            addrs,
            of_queue,
        })
    }

    /// Queues `req` on its queue's connection (written by
    /// [`Nodes::flush`] or the next wait on it).
    pub fn send<R: Encode + ?Sized>(&mut self, req: &R) -> Result<Sent, String> {
        let queue = req.queue().ok_or("a request without a queue")?;
        let i = *self
            .of_queue
            .get(queue)
            .ok_or_else(|| format!("no connection for queue {queue}"))?;
        let id = self.clients[i].send(req).map_err(|e| e.to_string())?;
        Ok((i, id))
    }

    /// Writes what is queued on `sent`'s connection.
    pub fn flush(&mut self, sent: Sent) -> Result<(), String> {
        self.clients[sent.0].flush().map_err(|e| e.to_string())
    }

    /// The answer to `sent`, up to `extra` beyond the request timeout.
    pub fn wait(&mut self, sent: Sent, extra: Duration) -> Result<Response, String> {
        self.clients[sent.0]
            .wait(sent.1, extra)
            .map_err(|e| e.to_string())
    }

    /// The answer to `req`, sent as `sent`: when it is `not_leader`
    /// naming the leader, `req` is sent again there (its queue's requests
    /// go there from then on), as [`fila_client::Hops`] says. The node
    /// that refused it did nothing, so nothing is done twice.
    pub fn answer<R: Encode + ?Sized>(
        &mut self,
        req: &R,
        mut sent: Sent,
        extra: Duration,
    ) -> Result<Response, String> {
        let mut hops = fila_client::Hops::default();
        loop {
            let r = self.wait(sent, extra)?;
            if !self.follow(req, sent, &r)? {
                return Ok(r);
            }
            let Some(pause) = hops.next() else {
                return Ok(r);
            };
            std::thread::sleep(pause);
            sent = self.send(req)?;
            self.flush(sent)?;
        }
    }

    /// `answer` to `req`, sent as `sent`: when it is `not_leader` naming
    /// another node than the one it was sent to, the queue's connection is
    /// that node's (`true`: send it again).
    fn follow<R: Encode + ?Sized>(
        &mut self,
        req: &R,
        sent: Sent,
        answer: &Response,
    ) -> Result<bool, String> {
        let Response::Error(e) = answer else {
            return Ok(false);
        };
        let (Some(queue), Some(addr)) = (req.queue(), fila_client::leader_in(&e.message)) else {
            return Ok(false);
        };
        if e.code != ErrorCode::NOT_LEADER || self.addrs[sent.0] == addr {
            return Ok(false);
        }
        let i = match self.addrs.iter().position(|a| a == addr) {
            Some(i) => i,
            None if self.addrs.len() >= NODES_MAX => {
                return Err(format!(
                "{addr} named as a leader: this connection set already talks to {NODES_MAX} nodes"
            ))
            }
            None => {
                self.clients.push(connect(&self.options, addr)?);
                self.addrs.push(addr.to_owned());
                self.addrs.len() - 1
            }
        };
        self.of_queue.insert(queue.to_owned(), i);
        Ok(true)
    }
}

fn connect(options: &ClientOptions, addr: &str) -> Result<Client, String> {
    let mut o = options.clone();
    o.addr = addr.to_owned();
    Client::connect(o).map_err(|e| e.to_string())
}
