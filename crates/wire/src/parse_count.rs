//! How many times this thread parsed network input: one count per call of [`crate::demux`],
//! [`crate::classify`], [`crate::RtpHeader::parse`], [`crate::RtcpHeader::parse`] and
//! [`crate::stun::Message::parse`]. Counted only with the `parse-count` feature (tests that
//! check a datagram is parsed once on its way through the gateway); without it the count
//! stays zero and costs nothing.

#[cfg(feature = "parse-count")]
thread_local! {
    static PARSES: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// One more parse on this thread.
#[inline]
pub(crate) fn count() {
    #[cfg(feature = "parse-count")]
    PARSES.with(|c| c.set(c.get() + 1));
}

/// Parses made on this thread so far (always 0 without the `parse-count` feature).
pub fn parses() -> u64 {
    #[cfg(feature = "parse-count")]
    return PARSES.with(|c| c.get());
    #[cfg(not(feature = "parse-count"))]
    0
}

/// Whether parses are being counted (the `parse-count` feature is on).
pub const ENABLED: bool = cfg!(feature = "parse-count");
