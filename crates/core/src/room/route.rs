//! Routing: a publisher's packet is noted at its publisher (reception figures, transport-wide
//! arrivals, its retransmission buffer, its simulcast layer's rate), read once into a
//! [`SourcePacket`], and handed to each subscription of its stream's feed; what goes to a
//! receiver transcoded is decoded once and encoded once per format after the loop; keyframes
//! the packet made necessary are asked for last. A mixing room's audio goes into the mix
//! instead, and comes out on the room's ticks ([`Room::mix_due`]).

use std::time::Instant;

use secrelay_media::transcode::InPacket;
use secrelay_wire::demux::RtpFacts;

use crate::counters::DropReason;
use crate::feedback::unwrap_rtx;
use crate::leg::CodecId;
use crate::room::member::{Member, Stream, VideoIn, MAX_STREAMS, STREAM_IDLE};
use crate::room::out::{Out, RoomOut};
use crate::room::pipe::PipedPacket;
use crate::room::source::{abs_send_time, LayerOf, MadePacket, SourcePacket};
use crate::room::subscription::{Cx, Source, Subscription};
use crate::room::{Fanned, Feed, MemberAt, Room};
use crate::transcode::{Cn, Dtmf, Format, TranscodeError, Work, CN_PT, EVENT_PT};

/// The stream id of a member's mix.
const MIX_SSRC: u32 = 0;

/// What a receiver gets of one packet.
enum Plan {
    /// The packet relayed, as this codec.
    Relay(CodecId),
    /// Transcoded into this format.
    Transcode(Format),
    /// Nothing, for this reason.
    Drop(DropReason),
}

/// A received RTP packet handed to routing: plain (unprotected) RTP, its header's fields as
/// read where the datagram arrived, and when it arrived.
#[derive(Debug, Clone, Copy)]
pub struct Received<'a> {
    /// The packet.
    pub rtp: &'a [u8],
    /// Its header, read where it arrived.
    pub facts: RtpFacts,
    /// When it arrived.
    pub received: Instant,
}

impl Room {
    /// Routes one unprotected RTP packet from the member at `at` ([`Room::route_run`] of one).
    pub fn route(
        &mut self,
        at: MemberAt,
        rtp: &[u8],
        facts: &RtpFacts,
        received: Instant,
        out: &mut RoomOut,
    ) -> bool {
        let one = Received {
            rtp,
            facts: *facts,
            received,
        };
        self.route_run(at, std::slice::from_ref(&one), out)
    }

    /// Routes unprotected RTP packets from the member at `at`, in the order it sent them (a
    /// receive batch's run of them; each noted for the source's RTCP reception figures whether
    /// or not it publishes): each subscribed member that can take a packet gets a copy, with
    /// the payload type, SSRC, sequence number and timestamp it sees, put on `out` with where
    /// and how it goes. Counted at the source (routed, or not a publisher) and at each receiver
    /// (forwarded, unslotted, or why not). A retransmission (RTX) from the source is unwrapped
    /// and routed as the packet it repairs; a video packet is kept for receivers' NACKs; a video
    /// stream new to a receiver asks its publisher for a keyframe. `false` if there is no such
    /// member.
    ///
    /// Consecutive packets of one feed and codec are handed out receiver by receiver (each
    /// receiver's copies of the run one after another, in order), so that a receiver's subscription,
    /// numbering and SRTP context are loaded once for the run rather than once per packet. A
    /// packet that may change the publisher's feeds (a stream new or not yet placed, a
    /// retransmission) first sends out the packets before it.
    pub fn route_run(&mut self, at: MemberAt, run: &[Received<'_>], out: &mut RoomOut) -> bool {
        out.begin(self.tag);
        let Some(ix) = self.member_at(at).map(|m| m.at.ix) else {
            return false;
        };
        let m = &self.members[ix];
        if let Some(key) = m.recording {
            // Copies of their own (they leave the room for the recorder's thread and never
            // come back): the pool's buffers stay with the copies that return to it.
            for p in run {
                out.push(Out::Record {
                    key,
                    at: p.received,
                    buf: p.rtp.to_vec(),
                });
            }
        }
        if !m.gate.silence_media && m.inject.is_idle() {
            self.route_member_run(ix, run, out);
            return true;
        }
        let mut made = std::mem::take(&mut self.scratch.made);
        let rewritten = self.rewrite_run(ix, run, &mut made);
        self.route_member_run(ix, &rewritten, out);
        drop(rewritten);
        self.scratch.made = made;
        true
    }

    /// The run of a member that plays DTMF ([`inject`](super::inject)) or is silenced
    /// ([`gate`](super::gate)), its audio packets made again into `made` (digits in place of
    /// audio, silence in place of audio); the rest as it is. A packet silenced in a format
    /// with no silence is noted at the member and dropped here.
    fn rewrite_run<'a>(
        &mut self,
        ix: u32,
        run: &[Received<'a>],
        made: &'a mut Vec<u8>,
    ) -> Vec<Received<'a>> {
        let receivers_take_events = self.order.iter().all(|&r| {
            let m = &self.members[r];
            r == ix || !m.role.subscribes || m.neg.takes_events()
        });
        let src = &mut self.members[ix];
        let (mut plan, mut one) = (Vec::with_capacity(run.len()), Vec::new());
        made.clear();
        for p in run {
            let codec = src.neg.codec(p.facts.payload_type);
            let mut facts = p.facts;
            let start = made.len();
            if let Some(c) = codec.filter(|c| !src.inject.is_idle() && !c.is_supplemental()) {
                if let Some(f) = super::inject::play(src, p, c, receivers_take_events, &mut one) {
                    made.extend_from_slice(&one);
                    facts = f;
                }
            }
            let injected = made.len() > start;
            let entry = match src.neg.codec(facts.payload_type) {
                Some(c) if src.gate.silences(c) => {
                    let from = if injected { &made[start..] } else { p.rtp };
                    if super::gate::silence_packet(from, usize::from(facts.header_len), c, &mut one)
                    {
                        made.truncate(start);
                        made.extend_from_slice(&one);
                        Some((Some(start..made.len()), facts))
                    } else {
                        // Noted for its reception like any packet it sends, then dropped.
                        src.rtcp
                            .on_rtp(&self.rtcp, &facts, c.clock_rate(), p.received);
                        src.leg.counters_mut().drop(DropReason::MediaBlocked);
                        made.truncate(start);
                        None
                    }
                }
                _ if injected => Some((Some(start..made.len()), facts)),
                _ => Some((None, facts)),
            };
            plan.push(entry);
        }
        let made: &'a [u8] = made;
        run.iter()
            .zip(plan)
            .filter_map(|(p, entry)| {
                let (range, facts) = entry?;
                Some(match range {
                    None => *p,
                    Some(r) => Received {
                        rtp: &made[r],
                        facts,
                        received: p.received,
                    },
                })
            })
            .collect()
    }

    /// [`Room::route_run`] for the member at place `ix`, its packets through its gate.
    fn route_member_run(&mut self, ix: u32, run: &[Received<'_>], out: &mut RoomOut) {
        let mut pending: Vec<SourcePacket<'_>> =
            crate::media_batch::recycle(std::mem::take(&mut self.scratch.run));
        let mut feed = 0;
        for p in run {
            if !self.settled(ix, p) {
                self.fan_out_run(feed, &mut pending, out);
            }
            let Some((f, pkt)) = self.note(ix, p, out) else {
                continue;
            };
            // A run is one codec of one feed: a receiver's plan (relayed, transcoded, dropped)
            // is then the same for each of its packets, and a change of codec (an event, comfort
            // noise, a switch) sees the transcoding the packets before it set up.
            if f != feed || pending.last().is_some_and(|q| q.codec != pkt.codec) {
                self.fan_out_run(feed, &mut pending, out);
                feed = f;
            }
            pending.push(pkt);
        }
        self.fan_out_run(feed, &mut pending, out);
        self.scratch.run = crate::media_batch::recycle(pending);
    }

    /// Whether a packet from the member at place `ix` goes on a stream it already has, placed
    /// (its feed will not change: audio, a simulcast layer already bound, or video of a member
    /// that sends no simulcast), and is no retransmission.
    fn settled(&self, ix: u32, p: &Received<'_>) -> bool {
        let src = &self.members[ix];
        let Some(codec) = src.neg.codec(p.facts.payload_type) else {
            return false;
        };
        let placed = |k: usize| src.streams[k].layer.is_some() || src.simulcast.is_empty();
        src.stream_index(p.facts.ssrc)
            .is_some_and(|k| codec.is_audio() || placed(k))
    }

    /// A packet from the member at place `ix`, noted at the source: its transport-wide
    /// arrival, a retransmission unwrapped and routed, and [`Room::note_at`]. The packet and its
    /// feed when it is for the feed's subscriptions.
    fn note<'a>(
        &mut self,
        ix: u32,
        p: &Received<'a>,
        out: &mut RoomOut,
    ) -> Option<(u32, SourcePacket<'a>)> {
        let (rtp, facts) = (p.rtp, &p.facts);
        let src = &mut self.members[ix];
        // Every packet the member sends counts for its transport-wide feedback, whatever
        // becomes of it (its bandwidth probes too).
        if let (Some(cc), Some(&[a, b])) = (src.cc.as_mut(), facts.ext.get(rtp, src.neg.ext.twcc)) {
            if let Some(t) = cc.arrived(u16::from_be_bytes([a, b]), facts.ssrc, p.received) {
                self.timers.arm(src);
                out.push(Out::Wake(t));
            }
        }
        if src.neg.codec(facts.payload_type).is_none() {
            if let Some((apt, primary)) = src.repaired_stream(rtp, facts) {
                self.route_repair(ix, rtp, facts, (apt, primary), p.received, out);
                return None;
            }
        }
        self.note_at(ix, rtp, facts, p.received, true, out)
    }

    /// A retransmission the publisher sent (an upstream NACK's answer, payload type `apt` of
    /// stream `primary`): the packet it repairs is routed as if it had come the first time.
    fn route_repair(
        &mut self,
        ix: u32,
        rtx: &[u8],
        facts: &RtpFacts,
        (apt, primary): (u8, u32),
        received: Instant,
        out: &mut RoomOut,
    ) {
        if self.members[ix].gate.silence_media {
            // What it repairs went on as silence (or not at all): nothing to repair.
            let c = self.members[ix].leg.counters_mut();
            c.drop(DropReason::MediaBlocked);
            return;
        }
        let mut plain = std::mem::take(&mut self.scratch.rtx);
        crate::copy_count::count();
        if unwrap_rtx(&mut plain, rtx, usize::from(facts.header_len), apt, primary) {
            self.members[ix].leg.counters_mut().feedback.rtx_in += 1;
            let facts = RtpFacts {
                ssrc: primary,
                payload_type: apt,
                sequence: u16::from_be_bytes([plain[2], plain[3]]),
                ..*facts
            };
            self.route_at(ix, &plain, &facts, received, out);
        } else {
            let c = self.members[ix].leg.counters_mut();
            c.drop(DropReason::PaddingOnly);
        }
        self.scratch.rtx = plain;
    }

    /// An unwrapped retransmission from the member at place `ix`, noted and handed out at once.
    fn route_at(
        &mut self,
        ix: u32,
        rtp: &[u8],
        facts: &RtpFacts,
        received: Instant,
        out: &mut RoomOut,
    ) {
        if let Some((feed, pkt)) = self.note_at(ix, rtp, facts, received, false, out) {
            self.fan_out(feed, std::slice::from_ref(&pkt), out);
        }
    }

    /// A packet from the member at place `ix`, noted at the source (its reception figures when
    /// `reception`: not for an unwrapped retransmission, whose RTX packet was; its stream, the
    /// retransmission buffer, its simulcast layer's rate, the room's replicas) and read once:
    /// the packet and its feed when the feed's subscriptions get it (not when it is dropped, or
    /// mixed).
    fn note_at<'a>(
        &mut self,
        ix: u32,
        rtp: &'a [u8],
        facts: &RtpFacts,
        received: Instant,
        reception: bool,
        out: &mut RoomOut,
    ) -> Option<(u32, SourcePacket<'a>)> {
        let src = &mut self.members[ix];
        let codec = src.neg.codec(facts.payload_type);
        if reception {
            let clock = codec.map_or(8_000, CodecId::clock_rate);
            src.rtcp.on_rtp(&self.rtcp, facts, clock, received);
        }
        if !src.role.publishes {
            src.leg.counters_mut().drop(DropReason::NotPublisher);
            return None;
        }
        if let Some(why) = codec.and_then(|c| src.gate.stops(c)) {
            src.leg.counters_mut().drop(why);
            return None;
        }
        src.leg.counters_mut().routed += 1;
        let Some(codec) = codec else {
            // A payload type it did not negotiate: no receiver can take it.
            self.no_codec(ix);
            return None;
        };
        let abs_send = abs_send_time(self.rtcp.epoch.0, received);
        let level = src.neg.ext.audio_level;
        let mut pkt = SourcePacket::read(rtp, facts, codec, level, (received, abs_send));
        if self.mixing.is_some() && codec.is_transcodable() {
            // The replicas made before the room mixed relay each talker as it is (their
            // viewers hear every talker, unmixed): the mix is made here only.
            if !self.pipes.is_empty() {
                let packet = PipedPacket {
                    facts: *facts,
                    layer: None,
                    received,
                };
                self.pipe_out(ix, rtp, packet, out);
            }
            self.mix_in(ix, &pkt, codec, out);
            return None;
        }
        let Some(k) = self.stream_of(ix, &pkt) else {
            let src = &mut self.members[ix];
            src.leg.counters_mut().drop(DropReason::TooManyStreams);
            return None;
        };
        let src = &mut self.members[ix];
        let stream = &mut src.streams[k];
        stream.last = received;
        if pkt.video {
            // Kept for receivers' NACKs (one buffer per source stream, whatever the viewers).
            let v = stream.video.get_or_insert_with(VideoIn::default);
            v.buffer.store(rtp, facts);
        }
        let layer = stream.layer;
        if let Some((g, l)) = layer {
            let layers = &mut src.simulcast[g];
            layers.note(l, rtp.len(), received);
            pkt.layer = Some(LayerOf {
                k: l,
                info: layers.info(received),
            });
        }
        let feed = stream.feed;
        if !self.pipes.is_empty() {
            let packet = PipedPacket {
                facts: *facts,
                layer,
                received,
            };
            self.pipe_out(ix, rtp, packet, out);
        }
        Some((feed, pkt))
    }

    /// A packet of no codec from the member at place `ix`: dropped, counted at each receiver.
    fn no_codec(&mut self, ix: u32) {
        for &r in &self.order {
            let m = &mut self.members[r];
            if r != ix && m.role.subscribes {
                m.leg.counters_mut().drop(DropReason::NoCodec);
            }
        }
    }

    /// Hands the run `pending` (consecutive packets of feed `f`, emptied) to the feed's
    /// subscriptions ([`Room::fan_out`]).
    fn fan_out_run(&mut self, f: u32, pending: &mut Vec<SourcePacket<'_>>, out: &mut RoomOut) {
        if !pending.is_empty() {
            self.fan_out(f, pending, out);
            pending.clear();
        }
    }

    /// Hands `pkts` (consecutive packets of feed `f`, all of one codec) to each subscription
    /// of the feed, each taking them all in order before the next does: relayed, or collected
    /// for transcoding (then each packet decoded once and encoded once per format), or dropped
    /// and counted at the receiver; then the keyframes they made necessary are asked for.
    fn fan_out(&mut self, f: u32, pkts: &[SourcePacket<'_>], out: &mut RoomOut) {
        let Some(last) = pkts.last() else { return };
        let Room {
            members,
            feeds,
            subs,
            scratch,
            rtcp,
            transcoding,
            ..
        } = self;
        let feed = &feeds[f];
        // A telephone-event or comfort-noise packet goes with its stream's audio: where that
        // audio is transcoded for a receiver, so is it (numbered in the transcoded stream).
        let event_audio = match last.codec {
            c if c.is_supplemental() => {
                transcoding.stream_codec(feed.publisher.id, last.facts.ssrc)
            }
            _ => None,
        };
        let sender = members
            .get(feed.publisher.ix)
            .map(Sender::of)
            .unwrap_or_default();
        let mut cx = Cx {
            out,
            keyframes: &mut scratch.keyframes,
            keyframe_interval: rtcp.keyframe_interval,
        };
        let list = &feed.subs;
        for (i, &Fanned { sub: s, receiver }) in list.iter().enumerate() {
            prefetch_ahead(list, i, subs, members);
            let (Some(sub), Some(r)) = (subs.get_mut(s), members.get_mut(receiver)) else {
                continue;
            };
            debug_assert_eq!(
                sub.receiver, receiver,
                "a feed names its subscriptions' receivers"
            );
            if !r.role.subscribes {
                continue;
            }
            match plan(last.codec, event_audio, sender, r) {
                Plan::Relay(c) => {
                    for pkt in pkts {
                        sub.forward(s, pkt, c, r, &mut cx);
                    }
                }
                Plan::Transcode(format) => scratch.transcode_run.push((s, format)),
                Plan::Drop(why) => r.leg.counters_mut().drops[why] += pkts.len() as u64,
            }
        }
        let publisher = feed.publisher;
        if !self.scratch.transcode_run.is_empty() {
            let run = std::mem::take(&mut self.scratch.transcode_run);
            for pkt in pkts {
                self.scratch.transcode_to.extend_from_slice(&run);
                self.transcode(publisher, pkt, out);
            }
            self.scratch.transcode_run = run;
            self.scratch.transcode_run.clear();
        }
        self.ask_keyframes(last.received, out);
    }

    /// The place in the publisher's streams of `pkt`'s stream: made the first time (with its
    /// feed, subscribed by every subscriber), moved to its simulcast section's feed when its
    /// `rid` names a layer only after its first packets. `None` for a new stream of a member
    /// at [`MAX_STREAMS`] none of whose streams is idle.
    fn stream_of(&mut self, ix: u32, pkt: &SourcePacket<'_>) -> Option<usize> {
        let ssrc = pkt.facts.ssrc;
        let src = &mut self.members[ix];
        let known = src.stream_index(ssrc);
        if let Some(k) = known.filter(|&k| src.streams[k].layer.is_some() || !pkt.video) {
            return Some(k);
        }
        if known.is_none()
            && src.streams.len() >= MAX_STREAMS
            && !self.give_up_idle_stream(ix, pkt.received)
        {
            return None;
        }
        let src = &mut self.members[ix];
        let layer = match pkt.video && !src.simulcast.is_empty() {
            true => layer_of(src, pkt),
            false => None,
        };
        if let Some(k) = known.filter(|_| layer.is_none()) {
            return Some(k);
        }
        let feed = match layer {
            Some((g, _)) => match self.members[ix].layer_feeds[g] {
                Some(f) => f,
                None => {
                    let f = self.make_feed(ix, Some(g), ssrc);
                    self.members[ix].layer_feeds[g] = Some(f);
                    f
                }
            },
            None => self.make_feed(ix, None, ssrc),
        };
        let src = &mut self.members[ix];
        match known {
            // Its first packets named no layer: it leaves the feed they made for its layer's.
            Some(k) => {
                let old = std::mem::replace(&mut src.streams[k].feed, feed);
                src.streams[k].layer = layer;
                self.drop_feed(old);
                Some(k)
            }
            None => Some(src.add_stream(Stream {
                ssrc,
                feed,
                layer,
                video: None,
                last: pkt.received,
            })),
        }
    }

    /// Gives up the stream of the member at place `ix` whose last packet is oldest, if that is
    /// [`STREAM_IDLE`] before `now`: its feed and subscriptions (unless a simulcast layer
    /// still on the feed keeps them) and its transcoding go. Whether one was given up.
    fn give_up_idle_stream(&mut self, ix: u32, now: Instant) -> bool {
        let src = &mut self.members[ix];
        let Some(k) = (0..src.streams.len()).min_by_key(|&k| src.streams[k].last) else {
            return false;
        };
        if now.saturating_duration_since(src.streams[k].last) < STREAM_IDLE {
            return false;
        }
        let gone = src.remove_stream(k);
        let publisher = src.at.id;
        if !src.streams.iter().any(|s| s.feed == gone.feed) {
            if let Some((g, _)) = gone.layer {
                src.layer_feeds[g] = None;
            }
            self.drop_feed(gone.feed);
        }
        self.transcoding.remove_stream(publisher, gone.ssrc);
        true
    }

    /// A feed of the publisher at place `ix` (its simulcast section `group`, or one stream),
    /// made for `ssrc`: every other member that subscribes is subscribed to it.
    fn make_feed(&mut self, ix: u32, group: Option<usize>, ssrc: u32) -> u32 {
        let publisher = self.members[ix].at;
        let f = self.feeds.insert(Feed {
            publisher,
            group,
            ssrc,
            subs: Vec::new(),
        });
        let receivers: Vec<u32> = self
            .order
            .iter()
            .copied()
            .filter(|&r| r != ix && self.members[r].hears(publisher.id))
            .collect();
        for r in receivers {
            self.subscribe(r, f);
        }
        f
    }

    /// The transcoded copies of `pkt` (of `codec`, from `publisher`) for the subscriptions
    /// collected in the scratch list: decoded once, encoded once per distinct format, and each
    /// encoded packet sent by each subscription of its format. Counted at the source (decoded,
    /// encoded, or undecodable) and at each receiver (forwarded and transcoded, or why not).
    fn transcode(&mut self, publisher: MemberAt, pkt: &SourcePacket<'_>, out: &mut RoomOut) {
        let codec = pkt.codec;
        let Room {
            members,
            subs,
            transcoding,
            scratch,
            ..
        } = self;
        let (to, formats) = (&mut scratch.transcode_to, &mut scratch.formats);
        formats.clear();
        for (_, f) in to.iter() {
            if !formats.contains(f) {
                formats.push(*f);
            }
        }
        let (source, ssrc) = (publisher.id, pkt.facts.ssrc);
        let input = InPacket {
            seq: pkt.facts.sequence,
            timestamp: pkt.facts.timestamp,
            marker: pkt.facts.marker,
            payload: pkt.original().unpadded(),
        };
        let done = if codec.is_event() {
            transcoding
                .event(source, ssrc, codec, &input, formats)
                .map(|()| Work::default())
        } else if codec == CodecId::ComfortNoise {
            transcoding.comfort_noise(source, ssrc, &input, formats)
        } else {
            transcoding.audio(source, ssrc, codec, &input, formats)
        };
        if !note_work(done, codec, publisher, members, subs, to) {
            to.clear();
            return;
        }
        for f in formats.iter() {
            for p in transcoding.ready(source, ssrc, *f) {
                // Events go out in the telephone-event format of the output's clock.
                let out_codec = match p.payload_type {
                    EVENT_PT => CodecId::event_for_clock(f.codec.clock_rate()),
                    CN_PT => Some(CodecId::ComfortNoise),
                    _ => Some(f.codec),
                };
                let made = MadePacket {
                    seq: p.seq,
                    ts: p.timestamp,
                    marker: p.marker,
                    payload: &p.payload,
                    received: pkt.received,
                    abs_send: pkt.abs_send,
                };
                for &(s, _) in to.iter().filter(|(_, g)| g == f) {
                    let Some(sub) = subs.get_mut(s) else { continue };
                    let Some(r) = members.get_mut(sub.receiver) else {
                        continue;
                    };
                    // A receiver that took no telephone-event of that clock (or no comfort
                    // noise) gets none.
                    match out_codec.filter(|c| r.neg.takes(*c)) {
                        Some(oc) => sub.send_made(s, &made, oc, r, out),
                        None => r.leg.counters_mut().drop(DropReason::NoCodec),
                    }
                }
            }
        }
        to.clear();
    }

    /// A mixing room: the audio of the member at place `ix` goes into the mix (sent on the
    /// room's ticks), not on; the first audio starts the ticks.
    fn mix_in(&mut self, ix: u32, pkt: &SourcePacket<'_>, codec: CodecId, out: &mut RoomOut) {
        let Some(mix) = self.mixing.as_mut() else {
            return;
        };
        let src = &mut self.members[ix];
        let input = InPacket {
            seq: pkt.facts.sequence,
            timestamp: pkt.facts.timestamp,
            marker: pkt.facts.marker,
            payload: pkt.original().unpadded(),
        };
        let ticking = mix.next_tick().is_some();
        match mix.audio(src.at.id, pkt.facts.ssrc, codec, &input, pkt.received) {
            Ok(w) => src.leg.counters_mut().decoded += w.decoded,
            Err(TranscodeError::Undecodable(_)) => {
                src.leg.counters_mut().drop(DropReason::Undecodable);
            }
            Err(TranscodeError::Codec(why)) => {
                tracing::warn!(codec = codec.name(), %why, "mixing failed; packet dropped");
                src.leg.counters_mut().drop(DropReason::NoCodec);
            }
        }
        if let (false, Some(t)) = (ticking, mix.next_tick()) {
            out.push(Out::Wake(t));
        }
    }

    /// Sends each member its mix for every tick due by `now` (a mixing room; nothing
    /// otherwise): the sum of the others' audio, encoded in its own format and put on `out` as
    /// routed copies are, by its subscription to the mix (one stream, as a telephone takes).
    /// Counted as forwarded and transcoded at the receiver; the encodes once each
    /// ([`crate::transcode::Mixing::encoded_for`]: a talker's own mix at the talker, a shared
    /// mix at one of its receivers).
    pub fn mix_due(&mut self, now: Instant, out: &mut RoomOut) {
        out.begin(self.tag);
        let Room {
            members,
            subs,
            mixing,
            scratch,
            rtcp,
            order,
            ..
        } = self;
        let Some(mix) = mixing.as_mut() else {
            return;
        };
        let (receivers, at) = (&mut scratch.mix_receivers, &mut scratch.mix_at);
        while mix.next_tick().is_some_and(|t| t <= now) {
            receivers.clear();
            at.clear();
            for &ix in order.iter() {
                let m = &members[ix];
                if !m.role.subscribes || m.leg.copy_target().is_none() {
                    continue;
                }
                if let Some(f) = m.neg.format {
                    receivers.push((m.at.id, f));
                    at.push(ix);
                }
            }
            if let Err(e) = mix.tick(now, receivers) {
                tracing::warn!(?e, "mixing tick failed");
                continue;
            }
            let abs_send = abs_send_time(rtcp.epoch.0, now);
            for (&(id, format), &ix) in receivers.iter().zip(at.iter()) {
                let r = &mut members[ix];
                r.leg.counters_mut().encoded += mix.encoded_for(id);
                for p in mix.ready(id) {
                    let s = mix_subscription(r, subs);
                    let made = MadePacket {
                        seq: p.seq,
                        ts: p.timestamp,
                        marker: p.marker,
                        payload: p.payload,
                        received: now,
                        abs_send,
                    };
                    subs[s].send_made(s, &made, format.codec, r, out);
                }
            }
        }
    }
}

/// How many subscriptions ahead a fan-out asks for the lines it reads first of a subscription
/// and its receiver, and for the rest of the receiver's (found through the subscription, in
/// cache by then). For a packet of a received batch, the first [`SUB_AHEAD`] were asked for
/// before the batch was routed ([`HintStage`]).
const SUB_AHEAD: usize = 8;
const RECEIVER_AHEAD: usize = 4;

/// A stage of the hints a batch of received packets gives before it is routed
/// ([`Room::hint_route`]). Routing a packet reads a chain of lines, each found through the one
/// before (its sender, the sender's list of streams, the stream's feed, the feed's list of
/// subscriptions, each subscription and receiver), all cold in a shard of many rooms. Asked
/// for one stage at a time over the whole batch, each stage reading what the one before asked
/// for, the lines of all its packets load together instead of one after another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HintStage {
    Sender,
    Streams,
    Feed,
    Subscriptions,
    Receivers,
}

impl HintStage {
    /// The stage asked for before the batch's crypto runs: the senders' lines load meanwhile.
    pub(crate) const BEFORE_UNPROTECT: [HintStage; 1] = [HintStage::Sender];
    /// The stages asked for once it ran, before the batch is routed.
    pub(crate) const BEFORE_ROUTING: [HintStage; 4] = [
        HintStage::Streams,
        HintStage::Feed,
        HintStage::Subscriptions,
        HintStage::Receivers,
    ];
}

impl Room {
    /// Asks the CPU to start loading the lines of `stage` for a packet of `facts` from the
    /// member at place `ix` (a hint: it changes nothing, and a packet that is then dropped, or
    /// starts a stream, only wasted it).
    pub(crate) fn hint_route(&self, ix: u32, facts: &RtpFacts, stage: HintStage) {
        let Some(m) = self.members.get(ix) else {
            return;
        };
        let feed = || {
            let k = m.stream_index(facts.ssrc)?;
            Some(m.streams.get(k)?.feed)
        };
        let listed = || feed().and_then(|f| self.feeds.get(f)).map(|f| &f.subs);
        match stage {
            HintStage::Sender => m.prefetch_sender(facts.payload_type),
            HintStage::Streams => m.prefetch_streams(),
            HintStage::Feed => {
                if let Some(f) = feed() {
                    self.feeds.prefetch(f, 1);
                }
            }
            HintStage::Subscriptions => {
                if let Some(list) = listed() {
                    secrelay_srtp::simd::prefetch::line(list.as_ptr().cast());
                }
            }
            HintStage::Receivers => {
                for &fanned in listed().into_iter().flatten().take(SUB_AHEAD) {
                    prefetch_first(fanned, &self.subs, &self.members);
                }
            }
        }
    }
}

/// Asks for what a fan-out reads first of `f`: the subscription, and its receiver's place and
/// role.
fn prefetch_first(
    f: Fanned,
    subs: &crate::slab::Slab<Subscription>,
    members: &crate::slab::Slab<Member>,
) {
    subs.prefetch(f.sub, 3);
    members.prefetch(f.receiver, 1);
    members.prefetch_at(f.receiver, std::mem::offset_of!(Member, role));
}

/// The hints a fan-out at place `i` of `list` gives: the first lines of the one [`SUB_AHEAD`]
/// places on, the receiver's lines a copy reads for the one [`RECEIVER_AHEAD`] on.
fn prefetch_ahead(
    list: &[Fanned],
    i: usize,
    subs: &crate::slab::Slab<Subscription>,
    members: &crate::slab::Slab<Member>,
) {
    if let Some(&f) = list.get(i + SUB_AHEAD) {
        prefetch_first(f, subs, members);
    }
    let ahead = list.get(i + RECEIVER_AHEAD);
    if let Some((sub, r)) = ahead.and_then(|f| Some((subs.get(f.sub)?, members.get(f.receiver)?))) {
        r.prefetch_copy(sub.slot);
    }
}

/// What of a sender decides how DTMF crosses to a receiver ([`transcoded_format`]).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Sender {
    /// It negotiated telephone-events.
    pub events: bool,
    /// Its leg asks for DTMF to cross as tones or events ([`crate::leg::Leg::dtmf_transcode`]).
    pub dtmf_transcode: bool,
    /// It negotiated comfort noise.
    pub cn: bool,
    /// Its leg asks for comfort noise to cross as noise or from silence
    /// ([`crate::leg::Leg::cn_transcode`]).
    pub cn_transcode: bool,
}

impl Sender {
    pub(crate) fn of(m: &Member) -> Sender {
        Sender {
            events: m.neg.sends_events(),
            dtmf_transcode: m.leg.dtmf_transcode(),
            cn: m.neg.sends_cn(),
            cn_transcode: m.leg.cn_transcode(),
        }
    }
}

/// What receiver `r` gets of a packet of `codec` (`event_audio`: the codec of the audio a
/// telephone-event or comfort-noise packet goes with, when that audio is transcoded here).
/// Such a packet goes where its audio goes: relayed beside relayed audio, through the
/// transcoder beside transcoded audio.
fn plan(codec: CodecId, event_audio: Option<CodecId>, sender: Sender, r: &Member) -> Plan {
    let audio = match codec.is_supplemental() {
        true => event_audio,
        false => Some(codec),
    };
    match audio.and_then(|a| transcoded_format(a, sender, r)) {
        None if r.neg.takes(codec) => Plan::Relay(codec),
        None => Plan::Drop(DropReason::NoCodec),
        Some(f) if r.leg.copy_target().is_some() => Plan::Transcode(f),
        Some(_) => Plan::Drop(DropReason::ReceiverNotReady),
    }
}

/// The format receiver `r` is sent `sender`'s audio of `codec` in when that audio goes
/// through the transcoder; `None` when it is relayed as it is (or `r` takes nothing the
/// gateway can encode).
///
/// Audio of a codec `r` did not take is decoded once and encoded in the first it took that
/// the gateway encodes; the sender's telephone-events go to a receiver without any as tones
/// in that audio. Where one side has telephone-events and the other has none and either's leg
/// asks for it ([`crate::leg::Leg::dtmf_transcode`]), the audio goes through the transcoder
/// even in a codec `r` took (kept in that codec) for DTMF to cross ([`Dtmf`]): as tones to a
/// receiver without events, as events heard in the audio to a receiver with events at its
/// codec's clock.
///
/// Comfort noise likewise ([`Cn`]): where one side has it and the other has none, and either's
/// leg asks for it ([`crate::leg::Leg::cn_transcode`]) or the audio is transcoded anyway, the
/// sender's comfort-noise packets become noise in the audio of a receiver without it, and a
/// sender's silent audio becomes comfort-noise packets for a receiver with it (at 8 kHz,
/// comfort noise's clock, in an 8 kHz codec).
pub(crate) fn transcoded_format(codec: CodecId, sender: Sender, r: &Member) -> Option<Format> {
    if !codec.is_transcodable() {
        return None;
    }
    let base = r.neg.format?;
    let takes = r.neg.takes(codec);
    let takes_events = r.neg.takes_events();
    let takes_cn = r.neg.takes_cn();
    if takes && sender.events == takes_events && sender.cn == takes_cn {
        // The common case, decided without the leg: relayed.
        return None;
    }
    let asked = sender.dtmf_transcode || r.leg.dtmf_transcode();
    let kept = if takes { codec } else { base.codec };
    let events_at_kept =
        CodecId::event_for_clock(kept.clock_rate()).is_some_and(|e| r.neg.takes(e));
    let dtmf = match (sender.events, takes_events) {
        (true, false) if asked || !takes => Dtmf::Tones,
        (false, true) if asked && events_at_kept => Dtmf::Detect,
        _ => Dtmf::Events,
    };
    let transcoded = !takes || dtmf != Dtmf::Events;
    let cn_asked = transcoded || sender.cn_transcode || r.leg.cn_transcode();
    let cn = match (sender.cn, takes_cn) {
        (true, false) if cn_asked => Cn::Noise,
        (false, true) if cn_asked && kept.clock_rate() == CodecId::ComfortNoise.clock_rate() => {
            Cn::Detect
        }
        _ => Cn::Pass,
    };
    if !transcoded && cn == Cn::Pass {
        return None;
    }
    Some(Format {
        codec: kept,
        ptime: crate::transcode::ptime_for(kept, base.ptime),
        dtmf,
        cn,
        amr_mode: base.amr_mode.filter(|_| kept.is_amr()),
    })
}

/// The simulcast layer of `pkt` among `src`'s sections (its `rid` binds its SSRC the first
/// time): (section, layer).
fn layer_of(src: &mut Member, pkt: &SourcePacket<'_>) -> Option<(usize, usize)> {
    let rid = pkt.facts.ext.get(pkt.rtp, src.neg.ext.rid);
    src.simulcast
        .iter_mut()
        .enumerate()
        .find_map(|(g, layers)| Some((g, layers.layer_of(pkt.facts.ssrc, rid)?)))
}

/// Counts what transcoding one packet did (at the source: decoded, encoded; or why nothing:
/// undecodable at the source, a codec failure at each receiver). Whether it made anything.
fn note_work(
    done: Result<Work, TranscodeError>,
    codec: CodecId,
    publisher: MemberAt,
    members: &mut crate::slab::Slab<Member>,
    subs: &crate::slab::Slab<Subscription>,
    to: &[(u32, Format)],
) -> bool {
    match done {
        Ok(w) => {
            if let Some(m) = members.get_mut(publisher.ix) {
                let c = m.leg.counters_mut();
                c.decoded += w.decoded;
                c.encoded += w.encoded;
            }
            true
        }
        Err(TranscodeError::Undecodable(_)) => {
            if let Some(m) = members.get_mut(publisher.ix) {
                m.leg.counters_mut().drop(DropReason::Undecodable);
            }
            false
        }
        Err(TranscodeError::Codec(why)) => {
            tracing::warn!(codec = codec.name(), %why, "transcoding failed; copies dropped");
            for (s, _) in to {
                if let Some(r) = subs.get(*s).and_then(|s| members.get_mut(s.receiver)) {
                    r.leg.counters_mut().drop(DropReason::NoCodec);
                }
            }
            false
        }
    }
}

/// Receiver `r`'s subscription to the room's mix (made with its first mix packet).
fn mix_subscription(r: &mut Member, subs: &mut crate::slab::Slab<Subscription>) -> u32 {
    if let Some(s) = r.mix_sub {
        return s;
    }
    let s = subs.insert(Subscription::new(r.at.ix, Source::Mix, MIX_SSRC, None));
    r.mix_sub = Some(s);
    r.subs.push(s);
    s
}
