//! Sketch audits: checking a shard's aggregate from random projections of
//! its inputs instead of the inputs themselves (docs/protocol.md §10.6).
//!
//! An auditor draws a seed no owner can compute before it signs (from the
//! auditor's own signature, `super::machine::audit_draw`). The seed gives
//! `PROJECTIONS` sign vectors r ∈ {−1, +1}ⁿ; each trainer whose input is in
//! the result's included list returns sᵢ = r·xᵢ for its shard, and the
//! auditor compares r·â (â: the aggregate as it travelled) with Σ cᵢ·sᵢ
//! (cᵢ: `super::rule::coefficients`). For an honest owner the difference is
//! r·e, e the aggregate codec's rounding, whose size over random signs is
//! at most `TOLERANCE`·‖e‖ but for a chance below 2⁻⁴² per audit
//! (Hoeffding); a wrong aggregate â = a + δ adds r·δ, of size about ‖δ‖,
//! in each projection, so a lie several times the rounding is seen in one
//! of eight projections with near certainty. A mismatch is not yet proof:
//! the auditor then recomputes the shard from its inputs (a re-check), and
//! that recomputation is what accuses.

use super::rule::{self, InputClaim, ListCheck, ShardRule};
use crate::codec::{bf16_bound, block_bound, f16_bound, Codec};

/// Projections per audit: one byte of sign bits per coordinate.
pub const PROJECTIONS: usize = 8;
/// Domain of the key the seed's sign stream is derived under.
pub const DOMAIN_SKETCH: &str = "murmur 2026-11 v2 sketch-signs";
/// How many rounding norms a projection may differ by (2·8·e^(−8²/2) < 2⁻⁴²).
pub const TOLERANCE: f64 = 8.0;

/// The sign bits of one audit over a shard of `len` coordinates: byte j,
/// bit p is coordinate j's sign in projection p (1: +1, 0: −1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SketchSigns {
    bits: Vec<u8>,
}

impl SketchSigns {
    /// The signs `seed` gives for a shard of `len` coordinates: the first
    /// `len` bytes of BLAKE3's output stream keyed by
    /// derive_key(DOMAIN_SKETCH, seed).
    pub fn new(seed: &[u8; 32], len: usize) -> Self {
        let key = blake3::derive_key(DOMAIN_SKETCH, seed);
        let mut bits = vec![0u8; len];
        blake3::Hasher::new_keyed(&key).finalize_xof().fill(&mut bits);
        Self { bits }
    }

    pub fn len(&self) -> usize {
        self.bits.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bits.is_empty()
    }
}

/// The projections of `values` (one shard, as decoded): for each p,
/// Σⱼ ±valuesⱼ in f64, in index order. None when the lengths differ.
pub fn project(values: &[f32], signs: &SketchSigns) -> Option<[f64; PROJECTIONS]> {
    if values.len() != signs.bits.len() {
        return None;
    }
    let mut acc = [0f64; PROJECTIONS];
    for (&v, &b) in values.iter().zip(&signs.bits) {
        let v = f64::from(v);
        for (p, a) in acc.iter_mut().enumerate() {
            if (b >> p) & 1 == 1 {
                *a += v;
            } else {
                *a -= v;
            }
        }
    }
    Some(acc)
}

/// Σⱼ bⱼ² where bⱼ bounds how far decoded element j of an aggregate in
/// `codec` is from the value encoded (None where no bound holds: a
/// saturated float, a sparse codec).
pub fn rounding_sq(codec: Codec, decoded: &[f32]) -> Option<f64> {
    let mut sum = 0f64;
    match codec {
        Codec::F32 => {
            for &v in decoded {
                let b = f64::from(v.abs()) * 2f64.powi(-24);
                sum += b * b;
            }
        }
        Codec::F16 | Codec::Bf16 => {
            let (max, bound): (f32, fn(f32) -> f64) = match codec {
                Codec::F16 => (65504.0, f16_bound),
                _ => (half::bf16::MAX.to_f32(), bf16_bound),
            };
            for &v in decoded {
                if v.abs() >= max {
                    return None;
                }
                // The bound at x̂ widened by one relative step covers x.
                let b = bound(v) * (1.0 + 2f64.powi(-7));
                sum += b * b;
            }
        }
        Codec::Int8Block { block } | Codec::Int4Block { block } => {
            let levels = if matches!(codec, Codec::Int8Block { .. }) { 127.0 } else { 7.0 };
            for chunk in decoded.chunks(block.max(1) as usize) {
                // The block's absmax decodes to ±levels·scale: its own
                // absmax to within an f32 step.
                let a = chunk.iter().fold(0f32, |m, v| m.max(v.abs())) * (1.0 + 2f32.powi(-20));
                let b = block_bound(a, levels) + f64::from(a) * 2f64.powi(-22);
                sum += b * b * chunk.len() as f64;
            }
        }
        Codec::TopK { .. } | Codec::TopKMask { .. } => return None,
    }
    Some(sum)
}

/// One included input as the auditor sees it: its coefficient, the
/// projections its trainer returned, and its signed whole-delta norm.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SketchTerm {
    pub coefficient: f64,
    pub projections: [f64; PROJECTIONS],
    pub whole_norm: f32,
}

/// Whether `aggregate` (decoded, in `codec`) agrees with the terms under
/// `signs`. None when the codec gives no rounding bound (the auditor must
/// re-check from the inputs).
pub fn sketch_matches(
    aggregate: &[f32],
    codec: Codec,
    signs: &SketchSigns,
    terms: &[SketchTerm],
) -> Option<bool> {
    let rounding = rounding_sq(codec, aggregate)?.sqrt();
    let seen = project(aggregate, signs)?;
    let n = aggregate.len() as f64;
    // f64 sums of n terms: far below an f32 step of the largest term.
    let mass = terms.iter().fold(0f64, |a, t| a + t.coefficient.abs() * f64::from(t.whole_norm));
    let slack = 1e-9 * (n.sqrt() * mass + aggregate.iter().fold(0f64, |a, v| a + f64::from(v.abs())));
    let bound = TOLERANCE * rounding + slack;
    Some((0..PROJECTIONS).all(|p| {
        let expected = terms.iter().fold(0f64, |a, t| a + t.coefficient * t.projections[p]);
        (seen[p] - expected).abs() <= bound
    }))
}

/// An auditor's verdict on an aggregate (decoded, in `codec`) whose
/// included inputs make these `claims` and returned these `projections`
/// under `seed` (both in included-list order): Some(false) when the list
/// is not one `rule` keeps whole or the projections disagree; None
/// when a sketch cannot tell (a mode that is not linear, a codec with no
/// rounding bound, a length mismatch) and the shard must be re-checked from
/// its inputs.
pub fn verdict(
    aggregate: &[f32],
    codec: Codec,
    rule: ShardRule,
    seed: &[u8; 32],
    claims: &[InputClaim],
    projections: &[[f64; PROJECTIONS]],
) -> Option<bool> {
    if claims.len() != projections.len() {
        return None;
    }
    let coefficients = match rule::check_list(claims, rule)? {
        ListCheck::Coefficients(c) => c,
        ListCheck::NotKeptWhole => return Some(false),
    };
    let terms: Vec<SketchTerm> = coefficients
        .iter()
        .zip(claims.iter().zip(projections))
        .map(|(&coefficient, (c, p))| SketchTerm { coefficient, projections: *p, whole_norm: c.whole_norm })
        .collect();
    sketch_matches(aggregate, codec, &SketchSigns::new(seed, aggregate.len()), &terms)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{decode_delta, encode_delta};

    /// SplitMix64: seeded test values.
    struct StdRng(u64);

    impl StdRng {
        fn seed_from_u64(seed: u64) -> Self {
            Self(seed)
        }

        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }

        /// Uniform on [lo, hi).
        fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
            lo + (hi - lo) * ((self.next() >> 40) as f32 / (1u64 << 24) as f32)
        }
    }

    /// Inputs, their coefficients, and the exact aggregate Σ cᵢ·xᵢ.
    fn shard(rng: &mut StdRng, inputs: usize, len: usize) -> (Vec<Vec<f32>>, Vec<f64>, Vec<f32>) {
        let xs: Vec<Vec<f32>> =
            (0..inputs).map(|_| (0..len).map(|_| rng.uniform(-0.01, 0.01)).collect()).collect();
        let c: Vec<f64> = vec![1.0 / inputs as f64; inputs];
        let a: Vec<f32> = (0..len)
            .map(|j| xs.iter().zip(&c).fold(0f64, |acc, (x, c)| acc + c * f64::from(x[j])) as f32)
            .collect();
        (xs, c, a)
    }

    fn terms(xs: &[Vec<f32>], c: &[f64], signs: &SketchSigns) -> Vec<SketchTerm> {
        xs.iter()
            .zip(c)
            .map(|(x, &c)| SketchTerm {
                coefficient: c,
                projections: project(x, signs).unwrap(),
                whole_norm: crate::committee::shard_norm(x),
            })
            .collect()
    }

    #[test]
    fn an_honest_aggregate_passes_in_every_codec_and_a_lie_does_not() {
        let mut rng = StdRng::seed_from_u64(7);
        let codecs = [
            Codec::F32,
            Codec::F16,
            Codec::Bf16,
            Codec::Int8Block { block: 64 },
            Codec::Int4Block { block: 32 },
        ];
        for (trial, codec) in codecs.iter().cycle().take(40).enumerate() {
            let len = 1 + (rng.next() % 3000) as usize;
            let (xs, c, a) = shard(&mut rng, 1 + trial % 9, len);
            let signs = SketchSigns::new(&[trial as u8; 32], len);
            let t = terms(&xs, &c, &signs);
            let honest = decode_delta(&encode_delta(*codec, &a).unwrap(), *codec, len).unwrap();
            assert_eq!(sketch_matches(&honest, *codec, &signs, &t), Some(true), "{codec:?} len {len}");
            // A lie of a few int4 steps in every coordinate.
            let lie: Vec<f32> = a.iter().map(|v| v + 0.02).collect();
            let lie = decode_delta(&encode_delta(*codec, &lie).unwrap(), *codec, len).unwrap();
            if len >= 256 {
                assert_eq!(sketch_matches(&lie, *codec, &signs, &t), Some(false), "{codec:?} len {len}");
            }
        }
    }

    #[test]
    fn a_lie_in_one_coordinate_is_seen_once_it_outweighs_the_rounding() {
        let mut rng = StdRng::seed_from_u64(9);
        let codec = Codec::Int8Block { block: 64 };
        let len = 4096;
        let (xs, c, a) = shard(&mut rng, 5, len);
        let signs = SketchSigns::new(&[3; 32], len);
        let t = terms(&xs, &c, &signs);
        let mut lie = a.clone();
        lie[17] += 1.0;
        let lie = decode_delta(&encode_delta(codec, &lie).unwrap(), codec, len).unwrap();
        assert_eq!(sketch_matches(&lie, codec, &signs, &t), Some(false));
    }

    #[test]
    fn an_owner_under_a_time_budget_passes_and_a_flat_mean_does_not() {
        use crate::aggregate::Weighting;
        use crate::committee::{aggregate_shard, ShardInput};
        use crate::identity::PublicKey;
        use crate::spec::RobustMode;
        let mut rng = StdRng::seed_from_u64(11);
        let (len, codec) = (2048, Codec::Int8Block { block: 64 });
        // Five trainers with 1×, 2×, 3×, 4×, 5× the steps.
        let xs: Vec<Vec<f32>> =
            (1..=5).map(|s| (0..len).map(|_| s as f32 * rng.uniform(-0.01, 0.01)).collect()).collect();
        let tokens = |i: usize| 1000 * (i as u64 + 1);
        let inputs: Vec<ShardInput<'_>> = (xs.iter().enumerate())
            .map(|(i, x)| ShardInput {
                signer: PublicKey([i as u8; 32]),
                root: [i as u8; 32],
                tokens: tokens(i),
                whole_norm: crate::committee::shard_norm(x),
                shard_norm: crate::committee::shard_norm(x),
                values: x,
            })
            .collect();
        let rule = ShardRule { mode: RobustMode::NormClip { multiple: 2.0 }, weighting: Weighting::PerToken };
        let agg = aggregate_shard(&inputs, len, rule, codec).unwrap();
        assert_eq!(agg.included.len(), 5);
        let claims: Vec<InputClaim> = inputs.iter().map(|d| d.claim()).collect();
        let seed = [5; 32];
        let signs = SketchSigns::new(&seed, len);
        let projections: Vec<[f64; PROJECTIONS]> = xs.iter().map(|x| project(x, &signs).unwrap()).collect();
        assert_eq!(verdict(&agg.values, codec, rule, &seed, &claims, &projections), Some(true));
        // The same inputs combined as in fixed-H rounds are another aggregate.
        let flat = aggregate_shard(&inputs, len, ShardRule::as_trained(rule.mode), codec).unwrap();
        assert_eq!(verdict(&flat.values, codec, rule, &seed, &claims, &projections), Some(false));
    }

    #[test]
    fn signs_depend_on_the_seed_and_are_balanced() {
        let a = SketchSigns::new(&[1; 32], 10_000);
        let b = SketchSigns::new(&[2; 32], 10_000);
        assert_ne!(a, b);
        let ones: u32 = a.bits.iter().map(|b| b.count_ones()).sum();
        let total = 8 * 10_000;
        assert!((ones as f64 / total as f64 - 0.5).abs() < 0.01, "{ones} of {total}");
        assert_eq!(project(&[1.0; 3], &a), None);
        assert_eq!(sketch_matches(&[0.0; 4], Codec::TopK { density_ppm: 1000, block: 64 }, &a, &[]), None);
    }
}
