//! A room of participants, sans-IO: media from one member is unprotected with that member's
//! keys (by its [`Participant`]) and protected again for every other subscribed member with
//! that member's own keys (the K1/K2 scheme: no two members share SRTP keys, and the gateway
//! holds every key).
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
//! [`RoomCounters::unslotted`]: endpoints that demultiplex by SSRC (the lab's simulated
//! participants, SIP-style legs) get everything; a browser plays the announced stream.
//! Packets of a codec the receiver did not accept are dropped and counted. RTCP is not
//! forwarded (it is reported to the caller as [`Event::Rtcp`]).
//!
//! # Drive contract
//! After every input ([`Room::handle_datagram`], [`Room::handle_timeout`]), call
//! [`Room::poll_output`] until it returns [`RoomOutput::Timeout`] or `None`. Media is routed
//! inside `poll_output`; transmits and the other events come out tagged with their member.
//!
//! # Allocation
//! Routing a packet copies it into one reusable scratch buffer and rewrites it there for each
//! receiver; with the participants' buffer pools that keeps steady-state forwarding free of
//! allocation. Slots are made with the member; a stream forwarded outside a slot allocates its
//! map entry once.

use std::net::SocketAddr;
use std::time::Instant;

use crate::participant::{CodecId, Event, Output, Participant};

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
    /// Copies sent outside a receive slot (every slot of the kind taken): under an SSRC the
    /// receiver's answer does not announce.
    pub unslotted: u64,
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
    /// One per receiving section of the answer.
    slots: Vec<Slot>,
    /// Streams forwarded outside a slot: (source member, source SSRC) → the SSRC this member
    /// sees.
    unslotted: Vec<(MemberId, u32, u32)>,
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
}

impl Member {
    fn new(id: MemberId, role: MemberRole, participant: Participant) -> Member {
        let slots = participant
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
            })
            .collect();
        Member {
            id,
            role,
            participant,
            slots,
            unslotted: Vec::new(),
        }
    }

    /// The slot for a source stream of `codec`: the one it holds, else the first free one
    /// whose section accepted the codec (taken, continuing its numbering at the packet's
    /// `seq` and `ts`). The slot's index and the section's payload type for the codec.
    fn slot_for(
        &mut self,
        source: (MemberId, u32),
        codec: CodecId,
        seq: u16,
        ts: u32,
    ) -> Option<(usize, u8)> {
        let media = self.participant.media();
        let pt_in = |slot: &Slot| {
            media
                .get(slot.section)?
                .codecs
                .iter()
                .find(|(c, _)| *c == codec)
                .map(|(_, pt)| *pt)
        };
        if let Some(k) = self.slots.iter().position(|s| s.source == Some(source)) {
            return pt_in(&self.slots[k]).map(|pt| (k, pt));
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
        slot.clock_rate = codec.clock_rate();
        Some((k, pt))
    }
}

/// A room. See the [module documentation](self).
pub struct Room {
    members: Vec<Member>,
    next_id: u32,
    cursor: usize,
    now: Option<Instant>,
    scratch: Vec<u8>,
    counters: RoomCounters,
    /// Media copies are left for the caller to protect in a batch (see
    /// [`Room::defer_media_copies`]) instead of protected one by one.
    defer: bool,
    /// Deferred copies: receiver and plaintext RTP (header rewritten for it).
    copies: Vec<(MemberId, Vec<u8>)>,
    /// Buffers of copies already taken, for the next ones.
    copy_pool: Vec<Vec<u8>>,
}

impl Default for Room {
    fn default() -> Self {
        Room::new()
    }
}

/// Copy buffers a room keeps between batches.
const COPY_POOL_MAX: usize = 64;

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
            defer: false,
            copies: Vec::new(),
            copy_pool: Vec::new(),
        }
    }

    /// With `on`, a media packet's copy for each receiver is not protected here: it is kept,
    /// with its header rewritten for the receiver, until [`Room::take_media_copies`], so that
    /// the caller can protect the copies of many packets and rooms in one SRTP batch (and
    /// count each with [`Room::count_protected`]). A copy is kept only for a receiver that can
    /// be sent to now; the others are counted as before.
    pub fn defer_media_copies(&mut self, on: bool) {
        self.defer = on;
    }

    /// Moves the deferred copies into `out`, in the order they were made.
    pub fn take_media_copies(&mut self, out: &mut Vec<(MemberId, Vec<u8>)>) {
        out.append(&mut self.copies);
    }

    /// Gives back a copy's buffer once it is sent (kept for the next copies, up to a bound).
    pub fn recycle_copy(&mut self, buf: Vec<u8>) {
        if self.copy_pool.len() < COPY_POOL_MAX {
            self.copy_pool.push(buf);
        }
    }

    /// Where a deferred copy for `member` goes now, if it can be sent.
    pub fn media_destination(&self, member: MemberId) -> Option<SocketAddr> {
        self.participant(member).and_then(|p| p.send_target().ok())
    }

    /// Counts a deferred copy's protect result at its receiver.
    pub fn count_protected(
        &mut self,
        member: MemberId,
        result: &Result<usize, secrelay_srtp::Error>,
    ) {
        if let Some(p) = self.participant_mut(member) {
            p.count_protected(result);
        }
    }

    /// Whether an RTP datagram for `member` from `from` would be unprotected now (see
    /// [`Participant::takes_srtp_from`]).
    pub fn takes_srtp(&self, member: MemberId, from: SocketAddr) -> bool {
        self.participant(member)
            .is_some_and(|p| p.takes_srtp_from(from))
    }

    /// An RTP datagram for `member` unprotected by the caller's batch: handed to the member as
    /// [`Room::handle_datagram`] would hand its own unprotect. `false` if there is no such
    /// member.
    pub fn accept_unprotected_rtp(
        &mut self,
        now: Instant,
        member: MemberId,
        datagram_len: usize,
        result: Result<usize, secrelay_srtp::Error>,
        buf: &mut Vec<u8>,
    ) -> bool {
        self.now = Some(now);
        match self.participant_mut(member) {
            Some(p) => {
                p.accept_unprotected_rtp(datagram_len, result, buf);
                true
            }
            None => false,
        }
    }

    /// The members' SRTP contexts (inbound or outbound), one entry per requested member in
    /// the order asked (`None` for a member that is gone or not keyed). `members` must not
    /// repeat a member.
    pub fn contexts_of<'a>(
        &'a mut self,
        members: &[MemberId],
        inbound: bool,
        out: &mut Vec<Option<&'a mut secrelay_srtp::Context>>,
    ) {
        let first = out.len();
        out.extend(members.iter().map(|_| None));
        for m in self.members.iter_mut() {
            if let Some(k) = members.iter().position(|id| *id == m.id) {
                out[first + k] = if inbound {
                    m.participant.inbound_context()
                } else {
                    m.participant.outbound_context()
                };
            }
        }
    }

    /// Adds a participant.
    pub fn add(&mut self, participant: Participant, role: MemberRole) -> MemberId {
        let id = MemberId(self.next_id);
        self.next_id += 1;
        self.members.push(Member::new(id, role, participant));
        id
    }

    /// Removes a member, handing back its participant.
    pub fn remove(&mut self, id: MemberId) -> Option<Participant> {
        let i = self.members.iter().position(|m| m.id == id)?;
        let m = self.members.remove(i);
        for other in &mut self.members {
            other.unslotted.retain(|(src, _, _)| *src != id);
            for slot in &mut other.slots {
                if slot.source.is_some_and(|(src, _)| src == id) {
                    slot.source = None;
                }
            }
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
        Some(r.participant.media().get(slot.section)?.mid.as_str())
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
        // The source's numbering, read once: each copy is rewritten in the same scratch.
        let (seq_in, ts_in) = seq_ts(&self.scratch);
        for (j, r) in self.members.iter_mut().enumerate() {
            if j == i || !r.role.subscribes {
                continue;
            }
            let Some(c) = codec.filter(|c| r.participant.receives(*c)) else {
                self.counters.dropped_no_codec += 1;
                continue;
            };
            if !r.participant.is_connected() {
                self.counters.dropped_not_ready += 1;
                continue;
            }
            let (seq, ts) = (seq_in, ts_in);
            let (pt, mapped, seq, ts) = match r.slot_for((source, ssrc), c, seq, ts) {
                Some((k, pt)) => {
                    let slot = &mut r.slots[k];
                    let out = (
                        seq.wrapping_add(slot.seq_offset),
                        ts.wrapping_add(slot.ts_offset),
                    );
                    slot.last = Some(out);
                    (pt, slot.ssrc, out.0, out.1)
                }
                None => {
                    let Some(pt) = r.participant.payload_type_for(c) else {
                        self.counters.dropped_no_codec += 1;
                        continue;
                    };
                    self.counters.unslotted += 1;
                    let mapped = match r
                        .unslotted
                        .iter()
                        .find(|(s, x, _)| *s == source && *x == ssrc)
                    {
                        Some(e) => e.2,
                        None => {
                            let taken = |n: u32| {
                                n == 0
                                    || r.unslotted.iter().any(|e| e.2 == n)
                                    || r.slots.iter().any(|s| s.ssrc == n)
                            };
                            let mut n = random_ssrc();
                            while taken(n) {
                                n = random_ssrc();
                            }
                            r.unslotted.push((source, ssrc, n));
                            n
                        }
                    };
                    (pt, mapped, seq, ts)
                }
            };
            rewrite(&mut self.scratch, pt, mapped, seq, ts);
            if self.defer {
                match r.participant.rtp_destination() {
                    Ok(_) => {
                        let mut b = self.copy_pool.pop().unwrap_or_default();
                        b.clear();
                        b.extend_from_slice(&self.scratch);
                        self.copies.push((r.id, b));
                        self.counters.forwarded += 1;
                    }
                    Err(_) => self.counters.dropped_not_ready += 1,
                }
                continue;
            }
            match r.participant.send_rtp(now, &self.scratch) {
                Ok(()) => self.counters.forwarded += 1,
                Err(_) => self.counters.dropped_not_ready += 1,
            }
        }
    }
}

/// The sequence number and timestamp of an RTP packet whose header has already been parsed.
fn seq_ts(rtp: &[u8]) -> (u16, u32) {
    match (rtp.get(2..4), rtp.get(4..8)) {
        (Some(s), Some(t)) => (
            u16::from_be_bytes([s[0], s[1]]),
            u32::from_be_bytes([t[0], t[1], t[2], t[3]]),
        ),
        _ => (0, 0),
    }
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
