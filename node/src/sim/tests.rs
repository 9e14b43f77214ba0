//! Behaviour of the simulator on a model small enough for CI: both modes
//! learn, DiLoCo tracks data parallelism at a fraction of the bytes, byte
//! accounting is exact, and a robust mode holds against poisoned workers
//! where plain averaging does not.

use murmur_protocol::{Codec, OuterOptimizer, RobustMode};

use super::*;
use crate::compute::cpu::CpuBackend;
use crate::data::DataSpec;

fn corpus() -> Corpus {
    Corpus::open(&DataSpec::synthetic()).expect("synthetic corpus opens")
}

/// 2 layers × 32 channels (about 35k parameters), 4 workers × 4 × 32 tokens
/// per step, 160 steps per worker.
fn small(mode: SimMode) -> SimConfig {
    SimConfig {
        model: ModelConfig::new(2, 32, 2, 256, 32).expect("valid shape"),
        mode,
        workers: 4,
        inner_steps: 20,
        codec: Codec::Int8Block { block: 256 },
        total_tokens: 4 * 4 * 32 * 160,
        batch: 4,
        seq: 32,
        optimizer: OptimizerConfig { lr: 1e-2, warmup: 10, ..OptimizerConfig::default() },
        inner_moments: InnerMoments::Keep,
        outer: OuterOptimizer::DILOCO,
        robust: RobustMode::Mean,
        adversaries: 0,
        attack: Attack::SignFlip,
        seed: 3,
        val_batches: 4,
        pacing: SimPacing::default(),
    }
}

fn simulate_quietly(config: &SimConfig) -> (SimReport, Vec<SimEvent>) {
    let mut events = Vec::new();
    let report =
        simulate(&CpuBackend::new(), config, &corpus(), |e| events.push(e.clone())).expect("simulation runs");
    (report, events)
}

fn final_loss(r: &SimReport) -> f32 {
    r.val_loss.unwrap_or(f32::INFINITY)
}

#[test]
fn plan_splits_tokens_into_equal_steps_and_rounds() {
    let c = small(SimMode::Diloco);
    assert_eq!(c.plan().expect("valid"), Plan { steps_per_worker: 160, rounds: 8 });
    let uneven = SimConfig { inner_steps: 50, ..c.clone() };
    assert_eq!(uneven.plan().expect("valid").rounds, 4);
    assert_eq!(c.trained_tokens(c.plan().expect("valid")), c.total_tokens);
}

#[test]
fn impossible_settings_are_refused() {
    let c = small(SimMode::Diloco);
    for bad in [
        SimConfig { workers: 0, ..c.clone() },
        SimConfig { total_tokens: 100, ..c.clone() },
        SimConfig { seq: 64, ..c.clone() },
        SimConfig { adversaries: 4, ..c.clone() },
        SimConfig { adversaries: 1, ..small(SimMode::Ddp) },
        SimConfig { codec: Codec::Int8Block { block: 0 }, ..c.clone() },
        SimConfig { pacing: SimPacing { slow_workers: 5, ..SimPacing::default() }, ..c.clone() },
        SimConfig {
            pacing: SimPacing { slow_workers: 1, slow_speed: 0.0, ..SimPacing::default() },
            ..c.clone()
        },
        SimConfig { pacing: SimPacing { overlapped: true, ..SimPacing::default() }, ..small(SimMode::Ddp) },
        SimConfig {
            total_tokens: 100,
            pacing: SimPacing { budgeted: true, ..SimPacing::default() },
            ..c.clone()
        },
    ] {
        assert!(matches!(bad.plan(), Err(SimError::Config(_))), "{bad:?} was accepted");
    }
}

#[test]
fn ddp_and_diloco_both_learn_and_diloco_tracks_ddp_for_far_fewer_bytes() {
    let (ddp, ddp_events) = simulate_quietly(&small(SimMode::Ddp));
    let (diloco, events) = simulate_quietly(&small(SimMode::Diloco));
    let ln_vocab = 256f32.ln();
    let (ddp_loss, diloco_loss) = (final_loss(&ddp), final_loss(&diloco));
    assert!(ddp_loss < ln_vocab - 1.5, "DDP did not learn: {ddp_loss}");
    assert!(diloco_loss < ln_vocab - 1.5, "DiLoCo did not learn: {diloco_loss}");
    assert!(diloco_loss < 1.15 * ddp_loss, "DiLoCo {diloco_loss} vs DDP {ddp_loss}");
    // Equal tokens; DDP sends 4 bytes per parameter per step, DiLoCo one
    // int8 payload per round.
    assert_eq!(ddp.tokens, diloco.tokens);
    let n = ddp.params as u64;
    assert_eq!(ddp.bytes_per_worker, 4 * n * 160);
    let payload = Codec::Int8Block { block: 256 }.payload_len(n).expect("fits");
    assert_eq!(diloco.bytes_per_worker, payload * 8);
    assert!(ddp.bytes_per_worker / diloco.bytes_per_worker > 70);
    // One progress event per round, after a start event; loss falls.
    assert_eq!(events.len(), 1 + 8);
    assert_eq!(ddp_events.len(), 1 + 8);
    let losses: Vec<f32> = events
        .iter()
        .filter_map(|e| if let SimEvent::Round { val_loss, .. } = e { Some(*val_loss) } else { None })
        .collect();
    assert!(losses[losses.len() - 1] < losses[0], "{losses:?}");
}

#[test]
fn robust_mode_holds_against_sign_flips_where_averaging_does_not() {
    // 5 workers of which 1 flips the sign of the honest update ×10.
    let clean = SimConfig { workers: 5, total_tokens: 5 * 4 * 32 * 120, ..small(SimMode::Diloco) };
    let attacked = SimConfig { adversaries: 1, attack: Attack::SignFlip, ..clean.clone() };
    let (clean_r, _) = simulate_quietly(&clean);
    let (mean_r, _) = simulate_quietly(&attacked);
    let (median_r, _) = simulate_quietly(&SimConfig { robust: RobustMode::Median, ..attacked.clone() });
    let (clean, mean, median) = (final_loss(&clean_r), final_loss(&mean_r), final_loss(&median_r));
    assert!(median <= 1.05 * clean, "median under attack {median} vs clean {clean}");
    assert!(mean > 1.2 * clean, "plain averaging under attack {mean} should be far worse than clean {clean}");
    assert_eq!(median_r.rejected, 0);
}

#[test]
fn norm_filter_holds_eight_workers_against_two_attackers_of_every_kind() {
    // Issue 4's setting at CI size: 8 workers, the last 2 adversarial.
    let clean = SimConfig { workers: 8, total_tokens: 8 * 4 * 32 * 120, ..small(SimMode::Diloco) };
    let clean_loss = final_loss(&simulate_quietly(&clean).0);
    let filter = RobustMode::NormFilter { multiple: 3.0 };
    for attack in [Attack::SignFlip, Attack::Scale, Attack::Noise, Attack::Nan] {
        let attacked = SimConfig { adversaries: 2, attack, ..clean.clone() };
        let (robust, _) = simulate_quietly(&SimConfig { robust: filter, ..attacked.clone() });
        let (plain, _) = simulate_quietly(&attacked);
        let (robust_loss, plain_loss) = (final_loss(&robust), final_loss(&plain));
        eprintln!("{attack:?}: clean {clean_loss:.4}, norm filter {robust_loss:.4}, mean {plain_loss:.4}");
        assert!(
            robust_loss <= 1.05 * clean_loss,
            "{attack:?}: norm filter {robust_loss} vs clean {clean_loss}"
        );
        // Every attacker's delta is left out, every round.
        assert_eq!(robust.rejected, 2 * robust.rounds, "{attack:?}");
        match attack {
            // NaN payloads fail decoding before any mode runs: averaging is spared by construction.
            Attack::Nan => assert_eq!(plain.rejected, 2 * plain.rounds),
            // Pure noise at 10× the honest RMS does not hurt plain averaging of
            // this under-trained 35k-parameter model (it is not rejected, though);
            // the tiny preset's benchmark run in docs/benchmarks.md shows the harm.
            Attack::Noise => assert_eq!(plain.rejected, 0),
            Attack::SignFlip | Attack::Scale => {
                assert!(plain.diverged || plain_loss > 1.2 * clean_loss, "{attack:?}: mean {plain_loss}")
            }
        }
    }
}

#[test]
fn nan_payloads_are_rejected_every_round_and_training_goes_on() {
    let c = SimConfig {
        workers: 3,
        adversaries: 1,
        attack: Attack::Nan,
        total_tokens: 3 * 4 * 32 * 40,
        ..small(SimMode::Diloco)
    };
    let (r, events) = simulate_quietly(&c);
    assert_eq!(r.rounds, 2);
    assert_eq!(r.rejected, 2);
    assert!(!r.diverged && r.val_loss.is_some_and(f32::is_finite));
    assert!(events.iter().all(|e| !matches!(e, SimEvent::Round { rejected, .. } if *rejected != 1)));
}

#[test]
fn report_serialises_with_the_documented_keys() {
    let c = SimConfig {
        workers: 2,
        total_tokens: 2 * 4 * 32 * 20,
        codec: Codec::TopK { density_ppm: 50_000, block: 256 },
        ..small(SimMode::Diloco)
    };
    let (r, _) = simulate_quietly(&c);
    let v = serde_json::to_value(&r).expect("serialises");
    for key in ["val_loss", "bytes_per_worker", "mode", "codec", "inner_steps", "rounds", "tokens"] {
        assert!(v.get(key).is_some(), "missing {key} in {v}");
    }
    assert_eq!(v["mode"], "diloco");
    assert_eq!(v["codec"], "topk-50000ppm-b256");
}

#[test]
fn colluding_adversaries_send_distinct_payloads_so_none_is_rejected_as_a_conflict() {
    let c = SimConfig {
        workers: 5,
        adversaries: 2,
        attack: Attack::Scale,
        robust: RobustMode::Median,
        total_tokens: 5 * 4 * 32 * 40,
        ..small(SimMode::Diloco)
    };
    let (r, _) = simulate_quietly(&c);
    assert_eq!(r.rejected, 0);
    assert!(!r.diverged);
}

#[test]
fn budgeted_rounds_give_slow_workers_fewer_steps_and_count_their_tokens() {
    // H = 20 full-speed steps of time; the last worker runs at a quarter speed.
    let pacing = SimPacing { budgeted: true, slow_workers: 1, slow_speed: 0.25, ..SimPacing::default() };
    let c = SimConfig { total_tokens: 4 * 4 * 32 * 160, pacing, ..small(SimMode::Diloco) };
    assert_eq!(c.round_steps(), vec![20, 20, 20, 5]);
    // 65 worker-steps a round: ⌊4·4·32·160 / (65·4·32)⌋ = 9 rounds.
    let plan = c.plan().expect("valid");
    assert_eq!(plan, Plan { steps_per_worker: 9 * 20, rounds: 9 });
    assert_eq!(c.trained_tokens(plan), 9 * 65 * 4 * 32);
    let (r, events) = simulate_quietly(&c);
    assert_eq!(r.tokens, 9 * 65 * 4 * 32);
    let last_tokens = events.iter().rev().find_map(|e| match e {
        SimEvent::Round { tokens, .. } => Some(*tokens),
        SimEvent::Start { .. } => None,
    });
    assert_eq!(last_tokens, Some(r.tokens));
    // The slow worker's delta is normalised, not refused (5 ≥ 20 / 16).
    assert_eq!(r.rejected, 0);
    assert!(final_loss(&r) < 256f32.ln() - 1.5, "did not learn: {r:?}");
    // At a speed of 1/32 its single step is a claim below 1/16 of the median:
    // refused every round, with training going on.
    let crawl = SimPacing { slow_speed: 1.0 / 32.0, ..pacing };
    let (r, _) = simulate_quietly(&SimConfig { pacing: crawl, ..c.clone() });
    assert_eq!(r.rejected, r.rounds);
    assert!(!r.diverged);
}

#[test]
fn overlapped_rounds_move_their_progress_onto_the_state_when_it_lands() {
    let blocking = small(SimMode::Diloco);
    let overlapped = |ahead_from, exchange_steps| SimConfig {
        pacing: SimPacing { overlapped: true, ahead_from, exchange_steps, ..SimPacing::default() },
        ..blocking.clone()
    };
    let (b, _) = simulate_quietly(&blocking);
    let bl = final_loss(&b);
    // The state lands before the first step: every step trains from θ_{r+1}
    // (up to the rounding of θ_r + (θ_{r+1} − θ_r)), as in blocking rounds.
    let (o, _) = simulate_quietly(&overlapped(AheadFrom::Lookahead, Some(0)));
    assert!((final_loss(&o) - bl).abs() <= 0.002 * bl, "landed at once {} vs blocking {bl}", final_loss(&o));
    assert_eq!((o.tokens, o.bytes_per_worker), (b.tokens, b.bytes_per_worker));
    // A quarter of each round trained before the state lands: a different
    // run that ends close to the blocking one.
    let (q, _) = simulate_quietly(&overlapped(AheadFrom::Lookahead, Some(5)));
    let ql = final_loss(&q);
    assert_ne!(ql.to_bits(), bl.to_bits());
    assert!(ql <= 1.05 * bl, "a quarter before landing {ql} vs blocking {bl}");
    // The whole round before it lands, from the eager start: still learns.
    let (w, _) = simulate_quietly(&overlapped(AheadFrom::Eager, None));
    assert!(!w.diverged && final_loss(&w) < 256f32.ln() - 1.5, "whole round ahead: {w:?}");
}
