//! A node that accepts no inbound connections (`--private`: it listens on
//! nothing, dials out, and reserves a relay circuit at the bootstrap
//! server) still trains and exchanges deltas (issue 5, done-when 4).

use std::time::Duration;

use murmur_tests::{start_bootstrap, start_node, states_by_round, wait_until, RunSettings};

#[test]
fn a_private_node_trains_and_exchanges_deltas() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let settings = RunSettings { inner_steps: 10, batch: 4, quorum: 2, deadline: 20, seed: 31 };
    let (_boot, addr) = start_bootstrap(d, &settings);
    let public = start_node(d, "public", &addr, &[]);
    let private = start_node(d, "private", &addr, &["--private"]);
    private.wait_event("started", Duration::from_secs(60), |v| v["event"] == "started");
    let ctx = || format!("{}\n{}", public.tail(), private.tail());
    wait_until(
        "three rounds with both deltas",
        Duration::from_secs(180),
        || {
            [&public, &private].iter().all(|p| {
                p.events_of("round")
                    .iter()
                    .filter(|v| v["included"].as_u64() == Some(2) && v["contributed"] == true)
                    .count()
                    >= 3
            })
        },
        ctx,
    );
    // The private node never listened directly, yet agrees on every round.
    assert!(
        private
            .events_of("listening")
            .iter()
            .all(|v| v["addr"].as_str().is_some_and(|a| a.contains("p2p-circuit"))),
        "{}",
        private.tail()
    );
    wait_until(
        "the private node to report 3 rounds",
        Duration::from_secs(60),
        || states_by_round(&private).len() >= 3,
        ctx,
    );
    let (sp, sq) = (states_by_round(&public), states_by_round(&private));
    let common: Vec<_> = sq.keys().filter(|r| sp.contains_key(r)).collect();
    assert!(!common.is_empty());
    for r in common {
        assert_eq!(sp[r], sq[r], "round {r}");
    }
}
