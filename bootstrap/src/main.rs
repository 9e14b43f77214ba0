//! murmur-bootstrap: the bootstrap server binary.
//!
//! The network layer (issue #5) is not built yet, so this binary can only say
//! so; it exits with an error rather than pretending to serve.

fn main() -> anyhow::Result<()> {
    anyhow::bail!(
        "murmur-bootstrap {}: the network layer is not built yet (see issue #5); \
         use `murmur train` for single-machine training",
        env!("CARGO_PKG_VERSION")
    )
}
