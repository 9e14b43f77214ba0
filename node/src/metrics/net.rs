//! The network's metrics, read from the swarm at scrape time: peers, bytes
//! each way, transfer requests served, refusals by reason, bans. Node and
//! bootstrap server export the same names.

use std::time::Duration;

use prometheus::{IntCounter, IntCounterVec, IntGauge, Opts, Registry};

use super::{raise_to, register, MetricsError};
use crate::net::{NetHandle, NetRejection, NetStats};

/// How long a scrape waits for the swarm task's answers; past it (a swarm
/// busy under a flood) the peer gauges and refusal counts keep their last
/// values and the byte counters, read from atomics, are still fresh.
const ASK_TIMEOUT: Duration = Duration::from_secs(1);

pub struct NetMetrics {
    net: NetHandle,
    peers: IntGauge,
    training_peers: IntGauge,
    bytes_sent: IntCounter,
    bytes_received: IntCounter,
    served_bytes: IntCounter,
    requests_served: IntCounter,
    rejections: IntCounterVec,
    bans: IntCounter,
}

impl NetMetrics {
    pub fn new(r: &Registry, net: NetHandle) -> Result<Self, MetricsError> {
        let metrics = Self {
            net,
            peers: register(r, IntGauge::new("murmur_peers_connected", "Peers connected now."))?,
            training_peers: register(
                r,
                IntGauge::new("murmur_training_peers_connected", "Connected peers that train in this run."),
            )?,
            bytes_sent: register(
                r,
                IntCounter::new(
                    "murmur_sent_bytes_total",
                    "Bytes sent: gossip published plus content served.",
                ),
            )?,
            bytes_received: register(
                r,
                IntCounter::new(
                    "murmur_received_bytes_total",
                    "Bytes received: gossip plus content fetched.",
                ),
            )?,
            served_bytes: register(
                r,
                IntCounter::new(
                    "murmur_served_bytes_total",
                    "Content (state, delta, spec) bytes served to peers.",
                ),
            )?,
            requests_served: register(
                r,
                IntCounter::new("murmur_requests_served_total", "Transfer requests answered."),
            )?,
            rejections: register(
                r,
                IntCounterVec::new(
                    Opts::new("murmur_rejections_total", "Peer messages refused, by reason."),
                    &["reason"],
                ),
            )?,
            bans: register(r, IntCounter::new("murmur_bans_total", "Peers banned."))?,
        };
        // The network's own reasons are exported from the start (at 0), so a
        // rate over them is defined before the first refusal; the round
        // machine's (`round_*`) appear as they happen.
        for reason in [
            NetRejection::Malformed,
            NetRejection::BadSignature,
            NetRejection::WrongRun,
            NetRejection::Oversized,
            NetRejection::BadChunk,
        ] {
            metrics.rejections.with_label_values(&[reason.name().as_str()]);
        }
        Ok(metrics)
    }

    /// Read the swarm's totals into the metrics.
    pub async fn refresh(&self) {
        let s = &self.net.stats;
        raise_to(&self.bytes_sent, s.bytes_sent());
        raise_to(&self.bytes_received, s.bytes_received());
        raise_to(&self.served_bytes, NetStats::get(&s.served_bytes));
        raise_to(&self.requests_served, NetStats::get(&s.requests_served));
        raise_to(&self.bans, NetStats::get(&s.bans));
        match tokio::time::timeout(ASK_TIMEOUT, self.net.peers()).await {
            Ok(peers) => {
                self.peers.set(peers.len() as i64);
                let training = peers.iter().filter(|p| p.role.is_some_and(|r| r.trains())).count();
                self.training_peers.set(training as i64);
            }
            Err(_) => self.peers.set(i64::try_from(NetStats::get(&s.connected)).unwrap_or(i64::MAX)),
        }
        if let Ok(counts) = tokio::time::timeout(ASK_TIMEOUT, self.net.rejections()).await {
            for (reason, n) in counts {
                raise_to(&self.rejections.with_label_values(&[reason.as_str()]), n);
            }
        }
    }
}
