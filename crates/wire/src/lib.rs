//! Wire formats for the secrelay media gateway.
//!
//! * [`rtp`]: zero-copy RTP/RTCP header views and RFC 7983 first-byte
//!   demultiplexing of STUN, DTLS, RTP and RTCP.
//! * [`pcap`]: reading pcap/pcapng captures, locating UDP datagrams in them,
//!   replacing UDP payloads (fixing lengths and checksums) and writing the
//!   result back in the same format.
//!
//! The crate is pure: no sockets, no clock. Parsers of network or file input
//! never panic; they return errors that say what was wrong.
#![forbid(unsafe_code)]

pub mod pcap;
pub mod rtp;

pub use rtp::{classify, PacketKind, ParseError, RtcpHeader, RtpHeader};
