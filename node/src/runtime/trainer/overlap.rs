//! Training ahead in an overlapped run (RunSpec pacing, docs/protocol.md
//! §6.3), as a node's round loop tracks it: once the node's delta of round
//! r is made, round r + 1 starts training from round r's state (the job
//! takes its lookahead); when round r + 1 opens, its state lands in the
//! running job, or the job that already finished is used as it is. A round
//! the node did not end up in (it re-synced, its trainer restarted) drops
//! what was trained ahead for it.

use std::sync::Arc;

use murmur_protocol::{StateId, TrainingState};
use serde_json::json;

use super::{Job, JobDone, Landing};
use crate::runtime::report::Reporter;

/// A finished training job's pseudo-gradient and what it claims.
#[derive(Debug)]
pub struct Trained {
    pub delta: Vec<f32>,
    pub tokens: u64,
    pub train_loss: f32,
}

/// The job training round `round` ahead.
#[derive(Debug)]
struct NextRoundJob {
    round: u64,
    /// Where the round's state is handed to the job when the round opens.
    landing: Arc<Landing>,
    /// Its result, once the trainer finished it before the round opened.
    done: Option<Trained>,
}

/// What a round that opens takes from training ahead.
#[derive(Debug)]
pub enum AtOpen {
    /// The round was trained ahead and finished: its delta, to use now.
    Finished(Trained),
    /// The job training it ahead runs on from the round's state.
    Landed,
    /// Nothing trained ahead for it: train the round now.
    Train,
}

/// A loop's training ahead: at most one job at a time.
#[derive(Debug, Default)]
pub struct OverlappedRound {
    next: Option<NextRoundJob>,
}

impl OverlappedRound {
    /// The job that trains `round` ahead from `state` (the state of the
    /// round before, whose base is `base`), or None while one is already
    /// training ahead.
    pub fn start(&mut self, epoch: u64, round: u64, base: StateId, state: Arc<TrainingState>) -> Option<Job> {
        if self.next.is_some() {
            return None;
        }
        let landing = Arc::new(Landing::default());
        self.next = Some(NextRoundJob { round, landing: landing.clone(), done: None });
        Some(Job::Train { epoch, round, base, state, reset_moments: false, overlapped: Some(landing) })
    }

    /// Round `round` opened on `state`.
    pub fn open(&mut self, round: u64, state: &Arc<TrainingState>) -> AtOpen {
        match self.next.take() {
            Some(NextRoundJob { round: r, done: Some(t), .. }) if r == round => AtOpen::Finished(t),
            Some(a) if a.round == round => {
                a.landing.land(state.clone());
                self.next = Some(a);
                AtOpen::Landed
            }
            _ => AtOpen::Train,
        }
    }

    /// The job that trained `round` ahead finished while the node stands
    /// in `open_round`: its delta to use now when its round is open, else
    /// None (kept for when it opens, or dropped when it is not ours).
    pub fn finished(&mut self, round: u64, open_round: u64, trained: Trained) -> Option<Trained> {
        match &mut self.next {
            Some(a) if a.round == round && open_round < round => {
                a.done = Some(trained);
                None
            }
            Some(a) if a.round == round => {
                self.next = None;
                Some(trained)
            }
            _ => None,
        }
    }

    /// A job for `round` was cancelled: whether it was the one training
    /// ahead, unfinished (the round is then trained when it opens).
    pub fn cancelled(&mut self, round: u64) -> bool {
        if self.next.as_ref().is_some_and(|a| a.round == round && a.done.is_none()) {
            self.next = None;
            return true;
        }
        false
    }

    /// Drop what was trained ahead (a re-sync, a new trainer thread).
    pub fn clear(&mut self) {
        self.next = None;
    }
}

/// For a job that trained ahead: how much of its round trained before the
/// round's state landed (the rest trained on it), the exchange's share; and
/// how long the trainer stood between two rounds. Nothing for other jobs.
pub fn report_overlapped(out: Reporter, done: &JobDone) {
    if let JobDone::Trained {
        round,
        secs,
        overlapped: true,
        waited_secs,
        idle_before_secs,
        landed_after,
        ..
    } = done
    {
        out.event(
            "trained_ahead",
            json!({
                "round": round,
                "steps_before_landing": landed_after,
                "secs": secs,
                "waited_secs": waited_secs,
                "idle_before_secs": idle_before_secs,
            }),
        );
    }
}
