//! A member publishes at most `MAX_STREAMS` streams (SSRCs) at once: a packet of one more is
//! dropped and counted at its sender, unless one of its streams has been idle for
//! `STREAM_IDLE`, which is then given up (its subscriptions go) to make room. Without the
//! limit, a participant sending under ever new SSRCs made a feed, a subscription per receiver
//! and (for video) a retransmission buffer for each, without end.

use std::time::Duration;

use secrelay_gateway::counters::DropReason;
use secrelay_gateway::room::{MAX_STREAMS, STREAM_IDLE};
use secrelay_gateway::shard::JoinKind;
use secrelay_testkit::gateway::Harness;

const FIRST: u32 = 0x1000;

#[test]
fn a_publisher_cannot_make_streams_without_end() {
    let mut h = Harness::simd();
    let p = h.join_connected("r", 1, JoinKind::Join);
    let v = h.join_connected("r", 2, JoinKind::Join);
    let (pid, vid) = (h.member_id(p), h.member_id(v));
    let extra = 8;
    for k in 0..(MAX_STREAMS + extra) as u32 {
        let d = h.client(p).srtp_as(FIRST + k, &[1; 160]).1;
        h.send(p, &d);
        h.pump();
    }
    let dropped = |h: &Harness| h.member_counters(p).unwrap().drops[DropReason::TooManyStreams];
    assert_eq!(dropped(&h), extra as u64);
    let room = h.room_of(v);
    let held = (0..(MAX_STREAMS + extra) as u32)
        .filter(|k| room.subscribed(vid, pid, FIRST + k))
        .count();
    assert_eq!(
        held, MAX_STREAMS,
        "the receiver holds a subscription per stream kept"
    );
    assert!(!room.subscribed(vid, pid, FIRST + MAX_STREAMS as u32));

    // Later, one stream still sends; the rest fell idle. A new SSRC takes the place of the
    // stream idle longest, not of the live one.
    h.now += STREAM_IDLE + Duration::from_secs(1);
    let d = h.client(p).srtp_as(FIRST + 5, &[2; 160]).1;
    h.send(p, &d);
    let new = FIRST + 100;
    let d = h.client(p).srtp_as(new, &[3; 160]).1;
    h.send(p, &d);
    h.pump();
    assert_eq!(dropped(&h), extra as u64, "the new stream was taken");
    let room = h.room_of(v);
    assert!(room.subscribed(vid, pid, new));
    assert!(room.subscribed(vid, pid, FIRST + 5), "the live stream kept");
    assert!(
        !room.subscribed(vid, pid, FIRST),
        "the oldest idle stream given up"
    );
    let held = (0..(MAX_STREAMS + extra) as u32)
        .filter(|k| room.subscribed(vid, pid, FIRST + k))
        .count();
    assert_eq!(held, MAX_STREAMS - 1);
}
