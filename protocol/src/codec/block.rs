//! Blockwise absmax quantization to int8 or int4.
//!
//! Elements are split into consecutive blocks of `block` (the last may be
//! shorter). Each block stores one f32 scale `s = absmax / L` (L = 127 for
//! int8, 7 for int4; s = 0 for an all-zero block) and per element
//! `q = round(x / s)` clamped to [−L, L]; the decoder returns `q · s`.
//!
//! Body: all block scales (f32 LE), then the values: int8 as one i8 per
//! element; int4 as two's-complement nibbles, element 2i in the low nibble of
//! byte i and 2i+1 in the high nibble (a final unused high nibble is 0).
//!
//! Canonical form, enforced by the decoder: scales finite and not negative
//! (no −0), q ≠ −128 (int8) and nibble ≠ 8 (int4), padding nibble 0, and a
//! zero scale only with all-zero values.
//!
//! Error bound per element x in a block with absmax a:
//! |x̂ − x| ≤ a·(1/(2L) + 2⁻²⁰) + 2⁻¹⁰⁰.

use super::CodecError;

/// Quantization width.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Width {
    Int8,
    Int4,
}

impl Width {
    pub(super) fn levels(self) -> f32 {
        match self {
            Width::Int8 => 127.0,
            Width::Int4 => 7.0,
        }
    }
}

/// The per-element error bound for an element of a block whose absmax is `a`.
pub fn block_bound(a: f32, levels: f32) -> f64 {
    f64::from(a) * (1.0 / (2.0 * f64::from(levels)) + 2f64.powi(-20)) + 2f64.powi(-100)
}

/// The scale for a block with absmax `a`.
pub(super) fn scale_for(a: f32, levels: f32) -> f32 {
    a / levels
}

/// Quantize one value with scale `s` (0 ⇒ 0).
pub(super) fn quantize(x: f32, s: f32, levels: f32) -> i8 {
    if s == 0.0 {
        return 0;
    }
    let q = (x / s).round().clamp(-levels, levels);
    // q is an integer in [-127, 127]: the cast is exact.
    q as i8
}

pub(super) fn absmax(values: &[f32]) -> f32 {
    values.iter().fold(0f32, |m, v| m.max(v.abs()))
}

pub(super) fn encode(values: &[f32], block: u32, width: Width, out: &mut Vec<u8>) {
    let levels = width.levels();
    let b = block.max(1) as usize;
    let scales: Vec<f32> = values.chunks(b).map(|c| scale_for(absmax(c), levels)).collect();
    for s in &scales {
        out.extend_from_slice(&s.to_bits().to_le_bytes());
    }
    let q = values.chunks(b).zip(&scales).flat_map(|(c, &s)| c.iter().map(move |&x| quantize(x, s, levels)));
    match width {
        Width::Int8 => out.extend(q.map(|v| v as u8)),
        Width::Int4 => {
            let mut pending: Option<u8> = None;
            for v in q {
                let nib = (v as u8) & 0x0f;
                match pending.take() {
                    None => pending = Some(nib),
                    Some(lo) => out.push(lo | nib << 4),
                }
            }
            if let Some(lo) = pending {
                out.push(lo);
            }
        }
    }
}

/// Read `count` scales from the start of `body`, checking canonical form.
pub(super) fn read_scales(body: &[u8], count: usize) -> Result<(&[u8], &[u8]), CodecError> {
    let split = count.checked_mul(4).filter(|&n| n <= body.len()).ok_or(CodecError::BodyLength {
        expected: (count as u64).saturating_mul(4),
        found: body.len() as u64,
    })?;
    let (scales, rest) = body.split_at(split);
    for raw in scales.chunks_exact(4) {
        let s = f32::from_le_bytes([raw[0], raw[1], raw[2], raw[3]]);
        if !s.is_finite() || s.is_sign_negative() {
            return Err(CodecError::NonCanonical("block scale must be finite and non-negative"));
        }
    }
    Ok((scales, rest))
}

pub(super) fn scale_at(scales: &[u8], i: usize) -> f32 {
    let raw = &scales[4 * i..4 * i + 4];
    f32::from_le_bytes([raw[0], raw[1], raw[2], raw[3]])
}

/// Dequantize `q` with scale `s`, enforcing the canonical rules.
pub(super) fn dequantize(q: i8, s: f32, width: Width, index: usize) -> Result<f32, CodecError> {
    let limit = width.levels() as i8;
    if q < -limit {
        return Err(CodecError::NonCanonical("quantized value out of range"));
    }
    if s == 0.0 && q != 0 {
        return Err(CodecError::NonCanonical("zero scale with a non-zero value"));
    }
    super::check_decoded(f32::from(q) * s, index)
}

pub(super) fn decode(body: &[u8], block: u32, width: Width, out: &mut [f32]) -> Result<(), CodecError> {
    let b = block.max(1) as usize;
    let (scales, values) = read_scales(body, out.len().div_ceil(b))?;
    match width {
        Width::Int8 => {
            for (i, (slot, &raw)) in out.iter_mut().zip(values).enumerate() {
                *slot = dequantize(raw as i8, scale_at(scales, i / b), width, i)?;
            }
        }
        Width::Int4 => {
            let n = out.len();
            if n % 2 == 1 && values.last().is_some_and(|last| last >> 4 != 0) {
                return Err(CodecError::NonCanonical("int4 padding nibble must be zero"));
            }
            for (i, slot) in out.iter_mut().enumerate() {
                let byte = values.get(i / 2).copied().unwrap_or(0);
                let nib = if i % 2 == 0 { byte & 0x0f } else { byte >> 4 };
                // Sign-extend the nibble.
                let q = ((nib << 4) as i8) >> 4;
                *slot = dequantize(q, scale_at(scales, i / b), width, i)?;
            }
        }
    }
    Ok(())
}
