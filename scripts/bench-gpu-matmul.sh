#!/usr/bin/env bash
# The wgpu matmul against torch.matmul on the same GPU (docs/benchmarks.md,
# "GPU table"): `murmur bench kernels` in every matmul configuration (fp32:
# large, wide and the per-shape choice; f16 inputs: coop-small, coop-large
# and the per-shape choice) and torch.matmul in fp32 (TF32 off) and f16,
# alternated round by round, at 256×768×768 (the model's rows) and 4096³.
# Prints each configuration's median GFLOP/s over the rounds (with the range),
# its share of the GPU's peak, and its ratio to the fp32 tiled kernel
# ("large") and to torch in the same precision.
#
#   scripts/bench-gpu-matmul.sh [--rounds 3] [--murmur target/release/murmur]
#                               [--fp32-peak 67] [--f16-peak 989] [--raw FILE]
#
# Peaks in TFLOP/s, dense; the defaults are NVIDIA's H100 SXM / H200 figures
# (fp32 without tensor cores; f16 on tensor cores). Needs a Python with CUDA
# PyTorch as `python3` (or $PYTHON) and a GPU both wgpu (Vulkan) and CUDA see.
set -euo pipefail
exec "${PYTHON:-python3}" - "$@" <<'PY'
import argparse, json, statistics, subprocess, sys, time

ap = argparse.ArgumentParser(prog="bench-gpu-matmul.sh")
ap.add_argument("--rounds", type=int, default=3)
ap.add_argument("--murmur", default="target/release/murmur")
ap.add_argument("--fp32-peak", type=float, default=67.0)
ap.add_argument("--f16-peak", type=float, default=989.0)
ap.add_argument("--iters", type=int, default=5)
ap.add_argument("--raw", help="append every sample to this file (JSON lines)")
a = ap.parse_args()

import torch

SHAPES = [(256, 768, 768), (4096, 4096, 4096)]  # rows, channels, out_channels
MURMUR = [("fp32", "large"), ("fp32", "wide"), ("fp32", None),
          ("f16", "coop-small"), ("f16", "coop-large"), ("f16", None)]

def murmur(rows, c, oc, precision, tiles):
    cmd = [a.murmur, "bench", "kernels", "--device", "gpu", "--rows", str(rows), "--channels", str(c),
           "--out-channels", str(oc), "--elems", "1024", "--logit-rows", "1", "--vocab", "128",
           "--iters", str(a.iters), "--precision", precision, "--json"]
    if tiles:
        cmd += ["--tiles", tiles]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        print(f"  {' '.join(cmd[1:])}: failed: {r.stderr.strip()[-300:]}", file=sys.stderr)
        return []
    out = json.loads(r.stdout)
    name = f"murmur {precision} {tiles or 'auto'}"
    return [(name, m["layout"], m["gflops"], m["kernel"]) for m in out["matmul"]]

def torch_side(rows, c, oc, dtype):
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = "cuda"
    x = torch.rand(rows, c, device=dev, dtype=dtype)
    w = torch.rand(oc, c, device=dev, dtype=dtype)
    d = torch.rand(rows, oc, device=dev, dtype=dtype)
    out = []
    for layout, f, (m, n, k) in [("NT", lambda: x @ w.T, (rows, oc, c)),
                                 ("NN", lambda: d @ w, (rows, c, oc)),
                                 ("TN", lambda: d.T @ x, (oc, c, rows))]:
        f(); torch.cuda.synchronize()
        t = time.perf_counter(); f(); torch.cuda.synchronize()
        reps = int(min(200, max(1, 5e-3 / max(time.perf_counter() - t, 1e-6))))
        best = float("inf")
        for _ in range(a.iters):
            t = time.perf_counter()
            for _ in range(reps):
                f()
            torch.cuda.synchronize()
            best = min(best, (time.perf_counter() - t) / reps)
        out.append((f"torch {'fp32' if dtype == torch.float32 else 'f16'}", layout, 2 * m * n * k / best / 1e9, "cuBLAS"))
    return out

samples = {}
kernels = {}
raw = open(a.raw, "a") if a.raw else None
print(f"GPU: {torch.cuda.get_device_name(0)}; rounds {a.rounds}, best of {a.iters} per sample", flush=True)
for rnd in range(a.rounds):
    for shape in SHAPES:
        runs = [lambda p=p, t=t: murmur(*shape, p, t) for p, t in MURMUR]
        runs += [lambda: torch_side(*shape, torch.float32), lambda: torch_side(*shape, torch.float16)]
        # Alternate the order from round to round.
        for run in (runs if rnd % 2 == 0 else runs[::-1]):
            for name, layout, gflops, kernel in run():
                samples.setdefault((shape, name, layout), []).append(gflops)
                kernels.setdefault((shape, name, layout), set()).add(kernel)
                if raw:
                    raw.write(json.dumps({"round": rnd, "shape": shape, "name": name, "layout": layout,
                                          "gflops": gflops, "kernel": kernel}) + "\n")
    print(f"round {rnd + 1} done", flush=True)

def med(key):
    v = samples.get(key, [])
    return statistics.median(v) if v else None

for shape in SHAPES:
    rows, c, oc = shape
    print(f"\n{rows}x{c}x{oc} (rows × channels × out channels), GFLOP/s: median (range) [kernel]")
    for layout in ["NT", "NN", "TN"]:
        base = med((shape, "murmur fp32 large", layout))
        for name in sorted({k[1] for k in samples if k[0] == shape and k[2] == layout}):
            v = samples[(shape, name, layout)]
            m = statistics.median(v)
            f16 = "f16" in name
            peak = (a.f16_peak if f16 else a.fp32_peak) * 1e3
            ref = med((shape, "torch f16" if f16 else "torch fp32", layout))
            extra = f"{100 * m / peak:5.1f}% of peak"
            if base and not name.startswith("torch"):
                extra += f", {m / base:5.2f}x large"
            if ref and not name.startswith("torch"):
                extra += f", {m / ref:5.2f}x torch"
            ks = ",".join(sorted(kernels[(shape, name, layout)]))
            print(f"  {layout} {name:24s} {m:10.1f} ({min(v):.1f}-{max(v):.1f}) {extra} [{ks}] n={len(v)}")
PY
