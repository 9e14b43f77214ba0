//! What comes for the next round while this node finishes its own: shard
//! offers and gossiped manifests and results, held until that round opens.
//! Gossip comes with its signature checked, an offer once its manifest's
//! signature and its leaf's proof are (the loop checks before it keeps
//! one), but the machine judges none of it until it is fed, so the buffer
//! is bounded per signer and apart for keys off the roster: no one key,
//! and no number of made-up keys, takes the room the roster members'
//! messages need; and a message is held once, so a peer that replays
//! another's message fills none of that signer's share.

use std::collections::{HashMap, HashSet};

use murmur_protocol::PublicKey;

use crate::net::offer::ShardOffer;
use crate::net::GossipMessage;

/// Messages held per signer: its manifest, its results of the shards it
/// aggregates and its offers of the shards this node aggregates, with room
/// to spare.
pub const PER_SIGNER: usize = 16;
/// Messages held from keys off the roster, together (newcomers).
pub const OFF_ROSTER: usize = 1024;
/// Messages held from roster members, together (an offer may carry a
/// shard of up to 4 KiB inline: at most about 80 MB).
pub const ON_ROSTER: usize = 1 << 14;

/// A message for a round this node has not opened yet.
pub enum Early {
    Gossip(Box<GossipMessage>),
    Offer(ShardOffer),
}

impl Early {
    /// What the message's signer signed (the signature left out, so a
    /// second encoding of one signature is the same message), hashed.
    fn identity(&self) -> [u8; 32] {
        let mut h = blake3::Hasher::new();
        match self {
            Early::Offer(o) => {
                h.update(b"offer");
                h.update(&o.manifest.signed_bytes());
                h.update(&o.leaf.shard.to_le_bytes());
                h.update(&o.leaf.payload_hash.0);
                h.update(&o.leaf.payload_len.to_le_bytes());
                h.update(&o.leaf.norm.to_le_bytes());
            }
            Early::Gossip(g) => {
                let bytes = g.encode();
                h.update(b"gossip");
                h.update(&bytes[..bytes.len().saturating_sub(64)]);
            }
        }
        *h.finalize().as_bytes()
    }

    /// The key the message says signed it (checked when it is fed).
    fn signer(&self) -> Option<PublicKey> {
        match self {
            Early::Offer(o) => Some(o.signer),
            Early::Gossip(g) => match &**g {
                GossipMessage::ShardedManifest(m) => Some(m.signer),
                GossipMessage::ShardResult(r) => Some(r.signer),
                _ => None,
            },
        }
    }
}

/// The next round's messages, held.
#[derive(Default)]
pub struct EarlyBuffer {
    round: u64,
    held: Vec<Early>,
    seen: HashSet<[u8; 32]>,
    by_signer: HashMap<PublicKey, usize>,
    on_roster: usize,
    off_roster: usize,
}

impl EarlyBuffer {
    /// Hold `e`, a message of round `round`, if that is `next` (the round
    /// after this node's), it is not held already and its signer has room
    /// (`on_roster`: whether the signer is on this node's roster). Whether
    /// it was held.
    pub fn keep(&mut self, next: u64, round: u64, e: Early, on_roster: impl Fn(&PublicKey) -> bool) -> bool {
        if round != next {
            return false;
        }
        if self.round != next {
            self.clear(next);
        }
        let Some(signer) = e.signer() else { return false };
        let member = on_roster(&signer);
        let (pool, cap) = if member { (self.on_roster, ON_ROSTER) } else { (self.off_roster, OFF_ROSTER) };
        let count = self.by_signer.get(&signer).copied().unwrap_or(0);
        if count >= PER_SIGNER || pool >= cap || !self.seen.insert(e.identity()) {
            return false;
        }
        self.by_signer.insert(signer, count + 1);
        if member {
            self.on_roster += 1;
        } else {
            self.off_roster += 1;
        }
        self.held.push(e);
        true
    }

    /// What was held for `round` (now open), in the order it came. What
    /// is held for another round stays until a message of a third round
    /// is kept.
    pub fn take(&mut self, round: u64) -> Vec<Early> {
        if self.round != round {
            return Vec::new();
        }
        let held = std::mem::take(&mut self.held);
        self.clear(round + 1);
        held
    }

    fn clear(&mut self, round: u64) {
        self.round = round;
        self.held.clear();
        self.seen.clear();
        self.by_signer.clear();
        self.on_roster = 0;
        self.off_roster = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use murmur_protocol::NodeKey;

    fn result_of(key: &NodeKey, round: u64) -> Early {
        result_n(key, round, 0)
    }

    /// The signer's result of shard `n`.
    fn result_n(key: &NodeKey, round: u64, n: u32) -> Early {
        let r = murmur_protocol::committee::ShardResult {
            run: murmur_protocol::RunId([1; 32]),
            round,
            shard: n,
            base: murmur_protocol::StateId([2; 32]),
            signer: key.public(),
            included_root: [3; 32],
            included_count: 1,
            total_tokens: 1,
            result_hash: [4; 32],
            signature: murmur_protocol::Signature([0; 64]),
        };
        Early::Gossip(Box::new(GossipMessage::ShardResult(r)))
    }

    #[test]
    fn no_key_and_no_crowd_of_made_up_keys_pushes_out_a_roster_members_messages() {
        let member = NodeKey::from_seed([1; 32]);
        let on_roster = |k: &PublicKey| *k == member.public();
        let mut b = EarlyBuffer::default();
        // Only the next round's are held.
        assert!(!b.keep(6, 7, result_of(&member, 7), on_roster));
        // One key floods: it gets its share, no more.
        let flooder = NodeKey::from_seed([9; 32]);
        let kept = (0..100).filter(|&n| b.keep(6, 6, result_n(&flooder, 6, n), on_roster)).count();
        assert_eq!(kept, PER_SIGNER);
        // Made-up keys fill only the room off the roster.
        let mut made_up = 0;
        for i in 0..2 * OFF_ROSTER as u32 {
            let mut seed = [0u8; 32];
            seed[..4].copy_from_slice(&i.to_le_bytes());
            seed[31] = 0xee;
            made_up += usize::from(b.keep(6, 6, result_of(&NodeKey::from_seed(seed), 6), on_roster));
        }
        assert_eq!(made_up + kept, OFF_ROSTER);
        // The roster member's messages are still held, each once: a
        // replay (the same signed bytes, another signature) takes none of
        // its share.
        assert!(b.keep(6, 6, result_of(&member, 6), on_roster));
        let Early::Gossip(g) = result_of(&member, 6) else { unreachable!() };
        let GossipMessage::ShardResult(mut replayed) = *g else { unreachable!() };
        replayed.signature = murmur_protocol::Signature([7; 64]);
        let replay = Early::Gossip(Box::new(GossipMessage::ShardResult(replayed)));
        assert!(!b.keep(6, 6, replay, on_roster));
        let shares = (1..100).filter(|&n| b.keep(6, 6, result_n(&member, 6, n), on_roster)).count();
        assert_eq!(shares, PER_SIGNER - 1, "the rest of its share is its own to fill");
        let held = b.take(6);
        assert_eq!(held.len(), OFF_ROSTER + PER_SIGNER);
        assert!(held.last().and_then(Early::signer) == Some(member.public()));
        // Taken: the buffer holds the round after now, emptied.
        assert!(b.take(7).is_empty());
        assert!(b.keep(7, 7, result_of(&flooder, 7), on_roster), "a new round, a new share");
        // A node that moved to another round takes nothing of round 7 …
        assert!(b.take(9).is_empty());
        // … which is fed if round 7 opens after all, and dropped when a
        // message of another round is kept.
        assert_eq!(b.take(7).len(), 1);
        assert!(b.keep(7, 7, result_of(&flooder, 7), on_roster));
        assert!(b.keep(10, 10, result_of(&member, 10), on_roster));
        assert_eq!(b.take(7).len(), 0);
        assert_eq!(b.take(10).len(), 1);
    }
}
