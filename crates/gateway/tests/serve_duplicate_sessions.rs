//! One client socket in two sessions, through `secrelay serve` with two workers over real
//! sockets: a viewer joins room A (on one worker), then, from the same socket, room B (on the
//! other) and goes on with B alone, as a client that asked again does. Once its check for B
//! authenticates, the address is B's: the worker of A is told, its session stops sending there,
//! and everything that reaches the socket opens with B's keys.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use secrelay_gateway::server::{ServeConfig, Server};
use secrelay_testkit::browser::{answer_candidate, Browser, Direction, Inbound};
use secrelay_testkit::{Leg, Phase, Signaling, SimParticipant};
use secrelay_wire::sdp::parse_offer;

const LOCAL: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
const WORKERS: usize = 2;

/// What one session's browser made of the datagrams that reached the socket.
#[derive(Debug, Default)]
struct Got {
    rtp: usize,
    refused: usize,
}

/// A WHEP session of `browser` in `room`: its answer taken; the gateway's address.
fn whep(sig: &Signaling, room: &str, browser: &mut Browser) -> SocketAddr {
    let offer = browser.audio_offer(Direction::RecvOnly, None);
    let (status, _, body) = sig.post_offer(&format!("/whep/{room}"), &offer).unwrap();
    assert_eq!(status, 201, "{body}");
    browser.set_answer(parse_offer(&body).unwrap());
    answer_candidate(&body).unwrap()
}

/// Drives `browser` on `socket` for `dur` while the publishers run: checks every 200 ms,
/// DTLS once a check is answered; what reached the socket.
fn drive(
    socket: &UdpSocket,
    gateway: SocketAddr,
    browser: &mut Browser,
    publishers: &mut [SimParticipant],
    dur: Duration,
) -> Got {
    let mut got = Got::default();
    let end = Instant::now() + dur;
    let mut next_check = Instant::now();
    let mut buf = vec![0u8; 2048];
    while Instant::now() < end {
        let now = Instant::now();
        if now >= next_check {
            if let Some(c) = browser.binding_request(true) {
                socket.send_to(&c, gateway).unwrap();
            }
            next_check = now + Duration::from_millis(200);
        }
        if browser.dtls_timer.is_some_and(|t| now >= t) {
            browser.handle_timeout(now);
        }
        while let Ok((n, _)) = socket.recv_from(&mut buf) {
            match browser.receive(Instant::now(), &mut buf, n) {
                Inbound::StunSuccess if browser.dtls.is_none() => {
                    browser.start_dtls(Instant::now()).unwrap();
                }
                Inbound::Rtp(_) => got.rtp += 1,
                Inbound::Refused(_) if browser.keys.is_some() => got.refused += 1,
                _ => {}
            }
        }
        for d in browser.drain_dtls() {
            socket.send_to(&d, gateway).unwrap();
        }
        SimParticipant::drive_until(publishers, Duration::from_millis(10), |_| false).unwrap();
    }
    got
}

#[test]
fn a_socket_in_a_second_session_on_another_worker_hears_only_that_session() {
    let s = Server::start(ServeConfig {
        http: Some("127.0.0.1:0".parse().unwrap()),
        udp: "127.0.0.1:0".parse().unwrap(),
        workers: WORKERS,
        drain_secs: 0.1,
        ..ServeConfig::default()
    })
    .unwrap();
    let sig = Signaling::new(s.url());
    let room_a = "dup-a".to_string();
    let room_b = (0..)
        .map(|k| format!("dup-b{k}"))
        .find(|r| s.gateway().worker_index(r) != s.gateway().worker_index(&room_a))
        .unwrap();
    let mut publishers = vec![
        SimParticipant::join(&sig, &room_a, Leg::Whip, LOCAL, Instant::now()).unwrap(),
        SimParticipant::join(&sig, &room_b, Leg::Whip, LOCAL, Instant::now()).unwrap(),
    ];
    assert!(
        SimParticipant::drive_until(&mut publishers, Duration::from_secs(20), |p| p
            .iter()
            .all(|p| p.phase == Phase::Connected))
        .unwrap()
    );

    let socket = UdpSocket::bind((LOCAL, 0)).unwrap();
    socket.set_nonblocking(true).unwrap();
    let mut first = Browser::random(0);
    let gateway = whep(&sig, &room_a, &mut first);
    let got = drive(
        &socket,
        gateway,
        &mut first,
        &mut publishers,
        Duration::from_secs(2),
    );
    assert!(first.keys.is_some(), "the first session connects");
    assert!(got.rtp >= 20, "room A is heard: {got:?}");

    // The same socket in a second session, in room B, on the other worker.
    let mut second = Browser::random(0);
    assert_eq!(whep(&sig, &room_b, &mut second), gateway);
    let settle = drive(
        &socket,
        gateway,
        &mut second,
        &mut publishers,
        Duration::from_secs(2),
    );
    assert!(
        second.keys.is_some(),
        "the second session connects: {settle:?}"
    );
    let got = drive(
        &socket,
        gateway,
        &mut second,
        &mut publishers,
        Duration::from_secs(2),
    );
    assert!(got.rtp >= 50, "room B is heard: {got:?}");
    assert_eq!(
        got.refused, 0,
        "nothing of the first session reaches the socket"
    );
    // Both sessions are alive and connected on the gateway's side.
    assert_eq!(s.gateway().stats().totals().connected, 4);
    s.shutdown();
}
