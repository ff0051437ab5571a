//! Comfort noise (RFC 3389) through `secrelay serve --ng`, over real sockets: a caller without
//! it and a callee with it, bridged with rtpengine's `transcode: CN`. Both phones talk PCMU,
//! so the audio itself needs no transcoding; the callee's comfort-noise packets reach the
//! caller as PCMU noise at their level, the caller's silent audio reaches the callee as
//! comfort-noise packets, and speech passes as speech both ways.

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use secrelay_gateway::server::{ServeConfig, Server};
use secrelay_media::g711::Pcmu;
use secrelay_media::{tone, Codec};
use secrelay_testkit::ng::{serve_on_loopback, Ng};
use secrelay_testkit::phone::{SimPhone, SocketPhone};
use secrelay_wire::bencode::Bencode;
use secrelay_wire::RtpHeader;

const LOCAL: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// A gateway on media ports of its own (`ports`), apart from the other test's.
fn start(ports: &str) -> (Server, Ng) {
    serve_on_loopback(ServeConfig {
        workers: 2,
        rtp_ports: ports.into(),
        ..ServeConfig::default()
    })
}

fn msg(command: &str, c: &str, to: Option<&str>, sdp: &str) -> Vec<(String, Bencode)> {
    secrelay_testkit::ng::command(command, c, "alice", to, Some(sdp))
}

fn phone(n: u8, ssrc: u32) -> SocketPhone {
    let mut p = SocketPhone::bind(LOCAL, None, ssrc).unwrap();
    p.phone = std::mem::replace(&mut p.phone, SimPhone::plain(n)).with_formats(&[(0, "PCMU/8000")]);
    p
}

/// 20 ms PCMU frames of a 700 Hz tone (speech, as far as the gateway can tell).
fn speech(frames: usize) -> Vec<Vec<u8>> {
    tone::sine(8000, 700.0, 8000.0, 160 * frames)
        .chunks_exact(160)
        .map(|f| {
            let mut p = Vec::new();
            Pcmu.from_pcm(f, &mut p).unwrap();
            p
        })
        .collect()
}

fn rms(pcm: &[i16]) -> f64 {
    let e: f64 = pcm.iter().map(|&s| f64::from(s) * f64::from(s)).sum();
    (e / pcm.len().max(1) as f64).sqrt()
}

/// Reads both phones until `done` says enough arrived (or 5 s passed).
fn wait(
    a: &mut SocketPhone,
    b: &mut SocketPhone,
    done: impl Fn(&SocketPhone, &SocketPhone) -> bool,
) {
    let end = Instant::now() + Duration::from_secs(5);
    loop {
        a.read();
        b.read();
        if done(a, b) || Instant::now() > end {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn transcode_cn_turns_comfort_noise_into_noise_and_silence_into_comfort_noise() {
    let (_server, mut ng) = start("48000-48499");
    let mut caller = phone(1, 0xc0f1);
    let mut callee = phone(2, 0xc0f2);
    let mut offer = msg("offer", "cn@proxy", None, &caller.phone.offer());
    offer.push((
        "codec".into(),
        Bencode::Dict(vec![(
            b"transcode".to_vec(),
            Bencode::List(vec![Bencode::str("CN")]),
        )]),
    ));
    let to_callee = ng.call(offer).unwrap()["sdp"].clone();
    assert!(to_callee.contains("RTP/AVP 0 13\r\n"), "{to_callee}");
    assert!(to_callee.contains("a=rtpmap:13 CN/8000\r\n"), "{to_callee}");
    // The callee takes PCMU and comfort noise.
    let answer = callee
        .phone
        .answer_offer(&to_callee)
        .unwrap()
        .replace(" RTP/AVP 0\r\n", " RTP/AVP 0 13\r\n")
        .replace("a=sendrecv", "a=rtpmap:13 CN/8000\r\na=sendrecv");
    let to_caller = ng
        .call(msg("answer", "cn@proxy", Some("bob"), &answer))
        .unwrap()["sdp"]
        .clone();
    assert!(to_caller.contains("RTP/AVP 0\r\n"), "{to_caller}");
    assert!(!to_caller.contains("CN/8000"), "{to_caller}");
    caller.phone.accept_answer(&to_caller).unwrap();

    // The callee: 5 frames of speech, a comfort-noise packet at -18 dBov (with spectral bytes)
    // in the place of the sixth, 2 frames of speech after it.
    // The caller: 5 frames of speech, 4 of µ-law silence, 3 of speech.
    let talk = speech(12);
    let to = callee.phone.gateway.unwrap();
    for (k, frame) in talk.iter().enumerate() {
        let up: &[u8] = if (5..9).contains(&k) {
            &[0xff; 160]
        } else {
            frame
        };
        caller.send(up).unwrap();
        match k {
            0..5 | 6..8 => callee.send(frame).unwrap(),
            5 => {
                let ts = callee.phone.ts;
                let cn = callee
                    .phone
                    .packet_with(13, ts, false, &[0x12, 0x23, 0x23, 0x34, 0x56]);
                callee.phone.ts = ts.wrapping_add(160);
                callee.socket.send_to(&cn, to).unwrap();
            }
            _ => {}
        }
        std::thread::sleep(Duration::from_millis(10));
        caller.read();
        callee.read();
    }
    wait(&mut caller, &mut callee, |a, b| {
        a.phone.received.len() >= 8 && b.phone.received.len() >= 12
    });

    // The caller got 8 PCMU packets, one stream: 5 of speech, the noise, 2 of speech.
    let down: Vec<RtpHeader<'_>> = caller
        .phone
        .received
        .iter()
        .map(|p| RtpHeader::parse(p).unwrap())
        .collect();
    assert_eq!(down.len(), 8, "the caller's packets");
    for (k, h) in down.iter().enumerate() {
        assert_eq!(h.payload_type(), 0, "packet {k}");
        assert_eq!(h.payload().len(), 160, "packet {k}");
        assert_eq!(h.sequence(), down[0].sequence().wrapping_add(k as u16));
        assert_eq!(
            h.timestamp(),
            down[0].timestamp().wrapping_add(160 * k as u32)
        );
    }
    let mut noise = Vec::new();
    Pcmu.to_pcm(down[5].payload(), &mut noise).unwrap();
    let level = 20.0 * (rms(&noise) / 32767.0).log10();
    assert!(
        (level + 18.0).abs() < 2.0,
        "the noise is at {level:.1} dBov"
    );
    assert_ne!(down[5].payload(), talk[5].as_slice());
    for k in [0usize, 4, 6, 7] {
        assert_eq!(down[k].payload(), talk[k].as_slice(), "speech {k} passes");
    }

    // The callee got 12 packets, one stream: speech as PCMU, each silent frame as a 1-byte
    // comfort-noise packet at -32 dBov, speech again (the first after the silence marked).
    let up: Vec<RtpHeader<'_>> = callee
        .phone
        .received
        .iter()
        .map(|p| RtpHeader::parse(p).unwrap())
        .collect();
    assert_eq!(up.len(), 12, "the callee's packets");
    for (k, h) in up.iter().enumerate() {
        assert_eq!(h.sequence(), up[0].sequence().wrapping_add(k as u16));
        assert_eq!(
            h.timestamp(),
            up[0].timestamp().wrapping_add(160 * k as u32)
        );
        if (5..9).contains(&k) {
            assert_eq!((h.payload_type(), h.payload()), (13, &[0x20u8][..]), "{k}");
        } else {
            assert_eq!(h.payload_type(), 0, "{k}");
            assert_eq!(h.payload(), talk[k].as_slice(), "speech {k} passes");
        }
    }
    assert!(up[9].marker(), "a talkspurt begins after the comfort noise");
    assert!(!up[5].marker() && !up[8].marker());
}

#[test]
fn malformed_comfort_noise_is_dropped() {
    let (_server, mut ng) = start("48500-48999");
    let mut caller = phone(1, 0xbad1);
    let mut callee = phone(2, 0xbad2);
    let mut offer = msg("offer", "badcn@proxy", None, &caller.phone.offer());
    offer.push((
        "flags".into(),
        Bencode::List(vec![Bencode::str("codec-transcode-CN")]),
    ));
    let to_callee = ng.call(offer).unwrap()["sdp"].clone();
    assert!(to_callee.contains("RTP/AVP 0 13\r\n"), "{to_callee}");
    let answer = callee
        .phone
        .answer_offer(&to_callee)
        .unwrap()
        .replace(" RTP/AVP 0\r\n", " RTP/AVP 0 13\r\n")
        .replace("a=sendrecv", "a=rtpmap:13 CN/8000\r\na=sendrecv");
    let to_caller = ng
        .call(msg("answer", "badcn@proxy", Some("bob"), &answer))
        .unwrap()["sdp"]
        .clone();
    caller.phone.accept_answer(&to_caller).unwrap();
    let talk = speech(4);
    let to = callee.phone.gateway.unwrap();
    // Speech first, until the caller hears it.
    for frame in &talk[..3] {
        caller.send(frame).unwrap();
        callee.send(frame).unwrap();
        std::thread::sleep(Duration::from_millis(20));
    }
    wait(&mut caller, &mut callee, |a, _| {
        !a.phone.received.is_empty()
    });
    for bad in [&[][..], &[0x80], &[0xff, 1, 2]] {
        let ts = callee.phone.ts;
        let cn = callee.phone.packet_with(13, ts, false, bad);
        callee.phone.ts = ts.wrapping_add(160);
        callee.socket.send_to(&cn, to).unwrap();
    }
    callee.send(&talk[3]).unwrap();
    // The speech after them arrives (the time they took concealed): PCMU only.
    let last = talk[3].clone();
    wait(&mut caller, &mut callee, |a, _| {
        a.phone
            .received
            .last()
            .is_some_and(|p| RtpHeader::parse(p).unwrap().payload() == last)
    });
    let down: Vec<RtpHeader<'_>> = caller
        .phone
        .received
        .iter()
        .map(|p| RtpHeader::parse(p).unwrap())
        .collect();
    assert!(down.len() >= 2, "{}", down.len());
    assert!(down
        .iter()
        .all(|h| h.payload_type() == 0 && h.payload().len() == 160));
    assert_eq!(down.last().unwrap().payload(), talk[3].as_slice());
}
