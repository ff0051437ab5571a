//! WebRTC peers whose certificate is RSA-2048 and whose `use_srtp` offers only
//! SRTP_AES128_CM_SHA1_80 — GStreamer's webrtcbin is so by default — publish with WHIP and play
//! with WHEP through `secrelay serve` on its default configuration (an ECDSA P-256 certificate,
//! the default DTLS engine choice and SRTP profiles), in both DTLS roles: offers with
//! `a=setup:actpass` (the gateway answers `passive` and is the DTLS server, so it must take an
//! RSA client certificate) and with `a=setup:passive` (the gateway is the DTLS client, so it must
//! take an RSA server and its ECDHE-RSA suite).
//!
//! The peers' DTLS is OpenSSL 3.0 (secrelay's OpenSSL engine, which an RSA certificate selects);
//! their ICE, SDP and SRTP are the test kit's simulated browser, over real UDP sockets.

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use secrelay_dtls::{Certificate, KeyType, Role};
use secrelay_gateway::server::{ServeConfig, Server};
use secrelay_srtp::Profile;
use secrelay_testkit::{Leg, PeerDtls, Phase, Signaling, SimParticipant};

const LOCAL: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// `secrelay serve` on its defaults, but for loopback addresses and two workers.
fn start() -> Server {
    Server::start(ServeConfig {
        http: Some("127.0.0.1:0".parse().unwrap()),
        udp: "127.0.0.1:0".parse().unwrap(),
        workers: 2,
        drain_secs: 0.1,
        ..ServeConfig::default()
    })
    .unwrap()
}

/// A peer as GStreamer's webrtcbin sets itself up: an RSA-2048 certificate, use_srtp with
/// SRTP_AES128_CM_SHA1_80 alone; `passive` makes the gateway the DTLS client.
fn webrtcbin_like(passive: bool) -> PeerDtls {
    PeerDtls {
        certificate: Some(Certificate::self_signed(KeyType::Rsa2048, "webrtcbin-like").unwrap()),
        srtp_profiles: Some(vec![Profile::AesCm128HmacSha1_80]),
        passive,
        ..PeerDtls::default()
    }
}

#[test]
fn rsa_peers_offering_cm_sha1_80_only_publish_and_play_in_both_dtls_roles() {
    let s = start();
    let sig = Signaling::new(s.url()).with_admin(s.admin_key().expose());
    let epoch = Instant::now();
    // (room, publisher passive, viewer passive): the gateway as DTLS server for both, as client
    // for both, and one of each in one room.
    let rooms = [
        ("gateway-dtls-server", false, false),
        ("gateway-dtls-client", true, true),
        ("mixed", false, true),
    ];
    let mut group = Vec::new();
    let mut passive = Vec::new();
    for (room, pub_passive, view_passive) in rooms {
        passive.extend([view_passive, pub_passive]);
        // The viewer first: it must receive the publisher that arrives after it.
        group.push(
            SimParticipant::join_with(
                &sig,
                room,
                Leg::Whep,
                LOCAL,
                epoch,
                webrtcbin_like(view_passive),
            )
            .unwrap(),
        );
        group.push(
            SimParticipant::join_with(
                &sig,
                room,
                Leg::Whip,
                LOCAL,
                epoch,
                webrtcbin_like(pub_passive),
            )
            .unwrap(),
        );
    }
    let up = SimParticipant::drive_until(&mut group, Duration::from_secs(20), |g| {
        g.iter()
            .all(|p| p.phase == Phase::Connected || matches!(p.phase, Phase::Failed(_)))
    })
    .unwrap();
    let phases: Vec<_> = group
        .iter()
        .map(|p| (p.room.clone(), p.leg, p.phase.clone()))
        .collect();
    assert!(up, "the handshakes did not finish: {phases:?}");
    assert!(
        group.iter().all(|p| p.phase == Phase::Connected),
        "{phases:?}"
    );
    for (p, passive) in group.iter().zip(&passive) {
        // `a=setup:passive` made the peer the DTLS server, the gateway the client.
        let role = if *passive { Role::Server } else { Role::Client };
        assert_eq!(p.dtls_role(), Some(role), "{} {:?}", p.room, p.leg);
        // The peer really is OpenSSL with SRTP_AES128_CM_SHA1_80.
        assert_eq!(p.dtls_engine(), Some("openssl"), "{} {:?}", p.room, p.leg);
        assert_eq!(
            p.srtp_profile(),
            Some(Profile::AesCm128HmacSha1_80),
            "{} {:?}",
            p.room,
            p.leg
        );
    }
    // Each viewer plays its room's publisher.
    let heard = SimParticipant::drive_until(&mut group, Duration::from_secs(20), |g| {
        g.iter()
            .filter(|p| p.leg == Leg::Whep)
            .all(|p| p.streams.len() == 1 && p.received() >= 50)
    })
    .unwrap();
    let summary: Vec<_> = group
        .iter()
        .map(|p| (p.room.clone(), p.leg, p.sent, p.received(), p.rx_errors))
        .collect();
    assert!(heard, "a viewer did not play its publisher: {summary:?}");
    assert!(group.iter().all(|p| p.rx_errors == 0), "{summary:?}");

    // The gateway's view: six connected participants on SRTP_AES128_CM_SHA1_80, no failure.
    for (room, _, _) in rooms {
        let body = ureq::get(&format!("{}/api/rooms/{room}", s.url()))
            .header(
                "Authorization",
                &format!("Bearer {}", s.admin_key().expose()),
            )
            .call()
            .unwrap()
            .body_mut()
            .read_to_string()
            .unwrap();
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        let ps = v["participants"].as_array().unwrap();
        assert_eq!(ps.len(), 2, "{v}");
        for p in ps {
            assert_eq!(p["state"], "connected", "{p}");
            assert_eq!(
                p["srtp_profile"],
                Profile::AesCm128HmacSha1_80.to_string(),
                "{p}"
            );
        }
    }
    let t = s.gateway().stats().totals();
    assert_eq!(t.handshakes_ok, 6, "{t:?}");
    assert_eq!(t.handshakes_failed, 0, "{t:?}");

    let now = Instant::now();
    for p in &mut group {
        p.close(now);
        assert_eq!(sig.delete(&p.location).unwrap(), 200);
    }
    s.shutdown();
}
