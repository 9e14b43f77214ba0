//! Bad input through the real `murmur` binary: each case must exit with a
//! plain error (status 1) naming the problem — never a panic (status 101).

use std::path::Path;
use std::process::{Command, Output};

fn murmur(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_murmur")).args(args).output().expect("run murmur")
}

/// Asserts a clean failure whose stderr mentions every one of `needles`.
fn assert_clean_error(out: &Output, needles: &[&str]) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "expected exit 1, got {:?}; stderr:\n{stderr}", out.status);
    assert!(!stderr.contains("panicked"), "panic:\n{stderr}");
    for n in needles {
        assert!(stderr.to_lowercase().contains(&n.to_lowercase()), "stderr lacks {n:?}:\n{stderr}");
    }
}

fn train_args<'a>(data: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut v =
        vec!["train", "--data", data, "--steps", "1", "--batch", "1", "--seq", "8", "--device", "cpu"];
    v.extend_from_slice(extra);
    v
}

#[test]
fn missing_data_path() {
    let out = murmur(&train_args("/nonexistent/murmur-data", &[]));
    assert_clean_error(&out, &["/nonexistent/murmur-data", "does not exist"]);
}

#[test]
fn empty_data_file() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("empty.txt");
    std::fs::write(&f, b"").unwrap();
    let out = murmur(&train_args(f.to_str().unwrap(), &[]));
    assert_clean_error(&out, &["empty.txt", "empty"]);
}

#[test]
fn shard_with_bad_header() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("data_train_000.bin");
    let mut bytes = vec![0u8; 1024 + 200];
    bytes[..4].copy_from_slice(&12345i32.to_le_bytes());
    std::fs::write(&f, &bytes).unwrap();
    let out = murmur(&train_args(f.to_str().unwrap(), &[]));
    assert_clean_error(&out, &["data_train_000.bin", "magic"]);
}

fn make_checkpoint(dir: &Path) -> std::path::PathBuf {
    let out = murmur(&train_args(
        "synthetic",
        &["--checkpoint-dir", dir.to_str().unwrap(), "--val-batches", "1", "--preset", "tiny"],
    ));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let ckpt = dir.join("ckpt-00000001.murmur");
    assert!(ckpt.exists());
    ckpt
}

#[test]
fn truncated_and_corrupt_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    let ckpt = make_checkpoint(dir.path());
    let bytes = std::fs::read(&ckpt).unwrap();
    let out_dir = dir.path().join("export");
    let export = |p: &Path| {
        murmur(&["export", "--checkpoint", p.to_str().unwrap(), "--out", out_dir.to_str().unwrap()])
    };

    let truncated = dir.path().join("truncated.murmur");
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    assert_clean_error(&export(&truncated), &["truncated.murmur", "truncated"]);

    let corrupt = dir.path().join("corrupt.murmur");
    let mut flipped = bytes.clone();
    let i = bytes.len() - 1000;
    flipped[i] ^= 1;
    std::fs::write(&corrupt, &flipped).unwrap();
    assert_clean_error(&export(&corrupt), &["corrupt.murmur", "corrupt"]);

    let resume = murmur(&train_args("synthetic", &["--resume-from", corrupt.to_str().unwrap()]));
    assert_clean_error(&resume, &["checksum"]);
}

#[test]
fn malformed_config_file() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("run.toml");
    std::fs::write(&f, "preset = \"tiny\"\nsteps = \"many\"\n").unwrap();
    let out = murmur(&["train", "--config", f.to_str().unwrap()]);
    assert_clean_error(&out, &["run.toml", "malformed", "steps"]);

    std::fs::write(&f, "presett = \"tiny\"\n").unwrap();
    let out = murmur(&["train", "--config", f.to_str().unwrap()]);
    assert_clean_error(&out, &["unknown field", "presett"]);

    std::fs::write(&f, "preset = \"enormous\"\n").unwrap();
    let out = murmur(&["train", "--config", f.to_str().unwrap()]);
    assert_clean_error(&out, &["unknown model preset", "enormous"]);
}
