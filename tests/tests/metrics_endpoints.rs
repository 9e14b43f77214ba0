//! Issue 18, done-when 2: a real bootstrap server and a real node, each
//! started with `--metrics 127.0.0.1:0`, answer `GET /metrics` with
//! Prometheus text that `promtool check metrics` accepts and that holds the
//! metrics the issue names (rounds, tokens, tokens/s, bytes up and down,
//! peers, refusals by reason, round time, fraction of time training, store
//! size; for the bootstrap server peers, runs hosted, bytes served).
//!
//! promtool comes from Debian's `prometheus` package. Without it the lint
//! step is skipped with a note, unless `MURMUR_REQUIRE_PROMTOOL=1` (set by
//! .ci/run), which makes a missing promtool a failure.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use murmur_tests::scrape::{fetch, sample};
use murmur_tests::{start_bootstrap_with, start_node, wait_until, Proc, RunSettings};

/// Lint `text` with `promtool check metrics`; `false` if promtool is absent
/// and not required.
fn promtool_check(text: &str, what: &str) -> bool {
    let child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            if std::env::var("MURMUR_REQUIRE_PROMTOOL").is_ok_and(|v| v == "1") {
                panic!("MURMUR_REQUIRE_PROMTOOL=1 but promtool cannot be run ({e}); install Debian's prometheus package");
            }
            eprintln!("promtool not found ({e}): skipping the lint of the {what} metrics");
            return false;
        }
    };
    child.stdin.take().expect("stdin").write_all(text.as_bytes()).expect("feed promtool");
    let out = child.wait_with_output().expect("promtool ran");
    assert!(
        out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
        "promtool check metrics refused the {what} metrics:\n{}{}\n--- text ---\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    true
}

/// The metrics URL the bootstrap server printed on stderr.
fn bootstrap_metrics_url(boot: &Proc) -> String {
    let t0 = Instant::now();
    loop {
        let log = std::fs::read_to_string(&boot.log).unwrap_or_default();
        if let Some(url) = log.lines().find_map(|l| l.strip_prefix("murmur-bootstrap: metrics at ")) {
            return url.trim().to_string();
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "no metrics address in the log\n{}", boot.tail());
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn node_and_bootstrap_serve_prometheus_metrics_that_promtool_accepts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let settings = RunSettings { inner_steps: 4, batch: 2, quorum: 2, deadline: 20, seed: 5 };
    let (boot, addr) = start_bootstrap_with(d, &settings, &["--metrics", "127.0.0.1:0"]);
    let boot_url = bootstrap_metrics_url(&boot);
    let node = start_node(d, "a", &addr, &["--metrics", "127.0.0.1:0"]);
    // A second trainer, so that deltas and gossip flow between nodes.
    let other = start_node(d, "b", &addr, &[]);
    let node_url = node.wait_event("metrics", Duration::from_secs(90), |v| v["event"] == "metrics")["url"]
        .as_str()
        .expect("a url")
        .to_string();
    // One round closed by each node is all the metrics need (this test
    // checks the endpoint, not the run's liveness, which others test).
    wait_until(
        "a round to close on both nodes",
        Duration::from_secs(240),
        || node.last_round().is_some() && other.last_round().is_some(),
        || format!("{}\n{}\n{}", node.tail(), other.tail(), boot.tail()),
    );

    let (head, text) = fetch("GET", &node_url);
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    assert!(head.contains("Content-Type: text/plain; version=0.0.4"), "{head}");
    for name in [
        "murmur_rounds_closed_total",
        "murmur_round",
        "murmur_round_duration_seconds_count",
        "murmur_tokens_trained_total",
        "murmur_tokens_per_second",
        "murmur_training_seconds_total",
        "murmur_training_time_ratio",
        "murmur_sent_bytes_total",
        "murmur_received_bytes_total",
        "murmur_peers_connected",
        "murmur_training_peers_connected",
        "murmur_bans_total",
        "murmur_store_bytes",
        "murmur_uptime_seconds",
    ] {
        assert!(sample(&text, name).is_some(), "node metric {name} missing:\n{text}");
    }
    // Refusals by reason: the network's own reasons are there from the start.
    for reason in ["malformed", "bad_signature", "wrong_run", "oversized", "bad_chunk"] {
        assert!(
            text.contains(&format!("murmur_rejections_total{{reason=\"{reason}\"}} ")),
            "{reason}:\n{text}"
        );
    }
    assert!(sample(&text, "murmur_rounds_closed_total").is_some_and(|v| v >= 1.0), "{text}");
    assert!(sample(&text, "murmur_round_duration_seconds_count").is_some_and(|v| v >= 1.0), "{text}");
    assert!(sample(&text, "murmur_tokens_trained_total").is_some_and(|v| v > 0.0), "{text}");
    assert!(sample(&text, "murmur_tokens_per_second").is_some_and(|v| v > 0.0), "{text}");
    let ratio = sample(&text, "murmur_training_time_ratio").unwrap_or(-1.0);
    assert!(ratio > 0.0 && ratio <= 1.0, "{text}");
    assert!(sample(&text, "murmur_peers_connected").is_some_and(|v| v >= 1.0), "{text}");
    assert!(sample(&text, "murmur_received_bytes_total").is_some_and(|v| v > 0.0), "{text}");
    assert!(sample(&text, "murmur_sent_bytes_total").is_some_and(|v| v > 0.0), "{text}");
    assert!(sample(&text, "murmur_training_peers_connected").is_some_and(|v| v >= 1.0), "{text}");
    assert!(sample(&text, "murmur_store_bytes").is_some_and(|v| v > 0.0), "{text}");
    promtool_check(&text, "node");

    let (head, text) = fetch("GET", &boot_url);
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    for name in [
        "murmur_runs_hosted",
        "murmur_peers_connected",
        "murmur_training_peers_connected",
        "murmur_served_bytes_total",
        "murmur_requests_served_total",
        "murmur_sent_bytes_total",
        "murmur_store_bytes",
    ] {
        assert!(sample(&text, name).is_some(), "bootstrap metric {name} missing:\n{text}");
    }
    assert_eq!(sample(&text, "murmur_runs_hosted"), Some(1.0), "{text}");
    assert!(sample(&text, "murmur_training_peers_connected").is_some_and(|v| v >= 1.0), "{text}");
    // Both nodes asked it for the run (it serves the spec; genesis they compute).
    assert!(sample(&text, "murmur_requests_served_total").is_some_and(|v| v >= 2.0), "{text}");
    promtool_check(&text, "bootstrap");

    // One path, two methods, on both binaries.
    for url in [&node_url, &boot_url] {
        let (head, body) = fetch("HEAD", url);
        assert!(head.starts_with("HTTP/1.1 200 OK") && body.is_empty(), "{head}\n{body}");
        let other = url.replace("/metrics", "/");
        assert!(fetch("GET", &other).0.starts_with("HTTP/1.1 404"));
        assert!(fetch("POST", url).0.starts_with("HTTP/1.1 405"));
    }
}
