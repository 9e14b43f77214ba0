//! Multi-process network run (issue 5, done-when 1 and 2): a bootstrap
//! server and three nodes train the tiny preset for several rounds on
//! 127.0.0.1; every node reports the same StateId for every round; the
//! network's validation loss falls; a fourth node started at round 3 syncs
//! the state from its peers and has its delta included later; one node is
//! SIGKILLed mid-round, the others go on, and the restarted node catches up.

use std::time::Duration;

use murmur_tests::{start_bootstrap, start_node, states_by_round, wait_until, Proc, RunSettings};

fn context(procs: &[&Proc]) -> String {
    procs.iter().map(|p| p.tail()).collect::<Vec<_>>().join("\n")
}

#[test]
fn three_nodes_train_agree_survive_a_kill_and_take_a_late_joiner() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let settings = RunSettings { inner_steps: 12, batch: 4, quorum: 2, deadline: 20, seed: 11 };
    let (_boot, addr) = start_bootstrap(d, &settings);
    let a = start_node(d, "a", &addr, &[]);
    let b = start_node(d, "b", &addr, &[]);
    let mut c = start_node(d, "c", &addr, &[]);
    let long = Duration::from_secs(240);

    // The 4th node joins once the run is in round 3.
    wait_until(
        "round 2 to close",
        long,
        || a.last_round().is_some_and(|r| r >= 2),
        || context(&[&a, &b, &c]),
    );
    let late = start_node(d, "late", &addr, &[]);
    late.wait_event("started", Duration::from_secs(60), |v| v["event"] == "started");
    late.wait_event("caught up from peers", Duration::from_secs(90), |v| v["event"] == "resynced");

    // Kill c mid-round (right after it trains into a new round).
    let killed_at = c.last_round().unwrap_or(0);
    wait_until(
        "c to enter a new round",
        long,
        || c.last_round().is_some_and(|r| r > killed_at),
        || context(&[&a, &b, &c]),
    );
    std::thread::sleep(Duration::from_millis(300));
    c.kill();
    let round_at_kill = a.last_round().unwrap_or(0);
    // The others close rounds without it.
    wait_until(
        "rounds to close after the kill",
        long,
        || a.last_round().is_some_and(|r| r >= round_at_kill + 2),
        || context(&[&a, &b, &late]),
    );
    // Restarted, c catches up to the current StateId.
    let c2 = start_node(d, "c", &addr, &[]);
    let target = a.last_round().unwrap_or(0) + 1;
    wait_until(
        "the restarted node to report a round the others also closed",
        long,
        || {
            let (sa, sc) = (states_by_round(&a), states_by_round(&c2));
            sc.keys().any(|r| *r >= target && sa.get(r) == sc.get(r))
        },
        || context(&[&a, &b, &c2, &late]),
    );
    wait_until(
        "at least 6 rounds and the late joiner's delta included",
        long,
        || {
            a.last_round().is_some_and(|r| r >= 6)
                && late.events_of("round").iter().any(|v| v["contributed"] == true)
        },
        || context(&[&a, &b, &c2, &late]),
    );

    // Every node reports the same StateId for every round they both closed.
    let sa = states_by_round(&a);
    for p in [&b, &late, &c2] {
        for (r, s) in states_by_round(p) {
            if let Some(sa_r) = sa.get(&r) {
                assert_eq!(sa_r, &s, "round {r}: {} disagrees with a\n{}", p.name, context(&[&a, p]));
            }
        }
    }
    assert!(sa.len() >= 5, "a closed {} rounds", sa.len());
    // Network-wide validation loss falls.
    let losses: Vec<f64> = a.events_of("round").iter().filter_map(|v| v["val_loss"].as_f64()).collect();
    let (first, last) = (losses.first().copied().unwrap_or(0.0), losses.last().copied().unwrap_or(0.0));
    assert!(last < first, "val loss did not fall: {losses:?}");
}
