//! What secrelay's ng socket writes, line by line, beside what rtpengine's documentation (its
//! `ng_control_protocol.md` and man page) says rtpengine writes for the same request. Each test
//! is one behaviour, with SDP of our own; ports, keys and ICE credentials (which differ from
//! run to run) are compared as placeholders.

use secrelay_gateway::server::{ServeConfig, Server};
use secrelay_testkit::ng::Ng;
use secrelay_wire::bencode::Bencode;

fn s(v: &str) -> Bencode {
    Bencode::str(v)
}

fn start() -> (Server, Ng) {
    start_on(Vec::new())
}

/// [`start`] with these media interfaces (`ServeConfig::interfaces`).
fn start_on(interfaces: Vec<String>) -> (Server, Ng) {
    let server = Server::start(ServeConfig {
        interfaces,
        http: Some("127.0.0.1:0".parse().unwrap()),
        udp: "127.0.0.1:0".parse().unwrap(),
        announce: Some("203.0.113.1".parse().unwrap()),
        ng: Some("127.0.0.1:0".parse().unwrap()),
        workers: 1,
        rtp_ports: "46000-46999".into(),
        drain_secs: 0.1,
        ..ServeConfig::default()
    })
    .unwrap();
    let ng = Ng::new(server.ng_addr().unwrap()).unwrap();
    (server, ng)
}

/// A request: `command` for call `call` with `sdp` and more `flags`; the answer's to-tag is
/// `b`, the offerer's `a`.
fn request(
    command: &str,
    call: &str,
    sdp: &str,
    flags: &[(&str, Bencode)],
) -> Vec<(String, Bencode)> {
    let mut d = vec![
        ("command".to_owned(), s(command)),
        ("call-id".to_owned(), s(call)),
        ("from-tag".to_owned(), s("a")),
        ("sdp".to_owned(), s(sdp)),
    ];
    if command == "answer" {
        d.push(("to-tag".into(), s("b")));
    }
    d.extend(flags.iter().map(|(k, v)| ((*k).to_owned(), v.clone())));
    d
}

/// Our SDP, its lines with ports and keys as placeholders.
fn lines(sdp: &str) -> Vec<String> {
    sdp.lines()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            // (A TCP section passes through with its own port.)
            if l.starts_with("m=") && f.len() > 2 && f[1] != "0" && !f[2].starts_with("TCP") {
                let mut f = f.clone();
                f[1] = "PORT";
                return f.join(" ");
            }
            if let Some(rest) = l.strip_prefix("a=rtcp:") {
                let tail: Vec<&str> = rest.split(' ').skip(1).collect();
                return std::iter::once("a=rtcp:PORT")
                    .chain(tail)
                    .collect::<Vec<_>>()
                    .join(" ");
            }
            if l.starts_with("a=crypto:") && f.len() > 2 {
                return format!("{} {} inline:KEY", f[0], f[1]);
            }
            l.to_owned()
        })
        .collect()
}

fn sdp_of(ng: &mut Ng, req: Vec<(String, Bencode)>) -> Vec<String> {
    let r = ng.call(req).unwrap();
    lines(&r["sdp"])
}

#[test]
fn every_format_passes_through_in_order_with_its_lines_and_a_static_rtpmap() {
    let (_server, mut ng) = start();
    // AMR, G.729, 16 kHz events and comfort noise: none decoded by the gateway, all relayed.
    let offer =
        "v=0\r\no=phone 7 7 IN IP4 192.0.2.10\r\ns=call\r\nc=IN IP4 192.0.2.10\r\nt=0 0\r\n\
        m=audio 5004 RTP/AVP 96 18 0 100 13\r\na=x-vendor:1\r\na=rtpmap:96 AMR/8000\r\n\
        a=fmtp:96 octet-align=1\r\na=fmtp:18 annexb=no\r\na=rtpmap:100 telephone-event/16000\r\n\
        a=ptime:20\r\na=sendrecv\r\n";
    // rtpengine: o=, s= and c= where they stood (c= ours); unknown attributes first, then each
    // format's rtpmap (RFC 3551's for a static type) and fmtp, the direction, a=rtcp, a=ptime.
    assert_eq!(
        sdp_of(&mut ng, request("offer", "f1", offer, &[])),
        [
            "v=0",
            "o=phone 7 7 IN IP4 192.0.2.10",
            "s=call",
            "c=IN IP4 203.0.113.1",
            "t=0 0",
            "m=audio PORT RTP/AVP 96 18 0 100 13",
            "a=x-vendor:1",
            "a=rtpmap:96 AMR/8000",
            "a=fmtp:96 octet-align=1",
            "a=rtpmap:18 G729/8000",
            "a=fmtp:18 annexb=no",
            "a=rtpmap:0 PCMU/8000",
            "a=rtpmap:100 telephone-event/16000",
            "a=rtpmap:13 CN/8000",
            "a=sendrecv",
            "a=rtcp:PORT",
            "a=ptime:20",
        ]
    );
    // The answer passes on what the callee took, AMR included.
    let answer = "v=0\r\no=pbx 1 1 IN IP4 192.0.2.20\r\ns=pbx\r\nc=IN IP4 192.0.2.20\r\nt=0 0\r\n\
        m=audio 6000 RTP/AVP 96 100\r\na=rtpmap:96 AMR/8000\r\na=fmtp:96 octet-align=1\r\n\
        a=rtpmap:100 telephone-event/16000\r\na=sendrecv\r\n";
    assert_eq!(
        sdp_of(&mut ng, request("answer", "f1", answer, &[])),
        [
            "v=0",
            "o=pbx 1 1 IN IP4 192.0.2.20",
            "s=pbx",
            "c=IN IP4 203.0.113.1",
            "t=0 0",
            "m=audio PORT RTP/AVP 96 100",
            "a=rtpmap:96 AMR/8000",
            "a=fmtp:96 octet-align=1",
            "a=rtpmap:100 telephone-event/16000",
            "a=sendrecv",
            "a=rtcp:PORT",
        ]
    );
}

#[test]
fn rejected_sections_keep_port_zero_and_tcp_sections_pass_through() {
    let (_server, mut ng) = start();
    let offer = "v=0\r\no=- 1 1 IN IP4 192.0.2.10\r\ns=-\r\nt=0 0\r\nc=IN IP4 192.0.2.10\r\n\
        m=audio 5004 RTP/AVP 8\r\nm=video 0 RTP/AVP 96\r\n\
        m=message 5010 TCP/MSRP *\r\na=path:msrp://192.0.2.10:5010/x;tcp\r\n";
    // rtpengine: the session c= after t= is kept where it stood; the rejected video stays
    // rejected in its place (RFC 3264); MSRP over TCP is not relayed: passed on as it came,
    // with its peer's address (the session's, which now names ours) written in it.
    assert_eq!(
        sdp_of(&mut ng, request("offer", "r1", offer, &[])),
        [
            "v=0",
            "o=- 1 1 IN IP4 192.0.2.10",
            "s=-",
            "t=0 0",
            "c=IN IP4 203.0.113.1",
            "m=audio PORT RTP/AVP 8",
            "a=rtpmap:8 PCMA/8000",
            "a=sendrecv",
            "a=rtcp:PORT",
            "m=video 0 RTP/AVP 96",
            "m=message 5010 TCP/MSRP *",
            "c=IN IP4 192.0.2.10",
            "a=path:msrp://192.0.2.10:5010/x;tcp",
        ]
    );
}

#[test]
fn origin_is_replaced_only_when_asked() {
    let (_server, mut ng) = start();
    let offer =
        "v=0\r\no=alice 5 6 IN IP4 192.0.2.10\r\ns=x\r\nt=0 0\r\nm=audio 5004 RTP/AVP 0\r\n\
        c=IN IP4 192.0.2.10\r\n";
    let flags = [("replace", Bencode::List(vec![s("origin")]))];
    let got = sdp_of(&mut ng, request("offer", "o1", offer, &flags));
    // `replace: origin`: the o= line's address is ours, the rest of it the caller's.
    assert_eq!(got[1], "o=alice 5 6 IN IP4 203.0.113.1");
    assert_eq!(got[2], "s=x");
}

#[test]
fn a_hold_with_a_zero_address_keeps_it_and_receives_nothing() {
    let (_server, mut ng) = start();
    let offer = "v=0\r\no=- 1 1 IN IP4 192.0.2.10\r\ns=-\r\nc=IN IP4 0.0.0.0\r\nt=0 0\r\n\
        m=audio 5004 RTP/AVP 0\r\na=sendrecv\r\n";
    // rtpengine keeps 0.0.0.0 and writes the old-style hold as the direction it means.
    assert_eq!(
        sdp_of(&mut ng, request("offer", "h1", offer, &[])),
        [
            "v=0",
            "o=- 1 1 IN IP4 192.0.2.10",
            "s=-",
            "c=IN IP4 0.0.0.0",
            "t=0 0",
            "m=audio PORT RTP/AVP 0",
            "a=rtpmap:0 PCMU/8000",
            "a=sendonly",
            "a=rtcp:PORT",
        ]
    );
    // `original sendrecv`: the direction passes through where it stood.
    let flags = [("flags", Bencode::List(vec![s("original sendrecv")]))];
    let got = sdp_of(&mut ng, request("offer", "h2", offer, &flags));
    assert_eq!(
        got[5..],
        [
            "m=audio PORT RTP/AVP 0",
            "a=sendrecv",
            "a=rtpmap:0 PCMU/8000",
            "a=rtcp:PORT"
        ]
    );
}

#[test]
fn a_zero_address_is_replaced_when_asked_written_in_the_other_family_and_no_hold_with_ice() {
    let (_server, mut ng) = start_on(vec![
        "127.0.0.1!203.0.113.1".into(),
        "::1!2001:db8:4321::1".into(),
    ]);
    let held = "v=0\r\no=- 1 1 IN IP4 192.0.2.10\r\ns=-\r\nc=IN IP4 0.0.0.0\r\nt=0 0\r\n\
        m=audio 5004 RTP/AVP 8\r\n";
    let conn = |sdp: &[String]| sdp.iter().find(|l| l.starts_with("c=")).cloned();
    let dir = |sdp: &[String]| {
        sdp.iter()
            .find(|l| l.ends_with("send") || l.contains("sendonly") || l.contains("sendrecv"))
            .cloned()
    };
    // `replace: zero address`: our address, the section still on hold.
    let flags = [("replace", Bencode::List(vec![s("zero address")]))];
    let got = sdp_of(&mut ng, request("offer", "z1", held, &flags));
    assert_eq!(
        conn(&got).as_deref(),
        Some("c=IN IP4 203.0.113.1"),
        "{got:?}"
    );
    assert_eq!(dir(&got).as_deref(), Some("a=sendonly"), "{got:?}");
    // Towards the other family, a hold's null address is that family's.
    let flags = [("address-family", s("IP6"))];
    let got = sdp_of(&mut ng, request("offer", "z2", held, &flags));
    assert_eq!(conn(&got).as_deref(), Some("c=IN IP6 ::"), "{got:?}");
    // Port 9 at the null address with ICE credentials is trickle ICE's placeholder (RFC
    // 8840): no hold, our address.
    let trickle = "v=0\r\no=- 1 1 IN IP4 192.0.2.10\r\ns=-\r\nc=IN IP4 0.0.0.0\r\nt=0 0\r\n\
        m=audio 9 RTP/AVP 8\r\na=ice-ufrag:Ci7n\r\na=ice-pwd:l9QndxLG6OycZRcQe9zcT95c\r\n\
        a=ice-options:trickle\r\n";
    let flags = [("ICE", s("remove"))];
    let got = sdp_of(&mut ng, request("offer", "z3", trickle, &flags));
    assert_eq!(
        conn(&got).as_deref(),
        Some("c=IN IP4 203.0.113.1"),
        "{got:?}"
    );
    assert_eq!(dir(&got).as_deref(), Some("a=sendrecv"), "{got:?}");
    // The same from an IPv6 side, ICE kept: our address and our candidates are the IPv6
    // interface's.
    let v6 = trickle.replace("c=IN IP4 0.0.0.0", "c=IN IP6 ::");
    let got = sdp_of(&mut ng, request("offer", "z4", &v6, &[]));
    assert_eq!(
        conn(&got).as_deref(),
        Some("c=IN IP6 2001:db8:4321::1"),
        "{got:?}"
    );
    let candidates: Vec<&String> = got
        .iter()
        .filter(|l| l.starts_with("a=candidate:"))
        .collect();
    assert!(!candidates.is_empty(), "{got:?}");
    for c in candidates {
        assert!(c.contains(" 2001:db8:4321::1 "), "{c} in {got:?}");
    }
}

#[test]
fn sdes_keeps_the_callers_suites_and_tags_first_and_takes_an_answer_by_suite() {
    let (_server, mut ng) = start();
    let offer = "v=0\r\no=- 1 1 IN IP4 192.0.2.10\r\ns=-\r\nt=0 0\r\nm=audio 5004 RTP/SAVP 0\r\n\
        c=IN IP4 192.0.2.10\r\n\
        a=crypto:3 AES_CM_128_HMAC_SHA1_32 inline:VAzLKvoE3jG9cdH/AZsl/ZqWNXrUzyM4Gw6chrFr\r\n\
        a=crypto:7 AES_CM_128_HMAC_SHA1_80 inline:cJOJ7kxQjhFBp2fP6AYjs3vKw7CeBdWZCj0isbJv\r\n";
    let flags = [("SDES", Bencode::List(vec![s("no-AEAD_AES_128_GCM")]))];
    let got = sdp_of(&mut ng, request("offer", "s1", offer, &flags));
    // rtpengine: the caller's suites with the caller's tags, then its own suites in its order,
    // numbered on from the highest tag (tags 15 and 16 go to the NULL suites, which the gateway
    // offers only where `sdes_suites` enables them); `no-…` leaves a suite out.
    let crypto: Vec<&str> = got
        .iter()
        .filter(|l| l.starts_with("a=crypto"))
        .map(String::as_str)
        .collect();
    assert_eq!(
        crypto,
        [
            "a=crypto:3 AES_CM_128_HMAC_SHA1_32 inline:KEY",
            "a=crypto:7 AES_CM_128_HMAC_SHA1_80 inline:KEY",
            "a=crypto:8 AEAD_AES_256_GCM inline:KEY",
            "a=crypto:9 AES_256_CM_HMAC_SHA1_80 inline:KEY",
            "a=crypto:10 AES_256_CM_HMAC_SHA1_32 inline:KEY",
            "a=crypto:11 AES_192_CM_HMAC_SHA1_80 inline:KEY",
            "a=crypto:12 AES_192_CM_HMAC_SHA1_32 inline:KEY",
            "a=crypto:13 F8_128_HMAC_SHA1_80 inline:KEY",
            "a=crypto:14 F8_128_HMAC_SHA1_32 inline:KEY",
        ]
    );
    // An answer naming a suite we offered under another tag is taken, and the caller is
    // answered in that suite under its own tag.
    let answer = "v=0\r\no=- 2 2 IN IP4 192.0.2.20\r\ns=-\r\nt=0 0\r\nm=audio 6000 RTP/SAVP 0\r\n\
        c=IN IP4 192.0.2.20\r\n\
        a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:dfgadgdfgdfgdfgd6AYjs3vKw7CeBdWZCj0isbJv\r\n";
    let got = sdp_of(&mut ng, request("answer", "s1", answer, &[]));
    assert_eq!(
        got.iter()
            .filter(|l| l.starts_with("a=crypto"))
            .collect::<Vec<_>>(),
        ["a=crypto:7 AES_CM_128_HMAC_SHA1_80 inline:KEY"]
    );
}

/// Our `a=fingerprint` line with its hash kept and its digest a placeholder.
fn fingerprint_of(sdp: &[String]) -> Vec<String> {
    sdp.iter()
        .filter_map(|l| l.strip_prefix("a=fingerprint:"))
        .map(|v| format!("{} DIGEST", v.split(' ').next().unwrap_or_default()))
        .collect()
}

#[test]
fn sdes_off_towards_srtp_offers_dtls_srtp_and_a_dtls_caller_without_ice_is_answered_as_a_client() {
    let (_server, mut ng) = start();
    // rtpengine: with `SDES: off`, an `RTP/SAVP` target is offered DTLS-SRTP on the leg's
    // own ports: `a=setup:actpass` and our fingerprint (SHA-256 unless `DTLS-fingerprint`
    // names another hash), no crypto line, RTCP on its own port as the caller has it.
    let plain = "v=0\r\no=- 1 1 IN IP4 192.0.2.10\r\ns=-\r\nc=IN IP4 192.0.2.10\r\nt=0 0\r\n\
        m=audio 5004 RTP/AVP 0\r\na=sendrecv\r\n";
    let flags = [
        ("transport-protocol", s("RTP/SAVP")),
        ("SDES", Bencode::List(vec![s("off")])),
        ("ICE", s("remove")),
        ("DTLS-fingerprint", s("SHA-1")),
    ];
    let got = sdp_of(&mut ng, request("offer", "d1", plain, &flags));
    let m = got.iter().position(|l| l.starts_with("m=")).unwrap();
    assert_eq!(
        got[m..]
            .iter()
            .filter(|l| !l.starts_with("a=fingerprint"))
            .collect::<Vec<_>>(),
        [
            "m=audio PORT RTP/SAVP 0",
            "a=rtpmap:0 PCMU/8000",
            "a=sendrecv",
            "a=rtcp:PORT",
            "a=setup:actpass",
        ]
    );
    assert_eq!(fingerprint_of(&got), ["sha-1 DIGEST"]);
    // The callee takes the server's role: the caller is answered in plain RTP.
    let answer = "v=0\r\no=- 2 2 IN IP4 192.0.2.20\r\ns=-\r\nc=IN IP4 192.0.2.20\r\nt=0 0\r\n\
        m=audio 6000 RTP/SAVP 0\r\na=setup:passive\r\n\
        a=fingerprint:sha-256 DA:89:F7:04:38:D9:04:E1:9E:25:1A:43:87:8D:F5:BD:6E:4C:BB:88:12:A6:D5:FA:B1:4A:34:BC:32:C0:05:FE\r\n";
    let got = sdp_of(&mut ng, request("answer", "d1", answer, &[]));
    assert!(
        got.contains(&"m=audio PORT RTP/AVP 0".to_owned()),
        "{got:?}"
    );
    assert!(fingerprint_of(&got).is_empty(), "{got:?}");

    // With SDES on, DTLS-SRTP is offered beside it (the answer takes either), unless
    // `DTLS: off`.
    for (call, dtls_off) in [("d4", false), ("d5", true)] {
        let mut flags = vec![("transport-protocol", s("RTP/SAVP")), ("ICE", s("remove"))];
        if dtls_off {
            flags.push(("DTLS", s("off")));
        }
        let got = sdp_of(&mut ng, request("offer", call, plain, &flags));
        assert!(got.iter().any(|l| l.starts_with("a=crypto:")), "{got:?}");
        assert_eq!(
            got.contains(&"a=setup:actpass".to_owned()),
            !dtls_off,
            "{got:?}"
        );
        let expected: &[&str] = if dtls_off { &[] } else { &["sha-256 DIGEST"] };
        assert_eq!(fingerprint_of(&got), expected, "{call}");
    }

    // A caller offering DTLS-SRTP without ICE (a SIP phone, RFC 5763) to a plain callee:
    // answered as the DTLS client (`active`), or the server with `DTLS-reverse: passive`.
    let dtls = "v=0\r\no=- 3 3 IN IP4 192.0.2.30\r\ns=-\r\nc=IN IP4 192.0.2.30\r\nt=0 0\r\n\
        m=audio 7000 UDP/TLS/RTP/SAVPF 0\r\na=setup:actpass\r\n\
        a=fingerprint:SHA-256 DA:89:F7:04:38:D9:04:E1:9E:25:1A:43:87:8D:F5:BD:6E:4C:BB:88:12:A6:D5:FA:B1:4A:34:BC:32:C0:05:FE\r\n";
    let callee = "v=0\r\no=- 4 4 IN IP4 192.0.2.40\r\ns=-\r\nc=IN IP4 192.0.2.40\r\nt=0 0\r\n\
        m=audio 8000 RTP/AVP 0\r\n";
    for (call, reverse, setup) in [
        ("d2", None, "a=setup:active"),
        ("d3", Some("passive"), "a=setup:passive"),
    ] {
        let mut flags = vec![("transport-protocol", s("RTP/AVP")), ("ICE", s("remove"))];
        if let Some(r) = reverse {
            flags.push(("DTLS-reverse", s(r)));
        }
        let got = sdp_of(&mut ng, request("offer", call, dtls, &flags));
        assert!(
            got.contains(&"m=audio PORT RTP/AVP 0".to_owned()),
            "{got:?}"
        );
        let got = sdp_of(
            &mut ng,
            request("answer", call, callee, &[("ICE", s("remove"))]),
        );
        let m = got.iter().position(|l| l.starts_with("m=")).unwrap();
        assert_eq!(
            got[m..]
                .iter()
                .filter(|l| !l.starts_with("a=fingerprint"))
                .collect::<Vec<_>>(),
            [
                "m=audio PORT UDP/TLS/RTP/SAVPF 0",
                "a=rtpmap:0 PCMU/8000",
                "a=sendrecv",
                "a=rtcp:PORT",
                setup,
            ],
            "{call}"
        );
        assert_eq!(fingerprint_of(&got), ["sha-256 DIGEST"], "{call}");
    }
}

#[test]
fn an_answers_transport_protocol_names_the_offerers_transport() {
    let (_server, mut ng) = start();
    // rtpengine: an answer's `transport-protocol` names the transport the offerer is
    // answered in (a feedback profile of the same keying); `accept` passes the answerer's on.
    let plain = "v=0\r\no=- 1 1 IN IP4 192.0.2.10\r\ns=-\r\nc=IN IP4 192.0.2.10\r\nt=0 0\r\n\
        m=audio 5004 RTP/AVP 0\r\n";
    let callee = "v=0\r\no=- 2 2 IN IP4 192.0.2.20\r\ns=-\r\nc=IN IP4 192.0.2.20\r\nt=0 0\r\n\
        m=audio 6000 RTP/AVPF 0\r\n";
    for (call, flag, proto) in [
        ("t1", None, "RTP/AVP"),
        ("t2", Some("RTP/AVPF"), "RTP/AVPF"),
        ("t3", Some("accept"), "RTP/AVPF"),
        // Another keying is not named: the offerer's leg is plain RTP.
        ("t4", Some("RTP/SAVP"), "RTP/AVP"),
    ] {
        sdp_of(
            &mut ng,
            request("offer", call, plain, &[("ICE", s("remove"))]),
        );
        let mut flags = vec![("ICE", s("remove"))];
        if let Some(f) = flag {
            flags.push(("transport-protocol", s(f)));
        }
        let got = sdp_of(&mut ng, request("answer", call, callee, &flags));
        assert!(
            got.contains(&format!("m=audio PORT {proto} 0")),
            "{call}: {got:?}"
        );
        assert!(
            !got.iter().any(|l| l.starts_with("a=crypto")),
            "{call}: {got:?}"
        );
    }
}

#[test]
fn an_answers_codec_strip_applies_to_our_answer_less_what_offer_keeps() {
    let (_server, mut ng) = start();
    // rtpengine applies an answer's `strip` (kept by `offer`) to what it answers the offerer.
    let caller = "v=0\r\no=- 1 1 IN IP4 192.0.2.10\r\ns=-\r\nc=IN IP4 192.0.2.10\r\nt=0 0\r\n\
        m=audio 5004 RTP/AVP 8 0 96\r\na=rtpmap:96 telephone-event/8000\r\n";
    let callee = "v=0\r\no=- 2 2 IN IP4 192.0.2.20\r\ns=-\r\nc=IN IP4 192.0.2.20\r\nt=0 0\r\n\
        m=audio 6000 RTP/AVP 8 96\r\na=rtpmap:96 telephone-event/8000\r\n";
    sdp_of(&mut ng, request("offer", "k1", caller, &[]));
    let codec = Bencode::Dict(vec![
        (b"strip".to_vec(), Bencode::List(vec![s("all")])),
        (b"offer".to_vec(), Bencode::List(vec![s("PCMA")])),
    ]);
    let got = sdp_of(
        &mut ng,
        request("answer", "k1", callee, &[("codec", codec)]),
    );
    assert!(
        got.contains(&"m=audio PORT RTP/AVP 8".to_owned()),
        "{got:?}"
    );
    assert!(
        !got.iter().any(|l| l.contains("telephone-event")),
        "{got:?}"
    );
}

#[test]
fn the_offerer_is_answered_in_a_suite_its_sdes_flags_leave_and_with_its_mid() {
    let (_server, mut ng) = start();
    // rtpengine: `SDES: no-…` on the offer also keeps that suite out of the answer to the
    // offerer (its first suite the flags leave), and an answer without `a=mid` gets the
    // offer's (RFC 5888).
    let caller = "v=0\r\no=- 1 1 IN IP4 192.0.2.10\r\ns=-\r\nc=IN IP4 192.0.2.10\r\nt=0 0\r\n\
        m=audio 5004 RTP/SAVP 0\r\na=mid:1\r\n\
        a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:cJOJ7kxQjhFBp2fP6AYjs3vKw7CeBdWZCj0isbJv\r\n\
        a=crypto:2 AES_CM_128_HMAC_SHA1_32 inline:VAzLKvoE3jG9cdH/AZsl/ZqWNXrUzyM4Gw6chrFr\r\n";
    let callee = "v=0\r\no=- 2 2 IN IP4 192.0.2.20\r\ns=-\r\nc=IN IP4 192.0.2.20\r\nt=0 0\r\n\
        m=audio 6000 RTP/AVP 0\r\n";
    let flags = [
        ("transport-protocol", s("RTP/AVP")),
        ("SDES", Bencode::List(vec![s("no-AES_CM_128_HMAC_SHA1_80")])),
    ];
    sdp_of(&mut ng, request("offer", "m1", caller, &flags));
    let got = sdp_of(&mut ng, request("answer", "m1", callee, &[]));
    assert_eq!(
        crypto_lines(&got),
        ["a=crypto:2 AES_CM_128_HMAC_SHA1_32 inline:KEY"]
    );
    assert!(got.contains(&"a=mid:1".to_owned()), "{got:?}");
}

#[test]
fn a_new_offer_towards_a_dtls_srtp_side_says_actpass_again() {
    let (_server, mut ng) = start();
    // RFC 8842 §5.3, as rtpengine writes it: every offer says `actpass`; the answer keeps the
    // association's roles.
    let plain = |v: u32| {
        format!(
            "v=0\r\no=- 1 {v} IN IP4 192.0.2.10\r\ns=-\r\nc=IN IP4 192.0.2.10\r\nt=0 0\r\n\
             m=audio 5004 RTP/AVP 0\r\na=sendrecv\r\n"
        )
    };
    let flags = [
        ("transport-protocol", s("RTP/SAVP")),
        ("SDES", Bencode::List(vec![s("off")])),
        ("ICE", s("remove")),
    ];
    let got = sdp_of(&mut ng, request("offer", "r1", &plain(1), &flags));
    assert!(got.contains(&"a=setup:actpass".to_owned()), "{got:?}");
    let answer = "v=0\r\no=- 2 2 IN IP4 192.0.2.20\r\ns=-\r\nc=IN IP4 192.0.2.20\r\nt=0 0\r\n\
        m=audio 6000 RTP/SAVP 0\r\na=setup:passive\r\n\
        a=fingerprint:sha-256 DA:89:F7:04:38:D9:04:E1:9E:25:1A:43:87:8D:F5:BD:6E:4C:BB:88:12:A6:D5:FA:B1:4A:34:BC:32:C0:05:FE\r\n";
    sdp_of(&mut ng, request("answer", "r1", answer, &[]));
    let again = sdp_of(&mut ng, request("offer", "r1", &plain(2), &[]));
    assert!(
        again.contains(&"m=audio PORT RTP/SAVP 0".to_owned()),
        "{again:?}"
    );
    assert!(again.contains(&"a=setup:actpass".to_owned()), "{again:?}");
    assert_eq!(fingerprint_of(&again), ["sha-256 DIGEST"]);
    // The same roles answered: taken; the other way round: refused.
    sdp_of(&mut ng, request("answer", "r1", answer, &[]));
    sdp_of(&mut ng, request("offer", "r1", &plain(3), &[]));
    let flipped = answer.replace("passive", "active");
    assert!(ng.call(request("answer", "r1", &flipped, &[])).is_err());
}

#[test]
fn a_later_answer_to_the_same_offer_is_taken_with_its_codecs() {
    let (_server, mut ng) = start();
    let offer = "v=0\r\no=- 1 1 IN IP4 192.0.2.10\r\ns=-\r\nc=IN IP4 192.0.2.10\r\nt=0 0\r\n\
        m=audio 5004 RTP/AVP 0 8 9\r\n";
    sdp_of(&mut ng, request("offer", "d1", offer, &[]));
    let answer = |pt: &str| {
        format!(
            "v=0\r\no=- 2 2 IN IP4 192.0.2.20\r\ns=-\r\nc=IN IP4 192.0.2.20\r\nt=0 0\r\n\
             m=audio 6000 RTP/AVP {pt}\r\n"
        )
    };
    // An early answer (a 183) with PCMU, then the final one (the 200) with PCMA: rtpengine
    // takes both, and answers the caller with each.
    let first = sdp_of(&mut ng, request("answer", "d1", &answer("0"), &[]));
    assert!(
        first.contains(&"m=audio PORT RTP/AVP 0".to_owned()),
        "{first:?}"
    );
    let second = sdp_of(&mut ng, request("answer", "d1", &answer("8"), &[]));
    assert_eq!(
        second[5..],
        [
            "m=audio PORT RTP/AVP 8",
            "a=rtpmap:8 PCMA/8000",
            "a=sendrecv",
            "a=rtcp:PORT"
        ]
    );
}

#[test]
fn rtcp_mux_towards_the_caller_follows_the_callees_answer() {
    let (_server, mut ng) = start();
    let offer = "v=0\r\no=- 1 1 IN IP4 192.0.2.10\r\ns=-\r\nc=IN IP4 192.0.2.10\r\nt=0 0\r\n\
        m=audio 5004 RTP/AVP 0\r\na=rtcp-mux\r\n";
    let got = sdp_of(&mut ng, request("offer", "m1", offer, &[]));
    // Offered on to the callee, with a=rtcp for a callee that does not mux.
    assert_eq!(got[7..], ["a=sendrecv", "a=rtcp:PORT", "a=rtcp-mux"]);
    let answer = "v=0\r\no=- 2 2 IN IP4 192.0.2.20\r\ns=-\r\nc=IN IP4 192.0.2.20\r\nt=0 0\r\n\
        m=audio 6000 RTP/AVP 0\r\n";
    let got = sdp_of(&mut ng, request("answer", "m1", answer, &[]));
    // The callee did not mux: neither is the caller answered with it.
    assert_eq!(got[7..], ["a=sendrecv", "a=rtcp:PORT"]);
    // `rtcp-mux: demux`: not offered to the callee, and the caller's mux taken all the same.
    let demux = [("rtcp-mux", Bencode::List(vec![s("demux")]))];
    let got = sdp_of(&mut ng, request("offer", "m2", offer, &demux));
    assert_eq!(got[7..], ["a=sendrecv", "a=rtcp:PORT"]);
    let got = sdp_of(&mut ng, request("answer", "m2", answer, &[]));
    assert_eq!(got[7..], ["a=sendrecv", "a=rtcp:PORT", "a=rtcp-mux"]);
}

#[test]
fn transcoding_appends_its_codecs_after_the_callers_and_answers_the_caller_in_its_own() {
    let (_server, mut ng) = start();
    let offer = "v=0\r\no=- 1 1 IN IP4 192.0.2.10\r\ns=-\r\nc=IN IP4 192.0.2.10\r\nt=0 0\r\n\
        m=audio 5004 RTP/AVP 0 101\r\na=rtpmap:101 telephone-event/8000\r\na=fmtp:101 0-15\r\n";
    let flags = [(
        "codec",
        Bencode::Dict(vec![(
            b"transcode".to_vec(),
            Bencode::List(vec![s("PCMA")]),
        )]),
    )];
    // rtpengine: the caller's codecs first, the transcoding target after its audio codecs and
    // before its telephone-events.
    let got = sdp_of(&mut ng, request("offer", "t1", offer, &flags));
    assert_eq!(got[5], "m=audio PORT RTP/AVP 0 8 101");
    // The callee takes only PCMA: the caller is answered in its own PCMU (transcoded).
    let answer = "v=0\r\no=- 2 2 IN IP4 192.0.2.20\r\ns=-\r\nc=IN IP4 192.0.2.20\r\nt=0 0\r\n\
        m=audio 6000 RTP/AVP 8\r\n";
    let got = sdp_of(&mut ng, request("answer", "t1", answer, &[]));
    assert_eq!(got[5], "m=audio PORT RTP/AVP 0");
    // A callee that takes a codec the caller offered is answered as it answered: no
    // transcoding.
    sdp_of(&mut ng, request("offer", "t2", offer, &flags));
    let answer = answer.replace(
        "RTP/AVP 8\r\n",
        "RTP/AVP 0 101\r\na=rtpmap:101 telephone-event/8000\r\n",
    );
    let got = sdp_of(&mut ng, request("answer", "t2", &answer, &[]));
    assert_eq!(got[5], "m=audio PORT RTP/AVP 0 101");
}

#[test]
fn a_transcoded_answer_and_single_codec_answer_the_caller_in_its_first_codec() {
    let (_server, mut ng) = start();
    let offer = "v=0\r\no=- 1 1 IN IP4 192.0.2.10\r\ns=-\r\nc=IN IP4 192.0.2.10\r\nt=0 0\r\n\
        m=audio 5004 RTP/AVP 0 8 101\r\na=rtpmap:101 telephone-event/8000\r\n";
    let transcode = [(
        "codec",
        Bencode::Dict(vec![(
            b"transcode".to_vec(),
            Bencode::List(vec![s("G722")]),
        )]),
    )];
    // The callee takes only the transcoding target: rtpengine answers the caller in one of
    // its codecs, its first, not every codec it could transcode.
    sdp_of(&mut ng, request("offer", "sc1", offer, &transcode));
    let g722 = "v=0\r\no=- 2 2 IN IP4 192.0.2.20\r\ns=-\r\nc=IN IP4 192.0.2.20\r\nt=0 0\r\n\
        m=audio 6000 RTP/AVP 9\r\n";
    let got = sdp_of(&mut ng, request("answer", "sc1", g722, &[]));
    assert_eq!(got[5], "m=audio PORT RTP/AVP 0", "{got:?}");
    // `single codec`: a relayed answer of several codecs reaches the caller with its first
    // (and its telephone-events).
    sdp_of(&mut ng, request("offer", "sc2", offer, &[]));
    let both = "v=0\r\no=- 2 2 IN IP4 192.0.2.20\r\ns=-\r\nc=IN IP4 192.0.2.20\r\nt=0 0\r\n\
        m=audio 6000 RTP/AVP 0 8 101\r\na=rtpmap:101 telephone-event/8000\r\n";
    let single = [("flags", Bencode::List(vec![s("single codec")]))];
    let got = sdp_of(&mut ng, request("answer", "sc2", both, &single));
    assert_eq!(got[5], "m=audio PORT RTP/AVP 0 101", "{got:?}");
    // Without it, every codec the callee took.
    sdp_of(&mut ng, request("offer", "sc3", offer, &[]));
    let got = sdp_of(&mut ng, request("answer", "sc3", both, &[]));
    assert_eq!(got[5], "m=audio PORT RTP/AVP 0 8 101", "{got:?}");
    // Answered in one codec, the caller keeps the telephone-events at that codec's clock
    // only, where it has some: its 48 kHz ones beside Opus, not its 8 kHz ones.
    let opus = "v=0\r\no=- 1 1 IN IP4 192.0.2.10\r\ns=-\r\nc=IN IP4 192.0.2.10\r\nt=0 0\r\n\
        m=audio 5004 RTP/AVP 111 8 110 101\r\na=rtpmap:111 opus/48000/2\r\n\
        a=rtpmap:110 telephone-event/48000\r\na=rtpmap:101 telephone-event/8000\r\n";
    let mask = [(
        "codec",
        Bencode::Dict(vec![(b"mask".to_vec(), Bencode::List(vec![s("opus")]))]),
    )];
    sdp_of(&mut ng, request("offer", "sc4", opus, &mask));
    let pcma = "v=0\r\no=- 2 2 IN IP4 192.0.2.20\r\ns=-\r\nc=IN IP4 192.0.2.20\r\nt=0 0\r\n\
        m=audio 6000 RTP/AVP 8 101\r\na=rtpmap:101 telephone-event/8000\r\n";
    let got = sdp_of(&mut ng, request("answer", "sc4", pcma, &single));
    assert_eq!(got[5], "m=audio PORT RTP/AVP 8 101", "{got:?}");
}

#[test]
fn loop_protect_marks_our_sdp_and_passes_it_on_when_it_comes_back() {
    let (_server, mut ng) = start();
    let offer = "v=0\r\no=- 1 1 IN IP4 192.0.2.10\r\ns=-\r\nc=IN IP4 192.0.2.10\r\nt=0 0\r\n\
        m=audio 5004 RTP/AVP 0\r\n";
    let flags = [("flags", Bencode::List(vec![s("loop-protect")]))];
    let r = ng.call(request("offer", "l1", offer, &flags)).unwrap();
    let ours = r["sdp"].clone();
    // rtpengine: `a=rtpengine:` and 12 hex digits, the last session line.
    let mark = lines(&ours)
        .into_iter()
        .find(|l| l.starts_with("a=rtpengine:"))
        .expect("the mark");
    assert_eq!(mark.len(), "a=rtpengine:".len() + 12, "{mark}");
    assert_eq!(lines(&ours)[5], mark);
    // Our SDP offered back to us (a proxy looping the call): passed on untouched.
    let again = ng.call(request("offer", "l2", &ours, &flags)).unwrap();
    assert_eq!(again["sdp"], ours);
}

/// The `a=crypto` lines of an SDP of ours, keys as placeholders.
fn crypto_lines(sdp: &[String]) -> Vec<&str> {
    sdp.iter()
        .filter(|l| l.starts_with("a=crypto"))
        .map(String::as_str)
        .collect()
}

#[test]
fn opportunistic_srtp_is_offered_on_rtp_avp_and_answered_as_the_callee_took_it() {
    let (_server, mut ng) = start();
    // RFC 8643: crypto offered on RTP/AVP. rtpengine offers the callee SDES on RTP/AVP too,
    // the caller's suite first under its tag, then its own.
    let offer = "v=0\r\no=- 1 1 IN IP4 192.0.2.10\r\ns=-\r\nt=0 0\r\nm=audio 5004 RTP/AVP 0\r\n\
        c=IN IP4 192.0.2.10\r\n\
        a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:Qk0TvVeyfqfjFd/YebnyyklqSEhJntpVKV1KAhHa\r\n";
    let with_crypto = "v=0\r\no=- 2 2 IN IP4 192.0.2.20\r\ns=-\r\nt=0 0\r\n\
        m=audio 6000 RTP/AVP 0\r\nc=IN IP4 192.0.2.20\r\n\
        a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:Kl3GFJ5Gqz5x07xYkoyHODkVkSpiplZnXsQIw+Q7\r\n";
    let without = "v=0\r\no=- 2 2 IN IP4 192.0.2.20\r\ns=-\r\nt=0 0\r\n\
        m=audio 6000 RTP/AVP 0\r\nc=IN IP4 192.0.2.20\r\n";
    let got = sdp_of(&mut ng, request("offer", "o1", offer, &[]));
    assert_eq!(got[4], "m=audio PORT RTP/AVP 0", "{got:?}");
    let crypto = crypto_lines(&got);
    assert_eq!(crypto[0], "a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:KEY");
    assert!(
        crypto.len() > 1,
        "the gateway's other suites follow: {got:?}"
    );
    // The callee takes it: the caller is answered with SDES on RTP/AVP.
    let got = sdp_of(&mut ng, request("answer", "o1", with_crypto, &[]));
    assert_eq!(got[4], "m=audio PORT RTP/AVP 0", "{got:?}");
    assert_eq!(
        crypto_lines(&got),
        ["a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:KEY"]
    );
    // The callee declines (no crypto in its answer): plain RTP both ways.
    sdp_of(&mut ng, request("offer", "o2", offer, &[]));
    let got = sdp_of(&mut ng, request("answer", "o2", without, &[]));
    assert!(crypto_lines(&got).is_empty(), "{got:?}");
    // … unless `OSRTP: accept`: the caller gets SDES, the callee plain RTP.
    sdp_of(&mut ng, request("offer", "o3", offer, &[]));
    let accept = [("OSRTP", Bencode::List(vec![s("accept")]))];
    let got = sdp_of(&mut ng, request("answer", "o3", without, &accept));
    assert_eq!(
        crypto_lines(&got),
        ["a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:KEY"]
    );
    // `OSRTP: offer` makes a plain offer opportunistic towards the callee.
    let plain = "v=0\r\no=- 1 1 IN IP4 192.0.2.10\r\ns=-\r\nt=0 0\r\nm=audio 5004 RTP/AVP 0\r\n\
        c=IN IP4 192.0.2.10\r\n";
    let flags = [("OSRTP", Bencode::List(vec![s("offer")]))];
    let got = sdp_of(&mut ng, request("offer", "o4", plain, &flags));
    assert_eq!(got[4], "m=audio PORT RTP/AVP 0", "{got:?}");
    assert_eq!(
        crypto_lines(&got)[0],
        "a=crypto:1 AEAD_AES_256_GCM inline:KEY"
    );
    let got = sdp_of(&mut ng, request("answer", "o4", without, &[]));
    assert!(crypto_lines(&got).is_empty(), "{got:?}");
}

#[test]
fn ice_optional_adds_ice_to_an_offer_but_an_answer_only_when_the_answerer_did_ice() {
    let (_server, mut ng) = start();
    let plain = "v=0\r\no=- 1 1 IN IP4 192.0.2.10\r\ns=-\r\nt=0 0\r\nm=audio 5004 RTP/AVP 0\r\n\
        c=IN IP4 192.0.2.10\r\n";
    let optional = [("ICE", s("optional"))];
    let has_ice = |sdp: &[String]| sdp.iter().any(|l| l.starts_with("a=ice-ufrag:"));
    let got = sdp_of(&mut ng, request("offer", "io1", plain, &optional));
    assert!(has_ice(&got), "an offer gets ICE: {got:?}");
    let answer = plain.replace("192.0.2.10", "192.0.2.20");
    let got = sdp_of(&mut ng, request("answer", "io1", &answer, &optional));
    assert!(!has_ice(&got), "the callee did no ICE: {got:?}");
}

#[test]
fn accept_and_consume_name_the_codec_the_caller_is_answered_in() {
    let (_server, mut ng) = start();
    let offer = "v=0\r\no=- 1 1 IN IP4 192.0.2.10\r\ns=-\r\nt=0 0\r\nm=audio 5004 RTP/AVP 0 8\r\n\
        c=IN IP4 192.0.2.10\r\n";
    let pcma = "v=0\r\no=- 2 2 IN IP4 192.0.2.20\r\ns=-\r\nt=0 0\r\nm=audio 6000 RTP/AVP 8\r\n\
        c=IN IP4 192.0.2.20\r\n";
    for (call, op) in [("ac1", "accept"), ("ac2", "consume")] {
        let flags = [(
            "codec",
            Bencode::Dict(vec![(
                op.as_bytes().to_vec(),
                Bencode::List(vec![s("PCMU")]),
            )]),
        )];
        let got = sdp_of(&mut ng, request("offer", call, offer, &flags));
        // `accept` still offers PCMU to the callee; `consume` hides it, as `mask` does.
        let to_callee = if op == "accept" { "0 8" } else { "8" };
        assert_eq!(got[4], format!("m=audio PORT RTP/AVP {to_callee}"), "{op}");
        // The callee takes PCMA; the caller is answered in PCMU (transcoded), as rtpengine
        // answers.
        let got = sdp_of(&mut ng, request("answer", call, pcma, &[]));
        assert_eq!(got[4], "m=audio PORT RTP/AVP 0", "{op}: {got:?}");
    }
}

#[test]
fn events_at_a_clock_the_gateway_does_not_know_stay_beside_a_transcoded_answer() {
    let (_server, mut ng) = start();
    let offer =
        "v=0\r\no=- 1 1 IN IP4 192.0.2.10\r\ns=-\r\nt=0 0\r\nm=audio 5004 RTP/AVP 100 101\r\n\
        c=IN IP4 192.0.2.10\r\na=rtpmap:100 PCMU/16000\r\na=rtpmap:101 telephone-event/16000\r\n";
    let flags = [
        (
            "codec",
            Bencode::Dict(vec![(
                b"transcode".to_vec(),
                Bencode::List(vec![s("PCMA"), s("telephone-event/8000")]),
            )]),
        ),
        ("flags", Bencode::List(vec![s("always transcode")])),
    ];
    sdp_of(&mut ng, request("offer", "ev1", offer, &flags));
    let answer =
        "v=0\r\no=- 2 2 IN IP4 192.0.2.20\r\ns=-\r\nt=0 0\r\nm=audio 6000 RTP/AVP 8 96\r\n\
        c=IN IP4 192.0.2.20\r\na=rtpmap:96 telephone-event/8000\r\n";
    // The caller is answered in its first codec, its 16 kHz events beside it.
    let got = sdp_of(&mut ng, request("answer", "ev1", answer, &[]));
    assert_eq!(got[4], "m=audio PORT RTP/AVP 100 101", "{got:?}");
}

/// `transcode: telephone-event` adds telephone-events at each clock of the caller's audio
/// that has none: numbered from the first free dynamic payload type in the order of the
/// clocks, listed in the order of their digits (48000 before 8000), after the audio, each with
/// the sixteen DTMF events; the caller is answered without them.
#[test]
fn transcoding_telephone_events_adds_them_at_each_clock_of_the_callers_audio() {
    let (_server, mut ng) = start();
    let offer = "v=0\r\no=- 1 1 IN IP4 192.0.2.10\r\ns=-\r\nt=0 0\r\nm=audio 5004 RTP/AVP 0 96\r\n\
        c=IN IP4 192.0.2.10\r\na=rtpmap:0 PCMU/8000\r\na=rtpmap:96 opus/48000/2\r\n";
    let flags = [codec_flags(&[("transcode", &["telephone-event"])])];
    let got = sdp_of(&mut ng, request("offer", "ev2", offer, &flags));
    let m = got.iter().position(|l| l.starts_with("m=")).unwrap();
    assert_eq!(got[m], "m=audio PORT RTP/AVP 0 96 98 97", "{got:?}");
    for line in [
        "a=rtpmap:98 telephone-event/48000",
        "a=fmtp:98 0-15",
        "a=rtpmap:97 telephone-event/8000",
        "a=fmtp:97 0-15",
    ] {
        assert!(got.iter().any(|l| l == line), "{line}: {got:?}");
    }
    let answer =
        "v=0\r\no=- 2 2 IN IP4 192.0.2.20\r\ns=-\r\nt=0 0\r\nm=audio 6000 RTP/AVP 0 97\r\n\
        c=IN IP4 192.0.2.20\r\na=rtpmap:0 PCMU/8000\r\na=rtpmap:97 telephone-event/8000\r\n";
    let got = sdp_of(&mut ng, request("answer", "ev2", answer, &[]));
    let m = got.iter().position(|l| l.starts_with("m=")).unwrap();
    assert_eq!(got[m], "m=audio PORT RTP/AVP 0", "{got:?}");
    assert!(
        !got.iter().any(|l| l.contains("telephone-event")),
        "{got:?}"
    );
}

/// Stripping a clock's last audio codec takes its telephone-events with it.
#[test]
fn stripping_a_clocks_last_audio_codec_takes_its_telephone_events() {
    let (_server, mut ng) = start();
    let offer = "v=0\r\no=- 1 1 IN IP4 192.0.2.10\r\ns=-\r\nt=0 0\r\n\
        m=audio 5004 RTP/AVP 96 8 97 98\r\nc=IN IP4 192.0.2.10\r\na=rtpmap:96 opus/48000/2\r\n\
        a=rtpmap:8 PCMA/8000\r\na=rtpmap:97 telephone-event/8000\r\n\
        a=rtpmap:98 telephone-event/48000\r\n";
    let flags = [codec_flags(&[("strip", &["PCMA"])])];
    let got = sdp_of(&mut ng, request("offer", "ev3", offer, &flags));
    let m = got.iter().position(|l| l.starts_with("m=")).unwrap();
    assert_eq!(got[m], "m=audio PORT RTP/AVP 96 98", "{got:?}");
    assert!(
        !got.iter().any(|l| l.contains("telephone-event/8000")),
        "{got:?}"
    );
}

/// A `codec` dictionary of one or more manipulations.
fn codec_flags(ops: &[(&str, &[&str])]) -> (&'static str, Bencode) {
    (
        "codec",
        Bencode::Dict(
            ops.iter()
                .map(|(op, names)| {
                    (
                        op.as_bytes().to_vec(),
                        Bencode::List(names.iter().map(|n| s(n)).collect()),
                    )
                })
                .collect(),
        ),
    )
}

#[test]
fn with_everything_masked_the_offer_follows_the_transcode_list_and_keeps_the_callers_numbers() {
    let (_server, mut ng) = start();
    // The caller's Opus and PCMA with their events; everything masked, four codecs named.
    let offer = "v=0\r\no=- 1 1 IN IP4 192.0.2.10\r\ns=-\r\nt=0 0\r\n\
        m=audio 5004 RTP/AVP 111 8 101 96\r\nc=IN IP4 192.0.2.10\r\n\
        a=rtpmap:111 opus/48000/2\r\na=rtpmap:8 PCMA/8000\r\na=rtpmap:101 telephone-event/48000\r\n\
        a=rtpmap:96 telephone-event/8000\r\na=fmtp:96 0-15\r\na=fmtp:101 0-15\r\n";
    let flags = [codec_flags(&[
        ("mask", &["all"]),
        ("transcode", &["G722", "opus", "PCMA", "telephone-event"]),
    ])];
    let got = sdp_of(&mut ng, request("offer", "ml1", offer, &flags));
    // In the list's order, the caller's payload types kept; events after the audio, in
    // payload type order.
    assert_eq!(got[4], "m=audio PORT RTP/AVP 9 111 8 96 101", "{got:?}");
    // So events whose clocks come the other way round in the audio keep that order too.
    let offer = "v=0\r\no=- 1 1 IN IP4 192.0.2.10\r\ns=-\r\nt=0 0\r\n\
        m=audio 5004 RTP/AVP 8 101 111 96\r\nc=IN IP4 192.0.2.10\r\n\
        a=rtpmap:8 PCMA/8000\r\na=rtpmap:101 telephone-event/8000\r\na=rtpmap:111 opus/48000/2\r\n\
        a=rtpmap:96 telephone-event/48000\r\n";
    let flags = [codec_flags(&[
        ("mask", &["all"]),
        ("transcode", &["PCMA", "opus", "telephone-event"]),
    ])];
    let got = sdp_of(&mut ng, request("offer", "ml3", offer, &flags));
    assert_eq!(got[4], "m=audio PORT RTP/AVP 8 111 96 101", "{got:?}");

    // A codec the gateway cannot transcode (EVS) named in `transcode` is masked like the
    // rest; the caller's 16 kHz events go with it (no audio left at that clock).
    let offer = "v=0\r\no=- 1 1 IN IP4 192.0.2.10\r\ns=-\r\nt=0 0\r\n\
        m=audio 5004 RTP/AVP 108 8 101 96\r\nc=IN IP4 192.0.2.10\r\n\
        a=rtpmap:108 EVS/16000\r\na=rtpmap:8 PCMA/8000\r\na=rtpmap:101 telephone-event/16000\r\n\
        a=rtpmap:96 telephone-event/8000\r\n";
    let flags = [codec_flags(&[
        ("mask", &["all"]),
        ("transcode", &["G722", "EVS", "PCMA", "telephone-event"]),
    ])];
    let got = sdp_of(&mut ng, request("offer", "ml2", offer, &flags));
    assert_eq!(got[4], "m=audio PORT RTP/AVP 9 8 96", "{got:?}");
}

#[test]
fn an_added_codec_takes_the_callers_number_for_it_else_one_free_towards_the_callee() {
    let (_server, mut ng) = start();
    // The caller's events (101) stripped, then offered again beside the added G.722: they
    // come back with the caller's number, not a new one.
    let offer = "v=0\r\no=- 1 1 IN IP4 192.0.2.10\r\ns=-\r\nt=0 0\r\n\
        m=audio 5004 RTP/AVP 0 8 101\r\nc=IN IP4 192.0.2.10\r\n\
        a=rtpmap:101 telephone-event/8000\r\na=fmtp:101 0-15\r\n";
    let flags = [codec_flags(&[
        ("mask", &["all"]),
        ("strip", &["telephone-event"]),
        ("transcode", &["PCMU", "G722"]),
        ("offer", &["telephone-event"]),
    ])];
    let got = sdp_of(&mut ng, request("offer", "pt1", offer, &flags));
    assert_eq!(got[4], "m=audio PORT RTP/AVP 0 9 101", "{got:?}");
    assert!(
        got.contains(&"a=rtpmap:101 telephone-event/8000".to_owned()),
        "{got:?}"
    );

    // A number the caller uses only for a masked codec is free towards the callee: the
    // events added at PCMA's clock take 96, the caller's (masked) Opus's number.
    let offer = "v=0\r\no=- 1 1 IN IP4 192.0.2.10\r\ns=-\r\nt=0 0\r\n\
        m=audio 5004 RTP/AVP 96 120\r\nc=IN IP4 192.0.2.10\r\n\
        a=rtpmap:96 opus/48000/2\r\na=rtpmap:120 telephone-event/48000\r\n";
    let flags = [codec_flags(&[
        ("mask", &["all"]),
        ("transcode", &["PCMA", "telephone-event"]),
    ])];
    let got = sdp_of(&mut ng, request("offer", "pt2", offer, &flags));
    assert_eq!(got[4], "m=audio PORT RTP/AVP 8 96", "{got:?}");
    assert!(
        got.contains(&"a=rtpmap:96 telephone-event/8000".to_owned()),
        "{got:?}"
    );
}

#[test]
fn always_transcode_answers_the_caller_in_its_first_codec_and_an_added_one_brings_the_callers() {
    let (_server, mut ng) = start();
    // `always transcode` with the caller's Opus masked: the callee takes PCMA, the caller is
    // answered in Opus (its first codec), without the 8 kHz events Opus has no clock for.
    let offer = "v=0\r\no=- 1 1 IN IP4 192.0.2.10\r\ns=-\r\nt=0 0\r\n\
        m=audio 5004 RTP/AVP 120 8 0 101\r\nc=IN IP4 192.0.2.10\r\n\
        a=rtpmap:120 opus/48000/2\r\na=rtpmap:101 telephone-event/8000\r\na=fmtp:101 0-15\r\n";
    let flags = [
        codec_flags(&[("mask", &["opus"])]),
        ("flags", Bencode::List(vec![s("always transcode")])),
    ];
    sdp_of(&mut ng, request("offer", "at1", offer, &flags));
    let answer = "v=0\r\no=- 2 2 IN IP4 192.0.2.20\r\ns=-\r\nt=0 0\r\n\
        m=audio 6000 RTP/AVP 8 101\r\nc=IN IP4 192.0.2.20\r\n\
        a=rtpmap:101 telephone-event/8000\r\na=fmtp:101 0-15\r\n";
    let got = sdp_of(&mut ng, request("answer", "at1", answer, &[]));
    assert_eq!(got[4], "m=audio PORT RTP/AVP 120", "{got:?}");

    // Relayed Opus, but the callee also took the G.722 we added: what it sends in G.722 is
    // transcoded to the caller's first codec, PCMA, which the caller is answered in too
    // (before the events).
    let offer = "v=0\r\no=- 1 1 IN IP4 192.0.2.10\r\ns=-\r\nt=0 0\r\n\
        m=audio 5004 RTP/AVP 8 107 101\r\nc=IN IP4 192.0.2.10\r\n\
        a=rtpmap:107 opus/48000/2\r\na=rtpmap:101 telephone-event/8000\r\na=fmtp:101 0-16\r\n";
    let got = sdp_of(
        &mut ng,
        request(
            "offer",
            "at2",
            offer,
            &[codec_flags(&[("transcode", &["G722"])])],
        ),
    );
    assert_eq!(got[4], "m=audio PORT RTP/AVP 8 107 9 101", "{got:?}");
    let answer = "v=0\r\no=- 2 2 IN IP4 192.0.2.20\r\ns=-\r\nt=0 0\r\n\
        m=audio 6000 RTP/AVP 107 101 9\r\nc=IN IP4 192.0.2.20\r\n\
        a=rtpmap:107 opus/48000/2\r\na=rtpmap:101 telephone-event/8000\r\na=fmtp:101 0-16\r\n";
    let got = sdp_of(&mut ng, request("answer", "at2", answer, &[]));
    assert_eq!(got[4], "m=audio PORT RTP/AVP 107 8 101", "{got:?}");
}

#[test]
fn codecs_we_add_are_written_as_rtpengine_writes_them_and_the_callers_ptime_answered() {
    let (_server, mut ng) = start();
    // One channel is Opus's implicit count: unwritten once codec flags rewrite the offer; an
    // added codec is named as the flag spells it; an added Opus carries no fmtp of ours.
    let offer = "v=0\r\no=- 1 1 IN IP4 192.0.2.10\r\ns=-\r\nt=0 0\r\n\
        m=audio 5004 RTP/AVP 0 102\r\nc=IN IP4 192.0.2.10\r\na=rtpmap:102 opus/48000/1\r\n\
        a=ptime:20\r\n";
    let flags = [codec_flags(&[("transcode", &["pcma", "G722"])])];
    let got = sdp_of(&mut ng, request("offer", "wr1", offer, &flags));
    assert_eq!(got[4], "m=audio PORT RTP/AVP 0 102 8 9", "{got:?}");
    for want in [
        "a=rtpmap:102 opus/48000",
        "a=rtpmap:8 pcma/8000",
        "a=rtpmap:9 G722/8000",
    ] {
        assert!(got.contains(&want.to_owned()), "{want}: {got:?}");
    }
    // The callee answers without a=ptime: the caller, whose side the transcoder may serve,
    // is answered with its own.
    let answer = "v=0\r\no=- 2 2 IN IP4 192.0.2.20\r\ns=-\r\nt=0 0\r\n\
        m=audio 6000 RTP/AVP 8\r\nc=IN IP4 192.0.2.20\r\n";
    let got = sdp_of(&mut ng, request("answer", "wr1", answer, &[]));
    assert!(got.contains(&"a=ptime:20".to_owned()), "{got:?}");

    let offer = "v=0\r\no=- 1 1 IN IP4 192.0.2.10\r\ns=-\r\nt=0 0\r\n\
        m=audio 5004 RTP/AVP 8\r\nc=IN IP4 192.0.2.10\r\n";
    let flags = [codec_flags(&[("transcode", &["opus"])])];
    let got = sdp_of(&mut ng, request("offer", "wr2", offer, &flags));
    assert_eq!(got[4], "m=audio PORT RTP/AVP 8 96", "{got:?}");
    assert!(
        got.contains(&"a=rtpmap:96 opus/48000/2".to_owned()),
        "{got:?}"
    );
    assert!(!got.iter().any(|l| l.starts_with("a=fmtp:96")), "{got:?}");
}

#[test]
fn a_reoffer_in_an_answered_call_gets_the_codec_flags_as_the_first_offer_did() {
    let (_server, mut ng) = start();
    let offer = "v=0\r\no=- 1 1 IN IP4 192.0.2.10\r\ns=-\r\nt=0 0\r\n\
        m=audio 5004 RTP/AVP 0 8\r\nc=IN IP4 192.0.2.10\r\n";
    let flags = [codec_flags(&[("strip", &["all"]), ("offer", &["PCMA"])])];
    let got = sdp_of(&mut ng, request("offer", "re1", offer, &flags));
    assert_eq!(got[4], "m=audio PORT RTP/AVP 8", "{got:?}");
    let answer = "v=0\r\no=- 2 2 IN IP4 192.0.2.20\r\ns=-\r\nt=0 0\r\n\
        m=audio 6000 RTP/AVP 8\r\nc=IN IP4 192.0.2.20\r\n";
    sdp_of(&mut ng, request("answer", "re1", answer, &[]));
    // The re-INVITE, with the caller's codecs in another order and the proxy's same flags.
    let reoffer = "v=0\r\no=- 1 2 IN IP4 192.0.2.10\r\ns=-\r\nt=0 0\r\n\
        m=audio 5004 RTP/AVP 8 0 9\r\nc=IN IP4 192.0.2.10\r\na=sendonly\r\n";
    let got = sdp_of(&mut ng, request("offer", "re1", reoffer, &flags));
    assert_eq!(got[4], "m=audio PORT RTP/AVP 8", "{got:?}");
    assert!(got.contains(&"a=sendonly".to_owned()), "{got:?}");
}

/// The `m=` line of our SDP.
fn m_line(got: &[String]) -> &str {
    got.iter().find(|l| l.starts_with("m=")).unwrap()
}

/// `transcode: CN` adds comfort noise at its static payload type after the caller's audio and
/// before its telephone-events; a callee that takes it gets it, and the caller, who offered
/// none, is answered without it.
#[test]
fn transcoding_cn_adds_comfort_noise_before_the_events_and_answers_the_caller_without_it() {
    let (_server, mut ng) = start();
    let offer =
        "v=0\r\no=- 1 1 IN IP4 192.0.2.10\r\ns=-\r\nt=0 0\r\nm=audio 5004 RTP/AVP 8 0 96\r\n\
        c=IN IP4 192.0.2.10\r\na=rtpmap:96 telephone-event/8000\r\n";
    let flags = [codec_flags(&[("transcode", &["CN"])])];
    let got = sdp_of(&mut ng, request("offer", "cn1", offer, &flags));
    assert_eq!(m_line(&got), "m=audio PORT RTP/AVP 8 0 13 96", "{got:?}");
    let at = |l: &str| got.iter().position(|x| x == l);
    assert!(
        at("a=rtpmap:13 CN/8000") < at("a=rtpmap:96 telephone-event/8000"),
        "{got:?}"
    );
    assert!(at("a=rtpmap:13 CN/8000").is_some(), "{got:?}");
    let answer =
        "v=0\r\no=- 2 2 IN IP4 192.0.2.20\r\ns=-\r\nt=0 0\r\nm=audio 6000 RTP/AVP 0 13 96\r\n\
        c=IN IP4 192.0.2.20\r\na=rtpmap:96 telephone-event/8000\r\n";
    let got = sdp_of(&mut ng, request("answer", "cn1", answer, &[]));
    assert_eq!(m_line(&got), "m=audio PORT RTP/AVP 0 96", "{got:?}");
    assert!(!got.iter().any(|l| l.contains("CN/8000")), "{got:?}");
    // As a Kamailio flag, with a second codec added: comfort noise after both.
    let offer = "v=0\r\no=- 1 1 IN IP4 192.0.2.10\r\ns=-\r\nt=0 0\r\nm=audio 5004 RTP/AVP 8\r\n\
        c=IN IP4 192.0.2.10\r\n";
    let flags = [(
        "flags",
        Bencode::List(vec![s("codec-transcode-CN"), s("codec-transcode-PCMU")]),
    )];
    let got = sdp_of(&mut ng, request("offer", "cn2", offer, &flags));
    assert_eq!(m_line(&got), "m=audio PORT RTP/AVP 8 0 13", "{got:?}");
    let answer =
        "v=0\r\no=- 2 2 IN IP4 192.0.2.20\r\ns=-\r\nt=0 0\r\nm=audio 6000 RTP/AVP 0 13\r\n\
        c=IN IP4 192.0.2.20\r\n";
    let got = sdp_of(&mut ng, request("answer", "cn2", answer, &[]));
    assert_eq!(m_line(&got), "m=audio PORT RTP/AVP 8", "{got:?}");
}

/// `always transcode` (`accept: all`) with a caller that offers comfort noise and a callee that
/// takes none: the caller keeps it (the gateway makes it from silence and noise from it).
#[test]
fn always_transcode_keeps_the_callers_comfort_noise_when_the_callee_has_none() {
    let (_server, mut ng) = start();
    let offer = "v=0\r\no=- 1 1 IN IP4 192.0.2.10\r\ns=-\r\nt=0 0\r\nm=audio 5004 RTP/AVP 0 13\r\n\
        c=IN IP4 192.0.2.10\r\n";
    let flags = [("flags", Bencode::List(vec![s("always transcode")]))];
    let got = sdp_of(&mut ng, request("offer", "cn3", offer, &flags));
    assert_eq!(m_line(&got), "m=audio PORT RTP/AVP 0 13", "{got:?}");
    let answer = "v=0\r\no=- 2 2 IN IP4 192.0.2.20\r\ns=-\r\nt=0 0\r\nm=audio 6000 RTP/AVP 0\r\n\
        c=IN IP4 192.0.2.20\r\n";
    let got = sdp_of(&mut ng, request("answer", "cn3", answer, &[]));
    assert_eq!(m_line(&got), "m=audio PORT RTP/AVP 0 13", "{got:?}");
    assert!(got.iter().any(|l| l == "a=rtpmap:13 CN/8000"), "{got:?}");
    // `accept: CN` alike.
    let flags = [codec_flags(&[("accept", &["CN"])])];
    sdp_of(&mut ng, request("offer", "cn4", offer, &flags));
    let got = sdp_of(&mut ng, request("answer", "cn4", answer, &[]));
    assert_eq!(m_line(&got), "m=audio PORT RTP/AVP 0 13", "{got:?}");
}

/// `consume: CN` with everything else stripped but what `offer` names: the callee is not
/// offered comfort noise (nor the 16 kHz one), the caller is answered with it, listed after
/// its audio codec and before its telephone-events whatever the order it offered them in.
#[test]
fn consuming_cn_keeps_it_on_the_callers_side_only() {
    let (_server, mut ng) = start();
    let offer = "v=0\r\no=- 1 1 IN IP4 192.0.2.10\r\ns=-\r\nt=0 0\r\n\
        m=audio 5004 RTP/AVP 9 18 0 8 100 13 117\r\nc=IN IP4 192.0.2.10\r\n\
        a=rtpmap:9 G722/8000\r\na=rtpmap:18 G729/8000\r\na=rtpmap:0 PCMU/8000\r\n\
        a=rtpmap:8 PCMA/8000\r\na=rtpmap:100 telephone-event/8000\r\na=rtpmap:13 CN/8000\r\n\
        a=rtpmap:117 CN/16000\r\n";
    let flags = [codec_flags(&[
        ("strip", &["all"]),
        ("consume", &["CN"]),
        ("offer", &["PCMA", "PCMU", "telephone-event"]),
    ])];
    let got = sdp_of(&mut ng, request("offer", "cn5", offer, &flags));
    assert_eq!(m_line(&got), "m=audio PORT RTP/AVP 8 0 100", "{got:?}");
    assert!(!got.iter().any(|l| l.contains("CN/")), "{got:?}");
    let answer =
        "v=0\r\no=- 2 2 IN IP4 192.0.2.20\r\ns=-\r\nt=0 0\r\nm=audio 6000 RTP/AVP 8 100\r\n\
        c=IN IP4 192.0.2.20\r\na=rtpmap:100 telephone-event/8000\r\n";
    let got = sdp_of(&mut ng, request("answer", "cn5", answer, &[]));
    assert_eq!(m_line(&got), "m=audio PORT RTP/AVP 8 13 100", "{got:?}");
    assert!(!got.iter().any(|l| l.contains("CN/16000")), "{got:?}");
}

/// Without codec flags comfort noise is relayed like any format both sides have.
#[test]
fn comfort_noise_both_sides_have_is_kept_as_it_was_offered() {
    let (_server, mut ng) = start();
    let offer =
        "v=0\r\no=- 1 1 IN IP4 192.0.2.10\r\ns=-\r\nt=0 0\r\nm=audio 5004 RTP/AVP 0 101 13\r\n\
        c=IN IP4 192.0.2.10\r\na=rtpmap:101 telephone-event/8000\r\n";
    let got = sdp_of(&mut ng, request("offer", "cn6", offer, &[]));
    assert_eq!(m_line(&got), "m=audio PORT RTP/AVP 0 101 13", "{got:?}");
    let answer =
        "v=0\r\no=- 2 2 IN IP4 192.0.2.20\r\ns=-\r\nt=0 0\r\nm=audio 6000 RTP/AVP 0 101 13\r\n\
        c=IN IP4 192.0.2.20\r\na=rtpmap:101 telephone-event/8000\r\n";
    let got = sdp_of(&mut ng, request("answer", "cn6", answer, &[]));
    assert_eq!(m_line(&got), "m=audio PORT RTP/AVP 0 101 13", "{got:?}");
}

/// A re-offer in an answered call whose flags consume the caller's comfort noise: the callee's
/// answer without it comes back to the caller with it, after the audio, before the events.
#[test]
fn a_re_offer_consuming_cn_answers_the_caller_with_it() {
    let (_server, mut ng) = start();
    let first = "v=0\r\no=- 1 1 IN IP4 192.0.2.10\r\ns=-\r\nt=0 0\r\nm=audio 5004 RTP/AVP 8\r\n\
        c=IN IP4 192.0.2.10\r\n";
    sdp_of(&mut ng, request("offer", "cn7", first, &[]));
    let answer = "v=0\r\no=- 2 2 IN IP4 192.0.2.20\r\ns=-\r\nt=0 0\r\nm=audio 6000 RTP/AVP 8\r\n\
        c=IN IP4 192.0.2.20\r\n";
    sdp_of(&mut ng, request("answer", "cn7", answer, &[]));
    let again = "v=0\r\no=- 1 2 IN IP4 192.0.2.10\r\ns=-\r\nt=0 0\r\n\
        m=audio 5004 RTP/AVP 0 8 100 13\r\nc=IN IP4 192.0.2.10\r\n\
        a=rtpmap:100 telephone-event/8000\r\n";
    let flags = [codec_flags(&[
        ("strip", &["all"]),
        ("consume", &["CN"]),
        ("offer", &["PCMA", "telephone-event"]),
    ])];
    let got = sdp_of(&mut ng, request("offer", "cn7", again, &flags));
    assert_eq!(m_line(&got), "m=audio PORT RTP/AVP 8 100", "{got:?}");
    let answer =
        "v=0\r\no=- 2 3 IN IP4 192.0.2.20\r\ns=-\r\nt=0 0\r\nm=audio 6000 RTP/AVP 8 100\r\n\
        c=IN IP4 192.0.2.20\r\na=rtpmap:100 telephone-event/8000\r\n";
    let got = sdp_of(&mut ng, request("answer", "cn7", answer, &[]));
    assert_eq!(m_line(&got), "m=audio PORT RTP/AVP 8 13 100", "{got:?}");
    assert!(got.iter().any(|l| l == "a=rtpmap:13 CN/8000"), "{got:?}");
}
