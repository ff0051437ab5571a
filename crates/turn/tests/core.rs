//! The sans-IO core driven as a client drives it: the challenge, allocations, permissions,
//! channels, Send and Data, refresh and expiry; every refusal a client can provoke (expired,
//! forged and malformed credentials, stale nonces, peers that are not the gateway's, quotas,
//! unknown attributes, families and transports) answered with its code and counted by reason.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use secrelay_turn::auth::{Credentials, Nonces};
use secrelay_turn::client::{self, Reply, Signer};
use secrelay_turn::core::{
    Client, ClientKey, Core, CoreConfig, Io, Now, Out, Peer, Shared, MAX_DATAGRAM,
};
use secrelay_turn::proto::{attr, method, HEADROOM, TAILROOM};
use secrelay_turn::quota::{QuotaLimits, Quotas};
use secrelay_turn::stats::{Dropped, Ended, Refusal, Stats};
use secrelay_wire::stun::{Class, Message, MessageBuilder};

const SECRET: &[u8] = b"a shared secret of the test, 32 bytes";
const REALM: &str = "secrelay";
/// The gateway's media address as clients know it, and as the relay reaches it.
const MEDIA: &str = "203.0.113.5:40000";
const MEDIA_LOCAL: &str = "127.0.0.1:40000";

/// A relay that counts itself open until dropped.
#[derive(Debug)]
struct FakeRelay(u64, Arc<AtomicUsize>);
impl Drop for FakeRelay {
    fn drop(&mut self) {
        self.1.fetch_sub(1, Ordering::Relaxed);
    }
}

struct FakeIo {
    free_ports: bool,
    open: Arc<AtomicUsize>,
}
impl Io<FakeRelay, SocketAddr> for FakeIo {
    fn open_relay(
        &mut self,
        _v6: bool,
        even: bool,
        _c: ClientKey,
        id: u64,
    ) -> Option<(FakeRelay, SocketAddr)> {
        if !self.free_ports {
            return None;
        }
        self.open.fetch_add(1, Ordering::Relaxed);
        let port = 50_001 + id as u16 * 2 - u16::from(even);
        Some((
            FakeRelay(id, self.open.clone()),
            SocketAddr::from(([127, 0, 0, 1], port)),
        ))
    }
    fn sink(&mut self, client: &Client) -> SocketAddr {
        client.addr
    }
}

/// A forward the core asked for: the relay, the peer, the payload.
type Forward = (u64, SocketAddr, Vec<u8>);

struct World {
    core: Core<FakeRelay, SocketAddr>,
    stats: Arc<Stats>,
    io: FakeIo,
    t0: Instant,
    unix: u64,
    secs: u64,
    next_txid: u8,
}

fn media() -> SocketAddr {
    MEDIA.parse().unwrap()
}

impl World {
    fn new(limits: QuotaLimits) -> World {
        let stats = Arc::new(Stats::default());
        let shared = Arc::new(Shared {
            config: CoreConfig {
                peers: vec![Peer {
                    advertised: media(),
                    local: MEDIA_LOCAL.parse().unwrap(),
                }],
                relayed_ip: Some("203.0.113.5".parse().unwrap()),
                max_lifetime: Duration::from_secs(3600),
                max_permissions: 4,
                max_channels: 2,
            },
            credentials: Credentials::new(SECRET, REALM),
            nonces: Nonces::new(),
            quotas: Quotas::new(limits),
            stats: stats.clone(),
        });
        World {
            core: Core::new(shared),
            stats,
            io: FakeIo {
                free_ports: true,
                open: Arc::default(),
            },
            t0: Instant::now(),
            unix: 1_700_000_000,
            secs: 0,
            next_txid: 0,
        }
    }

    fn default() -> World {
        World::new(QuotaLimits {
            total: 100,
            per_identity: 2,
            per_source: 100,
        })
    }

    fn now(&self) -> Now {
        Now {
            at: self.t0 + Duration::from_secs(self.secs),
            unix: self.unix + self.secs,
        }
    }

    fn txid(&mut self) -> [u8; 12] {
        self.next_txid += 1;
        [self.next_txid; 12]
    }

    /// What the core does with `data` from `from` (UDP): the reply, or the forward.
    fn send(&mut self, from: SocketAddr, data: &[u8]) -> Result<Vec<u8>, Option<Forward>> {
        let client = Client {
            key: ClientKey::Udp {
                client: from,
                local: "198.51.100.1:3478".parse().unwrap(),
            },
            addr: from,
        };
        let mut out = [0u8; 1500];
        let now = self.now();
        match self
            .core
            .handle_client(now, client, data, &mut out, &mut self.io)
        {
            Out::Reply(b) => Ok(b.to_vec()),
            Out::ToPeer { relay, to, payload } => Err(Some((relay.0, to, payload.to_vec()))),
            Out::Nothing => Err(None),
        }
    }

    fn reply(&mut self, from: SocketAddr, data: &[u8], key: Option<&[u8]>) -> Reply {
        let bytes = self.send(from, data).expect("a reply");
        client::read(&bytes, key).expect("a reply that reads (and verifies)")
    }

    /// The 401 challenge of a bare Allocate, then a signer for `username`.
    fn signer(&mut self, from: SocketAddr, username: &str, password: &str) -> Signer {
        let mut buf = [0u8; 512];
        let t = self.txid();
        let n = client::bare_request(&mut buf, method::ALLOCATE, t, client::allocate_body).unwrap();
        let Reply::Error {
            code: 401,
            realm: Some(realm),
            nonce: Some(nonce),
            ..
        } = self.reply(from, &buf[..n], None)
        else {
            panic!("a 401 with REALM and NONCE")
        };
        assert_eq!(realm, REALM);
        Signer::new(username, password, &realm, &nonce)
    }

    fn signed(
        &mut self,
        s: &Signer,
        from: SocketAddr,
        m: u16,
        body: impl FnOnce(MessageBuilder<'_>) -> MessageBuilder<'_>,
    ) -> Reply {
        let mut buf = [0u8; 512];
        let t = self.txid();
        let n = s.request(&mut buf, m, t, body).unwrap();
        self.reply(from, &buf[..n], Some(s.key()))
    }

    /// A credential minted for `identity`, valid for an hour from now.
    fn minted(&self, identity: &str) -> (String, String) {
        let m = Credentials::new(SECRET, REALM).mint(identity, self.unix + 3600);
        (m.username, m.password.to_string())
    }

    fn allocated(&mut self, from: SocketAddr, identity: &str) -> Signer {
        let (u, p) = self.minted(identity);
        let s = self.signer(from, &u, &p);
        match self.signed(&s, from, method::ALLOCATE, client::allocate_body) {
            Reply::Success {
                relayed: Some(_), ..
            } => s,
            other => panic!("allocation refused: {other:?}"),
        }
    }
}

/// ChannelBind's attributes: channel 0x40nn to the gateway's media address.
fn bind(n: u8) -> impl for<'b> FnOnce(MessageBuilder<'b>) -> MessageBuilder<'b> {
    move |b| {
        b.attribute(attr::CHANNEL_NUMBER, &[0x40, n, 0, 0])
            .xor_address(attr::XOR_PEER_ADDRESS, media())
    }
}

fn code(r: &Reply) -> u16 {
    match r {
        Reply::Error { code, .. } => *code,
        _ => 0,
    }
}

fn alice() -> SocketAddr {
    "192.0.2.10:5000".parse().unwrap()
}

#[test]
fn a_client_allocates_permits_binds_and_relays_both_ways() {
    let mut w = World::default();
    let (u, p) = w.minted("alice");
    let s = w.signer(alice(), &u, &p);
    assert_eq!(w.stats.challenges.load(Ordering::Relaxed), 1);
    let mut buf = [0u8; 512];
    let t = w.txid();
    let n = s
        .request(&mut buf, method::ALLOCATE, t, client::allocate_body)
        .unwrap();
    let first = w.reply(alice(), &buf[..n], Some(s.key()));
    let Reply::Success {
        relayed: Some(relayed),
        lifetime: Some(600),
        ..
    } = first
    else {
        panic!("{first:?}")
    };
    assert_eq!(
        relayed.ip().to_string(),
        "203.0.113.5",
        "relayed_ip with the relay's port"
    );
    // The retransmitted Allocate gets the same answer; a new one on the 5-tuple gets 437.
    assert_eq!(w.reply(alice(), &buf[..n], Some(s.key())), first);
    assert_eq!(
        code(&w.signed(&s, alice(), method::ALLOCATE, client::allocate_body)),
        437
    );

    // Permission and channel to the gateway's media address.
    let ok = w.signed(&s, alice(), method::CREATE_PERMISSION, |b| {
        b.xor_address(attr::XOR_PEER_ADDRESS, media())
    });
    assert!(matches!(ok, Reply::Success { .. }), "{ok:?}");
    let n = client::send_indication(&mut buf, [9; 12], media(), b"via send").unwrap();
    let Err(Some((_, to, data))) = w.send(alice(), &buf[..n]) else {
        panic!("a forward")
    };
    assert_eq!(
        (to, &data[..]),
        (MEDIA_LOCAL.parse().unwrap(), &b"via send"[..])
    );
    let bind = w.signed(&s, alice(), method::CHANNEL_BIND, |b| {
        b.attribute(attr::CHANNEL_NUMBER, &[0x40, 0x01, 0, 0])
            .xor_address(attr::XOR_PEER_ADDRESS, media())
    });
    assert!(matches!(bind, Reply::Success { .. }), "{bind:?}");
    let n = client::channel_data(&mut buf, 0x4001, b"via channel", false).unwrap();
    let Err(Some((_, to, data))) = w.send(alice(), &buf[..n]) else {
        panic!("a forward")
    };
    assert_eq!(
        (to, &data[..]),
        (MEDIA_LOCAL.parse().unwrap(), &b"via channel"[..])
    );
    assert_eq!(w.stats.to_peer_packets.load(Ordering::Relaxed), 2);
    // Data longer than the largest datagram relayed (a stream client's frames may hold it):
    // dropped whole and counted, by either way.
    let mut big = vec![0u8; 4 + 36 + MAX_DATAGRAM + 4];
    let long = vec![7u8; MAX_DATAGRAM + 1];
    let n = client::send_indication(&mut big, [10; 12], media(), &long).unwrap();
    assert_eq!(w.send(alice(), &big[..n]), Err(None));
    let n = client::channel_data(&mut big, 0x4001, &long, false).unwrap();
    assert_eq!(w.send(alice(), &big[..n]), Err(None));
    assert_eq!(w.stats.drop_count(Dropped::TooLarge), 2);
    let n = client::channel_data(&mut big, 0x4001, &long[1..], false).unwrap();
    assert!(matches!(w.send(alice(), &big[..n]), Err(Some((_, _, d))) if d.len() == MAX_DATAGRAM));
    assert_eq!(w.stats.to_peer_packets.load(Ordering::Relaxed), 3);

    // Back from the media socket: ChannelData (a channel is bound to it).
    let key = ClientKey::Udp {
        client: alice(),
        local: "198.51.100.1:3478".parse().unwrap(),
    };
    let mut rbuf = vec![0u8; HEADROOM + 100 + TAILROOM];
    rbuf[HEADROOM..HEADROOM + 5].copy_from_slice(b"hello");
    let now = w.now();
    let (sink, bytes) = w
        .core
        .from_peer(
            now,
            &key,
            1,
            MEDIA_LOCAL.parse().unwrap(),
            &mut rbuf,
            HEADROOM..HEADROOM + 5,
        )
        .expect("relayed to the client");
    assert_eq!(*sink, alice());
    assert_eq!(
        client::read(bytes, None),
        Some(Reply::Channel {
            number: 0x4001,
            data: b"hello".to_vec()
        })
    );
    // From any other address, or on a relay that is not the allocation's: dropped.
    let stranger: SocketAddr = "127.0.0.1:40001".parse().unwrap();
    assert!(w
        .core
        .from_peer(now, &key, 1, stranger, &mut rbuf, HEADROOM..HEADROOM + 5)
        .is_none());
    assert_eq!(w.stats.drop_count(Dropped::UnknownPeer), 1);
    assert!(w
        .core
        .from_peer(
            now,
            &key,
            2,
            MEDIA_LOCAL.parse().unwrap(),
            &mut rbuf,
            HEADROOM..HEADROOM + 5
        )
        .is_none());
    assert_eq!(w.stats.to_client_packets.load(Ordering::Relaxed), 1);
}

#[test]
fn without_a_channel_peers_data_comes_as_a_data_indication_and_streams_pad_channel_data() {
    let mut w = World::default();
    let s = w.allocated(alice(), "alice");
    let key = ClientKey::Udp {
        client: alice(),
        local: "198.51.100.1:3478".parse().unwrap(),
    };
    let mut rbuf = vec![0u8; HEADROOM + 100 + TAILROOM];
    rbuf[HEADROOM..HEADROOM + 3].copy_from_slice(b"abc");
    let now = w.now();
    let local: SocketAddr = MEDIA_LOCAL.parse().unwrap();
    assert!(w
        .core
        .from_peer(now, &key, 1, local, &mut rbuf, HEADROOM..HEADROOM + 3)
        .is_none());
    assert_eq!(
        w.stats.drop_count(Dropped::NoPermission),
        1,
        "no permission yet"
    );
    w.signed(&s, alice(), method::CREATE_PERMISSION, |b| {
        b.xor_address(attr::XOR_PEER_ADDRESS, media())
    });
    let (_, bytes) = w
        .core
        .from_peer(now, &key, 1, local, &mut rbuf, HEADROOM..HEADROOM + 3)
        .unwrap();
    assert_eq!(
        client::read(bytes, None),
        Some(Reply::Data {
            peer: media(),
            data: b"abc".to_vec()
        })
    );
    assert_eq!(bytes.len() % 4, 0);

    // A stream client: ChannelData padded to 4 bytes.
    let mut out = [0u8; 1500];
    let mut buf = [0u8; 512];
    let (u, p) = w.minted("bob");
    let stream = Client {
        key: ClientKey::Stream(7),
        addr: "192.0.2.20:6000".parse().unwrap(),
    };
    let n =
        client::bare_request(&mut buf, method::ALLOCATE, [1; 12], client::allocate_body).unwrap();
    let Out::Reply(r) = w
        .core
        .handle_client(now, stream, &buf[..n], &mut out, &mut w.io)
    else {
        panic!()
    };
    let Some(Reply::Error {
        nonce: Some(nonce), ..
    }) = client::read(r, None)
    else {
        panic!()
    };
    let sb = Signer::new(&u, &p, REALM, &nonce);
    for (m, body) in [
        (
            method::ALLOCATE,
            &client::allocate_body as &dyn Fn(MessageBuilder<'_>) -> MessageBuilder<'_>,
        ),
        (method::CHANNEL_BIND, &|b: MessageBuilder<'_>| {
            b.attribute(attr::CHANNEL_NUMBER, &[0x40, 0x02, 0, 0])
                .xor_address(attr::XOR_PEER_ADDRESS, media())
        }),
    ] {
        let n = sb.request(&mut buf, m, [m as u8; 12], body).unwrap();
        let Out::Reply(r) = w
            .core
            .handle_client(now, stream, &buf[..n], &mut out, &mut w.io)
        else {
            panic!()
        };
        assert!(matches!(
            client::read(r, Some(sb.key())),
            Some(Reply::Success { .. })
        ));
    }
    let (sink, bytes) = w
        .core
        .from_peer(
            now,
            &ClientKey::Stream(7),
            2,
            local,
            &mut rbuf,
            HEADROOM..HEADROOM + 3,
        )
        .unwrap();
    assert_eq!(*sink, stream.addr);
    assert_eq!(bytes, &[0x40, 0x02, 0, 3, b'a', b'b', b'c', 0]);
    w.core.close(&ClientKey::Stream(7));
    assert_eq!(w.core.allocations(), 1);
}

#[test]
fn peers_other_than_the_gateway_are_refused_no_open_relay() {
    let mut w = World::default();
    let s = w.allocated(alice(), "alice");
    let elsewhere: SocketAddr = "198.51.100.99:40000".parse().unwrap();
    let same_ip_other_port: SocketAddr = "203.0.113.5:22".parse().unwrap();
    let r = w.signed(&s, alice(), method::CREATE_PERMISSION, |b| {
        b.xor_address(attr::XOR_PEER_ADDRESS, elsewhere)
    });
    assert_eq!(code(&r), 403);
    // One forbidden peer among allowed ones: 403, and none is installed.
    let r = w.signed(&s, alice(), method::CREATE_PERMISSION, |b| {
        b.xor_address(attr::XOR_PEER_ADDRESS, media())
            .xor_address(attr::XOR_PEER_ADDRESS, elsewhere)
    });
    assert_eq!(code(&r), 403);
    let mut buf = [0u8; 512];
    let n = client::send_indication(&mut buf, [3; 12], media(), b"x").unwrap();
    assert_eq!(w.send(alice(), &buf[..n]), Err(None));
    assert_eq!(w.stats.drop_count(Dropped::NoPermission), 1);
    for peer in [elsewhere, same_ip_other_port] {
        let r = w.signed(&s, alice(), method::CHANNEL_BIND, |b| {
            b.attribute(attr::CHANNEL_NUMBER, &[0x40, 0x00, 0, 0])
                .xor_address(attr::XOR_PEER_ADDRESS, peer)
        });
        assert_eq!(code(&r), 403, "{peer}");
    }
    // A permission for the gateway's IP does not open its other ports to Send.
    w.signed(&s, alice(), method::CREATE_PERMISSION, |b| {
        b.xor_address(attr::XOR_PEER_ADDRESS, media())
    });
    let n = client::send_indication(&mut buf, [4; 12], same_ip_other_port, b"x").unwrap();
    assert_eq!(w.send(alice(), &buf[..n]), Err(None));
    assert_eq!(w.stats.refusal(Refusal::ForbiddenPeer), 4);
    assert_eq!(w.stats.drop_count(Dropped::ForbiddenPeer), 1);
    assert_eq!(w.stats.to_peer_packets.load(Ordering::Relaxed), 0);
}

#[test]
fn expired_forged_and_malformed_credentials_and_stale_nonces_are_refused() {
    let mut w = World::default();
    let creds = Credentials::new(SECRET, REALM);
    let expired = creds.mint("alice", w.unix - 1);
    let cases: [(String, String, Refusal); 3] = [
        (
            expired.username.clone(),
            expired.password.to_string(),
            Refusal::ExpiredCredential,
        ),
        (
            w.minted("alice").0,
            "forged-password".into(),
            Refusal::BadIntegrity,
        ),
        (
            "alice".into(),
            creds.password(b"alice").to_string(),
            Refusal::BadUsername,
        ),
    ];
    for (u, p, why) in cases {
        let s = w.signer(alice(), &u, &p);
        let r = w.signed(&s, alice(), method::ALLOCATE, client::allocate_body);
        assert_eq!(code(&r), 401, "{why:?}");
        let Reply::Error {
            realm: Some(_),
            nonce: Some(_),
            ..
        } = r
        else {
            panic!("401 carries REALM and NONCE")
        };
        assert_eq!(w.stats.refusal(why), 1, "{why:?}");
    }
    // Signed with another secret (what a forger without ours mints).
    let other = Credentials::new(b"not the secret", REALM).mint("mallory", w.unix + 60);
    let s = w.signer(alice(), &other.username, &other.password);
    assert_eq!(
        code(&w.signed(&s, alice(), method::ALLOCATE, client::allocate_body)),
        401
    );
    assert_eq!(w.stats.refusal(Refusal::BadIntegrity), 2);
    // A nonce given to another address, or past its life: 438 with a fresh one, which works.
    let (u, p) = w.minted("alice");
    let mut s = w.signer("192.0.2.99:1".parse().unwrap(), &u, &p);
    let Reply::Error {
        code: 438,
        nonce: Some(fresh),
        ..
    } = w.signed(&s, alice(), method::ALLOCATE, client::allocate_body)
    else {
        panic!("438")
    };
    s.renew(&fresh);
    w.secs += 601;
    assert_eq!(
        code(&w.signed(&s, alice(), method::ALLOCATE, client::allocate_body)),
        438
    );
    w.secs = 0;
    assert!(matches!(
        w.signed(&s, alice(), method::ALLOCATE, client::allocate_body),
        Reply::Success { .. }
    ));
    assert_eq!(w.stats.refusal(Refusal::StaleNonce), 2);
    assert_eq!(w.stats.allocations_made.load(Ordering::Relaxed), 1);
}

#[test]
fn quotas_per_credential_source_and_total_and_the_relay_ports() {
    let mut w = World::new(QuotaLimits {
        total: 3,
        per_identity: 2,
        per_source: 2,
    });
    let from = |i: u16| -> SocketAddr { SocketAddr::from(([192, 0, 2, (i / 100) as u8 + 1], i)) };
    w.allocated(from(1), "alice");
    w.allocated(from(2), "alice");
    let (u, p) = w.minted("alice");
    let s = w.signer(from(101), &u, &p);
    assert_eq!(
        code(&w.signed(&s, from(101), method::ALLOCATE, client::allocate_body)),
        486
    );
    assert_eq!(w.stats.refusal(Refusal::QuotaCredential), 1);
    let (u, p) = w.minted("bob");
    let s = w.signer(from(3), &u, &p);
    assert_eq!(
        code(&w.signed(&s, from(3), method::ALLOCATE, client::allocate_body)),
        486
    );
    assert_eq!(
        w.stats.refusal(Refusal::QuotaSource),
        1,
        "192.0.2.1 holds two"
    );
    w.allocated(from(103), "bob");
    let (u, p) = w.minted("carol");
    let s = w.signer(from(201), &u, &p);
    assert_eq!(
        code(&w.signed(&s, from(201), method::ALLOCATE, client::allocate_body)),
        486
    );
    assert_eq!(w.stats.refusal(Refusal::QuotaTotal), 1);
    // No relay port: 508, and the quota it took is given back.
    let mut w = World::default();
    w.io.free_ports = false;
    let (u, p) = w.minted("alice");
    let s = w.signer(alice(), &u, &p);
    assert_eq!(
        code(&w.signed(&s, alice(), method::ALLOCATE, client::allocate_body)),
        508
    );
    w.io.free_ports = true;
    w.allocated(alice(), "alice");
}

#[test]
fn refresh_deletes_and_expiry_ends_allocations_and_closes_their_relays() {
    let mut w = World::default();
    let s = w.allocated(alice(), "alice");
    let bob: SocketAddr = "192.0.2.11:5000".parse().unwrap();
    w.allocated(bob, "bob");
    let (bu, bp) = w.minted("bob");
    let sb = w.signer(alice(), &bu, &bp);
    let r = w.signed(&s, alice(), method::REFRESH, |b| {
        b.attribute(attr::LIFETIME, &7200u32.to_be_bytes())
    });
    assert!(
        matches!(
            r,
            Reply::Success {
                lifetime: Some(3600),
                ..
            }
        ),
        "capped at the maximum: {r:?}"
    );
    // Another credential on alice's allocation: 441; a Refresh without one: 437.
    assert_eq!(code(&w.signed(&sb, alice(), method::REFRESH, |b| b)), 441);
    let carol: SocketAddr = "192.0.2.12:5000".parse().unwrap();
    let (u, p) = w.minted("alice");
    let sc = w.signer(carol, &u, &p);
    assert_eq!(code(&w.signed(&sc, carol, method::REFRESH, |b| b)), 437);
    let r = w.signed(&s, alice(), method::REFRESH, |b| {
        b.attribute(attr::LIFETIME, &0u32.to_be_bytes())
    });
    assert!(
        matches!(
            r,
            Reply::Success {
                lifetime: Some(0),
                ..
            }
        ),
        "{r:?}"
    );
    assert_eq!(
        w.stats.ends(),
        vec![("expired", 0), ("deleted", 1), ("closed", 0)]
    );
    w.secs = 601;
    w.core.sweep(w.now());
    assert_eq!(w.core.allocations(), 0);
    assert_eq!(w.stats.ends()[Ended::Expired.index()].1, 1);
    assert_eq!(w.io.open.load(Ordering::Relaxed), 0, "every relay closed");
    // Its quota is free again.
    w.allocated(bob, "bob");
}

#[test]
fn unknown_attributes_families_transports_and_malformed_requests() {
    let mut w = World::default();
    let (u, p) = w.minted("alice");
    let s = w.signer(alice(), &u, &p);
    let r = w.signed(&s, alice(), method::ALLOCATE, |b| {
        client::allocate_body(b).attribute(0x0018, &[0x80])
    });
    assert_eq!(code(&r), 508, "EVEN-PORT with R: no port is reserved");
    let r = w.signed(&s, alice(), method::ALLOCATE, |b| {
        client::allocate_body(b).attribute(0x0022, &[0; 8])
    });
    assert_eq!(code(&r), 420, "RESERVATION-TOKEN is not served");
    let r = w.signed(&s, alice(), method::ALLOCATE, |b| {
        b.attribute(attr::REQUESTED_TRANSPORT, &[6, 0, 0, 0])
    });
    assert_eq!(code(&r), 442);
    let r = w.signed(&s, alice(), method::ALLOCATE, |b| {
        client::allocate_body(b).attribute(attr::REQUESTED_ADDRESS_FAMILY, &[2, 0, 0, 0])
    });
    assert_eq!(code(&r), 440, "no IPv6 peer");
    assert_eq!(
        code(&w.signed(&s, alice(), method::ALLOCATE, |b| b)),
        400,
        "no REQUESTED-TRANSPORT"
    );
    let r = w.signed(&s, alice(), method::ALLOCATE, |b| {
        client::allocate_body(b).attribute(0x0018, &[0])
    });
    let Reply::Success {
        relayed: Some(relayed),
        ..
    } = r
    else {
        panic!("{r:?}")
    };
    assert_eq!(relayed.port() % 2, 0, "EVEN-PORT");
    for number in [[0x3f, 0xff, 0, 0], [0x80, 0x00, 0, 0]] {
        let r = w.signed(&s, alice(), method::CHANNEL_BIND, |b| {
            b.attribute(attr::CHANNEL_NUMBER, &number)
                .xor_address(attr::XOR_PEER_ADDRESS, media())
        });
        assert_eq!(code(&r), 400);
    }
    assert!(matches!(
        w.signed(&s, alice(), method::CHANNEL_BIND, bind(1)),
        Reply::Success { .. }
    ));
    assert_eq!(
        code(&w.signed(&s, alice(), method::CHANNEL_BIND, bind(2))),
        400,
        "the peer has channel 1"
    );
    assert_eq!(w.stats.refusal(Refusal::ChannelConflict), 1);
    // Requests of other methods, responses and junk.
    let mut buf = [0u8; 512];
    let n = s.request(&mut buf, 0x00A, [5; 12], |b| b).unwrap();
    assert_eq!(code(&w.reply(alice(), &buf[..n], None)), 400);
    let n = MessageBuilder::new(&mut buf, Class::Success, method::ALLOCATE, [6; 12])
        .finish()
        .unwrap();
    assert_eq!(w.send(alice(), &buf[..n]), Err(None));
    assert_eq!(w.send(alice(), &[0xff, 1, 2]), Err(None));
    assert_eq!(
        w.send(alice(), &[0x40, 0x01, 0, 9, 1]),
        Err(None),
        "ChannelData shorter than it says"
    );
    assert_eq!(w.stats.drop_count(Dropped::Unexpected), 1);
    assert_eq!(w.stats.drop_count(Dropped::Malformed), 2);
    // Binding: the client's reflexive address, to anyone.
    let n = client::bare_request(&mut buf, method::BINDING, [7; 12], |b| b).unwrap();
    let r = w.send(alice(), &buf[..n]).unwrap();
    assert_eq!(
        Message::parse(&r).unwrap().xor_mapped_address(),
        Some(alice())
    );
}

/// RFC 8489's SHA-256 password algorithm: the client repeats PASSWORD-ALGORITHMS, picks
/// SHA-256, signs with MESSAGE-INTEGRITY-SHA256; the answer is signed the same way. A list
/// that is not ours (a downgrade) is refused.
#[test]
fn the_sha256_password_algorithm_and_message_integrity_sha256() {
    use sha2::{Digest as _, Sha256};
    let mut w = World::default();
    let (u, p) = w.minted("alice");
    let s = w.signer(alice(), &u, &p);
    let mut buf = [0u8; 512];
    let mut bare = [0u8; 512];
    let n =
        client::bare_request(&mut bare, method::ALLOCATE, [1; 12], client::allocate_body).unwrap();
    let m = w.send(alice(), &bare[..n]).unwrap();
    let m = Message::parse(&m).unwrap();
    let algorithms = m.get(attr::PASSWORD_ALGORITHMS).expect("offered").to_vec();
    assert_eq!(algorithms, [0, 2, 0, 0, 0, 1, 0, 0]);
    let nonce = m.get(attr::NONCE).unwrap().to_vec();
    let key = Sha256::digest(format!("{u}:{REALM}:{p}").as_bytes());
    let request = |buf: &mut [u8], list: &[u8]| {
        MessageBuilder::new(buf, Class::Request, method::ALLOCATE, [2; 12])
            .attribute(attr::REQUESTED_TRANSPORT, &[17, 0, 0, 0])
            .attribute(attr::USERNAME, u.as_bytes())
            .attribute(attr::REALM, REALM.as_bytes())
            .attribute(attr::NONCE, &nonce)
            .attribute(attr::PASSWORD_ALGORITHMS, list)
            .attribute(attr::PASSWORD_ALGORITHM, &[0, 2, 0, 0])
            .integrity_sha256(&key)
            .fingerprint()
            .unwrap()
    };
    let n = request(&mut buf, &[0, 2, 0, 0]);
    assert_eq!(
        code(&w.reply(alice(), &buf[..n], None)),
        400,
        "not the list we offered"
    );
    let n = request(&mut buf, &algorithms);
    let r = w.send(alice(), &buf[..n]).unwrap();
    let r = Message::parse(&r).unwrap();
    assert_eq!(r.class(), Class::Success);
    assert!(r.has_integrity_sha256() && !r.has_integrity());
    r.check_integrity_sha256(&key).unwrap();
    drop(s);
}

mod garbage {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever a client sends, before or after it has an allocation, the core answers or
        /// drops it and never panics; a peer's datagram likewise.
        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..600), first in 0u8..4) {
            let mut w = World::default();
            let s = w.allocated(alice(), "alice");
            w.signed(&s, alice(), method::CHANNEL_BIND, |b| {
                b.attribute(attr::CHANNEL_NUMBER, &[0x40, 0x01, 0, 0]).xor_address(attr::XOR_PEER_ADDRESS, media())
            });
            let mut d = data.clone();
            if let Some(b) = d.first_mut() { *b = (*b & 0x3f) | (first << 6); }
            let _ = w.send(alice(), &d);
            let _ = w.send("192.0.2.77:1".parse().unwrap(), &d);
            let key = ClientKey::Udp { client: alice(), local: "198.51.100.1:3478".parse().unwrap() };
            let mut rbuf = vec![0u8; HEADROOM + d.len() + TAILROOM];
            rbuf[HEADROOM..HEADROOM + d.len()].copy_from_slice(&d);
            let now = w.now();
            let _ = w.core.from_peer(now, &key, 1, MEDIA_LOCAL.parse().unwrap(), &mut rbuf, HEADROOM..HEADROOM + d.len());
        }
    }
}
