//! Poisoned updates: what an adversarial worker sends instead of an honest
//! pseudo-gradient.
//!
//! The simulated adversary does not train: delta payloads are public in
//! murmur (fetched by hash from any peer), so it takes an honest delta of the
//! round (adversary j the j-th honest worker's) and corrupts it. Colluding
//! adversaries therefore send different bytes — two signers offering one
//! identical payload are both rejected by aggregation as a hash conflict, which
//! would make the attack trivially harmless. The payload goes through the
//! run's codec like any other, so what honest nodes decode is exactly what a
//! real attacker could put on the wire.

use serde::Serialize;

use murmur_protocol::{encode_delta, Codec, CodecError, DeltaPayloadHeader};

use crate::model::rng::Rng;

/// The sign-flip attack's factor.
pub const SIGN_FLIP_FACTOR: f32 = -10.0;
/// The scaling attack's factor.
pub const SCALE_FACTOR: f32 = 100.0;
/// The noise attack's standard deviation, in units of the honest delta's RMS.
pub const NOISE_RMS_MULTIPLE: f64 = 10.0;

/// One kind of poisoned update.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Attack {
    /// −10 × the honest update: pushes the model uphill.
    SignFlip,
    /// Gaussian noise, standard deviation 10 × the honest update's RMS.
    Noise,
    /// A payload of the right length whose floats and scales are all NaN.
    Nan,
    /// 100 × the honest update: overshoots by two orders of magnitude.
    Scale,
}

impl Attack {
    pub fn name(self) -> &'static str {
        match self {
            Attack::SignFlip => "sign-flip",
            Attack::Noise => "noise",
            Attack::Nan => "nan",
            Attack::Scale => "scale",
        }
    }
}

/// The payload an adversary sends, given the honest delta it corrupts.
/// `rng` drives the noise attack.
pub fn poisoned_payload(
    attack: Attack,
    codec: Codec,
    honest: &[f32],
    rng: &mut Rng,
) -> Result<Vec<u8>, CodecError> {
    match attack {
        Attack::SignFlip => encode_delta(codec, &scaled(honest, SIGN_FLIP_FACTOR)),
        Attack::Scale => encode_delta(codec, &scaled(honest, SCALE_FACTOR)),
        Attack::Noise => {
            let sigma = NOISE_RMS_MULTIPLE * rms(honest);
            let noise: Vec<f32> = honest.iter().map(|_| (sigma * rng.normal()) as f32).collect();
            encode_delta(codec, &noise)
        }
        Attack::Nan => Ok(nan_payload(codec, honest.len())),
    }
}

fn scaled(x: &[f32], factor: f32) -> Vec<f32> {
    x.iter().map(|v| v * factor).collect()
}

fn rms(x: &[f32]) -> f64 {
    if x.is_empty() {
        return 0.0;
    }
    (x.iter().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>() / x.len() as f64).sqrt()
}

/// A well-formed header and a body of the right length made of 0xFF bytes:
/// NaN for every float codec and every block scale, and out-of-range indices
/// for top-k. The encoder refuses NaN, so an attacker crafts the bytes.
fn nan_payload(codec: Codec, n: usize) -> Vec<u8> {
    let mut out = DeltaPayloadHeader { codec, element_count: n as u64 }.encode();
    let body = codec.body_len(n as u64).and_then(|b| usize::try_from(b).ok()).unwrap_or(0);
    out.resize(out.len() + body, 0xFF);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use murmur_protocol::decode_delta;

    const CODECS: [Codec; 7] = [
        Codec::F32,
        Codec::F16,
        Codec::Bf16,
        Codec::Int8Block { block: 256 },
        Codec::Int4Block { block: 64 },
        Codec::TopK { density_ppm: 100_000, block: 256 },
        Codec::TopKMask { density_ppm: 140_000, block: 256 },
    ];

    fn honest() -> Vec<f32> {
        (0..1000).map(|i| ((i as f32) * 0.37).sin() * 1e-3).collect()
    }

    #[test]
    fn nan_payloads_have_the_right_length_and_never_decode() {
        for codec in CODECS {
            let p = poisoned_payload(Attack::Nan, codec, &honest(), &mut Rng::new(1)).expect("crafted");
            assert_eq!(Some(p.len() as u64), codec.payload_len(1000), "{codec:?}");
            assert!(decode_delta(&p, codec, 1000).is_err(), "{codec:?} decoded a NaN payload");
        }
    }

    #[test]
    fn sign_flip_and_scale_multiply_the_honest_update() {
        let h = honest();
        let flip = poisoned_payload(Attack::SignFlip, Codec::F32, &h, &mut Rng::new(1)).expect("finite");
        let scale = poisoned_payload(Attack::Scale, Codec::F32, &h, &mut Rng::new(1)).expect("finite");
        let flip = decode_delta(&flip, Codec::F32, h.len()).expect("valid");
        let scale = decode_delta(&scale, Codec::F32, h.len()).expect("valid");
        for i in 0..h.len() {
            assert_eq!(flip[i], h[i] * -10.0);
            assert_eq!(scale[i], h[i] * 100.0);
        }
    }

    #[test]
    fn noise_is_large_and_seeded() {
        let h = honest();
        let a = poisoned_payload(Attack::Noise, Codec::F32, &h, &mut Rng::new(5)).expect("finite");
        let b = poisoned_payload(Attack::Noise, Codec::F32, &h, &mut Rng::new(5)).expect("finite");
        assert_eq!(a, b);
        let noise = decode_delta(&a, Codec::F32, h.len()).expect("valid");
        let ratio = rms(&noise) / rms(&h);
        assert!((8.0..12.0).contains(&ratio), "noise RMS is {ratio}× the honest RMS");
    }
}
