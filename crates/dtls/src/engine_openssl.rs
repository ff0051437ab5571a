//! [`DtlsEngine`] over OpenSSL (the system's libssl, through the `openssl` crate): DTLS 1.2
//! for what dimpl does not cover — RSA certificates, DHE-RSA, ECDHE-ECDSA-AES128-CCM8, and every
//! DTLS-SRTP profile (SRTP_AES128_CM_SHA1_32 included) in a configurable preference order.
//!
//! # Transport
//! OpenSSL runs over an [`SslStream`] whose I/O object is an in-memory datagram queue: every
//! `write` OpenSSL makes is one datagram handed out as [`EngineOutput::Transmit`], every `read`
//! returns the one datagram the endpoint just fed in (or `WouldBlock`). No `unsafe`, no sockets.
//! The MTU is set on the connection (`SSL_set_mtu`) with `SSL_OP_NO_QUERY_MTU`, as the memory
//! transport has no path MTU to ask.
//!
//! # Retransmission on the injected clock
//! OpenSSL's DTLS timer reads the real clock inside `SSL_do_handshake`, and the `openssl` crate
//! exposes neither `DTLSv1_handle_timeout`, `DTLSv1_get_timeout` nor `DTLS_set_timer_cb`
//! (checked in openssl 0.10.82 / openssl-sys 0.9.118). So the engine keeps its own
//! retransmission timer on the time the endpoint injects, with the endpoint's [`Timers`]:
//!
//! * the datagrams OpenSSL writes while answering one input form a *flight*; a new flight
//!   replaces the last one and (re)starts the timer at `initial_rto`;
//! * when the timer fires, OpenSSL is stepped first (if its own real-time timer has expired it
//!   retransmits by itself, and that counts as this retransmission); otherwise the engine resends
//!   the last flight itself. The RTO doubles per retry (capped at 60 s, OpenSSL's own cap) and
//!   after `max_retransmissions` retries, or at `handshake_timeout` after the start, the
//!   handshake fails with [`FailReason::HandshakeTimeout`];
//! * the last flight of a handshake (the server's ChangeCipherSpec + Finished) has no timer in
//!   DTLS: it is resent when the peer retransmits its own flight. OpenSSL would do that only for
//!   a Finished it has not seen yet, so the engine does it itself: once connected, a datagram
//!   from the peer that starts with a handshake or ChangeCipherSpec record makes it resend its
//!   final flight (at most `max_retransmissions` times).
//!
//! # Record numbers: retransmissions are new records
//! A resent flight must not reuse record sequence numbers (RFC 6347 §4.2.4): a peer that saw a
//! record drops a second one with its number as a replay, even when it had to discard the first
//! (OpenSSL drops a ChangeCipherSpec that arrives before the handshake messages it follows, as
//! when the first datagram of a two-datagram flight is lost or overtaken; with byte copies such
//! a handshake never finished). So the engine owns the epoch-0 write sequence space: every
//! epoch-0 record it sends — plaintext handshake messages, ChangeCipherSpec, alerts before the
//! handshake ends; OpenSSL's own records and the engine's resends alike — is renumbered from one
//! monotone counter before it leaves. Epoch-0 records carry no MAC and the record number is not
//! in the handshake transcript, so this changes nothing else. A server's HelloVerifyRequest
//! echoes the number of the ClientHello it answers and its first ServerHello starts at that
//! ClientHello's number (RFC 6347 §4.2.1), as OpenSSL's own numbering does.
//!
//! Epoch-1 records (the encrypted Finished) cannot be renumbered: the number is in the AEAD
//! nonce and additional data. A resent Finished is a byte copy of OpenSSL's. That copy is only a
//! replay to a peer that already has the original, and a DTLS receiver keeps such a record: one
//! that arrives before the ChangeCipherSpec is buffered for the next epoch (OpenSSL and dimpl
//! both do), one that arrives after is processed. The record that was dropped unprocessed is the
//! early ChangeCipherSpec, which is epoch 0 and now renumbered.
//!
//! # Certificates, cookies, renegotiation
//! The peer must present a certificate (`SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT`).
//! OpenSSL's own chain verification is not used (WebRTC certificates are self-signed): a verify
//! callback on each connection checks the leaf against the configuration's
//! [`PeerAuth`](crate::endpoint::PeerAuth) (the fingerprint, or the private CA) while the
//! handshake runs, so that a wrong certificate fails the handshake with OpenSSL's fatal alert
//! (`handshake_failure`: the only alert a verify callback can choose through the `openssl`
//! crate) and the failure is reported as the check's reason. The endpoint checks the
//! certificate again from [`EngineOutput::PeerCertificate`], emitted when the handshake
//! completes (before the keys are handed out). With `server_cookies` the server sends a
//! HelloVerifyRequest (`SSL_OP_COOKIE_EXCHANGE`) whose cookie is a random per-connection value:
//! the association is stateful anyway (one engine per peer), so this follows the protocol but
//! saves no state. An engine made for a ClientHello a stateless
//! [`CookieResponder`](crate::cookie::CookieResponder) admitted issues and expects the
//! responder's cookie instead, and takes the handshake over from there
//! ([`DtlsEngine::take_over`]). Renegotiation is refused (`SSL_OP_NO_RENEGOTIATION`), tickets and the session
//! cache are off (every handshake a full one, as in WebRTC).

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use openssl::dh::Dh;
use openssl::error::ErrorStack;
use openssl::pkey::PKey;
use openssl::ssl::{
    ErrorCode, Ssl, SslContext, SslContextBuilder, SslMethod, SslOptions, SslSessionCacheMode,
    SslStream, SslVerifyMode, SslVersion,
};
use openssl::x509::{X509VerifyResult, X509};
use secrelay_srtp::Profile;
use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

use crate::alert::AlertDescription;
use crate::cookie::{Admission, COOKIE_LEN};
use crate::endpoint::{DtlsVersion, EndpointConfig, FailReason, Role, Timers};
use crate::engine::{CipherSuite, DtlsEngine, EcdheGroup, EngineConfigError, EngineOutput};

/// RFC 5764 exporter label for the SRTP keying block.
const EXPORTER_LABEL: &str = "EXTRACTOR-dtls_srtp";
/// Largest RTO the back-off reaches (OpenSSL's own cap).
const MAX_RTO: Duration = Duration::from_secs(60);
/// Deadline handed out once nothing is pending (connected): far away, never due in practice.
const IDLE: Duration = Duration::from_secs(24 * 3600);
/// Largest datagram read back from OpenSSL as application data.
const READ_BUF: usize = 16 * 1024 + 256;
/// ECDHE groups offered and accepted. P-256 and P-384 also cover the curves of ECDSA
/// certificates (OpenSSL requires the certificate's curve among the client's groups).
const GROUPS: &str = "X25519:P-256:P-384";
/// RFC 7919 ffdhe2048, the group for DHE-RSA (printed by
/// `openssl genpkey -genparam -algorithm DH -pkeyopt group:ffdhe2048`).
pub const FFDHE2048_PEM: &str = "-----BEGIN DH PARAMETERS-----
MIIBCAKCAQEA//////////+t+FRYortKmq/cViAnPTzx2LnFg84tNpWp4TZBFGQz
+8yTnc4kmz75fS/jY2MMddj2gbICrsRhetPfHtXV/WVhJDP1H18GbtCFY2VVPe0a
87VXE15/V8k1mE8McODmi3fipona8+/och3xWKE2rec1MKzKT0g6eXq8CrGCsyT7
YdEIqUuyyOP7uWrat2DX9GgdT0Kj3jlN9K5W7edjcrsZCwenyO4KbXCeAvzhzffi
7MA0BM0oNC9hkXL+nOmFg/+OTxIy7vKBg8P+OxtMb61zO7X8vC7CIAXFjvGDfRaD
ssbzSibBsu/6iGtCOGEoXJf//////////wIBAg==
-----END DH PARAMETERS-----
";

/// The suites offered when the configuration names none: ECDHE with ECDSA or RSA certificates,
/// AES-GCM. CCM_8 and DHE are only used when asked for.
pub const DEFAULT_OPENSSL_SUITES: [CipherSuite; 4] = [
    CipherSuite::EcdheEcdsaAes128GcmSha256,
    CipherSuite::EcdheEcdsaAes256GcmSha384,
    CipherSuite::EcdheRsaAes128GcmSha256,
    CipherSuite::EcdheRsaAes256GcmSha384,
];

/// An in-memory datagram transport: each `write` is one datagram, each `read` one whole datagram
/// (truncated to the buffer, as a UDP socket would) or `WouldBlock`.
#[derive(Default)]
struct Datagrams {
    incoming: VecDeque<Vec<u8>>,
    outgoing: Vec<Vec<u8>>,
}

impl Read for Datagrams {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self.incoming.pop_front() {
            Some(d) => {
                let n = d.len().min(buf.len());
                buf[..n].copy_from_slice(&d[..n]);
                Ok(n)
            }
            None => Err(io::ErrorKind::WouldBlock.into()),
        }
    }
}

impl Write for Datagrams {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.outgoing.push(buf.to_vec());
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The connection's cookie (random, or the one a stateless responder issued), kept in the
/// `Ssl`'s ex-data for the cookie callbacks.
type CookieValue = [u8; COOKIE_LEN];

fn cookie_index() -> Result<openssl::ex_data::Index<Ssl, CookieValue>, ErrorStack> {
    static INDEX: OnceLock<openssl::ex_data::Index<Ssl, CookieValue>> = OnceLock::new();
    if let Some(i) = INDEX.get() {
        return Ok(*i);
    }
    let i = Ssl::new_ex_index::<CookieValue>()?;
    Ok(*INDEX.get_or_init(|| i))
}

/// What a step of OpenSSL's state machine wrote, as far as the retransmission timer cares.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Written {
    /// An answer to new input: a new flight, timer restarted.
    NewFlight,
    /// Written when our timer fired: a retransmission, the back-off goes on.
    Retransmission,
}

/// [`DtlsEngine`] over OpenSSL DTLS 1.2. See the module docs.
pub struct OpensslEngine {
    stream: SslStream<Datagrams>,
    out: VecDeque<EngineOutput>,
    timers: Timers,
    now: Instant,
    /// When the handshake must be done by.
    handshake_deadline: Instant,
    /// The last flight we sent, for copies on retransmission (or, once connected, our final
    /// flight, resent when the peer retransmits).
    flight: Vec<Vec<u8>>,
    /// When to retransmit `flight` (handshaking only).
    retransmit_at: Option<Instant>,
    rto: Duration,
    retries: usize,
    final_resends: usize,
    connected: bool,
    closed: bool,
    /// A fatal error OpenSSL reported, handed out by `poll_output` after the alert it wrote.
    failure: Option<FailReason>,
    /// Why the verify callback refused the peer's certificate, if it did.
    refused: Arc<OnceLock<FailReason>>,
    /// Numbers every epoch-0 record we send (see the module docs).
    epoch0: Epoch0Numbering,
}

impl core::fmt::Debug for OpensslEngine {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("OpensslEngine")
            .field("connected", &self.connected)
            .field("closed", &self.closed)
            .field("flight_datagrams", &self.flight.len())
            .field("retries", &self.retries)
            .field("rto", &self.rto)
            .finish_non_exhaustive()
    }
}

fn setting(what: &str, e: ErrorStack) -> EngineConfigError {
    EngineConfigError::Setting(format!("OpenSSL: {what}: {e}"))
}

/// OpenSSL's `use_srtp` profile list for `profiles`, in order; profiles without a DTLS-SRTP
/// identifier (AES-256-CM) are left out, and an empty result is an error.
fn srtp_list(profiles: &[Profile]) -> Result<String, EngineConfigError> {
    let names: Vec<&str> = profiles
        .iter()
        .filter_map(|p| p.dtls_profile().map(|(n, _)| n))
        .collect();
    if names.is_empty() {
        return Err(EngineConfigError::Setting(
            "none of the SRTP profiles has a DTLS-SRTP identifier".into(),
        ));
    }
    Ok(names.join(":"))
}

/// The settings an `SslContext` is built from: a digest of our certificate chain and key, the
/// role, the suites, the SRTP list, cookies, the ECDHE groups.
type ContextKey = (
    [u8; 32],
    Role,
    Vec<CipherSuite>,
    String,
    bool,
    Vec<EcdheGroup>,
);

/// Contexts already built, by settings. Building one parses the certificate and the key (an
/// RSA key costs far more than the lookup) and loads the suites; endpoints with the same
/// settings share one. The lock is taken once per endpoint created, never on the packet path.
fn shared_context(config: &EndpointConfig, cookies: bool) -> Result<SslContext, EngineConfigError> {
    static BUILT: OnceLock<Mutex<Vec<(ContextKey, SslContext)>>> = OnceLock::new();
    let cert = &config.certificate;
    let mut h = aws_lc_rs::digest::Context::new(&aws_lc_rs::digest::SHA256);
    for der in &cert.chain_der {
        h.update(&(der.len() as u64).to_be_bytes());
        h.update(der);
    }
    h.update(&cert.private_key_der);
    let mut digest = [0u8; 32];
    digest.copy_from_slice(h.finish().as_ref());
    let key: ContextKey = (
        digest,
        config.role,
        config.cipher_suites.clone(),
        srtp_list(&config.srtp_profiles)?,
        cookies,
        config.ecdhe_groups.clone(),
    );
    let built = BUILT.get_or_init(|| Mutex::new(Vec::new()));
    // A poisoned lock only means another thread panicked while building; the list is intact.
    let mut list = built.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, c)) = list.iter().find(|(k, _)| *k == key) {
        return Ok(c.clone());
    }
    let ctx = build_context(config, cookies)?;
    // Settings come from operators, not peers, so the list stays small; cap it anyway.
    if list.len() >= 64 {
        list.remove(0);
    }
    list.push((key, ctx.clone()));
    Ok(ctx)
}

/// A fresh `SslContext` for `config`.
fn build_context(config: &EndpointConfig, cookies: bool) -> Result<SslContext, EngineConfigError> {
    let cert = &config.certificate;
    let Some(leaf) = cert.chain_der.first().filter(|c| !c.is_empty()) else {
        return Err(EngineConfigError::EmptyCertificate);
    };
    let leaf = X509::from_der(leaf).map_err(|e| setting("certificate", e))?;
    let key = PKey::private_key_from_der(&cert.private_key_der)
        .map_err(|_| EngineConfigError::PrivateKey)?;

    let mut b = SslContextBuilder::new(SslMethod::dtls()).map_err(|e| setting("context", e))?;
    b.set_min_proto_version(Some(SslVersion::DTLS1_2))
        .and_then(|()| b.set_max_proto_version(Some(SslVersion::DTLS1_2)))
        .map_err(|e| setting("version", e))?;
    b.set_certificate(&leaf)
        .map_err(|e| setting("certificate", e))?;
    for extra in cert.chain_der.iter().skip(1) {
        let x = X509::from_der(extra).map_err(|e| setting("chain certificate", e))?;
        b.add_extra_chain_cert(x)
            .map_err(|e| setting("chain certificate", e))?;
    }
    b.set_private_key(&key)
        .and_then(|()| b.check_private_key())
        .map_err(|_| EngineConfigError::PrivateKey)?;
    let suites: &[CipherSuite] = if config.cipher_suites.is_empty() {
        &DEFAULT_OPENSSL_SUITES
    } else {
        &config.cipher_suites
    };
    let list: Vec<&str> = suites.iter().map(|s| s.openssl_name()).collect();
    b.set_cipher_list(&list.join(":"))
        .map_err(|e| setting("cipher suites", e))?;
    if suites.contains(&CipherSuite::DheRsaAes128GcmSha256) {
        let dh = Dh::params_from_pem(FFDHE2048_PEM.as_bytes())
            .map_err(|e| setting("DH parameters", e))?;
        b.set_tmp_dh(&dh).map_err(|e| setting("DH parameters", e))?;
    }
    let groups = if config.ecdhe_groups.is_empty() {
        GROUPS.to_string()
    } else {
        let names: Vec<&str> = config
            .ecdhe_groups
            .iter()
            .map(|g| g.openssl_name())
            .collect();
        names.join(":")
    };
    b.set_groups_list(&groups)
        .map_err(|e| setting("groups", e))?;
    b.set_tlsext_use_srtp(&srtp_list(&config.srtp_profiles)?)
        .map_err(|e| setting("SRTP profiles", e))?;
    // The endpoint checks the certificate (fingerprint or CA); OpenSSL only insists on one.
    b.set_verify_callback(
        SslVerifyMode::PEER | SslVerifyMode::FAIL_IF_NO_PEER_CERT,
        |_preverify_ok, _ctx| true,
    );
    b.set_session_cache_mode(SslSessionCacheMode::OFF);
    b.set_options(SslOptions::NO_TICKET | SslOptions::NO_QUERY_MTU | SslOptions::NO_RENEGOTIATION);
    if cookies {
        b.set_options(SslOptions::COOKIE_EXCHANGE);
        b.set_cookie_generate_cb(|ssl, out| {
            let secret = ssl
                .ex_data(cookie_index()?)
                .copied()
                .ok_or_else(ErrorStack::get)?;
            let n = secret.len().min(out.len());
            out[..n].copy_from_slice(&secret[..n]);
            Ok(n)
        });
        b.set_cookie_verify_cb(|ssl, cookie| {
            let Ok(index) = cookie_index() else {
                return false;
            };
            ssl.ex_data(index)
                .is_some_and(|secret| bool::from(secret.as_slice().ct_eq(cookie)))
        });
    } else {
        b.clear_options(SslOptions::COOKIE_EXCHANGE);
    }
    Ok(b.build())
}

impl OpensslEngine {
    /// Builds an OpenSSL DTLS 1.2 association for `config`, with its clock at `now`. A client's
    /// ClientHello is queued at once.
    pub fn new(config: &EndpointConfig, now: Instant) -> Result<OpensslEngine, EngineConfigError> {
        Self::with_cookie(config, now, None)
    }

    /// [`OpensslEngine::new`] for a server with cookies on whose cookie is `cookie` (the one a
    /// stateless responder issued; see [`DtlsEngine::take_over`]) rather than a random one.
    pub(crate) fn with_cookie(
        config: &EndpointConfig,
        now: Instant,
        cookie: Option<&CookieValue>,
    ) -> Result<OpensslEngine, EngineConfigError> {
        if config.version == DtlsVersion::Dtls13 {
            return Err(EngineConfigError::Setting(
                "the OpenSSL engine speaks DTLS 1.2 only (OpenSSL 3.0 has no DTLS 1.3)".into(),
            ));
        }
        let t = &config.timers;
        if t.initial_rto.is_zero() {
            return Err(EngineConfigError::Setting(
                "the initial retransmission timeout is zero".into(),
            ));
        }
        let mtu = u32::try_from(config.mtu)
            .map_err(|_| EngineConfigError::Setting(format!("MTU {} too large", config.mtu)))?;
        let cookies = config.role == Role::Server && config.server_cookies;
        let ctx = shared_context(config, cookies)?;
        let mut ssl = Ssl::new(&ctx).map_err(|e| setting("connection", e))?;
        ssl.set_mtu(mtu)
            .map_err(|e| setting(&format!("MTU {mtu}"), e))?;
        if cookies {
            let secret = match cookie {
                Some(c) => *c,
                None => {
                    let mut secret = [0u8; COOKIE_LEN];
                    openssl::rand::rand_bytes(&mut secret)
                        .map_err(|e| setting("cookie secret", e))?;
                    secret
                }
            };
            let index = cookie_index().map_err(|e| setting("cookie index", e))?;
            ssl.set_ex_data(index, secret);
        }
        let refused = Arc::new(OnceLock::new());
        let verdict = refused.clone();
        let peer_auth = config.peer_auth.clone();
        let peer_role = match config.role {
            Role::Client => Role::Server,
            Role::Server => Role::Client,
        };
        ssl.set_verify_callback(
            SslVerifyMode::PEER | SslVerifyMode::FAIL_IF_NO_PEER_CERT,
            move |_preverify_ok, ctx| {
                // Chain certificates are not verified here (the leaf is what the peer
                // announced); OpenSSL's own verdict on them (self-signed) is ignored.
                if ctx.error_depth() != 0 {
                    return true;
                }
                let Some(der) = ctx.current_cert().and_then(|c| c.to_der().ok()) else {
                    let _ = verdict.set(FailReason::PeerCertificate);
                    ctx.set_error(X509VerifyResult::APPLICATION_VERIFICATION);
                    return false;
                };
                match peer_auth.check(&der, peer_role) {
                    Ok(()) => true,
                    Err(reason) => {
                        let _ = verdict.set(reason);
                        ctx.set_error(X509VerifyResult::APPLICATION_VERIFICATION);
                        false
                    }
                }
            },
        );
        match config.role {
            Role::Client => ssl.set_connect_state(),
            Role::Server => ssl.set_accept_state(),
        }
        let stream = SslStream::new(ssl, Datagrams::default()).map_err(|e| setting("stream", e))?;
        let mut engine = OpensslEngine {
            stream,
            out: VecDeque::new(),
            timers: *t,
            now,
            handshake_deadline: now + t.handshake_timeout,
            flight: Vec::new(),
            retransmit_at: None,
            rto: t.initial_rto,
            retries: 0,
            final_resends: 0,
            connected: false,
            closed: false,
            failure: None,
            refused,
            epoch0: Epoch0Numbering::new(config.role),
        };
        if config.role == Role::Client {
            engine
                .step(Written::NewFlight)
                .map_err(|r| EngineConfigError::Setting(format!("first flight: {r}")))?;
        }
        Ok(engine)
    }

    /// Runs OpenSSL as far as the queued input allows and collects what it wrote. A fatal error
    /// is kept for `poll_output`, after the datagrams (OpenSSL's alert) written with it, so the
    /// peer hears why.
    fn step(&mut self, written: Written) -> Result<(), FailReason> {
        if self.failure.is_some() {
            return Ok(());
        }
        let was_connected = self.connected;
        let result = self.advance();
        let wrote = self.collect(written);
        if self.connected && !was_connected && !wrote {
            // The handshake ended on the peer's flight: we have no final flight to resend.
            self.flight.clear();
        }
        if let Err(reason) = result {
            self.failure = Some(reason);
            self.retransmit_at = None;
        }
        Ok(())
    }

    fn advance(&mut self) -> Result<(), FailReason> {
        if self.closed {
            return Ok(());
        }
        if !self.connected {
            match self.stream.do_handshake() {
                Ok(()) => self.on_connected()?,
                Err(e) if e.code() == ErrorCode::WANT_READ => return Ok(()),
                Err(e) => {
                    return Err(self
                        .refused
                        .get()
                        .copied()
                        .unwrap_or_else(|| handshake_reason(&e)))
                }
            }
        }
        // Connected: application data (discarded by the endpoint) and close_notify.
        let mut buf = vec![0u8; READ_BUF];
        loop {
            match self.stream.ssl_read(&mut buf) {
                Ok(0) => return Ok(()),
                Ok(n) => self
                    .out
                    .push_back(EngineOutput::ApplicationData(buf[..n].to_vec())),
                Err(e) if e.code() == ErrorCode::WANT_READ => return Ok(()),
                Err(e) if e.code() == ErrorCode::ZERO_RETURN => {
                    self.closed = true;
                    self.out.push_back(EngineOutput::PeerClosed);
                    return Ok(());
                }
                Err(e) => return Err(handshake_reason(&e)),
            }
        }
    }

    /// The handshake just completed: hand out the certificate, the keys, then `Connected`.
    fn on_connected(&mut self) -> Result<(), FailReason> {
        self.connected = true;
        self.retransmit_at = None;
        let ssl = self.stream.ssl();
        if let Some(der) = ssl.peer_certificate().and_then(|c| c.to_der().ok()) {
            self.out.push_back(EngineOutput::PeerCertificate(der));
        }
        // No profile negotiated: no keying output, and the endpoint fails with
        // NoCommonSrtpProfile.
        let profile_id = ssl
            .selected_srtp_profile()
            .and_then(|p| u16::try_from(p.id().as_raw()).ok());
        if let Some(profile_id) = profile_id {
            let Some(profile) = Profile::from_dtls_id(profile_id) else {
                return Err(FailReason::NoCommonSrtpProfile);
            };
            let mut material =
                Zeroizing::new(vec![0u8; 2 * (profile.key_len() + profile.salt_len())]);
            ssl.export_keying_material(&mut material, EXPORTER_LABEL, None)
                .map_err(|_| FailReason::Internal)?;
            self.out.push_back(EngineOutput::KeyingMaterial {
                profile_id,
                material,
            });
        }
        self.out.push_back(EngineOutput::Connected);
        Ok(())
    }

    /// Moves what OpenSSL wrote to the outputs and keeps it as the flight to retransmit.
    /// Whether anything was written.
    fn collect(&mut self, written: Written) -> bool {
        let mut datagrams = std::mem::take(&mut self.stream.get_mut().outgoing);
        if datagrams.is_empty() {
            return false;
        }
        for d in &mut datagrams {
            self.epoch0.renumber(d);
        }
        self.flight.clone_from(&datagrams);
        if !self.connected {
            if written == Written::NewFlight {
                self.rto = self.timers.initial_rto;
                self.retries = 0;
            }
            self.retransmit_at = Some(self.now + self.rto);
        }
        self.out
            .extend(datagrams.into_iter().map(EngineOutput::Transmit));
        true
    }

    /// Queues the last flight again, every epoch-0 record of it under a new sequence number.
    fn resend_flight(&mut self) {
        for d in &self.flight {
            let mut d = d.clone();
            self.epoch0.renumber(&mut d);
            self.out.push_back(EngineOutput::Transmit(d));
        }
    }

    /// Our timer fired: let OpenSSL retransmit if its own timer is due, else resend the flight.
    fn retransmit(&mut self) -> Result<(), FailReason> {
        self.retries += 1;
        if self.retries > self.timers.max_retransmissions {
            return Err(FailReason::HandshakeTimeout);
        }
        self.rto = (self.rto * 2).min(MAX_RTO);
        let before = self.out.len();
        self.step(Written::Retransmission)?;
        let openssl_resent = self
            .out
            .iter()
            .skip(before)
            .any(|o| matches!(o, EngineOutput::Transmit(_)));
        if self.failure.is_some() {
            return Ok(());
        }
        if !self.connected && !openssl_resent {
            self.resend_flight();
        }
        if !self.connected {
            self.retransmit_at = Some(self.now + self.rto);
        }
        Ok(())
    }
}

/// The largest DTLS record sequence number (48 bits).
const MAX_RECORD_SEQ: u64 = (1 << 48) - 1;
/// DTLS record header: type, version, epoch, 48-bit sequence number, length.
const RECORD_HEADER: usize = 13;
/// Record content types.
const CHANGE_CIPHER_SPEC: u8 = 20;
const HANDSHAKE: u8 = 22;
/// Handshake message types.
const CLIENT_HELLO: u8 = 1;
const HELLO_VERIFY_REQUEST: u8 = 3;

/// The engine's own write sequence space for epoch 0.
///
/// Epoch-0 records (plaintext handshake, ChangeCipherSpec, pre-handshake alerts) carry no MAC,
/// and the record sequence number is not part of the handshake transcript, so the number OpenSSL
/// wrote can be replaced. Every epoch-0 record we send — OpenSSL's own and our retransmitted
/// copies alike — takes the next number of one monotone counter, so no two records we send in
/// epoch 0 share a number (RFC 6347 §4.1, §4.2.4: a retransmission is a new record) and a copy is
/// never a replay to a peer that saw, and dropped, the original.
///
/// The server follows RFC 6347 §4.2.1 on cookie exchanges: a HelloVerifyRequest carries the record
/// sequence number of the ClientHello it answers, and the initial ServerHello that of the
/// ClientHello it answers (the counter moves up to every ClientHello's number, and past every
/// HelloVerifyRequest's). So the ServerHello and everything after it are above every
/// HelloVerifyRequest sent, as long as the client numbers its records upwards.
#[derive(Debug)]
struct Epoch0Numbering {
    role: Role,
    next: u64,
    /// Server: the record sequence number of the last ClientHello fed in.
    client_hello: Option<u64>,
}

impl Epoch0Numbering {
    fn new(role: Role) -> Self {
        Epoch0Numbering {
            role,
            next: 0,
            client_hello: None,
        }
    }

    /// Notes the record sequence number of a ClientHello in a datagram from the peer (server
    /// only), for the HelloVerifyRequest or ServerHello that may answer it.
    fn saw_datagram(&mut self, datagram: &[u8]) {
        if self.role != Role::Server {
            return;
        }
        for r in records(datagram) {
            if r.epoch == 0 && r.content_type == HANDSHAKE && r.body.first() == Some(&CLIENT_HELLO)
            {
                self.client_hello = Some(r.seq);
                self.next = self.next.max(r.seq);
            }
        }
    }

    /// Gives every epoch-0 record of `datagram` (one we are about to send) its number.
    fn renumber(&mut self, datagram: &mut [u8]) {
        let mut at = 0;
        loop {
            let Some((len, epoch, hello_verify)) = records(&datagram[at..]).next().map(|r| {
                let hvr =
                    r.content_type == HANDSHAKE && r.body.first() == Some(&HELLO_VERIFY_REQUEST);
                (r.len, r.epoch, hvr)
            }) else {
                return;
            };
            let start = at;
            at += len;
            if epoch != 0 {
                continue;
            }
            let hello_verify = hello_verify && self.role == Role::Server;
            let seq = match (hello_verify, self.client_hello) {
                (true, Some(ch)) => {
                    self.next = self.next.max(ch.saturating_add(1)).min(MAX_RECORD_SEQ);
                    ch
                }
                _ => {
                    let n = self.next;
                    // Past 2^48 - 1 the number would wrap: it stays there instead. A handshake
                    // sends a few dozen records, so only a peer whose ClientHello carried a number
                    // near the end gets here, and only it is hurt (its replay check drops them).
                    self.next = (self.next + 1).min(MAX_RECORD_SEQ);
                    n
                }
            };
            datagram[start + 5..start + 11].copy_from_slice(&seq.to_be_bytes()[2..]);
        }
    }
}

/// One DTLS 1.2 record of a datagram.
struct Record<'a> {
    content_type: u8,
    epoch: u16,
    seq: u64,
    body: &'a [u8],
    /// Header and body.
    len: usize,
}

/// The whole DTLS records at the start of `datagram`, in order; stops at the first truncated
/// one.
fn records(datagram: &[u8]) -> impl Iterator<Item = Record<'_>> {
    let mut rest = datagram;
    std::iter::from_fn(move || {
        let h = rest.get(..RECORD_HEADER)?;
        let body_len = usize::from(u16::from_be_bytes([h[11], h[12]]));
        let body = rest.get(RECORD_HEADER..RECORD_HEADER + body_len)?;
        let r = Record {
            content_type: h[0],
            epoch: u16::from_be_bytes([h[3], h[4]]),
            seq: u64::from_be_bytes([0, 0, h[5], h[6], h[7], h[8], h[9], h[10]]),
            body,
            len: RECORD_HEADER + body_len,
        };
        rest = &rest[r.len..];
        Some(r)
    })
}

/// OpenSSL's reason codes for a received alert are the alert's description plus this
/// (`SSL_AD_REASON_OFFSET`: `SSL_R_SSLV3_ALERT_HANDSHAKE_FAILURE` is 1040).
const ALERT_REASON_OFFSET: i32 = 1000;

/// Maps an OpenSSL failure to a reason from its error queue.
fn handshake_reason(e: &openssl::ssl::Error) -> FailReason {
    if e.code() == ErrorCode::SYSCALL && e.ssl_error().is_none() {
        return FailReason::Internal;
    }
    // The peer's fatal alert.
    let alert = e.ssl_error().and_then(|stack| {
        stack.errors().iter().find_map(|err| {
            let code = err.reason_code() - ALERT_REASON_OFFSET;
            u8::try_from(code)
                .ok()
                .filter(|c| *c > 0 && AlertDescription::from_code(*c).name().is_some())
        })
    });
    if let Some(code) = alert {
        return FailReason::PeerAlert(AlertDescription::from_code(code));
    }
    let text = e
        .ssl_error()
        .map(|s| s.to_string().to_ascii_lowercase())
        .unwrap_or_default();
    if text.contains("no shared cipher")
        || text.contains("no ciphers available")
        || text.contains("no suitable signature")
    {
        FailReason::NoCommonCipherSuite
    } else if text.contains("srtp") {
        FailReason::NoCommonSrtpProfile
    } else if text.contains("certificate") {
        FailReason::PeerCertificate
    } else if text.contains("decrypt")
        || text.contains("bad record mac")
        || text.contains("digest check failed")
        || text.contains("bad signature")
        || text.contains("signature")
        || text.contains("handshake failure")
    {
        FailReason::HandshakeFailure
    } else {
        FailReason::Protocol
    }
}

/// Whether a datagram starts with a handshake or ChangeCipherSpec record (a retransmitted
/// flight, once we are connected).
fn starts_with_handshake_record(d: &[u8]) -> bool {
    d.len() >= RECORD_HEADER && matches!(d[0], CHANGE_CIPHER_SPEC | HANDSHAKE)
}

impl DtlsEngine for OpensslEngine {
    fn name(&self) -> &'static str {
        "openssl"
    }

    fn handle_timeout(&mut self, now: Instant) -> Result<(), FailReason> {
        if now > self.now {
            self.now = now;
        }
        if self.connected || self.failure.is_some() {
            return Ok(());
        }
        if self.now >= self.handshake_deadline {
            return Err(FailReason::HandshakeTimeout);
        }
        if self.retransmit_at.is_some_and(|t| t <= self.now) {
            self.retransmit()?;
        }
        Ok(())
    }

    fn handle_datagram(&mut self, datagram: &[u8]) -> Result<(), FailReason> {
        if self.closed {
            return Ok(());
        }
        let was_connected = self.connected;
        self.epoch0.saw_datagram(datagram);
        self.stream.get_mut().incoming.push_back(datagram.to_vec());
        self.step(Written::NewFlight)?;
        // Drop anything OpenSSL left unread (it reads one datagram per record layer call).
        self.stream.get_mut().incoming.clear();
        if was_connected
            && self.failure.is_none()
            && starts_with_handshake_record(datagram)
            && !self.flight.is_empty()
            && self.final_resends < self.timers.max_retransmissions
        {
            self.final_resends += 1;
            self.resend_flight();
        }
        Ok(())
    }

    fn poll_output(&mut self) -> Result<EngineOutput, FailReason> {
        if let Some(o) = self.out.pop_front() {
            return Ok(o);
        }
        if let Some(reason) = self.failure {
            return Err(reason);
        }
        let at = if self.connected || self.closed {
            self.now + IDLE
        } else {
            match self.retransmit_at {
                Some(t) => t.min(self.handshake_deadline),
                None => self.handshake_deadline,
            }
        };
        Ok(EngineOutput::Timeout(at))
    }

    fn close(&mut self) -> Result<(), FailReason> {
        if self.connected && !self.closed {
            // close_notify; the peer's answer is not waited for (DTLS-SRTP closes one way).
            let _ = self.stream.shutdown();
            self.closed = true;
            self.collect(Written::NewFlight);
        }
        self.closed = true;
        self.retransmit_at = None;
        Ok(())
    }

    /// One `SSL_write`: OpenSSL seals it as one record, written to our datagram BIO. The
    /// records are not part of the handshake's last flight (which answers a retransmitted
    /// peer flight), so they go out as they are.
    fn send_application_data(&mut self, data: &[u8]) -> Result<(), FailReason> {
        if self.closed {
            return Ok(());
        }
        match self.stream.ssl_write(data) {
            Ok(n) if n == data.len() => {}
            Ok(_) => return Err(FailReason::Internal),
            Err(e) => return Err(handshake_reason(&e)),
        }
        let datagrams = std::mem::take(&mut self.stream.get_mut().outgoing);
        self.out
            .extend(datagrams.into_iter().map(EngineOutput::Transmit));
        Ok(())
    }

    fn protocol_version(&self) -> Option<&'static str> {
        self.connected.then_some("DTLS 1.2")
    }

    /// OpenSSL has already sent its own fatal alert for a failure it found (the verify
    /// callback's included), and the `openssl` crate cannot send another: a connected
    /// association that the endpoint refuses after the handshake gets `close_notify`.
    fn abort(&mut self, alert: AlertDescription) -> Result<(), FailReason> {
        let _ = alert;
        self.close()
    }

    /// The engine must have been built with the admission's cookie
    /// (`OpensslEngine::with_cookie`, as `Endpoint::new_admitted` builds it): OpenSSL's cookie
    /// callbacks then issue and accept it.
    fn take_over(&mut self, admission: &Admission) -> Result<(), FailReason> {
        let index = cookie_index().map_err(|_| FailReason::Internal)?;
        if self.stream.ssl().ex_data(index) != Some(admission.cookie()) {
            return Err(FailReason::Internal);
        }
        for hello in admission.earlier_hellos() {
            self.handle_datagram(hello)?;
            if let Some(reason) = self.failure {
                return Err(reason);
            }
            // Its HelloVerifyRequest (the client has the responder's, with the same cookie),
            // and with it that flight and its timer.
            self.out.clear();
            self.flight.clear();
            self.retransmit_at = None;
        }
        self.handle_datagram(admission.hello())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record: content type, epoch, sequence number, body.
    fn record(content_type: u8, epoch: u16, seq: u64, body: &[u8]) -> Vec<u8> {
        let mut r = vec![content_type, 0xfe, 0xfd];
        r.extend_from_slice(&epoch.to_be_bytes());
        r.extend_from_slice(&seq.to_be_bytes()[2..]);
        r.extend_from_slice(&(body.len() as u16).to_be_bytes());
        r.extend_from_slice(body);
        r
    }

    fn numbers(datagram: &[u8]) -> Vec<(u16, u64)> {
        records(datagram).map(|r| (r.epoch, r.seq)).collect()
    }

    #[test]
    fn every_epoch0_record_takes_the_next_number_and_epoch1_is_left_alone() {
        let mut n = Epoch0Numbering::new(Role::Client);
        let mut flight = [
            record(HANDSHAKE, 0, 7, &[11, 0, 0, 1, 0]),
            record(HANDSHAKE, 0, 8, &[16, 0, 0, 1, 0]),
            record(CHANGE_CIPHER_SPEC, 0, 9, &[1]),
            record(HANDSHAKE, 1, 0, &[0xaa; 40]),
        ]
        .concat();
        let epoch1_before = flight[flight.len() - 53..].to_vec();
        n.renumber(&mut flight);
        assert_eq!(numbers(&flight), [(0, 0), (0, 1), (0, 2), (1, 0)]);
        assert_eq!(&flight[flight.len() - 53..], &epoch1_before[..]);
        // The same flight again: new numbers for epoch 0, epoch 1 untouched.
        n.renumber(&mut flight);
        assert_eq!(numbers(&flight), [(0, 3), (0, 4), (0, 5), (1, 0)]);
    }

    #[test]
    fn a_hello_verify_request_echoes_the_client_hello_and_the_server_hello_follows_it() {
        let mut n = Epoch0Numbering::new(Role::Server);
        n.saw_datagram(&record(HANDSHAKE, 0, 5, &[CLIENT_HELLO, 0, 0, 0]));
        let mut hvr = record(HANDSHAKE, 0, 0, &[HELLO_VERIFY_REQUEST, 0, 0, 3]);
        n.renumber(&mut hvr);
        assert_eq!(numbers(&hvr), [(0, 5)]);
        // The client's retransmitted ClientHello, answered again.
        n.saw_datagram(&record(HANDSHAKE, 0, 6, &[CLIENT_HELLO, 0, 0, 0]));
        n.renumber(&mut hvr);
        assert_eq!(numbers(&hvr), [(0, 6)]);
        // The ClientHello with the cookie: the ServerHello flight starts at its number.
        n.saw_datagram(&record(HANDSHAKE, 0, 9, &[CLIENT_HELLO, 0, 0, 0]));
        let mut flight = [
            record(HANDSHAKE, 0, 1, &[2, 0, 0, 0]),
            record(HANDSHAKE, 0, 2, &[11, 0, 0, 0]),
        ]
        .concat();
        n.renumber(&mut flight);
        assert_eq!(numbers(&flight), [(0, 9), (0, 10)]);
        // A client never echoes: a HelloVerifyRequest-like record from a client is numbered.
        let mut c = Epoch0Numbering::new(Role::Client);
        let mut odd = record(HANDSHAKE, 0, 40, &[HELLO_VERIFY_REQUEST, 0, 0, 3]);
        c.renumber(&mut odd);
        assert_eq!(numbers(&odd), [(0, 0)]);
    }

    #[test]
    fn the_counter_stops_at_the_largest_number_and_truncated_records_are_left_alone() {
        let mut n = Epoch0Numbering::new(Role::Server);
        n.saw_datagram(&record(HANDSHAKE, 0, MAX_RECORD_SEQ, &[CLIENT_HELLO, 0]));
        let mut hvr = record(HANDSHAKE, 0, 0, &[HELLO_VERIFY_REQUEST]);
        n.renumber(&mut hvr);
        let mut next = record(HANDSHAKE, 0, 0, &[2]);
        n.renumber(&mut next);
        assert_eq!(numbers(&next), [(0, MAX_RECORD_SEQ)]);
        // A datagram whose second record is cut short: the whole first record is numbered,
        // the rest is not touched, and nothing panics.
        let mut cut = [
            record(HANDSHAKE, 0, 3, &[2, 0]),
            record(HANDSHAKE, 0, 4, &[11; 9]),
        ]
        .concat();
        cut.truncate(cut.len() - 4);
        let tail = cut[15..].to_vec();
        let mut m = Epoch0Numbering::new(Role::Client);
        m.renumber(&mut cut);
        assert_eq!(numbers(&cut), [(0, 0)]);
        assert_eq!(&cut[15..], &tail[..]);
        for len in 0..cut.len() {
            m.renumber(&mut cut[..len].to_vec());
            m.saw_datagram(&cut[..len]);
        }
    }
}
