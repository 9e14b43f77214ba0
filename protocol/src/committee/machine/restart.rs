//! Entering a round other than by training through it: restarts (what
//! this node signed before it stopped), entering mid-way (pulls of what
//! was gossiped and sent before), and catching up to the state a majority
//! of the roster trained from (`super::super::catch_up`).

use super::*;

impl CommitteeMachine {
    /// Former roster members remembered before a restart (the driver
    /// stores `former_members` with each state): their results are tallied
    /// apart again, so a side that ran apart from them can still rejoin.
    pub fn restore_former(&mut self, keys: &[PublicKey]) {
        self.catch_up.restore_former(keys, &self.ledger, self.round, self.now);
    }

    /// The keys that dropped off the roster lately (for the driver to store).
    pub fn former_members(&self) -> Vec<PublicKey> {
        self.catch_up.former_members()
    }

    /// This node enters the round mid-way (it restarted, or caught up):
    /// what was gossiped and sent to it before is not here. A pull wait on
    /// it asks owners for their results and trainers for the inputs of the
    /// shards it aggregates.
    pub fn entered_mid_round(&mut self) {
        if self.open_round() {
            return;
        }
        let (at, wait) = (self.now + self.pull_wait(), self.pull_wait());
        self.result_pulls_due.extend((0..self.plan.shards()).map(|s| (at, s)));
        self.input_pull_at = Some(at);
        self.input_pulls_left = MAX_RESULT_PULLS;
        self.mid_round_due = Some(at + u64::from(MAX_RESULT_PULLS) * wait);
    }

    /// Ask the trainers whose inputs are missing for their shards of the
    /// shards we aggregate (the awaited roster members, and the newcomers
    /// whose manifests came), again a pull wait later.
    pub(super) fn pull_inputs(&mut self) {
        self.input_pull_at = None;
        if self.input_pulls_left == 0 {
            return;
        }
        self.input_pulls_left -= 1;
        let open: Vec<u32> = self.duties.iter().filter(|(_, done)| !**done).map(|(s, _)| *s).collect();
        let roster = &self.ledger.roster;
        for s in open {
            let held = self.inputs.get(&s);
            let missing = |k: &PublicKey| *k != self.me && !held.is_some_and(|h| h.contains_key(k));
            let members = roster.iter().filter(|k| self.awaited(k) && missing(k));
            let newcomers = self.manifests.keys().filter(|k| roster.binary_search(k).is_err() && missing(k));
            let from: Vec<PublicKey> = members.chain(newcomers).copied().collect();
            if !from.is_empty() {
                self.actions.push_back(CommitteeAction::PullInputs { shard: s, from });
                self.input_pull_at = Some(self.now + self.pull_wait());
            }
        }
    }

    /// Train nothing until a state is fetched: the node holds a state
    /// without its ledger (it caught up with the first majority's state).
    pub fn wait_for_state(&mut self) {
        self.catch_up.wait();
    }

    /// Whether a fetched `state`, from which round `round` opens, moves
    /// this node: a later round, or another state for the round it is in.
    pub fn moves_to(&self, round: u64, state: StateId) -> bool {
        round > self.round
            || (round == self.round && state != self.base)
            || self.catch_up.rejoins(round, state)
    }

    /// Whether the node waits for a state before it trains.
    pub fn is_waiting(&self) -> bool {
        self.catch_up.is_waiting()
    }

    /// Ask for the state a majority signed when this node is behind it.
    pub(super) fn consider_catch_up(&mut self) {
        // Keys off the roster count toward a rival chain while they are
        // heard from every few rounds.
        let fresh_since = self.now.saturating_sub(RIVAL_HEARD_ROUNDS * self.cfg.input_ms);
        let (round, base, now) = (self.round, self.base, self.now);
        if let Some(t) = self.catch_up.target(&self.ledger, (round, base), &self.me, (now, fresh_since)) {
            self.actions.push_back(CommitteeAction::FetchState {
                round: t.round,
                state: t.state,
                holders: t.holders,
            });
        }
    }

    /// Re-sync: continue at `round` from `base` (fetched, with its ledger),
    /// dropping the round in progress.
    pub fn jump(&mut self, now: u64, round: u64, base: StateId, ledger: Ledger) {
        self.now = self.now.max(now);
        self.actions.clear();
        self.open(round, base, ledger);
        self.entered_mid_round();
    }

    /// What this node signed before a restart (the last `Record` it
    /// stored): it signs no other manifest, and no other result for a
    /// recorded shard, in that round. Records of past rounds are ignored.
    /// A record of this round with the leaves under its manifest gives the
    /// node its delta back: it sends its shards again (the payloads are the
    /// driver's durable blobs) and trains nothing new.
    pub fn restore_signed(&mut self, record: SignedRecord) {
        if record.round < self.round {
            return;
        }
        self.signed = record;
        self.restore_delta();
        // Results signed before the restart stand: their shards are not
        // aggregated a second time, and each is gossiped and served again
        // (a node that missed it asks its signer) with its included list.
        let shards: Vec<u32> = self.signed.results.iter().map(|r| r.shard).collect();
        for shard in shards {
            self.stand_by_recorded(shard);
        }
    }

    /// The recorded delta, when it is this round's and its leaves are
    /// whole: held as ours (in a round without a roster its manifest is
    /// what lets us sign results), and its shards sent again.
    pub(super) fn restore_delta(&mut self) {
        let Some(m) = self.signed.manifest.clone() else { return };
        let ours = m.round == self.round
            && m.base == self.base
            && m.signer == self.me
            && m.shards == self.plan.shards()
            && self.signed.leaves.len() == m.shards as usize;
        if !ours || self.mine.is_some() {
            return;
        }
        let leaves = self.signed.leaves.clone();
        let tree = MerkleTree::new(&leaves);
        if tree.root() != m.root {
            return;
        }
        self.manifests.insert(self.me, m);
        self.last_announced_at = self.now;
        self.mine = Some(OwnDelta { leaves, tree });
        for s in 0..self.plan.shards() {
            self.send_shard(s, s);
        }
    }

    /// If this node recorded a result for `shard` this round (it signed it
    /// before a restart), the shard is not aggregated again; the result is
    /// published again (and taken as a claim where the node holds a seat
    /// for the shard now) when its included list was recorded with it —
    /// without it neither the list nor shard 0's signers could be served.
    /// Whether it recorded one.
    pub(super) fn stand_by_recorded(&mut self, shard: u32) -> bool {
        let Some(i) = self.signed.results.iter().position(|r| {
            r.shard == shard
                && r.run == self.cfg.run
                && r.round == self.round
                && r.base == self.base
                && r.signer == self.me
                && (r.shard as usize) < self.shards.len()
        }) else {
            return false;
        };
        self.duties.insert(shard, true);
        let Some(list) = self.signed.lists.get(i).cloned() else { return true };
        let r = self.signed.results[i].clone();
        self.our_lists.insert(shard, list);
        self.actions.push_back(CommitteeAction::PublishResult(r.clone()));
        self.on_result(r);
        true
    }
}
