//! `murmur ticket issue`: an operator of a ticket run signs an admission
//! ticket for one volunteer's key, valid until a time, and writes it to a
//! file the volunteer passes to `murmur node --ticket`.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Subcommand};
use libp2p::Multiaddr;
use murmur_protocol::{RunId, Ticket};
use serde_json::json;

use crate::runtime::startup::{discover_spec, Identity};
use crate::runtime::tickets::{parse_expiry, parse_public_key, ticket_file_text, unix_now};
use crate::store::keyfile;

/// `murmur ticket …`
#[derive(Subcommand, Debug)]
pub enum TicketCommand {
    /// Sign an admission ticket for a volunteer's key (operators only).
    Issue(IssueArgs),
}

/// Settings of `murmur ticket issue`.
#[derive(Args, Debug)]
pub struct IssueArgs {
    /// The operator's key file (a 32-byte ed25519 seed, as `murmur node`
    /// keeps in <data-dir>/node.key); its public key must be one of the run's
    /// operators.
    #[arg(long)]
    pub operator_key: PathBuf,
    /// The run, as its RunId (64 hex characters).
    #[arg(long, conflicts_with = "bootstrap", required_unless_present = "bootstrap")]
    pub run: Option<String>,
    /// Or learn the run from its bootstrap server (address ending in
    /// /p2p/<peer id>), which also checks that the key is an operator of it.
    #[arg(long)]
    pub bootstrap: Vec<Multiaddr>,
    /// The volunteer's public key (64 hex characters) or peer id.
    #[arg(long)]
    pub holder: String,
    /// When the ticket stops admitting: a duration from now (90s, 30m, 12h,
    /// 30d) or a unix time in seconds.
    #[arg(long)]
    pub expires: String,
    /// Where to write the ticket (hex text).
    #[arg(long)]
    pub out: PathBuf,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn run(c: TicketCommand) -> Result<()> {
    super::init_logs();
    match c {
        TicketCommand::Issue(a) => issue(a),
    }
}

fn issue(a: IssueArgs) -> Result<()> {
    let key = keyfile::load(&a.operator_key)
        .with_context(|| format!("--operator-key {}: cannot read the key file", a.operator_key.display()))?;
    let holder = parse_public_key(&a.holder).map_err(|e| anyhow!("--holder: {e}"))?;
    let now = unix_now();
    let expires = parse_expiry(&a.expires, now).map_err(|e| anyhow!("--expires: {e}"))?;
    let run = match &a.run {
        Some(hex) => parse_run_id(hex)?,
        None => {
            let spec = super::run_until_done(discover_spec(
                &Identity { key: key.clone(), ticket: None },
                &a.bootstrap,
                Duration::from_secs(30),
            ))?;
            if !spec.admission.uses_tickets() {
                bail!(
                    "run {} does not admit by ticket (its bootstrap server hosts it with --admission open)",
                    spec.run_id()
                );
            }
            if !spec.admission.operators().contains(&key.public()) {
                bail!(
                    "key {} is not an operator of run {} (its operators: {})",
                    key.public(),
                    spec.run_id(),
                    spec.admission.operators().iter().map(|k| k.to_string()).collect::<Vec<_>>().join(", ")
                );
            }
            spec.run_id()
        }
    };
    let ticket = Ticket::issue(&key, run, holder, expires);
    write_new(&a.out, &ticket_file_text(&ticket))?;
    if a.json {
        println!(
            "{}",
            json!({
                "event": "ticket_issued",
                "run": run.to_hex(),
                "holder": holder.to_string(),
                "operator": key.public().to_string(),
                "expires": expires,
                "out": a.out.display().to_string(),
            })
        );
    } else {
        println!(
            "ticket for {holder} in run {run}, signed by operator {}, valid until unix time {expires} (in {:.1} h), written to {}",
            key.public(),
            (expires - now) as f64 / 3600.0,
            a.out.display()
        );
    }
    Ok(())
}

fn parse_run_id(s: &str) -> Result<RunId> {
    let bytes = murmur_protocol::hash::unhex(s.trim())
        .filter(|b| b.len() == 32)
        .ok_or_else(|| anyhow!("--run: `{s}` is not a RunId (64 hex characters)"))?;
    let mut id = [0u8; 32];
    id.copy_from_slice(&bytes);
    Ok(RunId(id))
}

/// Write `text` to `path` through a temporary file and a rename.
fn write_new(path: &std::path::Path, text: &str) -> Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text)
        .and_then(|()| std::fs::rename(&tmp, path))
        .with_context(|| format!("--out {}: cannot write the ticket", path.display()))
}
