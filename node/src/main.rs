//! The `murmur` binary: parses the command line and reports errors plainly.

use clap::Parser;

fn main() {
    let cli = murmur_node::cli::Cli::parse();
    if let Err(e) = murmur_node::cli::run(cli) {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}
