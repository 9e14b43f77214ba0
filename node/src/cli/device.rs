//! `--device auto|cpu|gpu|cuda`: the flag, its resolution (by
//! `compute::device`), and running generic code on whichever backend it chose.

use anyhow::Result;
use clap::ValueEnum;

use crate::compute::device::{self, Chosen};

/// The `--device` flag.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum DeviceArg {
    /// A CUDA device, else a hardware GPU, else the CPU backend (never a
    /// software rasterizer such as lavapipe).
    #[default]
    Auto,
    Cpu,
    /// Any GPU adapter, software ones (lavapipe) included (builds with the
    /// `gpu` feature, the default).
    Gpu,
    /// An NVIDIA GPU through CUDA (builds with the `cuda` feature).
    Cuda,
}

/// Resolves `--device` to an available backend, or says why it cannot.
pub fn choose(arg: DeviceArg) -> Result<Chosen> {
    Ok(match arg {
        DeviceArg::Auto => device::auto(),
        DeviceArg::Cpu => device::cpu(),
        DeviceArg::Gpu => device::gpu()?,
        DeviceArg::Cuda => device::cuda()?,
    })
}

/// Runs `$body` with `$b` bound to a reference to the chosen backend; a
/// backend that cannot be opened returns its error from the caller.
macro_rules! with_backend {
    ($device:expr, |$b:ident| $body:expr) => {
        $crate::compute::device::on_backend!(
            $crate::cli::device::choose($device)?,
            |backend| {
                tracing::info!("compute: {}", $crate::compute::Backend::describe(&backend));
                let $b = &backend;
                $body
            },
            |e| return Err(e.into())
        )
    };
}
pub(crate) use with_backend;
