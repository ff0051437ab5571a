//! A participant ends for the right reason: a silent browser loses consent, a certificate that
//! does not match the offer's fingerprint is refused, and close_notify ends the association;
//! in a shard, a member that ended is removed with its routes, counted by reason.

use std::time::{Duration, Instant};

use secrelay_dtls::{Certificate, KeyType};
use secrelay_gateway::counters::{DropReason, EndReason};
use secrelay_gateway::leg::{CloseReason, LegEvent};
use secrelay_gateway::shard::{Event, JoinKind};
use secrelay_testkit::gateway::{connect_leg, drain_leg, leg_for, to_leg, Harness};
use secrelay_testkit::memory::SimClient;

#[test]
fn consent_timeout_closes_a_silent_participant() {
    let t0 = Instant::now();
    let mut client = SimClient::new(1);
    let mut p = leg_for(&client.offer(), t0);
    let c = connect_leg(&mut client, &mut p, t0);
    assert!(c.connected().is_some());
    // Consent refreshed once more, then silence.
    let refresh = c.now + Duration::from_secs(5);
    let req = client.binding_request(&c.answer, false);
    to_leg(&mut p, refresh, client.addr, &req);
    let _ = drain_leg(&mut p);
    let mut closed_at = None;
    for _ in 0..10_000 {
        let Some(t) = p.poll_timeout() else { break };
        p.handle_timeout(t);
        let (_, evs, _) = drain_leg(&mut p);
        if evs.contains(&LegEvent::Closed(CloseReason::ConsentExpired)) {
            closed_at = Some(t);
        }
    }
    let closed_at = closed_at.expect("consent expired");
    assert!(closed_at >= refresh + Duration::from_secs(30));
    assert_eq!(p.closed(), Some(CloseReason::ConsentExpired));
    assert_eq!(p.poll_timeout(), None);
    assert!(p.poll_output().is_none(), "closed and drained");
    // What arrives after the end is ignored and counted; media is refused both ways.
    let late = client.binding_request(&c.answer, false);
    to_leg(&mut p, closed_at, client.addr, &late);
    assert_eq!(p.counters().drops[DropReason::AfterClose], 1);
    assert_eq!(p.media_gate(client.addr), Err(DropReason::AfterClose));
    assert_eq!(p.media_destination(), None);
}

#[test]
fn a_participant_never_checked_expires_too() {
    let t0 = Instant::now();
    let client = SimClient::new(2);
    let mut p = leg_for(&client.offer(), t0);
    let mut reason = None;
    while let Some(t) = p.poll_timeout() {
        p.handle_timeout(t);
        for e in drain_leg(&mut p).1 {
            if let LegEvent::Closed(r) = e {
                reason = Some(r);
            }
        }
    }
    assert_eq!(reason, Some(CloseReason::ConsentExpired));
}

#[test]
fn wrong_fingerprint_in_the_offer_closes_with_fingerprint_mismatch() {
    let t0 = Instant::now();
    let mut client = SimClient::new(3);
    let other = Certificate::self_signed(KeyType::EcdsaP256, "someone-else").unwrap();
    let offer = client.offer_with(&other.fingerprint(), "actpass");
    let mut p = leg_for(&offer, t0);
    let c = connect_leg(&mut client, &mut p, t0);
    assert_eq!(
        c.closed(),
        Some(CloseReason::FingerprintMismatch),
        "{:?}",
        c.events
    );
    assert!(c.connected().is_none());
    assert_eq!(p.closed(), Some(CloseReason::FingerprintMismatch));
    assert!(!p.is_connected());
}

#[test]
fn close_notify_from_the_browser_closes_the_participant() {
    let t0 = Instant::now();
    let mut client = SimClient::new(4);
    let mut p = leg_for(&client.offer(), t0);
    let c = connect_leg(&mut client, &mut p, t0);
    assert!(c.connected().is_some());
    let now = c.now + Duration::from_secs(1);
    client.close(now);
    for d in client.drain_dtls() {
        to_leg(&mut p, now, client.addr, &d);
    }
    let (_, evs, _) = drain_leg(&mut p);
    assert_eq!(evs, vec![LegEvent::Closed(CloseReason::CloseNotify)]);
}

#[test]
fn closing_sends_close_notify_to_the_browser() {
    let t0 = Instant::now();
    let mut client = SimClient::new(5);
    let mut p = leg_for(&client.offer(), t0);
    let c = connect_leg(&mut client, &mut p, t0);
    assert!(c.connected().is_some());
    p.close(c.now);
    let (tx, evs, _) = drain_leg(&mut p);
    assert_eq!(evs, vec![LegEvent::Closed(CloseReason::CloseNotify)]);
    assert_eq!(tx.len(), 1, "one close_notify");
    client.receive(c.now, &tx[0].1);
    let _ = client.drain_dtls();
    assert_eq!(
        client.dtls.as_ref().unwrap().state(),
        secrelay_dtls::State::Finished
    );
}

#[test]
fn a_shard_removes_members_that_ended_with_their_routes_and_counts_why() {
    let mut h = Harness::simd();
    let a = h.join_connected("r", 1, JoinKind::Join);
    let b = h.join_connected("r", 2, JoinKind::Join);
    assert_eq!(h.shard.route_sizes(), (2, 2));
    // b closes: close_notify from its browser.
    let now = h.now;
    h.client(b).close(now);
    for d in h.client(b).drain_dtls() {
        h.send(b, &d);
    }
    h.pump();
    let left_b = h.members[b].id.clone();
    assert!(h.events.iter().any(|e| matches!(
        e,
        Event::MemberLeft { id, reason: EndReason::CloseNotify, addrs, .. }
            if *id == left_b && addrs == &vec![h.members[b].client.addr]
    )));
    // a goes silent: consent expires.
    let end = h.now + Duration::from_secs(60);
    while let Some(t) = h.shard.poll_timeout().filter(|t| *t <= end) {
        h.advance_to(t);
    }
    let left_a = h.members[a].id.clone();
    assert!(h.events.iter().any(|e| matches!(
        e,
        Event::MemberLeft { id, reason: EndReason::ConsentExpired, .. } if *id == left_a
    )));
    let c = h.counters();
    assert_eq!(c.ended[EndReason::CloseNotify], 1);
    assert_eq!(c.ended[EndReason::ConsentExpired], 1);
    assert_eq!((c.members, c.rooms, c.connected), (0, 0, 0));
    assert_eq!(h.shard.route_sizes(), (0, 0), "nothing left behind");
    // Late media from a is nobody's now.
    let (_, late) = h.srtp(a, b"late");
    h.send(a, &late);
    assert_eq!(h.counters().media.drops[DropReason::UnknownSource], 1);
}
