//! RoundCommit: a node's signed statement of how it closed a round — which
//! deltas it included and the StateId it reached.

use crate::hash::{PayloadHash, RunId, StateId};
use crate::identity::{self, NodeKey, PublicKey, Signature, SignatureError, SIGN_ROUND_COMMIT};
use crate::wire::{MessageType, Reader, WireError, Writer, MAX_COMMIT_DELTAS};

/// "In `round` of `run`, starting from `base`, I aggregated exactly the
/// deltas `included` and reached `new_state`."
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoundCommit {
    pub run: RunId,
    pub round: u64,
    pub base: StateId,
    /// Payload hashes, strictly increasing (the aggregation order).
    pub included: Vec<PayloadHash>,
    pub new_state: StateId,
    pub signer: PublicKey,
    pub signature: Signature,
}

impl RoundCommit {
    /// The bytes the signature covers: the encoding without its signature.
    pub fn signed_bytes(&self) -> Vec<u8> {
        let mut w = Writer::message(MessageType::RoundCommit);
        w.bytes(&self.run.0);
        w.u64(self.round);
        w.bytes(&self.base.0);
        w.u32(u32::try_from(self.included.len()).unwrap_or(u32::MAX));
        for h in &self.included {
            w.bytes(&h.0);
        }
        w.bytes(&self.new_state.0);
        w.bytes(&self.signer.0);
        w.finish()
    }

    /// The canonical bytes: `signed_bytes() || signature`.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = self.signed_bytes();
        b.extend_from_slice(&self.signature.0);
        b
    }

    /// Parse canonical bytes (signature not checked; see `verify`).
    pub fn decode(bytes: &[u8]) -> Result<Self, WireError> {
        let mut r = Reader::message(bytes, MessageType::RoundCommit)?;
        let run = RunId(r.array()?);
        let round = r.u64()?;
        let base = StateId(r.array()?);
        let n = r.count("included", MAX_COMMIT_DELTAS, 32)?;
        let mut included = Vec::with_capacity(n);
        for _ in 0..n {
            included.push(PayloadHash(r.array()?));
        }
        if included.windows(2).any(|p| p[0] >= p[1]) {
            return Err(WireError::Invalid { field: "included", why: "hashes must strictly increase" });
        }
        let c = RoundCommit {
            run,
            round,
            base,
            included,
            new_state: StateId(r.array()?),
            signer: PublicKey(r.array()?),
            signature: Signature(r.array()?),
        };
        r.finish()?;
        Ok(c)
    }

    /// Set `signer` to `key`'s public key and sign.
    pub fn sign(mut self, key: &NodeKey) -> Self {
        self.signer = key.public();
        self.signature = key.sign(SIGN_ROUND_COMMIT, &self.signed_bytes());
        self
    }

    /// Check the signature strictly against `signer`.
    pub fn verify(&self) -> Result<(), SignatureError> {
        identity::verify(&self.signer, SIGN_ROUND_COMMIT, &self.signed_bytes(), &self.signature)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn sample_commit(key: &NodeKey) -> RoundCommit {
        RoundCommit {
            run: RunId([1; 32]),
            round: 7,
            base: StateId([2; 32]),
            included: vec![PayloadHash([3; 32]), PayloadHash([4; 32])],
            new_state: StateId([5; 32]),
            signer: PublicKey::default(),
            signature: Signature::default(),
        }
        .sign(key)
    }

    #[test]
    fn round_trips_and_verifies() {
        let key = NodeKey::from_seed([9; 32]);
        let c = sample_commit(&key);
        let bytes = c.encode();
        let back = RoundCommit::decode(&bytes).expect("decodes");
        assert_eq!(back, c);
        assert_eq!(back.encode(), bytes);
        assert_eq!(back.verify(), Ok(()));
    }

    #[test]
    fn unsorted_or_huge_lists_are_rejected() {
        let key = NodeKey::from_seed([9; 32]);
        let mut c = sample_commit(&key);
        c.included.reverse();
        assert!(matches!(RoundCommit::decode(&c.encode()), Err(WireError::Invalid { .. })));
        c.included = vec![PayloadHash([3; 32]); 2];
        assert!(RoundCommit::decode(&c.encode()).is_err());
        // A count far beyond the input is refused before allocating.
        let mut bytes = sample_commit(&key).encode();
        bytes[2 + 32 + 8 + 32..2 + 32 + 8 + 32 + 4].copy_from_slice(&4096u32.to_le_bytes());
        assert!(matches!(RoundCommit::decode(&bytes), Err(WireError::Truncated { .. })));
        bytes[2 + 32 + 8 + 32..2 + 32 + 8 + 32 + 4].copy_from_slice(&4097u32.to_le_bytes());
        assert!(matches!(RoundCommit::decode(&bytes), Err(WireError::TooLong { .. })));
    }
}
