//! Gossip: the run's topics and the validation every message passes before
//! gossipsub may forward it (decode, run, signature).
//!
//! Topics carry small signed messages only (max 64 KiB per message); the
//! payloads they announce travel over the transfer protocol.

use libp2p::gossipsub::IdentTopic;
use murmur_protocol::committee::messages::SHARD_RESULT_BYTES;
use murmur_protocol::committee::{FraudProof, ShardResult, ShardedManifest};
use murmur_protocol::ticket::TICKET_BYTES;
use murmur_protocol::{PublicKey, RunId, Telemetry, Ticket};

use super::peers::NetRejection;

/// Largest gossip message accepted or sent.
pub const MAX_GOSSIP_BYTES: usize = 64 * 1024;

pub use murmur_protocol::telemetry::MAX_TELEMETRY_BYTES;

/// What a topic carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TopicKind {
    Telemetry,
    /// Admission tickets (runs that admit by ticket): each node publishes
    /// its own when it joins and every minute.
    Ticket,
    /// The round's sharded manifests, shard results and fraud proofs.
    ShardedManifest,
    ShardResult,
    FraudProof,
}

/// Largest sharded manifest (a constant-size message; margin for the tag).
const MAX_SHARDED_MANIFEST_BYTES: usize = 512;

impl TopicKind {
    pub const ALL: [TopicKind; 5] = [
        TopicKind::Telemetry,
        TopicKind::Ticket,
        TopicKind::ShardedManifest,
        TopicKind::ShardResult,
        TopicKind::FraudProof,
    ];

    fn suffix(self) -> &'static str {
        match self {
            TopicKind::Telemetry => "telemetry",
            TopicKind::Ticket => "ticket",
            TopicKind::ShardedManifest => "v2-manifest",
            TopicKind::ShardResult => "v2-result",
            TopicKind::FraudProof => "v2-proof",
        }
    }

    /// `murmur/1/<run id hex>/<kind>`.
    /// Largest message of this kind.
    pub fn max_bytes(self) -> usize {
        match self {
            TopicKind::Telemetry => MAX_TELEMETRY_BYTES,
            TopicKind::Ticket => TICKET_BYTES,
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
    Telemetry(Telemetry),
    Ticket(Ticket),
    ShardedManifest(ShardedManifest),
    ShardResult(ShardResult),
    FraudProof(Box<FraudProof>),
}

impl GossipMessage {
    pub fn kind(&self) -> TopicKind {
        match self {
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
            GossipMessage::Telemetry(t) => Some(t.signer),
            GossipMessage::Ticket(t) => Some(t.holder),
            GossipMessage::ShardedManifest(m) => Some(m.signer),
            GossipMessage::ShardResult(r) => Some(r.signer),
            GossipMessage::FraudProof(_) => None,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        match self {
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
    use murmur_protocol::committee::merkle_root;
    use murmur_protocol::{Codec, NodeKey, PublicKey, Signature, StateId};

    fn manifest(key: &NodeKey, run: RunId) -> ShardedManifest {
        ShardedManifest {
            run,
            round: 1,
            base: StateId([2; 32]),
            signer: PublicKey::default(),
            tokens: 10,
            train_loss: 1.0,
            codec: Codec::F32,
            element_count: 4,
            shards: 1,
            norm: 1.0,
            root: merkle_root(&[]),
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
        let kind = TopicKind::ShardedManifest;
        assert_eq!(validate(kind, &run, &bytes), Ok(GossipMessage::ShardedManifest(m.clone())));
        assert_eq!(validate(TopicKind::ShardResult, &run, &bytes), Err(NetRejection::Malformed));
        assert_eq!(validate(kind, &RunId([8; 32]), &bytes), Err(NetRejection::WrongRun));
        let mut forged = bytes.clone();
        let n = forged.len();
        forged[n - 1] ^= 1;
        assert_eq!(validate(kind, &run, &forged), Err(NetRejection::BadSignature));
        assert_eq!(
            validate(TopicKind::FraudProof, &run, &vec![0; MAX_GOSSIP_BYTES + 1]),
            Err(NetRejection::Oversized)
        );
        assert_eq!(validate(kind, &run, &vec![0; 4000]), Err(NetRejection::Oversized));
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
