//! A hostile peer inside a ticket run: four honest nodes (one of them
//! training slower than the rest) and one hostile node (`murmur-hostile`,
//! built from the project's crates), each holding an operator's ticket. Every round the hostile node signs results with its
//! admitted key for rounds far ahead and for the current round, each of a
//! made-up delta trained from a made-up StateId; announces a delta and
//! offers its every shard to every honest node, but serves no payload and
//! answers every request `Busy`; relays gossip validly signed by Sybil keys
//! that hold no ticket; and from its third round on floods the honest nodes
//! with table and chunk requests for their states' parameters, far past
//! the share a node serves one peer.
//!
//! The honest nodes close every round without catching up and agree on its
//! StateId, through the round its last result five ahead names; none ever
//! names a made-up state; their validation loss falls; no honest node bans
//! another or charges it an overrun; and every honest node charges the
//! hostile node (`overrun` for the flood, `busy` for the shards it never
//! served) and bans it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use murmur_tests::{
    issue_ticket, start_node_with_env, start_ticket_run, states_by_round, wait_until, write_node_key, Proc,
    RunSettings, TicketRun,
};
use serde_json::Value;

fn context(procs: &[&Proc]) -> String {
    procs.iter().map(|p| p.tail()).collect::<Vec<_>>().join("\n")
}

/// The peers `p` banned.
fn bans(p: &Proc) -> BTreeSet<String> {
    p.events_of("banned").iter().filter_map(|v| v["peer"].as_str().map(String::from)).collect()
}

/// What `p` charged `peer` for, by reason.
fn charges(p: &Proc, peer: &str) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for v in p.events_of("rejected").iter().filter(|v| v["peer"].as_str() == Some(peer)) {
        *m.entry(v["reason"].as_str().unwrap_or("?").to_string()).or_insert(0) += 1;
    }
    m
}

#[test]
fn a_hostile_peer_with_a_ticket_moves_no_honest_node_and_is_banned() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let settings = RunSettings { inner_steps: 8, batch: 4, quorum: 3, deadline: 8, seed: 47 };
    let TicketRun { boot: _boot, addr, operator_key, .. } = start_ticket_run(d, &settings, [0x0c; 32]);
    let run = ["--bootstrap", addr.as_str()];
    let mut honest = Vec::new();
    for (name, seed) in [("a", [0xa2; 32]), ("b", [0xb2; 32]), ("c", [0xc2; 32]), ("e", [0xe2; 32])] {
        let holder = write_node_key(d, name, seed);
        let ticket = issue_ticket(d, &operator_key, &run, &holder, name);
        let args = ["--ticket", &ticket.display().to_string()];
        // `e` trains 2 s longer a round, so the owners still take inputs
        // when the hostile node offers its shards (it learns of a round
        // from the first trainer that has cut its delta).
        let slower: &[(&str, &str)] = if name == "e" { &[("MURMUR_TEST_STEP_DELAY_MS", "250")] } else { &[] };
        honest.push(start_node_with_env(d, name, &addr, &args, slower));
    }
    let all: Vec<&Proc> = honest.iter().collect();
    let ctx = || context(&all);
    wait_until(
        "every honest node to close round 0",
        Duration::from_secs(180),
        || honest.iter().all(|p| p.last_round().is_some()),
        ctx,
    );

    let holder = write_node_key(d, "hostile", [0x66; 32]);
    let ticket = issue_ticket(d, &operator_key, &run, &holder, "hostile");
    let args: Vec<String> = [
        "--bootstrap",
        &addr,
        "--key",
        &d.join("hostile").join("node.key").display().to_string(),
        "--ticket",
        &ticket.display().to_string(),
        "--flood-after",
        "3",
    ]
    .map(String::from)
    .to_vec();
    let joined_at = honest.iter().filter_map(Proc::last_round).max().unwrap_or(0);
    let hostile = Proc::spawn("murmur-hostile", &args, "hostile", d);
    let hostile_id = hostile.wait_event("started", Duration::from_secs(60), |v| v["event"] == "started")
        ["peer_id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let with_hostile = || format!("{}\n{}", ctx(), hostile.tail());
    wait_until(
        "every honest node to ban the hostile node",
        Duration::from_secs(150),
        || honest.iter().all(|p| bans(p).contains(&hostile_id)),
        with_hostile,
    );
    let banned_at = honest.iter().filter_map(Proc::last_round).max().unwrap_or(0);
    // Its last results for a round five ahead come due in that round.
    let mischief = hostile.events_of("mischief").iter().filter_map(|v| v["round"].as_u64()).max();
    let due = mischief.unwrap_or(banned_at) + 5;
    eprintln!(
        "the hostile node joined after round {joined_at}, was banned by all in round {banned_at}; \
         its last result five ahead is for round {due}"
    );
    wait_until(
        "the honest nodes to close that round",
        Duration::from_secs(120),
        || honest.iter().all(|p| p.last_round().is_some_and(|r| r >= due)),
        with_hostile,
    );

    // It did each thing it is for.
    let acted = hostile.events_of("acted").last().cloned().unwrap_or(Value::Null);
    for what in [
        "rounds",
        "results",
        "far_results",
        "manifests",
        "offers",
        "sybil",
        "busy",
        "flood_sent",
        "flood_busy",
    ] {
        assert!(
            acted[what].as_u64() > Some(0),
            "the hostile node never did `{what}`: {acted}\n{}",
            hostile.tail()
        );
    }
    assert!(acted["rounds"].as_u64() >= Some(3), "it floods from its third round on: {acted}");
    let fakes: BTreeSet<String> = hostile
        .events_of("mischief")
        .iter()
        .flat_map(|v| v["fakes"].as_array().cloned().unwrap_or_default())
        .filter_map(|f| f.as_str().map(String::from))
        .collect();
    assert!(!fakes.is_empty(), "{}", hostile.tail());

    // No honest node catches up once the hostile node is in (each closes
    // every round itself), and they agree on each round.
    for p in &honest {
        let resynced: Vec<Value> = p
            .events_of("resynced")
            .into_iter()
            .filter(|v| v["round"].as_u64().is_some_and(|r| r > joined_at + 1))
            .collect();
        assert!(resynced.is_empty(), "{} caught up: {resynced:?}\n{}", p.name, p.tail());
    }
    let states: Vec<BTreeMap<u64, String>> = honest.iter().map(states_by_round).collect();
    let last = states.iter().filter_map(|s| s.keys().next_back().copied()).min().unwrap_or(0);
    assert!(last >= due, "rounds {:?}", states.iter().map(|s| s.len()).collect::<Vec<_>>());
    for r in 0..=last {
        let at_r: Vec<Option<&String>> = states.iter().map(|s| s.get(&r)).collect();
        assert!(
            at_r.iter().all(Option::is_some),
            "round {r} missing on a node: {at_r:?}\n{}",
            with_hostile()
        );
        assert!(at_r.windows(2).all(|w| w[0] == w[1]), "round {r}: the honest nodes disagree: {at_r:?}");
    }
    for p in &honest {
        let named: Vec<&String> = fakes.iter().filter(|f| p.lines().iter().any(|l| l.contains(*f))).collect();
        assert!(named.is_empty(), "{} names a made-up state {named:?}\n{}", p.name, p.tail());
    }

    // Their validation loss falls.
    for p in &honest {
        let losses: Vec<f64> = p.events_of("round").iter().filter_map(|v| v["val_loss"].as_f64()).collect();
        let (first, end) = (losses.first().copied(), losses.last().copied());
        assert!(losses.len() >= 3 && end < first, "{}: val loss did not fall: {losses:?}", p.name);
    }

    // No honest node is banned or charged an overrun; the hostile node is charged and banned.
    let honest_ids: Vec<String> = honest.iter().filter_map(Proc::peer_id).collect();
    assert_eq!(honest_ids.len(), 4);
    for p in &honest {
        let wrongly: Vec<String> = bans(p).into_iter().filter(|b| honest_ids.contains(b)).collect();
        assert!(wrongly.is_empty(), "{} banned honest nodes {wrongly:?}\n{}", p.name, p.tail());
        for h in &honest_ids {
            let c = charges(p, h);
            assert!(!c.contains_key("overrun"), "{} charged honest {h} an overrun: {c:?}", p.name);
        }
        // For its flood past the share, and for the delta it never served.
        let charged = charges(p, &hostile_id);
        assert!(
            charged.contains_key("overrun") && charged.contains_key("busy"),
            "{} charged the hostile node only {charged:?}",
            p.name
        );
        eprintln!("{} charged the hostile node {charged:?} and banned it", p.name);
    }
}
