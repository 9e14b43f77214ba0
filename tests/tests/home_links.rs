//! The emulated-home-links figure's short version (issue 15):
//! `scripts/home-links.sh` with 2 nodes, each in its own network namespace
//! behind a 2 Mbit/s up, 5 Mbit/s down, 40 ms link (the tiny preset's int8
//! delta takes about 3.4 s to upload there), 3 rounds with a 10 s inner
//! budget (at least twice the exchange, so overlapped rounds do not wait
//! half-way, docs/protocol.md §6.3), once blocking and once overlapped. Overlapped rounds must end
//! every round with both nodes on one StateId and leave each node less time
//! idle than the blocking run's least idle node. The full figure (4 nodes,
//! the small preset, 20/50 Mbit/s, 10 rounds, a slow node) is in
//! docs/benchmarks.md. Needs root and iproute2; `MURMUR_REQUIRE_NETNS=1`
//! (set by `.ci/run`) fails the test where they are missing.

use std::process::Command;

use murmur_tests::{netns, repo_root};

#[test]
fn overlapped_rounds_agree_every_round_and_idle_less_than_blocking_ones_behind_home_links() {
    if let Err(why) = netns::available() {
        assert!(std::env::var("MURMUR_REQUIRE_NETNS").as_deref() != Ok("1"), "MURMUR_REQUIRE_NETNS=1: {why}");
        eprintln!("skipping the home-links test: {why}");
        return;
    }
    let out = Command::new("bash")
        .arg(repo_root().join("scripts").join("home-links.sh"))
        .args(["2", "3", "tiny", "2:5:40", "10", "1000", "4"])
        .env("MURMUR_TESTNET_NO_BUILD", "1")
        .output()
        .expect("run scripts/home-links.sh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "scripts/home-links.sh failed ({}):\n{stdout}\n{stderr}", out.status);
    let figure: serde_json::Value = stdout
        .lines()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no JSON line:\n{stdout}\n{stderr}"));
    eprintln!("{figure}");
    let (blocking, overlapped) = (&figure["runs"]["blocking"], &figure["runs"]["overlapped"]);
    assert_eq!(overlapped["one_state_every_round"], true, "{figure}");
    assert!(overlapped["rounds_reported"].as_u64().is_some_and(|r| r >= 3), "{figure}");
    let idle = |run: &serde_json::Value, which: &str| 1.0 - run[which].as_f64().unwrap_or(f64::NAN);
    let (most_idle_overlapped, least_idle_blocking) =
        (idle(overlapped, "min_train_frac"), idle(blocking, "max_train_frac"));
    assert!(most_idle_overlapped < least_idle_blocking, "{figure}");
    // Every node's delta made it into every round it reported, in both runs.
    for run in [blocking, overlapped] {
        for (node, u) in run["nodes"].as_object().expect("nodes") {
            assert_eq!(u["contributed"], u["reported"], "{node}: {figure}");
        }
    }
}
