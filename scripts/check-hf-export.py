#!/usr/bin/env python3
"""Checks a murmur Hugging Face export against murmur's own forward pass.

Usage: check-hf-export.py EXPORT_DIR MURMUR_LOGITS_JSON PROMPT

EXPORT_DIR is what `murmur export` wrote (config.json, model.safetensors,
tokenizer.json); MURMUR_LOGITS_JSON is what `murmur sample --prompt PROMPT
--temperature 0 --logits-out FILE` wrote from the same checkpoint. Needs
torch and transformers (a venv outside the repository; scripts/torch-venv.sh
makes one). Checks, and exits 1 on the first that fails:

- transformers' AutoTokenizer, loaded from EXPORT_DIR, turns PROMPT into the
  token ids murmur used;
- AutoModelForCausalLM (LlamaForCausalLM or GPT2LMHeadModel, by config.json)
  gives logits at every prompt position within 1e-4 of murmur's, relative
  to the largest logit magnitude (max |hf - murmur| / max |murmur|);
- its greedy continuation is murmur's, token for token.

Prints one JSON line with what it measured.
"""

import json
import sys

import torch
import transformers


def main() -> int:
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    export_dir, logits_path, prompt = sys.argv[1:]
    with open(logits_path, encoding="utf-8") as f:
        murmur = json.load(f)
    tok = transformers.AutoTokenizer.from_pretrained(export_dir)
    model = transformers.AutoModelForCausalLM.from_pretrained(export_dir, dtype=torch.float32)
    model.eval()

    ids = tok(prompt, add_special_tokens=False)["input_ids"]
    failures = []
    if ids != murmur["prompt"]:
        failures.append(f"AutoTokenizer gives {ids[:16]}..., murmur {murmur['prompt'][:16]}...")

    with torch.no_grad():
        x = torch.tensor([murmur["prompt"]])
        hf = model(x).logits[0].double()
        ref = torch.tensor(murmur["logits"], dtype=torch.float64)
        rel = ((hf - ref).abs().max() / ref.abs().max()).item()
        if rel > 1e-4:
            failures.append(f"logits differ by {rel:.3g} of the largest, more than 1e-4")
        n = len(murmur["generated"])
        out = model.generate(
            x, max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=0, eos_token_id=None
        )[0, x.shape[1]:].tolist()
    if out != murmur["generated"]:
        failures.append(f"greedy continuation {out[:16]}... differs from murmur's {murmur['generated'][:16]}...")

    print(json.dumps({
        "architecture": model.config.architectures[0],
        "parameters": sum(p.numel() for p in model.parameters()),
        "prompt_tokens": len(murmur["prompt"]),
        "logits_max_rel_diff": rel,
        "greedy_tokens": n,
        "greedy_identical": out == murmur["generated"],
        "tokenizer_identical": ids == murmur["prompt"],
        "text": tok.decode(out),
    }))
    for f in failures:
        print(f"FAIL: {f}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
