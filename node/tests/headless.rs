//! On a headless machine (no display, no XDG_RUNTIME_DIR) the everyday
//! commands print no error line: a CPU run never probes for a GPU, and the
//! probe `--device auto` makes is quiet (no GL/EGL display connection).

use std::process::{Command, Output};

fn headless(args: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_murmur"))
        .args(args)
        .env_remove("XDG_RUNTIME_DIR")
        .env_remove("WAYLAND_DISPLAY")
        .env_remove("DISPLAY")
        .output()
        .expect("run murmur");
    assert!(out.status.success(), "murmur {args:?} failed:\n{}", String::from_utf8_lossy(&out.stderr));
    out
}

#[track_caller]
fn assert_no_error_line(what: &str, out: &Output) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    let bad: Vec<&str> = stderr
        .lines()
        .filter(|l| {
            l.trim_start().to_lowercase().starts_with("error")
                || l.contains(" ERROR ")
                || l.contains("XDG_RUNTIME_DIR")
        })
        .collect();
    assert!(bad.is_empty(), "{what} printed errors on a headless machine:\n{}", bad.join("\n"));
}

#[test]
fn train_and_sample_print_no_error_line_without_a_display() {
    let dir = tempfile::tempdir().expect("temp dir");
    let ckdir = dir.path().join("ck");
    let ck = ckdir.to_str().expect("utf-8 path");
    let train = headless(&[
        "train",
        "--preset",
        "tiny",
        "--data",
        "synthetic",
        "--batch",
        "1",
        "--seq",
        "8",
        "--steps",
        "1",
        "--val-every",
        "0",
        "--checkpoint-every",
        "1",
        "--checkpoint-dir",
        ck,
        "--device",
        "cpu",
    ]);
    assert_no_error_line("murmur train --device cpu", &train);
    let ckpt = ckdir.join("ckpt-00000001.murmur");
    let ckpt = ckpt.to_str().expect("utf-8 path");
    // sample's default device is auto: it may probe for a GPU, quietly
    let sample = headless(&["sample", "--checkpoint", ckpt, "--tokens", "4", "--seed", "3"]);
    assert_no_error_line("murmur sample", &sample);
    let cpu = headless(&["sample", "--checkpoint", ckpt, "--tokens", "4", "--seed", "3", "--device", "cpu"]);
    assert_no_error_line("murmur sample --device cpu", &cpu);
}

/// Checked where glibc can say which libraries a process opens: a CPU run
/// opens no GPU or display library at all (no wgpu probe), so nothing can
/// connect to a display and print the XDG_RUNTIME_DIR error.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[test]
fn a_cpu_run_opens_no_gpu_or_display_library() {
    let dir = tempfile::tempdir().expect("temp dir");
    let ck = dir.path().to_str().expect("utf-8 path");
    let args = [
        "train",
        "--preset",
        "tiny",
        "--data",
        "synthetic",
        "--batch",
        "1",
        "--seq",
        "8",
        "--steps",
        "1",
        "--val-every",
        "0",
        "--checkpoint-dir",
        ck,
        "--device",
        "cpu",
    ];
    let out = Command::new(env!("CARGO_BIN_EXE_murmur"))
        .args(args)
        .env("LD_DEBUG", "libs")
        .env_remove("XDG_RUNTIME_DIR")
        .output()
        .expect("run murmur");
    assert!(out.status.success(), "murmur {args:?} failed");
    let trace = String::from_utf8_lossy(&out.stderr);
    assert!(trace.contains("calling init"), "LD_DEBUG=libs gave no trace: {trace}");
    for lib in ["libEGL", "libwayland-client", "libvulkan", "libGLX"] {
        assert!(
            !trace.lines().any(|l| l.contains("calling init") && l.contains(lib)),
            "murmur {args:?} opened {lib}"
        );
    }
}

#[test]
fn devices_lists_the_cpu_paths_widest_first() {
    let text = headless(&["devices"]);
    assert_no_error_line("murmur devices", &text);
    let json = headless(&["devices", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).expect("devices --json is JSON");
    let paths: Vec<&str> = v["cpu_paths"]
        .as_array()
        .expect("cpu_paths array")
        .iter()
        .map(|p| p.as_str().expect("path name"))
        .collect();
    // portable runs everywhere and is the narrowest; every name is one
    // MURMUR_CPU_ISA accepts.
    assert_eq!(paths.last(), Some(&"portable"), "{paths:?}");
    for p in &paths {
        assert!(["avx512bf16", "avx512", "avx2", "portable"].contains(p), "unknown path {p}");
    }
    // The line scripts/test.sh reads says the same, in the same order.
    let stdout = String::from_utf8_lossy(&text.stdout);
    let line = format!("CPU paths: {} (widest first; MURMUR_CPU_ISA forces one)", paths.join(" "));
    assert!(stdout.lines().any(|l| l == line), "no {line:?} in:\n{stdout}");
}
