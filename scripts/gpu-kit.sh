#!/usr/bin/env bash
# Checks on a lent NVIDIA machine (docs/benchmarks.md, "GPU table"): the
# binaries are built here, carried there in one folder, and one command runs
# every GPU test and measurement, so a short lease is spent running, not
# setting up.
#
#   scripts/gpu-kit.sh pack [KIT]        # here: build, strip and fetch into KIT (default gpu-kit/)
#   scripts/gpu-kit.sh run [KIT] [--bench]   # there: set up, test, measure; logs into $OUT (or KIT/out)
#
# pack builds `murmur` and the murmur-node test binary in release with the
# `cuda` feature, strips and gzips them, and downloads Debian's Vulkan loader and
# glvnd libraries (the NVIDIA Vulkan driver needs glvnd's dispatch; the
# lent machine has the driver but not these). The kit must stay under the
# device tool's 64 MiB carry limit; pack says its size.
# run unpacks the libraries, links the machine's CUDA 13 libraries under
# the CUDA 12 sonames the backend opens (MURMUR_CUDA_LIB_DIR), runs the CUDA
# tests under MURMUR_REQUIRE_CUDA=1 MURMUR_REQUIRE_NVRTC=1 and the wgpu tests
# under MURMUR_REQUIRE_GPU=1, and with --bench times training steps on CUDA
# and wgpu beside PyTorch on the same GPU (the machine's own PyTorch, in
# $MURMUR_TORCH_VENV, default /opt/torch/.venv). Every log is kept in the
# output folder; the exit status is the tests'.
set -euo pipefail
cd "$(dirname "$0")/.."
mode="${1:-}"
kit="${2:-gpu-kit}"
[ "$kit" = "--bench" ] && kit=gpu-kit

pack() {
    mkdir -p "$kit/bin" "$kit/debs"
    cargo build --release -p murmur-node --features cuda --bin murmur
    local tests
    tests=$(cargo test --release -p murmur-node --features cuda --lib --no-run --message-format=json 2>/dev/null |
        python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("profile", {}).get("test") and m.get("executable"):
        print(m["executable"])' | tail -n 1)
    [ -n "$tests" ] || { echo "gpu-kit: the murmur-node test binary was not built" >&2; exit 1; }
    rm -f "$kit"/bin/*
    strip -o "$kit/bin/murmur" target/release/murmur
    strip -o "$kit/bin/node-tests" "$tests"
    gzip -9 "$kit/bin/murmur" "$kit/bin/node-tests"
    (cd "$kit/debs" && apt-get download -q libvulkan1 libglvnd0 libegl1 libgl1 libglx0 libgles2 libopengl0)
    du -sh "$kit"
    local bytes
    bytes=$(du -sb "$kit" | cut -f1)
    if [ "$bytes" -gt $((64 << 20)) ]; then
        echo "gpu-kit: $kit is $bytes bytes, over the 64 MiB a device call carries" >&2
        exit 1
    fi
}

# The machine's CUDA libraries under the sonames cudarc opens.
cuda_links() {
    local links="$kit/cuda-links" name found
    mkdir -p "$links"
    for name in nvrtc cublas cublasLt; do
        found=$(find /usr/local /usr/lib /opt -name "lib$name.so.1[23]*" -not -name '*.alt*' 2>/dev/null |
            sort | tail -n 1)
        if [ -z "$found" ]; then
            echo "gpu-kit: lib$name.so.12 or .13 not found" >&2
            continue
        fi
        ln -sf "$found" "$links/lib$name.so.12"
        echo "lib$name.so.12 -> $found"
    done
    MURMUR_CUDA_LIB_DIR="$(cd "$links" && pwd)"
    export MURMUR_CUDA_LIB_DIR
}

run() {
    local bench="$1"
    local out="${OUT:-$kit/out}"
    mkdir -p "$out" "$kit/sys" "$kit/run"
    for deb in "$kit"/debs/*.deb; do dpkg-deb -x "$deb" "$kit/sys"; done
    for b in murmur node-tests; do gzip -d -c "$kit/bin/$b.gz" > "$kit/run/$b" && chmod +x "$kit/run/$b"; done
    export LD_LIBRARY_PATH="$PWD/$kit/sys/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    # Tests that read the source tree find it where it was built.
    local built
    built=$(grep -a -o -m 1 '/[[:alnum:]/_.+-]*/node/\.\./shaders/cuda' "$kit/run/node-tests" | head -n 1 |
        sed 's#/node/\.\./shaders/cuda##' || true)
    if [ -n "$built" ] && [ ! -e "$built" ]; then
        mkdir -p "$(dirname "$built")" && ln -s "$PWD" "$built"
    fi
    {
        date -u
        nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true
        "$kit/run/murmur" devices || true
    } 2>&1 | tee "$out/machine.txt"
    cuda_links >> "$out/machine.txt" 2>&1
    tail -n 3 "$out/machine.txt"
    export LP_NUM_THREADS=16
    local status=0
    MURMUR_REQUIRE_CUDA=1 MURMUR_REQUIRE_NVRTC=1 "$kit/run/node-tests" --test-threads 1 compute::cuda \
        > "$out/cuda-tests.txt" 2>&1 || status=1
    MURMUR_REQUIRE_GPU=1 "$kit/run/node-tests" --test-threads 1 compute::gpu \
        > "$out/gpu-tests.txt" 2>&1 || status=1
    tail -n 3 "$out/cuda-tests.txt" "$out/gpu-tests.txt"
    if [ "$bench" = yes ]; then
        export MURMUR_TORCH_VENV="${MURMUR_TORCH_VENV:-/opt/torch/.venv}"
        local gpt="--layers 12 --channels 768 --heads 12 --vocab 50257 --batch 8 --seq 1024"
        for round in 1 2; do
            echo "== round $round"
            # shellcheck disable=SC2086
            {
                "$kit/run/murmur" bench train --device cuda --preset llama-150m --batch 8 --seq 1024 --warmup 1 --steps 3
                if "$MURMUR_TORCH_VENV/bin/python" -c 'import transformers' 2>/dev/null; then
                    scripts/bench-torch.sh --device cuda --preset llama-150m --batch 8 --seq 1024 --warmup 2 --steps 5 || true
                else
                    echo "no transformers in $MURMUR_TORCH_VENV: no PyTorch Llama reference"
                fi
                "$kit/run/murmur" bench train --device cuda $gpt --warmup 1 --steps 3
                "$kit/run/murmur" bench train --device gpu $gpt --warmup 1 --steps 3
                scripts/bench-torch.sh --device cuda $gpt --warmup 2 --steps 5 || true
            } 2>&1
        done | tee "$out/bench.txt"
    fi
    return "$status"
}

case "$mode" in
    pack) pack ;;
    run) run "$(case " $* " in *" --bench "*) echo yes ;; *) echo no ;; esac)" ;;
    *)
        echo "usage: scripts/gpu-kit.sh pack [KIT] | run [KIT] [--bench]" >&2
        exit 2
        ;;
esac
