//! Tests of aggregation: validation, weighting, robust modes, and
//! bit-identical results under every permutation of the inputs.

use super::*;
use proptest::prelude::*;

fn h(b: u8) -> PayloadHash {
    PayloadHash([b; 32])
}

fn input(hash: u8, tokens: u64, values: &[f32]) -> DeltaInput<'_> {
    DeltaInput { payload_hash: h(hash), signer: PublicKey([hash; 32]), tokens, values }
}

const MODES: [RobustMode; 6] = [
    RobustMode::Mean,
    RobustMode::NormClip { multiple: 1.5 },
    RobustMode::TrimmedMean { trim: 0.2 },
    RobustMode::TrimmedMean { trim: 0.0 },
    RobustMode::Median,
    RobustMode::NormFilter { multiple: 2.0 },
];

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Heap's algorithm: every permutation of 0..n.
fn permutations(n: usize) -> Vec<Vec<usize>> {
    fn go(k: usize, a: &mut Vec<usize>, out: &mut Vec<Vec<usize>>) {
        if k <= 1 {
            out.push(a.clone());
            return;
        }
        for i in 0..k {
            go(k - 1, a, out);
            if k.is_multiple_of(2) {
                a.swap(i, k - 1);
            } else {
                a.swap(0, k - 1);
            }
        }
    }
    let mut out = Vec::new();
    go(n, &mut (0..n).collect(), &mut out);
    out
}

#[test]
fn heap_permutations_are_complete() {
    let mut p = permutations(4);
    assert_eq!(p.len(), 24);
    p.sort();
    p.dedup();
    assert_eq!(p.len(), 24);
}

#[test]
fn weighted_by_tokens() {
    let a = [1.0f32, 0.0];
    let b = [4.0f32, 3.0];
    let agg = aggregate(&[input(2, 300, &b), input(1, 100, &a)], 2, RobustMode::Mean).expect("aggregates");
    assert_eq!(agg.delta, vec![3.25, 2.25]);
    assert_eq!(agg.included, vec![h(1), h(2)]);
    assert_eq!(agg.total_tokens, 400);
    assert!(agg.rejected.is_empty());
}

#[test]
fn invalid_inputs_are_rejected_with_reasons() {
    let ok = [1.0f32, 1.0];
    let short = [1.0f32];
    let nan = [1.0f32, f32::NAN];
    let other = [2.0f32, 2.0];
    let huge = [1e30f32, 0.0];
    let inputs = [
        input(1, 10, &ok),
        input(2, 10, &short),
        input(3, 10, &nan),
        input(4, 0, &ok),
        input(1, 10, &ok),
        DeltaInput { payload_hash: h(5), signer: PublicKey([5; 32]), tokens: 10, values: &ok },
        DeltaInput { payload_hash: h(5), signer: PublicKey([6; 32]), tokens: 10, values: &other },
    ];
    let agg = aggregate(&inputs, 2, RobustMode::Mean).expect("one survives");
    assert!(matches!(
        aggregate(&[input(1, 10, &huge)], 2, RobustMode::Mean),
        Err(AggregateError::NoValidDeltas { rejected }) if rejected[0].reason == AggregateRejection::OutOfRange { index: 0 }
    ));
    assert_eq!(agg.included, vec![h(1)]);
    let reasons: Vec<_> = agg.rejected.iter().map(|r| (r.payload_hash, r.reason)).collect();
    assert_eq!(
        reasons,
        vec![
            (h(1), AggregateRejection::Duplicate),
            (h(2), AggregateRejection::WrongShape { expected: 2, found: 1 }),
            (h(3), AggregateRejection::NonFinite { index: 1 }),
            (h(4), AggregateRejection::ZeroTokens),
            (h(5), AggregateRejection::HashConflict),
            (h(5), AggregateRejection::HashConflict),
        ]
    );
    assert!(matches!(
        aggregate(&[input(3, 1, &nan)], 2, RobustMode::Mean),
        Err(AggregateError::NoValidDeltas { .. })
    ));
    assert!(matches!(aggregate(&[], 2, RobustMode::Median), Err(AggregateError::NoValidDeltas { .. })));
}

#[test]
fn robust_modes_resist_an_outlier() {
    let honest: Vec<[f32; 3]> = vec![[1.0, 1.0, 1.0], [1.1, 0.9, 1.0], [0.9, 1.1, 1.0], [1.0, 1.0, 1.1]];
    let attack = [-100.0f32, 1000.0, 50.0];
    let mut inputs: Vec<DeltaInput<'_>> =
        honest.iter().enumerate().map(|(i, v)| input(i as u8, 100, v)).collect();
    inputs.push(input(9, 100, &attack));
    let mean = aggregate(&inputs, 3, RobustMode::Mean).expect("aggregates").delta;
    assert!(mean[1] > 100.0, "plain mean is dragged: {mean:?}");
    for mode in [
        RobustMode::Median,
        RobustMode::TrimmedMean { trim: 0.2 },
        RobustMode::NormClip { multiple: 1.0 },
        RobustMode::NormFilter { multiple: 3.0 },
    ] {
        let d = aggregate(&inputs, 3, mode).expect("aggregates").delta;
        assert!(d.iter().all(|x| (x - 1.0).abs() < 0.5), "{mode:?} gave {d:?}");
    }
}

#[test]
fn norm_filter_leaves_out_amplified_deltas_and_says_why() {
    // Six honest deltas and two sign-flipped ×10 copies with inflated token claims.
    let honest: Vec<[f32; 2]> =
        vec![[1.0, 0.5], [1.2, 0.4], [0.8, 0.6], [1.1, 0.5], [0.9, 0.45], [1.0, 0.55]];
    let flipped: Vec<[f32; 2]> = vec![[-10.0, -5.0], [-12.0, -4.0]];
    let mut inputs: Vec<DeltaInput<'_>> =
        honest.iter().enumerate().map(|(i, v)| input(i as u8, 100, v)).collect();
    inputs.extend(flipped.iter().enumerate().map(|(i, v)| input(200 + i as u8, 10_000, v)));
    let a = aggregate(&inputs, 2, RobustMode::NormFilter { multiple: 3.0 }).expect("aggregates");
    let expect_x = honest.iter().map(|v| f64::from(v[0])).sum::<f64>() / 6.0;
    assert!((f64::from(a.delta[0]) - expect_x).abs() < 1e-6, "{:?}", a.delta);
    assert_eq!(a.included, (0..6).map(h).collect::<Vec<_>>());
    assert_eq!(a.rejected.len(), 2);
    assert!(a.rejected.iter().all(|r| r.reason == AggregateRejection::NormOutlier));
    assert_eq!(a.total_tokens, 600);
    // Plain averaging follows the flipped deltas uphill.
    let mean = aggregate(&inputs, 2, RobustMode::Mean).expect("aggregates");
    assert!(mean.delta[0] < 0.0, "{:?}", mean.delta);
}

#[test]
fn norm_clip_caps_token_weights() {
    let a = [1.0f32];
    let b = [1.0f32];
    let liar = [-1.0f32];
    // The liar claims 10⁹ tokens; its weight is capped at twice the median.
    let d = aggregate(
        &[input(1, 100, &a), input(2, 100, &b), input(3, 1_000_000_000, &liar)],
        1,
        RobustMode::NormClip { multiple: 1.0 },
    )
    .expect("aggregates")
    .delta;
    assert_eq!(d, vec![0.0]);
}

#[test]
fn median_and_trimmed_mean_by_hand() {
    let (a, b, c, d) = ([1.0f32], [2.0f32], [10.0f32], [4.0f32]);
    let all = [input(1, 1, &a), input(2, 1, &b), input(3, 1, &c), input(4, 1, &d)];
    assert_eq!(aggregate(&all, 1, RobustMode::Median).expect("ok").delta, vec![3.0]);
    assert_eq!(aggregate(&all[..3], 1, RobustMode::Median).expect("ok").delta, vec![2.0]);
    assert_eq!(aggregate(&all, 1, RobustMode::TrimmedMean { trim: 0.25 }).expect("ok").delta, vec![3.0]);
}

fn deltas(max_n: usize) -> impl Strategy<Value = Vec<(u64, Vec<f32>)>> {
    (1usize..=max_n).prop_flat_map(|n| {
        proptest::collection::vec((1u64..1_000_000, proptest::collection::vec(-1e3f32..1e3, 17)), n..=n)
    })
}

fn check_all_orders(ds: &[(u64, Vec<f32>)], orders: &[Vec<usize>]) -> Result<(), TestCaseError> {
    let inputs: Vec<DeltaInput<'_>> = ds
        .iter()
        .enumerate()
        .map(|(i, (t, v))| DeltaInput {
            payload_hash: PayloadHash(crate::hash::domain_hash("test", &[i as u8])),
            signer: PublicKey([i as u8; 32]),
            tokens: *t,
            values: v,
        })
        .collect();
    for mode in MODES {
        let reference = aggregate(&inputs, 17, mode).map_err(|e| TestCaseError::fail(e.to_string()))?;
        for order in orders {
            let permuted: Vec<DeltaInput<'_>> = order.iter().map(|&i| inputs[i]).collect();
            let got = aggregate(&permuted, 17, mode).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(bits(&got.delta), bits(&reference.delta), "{:?} order {:?}", mode, order);
            prop_assert_eq!(&got.included, &reference.included);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn bit_identical_under_every_permutation_up_to_five(ds in deltas(5)) {
        check_all_orders(&ds, &permutations(ds.len()))?;
    }

    #[test]
    fn bit_identical_under_random_permutations(ds in deltas(12), seeds in proptest::collection::vec(any::<u64>(), 20)) {
        let orders: Vec<Vec<usize>> = seeds.iter().map(|&s| {
            // Fisher–Yates driven by a splitmix64 stream.
            let mut state = s;
            let mut next = move || {
                state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
                let mut z = state;
                z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                z ^ (z >> 31)
            };
            let mut order: Vec<usize> = (0..ds.len()).collect();
            for i in (1..order.len()).rev() {
                order.swap(i, (next() % (i as u64 + 1)) as usize);
            }
            order
        }).collect();
        check_all_orders(&ds, &orders)?;
    }
}

#[test]
fn per_token_weighting_normalises_by_steps_and_rescales_by_the_median() {
    // Three nodes trained the same per-step direction for 4, 4 and 1 steps
    // (tokens 400, 400, 100): their deltas are 4·g, 4·g and 1·g.
    let (a, b, c) = ([4.0f32, -8.0], [4.0f32, -8.0], [1.0f32, -2.0]);
    let inputs = [input(1, 400, &a), input(2, 400, &b), input(3, 100, &c)];
    let agg = aggregate_weighted(&inputs, 2, RobustMode::Mean, Weighting::PerToken).expect("aggregate");
    // Each is rescaled to the median claim (400 tokens): all become 4·g, so
    // the mean is 4·g whatever the weights.
    assert_eq!(agg.delta, vec![4.0, -8.0]);
    assert_eq!(agg.total_tokens, 900);
    // As trained, the slow node's short delta pulls the token-weighted mean down.
    let plain = aggregate(&inputs, 2, RobustMode::Mean).expect("aggregate");
    assert!(plain.delta[0] < 4.0);
}

#[test]
fn per_token_influence_grows_linearly_with_steps_not_with_their_square() {
    // Node 1 trained twice as many steps as node 2 in another direction.
    let (a, b) = ([2.0f32, 0.0], [0.0f32, 1.0]);
    let inputs = [input(1, 200, &a), input(2, 100, &b)];
    let agg = aggregate_weighted(&inputs, 2, RobustMode::Mean, Weighting::PerToken).expect("aggregate");
    // Median claim 150: a → (1.5, 0), b → (0, 1.5); weights 200 : 100.
    assert_eq!(agg.delta, vec![1.0, 0.5]);
    // As trained the ratio of influence is 2² = 4 (2·200/300 against 1·100/300).
    let plain = aggregate(&inputs, 2, RobustMode::Mean).expect("aggregate");
    assert!((f64::from(plain.delta[0]) / f64::from(plain.delta[1]) - 4.0).abs() < 1e-6);
    assert!((f64::from(agg.delta[0]) / f64::from(agg.delta[1]) - 2.0).abs() < 1e-6);
}

#[test]
fn claims_far_from_the_median_are_refused_with_a_typed_reason() {
    // Deltas proportional to their steps, so that normalised they are equal
    // and no robust mode leaves one out for its norm.
    let v = [1.0f32, 1.0];
    let (big, small, kept) = ([4.01f32, 4.01], [0.06f32, 0.06], [0.07f32, 0.07]);
    let inputs = [
        input(1, 100, &v),
        input(2, 100, &v),
        input(3, 100, &v),
        input(4, 401, &big), // above 4× the median
        input(5, 6, &small), // below 1/16 of it
        input(6, 7, &kept),  // 7·16 ≥ 100: kept
    ];
    for mode in MODES {
        let agg = aggregate_weighted(&inputs, 2, mode, Weighting::PerToken).expect("aggregate");
        let refused: Vec<(u8, AggregateRejection)> =
            agg.rejected.iter().map(|r| (r.signer.0[0], r.reason)).collect();
        assert_eq!(
            refused,
            vec![(4, AggregateRejection::ClaimOutlier), (5, AggregateRejection::ClaimOutlier)],
            "{mode:?}"
        );
        assert_eq!(agg.included, vec![h(1), h(2), h(3), h(6)], "{mode:?}");
    }
}

#[test]
fn per_token_weighting_is_bit_identical_under_every_permutation() {
    let vals: Vec<Vec<f32>> =
        (0..5).map(|i| (0..7).map(|j| ((i * 7 + j) as f32).sin() * 0.3).collect()).collect();
    let tokens = [64u64, 128, 256, 192, 32];
    let inputs: Vec<DeltaInput<'_>> =
        vals.iter().enumerate().map(|(i, v)| input(i as u8 + 1, tokens[i], v)).collect();
    for mode in MODES {
        let first = aggregate_weighted(&inputs, 7, mode, Weighting::PerToken).expect("aggregate");
        for p in permutations(inputs.len()) {
            let shuffled: Vec<DeltaInput<'_>> = p.iter().map(|&i| inputs[i]).collect();
            let again = aggregate_weighted(&shuffled, 7, mode, Weighting::PerToken).expect("aggregate");
            assert_eq!(bits(&again.delta), bits(&first.delta), "{mode:?} {p:?}");
        }
    }
}

#[test]
fn a_short_honest_delta_stretched_by_the_rescale_stays_in_and_a_short_liar_does_not() {
    // Three nodes of 1,000 tokens with deltas of norm 1; a node of 185 tokens
    // (a fifth of the speed) whose short, noisier delta has norm 0.6. Rescaled
    // by 1000/185 = 5.4 it is 3.24 long — past 3× the median norm, but within
    // its bound of 3 · √5.4 = 6.97. A node claiming the same 185 tokens with a
    // delta of norm 2 (10.8 rescaled) is past that bound too.
    let fast = [0.6f32, 0.8];
    let slow = [0.0f32, 0.6];
    let liar = [2.0f32, 0.0];
    let honest = [input(1, 1000, &fast), input(2, 1000, &fast), input(3, 1000, &fast), input(4, 185, &slow)];
    let filter = RobustMode::NormFilter { multiple: 3.0 };
    let agg = aggregate_weighted(&honest, 2, filter, Weighting::PerToken).expect("aggregate");
    assert_eq!(agg.included, vec![h(1), h(2), h(3), h(4)]);
    assert!(agg.rejected.is_empty(), "{:?}", agg.rejected);
    let liars = [input(1, 1000, &fast), input(2, 1000, &fast), input(3, 1000, &fast), input(5, 185, &liar)];
    let agg = aggregate_weighted(&liars, 2, filter, Weighting::PerToken).expect("aggregate");
    assert_eq!(agg.included, vec![h(1), h(2), h(3)]);
    assert_eq!(agg.rejected.len(), 1);
    assert_eq!(agg.rejected[0].reason, AggregateRejection::NormOutlier);
    // The clip: the honest short delta is not clipped (its rescaled value
    // enters whole), the liar's is clipped to its bound, 6.97 long.
    let clip = RobustMode::NormClip { multiple: 3.0 };
    let agg = aggregate_weighted(&honest, 2, clip, Weighting::PerToken).expect("aggregate");
    let stretched = 0.6 * 1000.0 / 185.0;
    let expect_y = (3.0 * 1000.0 * 0.8 + 185.0 * stretched) / 3185.0;
    assert!((f64::from(agg.delta[1]) - expect_y).abs() < 1e-5, "{:?} vs {expect_y}", agg.delta);
    let agg = aggregate_weighted(&liars, 2, clip, Weighting::PerToken).expect("aggregate");
    let bound = 3.0 * (1000.0f64 / 185.0).sqrt();
    let expect_x = (3.0 * 1000.0 * 0.6 + 185.0 * bound) / 3185.0;
    assert!((f64::from(agg.delta[0]) - expect_x).abs() < 1e-5, "{:?} vs {expect_x}", agg.delta);
}
