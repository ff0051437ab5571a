//! STUN (RFC 8489) as ICE-lite needs it: Binding requests, responses and indications with
//! USERNAME, PRIORITY, USE-CANDIDATE, ICE-CONTROLLING/-CONTROLLED, XOR-MAPPED-ADDRESS,
//! ERROR-CODE, MESSAGE-INTEGRITY (HMAC-SHA1) and FINGERPRINT; and for TURN's long-term
//! credentials MESSAGE-INTEGRITY-SHA256 (HMAC-SHA256, after or instead of MESSAGE-INTEGRITY).
//! Attributes of any other type are framed and handed out as bytes ([`Message::get`]).
//!
//! [`Message::parse`] borrows the datagram and never panics; the integrity check is
//! constant-time. [`MessageBuilder`] writes into a caller's buffer without allocating.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use hmac::{Hmac, KeyInit, Mac};
use sha1::Sha1;
use sha2::Sha256;
use subtle::ConstantTimeEq;

/// The magic cookie of every RFC 5389/8489 message.
pub const MAGIC_COOKIE: u32 = 0x2112_A442;
/// STUN header length.
pub const HEADER_LEN: usize = 20;
/// FINGERPRINT's XOR constant ("STUN").
const FINGERPRINT_XOR: u32 = 0x5354_554E;

/// Attribute types this module reads or writes.
pub mod attr {
    /// MAPPED-ADDRESS.
    pub const MAPPED_ADDRESS: u16 = 0x0001;
    /// USERNAME.
    pub const USERNAME: u16 = 0x0006;
    /// MESSAGE-INTEGRITY (HMAC-SHA1).
    pub const MESSAGE_INTEGRITY: u16 = 0x0008;
    /// MESSAGE-INTEGRITY-SHA256 (HMAC-SHA256, RFC 8489 §14.6).
    pub const MESSAGE_INTEGRITY_SHA256: u16 = 0x001C;
    /// ERROR-CODE.
    pub const ERROR_CODE: u16 = 0x0009;
    /// XOR-MAPPED-ADDRESS.
    pub const XOR_MAPPED_ADDRESS: u16 = 0x0020;
    /// PRIORITY (ICE).
    pub const PRIORITY: u16 = 0x0024;
    /// USE-CANDIDATE (ICE).
    pub const USE_CANDIDATE: u16 = 0x0025;
    /// SOFTWARE.
    pub const SOFTWARE: u16 = 0x8022;
    /// FINGERPRINT (CRC-32).
    pub const FINGERPRINT: u16 = 0x8028;
    /// ICE-CONTROLLED.
    pub const ICE_CONTROLLED: u16 = 0x8029;
    /// ICE-CONTROLLING.
    pub const ICE_CONTROLLING: u16 = 0x802A;
}

/// The Binding method.
pub const BINDING: u16 = 0x001;

/// Message class (the two class bits of the type).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Request.
    Request,
    /// Indication.
    Indication,
    /// Success response.
    Success,
    /// Error response.
    Error,
}

impl Class {
    fn bits(self) -> u16 {
        match self {
            Class::Request => 0x000,
            Class::Indication => 0x010,
            Class::Success => 0x100,
            Class::Error => 0x110,
        }
    }
}

/// Why a datagram is not an acceptable STUN message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StunError {
    /// Shorter than a header, or than the length the header states.
    Truncated,
    /// The first two bits are not zero, or the magic cookie is wrong: not STUN.
    NotStun,
    /// The length is not a multiple of 4, or an attribute runs past the end.
    BadLength,
    /// An attribute's value is malformed (named).
    BadAttribute(u16),
    /// An attribute follows FINGERPRINT, or something other than MESSAGE-INTEGRITY-SHA256 or
    /// FINGERPRINT follows MESSAGE-INTEGRITY, or other than FINGERPRINT follows
    /// MESSAGE-INTEGRITY-SHA256.
    BadOrder,
    /// FINGERPRINT present but wrong.
    BadFingerprint,
    /// MESSAGE-INTEGRITY missing where required.
    NoIntegrity,
    /// MESSAGE-INTEGRITY present but wrong for the key.
    BadIntegrity,
    /// The output buffer is too small for the message being built.
    BufferTooSmall,
}

impl fmt::Display for StunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StunError::Truncated => write!(f, "STUN message truncated"),
            StunError::NotStun => write!(f, "not a STUN message"),
            StunError::BadLength => write!(f, "STUN length or attribute length invalid"),
            StunError::BadAttribute(t) => write!(f, "STUN attribute 0x{t:04x} malformed"),
            StunError::BadOrder => write!(f, "STUN attributes after MESSAGE-INTEGRITY/FINGERPRINT"),
            StunError::BadFingerprint => write!(f, "STUN FINGERPRINT mismatch"),
            StunError::NoIntegrity => write!(f, "STUN MESSAGE-INTEGRITY missing"),
            StunError::BadIntegrity => write!(f, "STUN MESSAGE-INTEGRITY mismatch"),
            StunError::BufferTooSmall => write!(f, "buffer too small for the STUN message"),
        }
    }
}

impl std::error::Error for StunError {}

/// Whether a datagram looks like STUN (first two bits zero and the magic cookie), for
/// demultiplexing before a full parse (RFC 7983).
pub fn looks_like_stun(buf: &[u8]) -> bool {
    buf.len() >= HEADER_LEN && buf[0] & 0xC0 == 0 && buf[4..8] == MAGIC_COOKIE.to_be_bytes()
}

/// What [`Message::parse`] found in a datagram, without borrowing it (see [`Message::parts`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parts {
    len: usize,
    class: Class,
    method: u16,
    integrity_at: Option<usize>,
    integrity_sha256_at: Option<usize>,
    has_fingerprint: bool,
}

/// A parsed STUN message borrowing its datagram.
#[derive(Clone, Copy)]
pub struct Message<'a> {
    buf: &'a [u8],
    class: Class,
    method: u16,
    /// Offset of MESSAGE-INTEGRITY's attribute header, if present.
    integrity_at: Option<usize>,
    /// Offset of MESSAGE-INTEGRITY-SHA256's attribute header, if present.
    integrity_sha256_at: Option<usize>,
    has_fingerprint: bool,
}

impl fmt::Debug for Message<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // No attribute values: a USERNAME carries ICE credentials' user fragments.
        f.debug_struct("Message")
            .field("class", &self.class)
            .field("method", &self.method)
            .field("len", &self.buf.len())
            .field("integrity", &self.integrity_at.is_some())
            .field("integrity_sha256", &self.integrity_sha256_at.is_some())
            .field("fingerprint", &self.has_fingerprint)
            .finish()
    }
}

fn be16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

fn crc(data: &[u8]) -> u32 {
    crc32fast::hash(data) ^ FINGERPRINT_XOR
}

impl<'a> Message<'a> {
    /// Parses a datagram: header, attribute framing, attribute order, and FINGERPRINT when
    /// present. MESSAGE-INTEGRITY is checked separately ([`Message::check_integrity`]),
    /// since the key depends on the USERNAME. Bytes after the stated length are refused.
    pub fn parse(buf: &'a [u8]) -> Result<Message<'a>, StunError> {
        crate::parse_count::count();
        Message::parse_uncounted(buf)
    }

    /// [`Message::parse`] without counting (for [`crate::demux`], which counts itself).
    pub(crate) fn parse_uncounted(buf: &'a [u8]) -> Result<Message<'a>, StunError> {
        if buf.len() < HEADER_LEN {
            return Err(StunError::Truncated);
        }
        if buf[0] & 0xC0 != 0 || be32(&buf[4..8]) != MAGIC_COOKIE {
            return Err(StunError::NotStun);
        }
        let len = be16(&buf[2..4]) as usize;
        if !len.is_multiple_of(4) {
            return Err(StunError::BadLength);
        }
        if buf.len() < HEADER_LEN + len {
            return Err(StunError::Truncated);
        }
        if buf.len() > HEADER_LEN + len {
            return Err(StunError::BadLength);
        }
        let ty = be16(&buf[0..2]);
        let class = match ty & 0x0110 {
            0x000 => Class::Request,
            0x010 => Class::Indication,
            0x100 => Class::Success,
            _ => Class::Error,
        };
        let method = (ty & 0x000F) | ((ty & 0x00E0) >> 1) | ((ty & 0x3E00) >> 2);
        let mut msg = Message {
            buf,
            class,
            method,
            integrity_at: None,
            integrity_sha256_at: None,
            has_fingerprint: false,
        };
        let mut at = HEADER_LEN;
        while at < buf.len() {
            if buf.len() - at < 4 {
                return Err(StunError::BadLength);
            }
            let t = be16(&buf[at..]);
            let l = be16(&buf[at + 2..]) as usize;
            let padded = (l + 3) & !3;
            if buf.len() - at - 4 < padded {
                return Err(StunError::BadLength);
            }
            if msg.has_fingerprint {
                return Err(StunError::BadOrder);
            }
            if msg.integrity_sha256_at.is_some() && t != attr::FINGERPRINT {
                return Err(StunError::BadOrder);
            }
            if msg.integrity_at.is_some()
                && !matches!(t, attr::FINGERPRINT | attr::MESSAGE_INTEGRITY_SHA256)
            {
                return Err(StunError::BadOrder);
            }
            match t {
                attr::MESSAGE_INTEGRITY => {
                    if l != 20 {
                        return Err(StunError::BadAttribute(t));
                    }
                    msg.integrity_at = Some(at);
                }
                attr::MESSAGE_INTEGRITY_SHA256 => {
                    // 16 to 32 bytes, a multiple of 4 (a truncated HMAC-SHA256).
                    if !(16..=32).contains(&l) || !l.is_multiple_of(4) {
                        return Err(StunError::BadAttribute(t));
                    }
                    msg.integrity_sha256_at = Some(at);
                }
                attr::FINGERPRINT => {
                    if l != 4 {
                        return Err(StunError::BadAttribute(t));
                    }
                    // CRC over everything before this attribute, with the header's length
                    // as it stands (FINGERPRINT is the last attribute, so it already
                    // includes it).
                    if crc(&buf[..at]) != be32(&buf[at + 4..]) {
                        return Err(StunError::BadFingerprint);
                    }
                    msg.has_fingerprint = true;
                }
                _ => {}
            }
            at += 4 + padded;
        }
        Ok(msg)
    }

    /// What the parse found, without the bytes: kept with a classified datagram (and handed
    /// between threads with it) so that the message is read again without parsing again.
    pub fn parts(&self) -> Parts {
        Parts {
            len: self.buf.len(),
            class: self.class,
            method: self.method,
            integrity_at: self.integrity_at,
            integrity_sha256_at: self.integrity_sha256_at,
            has_fingerprint: self.has_fingerprint,
        }
    }

    /// The message [`Message::parts`] came from, over the same bytes; `None` if `buf` is not
    /// as long as the parsed message was (not the same datagram). Nothing is validated again:
    /// `buf` must be the bytes that were parsed.
    pub fn from_parts(buf: &'a [u8], parts: Parts) -> Option<Message<'a>> {
        (buf.len() == parts.len).then_some(Message {
            buf,
            class: parts.class,
            method: parts.method,
            integrity_at: parts.integrity_at,
            integrity_sha256_at: parts.integrity_sha256_at,
            has_fingerprint: parts.has_fingerprint,
        })
    }

    /// The class.
    pub fn class(&self) -> Class {
        self.class
    }
    /// The method (0x001 for Binding).
    pub fn method(&self) -> u16 {
        self.method
    }
    /// The 96-bit transaction id.
    pub fn transaction_id(&self) -> [u8; 12] {
        let mut t = [0u8; 12];
        t.copy_from_slice(&self.buf[8..20]);
        t
    }
    /// Whether a FINGERPRINT was present (and correct: parse refuses a wrong one).
    pub fn has_fingerprint(&self) -> bool {
        self.has_fingerprint
    }
    /// Whether MESSAGE-INTEGRITY is present (not yet checked).
    pub fn has_integrity(&self) -> bool {
        self.integrity_at.is_some()
    }
    /// Whether MESSAGE-INTEGRITY-SHA256 is present (not yet checked).
    pub fn has_integrity_sha256(&self) -> bool {
        self.integrity_sha256_at.is_some()
    }
    /// The whole message as parsed.
    pub fn bytes(&self) -> &'a [u8] {
        self.buf
    }

    /// Iterates over (type, value) of the attributes, in order.
    pub fn attributes(&self) -> impl Iterator<Item = (u16, &'a [u8])> + 'a {
        let buf = self.buf;
        let mut at = HEADER_LEN;
        std::iter::from_fn(move || {
            if at + 4 > buf.len() {
                return None;
            }
            let t = be16(&buf[at..]);
            let l = be16(&buf[at + 2..]) as usize;
            let v = buf.get(at + 4..at + 4 + l)?;
            at += 4 + ((l + 3) & !3);
            Some((t, v))
        })
    }

    /// The first attribute of this type (before MESSAGE-INTEGRITY: later ones are not
    /// covered by it, and parse refuses them anyway).
    pub fn get(&self, ty: u16) -> Option<&'a [u8]> {
        self.attributes().find(|(t, _)| *t == ty).map(|(_, v)| v)
    }

    /// USERNAME, if present.
    pub fn username(&self) -> Option<&'a [u8]> {
        self.get(attr::USERNAME)
    }
    /// PRIORITY, if present and well formed.
    pub fn priority(&self) -> Option<u32> {
        self.get(attr::PRIORITY).filter(|v| v.len() == 4).map(be32)
    }
    /// Whether USE-CANDIDATE is present.
    pub fn use_candidate(&self) -> bool {
        self.get(attr::USE_CANDIDATE).is_some()
    }
    /// ICE-CONTROLLING's tie-breaker, if present.
    pub fn ice_controlling(&self) -> Option<u64> {
        self.get(attr::ICE_CONTROLLING)
            .and_then(|v| v.try_into().ok())
            .map(u64::from_be_bytes)
    }
    /// ICE-CONTROLLED's tie-breaker, if present.
    pub fn ice_controlled(&self) -> Option<u64> {
        self.get(attr::ICE_CONTROLLED)
            .and_then(|v| v.try_into().ok())
            .map(u64::from_be_bytes)
    }
    /// ERROR-CODE as (code, reason), if present and well formed.
    pub fn error_code(&self) -> Option<(u16, &'a str)> {
        let v = self.get(attr::ERROR_CODE).filter(|v| v.len() >= 4)?;
        let code = u16::from(v[2] & 0x7) * 100 + u16::from(v[3]);
        Some((code, std::str::from_utf8(&v[4..]).ok()?))
    }
    /// XOR-MAPPED-ADDRESS, if present and well formed.
    pub fn xor_mapped_address(&self) -> Option<SocketAddr> {
        self.xor_address(attr::XOR_MAPPED_ADDRESS)
    }

    /// The first attribute of type `ty` read as an XOR'ed address (XOR-MAPPED-ADDRESS, and
    /// TURN's XOR-PEER-ADDRESS and XOR-RELAYED-ADDRESS), if present and well formed.
    pub fn xor_address(&self, ty: u16) -> Option<SocketAddr> {
        self.get(ty)
            .and_then(|v| xor_address_value(v, self.transaction_id()))
    }

    /// Every attribute of type `ty` read as an XOR'ed address, in order; `None` for one that
    /// is malformed.
    pub fn xor_addresses(&self, ty: u16) -> impl Iterator<Item = Option<SocketAddr>> + 'a {
        let tid = self.transaction_id();
        self.attributes()
            .filter(move |(t, _)| *t == ty)
            .map(move |(_, v)| xor_address_value(v, tid))
    }

    /// Checks MESSAGE-INTEGRITY with a short-term credential key (the password), in
    /// constant time.
    pub fn check_integrity(&self, key: &[u8]) -> Result<(), StunError> {
        let at = self.integrity_at.ok_or(StunError::NoIntegrity)?;
        let expected = integrity(self.buf, at, key);
        if bool::from(expected.ct_eq(&self.buf[at + 4..at + 24])) {
            Ok(())
        } else {
            Err(StunError::BadIntegrity)
        }
    }

    /// Checks MESSAGE-INTEGRITY-SHA256 with `key` (for long-term credentials, the key RFC 8489
    /// §9.2.2 derives), in constant time, over as many bytes as the attribute carries.
    pub fn check_integrity_sha256(&self, key: &[u8]) -> Result<(), StunError> {
        let at = self.integrity_sha256_at.ok_or(StunError::NoIntegrity)?;
        let l = be16(&self.buf[at + 2..]) as usize;
        let expected = integrity_sha256(self.buf, at, 4 + l, key);
        if bool::from(expected[..l].ct_eq(&self.buf[at + 4..at + 4 + l])) {
            Ok(())
        } else {
            Err(StunError::BadIntegrity)
        }
    }
}

/// HMAC-SHA256 over the message up to the MESSAGE-INTEGRITY-SHA256 attribute at `at` (of
/// `attr_len` bytes with its header), the header's length set to end just after it.
fn integrity_sha256(buf: &[u8], at: usize, attr_len: usize, key: &[u8]) -> [u8; 32] {
    let mut mac =
        <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("HMAC takes keys of any length");
    let len = (at + attr_len - HEADER_LEN) as u16;
    mac.update(&buf[0..2]);
    mac.update(&len.to_be_bytes());
    mac.update(&buf[4..at]);
    let mut out = [0u8; 32];
    out.copy_from_slice(&mac.finalize().into_bytes());
    out
}

/// An XOR'ed address attribute's value (RFC 8489 §14.2) under `transaction_id`.
pub fn xor_address_value(v: &[u8], transaction_id: [u8; 12]) -> Option<SocketAddr> {
    if v.len() < 4 {
        return None;
    }
    let port = be16(&v[2..]) ^ (MAGIC_COOKIE >> 16) as u16;
    let ip = match (v[1], v.len()) {
        (0x01, 8) => IpAddr::V4(Ipv4Addr::from(be32(&v[4..]) ^ MAGIC_COOKIE)),
        (0x02, 20) => {
            let mut x = [0u8; 16];
            x[..4].copy_from_slice(&MAGIC_COOKIE.to_be_bytes());
            x[4..].copy_from_slice(&transaction_id);
            for (b, k) in x.iter_mut().zip(&v[4..20]) {
                *b ^= k;
            }
            IpAddr::V6(Ipv6Addr::from(x))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

/// HMAC-SHA1 over the message up to the MESSAGE-INTEGRITY attribute at `at`, with the
/// header's length set to end just after that attribute.
fn integrity(buf: &[u8], at: usize, key: &[u8]) -> [u8; 20] {
    let mut mac =
        <Hmac<Sha1> as KeyInit>::new_from_slice(key).expect("HMAC takes keys of any length");
    let len = (at + 24 - HEADER_LEN) as u16;
    mac.update(&buf[0..2]);
    mac.update(&len.to_be_bytes());
    mac.update(&buf[4..at]);
    let mut out = [0u8; 20];
    out.copy_from_slice(&mac.finalize().into_bytes());
    out
}

/// Builds a STUN message in a caller's buffer: attributes in order, then optionally
/// MESSAGE-INTEGRITY and FINGERPRINT.
pub struct MessageBuilder<'b> {
    buf: &'b mut [u8],
    at: usize,
    overflow: bool,
}

impl<'b> MessageBuilder<'b> {
    /// Starts a message of this class and method.
    pub fn new(
        buf: &'b mut [u8],
        class: Class,
        method: u16,
        transaction_id: [u8; 12],
    ) -> MessageBuilder<'b> {
        let mut b = MessageBuilder {
            buf,
            at: HEADER_LEN,
            overflow: false,
        };
        if b.buf.len() < HEADER_LEN {
            b.overflow = true;
            return b;
        }
        let ty =
            (method & 0x000F) | ((method & 0x0070) << 1) | ((method & 0x0F80) << 2) | class.bits();
        b.buf[0..2].copy_from_slice(&ty.to_be_bytes());
        b.buf[2..4].copy_from_slice(&0u16.to_be_bytes());
        b.buf[4..8].copy_from_slice(&MAGIC_COOKIE.to_be_bytes());
        b.buf[8..20].copy_from_slice(&transaction_id);
        b
    }

    fn set_len(&mut self) {
        let len = (self.at - HEADER_LEN) as u16;
        self.buf[2..4].copy_from_slice(&len.to_be_bytes());
    }

    /// Appends an attribute (padded to 4 bytes with zeros).
    pub fn attribute(mut self, ty: u16, value: &[u8]) -> Self {
        let padded = (value.len() + 3) & !3;
        if self.overflow || value.len() > u16::MAX as usize || self.buf.len() - self.at < 4 + padded
        {
            self.overflow = true;
            return self;
        }
        let at = self.at;
        self.buf[at..at + 2].copy_from_slice(&ty.to_be_bytes());
        self.buf[at + 2..at + 4].copy_from_slice(&(value.len() as u16).to_be_bytes());
        self.buf[at + 4..at + 4 + value.len()].copy_from_slice(value);
        self.buf[at + 4 + value.len()..at + 4 + padded].fill(0);
        self.at += 4 + padded;
        self
    }

    /// XOR-MAPPED-ADDRESS of `addr`.
    pub fn xor_mapped_address(self, addr: SocketAddr) -> Self {
        self.xor_address(attr::XOR_MAPPED_ADDRESS, addr)
    }

    /// An attribute of type `ty` holding `addr` XOR'ed (XOR-MAPPED-ADDRESS, XOR-PEER-ADDRESS,
    /// XOR-RELAYED-ADDRESS).
    pub fn xor_address(self, ty: u16, addr: SocketAddr) -> Self {
        let port = (addr.port() ^ (MAGIC_COOKIE >> 16) as u16).to_be_bytes();
        match addr.ip() {
            IpAddr::V4(ip) => {
                let x = (u32::from(ip) ^ MAGIC_COOKIE).to_be_bytes();
                self.attribute(ty, &[0, 1, port[0], port[1], x[0], x[1], x[2], x[3]])
            }
            IpAddr::V6(ip) => {
                let mut v = [0u8; 20];
                v[1] = 2;
                v[2..4].copy_from_slice(&port);
                let mut k = [0u8; 16];
                if !self.overflow {
                    k[..4].copy_from_slice(&MAGIC_COOKIE.to_be_bytes());
                    k[4..].copy_from_slice(&self.buf[8..20]);
                }
                for (i, b) in ip.octets().iter().enumerate() {
                    v[4 + i] = b ^ k[i];
                }
                self.attribute(ty, &v)
            }
        }
    }

    /// ERROR-CODE with a reason phrase.
    pub fn error_code(self, code: u16, reason: &str) -> Self {
        let mut v = [0u8; 4 + 128];
        let r = &reason.as_bytes()[..reason.len().min(128)];
        v[2] = (code / 100) as u8 & 0x7;
        v[3] = (code % 100) as u8;
        v[4..4 + r.len()].copy_from_slice(r);
        self.attribute(attr::ERROR_CODE, &v[..4 + r.len()])
    }

    /// Appends MESSAGE-INTEGRITY computed with `key`.
    pub fn integrity(mut self, key: &[u8]) -> Self {
        if self.overflow || self.buf.len() - self.at < 24 {
            self.overflow = true;
            return self;
        }
        let at = self.at;
        let mac = integrity(self.buf, at, key);
        self.buf[at..at + 2].copy_from_slice(&attr::MESSAGE_INTEGRITY.to_be_bytes());
        self.buf[at + 2..at + 4].copy_from_slice(&20u16.to_be_bytes());
        self.buf[at + 4..at + 24].copy_from_slice(&mac);
        self.at += 24;
        self
    }

    /// Appends MESSAGE-INTEGRITY-SHA256 (the full 32 bytes) computed with `key`.
    pub fn integrity_sha256(mut self, key: &[u8]) -> Self {
        if self.overflow || self.buf.len() - self.at < 36 {
            self.overflow = true;
            return self;
        }
        let at = self.at;
        let mac = integrity_sha256(self.buf, at, 36, key);
        self.buf[at..at + 2].copy_from_slice(&attr::MESSAGE_INTEGRITY_SHA256.to_be_bytes());
        self.buf[at + 2..at + 4].copy_from_slice(&32u16.to_be_bytes());
        self.buf[at + 4..at + 36].copy_from_slice(&mac);
        self.at += 36;
        self
    }

    /// The transaction id this message was started with.
    pub fn transaction_id(&self) -> [u8; 12] {
        let mut t = [0u8; 12];
        if !self.overflow {
            t.copy_from_slice(&self.buf[8..20]);
        }
        t
    }

    /// Appends FINGERPRINT and returns the message's length.
    pub fn fingerprint(mut self) -> Result<usize, StunError> {
        if self.overflow || self.buf.len() - self.at < 8 {
            return Err(StunError::BufferTooSmall);
        }
        let at = self.at;
        self.at += 8;
        self.set_len();
        let c = crc(&self.buf[..at]);
        self.buf[at..at + 2].copy_from_slice(&attr::FINGERPRINT.to_be_bytes());
        self.buf[at + 2..at + 4].copy_from_slice(&4u16.to_be_bytes());
        self.buf[at + 4..at + 8].copy_from_slice(&c.to_be_bytes());
        Ok(self.at)
    }

    /// Finishes without FINGERPRINT and returns the message's length.
    pub fn finish(mut self) -> Result<usize, StunError> {
        if self.overflow {
            return Err(StunError::BufferTooSmall);
        }
        self.set_len();
        Ok(self.at)
    }
}
