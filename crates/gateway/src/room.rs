//! A room of members, sans-IO: media from one member, unprotected with that member's keys, is
//! routed to every other subscribed member, to be protected again with that member's own keys
//! (the K1/K2 scheme: no two members share SRTP keys, and the gateway holds every key). The
//! members are [`Leg`]s of any kind; the room sees only that interface.
//!
//! # Streams and receive slots
//! A WebRTC endpoint plays one stream per media section (one transceiver, one track), so a
//! receiver that wants to hear three others offers three receiving sections of that kind. Each
//! receiving section is a *slot*: its answer announces the SSRC the gateway sends on it
//! (`a=ssrc`, `a=msid`). A source stream (source member, source SSRC) takes the first free slot
//! of its kind whose section accepted its codec, and keeps it while the source is in the room;
//! its packets go out under the slot's SSRC and the section's payload type for the codec. When
//! the source leaves, the slot is free again, and the next stream to take it continues the
//! slot's sequence numbers and timestamps where the last one stopped (so the receiver's jitter
//! buffer sees one continuous stream, not a jump). The first stream on a slot passes its
//! sequence numbers and timestamps unchanged.
//!
//! A stream that finds no free slot (a receiver with one audio section in a room of three
//! talkers) is still forwarded, as before slots existed, on the first section of its kind
//! under an SSRC of its own that the answer does not announce, counted as
//! [`Counters::unslotted`]: endpoints that demultiplex by SSRC (the lab's simulated
//! participants, SIP-style legs) get everything. A receiver that agreed on the `mid`
//! extension (a browser) demultiplexes by section, and a stream under an occupied section's
//! mid would take it over: it gets nothing outside its slots (`no_slot`), and a renegotiation
//! gives it the sections it lacks.
//!
//! # Transcoding
//! Audio of a codec the receiver did not accept goes to it transcoded when it accepted one the
//! gateway can encode ([`crate::transcode`]): the sender's stream is decoded once, encoded once
//! per distinct receiving format (codec and `a=ptime`, [`Format::for_receiver`]), and each
//! encoded packet takes the receiver's slot like a relayed stream (its own SSRC, payload type,
//! numbering and keys). Telephone-events of a transcoded stream follow it, re-timed and
//! numbered in the transcoded stream, under the receiver's telephone-event payload type of the
//! output's clock. Same-codec audio and video are relayed as they are, never decoded. What
//! cannot reach a receiver (a codec it did not take and none we can encode, events when it
//! took none) is dropped and counted (`no_codec`); audio that does not decode is dropped and
//! counted at its sender (`undecodable`).
//!
//! # Mixing
//! A room set to mix ([`Room::set_mixing`]) decodes each member's audio once into an N−1
//! mixer, and every 20 ms ([`Room::mix_due`], on the caller's clock) sends each receiving
//! member the sum of the others, never itself, encoded in its own format on one stream: what
//! telephones, which take one stream only, need in a conference. Video is relayed as always.
//!
//! # RTCP
//! RTCP is terminated at the gateway, not forwarded: each member gets the gateway's own
//! sender and receiver reports, made from what the room really routed to it and received from
//! it ([`crate::rtcp`]), and its own reports are read for its loss, jitter and round-trip
//! time ([`Room::note_rtcp`], [`Room::rtcp_figures`]). Due reports are made in
//! [`Room::handle_timeout`] and taken with [`Room::pop_report`], to be sent (protected on a
//! secure leg) by the caller.
//!
//! # Feedback
//! A receiver's feedback about what it is sent is answered by the room, in the receiver's own
//! numbering (its slot's SSRC and sequence numbers), where the section agreed on it:
//! - **Keyframe requests** (PLI, FIR) are mapped to the publisher's stream and sent to the
//!   publisher in the form its section agreed on (PLI, else FIR), at most one per
//!   [`RtcpConfig::keyframe_interval`] per stream however many receivers ask; a video stream
//!   that takes a receive slot or a new receiver asks the same way at once, so a viewer that
//!   joins late does not wait for the publisher's next periodic keyframe.
//! - **NACKs** are answered from the publisher stream's retransmission buffer
//!   ([`crate::feedback`]): as RTX (RFC 4588) where the receiver's section agreed on it, else
//!   as the very packet again (byte for byte, so its SRTP index never protects other bytes);
//!   packets the gateway itself never received are asked of the publisher (a NACK
//!   upstream), and its RTX answers are unwrapped and relayed as the packets they repair.
//!
//! Feedback to send comes out with the reports ([`Room::pop_report`]); retransmissions go
//! through the same `emit` as routed copies.
//!
//! # Header extensions and congestion control
//! A receiver that agreed on header extensions gets them in its own ids, written per copy:
//! its section's `mid`, the publisher's audio level, our send time (`abs-send-time`) and a
//! transport-wide sequence number of its own (transport-cc); the publisher's other elements
//! (its ids, its `rid`) are not passed on. A member that agreed on transport-cc is sent
//! transport-wide feedback about what it sends us every [`TWCC_INTERVAL`], so its encoder
//! follows its uplink; what we send it is estimated from its feedback ([`crate::bwe`]), and
//! the estimate is in the API. A receiver that agreed on none gets the packet's header as the
//! publisher wrote it (with its own SSRC, payload type and numbering): nothing is rewritten on
//! that path.
//!
//! # Media and control
//! The room does no SRTP itself: the shard unprotects a batch of datagrams with the senders'
//! contexts ([`Room::contexts_of`]), hands each packet to [`Room::route`], which makes the
//! receivers' copies (header rewritten for each), and protects the copies of the whole batch
//! with the receivers' contexts. That batched path is the only media path. Control traffic
//! (STUN answers, DTLS flights) and the members' events come out of [`Room::poll_output`].
//!
//! # Drive contract
//! After every input to a member ([`Room::leg_mut`]) or [`Room::handle_timeout`], call
//! [`Room::poll_output`] until it returns [`RoomOutput::Timeout`] or `None`.
//!
//! # Allocation
//! Routing a packet copies it into one reusable scratch buffer and rewrites it there for each
//! receiver, handing each copy to the caller, which copies it into its batch's pooled buffers:
//! steady-state forwarding allocates nothing. Slots are made with the member; a stream
//! forwarded outside a slot allocates its map entry once.

use std::time::Instant;

use secrelay_srtp::Context;
use secrelay_wire::demux::RtpFacts;
use secrelay_wire::rtcp::{compound, write_empty_rr, write_fir, write_nack, write_pli, Feedback};
use secrelay_wire::rtp::write_extension;
use secrelay_wire::sdp::MediaKind;
use secrelay_wire::twcc::{parse_feedback, write_feedback, Arrival};

use crate::bwe::{Bwe, Prober, Usage};
use crate::counters::{Counters, DropReason};
use crate::feedback::{unwrap_rtx, write_rtx, KeyframeGate, Lookup, RetransmitBuffer};
use crate::leg::{CodecId, CopyTarget, ExtIds, Leg, LegKind, LegOutput};
use crate::rtcp::{MemberRtcp, RtcpConfig, RtcpFigures};
use crate::simulcast::{Decision, LayerInfo, LayerView, Layers, MAX_LAYERS};
use crate::transcode::{Format, MixSettings, Mixing, TranscodeError, Transcoding, Work};
use secrelay_media::transcode::InPacket;
use secrelay_wire::video::{starts_keyframe, vp8_descriptor, vp8_rewrite, VideoFormat};

/// A member's handle in its room.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MemberId(pub u32);

/// What a member does in the room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemberRole {
    /// Its media is forwarded to the others.
    pub publishes: bool,
    /// It receives the others' media.
    pub subscribes: bool,
}

impl MemberRole {
    /// Publishes and subscribes.
    pub const BOTH: MemberRole = MemberRole {
        publishes: true,
        subscribes: true,
    };
    /// Publishes only.
    pub const PUBLISHER: MemberRole = MemberRole {
        publishes: true,
        subscribes: false,
    };
    /// Subscribes only.
    pub const SUBSCRIBER: MemberRole = MemberRole {
        publishes: false,
        subscribes: true,
    };
}

/// What [`Room::poll_output`] hands back.
#[derive(Debug, Clone, Copy)]
pub enum RoomOutput<'a> {
    /// A member's output: a control transmit (STUN, DTLS) or an event.
    Member(MemberId, LegOutput<'a>),
    /// Call [`Room::handle_timeout`] at (or after) this instant. Ends a drain.
    Timeout(Instant),
}

struct Member {
    id: MemberId,
    role: MemberRole,
    /// The kind it joined as (its counters stay with it, whatever a renegotiation makes it).
    kind: LegKind,
    leg: Leg,
    /// One per receiving section of the answer.
    slots: Vec<Slot>,
    /// Streams forwarded outside a slot: (source member, source SSRC) → the SSRC this member
    /// sees.
    unslotted: Vec<(MemberId, u32, u32)>,
    /// What it sent us and we sent it, for its RTCP reports.
    rtcp: MemberRtcp,
    /// Its video streams: what receivers' NACKs and keyframe requests about them need.
    video_in: Vec<VideoIn>,
    /// The header extension ids it agreed on.
    ext: ExtIds,
    /// Transport-wide congestion control, when it agreed on transport-cc.
    cc: Option<Congestion>,
    /// The simulcast layers it sends, per section that agreed on simulcast.
    simulcast: Vec<Layers>,
    /// Which layer of each simulcast publisher section it is sent.
    views: Vec<LayerView>,
}

/// How often a member that agreed on transport-cc gets feedback on what it sends.
pub const TWCC_INTERVAL: std::time::Duration = std::time::Duration::from_millis(100);

/// Transport-wide congestion control with one member, both ways.
struct Congestion {
    /// Its packets' transport-wide sequence numbers and arrival instants, not yet reported.
    arrivals: Vec<(u16, Instant)>,
    /// The last SSRC it sent on (the feedback's media field).
    media_ssrc: u32,
    /// When the next feedback is due (while arrivals wait).
    next_feedback: Option<Instant>,
    /// Feedback messages sent (their 8-bit count).
    fb_count: u8,
    /// The next transport-wide sequence number of what we send it.
    out_seq: u16,
    /// What we send it, estimated from its feedback.
    bwe: Bwe,
    /// Probes for a higher simulcast layer than the estimate allows.
    prober: Prober,
}

/// A simulcast layer a member sends, as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SentLayer {
    /// Its rid.
    pub rid: String,
    /// Its SSRC, once seen.
    pub ssrc: Option<u32>,
    /// Its bitrate over the last second, bits per second.
    pub bps: u64,
}

/// What a member is sent of a simulcast publisher's layers, as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ReceivedLayer {
    /// The publisher (its handle in the room).
    #[serde(skip)]
    pub publisher: MemberId,
    /// The publisher's id (as the signaling knows it; filled in by the shard).
    pub publisher_id: String,
    /// The layer sent now (its rid).
    pub current: Option<String>,
    /// The layer chosen for it (switched to at its next keyframe).
    pub target: Option<String>,
    /// Whether the choice was set through the API rather than made from the estimate.
    pub manual: bool,
    /// Switches so far.
    pub switches: u64,
}

/// A member's bandwidth estimate as the API shows it.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct BandwidthFigures {
    /// What we can send it, bits per second (transport-cc feedback, [`crate::bwe`]).
    pub estimate_bps: u64,
    /// What it received of what we sent over the last second, bits per second.
    pub received_bps: Option<u64>,
    /// The delay trend: `normal`, `overusing` or `underusing`.
    pub usage: &'static str,
    /// Loss in its last feedback, percent.
    pub loss_pct: f64,
    /// Feedback messages it sent us.
    pub feedbacks: u64,
    /// Probes sent it for a higher simulcast layer.
    pub probes: u64,
    /// Of those, the ones it took cleanly (the estimate raised to what they showed).
    pub probes_delivered: u64,
}

/// A video stream received from a member.
struct VideoIn {
    ssrc: u32,
    buffer: RetransmitBuffer,
    keyframes: KeyframeGate,
}

/// A receiving section and the stream it carries.
struct Slot {
    /// Index of the section in the participant's negotiated media.
    section: usize,
    /// The SSRC announced for the section.
    ssrc: u32,
    /// The stream on it now: (source member, source SSRC).
    source: Option<(MemberId, u32)>,
    /// Added to the source's sequence numbers and timestamps.
    seq_offset: u16,
    ts_offset: u32,
    /// The last sequence number and timestamp sent, once one was.
    last: Option<(u16, u32)>,
    /// The clock rate of what was sent last (for the gap left when a new stream takes over).
    clock_rate: u32,
    /// When the last packet was sent on it.
    last_at: Option<Instant>,
    /// The first sequence number the stream on it now was sent under: NACKs for earlier ones
    /// were about another stream, and are not answered with this one's packets.
    start: u16,
    /// The next sequence number of our retransmissions (RTX) on the slot.
    rtx_seq: u16,
}

impl Member {
    fn new(id: MemberId, role: MemberRole, leg: Leg, rtcp: MemberRtcp) -> Member {
        let slots = leg
            .media()
            .iter()
            .enumerate()
            .filter(|(_, m)| m.peer_receives)
            .map(|(section, m)| Slot {
                section,
                ssrc: m.our_ssrc,
                source: None,
                seq_offset: 0,
                ts_offset: 0,
                last: None,
                clock_rate: 0,
                last_at: None,
                start: 0,
                rtx_seq: random_ssrc() as u16,
            })
            .collect();
        let ext = ExtIds::of(leg.media());
        let simulcast = leg
            .media()
            .iter()
            .enumerate()
            .filter(|(_, m)| m.peer_sends && !m.simulcast.is_empty())
            .map(|(k, m)| Layers::new(k, &m.simulcast))
            .collect();
        Member {
            simulcast,
            views: Vec::new(),
            id,
            role,
            kind: leg.kind(),
            slots,
            unslotted: Vec::new(),
            rtcp,
            video_in: Vec::new(),
            cc: (ext.twcc != 0).then(|| Congestion {
                arrivals: Vec::new(),
                media_ssrc: 0,
                next_feedback: None,
                fb_count: 0,
                out_seq: random_ssrc() as u16,
                bwe: Bwe::new(),
                prober: Prober::default(),
            }),
            ext,
            leg,
        }
    }

    /// The mid of the section a stream of `codec` is sent to the member on (its slot's, else
    /// the first section that takes the codec).
    fn mid_for(&self, slot: Option<usize>, codec: CodecId) -> &str {
        let media = self.leg.media();
        slot.and_then(|k| media.get(self.slots[k].section))
            .or_else(|| {
                media
                    .iter()
                    .find(|m| m.peer_receives && m.codecs.iter().any(|(c, _)| *c == codec))
            })
            .map_or("", |m| m.mid.as_str())
    }

    /// Moves the slot that carries one of a publisher's simulcast layers (`layers`' SSRCs) to
    /// the layer `to` (a switch at its keyframe whose first packet has `seq` and `ts`): the
    /// slot's numbering carries on from its last packet (timestamps by the time between them at
    /// `clock`). Nothing when no slot carries the publisher's layers yet.
    fn rebase(
        &mut self,
        publisher: MemberId,
        layers: &[LayerInfo; MAX_LAYERS],
        to: u32,
        (seq, ts): (u16, u32),
        clock: u32,
        now: Instant,
    ) {
        let ours = |src: Option<(MemberId, u32)>| {
            src.is_some_and(|(p, x)| p == publisher && layers.iter().any(|l| l.ssrc == Some(x)))
        };
        let Some(slot) = self.slots.iter_mut().find(|s| ours(s.source)) else {
            return;
        };
        slot.source = Some((publisher, to));
        if let (Some((last_seq, last_ts)), Some(at)) = (slot.last, slot.last_at) {
            slot.seq_offset = last_seq.wrapping_add(1).wrapping_sub(seq);
            let gap = (now.saturating_duration_since(at).as_secs_f64() * f64::from(clock)) as u32;
            slot.ts_offset = last_ts.wrapping_add(gap.max(1)).wrapping_sub(ts);
            slot.start = last_seq.wrapping_add(1);
        }
    }

    /// The next transport-wide sequence number of what we send the member, noted as sent at
    /// `at` with `size` bytes; `None` if it agreed on no transport-cc.
    fn next_twcc(&mut self, at: Instant, size: usize) -> Option<u16> {
        let cc = self.cc.as_mut()?;
        let seq = cc.out_seq;
        cc.out_seq = seq.wrapping_add(1);
        cc.bwe.on_sent(seq, at, size);
        Some(seq)
    }

    /// The stream a receiver knows as `ssrc` (a slot's, or one forwarded outside a slot): its
    /// source, the slot's index if it has one, and the offset from the receiver's sequence
    /// numbers back to the source's.
    fn stream_of(&self, ssrc: u32) -> Option<((MemberId, u32), Option<usize>, u16)> {
        if let Some(k) = self.slots.iter().position(|s| s.ssrc == ssrc) {
            let slot = &self.slots[k];
            return slot.source.map(|src| (src, Some(k), slot.seq_offset));
        }
        self.unslotted
            .iter()
            .find(|e| e.2 == ssrc)
            .map(|e| ((e.0, e.1), None, 0))
    }

    /// The slot for a source stream of `codec`: the one it holds, else the first free one
    /// whose section accepted the codec (taken, continuing its numbering at the packet's
    /// `seq` and `ts`). The slot's index, the section's payload type for the codec, and whether
    /// the stream took the slot just now.
    fn slot_for(
        &mut self,
        source: (MemberId, u32),
        codec: CodecId,
        seq: u16,
        ts: u32,
    ) -> Option<(usize, u8, bool)> {
        let media = self.leg.media();
        let pt_in = |slot: &Slot| {
            media
                .get(slot.section)?
                .codecs
                .iter()
                .find(|(c, _)| *c == codec)
                .map(|(_, pt)| *pt)
        };
        if let Some(k) = self.slots.iter().position(|s| s.source == Some(source)) {
            return pt_in(&self.slots[k]).map(|pt| (k, pt, false));
        }
        let (k, pt) = self
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.source.is_none())
            .find_map(|(k, s)| pt_in(s).map(|pt| (k, pt)))?;
        let slot = &mut self.slots[k];
        slot.source = Some(source);
        match slot.last {
            // Continue one 20 ms frame after the last packet sent on the slot.
            Some((last_seq, last_ts)) => {
                slot.seq_offset = last_seq.wrapping_add(1).wrapping_sub(seq);
                let gap = slot.clock_rate.max(codec.clock_rate()) / 50;
                slot.ts_offset = last_ts.wrapping_add(gap).wrapping_sub(ts);
            }
            None => {
                slot.seq_offset = 0;
                slot.ts_offset = 0;
            }
        }
        slot.start = seq.wrapping_add(slot.seq_offset);
        slot.clock_rate = codec.clock_rate();
        Some((k, pt, true))
    }
}

impl Member {
    /// The SSRC the member sees for `source`'s stream `ssrc` forwarded outside a slot (made
    /// the first time, unlike any it sees), and whether it was made just now.
    fn unslotted_ssrc(&mut self, source: MemberId, ssrc: u32) -> (u32, bool) {
        if let Some(e) = self
            .unslotted
            .iter()
            .find(|(s, x, _)| *s == source && *x == ssrc)
        {
            return (e.2, false);
        }
        let taken = |n: u32| {
            n == 0
                || self.unslotted.iter().any(|e| e.2 == n)
                || self.slots.iter().any(|s| s.ssrc == n)
        };
        let mut n = random_ssrc();
        while taken(n) {
            n = random_ssrc();
        }
        self.unslotted.push((source, ssrc, n));
        (n, true)
    }

    /// Sends the member a packet the gateway made for it (`pkt`, whose header is `facts`: a
    /// transcoded or mixed stream of `codec`, keyed as `source`'s stream `ssrc`): on the slot
    /// the stream holds (taken if free) or outside one, with the payload type, SSRC, numbering
    /// and header extensions it sees, counted as forwarded and transcoded.
    fn send_made(
        &mut self,
        (source, ssrc): (MemberId, u32),
        codec: CodecId,
        pkt: &mut Vec<u8>,
        facts: &RtpFacts,
        copy_scratch: &mut Vec<u8>,
        env: &mut CopyEnv<'_, '_>,
    ) {
        let Some(target) = self.leg.copy_target() else {
            self.leg.counters_mut().drop(DropReason::ReceiverNotReady);
            return;
        };
        let (seq, ts) = (facts.sequence, facts.timestamp);
        let (pt, mapped, seq, ts, slot_index) = match self.slot_for((source, ssrc), codec, seq, ts)
        {
            Some((k, pt, _)) => {
                let slot = &mut self.slots[k];
                let out = (
                    seq.wrapping_add(slot.seq_offset),
                    ts.wrapping_add(slot.ts_offset),
                );
                slot.last = Some(out);
                slot.last_at = Some(env.received);
                (pt, slot.ssrc, out.0, out.1, Some(k))
            }
            None => {
                if self.ext.mid != 0 {
                    self.leg.counters_mut().drop(DropReason::NoSlot);
                    return;
                }
                let Some(pt) = self.leg.payload_type_for(codec) else {
                    self.leg.counters_mut().drop(DropReason::NoCodec);
                    return;
                };
                self.leg.counters_mut().unslotted += 1;
                let (mapped, _) = self.unslotted_ssrc(source, ssrc);
                (pt, mapped, seq, ts, None)
            }
        };
        let payload = pkt.len().saturating_sub(usize::from(facts.header_len));
        self.rtcp
            .on_sent(mapped, codec.clock_rate(), ts, payload, env.received);
        let out: &mut Vec<u8> = if self.ext.rewritten() {
            let twcc = self.next_twcc(env.received, pkt.len());
            let mid = self.mid_for(slot_index, codec);
            write_copy(
                copy_scratch,
                pkt,
                facts,
                (ExtIds::default(), self.ext),
                mid,
                twcc,
                env.abs_send,
            );
            copy_scratch
        } else {
            pkt
        };
        rewrite(out, pt, mapped, seq, ts);
        let c = self.leg.counters_mut();
        c.forwarded += 1;
        c.transcoded += 1;
        if !target.protect {
            c.packets_out += 1;
            c.bytes_out += out.len() as u64;
        }
        (env.emit)(self.id, target, out);
    }
}

/// The source a mixing room's mixes are sent as (no member has id 0).
const MIXER: MemberId = MemberId(0);
/// The stream id of a member's mix.
const MIX_SSRC: u32 = 0;

/// What a copy made while routing needs from the routing call.
struct CopyEnv<'e, 'f> {
    received: Instant,
    abs_send: u32,
    emit: &'e mut (dyn FnMut(MemberId, CopyTarget, &[u8]) + 'f),
}

/// The payload of an RTP packet whose header is `facts`, without its padding (RFC 3550
/// §5.1: the last byte counts the padding when the P bit is set); empty if that is wrong.
fn payload_of<'a>(rtp: &'a [u8], facts: &RtpFacts) -> &'a [u8] {
    let body = rtp.get(usize::from(facts.header_len)..).unwrap_or_default();
    if rtp.first().is_some_and(|b| b & 0x20 != 0) {
        let pad = usize::from(body.last().copied().unwrap_or(0));
        return body
            .get(..body.len().saturating_sub(pad.max(1)))
            .unwrap_or_default();
    }
    body
}

/// Writes a plain RTP header and `payload` into `out` (version 2, no CSRCs or extension;
/// the payload type, SSRC and numbering are rewritten per receiver); its header's facts.
fn made_packet(
    out: &mut Vec<u8>,
    ssrc: u32,
    seq: u16,
    ts: u32,
    marker: bool,
    payload: &[u8],
) -> RtpFacts {
    out.clear();
    out.push(0x80);
    out.push(if marker { 0x80 } else { 0 });
    out.extend_from_slice(&seq.to_be_bytes());
    out.extend_from_slice(&ts.to_be_bytes());
    out.extend_from_slice(&ssrc.to_be_bytes());
    out.extend_from_slice(payload);
    RtpFacts {
        ssrc,
        payload_type: 0,
        marker,
        sequence: seq,
        timestamp: ts,
        header_len: 12,
        ext: Default::default(),
    }
}

/// The transcoded copies of one packet from the member at index `i` (`rtp`, its header
/// `facts`, of `codec`): decoded once, encoded once per distinct format in `to` (receivers by
/// index and their formats; `formats` is scratch), and each encoded packet sent to each
/// receiver of its format with that receiver's numbering and keys. Counted at the source
/// (decoded, encoded, or undecodable) and at each receiver (forwarded and transcoded, or why
/// not). `to` is empty afterwards.
fn transcode_and_send(
    members: &mut [Member],
    i: usize,
    (rtp, facts, codec): (&[u8], &RtpFacts, CodecId),
    transcoding: &mut Transcoding,
    (to, formats): (&mut Vec<(usize, Format)>, &mut Vec<Format>),
    (scratch, copy_scratch): (&mut Vec<u8>, &mut Vec<u8>),
    mut env: CopyEnv<'_, '_>,
) {
    formats.clear();
    for (_, f) in to.iter() {
        if !formats.contains(f) {
            formats.push(*f);
        }
    }
    let source = members[i].id;
    let ssrc = facts.ssrc;
    let pkt = InPacket {
        seq: facts.sequence,
        timestamp: facts.timestamp,
        marker: facts.marker,
        payload: payload_of(rtp, facts),
    };
    let done = if codec.is_event() {
        transcoding
            .event(source, ssrc, codec, &pkt, formats)
            .map(|()| Work::default())
    } else {
        transcoding.audio(source, ssrc, codec, &pkt, formats)
    };
    match done {
        Ok(w) => {
            let c = members[i].leg.counters_mut();
            c.decoded += w.decoded;
            c.encoded += w.encoded;
        }
        Err(TranscodeError::Undecodable(_)) => {
            members[i].leg.counters_mut().drop(DropReason::Undecodable);
            to.clear();
            return;
        }
        Err(TranscodeError::Codec(why)) => {
            tracing::warn!(codec = codec.name(), %why, "transcoding failed; copies dropped");
            for (j, _) in to.iter() {
                members[*j].leg.counters_mut().drop(DropReason::NoCodec);
            }
            to.clear();
            return;
        }
    }
    for f in formats.iter() {
        // Events go out in the telephone-event format of the output's clock.
        let out_codec = if codec.is_event() {
            CodecId::event_for_clock(f.codec.clock_rate())
        } else {
            Some(f.codec)
        };
        for out in transcoding.ready(source, ssrc, *f) {
            // Made once; each receiver's copy overwrites its payload type, SSRC and numbering.
            let made = made_packet(
                scratch,
                ssrc,
                out.seq,
                out.timestamp,
                out.marker,
                &out.payload,
            );
            for &(j, _) in to.iter().filter(|(_, g)| g == f) {
                let r = &mut members[j];
                let Some(oc) = out_codec.filter(|c| r.leg.receives(*c)) else {
                    // A receiver that took no telephone-event of that clock.
                    r.leg.counters_mut().drop(DropReason::NoCodec);
                    continue;
                };
                r.send_made((source, ssrc), oc, scratch, &made, copy_scratch, &mut env);
            }
        }
    }
    to.clear();
}

/// A room. See the [module documentation](self).
pub struct Room {
    members: Vec<Member>,
    next_id: u32,
    cursor: usize,
    scratch: Vec<u8>,
    /// Counters of members that left, by the kind they joined as, so the room's sums never go
    /// down.
    retired: [Counters; 3],
    rtcp: RtcpConfig,
    /// Reports made by `handle_timeout`, and feedback to send, not yet taken.
    reports: Vec<(MemberId, Vec<u8>)>,
    /// Where an RTX packet from a publisher is unwrapped, and a retransmission is made.
    rtx_scratch: Vec<u8>,
    /// Where a copy with the receiver's own header extensions is written.
    copy_scratch: Vec<u8>,
    /// [`Room::mix_due`]'s receivers each tick, and where each is in `members`: kept so that
    /// a tick allocates nothing once warm.
    mix_receivers: (Vec<(MemberId, Format)>, Vec<usize>),
    /// Where a probe's retransmission is made (its copy, then its RTX packet).
    probe_scratch: (Vec<u8>, Vec<u8>),
    /// A deadline routing set (a member's first transport-wide feedback), for the caller's
    /// timer: [`Room::take_wake`].
    wake: Option<Instant>,
    /// Keyframe requests decided while routing: (publisher, its stream).
    keyframe_wanted: Vec<(MemberId, u32)>,
    /// Streams decoded and encoded again for receivers that did not take their codec.
    transcoding: Transcoding,
    /// Receivers (by index) of the packet being routed that get it transcoded, and in which
    /// format; and the distinct formats among them.
    transcode_to: Vec<(usize, Format)>,
    formats: Vec<Format>,
    /// The N−1 audio mix, when the room mixes ([`Room::set_mixing`]).
    mixing: Option<Mixing>,
}

impl Default for Room {
    fn default() -> Self {
        Room::new()
    }
}

impl std::fmt::Debug for Room {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Room")
            .field("members", &self.members.len())
            .finish_non_exhaustive()
    }
}

fn random_ssrc() -> u32 {
    let mut b = [0u8; 4];
    getrandom::fill(&mut b).expect("the OS random source works");
    u32::from_be_bytes(b)
}

/// If `facts` (of `rtp`) is a retransmission (RTX) on one of `src`'s sections: the payload type
/// and the SSRC of the stream it repairs (the SDP's `a=ssrc-group:FID`; a simulcast layer's, by
/// its `repaired-rtp-stream-id`; else the section's one video stream seen so far).
fn repaired_stream(src: &mut Member, rtp: &[u8], facts: &RtpFacts) -> Option<(u8, u32)> {
    let (k, section) = src
        .leg
        .media()
        .iter()
        .enumerate()
        .find(|(_, m)| m.feedback.repaired_pt(facts.payload_type).is_some())?;
    let apt = section.feedback.repaired_pt(facts.payload_type)?;
    let fid = section
        .feedback
        .peer_rtx
        .iter()
        .find(|(_, rtx)| *rtx == facts.ssrc)
        .map(|(p, _)| *p);
    let repaired_rid = facts.ext.get(rtp, src.ext.repaired_rid);
    let layer = src
        .simulcast
        .iter_mut()
        .find(|l| l.section == k)
        .and_then(|l| l.repaired_by(facts.ssrc, repaired_rid));
    let primary = fid.or(layer).or(match src.video_in.as_slice() {
        [only] => Some(only.ssrc),
        _ => None,
    })?;
    Some((apt, primary))
}

impl Room {
    /// An empty room, its RTCP made as [`RtcpConfig::default`] says.
    pub fn new() -> Room {
        Room::with_rtcp(RtcpConfig::default())
    }

    /// An empty room whose members' RTCP is made as `rtcp` says.
    pub fn with_rtcp(rtcp: RtcpConfig) -> Room {
        Room {
            members: Vec::new(),
            next_id: 1,
            cursor: 0,
            scratch: Vec::with_capacity(1500),
            retired: [Counters::default(); 3],
            rtcp,
            reports: Vec::new(),
            rtx_scratch: Vec::with_capacity(1500),
            copy_scratch: Vec::with_capacity(1500),
            mix_receivers: (Vec::new(), Vec::new()),
            probe_scratch: (Vec::with_capacity(1500), Vec::with_capacity(1500)),
            wake: None,
            keyframe_wanted: Vec::new(),
            transcoding: Transcoding::default(),
            transcode_to: Vec::new(),
            formats: Vec::new(),
            mixing: None,
        }
    }

    /// The room with its transcoding and mixing codecs made from `registry` (before anyone
    /// sends audio).
    pub fn with_codecs(mut self, registry: secrelay_media::Registry) -> Room {
        self.transcoding = Transcoding::new(registry);
        self
    }

    /// Makes the room mix its audio (each member hears the sum of the others, not itself: see
    /// [Mixing](self#mixing)) as `mix` says, or relay (and transcode) it again with `None`.
    /// Video is relayed either way. A room that mixes already takes the new settings at its
    /// next tick.
    pub fn set_mixing(&mut self, mix: Option<MixSettings>) {
        match (mix, self.mixing.as_mut()) {
            (Some(settings), Some(m)) => m.set_settings(settings),
            (Some(settings), None) => {
                self.mixing = Some(Mixing::new(self.transcoding.registry().clone(), settings));
            }
            (None, _) => self.mixing = None,
        }
    }

    /// Whether the room mixes its audio.
    pub fn is_mixing(&self) -> bool {
        self.mixing.is_some()
    }

    /// The room's mix, when it mixes (inputs decoded, encoders running).
    pub fn mixing(&self) -> Option<&Mixing> {
        self.mixing.as_ref()
    }

    /// Adds a member at `now` (its first RTCP report is due about one interval later).
    pub fn add(&mut self, leg: impl Into<Leg>, role: MemberRole, now: Instant) -> MemberId {
        let id = MemberId(self.next_id);
        self.next_id += 1;
        let rtcp = MemberRtcp::new(&self.rtcp, now);
        self.members.push(Member::new(id, role, leg.into(), rtcp));
        id
    }

    /// Removes a member, handing back its leg (its counters stay in the room's sums).
    pub fn remove(&mut self, id: MemberId) -> Option<Leg> {
        let i = self.members.iter().position(|m| m.id == id)?;
        let m = self.members.remove(i);
        for other in &mut self.members {
            other.unslotted.retain(|(src, _, _)| *src != id);
            other.views.retain(|v| v.publisher != id);
            for slot in &mut other.slots {
                if slot.source.is_some_and(|(src, _)| src == id) {
                    slot.source = None;
                }
            }
        }
        self.retired[m.kind.index()].add(m.leg.counters());
        self.reports.retain(|(r, _)| *r != id);
        self.cursor = 0;
        // Its streams' codec state goes with it, and so do encoders only it received.
        if let Some(mix) = &mut self.mixing {
            mix.remove_member(id);
        }
        self.transcoding.remove_source(id);
        let members = &self.members;
        self.transcoding.retain(|source, codec, format| {
            members.iter().any(|r| {
                r.id != source
                    && r.role.subscribes
                    && !r.leg.receives(codec)
                    && Format::for_receiver(r.leg.media()) == Some(format)
            })
        });
        Some(m.leg)
    }

    /// Changes what a member does (a renegotiation put it on hold, or took it off). `false`
    /// if there is no such member.
    pub fn set_role(&mut self, id: MemberId, role: MemberRole) -> bool {
        match self.members.iter_mut().find(|m| m.id == id) {
            Some(m) => {
                m.role = role;
                true
            }
            None => false,
        }
    }

    /// What a member does (sends, receives).
    pub fn role(&self, id: MemberId) -> Option<MemberRole> {
        self.members.iter().find(|m| m.id == id).map(|m| m.role)
    }

    /// A member's leg.
    pub fn leg(&self, id: MemberId) -> Option<&Leg> {
        self.members.iter().find(|m| m.id == id).map(|m| &m.leg)
    }

    /// A member's leg, to hand it input or change it (ICE restart, close).
    pub fn leg_mut(&mut self, id: MemberId) -> Option<&mut Leg> {
        self.members
            .iter_mut()
            .find(|m| m.id == id)
            .map(|m| &mut m.leg)
    }

    /// The number of members.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether the room has no members.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The members, in order of arrival.
    pub fn members(&self) -> impl Iterator<Item = MemberId> + '_ {
        self.members.iter().map(|m| m.id)
    }

    /// The members' counters summed, with those of members that left.
    pub fn counters(&self) -> Counters {
        let mut c = Counters::default();
        for k in &self.counters_by_kind() {
            c.add(k);
        }
        c
    }

    /// [`Room::counters`] by the kind each member joined as ([`LegKind::index`]).
    pub fn counters_by_kind(&self) -> [Counters; 3] {
        let mut c = self.retired;
        for m in &self.members {
            c[m.kind.index()].add(m.leg.counters());
        }
        c
    }

    /// The retransmission buffers held now: (video streams buffered, bytes held by all their
    /// buffers, [`RetransmitBuffer::bytes`]).
    pub fn retransmit_buffers(&self) -> (u64, u64) {
        self.members
            .iter()
            .flat_map(|m| &m.video_in)
            .fold((0, 0), |(n, b), v| (n + 1, b + v.buffer.bytes() as u64))
    }

    /// The members now, by the kind each joined as.
    pub fn members_by_kind(&self) -> [u64; 3] {
        let mut n = [0; 3];
        for m in &self.members {
            n[m.kind.index()] += 1;
        }
        n
    }

    /// The SSRC `receiver` sees for `source`'s stream `ssrc`, once one packet was forwarded.
    pub fn mapped_ssrc(&self, receiver: MemberId, source: MemberId, ssrc: u32) -> Option<u32> {
        let r = self.members.iter().find(|m| m.id == receiver)?;
        let key = (source, ssrc);
        r.slots
            .iter()
            .find(|s| s.source == Some(key))
            .map(|s| s.ssrc)
            .or_else(|| {
                r.unslotted
                    .iter()
                    .find(|(s, x, _)| (*s, *x) == key)
                    .map(|e| e.2)
            })
    }

    /// The section (mid) of `receiver` on which `source`'s stream `ssrc` is sent, while it
    /// holds a receive slot there.
    pub fn slot_mid(&self, receiver: MemberId, source: MemberId, ssrc: u32) -> Option<&str> {
        let r = self.members.iter().find(|m| m.id == receiver)?;
        let slot = r.slots.iter().find(|s| s.source == Some((source, ssrc)))?;
        Some(r.leg.media().get(slot.section)?.mid.as_str())
    }

    /// The room's transcoding state (streams decoded, encoders running).
    pub fn transcoding(&self) -> &Transcoding {
        &self.transcoding
    }

    /// The members' SRTP contexts (inbound or outbound), one entry per requested member in
    /// the order asked (`None` for a member that is gone or not keyed). `members` must not
    /// repeat a member.
    pub fn contexts_of<'a>(
        &'a mut self,
        members: &[MemberId],
        inbound: bool,
        out: &mut Vec<Option<&'a mut Context>>,
    ) {
        let first = out.len();
        out.extend(members.iter().map(|_| None));
        for m in self.members.iter_mut() {
            if let Some(k) = members.iter().position(|id| *id == m.id) {
                out[first + k] = if inbound {
                    m.leg.inbound_context()
                } else {
                    m.leg.outbound_context()
                };
            }
        }
    }

    /// Routes one unprotected RTP packet from `source` (`rtp`, whose header `facts` were read
    /// where the datagram arrived at `received`; noted for the source's RTCP reception
    /// figures whether or not it publishes): each subscribed member that can take it gets a copy, with
    /// the payload type, SSRC, sequence number and timestamp it sees, handed to `emit` with
    /// the receiver and where and how its copy goes. Counted at the source (routed, or not a
    /// publisher) and at each receiver (forwarded, unslotted, or why not; a copy sent as it is
    /// to a plain-RTP receiver is counted out here, a copy to protect once protected). A
    /// retransmission (RTX) from the source is unwrapped and routed as the packet it repairs;
    /// a video packet is kept for receivers' NACKs; a video stream new to a receiver asks its
    /// publisher for a keyframe (taken with [`Room::pop_report`]). `false` if there is no
    /// such member.
    pub fn route(
        &mut self,
        source: MemberId,
        rtp: &[u8],
        facts: &RtpFacts,
        received: Instant,
        emit: &mut dyn FnMut(MemberId, CopyTarget, &[u8]),
    ) -> bool {
        let Some(i) = self.members.iter().position(|m| m.id == source) else {
            return false;
        };
        // Every packet the member sends counts for its transport-wide feedback, whatever
        // becomes of it (its bandwidth probes too).
        let src = &mut self.members[i];
        let twcc_id = src.ext.twcc;
        if let Some(cc) = src.cc.as_mut() {
            if let Some(&[a, b]) = facts.ext.get(rtp, twcc_id) {
                cc.arrivals.push((u16::from_be_bytes([a, b]), received));
                cc.media_ssrc = facts.ssrc;
                if cc.next_feedback.is_none() {
                    let t = received + TWCC_INTERVAL;
                    cc.next_feedback = Some(t);
                    self.wake = Some(self.wake.map_or(t, |w| w.min(t)));
                }
            }
        }
        let src = &mut self.members[i];
        if src.leg.codec_for(facts.payload_type).is_none() {
            if let Some((apt, primary)) = repaired_stream(src, rtp, facts) {
                // A retransmission the publisher sent (an upstream NACK's answer): the packet
                // it repairs is routed as if it had come the first time.
                let mut plain = std::mem::take(&mut self.rtx_scratch);
                let header = usize::from(facts.header_len);
                let src = &mut self.members[i];
                if unwrap_rtx(&mut plain, rtp, header, apt, primary) {
                    src.leg.counters_mut().feedback.rtx_in += 1;
                    let facts = RtpFacts {
                        ssrc: primary,
                        payload_type: apt,
                        sequence: u16::from_be_bytes([plain[2], plain[3]]),
                        ..*facts
                    };
                    self.route_at(i, &plain, &facts, received, false, emit);
                } else {
                    src.leg.counters_mut().drop(DropReason::PaddingOnly);
                }
                self.rtx_scratch = plain;
                return true;
            }
        }
        self.route_at(i, rtp, facts, received, true, emit);
        true
    }

    /// [`Room::route`] for the member at index `i`; `reception` notes the packet for the
    /// source's reception figures (not for an unwrapped retransmission: its RTX packet was).
    fn route_at(
        &mut self,
        i: usize,
        rtp: &[u8],
        facts: &RtpFacts,
        received: Instant,
        reception: bool,
        emit: &mut dyn FnMut(MemberId, CopyTarget, &[u8]),
    ) {
        let Room {
            members,
            scratch,
            copy_scratch,
            probe_scratch,
            rtcp,
            keyframe_wanted,
            transcoding,
            transcode_to,
            formats,
            mixing,
            wake,
            ..
        } = self;
        let abs_send = abs_send_time(rtcp.epoch.0, received);
        let src = &mut members[i];
        let source = src.id;
        let src_ext = src.ext;
        let codec = src.leg.codec_for(facts.payload_type);
        let clock = codec.map_or(8_000, CodecId::clock_rate);
        if reception {
            src.rtcp.on_rtp(rtcp, facts, clock, received);
        }
        if !src.role.publishes {
            src.leg.counters_mut().drop(DropReason::NotPublisher);
            return;
        }
        src.leg.counters_mut().routed += 1;
        let ssrc = facts.ssrc;
        if let (Some(mix), Some(c)) = (mixing.as_mut(), codec.filter(|c| c.is_transcodable())) {
            // A mixing room: the audio goes into the mix (sent on the room's ticks), not on.
            let pkt = InPacket {
                seq: facts.sequence,
                timestamp: facts.timestamp,
                marker: facts.marker,
                payload: payload_of(rtp, facts),
            };
            let ticking = mix.next_tick().is_some();
            match mix.audio(source, ssrc, c, &pkt, received) {
                Ok(w) => src.leg.counters_mut().decoded += w.decoded,
                Err(TranscodeError::Undecodable(_)) => {
                    src.leg.counters_mut().drop(DropReason::Undecodable);
                }
                Err(TranscodeError::Codec(why)) => {
                    tracing::warn!(codec = c.name(), %why, "mixing failed; packet dropped");
                    src.leg.counters_mut().drop(DropReason::NoCodec);
                }
            }
            if let (false, Some(t)) = (ticking, mix.next_tick()) {
                *wake = Some(wake.map_or(t, |w| w.min(t)));
            }
            return;
        }
        let video = codec.is_some_and(|c| !c.is_audio());
        if video {
            // Kept for receivers' NACKs (one buffer per source stream, whatever the viewers).
            let k = match src.video_in.iter().position(|v| v.ssrc == ssrc) {
                Some(k) => k,
                None => {
                    src.video_in.push(VideoIn {
                        ssrc,
                        buffer: RetransmitBuffer::new(),
                        keyframes: KeyframeGate::default(),
                    });
                    src.video_in.len() - 1
                }
            };
            src.video_in[k].buffer.store(rtp, facts);
        }
        // A simulcast layer's packet: which layer (its rid binds its SSRC the first time),
        // what the layers look like now, whether it starts a keyframe.
        let mut sim: Option<(usize, usize, [LayerInfo; MAX_LAYERS], bool)> = None;
        if video && !src.simulcast.is_empty() {
            let rid = facts.ext.get(rtp, src_ext.rid);
            for (g, layers) in src.simulcast.iter_mut().enumerate() {
                if let Some(k) = layers.layer_of(ssrc, rid) {
                    layers.note(k, rtp.len(), received);
                    let format = match codec {
                        Some(CodecId::H264) => VideoFormat::H264,
                        _ => VideoFormat::Vp8,
                    };
                    let body = rtp.get(usize::from(facts.header_len)..).unwrap_or_default();
                    sim = Some((g, k, layers.info(received), starts_keyframe(format, body)));
                    break;
                }
            }
        }
        // The VP8 descriptor as the publisher wrote it: each receiver's picture numbers are
        // made from it (the shared copy is rewritten receiver by receiver).
        let vp8 = if sim.is_some() && codec == Some(CodecId::Vp8) {
            rtp.get(usize::from(facts.header_len)..)
                .and_then(vp8_descriptor)
        } else {
            None
        };
        scratch.clear();
        scratch.extend_from_slice(rtp);
        let payload = rtp.len().saturating_sub(usize::from(facts.header_len));
        // A telephone-event packet goes with its stream's audio: where that audio is
        // transcoded for a receiver, so are its events (numbered in the transcoded stream).
        let event_audio = match codec {
            Some(c) if c.is_event() => transcoding.stream_codec(source, ssrc),
            _ => None,
        };
        for (j, r) in members.iter_mut().enumerate() {
            if j == i || !r.role.subscribes {
                continue;
            }
            let transcoded_events = event_audio
                .filter(|a| !r.leg.receives(*a))
                .and_then(|_| Format::for_receiver(r.leg.media()));
            let relayed = codec.filter(|c| r.leg.receives(*c) && transcoded_events.is_none());
            let Some(c) = relayed else {
                // Audio of a codec it did not take: decoded once and encoded in one it took
                // (after this loop), when it took one the gateway can encode.
                let format = transcoded_events.or_else(|| {
                    codec
                        .filter(|c| c.is_transcodable())
                        .and_then(|_| Format::for_receiver(r.leg.media()))
                });
                match format {
                    Some(f) if r.leg.copy_target().is_some() => transcode_to.push((j, f)),
                    Some(_) => r.leg.counters_mut().drop(DropReason::ReceiverNotReady),
                    None => r.leg.counters_mut().drop(DropReason::NoCodec),
                }
                continue;
            };
            let Some(target) = r.leg.copy_target() else {
                r.leg.counters_mut().drop(DropReason::ReceiverNotReady);
                continue;
            };
            let (seq, ts) = (facts.sequence, facts.timestamp);
            // Simulcast: one layer per receiver, switched at the target's keyframes.
            let mut view = None;
            let mut switched = false;
            if let Some((g, k, info, key)) = sim {
                let v = match r
                    .views
                    .iter()
                    .position(|v| v.publisher == source && v.section == g)
                {
                    Some(v) => v,
                    None => {
                        r.views.push(LayerView::new(source, g));
                        r.views.len() - 1
                    }
                };
                let estimate = r.cc.as_ref().map(|c| c.bwe.estimate_bps());
                r.views[v].evaluate(&info, estimate, received, false);
                match r.views[v].decide(k, key, &info) {
                    Decision::Forward => {}
                    Decision::Switch => {
                        switched = true;
                        r.rebase(source, &info, ssrc, (seq, ts), c.clock_rate(), received);
                    }
                    Decision::Skip(target_ssrc) => {
                        if let Some(t) = target_ssrc {
                            if r.views[v].should_ask(received, rtcp.keyframe_interval) {
                                keyframe_wanted.push((source, t));
                            }
                        }
                        continue;
                    }
                }
                view = Some(v);
            }
            let mut slot_index = None;
            let (pt, mapped, seq, ts) = match r.slot_for((source, ssrc), c, seq, ts) {
                Some((k, pt, new)) => {
                    // (A simulcast layer taken at its keyframe needs none.)
                    if new && video && !switched {
                        keyframe_wanted.push((source, ssrc));
                    }
                    slot_index = Some(k);
                    let slot = &mut r.slots[k];
                    let out = (
                        seq.wrapping_add(slot.seq_offset),
                        ts.wrapping_add(slot.ts_offset),
                    );
                    slot.last = Some(out);
                    slot.last_at = Some(received);
                    (pt, slot.ssrc, out.0, out.1)
                }
                None => {
                    // A browser binds each section's track by the `mid` of what comes: a stream
                    // outside a slot under an occupied section's mid would take that section
                    // over. It waits for a section of its own (a renegotiation gives one).
                    if r.ext.mid != 0 {
                        r.leg.counters_mut().drop(DropReason::NoSlot);
                        continue;
                    }
                    let Some(pt) = r.leg.payload_type_for(c) else {
                        r.leg.counters_mut().drop(DropReason::NoCodec);
                        continue;
                    };
                    r.leg.counters_mut().unslotted += 1;
                    let (mapped, new) = r.unslotted_ssrc(source, ssrc);
                    if new && video {
                        keyframe_wanted.push((source, ssrc));
                    }
                    (pt, mapped, seq, ts)
                }
            };
            r.rtcp
                .on_sent(mapped, c.clock_rate(), ts, payload, received);
            let (out, header): (&mut Vec<u8>, usize) = if r.ext.rewritten() {
                // Its own header extensions: mid, audio level, send time, transport-wide seq.
                let twcc = r.next_twcc(received, rtp.len());
                let mid = r.mid_for(slot_index, c);
                let header = write_copy(
                    copy_scratch,
                    rtp,
                    facts,
                    (src_ext, r.ext),
                    mid,
                    twcc,
                    abs_send,
                );
                (copy_scratch, header)
            } else {
                (scratch, usize::from(facts.header_len))
            };
            rewrite(out, pt, mapped, seq, ts);
            let mut picture = None;
            if let (Some(v), Some(d)) = (view, vp8) {
                // VP8's picture numbering follows on across layer switches.
                if let Some((id, fifteen, _)) = d.picture_id {
                    let tl0 = d.tl0picidx.map_or(0, |t| t.0);
                    let bits = if fifteen { 15 } else { 7 };
                    let (id, tl0) = r.views[v].renumber(id, tl0, bits, switched);
                    picture = Some((d, id, tl0));
                    if let Some(body) = out.get_mut(header..) {
                        vp8_rewrite(body, &d, id, tl0);
                    }
                }
            }
            let counters = r.leg.counters_mut();
            counters.forwarded += 1;
            if !target.protect {
                counters.packets_out += 1;
                counters.bytes_out += out.len() as u64;
            }
            emit(r.id, target, out);
            // A receiver sent less than the best layer: probe whether it can take more (the
            // estimate grows only so far above what it receives). A probe is this packet
            // again, as RTX, a few times over.
            let (Some(v), Some((_, k, info, _)), Some(slot)) = (view, sim, slot_index) else {
                continue;
            };
            let Some(cc) = r.cc.as_mut() else {
                continue;
            };
            let current = info[k].bps as f64;
            let wanted = info
                .iter()
                .filter(|l| l.active && l.ssrc.is_some() && l.bps as f64 > current)
                .map(|l| l.bps as f64 * crate::simulcast::UP_MARGIN)
                .min_by(f64::total_cmp)
                .filter(|_| r.views[v].manual.is_none());
            cc.prober.consider(&mut cc.bwe, current, wanted, received);
            let copies = cc.prober.copies(&mut cc.bwe, received);
            if copies == 0 {
                continue;
            }
            let rtx = r
                .leg
                .media()
                .get(r.slots[slot].section)
                .and_then(|m| Some((m.feedback.rtx_pt(pt)?, m.feedback.rtx_ssrc)));
            let (Some((rtx_pt, rtx_ssrc)), true) = (rtx, r.ext.rewritten()) else {
                continue;
            };
            let (copy, packet) = probe_scratch;
            for _ in 0..copies {
                let twcc = r.next_twcc(received, rtp.len() + 2);
                let mid = r.mid_for(slot_index, c);
                let header = write_copy(copy, rtp, facts, (src_ext, r.ext), mid, twcc, abs_send);
                rewrite(copy, pt, mapped, seq, ts);
                if let Some((d, id, tl0)) = picture {
                    if let Some(body) = copy.get_mut(header..) {
                        vp8_rewrite(body, &d, id, tl0);
                    }
                }
                let rtx_seq = r.slots[slot].rtx_seq;
                r.slots[slot].rtx_seq = rtx_seq.wrapping_add(1);
                write_rtx(packet, copy, header, rtx_pt, rtx_ssrc, rtx_seq);
                r.leg.counters_mut().feedback.probe_packets += 1;
                emit(r.id, target, packet);
            }
        }
        if let (Some(c), false) = (codec, transcode_to.is_empty()) {
            let env = CopyEnv {
                received,
                abs_send,
                emit,
            };
            transcode_and_send(
                members,
                i,
                (rtp, facts, c),
                transcoding,
                (transcode_to, formats),
                (scratch, copy_scratch),
                env,
            );
        }
        let wanted = std::mem::take(&mut self.keyframe_wanted);
        for &(publisher, stream) in &wanted {
            self.request_keyframe(publisher, stream, received);
        }
        self.keyframe_wanted = wanted;
        self.keyframe_wanted.clear();
    }

    /// Asks `publisher` for a keyframe of its stream `ssrc`, in the form its section agreed on
    /// (PLI, else FIR), unless one went less than the keyframe interval ago (then merged).
    fn request_keyframe(&mut self, publisher: MemberId, ssrc: u32, now: Instant) {
        let interval = self.rtcp.keyframe_interval;
        let Some(p) = self.members.iter_mut().find(|m| m.id == publisher) else {
            return;
        };
        let section = p
            .leg
            .media()
            .iter()
            .find(|m| m.peer_sends && m.kind == MediaKind::Video)
            .map(|m| m.feedback.clone())
            .unwrap_or_default();
        if !section.pli && !section.fir {
            // The publisher agreed on no way to be asked.
            return;
        }
        let Some(v) = p.video_in.iter_mut().find(|v| v.ssrc == ssrc) else {
            return;
        };
        if !v.keyframes.admit(now, interval) {
            p.leg.counters_mut().feedback.keyframe_requests_merged += 1;
            return;
        }
        let mut out = Vec::with_capacity(32);
        let sender = p.rtcp.reporter();
        write_empty_rr(&mut out, sender);
        if section.pli {
            write_pli(&mut out, sender, ssrc);
        } else {
            write_fir(&mut out, sender, ssrc, v.keyframes.fir_seq());
        }
        p.leg.counters_mut().feedback.keyframe_requests_out += 1;
        self.reports.push((publisher, out));
    }

    /// An RTCP compound received from `member`, authenticated and unprotected, read once: its
    /// reports for the member's figures, its feedback about what it receives answered (see
    /// [Feedback](self#feedback)): keyframe requests passed to the publishers (taken with
    /// [`Room::pop_report`]), NACKs answered with retransmissions handed to `emit` (as routed
    /// copies are) or asked of the publishers. A compound that does not frame is ignored (it
    /// authenticated: the member's own error). `false` if there is no such member.
    pub fn note_rtcp(
        &mut self,
        member: MemberId,
        compound_bytes: &[u8],
        received: Instant,
        emit: &mut dyn FnMut(MemberId, CopyTarget, &[u8]),
    ) -> bool {
        let Some(r) = self.members.iter().position(|m| m.id == member) else {
            return false;
        };
        let Ok(c) = compound(compound_bytes) else {
            return true;
        };
        let Room { members, rtcp, .. } = self;
        members[r].rtcp.on_reports(rtcp, &c.reports, received);
        for f in c.feedback {
            match f {
                Feedback::Pli { media, .. } => self.keyframe_asked(r, media, received),
                Feedback::Fir { requests, .. } => {
                    for (media, _) in requests {
                        self.keyframe_asked(r, media, received);
                    }
                }
                Feedback::Nack { media, lost, .. } => self.nacked(r, media, &lost, received, emit),
                Feedback::TransportCc { fci, .. } => {
                    if let (Ok((_, arrivals)), Some(cc)) =
                        (parse_feedback(&fci), self.members[r].cc.as_mut())
                    {
                        cc.bwe.on_feedback(&arrivals, received);
                    }
                }
                _ => {}
            }
        }
        true
    }

    /// The receiver at index `r` asked for a keyframe of the stream it knows as `ssrc`.
    fn keyframe_asked(&mut self, r: usize, ssrc: u32, now: Instant) {
        let m = &mut self.members[r];
        m.leg.counters_mut().feedback.keyframe_requests_in += 1;
        if let Some(((publisher, stream), _, _)) = m.stream_of(ssrc) {
            self.request_keyframe(publisher, stream, now);
        }
    }

    /// The receiver at index `r` lost `lost` of the stream it knows as `ssrc`: each packet
    /// the publisher stream's buffer holds is sent again (RTX where the receiver's section
    /// agreed on it, else the packet itself), the ones the gateway never received are asked of
    /// the publisher, and the ones too old are counted.
    fn nacked(
        &mut self,
        r: usize,
        ssrc: u32,
        lost: &[u16],
        now: Instant,
        emit: &mut dyn FnMut(MemberId, CopyTarget, &[u8]),
    ) {
        let Room {
            members,
            scratch,
            rtx_scratch,
            reports,
            rtcp,
            ..
        } = self;
        let abs_send = abs_send_time(rtcp.epoch.0, now);
        members[r].leg.counters_mut().feedback.nacked += lost.len() as u64;
        let Some(((publisher, stream), slot, offset)) = members[r].stream_of(ssrc) else {
            members[r].leg.counters_mut().feedback.nack_misses += lost.len() as u64;
            return;
        };
        let Some(p) = members.iter().position(|m| m.id == publisher) else {
            return;
        };
        let Some(target) = members[r].leg.copy_target() else {
            return;
        };
        if p == r {
            return;
        }
        // The publisher (read) and the receiver (changed) apart.
        let (pm, recv): (&Member, &mut Member) = if p < r {
            let (a, b) = members.split_at_mut(r);
            (&a[p], &mut b[0])
        } else {
            let (a, b) = members.split_at_mut(p);
            (&b[0], &mut a[r])
        };
        let src_ext = pm.ext;
        let mut upstream: Vec<u16> = Vec::new();
        let mut misses = 0u64;
        let mut resent = 0u64;
        for &seq in lost {
            let start = slot.map(|k| recv.slots[k].start);
            if start.is_some_and(|st| seq.wrapping_sub(st) >= 0x8000) {
                // Sent under this SSRC for a stream the slot carried before.
                misses += 1;
                continue;
            }
            let source_seq = seq.wrapping_sub(offset);
            let Some(v) = pm.video_in.iter().find(|v| v.ssrc == stream) else {
                misses += 1;
                continue;
            };
            match v.buffer.get(source_seq) {
                Lookup::Found(packet, facts) => {
                    let header = usize::from(facts.header_len);
                    let ts = facts.timestamp;
                    let codec = pm.leg.codec_for(facts.payload_type);
                    let (Some(codec), Some(pt)) =
                        (codec, codec.and_then(|c| recv.leg.payload_type_for(c)))
                    else {
                        misses += 1;
                        continue;
                    };
                    let ts_offset = slot.map_or(0, |k| recv.slots[k].ts_offset);
                    let section = slot
                        .map(|k| recv.slots[k].section)
                        .and_then(|s| recv.leg.media().get(s))
                        .map(|m| (m.feedback.rtx_pt(pt), m.feedback.rtx_ssrc));
                    match (section, slot) {
                        (Some((Some(rtx_pt), rtx_ssrc)), Some(k)) => {
                            let rtx_seq = recv.slots[k].rtx_seq;
                            recv.slots[k].rtx_seq = rtx_seq.wrapping_add(1);
                            // An RTX packet is a new packet: its own transport-wide number.
                            let header = if recv.ext.rewritten() {
                                let twcc = recv.next_twcc(now, packet.len());
                                let mid = recv.mid_for(slot, codec);
                                write_copy(
                                    scratch,
                                    packet,
                                    &facts,
                                    (src_ext, recv.ext),
                                    mid,
                                    twcc,
                                    abs_send,
                                )
                            } else {
                                scratch.clear();
                                scratch.extend_from_slice(packet);
                                header
                            };
                            rewrite(scratch, pt, ssrc, seq, ts.wrapping_add(ts_offset));
                            renumber_again(recv, publisher, codec, scratch, header);
                            write_rtx(rtx_scratch, scratch, header, rtx_pt, rtx_ssrc, rtx_seq);
                            emit(recv.id, target, rtx_scratch);
                        }
                        // The packet again, byte for byte as it was first sent (same header,
                        // same payload): its SRTP index protects the same bytes again. Not for
                        // a receiver whose copies carry per-send extensions (its first copy's
                        // header is not kept): that would protect other bytes under the index.
                        _ if !recv.ext.rewritten() => {
                            scratch.clear();
                            scratch.extend_from_slice(packet);
                            rewrite(scratch, pt, ssrc, seq, ts.wrapping_add(ts_offset));
                            emit(recv.id, target, scratch);
                        }
                        _ => {
                            misses += 1;
                            continue;
                        }
                    }
                    resent += 1;
                }
                Lookup::NeverReceived => upstream.push(source_seq),
                Lookup::Gone => misses += 1,
            }
        }
        let f = &mut members[r].leg.counters_mut().feedback;
        f.retransmitted += resent;
        f.nack_misses += misses;
        if !upstream.is_empty() {
            let pm = &mut members[p];
            let nack_ok = pm
                .leg
                .media()
                .iter()
                .any(|m| m.peer_sends && m.feedback.nack);
            if nack_ok {
                let sender = pm.rtcp.reporter();
                let mut out = Vec::with_capacity(16 + 4 * upstream.len());
                write_empty_rr(&mut out, sender);
                write_nack(&mut out, sender, stream, &upstream);
                pm.leg.counters_mut().feedback.nacks_upstream += upstream.len() as u64;
                reports.push((publisher, out));
            } else {
                members[r].leg.counters_mut().feedback.nack_misses += upstream.len() as u64;
            }
        }
    }

    /// Sets which simulcast layer `receiver` is sent of `publisher`'s (of every publisher's
    /// when `None`): the layer with rid `rid`, or the estimate's choice again with `None`. The
    /// switch happens at the layer's next keyframe, which is asked for. Err: no such member,
    /// or a rid no such publisher sends.
    pub fn set_layer(
        &mut self,
        receiver: MemberId,
        publisher: Option<MemberId>,
        rid: Option<&str>,
        now: Instant,
    ) -> Result<(), String> {
        let Some(r) = self.members.iter().position(|m| m.id == receiver) else {
            return Err(format!("no member {}", receiver.0));
        };
        let mut found = false;
        let mut ask = Vec::new();
        let views = self.members[r].views.clone();
        for (k, v) in views.iter().enumerate() {
            if publisher.is_some_and(|p| p != v.publisher) {
                continue;
            }
            let Some(p) = self.members.iter().find(|m| m.id == v.publisher) else {
                continue;
            };
            let Some(layers) = p.simulcast.get(v.section) else {
                continue;
            };
            let manual = match rid {
                None => None,
                Some(rid) => match layers.layers.iter().position(|l| l.rid == rid) {
                    Some(i) => Some(i),
                    None => continue,
                },
            };
            found = true;
            let info = layers.info(now);
            let estimate = self.members[r].cc.as_ref().map(|c| c.bwe.estimate_bps());
            let view = &mut self.members[r].views[k];
            view.manual = manual;
            if view.evaluate(&info, estimate, now, true) {
                if let Some(ssrc) = info[view.target].ssrc {
                    ask.push((view.publisher, ssrc));
                }
            }
        }
        for (p, ssrc) in ask {
            self.request_keyframe(p, ssrc, now);
        }
        if found {
            Ok(())
        } else {
            Err(match rid {
                Some(rid) => format!("no simulcast publisher sends a layer {rid:?} to this member"),
                None => "this member receives no simulcast publisher".into(),
            })
        }
    }

    /// The simulcast layers `member` sends, and what it is sent of others' (for the API).
    pub fn layers(&self, member: MemberId) -> (Vec<SentLayer>, Vec<ReceivedLayer>) {
        let Some(m) = self.members.iter().find(|m| m.id == member) else {
            return (Vec::new(), Vec::new());
        };
        let sent = m
            .simulcast
            .iter()
            .flat_map(|g| g.layers.iter())
            .map(|l| SentLayer {
                rid: l.rid.clone(),
                ssrc: l.ssrc,
                bps: l.bps,
            })
            .collect();
        let received = m
            .views
            .iter()
            .map(|v| {
                let rid = |k: usize| {
                    self.members
                        .iter()
                        .find(|p| p.id == v.publisher)
                        .and_then(|p| p.simulcast.get(v.section))
                        .and_then(|g| g.layers.get(k))
                        .map(|l| l.rid.clone())
                };
                ReceivedLayer {
                    publisher: v.publisher,
                    publisher_id: String::new(),
                    current: v.current.and_then(rid),
                    target: rid(v.target),
                    manual: v.manual.is_some(),
                    switches: v.switches,
                }
            })
            .collect();
        (sent, received)
    }

    /// The receive sections `member` lacks to be sent every publisher's streams at once: per
    /// kind, how many more than it has slots for (one per publishing section of that kind of
    /// every other member; a simulcast section counts once). Empty when it needs none (or does
    /// not subscribe).
    pub fn receive_needs(&self, member: MemberId) -> Vec<(MediaKind, usize)> {
        let Some(m) = self.members.iter().find(|m| m.id == member) else {
            return Vec::new();
        };
        if !m.role.subscribes {
            return Vec::new();
        }
        let mut out = Vec::new();
        for kind in [MediaKind::Audio, MediaKind::Video] {
            let want: usize = self
                .members
                .iter()
                .filter(|p| p.id != member && p.role.publishes)
                .map(|p| {
                    p.leg
                        .media()
                        .iter()
                        .filter(|s| s.peer_sends && s.kind == kind)
                        .count()
                })
                .sum();
            let media = m.leg.media();
            let have = m
                .slots
                .iter()
                .filter(|s| media.get(s.section).is_some_and(|x| x.kind == kind))
                .count();
            if want > have {
                out.push((kind, want - have));
            }
        }
        out
    }

    /// Gives `member` a receive slot for each receiving section its leg gained (a
    /// renegotiation added sections); streams waiting for a slot take them. The number added.
    pub fn sync_slots(&mut self, member: MemberId) -> usize {
        let Some(m) = self.members.iter_mut().find(|m| m.id == member) else {
            return 0;
        };
        let have: Vec<usize> = m.slots.iter().map(|s| s.section).collect();
        let new: Vec<(usize, u32)> = m
            .leg
            .media()
            .iter()
            .enumerate()
            .filter(|(k, x)| x.peer_receives && !have.contains(k))
            .map(|(k, x)| (k, x.our_ssrc))
            .collect();
        for (section, ssrc) in &new {
            m.slots.push(Slot {
                section: *section,
                ssrc: *ssrc,
                source: None,
                seq_offset: 0,
                ts_offset: 0,
                last: None,
                clock_rate: 0,
                last_at: None,
                start: 0,
                rtx_seq: random_ssrc() as u16,
            });
        }
        // Streams forwarded outside a slot take the new ones from their next packet.
        if !new.is_empty() {
            m.unslotted.clear();
        }
        new.len()
    }

    /// A deadline that routing set since the last call (a member's transport-wide feedback
    /// became due then): the caller's timer must fire by then ([`Room::handle_timeout`]).
    pub fn take_wake(&mut self) -> Option<Instant> {
        self.wake.take()
    }

    /// A member's bandwidth estimate (what we can send it), when it agreed on transport-cc.
    pub fn bandwidth(&self, member: MemberId) -> Option<BandwidthFigures> {
        let m = self.members.iter().find(|m| m.id == member)?;
        let cc = m.cc.as_ref()?;
        let b = &cc.bwe;
        Some(BandwidthFigures {
            estimate_bps: b.estimate_bps(),
            received_bps: b.received_bps().map(|r| r as u64),
            usage: match b.usage() {
                Usage::Normal => "normal",
                Usage::Overusing => "overusing",
                Usage::Underusing => "underusing",
            },
            loss_pct: b.loss() * 100.0,
            feedbacks: b.feedbacks(),
            probes: cc.prober.started,
            probes_delivered: cc.prober.delivered,
        })
    }

    /// A member's RTCP figures: what it sent us, what it reported about what we sent it.
    pub fn rtcp_figures(&self, member: MemberId) -> Option<RtcpFigures> {
        let m = self.members.iter().find(|m| m.id == member)?;
        Some(m.rtcp.figures())
    }

    /// The next RTCP report made by [`Room::handle_timeout`]: the member and the plain
    /// compound, to be sent to it (protected with its keys on a secure leg).
    pub fn pop_report(&mut self) -> Option<(MemberId, Vec<u8>)> {
        self.reports.pop()
    }

    /// Advances time for every member whose deadline has come, and makes the RTCP reports
    /// that are due.
    pub fn handle_timeout(&mut self, now: Instant) {
        let epoch = self.rtcp.epoch.0;
        for m in &mut self.members {
            if m.leg.poll_timeout().is_some_and(|t| now >= t) {
                m.leg.handle_timeout(now);
            }
            if let Some(report) = twcc_due(m, epoch, now) {
                self.reports.push((m.id, report));
            }
            let can_send = m.leg.closed().is_none() && m.leg.rtcp_target().is_some();
            if let Some(report) = m.rtcp.report_due(&self.rtcp, now, can_send) {
                self.reports.push((m.id, report));
            }
        }
    }

    /// Sends each member its mix for every tick due by `now` (a mixing room; nothing
    /// otherwise): the sum of the others' audio, encoded in its own format and handed to `emit`
    /// as routed copies are, on its first receiving audio section (one stream, as a telephone
    /// takes). Counted as forwarded and transcoded at the receiver; the encodes once each
    /// ([`Mixing::encoded_for`]: a talker's own mix at the talker, a shared mix at one of its
    /// receivers).
    pub fn mix_due(&mut self, now: Instant, emit: &mut dyn FnMut(MemberId, CopyTarget, &[u8])) {
        let Room {
            members,
            mixing,
            scratch,
            copy_scratch,
            rtcp,
            mix_receivers: (receivers, at),
            ..
        } = self;
        let Some(mix) = mixing.as_mut() else {
            return;
        };
        while mix.next_tick().is_some_and(|t| t <= now) {
            receivers.clear();
            at.clear();
            for (k, m) in members.iter().enumerate() {
                if !m.role.subscribes || m.leg.copy_target().is_none() {
                    continue;
                }
                if let Some(f) = Format::for_receiver(m.leg.media()) {
                    receivers.push((m.id, f));
                    at.push(k);
                }
            }
            if let Err(e) = mix.tick(now, receivers) {
                tracing::warn!(?e, "mixing tick failed");
                continue;
            }
            let mut env = CopyEnv {
                received: now,
                abs_send: abs_send_time(rtcp.epoch.0, now),
                emit: &mut *emit,
            };
            for (&(id, format), &k) in receivers.iter().zip(at.iter()) {
                let r = &mut members[k];
                r.leg.counters_mut().encoded += mix.encoded_for(id);
                for out in mix.ready(id) {
                    let made = made_packet(
                        scratch,
                        MIX_SSRC,
                        out.seq,
                        out.timestamp,
                        out.marker,
                        out.payload,
                    );
                    r.send_made(
                        (MIXER, MIX_SSRC),
                        format.codec,
                        scratch,
                        &made,
                        copy_scratch,
                        &mut env,
                    );
                }
            }
        }
    }

    /// The earliest deadline among the members, RTCP reports included.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.members
            .iter()
            .flat_map(|m| {
                [
                    m.leg.poll_timeout(),
                    m.rtcp.next_report(),
                    m.cc.as_ref().and_then(|c| c.next_feedback),
                ]
            })
            .flatten()
            .chain(self.mixing.as_ref().and_then(Mixing::next_tick))
            .min()
    }

    /// The members' next output, tagged with the member; then the room's next deadline.
    pub fn poll_output(&mut self) -> Option<RoomOutput<'_>> {
        while self.cursor < self.members.len() && !self.members[self.cursor].leg.has_output() {
            self.cursor += 1;
        }
        if self.cursor >= self.members.len() {
            self.cursor = 0;
            return self.poll_timeout().map(RoomOutput::Timeout);
        }
        let m = &mut self.members[self.cursor];
        let id = m.id;
        // `has_output` was true: this is a queued output, not the closing timeout.
        m.leg.poll_output().map(|o| RoomOutput::Member(id, o))
    }
}

/// A retransmitted VP8 packet of a simulcast layer gets the picture numbers its first copy got
/// (the receiver's numbering as it stands: only packets of the layer sent now are retransmitted).
fn renumber_again(
    recv: &Member,
    publisher: MemberId,
    codec: CodecId,
    copy: &mut [u8],
    header: usize,
) {
    if codec != CodecId::Vp8 {
        return;
    }
    let Some(v) = recv.views.iter().find(|v| v.publisher == publisher) else {
        return;
    };
    let Some(body) = copy.get_mut(header..) else {
        return;
    };
    if let Some(d) = vp8_descriptor(body) {
        if let Some((id, fifteen, _)) = d.picture_id {
            let tl0 = d.tl0picidx.map_or(0, |t| t.0);
            let (id, tl0) = v.mapped(id, tl0, if fifteen { 15 } else { 7 });
            vp8_rewrite(body, &d, id, tl0);
        }
    }
}

/// The `abs-send-time` of `at` (6.18 fixed-point seconds, 24 bits) on a clock from `epoch`.
fn abs_send_time(epoch: Instant, at: Instant) -> u32 {
    let us = at.saturating_duration_since(epoch).as_micros();
    ((us << 18) / 1_000_000) as u32 & 0x00ff_ffff
}

/// Writes into `out` a copy of `rtp` (its header read as `facts`) with the header extensions a
/// receiver agreed on, in its ids (`ext.1`; the source's are `ext.0`): its section's `mid`, the
/// source's audio level, our send time and its transport-wide sequence number; the fixed
/// header and CSRCs as they were (the caller sets SSRC, payload type and numbering). The new
/// header's length.
fn write_copy(
    out: &mut Vec<u8>,
    rtp: &[u8],
    facts: &RtpFacts,
    ext: (ExtIds, ExtIds),
    mid: &str,
    twcc: Option<u16>,
    abs_send: u32,
) -> usize {
    let (src, dst) = ext;
    out.clear();
    let header_len = usize::from(facts.header_len).min(rtp.len());
    let fixed = (12 + 4 * usize::from(rtp.first().map_or(0, |b| b & 0x0f))).min(header_len);
    out.extend_from_slice(&rtp[..fixed]);
    let abs = abs_send.to_be_bytes();
    let seq = twcc.unwrap_or(0).to_be_bytes();
    let mut els: [(u8, &[u8]); 4] = [(0, &[]); 4];
    let mut n = 0;
    if dst.mid != 0 && !mid.is_empty() && mid.len() <= 16 {
        els[n] = (dst.mid, mid.as_bytes());
        n += 1;
    }
    if dst.audio_level != 0 && src.audio_level != 0 {
        if let Some(level) = facts.ext.get(rtp, src.audio_level) {
            els[n] = (dst.audio_level, level);
            n += 1;
        }
    }
    if dst.abs_send_time != 0 {
        els[n] = (dst.abs_send_time, &abs[1..]);
        n += 1;
    }
    if dst.twcc != 0 && twcc.is_some() {
        els[n] = (dst.twcc, &seq);
        n += 1;
    }
    if let Some(b) = out.first_mut() {
        if n > 0 {
            *b |= 0x10;
        } else {
            *b &= !0x10;
        }
    }
    write_extension(out, &els[..n]);
    let new_header = out.len();
    out.extend_from_slice(&rtp[header_len..]);
    new_header
}

/// Transport-wide feedback for member `m` if it is due at `now`: every arrival noted since the
/// last, in one compound (an empty RR, then feedback messages).
fn twcc_due(m: &mut Member, epoch: Instant, now: Instant) -> Option<Vec<u8>> {
    let sender = m.rtcp.reporter();
    let cc = m.cc.as_mut()?;
    if cc.next_feedback.is_none_or(|t| now < t) {
        return None;
    }
    cc.next_feedback = None;
    if cc.arrivals.is_empty() {
        return None;
    }
    // In sequence order (arrivals can be reordered), each number once, gaps as losses.
    let base = cc.arrivals[0].0;
    cc.arrivals
        .sort_by_key(|(seq, _)| seq.wrapping_sub(base.wrapping_sub(0x8000)));
    cc.arrivals.dedup_by_key(|(seq, _)| *seq);
    let mut list: Vec<Arrival> = Vec::with_capacity(cc.arrivals.len());
    for &(seq, at) in &cc.arrivals {
        if let Some(last) = list.last().map(|a| a.seq) {
            let gap = seq.wrapping_sub(last);
            // A gap longer than a feedback can say: start over from this packet.
            if gap > 1000 {
                list.clear();
            } else {
                for k in 1..gap {
                    list.push(Arrival {
                        seq: last.wrapping_add(k),
                        at_us: None,
                    });
                }
            }
        }
        let us = at.saturating_duration_since(epoch).as_micros() as i64;
        list.push(Arrival {
            seq,
            at_us: Some(us),
        });
    }
    cc.arrivals.clear();
    let mut out = Vec::with_capacity(64 + list.len() * 2);
    write_empty_rr(&mut out, sender);
    let mut at = 0;
    while at < list.len() {
        let n = write_feedback(&mut out, sender, cc.media_ssrc, cc.fb_count, &list[at..]);
        if n == 0 {
            break;
        }
        cc.fb_count = cc.fb_count.wrapping_add(1);
        at += n;
    }
    Some(out)
}

/// Sets the payload type (keeping the marker bit), sequence number, timestamp and SSRC of an
/// RTP packet whose header has already been parsed (at least 12 bytes).
fn rewrite(rtp: &mut [u8], pt: u8, ssrc: u32, seq: u16, ts: u32) {
    if rtp.len() >= 12 {
        rtp[1] = (rtp[1] & 0x80) | (pt & 0x7f);
        rtp[2..4].copy_from_slice(&seq.to_be_bytes());
        rtp[4..8].copy_from_slice(&ts.to_be_bytes());
        rtp[8..12].copy_from_slice(&ssrc.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::rewrite;

    #[test]
    fn rewrite_keeps_marker_and_sets_pt_and_ssrc() {
        let mut p = [0u8; 14];
        p[0] = 0x80;
        p[1] = 0x80 | 111;
        rewrite(&mut p, 0, 0xaabb_ccdd, 0x0102, 0x0304_0506);
        assert_eq!(p[1], 0x80);
        assert_eq!(&p[2..8], &[1, 2, 3, 4, 5, 6]);
        assert_eq!(&p[8..12], &[0xaa, 0xbb, 0xcc, 0xdd]);
    }
}
