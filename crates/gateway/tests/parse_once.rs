//! A datagram is parsed once on its way through the gateway: classified where it is read,
//! and every later stage takes the class (STUN's parsed message, RTP's header fields) as it is.
//! Counted with the wire crate's parse counter (its `parse-count` feature, on for these
//! tests): every call of `demux`, `classify`, `RtpHeader::parse`, `RtcpHeader::parse` and
//! `stun::Message::parse` on this thread.

use std::time::Duration;

use secrelay_gateway::shard::{Datagram, JoinKind, Output};
use secrelay_testkit::gateway::Harness;
use secrelay_wire::parse_count;

/// Drains the shard without handing anything to the clients (which parse what they get).
fn drain(h: &mut Harness) -> usize {
    let mut n = 0;
    while let Some(o) = h.shard.poll_output() {
        match o {
            Output::Transmit(_) => n += 1,
            Output::Event(_) => {}
            Output::Pipe(_) => panic!("one shard has no pipes"),
            Output::Timeout(_) => break,
        }
    }
    n
}

#[test]
fn media_is_parsed_once_per_datagram_from_socket_to_copies() {
    const { assert!(parse_count::ENABLED, "the parse-count feature is on") };
    let mut h = Harness::simd();
    for n in 1..=3 {
        h.join_connected("r", n, JoinKind::Join);
    }
    // The clients' packets, made (and their parsing done) before counting.
    let packets: Vec<Vec<u8>> = (0..50).map(|i| h.srtp(i % 3, &[i as u8; 160]).1).collect();
    let from: Vec<_> = (0..50).map(|i| h.members[i % 3].client.addr).collect();
    let before = parse_count::parses();
    let mut sent = 0;
    for (p, f) in packets.iter().zip(&from) {
        let now = h.now;
        h.shard.handle(now, Datagram::classify(*f, p, now));
        sent += drain(&mut h);
        h.now += Duration::from_millis(1);
    }
    let parses = parse_count::parses() - before;
    assert_eq!(sent, 100, "two copies of each");
    assert_eq!(parses, 50, "one parse per datagram in, none for its copies");
}

#[test]
fn a_stun_check_from_a_new_address_is_parsed_once() {
    let mut h = Harness::simd();
    let a = h.join_connected("r", 1, JoinKind::Join);
    let answer = h.members[a].answer.clone();
    // The same browser checks from another address (a new candidate pair): routed by the
    // USERNAME read at the edge, answered by ICE from the message parsed there.
    let check = h.client(a).binding_request(&answer, false);
    let elsewhere: std::net::SocketAddr = "198.51.100.1:50999".parse().unwrap();
    let before = parse_count::parses();
    let now = h.now;
    h.shard
        .handle(now, Datagram::classify(elsewhere, &check, now));
    assert_eq!(drain(&mut h), 1, "the check is answered");
    assert_eq!(parse_count::parses() - before, 1);
}
