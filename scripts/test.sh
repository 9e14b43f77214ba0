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
