//! Error feedback: the residual a sender keeps so that what a lossy codec
//! dropped this round is sent in a later one.
//!
//! `encode` sends `c = delta + residual` and keeps `residual ← c − decode(encode(c))`.
//! The residual is local state of one node; it never goes on the wire.

use super::{decode_delta_into, encode_delta, Codec, CodecError};

/// The sender-side residual for one model's pseudo-gradients.
#[derive(Debug, Clone, PartialEq)]
pub struct ErrorFeedback {
    residual: Vec<f32>,
}

impl ErrorFeedback {
    /// A zero residual for `elements` parameters.
    pub fn new(elements: usize) -> Self {
        Self { residual: vec![0.0; elements] }
    }

    /// Restore a residual saved earlier (e.g. across a restart).
    pub fn from_residual(residual: Vec<f32>) -> Self {
        Self { residual }
    }

    pub fn residual(&self) -> &[f32] {
        &self.residual
    }

    /// Forget the residual (after a re-sync, it refers to a stale base).
    pub fn reset(&mut self) {
        self.residual.fill(0.0);
    }

    /// Encode `delta + residual` with `codec` and keep the new residual.
    /// On error the residual is unchanged.
    pub fn encode(&mut self, codec: Codec, delta: &[f32]) -> Result<Vec<u8>, CodecError> {
        if delta.len() != self.residual.len() {
            return Err(CodecError::WrongLength {
                expected: self.residual.len() as u64,
                found: delta.len() as u64,
            });
        }
        let corrected: Vec<f32> = delta.iter().zip(&self.residual).map(|(d, r)| d + r).collect();
        let payload = encode_delta(codec, &corrected)?;
        let mut decoded = vec![0f32; corrected.len()];
        decode_delta_into(&payload, codec, &mut decoded)?;
        for ((r, c), d) in self.residual.iter_mut().zip(&corrected).zip(&decoded) {
            *r = c - d;
        }
        Ok(payload)
    }

    /// Encode `delta + residual` cut into `ranges` (each encoded on its own,
    /// as the round's shards are) and keep the new residual. On error the
    /// residual is unchanged.
    pub fn encode_ranges(
        &mut self,
        codec: Codec,
        delta: &[f32],
        ranges: &[std::ops::Range<usize>],
    ) -> Result<Vec<Vec<u8>>, CodecError> {
        let n = self.residual.len();
        if delta.len() != n || ranges.iter().any(|r| r.end > n || r.start > r.end) {
            return Err(CodecError::WrongLength { expected: n as u64, found: delta.len() as u64 });
        }
        let corrected: Vec<f32> = delta.iter().zip(&self.residual).map(|(d, r)| d + r).collect();
        let mut decoded = corrected.clone();
        let mut payloads = Vec::with_capacity(ranges.len());
        for r in ranges {
            let payload = encode_delta(codec, &corrected[r.clone()])?;
            decode_delta_into(&payload, codec, &mut decoded[r.clone()])?;
            payloads.push(payload);
        }
        for ((r, c), d) in self.residual.iter_mut().zip(&corrected).zip(&decoded) {
            *r = c - d;
        }
        Ok(payloads)
    }
}
