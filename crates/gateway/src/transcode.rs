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

use secrelay_media::dtmf;
use secrelay_media::transcode::{InPacket, OutPacket, StreamDecoder, StreamEncoder};
use secrelay_media::{Codec, Registry};

use crate::leg::{CodecId, NegotiatedMedia};
use crate::room::MemberId;

/// Packet times a transcoded stream can be sent in, ms.
pub const PTIMES: [u32; 5] = [10, 20, 30, 40, 60];

/// What a receiver is sent a transcoded (or mixed) stream in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Format {
    /// The audio codec.
    pub codec: CodecId,
    /// The packet time, ms (one of [`PTIMES`]).
    pub ptime: u32,
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
            let ptime = m.ptime.filter(|p| PTIMES.contains(p)).unwrap_or(20);
            Some(Format { codec, ptime })
        })
    }
}

/// A new codec instance of `id` from the registry (Opus with in-band FEC, as we offer it).
pub fn make_codec(
    registry: &Registry,
    id: CodecId,
) -> Result<Box<dyn Codec>, secrelay_media::Error> {
    let (channels, fmtp) = match id {
        CodecId::Opus => (2, Some("useinbandfec=1")),
        _ => (1, None),
    };
    registry.make_by_name(id.name(), id.clock_rate(), channels, fmtp)
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
}

/// One sender's audio stream being transcoded.
struct SourceStream {
    source: MemberId,
    ssrc: u32,
    codec: CodecId,
    decoder: StreamDecoder,
    outputs: Vec<Output>,
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
            pcm: Vec::with_capacity(5760),
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
                let c = make_codec(&self.registry, codec).map_err(setup)?;
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
                let c = make_codec(&self.registry, codec).map_err(setup)?;
                let rate = c.pcm_rate();
                self.streams.push(SourceStream {
                    source,
                    ssrc,
                    codec,
                    decoder: StreamDecoder::new(c, rate).map_err(setup)?,
                    outputs: Vec::new(),
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
        let c = make_codec(&self.registry, format.codec).map_err(setup)?;
        let (seq, ts) = random_start();
        let encoder =
            StreamEncoder::new(c, s.decoder.out_rate(), format.ptime, seq, ts).map_err(setup)?;
        s.outputs.push(Output {
            format,
            encoder,
            anchor: None,
            ready: Vec::new(),
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
        for o in s.outputs.iter_mut().filter(|o| formats.contains(&o.format)) {
            if let Some(gap) = d.gap_ticks {
                let gap_ms = (u64::from(gap) * 1000 / u64::from(in_clock)) as u32;
                o.encoder
                    .discontinuity(gap_ms, &mut o.ready)
                    .map_err(|e| TranscodeError::Codec(e.to_string()))?;
                o.anchor = None;
            }
            if o.anchor.is_none() {
                o.anchor = Some((pkt.timestamp, o.encoder.next_timestamp()));
            }
            o.encoder
                .push_pcm(pcm, &mut o.ready)
                .map_err(|e| TranscodeError::Codec(e.to_string()))?;
            work.encoded += o.ready.len() as u64;
        }
        Ok(work)
    }

    /// One telephone-event packet of `source`'s transcoded stream `ssrc` (received at the
    /// clock of `event`): re-timed onto each of `formats`' outputs, its durations scaled to the
    /// output's clock, numbered in the output's sequence; then in [`Transcoding::ready`] (with
    /// payload type 0: the receiver's own is set per copy). An output that does not exist yet
    /// (no audio went through it) gets nothing. Err: the payload is not telephone-events.
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
        let Some(s) = self
            .streams
            .iter_mut()
            .find(|s| s.source == source && s.ssrc == ssrc)
        else {
            return Ok(());
        };
        let in_clock = event.clock_rate();
        let audio_clock = s.codec.clock_rate();
        for o in s.outputs.iter_mut() {
            o.ready.clear();
            if !formats.contains(&o.format) {
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
                payload_type: 0,
                payload,
            });
        }
        Ok(())
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

/// One member's audio into the mix.
struct MixInput {
    member: MemberId,
    ssrc: u32,
    codec: CodecId,
    decoder: StreamDecoder,
    /// Decoded, not yet mixed, at [`MIX_RATE`].
    fifo: Vec<i16>,
}

/// One member's mix out.
struct MixOutput {
    member: MemberId,
    format: Format,
    encoder: StreamEncoder,
    ready: Vec<OutPacket>,
}

/// A mixing room's audio, sans-IO: each member's audio decoded once into its input; every
/// [`MIX_TICK`] one frame of every input goes into the N−1 mixer
/// (`secrelay_media::mixer::Mixer`), and each receiving member's mix (everyone but itself) is
/// encoded in its own format. Time comes from the caller ([`Mixing::audio`]'s arrival instant,
/// [`Mixing::next_tick`]); a member with nothing buffered contributes silence.
pub struct Mixing {
    registry: Registry,
    mixer: secrelay_media::mixer::Mixer<i16>,
    inputs: Vec<MixInput>,
    outputs: Vec<MixOutput>,
    next_tick: Option<std::time::Instant>,
    last_audio: Option<std::time::Instant>,
    frame: Vec<i16>,
    pcm: Vec<i16>,
}

impl std::fmt::Debug for Mixing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mixing")
            .field("inputs", &self.inputs.len())
            .field("outputs", &self.outputs.len())
            .field("next_tick", &self.next_tick)
            .finish_non_exhaustive()
    }
}

impl Mixing {
    /// A mix with no members; codecs made from `registry`.
    pub fn new(registry: Registry) -> Mixing {
        Mixing {
            registry,
            mixer: secrelay_media::mixer::Mixer::new(MIX_FRAME)
                .expect("a 20 ms frame is not empty"),
            inputs: Vec::new(),
            outputs: Vec::new(),
            next_tick: None,
            last_audio: None,
            frame: vec![0; MIX_FRAME],
            pcm: Vec::with_capacity(5760),
        }
    }

    /// Members whose audio is decoded into the mix now.
    pub fn inputs(&self) -> usize {
        self.inputs.len()
    }

    /// Encoders of members' mixes now.
    pub fn encoders(&self) -> usize {
        self.outputs.len()
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
                let c = make_codec(&self.registry, codec).map_err(setup)?;
                let input = MixInput {
                    member,
                    ssrc,
                    codec,
                    decoder: StreamDecoder::new(c, MIX_RATE).map_err(setup)?,
                    fifo: Vec::with_capacity(MIX_FRAME * 8),
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

    /// One tick, due at [`Mixing::next_tick`] (called at `now`, on or after it): a frame of
    /// every input into the mixer, and the mix of every one of `receivers` (member and
    /// format) encoded; what each got is then in [`Mixing::ready`]. The next tick is one
    /// [`MIX_TICK`] later (none after [`MIX_IDLE`] without audio; ticks missed by more than a
    /// few frames are skipped, not made up). Encoded packets, all receivers together.
    pub fn tick(
        &mut self,
        now: std::time::Instant,
        receivers: &[(MemberId, Format)],
    ) -> Result<u64, TranscodeError> {
        let Some(due) = self.next_tick else {
            return Ok(0);
        };
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
        let codec = |e: secrelay_media::Error| TranscodeError::Codec(e.to_string());
        for input in &mut self.inputs {
            if input.fifo.is_empty() {
                continue;
            }
            let n = input.fifo.len().min(MIX_FRAME);
            self.frame[..n].copy_from_slice(&input.fifo[..n]);
            self.frame[n..].fill(0);
            input.fifo.drain(..n);
            self.mixer
                .put(u64::from(input.member.0), &self.frame)
                .map_err(codec)?;
        }
        for (m, _) in receivers {
            self.mixer.add(u64::from(m.0)).map_err(codec)?;
        }
        self.mixer.mix();
        let mut encoded = 0;
        for o in &mut self.outputs {
            o.ready.clear();
        }
        for &(member, format) in receivers {
            let k = match self
                .outputs
                .iter()
                .position(|o| o.member == member && o.format == format)
            {
                Some(k) => k,
                None => {
                    let c = make_codec(&self.registry, format.codec).map_err(codec)?;
                    let (seq, ts) = random_start();
                    self.outputs.retain(|o| o.member != member);
                    self.outputs.push(MixOutput {
                        member,
                        format,
                        encoder: StreamEncoder::new(c, MIX_RATE, format.ptime, seq, ts)
                            .map_err(codec)?,
                        ready: Vec::new(),
                    });
                    self.outputs.len() - 1
                }
            };
            let o = &mut self.outputs[k];
            let mix = self.mixer.output(u64::from(member.0)).unwrap_or(&[]);
            o.encoder.push_pcm(mix, &mut o.ready).map_err(codec)?;
            encoded += o.ready.len() as u64;
        }
        Ok(encoded)
    }

    /// What the last [`Mixing::tick`] encoded for `member`.
    pub fn ready(&self, member: MemberId) -> &[OutPacket] {
        self.outputs
            .iter()
            .find(|o| o.member == member)
            .map_or(&[], |o| o.ready.as_slice())
    }

    /// Takes `member` out of the mix (it left): its input, its output, its place in the sums.
    pub fn remove_member(&mut self, member: MemberId) {
        self.inputs.retain(|m| m.member != member);
        self.outputs.retain(|o| o.member != member);
        self.mixer.remove(u64::from(member.0));
    }
}
