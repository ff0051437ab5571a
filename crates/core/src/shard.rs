//! A shard: everything one packet worker decides, sans-IO.
//!
//! A [`Shard`] holds rooms and their members, the routes that find a member from a datagram
//! (its validated source addresses, its local ICE ufrags), the members' timers, the batch in
//! which their media is unprotected and re-protected, and the counters. It is driven with
//! datagrams that were classified once where they were read ([`Datagram`], carrying a
//! [`Class`]), with control calls ([`Shard::join`], [`Shard::leave`], …) and with injected
//! time; it never touches a socket or reads a clock. The worker thread around it
//! (`server::worker`) keeps only the sockets, `recvmmsg`/`sendmmsg`, its poll and the
//! hand-off of datagrams to the worker that owns them; tests drive a shard directly.
//!
//! # Drive contract
//! Feed it a batch of datagrams ([`Shard::handle`]) and control calls, then call
//! [`Shard::poll_output`] until it returns [`Output::Timeout`] or `None`; call
//! [`Shard::handle_timeout`] at that instant. Media staged by `handle` is unprotected and
//! re-protected in one engine call each, when the output is first polled (or at
//! [`Shard::flush`]): the datagrams of one `recvmmsg` batch share two engine calls. A DTLS
//! record from a member whose media is staged runs the staged batch first, so what a sender
//! sent before its close_notify is relayed before it closes.
//!
//! # One path per datagram
//! STUN goes to its member's ICE agent as the message parsed at the edge; DTLS to its DTLS
//! endpoint; SRTP and SRTCP to the batch, then (RTP) to its room's routing and the batch's
//! protect call, then out. Every output is typed when it is made ([`TransmitKind`]).
//!
//! # One way out of a room
//! Whatever a room makes (copies, RTCP, its members' control datagrams and events, deadlines)
//! comes out on the shard's one [`RoomOut`], and is taken off it in one place
//! (`Shard::dispatch`): copies to protect, staged for the batch as the room wrote them (their
//! buffers moved, not copied), are given the room's slot, plain ones and control datagrams go
//! to the send queue, events to the routes and the lifecycle, deadlines to the timer. A copy's
//! bytes are written once by the room; the edge sends them from the same buffer
//! ([`Shard::take_sent_buffer`]).
//!
//! # Routes
//! A datagram's member is found by its source address once ICE has validated that address,
//! and by the USERNAME of a STUN check before that (its target ufrag, read at the edge). A
//! datagram no member of this shard owns comes back as [`Handled::NotOurs`] (the worker asks
//! the other workers' directory); the shard reports every route it gains or loses as an
//! [`Event`] so the worker can keep that directory.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use secrelay_dtls::LocalCertificate;
use secrelay_srtp::Engine;
use secrelay_wire::demux::{demux, Class};
use secrelay_wire::sdp::Offer;

use crate::admission::Shed;
use crate::counters::{Counters, DropReason, EndReason, ShardCounters};
use crate::ice_lite::Credentials;
pub use crate::leg::Via;
use crate::leg::{
    DataMessage, Leg, LegEvent, PipeLeg, Ports, RtpConfig, RtpLeg, RtpLegOptions, RtpOfferSpec,
    Sources, TransmitKind, WebRtcConfig, WebRtcLeg, WebRtcOfferSection,
};
pub use crate::leg::{MirrorSpec, PipeKey};
use crate::media_batch::{recycle, walk, MediaBatch, Rooms, Staged, What};
pub use crate::room::JoinKind;
use crate::room::{
    HintStage, MemberAt, MemberId, MemberRole, Out, Received, Room, RoomOut, Sent, Session,
};
use crate::rtcp::{RtcpConfig, RtcpFigures};
use crate::transcode::MixSettings;
use secrelay_wire::sdp_rtp::RtpDescription;

mod pipe;
pub use crate::room::PipedPacket;
pub use pipe::{PipeEvent, PipeTransmit, Piped};

/// A datagram as the shard takes it: read from a socket and classified once.
#[derive(Debug, Clone, Copy)]
pub struct Datagram<'a> {
    /// The socket it came in on.
    pub via: Via,
    /// Where it came from.
    pub from: SocketAddr,
    /// What it is, with what its parse found.
    pub class: Class,
    /// Its bytes.
    pub bytes: &'a [u8],
    /// When it was read.
    pub received: Instant,
}

impl<'a> Datagram<'a> {
    /// Classifies `bytes`, read on the shared media port (the one parse a datagram gets, see
    /// [`secrelay_wire::demux`]).
    pub fn classify(from: SocketAddr, bytes: &'a [u8], received: Instant) -> Datagram<'a> {
        Datagram::classify_on(Via::Shared, from, bytes, received)
    }

    /// Classifies `bytes`, read on the socket `via`.
    pub fn classify_on(
        via: Via,
        from: SocketAddr,
        bytes: &'a [u8],
        received: Instant,
    ) -> Datagram<'a> {
        Datagram {
            via,
            from,
            class: demux(bytes),
            bytes,
            received,
        }
    }
}

/// A datagram's particulars besides its bytes.
#[derive(Debug, Clone, Copy)]
struct Head {
    via: Via,
    from: SocketAddr,
    class: Class,
    received: Instant,
}

impl Head {
    fn of(d: &Datagram<'_>) -> Head {
        Head {
            via: d.via,
            from: d.from,
            class: d.class,
            received: d.received,
        }
    }
}

/// A datagram's bytes: lent (copied once if staged), or in a buffer the caller hands over.
enum Bytes<'a> {
    Lent(&'a [u8]),
    Owned(&'a mut Vec<u8>),
}

impl Bytes<'_> {
    fn get(&self) -> &[u8] {
        match self {
            Bytes::Lent(b) => b,
            Bytes::Owned(b) => b,
        }
    }

    /// A buffer of the shard's holding the bytes: a pooled one they are copied into, or the
    /// caller's own (which gets a pooled one in its place).
    fn into_buf(self, pool: &mut RoomOut) -> Vec<u8> {
        match self {
            Bytes::Lent(b) => {
                crate::copy_count::count();
                let mut buf = pool.buffer();
                buf.extend_from_slice(b);
                buf
            }
            Bytes::Owned(b) => std::mem::replace(b, pool.buffer()),
        }
    }
}

/// Whether a datagram was this shard's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handled {
    /// Taken (delivered, staged, or dropped and counted at its member).
    Taken,
    /// No member of this shard owns its source or the ufrag it names: the caller finds the
    /// owner elsewhere, or counts it with [`Shard::count_drop`].
    NotOurs,
}

/// A datagram to send.
#[derive(Debug, Clone, Copy)]
pub struct Transmit<'a> {
    /// Where to.
    pub destination: SocketAddr,
    /// Our socket it leaves from.
    pub via: Via,
    /// The datagram.
    pub contents: &'a [u8],
    /// What it is.
    pub kind: TransmitKind,
    /// For a media copy: when the datagram it was made from was read.
    pub received: Option<Instant>,
}

/// Something the shard's owner must act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Datagrams from this address belong to this shard from now on.
    AddressOwned(SocketAddr),
    /// STUN checks naming this local ufrag belong to this shard.
    UfragOwned(String),
    /// A member left: its id, why, and the ufrags, addresses and local ports that no longer
    /// lead here (the ports' sockets can be closed).
    MemberLeft {
        /// Its id.
        id: String,
        /// Why it ended.
        reason: EndReason,
        /// Its local ICE ufrags.
        ufrags: Vec<String>,
        /// Its validated source addresses.
        addrs: Vec<SocketAddr>,
        /// Its own local ports (a telephony leg's RTP and RTCP).
        ports: Vec<u16>,
        /// The remote addresses a telephony leg latched to or sent to ([`RtpLeg::peers`]):
        /// its ports' next leg refuses them for a while.
        peers: Vec<SocketAddr>,
    },
    /// A new offer of ours for a member that listens for them (its events channel): it lacks
    /// receive sections for the room's senders. It answers with its revision.
    Offer {
        /// The member's id.
        id: String,
        /// The offer's revision (its `o=` version).
        revision: u64,
        /// The offer.
        sdp: String,
    },
    /// A DTLS-SRTP handshake finished, in this long.
    Connected {
        /// From the first DTLS datagram (or our ClientHello) to the keys.
        handshake: Duration,
    },
    /// What a telephony leg's local ports take datagrams from changed, by port (for a filter
    /// in front of the sockets; [`RtpLeg::sources`]).
    Sources(Vec<(u16, Sources)>),
    /// A room or a member started or ended (for webhooks and the signaling's own records).
    Lifecycle(Lifecycle),
    /// Something another worker's shard must do about a room spread over workers.
    Pipe(PipeEvent),
    /// A packet a recorded member sent ([`Shard::set_recording`]), for its recording.
    Recorded {
        /// The recording's key for the member.
        key: u64,
        /// When it arrived.
        at: Instant,
        /// The packet (plain RTP, as it came).
        packet: Vec<u8>,
    },
}

/// What happened to a room or a member, in the order it happened: a room starts before its
/// first member joins and finishes after its last one leaves; a member joins, connects, may
/// start publishing, stops publishing when it leaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lifecycle {
    /// A room was made (its first member is joining).
    RoomStarted {
        /// The room.
        room: String,
    },
    /// A room's last member left.
    RoomFinished {
        /// The room.
        room: String,
    },
    /// A member was made.
    Joined {
        /// Its room.
        room: String,
        /// Its id.
        id: String,
        /// The identity it joined with (an access token's subject), if any.
        name: Option<String>,
        /// How it joined.
        kind: JoinKind,
        /// `webrtc`, `sdes` or `plain`.
        leg: &'static str,
    },
    /// A member's security is up (WebRTC: DTLS-SRTP done; telephony legs: at once).
    Connected {
        /// Its room.
        room: String,
        /// Its id.
        id: String,
    },
    /// A connected member that sends media started (`started`) or stopped doing so.
    Publishing {
        /// Its room.
        room: String,
        /// Its id.
        id: String,
        /// Its identity, if any.
        name: Option<String>,
        /// Started, or stopped.
        started: bool,
    },
    /// A member was removed.
    Left {
        /// Its room.
        room: String,
        /// Its id.
        id: String,
        /// Its identity, if any.
        name: Option<String>,
        /// Why it ended.
        reason: EndReason,
    },
}

/// What [`Shard::poll_output`] hands back.
#[derive(Debug)]
pub enum Output<'a> {
    /// Send it.
    Transmit(Transmit<'a>),
    /// Hand it to another worker's shard ([`Shard::handle_piped`] or
    /// [`Shard::handle_pipe_feedback`] there).
    Pipe(PipeTransmit<'a>),
    /// Act on it.
    Event(Event),
    /// Call [`Shard::handle_timeout`] at (or after) this instant. Ends a drain.
    Timeout(Instant),
}

/// A participant made from an offer.
#[derive(Debug, Clone)]
pub struct Joined {
    /// Its id (the last segment of its resource URL).
    pub id: String,
    /// The answer SDP.
    pub answer: String,
    /// Our ICE credentials (the answer's), for ICE restarts and ETags.
    pub ice: Credentials,
}

/// A telephony member made from an offer.
#[derive(Debug, Clone)]
pub struct JoinedRtp {
    /// Its id (the last segment of its resource URL).
    pub id: String,
    /// The answer SDP.
    pub answer: String,
    /// The local ports it receives on (RTP, and RTCP unless muxed).
    pub ports: Vec<u16>,
}

/// Why an offer, an answer or a renegotiation was not taken. Each variant is one kind of
/// refusal; how a protocol says it (an HTTP status, an ng `error-reason`) is the gateway's to
/// choose, from the variant, in one place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JoinError {
    /// A WebRTC offer or answer its leg cannot take.
    WebRtc(crate::leg::WebRtcError),
    /// A telephony offer or answer its leg cannot take.
    Rtp(crate::leg::RtpLegError),
    /// No member by that id in that room (or no such room).
    NoMember {
        /// The room.
        room: String,
        /// The id asked for.
        id: String,
    },
    /// The member's leg is not of the kind the operation is for.
    WrongLeg {
        /// The member.
        id: String,
        /// The kind the operation needs.
        needs: LegKind,
    },
    /// An answer to a re-offer that is not the one waiting: the revision of the offer that
    /// waits, or none when no offer of ours waits for an answer.
    StaleAnswer {
        /// The waiting offer's revision.
        pending: Option<u64>,
    },
    /// The room has as many members as it takes from this caller.
    RoomFull {
        /// Its members now.
        members: usize,
        /// Whether the places left are kept for participants with a token.
        reserved: bool,
    },
    /// The gateway is shutting down.
    ShuttingDown,
}

/// The kind of leg an operation is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LegKind {
    /// A WebRTC leg (ICE, DTLS-SRTP).
    WebRtc,
    /// A telephony leg (plain RTP or SDES-SRTP).
    Telephony,
}

impl JoinError {
    fn no_member(room: &str, id: &str) -> JoinError {
        JoinError::NoMember {
            room: room.to_owned(),
            id: id.to_owned(),
        }
    }

    fn wrong_leg(id: &str, needs: LegKind) -> JoinError {
        JoinError::WrongLeg {
            id: id.to_owned(),
            needs,
        }
    }
}

impl From<crate::leg::WebRtcError> for JoinError {
    fn from(e: crate::leg::WebRtcError) -> JoinError {
        JoinError::WebRtc(e)
    }
}

impl From<crate::leg::RtpLegError> for JoinError {
    fn from(e: crate::leg::RtpLegError) -> JoinError {
        JoinError::Rtp(e)
    }
}

impl std::fmt::Display for JoinError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JoinError::WebRtc(e) => e.fmt(f),
            JoinError::Rtp(e) => e.fmt(f),
            JoinError::NoMember { room, id } => write!(f, "no member {id} in {room}"),
            JoinError::WrongLeg { id, needs } => match needs {
                LegKind::WebRtc => write!(f, "{id} is not a WebRTC leg"),
                LegKind::Telephony => write!(f, "{id} is not a telephony leg"),
            },
            JoinError::StaleAnswer { pending: Some(r) } => {
                write!(f, "the answer's revision is not our offer's ({r})")
            }
            JoinError::StaleAnswer { pending: None } => {
                f.write_str("no offer of ours waits for an answer")
            }
            JoinError::RoomFull { members, reserved } => write!(
                f,
                "the room is full ({members} participants{})",
                if *reserved {
                    "; the rest is kept for participants with a token"
                } else {
                    ""
                }
            ),
            JoinError::ShuttingDown => f.write_str("the gateway is shutting down"),
        }
    }
}

impl std::error::Error for JoinError {}

/// Why a control operation on a room or a participant was not done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ControlError {
    /// No participant by that id in that room (or no such room).
    NoParticipant {
        /// The room.
        room: String,
        /// The id asked for.
        id: String,
    },
    /// A layer the participant is not sent: no simulcast publisher it receives sends the
    /// layer `rid` (or, without a rid, it receives no simulcast publisher at all).
    NoLayer {
        /// The layer asked for.
        rid: Option<String>,
    },
    /// Rooms' settings are kept for as many rooms as `max_room_settings` allows already.
    TooManySettings {
        /// The rooms whose settings are kept.
        kept: usize,
    },
    /// The gateway is shutting down.
    ShuttingDown,
}

impl std::fmt::Display for ControlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ControlError::NoParticipant { room, id } => {
                write!(f, "no participant {id} in room {room}")
            }
            ControlError::NoLayer { rid: Some(rid) } => {
                write!(
                    f,
                    "no simulcast publisher sends a layer {rid:?} to this member"
                )
            }
            ControlError::NoLayer { rid: None } => {
                f.write_str("this member receives no simulcast publisher")
            }
            ControlError::TooManySettings { kept } => write!(
                f,
                "settings are kept for {kept} rooms already (max_room_settings)"
            ),
            ControlError::ShuttingDown => f.write_str("the gateway is shutting down"),
        }
    }
}

impl std::error::Error for ControlError {}

/// A participant as the API shows it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ParticipantSnapshot {
    /// Its id (the last segment of its resource URL).
    pub id: String,
    /// The identity it joined with (an access token's subject), if any.
    pub name: Option<String>,
    /// WHIP, WHEP, join (WebRTC), or rtp (telephony).
    pub kind: JoinKind,
    /// The kind of leg: `webrtc`, `sdes` or `plain`.
    pub leg: &'static str,
    /// `new`, `connected` or the reason it is closing.
    pub state: String,
    /// The negotiated SRTP profile, once connected.
    pub srtp_profile: Option<String>,
    /// SRTP/SRTCP packets received and unprotected.
    pub packets_in: u64,
    /// Their bytes.
    pub bytes_in: u64,
    /// SRTP/SRTCP packets protected and sent.
    pub packets_out: u64,
    /// Their bytes.
    pub bytes_out: u64,
    /// Packets dropped for a wrong authentication tag.
    pub auth_failures: u64,
    /// Packets dropped as replays.
    pub replays: u64,
    /// Every drop at this participant by reason (the non-zero ones).
    pub drops: BTreeMap<&'static str, u64>,
    /// DTLS handshake time in milliseconds, once connected.
    pub handshake_ms: Option<f64>,
    /// Seconds since it joined.
    pub age_secs: f64,
    /// RTCP: what we received from it (loss, jitter), what it reported about what we sent
    /// it, the round-trip time, reports both ways.
    pub rtcp: RtcpFigures,
    /// RTCP feedback: keyframe requests and NACKs it sent and was sent, retransmissions.
    pub feedback: crate::counters::FeedbackCounters,
    /// What we can send it, estimated from its transport-cc feedback (when it agreed on it).
    pub bandwidth: Option<crate::room::BandwidthFigures>,
    /// The simulcast layers it sends.
    pub layers_sent: Vec<crate::room::SentLayer>,
    /// What it is sent of each simulcast publisher: the layer now, the layer chosen.
    pub layers_received: Vec<crate::room::ReceivedLayer>,
    /// Its receive sections that carry a stream now, and whose.
    pub receiving: Vec<crate::room::SlotUse>,
    /// Where its media goes now: the remote address of the ICE pair in use (a telephony
    /// leg's: the address it sends to), and over what.
    pub path: Option<MediaPath>,
    /// What of its media its room passes on ([`crate::room::Gate`]: blocked, silenced).
    pub gate: crate::room::Gate,
}

/// Where a participant's media goes, and over what.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct MediaPath {
    /// The remote address.
    pub remote: SocketAddr,
    /// `udp`, or `tcp` for a browser reached over ICE-TCP (RFC 6544). The core sees
    /// addresses only: the server's worker, which holds the connections, says `tcp`.
    pub transport: &'static str,
}

/// A room as the API shows it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RoomSnapshot {
    /// Its name.
    pub name: String,
    /// Media packets received from publishers and routed.
    pub routed_in: u64,
    /// Copies routed to receivers.
    pub forwarded: u64,
    /// Of those, copies transcoded or mixed.
    pub transcoded: u64,
    /// Whether it mixes its audio (N−1) rather than relaying it.
    pub mixing: bool,
    /// Its mix, when it mixes.
    pub mix: Option<MixSnapshot>,
    /// Its participants.
    pub participants: Vec<ParticipantSnapshot>,
}

/// A mixing room's mix as the API shows it.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct MixSnapshot {
    /// The most talkers summed at once (0: every member who talks).
    pub speakers: u16,
    /// Members whose audio is decoded into the mix.
    pub inputs: usize,
    /// Members summed in the last tick.
    pub talkers: usize,
    /// Encoders the last tick ran (one per talker and format, one per format for the rest).
    pub encoders: usize,
}

/// What every member of a shard is made with.
#[derive(Debug, Clone)]
pub struct ShardConfig {
    /// Our DTLS certificate.
    pub certificate: LocalCertificate,
    /// The WebRTC legs' configuration.
    pub webrtc: WebRtcConfig,
    /// The telephony legs' configuration.
    pub rtp: RtpConfig,
    /// How the gateway's own RTCP reports are made.
    pub rtcp: RtcpConfig,
    /// The codecs rooms transcode and mix with (and how their encoders are set up).
    pub codecs: secrelay_media::Registry,
    /// How many members a room takes.
    pub limits: RoomLimits,
}

/// Who is joining, as the signaling vouches for them: named in the API and webhooks, and
/// counted against the places of a room.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Who {
    /// The identity (an access token's subject).
    pub name: Option<String>,
    /// It joined without a credential (an open room): it takes none of the places kept for
    /// callers with one.
    pub anonymous: bool,
}

impl Who {
    /// A caller with a credential, named `name`.
    pub fn named(name: Option<String>) -> Who {
        Who {
            name,
            anonymous: false,
        }
    }
}

/// How a member joins: how the signaling named it, what it does, its ICE ufrags, who it is.
struct Joining<'a> {
    kind: JoinKind,
    role: MemberRole,
    ufrags: Vec<String>,
    who: &'a Who,
}

impl<'a> Joining<'a> {
    /// Doing what `kind` implies.
    fn new(kind: JoinKind, ufrags: Vec<String>, who: &'a Who) -> Joining<'a> {
        Joining {
            kind,
            role: kind.role(),
            ufrags,
            who,
        }
    }
}

/// How many members a room takes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RoomLimits {
    /// Members at most.
    pub members: usize,
    /// The share (0–1) of `members` anonymous members cannot take.
    pub reserved_for_authenticated: f64,
    /// Rooms whose settings ([`Shard::set_mixing`]) the shard keeps at most.
    pub settings: usize,
}

impl Default for RoomLimits {
    fn default() -> Self {
        RoomLimits {
            members: usize::MAX,
            reserved_for_authenticated: 0.0,
            settings: usize::MAX,
        }
    }
}

impl RoomLimits {
    /// The members at or past which `who` is refused.
    pub fn cap_for(&self, who: &Who) -> usize {
        if who.anonymous {
            let keep = (self.members as f64 * self.reserved_for_authenticated).ceil() as usize;
            self.members.saturating_sub(keep)
        } else {
            self.members
        }
    }
}

/// A member's place: its room's slot, the room's generation (slots are reused), and where the
/// member is in the room: found by index, no search.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct MemberKey {
    slot: usize,
    room_gen: u64,
    member: MemberAt,
}

/// Rooms (not replicas) and members by the kind they joined as, kept as they come and go, so
/// that [`Shard::census`] reads them instead of walking every room.
#[derive(Debug, Clone, Copy, Default)]
struct Tally {
    rooms: u64,
    by_leg: [u64; crate::leg::LegKind::COUNT],
}

impl Tally {
    /// A room's members by kind went from `before` to `after`.
    fn moved(
        &mut self,
        before: [u64; crate::leg::LegKind::COUNT],
        after: [u64; crate::leg::LegKind::COUNT],
    ) {
        for ((t, b), a) in self.by_leg.iter_mut().zip(before).zip(after) {
            *t = *t + a - b;
        }
    }

    /// Runs `f` on `room` (a member added or removed), the room's change counted.
    fn track<R>(&mut self, room: &mut Room, f: impl FnOnce(&mut Room) -> R) -> R {
        let before = room.members_by_kind();
        let r = f(room);
        self.moved(before, room.members_by_kind());
        r
    }

    /// `s` is gone, with whatever members it still had.
    fn room_gone(&mut self, s: &RoomSlot) {
        self.rooms -= u64::from(s.replica_of.is_none());
        self.moved(s.room.members_by_kind(), Default::default());
    }
}

/// What [`Shard::census`] counts: the [`ShardCounters`] figures a control command changes
/// (those summed over members, media and connections, are not among them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Census {
    /// Participants now ([`ShardCounters::members`]).
    pub members: u64,
    /// Rooms now ([`ShardCounters::rooms`]).
    pub rooms: u64,
    /// Members now by the kind they joined as ([`crate::counters::LegCounters::members`],
    /// by [`crate::leg::LegKind::index`]).
    pub by_leg: [u64; crate::leg::LegKind::COUNT],
    /// Sessions ended, by reason ([`ShardCounters::ended`]).
    pub ended: crate::counters::Ends,
    /// DTLS-SRTP handshakes finished and failed ([`ShardCounters::handshakes_ok`],
    /// [`ShardCounters::handshakes_failed`]).
    pub handshakes: (u64, u64),
}

impl Census {
    /// Puts these figures in `c`, in place of its own.
    pub fn write_into(&self, c: &mut ShardCounters) {
        c.members = self.members;
        c.rooms = self.rooms;
        for (leg, n) in c.by_leg.iter_mut().zip(self.by_leg) {
            leg.members = n;
        }
        c.ended = self.ended;
        (c.handshakes_ok, c.handshakes_failed) = self.handshakes;
    }
}

/// A room and what the shard keeps beside it (its members' state is the room's).
struct RoomSlot {
    name: String,
    room_gen: u64,
    room: Room,
    deadline: Option<Instant>,
    /// For a replica, the home's worker.
    replica_of: Option<usize>,
}

/// What the output queue holds.
enum Queued {
    Transmit {
        destination: SocketAddr,
        via: Via,
        buf: Vec<u8>,
        kind: TransmitKind,
        received: Option<Instant>,
    },
    /// (Boxed, as `what` below.)
    Event(Box<Event>),
    /// (`what` boxed: the rare output, it would make every one larger, and each of a
    /// fan-out's copies is an output moved twice.)
    Pipe {
        worker: usize,
        key: PipeKey,
        what: QueuedPiped,
        buf: Vec<u8>,
    },
}

/// A [`Piped`] as it waits in the queue: the packet's facts stay in the box the room put them
/// in (boxed there for the same reason as below).
#[derive(Debug)]
enum QueuedPiped {
    Media(Box<crate::room::PipedPacket>),
    Feedback,
}

impl QueuedPiped {
    fn unboxed(self) -> Piped {
        match self {
            QueuedPiped::Media(p) => Piped::Media(*p),
            QueuedPiped::Feedback => Piped::Feedback,
        }
    }
}

/// How many of the staged datagrams at the start of `staged` make one run: SRTP one member of
/// one room sent one after another (routed together), else the first alone.
fn run_len(staged: &[Staged]) -> usize {
    let Some(first) = staged.first() else {
        return 0;
    };
    if !matches!(first.what, What::Rtp(_)) {
        return 1;
    }
    let same = |s: &&Staged| {
        matches!(s.what, What::Rtp(_))
            && (s.slot, s.room_gen, s.member) == (first.slot, first.room_gen, first.member)
    };
    1 + staged[1..].iter().take_while(same).count()
}

/// A staged datagram's unprotect result at its member's leg (received at `received`):
/// counted, its source noted as authenticated; the plain length, `None` if it was dropped.
fn accept(leg: &mut Leg, st: &Staged, received: Instant) -> Option<usize> {
    if leg.closed().is_some() {
        // Closed while the batch ran (an earlier datagram of the same batch closed it).
        leg.counters_mut().drop(DropReason::AfterClose);
        return None;
    }
    let n = match st.result {
        Ok(n) => n,
        Err(e) => {
            leg.counters_mut().drop(DropReason::of_unprotect(e));
            return None;
        }
    };
    let c = leg.counters_mut();
    c.packets_in += 1;
    c.bytes_in += st.len as u64;
    if let Some(from) = st.from {
        leg.authenticated(from, matches!(st.what, What::Rtcp), received);
    }
    Some(n)
}

/// Asks the CPU to start loading what routing the received datagrams `staged` reads, each of
/// `stages` in turn over all of them (at most [`HINTED`]).
fn hint_routing(rooms: &[Option<RoomSlot>], staged: &[Staged], stages: &[HintStage]) {
    let staged = &staged[..staged.len().min(HINTED)];
    for &stage in stages {
        for st in staged {
            let What::Rtp(facts) = &st.what else { continue };
            let room = rooms.get(st.slot).and_then(Option::as_ref);
            if let Some(s) = room.filter(|s| s.room_gen == st.room_gen) {
                s.room.hint_route(st.member.ix, facts, stage);
            }
        }
    }
}

/// How many datagrams of a batch [`hint_routing`] asks for the lines of: as many as one
/// receive batch brings.
const HINTED: usize = 64;

/// An event, queued.
fn queued_event(e: Event) -> Queued {
    Queued::Event(Box::new(e))
}

/// The shard's rooms as the media batch sees them.
struct SlotRooms<'r>(&'r mut [Option<RoomSlot>]);

impl Rooms for SlotRooms<'_> {
    fn rooms_at<'a>(&'a mut self, slots: &[usize], out: &mut Vec<Option<&'a mut Room>>) {
        walk(self.0.iter_mut(), slots, out, |s| {
            s.as_mut().map(|s| &mut s.room)
        });
    }
}

fn random_id() -> String {
    let mut b = [0u8; 9];
    getrandom::fill(&mut b).expect("the OS random source works");
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A shard. See the [module documentation](self).
pub struct Shard {
    config: ShardConfig,
    rooms: Vec<Option<RoomSlot>>,
    room_index: HashMap<String, usize>,
    /// Rooms set to mix their audio, and how (by name, set before or after they exist).
    mixing: HashMap<String, MixSettings>,
    next_gen: u64,
    ids: HashMap<String, (usize, MemberAt)>,
    by_addr: HashMap<SocketAddr, MemberKey>,
    by_ufrag: HashMap<String, MemberKey>,
    by_port: HashMap<u16, MemberKey>,
    heap: BinaryHeap<Reverse<(Instant, usize, u64)>>,
    media: MediaBatch,
    /// What rooms put out, taken off in one place (`dispatch`), and the buffer pool.
    out: RoomOut,
    queue: VecDeque<Queued>,
    /// The buffer lent by the last `poll_output`, recycled on the next (unless the edge took
    /// it to send from: [`Shard::take_sent_buffer`]).
    lent: Option<Vec<u8>>,
    /// Rooms and members gone, and drops no member owns; sessions.
    counters: ShardCounters,
    draining: bool,
    to_remove: Vec<(usize, MemberAt)>,
    /// New DTLS handshakes are deferred (admission control: the worker is overloaded).
    shed_handshakes: bool,
    /// The worker this shard is (what its rooms' pipes name as their home).
    index: usize,
    /// Mirrored publishers of replicas here, by their key at home.
    mirrors: HashMap<PipeKey, MemberKey>,
    /// A run of received RTP handed to its room (kept for its allocation; empty between runs).
    routing: Vec<Received<'static>>,
    /// How many datagrams of the run being accepted were counted (at their member or here).
    run_counted: usize,
    /// A batch's datagrams unprotected and not all routed yet ([`Shard::flush_part`]), and
    /// where the next run to route starts in it (empty between batches, its allocation kept).
    unrouted: Vec<Staged>,
    unrouted_at: usize,
    tally: Tally,
}

impl std::fmt::Debug for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shard")
            .field("rooms", &self.room_index.len())
            .field("members", &self.ids.len())
            .field("engine", &self.media.engine_name())
            .finish_non_exhaustive()
    }
}

impl Shard {
    /// An empty shard whose members are made with `config`, its media batches run by `engine`.
    pub fn new(config: ShardConfig, engine: Box<dyn Engine>) -> Shard {
        Shard {
            config,
            rooms: Vec::new(),
            room_index: HashMap::new(),
            mixing: HashMap::new(),
            next_gen: 1,
            ids: HashMap::new(),
            by_addr: HashMap::new(),
            by_ufrag: HashMap::new(),
            by_port: HashMap::new(),
            heap: BinaryHeap::new(),
            media: MediaBatch::new(engine),
            out: RoomOut::default(),
            queue: VecDeque::new(),
            lent: None,
            counters: ShardCounters::default(),
            draining: false,
            to_remove: Vec::new(),
            shed_handshakes: false,
            index: 0,
            mirrors: HashMap::new(),
            routing: Vec::new(),
            run_counted: 0,
            unrouted: Vec::new(),
            unrouted_at: 0,
            tally: Tally::default(),
        }
    }

    /// The shard as worker `index` of several (what its rooms' pipes name as their home).
    pub fn with_index(mut self, index: usize) -> Shard {
        self.index = index;
        self
    }

    /// The SRTP engine's name.
    pub fn engine_name(&self) -> &'static str {
        self.media.engine_name()
    }

    fn key_of(&self, d: &Head, bytes: &[u8]) -> Option<MemberKey> {
        if let Via::Port(p) = d.via {
            // A telephony leg's own port: the port says whose, whatever the source.
            return self.by_port.get(&p).copied();
        }
        // A check goes to the member it names, whoever owns its source address now (a new
        // session from an address an old one validated takes the address over once its check
        // authenticates); anything else by its source.
        let named = match d.class {
            Class::Stun(facts) => facts.target_ufrag(bytes).and_then(|u| self.by_ufrag.get(u)),
            _ => None,
        };
        named.or_else(|| self.by_addr.get(&d.from)).copied()
    }

    /// Whether a member of this shard has the local ICE ufrag `ufrag`.
    pub fn owns_ufrag(&self, ufrag: &str) -> bool {
        self.by_ufrag.contains_key(ufrag)
    }

    /// Handles one datagram read at `now`. See the [module documentation](self).
    pub fn handle(&mut self, now: Instant, d: Datagram<'_>) -> Handled {
        let head = Head::of(&d);
        self.handle_bytes(now, head, Bytes::Lent(d.bytes))
    }

    /// [`Shard::handle`] for a datagram held in a buffer of the caller's (`buf`: one another
    /// worker handed over, whose class `class` was read there): staged for its unprotect call,
    /// the buffer itself is taken rather than its bytes copied, and `buf` gets one of the
    /// shard's in its place.
    pub fn handle_owned(
        &mut self,
        now: Instant,
        (via, from, class): (Via, SocketAddr, Class),
        buf: &mut Vec<u8>,
        received: Instant,
    ) -> Handled {
        let head = Head {
            via,
            from,
            class,
            received,
        };
        self.handle_bytes(now, head, Bytes::Owned(buf))
    }

    fn handle_bytes(&mut self, now: Instant, head: Head, bytes: Bytes<'_>) -> Handled {
        let Some(key) = self.key_of(&head, bytes.get()) else {
            return Handled::NotOurs;
        };
        self.handle_keyed(now, key, head, bytes)
    }

    /// A datagram of the member `key` names, delivered; a panic in its room's code abandons
    /// the room (counted), not the worker.
    fn handle_keyed(
        &mut self,
        now: Instant,
        key: MemberKey,
        head: Head,
        bytes: Bytes<'_>,
    ) -> Handled {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.deliver(now, key, head, bytes)
        }));
        if r.is_err() {
            self.count_drop(DropReason::InternalError);
            self.abandon_room(key.slot, key.room_gen);
        }
        Handled::Taken
    }

    /// The room of `key`, while it is the same room.
    fn room_of(&mut self, key: MemberKey) -> Option<&mut RoomSlot> {
        self.rooms
            .get_mut(key.slot)
            .and_then(Option::as_mut)
            .filter(|s| s.room_gen == key.room_gen)
    }

    fn deliver(&mut self, now: Instant, key: MemberKey, d: Head, bytes: Bytes<'_>) {
        if matches!(d.class, Class::Dtls)
            && (self.routing_left() || self.media.has_inbound_from(key.slot, key.member))
        {
            // What the sender sent before this record (a close_notify, an alert) is relayed
            // first, not counted as arriving after a close.
            self.run_inbound();
            self.route_unrouted(usize::MAX);
        }
        if self.room_of(key).is_none() {
            self.counters.media.drops[DropReason::UnknownSource] += 1;
            return;
        }
        match d.class {
            Class::Rtp(_) | Class::Rtcp(_) => self.media_in(now, key, d, bytes),
            _ => self.control_in(now, key, d, bytes.get()),
        }
    }

    /// SRTP or SRTCP staged for the batch's unprotect call (its buffer taken or its bytes
    /// copied once), or plain RTP routed at once, or dropped, as the member's leg admits it.
    fn media_in(&mut self, now: Instant, key: MemberKey, d: Head, bytes: Bytes<'_>) {
        let rtcp = matches!(d.class, Class::Rtcp(_));
        let len = bytes.get().len() as u64;
        let Shard { rooms, out, .. } = self;
        let Some(s) = rooms[key.slot].as_mut() else {
            return;
        };
        let admitted = s.room.with_media_leg(key.member, out, |leg| {
            let admitted = leg.admit(d.from, rtcp, now);
            match admitted {
                // Plain RTP: taken as it is, routed now (nothing to batch).
                Ok(false) => {
                    let c = leg.counters_mut();
                    c.packets_in += 1;
                    c.bytes_in += len;
                }
                Err(reason) => leg.counters_mut().drop(reason),
                Ok(true) => {}
            }
            admitted
        });
        match admitted {
            None => self.counters.media.drops[DropReason::UnknownSource] += 1,
            Some(Ok(true)) => {
                let what = match d.class {
                    Class::Rtp(facts) => What::Rtp(facts),
                    _ => What::Rtcp,
                };
                let buf = bytes.into_buf(&mut self.out);
                let at = (key.slot, key.room_gen, key.member);
                self.media.stage_inbound(at, d.from, d.received, what, buf);
            }
            Some(Ok(false)) => self.route_plain(key, d, bytes.get()),
            Some(Err(_)) => {}
        }
        self.dispatch(key.slot);
    }

    /// A control datagram (STUN, DTLS) to its member's leg, or one it cannot take counted.
    fn control_in(&mut self, now: Instant, key: MemberKey, d: Head, bytes: &[u8]) {
        let shed = self.shed_handshakes;
        let Shard { rooms, out, .. } = self;
        let Some(s) = rooms[key.slot].as_mut() else {
            return;
        };
        let control = s.room.with_leg(key.member, out, |leg| match d.class {
            Class::Stun(facts) => {
                match facts.message(bytes) {
                    Some(msg) => leg.handle_stun(now, d.from, d.via, &msg),
                    // The facts of other bytes: the caller's bug, counted, not a panic.
                    None => leg.counters_mut().drop(DropReason::InternalError),
                }
                true
            }
            Class::Dtls if shed && !leg.handshake_started() => {
                leg.counters_mut().drop(DropReason::Overload);
                false
            }
            Class::Dtls => {
                leg.handle_dtls(now, d.from, d.via, bytes);
                true
            }
            Class::Malformed(_) => {
                leg.counters_mut().drop(DropReason::Malformed);
                false
            }
            Class::Other => {
                leg.counters_mut().drop(DropReason::UnknownKind);
                false
            }
            Class::Unclassified | Class::Rtp(_) | Class::Rtcp(_) => {
                leg.counters_mut().drop(DropReason::Unclassified);
                false
            }
        });
        // Data-channel messages come in DTLS records, and only there.
        if control == Some(true) && matches!(d.class, Class::Dtls) {
            let data = s.room.relay_data(key.member, out);
            if !data.is_empty() {
                self.pipe_data(key.slot, data.into(), None);
            }
        }
        match control {
            Some(true) => self.settle(key.slot),
            Some(false) => self.dispatch(key.slot),
            None => self.counters.media.drops[DropReason::UnknownSource] += 1,
        }
    }

    /// Routes a plain RTP packet at once, or reads a plain RTCP compound (neither needs an
    /// unprotect).
    fn route_plain(&mut self, key: MemberKey, d: Head, bytes: &[u8]) {
        let Shard { rooms, out, .. } = self;
        let Some(s) = rooms[key.slot].as_mut() else {
            return;
        };
        match d.class {
            Class::Rtp(facts) => s.room.route(key.member, bytes, &facts, d.received, out),
            _ => s.room.note_rtcp(key.member, bytes, d.received, out),
        };
        self.dispatch(key.slot);
    }

    /// Counts a drop no member owns (the caller's: an unknown source, a full hand-off queue,
    /// a failed send).
    pub fn count_drop(&mut self, reason: DropReason) {
        self.count_drops(reason, 1);
    }

    /// Counts `n` drops no member owns.
    pub fn count_drops(&mut self, reason: DropReason, n: u64) {
        self.counters.media.drops[reason] += n;
    }

    /// Datagrams staged for the next unprotect call.
    pub fn staged(&self) -> usize {
        self.media.inbound.len()
    }

    /// Runs the staged media: one engine call unprotects every staged datagram, each packet is
    /// routed in its room, one more call protects every copy, and the copies are queued.
    pub fn flush(&mut self) {
        self.flush_part(usize::MAX);
    }

    /// [`Shard::flush`] a part at a time: the staged datagrams are unprotected together as
    /// there, then routed run by run until `copies` copies (or more: a packet's copies are
    /// never split) wait to be protected, and those are protected and queued. Whether
    /// datagrams are left to route: the caller takes the outputs (and sends them, so that
    /// their buffers come back) before calling it again, and a broadcast's batch never holds
    /// every copy of every packet at once. A datagram handled or a full flush meanwhile
    /// routes what was left first.
    pub fn flush_part(&mut self, copies: usize) -> bool {
        if !self.media.inbound.is_empty() {
            self.run_inbound();
        }
        self.route_unrouted(copies);
        self.run_outbound();
        if self.routing_left() {
            return true;
        }
        // Members closed meanwhile go once the whole batch is routed, as after a full flush.
        self.remove_closed();
        false
    }

    /// Whether datagrams of a batch wait to be routed ([`Shard::flush_part`]).
    fn routing_left(&self) -> bool {
        self.unrouted_at < self.unrouted.len()
    }

    /// Routes what an earlier batch left, then one engine call unprotects every staged
    /// datagram; they then wait in `unrouted`. The lines routing them reads are asked for
    /// before the call and after it ([`HintStage`]).
    fn run_inbound(&mut self) {
        self.route_unrouted(usize::MAX);
        let n = self.media.inbound.len();
        if n == 0 {
            return;
        }
        hint_routing(
            &self.rooms,
            &self.media.inbound,
            &HintStage::BEFORE_UNPROTECT,
        );
        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.media.unprotect(&mut SlotRooms(&mut self.rooms))
        }));
        if ran.is_err() {
            // Our SRTP code panicked: the batch's datagrams are dropped and counted.
            tracing::error!(
                packets = n,
                "SRTP batch panicked; its datagrams are dropped"
            );
            self.count_drops(DropReason::InternalError, n as u64);
            for st in self.media.inbound.drain(..) {
                self.out.recycle(st.buf);
            }
            return;
        }
        std::mem::swap(&mut self.media.inbound, &mut self.unrouted);
        self.unrouted_at = 0;
        hint_routing(&self.rooms, &self.unrouted, &HintStage::BEFORE_ROUTING);
        self.counters.srtp_batches += 1;
        self.counters.srtp_batched += n as u64;
    }

    /// Routes the unprotected datagrams waiting in `unrouted`, run by run, while the copies
    /// waiting to be protected stay under `copies`: a run whose packets would pass it (a
    /// broadcast's) is routed as many packets at a time as fit, counting a copy per member
    /// of its room for each (one per receiver, and room for its RTCP); at least one. Once all
    /// are routed, their buffers are kept for the next.
    fn route_unrouted(&mut self, copies: usize) {
        let staged = std::mem::take(&mut self.unrouted);
        let mut at = self.unrouted_at;
        while at < staged.len() {
            let (slot, room_gen) = (staged[at].slot, staged[at].room_gen);
            let room = self.rooms.get(slot).and_then(Option::as_ref);
            let per_packet = room.map_or(1, |s| s.room.len().max(1));
            let waiting = self.out.protect_len();
            let fit = copies.saturating_sub(waiting) / per_packet;
            if fit == 0 && waiting > 0 {
                break;
            }
            let run = &staged[at..][..run_len(&staged[at..]).min(fit.max(1))];
            self.run_counted = 0;
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.accept_run(run)));
            if r.is_err() {
                // The datagrams not counted yet, or (all were) the one being routed.
                let lost = run.len().saturating_sub(self.run_counted).max(1);
                self.count_drops(DropReason::InternalError, lost as u64);
                self.abandon_room(slot, room_gen);
            }
            at += run.len();
        }
        self.unrouted = staged;
        self.unrouted_at = at;
        if at >= self.unrouted.len() {
            for st in self.unrouted.drain(..) {
                self.out.recycle(st.buf);
            }
            self.unrouted_at = 0;
        }
    }

    /// One run's unprotect results (see [`run_len`]), each counted at its member: the RTP
    /// among them routed in its room together ([`Room::route_run`]), SRTCP read there. Drops no
    /// member owns are counted at the shard.
    fn accept_run(&mut self, run: &[Staged]) {
        let Some(first) = run.first() else { return };
        let (slot, room_gen, member) = (first.slot, first.room_gen, first.member);
        let Shard {
            rooms,
            out,
            routing,
            counters,
            run_counted,
            ..
        } = self;
        let Some(s) = rooms
            .get_mut(slot)
            .and_then(Option::as_mut)
            .filter(|s| s.room_gen == room_gen)
        else {
            counters.media.drops[DropReason::UnknownSource] += run.len() as u64;
            *run_counted = run.len();
            return;
        };
        let mut ready: Vec<Received<'_>> = recycle(std::mem::take(routing));
        for st in run {
            let taken = match st.received {
                None => {
                    counters.media.drops[DropReason::InternalError] += 1;
                    None
                }
                Some(received) => {
                    match s
                        .room
                        .with_media_leg(member, out, |leg| accept(leg, st, received))
                    {
                        Some(n) => n.map(|n| (n, received)),
                        None => {
                            counters.media.drops[DropReason::UnknownSource] += 1;
                            None
                        }
                    }
                }
            };
            *run_counted += 1;
            let Some((n, received)) = taken else { continue };
            let plain = st.buf.get(..n).unwrap_or_default();
            match st.what {
                What::Rtp(facts) => ready.push(Received {
                    rtp: plain,
                    facts,
                    received,
                }),
                // SRTCP is terminated here: read for the member's figures and its feedback
                // answered, not forwarded.
                What::Rtcp => {
                    s.room.note_rtcp(member, plain, received, out);
                }
                _ => {}
            }
        }
        if !ready.is_empty() {
            s.room.route_run(member, &ready, out);
        }
        *routing = recycle(ready);
        self.dispatch(slot);
    }

    fn run_outbound(&mut self) {
        if self.out.protect_len() == 0 {
            return;
        }
        let (mut staged, unplaced) = self.out.take_protect();
        self.count_drops(DropReason::InternalError, unplaced);
        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.media
                .protect(&mut staged, &mut SlotRooms(&mut self.rooms))
        }));
        for st in staged.drain(..) {
            let Staged {
                slot,
                room_gen,
                member,
                received,
                what,
                mut buf,
                result,
                ..
            } = st;
            let counters = self.rooms[slot]
                .as_mut()
                .filter(|s| s.room_gen == room_gen)
                .and_then(|s| s.room.counters_mut(member));
            let out = match what {
                What::Copy(d, via) => Some((d, via, TransmitKind::Media, received)),
                What::RtcpOut(d, via) => Some((d, via, TransmitKind::Rtcp, None)),
                What::Rtp(_) | What::Rtcp => None,
            };
            match (counters, out) {
                (Some(c), Some((destination, via, kind, received))) if ran.is_ok() => {
                    match result {
                        Ok(len) => {
                            c.packets_out += 1;
                            c.bytes_out += len as u64;
                            buf.truncate(len);
                            self.queue.push_back(Queued::Transmit {
                                destination,
                                via,
                                buf,
                                kind,
                                received,
                            });
                            continue;
                        }
                        Err(_) => c.drop(DropReason::ProtectFailed),
                    }
                }
                // Our SRTP code panicked on the batch: every copy is dropped and counted.
                (Some(_), _) => self.counters.media.drops[DropReason::InternalError] += 1,
                // The room (or the receiver) went after the copy was routed.
                (None, _) => self.counters.media.drops[DropReason::UnknownSource] += 1,
            }
            self.out.recycle(buf);
        }
        self.out.give_back(staged);
    }

    /// Takes everything the room in `slot` put out, in the order it was made: the one place
    /// a room's output goes where it must. Copies and RTCP to protect, already staged for the
    /// batch's protect call, are given the room's slot; plain ones and control datagrams are
    /// queued to send, events acted on (a member that connected is offered what it lacks),
    /// deadlines put on the timer.
    fn dispatch(&mut self, slot: usize) {
        let mut displaced = Vec::new();
        let mut connected = false;
        let room_gen = self.rooms[slot].as_ref().map(|s| s.room_gen);
        // Left by a call into another room that did not finish (a panic), or the room went:
        // dropped.
        let foreign = match room_gen {
            Some(tag) => self.out.place(slot, tag),
            None => self.out.drop_unplaced(),
        };
        self.count_drops(DropReason::InternalError, foreign);
        while let Some((tag, o)) = self.out.pop() {
            if Some(tag) != room_gen {
                // Left by a call into another room that did not finish (a panic): dropped.
                self.discard(o);
                continue;
            }
            match o {
                Out::Send {
                    to,
                    target,
                    what,
                    buf,
                } => self.send_out(slot, to, target, what, buf),
                Out::Control {
                    destination,
                    via,
                    kind,
                    buf,
                    ..
                } => self.queue.push_back(Queued::Transmit {
                    destination,
                    via,
                    buf,
                    kind,
                    received: None,
                }),
                Out::Event { to, event } => {
                    connected |= matches!(event, LegEvent::Connected { .. });
                    self.on_leg_event(slot, to, event, &mut displaced);
                }
                Out::Pipe {
                    worker,
                    publisher,
                    packet,
                    buf,
                } => {
                    self.counters.piped_out += 1;
                    let key = PipeKey {
                        home: self.index,
                        slot,
                        room_gen: room_gen.unwrap_or_default(),
                        member: publisher,
                    };
                    self.queue.push_back(Queued::Pipe {
                        worker,
                        key,
                        what: QueuedPiped::Media(packet),
                        buf,
                    });
                }
                Out::Record { key, at, buf } => {
                    self.queue.push_back(queued_event(Event::Recorded {
                        key,
                        at,
                        packet: buf,
                    }));
                }
                Out::Wake(t) => {
                    if let Some(s) = self.rooms[slot].as_mut() {
                        if s.deadline.is_none_or(|d| t < d) {
                            s.deadline = Some(t);
                            self.heap.push(Reverse((t, slot, s.room_gen)));
                        }
                    }
                }
            }
        }
        for (addr, old) in displaced {
            self.displace(addr, old);
        }
        if connected {
            // A member that listened before it connected could not be offered what it lacks
            // until now.
            self.renegotiate(slot);
        }
    }

    /// An output that is not sent (its room is gone, or it was left by a call that did not
    /// finish), counted.
    fn discard(&mut self, o: Out) {
        if let Out::Send { buf, .. } | Out::Control { buf, .. } | Out::Pipe { buf, .. } = o {
            self.out.recycle(buf);
            self.counters.media.drops[DropReason::InternalError] += 1;
        }
    }

    /// One datagram for a member's media transport sent as it is (and counted out): a
    /// plain-RTP member's, or a mirror's RTCP to its publisher's home. One to protect was
    /// staged by [`RoomOut::send`] and never comes here; if one did, it is dropped, never sent
    /// in the clear.
    fn send_out(
        &mut self,
        slot: usize,
        to: MemberAt,
        target: crate::leg::CopyTarget,
        what: Sent,
        buf: Vec<u8>,
    ) {
        let Some(s) = self.rooms[slot].as_mut() else {
            return self.out.recycle(buf);
        };
        let (kind, received) = match what {
            Sent::Media(at) => (TransmitKind::Media, Some(at)),
            Sent::Rtcp => (TransmitKind::Rtcp, None),
        };
        if target.protect {
            debug_assert!(false, "a datagram to protect queued to send as it is");
            self.counters.media.drops[DropReason::InternalError] += 1;
            return self.out.recycle(buf);
        }
        if target.via == Via::Pipe {
            // A mirror's RTCP: to its publisher's home.
            let Some(key) = s.room.leg(to.id()).and_then(Leg::as_pipe).map(PipeLeg::key) else {
                return self.out.recycle(buf);
            };
            if let Some(c) = s.room.counters_mut(to) {
                c.packets_out += 1;
                c.bytes_out += buf.len() as u64;
            }
            self.queue.push_back(Queued::Pipe {
                worker: key.home(),
                key,
                what: QueuedPiped::Feedback,
                buf,
            });
            return;
        }
        if let Some(c) = s.room.counters_mut(to) {
            c.packets_out += 1;
            c.bytes_out += buf.len() as u64;
        }
        self.queue.push_back(Queued::Transmit {
            destination: target.destination,
            via: target.via,
            buf,
            kind,
            received,
        });
    }

    /// What a member's leg reported: its routes (an address validated), its connection, its
    /// end. Addresses another member had are put in `displaced`.
    fn on_leg_event(
        &mut self,
        slot: usize,
        member: MemberAt,
        event: LegEvent,
        displaced: &mut Vec<(SocketAddr, MemberKey)>,
    ) {
        let Some(s) = self.rooms.get_mut(slot).and_then(Option::as_mut) else {
            return;
        };
        let k = MemberKey {
            slot,
            room_gen: s.room_gen,
            member,
        };
        match event {
            LegEvent::Validated(addr) | LegEvent::IceSelected(addr) => {
                let Some(session) = s.room.session_mut(member) else {
                    return;
                };
                if !session.addrs.contains(&addr) {
                    session.addrs.push(addr);
                }
                match self.by_addr.insert(addr, k) {
                    Some(old) if old == k => {}
                    previous => {
                        displaced.extend(previous.map(|old| (addr, old)));
                        self.queue
                            .push_back(queued_event(Event::AddressOwned(addr)));
                    }
                }
            }
            LegEvent::Connected { profile, handshake } => {
                let mut id = "";
                if let Some(session) = s.room.session_mut(member) {
                    session.profile = Some(profile);
                    session.connected = true;
                    id = &session.id;
                }
                tracing::info!(
                    room = %s.name,
                    session = id,
                    profile = %profile,
                    handshake_ms = handshake.as_secs_f64() * 1e3,
                    "participant connected"
                );
                self.counters.handshakes_ok += 1;
                self.queue
                    .push_back(queued_event(Event::Connected { handshake }));
                Shard::note_connected(&mut self.queue, s, member);
            }
            LegEvent::SourcesChanged => {
                if let Some(rtp) = s.room.leg_at(member).and_then(Leg::as_rtp) {
                    self.queue
                        .push_back(queued_event(Event::Sources(rtp.sources())));
                }
            }
            LegEvent::Closed(reason) => {
                if let Some(session) = s.room.session_mut(member) {
                    if session.closing.is_none() {
                        let end = reason.end_reason();
                        session.closing = Some(end);
                        self.counters.ended[end] += 1;
                        if !session.connected && reason.fails_handshake() {
                            self.counters.handshakes_failed += 1;
                        }
                        tracing::debug!(room = %s.name, session = %session.id, reason = %reason, "participant closed");
                    }
                }
                self.to_remove.push((slot, member));
            }
        }
    }

    /// [`Shard::dispatch`], then the room's next deadline on the timer (after control input
    /// to a member, or a timeout: its timers may have moved).
    fn settle(&mut self, slot: usize) {
        self.dispatch(slot);
        let Some(s) = self.rooms.get_mut(slot).and_then(Option::as_mut) else {
            return;
        };
        let next = s.room.poll_timeout();
        if next != s.deadline {
            s.deadline = next;
            if let Some(t) = next {
                self.heap.push(Reverse((t, slot, s.room_gen)));
            }
        }
    }

    /// Member `key` gives up `addr`, which another member validated after it: one remote
    /// address belongs to one member, so a retried or duplicated session never makes two
    /// routes to one receiver. Its leg sends nothing to the address and takes nothing from it
    /// until a check of its own validates it again (and takes it back).
    fn displace(&mut self, addr: SocketAddr, key: MemberKey) {
        let Shard { rooms, out, .. } = self;
        let Some(s) = rooms[key.slot]
            .as_mut()
            .filter(|s| s.room_gen == key.room_gen)
        else {
            return;
        };
        if let Some(session) = s.room.session_mut(key.member) {
            session.addrs.retain(|a| *a != addr);
        }
        s.room.with_leg(key.member, out, |leg| {
            if let Some(leg) = leg.as_webrtc_mut() {
                leg.yield_address(addr);
            }
        });
        tracing::info!(room = %s.name, %addr, "an address moved to another session");
        self.dispatch(key.slot);
    }

    /// `addr` now belongs to a member of another shard (its check authenticated there after
    /// ours): the member here that had it gives it up, as [`Shard::displace`] says. Whether
    /// one did.
    pub fn yield_address(&mut self, addr: SocketAddr) -> bool {
        match self.by_addr.remove(&addr) {
            Some(key) => {
                self.displace(addr, key);
                true
            }
            None => false,
        }
    }

    /// Notes that `member` of the room in `s` connected: [`Lifecycle::Connected`], and
    /// [`Lifecycle::Publishing`] when it sends media.
    fn note_connected(queue: &mut VecDeque<Queued>, s: &mut RoomSlot, member: MemberAt) {
        let publishes = s.room.role(member.id()).is_some_and(|r| r.publishes);
        let room = s.name.clone();
        let Some(session) = s.room.session_mut(member) else {
            return;
        };
        let id = session.id.clone();
        queue.push_back(queued_event(Event::Lifecycle(Lifecycle::Connected {
            room: room.clone(),
            id: id.clone(),
        })));
        if publishes && !session.publishing {
            session.publishing = true;
            queue.push_back(queued_event(Event::Lifecycle(Lifecycle::Publishing {
                room,
                id,
                name: session.name.clone(),
                started: true,
            })));
        }
    }

    /// Notes that a member of `room` was removed: [`Lifecycle::Publishing`] stopped if it had
    /// started, then [`Lifecycle::Left`].
    fn note_left(queue: &mut VecDeque<Queued>, room: &str, session: &Session, reason: EndReason) {
        if session.publishing {
            queue.push_back(queued_event(Event::Lifecycle(Lifecycle::Publishing {
                room: room.to_owned(),
                id: session.id.clone(),
                name: session.name.clone(),
                started: false,
            })));
        }
        queue.push_back(queued_event(Event::Lifecycle(Lifecycle::Left {
            room: room.to_owned(),
            id: session.id.clone(),
            name: session.name.clone(),
            reason,
        })));
    }

    /// A member's routes go: its ufrags, addresses, ports and id.
    fn forget_routes(&mut self, session: &Session) {
        for u in &session.ufrags {
            self.by_ufrag.remove(u);
        }
        for a in &session.addrs {
            self.by_addr.remove(a);
        }
        for p in &session.ports {
            self.by_port.remove(p);
        }
        self.ids.remove(&session.id);
    }

    /// Removes the members that closed, and rooms left empty.
    fn remove_closed(&mut self) {
        while let Some((slot, member)) = self.to_remove.pop() {
            let Some(s) = self.rooms.get_mut(slot).and_then(Option::as_mut) else {
                continue;
            };
            if s.room.at(member.id()) != Some(member) {
                continue;
            }
            let publishes = s.room.role(member.id()).is_some_and(|r| r.publishes);
            let Some((leg, session)) = self.tally.track(&mut s.room, |r| r.remove(member.id()))
            else {
                continue;
            };
            let empty = s.room.is_empty() && s.room.pipe_workers().next().is_none();
            if leg.as_pipe().is_some() {
                tracing::debug!(room = %s.name, publisher = %session.id, "mirror removed");
                self.forget_mirror(&leg);
                if empty {
                    self.finish_room(slot);
                }
                continue;
            }
            Self::tell_pipes(&mut self.queue, s, member, publishes, self.index, slot);
            // A member is removed once it closed, and closing notes why.
            let reason = session.closing.unwrap_or(EndReason::CloseNotify);
            tracing::info!(
                room = %s.name,
                session = %session.id,
                kind = session.kind.name(),
                reason = reason.name(),
                "session ended"
            );
            Self::note_left(&mut self.queue, &s.name, &session, reason);
            self.forget_routes(&session);
            self.queue.push_back(queued_event(Event::MemberLeft {
                id: session.id,
                reason,
                ufrags: session.ufrags,
                addrs: session.addrs,
                ports: session.ports,
                peers: leg.as_rtp().map(RtpLeg::peers).unwrap_or_default(),
            }));
            if empty {
                self.finish_room(slot);
            }
        }
    }

    /// The room in `slot` is empty: its counters are kept, it is gone.
    fn finish_room(&mut self, slot: usize) {
        let Some(s) = self.rooms[slot].take() else {
            return;
        };
        self.tally.room_gone(&s);
        self.counters.add_room(&s.room);
        self.room_index.remove(&s.name);
        if s.replica_of.is_none() {
            self.queue
                .push_back(queued_event(Event::Lifecycle(Lifecycle::RoomFinished {
                    room: s.name,
                })));
        }
    }

    /// Tears down a room whose code panicked: every member is removed and counted as ended by
    /// `internal_error`; nothing of it is driven again.
    fn abandon_room(&mut self, slot: usize, room_gen: u64) {
        // What the call that panicked staged to protect goes, whatever became of its room
        // (each finished call's copies were placed).
        let unplaced = self.out.drop_unplaced();
        self.count_drops(DropReason::InternalError, unplaced);
        let Some(mut s) = self.rooms.get_mut(slot).and_then(Option::take) else {
            return;
        };
        if s.room_gen != room_gen {
            self.rooms[slot] = Some(s);
            return;
        }
        tracing::error!(room = %s.name, members = s.room.len(), "room abandoned after a panic in its code");
        self.tally.room_gone(&s);
        // Whatever it put out before it panicked goes with it.
        while let Some((_, o)) = self.out.pop() {
            self.discard(o);
        }
        self.counters.add_room(&s.room);
        let members: Vec<MemberId> = s.room.members().collect();
        for member in members {
            let publishes = s.room.role(member).is_some_and(|r| r.publishes);
            let at = s.room.at(member);
            let Some((leg, session)) = s.room.remove(member) else {
                continue;
            };
            if self.forget_mirror(&leg) {
                continue;
            }
            if let Some(at) = at {
                Self::tell_pipes(&mut self.queue, &s, at, publishes, self.index, slot);
            }
            self.forget_routes(&session);
            self.counters.ended[EndReason::InternalError] += 1;
            Self::note_left(&mut self.queue, &s.name, &session, EndReason::InternalError);
            self.queue.push_back(queued_event(Event::MemberLeft {
                id: session.id,
                reason: EndReason::InternalError,
                ufrags: session.ufrags,
                addrs: session.addrs,
                ports: session.ports,
                peers: leg.as_rtp().map(RtpLeg::peers).unwrap_or_default(),
            }));
        }
        self.room_index.remove(&s.name);
        if s.replica_of.is_none() {
            self.queue
                .push_back(queued_event(Event::Lifecycle(Lifecycle::RoomFinished {
                    room: s.name,
                })));
        }
        self.to_remove.retain(|(sl, _)| *sl != slot);
    }

    /// Advances time: the members whose deadline has come.
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some(Reverse((t, slot, gen))) = self.heap.peek().copied() {
            if t > now {
                break;
            }
            self.heap.pop();
            let current = self.rooms[slot]
                .as_ref()
                .is_some_and(|s| s.room_gen == gen && s.deadline == Some(t));
            if !current {
                continue;
            }
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let Shard { rooms, out, .. } = self;
                if let Some(s) = rooms[slot].as_mut() {
                    s.deadline = None;
                    s.room.handle_timeout(now, out);
                    // A mixing room's mixes due by now, protected and sent as routed copies.
                    s.room.mix_due(now, out);
                    // Media played to members, due by now.
                    s.room.play_due(now, out);
                }
                self.settle(slot);
            }));
            if r.is_err() {
                self.abandon_room(slot, gen);
            }
        }
        self.remove_closed();
    }

    /// When [`Shard::handle_timeout`] must next be called (it may come early: a deadline that
    /// moved is found stale then).
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse((t, _, _))| *t)
    }

    /// The next output (see the drive contract). Staged media is run first.
    pub fn poll_output(&mut self) -> Option<Output<'_>> {
        if let Some(b) = self.lent.take() {
            self.out.recycle(b);
        }
        if !self.media.inbound.is_empty() || self.out.protect_len() > 0 {
            self.flush();
        } else if !self.to_remove.is_empty() && !self.routing_left() {
            self.remove_closed();
        }
        let Some(q) = self.queue.pop_front() else {
            return self.poll_timeout().map(Output::Timeout);
        };
        Some(match q {
            Queued::Transmit {
                destination,
                via,
                buf,
                kind,
                received,
            } => Output::Transmit(Transmit {
                destination,
                via,
                contents: self.lent.insert(buf),
                kind,
                received,
            }),
            Queued::Event(e) => Output::Event(*e),
            Queued::Pipe {
                worker,
                key,
                what,
                buf,
            } => Output::Pipe(PipeTransmit {
                worker,
                key,
                what: what.unboxed(),
                contents: self.lent.insert(buf),
            }),
        })
    }

    /// The buffer of the datagram the last [`Shard::poll_output`] lent as a [`Transmit`],
    /// handed over: the edge sends from it as it is (no copy into a send batch) and gives it
    /// back with [`Shard::recycle`] once sent. `None` if the last output was no transmit.
    pub fn take_sent_buffer(&mut self) -> Option<Vec<u8>> {
        self.lent.take()
    }

    /// A buffer taken with [`Shard::take_sent_buffer`] (or a handed-over datagram's), sent:
    /// kept for the next copies.
    pub fn recycle(&mut self, buf: Vec<u8>) {
        self.out.recycle(buf);
    }

    /// Makes a WebRTC participant for `offer` in `room` (made if it does not exist).
    pub fn join(
        &mut self,
        now: Instant,
        room: &str,
        offer: &Offer,
        kind: JoinKind,
        who: &Who,
    ) -> Result<Joined, JoinError> {
        if self.draining {
            return Err(JoinError::ShuttingDown);
        }
        self.admit_member(room, who)?;
        let leg = WebRtcLeg::new(
            offer,
            self.config.certificate.clone(),
            self.config.webrtc.clone(),
            now,
        )?;
        let ice = leg.ice_credentials().clone();
        let answer = leg.answer_sdp().to_owned();
        let id = self.add_member(
            now,
            room,
            leg.into(),
            Joining::new(kind, vec![ice.ufrag.clone()], who),
        );
        Ok(Joined { id, answer, ice })
    }

    /// Makes a WebRTC member in `room` that offers `sections` to its peer (a SIP proxy's call
    /// towards a browser): its id, our offer (in [`Joined::answer`]) and our ICE credentials.
    /// Media waits for [`Shard::answer_webrtc`]; the peer's checks are answered before that.
    pub fn offer_webrtc(
        &mut self,
        now: Instant,
        room: &str,
        sections: &[WebRtcOfferSection],
        who: &Who,
    ) -> Result<Joined, JoinError> {
        if self.draining {
            return Err(JoinError::ShuttingDown);
        }
        self.admit_member(room, who)?;
        let leg = WebRtcLeg::new_offer(
            sections,
            self.config.certificate.clone(),
            self.config.webrtc.clone(),
            now,
        )?;
        let ice = leg.ice_credentials().clone();
        let answer = leg.offer_sdp().to_owned();
        let id = self.add_member(
            now,
            room,
            leg.into(),
            Joining::new(JoinKind::Join, vec![ice.ufrag.clone()], who),
        );
        Ok(Joined { id, answer, ice })
    }

    /// The peer's answer to a WebRTC member's offer ([`Shard::offer_webrtc`]): the codecs it
    /// took (with their payload types), in order. The member's role in its room follows the
    /// directions the answer chose.
    pub fn answer_webrtc(
        &mut self,
        now: Instant,
        room: &str,
        id: &str,
        answer: &Offer,
    ) -> Result<Vec<(crate::leg::CodecId, u8)>, JoinError> {
        let (_, _, codecs) = self.change_leg(room, id, |leg| {
            let leg = leg
                .as_webrtc_mut()
                .ok_or_else(|| JoinError::wrong_leg(id, LegKind::WebRtc))?;
            leg.accept_answer(answer, now)?;
            let media = leg.media();
            let role = MemberRole {
                publishes: media.iter().any(|m| m.peer_sends),
                subscribes: media.iter().any(|m| m.peer_receives),
            };
            let codecs = media
                .iter()
                .flat_map(|m| m.codecs.iter().copied())
                .collect();
            Ok((Some(role), codecs))
        })?;
        Ok(codecs)
    }

    /// Runs `f` on the leg of member `id` of `room` (a renegotiation, an answer), then reads
    /// what the leg negotiated again ([`Room::media_changed`]), gives the member the role `f`
    /// says (if it says one), and takes what the leg made off the queue. Err when there is no
    /// such member, or `f`'s.
    fn change_leg<R>(
        &mut self,
        room: &str,
        id: &str,
        f: impl FnOnce(&mut Leg) -> Result<(Option<MemberRole>, R), JoinError>,
    ) -> Result<(usize, MemberAt, R), JoinError> {
        let missing = || JoinError::no_member(room, id);
        let (slot, member) = self.find(room, id).ok_or_else(missing)?;
        let Shard { rooms, out, .. } = self;
        let s = rooms[slot].as_mut().ok_or_else(missing)?;
        let published = s.room.publishers().any(|p| p.at == member);
        let done = s.room.with_leg(member, out, f).ok_or_else(missing)?;
        if done.is_ok() {
            s.room.media_changed(member.id());
        }
        if let Ok((Some(role), _)) = &done {
            s.room.set_role(member.id(), *role);
        }
        if done.is_ok() {
            self.tell_pipes_changed(slot, member, published);
        }
        self.settle(slot);
        done.map(|(_, r)| (slot, member, r))
    }

    /// Makes a telephony member (plain RTP or SDES-SRTP) for `offer` in `room`, for `who`, on
    /// the local `ports` the caller bound for it (RTP on `ports.rtp`, RTCP on `ports.rtcp`):
    /// its id, the answer, and the ports it uses (RTCP's is not used when the offer muxes
    /// RTCP: the caller can close it).
    pub fn join_rtp(
        &mut self,
        now: Instant,
        room: &str,
        offer: &RtpDescription,
        ports: Ports,
        who: &Who,
    ) -> Result<JoinedRtp, JoinError> {
        self.join_rtp_with(now, room, offer, ports, &RtpLegOptions::default(), who)
    }

    /// A telephony leg's configuration as `options` make it: DTLS-SRTP with our certificate
    /// and the WebRTC legs' profiles and timers, where they ask for it.
    fn rtp_config(&self, options: &RtpLegOptions) -> RtpConfig {
        let mut config = options.apply(self.config.rtp.clone());
        config.dtls = options.dtls.map(|d| crate::leg::RtpDtls {
            certificate: self.config.certificate.clone(),
            srtp_profiles: self.config.webrtc.srtp_profiles.clone(),
            timers: self.config.webrtc.dtls_timers,
            hash: d.hash,
            passive: d.passive,
        });
        config
    }

    /// [`Shard::join_rtp`] with `options` for the leg (the ng protocol's choices, and the
    /// ports' previous peers it refuses: [`RtpLegOptions::quarantine`]).
    pub fn join_rtp_with(
        &mut self,
        now: Instant,
        room: &str,
        offer: &RtpDescription,
        ports: Ports,
        options: &RtpLegOptions,
        who: &Who,
    ) -> Result<JoinedRtp, JoinError> {
        if self.draining {
            return Err(JoinError::ShuttingDown);
        }
        self.admit_member(room, who)?;
        let leg = RtpLeg::new(offer, ports, self.rtp_config(options), now)
            .and_then(|leg| options.finish(leg))?;
        let answer = leg.answer_sdp().to_owned();
        let used = leg.local_ports();
        let role = match leg.media().first() {
            Some(m) => MemberRole {
                publishes: m.peer_sends,
                subscribes: m.peer_receives,
            },
            None => MemberRole::BOTH,
        };
        let j = Joining {
            role,
            ..Joining::new(JoinKind::Rtp, Vec::new(), who)
        };
        let id = self.add_member(now, room, leg.into(), j);
        Ok(JoinedRtp {
            id,
            answer,
            ports: used,
        })
    }

    /// Makes a telephony member that offers `spec` to a phone (a SIP proxy's `offer`, towards
    /// the callee), for `who`, on the local `ports`: its id and our offer. Media waits for
    /// [`Shard::answer_rtp`].
    pub fn offer_rtp(
        &mut self,
        now: Instant,
        room: &str,
        spec: &RtpOfferSpec,
        ports: Ports,
        who: &Who,
    ) -> Result<JoinedRtp, JoinError> {
        self.offer_rtp_with(now, room, spec, ports, &RtpLegOptions::default(), who)
    }

    /// [`Shard::offer_rtp`] with `options` for the leg.
    pub fn offer_rtp_with(
        &mut self,
        now: Instant,
        room: &str,
        spec: &RtpOfferSpec,
        ports: Ports,
        options: &RtpLegOptions,
        who: &Who,
    ) -> Result<JoinedRtp, JoinError> {
        if self.draining {
            return Err(JoinError::ShuttingDown);
        }
        self.admit_member(room, who)?;
        let config = self.rtp_config(options);
        let leg = RtpLeg::new_offer_of(
            options.kind.clone(),
            &options.sdes_tags,
            spec,
            ports,
            config,
            now,
        )
        .and_then(|leg| options.finish(leg))?;
        let answer = leg.answer_sdp().to_owned();
        let used = leg.local_ports();
        let id = self.add_member(
            now,
            room,
            leg.into(),
            Joining::new(JoinKind::Rtp, Vec::new(), who),
        );
        Ok(JoinedRtp {
            id,
            answer,
            ports: used,
        })
    }

    /// The phone's answer to the offer a member made ([`Shard::offer_rtp`]): the codecs it
    /// took (with their payload types), in order.
    pub fn answer_rtp(
        &mut self,
        now: Instant,
        room: &str,
        id: &str,
        answer: &RtpDescription,
    ) -> Result<Vec<(crate::leg::CodecId, u8)>, JoinError> {
        let (_, _, codecs) = self.change_leg(room, id, |leg| {
            let leg = leg
                .as_rtp_mut()
                .ok_or_else(|| JoinError::wrong_leg(id, LegKind::Telephony))?;
            leg.accept_answer(answer, now)?;
            Ok((None, leg.media()[0].codecs.clone()))
        })?;
        Ok(codecs)
    }

    /// SDP for a telephony member from its phone, in the call: the answer to an offer of
    /// ours when one waits for it (`None`), else a new offer (a re-INVITE: new address,
    /// codecs, direction or keys) and our answer to it. The member's role in its room follows
    /// the new direction (hold).
    pub fn update_rtp(
        &mut self,
        now: Instant,
        room: &str,
        id: &str,
        sdp: &RtpDescription,
    ) -> Result<Option<String>, JoinError> {
        let (_, _, answer) = self.change_leg(room, id, |leg| {
            let Some(leg) = leg.as_rtp_mut() else {
                return Err(JoinError::wrong_leg(id, LegKind::Telephony));
            };
            if leg.awaiting_answer() {
                leg.accept_answer(sdp, now)?;
                return Ok((None, None));
            }
            leg.take_offer(sdp, now)?;
            let answer = leg.answer_sdp().to_owned();
            let role = leg
                .media()
                .first()
                .map_or(MemberRole::BOTH, |m| MemberRole {
                    publishes: m.peer_sends,
                    subscribes: m.peer_receives,
                });
            Ok((Some(role), Some(answer)))
        })?;
        Ok(answer)
    }

    /// Whether comfort noise crosses between telephony member `id` of `room` and members
    /// without it from now on ([`crate::leg::RtpConfig::cn_transcode`]): a re-offer's codec
    /// flags can ask for it in an answered call.
    pub fn set_cn_transcode(&mut self, room: &str, id: &str, on: bool) -> Result<(), JoinError> {
        self.change_leg(room, id, |leg| {
            let leg = leg
                .as_rtp_mut()
                .ok_or_else(|| JoinError::wrong_leg(id, LegKind::Telephony))?;
            leg.set_cn_transcode(on);
            Ok((None, ()))
        })?;
        Ok(())
    }

    /// A new offer from a WebRTC member's peer in its session (a re-INVITE through the ng
    /// protocol: hold, an ICE restart, a session refresh; [`WebRtcLeg::take_offer`]): our
    /// answer. The member's role in its room follows the new directions; after an ICE restart
    /// its new username reaches it.
    ///
    /// [`WebRtcLeg::take_offer`]: crate::leg::WebRtcLeg::take_offer
    pub fn update_webrtc(
        &mut self,
        now: Instant,
        room: &str,
        id: &str,
        offer: &Offer,
    ) -> Result<String, JoinError> {
        let (slot, member, (answer, restarted)) = self.change_leg(room, id, |leg| {
            let leg = leg
                .as_webrtc_mut()
                .ok_or_else(|| JoinError::wrong_leg(id, LegKind::WebRtc))?;
            let restarted = leg.take_offer(offer, now)?;
            let media = leg.media();
            let role = MemberRole {
                publishes: media.iter().any(|m| m.peer_sends),
                subscribes: media.iter().any(|m| m.peer_receives),
            };
            Ok((Some(role), (leg.answer_sdp().to_owned(), restarted)))
        })?;
        if let Some(local) = restarted {
            self.own_ufrag(slot, member, &local.ufrag);
        }
        Ok(answer)
    }

    /// Takes back the new offer of ours member `id` of `room` waits to answer (a telephony or
    /// WebRTC leg's), the re-INVITE it was made for refused at the other side; `false` if
    /// there is no such member.
    pub fn withdraw_offer(&mut self, room: &str, id: &str) -> bool {
        self.on_leg(room, id, |leg| {
            if let Some(l) = leg.as_rtp_mut() {
                l.withdraw_offer();
            } else if let Some(l) = leg.as_webrtc_mut() {
                l.withdraw_offer();
            }
            Ok(())
        })
        .is_ok()
    }

    /// A new offer of ours to a WebRTC member's peer in its session, with the sections it
    /// has (the other side of a re-INVITE through the ng protocol); its answer comes through
    /// [`Shard::answer_reoffer`].
    pub fn reoffer_webrtc(&mut self, room: &str, id: &str) -> Result<String, JoinError> {
        self.on_leg(room, id, |leg| {
            let leg = leg
                .as_webrtc_mut()
                .ok_or_else(|| JoinError::wrong_leg(id, LegKind::WebRtc))?;
            Ok(leg.reoffer(&[])?.1)
        })
    }

    /// A new offer of ours to a telephony member's phone, in the call (the other side of a
    /// re-INVITE); its answer comes through [`Shard::update_rtp`] or [`Shard::answer_rtp`].
    pub fn reoffer_rtp(&mut self, room: &str, id: &str) -> Result<String, JoinError> {
        self.on_leg(room, id, |leg| {
            let leg = leg
                .as_rtp_mut()
                .ok_or_else(|| JoinError::wrong_leg(id, LegKind::Telephony))?;
            Ok(leg.make_offer()?.to_owned())
        })
    }

    /// Runs `f` on the leg of member `id` of `room` and sends what the leg made; Err when there
    /// is no such member, or `f`'s. (What changes what the leg negotiated goes through
    /// [`Shard::change_leg`] instead.)
    fn on_leg<R>(
        &mut self,
        room: &str,
        id: &str,
        f: impl FnOnce(&mut Leg) -> Result<R, JoinError>,
    ) -> Result<R, JoinError> {
        let missing = || JoinError::no_member(room, id);
        let (slot, member) = self.find(room, id).ok_or_else(missing)?;
        let Shard { rooms, out, .. } = self;
        let s = rooms[slot].as_mut().ok_or_else(missing)?;
        let r = s.room.with_leg(member, out, f);
        self.dispatch(slot);
        r.ok_or_else(missing)?
    }

    /// Gives a telephony member what it `kept` on another node (a call taken over): the keys
    /// of ours its crypto lines carry, its DTLS-SRTP keys, its SRTP streams' marks
    /// ([`crate::leg::RtpLeg::restore_keys`], [`crate::leg::RtpLeg::resume_dtls`],
    /// [`crate::leg::RtpLeg::resume_srtp`]).
    pub fn restore_rtp(
        &mut self,
        now: Instant,
        room: &str,
        id: &str,
        kept: &crate::leg::Resume,
    ) -> Result<(), JoinError> {
        self.on_leg(room, id, |leg| {
            let leg = leg
                .as_rtp_mut()
                .ok_or_else(|| JoinError::wrong_leg(id, LegKind::Telephony))?;
            leg.restore_keys(&kept.crypto)?;
            if let Some(d) = &kept.dtls {
                leg.resume_dtls(now, d)?;
            }
            Ok(leg.resume_srtp(&kept.srtp)?)
        })
    }

    /// Whether `room` has a place for `who` (its limits), or [`JoinError::RoomFull`].
    fn admit_member(&self, room: &str, who: &Who) -> Result<(), JoinError> {
        let members = self
            .room_index
            .get(room)
            .and_then(|&s| self.rooms[s].as_ref())
            .map_or(0, |s| s.room.participants() + s.room.piped_viewers());
        let cap = self.config.limits.cap_for(who);
        if members >= cap {
            return Err(JoinError::RoomFull {
                members,
                reserved: who.anonymous && cap < self.config.limits.members,
            });
        }
        Ok(())
    }

    /// The slot of `room`, made (and its start told) if it does not exist.
    fn room_slot(&mut self, room: &str) -> usize {
        match self.room_index.get(room) {
            Some(&s) => s,
            None => self.make_room(room, None),
        }
    }

    /// Makes `room`: the signaling's (its start told), or a replica of worker `replica_of`'s.
    fn make_room(&mut self, room: &str, replica_of: Option<usize>) -> usize {
        let room_gen = self.next_gen;
        self.next_gen += 1;
        let mut made = Room::with_rtcp(self.config.rtcp.clone())
            .with_codecs(self.config.codecs.clone())
            .tagged(room_gen);
        made.set_mixing(self.mixing.get(room).copied());
        let s = RoomSlot {
            name: room.to_owned(),
            room_gen,
            room: made,
            deadline: None,
            replica_of,
        };
        let slot = match self.rooms.iter().position(Option::is_none) {
            Some(i) => {
                self.rooms[i] = Some(s);
                i
            }
            None => {
                self.rooms.push(Some(s));
                self.rooms.len() - 1
            }
        };
        self.room_index.insert(room.to_owned(), slot);
        self.tally.rooms += u64::from(replica_of.is_none());
        if replica_of.is_none() {
            self.queue
                .push_back(queued_event(Event::Lifecycle(Lifecycle::RoomStarted {
                    room: room.to_owned(),
                })));
        }
        slot
    }

    /// Makes a member of `room` (made if it does not exist) with `leg`: its id.
    fn add_member(&mut self, now: Instant, room: &str, leg: Leg, j: Joining<'_>) -> String {
        let Joining {
            kind,
            role,
            ufrags,
            who,
        } = j;
        let slot = self.room_slot(room);
        let s = self.rooms[slot]
            .as_mut()
            .expect("the slot was just found or made");
        let ports = leg.local_ports();
        // A telephony leg is keyed (or plain) from its start: connected at once, as the API
        // already says; a WebRTC leg when its DTLS-SRTP handshake completes.
        let connected = leg.as_rtp().is_some();
        let leg_name = leg.kind_name();
        let id = random_id();
        let session = Session {
            id: id.clone(),
            name: who.name.clone(),
            kind,
            ufrags: ufrags.clone(),
            addrs: Vec::new(),
            ports: ports.clone(),
            profile: None,
            connected,
            closing: None,
            created: now,
            events: false,
            publishing: false,
            kept: false,
        };
        let member = self
            .tally
            .track(&mut s.room, |r| r.add(leg, role, session, now));
        // Whatever the new leg has to send already.
        s.room.with_leg(member, &mut self.out, |_| ());
        let key = MemberKey {
            slot,
            room_gen: s.room_gen,
            member,
        };
        self.queue
            .push_back(queued_event(Event::Lifecycle(Lifecycle::Joined {
                room: room.to_owned(),
                id: id.clone(),
                name: who.name.clone(),
                kind,
                leg: leg_name,
            })));
        if connected {
            Self::note_connected(&mut self.queue, s, member);
        }
        for u in ufrags {
            self.by_ufrag.insert(u.clone(), key);
            self.queue.push_back(queued_event(Event::UfragOwned(u)));
        }
        for p in ports {
            self.by_port.insert(p, key);
        }
        self.ids.insert(id.clone(), (slot, member));
        tracing::info!(room = %s.name, session = %id, kind = kind.name(), "session started");
        if role.publishes {
            self.tell_pipes_joined(slot, member);
        }
        self.settle(slot);
        self.remove_closed();
        // Those who listen for new offers may lack a section for the newcomer's media.
        self.renegotiate(slot);
        id
    }

    /// Makes a new offer for every member of the room in `slot` that listens for them, lacks
    /// receive sections for the room's senders, and has no offer of ours waiting: queued as
    /// [`Event::Offer`].
    fn renegotiate(&mut self, slot: usize) {
        let Shard { rooms, out, .. } = self;
        let Some(s) = rooms.get_mut(slot).and_then(Option::as_mut) else {
            return;
        };
        let listening: Vec<MemberId> = s
            .room
            .members()
            .filter(|&m| {
                s.room
                    .session(m)
                    .is_some_and(|x| x.events && x.closing.is_none())
            })
            .collect();
        for member in listening {
            let needs = s.room.receive_needs(member);
            let Some(at) = s.room.at(member).filter(|_| !needs.is_empty()) else {
                continue;
            };
            let offer = s.room.with_leg(at, out, |leg| {
                let leg = leg.as_webrtc_mut()?;
                if leg.reoffer_pending().is_some() || leg.awaiting_answer() || !leg.is_connected() {
                    return None;
                }
                Some(leg.reoffer(&needs))
            });
            match offer.flatten() {
                Some(Ok((revision, sdp))) => {
                    if let Some(session) = s.room.session(member) {
                        tracing::info!(room = %s.name, revision, ?needs, "new offer to a member");
                        self.queue.push_back(queued_event(Event::Offer {
                            id: session.id.clone(),
                            revision,
                            sdp,
                        }));
                    }
                }
                Some(Err(e)) => tracing::debug!(room = %s.name, error = %e, "no new offer"),
                None => {}
            }
        }
        self.dispatch(slot);
    }

    /// Member `id` of `room` listens for new offers of ours from now on (its events channel
    /// opened): it gets one at once if it lacks receive sections. `false` if there is no such
    /// WebRTC member.
    pub fn listen(&mut self, room: &str, id: &str) -> bool {
        let Some((slot, member)) = self.find(room, id) else {
            return false;
        };
        let Some(s) = self.rooms[slot].as_mut() else {
            return false;
        };
        if s.room.leg(member.id()).and_then(Leg::as_webrtc).is_none() {
            return false;
        }
        if let Some(session) = s.room.session_mut(member) {
            session.events = true;
        }
        self.renegotiate(slot);
        true
    }

    /// A member's answer to our new offer (revision `revision`, if it says): the sections it
    /// took become receive slots, and streams waiting for one take them. Then, if it still
    /// lacks sections (more senders came), another offer. The number of sections added.
    pub fn answer_reoffer(
        &mut self,
        room: &str,
        id: &str,
        answer: &Offer,
        revision: Option<u64>,
    ) -> Result<usize, JoinError> {
        let (slot, _, n) = self.change_leg(room, id, |leg| {
            let leg = leg
                .as_webrtc_mut()
                .ok_or_else(|| JoinError::wrong_leg(id, LegKind::WebRtc))?;
            let n = leg
                .accept_reanswer(answer, revision)
                .map_err(|_| JoinError::StaleAnswer {
                    pending: leg.reoffer_pending(),
                })?;
            Ok((None, n))
        })?;
        self.renegotiate(slot);
        Ok(n)
    }

    fn find(&self, room: &str, id: &str) -> Option<(usize, MemberAt)> {
        let &(slot, member) = self.ids.get(id)?;
        self.rooms[slot]
            .as_ref()
            .filter(|s| s.name == room)
            .map(|_| (slot, member))
    }

    /// What admission control sheds here from now on ([`crate::admission`]): with
    /// [`Shed::Handshakes`] or more, a DTLS record for a member whose handshake has not started
    /// is dropped (`overload`) instead of starting one. Media is never shed.
    pub fn set_shed(&mut self, shed: Shed) {
        self.shed_handshakes = shed >= Shed::Handshakes;
    }

    /// Sets `room` to mix its audio (N−1: each member hears the sum of the others) or to relay
    /// and transcode it (`None`): at once if it exists, and whenever it is made again.
    pub fn set_mixing(&mut self, room: &str, mix: Option<MixSettings>) -> Result<(), ControlError> {
        match mix {
            Some(settings) => {
                let kept = self.mixing.len();
                if kept >= self.config.limits.settings && !self.mixing.contains_key(room) {
                    return Err(ControlError::TooManySettings { kept });
                }
                self.mixing.insert(room.to_owned(), settings);
            }
            None => {
                self.mixing.remove(room);
            }
        }
        if let Some(&slot) = self.room_index.get(room) {
            if let Some(s) = self.rooms[slot].as_mut() {
                // Its first tick comes with its first audio (the wake routing sets).
                s.room.set_mixing(mix);
            }
        }
        Ok(())
    }

    /// Ends a participant with close_notify (counted as `deleted`); `false` if there is none
    /// by that id in `room`.
    pub fn leave(&mut self, now: Instant, room: &str, id: &str) -> bool {
        let Some((slot, member)) = self.find(room, id) else {
            return false;
        };
        self.close_member(now, slot, member, EndReason::Deleted);
        true
    }

    /// ICE restart with the peer's new credentials: our new ones, or `None` for an unknown
    /// participant (or one that is not a WebRTC leg).
    pub fn ice_restart(
        &mut self,
        now: Instant,
        room: &str,
        id: &str,
        remote: Credentials,
    ) -> Option<Credentials> {
        let (slot, member) = self.find(room, id)?;
        let Shard { rooms, out, .. } = self;
        let s = rooms[slot].as_mut()?;
        let local = s
            .room
            .with_leg(member, out, |leg| {
                leg.as_webrtc_mut().map(|l| l.restart_ice(remote, now))
            })
            .flatten();
        self.dispatch(slot);
        let local = local?;
        self.own_ufrag(slot, member, &local.ufrag)?;
        Some(local)
    }

    /// Checks naming `ufrag` (a member's new ICE credentials) reach member `member` of the
    /// room in `slot` from now on, here and (through [`Event::UfragOwned`]) at other workers.
    fn own_ufrag(&mut self, slot: usize, member: MemberAt, ufrag: &str) -> Option<()> {
        let s = self.rooms[slot].as_mut()?;
        s.room.session_mut(member)?.ufrags.push(ufrag.to_owned());
        let key = MemberKey {
            slot,
            room_gen: s.room_gen,
            member,
        };
        self.by_ufrag.insert(ufrag.to_owned(), key);
        self.queue
            .push_back(queued_event(Event::UfragOwned(ufrag.to_owned())));
        Some(())
    }

    /// Sets which simulcast layer member `id` of `room` is sent of `publisher`'s (by its id;
    /// every publisher's when `None`): the layer with rid `rid`, or the estimate's choice with
    /// `None`. Err: the reason (no such member or publisher, or no such layer).
    pub fn set_layer(
        &mut self,
        now: Instant,
        room: &str,
        id: &str,
        publisher: Option<&str>,
        rid: Option<&str>,
    ) -> Result<(), ControlError> {
        let missing = |id: &str| ControlError::NoParticipant {
            room: room.to_owned(),
            id: id.to_owned(),
        };
        let (slot, member) = self.find(room, id).ok_or_else(|| missing(id))?;
        let publisher = match publisher {
            None => None,
            Some(p) => Some(
                self.find(room, p)
                    .map(|(_, m)| m.id())
                    .ok_or_else(|| missing(p))?,
            ),
        };
        let Shard { rooms, out, .. } = self;
        let s = rooms[slot].as_mut().ok_or_else(|| missing(id))?;
        let found = s.room.set_layer(member.id(), publisher, rid, now, out);
        self.dispatch(slot);
        if found {
            Ok(())
        } else {
            Err(ControlError::NoLayer {
                rid: rid.map(str::to_owned),
            })
        }
    }

    /// Sends `msg` (the server's own) to participant `to` of `room`, or to every participant
    /// of it with data channels: how many were sent it (0 when none has data channels).
    pub fn send_data(
        &mut self,
        now: Instant,
        room: &str,
        to: Option<&str>,
        msg: &DataMessage,
    ) -> Result<usize, ControlError> {
        let missing = |id: &str| ControlError::NoParticipant {
            room: room.to_owned(),
            id: id.to_owned(),
        };
        let (slot, at) = match to {
            Some(id) => {
                let (slot, at) = self.find(room, id).ok_or_else(|| missing(id))?;
                (slot, Some(at))
            }
            None => match self.room_index.get(room) {
                Some(&slot) => (slot, None),
                None => return Ok(0),
            },
        };
        let Shard { rooms, out, .. } = self;
        let Some(s) = rooms[slot].as_mut() else {
            return Ok(0);
        };
        let sent = s.room.send_data(at, msg, now, out);
        if at.is_none() {
            // The room's members on other workers too.
            self.pipe_data(slot, Arc::from([msg.clone()]), None);
        }
        self.settle(slot);
        Ok(sent)
    }

    /// Sends an RTCP compound of the gateway's own to a member: protected with its keys
    /// (SRTCP) in the next batch's protect call. `false` if there is no such member or it
    /// cannot be sent to yet (not keyed, no selected address).
    pub fn send_rtcp(&mut self, _now: Instant, room: &str, id: &str, rtcp: &[u8]) -> bool {
        let Some((slot, member)) = self.find(room, id) else {
            return false;
        };
        let Shard { rooms, out, .. } = self;
        let Some(s) = rooms[slot].as_mut() else {
            return false;
        };
        let sent = s.room.send_rtcp(member, rtcp, out);
        self.dispatch(slot);
        sent
    }

    /// Stops admitting and closes every member with close_notify (counted as `shutdown`), but
    /// a member kept for another node quietly (`handed_over`).
    pub fn drain(&mut self, now: Instant) {
        self.draining = true;
        let all: Vec<(usize, MemberAt)> = self
            .rooms
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.as_ref().map(|s| (i, s)))
            .flat_map(|(i, s)| {
                s.room
                    .members()
                    .filter_map(move |m| Some((i, s.room.at(m)?)))
            })
            .collect();
        for (slot, member) in all {
            let kept = self.rooms[slot]
                .as_mut()
                .and_then(|s| s.room.session_mut(member))
                .is_some_and(|s| s.kept);
            let why = if kept {
                EndReason::HandedOver
            } else {
                EndReason::Shutdown
            };
            self.close_member(now, slot, member, why);
        }
    }

    /// Marks member `id` of `room` as kept for another node ([`Session::kept`]); `false` if
    /// there is none by that id.
    pub fn keep_quiet(&mut self, room: &str, id: &str) -> bool {
        let Some((slot, member)) = self.find(room, id) else {
            return false;
        };
        let Some(s) = self.rooms[slot]
            .as_mut()
            .and_then(|s| s.room.session_mut(member))
        else {
            return false;
        };
        s.kept = true;
        true
    }

    /// Sets what of member `id` of `room`'s media its room passes on ([`Gate`]); `false` if
    /// there is no member by that id.
    ///
    /// [`Gate`]: crate::room::Gate
    pub fn set_gate(&mut self, room: &str, id: &str, gate: crate::room::Gate) -> bool {
        let Some((slot, member)) = self.find(room, id) else {
            return false;
        };
        self.rooms[slot]
            .as_mut()
            .is_some_and(|s| s.room.set_gate(member.id(), gate))
    }

    /// Makes member `id` of `room` a listener of member `publisher` alone (an ng
    /// subscription): it receives what `publisher` publishes and nothing else, and what it
    /// sends goes nowhere. `false` if either is not in the room.
    pub fn listen_to(&mut self, room: &str, id: &str, publisher: &str) -> bool {
        let (Some((slot, member)), Some((pslot, source))) =
            (self.find(room, id), self.find(room, publisher))
        else {
            return false;
        };
        let Shard { rooms, out, .. } = self;
        let Some(s) = rooms[slot].as_mut().filter(|_| slot == pslot) else {
            return false;
        };
        let listening = s.room.set_role(member.id(), MemberRole::SUBSCRIBER)
            && s.room.hear_only(member.id(), source.id());
        // It expects nothing from its peer: no media timeout ends it; it ends with its call.
        let leg = |leg: &mut Leg| leg.as_rtp_mut().map(RtpLeg::listen_only);
        listening && s.room.with_leg(member, out, leg).is_some()
    }

    /// Changes what of member `id` of `room`'s media its room passes on with `change`; the
    /// gate it has now, `None` if there is no member by that id.
    pub fn change_gate(
        &mut self,
        room: &str,
        id: &str,
        change: impl FnOnce(&mut crate::room::Gate),
    ) -> Option<crate::room::Gate> {
        let (slot, member) = self.find(room, id)?;
        let s = self.rooms[slot].as_mut()?;
        let mut gate = s.room.gate(member.id())?;
        change(&mut gate);
        s.room.set_gate(member.id(), gate).then_some(gate)
    }

    /// Records what member `id` of `room` sends under `key` ([`Event::Recorded`]), or stops
    /// with `None` ([`Room::set_recording`]); `false` if there is no member by that id.
    pub fn set_recording(&mut self, room: &str, id: &str, key: Option<u64>) -> bool {
        let Some((slot, member)) = self.find(room, id) else {
            return false;
        };
        self.rooms[slot]
            .as_mut()
            .is_some_and(|s| s.room.set_recording(member.id(), key))
    }

    /// Queues `digit` to be played as member `id` of `room` sends its audio, as if it had sent
    /// it ([`Room::play_dtmf`]).
    pub fn play_dtmf(
        &mut self,
        room: &str,
        id: &str,
        digit: crate::room::DtmfDigit,
    ) -> Result<(), crate::room::PlayError> {
        let (_, member, r) = self.play_target(room, id)?;
        r.play_dtmf(member, digit)
    }

    /// Member `id` of `room`, with its room and the room's slot, for a digit or media to play.
    fn play_target(
        &mut self,
        room: &str,
        id: &str,
    ) -> Result<(usize, crate::room::MemberId, &mut Room), crate::room::PlayError> {
        let (slot, member) = self
            .find(room, id)
            .ok_or(crate::room::PlayError::NoMember)?;
        let s = self.rooms[slot]
            .as_mut()
            .ok_or(crate::room::PlayError::NoMember)?;
        Ok((slot, member.id(), &mut s.room))
    }

    /// Plays `media` to member `id` of `room` from `now` ([`Room::play_media`]): how long one
    /// play of it lasts.
    pub fn play_media(
        &mut self,
        now: Instant,
        room: &str,
        id: &str,
        media: crate::room::PlayMedia,
    ) -> Result<std::time::Duration, crate::room::PlayError> {
        let (slot, member, r) = self.play_target(room, id)?;
        let length = r.play_media(member, media, now)?;
        // Its first packet is due now: the room's deadline moved.
        self.settle(slot);
        Ok(length)
    }

    /// Stops what is played to member `id` of `room` ([`Room::stop_media`]): `None` if there
    /// is no such member, `Some(None)` if nothing was played to it.
    pub fn stop_media(&mut self, room: &str, id: &str) -> Option<Option<u64>> {
        let (slot, member) = self.find(room, id)?;
        let s = self.rooms[slot].as_mut()?;
        let frames = s.room.stop_media(member.id());
        self.settle(slot);
        Some(frames)
    }

    /// Ends member `id` of `room` without a word to its peer, its call handed to another node
    /// (counted as `handed_over`); `false` if there is none by that id.
    pub fn hand_off(&mut self, now: Instant, room: &str, id: &str) -> bool {
        let Some((slot, member)) = self.find(room, id) else {
            return false;
        };
        self.close_member(now, slot, member, EndReason::HandedOver);
        true
    }

    /// Closes a member with close_notify, counts why, and removes it.
    fn close_member(&mut self, now: Instant, slot: usize, member: MemberAt, why: EndReason) {
        let Shard {
            rooms,
            out,
            counters,
            ..
        } = self;
        let Some(s) = rooms[slot].as_mut() else {
            return;
        };
        let mirror = s
            .room
            .leg(member.id())
            .is_some_and(|l| l.as_pipe().is_some());
        if let Some(session) = s.room.session_mut(member) {
            if session.closing.is_none() {
                session.closing = Some(why);
                // A mirror is no participant: its end is no session's.
                if !mirror {
                    counters.ended[why] += 1;
                }
            }
        }
        if why == EndReason::HandedOver {
            s.room.with_leg(member, out, |leg| leg.close_quietly(now));
        } else {
            s.room.with_leg(member, out, |leg| leg.close(now));
        }
        self.settle(slot);
        self.to_remove.push((slot, member));
        self.remove_closed();
    }

    /// The counters: every member's (those that left included), the drops no member owns, the
    /// sessions, and the gauges.
    pub fn counters(&self) -> ShardCounters {
        let mut c = self.counters;
        self.census().write_into(&mut c);
        for s in self.rooms.iter().flatten() {
            c.add_room(&s.room);
            let (streams, bytes) = s.room.retransmit_buffers();
            c.retransmit_streams += streams;
            c.retransmit_bytes += bytes;
            c.connected += s
                .room
                .members()
                .filter(|&m| s.room.leg(m).is_some_and(|l| l.as_pipe().is_none()))
                .filter_map(|m| s.room.session(m))
                .filter(|m| m.connected && m.closing.is_none())
                .count() as u64;
        }
        c
    }

    /// Members now.
    pub fn members(&self) -> usize {
        self.ids.len()
    }

    /// Participants, rooms, members by kind, sessions ended and handshakes now, as
    /// [`Shard::counters`] counts them, from the shard's tally (no walk over rooms or
    /// members): cheap enough to take after every join and leave.
    pub fn census(&self) -> Census {
        let Tally { rooms, by_leg } = self.tally;
        let c = Census {
            // Participants: every member but the mirrored publishers.
            members: by_leg.iter().sum::<u64>() - by_leg[crate::leg::LegKind::Pipe.index()],
            rooms,
            by_leg,
            ended: self.counters.ended,
            handshakes: (self.counters.handshakes_ok, self.counters.handshakes_failed),
        };
        #[cfg(debug_assertions)]
        self.check_tally();
        c
    }

    /// Debug builds (every test) check the tally against a walk of the rooms whenever it is
    /// read.
    #[cfg(debug_assertions)]
    fn check_tally(&self) {
        let mut walked = Tally::default();
        for s in self.rooms.iter().flatten() {
            walked.rooms += u64::from(s.replica_of.is_none());
            walked.moved(Default::default(), s.room.members_by_kind());
        }
        assert_eq!(
            (walked.rooms, walked.by_leg),
            (self.tally.rooms, self.tally.by_leg),
            "the shard's tally of rooms and members"
        );
    }

    /// Routes held (ufrags, addresses): zero once everybody left.
    pub fn route_sizes(&self) -> (usize, usize) {
        (self.by_ufrag.len(), self.by_addr.len())
    }

    /// The rooms (all, or the one named), as the API shows them.
    pub fn snapshot(&self, now: Instant, only: Option<&str>) -> Vec<RoomSnapshot> {
        let mut out = Vec::new();
        for s in self.rooms.iter().flatten() {
            if only.is_some_and(|n| n != s.name) {
                continue;
            }
            let mut participants = Vec::new();
            for m in s.room.members() {
                let (Some(leg), Some(session)) = (s.room.leg(m), s.room.session(m)) else {
                    continue;
                };
                if leg.as_pipe().is_some() {
                    // A mirror of a publisher whose home is another worker: no participant.
                    continue;
                }
                let rtcp = s.room.rtcp_figures(m).unwrap_or_default();
                let mut p = participant_snapshot(now, leg, session, rtcp);
                p.bandwidth = s.room.bandwidth(m);
                p.gate = s.room.gate(m).unwrap_or_default();
                // A publisher's id as the signaling knows it.
                let id_of = |who| {
                    s.room
                        .session(who)
                        .map(|p| p.id.clone())
                        .unwrap_or_default()
                };
                let (sent, mut received) = s.room.layers(m);
                for r in &mut received {
                    r.publisher_id = id_of(r.publisher);
                }
                p.layers_sent = sent;
                p.layers_received = received;
                p.receiving = s.room.receiving(m);
                for r in &mut p.receiving {
                    r.publisher_id = id_of(r.publisher);
                }
                participants.push(p);
            }
            let c: Counters = s.room.counters();
            out.push(RoomSnapshot {
                name: s.name.clone(),
                routed_in: c.routed,
                forwarded: c.forwarded,
                transcoded: c.transcoded,
                mixing: s.room.is_mixing(),
                mix: s.room.mixing().map(|m| MixSnapshot {
                    speakers: m.settings().speakers,
                    inputs: m.inputs(),
                    talkers: m.talkers(),
                    encoders: m.encoders(),
                }),
                participants,
            });
        }
        out
    }

    /// A member's counters, by its room and id (for tests and the API).
    pub fn member_counters(&self, room: &str, id: &str) -> Option<Counters> {
        let (slot, member) = self.find(room, id)?;
        let s = self.rooms[slot].as_ref()?;
        s.room.member_counters(member.id()).copied()
    }

    /// The marks of members `ids` that are here (a telephony leg's SRTP streams and ICE, a
    /// connected WebRTC leg's keys and streams), by id: what a node taking their calls over
    /// needs besides the requests that made them. Members with none are left out.
    pub fn leg_marks(&self, ids: &[String]) -> Vec<(String, crate::leg::LegMarks)> {
        ids.iter()
            .filter_map(|id| {
                let &(slot, member) = self.ids.get(id)?;
                let leg = self.rooms[slot].as_ref()?.room.leg(member.id())?;
                let marks = match (leg.as_rtp(), leg.as_webrtc()) {
                    (Some(rtp), _) => rtp.marks(),
                    (None, Some(webrtc)) => {
                        let (m, srtp) = webrtc.marks()?;
                        crate::leg::LegMarks {
                            srtp,
                            ice: None,
                            webrtc: Some(m),
                            dtls: None,
                        }
                    }
                    (None, None) => return None,
                };
                (!marks.is_empty()).then(|| (id.clone(), marks))
            })
            .collect()
    }

    /// WebRTC member `id` of `room`, made again here for a call taken over from another node,
    /// takes that node's leg's keys, streams, session and SSRCs
    /// ([`crate::leg::WebRtcLeg::resume`]): its peer's media goes on once it restarted ICE
    /// towards this node.
    pub fn resume_webrtc(
        &mut self,
        now: Instant,
        room: &str,
        id: &str,
        marks: &crate::leg::WebRtcMarks,
        srtp: &[crate::leg::SrtpMark],
    ) -> Result<(), JoinError> {
        let (slot, member, local) = self.change_leg(room, id, |leg| {
            let local = leg
                .as_webrtc_mut()
                .ok_or_else(|| JoinError::wrong_leg(id, LegKind::WebRtc))?
                .resume(marks, srtp, now)?;
            Ok((None, local))
        })?;
        self.own_ufrag(slot, member, &local.ufrag);
        Ok(())
    }

    /// The names of the rooms here (a replica's too: the room is on this node either way).
    pub fn room_names(&self) -> impl Iterator<Item = &str> + '_ {
        self.room_index.keys().map(String::as_str)
    }

    /// A room, by name (for tests: its slots, mapped SSRCs and members).
    pub fn room(&self, name: &str) -> Option<&Room> {
        let slot = *self.room_index.get(name)?;
        self.rooms[slot].as_ref().map(|s| &s.room)
    }

    /// A member's id in its room, by the id the signaling knows.
    pub fn member_id(&self, id: &str) -> Option<MemberId> {
        self.ids.get(id).map(|(_, m)| m.id())
    }
}

fn participant_snapshot(
    now: Instant,
    leg: &Leg,
    meta: &Session,
    rtcp: RtcpFigures,
) -> ParticipantSnapshot {
    let c = leg.counters();
    ParticipantSnapshot {
        id: meta.id.clone(),
        name: meta.name.clone(),
        kind: meta.kind,
        leg: leg.kind_name(),
        state: match (meta.closing, meta.connected) {
            (Some(why), _) => why.name().to_owned(),
            (None, true) => "connected".into(),
            (None, false) => "new".into(),
        },
        srtp_profile: leg.srtp_profile().map(|p| p.to_string()),
        packets_in: c.packets_in,
        bytes_in: c.bytes_in,
        packets_out: c.packets_out,
        bytes_out: c.bytes_out,
        auth_failures: c.drops[DropReason::AuthFailed],
        replays: c.drops[DropReason::Replayed],
        drops: c
            .drops
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(r, n)| (r.name(), n))
            .collect(),
        handshake_ms: leg
            .as_webrtc()
            .and_then(WebRtcLeg::handshake_time)
            .map(|d| d.as_secs_f64() * 1e3),
        age_secs: now.saturating_duration_since(meta.created).as_secs_f64(),
        rtcp,
        feedback: c.feedback,
        bandwidth: None,
        layers_sent: Vec::new(),
        layers_received: Vec::new(),
        receiving: Vec::new(),
        path: leg.media_destination().map(|remote| MediaPath {
            remote,
            transport: "udp",
        }),
        gate: crate::room::Gate::default(),
    }
}
