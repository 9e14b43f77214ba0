//! Crash safety (issue 5, done-when 3): a training node is SIGKILLed at 20
//! random moments; after each restart it resumes from a consistent state
//! (its stored position decodes and hashes to its id) and no blob in its
//! store fails its hash.

use std::time::Duration;

use murmur_node::store::BlobStore;
use murmur_tests::{start_bootstrap, start_node, RunSettings};
use rand::Rng;

#[test]
fn a_node_killed_at_random_moments_resumes_consistently() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    // A lone node closes its first round a quarter of the deadline after
    // its own announcement (no roster yet): a short deadline lets it get
    // there between kills.
    let settings = RunSettings { inner_steps: 6, batch: 2, quorum: 1, deadline: 4, seed: 21 };
    let (_boot, addr) = start_bootstrap(d, &settings);
    let mut rng = rand::thread_rng();
    let mut last_round = 0u64;
    let mut resumed = 0;
    for i in 0..20 {
        let mut node = start_node(d, "n", &addr, &["--discovery-wait", "0.2"]);
        let started = node.wait_event("started", Duration::from_secs(60), |v| v["event"] == "started");
        let round = started["round"].as_u64().unwrap_or(0);
        assert!(
            round >= last_round,
            "restart {i}: round went back from {last_round} to {round}\n{}",
            node.tail()
        );
        if started["resumed"] == true {
            resumed += 1;
        }
        last_round = round;
        std::thread::sleep(Duration::from_millis(rng.gen_range(200..2500)));
        node.kill();
        let blobs = BlobStore::open(&d.join("n").join("blobs")).expect("open blobs");
        let bad = blobs.verify_all().expect("verify");
        assert!(bad.is_empty(), "restart {i}: blobs failing their hash: {bad:?}");
    }
    // A last restart: the node still trains on from where it was.
    let node = start_node(d, "n", &addr, &["--discovery-wait", "0.2"]);
    let v = node.wait_event("a closed round", Duration::from_secs(120), |v| v["event"] == "round");
    assert!(v["round"].as_u64().unwrap_or(0) >= last_round, "{}", node.tail());
    assert!(resumed >= 19, "only {resumed} restarts resumed from the store");
    assert!(last_round > 0, "no progress across 20 restarts");
}
