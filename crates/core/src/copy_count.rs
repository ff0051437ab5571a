//! How many times this thread copied a media packet's bytes from one buffer into another on
//! the way from a socket to a socket: one count per copy made when a received datagram is
//! staged for its unprotect call, when a copy is written for a receiver, when a publisher's
//! retransmission is unwrapped, and when a worker hands a datagram to another. Counted only
//! with the `copy-count` feature (the test that checks a relayed copy's bytes are copied at
//! most twice between receive and send); without it the count stays zero and costs nothing.

#[cfg(feature = "copy-count")]
thread_local! {
    static COPIES: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// One more copy of packet bytes on this thread (the core's copies, and a server's: a
/// worker handing a datagram to another copies it).
#[inline]
pub fn count() {
    #[cfg(feature = "copy-count")]
    COPIES.with(|c| c.set(c.get() + 1));
}

/// Copies made on this thread so far (always 0 without the `copy-count` feature).
pub fn copies() -> u64 {
    #[cfg(feature = "copy-count")]
    return COPIES.with(|c| c.get());
    #[cfg(not(feature = "copy-count"))]
    0
}

/// Whether copies are being counted (the `copy-count` feature is on).
pub const ENABLED: bool = cfg!(feature = "copy-count");
