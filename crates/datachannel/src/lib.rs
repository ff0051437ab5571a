//! # secrelay-datachannel
//!
//! WebRTC data channels for secrelay: SCTP over DTLS (RFC 8831) with the Data Channel
//! Establishment Protocol (RFC 8832), as a sans-IO engine. One [`DataChannels`] serves one DTLS
//! association: it takes the SCTP packets that arrive as DTLS application data, gives back the
//! SCTP packets to send as DTLS application data, and reports channel events (the peer opened
//! a channel, a message arrived, a channel closed). No sockets, no threads, no clock: every
//! call that needs the time takes an [`Instant`](std::time::Instant).
//!
//! The SCTP association itself is [`sctp-proto`](sctp_proto) (partial reliability, stream
//! reset); DCEP ([`dcep`]), stream-id rules, message framing and the limits are this crate's.
//!
//! # Drive contract
//! After **every** input — [`DataChannels::new`], [`DataChannels::handle_packet`],
//! [`DataChannels::handle_timeout`], [`DataChannels::open`], [`DataChannels::send`],
//! [`DataChannels::close`] — drain [`DataChannels::poll_transmit`] until `None` (hand each
//! packet to DTLS as one application-data record) and [`DataChannels::poll_event`] until
//! `None`; then call [`DataChannels::handle_timeout`] at [`DataChannels::poll_timeout`], or
//! earlier when a packet arrives. Instants earlier than one already seen count as the latest
//! one seen.
//!
//! ```
//! # use std::time::Instant;
//! # use secrelay_datachannel::{ChannelEvent, Config, DataChannels, MessageKind, Side};
//! # fn send_over_dtls(_: &[u8]) {}
//! let now = Instant::now();
//! // Our DTLS role is client: we start the SCTP association and open even stream ids.
//! let mut channels = DataChannels::new(Config::default(), Side::Client, now).expect("valid config");
//! while let Some(packet) = channels.poll_transmit(now) {
//!     send_over_dtls(&packet); // the SCTP INIT
//! }
//! while let Some(event) = channels.poll_event() {
//!     match event {
//!         ChannelEvent::Opened { id, spec } => { /* the peer opened `spec.label` */ }
//!         ChannelEvent::Message { id, kind, data } => { /* relay it */ }
//!         _ => {}
//!     }
//! }
//! let _wake_at = channels.poll_timeout();
//! ```
//!
//! # Failure model
//! Nothing from the network can make it panic: a packet that does not parse, a DCEP message
//! that breaks RFC 8832, a message on a stream no channel was opened on, or one larger than
//! [`Config::max_message_size`] is dropped and counted by reason ([`Counters::discarded`])
//! (one too large for the receive buffer ends the association, with an ABORT to the peer);
//! every call into sctp-proto runs under `catch_unwind`, and a caught panic ends the
//! association ([`ChannelEvent::Disconnected`], [`Counters::panics_caught`]). A peer's bad
//! DATA_CHANNEL_OPEN is refused as RFC 8832 §6 asks: its stream is reset and no ACK is sent.
//! The end of the association is final: later packets are counted and ignored.
//!
//! One thing here reads the system clock: sctp-proto's `Endpoint::connect` stamps the first
//! INIT's retransmission timer with `Instant::now()` when a [`Side::Client`] engine is built;
//! every later timer runs on the instants passed in.
#![forbid(unsafe_code)]

mod counters;
pub mod dcep;
mod engine;

use std::fmt;
use std::time::Duration;

pub use counters::{Counters, Discard, Discards, Refusal};
pub use engine::DataChannels;

/// Our DTLS role on the association, which fixes two RFC 8832 rules: the stream ids we open
/// channels on (§6) and who starts SCTP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Side {
    /// DTLS client: we open channels on even stream ids and send the SCTP INIT.
    Client,
    /// DTLS server: we open channels on odd stream ids and accept the peer's INIT.
    Server,
}

/// Limits of one [`DataChannels`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The largest message sent or accepted, in bytes (what SDP's `a=max-message-size`
    /// announces, RFC 8841 §6). Larger sends are refused; larger arrivals are dropped and
    /// counted, up to the receive buffer (twice this, at least 1 MiB): a message that does
    /// not fit it ends the association with an ABORT. Default 262 144 (256 KiB, what
    /// Chromium announces); at most [`Config::MAX_MESSAGE_SIZE_LIMIT`].
    pub max_message_size: usize,
    /// SCTP streams offered, hence channels: stream ids run from 0 to `max_channels - 1`, and
    /// a peer's DATA_CHANNEL_OPEN on a higher id is refused. Default 1024; at least 2.
    pub max_channels: u16,
    /// The most bytes one channel may hold queued or unacknowledged: a send that would go
    /// over is refused ([`DataChannelError::BufferFull`]). Default 1 MiB.
    pub max_buffered: usize,
    /// Our SCTP port (SDP `a=sctp-port`, RFC 8841 §5), the source port of what we send.
    /// Default 5000, what browsers use.
    pub local_port: u16,
    /// The peer's SCTP port (its `a=sctp-port`), the destination port of what we send.
    /// Default 5000.
    pub remote_port: u16,
    /// Channels both sides agreed on out of band (W3C `negotiated: true`, RFC 8832 §1): open
    /// on their stream ids as soon as the association is up, without DATA_CHANNEL_OPEN, each
    /// reported as [`ChannelEvent::Opened`] then. Channels we open skip their ids. A peer's
    /// DATA_CHANNEL_OPEN on one of them is refused as any OPEN on a stream in use: its stream
    /// is reset, which closes the agreed channel too (the sides disagree about it). Default
    /// none.
    pub negotiated: Vec<Negotiated>,
}

/// A channel agreed on out of band: its stream id (either parity, below
/// [`Config::max_channels`]) and what it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Negotiated {
    /// Its stream id.
    pub id: u16,
    /// Its label, ordering and reliability (what a DATA_CHANNEL_OPEN would have said).
    pub spec: ChannelSpec,
}

impl Config {
    /// The largest [`Config::max_message_size`] accepted (64 MiB): the receive buffer is
    /// twice the message size, and SCTP counts it in 32 bits.
    pub const MAX_MESSAGE_SIZE_LIMIT: usize = 64 << 20;

    /// Checks each limit; the error names the field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.max_message_size == 0 || self.max_message_size > Self::MAX_MESSAGE_SIZE_LIMIT {
            return Err(ConfigError {
                field: "max_message_size",
                reason: format!(
                    "must be 1 to {} bytes, not {}",
                    Self::MAX_MESSAGE_SIZE_LIMIT,
                    self.max_message_size
                ),
            });
        }
        if self.max_channels < 2 {
            return Err(ConfigError {
                field: "max_channels",
                reason: format!("must be at least 2, not {}", self.max_channels),
            });
        }
        if self.max_buffered == 0 {
            return Err(ConfigError {
                field: "max_buffered",
                reason: "must be at least 1 byte".into(),
            });
        }
        for (field, port) in [
            ("local_port", self.local_port),
            ("remote_port", self.remote_port),
        ] {
            if port == 0 {
                return Err(ConfigError {
                    field,
                    reason: "must be 1 to 65535, not 0".into(),
                });
            }
        }
        self.validate_negotiated()
    }

    fn validate_negotiated(&self) -> Result<(), ConfigError> {
        let bad = |reason: String| ConfigError {
            field: "negotiated",
            reason,
        };
        for (k, n) in self.negotiated.iter().enumerate() {
            if n.id >= self.max_channels {
                return Err(bad(format!(
                    "stream id {} is not below max_channels ({})",
                    n.id, self.max_channels
                )));
            }
            if self.negotiated[..k].iter().any(|m| m.id == n.id) {
                return Err(bad(format!("stream id {} is given twice", n.id)));
            }
            if let Err(e) = dcep::encode_open(&n.spec) {
                return Err(bad(format!("channel {:?}: {e}", n.spec.label)));
            }
        }
        Ok(())
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_message_size: 262_144,
            max_channels: 1024,
            max_buffered: 1 << 20,
            local_port: 5000,
            remote_port: 5000,
            negotiated: Vec::new(),
        }
    }
}

/// A [`Config`] field out of range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The field's name, as in [`Config`].
    pub field: &'static str,
    /// What is wrong with it.
    pub reason: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "data channel config: {} {}", self.field, self.reason)
    }
}

impl std::error::Error for ConfigError {}

/// A channel: its SCTP stream id, the same in both directions (RFC 8831 §6.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ChannelId(pub u16);

impl fmt::Display for ChannelId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "channel {}", self.0)
    }
}

/// What a channel is, as DATA_CHANNEL_OPEN carries it (RFC 8832 §5.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelSpec {
    /// The channel's name (UTF-8, at most 65 535 bytes).
    pub label: String,
    /// The subprotocol (UTF-8, at most 65 535 bytes; empty for none).
    pub protocol: String,
    /// Whether messages arrive in the order sent.
    pub ordered: bool,
    /// How hard SCTP tries to deliver each message.
    pub reliability: Reliability,
    /// The priority field (RFC 8832 §5.1; RFC 8831 §6.4's values: 128 below normal, 256
    /// normal, 512 high, 1024 extra high). Carried, not acted on.
    pub priority: u16,
}

/// How hard SCTP tries to deliver each message on a channel (RFC 8831 §6.1, RFC 3758).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reliability {
    /// Retransmitted until acknowledged.
    Reliable,
    /// Retransmitted at most this many times, then abandoned.
    MaxRetransmits(u32),
    /// Retransmitted for at most this long (whole milliseconds on the wire), then abandoned.
    MaxLifetime(Duration),
}

/// What a message carries (RFC 8831 §6.6: PPID 51 and 56 for text, 53 and 57 for binary).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MessageKind {
    /// UTF-8 text (a JavaScript string).
    Text,
    /// Bytes (an ArrayBuffer or Blob).
    Binary,
}

/// What happened on the association, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChannelEvent {
    /// The SCTP association is up: channels can be opened and used.
    Connected,
    /// The peer opened a channel with DATA_CHANNEL_OPEN; we answered DATA_CHANNEL_ACK.
    Opened {
        /// The channel.
        id: ChannelId,
        /// What the peer's DATA_CHANNEL_OPEN said.
        spec: ChannelSpec,
    },
    /// The peer answered the DATA_CHANNEL_OPEN of a channel we opened.
    Acked {
        /// The channel.
        id: ChannelId,
    },
    /// A whole message arrived.
    Message {
        /// The channel.
        id: ChannelId,
        /// Text or binary.
        kind: MessageKind,
        /// The message (empty for RFC 8831 §6.6's empty messages).
        data: Vec<u8>,
    },
    /// A channel closed: its stream was reset, by either side (RFC 8831 §6.7). Its id may be
    /// reused once the reset completes.
    Closed {
        /// The channel.
        id: ChannelId,
    },
    /// The association ended (aborted, shut down, failed): every open channel was reported
    /// [`ChannelEvent::Closed`] just before. Final.
    Disconnected,
}

/// Why [`DataChannels::open`], [`DataChannels::send`] or [`DataChannels::close`] did nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DataChannelError {
    /// The association is not up (not yet, or no longer).
    NotConnected,
    /// No open channel has this id (never opened, closed, or closing).
    UnknownChannel(ChannelId),
    /// The message is larger than [`Config::max_message_size`].
    TooLarge {
        /// The message's length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The channel already holds this much unsent or unacknowledged data, and the message
    /// would take it over [`Config::max_buffered`].
    BufferFull {
        /// Bytes held now.
        buffered: usize,
        /// The message's length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// Every stream id of our parity below [`Config::max_channels`] is in use.
    NoFreeStream,
    /// The label or protocol does not fit DATA_CHANNEL_OPEN.
    InvalidSpec(dcep::DcepError),
    /// sctp-proto refused the operation.
    Sctp(sctp_proto::Error),
}

impl fmt::Display for DataChannelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DataChannelError::NotConnected => write!(f, "the SCTP association is not up"),
            DataChannelError::UnknownChannel(id) => write!(f, "{id} is not open"),
            DataChannelError::TooLarge { len, max } => {
                write!(
                    f,
                    "message of {len} bytes, larger than max_message_size {max}"
                )
            }
            DataChannelError::BufferFull { buffered, len, max } => write!(
                f,
                "{buffered} bytes buffered, and {len} more would exceed max_buffered {max}"
            ),
            DataChannelError::NoFreeStream => write!(f, "no free stream id below max_channels"),
            DataChannelError::InvalidSpec(e) => write!(f, "invalid channel: {e}"),
            DataChannelError::Sctp(e) => write!(f, "SCTP: {e}"),
        }
    }
}

impl std::error::Error for DataChannelError {}
