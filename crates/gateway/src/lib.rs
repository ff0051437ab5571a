//! secrelay's media gateway: the server around the sans-IO core (`secrelay-core`, whose
//! modules are re-exported here): packet workers on one UDP port (recvmmsg/sendmmsg,
//! SO_REUSEPORT, dual-stack), ICE-TCP, telephony legs' own ports, HTTP(S) signaling (WHIP,
//! WHEP, room joins, telephony legs, JSON API), rtpengine's ng control protocol, the embedded
//! TURN server, Prometheus metrics, graceful shutdown, configuration; a [`server::Server`]
//! handle to start, query and stop it.
//!
//! What the gateway decides is in the core: [`shard`] (one packet worker's rooms, routes,
//! timers, SRTP batches, counters), [`room`], [`leg`], [`ice_lite`], [`transcode`],
//! [`counters`].
#![forbid(unsafe_code)]

pub use secrelay_core::{
    admission, bwe, copy_count, counters, feedback, ice_lite, leg, room, rtcp, shard, simulcast,
    transcode,
};
pub mod server;

pub use server::{ServeConfig, Server};
pub use shard::{Datagram, Shard, ShardConfig};
