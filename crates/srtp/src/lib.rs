//! # secrelay-srtp
//!
//! SRTP and SRTCP (RFC 3711 with AES-CM and AES-f8, RFC 6188 AES-192 and AES-256, RFC 7714
//! AES-GCM) for secrelay: session key derivation, contexts holding many SSRC streams, index and
//! ROC tracking, replay protection, and a batch API that later engines (SIMD lanes, worker
//! threads, GPU) sit behind. The multi-buffer and GPU kernels take AES-128/256 counter mode,
//! NULL and AES-GCM; an AES-192 or f8 context's packets in a batch take the one-packet path.
//!
//! Pure: no sockets. Primitives come from a [`provider::CryptoProvider`]; the SRTP maths stays
//! here. Threads and a clock appear only where asked for: the worker-thread engines
//! ([`ThreadedEngine`] for batches, [`pipeline::Pipeline`] for packets submitted one by one,
//! whose workers time their batching window).
//!
//! ```
//! use secrelay_srtp::{Context, MasterKey, Policy, Profile};
//!
//! let key = MasterKey::new(Profile::AesCm128HmacSha1_80, &[7; 16], &[9; 14]).unwrap();
//! let mut tx = Context::new(Policy::new(key.clone()).any_outbound()).unwrap();
//! let mut rx = Context::new(Policy::new(key).any_inbound()).unwrap();
//!
//! let mut pkt = vec![0u8; 12 + 160 + 10];
//! pkt[0] = 0x80; // RTP version 2
//! pkt[8..12].copy_from_slice(&0x1234_5678u32.to_be_bytes());
//! let n = tx.protect_rtp(&mut pkt, 172).unwrap();
//! assert_eq!(n, 182);
//! let n = rx.unprotect_rtp(&mut pkt, n).unwrap();
//! assert_eq!(n, 172);
//! ```
//!
//! # Threading model
//! A [`Context`] is `Send` and is used through `&mut self`: keep one per call, per participant
//! or per worker thread. Nothing is global and nothing locks. Streams made from one master key
//! share its keyed primitives read-only. The batch engines ([`batch`], [`threaded`],
//! [`pipeline`]) rely on exactly this: packets of different contexts may run on different
//! threads, packets of one context run in order on one.
//!
//! # Allocation
//! Protecting and unprotecting a packet allocates nothing; memory is allocated only when a
//! context or a stream is made (the replay bitmaps, the stream table entry).
#![deny(unsafe_code)]

pub mod batch;
mod context;
pub mod error;
mod f8;
pub mod index;
pub mod kdf;
mod keys;
pub mod offload;
pub mod pipeline;
pub mod profile;
pub mod provider;
pub mod replay;
pub mod simd;
mod ssrc_map;
pub mod threaded;

pub use batch::{Contexts, Engine, Op, Packet, SerialEngine};
pub use context::{Context, Direction, Policy, DEFAULT_MAX_STREAMS};
pub use error::{ConfigError, Error};
pub use keys::MasterKey;
pub use profile::Profile;
pub use simd::engine::SimdEngine;
pub use threaded::{ThreadedConfig, ThreadedEngine};
