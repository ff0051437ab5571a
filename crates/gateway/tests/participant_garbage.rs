//! Whatever arrives from the network, a participant never panics; garbage and bit-flipped SRTP
//! never become media, and the browser's real stream keeps flowing afterwards.

mod sim_client;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use secrelay_gateway::participant::Participant;
use sim_client::{connect, drain, participant_for, Ev, SimClient};

fn connected() -> (SimClient, Participant, Instant) {
    let t0 = Instant::now();
    let mut c = SimClient::new(1);
    let mut p = participant_for(&c.offer(), t0);
    let conn = connect(&mut c, &mut p, t0);
    assert!(conn.connected().is_some());
    (c, p, conn.now)
}

/// Datagrams whose first byte lands in every RFC 7983 range.
fn datagram() -> impl Strategy<Value = Vec<u8>> {
    (
        prop_oneof![0u8..=3, 20u8..=63, 128u8..=191, any::<u8>()],
        proptest::collection::vec(any::<u8>(), 0..300),
    )
        .prop_map(|(first, mut rest)| {
            rest.insert(0, first);
            rest
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn garbage_never_panics_in_any_state(
        datagrams in proptest::collection::vec(datagram(), 1..12),
        validated in any::<bool>(),
    ) {
        // A fresh participant (nothing validated) and a connected one.
        let c = SimClient::new(2);
        let t0 = Instant::now();
        let mut fresh = participant_for(&c.offer(), t0);
        let (client, mut live, now) = connected();
        let stranger: SocketAddr = "203.0.113.1:9".parse().unwrap();
        let from = if validated { client.addr } else { stranger };
        for (i, d) in datagrams.iter().enumerate() {
            let t = now + Duration::from_millis(i as u64);
            fresh.handle_datagram(t, from, d);
            live.handle_datagram(t, from, d);
            for p in [&mut fresh, &mut live] {
                let (_, evs, _) = drain(p);
                prop_assert!(!evs.iter().any(|e| matches!(e, Ev::Media { .. })), "{evs:?}");
                p.handle_timeout(t);
                let _ = drain(p);
            }
        }
    }

    #[test]
    fn flipped_srtp_is_dropped_and_the_stream_goes_on(
        flips in proptest::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 1..4),
    ) {
        let (mut client, mut p, now) = connected();
        let (_, good) = client.srtp(&[5; 50]);
        let mut bad = good.clone();
        for (at, mask) in &flips {
            // Keep the first two bytes so it still reads as RTP; flip anything after.
            let i = 2 + at.index(bad.len() - 2);
            bad[i] ^= mask;
        }
        // Two flips of the same bits cancel out: that is the genuine packet, not a forgery.
        prop_assume!(bad != good);
        p.handle_datagram(now, client.addr, &bad);
        let (_, evs, _) = drain(&mut p);
        prop_assert!(evs.is_empty(), "{evs:?}");
        let c = p.counters();
        prop_assert_eq!(c.auth_failures + c.replays + c.malformed + c.unknown, 1);
        p.handle_datagram(now, client.addr, &good);
        let (_, evs, _) = drain(&mut p);
        prop_assert_eq!(evs.len(), 1);
    }
}
