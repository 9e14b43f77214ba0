#!/usr/bin/env bash
# Side-by-side CPU training throughput: llm.c's train_gpt2.c against
# `murmur bench train`, on one shape, in one run, on this machine.
#
#   scripts/bench-llmc.sh /path/to/llm.c [LAYERS CHANNELS HEADS VOCAB BATCH SEQ]
#
# llm.c is not vendored: pass a local checkout of github.com/karpathy/llm.c.
# Both sides use 2 threads (OMP_NUM_THREADS / RAYON_NUM_THREADS), fp32.
set -euo pipefail
LLMC=${1:?usage: $0 /path/to/llm.c [L C NH V B T]}
L=${2:-4}; C=${3:-256}; NH=${4:-4}; V=${5:-256}; B=${6:-4}; T=${7:-64}
THREADS=${THREADS:-2}; WARMUP=${WARMUP:-3}; STEPS=${STEPS:-30}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT="$ROOT/target/llmc-bench"
mkdir -p "$OUT"
gcc -Ofast -march=native -fopenmp -DOMP -Wno-unused-result -I"$LLMC" -I"$LLMC/llmc" \
    "$ROOT/scripts/llmc/llmc_bench.c" -lm -o "$OUT/llmc_bench"
cargo build --release -q -p murmur-node --bin murmur --manifest-path "$ROOT/Cargo.toml"
echo "# shape: layers=$L channels=$C heads=$NH vocab=$V batch=$B seq=$T, $THREADS threads"
OMP_NUM_THREADS=$THREADS "$OUT/llmc_bench" "$L" "$C" "$NH" "$V" "$B" "$T" "$WARMUP" "$STEPS"
RAYON_NUM_THREADS=$THREADS "$ROOT/target/release/murmur" bench train --device cpu --json \
    --layers "$L" --channels "$C" --heads "$NH" --vocab "$V" --batch "$B" --seq "$T" \
    --warmup "$WARMUP" --steps "$STEPS"
