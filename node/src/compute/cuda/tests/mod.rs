//! CUDA backend tests: every `.cu` file compiled by NVRTC for sm_80 and sm_90
//! (no GPU needed; fails under MURMUR_REQUIRE_NVRTC=1 without NVRTC), and, on
//! a machine with a CUDA device, the same oracle tests as the wgpu backend
//! (bodies shared in `compute::oracle`; fail under MURMUR_REQUIRE_CUDA=1
//! without a device, skip otherwise).

mod kernels;
mod programs;
mod training;
