//! What each node of a testnet did, from its round reports: the fraction of
//! wall time it spent in inner steps, the tokens it trained, the rounds its
//! delta was included in, the bytes it sent and received, and its round
//! times. Pure: the supervisor feeds it node events.

use std::collections::{BTreeMap, BTreeSet};

/// One round report's counters (cumulative ones as the node reported them).
#[derive(Debug, Clone, Copy, Default)]
struct Sample {
    train_secs: f64,
    wall_secs: f64,
    tokens: u64,
}

#[derive(Debug, Default)]
struct NodeUsage {
    peer_id: Option<String>,
    /// round → counters at the report of that round.
    samples: BTreeMap<u64, Sample>,
    bytes_sent: u64,
    bytes_recv: u64,
    /// Rounds whose report says its delta was included (`contributed`).
    contributed: BTreeSet<u64>,
}

/// A node's summary.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    pub node: String,
    /// Time in inner steps over wall time between its first and last round
    /// report (the start-up before the first report left out).
    pub train_frac: Option<f64>,
    pub first_round: u64,
    pub last_round: u64,
    pub tokens: u64,
    /// Rounds whose commit included its delta, of the rounds it reported.
    pub contributed: usize,
    pub reported: usize,
    pub bytes_sent: u64,
    pub bytes_recv: u64,
    /// Mean and longest wall time between two consecutive round reports.
    pub round_secs: Option<(f64, f64)>,
}

impl Summary {
    pub fn human(&self) -> String {
        format!(
            "usage {}: in inner steps {} (rounds {}..={}), tokens {}, contributed {}/{} rounds, MB up {:.2} down {:.2}, round time {}",
            self.node,
            self.train_frac.map_or_else(|| "-".into(), |f| format!("{:.1}%", f * 100.0)),
            self.first_round,
            self.last_round,
            self.tokens,
            self.contributed,
            self.reported,
            self.bytes_sent as f64 / 1e6,
            self.bytes_recv as f64 / 1e6,
            self.round_secs.map_or_else(|| "-".into(), |(mean, max)| format!("mean {mean:.1} s max {max:.1} s")),
        )
    }
}

/// Usage by node.
#[derive(Debug, Default)]
pub struct Usage {
    nodes: BTreeMap<String, NodeUsage>,
    /// round → peer ids whose deltas a commit of that round included.
    included: BTreeMap<u64, BTreeSet<String>>,
}

impl Usage {
    /// A node's `started` event (its peer id).
    pub fn on_started(&mut self, node: &str, v: &serde_json::Value) {
        if let Some(p) = v["peer_id"].as_str() {
            self.nodes.entry(node.to_string()).or_default().peer_id = Some(p.to_string());
        }
    }

    /// A node's `round` event.
    pub fn on_round(&mut self, node: &str, v: &serde_json::Value) {
        let Some(round) = v["round"].as_u64() else { return };
        let u = self.nodes.entry(node.to_string()).or_default();
        u.bytes_sent += v["bytes_sent"].as_u64().unwrap_or(0);
        u.bytes_recv += v["bytes_recv"].as_u64().unwrap_or(0);
        if let (Some(train_secs), Some(wall_secs)) = (v["train_secs"].as_f64(), v["wall_secs"].as_f64()) {
            let tokens = v["tokens"].as_u64().unwrap_or(0);
            u.samples.insert(round, Sample { train_secs, wall_secs, tokens });
        }
        if v["contributed"].as_bool() == Some(true) {
            u.contributed.insert(round);
        }
        if let Some(list) = v["contributors"].as_array() {
            let set = self.included.entry(round).or_default();
            set.extend(list.iter().filter_map(|p| p.as_str().map(String::from)));
        }
    }

    /// Every node's summary, by name.
    pub fn summaries(&self) -> Vec<Summary> {
        self.nodes
            .iter()
            .filter(|(_, u)| !u.samples.is_empty())
            .map(|(node, u)| {
                let (first_round, first) = u.samples.iter().next().map(|(r, s)| (*r, *s)).unwrap_or_default();
                let (last_round, last) =
                    u.samples.iter().next_back().map(|(r, s)| (*r, *s)).unwrap_or_default();
                let wall = last.wall_secs - first.wall_secs;
                let train_frac =
                    (wall > 0.0).then(|| ((last.train_secs - first.train_secs) / wall).clamp(0.0, 1.0));
                let gaps: Vec<f64> = u
                    .samples
                    .values()
                    .zip(u.samples.values().skip(1))
                    .map(|(a, b)| b.wall_secs - a.wall_secs)
                    .collect();
                let round_secs = (!gaps.is_empty()).then(|| {
                    (gaps.iter().sum::<f64>() / gaps.len() as f64, gaps.iter().copied().fold(0.0, f64::max))
                });
                let listed = |r: &u64| {
                    u.peer_id.as_ref().is_some_and(|p| self.included.get(r).is_some_and(|s| s.contains(p)))
                };
                let contributed = u.samples.keys().filter(|r| u.contributed.contains(r) || listed(r)).count();
                Summary {
                    node: node.clone(),
                    train_frac,
                    first_round,
                    last_round,
                    tokens: last.tokens,
                    contributed,
                    reported: u.samples.len(),
                    bytes_sent: u.bytes_sent,
                    bytes_recv: u.bytes_recv,
                    round_secs,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn round(r: u64, train: f64, wall: f64, contributors: &[&str]) -> serde_json::Value {
        json!({"event": "round", "round": r, "train_secs": train, "wall_secs": wall, "tokens": r * 100,
               "bytes_sent": 1_000_000, "bytes_recv": 2_000_000, "contributors": contributors})
    }

    #[test]
    fn fractions_contributions_and_round_times_come_from_the_reports() {
        let mut u = Usage::default();
        u.on_started("a", &json!({"event": "started", "peer_id": "PA"}));
        u.on_started("b", &json!({"event": "started", "peer_id": "PB"}));
        // a trains 9.8 of every 10 s; b trains half the time and is left out of round 2.
        for r in 0..4u64 {
            let wall = 5.0 + 10.0 * r as f64;
            let who: &[&str] = if r == 2 { &["PA"] } else { &["PA", "PB"] };
            u.on_round("a", &round(r, 4.0 + 9.8 * r as f64, wall, who));
            u.on_round("b", &round(r, 2.0 + 5.0 * r as f64, wall + 0.5, who));
        }
        let s = u.summaries();
        assert_eq!(s.len(), 2);
        let (a, b) = (&s[0], &s[1]);
        assert!((a.train_frac.expect("a") - 0.98).abs() < 1e-9, "{a:?}");
        assert!((b.train_frac.expect("b") - 0.5).abs() < 1e-9, "{b:?}");
        assert_eq!((a.contributed, a.reported, b.contributed), (4, 4, 3));
        assert_eq!((a.first_round, a.last_round, a.tokens), (0, 3, 300));
        assert_eq!((a.bytes_sent, a.bytes_recv), (4_000_000, 8_000_000));
        assert_eq!(a.round_secs, Some((10.0, 10.0)));
        let line = a.human();
        assert!(line.contains("in inner steps 98.0%") && line.contains("contributed 4/4"), "{line}");
    }

    #[test]
    fn a_committee_report_says_itself_whether_the_node_contributed() {
        let mut u = Usage::default();
        for r in 0..3u64 {
            let mut v = round(r, r as f64, 1.0 + r as f64, &[]);
            v.as_object_mut().expect("an object").remove("contributors");
            v["contributed"] = json!(r != 1);
            u.on_round("a", &v);
        }
        let s = u.summaries();
        assert_eq!((s[0].contributed, s[0].reported), (2, 3));
    }
}
