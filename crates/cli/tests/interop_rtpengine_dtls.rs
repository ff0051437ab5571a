//! DTLS-SRTP on a telephony leg (RFC 5763/5764 as SIP uses it: no ICE, the leg's own ports,
//! RTCP on a port of its own) against rtpengine (Debian's rtpengine-daemon; `scripts/setup`
//! installs it) as the other end of the DTLS. A plain phone calls through secrelay, asked by
//! the proxy for `transport-protocol: RTP/SAVP` with `SDES: off` and `ICE: remove`; secrelay's
//! offer (`a=setup:actpass`, a fingerprint, `a=rtcp`) goes to rtpengine as its caller's SDP,
//! and rtpengine turns it back into plain RTP for the callee. Audio and RTCP must cross both
//! ways, which happens only if both DTLS handshakes (the RTP port's and the RTCP port's)
//! complete, each side checks the other's certificate against its fingerprint, and the SRTP
//! and SRTCP keys each exports agree with the other's.
//!
//! Without rtpengine the test fails under CI (`CI` set) and says SKIPPED elsewhere.

mod lab_support;

use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use secrelay_gateway::server::{ServeConfig, Server};
use secrelay_testkit::ng::{command, Ng};
use secrelay_wire::bencode::Bencode;
use secrelay_wire::sdp_rtp::parse_rtp;

fn s(v: &str) -> Bencode {
    Bencode::str(v)
}

/// A plain phone: RTP on an even port, RTCP on the next.
struct Phone {
    rtp: UdpSocket,
    rtcp: UdpSocket,
}

impl Phone {
    fn new() -> Phone {
        loop {
            let rtp = UdpSocket::bind("127.0.0.1:0").unwrap();
            let port = rtp.local_addr().unwrap().port();
            if !port.is_multiple_of(2) || port == u16::MAX {
                continue;
            }
            if let Ok(rtcp) = UdpSocket::bind(("127.0.0.1", port + 1)) {
                for s in [&rtp, &rtcp] {
                    s.set_nonblocking(true).unwrap();
                }
                return Phone { rtp, rtcp };
            }
        }
    }

    fn sdp(&self, name: &str) -> String {
        let port = self.rtp.local_addr().unwrap().port();
        format!(
            "v=0\r\no={name} 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n\
             m=audio {port} RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\na=sendrecv\r\n"
        )
    }

    /// Everything waiting on a socket.
    fn drain(sock: &UdpSocket) -> Vec<Vec<u8>> {
        let mut got = Vec::new();
        let mut buf = [0u8; 2048];
        while let Ok(n) = sock.recv(&mut buf) {
            got.push(buf[..n].to_vec());
        }
        got
    }
}

/// A PCMU packet of `ssrc`, its payload marked with `seq`.
fn rtp(ssrc: u32, seq: u16) -> Vec<u8> {
    let mut p = vec![0x80, 0];
    p.extend_from_slice(&seq.to_be_bytes());
    p.extend_from_slice(&(u32::from(seq) * 160).to_be_bytes());
    p.extend_from_slice(&ssrc.to_be_bytes());
    p.extend((0..160).map(|i| (i as u8) ^ (seq as u8)));
    p
}

/// An RTCP receiver report of `ssrc` with no blocks, then an SDES CNAME.
fn rtcp(ssrc: u32) -> Vec<u8> {
    let mut p = vec![0x80, 201, 0, 1];
    p.extend_from_slice(&ssrc.to_be_bytes());
    p.extend_from_slice(&[0x81, 202, 0, 3]);
    p.extend_from_slice(&ssrc.to_be_bytes());
    p.extend_from_slice(&[1, 4, b't', b'e', b's', b't', 0, 0]);
    p
}

/// The RTP address section 0 of `sdp` names.
fn media_of(sdp: &str) -> SocketAddr {
    let d = parse_rtp(sdp).unwrap();
    let m = &d.sections[0];
    SocketAddr::new(m.address.or(d.session_address).unwrap(), m.port)
}

fn sdp_of(reply: &HashMap<String, String>) -> String {
    assert_eq!(
        reply.get("result").map(String::as_str),
        Some("ok"),
        "{reply:?}"
    );
    reply["sdp"].clone()
}

/// The RTCP reports secrelay took from the callee's side of call `id` (its `query`).
fn rtcp_from_callee(ng: &mut Ng, id: &str) -> u64 {
    let reply = ng.raw(command("query", id, "alice", None, None)).unwrap();
    let streams = reply
        .get("tags")
        .and_then(|t| t.get("callee"))
        .and_then(|t| t.get("medias"))
        .and_then(|m| match m {
            Bencode::List(l) => l.first()?.get("streams"),
            _ => None,
        });
    let Some(Bencode::List(streams)) = streams else {
        panic!("no streams for the callee's side in {reply:?}")
    };
    match streams
        .get(1)
        .and_then(|s| s.get("stats"))
        .and_then(|s| s.get("packets"))
    {
        Some(Bencode::Int(n)) => *n as u64,
        other => panic!("no RTCP packets in {other:?}"),
    }
}

#[test]
fn a_plain_phone_reaches_rtpengine_over_dtls_srtp_on_a_telephony_leg() {
    let test = "a_plain_phone_reaches_rtpengine_over_dtls_srtp_on_a_telephony_leg";
    // rtpengine answers our actpass as the client: its OpenSSL client has to return the cookie
    // secrelay's server answers a new source's ClientHello with before any handshake begins.
    through_rtpengine(test, "active", (44200, 44399), "44000-44199");
}

/// The same with rtpengine the DTLS server (`DTLS: passive` in its answer) and secrelay the
/// client. rtpengine sends ClientHellos as it takes our offer (its role not settled yet), which
/// reach our leg before its answer does: kept, they derailed our client, and the call was
/// silent.
#[test]
fn a_plain_phone_reaches_rtpengine_over_dtls_srtp_with_secrelay_the_client() {
    let test = "a_plain_phone_reaches_rtpengine_over_dtls_srtp_with_secrelay_the_client";
    through_rtpengine(test, "passive", (44600, 44799), "44400-44599");
}

/// A call from a plain phone through secrelay, DTLS-SRTP to rtpengine in `rtpengine_role`
/// (rtpengine's ports `rtpe`, ours `ours`), plain again to the callee: audio and RTCP both ways.
fn through_rtpengine(test: &str, rtpengine_role: &str, rtpe_ports: (u16, u16), ours: &str) {
    let Some(mut rtpengine) = lab_support::start_rtpengine(test, rtpe_ports) else {
        return;
    };
    let rtpe = &mut rtpengine.ng;
    let server = Server::start(ServeConfig {
        udp: "127.0.0.1:0".parse().unwrap(),
        ng: Some("127.0.0.1:0".parse().unwrap()),
        workers: 1,
        // Plain HTTP on a port of the OS's choice (the default HTTPS address is one only one
        // gateway can have, and both tests here start one).
        http: Some("127.0.0.1:0".parse().unwrap()),
        rtp_ports: ours.into(),
        drain_secs: 0.1,
        ..ServeConfig::default()
    })
    .unwrap();
    let mut ours = Ng::new(server.ng_addr().unwrap()).unwrap();
    let (alice, bob) = (Phone::new(), Phone::new());

    // The proxy asks secrelay for DTLS-SRTP towards the callee, as rtpengine's flags say it.
    let mut offer = command(
        "offer",
        "dtls-leg@test",
        "alice",
        None,
        Some(&alice.sdp("alice")),
    );
    offer.extend([
        ("transport-protocol".into(), s("RTP/SAVP")),
        ("SDES".into(), Bencode::List(vec![s("off")])),
        ("ICE".into(), s("remove")),
    ]);
    let to_callee = sdp_of(&ours.call(offer).unwrap());
    assert!(to_callee.contains("m=audio "), "{to_callee}");
    assert!(to_callee.contains(" RTP/SAVP 0"), "{to_callee}");
    assert!(to_callee.contains("a=setup:actpass"), "{to_callee}");
    assert!(to_callee.contains("a=fingerprint:sha-256 "), "{to_callee}");
    assert!(!to_callee.contains("a=crypto"), "{to_callee}");
    assert!(!to_callee.contains("a=rtcp-mux"), "{to_callee}");

    // rtpengine takes that as its caller's SDP and offers plain RTP to Bob.
    let mut offer = command("offer", "rtpe@test", "gw", None, Some(&to_callee));
    offer.extend([
        ("transport-protocol".into(), s("RTP/AVP")),
        ("ICE".into(), s("remove")),
    ]);
    let to_bob = sdp_of(&rtpe.call(offer).unwrap());
    let mut answer = command(
        "answer",
        "rtpe@test",
        "gw",
        Some("bob"),
        Some(&bob.sdp("bob")),
    );
    if rtpengine_role == "passive" {
        answer.push(("DTLS".into(), s("passive")));
    }
    let from_callee = sdp_of(&rtpe.call(answer).unwrap());
    assert!(from_callee.contains("a=fingerprint:"), "{from_callee}");
    let role = format!("a=setup:{rtpengine_role}");
    assert!(from_callee.contains(&role), "{from_callee}");
    let answer = command(
        "answer",
        "dtls-leg@test",
        "alice",
        Some("callee"),
        Some(&from_callee),
    );
    let to_alice = sdp_of(&ours.call(answer).unwrap());
    assert!(to_alice.contains(" RTP/AVP 0"), "{to_alice}");

    let (at_ours, at_rtpe) = (media_of(&to_alice), media_of(&to_bob));
    let rtcp_of = |a: SocketAddr| SocketAddr::new(a.ip(), a.port() + 1);
    // Audio to Bob, audio to Alice, RTCP to Bob (secrelay's own reports, sent as SRTCP under
    // the RTCP port's keys and unprotected by rtpengine), and the reports secrelay took from
    // rtpengine's side (Bob's, protected by rtpengine under those keys).
    let mut heard = [0u64; 4];
    let enough = |h: &[u64; 4]| h[0] >= 5 && h[1] >= 5 && h[2] >= 1 && h[3] >= 3;
    let end = Instant::now() + Duration::from_secs(20);
    let mut seq = 0u16;
    while !enough(&heard) && Instant::now() < end {
        seq = seq.wrapping_add(1);
        alice.rtp.send_to(&rtp(0xa11ce, seq), at_ours).unwrap();
        bob.rtp.send_to(&rtp(0xb0b, seq), at_rtpe).unwrap();
        if seq.is_multiple_of(5) {
            alice
                .rtcp
                .send_to(&rtcp(0xa11ce), rtcp_of(at_ours))
                .unwrap();
            bob.rtcp.send_to(&rtcp(0xb0b), rtcp_of(at_rtpe)).unwrap();
        }
        std::thread::sleep(Duration::from_millis(20));
        // Byte for byte past the header: relayed PCMU, unprotected by the other end.
        let relayed = |got: Vec<Vec<u8>>, ssrc: u32| {
            got.iter()
                .filter(|p| {
                    let n = u16::from_be_bytes([p[2], p[3]]);
                    p.len() == 172 && p[12..] == rtp(ssrc, n)[12..]
                })
                .count() as u64
        };
        heard[0] += relayed(Phone::drain(&bob.rtp), 0xa11ce);
        heard[1] += relayed(Phone::drain(&alice.rtp), 0xb0b);
        heard[2] += Phone::drain(&bob.rtcp)
            .iter()
            .filter(|p| p.len() >= 8 && (200..=201).contains(&p[1]))
            .count() as u64;
        if seq.is_multiple_of(25) {
            heard[3] = rtcp_from_callee(&mut ours, "dtls-leg@test");
        }
    }
    assert!(
        enough(&heard),
        "audio to Bob, audio to Alice, RTCP to Bob, RTCP from the callee's side: {heard:?} (offer to the callee:\n{to_callee}\nits answer:\n{from_callee})"
    );
    for (ng, id, tag) in [
        (&mut ours, "dtls-leg@test", "alice"),
        (rtpe, "rtpe@test", "gw"),
    ] {
        ng.call(command("delete", id, tag, None, None)).unwrap();
    }
}
