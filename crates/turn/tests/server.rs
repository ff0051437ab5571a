//! The server on real sockets, its UDP sockets read through io_uring and through epoll: a
//! client allocates over UDP and over TCP, binds a channel to the "gateway" (here an echo socket
//! on loopback, the only peer configured), and what it sends comes back relayed; a stream's
//! allocation ends with its connection, and its relay port is free again; an IPv4 client is
//! served by a dual-stack listener.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use secrelay_turn::auth::Credentials;
use secrelay_turn::client::{self, Reply, Signer};
use secrelay_turn::core::{CoreConfig, Peer, MAX_DATAGRAM};
use secrelay_turn::proto::{attr, method};
use secrelay_turn::stats::Dropped;
use secrelay_turn::{QuotaLimits, TurnConfig, TurnServer};
use zeroize::Zeroizing;

const SECRET: &[u8] = b"the test's shared secret, long enough";

/// An echo "media socket": what it gets, it sends back to where it came from.
fn echo() -> SocketAddr {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    let a = s.local_addr().unwrap();
    echo_on(s);
    a
}

/// Echoes what `s` gets (up to the largest datagram the server takes) from a thread of its own.
fn echo_on(s: UdpSocket) {
    std::thread::spawn(move || {
        let mut b = [0u8; MAX_DATAGRAM];
        while let Ok((n, from)) = s.recv_from(&mut b) {
            let _ = s.send_to(&b[..n], from);
        }
    });
}

fn server(peer: SocketAddr, threads: usize, io_uring: bool) -> TurnServer {
    TurnServer::start(config(peer, threads, io_uring)).unwrap()
}

/// The test's server: UDP and TCP on loopback, relaying only to `peer`.
fn config(peer: SocketAddr, threads: usize, io_uring: bool) -> TurnConfig {
    TurnConfig {
        udp: Some("127.0.0.1:0".parse().unwrap()),
        tcp: Some("127.0.0.1:0".parse().unwrap()),
        threads,
        relay_ports: (20_000, 29_999),
        core: CoreConfig {
            peers: vec![Peer {
                advertised: peer,
                local: peer,
            }],
            relayed_ip: None,
            max_lifetime: Duration::from_secs(3600),
            max_permissions: 8,
            max_channels: 8,
        },
        quotas: QuotaLimits {
            total: 100,
            per_identity: 10,
            per_source: 100,
        },
        secret: Zeroizing::new(SECRET.to_vec()),
        realm: "test".into(),
        stream_queue: 64,
        io_uring,
        gather: secrelay_turn::server::GATHER,
    }
}

/// One transport's way of exchanging messages with the server.
trait Link {
    fn send(&mut self, b: &[u8]);
    fn recv(&mut self) -> Vec<u8>;
}

impl Link for UdpSocket {
    fn send(&mut self, b: &[u8]) {
        UdpSocket::send(self, b).unwrap();
    }
    fn recv(&mut self) -> Vec<u8> {
        let mut b = [0u8; MAX_DATAGRAM + 1];
        let n = UdpSocket::recv(self, &mut b).expect("an answer within the timeout");
        b[..n].to_vec()
    }
}

impl Link for TcpStream {
    fn send(&mut self, b: &[u8]) {
        self.write_all(b).unwrap();
    }
    fn recv(&mut self) -> Vec<u8> {
        let mut head = [0u8; 4];
        self.read_exact(&mut head)
            .expect("a frame within the timeout");
        let len = usize::from(u16::from_be_bytes([head[2], head[3]]));
        let rest = if head[0] & 0xC0 == 0x40 {
            (len + 3) & !3
        } else {
            16 + len
        };
        let mut b = head.to_vec();
        b.resize(4 + rest, 0);
        self.read_exact(&mut b[4..]).unwrap();
        b
    }
}

/// A request's attributes.
type Body<'a> =
    dyn Fn(secrelay_wire::stun::MessageBuilder<'_>) -> secrelay_wire::stun::MessageBuilder<'_> + 'a;

/// Allocates, binds channel 0x4000 to `peer`, sends three payloads; returns what came back
/// and the relayed address.
fn relay_through(link: &mut dyn Link, peer: SocketAddr, pad: bool) -> (Vec<Vec<u8>>, SocketAddr) {
    let mut buf = [0u8; 1500];
    let n =
        client::bare_request(&mut buf, method::ALLOCATE, [1; 12], client::allocate_body).unwrap();
    link.send(&buf[..n]);
    let Some(Reply::Error {
        code: 401,
        realm: Some(realm),
        nonce: Some(nonce),
        ..
    }) = client::read(&link.recv(), None)
    else {
        panic!("a challenge")
    };
    let m = Credentials::new(SECRET, "test").mint("tester", now() + 60);
    let s = Signer::new(&m.username, &m.password, &realm, &nonce);
    let requests: [(u16, &Body<'_>); 2] = [
        (method::ALLOCATE, &client::allocate_body),
        (method::CHANNEL_BIND, &|b| {
            b.attribute(attr::CHANNEL_NUMBER, &[0x40, 0, 0, 0])
                .xor_address(attr::XOR_PEER_ADDRESS, peer)
        }),
    ];
    let mut relayed_at = None;
    for (i, (m, body)) in requests.into_iter().enumerate() {
        let n = s.request(&mut buf, m, [2 + i as u8; 12], body).unwrap();
        link.send(&buf[..n]);
        let r = client::read(&link.recv(), Some(s.key()));
        let Some(Reply::Success { relayed, .. }) = r else {
            panic!("{r:?}")
        };
        relayed_at = relayed_at.or(relayed);
    }
    let mut got = Vec::new();
    for payload in [&b"one"[..], b"two!", b"three"] {
        let n = client::channel_data(&mut buf, 0x4000, payload, pad).unwrap();
        link.send(&buf[..n]);
        match client::read(&link.recv(), None) {
            Some(Reply::Channel {
                number: 0x4000,
                data,
            }) => got.push(data),
            other => panic!("{other:?}"),
        }
    }
    (
        got,
        relayed_at.expect("XOR-RELAYED-ADDRESS in the Allocate success"),
    )
}

/// Waits up to 5 s for the server to hold `n` allocations; fails with `why` if it does not.
fn wait_for_allocations(turn: &TurnServer, n: usize, why: &str) {
    let until = Instant::now() + Duration::from_secs(5);
    while turn.allocations() != n {
        assert!(Instant::now() < until, "{why}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether the one-shard `turn` reads the way asked (`io_uring` or epoll); false (skipped) when
/// io_uring was asked for and the kernel refused it, outside CI; under CI that fails.
fn on_the_path_asked(turn: &TurnServer, io_uring: bool) -> bool {
    match turn.io_uring_shards() {
        1 if io_uring => true,
        0 if !io_uring => true,
        0 if std::env::var_os("CI").is_none() => {
            eprintln!("SKIPPED the io_uring half: io_uring refused here");
            false
        }
        n => panic!("{n} shards on io_uring, asked for io_uring: {io_uring}"),
    }
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

#[test]
fn relayed_over_udp_and_tcp_through_io_uring_and_a_closed_stream_ends_its_allocation() {
    relayed_over_udp_and_tcp(true);
}

#[test]
fn relayed_over_udp_and_tcp_through_epoll_and_a_closed_stream_ends_its_allocation() {
    relayed_over_udp_and_tcp(false);
}

/// A UDP and a TCP client relay three payloads each through an echo peer, counted both ways;
/// the TCP client's allocation ends when its connection closes, and its relay port is free
/// again (its socket closed, on the io_uring path once its receive is cancelled).
fn relayed_over_udp_and_tcp(io_uring: bool) {
    let peer = echo();
    let turn = server(peer, 2, io_uring);
    match turn.io_uring_shards() {
        2 if io_uring => {}
        0 if !io_uring => {}
        // Under CI io_uring is required to work (the media workers' tests need it too).
        0 if std::env::var_os("CI").is_none() => eprintln!("SKIPPED: io_uring refused here"),
        n => panic!("{n} of 2 shards on io_uring, asked for io_uring: {io_uring}"),
    }
    let want = vec![b"one".to_vec(), b"two!".to_vec(), b"three".to_vec()];
    let mut udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    udp.connect(turn.udp_addr().unwrap()).unwrap();
    assert_eq!(relay_through(&mut udp, peer, false).0, want);
    let mut tcp = TcpStream::connect(turn.tcp_addr().unwrap()).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let (got, tcp_relay) = relay_through(&mut tcp, peer, true);
    assert_eq!(got, want);
    assert_eq!(turn.allocations(), 2);
    assert_eq!(
        turn.stats()
            .to_peer_packets
            .load(std::sync::atomic::Ordering::Relaxed),
        6
    );
    assert_eq!(
        turn.stats()
            .to_client_packets
            .load(std::sync::atomic::Ordering::Relaxed),
        6
    );
    drop(tcp);
    wait_for_allocations(
        &turn,
        1,
        "the TCP client's allocation outlived its connection",
    );
    assert_eq!(
        turn.stats().ends(),
        vec![("expired", 0), ("deleted", 0), ("closed", 1)]
    );
    let until = Instant::now() + Duration::from_secs(5);
    while UdpSocket::bind(tcp_relay).is_err() {
        assert!(
            Instant::now() < until,
            "the closed allocation's relay port {tcp_relay} stayed bound"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Relay sockets come and go on the io_uring path (one client's allocation after another,
/// each closed with its connection) while one client's allocation lives throughout: each new
/// relay socket's datagrams reach its own client, and the long-lived one's still reach it,
/// whatever keys the ring reused for the sockets between.
#[test]
fn relay_sockets_that_come_and_go_on_io_uring_never_take_a_live_ones_datagrams() {
    let peer = echo();
    let turn = server(peer, 1, true);
    if turn.io_uring_shards() == 0 {
        assert!(
            std::env::var_os("CI").is_none(),
            "io_uring refused under CI"
        );
        eprintln!("SKIPPED: io_uring refused here");
        return;
    }
    let want = vec![b"one".to_vec(), b"two!".to_vec(), b"three".to_vec()];
    let mut udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    udp.connect(turn.udp_addr().unwrap()).unwrap();
    assert_eq!(relay_through(&mut udp, peer, false).0, want);
    for round in 0..12 {
        let mut tcp = TcpStream::connect(turn.tcp_addr().unwrap()).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        assert_eq!(relay_through(&mut tcp, peer, true).0, want, "round {round}");
        drop(tcp);
        let why = format!("round {round}: the allocation outlived its connection");
        wait_for_allocations(&turn, 1, &why);
        // The long-lived allocation still relays, its answers its own.
        let mut buf = [0u8; 64];
        let payload = format!("live {round}");
        let n = client::channel_data(&mut buf, 0x4000, payload.as_bytes(), false).unwrap();
        udp.send(&buf[..n]).unwrap();
        match client::read(&Link::recv(&mut udp), None) {
            Some(Reply::Channel {
                number: 0x4000,
                data,
            }) => {
                assert_eq!(data, payload.as_bytes(), "round {round}")
            }
            other => panic!("round {round}: {other:?}"),
        }
    }
}

/// A dual-stack listener (`[::]`, as a deployment binds it) on each path: an IPv4 client's
/// datagrams arrive from its IPv4-mapped address and the answers and relayed packets go back
/// to it, and it relays through an IPv4 relay socket as before.
#[test]
fn an_ipv4_client_relays_through_a_dual_stack_listener_on_each_path() {
    for io_uring in [true, false] {
        let peer = echo();
        let Ok(turn) = TurnServer::start(TurnConfig {
            udp: Some("[::]:0".parse().unwrap()),
            ..config(peer, 1, io_uring)
        }) else {
            // No IPv6 here: nothing dual-stack to check.
            assert!(
                std::env::var_os("CI").is_none(),
                "no [::] listener under CI"
            );
            return;
        };
        if !on_the_path_asked(&turn, io_uring) {
            continue;
        }
        let port = turn.udp_addr().unwrap().port();
        let mut udp = UdpSocket::bind("127.0.0.1:0").unwrap();
        udp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        udp.connect(("127.0.0.1", port)).unwrap();
        let (got, relayed) = relay_through(&mut udp, peer, false);
        assert_eq!(
            got,
            vec![b"one".to_vec(), b"two!".to_vec(), b"three".to_vec()]
        );
        assert!(relayed.is_ipv4(), "{relayed}");
    }
}

/// The largest datagram the server takes passes both ways, and one byte more, from a client or
/// from the peer on its relay port, is dropped whole and counted as too large (not as
/// malformed), the same on each I/O path.
#[test]
fn a_datagram_longer_than_the_server_takes_is_dropped_whole_and_counted_on_each_path() {
    for io_uring in [true, false] {
        let peer = UdpSocket::bind("127.0.0.1:0").unwrap();
        let peer_addr = peer.local_addr().unwrap();
        echo_on(peer.try_clone().unwrap());
        let turn = server(peer_addr, 1, io_uring);
        if !on_the_path_asked(&turn, io_uring) {
            continue;
        }
        let mut udp = UdpSocket::bind("127.0.0.1:0").unwrap();
        udp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        udp.connect(turn.udp_addr().unwrap()).unwrap();
        let (_, relayed) = relay_through(&mut udp, peer_addr, false);

        // ChannelData of the largest size, echoed back at that size.
        let payload: Vec<u8> = (0..MAX_DATAGRAM - 4).map(|i| i as u8).collect();
        let mut buf = vec![0u8; MAX_DATAGRAM];
        let n = client::channel_data(&mut buf, 0x4000, &payload, false).unwrap();
        assert_eq!(n, MAX_DATAGRAM);
        Link::send(&mut udp, &buf[..n]);
        match client::read(&Link::recv(&mut udp), None) {
            Some(Reply::Channel {
                number: 0x4000,
                data,
            }) => assert!(data == payload, "io_uring {io_uring}: the echo differs"),
            other => panic!("io_uring {io_uring}: {other:?}"),
        }

        let too_long = vec![0x40u8; MAX_DATAGRAM + 1];
        Link::send(&mut udp, &too_long);
        peer.send_to(&too_long, relayed).unwrap();
        let stats = turn.stats();
        let until = Instant::now() + Duration::from_secs(5);
        while stats.drop_count(Dropped::TooLarge) < 2 {
            assert!(
                Instant::now() < until,
                "io_uring {io_uring}: {} too large after 5 s",
                stats.drop_count(Dropped::TooLarge)
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(
            stats.drop_count(Dropped::TooLarge),
            2,
            "io_uring {io_uring}"
        );
        assert_eq!(
            stats.drop_count(Dropped::Malformed),
            0,
            "io_uring {io_uring}"
        );
    }
}
