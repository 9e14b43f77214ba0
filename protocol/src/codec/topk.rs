//! Top-k sparsification with int8 values.
//!
//! Keeps the k = ⌈n · density_ppm / 10⁶⌉ elements of largest magnitude (ties
//! broken toward the lower index, so the choice is deterministic), and sends
//! them as strictly increasing u32 indices plus int8 values quantized with one
//! absmax scale per `block` kept values (see `block`).
//!
//! Body: k indices (u32 LE, strictly increasing, < n), ⌈k/block⌉ scales
//! (f32 LE), k values (i8). Everything not listed decodes to 0.
//!
//! Error bound: a kept element obeys the int8 block bound of its value block;
//! a dropped element x has |x̂ − x| = |x| ≤ τ, the smallest kept magnitude.
//! Pair it with [`super::ErrorFeedback`] so dropped mass is sent later.

use super::block::{self, Width};
use super::{CodecError, PPM};
use std::cmp::Ordering;

/// How many elements top-k keeps out of `n` at `density_ppm` (at least one
/// when n > 0, never more than n).
pub fn topk_count(n: u64, density_ppm: u32) -> u64 {
    let k = (u128::from(n) * u128::from(density_ppm)).div_ceil(u128::from(PPM));
    u64::try_from(k).unwrap_or(u64::MAX).min(n)
}

/// Magnitude-descending, index-ascending: a total order, so the kept set does
/// not depend on the selection algorithm.
fn by_magnitude(values: &[f32], a: u32, b: u32) -> Ordering {
    let (x, y) = (values[a as usize].abs(), values[b as usize].abs());
    y.total_cmp(&x).then(a.cmp(&b))
}

/// The kept indices, ascending.
pub(super) fn select(values: &[f32], density_ppm: u32) -> Vec<u32> {
    let k = topk_count(values.len() as u64, density_ppm) as usize;
    // values.len() ≤ MAX_ELEMENTS = 2³¹ was checked by the caller.
    let mut idx: Vec<u32> = (0..values.len() as u32).collect();
    if k == 0 {
        return Vec::new();
    }
    if k < idx.len() {
        idx.select_nth_unstable_by(k - 1, |&a, &b| by_magnitude(values, a, b));
        idx.truncate(k);
    }
    idx.sort_unstable();
    idx
}

pub(super) fn encode(values: &[f32], density_ppm: u32, block: u32, out: &mut Vec<u8>) {
    let kept = select(values, density_ppm);
    for i in &kept {
        out.extend_from_slice(&i.to_le_bytes());
    }
    let picked: Vec<f32> = kept.iter().map(|&i| values[i as usize]).collect();
    let b = block.max(1) as usize;
    let scales: Vec<f32> = picked.chunks(b).map(|c| block::scale_for(block::absmax(c), 127.0)).collect();
    for s in &scales {
        out.extend_from_slice(&s.to_bits().to_le_bytes());
    }
    for (j, &x) in picked.iter().enumerate() {
        out.push(block::quantize(x, scales[j / b], 127.0) as u8);
    }
}

pub(super) fn decode(body: &[u8], k: usize, block: u32, out: &mut [f32]) -> Result<(), CodecError> {
    // The caller checked body.len() == 5k + 4⌈k/block⌉.
    let b = block.max(1) as usize;
    if body.len() < 4 * k {
        return Err(CodecError::NonCanonical("top-k body shorter than its indices"));
    }
    let (indices, rest) = body.split_at(4 * k);
    let (scales, values) = block::read_scales(rest, k.div_ceil(b))?;
    out.fill(0.0);
    let mut prev: Option<u32> = None;
    for (j, (raw, &q)) in indices.chunks_exact(4).zip(values).enumerate() {
        let i = u32::from_le_bytes([raw[0], raw[1], raw[2], raw[3]]);
        if prev.is_some_and(|p| i <= p) {
            return Err(CodecError::NonCanonical("top-k indices must strictly increase"));
        }
        prev = Some(i);
        let slot = out.get_mut(i as usize).ok_or(CodecError::NonCanonical("top-k index out of range"))?;
        *slot = block::dequantize(q as i8, block::scale_at(scales, j / b), Width::Int8, i as usize)?;
    }
    Ok(())
}
