//! A round's inputs: this node's own delta cut and sent to each shard's
//! committee (and again to a backup that takes a shard over), the
//! manifests and shards that come from other trainers, and aggregating a
//! shard this node holds a seat for into a signed result.

use super::*;

impl CommitteeMachine {
    pub(super) fn on_local(&mut self, tokens: u64, train_loss: f32, norm: f32, leaves: Vec<ShardLeaf>) {
        if self.mine.is_some() || leaves.len() != self.plan.shards() as usize {
            return;
        }
        // Signed before a restart (its shards are gone with the process):
        // this round goes without our delta rather than with a second one.
        let signed_before = self.signed.round == self.round && self.signed.manifest.is_some();
        if signed_before || self.signed.round > self.round {
            return;
        }
        let tree = MerkleTree::new(&leaves);
        let m = ShardedManifest {
            run: self.cfg.run,
            round: self.round,
            base: self.base,
            signer: self.me,
            tokens,
            train_loss,
            codec: self.cfg.codec,
            element_count: self.cfg.element_count,
            shards: self.plan.shards(),
            norm,
            root: tree.root(),
            signature: Signature([0; 64]),
        }
        .sign(&self.key);
        self.signed.manifest = Some(m.clone());
        self.signed.leaves = leaves.clone();
        self.actions.push_back(CommitteeAction::Record(self.signed.clone()));
        if self.open_round() {
            self.actions.push_back(CommitteeAction::PublishManifest(m.clone()));
        }
        self.manifests.insert(self.me, m);
        self.last_announced_at = self.now;
        self.mine = Some(OwnDelta { leaves, tree });
        for s in 0..self.plan.shards() {
            self.send_shard(s, s);
        }
    }

    /// Sending our shard `shard` to `to`: its proof and our signed
    /// manifest go with it (None before we trained).
    pub(super) fn our_shard_to(&self, to: PublicKey, shard: u32) -> Option<CommitteeAction> {
        let own = self.mine.as_ref()?;
        let manifest = Box::new(self.manifests.get(&self.me)?.clone());
        let proof = own.tree.proof(shard as usize);
        Some(CommitteeAction::SendShard { to, shard, shards: self.plan.shards(), proof, manifest })
    }

    /// Send our shard `s` to the committee of shard `to_committee`.
    pub(super) fn send_shard(&mut self, s: u32, to_committee: u32) {
        let Some(leaf) = self.mine.as_ref().and_then(|own| own.leaves.get(s as usize).copied()) else {
            return;
        };
        for to in self.members(to_committee) {
            if to == self.me {
                self.inputs.entry(s).or_default().insert(self.me, leaf);
            } else if let Some(send) = self.our_shard_to(to, s) {
                self.actions.push_back(send);
            }
        }
    }

    /// Whether this round has no roster (a run's first round, or one whose
    /// roster emptied): then there is one shard and its committee is every
    /// counted node whose manifest this node holds — version 1's round.
    pub(super) fn open_round(&self) -> bool {
        self.ledger.roster.is_empty()
    }

    /// The committee of shard `s` as this node knows it.
    pub(super) fn members(&self, s: u32) -> Vec<PublicKey> {
        if self.open_round() {
            return self.manifests.keys().filter(|k| self.counts(k)).copied().collect();
        }
        self.plan.committee(s).to_vec()
    }

    /// The backup committees that took `shard` over so far, in order.
    pub(super) fn backups(&self, shard: u32) -> impl Iterator<Item = u32> + '_ {
        let level = self.shards.get(shard as usize).map_or(0, |v| v.level);
        (1..=level).filter_map(move |j| self.plan.fallback(shard, j))
    }

    /// Nodes that hold the inputs of `shard` (its committee and the backups
    /// that took it over).
    pub(super) fn holders_of(&self, shard: u32) -> Vec<PublicKey> {
        let mut holders = self.members(shard);
        for f in self.backups(shard) {
            holders.extend_from_slice(self.plan.committee(f));
        }
        holders
    }

    /// Whether this node sends its shard `shard` to `to` this round: a
    /// member of the shard's committee (or of its fallback's, once it fell
    /// back), or in an open round an announcer.
    pub(super) fn sends_to(&self, shard: u32, to: &PublicKey) -> bool {
        if shard >= self.plan.shards() || *to == self.me {
            return false;
        }
        if self.open_round() {
            return self.manifests.contains_key(to);
        }
        self.plan.is_member(shard, to) || self.backups(shard).any(|f| self.plan.is_member(f, to))
    }

    pub(super) fn on_manifest(&mut self, m: ShardedManifest) {
        if m.run != self.cfg.run || m.round != self.round || m.base != self.base || !self.counts(&m.signer) {
            return;
        }
        if m.shards != self.plan.shards()
            || m.element_count != self.cfg.element_count
            || m.codec != self.cfg.codec
        {
            return;
        }
        // The same manifest again (it travels with every shard a trainer
        // sends) costs no second signature check.
        if self.manifests.get(&m.signer).is_some_and(|old| *old == m) {
            return;
        }
        if !self.manifest_signed(&m) {
            return;
        }
        if let Some(old) = self.manifests.get(&m.signer) {
            if old.signed_bytes() != m.signed_bytes() {
                let proof = FraudProof::TwoManifests { a: old.clone(), b: m };
                self.prove(proof);
            }
            return;
        }
        // Newcomers (keys not on the roster) are taken up to a bound per
        // round, so a flood of fresh keys cannot grow the machine.
        let on_roster = self.ledger.roster.binary_search(&m.signer).is_ok();
        if !on_roster && self.manifests.len() >= self.ledger.roster.len() + MAX_NEWCOMERS {
            return;
        }
        let signer = m.signer;
        let shards = m.shards;
        self.manifests.insert(signer, m);
        self.last_announced_at = self.now;
        // In an open round every announcer aggregates: it gets our delta too.
        if self.open_round() {
            if let Some(send) = self.our_shard_to(signer, 0) {
                self.actions.push_back(send);
            }
        }
        // Shards that arrived before the manifest are checked now.
        for (leaf, proof) in self.early.remove(&signer).unwrap_or_default() {
            self.on_shard(signer, shards, leaf, &proof);
        }
    }

    pub(super) fn on_shard(&mut self, signer: PublicKey, shards: u32, leaf: ShardLeaf, proof: &[[u8; 32]]) {
        if !self.duties.contains_key(&leaf.shard) || !self.counts(&signer) || shards != self.plan.shards() {
            return;
        }
        // Without the manifest the proof cannot be checked yet: kept (a few
        // per signer) until it comes.
        let Some(m) = self.manifests.get(&signer) else {
            if self.early.len() < 4 * self.ledger.roster.len().max(64) {
                let e = self.early.entry(signer).or_default();
                if e.len() < 4 {
                    e.push((leaf, proof.to_vec()));
                }
            }
            return;
        };
        if !verify_proof(&m.root, m.shards, &leaf, proof) {
            return;
        }
        if self.duties.get(&leaf.shard) == Some(&true) {
            return;
        }
        self.inputs.entry(leaf.shard).or_default().insert(signer, leaf);
    }

    pub(super) fn aggregate(&mut self, shard: u32) {
        let got = self.inputs.get(&shard).cloned().unwrap_or_default();
        let mut inputs = Vec::new();
        let mut leaves = Vec::new();
        for (signer, leaf) in got {
            if let Some(m) = self.manifests.get(&signer).filter(|_| self.counts(&signer)) {
                inputs.push(m.clone());
                leaves.push(leaf);
            }
        }
        self.duties.insert(shard, true);
        if inputs.is_empty() {
            return;
        }
        self.actions.push_back(CommitteeAction::AggregateShard { shard, inputs, leaves });
    }

    pub(super) fn on_aggregated(
        &mut self,
        shard: u32,
        included: IncludedList,
        total_tokens: u64,
        result_hash: [u8; 32],
    ) {
        if included.is_empty() || self.signed.round > self.round {
            return;
        }
        let r = ShardResult {
            run: self.cfg.run,
            round: self.round,
            base: self.base,
            shard,
            included_count: included.len() as u32,
            included_root: included.root(),
            total_tokens,
            result_hash,
            signer: self.me,
            signature: Signature([0; 64]),
        }
        .sign(&self.key);
        // Signing is deterministic: a result recorded before a restart is
        // published again only when this is the same one; a different one
        // is not sent (the shard's backup takes it over).
        match self.signed.result(shard) {
            Some(before) if *before != r => return,
            Some(_) => {}
            None if self.signed.results.len() >= MAX_RECORDED_RESULTS => return,
            None => {
                let aligned = self.signed.lists.len() == self.signed.results.len();
                self.signed.results.push(r.clone());
                if aligned {
                    self.signed.lists.push(included.clone());
                } else {
                    self.signed.lists.clear();
                }
                self.actions.push_back(CommitteeAction::Record(self.signed.clone()));
            }
        }
        self.our_lists.insert(shard, included);
        self.actions.push_back(CommitteeAction::PublishResult(r.clone()));
        self.on_result(r);
    }

    /// Whether `key` may sign a result for `shard` now.
    pub(super) fn may_aggregate(&self, shard: u32, key: &PublicKey) -> bool {
        (self.open_round() && self.manifests.contains_key(key))
            || self.plan.is_member(shard, key)
            || self.backups(shard).any(|f| self.plan.is_member(f, key))
    }

    /// Whether `key` sits on a backup of `shard` that this node has not
    /// handed the shard to yet.
    pub(super) fn backs_up_later(&self, shard: u32, key: &PublicKey) -> bool {
        let level = self.shards.get(shard as usize).map_or(u32::MAX, |v| v.level);
        (level.saturating_add(1)..=MAX_FALLBACKS)
            .filter_map(|j| self.plan.fallback(shard, j))
            .any(|f| self.plan.is_member(f, key))
    }
}
