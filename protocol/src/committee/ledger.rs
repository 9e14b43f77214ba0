//! The ledger a state carries beside its parameters: the roster
//! (who sits on the next round's committees) and the excluded keys (proven
//! liars, never again counted). It is part of the StateId, so honest nodes
//! agree on it exactly as they agree on the parameters.
//!
//! The rule (docs/protocol.md §10.5): closing round r, the roster becomes the
//! signers included in the applied result of shard 0, less every excluded
//! key; a key is excluded at the close of round r when a fraud proof against
//! it for an offence in a round before r was verified by then (a proof has
//! a whole round to reach every honest node before it changes a state).

use crate::hash::{domain_hash, StateId};
use crate::identity::PublicKey;
use crate::wire::{Reader, WireError, Writer};
use std::collections::BTreeMap;

/// Domain of a state's StateId (parameters' StateId plus the ledger).
pub const DOMAIN_STATE_V2: &str = "murmur 2026-11 v2 state-id";
/// Most roster or excluded entries.
pub const MAX_LEDGER_KEYS: usize = 65_536;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Ledger {
    /// Ascending, unique.
    pub roster: Vec<PublicKey>,
    /// Excluded key → the round of its proven offence.
    pub excluded: BTreeMap<PublicKey, u64>,
}

impl Ledger {
    pub fn genesis(mut roster: Vec<PublicKey>) -> Self {
        roster.sort();
        roster.dedup();
        Self { roster, excluded: BTreeMap::new() }
    }

    pub fn is_excluded(&self, key: &PublicKey) -> bool {
        self.excluded.contains_key(key)
    }

    /// The ledger after closing a round: `shard0` is the signers of the
    /// applied result of shard 0, ascending (None when shard 0 got no result: the roster
    /// stays), `proven` the keys whose offences may now be recorded.
    pub fn next(&self, shard0: Option<&[PublicKey]>, proven: &BTreeMap<PublicKey, u64>) -> Self {
        let mut excluded = self.excluded.clone();
        for (k, r) in proven {
            if excluded.len() < MAX_LEDGER_KEYS {
                excluded.entry(*k).or_insert(*r);
            }
        }
        let roster: Vec<PublicKey> = match shard0 {
            Some(signers) => signers.to_vec(),
            None => self.roster.clone(),
        };
        let roster = roster.into_iter().filter(|k| !excluded.contains_key(k)).take(MAX_LEDGER_KEYS).collect();
        Self { roster, excluded }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::default();
        w.u32(self.roster.len() as u32);
        for k in &self.roster {
            w.bytes(&k.0);
        }
        w.u32(self.excluded.len() as u32);
        for (k, r) in &self.excluded {
            w.bytes(&k.0);
            w.u64(*r);
        }
        w.finish()
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, WireError> {
        let mut r = Reader::new(bytes);
        let n = r.count("roster", MAX_LEDGER_KEYS, 32)?;
        let mut roster = Vec::with_capacity(n);
        for _ in 0..n {
            roster.push(PublicKey(r.array()?));
        }
        if roster.windows(2).any(|p| p[0] >= p[1]) {
            return Err(WireError::Invalid { field: "roster", why: "keys must strictly increase" });
        }
        let n = r.count("excluded", MAX_LEDGER_KEYS, 40)?;
        let mut excluded = BTreeMap::new();
        let mut last: Option<PublicKey> = None;
        for _ in 0..n {
            let k = PublicKey(r.array()?);
            if last.is_some_and(|l| l >= k) {
                return Err(WireError::Invalid { field: "excluded", why: "keys must strictly increase" });
            }
            last = Some(k);
            excluded.insert(k, r.u64()?);
        }
        r.finish()?;
        Ok(Self { roster, excluded })
    }

    /// The hash of this ledger's encoding (a Ledger blob's id).
    pub fn hash(&self) -> [u8; 32] {
        domain_hash(DOMAIN_STATE_V2, &self.encode())
    }

    /// The StateId of parameters with StateId `params` and this ledger.
    pub fn state_id(&self, params: StateId) -> StateId {
        state_id_of_parts(params, self.hash())
    }
}

/// The StateId of parameters `params` and a ledger hashing to `ledger`.
pub fn state_id_of_parts(params: StateId, ledger: [u8; 32]) -> StateId {
    let mut b = params.0.to_vec();
    b.extend_from_slice(&ledger);
    StateId(domain_hash(DOMAIN_STATE_V2, &b))
}

impl Ledger {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrips_and_the_state_id_covers_it() {
        let mut l = Ledger::genesis(vec![PublicKey([2; 32]), PublicKey([1; 32]), PublicKey([2; 32])]);
        l.excluded.insert(PublicKey([9; 32]), 4);
        assert_eq!(Ledger::decode(&l.encode()).unwrap(), l);
        let other = Ledger::genesis(vec![PublicKey([1; 32])]);
        assert_ne!(l.state_id(StateId([0; 32])), other.state_id(StateId([0; 32])));
    }

    #[test]
    fn the_next_roster_is_shard_zeros_signers_less_the_excluded() {
        let l = Ledger::genesis((1..=4).map(|i| PublicKey([i; 32])).collect());
        let signers = [PublicKey([1; 32]), PublicKey([3; 32]), PublicKey([5; 32])];
        let proven = BTreeMap::from([(PublicKey([3; 32]), 7u64)]);
        let n = l.next(Some(&signers), &proven);
        assert_eq!(n.roster, vec![PublicKey([1; 32]), PublicKey([5; 32])]);
        assert_eq!(n.excluded.get(&PublicKey([3; 32])), Some(&7));
        assert_eq!(l.next(None, &BTreeMap::new()).roster, l.roster);
    }

    #[test]
    fn unsorted_or_oversized_ledgers_are_refused() {
        let mut w = Writer::default();
        w.u32(2);
        w.bytes(&[2; 32]);
        w.bytes(&[1; 32]);
        w.u32(0);
        assert!(Ledger::decode(&w.finish()).is_err());
        let mut w = Writer::default();
        w.u32(u32::MAX);
        assert!(Ledger::decode(&w.finish()).is_err());
    }
}
