//! secrelay's embedded TURN server (RFC 8656, over RFC 8489 STUN).
//!
//! Browsers that cannot reach the gateway's UDP media address (outbound UDP blocked, only TCP
//! 443 open) reach it through a relay: they allocate one here over UDP, TCP or TLS with a
//! credential the gateway handed them, and the relay sends what they send to the gateway's own
//! media socket, and back. The relay goes nowhere else: peers are only the gateway's media
//! addresses (no open relay).
//!
//! * [`auth`]: credentials minted the way the TURN REST API does (`EXPIRY:IDENTITY`,
//!   base64(HMAC-SHA1(secret, username))), RFC 8489's long-term mechanism (MD5 or SHA-256
//!   keys, MESSAGE-INTEGRITY or MESSAGE-INTEGRITY-SHA256), stateless nonces.
//! * [`core`]: the sans-IO server of one shard: allocations, permissions, channels, refresh,
//!   Send/Data indications and ChannelData, every refusal and drop counted ([`stats`]).
//! * [`quota`]: allocations bounded in all, per credential identity and per source.
//! * [`framing`]: TURN over a byte stream (RFC 8656 §12.5: STUN messages and padded
//!   ChannelData back to back).
//! * [`server`]: the I/O: shards, each a thread with a current-thread tokio runtime, a UDP
//!   listener (SO_REUSEPORT), the relay sockets of its allocations (read through an io_uring
//!   on a thread beside it where the kernel allows, else by the runtime with epoll); TCP
//!   listeners; streams handed over by others (the gateway's HTTPS port, for TURN over TLS on
//!   443).

pub mod auth;
pub mod client;
pub mod core;
pub mod framing;
#[doc(hidden)]
pub mod fuzzing;
pub mod proto;
pub mod quota;
pub mod server;
pub mod stats;

pub use crate::auth::{Credentials, Minted};
pub use crate::core::{Client, ClientKey, Core, CoreConfig, Io, Now, Out, Peer, Shared};
pub use crate::quota::QuotaLimits;
pub use crate::server::{TurnConfig, TurnServer};
pub use crate::stats::Stats;
