//! Pseudo-gradient codecs: the `Codec` a run uses, the delta payload format
//! (header + codec body), and the public encode/decode entry points.
//!
//! A delta payload is `DeltaPayloadHeader` bytes followed by the codec's body.
//! Its length is a pure function of (codec, element count), so a manifest can
//! be checked before a single payload byte is fetched. Decoders are total:
//! they take the element count the caller expects (its model's size), so they
//! never allocate more than the caller asked for, whatever the bytes say.

mod block;
mod feedback;
mod float;
mod topk;
mod topk_mask;

pub use block::block_bound;
pub use feedback::ErrorFeedback;
pub use float::{bf16_bound, f16_bound};
pub use topk::topk_count;

use crate::wire::{MessageType, Reader, WireError, Writer, MAX_ELEMENTS};
use thiserror::Error;

/// Largest quantization block (elements per absmax scale).
pub const MAX_BLOCK: u32 = 1 << 16;
/// Largest |value| `encode_delta` accepts (2⁶⁴): far beyond any sane
/// pseudo-gradient, and small enough that no quantized codec can overflow.
pub const MAX_ABS_VALUE: f32 = 18_446_744_073_709_551_616.0;
/// Parts-per-million denominator of [`Codec::TopK`]'s density.
pub const PPM: u32 = 1_000_000;
/// Length in bytes of an encoded delta payload header for `codec`.
pub fn header_len(codec: Codec) -> usize {
    2 + codec.wire_len() + 8
}

/// How a pseudo-gradient is compressed on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Codec {
    /// Raw f32 little-endian. Exact.
    F32,
    /// IEEE half precision, round to nearest even, saturating at ±65504.
    F16,
    /// bfloat16, round to nearest even, saturating at ±bf16::MAX.
    Bf16,
    /// Signed int8 per element with one f32 absmax scale per `block` elements.
    Int8Block { block: u32 },
    /// Signed 4-bit per element (two per byte) with one f32 scale per `block`.
    Int4Block { block: u32 },
    /// The `density_ppm` parts-per-million largest-magnitude elements, as u32
    /// indices plus int8 values with one scale per `block` kept values.
    TopK { density_ppm: u32, block: u32 },
    /// The same kept elements as `TopK`, marked in a bit mask (one bit per
    /// element) with int4 values, one scale per `block` kept values.
    TopKMask { density_ppm: u32, block: u32 },
}

/// Why a delta could not be encoded or decoded.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CodecError {
    #[error("malformed payload: {0}")]
    Wire(#[from] WireError),
    #[error("element {index} is not finite")]
    NonFinite { index: usize },
    #[error("element {index} exceeds the encodable magnitude {MAX_ABS_VALUE:e}")]
    OutOfRange { index: usize },
    #[error("payload uses codec {found:?}, expected {expected:?}")]
    WrongCodec { expected: Codec, found: Codec },
    #[error("payload has {found} elements, expected {expected}")]
    WrongLength { expected: u64, found: u64 },
    #[error("payload body is {found} bytes, codec and length require {expected}")]
    BodyLength { expected: u64, found: u64 },
    #[error("too many elements: {0} (cap {MAX_ELEMENTS})")]
    TooManyElements(u64),
    #[error("non-canonical codec body: {0}")]
    NonCanonical(&'static str),
}

impl Codec {
    /// Short stable name, for logs, CLI flags and benchmarks.
    pub fn name(&self) -> String {
        match *self {
            Codec::F32 => "f32".into(),
            Codec::F16 => "f16".into(),
            Codec::Bf16 => "bf16".into(),
            Codec::Int8Block { block } => format!("int8-b{block}"),
            Codec::Int4Block { block } => format!("int4-b{block}"),
            Codec::TopK { density_ppm, block } => format!("topk-{density_ppm}ppm-b{block}"),
            Codec::TopKMask { density_ppm, block } => format!("topkmask-{density_ppm}ppm-b{block}"),
        }
    }

    fn wire_len(&self) -> usize {
        match self {
            Codec::F32 | Codec::F16 | Codec::Bf16 => 1,
            Codec::Int8Block { .. } | Codec::Int4Block { .. } => 5,
            Codec::TopK { .. } | Codec::TopKMask { .. } => 9,
        }
    }

    /// Append the codec's canonical encoding: a tag byte and its parameters.
    pub fn write(&self, w: &mut Writer) {
        match *self {
            Codec::F32 => w.u8(0),
            Codec::F16 => w.u8(1),
            Codec::Bf16 => w.u8(2),
            Codec::Int8Block { block } => {
                w.u8(3);
                w.u32(block);
            }
            Codec::Int4Block { block } => {
                w.u8(4);
                w.u32(block);
            }
            Codec::TopK { density_ppm, block } => {
                w.u8(5);
                w.u32(density_ppm);
                w.u32(block);
            }
            Codec::TopKMask { density_ppm, block } => {
                w.u8(6);
                w.u32(density_ppm);
                w.u32(block);
            }
        }
    }

    /// Read and validate a codec (block in 1..=MAX_BLOCK, density in 1..=PPM).
    pub fn read(r: &mut Reader<'_>) -> Result<Self, WireError> {
        fn block(r: &mut Reader<'_>) -> Result<u32, WireError> {
            let b = r.u32()?;
            if b == 0 || b > MAX_BLOCK {
                return Err(WireError::Invalid { field: "codec.block", why: "must be in 1..=65536" });
            }
            Ok(b)
        }
        Ok(match r.u8()? {
            0 => Codec::F32,
            1 => Codec::F16,
            2 => Codec::Bf16,
            3 => Codec::Int8Block { block: block(r)? },
            4 => Codec::Int4Block { block: block(r)? },
            tag @ (5 | 6) => {
                let density_ppm = r.u32()?;
                if density_ppm == 0 || density_ppm > PPM {
                    return Err(WireError::Invalid {
                        field: "codec.density_ppm",
                        why: "must be in 1..=1000000",
                    });
                }
                let block = block(r)?;
                if tag == 5 {
                    Codec::TopK { density_ppm, block }
                } else {
                    Codec::TopKMask { density_ppm, block }
                }
            }
            tag => return Err(WireError::BadTag { field: "codec", tag }),
        })
    }

    /// Whether the parameters are in range (what `read` accepts).
    pub fn is_valid(&self) -> bool {
        let ok_block = |b: u32| (1..=MAX_BLOCK).contains(&b);
        match *self {
            Codec::F32 | Codec::F16 | Codec::Bf16 => true,
            Codec::Int8Block { block } | Codec::Int4Block { block } => ok_block(block),
            Codec::TopK { density_ppm, block } | Codec::TopKMask { density_ppm, block } => {
                ok_block(block) && (1..=PPM).contains(&density_ppm)
            }
        }
    }

    /// Body bytes for `n` elements, or `None` past the element cap or for
    /// invalid parameters.
    pub fn body_len(&self, n: u64) -> Option<u64> {
        if n > MAX_ELEMENTS || !self.is_valid() {
            return None;
        }
        let blocks = |count: u64, b: u32| count.div_ceil(u64::from(b));
        Some(match *self {
            Codec::F32 => 4 * n,
            Codec::F16 | Codec::Bf16 => 2 * n,
            Codec::Int8Block { block } => 4 * blocks(n, block) + n,
            Codec::Int4Block { block } => 4 * blocks(n, block) + n.div_ceil(2),
            Codec::TopK { density_ppm, block } => {
                let k = topk_count(n, density_ppm);
                4 * k + 4 * blocks(k, block) + k
            }
            Codec::TopKMask { density_ppm, block } => {
                let k = topk_count(n, density_ppm);
                n.div_ceil(8) + 4 * blocks(k, block) + k.div_ceil(2)
            }
        })
    }

    /// Whole payload bytes (header + body) for `n` elements.
    pub fn payload_len(&self, n: u64) -> Option<u64> {
        Some(header_len(*self) as u64 + self.body_len(n)?)
    }
}

/// `Codec::from_str` could not parse a codec name.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("unknown codec {0:?}: expected f32, f16, bf16, int8[-b<block>], int4[-b<block>], topk[-<ppm>ppm][-b<block>] or topkmask[-<ppm>ppm][-b<block>]")]
pub struct UnknownCodec(pub String);

impl std::str::FromStr for Codec {
    type Err = UnknownCodec;

    /// Parse the names `Codec::name` produces, plus short forms with default
    /// parameters: `int8` = block 256, `int4` = block 64, `topk` = 10 000 ppm
    /// (1%) with block 256, `topkmask` = 140 000 ppm (14%) with block 256.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || UnknownCodec(s.to_owned());
        let mut parts = s.split('-');
        let head = parts.next().unwrap_or_default();
        let (mut block, mut ppm) = (None, None);
        let number = |d: &str| d.parse::<u32>().map_err(|_| bad());
        for p in parts {
            if let Some(b) = p.strip_prefix('b') {
                block = Some(number(b)?);
            } else if let Some(d) = p.strip_suffix("ppm") {
                ppm = Some(number(d)?);
            } else {
                return Err(bad());
            }
        }
        let codec = match head {
            "f32" | "f16" | "bf16" if block.is_some() || ppm.is_some() => return Err(bad()),
            "f32" => Codec::F32,
            "f16" => Codec::F16,
            "bf16" => Codec::Bf16,
            "int8" if ppm.is_none() => Codec::Int8Block { block: block.unwrap_or(256) },
            "int4" if ppm.is_none() => Codec::Int4Block { block: block.unwrap_or(64) },
            "topk" => Codec::TopK { density_ppm: ppm.unwrap_or(10_000), block: block.unwrap_or(256) },
            "topkmask" => {
                Codec::TopKMask { density_ppm: ppm.unwrap_or(140_000), block: block.unwrap_or(256) }
            }
            _ => return Err(bad()),
        };
        if codec.is_valid() {
            Ok(codec)
        } else {
            Err(bad())
        }
    }
}

/// The header every delta payload starts with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeltaPayloadHeader {
    pub codec: Codec,
    pub element_count: u64,
}

impl DeltaPayloadHeader {
    /// `[version][type=5][codec][element_count u64]`.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::message(MessageType::DeltaPayload);
        self.codec.write(&mut w);
        w.u64(self.element_count);
        w.finish()
    }

    /// Parse the header at the start of `payload`; returns it and its length.
    pub fn decode_prefix(payload: &[u8]) -> Result<(Self, usize), WireError> {
        let mut r = Reader::message(payload, MessageType::DeltaPayload)?;
        let codec = Codec::read(&mut r)?;
        let element_count = r.u64()?;
        if element_count > MAX_ELEMENTS {
            return Err(WireError::TooLong { field: "element_count", len: element_count, cap: MAX_ELEMENTS });
        }
        Ok((Self { codec, element_count }, r.position()))
    }
}

/// Encode `values` as a complete delta payload (header + body).
/// Rejects non-finite input and more than `MAX_ELEMENTS` elements.
pub fn encode_delta(codec: Codec, values: &[f32]) -> Result<Vec<u8>, CodecError> {
    let n = values.len() as u64;
    let body_len = codec.body_len(n).ok_or(CodecError::TooManyElements(n))?;
    if let Some(index) = values.iter().position(|v| !v.is_finite()) {
        return Err(CodecError::NonFinite { index });
    }
    if let Some(index) = values.iter().position(|v| v.abs() > MAX_ABS_VALUE) {
        return Err(CodecError::OutOfRange { index });
    }
    let mut out = DeltaPayloadHeader { codec, element_count: n }.encode();
    out.reserve(usize::try_from(body_len).unwrap_or(0));
    match codec {
        Codec::F32 => float::encode_f32(values, &mut out),
        Codec::F16 => float::encode_f16(values, &mut out),
        Codec::Bf16 => float::encode_bf16(values, &mut out),
        Codec::Int8Block { block } => block::encode(values, block, block::Width::Int8, &mut out),
        Codec::Int4Block { block } => block::encode(values, block, block::Width::Int4, &mut out),
        Codec::TopK { density_ppm, block } => topk::encode(values, density_ppm, block, &mut out),
        Codec::TopKMask { density_ppm, block } => topk_mask::encode(values, density_ppm, block, &mut out),
    }
    Ok(out)
}

/// Check a payload's header against the expected codec and element count and
/// its body length against what they imply; returns the body.
fn checked_body(payload: &[u8], codec: Codec, n: u64) -> Result<&[u8], CodecError> {
    let (header, start) = DeltaPayloadHeader::decode_prefix(payload)?;
    if header.codec != codec {
        return Err(CodecError::WrongCodec { expected: codec, found: header.codec });
    }
    if header.element_count != n {
        return Err(CodecError::WrongLength { expected: n, found: header.element_count });
    }
    let body = &payload[start..];
    let expected = codec.body_len(n).ok_or(CodecError::TooManyElements(n))?;
    if body.len() as u64 != expected {
        return Err(CodecError::BodyLength { expected, found: body.len() as u64 });
    }
    Ok(body)
}

/// Decode a payload that must use `codec` and hold exactly `out.len()`
/// elements into `out`. Allocates nothing. Every decoded value is finite
/// and within ±`MAX_ABS_VALUE`.
pub fn decode_delta_into(payload: &[u8], codec: Codec, out: &mut [f32]) -> Result<(), CodecError> {
    let body = checked_body(payload, codec, out.len() as u64)?;
    match codec {
        Codec::F32 => float::decode_f32(body, out),
        Codec::F16 => float::decode_f16(body, out),
        Codec::Bf16 => float::decode_bf16(body, out),
        Codec::Int8Block { block } => block::decode(body, block, block::Width::Int8, out),
        Codec::Int4Block { block } => block::decode(body, block, block::Width::Int4, out),
        Codec::TopK { density_ppm, block } => {
            topk::decode(body, kept_count(out.len(), density_ppm)?, block, out)
        }
        Codec::TopKMask { density_ppm, block } => {
            topk_mask::decode(body, kept_count(out.len(), density_ppm)?, block, out)
        }
    }
}

/// How many of `n` elements a top-k codec keeps, as a usize.
fn kept_count(n: usize, density_ppm: u32) -> Result<usize, CodecError> {
    usize::try_from(topk_count(n as u64, density_ppm)).map_err(|_| CodecError::TooManyElements(n as u64))
}

/// Decode a payload of `codec` that must hold exactly `expected_elements`
/// (the caller's model size). The output is allocated only after the header
/// and the body length check out, so it is never larger than the caller's
/// own expectation.
pub fn decode_delta(payload: &[u8], codec: Codec, expected_elements: usize) -> Result<Vec<f32>, CodecError> {
    checked_body(payload, codec, expected_elements as u64)?;
    let mut out = vec![0f32; expected_elements];
    decode_delta_into(payload, codec, &mut out)?;
    Ok(out)
}

/// Check one decoded value: finite and within ±MAX_ABS_VALUE, the same
/// domain the encoder accepts.
pub(crate) fn check_decoded(v: f32, index: usize) -> Result<f32, CodecError> {
    if !v.is_finite() {
        Err(CodecError::NonFinite { index })
    } else if v.abs() > MAX_ABS_VALUE {
        Err(CodecError::OutOfRange { index })
    } else {
        Ok(v)
    }
}

/// ‖decoded − original‖₂ / ‖original‖₂ in f64 (0 when both are zero), for
/// benchmarks and tests. Lengths must match; extra elements are ignored.
pub fn relative_l2_error(original: &[f32], decoded: &[f32]) -> f64 {
    let (mut num, mut den) = (0f64, 0f64);
    for (a, b) in original.iter().zip(decoded) {
        let d = f64::from(*b) - f64::from(*a);
        num += d * d;
        den += f64::from(*a) * f64::from(*a);
    }
    if den == 0.0 {
        if num == 0.0 {
            0.0
        } else {
            f64::INFINITY
        }
    } else {
        (num / den).sqrt()
    }
}

#[cfg(test)]
mod tests;
