//! Wire formats for the secrelay media gateway.
//!
//! * [`rtp`]: zero-copy RTP/RTCP header views and RFC 7983 first-byte
//!   demultiplexing of STUN, DTLS, RTP and RTCP.
//! * [`demux`]: a datagram on a shared media port classified once, with what later stages
//!   need from its parse (STUN's parsed message, RTP's header fields, RTCP's sender SSRC).
//! * [`pcap`]: reading pcap/pcapng captures, locating UDP datagrams in them,
//!   replacing UDP payloads (fixing lengths and checksums) and writing the
//!   result back in the same format.
//! * [`stun`]: STUN messages (RFC 8489) as ICE uses them (RFC 8445): parsing with
//!   MESSAGE-INTEGRITY and FINGERPRINT checks, and building Binding responses.
//! * [`sdp`]: WebRTC offers read (over Mozilla's webrtc-sdp) into what a gateway needs,
//!   and answers written.
//! * [`sdp_rtp`], [`sdes`]: telephony offers (plain RTP, SDES-SRTP with `a=crypto`) read
//!   (over the `sdp` crate) and answered.
//! * [`sdp_doc`]: an SDP kept whole, line by line, read as leniently as rtpengine reads it,
//!   for the ng server's rewrites.
//! * [`framing`]: RFC 4571 framing, datagrams over TCP as ICE-TCP carries them.
//! * [`twcc`]: transport-wide congestion control feedback, written and read.
//! * [`video`]: keyframe starts in VP8 and H.264 payloads, VP8 picture IDs renumbered.
//! * [`bencode`]: rtpengine's ng control protocol (bencode over UDP), commands encoded and
//!   replies decoded with bounded nesting; [`ng`]: its requests read as a gateway serves them.
//!
//! The crate is pure: no sockets, no clock. Parsers of network or file input
//! never panic; they return errors that say what was wrong.
#![forbid(unsafe_code)]

pub mod bencode;
pub mod demux;
pub mod framing;
pub mod ng;
pub mod parse_count;
pub mod pcap;
pub mod rtcp;
pub mod rtp;
pub mod sdes;
pub mod sdp;
pub mod sdp_doc;
pub mod sdp_rtp;
pub mod stun;
pub mod twcc;
pub mod video;

pub use demux::{demux, Class};
pub use rtp::{classify, PacketKind, ParseError, RtcpHeader, RtpHeader};
