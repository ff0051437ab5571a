//! secrelay's media gateway. What the gateway decides is sans-IO (time and datagrams in,
//! datagrams and events out); sockets, threads and HTTP live at the edge, in [`server`].
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
//! * [`server`]: the edge: packet workers on one UDP port (recvmmsg/sendmmsg, SO_REUSEPORT),
//!   telephony legs' own ports, HTTP(S) signaling (WHIP, WHEP, room joins, telephony legs,
//!   JSON API), rtpengine's ng control protocol, Prometheus metrics, graceful shutdown,
//!   configuration; a [`server::Server`] handle to start, query and stop it.
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
pub mod server;
pub mod shard;
pub mod simulcast;
mod slab;
pub mod transcode;

pub use server::{ServeConfig, Server};
pub use shard::{Datagram, Shard, ShardConfig};
