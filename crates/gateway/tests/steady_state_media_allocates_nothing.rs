//! Once connected and warmed up, receiving SRTP, unprotecting it into a Media event, protecting
//! and queueing a packet out, and a room forwarding one member's packet to the others allocate
//! nothing: a counting global allocator sees zero allocations on this thread across hundreds
//! of packets. (The simulated browser's own packets are made before counting starts.)

mod sim_client;

use std::alloc::{GlobalAlloc, Layout, System};
use std::time::Duration;

use secrelay_gateway::participant::{Event, Output, Participant};
use secrelay_gateway::room::{MemberRole, Room, RoomOutput};
use sim_client::{connect, participant_for, SimClient};

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

/// Drains without copying; returns (transmit bytes, media packets).
fn drain_counting(p: &mut Participant) -> (usize, usize) {
    let (mut bytes, mut media) = (0, 0);
    while let Some(o) = p.poll_output() {
        match o {
            Output::Transmit { contents, .. } => bytes += contents.len(),
            Output::Event(Event::Media(m)) => {
                assert!(m.rtp.len() > 12);
                media += 1
            }
            Output::Timeout(_) => break,
            Output::Event(_) => {}
        }
    }
    (bytes, media)
}

#[test]
fn participant_in_and_out_allocates_nothing_per_packet() {
    let t0 = std::time::Instant::now();
    let mut client = SimClient::new(1);
    let mut p = participant_for(&client.offer(), t0);
    let c = connect(&mut client, &mut p, t0);
    assert!(c.connected().is_some());
    let packets: Vec<Vec<u8>> = (0..400).map(|_| client.srtp(&[3; 160]).1).collect();
    let mut outgoing = client.rtp(&[4; 160]);
    let mut seq = 0u16;
    let mut now = c.now;
    // Warm-up: the first packets make the SRTP streams and fill the buffer pool.
    for pkt in &packets[..16] {
        p.handle_datagram(now, client.addr, pkt);
        seq += 1;
        outgoing[2..4].copy_from_slice(&seq.to_be_bytes());
        p.send_rtp(now, &outgoing).unwrap();
        drain_counting(&mut p);
    }
    let before = allocs();
    let mut total = (0, 0);
    for pkt in &packets[16..] {
        now += Duration::from_millis(20);
        p.handle_datagram(now, client.addr, pkt);
        seq += 1;
        outgoing[2..4].copy_from_slice(&seq.to_be_bytes());
        p.send_rtp(now, &outgoing).unwrap();
        let (b, m) = drain_counting(&mut p);
        total = (total.0 + b, total.1 + m);
    }
    let during = allocs() - before;
    assert_eq!(total.1, 384, "every packet became media");
    assert!(total.0 > 384 * 160);
    assert_eq!(during, 0, "allocations in steady state");
}

#[test]
fn room_forwarding_allocates_nothing_per_packet() {
    let mut now = std::time::Instant::now();
    let mut room = Room::new();
    let mut clients = Vec::new();
    let mut ids = Vec::new();
    for i in 0..3u8 {
        let mut c = SimClient::new(i + 1);
        let mut p = participant_for(&c.offer(), now);
        let conn = connect(&mut c, &mut p, now);
        assert!(conn.connected().is_some());
        now = conn.now;
        ids.push(room.add(p, MemberRole::BOTH));
        clients.push(c);
    }
    let packets: Vec<Vec<Vec<u8>>> = clients
        .iter_mut()
        .map(|c| (0..200).map(|_| c.srtp(&[5; 160]).1).collect())
        .collect();
    let mut forwarded = 0usize;
    let mut run = |room: &mut Room, range: std::ops::Range<usize>, now: &mut std::time::Instant| {
        for k in range {
            for s in 0..3 {
                room.handle_datagram(*now, ids[s], clients[s].addr, &packets[s][k]);
                while let Some(o) = room.poll_output() {
                    match o {
                        RoomOutput::Member(_, Output::Transmit { .. }) => forwarded += 1,
                        RoomOutput::Member(..) => {}
                        RoomOutput::Timeout(_) => break,
                    }
                }
            }
            *now += Duration::from_millis(20);
        }
    };
    run(&mut room, 0..16, &mut now);
    let before = allocs();
    run(&mut room, 16..200, &mut now);
    let during = allocs() - before;
    assert_eq!(forwarded, 200 * 3 * 2);
    assert_eq!(during, 0, "allocations in steady state");
}
