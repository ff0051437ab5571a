//! RFC 7983 / RFC 5761 first-byte demultiplexing.

use proptest::prelude::*;
use secrelay_wire::rtp::{classify, PacketKind, RtcpHeader, RtpHeader};

fn packet(first: u8, second: u8, len: usize) -> Vec<u8> {
    let mut p = vec![0u8; len.max(2)];
    p[0] = first;
    p[1] = second;
    p.truncate(len);
    p
}

#[test]
fn stun_range() {
    for b in 0..=3u8 {
        assert_eq!(classify(&packet(b, 1, 20)), PacketKind::Stun, "{b}");
    }
    assert_eq!(classify(&packet(4, 1, 20)), PacketKind::Other);
}

#[test]
fn dtls_range() {
    for b in 20..=63u8 {
        assert_eq!(classify(&packet(b, 0xfe, 13)), PacketKind::Dtls, "{b}");
    }
    assert_eq!(classify(&packet(19, 0, 13)), PacketKind::Other); // ZRTP range
    assert_eq!(classify(&packet(64, 0, 13)), PacketKind::Other); // TURN channel
}

#[test]
fn rtp_versus_rtcp() {
    // Ordinary RTP payload types, with and without marker.
    for second in [0u8, 8, 96, 111, 127, 0x80, 0x80 | 96, 0x80 | 127] {
        assert_eq!(
            classify(&packet(0x80, second, 12)),
            PacketKind::Rtp,
            "{second}"
        );
    }
    // RTCP SR, RR, SDES, BYE, APP and the rest of the RFC 5761 range.
    for second in 192..=223u8 {
        assert_eq!(
            classify(&packet(0x80, second, 8)),
            PacketKind::Rtcp,
            "{second}"
        );
    }
    // Marker + PT 96..=127 is RTP (second byte 224..=255).
    for second in 224..=255u8 {
        assert_eq!(
            classify(&packet(0x80, second, 12)),
            PacketKind::Rtp,
            "{second}"
        );
    }
    // Any first byte in 128..=191 (version 2, any P/X/CC).
    for first in 128..=191u8 {
        assert_eq!(classify(&packet(first, 96, 12)), PacketKind::Rtp);
        assert_eq!(classify(&packet(first, 200, 8)), PacketKind::Rtcp);
    }
}

#[test]
fn minimum_lengths() {
    assert_eq!(classify(&[]), PacketKind::Other);
    assert_eq!(classify(&[0x80]), PacketKind::Other);
    assert_eq!(classify(&packet(0x80, 96, 11)), PacketKind::Other);
    assert_eq!(classify(&packet(0x80, 96, 12)), PacketKind::Rtp);
    assert_eq!(classify(&packet(0x80, 200, 7)), PacketKind::Other);
    assert_eq!(classify(&packet(0x80, 200, 8)), PacketKind::Rtcp);
}

#[test]
fn other_first_bytes() {
    for b in (4..20u8).chain(64..128).chain(192..=255) {
        assert_eq!(classify(&packet(b, 96, 40)), PacketKind::Other, "{b}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    #[test]
    fn classify_never_panics_and_agrees_with_parsers(
        bytes in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        match classify(&bytes) {
            PacketKind::Rtp => {
                prop_assert!(bytes.len() >= 12);
                // The fixed header always parses (CSRC/extension may not fit).
                if bytes[0] & 0x1f == 0 {
                    prop_assert!(RtpHeader::parse(&bytes).is_ok());
                }
            }
            PacketKind::Rtcp => {
                prop_assert!(bytes.len() >= 8);
                prop_assert!((192..=223).contains(&bytes[1]));
                // Only the declared length can make parsing fail.
                if let Err(e) = RtcpHeader::parse(&bytes) {
                    let is_truncated = matches!(e, secrelay_wire::rtp::ParseError::Truncated { .. });
                    prop_assert!(is_truncated);
                }
            }
            PacketKind::Stun => prop_assert!(bytes[0] <= 3),
            PacketKind::Dtls => prop_assert!((20..=63).contains(&bytes[0])),
            PacketKind::Other => {}
        }
    }
}
