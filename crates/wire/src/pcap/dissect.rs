//! Locating the UDP datagram inside a captured link-layer frame, and
//! rebuilding the frame around a new UDP payload.

use core::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::ops::Range;

use etherparse::checksum::Sum16BitWords;
use etherparse::{
    ether_type, ip_number, EtherType, Ethernet2Slice, IpPayloadSlice, Ipv4Slice, Ipv6Slice,
    LenSource, LinuxSllProtocolType, LinuxSllSlice, SingleVlanSlice, UdpHeader, UdpSlice,
};

/// A pcap/pcapng link-layer header type (LINKTYPE_* value from the
/// tcpdump.org registry).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LinkType(pub u32);

impl LinkType {
    /// BSD loopback: 4-byte address family in host byte order (0).
    pub const NULL: LinkType = LinkType(0);
    /// Ethernet II, optionally with 802.1Q / 802.1ad (QinQ) tags (1).
    pub const ETHERNET: LinkType = LinkType(1);
    /// Raw IP as written by some BSDs (DLT_RAW = 12).
    pub const RAW_BSD12: LinkType = LinkType(12);
    /// Raw IP as written by OpenBSD (DLT_RAW = 14).
    pub const RAW_BSD14: LinkType = LinkType(14);
    /// Raw IPv4 or IPv6, version from the first nibble (101).
    pub const RAW: LinkType = LinkType(101);
    /// OpenBSD loopback: 4-byte address family in network byte order (108).
    pub const LOOP: LinkType = LinkType(108);
    /// Linux "cooked" capture v1, 16-byte header (113).
    pub const LINUX_SLL: LinkType = LinkType(113);
    /// Raw IPv4 (228).
    pub const IPV4: LinkType = LinkType(228);
    /// Raw IPv6 (229).
    pub const IPV6: LinkType = LinkType(229);
    /// Linux "cooked" capture v2, 20-byte header (276).
    pub const LINUX_SLL2: LinkType = LinkType(276);

    /// Whether [`locate_udp`] understands this link type.
    pub fn is_supported(self) -> bool {
        matches!(self.0, 0 | 1 | 12 | 14 | 101 | 108 | 113 | 228 | 229 | 276)
    }
}

impl fmt::Display for LinkType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self.0 {
            0 => "NULL",
            1 => "ETHERNET",
            12 | 14 | 101 => "RAW",
            108 => "LOOP",
            113 => "LINUX_SLL",
            228 => "IPV4",
            229 => "IPV6",
            276 => "LINUX_SLL2",
            _ => return write!(f, "LINKTYPE {}", self.0),
        };
        write!(f, "{name} ({})", self.0)
    }
}

/// Why a captured frame has no usable UDP datagram. Such frames are still
/// returned (and written back unchanged); this says what was found instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NotUdp {
    /// The capture's link type is not one this crate dissects.
    UnsupportedLinkType(LinkType),
    /// The captured bytes end before a header, or before the IP datagram the
    /// IP header announces (snap length, or a cut frame).
    Truncated,
    /// The link-layer header is invalid (e.g. an unknown Linux SLL packet
    /// type or protocol).
    MalformedLink,
    /// The link layer carries something other than IPv4/IPv6 (ARP, LLC,
    /// MACsec, more than [`MAX_VLAN_TAGS`] VLAN tags, ...).
    NotIp,
    /// The IPv4/IPv6 header or an extension header is invalid, or its length
    /// fields are inconsistent.
    MalformedIp,
    /// The datagram is an IP fragment; fragments are not reassembled.
    Fragment,
    /// The transport protocol (IP protocol number) is not UDP.
    OtherProtocol(u8),
    /// The UDP header is cut or its length field is inconsistent with the IP
    /// length.
    MalformedUdp,
}

impl fmt::Display for NotUdp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NotUdp::UnsupportedLinkType(l) => write!(f, "unsupported link type {l}"),
            NotUdp::Truncated => f.write_str("frame is truncated"),
            NotUdp::MalformedLink => f.write_str("malformed link-layer header"),
            NotUdp::NotIp => f.write_str("not an IPv4/IPv6 frame"),
            NotUdp::MalformedIp => f.write_str("malformed IP header"),
            NotUdp::Fragment => f.write_str("IP fragment (not reassembled)"),
            NotUdp::OtherProtocol(p) => write!(f, "IP protocol {p} is not UDP"),
            NotUdp::MalformedUdp => f.write_str("malformed UDP header"),
        }
    }
}

impl std::error::Error for NotUdp {}

/// Most 802.1Q/802.1ad tags followed in one Ethernet frame.
pub const MAX_VLAN_TAGS: usize = 4;

/// IP version of the network layer carrying a UDP datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IpVersion {
    /// IPv4.
    V4,
    /// IPv6.
    V6,
}

/// Where a UDP datagram sits inside a captured frame, and its addressing.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct UdpLocation {
    /// IP version of the enclosing header.
    pub ip_version: IpVersion,
    /// Source IP address.
    pub src_ip: IpAddr,
    /// Destination IP address (for IPv6, the one in the fixed header).
    pub dst_ip: IpAddr,
    /// UDP source port.
    pub src_port: u16,
    /// UDP destination port.
    pub dst_port: u16,
    /// The UDP checksum as captured (0 means "not computed", IPv4 only).
    pub checksum: u16,
    /// Offset of the IP header in the frame.
    pub ip_offset: usize,
    /// Offset of the UDP header in the frame.
    pub udp_offset: usize,
    /// Byte range of the UDP payload in the frame.
    pub payload: Range<usize>,
}

impl UdpLocation {
    /// Source address and port.
    pub fn src(&self) -> SocketAddr {
        SocketAddr::new(self.src_ip, self.src_port)
    }

    /// Destination address and port.
    pub fn dst(&self) -> SocketAddr {
        SocketAddr::new(self.dst_ip, self.dst_port)
    }

    /// Length of the UDP payload in bytes.
    pub fn payload_len(&self) -> usize {
        self.payload.len()
    }
}

/// Which network header the link layer announced.
#[derive(Clone, Copy)]
enum NetHint {
    V4,
    V6,
    /// Decide from the IP version nibble.
    Any,
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    match b.get(at..at.checked_add(2)?) {
        Some(&[x, y]) => Some(u16::from_be_bytes([x, y])),
        _ => None,
    }
}

/// Offset of `inner` inside `outer`; `inner` must be a sub-slice of `outer`.
fn offset_in(outer: &[u8], inner: &[u8]) -> Option<usize> {
    let start = (inner.as_ptr() as usize).checked_sub(outer.as_ptr() as usize)?;
    (start.checked_add(inner.len())? <= outer.len()).then_some(start)
}

fn len_error(err: &etherparse::err::LenError) -> NotUdp {
    if err.len_source == LenSource::Slice {
        NotUdp::Truncated
    } else {
        NotUdp::MalformedIp
    }
}

/// Follows VLAN tags from an EtherType at `frame[at - 2..at]` onwards and
/// returns the offset of the network header.
fn after_ether_type(
    frame: &[u8],
    mut at: usize,
    mut ether_type: EtherType,
) -> Result<(usize, NetHint), NotUdp> {
    let mut tags = 0;
    loop {
        match ether_type {
            ether_type::IPV4 => return Ok((at, NetHint::V4)),
            ether_type::IPV6 => return Ok((at, NetHint::V6)),
            ether_type::VLAN_TAGGED_FRAME
            | ether_type::PROVIDER_BRIDGING
            | ether_type::VLAN_DOUBLE_TAGGED_FRAME => {
                tags += 1;
                if tags > MAX_VLAN_TAGS {
                    return Err(NotUdp::NotIp);
                }
                let rest = frame.get(at..).ok_or(NotUdp::Truncated)?;
                let vlan = SingleVlanSlice::from_slice(rest).map_err(|_| NotUdp::Truncated)?;
                ether_type = vlan.ether_type();
                at += vlan.header_len();
            }
            _ => return Err(NotUdp::NotIp),
        }
    }
}

fn link_payload(link_type: LinkType, frame: &[u8]) -> Result<(usize, NetHint), NotUdp> {
    match link_type.0 {
        1 => {
            let eth =
                Ethernet2Slice::from_slice_without_fcs(frame).map_err(|_| NotUdp::Truncated)?;
            after_ether_type(frame, eth.header_len(), eth.ether_type())
        }
        113 => {
            let sll = LinuxSllSlice::from_slice(frame).map_err(|e| match e {
                etherparse::err::linux_sll::HeaderSliceError::Len(_) => NotUdp::Truncated,
                etherparse::err::linux_sll::HeaderSliceError::Content(_) => NotUdp::MalformedLink,
            })?;
            match sll.protocol_type() {
                LinuxSllProtocolType::EtherType(et) => {
                    after_ether_type(frame, sll.header_len(), et)
                }
                _ => Err(NotUdp::NotIp),
            }
        }
        276 => {
            // SLL2: protocol type (2), reserved (2), interface index (4),
            // ARPHRD type (2), packet type (1), address length (1),
            // address (8).
            const SLL2_LEN: usize = 20;
            if frame.len() < SLL2_LEN {
                return Err(NotUdp::Truncated);
            }
            let protocol = be16(frame, 0).ok_or(NotUdp::Truncated)?;
            after_ether_type(frame, SLL2_LEN, EtherType(protocol))
        }
        0 | 108 => {
            let family = frame.get(..4).ok_or(NotUdp::Truncated)?;
            let family = [family[0], family[1], family[2], family[3]];
            let value = if link_type.0 == 108 {
                u32::from_be_bytes(family)
            } else if u32::from_le_bytes(family) < 0x1_0000 {
                // Host byte order of the capturing machine: accept both.
                u32::from_le_bytes(family)
            } else {
                u32::from_be_bytes(family)
            };
            match value {
                2 => Ok((4, NetHint::V4)),
                // AF_INET6 on NetBSD/OpenBSD, FreeBSD, macOS, and Linux.
                24 | 28 | 30 | 10 => Ok((4, NetHint::V6)),
                _ => Err(NotUdp::NotIp),
            }
        }
        12 | 14 | 101 => Ok((0, NetHint::Any)),
        228 => Ok((0, NetHint::V4)),
        229 => Ok((0, NetHint::V6)),
        _ => Err(NotUdp::UnsupportedLinkType(link_type)),
    }
}

/// Finds the UDP datagram in a frame of the given link type.
///
/// Handles Ethernet (with up to [`MAX_VLAN_TAGS`] 802.1Q/QinQ tags), Linux
/// SLL and SLL2, BSD NULL/LOOP, and raw IPv4/IPv6; IPv4 options and IPv6
/// extension headers are skipped. Trailing link-layer bytes after the IP
/// datagram (Ethernet padding, FCS) are ignored. Never panics.
pub fn locate_udp(link_type: LinkType, frame: &[u8]) -> Result<UdpLocation, NotUdp> {
    let (ip_offset, hint) = link_payload(link_type, frame)?;
    let ip = frame.get(ip_offset..).ok_or(NotUdp::Truncated)?;
    let hint = match hint {
        NetHint::Any => match ip.first().map(|b| b >> 4) {
            None => return Err(NotUdp::Truncated),
            Some(4) => NetHint::V4,
            Some(6) => NetHint::V6,
            Some(_) => return Err(NotUdp::MalformedIp),
        },
        other => other,
    };

    let (version, src_ip, dst_ip, payload): (IpVersion, IpAddr, IpAddr, IpPayloadSlice<'_>) =
        match hint {
            NetHint::V6 => {
                let v6 = Ipv6Slice::from_slice(ip).map_err(|e| match e {
                    etherparse::err::ipv6::SliceError::Len(l) => len_error(&l),
                    _ => NotUdp::MalformedIp,
                })?;
                let h = v6.header();
                (
                    IpVersion::V6,
                    IpAddr::V6(Ipv6Addr::from(h.source())),
                    IpAddr::V6(Ipv6Addr::from(h.destination())),
                    v6.payload().clone(),
                )
            }
            _ => {
                let v4 = Ipv4Slice::from_slice(ip).map_err(|e| match e {
                    etherparse::err::ipv4::SliceError::Len(l) => len_error(&l),
                    _ => NotUdp::MalformedIp,
                })?;
                let h = v4.header();
                (
                    IpVersion::V4,
                    IpAddr::V4(Ipv4Addr::from(h.source())),
                    IpAddr::V4(Ipv4Addr::from(h.destination())),
                    v4.payload().clone(),
                )
            }
        };

    if payload.fragmented {
        return Err(NotUdp::Fragment);
    }
    if payload.ip_number != ip_number::UDP {
        return Err(NotUdp::OtherProtocol(payload.ip_number.0));
    }
    let udp_offset = ip_offset + offset_in(ip, payload.payload).ok_or(NotUdp::MalformedIp)?;
    let udp = UdpSlice::from_slice(payload.payload).map_err(|_| {
        if payload.len_source == LenSource::Slice {
            NotUdp::Truncated
        } else {
            NotUdp::MalformedUdp
        }
    })?;
    let payload_start = udp_offset + UdpHeader::LEN;
    let payload_end = payload_start + udp.payload().len();
    if payload_end > frame.len() {
        return Err(NotUdp::Truncated);
    }
    Ok(UdpLocation {
        ip_version: version,
        src_ip,
        dst_ip,
        src_port: udp.source_port(),
        dst_port: udp.destination_port(),
        checksum: udp.checksum(),
        ip_offset,
        udp_offset,
        payload: payload_start..payload_end,
    })
}

/// Why a frame could not be rebuilt around a new UDP payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RebuildError {
    /// The packet has no UDP datagram to rebuild.
    NotUdp(NotUdp),
    /// The new payload does not fit the 16-bit UDP/IP length fields.
    TooLarge {
        /// Length of the payload that was offered.
        payload_len: usize,
        /// Largest payload that fits.
        max_payload_len: usize,
    },
}

impl fmt::Display for RebuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RebuildError::NotUdp(r) => write!(f, "packet has no UDP datagram: {r}"),
            RebuildError::TooLarge {
                payload_len,
                max_payload_len,
            } => write!(
                f,
                "UDP payload of {payload_len} bytes exceeds the maximum of {max_payload_len}"
            ),
        }
    }
}

impl std::error::Error for RebuildError {}

fn put16(buf: &mut [u8], at: usize, v: u16) {
    if let Some(dst) = buf.get_mut(at..at + 2) {
        dst.copy_from_slice(&v.to_be_bytes());
    }
}

/// Rebuilds `frame` (whose UDP datagram is at `loc`, as returned by
/// [`locate_udp`] for this exact frame) with `new_payload` as UDP payload.
pub(crate) fn rebuild(
    frame: &[u8],
    loc: &UdpLocation,
    new_payload: &[u8],
) -> Result<Vec<u8>, RebuildError> {
    let udp = loc.udp_offset;
    let ip = loc.ip_offset;
    let inconsistent = RebuildError::NotUdp(NotUdp::MalformedIp);
    // Bytes of IP header (incl. options / extension headers) before UDP.
    let ip_overhead = udp.checked_sub(ip).ok_or(inconsistent)?;
    let length_covers = match loc.ip_version {
        IpVersion::V4 => ip_overhead,
        IpVersion::V6 => ip_overhead.checked_sub(40).ok_or(inconsistent)?,
    };
    let max_payload_len = usize::from(u16::MAX) - UdpHeader::LEN - length_covers.min(65_527);
    let too_large = RebuildError::TooLarge {
        payload_len: new_payload.len(),
        max_payload_len,
    };
    if new_payload.len() > max_payload_len {
        return Err(too_large);
    }
    let udp_len = (UdpHeader::LEN + new_payload.len()) as u16;
    let ip_len = (length_covers + usize::from(udp_len)) as u16;

    let headers = frame.get(..udp + UdpHeader::LEN).ok_or(inconsistent)?;
    let mut out = Vec::with_capacity(headers.len() + new_payload.len());
    out.extend_from_slice(headers);
    out.extend_from_slice(new_payload);

    put16(&mut out, udp + 4, udp_len);
    let header = UdpHeader {
        source_port: loc.src_port,
        destination_port: loc.dst_port,
        length: udp_len,
        checksum: 0,
    };
    let checksum = match (loc.ip_version, loc.src_ip, loc.dst_ip) {
        (IpVersion::V4, IpAddr::V4(src), IpAddr::V4(dst)) => {
            put16(&mut out, ip + 2, ip_len);
            put16(&mut out, ip + 10, 0);
            let ihl = usize::from(out[ip] & 0x0f) * 4;
            let ip_header = out.get(ip..ip + ihl).ok_or(inconsistent)?;
            let sum = Sum16BitWords::new()
                .add_slice(ip_header)
                .ones_complement()
                .to_be();
            put16(&mut out, ip + 10, sum);
            if loc.checksum == 0 {
                0
            } else {
                header
                    .calc_checksum_ipv4_raw(src.octets(), dst.octets(), new_payload)
                    .map_err(|_| too_large)?
            }
        }
        (IpVersion::V6, IpAddr::V6(src), IpAddr::V6(dst)) => {
            // A payload length of 0 means "to the end of the frame"
            // (jumbogram / offloaded capture): keep it that way.
            if be16(frame, ip + 4) != Some(0) {
                put16(&mut out, ip + 4, ip_len);
            }
            header
                .calc_checksum_ipv6_raw(src.octets(), dst.octets(), new_payload)
                .map_err(|_| too_large)?
        }
        _ => return Err(inconsistent),
    };
    put16(&mut out, udp + 6, checksum);
    Ok(out)
}
