//! Whether a run fits this machine: the memory a node needs at least to
//! train a RunSpec, from the spec and its model, against the machine's
//! physical memory — checked before anything of the run is allocated, so a
//! run too big for the machine is refused with a clear error instead of
//! aborting the process on allocation.

use murmur_protocol::{DataRef, RunSpec};

use super::spec::{state_len, SpecError};
use crate::compute::cpu::CpuBackend;
use crate::compute::device::Chosen;
use crate::model::{MemoryNeed, ModelConfig};

/// Bytes a node needs at least to train `spec`: two states (the one
/// trained from and the next), `model` (on the CPU backend the model's
/// buffers at the run's shape, `host_model_need`; a GPU keeps them in its
/// own memory), and in a dataset run the round's windows, which are fetched
/// before the round trains (a u32 input and target a token).
pub fn run_bytes(spec: &RunSpec, cfg: &ModelConfig, model: u64) -> u64 {
    let batch = u64::from(spec.inner.batch_size);
    let t = cfg.max_seq_len as u64;
    let states = state_len(spec).saturating_mul(2);
    let windows = match spec.data_ref() {
        Ok(DataRef::Dataset { .. }) => {
            u64::from(spec.inner_steps).saturating_mul(batch).saturating_mul(t).saturating_mul(8)
        }
        _ => 0,
    };
    states.saturating_add(model).saturating_add(windows)
}

/// The host memory the model takes at the run's shape on `device`: its
/// buffers counted on the CPU backend (`MemoryNeed`), with or without
/// activation checkpointing; 0 on a GPU, whose buffers are its own.
pub fn host_model_need(spec: &RunSpec, cfg: &ModelConfig, device: Chosen, checkpointing: bool) -> u64 {
    let precision = match device {
        Chosen::Cpu(precision) => precision,
        // A GPU (no such variant in a build without the GPU backends).
        #[allow(unreachable_patterns)]
        _ => return 0,
    };
    let Ok(backend) = CpuBackend::from_env(precision) else { return 0 };
    let shape = (spec.inner.batch_size as usize, cfg.max_seq_len);
    MemoryNeed::of(&backend, cfg, shape, checkpointing).total()
}

/// Refuse a run that needs more than `available` bytes (`physical_memory`;
/// None: not known, nothing is refused here and the RunSpec's own bounds
/// still hold). `model` is `host_model_need`'s; `checkpointed` says what it
/// would be with activation checkpointing, which a Llama offers (None: no
/// such option, or it is on already).
pub fn check_fits(
    spec: &RunSpec,
    cfg: &ModelConfig,
    (device, model, checkpointed): (&'static str, u64, Option<u64>),
    available: Option<u64>,
) -> Result<(), SpecError> {
    let Some(available) = available else { return Ok(()) };
    let need = run_bytes(spec, cfg, model);
    if need <= available {
        return Ok(());
    }
    let gib = |b: u64| b as f64 / f64::from(1u32 << 30);
    let with_checkpointing = checkpointed
        .map(|m| run_bytes(spec, cfg, m))
        .filter(|&n| n <= available)
        .map_or_else(String::new, |n| format!("start this node with --checkpointing ({:.1} GiB), ", gib(n)));
    Err(SpecError::TooBig {
        need_gib: gib(need),
        have_gib: gib(available),
        batch: spec.inner.batch_size,
        context: spec.model.context_len,
        steps: spec.inner_steps,
        device,
        with_checkpointing,
    })
}

/// The machine's physical memory in bytes: `MemTotal` of /proc/meminfo on
/// Linux; None elsewhere or when it cannot be read.
pub fn physical_memory() -> Option<u64> {
    crate::compute::cpu::meminfo("MemTotal")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compute::cpu::Precision;
    use crate::runtime::spec::{model_config, run_spec, RunParams};

    const GIB: u64 = 1 << 30;

    /// `check_fits`' device argument for the CPU backend in fp32.
    fn on_cpu(spec: &RunSpec, cfg: &ModelConfig) -> (&'static str, u64, Option<u64>) {
        ("cpu", host_model_need(spec, cfg, Chosen::Cpu(Precision::Fp32), false), None)
    }

    #[test]
    fn a_run_needing_more_memory_than_the_machine_has_is_refused() {
        // GPT-2 small at 1024 sequences a step: within the RunSpec's 2^20
        // tokens a step, but about 2.4 TB of activations on the CPU.
        let p = RunParams { preset: "gpt2-124m".into(), batch_size: 1024, ..RunParams::default() };
        let spec = run_spec(&p).expect("spec");
        spec.validate().expect("within the spec's bounds");
        let cfg = model_config(&spec).expect("config");
        let err =
            check_fits(&spec, &cfg, on_cpu(&spec, &cfg), Some(64 * GIB)).expect_err("2.4 TB fit in 64 GiB");
        let msg = err.to_string();
        assert!(msg.contains("64.0 GiB") && msg.contains("batch 1024 × 1024 tokens"), "{msg}");
        assert!(msg.contains("--batch"), "{msg}");
        // On a GPU the activations are the device's: the host holds states.
        assert!(check_fits(&spec, &cfg, ("gpu", 0, None), Some(64 * GIB)).is_ok());
        // The default run fits in a gigabyte; an unknown machine refuses nothing.
        let tiny = run_spec(&RunParams::default()).expect("spec");
        let tiny_cfg = model_config(&tiny).expect("config");
        assert!(check_fits(&tiny, &tiny_cfg, on_cpu(&tiny, &tiny_cfg), Some(GIB)).is_ok());
        assert!(check_fits(&spec, &cfg, on_cpu(&spec, &cfg), None).is_ok());
    }

    #[test]
    fn a_llama_run_that_fits_only_checkpointed_says_so() {
        let p = RunParams { preset: "llama-400m".into(), batch_size: 16, ..RunParams::default() };
        let spec = run_spec(&p).expect("spec");
        spec.validate().expect("within the spec's bounds");
        let cfg = model_config(&spec).expect("config");
        let cpu = Chosen::Cpu(Precision::Fp32);
        let (full, kept) =
            (host_model_need(&spec, &cfg, cpu, false), host_model_need(&spec, &cfg, cpu, true));
        assert!(kept < full, "{kept} vs {full}");
        let room = run_bytes(&spec, &cfg, kept);
        let err =
            check_fits(&spec, &cfg, ("cpu", full, Some(kept)), Some(room)).expect_err("too big").to_string();
        assert!(err.contains("start this node with --checkpointing (") && err.contains("--batch"), "{err}");
        assert!(check_fits(&spec, &cfg, ("cpu", kept, None), Some(room)).is_ok());
        // Where checkpointing would not fit either, it is not offered.
        let err = check_fits(&spec, &cfg, ("cpu", full, Some(kept)), Some(room - 1)).expect_err("too big");
        assert!(!err.to_string().contains("--checkpointing"), "{err}");
    }

    #[test]
    fn a_dataset_run_counts_the_windows_of_a_round() {
        // 1000 steps of 4096 × 64 tokens: 262 M tokens, 2.1 GB of windows.
        let data = format!("dataset:{}:100", "ab".repeat(32));
        let p = RunParams { data, batch_size: 4096, inner_steps: 1000, ..RunParams::default() };
        let spec = run_spec(&p).expect("spec");
        spec.validate().expect("within the spec's bounds");
        let cfg = model_config(&spec).expect("config");
        assert!(run_bytes(&spec, &cfg, 0) >= 262_144_000 * 8);
        assert!(check_fits(&spec, &cfg, ("gpu", 0, None), Some(GIB)).is_err());
        let synthetic = RunParams { batch_size: 4096, inner_steps: 1000, ..RunParams::default() };
        let spec = run_spec(&synthetic).expect("spec");
        assert!(run_bytes(&spec, &cfg, 0) < GIB / 16);
    }

    #[test]
    fn physical_memory_is_read_from_meminfo() {
        if cfg!(target_os = "linux") {
            assert!(physical_memory().is_some_and(|b| b > 0));
        }
    }
}
