//! The trainer thread on the CPU backend: an overlapped run's job moves its
//! progress onto the state that lands in it.

use std::sync::Arc;
use std::time::Duration;

use murmur_protocol::TrainingState;
use tokio::sync::mpsc;

use super::{spawn, Job, JobDone, Landing, TrainerSetup};
use crate::compute::cpu::Precision;
use crate::runtime::spec::{genesis, run_spec, RunParams};

/// A fresh trainer (same shard, so the same batches) of 4-step rounds.
fn trainer() -> (super::TrainerHandle, mpsc::UnboundedReceiver<JobDone>) {
    let spec =
        run_spec(&RunParams { inner_steps: 4, batch_size: 2, warmup_steps: 1, ..RunParams::default() })
            .expect("spec");
    let cfg = crate::runtime::spec::model_config(&spec).expect("model");
    let device = crate::compute::device::cpu(Precision::Fp32).expect("cpu");
    let setup = TrainerSetup { spec, cfg, shard: 3, device, feed: None, checkpointing: false };
    let (tx, rx) = mpsc::unbounded_channel();
    (spawn(&setup, tx).expect("trainer"), rx)
}

/// A fresh trainer runs one job; returns its delta and how many steps it
/// took before a state landed.
fn delta_of(state: &Arc<TrainingState>, landing: Option<Arc<Landing>>) -> (Vec<f32>, Option<u32>) {
    let (trainer, mut rx) = trainer();
    let (base, overlapped) = (state.id(), landing);
    assert!(trainer.submit(Job::Train {
        epoch: 0,
        round: 1,
        base,
        state: state.clone(),
        reset_moments: true,
        overlapped
    }));
    match rx.blocking_recv().expect("a result") {
        JobDone::Trained { delta, landed_after, .. } => (delta, landed_after),
        other => panic!("expected a trained delta, got {other:?}"),
    }
}

fn distance(a: &[f32], b: &[f32]) -> f64 {
    a.iter().zip(b).map(|(x, y)| f64::from(x - y).powi(2)).sum::<f64>().sqrt()
}

#[test]
fn a_landed_state_moves_the_progress_onto_it() {
    let spec = run_spec(&RunParams::default()).expect("spec");
    let start = Arc::new(genesis(&spec).expect("genesis"));
    // The round's canonical state: the start moved by a seeded, sizeable step.
    let mut rng = crate::model::rng::Rng::new(9);
    let mut moved = (*start).clone();
    moved.params.iter_mut().for_each(|p| *p += 0.05 * rng.normal() as f32);
    let canonical = Arc::new(moved);

    let (from_start, _) = delta_of(&start, None);
    let (from_canonical, _) = delta_of(&canonical, None);
    let landing = Arc::new(Landing::default());
    landing.land(canonical.clone());
    let (landed, after) = delta_of(&start, Some(landing));
    assert_eq!(after, Some(0), "it landed before the first step");
    // Trained from start + (canonical − start): the canonical state up to
    // rounding, so the delta is the canonical run's, not the start's.
    let (near, far) = (distance(&landed, &from_canonical), distance(&from_start, &from_canonical));
    assert!(
        far > 0.0 && near < 0.01 * far,
        "landed delta {near} from the canonical run's, {far} between the runs"
    );

    // Landing on the start itself moves nothing: bit-identical.
    let same = Arc::new(Landing::default());
    same.land(start.clone());
    assert_eq!(delta_of(&start, Some(same)).0, from_start);
}

#[test]
fn a_job_ahead_starts_from_the_lookahead_and_waits_at_half_its_steps() {
    let spec = run_spec(&RunParams::default()).expect("spec");
    let mut moving = genesis(&spec).expect("genesis");
    // A state with outer momentum: training ahead starts from its lookahead.
    let mut rng = crate::model::rng::Rng::new(4);
    let momentum = moving.momentum.as_mut().expect("the default outer optimizer keeps momentum");
    momentum.iter_mut().for_each(|m| *m = 0.05 * rng.normal() as f32);
    let start = Arc::new(moving);
    let lookahead = murmur_protocol::lookahead_params(spec.outer, &start).expect("lookahead");
    assert_ne!(lookahead, start.params);
    let at_lookahead = Arc::new(TrainingState { params: lookahead, ..(*start).clone() });
    let (from_start, _) = delta_of(&at_lookahead, None);
    let (trainer, mut rx) = trainer();
    let landing = Arc::new(Landing::default());
    let job = Job::Train {
        epoch: 0,
        round: 1,
        base: start.id(),
        state: start.clone(),
        reset_moments: true,
        overlapped: Some(landing.clone()),
    };
    let submitted = std::time::Instant::now();
    assert!(trainer.submit(job));
    // It trains, then waits with its job unfinished: off the busy clock, so
    // its time in inner steps stops growing but keeps what came before.
    let deadline = submitted + Duration::from_secs(120);
    let held = loop {
        let before = trainer.busy.running_secs();
        std::thread::sleep(Duration::from_millis(300));
        let after = trainer.busy.running_secs();
        if before > 0.0 && after == before {
            break after;
        }
        assert!(std::time::Instant::now() < deadline, "the job never started, or never stopped to wait");
    };
    std::thread::sleep(Duration::from_secs(1));
    assert!(rx.try_recv().is_err(), "the job finished without its state landing");
    assert_eq!(trainer.busy.running_secs(), held, "the wait was counted as time in inner steps");
    landing.land(at_lookahead.clone());
    match rx.blocking_recv().expect("a result") {
        JobDone::Trained { delta, landed_after, secs, .. } => {
            assert_eq!(landed_after, Some(2), "it waited after 2 of its 4 steps");
            // Landing on the lookahead itself keeps half the progress of
            // the first 2 steps (LANDING_KEEP) and trains 2 more from
            // there: about ¾ of the way the job trained straight through
            // from the lookahead went, in the same direction.
            let (norm, full) =
                (distance(&delta, &vec![0.0; delta.len()]), distance(&from_start, &vec![0.0; delta.len()]));
            let ratio = norm / full;
            assert!((0.6..0.9).contains(&ratio), "the delta is {ratio} of the straight run's");
            let dot: f64 = delta.iter().zip(&from_start).map(|(a, b)| f64::from(*a) * f64::from(*b)).sum();
            assert!(
                dot / (norm * full) > 0.9,
                "the delta turned away from the straight run's: cos {}",
                dot / (norm * full)
            );
            let wall = submitted.elapsed().as_secs_f64();
            assert!(secs <= wall - 1.0, "the wait was counted as time in inner steps: {secs} s of {wall}");
        }
        other => panic!("expected a trained delta, got {other:?}"),
    }
}

#[test]
fn a_job_lands_once_on_the_first_state_handed_to_it() {
    let spec = run_spec(&RunParams::default()).expect("spec");
    let s = Arc::new(genesis(&spec).expect("genesis"));
    let mut other = (*s).clone();
    other.round += 1;
    let landing = Landing::default();
    assert!(landing.take(Duration::ZERO).is_none());
    assert!(landing.take(Duration::from_millis(20)).is_none(), "nothing landed: the wait times out");
    landing.land(s.clone());
    landing.land(Arc::new(other));
    assert_eq!(landing.take(Duration::ZERO).map(|t| t.round), Some(s.round));
    landing.land(s);
    assert!(landing.take(Duration::ZERO).is_none(), "a second landing after the first was taken");
}

#[test]
fn a_budgeted_phase_ends_within_half_a_step_of_its_budget() {
    use super::budget_spent;
    let s = Duration::from_secs;
    // Steps of 13 s against a 120 s budget: after 8 steps (104 s) the next
    // would end at 117 s, in the budget: go on. After 9 (117 s) it would end
    // at 130 s, 10 s past — more than half a step: stop, 3 s short.
    assert!(!budget_spent(s(104), 8, s(120)));
    assert!(budget_spent(s(117), 9, s(120)));
    // Steps of 10 s: after 11 (110 s) the next ends at 120 s, in the budget:
    // go on; after 12 the budget is spent.
    assert!(!budget_spent(s(110), 11, s(120)));
    assert!(budget_spent(s(120), 12, s(120)));
    // Fast steps stop once the budget is about spent.
    assert!(!budget_spent(Duration::from_millis(119_000), 119, s(120)));
    assert!(budget_spent(Duration::from_millis(119_600), 119_600 / 1_000, s(120)));
}
