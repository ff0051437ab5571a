//! What can go wrong: per-packet statuses ([`Error`]) and configuration errors ([`ConfigError`]).
//!
//! The peer's misbehaviour (a forged, replayed or malformed packet) is kept apart from our own
//! misuse (a buffer too small, a stream cap reached) by [`Error::is_peer_fault`].

use core::fmt;

use crate::profile::Profile;

/// The status of one protect or unprotect operation that did not succeed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Error {
    /// The authentication tag did not verify (or the AEAD tag did not open).
    AuthFailed,
    /// The packet's index was already received (or, on protect, already sent).
    ReplayDuplicate,
    /// The packet's index lies behind the replay window.
    ReplayOld,
    /// The packet is shorter than its header and tag.
    TooShort,
    /// The packet is not RTP/RTCP version 2, or its header lengths overrun it.
    BadHeader,
    /// No stream for this SSRC and no template to make one from.
    UnknownSsrc(u32),
    /// The stream for this SSRC was set up for the other direction.
    WrongDirection(u32),
    /// The output buffer cannot hold the result.
    BufferTooSmall {
        /// Bytes the result needs.
        needed: usize,
    },
    /// The context already holds its maximum number of streams.
    StreamLimit,
    /// The packet index space of this key is used up (2^48 SRTP or 2^31 SRTCP packets).
    KeyExhausted,
    /// A batch packet names a context that is not in the batch's context slice.
    UnknownContext,
}

impl Error {
    /// True when the packet itself is at fault (forged, replayed, malformed, unknown sender),
    /// false when the caller's use of the API is.
    pub fn is_peer_fault(&self) -> bool {
        matches!(
            self,
            Error::AuthFailed
                | Error::ReplayDuplicate
                | Error::ReplayOld
                | Error::TooShort
                | Error::BadHeader
                | Error::UnknownSsrc(_)
        )
    }

    /// A short stable name for metrics and JSON (`auth_failed`, `replay_duplicate`, …).
    pub fn as_str(&self) -> &'static str {
        match self {
            Error::AuthFailed => "auth_failed",
            Error::ReplayDuplicate => "replay_duplicate",
            Error::ReplayOld => "replay_old",
            Error::TooShort => "too_short",
            Error::BadHeader => "bad_header",
            Error::UnknownSsrc(_) => "unknown_ssrc",
            Error::WrongDirection(_) => "wrong_direction",
            Error::BufferTooSmall { .. } => "buffer_too_small",
            Error::StreamLimit => "stream_limit",
            Error::KeyExhausted => "key_exhausted",
            Error::UnknownContext => "unknown_context",
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::AuthFailed => f.write_str("authentication failed"),
            Error::ReplayDuplicate => f.write_str("replayed packet (index already seen)"),
            Error::ReplayOld => f.write_str("packet too old for the replay window"),
            Error::TooShort => f.write_str("packet too short"),
            Error::BadHeader => f.write_str("malformed RTP/RTCP header"),
            Error::UnknownSsrc(s) => write!(f, "no stream for SSRC {s:#010x}"),
            Error::WrongDirection(s) => {
                write!(f, "stream {s:#010x} is set up for the other direction")
            }
            Error::BufferTooSmall { needed } => {
                write!(f, "buffer too small: {needed} bytes needed")
            }
            Error::StreamLimit => f.write_str("stream limit reached"),
            Error::KeyExhausted => f.write_str("packet index space of this key is used up"),
            Error::UnknownContext => f.write_str("batch packet names a context out of range"),
        }
    }
}

impl std::error::Error for Error {}

/// A context or key could not be set up as asked.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// The master key has the wrong length for the profile.
    KeyLength {
        /// The profile.
        profile: Profile,
        /// Expected length in bytes.
        expected: usize,
        /// Length given.
        got: usize,
    },
    /// The master salt has the wrong length for the profile.
    SaltLength {
        /// The profile.
        profile: Profile,
        /// Expected length in bytes.
        expected: usize,
        /// Length given.
        got: usize,
    },
    /// The SDES inline key parameter is malformed.
    BadSdes(&'static str),
    /// Master key identifiers (MKI) are not supported.
    MkiUnsupported,
    /// The replay window size is outside 64..=32768.
    ReplayWindow(usize),
    /// The stream cap must be at least 1.
    MaxStreams,
    /// The crypto provider refused the key.
    Provider(&'static str),
    /// The profile is not the one the key was made for.
    ProfileMismatch,
    /// A batch engine's worker threads could not be started (the reason from the OS).
    WorkerThreads(String),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::KeyLength {
                profile,
                expected,
                got,
            } => write!(
                f,
                "{profile} needs a {expected}-byte master key (key‖salt for SDES), got {got} bytes"
            ),
            ConfigError::SaltLength {
                profile,
                expected,
                got,
            } => write!(
                f,
                "{profile} needs a {expected}-byte master salt, got {got} bytes"
            ),
            ConfigError::BadSdes(why) => write!(f, "bad SDES inline key: {why}"),
            ConfigError::MkiUnsupported => {
                f.write_str("master key identifiers (MKI) are not supported")
            }
            ConfigError::ReplayWindow(n) => {
                write!(f, "replay window {n} is outside 64..=32768")
            }
            ConfigError::MaxStreams => f.write_str("the stream cap must be at least 1"),
            ConfigError::Provider(why) => write!(f, "crypto provider refused the key: {why}"),
            ConfigError::ProfileMismatch => {
                f.write_str("the master key was made for another profile")
            }
            ConfigError::WorkerThreads(why) => {
                write!(f, "could not start the engine's worker threads: {why}")
            }
        }
    }
}

impl std::error::Error for ConfigError {}
