//! RTCP feedback through a room, in memory on simulated time (a shard driven with simulated
//! browsers): a publisher sending VP8 (Chrome's offer: NACK, PLI, RTX 97 for 96) and viewers
//! that receive it.
//! - a viewer's PLI reaches the publisher as a PLI for the publisher's own SSRC, once per
//!   keyframe interval however many viewers ask; a viewer that joins asks at once;
//! - a viewer's NACK is answered from the gateway's buffer, as RTX on the viewer's RTX SSRC
//!   carrying the original sequence number and payload, in the viewer's numbering;
//! - a NACK for a packet the gateway itself never received goes upstream to the publisher,
//!   whose RTX answer is unwrapped and relayed as the packet it repairs;
//! - audio gets none of it, and the counters say what happened.

use std::time::Duration;

use secrelay_gateway::shard::JoinKind;
use secrelay_srtp::SimdEngine;
use secrelay_testkit::gateway::Harness;
use secrelay_testkit::memory::SimClient;
use secrelay_wire::rtcp::{compound, write_empty_rr, write_nack, write_pli, Feedback};
use secrelay_wire::RtpHeader;

/// The publisher's VP8 stream and its RTX stream (Chrome's offer: FID 2001 2002).
const VIDEO_SSRC: u32 = 2001;
const RTX_SSRC: u32 = 2002;

/// A viewer's offer: Chrome's, with the video section receiving.
fn viewer_offer(c: &SimClient) -> String {
    c.offer().replace("a=sendonly", "a=recvonly")
}

/// A room with a publisher (index 0) and `viewers` viewers (1..), all connected.
fn room(viewers: u8) -> Harness {
    let mut h = Harness::new(Box::new(SimdEngine::new()));
    let p = h.join_connected("cam", 1, JoinKind::Whip);
    assert_eq!(p, 0);
    for n in 0..viewers {
        let c = SimClient::new(10 + n);
        let offer = viewer_offer(&c);
        let i = h.join("cam", c, JoinKind::Whep, Some(&offer)).unwrap();
        assert!(h.connect(i));
    }
    h
}

/// The publisher sends one VP8 packet (payload `payload`); returns its sequence number.
fn send_video(h: &mut Harness, payload: &[u8]) -> u16 {
    send_video_from(h, 0, payload)
}

/// Member `i` sends one VP8 packet (payload `payload`) on its video SSRC; its sequence number.
fn send_video_from(h: &mut Harness, i: usize, payload: &[u8]) -> u16 {
    let c = h.client(i);
    let (audio_pt, audio_ssrc, audio_step) = (c.pt, c.ssrc, c.ts_step);
    c.pt = 96;
    c.ssrc = VIDEO_SSRC;
    c.ts_step = 3000;
    let seq = c.seq;
    let (_, wire) = h.srtp(i, payload);
    let c = h.client(i);
    (c.pt, c.ssrc, c.ts_step) = (audio_pt, audio_ssrc, audio_step);
    h.send(i, &wire);
    h.pump();
    seq
}

/// RTCP feedback the publisher received, read back.
fn feedback_at_publisher(h: &Harness) -> Vec<Feedback> {
    h.members[0]
        .client
        .received_rtcp
        .iter()
        .flat_map(|c| compound(c).unwrap().feedback)
        .collect()
}

/// The SSRC viewer `i` receives the video under (its slot's).
fn viewer_ssrc(h: &Harness, i: usize) -> u32 {
    viewer_ssrc_of(h, i, 0)
}

/// The SSRC viewer `i` receives publisher `p`'s video under.
fn viewer_ssrc_of(h: &Harness, i: usize, p: usize) -> u32 {
    h.room_of(i)
        .mapped_ssrc(h.member_id(i), h.member_id(p), VIDEO_SSRC)
        .expect("the viewer gets the video")
}

/// The RTX SSRC an answer groups with `ssrc` (`a=ssrc-group:FID`).
fn rtx_of(answer: &str, ssrc: u32) -> Option<u32> {
    answer.lines().find_map(|l| {
        let rest = l.strip_prefix("a=ssrc-group:FID ")?;
        let mut it = rest.split_whitespace();
        (it.next()?.parse::<u32>().ok()? == ssrc).then(|| it.next()?.parse::<u32>().ok())?
    })
}

/// What viewer `i` received under `ssrc`: (sequence number, payload).
fn received_on(h: &Harness, i: usize, ssrc: u32) -> Vec<(u16, Vec<u8>)> {
    h.members[i]
        .client
        .received
        .iter()
        .filter_map(|p| {
            let r = RtpHeader::parse(p).ok()?;
            (r.ssrc() == ssrc).then(|| (r.sequence(), r.payload().to_vec()))
        })
        .collect()
}

/// Viewer `i` sends an RTCP compound.
fn viewer_rtcp(h: &mut Harness, i: usize, rtcp: &[u8]) {
    let wire = h.client(i).srtcp(rtcp).unwrap();
    h.send(i, &wire);
    h.pump();
}

#[test]
fn keyframe_requests_reach_the_publisher_once_per_interval() {
    let mut h = room(2);
    send_video(&mut h, b"frame-1");
    // Two viewers took the stream: one request to the publisher, the second merged.
    let plis = |h: &Harness| {
        feedback_at_publisher(h)
            .into_iter()
            .filter(|f| {
                matches!(
                    f,
                    Feedback::Pli {
                        media: VIDEO_SSRC,
                        ..
                    }
                )
            })
            .count()
    };
    assert_eq!(plis(&h), 1, "{:?}", feedback_at_publisher(&h));
    let f = h.member_counters(0).unwrap().feedback;
    assert_eq!(
        (f.keyframe_requests_out, f.keyframe_requests_merged),
        (1, 1)
    );

    // A viewer's PLI, in its own numbering, a second later: passed on.
    h.now += Duration::from_secs(1);
    let s1 = viewer_ssrc(&h, 1);
    let mut pli = Vec::new();
    write_empty_rr(&mut pli, 0x77);
    write_pli(&mut pli, 0x77, s1);
    viewer_rtcp(&mut h, 1, &pli);
    assert_eq!(plis(&h), 2);
    // The other viewer asks right after: merged into that one.
    let s2 = viewer_ssrc(&h, 2);
    let mut pli = Vec::new();
    write_empty_rr(&mut pli, 0x78);
    write_pli(&mut pli, 0x78, s2);
    viewer_rtcp(&mut h, 2, &pli);
    assert_eq!(plis(&h), 2);
    assert_eq!(
        h.member_counters(1).unwrap().feedback.keyframe_requests_in,
        1
    );
    assert_eq!(
        h.member_counters(2).unwrap().feedback.keyframe_requests_in,
        1
    );
    let f = h.member_counters(0).unwrap().feedback;
    assert_eq!(
        (f.keyframe_requests_out, f.keyframe_requests_merged),
        (2, 2)
    );
}

#[test]
fn nacks_are_answered_with_rtx_from_the_buffer() {
    let mut h = room(1);
    let mut seqs = Vec::new();
    for k in 0..10u8 {
        seqs.push(send_video(&mut h, &[b'v', k, 1, 2, 3]));
    }
    let ssrc = viewer_ssrc(&h, 1);
    // The viewer's numbering of packets 3 and 4.
    let got = received_on(&h, 1, ssrc);
    assert_eq!(got.len(), 10);
    let before = h.members[1].client.received.len();
    let mut nack = Vec::new();
    write_empty_rr(&mut nack, 0x77);
    write_nack(&mut nack, 0x77, ssrc, &[got[3].0, got[4].0]);
    viewer_rtcp(&mut h, 1, &nack);

    let answer = &h.members[1].client.received[before..];
    assert_eq!(answer.len(), 2, "two retransmissions");
    let rtx_ssrc = rtx_of(&h.members[1].answer_sdp, ssrc);
    let rtx_ssrc = rtx_ssrc.expect("the answer groups an RTX SSRC with the viewer's video SSRC");
    for (k, p) in answer.iter().enumerate() {
        let r = RtpHeader::parse(p).unwrap();
        assert_eq!(
            r.payload_type(),
            97,
            "RTX, the payload type the viewer offered for 96"
        );
        assert_eq!(r.ssrc(), rtx_ssrc);
        let osn = u16::from_be_bytes([r.payload()[0], r.payload()[1]]);
        assert_eq!(
            osn,
            got[3 + k].0,
            "the original sequence number, in the viewer's numbering"
        );
        assert_eq!(&r.payload()[2..], &got[3 + k].1[..], "the original payload");
    }
    let f = h.member_counters(1).unwrap().feedback;
    assert_eq!((f.nacked, f.retransmitted, f.nack_misses), (2, 2, 0));
}

#[test]
fn what_the_gateway_never_got_is_asked_of_the_publisher_and_its_rtx_relayed() {
    let mut h = room(1);
    send_video(&mut h, b"a");
    // The publisher sends packet 2, but the gateway never sees it (lost on the uplink).
    let c = h.client(0);
    let (audio_pt, audio_ssrc) = (c.pt, c.ssrc);
    c.pt = 96;
    c.ssrc = VIDEO_SSRC;
    let lost_seq = c.seq;
    let (lost_plain, _) = c.srtp(b"the lost packet");
    let c = h.client(0);
    (c.pt, c.ssrc) = (audio_pt, audio_ssrc);
    send_video(&mut h, b"c");
    let ssrc = viewer_ssrc(&h, 1);
    let seen: Vec<u16> = h.members[1]
        .client
        .received
        .iter()
        .filter_map(|p| RtpHeader::parse(p).ok())
        .filter(|r| r.ssrc() == ssrc)
        .map(|r| r.sequence())
        .collect();
    assert_eq!(seen.len(), 2);
    let gap = seen[0].wrapping_add(1);
    let mut nack = Vec::new();
    write_empty_rr(&mut nack, 0x77);
    write_nack(&mut nack, 0x77, ssrc, &[gap]);
    viewer_rtcp(&mut h, 1, &nack);
    let asked: Vec<Vec<u16>> = feedback_at_publisher(&h)
        .into_iter()
        .filter_map(|f| match f {
            Feedback::Nack { media, lost, .. } if media == VIDEO_SSRC => Some(lost),
            _ => None,
        })
        .collect();
    assert_eq!(
        asked,
        vec![vec![lost_seq]],
        "asked upstream in the publisher's numbering"
    );
    assert_eq!(h.member_counters(0).unwrap().feedback.nacks_upstream, 1);

    // The publisher answers with RTX (its 2002 stream, payload type 97).
    let c = h.client(0);
    let (audio_pt, audio_ssrc) = (c.pt, c.ssrc);
    c.pt = 97;
    c.ssrc = RTX_SSRC;
    let mut rtx_payload = lost_seq.to_be_bytes().to_vec();
    rtx_payload.extend_from_slice(b"the lost packet");
    let (_, wire) = c.srtp(&rtx_payload);
    let c = h.client(0);
    (c.pt, c.ssrc) = (audio_pt, audio_ssrc);
    let before = h.members[1].client.received.len();
    h.send(0, &wire);
    h.pump();
    let relayed = &h.members[1].client.received[before..];
    assert_eq!(relayed.len(), 1);
    let r = RtpHeader::parse(&relayed[0]).unwrap();
    assert_eq!((r.ssrc(), r.sequence(), r.payload_type()), (ssrc, gap, 96));
    assert_eq!(
        r.payload(),
        RtpHeader::parse(&lost_plain).unwrap().payload()
    );
    assert_eq!(h.member_counters(0).unwrap().feedback.rtx_in, 1);
}

#[test]
fn audio_keeps_no_buffer_and_asks_for_no_keyframes() {
    let mut h = room(1);
    for _ in 0..5 {
        let (_, wire) = h.srtp(0, b"opus frame");
        h.send(0, &wire);
        h.pump();
    }
    assert!(h.members[1].client.received.len() >= 5);
    assert!(feedback_at_publisher(&h).is_empty());
    let f = h.member_counters(0).unwrap().feedback;
    assert_eq!(f, Default::default());
}

/// A viewer's offer with two video sections to receive on (Chrome's, its video section
/// receiving, and one more like it): a slot for each of two publishers' video.
fn two_slot_viewer_offer(c: &SimClient) -> String {
    let offer = viewer_offer(c);
    let at = offer.find("m=video").expect("Chrome's offer has video");
    let second: String = offer[at..]
        .lines()
        .filter(|l| !l.starts_with("a=ssrc") && !l.starts_with("a=msid:"))
        .map(|l| match l {
            "a=mid:1" => "a=mid:2\r\n".to_owned(),
            _ => format!("{l}\r\n"),
        })
        .collect();
    offer.replace("a=group:BUNDLE 0 1", "a=group:BUNDLE 0 1 2") + &second
}

/// Two publishers send video under the same SSRC (each its own Chrome's 2001) to a viewer
/// that receives both, each on a slot of its own: a NACK is answered from the stream of the
/// subscription its SSRC names, never from the other publisher's stream of the same number.
#[test]
fn a_nack_is_answered_from_the_stream_its_ssrc_names() {
    let mut h = Harness::new(Box::new(SimdEngine::new()));
    let (p1, p2) = (
        h.join_connected("two", 1, JoinKind::Whip),
        h.join_connected("two", 2, JoinKind::Whip),
    );
    let c = SimClient::new(3);
    let offer = two_slot_viewer_offer(&c);
    let v = h.join("two", c, JoinKind::Whep, Some(&offer)).unwrap();
    assert!(h.connect(v));
    for k in 0..5u8 {
        send_video_from(&mut h, p1, &[b'A', k, 1, 2, 3]);
        send_video_from(&mut h, p2, &[b'B', k, 4, 5, 6]);
    }
    let (s1, s2) = (viewer_ssrc_of(&h, v, p1), viewer_ssrc_of(&h, v, p2));
    assert_ne!(s1, s2, "a slot each");
    let answer = h.members[v].answer_sdp.clone();
    for (ssrc, tag) in [(s2, b'B'), (s1, b'A')] {
        let got = received_on(&h, v, ssrc);
        assert_eq!(got.len(), 5);
        assert!(got.iter().all(|g| g.1[0] == tag));
        let before = h.members[v].client.received.len();
        let mut nack = Vec::new();
        write_empty_rr(&mut nack, 0x77);
        write_nack(&mut nack, 0x77, ssrc, &[got[2].0]);
        viewer_rtcp(&mut h, v, &nack);
        let answered = &h.members[v].client.received[before..];
        assert_eq!(answered.len(), 1, "one retransmission");
        let r = RtpHeader::parse(&answered[0]).unwrap();
        assert_eq!(r.payload_type(), 97);
        assert_eq!(
            Some(r.ssrc()),
            rtx_of(&answer, ssrc),
            "on that slot's RTX SSRC"
        );
        assert_eq!(&r.payload()[..2], &got[2].0.to_be_bytes());
        assert_eq!(
            &r.payload()[2..],
            &got[2].1[..],
            "the named stream's packet"
        );
    }
    let f = h.member_counters(v).unwrap().feedback;
    assert_eq!((f.nacked, f.retransmitted, f.nack_misses), (2, 2, 0));
}
