//! Transcoding in a room, sans-IO: a sender's audio stream decoded **once**, and encoded
//! **once per distinct receiving format** (codec and packet time), whatever the number of
//! receivers of that format; each receiver then gets its own copy of the shared payload with its
//! own SSRC, numbering and SRTP protection, as relayed copies do ([`crate::room`]).
//!
//! State is made when a receiver first needs it and freed when the sender leaves or no
//! receiver needs a format any more ([`Transcoding::remove_source`], [`Transcoding::retain`]).
//! The codecs come from `secrelay_media`'s [`Registry`]; what the decoder does with losses,
//! late packets and talkspurts ([`StreamDecoder`]: concealment, Opus FEC, discontinuities) and
//! how the encoder frames and numbers its packets ([`StreamEncoder`]) is documented there.
//! Telephone-events (RFC 4733) of a transcoded stream are carried onto each output's timeline,
//! their durations scaled to its clock, numbered in its sequence ([`Transcoding::event`]).
//!
//! # DTMF between the two kinds of phone
//! A receiver that takes no telephone-events, sent a stream whose sender sends them, gets them
//! as tones in its audio ([`Dtmf::Tones`]): each event packet renders the tones up to the
//! event's duration so far, in place of the sender's audio while the event lasts. A receiver
//! that takes them, sent a stream whose sender negotiated none, gets the digits heard in the
//! sender's audio ([`Dtmf::Detect`], `secrelay_media::inband`) as telephone-events in place of
//! the audio while a digit lasts: a first packet with the marker bit, one per packet time with
//! the duration so far, the end packet three times (RFC 4733 §2.5.1.4), then audio again.
//!
//! # Comfort noise between the two kinds of phone
//! A receiver that took no comfort noise (RFC 3389 `CN`), sent a stream whose sender sends it,
//! gets each comfort-noise packet as white noise at the packet's level in its own codec
//! ([`Cn::Noise`], `secrelay_media::cn`): as long as the sender's last audio packet, one packet
//! of the receiver's packet time when the two are the same, at the comfort-noise packet's
//! place on the timeline. A receiver that took it, sent a stream whose sender negotiated none,
//! gets a comfort-noise packet (level −32 dBov, payload `0x20`, as rtpengine sends) in place of
//! each packet of audio that decoded to digital silence ([`Cn::Detect`]), in the same
//! sequence and on the same timeline: every silent packet, not only the first of a silence,
//! so the receiver keeps a steady stream (its media timeout and jitter buffer see no gap) and
//! the bytes saved are most of them anyway. Where both sides have comfort noise, its packets
//! go on as comfort noise, re-timed onto the output ([`Cn::Pass`]). A comfort-noise packet
//! holds the sender's timeline whatever becomes of it (`StreamDecoder::push_filler`): the
//! audio after it is not concealed for the time it stood for.

use std::collections::HashMap;

use secrelay_media::cn::{self, NoiseSynth};
use secrelay_media::dtmf;
use secrelay_media::inband::{Detector, Heard, ToneSynth};
use secrelay_media::transcode::{Decoded, InPacket, OutPacket, StreamDecoder, StreamEncoder};
use secrelay_media::{Codec, Registry};

use crate::leg::{CodecId, NegotiatedMedia};
use crate::room::MemberId;

/// Packet times a transcoded stream can be sent in, ms.
pub const PTIMES: [u32; 5] = [10, 20, 30, 40, 60];

/// Payload type of a made telephone-event packet in [`Transcoding::ready`]: outside RTP's
/// seven bits, so never an audio codec's; each copy gets its receiver's own.
pub const EVENT_PT: u8 = 0x80;

/// Payload type of a made comfort-noise packet in [`Transcoding::ready`], as [`EVENT_PT`]:
/// each copy gets its receiver's own.
pub const CN_PT: u8 = 0x81;

/// What a receiver is sent a transcoded (or mixed) stream in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Format {
    /// The audio codec.
    pub codec: CodecId,
    /// The packet time, ms (one of [`PTIMES`]).
    pub ptime: u32,
    /// What becomes of DTMF on the way.
    pub dtmf: Dtmf,
    /// What becomes of comfort noise and silence on the way.
    pub cn: Cn,
    /// The AMR mode to encode in, when the codec is AMR and the receiver's `mode-set` (or
    /// the leg's configured bitrate) says one ([`NegotiatedMedia::amr_mode`]); `None`: the
    /// encoder's default.
    pub amr_mode: Option<u8>,
}

/// What becomes of DTMF between a sender and a receiver of transcoded audio (see the
/// [module documentation](self#dtmf-between-the-two-kinds-of-phone)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Dtmf {
    /// Telephone-events go on as telephone-events (or nowhere, to a receiver without them).
    #[default]
    Events,
    /// The sender's telephone-events become tones in the receiver's audio.
    Tones,
    /// Digits heard in the sender's audio become telephone-events for the receiver.
    Detect,
}

/// What becomes of comfort noise between a sender and a receiver of transcoded audio (see the
/// [module documentation](self#comfort-noise-between-the-two-kinds-of-phone)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Cn {
    /// Comfort-noise packets go on as comfort noise (or nowhere, to a receiver without it);
    /// silence stays audio.
    #[default]
    Pass,
    /// The sender's comfort-noise packets become noise in the receiver's audio.
    Noise,
    /// Audio that decoded to digital silence becomes comfort-noise packets for the receiver.
    Detect,
}

impl Format {
    /// The format a receiver whose sections are `media` is sent transcoded audio in: the first
    /// codec the gateway can encode of its first receiving audio section (the order the
    /// section negotiated), in the packet time it asked for (`a=ptime`; 20 ms when it did not
    /// say or asked for one we cannot send). `None` when it receives no such codec.
    pub fn for_receiver(media: &[NegotiatedMedia]) -> Option<Format> {
        media.iter().filter(|m| m.peer_receives).find_map(|m| {
            let codec = m
                .codecs
                .iter()
                .map(|(c, _)| *c)
                .find(|c| c.is_transcodable())?;
            let ptime = ptime_for(codec, m.ptime.unwrap_or(20));
            Some(Format {
                codec,
                ptime,
                dtmf: Dtmf::Events,
                cn: Cn::Pass,
                amr_mode: m.amr_mode.filter(|_| codec.is_amr()),
            })
        })
    }
}

/// The packet time `codec` is sent in when `asked` is: `asked` when the codec can send it
/// (one of [`PTIMES`]; AMR's frames are 20 ms, so 20, 40 or 60), else 20 ms.
pub fn ptime_for(codec: CodecId, asked: u32) -> u32 {
    let fits = PTIMES.contains(&asked) && (!codec.is_amr() || asked.is_multiple_of(20));
    if fits {
        asked
    } else {
        20
    }
}

/// A new codec instance of `id` from the registry (Opus with in-band FEC, as we offer it;
/// AMR in its payload format, its encoder in `amr_mode` when given).
pub fn make_codec(
    registry: &Registry,
    id: CodecId,
    amr_mode: Option<u8>,
) -> Result<Box<dyn Codec>, secrelay_media::Error> {
    let fmtp = match id {
        CodecId::Opus => Some("useinbandfec=1".to_owned()),
        _ if id.is_amr() => {
            let octet = if id.is_octet_aligned() { "1" } else { "0" };
            Some(match amr_mode {
                Some(m) => format!("octet-align={octet};mode-set={m}"),
                None => format!("octet-align={octet}"),
            })
        }
        _ => None,
    };
    let channels = if id == CodecId::Opus { 2 } else { 1 };
    registry.make_by_name(id.name(), id.clock_rate(), channels, fmtp.as_deref())
}

/// A random 16-bit start for an output's sequence numbers, 32-bit for its timestamps.
fn random_start() -> (u16, u32) {
    let mut b = [0u8; 6];
    getrandom::fill(&mut b).expect("the OS random source works");
    (
        u16::from_be_bytes([b[0], b[1]]),
        u32::from_be_bytes([b[2], b[3], b[4], b[5]]),
    )
}

/// One encoded output of a source stream.
struct Output {
    format: Format,
    encoder: StreamEncoder,
    /// (input timestamp, output timestamp) of one instant, to place telephone-events on the
    /// output's timeline; set at the first packet and again after each discontinuity.
    anchor: Option<(u32, u32)>,
    /// What the last input made, for the receivers of this format.
    ready: Vec<OutPacket>,
    /// [`Dtmf::Tones`]: the event being rendered (or the last, ended, whose end packets
    /// repeat), and the synthesizer.
    tone: Option<ToneEvent>,
    synth: ToneSynth,
    /// [`Dtmf::Tones`]: input clock ticks of tones rendered since the last audio, which a gap
    /// in the sender's audio (it sent events instead) already covers.
    toned: u32,
    /// [`Dtmf::Detect`]: the digit being sent as telephone-events.
    sending: Option<SentEvent>,
    /// [`Cn::Noise`]: the noise comfort-noise packets become.
    noise: NoiseSynth,
    /// [`Cn::Detect`]: samples (at the PCM rate) of digital silence at the end of what the
    /// encoder was given, and whether the last packet sent was comfort noise.
    silent_run: usize,
    in_cn: bool,
}

impl Output {
    /// Before an input's PCM: a discontinuity `d` reports is reproduced on the output's
    /// timeline (less what tones already filled), and the anchor set from the input stamped
    /// `ts` when there is none.
    fn follow_gap(&mut self, d: &Decoded, in_clock: u32, ts: u32) -> Result<(), TranscodeError> {
        // Tones rendered while the sender sent events instead of audio filled its gap.
        let gap = d
            .gap_ticks
            .map(|g| g.saturating_sub(std::mem::take(&mut self.toned)))
            .filter(|&g| g > 0);
        self.toned = 0;
        if let Some(gap) = gap {
            let gap_ms = (u64::from(gap) * 1000 / u64::from(in_clock)) as u32;
            self.encoder
                .discontinuity(gap_ms, &mut self.ready)
                .map_err(|e| TranscodeError::Codec(e.to_string()))?;
            self.anchor = None;
        }
        if self.anchor.is_none() {
            self.anchor = Some((ts, self.encoder.next_timestamp()));
        }
        Ok(())
    }

    /// [`Cn::Detect`]: the audio packets just made from `pcm` (at `pcm_rate`) become
    /// comfort-noise packets where all the audio in them was digital silence
    /// (`secrelay_media::cn::is_silent`); the first audio packet after them has the marker
    /// bit (a talkspurt begins, RFC 3551 §4.1). Which audio a packet held is told from the end
    /// of `pcm`: the last packet made holds its last packet time, the one before the packet
    /// time before that.
    fn silence_to_cn(&mut self, pcm: &[i16], pcm_rate: u32) {
        if pcm.is_empty() {
            return;
        }
        if cn::is_silent(pcm) {
            self.silent_run = self.silent_run.saturating_add(pcm.len());
        } else {
            self.silent_run = pcm
                .iter()
                .rev()
                .take_while(|s| s.unsigned_abs() <= cn::SILENCE)
                .count();
        }
        let frame = (u64::from(self.format.ptime) * u64::from(pcm_rate) / 1000).max(1) as usize;
        let n = self.ready.len();
        for (j, p) in self.ready.iter_mut().enumerate() {
            if p.payload_type == EVENT_PT {
                continue;
            }
            if self.silent_run >= (n - j).saturating_mul(frame) {
                p.payload.clear();
                cn::write(cn::DEFAULT_LEVEL, &mut p.payload);
                p.payload_type = CN_PT;
                p.marker = false;
                self.in_cn = true;
            } else if std::mem::take(&mut self.in_cn) {
                p.marker = true;
            }
        }
    }

    /// [`Dtmf::Tones`]: whether the sender's audio is left out now (an event is being
    /// rendered in its place). One more audio packet counts towards ending tones whose end
    /// packets were lost.
    fn toning(&mut self) -> bool {
        let Some(t) = self.tone.as_mut().filter(|t| !t.ended) else {
            return false;
        };
        t.audio_since = t.audio_since.saturating_add(1);
        if t.audio_since > TONE_LOST_END {
            t.ended = true;
            self.synth.stop();
            return false;
        }
        true
    }

    /// [`Dtmf::Tones`]: renders event `ev` (of the event packet stamped `timestamp`) up to its
    /// duration so far. `clocks`: the event's clock, the sender's audio clock, the PCM rate.
    fn render_tones(
        &mut self,
        timestamp: u32,
        ev: &dtmf::Event,
        (event_clock, audio_clock, pcm_rate): (u32, u32, u32),
        pcm: &mut Vec<i16>,
    ) -> Result<(), TranscodeError> {
        let mut t = match self.tone {
            Some(t) if t.timestamp == timestamp => t,
            _ => {
                self.synth.stop();
                ToneEvent {
                    timestamp,
                    done: 0,
                    ended: false,
                    audio_since: 0,
                }
            }
        };
        t.audio_since = 0;
        let want = u32::from(ev.duration);
        if !t.ended && want > t.done {
            // At most TONE_STEP_MS of tones per event packet (a sender's packets come every
            // 50 ms or so): a forged duration of seconds would otherwise cost hundreds of
            // encodes for one packet. A sender that jumps ahead is followed that fast.
            let step = u64::from(event_clock) * TONE_STEP_MS / 1000;
            let add = u64::from(want - t.done).min(step.max(1));
            let samples = add * u64::from(pcm_rate) / u64::from(event_clock.max(1));
            pcm.clear();
            self.synth
                .render(ev.event, ev.volume, samples as usize, pcm);
            self.encoder
                .push_pcm(pcm, &mut self.ready)
                .map_err(|e| TranscodeError::Codec(e.to_string()))?;
            let ticks = add * u64::from(audio_clock) / u64::from(event_clock.max(1));
            self.toned = self.toned.saturating_add(ticks as u32);
            t.done += add as u32;
        }
        if ev.end && !t.ended {
            t.ended = true;
            self.synth.stop();
        }
        self.tone = Some(t);
        Ok(())
    }

    /// [`Dtmf::Detect`]: the audio packets just made become telephone-event packets while a
    /// digit is `heard`; the first made after it ends becomes the digit's three end packets.
    /// Renumbered so that the stream's sequence stays unbroken.
    fn digits_to_events(&mut self, heard: Option<Heard>) {
        if self.ready.is_empty() || (heard.is_none() && self.sending.is_none()) {
            return;
        }
        let ticks = self.format.ptime * self.format.codec.clock_rate() / 1000;
        let made = std::mem::take(&mut self.ready);
        let (first_seq, made_len) = (made[0].seq, made.len());
        let mut out = Vec::with_capacity(made_len + 3);
        for p in made {
            match (heard, self.sending) {
                (Some(h), Some(mut e)) if e.heard.event == h.event => {
                    e.duration = p.timestamp.wrapping_sub(e.timestamp).wrapping_add(ticks);
                    out.push(e.packet(false, false));
                    self.sending = Some(e);
                }
                (Some(h), before) => {
                    if let Some(e) = before {
                        out.extend(std::iter::repeat_n(e.packet(false, true), 3));
                    }
                    let e = SentEvent {
                        heard: h,
                        timestamp: p.timestamp,
                        duration: ticks,
                    };
                    out.push(e.packet(true, false));
                    self.sending = Some(e);
                }
                (None, Some(e)) => {
                    out.extend(std::iter::repeat_n(e.packet(false, true), 3));
                    self.sending = None;
                }
                (None, None) => out.push(p),
            }
        }
        for _ in made_len..out.len() {
            self.encoder.take_seq();
        }
        for (k, p) in out.iter_mut().enumerate() {
            p.seq = first_seq.wrapping_add(k as u16);
        }
        self.ready = out;
    }
}

impl SentEvent {
    /// One of its telephone-event packets (sequence number set by the caller).
    fn packet(&self, marker: bool, end: bool) -> OutPacket {
        let ev = dtmf::Event {
            event: self.heard.event,
            end,
            volume: self.heard.volume,
            duration: self.duration.min(u32::from(u16::MAX)) as u16,
        };
        OutPacket {
            seq: 0,
            timestamp: self.timestamp,
            marker,
            payload_type: EVENT_PT,
            payload: ev.to_bytes().to_vec(),
        }
    }
}

/// An event of the sender's being rendered as tones.
#[derive(Debug, Clone, Copy)]
struct ToneEvent {
    /// Its RTP timestamp (its start), which tells it from the next.
    timestamp: u32,
    /// How much of it the tones cover, in its clock's ticks.
    done: u32,
    ended: bool,
    /// Audio packets since its last event packet: a sender's end packets can all be lost, and
    /// its audio going on for [`TONE_LOST_END`] packets ends the tones.
    audio_since: u8,
}

/// Audio packets after the last event packet that end tones whose end packets were lost.
const TONE_LOST_END: u8 = 10;

/// The most tones one event packet renders, ms.
const TONE_STEP_MS: u64 = 200;

/// A digit heard, sent as telephone-events on an output.
#[derive(Debug, Clone, Copy)]
struct SentEvent {
    heard: Heard,
    /// The event's timestamp (its first packet's) and duration so far, output clock ticks.
    timestamp: u32,
    duration: u32,
}

/// One sender's audio stream being transcoded.
struct SourceStream {
    source: MemberId,
    ssrc: u32,
    codec: CodecId,
    decoder: StreamDecoder,
    outputs: Vec<Output>,
    /// Listens for digits in the decoded audio while an output is [`Dtmf::Detect`].
    detector: Option<Detector>,
}

/// What one input did, for the counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Work {
    /// Packets decoded (0 or 1).
    pub decoded: u64,
    /// Packets encoded, all formats together.
    pub encoded: u64,
}

/// Why an input made nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TranscodeError {
    /// The payload did not decode (malformed or truncated: the sender's fault).
    Undecodable(String),
    /// A codec could not be set up, or failed to encode (ours).
    Codec(String),
}

/// The transcoding state of one room. See the [module documentation](self).
pub struct Transcoding {
    registry: Registry,
    streams: Vec<SourceStream>,
    /// A packet's decoded samples: empty until the room first transcodes (most rooms never
    /// do), then as large as the largest packet's.
    pcm: Vec<i16>,
}

impl std::fmt::Debug for Transcoding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transcoding")
            .field("streams", &self.streams.len())
            .finish_non_exhaustive()
    }
}

impl Default for Transcoding {
    fn default() -> Self {
        Transcoding::new(Registry::standard())
    }
}

impl Transcoding {
    /// No streams yet; codecs made from `registry`.
    pub fn new(registry: Registry) -> Transcoding {
        Transcoding {
            registry,
            streams: Vec::new(),
            pcm: Vec::new(),
        }
    }

    /// The registry codecs are made from.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Source streams being transcoded now.
    pub fn streams(&self) -> usize {
        self.streams.len()
    }

    /// Encoders running now, all streams together.
    pub fn encoders(&self) -> usize {
        self.streams.iter().map(|s| s.outputs.len()).sum()
    }

    /// The audio codec of `source`'s stream `ssrc`, while it is transcoded.
    pub fn stream_codec(&self, source: MemberId, ssrc: u32) -> Option<CodecId> {
        self.streams
            .iter()
            .find(|s| s.source == source && s.ssrc == ssrc)
            .map(|s| s.codec)
    }

    fn stream(
        &mut self,
        source: MemberId,
        ssrc: u32,
        codec: CodecId,
    ) -> Result<usize, TranscodeError> {
        let setup = |e: secrelay_media::Error| TranscodeError::Codec(e.to_string());
        match self
            .streams
            .iter()
            .position(|s| s.source == source && s.ssrc == ssrc)
        {
            Some(k) if self.streams[k].codec == codec => Ok(k),
            Some(k) => {
                // The sender changed codec: a new decoder; the outputs keep their numbering.
                let c = make_codec(&self.registry, codec, None).map_err(setup)?;
                let rate = c.pcm_rate();
                let s = &mut self.streams[k];
                s.decoder = StreamDecoder::new(c, rate).map_err(setup)?;
                s.codec = codec;
                for o in &mut s.outputs {
                    o.anchor = None;
                }
                Ok(k)
            }
            None => {
                let c = make_codec(&self.registry, codec, None).map_err(setup)?;
                let rate = c.pcm_rate();
                self.streams.push(SourceStream {
                    source,
                    ssrc,
                    codec,
                    decoder: StreamDecoder::new(c, rate).map_err(setup)?,
                    outputs: Vec::new(),
                    detector: None,
                });
                Ok(self.streams.len() - 1)
            }
        }
    }

    fn output(&mut self, k: usize, format: Format) -> Result<usize, TranscodeError> {
        let s = &mut self.streams[k];
        if let Some(o) = s.outputs.iter().position(|o| o.format == format) {
            return Ok(o);
        }
        let setup = |e: secrelay_media::Error| TranscodeError::Codec(e.to_string());
        let c = make_codec(&self.registry, format.codec, format.amr_mode).map_err(setup)?;
        let (seq, ts) = random_start();
        let encoder =
            StreamEncoder::new(c, s.decoder.out_rate(), format.ptime, seq, ts).map_err(setup)?;
        s.outputs.push(Output {
            format,
            encoder,
            anchor: None,
            ready: Vec::new(),
            tone: None,
            synth: ToneSynth::new(s.decoder.out_rate()),
            toned: 0,
            sending: None,
            noise: NoiseSynth::new(u32::from(seq) << 16 ^ ts),
            silent_run: 0,
            in_cn: false,
        });
        Ok(s.outputs.len() - 1)
    }

    /// One audio packet of `source`'s stream `ssrc` in `codec`: decoded once, and encoded for
    /// each of `formats` (made if new). What each format's encoder completed is then in
    /// [`Transcoding::ready`]. Late and duplicate packets make nothing.
    pub fn audio(
        &mut self,
        source: MemberId,
        ssrc: u32,
        codec: CodecId,
        pkt: &InPacket<'_>,
        formats: &[Format],
    ) -> Result<Work, TranscodeError> {
        let k = self.stream(source, ssrc, codec)?;
        for f in formats {
            self.output(k, *f)?;
        }
        let Transcoding { streams, pcm, .. } = self;
        let s = &mut streams[k];
        for o in &mut s.outputs {
            o.ready.clear();
        }
        pcm.clear();
        let d = s
            .decoder
            .push(pkt, pcm)
            .map_err(|e| TranscodeError::Undecodable(e.to_string()))?;
        let mut work = Work::default();
        if d.late {
            return Ok(work);
        }
        work.decoded = 1;
        let in_clock = s.codec.clock_rate();
        let detect = formats.iter().any(|f| f.dtmf == Dtmf::Detect);
        let heard = match (detect, &mut s.detector) {
            (false, _) => None,
            (true, Some(det)) => det.push(pcm),
            (true, det) => det.insert(Detector::new(s.decoder.out_rate())).push(pcm),
        };
        let pcm_rate = s.decoder.out_rate();
        for o in s.outputs.iter_mut().filter(|o| formats.contains(&o.format)) {
            if o.toning() {
                continue;
            }
            o.follow_gap(&d, in_clock, pkt.timestamp)?;
            o.encoder
                .push_pcm(pcm, &mut o.ready)
                .map_err(|e| TranscodeError::Codec(e.to_string()))?;
            if o.format.cn == Cn::Detect {
                o.silence_to_cn(pcm, pcm_rate);
            }
            if o.format.dtmf == Dtmf::Detect {
                o.digits_to_events(heard);
            }
            work.encoded += o.ready.len() as u64;
        }
        Ok(work)
    }

    /// One telephone-event packet of `source`'s transcoded stream `ssrc` (received at the
    /// clock of `event`): re-timed onto each of `formats`' outputs, its durations scaled to the
    /// output's clock, numbered in the output's sequence; then in [`Transcoding::ready`] (with
    /// payload type [`EVENT_PT`]: the receiver's own is set per copy). A [`Dtmf::Tones`] output
    /// gets the event's tones as audio instead. An output that does not exist yet (no audio
    /// went through it) gets nothing. Err: the payload is not telephone-events.
    pub fn event(
        &mut self,
        source: MemberId,
        ssrc: u32,
        event: CodecId,
        pkt: &InPacket<'_>,
        formats: &[Format],
    ) -> Result<(), TranscodeError> {
        let events =
            dtmf::parse(pkt.payload).map_err(|e| TranscodeError::Undecodable(e.to_string()))?;
        let Transcoding { streams, pcm, .. } = self;
        let Some(s) = streams
            .iter_mut()
            .find(|s| s.source == source && s.ssrc == ssrc)
        else {
            return Ok(());
        };
        let in_clock = event.clock_rate();
        let audio_clock = s.codec.clock_rate();
        let pcm_rate = s.decoder.out_rate();
        for o in s.outputs.iter_mut() {
            o.ready.clear();
            if !formats.contains(&o.format) {
                continue;
            }
            if o.format.dtmf == Dtmf::Tones {
                // The last block is the event now (earlier ones repeat past events).
                if let Some(ev) = events.last() {
                    let clocks = (in_clock, audio_clock, pcm_rate);
                    o.render_tones(pkt.timestamp, ev, clocks, pcm)?;
                }
                continue;
            }
            let out_clock = o.format.codec.clock_rate();
            let anchor = *o
                .anchor
                .get_or_insert((pkt.timestamp, o.encoder.next_timestamp()));
            // The event's timestamp is on the audio's clock (RFC 4733 §2.3.1); the anchor
            // maps the audio's timeline onto the output's.
            let d = i64::from(pkt.timestamp.wrapping_sub(anchor.0) as i32);
            let ts = anchor
                .1
                .wrapping_add((d * i64::from(out_clock) / i64::from(audio_clock)) as i32 as u32);
            let mut payload = Vec::with_capacity(pkt.payload.len());
            for ev in &events {
                let scaled = (u64::from(ev.duration) * u64::from(out_clock) / u64::from(in_clock))
                    .min(u64::from(u16::MAX)) as u16;
                payload.extend_from_slice(
                    &dtmf::Event {
                        duration: scaled,
                        ..*ev
                    }
                    .to_bytes(),
                );
            }
            o.ready.push(OutPacket {
                seq: o.encoder.take_seq(),
                timestamp: ts,
                marker: pkt.marker,
                payload_type: EVENT_PT,
                payload,
            });
        }
        Ok(())
    }

    /// One comfort-noise packet (RFC 3389) of `source`'s transcoded stream `ssrc`: it holds the
    /// stream's timeline for as long as the sender's last audio packet
    /// (`StreamDecoder::push_filler`), and each of `formats`' outputs gets that time as noise
    /// at the packet's level ([`Cn::Noise`]) or the packet itself on its own timeline, with
    /// payload type [`CN_PT`] (the receiver's own is set per copy); then in
    /// [`Transcoding::ready`]. A stream with no audio through the transcoder yet gets nothing;
    /// so does a late or duplicate packet. Err: the payload is not comfort noise (empty, or a
    /// level beyond 127).
    pub fn comfort_noise(
        &mut self,
        source: MemberId,
        ssrc: u32,
        pkt: &InPacket<'_>,
        formats: &[Format],
    ) -> Result<Work, TranscodeError> {
        let sid = cn::parse(pkt.payload).map_err(|e| TranscodeError::Undecodable(e.to_string()))?;
        let Transcoding { streams, pcm, .. } = self;
        let mut work = Work::default();
        let Some(s) = streams
            .iter_mut()
            .find(|s| s.source == source && s.ssrc == ssrc)
        else {
            return Ok(work);
        };
        for o in &mut s.outputs {
            o.ready.clear();
        }
        pcm.clear();
        let ticks = s.decoder.packet_ticks();
        let d = s
            .decoder
            .push_filler(pkt, ticks, pcm)
            .map_err(|e| TranscodeError::Undecodable(e.to_string()))?;
        if d.late {
            return Ok(work);
        }
        let in_clock = s.codec.clock_rate();
        let samples = u64::from(ticks) * u64::from(s.decoder.out_rate()) / u64::from(in_clock);
        let ms = u64::from(ticks) * 1000 / u64::from(in_clock);
        let mut noise = Vec::new();
        for o in s.outputs.iter_mut().filter(|o| formats.contains(&o.format)) {
            if o.toning() {
                continue;
            }
            o.follow_gap(&d, in_clock, pkt.timestamp)?;
            // What went missing before it, concealed.
            o.encoder.push_pcm(pcm, &mut o.ready).map_err(codec_error)?;
            if o.format.cn == Cn::Noise {
                noise.clear();
                o.noise.render(sid.level, samples as usize, &mut noise);
                o.encoder
                    .push_pcm(&noise, &mut o.ready)
                    .map_err(codec_error)?;
            } else {
                // The packet at the output's place for it, and the output's timeline past
                // the time it stands for (the audio after it starts a talkspurt).
                o.encoder
                    .discontinuity(0, &mut o.ready)
                    .map_err(codec_error)?;
                o.ready.push(OutPacket {
                    seq: o.encoder.take_seq(),
                    timestamp: o.encoder.next_timestamp(),
                    marker: false,
                    payload_type: CN_PT,
                    payload: pkt.payload.to_vec(),
                });
                o.encoder
                    .discontinuity(ms as u32, &mut o.ready)
                    .map_err(codec_error)?;
            }
            work.encoded += o.ready.len() as u64;
        }
        Ok(work)
    }

    /// What the last [`Transcoding::audio`] or [`Transcoding::event`] made for `format` of
    /// `source`'s stream `ssrc`.
    pub fn ready(&self, source: MemberId, ssrc: u32, format: Format) -> &[OutPacket] {
        self.streams
            .iter()
            .find(|s| s.source == source && s.ssrc == ssrc)
            .and_then(|s| s.outputs.iter().find(|o| o.format == format))
            .map_or(&[], |o| o.ready.as_slice())
    }

    /// Frees `source`'s stream `ssrc` (given up).
    pub fn remove_stream(&mut self, source: MemberId, ssrc: u32) {
        self.streams
            .retain(|s| s.source != source || s.ssrc != ssrc);
    }

    /// Frees every stream `source` sent (it left).
    pub fn remove_source(&mut self, source: MemberId) {
        self.streams.retain(|s| s.source != source);
    }

    /// Keeps the outputs `wanted(source, its codec, format)` says someone still receives, and
    /// the streams that keep an output.
    pub fn retain(&mut self, mut wanted: impl FnMut(MemberId, CodecId, Format) -> bool) {
        for s in &mut self.streams {
            let (source, codec) = (s.source, s.codec);
            s.outputs.retain(|o| wanted(source, codec, o.format));
        }
        self.streams.retain(|s| !s.outputs.is_empty());
    }
}

/// The rate a mixing room sums its audio at, Hz.
pub const MIX_RATE: u32 = 48_000;
/// How often a mixing room sends each member its mix (one frame of [`MIX_RATE`] samples).
pub const MIX_TICK: std::time::Duration = std::time::Duration::from_millis(20);
/// Samples in one tick's frame.
const MIX_FRAME: usize = (MIX_RATE / 50) as usize;
/// Most audio a member's input holds before its oldest is dropped (a sender that runs fast, or
/// a burst after a stall): bounds the delay the mix adds, ms.
const MIX_BACKLOG_MS: usize = 120;
/// A mixing room stops ticking when no member sent audio for this long.
const MIX_IDLE: std::time::Duration = std::time::Duration::from_secs(1);

/// A frame is speech, for talk detection, when its level (RMS, dB relative to a full-scale
/// square wave) reaches this, after smoothing ([`MIX_RELEASE_DB`]). Quieter members (silence,
/// background noise) are not summed into anyone's mix.
pub const MIX_TALK_DBOV: f32 = -50.0;
/// How fast a member's smoothed level falls once it stops talking, dB per tick: a talker
/// stays in the mix for about 400 ms after its level drops (the ends of words, short pauses),
/// and rises at once when it speaks.
pub const MIX_RELEASE_DB: f32 = 1.0;
/// With a limit on talkers, a member already mixed keeps its place against a newcomer unless
/// the newcomer is this much louder (no flapping between two talkers of one level), dB.
pub const MIX_HOLD_DB: f32 = 3.0;

/// How a room mixes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MixSettings {
    /// The most talkers summed at once, the loudest (0: every member who talks). Large
    /// conferences set a few: everyone who is not summed hears one shared mix, encoded once
    /// per format (see [`Mixing`]).
    pub speakers: u16,
}

/// One member's audio into the mix.
struct MixInput {
    member: MemberId,
    ssrc: u32,
    codec: CodecId,
    decoder: StreamDecoder,
    /// Decoded, not yet mixed, at [`MIX_RATE`].
    fifo: Vec<i16>,
    /// This tick's frame, when it had audio.
    frame: Vec<i16>,
    has_frame: bool,
    /// Smoothed level, dB (talk detection).
    level: f32,
    /// Summed in the last tick.
    talking: bool,
}

/// Whose mix an encoder makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MixKey {
    /// A talker's: everyone summed but itself.
    Own(MemberId),
    /// Everyone summed: what each member that is not summed hears.
    All,
}

/// One encoder of a mix, in one format.
struct MixEncoder {
    key: MixKey,
    format: Format,
    encoder: StreamEncoder,
    /// What it encoded in the current tick.
    packets: Vec<OutPacket>,
}

/// One receiving member's stream of mixes: its own numbering and timeline, whichever encoder
/// its packets come from from one tick to the next.
struct MixOutput {
    format: Format,
    seq: u16,
    ts: u32,
    /// RTP clock ticks per packet.
    ticks: u32,
    marker: bool,
    ready: Vec<MixReady>,
}

impl MixOutput {
    /// A receiver's new stream in `format`: random numbering, a marker on its first packet.
    fn new(format: Format) -> MixOutput {
        let (seq, ts) = random_start();
        MixOutput {
            format,
            seq,
            ts,
            ticks: format.codec.clock_rate() / 1000 * format.ptime,
            marker: true,
            ready: Vec::new(),
        }
    }
}

/// A packet of the last tick for one receiver: its numbering, and where its payload is (an
/// encoder's packet, shared by every receiver of that mix and format: not copied per receiver).
#[derive(Clone, Copy)]
struct MixReady {
    seq: u16,
    timestamp: u32,
    marker: bool,
    encoder: usize,
    packet: usize,
}

/// One packet of a receiver's mix ([`Mixing::ready`]): numbered on the receiver's own
/// timeline, its payload borrowed from the encoder that made it.
#[derive(Debug, Clone, Copy)]
pub struct MixPacket<'a> {
    /// Sequence number, on the receiver's stream.
    pub seq: u16,
    /// RTP timestamp, on the receiver's stream.
    pub timestamp: u32,
    /// Set on the stream's first packet.
    pub marker: bool,
    /// The encoded audio, as the encoder made it.
    pub payload: &'a [u8],
}

/// A mixing room's audio, sans-IO: each member's audio decoded once into its input; every
/// [`MIX_TICK`] one frame of each input goes into the N−1 mixer
/// (`secrelay_media::mixer::Mixer`).
///
/// Only members that talk are summed (talk detection: [`MIX_TALK_DBOV`] on a smoothed level),
/// and at most the loudest [`MixSettings::speakers`] of them when the room sets a limit. A
/// talker hears everyone summed but itself, encoded for it alone; every other member hears the
/// same sum of all talkers, so that mix is encoded **once per format** and shared. A tick then
/// costs one decode per sender, and one encode per talker and format instead of one per member.
/// Each receiver keeps its own sequence numbers and timeline as it moves between its own mix
/// and the shared one; an encoder not used in a tick is dropped, so a returning talker starts
/// from a fresh codec state rather than a stale one.
///
/// Time comes from the caller ([`Mixing::audio`]'s arrival instant, [`Mixing::next_tick`]); a
/// member with nothing buffered contributes silence.
pub struct Mixing {
    registry: Registry,
    settings: MixSettings,
    mixer: secrelay_media::mixer::Mixer<i16>,
    inputs: Vec<MixInput>,
    encoders: Vec<MixEncoder>,
    /// By receiving member: looked up once per receiver and tick.
    outputs: HashMap<MemberId, MixOutput>,
    next_tick: Option<std::time::Instant>,
    last_audio: Option<std::time::Instant>,
    pcm: Vec<i16>,
    order: Vec<usize>,
    /// Packets the last tick encoded, by the member each encode is counted at: a talker's own
    /// mix at the talker, a shared one at the first receiver of its format.
    charged: Vec<(MemberId, u64)>,
    /// Scratch of each tick, kept so that a tick allocates nothing once warm: the talkers,
    /// sorted; the encoders the receivers need.
    talker_ids: Vec<MemberId>,
    wanted: Vec<(MixKey, Format, MemberId)>,
}

impl std::fmt::Debug for Mixing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mixing")
            .field("settings", &self.settings)
            .field("inputs", &self.inputs.len())
            .field("encoders", &self.encoders.len())
            .field("outputs", &self.outputs.len())
            .field("next_tick", &self.next_tick)
            .finish_non_exhaustive()
    }
}

/// The level of a frame, dB relative to full scale (−100 for digital silence).
fn level_db(frame: &[i16]) -> f32 {
    if frame.is_empty() {
        return -100.0;
    }
    let energy: f64 = frame.iter().map(|&s| f64::from(s) * f64::from(s)).sum();
    let rms = (energy / frame.len() as f64).sqrt();
    if rms < 1e-3 {
        return -100.0;
    }
    (20.0 * (rms / 32768.0).log10()) as f32
}

impl Mixing {
    /// A mix with no members; codecs made from `registry`.
    pub fn new(registry: Registry, settings: MixSettings) -> Mixing {
        Mixing {
            registry,
            settings,
            mixer: secrelay_media::mixer::Mixer::new(MIX_FRAME)
                .expect("a 20 ms frame is not empty"),
            inputs: Vec::new(),
            encoders: Vec::new(),
            outputs: HashMap::new(),
            next_tick: None,
            last_audio: None,
            pcm: Vec::with_capacity(5760),
            order: Vec::new(),
            charged: Vec::new(),
            talker_ids: Vec::new(),
            wanted: Vec::new(),
        }
    }

    /// How the room mixes.
    pub fn settings(&self) -> MixSettings {
        self.settings
    }

    /// Changes how the room mixes (from the next tick).
    pub fn set_settings(&mut self, settings: MixSettings) {
        self.settings = settings;
    }

    /// Members whose audio is decoded into the mix now.
    pub fn inputs(&self) -> usize {
        self.inputs.len()
    }

    /// Members summed in the last tick (talking, and among the loudest when limited).
    pub fn talkers(&self) -> usize {
        self.inputs.iter().filter(|i| i.talking).count()
    }

    /// Encoders the last tick ran: one per talker and format it sent to, and one per format for
    /// everyone else.
    pub fn encoders(&self) -> usize {
        self.encoders.len()
    }

    /// When the next tick is due (none while nobody sends audio).
    pub fn next_tick(&self) -> Option<std::time::Instant> {
        self.next_tick
    }

    /// One audio packet from `member`'s stream `ssrc` in `codec`, arrived at `now`: decoded
    /// into its input (once). Starts the ticks if they were stopped.
    pub fn audio(
        &mut self,
        member: MemberId,
        ssrc: u32,
        codec: CodecId,
        pkt: &InPacket<'_>,
        now: std::time::Instant,
    ) -> Result<Work, TranscodeError> {
        let setup = |e: secrelay_media::Error| TranscodeError::Codec(e.to_string());
        let k = match self.inputs.iter().position(|m| m.member == member) {
            Some(k) if self.inputs[k].ssrc == ssrc && self.inputs[k].codec == codec => k,
            found => {
                // A new stream (or codec) from the member: a new decoder.
                let c = make_codec(&self.registry, codec, None).map_err(setup)?;
                let input = MixInput {
                    member,
                    ssrc,
                    codec,
                    decoder: StreamDecoder::new(c, MIX_RATE).map_err(setup)?,
                    fifo: Vec::with_capacity(MIX_FRAME * 8),
                    frame: vec![0; MIX_FRAME],
                    has_frame: false,
                    level: -100.0,
                    talking: false,
                };
                self.mixer.add(u64::from(member.0)).map_err(setup)?;
                match found {
                    Some(k) => {
                        self.inputs[k] = input;
                        k
                    }
                    None => {
                        self.inputs.push(input);
                        self.inputs.len() - 1
                    }
                }
            }
        };
        let input = &mut self.inputs[k];
        self.pcm.clear();
        let d = input
            .decoder
            .push(pkt, &mut self.pcm)
            .map_err(|e| TranscodeError::Undecodable(e.to_string()))?;
        if d.late {
            return Ok(Work::default());
        }
        input.fifo.extend_from_slice(&self.pcm);
        let max = MIX_RATE as usize / 1000 * MIX_BACKLOG_MS;
        if input.fifo.len() > max {
            let excess = input.fifo.len() - max;
            input.fifo.drain(..excess);
        }
        self.last_audio = Some(now);
        if self.next_tick.is_none() {
            self.next_tick = Some(now + MIX_TICK);
        }
        Ok(Work {
            decoded: 1,
            encoded: 0,
        })
    }

    /// Takes each input's frame for this tick, updates its level, and decides who is summed
    /// (`talking`).
    fn choose_talkers(&mut self) {
        for input in &mut self.inputs {
            input.has_frame = !input.fifo.is_empty();
            let mut level = input.level - MIX_RELEASE_DB;
            if input.has_frame {
                let n = input.fifo.len().min(MIX_FRAME);
                input.frame[..n].copy_from_slice(&input.fifo[..n]);
                input.frame[n..].fill(0);
                input.fifo.drain(..n);
                level = level.max(level_db(&input.frame));
            }
            input.level = level.max(-100.0);
        }
        self.order.clear();
        self.order.extend(
            (0..self.inputs.len())
                .filter(|&k| self.inputs[k].has_frame && self.inputs[k].level >= MIX_TALK_DBOV),
        );
        let limit = usize::from(self.settings.speakers);
        if limit > 0 && self.order.len() > limit {
            let inputs = &self.inputs;
            let rank = |k: usize| {
                let i = &inputs[k];
                i.level + if i.talking { MIX_HOLD_DB } else { 0.0 }
            };
            self.order.sort_by(|&a, &b| {
                rank(b)
                    .total_cmp(&rank(a))
                    .then(inputs[a].member.0.cmp(&inputs[b].member.0))
            });
            self.order.truncate(limit);
        }
        for input in &mut self.inputs {
            input.talking = false;
        }
        for &k in &self.order {
            self.inputs[k].talking = true;
        }
    }

    /// One tick, due at [`Mixing::next_tick`] (called at `now`, on or after it): a frame of
    /// every talker into the mixer, and the mix each of `receivers` (member and format) hears
    /// encoded (once per talker and format, once per format for the others); what each got is
    /// then in [`Mixing::ready`]. The next tick is one [`MIX_TICK`] later (none after
    /// [`MIX_IDLE`] without audio; ticks missed by more than a few frames are skipped, not made
    /// up). Packets encoded, all encoders together.
    pub fn tick(
        &mut self,
        now: std::time::Instant,
        receivers: &[(MemberId, Format)],
    ) -> Result<u64, TranscodeError> {
        let Some(due) = self.next_tick else {
            return Ok(0);
        };
        self.schedule_after(due, now);
        self.choose_talkers();
        self.mix(receivers)?;
        self.want(receivers);
        let encoded = self.encode_wanted()?;
        self.number_outputs(receivers);
        Ok(encoded)
    }

    /// The tick after the one `due` (a few missed ones are skipped, not caught up); none once
    /// no audio came for [`MIX_IDLE`].
    fn schedule_after(&mut self, due: std::time::Instant, now: std::time::Instant) {
        let mut next = due + MIX_TICK;
        if now.saturating_duration_since(due) > MIX_TICK * 5 {
            next = now + MIX_TICK;
        }
        self.next_tick = if self
            .last_audio
            .is_some_and(|t| now.saturating_duration_since(t) > MIX_IDLE)
        {
            None
        } else {
            Some(next)
        };
    }

    /// The talkers' frames summed, each receiver's mix without its own voice; the talkers
    /// noted, sorted ([`Mixing::mix_key`]).
    fn mix(&mut self, receivers: &[(MemberId, Format)]) -> Result<(), TranscodeError> {
        for input in self.inputs.iter().filter(|i| i.talking) {
            self.mixer
                .put(u64::from(input.member.0), &input.frame)
                .map_err(codec_error)?;
        }
        for (m, _) in receivers {
            self.mixer.add(u64::from(m.0)).map_err(codec_error)?;
        }
        self.mixer.mix();
        let talkers = &mut self.talker_ids;
        talkers.clear();
        talkers.extend(self.inputs.iter().filter(|i| i.talking).map(|i| i.member));
        talkers.sort_unstable_by_key(|m| m.0);
        Ok(())
    }

    /// The mix `m` hears: its own (the others' voices) when it talks, else the shared one.
    fn mix_key(&self, m: MemberId) -> MixKey {
        if self.talker_ids.binary_search_by_key(&m.0, |t| t.0).is_ok() {
            MixKey::Own(m)
        } else {
            MixKey::All
        }
    }

    /// The encoders this tick needs, a mix and a format each (for the shared mix, any member
    /// that is not summed hears it); the others are dropped (a returning talker, or the shared
    /// mix after a tick where everyone talked, starts from a fresh state).
    fn want(&mut self, receivers: &[(MemberId, Format)]) {
        let mut wanted = std::mem::take(&mut self.wanted);
        wanted.clear();
        for &(m, format) in receivers {
            let key = self.mix_key(m);
            if !wanted.iter().any(|&(k, f, _)| k == key && f == format) {
                wanted.push((key, format, m));
            }
        }
        self.encoders
            .retain(|e| wanted.iter().any(|&(k, f, _)| e.key == k && e.format == f));
        self.wanted = wanted;
    }

    /// Each wanted mix encoded once per format (an encoder made where there is none); the
    /// packets made, charged to the member whose mix it is.
    fn encode_wanted(&mut self) -> Result<u64, TranscodeError> {
        let mut encoded = 0;
        self.charged.clear();
        for w in 0..self.wanted.len() {
            let (key, format, pcm_of) = self.wanted[w];
            let k = match self
                .encoders
                .iter()
                .position(|e| e.key == key && e.format == format)
            {
                Some(k) => k,
                None => {
                    let c = make_codec(&self.registry, format.codec, format.amr_mode)
                        .map_err(codec_error)?;
                    self.encoders.push(MixEncoder {
                        key,
                        format,
                        encoder: StreamEncoder::new(c, MIX_RATE, format.ptime, 0, 0)
                            .map_err(codec_error)?,
                        packets: Vec::new(),
                    });
                    self.encoders.len() - 1
                }
            };
            let e = &mut self.encoders[k];
            e.packets.clear();
            let mix = self.mixer.output(u64::from(pcm_of.0)).unwrap_or(&[]);
            e.encoder
                .push_pcm(mix, &mut e.packets)
                .map_err(codec_error)?;
            encoded += e.packets.len() as u64;
            self.charged.push((pcm_of, e.packets.len() as u64));
        }
        Ok(encoded)
    }

    /// Each receiver's packets of this tick, numbered on its own timeline (a new one when its
    /// format changed).
    fn number_outputs(&mut self, receivers: &[(MemberId, Format)]) {
        for o in self.outputs.values_mut() {
            o.ready.clear();
        }
        for &(member, format) in receivers {
            let key = self.mix_key(member);
            let Some(encoder) = self
                .encoders
                .iter()
                .position(|e| e.key == key && e.format == format)
            else {
                continue;
            };
            let o = self
                .outputs
                .entry(member)
                .or_insert_with(|| MixOutput::new(format));
            if o.format != format {
                *o = MixOutput::new(format);
            }
            for packet in 0..self.encoders[encoder].packets.len() {
                o.ready.push(MixReady {
                    seq: o.seq,
                    timestamp: o.ts,
                    marker: std::mem::take(&mut o.marker),
                    encoder,
                    packet,
                });
                o.seq = o.seq.wrapping_add(1);
                o.ts = o.ts.wrapping_add(o.ticks);
            }
        }
    }

    /// What the last [`Mixing::tick`] made for `member`.
    pub fn ready(&self, member: MemberId) -> impl Iterator<Item = MixPacket<'_>> + '_ {
        let ready = self.outputs.get(&member).map_or(&[][..], |o| &o.ready[..]);
        ready.iter().filter_map(|r| {
            let p = self.encoders.get(r.encoder)?.packets.get(r.packet)?;
            Some(MixPacket {
                seq: r.seq,
                timestamp: r.timestamp,
                marker: r.marker,
                payload: &p.payload,
            })
        })
    }

    /// Packets the last [`Mixing::tick`] encoded that are counted at `member`: its own mix's,
    /// and a shared mix's when it is the first receiver of that format (so that the members'
    /// counts add up to the encodes the tick ran, once each).
    pub fn encoded_for(&self, member: MemberId) -> u64 {
        self.charged
            .iter()
            .filter(|(m, _)| *m == member)
            .map(|(_, n)| n)
            .sum()
    }

    /// Takes `member` out of the mix (it left): its input, its output, its encoders, its place
    /// in the sums.
    pub fn remove_member(&mut self, member: MemberId) {
        self.inputs.retain(|m| m.member != member);
        self.outputs.remove(&member);
        self.encoders.retain(|e| e.key != MixKey::Own(member));
        // The ready packets point into the encoders, which have moved: the last tick's are
        // gone (the next tick makes new ones).
        for o in self.outputs.values_mut() {
            o.ready.clear();
        }
        self.mixer.remove(u64::from(member.0));
    }
}

/// A codec's error as the mixer's.
fn codec_error(e: secrelay_media::Error) -> TranscodeError {
    TranscodeError::Codec(e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pcmu(cn: Cn) -> Format {
        Format {
            codec: CodecId::Pcmu,
            ptime: 20,
            dtmf: Dtmf::Events,
            cn,
            amr_mode: None,
        }
    }

    fn pkt(seq: u16, timestamp: u32, payload: &[u8]) -> InPacket<'_> {
        InPacket {
            seq,
            timestamp,
            marker: false,
            payload,
        }
    }

    const SENDER: MemberId = MemberId(1);

    #[test]
    fn comfort_noise_becomes_one_packet_of_noise_at_its_level_in_the_stream() {
        let mut t = Transcoding::default();
        let f = [pcmu(Cn::Noise)];
        let speech = [0x10u8; 160];
        t.audio(SENDER, 7, CodecId::Pcmu, &pkt(1, 1000, &speech), &f)
            .unwrap();
        let first = t.ready(SENDER, 7, f[0])[0].clone();
        let w = t
            .comfort_noise(SENDER, 7, &pkt(2, 1160, &[18, 1, 2, 3]), &f)
            .unwrap();
        assert_eq!(w.encoded, 1);
        let noise = t.ready(SENDER, 7, f[0])[0].clone();
        assert_eq!(noise.payload_type, 0);
        assert_eq!(noise.seq, first.seq.wrapping_add(1));
        assert_eq!(noise.timestamp, first.timestamp.wrapping_add(160));
        let pcm: Vec<i16> = noise
            .payload
            .iter()
            .map(|&c| secrelay_media::g711::ulaw_decode(c))
            .collect();
        let e: f64 = pcm.iter().map(|&s| f64::from(s).powi(2)).sum::<f64>() / 160.0;
        let db = 20.0 * (e.sqrt() / 32767.0).log10();
        assert!((db + 18.0).abs() < 2.0, "{db:.1} dBov");
        // The audio after it: its own place, nothing concealed in between.
        t.audio(SENDER, 7, CodecId::Pcmu, &pkt(3, 1320, &speech), &f)
            .unwrap();
        let after = t.ready(SENDER, 7, f[0]);
        assert_eq!(after.len(), 1);
        assert_eq!(after[0].timestamp, first.timestamp.wrapping_add(320));
        assert_eq!(after[0].payload, speech);
        // Malformed: the sender's fault, nothing made.
        for bad in [&[][..], &[200]] {
            let e = t.comfort_noise(SENDER, 7, &pkt(4, 1480, bad), &f);
            assert!(matches!(e, Err(TranscodeError::Undecodable(_))), "{e:?}");
        }
        // No stream yet: nothing.
        assert_eq!(
            t.comfort_noise(SENDER, 8, &pkt(1, 0, &[30]), &f).unwrap(),
            Work::default()
        );
    }

    #[test]
    fn silent_audio_becomes_comfort_noise_and_speech_after_it_is_marked() {
        let mut t = Transcoding::default();
        let f = [pcmu(Cn::Detect)];
        let mut got = Vec::new();
        let frames: [&[u8]; 4] = [&[0x10; 160], &[0xFF; 160], &[0x7F; 160], &[0x10; 160]];
        for (k, p) in frames.iter().enumerate() {
            t.audio(
                SENDER,
                7,
                CodecId::Pcmu,
                &pkt(k as u16, 160 * k as u32, p),
                &f,
            )
            .unwrap();
            got.extend(t.ready(SENDER, 7, f[0]).iter().cloned());
        }
        let kinds: Vec<(u8, usize, bool)> = got
            .iter()
            .map(|p| (p.payload_type, p.payload.len(), p.marker))
            .collect();
        assert_eq!(
            kinds,
            [
                (0, 160, true),
                (CN_PT, 1, false),
                (CN_PT, 1, false),
                (0, 160, true)
            ]
        );
        assert_eq!(got[1].payload, [0x20]);
        for (k, p) in got.iter().enumerate() {
            assert_eq!(p.seq, got[0].seq.wrapping_add(k as u16));
            assert_eq!(p.timestamp, got[0].timestamp.wrapping_add(160 * k as u32));
        }
    }

    #[test]
    fn comfort_noise_passes_as_comfort_noise_on_the_outputs_timeline() {
        let mut t = Transcoding::default();
        let f = [pcmu(Cn::Pass)];
        let speech = [0x10u8; 160];
        t.audio(SENDER, 7, CodecId::Pcma, &pkt(1, 1000, &[0x55; 160]), &f)
            .unwrap();
        let first = t.ready(SENDER, 7, f[0])[0].clone();
        t.comfort_noise(SENDER, 7, &pkt(2, 1160, &[40, 9]), &f)
            .unwrap();
        let cn = t.ready(SENDER, 7, f[0]).to_vec();
        assert_eq!(cn.len(), 1);
        assert_eq!(
            (cn[0].payload_type, &cn[0].payload[..]),
            (CN_PT, &[40u8, 9][..])
        );
        assert_eq!(cn[0].seq, first.seq.wrapping_add(1));
        assert_eq!(cn[0].timestamp, first.timestamp.wrapping_add(160));
        t.audio(SENDER, 7, CodecId::Pcma, &pkt(3, 1320, &speech), &f)
            .unwrap();
        let after = t.ready(SENDER, 7, f[0]);
        assert_eq!(after.len(), 1);
        assert_eq!(after[0].seq, first.seq.wrapping_add(2));
        assert_eq!(after[0].timestamp, first.timestamp.wrapping_add(320));
        assert!(after[0].marker);
    }

    #[test]
    fn amr_is_sent_in_whole_frames() {
        assert_eq!(ptime_for(CodecId::Pcma, 30), 30);
        assert_eq!(ptime_for(CodecId::Pcma, 25), 20);
        assert_eq!(ptime_for(CodecId::AmrWbOctet, 40), 40);
        assert_eq!(ptime_for(CodecId::AmrWbOctet, 30), 20);
        assert_eq!(ptime_for(CodecId::Amr, 10), 20);
        assert_eq!(ptime_for(CodecId::Amr, 60), 60);
    }
}
