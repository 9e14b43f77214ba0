//! A committee run (k = 2) with overlapped, time-budgeted rounds: four node
//! processes train the tiny preset with a 1.5 s inner budget and an
//! `inner_steps` cap no round could reach in that time, so every round's
//! length is the budget's. Every node reports the same StateId for rounds 0
//! to 4; from round 1 on each node trains ahead (its job starts from the
//! last round's state before the round opens and the round's state lands
//! in it), and each job trained ahead spends about the budget in inner
//! steps. Shards combine per token (docs/protocol.md §6.4) and the sketch
//! audits check them so. One node serves Prometheus metrics: its rounds,
//! round times, tokens and share of time in inner steps are counted.

use std::time::Duration;

use murmur_tests::scrape::{fetch, sample};
use murmur_tests::{start_bootstrap_with, start_node, states_by_round, wait_until, Proc, RunSettings};

const ROUNDS: u64 = 5;
const BUDGET_SECS: f64 = 1.5;

#[test]
fn a_committee_run_trains_ahead_within_its_time_budget_on_one_state() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let settings = RunSettings { inner_steps: 100_000, batch: 2, quorum: 1, deadline: 30, seed: 47 };
    let budget = BUDGET_SECS.to_string();
    let extra = ["--committee-size", "2", "--overlap", "--inner-budget", budget.as_str()];
    let (boot, addr) = start_bootstrap_with(d, &settings, &extra);
    let nodes: Vec<Proc> = ["a", "b", "c", "d"]
        .iter()
        .map(|n| {
            let metrics: &[&str] = if *n == "a" { &["--metrics", "127.0.0.1:0"] } else { &[] };
            start_node(d, n, &addr, &[&["--device", "cpu"], metrics].concat())
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
}
