//! A room of participants, sans-IO: media from one member is unprotected with that member's
//! keys (by its [`Participant`]) and protected again for every other subscribed member with
//! that member's own keys (the K1/K2 scheme: no two members share SRTP keys, and the gateway
//! holds every key).
//!
//! Per receiver, each forwarded stream (source member, source SSRC) gets an SSRC of its own,
//! picked at random on its first packet, unique among that receiver's streams and stable for
//! the room's life; the payload type becomes the receiver's negotiated payload type for the
//! same codec (packets of a codec the receiver did not accept are dropped and counted).
//! Sequence numbers and timestamps pass unchanged: each source stream maps to its own SSRC.
//! RTCP is not forwarded (it is reported to the caller as [`Event::Rtcp`]).
//!
//! # Drive contract
//! After every input ([`Room::handle_datagram`], [`Room::handle_timeout`]), call
//! [`Room::poll_output`] until it returns [`RoomOutput::Timeout`] or `None`. Media is routed
//! inside `poll_output`; transmits and the other events come out tagged with their member.
//!
//! # Allocation
//! Routing a packet copies it into one reusable scratch buffer and rewrites it there for each
//! receiver; with the participants' buffer pools that keeps steady-state forwarding free of
//! allocation. A new (receiver, stream) pair allocates its map entry once.

use std::net::SocketAddr;
use std::time::Instant;

use crate::participant::{Event, Output, Participant};

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

/// Room-wide counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RoomCounters {
    /// Packets received from publishers and routed.
    pub routed_in: u64,
    /// Copies sent to receivers.
    pub forwarded: u64,
    /// Copies not sent: the receiver did not negotiate the codec (or the payload type was not
    /// negotiated by the sender).
    pub dropped_no_codec: u64,
    /// Copies not sent: the receiver was not connected yet, or refused the packet.
    pub dropped_not_ready: u64,
    /// Media from members that do not publish.
    pub dropped_not_publisher: u64,
}

/// What [`Room::poll_output`] hands back.
#[derive(Debug, Clone, Copy)]
pub enum RoomOutput<'a> {
    /// A member's output other than media (transmits, ICE/DTLS events, RTCP, closing).
    Member(MemberId, Output<'a>),
    /// Call [`Room::handle_timeout`] at (or after) this instant. Ends a drain.
    Timeout(Instant),
}

struct Member {
    id: MemberId,
    role: MemberRole,
    participant: Participant,
    /// (source member, source SSRC) → the SSRC this member sees.
    ssrc_map: Vec<(MemberId, u32, u32)>,
}

/// A room. See the [module documentation](self).
pub struct Room {
    members: Vec<Member>,
    next_id: u32,
    cursor: usize,
    now: Option<Instant>,
    scratch: Vec<u8>,
    counters: RoomCounters,
}

impl Default for Room {
    fn default() -> Self {
        Room::new()
    }
}

fn random_ssrc() -> u32 {
    let mut b = [0u8; 4];
    getrandom::fill(&mut b).expect("the OS random source works");
    u32::from_be_bytes(b)
}

impl Room {
    /// An empty room.
    pub fn new() -> Room {
        Room {
            members: Vec::new(),
            next_id: 1,
            cursor: 0,
            now: None,
            scratch: Vec::with_capacity(1500),
            counters: RoomCounters::default(),
        }
    }

    /// Adds a participant.
    pub fn add(&mut self, participant: Participant, role: MemberRole) -> MemberId {
        let id = MemberId(self.next_id);
        self.next_id += 1;
        self.members.push(Member {
            id,
            role,
            participant,
            ssrc_map: Vec::new(),
        });
        id
    }

    /// Removes a member, handing back its participant.
    pub fn remove(&mut self, id: MemberId) -> Option<Participant> {
        let i = self.members.iter().position(|m| m.id == id)?;
        let m = self.members.remove(i);
        for other in &mut self.members {
            other.ssrc_map.retain(|(src, _, _)| *src != id);
        }
        self.cursor = 0;
        Some(m.participant)
    }

    /// A member's participant.
    pub fn participant(&self, id: MemberId) -> Option<&Participant> {
        self.members
            .iter()
            .find(|m| m.id == id)
            .map(|m| &m.participant)
    }

    /// A member's participant, to change it (ICE restart, close).
    pub fn participant_mut(&mut self, id: MemberId) -> Option<&mut Participant> {
        self.members
            .iter_mut()
            .find(|m| m.id == id)
            .map(|m| &mut m.participant)
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

    /// The SSRC `receiver` sees for `source`'s stream `ssrc`, once one packet was forwarded.
    pub fn mapped_ssrc(&self, receiver: MemberId, source: MemberId, ssrc: u32) -> Option<u32> {
        let r = self.members.iter().find(|m| m.id == receiver)?;
        r.ssrc_map
            .iter()
            .find(|(s, x, _)| *s == source && *x == ssrc)
            .map(|e| e.2)
    }

    /// The counters.
    pub fn counters(&self) -> &RoomCounters {
        &self.counters
    }

    /// Hands a datagram to member `to` (the edge finds the member by address or ICE ufrag).
    /// Returns `false` when no such member exists.
    pub fn handle_datagram(
        &mut self,
        now: Instant,
        to: MemberId,
        from: SocketAddr,
        datagram: &[u8],
    ) -> bool {
        self.now = Some(now);
        match self.members.iter_mut().find(|m| m.id == to) {
            Some(m) => {
                m.participant.handle_datagram(now, from, datagram);
                true
            }
            None => false,
        }
    }

    /// Advances time for every member whose deadline has come.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.now = Some(now);
        for m in &mut self.members {
            if m.participant.poll_timeout().is_some_and(|t| now >= t) {
                m.participant.handle_timeout(now);
            }
        }
    }

    /// The earliest deadline among the members.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.members
            .iter()
            .filter_map(|m| m.participant.poll_timeout())
            .min()
    }

    /// The next output. Media is routed here, member by member; other outputs come out tagged.
    pub fn poll_output(&mut self) -> Option<RoomOutput<'_>> {
        loop {
            if self.cursor >= self.members.len() {
                self.cursor = 0;
                return self.poll_timeout().map(RoomOutput::Timeout);
            }
            let i = self.cursor;
            if self.members[i].participant.next_is_media() {
                self.route_from(i);
                // Copies were queued at members the scan may have passed: start over.
                self.cursor = 0;
                continue;
            }
            if !self.members[i].participant.has_output() {
                self.cursor += 1;
                continue;
            }
            let m = &mut self.members[i];
            let id = m.id;
            // `has_output` was true: this is a queued output, not the closing timeout.
            return m
                .participant
                .poll_output()
                .map(|o| RoomOutput::Member(id, o));
        }
    }

    /// Takes the media at the front of member `i`'s queue and sends a copy to each receiver.
    fn route_from(&mut self, i: usize) {
        let source = self.members[i].id;
        let publishes = self.members[i].role.publishes;
        let (ssrc, codec) = match self.members[i].participant.poll_output() {
            Some(Output::Event(Event::Media(media))) => {
                self.scratch.clear();
                self.scratch.extend_from_slice(media.rtp);
                (media.ssrc, media.codec)
            }
            _ => return,
        };
        if !publishes {
            self.counters.dropped_not_publisher += 1;
            return;
        }
        self.counters.routed_in += 1;
        let Some(now) = self.now else { return };
        for (j, r) in self.members.iter_mut().enumerate() {
            if j == i || !r.role.subscribes {
                continue;
            }
            let pt = codec.and_then(|c| {
                r.participant
                    .receives(c)
                    .then(|| r.participant.payload_type_for(c))
                    .flatten()
            });
            let Some(pt) = pt else {
                self.counters.dropped_no_codec += 1;
                continue;
            };
            if !r.participant.is_connected() {
                self.counters.dropped_not_ready += 1;
                continue;
            }
            let mapped = match r
                .ssrc_map
                .iter()
                .find(|(s, x, _)| *s == source && *x == ssrc)
            {
                Some(e) => e.2,
                None => {
                    let mut n = random_ssrc();
                    while n == 0 || r.ssrc_map.iter().any(|e| e.2 == n) {
                        n = random_ssrc();
                    }
                    r.ssrc_map.push((source, ssrc, n));
                    n
                }
            };
            rewrite(&mut self.scratch, pt, mapped);
            match r.participant.send_rtp(now, &self.scratch) {
                Ok(()) => self.counters.forwarded += 1,
                Err(_) => self.counters.dropped_not_ready += 1,
            }
        }
    }
}

/// Sets the payload type (keeping the marker bit) and the SSRC of an RTP packet whose header
/// has already been parsed (at least 12 bytes).
fn rewrite(rtp: &mut [u8], pt: u8, ssrc: u32) {
    if rtp.len() >= 12 {
        rtp[1] = (rtp[1] & 0x80) | (pt & 0x7f);
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
        rewrite(&mut p, 0, 0xaabb_ccdd);
        assert_eq!(p[1], 0x80);
        assert_eq!(&p[8..12], &[0xaa, 0xbb, 0xcc, 0xdd]);
    }
}
