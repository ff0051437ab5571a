//! A pipe: a publisher of another shard's room, mirrored in this shard's copy of the room
//! ([`PipeLeg`]). A room whose viewers are spread over workers lives on one worker (its *home*,
//! where its publishers are), and each other worker that holds viewers of it keeps a *replica*:
//! a room of the same name whose publishers are mirrors. The home hands each packet a
//! publisher sends, unprotected and once per replica, to the replica's worker; the mirror takes
//! it as a plain-RTP member would, and the replica routes it to its own viewers with their own
//! keys. A mirror's feedback about the stream (keyframe requests, NACKs for what it never
//! received) goes the other way, to the home's publisher.
//!
//! The leg has no transport and no keys: what it "sends" is RTCP, which the shard hands to the
//! home's worker (its target is [`Via::Pipe`]); nothing is ever sent to it as media (it only
//! publishes). Its counters are the pipe's (what came in through it), kept apart from the
//! participants' ([`LegKind::Pipe`]).

use std::collections::VecDeque;
use std::net::{Ipv4Addr, SocketAddr};

use crate::counters::Counters;
use crate::leg::{CloseReason, CopyTarget, HeaderExt, LegEvent, LegOutput, NegotiatedMedia, Via};
use crate::room::MemberAt;

/// A publisher in its home room, as another shard names it: the home's worker, the room's
/// place and generation there, and the member. Made by the home's shard
/// ([`crate::shard::Shard::attach_pipe`]); opaque elsewhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct PipeKey {
    pub(crate) home: usize,
    pub(crate) slot: usize,
    pub(crate) room_gen: u64,
    pub(crate) member: MemberAt,
}

impl PipeKey {
    /// The home's worker.
    pub fn home(&self) -> usize {
        self.home
    }

    /// The same publisher, its home's worker named `home` (how another node names the worker
    /// it is on: see `secrelay_gateway`'s node pipes).
    pub fn with_home(self, home: usize) -> PipeKey {
        PipeKey { home, ..self }
    }
}

/// Bytes in a [`PipeKey`]'s encoded form ([`PipeKey::encode`]).
pub const PIPE_KEY_LEN: usize = 22;

impl PipeKey {
    /// The key in 22 bytes (network order: the home's worker in 16 bits, the room's place,
    /// its generation, the member's place and id), as a datagram between nodes carries it.
    pub fn encode(&self) -> [u8; PIPE_KEY_LEN] {
        let mut b = [0u8; PIPE_KEY_LEN];
        let home = u16::try_from(self.home).unwrap_or(u16::MAX);
        let slot = u32::try_from(self.slot).unwrap_or(u32::MAX);
        b[0..2].copy_from_slice(&home.to_be_bytes());
        b[2..6].copy_from_slice(&slot.to_be_bytes());
        b[6..14].copy_from_slice(&self.room_gen.to_be_bytes());
        b[14..18].copy_from_slice(&self.member.ix.to_be_bytes());
        b[18..22].copy_from_slice(&self.member.id.0.to_be_bytes());
        b
    }

    /// A key from its encoded form (any bytes make one; a key that names nothing is found
    /// nowhere).
    pub fn decode(b: &[u8; PIPE_KEY_LEN]) -> PipeKey {
        let u32_at = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let mut gen = [0u8; 8];
        gen.copy_from_slice(&b[6..14]);
        PipeKey {
            home: usize::from(u16::from_be_bytes([b[0], b[1]])),
            slot: u32_at(2) as usize,
            room_gen: u64::from_be_bytes(gen),
            member: MemberAt {
                ix: u32_at(14),
                id: crate::room::MemberId(u32_at(18)),
            },
        }
    }
}

/// A publisher of the home room as a replica mirrors it: who it is and what it negotiated.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MirrorSpec {
    /// The publisher.
    pub key: PipeKey,
    /// Its id (what the replica's API shows as the publisher of what its viewers receive).
    pub id: String,
    /// Its identity, if any.
    pub name: Option<String>,
    /// Its media sections as it negotiated them at home.
    pub media: Vec<NegotiatedMedia>,
}

/// A mirrored publisher. See the [module documentation](self).
#[derive(Debug)]
pub struct PipeLeg {
    key: PipeKey,
    media: Vec<NegotiatedMedia>,
    counters: Counters,
    closed: Option<CloseReason>,
    events: VecDeque<LegEvent>,
}

/// A publisher's sections as its mirror has them: sending only, without transport-wide
/// congestion control.
fn mirrored(spec: &MirrorSpec) -> Vec<NegotiatedMedia> {
    spec.media
        .iter()
        .map(|m| {
            let mut m = m.clone();
            m.peer_receives = false;
            m.extmaps.retain(|(_, e)| *e != HeaderExt::TransportCc);
            m
        })
        .collect()
}

/// The address a mirror's RTCP is "sent" to: none (its target's [`Via::Pipe`] says where).
const NOWHERE: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0);

impl PipeLeg {
    /// A mirror of the publisher `spec` names. Its sections are the publisher's, sending only,
    /// without transport-wide congestion control (the home answers the publisher's transport;
    /// a replica sends it nothing to estimate).
    pub fn new(spec: &MirrorSpec) -> PipeLeg {
        PipeLeg {
            key: spec.key,
            media: mirrored(spec),
            counters: Counters::default(),
            closed: None,
            events: VecDeque::new(),
        }
    }

    /// Its publisher renegotiated: its sections are the publisher's as `spec` has them now.
    /// Whether they changed.
    pub fn set_media(&mut self, spec: &MirrorSpec) -> bool {
        let media = mirrored(spec);
        let changed = media != self.media;
        self.media = media;
        changed
    }

    /// The publisher it mirrors.
    pub fn key(&self) -> PipeKey {
        self.key
    }

    /// Its media sections.
    pub fn media(&self) -> &[NegotiatedMedia] {
        &self.media
    }

    /// Where its RTCP goes: the home, through the pipe.
    pub fn rtcp_target(&self) -> Option<CopyTarget> {
        self.closed.is_none().then_some(CopyTarget {
            destination: NOWHERE,
            via: Via::Pipe,
            protect: false,
        })
    }

    /// Why it ended, once it did.
    pub fn closed(&self) -> Option<CloseReason> {
        self.closed
    }

    /// The counters (what came in through the pipe).
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    pub(crate) fn counters_mut(&mut self) -> &mut Counters {
        &mut self.counters
    }

    /// Ends it (its publisher left the home room, or the replica closes).
    pub fn close(&mut self) {
        if self.closed.is_none() {
            self.closed = Some(CloseReason::Ended);
            self.events.push_back(LegEvent::Closed(CloseReason::Ended));
        }
    }

    /// Whether an event waits.
    pub fn has_output(&self) -> bool {
        !self.events.is_empty()
    }

    /// Its next event (it has no timers).
    pub fn poll_output(&mut self) -> Option<LegOutput<'_>> {
        self.events.pop_front().map(LegOutput::Event)
    }
}
