#!/usr/bin/env bash
# torch.matmul on the shapes and layouts `murmur bench gemm` times, for
# side-by-side runs (docs/benchmarks.md, "GEMM vs torch.matmul"). Uses the
# PyTorch venv of scripts/bench-torch.sh (~/.cache/murmur-bench-torch, or
# $MURMUR_TORCH_VENV; installed on first use).
#
#   scripts/bench-torch-matmul.sh [--threads 2] [--iters 5] [--only square]
#                                 [--precision fp32|bf16]
#
# Layouts as murmur's kernels see them (C is M×N, row-major):
#   NT  C  = A·Bᵀ   A: M×K, B: N×K   (forward)
#   NN  C += A·B    A: M×K, B: K×N   (input gradient)
#   TN  C += Aᵀ·B   A: K×M, B: K×N   (weight gradient)
# bf16 is bf16 inputs with the output in bf16 (PyTorch's CPU bf16 matmul,
# oneDNN, fp32 accumulation inside); murmur's bf16 GEMM writes fp32.
# Best of --iters after one warm-up, as `murmur bench gemm`. Take figures
# on a quiet machine (OpenMP spin-waits under load).
#
# Each line ends, as `murmur bench gemm`'s do, with how far apart the two
# CPUs were just before it: a cross-core round trip (node/src/train/
# handoff.rs, in C here, built with the system's cc into the venv; "-"
# without one). On the benchmark VM about 60 ns while the host keeps both
# vCPUs on one die and 350 ns while it does not (docs/benchmarks.md).
set -euo pipefail
# shellcheck source=scripts/torch-venv.sh
. "$(dirname "$0")/torch-venv.sh"
probe="$venv/murmur-handoff-probe.so"
if [ ! -e "$probe" ] && command -v cc >/dev/null; then
    cc -O2 -shared -fPIC -o "$probe" -x c - -lpthread <<'C' || rm -f "$probe"
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
enum { TRIPS = 2000, BATCHES = 5 };
static _Atomic unsigned flag;
static void *answer(void *unused) {
    for (unsigned i = 0; i < TRIPS * BATCHES; i++) {
        while (atomic_load_explicit(&flag, memory_order_acquire) != 2 * i + 1) __builtin_ia32_pause();
        atomic_store_explicit(&flag, 2 * i + 2, memory_order_release);
    }
    return unused;
}
static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}
static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
/* The median batch's round trip in ns. */
double round_trip_ns(void) {
    double times[BATCHES];
    pthread_t peer;
    atomic_store(&flag, 0);
    if (pthread_create(&peer, 0, answer, 0)) return -1;
    for (unsigned b = 0, i = 0; b < BATCHES; b++) {
        double start = now_ns();
        for (unsigned j = 0; j < TRIPS; j++, i++) {
            atomic_store_explicit(&flag, 2 * i + 1, memory_order_release);
            while (atomic_load_explicit(&flag, memory_order_acquire) != 2 * i + 2) __builtin_ia32_pause();
        }
        times[b] = (now_ns() - start) / TRIPS;
    }
    pthread_join(peer, 0);
    qsort(times, BATCHES, sizeof times[0], by_value);
    return times[BATCHES / 2];
}
C
fi
MURMUR_HANDOFF_PROBE="$probe" exec "$venv/bin/python" - "$@" <<'PY'
import argparse, ctypes, os, time
import torch

try:
    _probe = ctypes.CDLL(os.environ["MURMUR_HANDOFF_PROBE"]).round_trip_ns
    _probe.restype = ctypes.c_double
    def cores_apart():
        return f"{_probe():.0f}"
except OSError:
    def cores_apart():
        return "-"

ap = argparse.ArgumentParser(prog="bench-torch-matmul.sh")
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--iters", type=int, default=5)
ap.add_argument("--only", default="")
ap.add_argument("--precision", choices=["fp32", "bf16"], action="append")
a = ap.parse_args()
torch.set_num_threads(a.threads)
precisions = a.precision or ["fp32", "bf16"]

# The shapes of `murmur bench gemm` (node/src/compute/cpu/bench.rs).
SHAPES = [
    ("square", "NT", 1024, 1024, 1024), ("square", "NN", 1024, 1024, 1024), ("square", "TN", 1024, 1024, 1024),
    ("124m qkv", "NT", 256, 2304, 768), ("124m attproj", "NT", 256, 768, 768), ("124m fc", "NT", 256, 3072, 768),
    ("124m fcproj", "NT", 256, 768, 3072), ("124m fc dinp", "NN", 256, 768, 3072),
    ("124m fc dW", "TN", 3072, 768, 256), ("124m lm head", "NT", 256, 50304, 768),
    ("124m lm dinp", "NN", 256, 768, 50304), ("124m lm dW", "TN", 50304, 768, 256),
    ("c256 qkv", "NT", 256, 768, 256), ("c256 attproj", "NT", 256, 256, 256), ("c256 fc", "NT", 256, 1024, 256),
    ("c256 fcproj", "NT", 256, 256, 1024), ("c256 qkv dinp", "NN", 256, 256, 768),
    ("c256 fc dinp", "NN", 256, 256, 1024), ("c256 fcproj dinp", "NN", 256, 1024, 256),
    ("c256 qkv dW", "TN", 768, 256, 256), ("c256 fc dW", "TN", 1024, 256, 256),
    ("c256 fcproj dW", "TN", 256, 1024, 256),
]

def fill(n, seed):
    i = torch.arange(n, dtype=torch.int64)
    return (((i * 2654435761) ^ seed) % 1000).to(torch.float32) / 500.0 - 1.0

for name, layout, m, n, k in SHAPES:
    if a.only and a.only not in name:
        continue
    for prec in precisions:
        dt = torch.float32 if prec == "fp32" else torch.bfloat16
        if layout == "NT":
            A, B = fill(m * k, 1).view(m, k), fill(n * k, 2).view(n, k)
        elif layout == "NN":
            A, B = fill(m * k, 1).view(m, k), fill(k * n, 2).view(k, n)
        else:
            A, B = fill(k * m, 1).view(k, m), fill(k * n, 2).view(k, n)
        A, B = A.to(dt), B.to(dt)
        C = torch.zeros(m, n, dtype=dt)
        def run():
            if layout == "NT":
                torch.matmul(A, B.t(), out=C)
            elif layout == "NN":
                torch.addmm(C, A, B, out=C)
            else:
                torch.addmm(C, A.t(), B, out=C)
        apart = cores_apart()
        run()
        best = float("inf")
        for _ in range(max(1, a.iters)):
            t = time.perf_counter()
            run()
            best = min(best, time.perf_counter() - t)
        gflops = 2.0 * m * n * k / best / 1e9
        print(f"gemm {name:<14} {layout} {m}x{n}x{k} {'torch':>10} {prec}, {a.threads} threads: "
              f"{best * 1e3:8.2f} ms, {gflops:7.1f} GFLOP/s; cores {apart} ns apart", flush=True)
PY
