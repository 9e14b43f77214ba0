//! Peers: the bridge between protocol identities (ed25519 public keys) and
//! libp2p PeerIds, the typed reasons a peer's traffic is refused, and the
//! ledger that scores peers down, bans them past a threshold, caps each
//! peer's gossip rate, and lets small penalties fade (`DECAY_PER_SEC`), so
//! that the ordinary noise of a long run — a few late or stale messages
//! after each restart — never adds up to a ban.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use libp2p::identity;
use libp2p::PeerId;
use murmur_protocol::{PublicKey, Rejection};

/// Penalty at which a peer is disconnected and banned.
pub const BAN_THRESHOLD: u64 = 300;
/// How long a ban lasts.
pub const BAN_DURATION: Duration = Duration::from_secs(600);
/// Penalty points a peer's score loses per second.
pub const DECAY_PER_SEC: f64 = 0.5;
/// Gossip messages a peer may deliver per second, sustained…
pub const GOSSIP_RATE: f64 = 500.0;
/// …and in one burst.
pub const GOSSIP_BURST: f64 = 2000.0;

/// Why the network layer refused something a peer sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NetRejection {
    /// Gossip bytes that do not decode as the topic's message type.
    Malformed,
    /// A gossip message whose signature does not verify.
    BadSignature,
    /// A gossip message of another run.
    WrongRun,
    /// A message or frame larger than its cap.
    Oversized,
    /// A chunk or table that does not match the content hash.
    BadChunk,
    /// Gossip faster than `GOSSIP_RATE` messages per second.
    Flood,
    /// A `Busy` answer to a fetch's request.
    Busy,
    /// Requests of one fetch that failed or timed out, `fetch::MAX_FAILURES`.
    Unresponsive,
    /// A refusal decided by the round state machine.
    Round(Rejection),
}

impl NetRejection {
    /// What the refusal costs the peer.
    pub fn penalty(self) -> u64 {
        match self {
            NetRejection::Malformed
            | NetRejection::BadSignature
            | NetRejection::Oversized
            | NetRejection::Flood => 100,
            NetRejection::WrongRun => 5,
            NetRejection::BadChunk => 50,
            // Honest peers past their serving limit answer Busy too, and
            // links drop: these cost little (2 per Busy answer; 10 for a
            // peer a fetch gives up on), and decay away.
            NetRejection::Busy => 2,
            NetRejection::Unresponsive => 10,
            NetRejection::Round(r) => r.penalty(),
        }
    }

    /// A short stable name (logs, metrics, JSON).
    pub fn name(self) -> String {
        match self {
            NetRejection::Malformed => "malformed".into(),
            NetRejection::BadSignature => "bad_signature".into(),
            NetRejection::WrongRun => "wrong_run".into(),
            NetRejection::Oversized => "oversized".into(),
            NetRejection::BadChunk => "bad_chunk".into(),
            NetRejection::Flood => "flood".into(),
            NetRejection::Busy => "busy".into(),
            NetRejection::Unresponsive => "unresponsive".into(),
            NetRejection::Round(r) => format!("round_{r:?}").to_lowercase(),
        }
    }
}

/// The PeerId of the node whose signing key is `key` (its libp2p identity
/// is the same ed25519 key); `None` for bytes that are not a valid key.
pub fn peer_id_of(key: &PublicKey) -> Option<PeerId> {
    let ed = identity::ed25519::PublicKey::try_from_bytes(&key.0).ok()?;
    Some(identity::PublicKey::from(ed).to_peer_id())
}

/// The signing key inside an ed25519 PeerId (identity multihash).
pub fn public_key_of(peer: &PeerId) -> Option<PublicKey> {
    // Multihash bytes: code varint (0 = identity), length varint, digest.
    let bytes = peer.to_bytes();
    let (&code, rest) = bytes.split_first()?;
    let (&len, digest) = rest.split_first()?;
    if code != 0 || len >= 0x80 || usize::from(len) != digest.len() {
        return None;
    }
    let pk = identity::PublicKey::try_decode_protobuf(digest).ok()?;
    Some(PublicKey(pk.try_into_ed25519().ok()?.to_bytes()))
}

/// Per-peer penalties and bans.
#[derive(Debug, Default)]
pub struct PeerLedger {
    penalty: HashMap<PeerId, u64>,
    banned: HashMap<PeerId, Instant>,
    counts: HashMap<String, u64>,
    /// Gossip token buckets: tokens left and when they were last filled.
    buckets: HashMap<PeerId, (f64, Instant)>,
    last_decay: Option<Instant>,
}

/// Most peers scored individually.
const MAX_LEDGER: usize = 65_536;

impl PeerLedger {
    /// Charge `peer`; returns true when this pushes it past the threshold
    /// (the caller disconnects and bans it).
    pub fn charge(&mut self, peer: PeerId, reason: NetRejection, now: Instant) -> bool {
        *self.counts.entry(reason.name()).or_insert(0) += 1;
        if !self.penalty.contains_key(&peer) && self.penalty.len() >= MAX_LEDGER {
            return false;
        }
        let p = self.penalty.entry(peer).or_insert(0);
        let before = *p;
        *p = p.saturating_add(reason.penalty());
        if before < BAN_THRESHOLD && *p >= BAN_THRESHOLD {
            self.banned.insert(peer, now + BAN_DURATION);
            return true;
        }
        false
    }

    pub fn penalty(&self, peer: &PeerId) -> u64 {
        self.penalty.get(peer).copied().unwrap_or(0)
    }

    /// Whether `peer` is banned at `now` (expired bans are lifted and the
    /// peer starts again from a clean score).
    pub fn is_banned(&mut self, peer: &PeerId, now: Instant) -> bool {
        match self.banned.get(peer) {
            Some(until) if *until > now => true,
            Some(_) => {
                self.banned.remove(peer);
                self.penalty.remove(peer);
                false
            }
            None => false,
        }
    }

    /// Peers whose ban has run out.
    pub fn expired(&mut self, now: Instant) -> Vec<PeerId> {
        let done: Vec<PeerId> = self.banned.iter().filter(|(_, u)| **u <= now).map(|(p, _)| *p).collect();
        for p in &done {
            self.banned.remove(p);
            self.penalty.remove(p);
        }
        done
    }

    /// Refusals counted by reason name.
    pub fn counts(&self) -> Vec<(String, u64)> {
        let mut v: Vec<_> = self.counts.iter().map(|(k, c)| (k.clone(), *c)).collect();
        v.sort();
        v
    }

    pub fn banned_count(&self) -> usize {
        self.banned.len()
    }

    /// Peers banned at `now`.
    pub fn banned(&self, now: Instant) -> Vec<PeerId> {
        self.banned.iter().filter(|(_, u)| **u > now).map(|(p, _)| *p).collect()
    }

    /// Lift `peer`'s ban and clear its penalty; true when it was banned.
    pub fn unban(&mut self, peer: &PeerId) -> bool {
        self.penalty.remove(peer);
        self.banned.remove(peer).is_some()
    }

    /// Let penalties fade by `DECAY_PER_SEC` since the last call (a banned
    /// peer stays banned until its ban runs out).
    pub fn decay(&mut self, now: Instant) {
        let last = self.last_decay.replace(now).unwrap_or(now);
        let points = (now.duration_since(last).as_secs_f64() * DECAY_PER_SEC) as u64;
        if points == 0 {
            self.last_decay = Some(last);
            return;
        }
        let banned = &self.banned;
        self.penalty.retain(|peer, p| {
            *p = p.saturating_sub(points);
            *p > 0 || banned.contains_key(peer)
        });
        self.buckets
            .retain(|_, (tokens, at)| *tokens < GOSSIP_BURST || now.duration_since(*at).as_secs() < 60);
    }

    /// Whether one more gossip message from `peer` fits its rate (token
    /// bucket of `GOSSIP_BURST`, refilled at `GOSSIP_RATE` per second).
    pub fn gossip_allowed(&mut self, peer: PeerId, now: Instant) -> bool {
        if !self.buckets.contains_key(&peer) && self.buckets.len() >= MAX_LEDGER {
            return true;
        }
        let (tokens, at) = self.buckets.entry(peer).or_insert((GOSSIP_BURST, now));
        *tokens = (*tokens + now.duration_since(*at).as_secs_f64() * GOSSIP_RATE).min(GOSSIP_BURST);
        *at = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use murmur_protocol::NodeKey;

    #[test]
    fn keys_and_peer_ids_are_one_identity() {
        let key = NodeKey::from_seed([5; 32]);
        let mut seed = key.seed();
        let sk = identity::ed25519::SecretKey::try_from_bytes(&mut seed).expect("seed");
        let kp = identity::Keypair::from(identity::ed25519::Keypair::from(sk));
        let peer = kp.public().to_peer_id();
        assert_eq!(peer_id_of(&key.public()), Some(peer));
        assert_eq!(public_key_of(&peer), Some(key.public()));
        assert_eq!(public_key_of(&PeerId::random()), None);
    }

    #[test]
    fn bans_past_the_threshold_and_expire() {
        let mut l = PeerLedger::default();
        let p = PeerId::random();
        let t0 = Instant::now();
        assert!(!l.charge(p, NetRejection::BadSignature, t0));
        assert!(!l.charge(p, NetRejection::Malformed, t0));
        assert!(!l.is_banned(&p, t0));
        assert!(l.charge(p, NetRejection::Oversized, t0));
        assert!(l.is_banned(&p, t0));
        assert!(!l.charge(p, NetRejection::Oversized, t0), "already banned");
        assert_eq!(l.expired(t0 + BAN_DURATION), vec![p]);
        assert!(!l.is_banned(&p, t0 + BAN_DURATION));
        assert_eq!(l.penalty(&p), 0);
    }

    #[test]
    fn small_penalties_fade_and_bans_can_be_lifted() {
        let mut l = PeerLedger::default();
        let p = PeerId::random();
        let t0 = Instant::now();
        l.decay(t0);
        for _ in 0..50 {
            l.charge(p, NetRejection::WrongRun, t0);
        }
        assert_eq!(l.penalty(&p), 250);
        l.decay(t0 + Duration::from_secs(100));
        assert_eq!(l.penalty(&p), 200);
        l.decay(t0 + Duration::from_secs(600));
        assert_eq!(l.penalty(&p), 0);
        assert!(l.charge(p, NetRejection::Round(Rejection::Equivocation), t0));
        assert_eq!(l.banned(t0), vec![p]);
        l.decay(t0 + Duration::from_secs(2000));
        assert!(l.is_banned(&p, t0), "decay does not lift a ban");
        assert!(l.unban(&p));
        assert!(!l.is_banned(&p, t0));
        assert!(l.banned(t0).is_empty());
    }

    #[test]
    fn gossip_beyond_the_rate_is_refused() {
        let mut l = PeerLedger::default();
        let (p, q) = (PeerId::random(), PeerId::random());
        let t0 = Instant::now();
        let allowed = (0..5000).filter(|_| l.gossip_allowed(p, t0)).count();
        assert_eq!(allowed, GOSSIP_BURST as usize);
        assert!(l.gossip_allowed(q, t0), "other peers are not affected");
        // One second later, GOSSIP_RATE more.
        let t1 = t0 + Duration::from_secs(1);
        let allowed = (0..5000).filter(|_| l.gossip_allowed(p, t1)).count();
        assert_eq!(allowed, GOSSIP_RATE as usize);
    }
}
