#!/usr/bin/env bash
# A tokenizer made for the data against GPT-2's (docs/benchmarks.md): on Tiny
# Shakespeare, `llama-60m` with a BPE of 4,096 tokens trained by `murmur data
# add` against the GPT-2 preset of about its parameter count (`small`) with
# GPT-2's tokens, for the same training tokens and then for the same
# wall-clock time; prints each run's validation loss in bits per byte.
# Take it on a quiet machine (check `uptime`).
#
#   scripts/bpe-vs-gpt2.sh [--steps 300] [--batch 4] [--seq 256] [--murmur PATH]
set -euo pipefail
steps=300
batch=4
seq=256
murmur=""
while [ $# -gt 0 ]; do
    case "$1" in
        --steps) steps="$2"; shift 2 ;;
        --batch) batch="$2"; shift 2 ;;
        --seq) seq="$2"; shift 2 ;;
        --murmur) murmur="$2"; shift 2 ;;
        *) echo "bpe-vs-gpt2.sh: unknown argument $1 (use --steps, --batch, --seq, --murmur)" >&2; exit 2 ;;
    esac
done
root="$(cd "$(dirname "$0")/.." && pwd)"
if [ -z "$murmur" ]; then
    cargo build --release --quiet --manifest-path "$root/Cargo.toml" -p murmur-node --bin murmur
    murmur="$root/target/release/murmur"
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
text="$root/node/assets/datasets/shakespeare.txt"
"$murmur" data add "$text" --tokenizer bpe:4096 --out "$work/bpe.dataset" --json >/dev/null
"$murmur" data add "$text" --tokenizer gpt2 --out "$work/gpt2.dataset" --json >/dev/null
# One run: preset, dataset, steps; prints "params secs val_loss bits_per_byte".
run() {
    RAYON_NUM_THREADS=2 "$murmur" train --preset "$1" --data "$2" --steps "$3" --batch "$batch" \
        --seq "$seq" --val-every 0 --val-batches 12 --device cpu --json | python3 -c '
import json, sys
ev = [json.loads(l) for l in sys.stdin if l.startswith("{")]
start = next(e for e in ev if e.get("event") == "start")
done = next(e for e in ev if e.get("event") == "done")
print(start["params"], done["seconds"], done["val_loss"], done["val_bits_per_byte"])'
}
row() { # label, tokenizer, steps, then run's four numbers
    printf '%-16s  %-9s  %10s  %5s  %8s  %7.0f  %8.4f  %.4f\n' "$1" "$2" "$4" "$3" "$((${3} * batch * seq))" "$5" "$6" "$7"
}
echo "model             tokenizer      params  steps    tokens  seconds  val loss  bits/byte"
read -r lp ls lv lb <<< "$(run llama-60m "$work/bpe.dataset" "$steps")"
row llama-60m bpe:4096 "$steps" "$lp" "$ls" "$lv" "$lb"
read -r gp gs gv gb <<< "$(run small "$work/gpt2.dataset" "$steps")"
row "small (GPT-2)" gpt2 "$steps" "$gp" "$gs" "$gv" "$gb"
# The same wall-clock time as the Llama run: steps scaled by the time per step.
wsteps="$(python3 -c "print(max(1, round($steps * $ls / $gs)))")"
read -r wp ws wv wb <<< "$(run small "$work/gpt2.dataset" "$wsteps")"
row "small (GPT-2)" gpt2 "$wsteps" "$wp" "$ws" "$wv" "$wb"
