//! GPU backend tests: every shader validated by naga (no adapter needed),
//! every kernel against the CPU oracle (bodies shared with the CUDA backend in
//! `compute::oracle`), training against the CPU backend, determinism and
//! host↔device traffic. GPU tests get their adapter from
//! `testing::gpu_or_skip` (fail under MURMUR_REQUIRE_GPU=1, skip otherwise).
//! Shapes are tiny: CI runs them on lavapipe at about 1 GFLOP/s.

mod kernels;
mod shaders;
mod training;
