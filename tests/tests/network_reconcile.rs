//! Two sides that counted different commits rejoin (hardening). In a ticket
//! run, two ticket holders c1 and c2 present their tickets only while b is
//! the one node up, then contribute small valid deltas and sign b's result
//! every round. b admits them and counts their deltas and commits; a1 and a2,
//! started after the tickets went round, never received them, so they close
//! round 0 without c1's and c2's deltas on another state. Each side's tally
//! keeps it where it is — a1 and a2 count 2 votes against b's 1, b counts 3
//! (b, c1, c2) against 2 — and gossip never delivers the commits a1 and a2
//! refused again, so before reconciliation the run stayed split for good.
//! b's next manifest reaches a1 and a2 on another base: each asks b for its
//! status, counts the commits and tickets b offers as backing, and re-syncs
//! to b's state; from then on all three close rounds on the same states.

use std::sync::Arc;
use std::time::Duration;

use libp2p::Multiaddr;
use murmur_node::net::{self, GossipMessage, NetConfig, NetEvent, NetHandle, Role, TopicKind};
use murmur_node::runtime::server::StoreServer;
use murmur_node::runtime::spec::genesis;
use murmur_node::store::{BlobKind, Store};
use murmur_protocol::hash::payload_hash_of;
use murmur_protocol::{
    encode_delta, DeltaManifest, NodeKey, PayloadHash, PublicKey, RoundCommit, RunSpec, Signature, StateId,
    Ticket,
};
use murmur_tests::{
    hosted_spec, issue_ticket, start_node, start_ticket_run, states_by_round, wait_until, write_node_key,
    Proc, RunSettings, TicketRun,
};
use tokio::sync::{mpsc, watch};

type NetEvents = mpsc::Receiver<NetEvent>;

/// Publish `bytes` on `kind`, retrying while the mesh forms (bounded).
async fn publish(net: &NetHandle, kind: TopicKind, bytes: Vec<u8>) {
    for _ in 0..50 {
        if net.publish(kind, bytes.clone()).await.is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A ticket holder that gossips its ticket at once and never again (its
/// status carries none), then, once `go` is set, trains nothing but
/// announces a small valid delta on b's state every round and signs b's
/// result when it lists that delta.
struct Colluder {
    spec: RunSpec,
    key: NodeKey,
    store: Arc<Store>,
    net: NetHandle,
}

impl Colluder {
    fn start(spec: &RunSpec, boot: &Multiaddr, key: NodeKey, dir: &std::path::Path) -> (Self, NetEvents) {
        let store = Arc::new(Store::open(dir).expect("store"));
        let server = StoreServer::new(store.clone(), spec.encode(), true);
        let mut cfg = NetConfig::new(key.clone(), spec.run_id(), Role::Trainer);
        cfg.listen = vec!["/ip4/127.0.0.1/tcp/0".parse().expect("addr")];
        cfg.bootstrap = vec![boot.clone()];
        let (net, events) = net::start(cfg, Arc::new(server)).expect("net");
        (Colluder { spec: spec.clone(), key, store, net }, events)
    }

    /// Gossip the ticket in a few distinct copies (expiries differ by a
    /// second), so that one reaches b however the mesh forms.
    async fn present(&self, operator: &NodeKey) {
        for i in 0..5u64 {
            let t = Ticket::issue(operator, self.spec.run_id(), self.key.public(), u64::MAX - i);
            publish(&self.net, TopicKind::Ticket, t.encode()).await;
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Store and announce this round's delta (distinct per key and round,
    /// far smaller than a trained one so that no robust rule drops it).
    async fn announce(&self, round: u64, base: StateId) -> PayloadHash {
        let n = self.spec.model.param_count as usize;
        let salt = u64::from(self.key.public().0[0]) * 1_000 + round;
        let values: Vec<f32> =
            (0..n).map(|i| 1e-5 * (((i as u64 * 7_919 + salt * 104_729) % 17) as f32 - 8.0)).collect();
        let bytes = encode_delta(self.spec.codec, &values).expect("encode");
        let hash = PayloadHash(self.store.blobs.put(BlobKind::Delta, &bytes).expect("put"));
        assert_eq!(hash, payload_hash_of(&bytes));
        let m = DeltaManifest {
            run: self.spec.run_id(),
            round,
            base,
            signer: PublicKey::default(),
            tokens: 2_560,
            train_loss: 2.0,
            codec: self.spec.codec,
            element_count: n as u64,
            payload_len: bytes.len() as u64,
            payload_hash: hash,
            signature: Signature::default(),
        }
        .sign(&self.key);
        publish(&self.net, TopicKind::Manifest, m.encode()).await;
        hash
    }

    /// Follow b: a delta for every round b opens, and b's result signed as
    /// ours whenever it lists our delta.
    async fn follow(self, mut events: NetEvents, b: PublicKey, mut go: watch::Receiver<bool>) {
        let _ = go.wait_for(|g| *g).await;
        let base0 = genesis(&self.spec).expect("genesis").id();
        let mut ours = vec![(0, self.announce(0, base0).await)];
        let mut announced = 0;
        while let Some(ev) = events.recv().await {
            let NetEvent::Gossip { message, .. } = ev else { continue };
            let GossipMessage::Commit(c) = *message else { continue };
            if c.signer != b {
                continue;
            }
            if ours.iter().any(|(r, h)| *r == c.round && c.included.contains(h)) {
                let mine = RoundCommit {
                    signer: PublicKey::default(),
                    signature: Signature::default(),
                    ..c.clone()
                }
                .sign(&self.key);
                publish(&self.net, TopicKind::Commit, mine.encode()).await;
            }
            if c.round + 1 > announced {
                announced = c.round + 1;
                ours.push((announced, self.announce(announced, c.new_state).await));
            }
        }
    }
}

#[test]
fn nodes_that_counted_different_commits_reconcile_onto_one_state() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let settings = RunSettings { inner_steps: 10, batch: 4, quorum: 2, deadline: 20, seed: 46 };
    let TicketRun { boot: _boot, addr, operator, operator_key } = start_ticket_run(d, &settings, [0x0d; 32]);
    let (rt, spec, boot) = hosted_spec(&addr, &operator);
    let run_hex = spec.run_id().to_hex();
    let ticket_of = |name: &str, seed: [u8; 32]| {
        let holder = write_node_key(d, name, seed);
        issue_ticket(d, &operator_key, &["--run", &run_hex], &holder, name).display().to_string()
    };
    let b_seed = [0xb3; 32];
    let b = start_node(d, "b", &addr, &["--ticket", &ticket_of("b", b_seed)]);
    b.wait_event("joined", Duration::from_secs(120), |v| v["event"] == "joined");

    // c1 and c2 present their tickets while b is the only node up.
    let (go_tx, go) = watch::channel(false);
    let colluders: Vec<(Colluder, NetEvents)> = [[0xc3; 32], [0xc4; 32]]
        .iter()
        .enumerate()
        .map(|(i, seed)| {
            let _guard = rt.enter();
            Colluder::start(&spec, &boot, NodeKey::from_seed(*seed), &d.join(format!("c{i}")))
        })
        .collect();
    rt.block_on(async {
        for (c, _) in &colluders {
            c.present(&operator).await;
        }
    });
    let c_ids: Vec<String> = colluders.iter().map(|(c, _)| c.net.local.to_string()).collect();
    let b_key = NodeKey::from_seed(b_seed).public();
    let _followers: Vec<_> =
        colluders.into_iter().map(|(c, ev)| rt.spawn(c.follow(ev, b_key, go.clone()))).collect();

    let a1 = start_node(d, "a1", &addr, &["--ticket", &ticket_of("a1", [0xa3; 32])]);
    let a2 = start_node(d, "a2", &addr, &["--ticket", &ticket_of("a2", [0xa4; 32])]);
    for p in [&a1, &a2] {
        p.wait_event("joined", Duration::from_secs(120), |v| v["event"] == "joined");
    }
    go_tx.send_replace(true);
    let ctx = || format!("{}\n{}\n{}", a1.tail(), a2.tail(), b.tail());

    // The split: b's round 0 counts c1's and c2's deltas; a1 and a2 refused
    // them (and their commits) as not admitted.
    let rb = b.wait_event("b's round 0", Duration::from_secs(120), |v| {
        v["event"] == "round" && v["round"].as_u64() == Some(0)
    });
    let listed =
        |id: &str| rb["contributors"].as_array().is_some_and(|c| c.iter().any(|p| p.as_str() == Some(id)));
    assert!(c_ids.iter().all(|id| listed(id)), "b did not count c1's and c2's deltas: {rb}\n{}", ctx());
    // a1 and a2 refuse c1's and c2's round-0 manifests when they come,
    // which on a loaded machine can be after b closed round 0.
    for p in [&a1, &a2] {
        let refused_both = || {
            let refused: Vec<String> = p
                .events_of("rejected")
                .iter()
                .filter(|v| v["reason"] == "round_notadmitted")
                .filter_map(|v| v["peer"].as_str().map(String::from))
                .collect();
            c_ids.iter().all(|id| refused.contains(id))
        };
        wait_until(
            &format!("{} to refuse c1's and c2's deltas", p.name),
            Duration::from_secs(60),
            refused_both,
            ctx,
        );
    }

    // b's round-1 manifest reaches a1 and a2 on another base: they ask b,
    // and re-sync to b's round-0 state.
    let b_state0 = rb["state_id"].as_str().unwrap_or_default().to_string();
    for p in [&a1, &a2] {
        p.wait_event("a reconcile with b", Duration::from_secs(120), |v| {
            v["event"] == "reconcile" && v["round"].as_u64() == Some(1)
        });
        p.wait_event("a re-sync to b's round-0 state", Duration::from_secs(60), |v| {
            v["event"] == "resync"
                && v["round"].as_u64() == Some(1)
                && v["state_id"].as_str() == Some(&b_state0)
        });
    }
    let agree_from = |q: u64| {
        let (s1, s2, sb) = (states_by_round(&a1), states_by_round(&a2), states_by_round(&b));
        sb.get(&q).is_some_and(|s| s1.get(&q) == Some(s) && s2.get(&q) == Some(s))
    };
    let rounds = |p: &Proc| p.last_round().unwrap_or(0);
    wait_until(
        "a1, a2 and b to close a round on one state",
        Duration::from_secs(240),
        || (1..=rounds(&b)).any(|q| agree_from(q) && agree_from(q + 1)),
        ctx,
    );
}
