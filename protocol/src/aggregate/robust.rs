//! The combining rules: token-weighted mean, norm-clipped mean, coordinate-wise
//! trimmed mean and coordinate-wise median. Inputs arrive already validated
//! and sorted; every reduction runs in f64 in input order (or, per
//! coordinate, in sorted-value order), never with fused multiply-add.

/// Median of finite values in f64 (mean of the middle two when even).
pub(crate) fn median_f64(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    match n {
        0 => 0.0,
        _ if n % 2 == 1 => v[n / 2],
        _ => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// L2 norm in f64, summed in index order.
pub(crate) fn l2_norm(x: &[f32]) -> f64 {
    x.iter()
        .fold(0f64, |acc, &v| {
            let v = f64::from(v);
            acc + v * v
        })
        .sqrt()
}

/// Σᵢ wᵢ·sᵢ·xᵢ / Σᵢ wᵢ with wᵢ = tokens (or `weights` when given) and
/// sᵢ = `scales[i]` (1 when absent).
pub(super) fn weighted_mean(values: &[&[f32]], tokens: &[u64], scales: Option<&[f64]>, n: usize) -> Vec<f32> {
    let weights: Vec<f64> = tokens.iter().map(|&t| t as f64).collect();
    weighted_mean_f64(values, &weights, scales, n)
}

fn weighted_mean_f64(values: &[&[f32]], weights: &[f64], scales: Option<&[f64]>, n: usize) -> Vec<f32> {
    let total: f64 = weights.iter().fold(0.0, |a, w| a + w);
    let mut acc = vec![0f64; n];
    for (i, x) in values.iter().enumerate() {
        let w = weights[i] * scales.map_or(1.0, |s| s[i]);
        for (a, &v) in acc.iter_mut().zip(x.iter()) {
            *a += w * f64::from(v);
        }
    }
    acc.into_iter().map(|a| (a / total) as f32).collect()
}

/// Which deltas a norm filter keeps: norm ≤ `multiple` × the median norm
/// (the median itself always passes, so at least half are kept), delta i's
/// bound widened by `allowance[i]` (≥ 1) when given: the noise a per-token
/// rescale stretched (see `rescale_allowance`).
pub(crate) fn within_norm_allowing(norms: &[f64], multiple: f32, allowance: Option<&[f64]>) -> Vec<bool> {
    let threshold = f64::from(multiple) * median_f64(norms.to_vec());
    norms.iter().enumerate().map(|(i, &n)| n <= threshold * allowance.map_or(1.0, |a| a[i])).collect()
}

/// How far the norm bounds of a delta of `tokens`, rescaled by
/// `median / tokens`, are widened: √(median / tokens) when that exceeds 1,
/// else 1. Rescaling stretches a short delta's noise along with its signal,
/// and noise grows with the square root of the steps, so an honest delta of
/// s < median steps is about √(median / s) longer than the median one after
/// the rescale. The widened bound gives no claim more influence: a delta
/// weighted by t ≤ median tokens and bounded by c·M·√(median / t) adds at
/// most c·M·√(t·median) ≤ c·M·median to the weighted sum.
pub(crate) fn rescale_allowance(tokens: u64, median: f64) -> f64 {
    let ratio = median / tokens as f64;
    if ratio > 1.0 {
        ratio.sqrt()
    } else {
        1.0
    }
}

/// Token-weighted mean with weights capped at twice the median token count
/// (a delta cannot buy weight by claiming more tokens).
pub(super) fn capped_weight_mean(values: &[&[f32]], tokens: &[u64], n: usize) -> Vec<f32> {
    let cap = 2.0 * median_f64(tokens.iter().map(|&t| t as f64).collect());
    let weights: Vec<f64> = tokens.iter().map(|&t| (t as f64).min(cap)).collect();
    weighted_mean_f64(values, &weights, None, n)
}

/// Clip every delta's L2 norm to `multiple` × the median norm (times its
/// `allowance`, when given), weight by tokens capped at twice the median
/// token count, and average.
pub(super) fn norm_clipped_mean(
    values: &[&[f32]],
    tokens: &[u64],
    multiple: f32,
    allowance: Option<&[f64]>,
    n: usize,
) -> Vec<f32> {
    let norms: Vec<f64> = values.iter().map(|x| l2_norm(x)).collect();
    let threshold = f64::from(multiple) * median_f64(norms.clone());
    let scales: Vec<f64> = norms
        .iter()
        .enumerate()
        .map(|(i, &norm)| {
            let bound = threshold * allowance.map_or(1.0, |a| a[i]);
            if norm > bound && norm > 0.0 {
                bound / norm
            } else {
                1.0
            }
        })
        .collect();
    let cap = 2.0 * median_f64(tokens.iter().map(|&t| t as f64).collect());
    let weights: Vec<f64> = tokens.iter().map(|&t| (t as f64).min(cap)).collect();
    weighted_mean_f64(values, &weights, Some(&scales), n)
}

/// Per coordinate: sort the values, drop ⌊trim·m⌋ from each end, average the
/// rest (unweighted: claimed token counts are not trusted here).
pub(super) fn trimmed_mean(values: &[&[f32]], trim: f32, n: usize) -> Vec<f32> {
    let m = values.len();
    let mut t = (f64::from(trim) * m as f64).floor() as usize;
    if 2 * t >= m {
        t = (m - 1) / 2;
    }
    let kept = (m - 2 * t) as f64;
    let mut column = vec![0f32; m];
    (0..n)
        .map(|j| {
            for (c, x) in column.iter_mut().zip(values) {
                *c = x[j];
            }
            column.sort_unstable_by(|a, b| a.total_cmp(b));
            let sum = column[t..m - t].iter().fold(0f64, |a, &v| a + f64::from(v));
            (sum / kept) as f32
        })
        .collect()
}

/// Per coordinate median (mean of the middle two, in f64, when m is even).
pub(super) fn median(values: &[&[f32]], n: usize) -> Vec<f32> {
    let m = values.len();
    let mut column = vec![0f32; m];
    (0..n)
        .map(|j| {
            for (c, x) in column.iter_mut().zip(values) {
                *c = x[j];
            }
            column.sort_unstable_by(|a, b| a.total_cmp(b));
            if m % 2 == 1 {
                column[m / 2]
            } else {
                ((f64::from(column[m / 2 - 1]) + f64::from(column[m / 2])) / 2.0) as f32
            }
        })
        .collect()
}
