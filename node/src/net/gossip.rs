//! Gossip: the run's topics and the validation every message passes before
//! gossipsub may forward it (decode, run, signature).
//!
//! Topics carry small signed messages only (max 64 KiB per message); the
//! payloads they announce travel over the transfer protocol.

use libp2p::gossipsub::IdentTopic;
use murmur_protocol::committee::messages::SHARD_RESULT_BYTES;
use murmur_protocol::committee::{FraudProof, ShardResult, ShardedManifest};
use murmur_protocol::ticket::TICKET_BYTES;
use murmur_protocol::{DeltaManifest, PublicKey, RoundCommit, RunId, Telemetry, Ticket};

use super::peers::NetRejection;

/// Largest gossip message accepted or sent.
pub const MAX_GOSSIP_BYTES: usize = 64 * 1024;

pub use murmur_protocol::telemetry::MAX_TELEMETRY_BYTES;

/// What a topic carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TopicKind {
    Manifest,
    Commit,
    Telemetry,
    /// Admission tickets (runs that admit by ticket): each node publishes
    /// its own when it joins and every minute.
    Ticket,
    /// Protocol v2: sharded manifests, shard results and fraud proofs.
    ShardedManifest,
    ShardResult,
    FraudProof,
}

/// Largest sharded manifest (a constant-size message; margin for the tag).
const MAX_SHARDED_MANIFEST_BYTES: usize = 512;

impl TopicKind {
    pub const ALL: [TopicKind; 7] = [
        TopicKind::Manifest,
        TopicKind::Commit,
        TopicKind::Telemetry,
        TopicKind::Ticket,
        TopicKind::ShardedManifest,
        TopicKind::ShardResult,
        TopicKind::FraudProof,
    ];

    fn suffix(self) -> &'static str {
        match self {
            TopicKind::Manifest => "manifest",
            TopicKind::Commit => "commit",
            TopicKind::Telemetry => "telemetry",
            TopicKind::Ticket => "ticket",
            TopicKind::ShardedManifest => "v2-manifest",
            TopicKind::ShardResult => "v2-result",
            TopicKind::FraudProof => "v2-proof",
        }
    }

    /// `murmur/1/<run id hex>/<kind>`.
    /// Largest message of this kind: a DeltaManifest or Telemetry has a
    /// bounded encoding; a RoundCommit is bounded by the gossip cap.
    pub fn max_bytes(self) -> usize {
        match self {
            TopicKind::Manifest => murmur_protocol::manifest::MAX_MANIFEST_BYTES,
            TopicKind::Telemetry => MAX_TELEMETRY_BYTES,
            TopicKind::Ticket => TICKET_BYTES,
            TopicKind::Commit => MAX_GOSSIP_BYTES,
            TopicKind::ShardedManifest => MAX_SHARDED_MANIFEST_BYTES,
            TopicKind::ShardResult => SHARD_RESULT_BYTES,
            // A wrong-result proof carries the included list it names.
            TopicKind::FraudProof => MAX_GOSSIP_BYTES,
        }
    }

    pub fn topic(self, run: &RunId) -> IdentTopic {
        IdentTopic::new(format!("murmur/1/{}/{}", run.to_hex(), self.suffix()))
    }
}

/// A validated gossip message.
#[derive(Debug, Clone, PartialEq)]
pub enum GossipMessage {
    Manifest(DeltaManifest),
    Commit(RoundCommit),
    Telemetry(Telemetry),
    Ticket(Ticket),
    ShardedManifest(ShardedManifest),
    ShardResult(ShardResult),
    FraudProof(Box<FraudProof>),
}

impl GossipMessage {
    pub fn kind(&self) -> TopicKind {
        match self {
            GossipMessage::Manifest(_) => TopicKind::Manifest,
            GossipMessage::Commit(_) => TopicKind::Commit,
            GossipMessage::Telemetry(_) => TopicKind::Telemetry,
            GossipMessage::Ticket(_) => TopicKind::Ticket,
            GossipMessage::ShardedManifest(_) => TopicKind::ShardedManifest,
            GossipMessage::ShardResult(_) => TopicKind::ShardResult,
            GossipMessage::FraudProof(_) => TopicKind::FraudProof,
        }
    }

    /// The key that signed the message and whose gossip budget it uses:
    /// the signer, or a ticket's holder (whom it admits); none for a fraud
    /// proof, which carries other nodes' signatures.
    pub fn origin(&self) -> Option<PublicKey> {
        match self {
            GossipMessage::Manifest(m) => Some(m.signer),
            GossipMessage::Commit(c) => Some(c.signer),
            GossipMessage::Telemetry(t) => Some(t.signer),
            GossipMessage::Ticket(t) => Some(t.holder),
            GossipMessage::ShardedManifest(m) => Some(m.signer),
            GossipMessage::ShardResult(r) => Some(r.signer),
            GossipMessage::FraudProof(_) => None,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        match self {
            GossipMessage::Manifest(m) => m.encode(),
            GossipMessage::Commit(c) => c.encode(),
            GossipMessage::Telemetry(t) => t.encode(),
            GossipMessage::Ticket(t) => t.encode(),
            GossipMessage::ShardedManifest(m) => m.encode(),
            GossipMessage::ShardResult(r) => r.encode(),
            GossipMessage::FraudProof(p) => p.encode(),
        }
    }
}

/// Decode `bytes` received on `kind`'s topic of `run` and check its
/// signature; the typed reason says why not.
pub fn validate(kind: TopicKind, run: &RunId, bytes: &[u8]) -> Result<GossipMessage, NetRejection> {
    if bytes.len() > kind.max_bytes() {
        return Err(NetRejection::Oversized);
    }
    let (msg_run, sig_ok, msg) = match kind {
        TopicKind::Manifest => {
            let m = DeltaManifest::decode(bytes).map_err(|_| NetRejection::Malformed)?;
            (m.run, m.verify().is_ok(), GossipMessage::Manifest(m))
        }
        TopicKind::Commit => {
            let c = RoundCommit::decode(bytes).map_err(|_| NetRejection::Malformed)?;
            (c.run, c.verify().is_ok(), GossipMessage::Commit(c))
        }
        TopicKind::Telemetry => {
            let t = Telemetry::decode(bytes).map_err(|_| NetRejection::Malformed)?;
            (t.run, t.verify().is_ok(), GossipMessage::Telemetry(t))
        }
        TopicKind::Ticket => {
            // The operator's signature; whether the run names that operator
            // is the runtime's check (the network does not know the spec).
            let t = Ticket::decode(bytes).map_err(|_| NetRejection::Malformed)?;
            (t.run, t.verify().is_ok(), GossipMessage::Ticket(t))
        }
        TopicKind::ShardedManifest => {
            let m = ShardedManifest::decode(bytes).map_err(|_| NetRejection::Malformed)?;
            (m.run, m.verify().is_ok(), GossipMessage::ShardedManifest(m))
        }
        TopicKind::ShardResult => {
            let r = ShardResult::decode(bytes).map_err(|_| NetRejection::Malformed)?;
            (r.run, r.verify().is_ok(), GossipMessage::ShardResult(r))
        }
        TopicKind::FraudProof => {
            // The signatures and the form of the proof; whether a wrong
            // result is wrong takes a recomputation (the runtime's job).
            let p = FraudProof::decode(bytes).map_err(|_| NetRejection::Malformed)?;
            (p.run(), p.check().is_ok(), GossipMessage::FraudProof(Box::new(p)))
        }
    };
    if !sig_ok {
        return Err(NetRejection::BadSignature);
    }
    if msg_run != *run {
        return Err(NetRejection::WrongRun);
    }
    Ok(msg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use murmur_protocol::{Codec, NodeKey, PayloadHash, PublicKey, Signature, StateId};

    fn manifest(key: &NodeKey, run: RunId) -> DeltaManifest {
        let codec = Codec::F32;
        DeltaManifest {
            run,
            round: 1,
            base: StateId([2; 32]),
            signer: PublicKey::default(),
            tokens: 10,
            train_loss: 1.0,
            codec,
            element_count: 4,
            payload_len: codec.payload_len(4).unwrap_or(0),
            payload_hash: PayloadHash([3; 32]),
            signature: Signature::default(),
        }
        .sign(key)
    }

    #[test]
    fn valid_messages_pass_and_each_fault_has_its_reason() {
        let key = NodeKey::from_seed([1; 32]);
        let run = RunId([9; 32]);
        let m = manifest(&key, run);
        let bytes = m.encode();
        assert_eq!(validate(TopicKind::Manifest, &run, &bytes), Ok(GossipMessage::Manifest(m.clone())));
        assert_eq!(validate(TopicKind::Commit, &run, &bytes), Err(NetRejection::Malformed));
        assert_eq!(validate(TopicKind::Manifest, &RunId([8; 32]), &bytes), Err(NetRejection::WrongRun));
        let mut forged = bytes.clone();
        let n = forged.len();
        forged[n - 1] ^= 1;
        assert_eq!(validate(TopicKind::Manifest, &run, &forged), Err(NetRejection::BadSignature));
        assert_eq!(
            validate(TopicKind::Manifest, &run, &vec![0; MAX_GOSSIP_BYTES + 1]),
            Err(NetRejection::Oversized)
        );
        assert_eq!(validate(TopicKind::Manifest, &run, &vec![0; 4000]), Err(NetRejection::Oversized));
        assert_eq!(validate(TopicKind::Telemetry, &run, &[1, 6, 0]), Err(NetRejection::Malformed));
        let t = Ticket::issue(&key, run, PublicKey([5; 32]), 10);
        assert_eq!(validate(TopicKind::Ticket, &run, &t.encode()), Ok(GossipMessage::Ticket(t.clone())));
        assert_eq!(validate(TopicKind::Ticket, &RunId([8; 32]), &t.encode()), Err(NetRejection::WrongRun));
        let mut forged = t.encode();
        forged[40] ^= 1;
        assert_eq!(validate(TopicKind::Ticket, &run, &forged), Err(NetRejection::BadSignature));
        assert_eq!(validate(TopicKind::Ticket, &run, &bytes), Err(NetRejection::Oversized));
    }
}
