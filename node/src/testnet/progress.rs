//! Progress of a local testnet as its nodes report it: which StateId each
//! node reached after each round, when a round can be announced (every live
//! node reported it, or a grace period passed), and whether the nodes agree.
//! Pure: the supervisor feeds it node events and the time.

use std::collections::{BTreeMap, HashMap};

/// How long after the first report of a round it is announced even if a
/// node (being restarted, say) has not reported it.
pub const ANNOUNCE_GRACE_MS: u64 = 15_000;

/// One round as the nodes reported it.
#[derive(Debug, Clone, PartialEq)]
pub struct RoundLine {
    pub round: u64,
    /// The StateId most nodes reported, and how many did.
    pub state: String,
    pub agree: usize,
    pub reported: usize,
    /// Median val loss of the reports.
    pub val_loss: Option<f64>,
    pub included: u64,
    /// The most bytes (sent + received) one node moved in the round's
    /// exchange, when the nodes report them: catch-up content (states and
    /// ledgers) and dataset content left out.
    pub max_bytes: u64,
    /// The most catch-up and dataset bytes one node moved in the round.
    pub max_side_bytes: u64,
}

impl RoundLine {
    pub fn human(&self) -> String {
        format!(
            "round {:>3}  state {}  val_loss {}  deltas {}  nodes agree {}/{}  max MB/node {:.2} (+{:.2} catch-up and data)",
            self.round,
            &self.state[..self.state.len().min(12)],
            self.val_loss.map(|v| format!("{v:.4}")).unwrap_or_else(|| "-".into()),
            self.included,
            self.agree,
            self.reported,
            self.max_bytes as f64 / 1e6,
            self.max_side_bytes as f64 / 1e6,
        )
    }
}

#[derive(Debug, Clone)]
struct Report {
    state: String,
    val_loss: Option<f64>,
    included: u64,
    /// The round's exchange bytes, and its catch-up and dataset bytes.
    bytes: u64,
    side_bytes: u64,
}

/// Round reports by node.
#[derive(Debug, Default)]
pub struct Progress {
    /// round → node name → report.
    reports: BTreeMap<u64, HashMap<String, Report>>,
    first_seen_ms: BTreeMap<u64, u64>,
    announced: Option<u64>,
}

impl Progress {
    /// A node's `round` event (`{"event":"round","round":…,"state_id":…}`).
    pub fn on_round(&mut self, node: &str, v: &serde_json::Value, now_ms: u64) {
        let (Some(round), Some(state)) = (v["round"].as_u64(), v["state_id"].as_str()) else { return };
        self.first_seen_ms.entry(round).or_insert(now_ms);
        let count = |f: &str| v[f].as_u64().unwrap_or(0);
        let all = count("bytes_sent") + count("bytes_recv");
        let side =
            count("catch_up_sent") + count("catch_up_recv") + count("dataset_sent") + count("dataset_recv");
        self.reports.entry(round).or_default().insert(
            node.to_string(),
            Report {
                state: state.to_string(),
                val_loss: v["val_loss"].as_f64(),
                included: v["included"].as_u64().unwrap_or(0),
                bytes: all.saturating_sub(side),
                side_bytes: side,
            },
        );
    }

    /// The line for `round` from the reports so far.
    pub fn line(&self, round: u64) -> Option<RoundLine> {
        let reps = self.reports.get(&round)?;
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for r in reps.values() {
            *counts.entry(r.state.as_str()).or_default() += 1;
        }
        let (state, agree) = counts.iter().max_by_key(|(_, n)| **n).map(|(s, n)| (s.to_string(), *n))?;
        let mut losses: Vec<f64> = reps.values().filter_map(|r| r.val_loss).collect();
        losses.sort_by(f64::total_cmp);
        let val_loss = losses.get(losses.len() / 2).copied();
        let included = reps.values().filter(|r| r.state == state).map(|r| r.included).max().unwrap_or(0);
        let max_bytes = reps.values().map(|r| r.bytes).max().unwrap_or(0);
        let max_side_bytes = reps.values().map(|r| r.side_bytes).max().unwrap_or(0);
        Some(RoundLine {
            round,
            state,
            agree,
            reported: reps.len(),
            val_loss,
            included,
            max_bytes,
            max_side_bytes,
        })
    }

    /// Rounds that are ready to announce, in order: every node in `live`
    /// reported it, or the grace period since its first report passed.
    pub fn ready(&mut self, live: &[String], now_ms: u64) -> Vec<RoundLine> {
        let mut out = Vec::new();
        let next = self.announced.map_or(0, |r| r + 1);
        let rounds: Vec<u64> = self.reports.range(next..).map(|(r, _)| *r).collect();
        for round in rounds {
            let reps = &self.reports[&round];
            let all = !live.is_empty() && live.iter().all(|n| reps.contains_key(n));
            let waited = self
                .first_seen_ms
                .get(&round)
                .is_some_and(|t| now_ms.saturating_sub(*t) >= ANNOUNCE_GRACE_MS);
            if !(all || waited) {
                break;
            }
            if let Some(l) = self.line(round) {
                out.push(l);
            }
            self.announced = Some(round);
        }
        out
    }

    pub fn announced(&self) -> Option<u64> {
        self.announced
    }

    /// The highest round `node` reported.
    pub fn last_round_of(&self, node: &str) -> Option<u64> {
        self.reports.iter().rev().find(|(_, reps)| reps.contains_key(node)).map(|(r, _)| *r)
    }

    /// The newest round that every node in `nodes` reported, at or after
    /// `from`, with each node's StateId for it.
    pub fn common_round(&self, nodes: &[String], from: u64) -> Option<(u64, Vec<(String, String)>)> {
        self.reports.range(from..).rev().find_map(|(round, reps)| {
            let states: Option<Vec<(String, String)>> =
                nodes.iter().map(|n| reps.get(n).map(|r| (n.clone(), r.state.clone()))).collect();
            states.map(|s| (*round, s))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ev(round: u64, state: &str, val: f64) -> serde_json::Value {
        json!({"event": "round", "round": round, "state_id": state, "val_loss": val, "included": 2})
    }

    #[test]
    fn rounds_are_announced_in_order_once_every_live_node_reported() {
        let mut p = Progress::default();
        let live = vec!["a".to_string(), "b".to_string()];
        p.on_round("a", &ev(0, "s0", 5.0), 0);
        assert!(p.ready(&live, 10).is_empty());
        p.on_round("a", &ev(1, "s1", 4.0), 20);
        p.on_round("b", &ev(0, "s0", 5.2), 30);
        let lines = p.ready(&live, 40);
        assert_eq!(lines.len(), 1);
        assert_eq!((lines[0].round, lines[0].agree, lines[0].reported), (0, 2, 2));
        assert!(lines[0].human().contains("nodes agree 2/2"), "{}", lines[0].human());
        // Round 1 waits for b, or for the grace period.
        assert!(p.ready(&live, 50).is_empty());
        let lines = p.ready(&live, 20 + ANNOUNCE_GRACE_MS);
        assert_eq!(lines.iter().map(|l| l.round).collect::<Vec<_>>(), vec![1]);
        assert_eq!(p.announced(), Some(1));
        // Each round is announced once.
        p.on_round("b", &ev(1, "s1", 4.1), 100);
        assert!(p.ready(&live, 200).is_empty());
    }

    #[test]
    fn disagreement_and_the_common_round_are_reported() {
        let mut p = Progress::default();
        p.on_round("a", &ev(3, "x", 1.0), 0);
        p.on_round("b", &ev(3, "x", 1.0), 0);
        p.on_round("c", &ev(3, "y", 1.0), 0);
        p.on_round("a", &ev(4, "z", 1.0), 0);
        let l = p.line(3).expect("line");
        assert_eq!((l.state.as_str(), l.agree, l.reported), ("x", 2, 3));
        let nodes = vec!["a".to_string(), "b".to_string(), "c".to_string()];
        let (round, states) = p.common_round(&nodes, 2).expect("common");
        assert_eq!(round, 3);
        assert_eq!(states.iter().filter(|(_, s)| s == "x").count(), 2);
        assert_eq!(p.common_round(&nodes, 4), None);
        assert_eq!(p.last_round_of("a"), Some(4));
    }

    #[test]
    fn the_exchange_is_reported_apart_from_catch_up_and_dataset_bytes() {
        let mut p = Progress::default();
        let bytes = |sent: u64, recv: u64, catch_up: u64, data: u64| {
            let mut v = ev(2, "s", 1.0);
            v["bytes_sent"] = json!(sent);
            v["bytes_recv"] = json!(recv);
            v["catch_up_recv"] = json!(catch_up);
            v["dataset_recv"] = json!(data);
            v
        };
        // a moved 3 MB, 2 of them a state it caught up on; b 2.5 MB, 0.5 of them dataset shards.
        p.on_round("a", &bytes(500_000, 2_500_000, 2_000_000, 0), 0);
        p.on_round("b", &bytes(1_000_000, 1_500_000, 0, 500_000), 0);
        let l = p.line(2).expect("line");
        assert_eq!((l.max_bytes, l.max_side_bytes), (2_000_000, 2_000_000));
        assert!(l.human().ends_with("max MB/node 2.00 (+2.00 catch-up and data)"), "{}", l.human());
    }
}
