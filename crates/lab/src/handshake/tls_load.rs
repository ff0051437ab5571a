//! `secrelay lab handshake --tls --target ADDR`: a TLS-over-TCP handshake load generator in the
//! spirit of tls-perf, with the same summary as the DTLS one ([`super::load`]).
//!
//! `connections` handshakes are kept in flight over `threads` threads (each pinned to a core of
//! `cpus` when given), each thread driving its sockets with one `mio` poller and a rustls
//! client per connection (aws-lc-rs). One handshake: a new TCP connection, the TLS handshake
//! (TLS 1.3 or 1.2, the offered suites and groups), then close_notify (or one HTTP request,
//! `request`), and the connection is closed once the server has closed its side, so that the
//! server has finished the handshake (and sent its tickets) before the next one starts on that
//! slot. Latency runs from `connect()` to the client's side of the handshake being complete.
//! When the run ends, no new connection starts and those in flight finish (none is abandoned),
//! so the client's counts and the server's agree.
//!
//! The client offers a browser's suites in a browser's order ([`BROWSER_SUITE_ORDER`]) unless
//! told otherwise, and by default makes its key share once per thread and reuses it (the
//! server still makes and agrees a fresh one every time): the client's cost is kept low so
//! that it is not what limits a fast server.
//!
//! Like tls-perf, the client does not verify the server's certificate unless `ca` is given
//! (then its chain and name are checked against that CA): a load client that verifies spends
//! an ECDSA or RSA verification per handshake and becomes the bottleneck before a fast server
//! does. With `resume`, each thread keeps the sessions the server gives it (TLS 1.3 tickets,
//! TLS 1.2 tickets or session ids) and offers one on every new connection: after the first
//! handshakes, every handshake is a resumption unless the server declines.

use std::collections::BTreeMap;
use std::io::{ErrorKind, Read as _, Write as _};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::Resumption;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    ClientConfig, ClientConnection, DigitallySignedStruct, HandshakeKind, SignatureScheme,
};
use serde::Serialize;

use super::load::{rate_row, rate_table, sample_rates, LatencyStats, LoadMethod, RateStats};
use crate::frame::{Cell, Table};

/// A TLS version the load tool offers (one per run).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum TlsVersion {
    /// TLS 1.3.
    #[serde(rename = "1.3")]
    Tls13,
    /// TLS 1.2.
    #[serde(rename = "1.2")]
    Tls12,
}

impl TlsVersion {
    /// `1.3` or `1.2`.
    pub fn name(self) -> &'static str {
        match self {
            TlsVersion::Tls13 => "1.3",
            TlsVersion::Tls12 => "1.2",
        }
    }

    /// Parses `1.3`, `tls1.3`, `1.2`, `tls1.2`, naming the flag on error.
    pub fn parse(s: &str) -> anyhow::Result<TlsVersion> {
        match s
            .trim()
            .to_ascii_lowercase()
            .trim_start_matches("tls")
            .trim_start_matches('v')
        {
            "1.3" | "13" => Ok(TlsVersion::Tls13),
            "1.2" | "12" => Ok(TlsVersion::Tls12),
            _ => bail!("--tls-version {s:?}: 1.3 or 1.2"),
        }
    }

    fn rustls(self) -> &'static rustls::SupportedProtocolVersion {
        match self {
            TlsVersion::Tls13 => &rustls::version::TLS13,
            TlsVersion::Tls12 => &rustls::version::TLS12,
        }
    }
}

/// Settings of a TLS load run.
#[derive(Debug, Clone)]
pub struct TlsLoadOptions {
    /// The server.
    pub target: SocketAddr,
    /// The name sent in SNI and checked against the certificate (with `ca`); default: the
    /// target's IP address (no SNI).
    pub server_name: Option<String>,
    /// Stop after this many handshakes (finished or failed)...
    pub handshakes: Option<u64>,
    /// ...or after this long.
    pub duration: Option<Duration>,
    /// Handshakes in flight at once (one TCP connection each).
    pub connections: usize,
    /// Threads driving them.
    pub threads: usize,
    /// The version offered.
    pub version: TlsVersion,
    /// Cipher suites offered (IANA names), most preferred first; empty: aws-lc-rs' defaults for
    /// the version.
    pub suites: Vec<String>,
    /// Key exchange groups offered, most preferred first (`x25519`, `secp256r1`, `secp384r1`,
    /// `x25519mlkem768`); a key share is sent for the first. The default, X25519 then P-256,
    /// also names the curve of a P-256 certificate, which OpenSSL requires of a TLS 1.2 client
    /// before it signs with an ECDSA key.
    pub groups: Vec<String>,
    /// Offer the sessions the server gave earlier connections.
    pub resume: bool,
    /// Verify the server's chain and name against this CA certificate (DER); none: no
    /// verification (load-tool practice).
    pub ca: Option<Vec<u8>>,
    /// After the handshake, `GET` this path (HTTP/1.1, `Connection: close`) and read the
    /// response, instead of closing right away.
    pub request: Option<String>,
    /// Deadline of one connection (handshake and close).
    pub timeout: Duration,
    /// A line every second on stderr.
    pub progress: bool,
    /// Cores the threads are pinned to, round robin (none: not pinned).
    pub cpus: Vec<usize>,
    /// A new client key share for every connection. Off by default: each thread makes one
    /// share per group at the start and offers it on all its connections, which saves the
    /// client a key generation per handshake and changes nothing of the server's work (it
    /// makes its own ephemeral key and agrees with ours every time). Use it to measure a
    /// client's own cost.
    pub fresh_key_shares: bool,
}

impl TlsLoadOptions {
    /// TLS 1.3 with X25519 (P-256 offered too) against `target`: 1 connection, 1 thread, no
    /// verification, 10 s per connection.
    pub fn new(target: SocketAddr) -> TlsLoadOptions {
        TlsLoadOptions {
            target,
            server_name: None,
            handshakes: None,
            duration: None,
            connections: 1,
            threads: 1,
            version: TlsVersion::Tls13,
            suites: Vec::new(),
            groups: vec!["x25519".into(), "secp256r1".into()],
            resume: false,
            ca: None,
            request: None,
            timeout: Duration::from_secs(10),
            progress: true,
            cpus: Vec::new(),
            fresh_key_shares: false,
        }
    }
}

/// Everything a TLS load run measured.
#[derive(Debug, Clone, Serialize)]
pub struct TlsLoadReport {
    /// `secrelay lab handshake --tls`.
    pub tool: String,
    /// The server.
    pub target: String,
    /// Handshakes in flight at once.
    pub connections: usize,
    /// Threads.
    pub threads: usize,
    /// The version offered.
    pub version: TlsVersion,
    /// Suites offered.
    pub suites_offered: Vec<String>,
    /// Groups offered.
    pub groups_offered: Vec<String>,
    /// Whether sessions were offered for resumption.
    pub resume: bool,
    /// How the server's certificate was checked.
    pub verification: String,
    /// The server certificate's key (`ecdsa-p256`, `rsa-2048`, …), from the first handshake.
    pub server_certificate: String,
    /// Certificates in the chain the server sent.
    pub server_chain_len: usize,
    /// Handshakes asked for, if a count was given.
    pub requested_handshakes: Option<u64>,
    /// Duration asked for, if one was given (s).
    pub requested_duration_s: Option<f64>,
    /// Wall time of the run (s).
    pub elapsed_s: f64,
    /// Handshakes that finished.
    pub completed: u64,
    /// Of those, full handshakes.
    pub full: u64,
    /// Of those, resumptions.
    pub resumed: u64,
    /// Handshakes that failed.
    pub failed: u64,
    /// Failures by reason.
    pub failures: BTreeMap<String, u64>,
    /// Connections whose handshake finished but whose close did not within the deadline.
    pub close_timeouts: u64,
    /// HTTP responses read (with `request`), by status code.
    pub responses: BTreeMap<String, u64>,
    /// What the finished handshakes negotiated: `version suite group`, counted.
    pub negotiated: BTreeMap<String, u64>,
    /// Finished handshakes per second (full and resumed together).
    pub handshakes_per_s: RateStats,
    /// Latency of every finished handshake.
    pub latency_ms: LatencyStats,
    /// Latency of full handshakes, if any.
    pub latency_full_ms: Option<LatencyStats>,
    /// Latency of resumptions, if any.
    pub latency_resumed_ms: Option<LatencyStats>,
    /// Mean bytes the client sent per finished handshake, up to its end of the handshake.
    pub bytes_client_to_server: f64,
    /// Mean bytes the server sent per finished handshake, up to the client's end of the
    /// handshake.
    pub bytes_server_to_client: f64,
    /// The load tool's own CPU time (user + system, all its threads), seconds.
    pub client_cpu_s: f64,
    /// Every finished handshake's latency, ms (for merging runs; not written out).
    #[serde(skip)]
    pub latencies_ms: Vec<f64>,
    /// Of those, the resumptions' (for merging runs; not written out).
    #[serde(skip)]
    pub resumed_latencies_ms: Vec<f64>,
    /// How it was measured.
    pub method: LoadMethod,
}

impl TlsLoadReport {
    /// The summary as tables for a terminal.
    pub fn tables(&self) -> Vec<Table> {
        let mut rate = rate_table(
            "tls_handshake_rate",
            format!(
                "TLS {} handshakes against {} ({} connections in flight, {} threads{})",
                self.version.name(),
                self.target,
                self.connections,
                self.threads,
                if self.resume { ", resuming" } else { "" }
            ),
        );
        rate.push(rate_row(
            Cell::text(format!("{} full + {} resumed", self.full, self.resumed)),
            &self.handshakes_per_s,
            &self.latency_ms,
            self.completed,
            self.failed,
        ));
        let mut neg = Table::new("tls_negotiated", "What the handshakes negotiated")
            .col("what", "version suite group")
            .col("count", "handshakes");
        for (k, v) in &self.negotiated {
            neg.push([
                ("what", Cell::text(k.clone())),
                ("count", Cell::num(*v as f64)),
            ]);
        }
        let mut fail = Table::new("tls_failures", "Failures by reason")
            .col("reason", "reason")
            .col("count", "count");
        for (k, v) in &self.failures {
            fail.push([
                ("reason", Cell::text(k.clone())),
                ("count", Cell::num(*v as f64)),
            ]);
        }
        vec![rate, neg, fail]
    }

    /// Tables, then the server certificate, bytes and the client's CPU in a few lines.
    pub fn render_text(&self) -> String {
        let mut out = String::new();
        for t in self.tables() {
            if t.rows.is_empty() {
                continue;
            }
            out.push_str(&t.render_text());
            out.push('\n');
        }
        out.push_str(&format!(
            "server certificate: {} (chain of {}); {}\n",
            self.server_certificate, self.server_chain_len, self.verification
        ));
        out.push_str(&format!(
            "bytes per handshake: client→server {:.0}, server→client {:.0}; load tool CPU {:.2} s ({:.1} µs per handshake)\n",
            self.bytes_client_to_server,
            self.bytes_server_to_client,
            self.client_cpu_s,
            self.client_cpu_s * 1e6 / self.completed.max(1) as f64
        ));
        if self.close_timeouts > 0 {
            out.push_str(&format!(
                "{} connections finished their handshake but the server did not close them within the deadline\n",
                self.close_timeouts
            ));
        }
        out
    }
}

/// The certificate verifier of load mode: accepts any certificate and signature (as
/// tls-perf's client does), so the client spends no verification per handshake.
#[derive(Debug)]
struct NoVerification(Vec<SignatureScheme>);

impl ServerCertVerifier for NoVerification {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }
    fn verify_tls13_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.clone()
    }
}

/// A key exchange group by name (`x25519`, `secp256r1`/`p-256`, `secp384r1`/`p-384`,
/// `x25519mlkem768`).
pub fn kx_group(name: &str) -> anyhow::Result<&'static dyn rustls::crypto::SupportedKxGroup> {
    use rustls::crypto::aws_lc_rs::kx_group as g;
    Ok(match name.trim().to_ascii_lowercase().as_str() {
        "x25519" => g::X25519,
        "secp256r1" | "p-256" | "prime256v1" => g::SECP256R1,
        "secp384r1" | "p-384" => g::SECP384R1,
        "x25519mlkem768" => g::X25519MLKEM768,
        _ => bail!("--groups: {name:?}: x25519, secp256r1, secp384r1 or x25519mlkem768"),
    })
}

/// The suites a browser offers, in its order (Chromium's and Firefox's: AES-128-GCM first),
/// which the load tool offers by default, so that every server negotiates what it would with
/// a browser (servers that honour the client's order pick the first).
pub const BROWSER_SUITE_ORDER: [&str; 9] = [
    "TLS13_AES_128_GCM_SHA256",
    "TLS13_AES_256_GCM_SHA384",
    "TLS13_CHACHA20_POLY1305_SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
];

/// A client key share made once and offered on every connection of a thread (see
/// [`TlsLoadOptions::fresh_key_shares`]): the server's work is unchanged (it makes its own
/// ephemeral key and agrees with ours); the client saves its key generation.
#[derive(Debug)]
struct ReusedShare {
    group: rustls::NamedGroup,
    alg: &'static aws_lc_rs::agreement::Algorithm,
    private: Arc<aws_lc_rs::agreement::PrivateKey>,
    public: Vec<u8>,
}

impl ReusedShare {
    fn new(name: &str) -> anyhow::Result<Option<ReusedShare>> {
        use aws_lc_rs::agreement::{PrivateKey, ECDH_P256, ECDH_P384, X25519};
        let (group, alg) = match kx_group(name)?.name() {
            rustls::NamedGroup::X25519 => (rustls::NamedGroup::X25519, &X25519),
            rustls::NamedGroup::secp256r1 => (rustls::NamedGroup::secp256r1, &ECDH_P256),
            rustls::NamedGroup::secp384r1 => (rustls::NamedGroup::secp384r1, &ECDH_P384),
            // Hybrid groups keep their own (fresh) shares.
            _ => return Ok(None),
        };
        let private = PrivateKey::generate(alg).map_err(|_| anyhow::anyhow!("key generation"))?;
        let public = private
            .compute_public_key()
            .map_err(|_| anyhow::anyhow!("public key"))?
            .as_ref()
            .to_vec();
        Ok(Some(ReusedShare {
            group,
            alg,
            private: Arc::new(private),
            public,
        }))
    }
}

impl rustls::crypto::SupportedKxGroup for ReusedShare {
    fn start(&self) -> Result<Box<dyn rustls::crypto::ActiveKeyExchange>, rustls::Error> {
        Ok(Box::new(ReusedActive {
            group: self.group,
            alg: self.alg,
            private: self.private.clone(),
            public: self.public.clone(),
        }))
    }
    fn name(&self) -> rustls::NamedGroup {
        self.group
    }
}

struct ReusedActive {
    group: rustls::NamedGroup,
    alg: &'static aws_lc_rs::agreement::Algorithm,
    private: Arc<aws_lc_rs::agreement::PrivateKey>,
    public: Vec<u8>,
}

impl rustls::crypto::ActiveKeyExchange for ReusedActive {
    fn complete(
        self: Box<Self>,
        peer_pub_key: &[u8],
    ) -> Result<rustls::crypto::SharedSecret, rustls::Error> {
        let peer = aws_lc_rs::agreement::UnparsedPublicKey::new(self.alg, peer_pub_key);
        aws_lc_rs::agreement::agree(
            &self.private,
            peer,
            rustls::Error::PeerMisbehaved(rustls::PeerMisbehaved::InvalidKeyShare),
            |secret| Ok(rustls::crypto::SharedSecret::from(secret)),
        )
    }
    fn pub_key(&self) -> &[u8] {
        &self.public
    }
    fn group(&self) -> rustls::NamedGroup {
        self.group
    }
}

/// The client's crypto provider: aws-lc-rs with the suites of `version` (those named, in
/// that order; by default those of [`BROWSER_SUITE_ORDER`]) and the named groups.
pub fn client_provider(
    version: TlsVersion,
    suites: &[String],
    groups: &[String],
) -> anyhow::Result<CryptoProvider> {
    let mut p = rustls::crypto::aws_lc_rs::default_provider();
    let all: Vec<rustls::SupportedCipherSuite> = rustls::crypto::aws_lc_rs::ALL_CIPHER_SUITES
        .iter()
        .copied()
        .filter(|s| s.version() == version.rustls())
        .collect();
    p.cipher_suites = if suites.is_empty() {
        BROWSER_SUITE_ORDER
            .iter()
            .filter_map(|n| all.iter().copied().find(|s| s.suite().as_str() == Some(*n)))
            .collect()
    } else {
        suites
            .iter()
            .map(|n| {
                all.iter()
                    .copied()
                    .find(|s| {
                        s.suite()
                            .as_str()
                            .is_some_and(|x| x.eq_ignore_ascii_case(n.trim()))
                    })
                    .with_context(|| {
                        format!(
                            "--suites: {n:?} is not a TLS {} suite of aws-lc-rs (valid: {})",
                            version.name(),
                            all.iter()
                                .filter_map(|s| s.suite().as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        )
                    })
            })
            .collect::<anyhow::Result<_>>()?
    };
    if !groups.is_empty() {
        p.kx_groups = groups
            .iter()
            .map(|g| kx_group(g))
            .collect::<anyhow::Result<_>>()?;
    }
    // The key schedule's HMAC as secrelay's server runs it (keys prepared once): a cheaper
    // client, the same bytes on the wire.
    p.cipher_suites = secrelay_gateway::server::tls::with_fast_key_schedule(p.cipher_suites);
    Ok(p)
}

/// The sessions a load thread keeps: every TLS 1.3 ticket the server gives, up to `cap`
/// (rustls' own memory cache keeps 8 per server, fewer than a thread with dozens of
/// connections in flight takes at once, which would turn resumptions into full handshakes
/// for want of a ticket), the last TLS 1.2 session, the last key exchange group. One target
/// per run, so the server name is not looked at.
#[derive(Debug)]
struct LoadSessions {
    cap: usize,
    tls13: std::sync::Mutex<std::collections::VecDeque<rustls::client::Tls13ClientSessionValue>>,
    tls12: std::sync::Mutex<Option<rustls::client::Tls12ClientSessionValue>>,
    kx: std::sync::Mutex<Option<rustls::NamedGroup>>,
}

fn locked<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl rustls::client::ClientSessionStore for LoadSessions {
    fn set_kx_hint(&self, _: ServerName<'static>, group: rustls::NamedGroup) {
        *locked(&self.kx) = Some(group);
    }
    fn kx_hint(&self, _: &ServerName<'_>) -> Option<rustls::NamedGroup> {
        *locked(&self.kx)
    }
    fn set_tls12_session(
        &self,
        _: ServerName<'static>,
        v: rustls::client::Tls12ClientSessionValue,
    ) {
        *locked(&self.tls12) = Some(v);
    }
    fn tls12_session(&self, _: &ServerName<'_>) -> Option<rustls::client::Tls12ClientSessionValue> {
        locked(&self.tls12).clone()
    }
    fn remove_tls12_session(&self, _: &ServerName<'static>) {
        *locked(&self.tls12) = None;
    }
    fn insert_tls13_ticket(
        &self,
        _: ServerName<'static>,
        v: rustls::client::Tls13ClientSessionValue,
    ) {
        let mut q = locked(&self.tls13);
        if q.len() >= self.cap {
            q.pop_front();
        }
        q.push_back(v);
    }
    fn take_tls13_ticket(
        &self,
        _: &ServerName<'static>,
    ) -> Option<rustls::client::Tls13ClientSessionValue> {
        locked(&self.tls13).pop_back()
    }
}

/// The client configuration of a run (one per thread: each keeps its own sessions, and its
/// key shares unless they are fresh per connection).
fn client_config(opts: &TlsLoadOptions) -> anyhow::Result<ClientConfig> {
    let mut provider = client_provider(opts.version, &opts.suites, &opts.groups)?;
    if !opts.fresh_key_shares {
        let mut groups: Vec<&'static dyn rustls::crypto::SupportedKxGroup> = Vec::new();
        for (name, g) in opts.groups.iter().zip(provider.kx_groups.iter()) {
            match ReusedShare::new(name)? {
                // Leaked once per thread and run: a handful of small keys for the process.
                Some(r) => groups.push(Box::leak(Box::new(r))),
                None => groups.push(*g),
            }
        }
        if !groups.is_empty() {
            provider.kx_groups = groups;
        }
    }
    let provider = Arc::new(provider);
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[opts.version.rustls()])
        .context("the offered version and suites")?;
    let mut c = match &opts.ca {
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            roots
                .add(CertificateDer::from(ca.clone()))
                .context("--ca: not a usable CA certificate")?;
            builder.with_root_certificates(roots).with_no_client_auth()
        }
        None => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerification(
                provider
                    .signature_verification_algorithms
                    .supported_schemes(),
            )))
            .with_no_client_auth(),
    };
    c.resumption = if opts.resume {
        Resumption::store(Arc::new(LoadSessions {
            cap: opts.connections.max(8) * 4,
            tls13: Default::default(),
            tls12: Default::default(),
            kx: Default::default(),
        }))
    } else {
        Resumption::disabled()
    };
    if opts.request.is_some() {
        c.alpn_protocols = vec![b"http/1.1".to_vec()];
    }
    Ok(c)
}

/// A certificate's key as the lab names it (`ecdsa-p256`, `rsa-2048`, `ed25519`, …).
pub fn certificate_key_name(der: &[u8]) -> String {
    use x509_parser::prelude::{FromDer, X509Certificate};
    use x509_parser::public_key::PublicKey;
    let Ok((_, cert)) = X509Certificate::from_der(der) else {
        return "unparsable certificate".into();
    };
    match cert.public_key().parsed() {
        Ok(PublicKey::EC(ec)) => format!("ecdsa-p{}", ec.key_size()),
        Ok(PublicKey::RSA(rsa)) => format!("rsa-{}", rsa.key_size()),
        Ok(_) if cert.public_key().algorithm.algorithm.to_id_string() == "1.3.101.112" => {
            "ed25519".into()
        }
        Ok(_) | Err(_) => cert.public_key().algorithm.algorithm.to_id_string(),
    }
}

struct Shared {
    opts: TlsLoadOptions,
    name: ServerName<'static>,
    started: AtomicU64,
    completed: AtomicU64,
    resumed: AtomicU64,
    failed: AtomicU64,
    stop: Arc<AtomicBool>,
    threads_done: AtomicUsize,
}

impl Shared {
    fn claim(&self) -> bool {
        if self.stop.load(Ordering::Relaxed) {
            return false;
        }
        match self.opts.handshakes {
            Some(n) => self.started.fetch_add(1, Ordering::Relaxed) < n,
            None => {
                self.started.fetch_add(1, Ordering::Relaxed);
                true
            }
        }
    }
}

#[derive(Default)]
struct ThreadResult {
    full_ms: Vec<f64>,
    resumed_ms: Vec<f64>,
    failures: BTreeMap<String, u64>,
    negotiated: BTreeMap<String, u64>,
    responses: BTreeMap<String, u64>,
    close_timeouts: u64,
    bytes_out: u64,
    bytes_in: u64,
    server_cert: Option<(String, usize)>,
}

impl ThreadResult {
    fn fail(&mut self, shared: &Shared, reason: impl Into<String>) {
        *self.failures.entry(reason.into()).or_default() += 1;
        shared.failed.fetch_add(1, Ordering::Relaxed);
    }
}

/// A TLS error as a failure reason (short, stable names first, then the error).
fn reason(e: &rustls::Error) -> String {
    match e {
        rustls::Error::AlertReceived(a) => format!("alert from the server: {a:?}"),
        rustls::Error::InvalidCertificate(c) => format!("certificate refused: {c:?}"),
        rustls::Error::PeerIncompatible(p) => format!("incompatible: {p:?}"),
        other => format!("tls: {other}"),
    }
}

enum Phase {
    Connecting,
    Handshaking,
    /// The handshake is done; waiting for the server to close (after our close_notify or our
    /// request).
    Closing,
}

struct Conn {
    sock: TcpStream,
    tls: ClientConnection,
    started: Instant,
    deadline: Instant,
    phase: Phase,
    bytes_out: u64,
    bytes_in: u64,
    response: Vec<u8>,
}

/// What became of a connection after an event.
enum Next {
    Keep,
    Done,
}

fn new_conn(
    shared: &Shared,
    config: &Arc<ClientConfig>,
    poll: &Poll,
    token: Token,
) -> anyhow::Result<Conn> {
    let mut sock = TcpStream::connect(shared.opts.target).context("connect")?;
    let _ = sock.set_nodelay(true);
    poll.registry()
        .register(&mut sock, token, Interest::READABLE | Interest::WRITABLE)?;
    let tls = ClientConnection::new(config.clone(), shared.name.clone())
        .map_err(|e| anyhow::anyhow!("client: {e}"))?;
    let now = Instant::now();
    Ok(Conn {
        sock,
        tls,
        started: now,
        deadline: now + shared.opts.timeout,
        phase: Phase::Connecting,
        bytes_out: 0,
        bytes_in: 0,
        response: Vec::new(),
    })
}

/// Writes what rustls has queued, as far as the socket takes it.
fn flush(c: &mut Conn) -> std::io::Result<()> {
    while c.tls.wants_write() {
        match c.tls.write_tls(&mut c.sock) {
            Ok(n) => {
                if matches!(c.phase, Phase::Connecting | Phase::Handshaking) {
                    c.bytes_out += n as u64;
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Drives one connection after a readiness event.
fn drive(c: &mut Conn, shared: &Shared, res: &mut ThreadResult) -> Next {
    if let Phase::Connecting = c.phase {
        match c.sock.take_error() {
            Ok(Some(e)) | Err(e) => {
                res.fail(shared, format!("connect: {e}"));
                return Next::Done;
            }
            Ok(None) => {}
        }
        match c.sock.peer_addr() {
            Ok(_) => c.phase = Phase::Handshaking,
            Err(e) if e.kind() == ErrorKind::NotConnected => return Next::Keep,
            Err(e) => {
                res.fail(shared, format!("connect: {e}"));
                return Next::Done;
            }
        }
    }
    loop {
        if let Err(e) = flush(c) {
            return lost(c, shared, res, &e);
        }
        // Read what there is (rustls buffers a bounded amount: one read, processed, then the
        // next turn of this loop reads again until the socket has nothing left).
        let mut eof = false;
        let mut read_any = false;
        match c.tls.read_tls(&mut c.sock) {
            Ok(0) => eof = true,
            Ok(n) => {
                read_any = true;
                if matches!(c.phase, Phase::Handshaking) {
                    c.bytes_in += n as u64;
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(e) => return lost(c, shared, res, &e),
        }
        if read_any || eof {
            match c.tls.process_new_packets() {
                Ok(_) => {}
                Err(e) => {
                    let _ = flush(c);
                    if matches!(c.phase, Phase::Closing) {
                        // The handshake was counted; what follows is the server's business.
                        return Next::Done;
                    }
                    res.fail(shared, reason(&e));
                    return Next::Done;
                }
            }
        }
        if matches!(c.phase, Phase::Handshaking) && !c.tls.is_handshaking() {
            finished(c, shared, res);
            if let Some(path) = &shared.opts.request {
                let _ = write!(
                    c.tls.writer(),
                    "GET {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
                    shared.opts.target
                );
            } else {
                c.tls.send_close_notify();
            }
            c.phase = Phase::Closing;
            continue;
        }
        if matches!(c.phase, Phase::Closing) {
            let mut buf = [0u8; 4096];
            loop {
                match c.tls.reader().read(&mut buf) {
                    Ok(0) => {
                        eof = true;
                        break;
                    }
                    Ok(n) => {
                        if c.response.len() < 64 {
                            c.response.extend_from_slice(&buf[..n.min(64)]);
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    // The server closed without close_notify: the close we waited for.
                    Err(e) if e.kind() == ErrorKind::UnexpectedEof => {
                        eof = true;
                        break;
                    }
                    Err(_) => {
                        eof = true;
                        break;
                    }
                }
            }
        }
        if eof {
            return match c.phase {
                Phase::Closing => {
                    if shared.opts.request.is_some() {
                        let status = std::str::from_utf8(&c.response)
                            .ok()
                            .and_then(|t| t.split_whitespace().nth(1))
                            .unwrap_or("none")
                            .to_string();
                        *res.responses.entry(status).or_default() += 1;
                    }
                    Next::Done
                }
                _ => {
                    res.fail(shared, "closed by the server during the handshake");
                    Next::Done
                }
            };
        }
        if !read_any && !c.tls.wants_write() {
            return Next::Keep;
        }
    }
}

fn lost(c: &Conn, shared: &Shared, res: &mut ThreadResult, e: &std::io::Error) -> Next {
    match c.phase {
        Phase::Closing => {}
        _ => res.fail(shared, format!("socket: {}", e.kind())),
    }
    Next::Done
}

fn finished(c: &Conn, shared: &Shared, res: &mut ThreadResult) {
    let ms = c.started.elapsed().as_secs_f64() * 1e3;
    let resumed = matches!(c.tls.handshake_kind(), Some(HandshakeKind::Resumed));
    if resumed {
        res.resumed_ms.push(ms);
        shared.resumed.fetch_add(1, Ordering::Relaxed);
    } else {
        res.full_ms.push(ms);
    }
    shared.completed.fetch_add(1, Ordering::Relaxed);
    res.bytes_out += c.bytes_out;
    res.bytes_in += c.bytes_in;
    let key = format!(
        "TLS {} {} {}{}",
        match c.tls.protocol_version() {
            Some(rustls::ProtocolVersion::TLSv1_3) => "1.3",
            Some(rustls::ProtocolVersion::TLSv1_2) => "1.2",
            _ => "?",
        },
        c.tls
            .negotiated_cipher_suite()
            .and_then(|s| s.suite().as_str())
            .unwrap_or("?"),
        c.tls
            .negotiated_key_exchange_group()
            .and_then(|g| g.name().as_str())
            .unwrap_or("no key exchange"),
        if resumed { " (resumed)" } else { "" }
    );
    *res.negotiated.entry(key).or_default() += 1;
    if res.server_cert.is_none() {
        if let Some(chain) = c.tls.peer_certificates() {
            if let Some(leaf) = chain.first() {
                res.server_cert = Some((certificate_key_name(leaf), chain.len()));
            }
        }
    }
}

fn pin(cpus: &[usize], thread: usize) {
    if cpus.is_empty() {
        return;
    }
    let mut set = nix::sched::CpuSet::new();
    if set.set(cpus[thread % cpus.len()]).is_ok() {
        let _ = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set);
    }
}

fn worker(shared: &Shared, slots: usize, index: usize) -> anyhow::Result<(ThreadResult, f64)> {
    pin(&shared.opts.cpus, index);
    let config = Arc::new(client_config(&shared.opts)?);
    let mut res = ThreadResult::default();
    let mut poll = Poll::new()?;
    let mut events = Events::with_capacity(slots.max(16) * 2);
    let mut conns: Vec<Option<Conn>> = (0..slots).map(|_| None).collect();
    let mut out_of_tickets = false;
    loop {
        if !out_of_tickets {
            for (i, slot) in conns.iter_mut().enumerate() {
                if slot.is_some() {
                    continue;
                }
                if !shared.claim() {
                    out_of_tickets = true;
                    break;
                }
                match new_conn(shared, &config, &poll, Token(i)) {
                    Ok(c) => *slot = Some(c),
                    Err(e) => {
                        res.fail(shared, format!("local socket: {e:#}"));
                        std::thread::sleep(Duration::from_millis(10));
                    }
                }
            }
        }
        // Once stopped, no new connection starts; those in flight finish (or reach their
        // deadline), so that what the server counted is what was counted here.
        if shared.stop.load(Ordering::Relaxed) {
            out_of_tickets = true;
        }
        if conns.iter().all(Option::is_none) {
            if out_of_tickets {
                break;
            }
            continue;
        }
        let now = Instant::now();
        let next = conns
            .iter()
            .flatten()
            .map(|c| c.deadline)
            .min()
            .unwrap_or(now + Duration::from_millis(50));
        let wait = next
            .saturating_duration_since(now)
            .min(Duration::from_millis(50));
        match poll.poll(&mut events, Some(wait)) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(e).context("waiting for sockets"),
        }
        for ev in events.iter() {
            let i = ev.token().0;
            let Some(c) = conns[i].as_mut() else { continue };
            if let Next::Done = drive(c, shared, &mut res) {
                if let Some(mut c) = conns[i].take() {
                    let _ = poll.registry().deregister(&mut c.sock);
                }
            }
        }
        let now = Instant::now();
        for slot in conns.iter_mut() {
            if slot.as_ref().is_some_and(|c| c.deadline <= now) {
                if let Some(mut c) = slot.take() {
                    match c.phase {
                        Phase::Closing => res.close_timeouts += 1,
                        _ => res.fail(shared, "timeout"),
                    }
                    let _ = poll.registry().deregister(&mut c.sock);
                }
            }
        }
    }
    let cpu = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_THREAD)
        .map(|u| {
            let t = |tv: nix::sys::time::TimeVal| tv.tv_sec() as f64 + tv.tv_usec() as f64 * 1e-6;
            t(u.user_time()) + t(u.system_time())
        })
        .unwrap_or(f64::NAN);
    Ok((res, cpu))
}

/// What the client does about sessions and key shares, for the method.
fn client_practice(opts: &TlsLoadOptions) -> String {
    format!(
        "{}; {}",
        if opts.resume {
            "offering the sessions earlier connections got"
        } else {
            "no resumption offered"
        },
        if opts.fresh_key_shares {
            "a fresh key share per connection"
        } else {
            "one key share per thread and group, reused (the server's key exchange is unchanged)"
        }
    )
}

impl TlsLoadReport {
    /// One report for runs of the same settings against the same server taken in turns
    /// (interleaved with other servers' runs): counts and times summed, the per-second samples
    /// and the latencies pooled, rates and percentiles computed again over them.
    pub fn merge(mut runs: Vec<TlsLoadReport>) -> Option<TlsLoadReport> {
        let mut out = runs.pop()?;
        for r in runs {
            out.elapsed_s += r.elapsed_s;
            out.completed += r.completed;
            out.full += r.full;
            out.resumed += r.resumed;
            out.failed += r.failed;
            out.close_timeouts += r.close_timeouts;
            out.client_cpu_s += r.client_cpu_s;
            for (src, dst) in [
                (r.failures, &mut out.failures),
                (r.negotiated, &mut out.negotiated),
                (r.responses, &mut out.responses),
            ] {
                for (k, v) in src {
                    *dst.entry(k).or_default() += v;
                }
            }
            let (a, b) = (out.completed - r.completed, r.completed);
            let weigh = |x: f64, y: f64| {
                if a + b == 0 {
                    x
                } else {
                    (x * a as f64 + y * b as f64) / (a + b) as f64
                }
            };
            out.bytes_client_to_server =
                weigh(out.bytes_client_to_server, r.bytes_client_to_server);
            out.bytes_server_to_client =
                weigh(out.bytes_server_to_client, r.bytes_server_to_client);
            out.handshakes_per_s
                .samples
                .extend(r.handshakes_per_s.samples);
            out.latencies_ms.extend(r.latencies_ms);
            out.resumed_latencies_ms.extend(r.resumed_latencies_ms);
            if out.server_chain_len == 0 {
                out.server_certificate = r.server_certificate;
                out.server_chain_len = r.server_chain_len;
            }
        }
        let mut sorted = out.handshakes_per_s.samples.clone();
        sorted.sort_by(f64::total_cmp);
        if let (Some(lo), Some(hi)) = (sorted.first(), sorted.last()) {
            out.handshakes_per_s.min = *lo;
            out.handshakes_per_s.max = *hi;
            out.handshakes_per_s.p95 = super::quantile(&sorted, 0.05);
        }
        out.handshakes_per_s.avg = out.completed as f64 / out.elapsed_s.max(1e-9);
        if let Some(l) = LatencyStats::of(out.latencies_ms.clone()) {
            out.latency_ms = l;
        }
        out.latency_resumed_ms = LatencyStats::of(out.resumed_latencies_ms.clone());
        Some(out)
    }
}

/// Refuses flags that do not go together, naming them.
fn check(opts: &TlsLoadOptions) -> anyhow::Result<()> {
    if opts.handshakes.is_none() == opts.duration.is_none() {
        bail!("give either --handshakes N or --duration S");
    }
    if opts.handshakes == Some(0) {
        bail!("--handshakes must be at least 1");
    }
    if opts.connections == 0 || opts.threads == 0 {
        bail!("--connections and --threads must be at least 1");
    }
    Ok(())
}

/// A load thread: its results and CPU seconds when it ends.
type LoadThread = std::thread::JoinHandle<anyhow::Result<(ThreadResult, f64)>>;

/// The load threads, the connections shared out between them.
fn spawn_threads(shared: &Arc<Shared>, threads: usize) -> anyhow::Result<Vec<LoadThread>> {
    let mut handles = Vec::new();
    for t in 0..threads {
        let slots =
            shared.opts.connections / threads + usize::from(t < shared.opts.connections % threads);
        let shared = shared.clone();
        handles.push(
            std::thread::Builder::new()
                .name(format!("tls-load-{t}"))
                .spawn(move || {
                    let r = worker(&shared, slots, t);
                    shared.threads_done.fetch_add(1, Ordering::Release);
                    r
                })?,
        );
    }
    Ok(handles)
}

/// Every load thread's results added up, and their CPU seconds.
fn join_threads(handles: Vec<LoadThread>) -> anyhow::Result<(ThreadResult, f64)> {
    let mut total = ThreadResult::default();
    let mut client_cpu = 0.0;
    for h in handles {
        let (r, cpu) = h
            .join()
            .map_err(|_| anyhow::anyhow!("a load thread panicked"))??;
        client_cpu += cpu;
        total.full_ms.extend(r.full_ms);
        total.resumed_ms.extend(r.resumed_ms);
        total.close_timeouts += r.close_timeouts;
        total.bytes_in += r.bytes_in;
        total.bytes_out += r.bytes_out;
        if total.server_cert.is_none() {
            total.server_cert = r.server_cert;
        }
        for (src, dst) in [
            (r.failures, &mut total.failures),
            (r.negotiated, &mut total.negotiated),
            (r.responses, &mut total.responses),
        ] {
            for (k, v) in src {
                *dst.entry(k).or_default() += v;
            }
        }
    }
    Ok((total, client_cpu))
}

/// How the load is timed, in words.
fn timed_method(opts: &TlsLoadOptions) -> String {
    format!(
        "TLS {} handshakes over TCP against {}, rustls {} on aws-lc-rs as the client ({}): a new connection each, \
         latency from connect() to the client's end of the handshake; then {} and the connection is closed once the server closed its side; \
         handshakes/s sampled every second (the last partial second included when ≥ 0.2 s), average = completed / elapsed; \
         95P = the rate reached or beaten in 95 % of the samples; a connection fails after {:.0} s",
        opts.version.name(),
        opts.target,
        crate::versions().get("rustls").cloned().unwrap_or_default(),
        client_practice(opts),
        match &opts.request {
            Some(p) => format!("one GET {p}"),
            None => "close_notify".into(),
        },
        opts.timeout.as_secs_f64()
    )
}

/// Runs a TLS load test; prints a progress line each second (if asked) and returns the
/// report. `stop` ends it early (SIGINT and SIGTERM set it when `handle_signals`).
pub fn run(
    opts: TlsLoadOptions,
    stop: Arc<AtomicBool>,
    handle_signals: bool,
) -> anyhow::Result<TlsLoadReport> {
    check(&opts)?;
    // Checked here, so that a bad flag is an error before any thread starts.
    client_config(&opts)?;
    if handle_signals {
        for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            signal_hook::flag::register(sig, stop.clone())
                .context("installing the SIGINT/SIGTERM handler")?;
        }
    }
    let name = match &opts.server_name {
        Some(n) => ServerName::try_from(n.clone())
            .map_err(|_| anyhow::anyhow!("--server-name {n:?}: not a DNS name or IP address"))?,
        None => ServerName::IpAddress(opts.target.ip().into()),
    };
    let threads = opts.threads.min(opts.connections);
    let shared = Arc::new(Shared {
        opts: opts.clone(),
        name,
        started: AtomicU64::new(0),
        completed: AtomicU64::new(0),
        resumed: AtomicU64::new(0),
        failed: AtomicU64::new(0),
        stop,
        threads_done: AtomicUsize::new(0),
    });
    let start = Instant::now();
    let handles = spawn_threads(&shared, threads)?;
    let (rates, elapsed) = sample_rates(
        start,
        opts.duration,
        (threads, &shared.threads_done),
        &shared.completed,
        &shared.stop,
        |at, rate, done| {
            if opts.progress {
                eprintln!(
                    "[{at:6.1} s] {rate:8.0} handshakes/s  completed {done} (resumed {})  failed {}",
                    shared.resumed.load(Ordering::Relaxed),
                    shared.failed.load(Ordering::Relaxed)
                );
            }
        },
    );
    let (total, client_cpu) = join_threads(handles)?;
    let completed = shared.completed.load(Ordering::Relaxed);
    let all: Vec<f64> = total
        .full_ms
        .iter()
        .chain(&total.resumed_ms)
        .copied()
        .collect();
    let all_kept = all.clone();
    let resumed_kept = total.resumed_ms.clone();
    let failed = total.failures.values().sum();
    let full = total.full_ms.len() as u64;
    let resumed = total.resumed_ms.len() as u64;
    let (server_certificate, server_chain_len) = total
        .server_cert
        .clone()
        .unwrap_or_else(|| ("unknown (no handshake finished)".into(), 0));
    let suites_offered = client_provider(opts.version, &opts.suites, &opts.groups)?
        .cipher_suites
        .iter()
        .filter_map(|s| s.suite().as_str().map(str::to_owned))
        .collect();
    Ok(TlsLoadReport {
        tool: "secrelay lab handshake --tls".into(),
        target: opts.target.to_string(),
        connections: opts.connections,
        threads,
        version: opts.version,
        suites_offered,
        groups_offered: opts.groups.clone(),
        resume: opts.resume,
        verification: match &opts.ca {
            Some(_) => "server chain and name verified against --ca".into(),
            None => "server certificate not verified (load mode, as tls-perf)".into(),
        },
        server_certificate,
        server_chain_len,
        requested_handshakes: opts.handshakes,
        requested_duration_s: opts.duration.map(|d| d.as_secs_f64()),
        elapsed_s: elapsed.as_secs_f64(),
        completed,
        full,
        resumed,
        failed,
        failures: total.failures,
        close_timeouts: total.close_timeouts,
        responses: total.responses,
        negotiated: total.negotiated,
        handshakes_per_s: rates,
        latency_ms: LatencyStats::of(all).unwrap_or(LatencyStats::NONE),
        latency_full_ms: LatencyStats::of(total.full_ms),
        latency_resumed_ms: LatencyStats::of(total.resumed_ms),
        bytes_client_to_server: total.bytes_out as f64 / completed.max(1) as f64,
        bytes_server_to_client: total.bytes_in as f64 / completed.max(1) as f64,
        client_cpu_s: client_cpu,
        latencies_ms: all_kept,
        resumed_latencies_ms: resumed_kept,
        method: LoadMethod {
            timed: timed_method(&opts),
            machine: crate::machine::Machine::detect(),
            versions: crate::versions(),
            date: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        },
    })
}
