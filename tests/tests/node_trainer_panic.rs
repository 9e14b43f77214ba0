//! A trainer thread that panics (a backend assert, say) is noticed (issue
//! 18, done-when 1): the node starts it again and keeps closing rounds; when
//! it keeps dying, the node exits non-zero with a message that says so.
//! The node's telemetry and `/metrics` count the restarts.
//! Panics are injected with `MURMUR_TEST_TRAINER_PANICS=<round>:<count>`.

use std::time::{Duration, Instant};

use murmur_tests::{http_get, start_bootstrap, start_node_with_env, RunSettings};

fn settings() -> RunSettings {
    RunSettings { inner_steps: 4, batch: 2, quorum: 1, deadline: 20, seed: 5 }
}

#[test]
fn a_panicking_trainer_is_restarted_and_the_node_trains_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_boot, addr) = start_bootstrap(dir.path(), &settings());
    let node = start_node_with_env(
        dir.path(),
        "n",
        &addr,
        &["--discovery-wait", "0.2", "--metrics", "127.0.0.1:0"],
        &[("MURMUR_TEST_TRAINER_PANICS", "2:1")],
    );
    let metrics = node.wait_event("metrics", Duration::from_secs(90), |v| v["event"] == "metrics")["url"]
        .as_str()
        .map(String::from)
        .expect("metrics url");
    let restarted =
        node.wait_event("trainer_restarted", Duration::from_secs(120), |v| v["event"] == "trainer_restarted");
    assert!(
        restarted["reason"].as_str().is_some_and(|r| r.contains("injected trainer panic")),
        "{restarted}"
    );
    node.wait_event("trainer_started", Duration::from_secs(60), |v| v["event"] == "trainer_started");
    node.wait_event("a round closed after the restart", Duration::from_secs(120), |v| {
        v["event"] == "round" && v["round"].as_u64().is_some_and(|r| r >= 4)
    });
    assert!(node.events_of("trainer_failed").is_empty(), "{}", node.tail());
    // The metrics (and the node's telemetry, from the same count) say so.
    let (code, text) = http_get(&metrics).expect("GET /metrics");
    assert_eq!(code, 200);
    assert!(text.lines().any(|l| l == "murmur_trainer_restarts_total 1"), "{text}");
}

#[test]
fn a_trainer_that_keeps_dying_stops_the_node_with_an_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_boot, addr) = start_bootstrap(dir.path(), &settings());
    let mut node = start_node_with_env(
        dir.path(),
        "n",
        &addr,
        &["--discovery-wait", "0.2"],
        &[("MURMUR_TEST_TRAINER_PANICS", "1:1000")],
    );
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = node.try_wait() {
            break s;
        }
        assert!(t0.elapsed() < Duration::from_secs(180), "the node did not stop:\n{}", node.tail());
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(!status.success(), "exit {status}");
    let failed = node.events_of("trainer_failed");
    assert_eq!(failed.len(), 1, "{}", node.tail());
    assert_eq!(node.events_of("trainer_restarted").len(), 3, "{}", node.tail());
    let log = std::fs::read_to_string(&node.log).unwrap_or_default();
    assert!(log.contains("the trainer died 4 times"), "stderr says why:\n{log}");
}
