//! The committee node's side of the trainer thread: starting a round's
//! training (or taking a delta trained ahead), cutting a finished delta
//! into the plan's shards, and a trainer that died.

use std::time::Instant;

use murmur_protocol::StateId;

use super::{work, CommitteeNode, WorkDone};
use crate::net::offer::ShardOffer;
use crate::runtime::server::ServedStatus;
use crate::runtime::trainer::overlap::{report_overlapped, AtOpen, Trained};
use crate::runtime::trainer::{self, Job, JobDone};

impl CommitteeNode {
    pub(super) fn on_job(&mut self, done: JobDone) {
        report_overlapped(self.out, &done);
        match done {
            JobDone::Trained { round, delta, tokens, train_loss, secs, overlapped, .. } => {
                self.train_tokens += tokens;
                self.train_secs += secs;
                self.last_train_loss = train_loss;
                self.metrics.trained(tokens, secs);
                let trained = Trained { delta, tokens, train_loss };
                if overlapped {
                    if let Some(t) = self.overlap.finished(round, self.machine.round(), trained) {
                        self.cut(round, t);
                    }
                    return;
                }
                self.cut(round, trained);
            }
            // A round's report waits for its evaluation, which ends it
            // either way.
            JobDone::Evaluated { round, val_loss: Ok(val_loss) } => {
                self.last_val_loss = Some(val_loss);
                self.report_round(round, Some(val_loss));
                self.publish_telemetry();
            }
            JobDone::Evaluated { round, val_loss: Err(e) } => {
                tracing::error!("evaluating round {round}: {e}");
                self.report_round(round, None);
            }
            JobDone::Cancelled { round } => {
                // Training ahead was cancelled: train the round if it is open.
                if self.overlap.cancelled(round) && round == self.machine.round() {
                    self.train(round, self.machine.base());
                }
            }
            JobDone::Failed(e) => tracing::error!("trainer: {e}"),
            JobDone::Panicked(what) => self.trainer_died(format!("the trainer panicked: {what}")),
        }
    }

    /// Cut our delta of `round` into the round's shards and store them
    /// (on the blocking pool; `WorkDone::Cut` feeds the machine), then, in
    /// an overlapped run, start training the next round ahead.
    pub(super) fn cut(&mut self, round: u64, t: Trained) {
        if round != self.machine.round() || self.own.as_ref().is_some_and(|(r, _)| *r == round) {
            return;
        }
        let Trained { delta, tokens, train_loss } = t;
        let layout = self.machine.plan().layout();
        let (store, codec, feedback, tx) =
            (self.store.clone(), self.spec.codec, self.feedback.clone(), self.tx.clone());
        tokio::task::spawn_blocking(move || {
            let mut fb = feedback.lock().unwrap_or_else(|p| p.into_inner());
            let result = work::cut_delta(&store, codec, &mut fb, &delta, layout);
            let _ = tx.send(WorkDone::Cut { round, tokens, train_loss, result });
        });
        if self.spec.pacing.overlapped && self.trainer_alive {
            let epoch = self.trainer.epoch();
            let (base, state) = (self.machine.base(), self.state.state().clone());
            if let Some(job) = self.overlap.start(epoch, round + 1, base, state) {
                if !self.trainer.submit(job) {
                    self.trainer_died("the trainer thread is gone".into());
                }
            }
        }
    }

    /// Our leaves of the round, served to re-checkers and auditors with the
    /// manifest the machine signed over them (none before it signed).
    pub(super) fn serve_own_leaves(&mut self) {
        let (Some(manifest), Some(leaves)) =
            (self.machine.manifest_of(&self.me).cloned(), self.machine.own_leaves().map(<[_]>::to_vec))
        else {
            return;
        };
        let r = self.machine.round();
        self.own = Some((r, leaves.clone()));
        let tree = murmur_protocol::committee::MerkleTree::new(&leaves);
        let layout = self.machine.plan().layout();
        for (s, leaf) in leaves.iter().enumerate() {
            self.served.hold_own(r, s as u32, leaf.payload_hash.0, layout.len(s as u32));
            self.served.hold_leaf(ShardOffer {
                round: r,
                signer: self.me,
                shards: leaves.len() as u32,
                leaf: *leaf,
                proof: tree.proof(s),
                manifest: Box::new(manifest.clone()),
                payload: None,
            });
        }
    }

    /// Train round `round` from `base` (the current state), unless the node
    /// is waiting to catch up.
    pub(super) fn train(&mut self, round: u64, base: StateId) {
        if base != self.state_id() || self.machine.is_waiting() {
            return;
        }
        self.server.set_status(ServedStatus { round, state: Some(self.state.id().0) });
        if !self.trainer_alive {
            return;
        }
        match self.overlap.open(round, self.state.state()) {
            AtOpen::Finished(t) => return self.cut(round, t),
            AtOpen::Landed => return,
            AtOpen::Train => {}
        }
        self.first_train.get_or_insert_with(Instant::now);
        let epoch = self.trainer.cancel();
        let job = Job::Train {
            epoch,
            round,
            base,
            state: self.state.state().clone(),
            reset_moments: false,
            overlapped: None,
        };
        if !self.trainer.submit(job) {
            self.trainer_died("the trainer thread is gone".into());
        }
    }

    /// The trainer thread is gone: start a new one, or stop the node when
    /// it died too often.
    pub(super) fn trainer_died(&mut self, why: String) {
        if !self.trainer_alive {
            return;
        }
        self.trainer_alive = false;
        if let Err(e) = self.restarts.take(Instant::now(), &why, self.out) {
            self.fatal = Some(e);
            return;
        }
        self.metrics.trainer_restarted();
        let tx = self.tx.clone();
        trainer::respawn(self.trainer_setup.clone(), move |started| {
            let _ = tx.send(WorkDone::TrainerStarted(started));
        });
    }
}
