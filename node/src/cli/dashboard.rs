//! `murmur dashboard`: watch a run over libp2p and serve its live web page.

use std::net::SocketAddr;

use anyhow::Result;
use clap::Args;
use libp2p::Multiaddr;

use crate::dashboard::{run_dashboard, DashboardOptions};

/// Settings of `murmur dashboard`.
#[derive(Args, Debug)]
pub struct DashboardArgs {
    /// Bootstrap server address, ending in /p2p/<peer id> (repeatable).
    #[arg(long, env = "MURMUR_BOOTSTRAP", required = true)]
    pub bootstrap: Vec<Multiaddr>,
    /// Where to serve the web page (port 0 picks a free one; the URL is printed).
    #[arg(long, env = "MURMUR_DASHBOARD_HTTP", default_value = "127.0.0.1:8080")]
    pub http: SocketAddr,
    /// Do not discover peers on the local network with mDNS.
    #[arg(long)]
    pub no_mdns: bool,
    /// Print one JSON object per line.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub observer: super::identity::ObserverArgs,
}

pub fn run(a: DashboardArgs) -> Result<()> {
    super::init_logs();
    let who = a.observer.identity()?;
    let opts = DashboardOptions { bootstrap: a.bootstrap, http: a.http, mdns: !a.no_mdns, json: a.json, who };
    super::run_until_ctrl_c(run_dashboard(opts))
}
