//! The network: libp2p peers that find each other, gossip small signed
//! messages and move content-addressed blobs in verified chunks.
//!
//! One task owns the `Swarm` (`swarm`); everything else talks to it through
//! a cloneable [`NetHandle`] (commands over a channel) and receives
//! [`NetEvent`]s. The network knows protocol messages and blob ids, never
//! tensors: what to serve is asked of a [`ContentServer`].
//!
//! - `behaviour`: the composed libp2p behaviour and swarm construction.
//! - `gossip`: topics and message validation.
//! - `xfer`: the transfer protocol's frames and codec.
//! - `offer`: the round's shard offers and leaves on the transfer protocol.
//! - `fetch`: chunked, multi-peer, verified blob download.
//! - `gate`: who is admitted: served, forwarded for, asked first, kept slots for.
//! - `peers`: identities, typed rejections, scoring and bans.
//! - `rate`: gossip budgets, charged to the signer rather than the relay.
//! - `serving`: the slots of the requests being answered, per peer and in all.
//! - `asking`: the requests in flight to each peer, within the share it serves.
//! - `slots`: the connections strangers may hold, in all and per IP address.
//! - `subscriptions`: reconnecting peers whose gossip topics were lost.
//! - `swarm`: the event loop.

mod asking;
pub mod behaviour;
pub mod delay;
pub mod fetch;
pub mod gate;
pub mod gossip;
pub mod offer;
pub mod peers;
pub mod rate;
mod serving;
pub mod slots;
mod subscriptions;
mod swarm;
pub mod xfer;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use libp2p::{Multiaddr, PeerId};
use murmur_protocol::{AdmissionPolicy, NodeKey, RunId, Ticket};
use thiserror::Error;
use tokio::sync::{mpsc, oneshot};

pub use asking::SERVE_PER_PEER;
pub use fetch::{fetch_blob, FetchError};
pub use gossip::{GossipMessage, TopicKind};
pub use peers::{peer_id_of, public_key_of, NetRejection};
pub use swarm::peer_of;
pub use xfer::{PeerStatus, StatusBacking, XferRequest, XferResponse};

/// What a peer is in the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// A training node that accepts inbound connections.
    Trainer,
    /// A training node that accepts no inbound connections (dials out; may
    /// be reached through a relay circuit).
    Private,
    /// A bootstrap server: DHT, relay, AutoNAT, run spec and genesis.
    Bootstrap,
    /// Watches the run without training (dashboards).
    Observer,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Trainer => "trainer",
            Role::Private => "private-trainer",
            Role::Bootstrap => "bootstrap",
            Role::Observer => "observer",
        }
    }

    pub fn from_name(s: &str) -> Option<Self> {
        Some(match s {
            "trainer" => Role::Trainer,
            "private-trainer" => Role::Private,
            "bootstrap" => Role::Bootstrap,
            "observer" => Role::Observer,
            _ => return None,
        })
    }

    /// Whether peers of this role contribute deltas.
    pub fn trains(self) -> bool {
        matches!(self, Role::Trainer | Role::Private)
    }
}

/// How to start the network.
#[derive(Debug, Clone)]
pub struct NetConfig {
    pub key: NodeKey,
    pub run: RunId,
    pub role: Role,
    /// Addresses to listen on (none for a private node).
    pub listen: Vec<Multiaddr>,
    /// Bootstrap servers (`.../p2p/<id>`).
    pub bootstrap: Vec<Multiaddr>,
    pub mdns: bool,
    pub max_connections: u32,
    /// Connections only the peers the run names may use (`slots`): the
    /// others hold at most `max_connections` less these. None: a quarter.
    pub reserved_connections: Option<u32>,
    /// Strangers (peers the run does not name) that may be connected in
    /// from one IP address (`slots`).
    pub max_per_ip: u32,
    /// Bytes a relayed circuit may carry (bootstrap servers).
    pub relay_circuit_bytes: u64,
    /// Transfer requests (Status included) served at once, from their
    /// arrival until their answer is sent; more are answered `Busy`.
    pub serve_concurrency: usize,
    /// The most of those one peer may hold; a request past it is refused
    /// `Busy` and charged (`NetRejection::Overrun`).
    pub serve_per_peer: usize,
    /// Requests this node has in flight to one peer at most (more wait
    /// their turn): the share every node serves one peer (`asking`).
    pub ask_per_peer: usize,
    /// The run's admission policy (`gate`): a ticket run serves and
    /// forwards for admitted peers only.
    pub admission: AdmissionPolicy,
    /// This node's own ticket, presented to a peer that answers `NotAdmitted`.
    pub ticket: Option<Ticket>,
}

impl NetConfig {
    pub fn new(key: NodeKey, run: RunId, role: Role) -> Self {
        Self {
            key,
            run,
            role,
            listen: Vec::new(),
            bootstrap: Vec::new(),
            mdns: false,
            max_connections: 128,
            reserved_connections: None,
            max_per_ip: slots::MAX_PER_IP,
            relay_circuit_bytes: 64 << 20,
            serve_concurrency: 32,
            serve_per_peer: SERVE_PER_PEER,
            ask_per_peer: SERVE_PER_PEER,
            admission: AdmissionPolicy::Open,
            ticket: None,
        }
    }

    /// The connections kept for preferred peers (`reserved_connections`).
    pub fn reserved(&self) -> u32 {
        self.reserved_connections.unwrap_or(self.max_connections / 4).min(self.max_connections)
    }
}

/// Answers transfer requests (called on a blocking thread, within the
/// swarm's serving limits), told which peer asks.
pub trait ContentServer: Send + Sync + 'static {
    /// Where this node stands, as told to `from`.
    fn status(&self, from: PeerId) -> PeerStatus;
    /// Answer any other request (`Table`, `Chunk`, the round's) from `from`.
    fn serve(&self, from: PeerId, request: &XferRequest) -> XferResponse;
}

/// Why a network operation failed.
#[derive(Debug, Clone, Error)]
pub enum NetError {
    #[error("network setup failed: {0}")]
    Setup(String),
    #[error("the network task has stopped")]
    Stopped,
    #[error("publish failed: {0}")]
    Publish(String),
    #[error("request to {peer} failed: {why}")]
    Request { peer: PeerId, why: String },
    #[error("dial failed: {0}")]
    Dial(String),
}

/// Something the network reports.
#[derive(Debug, Clone)]
pub enum NetEvent {
    /// Listening on this address (ends with `/p2p/<local id>`).
    Listening(Multiaddr),
    /// A gossip message that passed validation (decode, run, signature).
    Gossip { from: PeerId, message: Box<GossipMessage> },
    /// A peer of this run identified itself.
    PeerJoined { peer: PeerId, role: Role },
    /// The last connection to a known peer closed.
    PeerLeft { peer: PeerId },
    /// A peer's traffic was refused.
    Rejected { peer: PeerId, reason: NetRejection },
    /// A peer passed the ban threshold and was disconnected.
    Banned { peer: PeerId },
}

/// Counters kept by the network (application bytes, not transport framing).
#[derive(Debug, Default)]
pub struct NetStats {
    pub gossip_bytes_out: AtomicU64,
    pub gossip_bytes_in: AtomicU64,
    pub served_bytes: AtomicU64,
    pub fetched_bytes: AtomicU64,
    /// The part of `served_bytes` / `fetched_bytes` that was catch-up
    /// content: state parameters and ledgers a joining or lagging node
    /// fetched (round traffic is the rest).
    pub catch_up_bytes_out: AtomicU64,
    pub catch_up_bytes_in: AtomicU64,
    /// The part that was dataset content (shards, manifests, tokenizers):
    /// training data a node fetches as it needs it.
    pub dataset_bytes_out: AtomicU64,
    pub dataset_bytes_in: AtomicU64,
    pub requests_served: AtomicU64,
    pub rejections: AtomicU64,
    pub bans: AtomicU64,
    pub connected: AtomicU64,
    /// Events the swarm dropped because the node was not keeping up
    /// (gossip and refusal notices only; membership events are never dropped).
    pub dropped_events: AtomicU64,
}

impl NetStats {
    pub fn get(v: &AtomicU64) -> u64 {
        v.load(Ordering::Relaxed)
    }
    pub(crate) fn add(v: &AtomicU64, n: u64) {
        v.fetch_add(n, Ordering::Relaxed);
    }
    /// Bytes this node sent: gossip published plus content served.
    pub fn bytes_sent(&self) -> u64 {
        Self::get(&self.gossip_bytes_out) + Self::get(&self.served_bytes)
    }
    pub fn bytes_received(&self) -> u64 {
        Self::get(&self.gossip_bytes_in) + Self::get(&self.fetched_bytes)
    }
}

/// A connected peer as the swarm knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerInfo {
    pub peer: PeerId,
    /// Its role, once identify told us (and only for peers of this run).
    pub role: Option<Role>,
    /// Every open connection to it goes through a relay circuit.
    pub relayed: bool,
}

pub(crate) enum Command {
    Publish { kind: TopicKind, bytes: Vec<u8>, reply: oneshot::Sender<Result<(), NetError>> },
    Request { peer: PeerId, request: XferRequest, reply: oneshot::Sender<Result<XferResponse, NetError>> },
    Penalize { peer: PeerId, reason: NetRejection },
    Dial { addr: Multiaddr, reply: oneshot::Sender<Result<(), NetError>> },
    Peers { reply: oneshot::Sender<Vec<PeerInfo>> },
    ListenAddrs { reply: oneshot::Sender<Vec<Multiaddr>> },
    Rejections { reply: oneshot::Sender<Vec<(String, u64)>> },
    Banned { reply: oneshot::Sender<Vec<PeerId>> },
}

/// The cloneable handle to the swarm task.
#[derive(Clone)]
pub struct NetHandle {
    tx: mpsc::Sender<Command>,
    pub local: PeerId,
    pub stats: Arc<NetStats>,
    /// Who this node admits (shared with the swarm task).
    pub gate: Arc<gate::Gate>,
    /// The requests in flight to each peer.
    asks: Arc<asking::AskSlots>,
}

impl NetHandle {
    async fn ask<T>(&self, make: impl FnOnce(oneshot::Sender<T>) -> Command) -> Result<T, NetError> {
        let (tx, rx) = oneshot::channel();
        self.tx.send(make(tx)).await.map_err(|_| NetError::Stopped)?;
        rx.await.map_err(|_| NetError::Stopped)
    }

    /// Gossip `bytes` (an encoded, signed message) on `kind`'s topic.
    pub async fn publish(&self, kind: TopicKind, bytes: Vec<u8>) -> Result<(), NetError> {
        self.ask(|reply| Command::Publish { kind, bytes, reply }).await?
    }

    /// `publish`, tried up to `attempts` times 300 ms apart while it fails
    /// (no peer in the topic's mesh yet, as just after joining).
    pub async fn publish_retrying(&self, kind: TopicKind, bytes: Vec<u8>, attempts: u32) {
        for i in 0..attempts {
            match self.publish(kind, bytes.clone()).await {
                Ok(()) => return,
                Err(e) if i + 1 == attempts => tracing::debug!("publishing {kind:?}: {e}"),
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(300)).await,
            }
        }
    }

    /// Send a transfer request and wait for the answer, once fewer than
    /// `NetConfig::ask_per_peer` requests to `peer` are in flight (`asking`).
    pub async fn request(&self, peer: PeerId, request: XferRequest) -> Result<XferResponse, NetError> {
        let slot = self.asks.take(peer).await;
        self.send_request(peer, request, slot).await
    }

    /// `request` with a deadline of `limit`, counted from when the request
    /// goes out: time spent waiting for a slot to `peer` is this node's
    /// own queue, never the peer's slowness.
    pub async fn request_within(
        &self,
        peer: PeerId,
        request: XferRequest,
        limit: std::time::Duration,
    ) -> Result<XferResponse, NetError> {
        let slot = self.asks.take(peer).await;
        match tokio::time::timeout(limit, self.send_request(peer, request, slot)).await {
            Ok(answer) => answer,
            Err(_) => Err(NetError::Request { peer, why: format!("no answer within {} s", limit.as_secs()) }),
        }
    }

    async fn send_request(
        &self,
        peer: PeerId,
        request: XferRequest,
        slot: asking::AskSlot,
    ) -> Result<XferResponse, NetError> {
        let (reply, answer) = oneshot::channel();
        self.tx.send(Command::Request { peer, request, reply }).await.map_err(|_| NetError::Stopped)?;
        // The slot is held until the swarm answers, even where the caller
        // stops waiting first: the peer still serves the request.
        let (tx, rx) = oneshot::channel();
        tokio::spawn(async move {
            let answer = answer.await;
            drop(slot);
            let _ = tx.send(answer);
        });
        rx.await.map_err(|_| NetError::Stopped)?.map_err(|_| NetError::Stopped)?
    }

    /// Charge `peer` for `reason`; past the threshold it is disconnected and
    /// banned. Never waits: when the command queue is full the charge is
    /// queued on a task, so the caller's loop cannot stall on the swarm.
    pub fn penalize(&self, peer: PeerId, reason: NetRejection) {
        self.send_later(Command::Penalize { peer, reason });
    }

    /// Peers banned now.
    pub async fn banned(&self) -> Vec<PeerId> {
        self.ask(|reply| Command::Banned { reply }).await.unwrap_or_default()
    }

    fn send_later(&self, cmd: Command) {
        if let Err(mpsc::error::TrySendError::Full(cmd)) = self.tx.try_send(cmd) {
            let tx = self.tx.clone();
            tokio::spawn(async move {
                let _ = tx.send(cmd).await;
            });
        }
    }

    pub async fn dial(&self, addr: Multiaddr) -> Result<(), NetError> {
        self.ask(|reply| Command::Dial { addr, reply }).await?
    }

    /// Connected peers.
    pub async fn peers(&self) -> Vec<PeerInfo> {
        self.ask(|reply| Command::Peers { reply }).await.unwrap_or_default()
    }

    /// Addresses the swarm listens on (with `/p2p/<id>`).
    pub async fn listen_addrs(&self) -> Vec<Multiaddr> {
        self.ask(|reply| Command::ListenAddrs { reply }).await.unwrap_or_default()
    }

    /// Refusals counted by reason.
    pub async fn rejections(&self) -> Vec<(String, u64)> {
        self.ask(|reply| Command::Rejections { reply }).await.unwrap_or_default()
    }
}

/// Start the network on the current tokio runtime. The swarm task stops
/// when every handle is dropped.
pub fn start(
    cfg: NetConfig,
    server: Arc<dyn ContentServer>,
) -> Result<(NetHandle, mpsc::Receiver<NetEvent>), NetError> {
    let swarm = behaviour::build_swarm(&cfg)?;
    let local = *swarm.local_peer_id();
    let (cmd_tx, cmd_rx) = mpsc::channel(256);
    let (ev_tx, ev_rx) = mpsc::channel(1024);
    let stats = Arc::new(NetStats::default());
    let gate =
        Arc::new(gate::Gate::new(cfg.run, cfg.admission.clone(), cfg.bootstrap.iter().filter_map(peer_of)));
    let asks = Arc::new(asking::AskSlots::new(cfg.ask_per_peer));
    let task = swarm::SwarmTask::new(swarm, cfg, server, ev_tx, stats.clone(), gate.clone())?;
    tokio::spawn(task.run(cmd_rx));
    Ok((NetHandle { tx: cmd_tx, local, stats, gate, asks }, ev_rx))
}
