//! The DiLoCo round loop: every honest worker trains H inner AdamW steps from
//! θ_r on its own shard, sends Δ_i = θ_r − θ_i through the run's codec with its
//! error-feedback residual; adversaries send poisoned payloads; the deltas are
//! decoded, aggregated by the protocol's robust `aggregate_weighted`, and the
//! protocol's outer optimizer produces θ_{r+1}.
//!
//! Overlapped rounds (docs/protocol.md §6.3) change only what each worker
//! trains on while round r is exchanged: it starts round r + 1 from θ_r
//! carried by the outer momentum alone (or the eager state), and when
//! θ_{r+1} lands (after `exchange_steps` steps) it moves (a share of) the progress made
//! so far onto θ_{r+1} and trains the rest of round r + 1 there; its delta
//! is θ_{r+1} − θ_i as in blocking rounds, and θ_{r+1} itself is computed as
//! in blocking rounds. Time-budgeted rounds (§6.4) give each worker its own
//! step count and normalise the deltas by it.

use std::time::Instant;

use murmur_protocol::hash::{domain_hash, payload_hash_of, PayloadHash};
use murmur_protocol::{
    aggregate_weighted, decode_delta, eager_state, initial_momentum, land, lookahead_params, outer_step,
    CodecError, DeltaInput, ErrorFeedback, NodeKey, PublicKey, RunId, TrainingState, Weighting,
};

use super::adversary::poisoned_payload;
use super::params::{flatten, pseudo_gradient, split};
use super::{
    accumulate_batch, robust_name, AheadFrom, Evaluator, InnerMoments, SimConfig, SimError, SimEvent,
    SimReport,
};
use crate::compute::Backend;
use crate::data::{BatchLoader, Corpus};
use crate::model::rng::Rng;
use crate::model::{init_params, Gpt};

/// AdamW first and second moments, per tensor in canonical order.
type Moments = (Vec<Vec<f32>>, Vec<Vec<f32>>);

/// What one simulated worker keeps between rounds.
struct Worker {
    key: PublicKey,
    /// `None` for adversaries (they do not train).
    loader: Option<BatchLoader>,
    feedback: ErrorFeedback,
    /// AdamW (m, v) when moments are kept across rounds.
    moments: Option<Moments>,
    /// AdamW bias-correction step of the last inner step.
    adam_step: u32,
    bytes_sent: u64,
    /// Overlapped rounds: where this worker starts its next round while the
    /// last one is exchanged (`AheadFrom`).
    start: Option<Vec<f32>>,
}

/// Overlapped rounds: after `at` steps the canonical state θ_{r+1}
/// (`landed`) lands and the worker's progress since `start` moves onto it
/// (`land`).
struct Rebase {
    at: usize,
    landed: Vec<f32>,
    start: Vec<f32>,
}

/// A worker's signing identity, derived from the run seed and its index.
fn worker_key(seed: u64, index: usize) -> PublicKey {
    let mut material = seed.to_le_bytes().to_vec();
    material.extend_from_slice(&(index as u64).to_le_bytes());
    NodeKey::from_seed(domain_hash("murmur/sim/worker-key", &material)).public()
}

/// One honest worker's round: `steps` inner steps from `theta`. Its step j
/// takes the schedule's learning rate at `first_step + ⌊j·stride⌋` (a slow
/// worker's fewer steps span the same stretch of the schedule); a `rebase`
/// shifts the parameters before step `at` (after the last step when `at` is
/// past it). Returns θ_i and the last step's loss.
#[allow(clippy::too_many_arguments)]
fn train_round<B: Backend>(
    backend: &B,
    config: &SimConfig,
    model: &mut Gpt<B>,
    worker: &mut Worker,
    loader: &mut BatchLoader,
    theta: &[Vec<f32>],
    first_step: usize,
    steps: usize,
    stride: f64,
    schedule: &crate::train::schedule::LrSchedule,
    rebase: Option<&Rebase>,
) -> Result<(Vec<f32>, f32), SimError> {
    model.upload_params(backend, theta);
    match (&worker.moments, config.inner_moments) {
        (Some((m, v)), InnerMoments::Keep) => model.upload_moments(backend, m, v),
        _ => {
            model.reset_moments(backend);
            worker.adam_step = 0;
        }
    }
    let shift = |model: &mut Gpt<B>, rebase: &Rebase| {
        let mut p = flatten(&model.download_params(backend));
        land(&mut p, &rebase.landed, &rebase.start, config.pacing.landing_keep);
        model.upload_params(backend, &split(&p, model.specs()));
    };
    let mut loss = f32::NAN;
    for s in 0..steps {
        if let Some(r) = rebase.filter(|r| r.at == s) {
            shift(model, r);
        }
        model.zero_grad(backend);
        accumulate_batch(backend, model, loader, 1)?;
        worker.adam_step = worker.adam_step.saturating_add(1);
        let at = first_step + (s as f64 * stride).floor() as usize;
        let hp = config.adamw(schedule.lr(at), worker.adam_step);
        model.optimizer_step(backend, hp, config.optimizer.grad_clip);
        loss = model.read_stats(backend).mean_loss();
        if !loss.is_finite() {
            break;
        }
    }
    if let Some(r) = rebase.filter(|r| r.at >= steps) {
        shift(model, r);
    }
    if config.inner_moments == InnerMoments::Keep {
        worker.moments = Some(model.download_moments(backend));
    }
    Ok((flatten(&model.download_params(backend)), loss))
}

pub(super) fn run<B: Backend>(
    backend: &B,
    config: &SimConfig,
    corpus: &Corpus,
    mut sink: impl FnMut(&SimEvent),
) -> Result<SimReport, SimError> {
    let started = Instant::now();
    let plan = config.plan()?;
    let schedule = config.schedule(plan);
    let initial = init_params(&config.model, config.seed);
    let mut model = Gpt::new(backend, config.model.clone(), &initial, 1);
    let mut evaluator = Evaluator::new(backend, config, corpus, &initial)?;
    let specs = model.specs().to_vec();
    let n = config.model.param_count();
    let honest = config.workers - config.adversaries;
    let mut workers = (0..config.workers)
        .map(|i| {
            let loader = if i < honest {
                Some(corpus.train_loader(
                    config.batch,
                    config.seq,
                    config.seed,
                    i as u64,
                    config.workers as u64,
                )?)
            } else {
                None
            };
            Ok(Worker {
                key: worker_key(config.seed, i),
                loader,
                feedback: ErrorFeedback::new(n),
                moments: None,
                adam_step: 0,
                bytes_sent: 0,
                start: None,
            })
        })
        .collect::<Result<Vec<_>, SimError>>()?;
    let run = RunId(domain_hash("murmur/sim/run", format!("{config:?}").as_bytes()));
    let mut state = TrainingState {
        run,
        round: 0,
        params: flatten(&initial),
        momentum: initial_momentum(config.outer, n),
    };
    let tokens_per_worker_step = (config.batch * config.seq) as u64;
    sink(&SimEvent::Start {
        mode: config.mode,
        workers: config.workers,
        adversaries: config.adversaries,
        params: n,
        steps_per_worker: plan.steps_per_worker,
        rounds: plan.rounds,
        inner_steps: config.inner_steps,
        tokens: config.trained_tokens(plan),
        codec: config.codec.name(),
    });
    let mut attack_rng = Rng::new(config.seed ^ 0xA77A_C4ED);
    let (mut rejected_total, mut val_loss, mut diverged, mut steps_done) = (0usize, None, false, 0usize);
    let (budgeted, overlapped) = (config.pacing.budgeted, config.pacing.overlapped);
    let weighting = if budgeted { Weighting::PerToken } else { Weighting::AsTrained };
    let round_steps = config.round_steps();
    let mut tokens_done = 0u64;
    for round in 0..plan.rounds {
        // Full-speed steps this round (the last fixed-H round may be short).
        let steps = config.inner_steps.min(plan.steps_per_worker - steps_done);
        let steps_of = |i: usize| if budgeted { round_steps[i] } else { steps };
        let theta = split(&state.params, &specs);
        let mut payloads: Vec<(PublicKey, Vec<u8>)> = Vec::with_capacity(config.workers);
        // The tokens each payload claims, in payload order.
        let mut claims: Vec<u64> = Vec::with_capacity(config.workers);
        // Overlapped rounds: each honest worker's own decoded delta.
        let mut own: Vec<(usize, Vec<f32>)> = Vec::new();
        let mut train_loss = 0f64;
        for (i, worker) in workers.iter_mut().enumerate().take(honest) {
            let Some(mut loader) = worker.loader.take() else { continue };
            // Overlapped rounds after the first: start from θ_{r-1}'s
            // lookahead (or the eager state), moved onto θ_r once the exchange
            // lands (after the exchange's share of this worker's steps).
            let rebase = worker.start.take().map(|from| {
                let mut at = config
                    .pacing
                    .exchange_steps
                    .map_or(usize::MAX, |k| (k as f64 * steps_of(i) as f64 / steps as f64).ceil() as usize);
                if config.pacing.ahead_from == AheadFrom::Lookahead {
                    // The node's rule: wait half-way for the state to land.
                    at = at.min((steps_of(i) / 2).max(1));
                }
                let from_split = split(&from, &specs);
                (from_split, Rebase { at: at.min(steps_of(i)), landed: state.params.clone(), start: from })
            });
            let trained = train_round(
                backend,
                config,
                &mut model,
                worker,
                &mut loader,
                rebase.as_ref().map_or(&theta[..], |(from, _)| &from[..]),
                steps_done + 1,
                steps_of(i),
                steps as f64 / steps_of(i) as f64,
                &schedule,
                rebase.as_ref().map(|(_, r)| r),
            );
            worker.loader = Some(loader);
            let (local, loss) = trained?;
            train_loss += f64::from(loss) / honest as f64;
            let delta = pseudo_gradient(&state.params, &local);
            match worker.feedback.encode(config.codec, &delta) {
                Ok(p) => {
                    if overlapped {
                        // The eager start needs the delta as sent; the
                        // lookahead is the same for every worker.
                        let sent = match config.pacing.ahead_from {
                            AheadFrom::Lookahead => Vec::new(),
                            AheadFrom::Eager => decode_delta(&p, config.codec, n)
                                .map_err(|e| SimError::Encode { worker: i, source: e })?,
                        };
                        own.push((i, sent));
                    }
                    claims.push(tokens_per_worker_step * steps_of(i) as u64);
                    payloads.push((worker.key, p));
                }
                // A non-finite or out-of-range local model: training blew up.
                Err(CodecError::NonFinite { .. } | CodecError::OutOfRange { .. }) => diverged = true,
                Err(e) => return Err(SimError::Encode { worker: i, source: e }),
            }
        }
        steps_done += steps;
        tokens_done += (0..config.workers).map(|i| steps_of(i) as u64).sum::<u64>() * tokens_per_worker_step;
        if diverged {
            break;
        }
        let decoded: Vec<Option<Vec<f32>>> =
            payloads.iter().map(|(_, p)| decode_delta(p, config.codec, n).ok()).collect();
        if config.adversaries > 0 {
            let honest_deltas: Vec<Vec<f32>> = decoded.into_iter().flatten().collect();
            for (j, worker) in workers[honest..].iter().enumerate() {
                let zeros = vec![0f32; n];
                let target = honest_deltas.get(j % honest_deltas.len().max(1)).unwrap_or(&zeros);
                let p = poisoned_payload(config.attack, config.codec, target, &mut attack_rng)
                    .map_err(|e| SimError::Encode { worker: honest + j, source: e })?;
                claims.push(tokens_per_worker_step * steps as u64);
                payloads.push((worker.key, p));
            }
        }
        for (worker, (_, p)) in workers.iter_mut().zip(&payloads) {
            worker.bytes_sent += p.len() as u64;
        }
        // Honest nodes decode every payload; what fails is rejected.
        let decoded: Vec<(PayloadHash, PublicKey, Option<Vec<f32>>)> = payloads
            .iter()
            .map(|(key, p)| (payload_hash_of(p), *key, decode_delta(p, config.codec, n).ok()))
            .collect();
        let inputs: Vec<DeltaInput<'_>> = decoded
            .iter()
            .zip(&claims)
            .filter_map(|((hash, key, values), &tokens)| {
                values.as_deref().map(|values| DeltaInput {
                    payload_hash: *hash,
                    signer: *key,
                    tokens,
                    values,
                })
            })
            .collect();
        let undecodable = decoded.len() - inputs.len();
        let agg = aggregate_weighted(&inputs, n, config.robust, weighting)?;
        let rejected = undecodable + agg.rejected.len();
        rejected_total += rejected;
        // Where each worker trains the next round from until θ_{r+1} lands:
        // θ_r carried by the outer momentum alone, or θ_r stepped with the
        // worker's own delta in place of the aggregate (the eager start).
        match config.pacing.ahead_from {
            AheadFrom::Lookahead if !own.is_empty() => {
                let lookahead = lookahead_params(config.outer, &state)?;
                for (i, _) in own {
                    workers[i].start = Some(lookahead.clone());
                }
            }
            AheadFrom::Lookahead => {}
            AheadFrom::Eager => {
                for (i, delta) in own {
                    workers[i].start = Some(eager_state(config.outer, &state, &delta)?.params);
                }
            }
        }
        outer_step(config.outer, &mut state, &agg.delta)?;
        let loss = evaluator.loss(backend, &state.params)?;
        val_loss = Some(loss);
        sink(&SimEvent::Round {
            round: round + 1,
            tokens: tokens_done,
            val_loss: loss,
            train_loss: train_loss as f32,
            bytes_per_worker: workers[0].bytes_sent,
            rejected,
            seconds: started.elapsed().as_secs_f64(),
        });
        if !loss.is_finite() {
            diverged = true;
            break;
        }
    }
    Ok(SimReport {
        mode: config.mode,
        codec: config.codec.name(),
        inner_steps: config.inner_steps,
        rounds: plan.rounds,
        workers: config.workers,
        adversaries: config.adversaries,
        attack: (config.adversaries > 0).then_some(config.attack),
        robust: robust_name(config.robust),
        tokens: config.trained_tokens(plan),
        params: n,
        val_loss: if diverged { None } else { val_loss },
        diverged,
        bytes_per_worker: workers[0].bytes_sent,
        rejected: rejected_total,
        pacing: config.pacing,
        seconds: started.elapsed().as_secs_f64(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_keys_are_distinct_and_stable() {
        assert_eq!(worker_key(1, 0), worker_key(1, 0));
        assert_ne!(worker_key(1, 0), worker_key(1, 1));
        assert_ne!(worker_key(1, 0), worker_key(2, 0));
    }
}
