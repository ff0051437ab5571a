//! The handshake lab (issue 3; studies `001_…` and `002_…` d): DTLS-SRTP handshakes over real
//! UDP and over memory.
//!
//! - [`server`]: `secrelay lab handshake-server`, a DTLS-SRTP server on one UDP socket serving
//!   many clients at once, with a keylog of every finished handshake.
//! - [`load`]: `secrelay lab handshake --target …`, a load generator in the spirit of
//!   tls-perf: many handshakes in flight, handshakes/s sampled each second, latency
//!   percentiles, failures by reason.
//! - [`study`]: `secrelay lab handshake --in-memory`, both sides in one process over memory,
//!   secrelay beside OpenSSL and pion/dtls, with the crypto floor measured in the same run.
//! - [`keylog`]: the JSON-lines keylog both sides write, so a test can compare the keys.
//! - [`tls_load`]: `secrelay lab handshake --tls --target …`, the same load generator for TLS
//!   over TCP (full handshakes and resumptions, TLS 1.3 and 1.2).
//! - [`tls_study`]: `secrelay lab handshake --tls`, the study: secrelay's HTTPS server beside
//!   nginx and `openssl s_server` ([`tls_servers`]), and beside its DTLS server; crypto floors,
//!   instructions per handshake, bytes per flight ([`flights`]), memory per half-open
//!   handshake.

pub mod flights;
pub mod keylog;
pub mod load;
pub mod phases;
pub mod server;
pub mod study;
pub mod tls_load;
pub mod tls_servers;
pub mod tls_study;

use std::net::SocketAddr;

use anyhow::{bail, Context as _};
use secrelay_dtls::{
    Certificate, Endpoint, EndpointConfig, EngineChoice, KeyType, LocalCertificate, PeerAuth, Role,
};
use secrelay_srtp::Profile;

/// Parses an engine name (`auto`, `dimpl`, `openssl`), naming the flag on error.
pub fn parse_engine(s: &str) -> anyhow::Result<EngineChoice> {
    match s.trim().to_ascii_lowercase().as_str() {
        "auto" => Ok(EngineChoice::Auto),
        "dimpl" => Ok(EngineChoice::Dimpl),
        "openssl" => Ok(EngineChoice::Openssl),
        _ => bail!("--engine {s:?}: unknown engine (valid: auto, dimpl, openssl)"),
    }
}

/// The engine's name as on the command line.
pub fn engine_name(engine: EngineChoice) -> &'static str {
    match engine {
        EngineChoice::Dimpl => "dimpl",
        EngineChoice::Openssl => "openssl",
        _ => "auto",
    }
}

/// The engine `engine` runs for our certificate of `key_type` with the default suites and SRTP
/// profiles: what [`EndpointConfig::resolved_engine`] decides (`Auto` takes OpenSSL for an RSA
/// certificate, dimpl otherwise; the lab builds secrelay-dtls with its `openssl` feature).
pub fn resolved_engine(engine: EngineChoice, key_type: KeyType) -> EngineChoice {
    match engine {
        EngineChoice::Auto if key_type.is_rsa() => EngineChoice::Openssl,
        EngineChoice::Auto => EngineChoice::Dimpl,
        other => other,
    }
}

/// Why the engine `engine` (after [`resolved_engine`]) cannot use a certificate type, if it
/// cannot.
///
/// dimpl 0.9 signs with ECDSA only (it verifies RSA peers too, patched: `vendor/dimpl`), so a
/// certificate of our own must be ECDSA on it; OpenSSL (3.0, DTLS 1.2) takes RSA and ECDSA
/// certificates. Ed25519 in DTLS 1.2 is left to OpenSSL: [`check_engine_takes`] builds an
/// endpoint to find out.
pub fn engine_refuses(engine: EngineChoice, key_type: KeyType) -> Option<&'static str> {
    match (resolved_engine(engine, key_type), key_type) {
        (EngineChoice::Dimpl, KeyType::EcdsaP256 | KeyType::EcdsaP384) => None,
        (EngineChoice::Dimpl, KeyType::Ed25519) => Some(
            "not offered by the engine: dimpl 0.9 signs with ECDSA only (no Ed25519 in DTLS 1.2)",
        ),
        (EngineChoice::Dimpl, _) => {
            Some("not offered by the engine: dimpl 0.9 signs with ECDSA only (no RSA)")
        }
        _ => None,
    }
}

/// Parses a certificate type name (`ecdsa-p256`, …).
pub fn parse_key_type(s: &str) -> anyhow::Result<KeyType> {
    s.parse::<KeyType>()
        .map_err(|e| anyhow::anyhow!("--cert-type {s:?}: {e} (valid: {})", KeyType::valid_names()))
}

/// A fresh self-signed certificate of `key_type` that the engine `engine` takes, checked by
/// building one endpoint with it; a clear error naming the type otherwise.
pub fn engine_certificate(
    engine: EngineChoice,
    key_type: KeyType,
    common_name: &str,
) -> anyhow::Result<Certificate> {
    if let Some(why) = engine_refuses(engine, key_type) {
        bail!(
            "--cert-type {key_type} with --engine {}: {why}",
            engine_name(engine)
        );
    }
    let cert = Certificate::self_signed(key_type, common_name)
        .with_context(|| format!("generating a {key_type} certificate"))?;
    check_engine_takes(engine, &cert)
        .map_err(|e| anyhow::anyhow!("--cert-type {key_type}: {e}"))?;
    Ok(cert)
}

/// Checks that the engine `engine` can use `cert` (its key type and its key), by building one
/// endpoint with it.
pub fn check_engine_takes(engine: EngineChoice, cert: &Certificate) -> anyhow::Result<()> {
    if let Some(why) = engine_refuses(engine, cert.key_type()) {
        bail!(
            "{} certificate with --engine {}: {why}",
            cert.key_type(),
            engine_name(engine)
        );
    }
    let mut config = EndpointConfig::new(
        Role::Client,
        LocalCertificate::from(cert),
        PeerAuth::AnyCertificate,
    );
    config.engine = engine;
    Endpoint::new(config, std::time::Instant::now())
        .map_err(|e| anyhow::anyhow!("the engine refused the certificate: {e}"))?;
    Ok(())
}

/// Loads a certificate (PEM, leaf first) and its PKCS#8 key (PEM) and checks that the engine
/// `engine` takes them.
pub fn load_certificate(
    engine: EngineChoice,
    cert: &std::path::Path,
    key: &std::path::Path,
) -> anyhow::Result<Certificate> {
    let cert_pem =
        std::fs::read_to_string(cert).with_context(|| format!("--cert {}", cert.display()))?;
    let key_pem = zeroize::Zeroizing::new(
        std::fs::read_to_string(key).with_context(|| format!("--key {}", key.display()))?,
    );
    let c = Certificate::from_pem(&cert_pem, &key_pem)
        .map_err(|e| anyhow::anyhow!("--cert {} / --key {}: {e}", cert.display(), key.display()))?;
    check_engine_takes(engine, &c)
        .map_err(|e| anyhow::anyhow!("--cert {}: {e}", cert.display()))?;
    Ok(c)
}

/// Parses a list of SRTP profiles (comma- or colon-separated; DTLS-SRTP names such as
/// `SRTP_AES128_CM_SHA1_80` or SDP names), keeping only those with a DTLS-SRTP identifier.
pub fn parse_profiles(list: &str) -> anyhow::Result<Vec<Profile>> {
    let mut out = Vec::new();
    for name in list
        .split([',', ':'])
        .map(str::trim)
        .filter(|n| !n.is_empty())
    {
        let p: Profile = name
            .parse()
            .map_err(|e| anyhow::anyhow!("--srtp-profiles: {e}"))?;
        if p.dtls_profile().is_none() {
            bail!("--srtp-profiles: {name} has no DTLS-SRTP protection profile (RFC 5764/7714)");
        }
        if !out.contains(&p) {
            out.push(p);
        }
    }
    if out.is_empty() {
        bail!("--srtp-profiles: the list {list:?} names no profile");
    }
    Ok(out)
}

/// `--groups LIST`: ECDHE groups (x25519, p-256, p-384), comma- or colon-separated, most
/// preferred first.
pub fn parse_groups(list: &str) -> anyhow::Result<Vec<secrelay_dtls::EcdheGroup>> {
    let mut out = Vec::new();
    for name in list
        .split([',', ':'])
        .map(str::trim)
        .filter(|n| !n.is_empty())
    {
        let g: secrelay_dtls::EcdheGroup =
            name.parse().map_err(|e| anyhow::anyhow!("--groups: {e}"))?;
        if !out.contains(&g) {
            out.push(g);
        }
    }
    if out.is_empty() {
        bail!("--groups: the list {list:?} names no group");
    }
    Ok(out)
}

/// A profile's DTLS-SRTP name (`SRTP_AES128_CM_SHA1_80`, …), or its SDP name if it has none.
pub fn dtls_name(p: Profile) -> &'static str {
    p.dtls_profile().map(|(n, _)| n).unwrap_or(p.sdp_name())
}

/// Parses a socket address, naming the flag on error.
pub fn parse_addr(flag: &str, s: &str) -> anyhow::Result<SocketAddr> {
    use std::net::ToSocketAddrs as _;
    s.to_socket_addrs()
        .with_context(|| format!("{flag} {s:?}: not an address (expected IP:PORT)"))?
        .next()
        .with_context(|| format!("{flag} {s:?}: resolves to no address"))
}

/// `q`-quantile (0..=1) of sorted values, nearest rank.
pub(crate) fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}
