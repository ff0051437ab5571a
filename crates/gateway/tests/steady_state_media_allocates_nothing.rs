//! Once connected and warmed up, a shard classifying a member's SRTP, unprotecting it,
//! routing it, protecting a copy for each receiver and handing the copies out allocates
//! nothing: a counting global allocator sees zero allocations on this thread across hundreds
//! of packets, one round at a time or a loaded worker's batch of them. (The simulated
//! browsers' own packets are made before counting starts, and what the shard sends is not
//! delivered to them while counting.)

use std::alloc::{GlobalAlloc, Layout, System};
use std::time::Duration;

use secrelay_gateway::shard::{Datagram, JoinKind, Output, Shard};
use secrelay_testkit::gateway::Harness;

struct Counting;

thread_local! {
    /// Allocations made by this thread (tests run on several threads at once).
    static MINE: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

fn allocs() -> usize {
    MINE.with(|c| c.get())
}

fn count() {
    let _ = MINE.try_with(|c| c.set(c.get() + 1));
}

// SAFETY: forwards to the system allocator unchanged; only counts calls.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        count();
        // SAFETY: same contract as ours.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        count();
        // SAFETY: same contract as ours.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Drains without copying; returns (datagrams, bytes) sent.
fn drain_counting(shard: &mut Shard) -> (usize, usize) {
    let (mut n, mut bytes) = (0, 0);
    while let Some(o) = shard.poll_output() {
        match o {
            Output::Transmit(t) => {
                assert!(t.contents.len() > 12);
                n += 1;
                bytes += t.contents.len();
            }
            Output::Pipe(_) => panic!("one shard has no pipes"),
            Output::Timeout(_) => break,
            Output::Event(_) => {}
        }
    }
    (n, bytes)
}

/// `members` connected members of one room (all sending and receiving), 200 packets of each
/// made up front; runs rounds `range` (each member's packet of the round, then one drain) and
/// returns the datagrams sent.
struct Setup {
    h: Harness,
    packets: Vec<Vec<Vec<u8>>>,
}

fn setup(members: u8) -> Setup {
    let mut h = Harness::simd();
    for i in 0..members {
        h.join_connected("r", i + 1, JoinKind::Join);
    }
    let packets = (0..usize::from(members))
        .map(|m| (0..200).map(|_| h.srtp(m, &[5; 160]).1).collect())
        .collect();
    Setup { h, packets }
}

/// Rounds before `measured` warm up (the first packets make the SRTP streams and fill the
/// buffer pools); then the rounds of `measured`, `per_drain` per drain, must allocate nothing.
/// The copies sent and their bytes in those.
fn steady(s: &mut Setup, measured: std::ops::Range<usize>, per_drain: usize) -> (usize, usize) {
    batches(s, 0..measured.start, per_drain);
    let before = allocs();
    let total = batches(s, measured, per_drain);
    let during = allocs() - before;
    assert_eq!(during, 0, "allocations in steady state");
    total
}

/// Rounds of every member's packets at `range`, `per_drain` rounds handed to the shard before
/// each drain (a loaded worker's receive batch: every copy of them in flight at once); the
/// copies sent and their bytes.
fn batches(s: &mut Setup, range: std::ops::Range<usize>, per_drain: usize) -> (usize, usize) {
    let mut total = (0, 0);
    for first in range.clone().step_by(per_drain) {
        for k in first..(first + per_drain).min(range.end) {
            for (m, p) in s.packets.iter().enumerate() {
                let from = s.h.members[m].client.addr;
                let now = s.h.now;
                s.h.shard.handle(now, Datagram::classify(from, &p[k], now));
            }
        }
        let (n, b) = drain_counting(&mut s.h.shard);
        total = (total.0 + n, total.1 + b);
        s.h.now += Duration::from_millis(20);
    }
    total
}

#[test]
fn a_member_in_and_its_copy_out_allocate_nothing_per_packet() {
    let mut s = setup(2);
    let (n, bytes) = steady(&mut s, 16..200, 1);
    assert_eq!(
        n,
        184 * 2,
        "every packet became a copy for the other member"
    );
    assert!(bytes > 184 * 2 * 160);
}

#[test]
fn room_forwarding_allocates_nothing_per_packet() {
    let mut s = setup(3);
    let (n, _) = steady(&mut s, 16..200, 1);
    assert_eq!(n, 184 * 3 * 2);
}

#[test]
fn a_broadcast_wider_than_a_few_hundred_copies_allocates_nothing_per_packet() {
    // Two publishers and 200 viewers: 400 copies of a round in flight at once, more than a
    // small buffer pool keeps.
    let mut s = broadcast(120);
    let (n, _) = steady(&mut s, 16..120, 1);
    assert_eq!(n, 104 * 2 * 200);
}

#[test]
fn a_batch_of_a_broadcasts_packets_allocates_nothing_per_packet() {
    // 16 packets of each of the two publishers per drain, as a loaded worker reads them in
    // one batch: 6,400 copies in flight at once.
    let mut s = broadcast(160);
    let (n, _) = steady(&mut s, 32..160, 16);
    assert_eq!(n, 128 * 2 * 200);
}

/// Two publishers and 200 viewers in one room, `packets` of each publisher made up front.
fn broadcast(packets: usize) -> Setup {
    let mut h = Harness::simd();
    for i in 0..2 {
        h.join_connected("r", i + 1, JoinKind::Whip);
    }
    for i in 2..202 {
        h.join_connected("r", i + 1, JoinKind::Whep);
    }
    let packets = (0..2)
        .map(|m| (0..packets).map(|_| h.srtp(m, &[5; 160]).1).collect())
        .collect();
    Setup { h, packets }
}
