//! Training states: S_r = (round r, parameters θ_r, outer momentum m_r), their
//! canonical bytes (the state payload a joining node fetches) and StateId.
//!
//! Layout: `[version][type=4] run(32) round(u64) element_count(u64)
//! has_momentum(u8 0|1)` then θ as element_count f32 LE, then m likewise
//! when present. StateId = blake3 (state-id domain) of exactly these bytes,
//! computed streaming so no copy of the parameters is made.

use crate::hash::{ParamsId, RunId, StateId, DOMAIN_PARAMS_ID, DOMAIN_STATE_ID};
use crate::wire::{MessageType, Reader, WireError, Writer, MAX_ELEMENTS};

/// Bytes before the parameters.
pub const STATE_HEADER_LEN: usize = 2 + 32 + 8 + 8 + 1;

/// The header of a state payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateHeader {
    pub run: RunId,
    pub round: u64,
    pub element_count: u64,
    pub has_momentum: bool,
}

impl StateHeader {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::message(MessageType::StatePayload);
        w.bytes(&self.run.0);
        w.u64(self.round);
        w.u64(self.element_count);
        w.bool(self.has_momentum);
        w.finish()
    }

    /// Parse the header at the start of a state payload.
    pub fn decode_prefix(bytes: &[u8]) -> Result<Self, WireError> {
        let mut r = Reader::message(bytes, MessageType::StatePayload)?;
        let h = StateHeader {
            run: RunId(r.array()?),
            round: r.u64()?,
            element_count: r.u64()?,
            has_momentum: r.bool("has_momentum")?,
        };
        if h.element_count > MAX_ELEMENTS {
            return Err(WireError::TooLong {
                field: "element_count",
                len: h.element_count,
                cap: MAX_ELEMENTS,
            });
        }
        Ok(h)
    }

    /// Total payload bytes this header announces.
    pub fn payload_len(&self) -> u64 {
        let copies = if self.has_momentum { 2 } else { 1 };
        STATE_HEADER_LEN as u64 + 4 * copies * self.element_count
    }
}

/// A full training state.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainingState {
    pub run: RunId,
    pub round: u64,
    pub params: Vec<f32>,
    /// Present exactly when the outer optimizer keeps momentum; same length
    /// as `params`.
    pub momentum: Option<Vec<f32>>,
}

fn header_of(run: RunId, round: u64, params: &[f32], momentum: Option<&[f32]>) -> StateHeader {
    StateHeader { run, round, element_count: params.len() as u64, has_momentum: momentum.is_some() }
}

fn put_floats(values: &[f32], mut sink: impl FnMut(&[u8])) {
    // 64 KiB pieces: large enough for blake3's widest SIMD batches.
    let mut buf = vec![0u8; 65536];
    for chunk in values.chunks(16384) {
        for (dst, v) in buf.chunks_exact_mut(4).zip(chunk) {
            dst.copy_from_slice(&v.to_bits().to_le_bytes());
        }
        sink(&buf[..4 * chunk.len()]);
    }
}

/// StateId of (run, round, θ, m) without materialising the bytes.
pub fn state_id(run: RunId, round: u64, params: &[f32], momentum: Option<&[f32]>) -> StateId {
    let mut h = blake3::Hasher::new_derive_key(DOMAIN_STATE_ID);
    h.update(&header_of(run, round, params, momentum).encode());
    put_floats(params, |b| {
        h.update(b);
    });
    if let Some(m) = momentum {
        put_floats(m, |b| {
            h.update(b);
        });
    }
    StateId(*h.finalize().as_bytes())
}

/// ParamsId of θ: its f32 little-endian bytes alone, without run, round or
/// momentum, so the same model has the same ParamsId in every run.
pub fn params_id(params: &[f32]) -> ParamsId {
    let mut h = blake3::Hasher::new_derive_key(DOMAIN_PARAMS_ID);
    put_floats(params, |b| {
        h.update(b);
    });
    ParamsId(*h.finalize().as_bytes())
}

impl TrainingState {
    pub fn id(&self) -> StateId {
        state_id(self.run, self.round, &self.params, self.momentum.as_deref())
    }

    /// The canonical bytes. A momentum whose length differs from the
    /// parameters' is written as is and will not decode.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = header_of(self.run, self.round, &self.params, self.momentum.as_deref()).encode();
        put_floats(&self.params, |b| out.extend_from_slice(b));
        if let Some(m) = &self.momentum {
            put_floats(m, |b| out.extend_from_slice(b));
        }
        out
    }

    /// Parse a state payload that must hold exactly `expected_elements`
    /// parameters (the caller's model size). All values must be finite.
    pub fn decode(bytes: &[u8], expected_elements: usize) -> Result<Self, WireError> {
        let h = StateHeader::decode_prefix(bytes)?;
        if h.element_count != expected_elements as u64 {
            return Err(WireError::Invalid {
                field: "element_count",
                why: "does not match the model's parameter count",
            });
        }
        if h.payload_len() != bytes.len() as u64 {
            return if h.payload_len() > bytes.len() as u64 {
                Err(WireError::Truncated {
                    offset: bytes.len(),
                    needed: usize::try_from(h.payload_len() - bytes.len() as u64).unwrap_or(usize::MAX),
                })
            } else {
                Err(WireError::TrailingBytes(
                    usize::try_from(bytes.len() as u64 - h.payload_len()).unwrap_or(usize::MAX),
                ))
            };
        }
        let mut r = Reader::new(bytes);
        r.take(STATE_HEADER_LEN)?;
        let mut read = |field: &'static str| -> Result<Vec<f32>, WireError> {
            let mut v = Vec::with_capacity(expected_elements);
            for _ in 0..expected_elements {
                v.push(r.f32(field)?);
            }
            Ok(v)
        };
        let params = read("params")?;
        let momentum = if h.has_momentum { Some(read("momentum")?) } else { None };
        Ok(TrainingState { run: h.run, round: h.round, params, momentum })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> TrainingState {
        TrainingState {
            run: RunId([1; 32]),
            round: 3,
            params: (0..3000).map(|i| i as f32 * 0.001 - 1.0).collect(),
            momentum: Some(vec![0.5; 3000]),
        }
    }

    #[test]
    fn round_trips_and_id_matches_bytes() {
        let s = sample();
        let bytes = s.encode();
        assert_eq!(bytes.len() as u64, StateHeader::decode_prefix(&bytes).expect("header").payload_len());
        let back = TrainingState::decode(&bytes, 3000).expect("decodes");
        assert_eq!(back, s);
        assert_eq!(back.encode(), bytes);
        assert_eq!(s.id().0, crate::hash::domain_hash(DOMAIN_STATE_ID, &bytes));
    }

    #[test]
    fn every_component_changes_the_id() {
        let s = sample();
        let mut t = sample();
        t.round = 4;
        assert_ne!(s.id(), t.id());
        let mut t = sample();
        t.params[2999] = f32::from_bits(t.params[2999].to_bits() ^ 1);
        assert_ne!(s.id(), t.id());
        let mut t = sample();
        t.momentum = None;
        assert_ne!(s.id(), t.id());
    }

    #[test]
    fn wrong_sizes_and_values_are_rejected() {
        let bytes = sample().encode();
        assert!(matches!(TrainingState::decode(&bytes, 2999), Err(WireError::Invalid { .. })));
        assert!(matches!(
            TrainingState::decode(&bytes[..bytes.len() - 1], 3000),
            Err(WireError::Truncated { .. })
        ));
        let mut long = bytes.clone();
        long.push(0);
        assert!(matches!(TrainingState::decode(&long, 3000), Err(WireError::TrailingBytes(1))));
        let mut nan = bytes.clone();
        nan[STATE_HEADER_LEN..STATE_HEADER_LEN + 4].copy_from_slice(&f32::NAN.to_bits().to_le_bytes());
        assert!(matches!(TrainingState::decode(&nan, 3000), Err(WireError::NonFinite { .. })));
    }
}
