//! A WebRTC leg that makes the offer (a SIP proxy's call towards a browser), in memory on
//! simulated time: the offer is ICE-lite with `a=setup:actpass`; the peer's answer decides
//! our DTLS role (its `active` makes us the server, its `passive` the client), the codecs and
//! the directions; checks and a ClientHello that arrive before the answer are answered and
//! kept; answers that cannot be taken are refused with the reason and change nothing.

use std::time::{Duration, Instant};

use secrelay_dtls::Role;
use secrelay_gateway::leg::{CloseReason, LegEvent, WebRtcError, WebRtcLeg, WebRtcOfferSection};
use secrelay_testkit::browser::Direction as OfferDirection;
use secrelay_testkit::gateway::{connect_leg, drain_leg, gateway_cert, to_leg, webrtc_config};
use secrelay_testkit::memory::SimClient;
use secrelay_wire::sdp::{parse_offer, Codec, Direction, MediaKind, Setup};

fn pcmu_and_opus() -> Vec<Codec> {
    vec![
        Codec {
            pt: 0,
            name: "PCMU".into(),
            clock_rate: 8000,
            channels: None,
            fmtp: None,
        },
        Codec {
            pt: 111,
            name: "opus".into(),
            clock_rate: 48_000,
            channels: Some(2),
            fmtp: Some("minptime=10;useinbandfec=1".into()),
        },
        // Not relayed by the gateway: left out of the offer.
        Codec {
            pt: 18,
            name: "G729".into(),
            clock_rate: 8000,
            channels: None,
            fmtp: None,
        },
    ]
}

fn offer_leg(now: Instant) -> WebRtcLeg {
    WebRtcLeg::new_offer(
        &[WebRtcOfferSection {
            kind: MediaKind::Audio,
            direction: Direction::SendRecv,
            codecs: pcmu_and_opus(),
        }],
        gateway_cert(),
        webrtc_config(),
        now,
    )
    .expect("an audio offer can be made")
}

#[test]
fn the_offer_is_ice_lite_actpass_and_an_active_answer_makes_us_the_dtls_server() {
    let start = Instant::now();
    let mut leg = offer_leg(start);
    let sdp = leg.offer_sdp().to_owned();
    for line in [
        "a=ice-lite",
        "a=setup:actpass",
        "m=audio 3478 UDP/TLS/RTP/SAVPF 0 111\r\n",
        "a=rtpmap:0 PCMU/8000",
        "a=rtpmap:111 opus/48000/2",
        "a=rtcp-mux",
        "a=candidate:1 1 udp",
        "a=sendrecv",
    ] {
        assert!(sdp.contains(line), "{line:?} in {sdp}");
    }
    assert!(!sdp.contains("G729"), "{sdp}");
    assert!(leg.awaiting_answer());

    let mut client = SimClient::new(1);
    let answer = client
        .answer_offer(parse_offer(&sdp).unwrap(), OfferDirection::SendRecv)
        .unwrap();
    assert!(answer.contains("a=setup:active"), "{answer}");
    leg.accept_answer(&parse_offer(&answer).unwrap(), start)
        .unwrap();
    assert!(!leg.awaiting_answer());
    assert_eq!(leg.dtls_role(), Role::Server);
    // The browser took PCMU only: the section carries PCMU, both ways.
    let m = &leg.media()[0];
    assert_eq!(m.codecs.len(), 1, "{m:?}");
    assert!(m.peer_sends && m.peer_receives);

    let c = connect_leg(&mut client, &mut leg, start);
    assert!(c.connected().is_some(), "{:?}", c.events);
    assert!(client.keys.is_some());
    assert!(leg.is_connected());
}

#[test]
fn checks_and_a_client_hello_before_the_answer_are_answered_and_kept() {
    let start = Instant::now();
    let mut leg = offer_leg(start);
    let offer = parse_offer(leg.offer_sdp()).unwrap();
    let mut client = SimClient::new(2);
    let answer = client
        .answer_offer(offer.clone(), OfferDirection::SendRecv)
        .unwrap();

    // The browser has our offer and its own answer; the proxy has not brought the answer to
    // us yet. Its check (USERNAME ours:theirs, signed with our password) is answered and
    // nominates; its ClientHello is kept.
    let req = client.binding_request(&offer, true);
    assert!(to_leg(&mut leg, start, client.addr, &req));
    let (tx, events, _) = drain_leg(&mut leg);
    assert_eq!(tx.len(), 1, "the check is answered");
    client.receive(start, &tx[0].1);
    assert_eq!(client.stun_ok, 1);
    assert!(
        events.contains(&LegEvent::IceSelected(client.addr)),
        "{events:?}"
    );
    client.start_dtls(&offer, start);
    let hello = client.drain_dtls();
    assert!(!hello.is_empty());
    for d in &hello {
        to_leg(&mut leg, start, client.addr, d);
    }
    let (tx, _, _) = drain_leg(&mut leg);
    assert!(
        tx.is_empty(),
        "nothing said to DTLS before the answer names its fingerprint"
    );

    // The answer arrives: the kept ClientHello is handed to the endpoint at once.
    let now = start + Duration::from_millis(300);
    leg.accept_answer(&parse_offer(&answer).unwrap(), now)
        .unwrap();
    let (tx, _, _) = drain_leg(&mut leg);
    assert!(
        !tx.is_empty(),
        "the server's flight answers the kept ClientHello"
    );
    // And the handshake completes from there.
    exchange(&mut client, &mut leg, tx, now);
    assert_eq!(leg.counters().drops.total(), 0);
}

/// Carries datagrams between the client and the leg (starting with `to_client`) until both
/// have their keys.
fn exchange(
    client: &mut SimClient,
    leg: &mut WebRtcLeg,
    mut to_client: Vec<(std::net::SocketAddr, Vec<u8>)>,
    mut now: Instant,
) {
    for _ in 0..20 {
        for (_, d) in to_client.drain(..) {
            client.receive(now, &d);
        }
        for d in client.drain_dtls() {
            to_leg(leg, now, client.addr, &d);
        }
        let (tx, _, _) = drain_leg(leg);
        to_client = tx;
        now += Duration::from_millis(5);
        if leg.is_connected() && client.keys.is_some() {
            return;
        }
    }
    panic!(
        "no handshake: leg connected {}, client keys {}",
        leg.is_connected(),
        client.keys.is_some()
    );
}

#[test]
fn a_passive_answer_makes_us_the_dtls_client() {
    let start = Instant::now();
    let mut leg = offer_leg(start);
    let mut offer = parse_offer(leg.offer_sdp()).unwrap();
    let mut client = SimClient::new(3);
    let answer = client
        .answer_offer(offer.clone(), OfferDirection::SendRecv)
        .unwrap()
        .replace("a=setup:active", "a=setup:passive");
    leg.accept_answer(&parse_offer(&answer).unwrap(), start)
        .unwrap();
    assert_eq!(leg.dtls_role(), Role::Client);
    // The browser is the server: from its side, the gateway is the active one. Its check
    // nominates, and the leg's ClientHello leaves.
    offer.setup = Setup::Active;
    let req = client.binding_request(&offer, true);
    to_leg(&mut leg, start, client.addr, &req);
    client.start_dtls(&offer, start);
    let (tx, _, _) = drain_leg(&mut leg);
    assert!(
        tx.len() >= 2,
        "a check answered and a ClientHello: {}",
        tx.len()
    );
    exchange(&mut client, &mut leg, tx, start);
}

#[test]
fn answers_that_cannot_be_taken_are_refused_and_change_nothing() {
    let start = Instant::now();
    let mut leg = offer_leg(start);
    let offer = parse_offer(leg.offer_sdp()).unwrap();
    let mut client = SimClient::new(4);
    let good = client
        .answer_offer(offer, OfferDirection::SendRecv)
        .unwrap();

    let actpass = good.replace("a=setup:active", "a=setup:actpass");
    assert_eq!(
        leg.accept_answer(&parse_offer(&actpass).unwrap(), start),
        Err(WebRtcError::AnswerSetupActpass)
    );
    // The browser "took" a codec we never offered.
    let foreign = good
        .replace("UDP/TLS/RTP/SAVPF 0", "UDP/TLS/RTP/SAVPF 8")
        .replace("a=rtpmap:0 PCMU/8000", "a=rtpmap:8 PCMA/8000");
    assert_eq!(
        leg.accept_answer(&parse_offer(&foreign).unwrap(), start),
        Err(WebRtcError::NoCommonCodec)
    );
    assert!(leg.awaiting_answer());
    leg.accept_answer(&parse_offer(&good).unwrap(), start)
        .unwrap();
    assert_eq!(
        leg.accept_answer(&parse_offer(&good).unwrap(), start),
        Err(WebRtcError::NotAwaitingAnswer)
    );
}

#[test]
fn an_offer_nobody_answers_ends_after_the_answer_timeout_not_the_consent_timeout() {
    let start = Instant::now();
    let mut leg = offer_leg(start);
    let config = webrtc_config();
    let consent = start + config.ice.consent_timeout + Duration::from_secs(1);
    leg.handle_timeout(consent);
    assert!(
        leg.closed().is_none(),
        "a callee's phone may ring longer than 30 s"
    );
    let gone = start + config.ice.answer_timeout + Duration::from_secs(1);
    leg.handle_timeout(gone);
    assert_eq!(leg.closed(), Some(CloseReason::ConsentExpired));
}
