//! `secrelay serve`'s configuration: TOML, every field optional, the defaults run with no file.
//! Unknown keys are errors that name the key, so a typo never silently does nothing.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use secrelay_dtls::KeyType;
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
    /// HTTP signaling and operations (WHIP, WHEP, rooms, /api, /metrics, /healthz).
    pub http: SocketAddr,
    /// The one UDP address every participant's ICE, DTLS and SRTP use.
    pub udp: SocketAddr,
    /// The ng control socket for SIP proxies (rtpengine's protocol, UDP); none by default.
    pub ng: Option<SocketAddr>,
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
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            http: "127.0.0.1:8080".parse().expect("a valid literal address"),
            udp: "0.0.0.0:40000".parse().expect("a valid literal address"),
            ng: None,
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
            max_body_bytes: 64 * 1024,
            cors_origins: vec!["*".into()],
            token: None,
            drain_secs: 1.0,
            rooms: BTreeMap::new(),
            srtp_engine: "simd".into(),
            rtp_ports: "30000-39999".into(),
            sdes_suites: secrelay_gateway_default_suites(),
            plain_latch: "signalled".into(),
            nat_latch_packets: 10,
            media_timeout_secs: 60.0,
            rtcp_interval_secs: 5.0,
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
        if self.max_body_bytes < 1024 {
            return Err(ConfigError(format!(
                "max_body_bytes = {}: an SDP offer needs at least 1024",
                self.max_body_bytes
            )));
        }
        Ok(())
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
        assert_eq!(c.http.port(), 9000);
        assert_eq!(c.worker_count(), 3);
        assert_eq!(c.token_for("board"), Some("secret"));
        assert_eq!(c.token_for("other"), Some("t0"));
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
    }
}
