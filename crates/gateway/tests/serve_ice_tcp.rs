//! ICE over TCP (RFC 6544) through `secrelay serve` with two workers, over real sockets. A
//! WHEP viewer that speaks only TCP (its checks, DTLS and SRTP framed as RFC 4571 says) finds
//! the passive candidate in the answer, connects, and hears a publisher that sends over UDP, in
//! a room of the listening worker and in a room of the other (its connection moves there). The
//! API says which transport each participant's media takes; ending the viewer closes its
//! connection. A viewer that stops reading loses datagrams (dropped whole and counted) while
//! another viewer of the same room, on the same worker, hears everything.

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use secrelay_gateway::server::{ServeConfig, Server};
use secrelay_testkit::browser::{Browser, Direction, Inbound};
use secrelay_testkit::Signaling;
use secrelay_wire::framing::{next_frame, write_frame};
use secrelay_wire::sdp::parse_offer;

/// A simulated browser's way to the gateway: UDP, or one TCP connection carrying RFC 4571
/// frames.
enum Wire {
    Udp {
        socket: UdpSocket,
        gateway: SocketAddr,
    },
    Tcp {
        stream: TcpStream,
        rbuf: Vec<u8>,
    },
}

impl Wire {
    fn udp(gateway: SocketAddr) -> Wire {
        let socket = UdpSocket::bind(SocketAddr::new(loopback(gateway.ip()), 0)).unwrap();
        socket.set_nonblocking(true).unwrap();
        Wire::Udp { socket, gateway }
    }

    /// A connection to `gateway` whose receive buffer is `rcvbuf` bytes when given.
    fn tcp(gateway: SocketAddr, rcvbuf: Option<usize>) -> Wire {
        let s = socket2::Socket::new(
            socket2::Domain::for_address(gateway),
            socket2::Type::STREAM,
            None,
        )
        .unwrap();
        if let Some(n) = rcvbuf {
            s.set_recv_buffer_size(n).unwrap();
        }
        s.connect(&gateway.into()).unwrap();
        let stream = TcpStream::from(s);
        stream.set_nonblocking(true).unwrap();
        stream.set_nodelay(true).unwrap();
        Wire::Tcp {
            stream,
            rbuf: Vec::new(),
        }
    }

    fn send(&mut self, d: &[u8]) {
        match self {
            Wire::Udp { socket, gateway } => {
                let _ = socket.send_to(d, *gateway);
            }
            Wire::Tcp { stream, .. } => {
                let mut framed = Vec::new();
                write_frame(&mut framed, d).unwrap();
                let mut at = 0;
                while at < framed.len() {
                    match stream.write(&framed[at..]) {
                        Ok(n) => at += n,
                        Err(e) if e.kind() == ErrorKind::WouldBlock => {
                            std::thread::sleep(Duration::from_millis(1));
                        }
                        Err(e) => panic!("writing to the gateway: {e}"),
                    }
                }
            }
        }
    }

    /// The datagrams that arrived; `None` once the gateway closed the connection.
    fn recv(&mut self) -> Option<Vec<Vec<u8>>> {
        let mut out = Vec::new();
        let mut buf = [0u8; 65_536];
        match self {
            Wire::Udp { socket, .. } => {
                while let Ok((n, _)) = socket.recv_from(&mut buf) {
                    out.push(buf[..n].to_vec());
                }
            }
            Wire::Tcp { stream, rbuf } => {
                loop {
                    match stream.read(&mut buf) {
                        Ok(0) => return None,
                        Ok(n) => rbuf.extend_from_slice(&buf[..n]),
                        Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                        Err(_) => return None,
                    }
                }
                let mut taken = 0;
                while let Some((d, n)) = next_frame(&rbuf[taken..]) {
                    out.push(d.to_vec());
                    taken += n;
                }
                rbuf.drain(..taken);
            }
        }
        Some(out)
    }
}

/// The loopback address of `ip`'s family.
fn loopback(ip: IpAddr) -> IpAddr {
    if ip.is_ipv4() {
        Ipv4Addr::LOCALHOST.into()
    } else {
        Ipv6Addr::LOCALHOST.into()
    }
}

/// How a simulated browser reaches the gateway: which of the answer's candidates it uses.
#[derive(Debug, Clone, Copy, Default)]
struct Way {
    /// Over TCP (the passive candidate), else UDP.
    tcp: bool,
    /// To the IPv6 candidate, else the IPv4 one.
    v6: bool,
    /// The TCP connection's receive buffer, when set.
    rcvbuf: Option<usize>,
}

const UDP: Way = Way {
    tcp: false,
    v6: false,
    rcvbuf: None,
};
const TCP: Way = Way {
    tcp: true,
    v6: false,
    rcvbuf: None,
};

/// The answer's candidate for `way`.
fn candidate(answer: &str, way: Way) -> Option<SocketAddr> {
    answer.lines().find_map(|l| {
        let f: Vec<&str> = l.strip_prefix("a=candidate:")?.split(' ').collect();
        let addr = SocketAddr::new(f.get(4)?.parse().ok()?, f.get(5)?.parse().ok()?);
        let transport = if way.tcp { "tcp" } else { "udp" };
        (f.get(2) == Some(&transport) && addr.is_ipv6() == way.v6).then_some(addr)
    })
}

/// A simulated browser in a room, over UDP or TCP.
struct Client {
    browser: Browser,
    wire: Wire,
    location: String,
    next_check: Instant,
    rtp: usize,
    /// Reads what arrives (a stalled reader does not).
    reading: bool,
}

impl Client {
    /// Joins `room` by WHIP (sends) or WHEP (receives), the way `way` says.
    fn join(sig: &Signaling, room: &str, sends: bool, way: Way) -> Client {
        let mut browser = Browser::random(0);
        let (path, direction) = if sends {
            (format!("/whip/{room}"), Direction::SendOnly)
        } else {
            (format!("/whep/{room}"), Direction::RecvOnly)
        };
        let offer = browser.audio_offer(direction, None);
        let (status, location, body) = sig.post_offer(&path, &offer).unwrap();
        assert_eq!(status, 201, "{body}");
        browser.set_answer(parse_offer(&body).unwrap());
        let to = candidate(&body, way)
            .unwrap_or_else(|| panic!("no candidate for {way:?} in the answer:\n{body}"));
        let wire = if way.tcp {
            Wire::tcp(to, way.rcvbuf)
        } else {
            Wire::udp(to)
        };
        Client {
            browser,
            wire,
            location: location.unwrap(),
            next_check: Instant::now(),
            rtp: 0,
            reading: true,
        }
    }

    /// One turn: a check every 200 ms, DTLS, what arrived; `false` once the gateway closed
    /// the connection.
    fn drive(&mut self) -> bool {
        let now = Instant::now();
        if now >= self.next_check {
            if let Some(c) = self.browser.binding_request(true) {
                self.wire.send(&c);
            }
            self.next_check = now + Duration::from_millis(200);
        }
        if self.browser.dtls_timer.is_some_and(|t| now >= t) {
            self.browser.handle_timeout(now);
        }
        if self.reading {
            let Some(got) = self.wire.recv() else {
                return false;
            };
            for mut d in got {
                let n = d.len();
                match self.browser.receive(Instant::now(), &mut d, n) {
                    Inbound::StunSuccess if self.browser.dtls.is_none() => {
                        self.browser.start_dtls(Instant::now()).unwrap();
                    }
                    Inbound::Rtp(_) => self.rtp += 1,
                    _ => {}
                }
            }
        }
        for d in self.browser.drain_dtls() {
            self.wire.send(&d);
        }
        true
    }

    fn connected(&self) -> bool {
        self.browser.keys.is_some()
    }

    /// Sends one SRTP packet with a payload of `size` bytes.
    fn send_media(&mut self, size: usize) {
        if let Some((_, p)) = self.browser.srtp(&vec![0xd5; size]) {
            self.wire.send(&p);
        }
    }
}

fn start() -> Server {
    Server::start(ServeConfig {
        http: Some("127.0.0.1:0".parse().unwrap()),
        udp: "127.0.0.1:0".parse().unwrap(),
        ice_tcp: Some("127.0.0.1:0".parse().unwrap()),
        workers: 2,
        drain_secs: 0.1,
        ..ServeConfig::default()
    })
    .unwrap()
}

/// A gateway on dual-stack sockets, announcing 127.0.0.1 and ::1 over UDP and TCP.
fn start_dual_stack() -> Server {
    Server::start(ServeConfig {
        http: Some("127.0.0.1:0".parse().unwrap()),
        udp: "[::]:0".parse().unwrap(),
        announce: Some(Ipv4Addr::LOCALHOST.into()),
        announce_ipv6: Some(Ipv6Addr::LOCALHOST),
        ice_tcp: Some("[::]:0".parse().unwrap()),
        workers: 2,
        drain_secs: 0.1,
        ..ServeConfig::default()
    })
    .unwrap()
}

fn admin(s: &Server) -> Signaling {
    Signaling::new(s.url()).with_admin(s.admin_key().expose())
}

/// A sample's value in `/metrics` (0 when absent).
fn metric(sig: &Signaling, sample: &str) -> f64 {
    let (status, body) = sig.get("/metrics").unwrap();
    assert_eq!(status, 200, "{body}");
    body.lines()
        .find_map(|l| l.strip_prefix(sample)?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// Whether the gateway closed `c` (end of stream, or reset) before its read timeout.
fn closed(c: &mut TcpStream) -> bool {
    match c.read(&mut [0u8; 16]) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
    }
}

/// Drives every client until all are connected (at most 10 s).
fn connect(clients: &mut [&mut Client]) {
    let end = Instant::now() + Duration::from_secs(10);
    while !clients.iter().all(|c| c.connected()) {
        assert!(Instant::now() < end, "not every client connected in 10 s");
        for c in clients.iter_mut() {
            assert!(
                c.drive(),
                "the gateway closed a connection while connecting"
            );
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The transport the API reports for participant `location` of `room`.
fn transport(sig: &Signaling, room: &str, location: &str) -> String {
    let (status, body) = sig.get(&format!("/api/rooms/{room}")).unwrap();
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let id = location.rsplit('/').next().unwrap();
    let participants = v["participants"].as_array().unwrap();
    let p = participants
        .iter()
        .find(|p| p["id"] == id)
        .unwrap_or_else(|| panic!("no participant {id} in {body}"));
    p["path"]["transport"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn a_browser_that_speaks_only_tcp_hears_rooms_of_both_workers() {
    let s = start();
    let sig = Signaling::new(s.url());
    let admin = admin(&s);
    // The first worker listens; a room of the other has its viewers' connections moved there.
    let room_of = |worker: usize| {
        (0..)
            .map(|k| format!("tcp-room-{k}"))
            .find(|r| s.gateway().worker_index(r) == worker)
            .unwrap()
    };
    let rooms = [room_of(0), room_of(1)];
    for room in &rooms {
        let mut publisher = Client::join(&sig, room, true, UDP);
        let mut viewer = Client::join(&sig, room, false, TCP);
        connect(&mut [&mut publisher, &mut viewer]);
        let end = Instant::now() + Duration::from_secs(2);
        let mut sent = 0;
        while Instant::now() < end {
            publisher.send_media(160);
            sent += 1;
            publisher.drive();
            assert!(viewer.drive(), "the gateway closed the viewer's connection");
            std::thread::sleep(Duration::from_millis(20));
        }
        for _ in 0..25 {
            viewer.drive();
            std::thread::sleep(Duration::from_millis(2));
        }
        assert!(
            viewer.rtp * 10 >= sent * 9,
            "{room}: the viewer over TCP heard {} of {sent}",
            viewer.rtp
        );
        assert_eq!(transport(&admin, room, &viewer.location), "tcp");
        assert_eq!(transport(&admin, room, &publisher.location), "udp");

        // Ending the viewer closes its connection.
        assert_eq!(sig.delete(&viewer.location).unwrap(), 200);
        let end = Instant::now() + Duration::from_secs(5);
        while viewer.drive() {
            assert!(Instant::now() < end, "{room}: the connection stayed open");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    assert_eq!(
        metric(&admin, "secrelay_ice_tcp_connections_accepted_total"),
        2.0
    );
    assert_eq!(
        metric(
            &admin,
            "secrelay_ice_tcp_connections_closed_total{reason=\"ended\"}"
        ),
        2.0
    );
    assert_eq!(metric(&admin, "secrelay_ice_tcp_connections_open"), 0.0);
    // Every copy went to a viewer over TCP, and each is in the relay latency histogram.
    assert!(
        metric(&admin, "secrelay_relay_latency_seconds_count") >= 150.0,
        "relay latency recorded for copies over TCP"
    );
}

#[test]
fn browsers_of_both_families_over_udp_and_tcp_hear_each_other_on_a_dual_stack_gateway() {
    let s = start_dual_stack();
    let sig = Signaling::new(s.url());
    let admin = admin(&s);
    let room = "dual-stack";
    // One publisher on IPv4 and one on IPv6 (UDP); viewers of each family over UDP and TCP.
    let mut publishers = [
        Client::join(&sig, room, true, UDP),
        Client::join(&sig, room, true, Way { v6: true, ..UDP }),
    ];
    let ways = [UDP, Way { v6: true, ..UDP }, TCP, Way { v6: true, ..TCP }];
    let mut viewers: Vec<Client> = ways
        .iter()
        .map(|w| Client::join(&sig, room, false, *w))
        .collect();
    {
        let mut all: Vec<&mut Client> = publishers.iter_mut().chain(viewers.iter_mut()).collect();
        connect(&mut all);
    }
    let mut sent = 0;
    for _ in 0..100 {
        for p in publishers.iter_mut() {
            p.send_media(160);
            p.drive();
        }
        sent += 2;
        for v in viewers.iter_mut() {
            v.drive();
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    for _ in 0..25 {
        viewers.iter_mut().for_each(|v| {
            v.drive();
        });
        std::thread::sleep(Duration::from_millis(2));
    }
    for (v, way) in viewers.iter().zip(ways) {
        // Both publishers' packets: an offer without `a=mid` extensions gets every stream on
        // its one section.
        eprintln!("{way:?}: heard {} of {sent}", v.rtp);
        assert!(v.rtp * 10 >= sent * 9, "{way:?}: heard {} of {sent}", v.rtp);
        let (status, body) = admin.get(&format!("/api/rooms/{room}")).unwrap();
        assert_eq!(status, 200);
        let room_v: serde_json::Value = serde_json::from_str(&body).unwrap();
        let id = v.location.rsplit('/').next().unwrap();
        let p = room_v["participants"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["id"] == id)
            .unwrap();
        let remote: SocketAddr = p["path"]["remote"].as_str().unwrap().parse().unwrap();
        // Each by its own family's address (an IPv4 browser is not `::ffff:127.0.0.1`).
        assert_eq!(remote.is_ipv6(), way.v6, "{way:?}: {remote}");
        assert_eq!(
            p["path"]["transport"],
            if way.tcp { "tcp" } else { "udp" },
            "{way:?}"
        );
    }
}

#[test]
fn a_connection_that_is_not_a_browser_is_closed() {
    let s = start();
    let admin = admin(&s);
    let tcp = s.gateway().tcp_candidates()[0];
    // Something that is not a check: closed at once.
    let mut c = TcpStream::connect(tcp).unwrap();
    c.write_all(b"\x00\x05hello").unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    assert!(closed(&mut c), "the gateway closed it");
    // A check naming nobody: closed too.
    let mut c = TcpStream::connect(tcp).unwrap();
    let mut nobody = Browser::random(0);
    let mut answer = parse_offer(&nobody.audio_offer(Direction::SendOnly, None)).unwrap();
    answer.ice_ufrag = "nobody".into();
    nobody.set_answer(answer);
    let mut framed = Vec::new();
    write_frame(&mut framed, &nobody.binding_request(true).unwrap()).unwrap();
    c.write_all(&framed).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    assert!(closed(&mut c), "the gateway closed it");
    assert_eq!(
        metric(
            &admin,
            "secrelay_ice_tcp_connections_closed_total{reason=\"no_check\"}"
        ),
        2.0
    );
    // Nothing at all: closed once the wait for a check is over (10 s).
    let mut c = TcpStream::connect(tcp).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    let started = Instant::now();
    assert!(closed(&mut c), "the gateway closed it");
    assert!(started.elapsed() >= Duration::from_secs(8));
    assert_eq!(
        metric(
            &admin,
            "secrelay_ice_tcp_connections_closed_total{reason=\"unvalidated\"}"
        ),
        1.0
    );
}

#[test]
fn connections_waiting_for_their_first_check_are_bounded_per_address() {
    let s = start();
    let admin = admin(&s);
    let tcp = s.gateway().tcp_candidates()[0];
    // Eight silent connections from one address wait for their check; the ninth is refused.
    let waiting: Vec<TcpStream> = (0..8).map(|_| TcpStream::connect(tcp).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(300));
    let mut ninth = TcpStream::connect(tcp).unwrap();
    ninth
        .set_read_timeout(Some(Duration::from_secs(3)))
        .unwrap();
    assert!(closed(&mut ninth), "refused: closed at once");
    assert_eq!(
        metric(
            &admin,
            "secrelay_ice_tcp_connections_closed_total{reason=\"refused\"}"
        ),
        1.0
    );
    assert_eq!(metric(&admin, "secrelay_ice_tcp_connections_open"), 8.0);
    drop(waiting);
}

#[test]
fn a_stalled_tcp_reader_loses_datagrams_whole_and_holds_up_no_one() {
    let s = start();
    let sig = Signaling::new(s.url());
    let admin = admin(&s);
    let room = "tcp-stall";
    let mut publisher = Client::join(&sig, room, true, UDP);
    let mut reader = Client::join(&sig, room, false, TCP);
    let mut stalled = Client::join(
        &sig,
        room,
        false,
        Way {
            rcvbuf: Some(4096),
            ..TCP
        },
    );
    connect(&mut [&mut publisher, &mut reader, &mut stalled]);
    stalled.reading = false;
    // 1,000-byte packets, as fast as the publisher goes, until the stalled viewer's queue at
    // the gateway overflows (its socket buffers fill first).
    let drops = "secrelay_drops_total{reason=\"tcp_queue_full\"}";
    let end = Instant::now() + Duration::from_secs(30);
    let mut sent = 0;
    while metric(&admin, drops) == 0.0 {
        assert!(
            Instant::now() < end,
            "no datagram dropped for the stalled reader in 30 s ({sent} sent)"
        );
        for _ in 0..50 {
            publisher.send_media(1000);
            sent += 1;
            if sent % 20 == 0 {
                reader.drive();
                stalled.drive();
            }
        }
        publisher.drive();
        reader.drive();
        std::thread::sleep(Duration::from_millis(10));
    }
    for _ in 0..100 {
        reader.drive();
        std::thread::sleep(Duration::from_millis(2));
    }
    eprintln!(
        "sent {sent}, the reader heard {}, the stalled viewer {} before it stopped; {} dropped",
        reader.rtp,
        stalled.rtp,
        metric(&admin, drops)
    );
    // The reader, on the same worker, heard (nearly) everything meanwhile: UDP from the
    // publisher may lose a little on a busy loopback, the reader's connection nothing.
    assert!(
        reader.rtp * 10 >= sent * 9,
        "the reader heard {} of {sent}",
        reader.rtp
    );
    // The stalled viewer's stream stays framed: once it reads again, what arrives opens.
    stalled.reading = true;
    let before = stalled.rtp;
    let end = Instant::now() + Duration::from_secs(5);
    while stalled.rtp < before + 10 {
        assert!(
            Instant::now() < end,
            "the stalled viewer heard nothing more"
        );
        publisher.send_media(1000);
        assert!(
            stalled.drive(),
            "the stalled viewer's connection was closed"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}
