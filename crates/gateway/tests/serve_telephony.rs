//! Telephony legs through `secrelay serve` over real sockets: an SDES-SRTP phone whose SRTP is
//! libsrtp's (the srtp2-sys peer), a plain RTP phone and a simulated WebRTC participant in one
//! room, joined over HTTP (`POST /rooms/{room}/rtp`); each hears the others on its own port
//! pair, libsrtp opens everything sent to the SDES phone (its media and the gateway's RTCP
//! reports, on the RTCP port the offer named with `a=rtcp`), the API shows each phone's RTCP
//! figures, and leaving gives the ports back.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use secrelay_gateway::server::{ServeConfig, Server};
use secrelay_peers::libsrtp::{Direction, LibSrtp, LibsrtpProfile};
use secrelay_srtp::Profile;
use secrelay_testkit::phone::SocketPhone;
use secrelay_testkit::{Leg, Phase, Signaling, SimParticipant};
use secrelay_wire::rtcp::reports;
use secrelay_wire::sdp_rtp::parse_rtp;
use secrelay_wire::RtpHeader;

const LOCAL: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into()
}

/// POSTs an offer to `/rooms/{room}/rtp`: (status, Location, body).
fn post_rtp(s: &Server, room: &str, sdp: &str) -> (u16, Option<String>, String) {
    let mut r = agent()
        .post(&format!("{}/rooms/{room}/rtp", s.url()))
        .header("Content-Type", "application/sdp")
        .send(sdp)
        .unwrap();
    let loc = r
        .headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    (
        r.status().as_u16(),
        loc,
        r.body_mut().read_to_string().unwrap_or_default(),
    )
}

/// The participant of room `room` whose leg is `leg` (`plain`, `sdes`, `webrtc`) as the API
/// shows it (null if there is none).
fn api_leg(s: &Server, room: &str, leg: &str) -> serde_json::Value {
    let body = agent()
        .get(&format!("{}/api/rooms/{room}", s.url()))
        .header(
            "Authorization",
            &format!("Bearer {}", s.admin_key().expose()),
        )
        .call()
        .unwrap()
        .body_mut()
        .read_to_string()
        .unwrap();
    let room: serde_json::Value = serde_json::from_str(&body).unwrap();
    room["participants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["leg"] == leg)
        .cloned()
        .unwrap_or_default()
}

/// A phone on a real socket: plain, or SDES with libsrtp sessions.
struct Phone {
    socket: UdpSocket,
    gateway: SocketAddr,
    tx: Option<LibSrtp>,
    rx: Option<LibSrtp>,
    seq: u16,
    ssrc: u32,
    location: String,
    /// Packets received (opened), and those that failed to open.
    received: Vec<Vec<u8>>,
    failed: usize,
    /// The socket RTCP comes to (`a=rtcp`), and the compounds received there (opened).
    rtcp: UdpSocket,
    reports: Vec<Vec<u8>>,
}

impl Phone {
    fn join(s: &Server, room: &str, sdes: bool, ssrc: u32) -> Phone {
        let socket = UdpSocket::bind((LOCAL, 0)).unwrap();
        socket.set_nonblocking(true).unwrap();
        let port = socket.local_addr().unwrap().port();
        let rtcp = UdpSocket::bind((LOCAL, 0)).unwrap();
        rtcp.set_nonblocking(true).unwrap();
        let rtcp_port = rtcp.local_addr().unwrap().port();
        let profile = LibsrtpProfile::AesCm128HmacSha1_80;
        let mut key = [0u8; 30];
        getrandom::fill(&mut key).unwrap();
        let mut sdp = format!(
            "v=0\r\no=phone 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n\
             m=audio {port} {} 0\r\na=rtpmap:0 PCMU/8000\r\na=rtcp:{rtcp_port}\r\na=sendrecv\r\n",
            if sdes { "RTP/SAVP" } else { "RTP/AVP" }
        );
        let tx = sdes.then(|| {
            use base64::Engine as _;
            sdp.push_str(&format!(
                "a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:{}\r\n",
                base64::engine::general_purpose::STANDARD.encode(key)
            ));
            LibSrtp::new(
                profile,
                Direction::Outbound,
                &key[..16],
                &key[16..],
                1024,
                false,
            )
            .unwrap()
        });
        let (status, location, answer) = post_rtp(s, room, &sdp);
        assert_eq!(status, 201, "{answer}");
        let d = parse_rtp(&answer).unwrap();
        let a = &d.sections[0];
        let gateway = SocketAddr::new(a.address.unwrap(), a.port);
        let rx = sdes.then(|| {
            use base64::Engine as _;
            let c = &a.crypto[0];
            assert_eq!(c.suite, "AES_CM_128_HMAC_SHA1_80");
            let k = base64::engine::general_purpose::STANDARD
                .decode(&c.keys[0].key_salt)
                .unwrap();
            assert_ne!(&k[..], &key[..], "the gateway's key for us is its own");
            LibSrtp::new(profile, Direction::Inbound, &k[..16], &k[16..], 1024, false).unwrap()
        });
        Phone {
            socket,
            gateway,
            tx,
            rx,
            seq: 1,
            ssrc,
            location: location.unwrap(),
            received: Vec::new(),
            failed: 0,
            rtcp,
            reports: Vec::new(),
        }
    }

    fn send(&mut self, fill: u8) {
        let mut p = vec![0u8; 12 + 160 + 16];
        p[0] = 0x80;
        p[2..4].copy_from_slice(&self.seq.to_be_bytes());
        p[4..8].copy_from_slice(&(u32::from(self.seq) * 160).to_be_bytes());
        p[8..12].copy_from_slice(&self.ssrc.to_be_bytes());
        p[12..172].fill(fill);
        self.seq += 1;
        let n = match self.tx.as_mut() {
            Some(tx) => tx.protect(&mut p, 172).unwrap(),
            None => 172,
        };
        self.socket.send_to(&p[..n], self.gateway).unwrap();
    }

    fn read(&mut self) {
        let mut buf = [0u8; 2048];
        while let Ok((n, from)) = self.socket.recv_from(&mut buf) {
            assert_eq!(from, self.gateway, "media comes from the leg's own port");
            let n = match self.rx.as_mut() {
                Some(rx) => match rx.unprotect(&mut buf, n) {
                    Ok(n) => n,
                    Err(_) => {
                        self.failed += 1;
                        continue;
                    }
                },
                None => n,
            };
            self.received.push(buf[..n].to_vec());
        }
        while let Ok((n, _)) = self.rtcp.recv_from(&mut buf) {
            let n = match self.rx.as_mut() {
                Some(rx) => match rx.unprotect_rtcp(&mut buf, n) {
                    Ok(n) => n,
                    Err(_) => {
                        self.failed += 1;
                        continue;
                    }
                },
                None => n,
            };
            self.reports.push(buf[..n].to_vec());
        }
    }
}

#[test]
fn an_sdes_phone_on_libsrtp_a_plain_phone_and_a_browser_hear_each_other_over_io_uring() {
    three_legs_in_a_room("io_uring", "46000-46499");
}

#[test]
fn an_sdes_phone_on_libsrtp_a_plain_phone_and_a_browser_hear_each_other_over_mmsg() {
    three_legs_in_a_room("mmsg", "46500-46999");
}

/// A browser, an SDES phone and a plain phone in one room, every worker's sockets read and
/// written the way `media_io` says (io_uring is required to work here under CI).
fn three_legs_in_a_room(media_io: &str, rtp_ports: &str) {
    let started = Server::start(ServeConfig {
        http: Some("127.0.0.1:0".parse().unwrap()),
        udp: "127.0.0.1:0".parse().unwrap(),
        workers: 2,
        rtp_ports: rtp_ports.into(),
        drain_secs: 0.1,
        rtcp_interval_secs: 0.5,
        media_io: media_io.into(),
        ..ServeConfig::default()
    });
    let s = match started {
        Err(e) if media_io == "io_uring" && std::env::var_os("CI").is_none() => {
            eprintln!("SKIPPED: io_uring refused by this kernel ({e})");
            return;
        }
        other => other.unwrap(),
    };
    let sig = Signaling::new(s.url()).with_admin(s.admin_key().expose());
    let mut web =
        vec![SimParticipant::join(&sig, "mix", Leg::Join, LOCAL, Instant::now()).unwrap()];
    assert!(
        SimParticipant::drive_until(&mut web, Duration::from_secs(20), |g| {
            g[0].phase == Phase::Connected
        })
        .unwrap()
    );
    let mut sdes = Phone::join(&s, "mix", true, 0x5d35);
    let mut plain = Phone::join(&s, "mix", false, 0x9141);
    assert_ne!(sdes.gateway.port(), plain.gateway.port());
    assert_eq!(s.gateway().rtp_ports_in_use(), 4);

    let end = Instant::now() + Duration::from_secs(20);
    let mut sent = 0u8;
    loop {
        if sent < 100 {
            sdes.send(0xa1);
            plain.send(0xb2);
            sent += 1;
        }
        SimParticipant::drive_until(&mut web, Duration::from_millis(20), |_| false).unwrap();
        sdes.read();
        plain.read();
        let heard = |p: &Phone, fill: u8| {
            p.received
                .iter()
                .filter(|r| RtpHeader::parse(r).is_ok_and(|h| h.payload().first() == Some(&fill)))
                .count()
        };
        let web_streams = web[0].streams.len();
        let done = sent >= 100
            && web_streams == 2
            && web[0].received() >= 150
            && heard(&plain, 0xa1) >= 80
            && heard(&sdes, 0xb2) >= 80
            && plain.received.len() >= 150
            && sdes.received.len() >= 150
            && !plain.reports.is_empty()
            && !sdes.reports.is_empty();
        if done {
            break;
        }
        assert!(
            Instant::now() < end,
            "web streams {web_streams}, web received {}, plain {} ({} from sdes, {} reports), sdes {} ({} from plain, {} failed, {} reports)",
            web[0].received(),
            plain.received.len(),
            heard(&plain, 0xa1),
            plain.reports.len(),
            sdes.received.len(),
            heard(&sdes, 0xb2),
            sdes.failed,
            sdes.reports.len()
        );
    }
    assert_eq!(
        sdes.failed, 0,
        "libsrtp opens everything the gateway sends it"
    );
    assert_eq!(web[0].rx_errors, 0);

    let snap = s.gateway().stats().totals();
    assert!(snap.media_forwarded > 300, "{snap:?}");

    // The gateway's reports: SRs (each phone was sent media) for the stream the phone hears.
    for p in [&sdes, &plain] {
        let r = reports(p.reports.last().unwrap()).unwrap();
        let info = r[0].sender.expect("an SR");
        assert!(info.packets > 0 && info.octets > 0);
        assert!(r[0]
            .blocks
            .iter()
            .any(|b| b.ssrc == p.ssrc && b.cumulative_lost == 0));
    }
    // The API's RTCP figures for each phone: its 100 packets, none lost on loopback.
    for (leg, ssrc) in [("sdes", sdes.ssrc), ("plain", plain.ssrc)] {
        let p = api_leg(&s, "mix", leg);
        let got = &p["rtcp"]["received"][0];
        assert_eq!(got["ssrc"], ssrc, "{p}");
        assert_eq!(got["received"], 100, "{p}");
        assert_eq!(got["lost"], 0, "{p}");
        assert!(p["rtcp"]["reports_sent"].as_u64().unwrap() >= 1, "{p}");
    }
    // The metrics split by kind of participant.
    let metrics = agent()
        .get(&format!("{}/metrics", s.url()))
        .header(
            "Authorization",
            &format!("Bearer {}", s.admin_key().expose()),
        )
        .call()
        .unwrap()
        .body_mut()
        .read_to_string()
        .unwrap();
    let value = |series: &str| -> u64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("{series} in {metrics}"))
    };
    // Both workers on the path asked for.
    assert_eq!(
        value(&format!("secrelay_media_io_workers{{path=\"{media_io}\"}}")),
        2
    );
    for leg in ["webrtc", "sdes", "plain"] {
        assert_eq!(
            value(&format!("secrelay_participants_by_leg{{leg=\"{leg}\"}}")),
            1
        );
        let into = value(&format!(
            "secrelay_leg_packets_total{{leg=\"{leg}\",direction=\"in\"}}"
        ));
        assert!(into >= 100, "{leg}: {into} packets in");
        let forwarded = value(&format!("secrelay_leg_forwarded_total{{leg=\"{leg}\"}}"));
        assert!(forwarded >= 150, "{leg}: {forwarded} copies");
    }
    for loc in [&sdes.location, &plain.location] {
        let r = agent().delete(&format!("{}{loc}", s.url())).call().unwrap();
        assert_eq!(r.status().as_u16(), 200);
    }
    let wait_end = Instant::now() + Duration::from_secs(5);
    while s.gateway().rtp_ports_in_use() > 0 {
        assert!(Instant::now() < wait_end, "ports given back");
        std::thread::sleep(Duration::from_millis(10));
    }
    s.shutdown();
}

#[test]
fn a_bad_telephony_offer_is_refused_with_its_reason() {
    let s = Server::start(ServeConfig {
        http: Some("127.0.0.1:0".parse().unwrap()),
        udp: "127.0.0.1:0".parse().unwrap(),
        workers: 1,
        rtp_ports: "47000-47099".into(),
        drain_secs: 0.1,
        ..ServeConfig::default()
    })
    .unwrap();
    let (status, _, body) = post_rtp(&s, "r", "hello");
    assert_eq!(status, 400, "{body}");
    let g729 = "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\nm=audio 4000 RTP/AVP 18\r\n";
    let (status, _, body) = post_rtp(&s, "r", g729);
    assert_eq!(status, 422, "{body}");
    assert!(body.contains("codec"), "{body}");
    let mki = "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\nm=audio 4000 RTP/SAVP 0\r\n\
        a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:WVNfX19zZW1jdGwgKCkgewkyMjA7fQp9CnVubGVz|1:4\r\n";
    let (status, _, body) = post_rtp(&s, "r", mki);
    assert_eq!(status, 422, "{body}");
    assert!(body.contains("MKI"), "{body}");
    assert_eq!(
        s.gateway().rtp_ports_in_use(),
        0,
        "refused offers hold no ports"
    );
    s.shutdown();
}

/// PUTs SDP to a telephony leg's URL: (status, body).
fn put_sdp(s: &Server, location: &str, sdp: &str, content_type: &str) -> (u16, String) {
    let mut r = agent()
        .put(&format!("{}{location}", s.url()))
        .header("Content-Type", content_type)
        .send(sdp)
        .unwrap();
    (
        r.status().as_u16(),
        r.body_mut().read_to_string().unwrap_or_default(),
    )
}

/// `a` and `b` send 40 packets each until each heard 30 of the other's.
fn exchange(a: &mut SocketPhone, b: &mut SocketPhone, fill_a: u8, fill_b: u8) {
    let heard = |p: &SocketPhone, fill: u8| {
        p.phone
            .received
            .iter()
            .filter(|r| RtpHeader::parse(r).is_ok_and(|h| h.payload().first() == Some(&fill)))
            .count()
    };
    let end = Instant::now() + Duration::from_secs(20);
    for sent in 0.. {
        if sent < 40 {
            a.send(&[fill_a; 160]).unwrap();
            b.send(&[fill_b; 160]).unwrap();
        }
        std::thread::sleep(Duration::from_millis(10));
        a.read();
        b.read();
        if heard(a, fill_b) >= 30 && heard(b, fill_a) >= 30 {
            return;
        }
        assert!(
            Instant::now() < end,
            "a heard {}, b heard {}",
            heard(a, fill_b),
            heard(b, fill_a)
        );
    }
}

#[test]
fn a_b2bua_offers_puts_the_answer_and_re_offers_over_http() {
    let s = Server::start(ServeConfig {
        http: Some("127.0.0.1:0".parse().unwrap()),
        udp: "127.0.0.1:0".parse().unwrap(),
        workers: 1,
        rtp_ports: "47000-47999".into(),
        drain_secs: 0.1,
        ..ServeConfig::default()
    })
    .unwrap();
    // Our offer towards an SDES callee, as a B2BUA asks for it.
    let mut r = agent()
        .post(&format!("{}/rooms/b2b/rtp/offer", s.url()))
        .header("Content-Type", "application/json")
        .send(r#"{"transport":"RTP/SAVP","codecs":["PCMU"],"suites":["AES_CM_128_HMAC_SHA1_80"]}"#)
        .unwrap();
    assert_eq!(r.status().as_u16(), 201);
    let callee_url = r
        .headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .unwrap()
        .to_owned();
    let offer = r.body_mut().read_to_string().unwrap();
    assert!(
        offer.contains("RTP/SAVP 0") && offer.contains("a=crypto:1 AES_CM_128_HMAC_SHA1_80"),
        "{offer}"
    );
    let mut callee = SocketPhone::bind(LOCAL, Some(Profile::AesCm128HmacSha1_80), 0xb2b1).unwrap();
    let answer = callee.phone.answer_offer(&offer).unwrap();
    assert_eq!(put_sdp(&s, &callee_url, &answer, "application/sdp").0, 204);
    // A plain caller joins the same room with its own offer.
    let mut caller = SocketPhone::bind(LOCAL, None, 0xb2b2).unwrap();
    let (status, caller_url, to_caller) = post_rtp(&s, "b2b", &caller.phone.offer());
    assert_eq!(status, 201, "{to_caller}");
    let caller_url = caller_url.unwrap();
    caller.phone.accept_answer(&to_caller).unwrap();
    exchange(&mut caller, &mut callee, 0x11, 0x22);

    // The caller moves to a new port: a new offer PUT on its URL, answered (one version on).
    caller.socket = UdpSocket::bind((LOCAL, 0)).unwrap();
    caller.socket.set_nonblocking(true).unwrap();
    caller.phone.addr = caller.socket.local_addr().unwrap();
    let (status, answer) = put_sdp(&s, &caller_url, &caller.phone.offer(), "application/sdp");
    assert_eq!(status, 200, "{answer}");
    assert!(
        answer
            .lines()
            .any(|l| l.starts_with("o=secrelay ") && l.split(' ').nth(2) == Some("2")),
        "{answer}"
    );
    caller.phone.accept_answer(&answer).unwrap();
    exchange(&mut caller, &mut callee, 0x33, 0x44);

    // Bad requests name what is wrong.
    let post = |body: &str| {
        let mut r = agent()
            .post(&format!("{}/rooms/b2b/rtp/offer", s.url()))
            .header("Content-Type", "application/json")
            .send(body)
            .unwrap();
        (
            r.status().as_u16(),
            r.body_mut().read_to_string().unwrap_or_default(),
        )
    };
    let (st, why) = post(r#"{"transport":"UDP/TLS/RTP/SAVPF"}"#);
    assert_eq!(st, 400);
    assert!(why.contains("UDP/TLS/RTP/SAVPF"), "{why}");
    let (st, why) = post(r#"{"codec":["PCMU"]}"#);
    assert_eq!(st, 400);
    assert!(why.contains("codec"), "{why}");
    let (st, why) = post(r#"{"codecs":["G729"]}"#);
    assert_eq!(st, 400);
    assert!(why.contains("G729"), "{why}");
    assert_eq!(
        put_sdp(&s, "/rooms/b2b/rtp/nobody", &answer, "application/sdp").0,
        404
    );
    assert_eq!(put_sdp(&s, &caller_url, &answer, "text/plain").0, 415);
    let (st, why) = put_sdp(&s, &caller_url, "v=0\r\n", "application/sdp");
    assert_eq!(st, 400, "{why}");
    s.shutdown();
}

/// An even port whose next one is free too, a moment ago.
fn free_pair() -> u16 {
    loop {
        let probe = UdpSocket::bind((LOCAL, 0)).unwrap();
        let base = probe.local_addr().unwrap().port() & !1;
        drop(probe);
        if base > 1024 && base < u16::MAX - 1 && UdpSocket::bind((LOCAL, base + 1)).is_ok() {
            return base;
        }
    }
}

/// A gateway with one telephony port pair (`rtp_ports = "P-P+1"`), so the second leg takes
/// the first one's ports: the first leg's phone, still sending after its leg ended, is
/// dropped and counted (`stale_source`) by the second, never latched (the second leg latches
/// on first packets, as for phones behind NAT, and X sends first) and never relayed; the
/// second leg's phone is heard, and the browser's media goes to it alone.
#[test]
fn the_next_leg_on_a_freed_port_refuses_the_previous_phone() {
    let base = free_pair();
    let s = Server::start(ServeConfig {
        http: Some("127.0.0.1:0".parse().unwrap()),
        udp: "127.0.0.1:0".parse().unwrap(),
        workers: 2,
        rtp_ports: format!("{base}-{}", base + 1),
        plain_latch: "first-packets".into(),
        drain_secs: 0.1,
        ..ServeConfig::default()
    })
    .unwrap();
    let sig = Signaling::new(s.url());
    let mut web =
        vec![SimParticipant::join(&sig, "reuse", Leg::Join, LOCAL, Instant::now()).unwrap()];
    let drive = |web: &mut Vec<SimParticipant>| {
        SimParticipant::drive_until(web, Duration::from_millis(20), |_| false).unwrap();
    };
    assert!(
        SimParticipant::drive_until(&mut web, Duration::from_secs(20), |g| {
            g[0].phase == Phase::Connected
        })
        .unwrap()
    );

    // Leg 1: phone X, heard by the browser, then ended.
    let mut x = Phone::join(&s, "reuse", false, 0x0a01);
    assert_eq!(x.gateway.port(), base);
    let end = Instant::now() + Duration::from_secs(20);
    while web[0].received() < 10 {
        x.send(0xa1);
        drive(&mut web);
        assert!(Instant::now() < end, "the browser hears X");
    }
    let r = agent()
        .delete(&format!("{}{}", s.url(), x.location))
        .call()
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(s.gateway().rtp_ports_in_use(), 0);
    drive(&mut web);
    let heard_before = web[0].received();

    // Leg 2: phone Y on the same pair; X sends to it first, and goes on.
    let mut y = Phone::join(&s, "reuse", false, 0x0b02);
    assert_eq!(y.gateway.port(), base, "one pair: taken again");
    let (mut stale, mut from_y) = (0u64, 0u64);
    for _ in 0..10 {
        x.send(0xa2);
        stale += 1;
    }
    let end = Instant::now() + Duration::from_secs(20);
    while web[0].received() < heard_before + 20 {
        x.send(0xa3);
        y.send(0xb1);
        (stale, from_y) = (stale + 1, from_y + 1);
        drive(&mut web);
        assert!(Instant::now() < end, "the browser hears Y");
    }
    let end = Instant::now() + Duration::from_secs(5);
    let leg = loop {
        let leg = api_leg(&s, "reuse", "plain");
        if leg["packets_in"] == from_y && leg["drops"]["stale_source"] == stale {
            break leg;
        }
        assert!(Instant::now() < end, "{leg}");
        drive(&mut web);
    };
    assert_eq!(leg["drops"].as_object().unwrap().len(), 1, "{leg}");
    // Everything the browser heard since is Y's (X's would be more than Y sent).
    drive(&mut web);
    assert!(web[0].received() - heard_before <= from_y);
    // Y was latched, not X: the browser's media goes to Y alone.
    let end = Instant::now() + Duration::from_secs(20);
    while y.received.is_empty() {
        drive(&mut web);
        y.read();
        assert!(Instant::now() < end, "Y hears the browser");
    }
    x.read();
    let x_had = x.received.len();
    for _ in 0..5 {
        drive(&mut web);
    }
    x.read();
    assert_eq!(x.received.len(), x_had, "X is sent nothing");
    s.shutdown();
}
