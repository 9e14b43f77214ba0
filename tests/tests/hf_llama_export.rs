//! A Llama leaves murmur as a Hugging Face `LlamaForCausalLM`: `murmur
//! train` trains `llama-tiny` on Tiny Shakespeare for 30 steps, `murmur
//! export` writes config.json, model.safetensors, tokenizer.json and
//! tokenizer_config.json, and `murmur sample --logits-out` records murmur's
//! logits over a prompt and its greedy continuation.
//! Where transformers is installed (`MURMUR_TRANSFORMERS_PYTHON`, a Python
//! that imports it), `scripts/check-hf-export.py` loads the export with
//! `AutoTokenizer` and `AutoModelForCausalLM` and checks the prompt's
//! tokens, the logits (within 1e-4 of the largest) and the greedy
//! continuation against murmur's, for that trained `llama-tiny` and for an
//! untrained `llama-150m` (one step at learning rate 1e-12).

use std::path::Path;
use std::process::Command;

use murmur_tests::{repo_root, workspace_binary};
use serde_json::Value;

const PROMPT: &str = "ROMEO: But soft, what light through yonder window breaks?";

fn murmur(args: &[&str]) -> String {
    let o = Command::new(workspace_binary("murmur")).args(args).output().expect("run murmur");
    let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success(), "murmur {args:?} failed:\n{out}\n{err}");
    out.into_owned()
}

/// Train `preset` for `steps`, export it to `dir/<preset>` and record its
/// logits and `new_tokens` greedy tokens (the prompt and those fit the
/// model's context, so neither side slides a window); returns the export's
/// directory.
fn trained_export(dir: &Path, preset: &str, steps: &str, lr: &str, new_tokens: usize) -> std::path::PathBuf {
    let data = repo_root().join("node/assets/datasets/shakespeare.txt");
    let ck = dir.join(format!("{preset}-ck"));
    let ck_s = ck.display().to_string();
    let data_s = data.display().to_string();
    murmur(&[
        "train",
        "--preset",
        preset,
        "--data",
        &data_s,
        "--steps",
        steps,
        "--batch",
        "4",
        "--seq",
        "32",
        "--lr",
        lr,
        "--val-batches",
        "1",
        "--checkpoint-dir",
        &ck_s,
        "--checkpoint-every",
        steps,
        "--device",
        "cpu",
    ]);
    let ckpt = std::fs::read_dir(&ck)
        .expect("checkpoint dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "murmur"))
        .expect("a checkpoint");
    let ckpt_s = ckpt.display().to_string();
    let out = dir.join(preset);
    let out_s = out.display().to_string();
    murmur(&["export", "--checkpoint", &ckpt_s, "--out", &out_s]);
    for f in ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"] {
        assert!(out.join(f).is_file(), "the export has no {f}");
    }
    let logits = out.join("murmur_logits.json").display().to_string();
    let n = new_tokens.to_string();
    let text = murmur(&[
        "sample",
        "--checkpoint",
        &ckpt_s,
        "--prompt",
        PROMPT,
        "--tokens",
        &n,
        "--temperature",
        "0",
        "--device",
        "cpu",
        "--logits-out",
        &logits,
    ]);
    assert!(text.starts_with(PROMPT), "sample printed {text:?}");
    let j: Value =
        serde_json::from_slice(&std::fs::read(&logits).expect("logits file")).expect("logits JSON");
    let prompt = j["prompt"].as_array().map_or(0, Vec::len);
    assert!(prompt > 0);
    assert_eq!(j["logits"].as_array().map(Vec::len), Some(prompt));
    assert_eq!(j["generated"].as_array().map(Vec::len), Some(new_tokens));
    out
}

fn transformers_check(python: &str, export: &Path) {
    let script = repo_root().join("scripts/check-hf-export.py");
    let logits = export.join("murmur_logits.json");
    let o = Command::new(python).arg(&script).arg(export).arg(&logits).arg(PROMPT).output().expect("python");
    let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success(), "transformers disagrees with murmur on {}:\n{out}\n{err}", export.display());
    eprintln!("{}", out.trim());
}

#[test]
fn a_trained_llama_loads_in_transformers_with_murmurs_logits() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tiny = trained_export(dir.path(), "llama-tiny", "30", "0.003", 7);
    let vocab: Value =
        serde_json::from_slice(&std::fs::read(tiny.join("config.json")).expect("config")).expect("json");
    assert_eq!(vocab["architectures"][0], "LlamaForCausalLM");
    match std::env::var("MURMUR_TRANSFORMERS_PYTHON") {
        Ok(python) => {
            transformers_check(&python, &tiny);
            let big = trained_export(dir.path(), "llama-150m", "1", "1e-12", 16);
            transformers_check(&python, &big);
        }
        Err(_) => eprintln!("MURMUR_TRANSFORMERS_PYTHON is not set: the transformers check did not run"),
    }
}
