//! A stateless DTLS 1.2 cookie responder (RFC 6347 §4.2.1) to run in front of endpoints.
//!
//! A dimpl association is one object per peer, so a server that makes an [`Endpoint`] for
//! every new source address would keep state for every spoofed ClientHello, cookie or not. The
//! responder answers a ClientHello without a valid cookie with a HelloVerifyRequest computed
//! from a secret, the peer's address and the ClientHello's parameters, and keeps nothing. Only
//! a ClientHello that returns a valid cookie — proof that the peer receives at its address —
//! is [`CookieVerdict::Admit`]ted: then the server would make the [`Endpoint`] with
//! [`EndpointConfig::server_cookies`] off and feed it that same datagram.
//!
//! **That hand-off does not work with dimpl 0.9.** After any HelloVerifyRequest the client
//! sends its ClientHello at handshake message_seq 1 and expects the ServerHello at 1 (RFC 6347
//! §4.2.2), while a dimpl server without its own cookie exchange expects message_seq 0 and
//! ignores the admitted ClientHello; message_seq is in the Finished transcript, so it cannot be
//! rewritten in between. dimpl needs a server constructor that starts from a pre-verified
//! ClientHello, or a pluggable cookie verifier. Until then the responder is useful as a
//! stateless filter only, and dimpl's own cookie exchange (per object) stays on.
//!
//! DTLS 1.3 clients need a HelloRetryRequest cookie carrying the transcript hash; this
//! responder does not do that. A hybrid (1.2 + 1.3) ClientHello answered with a
//! HelloVerifyRequest continues in DTLS 1.2.
//!
//! [`Endpoint`]: crate::endpoint::Endpoint
//! [`EndpointConfig::server_cookies`]: crate::endpoint::EndpointConfig::server_cookies

use std::fmt;
use std::net::SocketAddr;

use aws_lc_rs::hmac;

/// Cookie length in bytes (HMAC-SHA256, truncated).
pub const COOKIE_LEN: usize = 32;

/// What to do with a datagram from an address that has no endpoint yet.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CookieVerdict {
    /// Send this HelloVerifyRequest back to the address; keep no state.
    HelloVerifyRequest(Vec<u8>),
    /// The ClientHello carries a valid cookie: create the endpoint (server cookies off) and
    /// feed it this datagram.
    Admit,
    /// Not an unfragmented DTLS ClientHello: drop it.
    Drop,
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

/// The parts of a ClientHello the cookie covers.
struct ClientHello<'a> {
    record_seq: &'a [u8],
    client_version: &'a [u8],
    random: &'a [u8],
    session_id: &'a [u8],
    cookie: &'a [u8],
    cipher_suites: &'a [u8],
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
    let record_seq = &header[5..11];
    let len = usize::from(u16::from_be_bytes([header[11], header[12]]));
    let mut hs = take(&mut rec, len)?;
    let hh = take(&mut hs, 12)?;
    if hh[0] != 1 {
        return None;
    }
    let msg_len = u32::from_be_bytes([0, hh[1], hh[2], hh[3]]) as usize;
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
        record_seq,
        client_version,
        random,
        session_id,
        cookie,
        cipher_suites,
    })
}

impl CookieResponder {
    /// A responder keyed with `secret` (draw it from a CSPRNG at start-up).
    pub fn new(secret: &[u8; 32]) -> Self {
        CookieResponder {
            current: hmac::Key::new(hmac::HMAC_SHA256, secret),
            previous: None,
        }
    }

    /// Starts using `secret`; the old one is still accepted until the next rotation.
    pub fn rotate(&mut self, secret: &[u8; 32]) {
        let old = std::mem::replace(&mut self.current, hmac::Key::new(hmac::HMAC_SHA256, secret));
        self.previous = Some(old);
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
                    return CookieVerdict::Admit;
                }
            }
        }
        let cookie = Self::cookie(&self.current, peer, &ch);
        CookieVerdict::HelloVerifyRequest(hello_verify_request(ch.record_seq, &cookie))
    }
}

/// A HelloVerifyRequest record: DTLS 1.0 version in the record and the body (RFC 6347 §4.2.1),
/// the ClientHello's record sequence number, handshake message_seq 0.
fn hello_verify_request(record_seq: &[u8], cookie: &[u8; COOKIE_LEN]) -> Vec<u8> {
    let body_len = 2 + 1 + COOKIE_LEN;
    let hs_len = 12 + body_len;
    let mut out = Vec::with_capacity(13 + hs_len);
    out.extend_from_slice(&[22, 0xfe, 0xff, 0, 0]);
    out.extend_from_slice(record_seq);
    out.extend_from_slice(&(hs_len as u16).to_be_bytes());
    out.push(3); // hello_verify_request
    out.extend_from_slice(&(body_len as u32).to_be_bytes()[1..]);
    out.extend_from_slice(&[0, 0]); // message_seq
    out.extend_from_slice(&[0, 0, 0]); // fragment_offset
    out.extend_from_slice(&(body_len as u32).to_be_bytes()[1..]);
    out.extend_from_slice(&[0xfe, 0xff]);
    out.push(COOKIE_LEN as u8);
    out.extend_from_slice(cookie);
    out
}
