//! A flood of valid-looking gossip (issue 18, done-when 1): a real libp2p
//! peer of the run publishes correctly signed manifests for far-future
//! rounds — each passes decoding and signature checks — at up to 10,000 per
//! second to a training node. The node keeps closing rounds, its memory
//! stays bounded, and it bans the flooder (gossip rate cap).

use std::sync::Arc;
use std::time::{Duration, Instant};

use murmur_node::net::rate::GOSSIP_BURST;
use murmur_node::net::{self, NetConfig, Role, TopicKind};
use murmur_node::runtime::startup::Nothing;
use murmur_protocol::{NodeKey, PayloadHash, RunId, StateId};
use murmur_tests::{signed_manifest, start_bootstrap, start_node, wait_until, RunSettings};

fn run_id_of(hex: &str) -> RunId {
    let mut id = [0u8; 32];
    for (i, b) in id.iter_mut().enumerate() {
        *b = u8::from_str_radix(hex.get(2 * i..2 * i + 2).unwrap_or("00"), 16).unwrap_or(0);
    }
    RunId(id)
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

#[test]
fn a_node_flooded_with_valid_looking_gossip_trains_on_and_bans_the_flooder() {
    let dir = tempfile::tempdir().expect("tempdir");
    let settings = RunSettings { inner_steps: 6, batch: 2, quorum: 1, deadline: 20, seed: 9 };
    let (_boot, addr) = start_bootstrap(dir.path(), &settings);
    let victim = start_node(dir.path(), "victim", &addr, &["--discovery-wait", "0.2"]);
    let started = victim.wait_event("started", Duration::from_secs(60), |v| v["event"] == "started");
    let run = run_id_of(started["run"].as_str().unwrap_or_default());
    let listen = victim.wait_event("a loopback address", Duration::from_secs(60), |v| {
        v["event"] == "listening" && v["addr"].as_str().is_some_and(|a| a.starts_with("/ip4/127.0.0.1/tcp/"))
    });
    victim.wait_event("a first round", Duration::from_secs(120), |v| v["event"] == "round");
    let rss_before = rss_kib(victim.pid());
    let rounds_before = victim.last_round().unwrap_or(0);

    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let flooder_key = NodeKey::from_seed([77; 32]);
    let sent = rt.block_on(async {
        let mut cfg = NetConfig::new(flooder_key.clone(), run, Role::Trainer);
        cfg.bootstrap = vec![listen["addr"].as_str().unwrap_or_default().parse().expect("multiaddr")];
        let (handle, _events) = net::start(cfg, Arc::new(Nothing)).expect("flooder swarm");
        // Let the connection and the topic subscriptions settle.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let mut sent = 0u64;
        let mut last_error = String::new();
        let t0 = Instant::now();
        let mut tick = tokio::time::interval(Duration::from_millis(10));
        while t0.elapsed() < Duration::from_secs(8) {
            tick.tick().await;
            for _ in 0..100 {
                let hash = PayloadHash([(sent % 251) as u8; 32]);
                let m = signed_manifest(&flooder_key, run, 1_000_000 + sent, StateId([7; 32]), hash);
                match handle.publish(TopicKind::ShardedManifest, m.encode()).await {
                    Ok(()) => sent += 1,
                    Err(e) => last_error = e.to_string(),
                }
            }
        }
        (sent, handle.local.to_string(), last_error)
    });
    let (sent, flooder_id, last_error) = (sent.0, sent.1, sent.2);
    // The victim's token bucket admits GOSSIP_BURST messages at once; a ban
    // by the rate cap needs more than that to have left the flooder (how many
    // more depends on how fast the victim drops the connection).
    assert!(
        sent > GOSSIP_BURST as u64,
        "the flooder got only {sent} messages out, not more than the burst of {GOSSIP_BURST} (last refusal: {last_error})\n{}",
        victim.tail()
    );
    wait_until(
        "the victim to ban the flooder",
        Duration::from_secs(30),
        || victim.events_of("banned").iter().any(|v| v["peer"] == flooder_id.as_str()),
        || victim.tail(),
    );
    wait_until(
        "the victim to close two more rounds",
        Duration::from_secs(120),
        || victim.last_round().is_some_and(|r| r >= rounds_before + 2),
        || victim.tail(),
    );
    let rss_after = rss_kib(victim.pid());
    assert!(
        rss_after < rss_before + 256 * 1024,
        "memory grew from {rss_before} KiB to {rss_after} KiB under the flood"
    );
    // Each flooded manifest is valid but for a future round, which costs its
    // signer nothing: the ban above can only have come from the rate cap.
}
