//! A stateless DTLS 1.2 cookie responder (RFC 6347 §4.2.1) to run in front of endpoints.
//!
//! A dimpl association is one object per peer, so a server that makes an [`Endpoint`] for
//! every new source address keeps state for every spoofed ClientHello, cookie or not. The
//! responder answers a ClientHello without a valid cookie with a HelloVerifyRequest computed
//! from a secret, the peer's address and the ClientHello's parameters, and keeps nothing. Only
//! a ClientHello that returns a valid cookie — proof that the peer receives at its address —
//! is admitted ([`CookieVerdict::Admit`]); the server then makes the endpoint with
//! [`Endpoint::new_admitted`], which takes the handshake over from there. `secrelay lab
//! handshake-server` runs this way.
//!
//! # The hand-off
//! After a HelloVerifyRequest the client sends its second ClientHello (the one with the
//! cookie) at handshake message_seq 1 and expects the ServerHello at 1 (RFC 6347 §4.2.2);
//! message_seq is in the Finished transcript, so a server that never sent a HelloVerifyRequest
//! itself (expecting message_seq 0) cannot take that ClientHello, and the numbers cannot be
//! rewritten in between. Neither dimpl 0.9 nor OpenSSL can start a server from a pre-verified
//! ClientHello. So [`Endpoint::new_admitted`] makes the engine with its own cookie exchange on
//! and replays the exchange the responder did, with the responder's cookie:
//!
//! 1. the engine gets a reconstruction of the client's first ClientHello: the admitted one
//!    with its cookie emptied, at message_seq 0 (and a record number below it). It answers
//!    with a HelloVerifyRequest, which is dropped: the client already has the responder's,
//!    carrying the same cookie. The engine then expects message_seq 1, as after any
//!    HelloVerifyRequest of its own. (A client that had to send more ClientHellos — its first
//!    cookie came back refused, after two rotations of the secret — sends the admitted one at
//!    message_seq n and expects the ServerHello at n: the engine is shown n reconstructions,
//!    at message_seq 0 to n − 1, and answers n HelloVerifyRequests, all dropped. At most
//!    [`MAX_EARLIER_HELLOS`]; a ClientHello with a valid cookie at message_seq 0 is fed as it
//!    is.)
//! 2. the engine gets the admitted ClientHello, byte for byte, and checks its cookie — which
//!    is the responder's, because for this one ClientHello the engine's cookie *is* the
//!    responder's: dimpl computes its cookie as an HMAC of the client random through
//!    secrelay's crypto provider, which, only during these two calls and only on this thread,
//!    answers the HMAC of exactly this client random with the responder's cookie
//!    (`provider::pin_cookie`); OpenSSL's cookie callbacks issue and expect the value the
//!    engine was built with, here the responder's cookie.
//!
//! Why this is sound: (a) RFC 6347 §4.2.1 keeps the first ClientHello and the
//! HelloVerifyRequest out of the handshake transcript (dimpl clears its transcript after
//! sending a HelloVerifyRequest, OpenSSL resets its handshake hash), so the reconstruction's
//! bytes never reach the Finished MACs or the CertificateVerify; what is hashed is the
//! client's own second ClientHello and what follows it, exactly as if the engine had sent the
//! HelloVerifyRequest itself. (b) The engine's state after step 1 is the state it is in after
//! any HelloVerifyRequest of its own: it keeps nothing of the first ClientHello but the
//! message numbers. (c) The pin makes dimpl accept only the cookie the responder already
//! verified for this ClientHello (the same client random, from the same address), during the
//! call that feeds it. (d) It fails closed: if the engine does not take the admitted
//! ClientHello (a future dimpl computing its cookie some other way would answer it with
//! another HelloVerifyRequest), [`Endpoint::new_admitted`] fails the endpoint
//! ([`FailReason::Internal`](crate::FailReason::Internal)) instead of sending anything.
//! Tested with secrelay's client on both engines, OpenSSL's `s_client` and pion/dtls.
//!
//! A cookie proves that the peer received at its address, not that the ClientHello is fresh:
//! a copy of an admitted ClientHello from the same address is admitted again until the secret
//! has been rotated twice ([`CookieResponder::rotate`]); a server keeps one endpoint per
//! address, so such copies make no more state than the peer itself.
//!
//! DTLS 1.3 is not handled here. A hybrid (1.2 + 1.3) ClientHello answered with a
//! HelloVerifyRequest continues in DTLS 1.2 (dimpl's client does), and the admitted endpoint
//! always speaks DTLS 1.2; a DTLS 1.3-only client cannot complete through the responder. A
//! server that accepts DTLS 1.3 should give ClientHellos offering it to an endpoint of their
//! own, whose HelloRetryRequest cookie is per object.
//!
//! [`Endpoint`]: crate::endpoint::Endpoint
//! [`Endpoint::new_admitted`]: crate::endpoint::Endpoint::new_admitted

use std::fmt;
use std::net::SocketAddr;

use aws_lc_rs::hmac;

/// Cookie length in bytes (HMAC-SHA256, truncated); dimpl's own cookies have this length too.
pub const COOKIE_LEN: usize = 32;

/// The largest handshake message_seq an admitted ClientHello may carry: the number of
/// HelloVerifyRequests the client got before it (a ClientHello beyond it is dropped).
pub const MAX_EARLIER_HELLOS: u16 = 4;

/// What to do with a datagram from an address that has no endpoint yet.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CookieVerdict {
    /// Send this HelloVerifyRequest back to the address; keep no state.
    HelloVerifyRequest(Vec<u8>),
    /// The ClientHello carries a valid cookie: make the endpoint with
    /// [`Endpoint::new_admitted`](crate::endpoint::Endpoint::new_admitted), which feeds it the
    /// datagram.
    Admit(Admission),
    /// Not an unfragmented DTLS ClientHello: drop it.
    Drop,
}

/// A ClientHello whose cookie the responder verified: what
/// [`Endpoint::new_admitted`](crate::endpoint::Endpoint::new_admitted) needs to take the
/// handshake over. Only [`CookieResponder::check`] makes one.
#[derive(Clone, PartialEq, Eq)]
pub struct Admission {
    /// The client's earlier ClientHellos as the engine is shown them, one per
    /// HelloVerifyRequest the client got: the admitted one with an empty cookie, at
    /// message_seq 0, 1, … and record numbers below the admitted one's.
    earlier_hellos: Vec<Vec<u8>>,
    /// The admitted datagram, as received.
    hello: Vec<u8>,
    random: [u8; 32],
    cookie: [u8; COOKIE_LEN],
}

impl Admission {
    /// The reconstructed earlier ClientHellos (no cookie; message_seq 0, 1, …), one datagram
    /// each, as many as the admitted ClientHello's message_seq (usually one).
    pub fn earlier_hellos(&self) -> &[Vec<u8>] {
        &self.earlier_hellos
    }

    /// The admitted datagram (the ClientHello with the cookie), as received.
    pub fn hello(&self) -> &[u8] {
        &self.hello
    }

    /// The ClientHello's random.
    pub fn client_random(&self) -> &[u8; 32] {
        &self.random
    }

    /// The cookie the responder issued and the client returned.
    pub fn cookie(&self) -> &[u8; COOKIE_LEN] {
        &self.cookie
    }
}

impl fmt::Debug for Admission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Admission")
            .field("hello_len", &self.hello.len())
            .finish_non_exhaustive()
    }
}

/// Stateless HelloVerifyRequest responder keyed with a secret. Rotate the secret with
/// [`CookieResponder::rotate`]; cookies made under the previous secret stay valid until the
/// next rotation.
pub struct CookieResponder {
    current: hmac::Key,
    previous: Option<hmac::Key>,
}

impl fmt::Debug for CookieResponder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CookieResponder").finish_non_exhaustive()
    }
}

/// The parts of a ClientHello the cookie covers, and where the rest lies.
struct ClientHello<'a> {
    record_version: &'a [u8],
    record_seq: &'a [u8],
    client_version: &'a [u8],
    message_seq: u16,
    random: &'a [u8],
    session_id: &'a [u8],
    cookie: &'a [u8],
    cipher_suites: &'a [u8],
    /// The message body from the cipher suites' length to its end.
    after_cookie: &'a [u8],
}

fn take<'a>(buf: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
    if buf.len() < n {
        return None;
    }
    let (head, tail) = buf.split_at(n);
    *buf = tail;
    Some(head)
}

fn u8_prefixed<'a>(buf: &mut &'a [u8]) -> Option<&'a [u8]> {
    let n = usize::from(take(buf, 1)?[0]);
    take(buf, n)
}

fn parse_client_hello(datagram: &[u8]) -> Option<ClientHello<'_>> {
    let mut rec = datagram;
    let header = take(&mut rec, 13)?;
    // content type handshake, epoch 0
    if header[0] != 22 || header[1] != 0xfe || header[3..5] != [0, 0] {
        return None;
    }
    let record_version = &header[1..3];
    let record_seq = &header[5..11];
    let len = usize::from(u16::from_be_bytes([header[11], header[12]]));
    let mut hs = take(&mut rec, len)?;
    let hh = take(&mut hs, 12)?;
    if hh[0] != 1 {
        return None;
    }
    let msg_len = u32::from_be_bytes([0, hh[1], hh[2], hh[3]]) as usize;
    let message_seq = u16::from_be_bytes([hh[4], hh[5]]);
    let frag_off = u32::from_be_bytes([0, hh[6], hh[7], hh[8]]);
    let frag_len = u32::from_be_bytes([0, hh[9], hh[10], hh[11]]) as usize;
    if frag_off != 0 || frag_len != msg_len {
        return None;
    }
    let mut body = take(&mut hs, msg_len)?;
    let client_version = take(&mut body, 2)?;
    let random = take(&mut body, 32)?;
    let session_id = u8_prefixed(&mut body)?;
    let cookie = u8_prefixed(&mut body)?;
    let after_cookie = body;
    let n = take(&mut body, 2)?;
    let n = usize::from(u16::from_be_bytes([n[0], n[1]]));
    if n == 0 || n % 2 != 0 || session_id.len() > 32 {
        return None;
    }
    let cipher_suites = take(&mut body, n)?;
    let compression = u8_prefixed(&mut body)?;
    if compression.is_empty() {
        return None;
    }
    Some(ClientHello {
        record_version,
        record_seq,
        client_version,
        message_seq,
        random,
        session_id,
        cookie,
        cipher_suites,
        after_cookie,
    })
}

/// An earlier ClientHello as the engine is shown it: `ch` with an empty cookie, at handshake
/// `message_seq`, and `back` record numbers before `ch`'s (a DTLS record layer, OpenSSL's,
/// drops a second record with the same number as a replay).
fn earlier_hello(ch: &ClientHello<'_>, message_seq: u16, back: u64) -> Vec<u8> {
    let body_len = 2 + 32 + 1 + ch.session_id.len() + 1 + ch.after_cookie.len();
    let hs_len = 12 + body_len;
    let mut seq = [0u8; 8];
    seq[2..].copy_from_slice(ch.record_seq);
    let seq = u64::from_be_bytes(seq).saturating_sub(back);
    let mut out = Vec::with_capacity(13 + hs_len);
    out.push(22);
    out.extend_from_slice(ch.record_version);
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(&seq.to_be_bytes()[2..]);
    // The ClientHello fitted in a record of the admitted datagram with its cookie; without it
    // it is shorter.
    out.extend_from_slice(&(hs_len as u16).to_be_bytes());
    out.push(1); // client_hello
    out.extend_from_slice(&(body_len as u32).to_be_bytes()[1..]);
    out.extend_from_slice(&message_seq.to_be_bytes());
    out.extend_from_slice(&[0, 0, 0]); // fragment_offset
    out.extend_from_slice(&(body_len as u32).to_be_bytes()[1..]);
    out.extend_from_slice(ch.client_version);
    out.extend_from_slice(ch.random);
    out.push(ch.session_id.len() as u8);
    out.extend_from_slice(ch.session_id);
    out.push(0); // no cookie
    out.extend_from_slice(ch.after_cookie);
    out
}

impl CookieResponder {
    /// A responder keyed with `secret` (draw it from a CSPRNG at start-up).
    pub fn new(secret: &[u8; 32]) -> Self {
        CookieResponder {
            current: hmac::Key::new(hmac::HMAC_SHA256, secret),
            previous: None,
        }
    }

    /// A responder keyed with 32 bytes from the system's CSPRNG.
    pub fn random() -> Result<Self, aws_lc_rs::error::Unspecified> {
        Ok(CookieResponder::new(&random_secret()?))
    }

    /// Starts using `secret`; the old one is still accepted until the next rotation.
    pub fn rotate(&mut self, secret: &[u8; 32]) {
        let old = std::mem::replace(&mut self.current, hmac::Key::new(hmac::HMAC_SHA256, secret));
        self.previous = Some(old);
    }

    /// [`rotate`](Self::rotate) to 32 bytes from the system's CSPRNG.
    pub fn rotate_random(&mut self) -> Result<(), aws_lc_rs::error::Unspecified> {
        self.rotate(&random_secret()?);
        Ok(())
    }

    fn cookie(key: &hmac::Key, peer: SocketAddr, ch: &ClientHello<'_>) -> [u8; COOKIE_LEN] {
        let mut ctx = hmac::Context::with_key(key);
        match peer {
            SocketAddr::V4(a) => {
                ctx.update(&[4]);
                ctx.update(&a.ip().octets());
            }
            SocketAddr::V6(a) => {
                ctx.update(&[6]);
                ctx.update(&a.ip().octets());
            }
        }
        ctx.update(&peer.port().to_be_bytes());
        ctx.update(ch.client_version);
        ctx.update(ch.random);
        ctx.update(&[ch.session_id.len() as u8]);
        ctx.update(ch.session_id);
        ctx.update(ch.cipher_suites);
        let tag = ctx.sign();
        let mut out = [0u8; COOKIE_LEN];
        out.copy_from_slice(&tag.as_ref()[..COOKIE_LEN]);
        out
    }

    /// Judges one datagram from `peer`, an address with no endpoint yet. Keeps no state.
    pub fn check(&self, peer: SocketAddr, datagram: &[u8]) -> CookieVerdict {
        let Some(ch) = parse_client_hello(datagram) else {
            return CookieVerdict::Drop;
        };
        if ch.cookie.len() == COOKIE_LEN {
            let keys = std::iter::once(&self.current).chain(self.previous.as_ref());
            for key in keys {
                let want = Self::cookie(key, peer, &ch);
                if aws_lc_rs::constant_time::verify_slices_are_equal(&want, ch.cookie).is_ok() {
                    let n = ch.message_seq;
                    if n > MAX_EARLIER_HELLOS {
                        return CookieVerdict::Drop;
                    }
                    let mut random = [0u8; 32];
                    random.copy_from_slice(ch.random);
                    return CookieVerdict::Admit(Admission {
                        earlier_hellos: (0..n)
                            .map(|i| earlier_hello(&ch, i, u64::from(n - i)))
                            .collect(),
                        hello: datagram.to_vec(),
                        random,
                        cookie: want,
                    });
                }
            }
        }
        let cookie = Self::cookie(&self.current, peer, &ch);
        CookieVerdict::HelloVerifyRequest(hello_verify_request(
            ch.record_seq,
            ch.message_seq,
            &cookie,
        ))
    }
}

fn random_secret() -> Result<[u8; 32], aws_lc_rs::error::Unspecified> {
    let mut secret = [0u8; 32];
    aws_lc_rs::rand::fill(&mut secret)?;
    Ok(secret)
}

/// A HelloVerifyRequest record: DTLS 1.0 version in the record and the body (RFC 6347 §4.2.1),
/// the ClientHello's record sequence number and its handshake message_seq (0 for a first
/// ClientHello; n for one that returned a refused cookie, so that the client, having seen
/// server messages 0 to n, expects the ServerHello at n + 1 — as an engine shown n + 1 earlier
/// ClientHellos sends it, and as OpenSSL's stateless `DTLSv1_listen` numbers it).
fn hello_verify_request(record_seq: &[u8], message_seq: u16, cookie: &[u8; COOKIE_LEN]) -> Vec<u8> {
    let body_len = 2 + 1 + COOKIE_LEN;
    let hs_len = 12 + body_len;
    let mut out = Vec::with_capacity(13 + hs_len);
    out.extend_from_slice(&[22, 0xfe, 0xff, 0, 0]);
    out.extend_from_slice(record_seq);
    out.extend_from_slice(&(hs_len as u16).to_be_bytes());
    out.push(3); // hello_verify_request
    out.extend_from_slice(&(body_len as u32).to_be_bytes()[1..]);
    out.extend_from_slice(&message_seq.to_be_bytes());
    out.extend_from_slice(&[0, 0, 0]); // fragment_offset
    out.extend_from_slice(&(body_len as u32).to_be_bytes()[1..]);
    out.extend_from_slice(&[0xfe, 0xff]);
    out.push(COOKIE_LEN as u8);
    out.extend_from_slice(cookie);
    out
}
