//! The `murmur` binary: parses the command line and reports errors plainly.

use clap::Parser;

fn main() {
    // Before any thread starts: no display connection from the GPU probe.
    #[cfg(feature = "gpu")]
    murmur_node::compute::gpu::quiet_probe_env();
    let cli = murmur_node::cli::Cli::parse();
    if let Err(e) = murmur_node::cli::run(cli) {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}
