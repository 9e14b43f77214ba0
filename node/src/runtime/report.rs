//! What a node tells its operator: one JSON object per line with `--json`
//! (one `"event":"round"` object per closed round with at least `round`,
//! `state_id`, `val_loss` and `included`), or short human lines otherwise.

use serde_json::{json, Value};

/// Prints node events.
#[derive(Debug, Clone, Copy)]
pub struct Reporter {
    pub json: bool,
}

impl Reporter {
    /// Print `value` (an object with an `event` field).
    pub fn emit(&self, value: Value) {
        if self.json {
            println!("{value}");
        } else {
            println!("{}", human(&value));
        }
    }

    pub fn event(&self, event: &str, mut fields: Value) {
        if let Value::Object(m) = &mut fields {
            m.insert("event".into(), json!(event));
        }
        self.emit(fields);
    }
}

/// Bytes the node's transports counted, reported per closed round: all of
/// them (`bytes_sent`, `bytes_recv`), the catch-up part of those
/// (`catch_up_sent`, `catch_up_recv`: states and ledgers served to or
/// fetched by a joining or lagging node) and the dataset part
/// (`dataset_sent`, `dataset_recv`: training data served or fetched).
#[derive(Debug, Default)]
pub struct RoundBytes {
    sent: u64,
    recv: u64,
    catch_up_sent: u64,
    catch_up_recv: u64,
    dataset_sent: u64,
    dataset_recv: u64,
}

impl RoundBytes {
    /// Put the bytes sent and received since the last call into `v`.
    pub fn fill(&mut self, v: &mut Value, stats: &crate::net::NetStats) {
        use crate::net::NetStats;
        let (sent, recv) = (stats.bytes_sent(), stats.bytes_received());
        let catch_up_sent = NetStats::get(&stats.catch_up_bytes_out);
        let catch_up_recv = NetStats::get(&stats.catch_up_bytes_in);
        v["bytes_sent"] = json!(sent.saturating_sub(self.sent));
        v["bytes_recv"] = json!(recv.saturating_sub(self.recv));
        v["catch_up_sent"] = json!(catch_up_sent.saturating_sub(self.catch_up_sent));
        v["catch_up_recv"] = json!(catch_up_recv.saturating_sub(self.catch_up_recv));
        let dataset_sent = NetStats::get(&stats.dataset_bytes_out);
        let dataset_recv = NetStats::get(&stats.dataset_bytes_in);
        v["dataset_sent"] = json!(dataset_sent.saturating_sub(self.dataset_sent));
        v["dataset_recv"] = json!(dataset_recv.saturating_sub(self.dataset_recv));
        *self = RoundBytes { sent, recv, catch_up_sent, catch_up_recv, dataset_sent, dataset_recv };
    }
}

/// Put the node's time in inner steps so far into a round report:
/// `train_secs` (finished jobs, `finished_secs`, plus the one running now,
/// `running_secs`: in an overlapped run the next round trains while this
/// one is reported), `wall_secs` since its first training job, their
/// ratio `train_frac`, and the `tokens` it trained.
pub fn fill_training_time(
    v: &mut Value,
    finished_secs: f64,
    running_secs: f64,
    first_train: Option<std::time::Instant>,
    tokens: u64,
) {
    let wall = first_train.map_or(0.0, |t| t.elapsed().as_secs_f64());
    let trained = finished_secs + running_secs;
    v["train_frac"] = json!(if wall > 0.0 { (trained / wall).min(1.0) } else { 0.0 });
    v["train_secs"] = json!(trained);
    v["wall_secs"] = json!(wall);
    v["tokens"] = json!(tokens);
}

/// Keep a round report (`state_id`, `included`, `round_tokens`) in the
/// store's history.
pub fn record_round(
    store: &crate::store::Store,
    run: &murmur_protocol::RunId,
    round: u64,
    v: &Value,
    val_loss: Option<f32>,
) {
    if let Some(state_id) = v["state_id"].as_str() {
        let rec = crate::store::RoundRecord {
            round,
            state_id: state_id.to_string(),
            included: v["included"].as_u64().unwrap_or(0) as usize,
            round_tokens: v["round_tokens"].as_u64().unwrap_or(0),
            state_blob: v["state_blob"].as_str().map(str::to_string),
            val_loss,
        };
        let _ = store.meta.record_round(run, &rec);
    }
}

fn human(v: &Value) -> String {
    let event = v.get("event").and_then(Value::as_str).unwrap_or("?");
    match event {
        "round" => format!(
            "round {:>4}  state {}  val_loss {}  included {}  train {:.0}%",
            v["round"].as_u64().unwrap_or(0),
            v["state_id"].as_str().map(|s| &s[..s.len().min(16)]).unwrap_or("?"),
            v["val_loss"].as_f64().map(|x| format!("{x:.4}")).unwrap_or_else(|| "-".into()),
            v["included"],
            v["train_frac"].as_f64().unwrap_or(0.0) * 100.0,
        ),
        _ => {
            let mut s = event.to_string();
            if let Value::Object(m) = v {
                for (k, x) in m.iter().filter(|(k, _)| k.as_str() != "event") {
                    s.push_str(&format!("  {k}={x}"));
                }
            }
            s
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_lines_read_well() {
        let v = json!({"event": "round", "round": 3, "state_id": "abcdef0123456789abcd", "val_loss": 2.5, "included": 2, "train_frac": 0.95});
        let h = human(&v);
        assert!(h.contains("round    3") && h.contains("abcdef0123456789 ") && h.contains("2.5000"), "{h}");
        assert!(human(&json!({"event": "joined", "round": 1})).starts_with("joined  round=1"));
    }
}
