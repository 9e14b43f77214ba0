//! The churn figure's short version (issue 18): `scripts/churn.sh` with 4
//! nodes — the same run with no faults and with a quarter of the nodes
//! SIGKILLed and restarted every few rounds — must end with every node on
//! one StateId in both runs and the churned run's validation loss within 3%
//! of the calm run's (the script's own check). The full figure (8 nodes, 40
//! rounds, every 10) is in docs/benchmarks.md.

use std::process::Command;

use murmur_tests::repo_root;

#[test]
fn a_quarter_of_the_nodes_killed_every_few_rounds_costs_under_3_percent_of_val_loss() {
    let out = Command::new("bash")
        .arg(repo_root().join("scripts").join("churn.sh"))
        .args(["4", "16", "4", "30"])
        .env("MURMUR_TESTNET_NO_BUILD", "1")
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
    assert!((ratio - 1.0).abs() <= 0.03, "{figure}");
}
