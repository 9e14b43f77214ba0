//! Every shader parses and validates with naga — no adapter needed — and
//! every .wgsl in shaders/ is embedded and reached by some kernel.

use crate::compute::gpu::pipelines::{kernel_source, Kernel, MatmulFamily, TileConfig, SHADERS};

fn validate_with(name: &str, src: &str, caps: naga::valid::Capabilities) -> naga::Module {
    let module = match naga::front::wgsl::parse_str(src) {
        Ok(m) => m,
        Err(e) => panic!("{name}: WGSL parse error:\n{}", e.emit_to_string(src)),
    };
    let mut validator = naga::valid::Validator::new(naga::valid::ValidationFlags::all(), caps);
    if let Err(e) = validator.validate(&module) {
        panic!("{name}: validation error:\n{}", e.emit_to_string(src));
    }
    module
}

/// What matmul_coop.wgsl needs of a device: f16 and cooperative matrices.
fn coop_caps() -> naga::valid::Capabilities {
    naga::valid::Capabilities::SHADER_FLOAT16 | naga::valid::Capabilities::COOPERATIVE_MATRIX
}

fn caps_for(file: &str) -> naga::valid::Capabilities {
    if file == "matmul_coop.wgsl" {
        coop_caps()
    } else {
        naga::valid::Capabilities::empty()
    }
}

#[test]
fn every_shader_validates_with_naga() {
    for (name, _) in SHADERS {
        validate_with(name, &kernel_source(name), caps_for(name));
    }
}

#[test]
fn the_cooperative_kernel_needs_its_capabilities_and_nothing_else_does() {
    let module = naga::front::wgsl::parse_str(&kernel_source("matmul_coop.wgsl")).expect("parses");
    let mut plain =
        naga::valid::Validator::new(naga::valid::ValidationFlags::all(), naga::valid::Capabilities::empty());
    assert!(
        plain.validate(&module).is_err(),
        "matmul_coop.wgsl validated without f16 and cooperative matrices"
    );
}

#[test]
fn every_matmul_tile_configuration_validates_in_both_precisions() {
    for tiles in TileConfig::ALL.into_iter().chain(TileConfig::COOP) {
        let src = kernel_source(tiles.family.file());
        for f16 in [false, true] {
            let t = tiles.with_f16_inputs(f16);
            let specialized = t.specialize(&src);
            let label = format!("{} f16 {}", t.name, t.f16_inputs);
            if t.family == MatmulFamily::Tiled {
                assert!(specialized.contains(&format!("const TILE_M: u32 = {}u;", t.tile_m)), "{label}");
            }
            if t.family == MatmulFamily::Coop {
                assert!(specialized.contains(&format!("const SG_M: u32 = {}u;", t.tile_m / 32)), "{label}");
            } else {
                assert!(
                    specialized.contains(&format!("const ROUND_F16: bool = {};", t.f16_inputs)),
                    "{label}"
                );
            }
            let module = validate_with(&label, &specialized, caps_for(tiles.family.file()));
            let wg = module.entry_points[0].workgroup_size;
            assert_eq!(wg[0] * wg[1] * wg[2], t.invocations(), "{label}: workgroup size");
        }
    }
}

#[test]
fn every_shader_file_is_embedded_and_every_kernel_entry_exists() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../shaders");
    let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
        .map(|rd| rd.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    on_disk.retain(|n| n.ends_with(".wgsl"));
    on_disk.sort();
    let embedded: Vec<String> = SHADERS.iter().map(|(n, _)| n.to_string()).collect();
    assert_eq!(on_disk, embedded, "shaders/ and pipelines::SHADERS disagree");
    use Kernel::*;
    let all = [
        EncoderForward,
        EncoderBackwardPositions,
        EncoderBackwardTokens,
        LayernormForward,
        LayernormBackwardInput,
        LayernormBackwardParams,
        Matmul(TileConfig::LARGE),
        Matmul(TileConfig::WIDE),
        Matmul(TileConfig::COOP_LARGE),
        AttentionForward,
        AttentionBackwardScores,
        AttentionBackwardQkv,
        GeluForward,
        GeluBackward,
        ResidualForward,
        SoftmaxXentForward,
        SoftmaxXentBackward,
        ReducePartials,
        ReduceFinal,
        GradClipScale,
        ReduceColumns,
        AdamW,
    ];
    for k in all {
        let (file, entry) = k.entry();
        let module = validate_with(file, &kernel_source(file), caps_for(file));
        assert!(module.entry_points.iter().any(|e| e.name == entry), "{file} has no entry point {entry}");
    }
}
