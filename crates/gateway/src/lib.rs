//! secrelay's media gateway. Sans-IO protocol state lives in its own modules (time and
//! datagrams in, datagrams and events out); sockets and HTTP live at the edge.
//!
//! * [`ice_lite`]: the ICE-lite agent of one participant (RFC 8445 §2.5, consent freshness
//!   RFC 7675).
//! * [`participant`]: one WebRTC participant: offer/answer, ICE-lite, DTLS-SRTP, SRTP in and
//!   out, demultiplexed per RFC 7983.
//! * [`room`]: participants whose media is re-protected for each receiver with its own keys,
//!   with SSRCs and payload types mapped per receiver.
//! * [`media_batch`]: the SRTP of many participants' media in one engine call (a receive
//!   batch unprotected at once, the copies routed from it protected at once).
//! * [`server`]: the edge: packet workers on one UDP port (recvmmsg/sendmmsg, SO_REUSEPORT),
//!   HTTP signaling (WHIP, WHEP, room joins, JSON API), Prometheus metrics, graceful shutdown.
#![forbid(unsafe_code)]

pub mod ice_lite;
pub mod media_batch;
pub mod participant;
pub mod room;
pub mod server;
