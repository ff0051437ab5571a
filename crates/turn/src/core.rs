//! The sans-IO TURN server of one shard: what a client's message or a peer's datagram does to
//! the allocations, and what to send where. It owns no socket and reads no clock: the I/O
//! hands it bytes, the time and an [`Io`] that opens relays, and sends what it returns.
//!
//! * Requests (Allocate, Refresh, CreatePermission, ChannelBind) need the long-term
//!   credential mechanism ([`crate::auth`]); Binding is answered to anyone.
//! * Peers are only the addresses in [`CoreConfig::peers`] (the gateway's own media
//!   addresses): a permission or channel for any other is refused with 403, a Send to one is
//!   dropped, a datagram on a relay from one is dropped: no open relay.
//! * Every refusal and drop is counted by reason ([`crate::stats`]).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use secrelay_wire::stun::{Class, Message, MessageBuilder};

use crate::auth::{parse_username, Algorithm, CredentialError, Credentials, Keys, Nonces};
use crate::proto::{self, attr, method, Seal};
use crate::quota::{Quotas, Ticket};
use crate::stats::{Dropped, Ended, Refusal, Stats};

/// The largest datagram relayed, either way: what the gateway's media sockets read (its media
/// is at most an MTU). A longer one, a UDP client's datagram, data for the peer from a stream
/// client, or a datagram on a relay port, is dropped whole and counted ([`Dropped::TooLarge`]),
/// never cut.
pub const MAX_DATAGRAM: usize = 2048;

/// A client's 5-tuple as the I/O names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClientKey {
    /// A UDP client: its address and the server address it sent to.
    Udp {
        /// The client's address.
        client: SocketAddr,
        /// The server's.
        local: SocketAddr,
    },
    /// A TCP or TLS connection, by the I/O's number for it.
    Stream(u64),
}

/// A client as one message arrives from it.
#[derive(Debug, Clone, Copy)]
pub struct Client {
    /// Its 5-tuple.
    pub key: ClientKey,
    /// Its address (the reflexive one, as the server sees it).
    pub addr: SocketAddr,
}

/// The time, both ways the core needs it.
#[derive(Debug, Clone, Copy)]
pub struct Now {
    /// For lifetimes.
    pub at: Instant,
    /// Unix seconds, for credentials' expiry and nonces.
    pub unix: u64,
}

impl Now {
    /// The current time.
    pub fn current() -> Now {
        Now {
            at: Instant::now(),
            unix: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
        }
    }
}

/// One of the gateway's media addresses: the address clients name (it is in the gateway's
/// candidates), and the address the relay sends to on this host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    /// As clients know it.
    pub advertised: SocketAddr,
    /// As the relays reach it.
    pub local: SocketAddr,
}

/// The core's settings.
#[derive(Debug, Clone)]
pub struct CoreConfig {
    /// The only peers relayed to and from.
    pub peers: Vec<Peer>,
    /// The address written in XOR-RELAYED-ADDRESS for IPv4 relays (with the relay's port);
    /// none: the relay socket's own.
    pub relayed_ip: Option<IpAddr>,
    /// The longest lifetime granted (at least [`proto::DEFAULT_LIFETIME`]).
    pub max_lifetime: Duration,
    /// Permissions per allocation at most.
    pub max_permissions: usize,
    /// Channels per allocation at most.
    pub max_channels: usize,
}

/// What every shard shares.
pub struct Shared {
    /// The settings.
    pub config: CoreConfig,
    /// The secret and realm.
    pub credentials: Credentials,
    /// The nonces.
    pub nonces: Nonces,
    /// The quotas.
    pub quotas: Arc<Quotas>,
    /// The counters.
    pub stats: Arc<Stats>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// What the core needs the I/O to do while it decides.
pub trait Io<R, C> {
    /// Opens a relay socket (IPv6 when `v6`, on an even port when `even`) for `client`'s new
    /// allocation, numbered `relay_id`: its handle and the local address it is bound to, or
    /// `None` when no port is free.
    fn open_relay(
        &mut self,
        v6: bool,
        even: bool,
        client: ClientKey,
        relay_id: u64,
    ) -> Option<(R, SocketAddr)>;
    /// The sink that reaches `client` (what its peers send goes there).
    fn sink(&mut self, client: &Client) -> C;
}

/// What to do with a client's message.
#[derive(Debug)]
pub enum Out<'a, R> {
    /// Send these bytes back to the client.
    Reply(&'a [u8]),
    /// Send `payload` from `relay` to `to`.
    ToPeer {
        /// The allocation's relay.
        relay: &'a R,
        /// The peer's local address.
        to: SocketAddr,
        /// The bytes.
        payload: &'a [u8],
    },
    /// Nothing to send (dropped and counted, or nothing to answer).
    Nothing,
}

struct Channel {
    number: u16,
    peer: SocketAddr,
    local: SocketAddr,
    expires: Instant,
}

struct Allocation<R, C> {
    relay: R,
    relay_id: u64,
    relayed: SocketAddr,
    v6: bool,
    sink: C,
    stream: bool,
    username: Box<[u8]>,
    keys: Keys,
    txid: [u8; 12],
    expires: Instant,
    permissions: Vec<(IpAddr, Instant)>,
    channels: Vec<Channel>,
    _ticket: Ticket,
}

impl<R, C> Allocation<R, C> {
    fn permitted(&self, ip: IpAddr, now: Instant) -> bool {
        self.permissions.iter().any(|(p, e)| *p == ip && *e > now)
    }
}

/// A request that passed the long-term credential check.
struct Authed {
    keys: Keys,
    algorithm: Algorithm,
    sha256: bool,
}

impl Authed {
    fn seal(&self, fingerprint: bool) -> Seal<'_> {
        Seal {
            key: Some((self.keys.key(self.algorithm), self.sha256)),
            fingerprint,
        }
    }
}

/// Why a request did not authenticate: the code to answer and what to count.
enum AuthFail {
    /// No credential yet: 401 with a nonce (counted as a challenge).
    Challenge,
    /// Refused: the code and the reason.
    Refused(u16, Refusal),
}

/// One shard's allocations.
pub struct Core<R, C> {
    shared: Arc<Shared>,
    allocations: HashMap<ClientKey, Allocation<R, C>>,
    next_relay: u64,
    indication_ids: u64,
}

impl<R, C> std::fmt::Debug for Core<R, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Core")
            .field("allocations", &self.allocations.len())
            .finish_non_exhaustive()
    }
}

fn be16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}

impl<R, C> Core<R, C> {
    /// A shard with no allocation.
    pub fn new(shared: Arc<Shared>) -> Core<R, C> {
        let mut seed = [0u8; 8];
        let _ = getrandom::fill(&mut seed);
        Core {
            shared,
            allocations: HashMap::new(),
            next_relay: 1,
            indication_ids: u64::from_ne_bytes(seed),
        }
    }

    /// What the shards share.
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Allocations in this shard (expired ones not yet swept included).
    pub fn allocations(&self) -> usize {
        self.allocations.len()
    }

    /// Whether `key` has an allocation.
    pub fn has_allocation(&self, key: &ClientKey) -> bool {
        self.allocations.contains_key(key)
    }

    fn stats(&self) -> &Stats {
        &self.shared.stats
    }

    /// A client's message (one datagram, or one frame of a stream): what to send.
    pub fn handle_client<'a>(
        &'a mut self,
        now: Now,
        client: Client,
        data: &'a [u8],
        out: &'a mut [u8],
        io: &mut dyn Io<R, C>,
    ) -> Out<'a, R> {
        match data.first() {
            Some(b) if b & 0xC0 == 0x40 => return self.channel_data(now, &client, data),
            Some(b) if b & 0xC0 == 0 => {}
            _ => {
                self.stats().dropped(Dropped::Malformed);
                return Out::Nothing;
            }
        }
        let Ok(msg) = Message::parse(data) else {
            self.stats().dropped(Dropped::Malformed);
            return Out::Nothing;
        };
        let n = match (msg.class(), msg.method()) {
            (Class::Indication, method::SEND) => return self.send_indication(now, &client, &msg),
            (Class::Request, method::BINDING) => binding(&client, &msg, out),
            (
                Class::Request,
                method::ALLOCATE
                | method::REFRESH
                | method::CREATE_PERMISSION
                | method::CHANNEL_BIND,
            ) => self.request(now, &client, &msg, out, io),
            (Class::Request, _) => {
                self.stats().refused(Refusal::BadRequest);
                proto::error(out, &msg, 400, no_seal(&msg), |b| b)
            }
            _ => {
                self.stats().dropped(Dropped::Unexpected);
                None
            }
        };
        match n {
            Some(n) => Out::Reply(&out[..n]),
            None => Out::Nothing,
        }
    }

    /// An authenticated request: checked, then done.
    fn request(
        &mut self,
        now: Now,
        client: &Client,
        msg: &Message<'_>,
        out: &mut [u8],
        io: &mut dyn Io<R, C>,
    ) -> Option<usize> {
        let authed = match self.authenticate(now, client, msg) {
            Ok(a) => a,
            Err(fail) => return self.auth_error(now, client, msg, out, fail),
        };
        let seal = authed.seal(msg.has_fingerprint());
        if let Some(t) = proto::unknown_required(msg) {
            self.stats().refused(Refusal::UnknownAttribute);
            return proto::error(out, msg, 420, seal, |b| {
                b.attribute(attr::UNKNOWN_ATTRIBUTES, &t.to_be_bytes())
            });
        }
        let done = match msg.method() {
            method::ALLOCATE => self.allocate(now, client, msg, &authed, io),
            method::REFRESH => self.refresh(now, client, msg),
            method::CREATE_PERMISSION => self.create_permission(now, client, msg),
            _ => self.channel_bind(now, client, msg),
        };
        match done {
            Ok(Done::Allocated) => {
                let a = self.allocations.get(&client.key)?;
                let left = a.expires.saturating_duration_since(now.at).as_secs() as u32;
                proto::success(out, msg, seal, |b| {
                    b.xor_address(attr::XOR_RELAYED_ADDRESS, a.relayed)
                        .attribute(attr::LIFETIME, &left.max(1).to_be_bytes())
                        .xor_address(attr::XOR_MAPPED_ADDRESS, client.addr)
                })
            }
            Ok(Done::Lifetime(secs)) => proto::success(out, msg, seal, |b| {
                b.attribute(attr::LIFETIME, &secs.to_be_bytes())
            }),
            Ok(Done::Empty) => proto::success(out, msg, seal, |b| b),
            Err((code, why)) => {
                self.stats().refused(why);
                proto::error(out, msg, code, seal, |b| b)
            }
        }
    }

    /// 401 (with REALM, NONCE and PASSWORD-ALGORITHMS), 438 (a new NONCE) or 400.
    fn auth_error(
        &self,
        now: Now,
        client: &Client,
        msg: &Message<'_>,
        out: &mut [u8],
        fail: AuthFail,
    ) -> Option<usize> {
        let code = match fail {
            AuthFail::Challenge => {
                self.stats()
                    .challenges
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                401
            }
            AuthFail::Refused(code, why) => {
                self.stats().refused(why);
                code
            }
        };
        let seal = no_seal(msg);
        if code == 400 {
            return proto::error(out, msg, 400, seal, |b| b);
        }
        let nonce = self.shared.nonces.make(client.addr.ip(), now.unix);
        let realm = self.shared.credentials.realm();
        proto::error(out, msg, code, seal, |b| {
            b.attribute(attr::REALM, realm.as_bytes())
                .attribute(attr::NONCE, nonce.as_bytes())
                .attribute(attr::PASSWORD_ALGORITHMS, &crate::auth::PASSWORD_ALGORITHMS)
        })
    }

    /// RFC 8489 §9.2.4: the credential, the nonce, the password algorithm, the integrity.
    fn authenticate(
        &self,
        now: Now,
        client: &Client,
        msg: &Message<'_>,
    ) -> Result<Authed, AuthFail> {
        if !msg.has_integrity() && !msg.has_integrity_sha256() {
            return Err(AuthFail::Challenge);
        }
        let bad = AuthFail::Refused(400, Refusal::BadRequest);
        let (Some(username), Some(_realm), Some(nonce)) =
            (msg.username(), msg.get(attr::REALM), msg.get(attr::NONCE))
        else {
            return Err(bad);
        };
        if !self.shared.nonces.check(nonce, client.addr.ip(), now.unix) {
            return Err(AuthFail::Refused(438, Refusal::StaleNonce));
        }
        let algorithm = password_algorithm(msg).ok_or(bad)?;
        let keys = match self.allocations.get(&client.key) {
            Some(a) if *a.username == *username => {
                if a.keys.expires < now.unix {
                    Err(CredentialError::Expired)
                } else {
                    Ok(a.keys.clone())
                }
            }
            _ => self.shared.credentials.keys(username, now.unix),
        };
        let keys = keys.map_err(|e| match e {
            CredentialError::Malformed => AuthFail::Refused(401, Refusal::BadUsername),
            CredentialError::Expired => AuthFail::Refused(401, Refusal::ExpiredCredential),
        })?;
        let key = keys.key(algorithm);
        let sha256 = msg.has_integrity_sha256();
        let ok = if sha256 {
            msg.check_integrity_sha256(key)
        } else {
            msg.check_integrity(key)
        };
        ok.map_err(|_| AuthFail::Refused(401, Refusal::BadIntegrity))?;
        Ok(Authed {
            keys,
            algorithm,
            sha256,
        })
    }

    /// Allocate (RFC 8656 §7.2).
    fn allocate(
        &mut self,
        now: Now,
        client: &Client,
        msg: &Message<'_>,
        authed: &Authed,
        io: &mut dyn Io<R, C>,
    ) -> Result<Done, (u16, Refusal)> {
        if let Some(a) = self.allocations.get(&client.key) {
            // A retransmission is answered again; another Allocate on the 5-tuple is not.
            return if a.txid == msg.transaction_id() {
                Ok(Done::Allocated)
            } else {
                Err((437, Refusal::AllocationMismatch))
            };
        }
        match msg.get(attr::REQUESTED_TRANSPORT) {
            Some(v) if v.len() == 4 && v[0] == proto::UDP => {}
            Some(v) if v.len() == 4 => return Err((442, Refusal::UnsupportedTransport)),
            _ => return Err((400, Refusal::BadRequest)),
        }
        let v6 = match msg.get(attr::REQUESTED_ADDRESS_FAMILY) {
            None => false,
            Some([1, ..]) => false,
            Some([2, ..]) => true,
            Some(_) => return Err((440, Refusal::AddressFamily)),
        };
        let even = match msg.get(attr::EVEN_PORT) {
            None => false,
            // No port is reserved for a later allocation (RESERVATION-TOKEN is not served).
            Some([r, ..]) if r & 0x80 != 0 => return Err((508, Refusal::NoRelayPort)),
            Some([_, ..]) => true,
            Some([]) => return Err((400, Refusal::BadRequest)),
        };
        let config = &self.shared.config;
        if !config.peers.iter().any(|p| p.advertised.is_ipv6() == v6) {
            return Err((440, Refusal::AddressFamily));
        }
        let lifetime = lifetime_of(msg, config.max_lifetime)?;
        let username = msg.username().unwrap_or_default();
        let identity = parse_username(username).map_or(&[][..], |(_, i)| i);
        let ticket = self
            .shared
            .quotas
            .take(identity, client.addr.ip())
            .map_err(|why| (486, why))?;
        let relay_id = self.next_relay;
        self.next_relay += 1;
        let (relay, bound) = io
            .open_relay(v6, even, client.key, relay_id)
            .ok_or((508, Refusal::NoRelayPort))?;
        let relayed = match (config.relayed_ip, v6) {
            (Some(ip), false) => SocketAddr::new(ip, bound.port()),
            _ => bound,
        };
        let allocation = Allocation {
            relay,
            relay_id,
            relayed,
            v6,
            sink: io.sink(client),
            stream: matches!(client.key, ClientKey::Stream(_)),
            username: username.into(),
            keys: authed.keys.clone(),
            txid: msg.transaction_id(),
            expires: now.at + lifetime,
            permissions: Vec::new(),
            channels: Vec::new(),
            _ticket: ticket,
        };
        self.allocations.insert(client.key, allocation);
        self.stats()
            .allocations_made
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(Done::Allocated)
    }

    /// The client's allocation, made with the same username, for a request on it.
    fn own(
        &mut self,
        client: &Client,
        msg: &Message<'_>,
    ) -> Result<&mut Allocation<R, C>, (u16, Refusal)> {
        let a = self
            .allocations
            .get_mut(&client.key)
            .ok_or((437, Refusal::AllocationMismatch))?;
        if Some(&*a.username) != msg.username() {
            return Err((441, Refusal::WrongCredentials));
        }
        Ok(a)
    }

    /// Refresh (RFC 8656 §7.3): a new lifetime, or with 0 the allocation's end.
    fn refresh(
        &mut self,
        now: Now,
        client: &Client,
        msg: &Message<'_>,
    ) -> Result<Done, (u16, Refusal)> {
        let max = self.shared.config.max_lifetime;
        let a = self.own(client, msg)?;
        match msg.get(attr::REQUESTED_ADDRESS_FAMILY) {
            Some([1, ..]) if a.v6 => return Err((443, Refusal::AddressFamily)),
            Some([2, ..]) if !a.v6 => return Err((443, Refusal::AddressFamily)),
            _ => {}
        }
        if proto::lifetime(msg) == Ok(Some(0)) {
            self.allocations.remove(&client.key);
            self.stats().ended(Ended::Deleted);
            return Ok(Done::Lifetime(0));
        }
        let lifetime = lifetime_of(msg, max)?;
        a.expires = now.at + lifetime;
        Ok(Done::Lifetime(lifetime.as_secs() as u32))
    }

    /// CreatePermission (RFC 8656 §9.2): every peer must be one of ours, or none is installed.
    fn create_permission(
        &mut self,
        now: Now,
        client: &Client,
        msg: &Message<'_>,
    ) -> Result<Done, (u16, Refusal)> {
        let shared = self.shared.clone();
        let a = self.own(client, msg)?;
        let mut ips: Vec<IpAddr> = Vec::new();
        for peer in msg.xor_addresses(attr::XOR_PEER_ADDRESS) {
            let peer = peer.ok_or((400, Refusal::BadRequest))?;
            if peer.is_ipv6() != a.v6 {
                return Err((443, Refusal::AddressFamily));
            }
            if !shared
                .config
                .peers
                .iter()
                .any(|p| p.advertised.ip() == peer.ip())
            {
                return Err((403, Refusal::ForbiddenPeer));
            }
            if !ips.contains(&peer.ip()) {
                ips.push(peer.ip());
            }
        }
        if ips.is_empty() {
            return Err((400, Refusal::BadRequest));
        }
        for ip in ips {
            permit(a, ip, now.at, shared.config.max_permissions)?;
        }
        Ok(Done::Empty)
    }

    /// ChannelBind (RFC 8656 §11.2): the peer one of ours, the number and the peer each bound
    /// to nothing else; refreshes the peer's permission too.
    fn channel_bind(
        &mut self,
        now: Now,
        client: &Client,
        msg: &Message<'_>,
    ) -> Result<Done, (u16, Refusal)> {
        let shared = self.shared.clone();
        let a = self.own(client, msg)?;
        let number = match msg.get(attr::CHANNEL_NUMBER) {
            Some(v) if v.len() == 4 => be16(v),
            _ => return Err((400, Refusal::BadRequest)),
        };
        if !(proto::CHANNEL_MIN..=proto::CHANNEL_MAX).contains(&number) {
            return Err((400, Refusal::BadRequest));
        }
        let peer = msg
            .xor_address(attr::XOR_PEER_ADDRESS)
            .ok_or((400, Refusal::BadRequest))?;
        if peer.is_ipv6() != a.v6 {
            return Err((443, Refusal::AddressFamily));
        }
        let local = shared
            .config
            .peers
            .iter()
            .find(|p| p.advertised == peer)
            .map(|p| p.local)
            .ok_or((403, Refusal::ForbiddenPeer))?;
        let conflict = a
            .channels
            .iter()
            .any(|c| (c.number == number) != (c.peer == peer));
        if conflict {
            return Err((400, Refusal::ChannelConflict));
        }
        let at = a.channels.iter().position(|c| c.number == number);
        if at.is_none() && a.channels.len() >= shared.config.max_channels {
            return Err((508, Refusal::Capacity));
        }
        permit(a, peer.ip(), now.at, shared.config.max_permissions)?;
        let expires = now.at + proto::CHANNEL_LIFETIME;
        match at {
            Some(i) => a.channels[i].expires = expires,
            None => a.channels.push(Channel {
                number,
                peer,
                local,
                expires,
            }),
        }
        Ok(Done::Empty)
    }

    /// A Send indication: its DATA to its peer, if permitted.
    fn send_indication<'a>(&'a self, now: Now, client: &Client, msg: &Message<'a>) -> Out<'a, R> {
        let Some(a) = self.live(&client.key, now) else {
            self.stats().dropped(Dropped::NoAllocation);
            return Out::Nothing;
        };
        let (Some(peer), Some(data)) =
            (msg.xor_address(attr::XOR_PEER_ADDRESS), msg.get(attr::DATA))
        else {
            self.stats().dropped(Dropped::Malformed);
            return Out::Nothing;
        };
        let Some(p) = self
            .shared
            .config
            .peers
            .iter()
            .find(|p| p.advertised == peer)
        else {
            self.stats().dropped(Dropped::ForbiddenPeer);
            return Out::Nothing;
        };
        if !a.permitted(peer.ip(), now.at) {
            self.stats().dropped(Dropped::NoPermission);
            return Out::Nothing;
        }
        if data.len() > MAX_DATAGRAM {
            self.stats().dropped(Dropped::TooLarge);
            return Out::Nothing;
        }
        self.stats().relayed(true, data.len());
        Out::ToPeer {
            relay: &a.relay,
            to: p.local,
            payload: data,
        }
    }

    /// ChannelData from a client: its payload to the channel's peer.
    fn channel_data<'a>(&'a self, now: Now, client: &Client, data: &'a [u8]) -> Out<'a, R> {
        let payload = (data.len() >= 4)
            .then(|| data.get(4..4 + usize::from(be16(&data[2..]))))
            .flatten();
        let Some(payload) = payload else {
            self.stats().dropped(Dropped::Malformed);
            return Out::Nothing;
        };
        let Some(a) = self.live(&client.key, now) else {
            self.stats().dropped(Dropped::NoAllocation);
            return Out::Nothing;
        };
        let number = be16(data);
        let Some(c) = a
            .channels
            .iter()
            .find(|c| c.number == number && c.expires > now.at)
        else {
            self.stats().dropped(Dropped::UnknownChannel);
            return Out::Nothing;
        };
        if !a.permitted(c.peer.ip(), now.at) {
            self.stats().dropped(Dropped::NoPermission);
            return Out::Nothing;
        }
        if payload.len() > MAX_DATAGRAM {
            self.stats().dropped(Dropped::TooLarge);
            return Out::Nothing;
        }
        self.stats().relayed(true, payload.len());
        Out::ToPeer {
            relay: &a.relay,
            to: c.local,
            payload,
        }
    }

    fn live(&self, key: &ClientKey, now: Now) -> Option<&Allocation<R, C>> {
        self.allocations.get(key).filter(|a| a.expires > now.at)
    }

    /// A datagram that arrived on the relay `relay_id` of `key`'s allocation from `from`, at
    /// `buf[payload]` with [`proto::HEADROOM`] before it and [`proto::TAILROOM`] after: the
    /// sink to send to and the bytes (ChannelData when a channel is bound to the peer, else a
    /// Data indication), made in place.
    pub fn from_peer<'a>(
        &'a mut self,
        now: Now,
        key: &ClientKey,
        relay_id: u64,
        from: SocketAddr,
        buf: &'a mut [u8],
        payload: Range<usize>,
    ) -> Option<(&'a C, &'a [u8])> {
        self.indication_ids = self.indication_ids.wrapping_add(1);
        let id = self.indication_ids;
        let stats = &*self.shared.stats;
        let Some(a) = self
            .allocations
            .get(key)
            .filter(|a| a.relay_id == relay_id && a.expires > now.at)
        else {
            stats.dropped(Dropped::NoAllocation);
            return None;
        };
        if payload.start < proto::HEADROOM || payload.end + proto::TAILROOM > buf.len() {
            stats.dropped(Dropped::Malformed);
            return None;
        }
        // The advertised address the client has a permission for that reaches `from`.
        let peer = self
            .shared
            .config
            .peers
            .iter()
            .filter(|p| p.local == from)
            .map(|p| p.advertised)
            .find(|p| a.permitted(p.ip(), now.at));
        let Some(peer) = peer else {
            let known = self.shared.config.peers.iter().any(|p| p.local == from);
            stats.dropped(if known {
                Dropped::NoPermission
            } else {
                Dropped::UnknownPeer
            });
            return None;
        };
        let len = payload.len();
        stats.relayed(false, len);
        let channel = a
            .channels
            .iter()
            .find(|c| c.peer == peer && c.expires > now.at);
        let range = match channel {
            Some(c) => channel_frame(buf, payload, c.number, a.stream),
            None => data_indication(buf, payload, peer, id),
        };
        Some((&a.sink, &buf[range]))
    }

    /// Ends allocations whose lifetime ran out and forgets expired permissions and channels.
    pub fn sweep(&mut self, now: Now) {
        let stats = self.shared.stats.clone();
        self.allocations.retain(|_, a| {
            if a.expires <= now.at {
                stats.ended(Ended::Expired);
                return false;
            }
            a.permissions.retain(|(_, e)| *e > now.at);
            a.channels.retain(|c| c.expires > now.at);
            true
        });
    }

    /// `key`'s connection closed: its allocation ends.
    pub fn close(&mut self, key: &ClientKey) {
        if self.allocations.remove(key).is_some() {
            self.stats().ended(Ended::Closed);
        }
    }
}

/// What a request did, for its success response.
enum Done {
    /// An allocation (new, or the retransmitted Allocate's).
    Allocated,
    /// A lifetime granted (Refresh).
    Lifetime(u32),
    /// Nothing to say (CreatePermission, ChannelBind).
    Empty,
}

/// Installs or refreshes a permission for `ip`.
fn permit<R, C>(
    a: &mut Allocation<R, C>,
    ip: IpAddr,
    now: Instant,
    max: usize,
) -> Result<(), (u16, Refusal)> {
    let expires = now + proto::PERMISSION_LIFETIME;
    if let Some(p) = a.permissions.iter_mut().find(|(p, _)| *p == ip) {
        p.1 = expires;
        return Ok(());
    }
    a.permissions.retain(|(_, e)| *e > now);
    if a.permissions.len() >= max {
        return Err((508, Refusal::Capacity));
    }
    a.permissions.push((ip, expires));
    Ok(())
}

/// The lifetime to grant: what the client asks for, at least the default, at most `max`.
fn lifetime_of(msg: &Message<'_>, max: Duration) -> Result<Duration, (u16, Refusal)> {
    let asked = proto::lifetime(msg).map_err(|_| (400, Refusal::BadRequest))?;
    let asked = asked.map_or(proto::DEFAULT_LIFETIME, |s| {
        Duration::from_secs(u64::from(s))
    });
    Ok(asked.min(max).max(proto::DEFAULT_LIFETIME.min(max)))
}

/// The password algorithm a request uses (RFC 8489 §9.2.4): MD5 when it names none; when it
/// names one, it must repeat our PASSWORD-ALGORITHMS exactly and pick one of them.
fn password_algorithm(msg: &Message<'_>) -> Option<Algorithm> {
    match (
        msg.get(attr::PASSWORD_ALGORITHMS),
        msg.get(attr::PASSWORD_ALGORITHM),
    ) {
        (None, None) => Some(Algorithm::Md5),
        (Some(list), Some(pick)) if list == crate::auth::PASSWORD_ALGORITHMS => match pick {
            [0, 1, 0, 0] => Some(Algorithm::Md5),
            [0, 2, 0, 0] => Some(Algorithm::Sha256),
            _ => None,
        },
        _ => None,
    }
}

/// A reply with no integrity (to a request that did not authenticate).
fn no_seal<'k>(msg: &Message<'_>) -> Seal<'k> {
    Seal {
        key: None,
        fingerprint: msg.has_fingerprint(),
    }
}

/// Binding: the client's reflexive address.
fn binding(client: &Client, msg: &Message<'_>, out: &mut [u8]) -> Option<usize> {
    proto::success(out, msg, no_seal(msg), |b| {
        b.xor_address(attr::XOR_MAPPED_ADDRESS, client.addr)
    })
}

/// ChannelData around `buf[payload]`, padded to 4 bytes on streams (RFC 8656 §12.5).
fn channel_frame(buf: &mut [u8], payload: Range<usize>, number: u16, pad: bool) -> Range<usize> {
    let start = payload.start - 4;
    buf[start..start + 2].copy_from_slice(&number.to_be_bytes());
    buf[start + 2..start + 4].copy_from_slice(&(payload.len() as u16).to_be_bytes());
    let mut end = payload.end;
    if pad {
        let padded = start + ((end - start + 3) & !3);
        buf[end..padded].fill(0);
        end = padded;
    }
    start..end
}

/// A Data indication (XOR-PEER-ADDRESS, DATA) around `buf[payload]`.
fn data_indication(
    buf: &mut [u8],
    payload: Range<usize>,
    peer: SocketAddr,
    id: u64,
) -> Range<usize> {
    let addr_len = if peer.is_ipv6() { 20 } else { 8 };
    let head = 20 + 4 + addr_len + 4;
    let start = payload.start - head;
    let mut txid = [0u8; 12];
    txid[4..].copy_from_slice(&id.to_be_bytes());
    let _ = MessageBuilder::new(
        &mut buf[start..payload.start - 4],
        Class::Indication,
        method::DATA,
        txid,
    )
    .xor_address(attr::XOR_PEER_ADDRESS, peer)
    .finish();
    let at = payload.start - 4;
    buf[at..at + 2].copy_from_slice(&attr::DATA.to_be_bytes());
    buf[at + 2..at + 4].copy_from_slice(&(payload.len() as u16).to_be_bytes());
    let padded = payload.start + ((payload.len() + 3) & !3);
    buf[payload.end..padded].fill(0);
    let body = (padded - start - 20) as u16;
    buf[start + 2..start + 4].copy_from_slice(&body.to_be_bytes());
    start..padded
}
