//! A Sybil flood of valid messages bans no honest relay: in-process swarms
//! on 127.0.0.1. A target T is connected to one honest relay R alone (T
//! listens nowhere, so no other swarm can reach it); four Sybil swarms,
//! also connected to R alone, publish correctly signed manifests of
//! the run under 100 fresh keys, 60 each, in about a second — every key far
//! under the per-signer gossip budget (`GOSSIP_BURST`, 2,000), all of them
//! together three times over it — so every message reaches T forwarded by
//! R (gossipsub's propagation source). T must refuse nothing and ban
//! nobody, R must ban nobody, and T must have received most of the flood
//! through R, from every Sybil key (so the test cannot pass by nothing
//! reaching T; it receives all 6,000). It fails when the flood limit is
//! charged to the relay (checked by charging it to `relay` in
//! `GossipRates::admit`): T then finds R past the budget after about 2,700
//! messages, charges it `flood` three times and bans it, cutting itself off
//! from the honest network.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use libp2p::PeerId;
use murmur_node::net::rate::GOSSIP_BURST;
use murmur_node::net::{self, GossipMessage, NetConfig, NetEvent, NetHandle, Role, TopicKind};
use murmur_node::runtime::startup::Nothing;
use murmur_protocol::{NodeKey, PayloadHash, PublicKey, StateId};
use murmur_tests::signed_manifest;
use murmur_tests::swarms::{start_swarm, TEST_RUN};
use tokio::sync::mpsc;

const SYBIL_SWARMS: usize = 4;
const KEYS_PER_SWARM: u32 = 25;
const PER_KEY: u64 = 60;

/// What one swarm saw: valid manifests (relay, signer, round), refusals and bans.
#[derive(Default)]
struct Seen {
    gossip: Vec<(PeerId, PublicKey, u64)>,
    rejected: Vec<(PeerId, String)>,
    banned: Vec<PeerId>,
}

fn watch(mut events: mpsc::Receiver<NetEvent>) -> Arc<Mutex<Seen>> {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let sink = seen.clone();
    tokio::spawn(async move {
        while let Some(ev) = events.recv().await {
            let Ok(mut s) = sink.lock() else { return };
            match ev {
                NetEvent::Gossip { from, message } => {
                    if let GossipMessage::ShardedManifest(m) = *message {
                        s.gossip.push((from, m.signer, m.round));
                    }
                }
                NetEvent::Rejected { peer, reason } => s.rejected.push((peer, reason.name())),
                NetEvent::Banned { peer } => s.banned.push(peer),
                _ => {}
            }
        }
    });
    seen
}

fn key(tag: u8, i: u32) -> NodeKey {
    let mut seed = [tag; 32];
    seed[..4].copy_from_slice(&i.to_le_bytes());
    NodeKey::from_seed(seed)
}

/// A valid manifest of the run, distinct per (signer, round).
fn manifest(signer: &NodeKey, round: u64) -> Vec<u8> {
    signed_manifest(signer, TEST_RUN, round, StateId([7; 32]), PayloadHash([3; 32])).encode()
}

/// A swarm that listens nowhere, dialled into `relay` only.
async fn dialled_in(key: NodeKey, relay: &libp2p::Multiaddr) -> (NetHandle, mpsc::Receiver<NetEvent>) {
    let (h, ev) = net::start(NetConfig::new(key, TEST_RUN, Role::Trainer), Arc::new(Nothing)).expect("swarm");
    h.dial(relay.clone()).await.expect("dial");
    (h, ev)
}

/// Sybil manifests of the flood (rounds below `PER_KEY`) `seen` had from `relay`.
fn flood_received(seen: &Seen, relay: PeerId, sybils: &HashSet<PublicKey>) -> usize {
    seen.gossip.iter().filter(|(f, k, r)| *f == relay && sybils.contains(k) && *r < PER_KEY).count()
}

#[test]
fn a_sybil_flood_of_valid_messages_bans_no_honest_relay() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let (relay, relay_events) = start_swarm(0x21, Arc::new(Nothing));
        let relay_seen = watch(relay_events);
        let t0 = Instant::now();
        let relay_addr = loop {
            if let Some(a) = relay.listen_addrs().await.into_iter().next() {
                break a;
            }
            assert!(t0.elapsed() < Duration::from_secs(10), "the relay never listened");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let (target, target_events) = dialled_in(key(0x7a, 0), &relay_addr).await;
        let target_seen = watch(target_events);
        let mut sybil_swarms = Vec::new();
        for s in 0..SYBIL_SWARMS {
            sybil_swarms.push(dialled_in(key(0x5b, s as u32), &relay_addr).await);
        }
        let keys: Vec<Vec<NodeKey>> = (0..SYBIL_SWARMS as u32)
            .map(|s| (0..KEYS_PER_SWARM).map(|k| key(0x5c, s * KEYS_PER_SWARM + k)).collect())
            .collect();
        let sybils: HashSet<PublicKey> = keys.iter().flatten().map(|k| k.public()).collect();
        let total = SYBIL_SWARMS * KEYS_PER_SWARM as usize * PER_KEY as usize;
        // Each swarm's part: its keys' messages in turn, round by round.
        let parts: Vec<Vec<Vec<u8>>> = keys
            .iter()
            .map(|ks| (0..PER_KEY).flat_map(|round| ks.iter().map(move |k| manifest(k, round))).collect())
            .collect();

        // Wait for the mesh: messages of every Sybil swarm reach T (rounds
        // past the flood's, a few per key).
        let t0 = Instant::now();
        let mut probe = 1_000_000u64;
        let probes_through = |seen: &Mutex<Seen>| {
            let s = seen.lock().expect("seen");
            s.gossip.iter().filter(|(f, _, r)| *f == relay.local && *r > PER_KEY).count()
        };
        while probes_through(&target_seen) < SYBIL_SWARMS * 2 {
            assert!(t0.elapsed() < Duration::from_secs(15), "no Sybil gossip reached the target through the relay");
            for ((s, _), ks) in sybil_swarms.iter().zip(&keys) {
                probe += 1;
                let _ = s.publish(TopicKind::ShardedManifest, manifest(&ks[0], probe)).await;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }

        // The flood: 1,500 messages a second from each swarm.
        let floods: Vec<_> = sybil_swarms
            .iter()
            .zip(parts)
            .map(|((s, _), part)| {
                let s = s.clone();
                tokio::spawn(async move {
                    let mut sent = 0usize;
                    let mut tick = tokio::time::interval(Duration::from_millis(10));
                    for batch in part.chunks(15) {
                        tick.tick().await;
                        for m in batch {
                            sent += usize::from(s.publish(TopicKind::ShardedManifest, m.clone()).await.is_ok());
                        }
                    }
                    sent
                })
            })
            .collect();
        let mut sent = 0;
        for f in floods {
            sent += f.await.expect("flood task");
        }

        // Bounded wait for the flood to arrive (or a ban to show): until all
        // of it is in, or nothing more came for two seconds.
        let t0 = Instant::now();
        let mut last = (0, Instant::now());
        while t0.elapsed() < Duration::from_secs(15) {
            let (n, banned) = {
                let s = target_seen.lock().expect("seen");
                (flood_received(&s, relay.local, &sybils), !s.banned.is_empty())
            };
            if n >= total || banned || last.1.elapsed() > Duration::from_secs(2) {
                break;
            }
            if n != last.0 {
                last = (n, Instant::now());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }

        let peers: Vec<PeerId> = target.peers().await.into_iter().map(|p| p.peer).collect();
        let banned = (target.banned().await, relay.banned().await);
        let (t, r) = (target_seen.lock().expect("seen"), relay_seen.lock().expect("seen"));
        let through_relay = flood_received(&t, relay.local, &sybils);
        let signers: HashSet<&PublicKey> = t.gossip.iter().map(|(_, k, _)| k).collect();
        let context = format!(
            "{sent} of {total} published; the target had {through_relay} through the relay, refused {:?}, banned {:?}; \
             the relay refused {:?}, banned {:?}",
            t.rejected, t.banned, r.rejected, r.banned
        );
        assert!(t.banned.is_empty() && t.rejected.is_empty(), "the target refused or banned: {context}");
        assert!(r.banned.is_empty() && r.rejected.is_empty(), "the relay refused or banned: {context}");
        assert!(banned.0.is_empty() && banned.1.is_empty(), "bans: {banned:?}; {context}");
        assert_eq!(peers, vec![relay.local], "the target stays connected to the relay alone: {context}");
        assert!(t.gossip.iter().all(|(f, _, _)| *f == relay.local), "all gossip came through the relay: {context}");
        assert_eq!(sent, total, "the Sybil swarms published the whole flood: {context}");
        assert!(total as f64 > 2.0 * GOSSIP_BURST, "together far above one signer's rate");
        assert!(through_relay >= total * 3 / 4, "most of the flood reached the target: {context}");
        assert_eq!(signers.len(), sybils.len(), "from every Sybil key: {context}");
        println!("{context}");
    });
}
