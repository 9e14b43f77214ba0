//! Results and the claims they make: taking a signed result (one per
//! signer and shard; a second, different one is a `TwoResults` proof),
//! pulling the results a node missed, and picking each shard's claim.

use super::*;

/// Keep `r` as its signer's result in `held` unless that signer has one
/// there already: a different one is a `TwoResults` proof. Whether `r`
/// was new.
pub(super) fn keep_first(
    held: &mut BTreeMap<PublicKey, ShardResult>,
    r: &ShardResult,
) -> Result<bool, Box<FraudProof>> {
    match held.get(&r.signer) {
        Some(old) if old != r => Err(Box::new(FraudProof::TwoResults { a: old.clone(), b: r.clone() })),
        Some(_) => Ok(false),
        None => {
            held.insert(r.signer, r.clone());
            Ok(true)
        }
    }
}

impl CommitteeMachine {
    /// Shard `s` still lacks results of members who would have signed one
    /// (its committee, and the backups that took it over): ask them, again
    /// a pull wait later, at most `MAX_RESULT_PULLS` times.
    pub(super) fn pull_result(&mut self, s: u32) {
        let Some(v) = self.shards.get(s as usize) else { return };
        if self.open_round() || v.chosen.is_some() || v.zero || v.pulls >= MAX_RESULT_PULLS {
            return;
        }
        let mut from: Vec<PublicKey> = self
            .holders_of(s)
            .into_iter()
            .filter(|k| *k != self.me && self.counts(k) && !v.results.contains_key(k))
            .collect();
        // Every node serves the results it applied. A node that entered the
        // round mid-way (others may have applied it: the signer may be down,
        // or a backup it did not see take over signed), or whose signers'
        // connections are all closed, asks a few other roster members after
        // the signers, others at each pull; before that nobody has applied
        // the round, so the signers alone are asked.
        let roster = &self.ledger.roster;
        let signers_gone = !from.is_empty() && from.iter().all(|k| self.gone.contains(k));
        if (self.mid_round_due.is_some() || signers_gone) && !roster.is_empty() {
            // Spread by rank, so the nodes behind do not all ask the same three.
            let rank = roster.binary_search(&self.me).unwrap_or_else(|i| i);
            let start = (rank + s as usize + v.pulls as usize * RESULT_ASKS_BEYOND_SIGNERS) % roster.len();
            let beyond: Vec<PublicKey> = roster[start..]
                .iter()
                .chain(&roster[..start])
                .filter(|k| **k != self.me && self.counts(k) && !self.gone.contains(k) && !from.contains(k))
                .take(RESULT_ASKS_BEYOND_SIGNERS)
                .copied()
                .collect();
            from.extend(beyond);
        }
        if from.is_empty() {
            return;
        }
        let held: Vec<PublicKey> = v.results.keys().copied().collect();
        self.shards[s as usize].pulls += 1;
        self.result_pulls_due.insert((self.now + self.pull_wait(), s));
        self.actions.push_back(CommitteeAction::PullResult { shard: s, from, held });
    }

    pub(super) fn on_result(&mut self, r: ShardResult) {
        let s = r.shard as usize;
        if r.run != self.cfg.run {
            return;
        }
        let ours = r.round == self.round && r.base == self.base && s < self.shards.len();
        let claims = ours && self.counts(&r.signer) && self.may_aggregate(r.shard, &r.signer);
        // A later backup's result: the others handed the shard on before
        // this node did; it is kept until this node does too.
        let later = ours && !claims && self.counts(&r.signer) && self.backs_up_later(r.shard, &r.signer);
        let commits = self.commits(&r);
        // A result of a former roster member: its word counts toward a
        // rival chain (a side that ran apart from ours).
        let outside = !(claims || commits || later) && r.round > 0 && self.catch_up.is_former(&r.signer);
        if outside {
            if self.counts(&r.signer) && self.result_signed(&r) {
                self.catch_up.note_outside(r.signer, r.round - 1, r.base, self.now);
                self.consider_catch_up();
            }
            return;
        }
        if !(claims || commits || later) || !self.result_signed(&r) {
            return;
        }
        if commits {
            self.catch_up.note_state(r.signer, r.round - 1, r.base);
            let newer = self.early_results.get(&r.signer).is_none_or(|kept| kept.round < r.round);
            // One per signer; any signer commits while there is no roster,
            // so as many as the newcomers a round takes.
            let room = self.early_results.contains_key(&r.signer)
                || self.early_results.len() < self.ledger.roster.len() + MAX_NEWCOMERS;
            if !ours && r.round >= self.round && newer && room {
                self.early_results.insert(r.signer, r.clone());
            }
            if !ours {
                self.consider_catch_up();
            }
        }
        if !(claims || later) {
            return;
        }
        let view = &mut self.shards[s];
        let held = if later { &mut view.from_later_backups } else { &mut view.results };
        match keep_first(held, &r) {
            Err(proof) => {
                self.prove(*proof);
                return;
            }
            Ok(false) => return,
            Ok(true) if later => return,
            Ok(true) => {}
        }
        self.dirty.insert(r.shard);
        if self.first_result_at.is_none() {
            // Results are coming: the shards still without one pull again
            // (pulls made on entering the round came before any existed).
            self.first_result_at = Some(self.now);
            let at = self.now + self.pull_wait();
            self.result_pulls_due.extend((0..self.plan.shards()).map(|shard| (at, shard)));
            self.shards.iter_mut().for_each(|v| v.pulls = 0);
        }
        // Members re-check every claim but their own on their shard; other
        // nodes re-check their random draw.
        let ours = self.shards[s].results.get(&self.me).map(ShardResult::claim);
        let conflict = ours.is_some_and(|c| c != r.claim());
        if (conflict || self.drawn(r.shard))
            && r.signer != self.me
            && self.asked.insert((r.shard, r.result_hash))
        {
            self.actions.push_back(CommitteeAction::RequestIncluded { result: r.clone() });
        }
        // A member whose result came after the others' re-checks them now.
        if r.signer == self.me {
            let others: Vec<ShardResult> =
                self.shards[s].results.values().filter(|o| o.claim() != r.claim()).cloned().collect();
            for o in others {
                if self.asked.insert((o.shard, o.result_hash)) {
                    self.actions.push_back(CommitteeAction::RequestIncluded { result: o });
                }
            }
        }
    }

    /// The winning claim of a shard among valid, unrefuted results.
    pub(super) fn best_claim(&self, s: usize) -> Option<([u8; 32], Vec<PublicKey>)> {
        let v = &self.shards[s];
        let mut claims: BTreeMap<([u8; 32], [u8; 32], u32), Vec<PublicKey>> = BTreeMap::new();
        for r in v.results.values() {
            if self.counts(&r.signer) && !v.wrong.contains(&r.result_hash) {
                claims.entry(r.claim()).or_default().push(r.signer);
            }
        }
        claims
            .into_iter()
            .max_by(|a, b| (a.1.len(), a.0 .2).cmp(&(b.1.len(), b.0 .2)).then(b.0 .0.cmp(&a.0 .0)))
            .map(|(c, signers)| (c.0, signers))
    }

    pub(super) fn conflicted(&self, s: usize) -> bool {
        let v = &self.shards[s];
        let claims: BTreeSet<_> = v
            .results
            .values()
            .filter(|r| self.counts(&r.signer) && !v.wrong.contains(&r.result_hash))
            .map(ShardResult::claim)
            .collect();
        claims.len() > 1
    }

    /// Every member that counts of a committee that had the shard (its
    /// own, or a backup it went to) signed a result (in an open round:
    /// every announcer).
    pub(super) fn all_members_in(&self, s: usize) -> bool {
        let v = &self.shards[s];
        let all_in = |c: &[PublicKey]| {
            !c.is_empty() && c.iter().filter(|k| self.counts(k)).all(|k| v.results.contains_key(k))
        };
        all_in(&self.members(s as u32))
            || (1..=v.level)
                .filter_map(|l| self.plan.fallback(s as u32, l))
                .any(|f| all_in(self.plan.committee(f)))
    }
}
