#[cfg(not(windows))]
#[path = "../wolfssl/mod.rs"]
mod wolfssl_helper;

mod ack;
mod common;
mod conformance;
mod data;
mod edge;
mod fragmentation;
mod handshake;
mod key_update;
mod reorder;
mod retransmit;

#[cfg(not(windows))]
mod wolfssl;
