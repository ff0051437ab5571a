//! Simulcast through a room, in memory on simulated time: a publisher whose offer sends three
//! VP8 layers (`a=simulcast:send q;h;f`, told apart by the `rid` extension) and a viewer. The
//! viewer is sent one layer under one SSRC; a switch (here through the API) waits for the new
//! layer's keyframe, which the gateway asks the publisher for, and the viewer's numbering
//! (sequence numbers, VP8 picture IDs) follows on across it.

use std::time::Duration;

use secrelay_gateway::shard::JoinKind;
use secrelay_srtp::SimdEngine;
use secrelay_testkit::gateway::Harness;
use secrelay_testkit::memory::SimClient;
use secrelay_wire::rtcp::{compound, write_empty_rr, write_nack, Feedback};
use secrelay_wire::rtp::write_extension;
use secrelay_wire::video::vp8_descriptor;
use secrelay_wire::RtpHeader;

const RID: &str = "urn:ietf:params:rtp-hdrext:sdes:rtp-stream-id";
const RRID: &str = "urn:ietf:params:rtp-hdrext:sdes:repaired-rtp-stream-id";
/// The layers' SSRCs and sizes (q small, f large).
const LAYERS: [(&str, u32, usize); 3] = [("q", 3001, 100), ("h", 3002, 400), ("f", 3003, 1000)];

/// Chrome's offer with the video section sending three simulcast layers (no a=ssrc lines, as
/// Chrome's unified-plan simulcast offers have none).
fn publisher_offer(c: &SimClient) -> String {
    c.offer()
        .replace(
            "a=ssrc-group:FID 2001 2002\r\na=ssrc:2001 cname:abc\r\na=ssrc:2002 cname:abc\r\n",
            &format!(
                "a=extmap:10 {RID}\r\na=extmap:11 {RRID}\r\na=rid:q send\r\na=rid:h send\r\na=rid:f send\r\na=simulcast:send q;h;f\r\n"
            ),
        )
}

/// A VP8 packet of layer `k`: a keyframe start or a delta frame, its picture ID.
fn vp8(k: usize, key: bool, picture_id: u16) -> Vec<u8> {
    let mut p = vec![0x90, 0x80, 0x80 | (picture_id >> 8) as u8, picture_id as u8];
    p.push(if key { 0x00 } else { 0x01 });
    p.resize(LAYERS[k].2, k as u8 + 1);
    p
}

/// The publisher sends a packet of layer `k` (with its rid).
fn send_layer(h: &mut Harness, k: usize, seq: u16, payload: &[u8]) {
    let (rid, ssrc, _) = LAYERS[k];
    let c = h.client(0);
    let mut p = vec![0x90, 96];
    p.extend_from_slice(&seq.to_be_bytes());
    p.extend_from_slice(&(u32::from(seq) * 3000).to_be_bytes());
    p.extend_from_slice(&ssrc.to_be_bytes());
    write_extension(&mut p, &[(10, rid.as_bytes())]);
    p.extend_from_slice(payload);
    let len = p.len();
    p.resize(len + 32, 0);
    let n = c.tx.as_mut().unwrap().protect_rtp(&mut p, len).unwrap();
    p.truncate(n);
    h.send(0, &p);
    h.pump();
}

/// One round: every layer sends a packet (a keyframe when `key`); picture IDs per layer.
fn round(h: &mut Harness, n: u16, key: bool) {
    for k in 0..3 {
        let pid = [100u16, 5000, 9000][k] + n;
        send_layer(h, k, 1000 * k as u16 + n, &vp8(k, key, pid));
    }
    h.now += Duration::from_millis(33);
}

/// A simulcast publisher (member 0) and a viewer (its index), both connected.
fn publisher_and_viewer() -> (Harness, usize) {
    let mut h = Harness::new(Box::new(SimdEngine::new()));
    let p = SimClient::new(1);
    let offer = publisher_offer(&p);
    let i = h.join("sc", p, JoinKind::Whip, Some(&offer)).unwrap();
    assert!(h.connect(i));
    let answer = &h.members[0].answer_sdp;
    for line in [
        "a=rid:q recv\r\n",
        "a=rid:f recv\r\n",
        "a=simulcast:recv q;h;f\r\n",
        &format!("a=extmap:10 {RID}\r\n"),
    ] {
        assert!(answer.contains(line), "{line:?} in {answer}");
    }
    let v = SimClient::new(2);
    let offer = v.offer().replace("a=sendonly", "a=recvonly");
    let viewer = h.join("sc", v, JoinKind::Whep, Some(&offer)).unwrap();
    assert!(h.connect(viewer));
    (h, viewer)
}

/// What the viewer received: (SSRC, sequence number, payload length, VP8 picture ID).
fn received(h: &Harness, viewer: usize) -> Vec<(u32, u16, usize, u16)> {
    h.members[viewer]
        .client
        .received
        .iter()
        .filter_map(|p| {
            let r = RtpHeader::parse(p).ok()?;
            let pid = vp8_descriptor(r.payload())?.picture_id?.0;
            Some((r.ssrc(), r.sequence(), r.payload().len(), pid))
        })
        .collect()
}

#[test]
fn a_viewer_gets_one_layer_and_switches_at_its_keyframe_with_numbering_that_follows_on() {
    let (mut h, viewer) = publisher_and_viewer();

    // Keyframes on every layer, then deltas. The viewer starts on the layer seen first (q);
    // once the layers' rates are known (a second) its target is the best one (it agreed on no
    // transport-cc: no limit known), taken at f's next keyframe (round 35, 1.16 s in).
    round(&mut h, 0, true);
    for n in 1..40 {
        round(&mut h, n, n == 35);
    }
    let got = received(&h, viewer);
    // Round 35 sends q, then f's keyframe: both reach the viewer (q until the switch).
    assert_eq!(
        got.len(),
        41,
        "one layer's packets a round, two in the round of the switch"
    );
    assert!(got.iter().all(|g| g.0 == got[0].0), "one SSRC");
    let sizes: Vec<usize> = got.iter().map(|g| g.2).collect();
    assert_eq!(sizes[..36], [100; 36], "q first");
    assert_eq!(sizes[36..], [1000; 5], "f from its keyframe on");
    assert!(got.windows(2).all(|w| w[1].1 == w[0].1.wrapping_add(1)));
    assert!(
        got.windows(2).all(|w| w[1].3 == w[0].3 + 1),
        "picture IDs follow on across the switch"
    );
    let (last_seq, last_pid) = (got[40].1, got[40].3);

    // The API asks for q: the publisher is asked for a keyframe of q at once; until it comes,
    // f goes on; then q, in the viewer's numbering.
    let room = h.members[viewer].room.clone();
    let id = h.members[viewer].id.clone();
    let now = h.now;
    h.shard.set_layer(now, &room, &id, None, Some("q")).unwrap();
    h.pump();
    let asked_q = h.members[0]
        .client
        .received_rtcp
        .iter()
        .flat_map(|c| compound(c).unwrap().feedback)
        .any(|f| matches!(f, Feedback::Pli { media: 3001, .. }));
    assert!(asked_q, "a keyframe of q asked for");
    h.members[viewer].client.received.clear();
    round(&mut h, 40, false);
    round(&mut h, 41, true);
    round(&mut h, 42, false);
    let got = received(&h, viewer);
    let sizes: Vec<usize> = got.iter().map(|g| g.2).collect();
    assert_eq!(sizes, vec![1000, 100, 100], "f until q's keyframe, then q");
    let seqs: Vec<u16> = got.iter().map(|g| g.1).collect();
    assert_eq!(
        seqs,
        (1..=3)
            .map(|k| last_seq.wrapping_add(k))
            .collect::<Vec<_>>(),
        "sequence numbers follow on"
    );
    let pids: Vec<u16> = got.iter().map(|g| g.3).collect();
    assert_eq!(
        pids,
        (1..=3).map(|k| last_pid + k).collect::<Vec<_>>(),
        "picture IDs follow on across the switch"
    );
    let rooms = h.shard.snapshot(h.now, Some("sc"));
    let me = rooms[0].participants.iter().find(|p| p.id == id).unwrap();
    let view = &me.layers_received[0];
    assert_eq!(view.current.as_deref(), Some("q"));
    assert!(view.manual);
    assert_eq!(view.publisher_id, h.members[0].id);
    let publisher = rooms[0]
        .participants
        .iter()
        .find(|p| p.id == h.members[0].id)
        .unwrap();
    let rids: Vec<&str> = publisher
        .layers_sent
        .iter()
        .map(|l| l.rid.as_str())
        .collect();
    assert_eq!(rids, vec!["q", "h", "f"]);
    assert!(publisher.layers_sent.iter().all(|l| l.ssrc.is_some()));
    // A rid nobody sends is refused.
    assert!(h.shard.set_layer(now, &room, &id, None, Some("x")).is_err());
    // One retransmission buffer per layer the publisher sends, whatever the viewers; its
    // memory is what the buffers hold: at least the packets kept (43 rounds of each layer).
    let c = h.shard.counters();
    assert_eq!(c.retransmit_streams, 3);
    let kept: u64 = LAYERS.iter().map(|l| 43 * l.2 as u64).sum();
    assert!(
        c.retransmit_bytes >= kept,
        "{} < {kept}",
        c.retransmit_bytes
    );
}

/// After a switch the viewer's subscription carries the new layer: a NACK for one of its
/// packets is answered from that layer's buffer (as RTX, with the picture numbers it was first
/// sent with), while a NACK for a number sent before the switch, on the old layer, is a miss:
/// never answered with the new layer's packet of the same number.
#[test]
fn after_a_layer_switch_nacks_are_answered_from_the_layer_sent() {
    let (mut h, viewer) = publisher_and_viewer();
    round(&mut h, 0, true);
    for n in 1..40 {
        round(&mut h, n, n == 35);
    }
    let got = received(&h, viewer);
    assert_eq!(got.len(), 41);
    let (ssrc, f, q) = (got[0].0, got[38], got[30]);
    assert_eq!(
        (f.2, q.2),
        (1000, 100),
        "one of f, one of q from before the switch"
    );
    let (me, publisher) = (h.member_id(viewer), h.member_id(0));
    let room = h.room_of(viewer);
    assert_eq!(room.mapped_ssrc(me, publisher, LAYERS[2].1), Some(ssrc));
    assert_eq!(room.mapped_ssrc(me, publisher, LAYERS[0].1), None);

    let before = h.members[viewer].client.received.len();
    let mut nack = Vec::new();
    write_empty_rr(&mut nack, 0x77);
    write_nack(&mut nack, 0x77, ssrc, &[q.1, f.1]);
    let wire = h.client(viewer).srtcp(&nack).unwrap();
    h.send(viewer, &wire);
    h.pump();
    let answered = &h.members[viewer].client.received[before..];
    assert_eq!(answered.len(), 1, "f's packet again, nothing for q's");
    let r = RtpHeader::parse(&answered[0]).unwrap();
    assert_ne!(r.ssrc(), ssrc, "on the RTX stream");
    assert_eq!(&r.payload()[..2], &f.1.to_be_bytes());
    let body = &r.payload()[2..];
    assert_eq!(body.len(), f.2, "f's packet");
    assert_eq!(vp8_descriptor(body).unwrap().picture_id.unwrap().0, f.3);
    let fb = h.member_counters(viewer).unwrap().feedback;
    assert_eq!((fb.nacked, fb.retransmitted, fb.nack_misses), (2, 1, 1));
}
