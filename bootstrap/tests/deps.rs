//! The bootstrap server never trains: no compute backend (wgpu, its shader
//! compiler naga, or CUDA's cudarc) may appear among its normal dependencies.

use std::process::Command;

#[test]
fn no_compute_backend_in_the_dependency_tree() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["tree", "-p", "murmur-bootstrap", "-e", "normal", "--prefix", "none", "--offline"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo tree runs");
    assert!(out.status.success(), "cargo tree failed: {}", String::from_utf8_lossy(&out.stderr));
    let tree = String::from_utf8_lossy(&out.stdout);
    assert!(tree.contains("murmur-node"), "unexpected output: {tree}");
    for line in tree.lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        for banned in ["wgpu", "naga", "cudarc"] {
            assert!(
                !(name == banned || name.starts_with(&format!("{banned}-"))),
                "murmur-bootstrap depends on {name}"
            );
        }
    }
}
