//! Which instruction-set path the CPU backend runs (AVX-512-BF16, AVX-512,
//! AVX2+FMA or portable) and in which precision its GEMMs take their inputs.
//!
//! The widest path the CPU has is chosen at run time; `MURMUR_CPU_ISA` forces
//! one (an error names what the CPU lacks), and tests pass an `Isa` to
//! `CpuBackend::with_options` directly. Every path is deterministic on its own:
//! the same inputs on the same path give the same bits whatever the thread
//! count or scheduling, because blocks are fixed and K runs in a fixed order.

use std::fmt;
use std::str::FromStr;

/// The environment variable that forces a path.
pub const ISA_ENV: &str = "MURMUR_CPU_ISA";

/// An instruction-set path, narrowest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Isa {
    /// Plain Rust, no target features (any CPU).
    Portable,
    /// AVX2 and FMA (256-bit).
    Avx2,
    /// AVX-512 F/BW/VL (512-bit, 32 vector registers).
    Avx512,
    /// AVX-512 plus the BF16 dot product `vdpbf16ps` (used by bf16 GEMMs).
    Avx512Bf16,
}

/// Why a requested path cannot run here.
#[derive(Debug, thiserror::Error)]
pub enum IsaError {
    #[error("{ISA_ENV}={0:?} is not a CPU path; choose one of avx512bf16, avx512, avx2, portable")]
    Unknown(String),
    #[error("{ISA_ENV}={0}: this CPU lacks {1}; the widest path it supports is {2}")]
    Unsupported(Isa, &'static str, Isa),
}

impl Isa {
    /// Every path, widest first.
    pub const ALL: [Isa; 4] = [Isa::Avx512Bf16, Isa::Avx512, Isa::Avx2, Isa::Portable];

    pub fn name(self) -> &'static str {
        match self {
            Isa::Portable => "portable",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
            Isa::Avx512Bf16 => "avx512bf16",
        }
    }

    /// The CPU features this path needs, as `is_x86_feature_detected!` names them.
    fn features(self) -> &'static str {
        match self {
            Isa::Portable => "",
            Isa::Avx2 => "avx2+fma",
            Isa::Avx512 => "avx512f+avx512bw+avx512vl (with avx2+fma)",
            Isa::Avx512Bf16 => "avx512bf16 (with avx512f+avx512bw+avx512vl)",
        }
    }

    /// Whether this CPU can run the path (detected once, then cached).
    pub fn supported(self) -> bool {
        static SUPPORT: std::sync::OnceLock<[bool; 4]> = std::sync::OnceLock::new();
        SUPPORT.get_or_init(|| Isa::ALL.map(Isa::detect))[self.index()]
    }

    fn index(self) -> usize {
        match self {
            Isa::Avx512Bf16 => 0,
            Isa::Avx512 => 1,
            Isa::Avx2 => 2,
            Isa::Portable => 3,
        }
    }

    /// Asks the CPU whether it can run the path.
    fn detect(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            let avx2 = || has!("avx2") && has!("fma");
            let avx512 = || avx2() && has!("avx512f") && has!("avx512bw") && has!("avx512vl");
            match self {
                Isa::Portable => true,
                Isa::Avx2 => avx2(),
                Isa::Avx512 => avx512(),
                Isa::Avx512Bf16 => avx512() && has!("avx512bf16"),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            self == Isa::Portable
        }
    }

    /// The widest path this CPU supports.
    pub fn widest() -> Isa {
        Isa::ALL.into_iter().find(|i| i.supported()).unwrap_or(Isa::Portable)
    }

    /// Every path this CPU supports, widest first.
    pub fn supported_paths() -> Vec<Isa> {
        Isa::ALL.into_iter().filter(|i| i.supported()).collect()
    }

    /// `MURMUR_CPU_ISA` when set (checked against the CPU), else the widest.
    pub fn from_env() -> Result<Isa, IsaError> {
        match forced_name() {
            Some(v) => v.parse::<Isa>()?.checked(),
            None => Ok(Isa::widest()),
        }
    }

    /// Whether `MURMUR_CPU_ISA` forces a path (set and not blank), i.e.
    /// whether `from_env` reads it.
    pub fn is_forced() -> bool {
        forced_name().is_some()
    }

    /// `self` if this CPU supports it, else an error naming what is missing.
    pub fn checked(self) -> Result<Isa, IsaError> {
        if self.supported() {
            Ok(self)
        } else {
            Err(IsaError::Unsupported(self, self.features(), Isa::widest()))
        }
    }

    /// Whether the 512-bit kernels apply.
    pub fn is_avx512(self) -> bool {
        matches!(self, Isa::Avx512 | Isa::Avx512Bf16)
    }

    /// Whether this path includes AVX2 and this CPU runs it: every path but
    /// portable does, so AVX2 code serves the AVX-512 paths too.
    pub fn runs_avx2(self) -> bool {
        self != Isa::Portable && self.supported()
    }
}

impl fmt::Display for Isa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Isa {
    type Err = IsaError;
    fn from_str(s: &str) -> Result<Isa, IsaError> {
        let t = s.trim().to_ascii_lowercase().replace(['-', '_'], "");
        Isa::ALL.into_iter().find(|i| i.name() == t).ok_or_else(|| IsaError::Unknown(s.to_string()))
    }
}

/// The precision of the GEMMs' inputs. Accumulation, master weights,
/// optimizer state and every other kernel stay fp32 either way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Precision {
    #[default]
    Fp32,
    /// Inputs rounded to bfloat16 (to nearest even) while packing; products
    /// summed in fp32 (`vdpbf16ps` on AVX-512-BF16, fp32 FMAs elsewhere).
    Bf16,
}

impl Precision {
    pub fn name(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Bf16 => "bf16",
        }
    }
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `MURMUR_CPU_ISA`'s value, unless it is unset, blank or not Unicode.
fn forced_name() -> Option<String> {
    std::env::var(ISA_ENV).ok().filter(|v| !v.trim().is_empty())
}

/// Rounds an f32 to the nearest bfloat16 (ties to even), returned as its 16 bits.
/// NaN stays NaN (quiet).
#[inline(always)]
pub fn bf16_bits(x: f32) -> u16 {
    let b = x.to_bits();
    if x.is_nan() {
        return ((b >> 16) | 0x40) as u16;
    }
    let round = 0x7fff + ((b >> 16) & 1);
    (b.wrapping_add(round) >> 16) as u16
}

/// An f32 rounded to bfloat16 precision (still an f32).
#[inline(always)]
pub fn round_bf16(x: f32) -> f32 {
    f32::from_bits((bf16_bits(x) as u32) << 16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_fail() {
        for isa in Isa::ALL {
            assert_eq!(isa.name().parse::<Isa>().unwrap(), isa);
        }
        assert_eq!("AVX512-BF16".parse::<Isa>().unwrap(), Isa::Avx512Bf16);
        let err = "sse9".parse::<Isa>().unwrap_err().to_string();
        assert!(err.contains("avx512bf16, avx512, avx2, portable"), "{err}");
    }

    #[test]
    fn portable_is_always_supported_and_widest_is_supported() {
        assert!(Isa::Portable.supported());
        assert!(Isa::widest().supported());
        assert_eq!(Isa::supported_paths()[0], Isa::widest());
        for isa in Isa::ALL {
            assert_eq!(isa.checked().is_ok(), isa.supported());
        }
    }

    #[test]
    fn bf16_rounding_is_to_nearest_even() {
        assert_eq!(round_bf16(1.0), 1.0);
        // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (1.0).
        assert_eq!(round_bf16(1.0 + 1.0 / 256.0), 1.0);
        // just above the tie rounds up
        assert_eq!(round_bf16(1.0 + 1.0 / 256.0 + 1.0 / 65536.0), 1.0 + 1.0 / 128.0);
        // 1 + 3·2^-8 is halfway between 1+2^-7 (odd) and 1+2^-6 (even): up
        assert_eq!(round_bf16(1.0 + 3.0 / 256.0), 1.0 + 1.0 / 64.0);
        assert!(round_bf16(f32::NAN).is_nan());
        assert_eq!(round_bf16(f32::INFINITY), f32::INFINITY);
        assert_eq!(round_bf16(-2.5), -2.5);
    }
}
