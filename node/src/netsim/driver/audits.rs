//! Audits in `murmur netsim`: what a node does to check another's shard
//! result, and the bytes it moves. A sketch asks every included trainer
//! for its projections (a trainer that does not serve is replaced by its
//! input, fetched from a holder); a re-check fetches every included input
//! and recomputes the shard. Honest trainers' projections are linear in
//! their inputs, so the simulation sums them as one projection of Σ cᵢ·xᵢ,
//! computed once per result and kept for every auditor of it.

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::Result;
use murmur_protocol::codec::decode_delta;
use murmur_protocol::committee::rule::{self, InputClaim, ListCheck};
use murmur_protocol::committee::sketch::{self, SketchSigns, SketchTerm};
use murmur_protocol::committee::{
    aggregate_codec, CommitteeEvent, IncludedList, IncludedSigners, ShardResult, ShardedManifest, SketchAudit,
};
use murmur_protocol::identity::PublicKey;

use super::{Msg, Sim};
use crate::netsim::transport::Kind;
use crate::netsim::wire;

impl Sim {
    /// Node `i` audits results by sketches: each trainer is asked once for
    /// all the shards the audits name of it.
    pub(super) fn sketch(&mut self, i: usize, now: u64, round: u64, audits: Vec<SketchAudit>) -> Result<()> {
        let mut asked: BTreeMap<usize, usize> = BTreeMap::new();
        let mut done = now + 1;
        let mut answered = vec![true; audits.len()];
        for (k, a) in audits.iter().enumerate() {
            let holders: Vec<usize> = a
                .holders
                .iter()
                .filter_map(|h| self.index.get(h).copied())
                .filter(|&j| self.serves(j) && j != i)
                .collect();
            for (n, (signer, _)) in a.included.entries.iter().enumerate() {
                let Some(&j) = self.index.get(signer) else {
                    answered[k] = false;
                    continue;
                };
                if j == i {
                    continue;
                }
                if self.serves(j) {
                    *asked.entry(j).or_default() += 1;
                } else if let (false, Some((_, leaf)), Some(m)) =
                    (holders.is_empty(), self.payloads.get(&(round, j, a.result.shard)), a.inputs.get(n))
                {
                    // The input itself, from a holder of the shard.
                    let from = holders[n % holders.len()];
                    let bytes = wire::input(*leaf, self.machines[i].plan().shards(), m);
                    done = done.max(self.net.send(now, round, Kind::Checks, from, i, bytes, Msg::Bytes));
                } else {
                    answered[k] = false;
                }
            }
        }
        for (j, n) in asked {
            let bytes = wire::projections(n);
            done = done.max(self.net.send(now, round, Kind::Checks, j, i, bytes, Msg::Bytes));
        }
        for (a, answered) in audits.into_iter().zip(answered) {
            let matches = if answered {
                self.sketch_verdict(round, &a.result, &a.included, &a.inputs, &a.seed)
            } else {
                None
            };
            let e = CommitteeEvent::Sketched { result: a.result, included: a.included, matches };
            self.net.at(done + 1, i, Msg::Event(Box::new(e)));
        }
        Ok(())
    }

    /// `sketch::verdict` with the trainers' answers summed as one term.
    fn sketch_verdict(
        &mut self,
        round: u64,
        result: &ShardResult,
        included: &IncludedList,
        inputs: &[ShardedManifest],
        seed: &[u8; 32],
    ) -> Option<bool> {
        let claims: Vec<InputClaim> = inputs.iter().map(InputClaim::of).collect();
        let coefficients = match rule::check_list(&claims, self.cfg.rule())? {
            ListCheck::Coefficients(c) => c,
            ListCheck::NotKeptWhole => return Some(false),
        };
        let aggregate = self.values.get(&result.result_hash)?.clone();
        let key = (round, result.shard, included.root());
        let honest = match self.honest_sums.get(&key) {
            Some(y) => y.clone(),
            None => {
                let n = aggregate.len();
                let mut acc = vec![0f64; n];
                for ((signer, _), c) in included.entries.iter().zip(&coefficients) {
                    let j = *self.index.get(signer)?;
                    let payload = &self.payloads.get(&(round, j, result.shard))?.0;
                    let x = decode_delta(payload, self.cfg.codec, n).ok()?;
                    for (a, v) in acc.iter_mut().zip(x) {
                        *a += c * f64::from(v);
                    }
                }
                let y: Arc<Vec<f32>> = Arc::new(acc.into_iter().map(|a| a as f32).collect());
                self.honest_sums.insert(key, y.clone());
                y
            }
        };
        let signs = SketchSigns::new(seed, aggregate.len());
        let mass = coefficients.iter().zip(&claims).fold(0f64, |a, (c, m)| a + c * f64::from(m.whole_norm));
        let term = SketchTerm {
            coefficient: 1.0,
            projections: sketch::project(&honest, &signs)?,
            whole_norm: mass as f32,
        };
        sketch::sketch_matches(&aggregate, aggregate_codec(self.cfg.codec), &signs, &[term])
    }

    pub(super) fn request_included(&mut self, i: usize, now: u64, round: u64, result: ShardResult) {
        let Some(&j) = self.index.get(&result.signer) else { return };
        if !self.serves(j) {
            return;
        }
        let Some(list) = self.machines[j].our_list(result.shard).cloned() else { return };
        // As the node asks: the included signers, rebuilt with the roots
        // node i holds, else the list itself as well.
        let signers = IncludedSigners::of(&list, &self.machines[j].ledger().roster);
        let rebuilt = signers
            .list(&self.machines[i].ledger().roster, |k| self.machines[i].manifest_of(k).map(|m| m.root))
            .filter(|l| l.root() == result.included_root);
        let mut bytes = wire::included(signers.encode().len());
        if rebuilt.is_none() {
            bytes += wire::included(list.encode().len());
        }
        self.net.send(
            now,
            round,
            Kind::Checks,
            j,
            i,
            bytes,
            Msg::Event(Box::new(CommitteeEvent::IncludedReceived { result, included: list })),
        );
    }

    pub(super) fn recheck(
        &mut self,
        i: usize,
        now: u64,
        round: u64,
        result: ShardResult,
        included: IncludedList,
        holders: &[PublicKey],
    ) -> Result<()> {
        let mut inputs = Vec::new();
        let mut leaves = Vec::new();
        let mut done = now + 1;
        let holders: Vec<usize> = holders
            .iter()
            .filter_map(|h| self.index.get(h).copied())
            .filter(|&j| self.serves(j) && j != i)
            .collect();
        let plan_has_me = self.machines[i].plan().is_member(result.shard, &self.keys[i].public());
        for (n, (signer, root)) in included.entries.iter().enumerate() {
            // An input that cannot be had leaves the re-check without a
            // verdict, as the node's does: a recomputation over fewer
            // inputs would accuse an honest owner.
            let Some(&j) = self.index.get(signer) else { return Ok(()) };
            let Some(leaf) = self.payloads.get(&(round, j, result.shard)).map(|p| p.1) else {
                return Ok(());
            };
            // The manifest the shard's owner holds (what a holder serves
            // with the leaf), else the one its signer signed with that root.
            let owner = self.index.get(&result.signer).copied();
            let held = owner.and_then(|o| self.machines[o].manifest_of(signer)).filter(|m| m.root == *root);
            let Some(m) = held.cloned().or_else(|| {
                self.signed.get(&(round, j)).and_then(|v| v.iter().find(|m| m.root == *root)).cloned()
            }) else {
                return Ok(());
            };
            // As the node does: each input not held from its signer, else
            // from a holder of the shard.
            let from = if plan_has_me || j == i {
                None
            } else if self.serves(j) {
                Some(j)
            } else {
                (!holders.is_empty()).then(|| holders[n % holders.len()])
            };
            if let Some(from) = from {
                done = done.max(self.net.send(
                    now,
                    round,
                    Kind::Checks,
                    from,
                    i,
                    wire::input(leaf, self.machines[i].plan().shards(), &m),
                    Msg::Bytes,
                ));
            }
            leaves.push(leaf);
            inputs.push(m);
        }
        let (_, _, hash) = self.aggregate(i, round, result.shard, &inputs, &leaves)?;
        let matches = hash == result.result_hash;
        // The manifests came with the inputs: the machine compares them
        // with those it holds (an equivocator's second one is a proof).
        let mut events: Vec<CommitteeEvent> =
            inputs.into_iter().map(CommitteeEvent::ManifestReceived).collect();
        events.push(CommitteeEvent::Rechecked { result, included, matches });
        self.net.at(done + 1, i, Msg::Events(events));
        Ok(())
    }
}
