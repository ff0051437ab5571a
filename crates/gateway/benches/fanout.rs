//! A broadcast's fan-out on one shard, in memory: one publisher's packet relayed to 500 WHEP
//! viewers, each copy written for its viewer (its SSRC, numbering and header extensions, as
//! Chrome's offer agreed on them), protected with its keys (AES-GCM, the SIMD engine) and put
//! out, ready for a socket. What one copy costs in user space, without the kernel's send path
//! or a load generator sharing the cores (the lab's `gateway-load --viewers` measures those
//! with them, over real sockets).
//!
//! Each timed step is one packet (a 1,000-byte payload) handed to the shard and every output
//! taken (in the cold case, with every cache emptied before each packet; in the burst case,
//! eight packets handed over before the outputs are taken, as a loaded worker's receive batch
//! brings them), the room's timers fired when due (RTCP reports, feedback), simulated time
//! moving 20 ms per packet. Throughput is in copies.
//!
//! A second group times the same room's control plane: one viewer's consent check (a STUN
//! binding request) answered, and the room's next deadline found after it.
//!
//! `cargo bench -p secrelay-gateway --bench fanout`

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use secrelay_gateway::shard::{Datagram, JoinKind};
use secrelay_testkit::gateway::{drain_copies, Harness};
use secrelay_testkit::memory::SimClient;

const VIEWERS: u16 = 500;
const PAYLOAD: [u8; 1000] = [0x5a; 1000];

/// A room with a connected publisher and [`VIEWERS`] connected viewers.
fn broadcast() -> (Harness, usize) {
    let mut h = Harness::simd();
    let publisher = h.join_connected("b", 1, JoinKind::Whip);
    for n in 0..VIEWERS {
        let c = SimClient::numbered(1000 + n);
        let offer = c.offer().replace("a=sendrecv", "a=recvonly");
        let v = h
            .join("b", c, JoinKind::Whep, Some(&offer))
            .expect("the viewer's offer is answered");
        assert!(h.connect(v), "viewer {n} connects");
    }
    (h, publisher)
}

/// Packets between two rounds of consent checks (10 s of simulated time: an ICE-lite agent
/// ends a session that sent none for 30 s).
const CONSENT_EVERY: u64 = 500;

/// `packets` packets from `publisher`, each handed to the shard and its copies taken (timed)
/// after `before` ran (untimed); the time taken.
fn one_at_a_time(
    h: &mut Harness,
    publisher: usize,
    packets: u64,
    mut before: impl FnMut(u64),
) -> Duration {
    let from = h.members[publisher].client.addr;
    let mut spent = Duration::ZERO;
    for k in 0..packets {
        if k % CONSENT_EVERY == 0 {
            h.consent_round();
        }
        let p = h.srtp(publisher, &PAYLOAD).1;
        h.now += Duration::from_millis(20);
        let now = h.now;
        before(k);
        let start = Instant::now();
        h.shard.handle(now, Datagram::classify(from, &p, now));
        let sent = drain_copies(&mut h.shard, now);
        spent += start.elapsed();
        assert_eq!(sent, u64::from(VIEWERS), "a copy for each viewer");
    }
    spent
}

fn fanout(c: &mut Criterion) {
    let (mut h, publisher) = broadcast();
    let from = h.members[publisher].client.addr;
    let mut g = c.benchmark_group("fanout");
    g.throughput(Throughput::Elements(u64::from(VIEWERS)));
    g.bench_function("broadcast_500_viewers_aes_gcm", |b| {
        b.iter_custom(|packets| one_at_a_time(&mut h, publisher, packets, |_| {}))
    });
    // The same with the caches emptied before each packet (untimed): the copies' buffers and
    // every receiver's state come from memory, as on a live worker whose caches the kernel's
    // send path and the other processes on the machine have taken over since the last packet.
    let mut evict = vec![0u8; EVICT_BYTES];
    g.bench_function("broadcast_500_viewers_aes_gcm_cold_caches", |b| {
        b.iter_custom(|packets| {
            one_at_a_time(&mut h, publisher, packets, |k| evict_caches(&mut evict, k))
        })
    });
    g.throughput(Throughput::Elements(u64::from(VIEWERS) * BURST));
    g.bench_function("broadcast_500_viewers_aes_gcm_burst_of_8", |b| {
        b.iter_custom(|bursts| {
            let mut spent = Duration::ZERO;
            for k in 0..bursts {
                if k % (CONSENT_EVERY / BURST) == 0 {
                    h.consent_round();
                }
                let packets: Vec<Vec<u8>> =
                    (0..BURST).map(|_| h.srtp(publisher, &PAYLOAD).1).collect();
                h.now += Duration::from_millis(20 * BURST);
                let now = h.now;
                let start = Instant::now();
                for p in &packets {
                    h.shard.handle(now, Datagram::classify(from, p, now));
                }
                let sent = drain_copies(&mut h.shard, now);
                spent += start.elapsed();
                assert_eq!(sent, u64::from(VIEWERS) * BURST, "a copy for each viewer");
            }
            spent
        })
    });
    g.finish();

    // The control plane of the same room: one viewer's consent check (a STUN binding request,
    // what each browser sends every few seconds), answered, with the room's next deadline
    // found after it. Requests made beforehand (untimed), the viewers in turn.
    let mut g = c.benchmark_group("room_of_500");
    g.throughput(Throughput::Elements(1));
    g.bench_function("consent_check", |b| {
        b.iter_custom(|checks| {
            let reqs: Vec<(usize, Vec<u8>)> = (0..checks)
                .map(|k| {
                    let i = 1 + (k as usize % usize::from(VIEWERS));
                    let answer = h.members[i].answer.clone();
                    (i, h.members[i].client.binding_request(&answer, false))
                })
                .collect();
            let now = h.now;
            let start = Instant::now();
            for (i, req) in &reqs {
                let from = h.members[*i].client.addr;
                h.shard.handle(now, Datagram::classify(from, req, now));
                drain_copies(&mut h.shard, now);
            }
            start.elapsed()
        })
    });
    g.finish();
}

/// Bytes written between two packets of the cold case: more than the last-level cache of the
/// machines measured (32 MiB of L3 on the 2-core EPYC of docs/benchmarks.md).
const EVICT_BYTES: usize = 64 << 20;

/// Writes over every line of `buf`, a different value each time.
fn evict_caches(buf: &mut [u8], k: u64) {
    for line in buf.chunks_mut(64) {
        line[0] = line[0].wrapping_add(k as u8 | 1);
    }
    std::hint::black_box(&buf);
}

/// Packets read in one batch when the broadcaster's packets arrive faster than the shard
/// takes them (a loaded worker's receive batch), all routed before their copies are taken.
const BURST: u64 = 8;

criterion_group!(benches, fanout);
criterion_main!(benches);
