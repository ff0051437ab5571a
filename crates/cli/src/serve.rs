//! `secrelay serve`: the gateway, until SIGTERM or Ctrl-C; SIGHUP reloads the HTTPS
//! certificate.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Result};
use clap::Args;
use secrelay_gateway::server::auth::Secret;
use secrelay_gateway::server::{ServeConfig, Server};

/// Flags of `secrelay serve`; each one overrides the same key of the config file.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// TOML configuration (every key optional; docs/configuration.md lists them).
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
    /// An IPv6 address announced as a second host candidate (needs --udp [::]:PORT).
    #[arg(long, value_name = "IPV6")]
    pub announce_ipv6: Option<std::net::Ipv6Addr>,
    /// ICE over TCP (passive, RFC 6544) on this address, for browsers that can send no UDP.
    #[arg(long, value_name = "ADDR")]
    pub ice_tcp: Option<SocketAddr>,
    /// Address announced as the host candidate.
    #[arg(long)]
    pub announce: Option<IpAddr>,
    /// Packet workers (0: one per core).
    #[arg(long)]
    pub workers: Option<usize>,
    /// SRTP engine for the workers' receive batches: simd (default) or serial.
    #[arg(long)]
    pub srtp_engine: Option<String>,
    /// How the workers read and write their UDP sockets: auto (default: io_uring where the
    /// kernel allows it), io_uring or mmsg (recvmmsg/sendmmsg).
    #[arg(long, value_name = "IO")]
    pub media_io: Option<String>,
    /// Put the XDP filter on this network interface (again for each interface): datagrams to
    /// the media ports from sources the gateway has not admitted are dropped in the driver
    /// (needs root).
    #[arg(long, value_name = "IFACE")]
    pub xdp: Vec<String>,
    /// Where the XDP filter runs: auto (default: native where the driver has it), native or
    /// generic.
    #[arg(long, value_name = "MODE")]
    pub xdp_mode: Option<String>,
    /// The ng control socket for SIP proxies (rtpengine's protocol, UDP), e.g. 127.0.0.1:2223.
    #[arg(long, value_name = "ADDR")]
    pub ng: Option<SocketAddr>,
    /// Record ng calls here when asked (`start recording`): a pcap file of each call's RTP,
    /// decrypted, and a JSON file beside it.
    #[arg(long, value_name = "DIR")]
    pub recording_dir: Option<std::path::PathBuf>,
    /// Read the audio files played to participants (ng `play media`, the HTTP API's
    /// `…/participants/{id}/media`) from this folder only.
    #[arg(long, value_name = "DIR")]
    pub media_dir: Option<std::path::PathBuf>,
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
    /// The admin key (the operator's credential for /api and /metrics) is read from this file;
    /// if it does not exist, a fresh key is written there (readable by its owner only).
    /// Without this flag or `admin_key` in the config, a key is made at start and written to a
    /// temporary file whose path is printed. Re-read on SIGHUP.
    #[arg(long, value_name = "FILE")]
    pub admin_key_file: Option<PathBuf>,
    /// An origin whose pages may call the gateway from a browser (CORS), e.g.
    /// https://app.example.com, or * for any; repeat for more. Replaces the config's
    /// `cors_origins`. Default: none but the gateway's own pages.
    #[arg(long = "cors-origin", value_name = "ORIGIN")]
    pub cors_origins: Vec<String>,
    /// A plain HTTP listener for /metrics and /healthz only, with no credential: ADDR, or a
    /// port (on 127.0.0.1). Without it /metrics needs the admin key.
    #[arg(long, value_name = "ADDR|PORT", value_parser = parse_metrics_addr)]
    pub metrics: Option<SocketAddr>,
    /// Logs on stderr: `--log FILTER` (else RUST_LOG, else info) and `--log-format text|json`.
    #[command(flatten)]
    pub logs: crate::logs::LogArgs,
}

/// `--metrics`: an address, or a port on loopback.
fn parse_metrics_addr(s: &str) -> Result<SocketAddr, String> {
    if let Ok(port) = s.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    s.parse()
        .map_err(|_| format!("{s:?}: an address (127.0.0.1:9464) or a port"))
}

/// The admin key in `path`, or a fresh one written there (mode 0600) when the file does not
/// exist.
pub fn admin_key_from(path: &std::path::Path) -> Result<Secret> {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let key = text.trim();
            if key.len() < secrelay_gateway::server::auth::MIN_SECRET_LEN {
                return Err(anyhow!(
                    "--admin-key-file {}: the key is {} bytes: at least {}",
                    path.display(),
                    key.len(),
                    secrelay_gateway::server::auth::MIN_SECRET_LEN
                ));
            }
            Ok(Secret::from(key))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let key = Secret::random();
            write_private(path, key.expose())
                .map_err(|e| anyhow!("--admin-key-file {}: {e}", path.display()))?;
            Ok(key)
        }
        Err(e) => Err(anyhow!("--admin-key-file {}: {e}", path.display())),
    }
}

/// Writes `text` to a new file only its owner can read.
fn write_private(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(text.as_bytes())?;
    f.write_all(b"\n")
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
    if let Some(ip) = a.announce_ipv6 {
        c.announce_ipv6 = Some(ip);
    }
    if let Some(t) = a.ice_tcp {
        c.ice_tcp = Some(t);
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
    if let Some(m) = &a.media_io {
        c.media_io = m.clone();
    }
    if !a.xdp.is_empty() {
        c.xdp = a.xdp.clone();
    }
    if let Some(m) = &a.xdp_mode {
        c.xdp_mode = m.clone();
    }
    if let Some(d) = &a.recording_dir {
        c.recording_dir = Some(d.clone());
    }
    if let Some(d) = &a.media_dir {
        c.media_dir = Some(d.clone());
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
    if let Some(m) = a.metrics {
        c.metrics = Some(m);
    }
    if !a.cors_origins.is_empty() {
        c.cors_origins = a.cors_origins.clone();
    }
    if let Some(path) = &a.admin_key_file {
        c.admin_key = Some(admin_key_from(path)?);
    }
    if !a.interfaces.is_empty() {
        c.interfaces = a.interfaces.clone();
    }
    c.check().map_err(|e| anyhow!("{e}"))?;
    Ok(c)
}

/// Runs the gateway until SIGTERM or SIGINT, then shuts down gracefully.
pub fn run(a: &ServeArgs) -> Result<()> {
    a.logs.init("info")?;
    let c = config(a)?;
    // The handlers first: a signal that comes as soon as the start-up line is out (a
    // supervisor's, a test's) must find them in place.
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, stop.clone())
            .map_err(|e| anyhow!("installing the signal handler: {e}"))?;
    }
    // SIGHUP: the HTTPS certificate again from its source (files re-read, or issued afresh),
    // and the credentials (the config file and --admin-key-file read again).
    let reload = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGHUP, reload.clone())
        .map_err(|e| anyhow!("installing the SIGHUP handler: {e}"))?;
    let made_admin_key = c.admin_key.is_none();
    let server = Server::start(c).map_err(|e| anyhow!("{e}"))?;
    // A key made at start goes to a file only this user can read, gone at exit.
    let admin_key_dir = if made_admin_key {
        let dir = tempfile::Builder::new()
            .prefix("secrelay-admin-")
            .tempdir()
            .map_err(|e| anyhow!("a directory for the admin key: {e}"))?;
        let path = dir.path().join("admin.key");
        write_private(&path, server.admin_key().expose())
            .map_err(|e| anyhow!("{}: {e}", path.display()))?;
        Some(dir)
    } else {
        None
    };
    let mut banner = server.banner();
    banner.admin_key_file = admin_key_dir.as_ref().map(|d| d.path().join("admin.key"));
    announce(&banner, a.logs.log_format);
    while !stop.load(Ordering::Relaxed) {
        if reload.swap(false, Ordering::Relaxed) {
            // The server logs the outcomes (`HTTPS certificate reloaded`, `access credentials
            // reloaded`, or why not).
            let _ = server.reload_tls();
            if let Err(e) =
                config(a).and_then(|c| server.reload_access(&c).map_err(|e| anyhow!("{e}")))
            {
                tracing::warn!(error = %e, "credentials reload failed; the ones in force stay");
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let format = a.logs.log_format;
    say(
        format,
        "shutting down (close_notify to every participant)",
        serde_json::json!({}),
    );
    let stats = server.gateway().stats().clone();
    server.shutdown();
    let t = stats.totals();
    say(
        format,
        &format!(
            "stopped; {} handshakes, {} media packets relayed, {} drops",
            t.handshakes_ok, t.media_forwarded, t.drops
        ),
        serde_json::json!({
            "handshakes": t.handshakes_ok,
            "relayed": t.media_forwarded,
            "drops": t.drops,
        }),
    );
    Ok(())
}

/// A line of the gateway's life (start, shutdown, stop), never filtered out like the banner:
/// `secrelay serve: MESSAGE` in text, a JSON line with `fields` in JSON.
fn say(format: crate::logs::LogFormat, message: &str, fields: serde_json::Value) {
    match format {
        crate::logs::LogFormat::Text => eprintln!("secrelay serve: {message}"),
        crate::logs::LogFormat::Json => {
            let mut f = fields;
            f["message"] = message.into();
            eprintln!(
                "{}",
                serde_json::json!({"level": "INFO", "target": "secrelay::serve", "fields": f})
            );
        }
    }
}

/// The start-up banner, never filtered out: a few lines for a person (text logs), or one JSON
/// line among the others (`"message": "ready"` with the same facts).
fn announce(b: &secrelay_gateway::server::banner::Banner, format: crate::logs::LogFormat) {
    match format {
        crate::logs::LogFormat::Text => eprint!("{b}"),
        crate::logs::LogFormat::Json => {
            say(
                format,
                "ready",
                serde_json::json!({
                    "url": b.url(),
                    "https": b.https.as_ref().map(|(a, _)| a.to_string()),
                    "http": b.http.map(|a| a.to_string()),
                    "ca": b.trust.as_ref().map(|t| t.path().display().to_string()),
                    "names": b.names,
                    "udp": b.udp.to_string(),
                    "announced": b.candidate.to_string(),
                    "workers": b.workers,
                    "ng": b.ng.map(|a| a.to_string()),
                    "metrics": b.metrics.map(|a| a.to_string()),
                    "admin_key_file": b.admin_key_file.as_ref().map(|p| p.display().to_string()),
                    "rooms_open": b.rooms_open,
                    "build": b.build,
                }),
            );
        }
    }
}
