//! Node identity and signatures: ed25519 keys (the same 32-byte seed also
//! makes the node's libp2p identity) and domain-separated signing.
//!
//! A signature always covers `domain || message`, where `domain` names the
//! message type, so a signature over one kind of message never verifies as
//! another. Verification uses ed25519-dalek's `verify_strict` (rejects
//! non-canonical encodings and small-order keys).

use ed25519_dalek::{Signer, SigningKey, VerifyingKey};
use std::fmt;
use thiserror::Error;

/// Signing domain of a Telemetry report.
pub const SIGN_TELEMETRY: &[u8] = b"murmur/v1/sign/telemetry\0";
/// Signing domain of an admission Ticket.
pub const SIGN_TICKET: &[u8] = b"murmur/v1/sign/ticket\0";
/// Signing domain of a ShardedManifest.
pub const SIGN_SHARDED_MANIFEST: &[u8] = b"murmur/v2/sign/sharded-manifest\0";
/// Signing domain of a ShardResult.
pub const SIGN_SHARD_RESULT: &[u8] = b"murmur/v2/sign/shard-result\0";
/// Domain of the signature a node draws its audits from (never sent: only
/// its holder can compute it, so no owner knows the draw before it signs).
pub const SIGN_AUDIT_DRAW: &[u8] = b"murmur/v2/sign/audit-draw\0";

/// An ed25519 public key as its 32 raw bytes. Any bytes decode; whether they
/// are a valid key is decided when a signature is verified.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct PublicKey(pub [u8; 32]);

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicKey({})", &crate::hash::hex(&self.0)[..16])
    }
}

impl fmt::Display for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&crate::hash::hex(&self.0))
    }
}

/// An ed25519 signature as its 64 raw bytes.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Signature(pub [u8; 64]);

impl Default for Signature {
    fn default() -> Self {
        Self([0; 64])
    }
}

impl fmt::Debug for Signature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Signature({}…)", &crate::hash::hex(&self.0)[..16])
    }
}

/// Why a signature did not verify.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum SignatureError {
    #[error("the public key is not a valid ed25519 point")]
    BadKey,
    #[error("the signature does not verify under the signer's key")]
    Invalid,
}

/// A node's signing key. Built from a 32-byte seed; the caller supplies the
/// seed (from its own CSPRNG or a key file), keeping this crate deterministic.
#[derive(Clone)]
pub struct NodeKey {
    signing: SigningKey,
}

impl fmt::Debug for NodeKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NodeKey({:?})", self.public())
    }
}

impl NodeKey {
    /// The key whose ed25519 secret seed is `seed`. libp2p-identity's
    /// `ed25519::SecretKey::try_from_bytes(seed)` gives the same identity.
    pub fn from_seed(seed: [u8; 32]) -> Self {
        Self { signing: SigningKey::from_bytes(&seed) }
    }

    /// The 32-byte secret seed (keep it secret; store it with care).
    pub fn seed(&self) -> [u8; 32] {
        self.signing.to_bytes()
    }

    /// The public key: the signer field of every message this node signs,
    /// and the key inside its libp2p PeerId.
    pub fn public(&self) -> PublicKey {
        PublicKey(self.signing.verifying_key().to_bytes())
    }

    /// Sign `domain || message`.
    pub fn sign(&self, domain: &[u8], message: &[u8]) -> Signature {
        let mut m = Vec::with_capacity(domain.len() + message.len());
        m.extend_from_slice(domain);
        m.extend_from_slice(message);
        Signature(self.signing.sign(&m).to_bytes())
    }
}

/// Verify `signature` by `signer` over `domain || message`, strictly.
pub fn verify(
    signer: &PublicKey,
    domain: &[u8],
    message: &[u8],
    signature: &Signature,
) -> Result<(), SignatureError> {
    let key = VerifyingKey::from_bytes(&signer.0).map_err(|_| SignatureError::BadKey)?;
    let sig = ed25519_dalek::Signature::from_bytes(&signature.0);
    let mut m = Vec::with_capacity(domain.len() + message.len());
    m.extend_from_slice(domain);
    m.extend_from_slice(message);
    key.verify_strict(&m, &sig).map_err(|_| SignatureError::Invalid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_round_trips_and_signs() {
        let key = NodeKey::from_seed([7; 32]);
        assert_eq!(NodeKey::from_seed(key.seed()).public(), key.public());
        let sig = key.sign(SIGN_TELEMETRY, b"hello");
        assert_eq!(verify(&key.public(), SIGN_TELEMETRY, b"hello", &sig), Ok(()));
        // Deterministic: same key and message give the same signature.
        assert_eq!(key.sign(SIGN_TELEMETRY, b"hello"), sig);
    }

    #[test]
    fn domain_message_and_key_all_matter() {
        let key = NodeKey::from_seed([7; 32]);
        let other = NodeKey::from_seed([8; 32]);
        let sig = key.sign(SIGN_TELEMETRY, b"hello");
        assert_eq!(verify(&key.public(), SIGN_TICKET, b"hello", &sig), Err(SignatureError::Invalid));
        assert_eq!(verify(&key.public(), SIGN_TELEMETRY, b"hellp", &sig), Err(SignatureError::Invalid));
        assert_eq!(verify(&other.public(), SIGN_TELEMETRY, b"hello", &sig), Err(SignatureError::Invalid));
    }

    #[test]
    fn garbage_keys_and_signatures_are_errors() {
        // y = 2 is not on the curve for either sign bit; the all-zero key is small-order.
        let mut bad = [0u8; 32];
        bad[0] = 2;
        let sig = Signature([0xff; 64]);
        assert!(verify(&PublicKey(bad), SIGN_TELEMETRY, b"m", &sig).is_err());
        assert!(verify(&PublicKey([0; 32]), SIGN_TELEMETRY, b"m", &Signature::default()).is_err());
        let key = NodeKey::from_seed([1; 32]);
        assert!(verify(&key.public(), SIGN_TELEMETRY, b"m", &sig).is_err());
    }
}
