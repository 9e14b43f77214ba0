//! Wire primitives: the little-endian, length-prefixed reader and writer every
//! message codec is built on, the envelope (version byte + message-type tag),
//! and the caps that bound every length read from untrusted bytes.
//!
//! The reader is total: every read checks the remaining input first, and every
//! length is checked against both the remaining input and a declared cap
//! before anything is allocated.

use thiserror::Error;

/// Wire format version carried as the first byte of every message.
pub const WIRE_VERSION: u8 = 1;

/// Longest string field (bytes of UTF-8) in any message.
pub const MAX_STRING_BYTES: usize = 1024;
/// Most elements (parameters) a state or delta payload may declare.
pub const MAX_ELEMENTS: u64 = 1 << 31;
/// Most keys an allow-list admission policy may hold.
pub const MAX_ALLOWLIST: usize = 4096;
/// Most operator keys a RunSpec may name.
pub const MAX_OPERATORS: usize = 64;
/// Most shards (train and validation together) a dataset manifest may list.
pub const MAX_DATASET_SHARDS: usize = 65_536;

/// The message-type tag, second byte of every message. Tags 2 and 3 were
/// version 1's DeltaManifest and RoundCommit and are not reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum MessageType {
    RunSpec = 1,
    StatePayload = 4,
    DeltaPayload = 5,
    Telemetry = 6,
    DatasetManifest = 7,
    Ticket = 8,
    ShardedManifest = 9,
    ShardDelta = 10,
    ShardResult = 11,
    IncludedList = 12,
    FraudProof = 13,
    IncludedSigners = 14,
}

impl MessageType {
    fn from_u8(b: u8) -> Option<Self> {
        Some(match b {
            1 => Self::RunSpec,
            4 => Self::StatePayload,
            5 => Self::DeltaPayload,
            6 => Self::Telemetry,
            7 => Self::DatasetManifest,
            8 => Self::Ticket,
            9 => Self::ShardedManifest,
            10 => Self::ShardDelta,
            11 => Self::ShardResult,
            12 => Self::IncludedList,
            13 => Self::FraudProof,
            14 => Self::IncludedSigners,
            _ => return None,
        })
    }
}

/// Why bytes could not be decoded. Every decoder in the crate returns this
/// (wrapped where it has more to say); none of them panics.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum WireError {
    #[error("input ended early: needed {needed} more bytes at offset {offset}")]
    Truncated { offset: usize, needed: usize },
    #[error("unsupported wire version {0} (this build speaks version {WIRE_VERSION})")]
    Version(u8),
    #[error("expected a {expected:?} message, found type tag {found}")]
    WrongType { expected: MessageType, found: u8 },
    #[error("{field}: length {len} exceeds the cap of {cap}")]
    TooLong { field: &'static str, len: u64, cap: u64 },
    #[error("{field}: invalid tag {tag}")]
    BadTag { field: &'static str, tag: u8 },
    #[error("{field}: not valid UTF-8")]
    BadUtf8 { field: &'static str },
    #[error("{field}: value is not finite")]
    NonFinite { field: &'static str },
    #[error("{field}: {why}")]
    Invalid { field: &'static str, why: &'static str },
    #[error("{0} trailing bytes after the message")]
    TrailingBytes(usize),
}

/// Appends canonical little-endian encodings to a byte vector.
#[derive(Debug, Default)]
pub struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    /// A writer that starts with the envelope of `ty`.
    pub fn message(ty: MessageType) -> Self {
        let mut w = Self::default();
        w.u8(WIRE_VERSION);
        w.u8(ty as u8);
        w
    }
    pub fn u8(&mut self, v: u8) {
        self.buf.push(v);
    }
    pub fn bool(&mut self, v: bool) {
        self.buf.push(u8::from(v));
    }
    pub fn u16(&mut self, v: u16) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    pub fn u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    pub fn u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    pub fn f32(&mut self, v: f32) {
        self.buf.extend_from_slice(&v.to_bits().to_le_bytes());
    }
    pub fn bytes(&mut self, b: &[u8]) {
        self.buf.extend_from_slice(b);
    }
    /// A string as a u16 byte length then UTF-8 bytes. Longer strings are
    /// truncated to the u16 range here and rejected by the decoder's cap.
    pub fn str(&mut self, s: &str) {
        let len = u16::try_from(s.len()).unwrap_or(u16::MAX);
        self.u16(len);
        self.bytes(&s.as_bytes()[..usize::from(len)]);
    }
    pub fn len(&self) -> usize {
        self.buf.len()
    }
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
    pub fn finish(self) -> Vec<u8> {
        self.buf
    }
}

/// Reads canonical encodings from untrusted bytes, never panicking.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    input: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(input: &'a [u8]) -> Self {
        Self { input, pos: 0 }
    }

    /// A reader positioned after a checked envelope of type `ty`.
    pub fn message(input: &'a [u8], ty: MessageType) -> Result<Self, WireError> {
        let mut r = Self::new(input);
        let version = r.u8()?;
        if version != WIRE_VERSION {
            return Err(WireError::Version(version));
        }
        let tag = r.u8()?;
        match MessageType::from_u8(tag) {
            Some(t) if t == ty => Ok(r),
            _ => Err(WireError::WrongType { expected: ty, found: tag }),
        }
    }

    pub fn position(&self) -> usize {
        self.pos
    }

    pub fn remaining(&self) -> usize {
        self.input.len().saturating_sub(self.pos)
    }

    /// The next `n` bytes, or `Truncated`.
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if n > self.remaining() {
            return Err(WireError::Truncated { offset: self.pos, needed: n - self.remaining() });
        }
        let start = self.pos;
        self.pos += n;
        Ok(&self.input[start..self.pos])
    }

    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], WireError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }
    pub fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.array::<1>()?[0])
    }
    pub fn bool(&mut self, field: &'static str) -> Result<bool, WireError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            tag => Err(WireError::BadTag { field, tag }),
        }
    }
    pub fn u16(&mut self) -> Result<u16, WireError> {
        Ok(u16::from_le_bytes(self.array()?))
    }
    pub fn u32(&mut self) -> Result<u32, WireError> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    pub fn u64(&mut self) -> Result<u64, WireError> {
        Ok(u64::from_le_bytes(self.array()?))
    }
    /// Any f32 bit pattern.
    pub fn f32_bits(&mut self) -> Result<f32, WireError> {
        Ok(f32::from_bits(self.u32()?))
    }
    /// A finite f32; NaN and infinities are rejected.
    pub fn f32(&mut self, field: &'static str) -> Result<f32, WireError> {
        let v = self.f32_bits()?;
        if v.is_finite() {
            Ok(v)
        } else {
            Err(WireError::NonFinite { field })
        }
    }
    /// A u16-length-prefixed UTF-8 string of at most `cap` bytes.
    pub fn str(&mut self, field: &'static str, cap: usize) -> Result<String, WireError> {
        let len = usize::from(self.u16()?);
        if len > cap {
            return Err(WireError::TooLong { field, len: len as u64, cap: cap as u64 });
        }
        let raw = self.take(len)?;
        let s = std::str::from_utf8(raw).map_err(|_| WireError::BadUtf8 { field })?;
        Ok(s.to_owned())
    }
    /// A u32 count checked against `cap` and against the remaining input
    /// (each item needs at least `item_bytes`), so callers may allocate it.
    pub fn count(&mut self, field: &'static str, cap: usize, item_bytes: usize) -> Result<usize, WireError> {
        let n = self.u32()? as usize;
        if n > cap {
            return Err(WireError::TooLong { field, len: n as u64, cap: cap as u64 });
        }
        let need = n.saturating_mul(item_bytes);
        if need > self.remaining() {
            return Err(WireError::Truncated { offset: self.pos, needed: need - self.remaining() });
        }
        Ok(n)
    }
    /// Succeeds only when every byte was consumed: canonical messages have
    /// no trailing bytes.
    pub fn finish(self) -> Result<(), WireError> {
        match self.remaining() {
            0 => Ok(()),
            n => Err(WireError::TrailingBytes(n)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn primitives_round_trip() {
        let mut w = Writer::message(MessageType::Telemetry);
        w.u16(0xBEEF);
        w.u32(7);
        w.u64(u64::MAX);
        w.f32(1.5);
        w.str("héllo");
        w.bool(true);
        let bytes = w.finish();
        let mut r = Reader::message(&bytes, MessageType::Telemetry).expect("envelope");
        assert_eq!(r.u16(), Ok(0xBEEF));
        assert_eq!(r.u32(), Ok(7));
        assert_eq!(r.u64(), Ok(u64::MAX));
        assert_eq!(r.f32("x"), Ok(1.5));
        assert_eq!(r.str("s", 16).as_deref(), Ok("héllo"));
        assert_eq!(r.bool("b"), Ok(true));
        assert_eq!(r.finish(), Ok(()));
    }

    #[test]
    fn envelope_and_limits_are_checked() {
        assert_eq!(Reader::message(&[2, 1], MessageType::RunSpec).err(), Some(WireError::Version(2)));
        assert!(matches!(
            Reader::message(&[1, 2], MessageType::RunSpec),
            Err(WireError::WrongType { found: 2, .. })
        ));
        assert!(matches!(Reader::message(&[1], MessageType::RunSpec), Err(WireError::Truncated { .. })));
        let mut r = Reader::new(&[5, 0, b'a']);
        assert!(matches!(r.str("s", 4), Err(WireError::TooLong { .. })));
        let mut r = Reader::new(&[2, 0, 0xff, 0xfe]);
        assert_eq!(r.str("s", 4), Err(WireError::BadUtf8 { field: "s" }));
        let mut r = Reader::new(&[0xff, 0xff, 0xff, 0x7f]);
        assert!(matches!(r.count("c", usize::MAX, 32), Err(WireError::Truncated { .. })));
        let mut r = Reader::new(&[2]);
        assert_eq!(r.bool("b"), Err(WireError::BadTag { field: "b", tag: 2 }));
        let nan = 0x7fc0_0000u32.to_le_bytes();
        let mut r = Reader::new(&nan);
        assert_eq!(r.f32("f"), Err(WireError::NonFinite { field: "f" }));
        assert_eq!(Reader::new(&[0]).finish(), Err(WireError::TrailingBytes(1)));
    }
}
