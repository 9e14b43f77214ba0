//! In-process swarms for the transfer-protocol tests: a node's network
//! started from the crates on an ephemeral loopback port, with whatever
//! `ContentServer` the test needs (honest, slow, hostile), and dialled to
//! the others.

use std::sync::Arc;
use std::time::Duration;

use libp2p::Multiaddr;
use murmur_node::net::{self, ContentServer, NetConfig, NetEvent, NetHandle, Role};
use murmur_protocol::{NodeKey, RunId};
use tokio::sync::mpsc;

/// The run every test swarm belongs to.
pub const TEST_RUN: RunId = RunId([9; 32]);

/// A trainer's swarm with key seed `[seed; 32]`, listening on 127.0.0.1.
pub fn start_swarm(seed: u8, server: Arc<dyn ContentServer>) -> (NetHandle, mpsc::Receiver<NetEvent>) {
    start_swarm_with(seed, server, |_| {})
}

/// `start_swarm` with its configuration changed by `configure` (a greedy
/// asker, a smaller share).
pub fn start_swarm_with(
    seed: u8,
    server: Arc<dyn ContentServer>,
    configure: impl FnOnce(&mut NetConfig),
) -> (NetHandle, mpsc::Receiver<NetEvent>) {
    let mut cfg = NetConfig::new(NodeKey::from_seed([seed; 32]), TEST_RUN, Role::Trainer);
    cfg.listen = vec!["/ip4/127.0.0.1/tcp/0".parse().expect("addr")];
    cfg.mdns = false;
    configure(&mut cfg);
    net::start(cfg, server).expect("net")
}

/// Dial every listen address of `peers`, and let the connections settle.
pub async fn connect(me: &NetHandle, peers: &[&NetHandle]) {
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut addrs = Vec::new();
    for peer in peers {
        addrs.extend(peer.listen_addrs().await);
    }
    dial(me, &addrs).await;
}

/// Dial `addrs`, and let the connections settle.
pub async fn dial(me: &NetHandle, addrs: &[Multiaddr]) {
    for a in addrs {
        me.dial(a.clone()).await.expect("dial");
    }
    tokio::time::sleep(Duration::from_millis(700)).await;
}
