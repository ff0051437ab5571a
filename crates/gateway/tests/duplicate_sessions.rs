//! Retried, duplicated and late handshakes never make two routes to one receiver: a handshake
//! whose datagrams come twice, or late, is counted once; a second session from the same
//! source address (a client that retried its join with the same offer, from the same socket)
//! takes the address over once its check authenticates, and the first session stops sending
//! there; a late check of the old session takes it back the same way, never both at once; and
//! across shards (workers) the shard that lost an address gives it up. Driven through shards
//! in memory, on simulated time; every copy the client is sent must open with the keys of the
//! session it is in (the simulated browser panics otherwise).

use std::net::SocketAddr;
use std::time::Duration;

use secrelay_gateway::counters::DropReason;
use secrelay_gateway::leg::TransmitKind;
use secrelay_gateway::shard::{Event, JoinKind, Output, Shard};
use secrelay_testkit::gateway::{Harness, Member};
use secrelay_testkit::memory::SimClient;
use secrelay_wire::sdp::parse_offer;

/// Media copies the shard puts out now for `to`, not delivered.
fn copies_to(shard: &mut Shard, to: SocketAddr) -> usize {
    let mut n = 0;
    while let Some(o) = shard.poll_output() {
        match o {
            Output::Transmit(t) if t.destination == to && t.kind == TransmitKind::Media => n += 1,
            Output::Pipe(_) => panic!("one shard has no pipes"),
            Output::Timeout(_) => break,
            _ => {}
        }
    }
    n
}

/// Member `p` sends one packet; what `to` is sent of it, not delivered.
fn one_packet(h: &mut Harness, p: usize, to: SocketAddr) -> usize {
    let (_, pkt) = h.srtp(p, &[3; 100]);
    h.send(p, &pkt);
    copies_to(&mut h.shard, to)
}

/// Member `p` sends one packet, delivered: how many copies member `c`'s client opened.
fn heard(h: &mut Harness, p: usize, c: usize) -> usize {
    let before = h.members[c].client.received.len();
    let (_, pkt) = h.srtp(p, &[4; 100]);
    h.send(p, &pkt);
    h.pump();
    h.members[c].client.received.len() - before
}

/// Every datagram of the handshake twice, and later all of them once more: one handshake,
/// one Connected event, one route; the late copies are counted.
#[test]
fn a_handshake_whose_datagrams_come_twice_or_late_is_counted_once() {
    let mut h = Harness::simd();
    let i = h
        .join("r", SimClient::new(1), JoinKind::Join, None)
        .unwrap();
    let answer = h.members[i].answer.clone();
    let check = h.members[i].client.binding_request(&answer, true);
    for _ in 0..3 {
        h.send(i, &check);
    }
    let now = h.now;
    h.members[i].client.start_dtls(&answer, now);
    let mut sent = Vec::new();
    for _ in 0..20 {
        let moved = h.pump();
        let out = h.members[i].client.drain_dtls();
        for d in &out {
            h.send(i, d);
            h.send(i, d);
        }
        sent.extend(out);
        if moved == 0 && sent.len() > 2 && h.members[i].client.keys.is_some() {
            break;
        }
        h.now += Duration::from_millis(5);
    }
    h.pump();
    assert!(h.members[i].client.keys.is_some(), "the client connected");
    let c = h.counters();
    assert_eq!((c.handshakes_ok, c.connected), (1, 1));
    let owned = |h: &Harness| {
        h.events
            .iter()
            .filter(|e| matches!(e, Event::AddressOwned(_)))
            .count()
    };
    assert_eq!(owned(&h), 1, "three copies of a check: one route");
    // The whole handshake again, late.
    h.now += Duration::from_secs(2);
    for d in &sent {
        h.send(i, d);
        h.pump();
    }
    let c = h.counters();
    assert_eq!((c.handshakes_ok, c.connected), (1, 1));
    assert_eq!(
        h.events
            .iter()
            .filter(|e| matches!(e, Event::Connected { .. }))
            .count(),
        1
    );
    assert_eq!(owned(&h), 1);
    let m = h.member_counters(i).unwrap();
    assert!(
        m.drops[DropReason::ClientHelloAfterHandshake] >= 1,
        "{:?}",
        m.drops
    );
    assert_eq!(h.shard.route_sizes(), (1, 1));
}

/// A client joins twice with the same offer from the same socket (its first answer was late,
/// so it asked again) and goes on with the second session: the address moves to the second
/// once its check authenticates, the first stops sending there. A late check of the first
/// takes the address back, the second stops; never both. Every packet a publisher sends
/// reaches the client's address once.
#[test]
fn two_sessions_from_one_address_never_both_send_to_it() {
    let mut h = Harness::simd();
    let p = h.join_connected("r", 2, JoinKind::Whip);
    let client = SimClient::new(1);
    let addr = client.addr;
    let offer = parse_offer(&client.offer()).unwrap();
    let i = h.join("r", client, JoinKind::Whep, None).unwrap();
    assert!(h.connect(i));
    let first = (h.members[i].id.clone(), h.members[i].answer.clone());
    let stale_check = h.members[i].client.binding_request(&first.1, false);
    assert_eq!(heard(&mut h, p, i), 1);

    // The same offer again: a second session, which the client goes on with.
    let joined = h
        .shard
        .join(h.now, "r", &offer, JoinKind::Whep, &Default::default())
        .unwrap();
    let second = parse_offer(&joined.answer).unwrap();
    h.members[i].id = joined.id.clone();
    h.members[i].answer = second.clone();
    h.members[i].answer_sdp = joined.answer;
    h.members[i].client.keys = None;
    assert!(
        h.connect(i),
        "the second session connects from the same address"
    );
    assert_eq!(h.counters().handshakes_ok, 3);
    let first_counters = |h: &Harness| h.shard.member_counters("r", &first.0).unwrap();
    let not_ready = first_counters(&h).drops[DropReason::ReceiverNotReady];
    for _ in 0..5 {
        // Opened with the second session's keys: the first sends nothing.
        assert_eq!(heard(&mut h, p, i), 1);
    }
    assert_eq!(
        first_counters(&h).drops[DropReason::ReceiverNotReady] - not_ready,
        5,
        "the first session's copies have nowhere to go"
    );

    // A late check of the first session: it takes the address back; the second stops.
    assert_eq!(
        h.send(i, &stale_check),
        secrelay_gateway::shard::Handled::Taken
    );
    h.pump();
    for _ in 0..5 {
        assert_eq!(
            one_packet(&mut h, p, addr),
            1,
            "one copy, the first session's"
        );
    }
    // The client's next check (the second session's) takes it back again.
    let check = h.members[i].client.binding_request(&second, false);
    h.send(i, &check);
    h.pump();
    for _ in 0..5 {
        assert_eq!(heard(&mut h, p, i), 1);
    }
    assert_eq!(h.counters().connected, 3);
    assert_eq!(
        h.shard.route_sizes().1,
        2,
        "two addresses: the publisher's, the client's"
    );
}

/// The same across two shards (two workers; rooms are hashed to them): each validates the
/// client's address for its own session; the one that validated first gives it up when told
/// (the worker does that on the directory's word), and sends nothing there any more.
#[test]
fn across_shards_the_shard_that_lost_an_address_gives_it_up() {
    let mut one = Harness::simd();
    let mut two = Harness::simd();
    let p1 = one.join_connected("r1", 2, JoinKind::Whip);
    let p2 = two.join_connected("r2", 3, JoinKind::Whip);
    let client = SimClient::new(1);
    let addr = client.addr;
    let offer = client.offer();
    let i = one
        .join("r1", client, JoinKind::Whep, Some(&offer))
        .unwrap();
    assert!(one.connect(i));
    assert_eq!(one_packet(&mut one, p1, addr), 1);
    // The client's socket, now in a session of the other shard.
    let client = std::mem::replace(&mut one.members[i].client, SimClient::new(9));
    let parsed = parse_offer(&offer).unwrap();
    let joined = two
        .shard
        .join(two.now, "r2", &parsed, JoinKind::Whep, &Default::default())
        .unwrap();
    two.members.push(Member {
        client,
        room: "r2".into(),
        id: joined.id,
        answer: parse_offer(&joined.answer).unwrap(),
        answer_sdp: joined.answer,
    });
    let j = two.members.len() - 1;
    two.members[j].client.keys = None;
    assert!(two.connect(j));
    assert!(two.events.contains(&Event::AddressOwned(addr)));
    // Until told, both shards would send to the address; told, the first stops.
    assert!(one.shard.yield_address(addr));
    assert!(!one.shard.yield_address(addr), "once");
    for _ in 0..5 {
        assert_eq!(one_packet(&mut one, p1, addr), 0);
        assert_eq!(heard(&mut two, p2, j), 1);
    }
    assert_eq!(one.shard.route_sizes().1, 1, "the publisher's address only");
}
