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
    /// Load mode: the server to open handshakes to (IP:PORT): DTLS-SRTP over UDP, or with
    /// --tls, TLS over TCP.
    #[arg(
        long,
        value_name = "ADDR",
        required_unless_present_any = ["in_memory", "tls"],
        conflicts_with = "in_memory"
    )]
    pub target: Option<String>,
    /// Study mode: both sides in this process over memory, secrelay beside OpenSSL and pion/dtls.
    #[arg(long)]
    pub in_memory: bool,
    /// TLS over TCP instead of DTLS: with --target, the load tool; without, the study
    /// (secrelay's HTTPS server beside nginx and openssl s_server, and its DTLS server).
    #[arg(long, conflicts_with = "in_memory")]
    pub tls: bool,
    /// TLS load mode: the version offered, 1.3 or 1.2.
    #[arg(long, value_name = "V", default_value = "1.3", requires = "tls")]
    pub tls_version: String,
    /// TLS load mode: cipher suites offered, most preferred first (comma-separated IANA names,
    /// e.g. TLS13_AES_128_GCM_SHA256); default: aws-lc-rs' for the version.
    #[arg(long, value_name = "LIST", requires = "tls")]
    pub suites: Option<String>,
    /// TLS load mode: the name sent in SNI (and checked with --ca); default: the target's IP.
    #[arg(long, value_name = "NAME", requires = "tls")]
    pub server_name: Option<String>,
    /// TLS load mode: verify the server's chain and name against this CA certificate (PEM);
    /// default: no verification, as load tools do.
    #[arg(long, value_name = "FILE", requires = "tls")]
    pub ca: Option<PathBuf>,
    /// TLS load mode: after each handshake, GET this path (HTTP/1.1) instead of closing.
    #[arg(long, value_name = "PATH", requires = "tls")]
    pub request: Option<String>,
    /// TLS load mode: pin the load threads to these cores (comma-separated, round robin).
    #[arg(long, value_name = "LIST", requires = "tls")]
    pub cpus: Option<String>,
    /// TLS load mode: a new client key share per connection (default: one per thread, reused;
    /// the server's key exchange is the same either way).
    #[arg(long, requires = "tls")]
    pub fresh_key_shares: bool,
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
    /// Load mode: resume sessions (TLS: offer the tickets or session ids the server gave; DTLS:
    /// the engine has none, the report says so).
    #[arg(long)]
    pub resume: bool,
    /// Load mode: append one JSON line per finished handshake (peer, local, srtp_profile, keying_material).
    #[arg(long, value_name = "FILE")]
    pub keylog: Option<PathBuf>,
    /// Load mode: the server certificate's expected fingerprint ("sha-256 AB:CD:…"); default: any certificate.
    #[arg(long, value_name = "FP")]
    pub fingerprint: Option<String>,
    /// Load mode: ECDHE groups to offer, most preferred first (comma-separated: x25519, p-256, p-384; with --tls also x25519mlkem768); default: the engine's (X25519, P-256, P-384), with --tls x25519.
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

/// `--cpus 0,1`.
fn parse_cpus(s: &str) -> anyhow::Result<Vec<usize>> {
    s.split(',')
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .map(|x| {
            x.parse::<usize>()
                .map_err(|_| anyhow::anyhow!("--cpus {s:?}: comma-separated core numbers"))
        })
        .collect()
}

fn list(s: &Option<String>) -> Vec<String> {
    s.as_deref()
        .unwrap_or("")
        .split([',', ':'])
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .map(str::to_owned)
        .collect()
}

/// `lab handshake --tls --target ADDR`.
fn tls_load(a: &HandshakeArgs, target: &str) -> anyhow::Result<()> {
    use secrelay_lab::handshake::tls_load as t;
    let dtls_only = [
        (a.keylog.is_some(), "--keylog"),
        (a.fingerprint.is_some(), "--fingerprint"),
        (a.cert.is_some(), "--cert"),
        (a.engine != "auto", "--engine"),
        (a.cert_type != "ecdsa-p256", "--cert-type"),
    ];
    if let Some((_, flag)) = dtls_only.iter().find(|(set, _)| *set) {
        bail!("{flag} belongs to the DTLS load mode, not to --tls (the server's certificate is the server's choice)");
    }
    let mut opts = t::TlsLoadOptions::new(parse_addr("--target", target)?);
    opts.handshakes = a.handshakes;
    opts.duration = a.duration.map(|d| seconds("--duration", d)).transpose()?;
    opts.connections = a.connections;
    opts.threads = a.threads;
    opts.version = t::TlsVersion::parse(&a.tls_version)?;
    opts.suites = list(&a.suites);
    if a.groups.is_some() {
        opts.groups = list(&a.groups);
    }
    opts.resume = a.resume;
    opts.server_name = a.server_name.clone();
    if let Some(ca) = &a.ca {
        let pem = std::fs::read_to_string(ca).with_context(|| format!("--ca {}", ca.display()))?;
        let der = secrelay_dtls::cert::chain_from_pem(&pem)
            .map_err(|e| anyhow::anyhow!("--ca {}: {e}", ca.display()))?
            .remove(0);
        opts.ca = Some(der);
    }
    opts.request = a.request.clone();
    opts.timeout = seconds("--timeout", a.timeout)?;
    opts.progress = !a.study.no_progress;
    if let Some(c) = &a.cpus {
        opts.cpus = parse_cpus(c)?;
    }
    opts.fresh_key_shares = a.fresh_key_shares;
    let report = t::run(opts, Arc::new(AtomicBool::new(false)), true)?;
    print!("{}", report.render_text());
    if let Some(path) = &a.study.json {
        secrelay_lab::write_json(path, &report)?;
    }
    Ok(())
}

/// What `lab handshake` turned out to be, for the caller.
pub enum HandshakeRun {
    /// A load run, done.
    Done,
    /// The in-memory DTLS study, with the engine.
    InMemory(StudyArgs, EngineChoice),
    /// The TLS study.
    TlsStudy(StudyArgs),
}

/// Runs `lab handshake`: the load generators (DTLS, or TLS with `--tls`), or hands the study's
/// flags back for `--in-memory` and for `--tls` without `--target`.
pub fn load(a: &HandshakeArgs) -> anyhow::Result<HandshakeRun> {
    if a.tls {
        return match &a.target {
            Some(target) => {
                if a.study.quick || a.study.out.is_some() {
                    bail!("--quick and --out belong to the TLS study (--tls without --target)");
                }
                tls_load(a, target).map(|()| HandshakeRun::Done)
            }
            None => {
                let load_only = [
                    (a.handshakes.is_some(), "--handshakes"),
                    (a.duration.is_some(), "--duration"),
                    (a.keylog.is_some(), "--keylog"),
                    (a.ca.is_some(), "--ca"),
                    (a.request.is_some(), "--request"),
                    (a.resume, "--resume"),
                ];
                if let Some((_, flag)) = load_only.iter().find(|(set, _)| *set) {
                    bail!("{flag} belongs to the load mode (--tls --target ADDR), not to the TLS study");
                }
                Ok(HandshakeRun::TlsStudy(a.study.clone()))
            }
        };
    }
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
        return Ok(HandshakeRun::InMemory(a.study.clone(), engine));
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
    Ok(HandshakeRun::Done)
}
