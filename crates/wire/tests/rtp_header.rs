//! RTP and RTCP header parsing: fields, CSRCs, extension, truncation and
//! arbitrary input.

use proptest::prelude::*;
use secrelay_wire::rtp::{ParseError, RtcpHeader, RtcpPacketType, RtpHeader};

fn rtp_packet(first: u8, second: u8, tail: &[u8]) -> Vec<u8> {
    let mut p = vec![
        first, second, 0x12, 0x34, 0xde, 0xad, 0xbe, 0xef, 0xca, 0xfe, 0xba, 0xbe,
    ];
    p.extend_from_slice(tail);
    p
}

#[test]
fn minimal_header_fields() {
    let p = rtp_packet(0x80, 0xe0, b"payload");
    let h = RtpHeader::parse(&p).unwrap();
    assert!(!h.padding());
    assert!(!h.extension());
    assert_eq!(h.csrc_count(), 0);
    assert!(h.marker());
    assert_eq!(h.payload_type(), 0x60);
    assert_eq!(h.sequence(), 0x1234);
    assert_eq!(h.timestamp(), 0xdead_beef);
    assert_eq!(h.ssrc(), 0xcafe_babe);
    assert_eq!(h.header_len(), 12);
    assert_eq!(h.payload_offset(), 12);
    assert_eq!(h.payload(), b"payload");
    assert_eq!(h.csrcs().count(), 0);
    assert!(h.extension_header().is_none());
}

#[test]
fn padding_and_marker_bits() {
    let p = rtp_packet(0xa0, 0x08, &[]);
    let h = RtpHeader::parse(&p).unwrap();
    assert!(h.padding());
    assert!(!h.marker());
    assert_eq!(h.payload_type(), 8);
    assert!(h.payload().is_empty());
}

#[test]
fn csrcs_are_listed_and_counted() {
    let mut tail = Vec::new();
    for c in [1u32, 2, 0xffff_ffff] {
        tail.extend_from_slice(&c.to_be_bytes());
    }
    tail.extend_from_slice(b"xy");
    let p = rtp_packet(0x83, 111, &tail);
    let h = RtpHeader::parse(&p).unwrap();
    assert_eq!(h.csrc_count(), 3);
    assert_eq!(h.csrcs().collect::<Vec<_>>(), vec![1, 2, 0xffff_ffff]);
    assert_eq!(h.header_len(), 12 + 12);
    assert_eq!(h.payload(), b"xy");
}

#[test]
fn extension_with_csrc() {
    let mut tail = Vec::new();
    tail.extend_from_slice(&7u32.to_be_bytes()); // 1 CSRC
    tail.extend_from_slice(&[0xbe, 0xde, 0x00, 0x02]); // profile, 2 words
    tail.extend_from_slice(&[0x10, 0xaa, 0, 0, 0x21, 0xbb, 0xcc, 0]);
    tail.extend_from_slice(b"media");
    let p = rtp_packet(0x91, 96, &tail);
    let h = RtpHeader::parse(&p).unwrap();
    assert!(h.extension());
    assert_eq!(h.csrcs().collect::<Vec<_>>(), vec![7]);
    assert_eq!(h.header_len(), 12 + 4 + 4 + 8);
    let ext = h.extension_header().unwrap();
    assert_eq!(ext.profile, 0xbede);
    assert_eq!(ext.data, &[0x10, 0xaa, 0, 0, 0x21, 0xbb, 0xcc, 0]);
    assert_eq!(h.payload(), b"media");
    assert_eq!(h.header_bytes().len(), h.header_len());
}

#[test]
fn empty_extension() {
    let p = rtp_packet(0x90, 96, &[0x10, 0x00, 0x00, 0x00]);
    let h = RtpHeader::parse(&p).unwrap();
    assert_eq!(h.header_len(), 16);
    assert_eq!(h.extension_header().unwrap().data, &[] as &[u8]);
    assert!(h.payload().is_empty());
}

#[test]
fn truncated_rtp_inputs() {
    let full = {
        let mut tail = Vec::new();
        tail.extend_from_slice(&1u32.to_be_bytes());
        tail.extend_from_slice(&2u32.to_be_bytes());
        tail.extend_from_slice(&[0xbe, 0xde, 0, 1, 1, 2, 3, 4]);
        rtp_packet(0x92, 0, &tail)
    };
    assert_eq!(RtpHeader::parse(&full).unwrap().header_len(), full.len());
    for cut in 0..full.len() {
        match RtpHeader::parse(&full[..cut]) {
            Err(ParseError::Truncated { needed, available }) => {
                assert_eq!(available, cut);
                assert!(needed > cut);
            }
            other => panic!("cut at {cut}: {other:?}"),
        }
    }
}

#[test]
fn rtp_version_must_be_2() {
    for first in [0x00u8, 0x40, 0xc0] {
        let p = rtp_packet(first, 0, &[]);
        assert_eq!(
            RtpHeader::parse(&p),
            Err(ParseError::BadVersion(first >> 6))
        );
    }
}

fn rtcp(first: u8, pt: u8, len_words: u16, ssrc: u32, extra: usize) -> Vec<u8> {
    let mut p = vec![first, pt];
    p.extend_from_slice(&len_words.to_be_bytes());
    p.extend_from_slice(&ssrc.to_be_bytes());
    p.resize(p.len() + extra, 0);
    p
}

#[test]
fn rtcp_sender_report() {
    let p = rtcp(0x81, 200, 12, 0x1122_3344, 48);
    let h = RtcpHeader::parse(&p).unwrap();
    assert_eq!(h.packet_type(), 200);
    assert_eq!(h.kind(), RtcpPacketType::SenderReport);
    assert_eq!(h.count(), 1);
    assert!(!h.padding());
    assert_eq!(h.length_words(), 12);
    assert_eq!(h.packet_len(), 52);
    assert_eq!(h.sender_ssrc(), 0x1122_3344);
    assert_eq!(h.packet_bytes().len(), 52);
}

#[test]
fn rtcp_types_and_range() {
    let kinds = [
        (200, RtcpPacketType::SenderReport),
        (201, RtcpPacketType::ReceiverReport),
        (202, RtcpPacketType::SourceDescription),
        (203, RtcpPacketType::Goodbye),
        (204, RtcpPacketType::App),
        (205, RtcpPacketType::TransportFeedback),
        (206, RtcpPacketType::PayloadFeedback),
        (207, RtcpPacketType::ExtendedReport),
        (192, RtcpPacketType::Other(192)),
        (223, RtcpPacketType::Other(223)),
    ];
    for (pt, kind) in kinds {
        let p = rtcp(0x80, pt, 1, 5, 0);
        assert_eq!(RtcpHeader::parse(&p).unwrap().kind(), kind);
    }
    for pt in [0u8, 96, 127, 191, 224, 255] {
        let p = rtcp(0x80, pt, 1, 5, 0);
        assert_eq!(RtcpHeader::parse(&p), Err(ParseError::NotRtcp(pt)));
    }
}

#[test]
fn rtcp_compound_with_srtcp_trailer_parses_first_packet() {
    // RR (8 bytes) + SDES + 4-byte SRTCP index + 10-byte tag.
    let mut p = rtcp(0x80, 201, 1, 9, 0);
    p.extend_from_slice(&rtcp(0x81, 202, 2, 9, 4));
    p.extend_from_slice(&[0x80, 0, 0, 1]);
    p.extend_from_slice(&[0xaa; 10]);
    let h = RtcpHeader::parse(&p).unwrap();
    assert_eq!(h.kind(), RtcpPacketType::ReceiverReport);
    assert_eq!(h.packet_len(), 8);
    assert_eq!(h.sender_ssrc(), 9);
}

#[test]
fn truncated_rtcp_inputs() {
    let p = rtcp(0x80, 200, 6, 1, 20);
    assert!(RtcpHeader::parse(&p).is_ok());
    for cut in 0..p.len() {
        assert!(
            matches!(RtcpHeader::parse(&p[..cut]), Err(ParseError::Truncated { available, .. }) if available == cut),
            "cut at {cut}"
        );
    }
}

#[test]
fn rtcp_version_must_be_2() {
    let p = rtcp(0x40, 200, 1, 1, 0);
    assert_eq!(RtcpHeader::parse(&p), Err(ParseError::BadVersion(1)));
}

#[test]
fn errors_display() {
    assert!(ParseError::Truncated {
        needed: 12,
        available: 3
    }
    .to_string()
    .contains("12"));
    assert!(ParseError::NotRtcp(5).to_string().contains('5'));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    #[test]
    fn rtp_parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..128)) {
        if let Ok(h) = RtpHeader::parse(&bytes) {
            prop_assert!(h.header_len() <= bytes.len());
            prop_assert_eq!(h.header_len() + h.payload().len(), bytes.len());
            prop_assert_eq!(h.csrcs().len(), usize::from(h.csrc_count()));
            let _ = (h.sequence(), h.timestamp(), h.ssrc(), h.extension_header(), format!("{h:?}"));
        }
    }

    #[test]
    fn rtp_parse_never_panics_on_rtp_like(
        first in 0x80u8..0xc0,
        bytes in proptest::collection::vec(any::<u8>(), 0..96),
    ) {
        let mut p = vec![first];
        p.extend_from_slice(&bytes);
        if let Ok(h) = RtpHeader::parse(&p) {
            prop_assert!(h.header_len() <= p.len());
        }
    }

    #[test]
    fn rtcp_parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        if let Ok(h) = RtcpHeader::parse(&bytes) {
            prop_assert!(h.packet_len() <= bytes.len());
            let _ = (h.kind(), h.count(), h.sender_ssrc(), format!("{h:?}"));
        }
    }
}
