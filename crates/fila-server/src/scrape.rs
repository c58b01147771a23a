//! The metrics HTTP endpoint: `GET /metrics`, on one thread with a mio
//! poll, so idle or slow clients cannot hold the endpoint.
//!
//! Limits:
//! * a connection has [`HEAD_DEADLINE`] to send its whole request head
//!   (at most [`HEAD_MAX`] bytes), else it is closed;
//! * at most [`CONNECTIONS_MAX`] connections at once, at most
//!   [`PER_PEER_MAX`] from one address; a new connection past either takes
//!   the place of the oldest one still sending its head (of its address,
//!   or of all), so connections that never send a request cannot keep a
//!   scrape out; only when every place is writing an answer is a newcomer
//!   refused (503);
//! * an answer not taken by its client within [`WRITE_DEADLINE`] is
//!   dropped with its connection;
//! * wrong bearer tokens count as failed authentications of their address
//!   ([`crate::guard`]): a blocked address is answered 429 at once.
//!
//! Scrapes from loopback need no token; from elsewhere
//! `Authorization: Bearer <token>` (any configured token, as of the last
//! reload) unless `metrics_public`.
//!
//! With TLS configured the endpoint speaks HTTPS only, with the server's
//! certificate (the one of the last reload for each new connection); the
//! TLS handshake counts in the [`HEAD_DEADLINE`].

use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token, Waker};

use crate::guard::AuthGuard;
use crate::metrics::{EngineView, Metrics};
use crate::tls::Stream;

/// Connections the endpoint holds at once.
pub const CONNECTIONS_MAX: usize = 64;
/// Connections one address may hold at once.
pub const PER_PEER_MAX: usize = 4;
/// How long a client has to send its whole request head.
pub const HEAD_DEADLINE: Duration = Duration::from_secs(2);
/// How long an answer waits for its client to take it.
pub const WRITE_DEADLINE: Duration = Duration::from_secs(10);
/// The largest request head read.
pub const HEAD_MAX: usize = 8 << 10;

const LISTENER: Token = Token(usize::MAX - 1);
const WAKER: Token = Token(usize::MAX - 2);

/// Who may scrape, and what a scrape lists.
struct Access {
    live: Arc<crate::live::Live>,
    public: bool,
    max_queues: usize,
}

/// The endpoint's thread (see the module docs).
pub(crate) struct MetricsEndpoint {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    waker: Arc<Waker>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl MetricsEndpoint {
    pub(crate) fn start(
        addr: SocketAddr,
        config: &crate::Config,
        live: Arc<crate::live::Live>,
        metrics: Arc<Metrics>,
        engine: Arc<dyn EngineView>,
    ) -> std::io::Result<MetricsEndpoint> {
        let mut listener = TcpListener::bind(addr).map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!("cannot listen on {addr} (metrics_listen): {e}"),
            )
        })?;
        let addr = listener.local_addr()?;
        let poll = Poll::new()?;
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
        let stop = Arc::new(AtomicBool::new(false));
        let endpoint = Endpoint {
            poll,
            listener,
            conns: Vec::new(),
            guard: AuthGuard::default(),
            access: Access {
                live,
                public: config.metrics_public,
                max_queues: config.metrics_max_queues,
            },
            metrics,
            engine,
            stop: stop.clone(),
        };
        let thread = std::thread::Builder::new()
            .name("fila-metrics".into())
            .spawn(move || endpoint.run())?;
        Ok(MetricsEndpoint {
            addr,
            stop,
            waker,
            thread: Some(thread),
        })
    }

    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub(crate) fn stop(&mut self) {
        self.stop.store(true, Ordering::Release);
        let _ = self.waker.wake();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

enum Stage {
    /// Reading the request head.
    Head(Vec<u8>),
    /// Writing the answer: what is left of it.
    Answer(BytesMut),
}

struct Conn {
    stream: Stream,
    ip: IpAddr,
    /// When its current stage began (its deadline counts from there).
    since: Instant,
    stage: Stage,
}

struct Endpoint {
    poll: Poll,
    listener: TcpListener,
    conns: Vec<Option<Conn>>,
    guard: AuthGuard,
    access: Access,
    metrics: Arc<Metrics>,
    engine: Arc<dyn EngineView>,
    stop: Arc<AtomicBool>,
}

fn answer(status: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

fn bearer(head: &str) -> Option<&str> {
    head.lines().find_map(|l| {
        let (name, value) = l.split_once(':')?;
        if !name.trim().eq_ignore_ascii_case("authorization") {
            return None;
        }
        value.trim().strip_prefix("Bearer ").map(str::trim)
    })
}

fn would_block(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::WouldBlock
}

impl Endpoint {
    fn run(mut self) {
        let mut events = Events::with_capacity(256);
        while !self.stop.load(Ordering::Acquire) {
            let timeout = self.next_deadline().map(|at| {
                at.saturating_duration_since(Instant::now())
                    .max(Duration::from_millis(1))
            });
            if let Err(e) = self.poll.poll(&mut events, timeout) {
                if e.kind() != std::io::ErrorKind::Interrupted {
                    tracing::warn!(error = %e, "metrics endpoint: poll failed");
                    return;
                }
            }
            for event in events.iter() {
                match event.token() {
                    LISTENER => self.accept(),
                    WAKER => {}
                    Token(slot) => self.ready(slot),
                }
            }
            self.close_late();
        }
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.conns
            .iter()
            .flatten()
            .map(|c| {
                c.since
                    + match c.stage {
                        Stage::Head(_) => HEAD_DEADLINE,
                        Stage::Answer(..) => WRITE_DEADLINE,
                    }
            })
            .min()
    }

    fn close_late(&mut self) {
        let now = Instant::now();
        for slot in 0..self.conns.len() {
            let late = self.conns[slot].as_ref().is_some_and(|c| {
                let limit = match c.stage {
                    Stage::Head(_) => HEAD_DEADLINE,
                    Stage::Answer(..) => WRITE_DEADLINE,
                };
                now.saturating_duration_since(c.since) >= limit
            });
            if late {
                self.close(slot);
            }
        }
    }

    fn close(&mut self, slot: usize) {
        if let Some(mut c) = self.conns[slot].take() {
            c.stream.close_notify();
            let _ = self.poll.registry().deregister(c.stream.socket());
        }
    }

    /// The oldest connection still sending its head, of `ip` (or of any
    /// address).
    fn oldest_reading(&self, ip: Option<IpAddr>) -> Option<usize> {
        self.conns
            .iter()
            .enumerate()
            .filter_map(|(slot, c)| c.as_ref().map(|c| (slot, c)))
            .filter(|(_, c)| matches!(c.stage, Stage::Head(_)))
            .filter(|(_, c)| ip.is_none_or(|ip| c.ip == ip))
            .min_by_key(|(_, c)| c.since)
            .map(|(slot, _)| slot)
    }

    /// Best effort, on a fresh socket: the answer fits its send buffer
    /// (over TLS the socket is only closed: no handshake for a refusal).
    fn refuse(&self, mut stream: TcpStream, status: &str, body: &str) {
        if self.access.live.load().tls.is_none() {
            let _ = stream.write(&answer(status, body));
        }
    }

    fn accept(&mut self) {
        loop {
            let (mut stream, peer) = match self.listener.accept() {
                Ok(s) => s,
                Err(e) if would_block(&e) => return,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    tracing::warn!(error = %e, "metrics endpoint: accept failed");
                    return;
                }
            };
            let ip = peer.ip();
            let now = Instant::now();
            if let Some(left) = self.guard.blocked(ip, now) {
                self.refuse(
                    stream,
                    "429 Too Many Requests",
                    &format!(
                        "too many wrong tokens from this address; try again in {} s\n",
                        left.as_secs().max(1)
                    ),
                );
                continue;
            }
            let from_peer = self.conns.iter().flatten().filter(|c| c.ip == ip).count();
            let open = self.conns.iter().flatten().count();
            if from_peer >= PER_PEER_MAX {
                match self.oldest_reading(Some(ip)) {
                    Some(slot) => self.close(slot),
                    None => {
                        self.refuse(
                            stream,
                            "503 Service Unavailable",
                            "too many scrapes from this address at once\n",
                        );
                        continue;
                    }
                }
            } else if open >= CONNECTIONS_MAX {
                match self.oldest_reading(None) {
                    Some(slot) => self.close(slot),
                    None => {
                        self.refuse(
                            stream,
                            "503 Service Unavailable",
                            "too many scrapes at once\n",
                        );
                        continue;
                    }
                }
            }
            let slot = match self.conns.iter().position(|c| c.is_none()) {
                Some(slot) => slot,
                None => {
                    self.conns.push(None);
                    self.conns.len() - 1
                }
            };
            let tls = self.access.live.load().tls.clone();
            // A TLS handshake writes before the request comes.
            let interest = match tls {
                Some(_) => Interest::READABLE | Interest::WRITABLE,
                None => Interest::READABLE,
            };
            if self
                .poll
                .registry()
                .register(&mut stream, Token(slot), interest)
                .is_err()
            {
                continue;
            }
            let stream = match tls {
                None => Stream::Plain(stream),
                Some(config) => match Stream::tls(stream, config) {
                    Ok(s) => s,
                    Err(_) => continue,
                },
            };
            self.conns[slot] = Some(Conn {
                stream,
                ip,
                since: now,
                stage: Stage::Head(Vec::new()),
            });
            // Its head may be in already.
            self.ready(slot);
        }
    }

    fn ready(&mut self, slot: usize) {
        let Some(c) = self.conns.get_mut(slot).and_then(|c| c.as_mut()) else {
            return;
        };
        match &mut c.stage {
            Stage::Head(buf) => {
                let mut chunk = [0u8; 2048];
                loop {
                    match c.stream.read(&mut chunk) {
                        Ok(0) => {
                            self.close(slot);
                            return;
                        }
                        Ok(n) => {
                            buf.extend_from_slice(&chunk[..n]);
                            if buf.windows(4).any(|w| w == b"\r\n\r\n") {
                                break;
                            }
                            if buf.len() >= HEAD_MAX {
                                let head = answer(
                                    "431 Request Header Fields Too Large",
                                    "request head too large\n",
                                );
                                self.respond(slot, head);
                                return;
                            }
                        }
                        Err(e) if would_block(&e) => {
                            // What a TLS handshake has to send.
                            if c.stream.write_from(&mut BytesMut::new()).is_err() {
                                self.close(slot);
                            }
                            return;
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(_) => {
                            self.close(slot);
                            return;
                        }
                    }
                }
                let head = String::from_utf8_lossy(buf).into_owned();
                let ip = c.ip;
                let reply = self.answer_to(&head, ip);
                self.respond(slot, reply);
            }
            Stage::Answer(..) => self.write(slot),
        }
    }

    /// The answer to a whole request head from `ip`.
    fn answer_to(&mut self, head: &str, ip: IpAddr) -> Vec<u8> {
        if !(head.starts_with("GET /metrics ") || head.starts_with("GET /metrics?")) {
            return answer("404 Not Found", "try GET /metrics\n");
        }
        let token_ok = match bearer(head) {
            Some(t) if self.access.live.load().tokens.find(t).is_some() => true,
            Some(_) => {
                if let Some(block) = self.guard.failed(ip, Instant::now()) {
                    tracing::warn!(
                        peer = %ip,
                        block_secs = block.as_secs(),
                        "metrics: too many wrong tokens; this address is refused for a while"
                    );
                }
                false
            }
            None => false,
        };
        if ip.is_loopback() || self.access.public || token_ok {
            answer(
                "200 OK",
                &self.metrics.render(&*self.engine, self.access.max_queues),
            )
        } else {
            answer(
                "401 Unauthorized",
                "a scrape from off loopback needs Authorization: Bearer <token> (or metrics_public)\n",
            )
        }
    }

    fn respond(&mut self, slot: usize, reply: Vec<u8>) {
        if let Some(c) = self.conns[slot].as_mut() {
            c.stage = Stage::Answer(BytesMut::from(&reply[..]));
            c.since = Instant::now();
            let _ =
                self.poll
                    .registry()
                    .reregister(c.stream.socket(), Token(slot), Interest::WRITABLE);
        }
        self.write(slot);
    }

    fn write(&mut self, slot: usize) {
        let Some(c) = self.conns[slot].as_mut() else {
            return;
        };
        let Stage::Answer(reply) = &mut c.stage else {
            return;
        };
        match c.stream.write_from(reply) {
            Ok(()) if !reply.is_empty() || c.stream.wants_write() => return,
            _ => {}
        }
        self.close(slot);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bearer_token_is_read_from_the_authorization_header() {
        let head = "GET /metrics HTTP/1.1\r\nHost: x\r\nauthorization:  Bearer s3cret \r\n\r\n";
        assert_eq!(bearer(head), Some("s3cret"));
        assert_eq!(bearer("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"), None);
        assert_eq!(
            bearer("GET /metrics HTTP/1.1\r\nAuthorization: Basic abc\r\n\r\n"),
            None
        );
    }
}
