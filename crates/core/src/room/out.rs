//! The one way out of a room: everything a room makes (media copies, RTCP of the gateway's
//! own, its members' control datagrams and events, the deadlines routing sets) is put, in
//! the order it was made, on the [`RoomOut`] its caller hands it, and the caller (the shard)
//! takes it from there in one place ([`RoomOut::place`], then [`RoomOut::pop`]).
//!
//! A datagram to protect (nearly every copy) goes straight into the batch's staging, in the
//! order written: the shard places the room's slot on it ([`RoomOut::place`]) and protects the
//! whole batch in one call ([`RoomOut::take_protect`]). Everything else waits on one queue.
//! The queue also holds the buffer pool: a copy is written straight into a pooled buffer, which
//! travels (moved, never copied) to the SRTP batch, the send queue and the socket, and comes
//! back to the pool once sent.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Instant;

use crate::leg::{CopyTarget, LegEvent, TransmitKind};
use crate::media_batch::{Staged, What};
use crate::room::MemberAt;

/// Buffers kept for the next copies: enough for a broadcast's copies of a batch in flight (a
/// worker's batch of 32 packets to 500 viewers is 16,000 buffers until sent), so that a wide
/// fan-out does not allocate and free per copy. The pool only grows to what was in flight at
/// once, memory the process held then anyway (at most 16,384 buffers of their capacity:
/// ~24 MiB of 1,500-byte buffers, more where long copies grew theirs); a batch wider than
/// this allocates the rest.
const POOL_MAX: usize = 16384;

/// How many copies ahead [`RoomOut::warm_next`] warms a buffer.
const WARM_AHEAD: usize = 6;

/// What a room put out. See the [module documentation](self).
#[derive(Debug)]
pub enum Out {
    /// A datagram for a member's media transport sent as it is (a plain-RTP member's, a
    /// mirror's RTCP): one the target says to protect is staged for the batch instead
    /// ([`RoomOut::send`]).
    Send {
        /// The member.
        to: MemberAt,
        /// Where it goes, and whether it is protected.
        target: CopyTarget,
        /// Media (a copy of a packet read at that instant) or RTCP.
        what: Sent,
        /// The plain packet.
        buf: Vec<u8>,
    },
    /// A control datagram a member's leg made (a STUN answer, a DTLS flight), sent as it is.
    Control {
        /// The member.
        to: MemberAt,
        /// Where it goes.
        destination: SocketAddr,
        /// Our socket it leaves from.
        via: crate::leg::Via,
        /// What it is.
        kind: TransmitKind,
        /// The datagram.
        buf: Vec<u8>,
    },
    /// A member's leg reported something (an address validated, connected, closed).
    Event {
        /// The member.
        to: MemberAt,
        /// What happened.
        event: LegEvent,
    },
    /// The room's timer must fire by then ([`crate::room::Room::handle_timeout`]).
    Wake(Instant),
    /// A packet a recorded member sent (plain RTP, as it came, before the room's gate):
    /// for the recording the signaling keyed it with ([`crate::room::Room::set_recording`]).
    Record {
        /// The recording's key for this member.
        key: u64,
        /// When it arrived.
        at: Instant,
        /// The packet.
        buf: Vec<u8>,
    },
    /// A publisher's packet (plain RTP) for the room's replica on another worker
    /// ([`crate::leg::pipe`]).
    Pipe {
        /// The replica's worker.
        worker: usize,
        /// The publisher.
        publisher: MemberAt,
        /// How the packet was read (boxed: the rare output, it would make every one larger,
        /// and each of a fan-out's copies is an output moved twice).
        packet: Box<crate::room::PipedPacket>,
        /// The packet.
        buf: Vec<u8>,
    },
}

/// Keeps `buf` in `pool` for the next copies, while the pool is under its bound.
fn keep_buffer(pool: &mut Vec<Vec<u8>>, buf: Vec<u8>) {
    if pool.len() < POOL_MAX && buf.capacity() > 0 {
        pool.push(buf);
    }
}

/// What an [`Out::Send`] carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sent {
    /// A copy of media (relayed, retransmitted, transcoded or mixed) made from what was
    /// received at this instant.
    Media(Instant),
    /// An RTCP compound of the gateway's own (reports, feedback).
    Rtcp,
}

/// The queue of what rooms put out, each output tagged with its room's tag
/// ([`crate::room::Room::tagged`]), the batch's datagrams to protect, and the pool of buffers
/// copies are written in.
#[derive(Debug, Default)]
pub struct RoomOut {
    items: VecDeque<(u64, Out)>,
    /// Datagrams to protect in the batch's next protect call, in the order written; those
    /// before `placed` have their room's slot.
    protect: Vec<Staged>,
    placed: usize,
    pool: Vec<Vec<u8>>,
    /// The tag of the room putting out now.
    room: u64,
}

impl RoomOut {
    /// A cleared buffer from the pool (or a new one).
    pub fn buffer(&mut self) -> Vec<u8> {
        let mut b = self.pool.pop().unwrap_or_else(|| Vec::with_capacity(1500));
        b.clear();
        b
    }

    /// Asks the CPU to start loading the buffer [`WARM_AHEAD`] copies on, for a copy of `len`
    /// bytes and the room its tag takes (a fan-out's copies are alike): a wide fan-out's buffers are cold by
    /// the time they come round again, and a copy written into cold lines waits for each.
    fn warm_next(&self, len: usize) {
        if let Some(b) = self
            .pool
            .len()
            .checked_sub(WARM_AHEAD)
            .and_then(|k| self.pool.get(k))
        {
            let with_tag = len + crate::media_batch::TAG_ROOM;
            secrelay_srtp::simd::prefetch::prefetch_bytes(b.as_ptr(), with_tag, 24);
        }
    }

    /// Keeps a buffer that was sent (or dropped) for the next copies.
    pub fn recycle(&mut self, buf: Vec<u8>) {
        keep_buffer(&mut self.pool, buf);
    }

    /// The room tagged `room` puts out from now on.
    pub(crate) fn begin(&mut self, room: u64) {
        self.room = room;
    }

    /// Queues an output of the room putting out now.
    pub(crate) fn push(&mut self, out: Out) {
        self.items.push_back((self.room, out));
    }

    /// The oldest output not taken yet, with its room's tag.
    pub fn pop(&mut self) -> Option<(u64, Out)> {
        self.items.pop_front()
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Puts out a datagram for `to`'s media transport, written into a pooled buffer by
    /// `write`: staged for the batch's protect call when the target is protected, queued to
    /// send as it is otherwise.
    pub(crate) fn send(
        &mut self,
        to: MemberAt,
        target: CopyTarget,
        what: Sent,
        write: impl FnOnce(&mut Vec<u8>),
    ) {
        let mut buf = self.buffer();
        write(&mut buf);
        self.warm_next(buf.len());
        if !target.protect {
            return self.push(Out::Send {
                to,
                target,
                what,
                buf,
            });
        }
        let (received, what) = match what {
            Sent::Media(at) => (Some(at), What::Copy(target.destination, target.via)),
            Sent::Rtcp => (None, What::RtcpOut(target.destination, target.via)),
        };
        self.protect
            .push(Staged::to_protect(self.room, to, received, what, buf));
    }

    /// Gives the datagrams to protect that the room tagged `tag` staged since the last call its
    /// `slot` (a room does not know it). Those a call into another room left (one that did
    /// not finish: a panic) are dropped: how many.
    pub(crate) fn place(&mut self, slot: usize, tag: u64) -> u64 {
        let RoomOut {
            protect,
            placed,
            pool,
            ..
        } = self;
        let mut foreign = false;
        for st in &mut protect[*placed..] {
            st.slot = slot;
            foreign |= st.room_gen != tag;
        }
        let mut dropped = 0;
        if foreign {
            let mut at = 0;
            protect.retain_mut(|st| {
                at += 1;
                let keep = at <= *placed || st.room_gen == tag;
                if !keep {
                    dropped += 1;
                    keep_buffer(pool, std::mem::take(&mut st.buf));
                }
                keep
            });
        }
        *placed = protect.len();
        dropped
    }

    /// Drops the datagrams to protect not placed yet (those of a room given up after a
    /// panic): how many.
    pub(crate) fn drop_unplaced(&mut self) -> u64 {
        let RoomOut {
            protect,
            placed,
            pool,
            ..
        } = self;
        let n = protect.len().saturating_sub(*placed);
        for st in protect.drain(*placed..) {
            keep_buffer(pool, st.buf);
        }
        n as u64
    }

    /// How many datagrams wait to be protected.
    pub(crate) fn protect_len(&self) -> usize {
        self.protect.len()
    }

    /// The datagrams to protect, taken for the batch's protect call (every one placed: the
    /// shard places a room's after each call into it); hand the list back emptied with
    /// [`RoomOut::give_back`] so that its allocation is kept. Any not placed (a call whose
    /// output was never taken, a bug) are dropped first: how many, with the list.
    pub(crate) fn take_protect(&mut self) -> (Vec<Staged>, u64) {
        debug_assert_eq!(
            self.placed,
            self.protect.len(),
            "copies staged, never placed"
        );
        let dropped = self.drop_unplaced();
        self.placed = 0;
        (std::mem::take(&mut self.protect), dropped)
    }

    /// The list [`RoomOut::take_protect`] took, emptied.
    pub(crate) fn give_back(&mut self, mut list: Vec<Staged>) {
        list.clear();
        if self.protect.is_empty() {
            self.protect = list;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::leg::Via;
    use crate::room::MemberId;

    fn target(protect: bool) -> CopyTarget {
        CopyTarget {
            destination: SocketAddr::from(([127, 0, 0, 1], 5004)),
            via: Via::Shared,
            protect,
        }
    }

    fn member(ix: u32) -> MemberAt {
        MemberAt {
            ix,
            id: MemberId(ix + 10),
        }
    }

    /// Puts out a copy of `len` bytes to `to` in the room tagged `tag`.
    fn copy(out: &mut RoomOut, tag: u64, to: u32, protect: bool, len: usize) {
        out.begin(tag);
        let now = Instant::now();
        out.send(member(to), target(protect), Sent::Media(now), |b| {
            b.resize(len, 7)
        });
    }

    /// A queue holding one copy to protect (room tagged 1, member 0), placed in slot 0.
    fn one_placed() -> RoomOut {
        let mut out = RoomOut::default();
        copy(&mut out, 1, 0, true, 10);
        assert_eq!(out.place(0, 1), 0);
        out
    }

    #[test]
    fn a_copy_to_protect_is_staged_and_a_plain_one_queued() {
        let mut out = RoomOut::default();
        copy(&mut out, 1, 2, true, 100);
        copy(&mut out, 1, 3, false, 50);
        assert_eq!(out.protect_len(), 1);
        assert!(matches!(out.pop(), Some((1, Out::Send { buf, .. })) if buf.len() == 50));
        assert!(out.is_empty());
        assert_eq!(out.place(4, 1), 0);
        let (staged, unplaced) = out.take_protect();
        assert_eq!(unplaced, 0);
        let st = &staged[0];
        assert_eq!((st.slot, st.room_gen, st.member), (4, 1, member(2)));
        // The copy's bytes, and room for the tag after them.
        assert_eq!(
            (st.len, st.buf.len()),
            (100, 100 + crate::media_batch::TAG_ROOM)
        );
        assert!(matches!(st.what, What::Copy(_, Via::Shared)));
        out.give_back(staged);
        assert_eq!(out.protect_len(), 0);
    }

    #[test]
    fn copies_left_by_another_room_are_dropped_when_a_room_is_placed() {
        let mut out = one_placed();
        // Room 2's call did not finish; room 3's output is taken next.
        copy(&mut out, 2, 1, true, 10);
        copy(&mut out, 3, 2, true, 10);
        copy(&mut out, 2, 3, true, 10);
        assert_eq!(out.place(5, 3), 2);
        let (staged, unplaced) = out.take_protect();
        assert_eq!(unplaced, 0);
        let kept: Vec<(usize, u64, u32)> = staged
            .iter()
            .map(|s| (s.slot, s.room_gen, s.member.ix))
            .collect();
        assert_eq!(kept, vec![(0, 1, 0), (5, 3, 2)]);
        // The dropped copies' buffers went back to the pool.
        assert_eq!(out.pool.len(), 2);
    }

    #[test]
    fn copies_never_placed_are_dropped_not_protected() {
        let mut out = one_placed();
        // A room given up after a panic: what it staged goes with it.
        copy(&mut out, 1, 1, true, 10);
        assert_eq!(out.drop_unplaced(), 1);
        copy(&mut out, 1, 2, true, 10);
        assert_eq!(out.place(0, 1), 0);
        let (staged, unplaced) = out.take_protect();
        assert_eq!(unplaced, 0);
        let members: Vec<u32> = staged.iter().map(|s| s.member.ix).collect();
        assert_eq!(members, vec![0, 2]);
    }

    /// A copy never placed reaching the protect call is a bug debug builds stop at; a release
    /// build drops it and says how many.
    #[test]
    #[cfg(not(debug_assertions))]
    fn the_protect_call_drops_a_copy_never_placed() {
        let mut out = one_placed();
        copy(&mut out, 1, 1, true, 10);
        let (staged, unplaced) = out.take_protect();
        assert_eq!((staged.len(), unplaced), (1, 1));
    }
}
