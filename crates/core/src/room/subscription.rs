//! A subscription: one receiver's view of one source stream (a publisher's stream, a simulcast
//! section's layers, the room's mix, or media played to the receiver). It owns what that receiver sees of the stream: the
//! receive slot it holds and its numbering there (sequence and timestamp offsets, where its
//! stream started), the SSRC it is sent under outside a slot, and for simulcast the layer it is
//! sent and its VP8 picture numbering ([`LayerView`]). The slot's RTX numbering stays with the
//! slot (the section's RTX stream outlives the streams on it).
//!
//! What the subscription does: [`Subscription::forward`] a relayed packet,
//! [`Subscription::send_made`] a transcoded or mixed one, answer the receiver's NACKs
//! ([`Subscription::on_nack`]) and map its keyframe requests to the publisher's stream
//! ([`Subscription::on_keyframe_request`]). Every copy is written by
//! [`crate::room::copy::write_copy`] straight into the buffer that is protected and sent.

use std::time::{Duration, Instant};

use secrelay_wire::video::{vp8_descriptor, vp8_rewrite, Vp8Descriptor};

use crate::counters::DropReason;
use crate::feedback::Lookup;
use crate::leg::{CodecId, CopyTarget};
use crate::room::copy::{made_header, write_copy, Extensions, Fields, Framing, Original};
use crate::room::member::{Member, Tail};
use crate::room::out::{RoomOut, Sent};
use crate::room::source::{MadePacket, SourcePacket};
use crate::room::MemberAt;
use crate::simulcast::{Decision, LayerView};

/// What a subscription carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// A publisher's feed (the room's).
    Feed { publisher: MemberAt, feed: u32 },
    /// The room's mix (a mixing room's N−1 audio).
    Mix,
    /// Media played to the receiver ([`crate::room::player`]).
    Player,
}

/// A stream's numbering on the slot it holds.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Numbering {
    /// Added to the source's sequence numbers and timestamps.
    pub seq_offset: u16,
    pub ts_offset: u32,
    /// The first sequence number it was sent under on the slot: NACKs for earlier ones were
    /// about another stream.
    pub start: u16,
    /// The last sequence number and timestamp sent, and when.
    pub last: Option<(u16, u32)>,
    pub last_at: Option<Instant>,
    /// Its clock rate (for the gap the next stream on the slot leaves).
    pub clock_rate: u32,
}

/// One receiver's view of one source stream. See the [module documentation](self).
#[derive(Debug)]
pub(crate) struct Subscription {
    /// The receiver (its place in the room).
    pub receiver: u32,
    pub source: Source,
    /// The source SSRC it carries now (a simulcast section's: the layer sent now).
    pub source_ssrc: u32,
    /// The receive slot it holds.
    pub slot: Option<usize>,
    pub numbering: Numbering,
    /// The SSRC it is sent under outside a slot, once it was.
    pub outside: Option<u32>,
    /// For a simulcast section: which layer it is sent.
    pub view: Option<LayerView>,
}

/// Where one packet goes: the fields the receiver sees, on which slot, and whether its
/// place was taken just now.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Placed {
    pub fields: Fields,
    pub slot: Option<usize>,
    pub new: bool,
}

/// What a subscription needs from the routing call besides its receiver.
pub(crate) struct Cx<'a> {
    pub out: &'a mut RoomOut,
    /// Keyframes to ask publishers for once the packet is routed: (publisher, its SSRC).
    pub keyframes: &'a mut Vec<(MemberAt, u32)>,
    pub keyframe_interval: Duration,
}

/// One NACKed packet's fate.
enum Resend {
    Sent,
    Miss,
    /// Never received: ask the publisher for this one (its numbering).
    Upstream(u16),
}

/// Where a NACK is answered: the receiver's transport, and the instant (with our send time).
type Reply = (CopyTarget, Instant, u32);

impl Subscription {
    /// A receiver's subscription to `source`, whose first SSRC is `ssrc`; a simulcast
    /// section's gets a view of its layers (section `group` of the publisher).
    pub fn new(receiver: u32, source: Source, ssrc: u32, group: Option<usize>) -> Subscription {
        let view = match (source, group) {
            (Source::Feed { publisher, .. }, Some(g)) => Some(LayerView::new(publisher.id, g)),
            _ => None,
        };
        Subscription {
            receiver,
            source,
            source_ssrc: ssrc,
            slot: None,
            numbering: Numbering::default(),
            outside: None,
            view,
        }
    }

    /// The publisher, for a publisher's stream.
    pub fn publisher(&self) -> Option<MemberAt> {
        match self.source {
            Source::Feed { publisher, .. } => Some(publisher),
            Source::Mix | Source::Player => None,
        }
    }

    /// Forwards a relayed packet of `codec` to receiver `r` (this subscription is `me`): the
    /// simulcast layer it is sent (switching at the target's keyframe), its place (slot or
    /// not), a copy with its fields, and probes for a higher layer. Counted at the receiver.
    pub fn forward(
        &mut self,
        me: u32,
        pkt: &SourcePacket<'_>,
        codec: CodecId,
        r: &mut Member,
        cx: &mut Cx<'_>,
    ) {
        let Some(target) = r.leg.copy_target() else {
            r.leg.counters_mut().drop(DropReason::ReceiverNotReady);
            return;
        };
        if r.player.is_some() && !pkt.video {
            return r.leg.counters_mut().drop(DropReason::PlayedOver);
        }
        let estimate = r.cc.as_ref().map(|c| c.bwe.estimate_bps());
        let Some(switched) = self.layer_step(pkt, codec, estimate, cx) else {
            return;
        };
        let numbers = (pkt.facts.sequence, pkt.facts.timestamp);
        let placed = match self.place(me, r, codec, numbers, pkt.received) {
            Ok(p) => p,
            Err(why) => return r.leg.counters_mut().drop(why),
        };
        if let (true, true, false, Some(p)) = (placed.new, pkt.video, switched, self.publisher()) {
            // A video stream new to the receiver: its decoder needs a keyframe now. (A
            // simulcast layer taken at its keyframe needs none.)
            cx.keyframes.push((p, pkt.facts.ssrc));
        }
        let f = placed.fields;
        let clock = codec.clock_rate();
        r.rtcp
            .on_sent(f.ssrc, clock, f.ts, pkt.payload_len(), pkt.received);
        let picture = self.picture(pkt, switched);
        send_copy(pkt, &placed, picture, codec, r, target, cx.out);
        if let (Some(k), Some(_)) = (placed.slot, pkt.layer) {
            self.probe(pkt, (&placed, k), picture, r, target, cx.out);
        }
    }

    /// Sends receiver `r` a packet the gateway made (transcoded or mixed audio of `codec`),
    /// in the place this subscription (`me`) has, counted as forwarded and transcoded.
    pub fn send_made(
        &mut self,
        me: u32,
        made: &MadePacket<'_>,
        codec: CodecId,
        r: &mut Member,
        out: &mut RoomOut,
    ) {
        let Some(target) = r.leg.copy_target() else {
            return r.leg.counters_mut().drop(DropReason::ReceiverNotReady);
        };
        if r.player.is_some() && self.source != Source::Player {
            return r.leg.counters_mut().drop(DropReason::PlayedOver);
        }
        let placed = match self.place(me, r, codec, (made.seq, made.ts), made.received) {
            Ok(p) => p,
            Err(why) => return r.leg.counters_mut().drop(why),
        };
        let f = placed.fields;
        let clock = codec.clock_rate();
        r.rtcp
            .on_sent(f.ssrc, clock, f.ts, made.payload.len(), made.received);
        let header = made_header(made.marker);
        let original = Original {
            header: &header,
            payload: made.payload,
        };
        let twcc = rewrites(r)
            .then(|| r.next_twcc(made.received, header.len() + made.payload.len()))
            .flatten();
        let ext = rewrites(r).then(|| Extensions {
            ids: r.neg.ext,
            mid: r.mid_for(placed.slot, codec),
            audio_level: None,
            abs_send: made.abs_send,
            twcc,
        });
        out.send(r.at, target, Sent::Media(made.received), |buf| {
            write_copy(buf, original, f, ext.as_ref(), Framing::Media);
        });
        let c = r.leg.counters_mut();
        c.forwarded += 1;
        c.transcoded += 1;
    }

    /// The publisher's stream a keyframe request about this subscription's stream is for.
    pub fn on_keyframe_request(&self) -> Option<(MemberAt, u32)> {
        Some((self.publisher()?, self.source_ssrc))
    }

    /// Answers receiver `r`'s NACK for `lost` (its numbers on the SSRC it named, `ssrc`: the
    /// slot's when `on_slot`) from publisher `p`'s retransmission buffer: each packet found is
    /// sent again (RTX where the slot's section agreed on it, else the packet as first sent),
    /// the ones the gateway never received are put in `upstream` (the publisher's numbers),
    /// and the rest are misses. (resent, misses).
    pub fn on_nack(
        &self,
        lost: &[u16],
        (ssrc, on_slot): (u32, bool),
        (r, p): (&mut Member, &Member),
        reply: Reply,
        out: &mut RoomOut,
        upstream: &mut Vec<u16>,
    ) -> (u64, u64) {
        let slot = self.slot.filter(|_| on_slot);
        let n = slot.map(|_| self.numbering).unwrap_or_default();
        let (mut resent, mut misses) = (0, 0);
        for &seq in lost {
            if slot.is_some() && seq.wrapping_sub(n.start) >= 0x8000 {
                // Sent under this SSRC for a stream the slot carried before.
                misses += 1;
                continue;
            }
            let ask = Ask {
                ssrc,
                seq,
                source_seq: seq.wrapping_sub(n.seq_offset),
                ts_offset: n.ts_offset,
                slot,
            };
            match self.resend(ask, (r, p), reply, out) {
                Resend::Sent => resent += 1,
                Resend::Miss => misses += 1,
                Resend::Upstream(s) => upstream.push(s),
            }
        }
        (resent, misses)
    }

    /// One NACKed packet: found in the publisher stream's buffer and sent again, or not.
    fn resend(
        &self,
        ask: Ask,
        (r, p): (&mut Member, &Member),
        reply: Reply,
        out: &mut RoomOut,
    ) -> Resend {
        let (target, now, abs_send) = reply;
        let Some(v) = p.stream(self.source_ssrc).and_then(|s| s.video.as_ref()) else {
            return Resend::Miss;
        };
        let (packet, facts) = match v.buffer.get(ask.source_seq) {
            Lookup::Found(packet, facts) => (packet, facts),
            Lookup::NeverReceived => return Resend::Upstream(ask.source_seq),
            Lookup::Gone => return Resend::Miss,
        };
        let codec = p.neg.codec(facts.payload_type);
        let (Some(codec), Some(pt)) = (codec, codec.and_then(|c| r.neg.pt(c))) else {
            return Resend::Miss;
        };
        let fields = Fields {
            pt,
            ssrc: ask.ssrc,
            seq: ask.seq,
            ts: facts.timestamp.wrapping_add(ask.ts_offset),
        };
        let original = Original::of(packet, &facts);
        let rtx = ask.slot.and_then(|k| {
            let m = r.leg.media().get(r.slots[k].section)?;
            Some((k, m.feedback.rtx_pt(pt)?, m.feedback.rtx_ssrc))
        });
        match rtx {
            Some((k, rtx_pt, rtx_ssrc)) => {
                let seq = r.slots[k].next_rtx_seq();
                let framing = Framing::Rtx {
                    pt: rtx_pt,
                    ssrc: rtx_ssrc,
                    seq,
                };
                // An RTX packet is a new packet: its own transport-wide number.
                let twcc = rewrites(r)
                    .then(|| r.next_twcc(now, packet.len()))
                    .flatten();
                let audio_level = (p.neg.ext.audio_level != 0)
                    .then(|| facts.ext.get(packet, p.neg.ext.audio_level))
                    .flatten();
                let ext = rewrites(r).then(|| Extensions {
                    ids: r.neg.ext,
                    mid: r.mid_for(ask.slot, codec),
                    audio_level,
                    abs_send,
                    twcc,
                });
                let view = self.view.as_ref().filter(|_| codec == CodecId::Vp8);
                out.send(r.at, target, Sent::Media(now), |buf| {
                    let at = write_copy(buf, original, fields, ext.as_ref(), framing);
                    if let Some(v) = view {
                        renumber_again(v, buf, at);
                    }
                });
            }
            // The packet again, byte for byte as it was first sent (same header, same
            // payload): its SRTP index protects the same bytes again. Not for a receiver
            // whose copies carry per-send extensions (its first copy's header is not kept):
            // that would protect other bytes under the index.
            None if !rewrites(r) => {
                out.send(r.at, target, Sent::Media(now), |buf| {
                    write_copy(buf, original, fields, None, Framing::Media);
                });
            }
            None => return Resend::Miss,
        }
        Resend::Sent
    }

    /// Where a packet of `codec` numbered `(seq, ts)` goes to receiver `r`: on the slot this
    /// subscription (`me`) holds, or takes if one is free and its section accepted the codec
    /// (continuing the slot's numbering); else, unless the receiver demultiplexes by mid,
    /// outside a slot under an SSRC of its own.
    fn place(
        &mut self,
        me: u32,
        r: &mut Member,
        codec: CodecId,
        (seq, ts): (u16, u32),
        now: Instant,
    ) -> Result<Placed, DropReason> {
        let mut new = false;
        if self.slot.is_none() && r.free_slots > 0 {
            new = self.take_slot(me, r, codec, (seq, ts));
        }
        if let Some((k, pt)) = self.slot.and_then(|k| Some((k, r.slots[k].pt(codec)?))) {
            let n = &mut self.numbering;
            let out = (seq.wrapping_add(n.seq_offset), ts.wrapping_add(n.ts_offset));
            n.last = Some(out);
            n.last_at = Some(now);
            let fields = Fields {
                pt,
                ssrc: r.slots[k].ssrc,
                seq: out.0,
                ts: out.1,
            };
            return Ok(Placed {
                fields,
                slot: Some(k),
                new,
            });
        }
        // A browser binds each section's track by the `mid` of what comes: a stream outside a
        // slot under an occupied section's mid would take that section over. It waits for a
        // section of its own (a renegotiation gives one).
        if r.neg.ext.mid != 0 {
            return Err(DropReason::NoSlot);
        }
        let pt = r.neg.pt(codec).ok_or(DropReason::NoCodec)?;
        r.leg.counters_mut().unslotted += 1;
        let ssrc = match self.outside {
            Some(s) => s,
            None => {
                let s = r.fresh_ssrc();
                r.seen.insert(s, (me, false));
                self.outside = Some(s);
                new = true;
                s
            }
        };
        let fields = Fields { pt, ssrc, seq, ts };
        Ok(Placed {
            fields,
            slot: None,
            new,
        })
    }

    /// Takes the first free slot of `r` whose section accepted `codec`, continuing the slot's
    /// numbering one 20 ms frame after its last packet (the first stream on a slot passes its
    /// numbers unchanged). Whether one was taken.
    fn take_slot(
        &mut self,
        me: u32,
        r: &mut Member,
        codec: CodecId,
        (seq, ts): (u16, u32),
    ) -> bool {
        let Some(k) = r
            .slots
            .iter()
            .position(|s| s.holder.is_none() && s.pt(codec).is_some())
        else {
            return false;
        };
        let slot = &mut r.slots[k];
        slot.holder = Some(me);
        r.free_slots -= 1;
        let n = &mut self.numbering;
        (n.seq_offset, n.ts_offset) = match slot.tail {
            Some(t) => {
                let gap = t.clock_rate.max(codec.clock_rate()) / 50;
                (
                    t.last.0.wrapping_add(1).wrapping_sub(seq),
                    t.last.1.wrapping_add(gap).wrapping_sub(ts),
                )
            }
            None => (0, 0),
        };
        n.start = seq.wrapping_add(n.seq_offset);
        n.clock_rate = codec.clock_rate();
        r.seen.insert(slot.ssrc, (me, true));
        self.slot = Some(k);
        true
    }

    /// Gives up what it holds at receiver `r` (the publisher or the receiver is leaving): its
    /// slot, which keeps where the stream stopped for the next one, and its SSRCs.
    pub fn release(&mut self, r: &mut Member) {
        if let Some(k) = self.slot.take() {
            let s = &mut r.slots[k];
            if let Some(last) = self.numbering.last {
                s.tail = Some(Tail {
                    last,
                    clock_rate: self.numbering.clock_rate,
                });
            }
            s.holder = None;
            r.free_slots += 1;
            r.seen.remove(&s.ssrc);
        }
        self.forget_outside(r);
    }

    /// Forgets the SSRC it was sent under outside a slot (the receiver gained slots: it takes
    /// one from its next packet).
    pub fn forget_outside(&mut self, r: &mut Member) {
        if let Some(o) = self.outside.take() {
            r.seen.remove(&o);
        }
    }

    /// Simulcast: which layer this receiver is sent. `None` to skip the packet (not its layer;
    /// a keyframe of the target is asked for while a switch waits), else whether it switched
    /// here (the packet starts a keyframe of the target: the numbering follows on).
    fn layer_step(
        &mut self,
        pkt: &SourcePacket<'_>,
        codec: CodecId,
        estimate: Option<u64>,
        cx: &mut Cx<'_>,
    ) -> Option<bool> {
        let (Some(view), Some(layer)) = (self.view.as_mut(), pkt.layer.as_ref()) else {
            return Some(false);
        };
        view.evaluate(&layer.info, estimate, pkt.received, false);
        match view.decide(layer.k, pkt.keyframe, &layer.info) {
            Decision::Forward => Some(false),
            Decision::Switch => {
                let numbers = (pkt.facts.sequence, pkt.facts.timestamp);
                self.rebase(pkt.facts.ssrc, numbers, codec.clock_rate(), pkt.received);
                Some(true)
            }
            Decision::Skip(target) => {
                let ask = view.should_ask(pkt.received, cx.keyframe_interval);
                if let (Some(t), true, Some(p)) = (target, ask, self.publisher()) {
                    cx.keyframes.push((p, t));
                }
                None
            }
        }
    }

    /// Moves to the layer `to` (a switch at its keyframe whose first packet has `seq` and
    /// `ts`): on its slot, the numbering carries on from the last packet (timestamps by the
    /// time between them at `clock`).
    fn rebase(&mut self, to: u32, (seq, ts): (u16, u32), clock: u32, now: Instant) {
        self.source_ssrc = to;
        let n = &mut self.numbering;
        if let (Some(_), Some((last_seq, last_ts)), Some(at)) = (self.slot, n.last, n.last_at) {
            n.seq_offset = last_seq.wrapping_add(1).wrapping_sub(seq);
            let gap = (now.saturating_duration_since(at).as_secs_f64() * f64::from(clock)) as u32;
            n.ts_offset = last_ts.wrapping_add(gap.max(1)).wrapping_sub(ts);
            n.start = last_seq.wrapping_add(1);
        }
    }

    /// The VP8 picture ID and TL0PICIDX this receiver gets for the packet (simulcast: its
    /// numbering follows on across layer switches).
    fn picture(&mut self, pkt: &SourcePacket<'_>, switched: bool) -> Option<Picture> {
        let (view, d) = (self.view.as_mut()?, pkt.vp8?);
        let (id, fifteen, _) = d.picture_id?;
        let tl0 = d.tl0picidx.map_or(0, |t| t.0);
        let (id, tl0) = view.renumber(id, tl0, if fifteen { 15 } else { 7 }, switched);
        Some((d, id, tl0))
    }

    /// A receiver sent less than the best layer: probes whether it can take more (the
    /// estimate grows only so far above what it receives). A probe is this packet again, as
    /// RTX on its slot `k`, a few times over.
    fn probe(
        &self,
        pkt: &SourcePacket<'_>,
        (placed, k): (&Placed, usize),
        picture: Option<Picture>,
        r: &mut Member,
        target: CopyTarget,
        out: &mut RoomOut,
    ) {
        let (Some(view), Some(layer), Some(cc)) = (&self.view, &pkt.layer, r.cc.as_mut()) else {
            return;
        };
        let current = layer.info[layer.k].bps as f64;
        let wanted = layer
            .info
            .iter()
            .filter(|l| l.active && l.ssrc.is_some() && l.bps as f64 > current)
            .map(|l| l.bps as f64 * crate::simulcast::UP_MARGIN)
            .min_by(f64::total_cmp)
            .filter(|_| view.manual.is_none());
        cc.prober
            .consider(&mut cc.bwe, current, wanted, pkt.received);
        let copies = cc.prober.copies(&mut cc.bwe, pkt.received);
        if copies == 0 || !rewrites(r) {
            return;
        }
        let pt = placed.fields.pt;
        let Some((rtx_pt, rtx_ssrc)) = r
            .leg
            .media()
            .get(r.slots[k].section)
            .and_then(|m| Some((m.feedback.rtx_pt(pt)?, m.feedback.rtx_ssrc)))
        else {
            return;
        };
        let codec = pkt.codec;
        for _ in 0..copies {
            let twcc = r.next_twcc(pkt.received, pkt.rtp.len() + 2);
            let seq = r.slots[k].next_rtx_seq();
            let framing = Framing::Rtx {
                pt: rtx_pt,
                ssrc: rtx_ssrc,
                seq,
            };
            let ext = Extensions {
                ids: r.neg.ext,
                mid: r.mid_for(Some(k), codec),
                audio_level: pkt.audio_level,
                abs_send: pkt.abs_send,
                twcc,
            };
            out.send(r.at, target, Sent::Media(pkt.received), |buf| {
                let at = write_copy(buf, pkt.original(), placed.fields, Some(&ext), framing);
                rewrite_picture(buf, at, picture);
            });
            r.leg.counters_mut().feedback.probe_packets += 1;
        }
    }
}

/// A VP8 picture's descriptor as the publisher wrote it, and the picture ID and TL0PICIDX a
/// receiver gets.
type Picture = (Vp8Descriptor, u16, u8);

/// One packet a NACK asks for: the receiver's SSRC and number, the publisher's number, the
/// timestamp offset and slot of the receiver's numbering.
#[derive(Debug, Clone, Copy)]
struct Ask {
    ssrc: u32,
    seq: u16,
    source_seq: u16,
    ts_offset: u32,
    slot: Option<usize>,
}

/// Whether copies for `r` carry header extensions the gateway writes.
fn rewrites(r: &Member) -> bool {
    r.neg.ext.rewritten()
}

/// Writes a copy of `pkt` for `r` in the place `placed`, its VP8 picture numbers `picture`,
/// onto `out`; counted as forwarded.
fn send_copy(
    pkt: &SourcePacket<'_>,
    placed: &Placed,
    picture: Option<Picture>,
    codec: CodecId,
    r: &mut Member,
    target: CopyTarget,
    out: &mut RoomOut,
) {
    // Its own header extensions: mid, audio level, send time, transport-wide seq.
    let twcc = rewrites(r)
        .then(|| r.next_twcc(pkt.received, pkt.rtp.len()))
        .flatten();
    let ext = rewrites(r).then(|| Extensions {
        ids: r.neg.ext,
        mid: r.mid_for(placed.slot, codec),
        audio_level: pkt.audio_level,
        abs_send: pkt.abs_send,
        twcc,
    });
    out.send(r.at, target, Sent::Media(pkt.received), |buf| {
        let at = write_copy(
            buf,
            pkt.original(),
            placed.fields,
            ext.as_ref(),
            Framing::Media,
        );
        rewrite_picture(buf, at, picture);
    });
    r.leg.counters_mut().forwarded += 1;
}

/// Writes a receiver's VP8 picture numbers into the copy whose payload starts at `at`.
fn rewrite_picture(buf: &mut [u8], at: usize, picture: Option<Picture>) {
    if let (Some((d, id, tl0)), Some(body)) = (picture, buf.get_mut(at..)) {
        vp8_rewrite(body, &d, id, tl0);
    }
}

/// A retransmitted VP8 packet of a simulcast layer gets the picture numbers its first copy got
/// (the receiver's numbering as it stands: only packets of the layer sent now are
/// retransmitted); its payload starts at `at` in `buf`.
fn renumber_again(view: &LayerView, buf: &mut [u8], at: usize) {
    let Some(body) = buf.get_mut(at..) else {
        return;
    };
    if let Some(d) = vp8_descriptor(body) {
        if let Some((id, fifteen, _)) = d.picture_id {
            let tl0 = d.tl0picidx.map_or(0, |t| t.0);
            let (id, tl0) = view.mapped(id, tl0, if fifteen { 15 } else { 7 });
            vp8_rewrite(body, &d, id, tl0);
        }
    }
}
