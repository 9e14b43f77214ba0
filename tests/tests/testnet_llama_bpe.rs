//! `scripts/testnet.sh --preset llama-tiny`: four nodes train the Llama
//! preset on Tiny Shakespeare in the BPE of 4,096 tokens trained on it
//! (`shakespeare-bpe`, its tokenizer.json fetched from the bootstrap server
//! with the dataset), on one StateId every round with the validation loss
//! falling, and the dashboard's sample is text decoded with that tokenizer.

use std::time::Duration;

use murmur_tests::{http_get, wait_until, Testnet};

/// Rounds the run trains at least.
const ROUNDS: u64 = 8;

#[test]
fn llama_tiny_testnet_trains_on_shakespeare_in_its_own_bpe_and_the_dashboard_decodes_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path().display().to_string();
    let err = dir.path().join("testnet.err");
    let mut net = Testnet::start(
        &["--preset", "llama-tiny", "--nodes", "4", "--dir", &d, "--http", "127.0.0.1:0"],
        &err,
    );
    let ctx = |net: &Testnet| {
        format!("{}\n--- stderr ---\n{}", net.output(), std::fs::read_to_string(&err).unwrap_or_default())
    };
    let mut text = None;
    wait_until(
        "round 8 and a dashboard sample",
        Duration::from_secs(600),
        || {
            text = text.take().or_else(|| sample_of(&net.output()));
            text.is_some() && net.last_round().is_some_and(|r| r >= ROUNDS)
        },
        || ctx(&net),
    );
    let out = net.output();
    net.interrupt();
    let _ = net.wait(Duration::from_secs(30));
    let text = text.unwrap_or_default();
    // Decoded text: words, not ids, replacement characters or the
    // byte-level stand-ins (`Ġ` for a space, `Ċ` for a newline) an
    // undecoded BPE token shows.
    let bad = ['\u{fffd}', 'Ġ', 'Ċ'];
    assert!(!text.contains(bad), "the sample is not decoded text: {text:?}");
    assert!(
        text.split(|c: char| !c.is_ascii_alphabetic()).any(|w| w.len() >= 2),
        "the sample has no word: {text:?}"
    );
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
    assert!(losses.len() as u64 > ROUNDS, "{out}");
    let (first, last) = (losses[0], losses[losses.len() - 1]);
    assert!(last < first - 0.5, "validation loss {first} → {last} did not fall:\n{out}");
    // Below ln(4096) = 8.32 from the start: the model has the tokenizer's vocabulary.
    assert!(first < 8.4, "{out}");
}

/// The dashboard's latest sample text, once it has one.
fn sample_of(out: &str) -> Option<String> {
    let url = out.lines().find_map(|l| l.strip_prefix("dashboard: "))?.trim().to_string();
    let (status, body) = http_get(&format!("{url}api/snapshot"))?;
    let snap: serde_json::Value = serde_json::from_str(&body).ok().filter(|_| status == 200)?;
    snap["sample"]["text"].as_str().filter(|t| !t.trim().is_empty()).map(str::to_string)
}
