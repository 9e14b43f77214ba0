//! murmur-tests: helpers shared by the cross-crate and multi-process tests in
//! `tests/tests/`.

use std::path::PathBuf;

/// Path of a binary built by this workspace (`murmur`, `murmur-bootstrap`),
/// next to the test executable's own target directory.
pub fn workspace_binary(name: &str) -> PathBuf {
    let mut dir = std::env::current_exe().expect("test executable path");
    dir.pop(); // deps/
    if dir.ends_with("deps") {
        dir.pop();
    }
    dir.join(name)
}
