//! The swarm task: the one owner of the libp2p `Swarm`. It carries out
//! commands from handles, validates gossip before gossipsub may forward it
//! (in a ticket run, only gossip whose signer is admitted: `gate`),
//! answers transfer requests (Status included) through the `ContentServer`
//! on blocking threads within its serving slots (`serving`) — in a ticket
//! run to admitted peers only, presenting its own ticket where it is told
//! `NotAdmitted` — keeps peers discovered (Kademlia, mDNS, identify),
//! scores and bans misbehaving peers, and closes strangers' connections
//! past their share of the slots (`slots`).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use libp2p::gossipsub::{self, MessageAcceptance, TopicHash};
use libp2p::multiaddr::Protocol;
use libp2p::request_response::{self, InboundRequestId, OutboundRequestId, ResponseChannel};
use libp2p::swarm::dial_opts::{DialOpts, PeerCondition};
use libp2p::swarm::{ConnectionId, SwarmEvent};
use libp2p::{identify, kad, mdns, ping, Multiaddr, PeerId, Swarm};
use tokio::sync::{mpsc, oneshot};

use super::behaviour::{parse_agent, MurmurBehaviour, MurmurBehaviourEvent};
use super::gate::Gate;
use super::gossip::{self, TopicKind};
use super::peers::{peer_id_of, GossipAdmission, NetRejection, PeerLedger};
use super::serving::{Refused, ServeSlots};
use super::slots::ConnectionSlots;
use super::subscriptions::{ConnectedPeer, SubscriptionHealer};
use super::xfer::{FrameError, XferRequest, XferResponse};
use super::{Command, ContentServer, NetConfig, NetError, NetEvent, NetStats, PeerInfo, Role};
use crate::store::tree::BlobKind;

/// How often the task refreshes the DHT and dials known peers.
const MAINTENANCE: Duration = Duration::from_secs(3);
/// Membership events held while the node's event queue is full (beyond it
/// the oldest are dropped and counted).
const MAX_BACKLOG: usize = 4096;

type Reply = oneshot::Sender<Result<XferResponse, NetError>>;

/// A request in flight: who waits for the answer, which content it
/// fetches (`Content::of`), and what a `NotAdmitted` answer leads to.
struct Pending {
    reply: Reply,
    content: Content,
    then: OnRefusal,
}

/// What follows a `NotAdmitted` answer to a request.
enum OnRefusal {
    /// The answer goes to the asker as it is.
    Answer,
    /// Present this node's ticket, then ask `.0` once more.
    Present(XferRequest),
    /// This is the ticket's presentation: when it admits, ask `.0` again.
    AskAgain(XferRequest),
}

/// A response ready to go out.
struct Served {
    request_id: InboundRequestId,
    peer: PeerId,
    channel: ResponseChannel<XferResponse>,
    response: XferResponse,
    /// Which content it serves (`Content::of`).
    content: Content,
}

/// What a request's chunks are, for the counters that keep them apart
/// from the rounds' own traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Content {
    /// Deltas, shards, aggregates, audits: the rounds' exchange.
    Round,
    /// A state's parameters or ledger: what a joining or lagging node
    /// fetches once (`NetStats::catch_up_bytes_*`).
    CatchUp,
    /// A dataset's shards, manifest or tokenizer: training data
    /// (`NetStats::dataset_bytes_*`).
    Dataset,
}

impl Content {
    fn of(request: &XferRequest) -> Self {
        match request {
            XferRequest::Chunk { kind: BlobKind::State | BlobKind::Ledger, .. } => Content::CatchUp,
            XferRequest::Chunk {
                kind: BlobKind::DatasetShard | BlobKind::DatasetManifest | BlobKind::Tokenizer,
                ..
            } => Content::Dataset,
            _ => Content::Round,
        }
    }

    /// The counters of this content's bytes, out and in (none for a round's).
    fn counters(self, stats: &NetStats) -> Option<(&AtomicU64, &AtomicU64)> {
        match self {
            Content::Round => None,
            Content::CatchUp => Some((&stats.catch_up_bytes_out, &stats.catch_up_bytes_in)),
            Content::Dataset => Some((&stats.dataset_bytes_out, &stats.dataset_bytes_in)),
        }
    }
}

pub(crate) struct SwarmTask {
    swarm: Swarm<MurmurBehaviour>,
    cfg: NetConfig,
    server: Arc<dyn ContentServer>,
    events: mpsc::Sender<NetEvent>,
    stats: Arc<NetStats>,
    topics: HashMap<TopicHash, TopicKind>,
    /// Requests in flight.
    pending: HashMap<OutboundRequestId, Pending>,
    /// Who this node admits (shared with its handles).
    gate: Arc<Gate>,
    roles: HashMap<PeerId, Role>,
    listen: Vec<Multiaddr>,
    ledger: PeerLedger,
    slots: ServeSlots<InboundRequestId>,
    served_tx: mpsc::Sender<Served>,
    served_rx: mpsc::Receiver<Served>,
    bootstrap_peers: HashSet<PeerId>,
    /// The relay-circuit listener of a private node, while it is open.
    circuit: Option<libp2p::core::transport::ListenerId>,
    /// Open connections per peer.
    links: HashMap<PeerId, HashMap<ConnectionId, Link>>,
    /// Run peers reconnected because gossip lost their topics.
    healer: SubscriptionHealer,
    /// Peers being disconnected to be dialled again once closed.
    redialling: HashSet<PeerId>,
    /// Which connections strangers hold, and the limits on them (`slots`).
    connections: ConnectionSlots,
    /// Events that must not be lost, waiting for room in the node's queue.
    backlog: std::collections::VecDeque<NetEvent>,
}

/// One open connection.
#[derive(Clone, Copy)]
struct Link {
    /// Through a relay circuit, or direct.
    relayed: bool,
    /// When it opened.
    opened: Instant,
    /// When it last answered a ping (or opened); one silent for
    /// `PING_TIMEOUT_SECS` is closed (`close_silent`). None where the peer
    /// does not speak ping and cannot show it is alive this way.
    last_pong: Option<Instant>,
}

/// The peer id an address ends with (`…/p2p/<id>`), if any.
pub fn peer_of(addr: &Multiaddr) -> Option<PeerId> {
    addr.iter().find_map(|p| match p {
        Protocol::P2p(id) => Some(id),
        _ => None,
    })
}

impl SwarmTask {
    pub(crate) fn new(
        mut swarm: Swarm<MurmurBehaviour>,
        cfg: NetConfig,
        server: Arc<dyn ContentServer>,
        events: mpsc::Sender<NetEvent>,
        stats: Arc<NetStats>,
        gate: Arc<Gate>,
    ) -> Result<Self, NetError> {
        let mut topics = HashMap::new();
        for kind in TopicKind::ALL {
            let t = kind.topic(&cfg.run);
            swarm
                .behaviour_mut()
                .gossip
                .subscribe(&t)
                .map_err(|e| NetError::Setup(format!("subscribe: {e}")))?;
            topics.insert(t.hash(), kind);
        }
        for addr in &cfg.listen {
            swarm.listen_on(addr.clone()).map_err(|e| NetError::Setup(format!("listen on {addr}: {e}")))?;
        }
        let mut bootstrap_peers = HashSet::new();
        for addr in &cfg.bootstrap {
            if let Some(peer) = peer_of(addr) {
                swarm.behaviour_mut().kad.add_address(&peer, addr.clone());
                bootstrap_peers.insert(peer);
            }
            if let Err(e) = swarm.dial(addr.clone()) {
                tracing::warn!("dialling bootstrap {addr}: {e}");
            }
        }
        let (served_tx, served_rx) = mpsc::channel(256);
        let slots = ServeSlots::new(cfg.serve_concurrency, cfg.serve_per_peer);
        let connections = ConnectionSlots::new(cfg.max_connections, cfg.reserved(), cfg.max_per_ip);
        Ok(Self {
            swarm,
            cfg,
            server,
            events,
            stats,
            topics,
            pending: HashMap::new(),
            gate,
            roles: HashMap::new(),
            listen: Vec::new(),
            ledger: PeerLedger::default(),
            slots,
            served_tx,
            served_rx,
            bootstrap_peers,
            circuit: None,
            links: HashMap::new(),
            healer: SubscriptionHealer::default(),
            redialling: HashSet::new(),
            connections,
            backlog: Default::default(),
        })
    }

    pub(crate) async fn run(mut self, mut commands: mpsc::Receiver<Command>) {
        let mut tick = tokio::time::interval(MAINTENANCE);
        // A second handle on the event queue, so waiting for room in it (for
        // the backlog only) does not hold `self`.
        let events = self.events.clone();
        loop {
            tokio::select! {
                ev = self.swarm.select_next_some() => self.on_swarm_event(ev).await,
                cmd = commands.recv() => match cmd {
                    Some(cmd) => self.on_command(cmd).await,
                    None => break,
                },
                permit = events.reserve(), if !self.backlog.is_empty() => {
                    if let (Ok(permit), Some(ev)) = (permit, self.backlog.pop_front()) {
                        permit.send(ev);
                    }
                }
                Some(Served { request_id, peer, channel, response, content }) = self.served_rx.recv() => {
                    if !self.slots.answered(request_id) {
                        continue;
                    }
                    // A presented ticket that admits nobody.
                    if response == XferResponse::NotAdmitted {
                        self.charge(peer, NetRejection::NotAdmitted).await;
                    }
                    if let XferResponse::Chunk(b) = &response {
                        NetStats::add(&self.stats.served_bytes, b.len() as u64);
                        if let Some((out, _)) = content.counters(&self.stats) {
                            NetStats::add(out, b.len() as u64);
                        }
                    }
                    if self.swarm.behaviour_mut().xfer.send_response(channel, response).is_err() {
                        self.slots.release(request_id);
                    }
                }
                _ = tick.tick() => self.maintain(),
            }
        }
        tracing::debug!("network task stopped");
    }

    /// Hand an event to the node without ever waiting for it: the swarm
    /// must keep serving commands (a node awaiting command space while the
    /// swarm awaited event space would deadlock both). Gossip and refusal
    /// notices are dropped and counted when the queue is full; membership
    /// events wait in a bounded backlog, in order.
    async fn emit(&mut self, ev: NetEvent) {
        let droppable = matches!(ev, NetEvent::Gossip { .. } | NetEvent::Rejected { .. });
        if !self.backlog.is_empty() && !droppable {
            return self.hold(ev);
        }
        match self.events.try_send(ev) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(ev)) if !droppable => self.hold(ev),
            Err(mpsc::error::TrySendError::Full(_)) => NetStats::add(&self.stats.dropped_events, 1),
            Err(mpsc::error::TrySendError::Closed(_)) => {}
        }
    }

    fn hold(&mut self, ev: NetEvent) {
        if self.backlog.len() >= MAX_BACKLOG {
            self.backlog.pop_front();
            NetStats::add(&self.stats.dropped_events, 1);
        }
        self.backlog.push_back(ev);
    }

    async fn charge(&mut self, peer: PeerId, reason: NetRejection) {
        NetStats::add(&self.stats.rejections, 1);
        tracing::info!(%peer, reason = %reason.name(), "refused peer traffic");
        self.emit(NetEvent::Rejected { peer, reason }).await;
        if self.ledger.charge(peer, reason, Instant::now()) {
            tracing::warn!(%peer, penalty = self.ledger.penalty(&peer), "banning peer");
            NetStats::add(&self.stats.bans, 1);
            self.swarm.behaviour_mut().blocked.block_peer(peer);
            self.swarm.behaviour_mut().gossip.blacklist_peer(&peer);
            self.swarm.behaviour_mut().kad.remove_peer(&peer);
            let _ = self.swarm.disconnect_peer_id(peer);
            self.emit(NetEvent::Banned { peer }).await;
        }
    }

    /// Close every connection that has not answered a ping for
    /// `PING_TIMEOUT_SECS` (a partition, a dead route), so its peer counts
    /// as gone and is dialled afresh, instead of the link waiting out TCP's
    /// backed-off retransmissions (tens of seconds after the route
    /// returns) or minutes for TCP to give up. The silence is measured here
    /// rather than taken from ping's failures: libp2p's ping handler keeps
    /// a connection's first failure to itself and reports only the next
    /// one (a ping interval and another timeout on, over 30 s after the
    /// link went; and as `Failure::Other` when opening the new ping stream
    /// is what timed out), so a partition of half a minute was never seen
    /// and its links stalled on for many seconds after it healed.
    fn close_silent(&mut self, now: Instant) {
        let limit = Duration::from_secs(super::behaviour::PING_TIMEOUT_SECS);
        let silent: Vec<(PeerId, ConnectionId)> = self
            .links
            .iter()
            .flat_map(|(peer, links)| links.iter().map(move |(c, link)| (*peer, *c, *link)))
            .filter(|(_, _, link)| link.last_pong.is_some_and(|at| now.saturating_duration_since(at) > limit))
            .map(|(peer, c, _)| (peer, c))
            .collect();
        for (peer, connection) in silent {
            tracing::info!(%peer, "no ping answered for {limit:?}; closing the connection");
            // Once: the close takes effect at ConnectionClosed.
            if let Some(link) = self.link(peer, connection) {
                link.last_pong = None;
            }
            self.swarm.close_connection(connection);
        }
    }

    /// Close the connections of run peers whose topics gossipsub never
    /// learnt, to dial them afresh (`subscriptions`).
    fn heal_subscriptions(&mut self, now: Instant) {
        let links = &self.links;
        self.redialling.retain(|p| links.contains_key(p));
        let with_topics: HashSet<PeerId> = self
            .swarm
            .behaviour()
            .gossip
            .all_peers()
            .filter(|(_, t)| !t.is_empty())
            .map(|(p, _)| *p)
            .collect();
        let peers: Vec<ConnectedPeer> = self
            .links
            .iter()
            .filter_map(|(peer, links)| {
                Some(ConnectedPeer {
                    peer: *peer,
                    of_run: self.roles.contains_key(peer),
                    connected_since: links.values().map(|l| l.opened).min()?,
                    has_topics: with_topics.contains(peer),
                })
            })
            .collect();
        for peer in self.healer.due(&peers, now) {
            tracing::info!(%peer, "gossip knows none of the peer's topics; connecting to it afresh");
            self.redialling.insert(peer);
            let _ = self.swarm.disconnect_peer_id(peer);
        }
    }

    fn link(&mut self, peer: PeerId, connection: ConnectionId) -> Option<&mut Link> {
        self.links.get_mut(&peer)?.get_mut(&connection)
    }

    fn maintain(&mut self) {
        let now = Instant::now();
        self.close_silent(now);
        self.heal_subscriptions(now);
        self.ledger.decay(now);
        for peer in self.ledger.expired(now) {
            self.swarm.behaviour_mut().blocked.unblock_peer(peer);
            self.swarm.behaviour_mut().gossip.remove_blacklisted_peer(&peer);
        }
        let connected: HashSet<PeerId> = self.swarm.connected_peers().copied().collect();
        if connected.is_empty() {
            for addr in self.cfg.bootstrap.clone() {
                let _ = self.swarm.dial(addr);
            }
        }
        if self.cfg.role == Role::Private && self.circuit.is_none() {
            if let Some(relay) = self.bootstrap_peers.iter().find(|p| connected.contains(p)).copied() {
                self.request_circuit(relay);
            }
        }
        let _ = self.swarm.behaviour_mut().kad.bootstrap();
        let me = *self.swarm.local_peer_id();
        let mut known = Vec::new();
        for bucket in self.swarm.behaviour_mut().kad.kbuckets() {
            for entry in bucket.iter() {
                known.push(*entry.node.key.preimage());
            }
        }
        let room = (self.cfg.max_connections as usize).saturating_sub(connected.len());
        // A stranger dialled while strangers hold their share would be closed at once.
        let gate = &self.gate;
        let strangers_full = self.connections.strangers_full(|p| gate.preferred(p));
        let wanted = |p: &PeerId| !strangers_full || gate.preferred(p);
        for peer in known.into_iter().filter(|p| *p != me && !connected.contains(p) && wanted(p)).take(room) {
            if self.ledger.is_banned(&peer, now) {
                continue;
            }
            let opts = DialOpts::peer_id(peer).condition(PeerCondition::DisconnectedAndNotDialing).build();
            let _ = self.swarm.dial(opts);
        }
    }

    async fn on_command(&mut self, cmd: Command) {
        match cmd {
            Command::Publish { kind, bytes, reply } => {
                let n = bytes.len() as u64;
                let topic = kind.topic(&self.cfg.run);
                let r = match self.swarm.behaviour_mut().gossip.publish(topic, bytes) {
                    Ok(_) => {
                        NetStats::add(&self.stats.gossip_bytes_out, n);
                        Ok(())
                    }
                    Err(e) => Err(NetError::Publish(e.to_string())),
                };
                let _ = reply.send(r);
            }
            Command::Request { peer, request, reply } => {
                // With a ticket to present, a refusal is answered by presenting it.
                let then = match self.cfg.ticket {
                    Some(_) => OnRefusal::Present(request.clone()),
                    None => OnRefusal::Answer,
                };
                self.send_request(peer, request, reply, then);
            }
            Command::Penalize { peer, reason } => self.charge(peer, reason).await,
            Command::Dial { addr, reply } => {
                let _ = reply.send(self.swarm.dial(addr).map_err(|e| NetError::Dial(e.to_string())));
            }
            Command::Peers { reply } => {
                let peers = self
                    .swarm
                    .connected_peers()
                    .map(|p| PeerInfo {
                        peer: *p,
                        role: self.roles.get(p).copied(),
                        relayed: self
                            .links
                            .get(p)
                            .is_some_and(|c| !c.is_empty() && c.values().all(|l| l.relayed)),
                    })
                    .collect();
                let _ = reply.send(peers);
            }
            Command::ListenAddrs { reply } => {
                let _ = reply.send(self.listen.clone());
            }
            Command::Rejections { reply } => {
                let _ = reply.send(self.ledger.counts());
            }
            Command::Banned { reply } => {
                let _ = reply.send(self.ledger.banned(Instant::now()));
            }
        }
    }

    async fn on_swarm_event(&mut self, ev: SwarmEvent<MurmurBehaviourEvent>) {
        match ev {
            SwarmEvent::NewListenAddr { address, .. } => {
                let me = *self.swarm.local_peer_id();
                // A bootstrap server is reachable where it listens; saying so
                // lets its relay server accept reservations at once.
                if self.cfg.role == Role::Bootstrap {
                    self.swarm.add_external_address(address.clone());
                }
                let full =
                    if peer_of(&address).is_some() { address } else { address.with(Protocol::P2p(me)) };
                self.listen.push(full.clone());
                self.emit(NetEvent::Listening(full)).await;
            }
            SwarmEvent::ExpiredListenAddr { address, .. } => {
                self.listen.retain(|a| !a.to_string().starts_with(&address.to_string()));
            }
            SwarmEvent::ConnectionEstablished {
                peer_id, connection_id, num_established, endpoint, ..
            } => {
                let relayed = endpoint.get_remote_address().iter().any(|p| p == Protocol::P2pCircuit);
                let link = Link { relayed, opened: Instant::now(), last_pong: Some(Instant::now()) };
                self.links.entry(peer_id).or_default().insert(connection_id, link);
                if num_established.get() == 1 {
                    NetStats::add(&self.stats.connected, 1);
                }
                if self.ledger.is_banned(&peer_id, Instant::now()) {
                    let _ = self.swarm.disconnect_peer_id(peer_id);
                }
                if self.cfg.role == Role::Private
                    && self.circuit.is_none()
                    && self.bootstrap_peers.contains(&peer_id)
                {
                    self.request_circuit(peer_id);
                }
                let gate = &self.gate;
                if let Err(full) =
                    self.connections.opened(peer_id, connection_id, &endpoint, |p| gate.preferred(p))
                {
                    tracing::debug!(%peer_id, reason = full.name(), "no connection slot for a stranger; closing");
                    self.swarm.close_connection(connection_id);
                }
            }
            SwarmEvent::ConnectionClosed { peer_id, connection_id, num_established, .. } => {
                self.connections.closed(connection_id);
                if let Some(c) = self.links.get_mut(&peer_id) {
                    c.remove(&connection_id);
                }
                if num_established > 0 {
                    return;
                }
                self.links.remove(&peer_id);
                self.stats.connected.fetch_sub(1, Ordering::Relaxed);
                if self.redialling.remove(&peer_id) {
                    let opts = DialOpts::peer_id(peer_id)
                        .condition(PeerCondition::DisconnectedAndNotDialing)
                        .build();
                    let _ = self.swarm.dial(opts);
                }
                if self.roles.remove(&peer_id).is_some() {
                    self.emit(NetEvent::PeerLeft { peer: peer_id }).await;
                }
                // A bootstrap server learned from its own word is
                // forgotten with its connection; configured ones stay.
                let configured = self.cfg.bootstrap.iter().any(|a| peer_of(a) == Some(peer_id));
                if !configured {
                    self.bootstrap_peers.remove(&peer_id);
                }
            }
            SwarmEvent::ListenerClosed { listener_id, reason, .. } if self.circuit == Some(listener_id) => {
                tracing::info!("relay circuit closed ({reason:?}); retrying");
                self.circuit = None;
            }
            SwarmEvent::Behaviour(b) => self.on_behaviour(b).await,
            _ => {}
        }
    }

    /// A private node listens through a relay circuit at a bootstrap server.
    fn request_circuit(&mut self, relay: PeerId) {
        let Some(addr) = self.cfg.bootstrap.iter().find(|a| peer_of(a) == Some(relay)).cloned() else {
            return;
        };
        match self.swarm.listen_on(addr.with(Protocol::P2pCircuit)) {
            Ok(id) => self.circuit = Some(id),
            Err(e) => tracing::warn!("relay circuit via {relay}: {e}"),
        }
    }

    async fn on_behaviour(&mut self, ev: MurmurBehaviourEvent) {
        match ev {
            MurmurBehaviourEvent::Gossip(gossipsub::Event::Message {
                propagation_source,
                message_id,
                message,
                ..
            }) => {
                NetStats::add(&self.stats.gossip_bytes_in, message.data.len() as u64);
                // Invalid bytes are the relay's fault (honest relays
                // validate before they forward); a valid message's rate is
                // its signer's (`rate`): a flood is charged to the signer,
                // and a relay past its wider budget is only dropped. In a
                // ticket run, a message whose signer is not admitted is
                // dropped uncharged (its relay may not know the run yet).
                let verdict = match self.topics.get(&message.topic) {
                    Some(kind) => gossip::validate(*kind, &self.cfg.run, &message.data),
                    None => Err(NetRejection::Malformed),
                };
                let (acceptance, outcome) = match verdict {
                    Err(reason) => (MessageAcceptance::Reject, Err((propagation_source, reason))),
                    Ok(msg) if !self.admitted(&msg) => (MessageAcceptance::Ignore, Ok(None)),
                    Ok(msg) => {
                        let origin = msg.origin().and_then(|k| peer_id_of(&k));
                        match self.ledger.admit_gossip(propagation_source, origin, Instant::now()) {
                            GossipAdmission::Accept => (MessageAcceptance::Accept, Ok(Some(msg))),
                            GossipAdmission::OriginFlood(signer) => {
                                (MessageAcceptance::Ignore, Err((signer, NetRejection::Flood)))
                            }
                            GossipAdmission::RelayFull => (MessageAcceptance::Ignore, Ok(None)),
                        }
                    }
                };
                let _ = self.swarm.behaviour_mut().gossip.report_message_validation_result(
                    &message_id,
                    &propagation_source,
                    acceptance,
                );
                match outcome {
                    Ok(Some(msg)) => {
                        self.emit(NetEvent::Gossip { from: propagation_source, message: Box::new(msg) }).await
                    }
                    Ok(None) => {}
                    Err((peer, reason)) => self.charge(peer, reason).await,
                }
            }
            MurmurBehaviourEvent::Identify(identify::Event::Received { peer_id, info, .. }) => {
                for addr in &info.listen_addrs {
                    self.swarm.behaviour_mut().kad.add_address(&peer_id, addr.clone());
                }
                let Some((role, run)) = parse_agent(&info.agent_version) else { return };
                if run != self.cfg.run.to_hex() {
                    return;
                }
                if self.roles.insert(peer_id, role).is_none() {
                    if role == Role::Bootstrap {
                        self.bootstrap_peers.insert(peer_id);
                    }
                    self.emit(NetEvent::PeerJoined { peer: peer_id, role }).await;
                }
            }
            MurmurBehaviourEvent::Mdns(mdns::Event::Discovered(list)) => {
                for (peer, addr) in list {
                    self.swarm.behaviour_mut().kad.add_address(&peer, addr.clone());
                    let _ = self.swarm.dial(DialOpts::peer_id(peer).addresses(vec![addr]).build());
                }
            }
            MurmurBehaviourEvent::Kad(kad::Event::RoutingUpdated { peer, .. })
                if !self.swarm.is_connected(&peer) && !self.ledger.is_banned(&peer, Instant::now()) =>
            {
                let opts =
                    DialOpts::peer_id(peer).condition(PeerCondition::DisconnectedAndNotDialing).build();
                let _ = self.swarm.dial(opts);
            }
            MurmurBehaviourEvent::Ping(ping::Event { peer, connection, result: Ok(_) }) => {
                if let Some(link) = self.link(peer, connection) {
                    link.last_pong = Some(Instant::now());
                }
            }
            MurmurBehaviourEvent::Ping(ping::Event {
                peer,
                connection,
                result: Err(ping::Failure::Unsupported),
            }) => {
                if let Some(link) = self.link(peer, connection) {
                    link.last_pong = None;
                }
            }
            MurmurBehaviourEvent::Xfer(ev) => self.on_xfer(ev).await,
            _ => {}
        }
    }

    async fn on_xfer(&mut self, ev: request_response::Event<XferRequest, XferResponse>) {
        match ev {
            request_response::Event::Message { peer, message, .. } => match message {
                request_response::Message::Request { request_id, request, channel } => {
                    self.serve(peer, request_id, request, channel).await
                }
                request_response::Message::Response { request_id, response } => {
                    let Some(pending) = self.pending.remove(&request_id) else { return };
                    self.on_response(peer, pending, response);
                }
            },
            request_response::Event::OutboundFailure { peer, request_id, error, .. } => {
                if let Some(p) = self.pending.remove(&request_id) {
                    let _ = p.reply.send(Err(NetError::Request { peer, why: error.to_string() }));
                }
            }
            request_response::Event::ResponseSent { request_id, .. } => self.slots.release(request_id),
            request_response::Event::InboundFailure { peer, request_id, error, .. } => {
                self.slots.failed(request_id);
                let request_response::InboundFailure::Io(e) = error else { return };
                match FrameError::of(&e) {
                    Some(FrameError::Oversized) => self.charge(peer, NetRejection::Oversized).await,
                    Some(FrameError::Malformed(_)) => self.charge(peer, NetRejection::Malformed).await,
                    None => tracing::debug!(%peer, "inbound transfer failed: {e}"),
                }
            }
        }
    }

    fn send_request(&mut self, peer: PeerId, request: XferRequest, reply: Reply, then: OnRefusal) {
        let content = Content::of(&request);
        let id = self.swarm.behaviour_mut().xfer.send_request(&peer, request);
        self.pending.insert(id, Pending { reply, content, then });
    }

    /// Hand `response` from `peer` to its asker, or, where `peer` refused
    /// this node as not admitted, present this node's ticket and ask again
    /// (once). A status answer's own ticket admits the peer that sent it.
    fn on_response(&mut self, peer: PeerId, pending: Pending, response: XferResponse) {
        let Pending { reply, content, then } = pending;
        match (&response, then) {
            (XferResponse::NotAdmitted, OnRefusal::Present(request)) => {
                if let Some(ticket) = self.cfg.ticket.clone() {
                    let present = XferRequest::Present(ticket);
                    return self.send_request(peer, present, reply, OnRefusal::AskAgain(request));
                }
            }
            (XferResponse::Admitted, OnRefusal::AskAgain(request)) => {
                return self.send_request(peer, request, reply, OnRefusal::Answer);
            }
            (XferResponse::Chunk(b), _) => {
                NetStats::add(&self.stats.fetched_bytes, b.len() as u64);
                if let Some((_, into)) = content.counters(&self.stats) {
                    NetStats::add(into, b.len() as u64);
                }
            }
            (XferResponse::Status(s), _) if self.gate.private() => {
                let ticket = s.ticket.as_deref().and_then(|b| murmur_protocol::Ticket::decode(b).ok());
                if let Some(t) = ticket.filter(|t| peer_id_of(&t.holder) == Some(peer)) {
                    self.gate.learn(&t);
                }
            }
            _ => {}
        }
        let _ = reply.send(Ok(response));
    }

    /// Whether gossip `msg` may be forwarded and handed on: in a ticket
    /// run, its signer is admitted; a ticket is checked against the run's
    /// operators and admits its holder.
    fn admitted(&self, msg: &gossip::GossipMessage) -> bool {
        match msg {
            gossip::GossipMessage::Ticket(t) => !self.gate.private() || self.gate.learn(t).is_some(),
            _ => self.gate.forwards(msg.origin().as_ref()),
        }
    }

    /// Answer `request` on the blocking pool if the node and `peer` have a
    /// serving slot left (`serving`), else `Busy` at once — charged as an
    /// overrun when `peer` already held its whole share. In a ticket run,
    /// a peer that is not admitted is answered `NotAdmitted` (and charged a
    /// little) until it presents a ticket that admits it.
    async fn serve(
        &mut self,
        peer: PeerId,
        request_id: InboundRequestId,
        request: XferRequest,
        channel: ResponseChannel<XferResponse>,
    ) {
        NetStats::add(&self.stats.requests_served, 1);
        if !matches!(request, XferRequest::Present(_)) && !self.gate.serves(&peer) {
            let _ = self.swarm.behaviour_mut().xfer.send_response(channel, XferResponse::NotAdmitted);
            return self.charge(peer, NetRejection::NotAdmitted).await;
        }
        if let Err(refused) = self.slots.admit(peer, request_id) {
            let (held, by_peer) = (self.slots.held(), self.slots.held_by(&peer));
            tracing::debug!(%peer, held, by_peer, "busy: refusing a transfer request");
            let _ = self.swarm.behaviour_mut().xfer.send_response(channel, XferResponse::Busy);
            if refused == Refused::PastShare {
                self.charge(peer, NetRejection::Overrun).await;
            }
            return;
        }
        let server = self.server.clone();
        let gate = self.gate.clone();
        let tx = self.served_tx.clone();
        let content = Content::of(&request);
        tokio::spawn(async move {
            let response = tokio::task::spawn_blocking(move || match request {
                XferRequest::Status => XferResponse::Status(server.status(peer)),
                XferRequest::Present(t) if gate.present(&peer, &t) => XferResponse::Admitted,
                XferRequest::Present(_) => XferResponse::NotAdmitted,
                _ => server.serve(peer, &request),
            })
            .await
            .unwrap_or(XferResponse::Busy);
            let _ = tx.send(Served { request_id, peer, channel, response, content }).await;
        });
    }
}
