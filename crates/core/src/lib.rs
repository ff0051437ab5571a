//! secrelay's gateway core, sans-IO: time and datagrams in, datagrams and events out. No
//! sockets, threads, runtime or HTTP: the server that drives it (`secrelay-gateway`) owns
//! those, and anyone may drive it with I/O of their own.
//!
//! * [`shard`]: everything one packet worker decides: rooms and their members, routes,
//!   timers, the SRTP batches, counters. Driven with classified datagrams and injected time.
//! * [`room`]: members whose media is routed to each other: each packet read once, handed to
//!   one subscription per receiver (its slot, SSRC, numbering, simulcast layer, answers to its
//!   feedback), every copy written once and put out by the room's one queue.
//! * [`leg`]: a room's members, of several kinds behind one interface ([`leg::Leg`]): WebRTC
//!   ([`leg::WebRtcLeg`]: offer/answer, ICE-lite, DTLS-SRTP) and telephony
//!   ([`leg::RtpLeg`]: plain RTP or SDES-SRTP on a port pair of its own).
//! * [`ice_lite`]: the ICE-lite agent of one WebRTC leg (RFC 8445 §2.5, consent freshness
//!   RFC 7675).
//! * [`transcode`]: audio of a codec a receiver did not take, decoded once per sender and
//!   encoded once per receiving format (and a mixing room's N−1 mixes).
//! * [`counters`]: the one counter model: per member, summed for rooms, shards and the server.
#![forbid(unsafe_code)]

pub mod admission;
pub mod bwe;
pub mod copy_count;
pub mod counters;
pub mod feedback;
pub mod ice_lite;
pub mod leg;
mod media_batch;
pub mod room;
pub mod rtcp;
pub mod shard;
pub mod simulcast;
mod slab;
pub mod transcode;

pub use shard::{Datagram, Shard, ShardConfig};
