//! Healing a gossip view that lost a peer's subscriptions. libp2p's
//! gossipsub tells a peer its topics once, on the first connection to it.
//! A node that restarts with the same key and reconnects before the other
//! side has reaped its old connection (or whose first connection closes
//! with that message still queued on it) never learns the other side's
//! topics: it receives their gossip, but publishes nothing to them, and
//! neither side's mesh upkeep notices. Every peer of a run subscribes to
//! all of the run's topics, so a connected peer of the run with no topic
//! in this node's view, some seconds after it connected, is such a peer:
//! the node closes its connections, and the next one (dialled again at
//! once, or by the other side) is a first connection at both ends, which
//! exchange their topics. At most once per peer per `HEAL_INTERVAL`, and
//! for at most `MAX_HEALED` peers remembered.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use libp2p::PeerId;

/// How long a connected peer may go without a known topic.
pub const SUBSCRIPTION_WAIT: Duration = Duration::from_secs(5);
/// Least time between two heals of one peer.
pub const HEAL_INTERVAL: Duration = Duration::from_secs(30);
/// Most peers whose last heal is remembered.
pub const MAX_HEALED: usize = 4096;

/// A connected peer as the swarm sees it.
#[derive(Debug, Clone, Copy)]
pub struct ConnectedPeer {
    pub peer: PeerId,
    /// Identified as a peer of this run (it subscribes to the run's topics).
    pub of_run: bool,
    /// When its oldest open connection opened.
    pub connected_since: Instant,
    /// Whether gossipsub knows at least one topic it subscribes to.
    pub has_topics: bool,
}

/// The peers healed lately.
#[derive(Debug, Default)]
pub struct SubscriptionHealer {
    healed: HashMap<PeerId, Instant>,
}

impl SubscriptionHealer {
    /// The peers to reconnect at `now`: of the run, connected for
    /// `SUBSCRIPTION_WAIT` with no topic known, not healed within
    /// `HEAL_INTERVAL`. They are noted as healed now.
    pub fn due(&mut self, peers: &[ConnectedPeer], now: Instant) -> Vec<PeerId> {
        self.healed.retain(|_, at| now.saturating_duration_since(*at) < HEAL_INTERVAL);
        let mut out = Vec::new();
        for p in peers {
            let waited = now.saturating_duration_since(p.connected_since) >= SUBSCRIPTION_WAIT;
            if !p.of_run || p.has_topics || !waited || self.healed.contains_key(&p.peer) {
                continue;
            }
            if self.healed.len() >= MAX_HEALED {
                break;
            }
            self.healed.insert(p.peer, now);
            out.push(p.peer);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(of_run: bool, since: Instant, has_topics: bool) -> ConnectedPeer {
        ConnectedPeer { peer: PeerId::random(), of_run, connected_since: since, has_topics }
    }

    #[test]
    fn a_run_peer_without_topics_is_reconnected_once_per_interval() {
        let t0 = Instant::now();
        let silent = peer(true, t0, false);
        let peers = [
            silent,
            peer(true, t0, true),                           // its topics arrived
            peer(false, t0, false),                         // not of this run
            peer(true, t0 + Duration::from_secs(4), false), // connected lately
        ];
        let mut h = SubscriptionHealer::default();
        assert!(h.due(&peers, t0 + Duration::from_secs(4)).is_empty(), "too soon for any");
        let at = t0 + SUBSCRIPTION_WAIT;
        assert_eq!(h.due(&peers, at), vec![silent.peer]);
        // Ten seconds on: the late one has waited long enough; the silent
        // one was healed lately.
        assert_eq!(h.due(&peers, at + Duration::from_secs(10)), vec![peers[3].peer]);
        assert_eq!(h.due(&peers, at + HEAL_INTERVAL), vec![silent.peer], "again after the interval");
    }

    #[test]
    fn the_healed_peers_remembered_are_bounded() {
        let t0 = Instant::now();
        let peers: Vec<ConnectedPeer> = (0..MAX_HEALED + 10).map(|_| peer(true, t0, false)).collect();
        let mut h = SubscriptionHealer::default();
        let first = h.due(&peers, t0 + SUBSCRIPTION_WAIT);
        assert_eq!(first.len(), MAX_HEALED);
        assert!(h.due(&peers, t0 + SUBSCRIPTION_WAIT).is_empty());
        assert_eq!(h.due(&peers, t0 + SUBSCRIPTION_WAIT + HEAL_INTERVAL).len(), MAX_HEALED);
    }
}
