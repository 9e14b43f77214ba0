//! Tests of the RunSpec: canonical bytes, RunIds, and every range rule.

use super::*;

/// A small valid spec used across the crate's tests and golden vectors.
pub(crate) fn sample_spec() -> RunSpec {
    RunSpec {
        model: ModelShape {
            preset: "tiny".into(),
            vocab_size: 256,
            context_len: 64,
            n_layer: 2,
            n_head: 2,
            d_model: 64,
            param_count: 116_480,
        },
        data: "synthetic:seed=1".into(),
        inner: InnerOptimizer {
            lr: 1e-3,
            beta1: 0.9,
            beta2: 0.95,
            eps: 1e-8,
            weight_decay: 0.1,
            grad_clip: 1.0,
            warmup_steps: 10,
            batch_size: 8,
        },
        inner_steps: 100,
        outer: OuterOptimizer::DILOCO,
        codec: Codec::Int8Block { block: 256 },
        robust: RobustMode::Mean,
        quorum: 2,
        round_deadline_secs: 60,
        admission: AdmissionPolicy::Open,
        seed: 42,
        committee_size: 1,
        pacing: Pacing::default(),
        genesis_params: None,
    }
}

#[test]
fn round_trips_and_hashes_stably() {
    let spec = sample_spec();
    let bytes = spec.encode();
    assert_eq!(RunSpec::decode(&bytes).as_ref(), Ok(&spec));
    assert_eq!(spec.run_id(), sample_spec().run_id());
    let mut other = sample_spec();
    other.seed = 43;
    assert_ne!(other.run_id(), spec.run_id());
}

#[test]
fn the_committee_size_is_written_and_checked() {
    let one = sample_spec();
    let mut eight = sample_spec();
    eight.committee_size = 8;
    let bytes = eight.encode();
    assert_eq!(bytes[bytes.len() - 4..], 8u32.to_le_bytes());
    assert_eq!(RunSpec::decode(&bytes), Ok(eight.clone()));
    assert_ne!(eight.run_id(), one.run_id());
    // A spec that ends before it (version 1's) is refused and says why;
    // zero and oversized sizes are refused.
    let cut = &bytes[..bytes.len() - 4];
    assert!(matches!(RunSpec::decode(cut), Err(WireError::Invalid { field: "committee_size", .. })));
    for k in [0, MAX_COMMITTEE_SIZE + 1] {
        eight.committee_size = k;
        assert!(matches!(
            RunSpec::decode(&eight.encode()),
            Err(WireError::Invalid { field: "committee_size", .. })
        ));
    }
}

#[test]
fn pacing_is_written_only_when_set_and_checked() {
    let plain = sample_spec();
    let mut paced = sample_spec();
    paced.pacing = Pacing { overlapped: true, inner_budget_ms: 0 };
    let bytes = paced.encode();
    // The overlapped flag and the budget after the committee size.
    assert_eq!(bytes.len(), plain.encode().len() + 1 + 4);
    assert_eq!(RunSpec::decode(&bytes), Ok(paced.clone()));
    assert_ne!(paced.run_id(), plain.run_id());
    paced.committee_size = 8;
    paced.pacing = Pacing { overlapped: false, inner_budget_ms: 30_000 };
    assert!(paced.pacing.is_budgeted());
    assert_eq!(RunSpec::decode(&paced.encode()), Ok(paced.clone()));
    // The default written out is not canonical; an unknown flag, a budget
    // of a day and more or one the round deadline cannot hold are refused.
    let mut explicit = plain.encode();
    explicit.extend_from_slice(&[0, 0, 0, 0, 0]);
    assert!(matches!(RunSpec::decode(&explicit), Err(WireError::Invalid { field: "pacing", .. })));
    let mut flag = plain.encode();
    flag.extend_from_slice(&[2, 0, 0, 0, 0]);
    assert_eq!(RunSpec::decode(&flag), Err(WireError::BadTag { field: "pacing.overlapped", tag: 2 }));
    for budget in [60_000, MAX_INNER_BUDGET_MS + 1] {
        let mut bad = sample_spec();
        bad.round_deadline_secs = if budget == 60_000 { 60 } else { MAX_ROUND_DEADLINE_SECS };
        bad.pacing.inner_budget_ms = budget;
        assert!(
            matches!(
                RunSpec::decode(&bad.encode()),
                Err(WireError::Invalid { field: "pacing.inner_budget_ms", .. })
            ),
            "budget {budget}"
        );
    }
}

#[test]
fn genesis_params_are_written_only_when_set() {
    let plain = sample_spec();
    let mut init = sample_spec();
    init.genesis_params = Some(ParamsId([7; 32]));
    let bytes = init.encode();
    // Pacing is written out (the default included), then the 32-byte ParamsId.
    assert_eq!(bytes.len(), plain.encode().len() + 1 + 4 + 32);
    assert_eq!(RunSpec::decode(&bytes), Ok(init.clone()));
    assert_ne!(init.run_id(), plain.run_id());
    init.committee_size = 8;
    init.pacing = Pacing { overlapped: true, inner_budget_ms: 0 };
    assert_eq!(RunSpec::decode(&init.encode()), Ok(init.clone()));
    // A ParamsId cut short is not a spec.
    let mut cut = plain.encode();
    cut.extend_from_slice(&[0; 5 + 31]);
    assert!(RunSpec::decode(&cut).is_err());
}

#[test]
fn every_variant_round_trips() {
    let mut spec = sample_spec();
    spec.outer = OuterOptimizer::Average;
    spec.robust = RobustMode::TrimmedMean { trim: 0.25 };
    spec.codec = Codec::TopK { density_ppm: 1000, block: 64 };
    spec.admission = AdmissionPolicy::Allowlist(vec![PublicKey([1; 32]), PublicKey([2; 32])]);
    for robust in [RobustMode::NormClip { multiple: 2.0 }, RobustMode::Median, spec.robust] {
        spec.robust = robust;
        let bytes = spec.encode();
        let back = RunSpec::decode(&bytes).expect("valid spec decodes");
        assert_eq!(back, spec);
        assert_eq!(back.encode(), bytes);
    }
}

#[test]
fn ticket_and_operator_policies_round_trip_and_are_checked() {
    let ops = vec![PublicKey([1; 32]), PublicKey([2; 32])];
    for admission in [
        AdmissionPolicy::Tickets { operators: ops.clone() },
        AdmissionPolicy::OpenWithOperators { operators: ops.clone() },
    ] {
        let mut spec = sample_spec();
        spec.admission = admission.clone();
        let bytes = spec.encode();
        assert_eq!(RunSpec::decode(&bytes).as_ref(), Ok(&spec));
        assert_eq!(admission.operators(), ops.as_slice());
        for bad in [vec![], vec![PublicKey([2; 32]), PublicKey([1; 32])], vec![PublicKey([3; 32]); 2]] {
            let mut spec = sample_spec();
            spec.admission = match admission {
                AdmissionPolicy::Tickets { .. } => AdmissionPolicy::Tickets { operators: bad },
                _ => AdmissionPolicy::OpenWithOperators { operators: bad },
            };
            assert!(matches!(
                RunSpec::decode(&spec.encode()),
                Err(WireError::Invalid { field: "admission.operators", .. })
            ));
        }
        let mut spec = sample_spec();
        spec.admission = match admission {
            AdmissionPolicy::Tickets { .. } => AdmissionPolicy::Tickets { operators: vec![] },
            _ => AdmissionPolicy::OpenWithOperators { operators: vec![] },
        };
        // 65 operators: refused by the count cap before anything is read
        // (the count, then the seed and the committee size).
        let mut bytes = spec.encode();
        let at = bytes.len() - 4 - 8 - 4;
        bytes[at..at + 4].copy_from_slice(&65u32.to_le_bytes());
        assert!(matches!(RunSpec::decode(&bytes), Err(WireError::TooLong { .. })));
    }
    let tickets = AdmissionPolicy::Tickets { operators: ops.clone() };
    assert!(tickets.admits(&ops[0]) && !tickets.admits(&PublicKey([9; 32])));
    assert!(tickets.uses_tickets() && tickets.counts_commits_of(&PublicKey([9; 32])));
    let open = AdmissionPolicy::OpenWithOperators { operators: ops.clone() };
    assert!(open.admits(&PublicKey([9; 32])) && !open.uses_tickets());
    assert!(open.counts_commits_of(&ops[1]) && !open.counts_commits_of(&PublicKey([9; 32])));
    assert!(AdmissionPolicy::Open.operators().is_empty());
    // An unknown admission tag is refused (before the seed and committee size).
    let mut bytes = sample_spec().encode();
    let at = bytes.len() - 4 - 8 - 1;
    bytes[at] = 4;
    assert_eq!(RunSpec::decode(&bytes), Err(WireError::BadTag { field: "admission", tag: 4 }));
}

#[test]
fn data_refs_parse_and_print_canonically() {
    let id = "ab".repeat(32);
    let s = format!("dataset:{id}:1234");
    let r = DataRef::parse(&s).expect("dataset ref");
    assert!(matches!(r, DataRef::Dataset { manifest_len: 1234, .. }));
    assert_eq!(r.to_string(), s);
    assert_eq!(DataRef::parse("synthetic"), Ok(DataRef::Synthetic(String::new())));
    assert_eq!(DataRef::parse("synthetic:seed=3").map(|r| r.to_string()).as_deref(), Ok("synthetic:seed=3"));
    for bad in [
        format!("dataset:{id}"),
        format!("dataset:{}:12", "AB".repeat(32)),
        format!("dataset:{id}:0"),
        format!("dataset:{id}:012"),
        format!("dataset:{id}:99999999"),
        "dataset:/etc/passwd:1".to_string(),
        "/etc/passwd".to_string(),
    ] {
        let err = DataRef::parse(&bad).expect_err(&bad);
        assert!(err.to_string().starts_with("data:"), "{err}");
    }
    assert!(DataRef::parse("/etc/passwd")
        .expect_err("path")
        .to_string()
        .contains("never names a local path"));
}

#[test]
fn invalid_ranges_are_rejected() {
    let mut bad = sample_spec();
    bad.quorum = 0;
    assert!(matches!(RunSpec::decode(&bad.encode()), Err(WireError::Invalid { field: "quorum", .. })));
    let mut bad = sample_spec();
    bad.admission = AdmissionPolicy::Allowlist(vec![PublicKey([2; 32]), PublicKey([1; 32])]);
    assert!(RunSpec::decode(&bad.encode()).is_err());
    let mut bad = sample_spec();
    bad.outer = OuterOptimizer::Nesterov { lr: 0.7, momentum: 1.0 };
    assert!(RunSpec::decode(&bad.encode()).is_err());
    let mut bad = sample_spec();
    bad.inner.lr = f32::NAN;
    assert!(matches!(RunSpec::decode(&bad.encode()), Err(WireError::NonFinite { .. })));
    for path in [
        "/home/alice/.ssh/id_ed25519",
        "shards:/data",
        "text:x.txt",
        "x.bin",
        "synthetic:seed=1;rm",
        "dataset:00:5",
        "",
    ] {
        let mut bad = sample_spec();
        bad.data = path.into();
        match RunSpec::decode(&bad.encode()) {
            Err(WireError::Invalid { field: "data", why }) => assert!(!why.is_empty()),
            other => panic!("{path:?} was not refused: {other:?}"),
        }
    }
    let mut trailing = sample_spec().encode();
    trailing.push(0);
    assert_eq!(RunSpec::decode(&trailing), Err(WireError::TrailingBytes(1)));
}

/// Fails before the RunSpec bounded its batch: `batch_size = u32::MAX`
/// decoded, and a volunteer that took the spec from a hostile bootstrap
/// server aborted allocating its first batch of 2^32 × 64 tokens.
#[test]
fn an_absurd_batch_is_refused_with_a_clear_error() {
    let mut bad = sample_spec();
    bad.inner.batch_size = u32::MAX;
    let err = RunSpec::decode(&bad.encode()).expect_err("a batch of u32::MAX sequences decoded");
    assert!(matches!(err, WireError::Invalid { field: "inner.batch_size", .. }), "{err}");
    let msg = err.to_string();
    // What is wrong (the product and its cap) and what to do.
    assert!(msg.contains("batch_size × context_len") && msg.contains("1048576"), "{msg}");
    assert!(msg.contains("--batch"), "{msg}");
    // An empty batch is refused too; the largest allowed one decodes.
    bad.inner.batch_size = 0;
    assert!(matches!(
        RunSpec::decode(&bad.encode()),
        Err(WireError::Invalid { field: "inner.batch_size", .. })
    ));
    bad.inner.batch_size = (MAX_STEP_TOKENS / u64::from(bad.model.context_len)) as u32;
    bad.inner_steps = 1;
    assert_eq!(RunSpec::decode(&bad.encode()), Ok(bad.clone()));
    bad.inner.batch_size += 1;
    assert!(RunSpec::decode(&bad.encode()).is_err());
}

/// Fails before the RunSpec bounded H, the tokens of a round and the
/// deadline: `inner_steps = u32::MAX` (a dataset run fetches and holds
/// every window of its round up front) and a deadline of 136 years decoded.
#[test]
fn inner_steps_round_tokens_and_the_deadline_are_bounded() {
    let at_limit = |f: &dyn Fn(&mut RunSpec)| {
        let mut s = sample_spec();
        f(&mut s);
        RunSpec::decode(&s.encode())
    };
    assert!(at_limit(&|s| {
        s.inner_steps = MAX_INNER_STEPS;
        s.inner.batch_size = 1;
    })
    .is_ok());
    let err = at_limit(&|s| s.inner_steps = u32::MAX).expect_err("H = u32::MAX decoded");
    assert!(matches!(err, WireError::Invalid { field: "inner_steps", .. }), "{err}");
    assert!(err.to_string().contains("1000000") && err.to_string().contains("--inner-steps"), "{err}");
    // H within its cap, but H × batch × context beyond a round's tokens.
    let err = at_limit(&|s| {
        s.inner_steps = MAX_INNER_STEPS;
        s.inner.batch_size = 64;
    })
    .expect_err("2^32 tokens a round decoded");
    assert!(matches!(err, WireError::Invalid { field: "inner_steps", .. }), "{err}");
    assert!(err.to_string().contains("268435456"), "{err}");
    assert!(at_limit(&|s| s.round_deadline_secs = MAX_ROUND_DEADLINE_SECS).is_ok());
    let err = at_limit(&|s| s.round_deadline_secs = u32::MAX).expect_err("a deadline of 136 years decoded");
    assert!(matches!(err, WireError::Invalid { field: "round_deadline_secs", .. }), "{err}");
    assert!(err.to_string().contains("604800") && err.to_string().contains("--deadline"), "{err}");
}
