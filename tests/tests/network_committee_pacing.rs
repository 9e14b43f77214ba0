//! A run with one owner per shard (k = 1), ticket admission and
//! overlapped, time-budgeted rounds: four node processes, each holding a
//! ticket an operator signed, train the tiny preset with a 1.5 s inner
//! budget and an `inner_steps` cap no round could reach in that time, so
//! every round's length is the budget's. Every node reports the same
//! StateId for rounds 0 to 4; from round 1 on the vector is cut into one
//! shard per node; each node trains ahead (its job starts from the last
//! round's state before the round opens and the round's state lands in
//! it), and each job trained ahead spends about the budget in inner steps.
//! Shards combine per token (docs/protocol.md §6.4) and the sketch audits
//! check them so. Over rounds 1 to 4 every node's exchange (bytes sent and
//! received, catch-up and dataset content left out) stays within 6 int8
//! deltas a round. One node serves Prometheus metrics: its rounds, round
//! times, tokens and share of time in inner steps are counted. While the
//! run goes on, `murmur export --bootstrap` takes its model out: the state
//! the nodes' own signed results back, fetched from them and checked
//! against the StateId of parameters and ledger.

use std::time::Duration;

use murmur_tests::scrape::{fetch, sample};
use murmur_tests::{
    issue_ticket, start_bootstrap_with, start_node, states_by_round, wait_until, workspace_binary,
    write_node_key, Proc, RunSettings,
};

const ROUNDS: u64 = 5;
const BUDGET_SECS: f64 = 1.5;
/// Most int8 deltas a node's exchange may move per round, up and down.
const DELTAS_PER_ROUND: u64 = 6;

#[test]
fn one_owner_per_shard_with_tickets_trains_ahead_within_its_time_budget_on_one_state() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let settings = RunSettings { inner_steps: 100_000, batch: 2, quorum: 1, deadline: 30, seed: 47 };
    let operator = murmur_protocol::NodeKey::from_seed([0x4f; 32]);
    let operator_key = d.join("operator.key");
    std::fs::write(&operator_key, operator.seed()).expect("operator key");
    let op_hex = operator.public().to_string();
    let budget = BUDGET_SECS.to_string();
    let extra = [
        "--committee-size",
        "1",
        "--overlap",
        "--inner-budget",
        budget.as_str(),
        "--admission",
        "tickets",
        "--operator",
        op_hex.as_str(),
    ];
    let (boot, addr) = start_bootstrap_with(d, &settings, &extra);
    let nodes: Vec<Proc> = [("a", 0xa4), ("b", 0xb4), ("c", 0xc4), ("d", 0xd4)]
        .iter()
        .map(|(n, seed)| {
            let holder = write_node_key(d, n, [*seed; 32]);
            let ticket = issue_ticket(d, &operator_key, &["--bootstrap", &addr], &holder, n);
            let ticket = ticket.display().to_string();
            let metrics: &[&str] = if *n == "a" { &["--metrics", "127.0.0.1:0"] } else { &[] };
            start_node(d, n, &addr, &[&["--device", "cpu", "--ticket", &ticket], metrics].concat())
        })
        .collect();
    let ctx = || nodes.iter().chain(std::iter::once(&boot)).map(Proc::tail).collect::<Vec<_>>().join("\n");
    wait_until(
        "every node to close round 4",
        Duration::from_secs(600),
        || nodes.iter().all(|p| p.last_round().is_some_and(|r| r >= ROUNDS - 1)),
        ctx,
    );
    let first = states_by_round(&nodes[0]);
    for p in &nodes {
        let s = states_by_round(p);
        for r in 0..ROUNDS {
            assert!(first.contains_key(&r), "round {r} has no state\n{}", ctx());
            assert_eq!(s.get(&r), first.get(&r), "round {r}\n{}", ctx());
        }
    }
    // One owner per shard: round 0 seats all four, and from round 1 on
    // each node owns one of four shards.
    let rounds = nodes[0].events_of("round");
    let at = |r: u64| rounds.iter().find(|v| v["round"] == r).cloned().unwrap_or_default();
    for r in 1..ROUNDS {
        assert_eq!(at(r)["shards"].as_u64(), Some(4), "round {r}: one shard per node: {}", at(r));
    }
    // Bytes: a node's round report counts what moved since its last one,
    // so reports of neighbouring (overlapped) rounds trade bytes; rounds 1
    // to 4 taken together hold everything a node moved between closing
    // round 0 and closing round 4.
    let params = nodes[0].wait_event("started", Duration::from_secs(5), |v| v["event"] == "started")
        ["params"]
        .as_u64()
        .expect("params");
    let delta = murmur_protocol::Codec::Int8Block { block: 256 }.payload_len(params).expect("payload length");
    let count = |v: &serde_json::Value, f: &str| v[f].as_u64().unwrap_or_else(|| panic!("no {f}: {v}"));
    for p in &nodes {
        let exchange: u64 = p
            .events_of("round")
            .iter()
            .filter(|v| v["round"].as_u64().is_some_and(|r| (1..ROUNDS).contains(&r)))
            .map(|v| {
                let all = count(v, "bytes_sent") + count(v, "bytes_recv");
                let side = count(v, "catch_up_sent")
                    + count(v, "catch_up_recv")
                    + count(v, "dataset_sent")
                    + count(v, "dataset_recv");
                assert!(side <= all, "catch-up and dataset bytes are a part of the round's: {v}");
                all - side
            })
            .sum();
        let per_round = exchange as f64 / (ROUNDS - 1) as f64 / delta as f64;
        eprintln!(
            "exchange over rounds 1 to {}: {exchange} bytes, {per_round:.2} deltas a round",
            ROUNDS - 1
        );
        assert!(exchange > 0, "bytes were counted\n{}", p.tail());
        assert!(
            exchange <= DELTAS_PER_ROUND * (ROUNDS - 1) * delta,
            "{per_round:.2} deltas a round, more than {DELTAS_PER_ROUND}\n{}",
            p.tail()
        );
    }
    // Sketch audits read the per-token coefficients from the manifests:
    // every honest owner's aggregate agrees with its sketch.
    let verdicts: Vec<String> = nodes
        .iter()
        .flat_map(|p| p.events_of("sketch"))
        .filter_map(|v| v["verdict"].as_str().map(str::to_string))
        .collect();
    assert!(verdicts.iter().any(|v| v == "agrees"), "no sketch agreed: {verdicts:?}\n{}", ctx());
    assert!(!verdicts.iter().any(|v| v == "disagrees"), "a sketch disagreed: {verdicts:?}\n{}", ctx());
    for p in &nodes {
        let ahead = p.events_of("trained_ahead");
        let rounds: Vec<u64> = ahead.iter().filter_map(|v| v["round"].as_u64()).collect();
        for r in 1..ROUNDS {
            assert!(rounds.contains(&r), "round {r} was not trained ahead: {rounds:?}\n{}", p.tail());
        }
        // The round's state landed in a running job (after some of its
        // steps) in at least one round.
        let landed = ahead.iter().filter(|v| v["steps_before_landing"].is_u64()).count();
        assert!(landed >= 1, "no state landed in a job trained ahead: {ahead:?}");
        for v in &ahead {
            let secs = v["secs"].as_f64().unwrap_or(f64::NAN);
            // Within half a step of the budget; a loaded machine's steps
            // are long, so the bound is generous, but far below what the
            // step cap would take.
            assert!(secs > 0.0 && secs < 3.0 * BUDGET_SECS, "{v}\n{}", p.tail());
        }
    }
    let url = nodes[0].events_of("metrics").first().and_then(|v| v["url"].as_str().map(str::to_string));
    let url = url.unwrap_or_else(|| panic!("node a printed no metrics address\n{}", nodes[0].tail()));
    let (head, text) = fetch("GET", &url);
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    let at_least = |name: &str, floor: f64| {
        let v = sample(&text, name);
        assert!(v.is_some_and(|v| v >= floor), "{name} = {v:?}, want at least {floor}:\n{text}");
    };
    at_least("murmur_rounds_closed_total", ROUNDS as f64);
    at_least("murmur_round", ROUNDS as f64);
    at_least("murmur_round_duration_seconds_count", ROUNDS as f64);
    at_least("murmur_tokens_trained_total", 1.0);
    let ratio = sample(&text, "murmur_training_time_ratio").unwrap_or(-1.0);
    assert!(ratio > 0.0 && ratio <= 1.0, "{text}");
    // The model out of the live run (the operator's key is admitted).
    let out = d.join("export");
    let o = std::process::Command::new(workspace_binary("murmur"))
        .args(["export", "--bootstrap", &addr, "--wait", "8", "--key"])
        .arg(&operator_key)
        .arg("--out")
        .arg(&out)
        .output()
        .expect("running murmur export");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "export from the live run failed: {stderr}\n{}", ctx());
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("murmur.json")).expect("murmur.json"))
            .expect("murmur.json is JSON");
    let exported = meta["state_id"].as_str().expect("state_id").to_string();
    // It is a state the run committed: one the nodes applied and reported.
    wait_until(
        "a node to report the exported state",
        Duration::from_secs(60),
        || nodes.iter().flat_map(|p| p.events_of("round")).any(|v| v["state_blob"] == exported.as_str()),
        || format!("exported {meta}\n{}", ctx()),
    );
}
