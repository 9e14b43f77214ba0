//! The composed libp2p behaviour and the swarm it runs in: TCP and QUIC with
//! Noise and Yamux, identify, ping, Kademlia (`/murmur/kad/1.0.0`), gossipsub
//! (validated, ≤ 64 KiB), the transfer protocol, mDNS, relay (client always,
//! server on bootstrap servers), DCUtR, AutoNAT, connection limits and a
//! block list for banned peers. Under `MURMUR_NET_DELAY_MS` (emulated
//! links) the transport is TCP alone, each received byte delayed (`delay`).

use std::time::Duration;

use libp2p::swarm::behaviour::toggle::Toggle;
use libp2p::swarm::NetworkBehaviour;
use libp2p::{
    allow_block_list, autonat, connection_limits, dcutr, gossipsub, identify, identity, kad, mdns, noise,
    ping, relay, request_response, tcp, yamux, StreamProtocol, Swarm,
};

use super::gossip::MAX_GOSSIP_BYTES;
use super::xfer::{XferCodec, XFER_PROTOCOL};
use super::{NetConfig, NetError, Role};

/// Seconds between pings on every connection.
pub const PING_INTERVAL_SECS: u64 = 5;
/// Seconds without a pong after which a connection is taken for dead and
/// closed (net/swarm.rs).
pub const PING_TIMEOUT_SECS: u64 = 15;
/// Kademlia protocol id (murmur's own DHT, separate from the public IPFS one).
pub const KAD_PROTOCOL: StreamProtocol = StreamProtocol::new("/murmur/kad/1.0.0");
/// Identify protocol version string.
pub const IDENTIFY_PROTOCOL: &str = "/murmur/id/1.0.0";

#[derive(NetworkBehaviour)]
pub struct MurmurBehaviour {
    pub limits: connection_limits::Behaviour,
    pub blocked: allow_block_list::Behaviour<allow_block_list::BlockedPeers>,
    pub identify: identify::Behaviour,
    pub ping: ping::Behaviour,
    pub kad: kad::Behaviour<kad::store::MemoryStore>,
    pub gossip: gossipsub::Behaviour,
    pub xfer: request_response::Behaviour<XferCodec>,
    pub mdns: Toggle<mdns::tokio::Behaviour>,
    pub relay_client: relay::client::Behaviour,
    pub relay_server: Toggle<relay::Behaviour>,
    pub dcutr: dcutr::Behaviour,
    pub autonat: autonat::Behaviour,
}

/// The identify agent string: `murmur/<version> <role> run=<run id hex>`.
pub fn agent_version(cfg: &NetConfig) -> String {
    format!("murmur/{} {} run={}", env!("CARGO_PKG_VERSION"), cfg.role.name(), cfg.run.to_hex())
}

/// Parse an agent string into (role, run id hex).
pub fn parse_agent(agent: &str) -> Option<(Role, String)> {
    let mut parts = agent.split(' ');
    if !parts.next()?.starts_with("murmur/") {
        return None;
    }
    let role = Role::from_name(parts.next()?)?;
    let run = parts.next()?.strip_prefix("run=")?.to_string();
    Some((role, run))
}

/// Gossipsub's mesh degree D: each message reaches a node about D times.
pub const MESH_DEGREE: usize = 4;

fn gossip_config() -> Result<gossipsub::Config, NetError> {
    gossipsub::ConfigBuilder::default()
        .max_transmit_size(MAX_GOSSIP_BYTES)
        .validate_messages()
        // Every message murmur gossips is signed by its own author inside
        // its bytes (manifests, results, commits, proofs, tickets,
        // telemetry), and validation charges that signer: libp2p's envelope
        // (author, sequence number, a second signature: about 115 bytes a
        // copy) would only repeat it.
        .validation_mode(gossipsub::ValidationMode::Anonymous)
        .heartbeat_interval(Duration::from_millis(500))
        .mesh_n_low(2)
        .mesh_n(MESH_DEGREE)
        .mesh_n_high(8)
        .mesh_outbound_min(1)
        .message_id_fn(|m: &gossipsub::Message| {
            gossipsub::MessageId::from(blake3::hash(&m.data).as_bytes().to_vec())
        })
        .duplicate_cache_time(Duration::from_secs(600))
        .build()
        .map_err(|e| NetError::Setup(format!("gossipsub config: {e}")))
}

/// What the behaviour is built from besides the keys.
#[derive(Clone, Copy)]
struct BehaviourParams {
    role: Role,
    mdns_on: bool,
    max_conn: u32,
    relay_bytes: u64,
}

type BuildError = Box<dyn std::error::Error + Send + Sync>;

/// Build the swarm for `cfg`: TCP (+ Noise, Yamux), QUIC and DNS; or, when
/// the process runs with `MURMUR_NET_DELAY_MS` (emulated links, see
/// `delay`), TCP alone with every received byte delayed.
pub fn build_swarm(cfg: &NetConfig) -> Result<Swarm<MurmurBehaviour>, NetError> {
    let mut seed = cfg.key.seed();
    let secret = identity::ed25519::SecretKey::try_from_bytes(&mut seed)
        .map_err(|e| NetError::Setup(format!("identity: {e}")))?;
    let keypair = identity::Keypair::from(identity::ed25519::Keypair::from(secret));
    let agent = agent_version(cfg);
    let params = BehaviourParams {
        role: cfg.role,
        mdns_on: cfg.mdns,
        max_conn: cfg.max_connections,
        relay_bytes: cfg.relay_circuit_bytes,
    };
    let setup = |e: &dyn std::fmt::Display| NetError::Setup(e.to_string());
    let delay = super::delay::delay_from_env().map_err(NetError::Setup)?;
    let idle = |c: libp2p::swarm::Config| c.with_idle_connection_timeout(Duration::from_secs(120));
    // The phases after the transports are the same for both; their types
    // differ, so a macro writes them once.
    macro_rules! finish {
        ($builder:expr) => {
            $builder
                .with_dns()
                .map_err(|e| setup(&e))?
                .with_relay_client(noise::Config::new, yamux::Config::default)
                .map_err(|e| setup(&e))?
                .with_behaviour(|key, relay_client| behaviour(key, relay_client, &agent, params))
                .map_err(|e| setup(&e))?
                .with_swarm_config(idle)
                .build()
        };
    }
    let swarm = match delay {
        None => finish!(libp2p::SwarmBuilder::with_existing_identity(keypair)
            .with_tokio()
            .with_tcp(tcp::Config::default().nodelay(true), noise::Config::new, yamux::Config::default)
            .map_err(|e| setup(&e))?
            .with_quic()),
        Some(delay) => finish!(libp2p::SwarmBuilder::with_existing_identity(keypair)
            .with_tokio()
            .with_other_transport(|key| -> Result<_, BuildError> {
                use libp2p::core::upgrade::Version;
                use libp2p::core::Transport;
                Ok(tcp::tokio::Transport::new(tcp::Config::default().nodelay(true))
                    .map(move |stream, _| super::delay::Delayed::new(stream, delay))
                    .upgrade(Version::V1Lazy)
                    .authenticate(noise::Config::new(key)?)
                    .multiplex(yamux::Config::default()))
            })
            .map_err(|e| setup(&e))?),
    };
    Ok(swarm)
}

/// The composed behaviour for this node's role.
fn behaviour(
    key: &identity::Keypair,
    relay_client: relay::client::Behaviour,
    agent: &str,
    p: BehaviourParams,
) -> Result<MurmurBehaviour, BuildError> {
    let BehaviourParams { role, mdns_on, max_conn, relay_bytes } = p;
    let agent = agent.to_string();
    let me = key.public().to_peer_id();
    let limits = connection_limits::ConnectionLimits::default()
        .with_max_established(Some(max_conn))
        .with_max_established_per_peer(Some(4))
        .with_max_pending_incoming(Some(64))
        .with_max_pending_outgoing(Some(64));
    let mut kad_cfg = kad::Config::new(KAD_PROTOCOL);
    kad_cfg.set_query_timeout(Duration::from_secs(30));
    let mut kad = kad::Behaviour::with_config(me, kad::store::MemoryStore::new(me), kad_cfg);
    kad.set_mode(Some(if role == Role::Private { kad::Mode::Client } else { kad::Mode::Server }));
    let gossip = gossipsub::Behaviour::new(gossipsub::MessageAuthenticity::Anonymous, gossip_config()?)
        .map_err(|e| NetError::Setup(format!("gossipsub: {e}")))?;
    let xfer = request_response::Behaviour::with_codec(
        XferCodec,
        [(XFER_PROTOCOL, request_response::ProtocolSupport::Full)],
        request_response::Config::default()
            .with_request_timeout(Duration::from_secs(60))
            .with_max_concurrent_streams(256),
    );
    let mdns = if mdns_on { Some(mdns::tokio::Behaviour::new(mdns::Config::default(), me)?) } else { None };
    let relay_server = (role == Role::Bootstrap).then(|| {
        relay::Behaviour::new(
            me,
            relay::Config {
                max_circuit_bytes: relay_bytes,
                max_circuit_duration: Duration::from_secs(3600),
                ..Default::default()
            },
        )
    });
    Ok(MurmurBehaviour {
        limits: connection_limits::Behaviour::new(limits),
        blocked: Default::default(),
        identify: identify::Behaviour::new(
            identify::Config::new(IDENTIFY_PROTOCOL.into(), key.public())
                .with_agent_version(agent)
                .with_push_listen_addr_updates(true),
        ),
        ping: ping::Behaviour::new(
            ping::Config::new()
                .with_interval(Duration::from_secs(PING_INTERVAL_SECS))
                .with_timeout(Duration::from_secs(PING_TIMEOUT_SECS)),
        ),
        kad,
        gossip,
        xfer,
        mdns: mdns.into(),
        relay_client,
        relay_server: relay_server.into(),
        dcutr: dcutr::Behaviour::new(me),
        autonat: autonat::Behaviour::new(
            me,
            autonat::Config {
                only_global_ips: false,
                boot_delay: Duration::from_secs(5),
                ..Default::default()
            },
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_strings_round_trip() {
        for role in [Role::Trainer, Role::Private, Role::Bootstrap, Role::Observer] {
            let s = format!("murmur/0.1.0 {} run=abcd", role.name());
            assert_eq!(parse_agent(&s), Some((role, "abcd".to_string())));
        }
        assert_eq!(parse_agent("rust-libp2p/0.1"), None);
        assert_eq!(parse_agent("murmur/1 king run=ab"), None);
    }
}
