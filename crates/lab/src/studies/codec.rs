//! `lab codec` (`002_…` c): what codecs cost beside the cipher. `002_…` compressed voice
//! before encrypting it and found the codec, not the cipher, was the bottleneck; this study
//! asks the same of a gateway that bridges browsers (Opus) and telephones (G.711, G.722).
//!
//! - per codec and rate: encode and decode µs per 20 ms frame, real-time factor per core
//!   (20 ms ÷ the time), instructions per frame (callgrind); secrelay's codecs beside a peer
//!   in the same run: libopus called directly (the `opus` crate without our `Codec` layer)
//!   for Opus, the `audio-codec` crate (a Rust port of spandsp's G.722 and its own G.711)
//!   and a textbook G.711 (segment search in a loop, Sun's g711.c's shape) for G.711, the
//!   AMR libraries called directly (their storage frames, no RTP payload format) for AMR and
//!   AMR-WB (rows left out where those libraries are not installed);
//! - transcoding per leg: one received 20 ms packet through [`Transcoder`] (decode,
//!   resample, re-frame, encode, new sequence number and timestamp);
//! - mixing per leg: one N−1 tick of [`Mixer`] divided by its N members;
//! - set beside SRTP: secrelay's unprotect + protect of the same packet
//!   (AES_CM_128_HMAC_SHA1_80), so the reader sees which dominates a transcoded leg.

use std::hint::black_box;

use secrelay_media::amr::{amr_available, Amr, Band};
use secrelay_media::g711::{Pcma, Pcmu};
use secrelay_media::g722::G722;
use secrelay_media::mixer::Mixer;
use secrelay_media::opus::Opus;
use secrelay_media::resample::Resampler;
use secrelay_media::transcode::{InPacket, OutPacket, Transcoder};
use secrelay_media::Codec;
use secrelay_srtp::Profile;

use crate::count::CountedOp;
use crate::frame::{Cell, Plot, PlotKind, Series, StudyReport, Table};
use crate::measure::Chunked;
use crate::{Ctx, Study, Timing};

/// Frames per timed chunk: one second of 20 ms frames, so the clock is read once a second
/// of audio (the cheapest codecs take ~100 ns a frame).
const CHUNK: usize = 50;
/// 20 ms, the frame every figure is per.
const FRAME_US: f64 = 20_000.0;
/// Opus encoder complexity of the headline rows (libopus's default).
const COMPLEXITY: i32 = 10;

/// The voice-like test signal at `rate` Hz (the biterror study's 8 kHz voice, resampled).
fn voice(rate: u32, seconds: f64) -> Vec<i16> {
    let v8 = super::biterror::voice(seconds);
    if rate == 8000 {
        return v8;
    }
    let mut r = Resampler::new(8000, rate).expect("8 kHz to a codec rate");
    let mut out = Vec::new();
    r.process(&v8, &mut out);
    out
}

/// Makes a codec instance.
type MakeCodec = fn() -> Box<dyn Codec>;
/// A codec with its frames, or why it could not be prepared.
type Prepared<'a> = (&'a str, Result<(Box<dyn Codec>, Frames), String>);
/// SRTP protect and unprotect ns, or why not.
type SrtpPair = Result<(f64, f64), String>;

/// One configuration of one codec: how to make it, at what rate, and its peer.
struct Config {
    /// Row label.
    codec: &'static str,
    pcm_rate: u32,
    channels: u8,
    /// Encoded bitrate, kbit/s.
    kbps: f64,
    complexity: Option<i32>,
    ours: fn() -> Box<dyn Codec>,
    peer: Option<(&'static str, MakeCodec)>,
    quick: bool,
}

fn opus(rate: u32, channels: u8, bitrate: i32, complexity: i32) -> Box<dyn Codec> {
    let mut o = Opus::with_channels(rate, channels, bitrate).expect("Opus sets up");
    o.set_complexity(complexity).expect("valid complexity");
    Box::new(o)
}

/// secrelay's AMR of `band` (RFC 4867 bandwidth-efficient payloads) in its default mode.
fn amr(band: Band) -> Box<dyn Codec> {
    Box::new(Amr::new(band).expect("the AMR libraries load (checked before)"))
}

/// Whether a row or pipeline whose label names AMR can run here (its libraries load).
fn runs_here(label: &str) -> bool {
    let band = if label.contains("AMR-WB") {
        Band::Wide
    } else {
        Band::Narrow
    };
    !label.contains("AMR") || amr_available(band).is_ok()
}

fn configs() -> Vec<Config> {
    let mut v = all_configs();
    v.retain(|c| runs_here(c.codec));
    v
}

fn all_configs() -> Vec<Config> {
    vec![
        Config {
            codec: "PCMU",
            pcm_rate: 8000,
            channels: 1,
            kbps: 64.0,
            complexity: None,
            ours: || Box::new(Pcmu),
            peer: Some(("textbook G.711", || {
                Box::new(peers::NaiveG711 { alaw: false })
            })),
            quick: true,
        },
        Config {
            codec: "PCMA",
            pcm_rate: 8000,
            channels: 1,
            kbps: 64.0,
            complexity: None,
            ours: || Box::new(Pcma),
            peer: Some(("audio-codec", || Box::new(peers::AudioCodec::pcma()))),
            quick: true,
        },
        Config {
            codec: "G.722",
            pcm_rate: 16_000,
            channels: 1,
            kbps: 64.0,
            complexity: None,
            ours: || Box::new(G722::new()),
            peer: Some(("audio-codec", || Box::new(peers::AudioCodec::g722()))),
            quick: true,
        },
        Config {
            codec: "AMR 12.2 kbit/s",
            pcm_rate: 8000,
            channels: 1,
            kbps: 12.2,
            complexity: None,
            ours: || amr(Band::Narrow),
            peer: Some(("opencore-amr direct", || {
                Box::new(peers::AmrDirect::new(Band::Narrow))
            })),
            quick: true,
        },
        Config {
            codec: "AMR-WB 14.25 kbit/s",
            pcm_rate: 16_000,
            channels: 1,
            kbps: 14.25,
            complexity: None,
            ours: || amr(Band::Wide),
            peer: Some(("opencore-amr/vo-amrwbenc direct", || {
                Box::new(peers::AmrDirect::new(Band::Wide))
            })),
            quick: true,
        },
        Config {
            codec: "Opus NB 8 kHz",
            pcm_rate: 8000,
            channels: 1,
            kbps: 16.0,
            complexity: Some(COMPLEXITY),
            ours: || opus(8000, 1, 16_000, COMPLEXITY),
            peer: Some(("libopus direct", || {
                Box::new(peers::LibOpus::new(8000, 1, 16_000, COMPLEXITY))
            })),
            quick: false,
        },
        Config {
            codec: "Opus WB 16 kHz",
            pcm_rate: 16_000,
            channels: 1,
            kbps: 24.0,
            complexity: Some(COMPLEXITY),
            ours: || opus(16_000, 1, 24_000, COMPLEXITY),
            peer: Some(("libopus direct", || {
                Box::new(peers::LibOpus::new(16_000, 1, 24_000, COMPLEXITY))
            })),
            quick: false,
        },
        Config {
            codec: "Opus 48 kHz mono",
            pcm_rate: 48_000,
            channels: 1,
            kbps: 32.0,
            complexity: Some(COMPLEXITY),
            ours: || opus(48_000, 1, 32_000, COMPLEXITY),
            peer: Some(("libopus direct", || {
                Box::new(peers::LibOpus::new(48_000, 1, 32_000, COMPLEXITY))
            })),
            quick: true,
        },
        Config {
            codec: "Opus 48 kHz mono",
            pcm_rate: 48_000,
            channels: 1,
            kbps: 32.0,
            complexity: Some(5),
            ours: || opus(48_000, 1, 32_000, 5),
            peer: Some(("libopus direct", || {
                Box::new(peers::LibOpus::new(48_000, 1, 32_000, 5))
            })),
            quick: false,
        },
        Config {
            codec: "Opus 48 kHz mono",
            pcm_rate: 48_000,
            channels: 1,
            kbps: 64.0,
            complexity: Some(COMPLEXITY),
            ours: || opus(48_000, 1, 64_000, COMPLEXITY),
            peer: Some(("libopus direct", || {
                Box::new(peers::LibOpus::new(48_000, 1, 64_000, COMPLEXITY))
            })),
            quick: false,
        },
        Config {
            codec: "Opus 48 kHz stereo",
            pcm_rate: 48_000,
            channels: 2,
            kbps: 64.0,
            complexity: Some(COMPLEXITY),
            ours: || opus(48_000, 2, 64_000, COMPLEXITY),
            peer: Some(("libopus direct", || {
                Box::new(peers::LibOpus::new(48_000, 2, 64_000, COMPLEXITY))
            })),
            quick: false,
        },
    ]
}

/// The frames of one second of voice for `c`, and their encodings (for decode timing).
struct Frames {
    pcm: Vec<Vec<i16>>,
    coded: Vec<Vec<u8>>,
}

fn frames(c: &Config, codec: &mut dyn Codec) -> Result<Frames, String> {
    let mono = voice(c.pcm_rate, 1.0);
    let per = c.pcm_rate as usize / 50;
    let pcm: Vec<Vec<i16>> = mono
        .chunks_exact(per)
        .take(CHUNK)
        .map(|f| {
            f.iter()
                .flat_map(|&s| std::iter::repeat_n(s, c.channels as usize))
                .collect()
        })
        .collect();
    let mut coded = Vec::new();
    for f in &pcm {
        let mut p = Vec::new();
        codec.from_pcm(f, &mut p).map_err(|e| e.to_string())?;
        coded.push(p);
    }
    Ok(Frames { pcm, coded })
}

/// A codec's encode (or decode) of a whole second of frames: one chunk.
fn chunk_op<'a>(codec: &'a mut dyn Codec, f: &'a Frames, encode: bool) -> Box<dyn FnMut() + 'a> {
    let mut out = Vec::with_capacity(4096);
    let mut pcm = Vec::with_capacity(8192);
    Box::new(move || {
        for i in 0..CHUNK {
            if encode {
                out.clear();
                black_box(
                    codec
                        .from_pcm(&f.pcm[i], &mut out)
                        .expect("encoded in the dry run"),
                );
            } else {
                pcm.clear();
                black_box(
                    codec
                        .to_pcm(&f.coded[i], &mut pcm)
                        .expect("decoded in the dry run"),
                );
            }
        }
    })
}

/// A transcoding pipeline measured per leg.
struct Pipeline {
    label: &'static str,
    from: fn() -> Box<dyn Codec>,
    to: fn() -> Box<dyn Codec>,
    /// RTP packet size in (bytes, header included), for the SRTP cost beside it.
    packet_in: usize,
    packet_out: usize,
    g711: bool,
}

fn pipelines() -> Vec<Pipeline> {
    let mut v = all_pipelines();
    v.retain(|p| runs_here(p.label));
    v
}

fn all_pipelines() -> Vec<Pipeline> {
    vec![
        Pipeline {
            label: "PCMU → PCMA",
            from: || Box::new(Pcmu),
            to: || Box::new(Pcma),
            packet_in: 172,
            packet_out: 172,
            g711: true,
        },
        Pipeline {
            label: "PCMA → PCMU",
            from: || Box::new(Pcma),
            to: || Box::new(Pcmu),
            packet_in: 172,
            packet_out: 172,
            g711: true,
        },
        Pipeline {
            label: "G.722 → PCMU (16 → 8 kHz)",
            from: || Box::new(G722::new()),
            to: || Box::new(Pcmu),
            packet_in: 172,
            packet_out: 172,
            g711: false,
        },
        Pipeline {
            label: "Opus 48 kHz → PCMU (48 → 8 kHz)",
            from: || opus(48_000, 1, 32_000, COMPLEXITY),
            to: || Box::new(Pcmu),
            packet_in: 100,
            packet_out: 172,
            g711: false,
        },
        Pipeline {
            label: "PCMU → Opus 48 kHz (8 → 48 kHz)",
            from: || Box::new(Pcmu),
            to: || opus(48_000, 1, 32_000, COMPLEXITY),
            packet_in: 172,
            packet_out: 100,
            g711: false,
        },
        Pipeline {
            label: "AMR-WB → PCMA (16 → 8 kHz)",
            from: || amr(Band::Wide),
            to: || Box::new(Pcma),
            packet_in: 12 + 37,
            packet_out: 172,
            g711: false,
        },
        Pipeline {
            label: "PCMA → AMR-WB (8 → 16 kHz)",
            from: || Box::new(Pcma),
            to: || amr(Band::Wide),
            packet_in: 172,
            packet_out: 12 + 37,
            g711: false,
        },
        Pipeline {
            label: "Opus 48 kHz → G.722 (48 → 16 kHz)",
            from: || opus(48_000, 1, 32_000, COMPLEXITY),
            to: || Box::new(G722::new()),
            packet_in: 100,
            packet_out: 172,
            g711: false,
        },
    ]
}

/// One second of `p`'s input packets (20 ms each), and a transcoder fed them in a loop
/// with rising sequence numbers and timestamps.
struct Leg {
    t: Transcoder,
    packets: Vec<Vec<u8>>,
    ticks: u32,
    seq: u16,
    ts: u32,
    out: Vec<OutPacket>,
}

impl Leg {
    fn new(p: &Pipeline) -> Result<Leg, String> {
        let mut src = (p.from)();
        let rate = src.pcm_rate();
        let per = src.frame_samples();
        let voice = voice(rate, 1.0);
        let mut packets = Vec::new();
        for f in voice.chunks_exact(per).take(CHUNK) {
            let mut pkt = Vec::new();
            src.from_pcm(f, &mut pkt).map_err(|e| e.to_string())?;
            packets.push(pkt);
        }
        let t = Transcoder::new((p.from)(), (p.to)(), 20).map_err(|e| e.to_string())?;
        let mut leg = Leg {
            t,
            packets,
            ticks: src.clock_ticks(per),
            seq: 0,
            ts: 0,
            out: Vec::with_capacity(4),
        };
        // Dry run: a whole second must come out as 50 packets.
        leg.second();
        if leg.out.is_empty() {
            return Err("the transcoder produced nothing".into());
        }
        Ok(leg)
    }

    /// One packet in; returns how many went out.
    fn one(&mut self, i: usize) -> usize {
        self.out.clear();
        let pkt = InPacket {
            seq: self.seq,
            timestamp: self.ts,
            marker: false,
            payload: &self.packets[i],
        };
        self.seq = self.seq.wrapping_add(1);
        self.ts = self.ts.wrapping_add(self.ticks);
        self.t
            .push(&pkt, &mut self.out)
            .expect("our own packets transcode");
        self.out.len()
    }

    fn second(&mut self) {
        for i in 0..CHUNK {
            black_box(self.one(i));
        }
    }
}

/// SRTP unprotect + protect of one packet of `size` bytes with secrelay's default
/// provider, AES_CM_128_HMAC_SHA1_80 (the lab srtp study's method), ns.
fn srtp_ns(ctx: &Ctx, size: usize) -> Result<(f64, f64), String> {
    let makers: Vec<super::srtp::StackFactory> = super::srtp::stacks(Profile::AesCm128HmacSha1_80)
        .into_iter()
        .filter(|(n, _)| n == "secrelay")
        .map(|(_, m)| m)
        .collect();
    match super::srtp::measure_all(ctx, &makers, size)
        .into_iter()
        .next()
    {
        Some(Ok((p, u))) => Ok((p.ns, u.ns)),
        Some(Err(e)) => Err(e),
        None => Err("secrelay's SRTP stack is missing".into()),
    }
}

/// The `lab codec` study.
pub struct CodecStudy;

fn us(t: &Timing) -> f64 {
    t.ns / 1000.0
}

impl Study for CodecStudy {
    fn name(&self) -> &'static str {
        "codec"
    }
    fn title(&self) -> &'static str {
        "Codec, transcoding and mixing cost per leg, beside SRTP (002 c)"
    }

    fn counted_ops(&self, pace: crate::measure::Pace) -> anyhow::Result<Vec<CountedOp>> {
        let quick = pace != crate::measure::Pace::Full;
        let mut ops = Vec::new();
        for c in configs().into_iter().filter(|c| !quick || c.quick) {
            let mut impls: Vec<(String, MakeCodec)> = vec![("secrelay".into(), c.ours)];
            if let Some((name, make)) = c.peer {
                impls.push((name.into(), make));
            }
            for (name, make) in impls {
                for encode in [true, false] {
                    let mut codec = make();
                    let Ok(f) = frames(&c, codec.as_mut()) else {
                        continue;
                    };
                    let mut i = 0;
                    let mut out = Vec::new();
                    let mut pcm = Vec::new();
                    ops.push(CountedOp::new(
                        format!(
                            "{}|{}|{}|{}|{}",
                            c.codec,
                            complexity_label(c.complexity),
                            c.kbps,
                            name,
                            if encode { "enc" } else { "dec" }
                        ),
                        8,
                        move || {
                            i = (i + 1) % f.pcm.len();
                            if encode {
                                out.clear();
                                black_box(codec.from_pcm(&f.pcm[i], &mut out).ok());
                            } else {
                                pcm.clear();
                                black_box(codec.to_pcm(&f.coded[i], &mut pcm).ok());
                            }
                        },
                    ));
                }
            }
        }
        for p in pipelines() {
            let Ok(mut leg) = Leg::new(&p) else { continue };
            let mut i = 0;
            ops.push(CountedOp::new(
                format!("transcode|{}", p.label),
                8,
                move || {
                    i = (i + 1) % CHUNK;
                    black_box(leg.one(i));
                },
            ));
        }
        for (rate, n) in mix_cases(quick) {
            let mut m = MixCase::new(rate, n);
            ops.push(CountedOp::new(format!("mix|{rate}|{n}"), 4, move || {
                m.tick();
            }));
        }
        Ok(ops)
    }

    fn run(&self, ctx: &mut Ctx) -> anyhow::Result<StudyReport> {
        let quick = ctx.quick();
        let configs: Vec<Config> = configs()
            .into_iter()
            .filter(|c| !quick || c.quick)
            .collect();
        let pipes = pipelines();
        ctx.steps((configs.len() + pipes.len() + 4) as u64);

        // Codecs: ours and the peer interleaved, encode then decode.
        let mut codec_rows: Vec<CodecRow> = Vec::new();
        for c in &configs {
            ctx.step(format!("{} {}", c.codec, complexity_label(c.complexity)));
            let mut impls: Vec<(&str, Box<dyn Codec>)> = vec![("secrelay", (c.ours)())];
            if let Some((name, make)) = c.peer {
                impls.push((name, make()));
            }
            let mut prepared: Vec<Prepared<'_>> = Vec::new();
            for (name, mut codec) in impls {
                let r = frames(c, codec.as_mut()).map(|f| (codec, f));
                prepared.push((name, r));
            }
            let mut timings: Vec<(Option<Timing>, Option<Timing>)> =
                vec![(None, None); prepared.len()];
            for encode in [true, false] {
                let idx: Vec<usize> = (0..prepared.len())
                    .filter(|&i| prepared[i].1.is_ok())
                    .collect();
                let mut ops: Vec<Chunked<'_>> = Vec::new();
                for (_, r) in prepared.iter_mut() {
                    if let Ok((codec, f)) = r {
                        ops.push(Chunked {
                            chunk: CHUNK,
                            prepare: Box::new(|| {}),
                            process: chunk_op(codec.as_mut(), f, encode),
                        });
                    }
                }
                let t = ctx.bench.time_chunked_interleaved(&mut ops);
                drop(ops);
                for (k, &i) in idx.iter().enumerate() {
                    if encode {
                        timings[i].0 = Some(t[k]);
                    } else {
                        timings[i].1 = Some(t[k]);
                    }
                }
            }
            for (i, (name, r)) in prepared.iter().enumerate() {
                codec_rows.push(CodecRow {
                    codec: c.codec,
                    mode: match r {
                        Ok((_, f)) if c.codec.starts_with("Opus") => Some(opus_mode(&f.coded)),
                        _ => None,
                    },
                    complexity: c.complexity,
                    pcm_rate: c.pcm_rate,
                    channels: c.channels,
                    kbps: c.kbps,
                    implementation: name.to_string(),
                    timing: match r {
                        Ok(_) => Ok((timings[i].0.expect("timed"), timings[i].1.expect("timed"))),
                        Err(e) => Err(e.clone()),
                    },
                });
            }
            ctx.done();
        }

        // Transcoding per leg, each pipeline on its own.
        let mut legs: Vec<(&Pipeline, Result<Timing, String>)> = Vec::new();
        for p in &pipes {
            ctx.step(format!("transcode {}", p.label));
            let r =
                Leg::new(p).map(|mut leg| ctx.bench.time_chunked(CHUNK, || {}, || leg.second()));
            legs.push((p, r));
            ctx.done();
        }

        // Mixing per leg.
        ctx.step("N-1 mixing");
        let mut mixes = Vec::new();
        for (rate, n) in mix_cases(quick) {
            let mut m = MixCase::new(rate, n);
            let t = ctx.bench.time(|| m.tick());
            mixes.push((rate, n, t));
        }
        ctx.done();

        // SRTP beside them.
        ctx.step("SRTP unprotect + protect");
        let srtp_172 = srtp_ns(ctx, 172);
        let srtp_100 = srtp_ns(ctx, 100);
        ctx.done();

        ctx.step("counting instructions");
        let (counts, instructions_method) = match ctx.count_instructions() {
            Ok(c) => (c, "callgrind, instructions per 20 ms frame (encode or decode of one frame of the voice signal, 8 per region), per transcoded packet, per mixer tick ÷ members; baseline region subtracted".to_string()),
            Err(why) => (Default::default(), why),
        };
        ctx.done();

        Ok(report(
            self,
            ctx,
            &codec_rows,
            &legs,
            &mixes,
            (srtp_172, srtp_100),
            &counts,
            instructions_method,
        ))
    }
}

/// The Opus mode most of `packets` were coded in, from the configuration number in their
/// TOC byte: 0–11 SILK, 12–15 hybrid, 16–31 CELT (RFC 6716 §3.1).
fn opus_mode(packets: &[Vec<u8>]) -> &'static str {
    let mut n = [0usize; 3];
    for p in packets {
        if let Some(&toc) = p.first() {
            n[match toc >> 3 {
                0..=11 => 0,
                12..=15 => 1,
                _ => 2,
            }] += 1;
        }
    }
    let most = (0..3).max_by_key(|&i| n[i]).unwrap_or(0);
    ["SILK", "hybrid", "CELT"][most]
}

fn complexity_label(c: Option<i32>) -> String {
    c.map(|c| format!("complexity {c}")).unwrap_or_default()
}

struct CodecRow {
    codec: &'static str,
    /// Opus: the coding mode most packets used (from their TOC byte, RFC 6716 §3.1).
    mode: Option<&'static str>,
    complexity: Option<i32>,
    pcm_rate: u32,
    channels: u8,
    kbps: f64,
    implementation: String,
    timing: Result<(Timing, Timing), String>,
}

fn mix_cases(quick: bool) -> Vec<(u32, usize)> {
    if quick {
        vec![(8000, 3), (48_000, 10)]
    } else {
        vec![
            (8000, 3),
            (8000, 10),
            (8000, 100),
            (16_000, 10),
            (48_000, 3),
            (48_000, 10),
            (48_000, 100),
        ]
    }
}

/// A mixer of `n` members at `rate` fed one 20 ms frame each per tick (the frames are
/// prepared; the tick is `n` puts and one mix).
struct MixCase {
    m: Mixer<i16>,
    frames: Vec<Vec<i16>>,
}

impl MixCase {
    fn new(rate: u32, n: usize) -> MixCase {
        let len = rate as usize / 50;
        let v = voice(rate, 1.0);
        let frames: Vec<Vec<i16>> = (0..n)
            .map(|k| {
                let off = (k * 997) % (v.len() - len);
                v[off..off + len].to_vec()
            })
            .collect();
        let mut m = Mixer::new(len).expect("frames of 20 ms");
        for id in 0..n as u64 {
            m.add(id).expect("within the member limit");
        }
        MixCase { m, frames }
    }
    fn tick(&mut self) {
        for (id, f) in self.frames.iter().enumerate() {
            self.m
                .put(id as u64, f)
                .expect("frames of the mixer's length");
        }
        black_box(self.m.mix());
        black_box(self.m.output(0));
    }
}

/// Encode and decode per frame for every codec and implementation, with their real-time
/// factors, ratios to the peer and instructions.
fn codec_table(codec_rows: &[CodecRow], counts: &std::collections::BTreeMap<String, f64>) -> Table {
    let mut codec_table = Table::new(
        "codec_per_frame",
        "Encode and decode per 20 ms frame, one core (µs, median), and real-time factor",
    )
    .col("codec", "codec")
    .col("setting", "setting")
    .col("implementation", "implementation")
    .col_unit("pcm_rate", "PCM", "Hz")
    .col_unit("channels", "channels", "")
    .col_unit("kbps", "bitrate", "kbit/s")
    .col("mode", "mode")
    .col_unit("encode_us", "encode", "µs")
    .col_unit("decode_us", "decode", "µs")
    .col_unit("encode_spread_pct", "spread", "%")
    .col_unit("encode_rt", "encode ×RT", "×")
    .col_unit("decode_rt", "decode ×RT", "×")
    .col_unit("encode_vs_peer", "encode vs peer", "×")
    .col_unit("decode_vs_peer", "decode vs peer", "×")
    .col_unit("encode_instructions", "instr/encode", "instr")
    .col_unit("decode_instructions", "instr/decode", "instr");
    for r in codec_rows {
        let setting = complexity_label(r.complexity);
        let mut row: Vec<(&str, Cell)> = vec![
            ("codec", Cell::text(r.codec)),
            ("setting", Cell::text(setting.clone())),
            ("implementation", Cell::text(r.implementation.clone())),
            ("pcm_rate", Cell::num(r.pcm_rate as f64)),
            ("channels", Cell::num(r.channels as f64)),
            ("kbps", Cell::num(r.kbps)),
            ("mode", Cell::text(r.mode.unwrap_or(""))),
        ];
        match &r.timing {
            Ok((e, d)) => {
                row.push(("encode_us", Cell::num(us(e))));
                row.push(("decode_us", Cell::num(us(d))));
                row.push(("encode_spread_pct", Cell::num(e.spread_pct)));
                row.push(("encode_rt", Cell::num(FRAME_US / us(e))));
                row.push(("decode_rt", Cell::num(FRAME_US / us(d))));
                if r.implementation == "secrelay" {
                    let peer = codec_rows.iter().find(|p| {
                        p.codec == r.codec
                            && p.complexity == r.complexity
                            && p.kbps == r.kbps
                            && p.implementation != "secrelay"
                    });
                    if let Some(Ok((pe, pd))) = peer.map(|p| &p.timing) {
                        row.push(("encode_vs_peer", Cell::num(e.ns / pe.ns)));
                        row.push(("decode_vs_peer", Cell::num(d.ns / pd.ns)));
                    }
                }
            }
            Err(why) => {
                row.push(("encode_us", Cell::not_offered(why.clone())));
                row.push(("decode_us", Cell::not_offered(why.clone())));
            }
        }
        let key = |dir: &str| {
            format!(
                "{}|{}|{}|{}|{}",
                r.codec, setting, r.kbps, r.implementation, dir
            )
        };
        if let Some(n) = counts.get(&key("enc")) {
            row.push(("encode_instructions", Cell::num(*n)));
        }
        if let Some(n) = counts.get(&key("dec")) {
            row.push(("decode_instructions", Cell::num(*n)));
        }
        codec_table.push(row);
    }
    codec_table
}

/// N−1 mixing per leg for each bus rate and room size.
fn mix_table(
    mixes: &[(u32, usize, Timing)],
    counts: &std::collections::BTreeMap<String, f64>,
) -> Table {
    let mut mix_table = Table::new(
        "codec_mix_per_leg",
        "N−1 mixing per leg: one 20 ms tick (N frames in, N mixes out) ÷ N members (µs, median)",
    )
    .col_unit("rate", "bus rate", "Hz")
    .col_unit("members", "members", "")
    .col_unit("tick_us", "tick", "µs")
    .col_unit("per_leg_us", "per leg", "µs")
    .col_unit("rt_per_leg", "×RT per leg", "×")
    .col_unit("instructions_per_leg", "instr/leg", "instr");
    for (rate, n, t) in mixes {
        let mut row: Vec<(&str, Cell)> = vec![
            ("rate", Cell::num(*rate as f64)),
            ("members", Cell::num(*n as f64)),
            ("tick_us", Cell::num(us(t))),
            ("per_leg_us", Cell::num(us(t) / *n as f64)),
            ("rt_per_leg", Cell::num(FRAME_US / (us(t) / *n as f64))),
        ];
        if let Some(c) = counts.get(&format!("mix|{rate}|{n}")) {
            row.push(("instructions_per_leg", Cell::num(c / *n as f64)));
        }
        mix_table.push(row);
    }
    mix_table
}

/// Bars per leg and packet: SRTP against codec work (µs).
fn leg_plot(cats: Vec<String>, srtp: Vec<(f64, f64)>, codec: Vec<(f64, f64)>) -> Plot {
    Plot {
        id: "codec_vs_srtp_per_leg".into(),
        title: "Per leg and 20 ms packet: SRTP vs codec work (µs)".into(),
        kind: PlotKind::Bars,
        x_label: "leg".into(),
        y_label: "µs per packet".into(),
        log_y: true,
        categories: cats,
        series: vec![
            Series {
                name: "SRTP (unprotect + protect)".into(),
                points: srtp,
            },
            Series {
                name: "transcoding".into(),
                points: codec.into_iter().filter(|p| p.1 > 0.0).collect(),
            },
        ],
    }
}

/// Bars: each codec's real-time factor per core, encode and decode.
fn realtime_plot(codec_rows: &[CodecRow]) -> Plot {
    let rows: Vec<&CodecRow> = codec_rows.iter().filter(|r| r.timing.is_ok()).collect();
    let categories: Vec<String> = rows
        .iter()
        .map(|r| {
            let s = complexity_label(r.complexity);
            if s.is_empty() {
                format!("{} ({})", r.codec, r.implementation)
            } else {
                format!(
                    "{} c{} ({})",
                    r.codec,
                    r.complexity.unwrap_or(0),
                    r.implementation
                )
            }
        })
        .collect();
    let pick = |enc: bool| -> Vec<(f64, f64)> {
        rows.iter()
            .enumerate()
            .filter_map(|(i, r)| {
                r.timing
                    .as_ref()
                    .ok()
                    .map(|(e, d)| (i as f64, FRAME_US / us(if enc { e } else { d })))
            })
            .collect()
    };
    Plot {
        id: "codec_realtime_factor".into(),
        title: "Real-time factor per core, 20 ms frames (higher is cheaper)".into(),
        kind: PlotKind::Bars,
        x_label: "codec (implementation)".into(),
        y_label: "× real time".into(),
        log_y: true,
        categories,
        series: vec![
            Series {
                name: "encode".into(),
                points: pick(true),
            },
            Series {
                name: "decode".into(),
                points: pick(false),
            },
        ],
    }
}

/// SRTP per relayed packet of `size` bytes (172: G.711 and G.722, else Opus's 100), both
/// directions (unprotect + protect), in µs.
fn srtp_per_packet(srtp: &(SrtpPair, SrtpPair), size: usize) -> Result<f64, String> {
    let r = if size == 172 { &srtp.0 } else { &srtp.1 };
    r.as_ref()
        .map(|(p, u)| (p + u) / 1000.0)
        .map_err(|e| e.clone())
}

/// The transcoded legs' table and what the plot of SRTP against codec work per leg shows.
struct LegFigures {
    table: Table,
    /// The plot's legs, relay only first.
    cats: Vec<String>,
    srtp: Vec<(f64, f64)>,
    codec: Vec<(f64, f64)>,
    /// The G.711 pipelines' real-time factors.
    g711_rt: Vec<f64>,
}

/// Transcoding per leg beside its SRTP: each pipeline's time, spread, real-time factor, the
/// codec's share of the leg and legs per core.
fn leg_figures(
    legs: &[(&Pipeline, Result<Timing, String>)],
    srtp: &(SrtpPair, SrtpPair),
    counts: &std::collections::BTreeMap<String, f64>,
) -> LegFigures {
    let srtp_for = |size: usize| srtp_per_packet(srtp, size);
    let mut leg_table = Table::new(
        "codec_transcode_per_leg",
        "Transcoding per leg: one received 20 ms packet decoded, resampled, re-framed, encoded and renumbered (µs, median), beside SRTP",
    )
    .col("pipeline", "pipeline")
    .col_unit("transcode_us", "transcode", "µs")
    .col_unit("spread_pct", "spread", "%")
    .col_unit("rt", "×RT per core", "×")
    .col_unit("srtp_us", "SRTP unprotect + protect", "µs")
    .col_unit("codec_share_pct", "codec share of the leg", "%")
    .col_unit("legs_per_core", "transcoded legs per core", "legs")
    .col_unit("instructions", "instr/packet", "instr");
    let mut plot_cats = Vec::new();
    let mut plot_srtp = Vec::new();
    let mut plot_codec = Vec::new();
    let mut g711_rt: Vec<f64> = Vec::new();
    // Relay only: SRTP on both sides, no codec work.
    if let Ok(s) = srtp_for(172) {
        plot_cats.push("relay only (G.711 172 B)".to_string());
        plot_srtp.push((0.0, s));
        plot_codec.push((0.0, 0.0));
    }
    for (p, r) in legs {
        let srtp_leg = match (srtp_for(p.packet_in), srtp_for(p.packet_out)) {
            // Unprotect the packet in, protect the packet out (half of each round trip).
            (Ok(a), Ok(b)) => Ok((a + b) / 2.0),
            (Err(e), _) | (_, Err(e)) => Err(e),
        };
        let mut row: Vec<(&str, Cell)> = vec![("pipeline", Cell::text(p.label))];
        match r {
            Ok(t) => {
                let rt = FRAME_US / us(t);
                if p.g711 {
                    g711_rt.push(rt);
                }
                row.push(("transcode_us", Cell::num(us(t))));
                row.push(("spread_pct", Cell::num(t.spread_pct)));
                row.push(("rt", Cell::num(rt)));
                match &srtp_leg {
                    Ok(s) => {
                        row.push(("srtp_us", Cell::num(*s)));
                        row.push(("codec_share_pct", Cell::num(us(t) / (us(t) + s) * 100.0)));
                        row.push(("legs_per_core", Cell::num(FRAME_US / (us(t) + s))));
                        let i = plot_cats.len() as f64;
                        plot_cats.push(p.label.to_string());
                        plot_srtp.push((i, *s));
                        plot_codec.push((i, us(t)));
                    }
                    Err(e) => row.push(("srtp_us", Cell::not_offered(e.clone()))),
                }
            }
            Err(e) => row.push(("transcode_us", Cell::not_offered(e.clone()))),
        }
        if let Some(n) = counts.get(&format!("transcode|{}", p.label)) {
            row.push(("instructions", Cell::num(*n)));
        }
        leg_table.push(row);
    }
    LegFigures {
        table: leg_table,
        cats: plot_cats,
        srtp: plot_srtp,
        codec: plot_codec,
        g711_rt,
    }
}

#[allow(clippy::too_many_arguments)]
fn report(
    study: &CodecStudy,
    ctx: &Ctx,
    codec_rows: &[CodecRow],
    legs: &[(&Pipeline, Result<Timing, String>)],
    mixes: &[(u32, usize, Timing)],
    srtp: (SrtpPair, SrtpPair),
    counts: &std::collections::BTreeMap<String, f64>,
    instructions_method: String,
) -> StudyReport {
    let mut notes = Vec::new();
    let codec_table = codec_table(codec_rows, counts);

    // SRTP per packet, both directions of one relayed packet.
    let srtp_for = |size: usize| srtp_per_packet(&srtp, size);

    let LegFigures {
        table: leg_table,
        cats: plot_cats,
        srtp: plot_srtp,
        codec: plot_codec,
        g711_rt,
    } = leg_figures(legs, &srtp, counts);
    let mix_table = mix_table(mixes, counts);

    // Targets (issue 20), stated against this run.
    if let Some(min) = g711_rt.iter().copied().min_by(f64::total_cmp) {
        notes.push(format!(
            "Target G.711 transcoding ≥ 2,000× real time per core: {} here (slowest G.711 pipeline {}×).",
            if min >= 2000.0 { "met" } else { "not met" },
            crate::frame::format_num(min)
        ));
    }
    if let Some(Ok((e, _))) = codec_rows
        .iter()
        .find(|r| {
            r.codec == "Opus 48 kHz mono"
                && r.complexity == Some(COMPLEXITY)
                && r.kbps == 32.0
                && r.implementation == "secrelay"
        })
        .map(|r| &r.timing)
    {
        let rt = FRAME_US / us(e);
        notes.push(format!(
            "Target Opus 48 kHz mono encode ≥ 100× real time per core (complexity {COMPLEXITY}, 32 kbit/s, VoIP application): {} here ({}×).",
            if rt >= 100.0 { "met" } else { "not met" },
            crate::frame::format_num(rt)
        ));
    }
    let opus_mono = |kbps: f64| {
        codec_rows.iter().find(|r| {
            r.codec == "Opus 48 kHz mono"
                && r.complexity == Some(COMPLEXITY)
                && r.kbps == kbps
                && r.implementation == "secrelay"
        })
    };
    if let (Some(a), Some(b)) = (opus_mono(32.0), opus_mono(64.0)) {
        if let (Ok((ea, _)), Ok((eb, _))) = (&a.timing, &b.timing) {
            notes.push(format!(
                "Opus's encoding cost follows the mode libopus picks, not the bitrate: 48 kHz mono at 32 kbit/s was coded {} ({} µs per frame), at 64 kbit/s {} ({} µs).",
                a.mode.unwrap_or("?"),
                crate::frame::format_num(us(ea)),
                b.mode.unwrap_or("?"),
                crate::frame::format_num(us(eb))
            ));
        }
    }
    notes.push(
        "Peers: Opus is libopus either way; \"libopus direct\" calls the opus crate's Encoder/Decoder without secrelay's Codec layer, so its ratio is what the layer costs. \
         G.711 and G.722: the audio-codec crate (its own G.711 tables; G.722 ported from spandsp) and a textbook G.711 written for this study (segment found by a loop over the segment ends, as in Sun's g711.c, which CPython's audioop and many PBXes carry). \
         FFmpeg's libavcodec (rtpengine's codecs) is checked bit for bit against secrelay's G.722 in the tests, but is not timed here: no Rust binding of it builds from Debian's packages without its development headers."
            .into(),
    );
    if let (Some(codec_max), Ok(s)) = (
        plot_codec.iter().map(|p| p.1).max_by(f64::total_cmp),
        srtp_for(172),
    ) {
        notes.push(format!(
            "Which dominates: SRTP costs {} µs per relayed G.711 packet (unprotect + protect); the dearest transcoding here costs {} µs per packet, {}× as much.",
            crate::frame::format_num(s),
            crate::frame::format_num(codec_max),
            crate::frame::format_num(codec_max / s)
        ));
    }

    let plots = vec![
        leg_plot(plot_cats, plot_srtp, plot_codec),
        realtime_plot(codec_rows),
    ];

    let method = ctx.method(
        "codecs: encoding (or decoding) one 20 ms frame of a deterministic voice-like signal (the biterror study's, resampled with secrelay's resampler for 16 and 48 kHz; stereo duplicates it), \
         in chunks of one second (50 frames) so the clock is read once per chunk, the output buffer reused; secrelay's codec and its peer interleaved run by run; \
         transcoding: one received 20 ms RTP packet (header fields parsed, payload made beforehand) through secrelay_media::transcode::Transcoder — decode, resample to the output codec's rate, re-frame to 20 ms, encode, new sequence number and timestamp — chunks of one second; \
         mixing: one tick of an N-member Mixer<i16> (N puts of prepared 20 ms frames, one N−1 mix), divided by N; \
         SRTP: secrelay's default provider, AES_CM_128_HMAC_SHA1_80, unprotect + protect of one RTP packet of 172 B (G.711 and G.722, 20 ms) or 100 B (Opus at 32 kbit/s), lab srtp's method; \
         a transcoded leg's SRTP is half the unprotect + protect of its input size plus half of its output size (one unprotect in, one protect out); \
         ×RT = 20 ms ÷ the time; legs per core = 20 ms ÷ (transcode + SRTP)",
        instructions_method,
    );
    StudyReport {
        study: study.name().into(),
        title: study.title().into(),
        seeds: vec!["002".into()],
        method,
        tables: vec![codec_table, leg_table, mix_table],
        plots,
        notes,
    }
}

/// The peers, behind the same `Codec` interface so they are timed the same way.
mod peers {
    use super::*;
    use secrelay_media::Error;

    /// G.711 the textbook way: the segment found by searching the segment ends, every
    /// sample computed (no tables), as in Sun's g711.c.
    pub struct NaiveG711 {
        pub alaw: bool,
    }

    const SEG_END_U: [i32; 8] = [0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF, 0x1FFF];
    const SEG_END_A: [i32; 8] = [0x1F, 0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF];

    fn search(v: i32, table: &[i32; 8]) -> usize {
        table.iter().position(|&e| v <= e).unwrap_or(8)
    }

    fn lin2ulaw(x: i16) -> u8 {
        let (mut v, mask): (i32, i32) = if x < 0 {
            (-(x as i32 >> 2), 0x7F)
        } else {
            (x as i32 >> 2, 0xFF)
        };
        v = (v + 0x21).min(0x1FFF);
        let seg = search(v, &SEG_END_U);
        if seg >= 8 {
            return (0x7F ^ mask) as u8;
        }
        let uval = ((seg as i32) << 4) | ((v >> (seg + 1)) & 0xF);
        (uval ^ mask) as u8
    }

    fn ulaw2lin(u: u8) -> i16 {
        let u = !u;
        let t = ((((u & 0x0F) as i32) << 3) + 0x84) << ((u & 0x70) >> 4);
        (if u & 0x80 != 0 { 0x84 - t } else { t - 0x84 }) as i16
    }

    fn lin2alaw(x: i16) -> u8 {
        let (v, mask) = if x < 0 {
            (!(x as i32) >> 3, 0x55)
        } else {
            (x as i32 >> 3, 0xD5)
        };
        let seg = search(v, &SEG_END_A);
        if seg >= 8 {
            return (0x7F ^ mask) as u8;
        }
        let aval = ((seg as i32) << 4)
            | if seg < 2 {
                (v >> 1) & 0xF
            } else {
                (v >> seg) & 0xF
            };
        (aval ^ mask) as u8
    }

    fn alaw2lin(a: u8) -> i16 {
        let a = a ^ 0x55;
        let mut t = ((a & 0x0F) as i32) << 4;
        let seg = ((a & 0x70) >> 4) as i32;
        t = match seg {
            0 => t + 8,
            1 => t + 0x108,
            _ => (t + 0x108) << (seg - 1),
        };
        (if a & 0x80 != 0 { t } else { -t }) as i16
    }

    impl Codec for NaiveG711 {
        fn encoding_name(&self) -> &'static str {
            if self.alaw {
                "PCMA"
            } else {
                "PCMU"
            }
        }
        fn payload_type(&self) -> u8 {
            if self.alaw {
                8
            } else {
                0
            }
        }
        fn clock_rate(&self) -> u32 {
            8000
        }
        fn pcm_rate(&self) -> u32 {
            8000
        }
        fn to_pcm(&mut self, payload: &[u8], pcm: &mut Vec<i16>) -> Result<usize, Error> {
            if self.alaw {
                pcm.extend(payload.iter().map(|&c| alaw2lin(c)));
            } else {
                pcm.extend(payload.iter().map(|&c| ulaw2lin(c)));
            }
            Ok(payload.len())
        }
        fn from_pcm(&mut self, pcm: &[i16], out: &mut Vec<u8>) -> Result<usize, Error> {
            if self.alaw {
                out.extend(pcm.iter().map(|&s| lin2alaw(s)));
            } else {
                out.extend(pcm.iter().map(|&s| lin2ulaw(s)));
            }
            Ok(pcm.len())
        }
    }

    /// The `audio-codec` crate's PCMA or G.722.
    pub struct AudioCodec {
        name: &'static str,
        pt: u8,
        rate: u32,
        enc: Box<dyn audio_codec::Encoder>,
        dec: Box<dyn audio_codec::Decoder>,
    }

    impl AudioCodec {
        pub fn pcma() -> AudioCodec {
            AudioCodec {
                name: "PCMA",
                pt: 8,
                rate: 8000,
                enc: Box::new(audio_codec::pcma::PcmaEncoder::new()),
                dec: Box::new(audio_codec::pcma::PcmaDecoder::new()),
            }
        }
        pub fn g722() -> AudioCodec {
            AudioCodec {
                name: "G722",
                pt: 9,
                rate: 16_000,
                enc: Box::new(audio_codec::g722::G722Encoder::new()),
                dec: Box::new(audio_codec::g722::G722Decoder::new()),
            }
        }
    }

    impl Codec for AudioCodec {
        fn encoding_name(&self) -> &'static str {
            self.name
        }
        fn payload_type(&self) -> u8 {
            self.pt
        }
        fn clock_rate(&self) -> u32 {
            8000
        }
        fn pcm_rate(&self) -> u32 {
            self.rate
        }
        fn to_pcm(&mut self, payload: &[u8], pcm: &mut Vec<i16>) -> Result<usize, Error> {
            let start = pcm.len();
            pcm.resize(start + self.dec.max_decode_samples(payload.len()), 0);
            match self.dec.decode_into(payload, &mut pcm[start..]) {
                Ok(n) => {
                    pcm.truncate(start + n);
                    Ok(n)
                }
                Err(e) => {
                    pcm.truncate(start);
                    Err(Error::Decode(format!("{e:?}")))
                }
            }
        }
        fn from_pcm(&mut self, pcm: &[i16], out: &mut Vec<u8>) -> Result<usize, Error> {
            let start = out.len();
            out.resize(start + self.enc.max_encode_bytes(pcm.len()), 0);
            match self.enc.encode_into(pcm, &mut out[start..]) {
                Ok(n) => {
                    out.truncate(start + n);
                    Ok(n)
                }
                Err(e) => {
                    out.truncate(start);
                    Err(Error::Encode(format!("{e:?}")))
                }
            }
        }
    }

    /// The AMR libraries called directly (`secrelay_amr`), in their default modes: storage
    /// frames in and out, no RTP payload format of ours in between.
    pub struct AmrDirect {
        band: Band,
        nb: Option<(secrelay_amr::NbEncoder, secrelay_amr::NbDecoder)>,
        wb: Option<(secrelay_amr::WbEncoder, secrelay_amr::WbDecoder)>,
    }

    impl AmrDirect {
        pub fn new(band: Band) -> AmrDirect {
            let lib = "the AMR libraries load (checked before)";
            let (nb, wb) = match band {
                Band::Narrow => (
                    Some((
                        secrelay_amr::NbEncoder::new(false).expect(lib),
                        secrelay_amr::NbDecoder::new().expect(lib),
                    )),
                    None,
                ),
                Band::Wide => (
                    None,
                    Some((
                        secrelay_amr::WbEncoder::new(false).expect(lib),
                        secrelay_amr::WbDecoder::new().expect(lib),
                    )),
                ),
            };
            AmrDirect { band, nb, wb }
        }
    }

    impl Codec for AmrDirect {
        fn encoding_name(&self) -> &'static str {
            self.band.encoding_name()
        }
        fn payload_type(&self) -> u8 {
            96
        }
        fn clock_rate(&self) -> u32 {
            self.band.rate()
        }
        fn pcm_rate(&self) -> u32 {
            self.band.rate()
        }
        fn to_pcm(&mut self, payload: &[u8], pcm: &mut Vec<i16>) -> Result<usize, Error> {
            if let Some((_, dec)) = &mut self.nb {
                let mut out = [0i16; secrelay_amr::NB_SAMPLES];
                dec.decode(Some(payload), &mut out);
                pcm.extend_from_slice(&out);
            } else if let Some((_, dec)) = &mut self.wb {
                let mut out = [0i16; secrelay_amr::WB_SAMPLES];
                dec.decode(Some(payload), &mut out);
                pcm.extend_from_slice(&out);
            }
            Ok(self.band.frame_samples())
        }
        fn from_pcm(&mut self, pcm: &[i16], out: &mut Vec<u8>) -> Result<usize, Error> {
            let wrong = || Error::Encode(format!("{} samples is not one frame", pcm.len()));
            let n = if let Some((enc, _)) = &mut self.nb {
                let mut frame = [0u8; secrelay_amr::NB_MAX_FRAME];
                let n = enc.encode(7, pcm.try_into().map_err(|_| wrong())?, &mut frame);
                out.extend_from_slice(&frame[..n]);
                n
            } else if let Some((enc, _)) = &mut self.wb {
                let mut frame = [0u8; secrelay_amr::WB_MAX_FRAME];
                let n = enc.encode(3, pcm.try_into().map_err(|_| wrong())?, &mut frame);
                out.extend_from_slice(&frame[..n]);
                n
            } else {
                0
            };
            Ok(n)
        }
    }

    /// libopus through the `opus` crate directly: no `Codec` layer of ours in between.
    pub struct LibOpus {
        enc: opus::Encoder,
        dec: opus::Decoder,
        rate: u32,
        channels: u8,
        scratch: Vec<i16>,
    }

    impl LibOpus {
        pub fn new(rate: u32, channels: u8, bitrate: i32, complexity: i32) -> LibOpus {
            let ch = if channels == 2 {
                opus::Channels::Stereo
            } else {
                opus::Channels::Mono
            };
            let mut enc =
                opus::Encoder::new(rate, ch, opus::Application::Voip).expect("libopus encoder");
            enc.set_bitrate(opus::Bitrate::Bits(bitrate))
                .expect("bitrate");
            enc.set_complexity(complexity).expect("complexity");
            LibOpus {
                enc,
                dec: opus::Decoder::new(rate, ch).expect("libopus decoder"),
                rate,
                channels,
                scratch: vec![0; 5760 * 2],
            }
        }
    }

    impl Codec for LibOpus {
        fn encoding_name(&self) -> &'static str {
            "opus"
        }
        fn payload_type(&self) -> u8 {
            111
        }
        fn clock_rate(&self) -> u32 {
            48_000
        }
        fn pcm_rate(&self) -> u32 {
            self.rate
        }
        fn channels(&self) -> u8 {
            self.channels
        }
        fn to_pcm(&mut self, payload: &[u8], pcm: &mut Vec<i16>) -> Result<usize, Error> {
            let n = self
                .dec
                .decode(payload, &mut self.scratch, false)
                .map_err(|e| Error::Decode(e.to_string()))?
                * self.channels as usize;
            pcm.extend_from_slice(&self.scratch[..n]);
            Ok(n)
        }
        fn from_pcm(&mut self, pcm: &[i16], out: &mut Vec<u8>) -> Result<usize, Error> {
            let start = out.len();
            out.resize(start + 1500, 0);
            let n = self
                .enc
                .encode(pcm, &mut out[start..])
                .map_err(|e| Error::Encode(e.to_string()))?;
            out.truncate(start + n);
            Ok(n)
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;
        use secrelay_media::g711;

        #[test]
        fn textbook_g711_agrees_with_ours() {
            for c in 0..=255u8 {
                assert_eq!(ulaw2lin(c), g711::ulaw_decode(c), "μ-law {c:#04x}");
                assert_eq!(alaw2lin(c), g711::alaw_decode(c), "A-law {c:#04x}");
            }
            for x in (i16::MIN..=i16::MAX).step_by(7) {
                // Sun's code truncates negatives in two's complement for μ-law; G.711's
                // one's complement can differ by one step there.
                let (a, b) = (lin2ulaw(x), g711::ulaw_encode(x));
                assert!(a == b || x < 0, "μ-law {x}: {a:#04x} vs {b:#04x}");
                assert_eq!(lin2alaw(x), g711::alaw_encode(x), "A-law {x}");
            }
        }

        #[test]
        fn audio_codec_g722_decodes_ours() {
            // Different reset states, same algorithm: after the start-up the two agree closely.
            let pcm = secrelay_media::tone::sine(16_000, 800.0, 8000.0, 16_000);
            let mut ours = G722::new();
            let mut coded = Vec::new();
            ours.from_pcm(&pcm, &mut coded).unwrap();
            let mut theirs = AudioCodec::g722();
            let mut back = Vec::new();
            theirs.to_pcm(&coded, &mut back).unwrap();
            assert_eq!(back.len(), pcm.len());
            assert!(secrelay_media::tone::sinad_db(&back[1600..], 16_000, 800.0) > 30.0);
        }
    }
}
