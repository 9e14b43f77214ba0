#!/usr/bin/env bash
# PyTorch eager on the same GPT shape as `murmur bench train`, for side-by-side
# runs (docs/benchmarks.md). Installs CPU PyTorch from PyPI into a venv outside
# the repo (~/.cache/murmur-bench-torch, or $MURMUR_TORCH_VENV) on first use.
#
#   scripts/bench-torch.sh [--layers 4 --channels 256 --heads 4 --vocab 256
#                           --batch 4 --seq 64 --warmup 3 --steps 20
#                           --threads 2 --precision fp32|bf16 --device cpu|cuda]
#   scripts/bench-torch.sh --preset llama-60m [--vocab 4096] [--batch … as above]
#
# --preset llama-* runs transformers' LlamaForCausalLM (its default
# attention, scaled_dot_product_attention) at that murmur preset's shape,
# as `murmur bench train --preset` does; transformers is installed into the
# venv on first use.
# fp32 is eager fp32; bf16 is eager under torch.autocast("cpu", bfloat16)
# with fp32 master weights and AdamW state (murmur's --precision bf16 keeps
# the same split). The model is llm.c's GPT-2: pre-LayerNorm blocks, causal
# attention (scaled_dot_product_attention), GELU-tanh MLP, LM head tied to
# the token embedding, vocabulary padded to a multiple of 128, AdamW.
# --device cuda runs the same step on the first NVIDIA GPU (the reference for
# `murmur bench train --device gpu|cuda`; autocast then targets "cuda"); a
# machine whose python already has CUDA PyTorch can point MURMUR_TORCH_VENV
# at that venv.
# Output matches murmur's: "... ms/step, ... tokens/s, ... GFLOP/s".
# On a busy machine OpenMP's spin-waiting makes PyTorch several times slower
# (its default OMP_WAIT_POLICY is active); take figures on a quiet machine.
set -euo pipefail
# shellcheck source=scripts/torch-venv.sh
. "$(dirname "$0")/torch-venv.sh"
case " $* " in
    *" --preset "*)
        if ! "$venv/bin/python" -c 'import transformers' >/dev/null 2>&1; then
            echo "installing transformers into $venv ..." >&2
            nice -n 10 "$venv/bin/pip" install --quiet transformers
        fi ;;
esac
exec "$venv/bin/python" - "$@" <<'PY'
import argparse, math, time
import torch
import torch.nn as nn
import torch.nn.functional as F

ap = argparse.ArgumentParser(prog="bench-torch.sh")
ap.add_argument("--layers", type=int, default=4)
ap.add_argument("--channels", type=int, default=256)
ap.add_argument("--heads", type=int, default=4)
ap.add_argument("--vocab", type=int)
ap.add_argument("--preset", choices=["llama-tiny", "llama-60m", "llama-150m", "llama-400m", "llama-1b"])
ap.add_argument("--batch", type=int, default=4)
ap.add_argument("--seq", type=int, default=64)
ap.add_argument("--warmup", type=int, default=3)
ap.add_argument("--steps", type=int, default=20)
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
a = ap.parse_args()
if a.device == "cuda" and not torch.cuda.is_available():
    raise SystemExit("--device cuda: this PyTorch sees no CUDA device (CPU wheels, or no driver)")
dev = torch.device(a.device)
if a.channels % a.heads:
    raise SystemExit(f"--channels {a.channels} is not a multiple of --heads {a.heads}")
torch.set_num_threads(a.threads)
torch.manual_seed(1)
# murmur's Llama presets (node/src/model/config.rs): layers, channels, heads,
# kv heads, SwiGLU hidden, context, tied embeddings, vocabulary (GPT-2's
# unless --vocab, a dataset's own tokenizer).
LLAMA = {
    "llama-tiny": (4, 128, 4, 2, 384, 64, False, 256),
    "llama-60m": (10, 512, 8, 8, 1408, 1024, True, 50257),
    "llama-150m": (12, 768, 12, 4, 2048, 1024, False, 50257),
    "llama-400m": (24, 1024, 16, 8, 2816, 1024, False, 50257),
    "llama-1b": (22, 2048, 32, 4, 5632, 2048, True, 50257),
}
if a.preset:
    L, C, H, KV, HID, CTX, TIED, V = LLAMA[a.preset]
    V = a.vocab or V
else:
    L, C, H, V = a.layers, a.channels, a.heads, a.vocab or 256
B, T = a.batch, a.seq
VP = (V + 127) // 128 * 128

class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.fc, self.fcproj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
    def forward(self, x):
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (z.view(B, T, H, C // H).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(VP, C), nn.Embedding(T, C)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.lnf = nn.LayerNorm(C)
    def forward(self, idx, tgt):
        x = self.wte(idx) + self.wpe(torch.arange(T, device=dev))
        for blk in self.blocks:
            x = blk(x)
        logits = self.lnf(x) @ self.wte.weight.t()
        return F.cross_entropy(logits[..., :V].float().reshape(-1, V), tgt.reshape(-1))

class Llama(nn.Module):
    def __init__(self):
        super().__init__()
        from transformers import LlamaConfig, LlamaForCausalLM
        cfg = LlamaConfig(vocab_size=VP, hidden_size=C, intermediate_size=HID, num_hidden_layers=L,
                          num_attention_heads=H, num_key_value_heads=KV, max_position_embeddings=CTX,
                          rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=TIED,
                          attention_bias=False, mlp_bias=False)
        self.inner = LlamaForCausalLM(cfg)
    def forward(self, idx, tgt):
        logits = self.inner(input_ids=idx).logits
        return F.cross_entropy(logits[..., :V].float().reshape(-1, V), tgt.reshape(-1))

model = (Llama() if a.preset else GPT()).to(dev)
params = sum(p.numel() for p in model.parameters())
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0)
gen = torch.Generator().manual_seed(7)

def step():
    x = torch.randint(0, V, (B, T), generator=gen).to(dev)
    y = torch.randint(0, V, (B, T), generator=gen).to(dev)
    opt.zero_grad(set_to_none=True)
    with torch.autocast(a.device, dtype=torch.bfloat16, enabled=a.precision == "bf16"):
        loss = model(x, y)
    loss.backward()
    opt.step()
    return loss.item()

for _ in range(a.warmup):
    step()
t0 = time.perf_counter()
for _ in range(a.steps):
    step()
secs = time.perf_counter() - t0
tokens = a.steps * B * T
# llm.c's count, as murmur's: 6N + 6·L·C·T FLOPs per token (N with wpe and padded vocab)
n = params
flops = (6 * n + 6 * L * C * T) * tokens
where = torch.cuda.get_device_name() if a.device == "cuda" else f"{a.threads} threads"
print(f"torch {torch.__version__} eager {a.precision} ({where}): {a.preset + ' ' if a.preset else ''}"
      f"L{L} C{C} H{H} V{V} B{B} T{T} ({params / 1e6:.2f}M params): "
      f"{secs * 1e3 / a.steps:.1f} ms/step, {tokens / secs:.0f} tokens/s, {flops / secs / 1e9:.1f} GFLOP/s")
PY
