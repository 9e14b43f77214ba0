//! Every kernel in shaders/cuda compiles with NVRTC for the architectures the
//! backend targets first (Ampere sm_80, Hopper sm_90), on any machine: NVRTC
//! needs no GPU. Like the naga test for shaders/*.wgsl.

use std::collections::BTreeSet;

use crate::compute::cuda::programs::{compile, nvrtc_version, PROGRAMS};
use crate::compute::cuda::testing::{decide, nvrtc_required};

#[test]
fn every_program_is_listed_once_and_every_cu_file_is_a_program() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../shaders/cuda");
    let on_disk: BTreeSet<String> = std::fs::read_dir(dir)
        .expect("shaders/cuda exists")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".cu"))
        .collect();
    let listed: BTreeSet<String> = PROGRAMS.iter().map(|p| p.file.to_string()).collect();
    assert_eq!(listed.len(), PROGRAMS.len(), "a file is listed twice");
    assert_eq!(on_disk, listed, "shaders/cuda and programs::PROGRAMS differ");
    for p in &PROGRAMS {
        for k in p.kernels {
            assert!(
                p.source.contains(&format!("extern \"C\" __global__ void {k}(")),
                "{} has no kernel {k}",
                p.file
            );
        }
    }
}

#[test]
fn every_cu_file_compiles_for_sm_80_and_sm_90() {
    let test = "every_cu_file_compiles_for_sm_80_and_sm_90";
    let version = nvrtc_version().map_err(|e| format!("NVRTC cannot be loaded: {e}"));
    let Some((major, minor)) =
        decide(test, version, nvrtc_required(), "MURMUR_REQUIRE_NVRTC").unwrap_or_else(|m| panic!("{m}"))
    else {
        return;
    };
    eprintln!("NVRTC {major}.{minor}");
    for arch in [80, 90] {
        for p in &PROGRAMS {
            match compile(p, arch) {
                Ok(cubin) => assert!(cubin.starts_with(b"\x7fELF"), "{} sm_{arch}: not an ELF cubin", p.file),
                Err(e) => panic!("{e}"),
            }
        }
    }
}

#[test]
fn a_kernel_with_an_error_is_reported_with_nvrtcs_log() {
    let test = "a_kernel_with_an_error_is_reported_with_nvrtcs_log";
    let Some(_) =
        decide(test, nvrtc_version().map_err(|e| e.to_string()), nvrtc_required(), "MURMUR_REQUIRE_NVRTC")
            .unwrap_or_else(|m| panic!("{m}"))
    else {
        return;
    };
    let broken = crate::compute::cuda::programs::Program {
        file: "broken.cu",
        source: "extern \"C\" __global__ void k(float* x) { x[0] = undeclared; }",
        kernels: &["k"],
    };
    let e = compile(&broken, 80).expect_err("does not compile").to_string();
    assert!(e.contains("broken.cu") && e.contains("sm_80") && e.contains("undeclared"), "{e}");
}
