//! Safe Rust wrappers around the *peer* SRTP libraries that secrelay's own
//! SRTP engine is compared with and interop-tested against.
//!
//! Currently this is libsrtp 2 (built from source with OpenSSL through the
//! `srtp2-sys` crate), see [`libsrtp`].
//!
//! `unsafe` code is allowed in this crate only for the FFI calls; every
//! `unsafe` block carries a `// SAFETY:` comment.
#![allow(unsafe_code)]

pub mod libsrtp;
pub mod openssl_dtls;

pub use libsrtp::{Direction, LibSrtp, LibsrtpError, LibsrtpProfile};
