//! A shard driven with a scripted sequence of datagrams and timer ticks, no socket: what comes
//! out (transmits of each kind, to whom, events, counters) is exactly what the script implies.

use std::time::Duration;

use secrelay_gateway::counters::{DropReason, EndReason};
use secrelay_gateway::leg::TransmitKind;
use secrelay_gateway::shard::{Datagram, Event, Handled, JoinKind, Lifecycle, Output, Shard};
use secrelay_testkit::gateway::Harness;
use secrelay_testkit::memory::SimClient;
use secrelay_wire::sdp::parse_offer;

/// Everything the shard puts out until its next deadline: (transmits as (destination, kind,
/// media receive instant set), events).
type Drained = (Vec<(std::net::SocketAddr, TransmitKind, bool)>, Vec<Event>);

fn drain(shard: &mut Shard) -> Drained {
    let (mut tx, mut ev) = (Vec::new(), Vec::new());
    while let Some(o) = shard.poll_output() {
        match o {
            Output::Transmit(t) => tx.push((t.destination, t.kind, t.received.is_some())),
            Output::Event(e) => ev.push(e),
            Output::Pipe(_) => panic!("one shard has no pipes"),
            Output::Timeout(_) => break,
        }
    }
    (tx, ev)
}

#[test]
fn a_scripted_call_from_first_check_to_consent_expiry() {
    let mut h = Harness::simd();
    let a_client = SimClient::new(1);
    let a_addr = a_client.addr;
    let a_ufrag_offer = parse_offer(&a_client.offer()).unwrap();
    let joined = h
        .shard
        .join(
            h.now,
            "call",
            &a_ufrag_offer,
            JoinKind::Join,
            &Default::default(),
        )
        .unwrap();
    // The join makes one route, the member's ICE ufrag, and says the room started and the
    // member joined.
    let (tx, ev) = drain(&mut h.shard);
    assert!(tx.is_empty());
    assert_eq!(
        ev,
        vec![
            Event::Lifecycle(Lifecycle::RoomStarted {
                room: "call".into()
            }),
            Event::Lifecycle(Lifecycle::Joined {
                room: "call".into(),
                id: joined.id.clone(),
                name: None,
                kind: JoinKind::Join,
                leg: "webrtc",
            }),
            Event::UfragOwned(joined.ice.ufrag.clone()),
        ]
    );
    assert_eq!(h.shard.route_sizes(), (1, 0));

    // A stranger's datagram is not the shard's.
    let stranger: std::net::SocketAddr = "203.0.113.5:5000".parse().unwrap();
    let now = h.now;
    assert_eq!(
        h.shard
            .handle(now, Datagram::classify(stranger, &[0x80; 40], now)),
        Handled::NotOurs
    );

    // The browser's first check (USE-CANDIDATE): one STUN answer to it, its address owned.
    let mut a = a_client;
    let answer = parse_offer(&joined.answer).unwrap();
    let check = a.binding_request(&answer, true);
    let now = h.now;
    assert_eq!(
        h.shard.handle(now, Datagram::classify(a_addr, &check, now)),
        Handled::Taken
    );
    let (tx, ev) = drain(&mut h.shard);
    assert_eq!(tx, vec![(a_addr, TransmitKind::Stun, false)]);
    assert_eq!(ev, vec![Event::AddressOwned(a_addr)]);
    assert_eq!(h.shard.route_sizes(), (1, 1));

    // Hand the rest of the connection to the harness (DTLS, 5 ms per exchange), with a second
    // member in the room.
    h.members.push(secrelay_testkit::gateway::Member {
        client: a,
        room: "call".into(),
        id: joined.id.clone(),
        answer: answer.clone(),
        answer_sdp: joined.answer.clone(),
    });
    assert!(h.connect(0));
    let b = h.join_connected("call", 2, JoinKind::Join);
    assert!(h
        .events
        .iter()
        .any(|e| matches!(e, Event::Connected { handshake } if *handshake > Duration::ZERO)));
    let c = h.counters();
    assert_eq!((c.members, c.connected, c.rooms), (2, 2, 1));
    assert_eq!(c.handshakes_ok, 2);

    // One media packet from a: one media transmit, to b, tagged with when it was read.
    let (_, p) = h.srtp(0, &[1; 100]);
    let now = h.now;
    h.shard.handle(now, Datagram::classify(a_addr, &p, now));
    let (tx, ev) = drain(&mut h.shard);
    let b_addr = h.members[b].client.addr;
    assert_eq!(tx, vec![(b_addr, TransmitKind::Media, true)]);
    assert!(ev.is_empty());
    // The same packet again: a replay, dropped at a, nothing out.
    h.shard.handle(now, Datagram::classify(a_addr, &p, now));
    let (tx, _) = drain(&mut h.shard);
    assert!(tx.is_empty());
    let c = h.counters();
    assert_eq!(c.media.routed, 1);
    assert_eq!(c.media.forwarded, 1);
    assert_eq!(c.media.packets_in, 1);
    assert_eq!(c.media.packets_out, 1);
    assert_eq!(c.media.drops[DropReason::Replayed], 1);
    assert_eq!(c.srtp_batches, 2);

    // Timer ticks: nobody checks any more. Before 30 s nothing ends; after, both members lose
    // consent, leave with their routes, and the room goes.
    let start = h.now;
    while let Some(t) = h.shard.poll_timeout() {
        if t > start + Duration::from_secs(29) {
            break;
        }
        h.advance_to(t);
    }
    assert_eq!(h.counters().members, 2);
    while let Some(t) = h.shard.poll_timeout() {
        if t > start + Duration::from_secs(40) {
            break;
        }
        h.advance_to(t);
    }
    let left: Vec<&Event> = h
        .events
        .iter()
        .filter(|e| matches!(e, Event::MemberLeft { .. }))
        .collect();
    assert_eq!(left.len(), 2);
    assert!(left.iter().all(|e| matches!(
        e,
        Event::MemberLeft {
            reason: EndReason::ConsentExpired,
            ..
        }
    )));
    // And the lifecycle in order: each connected and, sending, published; each stopped and
    // left; then the room finished.
    let life: Vec<&Lifecycle> = h
        .events
        .iter()
        .filter_map(|e| match e {
            Event::Lifecycle(l) => Some(l),
            _ => None,
        })
        .collect();
    let kinds: Vec<&str> = life
        .iter()
        .map(|l| match l {
            Lifecycle::RoomStarted { .. } => "started",
            Lifecycle::RoomFinished { .. } => "finished",
            Lifecycle::Joined { .. } => "joined",
            Lifecycle::Connected { .. } => "connected",
            Lifecycle::Publishing { started: true, .. } => "publishing",
            Lifecycle::Publishing { started: false, .. } => "stopped",
            Lifecycle::Left { .. } => "left",
        })
        .collect();
    assert_eq!(
        kinds
            .iter()
            .filter(|k| **k != "started" && **k != "joined")
            .copied()
            .collect::<Vec<_>>(),
        [
            "connected",
            "publishing",
            "connected",
            "publishing",
            "stopped",
            "left",
            "stopped",
            "left",
            "finished"
        ],
        "{life:?}"
    );
    let c = h.counters();
    assert_eq!((c.members, c.connected, c.rooms), (0, 0, 0));
    assert_eq!(c.ended[EndReason::ConsentExpired], 2);
    // Counters of members that left stay in the sums.
    assert_eq!(c.media.routed, 1);
    assert_eq!(c.media.drops[DropReason::Replayed], 1);
    assert_eq!(h.shard.route_sizes(), (0, 0));
    assert_eq!(h.shard.poll_timeout(), None, "no timers left");
}

#[test]
fn a_draining_shard_closes_everybody_and_refuses_joins() {
    let mut h = Harness::simd();
    h.join_connected("r", 1, JoinKind::Join);
    h.join_connected("r", 2, JoinKind::Join);
    let now = h.now;
    h.shard.drain(now);
    let (tx, ev) = drain(&mut h.shard);
    // One close_notify each.
    assert_eq!(tx.iter().filter(|t| t.1 == TransmitKind::Dtls).count(), 2);
    assert_eq!(
        ev.iter()
            .filter(|e| matches!(
                e,
                Event::MemberLeft {
                    reason: EndReason::Shutdown,
                    ..
                }
            ))
            .count(),
        2
    );
    let offer = parse_offer(&SimClient::new(3).offer()).unwrap();
    assert!(h
        .shard
        .join(now, "r", &offer, JoinKind::Join, &Default::default())
        .is_err());
    assert_eq!(h.counters().ended[EndReason::Shutdown], 2);
}

/// Binding indications are keepalives (RFC 8489 §6.3, RFC 8445 §11: libnice, hence GStreamer's
/// webrtcbin, sends them on the selected pair): taken from a member's address, counted as STUN
/// in, never answered and never counted as rejected requests. A Binding request whose integrity
/// fails is, as the contrast.
#[test]
fn a_binding_indication_is_a_keepalive_not_a_rejected_request() {
    use secrelay_wire::stun::{Class, MessageBuilder, BINDING};
    let mut h = Harness::simd();
    let i = h.join_connected("keepalive", 1, JoinKind::Join);
    let (room, id) = (h.members[i].room.clone(), h.members[i].id.clone());
    let stun_in = |h: &Harness| h.shard.member_counters(&room, &id).unwrap().stun_in;
    let before = stun_in(&h);
    let rejected_before = h.counters().media.drops[DropReason::StunRejected];
    let _ = drain(&mut h.shard);

    for (n, with_fingerprint) in [(1u8, true), (2, false)] {
        let mut buf = [0u8; 64];
        let b = MessageBuilder::new(&mut buf, Class::Indication, BINDING, [n; 12]);
        let len = if with_fingerprint {
            b.fingerprint()
        } else {
            b.finish()
        }
        .unwrap();
        assert_eq!(h.send(i, &buf[..len]), Handled::Taken);
        let (tx, ev) = drain(&mut h.shard);
        assert!(tx.is_empty(), "an indication is never answered: {tx:?}");
        assert!(ev.is_empty(), "{ev:?}");
    }
    assert_eq!(stun_in(&h), before + 2);
    assert_eq!(
        h.counters().media.drops[DropReason::StunRejected],
        rejected_before
    );
    assert_eq!(h.counters().connected, 1, "the member is still there");

    // A request whose MESSAGE-INTEGRITY does not verify (the wrong password) is rejected, and
    // counted so.
    use secrelay_wire::stun::attr;
    let username = format!(
        "{}:{}",
        h.members[i].answer.ice_ufrag, h.members[i].client.ufrag
    );
    let mut buf = [0u8; 256];
    let len = MessageBuilder::new(&mut buf, Class::Request, BINDING, [9; 12])
        .attribute(attr::USERNAME, username.as_bytes())
        .attribute(attr::PRIORITY, &1_845_501_695u32.to_be_bytes())
        .attribute(attr::ICE_CONTROLLING, &7u64.to_be_bytes())
        .integrity(b"not the gateway's password at all")
        .fingerprint()
        .unwrap();
    assert_eq!(h.send(i, &buf[..len]), Handled::Taken);
    let (tx, _) = drain(&mut h.shard);
    assert_eq!(tx.len(), 1, "a 401 answers it");
    assert_eq!(
        h.counters().media.drops[DropReason::StunRejected],
        rejected_before + 1
    );
}

/// The census the workers publish after every join and leave counts what the full counters
/// count (participants, rooms, members by kind, sessions ended, handshakes), without their
/// walk over every member.
#[test]
fn the_census_after_a_join_or_leave_matches_the_counters() {
    let mut h = Harness::simd();
    let check = |h: &Harness, members: u64, rooms: u64| {
        let c = h.shard.counters();
        assert_eq!((c.members, c.rooms), (members, rooms));
        let census = h.shard.census();
        assert_eq!((census.members, census.rooms), (members, rooms));
        let by_leg: Vec<u64> = c.by_leg.iter().map(|l| l.members).collect();
        assert_eq!(census.by_leg.to_vec(), by_leg);
        assert_eq!(census.ended, c.ended);
        assert_eq!(census.handshakes, (c.handshakes_ok, c.handshakes_failed));
    };
    check(&h, 0, 0);
    let a = h.join_connected("r", 1, JoinKind::Join);
    h.join_connected("r", 2, JoinKind::Join);
    h.join_connected("s", 3, JoinKind::Join);
    check(&h, 3, 2);
    let now = h.now;
    let id = h.members[a].id.clone();
    assert!(h.shard.leave(now, "r", &id));
    drain(&mut h.shard);
    check(&h, 2, 2);
}

#[test]
fn a_batch_flushed_a_part_at_a_time_delivers_every_copy_in_order() {
    let mut h = Harness::simd();
    let publisher = h.join_connected("b", 1, JoinKind::Whip);
    let viewers: Vec<usize> = (0..6)
        .map(|n| {
            let c = SimClient::numbered(1000 + n);
            let offer = c.offer().replace("a=sendrecv", "a=recvonly");
            let v = h.join("b", c, JoinKind::Whep, Some(&offer)).unwrap();
            assert!(h.connect(v), "viewer {n} connects");
            v
        })
        .collect();
    // One packet handled and flushed whole.
    let p = h.srtp(publisher, &[7; 100]).1;
    h.send(publisher, &p);
    assert_eq!(h.pump(), 6, "a copy for each viewer");
    // Five more in one batch, flushed fourteen copies at a time: two packets a part (seven
    // members, a copy counted for each).
    let from = h.members[publisher].client.addr;
    let now = h.now;
    for _ in 0..5 {
        let p = h.srtp(publisher, &[7; 100]).1;
        h.shard.handle(now, Datagram::classify(from, &p, now));
    }
    assert!(h.shard.flush_part(14), "three packets left");
    assert_eq!(h.pump(), 12, "the first two packets' copies");
    assert!(h.shard.flush_part(14), "one packet left");
    assert_eq!(h.pump(), 12);
    assert!(!h.shard.flush_part(14), "nothing left");
    assert_eq!(h.pump(), 6);
    for v in viewers {
        let seqs: Vec<u16> = h.members[v]
            .client
            .received
            .iter()
            .map(|rtp| u16::from_be_bytes([rtp[2], rtp[3]]))
            .collect();
        assert_eq!(seqs.len(), 6, "every packet reached viewer {v}");
        assert!(
            seqs.windows(2).all(|w| w[1] == w[0].wrapping_add(1)),
            "in order: {seqs:?}"
        );
    }
}
