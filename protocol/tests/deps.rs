//! The protocol crate must stay pure: no async runtime, networking, GPU or
//! database crate may appear among its normal dependencies.

use std::process::Command;

#[test]
fn no_io_crates_in_the_dependency_tree() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["tree", "-p", "murmur-protocol", "-e", "normal", "--prefix", "none", "--offline"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo tree runs");
    assert!(out.status.success(), "cargo tree failed: {}", String::from_utf8_lossy(&out.stderr));
    let tree = String::from_utf8_lossy(&out.stdout);
    assert!(tree.contains("murmur-protocol"), "unexpected output: {tree}");
    for line in tree.lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        for banned in ["tokio", "libp2p", "wgpu", "sled"] {
            assert!(
                !(name == banned || name.starts_with(&format!("{banned}-"))),
                "murmur-protocol depends on {name}"
            );
        }
    }
}
