//! A room's member, in one place: its [`Leg`], what the signaling knows of it ([`Session`]),
//! what it negotiated (read once into tables: [`Negotiated`]), its receive slots, its streams
//! as a publisher, its subscriptions as a receiver, its RTCP and congestion control.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use secrelay_srtp::Profile;
use secrelay_wire::demux::RtpFacts;
use secrelay_wire::rtcp::write_empty_rr;
use secrelay_wire::twcc::{arrival_list, write_feedback};

use super::gate::Gate;
use super::inject::Injector;
use crate::bwe::{Bwe, Prober};
use crate::counters::EndReason;
use crate::feedback::{KeyframeGate, RetransmitBuffer};
use crate::leg::{CodecId, ExtIds, Leg, LegKind, NegotiatedMedia};
use crate::rtcp::MemberRtcp;
use crate::simulcast::Layers;
use crate::transcode::Format;

/// A member's handle in its room (never reused by a later member of the room).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct MemberId(pub u32);

/// Where a member is in its room: its place in the room's table (reused once it leaves) and its
/// id (which tells a later member in the same place apart). What the shard's routes, staged
/// packets and a room's outputs name a member by: found without a search.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct MemberAt {
    pub(crate) ix: u32,
    pub(crate) id: MemberId,
}

impl MemberAt {
    /// The member's id.
    pub fn id(&self) -> MemberId {
        self.id
    }
}

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

/// How a participant joined, as the signaling named it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum JoinKind {
    /// Publishes with WHIP.
    Whip,
    /// Subscribes with WHEP.
    Whep,
    /// Joined a conference: sends and receives.
    Join,
    /// A telephony leg (plain RTP or SDES-SRTP): sends and receives as its SDP says.
    Rtp,
}

impl JoinKind {
    /// As the API and the logs name it (`whip`, `whep`, `join`, `rtp`).
    pub fn name(self) -> &'static str {
        match self {
            JoinKind::Whip => "whip",
            JoinKind::Whep => "whep",
            JoinKind::Join => "join",
            JoinKind::Rtp => "rtp",
        }
    }

    /// What a member that joined this way does.
    pub fn role(self) -> MemberRole {
        match self {
            JoinKind::Whip => MemberRole::PUBLISHER,
            JoinKind::Whep => MemberRole::SUBSCRIBER,
            JoinKind::Join | JoinKind::Rtp => MemberRole::BOTH,
        }
    }
}

/// What the signaling knows of a member: its id and identity, how it joined, the routes that
/// lead to it, and where it is in its life. Kept by the room with the member; the shard reads
/// and writes it.
#[derive(Debug, Clone)]
pub struct Session {
    /// Its id (the last segment of its resource URL).
    pub id: String,
    /// The identity it joined with, if any.
    pub name: Option<String>,
    /// How it joined.
    pub kind: JoinKind,
    /// Its local ICE ufrags.
    pub ufrags: Vec<String>,
    /// Its validated source addresses.
    pub addrs: Vec<SocketAddr>,
    /// Its own local ports (a telephony leg's).
    pub ports: Vec<u16>,
    /// The negotiated SRTP profile, once connected.
    pub profile: Option<Profile>,
    /// Its security is up.
    pub connected: bool,
    /// Why it is closing, once it is.
    pub closing: Option<EndReason>,
    /// When it joined.
    pub created: Instant,
    /// It listens for our new offers (renegotiation when senders arrive).
    pub events: bool,
    /// It was told to have started publishing.
    pub publishing: bool,
    /// Its call is kept for another node to take over: when this node stops, it ends
    /// without a word to its peer ([`crate::counters::EndReason::HandedOver`]).
    pub kept: bool,
}

/// What a member negotiated, read once into tables (and again when a renegotiation changes
/// it, [`crate::room::Room::media_changed`]), so that routing looks nothing up in its SDP.
// In this order (C layout): what a fan-out reads of every receiver for every packet (the
// extension ids, the known codecs it takes, its transcoding format) on the first line.
#[derive(Debug, Clone)]
#[repr(C)]
pub(crate) struct Negotiated {
    /// The header extension ids it agreed on.
    pub ext: ExtIds,
    /// The known codecs it receives, a bit per place in [`CodecId::ALL`].
    takes_known: u16,
    /// The known codecs it negotiated, receiving or not, a bit per place in [`CodecId::ALL`].
    has_known: u16,
    /// What it is sent transcoded (or mixed) audio in.
    pub format: Option<Format>,
    /// Its payload type for each known codec it negotiated (the first section's), by place in
    /// [`CodecId::ALL`]: what a copy outside a slot is sent under, read without a search.
    known_pt: [Option<u8>; CodecId::ALL.len()],
    /// The codecs it negotiated, each once: its payload type for it (the first section's) and
    /// whether it receives it (a receiving section with it).
    codecs: Vec<(CodecId, u8, bool)>,
    /// By payload type, the codec's place in `codecs` plus one (0: a type it did not
    /// negotiate).
    by_pt: [u8; 128],
}

impl Negotiated {
    /// The tables of `media`.
    pub fn of(media: &[NegotiatedMedia]) -> Negotiated {
        let mut n = Negotiated {
            ext: ExtIds::of(media),
            codecs: Vec::new(),
            known_pt: [None; CodecId::ALL.len()],
            takes_known: 0,
            has_known: 0,
            by_pt: [0; 128],
            format: Format::for_receiver(media),
        };
        for m in media {
            for &(c, pt) in &m.codecs {
                let k = match n.codecs.iter().position(|x| x.0 == c) {
                    Some(k) => k,
                    None => {
                        n.codecs.push((c, pt, false));
                        n.codecs.len() - 1
                    }
                };
                n.codecs[k].2 |= m.peer_receives;
                if let Some(i) = c.known_index() {
                    n.known_pt[i].get_or_insert(n.codecs[k].1);
                    n.has_known |= 1 << i;
                    if m.peer_receives {
                        n.takes_known |= 1 << i;
                    }
                }
                let at = &mut n.by_pt[usize::from(pt & 0x7f)];
                if *at == 0 {
                    *at = u8::try_from(k + 1).unwrap_or(0);
                }
            }
        }
        n
    }

    /// Asks the CPU to start loading the line [`Negotiated::codec`] reads for `pt` first.
    pub fn prefetch_codec(&self, pt: u8) {
        secrelay_srtp::simd::prefetch::value(&self.by_pt[usize::from(pt & 0x7f)], 1);
    }

    /// The codec of payload type `pt`.
    pub fn codec(&self, pt: u8) -> Option<CodecId> {
        let k = usize::from(self.by_pt[usize::from(pt & 0x7f)]);
        Some(self.codecs.get(k.checked_sub(1)?)?.0)
    }

    /// Its payload type for `codec` (a known codec's from its table, another's by a scan of
    /// its few codecs).
    pub fn pt(&self, codec: CodecId) -> Option<u8> {
        match codec.known_index() {
            Some(i) => self.known_pt[i],
            None => self.codecs.iter().find(|x| x.0 == codec).map(|x| x.1),
        }
    }

    /// Whether it receives telephone-events (at 8, 16 or 48 kHz): one test of its table, as
    /// it is asked per receiver of every transcodable packet.
    pub fn takes_events(&self) -> bool {
        self.takes_known & EVENT_BITS != 0
    }

    /// Whether it negotiated telephone-events (at 8, 16 or 48 kHz), so sends its digits as
    /// events rather than as tones in its audio: one test of its table, as it is asked for
    /// every transcodable packet it sends.
    pub fn sends_events(&self) -> bool {
        self.has_known & EVENT_BITS != 0
    }

    /// Whether it receives comfort noise (RFC 3389 at 8 kHz): one test of its table, as
    /// [`Negotiated::takes_events`].
    pub fn takes_cn(&self) -> bool {
        self.takes_known & CN_BIT != 0
    }

    /// Whether it negotiated comfort noise at 8 kHz, so may send it in its silences: one test
    /// of its table, as it is asked for every transcodable packet it sends.
    pub fn sends_cn(&self) -> bool {
        self.has_known & CN_BIT != 0
    }

    /// Whether it receives `codec`.
    pub fn takes(&self, codec: CodecId) -> bool {
        match codec.known_index() {
            Some(i) => self.takes_known & (1 << i) != 0,
            None => self.codecs.iter().any(|x| x.0 == codec && x.2),
        }
    }
}

/// A receiving section of a member and the stream it carries (see
/// [Streams and receive slots](crate::room#streams-and-receive-slots)).
#[derive(Debug)]
pub(crate) struct Slot {
    /// Index of the section in the member's negotiated media.
    pub section: usize,
    /// The SSRC announced for the section.
    pub ssrc: u32,
    /// The codecs the section accepted, with its payload type for each.
    pub codecs: PtTable,
    /// The section's mid, as a copy's header extension carries it.
    pub mid: ShortMid,
    /// The subscription on it now.
    pub holder: Option<u32>,
    /// Where the last stream on it stopped: what the next one continues from.
    pub tail: Option<Tail>,
    /// The next sequence number of our retransmissions (RTX) on the section.
    pub rtx_seq: u16,
}

/// The bits of the telephone-event codecs in `Negotiated::takes_known`.
const EVENT_BITS: u16 = {
    let mut bits = 0;
    let mut i = 0;
    while i < CodecId::ALL.len() {
        if CodecId::ALL[i].is_event() {
            bits |= 1 << i;
        }
        i += 1;
    }
    bits
};

/// The bit of comfort noise in `Negotiated::takes_known`.
const CN_BIT: u16 = match CodecId::ComfortNoise.known_index() {
    Some(i) => 1 << i,
    None => 0,
};

// A bit for each known codec in `Negotiated::takes_known`.
const _: () = assert!(CodecId::ALL.len() <= u16::BITS as usize);

/// Payload types by codec: the known codecs' by their place in [`CodecId::ALL`], inline (a
/// fan-out reads one per copy, and a list behind a pointer was a cache miss per receiver);
/// the formats the gateway only relays, in a list searched for those alone.
#[derive(Debug, Clone, Default)]
pub(crate) struct PtTable {
    known: [Option<u8>; CodecId::ALL.len()],
    others: Vec<(CodecId, u8)>,
}

impl PtTable {
    /// The table of `codecs` (the first payload type of a codec listed twice).
    fn of(codecs: &[(CodecId, u8)]) -> PtTable {
        let mut t = PtTable::default();
        for &(c, pt) in codecs {
            match c.known_index() {
                Some(i) => {
                    t.known[i].get_or_insert(pt);
                }
                None if t.others.iter().all(|x| x.0 != c) => t.others.push((c, pt)),
                None => {}
            }
        }
        t
    }

    /// The payload type for `codec`.
    fn get(&self, codec: CodecId) -> Option<u8> {
        match codec.known_index() {
            Some(i) => self.known[i],
            None => self.others.iter().find(|x| x.0 == codec).map(|x| x.1),
        }
    }
}

/// The longest mid a copy's `sdes:mid` header extension carries (RFC 8285's one-byte form); a
/// longer one is not written.
pub(crate) const MID_MAX: usize = 16;

/// A section's mid as a copy's `sdes:mid` header extension carries it, inline: at most
/// [`MID_MAX`] bytes; a longer one is kept empty, so it is not written.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ShortMid {
    len: u8,
    bytes: [u8; MID_MAX],
}

impl ShortMid {
    fn of(mid: &str) -> ShortMid {
        let mut m = ShortMid::default();
        if let Some(dst) = m.bytes.get_mut(..mid.len()) {
            dst.copy_from_slice(mid.as_bytes());
            m.len = mid.len() as u8;
        }
        m
    }

    /// The mid's bytes (none when it was longer than [`MID_MAX`]).
    pub fn as_bytes(&self) -> &[u8] {
        self.bytes.get(..usize::from(self.len)).unwrap_or_default()
    }
}

/// The last packet sent on a slot.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tail {
    /// Its sequence number and timestamp.
    pub last: (u16, u32),
    /// The clock rate of its stream.
    pub clock_rate: u32,
}

impl Slot {
    fn new(section: usize, m: &NegotiatedMedia) -> Slot {
        let mut s = Slot {
            section,
            ssrc: m.our_ssrc,
            codecs: PtTable::default(),
            mid: ShortMid::default(),
            holder: None,
            tail: None,
            rtx_seq: random_u32() as u16,
        };
        s.read(m);
        s
    }

    /// Reads the section's codecs again, and its SSRC (a leg taken over from another node
    /// takes the SSRCs its peer knows).
    fn read(&mut self, m: &NegotiatedMedia) {
        self.codecs = PtTable::of(&m.codecs);
        self.mid = ShortMid::of(&m.mid);
        self.ssrc = m.our_ssrc;
    }

    /// The section's payload type for `codec`, if it accepted it (its first).
    pub fn pt(&self, codec: CodecId) -> Option<u8> {
        self.codecs.get(codec)
    }

    /// The next sequence number on the section's RTX stream.
    pub fn next_rtx_seq(&mut self) -> u16 {
        let s = self.rtx_seq;
        self.rtx_seq = s.wrapping_add(1);
        s
    }
}

/// A stream a member publishes (one SSRC): the feed its packets are routed by, and for video
/// what receivers' NACKs and keyframe requests about it need.
#[derive(Debug)]
pub(crate) struct Stream {
    /// Its SSRC.
    pub ssrc: u32,
    /// The room's feed it is routed by (a simulcast section's layers share one).
    pub feed: u32,
    /// Its simulcast layer: (the member's simulcast section, the layer).
    pub layer: Option<(usize, usize)>,
    /// For video: its retransmission buffer and keyframe requests.
    pub video: Option<VideoIn>,
    /// When its last packet arrived.
    pub last: Instant,
}

/// The most streams (SSRCs) one member publishes at once. Each has a feed, a subscription per
/// receiver and, for video, a retransmission buffer: a member sending under ever new SSRCs
/// would otherwise take memory without end. Simulcast's three layers with their
/// retransmissions, audio and a screen share come to about ten.
pub const MAX_STREAMS: usize = 32;

/// A stream whose last packet is this old is given up when a new SSRC of its member needs its
/// place (a phone that changed SSRC, a track replaced): its feed and subscriptions go.
pub const STREAM_IDLE: Duration = Duration::from_secs(5);

/// A video stream received from a member.
#[derive(Debug, Default)]
pub(crate) struct VideoIn {
    pub buffer: RetransmitBuffer,
    pub keyframes: KeyframeGate,
}

/// How often a member that agreed on transport-cc gets feedback on what it sends.
pub const TWCC_INTERVAL: Duration = Duration::from_millis(100);

/// Transport-wide congestion control with one member, both ways.
#[derive(Debug)]
pub(crate) struct Congestion {
    /// Its packets' transport-wide sequence numbers and arrival instants, not yet reported.
    arrivals: Vec<(u16, Instant)>,
    /// The last SSRC it sent on (the feedback's media field).
    media_ssrc: u32,
    /// When the next feedback is due (while arrivals wait).
    pub next_feedback: Option<Instant>,
    /// Feedback messages sent (their 8-bit count).
    fb_count: u8,
    /// The next transport-wide sequence number of what we send it.
    out_seq: u16,
    /// What we send it, estimated from its feedback.
    pub bwe: Bwe,
    /// Probes for a higher simulcast layer than the estimate allows.
    pub prober: Prober,
}

impl Congestion {
    fn new() -> Congestion {
        Congestion {
            arrivals: Vec::new(),
            media_ssrc: 0,
            next_feedback: None,
            fb_count: 0,
            out_seq: random_u32() as u16,
            bwe: Bwe::new(),
            prober: Prober::default(),
        }
    }

    /// A packet it sent with transport-wide number `seq` arrived at `at` on `ssrc`: the
    /// deadline of the feedback about it when this is the first since the last feedback.
    pub fn arrived(&mut self, seq: u16, ssrc: u32, at: Instant) -> Option<Instant> {
        self.arrivals.push((seq, at));
        self.media_ssrc = ssrc;
        if self.next_feedback.is_some() {
            return None;
        }
        let t = at + TWCC_INTERVAL;
        self.next_feedback = Some(t);
        Some(t)
    }

    /// The next transport-wide sequence number of what we send it, noted as sent at `at` with
    /// `size` bytes.
    pub fn next_seq(&mut self, at: Instant, size: usize) -> u16 {
        let seq = self.out_seq;
        self.out_seq = seq.wrapping_add(1);
        self.bwe.on_sent(seq, at, size);
        seq
    }

    /// Transport-wide feedback (from reporter `sender`), if it is due at `now`: every arrival
    /// noted since the last, in one compound (an empty RR, then feedback messages).
    pub fn feedback_due(&mut self, sender: u32, epoch: Instant, now: Instant) -> Option<Vec<u8>> {
        if self.next_feedback.is_none_or(|t| now < t) {
            return None;
        }
        self.next_feedback = None;
        if self.arrivals.is_empty() {
            return None;
        }
        let list = arrival_list(&mut self.arrivals, |at: Instant| {
            at.saturating_duration_since(epoch).as_micros() as i64
        });
        let mut out = Vec::with_capacity(64 + list.len() * 2);
        write_empty_rr(&mut out, sender);
        let mut at = 0;
        while at < list.len() {
            let n = write_feedback(
                &mut out,
                sender,
                self.media_ssrc,
                self.fb_count,
                &list[at..],
            );
            if n == 0 {
                break;
            }
            self.fb_count = self.fb_count.wrapping_add(1);
            at += n;
        }
        Some(out)
    }
}

/// A member of a room. See the [module documentation](self).
pub(crate) struct Member {
    /// Where it is in the room.
    pub at: MemberAt,
    pub role: MemberRole,
    /// The kind it joined as (its counters stay with it, whatever a renegotiation makes it).
    pub kind: LegKind,
    pub leg: Leg,
    pub session: Session,
    /// What it negotiated, as tables.
    pub neg: Negotiated,
    /// One per receiving section of the answer.
    pub slots: Vec<Slot>,
    /// How many of them carry no stream now.
    pub free_slots: usize,
    /// What it sent us and we sent it, for its RTCP reports.
    pub rtcp: MemberRtcp,
    /// Transport-wide congestion control, when it agreed on transport-cc.
    pub cc: Option<Congestion>,
    /// The streams it publishes (at most [`MAX_STREAMS`]), and their SSRCs in the same order:
    /// a packet's stream is found by a look along these few words, on one or two cache lines
    /// (a hash map of its own per member was a cache miss per packet with many members).
    pub streams: Vec<Stream>,
    pub ssrcs: Vec<u32>,
    /// The simulcast layers it sends, per section that agreed on simulcast, and the feed each
    /// section's layers are routed by once one was seen.
    pub simulcast: Vec<Layers>,
    pub layer_feeds: Vec<Option<u32>>,
    /// Its subscriptions (the room's) as a receiver.
    pub subs: Vec<u32>,
    /// The one member whose streams it receives, when it listens to one alone (an ng
    /// subscription to one participant); `None`: every publisher's.
    pub hears_only: Option<MemberId>,
    /// The SSRC it is sent each stream under → the subscription, and whether that SSRC is
    /// the subscription's slot (else the one it has outside a slot): what its NACKs and
    /// keyframe requests name.
    pub seen: HashMap<u32, (u32, bool)>,
    /// Its subscription to the room's mix, once it was sent one.
    pub mix_sub: Option<u32>,
    /// When it is on the room's timer for ([`super::timers::Timers`]).
    pub due: Option<Instant>,
    /// What of its media the room passes on ([`super::gate`]).
    pub gate: Gate,
    /// DTMF it plays as if it had sent it ([`super::inject`]).
    pub inject: Injector,
    /// The key its packets are recorded under, while its call is recorded.
    pub recording: Option<u64>,
    /// Media played to it, in place of the audio it hears ([`super::player`]).
    pub player: Option<Box<super::player::Player>>,
}

impl std::fmt::Debug for Member {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Member")
            .field("at", &self.at)
            .field("role", &self.role)
            .finish_non_exhaustive()
    }
}

impl Member {
    /// Whether it is subscribed to what `publisher` publishes: it subscribes, and to every
    /// publisher or that one.
    pub fn hears(&self, publisher: MemberId) -> bool {
        self.role.subscribes && self.hears_only.is_none_or(|h| h == publisher)
    }

    pub fn new(
        at: MemberAt,
        role: MemberRole,
        leg: Leg,
        session: Session,
        rtcp: MemberRtcp,
    ) -> Member {
        let media = leg.media();
        let slots: Vec<Slot> = media
            .iter()
            .enumerate()
            .filter(|(_, m)| m.peer_receives)
            .map(|(section, m)| Slot::new(section, m))
            .collect();
        let simulcast: Vec<Layers> = media
            .iter()
            .enumerate()
            .filter(|(_, m)| m.peer_sends && !m.simulcast.is_empty())
            .map(|(k, m)| Layers::new(k, &m.simulcast))
            .collect();
        let neg = Negotiated::of(media);
        Member {
            at,
            role,
            kind: leg.kind(),
            free_slots: slots.len(),
            slots,
            layer_feeds: vec![None; simulcast.len()],
            simulcast,
            rtcp,
            cc: (neg.ext.twcc != 0).then(Congestion::new),
            neg,
            session,
            streams: Vec::new(),
            ssrcs: Vec::new(),
            subs: Vec::new(),
            hears_only: None,
            seen: HashMap::new(),
            mix_sub: None,
            due: None,
            gate: Gate::default(),
            inject: Injector::default(),
            recording: None,
            player: None,
            leg,
        }
    }

    /// Reads what the leg negotiated again (a renegotiation changed it): the tables, and a
    /// receive slot for each receiving section it gained. The number of slots added.
    pub fn renegotiated(&mut self) -> usize {
        let media = self.leg.media();
        self.neg = Negotiated::of(media);
        for s in &mut self.slots {
            if let Some(m) = media.get(s.section) {
                let was = s.ssrc;
                s.read(m);
                if s.ssrc != was {
                    // A leg taken over took the SSRC its peer knows: what is known by the
                    // slot's SSRC follows it.
                    if let Some(v) = self.seen.remove(&was) {
                        self.seen.insert(s.ssrc, v);
                    }
                }
            }
        }
        let mut added = 0;
        for (k, m) in media.iter().enumerate() {
            if m.peer_receives && !self.slots.iter().any(|s| s.section == k) {
                self.slots.push(Slot::new(k, m));
                added += 1;
            }
        }
        self.free_slots += added;
        added
    }

    /// Asks the CPU to start loading what forwarding a copy to this member reads: its role
    /// and tables, the slot the copy goes on (`slot`), RTCP and congestion state, and its
    /// leg's. A hint a fan-out gives a few receivers ahead, so that their lines arrive while
    /// it writes the current copies.
    pub fn prefetch_copy(&self, slot: Option<usize>) {
        use secrelay_srtp::simd::prefetch::{line, value};
        value(&self.role, 1);
        value(&self.neg, 1);
        match slot.and_then(|k| self.slots.get(k)) {
            Some(s) => value(s, 3),
            None => line(self.slots.as_ptr().cast()),
        }
        value(&self.rtcp, 2);
        self.rtcp.prefetch_sent();
        if let Some(cc) = &self.cc {
            value(&cc.out_seq, 1);
        }
        self.leg.prefetch_copy();
    }

    /// Asks the CPU to start loading what admitting and noting a packet of payload type `pt`
    /// from this member reads of it first: its place, role and tables, the lists its
    /// streams are found in, its RTCP and congestion state, and its leg's. The first stage of
    /// the hints a batch gives before it is routed ([`super::HintStage`]).
    pub fn prefetch_sender(&self, pt: u8) {
        use secrelay_srtp::simd::prefetch::value;
        value(&self.at, 1);
        value(&self.role, 1);
        value(&self.neg.ext, 1);
        self.neg.prefetch_codec(pt);
        value(&self.ssrcs, 1);
        value(&self.streams, 1);
        value(&self.rtcp, 2);
        value(&self.cc, 1);
        self.leg.prefetch_copy();
    }

    /// The second stage of a batch's hints: the lists [`Member::prefetch_sender`] asked for
    /// the headers of.
    pub fn prefetch_streams(&self) {
        use secrelay_srtp::simd::prefetch::line;
        line(self.ssrcs.as_ptr().cast());
        line(self.streams.as_ptr().cast());
        line(self.neg.codecs.as_ptr().cast());
        self.rtcp.prefetch_received();
    }

    /// The mid of the section a stream of `codec` is sent to the member on, as a copy's
    /// header extension carries it (its slot's, else the first receiving section's that takes
    /// the codec; empty when longer than [`MID_MAX`], or when it agreed on no `sdes:mid`
    /// extension, as then no copy carries one).
    pub fn mid_for(&self, slot: Option<usize>, codec: CodecId) -> &[u8] {
        if self.neg.ext.mid == 0 {
            // Not written: it agreed on no `sdes:mid` extension.
            return &[];
        }
        if let Some(s) = slot.and_then(|k| self.slots.get(k)) {
            return s.mid.as_bytes();
        }
        self.leg
            .media()
            .iter()
            .find(|m| m.peer_receives && m.codecs.iter().any(|(c, _)| *c == codec))
            .map_or(&[], |m| {
                if m.mid.len() <= MID_MAX {
                    m.mid.as_bytes()
                } else {
                    &[]
                }
            })
    }

    /// The next transport-wide sequence number of what we send it (noted as sent at `at` with
    /// `size` bytes), if it agreed on transport-cc.
    pub fn next_twcc(&mut self, at: Instant, size: usize) -> Option<u16> {
        self.cc.as_mut().map(|cc| cc.next_seq(at, size))
    }

    /// Where the stream it publishes as `ssrc` is in `streams`.
    pub fn stream_index(&self, ssrc: u32) -> Option<usize> {
        self.ssrcs.iter().position(|&s| s == ssrc)
    }

    /// The stream it publishes as `ssrc`.
    pub fn stream(&self, ssrc: u32) -> Option<&Stream> {
        self.streams.get(self.stream_index(ssrc)?)
    }

    /// Adds a stream; its place.
    pub fn add_stream(&mut self, stream: Stream) -> usize {
        self.ssrcs.push(stream.ssrc);
        self.streams.push(stream);
        self.streams.len() - 1
    }

    /// Removes the stream at `k` (the last one takes its place).
    pub fn remove_stream(&mut self, k: usize) -> Stream {
        self.ssrcs.swap_remove(k);
        self.streams.swap_remove(k)
    }

    /// An SSRC to send it a stream under outside a slot: random, unlike any it sees.
    pub fn fresh_ssrc(&self) -> u32 {
        loop {
            let n = random_u32();
            if n != 0 && !self.seen.contains_key(&n) && self.slots.iter().all(|s| s.ssrc != n) {
                return n;
            }
        }
    }

    /// If `facts` (of `rtp`) is a retransmission (RTX) on one of its sections: the payload type
    /// and the SSRC of the stream it repairs (the SDP's `a=ssrc-group:FID`; a simulcast
    /// layer's, by its `repaired-rtp-stream-id`; else the section's one video stream so far).
    pub fn repaired_stream(&mut self, rtp: &[u8], facts: &RtpFacts) -> Option<(u8, u32)> {
        let (k, section) = self
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
        let repaired_rid = facts.ext.get(rtp, self.neg.ext.repaired_rid);
        let layer = self
            .simulcast
            .iter_mut()
            .find(|l| l.section == k)
            .and_then(|l| l.repaired_by(facts.ssrc, repaired_rid));
        let mut video = self.streams.iter().filter(|s| s.video.is_some());
        let only = match (video.next(), video.next()) {
            (Some(s), None) => Some(s.ssrc),
            _ => None,
        };
        Some((apt, fid.or(layer).or(only)?))
    }
}

pub(crate) fn random_u32() -> u32 {
    let mut b = [0u8; 4];
    getrandom::fill(&mut b).expect("the OS random source works");
    u32::from_be_bytes(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use secrelay_wire::sdp::MediaKind;

    fn section(codecs: &[(CodecId, u8)], receives: bool) -> NegotiatedMedia {
        NegotiatedMedia {
            mid: "0".into(),
            kind: MediaKind::Audio,
            codecs: codecs.to_vec(),
            peer_sends: true,
            peer_receives: receives,
            our_ssrc: 1,
            feedback: Default::default(),
            extmaps: Vec::new(),
            simulcast: Vec::new(),
            ptime: None,
            amr_mode: None,
        }
    }

    #[test]
    fn the_tables_say_what_the_sdp_said() {
        let media = [
            section(&[(CodecId::Opus, 111), (CodecId::Pcmu, 0)], false),
            section(&[(CodecId::Pcmu, 100), (CodecId::Pcma, 8)], true),
        ];
        let n = Negotiated::of(&media);
        assert_eq!(n.codec(111), Some(CodecId::Opus));
        assert_eq!(
            n.codec(100),
            Some(CodecId::Pcmu),
            "a second type for a codec"
        );
        assert_eq!(n.codec(9), None);
        assert_eq!(n.pt(CodecId::Pcmu), Some(0), "the first section's");
        assert_eq!(n.pt(CodecId::G722), None);
        assert!(n.takes(CodecId::Pcmu) && n.takes(CodecId::Pcma));
        assert!(
            !n.takes(CodecId::Opus),
            "only sent on a section it does not receive on"
        );
        let other = CodecId::Other(7);
        let media = [section(&[(other, 96), (CodecId::Vp8, 97)], true)];
        let n = Negotiated::of(&media);
        assert!(n.takes(other) && n.takes(CodecId::Vp8) && !n.takes(CodecId::Other(8)));
        assert_eq!((n.pt(other), n.pt(CodecId::Vp8)), (Some(96), Some(97)));
        assert_eq!(n.pt(CodecId::Other(8)), None);
        assert!(!n.sends_events() && !n.takes_events() && !n.sends_cn() && !n.takes_cn());
        // Events and comfort noise negotiated on a section the phone only sends on: it sends
        // them, it does not take them.
        for event in [
            CodecId::TelephoneEvent,
            CodecId::TelephoneEvent16k,
            CodecId::TelephoneEvent48k,
        ] {
            let media = [
                section(
                    &[
                        (CodecId::Pcmu, 0),
                        (event, 101),
                        (CodecId::ComfortNoise, 13),
                    ],
                    false,
                ),
                section(&[(CodecId::Pcmu, 0)], true),
            ];
            let n = Negotiated::of(&media);
            assert!(n.sends_events() && !n.takes_events(), "{event:?}");
            assert!(n.sends_cn() && !n.takes_cn(), "{event:?}");
        }
    }

    #[test]
    fn every_known_codec_has_its_place_in_the_tables() {
        for (i, c) in CodecId::ALL.into_iter().enumerate() {
            assert_eq!(c.known_index(), Some(i), "{c:?}");
        }
        assert_eq!(CodecId::Other(1).known_index(), None);
    }

    #[test]
    fn a_slot_reads_its_sections_payload_types_and_mid() {
        let other = CodecId::Other(7);
        let codecs = [
            (CodecId::Vp8, 96),
            (CodecId::Vp8, 98),
            (other, 100),
            (other, 101),
        ];
        let mut m = section(&codecs, true);
        m.mid = "video-1".into();
        let s = Slot::new(0, &m);
        assert_eq!(
            s.pt(CodecId::Vp8),
            Some(96),
            "the first type of a codec listed twice"
        );
        assert_eq!(s.pt(other), Some(100));
        assert_eq!((s.pt(CodecId::H264), s.pt(CodecId::Other(8))), (None, None));
        assert_eq!(s.mid.as_bytes(), b"video-1");
        m.mid = "a-mid-of-seventeen".into();
        let long = Slot::new(0, &m);
        assert_eq!(
            long.mid.as_bytes(),
            b"",
            "longer than a one-byte extension carries"
        );
        assert_eq!(
            ShortMid::of("0123456789abcdef").as_bytes(),
            b"0123456789abcdef"
        );
    }
}
