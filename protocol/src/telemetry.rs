//! Telemetry: a node's signed progress report, gossiped for dashboards.

use crate::hash::{RunId, StateId};
use crate::identity::{self, NodeKey, PublicKey, Signature, SignatureError, SIGN_TELEMETRY};
use crate::wire::{MessageType, Reader, WireError, Writer};

/// Longest device description.
pub const MAX_DEVICE_BYTES: usize = 128;
/// Longest backend name ("cpu", "gpu", "cuda").
pub const MAX_BACKEND_BYTES: usize = 16;
/// Most peer links one report lists (the rest are left out).
pub const MAX_LINKS: usize = 64;
/// Most rejection reasons one report lists.
pub const MAX_REJECTION_KINDS: usize = 32;
/// Longest rejection reason name.
pub const MAX_REASON_BYTES: usize = 32;
/// Largest encoding of a Telemetry (every list and string at its cap).
pub const MAX_TELEMETRY_BYTES: usize = 2
    + 32
    + 8
    + 4
    + 5
    + 4
    + (2 + MAX_DEVICE_BYTES)
    + 8
    + 8
    + 4
    + 32
    + (2 + MAX_BACKEND_BYTES)
    + (4 + MAX_LINKS * 33)
    + (4 + MAX_REJECTION_KINDS * (2 + MAX_REASON_BYTES + 8))
    + 4
    + 32
    + 64;

/// A connection the reporting node holds to another node of the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerLink {
    pub peer: PublicKey,
    /// Through a relay circuit rather than a direct connection.
    pub relayed: bool,
}

/// How many messages of one kind the reporting node refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RejectionCount {
    /// The typed reason's name, e.g. "bad-signature".
    pub reason: String,
    pub count: u64,
}

/// One node's progress report (at the end of each round and, rate-bounded,
/// in between). Floats are finite; lists are capped (see the constants).
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
    /// The compute backend: "cpu", "gpu" or "cuda".
    pub backend: String,
    /// The node's connections to other nodes of the run.
    pub links: Vec<PeerLink>,
    /// Messages the node refused since it started, by reason.
    pub rejections: Vec<RejectionCount>,
    /// Times the node's trainer died (a panic in a backend) and was
    /// restarted since the node started.
    pub trainer_restarts: u32,
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
        w.str(&self.backend);
        w.u32(u32::try_from(self.links.len()).unwrap_or(u32::MAX));
        for l in &self.links {
            w.bytes(&l.peer.0);
            w.bool(l.relayed);
        }
        w.u32(u32::try_from(self.rejections.len()).unwrap_or(u32::MAX));
        for r in &self.rejections {
            w.str(&r.reason);
            w.u64(r.count);
        }
        w.u32(self.trainer_restarts);
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
            backend: r.str("backend", MAX_BACKEND_BYTES)?,
            links: {
                let n = r.count("links", MAX_LINKS, 33)?;
                let mut links = Vec::with_capacity(n);
                for _ in 0..n {
                    links.push(PeerLink { peer: PublicKey(r.array()?), relayed: r.bool("relayed")? });
                }
                links
            },
            rejections: {
                let n = r.count("rejections", MAX_REJECTION_KINDS, 2 + 8)?;
                let mut rejections = Vec::with_capacity(n);
                for _ in 0..n {
                    rejections
                        .push(RejectionCount { reason: r.str("reason", MAX_REASON_BYTES)?, count: r.u64()? });
                }
                rejections
            },
            trainer_restarts: r.u32()?,
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
            backend: "cpu".into(),
            links: vec![
                PeerLink { peer: PublicKey([6; 32]), relayed: false },
                PeerLink { peer: PublicKey([7; 32]), relayed: true },
            ],
            rejections: vec![RejectionCount { reason: "bad-signature".into(), count: 3 }],
            trainer_restarts: 1,
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
        let mut t = sample_telemetry(&key);
        t.links = vec![PeerLink { peer: PublicKey([1; 32]), relayed: false }; MAX_LINKS + 1];
        assert!(matches!(Telemetry::decode(&t.encode()), Err(WireError::TooLong { field: "links", .. })));
        let mut t = sample_telemetry(&key);
        t.rejections = vec![RejectionCount { reason: "x".into(), count: 1 }; MAX_REJECTION_KINDS + 1];
        assert!(matches!(
            Telemetry::decode(&t.encode()),
            Err(WireError::TooLong { field: "rejections", .. })
        ));
    }

    #[test]
    fn the_largest_report_fits_its_stated_bound() {
        let key = NodeKey::from_seed([9; 32]);
        let mut t = sample_telemetry(&key);
        t.device = "d".repeat(MAX_DEVICE_BYTES);
        t.backend = "b".repeat(MAX_BACKEND_BYTES);
        t.links = vec![PeerLink { peer: PublicKey([1; 32]), relayed: true }; MAX_LINKS];
        t.rejections = vec![
            RejectionCount { reason: "r".repeat(MAX_REASON_BYTES), count: u64::MAX };
            MAX_REJECTION_KINDS
        ];
        let bytes = t.sign(&key).encode();
        assert_eq!(bytes.len(), MAX_TELEMETRY_BYTES);
        assert!(Telemetry::decode(&bytes).is_ok());
    }
}
