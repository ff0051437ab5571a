//! The batched media path across rooms: every member's SRTP of a round (two rounds per batch,
//! so a sender appears twice in one engine call) unprotected in one engine call of the shard,
//! the copies routed from them protected in another, and each receiver opening them with its
//! own keys — as a worker hands the shard its `recvmmsg` batches.

use std::time::Duration;

use secrelay_gateway::counters::DropReason;
use secrelay_gateway::shard::{Datagram, JoinKind};
use secrelay_srtp::{Engine, SerialEngine, SimdEngine};
use secrelay_testkit::gateway::Harness;
use secrelay_wire::RtpHeader;

/// `rooms` rooms of `per_room` connected members (client numbers unique across rooms); the
/// member at (room r, position m) is `r * per_room + m`.
fn setup(engine: Box<dyn Engine>, rooms: usize, per_room: usize) -> Harness {
    let mut h = Harness::new(engine);
    for r in 0..rooms {
        for m in 0..per_room {
            h.join_connected(
                &format!("room{r}"),
                (r * per_room + m + 1) as u8,
                JoinKind::Join,
            );
        }
    }
    h
}

fn run(engine: Box<dyn Engine>, rooms: usize, per_room: usize, batches: usize) {
    let mut h = setup(engine, rooms, per_room);
    let before = h.counters();
    for b in 0..batches {
        // Two rounds per batch: each sender twice, in order; then one drain runs the batch.
        for round in 0..2u8 {
            for r in 0..rooms {
                for m in 0..per_room {
                    let payload = [(b as u8) ^ (round * 16) ^ (r * per_room + m) as u8; 80];
                    let (_, protected) = h.srtp(r * per_room + m, &payload);
                    h.send(r * per_room + m, &protected);
                }
            }
        }
        assert_eq!(h.shard.staged(), 2 * rooms * per_room);
        assert_eq!(h.pump(), 2 * rooms * per_room * (per_room - 1));
        h.now += Duration::from_millis(20);
    }
    let c = h.counters();
    assert_eq!(
        c.srtp_batches - before.srtp_batches,
        batches as u64,
        "one unprotect call per batch"
    );
    assert_eq!(
        c.srtp_batched - before.srtp_batched,
        (2 * batches * rooms * per_room) as u64
    );
    for r in 0..rooms {
        for m in 0..per_room {
            let i = r * per_room + m;
            let received = &h.members[i].client.received;
            assert_eq!(
                received.len(),
                2 * batches * (per_room - 1),
                "room {r} member {m}"
            );
            // Every payload is one that another member of the same room sent.
            let possible: Vec<u8> = (0..batches)
                .flat_map(|b| (0..2u8).map(move |round| (b as u8) ^ (round * 16)))
                .flat_map(|x| {
                    (0..per_room)
                        .filter(move |k| *k != m)
                        .map(move |k| x ^ (r * per_room + k) as u8)
                })
                .collect();
            for pkt in received {
                let payload = RtpHeader::parse(pkt).unwrap().payload();
                assert_eq!(payload.len(), 80);
                assert!(
                    possible.contains(&payload[0]),
                    "room {r} member {m}: payload {:#x} not from its room",
                    payload[0]
                );
            }
            let c = h.member_counters(i).unwrap();
            assert_eq!(c.packets_in as usize, 2 * batches);
            assert_eq!(c.packets_out as usize, 2 * batches * (per_room - 1));
            assert_eq!(
                c.drops[DropReason::AuthFailed]
                    + c.drops[DropReason::Replayed]
                    + c.drops[DropReason::ProtectFailed],
                0
            );
        }
        let rc = h.room_of(r * per_room).counters();
        assert_eq!(rc.routed as usize, 2 * batches * per_room);
        assert_eq!(
            rc.forwarded as usize,
            2 * batches * per_room * (per_room - 1)
        );
    }
}

#[test]
fn batches_across_rooms_reach_every_receiver_with_its_own_keys_on_the_simd_engine() {
    // The lanes whatever the CPU (by default they run only where it has AVX-512).
    run(Box::new(SimdEngine::all_lanes()), 3, 3, 4);
}

#[test]
fn batches_across_rooms_reach_every_receiver_with_its_own_keys_on_the_serial_engine() {
    run(Box::new(SerialEngine), 2, 4, 3);
}

#[test]
fn a_forged_datagram_in_a_batch_is_refused_and_counted_and_the_rest_go_through() {
    let mut h = setup(Box::new(SimdEngine::all_lanes().with_group(4)), 1, 2);
    let mut forged_seen = 0;
    for k in 0..10u8 {
        let (_, mut protected) = h.srtp(0, &[k; 40]);
        if k % 3 == 0 {
            let last = protected.len() - 1;
            protected[last] ^= 1;
            forged_seen += 1;
        }
        h.send(0, &protected);
    }
    assert_eq!(h.shard.staged(), 10, "all in one batch");
    assert_eq!(h.pump(), 10 - forged_seen);
    let c = h.member_counters(0).unwrap();
    assert_eq!(c.drops[DropReason::AuthFailed] as usize, forged_seen);
    assert_eq!(c.packets_in as usize, 10 - forged_seen);
    // A member that leaves while its datagram waits in the batch: its context is gone when
    // the batch runs, and the datagram is counted, not routed.
    let (_, p) = h.srtp(0, &[1; 40]);
    let from = h.members[0].client.addr;
    let now = h.now;
    h.shard.handle(now, Datagram::classify(from, &p, now));
    assert_eq!(h.shard.staged(), 1);
    let (room, id) = (h.members[0].room.clone(), h.members[0].id.clone());
    assert!(h.shard.leave(now, &room, &id));
    h.pump();
    assert_eq!(h.counters().media.drops[DropReason::UnknownSource], 1);
    assert_eq!(h.members[1].client.received.len(), 10 - forged_seen);
}

#[test]
fn a_publishers_run_in_one_batch_goes_out_receiver_by_receiver_each_in_order() {
    // One publisher and three receivers: six packets of one stream in one receive batch.
    let mut h = setup(Box::new(SimdEngine::new()), 1, 4);
    for k in 0..6u8 {
        let (_, protected) = h.srtp(0, &[k; 60]);
        h.send(0, &protected);
    }
    assert_eq!(h.shard.staged(), 6, "one batch");
    let now = h.now;
    let mut order = Vec::new();
    while let Some(o) = h.shard.poll_output() {
        match o {
            secrelay_gateway::shard::Output::Transmit(t) => {
                let m = h
                    .members
                    .iter_mut()
                    .position(|m| m.client.addr == t.destination)
                    .expect("a member's address");
                if t.received.is_some() {
                    order.push(m);
                }
                h.members[m].client.receive(now, t.contents);
            }
            secrelay_gateway::shard::Output::Timeout(_) => break,
            _ => {}
        }
    }
    // Each receiver's six copies one after another (its keys and numbering loaded once).
    let want: Vec<usize> = (1..4).flat_map(|m| [m; 6]).collect();
    assert_eq!(order, want);
    for m in 1..4 {
        let received = &h.members[m].client.received;
        let payloads: Vec<u8> = received
            .iter()
            .map(|p| RtpHeader::parse(p).unwrap().payload()[0])
            .collect();
        assert_eq!(
            payloads,
            (0..6).collect::<Vec<u8>>(),
            "member {m}: in order"
        );
        let seqs: Vec<u16> = received
            .iter()
            .map(|p| RtpHeader::parse(p).unwrap().sequence())
            .collect();
        assert!(
            seqs.windows(2).all(|w| w[1] == w[0].wrapping_add(1)),
            "member {m}: numbered one after another: {seqs:?}"
        );
        assert_eq!(h.member_counters(m).unwrap().packets_out, 6);
    }
    assert_eq!(h.room_of(0).counters().forwarded, 18);
}
