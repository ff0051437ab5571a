//! Whatever arrives from the network, a shard never panics; garbage and bit-flipped SRTP never
//! become media, and the browser's real stream keeps flowing afterwards.

use std::net::SocketAddr;
use std::time::Duration;

use proptest::prelude::*;
use secrelay_gateway::counters::DropReason;
use secrelay_gateway::shard::JoinKind;
use secrelay_testkit::gateway::Harness;
use secrelay_testkit::memory::SimClient;

/// A shard with a member that only joined (room "fresh", nothing validated), and a room
/// ("live") with a connected member and a connected listener: (harness, fresh, live,
/// listener).
fn shard() -> (Harness, usize, usize, usize) {
    let mut h = Harness::simd();
    let fresh = h
        .join("fresh", SimClient::new(2), JoinKind::Join, None)
        .unwrap();
    let live = h.join_connected("live", 1, JoinKind::Join);
    let listener = h.join_connected("live", 3, JoinKind::Whep);
    (h, fresh, live, listener)
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
        let (mut h, fresh, live, listener) = shard();
        let stranger: SocketAddr = "203.0.113.1:9".parse().unwrap();
        for (i, d) in datagrams.iter().enumerate() {
            for member in [fresh, live] {
                let from = if validated { h.members[member].client.addr } else { stranger };
                h.send_from(from, d);
            }
            h.pump();
            prop_assert!(h.members[listener].client.received.is_empty());
            let t = h.now + Duration::from_millis(i as u64);
            h.advance_to(t);
        }
    }

    #[test]
    fn flipped_srtp_is_dropped_and_the_stream_goes_on(
        flips in proptest::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 1..4),
    ) {
        let (mut h, _, live, listener) = shard();
        let (_, good) = h.srtp(live, &[5; 50]);
        let mut bad = good.clone();
        for (at, mask) in &flips {
            // Keep the first two bytes so it still reads as RTP; flip anything after.
            let i = 2 + at.index(bad.len() - 2);
            bad[i] ^= mask;
        }
        // Two flips of the same bits cancel out: that is the genuine packet, not a forgery.
        prop_assume!(bad != good);
        h.send(live, &bad);
        prop_assert_eq!(h.pump(), 0);
        let c = h.member_counters(live).unwrap();
        let refused = [
            DropReason::AuthFailed,
            DropReason::Replayed,
            DropReason::Malformed,
            DropReason::UnknownKind,
            DropReason::SrtpOther,
        ];
        prop_assert_eq!(refused.iter().map(|r| c.drops[*r]).sum::<u64>(), 1);
        h.send(live, &good);
        prop_assert_eq!(h.pump(), 1);
        prop_assert_eq!(h.members[listener].client.received.len(), 1);
    }
}
