//! The building blocks a room will use, composed as the gateway will compose them: three
//! legs on three codecs (a PCMU phone at 30 ms, a G.722 phone and an Opus browser at 20 ms),
//! each sender decoded once to a 48 kHz bus, an N−1 mix per 20 ms tick, one encoder per
//! member back to its own codec and packet time. Each member must hear the other two tones
//! and not its own, in a clean RTP stream.

use secrelay_media::mixer::Mixer;
use secrelay_media::transcode::{InPacket, OutPacket, StreamDecoder, StreamEncoder};
use secrelay_media::{tone, Codec, Registry};

const BUS: u32 = 48_000;

struct Leg {
    name: &'static str,
    freq: f64,
    ptime_in: u32,
    ptime_out: u32,
    sender: Box<dyn Codec>,
    receiver: Box<dyn Codec>,
    decoder: StreamDecoder,
    encoder: StreamEncoder,
    signal: Vec<i16>,
    sent: usize,
    ts: u32,
    seq: u16,
    pending: Vec<i16>,
    received: Vec<OutPacket>,
}

fn leg(
    reg: &Registry,
    name: &'static str,
    rtpmap: &str,
    freq: f64,
    ptime_in: u32,
    ptime_out: u32,
) -> Leg {
    let spec = reg.find_rtpmap(rtpmap).unwrap();
    let make = || {
        reg.make(spec, spec.default_payload_type, spec.offer_fmtp)
            .unwrap()
    };
    let sender = make();
    let signal = tone::sine(
        sender.pcm_rate(),
        freq,
        8000.0,
        sender.pcm_rate() as usize * 2,
    );
    Leg {
        name,
        freq,
        ptime_in,
        ptime_out,
        decoder: StreamDecoder::new(make(), BUS).unwrap(),
        encoder: StreamEncoder::new(make(), BUS, ptime_out, 1000, 90_000).unwrap(),
        receiver: make(),
        sender,
        signal,
        sent: 0,
        ts: 12_345,
        seq: 7,
        pending: Vec::new(),
        received: Vec::new(),
    }
}

#[test]
fn three_codecs_mixed_n_minus_one() {
    let reg = Registry::standard();
    let mut legs = [
        leg(&reg, "PCMU phone", "PCMU/8000", 440.0, 20, 30),
        leg(&reg, "G.722 phone", "G722/8000", 1000.0, 20, 20),
        leg(&reg, "Opus browser", "opus/48000/2", 1700.0, 20, 20),
    ];
    let frame = BUS as usize / 50;
    let mut mixer = Mixer::<i16>::new(frame).unwrap();
    for id in 0..legs.len() as u64 {
        mixer.add(id).unwrap();
    }
    // 1.5 s of 20 ms ticks.
    for _ in 0..75 {
        for (id, l) in legs.iter_mut().enumerate() {
            // The sender's next packet, decoded once onto the bus.
            let n = l.sender.samples_for_ptime(l.ptime_in);
            let mut payload = Vec::new();
            l.sender
                .from_pcm(&l.signal[l.sent..l.sent + n], &mut payload)
                .unwrap();
            l.sent += n;
            let pkt = InPacket {
                seq: l.seq,
                timestamp: l.ts,
                marker: false,
                payload: &payload,
            };
            l.seq = l.seq.wrapping_add(1);
            l.ts = l.ts.wrapping_add(l.sender.clock_ticks(n));
            l.decoder.push(&pkt, &mut l.pending).unwrap();
            if l.pending.len() >= frame {
                let f: Vec<i16> = l.pending.drain(..frame).collect();
                mixer.put(id as u64, &f).unwrap();
            }
        }
        let stats = mixer.mix();
        assert_eq!(stats.missing, 0);
        for (id, l) in legs.iter_mut().enumerate() {
            let mix = mixer.output(id as u64).unwrap().to_vec();
            l.encoder.push_pcm(&mix, &mut l.received).unwrap();
        }
    }
    let freqs: Vec<f64> = legs.iter().map(|l| l.freq).collect();
    for (id, l) in legs.iter_mut().enumerate() {
        // A clean stream: one packet per ptime, consecutive numbers and timestamps.
        let step = l
            .receiver
            .clock_ticks(l.receiver.samples_for_ptime(l.ptime_out));
        assert_eq!(l.received.len() as u32, 1500 / l.ptime_out, "{}", l.name);
        let mut pcm = Vec::new();
        for (i, p) in l.received.iter().enumerate() {
            assert_eq!(p.seq, 1000u16.wrapping_add(i as u16), "{}", l.name);
            assert_eq!(
                p.timestamp,
                90_000u32.wrapping_add(step * i as u32),
                "{}",
                l.name
            );
            assert_eq!(p.payload_type, l.receiver.payload_type());
            l.receiver.to_pcm(&p.payload, &mut pcm).unwrap();
        }
        let rate = l.receiver.pcm_rate();
        let tail = &pcm[pcm.len() / 3..];
        for (other, &f) in freqs.iter().enumerate() {
            let share = tone::tone_share(tail, rate, f);
            if other == id {
                assert!(share < 0.01, "{} hears itself: {share:.4}", l.name);
            } else {
                assert!(share > 0.3, "{} hears {f} Hz at only {share:.3}", l.name);
            }
            eprintln!("{}: {f} Hz share {share:.4}", l.name);
        }
    }
}
