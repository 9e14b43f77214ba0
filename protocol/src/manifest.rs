//! DeltaManifest: the small signed announcement of one node's pseudo-gradient
//! for one round. The payload itself travels separately, fetched by hash.

use crate::codec::Codec;
use crate::hash::{PayloadHash, RunId, StateId};
use crate::identity::{self, NodeKey, PublicKey, Signature, SignatureError, SIGN_DELTA_MANIFEST};
use crate::wire::{MessageType, Reader, WireError, Writer, MAX_ELEMENTS};

/// Largest encoded DeltaManifest (the codec field is 1 to 9 bytes).
pub const MAX_MANIFEST_BYTES: usize = 2 + 32 + 8 + 32 + 32 + 8 + 4 + 9 + 8 + 8 + 32 + 64;

/// A signed announcement: "I trained `tokens` tokens from `base` in `round`
/// of `run`; my encoded delta is `payload_len` bytes hashing to `payload_hash`."
#[derive(Debug, Clone, PartialEq)]
pub struct DeltaManifest {
    pub run: RunId,
    pub round: u64,
    /// The state the delta was trained from.
    pub base: StateId,
    pub signer: PublicKey,
    pub tokens: u64,
    /// Mean training loss over the round's inner steps (finite).
    pub train_loss: f32,
    pub codec: Codec,
    /// Number of f32 elements the payload decodes to.
    pub element_count: u64,
    /// Must equal `codec.payload_len(element_count)`.
    pub payload_len: u64,
    pub payload_hash: PayloadHash,
    pub signature: Signature,
}

impl DeltaManifest {
    /// The bytes the signature covers: the encoding without its signature.
    pub fn signed_bytes(&self) -> Vec<u8> {
        let mut w = Writer::message(MessageType::DeltaManifest);
        w.bytes(&self.run.0);
        w.u64(self.round);
        w.bytes(&self.base.0);
        w.bytes(&self.signer.0);
        w.u64(self.tokens);
        w.f32(self.train_loss);
        self.codec.write(&mut w);
        w.u64(self.element_count);
        w.u64(self.payload_len);
        w.bytes(&self.payload_hash.0);
        w.finish()
    }

    /// The canonical bytes: `signed_bytes() || signature`.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = self.signed_bytes();
        b.extend_from_slice(&self.signature.0);
        b
    }

    /// Parse canonical bytes (the signature is not checked here; see `verify`).
    pub fn decode(bytes: &[u8]) -> Result<Self, WireError> {
        let mut r = Reader::message(bytes, MessageType::DeltaManifest)?;
        let m = DeltaManifest {
            run: RunId(r.array()?),
            round: r.u64()?,
            base: StateId(r.array()?),
            signer: PublicKey(r.array()?),
            tokens: r.u64()?,
            train_loss: r.f32("train_loss")?,
            codec: Codec::read(&mut r)?,
            element_count: r.u64()?,
            payload_len: r.u64()?,
            payload_hash: PayloadHash(r.array()?),
            signature: Signature(r.array()?),
        };
        r.finish()?;
        if m.element_count == 0 || m.element_count > MAX_ELEMENTS {
            return Err(WireError::Invalid { field: "element_count", why: "must be in 1..=2^31" });
        }
        if m.codec.payload_len(m.element_count) != Some(m.payload_len) {
            return Err(WireError::Invalid {
                field: "payload_len",
                why: "does not match the codec and element count",
            });
        }
        Ok(m)
    }

    /// Set `signer` to `key`'s public key and sign.
    pub fn sign(mut self, key: &NodeKey) -> Self {
        self.signer = key.public();
        self.signature = key.sign(SIGN_DELTA_MANIFEST, &self.signed_bytes());
        self
    }

    /// Check the signature strictly against `signer`.
    pub fn verify(&self) -> Result<(), SignatureError> {
        identity::verify(&self.signer, SIGN_DELTA_MANIFEST, &self.signed_bytes(), &self.signature)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn sample_manifest(key: &NodeKey) -> DeltaManifest {
        let codec = Codec::Int8Block { block: 256 };
        DeltaManifest {
            run: RunId([1; 32]),
            round: 7,
            base: StateId([2; 32]),
            signer: PublicKey::default(),
            tokens: 65_536,
            train_loss: 3.25,
            codec,
            element_count: 1000,
            payload_len: codec.payload_len(1000).unwrap_or(0),
            payload_hash: PayloadHash([3; 32]),
            signature: Signature::default(),
        }
        .sign(key)
    }

    #[test]
    fn round_trips_and_verifies() {
        let key = NodeKey::from_seed([9; 32]);
        let m = sample_manifest(&key);
        let bytes = m.encode();
        assert!(bytes.len() <= MAX_MANIFEST_BYTES);
        let back = DeltaManifest::decode(&bytes).expect("decodes");
        assert_eq!(back, m);
        assert_eq!(back.encode(), bytes);
        assert_eq!(back.verify(), Ok(()));
    }

    #[test]
    fn inconsistent_lengths_are_rejected() {
        let key = NodeKey::from_seed([9; 32]);
        let mut m = sample_manifest(&key);
        m.payload_len += 1;
        assert!(matches!(
            DeltaManifest::decode(&m.encode()),
            Err(WireError::Invalid { field: "payload_len", .. })
        ));
        let mut m = sample_manifest(&key);
        m.element_count = 0;
        assert!(DeltaManifest::decode(&m.encode()).is_err());
    }

    #[test]
    fn tampering_breaks_the_signature() {
        let key = NodeKey::from_seed([9; 32]);
        let mut m = sample_manifest(&key);
        m.tokens += 1;
        assert_eq!(m.verify(), Err(SignatureError::Invalid));
    }
}
