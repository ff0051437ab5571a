//! Reading, rewriting and writing packet captures (pcap and pcapng).
//!
//! File framing is done by the [`pcap-file`](https://docs.rs/pcap-file)
//! crate and header dissection by [`etherparse`](https://docs.rs/etherparse);
//! this module adds UDP location, payload replacement with length and
//! checksum fixes, and same-format write-back.
//!
//! ```
//! use secrelay_wire::pcap::{Capture, CaptureFormat, CapturedPacket, LinkType, PcapPrecision};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // A raw-IP capture with one IPv4/UDP packet carrying "hi".
//! let format = CaptureFormat::new_pcap(LinkType::RAW, PcapPrecision::Nano, 65535);
//! let frame = vec![
//!     0x45, 0, 0, 30, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2, // IPv4
//!     0x13, 0x88, 0x13, 0x89, 0, 10, 0, 0, // UDP, checksum 0
//!     b'h', b'i',
//! ];
//! let capture = Capture {
//!     format,
//!     packets: vec![CapturedPacket::new(LinkType::RAW, 1_700_000_000_000_000_000, frame)],
//! };
//! let bytes = capture.to_bytes()?;
//!
//! let mut read = Capture::parse(&bytes)?;
//! let packet = &mut read.packets[0];
//! assert_eq!(packet.udp_payload(), Some(&b"hi"[..]));
//! packet.replace_udp_payload(b"hello")?;
//! assert_eq!(packet.udp_payload(), Some(&b"hello"[..]));
//! let rewritten = read.to_bytes()?; // same format as the input
//! # let _ = rewritten;
//! # Ok(())
//! # }
//! ```

use core::fmt;
use std::io::{Read, Write};
use std::time::Duration;

use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketOption;

mod dissect;
mod format;
mod reader;
mod writer;

pub use dissect::{
    locate_udp, IpVersion, LinkType, NotUdp, RebuildError, UdpLocation, MAX_VLAN_TAGS,
};
pub use format::{CaptureFormat, CaptureKind, PcapPrecision};
pub use reader::CaptureReader;
pub use writer::CaptureWriter;

/// A malformed or unreadable capture file.
#[derive(Debug)]
#[non_exhaustive]
pub enum CaptureError {
    /// Reading failed.
    Io(std::io::Error),
    /// The input is shorter than a magic number (4 bytes).
    TooShort,
    /// The magic number is neither pcap (either byte order, micro- or
    /// nanosecond) nor pcapng.
    UnknownFormat {
        /// The first four bytes of the input.
        magic: [u8; 4],
    },
    /// The file ends inside a header, packet record or block.
    Truncated,
    /// A header, record or block is invalid; says which field.
    Malformed(&'static str),
    /// A pcapng packet refers to an interface that was not described in
    /// its section (the section-local id).
    UnknownInterface(u32),
}

impl fmt::Display for CaptureError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CaptureError::Io(e) => write!(f, "cannot read capture: {e}"),
            CaptureError::TooShort => f.write_str("capture is too short to hold a magic number"),
            CaptureError::UnknownFormat { magic } => write!(
                f,
                "not a pcap or pcapng file (magic {:02x}{:02x}{:02x}{:02x})",
                magic[0], magic[1], magic[2], magic[3]
            ),
            CaptureError::Truncated => f.write_str("capture is truncated"),
            CaptureError::Malformed(what) => write!(f, "malformed capture: {what}"),
            CaptureError::UnknownInterface(id) => {
                write!(f, "packet refers to undescribed interface {id}")
            }
        }
    }
}

impl std::error::Error for CaptureError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CaptureError::Io(e) => Some(e),
            _ => None,
        }
    }
}

/// A packet could not be written.
#[derive(Debug)]
#[non_exhaustive]
pub enum WriteError {
    /// Writing failed.
    Io(std::io::Error),
    /// The packet's interface is not in the writer's format.
    UnknownInterface(u32),
    /// The packet's link type differs from its interface's.
    LinkTypeMismatch {
        /// The packet's interface.
        interface: u32,
        /// The interface's link type.
        expected: LinkType,
        /// The packet's link type.
        found: LinkType,
    },
    /// The packet is longer than the interface's snap length.
    ExceedsSnaplen {
        /// Captured length of the packet.
        len: usize,
        /// The snap length.
        snaplen: u32,
    },
    /// The timestamp (ns since the epoch) cannot be represented in the
    /// format (e.g. after 2106 in classic pcap).
    TimestampOutOfRange(u64),
    /// A header or block field could not be encoded; says which.
    Invalid(&'static str),
}

impl fmt::Display for WriteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WriteError::Io(e) => write!(f, "cannot write capture: {e}"),
            WriteError::UnknownInterface(i) => write!(f, "unknown interface {i}"),
            WriteError::LinkTypeMismatch {
                interface,
                expected,
                found,
            } => write!(
                f,
                "packet has link type {found} but interface {interface} has {expected}"
            ),
            WriteError::ExceedsSnaplen { len, snaplen } => {
                write!(f, "packet of {len} bytes exceeds the snap length {snaplen}")
            }
            WriteError::TimestampOutOfRange(ns) => {
                write!(f, "timestamp {ns} ns cannot be represented")
            }
            WriteError::Invalid(what) => write!(f, "cannot encode capture: {what}"),
        }
    }
}

impl std::error::Error for WriteError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            WriteError::Io(e) => Some(e),
            _ => None,
        }
    }
}

/// Which kind of record a packet was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BlockOrigin {
    /// Classic pcap record, or a packet built by the caller.
    PcapRecord,
    /// pcapng Enhanced Packet Block.
    Enhanced,
    /// pcapng Simple Packet Block.
    Simple,
    /// pcapng (obsolete) Packet Block.
    Obsolete,
}

/// A raw IP frame (link type [`LinkType::RAW`]) of one UDP datagram from `src` to `dst`
/// carrying `payload`, IPv4 or IPv6 as the addresses are (an IPv4 one of a pair mixed with an
/// IPv6 one written as IPv4-mapped IPv6), lengths and checksums filled in: what a recording
/// writes for a datagram it did not capture off a wire.
pub fn udp_frame(src: std::net::SocketAddr, dst: std::net::SocketAddr, payload: &[u8]) -> Vec<u8> {
    use std::net::IpAddr;
    let v6 = |ip: IpAddr| match ip {
        IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
        IpAddr::V6(a) => a.octets(),
    };
    let builder = match (src.ip(), dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            etherparse::PacketBuilder::ipv4(s.octets(), d.octets(), 64)
        }
        (s, d) => etherparse::PacketBuilder::ipv6(v6(s), v6(d), 64),
    }
    .udp(src.port(), dst.port());
    let mut out = Vec::with_capacity(builder.size(payload.len()));
    // Writing into a Vec fails only for a payload too long for one datagram: cut to fit.
    let max = 65_535 - 48;
    let payload = &payload[..payload.len().min(max)];
    let _ = builder.write(&mut out, payload);
    out
}

/// One captured frame: where and when it was captured, its bytes, and the
/// location of its UDP datagram if it has a well-formed one.
#[derive(Debug, Clone)]
pub struct CapturedPacket {
    link_type: LinkType,
    interface: u32,
    timestamp_ns: u64,
    orig_len: u32,
    data: Vec<u8>,
    udp: Result<UdpLocation, NotUdp>,
    pub(crate) origin: BlockOrigin,
    /// Raw pcapng timestamp and the ns value it was read as.
    pub(crate) original_raw_ts: Option<(u64, u64)>,
    pub(crate) epb_options: Vec<EnhancedPacketOption<'static>>,
    pub(crate) modified: bool,
}

impl CapturedPacket {
    /// A packet on interface 0 with `orig_len` = captured length; the UDP
    /// datagram is located immediately.
    pub fn new(link_type: LinkType, timestamp_ns: u64, data: Vec<u8>) -> Self {
        let orig_len = u32::try_from(data.len()).unwrap_or(u32::MAX);
        Self::from_parts(
            link_type,
            0,
            timestamp_ns,
            orig_len,
            data,
            BlockOrigin::PcapRecord,
        )
    }

    /// Moves the packet to another interface (pcapng), e.g. one added with
    /// [`CaptureFormat::add_interface`].
    pub fn with_interface(mut self, interface: u32) -> Self {
        self.interface = interface;
        self
    }

    pub(crate) fn from_parts(
        link_type: LinkType,
        interface: u32,
        timestamp_ns: u64,
        orig_len: u32,
        data: Vec<u8>,
        origin: BlockOrigin,
    ) -> Self {
        let udp = locate_udp(link_type, &data);
        CapturedPacket {
            link_type,
            interface,
            timestamp_ns,
            orig_len,
            data,
            udp,
            origin,
            original_raw_ts: None,
            epb_options: Vec::new(),
            modified: false,
        }
    }

    pub(crate) fn set_original_raw_ts(&mut self, raw: u64) {
        self.original_raw_ts = Some((raw, self.timestamp_ns));
    }

    /// Capture time in nanoseconds since the Unix epoch (0 for pcapng
    /// Simple Packet Blocks, which carry no timestamp).
    pub fn timestamp_ns(&self) -> u64 {
        self.timestamp_ns
    }

    /// Capture time since the Unix epoch.
    pub fn timestamp(&self) -> Duration {
        Duration::from_nanos(self.timestamp_ns)
    }

    /// Changes the capture time.
    pub fn set_timestamp_ns(&mut self, timestamp_ns: u64) {
        self.timestamp_ns = timestamp_ns;
    }

    /// Interface index (0 for pcap; numbered across sections for pcapng).
    pub fn interface(&self) -> u32 {
        self.interface
    }

    /// Link type of the frame.
    pub fn link_type(&self) -> LinkType {
        self.link_type
    }

    /// Length of the frame on the wire (may exceed the captured length).
    pub fn orig_len(&self) -> u32 {
        self.orig_len
    }

    /// The captured bytes, starting with the link-layer header.
    pub fn data(&self) -> &[u8] {
        &self.data
    }

    /// Takes the captured bytes.
    pub fn into_data(self) -> Vec<u8> {
        self.data
    }

    /// The UDP datagram, if the frame holds a complete, well-formed one.
    pub fn udp(&self) -> Option<&UdpLocation> {
        self.udp.as_ref().ok()
    }

    /// Why [`udp`](Self::udp) is `None`.
    pub fn not_udp_reason(&self) -> Option<NotUdp> {
        self.udp.as_ref().err().copied()
    }

    /// The UDP payload bytes.
    pub fn udp_payload(&self) -> Option<&[u8]> {
        let loc = self.udp()?;
        self.data.get(loc.payload.clone())
    }

    /// Returns the frame rebuilt with `new_payload` as UDP payload (any
    /// length that fits): link-layer header, addresses and ports are kept;
    /// IPv4 total length and header checksum, IPv6 payload length and the
    /// UDP length are fixed; the UDP checksum is recomputed (over IPv4 only
    /// if it was not 0). Link-layer trailer bytes after the IP datagram
    /// (Ethernet padding or FCS) are dropped.
    ///
    /// The IPv6 pseudo-header uses the destination of the fixed header; with
    /// a routing header (whose final destination would be used on the wire)
    /// the checksum is computed for that address too. IPsec AH integrity
    /// values are not recomputed.
    pub fn with_udp_payload(&self, new_payload: &[u8]) -> Result<Vec<u8>, RebuildError> {
        let loc = self.udp.as_ref().map_err(|r| RebuildError::NotUdp(*r))?;
        dissect::rebuild(&self.data, loc, new_payload)
    }

    /// Replaces the UDP payload in place (see
    /// [`with_udp_payload`](Self::with_udp_payload)); the original length
    /// changes by the same amount as the captured length.
    pub fn replace_udp_payload(&mut self, new_payload: &[u8]) -> Result<(), RebuildError> {
        let frame = self.with_udp_payload(new_payload)?;
        let old_len = self.data.len() as i128;
        let new_len = frame.len() as i128;
        let orig =
            (i128::from(self.orig_len) + new_len - old_len).clamp(new_len, i128::from(u32::MAX));
        self.orig_len = orig as u32;
        self.udp = locate_udp(self.link_type, &frame);
        self.data = frame;
        self.modified = true;
        Ok(())
    }
}

/// A whole capture in memory: its format and its packets.
#[derive(Debug, Clone)]
pub struct Capture {
    /// File format, for writing the packets back the same way.
    pub format: CaptureFormat,
    /// All packets, in file order.
    pub packets: Vec<CapturedPacket>,
}

impl Capture {
    /// Reads a whole pcap or pcapng stream.
    pub fn read<R: Read>(reader: R) -> Result<Self, CaptureError> {
        let mut reader = CaptureReader::new(reader)?;
        let mut packets = Vec::new();
        while let Some(packet) = reader.next_packet() {
            packets.push(packet?);
        }
        Ok(Capture {
            format: reader.into_format(),
            packets,
        })
    }

    /// Parses a whole pcap or pcapng file held in memory (same result as
    /// [`read`](Self::read), without the reader's internal buffer).
    pub fn parse(bytes: &[u8]) -> Result<Self, CaptureError> {
        let (format, packets) = reader::read_slice(bytes)?;
        Ok(Capture { format, packets })
    }

    /// Writes the capture in its format to `writer` and returns it.
    pub fn write_to<W: Write>(&self, writer: W) -> Result<W, WriteError> {
        let mut w = CaptureWriter::new(writer, &self.format)?;
        for p in &self.packets {
            w.write_packet(p)?;
        }
        w.finish()
    }

    /// Serialises the capture in its format.
    pub fn to_bytes(&self) -> Result<Vec<u8>, WriteError> {
        self.write_to(Vec::new())
    }

    /// How many packets have no usable UDP datagram.
    pub fn non_udp_count(&self) -> usize {
        self.packets.iter().filter(|p| p.udp().is_none()).count()
    }
}

#[cfg(test)]
mod udp_frame_tests {
    use super::*;

    #[test]
    fn a_made_frame_reads_back_as_the_datagram_in_both_families() {
        for (src, dst) in [
            ("192.0.2.7:5004", "198.51.100.1:30000"),
            ("[2001:db8::7]:5004", "[2001:db8::1]:30000"),
            ("192.0.2.7:5004", "[2001:db8::1]:30000"),
        ] {
            let (src, dst) = (src.parse().unwrap(), dst.parse().unwrap());
            let frame = udp_frame(src, dst, b"rtp here");
            let p = CapturedPacket::new(LinkType::RAW, 1, frame);
            assert_eq!(p.udp_payload(), Some(&b"rtp here"[..]));
            let at = p.udp().unwrap();
            assert_eq!(at.src().port(), 5004);
            assert_eq!(at.dst().port(), 30000);
        }
    }
}
