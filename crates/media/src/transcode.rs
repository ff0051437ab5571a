//! Transcoding a stream: decode → resample → re-frame → encode, with the output's own
//! sequence numbers and timestamps, and telephone-events carried across.
//!
//! The two halves are separate so a gateway can decode each sender once and encode once per
//! distinct receiving format (not once per receiver), mixing in between if it wants:
//!
//! - [`StreamDecoder`]: one per incoming stream. Takes RTP packets (sequence number,
//!   timestamp, payload) in arrival order; drops late and duplicate packets; fills gaps
//!   with the codec's loss concealment, or its in-band FEC when exactly one packet is
//!   missing; turns a long gap or a new talkspurt into a [`Decoded::gap_ticks`]
//!   discontinuity; yields mono PCM at a chosen rate (the room's bus rate).
//! - [`StreamEncoder`]: one per outgoing format. Takes mono PCM at the bus rate; resamples
//!   to the codec's rate, re-frames to the packet time the receiver asked for, encodes, and
//!   numbers the packets from its own sequence number and timestamp, so the receiver sees
//!   one clean stream whatever the sender's packet time, losses or clock.
//! - [`Transcoder`]: the two for one sender and one receiver (a two-party call), with
//!   telephone-events (RFC 4733) re-timed onto the output's timeline, their durations scaled
//!   between clock rates, and sent with the receiving leg's payload type.

use crate::dtmf;
use crate::reframe::Reframer;
use crate::resample::Resampler;
use crate::{Codec, Error};

/// An RTP packet as the transcoder takes it (header fields already parsed).
#[derive(Debug, Clone, Copy)]
pub struct InPacket<'a> {
    /// RTP sequence number.
    pub seq: u16,
    /// RTP timestamp.
    pub timestamp: u32,
    /// RTP marker bit (start of a talkspurt for audio, of an event for telephone-events).
    pub marker: bool,
    /// The payload.
    pub payload: &'a [u8],
}

/// An RTP packet the transcoder made: header fields and payload (the caller adds the SSRC).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutPacket {
    /// RTP sequence number.
    pub seq: u16,
    /// RTP timestamp.
    pub timestamp: u32,
    /// RTP marker bit.
    pub marker: bool,
    /// RTP payload type.
    pub payload_type: u8,
    /// The payload.
    pub payload: Vec<u8>,
}

/// Counters of a [`StreamDecoder`] (and of a [`Transcoder`]'s input side).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DecoderStats {
    /// Packets decoded.
    pub decoded: u64,
    /// Packets that did not decode (malformed or truncated), dropped.
    pub malformed: u64,
    /// Packets older than the newest one seen (late or duplicate), dropped.
    pub late: u64,
    /// Samples (per channel, at the codec's rate) made up by loss concealment.
    pub concealed_samples: u64,
    /// Lost packets rebuilt from the next one's in-band FEC.
    pub fec_recovered: u64,
    /// Gaps too long to conceal, or new talkspurts: the output jumps too.
    pub discontinuities: u64,
}

/// What one packet gave.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Decoded {
    /// Mono samples appended at the output rate (after the resampler, which releases whole
    /// 10 ms blocks, so this can be 0 or more than the packet held).
    pub samples: usize,
    /// Samples (at the codec's rate) concealed before this packet.
    pub concealed: usize,
    /// Whether the packet before this one was rebuilt from this one's FEC.
    pub recovered: bool,
    /// Set when this packet starts after a discontinuity (a new talkspurt, or a gap longer
    /// than the decoder conceals): the gap in the codec's RTP clock ticks, to be reproduced
    /// on the output's timeline. The packet's own audio follows it.
    pub gap_ticks: Option<u32>,
    /// Set when the packet was dropped as late or a duplicate (nothing appended).
    pub late: bool,
}

#[derive(Debug, Clone, Copy)]
struct InState {
    last_seq: u16,
    /// Timestamp the next packet should have if nothing is lost.
    next_ts: u32,
    /// How long the last audio packet was, in the codec's clock ticks.
    packet_ticks: u32,
}

/// Longest gap concealed by default, ms; a longer one is a discontinuity.
pub const DEFAULT_MAX_CONCEAL_MS: u32 = 120;

/// Decodes one incoming stream to mono PCM at a fixed rate.
pub struct StreamDecoder {
    codec: Box<dyn Codec>,
    resampler: Resampler,
    out_rate: u32,
    state: Option<InState>,
    max_conceal_ticks: u32,
    pcm: Vec<i16>,
    mono: Vec<i16>,
    stats: DecoderStats,
}

impl std::fmt::Debug for StreamDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamDecoder")
            .field("codec", &self.codec.encoding_name())
            .field("out_rate", &self.out_rate)
            .field("stats", &self.stats)
            .finish()
    }
}

impl StreamDecoder {
    /// A decoder of `codec`'s payloads giving mono PCM at `out_rate` Hz.
    pub fn new(codec: Box<dyn Codec>, out_rate: u32) -> Result<StreamDecoder, Error> {
        let resampler = Resampler::new(codec.pcm_rate(), out_rate)?;
        let max_conceal_ticks = codec.clock_rate() / 1000 * DEFAULT_MAX_CONCEAL_MS;
        Ok(StreamDecoder {
            codec,
            resampler,
            out_rate,
            state: None,
            max_conceal_ticks,
            pcm: Vec::with_capacity(5760),
            mono: Vec::with_capacity(5760),
            stats: DecoderStats::default(),
        })
    }

    /// Conceals gaps up to `ms` (default [`DEFAULT_MAX_CONCEAL_MS`]); longer ones are
    /// discontinuities.
    pub fn set_max_conceal_ms(&mut self, ms: u32) {
        self.max_conceal_ticks = (self.codec.clock_rate() as u64 * ms as u64 / 1000) as u32;
    }

    /// The codec.
    pub fn codec(&self) -> &dyn Codec {
        self.codec.as_ref()
    }

    /// The output rate, Hz.
    pub fn out_rate(&self) -> u32 {
        self.out_rate
    }

    /// The counters.
    pub fn stats(&self) -> DecoderStats {
        self.stats
    }

    /// Output samples by which the PCM lags the packets (the resampler's delay).
    pub fn delay(&self) -> usize {
        self.resampler.delay()
    }

    /// Decodes one packet, appending mono PCM at the output rate to `pcm`. A payload that
    /// does not decode is an error, counted, and changes no state (the next packet conceals
    /// its gap).
    pub fn push(&mut self, pkt: &InPacket<'_>, pcm: &mut Vec<i16>) -> Result<Decoded, Error> {
        let mut d = Decoded::default();
        self.pcm.clear();
        if !self.sequence(pkt, &mut d)? {
            return Ok(d);
        }
        let before = self.pcm.len();
        match self.codec.to_pcm(pkt.payload, &mut self.pcm) {
            Ok(_) => {}
            Err(e) => {
                self.stats.malformed += 1;
                return Err(e);
            }
        }
        let ch = self.codec.channels() as usize;
        let per_channel = (self.pcm.len() - before) / ch;
        let ticks = self.codec.clock_ticks(per_channel);
        self.state = Some(InState {
            last_seq: pkt.seq,
            next_ts: pkt.timestamp.wrapping_add(ticks),
            packet_ticks: ticks,
        });
        self.stats.decoded += 1;
        self.finish(&mut d, pcm);
        Ok(d)
    }

    /// A packet of the stream that carries no audio of the codec (comfort noise, RFC 3389)
    /// and stands for `ticks` of its clock from its timestamp: sequenced as [`Self::push`]
    /// sequences audio (a late or duplicate one makes nothing; a gap before it is concealed
    /// into `pcm`, or reported as a discontinuity), and the next packet is expected `ticks`
    /// after it, so that no gap is concealed for the time it stood for. What stands for it on
    /// the output is the caller's to make.
    pub fn push_filler(
        &mut self,
        pkt: &InPacket<'_>,
        ticks: u32,
        pcm: &mut Vec<i16>,
    ) -> Result<Decoded, Error> {
        let mut d = Decoded::default();
        self.pcm.clear();
        if !self.sequence(pkt, &mut d)? {
            return Ok(d);
        }
        self.state = Some(InState {
            last_seq: pkt.seq,
            next_ts: pkt.timestamp.wrapping_add(ticks),
            packet_ticks: self.packet_ticks(),
        });
        self.finish(&mut d, pcm);
        Ok(d)
    }

    /// How long the last audio packet was, in the codec's clock ticks (20 ms before any).
    pub fn packet_ticks(&self) -> u32 {
        self.state
            .map_or(self.codec.clock_rate() / 50, |s| s.packet_ticks)
    }

    /// Places `pkt` on the stream's timeline: false when it is late or a duplicate (counted);
    /// else what went missing before it is concealed into `self.pcm` (or FEC-recovered), or a
    /// discontinuity is noted in `d`.
    fn sequence(&mut self, pkt: &InPacket<'_>, d: &mut Decoded) -> Result<bool, Error> {
        let ticks_to_samples = |c: &dyn Codec, ticks: u32| -> usize {
            (ticks as u64 * c.pcm_rate() as u64 / c.clock_rate() as u64) as usize
        };
        let Some(st) = self.state else {
            return Ok(true);
        };
        let seq_delta = pkt.seq.wrapping_sub(st.last_seq) as i16;
        if seq_delta <= 0 {
            self.stats.late += 1;
            d.late = true;
            return Ok(false);
        }
        let gap = pkt.timestamp.wrapping_sub(st.next_ts) as i32;
        if gap < 0 || gap as u32 > self.max_conceal_ticks || (pkt.marker && gap > 0) {
            // Timestamps went backwards, a gap too long to conceal, or a new
            // talkspurt after silence suppression: start over from this packet.
            d.gap_ticks = Some(gap.max(0) as u32);
            self.stats.discontinuities += 1;
        } else if gap > 0 {
            let samples = ticks_to_samples(self.codec.as_ref(), gap as u32);
            // Exactly one packet missing and a codec with FEC: rebuild it from this one.
            let r = if seq_delta == 2 && self.codec.has_fec() {
                d.recovered = true;
                self.codec.recover(pkt.payload, samples, &mut self.pcm)
            } else {
                self.codec.conceal(samples, &mut self.pcm)
            };
            if r.is_err() {
                d.recovered = false;
                self.pcm.clear();
                self.codec.conceal(samples, &mut self.pcm)?;
            }
            d.concealed = samples;
        }
        Ok(true)
    }

    /// Counts what `d` concealed or recovered, and appends `self.pcm` to `pcm` as mono at the
    /// output rate.
    fn finish(&mut self, d: &mut Decoded, pcm: &mut Vec<i16>) {
        self.stats.concealed_samples += d.concealed as u64;
        if d.recovered {
            self.stats.fec_recovered += 1;
        }
        // Down to mono, then to the output rate.
        let ch = self.codec.channels() as usize;
        let src: &[i16] = if ch == 2 {
            self.mono.clear();
            self.mono.extend(
                self.pcm
                    .chunks_exact(2)
                    .map(|p| ((p[0] as i32 + p[1] as i32) >> 1) as i16),
            );
            &self.mono
        } else {
            &self.pcm
        };
        d.samples = self.resampler.process(src, pcm);
    }

    /// Conceals `ms` of lost signal with nothing received after it (a sender gone quiet
    /// mid-stream), appending at the output rate; returns the samples appended.
    pub fn conceal_ms(&mut self, ms: u32, pcm: &mut Vec<i16>) -> Result<usize, Error> {
        let samples = self.codec.samples_for_ptime(ms);
        self.pcm.clear();
        self.codec.conceal(samples, &mut self.pcm)?;
        if let Some(st) = &mut self.state {
            st.next_ts = st.next_ts.wrapping_add(self.codec.clock_ticks(samples));
        }
        self.stats.concealed_samples += samples as u64;
        let src: Vec<i16> = if self.codec.channels() == 2 {
            self.pcm
                .chunks_exact(2)
                .map(|p| ((p[0] as i32 + p[1] as i32) >> 1) as i16)
                .collect()
        } else {
            std::mem::take(&mut self.pcm)
        };
        Ok(self.resampler.process(&src, pcm))
    }
}

/// Encodes mono PCM at a bus rate into one outgoing RTP stream.
pub struct StreamEncoder {
    codec: Box<dyn Codec>,
    resampler: Resampler,
    reframer: Reframer,
    seq: u16,
    ts: u32,
    marker: bool,
    rs: Vec<i16>,
    frame: Vec<i16>,
    stereo: Vec<i16>,
    encoded: u64,
}

impl std::fmt::Debug for StreamEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamEncoder")
            .field("codec", &self.codec.encoding_name())
            .field("ptime_ms", &self.reframer.ptime_ms())
            .field("seq", &self.seq)
            .field("ts", &self.ts)
            .finish()
    }
}

impl StreamEncoder {
    /// An encoder taking mono PCM at `in_rate` Hz, sending `ptime_ms` packets of `codec`
    /// numbered from `first_seq` and `first_ts` (pick them at random, RFC 3550 §5.1).
    pub fn new(
        codec: Box<dyn Codec>,
        in_rate: u32,
        ptime_ms: u32,
        first_seq: u16,
        first_ts: u32,
    ) -> Result<StreamEncoder, Error> {
        if !codec.ptimes().contains(&ptime_ms) {
            return Err(Error::Setup(format!(
                "{} does not send {ptime_ms} ms packets (it sends {:?} ms)",
                codec.encoding_name(),
                codec.ptimes()
            )));
        }
        let resampler = Resampler::new(in_rate, codec.pcm_rate())?;
        let reframer = Reframer::new(codec.pcm_rate(), codec.channels(), ptime_ms)?;
        Ok(StreamEncoder {
            codec,
            resampler,
            reframer,
            seq: first_seq,
            ts: first_ts,
            marker: true,
            rs: Vec::with_capacity(5760),
            frame: Vec::with_capacity(5760),
            stereo: Vec::new(),
            encoded: 0,
        })
    }

    /// The codec.
    pub fn codec(&self) -> &dyn Codec {
        self.codec.as_ref()
    }

    /// Packets encoded so far.
    pub fn encoded(&self) -> u64 {
        self.encoded
    }

    /// Timestamp the next audio packet will carry.
    pub fn next_timestamp(&self) -> u32 {
        self.ts
    }

    /// Takes the next sequence number for a packet of this stream that is not audio (a
    /// telephone-event sent on the same SSRC).
    pub fn take_seq(&mut self) -> u16 {
        let s = self.seq;
        self.seq = self.seq.wrapping_add(1);
        s
    }

    /// Appends mono PCM at the input rate; appends the packets it completes to `out`.
    pub fn push_pcm(&mut self, pcm: &[i16], out: &mut Vec<OutPacket>) -> Result<usize, Error> {
        self.rs.clear();
        self.resampler.process(pcm, &mut self.rs);
        if self.codec.channels() == 2 {
            // Each sample to both channels, written in place (an iterator of pairs is pushed
            // a sample at a time).
            self.stereo.clear();
            self.stereo.resize(self.rs.len() * 2, 0);
            for (pair, &s) in self.stereo.chunks_exact_mut(2).zip(&self.rs) {
                pair.fill(s);
            }
            self.reframer.push(&self.stereo);
        } else {
            self.reframer.push(&self.rs);
        }
        let mut n = 0;
        while self.reframer.pop(&mut self.frame) {
            self.emit(out)?;
            n += 1;
        }
        Ok(n)
    }

    fn emit(&mut self, out: &mut Vec<OutPacket>) -> Result<(), Error> {
        let mut payload = Vec::with_capacity(self.frame.len());
        let per_channel = self.frame.len() / self.codec.channels() as usize;
        let ticks = self.codec.clock_ticks(per_channel);
        let r = self.codec.from_pcm(&self.frame, &mut payload);
        // The frame's time passes whether or not it could be encoded.
        let ts = self.ts;
        self.ts = self.ts.wrapping_add(ticks);
        r?;
        out.push(OutPacket {
            seq: self.take_seq(),
            timestamp: ts,
            marker: std::mem::take(&mut self.marker),
            payload_type: self.codec.payload_type(),
            payload,
        });
        self.encoded += 1;
        Ok(())
    }

    /// A discontinuity in the input: what is buffered goes out padded with silence, the
    /// timestamp jumps by `gap_ms`' worth of the codec's clock, and the next packet has the
    /// marker bit (a new talkspurt).
    pub fn discontinuity(&mut self, gap_ms: u32, out: &mut Vec<OutPacket>) -> Result<(), Error> {
        if self.reframer.flush(&mut self.frame) {
            self.emit(out)?;
        }
        self.ts = self
            .ts
            .wrapping_add((self.codec.clock_rate() as u64 * gap_ms as u64 / 1000) as u32);
        self.marker = true;
        Ok(())
    }
}

/// Counters of a [`Transcoder`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TranscoderStats {
    /// The input side.
    pub decoder: DecoderStats,
    /// Audio packets sent.
    pub packets_out: u64,
    /// Telephone-event packets relayed.
    pub events_out: u64,
    /// Telephone-event packets that did not parse, dropped.
    pub events_malformed: u64,
}

#[derive(Debug, Clone, Copy)]
struct EventMap {
    in_pt: u8,
    out_pt: u8,
    in_clock: u32,
    out_clock: u32,
}

/// One sender's stream re-encoded for one receiver (decoder and encoder through mono PCM at
/// the encoder's rate), with telephone-events carried across.
pub struct Transcoder {
    dec: StreamDecoder,
    enc: StreamEncoder,
    events: Option<EventMap>,
    /// (input timestamp, output timestamp) of one instant, to place events on the output's
    /// timeline; re-anchored at every discontinuity.
    anchor: Option<(u32, u32)>,
    pcm: Vec<i16>,
    stats: TranscoderStats,
}

impl std::fmt::Debug for Transcoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transcoder")
            .field("dec", &self.dec)
            .field("enc", &self.enc)
            .field("stats", &self.stats)
            .finish()
    }
}

impl Transcoder {
    /// From `from`'s payloads to `to`'s in packets of `ptime_ms`, the output numbered from
    /// sequence number 0 and timestamp 0 (see [`Transcoder::with_output_start`]).
    pub fn new(
        from: Box<dyn Codec>,
        to: Box<dyn Codec>,
        ptime_ms: u32,
    ) -> Result<Transcoder, Error> {
        let rate = to.pcm_rate();
        Ok(Transcoder {
            dec: StreamDecoder::new(from, rate)?,
            enc: StreamEncoder::new(to, rate, ptime_ms, 0, 0)?,
            events: None,
            anchor: None,
            pcm: Vec::with_capacity(5760),
            stats: TranscoderStats::default(),
        })
    }

    /// Numbers the output from `seq` and `timestamp` (before any packet went through).
    pub fn with_output_start(mut self, seq: u16, timestamp: u32) -> Transcoder {
        self.enc.seq = seq;
        self.enc.ts = timestamp;
        self
    }

    /// Carries telephone-events: received with payload type `in_pt` (at the input codec's
    /// clock rate, as RFC 4733 §2.1 asks), sent with `out_pt` at the output codec's.
    pub fn with_events(mut self, in_pt: u8, out_pt: u8) -> Transcoder {
        self.events = Some(EventMap {
            in_pt,
            out_pt,
            in_clock: self.dec.codec().clock_rate(),
            out_clock: self.enc.codec().clock_rate(),
        });
        self
    }

    /// The counters.
    pub fn stats(&self) -> TranscoderStats {
        let mut s = self.stats;
        s.decoder = self.dec.stats();
        s
    }

    /// The payload type telephone-events arrive with, if they are carried.
    pub fn event_payload_type(&self) -> Option<u8> {
        self.events.map(|e| e.in_pt)
    }

    /// Maps an input timestamp onto the output timeline.
    fn map_ts(&self, ts: u32) -> u32 {
        let (in_clock, out_clock) = (self.dec.codec().clock_rate(), self.enc.codec().clock_rate());
        match self.anchor {
            Some((a_in, a_out)) => {
                let d = ts.wrapping_sub(a_in) as i32 as i64;
                a_out.wrapping_add((d * out_clock as i64 / in_clock as i64) as i32 as u32)
            }
            None => self.enc.next_timestamp(),
        }
    }

    /// Takes one received audio packet; appends the packets it completes to `out`. A
    /// malformed payload is an error (drop it and count it: [`Transcoder::stats`] does).
    pub fn push(&mut self, pkt: &InPacket<'_>, out: &mut Vec<OutPacket>) -> Result<(), Error> {
        self.pcm.clear();
        let d = self.dec.push(pkt, &mut self.pcm)?;
        if d.late {
            return Ok(());
        }
        if let Some(gap) = d.gap_ticks {
            let clock = self.dec.codec().clock_rate();
            let gap_ms = (gap as u64 * 1000 / clock as u64) as u32;
            self.enc.discontinuity(gap_ms, out)?;
            self.anchor = None;
        }
        if self.anchor.is_none() {
            self.anchor = Some((pkt.timestamp, self.enc.next_timestamp()));
        }
        let before = out.len();
        let r = self.enc.push_pcm(&self.pcm, out);
        self.stats.packets_out += (out.len() - before) as u64;
        r.map(|_| ())
    }

    /// Takes one received telephone-event packet (payload type [`Transcoder::with_events`]'s
    /// `in_pt`) and sends it on, re-timed, with the output's payload type and next sequence
    /// number. Every copy of an end packet goes on (the receiver needs the redundancy too).
    pub fn push_event(
        &mut self,
        pkt: &InPacket<'_>,
        out: &mut Vec<OutPacket>,
    ) -> Result<(), Error> {
        let Some(map) = self.events else {
            return Err(Error::Setup(
                "this transcoder carries no telephone-events".into(),
            ));
        };
        let events = match dtmf::parse(pkt.payload) {
            Ok(e) => e,
            Err(e) => {
                self.stats.events_malformed += 1;
                return Err(e);
            }
        };
        if self.anchor.is_none() {
            self.anchor = Some((pkt.timestamp, self.enc.next_timestamp()));
        }
        let mut payload = Vec::with_capacity(pkt.payload.len());
        for ev in events {
            let scaled = (ev.duration as u64 * map.out_clock as u64 / map.in_clock as u64)
                .min(u16::MAX as u64) as u16;
            payload.extend_from_slice(
                &dtmf::Event {
                    duration: scaled,
                    ..ev
                }
                .to_bytes(),
            );
        }
        out.push(OutPacket {
            seq: self.enc.take_seq(),
            timestamp: self.map_ts(pkt.timestamp),
            marker: pkt.marker,
            payload_type: map.out_pt,
            payload,
        });
        self.stats.events_out += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::g711::{Pcma, Pcmu};
    use crate::g722::G722;
    use crate::opus::Opus;
    use crate::tone;

    fn packets(codec: &mut dyn Codec, pcm: &[i16], ptime: u32) -> Vec<(u32, Vec<u8>)> {
        let n = codec.samples_for_ptime(ptime);
        let mut ts = 1000u32;
        pcm.chunks_exact(n)
            .map(|f| {
                let mut p = Vec::new();
                codec.from_pcm(f, &mut p).unwrap();
                let r = (ts, p);
                ts = ts.wrapping_add(codec.clock_ticks(n));
                r
            })
            .collect()
    }

    fn run(
        t: &mut Transcoder,
        pkts: &[(u32, Vec<u8>)],
        skip: impl Fn(usize) -> bool,
    ) -> Vec<OutPacket> {
        let mut out = Vec::new();
        for (i, (ts, p)) in pkts.iter().enumerate() {
            if skip(i) {
                continue;
            }
            let pkt = InPacket {
                seq: 100u16.wrapping_add(i as u16),
                timestamp: *ts,
                marker: i == 0,
                payload: p,
            };
            t.push(&pkt, &mut out).unwrap();
        }
        out
    }

    /// Checks the output stream is clean: consecutive sequence numbers, timestamps one packet
    /// apart, the marker on the first packet only; returns its decoded PCM.
    fn check_clean(out: &[OutPacket], dec: &mut dyn Codec, ptime: u32) -> Vec<i16> {
        let step = dec.clock_ticks(dec.samples_for_ptime(ptime));
        let mut pcm = Vec::new();
        for (i, p) in out.iter().enumerate() {
            assert_eq!(p.seq, out[0].seq.wrapping_add(i as u16));
            assert_eq!(p.timestamp, out[0].timestamp.wrapping_add(step * i as u32));
            assert_eq!(p.marker, i == 0);
            assert_eq!(p.payload_type, dec.payload_type());
            let n = dec.to_pcm(&p.payload, &mut pcm).unwrap();
            assert_eq!(n, dec.samples_for_ptime(ptime) * dec.channels() as usize);
        }
        pcm
    }

    #[test]
    fn a_filler_stands_for_its_time_and_a_gap_before_it_is_concealed() {
        let mut d = StreamDecoder::new(Box::new(Pcmu), 8000).unwrap();
        let frame = [0xFFu8; 160];
        let pkt = |seq: u16, timestamp: u32| InPacket {
            seq,
            timestamp,
            marker: false,
            payload: &frame,
        };
        let mut pcm = Vec::new();
        assert_eq!(d.packet_ticks(), 160);
        d.push(&pkt(10, 1000), &mut pcm).unwrap();
        // Comfort noise right after: nothing concealed, nothing appended.
        pcm.clear();
        let f = d
            .push_filler(&pkt(11, 1160), d.packet_ticks(), &mut pcm)
            .unwrap();
        assert_eq!(
            (f.concealed, f.gap_ticks, f.late, pcm.len()),
            (0, None, false, 0)
        );
        // Audio after the time it stood for: no gap.
        let a = d.push(&pkt(12, 1320), &mut pcm).unwrap();
        assert_eq!((a.concealed, a.gap_ticks, pcm.len()), (0, None, 160));
        // A filler after a lost packet conceals it; a late one makes nothing.
        pcm.clear();
        let f = d.push_filler(&pkt(14, 1640), 160, &mut pcm).unwrap();
        assert_eq!((f.concealed, pcm.len()), (160, 160));
        assert!(d.push_filler(&pkt(13, 1480), 160, &mut pcm).unwrap().late);
        // Long silence after it: a discontinuity, as for audio.
        let a = d.push(&pkt(15, 1800 + 8000), &mut pcm).unwrap();
        assert_eq!(a.gap_ticks, Some(8000));
        assert_eq!(d.stats().decoded, 3);
    }

    #[test]
    fn opus_48k_to_pcmu_30ms_keeps_the_tone() {
        let mut src = Opus::new(48_000, 32_000).unwrap();
        let pkts = packets(&mut src, &tone::sine(48_000, 1000.0, 9000.0, 48_000), 20);
        let mut t = Transcoder::new(
            Box::new(Opus::new(48_000, 32_000).unwrap()),
            Box::new(Pcmu),
            30,
        )
        .unwrap()
        .with_output_start(4000, 77);
        let out = run(&mut t, &pkts, |_| false);
        assert_eq!(out[0].seq, 4000);
        assert_eq!(out[0].timestamp, 77);
        // 1 s of 20 ms packets in, 30 ms packets out: 33 whole ones (one more waits).
        assert_eq!(out.len(), 33);
        let pcm = check_clean(&out, &mut Pcmu, 30);
        let f = tone::zero_crossing_hz(&pcm[1600..], 8000);
        assert!((f - 1000.0).abs() < 2.0, "{f:.1} Hz");
        assert!(tone::tone_share(&pcm[1600..], 8000, 1000.0) > 0.95);
        assert_eq!(t.stats().packets_out, 33);
    }

    #[test]
    fn pcmu_to_opus_and_g722_to_pcma_and_back() {
        // PCMU 20 ms → Opus 48 kHz 60 ms.
        let mut ulaw = Pcmu;
        let pkts = packets(&mut ulaw, &tone::sine(8000, 700.0, 9000.0, 8000), 20);
        let mut t = Transcoder::new(
            Box::new(Pcmu),
            Box::new(Opus::new(48_000, 32_000).unwrap()),
            60,
        )
        .unwrap();
        let out = run(&mut t, &pkts, |_| false);
        assert_eq!(out.len(), 16);
        let pcm = check_clean(&out, &mut Opus::new(48_000, 32_000).unwrap(), 60);
        assert!(tone::tone_share(&pcm[9600..], 48_000, 700.0) > 0.9);
        // G.722 20 ms → PCMA 10 ms: 16 → 8 kHz.
        let mut g = G722::new();
        let pkts = packets(&mut g, &tone::sine(16_000, 1500.0, 9000.0, 16_000), 20);
        let mut t = Transcoder::new(Box::new(G722::new()), Box::new(Pcma), 10).unwrap();
        let out = run(&mut t, &pkts, |_| false);
        assert_eq!(out.len(), 100);
        let pcm = check_clean(&out, &mut Pcma, 10);
        assert!((tone::zero_crossing_hz(&pcm[800..], 8000) - 1500.0).abs() < 2.0);
    }

    #[test]
    fn losses_are_concealed_late_packets_dropped_and_the_output_stays_clean() {
        let mut ulaw = Pcmu;
        let pkts = packets(&mut ulaw, &tone::sine(8000, 440.0, 9000.0, 16_000), 20);
        let mut t = Transcoder::new(Box::new(Pcmu), Box::new(Pcma), 20).unwrap();
        let mut out = run(&mut t, &pkts[..50], |i| i == 10 || i == 20 || i == 21);
        // A duplicate and a late packet are dropped.
        for i in [49usize, 30] {
            let p = InPacket {
                seq: 100 + i as u16,
                timestamp: pkts[i].0,
                marker: false,
                payload: &pkts[i].1,
            };
            t.push(&p, &mut out).unwrap();
        }
        // A malformed packet would be an error; G.711 has none, so check the Opus side below.
        let st = t.stats().decoder;
        assert_eq!(
            (st.decoded, st.late, st.concealed_samples),
            (47, 2, 3 * 160)
        );
        // Every lost 20 ms was concealed: 50 packets out.
        assert_eq!(out.len(), 50);
        check_clean(&out, &mut Pcma, 20);
    }

    #[test]
    fn opus_fec_rebuilds_a_single_lost_packet_and_bad_payloads_are_counted() {
        let mut src = Opus::new(48_000, 32_000).unwrap();
        src.set_inband_fec(true, 20).unwrap();
        let pkts = packets(&mut src, &tone::sine(48_000, 600.0, 9000.0, 48_000), 20);
        let mut t = Transcoder::new(
            Box::new(Opus::new(48_000, 32_000).unwrap()),
            Box::new(Pcmu),
            20,
        )
        .unwrap();
        let out = run(&mut t, &pkts, |i| i == 25);
        assert_eq!(out.len(), 50);
        assert_eq!(t.stats().decoder.fec_recovered, 1);
        let pcm = check_clean(&out, &mut Pcmu, 20);
        // The rebuilt 20 ms still holds the tone.
        let lost = &pcm[25 * 160..26 * 160];
        assert!(tone::tone_share(lost, 8000, 600.0) > 0.5);
        let bad = InPacket {
            seq: 200,
            timestamp: 1000 + 50 * 960,
            marker: false,
            payload: &[0x03],
        };
        let mut o = Vec::new();
        assert!(t.push(&bad, &mut o).unwrap_err().is_peer_fault());
        assert_eq!(t.stats().decoder.malformed, 1);
        assert!(o.is_empty());
    }

    #[test]
    fn silence_suppression_jumps_the_output_timestamps_with_a_marker() {
        let mut ulaw = Pcmu;
        let pkts = packets(&mut ulaw, &tone::sine(8000, 440.0, 9000.0, 8000), 20);
        let mut t = Transcoder::new(
            Box::new(Pcmu),
            Box::new(Opus::new(48_000, 32_000).unwrap()),
            20,
        )
        .unwrap();
        let mut out = run(&mut t, &pkts[..10], |_| false);
        // 1 s of silence suppression, then a new talkspurt (marker).
        let ts = pkts[9].0 + 160 + 8000;
        let p = InPacket {
            seq: 110,
            timestamp: ts,
            marker: true,
            payload: &pkts[10].1,
        };
        let before = out.len();
        t.push(&p, &mut out).unwrap();
        let after: Vec<&OutPacket> = out[before..].iter().collect();
        assert!(after[0].marker);
        let prev = &out[before - 1];
        assert_eq!(after[0].seq, prev.seq.wrapping_add(1));
        // The jump: one second at 48 kHz, on top of the flushed partial frame if any.
        assert!(after[0].timestamp.wrapping_sub(prev.timestamp) >= 48_000 + 960);
        assert_eq!(t.stats().decoder.discontinuities, 1);
    }

    #[test]
    fn telephone_events_cross_with_their_own_payload_type_and_clock() {
        let mut ulaw = Pcmu;
        let pkts = packets(&mut ulaw, &[0; 1600], 20);
        let mut t = Transcoder::new(
            Box::new(Pcmu),
            Box::new(Opus::new(48_000, 32_000).unwrap()),
            20,
        )
        .unwrap()
        .with_output_start(1, 500_000)
        .with_events(101, 126);
        let mut out = run(&mut t, &pkts[..5], |_| false);
        let g = dtmf::DtmfGenerator::new(8000, 20, 10).unwrap();
        let mut seq = 105u16;
        let start = pkts[5].0;
        for ep in g.event_packets(9, start, g.ticks(100)) {
            let payload = ep.event.to_bytes();
            let p = InPacket {
                seq,
                timestamp: ep.timestamp,
                marker: ep.marker,
                payload: &payload,
            };
            t.push_event(&p, &mut out).unwrap();
            seq += 1;
        }
        let events: Vec<&OutPacket> = out.iter().filter(|p| p.payload_type == 126).collect();
        assert_eq!(events.len(), 7);
        // Sequence numbers continue the audio's; one timestamp, mapped to the 48 kHz timeline.
        let audio_last = out.iter().rfind(|p| p.payload_type == 111).unwrap();
        assert_eq!(events[0].seq, audio_last.seq.wrapping_add(1));
        assert!(events.iter().all(|e| e.timestamp == 500_000 + 5 * 960));
        assert!(events[0].marker);
        let mut c = dtmf::DtmfCollector::new();
        let mut digits = Vec::new();
        for e in &events {
            c.push(e.timestamp, &e.payload, &mut digits).unwrap();
        }
        assert_eq!(digits.len(), 1);
        assert_eq!((digits[0].char(), digits[0].duration), (Some('9'), 4800));
        assert_eq!(t.stats().events_out, 7);
        let bad = InPacket {
            seq,
            timestamp: start,
            marker: false,
            payload: &[1, 2, 3],
        };
        assert!(t.push_event(&bad, &mut out).is_err());
        assert_eq!(t.stats().events_malformed, 1);
        let mut plain = Transcoder::new(Box::new(Pcmu), Box::new(Pcma), 20).unwrap();
        assert!(plain.push_event(&bad, &mut out).is_err());
    }

    #[test]
    fn encoder_refuses_a_ptime_its_codec_cannot_send() {
        let e = StreamEncoder::new(Box::new(Pcmu), 8000, 25, 0, 0).unwrap_err();
        assert!(e.to_string().contains("25 ms"), "{e}");
    }
}
