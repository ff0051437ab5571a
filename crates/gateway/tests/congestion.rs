//! Transport-wide congestion control through a room, in memory on simulated time: members whose
//! offers agree on transport-cc (Chrome's, with the extension on both sections).
//! - what a publisher sends is reported back to it every 100 ms: which transport-wide sequence
//!   numbers arrived and when (a lost one as lost), so its encoder can follow its uplink;
//! - what a viewer is sent carries its own header extensions (its ids: send time, its own
//!   transport-wide numbers in sending order, its section's mid), and its feedback about them
//!   drives an estimate of what can be sent it, shown in the API.

use std::time::Duration;

use secrelay_gateway::shard::JoinKind;
use secrelay_srtp::SimdEngine;
use secrelay_testkit::gateway::Harness;
use secrelay_testkit::memory::SimClient;
use secrelay_wire::rtcp::{compound, Feedback};
use secrelay_wire::rtp::write_extension;
use secrelay_wire::twcc::{parse_feedback, write_feedback, Arrival};
use secrelay_wire::RtpHeader;

const TWCC: &str = "http://www.ietf.org/id/draft-holmer-rmcat-transport-wide-cc-extensions-01";
const MID: &str = "urn:ietf:params:rtp-hdrext:sdes:mid";

/// Chrome's offer with transport-cc (id 3) and mid (id 4) on both sections, receiving video
/// when `viewer`.
fn offer(c: &SimClient, viewer: bool) -> String {
    let mut o = c
        .offer()
        .replace(
            "a=extmap:2 http://www.webrtc.org/experiments/rtp-hdrext/abs-send-time\r\n",
            &format!(
                "a=extmap:2 http://www.webrtc.org/experiments/rtp-hdrext/abs-send-time\r\na=extmap:3 {TWCC}\r\na=extmap:4 {MID}\r\n"
            ),
        )
        .replace(
            "a=rtcp-fb:96 nack pli\r\n",
            "a=rtcp-fb:96 nack pli\r\na=rtcp-fb:96 transport-cc\r\n",
        )
        .replace(
            "a=rtcp-rsize\r\n",
            &format!("a=rtcp-rsize\r\na=extmap:3 {TWCC}\r\na=extmap:4 {MID}\r\n"),
        );
    if viewer {
        o = o.replace("a=sendonly", "a=recvonly");
    }
    o
}

/// Member `i` sends an audio packet carrying transport-wide sequence number `twcc` (id 3).
fn send_with_twcc(h: &mut Harness, i: usize, twcc: u16, payload: &[u8]) {
    let c = h.client(i);
    let mut p = c.rtp(payload);
    let body = p.split_off(12);
    p[0] |= 0x10;
    write_extension(&mut p, &[(3, &twcc.to_be_bytes()[..])]);
    p.extend_from_slice(&body);
    let len = p.len();
    p.resize(len + 32, 0);
    let n = c.tx.as_mut().unwrap().protect_rtp(&mut p, len).unwrap();
    p.truncate(n);
    h.send(i, &p);
    h.pump();
}

fn room() -> Harness {
    let mut h = Harness::new(Box::new(SimdEngine::new()));
    for (n, kind, viewer) in [(1, JoinKind::Whip, false), (2, JoinKind::Whep, true)] {
        let c = SimClient::new(n);
        let o = offer(&c, viewer);
        let i = h.join("cc", c, kind, Some(&o)).unwrap();
        assert!(h.connect(i));
    }
    h
}

#[test]
fn a_publisher_is_told_what_arrived_and_when() {
    let mut h = room();
    assert!(h.members[0]
        .answer_sdp
        .contains(&format!("a=extmap:3 {TWCC}")));
    assert!(h.members[0]
        .answer_sdp
        .contains("a=rtcp-fb:111 transport-cc"));
    for k in 0..10u16 {
        if k != 5 {
            send_with_twcc(&mut h, 0, 100 + k, b"opus");
        }
        h.now += Duration::from_millis(5);
    }
    let t = h.now + Duration::from_millis(100);
    h.advance_to(t);
    let fb: Vec<Vec<u8>> = h.members[0]
        .client
        .received_rtcp
        .iter()
        .flat_map(|c| compound(c).unwrap().feedback)
        .filter_map(|f| match f {
            Feedback::TransportCc { fci, .. } => Some(fci),
            _ => None,
        })
        .collect();
    assert_eq!(fb.len(), 1, "one feedback after 100 ms");
    let (_, arrivals) = parse_feedback(&fb[0]).unwrap();
    let seqs: Vec<u16> = arrivals.iter().map(|a| a.seq).collect();
    assert_eq!(seqs, (100..110).collect::<Vec<u16>>());
    assert!(arrivals[5].at_us.is_none(), "105 never came");
    let got: Vec<i64> = arrivals.iter().filter_map(|a| a.at_us).collect();
    for w in got.windows(2) {
        let d = w[1] - w[0];
        assert!(
            d == 5_000 || d == 10_000,
            "arrivals 5 ms apart (10 across the loss): {d}"
        );
    }
}

#[test]
fn a_viewer_gets_its_own_extensions_and_its_feedback_drives_an_estimate() {
    let mut h = room();
    let view = &h.members[1].answer_sdp;
    assert!(view.contains(&format!("a=extmap:3 {TWCC}")), "{view}");
    for k in 0..20u16 {
        send_with_twcc(&mut h, 0, 7000 + k, b"opus frame");
        h.now += Duration::from_millis(10);
    }
    // The viewer's copies: its transport-wide numbers, one by one in sending order, and its
    // audio section's mid.
    let mut twcc = Vec::new();
    for p in &h.members[1].client.received {
        let r = RtpHeader::parse(p).unwrap();
        let ext = r.extension_header().expect("the viewer's extensions");
        let els: Vec<(u8, Vec<u8>)> = ext.elements().map(|(i, d, _)| (i, d.to_vec())).collect();
        let seq = els.iter().find(|(i, _)| *i == 3).expect("transport-cc");
        twcc.push(u16::from_be_bytes([seq.1[0], seq.1[1]]));
        let mid = els.iter().find(|(i, _)| *i == 4).expect("mid");
        assert_eq!(mid.1, b"0");
        assert!(
            els.iter().any(|(i, d)| *i == 2 && d.len() == 3),
            "abs-send-time"
        );
    }
    assert_eq!(twcc.len(), 20);
    assert!(
        twcc.windows(2).all(|w| w[1] == w[0].wrapping_add(1)),
        "{twcc:?}"
    );
    // The viewer reports them all arrived, 10 ms apart.
    let arrivals: Vec<Arrival> = twcc
        .iter()
        .enumerate()
        .map(|(k, s)| Arrival {
            seq: *s,
            at_us: Some(1_000_000 + 10_000 * k as i64),
        })
        .collect();
    let mut fb = Vec::new();
    secrelay_wire::rtcp::write_empty_rr(&mut fb, 0x55);
    assert_eq!(write_feedback(&mut fb, 0x55, 1, 0, &arrivals), 20);
    let wire = h.client(1).srtcp(&fb).unwrap();
    h.send(1, &wire);
    h.pump();
    let rooms = h.shard.snapshot(h.now, Some("cc"));
    let viewer = rooms[0]
        .participants
        .iter()
        .find(|p| p.id == h.members[1].id)
        .unwrap();
    let bw = viewer.bandwidth.expect("the viewer agreed on transport-cc");
    assert_eq!(bw.feedbacks, 1);
    assert!(bw.estimate_bps >= 30_000, "{bw:?}");
    assert_eq!(bw.loss_pct, 0.0);
}

/// A probe lifts a viewer to a higher simulcast layer than the estimate allowed (it grows only
/// to 1.5× what the viewer receives, so a viewer sent the low layer would stay there): RTX
/// copies of what it is sent, on a clean path, raise the estimate to what they were
/// delivered at, and the viewer is switched at the next layer's keyframe.
#[test]
fn a_probe_lifts_a_viewer_on_a_clean_path_to_a_higher_simulcast_layer() {
    const RID: &str = "urn:ietf:params:rtp-hdrext:sdes:rtp-stream-id";
    // q ~190 kbit/s, h ~580 kbit/s, f ~900 kbit/s: one packet of each a round, 100 rounds/s.
    const LAYERS: [(&str, u32, usize); 3] = [("q", 3001, 200), ("h", 3002, 700), ("f", 3003, 1100)];
    let mut h = Harness::new(Box::new(SimdEngine::new()));
    let p = SimClient::new(1);
    let o = p.offer().replace(
        "a=ssrc-group:FID 2001 2002\r\na=ssrc:2001 cname:abc\r\na=ssrc:2002 cname:abc\r\n",
        &format!("a=extmap:10 {RID}\r\na=rid:q send\r\na=rid:h send\r\na=rid:f send\r\na=simulcast:send q;h;f\r\n"),
    );
    let i = h.join("probe", p, JoinKind::Whip, Some(&o)).unwrap();
    assert!(h.connect(i));
    let v = SimClient::new(2);
    let o = offer(&v, true);
    let viewer = h.join("probe", v, JoinKind::Whep, Some(&o)).unwrap();
    assert!(h.connect(viewer));
    let answer = h.members[viewer].answer_sdp.clone();
    let rtx_pt: u8 = answer
        .lines()
        .find_map(|l| {
            l.strip_prefix("a=rtpmap:")?
                .strip_suffix(" rtx/90000")?
                .parse()
                .ok()
        })
        .expect("RTX agreed");

    let mut seq = [0u16; 3];
    let mut reported = 0usize;
    let mut fb_count = 0u8;
    // When each packet the viewer got arrived (µs): the round it was sent in, 20 ms later.
    let mut stamps: Vec<i64> = Vec::new();
    for round in 0..400u32 {
        // A keyframe on every layer every second.
        let key = round % 100 == 0;
        for (k, (rid, ssrc, size)) in LAYERS.iter().enumerate() {
            let c = h.client(0);
            let mut pkt = vec![0x90, 96];
            pkt.extend_from_slice(&seq[k].to_be_bytes());
            pkt.extend_from_slice(&(round * 900).to_be_bytes());
            pkt.extend_from_slice(&ssrc.to_be_bytes());
            write_extension(&mut pkt, &[(10, rid.as_bytes())]);
            let mut vp8 = vec![
                0x90,
                0x80,
                0x80,
                (round & 0xff) as u8,
                if key { 0x00 } else { 0x01 },
            ];
            vp8.resize(*size, k as u8 + 1);
            pkt.extend_from_slice(&vp8);
            seq[k] = seq[k].wrapping_add(1);
            let len = pkt.len();
            pkt.resize(len + 32, 0);
            let n = c.tx.as_mut().unwrap().protect_rtp(&mut pkt, len).unwrap();
            pkt.truncate(n);
            h.send(0, &pkt);
        }
        h.pump();
        let n = h.members[viewer].client.received.len();
        stamps.resize(n, i64::from(round) * 10_000 + 20_000);
        h.now += Duration::from_millis(10);
        // Every 100 ms the viewer reports all it got as arrived 20 ms after now (a clean path).
        if round % 10 == 9 {
            let got = &h.members[viewer].client.received;
            let arrivals: Vec<Arrival> = got[reported..]
                .iter()
                .zip(&stamps[reported..])
                .filter_map(|(p, at)| {
                    let r = RtpHeader::parse(p).ok()?;
                    let ext = r.extension_header()?;
                    let (_, d, _) = ext.elements().find(|(i, _, _)| *i == 3)?;
                    Some(Arrival {
                        seq: u16::from_be_bytes([d[0], d[1]]),
                        at_us: Some(*at),
                    })
                })
                .collect();
            reported = got.len();
            if !arrivals.is_empty() {
                let mut fb = Vec::new();
                secrelay_wire::rtcp::write_empty_rr(&mut fb, 0x55);
                write_feedback(&mut fb, 0x55, 1, fb_count, &arrivals);
                fb_count = fb_count.wrapping_add(1);
                let wire = h.client(viewer).srtcp(&fb).unwrap();
                h.send(viewer, &wire);
                h.pump();
            }
        }
    }
    let received = &h.members[viewer].client.received;
    let rtx = received
        .iter()
        .filter_map(|p| RtpHeader::parse(p).ok())
        .filter(|r| r.payload_type() == rtx_pt)
        .count();
    assert!(rtx > 0, "probes: RTX copies of what the viewer was sent");
    let video: Vec<usize> = received
        .iter()
        .filter_map(|p| RtpHeader::parse(p).ok())
        .filter(|r| r.payload_type() == 96)
        .map(|r| r.payload().len())
        .collect();
    assert_eq!(
        video.first(),
        Some(&200),
        "q first: the estimate starts at 300 kbit/s"
    );
    assert!(
        video.iter().rev().take(50).all(|s| *s > 200),
        "a higher layer at the end: {:?}",
        &video[video.len() - 50..]
    );
    let rooms = h.shard.snapshot(h.now, Some("probe"));
    let me = rooms[0]
        .participants
        .iter()
        .find(|p| p.id == h.members[viewer].id)
        .unwrap();
    let bw = me.bandwidth.expect("transport-cc agreed");
    assert!(bw.probes >= 1 && bw.probes_delivered >= 1, "{bw:?}");
    assert!(bw.estimate_bps > 660_000, "{bw:?}");
    assert!(
        me.feedback.probe_packets as usize >= rtx,
        "{:?}",
        me.feedback
    );
    assert!(me.layers_received[0].switches >= 1);
}
