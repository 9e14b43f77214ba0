//! Getting the model out and starting from one: four nodes train the tiny
//! preset for five rounds; `murmur export --data-dir` on a stopped node
//! writes the state of its last round as a Hugging Face GPT-2 directory
//! whose `murmur.json` names that round's committed StateId, `murmur eval`
//! measures it at the node's own validation loss, and `murmur import` reads
//! it back bit-identically; a state the directory no longer holds is
//! refused with a list of what it does hold. A new run started with
//! `murmur-bootstrap --init-from` that export reports the model's loss at
//! round 0 and trains on; a model of another shape is refused.
//! Where transformers is installed (`MURMUR_TRANSFORMERS_PYTHON`, a Python
//! that imports it), `GPT2LMHeadModel` loads the export too.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use murmur_node::checkpoint::native;
use murmur_node::store::{BlobKind, Store};
use murmur_protocol::hash::unhex;
use murmur_protocol::TrainingState;
use murmur_tests::{
    bootstrap_args, params_by_round, start_bootstrap, start_node, states_by_round, wait_listen_addr,
    wait_until, workspace_binary, Proc, RunSettings,
};
use serde_json::Value;

fn context(procs: &[&Proc]) -> String {
    procs.iter().map(|p| p.tail()).collect::<Vec<_>>().join("\n")
}

/// Run `murmur <args>`; returns (success, stdout, stderr).
fn murmur(args: &[&str]) -> (bool, String, String) {
    let o = Command::new(workspace_binary("murmur")).args(args).output().expect("running murmur");
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("read")).expect("json")
}

/// Equal to six significant digits.
fn same6(a: f64, b: f64) -> bool {
    format!("{a:.5e}") == format!("{b:.5e}")
}

#[test]
fn a_runs_model_is_exported_measured_imported_and_started_from() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let settings = RunSettings { inner_steps: 8, batch: 4, quorum: 4, deadline: 30, seed: 21 };
    let (mut boot, addr) = start_bootstrap(d, &settings);
    let mut nodes: Vec<Proc> =
        ["a", "b", "c", "e"].iter().map(|n| start_node(d, n, &addr, &["--device", "cpu"])).collect();
    let ctx = |nodes: &[Proc]| context(&nodes.iter().collect::<Vec<_>>());
    wait_until(
        "every node to report round 4 with a validation loss",
        Duration::from_secs(300),
        || {
            nodes
                .iter()
                .all(|n| n.events_of("round").iter().any(|v| v["round"] == 4 && v["val_loss"].is_f64()))
        },
        || ctx(&nodes),
    );
    for n in &mut nodes {
        n.kill();
    }
    boot.kill();
    let b = &nodes[1];
    let report = b.events_of("round").into_iter().find(|v| v["round"] == 4).expect("round 4");
    let (agreed, node_loss) =
        (report["state_id"].as_str().expect("state").to_string(), report["val_loss"].as_f64().expect("loss"));
    assert_eq!(states_by_round(&nodes[0]).get(&4), Some(&agreed), "the nodes disagree on round 4");
    // A committee round's StateId names parameters and ledger; an export
    // names its parameters' StateId (the State blob's).
    let state_hex = report["state_blob"].as_str().unwrap_or(&agreed).to_string();

    // Export the newest committed state of b's data directory.
    let out = d.join("export-b");
    let b_dir = d.join("b").display().to_string();
    let (ok, stdout, stderr) = murmur(&["export", "--data-dir", &b_dir, "--out", &out.display().to_string()]);
    assert!(ok, "export failed: {stdout}\n{stderr}");
    for f in ["model.safetensors", "config.json", "murmur.json"] {
        assert!(out.join(f).is_file(), "the export lacks {f}");
    }
    let meta = read_json(&out.join("murmur.json"));
    assert_eq!(meta["state_id"].as_str(), Some(state_hex.as_str()), "{meta}");
    assert_eq!(meta["round"], 4, "{meta}");
    assert_eq!(meta["tokens_from_round"], 0, "{meta}");
    assert_eq!(meta["val_loss"].as_f64().map(|v| v as f32), Some(node_loss as f32), "{meta}");
    let hf = read_json(&out.join("config.json"));
    assert_eq!(hf["model_type"], "gpt2");
    let context_len = hf["n_positions"].as_u64().expect("n_positions");
    let per_round = u64::from(settings.inner_steps * settings.batch) * context_len * 4;
    assert_eq!(meta["tokens_seen"].as_u64(), Some(5 * per_round), "rounds 0-4 of four deltas each: {meta}");

    // murmur's val loss of the export is the node's for that round.
    let (ok, stdout, stderr) =
        murmur(&["eval", "--model", &out.display().to_string(), "--device", "cpu", "--json"]);
    assert!(ok, "eval failed: {stdout}\n{stderr}");
    let measured: Value = serde_json::from_str(stdout.trim()).expect("eval json");
    let eval_loss = measured["val_loss"].as_f64().expect("val_loss");
    assert!(same6(eval_loss, node_loss), "eval {eval_loss} vs the node's {node_loss}");

    // `murmur import` reads the export back bit-identically.
    let ckpt = d.join("b.murmur");
    let (ok, stdout, stderr) =
        murmur(&["import", "--from", &out.display().to_string(), "--out", &ckpt.display().to_string()]);
    assert!(ok, "import failed: {stdout}\n{stderr}");
    let imported: Vec<u32> =
        native::load(&ckpt).expect("load").params.into_iter().flatten().map(f32::to_bits).collect();
    let store = Store::open(&d.join("b")).expect("store");
    let id: [u8; 32] = unhex(&state_hex).and_then(|v| v.try_into().ok()).expect("hex");
    let bytes = store.blobs.get(BlobKind::State, &id).expect("state blob");
    let state = TrainingState::decode(&bytes, imported.len()).expect("state");
    assert!(
        state.params.iter().map(|v| v.to_bits()).eq(imported.iter().copied()),
        "import differs from the state"
    );
    drop(store);

    // A round whose state was deleted, and a state never committed, are
    // refused with what the directory holds; nothing is written.
    for (flag, value) in [("--round", "0".to_string()), ("--state", "ab".repeat(32))] {
        let refused = d.join(format!("refused{flag}"));
        let (ok, stdout, stderr) =
            murmur(&["export", "--data-dir", &b_dir, flag, &value, "--out", &refused.display().to_string()]);
        assert!(!ok, "{flag} {value} was exported: {stdout}");
        assert!(stderr.contains("does not hold") && stderr.contains("round 4 ("), "{stderr}");
        assert!(!refused.exists());
    }
    let older = d.join("export-round-3");
    let (ok, _, stderr) =
        murmur(&["export", "--data-dir", &b_dir, "--round", "3", "--out", &older.display().to_string()]);
    assert!(ok, "{stderr}");
    assert_eq!(
        read_json(&older.join("murmur.json"))["state_id"].as_str(),
        params_by_round(b).get(&3).map(String::as_str)
    );

    if let Ok(python) = std::env::var("MURMUR_TRANSFORMERS_PYTHON") {
        let script = "import sys, transformers; m = transformers.GPT2LMHeadModel.from_pretrained(sys.argv[1]); print(sum(p.numel() for p in m.parameters()))";
        let o = Command::new(python).args(["-c", script]).arg(&out).output().expect("python");
        assert!(
            o.status.success(),
            "GPT2LMHeadModel did not load the export: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let counted: usize = String::from_utf8_lossy(&o.stdout).trim().parse().expect("a parameter count");
        assert_eq!(counted, imported.len(), "transformers counts another model");
    } else {
        eprintln!("MURMUR_TRANSFORMERS_PYTHON is not set: the transformers check did not run");
    }

    // A new run from the export reports its loss at round 0, then trains.
    let d2 = d.join("run2");
    std::fs::create_dir_all(&d2).expect("dir");
    let init = out.display().to_string();
    let two = RunSettings { quorum: 2, ..settings.clone() };
    let args = bootstrap_args(&d2, &two, "127.0.0.1", &["--init-from", &init]);
    let boot2 = Proc::spawn("murmur-bootstrap", &args, "bootstrap2", &d2);
    let addr2 = wait_listen_addr(&boot2, "127.0.0.1");
    let f = start_node(&d2, "f", &addr2, &["--device", "cpu"]);
    let g = start_node(&d2, "g", &addr2, &["--device", "cpu"]);
    let joined = f.wait_event("joined", Duration::from_secs(120), |v| v["event"] == "joined");
    assert_eq!(joined["round"], 0, "{joined}");
    let started = f.events_of("started");
    assert_eq!(
        started.first().map(|v| v["resumed"].clone()),
        Some(false.into()),
        "a fetched genesis is no resume"
    );
    let start_loss = joined["val_loss"].as_f64().expect("a val_loss at round 0");
    assert!(
        (start_loss - node_loss).abs() <= 1e-5,
        "round 0 loss {start_loss} vs the exported model's {node_loss}"
    );
    wait_until(
        "the new run to close a round",
        Duration::from_secs(240),
        || f.last_round().is_some() && g.last_round().is_some(),
        || context(&[&f, &g, &boot2]),
    );
    assert_eq!(states_by_round(&f).get(&0), states_by_round(&g).get(&0));

    // A model of another shape is refused with what it is.
    let d3 = d.join("run3");
    std::fs::create_dir_all(&d3).expect("dir");
    let args = bootstrap_args(&d3, &settings, "127.0.0.1", &["--init-from", &init, "--preset", "small"]);
    let o = Command::new(workspace_binary("murmur-bootstrap")).args(&args).output().expect("bootstrap");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "a model of the wrong shape started a run");
    assert!(err.contains("preset `small`") && err.contains("pass the --preset"), "{err}");
}
