#!/usr/bin/env bash
# Side-by-side rounds on one shape (docs/benchmarks.md, "CPU backend vs PyTorch"): each round
# runs `murmur bench train --device cpu` in fp32, then PyTorch eager fp32
# (scripts/bench-torch.sh), then murmur with --precision bf16, all with 2
# threads, so the three see the same moments of the machine. Prints every
# round, then per side the median, range and spread (range over median) of
# ms/step, and the per-round ratios PyTorch ÷ murmur (tokens/s of murmur over
# PyTorch's) as median and range. Each murmur run also reports how far apart
# the host has put the two CPUs (a cross-core round trip before and after
# its steps: about 60 ns near, 350 ns far on the benchmark VM, where far
# slows every step); the round prints the largest of the four. Take figures
# on a quiet machine (check `uptime`); nothing is dropped.
#
#   scripts/bench-cpu-vs-torch.sh [--rounds 8] [--steps 60] [--murmur PATH]
#                                 [-- shape flags, e.g. --layers 12 --channels
#                                  768 --heads 12 --vocab 50257]
set -euo pipefail
rounds=8
steps=60
murmur=""
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) rounds="$2"; shift 2 ;;
        --steps) steps="$2"; shift 2 ;;
        --murmur) murmur="$2"; shift 2 ;;
        --) shift; break ;;
        *) echo "bench-cpu-vs-torch.sh: unknown argument $1 (use --rounds, --steps, --murmur, then -- and shape flags)" >&2; exit 2 ;;
    esac
done
shape=("$@")
root="$(cd "$(dirname "$0")/.." && pwd)"
if [ -z "$murmur" ]; then
    cargo build --release --quiet --manifest-path "$root/Cargo.toml" -p murmur-node --bin murmur
    murmur="$root/target/release/murmur"
fi
ms() { sed -n 's/.* \([0-9.]*\) ms\/step.*/\1/p' <<< "$1" | head -1; }
apart() { sed -n 's/.*cores \([0-9-]*\)\/\([0-9-]*\) ns apart.*/\1 \2/p' <<< "$1" | head -1; }
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
echo "round  murmur_fp32  torch_fp32  murmur_bf16   (ms/step; load average before the round; cores apart, ns)"
for r in $(seq "$rounds"); do
    load="$(cut -d' ' -f1 /proc/loadavg)"
    fl="$(RAYON_NUM_THREADS=2 "$murmur" bench train --device cpu --steps "$steps" "${shape[@]}")"
    t="$("$root/scripts/bench-torch.sh" --threads 2 --steps "$steps" "${shape[@]}")"
    bl="$(RAYON_NUM_THREADS=2 "$murmur" bench train --device cpu --precision bf16 --steps "$steps" "${shape[@]}")"
    f="$(ms "$fl")" t="$(ms "$t")" b="$(ms "$bl")"
    far="$(echo "$(apart "$fl") $(apart "$bl")" | tr ' ' '\n' | { grep -v -- - || true; } | sort -n | tail -1)"
    printf '%5d  %11s  %10s  %11s   (load %s; cores %s ns apart)\n' "$r" "$f" "$t" "$b" "$load" "${far:--}"
    echo "$f $t $b" >> "$out"
done
summary() { # column, label
    sort -n | awk -v label="$1" '{v[NR]=$1} END {
        n=NR; med=(n%2)?v[(n+1)/2]:(v[n/2]+v[n/2+1])/2
        printf "%-28s median %.4g  range %.4g-%.4g  spread %.0f%%\n", label, med, v[1], v[n], 100*(v[n]-v[1])/med }'
}
awk '{print $1}' "$out" | summary "murmur fp32 ms/step"
awk '{print $2}' "$out" | summary "PyTorch fp32 ms/step"
awk '{print $3}' "$out" | summary "murmur bf16 ms/step"
awk '{print $2/$1}' "$out" | summary "fp32 ÷ PyTorch (per round)"
awk '{print $2/$3}' "$out" | summary "bf16 ÷ PyTorch fp32"
