//! The seam between [`crate::endpoint::Endpoint`] and a DTLS implementation.
//!
//! An engine is a sans-IO DTLS state machine for one association. The endpoint drives it
//! (time first, then the datagram, then drains outputs), checks the peer certificate against
//! the expected fingerprint, enforces the SRTP profile policy, splits the keys and turns any
//! panic inside the engine into a failure. Engines therefore only translate.
//!
//! [`DimplEngine`] wraps the `dimpl` crate (DTLS 1.2 and 1.3, the fast default; our certificate
//! ECDSA, the peer's ECDSA or RSA — dimpl is patched to verify RSA, `vendor/dimpl`).
//! `crate::engine_openssl::OpensslEngine` (feature `openssl`, on by default) wraps OpenSSL for
//! what only it covers: an RSA certificate of our own, DHE-RSA, ECDHE-ECDSA-AES128-CCM8, every
//! SRTP profile in a chosen order. [`EngineChoice`] picks one per endpoint.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use zeroize::Zeroizing;

use crate::alert::AlertDescription;
use crate::endpoint::{DtlsVersion, EndpointConfig, FailReason, Role};
use crate::key_cache::SharedKey;

/// What an engine produced. Secrets travel in [`Zeroizing`] buffers.
#[derive(Debug)]
#[non_exhaustive]
pub enum EngineOutput {
    /// A datagram to send to the peer.
    Transmit(Vec<u8>),
    /// Call [`DtlsEngine::handle_timeout`] at (or after) this instant. Always the last output
    /// of a drain.
    Timeout(Instant),
    /// The peer's leaf certificate (DER), as soon as the engine has it.
    PeerCertificate(Vec<u8>),
    /// The `EXTRACTOR-dtls_srtp` block and the negotiated DTLS-SRTP profile identifier
    /// (RFC 5764 §4.1.2, e.g. `0x0001` for SRTP_AES128_CM_SHA1_80).
    KeyingMaterial {
        /// IANA DTLS-SRTP protection profile identifier.
        profile_id: u16,
        /// The exported block, `2 * (key_len + salt_len)` bytes.
        material: Zeroizing<Vec<u8>>,
    },
    /// The handshake completed.
    Connected,
    /// The peer sent `close_notify`.
    PeerClosed,
    /// Application data arrived (data channels' SCTP packets; the endpoint discards it unless
    /// its configuration asks for it).
    ApplicationData(Vec<u8>),
}

/// A sans-IO DTLS state machine for one association.
///
/// Contract: the endpoint calls [`handle_timeout`](Self::handle_timeout) with the current time
/// before every [`handle_datagram`](Self::handle_datagram), and drains
/// [`poll_output`](Self::poll_output) until it returns [`EngineOutput::Timeout`] after every
/// call. Any `Err` is fatal for the association. Implementations should not panic, but the
/// endpoint catches panics anyway. `Debug` must not print secrets.
pub trait DtlsEngine: Send + core::fmt::Debug {
    /// A short name for logs and metrics (`"dimpl"`).
    fn name(&self) -> &'static str;
    /// Advances the engine's clock and fires due retransmission timers.
    fn handle_timeout(&mut self, now: Instant) -> Result<(), FailReason>;
    /// Feeds one received datagram.
    fn handle_datagram(&mut self, datagram: &[u8]) -> Result<(), FailReason>;
    /// The next output; [`EngineOutput::Timeout`] ends a drain.
    fn poll_output(&mut self) -> Result<EngineOutput, FailReason>;
    /// Starts a graceful close (queues `close_notify` when connected).
    fn close(&mut self) -> Result<(), FailReason>;
    /// Protects `data` as one application-data record and queues it as
    /// [`EngineOutput::Transmit`]. Called only once the engine reported
    /// [`EngineOutput::Connected`]; an `Err` is fatal, as for every call. An engine that
    /// carries no application data refuses (the default).
    fn send_application_data(&mut self, data: &[u8]) -> Result<(), FailReason> {
        let _ = data;
        Err(FailReason::Internal)
    }
    /// The negotiated protocol version, once known (`"DTLS 1.2"` or `"DTLS 1.3"`).
    fn protocol_version(&self) -> Option<&'static str>;
    /// The association failed (`alert` says why, RFC 5246 §7.2): give up the handshake and
    /// queue a fatal alert, so that the peer stops retransmitting and can tell its user why.
    /// Drain [`poll_output`](Self::poll_output) afterwards. The default queues nothing, for
    /// an engine whose library already sent its own alert.
    fn abort(&mut self, alert: AlertDescription) -> Result<(), FailReason> {
        let _ = alert;
        Ok(())
    }
    /// Server with its own cookie exchange on, DTLS 1.2, as its first input: takes over a
    /// handshake whose cookie exchange a stateless
    /// [`CookieResponder`](crate::cookie::CookieResponder) did, by being fed the admission's
    /// earlier ClientHellos (dropping what it answers them with: HelloVerifyRequests carrying
    /// the admission's cookie) and then the admitted ClientHello, whose cookie it must accept
    /// (`cookie.rs`, "The hand-off"). Engines that cannot do this refuse (the default).
    fn take_over(&mut self, admission: &crate::cookie::Admission) -> Result<(), FailReason> {
        let _ = admission;
        Err(FailReason::Internal)
    }
}

/// Which DTLS engine an endpoint runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum EngineChoice {
    /// dimpl, unless the configuration needs OpenSSL: our certificate is RSA, a cipher suite
    /// dimpl lacks is asked for (CCM_8, DHE), or SRTP_AES128_CM_SHA1_32 is the preferred SRTP
    /// profile (dimpl never negotiates it). The peer's certificate may be ECDSA or RSA on
    /// either engine. The default.
    #[default]
    Auto,
    /// dimpl: DTLS 1.2 and 1.3, our certificate ECDSA (the peer's ECDSA or RSA), fixed suites
    /// and SRTP profiles.
    Dimpl,
    /// OpenSSL (feature `openssl`): DTLS 1.2, RSA and ECDSA certificates, configurable suites
    /// and SRTP profiles.
    Openssl,
}

/// A DTLS 1.2 cipher suite that can be asked for in
/// [`EndpointConfig::cipher_suites`](crate::endpoint::EndpointConfig::cipher_suites).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CipherSuite {
    /// TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256 (dimpl and OpenSSL).
    EcdheEcdsaAes128GcmSha256,
    /// TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384 (dimpl and OpenSSL).
    EcdheEcdsaAes256GcmSha384,
    /// TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 (OpenSSL; dimpl as a client, verifying the
    /// server's RSA signature).
    EcdheRsaAes128GcmSha256,
    /// TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384 (as TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256).
    EcdheRsaAes256GcmSha384,
    /// TLS_ECDHE_ECDSA_WITH_AES_128_CCM_8, the IoT suite (RFC 7251; OpenSSL).
    EcdheEcdsaAes128Ccm8,
    /// TLS_DHE_RSA_WITH_AES_128_GCM_SHA256 over RFC 7919 ffdhe2048 (OpenSSL).
    DheRsaAes128GcmSha256,
}

impl CipherSuite {
    /// Every suite.
    pub const ALL: [CipherSuite; 6] = [
        CipherSuite::EcdheEcdsaAes128GcmSha256,
        CipherSuite::EcdheEcdsaAes256GcmSha384,
        CipherSuite::EcdheRsaAes128GcmSha256,
        CipherSuite::EcdheRsaAes256GcmSha384,
        CipherSuite::EcdheEcdsaAes128Ccm8,
        CipherSuite::DheRsaAes128GcmSha256,
    ];

    /// OpenSSL's name for the suite (`ECDHE-ECDSA-AES128-GCM-SHA256`).
    pub fn openssl_name(self) -> &'static str {
        match self {
            CipherSuite::EcdheEcdsaAes128GcmSha256 => "ECDHE-ECDSA-AES128-GCM-SHA256",
            CipherSuite::EcdheEcdsaAes256GcmSha384 => "ECDHE-ECDSA-AES256-GCM-SHA384",
            CipherSuite::EcdheRsaAes128GcmSha256 => "ECDHE-RSA-AES128-GCM-SHA256",
            CipherSuite::EcdheRsaAes256GcmSha384 => "ECDHE-RSA-AES256-GCM-SHA384",
            CipherSuite::EcdheEcdsaAes128Ccm8 => "ECDHE-ECDSA-AES128-CCM8",
            CipherSuite::DheRsaAes128GcmSha256 => "DHE-RSA-AES128-GCM-SHA256",
        }
    }

    /// Whether dimpl (0.9, patched) implements the suite. The ECDHE-RSA suites only as a
    /// client: dimpl never signs with RSA.
    pub fn dimpl_has(self) -> bool {
        self.dimpl_suite().is_some()
    }

    /// dimpl's identifier for the suite, if dimpl implements it.
    fn dimpl_suite(self) -> Option<dimpl::crypto::Dtls12CipherSuite> {
        use dimpl::crypto::Dtls12CipherSuite as D;
        match self {
            CipherSuite::EcdheEcdsaAes128GcmSha256 => Some(D::ECDHE_ECDSA_AES128_GCM_SHA256),
            CipherSuite::EcdheEcdsaAes256GcmSha384 => Some(D::ECDHE_ECDSA_AES256_GCM_SHA384),
            CipherSuite::EcdheRsaAes128GcmSha256 => Some(D::ECDHE_RSA_AES128_GCM_SHA256),
            CipherSuite::EcdheRsaAes256GcmSha384 => Some(D::ECDHE_RSA_AES256_GCM_SHA384),
            _ => None,
        }
    }
}

/// An ECDHE group for the handshake's key exchange. See
/// [`EndpointConfig::ecdhe_groups`](crate::endpoint::EndpointConfig::ecdhe_groups).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum EcdheGroup {
    /// X25519 (RFC 7748): the fastest; both engines' first choice by default.
    X25519,
    /// NIST P-256 (secp256r1): what most WebRTC and SIP peers offer.
    P256,
    /// NIST P-384 (secp384r1).
    P384,
}

impl EcdheGroup {
    /// Every group, in the engines' default order of preference.
    pub const ALL: [EcdheGroup; 3] = [EcdheGroup::X25519, EcdheGroup::P256, EcdheGroup::P384];

    /// OpenSSL's name for the group (`X25519`, `P-256`, `P-384`).
    pub fn openssl_name(self) -> &'static str {
        match self {
            EcdheGroup::X25519 => "X25519",
            EcdheGroup::P256 => "P-256",
            EcdheGroup::P384 => "P-384",
        }
    }

    fn dimpl_group(self) -> dimpl::crypto::NamedGroup {
        use dimpl::crypto::NamedGroup as G;
        match self {
            EcdheGroup::X25519 => G::X25519,
            EcdheGroup::P256 => G::Secp256r1,
            EcdheGroup::P384 => G::Secp384r1,
        }
    }
}

impl core::fmt::Display for EcdheGroup {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.openssl_name())
    }
}

impl core::str::FromStr for EcdheGroup {
    type Err = String;
    /// `x25519`, `p-256`/`p256`/`secp256r1`, `p-384`/`p384`/`secp384r1` (any case).
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "x25519" => Ok(EcdheGroup::X25519),
            "p-256" | "p256" | "secp256r1" | "prime256v1" => Ok(EcdheGroup::P256),
            "p-384" | "p384" | "secp384r1" => Ok(EcdheGroup::P384),
            other => Err(format!(
                "unknown ECDHE group {other:?} (expected x25519, p-256 or p-384)"
            )),
        }
    }
}

/// The largest datagram the engine may ask us to buffer before we call it a bug.
const MAX_POLL_BUFFER: usize = 64 * 1024;

/// [`DtlsEngine`] over `dimpl` 0.9 (patched: `vendor/dimpl/SECRELAY-PATCH.md`).
///
/// Our certificate must be ECDSA; the peer's may be ECDSA or RSA (2048–8192 bits, RSASSA-PKCS1
/// v1.5 with SHA-256 or SHA-384): as a client dimpl offers TLS_ECDHE_RSA_WITH_AES_256/128_GCM
/// after its ECDHE-ECDSA suites, as a server its CertificateRequest asks for RSA_SIGN as well
/// as ECDSA_SIGN. A failure found while the handshake runs is answered with a fatal alert
/// ([`DtlsEngine::abort`]).
///
/// What dimpl lets us set: DTLS version (1.2, 1.3, or auto-sensed), MTU, the initial
/// retransmission timeout (doubled per retry with ±25% jitter), the retry count per flight, an
/// overall handshake deadline, the server cookie exchange on/off, and mutual certificate
/// authentication. What it does not: the SRTP profile list (it always offers
/// AEAD_AES_256_GCM, AEAD_AES_128_GCM and SRTP_AES128_CM_SHA1_80, and a DTLS 1.2 server picks in
/// that order; SRTP_AES128_CM_SHA1_32 is never negotiated), a maximum RTO, certificate chains
/// (only the leaf is sent), RSA keys. A non-empty
/// [`EndpointConfig::cipher_suites`](crate::endpoint::EndpointConfig::cipher_suites) restricts
/// the DTLS 1.2 suites dimpl offers and accepts to that list (dimpl's own preference order; a
/// list without an ECDHE-RSA suite also stops RSA client certificates being asked for); a
/// non-empty [`EndpointConfig::ecdhe_groups`](crate::endpoint::EndpointConfig::ecdhe_groups)
/// restricts the ECDHE groups it offers and accepts (again in dimpl's own order: X25519, P-256,
/// P-384).
pub struct DimplEngine {
    dtls: dimpl::Dtls,
    buf: Vec<u8>,
    /// Whether a datagram we handed out carried an epoch-1 record (our ChangeCipherSpec went
    /// out): the peer then reads our alerts under the new keys.
    sent_epoch1: bool,
    /// Whether dimpl reported the handshake complete.
    connected: bool,
    /// Keeps the certificate's parsed key registered while the association may load it.
    _key: Option<Arc<SharedKey>>,
}

impl core::fmt::Debug for DimplEngine {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("DimplEngine")
            .field("dtls", &self.dtls)
            .finish_non_exhaustive()
    }
}

/// Why an engine could not be built from a configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum EngineConfigError {
    /// The certificate is empty.
    EmptyCertificate,
    /// The private key does not parse as a key the engine can sign with (ECDSA for dimpl;
    /// ECDSA or RSA for OpenSSL), or does not match the certificate.
    PrivateKey,
    /// The engine refused a setting (MTU too small, zero timeout, ...); the text says which.
    Setting(String),
    /// The engine panicked while being built.
    Panicked,
}

impl core::fmt::Display for EngineConfigError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            EngineConfigError::EmptyCertificate => write!(f, "the certificate is empty"),
            EngineConfigError::PrivateKey => {
                write!(
                    f,
                    "the private key is not usable by the DTLS engine (dimpl: ECDSA PKCS#8/SEC1; OpenSSL: also RSA) or does not match the certificate"
                )
            }
            EngineConfigError::Setting(s) => write!(f, "DTLS engine refused a setting: {s}"),
            EngineConfigError::Panicked => write!(f, "the DTLS engine panicked while starting"),
        }
    }
}

impl std::error::Error for EngineConfigError {}

impl DimplEngine {
    /// Builds a dimpl association for `config`, with its clock at `now`.
    ///
    /// The caller (the endpoint) wraps this in `catch_unwind`; invalid keys are also checked
    /// up front so that dimpl's own `expect` on them cannot fire.
    pub fn new(config: &EndpointConfig, now: Instant) -> Result<DimplEngine, EngineConfigError> {
        if let Some(s) = config.cipher_suites.iter().find(|s| !s.dimpl_has()) {
            return Err(EngineConfigError::Setting(format!(
                "dimpl does not implement {}",
                s.openssl_name()
            )));
        }
        let cert = &config.certificate;
        let Some(leaf) = cert.chain_der.first().filter(|c| !c.is_empty()) else {
            return Err(EngineConfigError::EmptyCertificate);
        };
        let dcfg = shared_config(config)?;
        // The key parsed once per certificate; dimpl's provider then answers from the cache
        // (`key_cache`), where it used to parse the DER again for every association.
        let shared_key = cert
            .shared_key
            .get_or_init(|| SharedKey::parse(&cert.private_key_der))
            .clone();
        // dimpl `expect`s on an unparsable key inside `Dtls::new_*`: check it first (once per
        // certificate: the answer is shared by the certificate's clones).
        let usable = shared_key.is_some()
            || *cert.key_usable.get_or_init(|| {
                dcfg.crypto_provider()
                    .key_provider
                    .load_private_key(&cert.private_key_der)
                    .is_ok()
            });
        if !usable {
            return Err(EngineConfigError::PrivateKey);
        }
        let dcert = dimpl::DtlsCertificate {
            certificate: leaf.clone(),
            private_key: cert.private_key_der.to_vec(),
        };
        let mut dtls = match config.version {
            DtlsVersion::Dtls12 => dimpl::Dtls::new_12(dcfg, dcert, now),
            DtlsVersion::Dtls13 => dimpl::Dtls::new_13(dcfg, dcert, now),
            DtlsVersion::Auto => dimpl::Dtls::new_auto(dcfg, dcert, now),
        };
        dtls.set_active(config.role == Role::Client);
        Ok(DimplEngine {
            dtls,
            sent_epoch1: false,
            connected: false,
            _key: shared_key,
            buf: vec![0; config.mtu.max(2048)],
        })
    }
}

/// The settings a dimpl `Config` is built from.
type ConfigKey = (
    usize,
    Duration,
    usize,
    Duration,
    bool,
    Vec<CipherSuite>,
    Vec<EcdheGroup>,
    bool,
);

/// Built configurations with the settings they were built from.
type ConfigCache = Mutex<Vec<(ConfigKey, Arc<dimpl::Config>)>>;

/// dimpl configurations already built, by settings.
///
/// `dimpl::Config::build` validates its crypto provider every time (test key exchanges on
/// X25519, P-256 and P-384 and a test signature per suite): ~0.7 ms, several times the cost of
/// the handshake's own crypto. Endpoints with the same settings share one `Config`. The lock
/// is taken once per endpoint created, never on the packet path.
fn shared_config(config: &EndpointConfig) -> Result<Arc<dimpl::Config>, EngineConfigError> {
    static BUILT: OnceLock<ConfigCache> = OnceLock::new();
    let t = &config.timers;
    let key: ConfigKey = (
        config.mtu,
        t.initial_rto,
        t.max_retransmissions,
        t.handshake_timeout,
        config.server_cookies,
        config.cipher_suites.clone(),
        config.ecdhe_groups.clone(),
        config.time_crypto,
    );
    let built = BUILT.get_or_init(|| Mutex::new(Vec::new()));
    // A poisoned lock only means another thread panicked while building; the list is intact.
    let mut list = built.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, c)) = list.iter().find(|(k, _)| *k == key) {
        return Ok(c.clone());
    }
    let mut builder = dimpl::Config::builder()
        .with_crypto_provider(if config.time_crypto {
            crate::crypto_time::timed_provider()
        } else {
            crate::provider::crypto_provider()
        })
        .mtu(config.mtu)
        .flight_start_rto(t.initial_rto)
        .flight_retries(t.max_retransmissions)
        .handshake_timeout(t.handshake_timeout)
        .use_server_cookie(config.server_cookies)
        .require_client_certificate(true);
    if !config.cipher_suites.is_empty() {
        // Offer and accept exactly the listed DTLS 1.2 suites (every one is a dimpl suite:
        // `DimplEngine::new` refused the others before we got here).
        let suites: Vec<dimpl::crypto::Dtls12CipherSuite> = config
            .cipher_suites
            .iter()
            .filter_map(|s| s.dimpl_suite())
            .collect();
        builder = builder.dtls12_cipher_suites(&suites);
    }
    if !config.ecdhe_groups.is_empty() {
        let groups: Vec<dimpl::crypto::NamedGroup> = config
            .ecdhe_groups
            .iter()
            .map(|g| g.dimpl_group())
            .collect();
        builder = builder.kx_groups(&groups);
    }
    let c = Arc::new(
        builder
            .build()
            .map_err(|e| EngineConfigError::Setting(format!("{e:?}")))?,
    );
    // Settings come from operators, not peers, so the list stays small; cap it anyway.
    if list.len() >= 64 {
        list.remove(0);
    }
    list.push((key, c.clone()));
    Ok(c)
}

/// Maps a fatal dimpl error to a reason, keeping the peer's misbehaviour apart from ours.
fn reason(e: &dimpl::Error) -> FailReason {
    use dimpl::Error as E;
    match e {
        E::Timeout(_) => FailReason::HandshakeTimeout,
        E::SecurityError(dimpl::SecurityError::NoMutuallyAcceptableCipherSuite) => {
            FailReason::NoCommonCipherSuite
        }
        E::SecurityError(dimpl::SecurityError::FatalAlert { description }) => {
            FailReason::PeerAlert(AlertDescription::from_code(*description))
        }
        E::CertificateError(
            dimpl::CertificateError::NoClientCertificateReceived
            | dimpl::CertificateError::NoServerCertificateReceived,
        ) => FailReason::NoPeerCertificate,
        E::CertificateError(_) => FailReason::PeerCertificate,
        E::CryptoError(_) => FailReason::HandshakeFailure,
        E::UnexpectedMessage(_)
        | E::SecurityError(_)
        | E::IncompleteServerHello
        | E::RenegotiationAttempt
        | E::TooManyClientHelloFragments
        | E::PskError(_) => FailReason::Protocol,
        E::ReceiveQueueFull | E::TransmitQueueFull | E::TransmitHistoryFull => {
            FailReason::Overloaded
        }
        _ => FailReason::Internal,
    }
}

fn srtp_profile_id(p: dimpl::SrtpProfile) -> Option<u16> {
    match p {
        dimpl::SrtpProfile::AES128_CM_SHA1_80 => Some(0x0001),
        dimpl::SrtpProfile::AEAD_AES_128_GCM => Some(0x0007),
        dimpl::SrtpProfile::AEAD_AES_256_GCM => Some(0x0008),
        _ => None,
    }
}

impl DtlsEngine for DimplEngine {
    fn name(&self) -> &'static str {
        "dimpl"
    }

    fn handle_timeout(&mut self, now: Instant) -> Result<(), FailReason> {
        self.dtls.handle_timeout(now).map_err(|e| reason(&e))
    }

    fn handle_datagram(&mut self, datagram: &[u8]) -> Result<(), FailReason> {
        self.dtls.handle_packet(datagram).map_err(|e| reason(&e))
    }

    fn poll_output(&mut self) -> Result<EngineOutput, FailReason> {
        loop {
            let out = match self.dtls.poll_output(&mut self.buf) {
                dimpl::Output::Packet(p) => {
                    if !self.sent_epoch1 {
                        self.sent_epoch1 = crate::record::carries_epoch1(p);
                    }
                    EngineOutput::Transmit(p.to_vec())
                }
                dimpl::Output::BufferTooSmall { needed } => {
                    if needed > MAX_POLL_BUFFER || needed <= self.buf.len() {
                        return Err(FailReason::Internal);
                    }
                    self.buf.resize(needed, 0);
                    continue;
                }
                dimpl::Output::Timeout(t) => EngineOutput::Timeout(t),
                dimpl::Output::Connected => {
                    self.connected = true;
                    EngineOutput::Connected
                }
                dimpl::Output::PeerCert(der) => EngineOutput::PeerCertificate(der.to_vec()),
                dimpl::Output::KeyingMaterial(km, profile) => {
                    let material = Zeroizing::new(km.to_vec());
                    // dimpl's own copy is a plain Vec: it is dropped here, unwiped (reported).
                    drop(km);
                    match srtp_profile_id(profile) {
                        Some(profile_id) => EngineOutput::KeyingMaterial {
                            profile_id,
                            material,
                        },
                        None => return Err(FailReason::NoCommonSrtpProfile),
                    }
                }
                dimpl::Output::ApplicationData(d) => EngineOutput::ApplicationData(d.to_vec()),
                dimpl::Output::CloseNotify => EngineOutput::PeerClosed,
                _ => continue,
            };
            return Ok(out);
        }
    }

    fn close(&mut self) -> Result<(), FailReason> {
        self.dtls.close().map_err(|e| reason(&e))
    }

    fn send_application_data(&mut self, data: &[u8]) -> Result<(), FailReason> {
        match self.dtls.send_application_data(data) {
            // dimpl takes all of it or, before its version is known, none.
            Ok(n) if n == data.len() => Ok(()),
            Ok(_) => Err(FailReason::Internal),
            Err(e) => Err(reason(&e)),
        }
    }

    /// DTLS 1.2: a fatal alert in the epoch the peer reads from us (plaintext until our
    /// ChangeCipherSpec went out, under the new keys after); what dimpl had queued and not yet
    /// handed out (the rest of a flight) is dropped. DTLS 1.3: dimpl sends no fatal alert, and
    /// cannot drop a queued flight (whose Finished must not go out): nothing during the
    /// handshake, `close_notify` once dimpl reported it complete (the endpoint refused its
    /// keys).
    fn abort(&mut self, alert: AlertDescription) -> Result<(), FailReason> {
        if self.dtls.protocol_version() == Some(dimpl::ProtocolVersion::DTLS1_2) {
            self.dtls
                .abort_with_alert(alert.code(), self.sent_epoch1)
                .map_err(|e| reason(&e))
        } else if self.connected {
            self.dtls.close().map_err(|e| reason(&e))
        } else {
            Ok(())
        }
    }

    fn protocol_version(&self) -> Option<&'static str> {
        match self.dtls.protocol_version()? {
            dimpl::ProtocolVersion::DTLS1_2 => Some("DTLS 1.2"),
            dimpl::ProtocolVersion::DTLS1_3 => Some("DTLS 1.3"),
            _ => None,
        }
    }

    /// dimpl's DTLS 1.2 server computes its cookie through secrelay's provider, which answers
    /// with the admission's cookie for the admission's client random while the pin lives.
    fn take_over(&mut self, admission: &crate::cookie::Admission) -> Result<(), FailReason> {
        let _pin = crate::provider::pin_cookie(admission.client_random(), admission.cookie());
        for hello in admission.earlier_hellos() {
            self.dtls.handle_packet(hello).map_err(|e| reason(&e))?;
            // Its HelloVerifyRequest: the client has the responder's, with the same cookie.
            loop {
                match self.dtls.poll_output(&mut self.buf) {
                    dimpl::Output::Packet(_) => {}
                    dimpl::Output::Timeout(_) => break,
                    dimpl::Output::BufferTooSmall { needed } => {
                        if needed > MAX_POLL_BUFFER || needed <= self.buf.len() {
                            return Err(FailReason::Internal);
                        }
                        self.buf.resize(needed, 0);
                    }
                    // Nothing but a HelloVerifyRequest can come of a ClientHello without a
                    // cookie.
                    _ => return Err(FailReason::Internal),
                }
            }
        }
        self.dtls
            .handle_packet(admission.hello())
            .map_err(|e| reason(&e))
    }
}

/// Timer defaults: 1 s initial RTO (RFC 6347 §4.2.4.1), six retries per flight, a 30 s
/// overall handshake deadline. A 300 ms RTT link never trips the first retransmission.
pub(crate) const DEFAULT_INITIAL_RTO: Duration = Duration::from_secs(1);
pub(crate) const DEFAULT_MAX_RETRANSMISSIONS: usize = 6;
pub(crate) const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);
