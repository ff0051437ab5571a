//! `secrelay serve`'s configuration: TOML, every field optional, the defaults run with no file.
//! Unknown keys are errors that name the key, so a typo never silently does nothing.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use secrelay_dtls::KeyType;

use crate::admission::AdmissionConfig;
use secrelay_srtp::Profile;
use serde::Deserialize;

/// A room's settings.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RoomConfig {
    /// Bearer token required to publish, subscribe or join (WHIP/WHEP `Authorization`).
    pub token: Option<String>,
}

/// Everything `secrelay serve` can be told.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ServeConfig {
    /// Plain HTTP signaling and operations (WHIP, WHEP, rooms, /api, /metrics, /healthz): only
    /// when asked for. With neither `http` nor `https` set, the gateway serves HTTPS on
    /// [`DEFAULT_HTTPS`].
    pub http: Option<SocketAddr>,
    /// HTTPS for the same routes (TLS 1.3 and 1.2 with rustls on aws-lc-rs; ALPN `h2` and
    /// `http/1.1`). The certificate comes from `tls_cert`/`tls_key`, or is issued at start by
    /// the private CA in `tls_ca_dir`, or by a throw-away private CA made at start.
    pub https: Option<SocketAddr>,
    /// The one UDP address every participant's ICE, DTLS and SRTP use.
    pub udp: SocketAddr,
    /// The ng control socket for SIP proxies (rtpengine's protocol, UDP); none by default.
    pub ng: Option<SocketAddr>,
    /// The addresses and networks (`10.0.0.5`, `10.0.0.0/24`, `::1`) the ng control socket takes
    /// commands from; a datagram from anywhere else is dropped unanswered and counted. ng
    /// carries no authentication (as with rtpengine): set this whenever the socket is reachable
    /// from beyond the SIP proxies. Empty (the default): any source.
    pub ng_allow: Vec<String>,
    /// The address written as the host candidate in answers (default: `udp`'s address, or when
    /// that is unspecified, the address of the interface with the default route).
    pub announce: Option<IpAddr>,
    /// Packet workers (each with its own SO_REUSEPORT socket on `udp`); 0 = one per core.
    pub workers: usize,
    /// Key type of the certificate generated at start (`ecdsa-p256`, `ecdsa-p384`, `rsa-2048`…).
    pub cert_type: String,
    /// A certificate chain (PEM) to use instead of a generated one; needs `key`.
    pub cert: Option<PathBuf>,
    /// The certificate's private key (PKCS#8 PEM).
    pub key: Option<PathBuf>,
    /// SRTP profiles accepted in DTLS-SRTP, most preferred first (RFC 5764 names).
    pub srtp_profiles: Vec<String>,
    /// Seconds without an authenticated ICE check before a participant is dropped (RFC 7675).
    pub consent_timeout_secs: f64,
    /// Most participants at once; more are refused with 503.
    pub max_participants: usize,
    /// Admission control (`secrelay_gateway::admission`): the load (CPU time a worker's thread
    /// used, as a share of wall time, 0.0–1.0) from which the worker defers new DTLS handshakes (their
    /// ClientHellos are dropped and counted as `overload`; peers retransmit). Above 1: never.
    pub shed_handshakes_at: f64,
    /// The load from which new rooms and legs in the worker's rooms are refused: 503 with
    /// `Retry-After` over HTTP(S), an ng `error` to SIP proxies. Established media is never
    /// shed. Above 1: never.
    pub shed_joins_at: f64,
    /// Largest HTTP body accepted, in bytes (413 above).
    pub max_body_bytes: usize,
    /// Origins allowed by CORS (`*` for any).
    pub cors_origins: Vec<String>,
    /// Bearer token for rooms that have none of their own (none: open).
    pub token: Option<String>,
    /// Seconds a shutdown waits for close_notify to leave before exiting.
    pub drain_secs: f64,
    /// Rooms with settings of their own; other rooms are made on first use.
    pub rooms: BTreeMap<String, RoomConfig>,
    /// The SRTP engine each worker hands its receive batches to: `simd` (the default:
    /// multi-buffer lanes where the CPU has them, one packet at a time below 8; audio and
    /// video alike, no slower than `serial` at any packet size measured, `lab srtp`'s
    /// `srtp_engine_sizes`) or `serial`.
    pub srtp_engine: String,
    /// Local ports for telephony legs (plain RTP, SDES-SRTP), `"LOW-HIGH"`: each leg takes an
    /// even port for RTP and the next one for RTCP (unless RTCP is muxed), bound on `udp`'s
    /// address.
    pub rtp_ports: String,
    /// Complexity of the gateway's own Opus encoders (transcoding and mixing), 0–10: libopus's
    /// quality/CPU trade-off. 10 (libopus's default) costs about 2.5× the CPU of 5 per frame
    /// (`secrelay lab codec`); a gateway encoding many Opus streams may trade some quality for
    /// calls per core here.
    pub opus_complexity: i32,
    /// SDES suites accepted, most preferred first (RFC 4568 names).
    pub sdes_suites: Vec<String>,
    /// Where a plain RTP leg takes media from: `"signalled"` (only the address its SDP gives)
    /// or `"first-packets"` (the first source within its first `nat_latch_packets` packets,
    /// for phones behind NAT).
    pub plain_latch: String,
    /// Packets within which a plain leg latches to its first source (`first-packets`).
    pub nat_latch_packets: u32,
    /// Seconds without media before a telephony leg ends (rtpengine's timeout).
    pub media_timeout_secs: f64,
    /// Mean seconds between the gateway's RTCP reports to each member (RFC 3550's 5 s for
    /// small sessions; each randomized to 0.5–1.5 of it).
    pub rtcp_interval_secs: f64,
    /// The HTTPS certificate chain (PEM, leaf first); needs `tls_key`. Re-read on reload.
    pub tls_cert: Option<PathBuf>,
    /// Its private key (PEM: PKCS#8, SEC1 `EC PRIVATE KEY` or PKCS#1 `RSA PRIVATE KEY`).
    pub tls_key: Option<PathBuf>,
    /// A private CA made by `secrelay ca init` (its `ca.pem` and `ca.key`): at start and on
    /// every reload the gateway issues itself a fresh server certificate for `tls_names`
    /// (kept in memory). Clients trust the CA's `ca.pem`.
    pub tls_ca_dir: Option<PathBuf>,
    /// Key type of an issued HTTPS certificate (`ecdsa-p256` by default, `rsa-2048`, …).
    pub tls_cert_type: String,
    /// Names an issued HTTPS certificate is valid for (DNS names or IP addresses); empty:
    /// `localhost`, `127.0.0.1`, `::1` and the HTTPS address's own IP when it is specific.
    pub tls_names: Vec<String>,
    /// TLS versions offered: `"1.3"` and/or `"1.2"`.
    pub tls_versions: Vec<String>,
    /// Key exchange groups, most preferred first (`x25519`, `secp256r1`, `secp384r1`,
    /// `x25519mlkem768`); empty: rustls' defaults for aws-lc-rs.
    pub tls_groups: Vec<String>,
    /// TLS 1.3 session tickets sent after each handshake (stateless, encrypted under a key
    /// that rotates); 0 turns tickets off (TLS 1.2 then resumes by session id only).
    pub tls_tickets: u8,
    /// Sessions kept for resumption by session id (TLS 1.2) or, without tickets, TLS 1.3.
    pub tls_session_cache: usize,
    /// Seconds a TLS handshake may take, from the accepted connection to the client's Finished;
    /// a client that has not finished by then (slowloris) is cut off and counted.
    pub tls_handshake_timeout_secs: f64,
    /// TLS handshakes in progress at most; connections beyond it are closed at once and counted
    /// (`busy`), so a flood of half-open handshakes costs a bounded amount of memory.
    pub tls_max_handshakes: usize,
    /// HTTP and HTTPS connections open at most (each costs buffers); more are closed at once.
    pub max_connections: usize,
    /// HTTP and HTTPS connections one source (an IPv4 address, an IPv6 /64) may hold open at
    /// once; more from it are closed at accept (plain HTTP first gets `429` with
    /// `Retry-After`), so one client cannot take the `max_connections` everyone shares.
    pub max_connections_per_source: usize,
    /// Requests per second one source may make on average, over all its connections; beyond
    /// it `429 Too Many Requests` with `Retry-After`. 0 (the default): no limit.
    pub requests_per_source: f64,
    /// Requests a quiet source may make at once before `requests_per_source` applies.
    pub request_burst_per_source: u32,
    /// Seconds a connection has to begin its first request (after its TLS handshake on HTTPS),
    /// a request has to send its headers, and then to send its whole body and be answered
    /// (408 after it).
    pub http_request_timeout_secs: f64,
    /// Offer HTTP/2 (ALPN `h2`) beside HTTP/1.1.
    pub http2: bool,
    /// Threads of the signaling runtime (HTTP, HTTPS, ng), apart from the media workers.
    pub http_threads: usize,
    /// Seconds the resource (`Location`) of a session that ended on its own (close_notify,
    /// lost consent, DTLS failure) still answers a DELETE with 200 before it is forgotten.
    pub ended_resource_grace_secs: f64,
    /// Media interfaces for telephony legs, as rtpengine's `--interface` writes them:
    /// `[NAME/]LOCAL[!ADVERTISED]` (`internal/10.0.0.5`, `external/192.168.1.5!203.0.113.7`,
    /// `::1`). Legs' ports are bound on LOCAL and their SDP announces ADVERTISED; the ng
    /// protocol's `direction` flag picks an interface per side by NAME, `address-family` or
    /// the side's own address picks IPv4 or IPv6 within it. Empty: one interface, the `udp`
    /// address announced as `announce`.
    pub interfaces: Vec<String>,
}

/// Where the gateway serves HTTPS when neither `http` nor `https` is configured.
pub const DEFAULT_HTTPS: &str = "127.0.0.1:8443";

/// The signaling listeners a configuration resolves to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Listeners {
    /// Plain HTTP, when asked for.
    pub http: Option<SocketAddr>,
    /// HTTPS.
    pub https: Option<SocketAddr>,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            http: None,
            https: None,
            udp: "0.0.0.0:40000".parse().expect("a valid literal address"),
            ng: None,
            ng_allow: Vec::new(),
            announce: None,
            workers: 0,
            cert_type: KeyType::EcdsaP256.name().into(),
            cert: None,
            key: None,
            srtp_profiles: secrelay_dtls::endpoint::DEFAULT_SRTP_PROFILES
                .iter()
                .map(|p| p.to_string())
                .collect(),
            consent_timeout_secs: 30.0,
            max_participants: 10_000,
            shed_handshakes_at: AdmissionConfig::default().shed_handshakes_at,
            shed_joins_at: AdmissionConfig::default().shed_joins_at,
            max_body_bytes: 64 * 1024,
            cors_origins: vec!["*".into()],
            token: None,
            drain_secs: 1.0,
            rooms: BTreeMap::new(),
            srtp_engine: "simd".into(),
            rtp_ports: "30000-39999".into(),
            opus_complexity: secrelay_media::opus::Opus::DEFAULT_COMPLEXITY,
            sdes_suites: secrelay_gateway_default_suites(),
            plain_latch: "signalled".into(),
            nat_latch_packets: 10,
            media_timeout_secs: 60.0,
            rtcp_interval_secs: 5.0,
            tls_cert: None,
            tls_key: None,
            tls_ca_dir: None,
            tls_cert_type: KeyType::EcdsaP256.name().into(),
            tls_names: Vec::new(),
            tls_versions: vec!["1.3".into(), "1.2".into()],
            tls_groups: Vec::new(),
            tls_tickets: 2,
            tls_session_cache: 4096,
            tls_handshake_timeout_secs: 10.0,
            tls_max_handshakes: 1024,
            max_connections: 4096,
            max_connections_per_source: 256,
            requests_per_source: 0.0,
            request_burst_per_source: 50,
            http_request_timeout_secs: 10.0,
            http2: true,
            http_threads: 1,
            ended_resource_grace_secs: 60.0,
            interfaces: Vec::new(),
        }
    }
}

fn secrelay_gateway_default_suites() -> Vec<String> {
    crate::leg::RtpConfig::default()
        .sdes_suites
        .iter()
        .map(|p| p.sdp_name().to_owned())
        .collect()
}

/// A configuration error, naming the field or file at fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

impl ServeConfig {
    /// Reads a TOML file.
    pub fn from_file(path: &Path) -> Result<ServeConfig, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError(format!("--config {}: {e}", path.display())))?;
        Self::from_toml(&text).map_err(|e| ConfigError(format!("--config {}: {e}", path.display())))
    }

    /// Parses TOML text and checks it.
    pub fn from_toml(text: &str) -> Result<ServeConfig, ConfigError> {
        let c: ServeConfig = toml::from_str(text).map_err(|e| ConfigError(e.to_string()))?;
        c.check()?;
        Ok(c)
    }

    /// Checks the values that parse but cannot work.
    pub fn check(&self) -> Result<(), ConfigError> {
        self.key_type()?;
        self.profiles()?;
        self.engine()?;
        if !(self.ended_resource_grace_secs.is_finite() && self.ended_resource_grace_secs >= 0.0) {
            return Err(ConfigError(format!(
                "ended_resource_grace_secs = {}: must be 0 or a positive number of seconds",
                self.ended_resource_grace_secs
            )));
        }
        if !(self.consent_timeout_secs.is_finite() && self.consent_timeout_secs > 0.0) {
            return Err(ConfigError(format!(
                "consent_timeout_secs = {}: must be a positive number of seconds",
                self.consent_timeout_secs
            )));
        }
        if !(self.drain_secs.is_finite() && self.drain_secs >= 0.0) {
            return Err(ConfigError(format!(
                "drain_secs = {}: must be zero or more seconds",
                self.drain_secs
            )));
        }
        if self.cert.is_some() != self.key.is_some() {
            return Err(ConfigError(
                "cert and key: give both (a PEM chain and its PKCS#8 key) or neither".into(),
            ));
        }
        self.rtp_port_range()?;
        self.ng_allowed()?;
        for (name, v) in [
            ("shed_handshakes_at", self.shed_handshakes_at),
            ("shed_joins_at", self.shed_joins_at),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(ConfigError(format!(
                    "{name} = {v}: a share of a worker's CPU time, 0.0 to 1.0 (above 1: never)"
                )));
            }
        }
        if !(0..=10).contains(&self.opus_complexity) {
            return Err(ConfigError(format!(
                "opus_complexity = {}: must be 0 to 10",
                self.opus_complexity
            )));
        }
        self.sdes_profiles()?;
        self.latch()?;
        if !(self.media_timeout_secs.is_finite() && self.media_timeout_secs > 0.0) {
            return Err(ConfigError(format!(
                "media_timeout_secs = {}: must be a positive number of seconds",
                self.media_timeout_secs
            )));
        }
        if !(self.rtcp_interval_secs.is_finite() && self.rtcp_interval_secs >= 0.1) {
            return Err(ConfigError(format!(
                "rtcp_interval_secs = {}: must be at least 0.1 s",
                self.rtcp_interval_secs
            )));
        }
        self.tls_check()?;
        if self.max_body_bytes < 1024 {
            return Err(ConfigError(format!(
                "max_body_bytes = {}: an SDP offer needs at least 1024",
                self.max_body_bytes
            )));
        }
        Ok(())
    }

    /// The signaling listeners: what `http` and `https` say, or HTTPS on [`DEFAULT_HTTPS`]
    /// when neither is set (plain HTTP only when asked for).
    pub fn listeners(&self) -> Listeners {
        match (self.http, self.https) {
            (None, None) => Listeners {
                http: None,
                https: Some(DEFAULT_HTTPS.parse().expect("a valid literal address")),
            },
            (http, https) => Listeners { http, https },
        }
    }

    fn tls_check(&self) -> Result<(), ConfigError> {
        if self.tls_cert.is_some() != self.tls_key.is_some() {
            return Err(ConfigError(
                "tls_cert and tls_key: give both (a PEM chain and its key) or neither".into(),
            ));
        }
        if self.tls_cert.is_some() && self.tls_ca_dir.is_some() {
            return Err(ConfigError(
                "tls_cert and tls_ca_dir: one source of the HTTPS certificate, not both".into(),
            ));
        }
        self.tls_key_type()?;
        if self.tls_versions.is_empty() {
            return Err(ConfigError(
                "tls_versions: name at least one of \"1.3\", \"1.2\"".into(),
            ));
        }
        for v in &self.tls_versions {
            if !matches!(v.as_str(), "1.3" | "1.2") {
                return Err(ConfigError(format!(
                    "tls_versions: {v:?}: unknown (valid: \"1.3\", \"1.2\")"
                )));
            }
        }
        for g in &self.tls_groups {
            if !matches!(
                g.to_ascii_lowercase().as_str(),
                "x25519" | "secp256r1" | "p-256" | "secp384r1" | "p-384" | "x25519mlkem768"
            ) {
                return Err(ConfigError(format!(
                    "tls_groups: {g:?}: unknown (valid: x25519, secp256r1, secp384r1, x25519mlkem768)"
                )));
            }
        }
        for (key, v, min) in [
            (
                "tls_handshake_timeout_secs",
                self.tls_handshake_timeout_secs,
                0.05,
            ),
            (
                "http_request_timeout_secs",
                self.http_request_timeout_secs,
                0.05,
            ),
        ] {
            if !(v.is_finite() && v >= min) {
                return Err(ConfigError(format!(
                    "{key} = {v}: must be at least {min} s"
                )));
            }
        }
        for (key, v) in [
            ("tls_max_handshakes", self.tls_max_handshakes),
            ("max_connections", self.max_connections),
            (
                "max_connections_per_source",
                self.max_connections_per_source,
            ),
            (
                "request_burst_per_source",
                self.request_burst_per_source as usize,
            ),
            ("http_threads", self.http_threads),
        ] {
            if v == 0 {
                return Err(ConfigError(format!("{key} = 0: must be at least 1")));
            }
        }
        if !(self.requests_per_source.is_finite() && self.requests_per_source >= 0.0) {
            return Err(ConfigError(format!(
                "requests_per_source = {}: requests per second, 0 for no limit",
                self.requests_per_source
            )));
        }
        Ok(())
    }

    /// `ng_allow` parsed: each entry a network, a bare address its own /32 or /128.
    pub fn ng_allowed(&self) -> Result<Vec<ipnet::IpNet>, ConfigError> {
        self.ng_allow
            .iter()
            .map(|a| {
                a.parse::<ipnet::IpNet>()
                    .or_else(|_| a.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
                    .map(|n| n.trunc())
                    .map_err(|_| {
                        ConfigError(format!(
                            "ng_allow: {a:?}: not an address or a network (10.0.0.5, 10.0.0.0/24, fd00::/64)"
                        ))
                    })
            })
            .collect()
    }

    /// The per-source limits of the signaling listeners.
    pub fn source_limits(&self) -> super::per_source::SourceLimits {
        super::per_source::SourceLimits {
            connections: self.max_connections_per_source,
            requests_per_sec: self.requests_per_source,
            burst: f64::from(self.request_burst_per_source),
        }
    }

    /// The key type of an issued HTTPS certificate.
    pub fn tls_key_type(&self) -> Result<KeyType, ConfigError> {
        self.tls_cert_type.parse::<KeyType>().map_err(|e| {
            ConfigError(format!(
                "tls_cert_type = {:?}: {e} (valid: {})",
                self.tls_cert_type,
                KeyType::valid_names()
            ))
        })
    }

    /// The names an issued HTTPS certificate is for (see `tls_names`).
    pub fn tls_names_or_default(&self) -> Vec<String> {
        if !self.tls_names.is_empty() {
            return self.tls_names.clone();
        }
        let mut names = vec!["localhost".to_string(), "127.0.0.1".into(), "::1".into()];
        if let Some(a) = self.listeners().https {
            if !a.ip().is_unspecified() && !names.contains(&a.ip().to_string()) {
                names.push(a.ip().to_string());
            }
        }
        if let Some(ip) = self.announce {
            if !names.contains(&ip.to_string()) {
                names.push(ip.to_string());
            }
        }
        names
    }

    /// The certificate key type.
    pub fn key_type(&self) -> Result<KeyType, ConfigError> {
        self.cert_type.parse::<KeyType>().map_err(|e| {
            ConfigError(format!(
                "cert_type = {:?}: {e} (valid: {})",
                self.cert_type,
                KeyType::valid_names()
            ))
        })
    }

    /// The SRTP profiles, parsed.
    pub fn profiles(&self) -> Result<Vec<Profile>, ConfigError> {
        if self.srtp_profiles.is_empty() {
            return Err(ConfigError(
                "srtp_profiles: name at least one profile".into(),
            ));
        }
        self.srtp_profiles
            .iter()
            .map(|s| {
                s.parse::<Profile>()
                    .map_err(|e| ConfigError(format!("srtp_profiles: {s:?}: {e}")))
            })
            .collect()
    }

    /// A fresh SRTP engine of the configured kind (one per worker).
    pub fn engine(&self) -> Result<Box<dyn secrelay_srtp::Engine>, ConfigError> {
        match self.srtp_engine.as_str() {
            "simd" => Ok(Box::new(secrelay_srtp::SimdEngine::new())),
            "serial" => Ok(Box::new(secrelay_srtp::SerialEngine)),
            other => Err(ConfigError(format!(
                "srtp_engine = {other:?}: unknown engine (valid: simd, serial)"
            ))),
        }
    }

    /// The admission control thresholds.
    pub fn admission(&self) -> AdmissionConfig {
        AdmissionConfig {
            shed_handshakes_at: self.shed_handshakes_at,
            shed_joins_at: self.shed_joins_at,
        }
    }

    /// The telephony legs' port range (inclusive), at least one even/odd pair.
    pub fn rtp_port_range(&self) -> Result<(u16, u16), ConfigError> {
        let bad = || {
            ConfigError(format!(
                "rtp_ports = {:?}: give LOW-HIGH, two ports with LOW < HIGH (e.g. \"30000-39999\")",
                self.rtp_ports
            ))
        };
        let (lo, hi) = self.rtp_ports.split_once('-').ok_or_else(bad)?;
        let lo: u16 = lo.trim().parse().map_err(|_| bad())?;
        let hi: u16 = hi.trim().parse().map_err(|_| bad())?;
        if lo == 0 || lo >= hi {
            return Err(bad());
        }
        Ok((lo, hi))
    }

    /// The SDES suites, parsed.
    pub fn sdes_profiles(&self) -> Result<Vec<Profile>, ConfigError> {
        self.sdes_suites
            .iter()
            .map(|s| {
                s.parse::<Profile>()
                    .map_err(|e| ConfigError(format!("sdes_suites: {s:?}: {e}")))
            })
            .collect()
    }

    /// Where plain legs latch.
    pub fn latch(&self) -> Result<crate::leg::Latch, ConfigError> {
        match self.plain_latch.as_str() {
            "signalled" => Ok(crate::leg::Latch::Signalled),
            "first-packets" => Ok(crate::leg::Latch::FirstPackets(self.nat_latch_packets)),
            other => Err(ConfigError(format!(
                "plain_latch = {other:?}: unknown (valid: signalled, first-packets)"
            ))),
        }
    }

    /// The consent timeout.
    pub fn consent_timeout(&self) -> Duration {
        Duration::from_secs_f64(self.consent_timeout_secs)
    }

    /// The number of workers to start.
    pub fn worker_count(&self) -> usize {
        if self.workers > 0 {
            self.workers
        } else {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        }
    }

    /// The token a room needs, if any.
    pub fn token_for(&self, room: &str) -> Option<&str> {
        self.rooms
            .get(room)
            .and_then(|r| r.token.as_deref())
            .or(self.token.as_deref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_file_is_the_defaults() {
        assert_eq!(ServeConfig::from_toml("").unwrap(), ServeConfig::default());
    }

    /// Workers get the multi-buffer engine unless told otherwise: every packet, video
    /// included, goes through its kernels.
    #[test]
    fn the_default_engine_is_the_multi_buffer_one() {
        let c = ServeConfig::default();
        assert_eq!(c.engine().unwrap().name(), "simd");
        let c = ServeConfig::from_toml("srtp_engine = \"serial\"").unwrap();
        assert_eq!(c.engine().unwrap().name(), "serial");
    }

    #[test]
    fn fields_and_rooms_parse() {
        let c = ServeConfig::from_toml(
            "http = \"127.0.0.1:9000\"\nworkers = 3\ntoken = \"t0\"\n[rooms.board]\ntoken = \"secret\"\n",
        )
        .unwrap();
        assert_eq!(c.http.unwrap().port(), 9000);
        // Plain HTTP asked for: no HTTPS beside it unless asked for too.
        assert_eq!(c.listeners().https, None);
        assert_eq!(c.worker_count(), 3);
        assert_eq!(c.token_for("board"), Some("secret"));
        assert_eq!(c.token_for("other"), Some("t0"));
    }

    #[test]
    fn https_is_the_default_and_http_only_when_asked_for() {
        let l = ServeConfig::default().listeners();
        assert_eq!(l.http, None);
        assert_eq!(l.https, Some(DEFAULT_HTTPS.parse().unwrap()));
        let c =
            ServeConfig::from_toml("http = \"127.0.0.1:8080\"\nhttps = \"0.0.0.0:8443\"").unwrap();
        let l = c.listeners();
        assert_eq!(l.http.unwrap().port(), 8080);
        assert_eq!(l.https.unwrap().port(), 8443);
        assert_eq!(
            ServeConfig::default().tls_names_or_default(),
            ["localhost", "127.0.0.1", "::1"]
        );
    }

    #[test]
    fn bad_tls_settings_name_the_key() {
        for (text, key) in [
            ("tls_cert = \"a.pem\"", "tls_key"),
            ("tls_versions = [\"1.1\"]", "tls_versions"),
            ("tls_versions = []", "tls_versions"),
            ("tls_groups = [\"ffdhe2048\"]", "tls_groups"),
            ("tls_cert_type = \"dsa\"", "tls_cert_type"),
            (
                "tls_handshake_timeout_secs = 0",
                "tls_handshake_timeout_secs",
            ),
            ("tls_max_handshakes = 0", "tls_max_handshakes"),
            (
                "tls_cert = \"a\"\ntls_key = \"b\"\ntls_ca_dir = \"c\"",
                "tls_ca_dir",
            ),
        ] {
            let e = ServeConfig::from_toml(text).unwrap_err().0;
            assert!(e.contains(key), "{text}: {e}");
        }
    }

    #[test]
    fn bad_input_names_the_field() {
        let e = ServeConfig::from_toml("wrokers = 2").unwrap_err().0;
        assert!(e.contains("wrokers"), "{e}");
        let e = ServeConfig::from_toml("cert_type = \"dsa\"").unwrap_err().0;
        assert!(e.contains("cert_type") && e.contains("ecdsa-p256"), "{e}");
        let e = ServeConfig::from_toml("srtp_profiles = [\"NOPE\"]")
            .unwrap_err()
            .0;
        assert!(e.contains("srtp_profiles") && e.contains("NOPE"), "{e}");
        let e = ServeConfig::from_toml("http = \"nowhere\"").unwrap_err().0;
        assert!(e.contains("http"), "{e}");
        let e = ServeConfig::from_toml("srtp_engine = \"gpu\"")
            .unwrap_err()
            .0;
        assert!(e.contains("srtp_engine") && e.contains("simd"), "{e}");
        let e = ServeConfig::from_toml("cert = \"a.pem\"").unwrap_err().0;
        assert!(e.contains("key"), "{e}");
        for bad in [
            "rtp_ports = \"9-3\"",
            "rtp_ports = \"x\"",
            "rtp_ports = \"0-10\"",
        ] {
            let e = ServeConfig::from_toml(bad).unwrap_err().0;
            assert!(e.contains("rtp_ports"), "{e}");
        }
        let e = ServeConfig::from_toml("plain_latch = \"any\"")
            .unwrap_err()
            .0;
        assert!(e.contains("plain_latch") && e.contains("signalled"), "{e}");
        let e = ServeConfig::from_toml("sdes_suites = [\"ROT13\"]")
            .unwrap_err()
            .0;
        assert!(e.contains("sdes_suites") && e.contains("ROT13"), "{e}");
        for bad in ["opus_complexity = 11", "opus_complexity = -1"] {
            let e = ServeConfig::from_toml(bad).unwrap_err().0;
            assert!(
                e.contains("opus_complexity") && e.contains("0 to 10"),
                "{e}"
            );
        }
        assert_eq!(
            ServeConfig::from_toml("opus_complexity = 3")
                .unwrap()
                .opus_complexity,
            3
        );
        let e = ServeConfig::from_toml("ended_resource_grace_secs = -1")
            .unwrap_err()
            .0;
        assert!(e.contains("ended_resource_grace_secs"), "{e}");
        assert_eq!(
            ServeConfig::from_toml("ended_resource_grace_secs = 0")
                .unwrap()
                .ended_resource_grace_secs,
            0.0
        );
    }

    #[test]
    fn source_limits_and_ng_allow_parse_and_name_their_key() {
        let c = ServeConfig::from_toml(
            "max_connections_per_source = 8\nrequests_per_source = 2.5\nrequest_burst_per_source = 5\nng_allow = [\"10.0.0.5\", \"192.0.2.77/24\", \"fd00::/64\"]",
        )
        .unwrap();
        assert_eq!(c.source_limits().connections, 8);
        assert_eq!(c.source_limits().requests_per_sec, 2.5);
        assert_eq!(c.source_limits().burst, 5.0);
        let nets: Vec<String> = c
            .ng_allowed()
            .unwrap()
            .iter()
            .map(|n| n.to_string())
            .collect();
        assert_eq!(nets, ["10.0.0.5/32", "192.0.2.0/24", "fd00::/64"]);
        for (bad, key) in [
            (
                "max_connections_per_source = 0",
                "max_connections_per_source",
            ),
            ("request_burst_per_source = 0", "request_burst_per_source"),
            ("requests_per_source = -1.0", "requests_per_source"),
            ("ng_allow = [\"10.0.0.0/33\"]", "10.0.0.0/33"),
            ("ng_allow = [\"proxy.example\"]", "proxy.example"),
        ] {
            let e = ServeConfig::from_toml(bad).unwrap_err().0;
            assert!(e.contains(key), "{bad}: {e}");
        }
    }
}
