//! A WebRTC participant built from a browser offer answers it, lets the browser's ICE check
//! select a pair, completes DTLS-SRTP; in a shard, its SRTP audio is unprotected with its keys
//! and reaches the others protected with theirs, what it receives opens with its keys, and
//! forged, replayed and stray packets are dropped by reason.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use secrelay_dtls::Role;
use secrelay_gateway::counters::DropReason;
use secrelay_gateway::leg::{CodecId, LegEvent, WebRtcError, WebRtcLeg};
use secrelay_gateway::room::Room;
use secrelay_gateway::shard::{Handled, JoinKind, Shard};
use secrelay_testkit::browser::receiver_report;
use secrelay_testkit::gateway::{
    connect_leg, drain_leg, gateway_cert, leg_for, to_leg, webrtc_config, Harness,
};
use secrelay_testkit::memory::SimClient;
use secrelay_wire::sdp::{parse_offer, MediaKind, Setup};

/// What a receiver got, without the header extension the gateway writes for it (Chrome's
/// offer agrees on `abs-send-time`: each copy carries our send time in the receiver's id), which
/// must be there.
fn received(p: &[u8]) -> Vec<u8> {
    let h = secrelay_wire::RtpHeader::parse(p).expect("RTP from the gateway");
    let ext = h
        .extension_header()
        .expect("the receiver's header extension");
    assert!(
        ext.elements().any(|(id, d, _)| id == 2 && d.len() == 3),
        "abs-send-time (id 2 in Chrome's offer)"
    );
    let fixed = 12 + 4 * usize::from(h.csrc_count());
    let mut out = p[..fixed].to_vec();
    out[0] &= !0x10;
    out.extend_from_slice(h.payload());
    out
}

/// What `r` received, each packet as [`received`] reads it.
fn all_received(h: &Harness, r: usize) -> Vec<Vec<u8>> {
    h.members[r]
        .client
        .received
        .iter()
        .map(|p| received(p))
        .collect()
}

/// `plain` as receiver `r` sees it from member `s`: under the SSRC of its receive slot.
fn as_received(h: &Harness, r: usize, s: usize, plain: &[u8]) -> Vec<u8> {
    let ssrc = h
        .room_of(r)
        .mapped_ssrc(h.member_id(r), h.member_id(s), 1001)
        .expect("a stream forwarded to the receiver has its SSRC");
    let mut p = plain.to_vec();
    p[8..12].copy_from_slice(&ssrc.to_be_bytes());
    p
}

#[test]
fn answer_picks_our_codecs_and_passive_role_for_an_actpass_offer() {
    let client = SimClient::new(1);
    let p = leg_for(&client.offer(), Instant::now());
    assert_eq!(p.dtls_role(), Role::Server);
    let answer = parse_offer(p.answer_sdp()).expect("the answer parses");
    assert_eq!(answer.setup, Setup::Passive);
    assert_eq!(answer.ice_ufrag, p.ice_credentials().ufrag);
    assert_eq!(answer.ice_pwd, p.ice_credentials().pwd);
    assert!(p.answer_sdp().contains("a=ice-lite"));
    assert!(p.answer_sdp().contains("a=candidate:1 1 udp"));
    let audio = &answer.media[0];
    assert_eq!(audio.kind, MediaKind::Audio);
    // Ours, in our order: opus, PCMU, PCMA, G722, telephone-event at 48 and 8 kHz; red and
    // CN left out.
    let pts: Vec<u8> = audio.codecs.iter().map(|c| c.pt).collect();
    assert_eq!(pts, vec![111, 0, 8, 9, 110, 126]);
    let video = &answer.media[1];
    // VP8, and its retransmission codec (the offer's RTX for 96, with NACKs).
    assert_eq!(
        video.codecs.iter().map(|c| c.pt).collect::<Vec<_>>(),
        vec![96, 97]
    );
    assert_eq!(video.rtx_for(96).map(|c| c.pt), Some(97));
    assert!(video.offers_feedback(96, "nack"));
    assert!(video.offers_feedback(96, "nack pli"));
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
    let cfg = secrelay_gateway::leg::WebRtcConfig {
        audio_codecs: vec![CodecId::Pcma, CodecId::Pcmu],
        ..webrtc_config()
    };
    let p = WebRtcLeg::new(&offer, gateway_cert(), cfg, Instant::now()).unwrap();
    let answer = parse_offer(p.answer_sdp()).unwrap();
    let pts: Vec<u8> = answer.media[0].codecs.iter().map(|c| c.pt).collect();
    assert_eq!(pts, vec![8, 0]);
    assert_eq!(p.payload_type_for(CodecId::Opus), None);

    let none = secrelay_gateway::leg::WebRtcConfig {
        audio_codecs: vec![],
        video_codecs: vec![CodecId::H264],
        ..webrtc_config()
    };
    let err = WebRtcLeg::new(&offer, gateway_cert(), none, Instant::now()).unwrap_err();
    assert_eq!(err, WebRtcError::NoCommonCodec);
}

#[test]
fn ice_selects_and_dtls_connects() {
    let t0 = Instant::now();
    let mut client = SimClient::new(1);
    let mut p = leg_for(&client.offer(), t0);
    let c = connect_leg(&mut client, &mut p, t0);
    assert_eq!(c.closed(), None, "{:?}", c.events);
    // The check validates the address (datagrams from it are this leg's) and, with
    // USE-CANDIDATE, selects it.
    assert_eq!(
        c.events[..2],
        [
            LegEvent::Validated(client.addr),
            LegEvent::IceSelected(client.addr)
        ]
    );
    assert_eq!(p.selected(), Some(client.addr));
    assert!(client.stun_ok >= 1, "the check was answered");
    let (profile, handshake) = c.connected().expect("DTLS connected");
    assert_eq!(Some(profile), client.keys.as_ref().map(|k| k.profile));
    assert!(handshake > Duration::ZERO, "two round trips on a 5 ms link");
    assert_eq!(p.handshake_time(), Some(handshake));
    assert!(p.is_connected());
    assert_eq!(p.media_destination(), Some(client.addr));
}

#[test]
fn audio_arrives_unprotected_and_goes_out_with_the_receivers_keys() {
    let mut h = Harness::simd();
    let a = h.join_connected("r", 1, JoinKind::Join);
    let b = h.join_connected("r", 2, JoinKind::Join);

    // Browser a → gateway: each payload arrives unprotected and reaches b (the first stream
    // on b's slot keeps its payload type, sequence numbers and timestamps).
    for i in 0..5u8 {
        let payload = [i; 80];
        let (plain, protected) = h.srtp(a, &payload);
        assert_ne!(plain, protected);
        assert_eq!(h.send(a, &protected), Handled::Taken);
        assert_eq!(h.pump(), 1, "one copy, for b");
        let got = h.client(b).received.pop().expect("b heard it");
        assert_eq!(received(&got), as_received(&h, b, a, &plain));
        h.now += Duration::from_millis(20);
    }
    let ca = h.member_counters(a).unwrap();
    assert_eq!(ca.packets_in, 5);
    assert!(ca.bytes_in > 5 * 92);

    // Gateway → browser a: b's packet, protected with keys that match a's inbound keys.
    let (plain, protected) = h.srtp(b, b"from the gateway");
    h.send(b, &protected);
    assert_eq!(h.pump(), 1);
    assert_eq!(all_received(&h, a), vec![as_received(&h, a, b, &plain)]);
    let ca = h.member_counters(a).unwrap();
    assert_eq!(ca.packets_out, 1);
    // The same profile on both legs: a's copy is as long as what b sent, with the header
    // extension a agreed on (4 bytes of extension header, abs-send-time in 1 + 3).
    assert_eq!(ca.bytes_out, protected.len() as u64 + 8);
}

#[test]
fn passive_offer_makes_us_the_dtls_client_after_nomination() {
    let t0 = Instant::now();
    let mut client = SimClient::new(2);
    let offer = client.offer_with(&client.cert.fingerprint(), "passive");
    let mut p = leg_for(&offer, t0);
    assert_eq!(p.dtls_role(), Role::Client);
    assert_eq!(parse_offer(p.answer_sdp()).unwrap().setup, Setup::Active);
    // Nothing to say before ICE nominates.
    let (tx, _, _) = drain_leg(&mut p);
    assert!(tx.is_empty());
    let c = connect_leg(&mut client, &mut p, t0);
    assert!(c.connected().is_some(), "{:?}", c.events);

    // In a shard, its media reaches the room.
    let mut h = Harness::simd();
    let c2 = SimClient::new(2);
    let offer = c2.offer_with(&c2.cert.fingerprint(), "passive");
    let a = h.join("r", c2, JoinKind::Join, Some(&offer)).unwrap();
    assert!(h.connect(a));
    let b = h.join_connected("r", 3, JoinKind::Join);
    let (plain, protected) = h.srtp(a, b"hello");
    h.send(a, &protected);
    h.pump();
    assert_eq!(all_received(&h, b), vec![as_received(&h, b, a, &plain)]);
}

#[test]
fn forged_replayed_and_stray_srtp_is_dropped_and_counted() {
    let mut h = Harness::simd();
    let a = h
        .join("r", SimClient::new(3), JoinKind::Join, None)
        .unwrap();
    // Before any ICE check, DTLS and SRTP from anywhere are nobody's.
    assert_eq!(
        h.send(a, &[22, 254, 253, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]),
        Handled::NotOurs
    );
    assert_eq!(h.counters().media.drops[DropReason::UnknownSource], 1);

    assert!(h.connect(a));
    let b = h.join_connected("r", 4, JoinKind::Join);
    let (_, protected) = h.srtp(a, &[7; 100]);
    h.send(a, &protected);
    assert_eq!(h.pump(), 1);

    // Replayed.
    h.send(a, &protected);
    h.pump();
    assert_eq!(h.member_counters(a).unwrap().drops[DropReason::Replayed], 1);
    // Forged: one payload bit flipped.
    let (_, mut forged) = h.srtp(a, &[8; 100]);
    forged[20] ^= 0x01;
    h.send(a, &forged);
    h.pump();
    assert_eq!(
        h.member_counters(a).unwrap().drops[DropReason::AuthFailed],
        1
    );
    // Forged: a stranger's keys (the tag does not verify).
    let s = h.join_connected("elsewhere", 9, JoinKind::Join);
    // A fresh sequence number, so the replay check (which comes first) lets it through.
    h.client(s).seq = 500;
    let (_, foreign) = h.srtp(s, &[9; 100]);
    let a_addr = h.client(a).addr;
    h.send_from(a_addr, &foreign);
    h.pump();
    assert_eq!(
        h.member_counters(a).unwrap().drops[DropReason::AuthFailed],
        2
    );
    // From an address ICE never validated: nobody's.
    let elsewhere: SocketAddr = "203.0.113.9:4000".parse().unwrap();
    let (_, fine) = h.srtp(a, &[1; 10]);
    assert_eq!(h.send_from(elsewhere, &fine), Handled::NotOurs);
    assert_eq!(h.counters().media.drops[DropReason::UnknownSource], 2);
    // Not STUN, DTLS or RTP at all: in no range of RFC 7983.
    h.send(a, &[0x70; 40]);
    assert_eq!(
        h.member_counters(a).unwrap().drops[DropReason::Unclassified],
        1
    );
    // None of it became media, and the stream goes on.
    assert_eq!(h.pump(), 0);
    assert_eq!(h.client(b).received.len(), 1);
    h.send(a, &fine);
    assert_eq!(h.pump(), 1);
    assert_eq!(h.client(b).received.len(), 2);
    assert_eq!(h.member_counters(a).unwrap().packets_in, 2);
}

#[test]
fn a_receiver_not_connected_yet_gets_no_copy() {
    let mut h = Harness::simd();
    let a = h.join_connected("r", 1, JoinKind::Join);
    let b = h
        .join("r", SimClient::new(2), JoinKind::Join, None)
        .unwrap();
    let (_, p) = h.srtp(a, b"x");
    h.send(a, &p);
    assert_eq!(h.pump(), 0);
    let cb = h.member_counters(b).unwrap();
    assert_eq!(cb.drops[DropReason::ReceiverNotReady], 1);
    assert_eq!(cb.packets_out, 0);
}

#[test]
fn srtcp_is_unprotected_in_and_protected_out() {
    let mut h = Harness::simd();
    let a = h.join_connected("r", 5, JoinKind::Join);
    let b = h.join_connected("r", 6, JoinKind::Join);
    let rr = receiver_report(1001);
    let srtcp = h.client(a).srtcp(&rr).expect("keyed");
    h.send(a, &srtcp);
    // Unprotected and counted at the gateway, which terminates RTCP: nothing forwarded.
    assert_eq!(h.pump(), 0);
    let ca = h.member_counters(a).unwrap();
    assert_eq!(ca.packets_in, 1);
    assert_eq!(ca.drops.total(), 0);
    assert!(h.client(b).received_rtcp.is_empty());

    // The gateway's own RTCP goes out protected with the receiver's keys.
    let ours = receiver_report(0x5ec0);
    let (room, id) = (h.members[a].room.clone(), h.members[a].id.clone());
    let now = h.now;
    assert!(h.shard.send_rtcp(now, &room, &id, &ours));
    assert_eq!(h.pump(), 1);
    assert_eq!(h.client(a).received_rtcp, vec![ours]);
    assert_eq!(h.member_counters(a).unwrap().packets_out, 1);
}

#[test]
fn dtls_before_nomination_answers_the_checked_address_and_media_waits_for_nomination() {
    let mut h = Harness::simd();
    let b = h.join_connected("r", 7, JoinKind::Join);
    let a = h
        .join("r", SimClient::new(6), JoinKind::Join, None)
        .unwrap();
    let answer = h.members[a].answer.clone();
    // A check without USE-CANDIDATE validates the address but selects nothing.
    let req = h.client(a).binding_request(&answer, false);
    h.send(a, &req);
    let now = h.now;
    h.client(a).start_dtls(&answer, now);
    let mut connected = false;
    for _ in 0..50 {
        h.pump();
        let out = h.client(a).drain_dtls();
        connected = h.client(a).keys.is_some()
            && h.room_of(a)
                .leg(h.member_id(a))
                .is_some_and(|l| l.is_connected());
        if out.is_empty() && connected {
            break;
        }
        for d in out {
            h.send(a, &d);
        }
        h.now += Duration::from_millis(5);
    }
    assert!(connected);
    let leg = h.room_of(a).leg(h.member_id(a)).unwrap();
    assert_eq!(leg.as_webrtc().unwrap().selected(), None);
    assert_eq!(leg.media_destination(), None);
    // Media in is fine (the address was validated); media out needs a selected pair.
    let (plain, protected) = h.srtp(a, b"early");
    h.send(a, &protected);
    h.pump();
    assert_eq!(all_received(&h, b), vec![as_received(&h, b, a, &plain)]);
    let (_, out) = h.srtp(b, b"out");
    h.send(b, &out);
    assert_eq!(h.pump(), 0);
    assert_eq!(
        h.member_counters(a).unwrap().drops[DropReason::ReceiverNotReady],
        1
    );
    // Nomination.
    let req = h.client(a).binding_request(&answer, true);
    h.send(a, &req);
    h.pump();
    let (plain, out) = h.srtp(b, b"out");
    h.send(b, &out);
    assert_eq!(h.pump(), 1);
    assert_eq!(all_received(&h, a), vec![as_received(&h, a, b, &plain)]);
}

#[test]
fn a_browser_slow_to_start_dtls_still_connects() {
    // Consent kept for 45 s by checks (no nomination), timers fired as asked, then the browser
    // nominates and starts DTLS: the handshake deadline runs from its first datagram.
    let t0 = Instant::now();
    let mut client = SimClient::new(7);
    let mut p = leg_for(&client.offer(), t0);
    let answer = parse_offer(p.answer_sdp()).unwrap();
    let mut now = t0;
    while now < t0 + Duration::from_secs(45) {
        let req = client.binding_request(&answer, false);
        to_leg(&mut p, now, client.addr, &req);
        let next = now + Duration::from_secs(10);
        loop {
            let (_, evs, timer) = drain_leg(&mut p);
            assert!(
                evs.iter().all(|e| matches!(e, LegEvent::Validated(_))),
                "{evs:?}"
            );
            match timer {
                Some(t) if t <= next => p.handle_timeout(t),
                _ => break,
            }
        }
        now = next;
    }
    let c = connect_leg(&mut client, &mut p, now);
    assert!(c.connected().is_some(), "{:?}", c.events);
}

#[test]
fn legs_rooms_and_shards_can_move_to_worker_threads() {
    fn assert_send<T: Send>() {}
    assert_send::<WebRtcLeg>();
    assert_send::<Room>();
    assert_send::<Shard>();
}
