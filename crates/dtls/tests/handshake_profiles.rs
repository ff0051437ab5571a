//! SRTP profile negotiation and policy.
//!
//! dimpl 0.9 cannot restrict the profiles it offers or picks: every dimpl client offers
//! AEAD_AES_256_GCM, AEAD_AES_128_GCM and SRTP_AES128_CM_SHA1_80, and a dimpl server picks in
//! that order. On dimpl the endpoint's `srtp_profiles` list is a policy applied afterwards: a
//! negotiated profile outside it fails the association with `NoCommonSrtpProfile` (after a
//! close_notify, so the peer is not left hanging). So the automatic engine choice sends a
//! preference dimpl would not honour to OpenSSL, which offers and picks exactly the list, in
//! its order (`dimpl_honours_srtp_preference`).

mod handshake_support;

use std::time::Duration;

use handshake_support::{configs, run, Link};
use secrelay_dtls::{AlertDescription, DtlsVersion, EngineChoice, FailReason};
use secrelay_srtp::Profile;

#[test]
fn negotiated_profile_is_accepted_when_both_lists_hold_it() {
    let (mut c, mut s) = configs();
    s.srtp_profiles = vec![Profile::AeadAes128Gcm, Profile::AeadAes256Gcm];
    c.srtp_profiles = vec![Profile::AesCm128HmacSha1_80, Profile::AeadAes256Gcm];
    let r = run(c, s, Link::perfect(), Duration::from_secs(10));
    assert_eq!(r.client.profile(), Profile::AeadAes256Gcm);
    assert_eq!(r.server.profile(), Profile::AeadAes256Gcm);
}

/// The brief asked for "server prefers GCM, client offers only CM_SHA1_80 → CM_SHA1_80". With
/// dimpl on both sides that cannot happen (see the module docs): the client's policy rejects the
/// AES-256-GCM that dimpl negotiates, and tells the server: in DTLS 1.2 with a fatal
/// `handshake_failure` alert under the new keys, in DTLS 1.3 (where dimpl has no fatal alert)
/// with close_notify. This pins that
/// behaviour so that a dimpl with profile configuration (or another engine) shows up here.
#[test]
fn client_offering_only_cm_sha1_80_is_not_honoured_by_dimpl() {
    for version in [DtlsVersion::Dtls12, DtlsVersion::Dtls13] {
        let (mut c, mut s) = configs();
        c.engine = EngineChoice::Dimpl;
        s.engine = EngineChoice::Dimpl;
        c.version = version;
        s.version = version;
        s.srtp_profiles = vec![
            Profile::AeadAes128Gcm,
            Profile::AeadAes256Gcm,
            Profile::AesCm128HmacSha1_80,
        ];
        c.srtp_profiles = vec![Profile::AesCm128HmacSha1_80];
        let r = run(c, s, Link::perfect(), Duration::from_secs(10));
        assert_eq!(
            r.client.failed,
            Some(FailReason::NoCommonSrtpProfile),
            "{version:?}"
        );
        assert!(r.client.connected.is_none());
        assert_eq!(
            r.client_ep
                .counters()
                .failures(FailReason::NoCommonSrtpProfile),
            1
        );
        // The server connected, then heard from the client.
        assert!(r.server.connected.is_some(), "{version:?}: {:?}", r.server);
        if version == DtlsVersion::Dtls12 {
            assert_eq!(
                r.server.failed,
                Some(FailReason::PeerAlert(AlertDescription::HANDSHAKE_FAILURE)),
                "{version:?}: {:?}",
                r.server
            );
            assert_eq!(r.client_ep.counters().alerts_sent, 1);
        } else {
            assert!(r.server.closed, "{version:?}: {:?}", r.server);
        }
    }
}

/// The same preferences on the automatic engine choice: both lists go to OpenSSL, and the
/// one common profile is negotiated.
#[cfg(feature = "openssl")]
#[test]
fn client_offering_only_cm_sha1_80_is_honoured_by_the_automatic_choice() {
    let (mut c, mut s) = configs();
    s.srtp_profiles = vec![
        Profile::AeadAes128Gcm,
        Profile::AeadAes256Gcm,
        Profile::AesCm128HmacSha1_80,
    ];
    c.srtp_profiles = vec![Profile::AesCm128HmacSha1_80];
    assert_eq!(c.resolved_engine(), EngineChoice::Openssl);
    assert_eq!(s.resolved_engine(), EngineChoice::Openssl);
    let r = run(c, s, Link::perfect(), Duration::from_secs(10));
    assert_eq!(r.client.profile(), Profile::AesCm128HmacSha1_80);
    assert_eq!(r.server.profile(), Profile::AesCm128HmacSha1_80);
}

/// A server preferring AES-128-GCM gets it from a client that offers both GCM profiles
/// (dimpl alone would have picked AES-256-GCM).
#[cfg(feature = "openssl")]
#[test]
fn server_preference_for_aes_128_gcm_is_honoured() {
    let (c, mut s) = configs();
    s.srtp_profiles = vec![Profile::AeadAes128Gcm, Profile::AeadAes256Gcm];
    let r = run(c, s, Link::perfect(), Duration::from_secs(10));
    assert_eq!(r.server.profile(), Profile::AeadAes128Gcm);
    assert_eq!(r.client.profile(), Profile::AeadAes128Gcm);
}

#[test]
fn no_common_profile_fails_both_sides() {
    let (mut c, mut s) = configs();
    s.srtp_profiles = vec![Profile::AeadAes128Gcm];
    c.srtp_profiles = vec![Profile::AesCm128HmacSha1_80];
    let r = run(c, s, Link::perfect(), Duration::from_secs(10));
    assert_eq!(r.client.failed, Some(FailReason::NoCommonSrtpProfile));
    assert_eq!(r.server.failed, Some(FailReason::NoCommonSrtpProfile));
    assert!(r.client.connected.is_none() && r.server.connected.is_none());
}

#[test]
fn empty_profile_list_is_a_config_error() {
    let (mut c, _) = configs();
    c.srtp_profiles.clear();
    assert!(secrelay_dtls::Endpoint::new(c, std::time::Instant::now()).is_err());
}
