//! The signed progress reports both round loops gossip for dashboards: the
//! loop fills in what it knows; `publish` adds the node's links and refusals
//! (asked of the network on a task, so the loop never waits), signs and
//! gossips it.

use std::time::Instant;

use murmur_protocol::telemetry::{MAX_DEVICE_BYTES, MAX_LINKS, MAX_REASON_BYTES, MAX_REJECTION_KINDS};
use murmur_protocol::{NodeKey, PeerLink, PublicKey, RejectionCount, RunSpec, Signature, StateId, Telemetry};

use super::trainer::TrainerHandle;
use crate::net::{public_key_of, NetHandle, TopicKind};

/// What a loop knows of its progress when it reports.
pub struct Progress<'a> {
    pub spec: &'a RunSpec,
    pub round: u64,
    pub state: StateId,
    pub train_loss: f32,
    pub val_loss: Option<f32>,
    /// Tokens trained since `first_train` (None: not trained yet).
    pub tokens: u64,
    pub first_train: Option<Instant>,
    pub trainer: &'a TrainerHandle,
    pub net: &'a NetHandle,
    pub peers: usize,
    pub restarts: u32,
}

impl Progress<'_> {
    /// The unsigned report (links and rejections are filled by `publish`).
    pub fn telemetry(&self) -> Telemetry {
        let wall = self.first_train.map_or(1.0, |t| t.elapsed().as_secs_f64().max(1e-3));
        let tokens_per_sec = (self.tokens as f64 / wall) as f32;
        Telemetry {
            run: self.spec.run_id(),
            round: self.round,
            train_loss: if self.train_loss.is_finite() { self.train_loss } else { 0.0 },
            val_loss: self.val_loss.filter(|v| v.is_finite()),
            tokens_per_sec: if tokens_per_sec.is_finite() { tokens_per_sec } else { 0.0 },
            device: truncate_utf8(&self.trainer.device, MAX_DEVICE_BYTES),
            bytes_sent: self.net.stats.bytes_sent(),
            bytes_recv: self.net.stats.bytes_received(),
            peer_count: self.peers as u32,
            state: self.state,
            backend: self.trainer.backend.to_string(),
            links: Vec::new(),
            rejections: Vec::new(),
            trainer_restarts: self.restarts,
            signer: PublicKey::default(),
            signature: Signature::default(),
        }
    }
}

/// `s` cut to at most `max` bytes on a character boundary.
pub fn truncate_utf8(s: &str, max: usize) -> String {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

/// Fill in `t`'s links and rejections, sign it with `key` and gossip it.
pub fn publish(net: NetHandle, key: NodeKey, mut t: Telemetry) {
    tokio::spawn(async move {
        t.links = net
            .peers()
            .await
            .into_iter()
            .filter(|p| p.role.is_some())
            .filter_map(|p| public_key_of(&p.peer).map(|k| PeerLink { peer: k, relayed: p.relayed }))
            .take(MAX_LINKS)
            .collect();
        t.rejections = net
            .rejections()
            .await
            .into_iter()
            .take(MAX_REJECTION_KINDS)
            .map(|(reason, count)| RejectionCount { reason: truncate_utf8(&reason, MAX_REASON_BYTES), count })
            .collect();
        let bytes = t.sign(&key).encode();
        if let Err(e) = net.publish(TopicKind::Telemetry, bytes).await {
            tracing::debug!("publishing telemetry: {e}");
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_keeps_whole_characters() {
        assert_eq!(truncate_utf8("héllo", 2), "h");
        assert_eq!(truncate_utf8("héllo", 3), "hé");
        assert_eq!(truncate_utf8("abc", 10), "abc");
    }
}
