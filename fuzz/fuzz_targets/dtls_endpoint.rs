//! A DTLS-SRTP endpoint (either engine, either role, cookies on or off) fed arbitrary
//! datagrams with time moving between them: it never panics, whatever arrives (a panic inside
//! an engine must be contained by the endpoint and end the handshake with a reason). The first
//! byte picks the set-up; the rest is datagrams, each a 2-byte length then its bytes, and a
//! byte of milliseconds to let pass after it.
//!
//! With set-up bit 8 a server sits behind the stateless cookie responder: the first datagram is
//! taken as a ClientHello, the cookie the responder issues for it is put in, and if the result
//! is admitted the endpoint is made with `Endpoint::new_admitted` (which replays the cookie
//! exchange into the engine); the other datagrams follow as usual.
#![no_main]

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use secrelay_dtls::cookie::{CookieResponder, CookieVerdict, COOKIE_LEN};
use secrelay_dtls::{
    Certificate, Endpoint, EndpointConfig, EngineChoice, Fingerprint, KeyType, LocalCertificate,
    Output, Role,
};

/// Our certificate and the fingerprint the (imaginary) peer announced: made once.
fn keys() -> &'static (LocalCertificate, Fingerprint) {
    static K: OnceLock<(LocalCertificate, Fingerprint)> = OnceLock::new();
    K.get_or_init(|| {
        let ours = Certificate::self_signed(KeyType::EcdsaP256, "fuzz").expect("key generation");
        let peer = Certificate::self_signed(KeyType::EcdsaP256, "peer").expect("key generation");
        (LocalCertificate::from(&ours), peer.fingerprint())
    })
}

/// Drains the endpoint per its drive contract; the timer it asks for, if any.
fn drain(ep: &mut Endpoint) -> Option<Instant> {
    let mut timer = None;
    while let Some(o) = ep.poll_output() {
        if let Output::Timeout(t) = o {
            timer = Some(t);
            break;
        }
    }
    timer
}

/// `hello` (a DTLS ClientHello, unfragmented, in its datagram's first record) with its cookie
/// replaced by `cookie` and the lengths fixed; `None` if it does not have that shape.
fn with_cookie(hello: &[u8], cookie: &[u8]) -> Option<Vec<u8>> {
    let sid = 13 + 12 + 2 + 32;
    let cookie_at = sid + 1 + usize::from(*hello.get(sid)?);
    let old = usize::from(*hello.get(cookie_at)?);
    let rest = hello.get(cookie_at + 1 + old..)?;
    let grow = |b: &[u8], by: isize| -> Option<Vec<u8>> {
        let n = b.iter().fold(0usize, |a, &x| a << 8 | usize::from(x));
        let n = n.checked_add_signed(by)?;
        let bytes = n.to_be_bytes();
        Some(bytes[bytes.len() - b.len()..].to_vec())
    };
    let by = cookie.len() as isize - old as isize;
    let mut out = hello[..11].to_vec();
    out.extend(grow(&hello[11..13], by)?);
    out.push(hello[13]);
    out.extend(grow(&hello[14..17], by)?);
    out.extend_from_slice(&hello[17..22]);
    out.extend(grow(&hello[22..25], by)?);
    out.extend_from_slice(&hello[25..cookie_at]);
    out.push(cookie.len() as u8);
    out.extend_from_slice(cookie);
    out.extend_from_slice(rest);
    Some(out)
}

fuzz_target!(|data: &[u8]| {
    let Some((&setup, mut rest)) = data.split_first() else {
        return;
    };
    let (cert, peer) = keys();
    let role = if setup & 1 == 0 {
        Role::Server
    } else {
        Role::Client
    };
    let mut cfg = EndpointConfig::new(role, cert.clone(), peer.clone());
    cfg.engine = if setup & 2 == 0 {
        EngineChoice::Dimpl
    } else {
        EngineChoice::Openssl
    };
    cfg.server_cookies = setup & 4 == 0;
    let mut now = Instant::now();
    let ep = if setup & 8 != 0 && role == Role::Server {
        // The first datagram, through the responder.
        if rest.len() < 2 {
            return;
        }
        let len = usize::from(u16::from_be_bytes([rest[0], rest[1]])) % 1500;
        let (hello, r) = rest[2..].split_at(len.min(rest.len() - 2));
        rest = r;
        let responder = CookieResponder::new(&[3; 32]);
        let from = "192.0.2.1:4444".parse().expect("address");
        let CookieVerdict::HelloVerifyRequest(hvr) = responder.check(from, hello) else {
            return;
        };
        let Some(hello) = with_cookie(hello, &hvr[hvr.len() - COOKIE_LEN..]) else {
            return;
        };
        let CookieVerdict::Admit(admission) = responder.check(from, &hello) else {
            return;
        };
        Endpoint::new_admitted(cfg, now, &admission)
    } else {
        Endpoint::new(cfg, now)
    };
    let Ok(mut ep) = ep else {
        return;
    };
    let mut timer = drain(&mut ep);
    while rest.len() >= 2 {
        let len = usize::from(u16::from_be_bytes([rest[0], rest[1]])) % 1500;
        rest = &rest[2..];
        let (datagram, r) = rest.split_at(len.min(rest.len()));
        rest = r;
        ep.handle_datagram(now, datagram);
        timer = drain(&mut ep).or(timer);
        if let Some((&ms, r)) = rest.split_first() {
            rest = r;
            now += Duration::from_millis(u64::from(ms) * 8);
        }
        if timer.is_some_and(|t| t <= now) {
            ep.handle_timeout(now);
            timer = drain(&mut ep);
        }
    }
});
