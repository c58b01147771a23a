//! A fila producer's or consumer's connections: one to each node that
//! leads one of its queues (a cluster's partitions may be led by
//! different nodes; a single node is one connection), each queue's
//! requests pipelined on its leader's connection.

use std::collections::HashMap;
use std::time::Duration;

use fila_client::{Client, ClientOptions, Encode, Response};

/// A request sent on one of the connections: which, and its id.
pub type Sent = (usize, u64);

/// The connections of one producer or consumer.
pub struct Nodes {
    clients: Vec<Client>,
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
            .into_iter()
            .map(|addr| {
                let mut o = options.clone();
                o.addr = addr;
                Client::connect(o).map_err(|e| e.to_string())
            })
            .collect::<Result<_, _>>()?;
        Ok(Nodes { clients, of_queue })
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
}
