//! rtpengine's `codec` manipulations through `secrelay serve --ng`, over real sockets: a caller
//! that offers only Opus reaches a callee that answers only PCMA with `transcode` (as a `codec`
//! dictionary, and as Kamailio's `codec-…` flags) and no SDP munging on either side; the tone
//! crosses both ways at its frequency, each side in its own codec; `mask` hides Opus from the
//! callee; `ptime` frames what the callee gets; unknown codec names come back in the `warning`.

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use secrelay_gateway::server::{ServeConfig, Server};
use secrelay_media::g711::Pcma;
use secrelay_media::opus::Opus;
use secrelay_media::{tone, Codec};
use secrelay_srtp::Profile;
use secrelay_testkit::ng::{serve_on_loopback, Ng};
use secrelay_testkit::phone::SocketPhone;
use secrelay_wire::bencode::Bencode;
use secrelay_wire::sdp_rtp::parse_rtp;
use secrelay_wire::RtpHeader;

const LOCAL: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

fn s(v: &str) -> Bencode {
    Bencode::str(v)
}

fn start() -> (Server, Ng) {
    serve_on_loopback(ServeConfig {
        workers: 2,
        rtp_ports: "47000-47999".into(),
        ..ServeConfig::default()
    })
}

/// An ng `offer` or `answer` from the caller's tag (`alice`).
fn msg(command: &str, c: &str, to: Option<&str>, sdp: &str) -> Vec<(String, Bencode)> {
    secrelay_testkit::ng::command(command, c, "alice", to, Some(sdp))
}

/// An Opus-only caller (with telephone-event/48000), a PCMA-only callee.
fn phones(sdes_callee: bool) -> (SocketPhone, SocketPhone) {
    let mut caller = SocketPhone::bind(LOCAL, None, 0xca11).unwrap();
    caller.phone = std::mem::replace(
        &mut caller.phone,
        secrelay_testkit::phone::SimPhone::plain(1),
    )
    .with_formats(&[(111, "opus/48000/2"), (110, "telephone-event/48000")]);
    caller.phone.ts_step = 960;
    let profile = sdes_callee.then_some(Profile::AesCm128HmacSha1_80);
    let mut callee = SocketPhone::bind(LOCAL, profile, 0xca1e).unwrap();
    callee.phone = std::mem::replace(
        &mut callee.phone,
        secrelay_testkit::phone::SimPhone::plain(2),
    )
    .with_formats(&[(8, "PCMA/8000"), (101, "telephone-event/8000")]);
    (caller, callee)
}

/// Both talk a second of tone (the caller in Opus, the callee in PCMA); each decodes what it
/// heard and finds the other's frequency.
fn tone_both_ways(caller: &mut SocketPhone, callee: &mut SocketPhone, callee_ptime: u32) {
    let (up, down) = (1000.0, 450.0);
    let mut enc = Opus::new(48_000, 32_000).unwrap();
    let opus: Vec<Vec<u8>> = tone::sine(48_000, up, 9000.0, 960 * 50)
        .chunks_exact(960)
        .map(|f| {
            let mut p = Vec::new();
            enc.from_pcm(f, &mut p).unwrap();
            p
        })
        .collect();
    let alaw: Vec<Vec<u8>> = tone::sine(8000, down, 9000.0, 160 * 50)
        .chunks_exact(160)
        .map(|f| {
            let mut p = Vec::new();
            Pcma.from_pcm(f, &mut p).unwrap();
            p
        })
        .collect();
    for k in 0..50 {
        caller.send(&opus[k]).unwrap();
        callee.send(&alaw[k]).unwrap();
        std::thread::sleep(Duration::from_millis(10));
        caller.read();
        callee.read();
    }
    let end = Instant::now() + Duration::from_secs(10);
    let want_down = 45;
    let want_up = 45 * 20 / callee_ptime as usize;
    loop {
        caller.read();
        callee.read();
        let (got_up, got_down) = (callee.phone.received.len(), caller.phone.received.len());
        if got_up >= want_up && got_down >= want_down {
            break;
        }
        assert!(
            Instant::now() < end,
            "callee got {got_up} packets, caller {got_down}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The callee hears PCMA (payload type 8) in its packet time, at 1 kHz.
    let mut pcm = Vec::new();
    for p in &callee.phone.received {
        let h = RtpHeader::parse(p).unwrap();
        assert_eq!(h.payload_type(), 8);
        assert_eq!(h.payload().len(), 8 * callee_ptime as usize);
        Pcma.to_pcm(h.payload(), &mut pcm).unwrap();
    }
    let f = tone::zero_crossing_hz(&pcm[800..], 8000);
    assert!((f - up).abs() < 12.0, "the callee heard {f:.1} Hz");
    assert!(tone::tone_share(&pcm[800..], 8000, up) > 0.8);
    // The caller hears Opus (111) at 450 Hz.
    let mut dec = Opus::new(48_000, 32_000).unwrap();
    let mut pcm = Vec::new();
    for p in &caller.phone.received {
        let h = RtpHeader::parse(p).unwrap();
        assert_eq!(h.payload_type(), 111);
        dec.to_pcm(h.payload(), &mut pcm).unwrap();
    }
    let f = tone::zero_crossing_hz(&pcm[4800..], 48_000);
    assert!((f - down).abs() < 8.0, "the caller heard {f:.1} Hz");
    assert!(tone::tone_share(&pcm[4800..], 48_000, down) > 0.8);
}

#[test]
fn an_opus_only_caller_reaches_a_pcma_only_callee_with_transcode() {
    let (server, mut ng) = start();
    let (mut caller, mut callee) = phones(false);
    let mut offer = msg("offer", "t1@proxy", None, &caller.phone.offer());
    offer.push((
        "codec".into(),
        Bencode::Dict(vec![(
            b"transcode".to_vec(),
            Bencode::List(vec![s("PCMA")]),
        )]),
    ));
    let reply = ng.call(offer).unwrap();
    let to_callee = reply["sdp"].clone();
    // PCMA added after the caller's Opus, telephone-event at its clock right after it, then
    // the caller's events, as rtpengine adds them.
    let d = parse_rtp(&to_callee).unwrap();
    let names: Vec<String> = d.sections[0]
        .codecs
        .iter()
        .map(|c| format!("{}/{}", c.name, c.clock_rate))
        .collect();
    assert_eq!(
        names,
        [
            "opus/48000",
            "PCMA/8000",
            "telephone-event/8000",
            "telephone-event/48000"
        ],
        "{to_callee}"
    );
    let answer = callee.phone.answer_offer(&to_callee).unwrap();
    let reply = ng
        .call(msg("answer", "t1@proxy", Some("bob"), &answer))
        .unwrap();
    let to_caller = reply["sdp"].clone();
    // The caller is answered in its own codec: Opus, and its events.
    assert!(to_caller.contains("RTP/AVP 111 110"), "{to_caller}");
    caller.phone.accept_answer(&to_caller).unwrap();
    tone_both_ways(&mut caller, &mut callee, 20);
    // Every copy was transcoded, each packet decoded once (the workers publish their counters
    // now and then: wait for the last of them).
    let end = Instant::now() + Duration::from_secs(5);
    loop {
        let t = server.gateway().stats().totals();
        if t.media_transcoded == 100 || Instant::now() > end {
            assert_eq!((t.media_transcoded, t.media_decoded), (100, 100), "{t:?}");
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn kamailio_style_flags_mask_opus_and_set_the_callees_ptime() {
    let (server, mut ng) = start();
    let (mut caller, mut callee) = phones(true);
    let mut offer = msg("offer", "t2@proxy", None, &caller.phone.offer());
    offer.push(("transport-protocol".into(), s("RTP/SAVP")));
    offer.push((
        "flags".into(),
        Bencode::List(vec![
            s("codec-mask-opus"),
            s("codec-transcode-PCMA"),
            s("codec-strip-G729a"),
        ]),
    ));
    offer.push(("ptime".into(), Bencode::Int(40)));
    let reply = ng.call(offer).unwrap();
    let warning = reply.get("warning").cloned().unwrap_or_default();
    assert!(
        warning.contains("\"G729a\""),
        "unknown names are named: {warning:?}"
    );
    let to_callee = reply["sdp"].clone();
    assert!(!to_callee.contains("opus"), "{to_callee}");
    assert!(to_callee.contains("a=ptime:40"), "{to_callee}");
    let answer = callee.phone.answer_offer(&to_callee).unwrap();
    let to_caller = ng
        .call(msg("answer", "t2@proxy", Some("bob"), &answer))
        .unwrap()["sdp"]
        .clone();
    assert!(
        to_caller.contains("a=rtpmap:111 opus/48000/2"),
        "{to_caller}"
    );
    caller.phone.accept_answer(&to_caller).unwrap();
    tone_both_ways(&mut caller, &mut callee, 40);
    drop(server);
}

#[test]
fn without_codec_flags_an_opus_caller_and_a_pcma_callee_share_nothing() {
    let (_server, mut ng) = start();
    let (caller, mut callee) = phones(false);
    let to_callee = ng
        .call(msg("offer", "t3@proxy", None, &caller.phone.offer()))
        .unwrap()["sdp"]
        .clone();
    // rtpengine passes the offer's codecs on as they are: the callee cannot answer.
    assert!(!to_callee.contains("PCMA"), "{to_callee}");
    assert!(callee.phone.answer_offer(&to_callee).is_err());
}

/// rtpengine's DTMF transcoding (`transcode: telephone-event`) between a PCMU caller without
/// telephone-events and a PCMU callee with them: the callee is offered telephone-event/8000
/// (`0-15`, the first free dynamic payload type) after the caller's PCMU, the caller is answered
/// without it; digits the caller dials as tones reach the callee as telephone-events, and the
/// callee's telephone-events reach the caller as tones, though the audio needs no transcoding.
#[test]
fn transcode_telephone_event_turns_tones_into_events_and_events_into_tones() {
    use secrelay_media::dtmf::{DtmfCollector, DtmfGenerator};
    use secrelay_media::g711::Pcmu;
    use secrelay_media::inband::{Detector, ToneSynth};

    let (_server, mut ng) = start();
    let mut caller = SocketPhone::bind(LOCAL, None, 0xd1a1).unwrap();
    caller.phone = std::mem::replace(
        &mut caller.phone,
        secrelay_testkit::phone::SimPhone::plain(1),
    )
    .with_formats(&[(0, "PCMU/8000")]);
    let mut callee = SocketPhone::bind(LOCAL, None, 0xd1a2).unwrap();
    callee.phone = std::mem::replace(
        &mut callee.phone,
        secrelay_testkit::phone::SimPhone::plain(2),
    )
    .with_formats(&[(0, "PCMU/8000"), (96, "telephone-event/8000")]);
    let mut offer = msg("offer", "dtmf@proxy", None, &caller.phone.offer());
    offer.push((
        "codec".into(),
        Bencode::Dict(vec![(
            b"transcode".to_vec(),
            Bencode::List(vec![s("telephone-event")]),
        )]),
    ));
    let to_callee = ng.call(offer).unwrap()["sdp"].clone();
    assert!(to_callee.contains("RTP/AVP 0 96\r\n"), "{to_callee}");
    assert!(
        to_callee.contains("a=rtpmap:96 telephone-event/8000\r\na=fmtp:96 0-15\r\n"),
        "{to_callee}"
    );
    let answer = callee.phone.answer_offer(&to_callee).unwrap();
    let to_caller = ng
        .call(msg("answer", "dtmf@proxy", Some("bob"), &answer))
        .unwrap()["sdp"]
        .clone();
    assert!(to_caller.contains("RTP/AVP 0\r\n"), "{to_caller}");
    assert!(!to_caller.contains("telephone-event"), "{to_caller}");
    caller.phone.accept_answer(&to_caller).unwrap();

    // The caller: 60 ms of silence, "4" for 120 ms, 100 ms of silence, "#" for 120 ms, 100 ms
    // of silence, as tones in its PCMU. The callee meanwhile: audio, then "9" as events.
    let mut pcm = vec![0i16; 480];
    for (e, ms) in [(4u8, 120usize), (11, 120)] {
        ToneSynth::new(8000).render(e, 10, 8 * ms, &mut pcm);
        pcm.extend(vec![0i16; 800]);
    }
    let frames: Vec<Vec<u8>> = pcm
        .chunks_exact(160)
        .map(|f| {
            let mut p = Vec::new();
            Pcmu.from_pcm(f, &mut p).unwrap();
            p
        })
        .collect();
    let gen = DtmfGenerator::new(8000, 20, 10).unwrap();
    let callee_events = gen.event_packets(9, 4000, gen.ticks(100));
    let to = callee.phone.gateway.unwrap();
    for (k, f) in frames.iter().enumerate() {
        caller.send(f).unwrap();
        if k < 3 {
            callee.send(&[0xff; 160]).unwrap();
        } else if let Some(ep) = callee_events.get(k - 3) {
            let wire = callee
                .phone
                .packet_with(96, ep.timestamp, ep.marker, &ep.event.to_bytes());
            callee.socket.send_to(&wire, to).unwrap();
        }
        std::thread::sleep(Duration::from_millis(10));
        caller.read();
        callee.read();
    }
    let end = Instant::now() + Duration::from_secs(5);
    let mut digits = Vec::new();
    loop {
        caller.read();
        callee.read();
        digits.clear();
        let mut c = DtmfCollector::new();
        for p in &callee.phone.received {
            let h = RtpHeader::parse(p).unwrap();
            if h.payload_type() == 96 {
                c.push(h.timestamp(), h.payload(), &mut digits).unwrap();
            }
        }
        if digits.len() >= 2 || Instant::now() > end {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let got: String = digits.iter().filter_map(|d| d.char()).collect();
    assert_eq!(got, "4#", "the callee's events");
    assert!(digits.iter().all(|d| d.complete), "{digits:?}");
    // The caller hears "9" as tones, in PCMU only.
    let mut heard = Vec::new();
    for p in &caller.phone.received {
        let h = RtpHeader::parse(p).unwrap();
        assert_eq!(h.payload_type(), 0);
        Pcmu.to_pcm(h.payload(), &mut heard).unwrap();
    }
    let mut d = Detector::new(8000);
    let tones: Vec<u8> = heard
        .chunks(160)
        .filter_map(|f| d.push(f))
        .map(|h| h.event)
        .collect();
    assert!(
        !tones.is_empty() && tones.iter().all(|&e| e == 9),
        "{tones:?}"
    );
}
