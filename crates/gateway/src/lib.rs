//! secrelay's media gateway. Sans-IO protocol state lives in its own modules (time and
//! datagrams in, datagrams and events out); sockets and HTTP live at the edge.
//!
//! * [`ice_lite`]: the ICE-lite agent of one participant (RFC 8445 §2.5, consent freshness
//!   RFC 7675).
#![forbid(unsafe_code)]

pub mod ice_lite;
