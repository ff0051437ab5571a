//! A participant ends for the right reason: a silent browser loses consent, a certificate that
//! does not match the offer's fingerprint is refused, and close_notify ends the association.

mod sim_client;

use std::time::{Duration, Instant};

use secrelay_dtls::{Certificate, KeyType};
use secrelay_gateway::participant::{CloseReason, SendError};
use sim_client::{connect, drain, participant_for, Ev, SimClient};

#[test]
fn consent_timeout_closes_a_silent_participant() {
    let t0 = Instant::now();
    let mut client = SimClient::new(1);
    let mut p = participant_for(&client.offer(), t0);
    let c = connect(&mut client, &mut p, t0);
    assert!(c.connected().is_some());
    // Consent refreshed once more, then silence.
    let refresh = c.now + Duration::from_secs(5);
    let req = client.binding_request(&c.answer, false);
    p.handle_datagram(refresh, client.addr, &req);
    let _ = drain(&mut p);
    let mut closed_at = None;
    for _ in 0..10_000 {
        let Some(t) = p.poll_timeout() else { break };
        p.handle_timeout(t);
        let (_, evs, _) = drain(&mut p);
        if evs.contains(&Ev::Closed(CloseReason::ConsentExpired)) {
            closed_at = Some(t);
        }
    }
    let closed_at = closed_at.expect("consent expired");
    assert!(closed_at >= refresh + Duration::from_secs(30));
    assert_eq!(p.closed(), Some(CloseReason::ConsentExpired));
    assert_eq!(p.poll_timeout(), None);
    assert!(p.poll_output().is_none(), "closed and drained");
    // Media after the end is ignored and counted; sending is refused.
    let (_, late) = client.srtp(b"late");
    p.handle_datagram(closed_at, client.addr, &late);
    assert_eq!(p.counters().after_close, 1);
    let pkt = client.rtp(b"x");
    assert_eq!(p.send_rtp(closed_at, &pkt), Err(SendError::Closed));
}

#[test]
fn a_participant_never_checked_expires_too() {
    let t0 = Instant::now();
    let client = SimClient::new(2);
    let mut p = participant_for(&client.offer(), t0);
    let mut reason = None;
    while let Some(t) = p.poll_timeout() {
        p.handle_timeout(t);
        for e in drain(&mut p).1 {
            if let Ev::Closed(r) = e {
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
    let mut p = participant_for(&offer, t0);
    let c = connect(&mut client, &mut p, t0);
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
    let mut p = participant_for(&client.offer(), t0);
    let c = connect(&mut client, &mut p, t0);
    assert!(c.connected().is_some());
    let now = c.now + Duration::from_secs(1);
    client.dtls.as_mut().unwrap().close(now);
    for d in client.drain_dtls() {
        p.handle_datagram(now, client.addr, &d);
    }
    let (_, evs, _) = drain(&mut p);
    assert_eq!(evs, vec![Ev::Closed(CloseReason::CloseNotify)]);
}

#[test]
fn closing_sends_close_notify_to_the_browser() {
    let t0 = Instant::now();
    let mut client = SimClient::new(5);
    let mut p = participant_for(&client.offer(), t0);
    let c = connect(&mut client, &mut p, t0);
    assert!(c.connected().is_some());
    p.close(c.now);
    let (tx, evs, _) = drain(&mut p);
    assert_eq!(evs, vec![Ev::Closed(CloseReason::CloseNotify)]);
    assert_eq!(tx.len(), 1, "one close_notify");
    client.receive(c.now, &tx[0].1);
    let _ = client.drain_dtls();
    assert_eq!(
        client.dtls.as_ref().unwrap().state(),
        secrelay_dtls::State::Finished
    );
}
