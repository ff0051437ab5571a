//! A WebRTC member's peer offers again in its session (what a browser's re-INVITE brings
//! through the ng protocol), in memory: the same offer gets the same answer; new ICE
//! credentials restart ICE (new ones of ours, checks with the old ones refused, the SRTP keys
//! kept: media flows both ways after it); a hold (`sendonly`) stops what the member receives
//! and takes it back when it ends; another certificate (a DTLS restart) and a section left out
//! are refused with the leg unchanged.

use secrelay_gateway::leg::WebRtcError;
use secrelay_gateway::shard::{JoinError, JoinKind};
use secrelay_testkit::browser::Direction;
use secrelay_testkit::gateway::Harness;
use secrelay_testkit::memory::SimClient;
use secrelay_wire::sdp::{parse_offer, Offer};

/// Client `n`, sending PCMU (payload type 0, 160 samples a packet).
fn pcmu_client(n: u8) -> SimClient {
    let mut c = SimClient::new(n);
    c.browser.pt = 0;
    c.browser.ts_step = 160;
    c
}

/// A client's one-section PCMU offer, `direction`.
fn offer(c: &SimClient, direction: Direction) -> String {
    c.audio_offer(direction, None)
}

/// How many RTP packets member `to` got of one packet member `from` sent now.
fn relayed(h: &mut Harness, from: usize, to: usize) -> usize {
    let before = h.members[to].client.received.len();
    let (_, wire) = h.srtp(from, &[0x5a; 160]);
    h.send(from, &wire);
    h.pump();
    h.members[to].client.received.len() - before
}

fn update(h: &mut Harness, i: usize, sdp: &str) -> Result<String, JoinError> {
    let (room, id) = (h.members[i].room.clone(), h.members[i].id.clone());
    let now = h.now;
    h.shard
        .update_webrtc(now, &room, &id, &parse_offer(sdp).unwrap())
}

/// Whether a nominating check from member `i` with `answer`'s credentials of ours is answered
/// with success.
fn check_passes(h: &mut Harness, i: usize, answer: &Offer) -> bool {
    let before = h.members[i].client.stun_ok;
    let req = h.members[i].client.binding_request(answer, true);
    h.send(i, &req);
    h.pump();
    h.members[i].client.stun_ok > before
}

#[test]
fn a_webrtc_peers_new_offer_restarts_ice_holds_and_keeps_its_dtls_association() {
    let mut h = Harness::simd();
    let c1 = pcmu_client(1);
    let first = offer(&c1, Direction::SendRecv);
    let a = h.join("r", c1, JoinKind::Join, Some(&first)).unwrap();
    assert!(h.connect(a));
    let c2 = pcmu_client(2);
    let o2 = offer(&c2, Direction::SendRecv);
    let b = h.join("r", c2, JoinKind::Join, Some(&o2)).unwrap();
    assert!(h.connect(b));
    assert_eq!(relayed(&mut h, a, b), 1);
    assert_eq!(relayed(&mut h, b, a), 1);

    // The same offer again (a session refresh): the same answer, the same version.
    let answer0 = h.members[a].answer_sdp.clone();
    assert_eq!(update(&mut h, a, &first).unwrap(), answer0);

    // New credentials: ICE restarts; our new credentials, one o= version on, the same
    // fingerprint and DTLS role.
    h.members[a].client.browser.ufrag = "rstrt01a".into();
    h.members[a].client.browser.pwd = "restarted-password-0123456".into();
    let restart = offer(&h.members[a].client, Direction::SendRecv);
    let sdp = update(&mut h, a, &restart).unwrap();
    let (old, new) = (h.members[a].answer.clone(), parse_offer(&sdp).unwrap());
    assert_ne!(new.ice_ufrag, old.ice_ufrag);
    assert_ne!(new.ice_pwd, old.ice_pwd);
    assert_eq!(new.fingerprint, old.fingerprint);
    assert_eq!(new.setup, old.setup);
    assert!(sdp.contains(" 2 IN IP4"), "o= version 2: {sdp}");
    assert!(
        !check_passes(&mut h, a, &old),
        "a check with our old credentials"
    );
    assert!(check_passes(&mut h, a, &new), "a check with our new ones");
    h.members[a].answer = new;
    // No new handshake: the keys stay, and media flows both ways.
    assert_eq!(relayed(&mut h, a, b), 1);
    assert_eq!(relayed(&mut h, b, a), 1);

    // Hold: `a` only sends; it hears nothing until it offers sendrecv again.
    let hold = offer(&h.members[a].client, Direction::SendOnly);
    let sdp = update(&mut h, a, &hold).unwrap();
    assert!(sdp.contains("a=recvonly"), "{sdp}");
    assert!(sdp.contains(" 3 IN IP4"), "o= version 3: {sdp}");
    assert_eq!(relayed(&mut h, b, a), 0, "held");
    assert_eq!(relayed(&mut h, a, b), 1, "a still sends");
    let resume = offer(&h.members[a].client, Direction::SendRecv);
    let sdp = update(&mut h, a, &resume).unwrap();
    assert!(sdp.contains("a=sendrecv"), "{sdp}");
    assert_eq!(relayed(&mut h, b, a), 1, "off hold");

    // Another certificate: a DTLS restart, refused; the leg is unchanged.
    let other = SimClient::new(9);
    let foreign = h.members[a]
        .client
        .audio_offer(Direction::SendRecv, Some(&other.cert.fingerprint()));
    assert_eq!(
        update(&mut h, a, &foreign).unwrap_err(),
        JoinError::WebRtc(WebRtcError::DtlsRestart)
    );
    // A section left out (its mid changed): refused.
    let moved = resume.replace("a=mid:0", "a=mid:7");
    assert!(matches!(
        update(&mut h, a, &moved).unwrap_err(),
        JoinError::WebRtc(WebRtcError::SectionMissing(m)) if m == "0"
    ));
    assert_eq!(relayed(&mut h, a, b), 1);
    assert_eq!(relayed(&mut h, b, a), 1);
}
