//! In a room, each member's SRTP is unprotected with its own keys and protected again for each
//! receiver with that receiver's keys; every receiver sees the others' streams under SSRCs of
//! its own (unique, stable) and with its own payload type for the codec. Driven through a
//! shard, whose batched path is the gateway's only media path.

use std::collections::HashSet;
use std::time::Duration;

use secrelay_gateway::counters::DropReason;
use secrelay_gateway::shard::JoinKind;
use secrelay_testkit::gateway::Harness;
use secrelay_testkit::memory::SimClient;
use secrelay_wire::RtpHeader;

/// Header facts of an RTP packet: (ssrc, pt, seq, payload).
fn rtp_facts(p: &[u8]) -> (u32, u8, u16, Vec<u8>) {
    let h = RtpHeader::parse(p).unwrap();
    (
        h.ssrc(),
        h.payload_type(),
        h.sequence(),
        h.payload().to_vec(),
    )
}

/// A room "r" of connected members joined as `kinds`, with these Opus payload types.
fn room_of(kinds: &[JoinKind], opus_pts: &[u8]) -> Harness {
    let mut h = Harness::simd();
    for (i, (kind, pt)) in kinds.iter().zip(opus_pts).enumerate() {
        let mut c = SimClient::new(i as u8 + 1);
        c.pt = *pt;
        let m = h.join("r", c, *kind, None).unwrap();
        assert!(h.connect(m), "member {m} connects");
        let leg = h.room_of(m).leg(h.member_id(m)).unwrap();
        assert_eq!(
            leg.payload_type_for(secrelay_gateway::leg::CodecId::Opus),
            Some(*pt)
        );
    }
    h
}

#[test]
fn three_members_each_receive_the_other_two_reprotected_with_their_own_keys() {
    // Every browser announces SSRC 1001 (as Chrome's offer does); the opus payload types
    // differ per member.
    let pts = [111u8, 109, 120];
    let mut h = room_of(&[JoinKind::Join; 3], &pts);

    for round in 0..3u8 {
        for s in 0..3 {
            let payload = [round * 10 + s as u8; 60];
            let (_, protected) = h.srtp(s, &payload);
            h.send(s, &protected);
            let sent = h.pump();
            assert_eq!(sent, 2, "one copy for each other member");
            h.now += Duration::from_millis(20);
        }
    }

    for (r, pt_r) in pts.iter().enumerate() {
        // Three rounds from each of the two others, all opened with this member's own keys
        // (SimClient::receive unprotects with its inbound context and panics otherwise).
        let received = h.members[r].client.received.clone();
        assert_eq!(received.len(), 6, "member {r}");
        let mut ssrcs = HashSet::new();
        for (k, pkt) in received.iter().enumerate() {
            let (ssrc, pt, _seq, payload) = rtp_facts(pkt);
            assert_eq!(pt, *pt_r, "member {r} gets its own opus payload type");
            let round = (k / 2) as u8;
            let s = [0, 1, 2]
                .into_iter()
                .filter(|s| *s != r)
                .nth(k % 2)
                .unwrap();
            assert_eq!(payload, vec![round * 10 + s as u8; 60]);
            assert_eq!(
                Some(ssrc),
                h.room_of(r)
                    .mapped_ssrc(h.member_id(r), h.member_id(s), 1001),
                "stable SSRC per (receiver, source stream)"
            );
            ssrcs.insert(ssrc);
        }
        assert_eq!(ssrcs.len(), 2, "the two sources are told apart");
        assert!(!ssrcs.contains(&0));
    }
    assert_eq!(h.room_of(0).counters().routed, 9);
    assert_eq!(h.room_of(0).counters().forwarded, 18);
    for i in 0..3 {
        let c = h.member_counters(i).unwrap();
        assert_eq!(c.packets_in, 3);
        assert_eq!(c.packets_out, 6);
        assert_eq!(
            c.drops[DropReason::AuthFailed] + c.drops[DropReason::Replayed],
            0
        );
    }
}

#[test]
fn sequence_numbers_pass_and_a_subscriber_only_member_is_not_forwarded() {
    let kinds = [JoinKind::Whip, JoinKind::Whep, JoinKind::Whep];
    let mut h = room_of(&kinds, &[111, 111, 111]);
    h.client(0).seq = 4000;
    h.client(0).ts = 4000 * 960;
    for _ in 0..2 {
        let (_, p) = h.srtp(0, b"pub");
        h.send(0, &p);
        assert_eq!(h.pump(), 2);
    }
    for r in 1..3 {
        let seqs: Vec<u16> = h.members[r]
            .client
            .received
            .iter()
            .map(|p| rtp_facts(p).2)
            .collect();
        assert_eq!(seqs, vec![4000, 4001]);
    }
    // A subscriber's own media goes nowhere.
    let (_, p) = h.srtp(1, b"sub");
    h.send(1, &p);
    assert_eq!(h.pump(), 0);
    assert_eq!(h.room_of(0).counters().drops[DropReason::NotPublisher], 1);
    assert!(h.members[0].client.received.is_empty());
}

#[test]
fn a_listener_of_one_member_receives_that_member_alone_and_sends_nothing() {
    // Member 2 listens to member 0 alone (an ng subscription), before anyone sent: the
    // feeds made for the first packets of each publisher respect it.
    let mut h = room_of(&[JoinKind::Join; 3], &[111, 111, 111]);
    let (listener, publisher) = (h.members[2].id.clone(), h.members[0].id.clone());
    assert!(h.shard.listen_to("r", &listener, &publisher));
    assert!(!h.shard.listen_to("r", &listener, "nobody"));
    for round in 0..3u8 {
        let (_, p) = h.srtp(0, &[0xa0 + round; 40]);
        h.send(0, &p);
        assert_eq!(h.pump(), 2, "member 0 to members 1 and 2");
        let (_, p) = h.srtp(1, &[0xb0 + round; 40]);
        h.send(1, &p);
        assert_eq!(h.pump(), 1, "member 1 to member 0 only");
        let (_, p) = h.srtp(2, &[0xc0 + round; 40]);
        h.send(2, &p);
        assert_eq!(h.pump(), 0, "the listener's own media goes nowhere");
        h.now += Duration::from_millis(20);
    }
    let firsts = |h: &Harness, m: usize| -> Vec<u8> {
        let got = &h.members[m].client.received;
        got.iter().map(|p| rtp_facts(p).3[0]).collect()
    };
    assert_eq!(firsts(&h, 2), vec![0xa0, 0xa1, 0xa2]);
    assert_eq!(firsts(&h, 0), vec![0xb0, 0xb1, 0xb2]);
    assert_eq!(firsts(&h, 1), vec![0xa0, 0xa1, 0xa2]);
    let id = h.member_id(2);
    assert_eq!(h.room_of(2).hears_only(id), Some(h.member_id(0)));
    assert_eq!(h.room_of(0).counters().drops[DropReason::NotPublisher], 3);
}

#[test]
fn a_receiver_without_the_codec_gets_nothing() {
    let mut h = room_of(&[JoinKind::Join; 2], &[111, 111]);
    // PCMU (PT 0) is negotiated by both; red (PT 63) was offered but not accepted, so it has
    // no codec and cannot be mapped.
    let mut pkt = h.client(0).rtp(b"red");
    pkt[1] = 63;
    let mut buf = pkt.clone();
    buf.resize(pkt.len() + 32, 0);
    let n = h
        .client(0)
        .tx
        .as_mut()
        .unwrap()
        .protect_rtp(&mut buf, pkt.len())
        .unwrap();
    h.send(0, &buf[..n]);
    assert_eq!(h.pump(), 0);
    assert_eq!(h.room_of(0).counters().drops[DropReason::NoCodec], 1);
}

/// A client offer with `extra` more receive-only audio sections (receive slots), bundled.
fn offer_with_slots(c: &SimClient, extra: usize) -> String {
    let mut s = c.offer();
    let mids: Vec<String> = (2..2 + extra).map(|m| m.to_string()).collect();
    s = s.replace(
        "a=group:BUNDLE 0 1",
        &format!("a=group:BUNDLE 0 1 {}", mids.join(" ")),
    );
    let ice = format!("a=ice-ufrag:{}\r\na=ice-pwd:{}\r\n", c.ufrag, c.pwd);
    let fp = format!("a=fingerprint:{}\r\n", c.cert.fingerprint());
    for mid in &mids {
        s.push_str(&format!(
            "m=audio 9 UDP/TLS/RTP/SAVPF 111 0\r\nc=IN IP4 0.0.0.0\r\n{ice}{fp}a=setup:actpass\r\n\
             a=mid:{mid}\r\na=recvonly\r\na=rtcp-mux\r\na=rtpmap:111 opus/48000/2\r\na=rtpmap:0 PCMU/8000\r\n"
        ));
    }
    s
}

/// The SSRCs an answer announces, in section order.
fn announced(answer: &str) -> Vec<u32> {
    answer
        .lines()
        .filter_map(|l| l.strip_prefix("a=ssrc:"))
        .filter_map(|l| l.split(' ').next()?.parse().ok())
        .collect()
}

#[test]
fn each_sender_gets_a_receive_slot_of_its_own_and_a_freed_slot_continues_its_numbering() {
    let mut h = Harness::simd();
    // Member 0 listens with two audio sections (its sendrecv one and one recvonly); 1, 2 and 3
    // talk.
    for i in 0..4u8 {
        let c = SimClient::new(i + 1);
        let offer = if i == 0 {
            offer_with_slots(&c, 1)
        } else {
            c.offer()
        };
        let kind = if i == 0 {
            JoinKind::Whep
        } else {
            JoinKind::Whip
        };
        let m = h.join("r", c, kind, Some(&offer)).unwrap();
        assert!(h.connect(m), "member {m} connects");
    }
    let slots = announced(&h.members[0].answer_sdp);
    assert_eq!(slots.len(), 2, "one a=ssrc per receiving audio section");
    assert_ne!(slots[0], slots[1]);

    let send = |h: &mut Harness, s: usize| {
        let (_, p) = h.srtp(s, &[s as u8; 40]);
        h.send(s, &p);
        h.pump();
    };
    // 1 and 2 take the two slots, in order of arrival; 3 finds none and is forwarded outside.
    for _ in 0..3 {
        for s in 1..4 {
            send(&mut h, s);
            h.now += Duration::from_millis(20);
        }
    }
    let (m0, m1, m2, m3) = (
        h.member_id(0),
        h.member_id(1),
        h.member_id(2),
        h.member_id(3),
    );
    assert_eq!(h.room_of(0).slot_mid(m0, m1, 1001), Some("0"));
    assert_eq!(h.room_of(0).slot_mid(m0, m2, 1001), Some("2"));
    assert_eq!(h.room_of(0).slot_mid(m0, m3, 1001), None);
    assert_eq!(h.room_of(0).counters().unslotted, 3);
    let got: Vec<(u32, u16, u8)> = h.members[0]
        .client
        .received
        .iter()
        .map(|p| {
            let (ssrc, _, seq, payload) = rtp_facts(p);
            (ssrc, seq, payload[0])
        })
        .collect();
    assert_eq!(got.len(), 9);
    for (ssrc, _, from) in &got {
        match from {
            1 => assert_eq!(*ssrc, slots[0]),
            2 => assert_eq!(*ssrc, slots[1]),
            _ => assert!(
                !slots.contains(ssrc),
                "an unslotted stream is not announced"
            ),
        }
    }
    // The first stream on a slot keeps its numbering (SimClient starts at SEQ 1).
    let last_on_slot0 = got.iter().filter(|g| g.2 == 1).map(|g| g.1).max().unwrap();
    assert_eq!(last_on_slot0, 3);

    // 1 leaves: its slot is free, and 3 takes it on its next packet, continuing the slot's
    // sequence numbers and timestamps (one 20 ms Opus frame on).
    let (room, id) = (h.members[1].room.clone(), h.members[1].id.clone());
    let now = h.now;
    assert!(h.shard.leave(now, &room, &id));
    h.pump();
    h.members[0].client.received.clear();
    send(&mut h, 3);
    assert_eq!(h.room_of(0).slot_mid(m0, m3, 1001), Some("0"));
    let p = h.members[0].client.received[0].clone();
    let (ssrc, _, seq, payload) = rtp_facts(&p);
    assert_eq!((ssrc, seq, payload[0]), (slots[0], last_on_slot0 + 1, 3));
    let ts = u32::from_be_bytes([p[4], p[5], p[6], p[7]]);
    assert_eq!(ts, u32::from(last_on_slot0) * 960 + 960);
}
