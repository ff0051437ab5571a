//! The one way out of a room: everything a room makes (media copies, RTCP of the gateway's
//! own, its members' control datagrams and events, the deadlines routing sets) is pushed, in
//! the order it was made, onto the [`RoomOut`] its caller hands it, and the caller (the shard)
//! takes it from there in one place. The queue also holds the buffer pool: a copy is written
//! straight into a pooled buffer, which travels (moved, never copied) to the SRTP batch, the
//! send queue and the socket, and comes back to the pool once sent.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Instant;

use crate::leg::{CopyTarget, LegEvent, TransmitKind};
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
    /// A datagram for a member's media transport: protected with its keys first when the
    /// target says so (SRTP, SRTCP), sent as it is otherwise.
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
/// ([`crate::room::Room::tagged`]), and the pool of buffers copies are written in.
#[derive(Debug, Default)]
pub struct RoomOut {
    items: VecDeque<(u64, Out)>,
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
        if self.pool.len() < POOL_MAX && buf.capacity() > 0 {
            self.pool.push(buf);
        }
    }

    /// The room tagged `room` puts out from now on.
    pub(crate) fn begin(&mut self, room: u64) {
        self.room = room;
    }

    /// Queues an output of the room putting out now.
    pub fn push(&mut self, out: Out) {
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

    /// Queues a datagram for `to`'s media transport, written into a pooled buffer by `write`.
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
        self.push(Out::Send {
            to,
            target,
            what,
            buf,
        });
    }
}
