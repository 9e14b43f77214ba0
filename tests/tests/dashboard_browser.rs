//! The dashboard in a real headless browser (issue 6, done-when 1): a
//! bootstrap server and two nodes train; `murmur dashboard` watches them; a
//! headless Chromium loads the page, runs its script against the live event
//! stream, and the DOM it ends with must hold chart points for both nodes
//! and the network, and a peer graph with both nodes. A screenshot is
//! written to target/dashboard.png.
//!
//! The browser is driven over the DevTools protocol (`murmur_tests::browser`)
//! and polled until the page shows what the event stream delivered.
//! Chromium is found as `$MURMUR_CHROMIUM` or `chromium`/`chromium-browser`/
//! `google-chrome` on PATH. Without one the test fails when
//! `MURMUR_REQUIRE_BROWSER=1` (as in CI) and otherwise says so and skips.

use std::time::Duration;

use murmur_tests::browser::{find_chromium, Browser};
use murmur_tests::{http_get, start_bootstrap, start_node, target_dir, wait_until, Proc, RunSettings};

/// The markup of the element that starts with `open` (e.g. `<svg id="x"`) up to `close`.
fn element<'a>(dom: &'a str, open: &str, close: &str) -> &'a str {
    let start = dom.find(open).unwrap_or_else(|| panic!("no {open} in the DOM"));
    let end = dom[start..].find(close).map_or(dom.len(), |e| start + e + close.len());
    &dom[start..end]
}

/// The value of `attr="…"` in the first tag of `markup`.
fn attr(markup: &str, attr: &str) -> Option<String> {
    let tag = &markup[..markup.find('>')?];
    let at = tag.find(&format!("{attr}=\""))? + attr.len() + 2;
    tag[at..].split('"').next().map(String::from)
}

/// `data-points` of every series path in `chart`.
fn series_points(chart: &str) -> Vec<usize> {
    chart
        .split("<path ")
        .skip(1)
        .filter(|p| p.contains("class=\"series"))
        .filter_map(|p| attr(&format!("<{p}"), "data-points").and_then(|n| n.parse().ok()))
        .collect()
}

#[test]
fn the_dashboard_shows_live_charts_and_both_nodes_in_a_headless_browser() {
    let Some(chromium) = find_chromium() else {
        if std::env::var("MURMUR_REQUIRE_BROWSER").as_deref() == Ok("1") {
            panic!("MURMUR_REQUIRE_BROWSER=1 but no Chromium was found (install Debian's `chromium`)");
        }
        eprintln!("skipping: no Chromium found (set MURMUR_CHROMIUM or install chromium)");
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let settings = RunSettings { inner_steps: 10, batch: 4, quorum: 2, deadline: 30, seed: 21 };
    let (_boot, addr) = start_bootstrap(d, &settings);
    let a = start_node(d, "a", &addr, &[]);
    let b = start_node(d, "b", &addr, &[]);
    let args: Vec<String> =
        ["dashboard", "--bootstrap", &addr, "--http", "127.0.0.1:0", "--no-mdns", "--json"]
            .iter()
            .map(|s| s.to_string())
            .collect();
    let dash = Proc::spawn("murmur", &args, "dashboard", d);
    let url = dash.wait_event("with its URL", Duration::from_secs(60), |v| v["event"] == "dashboard")["url"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let (ida, idb) = (
        a.wait_event("started", Duration::from_secs(60), |v| v["event"] == "started")["peer_id"]
            .as_str()
            .map(String::from),
        b.wait_event("started", Duration::from_secs(60), |v| v["event"] == "started")["peer_id"]
            .as_str()
            .map(String::from),
    );
    let (ida, idb) = (ida.expect("a's peer id"), idb.expect("b's peer id"));
    let ctx = || [&a, &b, &dash].iter().map(|p| p.tail()).collect::<Vec<_>>().join("\n");
    // The dashboard's own snapshot holds two nodes with two rounds each, their link, and a sample.
    let snapshot_ready = || {
        let Some((200, body)) = http_get(&format!("{url}api/snapshot")) else { return false };
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&body) else { return false };
        let nodes = v["nodes"].as_array().cloned().unwrap_or_default();
        nodes.len() == 2
            && nodes.iter().all(|n| n["history"].as_array().is_some_and(|h| h.len() >= 2))
            && v["graph"]["links"].as_array().is_some_and(|l| !l.is_empty())
            && v["sample"].is_object()
    };
    wait_until(
        "the dashboard to see two rounds from both nodes",
        Duration::from_secs(300),
        snapshot_ready,
        ctx,
    );

    let mut browser = Browser::launch(&chromium, 1400, 1900);
    browser.goto(&url);
    // The page renders the snapshot it fetches and each one the event
    // stream delivers; it counts the streamed ones on <body>.
    browser.wait_for(
        "the page to draw a snapshot from its event stream",
        "Number(document.body.dataset.streamed || 0) >= 1 \
         && document.querySelectorAll('#chart-loss path.series').length >= 3",
        Duration::from_secs(60),
    );
    let dom = browser.dom();
    let loss = element(&dom, "<svg id=\"chart-loss\"", "</svg>");
    let points = series_points(loss);
    assert!(
        points.len() >= 3 && points.iter().all(|n| *n >= 2),
        "the loss chart should draw both nodes and the network with ≥2 points each: {points:?}\n{loss}"
    );
    assert!(loss.contains("entropy floor"), "the entropy floor is drawn: {loss}");
    let tokens = element(&dom, "<svg id=\"chart-tokens\"", "</svg>");
    assert!(series_points(tokens).iter().filter(|n| **n >= 2).count() >= 2, "{tokens}");
    let graph = element(&dom, "<svg id=\"peer-graph\"", "</svg>");
    for id in [&ida, &idb] {
        assert!(
            graph.contains(&format!("data-peer=\"{id}\" data-role=\"trainer\"")),
            "the peer graph lacks node {id}:\n{graph}"
        );
    }
    assert!(graph.contains("class=\"link direct\""), "the nodes' direct link is drawn:\n{graph}");
    let timeline = element(&dom, "<table id=\"timeline\"", "</table>");
    assert!(timeline.contains("data-round="), "the round timeline has rows: {timeline}");
    let nodes = element(&dom, "<table id=\"nodes\"", "</table>");
    assert!(nodes.contains(&ida) && nodes.contains(&idb) && nodes.contains(">cpu<"), "{nodes}");
    let sample = element(&dom, "<pre id=\"sample\"", "</pre>");
    assert!(attr(sample, "data-round").is_some(), "a text sample is shown: {sample}");
    let round = attr(sample, "data-round").unwrap_or_default();
    let export = element(&dom, "<code id=\"export-cmd\"", "</code>");
    assert!(
        export.contains("murmur export --bootstrap /ip4/127.0.0.1/tcp/")
            && export.contains(&format!("--out model-round-{round}/")),
        "the page shows the command that exports the state it displays: {export}"
    );
    assert!(streamed(&dom) >= 1, "the event stream delivered a snapshot: {}", element(&dom, "<body", ">"));
    let status = element(&dom, "<div id=\"status\"", "</div>");
    assert!(status.contains(">live<"), "the page says its stream is live: {status}");

    let shot = target_dir().join("dashboard.png");
    let _ = std::fs::remove_file(&shot);
    let size = browser.screenshot(&shot);
    assert!(size > 20_000, "{} is {size} bytes", shot.display());
}

/// The number in `<body data-streamed="…">`: snapshots the event stream delivered.
fn streamed(dom: &str) -> u32 {
    dom.find("<body")
        .and_then(|at| attr(&dom[at..], "data-streamed"))
        .and_then(|n| n.parse::<u32>().ok())
        .unwrap_or(0)
}
