//! # secrelay-dtls
//!
//! DTLS-SRTP for secrelay (RFC 5763, RFC 5764, RFC 6347, RFC 9147): certificates and their
//! SDP fingerprints, a private CA, and a sans-IO endpoint that turns datagrams and an injected
//! `Instant` into datagrams, timer deadlines and events (connected with SRTP keys, failed with a
//! reason, closed).
#![forbid(unsafe_code)]
