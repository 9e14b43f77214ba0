#!/usr/bin/env bash
# Checks on a lent NVIDIA machine (docs/benchmarks.md, "GPU table"): the
# binaries are built here, carried there in one folder, and one command runs
# every GPU test and measurement, so a short lease is spent running, not
# setting up.
#
#   scripts/gpu-kit.sh pack [KIT]        # here: build, strip and fetch into KIT (default gpu-kit/)
#   scripts/gpu-kit.sh run [KIT] [--bench] [--cuda-only] [--profile]   # there: set up, test, measure; logs into $OUT (or KIT/out)
#
# pack builds `murmur` and the murmur-node test binary in release with the
# `cuda` feature, strips and gzips them, and downloads Debian's Vulkan loader and
# glvnd libraries (the NVIDIA Vulkan driver needs glvnd's dispatch; the
# lent machine has the driver but not these). With MURMUR_BASELINE set to
# another `murmur` binary (an earlier commit's, built with `--features
# cuda`), pack carries it too and run times it beside this one. The kit
# must stay under the device tool's 64 MiB carry limit; pack says its size.
# run unpacks the libraries, links the machine's CUDA 13 libraries under
# the CUDA 12 sonames the backend opens (MURMUR_CUDA_LIB_DIR), runs the CUDA
# tests under MURMUR_REQUIRE_CUDA=1 MURMUR_REQUIRE_NVRTC=1 and the wgpu tests
# under MURMUR_REQUIRE_GPU=1 (not with --cuda-only), and with --bench times
# GPT-2 124M training steps on CUDA (and the baseline's; at B8 T1024 on
# wgpu too, fp32 and f16, unless --cuda-only) beside PyTorch eager fp32 on
# the same GPU (the machine's own PyTorch, in
# $MURMUR_TORCH_VENV, default /opt/torch/.venv) at B8 T1024, B32 T256 and
# B4 T64, three alternated rounds, each with the device's peak memory
# (nvidia-smi every 50 ms), then one B4 T2048 step series. With --profile,
# one B8 T1024 step runs under Nsight Compute (ncu), which lists each
# kernel's GPU time. Every log is kept in the output folder; the exit status
# is the tests'.
set -euo pipefail
cd "$(dirname "$0")/.."
mode="${1:-}"
kit="${2:-gpu-kit}"
case "$kit" in --*) kit=gpu-kit ;; esac

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
    if [ -n "${MURMUR_BASELINE:-}" ]; then
        strip -o "$kit/bin/murmur-base" "$MURMUR_BASELINE"
        gzip -9 "$kit/bin/murmur-base"
    fi
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

# Runs "$@" while nvidia-smi samples the device's memory; prints the peak.
with_peak_memory() {
    local samples
    samples=$(mktemp)
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 50 > "$samples" 2>/dev/null &
    local sampler=$!
    "$@" || true
    kill "$sampler" 2>/dev/null || true
    wait "$sampler" 2>/dev/null || true
    echo "peak device memory: $(sort -n "$samples" | tail -n 1) MiB"
    rm -f "$samples"
}

run() {
    local bench="$1" wgpu="$2" profile="$3"
    local out="${OUT:-$kit/out}"
    mkdir -p "$out" "$kit/sys" "$kit/run"
    for deb in "$kit"/debs/*.deb; do dpkg-deb -x "$deb" "$kit/sys"; done
    for b in murmur node-tests murmur-base; do
        [ -e "$kit/bin/$b.gz" ] || continue
        gzip -d -c "$kit/bin/$b.gz" > "$kit/run/$b" && chmod +x "$kit/run/$b"
    done
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
    local status=0 gpt="--layers 12 --channels 768 --heads 12 --vocab 50257"
    MURMUR_REQUIRE_CUDA=1 MURMUR_REQUIRE_NVRTC=1 "$kit/run/node-tests" --test-threads 1 compute::cuda \
        > "$out/cuda-tests.txt" 2>&1 || status=1
    tail -n 3 "$out/cuda-tests.txt"
    if [ "$wgpu" = yes ]; then
        MURMUR_REQUIRE_GPU=1 "$kit/run/node-tests" --test-threads 1 compute::gpu \
            > "$out/gpu-tests.txt" 2>&1 || status=1
        tail -n 3 "$out/gpu-tests.txt"
    fi
    if [ "$bench" = yes ]; then
        export MURMUR_TORCH_VENV="${MURMUR_TORCH_VENV:-/opt/torch/.venv}"
        local shape steps bin
        for round in 1 2 3; do
            for shape in "--batch 8 --seq 1024" "--batch 32 --seq 256" "--batch 4 --seq 64"; do
                steps="--warmup 2 --steps 5"
                [ "$shape" = "--batch 4 --seq 64" ] && steps="--warmup 3 --steps 20"
                echo "== round $round: $shape"
                for bin in murmur murmur-base; do
                    [ -x "$kit/run/$bin" ] || continue
                    echo "-- $bin cuda"
                    # shellcheck disable=SC2086
                    with_peak_memory "$kit/run/$bin" bench train --device cuda $gpt $shape $steps
                    [ "$wgpu" = yes ] && [ "$shape" = "--batch 8 --seq 1024" ] || continue
                    for precision in fp32 f16; do
                        echo "-- $bin gpu $precision"
                        # shellcheck disable=SC2086
                        with_peak_memory "$kit/run/$bin" bench train --device gpu --precision $precision $gpt $shape \
                            --warmup 1 --steps 3
                    done
                done
                echo "-- pytorch eager fp32"
                # shellcheck disable=SC2086
                with_peak_memory scripts/bench-torch.sh --device cuda $gpt $shape $steps
            done 2>&1
        done | tee "$out/bench.txt"
        {
            echo "== B4 T2048"
            # shellcheck disable=SC2086
            with_peak_memory "$kit/run/murmur" bench train --device cuda $gpt --batch 4 --seq 2048 --warmup 1 --steps 3
        } 2>&1 | tee -a "$out/bench.txt"
    fi
    if [ "$profile" = yes ]; then
        local ncu
        ncu=$(command -v ncu || find /opt/nvidia /usr/local -name ncu -type f 2>/dev/null | head -n 1 || true)
        if [ -n "$ncu" ]; then
            # shellcheck disable=SC2086
            timeout 150 "$ncu" --clock-control none --metrics gpu__time_duration.sum --print-summary per-kernel \
                "$kit/run/murmur" bench train --device cuda $gpt --batch 8 --seq 1024 --warmup 0 --steps 1 \
                > "$out/profile.txt" 2>&1 || true
            tail -n 40 "$out/profile.txt"
        else
            echo "gpu-kit: no ncu on this machine: no profile"
        fi
    fi
    return "$status"
}

case "$mode" in
    pack) pack ;;
    run)
        run "$(case " $* " in *" --bench "*) echo yes ;; *) echo no ;; esac)" \
            "$(case " $* " in *" --cuda-only "*) echo no ;; *) echo yes ;; esac)" \
            "$(case " $* " in *" --profile "*) echo yes ;; *) echo no ;; esac)"
        ;;
    *)
        echo "usage: scripts/gpu-kit.sh pack [KIT] | run [KIT] [--bench] [--cuda-only] [--profile]" >&2
        exit 2
        ;;
esac
