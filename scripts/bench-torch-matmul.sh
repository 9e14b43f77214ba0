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
set -euo pipefail
# shellcheck source=scripts/torch-venv.sh
. "$(dirname "$0")/torch-venv.sh"
exec "$venv/bin/python" - "$@" <<'PY'
import argparse, time
import torch

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
    ("c256 qkv", "NT", 256, 768, 256), ("c256 fc", "NT", 256, 1024, 256),
    ("c256 fcproj", "NT", 256, 256, 1024), ("c256 fc dW", "TN", 1024, 256, 256),
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
        run()
        best = float("inf")
        for _ in range(max(1, a.iters)):
            t = time.perf_counter()
            run()
            best = min(best, time.perf_counter() - t)
        gflops = 2.0 * m * n * k / best / 1e9
        print(f"gemm {name:<14} {layout} {m}x{n}x{k} {'torch':>10} {prec}, {a.threads} threads: "
              f"{best * 1e3:8.2f} ms, {gflops:7.1f} GFLOP/s", flush=True)
PY
