//! A sans-IO DTLS-SRTP endpoint (RFC 5763, RFC 5764): datagrams and an injected [`Instant`] in;
//! datagrams, one timer deadline and events out.
//!
//! # Drive contract
//! After **every** input — [`Endpoint::new`], [`Endpoint::handle_datagram`],
//! [`Endpoint::handle_timeout`], [`Endpoint::close`] — drain [`Endpoint::poll_output`] until it
//! returns [`Output::Timeout`] (then call `handle_timeout` at that instant, or earlier when a
//! datagram arrives) or `None` (the endpoint is finished: it has reported
//! [`Event::Connected`]-then-[`Event::Closed`], or [`Event::Failed`], and ignores further input).
//! Time is never read inside; pass the current time in. Earlier instants than one already seen
//! are treated as the latest one seen.
//!
//! ```no_run
//! # use std::time::Instant;
//! # use secrelay_dtls::endpoint::{Endpoint, EndpointConfig, Event, Output};
//! # fn send(_: &[u8]) {}
//! # fn drive(config: EndpointConfig) {
//! let mut ep = Endpoint::new(config, Instant::now()).expect("valid config");
//! let mut next_timer = None;
//! while let Some(out) = ep.poll_output() {
//!     match out {
//!         Output::Transmit(datagram) => send(&datagram),
//!         Output::Timeout(at) => { next_timer = Some(at); break; }
//!         Output::Event(Event::Connected { keys, .. }) => { /* build SRTP contexts */ }
//!         Output::Event(_) => {}
//!     }
//! }
//! # let _ = next_timer;
//! # }
//! ```
//!
//! # Failure model
//! Nothing from the network can make the endpoint panic: every call into the engine runs under
//! `catch_unwind`; a caught panic ends the endpoint with [`FailReason::Internal`] (and is counted
//! in [`Counters::panics_caught`]). Timer deadlines are handed out at least 1 ms after the
//! input that produced them, and an engine that keeps asking to be woken at once is stopped
//! ([`FailReason::Internal`], [`Counters::runaway_timers`]). Any failure is final: the engine is dropped and later input
//! is counted in [`Counters::datagrams_ignored`]. Before it is dropped, a failure the peer can
//! be told about ([`FailReason::alert`]: not a timeout, not the peer's own alert) is answered
//! with a fatal alert ([`Counters::alerts_sent`]), queued before [`Event::Failed`], so the peer
//! stops retransmitting and can say why.

use std::collections::VecDeque;
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use secrelay_srtp::Profile;
use zeroize::Zeroizing;

use crate::alert::AlertDescription;
use crate::engine::{
    CipherSuite, DimplEngine, DtlsEngine, EcdheGroup, EngineChoice, EngineConfigError,
    EngineOutput, DEFAULT_HANDSHAKE_TIMEOUT, DEFAULT_INITIAL_RTO, DEFAULT_MAX_RETRANSMISSIONS,
};
use crate::fingerprint::Fingerprint;
use crate::keying::{ExportedKeyingMaterial, SrtpKeys};

/// Which side of the DTLS handshake this endpoint plays (RFC 5763 `a=setup`: `active` is the
/// client, `passive` the server).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// Sends the ClientHello (`a=setup:active`).
    Client,
    /// Answers ClientHellos (`a=setup:passive`).
    Server,
}

/// Which DTLS version the engine speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum DtlsVersion {
    /// DTLS 1.2 only (RFC 6347): what browsers speak today. The default.
    #[default]
    Dtls12,
    /// DTLS 1.3 only (RFC 9147).
    Dtls13,
    /// Server: take the version from the ClientHello. Client: send a ClientHello that suits
    /// both and follow the server.
    Auto,
}

/// Our certificate: a DER chain (leaf first) and its private key (PKCS#8 DER; dimpl also takes
/// SEC1). The key is wiped on drop and never printed.
#[derive(Clone)]
pub struct LocalCertificate {
    /// DER certificates, leaf first. The dimpl engine sends only the leaf.
    pub chain_der: Vec<Vec<u8>>,
    pub(crate) private_key_der: Zeroizing<Vec<u8>>,
    /// Whether the engine can load the key, checked once and shared by the clones (a server
    /// makes one endpoint per peer from one certificate; parsing the key each time cost ~10 µs).
    pub(crate) key_usable: Arc<OnceLock<bool>>,
    /// The ECDSA key parsed once for every association made from this certificate (`None`
    /// for other keys); see [`crate::key_cache`].
    pub(crate) shared_key: Arc<OnceLock<Option<Arc<crate::key_cache::SharedKey>>>>,
    /// Whether the leaf carries an RSA key, checked once and shared by the clones.
    rsa: Arc<OnceLock<bool>>,
}

impl LocalCertificate {
    /// A certificate chain (leaf first) and the leaf's private key (PKCS#8 DER).
    pub fn new(chain_der: Vec<Vec<u8>>, private_key_der: &[u8]) -> Self {
        LocalCertificate {
            chain_der,
            private_key_der: Zeroizing::new(private_key_der.to_vec()),
            key_usable: Arc::new(OnceLock::new()),
            shared_key: Arc::new(OnceLock::new()),
            rsa: Arc::new(OnceLock::new()),
        }
    }

    /// Whether the leaf certificate's key is RSA (`rsaEncryption`). An unparsable leaf is not.
    pub fn is_rsa(&self) -> bool {
        *self.rsa.get_or_init(|| {
            self.leaf_der()
                .and_then(|der| x509_parser::parse_x509_certificate(der).ok())
                .is_some_and(|(_, c)| {
                    c.public_key().algorithm.algorithm.to_id_string() == "1.2.840.113549.1.1.1"
                })
        })
    }

    /// The leaf certificate (DER), if the chain is not empty.
    pub fn leaf_der(&self) -> Option<&[u8]> {
        self.chain_der.first().map(Vec::as_slice)
    }

    /// SHA-256 of the leaf certificate: what the peer puts in its expected fingerprint.
    pub fn fingerprint(&self) -> Option<Fingerprint> {
        self.leaf_der()
            .map(|der| Fingerprint::of(der, crate::fingerprint::HashAlgorithm::Sha256))
    }
}

impl From<&crate::cert::Certificate> for LocalCertificate {
    fn from(c: &crate::cert::Certificate) -> Self {
        LocalCertificate::new(c.chain().to_vec(), c.private_key_der())
    }
}

impl fmt::Debug for LocalCertificate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalCertificate")
            .field("chain_len", &self.chain_der.len())
            .field("private_key", &"<redacted>")
            .finish()
    }
}

/// Handshake retransmission timers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timers {
    /// First retransmission timeout; doubled for every retry (with ±25% jitter in dimpl).
    /// Default 1 s (RFC 6347 §4.2.4.1), comfortably above a 300 ms RTT.
    pub initial_rto: Duration,
    /// Retransmissions per flight before giving up. Default 6. dimpl has no maximum RTO, so
    /// this bounds the backoff instead.
    pub max_retransmissions: usize,
    /// Deadline for the whole handshake. Default 30 s.
    pub handshake_timeout: Duration,
}

impl Default for Timers {
    fn default() -> Self {
        Timers {
            initial_rto: DEFAULT_INITIAL_RTO,
            max_retransmissions: DEFAULT_MAX_RETRANSMISSIONS,
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
        }
    }
}

/// The SRTP profiles we accept by default, most preferred first. The first three are dimpl's
/// own fixed order (see [`DIMPL_SRTP_ORDER`]), so the default stays on the fast engine and the
/// order stated here is the order negotiated.
pub const DEFAULT_SRTP_PROFILES: [Profile; 4] = [
    Profile::AeadAes256Gcm,
    Profile::AeadAes128Gcm,
    Profile::AesCm128HmacSha1_80,
    Profile::AesCm128HmacSha1_32,
];

/// dimpl 0.9 cannot be told which SRTP profiles to use: a dimpl client offers these three, a
/// dimpl server picks the first of these the client offers, in this order.
pub const DIMPL_SRTP_ORDER: [Profile; 3] = [
    Profile::AeadAes256Gcm,
    Profile::AeadAes128Gcm,
    Profile::AesCm128HmacSha1_80,
];

/// Whether dimpl's fixed SRTP behaviour gives what `profiles` (most preferred first) asks
/// for, in `role`. A server: the profiles dimpl knows must come first, as a prefix of
/// [`DIMPL_SRTP_ORDER`] (else dimpl could pick one we refuse, or one we rank lower, while a
/// better common one exists). A client: all three (else the server could pick one dimpl
/// offered and we refuse). Profiles dimpl lacks (SRTP_AES128_CM_SHA1_32) may follow: they are
/// accepted but never negotiated by dimpl.
pub fn dimpl_honours_srtp_preference(role: Role, profiles: &[Profile]) -> bool {
    let k = profiles
        .iter()
        .take_while(|p| DIMPL_SRTP_ORDER.contains(p))
        .count();
    let rest_unknown_to_dimpl = profiles[k..].iter().all(|p| !DIMPL_SRTP_ORDER.contains(p));
    let needed = match role {
        Role::Client => DIMPL_SRTP_ORDER.len(),
        Role::Server => 1,
    };
    rest_unknown_to_dimpl && profiles[..k] == DIMPL_SRTP_ORDER[..k] && k >= needed
}

/// Default MTU for handshake datagrams (dimpl's default; fits IPv6 + TURN framing).
pub const DEFAULT_MTU: usize = 1150;

/// How an endpoint checks the certificate its peer presents.
#[derive(Clone)]
#[non_exhaustive]
pub enum PeerAuth {
    /// The fingerprint the peer announced in signaling (RFC 5763, RFC 8122), compared in
    /// constant time. The WebRTC way.
    Fingerprint(Fingerprint),
    /// A chain to this private CA (DER), with the usage the peer's role needs (clientAuth for
    /// a client, serverAuth for a server), valid at the wall-clock time `clock` gives.
    Ca {
        /// The CA certificate, DER.
        ca_der: Vec<u8>,
        /// Wall-clock time for the validity check (injected: `SystemTime::now` in service,
        /// a fixed time in tests).
        clock: fn() -> SystemTime,
    },
    /// Any certificate at all. For load generators and labs only: it authenticates nobody.
    AnyCertificate,
}

impl PeerAuth {
    /// Verification against the CA certificate `ca_der`, at the system's time.
    pub fn ca(ca_der: Vec<u8>) -> Self {
        PeerAuth::Ca {
            ca_der,
            clock: SystemTime::now,
        }
    }

    /// Checks `peer_der`, the certificate of a peer playing `peer_role`.
    pub(crate) fn check(&self, peer_der: &[u8], peer_role: Role) -> Result<(), FailReason> {
        match self {
            PeerAuth::Fingerprint(fp) => {
                if fp.matches(peer_der) {
                    Ok(())
                } else {
                    Err(FailReason::FingerprintMismatch)
                }
            }
            PeerAuth::Ca { ca_der, clock } => {
                let usage = match peer_role {
                    Role::Client => crate::ca::Role::Client,
                    Role::Server => crate::ca::Role::Server,
                };
                crate::ca::verify_chain(&[peer_der.to_vec()], ca_der, clock(), usage)
                    .map_err(|_| FailReason::UntrustedCertificate)
            }
            PeerAuth::AnyCertificate => Ok(()),
        }
    }
}

impl From<Fingerprint> for PeerAuth {
    fn from(fp: Fingerprint) -> Self {
        PeerAuth::Fingerprint(fp)
    }
}

impl fmt::Debug for PeerAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PeerAuth::Fingerprint(fp) => write!(f, "Fingerprint({fp})"),
            PeerAuth::Ca { ca_der, .. } => {
                write!(
                    f,
                    "Ca({})",
                    Fingerprint::of(ca_der, crate::fingerprint::HashAlgorithm::Sha256)
                )
            }
            PeerAuth::AnyCertificate => f.write_str("AnyCertificate"),
        }
    }
}

/// Everything an [`Endpoint`] needs.
#[derive(Clone)]
pub struct EndpointConfig {
    /// Client or server.
    pub role: Role,
    /// DTLS version(s) to speak.
    pub version: DtlsVersion,
    /// Our certificate and key.
    pub certificate: LocalCertificate,
    /// How the peer's certificate is checked: against the fingerprint from its SDP
    /// `a=fingerprint` (a mismatch fails with [`FailReason::FingerprintMismatch`]), or against a
    /// private CA (failing with [`FailReason::UntrustedCertificate`]).
    pub peer_auth: PeerAuth,
    /// SRTP profiles we accept, most preferred first. A negotiated profile outside this list
    /// fails with [`FailReason::NoCommonSrtpProfile`]. (The dimpl engine cannot restrict what
    /// it offers or picks; this list is enforced after negotiation — see [`DimplEngine`]. The
    /// OpenSSL engine offers exactly this list, in this order, and as a server picks by it.)
    pub srtp_profiles: Vec<Profile>,
    /// Retransmission timers and the overall deadline.
    pub timers: Timers,
    /// Largest datagram the handshake may produce.
    pub mtu: usize,
    /// Server only: demand a cookie round trip (HelloVerifyRequest in DTLS 1.2,
    /// HelloRetryRequest in 1.3) before any work. On by default; keep it on. It is per
    /// endpoint, so it saves no state by itself: a server that makes endpoints per source
    /// address answers first ClientHellos with a stateless
    /// [`crate::cookie::CookieResponder`] and makes the endpoint with
    /// [`Endpoint::new_admitted`] (which runs the engine with its cookie exchange on whatever
    /// this says).
    pub server_cookies: bool,
    /// Which DTLS engine to run on ([`EngineChoice::Auto`] by default: dimpl unless the
    /// configuration needs OpenSSL; see [`EndpointConfig::resolved_engine`]).
    pub engine: EngineChoice,
    /// DTLS 1.2 cipher suites, most preferred first; empty (the default) for the engine's own
    /// list. dimpl offers and accepts exactly the listed suites (in its own order of
    /// preference) and refuses a list naming one it lacks; a list without an ECDHE-RSA suite
    /// also stops a dimpl server asking for RSA client certificates (RSA peers are accepted
    /// only where an ECDHE-RSA suite is configured, as it is by default).
    pub cipher_suites: Vec<CipherSuite>,
    /// ECDHE groups offered (client) and accepted (server), most preferred first; empty (the
    /// default) for the engine's own list (X25519, P-256, P-384). The OpenSSL engine uses this
    /// order; dimpl restricts to the list but keeps its own order. In DTLS 1.2 a client's
    /// groups also name the curves it accepts in the server's ECDSA certificate, so a list
    /// without the certificate's curve fails against OpenSSL peers.
    pub ecdhe_groups: Vec<EcdheGroup>,
    /// dimpl engine only, for the lab: time every call into the crypto provider on this
    /// thread, by part ([`crate::crypto_time`]). Off by default (it costs ~2–3 µs per
    /// handshake).
    pub time_crypto: bool,
    /// Hand the peer's application data out as [`Event::ApplicationData`] and allow
    /// [`Endpoint::send_application_data`] (WebRTC data channels: SCTP over DTLS). Off by
    /// default: DTLS-SRTP alone carries none, and what arrives is discarded and counted.
    pub application_data: bool,
}

impl EndpointConfig {
    /// A configuration with the defaults: DTLS 1.2, [`DEFAULT_SRTP_PROFILES`],
    /// [`Timers::default`], [`DEFAULT_MTU`], server cookies on.
    pub fn new(role: Role, certificate: LocalCertificate, peer_auth: impl Into<PeerAuth>) -> Self {
        EndpointConfig {
            role,
            version: DtlsVersion::default(),
            certificate,
            peer_auth: peer_auth.into(),
            srtp_profiles: DEFAULT_SRTP_PROFILES.to_vec(),
            timers: Timers::default(),
            mtu: DEFAULT_MTU,
            server_cookies: true,
            engine: EngineChoice::Auto,
            cipher_suites: Vec::new(),
            ecdhe_groups: Vec::new(),
            time_crypto: false,
            application_data: false,
        }
    }

    /// The engine [`EndpointConfig::engine`] resolves to: [`EngineChoice::Dimpl`] or
    /// [`EngineChoice::Openssl`]. It depends on our own settings only: the peer's certificate
    /// may be ECDSA or RSA on either engine. `Auto` picks OpenSSL when our certificate is RSA,
    /// when a cipher suite dimpl lacks is listed (CCM_8, DHE-RSA), or when the SRTP
    /// profile preference is one dimpl's fixed behaviour would not honour
    /// ([`dimpl_honours_srtp_preference`]: e.g. SRTP_AES128_CM_SHA1_80 alone, or AES-128-GCM
    /// ranked above AES-256-GCM); dimpl otherwise (and always when the crate is built without
    /// the `openssl` feature).
    pub fn resolved_engine(&self) -> EngineChoice {
        match self.engine {
            EngineChoice::Auto => {
                let needs_openssl = self.certificate.is_rsa()
                    || self.cipher_suites.iter().any(|s| !s.dimpl_has())
                    || !dimpl_honours_srtp_preference(self.role, &self.srtp_profiles);
                if needs_openssl && cfg!(feature = "openssl") {
                    EngineChoice::Openssl
                } else {
                    EngineChoice::Dimpl
                }
            }
            other => other,
        }
    }
}

impl fmt::Debug for EndpointConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EndpointConfig")
            .field("role", &self.role)
            .field("version", &self.version)
            .field("certificate", &self.certificate)
            .field("peer_auth", &self.peer_auth)
            .field("srtp_profiles", &self.srtp_profiles)
            .field("timers", &self.timers)
            .field("mtu", &self.mtu)
            .field("server_cookies", &self.server_cookies)
            .field("engine", &self.engine)
            .field("cipher_suites", &self.cipher_suites)
            .field("ecdhe_groups", &self.ecdhe_groups)
            .field("time_crypto", &self.time_crypto)
            .finish_non_exhaustive()
    }
}

/// Why a handshake or association ended badly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FailReason {
    /// The peer's certificate does not hash to the expected fingerprint.
    FingerprintMismatch,
    /// The peer's certificate does not chain to the private CA (or is expired, or lacks the
    /// usage its role needs).
    UntrustedCertificate,
    /// The handshake completed without a peer certificate.
    NoPeerCertificate,
    /// The peer's certificate could not be parsed or used (unsupported key, bad encoding).
    PeerCertificate,
    /// No SRTP profile was negotiated, or the negotiated one is not in our list.
    NoCommonSrtpProfile,
    /// No DTLS cipher suite both sides accept.
    NoCommonCipherSuite,
    /// Retransmissions or the overall handshake deadline ran out.
    HandshakeTimeout,
    /// A signature, MAC or Finished check failed.
    HandshakeFailure,
    /// The peer broke the protocol (unexpected message, bad version, renegotiation, ...).
    Protocol,
    /// Queues filled up (the peer sent too much, too early).
    Overloaded,
    /// A bug: our misuse of the engine, or a panic caught inside it.
    Internal,
    /// The peer ended the handshake with this fatal alert (`handshake_failure` when it found
    /// no cipher suite, SRTP profile or certificate type in common with us, for instance).
    PeerAlert(AlertDescription),
}

impl FailReason {
    /// Every reason, in counter order ([`FailReason::PeerAlert`] stands for every alert: one
    /// counter).
    pub const ALL: [FailReason; 12] = [
        FailReason::FingerprintMismatch,
        FailReason::NoPeerCertificate,
        FailReason::PeerCertificate,
        FailReason::NoCommonSrtpProfile,
        FailReason::NoCommonCipherSuite,
        FailReason::HandshakeTimeout,
        FailReason::HandshakeFailure,
        FailReason::Protocol,
        FailReason::Overloaded,
        FailReason::Internal,
        FailReason::UntrustedCertificate,
        FailReason::PeerAlert(AlertDescription::HANDSHAKE_FAILURE),
    ];

    fn index(self) -> usize {
        match self {
            FailReason::FingerprintMismatch => 0,
            FailReason::NoPeerCertificate => 1,
            FailReason::PeerCertificate => 2,
            FailReason::NoCommonSrtpProfile => 3,
            FailReason::NoCommonCipherSuite => 4,
            FailReason::HandshakeTimeout => 5,
            FailReason::HandshakeFailure => 6,
            FailReason::Protocol => 7,
            FailReason::Overloaded => 8,
            FailReason::Internal => 9,
            FailReason::UntrustedCertificate => 10,
            FailReason::PeerAlert(_) => 11,
        }
    }

    /// The fatal alert that tells the peer about this failure (RFC 5246 §7.2), or `None` where
    /// there is nobody to tell (a timeout) or the peer already said it (its own alert).
    pub fn alert(self) -> Option<AlertDescription> {
        Some(match self {
            FailReason::FingerprintMismatch | FailReason::UntrustedCertificate => {
                AlertDescription::BAD_CERTIFICATE
            }
            FailReason::PeerCertificate => AlertDescription::UNSUPPORTED_CERTIFICATE,
            FailReason::NoPeerCertificate
            | FailReason::NoCommonSrtpProfile
            | FailReason::NoCommonCipherSuite => AlertDescription::HANDSHAKE_FAILURE,
            FailReason::HandshakeFailure => AlertDescription::DECRYPT_ERROR,
            FailReason::Protocol => AlertDescription::UNEXPECTED_MESSAGE,
            FailReason::Overloaded | FailReason::Internal => AlertDescription::INTERNAL_ERROR,
            FailReason::HandshakeTimeout | FailReason::PeerAlert(_) => return None,
        })
    }

    /// Whether the peer (or the network) caused this, as opposed to us.
    pub fn is_peer_caused(self) -> bool {
        !matches!(self, FailReason::Internal)
    }
}

impl fmt::Display for FailReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let FailReason::PeerAlert(alert) = self {
            return write!(
                f,
                "the peer ended the handshake with a fatal alert: {alert}"
            );
        }
        let s = match self {
            FailReason::FingerprintMismatch => "peer certificate fingerprint mismatch",
            FailReason::UntrustedCertificate => "peer certificate not trusted by the CA",
            FailReason::NoPeerCertificate => "peer sent no certificate",
            FailReason::PeerCertificate => "peer certificate unusable",
            FailReason::NoCommonSrtpProfile => "no common SRTP profile",
            FailReason::NoCommonCipherSuite => "no common DTLS cipher suite",
            FailReason::HandshakeTimeout => "handshake timed out",
            FailReason::HandshakeFailure => "handshake verification failed",
            FailReason::Protocol => "peer violated the DTLS protocol",
            FailReason::Overloaded => "handshake queues overflowed",
            FailReason::Internal => "internal error",
            FailReason::PeerAlert(_) => "the peer ended the handshake with a fatal alert",
        };
        f.write_str(s)
    }
}

/// Something the application must act on.
#[derive(Debug)]
#[non_exhaustive]
pub enum Event {
    /// The handshake completed, the peer's certificate matched its fingerprint, and SRTP keys
    /// were exported for a profile we accept.
    Connected {
        /// The negotiated SRTP protection profile.
        profile: Profile,
        /// SRTP master keys for both directions.
        keys: SrtpKeys,
        /// The peer's leaf certificate (DER).
        peer_certificate_der: Vec<u8>,
    },
    /// The handshake or association failed; the endpoint is finished.
    Failed(FailReason),
    /// The association closed (either side sent `close_notify`); the endpoint is finished.
    Closed,
    /// The peer sent application data (one record), with
    /// [`EndpointConfig::application_data`] on. Records that arrive in the flight that
    /// completes the handshake come right after [`Event::Connected`].
    ApplicationData(Vec<u8>),
}

/// What [`Endpoint::poll_output`] hands back. Exhaustive on purpose: drive loops match it
/// completely (new kinds of news go in [`Event`]).
#[derive(Debug)]
pub enum Output {
    /// Send this datagram to the peer.
    Transmit(Vec<u8>),
    /// Call [`Endpoint::handle_timeout`] at (or after) this instant. Ends a drain.
    Timeout(Instant),
    /// Something happened.
    Event(Event),
}

/// What [`Endpoint::handle_datagram`] did with a datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verdict {
    /// The association took it: it moved the handshake on, closed or ended the association,
    /// or was a retransmission answered with our last flight.
    Taken,
    /// Dropped, and why.
    Discarded(Discard),
}

/// Why [`Endpoint::handle_datagram`] dropped a datagram. Every datagram it is given is
/// [`Verdict::Taken`] or one of these, so a caller can count every one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Discard {
    /// The endpoint had finished (failed or closed): input is ignored.
    Finished,
    /// Not DTLS records: a header, version, type or length that does not parse
    /// ([`crate::record::inspect`]), or a DTLS 1.3 record header where the association is DTLS
    /// 1.2. Never handed to the engine.
    Malformed,
    /// A ClientHello once the handshake is done: a new handshake is never started on a live
    /// association, nor is it answered with our last flight. Never handed to the engine.
    ClientHelloAfterHandshake,
    /// Once the handshake is done, records of a handshake that the association took nothing
    /// from: plaintext ones (alerts, change_cipher_spec, handshake messages), which nothing
    /// authenticates any more, or a protected handshake message not answered: stale,
    /// duplicated or forged.
    AfterHandshake,
    /// Once the handshake is done, protected records the association took nothing from: they
    /// failed authentication or were replays (or carried nothing it uses, such as a warning
    /// alert).
    Unauthenticated,
    /// Application data (DTLS-SRTP carries none).
    ApplicationData,
    /// Once the handshake is done, a datagram that made the engine send its last flight again
    /// less than one retransmission interval ([`Timers::initial_rto`]) after the last time
    /// that happened: what the engine wrote is not sent.
    RetransmitLimited,
}

impl Discard {
    /// Every reason, in counter order.
    pub const ALL: [Discard; 7] = [
        Discard::Finished,
        Discard::Malformed,
        Discard::ClientHelloAfterHandshake,
        Discard::AfterHandshake,
        Discard::Unauthenticated,
        Discard::ApplicationData,
        Discard::RetransmitLimited,
    ];
}

/// Per-endpoint counters; [`Counters::add`] sums them across endpoints.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counters {
    /// Datagrams fed in while alive.
    pub datagrams_in: u64,
    /// Datagrams fed in after the endpoint finished (ignored).
    pub datagrams_ignored: u64,
    /// Datagrams handed out to send.
    pub transmits: u64,
    /// `handle_timeout` calls.
    pub timeouts: u64,
    /// Application data records received and discarded (the configuration did not ask for
    /// them, or they came before the handshake completed and the early queue was full).
    pub app_data_discarded: u64,
    /// Application data records handed out as [`Event::ApplicationData`].
    pub app_data_in: u64,
    /// Application data records sent ([`Endpoint::send_application_data`]).
    pub app_data_out: u64,
    /// Panics caught inside the engine.
    pub panics_caught: u64,
    /// Engines stopped for asking to be woken at once, timer after timer.
    pub runaway_timers: u64,
    /// Fatal alerts queued to tell the peer why the handshake failed.
    pub alerts_sent: u64,
    failures: [u64; FailReason::ALL.len()],
    discards: [u64; Discard::ALL.len()],
}

impl Counters {
    /// How many times this reason ended an endpoint.
    pub fn failures(&self, reason: FailReason) -> u64 {
        self.failures[reason.index()]
    }

    /// All failures, whatever the reason.
    pub fn total_failures(&self) -> u64 {
        self.failures.iter().sum()
    }

    /// Datagrams dropped for this reason ([`Verdict::Discarded`]).
    pub fn discarded(&self, reason: Discard) -> u64 {
        self.discards[reason as usize]
    }

    /// Adds `other` into `self`.
    pub fn add(&mut self, other: &Counters) {
        self.datagrams_in += other.datagrams_in;
        self.datagrams_ignored += other.datagrams_ignored;
        self.transmits += other.transmits;
        self.timeouts += other.timeouts;
        self.app_data_discarded += other.app_data_discarded;
        self.app_data_in += other.app_data_in;
        self.app_data_out += other.app_data_out;
        self.panics_caught += other.panics_caught;
        self.runaway_timers += other.runaway_timers;
        self.alerts_sent += other.alerts_sent;
        for (a, b) in self.failures.iter_mut().zip(other.failures.iter()) {
            *a += b;
        }
        for (a, b) in self.discards.iter_mut().zip(other.discards.iter()) {
            *a += b;
        }
    }
}

/// Where an endpoint is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum State {
    /// Handshake in progress.
    Handshaking,
    /// Keys handed out; the association is up.
    Connected,
    /// Finished ([`Event::Failed`] or [`Event::Closed`] was emitted); input is ignored.
    Finished,
}

/// Bound on outputs drained from the engine per input, so a looping engine cannot hang us.
const MAX_DRAIN: usize = 4096;

/// The earliest deadline handed out, after the time of the input that produced it. An engine
/// asking to be woken "now" again and again would otherwise make its driver spin.
const MIN_TIMER: Duration = Duration::from_millis(1);

/// Consecutive timer firings after which the engine still asks to be woken at once, before the
/// endpoint gives up on it ([`FailReason::Internal`]). dimpl 0.9's DTLS 1.3 client was seen to
/// do that forever, sending a datagram each time, after a corrupted server flight.
const MAX_IMMEDIATE_TIMEOUTS: u32 = 32;

/// Application-data records kept while the handshake completes (the peer's first SCTP packets
/// can arrive with, or right behind, its last flight); more are discarded and counted.
const MAX_EARLY_APP_DATA: usize = 8;

/// Why [`Endpoint::send_application_data`] sent nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SendError {
    /// [`EndpointConfig::application_data`] is off.
    NotEnabled,
    /// The handshake has not completed, or the association is finished.
    NotConnected,
}

impl fmt::Display for SendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SendError::NotEnabled => "application data is not enabled on this DTLS endpoint",
            SendError::NotConnected => "the DTLS association is not connected",
        })
    }
}

impl std::error::Error for SendError {}

/// A DTLS-SRTP endpoint for one association (one peer, one 5-tuple). See the module docs for
/// the drive contract.
pub struct Endpoint {
    role: Role,
    engine: Option<Box<dyn DtlsEngine>>,
    state: State,
    out: VecDeque<Output>,
    /// The engine's latest deadline; handed out after `out` is empty, so it is never stale.
    timeout: Option<Instant>,
    /// Whether the engine's latest deadline was already due when it was handed out.
    deadline_was_due: bool,
    /// Timer firings in a row whose next deadline was due at once.
    immediate_timeouts: u32,
    srtp_profiles: Vec<Profile>,
    peer_auth: PeerAuth,
    peer_certificate: Option<Vec<u8>>,
    keying: Option<(u16, Zeroizing<Vec<u8>>)>,
    engine_connected: bool,
    peer_closed: bool,
    /// [`EndpointConfig::application_data`].
    application_data: bool,
    /// Application data that came before `Connected` was decided, handed out right after it.
    early_app_data: Vec<Vec<u8>>,
    last_now: Instant,
    counters: Counters,
    /// Once connected, the least time between two answers to the peer's datagrams (our last
    /// flight sent again).
    answer_interval: Duration,
    /// When such an answer last went out.
    last_answer: Option<Instant>,
    /// The versions it may speak (DTLS 1.2 has no records with the unified header).
    version: DtlsVersion,
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Endpoint")
            .field("role", &self.role)
            .field("engine", &self.engine)
            .field("state", &self.state)
            .field("queued", &self.out.len())
            .field("counters", &self.counters)
            .finish_non_exhaustive()
    }
}

/// Why [`Endpoint::new`] refused a configuration.
pub type ConfigError = EngineConfigError;

/// Builds the engine `config` resolves to; `cookie`: the server's cookie, for an engine that
/// takes over from a stateless responder (OpenSSL's is set at construction, dimpl's is pinned
/// when it is fed).
fn build_engine(
    config: &EndpointConfig,
    now: Instant,
    cookie: Option<&[u8; crate::cookie::COOKIE_LEN]>,
) -> Result<Box<dyn DtlsEngine>, EngineConfigError> {
    let _ = cookie;
    match config.resolved_engine() {
        #[cfg(feature = "openssl")]
        EngineChoice::Openssl => Ok(Box::new(crate::engine_openssl::OpensslEngine::with_cookie(
            config, now, cookie,
        )?)),
        #[cfg(not(feature = "openssl"))]
        EngineChoice::Openssl => Err(EngineConfigError::Setting(
            "the OpenSSL engine is not built in (feature `openssl`)".into(),
        )),
        _ => Ok(Box::new(DimplEngine::new(config, now)?)),
    }
}

/// Whether `d` starts with a plaintext HelloVerifyRequest record.
fn starts_with_hello_verify_request(d: &[u8]) -> bool {
    d.len() > 13 && d[0] == 22 && d[3..5] == [0, 0] && d[13] == 3
}

impl Endpoint {
    /// An endpoint on the engine [`EndpointConfig::resolved_engine`] names (dimpl by default).
    /// A client's first flight is queued at once: drain [`poll_output`](Self::poll_output)
    /// after this.
    pub fn new(config: EndpointConfig, now: Instant) -> Result<Endpoint, ConfigError> {
        if config.srtp_profiles.is_empty() {
            return Err(EngineConfigError::Setting(
                "the SRTP profile list is empty".into(),
            ));
        }
        let engine = catch_unwind(AssertUnwindSafe(|| build_engine(&config, now, None)))
            .map_err(|_| EngineConfigError::Panicked)??;
        Ok(Endpoint::with_engine(&config, engine, now))
    }

    /// A server endpoint for a ClientHello a stateless
    /// [`CookieResponder`](crate::cookie::CookieResponder) admitted
    /// ([`CookieVerdict::Admit`](crate::cookie::CookieVerdict::Admit)), with that datagram
    /// already fed: drain [`poll_output`](Self::poll_output) after this (the ServerHello
    /// flight). The engine runs DTLS 1.2 with its own cookie exchange on, whatever
    /// `config.version` and `config.server_cookies` say (the client is in DTLS 1.2 after a
    /// HelloVerifyRequest), and takes the handshake over from the responder as the
    /// [`cookie`](crate::cookie) module describes. Should the engine not take the admitted
    /// ClientHello (answer it with another HelloVerifyRequest), the endpoint fails at once
    /// with [`FailReason::Internal`] and sends nothing.
    pub fn new_admitted(
        config: EndpointConfig,
        now: Instant,
        admission: &crate::cookie::Admission,
    ) -> Result<Endpoint, ConfigError> {
        if config.role != Role::Server {
            return Err(EngineConfigError::Setting(
                "an admitted ClientHello is for a server endpoint".into(),
            ));
        }
        if config.srtp_profiles.is_empty() {
            return Err(EngineConfigError::Setting(
                "the SRTP profile list is empty".into(),
            ));
        }
        let mut config = config;
        config.version = DtlsVersion::Dtls12;
        config.server_cookies = true;
        let cookie = admission.cookie();
        let engine = catch_unwind(AssertUnwindSafe(|| {
            build_engine(&config, now, Some(cookie))
        }))
        .map_err(|_| EngineConfigError::Panicked)??;
        Ok(Endpoint::admitted_with_engine(
            &config, engine, now, admission,
        ))
    }

    /// [`Endpoint::new_admitted`] once the engine is built.
    fn admitted_with_engine(
        config: &EndpointConfig,
        engine: Box<dyn DtlsEngine>,
        now: Instant,
        admission: &crate::cookie::Admission,
    ) -> Endpoint {
        let mut ep = Endpoint::with_engine(config, engine, now);
        if ep.state == State::Finished {
            return ep;
        }
        ep.counters.datagrams_in += 1;
        if ep
            .call(|e| {
                e.handle_timeout(now)?;
                e.take_over(admission)
            })
            .is_some()
        {
            ep.pump();
        }
        // Fail closed: an engine that answered the admitted ClientHello with another
        // HelloVerifyRequest did not take it over (its cookie is not the responder's).
        let refused = ep.out.iter().any(|o| match o {
            Output::Transmit(d) => starts_with_hello_verify_request(d),
            _ => false,
        });
        if refused {
            ep.out.clear();
            ep.fail(FailReason::Internal);
        }
        ep
    }

    /// An endpoint over any engine built for `config.role` (the seam for other DTLS stacks and
    /// for tests). The engine's clock is set to `now` before anything else, so a datagram can
    /// never reach it before its first timeout call (dimpl 0.9's server panics otherwise).
    pub fn with_engine(config: &EndpointConfig, engine: Box<dyn DtlsEngine>, now: Instant) -> Self {
        let mut ep = Endpoint {
            role: config.role,
            engine: Some(engine),
            state: State::Handshaking,
            out: VecDeque::new(),
            timeout: None,
            deadline_was_due: false,
            immediate_timeouts: 0,
            srtp_profiles: config.srtp_profiles.clone(),
            peer_auth: config.peer_auth.clone(),
            peer_certificate: None,
            keying: None,
            engine_connected: false,
            peer_closed: false,
            application_data: config.application_data,
            early_app_data: Vec::new(),
            last_now: now,
            counters: Counters::default(),
            answer_interval: config.timers.initial_rto,
            last_answer: None,
            version: config.version,
        };
        if ep.call(|e| e.handle_timeout(now)).is_some() {
            ep.pump();
        }
        ep
    }

    /// Feeds one datagram received from the peer at `now`, and says what became of it.
    ///
    /// A datagram that is not DTLS records is dropped before the engine sees it. Once the
    /// handshake is done, what the engine made of a datagram is read from what it did (closed,
    /// failed, answered, handed out application data, or nothing) and from the datagram's
    /// record headers; a ClientHello is not handed to the engine at all, and an answer (our
    /// last flight again) goes out at most once per retransmission interval. See [`Discard`].
    pub fn handle_datagram(&mut self, now: Instant, datagram: &[u8]) -> Verdict {
        if self.state == State::Finished {
            self.counters.datagrams_ignored += 1;
            return self.discard(Discard::Finished);
        }
        self.counters.datagrams_in += 1;
        let shape = match crate::record::inspect(datagram) {
            Ok(s) if !s.hidden_type || self.may_be_dtls13() => s,
            _ => return self.discard(Discard::Malformed),
        };
        let established = self.state == State::Connected;
        if established && shape.client_hello {
            return self.discard(Discard::ClientHelloAfterHandshake);
        }
        let now = self.advance(now);
        let (queued, app_data) = (self.out.len(), self.app_data_seen());
        if self
            .call(|e| {
                e.handle_timeout(now)?;
                e.handle_datagram(datagram)
            })
            .is_some()
        {
            self.pump();
        }
        if !established || self.state == State::Finished {
            // The handshake moved on, or the association closed or failed on it.
            return Verdict::Taken;
        }
        self.verdict_once_connected(now, shape, queued, app_data)
    }

    /// What became of a datagram fed once connected, from what the engine did with it: the
    /// outputs from `queued` on, application data handed out or discarded past `app_data`
    /// ([`Endpoint::app_data_seen`]).
    fn verdict_once_connected(
        &mut self,
        now: Instant,
        shape: crate::record::Shape,
        queued: usize,
        app_data: (u64, u64),
    ) -> Verdict {
        let answered = self
            .out
            .iter()
            .skip(queued)
            .any(|o| matches!(o, Output::Transmit(_)));
        if answered {
            if self
                .last_answer
                .is_some_and(|t| now < t + self.answer_interval)
            {
                let written: Vec<Output> = self.out.drain(queued..).collect();
                for o in written {
                    match o {
                        Output::Transmit(_) => self.counters.transmits -= 1,
                        other => self.out.push_back(other),
                    }
                }
                return self.discard(Discard::RetransmitLimited);
            }
            self.last_answer = Some(now);
            return Verdict::Taken;
        }
        if self.counters.app_data_in > app_data.0 {
            Verdict::Taken
        } else if self.counters.app_data_discarded > app_data.1 {
            self.discard(Discard::ApplicationData)
        } else if shape.plaintext || shape.protected_handshake {
            self.discard(Discard::AfterHandshake)
        } else if shape.hidden_type {
            // DTLS 1.3 hides what a protected record is (an ACK, a KeyUpdate): the engine
            // took it, whatever it was.
            Verdict::Taken
        } else {
            self.discard(Discard::Unauthenticated)
        }
    }

    /// Whether the association may be DTLS 1.3 (whose protected records have the unified
    /// header): configured for it, or for either and not known to be DTLS 1.2.
    fn may_be_dtls13(&self) -> bool {
        match self.version {
            DtlsVersion::Dtls12 => false,
            DtlsVersion::Dtls13 => true,
            _ => self.protocol_version() != Some("DTLS 1.2"),
        }
    }

    /// Counts a dropped datagram.
    fn discard(&mut self, reason: Discard) -> Verdict {
        self.counters.discards[reason as usize] += 1;
        Verdict::Discarded(reason)
    }

    /// Fires due timers (retransmissions, the handshake deadline) at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.state == State::Finished {
            return;
        }
        self.counters.timeouts += 1;
        let now = self.advance(now);
        if self.call(|e| e.handle_timeout(now)).is_some() {
            self.pump();
        }
        if self.state == State::Finished {
            return;
        }
        if self.deadline_was_due {
            self.immediate_timeouts += 1;
            if self.immediate_timeouts > MAX_IMMEDIATE_TIMEOUTS {
                self.counters.runaway_timers += 1;
                self.fail(FailReason::Internal);
            }
        } else {
            self.immediate_timeouts = 0;
        }
    }

    /// Closes the association: sends `close_notify` when connected (dimpl aborts a handshake in
    /// progress without an alert), then reports [`Event::Closed`]. Drain outputs afterwards.
    pub fn close(&mut self, now: Instant) {
        if self.state == State::Finished {
            return;
        }
        let now = self.advance(now);
        if self
            .call(|e| {
                e.handle_timeout(now)?;
                e.close()
            })
            .is_none()
        {
            return;
        }
        if self.drain_transmits() {
            self.finish(Event::Closed);
        }
    }

    /// The next output, or `None` when nothing is queued (see the module's drive contract).
    ///
    /// Datagrams and events come first, in order; the timer deadline comes last, once per
    /// input, and is always the latest one (inputs fed without draining in between do not leave
    /// stale deadlines behind).
    pub fn poll_output(&mut self) -> Option<Output> {
        match self.out.pop_front() {
            Some(o) => Some(o),
            None => self.timeout.take().map(Output::Timeout),
        }
    }

    /// Client or server.
    pub fn role(&self) -> Role {
        self.role
    }

    /// Sends `data` to the peer as one application-data record, with
    /// [`EndpointConfig::application_data`] on and once connected; queues the datagram (drain
    /// [`Endpoint::poll_output`] afterwards). An engine failure ends the association, as for
    /// any input.
    pub fn send_application_data(&mut self, now: Instant, data: &[u8]) -> Result<(), SendError> {
        if !self.application_data {
            return Err(SendError::NotEnabled);
        }
        if self.state != State::Connected {
            return Err(SendError::NotConnected);
        }
        let now = self.advance(now);
        if self
            .call(|e| {
                e.handle_timeout(now)?;
                e.send_application_data(data)
            })
            .is_none()
        {
            return Err(SendError::NotConnected);
        }
        self.counters.app_data_out += 1;
        self.pump();
        Ok(())
    }

    /// Application data handed out and discarded so far.
    fn app_data_seen(&self) -> (u64, u64) {
        (self.counters.app_data_in, self.counters.app_data_discarded)
    }

    /// One application-data record from the engine: handed out once connected, kept until
    /// then (the peer may send right behind its last handshake flight), or discarded.
    fn on_application_data(&mut self, data: Vec<u8>) {
        if !self.application_data {
            self.counters.app_data_discarded += 1;
        } else if self.state == State::Connected {
            self.counters.app_data_in += 1;
            self.out
                .push_back(Output::Event(Event::ApplicationData(data)));
        } else if self.early_app_data.len() < MAX_EARLY_APP_DATA {
            self.early_app_data.push(data);
        } else {
            self.counters.app_data_discarded += 1;
        }
    }

    /// Where the endpoint is.
    pub fn state(&self) -> State {
        self.state
    }

    /// The engine's name (`"dimpl"` or `"openssl"`), while it is alive.
    pub fn engine_name(&self) -> Option<&'static str> {
        self.engine.as_ref().map(|e| e.name())
    }

    /// The negotiated DTLS version, once known and while the engine is alive.
    pub fn protocol_version(&self) -> Option<&'static str> {
        self.engine.as_ref().and_then(|e| e.protocol_version())
    }

    /// Counters for this endpoint.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    fn advance(&mut self, now: Instant) -> Instant {
        if now > self.last_now {
            self.last_now = now;
        }
        self.last_now
    }

    /// Runs `f` on the engine under `catch_unwind`. `None` when the endpoint is (now) finished.
    fn call<T>(
        &mut self,
        f: impl FnOnce(&mut dyn DtlsEngine) -> Result<T, FailReason>,
    ) -> Option<T> {
        let engine = self.engine.as_mut()?;
        match catch_unwind(AssertUnwindSafe(|| f(engine.as_mut()))) {
            Ok(Ok(v)) => Some(v),
            Ok(Err(reason)) => {
                self.fail(reason);
                None
            }
            Err(_) => {
                self.counters.panics_caught += 1;
                self.fail(FailReason::Internal);
                None
            }
        }
    }

    fn fail(&mut self, reason: FailReason) {
        self.counters.failures[reason.index()] += 1;
        self.send_alert(reason);
        self.finish(Event::Failed(reason));
    }

    /// Asks the engine, still alive, for the fatal alert that tells the peer about `reason`
    /// ([`FailReason::alert`]), and queues what it writes. Nothing once connected with the
    /// keys handed out (a later failure is the engine's own, and it said so), and nothing when
    /// the engine fails again or panics: the endpoint is failing anyway.
    fn send_alert(&mut self, reason: FailReason) {
        let Some(alert) = reason.alert() else {
            return;
        };
        if self.state != State::Handshaking {
            return;
        }
        let Some(engine) = self.engine.as_mut() else {
            return;
        };
        // Until the engine reported its handshake complete it may still hold the rest of a
        // flight (a Finished after a wrong fingerprint): only alerts may leave then.
        let any = self.engine_connected;
        let written = catch_unwind(AssertUnwindSafe(|| {
            engine.abort(alert)?;
            let mut datagrams = Vec::new();
            for _ in 0..MAX_DRAIN {
                match engine.poll_output()? {
                    // Nothing but alerts leaves a failed endpoint: never the rest of a flight
                    // (a Finished after a wrong fingerprint) that an engine still had queued.
                    EngineOutput::Transmit(d) if any || crate::record::only_alerts(&d) => {
                        datagrams.push(d)
                    }
                    EngineOutput::Transmit(_) => {}
                    EngineOutput::Timeout(_) => break,
                    _ => {}
                }
            }
            Ok::<_, FailReason>(datagrams)
        }));
        match written {
            Ok(Ok(datagrams)) => {
                if !datagrams.is_empty() {
                    self.counters.alerts_sent += 1;
                }
                for d in datagrams {
                    self.counters.transmits += 1;
                    self.out.push_back(Output::Transmit(d));
                }
            }
            Ok(Err(_)) => {}
            Err(_) => self.counters.panics_caught += 1,
        }
    }

    /// Drops the engine (under `catch_unwind`: it may be inconsistent after a panic) and
    /// queues the terminal event.
    fn finish(&mut self, event: Event) {
        if let Some(engine) = self.engine.take() {
            if catch_unwind(AssertUnwindSafe(move || drop(engine))).is_err() {
                self.counters.panics_caught += 1;
            }
        }
        self.keying = None;
        self.timeout = None;
        self.state = State::Finished;
        self.out.push_back(Output::Event(event));
    }

    /// Drains the engine after an input, queueing transmits, checking the certificate as soon
    /// as it appears, and deciding `Connected` once the engine is done.
    fn pump(&mut self) {
        for _ in 0..MAX_DRAIN {
            let Some(output) = self.call(|e| e.poll_output()) else {
                return;
            };
            match output {
                EngineOutput::Transmit(d) => {
                    self.counters.transmits += 1;
                    self.out.push_back(Output::Transmit(d));
                }
                EngineOutput::PeerCertificate(der) => {
                    let peer_role = match self.role {
                        Role::Client => Role::Server,
                        Role::Server => Role::Client,
                    };
                    if let Err(reason) = self.peer_auth.check(&der, peer_role) {
                        self.fail(reason);
                        return;
                    }
                    self.peer_certificate = Some(der);
                }
                EngineOutput::KeyingMaterial {
                    profile_id,
                    material,
                } => self.keying = Some((profile_id, material)),
                EngineOutput::Connected => self.engine_connected = true,
                EngineOutput::PeerClosed => self.peer_closed = true,
                EngineOutput::ApplicationData(d) => self.on_application_data(d),
                EngineOutput::Timeout(at) => {
                    self.after_drain(at);
                    return;
                }
            }
        }
        self.fail(FailReason::Internal);
    }

    fn after_drain(&mut self, at: Instant) {
        if self.engine_connected && self.state == State::Handshaking {
            match self.connected_event() {
                Ok(event) => {
                    self.state = State::Connected;
                    self.out.push_back(Output::Event(event));
                    for d in std::mem::take(&mut self.early_app_data) {
                        self.on_application_data(d);
                    }
                }
                Err(reason) => {
                    // `fail` tells the peer (a fatal alert) rather than leave it waiting.
                    self.fail(reason);
                    return;
                }
            }
        }
        if self.peer_closed {
            self.finish(Event::Closed);
            return;
        }
        self.deadline_was_due = at <= self.last_now;
        self.timeout = Some(at.max(self.last_now + MIN_TIMER));
    }

    /// Queues the engine's pending datagrams, dropping its timer. `false` if it failed.
    fn drain_transmits(&mut self) -> bool {
        for _ in 0..MAX_DRAIN {
            match self.call(|e| e.poll_output()) {
                None => return false,
                Some(EngineOutput::Transmit(d)) => {
                    self.counters.transmits += 1;
                    self.out.push_back(Output::Transmit(d));
                }
                Some(EngineOutput::Timeout(_)) => return true,
                Some(_) => {}
            }
        }
        self.fail(FailReason::Internal);
        false
    }

    fn connected_event(&mut self) -> Result<Event, FailReason> {
        let peer_certificate_der = self
            .peer_certificate
            .clone()
            .ok_or(FailReason::NoPeerCertificate)?;
        let (profile_id, material) = self.keying.take().ok_or(FailReason::NoCommonSrtpProfile)?;
        let profile = Profile::from_dtls_id(profile_id)
            .filter(|p| self.srtp_profiles.contains(p))
            .ok_or(FailReason::NoCommonSrtpProfile)?;
        let keys =
            SrtpKeys::from_exported(profile, self.role, ExportedKeyingMaterial::new(&material))
                .map_err(|_| FailReason::Internal)?;
        Ok(Event::Connected {
            profile,
            keys,
            peer_certificate_der,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cookie::{Admission, CookieResponder, CookieVerdict};

    /// An admission for a real client's second ClientHello.
    fn admission() -> Admission {
        let cert = crate::cert::Certificate::self_signed(crate::cert::KeyType::EcdsaP256, "t")
            .expect("certificate");
        let config = EndpointConfig::new(
            Role::Client,
            LocalCertificate::from(&cert),
            PeerAuth::AnyCertificate,
        );
        let now = Instant::now();
        let mut client = Endpoint::new(config, now).expect("client");
        let Some(Output::Transmit(ch1)) = client.poll_output() else {
            panic!("a ClientHello")
        };
        let responder = CookieResponder::new(&[5; 32]);
        let peer: std::net::SocketAddr = "192.0.2.1:5000".parse().expect("address");
        let CookieVerdict::HelloVerifyRequest(hvr) = responder.check(peer, &ch1) else {
            panic!("a HelloVerifyRequest")
        };
        while client.poll_output().is_some() {}
        client.handle_datagram(now, &hvr);
        let Some(Output::Transmit(ch2)) = client.poll_output() else {
            panic!("a second ClientHello")
        };
        match responder.check(peer, &ch2) {
            CookieVerdict::Admit(a) => a,
            v => panic!("{v:?}"),
        }
    }

    /// A server engine that does not take the admitted ClientHello: it answers it with a
    /// HelloVerifyRequest of its own (as dimpl would if its cookie were not the responder's).
    #[derive(Debug)]
    struct Refuses(VecDeque<EngineOutput>);

    impl DtlsEngine for Refuses {
        fn name(&self) -> &'static str {
            "refuses"
        }
        fn handle_timeout(&mut self, _: Instant) -> Result<(), FailReason> {
            Ok(())
        }
        fn handle_datagram(&mut self, _: &[u8]) -> Result<(), FailReason> {
            Ok(())
        }
        fn poll_output(&mut self) -> Result<EngineOutput, FailReason> {
            Ok(self
                .0
                .pop_front()
                .unwrap_or_else(|| EngineOutput::Timeout(Instant::now())))
        }
        fn close(&mut self) -> Result<(), FailReason> {
            Ok(())
        }
        fn protocol_version(&self) -> Option<&'static str> {
            None
        }
        fn take_over(&mut self, _: &Admission) -> Result<(), FailReason> {
            let mut hvr = vec![22, 0xfe, 0xff, 0, 0, 0, 0, 0, 0, 0, 1, 0, 47, 3];
            hvr.resize(13 + 47, 0);
            self.0.push_back(EngineOutput::Transmit(hvr));
            Ok(())
        }
    }

    #[derive(Debug)]
    struct CannotTakeOver;

    impl DtlsEngine for CannotTakeOver {
        fn name(&self) -> &'static str {
            "cannot"
        }
        fn handle_timeout(&mut self, _: Instant) -> Result<(), FailReason> {
            Ok(())
        }
        fn handle_datagram(&mut self, _: &[u8]) -> Result<(), FailReason> {
            Ok(())
        }
        fn poll_output(&mut self) -> Result<EngineOutput, FailReason> {
            Ok(EngineOutput::Timeout(Instant::now()))
        }
        fn close(&mut self) -> Result<(), FailReason> {
            Ok(())
        }
        fn protocol_version(&self) -> Option<&'static str> {
            None
        }
    }

    /// Fail closed: an engine that answers the admitted ClientHello with a HelloVerifyRequest,
    /// or cannot take over at all, ends the endpoint with `Internal` and sends nothing.
    #[test]
    fn an_engine_that_does_not_take_over_fails_the_endpoint_and_sends_nothing() {
        let a = admission();
        let cert = crate::cert::Certificate::self_signed(crate::cert::KeyType::EcdsaP256, "s")
            .expect("certificate");
        let config = EndpointConfig::new(
            Role::Server,
            LocalCertificate::from(&cert),
            PeerAuth::AnyCertificate,
        );
        let engines: [Box<dyn DtlsEngine>; 2] =
            [Box::new(Refuses(VecDeque::new())), Box::new(CannotTakeOver)];
        for engine in engines {
            let mut ep = Endpoint::admitted_with_engine(&config, engine, Instant::now(), &a);
            let mut outputs = Vec::new();
            while let Some(o) = ep.poll_output() {
                outputs.push(o);
            }
            assert!(
                matches!(
                    &outputs[..],
                    [Output::Event(Event::Failed(FailReason::Internal))]
                ),
                "{outputs:?}"
            );
            assert_eq!(ep.state(), State::Finished);
        }
        // A client configuration is refused outright.
        let client = EndpointConfig::new(
            Role::Client,
            LocalCertificate::from(&cert),
            PeerAuth::AnyCertificate,
        );
        assert!(Endpoint::new_admitted(client, Instant::now(), &a).is_err());
    }
}
