//! Ethernet II frames carrying UDP over IPv4 or IPv6, as the gateway receives
//! them from and writes them into an AF_XDP socket.
//!
//! [`parse`] treats every frame as untrusted network input: it checks every
//! length and checksum itself and never panics. [`build`] writes a complete
//! frame into a caller's buffer without allocating.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::ops::Range;

use etherparse::checksum::Sum16BitWords;
use etherparse::{
    err, EtherType, Ethernet2Header, IpNumber, Ipv4Header, Ipv4HeaderSlice, Ipv6FlowLabel,
    Ipv6Header, Ipv6HeaderSlice, UdpHeader,
};

/// Ethernet header length.
pub const ETH_LEN: usize = 14;
/// Bytes before the payload of an IPv4 frame we build (Ethernet + IPv4 without options + UDP).
pub const V4_HEADERS: usize = 14 + 20 + 8;
/// The same for IPv6 (no extension headers).
pub const V6_HEADERS: usize = 14 + 40 + 8;

/// EtherType of an IEEE 802.1Q VLAN tag.
const ETHERTYPE_VLAN: u16 = 0x8100;
/// EtherType of an IEEE 802.1ad (QinQ) service tag.
const ETHERTYPE_QINQ: u16 = 0x88a8;
/// TTL (IPv4) and hop limit (IPv6) of the frames we build.
const HOP_LIMIT: u8 = 64;
/// Length of a UDP header.
const UDP_LEN: usize = UdpHeader::LEN;

/// A UDP datagram found in a frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Udp {
    /// The source address and port.
    pub src: SocketAddr,
    /// The destination address and port.
    pub dst: SocketAddr,
    /// The payload's bytes within the frame.
    pub payload: Range<usize>,
}

/// Why a frame is not a UDP datagram we take, or why a frame cannot be built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameError {
    /// The frame ends before the Ethernet header or the IP header does.
    Short,
    /// The EtherType is neither IPv4 nor IPv6.
    NotIp,
    /// The frame carries a VLAN tag (EtherType 0x8100 or 0x88a8).
    Vlan,
    /// The IP packet does not carry UDP directly (another protocol, or IPv6 extension headers).
    NotUdp,
    /// The IPv4 packet is a fragment (MF flag set or fragment offset not zero).
    Fragment,
    /// The IP version does not match the EtherType, or the IPv4 header length is below 20 bytes.
    BadIpHeader,
    /// The IPv4 header checksum does not verify.
    BadIpChecksum,
    /// The IP or UDP length fields disagree with each other or with the frame.
    BadLength,
    /// The UDP checksum does not verify, or is missing (zero) in an IPv6 datagram.
    BadUdpChecksum,
    /// Building: the buffer is too small, or the payload too big for the UDP or IP length field.
    TooLong,
    /// Building: one address is IPv4 and the other IPv6.
    MixedFamilies,
}

impl FrameError {
    /// A stable snake_case name for the error, for use as a metric label.
    pub fn name(self) -> &'static str {
        match self {
            FrameError::Short => "short",
            FrameError::NotIp => "not_ip",
            FrameError::Vlan => "vlan",
            FrameError::NotUdp => "not_udp",
            FrameError::Fragment => "fragment",
            FrameError::BadIpHeader => "bad_ip_header",
            FrameError::BadIpChecksum => "bad_ip_checksum",
            FrameError::BadLength => "bad_length",
            FrameError::BadUdpChecksum => "bad_udp_checksum",
            FrameError::TooLong => "too_long",
            FrameError::MixedFamilies => "mixed_families",
        }
    }
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FrameError::Short => "the frame ends inside its Ethernet or IP header",
            FrameError::NotIp => "the frame does not carry IPv4 or IPv6",
            FrameError::Vlan => "the frame carries a VLAN tag",
            FrameError::NotUdp => "the IP packet does not carry UDP directly",
            FrameError::Fragment => "the IPv4 packet is a fragment",
            FrameError::BadIpHeader => "the IP header is malformed",
            FrameError::BadIpChecksum => "the IPv4 header checksum is wrong",
            FrameError::BadLength => "the IP or UDP lengths are inconsistent",
            FrameError::BadUdpChecksum => "the UDP checksum is wrong or missing",
            FrameError::TooLong => "the frame does not fit the buffer or the length fields",
            FrameError::MixedFamilies => "the addresses are of different IP families",
        })
    }
}

impl std::error::Error for FrameError {}

/// Parses `frame`: Ok with the addresses and where the payload is; Err says why not.
///
/// Bytes after the IP packet (Ethernet padding) are ignored: the IP and UDP
/// length fields, not the frame length, say where the payload ends.
pub fn parse(frame: &[u8]) -> Result<Udp, FrameError> {
    let (eth, ip) = Ethernet2Header::from_slice(frame).map_err(|_| FrameError::Short)?;
    match eth.ether_type {
        EtherType::IPV4 => parse_v4(ip),
        EtherType::IPV6 => parse_v6(ip),
        EtherType(ETHERTYPE_VLAN | ETHERTYPE_QINQ) => Err(FrameError::Vlan),
        _ => Err(FrameError::NotIp),
    }
}

/// Maps an etherparse header error: missing bytes are `Short`, bad contents `BadIpHeader`.
fn header_error(len_error: bool) -> FrameError {
    if len_error {
        FrameError::Short
    } else {
        FrameError::BadIpHeader
    }
}

/// Parses the IPv4 packet `ip` (the frame after its Ethernet header).
fn parse_v4(ip: &[u8]) -> Result<Udp, FrameError> {
    let header = Ipv4HeaderSlice::from_slice(ip)
        .map_err(|e| header_error(matches!(e, err::ipv4::HeaderSliceError::Len(_))))?;
    let header_bytes = header.slice();
    // The one's complement sum over a correct header, checksum included, is 0xffff,
    // whose complement is zero (independent of byte order).
    if Sum16BitWords::new()
        .add_slice(header_bytes)
        .ones_complement()
        != 0
    {
        return Err(FrameError::BadIpChecksum);
    }
    let ihl = header_bytes.len();
    let total = usize::from(header.total_len());
    if total < ihl || total > ip.len() {
        return Err(FrameError::BadLength);
    }
    if header.more_fragments() || header.fragments_offset().value() != 0 {
        return Err(FrameError::Fragment);
    }
    if header.protocol() != IpNumber::UDP {
        return Err(FrameError::NotUdp);
    }
    let segment = ip.get(ihl..total).ok_or(FrameError::BadLength)?;
    let (udp, payload) = parse_udp(segment)?;
    if udp.checksum != 0 {
        let sum = udp
            .calc_checksum_ipv4_raw(header.source(), header.destination(), payload)
            .map_err(|_| FrameError::BadLength)?;
        if sum != udp.checksum {
            return Err(FrameError::BadUdpChecksum);
        }
    }
    Ok(Udp {
        src: SocketAddr::V4(SocketAddrV4::new(header.source_addr(), udp.source_port)),
        dst: SocketAddr::V4(SocketAddrV4::new(
            header.destination_addr(),
            udp.destination_port,
        )),
        payload: ETH_LEN + ihl + UDP_LEN..ETH_LEN + total,
    })
}

/// Parses the IPv6 packet `ip` (the frame after its Ethernet header).
fn parse_v6(ip: &[u8]) -> Result<Udp, FrameError> {
    let header = Ipv6HeaderSlice::from_slice(ip)
        .map_err(|e| header_error(matches!(e, err::ipv6::HeaderSliceError::Len(_))))?;
    // IPv4-mapped addresses do not belong on the wire (RFC 4291 2.5.5.2): the kernel drops
    // such packets, and so does this path.
    if header.source_addr().to_ipv4_mapped().is_some()
        || header.destination_addr().to_ipv4_mapped().is_some()
    {
        return Err(FrameError::BadIpHeader);
    }
    if header.next_header() != IpNumber::UDP {
        return Err(FrameError::NotUdp);
    }
    let end = Ipv6Header::LEN + usize::from(header.payload_length());
    let segment = ip.get(Ipv6Header::LEN..end).ok_or(FrameError::BadLength)?;
    let (udp, payload) = parse_udp(segment)?;
    if udp.checksum == 0 {
        return Err(FrameError::BadUdpChecksum);
    }
    let sum = udp
        .calc_checksum_ipv6_raw(header.source(), header.destination(), payload)
        .map_err(|_| FrameError::BadLength)?;
    if sum != udp.checksum {
        return Err(FrameError::BadUdpChecksum);
    }
    let v6 = |addr: Ipv6Addr, port| SocketAddr::V6(SocketAddrV6::new(addr, port, 0, 0));
    Ok(Udp {
        src: v6(header.source_addr(), udp.source_port),
        dst: v6(header.destination_addr(), udp.destination_port),
        payload: ETH_LEN + Ipv6Header::LEN + UDP_LEN..ETH_LEN + end,
    })
}

/// Splits `segment` (exactly the IP payload) into the UDP header and the UDP
/// payload; the UDP length field must equal the segment's length.
fn parse_udp(segment: &[u8]) -> Result<(UdpHeader, &[u8]), FrameError> {
    let (udp, payload) = UdpHeader::from_slice(segment).map_err(|_| FrameError::BadLength)?;
    if usize::from(udp.length) != segment.len() {
        return Err(FrameError::BadLength);
    }
    Ok((udp, payload))
}

/// MAC addresses of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Macs {
    /// The source MAC address.
    pub src: [u8; 6],
    /// The destination MAC address.
    pub dst: [u8; 6],
}

/// Writes an Ethernet frame carrying `payload` from `src` to `dst` into `buf`: its length.
///
/// Err: TooLong (buf too small, or payload too big for a UDP length/IP
/// length), MixedFamilies (one v4 and one v6 address; an IPv4-mapped IPv6
/// address counts as IPv4 and the frame is then built as IPv4). Bytes of
/// `buf` after the frame are left as they were.
pub fn build(
    buf: &mut [u8],
    macs: Macs,
    src: SocketAddr,
    dst: SocketAddr,
    payload: &[u8],
) -> Result<usize, FrameError> {
    match (src.ip().to_canonical(), dst.ip().to_canonical()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            build_v4(buf, macs, (s, src.port()), (d, dst.port()), payload)
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            build_v6(buf, macs, (s, src.port()), (d, dst.port()), payload)
        }
        _ => Err(FrameError::MixedFamilies),
    }
}

/// Builds an IPv4 frame; see [`build`].
fn build_v4(
    buf: &mut [u8],
    macs: Macs,
    src: (Ipv4Addr, u16),
    dst: (Ipv4Addr, u16),
    payload: &[u8],
) -> Result<usize, FrameError> {
    let len = V4_HEADERS + payload.len();
    if buf.len() < len {
        return Err(FrameError::TooLong);
    }
    let udp_len = u16::try_from(UDP_LEN + payload.len()).map_err(|_| FrameError::TooLong)?;
    let (s, d) = (src.0.octets(), dst.0.octets());
    // Identification 0, DF set, TOS 0, no options.
    let mut ip = Ipv4Header::new(udp_len, HOP_LIMIT, IpNumber::UDP, s, d)
        .map_err(|_| FrameError::TooLong)?;
    ip.header_checksum = ip.calc_header_checksum();
    let mut udp = udp_header(src.1, dst.1, udp_len);
    udp.checksum = udp
        .calc_checksum_ipv4_raw(s, d, payload)
        .map_err(|_| FrameError::TooLong)?;
    let eth = ethernet(macs, EtherType::IPV4);
    write_parts(buf, [&eth, &ip.to_bytes(), &udp.to_bytes(), payload])
}

/// Builds an IPv6 frame; see [`build`].
fn build_v6(
    buf: &mut [u8],
    macs: Macs,
    src: (Ipv6Addr, u16),
    dst: (Ipv6Addr, u16),
    payload: &[u8],
) -> Result<usize, FrameError> {
    let len = V6_HEADERS + payload.len();
    if buf.len() < len {
        return Err(FrameError::TooLong);
    }
    let udp_len = u16::try_from(UDP_LEN + payload.len()).map_err(|_| FrameError::TooLong)?;
    let ip = Ipv6Header {
        traffic_class: 0,
        flow_label: Ipv6FlowLabel::ZERO,
        payload_length: udp_len,
        next_header: IpNumber::UDP,
        hop_limit: HOP_LIMIT,
        source: src.0.octets(),
        destination: dst.0.octets(),
    };
    let mut udp = udp_header(src.1, dst.1, udp_len);
    udp.checksum = udp
        .calc_checksum_ipv6_raw(ip.source, ip.destination, payload)
        .map_err(|_| FrameError::TooLong)?;
    let eth = ethernet(macs, EtherType::IPV6);
    write_parts(buf, [&eth, &ip.to_bytes(), &udp.to_bytes(), payload])
}

/// A UDP header with a zero checksum.
fn udp_header(source_port: u16, destination_port: u16, length: u16) -> UdpHeader {
    UdpHeader {
        source_port,
        destination_port,
        length,
        checksum: 0,
    }
}

/// The serialised Ethernet II header for `macs` and `ether_type`.
fn ethernet(macs: Macs, ether_type: EtherType) -> [u8; ETH_LEN] {
    Ethernet2Header {
        source: macs.src,
        destination: macs.dst,
        ether_type,
    }
    .to_bytes()
}

/// Writes `parts` one after another at the start of `buf`: their total length.
fn write_parts(buf: &mut [u8], parts: [&[u8]; 4]) -> Result<usize, FrameError> {
    let mut at = 0;
    for part in parts {
        let end = at + part.len();
        buf.get_mut(at..end)
            .ok_or(FrameError::TooLong)?
            .copy_from_slice(part);
        at = end;
    }
    Ok(at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::{NetSlice, PacketBuilder, SlicedPacket, TransportSlice};

    const MACS: Macs = Macs {
        src: [0x02, 0, 0, 0, 0, 1],
        dst: [0x02, 0, 0, 0, 0, 2],
    };
    const PAYLOAD: &[u8] = b"hello, media";

    fn v4(a: [u8; 4], port: u16) -> SocketAddr {
        SocketAddr::from((a, port))
    }

    fn v6(a: &str, port: u16) -> SocketAddr {
        SocketAddr::V6(SocketAddrV6::new(a.parse().unwrap(), port, 0, 0))
    }

    fn built(src: SocketAddr, dst: SocketAddr, payload: &[u8]) -> Vec<u8> {
        let mut buf = vec![0u8; 2048];
        let len = build(&mut buf, MACS, src, dst, payload).unwrap();
        buf.truncate(len);
        buf
    }

    fn frame_v4() -> Vec<u8> {
        built(v4([10, 0, 0, 1], 4000), v4([192, 0, 2, 7], 5004), PAYLOAD)
    }

    fn frame_v6() -> Vec<u8> {
        built(v6("2001:db8::1", 4000), v6("2001:db8::7", 5004), PAYLOAD)
    }

    /// Recomputes the IPv4 header checksum of a (modified) frame without options.
    fn fix_ip_checksum(frame: &mut [u8]) {
        frame[24..26].copy_from_slice(&[0, 0]);
        let sum = Sum16BitWords::new()
            .add_slice(&frame[14..34])
            .ones_complement();
        frame[24..26].copy_from_slice(&sum.to_ne_bytes());
    }

    #[test]
    fn round_trip_v4() {
        let (src, dst) = (v4([10, 0, 0, 1], 4000), v4([192, 0, 2, 7], 5004));
        let frame = frame_v4();
        assert_eq!(frame.len(), V4_HEADERS + PAYLOAD.len());
        let udp = parse(&frame).unwrap();
        assert_eq!((udp.src, udp.dst), (src, dst));
        assert_eq!(udp.payload, V4_HEADERS..frame.len());
        assert_eq!(&frame[udp.payload], PAYLOAD);
        assert_eq!(&frame[..12], &[MACS.dst, MACS.src].concat()[..]);
        assert_eq!(&frame[12..14], &[0x08, 0x00]);
        // Version/IHL, TOS, identification, DF, TTL, protocol as specified.
        assert_eq!(&frame[14..16], &[0x45, 0]);
        assert_eq!(&frame[18..24], &[0, 0, 0x40, 0, 64, 17]);
    }

    #[test]
    fn round_trip_v6() {
        let (src, dst) = (v6("2001:db8::1", 4000), v6("2001:db8::7", 5004));
        let frame = frame_v6();
        assert_eq!(frame.len(), V6_HEADERS + PAYLOAD.len());
        let udp = parse(&frame).unwrap();
        assert_eq!((udp.src, udp.dst), (src, dst));
        assert_eq!(udp.payload, V6_HEADERS..frame.len());
        assert_eq!(&frame[udp.payload], PAYLOAD);
        assert_eq!(&frame[12..14], &[0x86, 0xdd]);
        assert_eq!(&frame[14..18], &[0x60, 0, 0, 0]);
        assert_eq!(&frame[20..22], &[17, 64]);
    }

    #[test]
    fn empty_payload_round_trips() {
        let frame = built(v4([10, 0, 0, 1], 1), v4([10, 0, 0, 2], 2), &[]);
        let udp = parse(&frame).unwrap();
        assert_eq!(udp.payload, V4_HEADERS..V4_HEADERS);
    }

    #[test]
    fn ethernet_padding_is_ignored() {
        for mut frame in [frame_v4(), frame_v6()] {
            let expected = parse(&frame).unwrap();
            frame.resize(frame.len().max(60) + 6, 0xaa);
            assert_eq!(parse(&frame), Ok(expected));
        }
    }

    #[test]
    fn flipped_checksums_are_rejected() {
        let mut frame = frame_v4();
        frame[24] ^= 0x01;
        assert_eq!(parse(&frame), Err(FrameError::BadIpChecksum));
        let mut frame = frame_v4();
        frame[40] ^= 0x01;
        assert_eq!(parse(&frame), Err(FrameError::BadUdpChecksum));
        let mut frame = frame_v6();
        frame[60] ^= 0x01;
        assert_eq!(parse(&frame), Err(FrameError::BadUdpChecksum));
        let mut frame = frame_v6();
        *frame.last_mut().unwrap() ^= 0x80;
        assert_eq!(parse(&frame), Err(FrameError::BadUdpChecksum));
    }

    #[test]
    fn zero_udp_checksum_means_none_for_v4_only() {
        let mut frame = frame_v4();
        frame[40..42].copy_from_slice(&[0, 0]);
        assert!(parse(&frame).is_ok());
        let mut frame = frame_v6();
        frame[60..62].copy_from_slice(&[0, 0]);
        assert_eq!(parse(&frame), Err(FrameError::BadUdpChecksum));
    }

    #[test]
    fn truncated_frames_are_rejected() {
        for frame in [frame_v4(), frame_v6()] {
            assert_eq!(parse(&frame[..frame.len() - 1]), Err(FrameError::BadLength));
            assert_eq!(parse(&frame[..ETH_LEN + 19]), Err(FrameError::Short));
            assert_eq!(parse(&frame[..ETH_LEN - 1]), Err(FrameError::Short));
            assert_eq!(parse(&[]), Err(FrameError::Short));
        }
        let v6 = frame_v6();
        assert_eq!(parse(&v6[..ETH_LEN + 39]), Err(FrameError::Short));
    }

    #[test]
    fn fragments_are_rejected() {
        let mut frame = frame_v4();
        frame[20] |= 0x20; // MF
        fix_ip_checksum(&mut frame);
        assert_eq!(parse(&frame), Err(FrameError::Fragment));
        let mut frame = frame_v4();
        frame[21] = 0x01; // fragment offset 8 bytes, DF still set
        fix_ip_checksum(&mut frame);
        assert_eq!(parse(&frame), Err(FrameError::Fragment));
    }

    #[test]
    fn bad_ip_headers_are_rejected() {
        let mut frame = frame_v4();
        frame[14] = 0x44; // IHL 4
        fix_ip_checksum(&mut frame);
        assert_eq!(parse(&frame), Err(FrameError::BadIpHeader));
        let mut frame = frame_v4();
        frame[14] = 0x65; // IPv6 version under the IPv4 EtherType
        assert_eq!(parse(&frame), Err(FrameError::BadIpHeader));
        let mut frame = frame_v6();
        frame[14] = 0x40;
        assert_eq!(parse(&frame), Err(FrameError::BadIpHeader));
        let mut frame = frame_v4();
        frame[14] = 0x4f; // 60-byte header, longer than the packet's 40 bytes
        assert_eq!(parse(&frame[..ETH_LEN + 40]), Err(FrameError::Short));
    }

    #[test]
    fn ip_total_length_is_checked() {
        let mut frame = frame_v4();
        frame[16..18].copy_from_slice(&27u16.to_be_bytes()); // below IHL*4+8
        fix_ip_checksum(&mut frame);
        assert_eq!(parse(&frame), Err(FrameError::BadLength));
        let mut frame = frame_v4();
        frame[16..18].copy_from_slice(&19u16.to_be_bytes()); // below the header
        fix_ip_checksum(&mut frame);
        assert_eq!(parse(&frame), Err(FrameError::BadLength));
    }

    #[test]
    fn udp_length_mismatch_is_rejected() {
        let mut frame = frame_v4();
        frame[38..40].copy_from_slice(&(8 + PAYLOAD.len() as u16 - 1).to_be_bytes());
        assert_eq!(parse(&frame), Err(FrameError::BadLength));
        let mut frame = frame_v6();
        frame[58..60].copy_from_slice(&7u16.to_be_bytes());
        assert_eq!(parse(&frame), Err(FrameError::BadLength));
        let mut frame = frame_v6();
        frame[18..20].copy_from_slice(&7u16.to_be_bytes()); // IPv6 payload below a UDP header
        assert_eq!(parse(&frame), Err(FrameError::BadLength));
    }

    #[test]
    fn vlan_and_non_ip_are_rejected() {
        let builder = PacketBuilder::ethernet2(MACS.src, MACS.dst)
            .single_vlan(etherparse::VlanId::try_new(7).unwrap())
            .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            .udp(1, 2);
        let mut frame = Vec::new();
        builder.write(&mut frame, PAYLOAD).unwrap();
        assert_eq!(parse(&frame), Err(FrameError::Vlan));
        let mut frame = frame_v4();
        frame[12..14].copy_from_slice(&[0x88, 0xa8]);
        assert_eq!(parse(&frame), Err(FrameError::Vlan));
        frame[12..14].copy_from_slice(&[0x08, 0x06]); // ARP
        assert_eq!(parse(&frame), Err(FrameError::NotIp));
    }

    #[test]
    fn tcp_is_not_udp() {
        let builder = PacketBuilder::ethernet2(MACS.src, MACS.dst)
            .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            .tcp(1, 2, 0, 1024);
        let mut frame = Vec::new();
        builder.write(&mut frame, PAYLOAD).unwrap();
        assert_eq!(parse(&frame), Err(FrameError::NotUdp));
        let builder = PacketBuilder::ethernet2(MACS.src, MACS.dst)
            .ipv6([1; 16], [2; 16], 64)
            .tcp(1, 2, 0, 1024);
        let mut frame = Vec::new();
        builder.write(&mut frame, PAYLOAD).unwrap();
        assert_eq!(parse(&frame), Err(FrameError::NotUdp));
    }

    #[test]
    fn ipv6_extension_header_is_not_udp() {
        let plain = frame_v6();
        let mut frame = plain[..54].to_vec();
        frame[20] = 0; // next header: hop-by-hop options
        let payload_len = (plain.len() - 54 + 8) as u16;
        frame[18..20].copy_from_slice(&payload_len.to_be_bytes());
        frame.extend_from_slice(&[17, 0, 1, 4, 0, 0, 0, 0]); // next UDP, PadN
        frame.extend_from_slice(&plain[54..]);
        assert_eq!(parse(&frame), Err(FrameError::NotUdp));
    }

    #[test]
    fn parses_what_etherparse_builds() {
        let builder = PacketBuilder::ethernet2(MACS.src, MACS.dst)
            .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 20)
            .udp(4000, 5004);
        let mut frame = Vec::new();
        builder.write(&mut frame, PAYLOAD).unwrap();
        let udp = parse(&frame).unwrap();
        assert_eq!(udp.src, v4([10, 0, 0, 1], 4000));
        assert_eq!(udp.dst, v4([10, 0, 0, 2], 5004));
        assert_eq!(&frame[udp.payload], PAYLOAD);

        let (s, d) = (
            "2001:db8::1".parse::<Ipv6Addr>().unwrap(),
            Ipv6Addr::LOCALHOST,
        );
        let builder = PacketBuilder::ethernet2(MACS.src, MACS.dst)
            .ipv6(s.octets(), d.octets(), 20)
            .udp(4000, 5004);
        let mut frame = Vec::new();
        builder.write(&mut frame, PAYLOAD).unwrap();
        let udp = parse(&frame).unwrap();
        assert_eq!(udp.src, v6("2001:db8::1", 4000));
        assert_eq!(udp.dst, v6("::1", 5004));
        assert_eq!(&frame[udp.payload], PAYLOAD);
    }

    /// Checks `frame` with etherparse: addresses, ports, payload and checksums.
    fn etherparse_view(frame: &[u8]) -> (IpAddr, IpAddr, u16, u16, Vec<u8>) {
        let sliced = SlicedPacket::from_ethernet(frame).unwrap();
        let (src, dst) = match sliced.net.unwrap() {
            NetSlice::Ipv4(ip) => {
                let h = ip.header();
                assert_eq!(h.header_checksum(), h.to_header().calc_header_checksum());
                assert!(h.dont_fragment());
                (
                    IpAddr::V4(h.source_addr()),
                    IpAddr::V4(h.destination_addr()),
                )
            }
            NetSlice::Ipv6(ip) => (
                IpAddr::V6(ip.header().source_addr()),
                IpAddr::V6(ip.header().destination_addr()),
            ),
            NetSlice::Arp(_) => panic!("not IP"),
        };
        let Some(TransportSlice::Udp(udp)) = sliced.transport else {
            panic!("not UDP")
        };
        (
            src,
            dst,
            udp.source_port(),
            udp.destination_port(),
            udp.payload().to_vec(),
        )
    }

    #[test]
    fn etherparse_parses_what_we_build() {
        let cases = [
            (v4([10, 0, 0, 1], 4000), v4([192, 0, 2, 7], 5004)),
            (v6("2001:db8::1", 4000), v6("2001:db8::7", 5004)),
        ];
        for (src, dst) in cases {
            let frame = built(src, dst, PAYLOAD);
            let view = etherparse_view(&frame);
            assert_eq!(view, (src.ip(), dst.ip(), 4000, 5004, PAYLOAD.to_vec()));
            // etherparse's own checksum of the datagram must match ours.
            let sliced = SlicedPacket::from_ethernet(&frame).unwrap();
            let Some(TransportSlice::Udp(udp)) = sliced.transport else {
                panic!("not UDP")
            };
            let expected = match sliced.net.unwrap() {
                NetSlice::Ipv4(ip) => udp
                    .to_header()
                    .calc_checksum_ipv4(&ip.header().to_header(), udp.payload()),
                NetSlice::Ipv6(ip) => udp
                    .to_header()
                    .calc_checksum_ipv6(&ip.header().to_header(), udp.payload()),
                NetSlice::Arp(_) => panic!("not IP"),
            };
            assert_eq!(Ok(udp.checksum()), expected);
        }
    }

    #[test]
    fn too_small_buffer_or_payload_too_big() {
        let (src, dst) = (v4([10, 0, 0, 1], 1), v4([10, 0, 0, 2], 2));
        let mut buf = [0u8; V4_HEADERS + 3];
        assert_eq!(
            build(&mut buf, MACS, src, dst, b"four"),
            Err(FrameError::TooLong)
        );
        assert_eq!(build(&mut buf, MACS, src, dst, b"abc"), Ok(V4_HEADERS + 3));
        let (s6, d6) = (v6("::1", 1), v6("::2", 2));
        assert_eq!(build(&mut buf, MACS, s6, d6, b""), Err(FrameError::TooLong));

        let mut big = vec![0u8; 70_000 + V6_HEADERS];
        let max_v4 = vec![0u8; 65_535 - 28];
        assert_eq!(
            build(&mut big, MACS, src, dst, &max_v4),
            Ok(V4_HEADERS + max_v4.len())
        );
        let over_v4 = vec![0u8; 65_535 - 28 + 1];
        assert_eq!(
            build(&mut big, MACS, src, dst, &over_v4),
            Err(FrameError::TooLong)
        );
        let max_v6 = vec![0u8; 65_535 - 8];
        assert_eq!(
            build(&mut big, MACS, s6, d6, &max_v6),
            Ok(V6_HEADERS + max_v6.len())
        );
        let over_v6 = vec![0u8; 65_535 - 8 + 1];
        assert_eq!(
            build(&mut big, MACS, s6, d6, &over_v6),
            Err(FrameError::TooLong)
        );
    }

    #[test]
    fn mixed_families_are_rejected() {
        let mut buf = [0u8; 256];
        let (a4, a6) = (v4([10, 0, 0, 1], 1), v6("2001:db8::1", 2));
        assert_eq!(
            build(&mut buf, MACS, a4, a6, PAYLOAD),
            Err(FrameError::MixedFamilies)
        );
        assert_eq!(
            build(&mut buf, MACS, a6, a4, PAYLOAD),
            Err(FrameError::MixedFamilies)
        );
        let mapped = v6("::ffff:10.0.0.9", 3);
        assert_eq!(
            build(&mut buf, MACS, mapped, a6, PAYLOAD),
            Err(FrameError::MixedFamilies)
        );
    }

    #[test]
    fn v4_mapped_address_is_built_as_v4() {
        let mapped = v6("::ffff:192.0.2.7", 5004);
        let frame = built(v4([10, 0, 0, 1], 4000), mapped, PAYLOAD);
        assert_eq!(frame.len(), V4_HEADERS + PAYLOAD.len());
        let udp = parse(&frame).unwrap();
        assert_eq!(udp.dst, v4([192, 0, 2, 7], 5004));
        let frame = built(mapped, v6("::ffff:10.0.0.1", 1), PAYLOAD);
        assert_eq!(parse(&frame).unwrap().src, v4([192, 0, 2, 7], 5004));
    }

    #[test]
    fn an_ipv6_frame_with_a_v4_mapped_address_is_refused() {
        let frame = built(v6("2001:db8::1", 4000), v6("2001:db8::2", 5004), PAYLOAD);
        for at in [22, 38] {
            // The address (source at 22, destination at 38) made ::ffff:10.0.0.1.
            let mut f = frame.clone();
            f[at..at + 16]
                .copy_from_slice(&"::ffff:10.0.0.1".parse::<Ipv6Addr>().unwrap().octets());
            assert_eq!(parse(&f), Err(FrameError::BadIpHeader));
        }
    }

    /// Rebuilds an accepted frame and checks that it parses to the same datagram.
    fn assert_rebuilds(frame: &[u8]) {
        let Ok(udp) = parse(frame) else { return };
        let payload = &frame[udp.payload.clone()];
        let again = built(udp.src, udp.dst, payload);
        let reparsed = parse(&again).unwrap();
        assert_eq!((reparsed.src, reparsed.dst), (udp.src, udp.dst));
        assert_eq!(&again[reparsed.payload], payload);
    }

    #[test]
    fn every_byte_change_and_truncation_is_safe() {
        for frame in [frame_v4(), frame_v6()] {
            let mut accepted = 0;
            for len in 0..=frame.len() {
                accepted += usize::from(parse(&frame[..len]).is_ok());
            }
            assert_eq!(accepted, 1, "only the whole frame parses");
            for at in 0..frame.len() {
                for bits in [0x01, 0x80, 0xff] {
                    let mut changed = frame.clone();
                    changed[at] ^= bits;
                    assert_rebuilds(&changed);
                }
            }
        }
    }

    #[test]
    fn names_and_messages() {
        assert_eq!(FrameError::BadUdpChecksum.name(), "bad_udp_checksum");
        assert_eq!(FrameError::MixedFamilies.name(), "mixed_families");
        assert_eq!(FrameError::Vlan.to_string(), "the frame carries a VLAN tag");
        let all = [
            FrameError::Short,
            FrameError::NotIp,
            FrameError::Vlan,
            FrameError::NotUdp,
            FrameError::Fragment,
            FrameError::BadIpHeader,
            FrameError::BadIpChecksum,
            FrameError::BadLength,
            FrameError::BadUdpChecksum,
            FrameError::TooLong,
            FrameError::MixedFamilies,
        ];
        let names: std::collections::HashSet<_> = all.iter().map(|e| e.name()).collect();
        assert_eq!(names.len(), all.len());
        assert!(all.iter().all(|e| !e.to_string().is_empty()));
    }
}
