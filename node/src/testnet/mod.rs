//! A local testnet of real processes (`murmur testnet`, behind
//! `scripts/testnet.sh`): a bootstrap server, N training nodes and the
//! dashboard on 127.0.0.1, one log per process, one progress line per
//! round; optionally nodes that join late, chaos (SIGKILL and restart a
//! random node every few rounds), and a stop after R rounds with a check
//! that every surviving node ended on the common StateId. With
//! `--home-links` every process runs in its own network namespace behind an
//! emulated home link (no dashboard then), nodes may be slowed, and the
//! end reports each node's usage. Ctrl-C (or SIGTERM) stops every process
//! it started.
//!
//! - `child`: one process, its logs and its stdout lines.
//! - `progress`: round reports by node, announcements, agreement.
//! - `links`: the namespaces, bandwidth caps and latency of `--home-links`.
//! - `usage`: per node: time in inner steps, tokens, bytes, round times.
//! - `tickets`: with `--tickets`, the operator and each node's key and ticket.

pub mod child;
pub mod links;
pub mod progress;
pub mod tickets;
pub mod usage;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rand::seq::SliceRandom;
use rand::SeedableRng;

use child::{Child, Line};
use links::{HomeLinks, Namespaces};
use progress::Progress;
use tickets::TicketDesk;
use usage::Usage;

/// How a testnet runs.
#[derive(Debug, Clone)]
pub struct TestnetOptions {
    pub nodes: usize,
    pub preset: String,
    pub inner_steps: u32,
    pub batch: u32,
    pub deadline: u32,
    pub chaos: bool,
    /// Rounds between chaos kills.
    pub chaos_every: u64,
    /// Fraction of the nodes each chaos kill takes down (at least one).
    pub chaos_fraction: f64,
    /// How many of the nodes start only once `join_at` rounds have closed.
    pub join_late: usize,
    pub join_at: u64,
    /// Stop after this many rounds and check agreement (none: run until Ctrl-C).
    pub rounds: Option<u64>,
    /// Logs and data directories (emptied first).
    pub dir: PathBuf,
    /// The dashboard's address.
    pub http: String,
    /// Threads each node's CPU trainer uses.
    pub threads_per_node: usize,
    pub seed: u64,
    /// The run's data: what the bootstrap server's `--data` takes
    /// (`shakespeare`, `synthetic…`) or a dataset directory it hosts.
    pub data: String,
    /// Owners per shard (docs/protocol.md §10).
    pub committee_size: u32,
    /// Overlapped rounds (the run's pacing, docs/protocol.md §6.3).
    pub overlap: bool,
    /// Seconds of inner training per round (0: exactly H steps; §6.4).
    pub inner_budget: f64,
    /// Nodes evaluate the validation loss after every N-th round (0: never).
    pub eval_every: u64,
    /// The last K nodes compute at speed V (0 < V < 1): `(K, V)`.
    pub slow: Option<(usize, f64)>,
    /// Every process in its own namespace behind an emulated home link.
    pub links: Option<HomeLinks>,
    /// The bootstrap server archives every R-th committed state under
    /// `<dir>/data/checkpoints` (emptied at start with the rest), keeping K: `(R, K)`.
    pub archive: Option<(u64, usize)>,
    /// Ticket admission: an operator signs a ticket for every node.
    pub tickets: bool,
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

fn install_signal_handlers() {
    // SAFETY: the handler only stores to an atomic (async-signal-safe).
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
}

/// `--max-peers-per-ip` for a testnet of `nodes` nodes, where they (with
/// the dashboard and a few tools beside) are more than the default lets
/// connect in from 127.0.0.1, the one address they share.
fn per_ip_args(nodes: usize) -> Vec<String> {
    let wanted = u32::try_from(nodes).unwrap_or(u32::MAX).saturating_add(8);
    if wanted <= crate::net::slots::MAX_PER_IP {
        return Vec::new();
    }
    vec!["--max-peers-per-ip".into(), wanted.to_string()]
}

/// Time since the testnet started, in milliseconds.
fn ms(t0: Instant) -> u64 {
    t0.elapsed().as_millis() as u64
}

struct Testnet {
    opts: TestnetOptions,
    bin_dir: PathBuf,
    log_dir: PathBuf,
    tx: mpsc::Sender<Line>,
    rx: mpsc::Receiver<Line>,
    bootstrap_addr: String,
    children: HashMap<String, Child>,
    /// Nodes that printed `joined` since they were last started.
    joined: Vec<String>,
    progress: Progress,
    usage: Usage,
    /// The namespaces of `--home-links` (deleted when the testnet ends).
    namespaces: Option<Namespaces>,
    /// With `--tickets`: the operator, and the run its tickets are for.
    tickets: Option<(TicketDesk, murmur_protocol::RunId)>,
    t0: Instant,
}

impl Testnet {
    /// The address `name` listens on: 127.0.0.1, or its namespace's.
    fn host(&self, name: &str) -> String {
        self.namespaces.as_ref().and_then(|n| n.addr(name)).unwrap_or("127.0.0.1").to_string()
    }

    /// Variables every process gets: the emulated link's delay.
    fn link_env(&self) -> Vec<(&'static str, String)> {
        self.opts.links.map(|l| vec![("MURMUR_NET_DELAY_MS", l.delay_ms().to_string())]).unwrap_or_default()
    }

    /// Where process `name` keeps its data (its key, store and ticket).
    fn data_dir(&self, name: &str) -> PathBuf {
        self.opts.dir.join("data").join(name)
    }

    fn node_args(&self, name: &str) -> Vec<String> {
        let data = self.data_dir(name);
        let mut args = vec![
            "node".into(),
            "--bootstrap".into(),
            self.bootstrap_addr.clone(),
            "--data-dir".into(),
            data.display().to_string(),
            "--listen".into(),
            format!("/ip4/{}/tcp/0", self.host(name)),
            "--no-mdns".into(),
            "--device".into(),
            "cpu".into(),
            "--eval-every".into(),
            self.opts.eval_every.to_string(),
            "--json".into(),
        ];
        args.extend(per_ip_args(self.opts.nodes));
        args
    }

    fn start_node(&mut self, name: &str) -> Result<()> {
        let mut args = self.node_args(name);
        if let Some((desk, run)) = &self.tickets {
            let ticket = desk.admit(name, &self.data_dir(name), *run)?;
            args.extend(["--ticket".into(), ticket.display().to_string()]);
        }
        let mut envs = self.link_env();
        envs.push(("RAYON_NUM_THREADS", self.opts.threads_per_node.to_string()));
        // The last K nodes (node-N, node-N-1, …) are the slow ones.
        if let Some((k, v)) = self.opts.slow {
            let index: usize = name.trim_start_matches("node-").parse().unwrap_or(0);
            if index + k > self.opts.nodes {
                envs.push(("MURMUR_COMPUTE_SPEED", v.to_string()));
            }
        }
        let netns = self.namespaces.as_ref().and_then(|n| n.path(name));
        let bin = self.bin_dir.join("murmur");
        let c = Child::spawn(&bin, &args, &envs, netns.as_deref(), name, &self.log_dir, self.tx.clone())?;
        println!("started {name} (pid {})", c.pid());
        self.joined.retain(|n| n != name);
        self.children.insert(name.to_string(), c);
        Ok(())
    }

    /// Wait for a line from `name` that `pick` accepts, handling others.
    fn wait_for(
        &mut self,
        name: &str,
        what: &str,
        limit: Duration,
        pick: impl Fn(&str) -> Option<String>,
    ) -> Result<String> {
        let until = Instant::now() + limit;
        while Instant::now() < until && !STOP.load(Ordering::SeqCst) {
            match self.rx.recv_timeout(Duration::from_millis(100)) {
                Ok(line) if line.name == name => {
                    if let Some(v) = pick(&line.text) {
                        return Ok(v);
                    }
                }
                Ok(line) => self.on_line(line),
                Err(_) => {}
            }
            if let Some(c) = self.children.get_mut(name) {
                if let Some(status) = c.exited() {
                    bail!(
                        "{name} exited ({status}) before {what}; see {}",
                        self.log_dir.join(format!("{name}.err")).display()
                    );
                }
            }
        }
        bail!("no {what} from {name} within {limit:?}; see {}", self.log_dir.display())
    }

    fn on_line(&mut self, line: Line) {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&line.text) else { return };
        match v["event"].as_str() {
            Some("round") if line.name.starts_with("node-") => {
                self.progress.on_round(&line.name, &v, ms(self.t0));
                self.usage.on_round(&line.name, &v);
            }
            Some("started") if line.name.starts_with("node-") => self.usage.on_started(&line.name, &v),
            Some("joined") => {
                if !self.joined.contains(&line.name) {
                    self.joined.push(line.name.clone());
                }
                println!(
                    "{} joined at round {} on {}",
                    line.name,
                    v["round"],
                    v["device"].as_str().unwrap_or("?")
                );
            }
            Some("synced") | Some("resynced") => {
                println!("{} synced to round {} from its peers", line.name, v["round"]);
            }
            _ => {}
        }
    }

    fn live_nodes(&self) -> Vec<String> {
        let mut v: Vec<String> =
            self.joined.iter().filter(|n| self.children.contains_key(*n)).cloned().collect();
        v.sort();
        v
    }

    fn stop_all(&mut self) {
        for c in self.children.values() {
            c.terminate();
        }
        let until = Instant::now() + Duration::from_secs(5);
        while Instant::now() < until && self.children.values_mut().any(|c| c.exited().is_none()) {
            std::thread::sleep(Duration::from_millis(50));
        }
        let n = self.children.len();
        for c in self.children.values_mut() {
            c.kill();
        }
        self.children.clear();
        println!("stopped {n} processes");
    }
}

/// Run a testnet until Ctrl-C, or until `rounds` rounds closed. Returns
/// whether the surviving nodes agreed (always true without `rounds`).
pub fn run_testnet(opts: TestnetOptions) -> Result<bool> {
    if opts.nodes == 0 || opts.join_late >= opts.nodes.max(1) && opts.join_late > 0 {
        bail!("--nodes must be at least 1 and more than --join-late");
    }
    install_signal_handlers();
    let data = opts.dir.join("data");
    let log_dir = opts.dir.join("logs");
    if data.exists() {
        std::fs::remove_dir_all(&data).with_context(|| format!("clearing {}", data.display()))?;
    }
    if log_dir.exists() {
        std::fs::remove_dir_all(&log_dir).with_context(|| format!("clearing {}", log_dir.display()))?;
    }
    std::fs::create_dir_all(&log_dir).with_context(|| format!("creating {}", log_dir.display()))?;
    let names: Vec<String> = (1..=opts.nodes).map(|i| format!("node-{i}")).collect();
    let namespaces = match opts.links {
        Some(l) => {
            links::available()?;
            Some(Namespaces::create(&["bootstrap".to_string()], &names, l)?)
        }
        None => None,
    };
    let (tx, rx) = mpsc::channel();
    let mut net = Testnet {
        bin_dir: child::bin_dir()?,
        log_dir,
        tx,
        rx,
        bootstrap_addr: String::new(),
        children: HashMap::new(),
        joined: Vec::new(),
        progress: Progress::default(),
        usage: Usage::default(),
        namespaces,
        tickets: None,
        t0: Instant::now(),
        opts,
    };
    let result = drive(&mut net);
    net.stop_all();
    result
}

fn drive(net: &mut Testnet) -> Result<bool> {
    let o = net.opts.clone();
    let boot_listen = format!("/ip4/{}/tcp/0", net.host("bootstrap"));
    let inner_budget = o.inner_budget.to_string();
    let mut boot_args: Vec<String> = [
        "--listen",
        &boot_listen,
        "--data-dir",
        &o.dir.join("data").join("bootstrap").display().to_string(),
        "--no-mdns",
        "--preset",
        &o.preset,
        "--inner-steps",
        &o.inner_steps.to_string(),
        "--batch",
        &o.batch.to_string(),
        "--deadline",
        &o.deadline.to_string(),
        "--seed",
        &o.seed.to_string(),
        if Path::new(&o.data).is_dir() { "--dataset" } else { "--data" },
        &o.data,
        "--committee-size",
        &o.committee_size.to_string(),
        "--inner-budget",
        &inner_budget,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if o.overlap {
        boot_args.push("--overlap".into());
    }
    let desk = if o.tickets { Some(TicketDesk::new(&o.dir.join("data"), o.seed)?) } else { None };
    if let Some(desk) = &desk {
        boot_args.extend(["--admission".into(), "tickets".into(), "--operator".into(), desk.operator_hex()]);
    }
    boot_args.extend(per_ip_args(o.nodes));
    if let Some((every, keep)) = o.archive {
        let dir = o.dir.join("data").join("checkpoints").display().to_string();
        let archive = ["--checkpoint-dir".into(), dir, "--checkpoint-every".into(), every.to_string()];
        boot_args.extend(archive);
        boot_args.extend(["--keep".into(), keep.to_string()]);
    }
    let netns = net.namespaces.as_ref().and_then(|n| n.path("bootstrap"));
    let c = Child::spawn(
        &net.bin_dir.join("murmur-bootstrap"),
        &boot_args,
        &net.link_env(),
        netns.as_deref(),
        "bootstrap",
        &net.log_dir,
        net.tx.clone(),
    )?;
    println!("started bootstrap (pid {})", c.pid());
    net.children.insert("bootstrap".into(), c);
    net.bootstrap_addr = net.wait_for("bootstrap", "a listen address", Duration::from_secs(30), |l| {
        (l.contains("/tcp/") && l.contains("/p2p/")).then(|| l.trim().to_string())
    })?;
    println!("bootstrap server at {}", net.bootstrap_addr);
    if let Some(desk) = desk {
        // The server names its run on stderr before it listens.
        let err = net.log_dir.join("bootstrap.err");
        let text = std::fs::read_to_string(&err).with_context(|| format!("reading {}", err.display()))?;
        let run =
            tickets::hosted_run(&text).with_context(|| format!("{} names no hosted run", err.display()))?;
        println!(
            "ticket admission: operator {} (key {}), a ticket per node",
            desk.operator_hex(),
            o.dir.join("data").join("operator.key").display()
        );
        net.tickets = Some((desk, run));
    }
    let names: Vec<String> = (1..=o.nodes).map(|i| format!("node-{i}")).collect();
    let (now, late) = names.split_at(o.nodes - o.join_late);
    for n in now {
        net.start_node(n)?;
    }
    if let Some(l) = o.links {
        println!(
            "home links: every process in its own network namespace; nodes capped at {} Mbit/s up, {} Mbit/s down, {} ms round trip (no dashboard)",
            l.up_mbit, l.down_mbit, l.rtt_ms
        );
    } else {
        let mut dash_args: Vec<String> =
            ["dashboard", "--bootstrap", &net.bootstrap_addr, "--http", &o.http, "--no-mdns", "--json"]
                .iter()
                .map(|s| s.to_string())
                .collect();
        if let Some((desk, run)) = &net.tickets {
            // The dashboard watches over libp2p: a ticket run admits it by ticket too.
            let dir = net.data_dir("dashboard");
            let ticket = desk.admit("dashboard", &dir, *run)?;
            let key = dir.join("node.key").display().to_string();
            dash_args.extend(["--key".into(), key, "--ticket".into(), ticket.display().to_string()]);
        }
        let bin = net.bin_dir.join("murmur");
        let c = Child::spawn(&bin, &dash_args, &[], None, "dashboard", &net.log_dir, net.tx.clone())?;
        println!("started dashboard (pid {})", c.pid());
        net.children.insert("dashboard".into(), c);
        let url = net.wait_for("dashboard", "its URL", Duration::from_secs(60), |l| {
            serde_json::from_str::<serde_json::Value>(l)
                .ok()
                .and_then(|v| v["url"].as_str().map(String::from))
        })?;
        println!("dashboard: {url}");
    }
    println!("logs: {}   (Ctrl-C stops every process)", net.log_dir.display());
    println!(
        "{} nodes{}, preset {}, data {}, H={} inner steps per round{}{}",
        o.nodes,
        if o.join_late > 0 {
            format!(" ({} join after round {})", o.join_late, o.join_at)
        } else {
            String::new()
        },
        o.preset,
        o.data,
        o.inner_steps,
        if o.chaos {
            format!(", chaos: a random node is killed every {} rounds", o.chaos_every)
        } else {
            String::new()
        },
        pacing_words(&o),
    );

    let mut late: Vec<String> = late.to_vec();
    let mut last_chaos: u64 = 0;
    let mut restarts: Vec<(Instant, String)> = Vec::new();
    // Seeded: a chaos run picks the same victims each time.
    let mut rng = rand::rngs::StdRng::seed_from_u64(o.seed ^ 0x0063_6861_6f73);
    let mut finishing: Option<(u64, Instant)> = None;
    loop {
        if STOP.load(Ordering::SeqCst) {
            println!("stopping");
            return Ok(true);
        }
        while let Ok(line) = net.rx.try_recv() {
            net.on_line(line);
        }
        // Processes that ended on their own.
        let mut ended = Vec::new();
        for (name, c) in net.children.iter_mut() {
            if let Some(status) = c.exited() {
                ended.push((name.clone(), status));
            }
        }
        for (name, status) in ended {
            net.children.remove(&name);
            if name == "bootstrap" || name == "dashboard" {
                bail!("{name} exited ({status}); see {}", net.log_dir.join(format!("{name}.err")).display());
            }
            println!("{name} exited ({status}); see {}", net.log_dir.join(format!("{name}.err")).display());
        }
        let live = net.live_nodes();
        for l in net.progress.ready(&live, ms(net.t0)) {
            println!("{}", l.human());
        }
        let round = net.progress.announced().unwrap_or(0);
        if !late.is_empty() && net.progress.announced().is_some_and(|r| r + 1 >= o.join_at) {
            for n in std::mem::take(&mut late) {
                println!("{n} joins late (round {})", round + 1);
                net.start_node(&n)?;
            }
        }
        // Chaos: kill a random live node every few rounds, restart it after a pause.
        let target_reached = o.rounds.is_some_and(|r| round >= r);
        if o.chaos
            && !target_reached
            && round >= last_chaos + o.chaos_every
            && live.len() >= 2
            && restarts.is_empty()
        {
            let count = ((o.chaos_fraction * o.nodes as f64).round() as usize).clamp(1, live.len() - 1);
            for victim in live.choose_multiple(&mut rng, count).cloned() {
                if let Some(mut c) = net.children.remove(&victim) {
                    c.kill();
                    println!(
                        "chaos: SIGKILL {victim} (pid {}) after round {round}; restarting it in 3 s",
                        c.pid()
                    );
                }
                restarts.push((Instant::now() + Duration::from_secs(3), victim));
            }
            last_chaos = round;
        }
        let due: Vec<String> =
            restarts.iter().filter(|(t, _)| Instant::now() >= *t).map(|(_, n)| n.clone()).collect();
        restarts.retain(|(t, _)| Instant::now() < *t);
        for n in due {
            println!("chaos: restarting {n}");
            net.start_node(&n)?;
        }
        if let Some(target) = o.rounds {
            if round >= target && restarts.is_empty() {
                let (_, since) = *finishing.get_or_insert((target, Instant::now()));
                let everyone: Vec<String> =
                    net.children.keys().filter(|n| n.starts_with("node-")).cloned().collect();
                // Every live node past the target, and on one round they all
                // reported (a node restarted near the end may report only
                // later rounds than the last one another node reported yet).
                let caught_up = everyone.len() == live.len()
                    && live.iter().all(|n| net.progress.last_round_of(n).is_some_and(|r| r >= target))
                    && net.progress.common_round(&live, target).is_some();
                if caught_up || since.elapsed() > Duration::from_secs(180) {
                    return Ok(verdict(net, target));
                }
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// How the run's rounds are paced, for the start-up line.
fn pacing_words(o: &TestnetOptions) -> String {
    let mut s = String::new();
    if o.overlap {
        s.push_str(", overlapped rounds");
    }
    if o.inner_budget > 0.0 {
        s.push_str(&format!(", inner phase of {} s (at most H steps)", o.inner_budget));
    }
    if let Some((k, v)) = o.slow {
        s.push_str(&format!(", the last {k} node(s) at {v}× speed"));
    }
    s
}

/// Check that every surviving node reached the same StateId, and print
/// what each node did.
fn verdict(net: &Testnet, target: u64) -> bool {
    for s in net.usage.summaries() {
        println!("{}", s.human());
    }
    let live = net.live_nodes();
    match net.progress.common_round(&live, target) {
        Some((round, states)) => {
            let first = states.first().map(|(_, s)| s.clone()).unwrap_or_default();
            let agree = states.iter().all(|(_, s)| *s == first);
            if agree {
                let val = net.progress.line(target).and_then(|l| l.val_loss);
                // The loss moves a few percent from round to round; the mean
                // of the last five rounds is the steadier figure.
                let last: Vec<f64> = (target.saturating_sub(4)..=target)
                    .filter_map(|r| net.progress.line(r).and_then(|l| l.val_loss))
                    .collect();
                let mean = (!last.is_empty()).then(|| last.iter().sum::<f64>() / last.len() as f64);
                let show = |v: Option<f64>| v.map_or_else(|| "-".into(), |v| format!("{v:.4}"));
                println!(
                    "done: all {} surviving nodes are on state {} after round {round}; val loss at round {target}: {} (mean of rounds {}..={target}: {})",
                    states.len(),
                    &first[..first.len().min(16)],
                    show(val),
                    target.saturating_sub(4),
                    show(mean),
                );
            } else {
                println!("FAILED: the surviving nodes disagree after round {round}:");
                for (n, s) in &states {
                    println!("  {n}: {s}");
                }
            }
            agree
        }
        None => {
            println!(
                "FAILED: the surviving nodes ({}) never all reported a round from {target} on",
                live.join(", ")
            );
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::per_ip_args;

    #[test]
    fn past_eight_nodes_the_testnet_raises_the_per_address_limit() {
        assert!(per_ip_args(4).is_empty() && per_ip_args(8).is_empty(), "the default of 16 has room");
        assert_eq!(per_ip_args(9), ["--max-peers-per-ip", "17"]);
        assert_eq!(per_ip_args(64), ["--max-peers-per-ip", "72"]);
    }
}
