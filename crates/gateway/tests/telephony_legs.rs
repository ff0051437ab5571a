//! Telephony legs beside WebRTC participants in one room: a plain RTP phone, an SDES-SRTP phone
//! and a browser each hear the others, every packet unprotected with its sender's keys and
//! protected again with its receiver's own (K1/K2), a plain phone's in the clear; SDES offers
//! are negotiated (the best usable suite, MKI and unknown session parameters refused with a
//! reason); legs latch to their sources and hijack attempts are dropped and counted; a silent
//! leg ends at its media timeout. Driven through a shard, in memory.

use std::net::SocketAddr;
use std::time::Duration;

use secrelay_gateway::counters::{DropReason, EndReason};
use secrelay_gateway::leg::RtpLegError;
use secrelay_gateway::shard::{Event, Handled, JoinError, JoinKind};
use secrelay_srtp::Profile;
use secrelay_testkit::gateway::Harness;
use secrelay_testkit::memory::SimClient;
use secrelay_testkit::phone::SimPhone;
use secrelay_wire::sdp_rtp::parse_rtp;
use secrelay_wire::RtpHeader;

fn payload(p: &[u8]) -> Vec<u8> {
    RtpHeader::parse(p).unwrap().payload().to_vec()
}

/// A room "call" with a browser (sending Opus, taking PCMU too), a plain phone and an SDES
/// phone (sending PCMU, taking Opus too), all connected: (harness, browser, plain, sdes).
fn call() -> (Harness, usize, usize, usize) {
    let mut h = Harness::simd();
    let b = h
        .join("call", SimClient::new(1), JoinKind::Join, None)
        .unwrap();
    assert!(h.connect(b));
    let plain = h.join_phone("call", SimPhone::plain(1)).unwrap();
    let sdes = h
        .join_phone("call", SimPhone::sdes(2, Profile::AesCm128HmacSha1_80))
        .unwrap();
    (h, b, plain, sdes)
}

#[test]
fn a_browser_a_plain_phone_and_an_sdes_phone_hear_each_other_with_their_own_keys() {
    let (mut h, b, plain, sdes) = call();
    // The plain phone speaks: the browser and the SDES phone each get it protected with their
    // own keys (their strict receivers would panic otherwise).
    let (_, pkt) = h.phones[plain].phone.packet(&[1; 160]);
    assert_eq!(h.send_phone(plain, &pkt), Handled::Taken);
    assert_eq!(h.pump(), 2);
    // The SDES phone speaks (SRTP with its own key).
    let (_, srtp) = h.phones[sdes].phone.packet(&[2; 160]);
    h.send_phone(sdes, &srtp);
    assert_eq!(h.pump(), 2);
    // The browser speaks.
    let (_, web) = h.srtp(b, &[3; 160]);
    h.send(b, &web);
    assert_eq!(h.pump(), 2);

    let got = |v: &Vec<Vec<u8>>| v.iter().map(|p| payload(p)[0]).collect::<Vec<u8>>();
    assert_eq!(got(&h.members[b].client.received), vec![1, 2]);
    assert_eq!(got(&h.phones[plain].phone.received), vec![2, 3]);
    assert_eq!(got(&h.phones[sdes].phone.received), vec![1, 3]);
    // The plain phone's copies are RTP in the clear: its receive() opened nothing.
    assert!(h.phones[plain].phone.rx.is_none());
    for (i, name) in [(plain, "plain"), (sdes, "sdes")] {
        let c = h.phone_counters(i).unwrap();
        assert_eq!(c.packets_in, 1, "{name}");
        assert_eq!(c.packets_out, 2, "{name}");
        assert_eq!(c.drops.total(), 0, "{name}");
    }
    let room = h.shard.snapshot(h.now, Some("call"));
    let legs: Vec<&str> = room[0].participants.iter().map(|p| p.leg).collect();
    assert_eq!(legs, vec!["webrtc", "plain", "sdes"]);
    assert_eq!(
        room[0].participants[2].srtp_profile.as_deref(),
        Some("AES_CM_128_HMAC_SHA1_80")
    );
}

#[test]
fn two_sdes_legs_with_the_same_key_still_get_every_packet_decrypted_and_encrypted_again() {
    let mut h = Harness::simd();
    let a = h
        .join_phone("r", SimPhone::sdes(1, Profile::AeadAes128Gcm))
        .unwrap();
    let mut twin = SimPhone::sdes(2, Profile::AeadAes128Gcm);
    twin.key = h.phones[a].phone.key.clone();
    twin.tx = None;
    let b = h.join_phone("r", twin).unwrap();
    let (_, sent) = h.phones[a].phone.packet(&[9; 100]);
    h.send_phone(a, &sent);
    assert_eq!(h.pump(), 1);
    // b opened it with the gateway's key for b (its strict receiver panics otherwise), and
    // what crossed the wire to b is not what a sent: decrypted and encrypted again, never
    // passed through because the keys matched.
    assert_eq!(payload(&h.phones[b].phone.received[0]), vec![9; 100]);
    assert_ne!(h.phones[b].phone.wire[0], sent);
    // A forgery under the shared key's stream (one flipped bit) is refused at a and reaches
    // nobody.
    let (_, mut forged) = h.phones[a].phone.packet(&[8; 100]);
    forged[20] ^= 1;
    h.send_phone(a, &forged);
    assert_eq!(h.pump(), 0);
    assert_eq!(
        h.phone_counters(a).unwrap().drops[DropReason::AuthFailed],
        1
    );
    assert_eq!(h.phones[b].phone.received.len(), 1);
}

#[test]
fn sdes_offers_get_the_best_usable_suite_or_a_reason() {
    let mut h = Harness::simd();
    let mut p = SimPhone::sdes(1, Profile::AesCm128HmacSha1_32);
    // Offer two lines: the phone's own (tag 1, _32) and an AEAD_AES_256_GCM one with an MKI
    // (tag 2), which is refused; _32 is taken.
    let gcm = "a=crypto:2 AEAD_AES_256_GCM inline:WVNfX19zZW1jdGwgKCkgewkyMjA7fQp9CnVubGVzAAAAAAAAAAAAAAAA|1:4\r\n";
    let offer = p.offer() + gcm;
    let desc = secrelay_wire::sdp_rtp::parse_rtp(&offer).unwrap();
    let ports = secrelay_gateway::leg::Ports {
        rtp: "192.0.2.1:31000".parse().unwrap(),
        rtcp: "192.0.2.1:31001".parse().unwrap(),
    };
    let j = h
        .shard
        .join_rtp(h.now, "r", &desc, ports, &Default::default())
        .unwrap();
    assert!(j
        .answer
        .contains("a=crypto:1 AES_CM_128_HMAC_SHA1_32 inline:"));
    p.accept_answer(&j.answer).unwrap();

    // Nothing usable: every reason is named.
    let only_bad = "v=0\r\no=- 1 1 IN IP4 192.0.2.9\r\ns=-\r\nc=IN IP4 192.0.2.9\r\nt=0 0\r\n\
        m=audio 4000 RTP/SAVP 0\r\n\
        a=crypto:1 SEED_CTR_128_HMAC_SHA1_80 inline:WVNfX19zZW1jdGwgKCkgewkyMjA7fQp9CnVubGVz\r\n\
        a=crypto:2 AES_CM_128_HMAC_SHA1_80 inline:WVNfX19zZW1jdGwgKCkgewkyMjA7fQp9CnVubGVz|1:4\r\n\
        a=crypto:3 AES_CM_128_HMAC_SHA1_80 inline:WVNfX19zZW1jdGwgKCkgewkyMjA7fQp9CnVubGVz UNENCRYPTED_SRTP\r\n";
    let desc = secrelay_wire::sdp_rtp::parse_rtp(only_bad).unwrap();
    let err = h
        .shard
        .join_rtp(h.now, "r", &desc, ports, &Default::default())
        .unwrap_err();
    let JoinError::Rtp(RtpLegError::NoUsableCrypto(why)) = err else {
        panic!("{err:?}")
    };
    assert!(why.contains("SEED_CTR_128_HMAC_SHA1_80"), "{why}");
    assert!(why.contains("MKI"), "{why}");
    assert!(why.contains("UNENCRYPTED_SRTP"), "{why}");
    // No codec in common.
    let g729 = "v=0\r\no=- 1 1 IN IP4 192.0.2.9\r\ns=-\r\nc=IN IP4 192.0.2.9\r\nt=0 0\r\nm=audio 4000 RTP/AVP 18\r\n";
    let desc = secrelay_wire::sdp_rtp::parse_rtp(g729).unwrap();
    assert!(h
        .shard
        .join_rtp(h.now, "r", &desc, ports, &Default::default())
        .is_err());
}

#[test]
fn a_plain_leg_takes_media_only_from_its_signalled_address() {
    let (mut h, b, plain, _) = call();
    let rogue: SocketAddr = "203.0.113.66:4444".parse().unwrap();
    let port = h.phones[plain].ports.rtp.port();
    let (_, pkt) = h.phones[plain].phone.packet(&[5; 160]);
    h.send_phone_from(plain, rogue, port, &pkt);
    assert_eq!(h.pump(), 0, "not relayed");
    assert_eq!(
        h.phone_counters(plain).unwrap().drops[DropReason::UnlatchedSource],
        1
    );
    assert!(h.members[b].client.received.is_empty());
    // From the signalled address it goes through, and the leg latches there.
    let (_, pkt) = h.phones[plain].phone.packet(&[6; 160]);
    h.send_phone(plain, &pkt);
    assert_eq!(h.pump(), 2);
    // And copies for the phone go to its address, from its own port.
    let (_, web) = h.srtp(b, &[7; 160]);
    h.send(b, &web);
    h.pump();
    assert_eq!(
        payload(h.phones[plain].phone.received.last().unwrap())[0],
        7
    );
}

#[test]
fn an_sdes_leg_latches_to_what_authenticates_and_forgeries_move_nothing() {
    let (mut h, b, _, sdes) = call();
    let port = h.phones[sdes].ports.rtp.port();
    let rogue: SocketAddr = "203.0.113.66:4444".parse().unwrap();
    // A forgery (one flipped byte) from elsewhere: dropped by SRTP, no latch.
    let (_, mut forged) = h.phones[sdes].phone.packet(&[1; 160]);
    let last = forged.len() - 1;
    forged[last] ^= 1;
    h.send_phone_from(sdes, rogue, port, &forged);
    assert_eq!(h.pump(), 0);
    let c = h.phone_counters(sdes).unwrap();
    assert_eq!(c.drops[DropReason::AuthFailed], 1);
    let leg_latched = |h: &Harness| {
        let m = h.shard.member_id(&h.phones[sdes].id).unwrap();
        h.shard
            .room("call")
            .unwrap()
            .leg(m)
            .unwrap()
            .as_rtp()
            .unwrap()
            .latched()
    };
    assert_eq!(leg_latched(&h), None);
    // The real packet from the signalled address: latched there.
    let (_, real) = h.phones[sdes].phone.packet(&[2; 160]);
    h.send_phone(sdes, &real);
    assert_eq!(h.pump(), 2);
    assert_eq!(leg_latched(&h), Some(h.phones[sdes].phone.addr));
    // Replayed from elsewhere: dropped as a replay, the latch stays.
    h.send_phone_from(sdes, rogue, port, &real);
    h.pump();
    assert_eq!(
        h.phone_counters(sdes).unwrap().drops[DropReason::Replayed],
        1
    );
    assert_eq!(leg_latched(&h), Some(h.phones[sdes].phone.addr));
    // The phone moves (a NAT rebinding): its authenticated packets re-latch, and copies
    // follow it.
    let moved: SocketAddr = "198.51.100.102:30999".parse().unwrap();
    let (_, next) = h.phones[sdes].phone.packet(&[3; 160]);
    h.send_phone_from(sdes, moved, port, &next);
    h.pump();
    assert_eq!(leg_latched(&h), Some(moved));
    let (_, web) = h.srtp(b, &[4; 160]);
    h.send(b, &web);
    h.pump();
    assert_eq!(payload(h.phones[sdes].phone.received.last().unwrap())[0], 4);
}

#[test]
fn srtcp_from_an_sdes_phone_is_counted_and_a_tampered_report_dropped() {
    let (mut h, _, _, sdes) = call();
    let rr = secrelay_testkit::browser::receiver_report(0x5000_0002);
    let mut buf = rr.clone();
    buf.resize(rr.len() + 32, 0);
    let n = h.phones[sdes]
        .phone
        .tx
        .as_mut()
        .unwrap()
        .protect_rtcp(&mut buf, rr.len())
        .unwrap();
    buf.truncate(n);
    let (addr, rtcp_port) = (h.phones[sdes].phone.addr, h.phones[sdes].ports.rtcp.port());
    let rtcp_from = SocketAddr::new(addr.ip(), addr.port() + 1);
    h.send_phone_from(sdes, rtcp_from, rtcp_port, &buf);
    assert_eq!(h.pump(), 0, "terminated, not forwarded");
    assert_eq!(h.phone_counters(sdes).unwrap().packets_in, 1);
    let mut tampered = buf.clone();
    tampered[9] ^= 0x40;
    h.send_phone_from(sdes, rtcp_from, rtcp_port, &tampered);
    h.pump();
    assert_eq!(
        h.phone_counters(sdes).unwrap().drops[DropReason::AuthFailed],
        1
    );
}

#[test]
fn a_silent_telephony_leg_ends_at_its_media_timeout_and_gives_its_ports_back() {
    let mut h = Harness::simd();
    let p = h.join_phone("r", SimPhone::plain(1)).unwrap();
    let (_, pkt) = h.phones[p].phone.packet(&[1; 160]);
    h.send_phone(p, &pkt);
    h.pump();
    let start = h.now;
    while let Some(t) = h.shard.poll_timeout() {
        if t > start + Duration::from_secs(120) {
            break;
        }
        h.advance_to(t);
    }
    let ports = vec![h.phones[p].ports.rtp.port(), h.phones[p].ports.rtcp.port()];
    assert!(h.events.iter().any(|e| matches!(
        e,
        Event::MemberLeft { reason: EndReason::MediaTimeout, ports: left, .. } if *left == ports
    )));
    assert!(h.now >= start + Duration::from_secs(60));
    assert_eq!(h.counters().ended[EndReason::MediaTimeout], 1);
    assert_eq!(h.shard.route_sizes(), (0, 0));
}

#[test]
fn a_phone_behind_nat_latches_within_its_first_packets_when_configured() {
    let mut cfg = secrelay_testkit::gateway::rtp_config();
    cfg.latch = secrelay_gateway::leg::Latch::FirstPackets(3);
    let mut h = Harness::simd();
    h.shard = secrelay_gateway::shard::Shard::new(
        secrelay_gateway::shard::ShardConfig {
            certificate: secrelay_testkit::gateway::gateway_cert(),
            webrtc: secrelay_testkit::gateway::webrtc_config(),
            rtp: cfg,
            rtcp: secrelay_gateway::rtcp::RtcpConfig::default(),
            codecs: secrelay_media::Registry::standard(),
            limits: Default::default(),
        },
        Box::new(secrelay_srtp::SimdEngine::new()),
    );
    let p = h.join_phone("r", SimPhone::plain(1)).unwrap();
    let q = h.join_phone("r", SimPhone::plain(2)).unwrap();
    // p's packets come from its NAT's address, not the signalled one.
    let nat: SocketAddr = "198.51.100.101:61000".parse().unwrap();
    let port = h.phones[p].ports.rtp.port();
    let (_, pkt) = h.phones[p].phone.packet(&[1; 160]);
    h.send_phone_from(p, nat, port, &pkt);
    assert_eq!(h.pump(), 1, "latched within the first packets");
    // Someone else after that: refused.
    let (_, pkt) = h.phones[p].phone.packet(&[2; 160]);
    h.send_phone_from(p, "203.0.113.66:4444".parse().unwrap(), port, &pkt);
    assert_eq!(h.pump(), 0);
    assert_eq!(
        h.phone_counters(p).unwrap().drops[DropReason::UnlatchedSource],
        1
    );
    // q's media for p goes to the NAT's address.
    let (_, pkt) = h.phones[q].phone.packet(&[3; 160]);
    h.send_phone(q, &pkt);
    assert_eq!(h.pump(), 1);
    assert_eq!(payload(h.phones[p].phone.received.last().unwrap())[0], 3);
}

/// Phone `i`'s new offer through the shard: our answer, which it takes.
fn reoffer(h: &mut Harness, i: usize) -> String {
    let offer = parse_rtp(&h.phones[i].phone.offer()).unwrap();
    let (room, id) = (h.phones[i].room.clone(), h.phones[i].id.clone());
    let answer = h
        .shard
        .update_rtp(h.now, &room, &id, &offer)
        .unwrap()
        .expect("an answer to a new offer");
    h.phones[i].phone.accept_answer(&answer).unwrap();
    h.pump();
    answer
}

/// The `o=` version and the first crypto line's key of our SDP.
fn version_and_key(sdp: &str) -> (String, Option<String>) {
    let o = sdp.lines().find(|l| l.starts_with("o=")).unwrap();
    let version = o.split_whitespace().nth(2).unwrap().to_owned();
    let d = parse_rtp(sdp).unwrap();
    let key = d.sections[0]
        .crypto
        .first()
        .map(|c| c.keys[0].key_salt.clone());
    (version, key)
}

#[test]
fn a_new_offer_moves_a_phone_to_its_new_address_and_key_while_ours_stays() {
    let (mut h, b, plain, sdes) = call();
    let first = h
        .shard
        .room("call")
        .unwrap()
        .leg(h.shard.member_id(&h.phones[sdes].id).unwrap())
        .unwrap()
        .as_rtp()
        .unwrap()
        .answer_sdp()
        .to_owned();
    // The SDES phone moves (a new address) and re-keys: a re-INVITE.
    let old_tx = h.phones[sdes].phone.rekey().unwrap();
    h.phones[sdes].phone.addr = "198.51.100.150:22000".parse().unwrap();
    let answer = reoffer(&mut h, sdes);
    let (v1, k1) = version_and_key(&first);
    let (v2, k2) = version_and_key(&answer);
    assert_eq!(
        (v1.as_str(), v2.as_str()),
        ("1", "2"),
        "the same session, one version on"
    );
    assert_eq!(k1, k2, "our key stays while the suite does");

    // Its media under the new key is taken, from the new address, and heard by the others.
    let (_, srtp) = h.phones[sdes].phone.packet(&[7; 160]);
    h.send_phone(sdes, &srtp);
    assert_eq!(h.pump(), 2);
    // What it sent under the old key is not taken any more.
    let mut tx = old_tx;
    let plain_pkt = h.phones[sdes].phone.rtp(&[8; 160]);
    let mut buf = plain_pkt.clone();
    buf.resize(plain_pkt.len() + 32, 0);
    let n = tx.protect_rtp(&mut buf, plain_pkt.len()).unwrap();
    h.send_phone(sdes, &buf[..n]);
    assert_eq!(h.pump(), 0);
    assert_eq!(
        h.phone_counters(sdes).unwrap().drops[DropReason::AuthFailed],
        1
    );
    // Copies for it go to the new address (none stray to the old one), still under our key.
    let (_, pkt) = h.phones[plain].phone.packet(&[9; 160]);
    h.send_phone(plain, &pkt);
    h.pump();
    assert!(
        h.stray.is_empty(),
        "{} copies to the old address",
        h.stray.len()
    );
    let got = |v: &Vec<Vec<u8>>| v.iter().map(|p| payload(p)[0]).collect::<Vec<u8>>();
    assert_eq!(got(&h.phones[sdes].phone.received), vec![9]);
    assert_eq!(got(&h.members[b].client.received), vec![7, 9]);
}

#[test]
fn a_phone_on_hold_is_sent_nothing_and_hears_again_when_it_resumes() {
    let (mut h, b, plain, _) = call();
    h.phones[plain].phone.direction = "sendonly";
    let answer = reoffer(&mut h, plain);
    assert!(answer.contains("a=recvonly"), "{answer}");
    let (_, web) = h.srtp(b, &[1; 160]);
    h.send(b, &web);
    h.pump();
    assert!(
        h.phones[plain].phone.received.is_empty(),
        "on hold: nothing for it"
    );
    // It still speaks (music on hold), and the others hear it.
    let (_, pkt) = h.phones[plain].phone.packet(&[2; 160]);
    h.send_phone(plain, &pkt);
    assert_eq!(h.pump(), 2);
    h.phones[plain].phone.direction = "sendrecv";
    reoffer(&mut h, plain);
    let (_, web) = h.srtp(b, &[3; 160]);
    h.send(b, &web);
    h.pump();
    let got: Vec<u8> = h.phones[plain]
        .phone
        .received
        .iter()
        .map(|p| payload(p)[0])
        .collect();
    assert_eq!(got, vec![3]);
}

#[test]
fn a_new_offer_that_cannot_be_taken_is_refused_and_changes_nothing() {
    let (mut h, _, plain, sdes) = call();
    let (room, id) = (h.phones[sdes].room.clone(), h.phones[sdes].id.clone());
    // A new offer with no codec we take: refused with the reason; the leg goes on as it was.
    let bad = h.phones[sdes]
        .phone
        .offer()
        .replace(
            "m=audio 20004 RTP/SAVP 0 8 111",
            "m=audio 20004 RTP/SAVP 18",
        )
        .replace(
            "a=rtpmap:0 PCMU/8000\r\na=rtpmap:8 PCMA/8000\r\na=rtpmap:111 opus/48000/2\r\n",
            "a=rtpmap:18 G729/8000\r\n",
        );
    assert!(bad.contains("G729"), "{bad}");
    let e = h
        .shard
        .update_rtp(h.now, &room, &id, &parse_rtp(&bad).unwrap())
        .unwrap_err();
    assert_eq!(e, JoinError::Rtp(RtpLegError::NoCommonCodec));
    let (_, pkt) = h.phones[plain].phone.packet(&[4; 160]);
    h.send_phone(plain, &pkt);
    h.pump();
    assert_eq!(h.phones[sdes].phone.received.len(), 1, "media as before");
}
