//! HTTPS for the signaling: the rustls (aws-lc-rs) server configuration, where its certificate
//! comes from, its reload without a restart, and what a handshake's failure is called.
//!
//! * Versions: TLS 1.3 and 1.2 (`tls_versions`); the provider's cipher suites (AES-GCM and
//!   ChaCha20-Poly1305 only, ECDHE only; their key schedule's HMAC on RustCrypto with keys
//!   prepared once, see `tls_hmac`) and key exchange groups (`tls_groups`).
//! * Certificate: ECDSA P-256 unless told otherwise; from PEM files (`tls_cert`, `tls_key`),
//!   or issued at start by a `secrelay ca` directory (`tls_ca_dir`), or by a throw-away private
//!   CA made at start (its certificate written to a temporary `ca.pem` for clients to trust,
//!   its key never leaving memory).
//! * Resumption: stateless TLS 1.3 tickets (`tls_tickets` per handshake, under aws-lc-rs'
//!   rotating ticket key) and TLS 1.2 tickets or session ids (`tls_session_cache`); 0-RTT off.
//! * ALPN: `h2` (when `http2`) and `http/1.1`.
//! * Reload: [`Tls::reload`] builds the certificate again from its source (the files read
//!   again, or a fresh certificate issued) and swaps it in for the handshakes that follow; a
//!   reload that fails keeps the certificate in use. `secrelay serve` reloads on SIGHUP.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert, ServerSessionMemoryCache};
use rustls::sign::CertifiedKey;
use rustls::{ProtocolVersion, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use secrelay_dtls::ca::{issue_certificate_for, CaDir, Role};
use secrelay_dtls::{Certificate, KeyType};

use super::config::{ConfigError, ServeConfig};

/// Why a TLS handshake on the HTTPS port did not finish, as `/metrics` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TlsFailure {
    /// The first bytes are not a TLS record (plain HTTP to the HTTPS port, garbage).
    NotTls,
    /// A TLS record or handshake message that does not parse (garbage, truncated contents).
    Malformed,
    /// Nothing in common: versions, cipher suites, groups or signature schemes.
    Incompatible,
    /// The client sent an alert (it refused our certificate, say).
    AlertReceived,
    /// Messages out of order or contradicting the protocol.
    ProtocolViolation,
    /// The client closed or reset the connection before finishing (a truncated handshake).
    ClosedEarly,
    /// The handshake did not finish within `tls_handshake_timeout_secs` (a slow client).
    Timeout,
    /// Refused at accept: `tls_max_handshakes` handshakes or `max_connections` were open.
    Busy,
    /// Anything else (an I/O error of our own).
    Other,
}

impl TlsFailure {
    /// Every reason, in the order `/metrics` lists them.
    pub const ALL: [TlsFailure; 9] = [
        TlsFailure::NotTls,
        TlsFailure::Malformed,
        TlsFailure::Incompatible,
        TlsFailure::AlertReceived,
        TlsFailure::ProtocolViolation,
        TlsFailure::ClosedEarly,
        TlsFailure::Timeout,
        TlsFailure::Busy,
        TlsFailure::Other,
    ];

    /// The label value (`not_tls`, `malformed`, …).
    pub fn name(self) -> &'static str {
        match self {
            TlsFailure::NotTls => "not_tls",
            TlsFailure::Malformed => "malformed",
            TlsFailure::Incompatible => "incompatible",
            TlsFailure::AlertReceived => "alert_received",
            TlsFailure::ProtocolViolation => "protocol_violation",
            TlsFailure::ClosedEarly => "closed_early",
            TlsFailure::Timeout => "timeout",
            TlsFailure::Busy => "busy",
            TlsFailure::Other => "other",
        }
    }

    /// Its index in [`TlsFailure::ALL`].
    pub fn index(self) -> usize {
        TlsFailure::ALL
            .iter()
            .position(|r| *r == self)
            .expect("every reason is in ALL")
    }

    /// The reason for an error from the handshake (tokio-rustls wraps rustls' error in an
    /// `io::Error` of kind `InvalidData`).
    pub fn of_io(e: &std::io::Error) -> TlsFailure {
        use std::io::ErrorKind as K;
        if let Some(tls) = e
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        {
            return TlsFailure::of_rustls(tls);
        }
        match e.kind() {
            K::UnexpectedEof | K::ConnectionReset | K::ConnectionAborted | K::BrokenPipe => {
                TlsFailure::ClosedEarly
            }
            _ => TlsFailure::Other,
        }
    }

    /// The reason for a rustls error.
    pub fn of_rustls(e: &rustls::Error) -> TlsFailure {
        use rustls::{Error as E, InvalidMessage as M};
        match e {
            E::InvalidMessage(M::InvalidContentType | M::UnknownProtocolVersion) => {
                TlsFailure::NotTls
            }
            E::InvalidMessage(_) | E::DecryptError => TlsFailure::Malformed,
            E::PeerIncompatible(_) => TlsFailure::Incompatible,
            E::AlertReceived(_) => TlsFailure::AlertReceived,
            E::InappropriateMessage { .. }
            | E::InappropriateHandshakeMessage { .. }
            | E::PeerMisbehaved(_) => TlsFailure::ProtocolViolation,
            _ => TlsFailure::Other,
        }
    }
}

/// Where the HTTPS certificate comes from.
enum Source {
    /// PEM files, read again on every reload.
    Files { cert: PathBuf, key: PathBuf },
    /// Issued by a private CA (a `secrelay ca` directory's, or a throw-away one's).
    Issued {
        ca: Box<Certificate>,
        names: Vec<String>,
        key_type: KeyType,
    },
}

/// What the HTTPS server presents, for a start-up line.
#[derive(Debug, Clone)]
pub struct TlsCertificateInfo {
    /// Where it came from (`files …`, `issued by the private CA in …`, `a throw-away
    /// private CA`).
    pub source: String,
    /// The key algorithm (`ecdsa-p256`, `rsa-2048`, … as far as known).
    pub key: String,
    /// SHA-256 fingerprint of the leaf (`sha-256 AB:CD:…`).
    pub fingerprint: String,
    /// The certificate a client should trust, when it is the throw-away CA's (written at start,
    /// removed at exit).
    pub trust_anchor: Option<PathBuf>,
    /// The names and addresses an issued certificate is valid for (empty for PEM files).
    pub names: Vec<String>,
}

impl std::fmt::Display for TlsCertificateInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} certificate from {}", self.key, self.source)?;
        if !self.names.is_empty() {
            write!(f, " for {}", self.names.join(", "))?;
        }
        if let Some(p) = &self.trust_anchor {
            write!(f, "; clients trust {}", p.display())?;
        }
        Ok(())
    }
}

/// The certificate every handshake gets: the one in use until a reload swaps it.
#[derive(Debug)]
struct Resolver {
    current: RwLock<Arc<CertifiedKey>>,
}

impl ResolvesServerCert for Resolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(
            self.current
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        )
    }
}

/// The HTTPS side's TLS state: the server configuration and the reloadable certificate.
pub struct Tls {
    config: Arc<ServerConfig>,
    resolver: Arc<Resolver>,
    source: Source,
    info: RwLock<TlsCertificateInfo>,
    /// The throw-away CA's directory (its `ca.pem`), removed on drop.
    _throwaway: Option<tempfile::TempDir>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls").field("info", &self.info()).finish()
    }
}

/// The crypto provider the HTTPS server runs on: aws-lc-rs, with the configured groups.
pub fn provider(config: &ServeConfig) -> Result<CryptoProvider, ConfigError> {
    use rustls::crypto::aws_lc_rs::{self as p, kx_group};
    let mut provider = p::default_provider();
    // The same suites, their key schedule's HMAC with keys prepared once (`tls_hmac`).
    provider.cipher_suites = with_fast_key_schedule(provider.cipher_suites);
    if !config.tls_groups.is_empty() {
        let mut groups: Vec<&'static dyn rustls::crypto::SupportedKxGroup> = Vec::new();
        for g in &config.tls_groups {
            let group = match g.to_ascii_lowercase().as_str() {
                "x25519" => kx_group::X25519,
                "secp256r1" | "p-256" => kx_group::SECP256R1,
                "secp384r1" | "p-384" => kx_group::SECP384R1,
                "x25519mlkem768" => kx_group::X25519MLKEM768,
                other => {
                    return Err(ConfigError(format!(
                        "tls_groups: {other:?}: unknown (valid: x25519, secp256r1, secp384r1, x25519mlkem768)"
                    )))
                }
            };
            if !groups.iter().any(|x| x.name() == group.name()) {
                groups.push(group);
            }
        }
        provider.kx_groups = groups;
    }
    Ok(provider)
}

/// `suites` with their key schedule's HMAC (TLS 1.3 HKDF, TLS 1.2 PRF) on RustCrypto with each
/// key prepared once, as the HTTPS server runs them (the lab's load client uses them too).
pub fn with_fast_key_schedule(
    suites: Vec<rustls::SupportedCipherSuite>,
) -> Vec<rustls::SupportedCipherSuite> {
    suites
        .into_iter()
        .map(super::tls_hmac::with_fast_hmac)
        .collect()
}

/// The rustls server configuration `secrelay serve` runs its HTTPS port with, around a
/// certificate resolver: versions, groups, tickets, session cache, ALPN, no 0-RTT. The lab
/// builds the same one to measure what the gateway serves.
pub fn server_config(
    config: &ServeConfig,
    certificate: Arc<dyn ResolvesServerCert>,
) -> Result<ServerConfig, ConfigError> {
    let provider = Arc::new(provider(config)?);
    let mut versions: Vec<&'static rustls::SupportedProtocolVersion> = Vec::new();
    for v in &config.tls_versions {
        match v.as_str() {
            "1.3" => versions.push(&rustls::version::TLS13),
            "1.2" => versions.push(&rustls::version::TLS12),
            other => {
                return Err(ConfigError(format!(
                    "tls_versions: {other:?}: unknown (valid: \"1.3\", \"1.2\")"
                )))
            }
        }
    }
    let mut sc = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&versions)
        .map_err(|e| ConfigError(format!("tls_versions: {e}")))?
        .with_no_client_auth()
        .with_cert_resolver(certificate);
    sc.alpn_protocols = if config.http2 {
        vec![b"h2".to_vec(), b"http/1.1".to_vec()]
    } else {
        vec![b"http/1.1".to_vec()]
    };
    if config.turn_tls {
        // TURN over TLS on this port (RFC 7443's ALPN), first: a client that offers it beside
        // `http/1.1` (coturn's does) is a TURN client, and browsers' HTTPS never offers it.
        // Clients that offer none are told apart after the handshake (`server::turn`).
        sc.alpn_protocols.insert(0, b"stun.turn".to_vec());
    }
    // 0-RTT off: early data is replayable, and nothing here needs it.
    sc.max_early_data_size = 0;
    sc.session_storage = ServerSessionMemoryCache::new(config.tls_session_cache.max(1));
    sc.send_tls13_tickets = usize::from(config.tls_tickets);
    if config.tls_tickets > 0 {
        sc.ticketer = rustls::crypto::aws_lc_rs::Ticketer::new()
            .map_err(|e| ConfigError(format!("making the session ticket key: {e}")))?;
    }
    Ok(sc)
}

/// A certificate chain and its key as rustls signs with them (checked to belong together).
pub fn certified_key(
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> Result<Arc<CertifiedKey>, ConfigError> {
    if chain.is_empty() {
        return Err(ConfigError("no certificate".into()));
    }
    let provider = rustls::crypto::aws_lc_rs::default_provider();
    CertifiedKey::from_der(chain, key, &provider)
        .map(Arc::new)
        .map_err(|e| match e {
            rustls::Error::InconsistentKeys(_) => {
                ConfigError("the private key does not belong to the first certificate".to_string())
            }
            other => ConfigError(other.to_string()),
        })
}

/// A [`Certificate`] (a private CA's issue, say) as rustls signs with it.
pub fn certified_key_of(cert: &Certificate) -> Result<Arc<CertifiedKey>, ConfigError> {
    let chain = cert
        .chain()
        .iter()
        .map(|d| CertificateDer::from(d.clone()))
        .collect();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(cert.private_key_der().to_vec()));
    certified_key(chain, key)
}

/// Reads a PEM chain and its key (PKCS#8, SEC1 or PKCS#1), naming the file at fault.
fn load_files(cert: &Path, key: &Path) -> Result<(Arc<CertifiedKey>, String), ConfigError> {
    let text = std::fs::read(cert)
        .map_err(|e| ConfigError(format!("tls_cert {}: {e}", cert.display())))?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&text)
        .collect::<Result<_, _>>()
        .map_err(|e| ConfigError(format!("tls_cert {}: {e}", cert.display())))?;
    if chain.is_empty() {
        return Err(ConfigError(format!(
            "tls_cert {}: no CERTIFICATE block",
            cert.display()
        )));
    }
    let key_text = zeroize::Zeroizing::new(
        std::fs::read(key).map_err(|e| ConfigError(format!("tls_key {}: {e}", key.display())))?,
    );
    let key_der = PrivateKeyDer::from_pem_slice(&key_text)
        .map_err(|e| ConfigError(format!("tls_key {}: {e}", key.display())))?;
    let pkcs8 = match &key_der {
        PrivateKeyDer::Pkcs8(k) => Some(k.secret_pkcs8_der().to_vec()),
        _ => None,
    };
    let ck = certified_key(chain.clone(), key_der).map_err(|e| {
        ConfigError(format!(
            "tls_cert {} / tls_key {}: {e}",
            cert.display(),
            key.display()
        ))
    })?;
    let kind = pkcs8
        .and_then(|k| {
            Certificate::from_der(chain.iter().map(|c| c.to_vec()).collect(), k)
                .ok()
                .map(|c| c.key_type().name().to_string())
        })
        .unwrap_or_else(|| format!("{:?}", ck.key.algorithm()).to_ascii_lowercase());
    Ok((ck, kind))
}

fn fingerprint(ck: &CertifiedKey) -> String {
    ck.cert
        .first()
        .map(|c| {
            secrelay_dtls::Fingerprint::of(c, secrelay_dtls::HashAlgorithm::Sha256).to_string()
        })
        .unwrap_or_default()
}

/// The names an issued HTTPS certificate is for: `tls_names` when set; else
/// [`ServeConfig::tls_names_or_default`] (loopback, the HTTPS address, the announced one) and,
/// when HTTPS listens on every address (`0.0.0.0`, `::`), the addresses clients may reach it
/// by: the one toward the default route, every interface's (link-local ones aside), and the
/// machine's host name. `curl https://203.0.113.7:8443/` from another host then verifies
/// without `--announce` or `tls_names`.
pub fn certificate_names(config: &ServeConfig) -> Vec<String> {
    let mut names = config.tls_names_or_default();
    if !config.tls_names.is_empty() {
        return names;
    }
    let Some(https) = config.listeners().https else {
        return names;
    };
    if !https.ip().is_unspecified() {
        return names;
    }
    let mut add = |n: String| {
        if !names.contains(&n) {
            names.push(n);
        }
    };
    add(super::default_announce(https).to_string());
    for ip in interface_addresses() {
        // An IPv4 wildcard listens on IPv4 only; `::` on both (dual stack by default).
        if ip.is_ipv4() || https.is_ipv6() {
            add(ip.to_string());
        }
    }
    if let Some(host) = host_name() {
        add(host);
    }
    names
}

/// Every interface's addresses, link-local IPv6 ones aside (they need a zone to be reached).
fn interface_addresses() -> Vec<std::net::IpAddr> {
    let Ok(addrs) = nix::ifaddrs::getifaddrs() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for a in addrs {
        let Some(sa) = a.address else { continue };
        let ip = if let Some(v4) = sa.as_sockaddr_in() {
            std::net::IpAddr::V4(v4.ip())
        } else if let Some(v6) = sa.as_sockaddr_in6() {
            let ip = v6.ip();
            if (ip.segments()[0] & 0xffc0) == 0xfe80 {
                continue;
            }
            std::net::IpAddr::V6(ip)
        } else {
            continue;
        };
        if !ip.is_unspecified() && !out.contains(&ip) {
            out.push(ip);
        }
    }
    out
}

/// The host name, when it is a name a certificate can carry (letters, digits, `-`, `.`).
fn host_name() -> Option<String> {
    let h = nix::unistd::gethostname().ok()?.into_string().ok()?;
    let ok = !h.is_empty()
        && h.len() <= 253
        && h != "localhost"
        && h.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
        && h.parse::<std::net::IpAddr>().is_err();
    ok.then(|| h.to_ascii_lowercase())
}

impl Source {
    /// Builds the certificate: reads the files again, or issues a fresh one.
    fn make(&self) -> Result<(Arc<CertifiedKey>, String), ConfigError> {
        match self {
            Source::Files { cert, key } => load_files(cert, key),
            Source::Issued {
                ca,
                names,
                key_type,
            } => {
                let names: Vec<&str> = names.iter().map(String::as_str).collect();
                let cert = issue_certificate_for(ca, &names, Role::Server, *key_type)
                    .map_err(|e| ConfigError(format!("issuing the HTTPS certificate: {e}")))?;
                // The leaf alone: the CA is the client's trust anchor, and sending it again
                // in every handshake would only cost bytes.
                let chain = vec![CertificateDer::from(cert.der().to_vec())];
                let key =
                    PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(cert.private_key_der().to_vec()));
                Ok((certified_key(chain, key)?, key_type.name().to_string()))
            }
        }
    }
}

impl Tls {
    /// The TLS state for `config`: the certificate made from its source, the server
    /// configuration around it.
    pub fn new(config: &ServeConfig) -> Result<Tls, ConfigError> {
        let key_type = config.tls_key_type()?;
        let names = certificate_names(config);
        let mut throwaway = None;
        let (source, source_name, trust_anchor) = match (&config.tls_cert, &config.tls_key) {
            (Some(cert), Some(key)) => (
                Source::Files {
                    cert: cert.clone(),
                    key: key.clone(),
                },
                format!("{} (key {})", cert.display(), key.display()),
                None,
            ),
            _ => match &config.tls_ca_dir {
                Some(dir) => {
                    let ca =
                        CaDir::load(dir).map_err(|e| ConfigError(format!("tls_ca_dir: {e}")))?;
                    (
                        Source::Issued {
                            ca: Box::new(ca.certificate().clone()),
                            names: names.clone(),
                            key_type,
                        },
                        format!("the private CA in {}", dir.display()),
                        None,
                    )
                }
                None => {
                    let dir = tempfile::Builder::new()
                        .prefix("secrelay-https-ca-")
                        .tempdir()
                        .map_err(|e| {
                            ConfigError(format!("a directory for the throw-away CA: {e}"))
                        })?;
                    let ca = secrelay_dtls::ca::generate_ca(KeyType::EcdsaP256)
                        .map_err(|e| ConfigError(format!("making a throw-away CA: {e}")))?;
                    let path = dir.path().join(secrelay_dtls::ca::CA_CERT_FILE);
                    std::fs::write(&path, ca.to_pem().0)
                        .map_err(|e| ConfigError(format!("{}: {e}", path.display())))?;
                    throwaway = Some(dir);
                    (
                        Source::Issued {
                            ca: Box::new(ca),
                            names: names.clone(),
                            key_type,
                        },
                        "a throw-away private CA".to_string(),
                        Some(path),
                    )
                }
            },
        };
        let (ck, key) = source.make()?;
        let info = TlsCertificateInfo {
            source: source_name,
            key,
            fingerprint: fingerprint(&ck),
            trust_anchor,
            names: match &source {
                Source::Issued { names, .. } => names.clone(),
                Source::Files { .. } => Vec::new(),
            },
        };
        let resolver = Arc::new(Resolver {
            current: RwLock::new(ck),
        });
        let sc = server_config(config, resolver.clone())?;
        Ok(Tls {
            config: Arc::new(sc),
            resolver,
            source,
            info: RwLock::new(info),
            _throwaway: throwaway,
        })
    }

    /// The server configuration (shared by every handshake).
    pub fn server_config(&self) -> Arc<ServerConfig> {
        self.config.clone()
    }

    /// What is presented now.
    pub fn info(&self) -> TlsCertificateInfo {
        self.info.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The throw-away CA's certificate (PEM file), when the certificate is issued by one.
    pub fn trust_anchor(&self) -> Option<PathBuf> {
        self.info().trust_anchor
    }

    /// Builds the certificate again from its source and presents it from the next handshake
    /// on; on error the one in use stays. Returns the new certificate's fingerprint.
    pub fn reload(&self) -> Result<String, ConfigError> {
        let (ck, key) = self.source.make()?;
        let fp = fingerprint(&ck);
        *self
            .resolver
            .current
            .write()
            .unwrap_or_else(|e| e.into_inner()) = ck;
        let mut info = self.info.write().unwrap_or_else(|e| e.into_inner());
        info.fingerprint = fp.clone();
        info.key = key;
        Ok(fp)
    }
}

/// The version's name as `/metrics` labels it (`1.3`, `1.2`).
pub fn version_name(v: Option<ProtocolVersion>) -> &'static str {
    match v {
        Some(ProtocolVersion::TLSv1_3) => "1.3",
        Some(ProtocolVersion::TLSv1_2) => "1.2",
        _ => "other",
    }
}
