//! Transcoding in a room, in memory through a shard: a browser that speaks only Opus and
//! phones that speak only PCMU or PCMA hear each other, each in its own codec, payload type,
//! packet time and keys; the tone arrives at its frequency (Goertzel and zero crossings from
//! `secrelay_media::tone`); DTMF crosses with each leg's telephone-event payload type and clock;
//! each sender is decoded once and encoded once per receiving format (the counters say so, not
//! timings); undecodable audio is dropped and counted; codec state goes when its member does.

use secrelay_gateway::counters::DropReason;
use secrelay_gateway::shard::JoinKind;
use secrelay_gateway::transcode::MixSettings;
use secrelay_media::dtmf::{DtmfCollector, DtmfGenerator};
use secrelay_media::g711::{Pcma, Pcmu};
use secrelay_media::inband::digits_heard;
use secrelay_media::opus::Opus;
use secrelay_media::{tone, Codec};
use secrelay_srtp::Profile;
use secrelay_testkit::gateway::Harness;
use secrelay_testkit::memory::SimClient;
use secrelay_testkit::phone::SimPhone;
use secrelay_wire::RtpHeader;

/// Chrome's offer narrowed to Opus and telephone-event/48000 (payload types 111 and 110).
fn opus_only_offer(client: &SimClient) -> String {
    let drop = ["63", "9", "0", "8", "13", "126"];
    client
        .offer()
        .lines()
        .filter(|l| {
            !drop.iter().any(|pt| {
                l.starts_with(&format!("a=rtpmap:{pt} "))
                    || l.starts_with(&format!("a=fmtp:{pt} "))
                    || l.starts_with(&format!("a=rtcp-fb:{pt} "))
            })
        })
        .map(|l| {
            if l.starts_with("m=audio") {
                "m=audio 9 UDP/TLS/RTP/SAVPF 111 110".to_owned()
            } else {
                l.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\r\n")
        + "\r\n"
}

/// An Opus-only browser, connected.
fn opus_browser(h: &mut Harness, room: &str, n: u8) -> usize {
    let client = SimClient::new(n);
    let offer = opus_only_offer(&client);
    let b = h
        .join(room, client, JoinKind::Join, Some(&offer))
        .expect("an Opus-only offer is answered");
    assert!(h.connect(b));
    let answer = &h.members[b].answer_sdp;
    assert!(answer.contains("a=rtpmap:111 opus/48000/2"), "{answer}");
    assert!(!answer.contains("PCMU"), "{answer}");
    b
}

const PCMU_ONLY: &[(u8, &str)] = &[(0, "PCMU/8000"), (101, "telephone-event/8000")];

/// Room "r" with an Opus-only browser (client 1) and a PCMU-only phone (phone 2), both
/// connected: (harness, browser, phone).
fn browser_and_pcmu_phone() -> (Harness, usize, usize) {
    let mut h = Harness::simd();
    let b = opus_browser(&mut h, "r", 1);
    let phone = h
        .join_phone("r", SimPhone::plain(2).with_formats(PCMU_ONLY))
        .unwrap();
    (h, b, phone)
}
const PCMA_ONLY: &[(u8, &str)] = &[(8, "PCMA/8000")];

/// (payload type, payload) of what a phone received, in order.
fn phone_rx(h: &Harness, p: usize) -> Vec<(u8, u16, u32, Vec<u8>)> {
    h.phones[p]
        .phone
        .received
        .iter()
        .map(|d| {
            let r = RtpHeader::parse(d).unwrap();
            (
                r.payload_type(),
                r.sequence(),
                r.timestamp(),
                r.payload().to_vec(),
            )
        })
        .collect()
}

fn browser_rx(h: &Harness, b: usize) -> Vec<(u8, u16, u32, Vec<u8>)> {
    h.members[b]
        .client
        .received
        .iter()
        .map(|d| {
            let r = RtpHeader::parse(d).unwrap();
            (
                r.payload_type(),
                r.sequence(),
                r.timestamp(),
                r.payload().to_vec(),
            )
        })
        .collect()
}

/// Decodes a stream's payloads (those of payload type `pt`), checking it is one clean stream:
/// consecutive sequence numbers, timestamps one packet apart.
fn decode(codec: &mut dyn Codec, pt: u8, rx: &[(u8, u16, u32, Vec<u8>)], ptime: u32) -> Vec<i16> {
    let audio: Vec<_> = rx.iter().filter(|p| p.0 == pt).collect();
    assert!(!audio.is_empty(), "no packets of payload type {pt}");
    let step = codec.clock_ticks(codec.samples_for_ptime(ptime));
    let mut pcm = Vec::new();
    for (k, p) in audio.iter().enumerate() {
        assert_eq!(
            p.1,
            audio[0].1.wrapping_add(k as u16),
            "sequence numbers run on"
        );
        assert_eq!(
            p.2,
            audio[0].2.wrapping_add(step * k as u32),
            "timestamps run on"
        );
        let n = codec.to_pcm(&p.3, &mut pcm).unwrap();
        assert_eq!(
            n,
            codec.samples_for_ptime(ptime) * codec.channels() as usize
        );
    }
    if codec.channels() == 2 {
        pcm = pcm.chunks_exact(2).map(|s| s[0]).collect();
    }
    pcm
}

fn assert_tone(pcm: &[i16], rate: u32, hz: f64) {
    let skip = rate as usize / 10;
    let tail = &pcm[skip..];
    let f = tone::zero_crossing_hz(tail, rate);
    assert!((f - hz).abs() < hz * 0.01 + 2.0, "{f:.1} Hz, want {hz}");
    let share = tone::tone_share(tail, rate, hz);
    assert!(share > 0.9, "{hz} Hz is {share:.2} of the signal");
}

/// 20 ms Opus packets of a tone.
fn opus_packets(hz: f64, packets: usize) -> Vec<Vec<u8>> {
    let mut enc = Opus::new(48_000, 32_000).unwrap();
    tone::sine(48_000, hz, 9000.0, 960 * packets)
        .chunks_exact(960)
        .map(|f| {
            let mut p = Vec::new();
            enc.from_pcm(f, &mut p).unwrap();
            p
        })
        .collect()
}

fn g711_packets(codec: &mut dyn Codec, hz: f64, packets: usize) -> Vec<Vec<u8>> {
    g711_at(codec, hz, 9000.0, packets)
}

/// `packets` 20 ms G.711 packets of a tone of `hz` at `amplitude` (0: silence).
fn g711_at(codec: &mut dyn Codec, hz: f64, amplitude: f64, packets: usize) -> Vec<Vec<u8>> {
    g711_frames(codec, &tone::sine(8000, hz, amplitude, 160 * packets))
}

/// `pcm` (8 kHz) as 20 ms G.711 packets.
fn g711_frames(codec: &mut dyn Codec, pcm: &[i16]) -> Vec<Vec<u8>> {
    pcm.chunks_exact(160)
        .map(|f| {
            let mut p = Vec::new();
            codec.from_pcm(f, &mut p).unwrap();
            p
        })
        .collect()
}

#[test]
fn an_opus_browser_is_heard_as_pcmu_on_an_sdes_leg_and_pcma_on_a_plain_leg_and_hears_them() {
    let mut h = Harness::simd();
    let b = opus_browser(&mut h, "r", 1);
    let sdes = h
        .join_phone(
            "r",
            SimPhone::sdes(2, Profile::AesCm128HmacSha1_80).with_formats(PCMU_ONLY),
        )
        .unwrap();
    let plain = h
        .join_phone("r", SimPhone::plain(3).with_formats(PCMA_ONLY))
        .unwrap();

    // The browser speaks: 1 kHz for 1 s of 20 ms Opus.
    for p in opus_packets(1000.0, 50) {
        let (_, srtp) = h.srtp(b, &p);
        h.send(b, &srtp);
        h.pump();
    }
    let pcmu = decode(&mut Pcmu, 0, &phone_rx(&h, sdes), 20);
    assert_tone(&pcmu, 8000, 1000.0);
    let pcma = decode(&mut Pcma, 8, &phone_rx(&h, plain), 20);
    assert_tone(&pcma, 8000, 1000.0);

    // The PCMU phone speaks 700 Hz: the browser hears Opus, the PCMA phone PCMA.
    let mut ulaw = Pcmu;
    for p in g711_packets(&mut ulaw, 700.0, 50) {
        let (_, wire) = h.phones[sdes].phone.packet(&p);
        h.send_phone(sdes, &wire);
        h.pump();
    }
    let opus_rx = browser_rx(&h, b);
    let mut dec = Opus::new(48_000, 32_000).unwrap();
    let pcm = decode(&mut dec, 111, &opus_rx, 20);
    assert_tone(&pcm, 48_000, 700.0);
    let pcma: Vec<_> = phone_rx(&h, plain).into_iter().skip(50).collect();
    assert_tone(&decode(&mut Pcma, 8, &pcma, 20), 8000, 700.0);

    // The PCMA phone speaks 400 Hz, in 30 ms packets it does not have to match.
    let mut alaw = Pcma;
    h.phones[plain].phone.ts_step = 160;
    for p in g711_packets(&mut alaw, 400.0, 50) {
        let (_, wire) = h.phones[plain].phone.packet(&p);
        h.send_phone(plain, &wire);
        h.pump();
    }
    let pcmu: Vec<_> = phone_rx(&h, sdes).into_iter().skip(50).collect();
    assert_tone(&decode(&mut Pcmu, 0, &pcmu, 20), 8000, 400.0);

    // Nothing was dropped for want of a codec, and every copy to the phones was transcoded.
    for p in [sdes, plain] {
        let c = h.phone_counters(p).unwrap();
        assert_eq!(c.drops[DropReason::NoCodec], 0);
        assert_eq!(c.transcoded, c.forwarded);
        assert_eq!(c.decoded, 50, "each of its packets decoded once");
    }
    let c = h.member_counters(b).unwrap();
    assert_eq!(c.decoded, 50);
    assert_eq!(c.drops.total(), 0, "{:?}", c.drops);
}

#[test]
fn each_sender_is_decoded_once_and_encoded_once_per_receiving_format() {
    let mut h = Harness::simd();
    let b = opus_browser(&mut h, "r", 1);
    // Three PCMU phones, two PCMA phones, one PCMU phone in 40 ms packets: three formats.
    let mut phones = Vec::new();
    for n in 2..5 {
        phones.push(
            h.join_phone("r", SimPhone::plain(n).with_formats(PCMU_ONLY))
                .unwrap(),
        );
    }
    for n in 5..7 {
        phones.push(
            h.join_phone("r", SimPhone::plain(n).with_formats(PCMA_ONLY))
                .unwrap(),
        );
    }
    let mut slow = SimPhone::plain(7).with_formats(PCMU_ONLY);
    slow.ptime = Some(40);
    let slow = h.join_phone("r", slow).unwrap();
    for p in opus_packets(600.0, 60) {
        let (_, srtp) = h.srtp(b, &p);
        h.send(b, &srtp);
        h.pump();
    }
    let c = h.member_counters(b).unwrap();
    assert_eq!(c.decoded, 60, "decoded once per packet");
    // 60 × 20 ms: 60 packets of PCMU/20, 60 of PCMA/20, 30 of PCMU/40, each encoded once.
    assert_eq!(c.encoded, 60 + 60 + 30);
    let room = h.shard.room("r").unwrap();
    assert_eq!(room.transcoding().streams(), 1);
    assert_eq!(room.transcoding().encoders(), 3);
    let total: u64 = phones
        .iter()
        .chain([&slow])
        .map(|p| h.phone_counters(*p).unwrap().transcoded)
        .sum();
    assert_eq!(total, 5 * 60 + 30, "a copy per receiver");
    // The 40 ms phone gets 320-byte PCMU packets with the tone in them.
    let rx = phone_rx(&h, slow);
    assert!(rx.iter().all(|p| p.3.len() == 320));
    assert_tone(&decode(&mut Pcmu, 0, &rx, 40), 8000, 600.0);
    // Two receivers of one format share its payloads, each with its own numbering.
    let (a, bb) = (phone_rx(&h, phones[0]), phone_rx(&h, phones[1]));
    assert_eq!(a.len(), bb.len());
    assert!(a.iter().zip(&bb).all(|(x, y)| x.3 == y.3));

    // A PCMA phone leaves: its format has another receiver, so the encoder stays; when the
    // other leaves, it goes; when the browser leaves, the stream goes.
    let now = h.now;
    for p in [phones[3], phones[4]] {
        let id = h.phones[p].id.clone();
        assert!(h.shard.leave(now, "r", &id));
        h.pump();
    }
    assert_eq!(h.shard.room("r").unwrap().transcoding().encoders(), 2);
    let id = h.members[b].id.clone();
    assert!(h.shard.leave(now, "r", &id));
    h.pump();
    assert_eq!(h.shard.room("r").unwrap().transcoding().streams(), 0);
}

/// Phone `p` sends `packets` 20 ms PCMU packets of a 500 Hz tone.
fn talk_tone(h: &mut Harness, p: usize, packets: usize) {
    send_tone(h, p, packets, None);
}

/// [`talk_tone`], with the harness's time moved on by `every` after each packet.
fn send_tone(h: &mut Harness, p: usize, packets: usize, every: Option<std::time::Duration>) {
    for pkt in g711_packets(&mut Pcmu, 500.0, packets) {
        let (_, wire) = h.phones[p].phone.packet(&pkt);
        h.send_phone(p, &wire);
        h.pump();
        if let Some(step) = every {
            let next = h.now + step;
            h.advance_to(next);
        }
    }
}

/// Phone `p` dials `digits` as telephone-events at 8 kHz on payload type 101, 100 ms each,
/// 20 ms apart; how many packets it sent.
fn dial_events(h: &mut Harness, p: usize, digits: &str) -> usize {
    let gen = DtmfGenerator::new(8000, 20, 10).unwrap();
    let mut sent = 0;
    for digit in digits.chars() {
        let start = h.phones[p].phone.ts;
        let ev = secrelay_media::dtmf::event_for_char(digit).unwrap();
        for ep in gen.event_packets(ev, start, gen.ticks(100)) {
            let wire =
                h.phones[p]
                    .phone
                    .packet_with(101, ep.timestamp, ep.marker, &ep.event.to_bytes());
            h.send_phone(p, &wire);
            h.pump();
            sent += 1;
        }
        h.phones[p].phone.ts = start.wrapping_add(gen.ticks(120));
    }
    sent
}

#[test]
fn dtmf_arrives_as_sent_with_each_legs_payload_type_and_clock() {
    let (mut h, b, phone) = browser_and_pcmu_phone();
    let mute = h
        .join_phone("r", SimPhone::plain(3).with_formats(PCMA_ONLY))
        .unwrap();
    let mut ulaw = Pcmu;
    let audio = g711_packets(&mut ulaw, 500.0, 10);
    for p in &audio {
        let (_, wire) = h.phones[phone].phone.packet(p);
        h.send_phone(phone, &wire);
        h.pump();
    }
    // "1", "5", "#" at 8 kHz on payload type 101, 100 ms each, 20 ms apart.
    let sent = dial_events(&mut h, phone, "15#");
    // The browser gets them on its telephone-event/48000 payload type (110), at 48 kHz, in the
    // transcoded stream's numbering (right after its audio).
    let rx = browser_rx(&h, b);
    let events: Vec<_> = rx.iter().filter(|p| p.0 == 110).collect();
    assert_eq!(events.len(), sent);
    let last_audio = rx.iter().rfind(|p| p.0 == 111).unwrap();
    assert_eq!(events[0].1, last_audio.1.wrapping_add(1));
    let mut c = DtmfCollector::new();
    let mut digits = Vec::new();
    for e in &events {
        c.push(e.2, &e.3, &mut digits).unwrap();
    }
    let got: String = digits.iter().filter_map(|d| d.char()).collect();
    assert_eq!(got, "15#");
    assert!(
        digits.iter().all(|d| d.duration == 4800 && d.complete),
        "{digits:?}"
    );
    // 120 ms between starts at 8 kHz is 5760 ticks at 48 kHz.
    assert_eq!(digits[1].timestamp.wrapping_sub(digits[0].timestamp), 5760);
    // The PCMA phone took no telephone-event, and its audio is transcoded anyway: the digits
    // reach it as tones in its audio, in the stream's unbroken numbering.
    let m = h.phone_counters(mute).unwrap();
    assert_eq!(m.drops[DropReason::NoCodec], 0);
    let rx = phone_rx(&h, mute);
    assert!(rx.iter().all(|p| p.0 == 8));
    assert_eq!(digits_heard(&decode(&mut Pcma, 8, &rx, 20), 8000), "15#");
}

const PCMU_NO_EVENTS: &[(u8, &str)] = &[(0, "PCMU/8000")];

/// Two PCMU phones, one with telephone-events and one without, the first's leg asking for
/// DTMF to cross (rtpengine's `transcode: telephone-event`): (harness, with, without).
fn dtmf_transcoding_pair() -> (Harness, usize, usize) {
    let mut h = Harness::simd();
    let options = secrelay_gateway::leg::RtpLegOptions {
        dtmf_transcode: true,
        ..Default::default()
    };
    let with = h
        .join_phone_with("r", SimPhone::plain(2).with_formats(PCMU_ONLY), options)
        .unwrap();
    let without = h
        .join_phone("r", SimPhone::plain(3).with_formats(PCMU_NO_EVENTS))
        .unwrap();
    (h, with, without)
}

/// Digits as tones in a phone's PCMU audio (20 ms packets): 60 ms of a 500 Hz tone, then
/// each digit for 100 ms and 60 ms of the tone after it.
fn inband_digits(digits: &str) -> Vec<Vec<u8>> {
    let mut pcm = tone::sine(8000, 500.0, 3000.0, 480);
    for c in digits.chars() {
        let e = secrelay_media::dtmf::event_for_char(c).unwrap();
        secrelay_media::inband::ToneSynth::new(8000).render(e, 10, 800, &mut pcm);
        pcm.extend(tone::sine(8000, 500.0, 3000.0, 480));
    }
    g711_frames(&mut Pcmu, &pcm)
}

/// A phone without telephone-events dials digits as tones; the phone with them, whose leg asks
/// for DTMF to cross, gets each digit as telephone-events (marker on the first, the end three
/// times) in place of the audio while it lasts, audio the rest of the time, one unbroken
/// sequence: though both speak PCMU, the audio went through the transcoder for it.
#[test]
fn digits_heard_in_audio_reach_a_phone_with_telephone_events_as_events() {
    let (mut h, with, without) = dtmf_transcoding_pair();
    for p in inband_digits("15#") {
        let (_, wire) = h.phones[without].phone.packet(&p);
        h.send_phone(without, &wire);
        h.pump();
    }
    let rx = phone_rx(&h, with);
    assert!(
        rx.iter().all(|p| p.0 == 0 || p.0 == 101),
        "PCMU and events only"
    );
    for (k, p) in rx.iter().enumerate() {
        assert_eq!(p.1, rx[0].1.wrapping_add(k as u16), "one unbroken sequence");
    }
    let mut c = DtmfCollector::new();
    let mut digits = Vec::new();
    let events: Vec<_> = rx.iter().filter(|p| p.0 == 101).collect();
    for e in &events {
        c.push(e.2, &e.3, &mut digits).unwrap();
    }
    let got: String = digits.iter().filter_map(|d| d.char()).collect();
    assert_eq!(got, "15#");
    assert!(digits.iter().all(|d| d.complete), "{digits:?}");
    // Heard within each 100 ms digit: at least 40 ms of it sent as events.
    assert!(digits.iter().all(|d| d.duration >= 320), "{digits:?}");
    let ends = events
        .iter()
        .filter(|e| secrelay_media::dtmf::parse(&e.3).unwrap()[0].end)
        .count();
    assert_eq!(ends, 9, "each end packet three times");
    // The audio around the digits still arrives, as PCMU.
    assert!(rx.iter().filter(|p| p.0 == 0).count() >= 9);
    assert_eq!(
        h.phone_counters(with).unwrap().drops[DropReason::NoCodec],
        0
    );
}

/// The phone with telephone-events sends digits as events; the one without, both on PCMU,
/// hears them as tones in its audio (its leg did not ask; the other's did), in one unbroken
/// stream.
#[test]
fn telephone_events_reach_a_phone_without_them_as_tones() {
    let (mut h, with, without) = dtmf_transcoding_pair();
    talk_tone(&mut h, with, 5);
    dial_events(&mut h, with, "9*");
    let rx = phone_rx(&h, without);
    assert!(rx.iter().all(|p| p.0 == 0), "PCMU only");
    assert_eq!(digits_heard(&decode(&mut Pcmu, 0, &rx, 20), 8000), "9*");
    assert_eq!(
        h.phone_counters(without).unwrap().drops[DropReason::NoCodec],
        0
    );
}

/// A forged telephone-event claiming 8 s renders at most 200 ms of tones per packet: one small
/// packet cannot make the transcoder encode seconds of audio.
#[test]
fn one_event_packet_renders_a_bounded_stretch_of_tones() {
    let (mut h, with, without) = dtmf_transcoding_pair();
    talk_tone(&mut h, with, 3);
    let before = phone_rx(&h, without).len();
    let ts = h.phones[with].phone.ts;
    let forged = secrelay_media::dtmf::Event {
        event: 5,
        end: false,
        volume: 10,
        duration: u16::MAX,
    };
    let wire = h.phones[with]
        .phone
        .packet_with(101, ts, true, &forged.to_bytes());
    h.send_phone(with, &wire);
    h.pump();
    let made = phone_rx(&h, without).len() - before;
    assert_eq!(made, 10, "200 ms of 20 ms packets");
}

/// Without a leg asking, two PCMU phones relay their audio as it is: telephone-events go
/// nowhere that did not take them, and no digit is listened for.
#[test]
fn without_dtmf_transcoding_audio_of_one_codec_is_relayed() {
    let mut h = Harness::simd();
    let with = h
        .join_phone("r", SimPhone::plain(2).with_formats(PCMU_ONLY))
        .unwrap();
    let without = h
        .join_phone("r", SimPhone::plain(3).with_formats(PCMU_NO_EVENTS))
        .unwrap();
    let sent = inband_digits("7");
    for p in &sent {
        let (_, wire) = h.phones[without].phone.packet(p);
        h.send_phone(without, &wire);
        h.pump();
    }
    let rx = phone_rx(&h, with);
    assert_eq!(rx.len(), sent.len());
    assert!(
        rx.iter().zip(&sent).all(|(r, s)| r.0 == 0 && &r.3 == s),
        "relayed as sent"
    );
    assert_eq!(h.phone_counters(with).unwrap().transcoded, 0);
}

#[test]
fn undecodable_audio_is_dropped_and_counted_at_its_sender() {
    let (mut h, b, phone) = browser_and_pcmu_phone();
    let good = opus_packets(800.0, 5);
    for p in &good {
        let (_, srtp) = h.srtp(b, p);
        h.send(b, &srtp);
        h.pump();
    }
    let before = h.phones[phone].phone.received.len();
    // An Opus packet whose TOC says code 3 with no frame count byte, and an empty one.
    for bad in [&[0x03u8][..], &[]] {
        let (_, srtp) = h.srtp(b, bad);
        h.send(b, &srtp);
        h.pump();
    }
    let c = h.member_counters(b).unwrap();
    assert_eq!(c.drops[DropReason::Undecodable], 2);
    assert_eq!(c.decoded, 5);
    assert_eq!(h.phones[phone].phone.received.len(), before);
    // And the stream goes on afterwards.
    for p in &good {
        let (_, srtp) = h.srtp(b, p);
        h.send(b, &srtp);
        h.pump();
    }
    assert!(h.phones[phone].phone.received.len() > before);
}

/// Goertzel power at each of `freqs` over `pcm` (after its first 100 ms).
fn powers(pcm: &[i16], rate: u32, freqs: &[f64]) -> Vec<f64> {
    let tail = &pcm[rate as usize / 10..];
    freqs
        .iter()
        .map(|f| tone::goertzel_power(tail, rate, *f))
        .collect()
}

#[test]
fn a_mixed_three_party_call_each_hears_the_other_two_and_not_itself() {
    let mut h = Harness::simd();
    h.shard
        .set_mixing("conf", Some(MixSettings::default()))
        .unwrap();
    let b = opus_browser(&mut h, "conf", 1);
    let pu = h
        .join_phone("conf", SimPhone::plain(2).with_formats(PCMU_ONLY))
        .unwrap();
    let pa = h
        .join_phone(
            "conf",
            SimPhone::sdes(3, Profile::AeadAes128Gcm).with_formats(PCMA_ONLY),
        )
        .unwrap();
    let freqs = [600.0, 1000.0, 1500.0];
    let opus = opus_packets(freqs[0], 60);
    let ulaw = g711_packets(&mut Pcmu, freqs[1], 60);
    let alaw = g711_packets(&mut Pcma, freqs[2], 60);
    for k in 0..60 {
        let (_, srtp) = h.srtp(b, &opus[k]);
        h.send(b, &srtp);
        let (_, w) = h.phones[pu].phone.packet(&ulaw[k]);
        h.send_phone(pu, &w);
        let (_, w) = h.phones[pa].phone.packet(&alaw[k]);
        h.send_phone(pa, &w);
        h.pump();
        let t = h.now + std::time::Duration::from_millis(20);
        h.advance_to(t);
    }
    // Nothing was relayed: every copy is a mix, on one stream per receiver.
    let heard = [
        {
            let mut dec = Opus::new(48_000, 32_000).unwrap();
            (decode(&mut dec, 111, &browser_rx(&h, b), 20), 48_000)
        },
        (decode(&mut Pcmu, 0, &phone_rx(&h, pu), 20), 8000),
        (decode(&mut Pcma, 8, &phone_rx(&h, pa), 20), 8000),
    ];
    for (me, (pcm, rate)) in heard.iter().enumerate() {
        assert!(
            pcm.len() >= *rate as usize,
            "member {me} heard {} samples",
            pcm.len()
        );
        let p = powers(pcm, *rate, &freqs);
        let others: Vec<f64> = (0..3).filter(|k| *k != me).map(|k| p[k]).collect();
        for o in &others {
            assert!(*o > 100.0 * p[me], "member {me}: powers {p:?}");
        }
        // The two others are heard about equally (a sum, not one of them).
        assert!(
            others[0] / others[1] < 4.0 && others[1] / others[0] < 4.0,
            "{p:?}"
        );
    }
    for p in [pu, pa] {
        let ssrcs: std::collections::HashSet<u32> = h.phones[p]
            .phone
            .received
            .iter()
            .map(|d| RtpHeader::parse(d).unwrap().ssrc())
            .collect();
        assert_eq!(ssrcs.len(), 1, "one stream");
        let c = h.phone_counters(p).unwrap();
        assert_eq!(c.decoded, 60);
        assert_eq!(c.transcoded, c.forwarded);
        assert!(c.encoded >= 55, "{c:?}");
    }
    let room = h.shard.room("conf").unwrap();
    let mix = room.mixing().unwrap();
    assert_eq!((mix.inputs(), mix.encoders()), (3, 3));
    // A member that leaves leaves the mix.
    let now = h.now;
    let id = h.phones[pa].id.clone();
    assert!(h.shard.leave(now, "conf", &id));
    h.pump();
    let mix = h.shard.room("conf").unwrap().mixing().unwrap();
    assert_eq!((mix.inputs(), mix.encoders()), (2, 2));
    let snap = h.shard.snapshot(h.now, Some("conf"));
    assert!(snap[0].mixing);
}

#[test]
fn a_receiver_is_sent_transcoded_audio_in_the_codec_its_offer_prefers() {
    let mut h = Harness::simd();
    let b = opus_browser(&mut h, "r", 1);
    // Both G.711 laws offered, A-law first; and the default phone (PCMU, PCMA, Opus), which
    // takes the browser's Opus as it is.
    let alaw_first = h
        .join_phone(
            "r",
            SimPhone::plain(2).with_formats(&[(8, "PCMA/8000"), (0, "PCMU/8000")]),
        )
        .unwrap();
    let any = h.join_phone("r", SimPhone::plain(3)).unwrap();
    for p in opus_packets(900.0, 20) {
        let (_, srtp) = h.srtp(b, &p);
        h.send(b, &srtp);
        h.pump();
    }
    let rx = phone_rx(&h, alaw_first);
    assert!(rx.iter().all(|p| p.0 == 8), "PCMA, its first choice");
    assert_tone(&decode(&mut Pcma, 8, &rx, 20), 8000, 900.0);
    assert!(
        phone_rx(&h, any).iter().all(|p| p.0 == 111),
        "relayed as Opus"
    );
    assert_eq!(h.phone_counters(any).unwrap().transcoded, 0);
}

/// Each of `phones` sends its stream's packets, one each 20 ms tick of the shard's clock;
/// `each_tick` looks at the harness after each tick.
fn talk(
    h: &mut Harness,
    phones: &[usize],
    streams: &[Vec<Vec<u8>>],
    mut each_tick: impl FnMut(&Harness),
) {
    let ticks = streams.iter().map(Vec::len).min().unwrap_or(0);
    for k in 0..ticks {
        for (&p, stream) in phones.iter().zip(streams) {
            let (_, w) = h.phones[p].phone.packet(&stream[k]);
            h.send_phone(p, &w);
        }
        h.pump();
        let t = h.now + std::time::Duration::from_millis(20);
        h.advance_to(t);
        each_tick(h);
    }
}

/// Six PCMU phones in a room that sums at most two talkers: two loud tones, two quieter ones,
/// two silent members. Each loud talker hears the other and not itself; everyone else hears
/// the two loud ones and none of the rest; the tick runs two talkers' encoders and one shared
/// one; and a member that starts talking late moves from the shared mix to its own on one
/// unbroken stream (consecutive sequence numbers, one packet time apart).
#[test]
fn a_mix_limited_to_the_loudest_talkers_shares_one_encode_among_the_others() {
    let mut h = Harness::simd();
    h.shard
        .set_mixing("big", Some(MixSettings { speakers: 2 }))
        .unwrap();
    let phones: Vec<usize> = (0..6u8)
        .map(|n| {
            h.join_phone("big", SimPhone::plain(10 + n).with_formats(PCMU_ONLY))
                .unwrap()
        })
        .collect();
    let freqs = [500.0, 900.0, 1300.0, 1700.0, 2100.0, 2500.0];
    let amplitudes = [12_000.0, 11_000.0, 2_000.0, 1_500.0, 0.0, 0.0];
    let ticks = 60;
    let mut streams: Vec<Vec<Vec<u8>>> = freqs
        .iter()
        .zip(amplitudes)
        .map(|(&f, a)| g711_at(&mut Pcmu, f, a, ticks))
        .collect();
    // The last member is silent for the first half and then louder than everyone.
    let late = g711_at(&mut Pcmu, freqs[5], 20_000.0, ticks);
    streams[5][ticks / 2..].clone_from_slice(&late[ticks / 2..]);
    let mut encoders = Vec::new();
    talk(&mut h, &phones, &streams, |h| {
        let mix = h.shard.room("big").unwrap().mixing().unwrap();
        encoders.push((mix.talkers(), mix.encoders()));
    });
    // Before the late talker: two talkers, two own encoders and one shared.
    assert!(
        encoders[5..ticks / 2].iter().all(|&e| e == (2, 3)),
        "{encoders:?}"
    );
    let first_half = |p: usize| {
        let rx = phone_rx(&h, phones[p]);
        let half: Vec<_> = rx.into_iter().take(ticks / 2 - 2).collect();
        decode(&mut Pcmu, 0, &half, 20)
    };
    for me in 0..6 {
        let p = powers(&first_half(me), 8000, &freqs);
        let (loud, rest) = (p[0].max(p[1]), p[2..].iter().copied().fold(0.0, f64::max));
        assert!(loud > 100.0 * rest, "member {me}: {p:?}");
        match me {
            0 | 1 => {
                let other = 1 - me;
                assert!(p[other] > 100.0 * p[me], "member {me}: {p:?}");
            }
            _ => assert!(p[0] / p[1] < 4.0 && p[1] / p[0] < 4.0, "member {me}: {p:?}"),
        }
    }
    // After it: the late talker and the loudest other are summed; everyone's stream is one
    // unbroken sequence.
    let mix = h.shard.room("big").unwrap().mixing().unwrap();
    assert_eq!(mix.talkers(), 2);
    for &p in &phones {
        let rx = phone_rx(&h, p);
        assert!(rx.len() >= ticks - 3, "{} packets", rx.len());
        for w in rx.windows(2) {
            assert_eq!(w[1].1, w[0].1.wrapping_add(1), "sequence numbers");
            assert_eq!(w[1].2, w[0].2.wrapping_add(160), "timestamps");
        }
    }
    let rx = phone_rx(&h, phones[0]);
    let tail: Vec<_> = rx[rx.len() - 20..].to_vec();
    let p = powers(&decode(&mut Pcmu, 0, &tail, 20), 8000, &freqs);
    assert!(p[5] > 100.0 * p[0], "member 0 hears the late talker: {p:?}");
    // Encodes counted once each: about three a tick (two talkers and the shared mix), against
    // six copies sent a tick.
    let (mut encoded, mut forwarded) = (0, 0);
    for &p in &phones {
        let c = h.phone_counters(p).unwrap();
        encoded += c.encoded;
        forwarded += c.forwarded;
    }
    assert!(encoded <= 3 * ticks as u64 + 3, "{encoded} encoded");
    assert!(forwarded >= 6 * (ticks as u64 - 3), "{forwarded} forwarded");
    let snap = h.shard.snapshot(h.now, Some("big"));
    let m = snap[0].mix.unwrap();
    assert_eq!((m.speakers, m.inputs, m.talkers), (2, 6, 2));
}

/// With no limit, members that send only silence are not summed: they all hear one shared
/// mix, and the talkers their own.
#[test]
fn silent_members_of_a_mix_share_one_encode() {
    let mut h = Harness::simd();
    h.shard
        .set_mixing("quiet", Some(MixSettings::default()))
        .unwrap();
    let phones: Vec<usize> = (0..5u8)
        .map(|n| {
            h.join_phone("quiet", SimPhone::plain(20 + n).with_formats(PCMU_ONLY))
                .unwrap()
        })
        .collect();
    let streams: Vec<Vec<Vec<u8>>> = [
        (700.0, 9000.0),
        (1100.0, 9000.0),
        (0.0, 0.0),
        (0.0, 0.0),
        (0.0, 0.0),
    ]
    .iter()
    .map(|&(f, a)| g711_at(&mut Pcmu, f, a, 20))
    .collect();
    talk(&mut h, &phones, &streams, |_| {});
    let mix = h.shard.room("quiet").unwrap().mixing().unwrap();
    assert_eq!((mix.inputs(), mix.talkers(), mix.encoders()), (5, 2, 3));
    for &p in &phones {
        assert!(phone_rx(&h, p).len() >= 17);
    }
}

/// A mix's packets for a receiver point into its encoders (shared, not copied per receiver):
/// after a member leaves, its encoder is dropped and the others move, so the last tick's
/// packets are gone rather than read from the wrong encoder (or past the end).
#[test]
fn a_member_leaving_between_tick_and_send_leaves_no_stale_packets() {
    use secrelay_gateway::leg::CodecId;
    use secrelay_gateway::room::MemberId;
    use secrelay_gateway::transcode::{Cn, Dtmf, Format, Mixing};
    use secrelay_media::transcode::InPacket;
    use secrelay_media::Registry;

    let mut mix = Mixing::new(Registry::standard(), MixSettings::default());
    let pcmu = Format {
        codec: CodecId::Pcmu,
        ptime: 20,
        dtmf: Dtmf::Events,
        cn: Cn::Pass,
        amr_mode: None,
    };
    let members: Vec<(MemberId, Format)> = (1..=3).map(|m| (MemberId(m), pcmu)).collect();
    let t0 = std::time::Instant::now();
    let freqs = [500.0, 900.0, 1300.0];
    let mut made = 0;
    for (k, &(m, _)) in members.iter().enumerate() {
        for (i, p) in g711_packets(&mut Pcmu, freqs[k], 5).iter().enumerate() {
            let pkt = InPacket {
                seq: i as u16,
                timestamp: 160 * i as u32,
                marker: i == 0,
                payload: p,
            };
            mix.audio(m, 100 + m.0, CodecId::Pcmu, &pkt, t0).unwrap();
        }
    }
    while let Some(at) = mix.next_tick().filter(|&at| at <= t0 + MIX_WAIT) {
        mix.tick(at, &members).unwrap();
        made += mix.ready(MemberId(3)).count();
    }
    // Everyone talks: three mixes, each encoded for its talker.
    assert!(made > 0, "member 3 heard the others");
    assert_eq!(mix.talkers(), 3);
    assert!(mix.ready(MemberId(3)).count() > 0);
    mix.remove_member(MemberId(1));
    assert_eq!(
        mix.ready(MemberId(3)).count(),
        0,
        "no packets of a moved encoder"
    );
    assert_eq!(mix.ready(MemberId(2)).count(), 0);
    // The next tick serves the two who are left.
    let rest = &members[1..];
    let at = mix.next_tick().expect("still ticking");
    mix.tick(at, rest).unwrap();
    let sizes: Vec<usize> = mix.ready(MemberId(3)).map(|p| p.payload.len()).collect();
    assert!(
        !sizes.is_empty() && sizes.iter().all(|&n| n == 160),
        "{sizes:?}"
    );
}

/// Long enough for a few ticks of the mix.
const MIX_WAIT: std::time::Duration = std::time::Duration::from_millis(100);

/// A receiver sent transcoded audio holds its receive slot as a relayed stream's receiver
/// does: a PCMU phone hears an Opus browser under one SSRC; when that browser leaves, the next
/// one's transcoded stream takes the same slot, and its numbering follows on from the last
/// packet there (one 20 ms frame on), so the phone's jitter buffer sees one stream.
#[test]
fn a_transcoded_receiver_keeps_its_slot_and_numbering_when_the_talker_changes() {
    let (mut h, first, phone) = browser_and_pcmu_phone();
    let talk = |h: &mut Harness, b: usize, packets: usize| {
        for p in opus_packets(600.0, packets) {
            let (_, srtp) = h.srtp(b, &p);
            h.send(b, &srtp);
            h.pump();
        }
    };
    talk(&mut h, first, 10);
    let ssrcs = |h: &Harness| -> Vec<u32> {
        h.phones[phone]
            .phone
            .received
            .iter()
            .map(|d| RtpHeader::parse(d).unwrap().ssrc())
            .collect()
    };
    let heard = phone_rx(&h, phone);
    assert!(heard.len() >= 5, "{}", heard.len());
    let slot = ssrcs(&h)[0];
    let phone_id = h.shard.member_id(&h.phones[phone].id).unwrap();
    let mapped = |h: &Harness, b: usize| {
        h.shard
            .room("r")
            .unwrap()
            .mapped_ssrc(phone_id, h.member_id(b), 1001)
    };
    assert_eq!(mapped(&h, first), Some(slot));
    let (last_seq, last_ts) = (heard.last().unwrap().1, heard.last().unwrap().2);

    let (room, id) = (h.members[first].room.clone(), h.members[first].id.clone());
    let now = h.now;
    assert!(h.shard.leave(now, &room, &id));
    h.pump();
    let second = opus_browser(&mut h, "r", 3);
    talk(&mut h, second, 10);
    assert_eq!(mapped(&h, second), Some(slot), "the same slot");
    let after: Vec<_> = phone_rx(&h, phone).into_iter().skip(heard.len()).collect();
    assert!(after.len() >= 5, "{}", after.len());
    assert!(ssrcs(&h).iter().all(|s| *s == slot), "one SSRC throughout");
    assert_eq!(after[0].1, last_seq.wrapping_add(1), "numbers follow on");
    assert_eq!(after[0].2, last_ts.wrapping_add(160), "one 20 ms frame on");
    assert_eq!(decode(&mut Pcmu, 0, &after, 20).len(), after.len() * 160);
    let c = h.phone_counters(phone).unwrap();
    assert_eq!(c.transcoded, c.forwarded);
    assert_eq!(c.unslotted, 0);
}

#[test]
fn a_browsers_first_audio_and_its_dtmf_in_one_receive_batch_reach_a_phone_transcoded() {
    let (mut h, b, phone) = browser_and_pcmu_phone();
    // One receive batch: the browser's first Opus packets (the phone's PCMU stream starts with
    // them), then "5" on its telephone-event/48000 payload type, with no drain between.
    let pt = h.client(b).pt;
    for p in opus_packets(500.0, 3) {
        let (_, srtp) = h.srtp(b, &p);
        h.send(b, &srtp);
    }
    let gen = DtmfGenerator::new(48_000, 20, 10).unwrap();
    let ev = secrelay_media::dtmf::event_for_char('5').unwrap();
    let mut sent = 0;
    h.client(b).pt = 110;
    for ep in gen.event_packets(ev, 0, gen.ticks(60)) {
        let (_, srtp) = h.srtp(b, &ep.event.to_bytes());
        h.send(b, &srtp);
        sent += 1;
    }
    h.client(b).pt = pt;
    assert_eq!(h.shard.staged(), 3 + sent, "one batch");
    h.pump();
    let rx = phone_rx(&h, phone);
    assert_eq!(
        rx.iter().filter(|p| p.0 == 0).count(),
        3,
        "the audio, as PCMU"
    );
    let events: Vec<_> = rx.iter().filter(|p| p.0 == 101).collect();
    assert_eq!(
        events.len(),
        sent,
        "each event, on the phone's payload type"
    );
    let m = h.phone_counters(phone).unwrap();
    assert_eq!(m.drops[DropReason::NoCodec], 0);
}

/// A participant silenced (ng `silence media`) in a transcoding room: the Opus browser's tone
/// reaches the PCMU phone as silence, transcoded, in the stream's unbroken numbering; the
/// silenced phone's tone reaches the browser as Opus silence, and its DTMF still crosses; once
/// unsilenced, the tones are heard again. Blocked (`block media`), the phone's audio reaches
/// nobody and is counted at it, its DTMF still crosses; `block DTMF` stops the DTMF.
#[test]
fn a_silenced_or_blocked_participant_is_heard_as_silence_or_not_at_all_through_transcoding() {
    use secrelay_gateway::room::Gate;
    let (mut h, b, phone) = browser_and_pcmu_phone();
    let (browser_id, phone_id) = (h.members[b].id.clone(), h.phones[phone].id.clone());
    let quiet = Gate {
        silence_media: true,
        ..Gate::default()
    };
    assert!(h.shard.set_gate("r", &browser_id, quiet));
    assert!(h.shard.set_gate("r", &phone_id, quiet));
    assert!(!h.shard.set_gate("r", "nobody", quiet));
    for p in opus_packets(1000.0, 25) {
        let (_, srtp) = h.srtp(b, &p);
        h.send(b, &srtp);
        h.pump();
    }
    talk_tone(&mut h, phone, 25);
    let sent = dial_events(&mut h, phone, "7");
    let rx = phone_rx(&h, phone);
    assert_eq!(rx.len(), 25, "every packet, silent");
    let pcm = decode(&mut Pcmu, 0, &rx, 20);
    assert!(pcm.iter().all(|&s| s.abs() < 64), "the phone hears silence");
    let rx = browser_rx(&h, b);
    assert_eq!(
        rx.iter().filter(|p| p.0 == 110).count(),
        sent,
        "DTMF crosses"
    );
    let mut opus = Opus::new(48_000, 32_000).unwrap();
    let pcm = decode(&mut opus, 111, &rx, 20);
    assert!(
        pcm.iter().all(|&s| s.abs() < 64),
        "the browser hears silence"
    );

    // Open again: the tones are heard.
    assert!(h.shard.set_gate("r", &browser_id, Gate::default()));
    assert!(h.shard.set_gate("r", &phone_id, Gate::default()));
    h.phones[phone].phone.received.clear();
    h.members[b].client.received.clear();
    for p in opus_packets(1000.0, 25) {
        let (_, srtp) = h.srtp(b, &p);
        h.send(b, &srtp);
        h.pump();
    }
    talk_tone(&mut h, phone, 25);
    assert_tone(
        &decode(&mut Pcmu, 0, &phone_rx(&h, phone), 20),
        8000,
        1000.0,
    );
    let mut opus = Opus::new(48_000, 32_000).unwrap();
    assert_tone(
        &decode(&mut opus, 111, &browser_rx(&h, b), 20),
        48_000,
        500.0,
    );

    // Blocked: nothing of its audio goes on, its DTMF does until that is blocked too.
    let blocked = Gate {
        block_media: true,
        ..Gate::default()
    };
    assert!(h.shard.set_gate("r", &phone_id, blocked));
    h.members[b].client.received.clear();
    talk_tone(&mut h, phone, 10);
    let sent = dial_events(&mut h, phone, "3");
    let rx = browser_rx(&h, b);
    assert_eq!(rx.iter().filter(|p| p.0 == 111).count(), 0, "no audio");
    assert_eq!(
        rx.iter().filter(|p| p.0 == 110).count(),
        sent,
        "DTMF crosses"
    );
    let c = h.phone_counters(phone).unwrap();
    assert_eq!(c.drops[DropReason::MediaBlocked], 10);
    assert!(h.shard.set_gate(
        "r",
        &phone_id,
        Gate {
            block_dtmf: true,
            ..blocked
        }
    ));
    h.members[b].client.received.clear();
    let sent = dial_events(&mut h, phone, "4");
    assert!(h.members[b].client.received.is_empty());
    let c = h.phone_counters(phone).unwrap();
    assert_eq!(c.drops[DropReason::DtmfBlocked], sent as u64);
}

/// DTMF played as a participant (ng `play DTMF`) in a transcoding room: played as the PCMU
/// phone while a PCMA phone without telephone-events listens, the digit goes as tones in the
/// phone's audio and both the PCMA phone and the Opus browser hear it; played as the browser,
/// it goes as telephone-events and reaches the PCMU phone as events at its own clock. A
/// participant blocked from sending DTMF sends none of it; one with neither telephone-events
/// nor G.711 cannot be made to.
#[test]
fn dtmf_played_as_a_participant_reaches_each_receiver_in_its_own_way() {
    use secrelay_gateway::room::{DtmfDigit, Gate, PlayError};
    let (mut h, b, phone) = browser_and_pcmu_phone();
    let pcma = h
        .join_phone("r", SimPhone::plain(3).with_formats(PCMA_ONLY))
        .unwrap();
    let digit = |c| DtmfDigit {
        event: secrelay_media::dtmf::event_for_char(c).unwrap(),
        duration_ms: 200,
        volume: 8,
        pause_ms: 100,
    };
    let phone_id = h.phones[phone].id.clone();
    h.shard.play_dtmf("r", &phone_id, digit('7')).unwrap();
    talk_tone(&mut h, phone, 25);
    assert_eq!(
        digits_heard(&decode(&mut Pcma, 8, &phone_rx(&h, pcma), 20), 8000),
        "7"
    );
    let mut opus = Opus::new(48_000, 32_000).unwrap();
    let heard = decode(&mut opus, 111, &browser_rx(&h, b), 20);
    let mono: Vec<i16> = heard.iter().step_by(6).copied().collect();
    assert_eq!(
        digits_heard(&mono, 8000),
        "7",
        "the browser hears the tones"
    );

    // As the browser (once it talks): telephone-events, at the phone's clock and payload type.
    let browser_id = h.members[b].id.clone();
    for p in opus_packets(800.0, 30) {
        let (_, srtp) = h.srtp(b, &p);
        h.send(b, &srtp);
        h.pump();
    }
    h.shard.play_dtmf("r", &browser_id, digit('2')).unwrap();
    h.phones[phone].phone.received.clear();
    for p in opus_packets(800.0, 25) {
        let (_, srtp) = h.srtp(b, &p);
        h.send(b, &srtp);
        h.pump();
    }
    let mut c = DtmfCollector::new();
    let mut digits = Vec::new();
    for e in phone_rx(&h, phone).iter().filter(|p| p.0 == 101) {
        c.push(e.2, &e.3, &mut digits).unwrap();
    }
    let got: Vec<_> = digits
        .iter()
        .map(|d| (d.char(), d.duration, d.complete))
        .collect();
    assert_eq!(got, [(Some('2'), 1600, true)]);

    // Blocked DTMF: the played digit goes nowhere, counted at its sender.
    let gate = Gate {
        block_dtmf: true,
        ..Gate::default()
    };
    assert!(h.shard.set_gate("r", &browser_id, gate));
    h.shard.play_dtmf("r", &browser_id, digit('3')).unwrap();
    h.phones[phone].phone.received.clear();
    for p in opus_packets(800.0, 25) {
        let (_, srtp) = h.srtp(b, &p);
        h.send(b, &srtp);
        h.pump();
    }
    assert!(phone_rx(&h, phone).iter().all(|p| p.0 == 0), "no events");
    assert!(h.member_counters(b).unwrap().drops[DropReason::DtmfBlocked] > 0);
    assert_eq!(
        h.shard.play_dtmf("r", "nobody", digit('1')),
        Err(PlayError::NoMember)
    );
}

/// Phone `p` sends `packets` 20 ms PCMU packets of a 500 Hz tone, one every 20 ms of the
/// harness's time (so that the room's own clock, a player's, runs beside it).
fn talk_in_time(h: &mut Harness, p: usize, packets: usize) {
    send_tone(h, p, packets, Some(std::time::Duration::from_millis(20)));
}

#[test]
fn media_played_to_a_phone_takes_the_place_of_what_it_hears_on_the_same_stream() {
    use secrelay_gateway::room::{PlayError, PlayMedia};
    use secrelay_media::clip::Clip;
    use std::sync::Arc;
    use std::time::Duration;
    let (mut h, b, phone) = browser_and_pcmu_phone();
    let pcma = h
        .join_phone("r", SimPhone::plain(3).with_formats(PCMA_ONLY))
        .unwrap();
    let pcma_id = h.phones[pcma].id.clone();
    // 200 ms of 1 kHz at 16 kHz: the player resamples it to the phone's 8 kHz A-law.
    let clip = Arc::new(Clip::from_pcm(16_000, tone::sine(16_000, 1000.0, 9000.0, 3200)).unwrap());
    let media = |clip: &Arc<Clip>| PlayMedia {
        clip: clip.clone(),
        start_frame: 0,
        times: 1,
        repeat_for: None,
    };

    talk_in_time(&mut h, phone, 10);
    let now = h.now;
    let length = h
        .shard
        .play_media(now, "r", &pcma_id, media(&clip))
        .unwrap();
    assert_eq!(length, Duration::from_millis(200));
    // The other phone talks on throughout: not heard while the clip plays, heard after.
    talk_in_time(&mut h, phone, 25);
    let rx = phone_rx(&h, pcma);
    let pcm = decode(&mut Pcma, 8, &rx, 20);
    assert_eq!(rx.len(), 35, "10 before, 10 played, 15 after");
    let ssrcs: std::collections::HashSet<u32> = h.phones[pcma]
        .phone
        .received
        .iter()
        .map(|d| RtpHeader::parse(d).unwrap().ssrc())
        .collect();
    assert_eq!(ssrcs.len(), 1, "one stream throughout");
    let share = |from: usize, to: usize, hz| tone::tone_share(&pcm[from * 160..to * 160], 8000, hz);
    assert!(share(12, 19, 1000.0) > 0.9, "the clip is heard");
    assert!(share(22, 35, 500.0) > 0.9, "then the phone again");
    let counters = h.phone_counters(pcma).unwrap();
    assert!(counters.drops[DropReason::PlayedOver] >= 9, "{counters:?}");
    assert_eq!(
        h.shard.stop_media("r", &pcma_id),
        Some(None),
        "it ended by itself"
    );

    // Stopped part-way: where it was, in packet times; the phone is heard again.
    let long = Arc::new(Clip::from_pcm(8000, tone::sine(8000, 1000.0, 9000.0, 8000)).unwrap());
    let now = h.now;
    h.shard
        .play_media(now, "r", &pcma_id, media(&long))
        .unwrap();
    talk_in_time(&mut h, phone, 5);
    let at = h.shard.stop_media("r", &pcma_id).unwrap().unwrap();
    assert!((5..=6).contains(&at), "{at} packet times played");
    assert_eq!(h.shard.stop_media("r", &pcma_id), Some(None));
    h.phones[pcma].phone.received.clear();
    talk_in_time(&mut h, phone, 10);
    let pcm = decode(&mut Pcma, 8, &phone_rx(&h, pcma), 20);
    assert!(tone::tone_share(&pcm[320..], 8000, 500.0) > 0.9);
    assert_eq!(
        h.shard.play_media(h.now, "r", "nobody", media(&clip)),
        Err(PlayError::NoMember)
    );
    // Three plays at most, begun while less than 300 ms has passed: two (400 ms in all).
    let before = h.phone_counters(pcma).unwrap().drops[DropReason::PlayedOver];
    let repeated = PlayMedia {
        times: 3,
        repeat_for: Some(Duration::from_millis(300)),
        ..media(&clip)
    };
    let now = h.now;
    h.shard.play_media(now, "r", &pcma_id, repeated).unwrap();
    talk_in_time(&mut h, phone, 30);
    let held_back = h.phone_counters(pcma).unwrap().drops[DropReason::PlayedOver] - before;
    assert!(
        (19..=21).contains(&held_back),
        "{held_back} of the phone's packets"
    );

    // To the Opus-only browser: the clip in Opus on the section's stream, then the phone again.
    h.members[b].client.received.clear();
    talk_in_time(&mut h, phone, 10);
    let browser_id = h.members[b].id.clone();
    let now = h.now;
    h.shard
        .play_media(now, "r", &browser_id, media(&clip))
        .unwrap();
    talk_in_time(&mut h, phone, 25);
    let rx = browser_rx(&h, b);
    assert_eq!(
        rx.iter().filter(|p| p.0 == 111).count(),
        35,
        "10, 10 played, 15"
    );
    let mut opus = Opus::new(48_000, 32_000).unwrap();
    let pcm: Vec<i16> = decode(&mut opus, 111, &rx, 20);
    let share =
        |from: usize, to: usize, hz| tone::tone_share(&pcm[from * 960..to * 960], 48_000, hz);
    assert!(share(12, 19, 1000.0) > 0.9, "the browser hears the clip");
    assert!(share(24, 35, 500.0) > 0.9, "then the phone again");
}
