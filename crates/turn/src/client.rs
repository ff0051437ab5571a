//! The client side of the messages, for the lab's load generator and the tests: requests with
//! and without the long-term credential, ChannelData, and what a response says.

use std::net::SocketAddr;

use md5::{Digest as _, Md5};
use secrelay_wire::stun::{Class, Message, MessageBuilder};

use crate::proto::{attr, method};

/// A client's long-term credential once challenged: what it signs requests with.
#[derive(Clone)]
pub struct Signer {
    username: String,
    realm: String,
    nonce: Vec<u8>,
    key: [u8; 16],
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer")
            .field("username", &self.username)
            .field("realm", &self.realm)
            .finish_non_exhaustive()
    }
}

impl Signer {
    /// A credential (`username`, `password`) for the realm and nonce a 401 gave.
    pub fn new(username: &str, password: &str, realm: &str, nonce: &[u8]) -> Signer {
        let key = Md5::digest(format!("{username}:{realm}:{password}").as_bytes());
        Signer {
            username: username.into(),
            realm: realm.into(),
            nonce: nonce.to_vec(),
            key: key.into(),
        }
    }

    /// The nonce a 438 gave replaces the old one.
    pub fn renew(&mut self, nonce: &[u8]) {
        self.nonce = nonce.to_vec();
    }

    /// The MD5 long-term key.
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// A request of `method` with `body`'s attributes, then USERNAME, REALM, NONCE,
    /// MESSAGE-INTEGRITY and FINGERPRINT; its length in `buf`.
    pub fn request(
        &self,
        buf: &mut [u8],
        method: u16,
        txid: [u8; 12],
        body: impl FnOnce(MessageBuilder<'_>) -> MessageBuilder<'_>,
    ) -> Option<usize> {
        let b = MessageBuilder::new(buf, Class::Request, method, txid);
        body(b)
            .attribute(attr::USERNAME, self.username.as_bytes())
            .attribute(attr::REALM, self.realm.as_bytes())
            .attribute(attr::NONCE, &self.nonce)
            .integrity(&self.key)
            .fingerprint()
            .ok()
    }
}

/// An unauthenticated request (the first Allocate, a Binding).
pub fn bare_request(
    buf: &mut [u8],
    method: u16,
    txid: [u8; 12],
    body: impl FnOnce(MessageBuilder<'_>) -> MessageBuilder<'_>,
) -> Option<usize> {
    body(MessageBuilder::new(buf, Class::Request, method, txid))
        .fingerprint()
        .ok()
}

/// An Allocate's attributes: a UDP relay.
pub fn allocate_body(b: MessageBuilder<'_>) -> MessageBuilder<'_> {
    b.attribute(attr::REQUESTED_TRANSPORT, &[crate::proto::UDP, 0, 0, 0])
}

/// A ChannelBind's attributes: channel `number` to `peer`.
pub fn channel_bind_body(
    number: u16,
    peer: SocketAddr,
) -> impl for<'b> FnOnce(MessageBuilder<'b>) -> MessageBuilder<'b> {
    move |b| {
        let n = number.to_be_bytes();
        b.attribute(attr::CHANNEL_NUMBER, &[n[0], n[1], 0, 0])
            .xor_address(attr::XOR_PEER_ADDRESS, peer)
    }
}

/// A CreatePermission's attributes: `peer`.
pub fn permission_body(
    peer: SocketAddr,
) -> impl for<'b> FnOnce(MessageBuilder<'b>) -> MessageBuilder<'b> {
    move |b| b.xor_address(attr::XOR_PEER_ADDRESS, peer)
}

/// A Send indication of `data` to `peer`.
pub fn send_indication(
    buf: &mut [u8],
    txid: [u8; 12],
    peer: SocketAddr,
    data: &[u8],
) -> Option<usize> {
    MessageBuilder::new(buf, Class::Indication, method::SEND, txid)
        .xor_address(attr::XOR_PEER_ADDRESS, peer)
        .attribute(attr::DATA, data)
        .finish()
        .ok()
}

/// ChannelData of `payload` on `number` (padded to 4 bytes when `pad`, as streams need).
pub fn channel_data(buf: &mut [u8], number: u16, payload: &[u8], pad: bool) -> Option<usize> {
    let n = 4 + payload.len();
    let total = if pad { (n + 3) & !3 } else { n };
    let out = buf.get_mut(..total)?;
    out[..2].copy_from_slice(&number.to_be_bytes());
    out[2..4].copy_from_slice(&(payload.len() as u16).to_be_bytes());
    out[4..n].copy_from_slice(payload);
    out[n..].fill(0);
    Some(total)
}

/// What a response (or an indication from the server) says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// A success response, with XOR-RELAYED-ADDRESS when it has one.
    Success {
        /// Its transaction id.
        txid: [u8; 12],
        /// XOR-RELAYED-ADDRESS.
        relayed: Option<SocketAddr>,
        /// LIFETIME.
        lifetime: Option<u32>,
    },
    /// An error response: the code, and REALM and NONCE when given.
    Error {
        /// Its transaction id.
        txid: [u8; 12],
        /// The code.
        code: u16,
        /// REALM.
        realm: Option<String>,
        /// NONCE.
        nonce: Option<Vec<u8>>,
    },
    /// A Data indication: from which peer, what.
    Data {
        /// XOR-PEER-ADDRESS.
        peer: SocketAddr,
        /// DATA.
        data: Vec<u8>,
    },
    /// ChannelData: the channel and the payload.
    Channel {
        /// The number.
        number: u16,
        /// The payload.
        data: Vec<u8>,
    },
}

/// Reads what the server sent; `key` checks a response's MESSAGE-INTEGRITY when given.
pub fn read(bytes: &[u8], key: Option<&[u8]>) -> Option<Reply> {
    if bytes.first()? & 0xC0 == 0x40 {
        let len = usize::from(u16::from_be_bytes([*bytes.get(2)?, *bytes.get(3)?]));
        return Some(Reply::Channel {
            number: u16::from_be_bytes([bytes[0], bytes[1]]),
            data: bytes.get(4..4 + len)?.to_vec(),
        });
    }
    let m = Message::parse(bytes).ok()?;
    if let Some(k) = key {
        if m.has_integrity() {
            m.check_integrity(k).ok()?;
        }
    }
    let txid = m.transaction_id();
    let text = |t| m.get(t).map(|v| String::from_utf8_lossy(v).into_owned());
    match m.class() {
        Class::Success => Some(Reply::Success {
            txid,
            relayed: m.xor_address(attr::XOR_RELAYED_ADDRESS),
            lifetime: m
                .get(attr::LIFETIME)
                .and_then(|v| <[u8; 4]>::try_from(v).ok())
                .map(u32::from_be_bytes),
        }),
        Class::Error => Some(Reply::Error {
            txid,
            code: m.error_code()?.0,
            realm: text(attr::REALM),
            nonce: m.get(attr::NONCE).map(<[u8]>::to_vec),
        }),
        Class::Indication if m.method() == method::DATA => Some(Reply::Data {
            peer: m.xor_address(attr::XOR_PEER_ADDRESS)?,
            data: m.get(attr::DATA)?.to_vec(),
        }),
        _ => None,
    }
}
