//! The peer certificate must hash to the fingerprint from signaling.

mod handshake_support;

use std::time::{Duration, Instant};

use handshake_support::{cert, configs, run, Link};
use secrelay_dtls::{
    DtlsVersion, Endpoint, FailReason, Fingerprint, HashAlgorithm, LocalCertificate, PeerAuth,
};

/// `fp` with its first byte flipped.
fn altered(fp: &PeerAuth) -> PeerAuth {
    let PeerAuth::Fingerprint(fp) = fp else {
        panic!("test configs use fingerprints")
    };
    let mut b = fp.bytes().to_vec();
    b[0] ^= 1;
    PeerAuth::Fingerprint(Fingerprint::from_digest(HashAlgorithm::Sha256, &b).unwrap())
}

#[test]
fn wrong_server_fingerprint_fails_the_client() {
    for version in [DtlsVersion::Dtls12, DtlsVersion::Dtls13] {
        let (mut c, mut s) = configs();
        c.version = version;
        s.version = version;
        c.peer_auth = altered(&c.peer_auth);
        let r = run(c, s, Link::perfect(), Duration::from_secs(60));
        assert_eq!(r.client.failed, Some(FailReason::FingerprintMismatch));
        assert!(r.client.connected.is_none());
        // The server never gets the client's Finished: it must not connect.
        assert!(r.server.connected.is_none(), "{version:?}");
        assert_eq!(
            r.client_ep
                .counters()
                .failures(FailReason::FingerprintMismatch),
            1
        );
    }
}

#[test]
fn wrong_client_fingerprint_fails_the_server() {
    for version in [DtlsVersion::Dtls12, DtlsVersion::Dtls13] {
        let (mut c, mut s) = configs();
        c.version = version;
        s.version = version;
        s.peer_auth = altered(&s.peer_auth);
        let r = run(c, s, Link::perfect(), Duration::from_secs(60));
        assert_eq!(r.server.failed, Some(FailReason::FingerprintMismatch));
        assert!(r.server.connected.is_none());
        // The client may believe it connected (DTLS 1.3: it sends the last flight), but then
        // hears nothing; it never gets the server's Finished in DTLS 1.2.
        if version == DtlsVersion::Dtls12 {
            assert!(r.client.connected.is_none(), "{:?}", r.client);
        }
    }
}

#[test]
fn fingerprint_of_another_valid_certificate_fails() {
    let (mut c, s) = configs();
    let (_, other_fp) = cert();
    c.peer_auth = other_fp.into();
    let r = run(c, s, Link::perfect(), Duration::from_secs(60));
    assert_eq!(r.client.failed, Some(FailReason::FingerprintMismatch));
}

#[test]
fn bad_local_certificate_is_a_config_error_not_a_panic() {
    let (mut c, _) = configs();
    c.certificate = LocalCertificate::new(vec![vec![]], &[1, 2, 3]);
    assert!(Endpoint::new(c.clone(), Instant::now()).is_err());
    let leaf = cert().0.chain_der;
    c.certificate = LocalCertificate::new(leaf, b"not a key");
    assert!(Endpoint::new(c, Instant::now()).is_err());
}
