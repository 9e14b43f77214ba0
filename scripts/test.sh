#!/usr/bin/env bash
# The test command (README's second command): builds the release binaries the
# multi-process tests start, then runs every test in the workspace.
#
# GPU tests use the first Vulkan/Metal/DX12 adapter wgpu finds (lavapipe in
# CI). With MURMUR_REQUIRE_GPU=1 a missing adapter fails them; otherwise they
# say so and skip.
set -euo pipefail
cd "$(dirname "$0")/.."
export LP_NUM_THREADS="${LP_NUM_THREADS:-2}"
cargo build --release --workspace --bins
cargo test --release --workspace "$@"

# The CPU backend's instruction-set paths, each forced in turn (the ones this
# CPU has): the gradient check, the determinism test and the GPU-vs-CPU
# oracle tests run on each. (The unforced run above checks every path in
# process too; this also covers code that builds its own CpuBackend.)
if [ $# -eq 0 ]; then
    flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)
    has() { for f in "$@"; do [[ " $flags " == *" $f "* ]] || return 1; done; }
    paths=(portable)
    has avx2 fma && paths+=(avx2)
    has avx2 fma avx512f avx512bw avx512vl && paths+=(avx512)
    has avx2 fma avx512f avx512bw avx512vl avx512_bf16 && paths+=(avx512bf16)
    for isa in "${paths[@]}"; do
        echo "== CPU path forced: MURMUR_CPU_ISA=$isa"
        MURMUR_CPU_ISA="$isa" cargo test --release -p murmur-node --lib -- model::tests compute::cpu compute::gpu::tests
    done
fi
