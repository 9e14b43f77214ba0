//! The protocol-v2 (committee) messages: decode(encode(x)) == x for random
//! valid messages, every decoder total and canonical on arbitrary bytes,
//! truncated / trailing / mistagged / over-cap / non-canonical input refused
//! with a WireError, and FraudProof::check and canonical() on real and
//! forged evidence.

use murmur_protocol::codec::Codec;
use murmur_protocol::committee::merkle::MAX_PROOF_LEN;
use murmur_protocol::committee::messages::{MAX_INCLUDED, SHARD_RESULT_BYTES};
use murmur_protocol::committee::plan::MAX_SHARDS;
use murmur_protocol::committee::{
    FraudProof, IncludedList, IncludedSigners, ProofRefused, ShardDelta, ShardResult, ShardedManifest,
};
use murmur_protocol::hash::{RunId, StateId};
use murmur_protocol::identity::{NodeKey, PublicKey, Signature};
use murmur_protocol::wire::{MessageType, Writer};
use murmur_protocol::WireError;
use proptest::prelude::*;

fn h32() -> impl Strategy<Value = [u8; 32]> {
    any::<[u8; 32]>()
}

fn codec() -> impl Strategy<Value = Codec> {
    prop_oneof![
        Just(Codec::F32),
        Just(Codec::F16),
        Just(Codec::Bf16),
        (1u32..=65536).prop_map(|block| Codec::Int8Block { block }),
        (1u32..=65536).prop_map(|block| Codec::Int4Block { block }),
        (1u32..=1_000_000, 1u32..=65536).prop_map(|(density_ppm, block)| Codec::TopK { density_ppm, block }),
        (1u32..=1_000_000, 1u32..=65536)
            .prop_map(|(density_ppm, block)| Codec::TopKMask { density_ppm, block }),
    ]
}

fn finite() -> impl Strategy<Value = f32> {
    proptest::num::f32::NORMAL | proptest::num::f32::SUBNORMAL | proptest::num::f32::ZERO
}

fn sharded_manifest() -> impl Strategy<Value = ShardedManifest> {
    (
        (h32(), any::<u64>(), h32(), any::<u64>(), finite(), codec()),
        (1u64..=(1 << 31), 1u32..=MAX_SHARDS, 0.0f32..1e30, h32(), h32()),
    )
        .prop_map(|((run, round, base, tokens, train_loss, codec), (n, shards, norm, root, seed))| {
            ShardedManifest {
                run: RunId(run),
                round,
                base: StateId(base),
                signer: PublicKey::default(),
                tokens,
                train_loss,
                codec,
                element_count: n,
                shards: shards.min(n as u32).max(1),
                norm,
                root,
                signature: Signature::default(),
            }
            .sign(&NodeKey::from_seed(seed))
        })
}

fn shard_delta() -> impl Strategy<Value = ShardDelta> {
    (
        (h32(), any::<u64>(), h32(), 1u32..=MAX_SHARDS, any::<u32>(), finite()),
        proptest::collection::vec(h32(), 0..=MAX_PROOF_LEN),
        proptest::collection::vec(any::<u8>(), 0..300),
    )
        .prop_map(|((run, round, signer, shards, shard, norm), proof, payload)| ShardDelta {
            run: RunId(run),
            round,
            signer: PublicKey(signer),
            shard: shard % shards,
            shards,
            norm,
            proof,
            payload,
        })
}

fn included_list() -> impl Strategy<Value = IncludedList> {
    proptest::collection::btree_map(h32(), h32(), 0..20)
        .prop_map(|m| IncludedList { entries: m.into_iter().map(|(k, r)| (PublicKey(k), r)).collect() })
}

fn shard_result() -> impl Strategy<Value = ShardResult> {
    (
        (h32(), any::<u64>(), h32(), 0..MAX_SHARDS, 1..=MAX_INCLUDED as u32),
        (h32(), any::<u64>(), h32(), h32()),
    )
        .prop_map(
            |(
                (run, round, base, shard, included_count),
                (included_root, total_tokens, result_hash, seed),
            )| {
                ShardResult {
                    run: RunId(run),
                    round,
                    base: StateId(base),
                    shard,
                    included_count,
                    included_root,
                    total_tokens,
                    result_hash,
                    signer: PublicKey::default(),
                    signature: Signature::default(),
                }
                .sign(&NodeKey::from_seed(seed))
            },
        )
}

fn fraud_proof() -> impl Strategy<Value = FraudProof> {
    prop_oneof![
        (shard_result(), included_list())
            .prop_map(|(result, included)| FraudProof::WrongResult { result, included }),
        (sharded_manifest(), sharded_manifest()).prop_map(|(a, b)| FraudProof::TwoManifests { a, b }),
        (shard_result(), shard_result()).prop_map(|(a, b)| FraudProof::TwoResults { a, b }),
    ]
}

// Fixed examples.

fn key(i: u8) -> NodeKey {
    NodeKey::from_seed([i; 32])
}

fn manifest(k: &NodeKey, round: u64, root: u8) -> ShardedManifest {
    ShardedManifest {
        run: RunId([1; 32]),
        round,
        base: StateId([2; 32]),
        signer: PublicKey::default(),
        tokens: 1000,
        train_loss: 2.5,
        codec: Codec::Int8Block { block: 64 },
        element_count: 1 << 20,
        shards: 8,
        norm: 3.0,
        root: [root; 32],
        signature: Signature::default(),
    }
    .sign(k)
}

fn result(k: &NodeKey, round: u64, shard: u32, hash: u8) -> ShardResult {
    let included = list(3);
    ShardResult {
        run: RunId([1; 32]),
        round,
        base: StateId([2; 32]),
        shard,
        included_count: included.len() as u32,
        included_root: included.root(),
        total_tokens: 3000,
        result_hash: [hash; 32],
        signer: PublicKey::default(),
        signature: Signature::default(),
    }
    .sign(k)
}

fn list(n: u8) -> IncludedList {
    IncludedList::new((0..n).map(|i| (PublicKey([i + 1; 32]), [i + 100; 32])).collect())
}

fn delta() -> ShardDelta {
    ShardDelta {
        run: RunId([1; 32]),
        round: 4,
        signer: key(1).public(),
        shard: 2,
        shards: 5,
        norm: 0.5,
        proof: vec![[7; 32], [8; 32], [9; 32]],
        payload: vec![1, 5, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
    }
}

/// (name, tag, one valid encoding, its decoder re-encoding) of each message.
type Decoder = fn(&[u8]) -> Result<Vec<u8>, WireError>;

fn samples() -> Vec<(&'static str, MessageType, Vec<u8>, Decoder)> {
    vec![
        ("ShardedManifest", MessageType::ShardedManifest, manifest(&key(1), 3, 4).encode(), |b| {
            ShardedManifest::decode(b).map(|m| m.encode())
        }),
        ("ShardDelta", MessageType::ShardDelta, delta().encode(), |b| {
            ShardDelta::decode(b).map(|m| m.encode())
        }),
        ("ShardResult", MessageType::ShardResult, result(&key(1), 3, 2, 9).encode(), |b| {
            ShardResult::decode(b).map(|m| m.encode())
        }),
        ("IncludedList", MessageType::IncludedList, list(3).encode(), |b| {
            IncludedList::decode(b).map(|m| m.encode())
        }),
        (
            "IncludedSigners",
            MessageType::IncludedSigners,
            IncludedSigners::of(&list(3), &[PublicKey([1; 32]), PublicKey([9; 32])]).encode(),
            |b| IncludedSigners::decode(b).map(|m| m.encode()),
        ),
        (
            "FraudProof",
            MessageType::FraudProof,
            FraudProof::TwoResults { a: result(&key(1), 3, 2, 9), b: result(&key(1), 3, 2, 10) }.encode(),
            |b| FraudProof::decode(b).map(|m| m.encode()),
        ),
    ]
}

proptest! {
    #[test]
    fn sharded_manifest_round_trips(m in sharded_manifest()) {
        let bytes = m.encode();
        let back = ShardedManifest::decode(&bytes).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(&back, &m);
        prop_assert_eq!(back.encode(), bytes);
        prop_assert!(back.verify().is_ok());
    }

    #[test]
    fn shard_delta_round_trips(d in shard_delta()) {
        let bytes = d.encode();
        let back = ShardDelta::decode(&bytes).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(&back, &d);
        prop_assert_eq!(back.encode(), bytes);
    }

    #[test]
    fn shard_result_round_trips(r in shard_result()) {
        let bytes = r.encode();
        prop_assert_eq!(bytes.len(), SHARD_RESULT_BYTES);
        let back = ShardResult::decode(&bytes).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(&back, &r);
        prop_assert_eq!(back.encode(), bytes);
        prop_assert!(back.verify().is_ok());
    }

    #[test]
    fn included_list_round_trips(l in included_list()) {
        let bytes = l.encode();
        let back = IncludedList::decode(&bytes).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(&back, &l);
        prop_assert_eq!(back.encode(), bytes);
        prop_assert_eq!(back.root(), l.root());
        prop_assert_eq!(IncludedList::new(l.entries.clone()), l);
    }

    #[test]
    fn included_signers_hash_to_their_lists_root(
        l in included_list(),
        extra in proptest::collection::btree_set(h32(), 0..20),
        take in proptest::collection::vec(any::<bool>(), 64),
    ) {
        // A roster of some of the list's signers and some who did not sign.
        let mut roster: Vec<PublicKey> =
            l.entries.iter().zip(&take).filter(|(_, t)| **t).map(|(e, _)| e.0).collect();
        roster.extend(extra.into_iter().map(PublicKey));
        roster.sort();
        roster.dedup();
        let s = IncludedSigners::of(&l, &roster);
        let back = IncludedSigners::decode(&s.encode()).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(&back, &s);
        let signers: Vec<PublicKey> = l.entries.iter().map(|e| e.0).collect();
        prop_assert_eq!(back.signers(&roster), Ok(signers));
        prop_assert_eq!(back.root(&roster), Ok(l.root()));
        prop_assert_eq!(s.on_roster.len(), roster.len().div_ceil(8));
    }

    #[test]
    fn fraud_proof_round_trips(p in fraud_proof()) {
        let bytes = p.encode();
        let back = FraudProof::decode(&bytes).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(&back, &p);
        prop_assert_eq!(back.encode(), bytes);
        let c = p.clone().canonical();
        prop_assert_eq!(FraudProof::decode(&c.encode()).ok(), Some(c));
    }

    #[test]
    fn committee_decoders_are_total_and_canonical(bytes in proptest::collection::vec(any::<u8>(), 0..700), tag in 9u8..=13) {
        // Make the envelope plausible half of the time so decoding goes deep.
        let mut b = bytes;
        if b.len() >= 2 && b[0] % 2 == 0 {
            b[0] = 1;
            b[1] = tag;
        }
        for (_, _, _, decode) in samples() {
            if let Ok(again) = decode(&b) {
                prop_assert_eq!(again, b.clone());
            }
        }
    }

    #[test]
    fn mutated_messages_are_refused_or_canonical(i in 0usize..5, at in any::<prop::sample::Index>(), byte in any::<u8>()) {
        let (_, _, good, decode) = samples().swap_remove(i);
        let mut b = good;
        let at = at.index(b.len());
        b[at] = byte;
        if let Ok(again) = decode(&b) {
            prop_assert_eq!(again, b);
        }
    }
}

#[test]
fn every_truncation_is_refused_as_truncated() {
    for (name, _, good, decode) in samples() {
        assert_eq!(decode(&good).as_ref(), Ok(&good), "{name} sample");
        for n in 0..good.len() {
            assert!(
                matches!(decode(&good[..n]), Err(WireError::Truncated { .. })),
                "{name} cut to {n} bytes: {:?}",
                decode(&good[..n])
            );
        }
    }
}

#[test]
fn trailing_bytes_are_refused() {
    for (name, _, good, decode) in samples() {
        for extra in [&[0u8][..], &[1, 2, 3]] {
            let mut b = good.clone();
            b.extend_from_slice(extra);
            assert_eq!(decode(&b), Err(WireError::TrailingBytes(extra.len())), "{name}");
        }
    }
    // Inside a fraud proof: a nested message with a byte too many.
    let r = result(&key(1), 3, 2, 9);
    let mut w = Writer::message(MessageType::FraudProof);
    w.u8(2);
    let mut a = r.encode();
    a.push(0);
    w.u32(a.len() as u32);
    w.bytes(&a);
    let b = r.encode();
    w.u32(b.len() as u32);
    w.bytes(&b);
    assert_eq!(FraudProof::decode(&w.finish()), Err(WireError::TrailingBytes(1)));
}

#[test]
fn wrong_tags_and_versions_are_refused() {
    for (name, ty, good, decode) in samples() {
        for tag in (0..=20u8).filter(|t| *t != ty as u8) {
            let mut b = good.clone();
            b[1] = tag;
            assert_eq!(
                decode(&b),
                Err(WireError::WrongType { expected: ty, found: tag }),
                "{name} tag {tag}"
            );
        }
        let mut b = good.clone();
        b[0] = 2;
        assert_eq!(decode(&b), Err(WireError::Version(2)), "{name}");
    }
    // A fraud proof of kind 1 (two manifests) carrying two results.
    let r = result(&key(1), 3, 2, 9);
    let mut w = Writer::message(MessageType::FraudProof);
    w.u8(1);
    for _ in 0..2 {
        w.u32(r.encode().len() as u32);
        w.bytes(&r.encode());
    }
    assert!(matches!(
        FraudProof::decode(&w.finish()),
        Err(WireError::WrongType { expected: MessageType::ShardedManifest, found: 11 })
    ));
}

#[test]
fn unknown_fraud_proof_kinds_are_refused() {
    let good = FraudProof::TwoResults { a: result(&key(1), 3, 2, 9), b: result(&key(1), 3, 2, 10) }.encode();
    for kind in 3..=255u8 {
        let mut b = good.clone();
        b[2] = kind;
        assert_eq!(FraudProof::decode(&b), Err(WireError::BadTag { field: "fraud proof kind", tag: kind }));
    }
}

#[test]
fn a_fraud_proofs_nested_lengths_are_capped() {
    let mut w = Writer::message(MessageType::FraudProof);
    w.u8(0);
    w.u32(u32::MAX);
    assert!(matches!(FraudProof::decode(&w.finish()), Err(WireError::TooLong { field: "first", .. })));
    let mut w = Writer::message(MessageType::FraudProof);
    w.u8(0);
    w.u32(0);
    w.u32((8 + MAX_INCLUDED * 64 + 1) as u32);
    assert!(matches!(FraudProof::decode(&w.finish()), Err(WireError::TooLong { field: "second", .. })));
    // Within the cap but beyond the input: truncated, nothing allocated.
    let mut w = Writer::message(MessageType::FraudProof);
    w.u8(0);
    w.u32(1 << 20);
    assert!(matches!(FraudProof::decode(&w.finish()), Err(WireError::Truncated { .. })));
}

/// A ShardDelta with a proof of `n` hashes and every byte present.
fn delta_with_proof(n: u32) -> Vec<u8> {
    let d = delta();
    let mut w = Writer::message(MessageType::ShardDelta);
    w.bytes(&d.run.0);
    w.u64(d.round);
    w.bytes(&d.signer.0);
    w.u32(d.shard);
    w.u32(d.shards);
    w.f32(d.norm);
    w.u32(n);
    for i in 0..n {
        w.bytes(&[i as u8; 32]);
    }
    w.u32(d.payload.len() as u32);
    w.bytes(&d.payload);
    w.finish()
}

#[test]
fn shard_delta_caps_and_ranges() {
    let b = delta_with_proof(MAX_PROOF_LEN as u32);
    assert_eq!(ShardDelta::decode(&b).map(|d| d.proof.len()), Ok(MAX_PROOF_LEN));
    assert_eq!(
        ShardDelta::decode(&delta_with_proof(MAX_PROOF_LEN as u32 + 1)),
        Err(WireError::TooLong { field: "proof", len: 17, cap: 16 })
    );
    let mut w = Writer::message(MessageType::ShardDelta);
    w.bytes(&[0; 32 + 8 + 32 + 4 + 4 + 4]);
    w.u32(u32::MAX);
    assert!(matches!(ShardDelta::decode(&w.finish()), Err(WireError::TooLong { field: "proof", .. })));
    // A payload length beyond the input is truncated, not allocated.
    let mut b = delta().encode();
    let at = b.len() - delta().payload.len() - 4;
    b[at..at + 4].copy_from_slice(&(1u32 << 29).to_le_bytes());
    assert!(matches!(ShardDelta::decode(&b), Err(WireError::Truncated { .. })));
    // Beyond the 1 GiB cap: too long.
    b[at..at + 4].copy_from_slice(&((1u32 << 30) + 1).to_le_bytes());
    assert!(matches!(ShardDelta::decode(&b), Err(WireError::TooLong { field: "payload", .. })));
    for (shard, shards) in
        [(5, 5), (6, 5), (0, 0), (u32::MAX, 5), (0, MAX_SHARDS + 1), (MAX_SHARDS, MAX_SHARDS)]
    {
        let d = ShardDelta { shard, shards, ..delta() };
        assert!(
            matches!(ShardDelta::decode(&d.encode()), Err(WireError::Invalid { field: "shard", .. })),
            "shard {shard} of {shards}"
        );
    }
    for (shard, shards) in [(0, 1), (4, 5), (MAX_SHARDS - 1, MAX_SHARDS)] {
        let d = ShardDelta { shard, shards, ..delta() };
        assert_eq!(ShardDelta::decode(&d.encode()), Ok(d));
    }
    let mut b = delta().encode();
    b[2 + 32 + 8 + 32 + 8..][..4].copy_from_slice(&f32::NAN.to_bits().to_le_bytes());
    assert_eq!(ShardDelta::decode(&b), Err(WireError::NonFinite { field: "norm" }));
}

#[test]
fn sharded_manifest_ranges() {
    let k = key(1);
    let with = |f: &dyn Fn(&mut ShardedManifest)| {
        let mut m = manifest(&k, 3, 4);
        f(&mut m);
        ShardedManifest::decode(&m.sign(&k).encode())
    };
    let invalid = |r: Result<ShardedManifest, WireError>, field: &str| matches!(r, Err(WireError::Invalid { field: f, .. }) if f == field);
    assert!(invalid(with(&|m| m.element_count = 0), "element_count"));
    assert!(invalid(with(&|m| m.element_count = (1 << 31) + 1), "element_count"));
    assert!(with(&|m| m.element_count = 1 << 31).is_ok());
    assert!(invalid(with(&|m| m.shards = 0), "shards"));
    assert!(invalid(with(&|m| m.shards = MAX_SHARDS + 1), "shards"));
    assert!(with(&|m| m.shards = MAX_SHARDS).is_ok());
    assert!(invalid(
        with(&|m| {
            m.element_count = 7;
            m.shards = 8;
        }),
        "shards"
    ));
    assert!(with(&|m| {
        m.element_count = 8;
        m.shards = 8;
    })
    .is_ok());
    assert!(invalid(with(&|m| m.norm = -1.0), "norm"));
    assert_eq!(with(&|m| m.norm = f32::INFINITY), Err(WireError::NonFinite { field: "norm" }));
    assert_eq!(with(&|m| m.train_loss = f32::NAN), Err(WireError::NonFinite { field: "train_loss" }));
    assert!(matches!(
        with(&|m| m.codec = Codec::Int8Block { block: 0 }),
        Err(WireError::Invalid { .. } | WireError::TooLong { .. } | WireError::BadTag { .. })
    ));
}

#[test]
fn shard_result_ranges() {
    let k = key(1);
    let with = |f: &dyn Fn(&mut ShardResult)| {
        let mut r = result(&k, 3, 2, 9);
        f(&mut r);
        ShardResult::decode(&r.sign(&k).encode())
    };
    let invalid = |r: Result<ShardResult, WireError>| matches!(r, Err(WireError::Invalid { .. }));
    assert!(invalid(with(&|r| r.included_count = 0)));
    assert!(invalid(with(&|r| r.included_count = MAX_INCLUDED as u32 + 1)));
    assert!(with(&|r| r.included_count = MAX_INCLUDED as u32).is_ok());
    assert!(invalid(with(&|r| r.shard = MAX_SHARDS)));
    assert!(with(&|r| r.shard = MAX_SHARDS - 1).is_ok());
}

/// An IncludedList of `n` entries as written, every byte present.
fn raw_list(keys: &[[u8; 32]]) -> Vec<u8> {
    let mut w = Writer::message(MessageType::IncludedList);
    w.u32(keys.len() as u32);
    for k in keys {
        w.bytes(k);
        w.bytes(&[0xab; 32]);
    }
    w.finish()
}

fn key_of(i: u32) -> [u8; 32] {
    let mut k = [0; 32];
    k[..4].copy_from_slice(&i.to_be_bytes());
    k
}

#[test]
fn included_list_caps_and_order() {
    let most: Vec<[u8; 32]> = (0..MAX_INCLUDED as u32).map(key_of).collect();
    assert_eq!(IncludedList::decode(&raw_list(&most)).map(|l| l.len()), Ok(MAX_INCLUDED));
    let over: Vec<[u8; 32]> = (0..MAX_INCLUDED as u32 + 1).map(key_of).collect();
    assert_eq!(
        IncludedList::decode(&raw_list(&over)),
        Err(WireError::TooLong { field: "entries", len: 65_537, cap: 65_536 })
    );
    let mut w = Writer::message(MessageType::IncludedList);
    w.u32(u32::MAX);
    assert!(matches!(IncludedList::decode(&w.finish()), Err(WireError::TooLong { .. })));
    let mut w = Writer::message(MessageType::IncludedList);
    w.u32(1000);
    assert!(matches!(IncludedList::decode(&w.finish()), Err(WireError::Truncated { .. })));
    let sorted = WireError::Invalid { field: "entries", why: "signers must strictly increase" };
    assert_eq!(IncludedList::decode(&raw_list(&[key_of(2), key_of(1)])), Err(sorted.clone()));
    assert_eq!(IncludedList::decode(&raw_list(&[key_of(1), key_of(1)])), Err(sorted.clone()));
    assert_eq!(IncludedList::decode(&raw_list(&[key_of(1), key_of(3), key_of(2)])), Err(sorted));
    assert_eq!(IncludedList::decode(&raw_list(&[])), Ok(IncludedList::default()));
    // new() sorts and keeps the last pair of a repeated signer.
    let l = IncludedList::new(vec![
        (PublicKey([3; 32]), [1; 32]),
        (PublicKey([1; 32]), [2; 32]),
        (PublicKey([3; 32]), [4; 32]),
    ]);
    assert_eq!(l.entries, vec![(PublicKey([1; 32]), [2; 32]), (PublicKey([3; 32]), [4; 32])]);
}

#[test]
fn equivocations_are_proven() {
    let k = key(1);
    let p = FraudProof::TwoManifests { a: manifest(&k, 3, 4), b: manifest(&k, 3, 5) };
    assert_eq!(p.check(), Ok(()));
    assert_eq!((p.accused(), p.round()), (k.public(), 3));
    let p = FraudProof::TwoResults { a: result(&k, 3, 2, 9), b: result(&k, 3, 2, 10) };
    assert_eq!(p.check(), Ok(()));
    assert_eq!((p.accused(), p.round()), (k.public(), 3));
    // Results differing only in base or total tokens conflict too.
    let mut b = result(&k, 3, 2, 9);
    b.base = StateId([3; 32]);
    let p = FraudProof::TwoResults { a: result(&k, 3, 2, 9), b: b.sign(&k) };
    assert_eq!(p.check(), Ok(()));
    let mut b = result(&k, 3, 2, 9);
    b.total_tokens += 1;
    let p = FraudProof::TwoResults { a: result(&k, 3, 2, 9), b: b.sign(&k) };
    assert_eq!(p.check(), Ok(()));
    // Proofs survive the wire.
    assert_eq!(FraudProof::decode(&p.encode()).map(|p| p.check()), Ok(Ok(())));
}

#[test]
fn forged_or_mismatched_evidence_is_refused() {
    let (k, other) = (key(1), key(2));
    // A forged signature: b altered after signing, or signed by another key
    // but naming k.
    let mut b = manifest(&k, 3, 4);
    b.root = [5; 32];
    assert_eq!(
        FraudProof::TwoManifests { a: manifest(&k, 3, 4), b }.check(),
        Err(ProofRefused::BadSignature)
    );
    let mut b = manifest(&other, 3, 5);
    b.signer = k.public();
    assert_eq!(
        FraudProof::TwoManifests { a: manifest(&k, 3, 4), b }.check(),
        Err(ProofRefused::BadSignature)
    );
    let mut b = result(&k, 3, 2, 10);
    b.signature.0[0] ^= 1;
    assert_eq!(
        FraudProof::TwoResults { a: result(&k, 3, 2, 9), b: b.clone() }.check(),
        Err(ProofRefused::BadSignature)
    );
    assert_eq!(
        FraudProof::WrongResult { result: b, included: list(3) }.check(),
        Err(ProofRefused::BadSignature)
    );
    // Two messages from different keys.
    assert_eq!(
        FraudProof::TwoManifests { a: manifest(&k, 3, 4), b: manifest(&other, 3, 5) }.check(),
        Err(ProofRefused::NotComparable)
    );
    assert_eq!(
        FraudProof::TwoResults { a: result(&k, 3, 2, 9), b: result(&other, 3, 2, 10) }.check(),
        Err(ProofRefused::NotComparable)
    );
    // Different rounds, shards or runs are not equivocation.
    assert_eq!(
        FraudProof::TwoManifests { a: manifest(&k, 3, 4), b: manifest(&k, 4, 5) }.check(),
        Err(ProofRefused::NotComparable)
    );
    assert_eq!(
        FraudProof::TwoResults { a: result(&k, 3, 2, 9), b: result(&k, 3, 1, 10) }.check(),
        Err(ProofRefused::NotComparable)
    );
    let mut b = result(&k, 3, 2, 10);
    b.run = RunId([9; 32]);
    assert_eq!(
        FraudProof::TwoResults { a: result(&k, 3, 2, 9), b: b.sign(&k) }.check(),
        Err(ProofRefused::NotComparable)
    );
    // The same message twice.
    assert_eq!(
        FraudProof::TwoManifests { a: manifest(&k, 3, 4), b: manifest(&k, 3, 4) }.check(),
        Err(ProofRefused::NoConflict)
    );
    assert_eq!(
        FraudProof::TwoResults { a: result(&k, 3, 2, 9), b: result(&k, 3, 2, 9) }.check(),
        Err(ProofRefused::NoConflict)
    );
    // A wrong-result proof holds on its face only with the result's own list.
    let r = result(&k, 3, 2, 9);
    assert_eq!(FraudProof::WrongResult { result: r.clone(), included: list(3) }.check(), Ok(()));
    assert_eq!(
        FraudProof::WrongResult { result: r.clone(), included: list(2) }.check(),
        Err(ProofRefused::ListMismatch)
    );
    let mut l = list(3);
    l.entries[0].1 = [0; 32];
    assert_eq!(FraudProof::WrongResult { result: r, included: l }.check(), Err(ProofRefused::ListMismatch));
}

#[test]
fn canonical_puts_the_smaller_encoding_first() {
    let k = key(1);
    let pairs = [
        (
            FraudProof::TwoManifests { a: manifest(&k, 3, 4), b: manifest(&k, 3, 5) },
            FraudProof::TwoManifests { a: manifest(&k, 3, 5), b: manifest(&k, 3, 4) },
        ),
        (
            FraudProof::TwoResults { a: result(&k, 3, 2, 9), b: result(&k, 3, 2, 10) },
            FraudProof::TwoResults { a: result(&k, 3, 2, 10), b: result(&k, 3, 2, 9) },
        ),
    ];
    for (x, y) in pairs {
        let (cx, cy) = (x.clone().canonical(), y.clone().canonical());
        assert_eq!(cx, cy);
        assert_eq!(cx.clone().canonical(), cx, "idempotent");
        let (a, b) = match &cx {
            FraudProof::TwoManifests { a, b } => (a.encode(), b.encode()),
            FraudProof::TwoResults { a, b } => (a.encode(), b.encode()),
            FraudProof::WrongResult { .. } => unreachable!(),
        };
        assert!(a < b);
        assert_eq!(cx.check(), Ok(()));
        assert_eq!(cx.accused(), x.accused());
    }
    let w = FraudProof::WrongResult { result: result(&k, 3, 2, 9), included: list(3) };
    assert_eq!(w.clone().canonical(), w);
}

/// The signers of a thousand-member roster travel in a bit each, and bits
/// that do not fit the roster, or a "newcomer" on it, are refused.
#[test]
fn included_signers_are_a_bit_a_member_and_must_fit_their_roster() {
    let mut roster: Vec<PublicKey> = (0..1000u32).map(|i| PublicKey(key_of(i + 1))).collect();
    roster.sort();
    let all = IncludedList::new(roster.iter().map(|k| (*k, [3; 32])).collect());
    let s = IncludedSigners::of(&all, &roster);
    assert_eq!(s.encode().len(), 2 + 4 + 125 + 4 + 32, "125 bytes of bits for 1,000 members");
    assert!(all.encode().len() > 64_000);
    assert_eq!(s.root(&roster), Ok(all.root()));
    // Another roster gives other signers, so another root.
    assert_ne!(s.root(&roster[..999]).ok(), Some(all.root()));
    let short = &roster[..996];
    assert!(s.signers(short).is_err(), "bit 999 set past a 996-member roster");
    let mut newcomer_on_roster = IncludedSigners::of(&IncludedList::new(vec![(roster[0], [0; 32])]), &[]);
    assert_eq!(newcomer_on_roster.newcomers, vec![roster[0]]);
    assert!(newcomer_on_roster.signers(&roster).is_err(), "bits for 1,000 members missing");
    newcomer_on_roster.on_roster = vec![0; 125];
    assert!(newcomer_on_roster.signers(&roster).is_err(), "a newcomer that is on the roster");
    let mut w = Writer::message(MessageType::IncludedSigners);
    w.u32(0);
    w.u32(2);
    w.bytes(&[2; 32]);
    w.bytes(&[1; 32]);
    w.bytes(&[0; 32]);
    assert!(matches!(IncludedSigners::decode(&w.finish()), Err(WireError::Invalid { .. })));
    let mut w = Writer::message(MessageType::IncludedSigners);
    w.u32(MAX_INCLUDED as u32 / 8 + 1);
    assert!(matches!(IncludedSigners::decode(&w.finish()), Err(WireError::TooLong { .. })));
}

#[test]
fn included_signers_rebuild_the_list_from_the_roots_a_node_holds() {
    let k = |i: u8| PublicKey([i; 32]);
    let list = IncludedList::new(vec![(k(1), [11; 32]), (k(4), [44; 32]), (k(9), [99; 32])]);
    let roster = [k(1), k(2), k(4)];
    let signers = IncludedSigners::of(&list, &roster);
    let roots = |key: &PublicKey| Some([key.0[0] * 11; 32]);
    assert_eq!(signers.list(&roster, roots), Some(list.clone()), "every root held: the list itself");
    // A root the node holds differs from the listed one (the signer sent
    // another manifest elsewhere), or it holds none: ask for the list.
    let other = |key: &PublicKey| Some(if key.0[0] == 4 { [45; 32] } else { [key.0[0] * 11; 32] });
    assert_eq!(signers.list(&roster, other), None);
    let missing = |key: &PublicKey| (key.0[0] != 9).then(|| [key.0[0] * 11; 32]);
    assert_eq!(signers.list(&roster, missing), None);
    // Bits read against another roster do not rebuild it.
    assert_eq!(signers.list(&[k(1), k(2)], roots), None);
}
