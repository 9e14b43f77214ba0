//! A joining node and forged "higher" states: in a ticket run where two
//! honest nodes have closed a few rounds, two peers offer a joiner a state
//! far ahead — one claims it unsigned, the other backs it with results
//! trained from it, signed by ten keys without tickets (each carrying a
//! ticket its forger signed), and gossips those results — and serve that
//! state, so a node that believed them could fetch it. The joiner never
//! takes either state and catches up to the state the honest nodes closed
//! a round on; `murmur export --bootstrap` likewise writes a backed state
//! and never a forged one, and with only a forger in the run writes
//! nothing.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use libp2p::{Multiaddr, PeerId};
use murmur_node::net::{self, ContentServer, NetConfig, NetHandle, PeerStatus, Role, StatusBacking};
use murmur_node::net::{TopicKind, XferRequest, XferResponse};
use murmur_node::runtime::server::StoreServer;
use murmur_node::runtime::spec::genesis;
use murmur_node::store::{BlobKind, Store};
use murmur_protocol::committee::ShardResult;
use murmur_protocol::{NodeKey, PublicKey, RunSpec, Signature, StateId, Ticket};
use murmur_tests::{
    hosted_spec, issue_ticket, params_by_round, start_node, start_ticket_run, states_by_round, wait_until,
    workspace_binary, write_node_key, RunSettings, TicketRun,
};

/// A peer claiming `round` at `state` (which it serves from its store),
/// with `backing` as its evidence.
struct Forger {
    status: PeerStatus,
    store: StoreServer,
}

impl ContentServer for Forger {
    fn status(&self, _: PeerId) -> PeerStatus {
        self.status.clone()
    }
    fn serve(&self, from: PeerId, r: &XferRequest) -> XferResponse {
        self.store.serve(from, r)
    }
}

/// Store a state of `round` that no honest node ever reached (genesis with
/// its first parameter moved), as a real, fetchable blob; returns its id.
fn forged_state(spec: &RunSpec, round: u64, dir: &Path) -> (Arc<Store>, StateId) {
    let store = Arc::new(Store::open(dir).expect("store"));
    let mut s = genesis(spec).expect("genesis");
    s.round = round;
    s.params[0] += 1.0;
    let id = store.blobs.put(BlobKind::State, &s.encode()).expect("put");
    (store, StateId(id))
}

/// Ten results of round `round + 1` trained from `state` (words that round
/// `round` ended on it), by keys seeded `seed0 + i`, each with a ticket
/// `forger` signed (no operator's): evidence that counts for nothing.
fn forged_backing(
    spec: &RunSpec,
    forger: &NodeKey,
    seed0: u8,
    round: u64,
    state: StateId,
) -> Vec<StatusBacking> {
    (0..10u8)
        .map(|i| {
            let k = NodeKey::from_seed([seed0 + i; 32]);
            let word = ShardResult {
                run: spec.run_id(),
                round: round + 1,
                base: state,
                shard: 0,
                included_count: 1,
                included_root: [0; 32],
                total_tokens: 1,
                result_hash: [i; 32],
                signer: PublicKey::default(),
                signature: Signature::default(),
            }
            .sign(&k)
            .encode();
            let ticket = Ticket::issue(forger, spec.run_id(), k.public(), u64::MAX);
            StatusBacking { result: word, ticket: Some(ticket.encode()) }
        })
        .collect()
}

/// Start a forging peer of the run, known to the bootstrap server (so a
/// joiner finds it as it finds the honest trainers).
async fn forger(
    spec: &RunSpec,
    boot: &Multiaddr,
    key: NodeKey,
    status: PeerStatus,
    store: Arc<Store>,
) -> NetHandle {
    let server = Forger { status, store: StoreServer::new(store, spec.encode(), true) };
    let mut cfg = NetConfig::new(key, spec.run_id(), Role::Trainer);
    cfg.listen = vec!["/ip4/127.0.0.1/tcp/0".parse().expect("addr")];
    cfg.bootstrap = vec![boot.clone()];
    let (net, events) = net::start(cfg, Arc::new(server)).expect("net");
    // Keep the event channel open (dropping it would stop nothing, but the
    // swarm counts dropped events); drain it on a task.
    tokio::spawn(async move {
        let mut events = events;
        while events.recv().await.is_some() {}
    });
    net
}

/// Run `murmur export --bootstrap <addr> --key <key> --out <out>` (a
/// ticket run answers its operator's key); (success, stdout, stderr).
fn export_live(addr: &str, key: &Path, out: &Path) -> (bool, String, String) {
    export_live_args(addr, key, out, &[])
}

/// `export_live` with `extra` arguments.
fn export_live_args(addr: &str, key: &Path, out: &Path, extra: &[&str]) -> (bool, String, String) {
    let o = std::process::Command::new(workspace_binary("murmur"))
        .args(["export", "--bootstrap", addr, "--wait", "8", "--key"])
        .arg(key)
        .arg("--out")
        .arg(out)
        .args(extra)
        .output()
        .expect("running murmur export");
    (o.status.success(), String::from_utf8_lossy(&o.stdout).into(), String::from_utf8_lossy(&o.stderr).into())
}

/// The StateId an export's murmur.json names.
fn read_state_id(out: &Path) -> String {
    let text = std::fs::read_to_string(out.join("murmur.json")).expect("murmur.json");
    let v: serde_json::Value = serde_json::from_str(&text).expect("json");
    v["state_id"].as_str().unwrap_or_default().to_string()
}

/// With only a forger in the run, offering a far-ahead state backed by
/// results of keys that hold no operator's ticket, `murmur export
/// --bootstrap` writes nothing and says no state is backed.
#[test]
fn export_refuses_a_state_no_admitted_result_backs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let settings = RunSettings { inner_steps: 10, batch: 4, quorum: 1, deadline: 20, seed: 45 };
    let TicketRun { boot: _boot, addr, operator, operator_key } = start_ticket_run(d, &settings, [0x0d; 32]);
    let (rt, spec, boot) = hosted_spec(&addr, &operator);
    let (store, forged) = forged_state(&spec, 60, &d.join("forger"));
    let forger_key = NodeKey::from_seed([0xf3; 32]);
    let backing = forged_backing(&spec, &forger_key, 0x60, 59, forged);
    let status = PeerStatus {
        spec: spec.encode(),
        round: 60,
        state: Some(forged.0),
        trainer: true,
        ticket: None,
        backing,
    };
    let _forger = rt.block_on(forger(&spec, &boot, forger_key, status, store));
    std::thread::sleep(Duration::from_secs(3));
    let out = d.join("export");
    let (ok, stdout, stderr) = export_live(&addr, &operator_key, &out);
    assert!(!ok, "a forged state was exported: {stdout}");
    assert!(stderr.contains("no state of run") && stderr.contains("nothing was written"), "{stderr}");
    assert!(!out.exists(), "the refused export left {}", out.display());
}

#[test]
fn a_joiner_ignores_forged_higher_states_and_catches_up_to_the_committed_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let settings = RunSettings { inner_steps: 10, batch: 4, quorum: 2, deadline: 20, seed: 44 };
    let TicketRun { boot: _boot, addr, operator, operator_key, .. } =
        start_ticket_run(d, &settings, [0x0c; 32]);
    let (rt, spec, boot) = hosted_spec(&addr, &operator);
    let run_hex = spec.run_id().to_hex();
    let mut tickets = Vec::new();
    for (name, seed) in [("a", [0xa2; 32]), ("b", [0xb2; 32]), ("c", [0xc2; 32])] {
        let holder = write_node_key(d, name, seed);
        tickets
            .push(issue_ticket(d, &operator_key, &["--run", &run_hex], &holder, name).display().to_string());
    }
    let a = start_node(d, "a", &addr, &["--ticket", &tickets[0]]);
    let b = start_node(d, "b", &addr, &["--ticket", &tickets[1]]);
    let ctx = || format!("{}\n{}", a.tail(), b.tail());
    wait_until("round 1 to close", Duration::from_secs(240), || a.last_round() >= Some(1), ctx);

    // Two forgers: one claims round 50 with no evidence at all; one claims
    // round 60 backed by ten results of round 61 trained from it, signed by
    // keys without an operator's ticket, and gossips those results too.
    let (store1, x1) = forged_state(&spec, 50, &d.join("forger1"));
    let (store2, x2) = forged_state(&spec, 60, &d.join("forger2"));
    let forger_key = NodeKey::from_seed([0xf2; 32]);
    let backing = forged_backing(&spec, &forger_key, 0x50, 59, x2);
    let claim = |round: u64, state: StateId, backing: Vec<StatusBacking>| PeerStatus {
        spec: spec.encode(),
        round,
        state: Some(state.0),
        trainer: true,
        ticket: None,
        backing,
    };
    let forgers = rt.block_on(async {
        vec![
            forger(&spec, &boot, NodeKey::from_seed([0xf1; 32]), claim(50, x1, Vec::new()), store1).await,
            forger(&spec, &boot, forger_key.clone(), claim(60, x2, backing.clone()), store2).await,
        ]
    });
    let gossiper = forgers[1].clone();
    rt.spawn(async move {
        // Ten results every second, so a joiner hears them whenever it
        // subscribes (gossip drops a repeat it has seen, so each second's
        // are of another round).
        for n in 0..600u64 {
            for w in forged_backing(&spec, &forger_key, 0x50, 59 + n, x2) {
                let _ = gossiper.publish(TopicKind::ShardResult, w.result).await;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    });

    // Let the bootstrap server learn the forgers, then start the joiner: it
    // finds the four trainers in the routing table the server gives it.
    std::thread::sleep(Duration::from_secs(3));
    let c = start_node(d, "c", &addr, &["--ticket", &tickets[2], "--discovery-wait", "15"]);
    let ctx3 = || format!("{}\n{}\n{}", a.tail(), b.tail(), c.tail());
    let resynced = c.wait_event("caught up", Duration::from_secs(180), |v| v["event"] == "resynced");

    // The joiner caught up to the state the honest nodes closed a round on.
    let caught_state = resynced["state_id"].as_str().unwrap_or_default().to_string();
    let caught_round = resynced["round"].as_u64().unwrap_or(0);
    assert!(caught_round >= 2, "c caught up to an early state: {resynced}\n{}", ctx3());
    wait_until(
        "a to report the round c caught up to",
        Duration::from_secs(120),
        || a.last_round() >= Some(caught_round - 1),
        ctx3,
    );
    assert_eq!(
        states_by_round(&a).get(&(caught_round - 1)),
        Some(&caught_state),
        "c caught up to a state the honest nodes did not close a round on\n{}",
        ctx3()
    );
    for forged in [x1, x2] {
        let hex = forged.to_hex();
        let took =
            c.events().into_iter().any(|v| v["event"] != "ignored_claim" && v.to_string().contains(&hex));
        assert!(!took, "c took a forged state\n{}", ctx3());
    }
    // `murmur export --bootstrap` takes a state the honest results back,
    // never a forged one.
    let live = d.join("live-export");
    let (ok, stdout, stderr) = export_live(&addr, &operator_key, &live);
    assert!(ok, "export --bootstrap failed: {stdout}\n{stderr}\n{}", ctx3());
    let exported = read_state_id(&live);
    // The export may be of a round a has closed but not reported yet.
    wait_until(
        "a to report the state the export took",
        Duration::from_secs(60),
        || params_by_round(&a).values().any(|s| *s == exported),
        ctx3,
    );
    assert!(exported != x1.to_hex() && exported != x2.to_hex());
    // Asked for by StateId (as the dashboard's command does), the forged
    // state is refused and nothing written.
    let named = d.join("forged-export");
    let (ok, stdout, stderr) = export_live_args(&addr, &operator_key, &named, &["--state", &x2.to_hex()]);
    assert!(!ok && !named.exists(), "the forged state was exported by name: {stdout}");
    assert!(stderr.contains("is not one that"), "{stderr}");

    // The joiner then trains with the honest nodes, in agreement.
    let from = a.last_round().unwrap_or(0);
    wait_until(
        "c to close rounds with the others",
        Duration::from_secs(240),
        || c.last_round() > Some(from),
        ctx3,
    );
    // c may report a round before a does: wait for a to reach the rounds c
    // reported before comparing them.
    let reached = c.last_round().unwrap_or(0);
    wait_until(
        "a to report the rounds c closed",
        Duration::from_secs(120),
        || a.last_round() >= Some(reached),
        ctx3,
    );
    let (sa, sc) = (states_by_round(&a), states_by_round(&c));
    let common: Vec<_> = sc.iter().filter(|(r, _)| *r >= &from && sa.contains_key(r)).collect();
    assert!(!common.is_empty(), "{sa:?} {sc:?}");
    for (r, s) in common {
        assert_eq!(sa.get(r), Some(s), "round {r}: the joiner disagrees with the honest nodes\n{}", ctx3());
    }
    drop(forgers);
}
