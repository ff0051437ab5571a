//! `secrelay serve`: the gateway, until SIGTERM or Ctrl-C; SIGHUP reloads the HTTPS
//! certificate.

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
    /// Plain HTTP for signaling, the API and metrics, on this address: only when asked for
    /// (with neither --http nor --https, HTTPS on 127.0.0.1:8443).
    #[arg(long, value_name = "ADDR")]
    pub http: Option<SocketAddr>,
    /// HTTPS for signaling, the API and metrics, on this address (TLS 1.3/1.2, h2 and
    /// http/1.1).
    #[arg(long, value_name = "ADDR")]
    pub https: Option<SocketAddr>,
    /// The HTTPS certificate chain (PEM, leaf first); needs --tls-key. Re-read on SIGHUP.
    #[arg(
        long,
        value_name = "FILE",
        requires = "tls_key",
        conflicts_with = "tls_ca"
    )]
    pub tls_cert: Option<PathBuf>,
    /// The HTTPS certificate's private key (PEM: PKCS#8, SEC1 or PKCS#1).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// A private CA directory (`secrelay ca init --dir DIR`): the gateway issues itself an HTTPS
    /// certificate from it at start and on SIGHUP. Default without --tls-cert: a throw-away CA.
    #[arg(long, value_name = "DIR")]
    pub tls_ca: Option<PathBuf>,
    /// Key type of an issued HTTPS certificate: ecdsa-p256 (default), ecdsa-p384, ed25519,
    /// rsa-2048, rsa-3072 or rsa-4096.
    #[arg(long, value_name = "T")]
    pub tls_cert_type: Option<String>,
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
    /// A media interface for telephony legs, `[NAME/]LOCAL[!ADVERTISED]` as rtpengine's
    /// `--interface` (repeat the flag for more; the ng `direction` flag picks one by NAME).
    #[arg(long = "interface", value_name = "SPEC")]
    pub interfaces: Vec<String>,
    /// Complexity of the gateway's own Opus encoders, 0–10 (transcoding and mixing; default 10).
    #[arg(long, value_name = "0-10")]
    pub opus_complexity: Option<i32>,
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
        c.http = Some(h);
    }
    if let Some(h) = a.https {
        c.https = Some(h);
    }
    if let (Some(cert), Some(key)) = (&a.tls_cert, &a.tls_key) {
        c.tls_cert = Some(cert.clone());
        c.tls_key = Some(key.clone());
        c.tls_ca_dir = None;
    }
    if let Some(dir) = &a.tls_ca {
        c.tls_ca_dir = Some(dir.clone());
        c.tls_cert = None;
        c.tls_key = None;
    }
    if let Some(t) = &a.tls_cert_type {
        c.tls_cert_type = t.clone();
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
    if let Some(n) = a.opus_complexity {
        c.opus_complexity = n;
    }
    if !a.interfaces.is_empty() {
        c.interfaces = a.interfaces.clone();
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
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
    Ok(())
}

/// Runs the gateway until SIGTERM or SIGINT, then shuts down gracefully.
pub fn run(a: &ServeArgs) -> Result<()> {
    init_logs(&a.log)?;
    let c = config(a)?;
    // The handlers first: a signal that comes as soon as the start-up line is out (a
    // supervisor's, a test's) must find them in place.
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, stop.clone())
            .map_err(|e| anyhow!("installing the signal handler: {e}"))?;
    }
    // SIGHUP: the HTTPS certificate again from its source (files re-read, or issued afresh).
    let reload = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGHUP, reload.clone())
        .map_err(|e| anyhow!("installing the SIGHUP handler: {e}"))?;
    let server = Server::start(c).map_err(|e| anyhow!("{e}"))?;
    let g = server.gateway();
    let mut signaling = Vec::new();
    if let (Some(a), Some(tls)) = (server.https_addr(), server.tls()) {
        signaling.push(format!("HTTPS on https://{a}, {}", tls.info()));
    }
    if let Some(url) = server.http_url() {
        signaling.push(format!("HTTP on {url}"));
    }
    eprintln!(
        "secrelay serve: {}, media on UDP {} (announced as {}), {} worker(s), certificate {}{}",
        signaling.join(", "),
        g.udp_addr(),
        g.candidate(),
        g.config().worker_count(),
        g.fingerprint(),
        server
            .ng_addr()
            .map(|a| format!(", ng control on UDP {a}"))
            .unwrap_or_default()
    );
    while !stop.load(Ordering::Relaxed) {
        if reload.swap(false, Ordering::Relaxed) {
            match server.reload_tls() {
                Ok(fp) => eprintln!("secrelay serve: HTTPS certificate reloaded ({fp})"),
                Err(e) => eprintln!(
                    "secrelay serve: HTTPS certificate reload failed, the one in use stays: {e}"
                ),
            }
        }
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
