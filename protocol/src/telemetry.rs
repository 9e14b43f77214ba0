//! Telemetry: a node's signed progress report, gossiped for dashboards.

use crate::hash::{RunId, StateId};
use crate::identity::{self, NodeKey, PublicKey, Signature, SignatureError, SIGN_TELEMETRY};
use crate::wire::{MessageType, Reader, WireError, Writer};

/// Longest device description.
pub const MAX_DEVICE_BYTES: usize = 128;

/// One node's report at the end of a round. Floats are finite.
#[derive(Debug, Clone, PartialEq)]
pub struct Telemetry {
    pub run: RunId,
    pub round: u64,
    pub train_loss: f32,
    pub val_loss: Option<f32>,
    pub tokens_per_sec: f32,
    /// e.g. "cpu (16 threads)" or "gpu: NVIDIA H100 (vulkan)".
    pub device: String,
    pub bytes_sent: u64,
    pub bytes_recv: u64,
    pub peer_count: u32,
    /// The node's current state.
    pub state: StateId,
    pub signer: PublicKey,
    pub signature: Signature,
}

impl Telemetry {
    /// The bytes the signature covers: the encoding without its signature.
    pub fn signed_bytes(&self) -> Vec<u8> {
        let mut w = Writer::message(MessageType::Telemetry);
        w.bytes(&self.run.0);
        w.u64(self.round);
        w.f32(self.train_loss);
        match self.val_loss {
            None => w.bool(false),
            Some(v) => {
                w.bool(true);
                w.f32(v);
            }
        }
        w.f32(self.tokens_per_sec);
        w.str(&self.device);
        w.u64(self.bytes_sent);
        w.u64(self.bytes_recv);
        w.u32(self.peer_count);
        w.bytes(&self.state.0);
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
        let mut r = Reader::message(bytes, MessageType::Telemetry)?;
        let t = Telemetry {
            run: RunId(r.array()?),
            round: r.u64()?,
            train_loss: r.f32("train_loss")?,
            val_loss: if r.bool("val_loss")? { Some(r.f32("val_loss")?) } else { None },
            tokens_per_sec: r.f32("tokens_per_sec")?,
            device: r.str("device", MAX_DEVICE_BYTES)?,
            bytes_sent: r.u64()?,
            bytes_recv: r.u64()?,
            peer_count: r.u32()?,
            state: StateId(r.array()?),
            signer: PublicKey(r.array()?),
            signature: Signature(r.array()?),
        };
        r.finish()?;
        Ok(t)
    }

    /// Set `signer` to `key`'s public key and sign.
    pub fn sign(mut self, key: &NodeKey) -> Self {
        self.signer = key.public();
        self.signature = key.sign(SIGN_TELEMETRY, &self.signed_bytes());
        self
    }

    /// Check the signature strictly against `signer`.
    pub fn verify(&self) -> Result<(), SignatureError> {
        identity::verify(&self.signer, SIGN_TELEMETRY, &self.signed_bytes(), &self.signature)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn sample_telemetry(key: &NodeKey) -> Telemetry {
        Telemetry {
            run: RunId([1; 32]),
            round: 7,
            train_loss: 3.25,
            val_loss: Some(3.5),
            tokens_per_sec: 12_345.5,
            device: "cpu (2 threads)".into(),
            bytes_sent: 1 << 20,
            bytes_recv: 3 << 20,
            peer_count: 4,
            state: StateId([5; 32]),
            signer: PublicKey::default(),
            signature: Signature::default(),
        }
        .sign(key)
    }

    #[test]
    fn round_trips_and_verifies() {
        let key = NodeKey::from_seed([9; 32]);
        for val in [Some(3.5), None] {
            let mut t = sample_telemetry(&key);
            t.val_loss = val;
            let t = t.sign(&key);
            let bytes = t.encode();
            let back = Telemetry::decode(&bytes).expect("decodes");
            assert_eq!(back, t);
            assert_eq!(back.encode(), bytes);
            assert_eq!(back.verify(), Ok(()));
        }
    }

    #[test]
    fn non_finite_and_long_fields_are_rejected() {
        let key = NodeKey::from_seed([9; 32]);
        let mut t = sample_telemetry(&key);
        t.train_loss = f32::INFINITY;
        assert!(matches!(Telemetry::decode(&t.encode()), Err(WireError::NonFinite { .. })));
        let mut t = sample_telemetry(&key);
        t.device = "x".repeat(MAX_DEVICE_BYTES + 1);
        assert!(matches!(Telemetry::decode(&t.encode()), Err(WireError::TooLong { .. })));
    }
}
