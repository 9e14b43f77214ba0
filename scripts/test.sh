#!/usr/bin/env bash
# The test command (README's second command): builds the release binaries the
# multi-process tests start, then runs every test in the workspace.
#
# GPU tests use the first Vulkan/Metal/DX12 adapter wgpu finds (lavapipe in
# CI). With MURMUR_REQUIRE_GPU=1 a missing adapter fails them; otherwise they
# say so and skip. MURMUR_TEST_FEATURES adds cargo features to every build
# and test here (CI: `murmur-node/cuda`, so the CUDA backend's tests run in
# the same build instead of a second one).
set -euo pipefail
cd "$(dirname "$0")/.."
export LP_NUM_THREADS="${LP_NUM_THREADS:-2}"
features=()
[ -n "${MURMUR_TEST_FEATURES:-}" ] && features=(--features "$MURMUR_TEST_FEATURES")
cargo build --release --workspace --bins "${features[@]}"
cargo test --release --workspace "${features[@]}" "$@"

# The CPU backend's instruction-set paths, each forced in turn (the ones this
# CPU has, as `murmur devices` lists them, widest first), on the test binary
# built above (`--workspace --lib`: `-p` would build murmur-node a second
# time): the gradient check, the determinism test and the GPU-vs-CPU oracle
# tests run on each. The widest path is not forced again: the unforced run
# above used it wherever code builds a backend, and the model tests checked
# every path in process.
if [ $# -eq 0 ]; then
    line=$("${CARGO_TARGET_DIR:-target}/release/murmur" devices | sed -n 's/^CPU paths: \([a-z0-9 ]*\) (.*/\1/p')
    read -r -a paths <<<"$line"
    [ "${#paths[@]}" -gt 0 ] || { echo "test.sh: murmur devices listed no CPU paths" >&2; exit 1; }
    echo "== CPU paths: ${paths[*]} (${paths[0]} ran above)"
    for isa in "${paths[@]:1}"; do
        echo "== CPU path forced: MURMUR_CPU_ISA=$isa"
        MURMUR_CPU_ISA="$isa" cargo test --release --workspace --lib "${features[@]}" -- \
            model::tests compute::cpu compute::gpu::tests
    done
fi
