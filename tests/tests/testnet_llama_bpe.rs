//! `scripts/testnet.sh --preset llama-tiny`: four nodes train the Llama
//! preset on Tiny Shakespeare in the BPE of 4,096 tokens trained on it
//! (`shakespeare-bpe`, its tokenizer.json fetched from the bootstrap server
//! with the dataset), on one StateId every round with the validation loss
//! falling, and the dashboard's sample is text decoded with that tokenizer.

use std::time::Duration;

use murmur_tests::{http_get, wait_until, Testnet};

/// Rounds the run trains.
const ROUNDS: u64 = 8;

#[test]
fn llama_tiny_testnet_trains_on_shakespeare_in_its_own_bpe_and_the_dashboard_decodes_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path().display().to_string();
    let err = dir.path().join("testnet.err");
    let rounds = ROUNDS.to_string();
    let args =
        ["--preset", "llama-tiny", "--nodes", "4", "--rounds", &rounds, "--dir", &d, "--http", "127.0.0.1:0"];
    let net = Testnet::start(&args, &err);
    let ctx = |net: &Testnet| {
        format!("{}\n--- stderr ---\n{}", net.output(), std::fs::read_to_string(&err).unwrap_or_default())
    };
    wait_until(
        "a dashboard sample",
        Duration::from_secs(600),
        || sample_of(net.output()).is_some(),
        || ctx(&net),
    );
    let text = sample_of(net.output()).unwrap_or_default();
    // Decoded text: the tokenizer's words, not ids or replacement characters.
    assert!(!text.contains('\u{fffd}'), "the sample is not valid decoded text: {text:?}");
    assert!(text.chars().filter(|c| c.is_ascii_alphabetic()).count() * 2 > text.len(), "{text:?}");
    wait_until(
        "the last round",
        Duration::from_secs(600),
        || net.last_round().is_some_and(|r| r >= ROUNDS - 1),
        || ctx(&net),
    );
    let out = net.output();
    assert!(
        out.contains(", preset llama-tiny, data shakespeare-bpe,"),
        "the Llama preset trains on the BPE dataset:\n{out}"
    );
    // `round  3  state …  val_loss 5.1234  deltas 4  nodes agree 4/4  …`
    let losses: Vec<f64> = out
        .lines()
        .filter(|l| l.starts_with("round "))
        .inspect(|l| assert!(l.contains("  nodes agree 4/4  "), "{l}\n{out}"))
        .filter_map(|l| l.split_whitespace().nth(5)?.parse().ok())
        .collect();
    assert!(losses.len() as u64 >= ROUNDS - 1, "{out}");
    let (first, last) = (losses[0], losses[losses.len() - 1]);
    assert!(last < first - 0.3, "validation loss {first} → {last} did not fall:\n{out}");
    // ln(4096) = 8.3: the model has the tokenizer's vocabulary.
    assert!(first < 8.4, "{out}");
}

/// The dashboard's latest sample text, once it has one.
fn sample_of(out: String) -> Option<String> {
    let url = out.lines().find_map(|l| l.strip_prefix("dashboard: "))?.trim().to_string();
    let (status, body) = http_get(&format!("{url}api/snapshot"))?;
    let snap: serde_json::Value = serde_json::from_str(&body).ok().filter(|_| status == 200)?;
    snap["sample"]["text"].as_str().filter(|t| !t.trim().is_empty()).map(str::to_string)
}
