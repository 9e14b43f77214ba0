#!/usr/bin/env bash
# How far --precision bf16 ends from fp32, measured against fp32's own
# sensitivity (docs/benchmarks.md, "CPU backend vs PyTorch"). Trains the tiny preset on
# synthetic data for 600 steps at one seed, in fp32 and in bf16, each at the
# default peak learning rate and at nudged ones (±0.005% to ±0.07%), and
# prints every final val loss, then the median and range per precision.
# A nudge that small changes no hyperparameter that matters; what it shows is
# how far the run's end point moves under any perturbation at all, which is
# the yardstick a single bf16-vs-fp32 pair should be read against.
#
#   scripts/bf16-convergence.sh [--seed 1] [--steps 600] [--murmur PATH]
set -euo pipefail
seed=1
steps=600
murmur=""
while [ $# -gt 0 ]; do
    case "$1" in
        --seed) seed="$2"; shift 2 ;;
        --steps) steps="$2"; shift 2 ;;
        --murmur) murmur="$2"; shift 2 ;;
        *) echo "bf16-convergence.sh: unknown argument $1 (use --seed, --steps, --murmur)" >&2; exit 2 ;;
    esac
done
root="$(cd "$(dirname "$0")/.." && pwd)"
if [ -z "$murmur" ]; then
    cargo build --release --quiet --manifest-path "$root/Cargo.toml" -p murmur-node --bin murmur
    murmur="$root/target/release/murmur"
fi
# The default peak learning rate is 3e-3; the first entry is the unperturbed run.
lrs="0.003 0.0029985 0.002999 0.0029994 0.0029997 0.0030003 0.0030006 0.003001 0.0030015 0.003002"
for precision in fp32 bf16; do
    losses=""
    for lr in $lrs; do
        loss=$("$murmur" train --preset tiny --data synthetic --steps "$steps" --seed "$seed" \
            --precision "$precision" --lr "$lr" 2>&1 | sed -n 's/^done: .*val loss \([0-9.]*\),.*/\1/p')
        if [ -z "$loss" ]; then
            echo "bf16-convergence.sh: murmur train --precision $precision --lr $lr printed no final val loss" >&2
            exit 1
        fi
        echo "$precision lr $lr val loss $loss"
        losses="$losses $loss"
    done
    echo "$losses" | tr ' ' '\n' | sed '/^$/d' | sort -n | awk -v p="$precision" '
        { v[NR] = $1 }
        END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2;
              printf "%s: median %.4f, range %.4f-%.4f over %d runs\n", p, m, v[1], v[NR], NR }'
done
