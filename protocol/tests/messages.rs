//! Property tests of the message encodings: decode(encode(x)) == x for random
//! valid messages, every decoder total on arbitrary bytes, and signature
//! verification failing after any single-bit change of a signed message.

use murmur_protocol::codec::Codec;
use murmur_protocol::hash::{RunId, StateId};
use murmur_protocol::identity::{NodeKey, PublicKey, Signature};
use murmur_protocol::spec::{
    AdmissionPolicy, InnerOptimizer, ModelShape, OuterOptimizer, Pacing, RobustMode, RunSpec,
};
use murmur_protocol::{PeerLink, RejectionCount, StateHeader, Telemetry, Ticket, TrainingState};
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
    ]
}

fn finite() -> impl Strategy<Value = f32> {
    proptest::num::f32::NORMAL | proptest::num::f32::SUBNORMAL | proptest::num::f32::ZERO
}

fn telemetry() -> impl Strategy<Value = Telemetry> {
    (
        (h32(), any::<u64>(), finite(), proptest::option::of(finite()), finite()),
        ("[a-zA-Z0-9 é:()-]{0,40}", any::<u64>(), any::<u64>(), any::<u32>(), h32(), any::<[u8; 32]>()),
        (
            "[a-z]{0,16}",
            proptest::collection::vec((h32(), any::<bool>()), 0..5),
            proptest::collection::vec(("[a-z-]{0,32}", any::<u64>()), 0..4),
            any::<u32>(),
        ),
    )
        .prop_map(
            |(
                (run, round, train_loss, val_loss, tokens_per_sec),
                (device, sent, recv, peers, state, seed),
                (backend, links, rejections, trainer_restarts),
            )| {
                Telemetry {
                    run: RunId(run),
                    round,
                    train_loss,
                    val_loss,
                    tokens_per_sec,
                    device,
                    bytes_sent: sent,
                    bytes_recv: recv,
                    peer_count: peers,
                    state: StateId(state),
                    backend,
                    links: links
                        .into_iter()
                        .map(|(k, relayed)| PeerLink { peer: PublicKey(k), relayed })
                        .collect(),
                    rejections: rejections
                        .into_iter()
                        .map(|(reason, count)| RejectionCount { reason, count })
                        .collect(),
                    trainer_restarts,
                    signer: PublicKey::default(),
                    signature: Signature::default(),
                }
                .sign(&NodeKey::from_seed(seed))
            },
        )
}

fn spec() -> impl Strategy<Value = RunSpec> {
    let outer = prop_oneof![
        Just(OuterOptimizer::Average),
        (0.001f32..10.0, 0.0f32..0.999).prop_map(|(lr, momentum)| OuterOptimizer::Nesterov { lr, momentum }),
    ];
    let robust = prop_oneof![
        Just(RobustMode::Mean),
        Just(RobustMode::Median),
        (0.01f32..100.0).prop_map(|multiple| RobustMode::NormClip { multiple }),
        (0.0f32..0.49).prop_map(|trim| RobustMode::TrimmedMean { trim }),
        (1.0f32..100.0).prop_map(|multiple| RobustMode::NormFilter { multiple }),
    ];
    let admission = prop_oneof![
        Just(AdmissionPolicy::Open),
        proptest::collection::btree_set(h32(), 1..5)
            .prop_map(|s| AdmissionPolicy::Allowlist(s.into_iter().map(PublicKey).collect())),
        proptest::collection::btree_set(h32(), 1..5)
            .prop_map(|s| AdmissionPolicy::Tickets { operators: s.into_iter().map(PublicKey).collect() }),
        proptest::collection::btree_set(h32(), 1..5).prop_map(|s| AdmissionPolicy::OpenWithOperators {
            operators: s.into_iter().map(PublicKey).collect()
        }),
    ];
    // Valid DataRefs only: a RunSpec never names a path.
    let data = prop_oneof![
        Just("synthetic".to_string()),
        "[a-z0-9=,._-]{0,40}".prop_map(|o| format!("synthetic:{o}")),
        ("[0-9a-f]{64}", 1u32..=2_400_000).prop_map(|(id, len)| format!("dataset:{id}:{len}")),
    ];
    (
        // Context and batch within the spec's 2^20 tokens a step, H within
        // its 2^28 tokens a round, the deadline within seven days.
        ("[a-z0-9-]{0,20}", any::<[u32; 5]>(), 1u32..=1024, 1u64..=(1 << 31), data),
        (
            (any::<u32>(), 1u32..=1024),
            proptest::array::uniform6(finite()),
            1u32..=256,
            outer,
            codec(),
            robust,
        ),
        (1u32.., 1u32..=604_800, admission, any::<u64>()),
    )
        .prop_map(
            |(
                (preset, dims, context_len, params, data),
                (ints, f, steps, outer, codec, robust),
                (q, dl, admission, seed),
            )| RunSpec {
                model: ModelShape {
                    preset,
                    vocab_size: dims[0],
                    context_len,
                    n_layer: dims[2],
                    n_head: dims[3],
                    d_model: dims[4],
                    param_count: params,
                },
                data,
                inner: InnerOptimizer {
                    lr: f[0],
                    beta1: f[1],
                    beta2: f[2],
                    eps: f[3],
                    weight_decay: f[4],
                    grad_clip: f[5],
                    warmup_steps: ints.0,
                    batch_size: ints.1,
                },
                inner_steps: steps,
                outer,
                codec,
                robust,
                quorum: q,
                round_deadline_secs: dl,
                admission,
                committee_size: 1 + (seed % 64) as u32,
                pacing: Pacing {
                    overlapped: seed % 5 == 1,
                    inner_budget_ms: if seed % 7 == 2 {
                        dl.saturating_sub(1).min(86_400) * 1000 / 2
                    } else {
                        0
                    },
                },
                seed,
                genesis_params: (seed % 11 == 3).then_some(murmur_protocol::ParamsId([seed as u8; 32])),
            },
        )
}

/// Flip one bit; the result must fail to decode or fail to verify.
fn flip(bytes: &[u8], bit: usize) -> Vec<u8> {
    let mut b = bytes.to_vec();
    b[bit / 8] ^= 1 << (bit % 8);
    b
}

proptest! {
    #[test]
    fn telemetry_round_trips(t in telemetry()) {
        let bytes = t.encode();
        let back = Telemetry::decode(&bytes).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(&back, &t);
        prop_assert_eq!(back.encode(), bytes);
        prop_assert!(back.verify().is_ok());
    }

    #[test]
    fn ticket_round_trips(seed in any::<[u8; 32]>(), run in h32(), holder in h32(), expires in any::<u64>()) {
        let t = Ticket::issue(&NodeKey::from_seed(seed), RunId(run), PublicKey(holder), expires);
        let bytes = t.encode();
        let back = Ticket::decode(&bytes).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(&back, &t);
        prop_assert_eq!(back.encode(), bytes);
        prop_assert!(back.verify().is_ok());
    }

    #[test]
    fn run_spec_round_trips(s in spec()) {
        let bytes = s.encode();
        let back = RunSpec::decode(&bytes).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(&back, &s);
        prop_assert_eq!(back.encode(), bytes);
    }

    #[test]
    fn state_round_trips(params in proptest::collection::vec(finite(), 0..50), round in any::<u64>(), with_m in any::<bool>()) {
        let momentum = with_m.then(|| params.iter().map(|p| p * 0.5).collect());
        let s = TrainingState { run: RunId([3; 32]), round, params: params.clone(), momentum };
        let bytes = s.encode();
        let back = TrainingState::decode(&bytes, params.len()).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(back.encode(), bytes);
        prop_assert_eq!(back.id(), s.id());
    }

    #[test]
    fn decoders_are_total_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..400), tag in 1u8..=8) {
        // Make the envelope plausible half of the time so decoding goes deep.
        let mut b = bytes;
        if b.len() >= 2 && b[0] % 2 == 0 {
            b[0] = 1;
            b[1] = tag;
        }
        for ok in [
            RunSpec::decode(&b).map(|x| x.encode()).ok(),
            Telemetry::decode(&b).map(|x| x.encode()).ok(),
            TrainingState::decode(&b, 4).map(|x| x.encode()).ok(),
            Ticket::decode(&b).map(|x| x.encode()).ok(),
        ].into_iter().flatten() {
            // Whatever decodes re-encodes to the same bytes: canonical.
            prop_assert_eq!(ok, b.clone());
        }
        let _ = StateHeader::decode_prefix(&b);
    }

    #[test]
    fn any_single_bit_flip_breaks_a_signed_message(t in telemetry(), bit in any::<prop::sample::Index>()) {
        let tb = t.encode();
        let x = flip(&tb, bit.index(tb.len() * 8));
        prop_assert!(Telemetry::decode(&x).map_or(true, |d| d.verify().is_err()));
    }
}

/// Exhaustive: every bit of one message of each signed type.
#[test]
fn every_single_bit_flip_is_rejected() {
    let key = NodeKey::from_seed([5; 32]);
    let t = Telemetry {
        run: RunId([1; 32]),
        round: 3,
        train_loss: 1.5,
        val_loss: None,
        tokens_per_sec: 10.0,
        device: "cpu".into(),
        bytes_sent: 1,
        bytes_recv: 2,
        peer_count: 3,
        state: StateId([6; 32]),
        backend: "cpu".into(),
        links: vec![PeerLink { peer: PublicKey([4; 32]), relayed: true }],
        rejections: vec![RejectionCount { reason: "replay".into(), count: 1 }],
        trainer_restarts: 0,
        signer: PublicKey::default(),
        signature: Signature::default(),
    }
    .sign(&key);
    let tb = t.encode();
    for bit in 0..tb.len() * 8 {
        assert!(
            Telemetry::decode(&flip(&tb, bit)).map_or(true, |d| d.verify().is_err()),
            "telemetry bit {bit}"
        );
    }
    let ticket = Ticket::issue(&key, RunId([1; 32]), PublicKey([7; 32]), 1_700_000_000);
    let kb = ticket.encode();
    for bit in 0..kb.len() * 8 {
        assert!(Ticket::decode(&flip(&kb, bit)).map_or(true, |d| d.verify().is_err()), "ticket bit {bit}");
    }
}
