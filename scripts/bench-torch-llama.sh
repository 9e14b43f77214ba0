#!/usr/bin/env bash
# PyTorch eager on a murmur Llama preset's shape, with transformers'
# LlamaForCausalLM (its default attention, scaled_dot_product_attention), for
# side-by-side runs with `murmur bench train --preset NAME`
# (docs/benchmarks.md). Uses the PyTorch venv of scripts/torch-venv.sh and
# installs transformers into it on first use.
#
#   scripts/bench-torch-llama.sh --preset llama-60m [--vocab 4096] [--batch 4
#       --seq 256 --warmup 3 --steps 20 --threads 2 --precision fp32|bf16]
#
# fp32 is eager fp32; bf16 is eager under torch.autocast("cpu", bfloat16)
# with fp32 master weights and AdamW state, as murmur's --precision bf16.
# Output matches murmur's: "... ms/step, ... tokens/s, ... GFLOP/s".
set -euo pipefail
# shellcheck source=scripts/torch-venv.sh
. "$(dirname "$0")/torch-venv.sh"
if ! "$venv/bin/python" -c 'import transformers' >/dev/null 2>&1; then
    echo "installing transformers into $venv ..." >&2
    nice -n 10 "$venv/bin/pip" install --quiet transformers
fi
exec "$venv/bin/python" - "$@" <<'PY'
import argparse, time
import torch
from transformers import LlamaConfig, LlamaForCausalLM

# murmur's presets (node/src/model/config.rs): layers, channels, heads,
# kv heads, SwiGLU hidden, context, tied embeddings; vocabulary GPT-2's
# unless --vocab (a dataset's own tokenizer), padded as murmur pads it.
PRESETS = {
    "llama-tiny": (4, 128, 4, 2, 384, 64, False, 256),
    "llama-60m": (10, 512, 8, 8, 1408, 1024, True, 50257),
    "llama-150m": (12, 768, 12, 4, 2048, 1024, False, 50257),
    "llama-400m": (24, 1024, 16, 8, 2816, 1024, False, 50257),
    "llama-1b": (22, 2048, 32, 4, 5632, 2048, True, 50257),
}
ap = argparse.ArgumentParser(prog="bench-torch-llama.sh")
ap.add_argument("--preset", choices=sorted(PRESETS), default="llama-60m")
ap.add_argument("--vocab", type=int)
ap.add_argument("--batch", type=int, default=4)
ap.add_argument("--seq", type=int, default=256)
ap.add_argument("--warmup", type=int, default=3)
ap.add_argument("--steps", type=int, default=20)
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
a = ap.parse_args()
L, C, H, KV, HID, CTX, TIED, V = PRESETS[a.preset]
V = a.vocab or V
VP = (V + 127) // 128 * 128
B, T = a.batch, a.seq
torch.set_num_threads(a.threads)
torch.manual_seed(1)
cfg = LlamaConfig(vocab_size=VP, hidden_size=C, intermediate_size=HID, num_hidden_layers=L,
                  num_attention_heads=H, num_key_value_heads=KV, max_position_embeddings=CTX,
                  rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=TIED,
                  attention_bias=False, mlp_bias=False)
model = LlamaForCausalLM(cfg)
params = sum(p.numel() for p in model.parameters())
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0)
gen = torch.Generator().manual_seed(7)

def step():
    x = torch.randint(0, V, (B, T), generator=gen)
    y = torch.randint(0, V, (B, T), generator=gen)
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
        logits = model(input_ids=x).logits
    loss = torch.nn.functional.cross_entropy(logits[..., :V].float().reshape(-1, V), y.reshape(-1))
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
# llm.c's count, as murmur's: 6N + 6·L·C·T FLOPs per token
flops = (6 * params + 6 * L * C * T) * tokens
print(f"torch {torch.__version__} eager {a.precision} ({a.threads} threads): "
      f"{a.preset} L{L} C{C} H{H} V{V} B{B} T{T} ({params / 1e6:.2f}M params): "
      f"{secs * 1e3 / a.steps:.1f} ms/step, {tokens / secs:.0f} tokens/s, {flops / secs / 1e9:.1f} GFLOP/s")
PY
