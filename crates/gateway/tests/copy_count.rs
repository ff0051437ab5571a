//! A relayed copy's bytes are copied at most twice between the socket it came in on and the
//! socket it leaves by: once when its datagram is staged for the batch's unprotect call (one
//! copy for all the datagram's copies, none when a worker hands the datagram over in its own
//! buffer), and once when the room writes the receiver's copy, header and payload, into the
//! buffer that is then protected in place and sent from as it is (the worker's send batch
//! takes that buffer, not its bytes: `server::udp`'s own test checks the same allocations go
//! out and come back). Counted with the gateway's copy counter (its `copy-count` feature, on
//! for these tests): every copy of packet bytes from one buffer into another on this thread.

use std::time::Duration;

use secrelay_gateway::copy_count;
use secrelay_gateway::shard::{Datagram, JoinKind, Output, Shard};
use secrelay_testkit::gateway::Harness;
use secrelay_testkit::memory::SimClient;

/// Drains the shard without handing anything to the clients: the media transmits.
fn drain(shard: &mut Shard) -> usize {
    let mut n = 0;
    while let Some(o) = shard.poll_output() {
        match o {
            Output::Transmit(t) => n += usize::from(t.received.is_some()),
            Output::Event(_) => {}
            Output::Pipe(_) => panic!("one shard has no pipes"),
            Output::Timeout(_) => break,
        }
    }
    n
}

#[test]
fn a_relayed_copy_is_copied_twice_between_receive_and_send() {
    const { assert!(copy_count::ENABLED, "the copy-count feature is on") };
    let mut h = Harness::simd();
    for n in 1..=4 {
        h.join_connected("r", n, JoinKind::Join);
    }
    // Made (and the clients' own copying done) before counting.
    let packets: Vec<(usize, Vec<u8>)> = (0..40)
        .map(|i| (i % 4, h.srtp(i % 4, &[i as u8; 160]).1))
        .collect();
    for (m, p) in &packets {
        let (from, now) = (h.members[*m].client.addr, h.now);
        let before = copy_count::copies();
        h.shard.handle(now, Datagram::classify(from, p, now));
        let sent = drain(&mut h.shard);
        let copies = copy_count::copies() - before;
        assert_eq!(sent, 3, "a copy for each other member");
        assert_eq!(
            copies,
            1 + 3,
            "one copy into the staged buffer, one per receiver's copy"
        );
        h.now += Duration::from_millis(20);
    }
}

#[test]
fn a_broadcast_copy_with_its_own_extensions_is_written_once() {
    // Viewers that agreed on header extensions (Chrome's offer: audio level, send time): each
    // copy's header is written for its receiver, with the payload, in one pass.
    let mut h = Harness::simd();
    let publisher = h.join_connected("b", 1, JoinKind::Whip);
    for n in 0..12 {
        let c = SimClient::new(10 + n);
        let offer = c.offer().replace("a=sendrecv", "a=recvonly");
        let v = h.join("b", c, JoinKind::Whep, Some(&offer)).unwrap();
        assert!(h.connect(v));
    }
    let packets: Vec<Vec<u8>> = (0..20).map(|i| h.srtp(publisher, &[i; 120]).1).collect();
    let from = h.members[publisher].client.addr;
    let before = copy_count::copies();
    let mut sent = 0;
    for p in &packets {
        let now = h.now;
        h.shard.handle(now, Datagram::classify(from, p, now));
        sent += drain(&mut h.shard);
        h.now += Duration::from_millis(20);
    }
    assert_eq!(sent, 20 * 12);
    assert_eq!(copy_count::copies() - before, 20 * (1 + 12));
}

#[test]
fn a_handed_over_datagram_is_staged_in_its_own_buffer() {
    let mut h = Harness::simd();
    for n in 1..=3 {
        h.join_connected("r", n, JoinKind::Join);
    }
    let packets: Vec<Vec<u8>> = (0..10).map(|i| h.srtp(0, &[i; 160]).1).collect();
    let from = h.members[0].client.addr;
    for p in packets {
        let now = h.now;
        let class = Datagram::classify(from, &p, now).class;
        let mut buf = p;
        let handed = buf.as_ptr();
        let before = copy_count::copies();
        let via = secrelay_gateway::leg::Via::Shared;
        h.shard.handle_owned(now, (via, from, class), &mut buf, now);
        let sent = drain(&mut h.shard);
        assert_eq!(sent, 2);
        assert_eq!(
            copy_count::copies() - before,
            2,
            "only the receivers' copies are written"
        );
        assert_ne!(buf.as_ptr(), handed, "the handed-over buffer was kept");
        h.now += Duration::from_millis(20);
    }
}
