//! Chunked top-k with int4 values: the sparse codec whose index costs one
//! byte.
//!
//! Elements are split into consecutive chunks of `chunk` ≤ 256 (the last may
//! be shorter). From each chunk of length c the min(keep, c) elements of
//! largest magnitude are kept (ties toward the lower offset), and sent as u8
//! offsets within the chunk plus int4 values quantized with one absmax scale
//! per chunk (`s = a / 7`, a = the chunk's largest magnitude, which is always
//! kept). Every chunk keeps the same share of its elements, so each tensor of
//! the model gets its share of the budget.
//!
//! Body: one f32 scale per chunk, then every chunk's offsets (u8, strictly
//! increasing within the chunk, < c), then all kept values as int4 nibbles in
//! the same order (two per byte, low nibble first, a final unused high nibble
//! 0). Everything not listed decodes to 0.
//!
//! Error bound: a kept element obeys the Int4Block bound with its chunk's
//! absmax; a dropped element x has |x̂ − x| = |x| ≤ τ_c, the smallest kept
//! magnitude of its chunk. Pair it with [`super::ErrorFeedback`].

use super::block::{self, Width};
use super::CodecError;
use std::cmp::Ordering;

/// Largest chunk: offsets must fit in one byte.
pub const MAX_CHUNK: u32 = 256;

/// Total kept elements for `n` elements: `keep` per full chunk plus
/// min(keep, length of the last chunk).
pub fn chunk_topk_count(n: u64, chunk: u32, keep: u32) -> u64 {
    let (c, k) = (u64::from(chunk.max(1)), u64::from(keep));
    (n / c) * k.min(c) + (n % c).min(k)
}

/// The kept offsets of one chunk, ascending.
pub(super) fn select(chunk: &[f32], keep: usize) -> Vec<u8> {
    let k = keep.min(chunk.len());
    // chunk.len() ≤ MAX_CHUNK = 256, so every offset fits a u8.
    let mut idx: Vec<u8> = (0..chunk.len()).map(|i| i as u8).collect();
    if k == 0 {
        return Vec::new();
    }
    let order = |a: &u8, b: &u8| -> Ordering {
        let (x, y) = (chunk[usize::from(*a)].abs(), chunk[usize::from(*b)].abs());
        y.total_cmp(&x).then(a.cmp(b))
    };
    if k < idx.len() {
        idx.select_nth_unstable_by(k - 1, order);
        idx.truncate(k);
    }
    idx.sort_unstable();
    idx
}

pub(super) fn encode(values: &[f32], chunk: u32, keep: u32, out: &mut Vec<u8>) {
    let (c, k) = (chunk.max(1) as usize, keep as usize);
    let levels = Width::Int4.levels();
    let mut offsets = Vec::new();
    let mut quantized = Vec::new();
    for part in values.chunks(c) {
        let s = block::scale_for(block::absmax(part), levels);
        out.extend_from_slice(&s.to_bits().to_le_bytes());
        for o in select(part, k) {
            offsets.push(o);
            quantized.push(block::quantize(part[usize::from(o)], s, levels));
        }
    }
    out.extend_from_slice(&offsets);
    for pair in quantized.chunks(2) {
        let lo = (pair[0] as u8) & 0x0f;
        let hi = pair.get(1).map_or(0, |&q| (q as u8) & 0x0f);
        out.push(lo | hi << 4);
    }
}

pub(super) fn decode(body: &[u8], chunk: u32, keep: u32, out: &mut [f32]) -> Result<(), CodecError> {
    // The caller checked body.len() == body_len(n); the splits below re-check.
    let (c, k) = (chunk.max(1) as usize, keep as usize);
    let kept = usize::try_from(chunk_topk_count(out.len() as u64, chunk, keep))
        .map_err(|_| CodecError::TooManyElements(out.len() as u64))?;
    let (scales, rest) = block::read_scales(body, out.len().div_ceil(c))?;
    if rest.len() < kept {
        return Err(CodecError::NonCanonical("chunked top-k body shorter than its offsets"));
    }
    let (offsets, nibbles) = rest.split_at(kept);
    if kept % 2 == 1 && nibbles.last().is_some_and(|last| last >> 4 != 0) {
        return Err(CodecError::NonCanonical("int4 padding nibble must be zero"));
    }
    out.fill(0.0);
    let mut j = 0usize;
    for (ci, part) in out.chunks_mut(c).enumerate() {
        let s = block::scale_at(scales, ci);
        let mut prev: Option<u8> = None;
        for _ in 0..k.min(part.len()) {
            let o = offsets[j];
            if prev.is_some_and(|p| o <= p) {
                return Err(CodecError::NonCanonical("chunked top-k offsets must strictly increase"));
            }
            prev = Some(o);
            let byte = nibbles.get(j / 2).copied().unwrap_or(0);
            let nib = if j % 2 == 0 { byte & 0x0f } else { byte >> 4 };
            // Sign-extend the nibble.
            let q = ((nib << 4) as i8) >> 4;
            let index = ci * c + usize::from(o);
            let slot = part
                .get_mut(usize::from(o))
                .ok_or(CodecError::NonCanonical("chunked top-k offset past its chunk"))?;
            *slot = block::dequantize(q, s, Width::Int4, index)?;
            j += 1;
        }
    }
    Ok(())
}
