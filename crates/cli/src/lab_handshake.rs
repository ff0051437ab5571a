//! `secrelay lab handshake …` and `secrelay lab handshake-server …`: flags and wiring; the
//! work is in `secrelay_lab::handshake`.

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _};
use clap::Args;
use secrelay_dtls::{EngineChoice, Fingerprint, PeerAuth};
use secrelay_lab::handshake::{
    load as hload, parse_addr, parse_engine, parse_groups, parse_key_type, parse_profiles,
    server as hserver,
};

use crate::lab::StudyArgs;

/// Flags of `lab handshake`.
#[derive(Args, Debug)]
pub struct HandshakeArgs {
    /// Load mode: the DTLS-SRTP server to open handshakes to (IP:PORT).
    #[arg(
        long,
        value_name = "ADDR",
        required_unless_present = "in_memory",
        conflicts_with = "in_memory"
    )]
    pub target: Option<String>,
    /// Study mode: both sides in this process over memory, secrelay beside OpenSSL and pion/dtls.
    #[arg(long)]
    pub in_memory: bool,
    /// Load mode: stop after N handshakes.
    #[arg(long, value_name = "N", conflicts_with = "duration")]
    pub handshakes: Option<u64>,
    /// Load mode: stop after S seconds.
    #[arg(long, value_name = "S")]
    pub duration: Option<f64>,
    /// Load mode: handshakes in flight at once (each on its own UDP socket).
    #[arg(long, value_name = "C", default_value_t = 1)]
    pub connections: usize,
    /// Load mode: threads driving the connections.
    #[arg(long, value_name = "T", default_value_t = 1)]
    pub threads: usize,
    /// Load mode: client certificate key type (ecdsa-p256, ecdsa-p384; rsa-2048/3072/4096 on the OpenSSL engine).
    #[arg(long, value_name = "T", default_value = "ecdsa-p256")]
    pub cert_type: String,
    /// DTLS engine of secrelay's endpoints: auto (OpenSSL for RSA certificates and what only it covers, dimpl otherwise), dimpl or openssl. In --in-memory mode it drives the phase table.
    #[arg(long, value_name = "E", default_value = "auto")]
    pub engine: String,
    /// Load mode: our client certificate (PEM, e.g. from `secrelay ca issue --client`) instead of a fresh self-signed one; needs --key.
    #[arg(long, value_name = "FILE", requires = "key")]
    pub cert: Option<PathBuf>,
    /// Load mode: the private key (PKCS#8 PEM) of --cert.
    #[arg(long, value_name = "FILE", requires = "cert")]
    pub key: Option<PathBuf>,
    /// Load mode: ask for session resumption (the engine has none; the report says so).
    #[arg(long)]
    pub resume: bool,
    /// Load mode: append one JSON line per finished handshake (peer, local, srtp_profile, keying_material).
    #[arg(long, value_name = "FILE")]
    pub keylog: Option<PathBuf>,
    /// Load mode: the server certificate's expected fingerprint ("sha-256 AB:CD:…"); default: any certificate.
    #[arg(long, value_name = "FP")]
    pub fingerprint: Option<String>,
    /// Load mode: ECDHE groups to offer, most preferred first (comma-separated: x25519, p-256, p-384); default: the engine's (X25519, P-256, P-384).
    #[arg(long, value_name = "LIST")]
    pub groups: Option<String>,
    /// Load mode: seconds one handshake may take before it counts as failed.
    #[arg(long, value_name = "S", default_value_t = 10.0)]
    pub timeout: f64,
    /// Study flags (--quick, --json FILE, --out DIR, --no-progress); --json also serves the load mode.
    #[command(flatten)]
    pub study: StudyArgs,
}

/// Flags of `lab handshake-server`.
#[derive(Args, Debug)]
pub struct HandshakeServerArgs {
    /// Address to listen on (IP:PORT; port 0 picks one). The bound address is printed first on stdout.
    #[arg(long, value_name = "ADDR")]
    pub listen: String,
    /// Server certificate key type (ecdsa-p256, ecdsa-p384; rsa-2048/3072/4096 on the OpenSSL engine).
    #[arg(long, value_name = "T", default_value = "ecdsa-p256")]
    pub cert_type: String,
    /// DTLS engine: auto (OpenSSL for RSA certificates, dimpl otherwise), dimpl or openssl.
    #[arg(long, value_name = "E", default_value = "auto")]
    pub engine: String,
    /// SRTP profiles accepted, most preferred first (comma-separated, e.g. SRTP_AEAD_AES_128_GCM,SRTP_AES128_CM_SHA1_80).
    #[arg(long, value_name = "LIST")]
    pub srtp_profiles: Option<String>,
    /// ECDHE groups to accept, most preferred first (comma-separated: x25519, p-256, p-384); default: the engine's (X25519, P-256, P-384).
    #[arg(long, value_name = "LIST")]
    pub groups: Option<String>,
    /// Append one JSON line per finished handshake (peer, srtp_profile, keying_material).
    #[arg(long, value_name = "FILE")]
    pub keylog: Option<PathBuf>,
    /// Accept only clients whose certificate has this fingerprint ("sha-256 AB:CD:…").
    #[arg(long, value_name = "FP", conflicts_with = "ca")]
    pub fingerprint: Option<String>,
    /// Accept only clients with a certificate issued by the private CA in DIR (its ca.pem).
    #[arg(long, value_name = "DIR")]
    pub ca: Option<PathBuf>,
    /// Handshakes in progress at most; datagrams from further new addresses are dropped.
    #[arg(long, value_name = "N", default_value_t = 1000)]
    pub max_in_flight: usize,
    /// Drop a handshake whose peer is silent this many seconds.
    #[arg(long, value_name = "S", default_value_t = 5.0)]
    pub idle_timeout: f64,
    /// Stop after S seconds (default: until SIGINT or SIGTERM).
    #[arg(long, value_name = "S")]
    pub duration: Option<f64>,
    /// No counters on stderr.
    #[arg(long)]
    pub quiet: bool,
}

fn seconds(flag: &str, s: f64) -> anyhow::Result<Duration> {
    if !s.is_finite() || s <= 0.0 || s > 1e7 {
        bail!("{flag} {s}: expected a positive number of seconds");
    }
    Ok(Duration::from_secs_f64(s))
}

fn fingerprint(s: &str) -> anyhow::Result<PeerAuth> {
    let fp: Fingerprint = s
        .parse()
        .map_err(|e| anyhow::anyhow!("--fingerprint {s:?}: {e}"))?;
    Ok(PeerAuth::Fingerprint(fp))
}

/// Runs `lab handshake-server`.
pub fn server(a: &HandshakeServerArgs) -> anyhow::Result<()> {
    let mut opts = hserver::ServerOptions::new(parse_addr("--listen", &a.listen)?);
    opts.engine = parse_engine(&a.engine)?;
    opts.cert_type = parse_key_type(&a.cert_type)?;
    if let Some(list) = &a.srtp_profiles {
        opts.srtp_profiles = parse_profiles(list)?;
    }
    opts.keylog = a.keylog.clone();
    if let Some(list) = &a.groups {
        opts.groups = parse_groups(list)?;
    }
    if let Some(fp) = &a.fingerprint {
        opts.peer_auth = fingerprint(fp)?;
    }
    if let Some(dir) = &a.ca {
        let path = dir.join(secrelay_dtls::ca::CA_CERT_FILE);
        let pem = std::fs::read_to_string(&path)
            .with_context(|| format!("--ca {}: reading {}", dir.display(), path.display()))?;
        let chain = secrelay_dtls::cert::chain_from_pem(&pem)
            .map_err(|e| anyhow::anyhow!("--ca {}: {e}", path.display()))?;
        let ca = chain
            .into_iter()
            .next()
            .with_context(|| format!("--ca {}: no certificate", path.display()))?;
        opts.peer_auth = PeerAuth::ca(ca);
    }
    opts.max_in_flight = a.max_in_flight;
    opts.idle_timeout = seconds("--idle-timeout", a.idle_timeout)?;
    opts.duration = a.duration.map(|d| seconds("--duration", d)).transpose()?;
    opts.print_stats = !a.quiet;
    let stop = Arc::new(AtomicBool::new(false));
    hserver::run(opts, stop, |addr| {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "listening {addr}");
        let _ = out.flush();
    })?;
    Ok(())
}

/// Runs `lab handshake`: the load generator (returns None), or hands the study's flags and the
/// engine back for `--in-memory`.
pub fn load(a: &HandshakeArgs) -> anyhow::Result<Option<(StudyArgs, EngineChoice)>> {
    let engine = parse_engine(&a.engine)?;
    let Some(target) = &a.target else {
        let load_only = [
            (a.handshakes.is_some(), "--handshakes"),
            (a.duration.is_some(), "--duration"),
            (a.keylog.is_some(), "--keylog"),
            (a.fingerprint.is_some(), "--fingerprint"),
            (a.resume, "--resume"),
            (a.cert.is_some(), "--cert"),
            (a.groups.is_some(), "--groups"),
        ];
        if let Some((_, flag)) = load_only.iter().find(|(set, _)| *set) {
            bail!("{flag} belongs to the load mode (--target ADDR), not to --in-memory");
        }
        return Ok(Some((a.study.clone(), engine)));
    };
    if a.study.quick || a.study.out.is_some() {
        bail!("--quick and --out belong to --in-memory; the load mode takes --handshakes N or --duration S");
    }
    let mut opts = hload::LoadOptions::new(parse_addr("--target", target)?);
    opts.handshakes = a.handshakes;
    opts.duration = a.duration.map(|d| seconds("--duration", d)).transpose()?;
    opts.connections = a.connections;
    opts.threads = a.threads;
    opts.engine = engine;
    opts.cert_type = parse_key_type(&a.cert_type)?;
    opts.keylog = a.keylog.clone();
    opts.resume = a.resume;
    if let Some(list) = &a.groups {
        opts.groups = parse_groups(list)?;
    }
    if let (Some(cert), Some(key)) = (&a.cert, &a.key) {
        opts.certificate = Some(secrelay_lab::handshake::load_certificate(
            engine, cert, key,
        )?);
    }
    opts.timeout = seconds("--timeout", a.timeout)?;
    opts.progress = !a.study.no_progress;
    if let Some(fp) = &a.fingerprint {
        opts.peer_auth = fingerprint(fp)?;
    }
    let report = hload::run(opts, Arc::new(AtomicBool::new(false)))?;
    print!("{}", report.render_text());
    if let Some(path) = &a.study.json {
        secrelay_lab::write_json(path, &report)?;
    }
    Ok(None)
}
