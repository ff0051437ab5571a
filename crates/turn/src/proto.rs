//! TURN's numbers (RFC 8656 §18, RFC 8489 §18): methods, attributes, error codes, lifetimes;
//! and the few attribute readers and the reply writer the core shares.

use std::time::Duration;

use secrelay_wire::stun::{attr as stun_attr, Class, Message, MessageBuilder};

/// Methods.
pub mod method {
    /// Binding (a plain STUN server's answer: the client's reflexive address).
    pub const BINDING: u16 = 0x001;
    /// Allocate.
    pub const ALLOCATE: u16 = 0x003;
    /// Refresh.
    pub const REFRESH: u16 = 0x004;
    /// Send (indication).
    pub const SEND: u16 = 0x006;
    /// Data (indication).
    pub const DATA: u16 = 0x007;
    /// CreatePermission.
    pub const CREATE_PERMISSION: u16 = 0x008;
    /// ChannelBind.
    pub const CHANNEL_BIND: u16 = 0x009;
}

/// Attributes.
pub mod attr {
    pub use secrelay_wire::stun::attr::*;
    /// UNKNOWN-ATTRIBUTES.
    pub const UNKNOWN_ATTRIBUTES: u16 = 0x000A;
    /// CHANNEL-NUMBER.
    pub const CHANNEL_NUMBER: u16 = 0x000C;
    /// LIFETIME.
    pub const LIFETIME: u16 = 0x000D;
    /// XOR-PEER-ADDRESS.
    pub const XOR_PEER_ADDRESS: u16 = 0x0012;
    /// DATA.
    pub const DATA: u16 = 0x0013;
    /// REALM.
    pub const REALM: u16 = 0x0014;
    /// NONCE.
    pub const NONCE: u16 = 0x0015;
    /// XOR-RELAYED-ADDRESS.
    pub const XOR_RELAYED_ADDRESS: u16 = 0x0016;
    /// REQUESTED-ADDRESS-FAMILY.
    pub const REQUESTED_ADDRESS_FAMILY: u16 = 0x0017;
    /// EVEN-PORT (an even relay port; reserving the next one, its R bit, is not served).
    pub const EVEN_PORT: u16 = 0x0018;
    /// REQUESTED-TRANSPORT.
    pub const REQUESTED_TRANSPORT: u16 = 0x0019;
    /// DONT-FRAGMENT (accepted: relayed datagrams go to this host's own media socket).
    pub const DONT_FRAGMENT: u16 = 0x001A;
    /// PASSWORD-ALGORITHM.
    pub const PASSWORD_ALGORITHM: u16 = 0x001D;
    /// USERHASH (not offered: answered as a missing USERNAME).
    pub const USERHASH: u16 = 0x001E;
    /// RESERVATION-TOKEN (not served: answered 420).
    pub const RESERVATION_TOKEN: u16 = 0x0022;
    /// PASSWORD-ALGORITHMS.
    pub const PASSWORD_ALGORITHMS: u16 = 0x8002;
}

/// The comprehension-required attributes (below 0x8000) a request may carry; any other is
/// answered 420 with UNKNOWN-ATTRIBUTES.
pub const UNDERSTOOD: &[u16] = &[
    stun_attr::MAPPED_ADDRESS,
    stun_attr::USERNAME,
    stun_attr::MESSAGE_INTEGRITY,
    stun_attr::ERROR_CODE,
    attr::UNKNOWN_ATTRIBUTES,
    attr::CHANNEL_NUMBER,
    attr::LIFETIME,
    attr::XOR_PEER_ADDRESS,
    attr::DATA,
    attr::REALM,
    attr::NONCE,
    attr::XOR_RELAYED_ADDRESS,
    attr::REQUESTED_ADDRESS_FAMILY,
    attr::EVEN_PORT,
    attr::REQUESTED_TRANSPORT,
    attr::DONT_FRAGMENT,
    stun_attr::MESSAGE_INTEGRITY_SHA256,
    attr::PASSWORD_ALGORITHM,
    attr::USERHASH,
    stun_attr::XOR_MAPPED_ADDRESS,
    stun_attr::PRIORITY,
    stun_attr::USE_CANDIDATE,
];

/// The lowest channel number (RFC 8656 §12).
pub const CHANNEL_MIN: u16 = 0x4000;
/// The highest: RFC 5766's 0x7FFF, not RFC 8656's 0x4FFF, because clients of the older RFC
/// still pick from the whole range (libwebrtc, so Chromium, and coturn's client do).
pub const CHANNEL_MAX: u16 = 0x7FFF;
/// An allocation's lifetime when the client asks for less or none (RFC 8656 §3.2).
pub const DEFAULT_LIFETIME: Duration = Duration::from_secs(600);
/// A permission's lifetime (RFC 8656 §9).
pub const PERMISSION_LIFETIME: Duration = Duration::from_secs(300);
/// A channel binding's lifetime (RFC 8656 §12).
pub const CHANNEL_LIFETIME: Duration = Duration::from_secs(600);
/// The UDP protocol number, the only REQUESTED-TRANSPORT served.
pub const UDP: u8 = 17;

/// Room a peer's datagram needs before it to become a Data indication in place (STUN header,
/// XOR-PEER-ADDRESS of an IPv6 peer, DATA's header).
pub const HEADROOM: usize = 20 + 24 + 4;
/// Room after it for padding to 4 bytes.
pub const TAILROOM: usize = 3;

/// The reason phrase of an error code.
pub fn reason(code: u16) -> &'static str {
    match code {
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        420 => "Unknown Attribute",
        437 => "Allocation Mismatch",
        438 => "Stale Nonce",
        440 => "Address Family not Supported",
        441 => "Wrong Credentials",
        442 => "Unsupported Transport Protocol",
        443 => "Peer Address Family Mismatch",
        486 => "Allocation Quota Reached",
        508 => "Insufficient Capacity",
        _ => "Error",
    }
}

/// An attribute's value is not what its type says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Malformed;

/// LIFETIME's seconds, if present.
pub fn lifetime(msg: &Message<'_>) -> Result<Option<u32>, Malformed> {
    match msg.get(attr::LIFETIME) {
        None => Ok(None),
        Some(v) => <[u8; 4]>::try_from(v)
            .map(|b| Some(u32::from_be_bytes(b)))
            .map_err(|_| Malformed),
    }
}

/// The first comprehension-required attribute not in [`UNDERSTOOD`], if any.
pub fn unknown_required(msg: &Message<'_>) -> Option<u16> {
    msg.attributes()
        .map(|(t, _)| t)
        .find(|t| *t < 0x8000 && !UNDERSTOOD.contains(t))
}

/// How a reply is protected: the request's integrity kind and key, and whether the request
/// carried FINGERPRINT.
#[derive(Clone, Copy)]
pub struct Seal<'k> {
    /// The key and whether to use MESSAGE-INTEGRITY-SHA256 (else MESSAGE-INTEGRITY).
    pub key: Option<(&'k [u8], bool)>,
    /// Add FINGERPRINT.
    pub fingerprint: bool,
}

impl Seal<'_> {
    /// Finishes a reply: integrity as the request had it, then FINGERPRINT if it had one.
    pub fn finish(self, b: MessageBuilder<'_>) -> Option<usize> {
        let b = match self.key {
            Some((k, true)) => b.integrity_sha256(k),
            Some((k, false)) => b.integrity(k),
            None => b,
        };
        if self.fingerprint {
            b.fingerprint().ok()
        } else {
            b.finish().ok()
        }
    }
}

/// Writes a success response to `msg` into `out`, its attributes added by `body`.
pub fn success(
    out: &mut [u8],
    msg: &Message<'_>,
    seal: Seal<'_>,
    body: impl FnOnce(MessageBuilder<'_>) -> MessageBuilder<'_>,
) -> Option<usize> {
    let b = MessageBuilder::new(out, Class::Success, msg.method(), msg.transaction_id());
    seal.finish(body(b))
}

/// Writes an error response with `code` to `msg` into `out`, more attributes added by `body`.
pub fn error(
    out: &mut [u8],
    msg: &Message<'_>,
    code: u16,
    seal: Seal<'_>,
    body: impl FnOnce(MessageBuilder<'_>) -> MessageBuilder<'_>,
) -> Option<usize> {
    let b = MessageBuilder::new(out, Class::Error, msg.method(), msg.transaction_id())
        .error_code(code, reason(code));
    seal.finish(body(b))
}
