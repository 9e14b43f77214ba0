//! The bootstrap server's archive: with `--checkpoint-dir X
//! --checkpoint-every 2 --keep 2`, three nodes train ten rounds; at no time
//! does X hold more than two exports, at the end it holds exactly those of
//! rounds 7 and 9, and each loads and names the state the nodes committed
//! for its round. Once in version 1's rounds (the archive follows the
//! RoundCommits), once with one owner per shard (it follows the results,
//! each naming the state its signer trained from, and fetches a state as
//! parameters and ledger).

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use murmur_node::checkpoint::run_export::{load_model, read_meta};
use murmur_tests::{params_by_round, start_bootstrap_with, start_node, wait_until, Proc, RunSettings};

fn exports(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .map(|d| d.filter_map(Result::ok).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default()
}

#[test]
fn the_archive_keeps_the_last_k_committed_states_each_loadable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let archive = d.join("archive");
    let settings = RunSettings { inner_steps: 8, batch: 4, quorum: 3, deadline: 30, seed: 31 };
    let archive_arg = archive.display().to_string();
    let extra = ["--checkpoint-dir", &archive_arg, "--checkpoint-every", "2", "--keep", "2"];
    let (boot, addr) = start_bootstrap_with(d, &settings, &extra);
    let nodes: Vec<Proc> =
        ["a", "b", "c"].iter().map(|n| start_node(d, n, &addr, &["--device", "cpu"])).collect();
    let context =
        || nodes.iter().chain(std::iter::once(&boot)).map(Proc::tail).collect::<Vec<_>>().join("\n");
    let t0 = Instant::now();
    let mut most = 0;
    let want: BTreeSet<String> = ["round-00000007", "round-00000009"].iter().map(|s| s.to_string()).collect();
    loop {
        let held = exports(&archive);
        most = most.max(held.iter().filter(|n| n.starts_with("round-")).count());
        if held == want {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(300), "the archive holds {held:?}\n{}", context());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(most <= 2, "the archive held {most} exports at once");
    wait_until("a to report round 9", Duration::from_secs(60), || nodes[0].last_round() >= Some(9), context);
    let states = params_by_round(&nodes[0]);
    for (name, round) in [("round-00000007", 7u64), ("round-00000009", 9)] {
        let path = archive.join(name);
        let meta = read_meta(&path).expect("murmur.json");
        assert_eq!(meta.round, Some(round));
        assert_eq!(Some(&meta.state_id), states.get(&round), "{name} is not the committed state");
        let (cfg, params) = load_model(&path).expect("the export loads");
        assert_eq!(params.iter().map(Vec::len).sum::<usize>(), cfg.param_count());
        assert_eq!(meta.tokens_from_round, 0);
        assert!(meta.tokens_seen > 0);
    }
}
