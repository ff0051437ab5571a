//! Many small rooms on one shard, in memory: 1,000 WebRTC participants in rooms of 4, each
//! packet from one of them relayed to the other three, each copy written for its receiver,
//! protected with its keys (AES-GCM, the SIMD engine) and put out, ready for a socket. What a
//! copy costs in user space when the shard's state for its members does not fit in the
//! cache: a packet's sender and receivers are seldom the last ones touched (the lab's
//! `gateway-load --participants 1000 --per-room 4` measures the same with the kernel and the
//! load generator, over real sockets).
//!
//! Each timed step is one receive batch: 32 packets (an 80-byte Opus payload each) from 32
//! participants of different rooms (every participant once per 1,000 packets, in an order
//! that keeps a room's members apart, as a loaded worker reads them), handed to the shard, then every output taken and the rooms' timers fired when due
//! (RTCP reports), simulated time moving 20 ms per 1,000 packets. Throughput is in copies.
//!
//! `cargo bench -p secrelay-gateway --bench rooms`

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use secrelay_gateway::shard::{Datagram, JoinKind};
use secrelay_testkit::gateway::{drain_copies, Harness};
use secrelay_testkit::memory::SimClient;

const PARTICIPANTS: u16 = 1000;
const PER_ROOM: u16 = 4;
const BATCH: usize = 32;
const PAYLOAD: [u8; 80] = [0x5a; 80];
/// The order participants send in: the `k`th packet is participant `k × STRIDE mod 1,000`'s
/// (`STRIDE` prime to 1,000, so that each sends once a round, and larger than a room).
const STRIDE: usize = 389;

/// [`PARTICIPANTS`] connected participants, [`PER_ROOM`] to a room.
fn rooms() -> Harness {
    let mut h = Harness::simd();
    for n in 0..PARTICIPANTS {
        let room = format!("r{}", n / PER_ROOM);
        let i = h
            .join(&room, SimClient::numbered(1000 + n), JoinKind::Join, None)
            .expect("the offer is answered");
        assert!(h.connect(i), "participant {n} connects");
    }
    h
}

/// Simulated time between two rounds of consent checks (an ICE-lite agent ends a session
/// that sent none for 30 s).
const CONSENT_EVERY: Duration = Duration::from_secs(5);

fn relay(c: &mut Criterion) {
    let mut h = rooms();
    let step = Duration::from_millis(20) * BATCH as u32 / u32::from(PARTICIPANTS);
    let mut next = 0usize;
    let mut consent_at = h.now;
    let mut g = c.benchmark_group("rooms_of_4");
    g.throughput(Throughput::Elements(BATCH as u64 * u64::from(PER_ROOM - 1)));
    g.bench_function("1000_participants_aes_gcm_batches_of_32", |b| {
        b.iter_custom(|batches| {
            let mut spent = Duration::ZERO;
            for _ in 0..batches {
                if h.now >= consent_at {
                    h.consent_round();
                    consent_at = h.now + CONSENT_EVERY;
                }
                let packets: Vec<_> = (0..BATCH)
                    .map(|k| {
                        let i = (next + k) * STRIDE % h.members.len();
                        (h.members[i].client.addr, h.srtp(i, &PAYLOAD).1)
                    })
                    .collect();
                next = (next + BATCH) % h.members.len();
                h.now += step;
                let now = h.now;
                let start = Instant::now();
                for (from, p) in &packets {
                    h.shard.handle(now, Datagram::classify(*from, p, now));
                }
                let sent = drain_copies(&mut h.shard, now);
                spent += start.elapsed();
                assert_eq!(
                    sent,
                    BATCH as u64 * u64::from(PER_ROOM - 1),
                    "a copy for each of the others in the room"
                );
            }
            spent
        })
    });
    g.finish();
}

criterion_group!(benches, relay);
criterion_main!(benches);
