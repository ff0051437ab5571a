//! A room of members, sans-IO: media from one member, unprotected with that member's keys, is
//! routed to every other subscribed member, to be protected again with that member's own keys
//! (the K1/K2 scheme: no two members share SRTP keys, and the gateway holds every key). The
//! members are [`Leg`]s of any kind; the room sees only that interface.
//!
//! # The shape of it
//! - A member ([`member`]) is kept in one place: its leg, what the signaling knows of it
//!   ([`Session`]), what it negotiated (read once into tables), its receive slots, its streams
//!   as a publisher and its subscriptions as a receiver. Members sit in a table at stable
//!   places: whoever names one ([`MemberAt`]) finds it without a search.
//! - A packet a publisher sends is read once ([`source`]: codec, kind, simulcast layer,
//!   keyframe, VP8 descriptor, the extension elements copies carry on) and routed by its
//!   stream's *feed*: the list of the stream's subscriptions, one per receiver.
//! - A [`subscription`] is one receiver's view of one source stream: its slot, SSRC and
//!   numbering, its simulcast layer, its retransmissions. Routing a packet is a short loop:
//!   each subscription forwards it, or it goes to the transcoder for that receiver's format.
//! - Every copy is written once ([`copy`]) straight into the buffer that is protected and sent,
//!   and everything the room makes leaves by one queue ([`out`]).
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
//! numbering and keys): the receiver's subscription to the stream sends it. Telephone-events
//! of a transcoded stream follow it, re-timed and numbered in the transcoded stream, under the
//! receiver's telephone-event payload type of the output's clock, or as tones in its audio when
//! it took none. Same-codec audio and video are relayed as they are, never decoded, unless a leg
//! asks for DTMF to cross between a side with telephone-events and one without
//! ([`crate::transcode::Dtmf`]; the choice is `route::transcoded_format`). What cannot
//! reach a receiver (a codec it did not take and none we can encode, relayed events when it
//! took none) is dropped and counted (`no_codec`); audio that does not decode is dropped and
//! counted at its sender (`undecodable`).
//!
//! # Mixing
//! A room set to mix ([`Room::set_mixing`]) decodes each member's audio once into an N−1
//! mixer, and every 20 ms ([`Room::mix_due`], on the caller's clock) sends each receiving
//! member the sum of the others, never itself, encoded in its own format on one stream (its
//! subscription to the mix): what telephones, which take one stream only, need in a
//! conference. Video is relayed as always.
//!
//! # RTCP
//! RTCP is terminated at the gateway, not forwarded: each member gets the gateway's own
//! sender and receiver reports, made from what the room really routed to it and received from
//! it ([`crate::rtcp`]), and its own reports are read for its loss, jitter and round-trip
//! time ([`Room::note_rtcp`], [`Room::rtcp_figures`]). Due reports are made in
//! [`Room::handle_timeout`].
//!
//! # Feedback
//! A receiver's feedback about what it is sent is answered by the room, in the receiver's own
//! numbering (its slot's SSRC and sequence numbers), where the section agreed on it:
//! - **Keyframe requests** (PLI, FIR) are mapped to the publisher's stream by the receiver's
//!   subscription and sent to the publisher in the form its section agreed on (PLI, else
//!   FIR), at most one per [`RtcpConfig::keyframe_interval`] per stream however many
//!   receivers ask; a video stream that takes a receive slot or a new receiver asks the same
//!   way at once, so a viewer that joins late does not wait for the publisher's next periodic
//!   keyframe.
//! - **NACKs** are answered by the receiver's subscription from the publisher stream's
//!   retransmission buffer ([`crate::feedback`]): as RTX (RFC 4588) where the receiver's
//!   section agreed on it, else as the very packet again (byte for byte, so its SRTP index
//!   never protects other bytes); packets the gateway itself never received are asked of the
//!   publisher (a NACK upstream), and its RTX answers are unwrapped and relayed as the packets
//!   they repair.
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
//! contexts ([`Room::contexts_of`]), hands each member's run of packets to
//! [`Room::route_run`], which writes the receivers' copies onto the [`RoomOut`] it is given,
//! and protects the copies of the whole batch with the receivers' contexts. That batched path
//! is the only media path. Input to a member's leg goes through [`Room::with_leg`], which puts
//! what the leg made (STUN answers, DTLS flights, its events) on the same queue.
//!
//! # Drive contract
//! Every call that can make output takes the [`RoomOut`] to put it on; the caller takes
//! everything off it after the call, and calls [`Room::handle_timeout`] by
//! [`Room::poll_timeout`] (or an [`Out::Wake`]'s instant, when earlier).
//!
//! # Allocation
//! Routing a packet writes each receiver's copy into a buffer from the queue's pool, which
//! comes back to the pool once sent: steady-state forwarding allocates nothing. Slots are made
//! with the member; a stream's feed and its subscriptions are made with the stream.

mod copy;
mod gate;
mod inject;
mod member;
mod out;
mod pipe;
mod player;
mod route;
mod rtcp_in;
mod source;
mod subscription;
mod timers;

use std::collections::HashMap;
use std::time::Instant;

use secrelay_srtp::Context;
use secrelay_wire::sdp::MediaKind;

use crate::bwe::Usage;
use crate::counters::Counters;
use crate::leg::DataMessage;
use crate::leg::{Leg, LegKind, LegOutput};
use crate::rtcp::{MemberRtcp, RtcpConfig, RtcpFigures};
use crate::slab::Slab;
use crate::transcode::{Format, MixSettings, Mixing, Transcoding};

pub use gate::Gate;
pub use inject::{DtmfDigit, MAX_QUEUED as MAX_QUEUED_DIGITS};
pub use member::{
    JoinKind, MemberAt, MemberId, MemberRole, Session, MAX_STREAMS, STREAM_IDLE, TWCC_INTERVAL,
};
pub use out::{Out, RoomOut, Sent};
pub use pipe::{PipedPacket, Publisher};
pub use player::PlayMedia;
pub use route::Received;

use member::Member;
pub(crate) use route::HintStage;
use source::SourcePacket;
use subscription::{Source, Subscription};
use timers::Timers;

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

/// A receive section of a member and whose stream it plays now, as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SlotUse {
    /// The section's mid.
    pub mid: String,
    /// The publisher whose stream the section carries (its handle in the room).
    #[serde(skip)]
    pub publisher: MemberId,
    /// The publisher's id (as the signaling knows it; filled in by the shard).
    pub publisher_id: String,
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

/// A publisher's stream as routing sees it: the subscriptions its packets go to. A simulcast
/// section's layers share one feed (each receiver is sent one layer of it).
#[derive(Debug)]
struct Feed {
    publisher: MemberAt,
    /// The publisher's simulcast section, for a simulcast feed.
    group: Option<usize>,
    /// The SSRC it was made for (a simulcast feed's first layer seen).
    ssrc: u32,
    /// One per receiver, in the order they were made.
    subs: Vec<Fanned>,
}

/// A feed's subscription and the place of its receiver: a fan-out finds both without reading
/// the subscription first, so it can ask for the lines of each at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fanned {
    sub: u32,
    receiver: u32,
}

/// Lists kept between packets so that routing allocates nothing once warm.
#[derive(Debug, Default)]
struct Scratch {
    /// Where a publisher's RTX packet is unwrapped (allocated by the room's first one).
    rtx: Vec<u8>,
    /// Keyframes to ask for once a packet is routed: (publisher, its SSRC).
    keyframes: Vec<(MemberAt, u32)>,
    /// Subscriptions of the packet being routed that get it transcoded, and in which format;
    /// the distinct formats among them.
    transcode_to: Vec<(u32, Format)>,
    formats: Vec<Format>,
    /// The subscriptions that get a run's packets transcoded, and in which format.
    transcode_run: Vec<(u32, Format)>,
    /// A run's packets read, waiting to be handed out (kept for its allocation; always empty
    /// between calls).
    run: Vec<SourcePacket<'static>>,
    /// Sequence numbers of a NACK to ask the publisher for.
    upstream: Vec<u16>,
    /// A mix tick's receivers and their places.
    mix_receivers: Vec<(MemberId, Format)>,
    mix_at: Vec<u32>,
    /// The members whose deadline came, in a call to [`Room::handle_timeout`].
    due: Vec<u32>,
    /// A run's packets made again: silence or DTMF in place of audio ([`gate`], [`inject`]).
    made: Vec<u8>,
}

/// A room. See the [module documentation](self).
pub struct Room {
    members: Slab<Member>,
    /// Members now by the kind of their leg ([`LegKind::index`]): kept as they come and go,
    /// so that counting them walks no member.
    by_kind: [u64; LegKind::COUNT],
    /// Members' places by id (the control plane's way in), and in order of arrival.
    by_id: HashMap<MemberId, u32>,
    order: Vec<u32>,
    next_id: u32,
    feeds: Slab<Feed>,
    subs: Slab<Subscription>,
    /// Counters of members that left, by the kind they joined as, so the room's sums never go
    /// down.
    retired: [Counters; LegKind::COUNT],
    rtcp: RtcpConfig,
    /// Streams decoded and encoded again for receivers that did not take their codec.
    transcoding: Transcoding,
    /// The N−1 audio mix, when the room mixes ([`Room::set_mixing`]).
    mixing: Option<Mixing>,
    scratch: Scratch,
    /// What every output of the room is tagged with ([`Room::tagged`]).
    tag: u64,
    /// At its home: the replicas of the room on other workers ([`pipe`]).
    pipes: Vec<pipe::Pipe>,
    /// The members at their deadlines.
    timers: Timers,
    /// The places of the members media is played to ([`player`]).
    playing: Vec<u32>,
}

/// Why a digit could not be queued ([`Room::play_dtmf`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlayError {
    /// No such member.
    NoMember,
    /// The member negotiated no telephone-event and sends no G.711: no way to send a digit as
    /// it.
    NoWay,
    /// As many digits as it queues wait already ([`MAX_QUEUED_DIGITS`]).
    Queued,
    /// Media to play: the member receives no codec the gateway encodes.
    NoCodec,
    /// Media to play: the member's codec could not be set up (logged).
    Codec,
}

impl std::fmt::Display for PlayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PlayError::NoMember => "no such participant",
            PlayError::NoWay => {
                "the participant negotiated no telephone-event and sends no G.711: no way to send DTMF as it"
            }
            PlayError::Queued => "as many digits as a participant queues wait already",
            PlayError::NoCodec => {
                "the participant receives no audio codec the gateway encodes: nothing to play in"
            }
            PlayError::Codec => "the participant's codec could not be set up to play in",
        })
    }
}

impl std::error::Error for PlayError {}

impl Default for Room {
    fn default() -> Self {
        Room::new()
    }
}

impl std::fmt::Debug for Room {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Room")
            .field("members", &self.members.len())
            .field("feeds", &self.feeds.len())
            .field("subscriptions", &self.subs.len())
            .finish_non_exhaustive()
    }
}

impl Room {
    /// An empty room, its RTCP made as [`RtcpConfig::default`] says.
    pub fn new() -> Room {
        Room::with_rtcp(RtcpConfig::default())
    }

    /// An empty room whose members' RTCP is made as `rtcp` says.
    pub fn with_rtcp(rtcp: RtcpConfig) -> Room {
        Room {
            members: Slab::default(),
            by_kind: [0; LegKind::COUNT],
            by_id: HashMap::new(),
            order: Vec::new(),
            next_id: 1,
            feeds: Slab::default(),
            subs: Slab::default(),
            retired: [Counters::default(); LegKind::COUNT],
            rtcp,
            transcoding: Transcoding::default(),
            mixing: None,
            scratch: Scratch::default(),
            tag: 0,
            pipes: Vec::new(),
            timers: Timers::default(),
            playing: Vec::new(),
        }
    }

    /// The room with its outputs tagged `tag` on the queues it is handed (the caller's name
    /// for it): a caller that takes outputs of several rooms off one queue tells them apart,
    /// whatever a call that did not finish left there.
    pub fn tagged(mut self, tag: u64) -> Room {
        self.tag = tag;
        self
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

    /// Adds a member at `now` (its first RTCP report is due about one interval later), with
    /// what the signaling knows of it: where it is. A subscriber is subscribed to every stream
    /// the others publish.
    pub fn add(
        &mut self,
        leg: impl Into<Leg>,
        role: MemberRole,
        session: Session,
        now: Instant,
    ) -> MemberAt {
        let id = MemberId(self.next_id);
        self.next_id += 1;
        let rtcp = MemberRtcp::new(&self.rtcp, now);
        let placeholder = MemberAt { ix: 0, id };
        let ix = self
            .members
            .insert(Member::new(placeholder, role, leg.into(), session, rtcp));
        let at = MemberAt { ix, id };
        self.members[ix].at = at;
        self.by_kind[self.members[ix].kind.index()] += 1;
        self.timers.arm(&mut self.members[ix]);
        self.by_id.insert(id, ix);
        self.order.push(ix);
        if role.subscribes {
            self.subscribe_to_all(ix);
        }
        at
    }

    /// Removes a member, handing back its leg and session (its counters stay in the room's
    /// sums): its subscriptions go, and so do its streams' (their receivers' slots are free
    /// for the next streams).
    pub fn remove(&mut self, id: MemberId) -> Option<(Leg, Session)> {
        let ix = self.by_id.remove(&id)?;
        self.order.retain(|&i| i != ix);
        self.playing.retain(|&i| i != ix);
        let m = self.members.remove(ix)?;
        self.by_kind[m.kind.index()] -= 1;
        for &s in &m.subs {
            self.drop_sub(s);
        }
        let mut feeds: Vec<u32> = m.streams.iter().map(|s| s.feed).collect();
        feeds.sort_unstable();
        feeds.dedup();
        for f in feeds {
            self.drop_feed(f);
        }
        self.retired[m.kind.index()].add(m.leg.counters());
        // Its streams' codec state goes with it, and so do encoders only it received.
        if let Some(mix) = &mut self.mixing {
            mix.remove_member(id);
        }
        self.transcoding.remove_source(id);
        let members = &self.members;
        let sender = |id: MemberId| {
            let found = members.iter().find(|(_, x)| x.at.id == id);
            found.map(|(_, x)| route::Sender::of(x)).unwrap_or_default()
        };
        self.transcoding.retain(|source, codec, format| {
            let s = sender(source);
            members.iter().any(|(_, r)| {
                r.at.id != source
                    && r.role.subscribes
                    && route::transcoded_format(codec, s, r) == Some(format)
            })
        });
        Some((m.leg, m.session))
    }

    /// Where member `id` is in the room.
    pub fn at(&self, id: MemberId) -> Option<MemberAt> {
        let ix = *self.by_id.get(&id)?;
        Some(MemberAt { ix, id })
    }

    fn member(&self, id: MemberId) -> Option<&Member> {
        self.members.get(*self.by_id.get(&id)?)
    }

    /// The member at `at`, if it is still there.
    fn member_at(&mut self, at: MemberAt) -> Option<&mut Member> {
        self.members.get_mut(at.ix).filter(|m| m.at == at)
    }

    /// Changes what a member does (a renegotiation put it on hold, or took it off). `false`
    /// if there is no such member.
    pub fn set_role(&mut self, id: MemberId, role: MemberRole) -> bool {
        let Some(&ix) = self.by_id.get(&id) else {
            return false;
        };
        let was = std::mem::replace(&mut self.members[ix].role, role);
        if role.subscribes && !was.subscribes {
            self.subscribe_to_all(ix);
        }
        true
    }

    /// Makes member `id` receive what `publisher` publishes and nothing else (an ng
    /// subscription to one participant): its subscriptions to the others' streams go, and
    /// streams the others publish later are not sent to it. `false` if either is not here.
    pub fn hear_only(&mut self, id: MemberId, publisher: MemberId) -> bool {
        let (Some(&ix), true) = (self.by_id.get(&id), self.by_id.contains_key(&publisher)) else {
            return false;
        };
        self.members[ix].hears_only = Some(publisher);
        let others: Vec<u32> = self.members[ix]
            .subs
            .iter()
            .copied()
            .filter(|&s| {
                self.subs.get(s).is_some_and(|sub| match sub.source {
                    Source::Feed { publisher: p, .. } => p.id != publisher,
                    Source::Mix | Source::Player => false,
                })
            })
            .collect();
        for s in others {
            self.drop_sub(s);
        }
        true
    }

    /// The member whose streams alone member `id` receives, if it listens to one alone.
    pub fn hears_only(&self, id: MemberId) -> Option<MemberId> {
        self.member(id)?.hears_only
    }

    /// Sets what of a member's media the room passes on ([`gate`]). `false` if there is no
    /// such member.
    pub fn set_gate(&mut self, id: MemberId, gate: Gate) -> bool {
        let Some(&ix) = self.by_id.get(&id) else {
            return false;
        };
        self.members[ix].gate = gate;
        true
    }

    /// Queues `digit` to be played as member `id` sends its audio, as if it had sent it
    /// ([`inject`]).
    pub fn play_dtmf(&mut self, id: MemberId, digit: DtmfDigit) -> Result<(), PlayError> {
        let &ix = self.by_id.get(&id).ok_or(PlayError::NoMember)?;
        let m = &mut self.members[ix];
        if !inject::can_play(m) {
            return Err(PlayError::NoWay);
        }
        if !m.inject.push(digit) {
            return Err(PlayError::Queued);
        }
        Ok(())
    }

    /// Records what member `id` sends under `key` (each of its RTP packets, plain, as it came,
    /// put out as [`Out::Record`]), or stops with `None`. `false` if there is no such member.
    pub fn set_recording(&mut self, id: MemberId, key: Option<u64>) -> bool {
        let Some(&ix) = self.by_id.get(&id) else {
            return false;
        };
        self.members[ix].recording = key;
        true
    }

    /// What of a member's media the room passes on.
    pub fn gate(&self, id: MemberId) -> Option<Gate> {
        self.member(id).map(|m| m.gate)
    }

    /// What a member does (sends, receives).
    pub fn role(&self, id: MemberId) -> Option<MemberRole> {
        self.member(id).map(|m| m.role)
    }

    /// A member's leg.
    pub fn leg(&self, id: MemberId) -> Option<&Leg> {
        self.member(id).map(|m| &m.leg)
    }

    /// The leg of the member at `at`, if it is still there.
    pub fn leg_at(&self, at: MemberAt) -> Option<&Leg> {
        self.members
            .get(at.ix)
            .filter(|m| m.at == at)
            .map(|m| &m.leg)
    }

    /// What the signaling knows of a member.
    pub fn session(&self, id: MemberId) -> Option<&Session> {
        self.member(id).map(|m| &m.session)
    }

    /// What the signaling knows of the member at `at`, to change it.
    pub fn session_mut(&mut self, at: MemberAt) -> Option<&mut Session> {
        self.member_at(at).map(|m| &mut m.session)
    }

    /// Hands the member at `at` input (or changes it: ICE restart, close, a renegotiation)
    /// with `f`, then puts what its leg made (control datagrams, events) on `out`. `None` if
    /// the member is gone. A change to what the leg negotiated is followed by
    /// [`Room::media_changed`].
    pub fn with_leg<R>(
        &mut self,
        at: MemberAt,
        out: &mut RoomOut,
        f: impl FnOnce(&mut Leg) -> R,
    ) -> Option<R> {
        // What it was handed may have set a timer of its leg.
        self.call_leg(at, out, f, true)
    }

    /// [`Room::with_leg`] for the media path (a datagram admitted, an SRTP packet's result
    /// taken), which can only move the leg's deadlines later (consent kept, a telephony leg's
    /// silence timer restarted): the member is not looked at for the room's timer. (Debug
    /// builds check that in [`Room::poll_timeout`].)
    pub fn with_media_leg<R>(
        &mut self,
        at: MemberAt,
        out: &mut RoomOut,
        f: impl FnOnce(&mut Leg) -> R,
    ) -> Option<R> {
        self.call_leg(at, out, f, false)
    }

    /// [`Room::with_leg`], the member put on the room's timer again after the call when `arm`.
    fn call_leg<R>(
        &mut self,
        at: MemberAt,
        out: &mut RoomOut,
        f: impl FnOnce(&mut Leg) -> R,
        arm: bool,
    ) -> Option<R> {
        out.begin(self.tag);
        let m = self.members.get_mut(at.ix).filter(|m| m.at == at)?;
        let r = f(&mut m.leg);
        collect(m, out);
        if arm {
            self.timers.arm(m);
        }
        Some(r)
    }

    /// Sends `msg` (the server's own) on the data channels of `to`, or of every member with
    /// data channels: how many were sent it. Timed `now`.
    pub fn send_data(
        &mut self,
        to: Option<MemberAt>,
        msg: &DataMessage,
        now: Instant,
        out: &mut RoomOut,
    ) -> usize {
        out.begin(self.tag);
        self.send_data_to(None, to, std::slice::from_ref(msg), now, out)
    }

    /// Sends `msgs` on the data channels of `to` (or of every member but `except`), each
    /// member's in one flush; how many members were sent them.
    fn send_data_to(
        &mut self,
        except: Option<u32>,
        to: Option<MemberAt>,
        msgs: &[DataMessage],
        now: Instant,
        out: &mut RoomOut,
    ) -> usize {
        let mut sent = 0;
        for &r in &self.order {
            let Some(m) = self.members.get_mut(r) else {
                continue;
            };
            if except == Some(r) || to.is_some_and(|at| at != m.at) {
                continue;
            }
            if m.leg
                .as_webrtc_mut()
                .is_some_and(|l| l.send_data(now, msgs))
            {
                collect(m, out);
                self.timers.arm(m);
                sent += 1;
            }
        }
        sent
    }

    /// Sends what the data channels of the member at `at` received (after its DTLS input) to
    /// every other member's channel of the same label (a WebRTC member with data channels),
    /// each receiver's share in one flush, and puts what their legs made on `out`. The
    /// messages, for the room's other workers (empty when there were none).
    pub fn relay_data(&mut self, at: MemberAt, out: &mut RoomOut) -> Vec<DataMessage> {
        let Some(leg) = self.member_at(at).and_then(|m| m.leg.as_webrtc_mut()) else {
            return Vec::new();
        };
        let Some((first, now)) = leg.take_data() else {
            return Vec::new();
        };
        let mut msgs = vec![first];
        msgs.extend(std::iter::from_fn(|| leg.take_data().map(|(m, _)| m)));
        out.begin(self.tag);
        self.send_data_to(Some(at.ix), None, &msgs, now, out);
        msgs
    }

    /// Sends messages a member of this room on another worker sent (piped here) to every member
    /// here with data channels; how many were sent them.
    pub fn deliver_data(&mut self, msgs: &[DataMessage], now: Instant, out: &mut RoomOut) -> usize {
        out.begin(self.tag);
        self.send_data_to(None, None, msgs, now, out)
    }

    /// Reads what member `id` negotiated again (a renegotiation changed its codecs, payload
    /// types, extensions or sections): each receiving section it gained becomes a receive
    /// slot, and its streams forwarded outside a slot take the new ones from their next
    /// packet. The number of slots added.
    pub fn media_changed(&mut self, id: MemberId) -> usize {
        let Some(&ix) = self.by_id.get(&id) else {
            return 0;
        };
        let Room { members, subs, .. } = self;
        let r = &mut members[ix];
        let added = r.renegotiated();
        if added > 0 {
            for &s in &r.subs.clone() {
                if let Some(sub) = subs.get_mut(s) {
                    sub.forget_outside(r);
                }
            }
        }
        added
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
        self.order.iter().map(|&ix| self.members[ix].at.id)
    }

    /// The participants' counters summed, with those of participants that left (a replica's
    /// mirrors are not participants: what came through its pipes is counted apart, see
    /// [`Room::counters_by_kind`]).
    pub fn counters(&self) -> Counters {
        let mut c = Counters::default();
        let by_kind = self.counters_by_kind();
        for k in LegKind::ALL {
            c.add(&by_kind[k.index()]);
        }
        c
    }

    /// The members' counters by the kind each joined as ([`crate::leg::LegKind::index`]),
    /// mirrored publishers' included (under [`LegKind::Pipe`]).
    pub fn counters_by_kind(&self) -> [Counters; LegKind::COUNT] {
        let mut c = self.retired;
        for (_, m) in self.members.iter() {
            c[m.kind.index()].add(m.leg.counters());
        }
        c
    }

    /// A member's counters.
    pub fn member_counters(&self, id: MemberId) -> Option<&Counters> {
        self.member(id).map(|m| m.leg.counters())
    }

    /// The counters of the member at `at` (the shard counts what it sends and protects).
    pub(crate) fn counters_mut(&mut self, at: MemberAt) -> Option<&mut Counters> {
        self.member_at(at).map(|m| m.leg.counters_mut())
    }

    /// The retransmission buffers held now: (video streams buffered, bytes held by all their
    /// buffers, [`crate::feedback::RetransmitBuffer::bytes`]).
    pub fn retransmit_buffers(&self) -> (u64, u64) {
        self.members
            .iter()
            .flat_map(|(_, m)| &m.streams)
            .filter_map(|s| s.video.as_ref())
            .fold((0, 0), |(n, b), v| (n + 1, b + v.buffer.bytes() as u64))
    }

    /// The members now, by the kind each joined as (mirrored publishers under
    /// [`LegKind::Pipe`]).
    pub fn members_by_kind(&self) -> [u64; LegKind::COUNT] {
        self.by_kind
    }

    /// `receiver`'s subscription to `source`'s stream `ssrc`.
    fn subscription(
        &self,
        receiver: MemberId,
        source: MemberId,
        ssrc: u32,
    ) -> Option<&Subscription> {
        let r = self.member(receiver)?;
        r.subs
            .iter()
            .filter_map(|&s| self.subs.get(s))
            .find(|s| s.publisher().is_some_and(|p| p.id == source) && s.source_ssrc == ssrc)
    }

    /// Whether `receiver` is subscribed to `source`'s stream `ssrc` (the stream exists: a packet
    /// of it was routed, and it was not given up since).
    pub fn subscribed(&self, receiver: MemberId, source: MemberId, ssrc: u32) -> bool {
        self.subscription(receiver, source, ssrc).is_some()
    }

    /// The SSRC `receiver` sees for `source`'s stream `ssrc`, once one packet was forwarded.
    pub fn mapped_ssrc(&self, receiver: MemberId, source: MemberId, ssrc: u32) -> Option<u32> {
        let s = self.subscription(receiver, source, ssrc)?;
        match s.slot {
            Some(k) => Some(self.member(receiver)?.slots[k].ssrc),
            None => s.outside,
        }
    }

    /// The receive sections of `member` that carry a stream now, and whose (for the page's
    /// tiles: who is on which track).
    pub fn receiving(&self, member: MemberId) -> Vec<SlotUse> {
        let Some(r) = self.member(member) else {
            return Vec::new();
        };
        r.subs
            .iter()
            .filter_map(|&s| self.subs.get(s))
            .filter_map(|s| {
                let section = r.slots.get(s.slot?)?.section;
                Some(SlotUse {
                    mid: r.leg.media().get(section)?.mid.clone(),
                    publisher: s.publisher()?.id,
                    publisher_id: String::new(),
                })
            })
            .collect()
    }

    /// The section (mid) of `receiver` on which `source`'s stream `ssrc` is sent, while it
    /// holds a receive slot there.
    pub fn slot_mid(&self, receiver: MemberId, source: MemberId, ssrc: u32) -> Option<&str> {
        let k = self.subscription(receiver, source, ssrc)?.slot?;
        let r = self.member(receiver)?;
        Some(r.leg.media().get(r.slots[k].section)?.mid.as_str())
    }

    /// The room's transcoding state (streams decoded, encoders running).
    pub fn transcoding(&self) -> &Transcoding {
        &self.transcoding
    }

    /// The SRTP contexts (inbound or outbound) of `members` (by place, ascending), one entry
    /// each in that order: `None` for a member that is gone or not keyed.
    pub fn contexts_of<'a>(
        &'a mut self,
        members: &[MemberAt],
        inbound: bool,
        out: &mut Vec<Option<&'a mut Context>>,
    ) {
        let mut places = self.members.places_mut();
        let mut next = 0u32;
        // The member at the place last reached (two requests can name one place: a member
        // that left and the one that took its place, in one batch).
        let mut here: Option<(u32, Option<&'a mut Member>)> = None;
        for at in members {
            if here.as_ref().map(|h| h.0) != Some(at.ix) {
                let m = match at.ix.checked_sub(next) {
                    Some(skip) => {
                        next = at.ix + 1;
                        places.nth(skip as usize).and_then(Option::as_mut)
                    }
                    // Not ascending: a caller's bug, answered as "no context".
                    None => None,
                };
                here = Some((at.ix, m));
            }
            let m = here.as_mut().and_then(|h| h.1.take_if(|m| m.at == *at));
            out.push(m.and_then(|m| {
                if inbound {
                    m.leg.inbound_context()
                } else {
                    m.leg.outbound_context()
                }
            }));
        }
    }

    /// Sends member `at` an RTCP compound of the gateway's own (protected with its keys on a
    /// secure leg). `false` if it cannot be sent to yet (not keyed, no address).
    pub fn send_rtcp(&mut self, at: MemberAt, compound: &[u8], out: &mut RoomOut) -> bool {
        out.begin(self.tag);
        self.member_at(at)
            .is_some_and(|m| rtcp_to(m, compound, out))
    }

    /// The simulcast layers `member` sends, and what it is sent of others' (for the API).
    pub fn layers(&self, member: MemberId) -> (Vec<SentLayer>, Vec<ReceivedLayer>) {
        let Some(m) = self.member(member) else {
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
            .subs
            .iter()
            .filter_map(|&s| self.subs.get(s)?.view.as_ref())
            .map(|v| {
                let rid = |k: usize| {
                    self.member(v.publisher)
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

    /// Sets which simulcast layer `receiver` is sent of `publisher`'s (of every publisher's
    /// when `None`): the layer with rid `rid`, or the estimate's choice again with `None`. The
    /// switch happens at the layer's next keyframe, which is asked for (on `out`). Whether a
    /// publisher it receives sends such a layer (false for no such member).
    pub fn set_layer(
        &mut self,
        receiver: MemberId,
        publisher: Option<MemberId>,
        rid: Option<&str>,
        now: Instant,
        out: &mut RoomOut,
    ) -> bool {
        out.begin(self.tag);
        let Some(&r) = self.by_id.get(&receiver) else {
            return false;
        };
        let Room {
            members,
            subs,
            scratch,
            ..
        } = self;
        let estimate = members[r].cc.as_ref().map(|c| c.bwe.estimate_bps());
        let mut found = false;
        scratch.keyframes.clear();
        for &s in &members[r].subs {
            let Some(sub) = subs.get_mut(s) else { continue };
            let (Some(p), Some(view)) = (sub.publisher(), sub.view.as_mut()) else {
                continue;
            };
            if publisher.is_some_and(|id| id != p.id) {
                continue;
            }
            let Some(layers) = members
                .get(p.ix)
                .and_then(|m| m.simulcast.get(view.section))
            else {
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
            view.manual = manual;
            if view.evaluate(&info, estimate, now, true) {
                if let Some(ssrc) = info[view.target].ssrc {
                    scratch.keyframes.push((p, ssrc));
                }
            }
        }
        self.ask_keyframes(now, out);
        found
    }

    /// The receive sections `member` lacks to be sent every publisher's streams at once: per
    /// kind, how many more than it has slots for (one per publishing section of that kind of
    /// every other member; a simulcast section counts once). Empty when it needs none (or does
    /// not subscribe).
    pub fn receive_needs(&self, member: MemberId) -> Vec<(MediaKind, usize)> {
        let Some(m) = self.member(member) else {
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
                .filter(|(_, p)| p.at.id != member && p.role.publishes && m.hears(p.at.id))
                .map(|(_, p)| {
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

    /// A member's bandwidth estimate (what we can send it), when it agreed on transport-cc.
    pub fn bandwidth(&self, member: MemberId) -> Option<BandwidthFigures> {
        let cc = self.member(member)?.cc.as_ref()?;
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
        Some(self.member(member)?.rtcp.figures())
    }

    /// Advances time for every member whose deadline has come (what its leg makes goes on
    /// `out`), and sends the RTCP reports and transport-wide feedback that are due.
    pub fn handle_timeout(&mut self, now: Instant, out: &mut RoomOut) {
        out.begin(self.tag);
        let epoch = self.rtcp.epoch.0;
        // Taken off the timer first: each is handled once per call, even if its next deadline
        // is already past.
        let mut due = std::mem::take(&mut self.scratch.due);
        while let Some(ix) = self.timers.pop_due(now, &mut self.members) {
            due.push(ix);
        }
        for &ix in &due {
            let m = &mut self.members[ix];
            if m.leg.poll_timeout().is_some_and(|t| now >= t) {
                m.leg.handle_timeout(now);
                collect(m, out);
            }
            let reporter = m.rtcp.reporter();
            if let Some(fb) =
                m.cc.as_mut()
                    .and_then(|cc| cc.feedback_due(reporter, epoch, now))
            {
                rtcp_to(m, &fb, out);
            }
            let can_send = m.leg.closed().is_none() && m.leg.rtcp_target().is_some();
            if let Some(report) = m.rtcp.report_due(&self.rtcp, now, can_send) {
                rtcp_to(m, &report, out);
            }
            self.timers.arm(m);
        }
        due.clear();
        self.scratch.due = due;
    }

    /// The earliest deadline among the members, RTCP reports included (it may come early: a
    /// deadline that moved later is found stale then).
    pub fn poll_timeout(&self) -> Option<Instant> {
        let next = self.timers.next();
        debug_assert!(
            self.members
                .iter()
                .filter_map(|(_, m)| timers::deadline(m))
                .min()
                .is_none_or(|d| next.is_some_and(|t| t <= d)),
            "a member's deadline is earlier than the room's timer: a change did not arm it"
        );
        next.into_iter()
            .chain(self.mixing.as_ref().and_then(Mixing::next_tick))
            .chain(self.next_play())
            .min()
    }

    /// Subscribes the member at place `ix` to every feed of the others it has none to.
    fn subscribe_to_all(&mut self, ix: u32) {
        let have: Vec<u32> = self.members[ix]
            .subs
            .iter()
            .filter_map(|&s| match self.subs.get(s)?.source {
                Source::Feed { feed, .. } => Some(feed),
                Source::Mix | Source::Player => None,
            })
            .collect();
        let feeds: Vec<u32> = self
            .feeds
            .iter()
            .filter(|(f, feed)| {
                feed.publisher.ix != ix
                    && !have.contains(f)
                    && self.members[ix].hears(feed.publisher.id)
            })
            .map(|(f, _)| f)
            .collect();
        for f in feeds {
            self.subscribe(ix, f);
        }
    }

    /// Subscribes the member at place `r` to feed `f`.
    fn subscribe(&mut self, r: u32, f: u32) {
        let feed = &self.feeds[f];
        let source = Source::Feed {
            publisher: feed.publisher,
            feed: f,
        };
        let sub = Subscription::new(r, source, feed.ssrc, feed.group);
        let s = self.subs.insert(sub);
        self.feeds[f].subs.push(Fanned {
            sub: s,
            receiver: r,
        });
        self.members[r].subs.push(s);
    }

    /// Drops subscription `s`: its receiver (if still here) gives up its place.
    fn drop_sub(&mut self, s: u32) {
        let Some(mut sub) = self.subs.remove(s) else {
            return;
        };
        if let Some(r) = self.members.get_mut(sub.receiver) {
            sub.release(r);
            r.subs.retain(|&x| x != s);
            if r.mix_sub == Some(s) {
                r.mix_sub = None;
            }
        }
        if let Source::Feed { feed, .. } = sub.source {
            if let Some(f) = self.feeds.get_mut(feed) {
                f.subs.retain(|x| x.sub != s);
            }
        }
    }

    /// Drops feed `f` and its subscriptions.
    fn drop_feed(&mut self, f: u32) {
        if let Some(feed) = self.feeds.remove(f) {
            for fanned in feed.subs {
                self.drop_sub(fanned.sub);
            }
        }
    }
}

/// Puts what member `m`'s leg made (control datagrams, events) on `out`.
fn collect(m: &mut Member, out: &mut RoomOut) {
    while m.leg.has_output() {
        match m.leg.poll_output() {
            Some(LegOutput::Transmit {
                destination,
                via,
                contents,
                kind,
            }) => {
                let mut buf = out.buffer();
                buf.extend_from_slice(contents);
                out.push(Out::Control {
                    to: m.at,
                    destination,
                    via,
                    kind,
                    buf,
                });
            }
            Some(LegOutput::Event(event)) => out.push(Out::Event { to: m.at, event }),
            Some(LegOutput::Timeout(_)) | None => break,
        }
    }
}

/// Sends member `m` an RTCP compound of ours; `false` if it cannot be sent to yet.
fn rtcp_to(m: &Member, compound: &[u8], out: &mut RoomOut) -> bool {
    let Some(target) = m.leg.rtcp_target() else {
        return false;
    };
    out.send(m.at, target, Sent::Rtcp, |b| b.extend_from_slice(compound));
    true
}
