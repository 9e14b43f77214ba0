//! `murmur bench codecs`: compression ratio, relative L2 error and encode /
//! decode throughput of each delta codec on a synthetic pseudo-gradient.
//!
//! The test delta imitates a real one: zero-mean Gaussian values whose scale
//! changes every 4096 elements by a log-normal factor (tensors and rows of a
//! model move by different amounts), around a typical magnitude of 1e-3.

use std::time::Instant;

use serde::Serialize;

use murmur_protocol::codec::relative_l2_error;
use murmur_protocol::{decode_delta_into, encode_delta, Codec, CodecError};

use crate::model::rng::Rng;

/// Elements per constant-scale stretch of the synthetic delta.
const SCALE_SPAN: usize = 4096;

/// The codecs measured when none are named.
pub const DEFAULT_CODECS: [Codec; 9] = [
    Codec::F32,
    Codec::F16,
    Codec::Bf16,
    Codec::Int8Block { block: 256 },
    Codec::Int4Block { block: 64 },
    Codec::TopK { density_ppm: 100_000, block: 256 },
    Codec::TopK { density_ppm: 50_000, block: 256 },
    Codec::TopK { density_ppm: 10_000, block: 256 },
    Codec::TopKMask { density_ppm: 140_000, block: 256 },
];

/// One codec's figures.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CodecBench {
    pub codec: String,
    pub elements: usize,
    pub payload_bytes: usize,
    /// f32 bytes (4·elements) over payload bytes.
    pub ratio: f64,
    /// ‖decode(encode(x)) − x‖₂ / ‖x‖₂.
    pub rel_l2_error: f64,
    /// f32 input bytes encoded per second, best of the repetitions, in GB/s.
    pub encode_gb_s: f64,
    /// f32 output bytes decoded per second, best of the repetitions, in GB/s.
    pub decode_gb_s: f64,
}

/// A deterministic pseudo-gradient of `n` elements.
pub fn synthetic_delta(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = Rng::new(seed);
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let scale = 1e-3 * (0.5 * rng.normal()).exp();
        let span = SCALE_SPAN.min(n - out.len());
        out.extend((0..span).map(|_| (scale * rng.normal()) as f32));
    }
    out
}

/// Measure `codec` on `delta`, timing the best of `reps` runs.
pub fn bench_codec(codec: Codec, delta: &[f32], reps: usize) -> Result<CodecBench, CodecError> {
    let gb = 4.0 * delta.len() as f64 / 1e9;
    let mut payload = Vec::new();
    let mut best_encode = f64::INFINITY;
    for _ in 0..reps.max(1) {
        let t = Instant::now();
        payload = encode_delta(codec, delta)?;
        best_encode = best_encode.min(t.elapsed().as_secs_f64());
    }
    let mut decoded = vec![0f32; delta.len()];
    let mut best_decode = f64::INFINITY;
    for _ in 0..reps.max(1) {
        let t = Instant::now();
        decode_delta_into(&payload, codec, &mut decoded)?;
        best_decode = best_decode.min(t.elapsed().as_secs_f64());
    }
    Ok(CodecBench {
        codec: codec.name(),
        elements: delta.len(),
        payload_bytes: payload.len(),
        ratio: 4.0 * delta.len() as f64 / payload.len().max(1) as f64,
        rel_l2_error: relative_l2_error(delta, &decoded),
        encode_gb_s: gb / best_encode.max(1e-12),
        decode_gb_s: gb / best_decode.max(1e-12),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthetic_delta_is_seeded_and_gradient_sized() {
        let a = synthetic_delta(10_000, 1);
        assert_eq!(a.len(), 10_000);
        assert_eq!(a, synthetic_delta(10_000, 1));
        let rms = (a.iter().map(|&v| f64::from(v).powi(2)).sum::<f64>() / a.len() as f64).sqrt();
        assert!((1e-4..1e-2).contains(&rms), "rms {rms}");
    }

    #[test]
    fn figures_match_the_codecs_definitions() {
        let delta = synthetic_delta(100_000, 2);
        let exact = bench_codec(Codec::F32, &delta, 1).expect("encodes");
        assert_eq!(exact.rel_l2_error, 0.0);
        assert!(exact.ratio < 1.0 && exact.ratio > 0.99);
        let int8 = bench_codec(Codec::Int8Block { block: 256 }, &delta, 1).expect("encodes");
        assert!(int8.ratio > 3.9 && int8.rel_l2_error < 0.02, "{int8:?}");
        let topk = bench_codec(Codec::TopK { density_ppm: 10_000, block: 256 }, &delta, 1).expect("encodes");
        assert!(topk.ratio > 70.0 && topk.rel_l2_error < 1.0, "{topk:?}");
        assert!(topk.encode_gb_s > 0.0 && topk.decode_gb_s > 0.0);
    }
}
