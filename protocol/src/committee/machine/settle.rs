//! Settling a round: fetching each shard's chosen aggregate, the norm
//! gate's suspects, handing a shard without a result to its backups, and
//! applying once every shard is fetched or zero.

use super::*;

impl CommitteeMachine {
    pub(super) fn on_fetched(
        &mut self,
        shard: u32,
        result_hash: [u8; 32],
        outcome: FetchOutcome,
        norm: f32,
        included: Option<IncludedSigners>,
    ) {
        let Some(v) = self.shards.get(shard as usize) else { return };
        if v.chosen != Some(result_hash) {
            return;
        }
        let claim = v.results.values().find(|r| r.result_hash == result_hash);
        let claim = claim.map(|r| (r.included_root, r.included_count as usize));
        let roster = &self.ledger.roster;
        let signers = included.and_then(|s| {
            let (root, count) = claim?;
            let (signers, got) = s.signers_and_root(roster).ok()?;
            (got == root && signers.len() == count).then_some(signers)
        });
        // Shard 0 is served with its included signers: a holder that
        // serves none, or a list that does not match the signed root (one
        // lying co-signer cannot refute the others' claim), did not serve
        // it.
        let outcome = match outcome {
            FetchOutcome::Served if shard == 0 && signers.is_none() => FetchOutcome::Unavailable,
            o => o,
        };
        if let (0, FetchOutcome::Served, Some(signers)) = (shard, outcome, signers) {
            self.included0 = Some((result_hash, signers));
        }
        let now = self.now;
        let v = &mut self.shards[shard as usize];
        // The claim was served: a later report of another ask for it (the
        // same bytes) changes nothing.
        if v.fetched {
            return;
        }
        match outcome {
            FetchOutcome::Served => {
                v.retry_at = None;
                if !v.zero {
                    v.fetched = true;
                    self.settled += 1;
                    self.gate.note_fetched(shard, result_hash, norm, self.plan.layout().len(shard));
                }
            }
            FetchOutcome::Unavailable if v.tried < v.holders.len() => {
                let at = now + fetch_backoff(v.tried);
                v.retry_at = Some(at);
                self.retries.insert((at, shard));
            }
            FetchOutcome::Unavailable if v.passes + 1 < FETCH_PASSES => {
                // Every holder failed once: all are asked again after the
                // longest back-off.
                v.passes += 1;
                v.tried = 0;
                let at = now + FETCH_RETRY_MAX_MS;
                v.retry_at = Some(at);
                self.retries.insert((at, shard));
            }
            _ => {
                // Values that do not decode, or no holder serves them after
                // every pass: the claim is taken as wrong and the next one
                // wins.
                v.wrong.insert(result_hash);
                v.chosen = None;
                self.dirty.insert(shard);
            }
        }
    }

    /// Ask the next holder of shard `s`'s chosen claim.
    pub(super) fn ask_next_holder(&mut self, s: usize) {
        let v = &mut self.shards[s];
        let (Some(hash), Some(&from)) = (v.chosen, v.holders.get(v.tried)) else { return };
        v.tried += 1;
        v.retry_at = None;
        self.actions.push_back(CommitteeAction::FetchAggregate { shard: s as u32, result_hash: hash, from });
    }

    /// In an open round that holds its own delta, once every announcer's
    /// input is in: when it closes its inputs, a grace period after the
    /// newest announcement (nobody knows who else will come, so a quiet
    /// spell stands for the roster's "all in").
    pub(super) fn open_inputs_quiet_at(&self) -> Option<u64> {
        if !self.open_round() || self.mine.is_none() || self.duties.get(&0) != Some(&false) {
            return None;
        }
        let inputs = self.inputs.get(&0)?;
        let announcers = self.members(0);
        announcers
            .iter()
            .all(|k| inputs.contains_key(k))
            .then_some(self.last_announced_at + self.cfg.grace_ms)
    }

    pub(super) fn advance(&mut self) {
        self.send_sketches();
        if self.applied {
            return;
        }
        let now = self.now;
        // A deadline passed since the last look: every shard is looked at.
        let passed = self.deadlines().filter(|t| *t <= now).count();
        if passed != self.deadlines_passed {
            self.deadlines_passed = passed;
            self.dirty.extend(0..self.plan.shards());
        }
        // Duties: aggregate at the input deadline, or when every roster
        // member's shard is in; a backup's a grace period after it took over.
        let duties: Vec<(u32, bool)> = self.duties.iter().map(|(s, d)| (*s, *d)).collect();
        for (s, done) in duties {
            if done {
                continue;
            }
            let due = match self.duty_since.get(&s) {
                None => now >= self.input_deadline() || self.mid_round_due.is_some_and(|t| now >= t),
                Some(since) => now >= since + self.cfg.grace_ms,
            };
            // Every awaited roster member's shard is in (newcomers' shards
            // that came by then are included too); in an open round every
            // announcer's, with no new one for a grace period.
            let all_in = !self.ledger.roster.is_empty()
                && self.inputs.get(&s).is_some_and(|m| {
                    !m.is_empty()
                        && self.ledger.roster.iter().filter(|k| self.awaited(k)).all(|k| m.contains_key(k))
                });
            let all_in = all_in || self.open_inputs_quiet_at().is_some_and(|t| now >= t);
            if due || all_in {
                self.aggregate(s);
            }
        }
        // Shards to send again that are due.
        let due: Vec<(PublicKey, u32)> =
            self.resend.iter().filter(|(_, (_, at))| at.is_some_and(|t| t <= now)).map(|(k, _)| *k).collect();
        for (to, shard) in due {
            if let Some(e) = self.resend.get_mut(&(to, shard)) {
                e.1 = None;
            }
            if let Some(send) = self.our_shard_to(to, shard) {
                self.actions.push_back(send);
            }
        }
        // Retries of aggregate fetches that are due.
        while let Some(&(at, s)) = self.retries.first() {
            if at > now {
                break;
            }
            self.retries.pop_first();
            if self.shards[s as usize].retry_at == Some(at) {
                self.ask_next_holder(s as usize);
            }
        }
        // Shards whose backup's time is up.
        while let Some(&(at, s)) = self.escalations.first() {
            if at > now {
                break;
            }
            self.escalations.pop_first();
            self.dirty.insert(s);
        }
        if self.input_pull_at.is_some_and(|t| t <= now) {
            self.pull_inputs();
        }
        // Results to pull that are due.
        while let Some(&(at, s)) = self.result_pulls_due.first() {
            if at > now {
                break;
            }
            self.result_pulls_due.pop_first();
            self.pull_result(s);
        }
        // Pick claims of the shards that changed (a shard handed to a
        // backup that already signed changes again at once).
        while let Some(s) = self.dirty.pop_first() {
            self.look_at(s as usize, now);
        }
        // Each pass that gives up a claim marks its shard wrong for good,
        // so this ends; a shard that settles again at once (zero, past its
        // last backup) is checked again now, as no deadline is left to.
        loop {
            if self.settled < self.shards.len() {
                return;
            }
            let passes = self.gate_passes();
            let gave_up = !self.dirty.is_empty();
            // Shards whose claim the gate gave up pick again now.
            while let Some(s) = self.dirty.pop_first() {
                self.look_at(s as usize, now);
            }
            if passes && self.settled == self.shards.len() {
                break;
            }
            if !gave_up {
                return;
            }
        }
        self.applied = true;
        let shards = self.shards.iter().map(|v| if v.zero { None } else { v.chosen }).collect();
        let ledger = self.next_ledger();
        self.applying = Some(ledger.clone());
        self.actions.push_back(CommitteeAction::Apply { round: self.round, base: self.base, shards, ledger });
        self.send_sketches();
    }

    /// Pick shard `s`'s claim when it is ready, or hand the shard to its
    /// next backup, or give it up as zero.
    pub(super) fn look_at(&mut self, s: usize, now: u64) {
        if s >= self.shards.len() || self.shards[s].chosen.is_some() || self.shards[s].zero {
            return;
        }
        let best = self.best_claim(s);
        let level = self.shards[s].level;
        // A backup's members aggregate a grace period after it took the
        // shard: its claims are decided once they all signed, or when the
        // shard would go on to the next backup, not by the first result
        // that came (one a member signed before the hand-over).
        let (settled_at, decided_at) = match level {
            0 => (self.result_deadline(), self.decide_deadline()),
            _ => {
                let t = self.shards[s].level_since + 2 * self.cfg.grace_ms;
                (t, t)
            }
        };
        let ready = match &best {
            None => false,
            Some(_) if self.conflicted(s) => now >= decided_at,
            Some(_) => self.all_members_in(s) || now >= settled_at,
        };
        if ready {
            if let Some((hash, mut signers)) = best {
                // Nodes start at signers by their rank in the roster, so
                // each signer serves about N / (signers) of them.
                let rank = self.ledger.roster.binary_search(&self.me).unwrap_or_else(|i| i);
                let start = (rank + s) % signers.len().max(1);
                signers.rotate_left(start);
                let v = &mut self.shards[s];
                v.chosen = Some(hash);
                v.holders = signers;
                v.tried = 0;
                v.passes = 0;
                self.ask_next_holder(s);
            }
        } else if best.is_none() && level == 0 && now >= self.result_deadline() {
            self.fall_back(s as u32, 1);
        } else if best.is_none() && level >= 1 && now >= self.shards[s].level_since + 2 * self.cfg.grace_ms {
            self.fall_back(s as u32, level + 1);
        }
    }

    /// Whether the round may apply its fetched aggregates: no chosen claim
    /// was shown wrong or lost its signers to a proof since it was chosen,
    /// and none is a suspect of the norm gate still waiting for its audit
    /// (`super::gate`). New suspects are audited; a claim given up (wrong,
    /// proven, or a suspect no audit agreed with in time) leaves its shard
    /// to pick another claim or go to its backup.
    pub(super) fn gate_passes(&mut self) -> bool {
        // A chosen claim shown wrong, or whose signers were proven, since
        // it was chosen is not applied.
        for shard in 0..self.plan.shards() {
            if let Some(claim) = self.shards[shard as usize].chosen.filter(|c| self.given_up(shard, c)) {
                self.refuse(shard, claim);
            }
        }
        let (me, shards) = (self.me, &self.shards);
        let ours =
            |s: u32, c: &[u8; 32]| shards[s as usize].results.get(&me).is_some_and(|r| &r.result_hash == c);
        let verdicts = self.gate.check(self.now, self.cfg.grace_ms, ours);
        let passes = verdicts.is_empty();
        for verdict in verdicts {
            match verdict {
                Suspect::New { shard, claim } if self.given_up(shard, &claim) => self.refuse(shard, claim),
                Suspect::New { shard, claim } => self.audit_suspect(shard, claim),
                Suspect::TimedOut { shard, claim } => self.refuse(shard, claim),
                Suspect::Waiting => {}
            }
        }
        passes
    }

    /// Whether shard `shard`'s claim `claim` was shown wrong, or none of
    /// its signers counts any more (proven since it was chosen).
    pub(super) fn given_up(&self, shard: u32, claim: &[u8; 32]) -> bool {
        let v = &self.shards[shard as usize];
        let backed = v.results.values().any(|r| r.result_hash == *claim && self.counts(&r.signer));
        v.wrong.contains(claim) || !backed
    }

    /// Audit shard `shard`'s claim `claim` as if drawn (unless an audit of
    /// it, or a re-check of a proof against it, is under way or done).
    pub(super) fn audit_suspect(&mut self, shard: u32, claim: [u8; 32]) {
        self.audits.insert(shard);
        let result = self.shards[shard as usize].results.values().find(|r| r.result_hash == claim).cloned();
        let result = result.filter(|r| !self.verifying.contains(&(r.signer, r.result_hash)));
        if let Some(result) = result.filter(|_| self.asked.insert((shard, claim))) {
            self.actions.push_back(CommitteeAction::RequestIncluded { result });
        }
    }

    /// Give up shard `shard`'s chosen claim `claim` as wrong.
    pub(super) fn refuse(&mut self, shard: u32, claim: [u8; 32]) {
        self.gate.forget(shard, &claim);
        let v = &mut self.shards[shard as usize];
        if v.chosen != Some(claim) {
            return;
        }
        v.wrong.insert(claim);
        v.chosen = None;
        v.holders.clear();
        v.tried = 0;
        v.passes = 0;
        v.retry_at = None;
        if std::mem::take(&mut v.fetched) {
            self.settled -= 1;
        }
        self.dirty.insert(shard);
    }

    /// Shard `s` got no result: backup `level` takes it (trainers re-send
    /// it there, its members aggregate a grace period later, and two grace
    /// periods later the next backup takes it); past the last backup it is
    /// applied as zero.
    pub(super) fn fall_back(&mut self, s: u32, level: u32) {
        let Some(f) = self.plan.fallback(s, level) else {
            self.shards[s as usize].zero = true;
            self.settled += 1;
            return;
        };
        self.shards[s as usize].level = level;
        self.shards[s as usize].level_since = self.now;
        // What this backup signed before we handed the shard to it counts now.
        let kept = std::mem::take(&mut self.shards[s as usize].from_later_backups);
        for r in kept.into_values() {
            self.on_result(r);
        }
        // With no result by then the next backup takes it.
        self.escalations.insert((self.now + 2 * self.cfg.grace_ms, s));
        if self.plan.is_member(f, &self.me) && !self.stand_by_recorded(s) {
            self.duties.insert(s, false);
            self.duty_since.insert(s, self.now);
            // Trainers that handed the shard over before this node did sent
            // it here while it took no inputs for it: asked a pull wait on.
            self.input_pulls_left = self.input_pulls_left.max(1);
            let at = self.now + self.pull_wait();
            self.input_pull_at = Some(self.input_pull_at.map_or(at, |t| t.min(at)));
        }
        self.send_shard(s, f);
    }

    pub(super) fn next_ledger(&self) -> Ledger {
        let shard0 = self.shards.first().and_then(|v| {
            let hash = v.chosen?;
            self.included0.as_ref().filter(|(h, _)| *h == hash).map(|(_, signers)| signers.as_slice())
        });
        let proven: BTreeMap<PublicKey, u64> =
            self.proven.iter().filter(|(_, r)| **r < self.round).map(|(k, r)| (*k, *r)).collect();
        self.ledger.next(shard0, &proven)
    }
}
