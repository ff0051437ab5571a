//! OpenSSL (the system's libssl 3.0, through the `openssl` crate) as a DTLS 1.2 peer whose
//! transport is an in-memory datagram queue: the baseline for the DTLS handshake benchmark and
//! an interop peer that needs no sockets.
//!
//! Configuration (fixed, WebRTC-like): DTLS 1.2 only, cipher `ECDHE-ECDSA-AES128-GCM-SHA256`,
//! ECDHE on P-256 only, `use_srtp` offering `SRTP_AES128_CM_SHA1_80:SRTP_AEAD_AES_128_GCM`,
//! mutual certificate authentication (the peer must present a certificate; any certificate is
//! accepted here — checking its fingerprint is the caller's job, see
//! [`OpensslDtls::peer_certificate_der`]), no session cache or tickets (every handshake is a
//! full one, as in WebRTC), and a 1150-byte MTU set explicitly (the in-memory transport has no
//! path MTU to query).
//!
//! **Cookies are off**: the server answers the first ClientHello without a HelloVerifyRequest
//! round trip. OpenSSL only does the cookie exchange when `SSL_OP_COOKIE_EXCHANGE` is set *and*
//! cookie generate/verify callbacks are installed (normally with `DTLSv1_listen` in front of a
//! socket); for an in-memory benchmark there is no address to bind a cookie to, so it is left
//! out, and secrelay's endpoint is benchmarked with `server_cookies = false` to match.
//!
//! Retransmission: OpenSSL's DTLS timer runs on the real clock inside `SSL_do_handshake`; this
//! wrapper does not expose `DTLSv1_handle_timeout`, so it is meant for loss-free in-memory links
//! (a lost datagram would only be resent when a later `handshake_step` finds the timer expired).
//!
//! ```
//! use secrelay_peers::openssl_dtls::{OpensslDtls, Step};
//! # fn pem() -> (String, String) {
//! #     let key = openssl::ec::EcKey::generate(
//! #         &openssl::ec::EcGroup::from_curve_name(openssl::nid::Nid::X9_62_PRIME256V1).unwrap(),
//! #     ).unwrap();
//! #     let key = openssl::pkey::PKey::from_ec_key(key).unwrap();
//! #     let mut b = openssl::x509::X509::builder().unwrap();
//! #     b.set_pubkey(&key).unwrap();
//! #     b.set_not_before(&openssl::asn1::Asn1Time::days_from_now(0).unwrap()).unwrap();
//! #     b.set_not_after(&openssl::asn1::Asn1Time::days_from_now(30).unwrap()).unwrap();
//! #     b.sign(&key, openssl::hash::MessageDigest::sha256()).unwrap();
//! #     let cert = b.build();
//! #     (
//! #         String::from_utf8(cert.to_pem().unwrap()).unwrap(),
//! #         String::from_utf8(key.private_key_to_pem_pkcs8().unwrap()).unwrap(),
//! #     )
//! # }
//! let (cc, ck) = pem();
//! let (sc, sk) = pem();
//! let mut client = OpensslDtls::client(&cc, &ck).unwrap();
//! let mut server = OpensslDtls::server(&sc, &sk).unwrap();
//! let (mut c_done, mut s_done) = (false, false);
//! while !(c_done && s_done) {
//!     c_done |= client.handshake_step().unwrap() == Step::Done;
//!     for d in client.take_outgoing() { server.push_incoming(d); }
//!     s_done |= server.handshake_step().unwrap() == Step::Done;
//!     for d in server.take_outgoing() { client.push_incoming(d); }
//! }
//! assert_eq!(client.keying_material(60).unwrap(), server.keying_material(60).unwrap());
//! ```

use std::collections::VecDeque;
use std::fmt;
use std::io::{self, Read, Write};

use openssl::error::ErrorStack;
use openssl::pkey::{PKey, Private};
use openssl::ssl::{
    ErrorCode, Ssl, SslContext, SslContextBuilder, SslMethod, SslOptions, SslSessionCacheMode,
    SslStream, SslVerifyMode, SslVersion,
};
use openssl::x509::X509;

/// The `use_srtp` profiles offered (client) or accepted (server), OpenSSL's names.
pub const SRTP_PROFILES: &str = "SRTP_AES128_CM_SHA1_80:SRTP_AEAD_AES_128_GCM";
/// The one cipher suite allowed.
pub const CIPHER: &str = "ECDHE-ECDSA-AES128-GCM-SHA256";
/// The one ECDHE group allowed.
pub const GROUPS: &str = "P-256";
/// RFC 5764 exporter label for the SRTP keying block.
pub const EXPORTER_LABEL: &str = "EXTRACTOR-dtls_srtp";
/// Handshake datagram size limit (secrelay's default MTU).
pub const MTU: u32 = 1150;

/// Which side of the handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DtlsRole {
    /// Sends the ClientHello.
    Client,
    /// Answers it.
    Server,
}

/// What a [`OpensslDtls::handshake_step`] left the handshake at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Waiting for the peer: send [`OpensslDtls::take_outgoing`], then feed the answer with
    /// [`OpensslDtls::push_incoming`] and step again.
    WantRead,
    /// The handshake is complete (there may still be a last flight to send).
    Done,
}

/// Errors from the OpenSSL peer.
#[derive(Debug)]
pub enum Error {
    /// Setting up the context or the connection failed.
    Setup(ErrorStack),
    /// The handshake failed.
    Handshake(String),
    /// Called in the wrong state (e.g. keying material before the handshake completed).
    State(&'static str),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Setup(e) => write!(f, "OpenSSL DTLS set-up failed: {e}"),
            Error::Handshake(e) => write!(f, "OpenSSL DTLS handshake failed: {e}"),
            Error::State(e) => write!(f, "OpenSSL DTLS: {e}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<ErrorStack> for Error {
    fn from(e: ErrorStack) -> Self {
        Error::Setup(e)
    }
}

/// An in-memory datagram transport: every `write` is one datagram, every `read` returns one
/// whole datagram or `WouldBlock` when none is queued.
#[derive(Debug, Default)]
pub struct MemoryDatagrams {
    incoming: VecDeque<Vec<u8>>,
    outgoing: Vec<Vec<u8>>,
}

impl Read for MemoryDatagrams {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self.incoming.pop_front() {
            Some(d) => {
                // A datagram larger than the buffer is truncated, as a UDP socket would.
                let n = d.len().min(buf.len());
                buf[..n].copy_from_slice(&d[..n]);
                Ok(n)
            }
            None => Err(io::ErrorKind::WouldBlock.into()),
        }
    }
}

impl Write for MemoryDatagrams {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.outgoing.push(buf.to_vec());
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Context settings beyond the fixed WebRTC-like defaults ([`CIPHER`], [`GROUPS`],
/// [`SRTP_PROFILES`]): other cipher suites (an RSA server certificate needs an ECDHE-RSA
/// suite), groups, or SRTP profiles.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DtlsSettings {
    /// OpenSSL cipher list (DTLS 1.2 suites), e.g. `ECDHE-RSA-AES128-GCM-SHA256`.
    pub cipher_list: String,
    /// ECDHE groups, colon-separated, e.g. `P-256`.
    pub groups: String,
    /// `use_srtp` profiles, colon-separated OpenSSL names, in preference order.
    pub srtp_profiles: String,
}

impl Default for DtlsSettings {
    fn default() -> Self {
        DtlsSettings {
            cipher_list: CIPHER.into(),
            groups: GROUPS.into(),
            srtp_profiles: SRTP_PROFILES.into(),
        }
    }
}

/// A configured OpenSSL DTLS context (certificate, key, suites), built once; every
/// [`OpensslDtlsContext::endpoint`] is a fresh connection sharing it.
#[derive(Clone)]
pub struct OpensslDtlsContext {
    role: DtlsRole,
    ctx: SslContext,
}

impl fmt::Debug for OpensslDtlsContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpensslDtlsContext")
            .field("role", &self.role)
            .finish_non_exhaustive()
    }
}

impl OpensslDtlsContext {
    /// A context from a PEM certificate and a PEM private key (PKCS#8 or SEC1).
    pub fn from_pem(role: DtlsRole, cert_pem: &str, key_pem: &str) -> Result<Self, Error> {
        let cert = X509::from_pem(cert_pem.as_bytes())?;
        let key = PKey::private_key_from_pem(key_pem.as_bytes())?;
        Self::build(role, &cert, &key)
    }

    /// A context from a DER certificate and a DER private key (PKCS#8, or a traditional format).
    pub fn from_der(role: DtlsRole, cert_der: &[u8], key_der: &[u8]) -> Result<Self, Error> {
        let cert = X509::from_der(cert_der)?;
        let key = PKey::private_key_from_der(key_der)?;
        Self::build(role, &cert, &key)
    }

    /// Like [`OpensslDtlsContext::from_der`], with other cipher suites, groups or SRTP
    /// profiles.
    pub fn from_der_with(
        role: DtlsRole,
        cert_der: &[u8],
        key_der: &[u8],
        settings: &DtlsSettings,
    ) -> Result<Self, Error> {
        let cert = X509::from_der(cert_der)?;
        let key = PKey::private_key_from_der(key_der)?;
        Self::build_with(role, &cert, &key, settings)
    }

    fn build(role: DtlsRole, cert: &X509, key: &PKey<Private>) -> Result<Self, Error> {
        Self::build_with(role, cert, key, &DtlsSettings::default())
    }

    fn build_with(
        role: DtlsRole,
        cert: &X509,
        key: &PKey<Private>,
        settings: &DtlsSettings,
    ) -> Result<Self, Error> {
        let mut b = SslContextBuilder::new(SslMethod::dtls())?;
        b.set_min_proto_version(Some(SslVersion::DTLS1_2))?;
        b.set_max_proto_version(Some(SslVersion::DTLS1_2))?;
        b.set_certificate(cert)?;
        b.set_private_key(key)?;
        b.check_private_key()?;
        b.set_cipher_list(&settings.cipher_list)?;
        b.set_groups_list(&settings.groups)?;
        b.set_tlsext_use_srtp(&settings.srtp_profiles)?;
        // Mutual auth: demand the peer's certificate, accept any (fingerprint checked by the
        // caller, as in WebRTC).
        b.set_verify_callback(
            SslVerifyMode::PEER | SslVerifyMode::FAIL_IF_NO_PEER_CERT,
            |_preverify_ok, _ctx| true,
        );
        // Every handshake a full one; no MTU query on a BIO that has no path.
        b.set_session_cache_mode(SslSessionCacheMode::OFF);
        b.set_options(SslOptions::NO_TICKET | SslOptions::NO_QUERY_MTU);
        b.clear_options(SslOptions::COOKIE_EXCHANGE);
        Ok(OpensslDtlsContext {
            role,
            ctx: b.build(),
        })
    }

    /// Client or server.
    pub fn role(&self) -> DtlsRole {
        self.role
    }

    /// A fresh connection over an empty in-memory transport. A client's first flight is
    /// produced by the first [`OpensslDtls::handshake_step`].
    pub fn endpoint(&self) -> Result<OpensslDtls, Error> {
        let mut ssl = Ssl::new(&self.ctx)?;
        ssl.set_mtu(MTU)?;
        match self.role {
            DtlsRole::Client => ssl.set_connect_state(),
            DtlsRole::Server => ssl.set_accept_state(),
        }
        let stream = SslStream::new(ssl, MemoryDatagrams::default())?;
        Ok(OpensslDtls {
            role: self.role,
            stream,
            done: false,
        })
    }
}

/// One OpenSSL DTLS 1.2 connection over [`MemoryDatagrams`].
pub struct OpensslDtls {
    role: DtlsRole,
    stream: SslStream<MemoryDatagrams>,
    done: bool,
}

impl fmt::Debug for OpensslDtls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpensslDtls")
            .field("role", &self.role)
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl OpensslDtls {
    /// A client from PEM certificate and key (builds a one-off context; reuse an
    /// [`OpensslDtlsContext`] for many connections).
    pub fn client(cert_pem: &str, key_pem: &str) -> Result<Self, Error> {
        OpensslDtlsContext::from_pem(DtlsRole::Client, cert_pem, key_pem)?.endpoint()
    }

    /// A server from PEM certificate and key (see [`OpensslDtls::client`]).
    pub fn server(cert_pem: &str, key_pem: &str) -> Result<Self, Error> {
        OpensslDtlsContext::from_pem(DtlsRole::Server, cert_pem, key_pem)?.endpoint()
    }

    /// Client or server.
    pub fn role(&self) -> DtlsRole {
        self.role
    }

    /// Runs the handshake as far as the queued incoming datagrams allow.
    pub fn handshake_step(&mut self) -> Result<Step, Error> {
        if self.done {
            return Ok(Step::Done);
        }
        match self.stream.do_handshake() {
            Ok(()) => {
                self.done = true;
                Ok(Step::Done)
            }
            Err(e) if e.code() == ErrorCode::WANT_READ => Ok(Step::WantRead),
            Err(e) => Err(Error::Handshake(e.to_string())),
        }
    }

    /// Whether the handshake has completed.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// The datagrams written since the last call, in order.
    pub fn take_outgoing(&mut self) -> Vec<Vec<u8>> {
        std::mem::take(&mut self.stream.get_mut().outgoing)
    }

    /// Moves the written datagrams onto `out` (no new vector; for tight loops).
    pub fn drain_outgoing_into(&mut self, out: &mut Vec<Vec<u8>>) {
        out.append(&mut self.stream.get_mut().outgoing);
    }

    /// Queues one datagram from the peer.
    pub fn push_incoming(&mut self, datagram: Vec<u8>) {
        self.stream.get_mut().incoming.push_back(datagram);
    }

    /// `len` bytes of `EXTRACTOR-dtls_srtp` keying material (RFC 5764 §4.2), once connected.
    pub fn keying_material(&self, len: usize) -> Result<Vec<u8>, Error> {
        let mut out = vec![0u8; len];
        self.keying_material_into(&mut out)?;
        Ok(out)
    }

    /// Fills `out` with `EXTRACTOR-dtls_srtp` keying material, once connected.
    pub fn keying_material_into(&self, out: &mut [u8]) -> Result<(), Error> {
        if !self.done {
            return Err(Error::State(
                "keying material before the handshake completed",
            ));
        }
        self.stream
            .ssl()
            .export_keying_material(out, EXPORTER_LABEL, None)?;
        Ok(())
    }

    /// The negotiated SRTP profile's OpenSSL name (e.g. `SRTP_AES128_CM_SHA1_80`).
    pub fn srtp_profile_name(&self) -> Option<String> {
        self.stream
            .ssl()
            .selected_srtp_profile()
            .map(|p| p.name().to_owned())
    }

    /// The negotiated SRTP profile's RFC 5764 / IANA id (e.g. 0x0001, 0x0007).
    pub fn srtp_profile_id(&self) -> Option<u16> {
        self.stream
            .ssl()
            .selected_srtp_profile()
            .and_then(|p| u16::try_from(p.id().as_raw()).ok())
    }

    /// The peer's certificate (DER), for the caller's fingerprint check.
    pub fn peer_certificate_der(&self) -> Option<Vec<u8>> {
        self.stream
            .ssl()
            .peer_certificate()
            .and_then(|c| c.to_der().ok())
    }

    /// The negotiated protocol version (`"DTLSv1.2"`).
    pub fn version(&self) -> &'static str {
        self.stream.ssl().version_str()
    }

    /// The negotiated cipher suite's OpenSSL name.
    pub fn cipher_name(&self) -> Option<&'static str> {
        self.stream.ssl().current_cipher().map(|c| c.name())
    }
}
