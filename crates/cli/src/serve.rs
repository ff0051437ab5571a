//! `secrelay serve`: the gateway, until SIGTERM or Ctrl-C.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Result};
use clap::Args;
use secrelay_gateway::server::{ServeConfig, Server};

/// Flags of `secrelay serve`; each one overrides the same key of the config file.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// TOML configuration (every key optional; see docs/gateway.md).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// HTTP address for signaling, the API and metrics.
    #[arg(long)]
    pub http: Option<SocketAddr>,
    /// UDP address every participant's media uses.
    #[arg(long)]
    pub udp: Option<SocketAddr>,
    /// Address announced as the host candidate.
    #[arg(long)]
    pub announce: Option<IpAddr>,
    /// Packet workers (0: one per core).
    #[arg(long)]
    pub workers: Option<usize>,
    /// SRTP engine for the workers' receive batches: simd (default) or serial.
    #[arg(long)]
    pub srtp_engine: Option<String>,
    /// The ng control socket for SIP proxies (rtpengine's protocol, UDP), e.g. 127.0.0.1:2223.
    #[arg(long, value_name = "ADDR")]
    pub ng: Option<SocketAddr>,
    /// Local ports for telephony legs, LOW-HIGH (RTP on even ports, RTCP on the next).
    #[arg(long, value_name = "LOW-HIGH")]
    pub rtp_ports: Option<String>,
    /// Log filter (tracing's syntax, e.g. `info` or `secrelay_gateway=debug`).
    #[arg(long, default_value = "info")]
    pub log: String,
}

/// Builds the configuration from the file and the flags.
pub fn config(a: &ServeArgs) -> Result<ServeConfig> {
    let mut c = match &a.config {
        Some(p) => ServeConfig::from_file(p).map_err(|e| anyhow!("{e}"))?,
        None => ServeConfig::default(),
    };
    if let Some(h) = a.http {
        c.http = h;
    }
    if let Some(u) = a.udp {
        c.udp = u;
    }
    if let Some(ip) = a.announce {
        c.announce = Some(ip);
    }
    if let Some(w) = a.workers {
        c.workers = w;
    }
    if let Some(e) = &a.srtp_engine {
        c.srtp_engine = e.clone();
    }
    if let Some(n) = a.ng {
        c.ng = Some(n);
    }
    if let Some(p) = &a.rtp_ports {
        c.rtp_ports = p.clone();
    }
    c.check().map_err(|e| anyhow!("{e}"))?;
    Ok(c)
}

/// Installs the log subscriber (stderr, no ANSI when not a terminal).
pub fn init_logs(filter: &str) -> Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .map_err(|e| anyhow!("--log {filter:?}: {e}"))?;
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
    Ok(())
}

/// Runs the gateway until SIGTERM or SIGINT, then shuts down gracefully.
pub fn run(a: &ServeArgs) -> Result<()> {
    init_logs(&a.log)?;
    let c = config(a)?;
    let server = Server::start(c).map_err(|e| anyhow!("{e}"))?;
    let g = server.gateway();
    eprintln!(
        "secrelay serve: HTTP on {}, media on UDP {} (announced as {}), {} worker(s), certificate {}{}",
        server.url(),
        g.udp_addr(),
        g.candidate(),
        g.config().worker_count(),
        g.fingerprint(),
        server
            .ng_addr()
            .map(|a| format!(", ng control on UDP {a}"))
            .unwrap_or_default()
    );
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, stop.clone())
            .map_err(|e| anyhow!("installing the signal handler: {e}"))?;
    }
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("secrelay serve: shutting down (close_notify to every participant)");
    let stats = server.gateway().stats().clone();
    server.shutdown();
    let t = stats.totals();
    eprintln!(
        "secrelay serve: stopped; {} handshakes, {} media packets relayed, {} drops",
        t.handshakes_ok, t.media_forwarded, t.drops
    );
    Ok(())
}
