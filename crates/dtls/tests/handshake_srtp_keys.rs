//! Client and server handshake in memory, agree on keys, and those keys carry real SRTP.

mod handshake_support;

use std::time::Duration;

use handshake_support::{configs, run, Link};
use secrelay_dtls::{DtlsVersion, State};
use secrelay_srtp::{Context, Policy, Profile};

fn rtp_packet(payload: usize) -> Vec<u8> {
    let mut pkt = vec![0u8; 12 + payload];
    pkt[0] = 0x80;
    pkt[1] = 96;
    pkt[2..4].copy_from_slice(&7u16.to_be_bytes());
    pkt[8..12].copy_from_slice(&0xdead_beefu32.to_be_bytes());
    for (i, b) in pkt[12..].iter_mut().enumerate() {
        *b = i as u8;
    }
    pkt
}

fn handshake_and_srtp(version: DtlsVersion) {
    let (mut c, mut s) = configs();
    c.version = version;
    s.version = version;
    let r = run(c, s, Link::perfect(), Duration::from_secs(10));
    assert_eq!(r.client.failed, None);
    assert_eq!(r.server.failed, None);
    let (ck, sk) = (r.client.keys(), r.server.keys());
    assert_eq!(r.client.profile(), r.server.profile());
    assert_eq!(ck.profile, sk.profile);
    // dimpl picks AEAD_AES_256_GCM first when both sides are dimpl.
    assert_eq!(ck.profile, Profile::AeadAes256Gcm);
    assert_eq!(ck.local.key(), sk.remote.key());
    assert_eq!(ck.local.salt(), sk.remote.salt());
    assert_eq!(ck.remote.key(), sk.local.key());
    assert_eq!(ck.remote.salt(), sk.local.salt());
    assert_ne!(ck.local.key(), ck.remote.key());
    // Both sides exported the same block.
    assert_eq!(ck.exported().as_bytes(), sk.exported().as_bytes());
    assert_eq!(ck.exported().len(), 88);
    assert_eq!(ck.exported().to_hex().len(), 176);
    // Each side saw the other's certificate.
    assert_eq!(r.client_ep.state(), State::Connected);
    assert_eq!(r.server_ep.state(), State::Connected);
    assert!(!r.client.peer_cert().is_empty());

    // Real SRTP, both directions.
    for (tx_key, rx_key) in [(&ck.local, &sk.remote), (&sk.local, &ck.remote)] {
        let mut tx = Context::new(Policy::new(tx_key.clone()).any_outbound()).unwrap();
        let mut rx = Context::new(Policy::new(rx_key.clone()).any_inbound()).unwrap();
        let plain = rtp_packet(160);
        let mut buf = plain.clone();
        buf.resize(plain.len() + 64, 0);
        let n = tx.protect_rtp(&mut buf, plain.len()).unwrap();
        assert_ne!(&buf[12..plain.len()], &plain[12..]);
        let m = rx.unprotect_rtp(&mut buf, n).unwrap();
        assert_eq!(&buf[..m], &plain[..]);
    }
    // The wrong key does not work.
    let mut tx = Context::new(Policy::new(ck.local.clone()).any_outbound()).unwrap();
    let mut rx = Context::new(Policy::new(ck.remote.clone()).any_inbound()).unwrap();
    let plain = rtp_packet(20);
    let mut buf = plain.clone();
    buf.resize(plain.len() + 64, 0);
    let n = tx.protect_rtp(&mut buf, plain.len()).unwrap();
    assert!(rx.unprotect_rtp(&mut buf, n).is_err());
}

#[test]
fn dtls12_handshake_keys_protect_srtp() {
    handshake_and_srtp(DtlsVersion::Dtls12);
}

#[test]
fn dtls13_handshake_keys_protect_srtp() {
    handshake_and_srtp(DtlsVersion::Dtls13);
}

#[test]
fn auto_handshake_keys_protect_srtp() {
    handshake_and_srtp(DtlsVersion::Auto);
}

#[test]
fn auto_server_accepts_dtls12_client() {
    let (mut c, mut s) = configs();
    c.version = DtlsVersion::Dtls12;
    s.version = DtlsVersion::Auto;
    let r = run(c, s, Link::perfect(), Duration::from_secs(10));
    assert_eq!(r.client.keys().local.key(), r.server.keys().remote.key());
    assert_eq!(r.server_ep.protocol_version(), Some("DTLS 1.2"));
}

#[test]
fn close_sends_close_notify_and_the_peer_sees_closed() {
    let (c, s) = configs();
    let mut r = run(c, s, Link::perfect(), Duration::from_secs(10));
    let now = std::time::Instant::now() + Duration::from_secs(20);
    r.client_ep.close(now);
    let mut co = handshake_support::Outcome::default();
    let (tx, timer) = handshake_support::drain(&mut r.client_ep, &mut co);
    assert!(co.closed);
    assert_eq!(timer, None);
    assert_eq!(tx.len(), 1, "one close_notify");
    let mut so = handshake_support::Outcome::default();
    r.server_ep.handle_datagram(now, &tx[0]);
    let _ = handshake_support::drain(&mut r.server_ep, &mut so);
    assert!(so.closed, "{so:?}");
    assert_eq!(r.server_ep.state(), State::Finished);
    // Input after the end is ignored and counted.
    r.server_ep.handle_datagram(now, &tx[0]);
    assert!(r.server_ep.poll_output().is_none());
    assert_eq!(r.server_ep.counters().datagrams_ignored, 1);
}

#[test]
fn connected_endpoints_stay_up_and_quiet_on_their_timers() {
    for version in [DtlsVersion::Dtls12, DtlsVersion::Dtls13] {
        let (mut c, mut s) = configs();
        c.version = version;
        s.version = version;
        let mut r = run(c, s, Link::perfect(), Duration::from_secs(10));
        let start = std::time::Instant::now() + Duration::from_secs(1);
        for ep in [&mut r.client_ep, &mut r.server_ep] {
            let before = ep.counters().transmits;
            let mut now = start;
            let mut fired = 0;
            ep.handle_timeout(now);
            let mut o = handshake_support::Outcome::default();
            while now < start + Duration::from_secs(600) && fired < 10_000 {
                let (_, t) = handshake_support::drain(ep, &mut o);
                let Some(t) = t else { break };
                now = t.max(now);
                ep.handle_timeout(now);
                fired += 1;
            }
            assert_eq!(ep.state(), State::Connected, "{version:?}: {o:?} {:?}", ep);
            assert!(
                fired < 1000,
                "{version:?}: {fired} timer firings in 10 minutes"
            );
            assert!(
                ep.counters().transmits - before < 20,
                "{version:?}: {:?}",
                ep.counters()
            );
        }
    }
}

#[test]
fn endpoints_can_move_to_worker_threads() {
    fn assert_send<T: Send>() {}
    assert_send::<secrelay_dtls::Endpoint>();
    assert_send::<secrelay_dtls::SrtpKeys>();
}

/// `time_crypto` counts the provider's calls by part for the endpoint that asks for it, and
/// nothing for one that does not.
#[test]
fn crypto_time_counts_what_the_timed_side_did() {
    use secrelay_dtls::crypto_time;
    let handshake = |time_server: bool| {
        let (c, mut s) = configs();
        s.time_crypto = time_server;
        let r = run(c, s, Link::perfect(), Duration::from_secs(10));
        assert_eq!(r.server.failed, None);
        assert_eq!(r.client.failed, None);
    };
    // The first timed endpoint builds (and dimpl validates) its configuration: not counted.
    handshake(true);
    crypto_time::take();
    handshake(false);
    assert_eq!(crypto_time::take(), secrelay_dtls::CryptoTime::default());
    handshake(true);
    let t = crypto_time::take();
    let zero = Duration::ZERO;
    for (part, d) in [
        ("sign", t.sign),
        ("verify", t.verify),
        ("key pair", t.key_pair),
        ("shared secret", t.shared_secret),
        ("hmac", t.hmac),
        ("hash", t.hash),
        ("aead", t.aead),
    ] {
        assert!(d > zero, "{part} was not timed: {t:?}");
    }
    assert_eq!(
        t.public_key(),
        t.sign + t.verify + t.key_pair + t.shared_secret
    );
    assert_eq!(t.symmetric(), t.hmac + t.hash + t.aead);
    // One server's calls: ~20 HMACs, a dozen hash updates, a handful of AEAD calls, one of each
    // public-key operation.
    assert!((20..200).contains(&t.calls), "{} calls", t.calls);
}
