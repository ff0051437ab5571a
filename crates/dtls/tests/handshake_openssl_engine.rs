//! The OpenSSL engine behind the endpoint: against dimpl in both roles, with RSA certificates,
//! CCM_8, DHE-RSA and SRTP_AES128_CM_SHA1_32, on lossy links, with wrong fingerprints and
//! garbage; and which engine `EngineChoice::Auto` picks.

mod handshake_support;

use std::time::{Duration, Instant};

use handshake_support::{drain, run, Link, Outcome, Rng};
use proptest::prelude::*;
use secrelay_dtls::{
    Certificate, CipherSuite, EcdheGroup, Endpoint, EndpointConfig, EngineChoice, FailReason,
    Fingerprint, KeyType, LocalCertificate, Role, State,
};
use secrelay_srtp::Profile;

fn cert(kind: KeyType) -> (LocalCertificate, Fingerprint) {
    let c = Certificate::self_signed(kind, "secrelay-openssl-test").unwrap();
    (LocalCertificate::from(&c), c.fingerprint())
}

/// Client and server configs (trusting each other) with the given keys and engines.
fn pair(
    client: (KeyType, EngineChoice),
    server: (KeyType, EngineChoice),
) -> (EndpointConfig, EndpointConfig) {
    let (cc, cfp) = cert(client.0);
    let (sc, sfp) = cert(server.0);
    let mut c = EndpointConfig::new(Role::Client, cc, sfp);
    let mut s = EndpointConfig::new(Role::Server, sc, cfp);
    c.engine = client.1;
    s.engine = server.1;
    (c, s)
}

/// Both connected, same profile, and the exported blocks identical byte for byte (so the split
/// keys cross over: one side's local key is the other's remote key).
fn assert_same_keys(r: &handshake_support::Run, what: &str) {
    assert_eq!(r.client.failed, None, "{what}: client failed");
    assert_eq!(r.server.failed, None, "{what}: server failed");
    assert_eq!(r.client.profile(), r.server.profile(), "{what}");
    let (ck, sk) = (r.client.keys(), r.server.keys());
    assert_eq!(
        ck.exported().as_bytes(),
        sk.exported().as_bytes(),
        "{what}: exported blocks differ"
    );
    let p = r.client.profile();
    assert_eq!(
        ck.exported().len(),
        2 * (p.key_len() + p.salt_len()),
        "{what}"
    );
    assert_eq!(ck.local.key(), sk.remote.key(), "{what}");
    assert_eq!(ck.remote.key(), sk.local.key(), "{what}");
}

fn perfect(c: EndpointConfig, s: EndpointConfig) -> handshake_support::Run {
    run(c, s, Link::perfect(), Duration::from_secs(30))
}

const OSSL: EngineChoice = EngineChoice::Openssl;
const DIMPL: EngineChoice = EngineChoice::Dimpl;

#[test]
fn openssl_engine_and_dimpl_agree_on_keys_in_both_roles_with_ecdsa_p256() {
    for (client, server) in [(OSSL, DIMPL), (DIMPL, OSSL), (OSSL, OSSL)] {
        let (c, s) = pair((KeyType::EcdsaP256, client), (KeyType::EcdsaP256, server));
        let r = perfect(c, s);
        let what = format!("client {client:?} / server {server:?}");
        assert_same_keys(&r, &what);
        assert_eq!(
            r.client_ep.engine_name(),
            Some(engine_name(client)),
            "{what}"
        );
        assert_eq!(
            r.server_ep.engine_name(),
            Some(engine_name(server)),
            "{what}"
        );
        assert_eq!(r.client_ep.protocol_version(), Some("DTLS 1.2"), "{what}");
        // Each side saw the other's own certificate.
        assert_eq!(r.client_ep.state(), State::Connected);
        assert_eq!(r.server_ep.state(), State::Connected);
    }
}

fn engine_name(e: EngineChoice) -> &'static str {
    if e == OSSL {
        "openssl"
    } else {
        "dimpl"
    }
}

#[test]
fn server_cookie_exchange_works_with_the_openssl_engine_on_either_side() {
    for (client, server) in [(OSSL, DIMPL), (DIMPL, OSSL), (OSSL, OSSL)] {
        for cookies in [true, false] {
            let (c, mut s) = pair((KeyType::EcdsaP256, client), (KeyType::EcdsaP256, server));
            s.server_cookies = cookies;
            let r = perfect(c, s);
            assert_same_keys(&r, &format!("{client:?}/{server:?} cookies {cookies}"));
        }
    }
}

/// An RSA certificate of our own runs on OpenSSL (dimpl never signs with RSA): `Auto` picks
/// OpenSSL for the RSA side by itself. The ECDSA client is told to use OpenSSL here
/// (`handshake_rsa_peers.rs` has dimpl clients against RSA servers).
#[test]
fn rsa_2048_and_3072_servers_connect_and_agree_on_keys() {
    for kind in [KeyType::Rsa2048, KeyType::Rsa3072] {
        let (c, s) = pair((KeyType::EcdsaP256, OSSL), (kind, EngineChoice::Auto));
        assert_eq!(s.resolved_engine(), OSSL);
        let r = perfect(c, s);
        assert_same_keys(&r, kind.name());
        assert_eq!(r.server_ep.engine_name(), Some("openssl"));
    }
    // RSA on both sides (a SIP trunk with RSA certificates on each end).
    let (c, s) = pair(
        (KeyType::Rsa2048, EngineChoice::Auto),
        (KeyType::Rsa2048, EngineChoice::Auto),
    );
    assert_same_keys(&perfect(c, s), "rsa-2048 both sides");
}

/// dimpl (patched) verifies an RSA server: it offers the ECDHE-RSA suites after its ECDHE-ECDSA
/// ones. (Before, OpenSSL found no suite in dimpl's ECDSA-only offer.)
#[test]
fn dimpl_client_takes_an_rsa_server() {
    for kind in [KeyType::Rsa2048, KeyType::Rsa3072] {
        let (c, s) = pair((KeyType::EcdsaP256, DIMPL), (kind, OSSL));
        let r = perfect(c, s);
        assert_same_keys(&r, kind.name());
        assert_eq!(r.client_ep.engine_name(), Some("dimpl"));
    }
}

#[test]
fn ecdhe_ecdsa_aes128_ccm8_between_two_openssl_engines() {
    let (mut c, mut s) = pair(
        (KeyType::EcdsaP256, EngineChoice::Auto),
        (KeyType::EcdsaP256, EngineChoice::Auto),
    );
    c.cipher_suites = vec![CipherSuite::EcdheEcdsaAes128Ccm8];
    s.cipher_suites = vec![CipherSuite::EcdheEcdsaAes128Ccm8];
    assert_eq!(c.resolved_engine(), OSSL);
    assert_eq!(s.resolved_engine(), OSSL);
    assert_same_keys(&perfect(c.clone(), s.clone()), "CCM_8");

    // The list is honoured: a server without CCM_8 has no suite in common with this client.
    s.cipher_suites = vec![CipherSuite::EcdheEcdsaAes128GcmSha256];
    s.engine = OSSL;
    let r = perfect(c, s);
    assert!(r.client.connected.is_none() && r.server.connected.is_none());
    assert_eq!(
        r.server.failed,
        Some(FailReason::NoCommonCipherSuite),
        "{:?}",
        r.server
    );
}

/// dimpl honours a suite list: a dimpl client asking for AES-256-GCM only connects to an
/// OpenSSL server that takes AES-256-GCM only, and two dimpl ends with disjoint lists fail with
/// no common suite instead of falling back to dimpl's default.
#[test]
fn dimpl_offers_and_accepts_only_the_listed_suites() {
    let (mut c, mut s) = pair((KeyType::EcdsaP256, DIMPL), (KeyType::EcdsaP256, OSSL));
    c.cipher_suites = vec![CipherSuite::EcdheEcdsaAes256GcmSha384];
    s.cipher_suites = vec![CipherSuite::EcdheEcdsaAes256GcmSha384];
    assert_same_keys(
        &perfect(c.clone(), s.clone()),
        "dimpl AES-256 → OpenSSL AES-256",
    );

    let (mut c, mut s) = pair((KeyType::EcdsaP256, DIMPL), (KeyType::EcdsaP256, DIMPL));
    c.cipher_suites = vec![CipherSuite::EcdheEcdsaAes128GcmSha256];
    s.cipher_suites = vec![CipherSuite::EcdheEcdsaAes256GcmSha384];
    let r = perfect(c, s);
    assert!(r.client.connected.is_none() && r.server.connected.is_none());
    assert!(
        r.client.failed.is_some() || r.server.failed.is_some(),
        "{:?}",
        r.server
    );
}

/// Both engines offer and accept only the listed ECDHE groups: P-256 alone connects across
/// engines both ways, and disjoint lists fail instead of falling back to a default group.
#[test]
fn ecdhe_groups_are_offered_and_accepted_only_as_listed() {
    for (client, server) in [(DIMPL, OSSL), (OSSL, DIMPL), (DIMPL, DIMPL)] {
        let (mut c, mut s) = pair((KeyType::EcdsaP256, client), (KeyType::EcdsaP256, server));
        c.ecdhe_groups = vec![EcdheGroup::P256];
        s.ecdhe_groups = vec![EcdheGroup::P256];
        assert_same_keys(
            &perfect(c.clone(), s.clone()),
            &format!("P-256 only, {client:?} → {server:?}"),
        );
        c.ecdhe_groups = vec![EcdheGroup::X25519];
        s.ecdhe_groups = vec![EcdheGroup::P256, EcdheGroup::P384];
        let r = perfect(c, s);
        assert!(
            r.client.connected.is_none() && r.server.connected.is_none(),
            "X25519 client, P-256/P-384 server, {client:?} → {server:?}: connected"
        );
        assert!(
            r.client.failed.is_some() || r.server.failed.is_some(),
            "{client:?} → {server:?}: {:?} / {:?}",
            r.client,
            r.server
        );
    }
    assert_eq!("P-256".parse::<EcdheGroup>(), Ok(EcdheGroup::P256));
    assert_eq!("x25519".parse::<EcdheGroup>(), Ok(EcdheGroup::X25519));
    assert_eq!("secp384r1".parse::<EcdheGroup>(), Ok(EcdheGroup::P384));
    let e = "p-521".parse::<EcdheGroup>().unwrap_err();
    assert!(e.contains("p-521") && e.contains("x25519"), "{e}");
}

#[test]
fn dhe_rsa_between_two_openssl_engines() {
    let (mut c, mut s) = pair(
        (KeyType::Rsa2048, EngineChoice::Auto),
        (KeyType::Rsa2048, EngineChoice::Auto),
    );
    c.cipher_suites = vec![CipherSuite::DheRsaAes128GcmSha256];
    s.cipher_suites = vec![CipherSuite::DheRsaAes128GcmSha256];
    assert_same_keys(&perfect(c, s), "DHE-RSA");
}

#[test]
fn srtp_aes128_cm_sha1_32_is_negotiated_when_preferred() {
    let (mut c, mut s) = pair(
        (KeyType::EcdsaP256, OSSL),
        (KeyType::EcdsaP256, EngineChoice::Auto),
    );
    s.srtp_profiles = vec![
        Profile::AesCm128HmacSha1_32,
        Profile::AeadAes128Gcm,
        Profile::AesCm128HmacSha1_80,
    ];
    assert_eq!(s.resolved_engine(), OSSL);
    let r = perfect(c.clone(), s.clone());
    assert_same_keys(&r, "CM_SHA1_32");
    assert_eq!(r.client.profile(), Profile::AesCm128HmacSha1_32);
    assert_eq!(r.client.keys().exported().len(), 60);

    // The server's order decides: the same client against a server preferring CM_SHA1_80.
    s.srtp_profiles = vec![Profile::AesCm128HmacSha1_80, Profile::AesCm128HmacSha1_32];
    s.engine = OSSL;
    let r = perfect(c.clone(), s.clone());
    assert_same_keys(&r, "CM_SHA1_80 preferred");
    assert_eq!(r.server.profile(), Profile::AesCm128HmacSha1_80);

    // AES-256-GCM exports an 88-byte block.
    s.srtp_profiles = vec![Profile::AeadAes256Gcm];
    c.srtp_profiles = vec![Profile::AeadAes256Gcm];
    let r = perfect(c, s);
    assert_same_keys(&r, "AEAD_AES_256_GCM");
    assert_eq!(r.client.keys().exported().len(), 88);
}

#[test]
fn no_common_srtp_profile_fails_with_that_reason() {
    let (mut c, mut s) = pair((KeyType::EcdsaP256, OSSL), (KeyType::EcdsaP256, OSSL));
    c.srtp_profiles = vec![Profile::AesCm128HmacSha1_32];
    s.srtp_profiles = vec![Profile::AeadAes128Gcm];
    let r = perfect(c, s);
    assert_eq!(r.client.failed, Some(FailReason::NoCommonSrtpProfile));
    assert_eq!(r.server.failed, Some(FailReason::NoCommonSrtpProfile));
}

#[test]
fn wrong_fingerprint_fails_with_fingerprint_mismatch_in_either_role() {
    let (_, stranger) = cert(KeyType::EcdsaP256);
    for (client, server) in [(OSSL, DIMPL), (DIMPL, OSSL), (OSSL, OSSL)] {
        // The client expects someone else.
        let (mut c, s) = pair((KeyType::EcdsaP256, client), (KeyType::EcdsaP256, server));
        c.peer_auth = stranger.clone().into();
        let r = perfect(c, s);
        assert_eq!(
            r.client.failed,
            Some(FailReason::FingerprintMismatch),
            "{client:?}"
        );
        assert!(r.client.connected.is_none());
        assert_eq!(
            r.client_ep
                .counters()
                .failures(FailReason::FingerprintMismatch),
            1
        );
        // The server expects someone else.
        let (c, mut s) = pair((KeyType::Rsa2048, OSSL), (KeyType::EcdsaP256, server));
        s.peer_auth = stranger.clone().into();
        let r = perfect(c, s);
        // dimpl takes the RSA client's certificate, and refuses it as OpenSSL does.
        assert_eq!(
            r.server.failed,
            Some(FailReason::FingerprintMismatch),
            "{server:?}"
        );
        assert!(r.server.connected.is_none());
    }
}

fn lossy(seed: u64) -> Link {
    Link {
        delay: Duration::from_millis(150),
        jitter: Duration::from_millis(120),
        loss: 0.2,
        duplicate: 0.15,
        rng: Rng::new(seed),
    }
}

/// 300 ms RTT, 120 ms jitter, 20% loss and 15% duplication each way, default timers, on
/// simulated time: the OpenSSL engine's retransmissions run on the injected clock.
#[test]
fn openssl_engine_completes_over_a_lossy_link_on_simulated_time() {
    let mut ok = 0;
    let mut runs = 0;
    let mut dropped = 0;
    for (client, server, kind) in [
        (OSSL, OSSL, KeyType::EcdsaP256),
        (OSSL, DIMPL, KeyType::EcdsaP256),
        (DIMPL, OSSL, KeyType::EcdsaP256),
        (OSSL, OSSL, KeyType::Rsa2048),
    ] {
        for seed in 0..10 {
            runs += 1;
            let (c, s) = pair((KeyType::EcdsaP256, client), (kind, server));
            let r = run(c, s, lossy(seed), Duration::from_secs(60));
            dropped += r.dropped;
            match (&r.client.failed, &r.server.failed) {
                (None, None) => {
                    assert_same_keys(&r, &format!("{client:?}/{server:?} seed {seed}"));
                    ok += 1;
                }
                // A run whose flights are lost again and again must end with a timeout.
                (cf, sf) => {
                    for f in [cf, sf].into_iter().flatten() {
                        assert_eq!(
                            *f,
                            FailReason::HandshakeTimeout,
                            "{client:?}/{server:?} seed {seed}"
                        );
                    }
                }
            }
        }
    }
    eprintln!("lossy link: {ok} of {runs} completed, {dropped} datagrams lost");
    assert!(dropped > 0, "the link lost nothing");
    // Nearly all complete (the others time out, checked above).
    assert!(ok * 10 >= runs * 8, "{ok} of {runs} completed");
}

/// With the link dead the handshake fails with HandshakeTimeout after the configured retries,
/// on simulated time.
#[test]
fn openssl_engine_times_out_when_nothing_comes_back() {
    let (mut c, s) = pair((KeyType::EcdsaP256, OSSL), (KeyType::EcdsaP256, OSSL));
    c.timers.initial_rto = Duration::from_millis(100);
    c.timers.max_retransmissions = 3;
    let start = Instant::now();
    let mut ep = Endpoint::new(c, start).unwrap();
    drop(s);
    let mut out = Outcome::default();
    let (first, mut timer) = drain(&mut ep, &mut out);
    assert!(!first.is_empty());
    let mut resent = 0;
    while let Some(t) = timer {
        ep.handle_timeout(t);
        let (tx, t2) = drain(&mut ep, &mut out);
        resent += tx.len();
        timer = t2;
    }
    assert_eq!(out.failed, Some(FailReason::HandshakeTimeout));
    // Three retransmissions of the ClientHello, 100 + 200 + 400 + 800 ms.
    assert_eq!(resent, 3 * first.len());
}

#[test]
fn auto_picks_dimpl_for_ecdsa_and_openssl_for_what_only_it_covers() {
    let (c, _) = pair(
        (KeyType::EcdsaP256, EngineChoice::Auto),
        (KeyType::EcdsaP256, EngineChoice::Auto),
    );
    assert_eq!(c.resolved_engine(), DIMPL);
    let mut x = c.clone();
    x.srtp_profiles = vec![
        Profile::AeadAes256Gcm,
        Profile::AeadAes128Gcm,
        Profile::AesCm128HmacSha1_80,
        Profile::AesCm128HmacSha1_32,
    ];
    assert_eq!(
        x.resolved_engine(),
        DIMPL,
        "CM_32 allowed but not preferred"
    );
    x.srtp_profiles = vec![Profile::AesCm128HmacSha1_32];
    assert_eq!(x.resolved_engine(), OSSL);
    // A dimpl client offers all three of its profiles: a client that refuses one needs OpenSSL.
    x.srtp_profiles = vec![Profile::AeadAes128Gcm, Profile::AesCm128HmacSha1_32];
    assert_eq!(x.resolved_engine(), OSSL);
    x.srtp_profiles = vec![Profile::AesCm128HmacSha1_80];
    assert_eq!(x.resolved_engine(), OSSL);
    // A dimpl server picks AES-256-GCM first: a server that wants another order needs OpenSSL.
    x.role = Role::Server;
    x.srtp_profiles = vec![Profile::AeadAes256Gcm];
    assert_eq!(x.resolved_engine(), DIMPL);
    x.srtp_profiles = vec![Profile::AeadAes256Gcm, Profile::AeadAes128Gcm];
    assert_eq!(x.resolved_engine(), DIMPL);
    x.srtp_profiles = vec![Profile::AeadAes128Gcm, Profile::AeadAes256Gcm];
    assert_eq!(x.resolved_engine(), OSSL);
    x.srtp_profiles = vec![Profile::AesCm128HmacSha1_80];
    assert_eq!(x.resolved_engine(), OSSL);
    let mut x = c.clone();
    x.cipher_suites = vec![CipherSuite::EcdheEcdsaAes256GcmSha384];
    assert_eq!(x.resolved_engine(), DIMPL);
    // ECDHE-RSA suites are dimpl's too now (it verifies RSA peers).
    x.cipher_suites.push(CipherSuite::EcdheRsaAes128GcmSha256);
    assert_eq!(x.resolved_engine(), DIMPL);
    x.cipher_suites.push(CipherSuite::DheRsaAes128GcmSha256);
    assert_eq!(x.resolved_engine(), OSSL);
    let (r, _) = cert(KeyType::Rsa3072);
    let mut x = c.clone();
    x.certificate = r;
    assert_eq!(x.resolved_engine(), OSSL);
    let (e, _) = cert(KeyType::EcdsaP384);
    x.certificate = e;
    assert_eq!(x.resolved_engine(), DIMPL);
    // Explicit choices are kept; dimpl refuses a suite it lacks instead of ignoring it.
    let mut x = c.clone();
    x.engine = DIMPL;
    x.cipher_suites = vec![CipherSuite::EcdheEcdsaAes128Ccm8];
    assert!(Endpoint::new(x, Instant::now()).is_err());
    // OpenSSL here speaks DTLS 1.2 only.
    let mut x = c;
    x.engine = OSSL;
    x.version = secrelay_dtls::DtlsVersion::Dtls13;
    assert!(Endpoint::new(x, Instant::now()).is_err());
}

#[test]
fn close_notify_from_the_openssl_engine_closes_the_peer() {
    for (client, server) in [(OSSL, DIMPL), (DIMPL, OSSL), (OSSL, OSSL)] {
        let (c, s) = pair((KeyType::EcdsaP256, client), (KeyType::EcdsaP256, server));
        let mut r = perfect(c, s);
        assert_same_keys(&r, "before close");
        let now = Instant::now() + Duration::from_secs(5);
        // The OpenSSL side closes (the client if both are).
        let (closer, other) = if client == OSSL {
            (&mut r.client_ep, &mut r.server_ep)
        } else {
            (&mut r.server_ep, &mut r.client_ep)
        };
        closer.close(now);
        let mut co = Outcome::default();
        let (tx, _) = drain(closer, &mut co);
        assert!(co.closed);
        assert!(
            !tx.is_empty(),
            "{client:?}/{server:?}: no close_notify sent"
        );
        let mut oo = Outcome::default();
        for d in &tx {
            other.handle_datagram(now, d);
            drain(other, &mut oo);
        }
        assert!(oo.closed, "{client:?}/{server:?}: peer not closed: {oo:?}");
    }
}

/// A fresh OpenSSL-engine server and a mid-handshake OpenSSL-engine client take garbage,
/// truncations and bit flips of real handshake datagrams without panicking: each stays alive
/// or fails with a reason.
fn hellos() -> &'static [Vec<u8>] {
    static H: std::sync::OnceLock<Vec<Vec<u8>>> = std::sync::OnceLock::new();
    H.get_or_init(|| {
        let (c, _) = pair((KeyType::EcdsaP256, OSSL), (KeyType::EcdsaP256, OSSL));
        let mut ep = Endpoint::new(c, Instant::now()).unwrap();
        drain(&mut ep, &mut Outcome::default()).0
    })
}

fn server_configs() -> &'static (EndpointConfig, EndpointConfig) {
    static C: std::sync::OnceLock<(EndpointConfig, EndpointConfig)> = std::sync::OnceLock::new();
    C.get_or_init(|| pair((KeyType::EcdsaP256, OSSL), (KeyType::Rsa2048, OSSL)))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]
    #[test]
    fn openssl_engine_never_panics_on_garbage(
        garbage in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..1500), 1..8),
        cut in 0usize..400,
        flips in proptest::collection::vec((0usize..400, any::<u8>()), 0..6),
        cookies in any::<bool>(),
    ) {
        let now = Instant::now();
        let (c, mut s) = server_configs().clone();
        s.server_cookies = cookies;
        let mut server = Endpoint::new(s, now).unwrap();
        let mut client = Endpoint::new(c, now).unwrap();
        let mut so = Outcome::default();
        let mut co = Outcome::default();
        drain(&mut client, &mut co);
        drain(&mut server, &mut so);
        let mut inputs = garbage.clone();
        for h in hellos() {
            let mut m = h[..cut.min(h.len())].to_vec();
            m.extend_from_slice(&h[cut.min(h.len())..]);
            let len = m.len().max(1);
            for (i, x) in &flips {
                if let Some(b) = m.get_mut(*i % len) {
                    *b ^= x;
                }
            }
            inputs.push(m);
            inputs.push(h[..cut.min(h.len())].to_vec());
        }
        for (i, d) in inputs.iter().enumerate() {
            let t = now + Duration::from_millis(i as u64);
            server.handle_datagram(t, d);
            drain(&mut server, &mut so);
            client.handle_datagram(t, d);
            drain(&mut client, &mut co);
        }
        prop_assert_eq!(server.counters().panics_caught, 0);
        prop_assert_eq!(client.counters().panics_caught, 0);
        prop_assert!(so.connected.is_none() && co.connected.is_none());
        prop_assert!(so.failed.is_none() || server.state() == State::Finished);
        prop_assert!(co.failed.is_none() || client.state() == State::Finished);
    }
}

/// Delivers `datagrams` to `ep` at `now`; returns what it sent back.
fn deliver(
    ep: &mut Endpoint,
    out: &mut Outcome,
    now: Instant,
    datagrams: &[Vec<u8>],
) -> Vec<Vec<u8>> {
    let mut tx = Vec::new();
    for d in datagrams {
        ep.handle_datagram(now, d);
        tx.extend(drain(ep, out).0);
    }
    tx
}

/// The server's last flight (ChangeCipherSpec + Finished) has no timer of its own: when it is
/// lost, the client's retransmitted flight (resent by the engine, as OpenSSL's timer cannot be
/// driven on the injected clock) must make the OpenSSL-engine server send it again.
#[test]
fn lost_final_server_flight_is_resent_when_the_client_retransmits() {
    for client in [OSSL, DIMPL] {
        let (c, mut s) = pair((KeyType::EcdsaP256, client), (KeyType::EcdsaP256, OSSL));
        s.server_cookies = false;
        let mut now = Instant::now();
        let mut ce = Endpoint::new(c, now).unwrap();
        let mut se = Endpoint::new(s, now).unwrap();
        let (mut co, mut so) = (Outcome::default(), Outcome::default());
        let hello = drain(&mut ce, &mut co).0;
        drain(&mut se, &mut so);
        let flight4 = deliver(&mut se, &mut so, now, &hello);
        let flight5 = deliver(&mut ce, &mut co, now, &flight4);
        let flight6 = deliver(&mut se, &mut so, now, &flight5);
        assert!(so.connected.is_some(), "{client:?}: server not connected");
        assert!(!flight6.is_empty());
        // flight6 is lost. The client's timer fires and it retransmits flight 5.
        let mut resent_final = Vec::new();
        for _ in 0..4 {
            now += Duration::from_secs(2);
            ce.handle_timeout(now);
            let again = drain(&mut ce, &mut co).0;
            resent_final = deliver(&mut se, &mut so, now, &again);
            if !resent_final.is_empty() {
                break;
            }
        }
        assert!(
            !resent_final.is_empty(),
            "{client:?}: server did not resend its final flight"
        );
        deliver(&mut ce, &mut co, now, &resent_final);
        assert!(
            co.connected.is_some(),
            "{client:?}: client not connected: {co:?}"
        );
        assert_eq!(
            co.keys().exported().as_bytes(),
            so.keys().exported().as_bytes()
        );
    }
}

/// An RSA-4096 server certificate crosses a 1200-byte MTU: every handshake datagram of both
/// OpenSSL engines fits, and the keys agree.
#[test]
fn rsa_4096_certificate_crosses_a_1200_byte_mtu() {
    let (mut c, mut s) = pair(
        (KeyType::EcdsaP256, OSSL),
        (KeyType::Rsa4096, EngineChoice::Auto),
    );
    c.mtu = 1200;
    s.mtu = 1200;
    let r = perfect(c, s);
    assert_same_keys(&r, "rsa-4096 at MTU 1200");
    assert!(r.server.max_datagram <= 1200, "{}", r.server.max_datagram);
    assert!(r.client.max_datagram <= 1200, "{}", r.client.max_datagram);
    // The certificate alone is larger than one datagram's worth of the flight it travels in.
    assert!(r.server.transmits >= 3, "{}", r.server.transmits);
}
