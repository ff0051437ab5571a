#[path = "../ossl/mod.rs"]
mod ossl_helper;

mod common;
mod crypto;
mod data;
mod edge;
mod fragmentation;
mod handshake;
mod ossl;
mod psk;
mod reorder;
mod retransmit;
