//! `scripts/testnet.sh --chaos` (issue 6, done-when 3): ten rounds in which
//! a random node is SIGKILLed and restarted every two rounds; the script
//! then checks that every surviving node ended on the common StateId, and
//! exits non-zero if not.

use std::time::Duration;

use murmur_tests::{is_murmur_process, Testnet};

#[test]
fn chaos_testnet_runs_ten_rounds_of_kills_and_restarts_and_the_nodes_agree() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path().display().to_string();
    let err = dir.path().join("testnet.err");
    let mut net = Testnet::start(
        &[
            "--nodes",
            "4",
            "--chaos",
            "--rounds",
            "10",
            "--inner-steps",
            "15",
            "--dir",
            &d,
            "--http",
            "127.0.0.1:0",
        ],
        &err,
    );
    let status = net.wait(Duration::from_secs(900));
    let out =
        format!("{}\n--- stderr ---\n{}", net.output(), std::fs::read_to_string(&err).unwrap_or_default());
    let status = status.unwrap_or_else(|| panic!("the chaos testnet did not finish in 15 minutes:\n{out}"));
    assert!(status.success(), "exit {status}:\n{out}");
    let kills = out.lines().filter(|l| l.starts_with("chaos: SIGKILL")).count();
    let restarts = out.lines().filter(|l| l.starts_with("chaos: restarting")).count();
    assert!(kills >= 3 && restarts == kills, "{kills} kills, {restarts} restarts:\n{out}");
    assert!(net.last_round().is_some_and(|r| r >= 10), "{out}");
    assert!(out.contains("done: all 4 surviving nodes are on state"), "{out}");
    assert!(net.pids().iter().all(|p| !is_murmur_process(*p)), "processes left:\n{out}");
}
