//! Where the UDP datagram is, and why a frame has none.

mod common;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use common::*;
use proptest::prelude::*;
use secrelay_wire::pcap::{locate_udp, CapturedPacket, IpVersion, LinkType, NotUdp};

const A4: Ipv4Addr = Ipv4Addr::new(10, 1, 2, 3);
const B4: Ipv4Addr = Ipv4Addr::new(10, 4, 5, 6);
const A6: Ipv6Addr = Ipv6Addr::LOCALHOST;
const B6: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 9);

#[test]
fn addresses_ports_and_ranges() {
    let ip = ipv4_udp(A4, B4, 1234, 5678, b"payload", true, &[]);
    let frame = ethernet(&[(0x8100, 5)], 0x0800, &ip);
    let loc = locate_udp(LinkType::ETHERNET, &frame).unwrap();
    assert_eq!(loc.ip_version, IpVersion::V4);
    assert_eq!(loc.src().to_string(), "10.1.2.3:1234");
    assert_eq!(loc.dst().to_string(), "10.4.5.6:5678");
    assert_eq!(&frame[loc.payload.clone()], b"payload");
    assert_eq!(loc.payload_len(), 7);
    assert_ne!(loc.checksum, 0);

    let ip6 = ipv6_udp(A6, B6, 1, 2, b"v6", &[hop_by_hop(), dest_opts()]);
    let loc = locate_udp(LinkType::LINUX_SLL2, &sll2(0x86dd, &ip6)).unwrap();
    assert_eq!(loc.ip_version, IpVersion::V6);
    assert_eq!(loc.src_ip, IpAddr::V6(A6));
    assert_eq!(loc.dst_ip, IpAddr::V6(B6));
    assert_eq!(loc.ip_offset, 20);
    assert_eq!(loc.udp_offset, 20 + 40 + 16);
}

#[test]
fn vlan_tag_limits() {
    let ip = ipv4_udp(A4, B4, 1, 2, b"x", true, &[]);
    let tags4 = [(0x88a8, 1), (0x8100, 2), (0x8100, 3), (0x9100, 4)];
    let loc = locate_udp(LinkType::ETHERNET, &ethernet(&tags4, 0x0800, &ip)).unwrap();
    assert_eq!(loc.ip_offset, 14 + 16);
    let tags5 = [
        (0x88a8, 1),
        (0x8100, 2),
        (0x8100, 3),
        (0x9100, 4),
        (0x8100, 5),
    ];
    assert_eq!(
        locate_udp(LinkType::ETHERNET, &ethernet(&tags5, 0x0800, &ip)),
        Err(NotUdp::NotIp)
    );
}

#[test]
fn reasons() {
    let udp4 = ipv4_udp(A4, B4, 1, 2, &[1; 40], true, &[]);
    let eth = |p: &[u8]| ethernet(&[], 0x0800, p);

    // Fragments (MF set, and non-zero offset).
    for ff in [0x2000u16, 0x0010] {
        let frag = ipv4_with_protocol(A4, B4, 17, &udp4[20..], &[], ff);
        assert_eq!(
            locate_udp(LinkType::ETHERNET, &eth(&frag)),
            Err(NotUdp::Fragment)
        );
    }
    // IPv6 fragment header with MF.
    let frag6 = ipv6_raw(
        A6,
        B6,
        44,
        &[&[17, 0, 0, 1, 0, 0, 0, 7][..], &[0; 16]].concat(),
    );
    assert_eq!(locate_udp(LinkType::RAW, &frag6), Err(NotUdp::Fragment));
    // Other transport.
    let tcp = ipv4_with_protocol(A4, B4, 6, &[0; 20], &[], 0);
    assert_eq!(
        locate_udp(LinkType::RAW, &tcp),
        Err(NotUdp::OtherProtocol(6))
    );
    let esp6 = ipv6_raw(A6, B6, 50, &[0; 16]);
    assert_eq!(
        locate_udp(LinkType::IPV6, &esp6),
        Err(NotUdp::OtherProtocol(50))
    );
    // Truncated at every layer.
    let frame = eth(&udp4);
    for cut in 0..frame.len() {
        assert_eq!(
            locate_udp(LinkType::ETHERNET, &frame[..cut]),
            Err(NotUdp::Truncated),
            "cut {cut}"
        );
    }
    // UDP length larger than the IP datagram.
    let mut bad = udp4.clone();
    bad[24..26].copy_from_slice(&200u16.to_be_bytes());
    assert_eq!(locate_udp(LinkType::RAW, &bad), Err(NotUdp::MalformedUdp));
    // UDP length below 8.
    bad[24..26].copy_from_slice(&3u16.to_be_bytes());
    assert_eq!(locate_udp(LinkType::RAW, &bad), Err(NotUdp::MalformedUdp));
    // IPv4 total length smaller than the header.
    let mut bad = udp4.clone();
    bad[2..4].copy_from_slice(&10u16.to_be_bytes());
    assert_eq!(locate_udp(LinkType::RAW, &bad), Err(NotUdp::MalformedIp));
    // IHL < 5.
    let mut bad = udp4.clone();
    bad[0] = 0x44;
    assert_eq!(locate_udp(LinkType::RAW, &bad), Err(NotUdp::MalformedIp));
    // Ethertype says IPv4, header says IPv6.
    let ip6 = ipv6_udp(A6, B6, 1, 2, b"x", &[]);
    assert_eq!(
        locate_udp(LinkType::ETHERNET, &eth(&ip6)),
        Err(NotUdp::MalformedIp)
    );
    // Version nibble neither 4 nor 6 on raw links.
    assert_eq!(
        locate_udp(LinkType::RAW, &[0x50; 40]),
        Err(NotUdp::MalformedIp)
    );
    // Unknown ethertype / link type.
    assert_eq!(
        locate_udp(LinkType::ETHERNET, &ethernet(&[], 0x88cc, &[0; 40])),
        Err(NotUdp::NotIp)
    );
    assert_eq!(
        locate_udp(LinkType(147), &udp4),
        Err(NotUdp::UnsupportedLinkType(LinkType(147)))
    );
    assert!(!LinkType(147).is_supported());
    assert!(LinkType::LINUX_SLL2.is_supported());
    // Unknown SLL packet type.
    let mut s = sll(0x0800, &udp4);
    s[1] = 99;
    assert_eq!(
        locate_udp(LinkType::LINUX_SLL, &s),
        Err(NotUdp::MalformedLink)
    );
    // NULL link with an unknown family.
    let null = [&99u32.to_le_bytes()[..], &udp4].concat();
    assert_eq!(locate_udp(LinkType::NULL, &null), Err(NotUdp::NotIp));
}

#[test]
fn udp_length_shorter_than_ip_payload_bounds_the_payload() {
    let mut ip = ipv4_udp(A4, B4, 1, 2, b"abcdef", false, &[]);
    ip[24..26].copy_from_slice(&10u16.to_be_bytes()); // only "ab"
    let p = CapturedPacket::new(LinkType::RAW, 0, ip);
    assert_eq!(p.udp_payload(), Some(&b"ab"[..]));
    let rebuilt = p.with_udp_payload(b"xyz").unwrap();
    assert_eq!(verify_ip_udp(&rebuilt), b"xyz");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn never_panics_on_arbitrary_frames(
        link in prop::sample::select(vec![0u32, 1, 12, 14, 101, 108, 113, 228, 229, 276, 9999]),
        bytes in proptest::collection::vec(any::<u8>(), 0..200),
        payload in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let p = CapturedPacket::new(LinkType(link), 0, bytes.clone());
        if let Some(loc) = p.udp() {
            prop_assert!(loc.payload.end <= bytes.len());
            let rebuilt = p.with_udp_payload(&payload).unwrap();
            let again = locate_udp(LinkType(link), &rebuilt).unwrap();
            prop_assert_eq!(&rebuilt[again.payload.clone()], &payload[..]);
            prop_assert_eq!(again.src(), loc.src());
            prop_assert_eq!(again.dst(), loc.dst());
        }
    }

    #[test]
    fn never_panics_on_mutated_valid_frames(
        flips in proptest::collection::vec((0usize..120, any::<u8>()), 1..6),
        cut in 0usize..130,
        payload in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let ip4 = ipv4_udp(A4, B4, 1, 2, &[9; 30], true, &[1, 1, 1, 0]);
        let ip6 = ipv6_udp(A6, B6, 1, 2, &[9; 10], &[hop_by_hop()]);
        for (link, mut frame) in [
            (LinkType::ETHERNET, ethernet(&[(0x8100, 1)], 0x0800, &ip4)),
            (LinkType::LINUX_SLL, sll(0x86dd, &ip6)),
            (LinkType::RAW, ip6.clone()),
        ] {
            for (at, v) in &flips {
                if let Some(b) = frame.get_mut(*at) {
                    *b ^= *v;
                }
            }
            frame.truncate(cut.min(frame.len()));
            let p = CapturedPacket::new(link, 0, frame.clone());
            if p.udp().is_some() {
                let rebuilt = p.with_udp_payload(&payload).unwrap();
                let again = locate_udp(link, &rebuilt).unwrap();
                prop_assert_eq!(&rebuilt[again.payload.clone()], &payload[..]);
            }
        }
    }
}
