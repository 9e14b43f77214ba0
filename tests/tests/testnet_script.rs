//! `scripts/testnet.sh --nodes 4` (issue 6, done-when 2; issue 13,
//! done-when 3): the local testnet trains on the built-in Tiny Shakespeare,
//! gets below 2.3 nats per byte of validation loss by round 20 with the
//! dashboard serving all four nodes, and Ctrl-C (SIGINT to the script's
//! process group) leaves no murmur process running.

use std::time::Duration;

use murmur_tests::{http_get, is_murmur_process, wait_until, Testnet};

#[test]
fn four_node_testnet_learns_shakespeare_with_the_dashboard_and_ctrl_c_leaves_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path().display().to_string();
    let err = dir.path().join("testnet.err");
    let mut net = Testnet::start(&["--nodes", "4", "--dir", &d, "--http", "127.0.0.1:0"], &err);
    let ctx = |net: &Testnet| {
        format!("{}\n--- stderr ---\n{}", net.output(), std::fs::read_to_string(&err).unwrap_or_default())
    };
    wait_until(
        "round 20",
        Duration::from_secs(600),
        || net.last_round().is_some_and(|r| r >= 20),
        || ctx(&net),
    );
    let out = net.output();
    assert!(
        out.contains(", data shakespeare,"),
        "trains on the built-in Tiny Shakespeare by default:\n{out}"
    );
    // `round  12  state …  val_loss 2.2922  deltas 4  nodes agree 4/4  max MB/node 5.22`
    let best = out
        .lines()
        .filter(|l| l.starts_with("round "))
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let round: u64 = w.get(1)?.parse().ok()?;
            let val: f64 = w.get(5)?.parse().ok()?;
            (round <= 20).then_some(val)
        })
        .fold(f64::INFINITY, f64::min);
    assert!(best < 2.3, "validation loss by round 20 is {best}, not below 2.3 nats per byte:\n{out}");
    let url = out
        .lines()
        .find_map(|l| l.strip_prefix("dashboard: "))
        .unwrap_or_else(|| panic!("no dashboard URL:\n{out}"))
        .trim()
        .to_string();
    let (status, body) = http_get(&format!("{url}api/snapshot"))
        .unwrap_or_else(|| panic!("the dashboard at {url} did not answer"));
    assert_eq!(status, 200);
    let snap: serde_json::Value = serde_json::from_str(&body).expect("snapshot JSON");
    assert_eq!(snap["nodes"].as_array().map(Vec::len), Some(4), "the dashboard sees all four nodes: {body}");
    let (status, page) = http_get(&url).expect("the page");
    assert!(status == 200 && page.contains("murmur dashboard"), "{page}");
    // Every round line says all four nodes agree.
    for l in out.lines().filter(|l| l.starts_with("round ")) {
        assert!(l.contains("  nodes agree 4/4  "), "{l}\n{out}");
    }
    let pids = net.pids();
    assert_eq!(pids.len(), 6, "bootstrap, 4 nodes and the dashboard:\n{out}");
    assert!(pids.iter().all(|p| is_murmur_process(*p)), "all six run before Ctrl-C");

    net.interrupt();
    let status = net
        .wait(Duration::from_secs(30))
        .unwrap_or_else(|| panic!("Ctrl-C did not stop the testnet\n{}", ctx(&net)));
    assert!(status.success(), "the testnet exited with {status}\n{}", ctx(&net));
    let left: Vec<u32> = pids.into_iter().filter(|p| is_murmur_process(*p)).collect();
    assert!(left.is_empty(), "processes left after Ctrl-C: {left:?}\n{}", ctx(&net));
    assert!(net.output().contains("stopped 6 processes"), "{}", ctx(&net));
}
