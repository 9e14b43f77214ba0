//! Misbehaving peers (issue 5, done-when 7): a peer that gossips a forged
//! signature, malformed bytes, an oversized message and a replay of an old
//! round is refused with a typed reason each time, scored down, and
//! disconnected and banned past the threshold — while the honest nodes'
//! run goes on.

use std::sync::Arc;
use std::time::Duration;

use libp2p::{Multiaddr, PeerId};
use murmur_node::net::{
    self, ContentServer, NetConfig, PeerStatus, Role, TopicKind, XferRequest, XferResponse,
};
use murmur_node::runtime::startup::{discover_spec, Identity};
use murmur_protocol::{NodeKey, PayloadHash, StateId};
use murmur_tests::{signed_manifest, start_bootstrap, start_node, states_by_round, wait_until, RunSettings};

struct Nothing;
impl ContentServer for Nothing {
    fn status(&self, _: PeerId) -> PeerStatus {
        PeerStatus::default()
    }
    fn serve(&self, _: PeerId, _: &XferRequest) -> XferResponse {
        XferResponse::NotFound
    }
}

#[test]
fn bad_peers_are_refused_scored_and_banned_while_the_run_goes_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let settings = RunSettings { inner_steps: 10, batch: 4, quorum: 2, deadline: 20, seed: 41 };
    let (_boot, addr) = start_bootstrap(d, &settings);
    let a = start_node(d, "a", &addr, &[]);
    let b = start_node(d, "b", &addr, &[]);
    let ctx = || format!("{}\n{}", a.tail(), b.tail());
    wait_until("round 1 to close", Duration::from_secs(180), || a.last_round().is_some_and(|r| r >= 1), ctx);
    let targets: Vec<Multiaddr> = [&a, &b]
        .iter()
        .filter_map(|p| p.events_of("listening").first().and_then(|v| v["addr"].as_str()?.parse().ok()))
        .collect();
    assert_eq!(targets.len(), 2, "{}", ctx());

    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let evil_key = NodeKey::from_seed([0xee; 32]);
    let evil_id = net::peer_id_of(&evil_key.public()).expect("peer id").to_string();
    rt.block_on(async {
        let boot: Multiaddr = addr.parse().expect("addr");
        let spec = discover_spec(
            &Identity { key: evil_key.clone(), ticket: None },
            &[boot],
            Duration::from_secs(30),
        )
        .await
        .expect("spec");
        let run = spec.run_id();
        let (evil, _events) =
            net::start(NetConfig::new(evil_key.clone(), run, Role::Observer), Arc::new(Nothing))
                .expect("net");
        for t in &targets {
            evil.dial(t.clone()).await.expect("dial");
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        let manifest = |round: u64, tag: u8| {
            signed_manifest(&evil_key, run, round, StateId([tag; 32]), PayloadHash([tag; 32]))
        };
        let mut forged = manifest(5, 1).encode();
        let last = forged.len() - 1;
        forged[last] ^= 0x55;
        let messages = [
            forged,
            vec![1, 2, 0xde, 0xad],  // malformed
            vec![0u8; 8 * 1024],     // oversized for a manifest
            manifest(0, 2).encode(), // replay: a round long closed
        ];
        for m in messages {
            for _ in 0..20 {
                if evil.publish(TopicKind::ShardedManifest, m.clone()).await.is_ok() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        // Banned: the honest nodes dropped the connection and refuse it again.
        let _ = evil.dial(targets[0].clone()).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let peers = evil.peers().await;
        let honest: Vec<_> = [&a, &b].iter().filter_map(|p| p.peer_id()).collect();
        assert!(
            peers.iter().all(|p| !honest.contains(&p.peer.to_string())),
            "still connected to an honest node: {peers:?}"
        );
    });

    for p in [&a, &b] {
        let reasons: Vec<String> = p
            .events_of("rejected")
            .iter()
            .filter(|v| v["peer"].as_str() == Some(&evil_id))
            .filter_map(|v| v["reason"].as_str().map(String::from))
            .collect();
        for want in ["bad_signature", "malformed", "oversized"] {
            assert!(
                reasons.iter().any(|r| r == want),
                "{}: no `{want}` rejection in {reasons:?}\n{}",
                p.name,
                p.tail()
            );
        }
        assert!(
            p.events_of("banned").iter().any(|v| v["peer"].as_str() == Some(&evil_id)),
            "{} did not ban the bad peer\n{}",
            p.name,
            p.tail()
        );
    }
    // The honest run goes on, in agreement.
    let r0 = a.last_round().unwrap_or(0);
    wait_until(
        "two more rounds",
        Duration::from_secs(120),
        || a.last_round().is_some_and(|r| r >= r0 + 2),
        ctx,
    );
    let (sa, sb) = (states_by_round(&a), states_by_round(&b));
    for (r, s) in &sb {
        if let Some(x) = sa.get(r) {
            assert_eq!(x, s, "round {r}");
        }
    }
}
