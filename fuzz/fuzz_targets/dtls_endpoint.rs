//! A DTLS-SRTP endpoint (either engine, either role, cookies on or off) fed arbitrary
//! datagrams with time moving between them: it never panics, whatever arrives (a panic inside
//! an engine must be contained by the endpoint and end the handshake with a reason). The first
//! byte picks the set-up; the rest is datagrams, each a 2-byte length then its bytes, and a
//! byte of milliseconds to let pass after it.
#![no_main]

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use secrelay_dtls::{
    Certificate, EngineChoice, Endpoint, EndpointConfig, Fingerprint, KeyType, LocalCertificate,
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

fuzz_target!(|data: &[u8]| {
    let Some((&setup, mut rest)) = data.split_first() else {
        return;
    };
    let (cert, peer) = keys();
    let role = if setup & 1 == 0 { Role::Server } else { Role::Client };
    let mut cfg = EndpointConfig::new(role, cert.clone(), peer.clone());
    cfg.engine = if setup & 2 == 0 {
        EngineChoice::Dimpl
    } else {
        EngineChoice::Openssl
    };
    cfg.server_cookies = setup & 4 == 0;
    let mut now = Instant::now();
    let Ok(mut ep) = Endpoint::new(cfg, now) else {
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
