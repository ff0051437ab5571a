//! The batch API gives the same bytes and statuses as one-at-a-time calls.

mod common;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use secrelay_srtp::batch::PacketResult;
use secrelay_srtp::{Context, Engine, Error, MasterKey, Op, Packet, Policy, Profile, SerialEngine};

fn contexts(outbound: bool) -> Vec<Context> {
    Profile::ALL
        .iter()
        .map(|&p| {
            let mk =
                MasterKey::new(p, &vec![p as u8; p.key_len()], &vec![7; p.salt_len()]).unwrap();
            let pol = Policy::new(mk);
            Context::new(if outbound {
                pol.any_outbound()
            } else {
                pol.any_inbound()
            })
            .unwrap()
        })
        .collect()
}

#[test]
fn batch_matches_single_packet_calls() {
    let mut rng = StdRng::seed_from_u64(5);
    let mut batch_tx = contexts(true);
    let mut single_tx = contexts(true);
    let mut batch_rx = contexts(false);
    for round in 0..20u16 {
        let n = rng.random_range(1..100);
        let mut bufs = Vec::new();
        let mut meta = Vec::new();
        for i in 0..n {
            let ctx = rng.random_range(0..Profile::ALL.len());
            let rtcp = rng.random_ratio(1, 8);
            let p = if rtcp {
                common::rtcp(rng.random_range(0..3), rng.random_range(0..20), 0)
            } else {
                common::rtp(
                    rng.random_range(0..3),
                    round * 200 + i as u16,
                    0,
                    rng.random_range(0..1300),
                    3,
                )
            };
            let len = p.len();
            let mut b = p;
            b.resize(len + 32, 0);
            bufs.push(b);
            meta.push((ctx, rtcp, len));
        }
        let mut expected = Vec::new();
        for (b, &(ctx, rtcp, len)) in bufs.iter().zip(&meta) {
            let mut c = b.clone();
            let r = if rtcp {
                single_tx[ctx].protect_rtcp(&mut c, len)
            } else {
                single_tx[ctx].protect_rtp(&mut c, len)
            };
            expected.push((r, c));
        }
        let mut packets: Vec<Packet<'_>> = bufs
            .iter_mut()
            .zip(&meta)
            .map(|(b, &(ctx, rtcp, len))| Packet {
                context: ctx,
                op: if rtcp {
                    Op::ProtectRtcp
                } else {
                    Op::ProtectRtp
                },
                buf: &mut b[..],
                len,
            })
            .collect();
        let mut results: Vec<PacketResult> = vec![Ok(0); packets.len()];
        SerialEngine.process(&mut batch_tx, &mut packets, &mut results);
        drop(packets);
        for ((r, b), (er, eb)) in results.iter().zip(&bufs).zip(&expected) {
            assert_eq!(r, er);
            if let Ok(n) = r {
                assert_eq!(&b[..*n], &eb[..*n]);
            }
        }
        // And back through a batch of unprotects.
        let mut packets: Vec<Packet<'_>> = bufs
            .iter_mut()
            .zip(&meta)
            .zip(&results)
            .map(|((b, &(ctx, rtcp, _)), r)| Packet {
                context: ctx,
                op: if rtcp {
                    Op::UnprotectRtcp
                } else {
                    Op::UnprotectRtp
                },
                buf: &mut b[..],
                len: *r.as_ref().unwrap(),
            })
            .collect();
        let mut back: Vec<PacketResult> = vec![Ok(0); packets.len()];
        SerialEngine.process(&mut batch_rx, &mut packets, &mut back);
        for (r, &(_, _, len)) in back.iter().zip(&meta) {
            assert_eq!(*r, Ok(len));
        }
    }
}

#[test]
fn a_bad_context_index_is_a_status_not_a_panic() {
    let mut ctxs = contexts(true);
    let mut b = common::rtp(1, 1, 0, 10, 0);
    b.resize(64, 0);
    let mut packets = [Packet {
        context: 99,
        op: Op::ProtectRtp,
        buf: &mut b[..],
        len: 22,
    }];
    let mut results = [Ok(0)];
    SerialEngine.process(&mut ctxs, &mut packets, &mut results);
    assert_eq!(results[0], Err(Error::UnknownContext));
}

#[test]
fn contexts_can_move_between_threads() {
    fn assert_send<T: Send>() {}
    assert_send::<Context>();
    let mut ctxs = contexts(true);
    let handle = std::thread::spawn(move || {
        let mut b = common::rtp(1, 1, 0, 10, 0);
        b.resize(64, 0);
        ctxs[0].protect_rtp(&mut b, 22)
    });
    assert_eq!(
        handle.join().unwrap(),
        Ok(22 + Profile::ALL[0].rtp_tag_len())
    );
}
