//! A committee run (k = 2) with ticket admission: three nodes hold
//! tickets an operator issued and train three rounds on one StateId; round
//! 0 seats those three and no one else. A fourth node with no ticket is refused the RunSpec by the
//! bootstrap server and never joins: its key is on no roster and no node
//! reports it.

use std::time::Duration;

use murmur_tests::{
    issue_ticket, start_bootstrap_with, start_node, states_by_round, wait_until, write_node_key, Proc,
    RunSettings,
};

#[test]
fn a_committee_run_admits_ticket_holders_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let settings = RunSettings { inner_steps: 4, batch: 2, quorum: 1, deadline: 30, seed: 61 };
    let operator = murmur_protocol::NodeKey::from_seed([0x0c; 32]);
    let operator_key = d.join("operator.key");
    std::fs::write(&operator_key, operator.seed()).expect("operator key");
    let op_hex = operator.public().to_string();
    let extra = ["--admission", "tickets", "--operator", op_hex.as_str(), "--committee-size", "2"];
    let (_boot, addr) = start_bootstrap_with(d, &settings, &extra);
    let mut nodes: Vec<Proc> = Vec::new();
    for (name, seed) in [("a", [0xa2; 32]), ("b", [0xb2; 32]), ("c", [0xc2; 32])] {
        let holder = write_node_key(d, name, seed);
        let ticket = issue_ticket(d, &operator_key, &["--bootstrap", &addr], &holder, name);
        nodes.push(start_node(
            d,
            name,
            &addr,
            &["--ticket", &ticket.display().to_string(), "--device", "cpu"],
        ));
    }
    write_node_key(d, "x", [0x77; 32]);
    let outsider = start_node(d, "x", &addr, &["--device", "cpu"]);
    let ctx =
        || nodes.iter().chain(std::iter::once(&outsider)).map(Proc::tail).collect::<Vec<_>>().join("\n");
    wait_until(
        "every ticket holder to close round 2",
        Duration::from_secs(600),
        || nodes.iter().all(|p| p.last_round().is_some_and(|r| r >= 2)),
        ctx,
    );
    let first = states_by_round(&nodes[0]);
    for p in &nodes {
        let s = states_by_round(p);
        for r in 0..=2 {
            assert_eq!(s.get(&r), first.get(&r), "round {r}\n{}", ctx());
        }
    }
    let rounds = nodes[0].events_of("round");
    let at = |r: u64| rounds.iter().find(|v| v["round"] == r).cloned().unwrap_or_default();
    assert_eq!(at(0)["roster"].as_u64(), Some(3), "round 0 seats the three ticket holders: {}", at(0));
    for r in 1..=2 {
        assert_eq!(at(r)["shards"].as_u64(), Some(1), "round {r}: one committee of the three: {}", at(r));
        assert_eq!(at(r)["roster"].as_u64(), Some(3), "round {r}: {}", at(r));
    }
    // The outsider got no RunSpec: it stopped without joining.
    assert!(outsider.events_of("joined").is_empty(), "{}", outsider.tail());
    let outsider_key = murmur_protocol::NodeKey::from_seed([0x77; 32]).public().to_string();
    for p in &nodes {
        assert!(!p.tail().contains(&outsider_key), "a node reported the outsider's key\n{}", p.tail());
    }
}
