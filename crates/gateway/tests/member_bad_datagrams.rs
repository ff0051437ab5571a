//! Every bad datagram from a live WebRTC member's own (ICE-validated) address is dropped and
//! counted by reason, at the member and in the shard's totals: forged DTLS alerts and records
//! and ClientHellos once its handshake is done, a replayed last flight (answered at most once
//! per retransmission interval), and random garbage in each RFC 7983 range and outside them;
//! the member's media keeps flowing. Driven through a shard, in memory, on simulated time.

use std::net::SocketAddr;
use std::time::Duration;

use secrelay_dtls::record::inspect;
use secrelay_gateway::counters::{Counters, DropReason};
use secrelay_gateway::leg::TransmitKind;
use secrelay_gateway::shard::{JoinKind, Output};
use secrelay_testkit::forged_dtls::{forgeries, Forged};
use secrelay_testkit::gateway::Harness;
use secrelay_testkit::link::Rng;
use secrelay_testkit::memory::SimClient;

/// Datagrams of each kind sent.
const EACH: u64 = 25;

/// Two connected members of one room: (harness, the one that misbehaves, the other).
fn room() -> (Harness, usize, usize) {
    let mut h = Harness::simd();
    let a = h.join_connected("r", 1, JoinKind::Join);
    let b = h.join_connected("r", 2, JoinKind::Join);
    (h, a, b)
}

/// Everything the shard puts out now, not delivered: DTLS datagrams to `to`.
fn dtls_out(h: &mut Harness, to: SocketAddr) -> usize {
    let mut n = 0;
    while let Some(o) = h.shard.poll_output() {
        match o {
            Output::Transmit(t) if t.destination == to && t.kind == TransmitKind::Dtls => n += 1,
            Output::Pipe(_) => panic!("one shard has no pipes"),
            Output::Timeout(_) => break,
            _ => {}
        }
    }
    n
}

fn drops(c: &Counters, reasons: &[DropReason]) -> u64 {
    reasons.iter().map(|r| c.drops[*r]).sum()
}

/// Member `a`'s media still reaches `b`.
fn media_flows(h: &mut Harness, a: usize, b: usize, fill: u8) {
    let before = h.members[b].client.received.len();
    let (_, p) = h.srtp(a, &[fill; 100]);
    h.send(a, &p);
    h.pump();
    assert_eq!(h.members[b].client.received.len(), before + 1);
}

#[test]
fn forged_records_and_client_hellos_after_the_handshake_are_counted_by_reason() {
    let (mut h, a, b) = room();
    let addr = h.members[a].client.addr;
    // A ClientHello from a fresh DTLS client against a's answer.
    let mut fresh = SimClient::new(9);
    let now = h.now;
    fresh.start_dtls(&h.members[a].answer.clone(), now);
    let hello = fresh.drain_dtls().remove(0);
    let own_hello = h
        .client_dtls
        .iter()
        .find(|(i, d)| *i == a && inspect(d).is_ok_and(|s| s.client_hello))
        .map(|(_, d)| d.clone())
        .expect("a's ClientHello");
    let mut kinds: Vec<(String, Vec<u8>, DropReason)> = forgeries()
        .into_iter()
        .map(|(f, d)| {
            let reason = match f {
                Forged::PlainAlert | Forged::ProtectedHandshake => DropReason::DtlsAfterHandshake,
                Forged::ProtectedAlert
                | Forged::ProtectedData
                | Forged::NotRecords
                | Forged::Dtls13Header => DropReason::DtlsBadRecord,
            };
            (format!("{f:?}"), d, reason)
        })
        .collect();
    for (what, d) in [
        ("a new ClientHello", hello),
        ("its own ClientHello", own_hello),
    ] {
        kinds.push((what.into(), d, DropReason::ClientHelloAfterHandshake));
    }
    let _ = dtls_out(&mut h, addr);
    for (what, d, reason) in &kinds {
        let before = h.member_counters(a).unwrap();
        let total_before = h.counters().media.drops[*reason];
        for _ in 0..EACH {
            h.send(a, d);
            assert_eq!(dtls_out(&mut h, addr), 0, "{what}: never answered");
        }
        let after = h.member_counters(a).unwrap();
        assert_eq!(after.drops[*reason] - before.drops[*reason], EACH, "{what}");
        assert_eq!(
            after.drops.total() - before.drops.total(),
            EACH,
            "{what}: {:?}",
            after.drops
        );
        assert_eq!(after.dtls_in - before.dtls_in, EACH, "{what}");
        assert_eq!(
            h.counters().media.drops[*reason] - total_before,
            EACH,
            "{what}: in the totals"
        );
        assert_eq!(h.counters().connected, 2, "{what}");
    }
    media_flows(&mut h, a, b, 7);
}

/// a's last flight sent again and again: the gateway's answer (its own last flight) goes out
/// at most once per retransmission interval; every copy is counted.
#[test]
fn a_replayed_last_flight_is_answered_at_most_once_per_interval() {
    let (mut h, a, b) = room();
    let addr = h.members[a].client.addr;
    let flight: Vec<Vec<u8>> = h
        .client_dtls
        .iter()
        .filter(|(i, d)| *i == a && inspect(d).is_ok_and(|s| !s.client_hello))
        .map(|(_, d)| d.clone())
        .collect();
    assert!(!flight.is_empty());
    let _ = dtls_out(&mut h, addr);
    let rto = secrelay_dtls::Timers::default().initial_rto;
    let before = h.member_counters(a).unwrap();
    let mut answered = Vec::new();
    for _ in 0..3 {
        let mut out = 0;
        for _ in 0..EACH {
            for d in &flight {
                h.send(a, d);
                out += dtls_out(&mut h, addr);
            }
            h.now += Duration::from_millis(10);
        }
        answered.push(out);
        h.now += rto;
    }
    assert!(answered.iter().all(|n| *n <= 2), "{answered:?}");
    assert!(answered[0] >= 1, "the first copy is answered: {answered:?}");
    let after = h.member_counters(a).unwrap();
    let copies = 3 * EACH * flight.len() as u64;
    assert_eq!(after.dtls_in - before.dtls_in, copies);
    let dropped = drops(
        &after,
        &[
            DropReason::DtlsAfterHandshake,
            DropReason::DtlsBadRecord,
            DropReason::DtlsRetransmitLimited,
        ],
    ) - drops(
        &before,
        &[
            DropReason::DtlsAfterHandshake,
            DropReason::DtlsBadRecord,
            DropReason::DtlsRetransmitLimited,
        ],
    );
    let taken = answered.iter().filter(|n| **n > 0).count() as u64;
    assert_eq!(dropped + taken, copies, "every copy taken once or counted");
    assert_eq!(after.drops.total() - before.drops.total(), dropped);
    media_flows(&mut h, a, b, 8);
}

/// Random garbage with its first byte in each RFC 7983 range, and outside them all, from a's
/// own address: every datagram counted at a, under the reason its range says.
#[test]
fn garbage_in_every_range_is_counted_at_the_member() {
    let (mut h, a, b) = room();
    let mut rng = Rng::new(7983);
    type Range = std::ops::RangeInclusive<u8>;
    let ranges: [(&str, &[Range], &[DropReason]); 6] = [
        (
            "STUN",
            &[0..=3],
            &[DropReason::Malformed, DropReason::StunRejected],
        ),
        ("ZRTP", &[16..=19], &[DropReason::UnknownKind]),
        (
            "DTLS",
            &[20..=63],
            &[
                DropReason::DtlsBadRecord,
                DropReason::DtlsAfterHandshake,
                DropReason::ClientHelloAfterHandshake,
            ],
        ),
        ("TURN channel", &[64..=79], &[DropReason::UnknownKind]),
        (
            "RTP and RTCP",
            &[128..=191],
            &[
                DropReason::AuthFailed,
                DropReason::Malformed,
                DropReason::UnknownKind,
                DropReason::Replayed,
                DropReason::SrtpOther,
            ],
        ),
        (
            "no range",
            &[4..=15, 80..=127, 192..=255],
            &[DropReason::Unclassified],
        ),
    ];
    for (what, firsts, reasons) in ranges {
        let before = h.member_counters(a).unwrap();
        for k in 0..4 * EACH {
            let len = 1 + rng.below(200) as usize;
            let mut d: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
            let range = &firsts[k as usize % firsts.len()];
            let span = u64::from(range.end() - range.start()) + 1;
            d[0] = range.start() + rng.below(span) as u8;
            h.send(a, &d);
            h.pump();
        }
        let after = h.member_counters(a).unwrap();
        assert_eq!(
            after.drops.total() - before.drops.total(),
            4 * EACH,
            "{what}: {:?}",
            after.drops
        );
        assert_eq!(
            drops(&after, reasons) - drops(&before, reasons),
            4 * EACH,
            "{what}: {:?}",
            after.drops
        );
    }
    assert_eq!(h.counters().connected, 2);
    media_flows(&mut h, a, b, 9);
}
