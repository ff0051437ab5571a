//! Read captures, replace UDP payloads with longer and shorter ones, write
//! them back in the same format and read them again.

mod common;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use common::*;
use secrelay_wire::pcap::{
    Capture, CaptureFormat, CaptureKind, CaptureReader, CaptureWriter, CapturedPacket, LinkType,
    NotUdp, PcapPrecision, RebuildError, WriteError,
};

const A4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
const B4: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 7);
const A6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
const B6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0xabcd, 2);

const T0: u64 = 1_700_000_000_123_456_000;

/// Replaces every UDP payload with `f(old)`, returns the new capture bytes.
fn rewrite(capture: &mut Capture, f: impl Fn(&[u8]) -> Vec<u8>) -> Vec<u8> {
    for p in &mut capture.packets {
        if let Some(old) = p.udp_payload() {
            let new = f(old);
            let expect = p.with_udp_payload(&new).unwrap();
            p.replace_udp_payload(&new).unwrap();
            assert_eq!(p.data(), &expect[..]);
            assert_eq!(p.udp_payload(), Some(&new[..]));
        }
    }
    capture.to_bytes().unwrap()
}

fn longer(p: &[u8]) -> Vec<u8> {
    let mut v = p.to_vec();
    v.extend_from_slice(&[0x5a; 10]); // e.g. an SRTP auth tag
    v
}

fn shorter(p: &[u8]) -> Vec<u8> {
    p[..p.len() / 2].to_vec()
}

fn rtp_payload(seq: u16, len: usize) -> Vec<u8> {
    let mut p = vec![0x80, 96];
    p.extend_from_slice(&seq.to_be_bytes());
    p.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 2]);
    p.extend((0..len).map(|i| i as u8));
    p
}

#[test]
fn ethernet_ipv4_pcap_roundtrip() {
    let frames: Vec<Vec<u8>> = vec![
        ethernet(
            &[],
            0x0800,
            &ipv4_udp(A4, B4, 5004, 6000, &rtp_payload(1, 160), true, &[]),
        ),
        ethernet(
            &[],
            0x0800,
            &ipv4_udp(B4, A4, 6000, 5004, &rtp_payload(2, 20), false, &[]),
        ),
        // IPv4 with options (router alert + padding)
        ethernet(
            &[],
            0x0800,
            &ipv4_udp(
                A4,
                B4,
                5004,
                6000,
                &rtp_payload(3, 33),
                true,
                &[0x94, 4, 0, 0],
            ),
        ),
        // Not UDP: ARP
        ethernet(&[], 0x0806, &[0u8; 28]),
    ];
    let spec = PcapSpec {
        big_endian: false,
        nano: false,
        link_type: 1,
        snaplen: 65535,
    };
    let input = pcap_file(
        &spec,
        &frames
            .iter()
            .enumerate()
            .map(|(i, f)| (T0 + i as u64 * 20_000_000, f.clone(), f.len() as u32))
            .collect::<Vec<_>>(),
    );

    // Unchanged capture is written back byte for byte.
    let capture = Capture::parse(&input).unwrap();
    assert_eq!(capture.to_bytes().unwrap(), input);
    assert_eq!(capture.format.kind(), CaptureKind::Pcap);
    assert_eq!(capture.format.pcap_precision(), Some(PcapPrecision::Micro));
    assert_eq!(capture.format.link_type(0), Some(LinkType::ETHERNET));
    assert_eq!(capture.packets.len(), 4);
    assert_eq!(capture.non_udp_count(), 1);
    assert_eq!(capture.packets[3].not_udp_reason(), Some(NotUdp::NotIp));

    let udp = capture.packets[0].udp().unwrap();
    assert_eq!(udp.src_ip, IpAddr::V4(A4));
    assert_eq!(udp.dst_ip, IpAddr::V4(B4));
    assert_eq!((udp.src_port, udp.dst_port), (5004, 6000));
    assert_eq!(udp.ip_offset, 14);
    assert_eq!(udp.udp_offset, 34);
    assert_eq!(udp.payload, 42..42 + 172);
    assert_eq!(capture.packets[2].udp().unwrap().udp_offset, 14 + 24);

    for (name, f) in [
        ("longer", longer as fn(&[u8]) -> Vec<u8>),
        ("shorter", shorter),
    ] {
        let mut capture = Capture::parse(&input).unwrap();
        let out = rewrite(&mut capture, f);
        // Same global header.
        assert_eq!(out[..24], input[..24], "{name}");
        let back = Capture::parse(&out).unwrap();
        assert_eq!(back.packets.len(), 4);
        for (i, (orig, new)) in capture.packets.iter().zip(&back.packets).enumerate() {
            assert_eq!(orig.timestamp_ns(), T0 + i as u64 * 20_000_000);
            assert_eq!(new.timestamp_ns(), orig.timestamp_ns());
            assert_eq!(new.data(), orig.data());
            assert_eq!(new.orig_len() as usize, new.data().len());
        }
        for (i, frame) in frames.iter().enumerate().take(3) {
            let new = &back.packets[i];
            let old_payload = verify_ip_udp(&frame[14..]);
            let payload = verify_ip_udp(&new.data()[14..]);
            assert_eq!(payload, f(&old_payload), "{name} #{i}");
            assert_eq!(
                new.data().len() as isize - frame.len() as isize,
                payload.len() as isize - old_payload.len() as isize
            );
            assert_eq!(new.data()[..14], frame[..14], "link header kept");
            assert_eq!(
                new.udp().unwrap().src(),
                capture.packets[i].udp().unwrap().src()
            );
        }
        // Checksum 0 over IPv4 stays 0.
        let u = back.packets[1].udp().unwrap();
        assert_eq!(u.checksum, 0);
        // ARP untouched.
        assert_eq!(back.packets[3].data(), &frames[3][..]);
    }
}

#[test]
fn ethernet_padding_is_not_payload_and_is_dropped() {
    let ip = ipv4_udp(A4, B4, 1, 2, b"ab", true, &[]);
    let mut frame = ethernet(&[], 0x0800, &ip);
    frame.resize(60, 0); // minimum Ethernet frame
    let p = CapturedPacket::new(LinkType::ETHERNET, 0, frame);
    assert_eq!(p.udp_payload(), Some(&b"ab"[..]));
    let rebuilt = p.with_udp_payload(b"abcd").unwrap();
    assert_eq!(rebuilt.len(), 14 + 20 + 8 + 4);
    assert_eq!(verify_ip_udp(&rebuilt[14..]), b"abcd");
}

#[test]
fn sll_ipv6_pcap_big_endian_nano_roundtrip() {
    let frames = [
        sll(
            0x86dd,
            &ipv6_udp(A6, B6, 40000, 3478, &rtp_payload(9, 100), &[]),
        ),
        sll(
            0x86dd,
            &ipv6_udp(
                B6,
                A6,
                3478,
                40000,
                &rtp_payload(10, 7),
                &[hop_by_hop(), dest_opts()],
            ),
        ),
    ];
    let spec = PcapSpec {
        big_endian: true,
        nano: true,
        link_type: 113,
        snaplen: 262_144,
    };
    let ts = [T0 + 789, T0 + 1_000_000_001];
    let input = pcap_file(
        &spec,
        &frames
            .iter()
            .zip(ts)
            .map(|(f, t)| (t, f.clone(), f.len() as u32))
            .collect::<Vec<_>>(),
    );
    let mut capture = Capture::parse(&input).unwrap();
    assert_eq!(capture.to_bytes().unwrap(), input);
    assert!(capture.format.is_big_endian());
    assert_eq!(capture.format.pcap_precision(), Some(PcapPrecision::Nano));
    assert_eq!(capture.packets[0].timestamp_ns(), ts[0]);
    let u = capture.packets[1].udp().unwrap();
    assert_eq!(u.src_ip, IpAddr::V6(B6));
    assert_eq!(u.udp_offset, 16 + 40 + 16);

    let out = rewrite(&mut capture, longer);
    assert_eq!(out[..24], input[..24]);
    let back = Capture::parse(&out).unwrap();
    for (i, f) in frames.iter().enumerate() {
        let p = &back.packets[i];
        assert_eq!(p.timestamp_ns(), ts[i]);
        assert_eq!(p.data()[..16], f[..16]);
        assert_eq!(
            verify_ip_udp(&p.data()[16..]),
            longer(&verify_ip_udp(&f[16..]))
        );
    }

    let mut capture = Capture::parse(&input).unwrap();
    let out = rewrite(&mut capture, shorter);
    let back = Capture::parse(&out).unwrap();
    for (i, f) in frames.iter().enumerate() {
        assert_eq!(
            verify_ip_udp(&back.packets[i].data()[16..]),
            shorter(&verify_ip_udp(&f[16..]))
        );
    }
}

#[test]
fn sll2_and_raw_ip_and_vlan() {
    let ip4 = ipv4_udp(A4, B4, 5004, 5006, &rtp_payload(1, 50), true, &[]);
    let ip6 = ipv6_udp(A6, B6, 5004, 5006, &rtp_payload(2, 50), &[hop_by_hop()]);
    let cases: Vec<(u32, Vec<u8>, usize)> = vec![
        (276, sll2(0x0800, &ip4), 20),
        (276, sll2(0x86dd, &ip6), 20),
        (101, ip4.clone(), 0),
        (101, ip6.clone(), 0),
        (12, ip4.clone(), 0),
        (14, ip6.clone(), 0),
        (228, ip4.clone(), 0),
        (229, ip6.clone(), 0),
        (1, ethernet(&[(0x8100, 42)], 0x0800, &ip4), 18),
        (
            1,
            ethernet(&[(0x88a8, 100), (0x8100, 42)], 0x86dd, &ip6),
            22,
        ),
        (0, [&2u32.to_le_bytes()[..], &ip4].concat(), 4),
        (108, [&24u32.to_be_bytes()[..], &ip6].concat(), 4),
    ];
    for (link, frame, ip_offset) in cases {
        let spec = PcapSpec {
            big_endian: false,
            nano: true,
            link_type: link,
            snaplen: 65535,
        };
        let input = pcap_file(&spec, &[(T0, frame.clone(), frame.len() as u32)]);
        let mut capture = Capture::parse(&input).unwrap();
        let loc = capture.packets[0]
            .udp()
            .unwrap_or_else(|| panic!("link {link}: {:?}", capture.packets[0].not_udp_reason()));
        assert_eq!(loc.ip_offset, ip_offset, "link {link}");
        assert_eq!((loc.src_port, loc.dst_port), (5004, 5006));
        for f in [longer as fn(&[u8]) -> Vec<u8>, shorter] {
            let mut c = capture.clone();
            let out = rewrite(&mut c, f);
            let back = Capture::parse(&out).unwrap();
            let data = back.packets[0].data();
            assert_eq!(data[..ip_offset], frame[..ip_offset], "link {link}");
            assert_eq!(
                verify_ip_udp(&data[ip_offset..]),
                f(&verify_ip_udp(&frame[ip_offset..])),
                "link {link}"
            );
        }
        // Unchanged write-back is byte-identical.
        assert_eq!(rewrite(&mut capture, |p| p.to_vec()), input, "link {link}");
    }
}

fn two_interface_pcapng() -> (Vec<u8>, Vec<Vec<u8>>) {
    let eth = ethernet(
        &[],
        0x0800,
        &ipv4_udp(A4, B4, 5004, 6000, &rtp_payload(1, 80), true, &[]),
    );
    let raw6 = ipv6_udp(A6, B6, 7000, 7002, &rtp_payload(2, 40), &[]);
    let tcp = ethernet(
        &[],
        0x0800,
        &ipv4_with_protocol(A4, B4, 6, &[0u8; 20], &[], 0),
    );
    let mut file = ng_shb(&[(4, b"secrelay-test".to_vec())]);
    // Interface 0: Ethernet, default microsecond timestamps.
    file.extend(ng_idb(1, 65535, &[(2, b"eth0".to_vec())]));
    // Interface 1: raw IP, nanosecond timestamps.
    file.extend(ng_idb(101, 0, &[(2, b"tun0".to_vec()), (9, vec![9])]));
    file.extend(ng_epb(
        0,
        T0 / 1000,
        &eth,
        eth.len() as u32,
        &[(1, b"first".to_vec())],
    ));
    file.extend(ng_epb(1, T0 + 42, &raw6, raw6.len() as u32, &[]));
    // An interface statistics block in between is skipped.
    file.extend(ng_block(5, &[0u8; 12]));
    file.extend(ng_epb(0, T0 / 1000 + 20_000, &tcp, tcp.len() as u32, &[]));
    (file, vec![eth, raw6, tcp])
}

#[test]
fn pcapng_two_interfaces_roundtrip() {
    let (input, frames) = two_interface_pcapng();
    let capture = Capture::parse(&input).unwrap();
    assert_eq!(capture.format.kind(), CaptureKind::PcapNg);
    assert_eq!(capture.format.interface_count(), 2);
    assert_eq!(capture.format.link_type(0), Some(LinkType::ETHERNET));
    assert_eq!(capture.format.link_type(1), Some(LinkType::RAW));
    assert_eq!(capture.format.snaplen(1), Some(0));
    let p = &capture.packets;
    assert_eq!(p.len(), 3);
    assert_eq!(
        (p[0].interface(), p[1].interface(), p[2].interface()),
        (0, 1, 0)
    );
    // Microsecond and nanosecond resolutions both map to ns.
    assert_eq!(p[0].timestamp_ns(), T0);
    assert_eq!(p[1].timestamp_ns(), T0 + 42);
    assert_eq!(p[2].timestamp_ns(), T0 + 20_000_000);
    assert_eq!(p[0].link_type(), LinkType::ETHERNET);
    assert_eq!(p[1].link_type(), LinkType::RAW);
    assert_eq!(p[2].not_udp_reason(), Some(NotUdp::OtherProtocol(6)));

    // Unchanged: identical apart from the statistics block that is dropped.
    let mut expected = input.clone();
    let isb = ng_block(5, &[0u8; 12]);
    let at = expected.windows(isb.len()).position(|w| w == isb).unwrap();
    expected.drain(at..at + isb.len());
    assert_eq!(capture.to_bytes().unwrap(), expected);

    for f in [longer as fn(&[u8]) -> Vec<u8>, shorter] {
        let mut c = capture.clone();
        let out = rewrite(&mut c, f);
        let back = Capture::parse(&out).unwrap();
        assert_eq!(back.format.interface_count(), 2);
        assert_eq!(back.format.link_type(1), Some(LinkType::RAW));
        for (a, b) in capture.packets.iter().zip(&back.packets) {
            assert_eq!(a.timestamp_ns(), b.timestamp_ns());
            assert_eq!(a.interface(), b.interface());
        }
        assert_eq!(
            verify_ip_udp(&back.packets[0].data()[14..]),
            f(&verify_ip_udp(&frames[0][14..]))
        );
        assert_eq!(
            verify_ip_udp(back.packets[1].data()),
            f(&verify_ip_udp(&frames[1]))
        );
        assert_eq!(back.packets[2].data(), &frames[2][..]);
        // The EPB comment survives.
        assert!(out.windows(5).any(|w| w == b"first"));
        assert!(out.windows(13).any(|w| w == b"secrelay-test"));
    }
}

#[test]
fn pcapng_simple_packet_block_and_later_interface() {
    let ip4 = ipv4_udp(A4, B4, 1000, 2000, b"hello world", true, &[]);
    let mut file = ng_shb(&[]);
    file.extend(ng_idb(228, 0, &[]));
    file.extend(ng_spb(&ip4, ip4.len() as u32));
    // A second interface described after the first packet.
    file.extend(ng_idb(229, 0, &[(9, vec![0x80 | 10])])); // 2^-10 s units
    let ip6 = ipv6_udp(A6, B6, 1, 2, b"x", &[]);
    file.extend(ng_epb(1, 3 * 1024 + 512, &ip6, ip6.len() as u32, &[]));

    // Streaming: the writer learns the late interface from the reader.
    let mut reader = CaptureReader::new(&file[..]).unwrap();
    let first = reader.next_packet().unwrap().unwrap();
    assert_eq!(first.data().len(), ip4.len(), "SPB padding is not data");
    assert_eq!(first.udp_payload(), Some(&b"hello world"[..]));
    assert_eq!(first.timestamp_ns(), 0);
    let mut writer = CaptureWriter::new(Vec::new(), reader.format()).unwrap();
    let mut first = first;
    first.replace_udp_payload(b"bye").unwrap();
    writer.write_packet(&first).unwrap();
    let second = reader.next_packet().unwrap().unwrap();
    assert_eq!(second.timestamp_ns(), 3_500_000_000);
    assert!(matches!(
        writer.write_packet(&second),
        Err(WriteError::UnknownInterface(1))
    ));
    writer.add_new_interfaces(reader.format()).unwrap();
    writer.write_packet(&second).unwrap();
    assert!(reader.next_packet().is_none());
    let out = writer.finish().unwrap();

    let back = Capture::parse(&out).unwrap();
    assert_eq!(back.packets.len(), 2);
    assert_eq!(verify_ip_udp(back.packets[0].data()), b"bye");
    assert_eq!(back.packets[1].timestamp_ns(), 3_500_000_000);
    assert_eq!(back.packets[1].link_type(), LinkType::IPV6);
    // The SPB is still an SPB: SHB (28 bytes), IDB (20 bytes), then block
    // type 3.
    assert_eq!(u32::from_le_bytes(out[48..52].try_into().unwrap()), 3);
}

#[test]
fn simple_packet_block_with_short_data_becomes_enhanced() {
    // An SPB whose data is shorter than its original length without a snap
    // length to explain it cannot be written back as an SPB.
    let ip = ipv4_udp(A4, B4, 1, 2, b"abcdefgh", true, &[]);
    let mut file = ng_shb(&[]);
    file.extend(ng_idb(101, 0, &[]));
    let mut body = (ip.len() as u32 + 100).to_le_bytes().to_vec();
    body.extend_from_slice(&ip);
    file.extend(ng_block(3, &body));
    let capture = Capture::parse(&file).unwrap();
    assert_eq!(capture.packets[0].data(), &ip[..]);
    let out = capture.to_bytes().unwrap();
    let back = Capture::parse(&out).unwrap();
    assert_eq!(back.packets[0].data(), &ip[..]);
    assert_eq!(back.packets[0].orig_len() as usize, ip.len() + 100);
    // SHB 28 + IDB 20, then an EPB (type 6).
    assert_eq!(u32::from_le_bytes(out[48..52].try_into().unwrap()), 6);

    // A well-formed SPB given a timestamp also becomes an EPB, keeping it.
    let mut file = ng_shb(&[]);
    file.extend(ng_idb(101, 0, &[]));
    file.extend(ng_spb(&ip, ip.len() as u32));
    let mut capture = Capture::parse(&file).unwrap();
    assert_eq!(capture.to_bytes().unwrap(), file);
    capture.packets[0].set_timestamp_ns(T0);
    let back = Capture::parse(&capture.to_bytes().unwrap()).unwrap();
    assert_eq!(back.packets[0].timestamp_ns(), T0);
    assert_eq!(back.packets[0].data(), &ip[..]);
}

#[test]
fn build_captures_from_scratch() {
    let frame = ipv4_udp(A4, B4, 1, 2, b"abc", true, &[]);

    let mut format = CaptureFormat::new_pcapng();
    assert_eq!(format.add_interface(LinkType::IPV4, 0), Some(0));
    assert_eq!(format.add_interface(LinkType::ETHERNET, 1500), Some(1));
    let eth = ethernet(&[], 0x0800, &frame);
    let capture = Capture {
        format,
        packets: vec![
            CapturedPacket::new(LinkType::IPV4, T0 + 1, frame.clone()),
            CapturedPacket::new(LinkType::ETHERNET, T0 + 2, eth.clone()).with_interface(1),
        ],
    };
    let bytes = capture.to_bytes().unwrap();
    let back = Capture::parse(&bytes).unwrap();
    assert_eq!(back.packets[0].timestamp_ns(), T0 + 1);
    assert_eq!(back.packets[1].timestamp_ns(), T0 + 2);
    assert_eq!(back.packets[1].data(), &eth[..]);

    // Mismatched link type and oversized packets are refused.
    let mut w = CaptureWriter::new(Vec::new(), &capture.format).unwrap();
    let wrong = CapturedPacket::new(LinkType::RAW, 0, frame.clone());
    assert!(matches!(
        w.write_packet(&wrong),
        Err(WriteError::LinkTypeMismatch { .. })
    ));
    let big = CapturedPacket::new(LinkType::ETHERNET, 0, vec![0; 1501]).with_interface(1);
    assert!(matches!(
        w.write_packet(&big),
        Err(WriteError::ExceedsSnaplen {
            len: 1501,
            snaplen: 1500
        })
    ));
    let mut format = capture.format.clone();
    format.raise_snaplen(65535);
    assert_eq!(format.snaplen(1), Some(65535));
    assert_eq!(format.snaplen(0), Some(0));
    let mut w = CaptureWriter::new(Vec::new(), &format).unwrap();
    w.write_packet(&big).unwrap();

    // Classic pcap, microseconds: sub-microsecond digits are dropped.
    let format = CaptureFormat::new_pcap(LinkType::IPV4, PcapPrecision::Micro, 65535);
    let capture = Capture {
        format,
        packets: vec![CapturedPacket::new(LinkType::IPV4, T0 + 999, frame.clone())],
    };
    let back = Capture::parse(&capture.to_bytes().unwrap()).unwrap();
    assert_eq!(back.packets[0].timestamp_ns(), T0);
    // Beyond 2106 does not fit 32-bit seconds.
    let late = CapturedPacket::new(LinkType::IPV4, u64::MAX, frame);
    let mut w = CaptureWriter::new(Vec::new(), &capture.format).unwrap();
    assert!(matches!(
        w.write_packet(&late),
        Err(WriteError::TimestampOutOfRange(_))
    ));
}

#[test]
fn payload_size_limits() {
    let frame = ipv4_udp(A4, B4, 1, 2, b"abc", true, &[]);
    let p = CapturedPacket::new(LinkType::RAW, 0, frame);
    let max = 65535 - 20 - 8;
    assert_eq!(p.with_udp_payload(&vec![0; max]).unwrap().len(), 65535);
    assert!(matches!(
        p.with_udp_payload(&vec![0; max + 1]),
        Err(RebuildError::TooLarge { max_payload_len, .. }) if max_payload_len == max
    ));
    assert_eq!(p.with_udp_payload(&[]).unwrap().len(), 28);

    let frame6 = ipv6_udp(A6, B6, 1, 2, b"abc", &[hop_by_hop()]);
    let p6 = CapturedPacket::new(LinkType::RAW, 0, frame6);
    let max6 = 65535 - 8 - 8;
    let big = p6.with_udp_payload(&vec![1; max6]).unwrap();
    assert_eq!(verify_ip_udp(&big).len(), max6);
    assert!(p6.with_udp_payload(&vec![0; max6 + 1]).is_err());

    let arp = CapturedPacket::new(LinkType::ETHERNET, 0, ethernet(&[], 0x0806, &[0; 28]));
    assert_eq!(
        arp.with_udp_payload(b"x"),
        Err(RebuildError::NotUdp(NotUdp::NotIp))
    );
}

#[test]
fn truncated_frames_are_counted_not_fatal() {
    let full = ethernet(&[], 0x0800, &ipv4_udp(A4, B4, 1, 2, &[7; 100], true, &[]));
    let spec = PcapSpec {
        big_endian: false,
        nano: false,
        link_type: 1,
        snaplen: 96,
    };
    let input = pcap_file(&spec, &[(T0, full[..96].to_vec(), full.len() as u32)]);
    let capture = Capture::parse(&input).unwrap();
    let p = &capture.packets[0];
    assert_eq!(p.orig_len() as usize, full.len());
    assert_eq!(p.data().len(), 96);
    assert_eq!(p.not_udp_reason(), Some(NotUdp::Truncated));
    assert_eq!(capture.non_udp_count(), 1);
    // Written back as it was (orig_len > snaplen is fine).
    assert_eq!(capture.to_bytes().unwrap(), input);
}

/// The streaming reader buffers only as far as the next record or block needs: records far
/// larger than its first 64 KiB read, many small ones across its chunk boundaries, read
/// through a reader that hands out odd-sized pieces, in both formats, come out as the slice
/// parser gives them.
#[test]
fn the_streaming_reader_grows_for_large_records_and_matches_the_slice_parser() {
    struct Pieces<'a>(&'a [u8], usize);
    impl std::io::Read for Pieces<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            self.1 = (self.1 * 7 + 3) % 5000 + 1;
            let n = self.1.min(buf.len()).min(self.0.len());
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }
    let mut ng = CaptureFormat::new_pcapng();
    ng.add_interface(LinkType::RAW, 0).unwrap();
    for format in [
        CaptureFormat::new_pcap(LinkType::RAW, PcapPrecision::Nano, 0),
        ng,
    ] {
        let mut packets = Vec::new();
        for i in 0..2_000u64 {
            let len = match i {
                500 => 300_000,
                1_500 => 70_000,
                _ => 20 + (i as usize * 13) % 400,
            };
            let frame: Vec<u8> = (0..len).map(|b| (b as u64 ^ i) as u8).collect();
            packets.push(CapturedPacket::new(LinkType::RAW, T0 + i * 1_000, frame));
        }
        let bytes = Capture { format, packets }.to_bytes().unwrap();
        let sliced = Capture::parse(&bytes).unwrap();
        let streamed: Vec<CapturedPacket> = CaptureReader::new(Pieces(&bytes, 0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(streamed.len(), 2_000);
        for (a, b) in sliced.packets.iter().zip(&streamed) {
            assert_eq!(a.data(), b.data());
            assert_eq!(a.timestamp_ns(), b.timestamp_ns());
        }
    }
}
