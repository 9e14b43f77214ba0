//! Where the committee node's state changes: a round applied (the new
//! state, its ledger, its round report, what the store keeps) or a state
//! fetched to catch up. The machine decides both; this carries them out.

use std::collections::BTreeSet;
use std::time::Instant;

use murmur_protocol::committee::{CommitteeEvent, Ledger};
use murmur_protocol::{PublicKey, StateId, TrainingState};
use serde_json::json;

use super::{sync, CommitteeNode, Early, WorkDone};
use crate::runtime::hashed_state::HashedState;
use crate::runtime::server::ServedStatus;
use crate::runtime::trainer::Job;
use crate::store::BlobKind;

impl CommitteeNode {
    /// Store the current state's ledger, record it as the state's, keep
    /// the former roster members for a restart, and serve the state's parts.
    pub(super) fn record_state(&self) {
        let (bytes, hash, params) = (self.ledger.encode(), self.ledger.hash(), self.state.id());
        let run = self.spec.run_id();
        // An applied or fetched state's ledger was recorded before its
        // position moved; only the start-up state's may be missing.
        let recorded = self.store.meta.ledger_of(&run, &params).ok().flatten() == Some(hash);
        if !recorded && self.store.blobs.put(BlobKind::Ledger, &bytes).is_ok() {
            let _ = self.store.meta.set_ledger_of(&run, &params, &hash);
        }
        let _ = self.store.meta.set_former_members(&run, &self.machine.former_members());
        self.served.hold_state(self.state_id().0, (params.0, hash, bytes.len() as u64));
    }

    /// Fetch the state a majority signed (`FetchState`).
    pub(super) fn fetch_state(&mut self, round: u64, target: StateId, holders: Vec<PublicKey>) {
        self.out
            .event("resync", json!({ "round": round, "state_id": target.to_hex(), "peers": holders.len() }));
        let (net, store, spec, tx) =
            (self.net.clone(), self.store.clone(), self.spec.clone(), self.tx.clone());
        tokio::spawn(async move {
            let result = sync::fetch_state(&net, &store, &spec, target, &holders).await;
            let _ = tx.send(WorkDone::Synced { target, result });
        });
    }

    /// Continue from `state` (with `ledger`), fetched to catch up.
    pub(super) fn synced(&mut self, target: StateId, state: TrainingState, ledger: Ledger) {
        let round = state.round;
        self.trainer.cancel();
        self.overlap.clear();
        let previous = (self.state.id(), self.ledger.hash());
        self.state = HashedState::new(state);
        self.ledger = ledger;
        self.own = None;
        let feedback = self.feedback.clone();
        tokio::task::spawn_blocking(move || feedback.lock().unwrap_or_else(|p| p.into_inner()).reset());
        self.record_state();
        // What the chain left behind is collected as an applied round's is.
        self.collect_garbage(round, previous);
        self.served.open_round(round, &self.ledger.roster);
        self.round_opened = Instant::now();
        self.server.set_status(ServedStatus { round, state: Some(self.state.id().0) });
        self.out.event("resynced", json!({ "round": round, "state_id": target.to_hex() }));
        // Words for the rounds from here on were said on the chain left.
        self.own_results.retain(|r, _| *r < round);
        let ledger = self.ledger.clone();
        self.feed(CommitteeEvent::CaughtUp { round, state: target, ledger });
        self.feed_early();
    }

    /// Feed what came early for the round now open.
    fn feed_early(&mut self) {
        for e in self.early.take(self.machine.round()) {
            match e {
                Early::Gossip(m) => self.on_gossip(m),
                Early::Offer(o) => self.on_offer(o),
            }
        }
    }

    pub(super) fn applied(&mut self, round: u64, ledger: Ledger, next: TrainingState) {
        // The next roster is the signers shard 0's applied result included.
        let included = ledger.roster.len();
        // The tokens they trained on, as shard 0's result signs them.
        let shard0_tokens = self.machine.round_tokens();
        let round_tokens = shard0_tokens.unwrap_or(0);
        let previous = (self.state.id(), self.ledger.hash());
        self.state = HashedState::new(next);
        self.ledger = ledger;
        let new_state = self.state_id();
        let secs = self.round_opened.elapsed().as_secs_f64();
        self.pending_reports.insert(
            round,
            json!({
                "round": round,
                "state_id": new_state.to_hex(),
                "included": included,
                "state_blob": self.state.id().to_hex(),
                "round_tokens": round_tokens,
                "roster": self.ledger.roster.len(),
                "excluded": self.ledger.excluded.len(),
                "shards": self.machine.plan().shards(),
                "round_secs": secs,
                // Its delta is in: shard 0's applied result included it
                // (the next roster; without one the roster stays).
                "contributed": shard0_tokens.is_some() && self.ledger.roster.binary_search(&self.me).is_ok(),
            }),
        );
        self.metrics.round_closed(round);
        if self.eval_every == 0 || !round.is_multiple_of(self.eval_every) {
            self.report_round(round, None);
        } else if self.trainer_alive
            && !self.trainer.submit(Job::Evaluate { round, state: self.state.state().clone() })
        {
            self.trainer_died("the trainer thread is gone".into());
        }
        self.record_state();
        self.collect_garbage(round, previous);
        self.feed(CommitteeEvent::Applied { round, new_state });
        // The next round is open: what came early is fed now.
        let next = self.machine.round();
        self.served.open_round(next, &self.machine.ledger().roster);
        self.round_opened = Instant::now();
        self.server.set_status(ServedStatus { round: next, state: Some(self.state.id().0) });
        self.feed_early();
    }

    pub(super) fn keep(&mut self, round: u64, kind: BlobKind, id: [u8; 32]) {
        let v = self.kept.entry(round).or_default();
        if v.len() < 1 << 16 {
            v.insert((kind, id));
        }
    }

    /// Round `round` was applied: the shards and aggregates of rounds
    /// before it are deleted (slower nodes may still fetch round `round`'s),
    /// and every state but the current one and the one before.
    pub(super) fn collect_garbage(&mut self, round: u64, previous: (StateId, [u8; 32])) {
        let old: Vec<u64> = self.kept.range(..round).map(|(r, _)| *r).collect();
        let mut doomed: BTreeSet<(BlobKind, [u8; 32])> =
            old.iter().flat_map(|r| self.kept.remove(r).unwrap_or_default()).collect();
        // Blobs are named by their hash: one a later round holds as well
        // (an identical payload) stays.
        for later in self.kept.values() {
            doomed.retain(|b| !later.contains(b));
        }
        let (store, current, ledger) = (self.store.clone(), self.state.id(), self.ledger.hash());
        tokio::task::spawn_blocking(move || {
            for (kind, id) in doomed {
                let _ = store.blobs.remove(kind, &id);
            }
            // The current state and `KEPT_STATES` (the previous one).
            let _ = store.blobs.retain(BlobKind::State, &[current.0, previous.0 .0]);
            let _ = store.blobs.retain(BlobKind::Ledger, &[ledger, previous.1]);
        });
    }

    pub(super) fn report_round(&mut self, round: u64, val_loss: Option<f32>) {
        let Some(mut v) = self.pending_reports.remove(&round) else { return };
        v["val_loss"] = json!(val_loss);
        self.bytes.fill(&mut v, &self.net.stats);
        let running = self.trainer.busy.running_secs();
        crate::runtime::report::fill_training_time(
            &mut v,
            self.train_secs,
            running,
            self.first_train,
            self.train_tokens,
        );
        v["secs"] = json!(self.started.elapsed().as_secs_f64());
        v["peers"] = json!(self.trainers.len());
        crate::runtime::report::record_round(&self.store, &self.spec.run_id(), round, &v, val_loss);
        self.out.event("round", v);
    }
}
