//! rtpengine's media-control commands through secrelay's ng socket and through rtpengine's
//! (Debian's rtpengine-daemon; `scripts/setup` installs it), each script run against both.
//!
//! - `block media`, `silence media`, `block DTMF` and their `unblock`s: two plain phones (PCMU
//!   and telephone-events), each phase a burst of speech and one DTMF event from each phone, and
//!   what the other phone hears counted. Both relays must give the same counts in every phase
//!   (and the counts a SIP proxy expects: a blocked participant's speech gone and its DTMF
//!   through, a silenced call's speech there as µ-law silence in the same packets, blocked DTMF
//!   gone and the speech through, a participant blocked by name still blocked after a
//!   call-wide unblock).
//! - `play DTMF` as the caller, to a callee with telephone-events and to one without: the same
//!   digit reaches the callee through both, as events and as tones.
//! - `start recording` and `stop recording` in an SDES call (rtpengine with
//!   `--recording-method=pcap`): both files hold the same packets, decrypted, those sent while
//!   the call was recorded and no others.
//!
//! - `play media` to the caller, a WAV file by name and as a blob: both play it for as long
//!   as it lasts, in the caller's codec, and the callee is heard again after it; `stop media`
//!   ends it early.
//!
//! - `subscribe request`, `subscribe answer` and `unsubscribe`: a third phone subscribed to the
//!   caller hears the caller's speech and DTMF and none of the callee's, what it sends reaches
//!   no one, and once unsubscribed it hears nothing, through both.
//! - `publish`: a phone's `sendonly` SDP is answered `recvonly` with the same one codec by
//!   both, and a subscriber of it hears its speech and its DTMF event through both.
//!
//! Without rtpengine the tests fail under CI (`CI` set) and say SKIPPED elsewhere.

mod lab_support;

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use secrelay_gateway::server::{ServeConfig, Server};
use secrelay_testkit::ng::{command, serve_on_loopback, Ng};
use secrelay_testkit::phone::{SimPhone, SocketPhone};
use secrelay_wire::bencode::Bencode;
use secrelay_wire::RtpHeader;

const LOCAL: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
/// Speech frames each phone sends per phase.
const FRAMES: usize = 5;
/// The first octet of each phone's speech (caller's, callee's).
const SPEECH: [u8; 2] = [0x11, 0x22];

/// What one phone heard of the other in a phase: (speech, µ-law silence, DTMF events).
type Heard = (usize, usize, usize);

fn phone(ssrc: u32) -> SocketPhone {
    let mut p = SocketPhone::bind(LOCAL, None, ssrc).unwrap();
    p.phone = std::mem::replace(&mut p.phone, SimPhone::plain(1))
        .with_formats(&[(0, "PCMU/8000"), (101, "telephone-event/8000")]);
    p
}

/// A request of `name` about call `id`, with `extra` entries.
fn req(name: &str, id: &str, extra: &[(&str, &str)]) -> Vec<(String, Bencode)> {
    let mut d = vec![
        ("command".to_owned(), Bencode::str(name)),
        ("call-id".to_owned(), Bencode::str(id)),
    ];
    d.extend(
        extra
            .iter()
            .map(|(k, v)| ((*k).to_owned(), Bencode::str(v))),
    );
    d
}

/// secrelay on media ports `ports` of its own (recording into `recording_dir` when given), and
/// an ng client of it.
fn secrelay(ports: &str, recording_dir: Option<&std::path::Path>) -> (Server, Ng) {
    secrelay_with(ServeConfig {
        rtp_ports: ports.into(),
        recording_dir: recording_dir.map(ToOwned::to_owned),
        ..ServeConfig::default()
    })
}

/// secrelay with `config` (its sockets on loopback, one worker), and an ng client of it.
fn secrelay_with(config: ServeConfig) -> (Server, Ng) {
    serve_on_loopback(ServeConfig {
        workers: 1,
        ..config
    })
}

/// One phase: each phone sends [`FRAMES`] of speech and a DTMF event (digit 5, its end);
/// what each heard of the other (caller's, callee's).
fn phase(phones: &mut [SocketPhone; 2]) -> [Heard; 2] {
    for p in phones.iter_mut() {
        p.phone.received.clear();
    }
    for k in 0..FRAMES {
        for (n, p) in phones.iter_mut().enumerate() {
            p.send(&[SPEECH[n]; 160]).unwrap();
            if k == 2 {
                let ts = p.phone.ts;
                let event = p.phone.packet_with(101, ts, true, &[5, 0x8a, 0x03, 0x20]);
                p.socket.send_to(&event, p.phone.gateway.unwrap()).unwrap();
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    // Until each heard all it can hear (the six packets), or a second passed.
    let end = Instant::now() + Duration::from_secs(1);
    loop {
        phones.iter_mut().for_each(SocketPhone::read);
        let done = phones.iter().all(|p| p.phone.received.len() > FRAMES);
        if done || Instant::now() > end {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // And a moment for anything late.
    std::thread::sleep(Duration::from_millis(50));
    phones.iter_mut().for_each(SocketPhone::read);
    [tally(&phones[0], SPEECH[1]), tally(&phones[1], SPEECH[0])]
}

fn tally(p: &SocketPhone, speech: u8) -> Heard {
    let mut h = (0, 0, 0);
    for r in &p.phone.received {
        let Ok(rtp) = RtpHeader::parse(r) else {
            continue;
        };
        match (rtp.payload_type(), rtp.payload()) {
            (101, _) => h.2 += 1,
            (0, pl) if pl.len() == 160 && pl.iter().all(|&b| b == 0xFF) => h.1 += 1,
            (0, pl) if pl.len() == 160 && pl.iter().all(|&b| b == speech) => h.0 += 1,
            _ => {}
        }
    }
    h
}

/// A call `id` through `ng` between two plain phones (caller, callee), offered and answered.
fn open_call(ng: &mut Ng, id: &str, ssrcs: [u32; 2]) -> [SocketPhone; 2] {
    let mut phones = [phone(ssrcs[0]), phone(ssrcs[1])];
    let offer = command("offer", id, "caller", None, Some(&phones[0].phone.offer()));
    let to_callee = ng.call(offer).unwrap()["sdp"].clone();
    let answer = phones[1].phone.answer_offer(&to_callee).unwrap();
    let to_caller = ng
        .call(command(
            "answer",
            id,
            "caller",
            Some("callee"),
            Some(&answer),
        ))
        .unwrap()["sdp"]
        .clone();
    phones[0].phone.accept_answer(&to_caller).unwrap();
    phones
}

/// The script, through the ng socket `ng`: what the phones heard in each phase, named.
fn script(ng: &mut Ng, id: &str) -> Vec<(&'static str, [Heard; 2])> {
    let mut phones = open_call(ng, id, [0x6a7e_0001, 0x6a7e_0002]);
    let caller = [("from-tag", "caller")];
    let mut run = |name, ng: &mut Ng, step: Option<Vec<(String, Bencode)>>| {
        if let Some(step) = step {
            ng.call(step).unwrap_or_else(|e| panic!("{name}: {e:#}"));
        }
        (name, phase(&mut phones))
    };
    let phases = vec![
        run("open", ng, None),
        run(
            "caller's media blocked",
            ng,
            Some(req("block media", id, &caller)),
        ),
        run("unblocked", ng, Some(req("unblock media", id, &caller))),
        run("the call silenced", ng, Some(req("silence media", id, &[]))),
        run("unsilenced", ng, Some(req("unsilence media", id, &[]))),
        run(
            "caller's DTMF blocked",
            ng,
            Some(req("block DTMF", id, &caller)),
        ),
        run("DTMF unblocked", ng, Some(req("unblock DTMF", id, &caller))),
        run(
            "caller's media blocked by name",
            ng,
            Some(req("block media", id, &caller)),
        ),
        run(
            "the call's media blocked",
            ng,
            Some(req("block media", id, &[])),
        ),
        run(
            "the call's unblocked",
            ng,
            Some(req("unblock media", id, &[])),
        ),
    ];
    ng.call(command("delete", id, "caller", None, None))
        .unwrap();
    phases
}

#[test]
fn block_silence_and_unblock_as_rtpengine_does() {
    let test = "block_silence_and_unblock_as_rtpengine_does";
    let Some(mut rtpengine) = lab_support::start_rtpengine(test, (45000, 45499)) else {
        return;
    };
    let (_server, mut ours) = secrelay("45500-45999", None);

    let theirs = script(&mut rtpengine.ng, "gate-rtpengine@test");
    let mine = script(&mut ours, "gate-secrelay@test");

    // (caller heard, callee heard), each (speech, silence, events).
    let everything = [(FRAMES, 0, 1); 2];
    let expected = [
        ("open", everything),
        ("caller's media blocked", [(FRAMES, 0, 1), (0, 0, 1)]),
        ("unblocked", everything),
        ("the call silenced", [(0, FRAMES, 1); 2]),
        ("unsilenced", everything),
        ("caller's DTMF blocked", [(FRAMES, 0, 1), (FRAMES, 0, 0)]),
        ("DTMF unblocked", everything),
        (
            "caller's media blocked by name",
            [(FRAMES, 0, 1), (0, 0, 1)],
        ),
        ("the call's media blocked", [(0, 0, 1); 2]),
        ("the call's unblocked", [(FRAMES, 0, 1), (0, 0, 1)]),
    ];
    for ((name, want), ((_, rtpe), (_, ours))) in expected.iter().zip(theirs.iter().zip(&mine)) {
        assert_eq!(rtpe, ours, "{name}: rtpengine heard, secrelay heard");
        assert_eq!(ours, want, "{name}");
    }
    assert_eq!(mine.len(), expected.len());
}

/// The RTP in the pcap files under `dir` (any depth): per first payload octet, how many
/// packets (RTCP left out).
fn recorded(dir: &std::path::Path) -> std::collections::BTreeMap<u8, usize> {
    let mut counts = std::collections::BTreeMap::new();
    let mut folders = vec![dir.to_path_buf()];
    while let Some(d) = folders.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = e.path();
            if path.is_dir() {
                folders.push(path);
            } else if path.extension().is_some_and(|x| x == "pcap") {
                let capture = secrelay_wire::pcap::Capture::parse(&std::fs::read(&path).unwrap())
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                for p in &capture.packets {
                    let Some(rtp) = p.udp_payload().and_then(|u| RtpHeader::parse(u).ok()) else {
                        continue;
                    };
                    if rtp.payload_type() < 64 {
                        if let Some(&first) = rtp.payload().first() {
                            *counts.entry(first).or_default() += 1;
                        }
                    }
                }
            }
        }
    }
    counts
}

/// An SDES call through `ng` recorded between `start recording` and `stop recording`: 10
/// packets each way before, 20 while, 10 after; then deleted.
fn record_script(ng: &mut Ng, id: &str) {
    use secrelay_lab::failover::PhoneCall;
    let mut call = PhoneCall::open(
        ng,
        id,
        Some(secrelay_srtp::Profile::AesCm128HmacSha1_80),
        0x6a7e_0100,
        1000,
    )
    .unwrap();
    let talk = |call: &mut PhoneCall, n: usize| {
        for _ in 0..n {
            call.exchange().unwrap();
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    talk(&mut call, 10);
    ng.call(req("start recording", id, &[])).unwrap();
    talk(&mut call, 20);
    ng.call(req("stop recording", id, &[])).unwrap();
    talk(&mut call, 10);
    ng.call(command("delete", id, "caller", None, None))
        .unwrap();
}

#[test]
fn a_recorded_sdes_call_holds_the_same_decrypted_packets_as_rtpengines() {
    let test = "a_recorded_sdes_call_holds_the_same_decrypted_packets_as_rtpengines";
    let (theirs_dir, ours_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let extra = [
        format!("--recording-dir={}", theirs_dir.path().display()),
        "--recording-method=pcap".to_owned(),
    ];
    let Some(mut rtpengine) = lab_support::start_rtpengine_with(test, (44000, 44499), &extra)
    else {
        return;
    };
    let (_server, mut ours) = secrelay("44500-44999", Some(ours_dir.path()));
    record_script(&mut rtpengine.ng, "rec-rtpe@test");
    record_script(&mut ours, "rec-ours@test");
    // The files are written by threads of their own: a moment for them to close.
    let until = Instant::now() + Duration::from_secs(3);
    let (mut theirs, mut mine) = (recorded(theirs_dir.path()), recorded(ours_dir.path()));
    while (theirs.values().sum::<usize>() < 40 || mine.values().sum::<usize>() < 40)
        && Instant::now() < until
    {
        std::thread::sleep(Duration::from_millis(100));
        (theirs, mine) = (recorded(theirs_dir.path()), recorded(ours_dir.path()));
    }
    // The caller's packets (0xc1…) and the callee's (0xb0…), decrypted, 20 each.
    let want = std::collections::BTreeMap::from([(0xb0, 20), (0xc1, 20)]);
    assert_eq!(theirs, want, "rtpengine's recording");
    assert_eq!(mine, want, "secrelay's recording");
    // Ours says what it holds.
    let about: Vec<serde_json::Value> = std::fs::read_dir(ours_dir.path())
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
        .map(|e| serde_json::from_slice(&std::fs::read(e.path()).unwrap()).unwrap())
        .collect();
    assert_eq!(about.len(), 1);
    use std::os::unix::fs::PermissionsExt;
    for e in std::fs::read_dir(ours_dir.path()).unwrap().flatten() {
        let mode = e.metadata().unwrap().permissions().mode() & 0o777;
        assert_eq!(
            mode,
            0o600,
            "{}: the call's media in clear",
            e.path().display()
        );
    }
    assert_eq!(about[0]["call_id"], "rec-ours@test");
    assert_eq!(about[0]["packets"], 40);
    assert!(about[0]["ended"].as_f64().unwrap() >= about[0]["started"].as_f64().unwrap());
}

/// What a callee got of a digit played as the caller (`play DTMF`): the digits of its
/// telephone-events (with their durations in ticks, and whether each ended), and the digits
/// heard as tones in its audio.
#[derive(Debug, PartialEq, Eq)]
struct Played {
    events: Vec<(char, u32, bool)>,
    tones: String,
}

/// A call (flag `inject DTMF` in offer and answer, as rtpengine needs it) whose caller has
/// telephone-events and whose callee has them if `callee_events`; `play DTMF` of `#` for 200 ms
/// as the caller while it talks for 600 ms: what the callee got.
fn play_script(ng: &mut Ng, id: &str, callee_events: bool) -> Played {
    let mut caller = phone(0x6a7e_0011);
    let mut callee = phone(0x6a7e_0012);
    if !callee_events {
        callee.phone = std::mem::replace(&mut callee.phone, SimPhone::plain(2))
            .with_formats(&[(0, "PCMU/8000")]);
    }
    let inject = (
        "flags".to_owned(),
        Bencode::List(vec![Bencode::str("inject DTMF")]),
    );
    let mut offer = command("offer", id, "caller", None, Some(&caller.phone.offer()));
    offer.push(inject.clone());
    let to_callee = ng.call(offer).unwrap()["sdp"].clone();
    let answer = callee.phone.answer_offer(&to_callee).unwrap();
    let mut answer = command("answer", id, "caller", Some("callee"), Some(&answer));
    answer.push(inject);
    let to_caller = ng.call(answer).unwrap()["sdp"].clone();
    caller.phone.accept_answer(&to_caller).unwrap();
    // A moment of talk first, then the digit.
    let talk = |p: &mut SocketPhone, frames: usize| {
        for _ in 0..frames {
            p.send(&[0x11; 160]).unwrap();
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    talk(&mut caller, 5);
    let mut play = req("play DTMF", id, &[("from-tag", "caller"), ("code", "#")]);
    play.push(("duration".into(), Bencode::Int(200)));
    ng.call(play).unwrap();
    talk(&mut caller, 30);
    std::thread::sleep(Duration::from_millis(100));
    callee.read();
    let mut collector = secrelay_media::dtmf::DtmfCollector::new();
    let (mut digits, mut pcm) = (Vec::new(), Vec::new());
    for r in &callee.phone.received {
        let Ok(rtp) = RtpHeader::parse(r) else {
            continue;
        };
        match rtp.payload_type() {
            101 => {
                let _ = collector.push(rtp.timestamp(), rtp.payload(), &mut digits);
            }
            0 => pcm.extend(rtp.payload().iter().map(|&b| ulaw(b))),
            _ => {}
        }
    }
    collector.finish(&mut digits);
    ng.call(command("delete", id, "caller", None, None))
        .unwrap();
    Played {
        events: digits
            .iter()
            .map(|d| (d.char().unwrap_or('?'), d.duration, d.complete))
            .collect(),
        tones: secrelay_media::inband::digits_heard(&pcm, 8000),
    }
}

/// A µ-law sample decoded.
fn ulaw(b: u8) -> i16 {
    use secrelay_media::Codec;
    let mut out = Vec::with_capacity(1);
    secrelay_media::g711::Pcmu.to_pcm(&[b], &mut out).unwrap();
    out[0]
}

#[test]
fn play_dtmf_reaches_the_far_end_as_rtpengine_sends_it() {
    let test = "play_dtmf_reaches_the_far_end_as_rtpengine_sends_it";
    let Some(mut rtpengine) = lab_support::start_rtpengine(test, (46000, 46499)) else {
        return;
    };
    let (_server, mut ours) = secrelay("46500-46999", None);
    for callee_events in [true, false] {
        let theirs = play_script(
            &mut rtpengine.ng,
            &format!("play-{callee_events}-rtpe@test"),
            callee_events,
        );
        let mine = play_script(
            &mut ours,
            &format!("play-{callee_events}-ours@test"),
            callee_events,
        );
        eprintln!(
            "callee with telephone-events {callee_events}: rtpengine {theirs:?}, secrelay {mine:?}"
        );
        let what = format!("callee with telephone-events: {callee_events}: rtpengine {theirs:?}, secrelay {mine:?}");
        assert_eq!(theirs.tones, mine.tones, "{what}");
        assert_eq!(theirs.events.len(), mine.events.len(), "{what}");
        for (t, m) in theirs.events.iter().zip(&mine.events) {
            // The same digit, ended; rtpengine's event lasts one packet (160 ticks) longer
            // than asked, ours as long as asked.
            assert_eq!((t.0, t.2), (m.0, m.2), "{what}");
            assert!(t.1.abs_diff(m.1) <= 160, "{what}");
            assert_eq!(m.1, 1600, "{what}");
        }
        if callee_events {
            assert_eq!(mine.events.len(), 1, "{what}");
        } else {
            assert_eq!(mine.tones, "#", "{what}");
        }
    }
}

/// What the caller heard of a `play media` while the callee talked on: packets of speech
/// before, during and after the clip's packets, the clip's packets, the share of its tone in
/// them, and the SSRCs it came under.
#[derive(Debug)]
struct MediaHeard {
    duration: i64,
    speech: [usize; 3],
    clip: usize,
    tone_share: f64,
    ssrcs: usize,
}

/// The callee talks [`FRAMES`]×8 packets, 20 ms apart; `play media` with `media` (the file's
/// name or its contents) to the caller after the first 5.
fn media_script(ng: &mut Ng, id: &str, media: (&str, Bencode)) -> MediaHeard {
    let mut phones = open_call(ng, id, [0x6a7e_0201, 0x6a7e_0202]);
    let mut duration = 0;
    for k in 0..FRAMES * 8 {
        phones[1].send(&[SPEECH[1]; 160]).unwrap();
        if k == 5 {
            let mut r = req("play media", id, &[("from-tag", "caller")]);
            r.push((media.0.to_owned(), media.1.clone()));
            let reply = ng.call(r).unwrap();
            duration = reply
                .get("duration")
                .and_then(|d| d.parse().ok())
                .unwrap_or(-1);
        }
        std::thread::sleep(Duration::from_millis(20));
        phones[0].read();
    }
    std::thread::sleep(Duration::from_millis(100));
    phones[0].read();
    ng.call(command("delete", id, "caller", None, None))
        .unwrap();
    let mut played = MediaHeard {
        duration,
        speech: [0; 3],
        clip: 0,
        tone_share: 0.0,
        ssrcs: 0,
    };
    let mut pcm = Vec::new();
    let mut ssrcs = std::collections::HashSet::new();
    for r in &phones[0].phone.received {
        let Ok(rtp) = RtpHeader::parse(r) else {
            continue;
        };
        ssrcs.insert(rtp.ssrc());
        if rtp.payload_type() != 0 {
            continue;
        }
        if rtp.payload().iter().all(|&b| b == SPEECH[1]) {
            played.speech[if played.clip == 0 { 0 } else { 2 }] += 1;
            continue;
        }
        // Speech heard between two of the clip's packets: during it.
        played.speech[1] += std::mem::take(&mut played.speech[2]);
        played.clip += 1;
        pcm.extend(
            rtp.payload()
                .iter()
                .map(|&c| secrelay_media::g711::ulaw_decode(c)),
        );
    }
    played.ssrcs = ssrcs.len();
    // The tone in what was played, past its first packets (a resampler's start).
    played.tone_share = secrelay_media::tone::tone_share(&pcm[pcm.len().min(480)..], 8000, 1000.0);
    played
}

#[test]
fn media_played_to_a_caller_as_rtpengine_plays_it() {
    let test = "media_played_to_a_caller_as_rtpengine_plays_it";
    let Some(mut rtpengine) = lab_support::start_rtpengine(test, (43000, 43499)) else {
        return;
    };
    let media = tempfile::tempdir().unwrap();
    // 300 ms of 1 kHz at 16 kHz: both resample it to the caller's 8 kHz µ-law.
    let tone = secrelay_media::tone::sine(16_000, 1000.0, 8000.0, 4800);
    let wav = secrelay_media::clip::wav_pcm16(16_000, 1, &tone);
    let path = media.path().join("announcement.wav");
    std::fs::write(&path, &wav).unwrap();
    let (_server, mut ours) = secrelay_with(ServeConfig {
        rtp_ports: "43500-43999".into(),
        media_dir: Some(media.path().to_owned()),
        ..ServeConfig::default()
    });
    let name = path.to_string_lossy().into_owned();
    for (how, value) in [
        ("file", Bencode::str(&name)),
        ("blob", Bencode::Str(wav.clone())),
    ] {
        let theirs = media_script(
            &mut rtpengine.ng,
            &format!("play-{how}-rtpe@test"),
            (how, value.clone()),
        );
        let mine = media_script(&mut ours, &format!("play-{how}-ours@test"), (how, value));
        eprintln!("{how}: rtpengine {theirs:?}, secrelay {mine:?}");
        for (who, p) in [("rtpengine", &theirs), ("secrelay", &mine)] {
            assert_eq!(p.duration, 300, "{who} {how}: the file's length");
            assert!((14..=17).contains(&p.clip), "{who} {how}: {p:?}");
            assert!(p.tone_share > 0.9, "{who} {how}: {p:?}");
            assert!(
                p.speech[0] >= 4 && p.speech[2] >= 15,
                "{who} {how}: before and after {p:?}"
            );
        }
        // Ours: the clip in place of the callee's speech, on the one stream the caller knows.
        assert_eq!((mine.speech[1], mine.ssrcs), (0, 1), "{mine:?}");
    }

    // Stopped early: where it was, and the callee heard again at once.
    let mut phones = open_call(&mut ours, "stop-ours@test", [0x6a7e_0301, 0x6a7e_0302]);
    let mut r = req(
        "play media",
        "stop-ours@test",
        &[("from-tag", "caller"), ("repeat-times", "10")],
    );
    r.push(("file".to_owned(), Bencode::str("announcement.wav")));
    assert_eq!(ours.call(r).unwrap()["duration"], "300");
    std::thread::sleep(Duration::from_millis(500));
    let stopped = ours
        .call(req(
            "stop media",
            "stop-ours@test",
            &[("from-tag", "caller")],
        ))
        .unwrap();
    let at: u64 = stopped["last-frame-pos"].parse().unwrap();
    assert!(
        (5..=15).contains(&at),
        "{at}: frames into the second play of 15"
    );
    phones[0].read();
    phones[0].phone.received.clear();
    for _ in 0..5 {
        phones[1].send(&[SPEECH[1]; 160]).unwrap();
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(50));
    phones[0].read();
    assert_eq!(tally(&phones[0], SPEECH[1]).0, 5, "the callee heard again");
    // A name that leads out of the media folder is refused, and so is a missing one.
    for bad in ["../../etc/passwd", "missing.wav"] {
        let mut r = req("play media", "stop-ours@test", &[("from-tag", "caller")]);
        r.push(("file".to_owned(), Bencode::str(bad)));
        let e = ours.call(r).unwrap_err().to_string();
        assert!(e.contains(bad), "{bad}: {e}");
    }
}

/// What a subscriber heard in each phase of [`subscribe_script`]: (caller's speech, callee's
/// speech, DTMF events), and what the two phones heard of its own packets.
type Listened = [(usize, usize, usize, usize); 2];

/// A call between two plain phones; a third subscribes to the caller (`subscribe request`,
/// `subscribe answer`), a phase is spoken (each phone's speech and a DTMF event, the subscriber
/// sending packets of its own too), then it `unsubscribe`s and a second phase is spoken: what
/// it heard in each, and what the phones heard of it.
fn subscribe_script(ng: &mut Ng, id: &str) -> Listened {
    let mut phones = open_call(ng, id, [0x6a7e_0031, 0x6a7e_0032]);
    let mut sub = phone(0x6a7e_0033);
    let r = ng
        .call(req(
            "subscribe request",
            id,
            &[("from-tag", "caller"), ("to-tag", "listener")],
        ))
        .unwrap();
    let offer = &r["sdp"];
    assert!(offer.contains("a=sendonly"), "{id}: {offer}");
    let answer = sub.phone.answer_offer(offer).unwrap();
    ng.call(req(
        "subscribe answer",
        id,
        &[("to-tag", "listener"), ("sdp", &answer)],
    ))
    .unwrap();
    const OWN: u8 = 0x33;
    let listen = |phones: &mut [SocketPhone; 2], sub: &mut SocketPhone| {
        sub.phone.received.clear();
        let _ = sub.send(&[OWN; 160]);
        phase(phones);
        sub.read();
        let t = |speech: u8| tally(sub, speech);
        let own = phones.iter().map(|p| tally(p, OWN).0).sum::<usize>();
        (t(SPEECH[0]).0, t(SPEECH[1]).0, t(SPEECH[0]).2, own)
    };
    let subscribed = listen(&mut phones, &mut sub);
    ng.call(req("unsubscribe", id, &[("to-tag", "listener")]))
        .unwrap();
    std::thread::sleep(Duration::from_millis(50));
    sub.read();
    let unsubscribed = listen(&mut phones, &mut sub);
    ng.call(command("delete", id, "caller", None, None))
        .unwrap();
    [subscribed, unsubscribed]
}

#[test]
fn a_subscriber_hears_the_caller_as_through_rtpengine() {
    let test = "a_subscriber_hears_the_caller_as_through_rtpengine";
    let Some(mut rtpengine) = lab_support::start_rtpengine(test, (43000, 43499)) else {
        return;
    };
    let (_server, mut ours) = secrelay("43500-43999", None);
    let theirs = subscribe_script(&mut rtpengine.ng, "sub-rtpengine@test");
    let mine = subscribe_script(&mut ours, "sub-secrelay@test");
    assert_eq!(
        theirs, mine,
        "what the subscriber heard: rtpengine's, secrelay's"
    );
    // The caller's speech and its DTMF event, none of the callee's; nothing of the
    // subscriber's own reaches the phones; nothing once unsubscribed.
    assert_eq!(mine, [(FRAMES, 0, 1, 0), (0, 0, 0, 0)]);
}

/// What [`publish_script`] saw: the formats and direction of the answer to the publisher,
/// and what its subscriber heard (speech, DTMF events).
type Published = (String, bool, (usize, usize));

/// A phone publishes (PCMU and telephone-events, `sendonly`); a second subscribes to it and
/// hears a phase of its speech and a DTMF event.
fn publish_script(ng: &mut Ng, id: &str) -> Published {
    let mut publisher = phone(0x6a7e_0041);
    publisher.phone.direction = "sendonly";
    let answer = ng
        .call(req(
            "publish",
            id,
            &[("from-tag", "publisher"), ("sdp", &publisher.phone.offer())],
        ))
        .unwrap()["sdp"]
        .clone();
    let m = answer.lines().find(|l| l.starts_with("m=audio")).unwrap();
    let formats = m.split_whitespace().skip(3).collect::<Vec<_>>().join(" ");
    let recvonly = answer.contains("a=recvonly");
    publisher.phone.accept_answer(&answer).unwrap();
    let mut sub = phone(0x6a7e_0042);
    let offer = ng
        .call(req(
            "subscribe request",
            id,
            &[("from-tag", "publisher"), ("to-tag", "listener")],
        ))
        .unwrap()["sdp"]
        .clone();
    let sub_answer = sub.phone.answer_offer(&offer).unwrap();
    ng.call(req(
        "subscribe answer",
        id,
        &[("to-tag", "listener"), ("sdp", &sub_answer)],
    ))
    .unwrap();
    for k in 0..FRAMES {
        publisher.send(&[SPEECH[0]; 160]).unwrap();
        if k == 2 {
            let ts = publisher.phone.ts;
            let event = publisher
                .phone
                .packet_with(101, ts, true, &[5, 0x8a, 0x03, 0x20]);
            let to = publisher.phone.gateway.unwrap();
            publisher.socket.send_to(&event, to).unwrap();
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(200));
    sub.read();
    let heard = tally(&sub, SPEECH[0]);
    ng.call(command("delete", id, "publisher", None, None))
        .unwrap();
    (formats, recvonly, (heard.0, heard.2))
}

#[test]
fn a_published_phone_is_answered_and_heard_as_through_rtpengine() {
    let test = "a_published_phone_is_answered_and_heard_as_through_rtpengine";
    let Some(mut rtpengine) = lab_support::start_rtpengine(test, (42000, 42499)) else {
        return;
    };
    let (_server, mut ours) = secrelay("42500-42999", None);
    let theirs = publish_script(&mut rtpengine.ng, "pub-rtpengine@test");
    let mine = publish_script(&mut ours, "pub-secrelay@test");
    assert_eq!(theirs, mine, "rtpengine's, secrelay's");
    assert!(mine.1, "a recvonly answer");
    assert_eq!(
        mine.2,
        (FRAMES, 1),
        "the subscriber heard the speech and the event"
    );
}
