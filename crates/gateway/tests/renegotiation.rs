//! Renegotiation in a room, in memory: a member that listens for our offers (its events
//! channel) and lacks a receive section for a newcomer's video gets a new offer of ours (its
//! sections as they were, one more to receive on); its answer makes the section a receive
//! slot, and the newcomer's video reaches it there under the SSRC the offer announced. A member
//! that does not listen gets no offer; an answer with the wrong revision changes nothing; when
//! the newcomer leaves, the next sender takes its section with no new offer.

use secrelay_gateway::shard::{Event, JoinKind};
use secrelay_srtp::SimdEngine;
use secrelay_testkit::gateway::Harness;
use secrelay_testkit::memory::SimClient;
use secrelay_wire::sdp::parse_offer;
use secrelay_wire::RtpHeader;

/// A browser's answer to our offer: its credentials and fingerprint, the DTLS role it has
/// (`active`), each direction mirrored.
fn answer_to(offer: &str, c: &SimClient) -> String {
    let ours = parse_offer(offer).unwrap();
    offer
        .lines()
        .filter(|l| {
            !l.starts_with("a=candidate")
                && !l.starts_with("a=ice-lite")
                && !l.starts_with("a=end-of")
        })
        .map(|l| {
            if l.starts_with("a=ice-ufrag:") {
                format!("a=ice-ufrag:{}", c.ufrag)
            } else if l.starts_with("a=ice-pwd:") {
                format!("a=ice-pwd:{}", c.pwd)
            } else if l.starts_with("a=fingerprint:") {
                format!("a=fingerprint:{}", c.cert.fingerprint())
            } else if l == "a=setup:actpass" {
                "a=setup:active".into()
            } else if l == "a=sendonly" {
                "a=recvonly".into()
            } else if l == "a=recvonly" {
                "a=sendonly".into()
            } else if l.starts_with("a=ssrc") || l.starts_with("a=msid:") {
                String::new()
            } else {
                l.to_owned()
            }
        })
        .filter(|l| !l.is_empty())
        .map(|l| l + "\r\n")
        .collect::<String>()
        .replace(&ours.ice_ufrag, &c.ufrag)
}

#[test]
fn a_listening_member_is_offered_a_section_for_a_newcomers_video_and_gets_it_there() {
    let mut h = Harness::new(Box::new(SimdEngine::new()));
    // A: audio both ways, video it only sends (Chrome's offer): no slot for others' video.
    let a = h.join_connected("r", 1, JoinKind::Join);
    let room = h.members[a].room.clone();
    let a_id = h.members[a].id.clone();
    assert!(h.shard.listen(&room, &a_id));
    h.pump();
    assert!(
        !h.events.iter().any(|e| matches!(e, Event::Offer { .. })),
        "nobody else sends yet: no offer"
    );
    // B joins, sending audio and video (as A does): A lacks a video section.
    let b = h.join_connected("r", 2, JoinKind::Join);
    let (revision, sdp) = h
        .events
        .iter()
        .find_map(|e| match e {
            Event::Offer { id, revision, sdp } if *id == a_id => Some((*revision, sdp.clone())),
            _ => None,
        })
        .expect("an offer for A");
    assert_eq!(revision, 2);
    let offer = parse_offer(&sdp).unwrap();
    let before = parse_offer(&h.members[a].answer_sdp).unwrap();
    assert_eq!(
        offer.media.len(),
        before.media.len() + 1,
        "one section more"
    );
    for (x, y) in before.media.iter().zip(&offer.media) {
        assert_eq!(x.mid, y.mid, "the sections so far, in order");
    }
    let new = offer.media.last().unwrap();
    assert_eq!(new.kind, secrelay_wire::sdp::MediaKind::Video);
    assert_eq!(new.direction, secrelay_wire::sdp::Direction::SendOnly);
    assert!(new.codecs.iter().any(|c| c.is("VP8", 90000)));
    let new_ssrc = new.ssrcs[0];
    assert_eq!(offer.ice_ufrag, before.ice_ufrag, "no ICE restart");
    assert!(
        sdp.contains("o=secrelay ") && sdp.contains(" 2 IN IP4"),
        "o= version 2"
    );
    // B is not listening: no offer for it.
    let b_id = h.members[b].id.clone();
    assert!(!h
        .events
        .iter()
        .any(|e| matches!(e, Event::Offer { id, .. } if *id == b_id)));

    // A wrong revision changes nothing; the right one adds the slot.
    let answer = parse_offer(&answer_to(&sdp, &h.members[a].client)).unwrap();
    assert!(h
        .shard
        .answer_reoffer(&room, &a_id, &answer, Some(7))
        .is_err());
    assert_eq!(
        h.shard
            .answer_reoffer(&room, &a_id, &answer, Some(2))
            .unwrap(),
        1
    );
    assert!(
        h.shard
            .answer_reoffer(&room, &a_id, &answer, Some(2))
            .is_err(),
        "answered"
    );

    // B's video now reaches A under the new section's SSRC.
    let c = h.client(b);
    let (pt, ssrc) = (c.pt, c.ssrc);
    c.pt = 96;
    c.ssrc = 2001;
    let (_, wire) = h.srtp(b, &[0x90, 0x80, 0x80, 1, 0x00, 1, 2, 3]);
    let c = h.client(b);
    (c.pt, c.ssrc) = (pt, ssrc);
    h.send(b, &wire);
    h.pump();
    let got: Vec<u32> = h.members[a]
        .client
        .received
        .iter()
        .filter_map(|p| RtpHeader::parse(p).ok())
        .filter(|r| r.payload_type() == 96)
        .map(|r| r.ssrc())
        .collect();
    assert_eq!(got, vec![new_ssrc]);
    // Nothing more lacking: no further offer.
    let offers = h
        .events
        .iter()
        .filter(|e| matches!(e, Event::Offer { id, .. } if *id == a_id))
        .count();
    assert_eq!(offers, 1);

    // B leaves and C arrives: C's video takes the section B's had (it is reused, no new
    // offer), under the SSRC that section announced.
    let now = h.now;
    assert!(h.shard.leave(now, &room, &b_id));
    h.pump();
    let c = h.join_connected("r", 3, JoinKind::Join);
    let cc = h.client(c);
    let (pt, ssrc) = (cc.pt, cc.ssrc);
    cc.pt = 96;
    cc.ssrc = 3001;
    let (_, wire) = h.srtp(c, &[0x90, 0x80, 0x80, 2, 0x00, 1, 2, 3]);
    let cc = h.client(c);
    (cc.pt, cc.ssrc) = (pt, ssrc);
    h.members[a].client.received.clear();
    h.send(c, &wire);
    h.pump();
    let got: Vec<u32> = h.members[a]
        .client
        .received
        .iter()
        .filter_map(|p| RtpHeader::parse(p).ok())
        .filter(|r| r.payload_type() == 96)
        .map(|r| r.ssrc())
        .collect();
    assert_eq!(got, vec![new_ssrc], "the section B left is C's now");
    let offers = h
        .events
        .iter()
        .filter(|e| matches!(e, Event::Offer { id, .. } if *id == a_id))
        .count();
    assert_eq!(offers, 1, "no new offer: a free section was there");
}

#[test]
fn a_member_that_listens_before_it_connects_is_offered_what_it_lacks_once_connected() {
    let mut h = Harness::new(Box::new(SimdEngine::new()));
    let a = h.join_connected("r", 1, JoinKind::Join);
    let room = h.members[a].room.clone();
    let a_id = h.members[a].id.clone();
    assert!(h.shard.listen(&room, &a_id));
    // B opens its events channel as a browser does, right after its offer is answered and
    // before DTLS is done: no offer can be made to it yet.
    let b = h
        .join("r", SimClient::new(2), JoinKind::Join, None)
        .expect("the offer is answered");
    let b_id = h.members[b].id.clone();
    assert!(h.shard.listen(&room, &b_id));
    h.pump();
    let offers_to_b = |h: &Harness| {
        h.events
            .iter()
            .filter(|e| matches!(e, Event::Offer { id, .. } if *id == b_id))
            .count()
    };
    assert_eq!(offers_to_b(&h), 0, "not connected yet");
    // Once connected, B is offered the section for A's video it lacks.
    assert!(h.connect(b));
    h.pump();
    assert_eq!(offers_to_b(&h), 1);
    let sdp = h
        .events
        .iter()
        .find_map(|e| match e {
            Event::Offer { id, sdp, .. } if *id == b_id => Some(sdp.clone()),
            _ => None,
        })
        .unwrap();
    let offer = parse_offer(&sdp).unwrap();
    let before = parse_offer(&h.members[b].answer_sdp).unwrap();
    assert_eq!(offer.media.len(), before.media.len() + 1);
}
