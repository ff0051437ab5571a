//! rtpengine's media subscriptions over real sockets: a SIP proxy's `subscribe request` makes a
//! participant that receives a copy of one side of an ng call (or of both, one media section
//! each), keyed for itself; `subscribe answer` starts the media towards it; `unsubscribe`
//! ends it. A subscriber hears only the sides it chose, what it sends reaches no one, and the
//! call's own two sides go on as before; a subscriber of another codec hears the side
//! transcoded when the answer allows it. A phone that `publish`es is answered `recvonly` with
//! one codec and heard by its subscribers. Bad requests get error replies with reasons.

use std::net::{IpAddr, Ipv4Addr, UdpSocket};
use std::time::{Duration, Instant};

use secrelay_gateway::server::{ServeConfig, Server};
use secrelay_srtp::Profile;
use secrelay_testkit::ng::{serve_on_loopback, Ng};
use secrelay_testkit::phone::SocketPhone;
use secrelay_wire::bencode::Bencode;
use secrelay_wire::RtpHeader;

const LOCAL: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
const CALL: &str = "sub-1@proxy";
/// The payloads' first bytes: who sent a packet.
const ALICE: u8 = 0xa1;
const BOB: u8 = 0xb0;
const SUBSCRIBER: u8 = 0x5b;

fn s(v: &str) -> Bencode {
    Bencode::str(v)
}

fn text(b: &Bencode, key: &str) -> Option<String> {
    b.get(key).and_then(Bencode::as_text)
}

fn start() -> (Server, Ng) {
    start_with(ServeConfig::default())
}

/// secrelay with `config` (its sockets on loopback, two workers), and an ng client of it.
fn start_with(config: ServeConfig) -> (Server, Ng) {
    serve_on_loopback(ServeConfig {
        rtp_ports: "41000-41999".into(),
        workers: 2,
        ..config
    })
}

/// A call from plain-RTP alice to SDES-SRTP bob through the gateway, answered.
fn call(ng: &mut Ng) -> (SocketPhone, SocketPhone) {
    let mut alice = SocketPhone::bind(LOCAL, None, 0xa11ce).unwrap();
    let mut bob = SocketPhone::bind(LOCAL, Some(Profile::AesCm128HmacSha1_80), 0xb0b).unwrap();
    let offer = ng
        .call(vec![
            ("command".into(), s("offer")),
            ("call-id".into(), s(CALL)),
            ("from-tag".into(), s("alice")),
            ("sdp".into(), s(&alice.phone.offer())),
            ("transport-protocol".into(), s("RTP/SAVP")),
        ])
        .unwrap();
    let to_alice = bob.phone.answer_offer(&offer["sdp"]).unwrap();
    let answer = ng
        .call(vec![
            ("command".into(), s("answer")),
            ("call-id".into(), s(CALL)),
            ("from-tag".into(), s("alice")),
            ("to-tag".into(), s("bob")),
            ("sdp".into(), s(&to_alice)),
        ])
        .unwrap();
    alice.phone.accept_answer(&answer["sdp"]).unwrap();
    (alice, bob)
}

/// Alice and bob send 50 packets each, 10 ms apart, and every listener reads as they do.
fn talk(alice: &mut SocketPhone, bob: &mut SocketPhone, listeners: &mut [&mut SocketPhone]) {
    for _ in 0..50 {
        alice.send(&[ALICE; 160]).unwrap();
        bob.send(&[BOB; 160]).unwrap();
        for l in listeners.iter_mut() {
            // A subscriber's own packets go nowhere.
            let _ = l.send(&[SUBSCRIBER; 160]);
        }
        std::thread::sleep(Duration::from_millis(10));
        alice.read();
        bob.read();
        listeners.iter_mut().for_each(|l| l.read());
    }
    // What was in flight.
    std::thread::sleep(Duration::from_millis(100));
    alice.read();
    bob.read();
    listeners.iter_mut().for_each(|l| l.read());
}

/// A `subscribe request` for the call with `entries`; the reply, which must be `ok`.
fn subscribe(ng: &mut Ng, entries: Vec<(&str, Bencode)>) -> Bencode {
    let mut d = vec![
        ("command".to_owned(), s("subscribe request")),
        ("call-id".to_owned(), s(CALL)),
    ];
    d.extend(entries.into_iter().map(|(k, v)| (k.to_owned(), v)));
    let r = ng.raw(d).unwrap();
    assert_eq!(text(&r, "result").as_deref(), Some("ok"), "{r:?}");
    r
}

/// An ng request for the call; its reply, whatever it says.
fn request(ng: &mut Ng, command: &str, entries: Vec<(&str, Bencode)>) -> Bencode {
    let mut d = vec![
        ("command".to_owned(), s(command)),
        ("call-id".to_owned(), s(CALL)),
    ];
    d.extend(entries.into_iter().map(|(k, v)| (k.to_owned(), v)));
    ng.raw(d).unwrap()
}

fn ok(r: &Bencode) {
    assert_eq!(text(r, "result").as_deref(), Some("ok"), "{r:?}");
}

fn error_reason(r: &Bencode) -> String {
    assert_eq!(text(r, "result").as_deref(), Some("error"), "{r:?}");
    text(r, "error-reason").unwrap_or_default()
}

#[test]
fn a_subscriber_hears_the_side_it_chose_under_its_own_key_and_nothing_else() {
    let (server, mut ng) = start();
    let (mut alice, mut bob) = call(&mut ng);

    // A supervisor listens to alice, in the clear; a recorder to bob, over SDES-SRTP of its
    // own key.
    let r = subscribe(
        &mut ng,
        vec![("from-tag", s("alice")), ("to-tag", s("sup"))],
    );
    assert_eq!(text(&r, "to-tag").as_deref(), Some("sup"));
    assert_eq!(r.get("from-tags"), Some(&Bencode::List(vec![s("alice")])));
    let offer = text(&r, "sdp").unwrap();
    assert!(offer.contains("a=sendonly"), "{offer}");
    assert!(offer.contains("RTP/AVP"), "{offer}");
    assert_eq!(offer.matches("m=audio").count(), 1, "{offer}");
    let mut sup = SocketPhone::bind(LOCAL, None, 0x5a9).unwrap();
    let sup_answer = sup.phone.answer_offer(&offer).unwrap();
    ok(&request(
        &mut ng,
        "subscribe answer",
        vec![("to-tag", s("sup")), ("sdp", s(&sup_answer))],
    ));
    // Answered once: another answer is refused and changes nothing.
    let reason = error_reason(&request(
        &mut ng,
        "subscribe answer",
        vec![("to-tag", s("sup")), ("sdp", s(&sup_answer))],
    ));
    assert!(reason.contains("answered already"), "{reason}");

    let r = subscribe(
        &mut ng,
        vec![
            ("from-tag", s("bob")),
            ("transport-protocol", s("RTP/SAVP")),
        ],
    );
    let rec_tag = text(&r, "to-tag").unwrap();
    assert!(!rec_tag.is_empty() && rec_tag != "sup", "a tag of its own");
    let offer = text(&r, "sdp").unwrap();
    assert!(
        offer.contains("RTP/SAVP") && offer.contains("a=crypto:"),
        "{offer}"
    );
    let mut rec = SocketPhone::bind(LOCAL, Some(Profile::AesCm128HmacSha1_80), 0x4ec).unwrap();
    let rec_answer = rec.phone.answer_offer(&offer).unwrap();
    ok(&request(
        &mut ng,
        "subscribe answer",
        vec![("to-tag", s(&rec_tag)), ("sdp", s(&rec_answer))],
    ));

    talk(&mut alice, &mut bob, &mut [&mut sup, &mut rec]);
    // The call goes on as before.
    assert!(alice.heard(BOB) >= 40, "alice heard {}", alice.heard(BOB));
    assert!(bob.heard(ALICE) >= 40, "bob heard {}", bob.heard(ALICE));
    // Each subscriber hears its side only (the recorder's strict SRTP receiver opened every
    // packet it kept: the gateway's key for it is its own).
    assert!(
        sup.heard(ALICE) >= 40,
        "the supervisor heard {}",
        sup.heard(ALICE)
    );
    assert_eq!(sup.heard(BOB), 0, "the supervisor hears alice alone");
    assert!(
        rec.heard(BOB) >= 40,
        "the recorder heard {}",
        rec.heard(BOB)
    );
    assert_eq!(rec.heard(ALICE), 0, "the recorder hears bob alone");
    // What subscribers send reaches no one.
    for p in [&alice, &bob, &sup, &rec] {
        assert_eq!(p.heard(SUBSCRIBER), 0);
    }

    let q = request(&mut ng, "query", vec![]);
    let subs = q.get("subscriptions").expect("subscriptions in the query");
    let sup_q = subs.get("sup").expect("the supervisor's subscription");
    assert_eq!(
        sup_q.get("from-tags"),
        Some(&Bencode::List(vec![s("alice")]))
    );
    assert_eq!(sup_q.get("answered"), Some(&Bencode::Int(1)));
    assert!(
        matches!(sup_q.get("packets"), Some(Bencode::Int(n)) if *n >= 40),
        "{sup_q:?}"
    );
    let rec_q = subs.get(&rec_tag).expect("the recorder's subscription");
    assert_eq!(rec_q.get("from-tags"), Some(&Bencode::List(vec![s("bob")])));

    // Unsubscribed, the supervisor hears no more; the recorder goes on.
    ok(&request(&mut ng, "unsubscribe", vec![("to-tag", s("sup"))]));
    let (before_sup, before_rec) = (sup.heard(ALICE), rec.heard(BOB));
    talk(&mut alice, &mut bob, &mut [&mut sup, &mut rec]);
    assert_eq!(sup.heard(ALICE), before_sup, "nothing after unsubscribe");
    assert!(rec.heard(BOB) >= before_rec + 40);

    ok(&request(&mut ng, "delete", vec![("from-tag", s("alice"))]));
    let wait = Instant::now() + Duration::from_secs(5);
    while server.gateway().rtp_ports_in_use() > 0 {
        assert!(Instant::now() < wait, "every port given back");
        std::thread::sleep(Duration::from_millis(10));
    }
    server.shutdown();
}

/// The payload's first byte of each RTP packet waiting on `socket`.
fn fills(socket: &UdpSocket) -> Vec<u8> {
    let mut buf = [0u8; 2048];
    let mut out = Vec::new();
    while let Ok(n) = socket.recv(&mut buf) {
        if let Ok(h) = RtpHeader::parse(&buf[..n]) {
            out.extend(h.payload().first());
        }
    }
    out
}

#[test]
fn a_subscription_to_all_has_a_section_per_side_and_each_carries_its_side() {
    let (server, mut ng) = start();
    let (mut alice, mut bob) = call(&mut ng);
    let r = subscribe(
        &mut ng,
        vec![
            ("flags", Bencode::List(vec![s("all")])),
            ("to-tag", s("rec")),
            // Bob's side is SDES-SRTP: its copy goes out in the clear too.
            ("transport-protocol", s("RTP/AVP")),
        ],
    );
    assert_eq!(
        r.get("from-tags"),
        Some(&Bencode::List(vec![s("alice"), s("bob")]))
    );
    let offer = text(&r, "sdp").unwrap();
    assert_eq!(offer.matches("m=audio").count(), 2, "{offer}");
    assert_eq!(offer.matches("a=sendonly").count(), 2, "{offer}");
    assert!(offer.contains("a=rtpmap:0 PCMU/8000"), "{offer}");
    assert!(
        !offer.contains("a=crypto") && !offer.contains("SAVP"),
        "{offer}"
    );

    // One socket per section.
    let socks: Vec<UdpSocket> = (0..2)
        .map(|_| UdpSocket::bind((LOCAL, 0)).unwrap())
        .collect();
    let mut answer =
        "v=0\r\no=rec 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n".to_owned();
    for sock in &socks {
        sock.set_nonblocking(true).unwrap();
        let port = sock.local_addr().unwrap().port();
        answer.push_str(&format!(
            "m=audio {port} RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\na=recvonly\r\n"
        ));
    }
    // An answer that leaves out a codec offered is refused, as rtpengine refuses it.
    let bad = answer.replace(
        "RTP/AVP 0\r\na=rtpmap:0 PCMU/8000",
        "RTP/AVP 8\r\na=rtpmap:8 PCMA/8000",
    );
    let reason = error_reason(&request(
        &mut ng,
        "subscribe answer",
        vec![("to-tag", s("rec")), ("sdp", s(&bad))],
    ));
    assert!(reason.contains("PCMU/8000"), "{reason}");
    ok(&request(
        &mut ng,
        "subscribe answer",
        vec![("to-tag", s("rec")), ("sdp", s(&answer))],
    ));

    talk(&mut alice, &mut bob, &mut []);
    let (first, second) = (fills(&socks[0]), fills(&socks[1]));
    assert!(
        first.len() >= 40 && first.iter().all(|&f| f == ALICE),
        "{first:x?}"
    );
    assert!(
        second.len() >= 40 && second.iter().all(|&f| f == BOB),
        "{second:x?}"
    );

    // A subscription of the same tag replaces it.
    let r = subscribe(&mut ng, vec![("from-tag", s("bob")), ("to-tag", s("rec"))]);
    assert_eq!(text(&r, "sdp").unwrap().matches("m=audio").count(), 1);
    server.shutdown();
}

#[test]
fn bad_subscription_requests_get_error_replies_with_reasons() {
    let (server, mut ng) = start();
    let (_alice, _bob) = call(&mut ng);
    let reason = error_reason(&request(
        &mut ng,
        "subscribe request",
        vec![("from-tag", s("carol"))],
    ));
    assert!(reason.contains("carol"), "{reason}");
    let reason = error_reason(&request(&mut ng, "subscribe request", vec![]));
    assert!(reason.contains("from-tag"), "{reason}");
    let reason = error_reason(&request(
        &mut ng,
        "subscribe request",
        vec![("from-tag", s("alice")), ("to-tag", s("bob"))],
    ));
    assert!(reason.contains("side of this call"), "{reason}");
    let reason = error_reason(&request(
        &mut ng,
        "subscribe answer",
        vec![("to-tag", s("nobody")), ("sdp", s("v=0\r\n"))],
    ));
    assert!(reason.contains("nobody"), "{reason}");
    let reason = error_reason(&request(
        &mut ng,
        "unsubscribe",
        vec![("to-tag", s("nobody"))],
    ));
    assert!(reason.contains("nobody"), "{reason}");
    let mut d = vec![
        ("command".to_owned(), s("subscribe request")),
        ("call-id".to_owned(), s("no-such-call")),
        ("from-tag".to_owned(), s("alice")),
    ];
    let reason = error_reason(&ng.raw(std::mem::take(&mut d)).unwrap());
    assert!(reason.contains("no-such-call"), "{reason}");
    server.shutdown();
}

#[test]
fn with_allow_transcoding_a_subscriber_of_another_codec_gets_the_side_transcoded() {
    let (server, mut ng) = start();
    let (mut alice, mut bob) = call(&mut ng);
    // A-law added to our offer for transcoding, as in an `offer`'s codec flags.
    let codec = Bencode::Dict(vec![(
        b"transcode".to_vec(),
        Bencode::List(vec![s("PCMA")]),
    )]);
    let r = subscribe(
        &mut ng,
        vec![
            ("from-tag", s("alice")),
            ("to-tag", s("alaw")),
            ("codec", codec),
        ],
    );
    let offer = text(&r, "sdp").unwrap();
    assert!(offer.contains("a=rtpmap:0 PCMU/8000"), "{offer}");
    assert!(offer.contains("a=rtpmap:8 PCMA/8000"), "{offer}");
    let sock = UdpSocket::bind((LOCAL, 0)).unwrap();
    sock.set_nonblocking(true).unwrap();
    let answer = format!(
        "v=0\r\no=rec 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n\
         m=audio {} RTP/AVP 8\r\na=rtpmap:8 PCMA/8000\r\na=recvonly\r\n",
        sock.local_addr().unwrap().port()
    );
    // Without `allow transcoding`, an answer must take every codec offered.
    let reason = error_reason(&request(
        &mut ng,
        "subscribe answer",
        vec![("to-tag", s("alaw")), ("sdp", s(&answer))],
    ));
    assert!(reason.contains("PCMU/8000"), "{reason}");
    ok(&request(
        &mut ng,
        "subscribe answer",
        vec![
            ("to-tag", s("alaw")),
            ("sdp", s(&answer)),
            ("flags", Bencode::List(vec![s("allow transcoding")])),
        ],
    ));
    talk(&mut alice, &mut bob, &mut []);
    // Alice's µ-law samples, each as A-law codes it.
    use secrelay_media::g711::{alaw_encode, ulaw_decode};
    let want = alaw_encode(ulaw_decode(ALICE));
    let mut buf = [0u8; 2048];
    let mut alaw = 0;
    while let Ok(n) = sock.recv(&mut buf) {
        let h = RtpHeader::parse(&buf[..n]).unwrap();
        assert_eq!(h.payload_type(), 8, "A-law only");
        alaw += usize::from(h.payload().len() == 160 && h.payload().iter().all(|&b| b == want));
    }
    assert!(alaw >= 40, "{alaw} A-law packets of alice's speech");
    assert!(bob.heard(ALICE) >= 40, "the call's own codec unchanged");
    server.shutdown();
}

#[test]
fn a_silent_subscriber_outlives_the_media_timeout_and_ends_with_its_call() {
    let (server, mut ng) = start_with(ServeConfig {
        media_timeout_secs: 1.0,
        ..ServeConfig::default()
    });
    let (mut alice, mut bob) = call(&mut ng);
    let r = subscribe(
        &mut ng,
        vec![("from-tag", s("alice")), ("to-tag", s("srs"))],
    );
    // A recording server that sends nothing, not even RTCP.
    let sock = UdpSocket::bind((LOCAL, 0)).unwrap();
    sock.set_nonblocking(true).unwrap();
    let answer = format!(
        "v=0\r\no=srs 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n\
         m=audio {} RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\na=recvonly\r\n",
        sock.local_addr().unwrap().port()
    );
    assert!(text(&r, "sdp").unwrap().contains("PCMU/8000"));
    ok(&request(
        &mut ng,
        "subscribe answer",
        vec![("to-tag", s("srs")), ("sdp", s(&answer))],
    ));
    // Three media timeouts of talk: the silent subscriber hears alice to the end.
    let end = Instant::now() + Duration::from_secs(3);
    while Instant::now() < end {
        talk(&mut alice, &mut bob, &mut []);
    }
    let _ = fills(&sock);
    talk(&mut alice, &mut bob, &mut []);
    let last = fills(&sock);
    assert!(
        last.len() >= 40 && last.iter().all(|&f| f == ALICE),
        "after 3 s the subscriber still hears alice: {} packets",
        last.len()
    );
    // The sides fall silent: their members time out, the call is swept, and the subscriber's
    // member and ports go with it.
    let wait = Instant::now() + Duration::from_secs(10);
    while server.gateway().rtp_ports_in_use() > 0 {
        assert!(Instant::now() < wait, "every port given back");
        std::thread::sleep(Duration::from_millis(50));
    }
    let wait = Instant::now() + Duration::from_secs(5);
    while text(&request(&mut ng, "query", vec![]), "result").as_deref() == Some("ok") {
        assert!(Instant::now() < wait, "the call swept");
        std::thread::sleep(Duration::from_millis(50));
    }
    server.shutdown();
}

/// A plain phone of tag `tag` publishing (its SDP `sendonly`, PCMU, PCMA and Opus offered) in
/// `call`: the phone, answered by the gateway's reply.
fn publisher(ng: &mut Ng, call: &str, tag: &str, ssrc: u32) -> SocketPhone {
    let mut p = SocketPhone::bind(LOCAL, None, ssrc).unwrap();
    p.phone.direction = "sendonly";
    let r = ng
        .raw(vec![
            ("command".into(), s("publish")),
            ("call-id".into(), s(call)),
            ("from-tag".into(), s(tag)),
            ("sdp".into(), s(&p.phone.offer())),
        ])
        .unwrap();
    ok(&r);
    let answer = text(&r, "sdp").unwrap();
    // rtpengine's answer to a publisher: `recvonly`, one codec (the first it knows).
    assert!(answer.contains("a=recvonly"), "{answer}");
    let m = answer.lines().find(|l| l.starts_with("m=audio")).unwrap();
    assert!(m.ends_with(" RTP/AVP 0"), "{m}");
    p.phone.accept_answer(&answer).unwrap();
    p
}

#[test]
fn a_published_phone_is_heard_by_its_subscribers() {
    let (server, mut ng) = start();
    const PUB: &str = "pub-1@proxy";
    let mut first = publisher(&mut ng, PUB, "first", 0xf1);
    let mut second = publisher(&mut ng, PUB, "second", 0xf2);
    let mut third = SocketPhone::bind(LOCAL, None, 0xf3).unwrap();
    third.phone.direction = "sendonly";
    let r = ng
        .raw(vec![
            ("command".into(), s("publish")),
            ("call-id".into(), s(PUB)),
            ("from-tag".into(), s("third")),
            ("sdp".into(), s(&third.phone.offer())),
        ])
        .unwrap();
    assert!(error_reason(&r).contains("two participants"));

    // One listener of the first publisher, one of both (a section each).
    let sub = |ng: &mut Ng, entries: Vec<(&str, Bencode)>| {
        let mut d = vec![
            ("command".to_owned(), s("subscribe request")),
            ("call-id".to_owned(), s(PUB)),
        ];
        d.extend(entries.into_iter().map(|(k, v)| (k.to_owned(), v)));
        let r = ng.raw(d).unwrap();
        ok(&r);
        r
    };
    let r = sub(&mut ng, vec![("from-tag", s("first")), ("to-tag", s("l1"))]);
    let mut l1 = SocketPhone::bind(LOCAL, None, 0x11).unwrap();
    let a1 = l1.phone.answer_offer(&text(&r, "sdp").unwrap()).unwrap();
    let r = sub(&mut ng, vec![("all", s("all")), ("to-tag", s("l2"))]);
    assert_eq!(
        r.get("from-tags"),
        Some(&Bencode::List(vec![s("first"), s("second")]))
    );
    let offer = text(&r, "sdp").unwrap();
    assert_eq!(offer.matches("m=audio").count(), 2, "{offer}");
    let socks: Vec<UdpSocket> = (0..2)
        .map(|_| UdpSocket::bind((LOCAL, 0)).unwrap())
        .collect();
    let mut a2 =
        "v=0\r\no=l2 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n".to_owned();
    for sock in &socks {
        sock.set_nonblocking(true).unwrap();
        let port = sock.local_addr().unwrap().port();
        a2.push_str(&format!(
            "m=audio {port} RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\n"
        ));
    }
    for (tag, answer) in [("l1", &a1), ("l2", &a2)] {
        let mut d = vec![
            ("command".to_owned(), s("subscribe answer")),
            ("call-id".to_owned(), s(PUB)),
            ("to-tag".to_owned(), s(tag)),
            ("sdp".to_owned(), s(answer)),
        ];
        ok(&ng.raw(std::mem::take(&mut d)).unwrap());
    }

    for _ in 0..50 {
        first.send(&[ALICE; 160]).unwrap();
        second.send(&[BOB; 160]).unwrap();
        std::thread::sleep(Duration::from_millis(10));
        l1.read();
    }
    std::thread::sleep(Duration::from_millis(100));
    l1.read();
    assert!(l1.heard(ALICE) >= 40, "l1 heard {}", l1.heard(ALICE));
    assert_eq!(l1.heard(BOB), 0, "l1 hears the first publisher alone");
    let (s1, s2) = (fills(&socks[0]), fills(&socks[1]));
    assert!(s1.len() >= 40 && s1.iter().all(|&f| f == ALICE), "{s1:x?}");
    assert!(s2.len() >= 40 && s2.iter().all(|&f| f == BOB), "{s2:x?}");
    // Publishers hear nothing: no one publishes to them.
    first.read();
    second.read();
    assert!(first.phone.received.is_empty() && second.phone.received.is_empty());

    // `codec: {accept: […]}`: the codec the answer names, in preference.
    let mut p = SocketPhone::bind(LOCAL, None, 0xf4).unwrap();
    p.phone.direction = "sendonly";
    let accept = Bencode::Dict(vec![(
        b"accept".to_vec(),
        Bencode::List(vec![s("G722"), s("PCMA")]),
    )]);
    let r = ng
        .raw(vec![
            ("command".into(), s("publish")),
            ("call-id".into(), s("pub-2@proxy")),
            ("from-tag".into(), s("p")),
            ("sdp".into(), s(&p.phone.offer())),
            ("codec".into(), accept),
        ])
        .unwrap();
    let answer = text(&r, "sdp").unwrap();
    let m = answer.lines().find(|l| l.starts_with("m=audio")).unwrap();
    assert!(m.ends_with(" RTP/AVP 8"), "{m}");
    server.shutdown();
}
