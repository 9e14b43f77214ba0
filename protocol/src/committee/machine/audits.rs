//! Audits and fraud proofs: the shards this node draws from its own
//! signature, their sketches and re-checks, and the proofs that a
//! recomputation, a second manifest or a second result make.

use super::*;

/// Domain of the hash that turns a node's draw signature into shard numbers.
pub const DOMAIN_AUDIT_DRAW: &str = "murmur 2026-11 v2 audit-draw";

/// Domain of the hash that turns a draw signature and a shard into the
/// seed of a sketch audit.
pub const DOMAIN_AUDIT_SEED: &str = "murmur 2026-11 v2 audit-seed";

/// The holder of `key`'s signature over (run, round, base): its audit
/// draw, which only it can compute.
pub fn draw_signature(key: &NodeKey, run: RunId, round: u64, base: StateId) -> Signature {
    let mut msg = Vec::with_capacity(72);
    msg.extend_from_slice(&run.0);
    msg.extend_from_slice(&round.to_le_bytes());
    msg.extend_from_slice(&base.0);
    key.sign(SIGN_AUDIT_DRAW, &msg)
}

/// The `count` shards (of `shards`, distinct while there are enough) that
/// the holder of `key` audits in `round` from `base`: hashes of its
/// signature over (run, round, base).
pub fn audit_draw(
    key: &NodeKey,
    run: RunId,
    round: u64,
    base: StateId,
    shards: u32,
    count: u32,
) -> BTreeSet<u32> {
    shards_of_draw(&draw_signature(key, run, round, base), shards, count)
}

pub(super) fn shards_of_draw(sig: &Signature, shards: u32, count: u32) -> BTreeSet<u32> {
    let mut out = BTreeSet::new();
    let want = count.min(shards) as usize;
    let mut i = 0u64;
    while out.len() < want && i < 4 * u64::from(count) + 16 {
        let mut b = sig.0.to_vec();
        b.extend_from_slice(&i.to_le_bytes());
        let h = domain_hash(DOMAIN_AUDIT_DRAW, &b);
        let x = u64::from_le_bytes(h[..8].try_into().unwrap_or([0; 8]));
        out.insert((x % u64::from(shards.max(1))) as u32);
        i += 1;
    }
    out
}

/// The seed of the sketch audit of `shard` under draw signature `sig`.
pub fn audit_seed(sig: &Signature, shard: u32) -> [u8; 32] {
    let mut b = sig.0.to_vec();
    b.extend_from_slice(&shard.to_le_bytes());
    domain_hash(DOMAIN_AUDIT_SEED, &b)
}

impl CommitteeMachine {
    /// Whether this node re-checks `shard` this round (its own draw).
    pub(super) fn drawn(&self, shard: u32) -> bool {
        self.audits.contains(&shard)
    }

    pub(super) fn on_included(&mut self, result: ShardResult, included: IncludedList) {
        if result.round != self.round || included.root() != result.included_root {
            return;
        }
        self.auditing.insert(result.result_hash);
        if self.drawn(result.shard) {
            self.audits_started.insert(result.shard);
        }
        if let Some(sketch) = self.sketch_of(&result, &included) {
            self.sketches.push(sketch);
            self.sketches_due.get_or_insert(self.now + SKETCH_WAIT_MS);
            self.send_sketches();
            return;
        }
        let holders = self.holders_of(result.shard);
        self.actions.push_back(CommitteeAction::Recheck { result, included, holders });
    }

    /// Send the waiting sketches as one audit once every drawn shard's
    /// audit started (each trainer is then asked once for all of them), or
    /// `SKETCH_WAIT_MS` after the first was ready (a signer that never
    /// serves its list holds back no other audit for long), or once the
    /// result deadline passed or the round was applied.
    pub(super) fn send_sketches(&mut self) {
        let all_started = self.audits.iter().all(|s| self.audits_started.contains(s));
        let waited = self.sketches_due.is_some_and(|t| self.now >= t);
        let late = self.applied || waited || self.now >= self.result_deadline();
        if !self.sketches.is_empty() && (all_started || late) {
            self.sketches_due = None;
            self.actions.push_back(CommitteeAction::Sketch(std::mem::take(&mut self.sketches)));
        }
    }

    /// A sketch audit of `result`, when it is one of our drawn audits (not
    /// a conflict with our own claim), the run's mode is linear, and we
    /// hold the manifest each included entry names (an entry whose root we
    /// do not know is re-checked from its inputs, which bring the manifest:
    /// a second manifest of one key is a proof).
    pub(super) fn sketch_of(&self, result: &ShardResult, included: &IncludedList) -> Option<SketchAudit> {
        let sig = self.draw.as_ref()?;
        let ours = self.shards.get(result.shard as usize)?.results.get(&self.me);
        if !self.drawn(result.shard) || ours.is_some() || !self.cfg.rule.is_linear() {
            return None;
        }
        let inputs = included
            .entries
            .iter()
            .map(|(signer, root)| self.manifests.get(signer).filter(|m| m.root == *root).cloned())
            .collect::<Option<Vec<ShardedManifest>>>()?;
        Some(SketchAudit {
            result: result.clone(),
            included: included.clone(),
            inputs,
            seed: audit_seed(sig, result.shard),
            holders: self.holders_of(result.shard),
        })
    }

    pub(super) fn on_rechecked(&mut self, result: ShardResult, included: IncludedList, matches: bool) {
        self.verifying.remove(&(result.signer, result.result_hash));
        if matches {
            if result.round == self.round {
                self.gate.agree(result.result_hash);
            }
            return;
        }
        let s = result.shard as usize;
        // Every signer of the same wrong claim is accused, each by its own
        // signed result.
        let mut accused = vec![result.clone()];
        if s < self.shards.len() && result.round == self.round {
            self.shards[s].wrong.insert(result.result_hash);
            self.dirty.insert(result.shard);
            accused.extend(
                self.shards[s]
                    .results
                    .values()
                    .filter(|r| r.claim() == result.claim() && r.signer != result.signer)
                    .cloned(),
            );
        }
        for r in accused {
            if r.signer != self.me
                && !self.proven.contains_key(&r.signer)
                && self.proven.len() < MAX_LEDGER_KEYS
            {
                self.proven.insert(r.signer, r.round);
                self.dirty.extend(0..self.plan.shards());
                let proof = FraudProof::WrongResult { result: r, included: included.clone() };
                self.actions.push_back(CommitteeAction::PublishProof(Box::new(proof)));
            }
        }
    }

    /// Whether a proof against `key` is taken: only against a key on this
    /// round's roster, which every honest node on this base holds alike,
    /// so all of them take or drop the same proofs, and a proof against a
    /// key made up for it (two messages signed by a fresh key cost its
    /// sender nothing) never reaches the ledger. In a round without a
    /// roster, where every signer is a newcomer, at most `MAX_NEWCOMERS`.
    pub(super) fn may_be_proven(&self, key: &PublicKey) -> bool {
        if self.ledger.roster.is_empty() {
            self.proven.len() < MAX_NEWCOMERS
        } else {
            self.ledger.roster.binary_search(key).is_ok()
        }
    }

    pub(super) fn prove(&mut self, proof: FraudProof) {
        let proof = proof.canonical();
        let (who, round) = (proof.accused(), proof.round());
        if self.proven.len() >= MAX_LEDGER_KEYS || self.ledger.is_excluded(&who) {
            return;
        }
        if self.proven.insert(who, round).is_none() {
            self.actions.push_back(CommitteeAction::PublishProof(Box::new(proof)));
            // Its claims no longer count anywhere.
            self.dirty.extend(0..self.plan.shards());
        }
    }

    pub(super) fn on_proof(&mut self, p: FraudProof) {
        let accused = p.accused();
        if self.proven.contains_key(&accused)
            || self.ledger.is_excluded(&accused)
            || !self.may_be_proven(&accused)
        {
            return;
        }
        if p.check().is_err() {
            return;
        }
        match p {
            FraudProof::WrongResult { result, included } => {
                // Inputs of past rounds may be gone: only this round's
                // wrong results are re-verified (proofs travel within the
                // round), and only a result its signer holds a seat for.
                let s = result.shard as usize;
                if result.round != self.round || result.base != self.base || s >= self.shards.len() {
                    return;
                }
                // Taken as if gossiped: a different result its signer gave
                // for the shard before is a TwoResults proof at once, so a
                // signer has one result a shard to be re-checked.
                self.on_result(result.clone());
                let v = &self.shards[s];
                let held = v.results.get(&accused).or_else(|| v.from_later_backups.get(&accused));
                if self.proven.contains_key(&accused)
                    || held.map(|r| r.result_hash) != Some(result.result_hash)
                {
                    return;
                }
                if self.auditing.contains(&result.result_hash) {
                    // Our own audit of that claim is under way or done: it
                    // proves the claim itself, or the proof does not hold.
                    return;
                }
                if self.verifying.len() < MAX_NEWCOMERS
                    && self.verifying.insert((accused, result.result_hash))
                {
                    let holders = self.holders_of(result.shard);
                    self.actions.push_back(CommitteeAction::Recheck { result, included, holders });
                }
            }
            p => self.prove(p),
        }
    }
}
