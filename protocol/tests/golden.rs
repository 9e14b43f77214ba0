//! Golden test vectors: the exact bytes of every message type (signed ones
//! carrying an ed25519 signature by a fixed key) and the identifiers derived
//! from them, compared with the hex fixtures in tests/fixtures/.
//!
//! Regenerate (only when the wire format deliberately changes):
//! `MURMUR_BLESS=1 cargo test -p murmur-protocol --test golden`

use murmur_protocol::codec::{decode_delta, encode_delta, Codec};
use murmur_protocol::committee::messages::aggregate_hash;
use murmur_protocol::committee::{
    aggregate_codec, merkle_root, shard_norm, verify_proof, FraudProof, IncludedList, IncludedSigners,
    Ledger, MerkleTree, ShardDelta, ShardLeaf, ShardResult, ShardedManifest,
};
use murmur_protocol::dataset::{DatasetManifest, DatasetTokenizer, ShardEntry};
use murmur_protocol::hash::{dataset_id_of, shard_hash_of, tokenizer_hash_of};
use murmur_protocol::hash::{hex, payload_hash_of, unhex, RunId, StateId};
use murmur_protocol::identity::{verify, NodeKey, PublicKey, Signature, SIGN_SHARDED_MANIFEST};
use murmur_protocol::spec::{
    AdmissionPolicy, InnerOptimizer, ModelShape, OuterOptimizer, Pacing, RobustMode, RunSpec,
};
use murmur_protocol::{params_id, PeerLink, RejectionCount, Telemetry, Ticket, TrainingState};
use std::collections::BTreeMap;
use std::path::PathBuf;

fn key() -> NodeKey {
    NodeKey::from_seed(*b"murmur golden vector signing key")
}

fn spec() -> RunSpec {
    RunSpec {
        model: ModelShape {
            preset: "tiny".into(),
            vocab_size: 256,
            context_len: 64,
            n_layer: 2,
            n_head: 2,
            d_model: 64,
            param_count: 116_480,
        },
        data: "synthetic:seed=1".into(),
        inner: InnerOptimizer {
            lr: 1e-3,
            beta1: 0.9,
            beta2: 0.95,
            eps: 1e-8,
            weight_decay: 0.1,
            grad_clip: 1.0,
            warmup_steps: 10,
            batch_size: 8,
        },
        inner_steps: 100,
        outer: OuterOptimizer::DILOCO,
        codec: Codec::Int8Block { block: 256 },
        robust: RobustMode::NormClip { multiple: 2.0 },
        quorum: 2,
        round_deadline_secs: 60,
        admission: AdmissionPolicy::Open,
        seed: 42,
        committee_size: 1,
        pacing: Pacing::default(),
        genesis_params: None,
    }
}

/// The golden spec with overlapped, time-budgeted rounds and committees of 8.
fn paced_spec() -> RunSpec {
    RunSpec { committee_size: 8, pacing: Pacing { overlapped: true, inner_budget_ms: 45_000 }, ..spec() }
}

/// The golden spec starting from given parameters (those of `state`).
fn init_spec() -> RunSpec {
    RunSpec { genesis_params: Some(params_id(&state(RunId([0; 32])).params)), ..spec() }
}

fn state(run: RunId) -> TrainingState {
    TrainingState { run, round: 1, params: vec![0.5, -1.0, 0.25], momentum: Some(vec![0.0, 0.125, -0.5]) }
}

fn delta_values() -> Vec<f32> {
    vec![0.5, -0.25, 0.125, 1.0, -2.0, 0.0, 0.75, -0.0625]
}

/// A two-shard training split and a one-shard validation split of
/// shards whose tokens are 0, 1, 2, … (u16 LE).
fn dataset_manifest() -> DatasetManifest {
    let shard = |from: u16, n: u16| -> Vec<u8> { (from..from + n).flat_map(u16::to_le_bytes).collect() };
    DatasetManifest {
        tokenizer: DatasetTokenizer::Byte,
        shard_tokens: 4,
        train: vec![
            ShardEntry { hash: shard_hash_of(&shard(0, 4)), tokens: 4 },
            ShardEntry { hash: shard_hash_of(&shard(4, 2)), tokens: 2 },
        ],
        val: vec![ShardEntry { hash: shard_hash_of(&shard(6, 3)), tokens: 3 }],
    }
}

/// The tokenizer.json bytes the BPE manifest vector names.
const TOKENIZER_JSON: &[u8] = b"{\"model\":{\"type\":\"BPE\"}}";

/// `dataset_manifest()` with its own tokenizer of 300 ids.
fn dataset_manifest_bpe() -> DatasetManifest {
    DatasetManifest {
        tokenizer: DatasetTokenizer::Bpe {
            vocab: 300,
            json_len: TOKENIZER_JSON.len() as u32,
            hash: tokenizer_hash_of(TOKENIZER_JSON),
        },
        ..dataset_manifest()
    }
}

/// (fixture name, bytes) for every vector.
fn vectors() -> Vec<(&'static str, Vec<u8>)> {
    let k = key();
    let spec = spec();
    let run = spec.run_id();
    let st = state(run);
    let base = st.id();
    let codec = Codec::Int8Block { block: 4 };
    let payload = encode_delta(codec, &delta_values()).unwrap_or_default();
    let payload_hash = payload_hash_of(&payload);
    let telemetry = Telemetry {
        run,
        round: 1,
        train_loss: 3.25,
        val_loss: Some(3.5),
        tokens_per_sec: 12_345.5,
        device: "cpu".into(),
        bytes_sent: 1024,
        bytes_recv: 2048,
        peer_count: 3,
        state: base,
        backend: "cpu".into(),
        links: vec![
            PeerLink { peer: PublicKey([0x11; 32]), relayed: false },
            PeerLink { peer: PublicKey([0x22; 32]), relayed: true },
        ],
        rejections: vec![RejectionCount { reason: "bad-signature".into(), count: 2 }],
        trainer_restarts: 0,
        signer: PublicKey::default(),
        signature: Signature::default(),
    }
    .sign(&k);
    let mut v = vec![
        ("signing_key_seed", k.seed().to_vec()),
        ("signing_key_public", k.public().0.to_vec()),
        ("run_spec", spec.encode()),
        ("run_id", run.0.to_vec()),
        ("state_payload", st.encode()),
        ("state_id", base.0.to_vec()),
        ("telemetry", telemetry.encode()),
    ];
    for c in [
        Codec::F32,
        Codec::F16,
        Codec::Bf16,
        Codec::Int8Block { block: 4 },
        Codec::Int4Block { block: 4 },
        Codec::TopK { density_ppm: 250_000, block: 2 },
        Codec::TopKMask { density_ppm: 250_000, block: 2 },
    ] {
        let name: &'static str = match c {
            Codec::F32 => "delta_payload_f32",
            Codec::F16 => "delta_payload_f16",
            Codec::Bf16 => "delta_payload_bf16",
            Codec::Int8Block { .. } => "delta_payload_int8_b4",
            Codec::Int4Block { .. } => "delta_payload_int4_b4",
            Codec::TopK { .. } => "delta_payload_topk_250000ppm_b2",
            Codec::TopKMask { .. } => "delta_payload_topkmask_250000ppm_b2",
        };
        v.push((name, encode_delta(c, &delta_values()).unwrap_or_default()));
    }
    v.push(("delta_payload_int8_b4_hash", payload_hash.0.to_vec()));
    let dataset = dataset_manifest();
    v.push(("dataset_manifest", dataset.encode()));
    v.push(("dataset_id", dataset_id_of(&dataset.encode()).0.to_vec()));
    v.push(("dataset_manifest_bpe", dataset_manifest_bpe().encode()));
    v.push(("ticket_run_spec", ticket_spec().encode()));
    v.push(("paced_run_spec", paced_spec().encode()));
    v.push(("init_run_spec", init_spec().encode()));
    v.push(("ticket", ticket().encode()));
    v.extend(v2_vectors());
    v
}

/// Shards the golden delta is cut into for the protocol-v2 vectors. (The
/// layout would give an 8-element vector one shard, MIN_SHARD_ELEMENTS being
/// 1024; three is wire-valid and shows a Merkle tree with an odd node.)
const V2_SHARDS: u32 = 3;

/// Elements `[s·n/S, (s+1)·n/S)` of the golden delta (docs/protocol.md §10.1).
fn v2_shard_values(s: u32) -> Vec<f32> {
    let d = delta_values();
    let at = |i: u32| i as usize * d.len() / V2_SHARDS as usize;
    d[at(s)..at(s + 1)].to_vec()
}

/// Shard `s` of the golden delta encoded with the golden codec (Int8Block, block 4).
fn v2_shard_payload(s: u32) -> Vec<u8> {
    encode_delta(Codec::Int8Block { block: 4 }, &v2_shard_values(s)).unwrap_or_default()
}

/// Shard `s` as a receiver decodes it (the values norms and hashes are of).
fn v2_shard_decoded(s: u32) -> Vec<f32> {
    let n = v2_shard_values(s).len();
    decode_delta(&v2_shard_payload(s), Codec::Int8Block { block: 4 }, n).unwrap_or_default()
}

fn v2_leaves() -> Vec<ShardLeaf> {
    (0..V2_SHARDS)
        .map(|s| {
            let payload = v2_shard_payload(s);
            ShardLeaf {
                shard: s,
                payload_hash: payload_hash_of(&payload),
                payload_len: payload.len() as u64,
                norm: shard_norm(&v2_shard_decoded(s)),
            }
        })
        .collect()
}

/// The golden ledger: roster {golden key, 0x11…, 0x22…}, 0x33… excluded for
/// an offence in round 0.
fn v2_ledger() -> Ledger {
    let mut l = Ledger::genesis(vec![key().public(), PublicKey([0x11; 32]), PublicKey([0x22; 32])]);
    l.excluded = BTreeMap::from([(PublicKey([0x33; 32]), 0)]);
    l
}

/// The v2 base: the golden state's StateId with the golden ledger.
fn v2_base() -> StateId {
    v2_ledger().state_id(state(spec().run_id()).id())
}

fn v2_manifest() -> ShardedManifest {
    ShardedManifest {
        run: spec().run_id(),
        round: 1,
        base: v2_base(),
        signer: PublicKey::default(),
        tokens: 65_536,
        train_loss: 3.25,
        codec: Codec::Int8Block { block: 4 },
        element_count: delta_values().len() as u64,
        shards: V2_SHARDS,
        norm: shard_norm(&(0..V2_SHARDS).flat_map(v2_shard_decoded).collect::<Vec<f32>>()),
        root: merkle_root(&v2_leaves()),
        signature: Signature::default(),
    }
    .sign(&key())
}

/// Shard 1 of the golden manifest's delta, with its proof.
fn v2_shard_delta() -> ShardDelta {
    let leaves = v2_leaves();
    ShardDelta {
        run: spec().run_id(),
        round: 1,
        signer: key().public(),
        shard: 1,
        shards: V2_SHARDS,
        norm: leaves[1].norm,
        proof: MerkleTree::new(&leaves).proof(1),
        payload: v2_shard_payload(1),
    }
}

/// The golden key's manifest and one by 0x11… (its root all `aa`).
/// The roster the golden IncludedSigners' bits refer to: the 0x11 key and
/// one that did not sign, so the fixed key is a newcomer.
fn v2_signers_roster() -> Vec<PublicKey> {
    vec![PublicKey([0x11; 32]), PublicKey([0x22; 32])]
}

fn v2_included() -> IncludedList {
    IncludedList::new(vec![(PublicKey([0x11; 32]), [0xaa; 32]), (key().public(), v2_manifest().root)])
}

/// The golden key's shard 1 alone, encoded as an aggregate.
fn v2_lone_aggregate() -> Vec<u8> {
    encode_delta(aggregate_codec(Codec::Int8Block { block: 4 }), &v2_shard_decoded(1)).expect("encodes")
}

/// A result for shard 1 naming the two-entry included list but the hash of
/// the golden key's shard alone: a wrong result (the fraud proof's evidence).
fn v2_result() -> ShardResult {
    let included = v2_included();
    ShardResult {
        run: spec().run_id(),
        round: 1,
        base: v2_base(),
        shard: 1,
        included_count: included.len() as u32,
        included_root: included.root(),
        total_tokens: 65_536 + 1_000,
        result_hash: aggregate_hash(&v2_lone_aggregate()),
        signer: PublicKey::default(),
        signature: Signature::default(),
    }
    .sign(&key())
}

/// The protocol-v2 (committee) vectors.
fn v2_vectors() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("v2_merkle_root", merkle_root(&v2_leaves()).to_vec()),
        ("v2_state_id", v2_base().0.to_vec()),
        ("sharded_manifest", v2_manifest().encode()),
        ("shard_delta", v2_shard_delta().encode()),
        ("included_list", v2_included().encode()),
        ("included_root", v2_included().root().to_vec()),
        ("included_signers", IncludedSigners::of(&v2_included(), &v2_signers_roster()).encode()),
        ("aggregate_hash", aggregate_hash(&v2_lone_aggregate()).to_vec()),
        ("shard_result", v2_result().encode()),
        (
            "fraud_proof_wrong_result",
            FraudProof::WrongResult { result: v2_result(), included: v2_included() }.encode(),
        ),
    ]
}

/// The golden spec run by tickets that the golden key signs.
fn ticket_spec() -> RunSpec {
    RunSpec { admission: AdmissionPolicy::Tickets { operators: vec![key().public()] }, ..spec() }
}

/// A ticket for the key of seed `[7; 32]` in `ticket_spec`'s run until
/// 2030-01-01T00:00:00Z, signed by the golden key as operator.
fn ticket() -> Ticket {
    let holder = NodeKey::from_seed([7; 32]).public();
    Ticket::issue(&key(), ticket_spec().run_id(), holder, 1_893_456_000)
}

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests").join("fixtures")
}

#[test]
fn golden_vectors_match_fixtures() {
    let bless = std::env::var_os("MURMUR_BLESS").is_some();
    for (name, bytes) in vectors() {
        assert!(!bytes.is_empty(), "{name} is empty");
        let path = fixture_dir().join(format!("{name}.hex"));
        if bless {
            std::fs::write(&path, format!("{}\n", hex(&bytes))).expect("write fixture");
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let expected = unhex(text.trim()).unwrap_or_else(|| panic!("{name}: bad hex"));
        assert_eq!(hex(&bytes), hex(&expected), "{name} differs from its golden vector");
    }
}

#[test]
fn golden_messages_decode_and_verify() {
    let read = |name: &str| {
        let text = std::fs::read_to_string(fixture_dir().join(format!("{name}.hex"))).expect("fixture");
        unhex(text.trim()).expect("hex")
    };
    let spec_bytes = read("run_spec");
    let spec = RunSpec::decode(&spec_bytes).expect("spec");
    assert_eq!(spec.encode(), spec_bytes);
    assert_eq!(spec.run_id().0.to_vec(), read("run_id"));
    assert_eq!(
        payload_hash_of(&read("delta_payload_int8_b4")).0.to_vec(),
        read("delta_payload_int8_b4_hash")
    );
    let t = Telemetry::decode(&read("telemetry")).expect("telemetry");
    assert_eq!(t.verify(), Ok(()));
    let d = DatasetManifest::decode(&read("dataset_manifest")).expect("dataset manifest");
    assert_eq!(d, dataset_manifest());
    assert_eq!(d.id().0.to_vec(), read("dataset_id"));
    assert_eq!(DatasetManifest::decode(&read("dataset_manifest_bpe")), Ok(dataset_manifest_bpe()));
    assert_eq!(RunSpec::decode(&read("paced_run_spec")), Ok(paced_spec()));
    assert_eq!(RunSpec::decode(&read("init_run_spec")), Ok(init_spec()));
    let ts = RunSpec::decode(&read("ticket_run_spec")).expect("ticket run spec");
    assert_eq!(ts.admission.operators(), &[key().public()]);
    let t = Ticket::decode(&read("ticket")).expect("ticket");
    assert_eq!(t.verify(), Ok(()));
    assert_eq!(t.check(&ts.run_id(), ts.admission.operators(), 1_893_455_999), Ok(()));
    let s = TrainingState::decode(&read("state_payload"), 3).expect("state");
    assert_eq!(s.id().0.to_vec(), read("state_id"));

    // Protocol v2.
    assert_eq!(v2_ledger().state_id(s.id()).0.to_vec(), read("v2_state_id"));
    let m = ShardedManifest::decode(&read("sharded_manifest")).expect("sharded manifest");
    assert_eq!(m.verify(), Ok(()));
    assert_eq!(m.signer.0.to_vec(), read("signing_key_public"));
    // The signature is a plain ed25519 signature over domain || unsigned bytes.
    assert_eq!(verify(&m.signer, SIGN_SHARDED_MANIFEST, &m.signed_bytes(), &m.signature), Ok(()));
    assert_eq!(m.root.to_vec(), read("v2_merkle_root"));
    assert_eq!(m.base.0.to_vec(), read("v2_state_id"));
    let d = ShardDelta::decode(&read("shard_delta")).expect("shard delta");
    assert!(verify_proof(&m.root, m.shards, &d.leaf(), &d.proof), "the shard proves against the manifest");
    let values = decode_delta(&d.payload, m.codec, 3).expect("shard payload");
    let lone = encode_delta(aggregate_codec(m.codec), &values).expect("encodes");
    assert_eq!(aggregate_hash(&lone).to_vec(), read("aggregate_hash"));
    assert_eq!(shard_norm(&values), d.norm);
    let l = IncludedList::decode(&read("included_list")).expect("included list");
    assert_eq!(l.root().to_vec(), read("included_root"));
    assert!(l.entries.contains(&(m.signer, m.root)));
    let s = IncludedSigners::decode(&read("included_signers")).expect("included signers");
    assert_eq!(s.root(&v2_signers_roster()).map(|r| r.to_vec()), Ok(read("included_root")));
    assert_eq!(
        (s.on_roster.as_slice(), s.newcomers.as_slice()),
        ([0b01u8].as_slice(), [m.signer].as_slice())
    );
    let r = ShardResult::decode(&read("shard_result")).expect("shard result");
    assert_eq!(r.verify(), Ok(()));
    assert_eq!((r.included_root, r.included_count as usize), (l.root(), l.len()));
    assert_eq!(r.result_hash.to_vec(), read("aggregate_hash"));
    let p = FraudProof::decode(&read("fraud_proof_wrong_result")).expect("fraud proof");
    assert_eq!(p, FraudProof::WrongResult { result: r, included: l });
    assert_eq!(p.check(), Ok(()));
}

#[test]
fn docs_print_the_golden_vectors() {
    let doc_path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join("docs").join("protocol.md");
    let Ok(doc) = std::fs::read_to_string(&doc_path) else {
        // The crate may be built outside the repository (e.g. packaged).
        return;
    };
    let doc_hex: String = doc.split_whitespace().collect();
    for (name, bytes) in vectors() {
        assert!(doc_hex.contains(&hex(&bytes)), "docs/protocol.md lacks the golden vector {name}");
    }
}
