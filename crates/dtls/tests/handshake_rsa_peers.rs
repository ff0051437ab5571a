//! Peers whose certificate is RSA, against the default configuration (our certificate ECDSA
//! P-256, `EngineChoice::Auto`, the default SRTP profiles): the handshake stays on dimpl in both
//! roles (ECDHE-RSA suites as a client, RSA client certificates as a server), with peers that
//! offer only SRTP_AES128_CM_SHA1_80, as GStreamer's webrtcbin does. The peer here is
//! secrelay's OpenSSL engine (OpenSSL 3.0); `interop_openssl.rs` and `interop_pion.rs` do the
//! same with `openssl s_client`/`s_server` and pion/dtls over UDP. And what a failed handshake
//! tells the peer: a fatal alert, so the peer fails at once with the reason instead of
//! retransmitting until its deadline.

mod handshake_support;

use std::time::Duration;

use handshake_support::{run, Link, Outcome};
use secrelay_dtls::{
    AlertDescription, Certificate, CipherSuite, Endpoint, EndpointConfig, EngineChoice, FailReason,
    Fingerprint, KeyType, LocalCertificate, Role, State,
};
use secrelay_srtp::Profile;

fn cert(kind: KeyType) -> (LocalCertificate, Fingerprint) {
    let c = Certificate::self_signed(kind, "secrelay-rsa-peer-test").unwrap();
    (LocalCertificate::from(&c), c.fingerprint())
}

/// Our side (default configuration, ECDSA P-256) in `our_role`, and a peer with a `peer_key`
/// certificate that offers only SRTP_AES128_CM_SHA1_80; (client, server).
fn with_peer(our_role: Role, peer_key: KeyType) -> (EndpointConfig, EndpointConfig) {
    let (ours, ours_fp) = cert(KeyType::EcdsaP256);
    let (theirs, theirs_fp) = cert(peer_key);
    let peer_role = match our_role {
        Role::Client => Role::Server,
        Role::Server => Role::Client,
    };
    let us = EndpointConfig::new(our_role, ours, theirs_fp);
    let mut peer = EndpointConfig::new(peer_role, theirs, ours_fp);
    peer.srtp_profiles = vec![Profile::AesCm128HmacSha1_80];
    match our_role {
        Role::Client => (us, peer),
        Role::Server => (peer, us),
    }
}

fn perfect(c: EndpointConfig, s: EndpointConfig) -> handshake_support::Run {
    run(c, s, Link::perfect(), Duration::from_secs(30))
}

/// Both connected on SRTP_AES128_CM_SHA1_80 with the same exported block and keys crossed.
fn assert_connected(r: &handshake_support::Run, what: &str) {
    assert_connected_on(r, Profile::AesCm128HmacSha1_80, what);
}

/// Both connected on `profile` with the same exported block and keys crossed.
fn assert_connected_on(r: &handshake_support::Run, profile: Profile, what: &str) {
    assert_eq!(r.client.failed, None, "{what}: client failed");
    assert_eq!(r.server.failed, None, "{what}: server failed");
    assert_eq!(r.client.profile(), profile, "{what}");
    assert_eq!(r.server.profile(), profile, "{what}");
    let (ck, sk) = (r.client.keys(), r.server.keys());
    assert_eq!(
        ck.exported().as_bytes(),
        sk.exported().as_bytes(),
        "{what}: exported blocks differ"
    );
    assert_eq!(
        ck.exported().len(),
        2 * (profile.key_len() + profile.salt_len()),
        "{what}"
    );
    assert_eq!(ck.local.key(), sk.remote.key(), "{what}");
    assert_eq!(ck.remote.key(), sk.local.key(), "{what}");
}

#[test]
fn the_default_server_takes_rsa_client_certificates_on_dimpl() {
    for kind in [KeyType::Rsa2048, KeyType::Rsa3072, KeyType::Rsa4096] {
        let (c, s) = with_peer(Role::Server, kind);
        assert_eq!(s.resolved_engine(), EngineChoice::Dimpl, "{kind:?}");
        // The peer's RSA certificate puts *its* endpoint on OpenSSL.
        assert_eq!(c.resolved_engine(), EngineChoice::Openssl, "{kind:?}");
        let r = perfect(c, s);
        let what = format!("RSA client {kind:?}");
        assert_connected(&r, &what);
        assert_eq!(r.server_ep.engine_name(), Some("dimpl"), "{what}");
        assert_eq!(r.client_ep.engine_name(), Some("openssl"), "{what}");
        assert_eq!(r.server_ep.state(), State::Connected, "{what}");
        // The certificate the server saw is the client's RSA one.
        let rsa = x509_is_rsa(r.server.peer_cert());
        assert!(rsa, "{what}: the server did not get the RSA certificate");
    }
}

#[test]
fn the_default_client_takes_an_rsa_server_on_dimpl() {
    for kind in [KeyType::Rsa2048, KeyType::Rsa3072, KeyType::Rsa4096] {
        let (c, s) = with_peer(Role::Client, kind);
        assert_eq!(c.resolved_engine(), EngineChoice::Dimpl, "{kind:?}");
        let r = perfect(c, s);
        let what = format!("RSA server {kind:?}");
        assert_connected(&r, &what);
        assert_eq!(r.client_ep.engine_name(), Some("dimpl"), "{what}");
        assert_eq!(r.server_ep.engine_name(), Some("openssl"), "{what}");
        assert!(x509_is_rsa(r.client.peer_cert()), "{what}");
    }
}

/// Each ECDHE-RSA suite on its own: the OpenSSL server is narrowed to one, so dimpl's client
/// must have offered it, verified the RSA-signed ServerKeyExchange and protected the records
/// with it.
#[test]
fn each_ecdhe_rsa_suite_completes_with_a_dimpl_client() {
    for suite in [
        CipherSuite::EcdheRsaAes128GcmSha256,
        CipherSuite::EcdheRsaAes256GcmSha384,
    ] {
        let (c, mut s) = with_peer(Role::Client, KeyType::Rsa2048);
        s.cipher_suites = vec![suite];
        let r = perfect(c, s);
        assert_connected(&r, suite.openssl_name());
        assert_eq!(r.client_ep.engine_name(), Some("dimpl"));
    }
    // And the client narrowed to one of them stays on dimpl.
    let (mut c, s) = with_peer(Role::Client, KeyType::Rsa2048);
    c.cipher_suites = vec![CipherSuite::EcdheRsaAes128GcmSha256];
    assert_eq!(c.resolved_engine(), EngineChoice::Dimpl);
    assert_connected(&perfect(c, s), "client narrowed to ECDHE-RSA-AES128-GCM");
}

/// ECDSA peers are not moved off the fast path: dimpl on our side in both roles, with a dimpl or
/// an OpenSSL peer.
#[test]
fn ecdsa_peers_still_go_through_dimpl() {
    for our_role in [Role::Client, Role::Server] {
        for peer_engine in [EngineChoice::Dimpl, EngineChoice::Openssl] {
            let (mut c, mut s) = with_peer(our_role, KeyType::EcdsaP256);
            let peer = match our_role {
                Role::Client => &mut s,
                Role::Server => &mut c,
            };
            peer.engine = peer_engine;
            // A dimpl peer cannot offer SRTP_AES128_CM_SHA1_80 alone: it keeps its defaults
            // (and both sides then agree on dimpl's first, AEAD_AES_256_GCM).
            let profile = if peer_engine == EngineChoice::Dimpl {
                peer.srtp_profiles = secrelay_dtls::endpoint::DEFAULT_SRTP_PROFILES.to_vec();
                Profile::AeadAes256Gcm
            } else {
                Profile::AesCm128HmacSha1_80
            };
            let r = perfect(c, s);
            let what = format!("us {our_role:?}, peer on {peer_engine:?}");
            assert_connected_on(&r, profile, &what);
            let ours = match our_role {
                Role::Client => &r.client_ep,
                Role::Server => &r.server_ep,
            };
            assert_eq!(ours.engine_name(), Some("dimpl"), "{what}");
        }
    }
}

/// Two dimpl endpoints never end up on an RSA suite: our certificate is ECDSA, and dimpl
/// never signs with RSA.
#[test]
fn dimpl_to_dimpl_is_unchanged() {
    let (cc, cfp) = cert(KeyType::EcdsaP256);
    let (sc, sfp) = cert(KeyType::EcdsaP256);
    let c = EndpointConfig::new(Role::Client, cc, sfp);
    let s = EndpointConfig::new(Role::Server, sc, cfp);
    let r = perfect(c, s);
    assert_eq!(r.client.failed, None);
    assert_eq!(r.server.failed, None);
    // dimpl's own SRTP order when both offer everything.
    assert_eq!(r.client.profile(), Profile::AeadAes256Gcm);
}

/// A server told to accept only ECDHE-ECDSA suites no longer asks for RSA client certificates:
/// OpenSSL's RSA client then sends none, and the server says so with `handshake_failure` (the
/// client fails at once, on the alert).
#[test]
fn a_server_narrowed_to_ecdsa_suites_refuses_an_rsa_client_with_an_alert() {
    let (c, mut s) = with_peer(Role::Server, KeyType::Rsa2048);
    s.cipher_suites = vec![
        CipherSuite::EcdheEcdsaAes128GcmSha256,
        CipherSuite::EcdheEcdsaAes256GcmSha384,
    ];
    assert_eq!(s.resolved_engine(), EngineChoice::Dimpl);
    let r = perfect(c, s);
    assert_eq!(r.server.failed, Some(FailReason::NoPeerCertificate));
    assert_eq!(
        r.client.failed,
        Some(FailReason::PeerAlert(AlertDescription::HANDSHAKE_FAILURE)),
        "{:?}",
        r.client
    );
    assert!(r.elapsed < Duration::from_millis(100), "{:?}", r.elapsed);
    assert!(last_is_fatal_alert(
        &r.server,
        AlertDescription::HANDSHAKE_FAILURE
    ));
}

/// A client told to offer only ECDHE-ECDSA suites meets an RSA-only server: the server has no
/// suite, says `handshake_failure`, and the client reports the peer's alert (not "the peer
/// violated the protocol") at once.
#[test]
fn no_common_suite_is_reported_as_the_peers_alert() {
    let (mut c, s) = with_peer(Role::Client, KeyType::Rsa2048);
    c.cipher_suites = vec![CipherSuite::EcdheEcdsaAes128GcmSha256];
    let r = perfect(c, s);
    assert_eq!(r.server.failed, Some(FailReason::NoCommonCipherSuite));
    let reason = r.client.failed.expect("the client fails");
    assert_eq!(
        reason,
        FailReason::PeerAlert(AlertDescription::HANDSHAKE_FAILURE)
    );
    let text = reason.to_string();
    assert!(
        text.contains("handshake_failure") && text.contains("cipher suite"),
        "{text}"
    );
    assert!(r.elapsed < Duration::from_millis(100), "{:?}", r.elapsed);
}

/// The last datagram `o` sent is one plaintext fatal alert with `what`.
fn last_is_fatal_alert(o: &Outcome, what: AlertDescription) -> bool {
    o.sent.last().is_some_and(|d| {
        d.len() == 15 && d[0] == 21 && d[3..5] == [0, 0] && d[13] == 2 && d[14] == what.code()
    })
}

/// A wrong fingerprint, found by either engine in either role: the side that finds it sends a
/// fatal alert, and the peer fails on it at once (it would otherwise retransmit until its
/// deadline). dimpl says `bad_certificate`; OpenSSL, from its verify callback,
/// `handshake_failure`.
#[test]
fn a_failed_handshake_sends_a_fatal_alert_in_both_engines_and_roles() {
    let stranger = Certificate::self_signed(KeyType::EcdsaP256, "stranger")
        .unwrap()
        .fingerprint();
    for engine in [EngineChoice::Dimpl, EngineChoice::Openssl] {
        for checker in [Role::Client, Role::Server] {
            let (cc, cfp) = cert(KeyType::EcdsaP256);
            let (sc, sfp) = cert(KeyType::EcdsaP256);
            let mut c = EndpointConfig::new(Role::Client, cc, sfp);
            let mut s = EndpointConfig::new(Role::Server, sc, cfp);
            let what = format!("{engine:?} {checker:?} finds the wrong fingerprint");
            let (checking, other) = match checker {
                Role::Client => (&mut c, &mut s),
                Role::Server => (&mut s, &mut c),
            };
            checking.engine = engine;
            checking.peer_auth = stranger.clone().into();
            // The other side on the other engine, to hear the alert in a stack not ours.
            other.engine = if engine == EngineChoice::Dimpl {
                EngineChoice::Openssl
            } else {
                EngineChoice::Dimpl
            };
            let r = perfect(c, s);
            let (found, heard, found_ep) = match checker {
                Role::Client => (&r.client, &r.server, &r.client_ep),
                Role::Server => (&r.server, &r.client, &r.server_ep),
            };
            assert_eq!(
                found.failed,
                Some(FailReason::FingerprintMismatch),
                "{what}"
            );
            let alert = match engine {
                EngineChoice::Dimpl => AlertDescription::BAD_CERTIFICATE,
                _ => AlertDescription::HANDSHAKE_FAILURE,
            };
            assert!(
                found.sent.iter().any(|d| contains_fatal_alert(d, alert)),
                "{what}: no fatal {alert} sent: {:?}",
                found
                    .sent
                    .iter()
                    .map(|d| handshake_support::describe(d))
                    .collect::<Vec<_>>()
            );
            assert!(
                matches!(heard.failed, Some(FailReason::PeerAlert(a)) if a == alert),
                "{what}: the peer ended with {:?}",
                heard.failed
            );
            assert!(
                r.elapsed < Duration::from_millis(100),
                "{what}: {:?}",
                r.elapsed
            );
            if engine == EngineChoice::Dimpl {
                assert_eq!(found_ep.counters().alerts_sent, 1, "{what}");
            }
        }
    }
}

/// Whether `d` holds a plaintext fatal alert record with `what` (OpenSSL may send it after other
/// records in the same datagram).
fn contains_fatal_alert(d: &[u8], what: AlertDescription) -> bool {
    let mut rest = d;
    while rest.len() >= 13 {
        let len = usize::from(u16::from_be_bytes([rest[11], rest[12]]));
        let epoch = u16::from_be_bytes([rest[3], rest[4]]);
        if rest[0] == 21 && epoch == 0 && len == 2 && rest.len() >= 15 {
            return rest[13] == 2 && rest[14] == what.code();
        }
        rest = rest.get(13 + len..).unwrap_or_default();
    }
    false
}

/// A handshake that times out has nobody to tell: no alert is sent.
#[test]
fn a_timeout_sends_no_alert() {
    let (cc, _) = cert(KeyType::EcdsaP256);
    let (_, sfp) = cert(KeyType::EcdsaP256);
    let mut c = EndpointConfig::new(Role::Client, cc, sfp);
    c.timers.max_retransmissions = 1;
    let start = std::time::Instant::now();
    let mut ep = Endpoint::new(c, start).unwrap();
    let mut o = Outcome::default();
    for _ in 0..10 {
        let (_, timer) = handshake_support::drain(&mut ep, &mut o);
        let Some(t) = timer else { break };
        ep.handle_timeout(t);
    }
    handshake_support::drain(&mut ep, &mut o);
    assert_eq!(o.failed, Some(FailReason::HandshakeTimeout));
    assert_eq!(ep.counters().alerts_sent, 0);
    assert!(o.sent.iter().all(|d| d[0] == 22), "only ClientHellos");
}

/// Whether a DER certificate's key is RSA (`rsaEncryption`).
fn x509_is_rsa(der: &[u8]) -> bool {
    LocalCertificate::new(vec![der.to_vec()], &[]).is_rsa()
}
