//! Peers: the bridge between protocol identities (ed25519 public keys) and
//! libp2p PeerIds, the typed reasons a peer's traffic is refused, and the
//! ledger that scores peers down, bans them past a threshold, keeps the
//! gossip budgets (`rate`), and lets small penalties fade
//! (`DECAY_PER_SEC`), so that the ordinary noise of a long run — a few late
//! or stale messages after each restart — never adds up to a ban. It
//! scores at most `MAX_LEDGER` peers, evicting the oldest entry for a new
//! one (bans are kept apart and outlast eviction).

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use libp2p::identity;
use libp2p::PeerId;
use murmur_protocol::PublicKey;

/// Penalty at which a peer is disconnected and banned.
pub const BAN_THRESHOLD: u64 = 300;
/// How long a ban lasts.
pub const BAN_DURATION: Duration = Duration::from_secs(600);
/// Penalty points a peer's score loses per second.
pub const DECAY_PER_SEC: f64 = 0.5;
use super::rate::GossipRates;
pub use super::rate::{GossipAdmission, GOSSIP_BURST, GOSSIP_RATE};

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
    /// Gossip signed faster than `GOSSIP_RATE` messages per second.
    Flood,
    /// A `Busy` answer to a fetch's request.
    Busy,
    /// Requests of one fetch that failed or timed out, `fetch::MAX_FAILURES`.
    Unresponsive,
    /// A transfer request from a peer a ticket run does not admit (`gate`).
    NotAdmitted,
    /// A transfer request from a peer that already holds its whole serving
    /// share (`serving`), which an honest asker waits for (`asking`).
    Overrun,
}

impl NetRejection {
    /// What the refusal costs the peer.
    pub fn penalty(self) -> u64 {
        match self {
            NetRejection::Malformed
            | NetRejection::BadSignature
            | NetRejection::Oversized
            | NetRejection::Flood => 100,
            // A joiner is refused until it presents its ticket: cheap.
            NetRejection::WrongRun | NetRejection::NotAdmitted => 5,
            NetRejection::BadChunk => 50,
            // Honest peers past their serving limit answer Busy too, and
            // links drop: these cost little (2 per Busy answer; 10 for a
            // peer a fetch gives up on), and decay away.
            NetRejection::Busy => 2,
            NetRejection::Unresponsive => 10,
            // An honest asker overruns only when a request of its ends
            // the moment before the peer's slot for it does (a timeout, a
            // dropped connection): at most a share's worth now and then,
            // which fades; a flood of requests adds up to a ban at once.
            NetRejection::Overrun => 1,
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
            NetRejection::NotAdmitted => "not_admitted".into(),
            NetRejection::Overrun => "overrun".into(),
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
    /// Peers in the order their penalty entries were made (may be stale).
    order: VecDeque<PeerId>,
    counts: HashMap<String, u64>,
    gossip: GossipRates,
    last_decay: Option<Instant>,
}

/// Most peers scored individually.
const MAX_LEDGER: usize = 65_536;

impl PeerLedger {
    /// Charge `peer`; returns true when this pushes it past the threshold
    /// (the caller disconnects and bans it).
    pub fn charge(&mut self, peer: PeerId, reason: NetRejection, now: Instant) -> bool {
        *self.counts.entry(reason.name()).or_insert(0) += 1;
        if !self.penalty.contains_key(&peer) {
            while self.penalty.len() >= MAX_LEDGER {
                let Some(old) = self.order.pop_front() else { break };
                self.penalty.remove(&old);
            }
            self.order.push_back(peer);
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
        let penalty = &self.penalty;
        self.order.retain(|p| penalty.contains_key(p));
        self.gossip.forget_idle(now);
    }

    /// What becomes of one valid gossip message `relay` delivered, signed
    /// by `origin` (see `rate`).
    pub fn admit_gossip(&mut self, relay: PeerId, origin: Option<PeerId>, now: Instant) -> GossipAdmission {
        self.gossip.admit(relay, origin, now)
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
        assert!(!l.charge(p, NetRejection::Malformed, t0));
        assert!(!l.charge(p, NetRejection::Malformed, t0));
        assert!(l.charge(p, NetRejection::Malformed, t0));
        assert_eq!(l.banned(t0), vec![p]);
        l.decay(t0 + Duration::from_secs(2000));
        assert!(l.is_banned(&p, t0), "decay does not lift a ban");
    }

    #[test]
    fn a_full_ledger_scores_a_new_peer_by_evicting_its_oldest_entry() {
        let mut l = PeerLedger::default();
        let t0 = Instant::now();
        let first = PeerId::random();
        l.charge(first, NetRejection::WrongRun, t0);
        for _ in 1..MAX_LEDGER {
            l.charge(PeerId::random(), NetRejection::WrongRun, t0);
        }
        // Fails before: a full ledger stopped recording new peers.
        let late = PeerId::random();
        l.charge(late, NetRejection::BadChunk, t0);
        assert_eq!(l.penalty(&late), NetRejection::BadChunk.penalty());
        assert_eq!(l.penalty(&first), 0, "the oldest entry made room");
        assert_eq!(l.penalty.len(), MAX_LEDGER);
    }
}
