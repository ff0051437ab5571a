//! The ring against real sockets on loopback: receives across many sockets, sends in one
//! submission, buffers and send slots running out, sockets disarmed and their ports reused.

use std::net::{Ipv6Addr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use secrelay_uring::{Completion, Config, Received, Ring};

fn ring(config: Config) -> Ring<u32> {
    match Ring::probe(config) {
        Ok(r) => r,
        Err(e) => {
            assert!(
                std::env::var_os("CI").is_none(),
                "io_uring is refused here ({e}); under CI the kernel must allow it"
            );
            panic!("io_uring unavailable: {e}");
        }
    }
}

fn socket(addr: &str) -> UdpSocket {
    let s = UdpSocket::bind(addr).unwrap();
    s.set_nonblocking(true).unwrap();
    s
}

/// Reaps until `n` datagrams came (recycling each after copying it out) and `sends` sends
/// completed (into `sent`), or 5 s passed.
fn receive(
    r: &mut Ring<u32>,
    n: usize,
    sends: usize,
    sent: &mut Vec<(u32, usize)>,
) -> Vec<(Received, Vec<u8>)> {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut got = Vec::new();
    let mut out = Vec::new();
    while (got.len() < n || sent.len() < sends) && Instant::now() < deadline {
        r.submit().unwrap();
        r.wait(Duration::from_millis(20)).unwrap();
        out.clear();
        r.reap(&mut out, usize::MAX);
        for c in out.drain(..) {
            match c {
                Completion::Received(d) => {
                    got.push((d, r.payload(&d).to_vec()));
                    r.recycle(&d);
                }
                Completion::Sent { meta, result, .. } => sent.push((meta, result.unwrap())),
            }
        }
    }
    got
}

#[test]
fn datagrams_on_many_sockets_come_back_with_their_socket_and_source() {
    let mut r = ring(Config::default());
    let sockets: Vec<UdpSocket> = (0..200).map(|_| socket("127.0.0.1:0")).collect();
    for (k, s) in sockets.iter().enumerate() {
        r.arm(k as u32, s);
    }
    r.submit().unwrap();
    let peer = socket("127.0.0.1:0");
    for (k, s) in sockets.iter().enumerate() {
        peer.send_to(format!("to {k}").as_bytes(), s.local_addr().unwrap())
            .unwrap();
    }
    let got = receive(&mut r, 200, 0, &mut Vec::new());
    assert_eq!(got.len(), 200);
    for (d, bytes) in got {
        assert_eq!(bytes, format!("to {}", d.key).as_bytes());
        assert_eq!(d.from, Some(peer.local_addr().unwrap()));
        assert!(!d.truncated);
    }
}

#[test]
fn a_batch_of_sends_goes_out_in_one_submission_and_every_buffer_comes_back() {
    let mut r = ring(Config::default());
    let from = socket("127.0.0.1:0");
    let to = socket("127.0.0.1:0");
    r.arm(7, &to);
    for i in 0..70u32 {
        let buf = vec![i as u8; 10 + i as usize];
        r.send(&from, to.local_addr().unwrap(), false, buf, i)
            .unwrap();
    }
    assert_eq!(r.sends_in_flight(), 70);
    r.submit().unwrap();
    let mut sent = Vec::new();
    let got = receive(&mut r, 70, 70, &mut sent);
    assert_eq!(got.len(), 70);
    for (i, (d, bytes)) in got.iter().enumerate() {
        assert_eq!(d.key, 7);
        assert_eq!(d.from, Some(from.local_addr().unwrap()));
        assert_eq!(bytes.len(), 10 + i);
        assert!(bytes.iter().all(|b| usize::from(*b) == i));
    }
    sent.sort();
    assert_eq!(
        sent,
        (0..70).map(|i| (i, 10 + i as usize)).collect::<Vec<_>>()
    );
    assert_eq!(r.sends_in_flight(), 0);
}

#[test]
fn sends_are_taken_back_right_after_the_submit_and_datagrams_wait_their_turn() {
    let mut r = ring(Config::default());
    let from = socket("127.0.0.1:0");
    let to = socket("127.0.0.1:0");
    r.arm(3, &to);
    r.submit().unwrap();
    // A datagram that arrives before the sends: its completion must stay for `reap`.
    from.send_to(b"first", to.local_addr().unwrap()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !r.pending() && Instant::now() < deadline {
        r.wait(Duration::from_millis(20)).unwrap();
    }
    for i in 0..40u32 {
        r.send(&from, to.local_addr().unwrap(), false, vec![i as u8; 20], i)
            .unwrap();
    }
    r.submit().unwrap();
    let mut out = Vec::new();
    r.reap_sent(&mut out);
    let mut sent: Vec<u32> = out
        .iter()
        .map(|c| match c {
            Completion::Sent { meta, result, buf } => {
                assert_eq!(*result.as_ref().unwrap(), 20);
                assert_eq!(buf.len(), 20);
                *meta
            }
            Completion::Received(_) => panic!("a datagram among the sends"),
        })
        .collect();
    sent.sort_unstable();
    assert_eq!(
        sent,
        (0..40).collect::<Vec<_>>(),
        "UDP sends finish in the submit"
    );
    assert_eq!(r.sends_in_flight(), 0);
    // Every datagram is still there for `reap`, the first one first.
    let got = receive(&mut r, 41, 0, &mut Vec::new());
    assert_eq!(got.len(), 41);
    assert_eq!(got[0].1, b"first");
    assert!(got[1..].iter().all(|(_, b)| b.len() == 20));
}

#[test]
fn a_dual_stack_socket_reads_ipv4_peers_as_ipv4_and_sends_to_them() {
    let mut r = ring(Config::default());
    let gw = {
        let s = socket2::Socket::new(socket2::Domain::IPV6, socket2::Type::DGRAM, None).unwrap();
        s.set_only_v6(false).unwrap();
        s.set_nonblocking(true).unwrap();
        s.bind(&SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0)).into())
            .unwrap();
        UdpSocket::from(s)
    };
    let port = gw.local_addr().unwrap().port();
    r.arm(1, &gw);
    r.submit().unwrap();
    for (peer, target) in [
        ("127.0.0.1:0", SocketAddr::from(([127, 0, 0, 1], port))),
        ("[::1]:0", SocketAddr::from((Ipv6Addr::LOCALHOST, port))),
    ] {
        let p = socket(peer);
        p.send_to(b"check", target).unwrap();
        let got = receive(&mut r, 1, 0, &mut Vec::new());
        let from = got[0].0.from.unwrap();
        assert_eq!(from, p.local_addr().unwrap(), "its own family, not ::ffff:");
        r.send(&gw, from, true, b"answer".to_vec(), 0).unwrap();
        r.submit().unwrap();
        p.set_nonblocking(false).unwrap();
        p.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut buf = [0u8; 16];
        // The ring's completions are task work of this thread: a blocking read here may be
        // interrupted by their notification (EINTR), and is then read again.
        let (n, src) = loop {
            match p.recv_from(&mut buf) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                r => break r.unwrap(),
            }
        };
        assert_eq!(&buf[..n], b"answer");
        assert_eq!(src.port(), port);
    }
}

#[test]
fn running_out_of_buffers_pauses_receiving_and_loses_nothing() {
    let mut r = ring(Config {
        buffers: 4,
        ..Config::default()
    });
    let to = socket("127.0.0.1:0");
    let peer = socket("127.0.0.1:0");
    r.arm(3, &to);
    r.submit().unwrap();
    for i in 0..50u8 {
        peer.send_to(&[i; 100], to.local_addr().unwrap()).unwrap();
    }
    // Hold the buffers of the first completions: the receive ends for want of buffers.
    std::thread::sleep(Duration::from_millis(50));
    let mut out = Vec::new();
    r.wait(Duration::from_millis(20)).unwrap();
    r.reap(&mut out, usize::MAX);
    let first = out.len();
    assert!(first <= 4, "{first} datagrams in 4 buffers");
    for c in out {
        if let Completion::Received(d) = c {
            r.recycle(&d);
        }
    }
    // Given back, the buffers take the rest (the receive is armed again).
    let rest = receive(&mut r, 50 - first, 0, &mut Vec::new());
    assert_eq!(rest.len() + first, 50);
}

#[test]
fn a_ring_gives_buffers_as_traffic_needs_them() {
    use secrelay_uring::FIRST_GIVEN;
    let mut r = ring(Config {
        buffers: 1024,
        ..Config::default()
    });
    assert_eq!(r.buffers_given(), usize::from(FIRST_GIVEN));
    let to = socket("127.0.0.1:0");
    socket2::SockRef::from(&to)
        .set_recv_buffer_size(4 << 20)
        .unwrap();
    let peer = socket("127.0.0.1:0");
    r.arm(1, &to);
    r.submit().unwrap();
    let n = 600;
    for i in 0..n {
        peer.send_to(&(i as u32).to_be_bytes(), to.local_addr().unwrap())
            .unwrap();
    }
    // Every buffer held, none given back: the receive ends for want of one, the ring gives
    // as many again and arms it again, until the burst fits.
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut held = Vec::new();
    let mut out = Vec::new();
    while held.len() < n && Instant::now() < deadline {
        r.submit().unwrap();
        r.wait(Duration::from_millis(20)).unwrap();
        out.clear();
        r.reap(&mut out, usize::MAX);
        held.extend(out.drain(..).filter_map(|c| match c {
            Completion::Received(d) => Some(d),
            Completion::Sent { .. } => None,
        }));
    }
    let order: Vec<u32> = held
        .iter()
        .map(|d| u32::from_be_bytes(r.payload(d).try_into().unwrap()))
        .collect();
    assert_eq!(order, (0..n as u32).collect::<Vec<_>>(), "all, in order");
    assert_eq!(r.buffers_given(), 1024, "256, then 512, then 1,024");
    for d in &held {
        r.recycle(d);
    }
}

#[test]
fn many_sockets_sharing_few_buffers_lose_nothing_and_keep_their_order() {
    // Every socket's receive ends for want of buffers over and over; they are armed again as
    // the buffers come back, a few at a time.
    let mut r = ring(Config {
        buffers: 16,
        ..Config::default()
    });
    let sockets: Vec<UdpSocket> = (0..200).map(|_| socket("127.0.0.1:0")).collect();
    for (k, s) in sockets.iter().enumerate() {
        r.arm(k as u32, s);
    }
    r.submit().unwrap();
    let peer = socket("127.0.0.1:0");
    for i in 0..4u8 {
        for s in &sockets {
            peer.send_to(&[i; 40], s.local_addr().unwrap()).unwrap();
        }
    }
    let got = receive(&mut r, 800, 0, &mut Vec::new());
    assert_eq!(got.len(), 800);
    let mut next = vec![0u8; sockets.len()];
    for (d, bytes) in got {
        let k = d.key as usize;
        assert_eq!(bytes, [next[k]; 40], "socket {k}'s datagrams in order");
        next[k] += 1;
    }
    assert!(next.iter().all(|&n| n == 4));
}

#[test]
fn more_sends_than_slots_all_go_out() {
    let mut r = ring(Config {
        send_slots: 4,
        ..Config::default()
    });
    let from = socket("127.0.0.1:0");
    let to = socket("127.0.0.1:0");
    r.arm(9, &to);
    for i in 0..100u32 {
        r.send(&from, to.local_addr().unwrap(), false, vec![1; 40], i)
            .unwrap();
    }
    r.submit().unwrap();
    let mut sent = Vec::new();
    // Every send's completion, the ones reaped early to free slots included.
    let got = receive(&mut r, 100, 100, &mut sent);
    assert_eq!(got.len(), 100);
    assert_eq!(sent.len(), 100);
}

#[test]
fn a_disarmed_socket_lets_its_port_go_at_once() {
    let mut r = ring(Config::default());
    for _ in 0..20 {
        let s = socket("127.0.0.1:0");
        let addr = s.local_addr().unwrap();
        r.arm(5, &s);
        r.submit().unwrap();
        r.disarm(5);
        r.submit().unwrap();
        drop(s);
        // Bound again right away: the kernel holds no reference to the old socket.
        UdpSocket::bind(addr).expect("the port is free once disarmed");
    }
}

/// A key whose socket received datagrams that were not reaped before it was disarmed is not
/// settled, even once its receive ended: those datagrams still come out under it. Once they
/// are reaped, it is, and may name another socket.
#[test]
fn a_disarmed_key_settles_only_once_what_it_received_is_reaped() {
    let mut r = ring(Config::default());
    let s = socket("127.0.0.1:0");
    r.arm(9, &s);
    r.submit().unwrap();
    let peer = socket("127.0.0.1:0");
    for b in [&b"one"[..], b"two"] {
        peer.send_to(b, s.local_addr().unwrap()).unwrap();
    }
    // Let the kernel deliver both into the ring before the receive is cancelled.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !r.pending() && Instant::now() < deadline {
        r.wait(Duration::from_millis(20)).unwrap();
    }
    std::thread::sleep(Duration::from_millis(50));
    r.disarm(9);
    assert!(!r.settled(9), "disarmed, its cancel not submitted yet");
    r.submit().unwrap();
    drop(s);
    assert!(!r.settled(9), "what it received waits to be reaped");
    let mut out = Vec::new();
    r.reap(&mut out, usize::MAX);
    let mut got = Vec::new();
    for c in out {
        if let Completion::Received(d) = c {
            got.push((d.key, r.payload(&d).to_vec()));
            r.recycle(&d);
        }
    }
    assert_eq!(got, vec![(9, b"one".to_vec()), (9, b"two".to_vec())]);
    assert!(r.settled(9));
}

/// A key disarmed and armed again on another socket before the next submit (a port handed to
/// a new leg in the same turn): the old socket's receive is cancelled and its port let go, the
/// new one's datagrams come under the key, and the other sockets, thousands of them, go on.
#[test]
fn a_key_armed_again_in_the_same_turn_reads_its_new_socket_only() {
    let mut r = ring(Config::default());
    let others: Vec<UdpSocket> = (0..2000).map(|_| socket("127.0.0.1:0")).collect();
    for (k, s) in others.iter().enumerate() {
        r.arm(100 + k as u32, s);
    }
    let old = socket("127.0.0.1:0");
    let old_addr = old.local_addr().unwrap();
    r.arm(7, &old);
    r.submit().unwrap();
    let new = socket("127.0.0.1:0");
    r.disarm(7);
    r.arm(7, &new);
    r.submit().unwrap();
    drop(old);
    let rebound = UdpSocket::bind(old_addr).expect("the old socket's port is free");
    drop(rebound);
    let peer = socket("127.0.0.1:0");
    peer.send_to(b"new", new.local_addr().unwrap()).unwrap();
    peer.send_to(b"other", others[1999].local_addr().unwrap())
        .unwrap();
    let got = receive(&mut r, 2, 0, &mut Vec::new());
    let mut keys: Vec<(u32, Vec<u8>)> = got.into_iter().map(|(d, b)| (d.key, b)).collect();
    keys.sort();
    assert_eq!(keys, vec![(7, b"new".to_vec()), (2099, b"other".to_vec())]);
}

#[test]
fn a_long_datagram_is_cut_and_says_so() {
    let mut r = ring(Config::default());
    let to = socket("127.0.0.1:0");
    let peer = socket("127.0.0.1:0");
    r.arm(2, &to);
    r.submit().unwrap();
    peer.send_to(&[7u8; 3000], to.local_addr().unwrap())
        .unwrap();
    let got = receive(&mut r, 1, 0, &mut Vec::new());
    assert!(got[0].0.truncated);
    assert_eq!(got[0].1.len(), secrelay_uring::DATAGRAM_MAX);
}

/// With deferred completions, a burst of datagrams comes back from one batch wait, and a wait
/// for more than arrive ends with what came (after its short wait on kernels that have one,
/// at once on others), not at its long timeout.
#[test]
fn a_deferred_ring_reaps_a_burst_in_one_batch_wait() {
    let config = Config {
        defer_taskrun: true,
        ..Config::default()
    };
    // Deferred completions came with Linux 6.1; under CI the kernel must have them.
    if let Err(e) = Ring::<u32>::probe(config) {
        assert!(std::env::var_os("CI").is_none(), "no deferred ring: {e}");
        eprintln!("SKIPPED: no deferred io_uring here ({e})");
        return;
    }
    let mut r = ring(config);
    let to = socket("127.0.0.1:0");
    let peer = socket("127.0.0.1:0");
    r.arm(5, &to);
    r.submit().unwrap();
    for i in 0..10u8 {
        peer.send_to(&[i; 60], to.local_addr().unwrap()).unwrap();
    }
    let started = Instant::now();
    r.wait_batch(10, Duration::from_millis(50), Duration::from_secs(5))
        .unwrap();
    let mut out = Vec::new();
    r.reap(&mut out, usize::MAX);
    let mut got = Vec::new();
    for c in out {
        if let Completion::Received(d) = c {
            assert_eq!(d.key, 5);
            got.push(r.payload(&d)[0]);
            r.recycle(&d);
        }
    }
    assert_eq!(got, (0..10).collect::<Vec<u8>>());
    // One datagram, a wait for 10: it ends with the one, well before the 5 s timeout.
    peer.send_to(&[42; 60], to.local_addr().unwrap()).unwrap();
    r.wait_batch(10, Duration::from_millis(50), Duration::from_secs(5))
        .unwrap();
    let mut out = Vec::new();
    r.reap(&mut out, usize::MAX);
    assert!(
        matches!(out.as_slice(), [Completion::Received(d)] if d.key == 5),
        "{out:?}"
    );
    for c in out.drain(..) {
        if let Completion::Received(d) = c {
            r.recycle(&d);
        }
    }
    // And with no short wait at all, a wait for 10 ends with the first.
    peer.send_to(&[43; 60], to.local_addr().unwrap()).unwrap();
    r.wait_batch(10, Duration::ZERO, Duration::from_secs(5))
        .unwrap();
    out.clear();
    r.reap(&mut out, usize::MAX);
    assert!(
        matches!(out.as_slice(), [Completion::Received(d)] if d.key == 5),
        "{out:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "the waits ended at their timeout: {:?}",
        started.elapsed()
    );
}
