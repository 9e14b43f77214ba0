//! A long run keeps the store bounded: two nodes run 200 rounds; one is
//! frozen (SIGSTOP) for a few seconds every 20 rounds, so it falls behind
//! and re-syncs to states it fetches. Sampled all along, its store never
//! holds more than the current state plus `KEPT_STATES` others, shard
//! payloads of at most three rounds (and the next's being written), and `STORE_BOUND_BYTES` in all (sled metadata
//! included), and at the end the two are on one state. Each freeze leaves
//! two nodes that each closed rounds alone, each roster without the other,
//! and the side whose key is the smaller keeps its chain while the other
//! moves to it (a rival chain of former members, docs/protocol.md §10).

use std::path::Path;
use std::time::Duration;

use murmur_node::runtime::committee::KEPT_STATES;
use murmur_tests::{start_bootstrap, start_node, states_by_round, wait_until, RunSettings};

/// The stated bound for this run's shape (tiny preset: a state is 6.7 MB,
/// an int8 delta 0.84 MB).
const STORE_BOUND_BYTES: u64 = 48 << 20;
const ROUNDS: u64 = 200;

fn files_in(dir: &Path) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else { return out };
    for e in entries.flatten() {
        let Ok(meta) = e.metadata() else { continue };
        if meta.is_dir() {
            out.extend(files_in(&e.path()));
        } else {
            out.push((e.path().display().to_string(), meta.len()));
        }
    }
    out
}

#[test]
fn a_node_running_200_rounds_apart_and_back_keeps_its_store_bounded() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let settings = RunSettings { inner_steps: 2, batch: 1, quorum: 1, deadline: 2, seed: 200 };
    let (_boot, addr) = start_bootstrap(d, &settings);
    let a = start_node(d, "a", &addr, &["--discovery-wait", "0.5"]);
    let b = start_node(d, "b", &addr, &["--discovery-wait", "0.5"]);
    // Which side moves depends on the keys (random): both stores are
    // sampled, and both nodes' re-syncs counted.
    let stores = [d.join("a"), d.join("b")];
    let (mut max_bytes, mut max_states, mut max_deltas) = (0u64, 0usize, 0usize);
    let mut next_freeze = 20;
    let sample = |max_bytes: &mut u64, max_states: &mut usize, max_deltas: &mut usize| {
        for store in &stores {
            let files = files_in(store);
            *max_bytes = (*max_bytes).max(files.iter().map(|f| f.1).sum());
            *max_states = (*max_states).max(files.iter().filter(|f| f.0.contains("/blobs/state/")).count());
            *max_deltas = (*max_deltas).max(files.iter().filter(|f| f.0.contains("/blobs/delta/")).count());
        }
    };
    wait_until(
        "node b to reach round 200",
        Duration::from_secs(900),
        || {
            sample(&mut max_bytes, &mut max_states, &mut max_deltas);
            let r = b.last_round().unwrap_or(0);
            if r >= next_freeze && r < ROUNDS - 10 {
                next_freeze += 20;
                b.signal(libc::SIGSTOP);
                std::thread::sleep(Duration::from_secs(5));
                b.signal(libc::SIGCONT);
            }
            r >= ROUNDS
        },
        || format!("{}\n{}", a.tail(), b.tail()),
    );
    sample(&mut max_bytes, &mut max_states, &mut max_deltas);
    let resyncs = a.events_of("resynced").len() + b.events_of("resynced").len();
    eprintln!("{resyncs} re-syncs; at most {max_states} states, {max_deltas} deltas, {max_bytes} bytes held");
    assert!(resyncs >= 3, "only {resyncs} re-syncs: the scenario did not happen\n{}\n{}", a.tail(), b.tail());
    // The current state, `KEPT_STATES` others, and one being written (a
    // fetch or an aggregation) while an old one is being deleted.
    assert!(max_states <= KEPT_STATES + 2, "{max_states} states held at once");
    // Delta blobs are shard payloads: per round at most 4 (the node's own
    // two shards, the other's input for the shard it owns and, as a
    // backup, for the other's), of the current round and the two before
    // it, and the next round's 4 being written.
    assert!(max_deltas <= 16, "{max_deltas} deltas held at once");
    assert!(max_bytes <= STORE_BOUND_BYTES, "the store reached {max_bytes} bytes");
    wait_until(
        "the two nodes to close a round past 200 on one state",
        Duration::from_secs(60),
        || {
            let (sa, sb) = (states_by_round(&a), states_by_round(&b));
            sb.iter().any(|(r, s)| *r >= ROUNDS && sa.get(r) == Some(s))
        },
        || format!("{}\n{}", a.tail(), b.tail()),
    );
}
