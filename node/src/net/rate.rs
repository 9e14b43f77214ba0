//! Gossip rate limits charged to whoever a message comes from: a valid
//! signed message counts against its origin (the key that signed it),
//! whichever peer relayed it, so free identities that each stay under the
//! limit cannot make an honest relay exceed it and be banned; a relay has
//! a wider budget of its own, past which its messages are dropped without
//! a charge. Token buckets, bounded in number: when full, the oldest is
//! evicted, never a new peer refused (or waved through).

use std::collections::{HashMap, VecDeque};
use std::time::Instant;

use libp2p::PeerId;

/// Gossip messages per second a signer may originate (token bucket refill).
pub const GOSSIP_RATE: f64 = 500.0;
/// Burst a signer may send at once.
pub const GOSSIP_BURST: f64 = 2000.0;
/// How many times a signer's budget one relay may forward.
pub const RELAY_FACTOR: f64 = 4.0;
/// Most buckets of each kind kept.
pub const MAX_BUCKETS: usize = 65_536;

/// What becomes of one valid gossip message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GossipAdmission {
    Accept,
    /// Its origin is past its rate: dropped, the origin charged `Flood`.
    OriginFlood(PeerId),
    /// Its relay is past its (wider) rate: dropped, nobody charged.
    RelayFull,
}

/// Token buckets keyed by peer, oldest evicted when full.
#[derive(Debug)]
struct Buckets {
    rate: f64,
    burst: f64,
    /// Tokens left and when they were last filled.
    map: HashMap<PeerId, (f64, Instant)>,
    /// Peers in the order their buckets were made (entries may be stale).
    order: VecDeque<PeerId>,
}

impl Buckets {
    fn new(rate: f64, burst: f64) -> Self {
        Buckets { rate, burst, map: HashMap::new(), order: VecDeque::new() }
    }

    fn allow(&mut self, peer: PeerId, now: Instant) -> bool {
        if !self.map.contains_key(&peer) {
            while self.map.len() >= MAX_BUCKETS {
                match self.order.pop_front() {
                    Some(old) => {
                        self.map.remove(&old);
                    }
                    None => break,
                }
            }
            self.order.push_back(peer);
        }
        let (tokens, at) = self.map.entry(peer).or_insert((self.burst, now));
        *tokens = (*tokens + now.saturating_duration_since(*at).as_secs_f64() * self.rate).min(self.burst);
        *at = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// Drop full buckets idle for a minute (they would refill to the burst).
    fn forget_idle(&mut self, now: Instant) {
        let burst = self.burst;
        self.map
            .retain(|_, (tokens, at)| *tokens < burst || now.saturating_duration_since(*at).as_secs() < 60);
        let map = &self.map;
        self.order.retain(|p| map.contains_key(p));
    }
}

/// The gossip budgets of origins and relays.
#[derive(Debug)]
pub struct GossipRates {
    origins: Buckets,
    relays: Buckets,
}

impl Default for GossipRates {
    fn default() -> Self {
        GossipRates {
            origins: Buckets::new(GOSSIP_RATE, GOSSIP_BURST),
            relays: Buckets::new(GOSSIP_RATE * RELAY_FACTOR, GOSSIP_BURST * RELAY_FACTOR),
        }
    }
}

impl GossipRates {
    /// One valid message relayed by `relay`, signed by `origin` (None: a
    /// message with no single signer, counted against its relay).
    pub fn admit(&mut self, relay: PeerId, origin: Option<PeerId>, now: Instant) -> GossipAdmission {
        let origin = origin.unwrap_or(relay);
        if !self.origins.allow(origin, now) {
            return GossipAdmission::OriginFlood(origin);
        }
        if origin != relay && !self.relays.allow(relay, now) {
            return GossipAdmission::RelayFull;
        }
        GossipAdmission::Accept
    }

    pub fn forget_idle(&mut self, now: Instant) {
        self.origins.forget_idle(now);
        self.relays.forget_idle(now);
    }

    #[cfg(test)]
    fn buckets(&self) -> usize {
        self.origins.map.len() + self.relays.map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn an_origin_past_its_rate_is_charged_not_its_relay() {
        let mut r = GossipRates::default();
        let (relay, origin) = (PeerId::random(), PeerId::random());
        let t0 = Instant::now();
        let accepted =
            (0..5000).filter(|_| r.admit(relay, Some(origin), t0) == GossipAdmission::Accept).count();
        assert_eq!(accepted, GOSSIP_BURST as usize);
        assert_eq!(r.admit(relay, Some(origin), t0), GossipAdmission::OriginFlood(origin));
        // Another origin through the same relay is not affected.
        assert_eq!(r.admit(relay, Some(PeerId::random()), t0), GossipAdmission::Accept);
        // One second later, GOSSIP_RATE more.
        let t1 = t0 + Duration::from_secs(1);
        let accepted =
            (0..5000).filter(|_| r.admit(relay, Some(origin), t1) == GossipAdmission::Accept).count();
        assert_eq!(accepted, GOSSIP_RATE as usize);
    }

    /// Fails before: the limit was charged to the relay, so Sybils each
    /// under it made the honest relay exceed it and get banned.
    #[test]
    fn sybils_each_under_the_rate_never_get_their_relay_charged() {
        let mut r = GossipRates::default();
        let relay = PeerId::random();
        let sybils: Vec<PeerId> = (0..100).map(|_| PeerId::random()).collect();
        let t0 = Instant::now();
        let mut outcomes = Vec::new();
        for _ in 0..100 {
            for s in &sybils {
                outcomes.push(r.admit(relay, Some(*s), t0));
            }
        }
        assert!(
            !outcomes.iter().any(|o| matches!(o, GossipAdmission::OriginFlood(_))),
            "no origin is over its rate"
        );
        let accepted = outcomes.iter().filter(|o| **o == GossipAdmission::Accept).count();
        assert_eq!(accepted, (GOSSIP_BURST * RELAY_FACTOR) as usize, "the relay forwards its own budget");
        assert!(outcomes.contains(&GossipAdmission::RelayFull), "and the rest is dropped uncharged");
    }

    #[test]
    fn a_message_from_its_own_signer_counts_once() {
        let mut r = GossipRates::default();
        let p = PeerId::random();
        let t0 = Instant::now();
        let accepted = (0..5000).filter(|_| r.admit(p, Some(p), t0) == GossipAdmission::Accept).count();
        assert_eq!(accepted, GOSSIP_BURST as usize);
    }

    #[test]
    fn a_full_table_evicts_its_oldest_bucket_instead_of_waving_peers_through() {
        let mut b = Buckets::new(1.0, 1.0);
        let t0 = Instant::now();
        let first = PeerId::random();
        assert!(b.allow(first, t0));
        assert!(!b.allow(first, t0), "its one token is spent");
        for _ in 1..MAX_BUCKETS {
            b.allow(PeerId::random(), t0);
        }
        let late = PeerId::random();
        assert!(b.allow(late, t0) && !b.allow(late, t0), "a new peer gets a bucket and its limit");
        assert_eq!(b.map.len(), MAX_BUCKETS);
        assert!(!b.map.contains_key(&first), "the oldest bucket went");
        let mut r = GossipRates::default();
        r.admit(first, None, t0);
        assert_eq!(r.buckets(), 1);
    }
}
