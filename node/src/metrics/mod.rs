//! Prometheus metrics of a node and of the bootstrap server.
//!
//! `NodeMetrics` is the cheap, cloneable handle the runtime calls as things
//! happen (`round_opened`, `round_closed`, `trained`). What other parts
//! already count — the network's byte counters, peers, refusals by reason,
//! the store's size on disk — is read when a scraper asks (`Exporter`), so
//! the network and the store need no hooks. `http` serves the text.
//!
//! Metric names, types and meaning are listed in docs/operations.md.

pub mod http;
mod net;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use prometheus::{Counter, Encoder, Gauge, Histogram, HistogramOpts, IntCounter};
use thiserror::Error;

use crate::net::NetHandle;
pub use net::NetMetrics;
/// Re-exported so the bootstrap server adds metrics without naming the crate.
pub use prometheus::{IntGauge, Registry};

/// The content type of the text the exporter renders.
pub const CONTENT_TYPE: &str = prometheus::TEXT_FORMAT;

/// Upper bounds (seconds) of the round-time histogram's buckets.
const ROUND_SECONDS_BUCKETS: [f64; 12] =
    [1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0];

/// A metric could not be registered (a name used twice: a programming error).
#[derive(Debug, Error)]
#[error("registering metrics: {0}")]
pub struct MetricsError(#[from] prometheus::Error);

/// Register `metric` in `registry` and hand it back.
fn register<M: prometheus::core::Collector + Clone + 'static>(
    registry: &Registry,
    metric: Result<M, prometheus::Error>,
) -> Result<M, MetricsError> {
    let metric = metric?;
    registry.register(Box::new(metric.clone()))?;
    Ok(metric)
}

/// Raise the counter `c` to `value` (a total another part keeps).
fn raise_to(c: &IntCounter, value: u64) {
    let now = c.get();
    if value > now {
        c.inc_by(value - now);
    }
}

/// The node runtime's metrics: rounds, training, tokens. The default handle
/// is switched off (its calls do nothing), for a node run without
/// `--metrics`.
#[derive(Clone, Default)]
pub struct NodeMetrics {
    inner: Option<Arc<NodeInner>>,
}

struct NodeInner {
    registry: Registry,
    rounds_closed: IntCounter,
    round: IntGauge,
    round_seconds: Histogram,
    tokens_trained: IntCounter,
    tokens_per_second: Gauge,
    training_seconds: Counter,
    training_fraction: Gauge,
    trainer_restarts: IntCounter,
    clock: Mutex<Clock>,
}

/// When the current round opened and when training first started.
#[derive(Default)]
struct Clock {
    round_opened: Option<(u64, Instant)>,
    first_training: Option<Instant>,
}

impl NodeMetrics {
    /// A handle with its own registry (served once given to an `Exporter`).
    pub fn new() -> Result<Self, MetricsError> {
        let r = Registry::new();
        let inner = NodeInner {
            rounds_closed: register(
                &r,
                IntCounter::new(
                    "murmur_rounds_closed_total",
                    "Rounds this node closed (aggregated and committed).",
                ),
            )?,
            round: register(&r, IntGauge::new("murmur_round", "The round this node is in."))?,
            round_seconds: register(
                &r,
                Histogram::with_opts(
                    HistogramOpts::new(
                        "murmur_round_duration_seconds",
                        "Time from a round's opening to this node's commit of it.",
                    )
                    .buckets(ROUND_SECONDS_BUCKETS.to_vec()),
                ),
            )?,
            tokens_trained: register(
                &r,
                IntCounter::new("murmur_tokens_trained_total", "Tokens trained on in inner steps."),
            )?,
            tokens_per_second: register(
                &r,
                Gauge::new("murmur_tokens_per_second", "Training throughput of the last inner-step run."),
            )?,
            training_seconds: register(
                &r,
                Counter::new("murmur_training_seconds_total", "Seconds spent running inner steps."),
            )?,
            training_fraction: register(
                &r,
                Gauge::new(
                    "murmur_training_time_ratio",
                    "Fraction of the time since training first started spent running inner steps (0 to 1).",
                ),
            )?,
            trainer_restarts: register(
                &r,
                IntCounter::new(
                    "murmur_trainer_restarts_total",
                    "Times the trainer died (a panic in a backend) and was started again.",
                ),
            )?,
            clock: Mutex::new(Clock::default()),
            registry: r,
        };
        Ok(Self { inner: Some(Arc::new(inner)) })
    }

    /// The registry these metrics live in (an `Exporter` adds its own);
    /// `None` for the switched-off handle.
    pub fn registry(&self) -> Option<&Registry> {
        self.inner.as_ref().map(|i| &i.registry)
    }

    /// Round `round` opened (training on it starts).
    pub fn round_opened(&self, round: u64) {
        let Some(m) = &self.inner else { return };
        m.round.set(i64::try_from(round).unwrap_or(i64::MAX));
        m.clock().round_opened = Some((round, Instant::now()));
    }

    /// This node closed round `round` (published its commit).
    pub fn round_closed(&self, round: u64) {
        let Some(m) = &self.inner else { return };
        m.rounds_closed.inc();
        if let Some((r, at)) = m.clock().round_opened {
            if r == round {
                m.round_seconds.observe(at.elapsed().as_secs_f64());
            }
        }
    }

    /// The trainer died and is being started again.
    pub fn trainer_restarted(&self) {
        let Some(m) = &self.inner else { return };
        m.trainer_restarts.inc();
    }

    /// The trainer ran inner steps over `tokens` tokens in `secs` seconds.
    pub fn trained(&self, tokens: u64, secs: f64) {
        let Some(m) = &self.inner else { return };
        let secs = if secs.is_finite() { secs.max(0.0) } else { 0.0 };
        m.tokens_trained.inc_by(tokens);
        m.training_seconds.inc_by(secs);
        if secs > 0.0 {
            m.tokens_per_second.set(tokens as f64 / secs);
        }
        let first = *m.clock().first_training.get_or_insert_with(|| {
            Instant::now().checked_sub(std::time::Duration::from_secs_f64(secs)).unwrap_or_else(Instant::now)
        });
        let wall = first.elapsed().as_secs_f64();
        if wall > 0.0 {
            m.training_fraction.set((m.training_seconds.get() / wall).clamp(0.0, 1.0));
        }
    }
}

impl NodeInner {
    fn clock(&self) -> std::sync::MutexGuard<'_, Clock> {
        self.clock.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Renders a registry, first refreshing what is read at scrape time: the
/// network's counters and peers, the store's size, the uptime.
pub struct Exporter {
    registry: Registry,
    net: NetMetrics,
    store_dir: PathBuf,
    store_bytes: IntGauge,
    uptime: Gauge,
    started: Instant,
    /// One refresh at a time, so totals are raised once.
    refreshing: tokio::sync::Mutex<()>,
}

impl Exporter {
    /// An exporter of `registry` plus the network's and the store's metrics.
    pub fn new(registry: Registry, net: NetHandle, store_dir: &Path) -> Result<Self, MetricsError> {
        let store_bytes = register(
            &registry,
            IntGauge::new(
                "murmur_store_bytes",
                "Bytes the data directory (blobs and metadata) takes on disk.",
            ),
        )?;
        let uptime =
            register(&registry, Gauge::new("murmur_uptime_seconds", "Seconds since the process started."))?;
        Ok(Self {
            net: NetMetrics::new(&registry, net)?,
            registry,
            store_dir: store_dir.to_path_buf(),
            store_bytes,
            uptime,
            started: Instant::now(),
            refreshing: tokio::sync::Mutex::new(()),
        })
    }

    /// The registry (to add more metrics, as the bootstrap server does).
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Refresh and render everything in the Prometheus text format.
    pub async fn render(&self) -> String {
        {
            let _one = self.refreshing.lock().await;
            self.net.refresh().await;
            let dir = self.store_dir.clone();
            if let Ok(bytes) = tokio::task::spawn_blocking(move || disk_usage(&dir)).await {
                self.store_bytes.set(i64::try_from(bytes).unwrap_or(i64::MAX));
            }
            self.uptime.set(self.started.elapsed().as_secs_f64());
        }
        let mut out = Vec::new();
        if let Err(e) = prometheus::TextEncoder::new().encode(&self.registry.gather(), &mut out) {
            tracing::warn!("encoding metrics: {e}");
        }
        String::from_utf8(out).unwrap_or_default()
    }
}

/// Bytes the regular files under `dir` take (symbolic links are not
/// followed; unreadable entries count as 0).
fn disk_usage(dir: &Path) -> u64 {
    let mut total = 0u64;
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for e in entries.flatten() {
            match e.file_type() {
                Ok(t) if t.is_dir() => todo.push(e.path()),
                Ok(t) if t.is_file() => total += e.metadata().map(|m| m.len()).unwrap_or(0),
                _ => {}
            }
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(r: &Registry) -> String {
        prometheus::TextEncoder::new().encode_to_string(&r.gather()).expect("encode")
    }

    #[test]
    fn the_runtime_calls_move_the_metrics() {
        let m = NodeMetrics::new().expect("metrics");
        m.round_opened(4);
        m.trained(1000, 0.5);
        m.round_closed(4);
        m.round_opened(5);
        m.round_closed(6); // not the round that opened: counted, not timed
        let t = text(m.registry().expect("on"));
        assert!(t.contains("murmur_rounds_closed_total 2\n"), "{t}");
        assert!(t.contains("murmur_round 5\n"), "{t}");
        assert!(t.contains("murmur_round_duration_seconds_count 1\n"), "{t}");
        assert!(t.contains("murmur_tokens_trained_total 1000\n"), "{t}");
        assert!(t.contains("murmur_tokens_per_second 2000\n"), "{t}");
        assert!(t.contains("murmur_training_seconds_total 0.5\n"), "{t}");
        let ratio: f64 = t
            .lines()
            .find_map(|l| l.strip_prefix("murmur_training_time_ratio "))
            .and_then(|v| v.parse().ok())
            .expect("ratio line");
        assert!(ratio > 0.0 && ratio <= 1.0, "{ratio}");
        // Bad timings from a caller never poison the counters.
        m.trained(10, f64::NAN);
        assert!(text(m.registry().expect("on")).contains("murmur_training_seconds_total 0.5\n"));
        // The switched-off handle takes the same calls and keeps nothing.
        let off = NodeMetrics::default();
        off.round_opened(1);
        off.trained(5, 1.0);
        off.round_closed(1);
        assert!(off.registry().is_none());
    }

    #[test]
    fn totals_kept_elsewhere_are_raised_never_lowered() {
        let c = IntCounter::new("c_total", "c").expect("counter");
        raise_to(&c, 5);
        raise_to(&c, 3);
        assert_eq!(c.get(), 5);
        raise_to(&c, 9);
        assert_eq!(c.get(), 9);
    }

    #[test]
    fn disk_usage_sums_files_below_a_directory() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join("a/b")).expect("mkdir");
        std::fs::write(dir.path().join("x"), [0u8; 100]).expect("write");
        std::fs::write(dir.path().join("a/b/y"), [0u8; 23]).expect("write");
        assert_eq!(disk_usage(dir.path()), 123);
        assert_eq!(disk_usage(&dir.path().join("missing")), 0);
    }
}
