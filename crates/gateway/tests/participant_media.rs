//! A participant built from a browser offer answers it, lets the browser's ICE check select a
//! pair, completes DTLS-SRTP, delivers the browser's SRTP audio unprotected, protects what we
//! send with keys the browser can open, and drops forged, replayed and stray packets by reason.

mod sim_client;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use secrelay_dtls::Role;
use secrelay_gateway::participant::{
    CodecId, Participant, ParticipantConfig, ParticipantError, SendError,
};
use secrelay_wire::sdp::{parse_offer, MediaKind, Setup};
use sim_client::{
    connect, drain, gateway_cert, gateway_config, participant_for, receiver_report, Ev, SimClient,
};

#[test]
fn answer_picks_our_codecs_and_passive_role_for_an_actpass_offer() {
    let client = SimClient::new(1);
    let p = participant_for(&client.offer(), Instant::now());
    assert_eq!(p.dtls_role(), Role::Server);
    let answer = parse_offer(p.answer_sdp()).expect("the answer parses");
    assert_eq!(answer.setup, Setup::Passive);
    assert_eq!(answer.ice_ufrag, p.ice_credentials().ufrag);
    assert_eq!(answer.ice_pwd, p.ice_credentials().pwd);
    assert!(p.answer_sdp().contains("a=ice-lite"));
    assert!(p.answer_sdp().contains("a=candidate:1 1 udp"));
    let audio = &answer.media[0];
    assert_eq!(audio.kind, MediaKind::Audio);
    // Ours, in our order: opus, PCMU, PCMA; G722, red, CN and telephone-event left out.
    let pts: Vec<u8> = audio.codecs.iter().map(|c| c.pt).collect();
    assert_eq!(pts, vec![111, 0, 8]);
    let video = &answer.media[1];
    assert_eq!(
        video.codecs.iter().map(|c| c.pt).collect::<Vec<_>>(),
        vec![96]
    );
    // The browser only sends video: we only receive it.
    assert_eq!(video.direction, secrelay_wire::sdp::Direction::RecvOnly);
    assert_eq!(p.payload_type_for(CodecId::Opus), Some(111));
    assert_eq!(p.payload_type_for(CodecId::Vp8), Some(96));
    assert_eq!(p.payload_type_for(CodecId::H264), None);
    assert_eq!(p.codec_for(0), Some(CodecId::Pcmu));
}

#[test]
fn our_preference_orders_the_answer() {
    let client = SimClient::new(1);
    let offer = parse_offer(&client.offer()).unwrap();
    let cfg = ParticipantConfig {
        audio_codecs: vec![CodecId::Pcma, CodecId::Pcmu],
        ..gateway_config()
    };
    let p = Participant::new(&offer, gateway_cert(), cfg, Instant::now()).unwrap();
    let answer = parse_offer(p.answer_sdp()).unwrap();
    let pts: Vec<u8> = answer.media[0].codecs.iter().map(|c| c.pt).collect();
    assert_eq!(pts, vec![8, 0]);
    assert_eq!(p.payload_type_for(CodecId::Opus), None);

    let none = ParticipantConfig {
        audio_codecs: vec![],
        video_codecs: vec![CodecId::H264],
        ..gateway_config()
    };
    let err = Participant::new(&offer, gateway_cert(), none, Instant::now()).unwrap_err();
    assert_eq!(err, ParticipantError::NoCommonCodec);
}

#[test]
fn ice_selects_dtls_connects_and_audio_arrives_unprotected() {
    let t0 = Instant::now();
    let mut client = SimClient::new(1);
    let mut p = participant_for(&client.offer(), t0);
    let c = connect(&mut client, &mut p, t0);
    assert_eq!(c.closed(), None, "{:?}", c.events);
    assert_eq!(c.events[0], Ev::IceSelected(client.addr));
    assert_eq!(p.selected(), Some(client.addr));
    assert!(client.stun_ok >= 1, "the check was answered");
    let (profile, handshake) = c.connected().expect("DTLS connected");
    assert_eq!(Some(profile), client.keys.as_ref().map(|k| k.profile));
    assert!(handshake > Duration::ZERO, "two round trips on a 5 ms link");
    assert_eq!(p.counters().handshake_time, Some(handshake));
    assert!(p.is_connected());

    // Browser → gateway: the payload arrives unprotected as a Media event.
    let mut now = c.now;
    for i in 0..5u8 {
        let payload = [i; 80];
        let (plain, protected) = client.srtp(&payload);
        assert_ne!(plain, protected);
        p.handle_datagram(now, client.addr, &protected);
        let (tx, evs, _) = drain(&mut p);
        assert!(tx.is_empty());
        assert_eq!(
            evs,
            vec![Ev::Media {
                ssrc: 1001,
                pt: 111,
                codec: Some(CodecId::Opus),
                rtp: plain,
            }]
        );
        now += Duration::from_millis(20);
    }
    assert_eq!(p.counters().packets_in, 5);
    assert!(p.counters().bytes_in > 5 * 92);

    // Gateway → browser: protected with keys that match the browser's inbound keys.
    let plain = client.rtp(b"from the gateway");
    p.send_rtp(now, &plain).unwrap();
    let (tx, _, _) = drain(&mut p);
    assert_eq!(tx.len(), 1);
    assert_eq!(tx[0].0, client.addr);
    assert_ne!(tx[0].1, plain);
    client.receive(now, &tx[0].1);
    assert_eq!(client.received, vec![plain]);
    assert_eq!(p.counters().packets_out, 1);
    assert_eq!(p.counters().bytes_out, tx[0].1.len() as u64);
}

#[test]
fn passive_offer_makes_us_the_dtls_client_after_nomination() {
    let t0 = Instant::now();
    let mut client = SimClient::new(2);
    let offer = client.offer_with(&client.cert.fingerprint(), "passive");
    let mut p = participant_for(&offer, t0);
    assert_eq!(p.dtls_role(), Role::Client);
    assert_eq!(parse_offer(p.answer_sdp()).unwrap().setup, Setup::Active);
    // Nothing to say before ICE nominates.
    let (tx, _, _) = drain(&mut p);
    assert!(tx.is_empty());
    let c = connect(&mut client, &mut p, t0);
    assert!(c.connected().is_some(), "{:?}", c.events);
    let (plain, protected) = client.srtp(b"hello");
    p.handle_datagram(c.now, client.addr, &protected);
    let (_, evs, _) = drain(&mut p);
    assert!(matches!(&evs[..], [Ev::Media { rtp, .. }] if *rtp == plain));
}

#[test]
fn forged_replayed_and_stray_srtp_is_dropped_and_counted() {
    let t0 = Instant::now();
    let mut client = SimClient::new(3);
    // Before any ICE check, DTLS and SRTP from anywhere are not ours.
    let mut p = participant_for(&client.offer(), t0);
    p.handle_datagram(
        t0,
        client.addr,
        &[22, 254, 253, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
    );
    assert_eq!(p.counters().unvalidated_source, 1);

    let c = connect(&mut client, &mut p, t0);
    assert!(c.connected().is_some());
    let now = c.now;
    let (_, protected) = client.srtp(&[7; 100]);
    p.handle_datagram(now, client.addr, &protected);
    assert_eq!(drain(&mut p).1.len(), 1);

    // Replayed.
    p.handle_datagram(now, client.addr, &protected);
    assert_eq!(p.counters().replays, 1);
    // Forged: one payload bit flipped.
    let (_, mut forged) = client.srtp(&[8; 100]);
    forged[20] ^= 0x01;
    p.handle_datagram(now, client.addr, &forged);
    assert_eq!(p.counters().auth_failures, 1);
    // Forged: a stranger's keys (the tag does not verify).
    let mut stranger = SimClient::new(9);
    let mut other = participant_for(&stranger.offer(), now);
    connect(&mut stranger, &mut other, now);
    // A fresh sequence number, so the replay check (which comes first) lets it through.
    stranger.seq = 500;
    let (_, foreign) = stranger.srtp(&[9; 100]);
    p.handle_datagram(now, client.addr, &foreign);
    assert_eq!(p.counters().auth_failures, 2);
    // From an address ICE never validated.
    let elsewhere: SocketAddr = "203.0.113.9:4000".parse().unwrap();
    let (_, fine) = client.srtp(&[1; 10]);
    p.handle_datagram(now, elsewhere, &fine);
    assert_eq!(p.counters().unvalidated_source, 2);
    // Not STUN, DTLS or RTP at all.
    p.handle_datagram(now, client.addr, &[0x70; 40]);
    assert_eq!(p.counters().unknown, 1);
    // None of it became media, and the stream goes on.
    let (_, evs, _) = drain(&mut p);
    assert!(evs.is_empty(), "{evs:?}");
    p.handle_datagram(now, client.addr, &fine);
    assert_eq!(drain(&mut p).1.len(), 1);
    assert_eq!(p.counters().packets_in, 2);
}

#[test]
fn sending_before_connection_is_refused() {
    let client = SimClient::new(4);
    let mut p = participant_for(&client.offer(), Instant::now());
    let mut c2 = SimClient::new(4);
    let pkt = c2.rtp(b"x");
    assert_eq!(
        p.send_rtp(Instant::now(), &pkt),
        Err(SendError::NotConnected)
    );
    assert_eq!(p.counters().send_refused, 1);
}

#[test]
fn srtcp_is_unprotected_in_and_protected_out() {
    let t0 = Instant::now();
    let mut client = SimClient::new(5);
    let mut p = participant_for(&client.offer(), t0);
    let c = connect(&mut client, &mut p, t0);
    assert!(c.connected().is_some());
    let rr = receiver_report(1001);
    let mut buf = rr.clone();
    buf.resize(rr.len() + 32, 0);
    let n = client
        .tx
        .as_mut()
        .unwrap()
        .protect_rtcp(&mut buf, rr.len())
        .unwrap();
    p.handle_datagram(c.now, client.addr, &buf[..n]);
    let (_, evs, _) = drain(&mut p);
    assert_eq!(evs, vec![Ev::Rtcp(rr.clone())]);

    let ours = receiver_report(0x5ec0);
    p.send_rtcp(c.now, &ours).unwrap();
    let (tx, _, _) = drain(&mut p);
    assert_eq!(tx.len(), 1);
    client.receive(c.now, &tx[0].1);
    assert_eq!(client.received_rtcp, vec![ours]);
}

#[test]
fn dtls_before_nomination_answers_the_checked_address_and_media_waits_for_nomination() {
    let t0 = Instant::now();
    let mut client = SimClient::new(6);
    let mut p = participant_for(&client.offer(), t0);
    let answer = parse_offer(p.answer_sdp()).unwrap();
    // A check without USE-CANDIDATE validates the address but selects nothing.
    let req = client.binding_request(&answer, false);
    p.handle_datagram(t0, client.addr, &req);
    client.start_dtls(&answer, t0);
    let mut now = t0;
    let mut connected = false;
    for _ in 0..50 {
        let (tx, evs, _) = drain(&mut p);
        connected |= evs.iter().any(|e| matches!(e, Ev::Connected(..)));
        assert!(!evs
            .iter()
            .any(|e| matches!(e, Ev::IceSelected(_) | Ev::Closed(_))));
        for (dest, d) in tx {
            assert_eq!(dest, client.addr);
            client.receive(now, &d);
        }
        let out = client.drain_dtls();
        if out.is_empty() && connected {
            break;
        }
        for d in out {
            p.handle_datagram(now, client.addr, &d);
        }
        now += Duration::from_millis(5);
    }
    assert!(connected && client.keys.is_some());
    assert_eq!(p.selected(), None);
    // Media in is fine (the address was validated); media out needs a selected pair.
    let (plain, protected) = client.srtp(b"early");
    p.handle_datagram(now, client.addr, &protected);
    let pkt = client.rtp(b"out");
    assert_eq!(p.send_rtp(now, &pkt), Err(SendError::NotConnected));
    let (_, evs, _) = drain(&mut p);
    assert!(matches!(&evs[..], [Ev::Media { rtp, .. }] if *rtp == plain));
    // Nomination.
    let req = client.binding_request(&answer, true);
    p.handle_datagram(now, client.addr, &req);
    let (_, evs, _) = drain(&mut p);
    assert_eq!(evs, vec![Ev::IceSelected(client.addr)]);
    p.send_rtp(now, &pkt).unwrap();
    let (tx, _, _) = drain(&mut p);
    client.receive(now, &tx[0].1);
    assert_eq!(client.received, vec![pkt]);
}

#[test]
fn a_browser_slow_to_start_dtls_still_connects() {
    // Consent kept for 45 s by checks (no nomination), timers fired as asked, then the browser
    // nominates and starts DTLS: the handshake deadline runs from its first datagram.
    let t0 = Instant::now();
    let mut client = SimClient::new(7);
    let mut p = participant_for(&client.offer(), t0);
    let answer = parse_offer(p.answer_sdp()).unwrap();
    let mut now = t0;
    while now < t0 + Duration::from_secs(45) {
        let req = client.binding_request(&answer, false);
        p.handle_datagram(now, client.addr, &req);
        let next = now + Duration::from_secs(10);
        loop {
            let (_, evs, timer) = drain(&mut p);
            assert!(evs.is_empty(), "{evs:?}");
            match timer {
                Some(t) if t <= next => p.handle_timeout(t),
                _ => break,
            }
        }
        now = next;
    }
    let c = connect(&mut client, &mut p, now);
    assert!(c.connected().is_some(), "{:?}", c.events);
}

#[test]
fn participants_can_move_to_worker_threads() {
    fn assert_send<T: Send>() {}
    assert_send::<Participant>();
    assert_send::<secrelay_gateway::room::Room>();
}
