//! The churn figure's short version (issue 18): `scripts/churn.sh` with 4
//! nodes and 15 inner steps a round — the same run with no faults and with
//! a quarter of the nodes SIGKILLed and restarted every 3 rounds over 12 —
//! must end with every node on one StateId in both runs, each kill followed
//! by a restart, and the churned run's validation loss within 10% of the
//! calm run's. The full
//! figure (40 rounds, a kill every 10, within 3%) is in docs/benchmarks.md:
//! 12 rounds is early in training, where one node's missing rounds weigh
//! more (a 12-round run with H = 15 came out 3.0% below its calm run, a
//! 16-round one with H = 30 in CI 3.9% above). The size is CI's time budget:
//! the 16-round, H = 30 version took 288 s of it.

use std::process::Command;

use murmur_tests::repo_root;

#[test]
fn a_quarter_of_the_nodes_killed_every_few_rounds_and_the_run_goes_on() {
    let out = Command::new("bash")
        .arg(repo_root().join("scripts").join("churn.sh"))
        .args(["4", "12", "3", "15"])
        .env("MURMUR_TESTNET_NO_BUILD", "1")
        .env("MURMUR_CHURN_TOLERANCE", "0.10")
        .output()
        .expect("run scripts/churn.sh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "scripts/churn.sh failed ({}):\n{stdout}\n{stderr}", out.status);
    let figure: serde_json::Value = stdout
        .lines()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no JSON line:\n{stdout}\n{stderr}"));
    assert!(figure["kills"].as_u64().is_some_and(|k| k >= 2), "{figure}");
    assert_eq!(figure["kills"], figure["restarts"], "{figure}");
    let ratio = figure["ratio"].as_f64().unwrap_or(f64::NAN);
    assert!((ratio - 1.0).abs() <= 0.10, "{figure}");
}
