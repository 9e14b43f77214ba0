//! The round's messages (docs/protocol.md §10): the sharded manifest a
//! trainer signs, the shard of a delta sent to a committee member, the shard
//! result a member signs, the included list a result commits to, and the
//! fraud proof anyone can check. Every decoder bounds what it allocates.

use super::merkle::{ShardLeaf, MAX_PROOF_LEN};
use super::plan::MAX_SHARDS;
use crate::codec::Codec;
use crate::hash::{domain_hash, payload_hash_of, RunId, StateId};
use crate::identity::{self, NodeKey, PublicKey, Signature, SignatureError};
use crate::identity::{SIGN_SHARDED_MANIFEST, SIGN_SHARD_RESULT};
use crate::wire::{MessageType, Reader, WireError, Writer, MAX_ELEMENTS};

/// Domain of an IncludedList's hash (a ShardResult's `included_root`):
/// of the hashes of its signers and of its roots.
pub const DOMAIN_INCLUDED: &str = "murmur 2026-11 v2 included-list";
/// Domain of the hash of an IncludedList's signers.
pub const DOMAIN_INCLUDED_SIGNERS: &str = "murmur 2026-11 v2 included-signers";
/// Domain of the hash of an IncludedList's manifest roots.
pub const DOMAIN_INCLUDED_ROOTS: &str = "murmur 2026-11 v2 included-roots";
/// Domain of an aggregated shard's hash (of its encoded payload).
pub const DOMAIN_AGGREGATE: &str = "murmur 2026-11 v2 aggregate";
/// Most entries in an IncludedList (and trainers a shard aggregates).
pub const MAX_INCLUDED: usize = 65_536;
/// Largest shard payload a ShardDelta may carry (1 GiB).
pub const MAX_SHARD_PAYLOAD: usize = 1 << 30;

fn nested(w: &mut Writer, bytes: &[u8]) {
    w.u32(bytes.len() as u32);
    w.bytes(bytes);
}

fn read_nested<'a>(r: &mut Reader<'a>, field: &'static str, cap: usize) -> Result<&'a [u8], WireError> {
    let n = r.count(field, cap, 1)?;
    r.take(n)
}

/// "In `round` of `run` I trained `tokens` tokens from `base`; my delta, cut
/// into `shards` shards, has L2 norm `norm`, and its shards are the leaves
/// under `root`."
#[derive(Debug, Clone, PartialEq)]
pub struct ShardedManifest {
    pub run: RunId,
    pub round: u64,
    pub base: StateId,
    pub signer: PublicKey,
    pub tokens: u64,
    pub train_loss: f32,
    pub codec: Codec,
    pub element_count: u64,
    pub shards: u32,
    /// L2 norm of the whole decoded delta (f64 sums, as f32).
    pub norm: f32,
    pub root: [u8; 32],
    pub signature: Signature,
}

impl ShardedManifest {
    pub fn signed_bytes(&self) -> Vec<u8> {
        let mut w = Writer::message(MessageType::ShardedManifest);
        w.bytes(&self.run.0);
        w.u64(self.round);
        w.bytes(&self.base.0);
        w.bytes(&self.signer.0);
        w.u64(self.tokens);
        w.f32(self.train_loss);
        self.codec.write(&mut w);
        w.u64(self.element_count);
        w.u32(self.shards);
        w.f32(self.norm);
        w.bytes(&self.root);
        w.finish()
    }
    pub fn encode(&self) -> Vec<u8> {
        let mut b = self.signed_bytes();
        b.extend_from_slice(&self.signature.0);
        b
    }
    pub fn decode(bytes: &[u8]) -> Result<Self, WireError> {
        let mut r = Reader::message(bytes, MessageType::ShardedManifest)?;
        let m = Self {
            run: RunId(r.array()?),
            round: r.u64()?,
            base: StateId(r.array()?),
            signer: PublicKey(r.array()?),
            tokens: r.u64()?,
            train_loss: r.f32("train_loss")?,
            codec: Codec::read(&mut r)?,
            element_count: r.u64()?,
            shards: r.u32()?,
            norm: r.f32("norm")?,
            root: r.array()?,
            signature: Signature(r.array()?),
        };
        r.finish()?;
        if m.element_count == 0 || m.element_count > MAX_ELEMENTS {
            return Err(WireError::Invalid { field: "element_count", why: "must be in 1..=2^31" });
        }
        if m.shards == 0 || m.shards > MAX_SHARDS || u64::from(m.shards) > m.element_count {
            return Err(WireError::Invalid {
                field: "shards",
                why: "must be in 1..=65536 and at most element_count",
            });
        }
        if m.norm < 0.0 {
            return Err(WireError::Invalid { field: "norm", why: "must not be negative" });
        }
        Ok(m)
    }
    pub fn sign(mut self, key: &NodeKey) -> Self {
        self.signer = key.public();
        self.signature = key.sign(SIGN_SHARDED_MANIFEST, &self.signed_bytes());
        self
    }
    pub fn verify(&self) -> Result<(), SignatureError> {
        identity::verify(&self.signer, SIGN_SHARDED_MANIFEST, &self.signed_bytes(), &self.signature)
    }
}

/// One shard of a trainer's delta, sent to a member of that shard's
/// committee. Not signed: the Merkle proof ties it to the signed manifest.
#[derive(Debug, Clone, PartialEq)]
pub struct ShardDelta {
    pub run: RunId,
    pub round: u64,
    pub signer: PublicKey,
    pub shard: u32,
    /// The manifest's shard count (the tree's leaf count).
    pub shards: u32,
    pub norm: f32,
    pub proof: Vec<[u8; 32]>,
    /// The shard's values encoded with the run's codec.
    pub payload: Vec<u8>,
}

impl ShardDelta {
    pub fn leaf(&self) -> ShardLeaf {
        ShardLeaf {
            shard: self.shard,
            payload_hash: payload_hash_of(&self.payload),
            payload_len: self.payload.len() as u64,
            norm: self.norm,
        }
    }
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::message(MessageType::ShardDelta);
        w.bytes(&self.run.0);
        w.u64(self.round);
        w.bytes(&self.signer.0);
        w.u32(self.shard);
        w.u32(self.shards);
        w.f32(self.norm);
        w.u32(self.proof.len() as u32);
        for h in &self.proof {
            w.bytes(h);
        }
        nested(&mut w, &self.payload);
        w.finish()
    }
    pub fn decode(bytes: &[u8]) -> Result<Self, WireError> {
        let mut r = Reader::message(bytes, MessageType::ShardDelta)?;
        let (run, round, signer) = (RunId(r.array()?), r.u64()?, PublicKey(r.array()?));
        let (shard, shards, norm) = (r.u32()?, r.u32()?, r.f32("norm")?);
        let n = r.count("proof", MAX_PROOF_LEN, 32)?;
        let mut proof = Vec::with_capacity(n);
        for _ in 0..n {
            proof.push(r.array()?);
        }
        let payload = read_nested(&mut r, "payload", MAX_SHARD_PAYLOAD)?.to_vec();
        r.finish()?;
        if shards == 0 || shards > MAX_SHARDS || shard >= shards {
            return Err(WireError::Invalid {
                field: "shard",
                why: "must be below shards, itself in 1..=65536",
            });
        }
        Ok(Self { run, round, signer, shard, shards, norm, proof, payload })
    }
}

/// The hash a ShardResult names for an aggregated shard: of its payload,
/// the values encoded with the run's aggregate codec
/// (`super::aggregate::aggregate_codec`).
pub fn aggregate_hash(payload: &[u8]) -> [u8; 32] {
    domain_hash(DOMAIN_AGGREGATE, payload)
}

/// "In `round` of `run`, from `base`, I aggregated shard `shard` from the
/// `included_count` deltas listed under `included_root` and got the values
/// hashing to `result_hash`."
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardResult {
    pub run: RunId,
    pub round: u64,
    pub base: StateId,
    pub shard: u32,
    pub included_count: u32,
    pub included_root: [u8; 32],
    pub total_tokens: u64,
    pub result_hash: [u8; 32],
    pub signer: PublicKey,
    pub signature: Signature,
}

/// Encoded size of a ShardResult.
pub const SHARD_RESULT_BYTES: usize = 2 + 32 + 8 + 32 + 4 + 4 + 32 + 8 + 32 + 32 + 64;

impl ShardResult {
    pub fn signed_bytes(&self) -> Vec<u8> {
        let mut w = Writer::message(MessageType::ShardResult);
        w.bytes(&self.run.0);
        w.u64(self.round);
        w.bytes(&self.base.0);
        w.u32(self.shard);
        w.u32(self.included_count);
        w.bytes(&self.included_root);
        w.u64(self.total_tokens);
        w.bytes(&self.result_hash);
        w.bytes(&self.signer.0);
        w.finish()
    }
    pub fn encode(&self) -> Vec<u8> {
        let mut b = self.signed_bytes();
        b.extend_from_slice(&self.signature.0);
        b
    }
    pub fn decode(bytes: &[u8]) -> Result<Self, WireError> {
        let mut r = Reader::message(bytes, MessageType::ShardResult)?;
        let m = Self {
            run: RunId(r.array()?),
            round: r.u64()?,
            base: StateId(r.array()?),
            shard: r.u32()?,
            included_count: r.u32()?,
            included_root: r.array()?,
            total_tokens: r.u64()?,
            result_hash: r.array()?,
            signer: PublicKey(r.array()?),
            signature: Signature(r.array()?),
        };
        r.finish()?;
        if m.shard >= MAX_SHARDS || m.included_count == 0 || m.included_count as usize > MAX_INCLUDED {
            return Err(WireError::Invalid {
                field: "included_count",
                why: "must be in 1..=65536 (shard < 65536)",
            });
        }
        Ok(m)
    }
    pub fn sign(mut self, key: &NodeKey) -> Self {
        self.signer = key.public();
        self.signature = key.sign(SIGN_SHARD_RESULT, &self.signed_bytes());
        self
    }
    pub fn verify(&self) -> Result<(), SignatureError> {
        identity::verify(&self.signer, SIGN_SHARD_RESULT, &self.signed_bytes(), &self.signature)
    }
    /// What two results must share to be the same claim.
    pub fn claim(&self) -> ([u8; 32], [u8; 32], u32) {
        (self.result_hash, self.included_root, self.included_count)
    }
}

/// The deltas a shard result aggregated: (signer, manifest root) pairs,
/// strictly increasing by signer. Served on request by the result's signer.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IncludedList {
    pub entries: Vec<(PublicKey, [u8; 32])>,
}

impl IncludedList {
    /// From pairs in any order (the last pair of a repeated signer is kept).
    pub fn new(mut entries: Vec<(PublicKey, [u8; 32])>) -> Self {
        entries.sort_by_key(|a| a.0);
        entries.dedup_by(|later, earlier| {
            let same = later.0 == earlier.0;
            if same {
                *earlier = *later;
            }
            same
        });
        Self { entries }
    }
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::message(MessageType::IncludedList);
        w.u32(self.entries.len() as u32);
        for (k, root) in &self.entries {
            w.bytes(&k.0);
            w.bytes(root);
        }
        w.finish()
    }
    pub fn decode(bytes: &[u8]) -> Result<Self, WireError> {
        let mut r = Reader::message(bytes, MessageType::IncludedList)?;
        let n = r.count("entries", MAX_INCLUDED, 64)?;
        let mut entries = Vec::with_capacity(n);
        for _ in 0..n {
            entries.push((PublicKey(r.array()?), r.array()?));
        }
        r.finish()?;
        if entries.windows(2).any(|p| p[0].0 >= p[1].0) {
            return Err(WireError::Invalid { field: "entries", why: "signers must strictly increase" });
        }
        Ok(Self { entries })
    }
    /// The `included_root` a ShardResult names for this list: the hash of
    /// its signers' hash and its roots' hash, so the signers alone
    /// ([`IncludedSigners`]) can be checked against it.
    pub fn root(&self) -> [u8; 32] {
        let signers: Vec<PublicKey> = self.entries.iter().map(|e| e.0).collect();
        included_root(&signers_hash(&signers), &self.roots_hash())
    }
    /// The hash of the manifest roots, in signer order.
    pub fn roots_hash(&self) -> [u8; 32] {
        let mut w = Writer::default();
        w.u32(self.entries.len() as u32);
        for (_, root) in &self.entries {
            w.bytes(root);
        }
        domain_hash(DOMAIN_INCLUDED_ROOTS, &w.finish())
    }
    pub fn len(&self) -> usize {
        self.entries.len()
    }
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

fn signers_hash(signers: &[PublicKey]) -> [u8; 32] {
    let mut w = Writer::default();
    w.u32(signers.len() as u32);
    for k in signers {
        w.bytes(&k.0);
    }
    domain_hash(DOMAIN_INCLUDED_SIGNERS, &w.finish())
}

fn included_root(signers_hash: &[u8; 32], roots_hash: &[u8; 32]) -> [u8; 32] {
    let mut b = [0u8; 64];
    b[..32].copy_from_slice(signers_hash);
    b[32..].copy_from_slice(roots_hash);
    domain_hash(DOMAIN_INCLUDED, &b)
}

/// The signers of an IncludedList, compact: a bit per member of the
/// round's roster (ascending keys, bit i of byte i / 8 for member i) and
/// the keys not on it, with the hash of the list's roots, so it is checked
/// against a result's `included_root` without the roots. What every node
/// fetches with shard 0's aggregate (the next roster): ⌈R/8⌉ bytes instead
/// of 64 a trainer.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IncludedSigners {
    pub on_roster: Vec<u8>,
    /// Signers not on the roster, strictly increasing.
    pub newcomers: Vec<PublicKey>,
    pub roots_hash: [u8; 32],
}

impl IncludedSigners {
    /// `list`'s signers against `roster` (ascending).
    pub fn of(list: &IncludedList, roster: &[PublicKey]) -> Self {
        let mut on_roster = vec![0u8; roster.len().div_ceil(8)];
        let mut newcomers = Vec::new();
        for (k, _) in &list.entries {
            match roster.binary_search(k) {
                Ok(i) => on_roster[i / 8] |= 1 << (i % 8),
                Err(_) => newcomers.push(*k),
            }
        }
        Self { on_roster, newcomers, roots_hash: list.roots_hash() }
    }
    /// The signers, ascending, given the roster the bits refer to; an error
    /// when the bits do not fit that roster or a newcomer is on it.
    pub fn signers(&self, roster: &[PublicKey]) -> Result<Vec<PublicKey>, WireError> {
        if self.on_roster.len() != roster.len().div_ceil(8)
            || !roster.len().is_multiple_of(8)
                && self.on_roster.last().is_some_and(|b| b >> (roster.len() % 8) != 0)
        {
            return Err(WireError::Invalid {
                field: "on_roster",
                why: "must have one bit per roster member",
            });
        }
        if self.newcomers.iter().any(|k| roster.binary_search(k).is_ok()) {
            return Err(WireError::Invalid { field: "newcomers", why: "must not be on the roster" });
        }
        let mut out: Vec<PublicKey> = roster
            .iter()
            .enumerate()
            .filter(|(i, _)| (self.on_roster[i / 8] >> (i % 8)) & 1 == 1)
            .map(|(_, k)| *k)
            .chain(self.newcomers.iter().copied())
            .collect();
        out.sort();
        Ok(out)
    }
    /// The signers (as [`signers`](Self::signers)) and the `included_root`
    /// they and the roots hash to, given the roster: one expansion for both.
    pub fn signers_and_root(&self, roster: &[PublicKey]) -> Result<(Vec<PublicKey>, [u8; 32]), WireError> {
        let signers = self.signers(roster)?;
        let root = included_root(&signers_hash(&signers), &self.roots_hash);
        Ok((signers, root))
    }
    /// The IncludedList itself, given the roster and the manifest root each
    /// signer signed as the caller holds it: None when a signer's root is
    /// unknown or the roots are not the list's (the caller then asks for
    /// the list).
    pub fn list(
        &self,
        roster: &[PublicKey],
        root_of: impl Fn(&PublicKey) -> Option<[u8; 32]>,
    ) -> Option<IncludedList> {
        let signers = self.signers(roster).ok()?;
        let entries = signers.iter().map(|k| Some((*k, root_of(k)?))).collect::<Option<Vec<_>>>()?;
        let list = IncludedList::new(entries);
        (list.roots_hash() == self.roots_hash).then_some(list)
    }
    /// The `included_root` these signers and roots hash to, given the roster.
    pub fn root(&self, roster: &[PublicKey]) -> Result<[u8; 32], WireError> {
        self.signers_and_root(roster).map(|(_, root)| root)
    }
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::message(MessageType::IncludedSigners);
        nested(&mut w, &self.on_roster);
        w.u32(self.newcomers.len() as u32);
        for k in &self.newcomers {
            w.bytes(&k.0);
        }
        w.bytes(&self.roots_hash);
        w.finish()
    }
    pub fn decode(bytes: &[u8]) -> Result<Self, WireError> {
        let mut r = Reader::message(bytes, MessageType::IncludedSigners)?;
        let on_roster = read_nested(&mut r, "on_roster", MAX_INCLUDED / 8)?.to_vec();
        let n = r.count("newcomers", MAX_INCLUDED, 32)?;
        let mut newcomers = Vec::with_capacity(n);
        for _ in 0..n {
            newcomers.push(PublicKey(r.array()?));
        }
        let roots_hash = r.array()?;
        r.finish()?;
        if newcomers.windows(2).any(|p| p[0] >= p[1]) {
            return Err(WireError::Invalid { field: "newcomers", why: "must strictly increase" });
        }
        Ok(Self { on_roster, newcomers, roots_hash })
    }
}

/// Evidence against one key (docs/protocol.md §10.4). Unsigned: the evidence
/// carries its own signatures. The two equivocation kinds are checked by
/// [`FraudProof::check`] alone; a wrong result needs the shard recomputed
/// from the listed inputs.
#[derive(Debug, Clone, PartialEq)]
pub enum FraudProof {
    /// The result does not match a recomputation from the included deltas.
    WrongResult { result: ShardResult, included: IncludedList },
    /// Two different manifests signed by one key for one round.
    TwoManifests { a: ShardedManifest, b: ShardedManifest },
    /// Two different results signed by one key for one (round, shard).
    TwoResults { a: ShardResult, b: ShardResult },
}

/// Why a fraud proof does not hold on its face.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ProofRefused {
    #[error("a signature in the evidence does not verify")]
    BadSignature,
    #[error("the two signed messages are not from one key for one round (and shard)")]
    NotComparable,
    #[error("the two signed messages are the same claim")]
    NoConflict,
    #[error("the included list does not hash to the result's included_root or count")]
    ListMismatch,
}

impl FraudProof {
    pub fn accused(&self) -> PublicKey {
        match self {
            Self::WrongResult { result, .. } => result.signer,
            Self::TwoManifests { a, .. } => a.signer,
            Self::TwoResults { a, .. } => a.signer,
        }
    }
    /// The run of the evidence (of its first message).
    pub fn run(&self) -> crate::hash::RunId {
        match self {
            Self::WrongResult { result, .. } => result.run,
            Self::TwoManifests { a, .. } => a.run,
            Self::TwoResults { a, .. } => a.run,
        }
    }
    /// The round of the accused's offence.
    pub fn round(&self) -> u64 {
        match self {
            Self::WrongResult { result, .. } => result.round,
            Self::TwoManifests { a, .. } => a.round,
            Self::TwoResults { a, .. } => a.round,
        }
    }
    /// The same evidence with its two messages in a fixed order (the
    /// smaller encoding first), so every node that finds it gossips the
    /// same bytes and gossip's duplicate filter drops the copies.
    pub fn canonical(self) -> Self {
        match self {
            Self::TwoManifests { a, b } if b.encode() < a.encode() => Self::TwoManifests { a: b, b: a },
            Self::TwoResults { a, b } if b.encode() < a.encode() => Self::TwoResults { a: b, b: a },
            p => p,
        }
    }
    /// Check signatures and consistency. Ok for an equivocation means proven;
    /// for `WrongResult` it means the shard must now be recomputed.
    pub fn check(&self) -> Result<(), ProofRefused> {
        match self {
            Self::WrongResult { result, included } => {
                result.verify().map_err(|_| ProofRefused::BadSignature)?;
                if included.root() != result.included_root || included.len() != result.included_count as usize
                {
                    return Err(ProofRefused::ListMismatch);
                }
                Ok(())
            }
            Self::TwoManifests { a, b } => {
                a.verify().and(b.verify()).map_err(|_| ProofRefused::BadSignature)?;
                if a.signer != b.signer || a.run != b.run || a.round != b.round {
                    return Err(ProofRefused::NotComparable);
                }
                if a.signed_bytes() == b.signed_bytes() {
                    return Err(ProofRefused::NoConflict);
                }
                Ok(())
            }
            Self::TwoResults { a, b } => {
                a.verify().and(b.verify()).map_err(|_| ProofRefused::BadSignature)?;
                if a.signer != b.signer || a.run != b.run || a.round != b.round || a.shard != b.shard {
                    return Err(ProofRefused::NotComparable);
                }
                if a.claim() == b.claim() && a.base == b.base && a.total_tokens == b.total_tokens {
                    return Err(ProofRefused::NoConflict);
                }
                Ok(())
            }
        }
    }
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::message(MessageType::FraudProof);
        let (tag, x, y) = match self {
            Self::WrongResult { result, included } => (0, result.encode(), included.encode()),
            Self::TwoManifests { a, b } => (1, a.encode(), b.encode()),
            Self::TwoResults { a, b } => (2, a.encode(), b.encode()),
        };
        w.u8(tag);
        nested(&mut w, &x);
        nested(&mut w, &y);
        w.finish()
    }
    pub fn decode(bytes: &[u8]) -> Result<Self, WireError> {
        let mut r = Reader::message(bytes, MessageType::FraudProof)?;
        let tag = r.u8()?;
        let cap = 8 + MAX_INCLUDED * 64;
        let (x, y) = (read_nested(&mut r, "first", cap)?, read_nested(&mut r, "second", cap)?);
        r.finish()?;
        Ok(match tag {
            0 => Self::WrongResult { result: ShardResult::decode(x)?, included: IncludedList::decode(y)? },
            1 => Self::TwoManifests { a: ShardedManifest::decode(x)?, b: ShardedManifest::decode(y)? },
            2 => Self::TwoResults { a: ShardResult::decode(x)?, b: ShardResult::decode(y)? },
            tag => return Err(WireError::BadTag { field: "fraud proof kind", tag }),
        })
    }
}
