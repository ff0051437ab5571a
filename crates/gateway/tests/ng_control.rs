//! A SIP proxy drives `secrelay serve --ng` with rtpengine's ng protocol over real sockets:
//! a plain-RTP caller and an SDES-SRTP callee (turned so by `transport-protocol`) get their
//! SDP rewritten to the gateway's ports, media flows both ways (decrypted and encrypted again
//! at the gateway), `query`, `list` and `statistics` describe the call, `delete` ends it and
//! gives its ports back; retransmitted requests get the same reply; bad requests get an error
//! reply with the reason, are counted, and break nothing.

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use secrelay_gateway::server::{ServeConfig, Server};
use secrelay_srtp::Profile;
use secrelay_testkit::ice::{check, our_ice, with_ice};
use secrelay_testkit::ng::{serve_on_loopback, Ng};
use secrelay_testkit::phone::SocketPhone;
use secrelay_wire::bencode::{ng_encode, Bencode};
use secrelay_wire::RtpHeader;

const LOCAL: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

fn s(v: &str) -> Bencode {
    Bencode::str(v)
}

fn start() -> (Server, Ng) {
    start_with(ServeConfig {
        rtp_ports: "48000-48999".into(),
        ..ServeConfig::default()
    })
}

/// secrelay with `config` (its HTTP, media and ng sockets on loopback, two workers) and an
/// ng client of it.
fn start_with(config: ServeConfig) -> (Server, Ng) {
    serve_on_loopback(ServeConfig {
        workers: 2,
        ..config
    })
}

fn text(b: &Bencode, key: &str) -> Option<String> {
    b.get(key).and_then(Bencode::as_text)
}

fn heard(p: &SocketPhone, fill: u8) -> usize {
    p.heard(fill)
}

/// The caller sends 60 packets of `up`, the callee 60 of `down`, until each heard 50 of the
/// other's.
fn talk(caller: &mut SocketPhone, callee: &mut SocketPhone, up: u8, down: u8) {
    let end = Instant::now() + Duration::from_secs(20);
    let mut sent = 0;
    loop {
        if sent < 60 {
            caller.send(&[up; 160]).unwrap();
            callee.send(&[down; 160]).unwrap();
            sent += 1;
        }
        std::thread::sleep(Duration::from_millis(10));
        caller.read();
        callee.read();
        if heard(caller, down) >= 50 && heard(callee, up) >= 50 {
            return;
        }
        assert!(
            Instant::now() < end,
            "caller heard {} of {down:#x}, callee heard {} of {up:#x}",
            heard(caller, down),
            heard(callee, up)
        );
    }
}

/// An ng `offer` or `answer` for call `c` from `from` (to `to`, when given) with `sdp`.
fn offer_answer(
    command: &str,
    c: &str,
    from: &str,
    to: Option<&str>,
    sdp: &str,
) -> Vec<(String, Bencode)> {
    let mut d = vec![
        ("command".into(), s(command)),
        ("call-id".into(), s(c)),
        ("from-tag".into(), s(from)),
        ("sdp".into(), s(sdp)),
    ];
    if let Some(t) = to {
        d.push(("to-tag".into(), s(t)));
    }
    d
}

/// The SDP of ng's reply to an `offer` or `answer` ([`offer_answer`]), which must be `ok`.
fn sdp_of(ng: &mut Ng, command: &str, c: &str, from: &str, to: Option<&str>, sdp: &str) -> String {
    ng.call(offer_answer(command, c, from, to, sdp)).unwrap()["sdp"].clone()
}

/// The `o=` line of an SDP.
fn origin(sdp: &str) -> &str {
    sdp.lines().find(|l| l.starts_with("o=")).unwrap()
}

#[test]
fn re_invites_from_either_side_move_media_and_keys_through_the_call() {
    let (server, mut ng) = start();
    let mut caller = SocketPhone::bind(LOCAL, None, 0xca11).unwrap();
    let mut callee = SocketPhone::bind(LOCAL, Some(Profile::AesCm128HmacSha1_80), 0xca1e).unwrap();
    let mut offer = offer_answer("offer", "c2@proxy", "alice", None, &caller.phone.offer());
    offer.push(("transport-protocol".into(), s("RTP/SAVP")));
    let to_callee = ng.call(offer).unwrap()["sdp"].clone();
    let callee_answer = callee.phone.answer_offer(&to_callee).unwrap();
    let to_caller = sdp_of(
        &mut ng,
        "answer",
        "c2@proxy",
        "alice",
        Some("bob"),
        &callee_answer,
    );
    caller.phone.accept_answer(&to_caller).unwrap();
    talk(&mut caller, &mut callee, 0xc1, 0xb0);

    // The caller moves to a new port (a re-INVITE); the callee answers with a new key.
    caller.socket = std::net::UdpSocket::bind((LOCAL, 0)).unwrap();
    caller.socket.set_nonblocking(true).unwrap();
    caller.phone.addr = caller.socket.local_addr().unwrap();
    let caller_reoffer = caller.phone.offer();
    let reoffer = sdp_of(&mut ng, "offer", "c2@proxy", "alice", None, &caller_reoffer);
    // The caller's origin passes through, as rtpengine passes it.
    assert_eq!(origin(&reoffer), origin(&caller_reoffer), "{reoffer}");
    callee.phone.rekey();
    let callee_answer = callee.phone.answer_offer(&reoffer).unwrap();
    let to_caller = sdp_of(
        &mut ng,
        "answer",
        "c2@proxy",
        "alice",
        Some("bob"),
        &callee_answer,
    );
    assert_eq!(origin(&to_caller), origin(&callee_answer), "{to_caller}");
    caller.phone.accept_answer(&to_caller).unwrap();
    talk(&mut caller, &mut callee, 0xc2, 0xb1);

    // Now the callee re-INVITEs, with another new key; the caller (plain) gets our new offer.
    callee.phone.rekey();
    let to_caller = sdp_of(
        &mut ng,
        "offer",
        "c2@proxy",
        "bob",
        Some("alice"),
        &callee.phone.offer(),
    );
    assert!(
        to_caller.contains("RTP/AVP") && !to_caller.contains("a=crypto"),
        "{to_caller}"
    );
    let caller_answer = caller.phone.answer_offer(&to_caller).unwrap();
    let to_callee = sdp_of(
        &mut ng,
        "answer",
        "c2@proxy",
        "bob",
        Some("alice"),
        &caller_answer,
    );
    callee.phone.accept_answer(&to_callee).unwrap();
    talk(&mut caller, &mut callee, 0xc3, 0xb2);

    // A re-INVITE the offering side's leg refuses (no crypto line it can use) leaves the call
    // as it was: the other side's next re-INVITE is an offer, not an answer to ours.
    let unusable = callee
        .phone
        .offer()
        .replace("AES_CM_128_HMAC_SHA1_80", "NO_SUCH_SUITE_80");
    let e = ng
        .raw(offer_answer(
            "offer",
            "c2@proxy",
            "bob",
            Some("alice"),
            &unusable,
        ))
        .unwrap();
    assert_eq!(text(&e, "result").as_deref(), Some("error"), "{e:?}");
    let next = caller.phone.offer().replace("o=phone 1 1 ", "o=phone 1 3 ");
    let to_callee = sdp_of(&mut ng, "offer", "c2@proxy", "alice", Some("bob"), &next);
    assert!(to_callee.contains("RTP/SAVP"), "{to_callee}");
    let callee_answer = callee.phone.answer_offer(&to_callee).unwrap();
    let to_caller = sdp_of(
        &mut ng,
        "answer",
        "c2@proxy",
        "alice",
        Some("bob"),
        &callee_answer,
    );
    caller.phone.accept_answer(&to_caller).unwrap();
    talk(&mut caller, &mut callee, 0xc4, 0xb3);

    // A third party's tag is refused with the reason.
    let e = ng
        .raw(offer_answer(
            "offer",
            "c2@proxy",
            "mallory",
            None,
            &caller.phone.offer(),
        ))
        .unwrap();
    assert_eq!(text(&e, "result").as_deref(), Some("error"));
    assert!(
        text(&e, "error-reason").unwrap().contains("neither side"),
        "{e:?}"
    );
    server.shutdown();
}

#[test]
fn a_plain_caller_and_an_sdes_callee_talk_through_an_ng_call() {
    let (server, mut ng) = start();
    let pong = ng.raw(vec![("command".into(), s("ping"))]).unwrap();
    assert_eq!(text(&pong, "result").as_deref(), Some("pong"));

    let mut caller = SocketPhone::bind(LOCAL, None, 0xca11).unwrap();
    let mut callee = SocketPhone::bind(LOCAL, Some(Profile::AesCm128HmacSha1_80), 0xca1e).unwrap();
    let offer = ng
        .call(vec![
            ("command".into(), s("offer")),
            ("call-id".into(), s("c1@proxy")),
            ("from-tag".into(), s("alice")),
            ("via-branch".into(), s("z9hG4bK-1")),
            ("sdp".into(), s(&caller.phone.offer())),
            ("transport-protocol".into(), s("RTP/SAVP")),
            ("ICE".into(), s("remove")),
            (
                "replace".into(),
                Bencode::List(vec![s("origin"), s("session-connection")]),
            ),
        ])
        .unwrap();
    let to_callee = &offer["sdp"];
    assert!(to_callee.contains("RTP/SAVP"), "{to_callee}");
    assert!(to_callee.contains("a=crypto:"), "{to_callee}");
    assert!(to_callee.contains("c=IN IP4 127.0.0.1"), "{to_callee}");
    let callee_answer = callee.phone.answer_offer(to_callee).unwrap();
    let answer = ng
        .call(vec![
            ("command".into(), s("answer")),
            ("call-id".into(), s("c1@proxy")),
            ("from-tag".into(), s("alice")),
            ("to-tag".into(), s("bob")),
            ("sdp".into(), s(&callee_answer)),
        ])
        .unwrap();
    let to_caller = &answer["sdp"];
    assert!(to_caller.contains("RTP/AVP"), "{to_caller}");
    assert!(!to_caller.contains("a=crypto"), "{to_caller}");
    caller.phone.accept_answer(to_caller).unwrap();
    assert_ne!(
        caller.phone.gateway, callee.phone.gateway,
        "a port pair per side"
    );

    talk(&mut caller, &mut callee, 0xc1, 0xb0);
    // The callee's SRTP came from the gateway's key for it (its strict receiver opened every
    // packet); the caller got RTP in the clear.

    let q = ng
        .raw(vec![
            ("command".into(), s("query")),
            ("call-id".into(), s("c1@proxy")),
        ])
        .unwrap();
    assert_eq!(text(&q, "result").as_deref(), Some("ok"));
    // rtpengine's structure: per tag its medias, per media its RTP and RTCP streams with what
    // the side sent on each; and the call's totals.
    let tags = q.get("tags").expect("tags");
    for (tag, protocol) in [("alice", "RTP/AVP"), ("bob", "RTP/SAVP")] {
        let t = tags
            .get(tag)
            .unwrap_or_else(|| panic!("tag {tag} in {q:?}"));
        let Some(Bencode::List(medias)) = t.get("medias") else {
            panic!("medias in {t:?}")
        };
        assert_eq!(text(&medias[0], "protocol").as_deref(), Some(protocol));
        let Some(Bencode::List(streams)) = medias[0].get("streams") else {
            panic!("streams in {t:?}")
        };
        let rtp = streams[0].get("stats").expect("stats");
        assert!(
            matches!(rtp.get("packets"), Some(Bencode::Int(n)) if *n >= 50),
            "{t:?}"
        );
        assert_eq!(
            streams[1].get("flags"),
            Some(&Bencode::List(vec![s("RTCP"), s("filled")]))
        );
    }
    let totals = q.get("totals").and_then(|t| t.get("RTP")).expect("totals");
    assert!(
        matches!(totals.get("packets"), Some(Bencode::Int(n)) if *n >= 100),
        "{totals:?}"
    );
    let list = ng.raw(vec![("command".into(), s("list"))]).unwrap();
    assert_eq!(list.get("calls"), Some(&Bencode::List(vec![s("c1@proxy")])));
    let stats = ng.raw(vec![("command".into(), s("statistics"))]).unwrap();
    assert_eq!(text(&stats, "result").as_deref(), Some("ok"));

    let del = ng
        .raw(vec![
            ("command".into(), s("delete")),
            ("call-id".into(), s("c1@proxy")),
            ("from-tag".into(), s("alice")),
        ])
        .unwrap();
    assert_eq!(text(&del, "result").as_deref(), Some("ok"));
    // The delete reply carries the call's final figures, as rtpengine's does.
    assert!(
        del.get("totals").and_then(|t| t.get("RTP")).is_some(),
        "{del:?}"
    );
    let wait = Instant::now() + Duration::from_secs(5);
    while server.gateway().rtp_ports_in_use() > 0 {
        assert!(Instant::now() < wait, "ports given back");
        std::thread::sleep(Duration::from_millis(10));
    }
    server.shutdown();
}

#[test]
fn opportunistic_srtp_phones_talk_srtp_both_ways_on_rtp_avp() {
    // RFC 8643: each phone offers or answers its crypto line on RTP/AVP; both legs protect.
    let (server, mut ng) = start();
    let mut caller = SocketPhone::bind(LOCAL, Some(Profile::AesCm128HmacSha1_80), 0x05a1).unwrap();
    let mut callee = SocketPhone::bind(LOCAL, Some(Profile::AesCm128HmacSha1_80), 0x05b1).unwrap();
    let offer = caller.phone.offer().replace("RTP/SAVP", "RTP/AVP");
    let to_callee = sdp_of(&mut ng, "offer", "os1", "alice", None, &offer);
    assert!(
        to_callee.contains("RTP/AVP") && to_callee.contains("a=crypto:"),
        "{to_callee}"
    );
    let answer = callee
        .phone
        .answer_offer(&to_callee)
        .unwrap()
        .replace("RTP/SAVP", "RTP/AVP");
    let to_caller = sdp_of(&mut ng, "answer", "os1", "alice", Some("bob"), &answer);
    assert!(
        to_caller.contains("RTP/AVP") && to_caller.contains("a=crypto:"),
        "{to_caller}"
    );
    caller.phone.accept_answer(&to_caller).unwrap();
    // Each phone's receiver takes only SRTP under the gateway's key for it.
    talk(&mut caller, &mut callee, 0x51, 0x52);
    server.shutdown();
}

#[test]
fn bad_requests_get_error_replies_with_reasons_and_retransmissions_the_same_reply() {
    let (server, mut ng) = start();
    let err = |b: &Bencode| {
        assert_eq!(text(b, "result").as_deref(), Some("error"), "{b:?}");
        text(b, "error-reason").unwrap()
    };
    // Not bencode.
    let r = ng.send_raw(b"7 d3:abce").unwrap();
    assert!(err(&r).contains("malformed"));
    // Unknown command, missing call-id, SDP without media, an impossible transport, an
    // answer for a call nobody offered.
    let r = ng.raw(vec![("command".into(), s("dance"))]).unwrap();
    assert!(err(&r).contains("dance"));
    let r = ng
        .raw(vec![
            ("command".into(), s("offer")),
            ("from-tag".into(), s("a")),
            ("sdp".into(), s("v=0\r\n")),
        ])
        .unwrap();
    assert!(err(&r).contains("call-id"));
    let r = ng
        .raw(vec![
            ("command".into(), s("offer")),
            ("call-id".into(), s("x")),
            ("from-tag".into(), s("a")),
            (
                "sdp".into(),
                s("v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\n"),
            ),
        ])
        .unwrap();
    assert!(
        err(&r).contains("media") || err(&r).contains("SDP"),
        "{r:?}"
    );
    let phone = SocketPhone::bind(LOCAL, None, 1).unwrap();
    let r = ng
        .raw(vec![
            ("command".into(), s("offer")),
            ("call-id".into(), s("y")),
            ("from-tag".into(), s("a")),
            ("sdp".into(), s(&phone.phone.offer())),
            ("transport-protocol".into(), s("TCP/MSRP")),
        ])
        .unwrap();
    assert!(err(&r).contains("transport-protocol"));
    let r = ng
        .raw(vec![
            ("command".into(), s("answer")),
            ("call-id".into(), s("nobody")),
            ("from-tag".into(), s("a")),
            ("to-tag".into(), s("b")),
            ("sdp".into(), s(&phone.phone.offer())),
        ])
        .unwrap();
    assert!(err(&r).contains("unknown call-id"));

    // The same request bytes twice (a proxy's retransmission): one call, the same reply.
    let body = Bencode::Dict(vec![
        (b"command".to_vec(), s("offer")),
        (b"call-id".to_vec(), s("r1")),
        (b"from-tag".to_vec(), s("a")),
        (b"sdp".to_vec(), s(&phone.phone.offer())),
    ]);
    let msg = ng_encode("retx1", &body);
    let first = ng.send_raw(&msg).unwrap();
    let second = ng.send_raw(&msg).unwrap();
    assert_eq!(text(&first, "result").as_deref(), Some("ok"), "{first:?}");
    assert_eq!(first, second);
    assert_eq!(
        server.gateway().rtp_ports_in_use(),
        2,
        "one leg, one port pair"
    );

    let metrics = ureq::get(&format!("{}/metrics", server.url()))
        .header(
            "Authorization",
            &format!("Bearer {}", server.admin_key().expose()),
        )
        .call()
        .unwrap()
        .body_mut()
        .read_to_string()
        .unwrap();
    let errors: u64 = metrics
        .lines()
        .find(|l| l.starts_with("secrelay_ng_requests_total{result=\"error\"}"))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap();
    assert_eq!(errors, 6, "{metrics}");
    server.shutdown();
}

/// A plain phone's call through `ng` to a simulated browser (`transport-protocol:
/// UDP/TLS/RTP/SAVPF`, `ICE: force` towards it), offered and answered: (the phone, the
/// browser, ready to connect).
fn phone_calls_browser(
    ng: &mut Ng,
    call_id: &str,
) -> (SocketPhone, secrelay_testkit::SimParticipant) {
    let mut caller = SocketPhone::bind(LOCAL, None, 0xca11).unwrap();
    let offer = ng
        .call(vec![
            ("command".into(), s("offer")),
            ("call-id".into(), s(call_id)),
            ("from-tag".into(), s("phone")),
            ("sdp".into(), s(&caller.phone.offer())),
            ("transport-protocol".into(), s("UDP/TLS/RTP/SAVPF")),
            ("ICE".into(), s("force")),
            ("rtcp-mux".into(), Bencode::List(vec![s("offer")])),
        ])
        .unwrap();
    let to_browser = &offer["sdp"];
    for line in [
        "UDP/TLS/RTP/SAVPF",
        "a=ice-lite",
        "a=setup:actpass",
        "a=fingerprint:sha-256 ",
        "a=rtcp-mux",
        "a=rtpmap:0 PCMU/8000",
        "typ host",
    ] {
        assert!(to_browser.contains(line), "{line} in {to_browser}");
    }
    let epoch = Instant::now();
    let (browser, browser_answer) = secrelay_testkit::SimParticipant::answer_gateway_offer(
        to_browser,
        "to-browser",
        LOCAL,
        epoch,
    )
    .unwrap();
    let answer = ng
        .call(vec![
            ("command".into(), s("answer")),
            ("call-id".into(), s(call_id)),
            ("from-tag".into(), s("phone")),
            ("to-tag".into(), s("browser")),
            ("sdp".into(), s(&browser_answer)),
            ("ICE".into(), s("remove")),
        ])
        .unwrap();
    let to_phone = &answer["sdp"];
    assert!(to_phone.contains("RTP/AVP"), "{to_phone}");
    assert!(!to_phone.contains("a=ice"), "{to_phone}");
    caller.phone.accept_answer(to_phone).unwrap();

    (caller, browser)
}

/// A SIP phone calls a WebRTC user (what a proxy asks rtpengine for with `transport-protocol:
/// UDP/TLS/RTP/SAVPF` and `ICE: force` on the offer towards the browser): the reply is a
/// WebRTC offer of the gateway's (ICE-lite, DTLS `actpass`, its fingerprint and candidate);
/// the simulated browser answers it (DTLS client), checks and handshakes against the gateway,
/// and audio flows both ways between the plain phone and the browser; the phone's answer is
/// plain RTP. Then the browser's re-INVITE with another certificate is refused, and the call
/// is left as it was: the phone's next re-INVITE is taken as an offer.
#[test]
fn a_plain_phone_calls_a_webrtc_callee_through_an_ng_call() {
    let (server, mut ng) = start();
    let (mut caller, browser) = phone_calls_browser(&mut ng, "to-browser@proxy");
    let mut group = [browser];
    talk_with_browser(&mut group[0], &mut caller);

    // The browser re-INVITEs with another certificate (a DTLS restart): refused, and the
    // phone's side is left as it was: the phone's own re-INVITE after it is an offer, which
    // becomes our new offer to the browser.
    let other = secrelay_dtls::Certificate::self_signed(secrelay_dtls::KeyType::EcdsaP256, "x")
        .unwrap()
        .fingerprint();
    let restart = group[0].restart_offer().unwrap();
    let foreign: String = restart
        .lines()
        .map(|l| {
            if l.starts_with("a=fingerprint:") {
                format!("a=fingerprint:{other}\r\n")
            } else {
                format!("{l}\r\n")
            }
        })
        .collect();
    let refused = ng.raw(vec![
        ("command".into(), s("offer")),
        ("call-id".into(), s("to-browser@proxy")),
        ("from-tag".into(), s("browser")),
        ("to-tag".into(), s("phone")),
        ("sdp".into(), s(&foreign)),
    ]);
    let refused = refused.unwrap();
    assert_eq!(
        text(&refused, "result").as_deref(),
        Some("error"),
        "{refused:?}"
    );
    assert!(
        text(&refused, "error-reason").is_some_and(|r| r.contains("DTLS restart")),
        "{refused:?}"
    );
    let reinvite = ng
        .call(vec![
            ("command".into(), s("offer")),
            ("call-id".into(), s("to-browser@proxy")),
            ("from-tag".into(), s("phone")),
            ("to-tag".into(), s("browser")),
            // Its session's next version: a new offer, not the first one sent again.
            (
                "sdp".into(),
                s(&caller.phone.offer().replace("o=phone 1 1 ", "o=phone 1 2 ")),
            ),
        ])
        .unwrap();
    for line in ["UDP/TLS/RTP/SAVPF", "a=setup:actpass", "a=ice-lite"] {
        assert!(reinvite["sdp"].contains(line), "{line} in {reinvite:?}");
    }

    let q = ng
        .raw(vec![
            ("command".into(), s("query")),
            ("call-id".into(), s("to-browser@proxy")),
        ])
        .unwrap();
    let tags = q.get("tags").expect("tags");
    for (tag, leg) in [("phone", "plain"), ("browser", "webrtc")] {
        let t = tags
            .get(tag)
            .unwrap_or_else(|| panic!("tag {tag} in {q:?}"));
        assert_eq!(text(t, "leg").as_deref(), Some(leg), "{q:?}");
    }
    let del = ng
        .call(vec![
            ("command".into(), s("delete")),
            ("call-id".into(), s("to-browser@proxy")),
            ("from-tag".into(), s("phone")),
        ])
        .unwrap();
    assert_eq!(del["result"], "ok");
    server.shutdown();
}

/// The gauges `/metrics` has for what the gateway holds, from the server's HTTP side.
fn gauges(server: &Server) -> std::collections::HashMap<String, f64> {
    ureq::get(&format!("{}/metrics", server.url()))
        .header(
            "Authorization",
            &format!("Bearer {}", server.admin_key().expose()),
        )
        .call()
        .unwrap()
        .body_mut()
        .read_to_string()
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_owned(), v.parse().ok()?))
        })
        .collect()
}

/// A call whose phones stop sending without a `delete` (the proxy lost it): the media timeout
/// ends both legs, and the ng socket forgets the call within about one media timeout more, not
/// the 30 s its sweep used to wait; `/metrics` shows the call, its ports and its participants
/// while it lives (`secrelay_ng_calls`, `secrelay_rtp_ports_in_use`), and nothing after.
#[test]
fn a_call_that_goes_silent_is_swept_with_its_ports_and_metrics_say_so() {
    let (server, mut ng) = start_with(ServeConfig {
        rtp_ports: "47000-47999".into(),
        media_timeout_secs: 1.0,
        ..ServeConfig::default()
    });
    let mut caller = SocketPhone::bind(LOCAL, None, 0x5117).unwrap();
    let mut callee = SocketPhone::bind(LOCAL, Some(Profile::AesCm128HmacSha1_80), 0x5118).unwrap();
    let mut offer = offer_answer("offer", "silent@proxy", "a", None, &caller.phone.offer());
    offer.push(("transport-protocol".into(), s("RTP/SAVP")));
    let to_callee = ng.call(offer).unwrap()["sdp"].clone();
    let answer = callee.phone.answer_offer(&to_callee).unwrap();
    let to_caller = sdp_of(&mut ng, "answer", "silent@proxy", "a", Some("b"), &answer);
    caller.phone.accept_answer(&to_caller).unwrap();
    talk(&mut caller, &mut callee, 0x11, 0x22);

    let g = gauges(&server);
    assert_eq!(g["secrelay_ng_calls"], 1.0, "{g:?}");
    assert_eq!(
        g["secrelay_rtp_ports_in_use"], 4.0,
        "two legs, a port pair each: {g:?}"
    );
    assert_eq!(g["secrelay_participants"], 2.0, "{g:?}");
    assert_eq!(
        g["secrelay_routes{key=\"ufrag\"}"], 0.0,
        "no WebRTC leg: {g:?}"
    );

    // Silence: the media timeout (1 s) ends both legs, the next sweep forgets the call.
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        let g = gauges(&server);
        let left = [
            "secrelay_ng_calls",
            "secrelay_rtp_ports_in_use",
            "secrelay_participants",
            "secrelay_rooms",
            "secrelay_routes{key=\"address\"}",
        ]
        .map(|k| (k, g[k]));
        if left.iter().all(|(_, v)| *v == 0.0) {
            break;
        }
        assert!(
            Instant::now() < end,
            "still held 10 s after the call went silent: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let list = ng.raw(vec![("command".into(), s("list"))]).unwrap();
    assert_eq!(list.get("calls"), Some(&Bencode::List(vec![])), "{list:?}");
    // The two legs' ids, kept for the HTTP side to forget their resources, are taken by its
    // sweep though no request that would take them comes (an ng-only gateway used to keep
    // every id of every leg that ever ended).
    let end = Instant::now() + Duration::from_secs(10);
    while server.gateway().ended_backlog() > 0 {
        assert!(
            Instant::now() < end,
            "ended ids never taken without HTTP requests"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    server.shutdown();
}

#[test]
fn a_codec_the_gateway_cannot_decode_is_relayed_byte_for_byte() {
    let (_server, mut ng) = start();
    let mut caller = SocketPhone::bind(LOCAL, None, 0x729a).unwrap();
    let mut callee = SocketPhone::bind(LOCAL, None, 0x729b).unwrap();
    // G.729 and AMR: the gateway has no decoder for either; relaying needs none.
    for p in [&mut caller, &mut callee] {
        let phone = std::mem::replace(&mut p.phone, secrelay_testkit::phone::SimPhone::plain(0));
        p.phone = phone.with_formats(&[(18, "G729/8000"), (96, "AMR/8000")]);
        p.phone.addr = p.socket.local_addr().unwrap();
    }
    let to_callee = sdp_of(
        &mut ng,
        "offer",
        "g729@proxy",
        "alice",
        None,
        &caller.phone.offer(),
    );
    assert!(to_callee.contains("RTP/AVP 18 96"), "{to_callee}");
    let answer = callee.phone.answer_offer(&to_callee).unwrap();
    let to_caller = sdp_of(
        &mut ng,
        "answer",
        "g729@proxy",
        "alice",
        Some("bob"),
        &answer,
    );
    caller.phone.accept_answer(&to_caller).unwrap();
    // Each G.729 packet (two 10-byte frames) arrives with the payload it was sent with.
    let frames: Vec<[u8; 20]> = (0..40u8).map(|i| [i ^ 0xa5; 20]).collect();
    let end = Instant::now() + Duration::from_secs(10);
    for f in &frames {
        caller.send(f).unwrap();
        callee.send(&f.map(|b| !b)).unwrap();
        std::thread::sleep(Duration::from_millis(5));
    }
    let payloads = |p: &SocketPhone| -> Vec<Vec<u8>> {
        p.phone
            .received
            .iter()
            .filter_map(|r| RtpHeader::parse(r).ok())
            .filter(|h| h.payload_type() == 18)
            .map(|h| h.payload().to_vec())
            .collect()
    };
    while payloads(&callee).len() < 30 || payloads(&caller).len() < 30 {
        assert!(
            Instant::now() < end,
            "{} and {} arrived",
            payloads(&callee).len(),
            payloads(&caller).len()
        );
        std::thread::sleep(Duration::from_millis(10));
        caller.read();
        callee.read();
    }
    for got in payloads(&callee) {
        assert!(
            frames.iter().any(|f| f[..] == got[..]),
            "{got:02x?} was not sent"
        );
    }
    for got in payloads(&caller) {
        assert!(
            frames.iter().any(|f| f.map(|b| !b)[..] == got[..]),
            "{got:02x?} was not sent"
        );
    }
}

/// The phone and the simulated browser of a call between them talk until each heard 50
/// packets of the other more (at most 20 s), the browser taking all it got.
fn talk_with_browser(browser: &mut secrelay_testkit::SimParticipant, phone: &mut SocketPhone) {
    let end = Instant::now() + Duration::from_secs(20);
    let mut next_send = Instant::now();
    let (b0, p0) = (browser.received(), phone.phone.received.len());
    loop {
        let now = Instant::now();
        browser.step(now).unwrap();
        if now >= next_send {
            phone.send(&[0x5a; 160]).unwrap();
            next_send += Duration::from_millis(20);
        }
        phone.read();
        let (b, p) = (browser.received() - b0, phone.phone.received.len() - p0);
        if b >= 50 && p >= 50 {
            break;
        }
        assert!(
            Instant::now() < end,
            "browser {:?} heard {b} of the phone, the phone heard {p} of the browser",
            browser.phase
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(browser.rx_errors, 0);
}

/// secrelay with the media interfaces `interfaces` and its ng socket.
fn start_with_interfaces(interfaces: &[&str]) -> (Server, Ng) {
    start_with(ServeConfig {
        rtp_ports: "47000-47999".into(),
        interfaces: interfaces.iter().map(|s| (*s).to_owned()).collect(),
        ..ServeConfig::default()
    })
}

/// The `c=` address of an SDP.
fn connection(sdp: &str) -> String {
    sdp.lines()
        .find_map(|l| l.strip_prefix("c="))
        .unwrap()
        .to_owned()
}

#[test]
fn a_call_bridges_two_named_interfaces_chosen_by_direction() {
    let (_server, mut ng) = start_with_interfaces(&["internal/127.0.0.1", "external/127.0.0.2"]);
    let mut caller = SocketPhone::bind(LOCAL, None, 0x1111).unwrap();
    let mut callee = SocketPhone::bind("127.0.0.2".parse().unwrap(), None, 0x2222).unwrap();
    let mut offer = offer_answer("offer", "if@proxy", "alice", None, &caller.phone.offer());
    offer.push((
        "direction".into(),
        Bencode::List(vec![s("internal"), s("external")]),
    ));
    let to_callee = ng.call(offer).unwrap()["sdp"].clone();
    // The callee is offered the external interface, the caller answered on the internal one.
    assert_eq!(connection(&to_callee), "IN IP4 127.0.0.2", "{to_callee}");
    let answer = callee.phone.answer_offer(&to_callee).unwrap();
    let to_caller = sdp_of(&mut ng, "answer", "if@proxy", "alice", Some("bob"), &answer);
    assert_eq!(connection(&to_caller), "IN IP4 127.0.0.1", "{to_caller}");
    caller.phone.accept_answer(&to_caller).unwrap();
    talk(&mut caller, &mut callee, 0x31, 0x32);
}

/// A call with a WebRTC side takes its telephony member's interface as a telephony call
/// does: a phone on the external network calling a browser is answered there (`direction`'s
/// first entry), and talks with the browser; a browser calling a phone offers the phone the
/// interface `direction`'s second entry names.
#[test]
fn a_call_with_a_browser_binds_its_phone_on_the_interface_direction_names() {
    let (_server, mut ng) = start_with_interfaces(&["internal/127.0.0.1", "external/127.0.0.2"]);
    let mut phone = SocketPhone::bind("127.0.0.2".parse().unwrap(), None, 0xe1).unwrap();
    let mut offer = offer_answer("offer", "ext@proxy", "phone", None, &phone.phone.offer());
    offer.extend([
        ("transport-protocol".into(), s("UDP/TLS/RTP/SAVPF")),
        ("ICE".into(), s("force")),
        (
            "direction".into(),
            Bencode::List(vec![s("external"), s("internal")]),
        ),
    ]);
    let to_browser = ng.call(offer).unwrap()["sdp"].clone();
    let (mut browser, browser_answer) = secrelay_testkit::SimParticipant::answer_gateway_offer(
        &to_browser,
        "ext-browser",
        LOCAL,
        Instant::now(),
    )
    .unwrap();
    let mut answer = offer_answer(
        "answer",
        "ext@proxy",
        "phone",
        Some("browser"),
        &browser_answer,
    );
    answer.push(("ICE".into(), s("remove")));
    let to_phone = ng.call(answer).unwrap()["sdp"].clone();
    assert_eq!(connection(&to_phone), "IN IP4 127.0.0.2", "{to_phone}");
    phone.phone.accept_answer(&to_phone).unwrap();
    talk_with_browser(&mut browser, &mut phone);

    // A browser calls a phone on the external network.
    let client = secrelay_testkit::memory::SimClient::new(7);
    let browser_offer = client.audio_offer(secrelay_testkit::browser::Direction::SendRecv, None);
    let mut offer = offer_answer(
        "offer",
        "from-browser@proxy",
        "browser",
        None,
        &browser_offer,
    );
    offer.extend([
        ("transport-protocol".into(), s("RTP/AVP")),
        (
            "direction".into(),
            Bencode::List(vec![s("internal"), s("external")]),
        ),
    ]);
    let to_callee = ng.call(offer).unwrap()["sdp"].clone();
    assert_eq!(connection(&to_callee), "IN IP4 127.0.0.2", "{to_callee}");
}

#[test]
fn an_ipv6_caller_reaches_an_ipv4_callee_through_the_interfaces_of_each_family() {
    let v6: IpAddr = "::1".parse().unwrap();
    let (_server, mut ng) = start_with_interfaces(&["127.0.0.1", "::1"]);
    let mut caller = SocketPhone::bind(v6, None, 0x6666).unwrap();
    let mut callee = SocketPhone::bind(LOCAL, None, 0x4444).unwrap();
    let sdp = caller.phone.offer().replace("IN IP4 ::1", "IN IP6 ::1");
    let mut offer = offer_answer("offer", "v6@proxy", "alice", None, &sdp);
    offer.push(("address-family".into(), s("IP4")));
    let to_callee = ng.call(offer).unwrap()["sdp"].clone();
    assert_eq!(connection(&to_callee), "IN IP4 127.0.0.1", "{to_callee}");
    let answer = callee.phone.answer_offer(&to_callee).unwrap();
    let to_caller = sdp_of(&mut ng, "answer", "v6@proxy", "alice", Some("bob"), &answer);
    // The caller is answered on the IPv6 interface, in IPv6.
    assert_eq!(connection(&to_caller), "IN IP6 ::1", "{to_caller}");
    caller.phone.accept_answer(&to_caller).unwrap();
    talk(&mut caller, &mut callee, 0x61, 0x41);
}

/// The port of an SDP's first `m=` line.
fn media_port(sdp: &str) -> u16 {
    let m = sdp.lines().find(|l| l.starts_with("m=")).unwrap();
    m.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn telephony_sides_do_ice_as_rtpengine_decides_and_media_follows_the_nominated_address() {
    let (server, mut ng) = start();
    let mut caller = SocketPhone::bind(LOCAL, None, 0x1ce1).unwrap();
    let mut callee = SocketPhone::bind(LOCAL, None, 0x1ce2).unwrap();
    // The caller does ICE: by default its callee is offered ICE too, our own.
    let offer = ng
        .call(offer_answer(
            "offer",
            "ice1",
            "alice",
            None,
            &with_ice(&caller.phone.offer(), "alice1"),
        ))
        .unwrap();
    let to_callee = &offer["sdp"];
    let (ufrag, pwd, candidates) = our_ice(to_callee).expect("ICE towards the callee");
    let port = media_port(to_callee);
    assert_eq!(
        candidates,
        [
            format!("1 1 UDP 2130706431 127.0.0.1 {port} typ host"),
            format!("1 2 UDP 2130706430 127.0.0.1 {} typ host", port + 1),
        ],
        "{to_callee}"
    );
    assert!(
        !to_callee.contains("alice1"),
        "the caller's ICE is not passed on"
    );
    // The callee answers with ICE, from behind a "NAT": its c= is an address nothing listens
    // on; its check tells the gateway where it really is.
    let answer_sdp = callee.phone.answer_offer(to_callee).unwrap();
    let hidden = with_ice(&answer_sdp, "bob1").replace("c=IN IP4 127.0.0.1", "c=IN IP4 192.0.2.77");
    let answer = ng
        .call(offer_answer(
            "answer",
            "ice1",
            "alice",
            Some("bob"),
            &hidden,
        ))
        .unwrap();
    let to_caller = &answer["sdp"];
    let (caller_ufrag, caller_pwd, _) = our_ice(to_caller).expect("ICE towards the caller");
    caller.phone.accept_answer(to_caller).unwrap();
    let b_port = std::net::SocketAddr::new(LOCAL, port);
    let (class, mapped, code) = check(&callee.socket, b_port, (&ufrag, "bob1"), "not-the-password");
    assert_eq!(
        (class, code),
        (secrelay_wire::stun::Class::Error, Some(401)),
        "a check without our password"
    );
    let (class, mapped_ok, _) = check(&callee.socket, b_port, (&ufrag, "bob1"), &pwd);
    assert_eq!(class, secrelay_wire::stun::Class::Success);
    assert_eq!(
        mapped_ok,
        Some(callee.socket.local_addr().unwrap()),
        "{mapped:?}"
    );
    let a_port = std::net::SocketAddr::new(LOCAL, media_port(to_caller));
    let (class, ..) = check(
        &caller.socket,
        a_port,
        (&caller_ufrag, "alice1"),
        &caller_pwd,
    );
    assert_eq!(class, secrelay_wire::stun::Class::Success);
    // Media reaches the callee at the address its check came from, not its c=, before the
    // callee sent any (nothing to latch to but the nomination).
    callee.phone.gateway = Some(b_port);
    let end = Instant::now() + Duration::from_secs(10);
    while heard(&callee, 0x1a) < 5 {
        caller.send(&[0x1a; 160]).unwrap();
        std::thread::sleep(Duration::from_millis(10));
        callee.read();
        assert!(
            Instant::now() < end,
            "the callee heard nothing at its nominated address"
        );
    }
    talk(&mut caller, &mut callee, 0x1a, 0x1b);

    // ICE=remove: no ICE towards the callee, whatever the caller did.
    let offer = ng
        .call({
            let mut d = offer_answer(
                "offer",
                "ice2",
                "alice",
                None,
                &with_ice(&caller.phone.offer(), "alice2"),
            );
            d.push(("ICE".into(), s("remove")));
            d
        })
        .unwrap();
    assert!(our_ice(&offer["sdp"]).is_none(), "{}", offer["sdp"]);
    assert!(!offer["sdp"].contains("a=ice-"), "{}", offer["sdp"]);
    // No ICE in the offer: none by default, ours with ICE=force.
    let offer = ng
        .call(offer_answer(
            "offer",
            "ice3",
            "alice",
            None,
            &caller.phone.offer(),
        ))
        .unwrap();
    assert!(!offer["sdp"].contains("a=ice-"), "{}", offer["sdp"]);
    let offer = ng
        .call({
            let mut d = offer_answer("offer", "ice4", "alice", None, &caller.phone.offer());
            d.push(("ICE".into(), s("force")));
            d
        })
        .unwrap();
    assert!(our_ice(&offer["sdp"]).is_some(), "{}", offer["sdp"]);
    assert!(!offer.contains_key("warning"), "{offer:?}");
    drop(server);
}

/// `start recording` and `stop recording` in a call between a plain phone and a browser (the
/// call's WebRTC side): the pcap file holds both sides' packets sent meanwhile, the browser's
/// decrypted (plain RTP of its 160-byte μ-law payloads, its 440 Hz tone in them), and none from
/// before the start.
#[test]
fn a_call_with_a_webrtc_side_is_recorded_decrypted_both_ways() {
    let dir = tempfile::tempdir().unwrap();
    let (server, mut ng) = start_with(ServeConfig {
        rtp_ports: "46500-46599".into(),
        recording_dir: Some(dir.path().to_owned()),
        ..ServeConfig::default()
    });
    let id = "rec-browser@proxy";
    let (mut phone, browser) = phone_calls_browser(&mut ng, id);
    let mut browser = [browser];
    talk_with_browser(&mut browser[0], &mut phone);
    let recording = |what: &str| vec![("command".into(), s(what)), ("call-id".into(), s(id))];
    ng.call(recording("start recording")).unwrap();
    talk_with_browser(&mut browser[0], &mut phone);
    ng.call(recording("stop recording")).unwrap();
    ng.call(vec![
        ("command".into(), s("delete")),
        ("call-id".into(), s(id)),
        ("from-tag".into(), s("phone")),
    ])
    .unwrap();
    // The file is written by a thread of its own: a moment for it to close.
    let pcap = || {
        std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|x| x == "pcap"))
    };
    let until = Instant::now() + Duration::from_secs(3);
    let (mut from_phone, mut from_browser, mut browser_pcm) = (0, 0, Vec::new());
    while Instant::now() < until {
        (from_phone, from_browser) = (0, 0);
        browser_pcm.clear();
        let Some(file) = pcap() else {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        };
        let capture = secrelay_wire::pcap::Capture::parse(&std::fs::read(&file).unwrap()).unwrap();
        for p in &capture.packets {
            let Some(rtp) = p.udp_payload().and_then(|u| RtpHeader::parse(u).ok()) else {
                continue;
            };
            match (rtp.payload_type(), rtp.payload()) {
                (0, pl) if pl == [0x5a; 160] => from_phone += 1,
                (0, pl) if pl.len() == 160 => {
                    from_browser += 1;
                    browser_pcm.extend(pl.iter().map(|&c| secrelay_media::g711::ulaw_decode(c)));
                }
                _ => {}
            }
        }
        if from_phone >= 50 && from_browser >= 50 {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // About the 50 or so each sent while recorded, and nothing from the first exchange.
    assert!(
        (50..=90).contains(&from_phone),
        "the phone's packets: {from_phone}"
    );
    assert!(
        (50..=90).contains(&from_browser),
        "the browser's packets: {from_browser}"
    );
    // Each payload's first 8 bytes are the simulated browser's send stamp, the rest its tone.
    let share = browser_pcm
        .chunks_exact(160)
        .map(|p| secrelay_media::tone::tone_share(&p[8..], 8000, 440.0))
        .fold(1.0f64, f64::min);
    assert!(share > 0.8, "the browser's tone, decrypted: {share:.2}");
    server.shutdown();
}
