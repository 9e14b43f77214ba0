//! On a headless machine (no display, no XDG_RUNTIME_DIR) the bootstrap
//! server starts without printing an error line.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn starts_quietly_without_a_display() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut child = Command::new(env!("CARGO_BIN_EXE_murmur-bootstrap"))
        .args(["--listen", "/ip4/127.0.0.1/tcp/0", "--no-mdns", "--data-dir"])
        .arg(dir.path())
        .env_remove("XDG_RUNTIME_DIR")
        .env_remove("WAYLAND_DISPLAY")
        .env_remove("DISPLAY")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start murmur-bootstrap");
    // Long enough to create its key and genesis state and start listening.
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("murmur-bootstrap exited early: {status}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    child.kill().expect("stop murmur-bootstrap");
    let _ = child.wait();
    let mut stderr = String::new();
    child.stderr.take().expect("piped").read_to_string(&mut stderr).expect("read stderr");
    let bad: Vec<&str> = stderr
        .lines()
        .filter(|l| {
            l.trim_start().to_lowercase().starts_with("error")
                || l.contains(" ERROR ")
                || l.contains("XDG_RUNTIME_DIR")
        })
        .collect();
    assert!(bad.is_empty(), "murmur-bootstrap printed errors on a headless start:\n{}", bad.join("\n"));
}
