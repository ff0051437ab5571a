//! Multi-buffer kernels for the batch engines: the same primitive over many packets at once
//! in SIMD lanes. This is where `unsafe` lives in this crate (CPU intrinsics behind run-time
//! feature detection); every kernel has a portable path and is checked against the library's
//! scalar primitive by the tests.

pub mod aes_ctr;
pub mod engine;
pub mod gcm;
pub mod hmac_sha1_mb;
pub mod prefetch;
pub mod sha1_x16;
