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
//! With a tokenizer made for the data: `murmur data add --tokenizer bpe:512`
//! makes a dataset of the same text, `llama-tiny` trains on it (with the
//! tokenizer's vocabulary), and the export carries the dataset's
//! tokenizer.json byte for byte, which `AutoTokenizer` reads as murmur does.

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

/// What a model trains on: the text, or a dataset directory with its own
/// tokenizer.json, which the export and the sampler are given.
struct TrainData {
    name: String,
    data: std::path::PathBuf,
    tokenizer: Option<std::path::PathBuf>,
}

impl TrainData {
    fn text(preset: &str) -> Self {
        let data = repo_root().join("node/assets/datasets/shakespeare.txt");
        TrainData { name: preset.to_string(), data, tokenizer: None }
    }
}

/// Train `preset` for `steps` on `on`, export it to `dir/<name>` and record
/// its logits and `new_tokens` greedy tokens (the prompt and those fit the
/// model's context, so neither side slides a window); returns the export's
/// directory.
fn trained_export(
    dir: &Path,
    preset: &str,
    on: &TrainData,
    (steps, lr): (&str, &str),
    new_tokens: usize,
) -> std::path::PathBuf {
    let ck = dir.join(format!("{}-ck", on.name));
    let ck_s = ck.display().to_string();
    let data_s = on.data.display().to_string();
    let tokenizer = on.tokenizer.as_ref().map(|t| t.display().to_string());
    let with_tokenizer = |args: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        if let Some(t) = &tokenizer {
            v.extend(["--tokenizer".to_string(), t.clone()]);
        }
        v
    };
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
    let out = dir.join(&on.name);
    let out_s = out.display().to_string();
    let export = with_tokenizer(&["export", "--checkpoint", &ckpt_s, "--out", &out_s]);
    murmur(&export.iter().map(String::as_str).collect::<Vec<_>>());
    for f in ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"] {
        assert!(out.join(f).is_file(), "the export has no {f}");
    }
    let logits = out.join("murmur_logits.json").display().to_string();
    let n = new_tokens.to_string();
    let sample = with_tokenizer(&[
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
    let text = murmur(&sample.iter().map(String::as_str).collect::<Vec<_>>());
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
    let d = dir.path();
    let tiny = trained_export(d, "llama-tiny", &TrainData::text("llama-tiny"), ("30", "0.003"), 7);
    let vocab: Value =
        serde_json::from_slice(&std::fs::read(tiny.join("config.json")).expect("config")).expect("json");
    assert_eq!(vocab["architectures"][0], "LlamaForCausalLM");
    // A dataset with its own tokenizer: the model takes its vocabulary and
    // the export its tokenizer.json.
    let dataset = d.join("bpe.dataset");
    let text = TrainData::text("").data;
    let (text_s, dataset_s) = (text.display().to_string(), dataset.display().to_string());
    murmur(&["data", "add", &text_s, "--tokenizer", "bpe:512", "--out", &dataset_s]);
    let bpe = TrainData {
        name: "llama-tiny-bpe".into(),
        data: dataset.clone(),
        tokenizer: Some(dataset.join("tokenizer.json")),
    };
    let tiny_bpe = trained_export(d, "llama-tiny", &bpe, ("30", "0.003"), 7);
    let config: Value =
        serde_json::from_slice(&std::fs::read(tiny_bpe.join("config.json")).expect("config")).expect("json");
    assert_eq!(
        (config["vocab_size"].as_u64(), config["eos_token_id"].as_u64()),
        (Some(512), Some(0)),
        "{config}"
    );
    let read = |p: &Path| std::fs::read(p).expect("tokenizer.json");
    assert_eq!(read(&tiny_bpe.join("tokenizer.json")), read(&dataset.join("tokenizer.json")));
    match std::env::var("MURMUR_TRANSFORMERS_PYTHON") {
        Ok(python) => {
            transformers_check(&python, &tiny);
            transformers_check(&python, &tiny_bpe);
            let big = trained_export(d, "llama-150m", &TrainData::text("llama-150m"), ("1", "1e-12"), 16);
            transformers_check(&python, &big);
        }
        Err(_) => eprintln!("MURMUR_TRANSFORMERS_PYTHON is not set: the transformers check did not run"),
    }
}
