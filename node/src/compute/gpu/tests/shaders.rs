//! Every shader parses and validates with naga — no adapter needed — and
//! every .wgsl in shaders/ is embedded and reached by some kernel.

use crate::compute::gpu::pipelines::{Kernel, TileConfig, SHADERS};

fn validate(name: &str, src: &str) -> naga::Module {
    let module = match naga::front::wgsl::parse_str(src) {
        Ok(m) => m,
        Err(e) => panic!("{name}: WGSL parse error:\n{}", e.emit_to_string(src)),
    };
    let mut validator =
        naga::valid::Validator::new(naga::valid::ValidationFlags::all(), naga::valid::Capabilities::empty());
    if let Err(e) = validator.validate(&module) {
        panic!("{name}: validation error:\n{}", e.emit_to_string(src));
    }
    module
}

#[test]
fn every_shader_validates_with_naga() {
    for (name, src) in SHADERS {
        validate(name, src);
    }
}

#[test]
fn every_matmul_tile_configuration_validates() {
    let src = SHADERS.iter().find(|(n, _)| *n == "matmul.wgsl").map(|(_, s)| *s).unwrap_or_default();
    for tiles in TileConfig::ALL {
        let specialized = tiles.specialize(src);
        assert!(specialized.contains(&format!("const TILE_M: u32 = {}u;", tiles.tile_m)));
        validate(tiles.name, &specialized);
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
        Matmul,
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
        let src = SHADERS.iter().find(|(n, _)| *n == file).map(|(_, s)| *s).unwrap_or_default();
        let module = validate(file, src);
        assert!(module.entry_points.iter().any(|e| e.name == entry), "{file} has no entry point {entry}");
    }
}
