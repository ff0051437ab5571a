//! Protecting and unprotecting allocate nothing per packet: a counting global allocator sees
//! zero allocations across thousands of packets, for every profile, RTP and RTCP, single and
//! batched. (Allocations inside C libraries bypass Rust's allocator; the default provider's
//! primitives are Rust except aws-lc's GCM, whose seal/open use stack contexts.)

mod common;

use std::alloc::{GlobalAlloc, Layout, System};

use secrelay_srtp::batch::PacketResult;
use secrelay_srtp::{
    Context, Engine, MasterKey, Op, Packet, Policy, Profile, SerialEngine, SimdEngine,
};

struct Counting;

thread_local! {
    /// Allocations made by this thread (tests run on several threads at once).
    static MINE: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Allocations made so far by the calling thread.
fn allocs() -> usize {
    MINE.with(|c| c.get())
}

fn count() {
    // `try_with`: a thread being torn down has no slot left; its allocations don't matter.
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

#[test]
fn zero_allocations_per_packet() {
    for profile in Profile::ALL {
        let mk = MasterKey::new(
            profile,
            &vec![1; profile.key_len()],
            &vec![2; profile.salt_len()],
        )
        .unwrap();
        let mut tx = Context::new(Policy::new(mk.clone()).any_outbound()).unwrap();
        let mut rx = Context::new(Policy::new(mk).any_inbound()).unwrap();
        let ssrcs = [1u32, 2, 3];
        let mut rtp: Vec<Vec<u8>> = ssrcs
            .iter()
            .map(|&s| common::rtp(s, 0, 0, 160, 0))
            .collect();
        let rtcp_plain = common::rtcp(1, 10, 0);
        let mut buf = vec![0u8; 2048];
        let mut rbuf = vec![0u8; 2048];
        // Warm up: the first packet of each SSRC makes its stream (that allocates).
        for p in &rtp {
            let n = tx.protect_rtp_into(p, &mut buf).unwrap();
            rx.unprotect_rtp(&mut buf, n).unwrap();
        }
        let n = tx.protect_rtcp_into(&rtcp_plain, &mut rbuf).unwrap();
        rx.unprotect_rtcp(&mut rbuf, n).unwrap();

        let before = allocs();
        for seq in 1..3000u16 {
            for p in rtp.iter_mut() {
                p[2..4].copy_from_slice(&seq.to_be_bytes());
                let n = tx.protect_rtp_into(p, &mut buf).unwrap();
                let m = rx.unprotect_rtp(&mut buf, n).unwrap();
                assert_eq!(m, p.len());
            }
            let n = tx.protect_rtcp_into(&rtcp_plain, &mut rbuf).unwrap();
            rx.unprotect_rtcp(&mut rbuf, n).unwrap();
        }
        // Failures allocate nothing either.
        for _ in 0..100 {
            let mut junk = buf.clone();
            let before_junk = allocs();
            let _ = rx.unprotect_rtp(&mut junk, 200);
            assert_eq!(allocs(), before_junk);
        }
        let after = allocs() - 100; // the 100 clones above
        assert_eq!(
            after - before,
            0,
            "{profile}: allocations on the packet path"
        );
    }
}

#[test]
fn zero_allocations_per_batch() {
    // The multi-buffer engine keeps its scratch per thread: its first batch may allocate it,
    // later ones must not.
    let lanes = SimdEngine::all_lanes();
    let engines: [&dyn Engine; 3] = [&SerialEngine, &SimdEngine::new(), &lanes];
    let profiles = [Profile::AesCm128HmacSha1_80, Profile::AeadAes128Gcm];
    for (engine, profile) in engines.into_iter().flat_map(|e| profiles.map(|p| (e, p))) {
        let mk = MasterKey::new(
            profile,
            &vec![1; profile.key_len()],
            &vec![2; profile.salt_len()],
        )
        .unwrap();
        let mut tx: Vec<Context> = (0..4)
            .map(|_| Context::new(Policy::new(mk.clone()).any_outbound()).unwrap())
            .collect();
        let mut rx: Vec<Context> = (0..4)
            .map(|_| Context::new(Policy::new(mk.clone()).any_inbound()).unwrap())
            .collect();
        let mut bufs: Vec<Vec<u8>> = (0..64)
            .map(|i| {
                let mut p = common::rtp(i as u32 % 3, 0, 0, 160, 0);
                p.resize(200, 0);
                p
            })
            .collect();
        let mut results: Vec<PacketResult> = vec![Ok(0); 64];
        let mut run = |bufs: &mut Vec<Vec<u8>>, seq: u16| {
            for (i, b) in bufs.iter_mut().enumerate() {
                b[2..4].copy_from_slice(&(seq + i as u16).to_be_bytes());
            }
            let mut packets: Vec<Packet<'_>> = bufs
                .iter_mut()
                .enumerate()
                .map(|(i, b)| Packet {
                    context: i % 4,
                    op: Op::ProtectRtp,
                    buf: &mut b[..],
                    len: 172,
                })
                .collect();
            let before = allocs();
            engine.process(&mut tx, &mut packets, &mut results);
            let protect = allocs() - before;
            assert!(results.iter().all(|r| r.is_ok()), "{}", engine.name());
            for p in packets.iter_mut() {
                p.op = Op::UnprotectRtp;
                p.len = 172 + profile.rtp_tag_len();
            }
            let before = allocs();
            engine.process(&mut rx, &mut packets, &mut results);
            let unprotect = allocs() - before;
            assert!(results.iter().all(|r| r == &Ok(172)), "{}", engine.name());
            protect + unprotect
        };
        // Every packet has its own SEQ, so each is accepted, protected and unprotected.
        run(&mut bufs, 0);
        for round in 1..50u16 {
            assert_eq!(
                run(&mut bufs, round * 100),
                0,
                "{} {profile}",
                engine.name()
            );
        }
    }
}
