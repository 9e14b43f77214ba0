//! murmur-tests: helpers shared by the cross-crate and multi-process tests in
//! `tests/tests/`: start the release binaries as child processes (killed on
//! drop), collect their stdout lines, and wait for lines with bounded waits.

pub mod browser;
pub mod netns;
pub mod scrape;
pub mod swarms;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Path of a binary built by this workspace (`murmur`, `murmur-bootstrap`),
/// next to the test executable's own target directory.
pub fn workspace_binary(name: &str) -> PathBuf {
    let mut dir = std::env::current_exe().expect("test executable path");
    dir.pop(); // deps/
    if dir.ends_with("deps") {
        dir.pop();
    }
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} is missing: build the binaries first (`cargo build --release --workspace --bins`, as scripts/test.sh does)",
        path.display()
    );
    path
}

/// Collect `child`'s stdout lines on a thread.
fn collect_lines(child: &mut Child) -> Arc<Mutex<Vec<String>>> {
    let lines = Arc::new(Mutex::new(Vec::new()));
    let stdout = child.stdout.take().expect("stdout");
    let sink = lines.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Ok(mut l) = sink.lock() {
                l.push(line);
            }
        }
    });
    lines
}

/// A child process whose stdout lines are collected; killed when dropped.
pub struct Proc {
    pub name: String,
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    pub log: PathBuf,
}

impl Proc {
    /// Start `bin` with `args`; stderr goes to `<log_dir>/<name>.log`.
    pub fn spawn(bin: &str, args: &[String], name: &str, log_dir: &Path) -> Proc {
        Self::spawn_with_env(bin, args, &[], name, log_dir)
    }

    /// `spawn` with extra environment variables.
    pub fn spawn_with_env(
        bin: &str,
        args: &[String],
        envs: &[(&str, &str)],
        name: &str,
        log_dir: &Path,
    ) -> Proc {
        Self::spawn_command(Command::new(workspace_binary(bin)), args, envs, name, log_dir)
    }

    /// Start `command` (a binary, or a wrapper such as `ip netns exec …`)
    /// with `args` appended; stdout collected, stderr to `<log_dir>/<name>.log`.
    pub fn spawn_command(
        mut command: Command,
        args: &[String],
        envs: &[(&str, &str)],
        name: &str,
        log_dir: &Path,
    ) -> Proc {
        let log = log_dir.join(format!("{name}.log"));
        let err = std::fs::OpenOptions::new().create(true).append(true).open(&log).expect("log file");
        let shown = format!("{:?}", command.get_program());
        let mut child = command
            .args(args)
            .envs(envs.iter().copied())
            .env("RUST_LOG", std::env::var("MURMUR_TEST_LOG").unwrap_or_else(|_| "warn".into()))
            .stdout(Stdio::piped())
            .stderr(Stdio::from(err))
            .stdin(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {shown}: {e}"));
        let lines = collect_lines(&mut child);
        Proc { name: name.to_string(), child, lines, log }
    }

    /// Every stdout line so far.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// Every stdout line that is a JSON object.
    pub fn events(&self) -> Vec<Value> {
        self.lines().iter().filter_map(|l| serde_json::from_str::<Value>(l).ok()).collect()
    }

    /// Events with `"event": kind`.
    pub fn events_of(&self, kind: &str) -> Vec<Value> {
        self.events().into_iter().filter(|v| v["event"] == kind).collect()
    }

    /// Wait until a line satisfies `pred`; panics with the log tail after `timeout`.
    pub fn wait_line(&self, what: &str, timeout: Duration, pred: impl Fn(&str) -> bool) -> String {
        let t0 = Instant::now();
        loop {
            if let Some(l) = self.lines().into_iter().find(|l| pred(l)) {
                return l;
            }
            if t0.elapsed() > timeout {
                panic!("{}: no line {what} within {timeout:?}\n{}", self.name, self.tail());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Wait until an event satisfies `pred`.
    pub fn wait_event(&self, what: &str, timeout: Duration, pred: impl Fn(&Value) -> bool) -> Value {
        let l = self.wait_line(what, timeout, |l| serde_json::from_str::<Value>(l).is_ok_and(|v| pred(&v)));
        serde_json::from_str(&l).unwrap_or(Value::Null)
    }

    /// The highest round this node reported as closed.
    pub fn last_round(&self) -> Option<u64> {
        self.events_of("round").iter().filter_map(|v| v["round"].as_u64()).max()
    }

    /// The node's `peer_id` from its `started` event.
    pub fn peer_id(&self) -> Option<String> {
        self.events_of("started").last().and_then(|v| v["peer_id"].as_str().map(String::from))
    }

    /// stdout and stderr tails, for failure messages.
    pub fn tail(&self) -> String {
        let lines = self.lines();
        let out = lines[lines.len().saturating_sub(20)..].join("\n");
        let err = std::fs::read_to_string(&self.log).unwrap_or_default();
        let err: Vec<&str> = err.lines().collect();
        format!(
            "--- {} stdout ---\n{out}\n--- stderr ---\n{}",
            self.name,
            err[err.len().saturating_sub(30)..].join("\n")
        )
    }

    /// SIGKILL the process and reap it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Send `signal` (e.g. `libc::SIGSTOP`) to the process.
    pub fn signal(&self, signal: i32) {
        // SAFETY: kill(2) on our own child's pid has no memory effects.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, signal);
        }
    }

    /// The exit status, once the process has ended.
    pub fn try_wait(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Settings of a test run's bootstrap server.
#[derive(Debug, Clone)]
pub struct RunSettings {
    pub inner_steps: u32,
    pub batch: u32,
    pub quorum: u32,
    pub deadline: u32,
    pub seed: u64,
}

/// Start a bootstrap server on an ephemeral loopback port; returns it and
/// its TCP multiaddr (ending in /p2p/<id>).
pub fn start_bootstrap(dir: &Path, s: &RunSettings) -> (Proc, String) {
    start_bootstrap_with(dir, s, &[])
}

/// `start_bootstrap` with `extra` arguments.
pub fn start_bootstrap_with(dir: &Path, s: &RunSettings, extra: &[&str]) -> (Proc, String) {
    let args = bootstrap_args(dir, s, "127.0.0.1", extra);
    let p = Proc::spawn("murmur-bootstrap", &args, "bootstrap", dir);
    let addr = wait_listen_addr(&p, "127.0.0.1");
    (p, addr)
}

/// The bootstrap server's TCP multiaddr on `ip` (ending in /p2p/<id>), from
/// its stdout.
pub fn wait_listen_addr(p: &Proc, ip: &str) -> String {
    let prefix = format!("/ip4/{ip}/tcp/");
    p.wait_line("with a listen address", Duration::from_secs(60), |l| {
        l.starts_with(&prefix) && l.contains("/p2p/")
    })
}

/// `murmur-bootstrap` arguments for a test run listening on `ip`.
pub fn bootstrap_args(dir: &Path, s: &RunSettings, ip: &str, extra: &[&str]) -> Vec<String> {
    let listen = format!("/ip4/{ip}/tcp/0");
    let mut args: Vec<String> = [
        "--listen",
        &listen,
        "--no-mdns",
        "--data-dir",
        &dir.join("bootstrap").display().to_string(),
        "--inner-steps",
        &s.inner_steps.to_string(),
        "--batch",
        &s.batch.to_string(),
        "--quorum",
        &s.quorum.to_string(),
        "--deadline",
        &s.deadline.to_string(),
        "--seed",
        &s.seed.to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

/// Start `murmur node --json` against `bootstrap`, storing in `<dir>/<name>`.
pub fn start_node(dir: &Path, name: &str, bootstrap: &str, extra: &[&str]) -> Proc {
    start_node_with_env(dir, name, bootstrap, extra, &[])
}

/// `start_node` with extra environment variables (e.g. `RAYON_NUM_THREADS`).
pub fn start_node_with_env(
    dir: &Path,
    name: &str,
    bootstrap: &str,
    extra: &[&str],
    envs: &[(&str, &str)],
) -> Proc {
    let args = node_args(dir, name, bootstrap, "127.0.0.1", extra);
    Proc::spawn_with_env("murmur", &args, envs, name, dir)
}

/// `murmur node --json` arguments for a test node listening on `ip`.
pub fn node_args(dir: &Path, name: &str, bootstrap: &str, ip: &str, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "node".into(),
        "--json".into(),
        "--no-mdns".into(),
        "--bootstrap".into(),
        bootstrap.into(),
        "--data-dir".into(),
        dir.join(name).display().to_string(),
        "--listen".into(),
        format!("/ip4/{ip}/tcp/0"),
    ];
    if !extra.contains(&"--discovery-wait") {
        args.extend(["--discovery-wait".into(), "2".into()]);
    }
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

/// The RunSpec the bootstrap server at `addr` hosts, asked for as a probe
/// of key `key` does (a ticket run answers its operators), with the runtime
/// the caller's swarms go on running in.
pub fn hosted_spec(
    addr: &str,
    key: &murmur_protocol::NodeKey,
) -> (tokio::runtime::Runtime, murmur_protocol::RunSpec, libp2p::Multiaddr) {
    let boot: libp2p::Multiaddr = addr.parse().expect("bootstrap address");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let who = murmur_node::runtime::startup::Identity { key: key.clone(), ticket: None };
    let spec = rt
        .block_on(murmur_node::runtime::startup::discover_spec(
            &who,
            std::slice::from_ref(&boot),
            Duration::from_secs(30),
        ))
        .expect("the bootstrap server's run spec");
    (rt, spec, boot)
}

/// Write the key seed `seed` where `murmur node --data-dir <dir>/<name>`
/// keeps its key, so a ticket can be issued before the node starts; returns
/// its public key in hex.
pub fn write_node_key(dir: &Path, name: &str, seed: [u8; 32]) -> String {
    let node_dir = dir.join(name);
    std::fs::create_dir_all(&node_dir).expect("node dir");
    std::fs::write(node_dir.join("node.key"), seed).expect("key file");
    murmur_protocol::NodeKey::from_seed(seed).public().to_string()
}

/// Run `murmur ticket issue --json` with the operator's key file, `run`
/// (`["--run", hex]` or `["--bootstrap", addr]`), the holder and expiry;
/// returns the ticket file `<dir>/<holder name>.ticket`.
pub fn issue_ticket(dir: &Path, operator_key: &Path, run: &[&str], holder: &str, name: &str) -> PathBuf {
    let out = dir.join(format!("{name}.ticket"));
    let mut cmd = Command::new(workspace_binary("murmur"));
    cmd.args(["ticket", "issue", "--json", "--operator-key"])
        .arg(operator_key)
        .args(run)
        .args(["--holder", holder, "--expires", "2h", "--out"])
        .arg(&out);
    let o = cmd.output().expect("running murmur ticket issue");
    assert!(
        o.status.success(),
        "murmur ticket issue failed: {}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

/// A bootstrap server for a run with ticket admission, signed by an operator
/// whose key is written to `<dir>/operator.key`.
pub struct TicketRun {
    pub boot: Proc,
    /// The server's listen address.
    pub addr: String,
    pub operator: murmur_protocol::NodeKey,
    pub operator_key: PathBuf,
}

/// Starts a ticket-admission run (`--admission tickets --operator <key>`)
/// whose operator key is `operator_seed`.
pub fn start_ticket_run(dir: &Path, s: &RunSettings, operator_seed: [u8; 32]) -> TicketRun {
    let operator = murmur_protocol::NodeKey::from_seed(operator_seed);
    let operator_key = dir.join("operator.key");
    std::fs::write(&operator_key, operator.seed()).expect("operator key");
    let op_hex = operator.public().to_string();
    let args = ["--admission", "tickets", "--operator", op_hex.as_str()];
    let (boot, addr) = start_bootstrap_with(dir, s, &args);
    TicketRun { boot, addr, operator, operator_key }
}

/// The last reported state of each round, per node: round → state_id.
pub fn states_by_round(p: &Proc) -> std::collections::BTreeMap<u64, String> {
    let mut m = std::collections::BTreeMap::new();
    for v in p.events_of("round") {
        if let (Some(r), Some(s)) = (v["round"].as_u64(), v["state_id"].as_str()) {
            m.insert(r, s.to_string());
        }
    }
    m
}

/// The StateId of each round's parameters, per node: round → the round's
/// `state_blob` (a committee round's `state_id` names parameters and
/// ledger together), or its `state_id` where the round names only
/// parameters (version 1's).
pub fn params_by_round(p: &Proc) -> std::collections::BTreeMap<u64, String> {
    let mut m = std::collections::BTreeMap::new();
    for v in p.events_of("round") {
        let params = v["state_blob"].as_str().or_else(|| v["state_id"].as_str());
        if let (Some(r), Some(s)) = (v["round"].as_u64(), params) {
            m.insert(r, s.to_string());
        }
    }
    m
}

/// Wait until `pred` holds, polling; panics with `context()` after `timeout`.
pub fn wait_until(
    what: &str,
    timeout: Duration,
    mut pred: impl FnMut() -> bool,
    context: impl Fn() -> String,
) {
    let t0 = Instant::now();
    while !pred() {
        if t0.elapsed() > timeout {
            panic!("timed out after {timeout:?} waiting for {what}\n{}", context());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The repository's root directory.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The workspace's target directory (where the release binaries are).
pub fn target_dir() -> PathBuf {
    let bin = workspace_binary("murmur");
    bin.parent().and_then(Path::parent).map(Path::to_path_buf).unwrap_or_else(|| repo_root().join("target"))
}

/// `GET` a `http://host:port/path` URL on loopback; returns the status code
/// and body, or `None` if nothing answered within a few seconds.
pub fn http_get(url: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let rest = url.strip_prefix("http://")?;
    let (host, path) = rest.split_once('/').map(|(h, p)| (h, format!("/{p}"))).unwrap_or((rest, "/".into()));
    let mut s = std::net::TcpStream::connect(host).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let status = out.split_whitespace().nth(1)?.parse().ok()?;
    let body = out.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    Some((status, body))
}

/// `scripts/testnet.sh` running in its own process group, its stdout lines collected.
pub struct Testnet {
    pub child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Testnet {
    /// Start `scripts/testnet.sh args…` with the already built binaries
    /// (`MURMUR_TESTNET_NO_BUILD=1`: scripts/test.sh built them).
    pub fn start(args: &[&str], stderr_log: &Path) -> Testnet {
        use std::os::unix::process::CommandExt;
        let err = std::fs::File::create(stderr_log).expect("stderr log");
        let mut child = Command::new("bash")
            .arg(repo_root().join("scripts").join("testnet.sh"))
            .args(args)
            .env("MURMUR_TESTNET_NO_BUILD", "1")
            .env("CARGO_TARGET_DIR", target_dir())
            .env("RUST_LOG", "warn")
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(err))
            .spawn()
            .expect("starting scripts/testnet.sh");
        let lines = collect_lines(&mut child);
        Testnet { child, lines }
    }

    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().map(|l| l.clone()).unwrap_or_default()
    }

    pub fn output(&self) -> String {
        self.lines().join("\n")
    }

    /// The highest round the testnet announced (`round   N  state …`).
    pub fn last_round(&self) -> Option<u64> {
        self.lines()
            .iter()
            .filter_map(|l| l.strip_prefix("round ").and_then(|r| r.split_whitespace().next()?.parse().ok()))
            .max()
    }

    /// Pids of every process it reported starting (`started X (pid N)`).
    pub fn pids(&self) -> Vec<u32> {
        self.lines()
            .iter()
            .filter_map(|l| l.split("(pid ").nth(1)?.trim_end_matches(')').parse().ok())
            .collect()
    }

    /// Send SIGINT to its whole process group, as Ctrl-C in a terminal does.
    pub fn interrupt(&self) {
        let status = Command::new("kill")
            .args(["-INT", "--", &format!("-{}", self.child.id())])
            .status()
            .expect("running kill");
        assert!(status.success(), "kill -INT failed");
    }

    /// Wait for the script to exit, at most `limit`.
    pub fn wait(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let t0 = Instant::now();
        while t0.elapsed() < limit {
            if let Ok(Some(s)) = self.child.try_wait() {
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        None
    }
}

impl Drop for Testnet {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = Command::new("kill").args(["-KILL", "--", &format!("-{}", self.child.id())]).status();
            let _ = self.child.wait();
        }
    }
}

/// Whether `pid` is a live murmur process (not gone, not reused by another program).
pub fn is_murmur_process(pid: u32) -> bool {
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else { return false };
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // A zombie (state Z) has exited; its parent has not reaped it yet.
    let zombie = stat.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z'));
    !zombie && String::from_utf8_lossy(&cmdline).contains("murmur")
}

/// A manifest of run `run`, signed by `key`: round `round` trained from
/// `base`, its delta one shard of 4,096 int8 values whose payload hash is
/// `hash` (nothing need hash to it: gossip checks only form and signature).
pub fn signed_manifest(
    key: &murmur_protocol::NodeKey,
    run: murmur_protocol::RunId,
    round: u64,
    base: murmur_protocol::StateId,
    hash: murmur_protocol::PayloadHash,
) -> murmur_protocol::committee::ShardedManifest {
    use murmur_protocol::committee::{merkle_root, ShardLeaf, ShardedManifest};
    let codec = murmur_protocol::Codec::Int8Block { block: 256 };
    let leaf = ShardLeaf {
        shard: 0,
        payload_hash: hash,
        payload_len: codec.payload_len(4096).unwrap_or(0),
        norm: 1.0,
    };
    ShardedManifest {
        run,
        round,
        base,
        signer: murmur_protocol::PublicKey::default(),
        tokens: 1,
        train_loss: 1.0,
        codec,
        element_count: 4096,
        shards: 1,
        norm: 1.0,
        root: merkle_root(&[leaf]),
        signature: murmur_protocol::Signature::default(),
    }
    .sign(key)
}
