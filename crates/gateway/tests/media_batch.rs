//! The batch media path across rooms: every member's SRTP of a round (two rounds per batch,
//! so a sender appears twice in one engine call) unprotected in one `MediaBatch`, the copies
//! the rooms left protected in another, and each receiver opening them with its own keys —
//! as the worker runs its `recvmmsg` batches.

mod sim_client;

use std::time::{Duration, Instant};

use secrelay_gateway::media_batch::MediaBatch;
use secrelay_gateway::room::{MemberId, MemberRole, Room, RoomOutput};
use secrelay_srtp::{Engine, SerialEngine, SimdEngine};
use sim_client::{connect, participant_for, rtp_facts, SimClient};

struct Setup {
    rooms: Vec<Room>,
    clients: Vec<Vec<SimClient>>,
    ids: Vec<Vec<MemberId>>,
    now: Instant,
}

/// `rooms` rooms of `per_room` connected members (client numbers unique across rooms).
fn setup(rooms: usize, per_room: usize) -> Setup {
    let mut now = Instant::now();
    let mut s = Setup {
        rooms: Vec::new(),
        clients: Vec::new(),
        ids: Vec::new(),
        now,
    };
    for r in 0..rooms {
        let mut room = Room::new();
        room.defer_media_copies(true);
        let (mut clients, mut ids) = (Vec::new(), Vec::new());
        for m in 0..per_room {
            let mut c = SimClient::new((r * per_room + m + 1) as u8);
            let mut p = participant_for(&c.offer(), now);
            let conn = connect(&mut c, &mut p, now);
            assert!(conn.connected().is_some(), "{:?}", conn.events);
            now = conn.now;
            ids.push(room.add(p, MemberRole::BOTH));
            clients.push(c);
        }
        s.rooms.push(room);
        s.clients.push(clients);
        s.ids.push(ids);
    }
    s.now = now;
    s
}

/// Drains a room with deferred copies: nothing may be transmitted directly.
fn drain(room: &mut Room) {
    match room.poll_output() {
        None | Some(RoomOutput::Timeout(_)) => {}
        Some(RoomOutput::Member(id, o)) => {
            panic!("{id:?}: output without the batch (a media copy sent directly?): {o:?}")
        }
    }
}

fn run(engine: Box<dyn Engine>, rooms: usize, per_room: usize, batches: usize) {
    let mut s = setup(rooms, per_room);
    let mut mb = MediaBatch::new(engine);
    let mut copies = Vec::new();
    for b in 0..batches {
        // Two rounds per batch: each sender twice, in order.
        for round in 0..2u8 {
            for r in 0..rooms {
                for m in 0..per_room {
                    let payload = [(b as u8) ^ (round * 16) ^ (r * per_room + m) as u8; 80];
                    let (_, protected) = s.clients[r][m].srtp(&payload);
                    mb.stage_inbound(r, 0, s.ids[r][m], s.now, &protected);
                }
            }
        }
        mb.unprotect(&mut s.rooms[..]);
        let staged = std::mem::take(&mut mb.inbound);
        for mut st in staged {
            assert!(st.result.is_ok(), "batch {b}: {:?}", st.result);
            let room = &mut s.rooms[st.slot];
            assert!(room.accept_unprotected_rtp(s.now, st.member, st.len, st.result, &mut st.buf));
            drain(room);
            room.take_media_copies(&mut copies);
            for (member, buf) in copies.drain(..) {
                mb.stage_outbound(st.slot, 0, member, st.received, buf);
            }
            mb.recycle(st.buf);
        }
        mb.protect(&mut s.rooms[..]);
        let staged = std::mem::take(&mut mb.outbound);
        assert_eq!(staged.len(), 2 * rooms * per_room * (per_room - 1));
        for st in staged {
            let room = &mut s.rooms[st.slot];
            room.count_protected(st.member, &st.result);
            let n = st.result.expect("every copy protects");
            let dest = room
                .media_destination(st.member)
                .expect("a receiver to send to");
            let client = s.clients[st.slot]
                .iter_mut()
                .find(|c| c.addr == dest)
                .expect("the destination is a member of the same room");
            // Opened with the receiver's own keys (SimClient panics otherwise).
            client.receive(s.now, &st.buf[..n]);
            room.recycle_copy(st.buf);
        }
        s.now += Duration::from_millis(20);
    }
    for r in 0..rooms {
        for (m, client) in s.clients[r].iter().enumerate() {
            assert_eq!(
                client.received.len(),
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
            for pkt in &client.received {
                let (_, _, _, payload) = rtp_facts(pkt);
                assert_eq!(payload.len(), 80);
                assert!(
                    possible.contains(&payload[0]),
                    "room {r} member {m}: payload {:#x} not from its room",
                    payload[0]
                );
            }
            let c = s.rooms[r].participant(s.ids[r][m]).unwrap().counters();
            assert_eq!(c.packets_in as usize, 2 * batches);
            assert_eq!(c.packets_out as usize, 2 * batches * (per_room - 1));
            assert_eq!(c.auth_failures + c.replays + c.send_refused, 0);
        }
        assert_eq!(
            s.rooms[r].counters().routed_in as usize,
            2 * batches * per_room
        );
        assert_eq!(
            s.rooms[r].counters().forwarded as usize,
            2 * batches * per_room * (per_room - 1)
        );
    }
}

#[test]
fn batches_across_rooms_reach_every_receiver_with_its_own_keys_on_the_simd_engine() {
    run(Box::new(SimdEngine::new()), 3, 3, 4);
}

#[test]
fn batches_across_rooms_reach_every_receiver_with_its_own_keys_on_the_serial_engine() {
    run(Box::new(SerialEngine), 2, 4, 3);
}

#[test]
fn a_forged_datagram_in_a_batch_is_refused_and_counted_and_the_rest_go_through() {
    let mut s = setup(1, 2);
    let mut mb = MediaBatch::new(Box::new(SimdEngine::new().with_group(4)));
    let mut forged_seen = 0;
    for k in 0..10u8 {
        let (_, mut protected) = s.clients[0][0].srtp(&[k; 40]);
        if k % 3 == 0 {
            let last = protected.len() - 1;
            protected[last] ^= 1;
            forged_seen += 1;
        }
        mb.stage_inbound(0, 0, s.ids[0][0], s.now, &protected);
    }
    mb.unprotect(&mut s.rooms[..]);
    let staged = std::mem::take(&mut mb.inbound);
    let refused = staged.iter().filter(|st| st.result.is_err()).count();
    assert_eq!(refused, forged_seen);
    for mut st in staged {
        s.rooms[0].accept_unprotected_rtp(s.now, st.member, st.len, st.result, &mut st.buf);
    }
    let c = s.rooms[0].participant(s.ids[0][0]).unwrap().counters();
    assert_eq!(c.auth_failures as usize, forged_seen);
    assert_eq!(c.packets_in as usize, 10 - forged_seen);
    // A member that is not in the room: its packets come back as unknown contexts.
    mb.stage_inbound(
        0,
        0,
        MemberId(999),
        s.now,
        &[0x80, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1],
    );
    mb.stage_inbound(
        7,
        0,
        s.ids[0][0],
        s.now,
        &[0x80, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1],
    );
    mb.unprotect(&mut s.rooms[..]);
    assert!(mb
        .inbound
        .iter()
        .all(|st| st.result == Err(secrelay_srtp::Error::UnknownContext)));
}
