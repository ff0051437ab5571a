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
