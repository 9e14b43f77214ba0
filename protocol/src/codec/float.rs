//! Plain float codecs: f32 (exact), f16 and bf16 (round to nearest even,
//! saturating to the format's largest finite value).
//!
//! Error bounds, per element x (finite):
//! - f32:  0.
//! - f16:  |x̂ − x| ≤ 2⁻¹¹·|x| + 2⁻²⁵ + max(0, |x| − 65504).
//! - bf16: |x̂ − x| ≤ 2⁻⁸·|x| + 2⁻¹³³ + max(0, |x| − bf16::MAX).
//!
//! Bodies are the values little-endian, in order; decoders reject any value
//! that decodes to NaN, ±∞ or beyond ±2⁶⁴.

use super::{check_decoded, CodecError};
use half::{bf16, f16};

pub(super) fn encode_f32(values: &[f32], out: &mut Vec<u8>) {
    for v in values {
        out.extend_from_slice(&v.to_bits().to_le_bytes());
    }
}

pub(super) fn decode_f32(body: &[u8], out: &mut [f32]) -> Result<(), CodecError> {
    for (i, (slot, raw)) in out.iter_mut().zip(body.chunks_exact(4)).enumerate() {
        let v = f32::from_le_bytes([raw[0], raw[1], raw[2], raw[3]]);
        *slot = check_decoded(v, i)?;
    }
    Ok(())
}

pub(super) fn encode_f16(values: &[f32], out: &mut Vec<u8>) {
    let max = f16::MAX.to_f32();
    for v in values {
        let h = f16::from_f32(v.clamp(-max, max));
        out.extend_from_slice(&h.to_bits().to_le_bytes());
    }
}

pub(super) fn decode_f16(body: &[u8], out: &mut [f32]) -> Result<(), CodecError> {
    for (i, (slot, raw)) in out.iter_mut().zip(body.chunks_exact(2)).enumerate() {
        let v = f16::from_bits(u16::from_le_bytes([raw[0], raw[1]])).to_f32();
        *slot = check_decoded(v, i)?;
    }
    Ok(())
}

pub(super) fn encode_bf16(values: &[f32], out: &mut Vec<u8>) {
    let max = bf16::MAX.to_f32();
    for v in values {
        let h = bf16::from_f32(v.clamp(-max, max));
        out.extend_from_slice(&h.to_bits().to_le_bytes());
    }
}

pub(super) fn decode_bf16(body: &[u8], out: &mut [f32]) -> Result<(), CodecError> {
    for (i, (slot, raw)) in out.iter_mut().zip(body.chunks_exact(2)).enumerate() {
        let v = bf16::from_bits(u16::from_le_bytes([raw[0], raw[1]])).to_f32();
        *slot = check_decoded(v, i)?;
    }
    Ok(())
}

/// The stated per-element error bound of f16 for input `x`.
pub fn f16_bound(x: f32) -> f64 {
    let a = f64::from(x.abs());
    a * 2f64.powi(-11) + 2f64.powi(-25) + (a - 65504.0).max(0.0)
}

/// The stated per-element error bound of bf16 for input `x`.
pub fn bf16_bound(x: f32) -> f64 {
    let a = f64::from(x.abs());
    a * 2f64.powi(-8) + 2f64.powi(-133) + (a - f64::from(bf16::MAX.to_f32())).max(0.0)
}
