//! In a room, each member's SRTP is unprotected with its own keys and protected again for each
//! receiver with that receiver's keys; every receiver sees the others' streams under SSRCs of
//! its own (unique, stable) and with its own payload type for the codec.

mod sim_client;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use secrelay_gateway::participant::CodecId;
use secrelay_gateway::room::{MemberId, MemberRole, Room, RoomOutput};
use sim_client::{connect, participant_for, rtp_facts, SimClient};

/// Drains the room, delivering each transmit to the client at its destination.
fn pump(room: &mut Room, clients: &mut [SimClient], now: Instant) -> usize {
    let mut n = 0;
    while let Some(o) = room.poll_output() {
        match o {
            RoomOutput::Member(
                _,
                secrelay_gateway::participant::Output::Transmit {
                    destination,
                    contents,
                },
            ) => {
                let c = clients
                    .iter_mut()
                    .find(|c| c.addr == destination)
                    .expect("a transmit goes to a member's address");
                c.receive(now, contents);
                n += 1;
            }
            RoomOutput::Member(id, other) => panic!("{id:?}: unexpected {other:?}"),
            RoomOutput::Timeout(_) => break,
        }
    }
    n
}

fn room_of(
    roles: &[MemberRole],
    opus_pts: &[u8],
) -> (Room, Vec<SimClient>, Vec<MemberId>, Instant) {
    let mut now = Instant::now();
    let mut room = Room::new();
    let mut clients = Vec::new();
    let mut ids = Vec::new();
    for (i, (role, pt)) in roles.iter().zip(opus_pts).enumerate() {
        let mut c = SimClient::new(i as u8 + 1);
        c.pt = *pt;
        let mut p = participant_for(&c.offer(), now);
        let conn = connect(&mut c, &mut p, now);
        assert!(conn.connected().is_some(), "{:?}", conn.events);
        assert_eq!(p.payload_type_for(CodecId::Opus), Some(*pt));
        now = conn.now;
        ids.push(room.add(p, *role));
        clients.push(c);
    }
    (room, clients, ids, now)
}

#[test]
fn three_members_each_receive_the_other_two_reprotected_with_their_own_keys() {
    // Every browser announces SSRC 1001 (as Chrome's offer does); the opus payload types
    // differ per member.
    let pts = [111u8, 109, 120];
    let (mut room, mut clients, ids, mut now) = room_of(&[MemberRole::BOTH; 3], &pts);

    for round in 0..3u8 {
        for s in 0..3 {
            let payload = [round * 10 + s as u8; 60];
            let (_, protected) = clients[s].srtp(&payload);
            let from = clients[s].addr;
            assert!(room.handle_datagram(now, ids[s], from, &protected));
            let sent = pump(&mut room, &mut clients, now);
            assert_eq!(sent, 2, "one copy for each other member");
            now += Duration::from_millis(20);
        }
    }

    for (r, client) in clients.iter().enumerate() {
        // Three rounds from each of the two others, all opened with this member's own keys
        // (SimClient::receive unprotects with its inbound context and panics otherwise).
        assert_eq!(client.received.len(), 6, "member {r}");
        let mut ssrcs = HashSet::new();
        for (k, pkt) in client.received.iter().enumerate() {
            let (ssrc, pt, _seq, payload) = rtp_facts(pkt);
            assert_eq!(pt, pts[r], "member {r} gets its own opus payload type");
            let round = (k / 2) as u8;
            let s = [0, 1, 2]
                .into_iter()
                .filter(|s| *s != r)
                .nth(k % 2)
                .unwrap();
            assert_eq!(payload, vec![round * 10 + s as u8; 60]);
            assert_eq!(
                Some(ssrc),
                room.mapped_ssrc(ids[r], ids[s], 1001),
                "stable SSRC per (receiver, source stream)"
            );
            ssrcs.insert(ssrc);
        }
        assert_eq!(ssrcs.len(), 2, "the two sources are told apart");
        assert!(!ssrcs.contains(&0));
    }
    assert_eq!(room.counters().routed_in, 9);
    assert_eq!(room.counters().forwarded, 18);
    for id in &ids {
        let c = room.participant(*id).unwrap().counters();
        assert_eq!(c.packets_in, 3);
        assert_eq!(c.packets_out, 6);
        assert_eq!(c.auth_failures + c.replays, 0);
    }
}

#[test]
fn sequence_numbers_pass_and_a_subscriber_only_member_is_not_forwarded() {
    let roles = [
        MemberRole::PUBLISHER,
        MemberRole::SUBSCRIBER,
        MemberRole::SUBSCRIBER,
    ];
    let (mut room, mut clients, ids, now) = room_of(&roles, &[111, 111, 111]);
    clients[0].seq = 4000;
    for _ in 0..2 {
        let (_, p) = clients[0].srtp(b"pub");
        room.handle_datagram(now, ids[0], clients[0].addr, &p);
        assert_eq!(pump(&mut room, &mut clients, now), 2);
    }
    for client in &clients[1..] {
        let seqs: Vec<u16> = client.received.iter().map(|p| rtp_facts(p).2).collect();
        assert_eq!(seqs, vec![4000, 4001]);
    }
    // A subscriber's own media goes nowhere.
    let (_, p) = clients[1].srtp(b"sub");
    room.handle_datagram(now, ids[1], clients[1].addr, &p);
    assert_eq!(pump(&mut room, &mut clients, now), 0);
    assert_eq!(room.counters().dropped_not_publisher, 1);
    assert!(clients[0].received.is_empty());
}

#[test]
fn a_receiver_without_the_codec_gets_nothing() {
    let (mut room, mut clients, ids, now) = room_of(&[MemberRole::BOTH; 2], &[111, 111]);
    // PCMU (PT 0) is negotiated by both; G722 (PT 9) was offered but not accepted, so it has
    // no codec and cannot be mapped.
    let mut pkt = clients[0].rtp(b"g722");
    pkt[1] = 9;
    let mut buf = pkt.clone();
    buf.resize(pkt.len() + 32, 0);
    let n = clients[0]
        .tx
        .as_mut()
        .unwrap()
        .protect_rtp(&mut buf, pkt.len())
        .unwrap();
    room.handle_datagram(now, ids[0], clients[0].addr, &buf[..n]);
    assert_eq!(pump(&mut room, &mut clients, now), 0);
    assert_eq!(room.counters().dropped_no_codec, 1);
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
    let mut now = Instant::now();
    let mut room = Room::new();
    let mut clients = Vec::new();
    let mut ids = Vec::new();
    // Member 0 listens with two audio sections (its sendrecv one and one recvonly); 1, 2 and 3
    // talk.
    for i in 0..4u8 {
        let mut c = SimClient::new(i + 1);
        let offer = if i == 0 {
            offer_with_slots(&c, 1)
        } else {
            c.offer()
        };
        let mut p = participant_for(&offer, now);
        let conn = connect(&mut c, &mut p, now);
        assert!(conn.connected().is_some(), "{:?}", conn.events);
        now = conn.now;
        let role = if i == 0 {
            MemberRole::SUBSCRIBER
        } else {
            MemberRole::PUBLISHER
        };
        ids.push(room.add(p, role));
        clients.push(c);
    }
    let slots = announced(room.participant(ids[0]).unwrap().answer_sdp());
    assert_eq!(slots.len(), 2, "one a=ssrc per receiving audio section");
    assert_ne!(slots[0], slots[1]);

    let send = |room: &mut Room, clients: &mut Vec<SimClient>, s: usize, now: Instant| {
        let (_, p) = clients[s].srtp(&[s as u8; 40]);
        let from = clients[s].addr;
        assert!(room.handle_datagram(now, ids[s], from, &p));
        pump(room, clients, now);
    };
    // 1 and 2 take the two slots, in order of arrival; 3 finds none and is forwarded outside.
    for _ in 0..3 {
        for s in 1..4 {
            send(&mut room, &mut clients, s, now);
            now += Duration::from_millis(20);
        }
    }
    assert_eq!(room.slot_mid(ids[0], ids[1], 1001), Some("0"));
    assert_eq!(room.slot_mid(ids[0], ids[2], 1001), Some("2"));
    assert_eq!(room.slot_mid(ids[0], ids[3], 1001), None);
    assert_eq!(room.counters().unslotted, 3);
    let got: Vec<(u32, u16, u8)> = clients[0]
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
    room.remove(ids[1]);
    clients[0].received.clear();
    send(&mut room, &mut clients, 3, now);
    assert_eq!(room.slot_mid(ids[0], ids[3], 1001), Some("0"));
    let p = &clients[0].received[0];
    let (ssrc, _, seq, payload) = rtp_facts(p);
    assert_eq!((ssrc, seq, payload[0]), (slots[0], last_on_slot0 + 1, 3));
    let ts = u32::from_be_bytes([p[4], p[5], p[6], p[7]]);
    assert_eq!(ts, u32::from(last_on_slot0) * 960 + 960);
}
