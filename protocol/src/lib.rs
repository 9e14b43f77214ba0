//! murmur-protocol: everything nodes must agree on byte for byte.
//!
//! Pure and deterministic: no I/O, no clocks, no threads, no async. The crate
//! is being built under issue #4; this root only fixes its place in the
//! workspace.
