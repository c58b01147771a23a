//! The peer network: Raft's messages between nodes over TCP.
//!
//! A connection begins with a handshake that proves the caller holds the
//! cluster's secret: the listener sends `FILAPEER` and a 32-byte random
//! nonce; the caller answers `FILAPEER`, its node id, the node id it means
//! to reach and HMAC-SHA256(secret, `fila peer` ‖ nonce ‖ its id ‖ that
//! id); the listener checks the MAC in constant time and that it is the
//! node meant — a node at an address that once was another's (a wiped node
//! back under a new id) takes nothing sent to the old one — and answers
//! one byte (1) or closes the connection.
//! Then frames go both ways, one request and its answer at a time: a `u32`
//! length (of what follows, at most [`FRAME_MAX`]), the `u64` group (the
//! partition), and a request or an answer ([`crate::codec::PeerRequest`],
//! [`crate::codec::PeerAnswer`]).
//!
//! With [`PeerTls`], every connection is TLS first (the listener presents
//! its node's certificate; the caller checks it against the cluster's CA
//! for the host of the peer address it dialled), and the handshake above
//! and the frames travel inside it: the secret proves the caller, the
//! certificate the listener, and nothing travels in clear.
//!
//! A follower may forward a request to its leader ([`Forwarder`]): the
//! bytes travel opaque and the listener's [`Forward`] handler answers them
//! (the server's: a request a client could not take elsewhere, such as an
//! SQS call). A node has at most [`FORWARD_CONNECTIONS`] forwards under
//! way at once, and [`FORWARDS_HELD`] held open (receives waiting on their
//! leader), each on a connection of its own, so that forwards leave room
//! for Raft's own connections within the leader's [`CONNECTIONS_MAX`].
//!
//! Limits: [`CONNECTIONS_MAX`] connections served at once (more wait to
//! be accepted), a handshake within [`HANDSHAKE_TIMEOUT`], a connection
//! idle for [`IDLE_TIMEOUT`] closed, a frame past [`FRAME_MAX`] refused
//! before it is read. A caller reconnects after any error; a request
//! that does not get its answer within the time openraft gives it fails
//! (openraft retries it).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fila_wal::Storage;
use hmac::{Hmac, Mac};
use openraft::errors::{RPCError, ReplicationClosed, StreamingError, Unreachable};
use openraft::network::{RPCOption, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, TransferLeaderRequest,
    TransferLeaderResponse, VoteRequest, VoteResponse,
};
use openraft::{OptionalSend, Raft, RaftNetworkV2};
use sha2::Sha256;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::codec::{self, PeerAnswer, PeerRequest};
use crate::{Member, NodeId, StateMachine, TypeConfig, Vote};

/// The largest frame: a snapshot travels whole in one.
pub const FRAME_MAX: usize = 1 << 30;
/// Connections a node serves at once: room for Raft's own beside every
/// forward four peers may have under way and held (4 × 24).
pub const CONNECTIONS_MAX: usize = 160;
/// The handshake's time.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// A connection with no request for this long is closed.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

const MAGIC: &[u8; 8] = b"FILAPEER";
/// How long an AppendEntries exchange may take at least. openraft gives
/// replication a heartbeat's interval (its soft limit: 75 ms here), which
/// a loaded follower's write, sync and apply can pass; giving up then drops
/// the connection and backs replication off, which stalls commits far
/// longer than the wait would have.
pub const APPEND_TIMEOUT: Duration = Duration::from_secs(1);

/// Forwards a node has under way at once, each on a connection of its own.
pub const FORWARD_CONNECTIONS: usize = 8;
/// Forwards a node holds open at once beside those, each on a connection
/// of its own: receives that wait on their leader for messages
/// ([`Forwarder::forward_held`]). With [`FORWARD_CONNECTIONS`], a peer
/// holds at most 24 of a node's [`CONNECTIONS_MAX`].
pub const FORWARDS_HELD: usize = 16;

/// A node's handler of forwarded requests: the request's bytes in, its
/// answer's bytes out.
pub type Forward =
    Arc<dyn Fn(Vec<u8>) -> Pin<Box<dyn Future<Output = Vec<u8>> + Send>> + Send + Sync>;

/// The handshake's MAC of caller `node` reaching node `target`.
pub fn mac(secret: &[u8], nonce: &[u8; 32], node: NodeId, target: NodeId) -> [u8; 32] {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(secret).expect("any key length");
    m.update(b"fila peer");
    m.update(nonce);
    m.update(&node.to_be_bytes());
    m.update(&target.to_be_bytes());
    m.finalize().into_bytes().into()
}

fn invalid(why: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why.to_string())
}

/// A connection's byte stream: TCP, or TLS over it.
pub trait PeerStream: AsyncRead + AsyncWrite + Unpin + Send + Sync {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + Sync> PeerStream for T {}

/// A connection's stream, read through a buffer: a frame's head and
/// body usually come in one read.
type Stream = tokio::io::BufReader<Box<dyn PeerStream>>;

/// The read buffer of a connection: a frame's head and a small frame
/// (an answer, a heartbeat); a larger payload is read past it. Small,
/// since a node holds a connection per group and peer (64 partitions and
/// six peers: several hundred).
const READ_BUFFER: usize = 8 << 10;

fn buffered(stream: Box<dyn PeerStream>) -> Stream {
    tokio::io::BufReader::with_capacity(READ_BUFFER, stream)
}

/// TLS between nodes: how a listener presents itself and how a caller
/// checks it. Cloned, it is the same one: [`PeerTls::set`] (a reload of the
/// certificates) takes effect for every connection made after it, and
/// connections already open keep theirs.
#[derive(Clone)]
pub struct PeerTls {
    configs: Arc<std::sync::RwLock<TlsConfigs>>,
}

type TlsConfigs = (Arc<rustls::ServerConfig>, Arc<rustls::ClientConfig>);

impl PeerTls {
    /// The listener's side (its node's certificate) and the caller's (the
    /// cluster's CA).
    pub fn new(server: Arc<rustls::ServerConfig>, client: Arc<rustls::ClientConfig>) -> PeerTls {
        PeerTls {
            configs: Arc::new(std::sync::RwLock::new((server, client))),
        }
    }

    /// Replaces both sides for the connections made from now on.
    pub fn set(&self, server: Arc<rustls::ServerConfig>, client: Arc<rustls::ClientConfig>) {
        *self.configs.write().unwrap_or_else(|p| p.into_inner()) = (server, client);
    }

    /// The listener's side in force.
    pub fn server_config(&self) -> Arc<rustls::ServerConfig> {
        self.configs
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .0
            .clone()
    }

    /// The caller's side in force.
    pub fn client_config(&self) -> Arc<rustls::ClientConfig> {
        self.configs
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .1
            .clone()
    }
}

/// The host a peer address names, as TLS checks it.
fn server_name(addr: &str) -> io::Result<rustls::pki_types::ServerName<'static>> {
    let host = addr
        .rsplit_once(':')
        .map_or(addr, |(h, _)| h)
        .trim_start_matches('[')
        .trim_end_matches(']');
    rustls::pki_types::ServerName::try_from(host.to_owned())
        .map_err(|_| invalid(format!("{addr}: not a host to check a certificate for")))
}

/// Bytes before a frame's payload: its length and group.
const FRAME_HEAD: usize = 12;

/// Starts a frame in `out`: its head's room, the payload to follow.
fn frame_start(out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&[0; FRAME_HEAD]);
}

/// Sends the frame `out` holds (started by [`frame_start`], the payload
/// after) for `group`, in one write.
async fn write_frame(stream: &mut Stream, group: u64, out: &mut [u8]) -> io::Result<()> {
    let len = u32::try_from(out.len() - 4)
        .ok()
        .filter(|&l| l as usize <= FRAME_MAX)
        .ok_or_else(|| invalid("a frame past the limit"))?;
    out[..4].copy_from_slice(&len.to_be_bytes());
    out[4..FRAME_HEAD].copy_from_slice(&group.to_be_bytes());
    stream.write_all(out).await?;
    stream.flush().await
}

async fn read_frame(stream: &mut Stream) -> io::Result<(u64, Vec<u8>)> {
    let len = stream.read_u32().await? as usize;
    if !(8..=FRAME_MAX).contains(&len) {
        return Err(invalid(format!("a frame of {len} bytes")));
    }
    let group = stream.read_u64().await?;
    let mut payload = vec![0u8; len - 8];
    stream.read_exact(&mut payload).await?;
    Ok((group, payload))
}

/// Serves the peer protocol of node `me` on `listener` until the task is
/// dropped (over TLS with `tls`): `group` finds the Raft node of a
/// partition, `forward` answers forwarded requests (refused without one).
pub async fn serve<S, G>(
    listener: TcpListener,
    me: NodeId,
    secret: Arc<[u8]>,
    tls: Option<PeerTls>,
    group: G,
    forward: Option<Forward>,
) where
    S: Storage + 'static,
    G: Fn(u64) -> Option<Raft<TypeConfig, StateMachine<S>>> + Send + Sync + 'static,
{
    let group = Arc::new(group);
    let slots = Arc::new(tokio::sync::Semaphore::new(CONNECTIONS_MAX));
    loop {
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return;
        };
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let (secret, group, tls) = (secret.clone(), group.clone(), tls.clone());
        let forward = forward.clone();
        tokio::spawn(async move {
            let _permit = permit;
            if let Err(e) = connection(stream, me, &secret, tls, &*group, forward).await {
                tracing::debug!("peer connection closed: {e}");
            }
        });
    }
}

async fn connection<S, G>(
    tcp: TcpStream,
    me: NodeId,
    secret: &[u8],
    tls: Option<PeerTls>,
    group: &G,
    forward: Option<Forward>,
) -> io::Result<()>
where
    S: Storage + 'static,
    G: Fn(u64) -> Option<Raft<TypeConfig, StateMachine<S>>>,
{
    tcp.set_nodelay(true)?;
    let mut stream: Stream = buffered(match tls {
        None => Box::new(tcp),
        Some(tls) => {
            let accepted = tokio_rustls::TlsAcceptor::from(tls.server_config()).accept(tcp);
            Box::new(
                tokio::time::timeout(HANDSHAKE_TIMEOUT, accepted)
                    .await
                    .map_err(|_| invalid("the TLS handshake took too long"))??,
            )
        }
    });
    let mut nonce = [0u8; 32];
    getrandom::fill(&mut nonce).map_err(|e| io::Error::other(e.to_string()))?;
    let handshake = async {
        let mut hello = MAGIC.to_vec();
        hello.extend_from_slice(&nonce);
        stream.write_all(&hello).await?;
        let mut answer = [0u8; 8 + 8 + 8 + 32];
        stream.read_exact(&mut answer).await?;
        let node = u64::from_be_bytes(answer[8..16].try_into().expect("8 bytes"));
        let target = u64::from_be_bytes(answer[16..24].try_into().expect("8 bytes"));
        let want = mac(secret, &nonce, node, target);
        let diff = want
            .iter()
            .zip(&answer[24..])
            .fold(0u8, |acc, (a, b)| acc | (a ^ b));
        if &answer[..8] != MAGIC || std::hint::black_box(diff) != 0 {
            return Err(invalid("a peer without the cluster's secret"));
        }
        if target != me {
            return Err(invalid(format!(
                "node {node} meant to reach node {target}: this is node {me}"
            )));
        }
        stream.write_all(&[1]).await
    };
    tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake)
        .await
        .map_err(|_| invalid("the handshake took too long"))??;
    let mut out = Vec::new();
    loop {
        let (g, payload) = tokio::time::timeout(IDLE_TIMEOUT, read_frame(&mut stream))
            .await
            .map_err(|_| invalid("idle"))??;
        let answer = match (codec::decode_request(&payload), &forward) {
            (Err(e), _) => PeerAnswer::Refused(format!("a request that does not parse: {e}")),
            (Ok(PeerRequest::Forward(body)), Some(forward)) => {
                PeerAnswer::Forwarded(forward(body).await)
            }
            (Ok(PeerRequest::Forward(_)), None) => {
                PeerAnswer::Refused("this node takes no forwarded requests".into())
            }
            (Ok(req), _) => match group(g) {
                None => PeerAnswer::Refused(format!("no partition {g} here")),
                Some(raft) => handle(&raft, req).await,
            },
        };
        frame_start(&mut out);
        codec::encode_answer(&answer, &mut out);
        write_frame(&mut stream, g, &mut out).await?;
    }
}

async fn handle<S: Storage + 'static>(
    raft: &Raft<TypeConfig, StateMachine<S>>,
    req: PeerRequest,
) -> PeerAnswer {
    match req {
        PeerRequest::Append(a) => match raft.append_entries(a).await {
            Ok(r) => PeerAnswer::Append(r),
            Err(e) => PeerAnswer::Refused(e.to_string()),
        },
        PeerRequest::Vote(v) => match raft.vote(v).await {
            Ok(r) => PeerAnswer::Vote(r),
            Err(e) => PeerAnswer::Refused(e.to_string()),
        },
        PeerRequest::Snapshot(vote, meta, data) => {
            let snapshot = openraft::storage::Snapshot {
                meta,
                snapshot: std::io::Cursor::new(data),
            };
            match raft.install_full_snapshot(vote, snapshot).await {
                Ok(r) => PeerAnswer::Snapshot(r.vote),
                Err(e) => PeerAnswer::Refused(e.to_string()),
            }
        }
        PeerRequest::TransferLeader(t) => match raft.handle_transfer_leader(t).await {
            Ok(r) => PeerAnswer::TransferLeader(r),
            Err(e) => PeerAnswer::Refused(e.to_string()),
        },
        PeerRequest::Forward(_) => PeerAnswer::Refused("a forward is not a group's".into()),
    }
}

/// Makes the connections of node `id` to its peers in one group.
#[derive(Clone)]
pub struct PeerNetwork {
    id: NodeId,
    group: u64,
    secret: Arc<[u8]>,
    tls: Option<PeerTls>,
}

impl PeerNetwork {
    /// Node `id`'s side of group `group`, proving `secret` (over TLS with
    /// `tls`).
    pub fn new(id: NodeId, group: u64, secret: Arc<[u8]>, tls: Option<PeerTls>) -> PeerNetwork {
        PeerNetwork {
            id,
            group,
            secret,
            tls,
        }
    }
}

/// One node's connection to a peer.
pub struct PeerConn {
    net: PeerNetwork,
    target: NodeId,
    addr: String,
    stream: Option<Stream>,
    out: Vec<u8>,
}

impl RaftNetworkFactory<TypeConfig> for PeerNetwork {
    type Network = PeerConn;

    async fn new_client(&mut self, target: NodeId, node: &Member) -> PeerConn {
        PeerConn {
            net: self.clone(),
            target,
            addr: node.addr.clone(),
            stream: None,
            out: Vec::new(),
        }
    }
}

impl PeerConn {
    async fn connect(&self) -> io::Result<Stream> {
        let tcp = TcpStream::connect(&self.addr).await?;
        tcp.set_nodelay(true)?;
        let mut stream: Stream = buffered(match &self.net.tls {
            None => Box::new(tcp),
            Some(tls) => Box::new(
                tokio_rustls::TlsConnector::from(tls.client_config())
                    .connect(server_name(&self.addr)?, tcp)
                    .await?,
            ),
        });
        let mut hello = [0u8; 8 + 32];
        stream.read_exact(&mut hello).await?;
        if &hello[..8] != MAGIC {
            return Err(invalid("not a fila peer"));
        }
        let nonce: [u8; 32] = hello[8..].try_into().expect("32 bytes");
        let mut answer = MAGIC.to_vec();
        answer.extend_from_slice(&self.net.id.to_be_bytes());
        answer.extend_from_slice(&self.target.to_be_bytes());
        answer.extend_from_slice(&mac(&self.net.secret, &nonce, self.net.id, self.target));
        stream.write_all(&answer).await?;
        if stream.read_u8().await? != 1 {
            return Err(invalid("the peer refused the handshake"));
        }
        Ok(stream)
    }

    async fn call(&mut self, req: &PeerRequest, timeout: Duration) -> io::Result<PeerAnswer> {
        frame_start(&mut self.out);
        codec::encode_request(req, &mut self.out);
        let exchange = async {
            if self.stream.is_none() {
                self.stream = Some(self.connect().await?);
            }
            let stream = self.stream.as_mut().expect("connected");
            write_frame(stream, self.net.group, &mut self.out).await?;
            let (_, payload) = read_frame(stream).await?;
            codec::decode_answer(&payload).map_err(invalid)
        };
        let answer = match tokio::time::timeout(timeout, exchange).await {
            Ok(Ok(answer)) => return Ok(answer),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, "no answer in time")),
        };
        // Whatever is half sent or half read, the next call starts afresh.
        self.stream = None;
        answer
    }
}

/// A connection kept for the next forward, closed well before the
/// listener's [`IDLE_TIMEOUT`] would close it.
struct Idle {
    conn: PeerConn,
    since: Instant,
}

/// Forwards requests to peers (see the module docs): a few connections to
/// each, kept between forwards.
pub struct Forwarder {
    net: PeerNetwork,
    slots: tokio::sync::Semaphore,
    held: tokio::sync::Semaphore,
    idle: Mutex<Vec<Idle>>,
}

impl Forwarder {
    /// Node `net`'s forwarder: at most [`FORWARD_CONNECTIONS`] forwards
    /// at once, and [`FORWARDS_HELD`] held.
    pub fn new(net: PeerNetwork) -> Forwarder {
        Forwarder {
            net,
            slots: tokio::sync::Semaphore::new(FORWARD_CONNECTIONS),
            held: tokio::sync::Semaphore::new(FORWARDS_HELD),
            idle: Mutex::new(Vec::new()),
        }
    }

    /// Sends `body` to node `target` at peer address `addr` and returns
    /// its answer, within `timeout` (the wait for a free connection
    /// included). An error leaves unknown whether the peer handled it.
    pub async fn forward(
        &self,
        target: NodeId,
        addr: &str,
        body: Vec<u8>,
        timeout: Duration,
    ) -> io::Result<Vec<u8>> {
        let started = Instant::now();
        let late = || io::Error::new(io::ErrorKind::TimedOut, "no answer in time");
        let _slot = tokio::time::timeout(timeout, self.slots.acquire())
            .await
            .map_err(|_| late())?
            .map_err(|_| io::Error::other("the forwarder is closed"))?;
        let left = timeout.saturating_sub(started.elapsed());
        self.call(target, addr, body, left).await
    }

    /// [`Forwarder::forward`] of a request the peer may hold until it has
    /// an answer (a receive that waits there for messages), on one of the
    /// [`FORWARDS_HELD`] connections kept for those, so that it holds up
    /// no other forward; `None`, sending nothing, while all are taken.
    pub async fn forward_held(
        &self,
        target: NodeId,
        addr: &str,
        body: Vec<u8>,
        timeout: Duration,
    ) -> Option<io::Result<Vec<u8>>> {
        let _slot = self.held.try_acquire().ok()?;
        Some(self.call(target, addr, body, timeout).await)
    }

    /// One forward on a kept connection to `target`, or a new one.
    async fn call(
        &self,
        target: NodeId,
        addr: &str,
        body: Vec<u8>,
        timeout: Duration,
    ) -> io::Result<Vec<u8>> {
        let kept = {
            let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
            idle.retain(|i| i.since.elapsed() < IDLE_TIMEOUT / 2);
            let at = idle
                .iter()
                .position(|i| i.conn.target == target && i.conn.addr == addr);
            at.map(|at| idle.swap_remove(at).conn)
        };
        let mut conn = kept.unwrap_or_else(|| PeerConn {
            net: self.net.clone(),
            target,
            addr: addr.to_owned(),
            stream: None,
            out: Vec::new(),
        });
        let answer = conn.call(&PeerRequest::Forward(body), timeout).await?;
        if conn.stream.is_some() {
            let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
            if idle.len() < FORWARD_CONNECTIONS + FORWARDS_HELD {
                idle.push(Idle {
                    conn,
                    since: Instant::now(),
                });
            }
        }
        match answer {
            PeerAnswer::Forwarded(body) => Ok(body),
            PeerAnswer::Refused(why) => Err(io::Error::other(why)),
            other => Err(invalid(format!("{other:?}"))),
        }
    }
}

fn unreachable(e: impl std::error::Error + 'static) -> RPCError<TypeConfig> {
    RPCError::Unreachable(Unreachable::new(&e))
}

impl RaftNetworkV2<TypeConfig> for PeerConn {
    type SnapshotData = std::io::Cursor<Vec<u8>>;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>> {
        match self
            .call(
                &PeerRequest::Append(rpc),
                option.soft_ttl().max(APPEND_TIMEOUT),
            )
            .await
        {
            Ok(PeerAnswer::Append(a)) => Ok(a),
            Ok(other) => Err(unreachable(invalid(format!("{other:?}")))),
            Err(e) => Err(unreachable(e)),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        match self.call(&PeerRequest::Vote(rpc), option.soft_ttl()).await {
            Ok(PeerAnswer::Vote(v)) => Ok(v),
            Ok(other) => Err(unreachable(invalid(format!("{other:?}")))),
            Err(e) => Err(unreachable(e)),
        }
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: openraft::alias::SnapshotOf<TypeConfig, std::io::Cursor<Vec<u8>>>,
        _cancel: impl std::future::Future<Output = ReplicationClosed> + OptionalSend + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        let req = PeerRequest::Snapshot(vote, snapshot.meta, snapshot.snapshot.into_inner());
        let lost = |e: io::Error| StreamingError::Unreachable(Unreachable::new(&e));
        match self.call(&req, option.soft_ttl()).await {
            Ok(PeerAnswer::Snapshot(v)) => Ok(SnapshotResponse::new(v)),
            Ok(other) => Err(lost(invalid(format!("{other:?}")))),
            Err(e) => Err(lost(e)),
        }
    }

    async fn transfer_leader(
        &mut self,
        req: TransferLeaderRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<TransferLeaderResponse<TypeConfig>, RPCError<TypeConfig>> {
        match self
            .call(&PeerRequest::TransferLeader(req), option.soft_ttl())
            .await
        {
            Ok(PeerAnswer::TransferLeader(t)) => Ok(t),
            Ok(other) => Err(unreachable(invalid(format!("{other:?}")))),
            Err(e) => Err(unreachable(e)),
        }
    }
}
