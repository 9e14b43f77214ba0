//! Who an observer (`murmur dashboard`, `murmur export --bootstrap`) is to
//! a run: a fresh key, or a key file and the ticket that admits it, which a
//! run that admits by ticket requires before it answers.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use murmur_protocol::NodeKey;

use crate::runtime::startup::Identity;
use crate::runtime::tickets::read_ticket_file;
use crate::store::keyfile;

#[derive(Args, Debug, Default, Clone)]
pub struct ObserverArgs {
    /// Join as this key (a key file: the 32-byte seed `murmur node` keeps
    /// in <data-dir>/node.key) instead of a fresh one. A run that admits by
    /// ticket answers an operator's key, or a key with its --ticket.
    #[arg(long)]
    pub key: Option<PathBuf>,
    /// The key's admission ticket (from `murmur ticket issue`).
    #[arg(long, requires = "key")]
    pub ticket: Option<PathBuf>,
}

impl ObserverArgs {
    pub fn identity(&self) -> Result<Identity> {
        let key = match &self.key {
            Some(path) => keyfile::load(path)
                .with_context(|| format!("--key {}: cannot read the key file", path.display()))?,
            None => NodeKey::from_seed(rand::random()),
        };
        let ticket = self
            .ticket
            .as_deref()
            .map(read_ticket_file)
            .transpose()
            .map_err(|e| anyhow::anyhow!("--ticket: {e}"))?;
        Ok(Identity { key, ticket })
    }
}
