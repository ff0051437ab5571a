//! SRTP for many members' media at once: the datagrams a worker read in one `recvmmsg` batch,
//! across rooms, unprotected in one call of an SRTP [`Engine`], and the copies routed from them
//! protected in another.
//!
//! A leg owns its SRTP contexts, so the batch finds them through the rooms
//! ([`Room::contexts_of`]) and hands the engine a store of references
//! ([`Engine::process_in`]); each stream's packets keep their order, so replay protection
//! and index estimation see them as they would one at a time. The shard stages datagrams
//! ([`MediaBatch::stage_inbound`]) that their member would unprotect now, runs
//! [`MediaBatch::unprotect`], routes each packet in its room, whose copies are staged as they
//! are written ([`Staged::to_protect`], on the room's way out: the buffer a copy was written in,
//! moved, not copied), runs [`MediaBatch::protect`] on them and sends what protected, each from
//! its own buffer. This is the gateway's only media path.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Instant;

use secrelay_srtp::batch::PacketResult;
use secrelay_srtp::{Context, Contexts, Engine, Error as SrtpError, Op, Packet};
use secrelay_wire::demux::RtpFacts;

use crate::leg::Via;
use crate::room::{MemberAt, Room};

/// Room for the SRTP tag (and the MKI some profiles carry) after a copy's plaintext.
pub(crate) const TAG_ROOM: usize = 32;

/// The slot of a packet a room staged to protect until the shard places it: a room does not
/// know its slot ([`crate::room::RoomOut::place`]).
pub(crate) const UNPLACED: usize = usize::MAX;

/// Rooms by slot, wherever the caller keeps them.
pub(crate) trait Rooms {
    /// The rooms at `slots` (ascending, distinct), each borrowed once, in that order; `None`
    /// for a slot with no room.
    fn rooms_at<'a>(&'a mut self, slots: &[usize], out: &mut Vec<Option<&'a mut Room>>);
}

/// Takes the items at the ascending, distinct `slots` from a slice iterator (O(1) per skip),
/// each through `pick` (to reach the room inside a caller's slot type).
pub(crate) fn walk<'a, T: 'a, U: 'a>(
    mut it: std::slice::IterMut<'a, T>,
    slots: &[usize],
    out: &mut Vec<Option<&'a mut U>>,
    pick: impl Fn(&'a mut T) -> Option<&'a mut U>,
) {
    let mut next = 0;
    for &slot in slots {
        match slot.checked_sub(next) {
            Some(skip) => {
                out.push(it.nth(skip).and_then(&pick));
                next = slot + 1;
            }
            // Not ascending: a caller's bug; answered as "no room" rather than a panic.
            None => out.push(None),
        }
    }
}

/// What a staged packet is.
#[derive(Debug, Clone, Copy)]
pub(crate) enum What {
    /// SRTP received: its header's fields, read where it arrived.
    Rtp(RtpFacts),
    /// SRTCP received.
    Rtcp,
    /// A copy of media to protect and send there, from that socket.
    Copy(SocketAddr, Via),
    /// RTCP of the gateway's own to protect and send there, from that socket.
    RtcpOut(SocketAddr, Via),
}

/// One staged packet and, once the engine ran, its result.
#[derive(Debug)]
pub(crate) struct Staged {
    /// The room's slot.
    pub slot: usize,
    /// The room's generation when staged (the caller checks it is the same room).
    pub room_gen: u64,
    /// The member whose context processes the packet (the sender inbound, the receiver out).
    pub member: MemberAt,
    /// Where a received datagram came from (the latching source once it authenticates).
    pub from: Option<SocketAddr>,
    /// When the datagram this came from was received (a received datagram, a copy of media).
    pub received: Option<Instant>,
    /// What it is.
    pub what: What,
    /// The packet; room for the tag after `len` when protecting.
    pub buf: Vec<u8>,
    /// Length of the input in `buf`.
    pub len: usize,
    /// The engine's result: the output length in `buf`, or why not.
    pub result: PacketResult,
}

impl Staged {
    /// A packet to protect for `member` of the room tagged `room_gen`: a copy of media
    /// (plaintext RTP routed by [`Room::route_run`], `What::Copy`) or RTCP (`What::RtcpOut`),
    /// written in `buf` (its whole length), which takes the tag after it. Its slot is
    /// [`UNPLACED`] until the shard places it.
    pub fn to_protect(
        room_gen: u64,
        member: MemberAt,
        received: Option<Instant>,
        what: What,
        mut buf: Vec<u8>,
    ) -> Staged {
        let len = buf.len();
        buf.resize(len + TAG_ROOM, 0);
        Staged {
            slot: UNPLACED,
            room_gen,
            member,
            from: None,
            received,
            what,
            buf,
            len,
            result: Err(SrtpError::UnknownContext),
        }
    }
}

/// The staged packets of one batch, and the engine that runs them.
pub(crate) struct MediaBatch {
    engine: Box<dyn Engine>,
    /// SRTP datagrams to unprotect, in arrival order.
    pub inbound: Vec<Staged>,
    keys: Vec<(usize, MemberAt)>,
    /// Scratch of [`name_contexts`].
    naming: Naming,
    /// Each staged packet's context (its key's place in `keys`).
    context_of: Vec<usize>,
    slots: Vec<usize>,
    members: Vec<MemberAt>,
    results: Vec<PacketResult>,
    // Allocations kept between batches (always empty here; see `recycle`).
    room_cache: Vec<Option<&'static mut Room>>,
    context_cache: Vec<Option<&'static mut Context>>,
    packet_cache: Vec<Packet<'static>>,
}

/// Takes a list's allocation over to a list of another lifetime (an empty `Vec` collected in
/// place keeps its buffer), so no batch allocates once the lists have grown.
pub(crate) fn recycle<T, U>(mut v: Vec<T>) -> Vec<U> {
    v.clear();
    v.into_iter().filter_map(|_| None).collect()
}

impl std::fmt::Debug for MediaBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MediaBatch")
            .field("engine", &self.engine.name())
            .field("inbound", &self.inbound.len())
            .finish_non_exhaustive()
    }
}

impl MediaBatch {
    /// A batch run by `engine`.
    pub fn new(engine: Box<dyn Engine>) -> MediaBatch {
        MediaBatch {
            engine,
            inbound: Vec::new(),
            keys: Vec::new(),
            naming: Naming::default(),
            context_of: Vec::new(),
            slots: Vec::new(),
            members: Vec::new(),
            results: Vec::new(),
            room_cache: Vec::new(),
            context_cache: Vec::new(),
            packet_cache: Vec::new(),
        }
    }

    /// The engine's name (for logs and metrics).
    pub fn engine_name(&self) -> &'static str {
        self.engine.name()
    }

    /// Stages an SRTP or SRTCP datagram from `member` of the room at `slot` (`what`: its
    /// RTP header's facts, or RTCP), held in `buf` (its whole length).
    pub fn stage_inbound(
        &mut self,
        (slot, room_gen, member): (usize, u64, MemberAt),
        from: SocketAddr,
        received: Instant,
        what: What,
        buf: Vec<u8>,
    ) {
        self.inbound.push(Staged {
            slot,
            room_gen,
            member,
            from: Some(from),
            received: Some(received),
            what,
            len: buf.len(),
            buf,
            result: Err(SrtpError::UnknownContext),
        });
    }

    /// Whether SRTP from `member` of the room at `slot` waits to be unprotected (a batch holds
    /// a few dozen datagrams: a scan).
    pub fn has_inbound_from(&self, slot: usize, member: MemberAt) -> bool {
        self.inbound
            .iter()
            .any(|s| s.slot == slot && s.member == member)
    }

    /// Unprotects every staged inbound datagram with its sender's context.
    pub fn unprotect<R: Rooms + ?Sized>(&mut self, rooms: &mut R) {
        let mut staged = std::mem::take(&mut self.inbound);
        self.run(&mut staged, true, rooms);
        self.inbound = staged;
    }

    /// Protects every staged copy with its receiver's context (each placed in its room's
    /// slot).
    pub fn protect<R: Rooms + ?Sized>(&mut self, staged: &mut [Staged], rooms: &mut R) {
        self.run(staged, false, rooms);
    }

    fn run<R: Rooms + ?Sized>(&mut self, staged: &mut [Staged], inbound: bool, rooms: &mut R) {
        if staged.is_empty() {
            return;
        }
        let MediaBatch {
            engine,
            keys,
            naming,
            context_of,
            slots,
            members,
            results,
            room_cache,
            context_cache,
            packet_cache,
            ..
        } = self;
        name_contexts(staged, naming, keys, context_of);
        slots.clear();
        slots.extend(keys.iter().map(|k| k.0));
        slots.dedup();
        let mut room_refs: Vec<Option<&mut Room>> = recycle(std::mem::take(room_cache));
        rooms.rooms_at(slots, &mut room_refs);
        // One context per distinct (slot, member), in `keys` order.
        let mut contexts = Refs(recycle(std::mem::take(context_cache)));
        let mut k = 0;
        for (room, &slot) in room_refs.drain(..).zip(slots.iter()) {
            let start = k;
            while k < keys.len() && keys[k].0 == slot {
                k += 1;
            }
            members.clear();
            members.extend(keys[start..k].iter().map(|x| x.1));
            match room {
                Some(r) => r.contexts_of(members, inbound, &mut contexts.0),
                None => contexts.0.extend(members.iter().map(|_| None)),
            }
        }
        *room_cache = recycle(room_refs);
        let mut packets: Vec<Packet<'_>> = recycle(std::mem::take(packet_cache));
        packets.extend(
            staged
                .iter_mut()
                .zip(context_of.iter())
                .map(|(s, &context)| Packet {
                    context,
                    op: match s.what {
                        What::Rtp(_) => Op::UnprotectRtp,
                        What::Rtcp => Op::UnprotectRtcp,
                        What::Copy(..) => Op::ProtectRtp,
                        What::RtcpOut(..) => Op::ProtectRtcp,
                    },
                    buf: &mut s.buf[..],
                    len: s.len,
                }),
        );
        results.clear();
        results.resize(packets.len(), Err(SrtpError::UnknownContext));
        engine.process_in(&mut contexts, &mut packets, results);
        *packet_cache = recycle(packets);
        *context_cache = recycle(contexts.0);
        for (s, r) in staged.iter_mut().zip(results.iter()) {
            s.result = *r;
        }
    }
}

/// The distinct (slot, member) keys of `staged`, sorted, into `keys`, and each staged packet's
/// place among them into `context_of`. A batch of at most [`SORTED_NAMING`] packets (a few
/// small rooms', most of them distinct) is sorted whole ([`name_by_sort`]); a larger one, whose
/// packets share few keys (a broadcast batch of 16,000 copies has 500), through a map
/// ([`name_by_map`]).
fn name_contexts(
    staged: &[Staged],
    scratch: &mut Naming,
    keys: &mut Vec<(usize, MemberAt)>,
    context_of: &mut Vec<usize>,
) {
    let sorted = staged.len() <= SORTED_NAMING
        && name_by_sort(staged, &mut scratch.packed, keys, context_of);
    if !sorted {
        name_by_map(staged, scratch, keys, context_of);
    }
}

/// The largest batch [`name_contexts`] sorts whole.
const SORTED_NAMING: usize = 256;

/// A staged packet's key and its place `i` in one number, ordered as (slot, member) and then
/// the place: sorted, the numbers need no look back into the packets. `None` for a slot past
/// 32 bits (no shard has that many rooms; such a batch is named through the map).
fn packed(s: &Staged, i: usize) -> Option<u128> {
    let slot = u32::try_from(s.slot).ok()?;
    let i = u32::try_from(i).ok()?;
    Some(
        u128::from(slot) << 96
            | u128::from(s.member.ix) << 64
            | u128::from(s.member.id.0) << 32
            | u128::from(i),
    )
}

/// [`name_contexts`] by one sort of the packets' keys and places packed in numbers
/// ([`packed`]), each key kept once. Whether it could (every slot fits 32 bits).
fn name_by_sort(
    staged: &[Staged],
    order: &mut Vec<u128>,
    keys: &mut Vec<(usize, MemberAt)>,
    context_of: &mut Vec<usize>,
) -> bool {
    order.clear();
    for (i, s) in staged.iter().enumerate() {
        match packed(s, i) {
            Some(p) => order.push(p),
            None => return false,
        }
    }
    order.sort_unstable();
    keys.clear();
    context_of.clear();
    context_of.resize(staged.len(), 0);
    let mut last = None;
    for &p in order.iter() {
        let key = p >> 32;
        if last != Some(key) {
            last = Some(key);
            let member = MemberAt {
                ix: (key >> 32) as u32,
                id: crate::room::MemberId(key as u32),
            };
            keys.push(((key >> 64) as usize, member));
        }
        if let Some(c) = context_of.get_mut(p as u32 as usize) {
            *c = keys.len() - 1;
        }
    }
    true
}

/// [`name_contexts`] with each key found in a map as it comes (`seen`), then only the distinct
/// keys sorted: no search or comparison per packet.
fn name_by_map(
    staged: &[Staged],
    scratch: &mut Naming,
    keys: &mut Vec<(usize, MemberAt)>,
    context_of: &mut Vec<usize>,
) {
    let Naming {
        seen,
        order,
        rank,
        sorted,
        ..
    } = scratch;
    seen.clear();
    keys.clear();
    context_of.clear();
    for s in staged {
        let key = (s.slot, s.member);
        let next = keys.len();
        let at = *seen.entry(key).or_insert_with(|| {
            keys.push(key);
            next
        });
        context_of.push(at);
    }
    // The keys in ascending order, and each first-seen place's rank among them.
    order.clear();
    order.extend(0..keys.len());
    order.sort_unstable_by_key(|&k| keys[k]);
    rank.clear();
    rank.resize(keys.len(), 0);
    for (r, &k) in order.iter().enumerate() {
        rank[k] = r;
    }
    for c in context_of.iter_mut() {
        *c = rank[*c];
    }
    // The keys themselves in that order (no second sort: the lists trade allocations).
    sorted.clear();
    sorted.extend(order.iter().map(|&k| keys[k]));
    std::mem::swap(keys, sorted);
}

/// Scratch lists of [`name_contexts`], kept between batches for their allocations.
#[derive(Default)]
struct Naming {
    seen: HashMap<(usize, MemberAt), usize, foldhash::fast::RandomState>,
    /// [`name_by_sort`]'s packed keys.
    packed: Vec<u128>,
    order: Vec<usize>,
    rank: Vec<usize>,
    sorted: Vec<(usize, MemberAt)>,
}

/// Contexts borrowed from their participants, `None` where a member is gone or not keyed.
struct Refs<'a>(Vec<Option<&'a mut Context>>);

impl Contexts for Refs<'_> {
    fn len(&self) -> usize {
        self.0.len()
    }
    fn get(&self, i: usize) -> Option<&Context> {
        self.0.get(i)?.as_deref()
    }
    fn get_mut(&mut self, i: usize) -> Option<&mut Context> {
        self.0.get_mut(i)?.as_deref_mut()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::leg::Via;
    use crate::room::MemberId;

    fn copy_to(slot: usize, ix: u32) -> Staged {
        Staged {
            slot,
            room_gen: 1,
            member: MemberAt {
                ix,
                id: MemberId(ix + 100),
            },
            from: None,
            received: None,
            what: What::RtcpOut(SocketAddr::from(([127, 0, 0, 1], 9)), Via::Shared),
            buf: Vec::new(),
            len: 0,
            result: Err(SrtpError::UnknownContext),
        }
    }

    #[test]
    fn each_packet_names_its_place_among_the_sorted_distinct_keys() {
        // Three packets' fan-outs in a batch, keys unsorted and repeated, two rooms.
        let order = [
            (2, 7),
            (0, 3),
            (2, 1),
            (0, 3),
            (2, 7),
            (2, 1),
            (1, 0),
            (2, 7),
        ];
        let staged: Vec<Staged> = order.iter().map(|&(s, ix)| copy_to(s, ix)).collect();
        let mut scratch = Naming::default();
        let (mut keys, mut context_of) = (Vec::new(), Vec::new());
        for _ in 0..2 {
            // The scratch lists are reused from one batch to the next.
            name_contexts(&staged, &mut scratch, &mut keys, &mut context_of);
            let want: Vec<(usize, u32)> = vec![(0, 3), (1, 0), (2, 1), (2, 7)];
            assert_eq!(keys.iter().map(|k| (k.0, k.1.ix)).collect::<Vec<_>>(), want);
            for (st, &c) in staged.iter().zip(&context_of) {
                assert_eq!(keys[c], (st.slot, st.member));
            }
        }
    }

    #[test]
    fn a_small_batch_sorted_whole_names_what_the_map_names() {
        // Batches on each side of the size that picks the way, keys repeated and unsorted.
        for n in [1, 7, SORTED_NAMING, SORTED_NAMING + 1, 3 * SORTED_NAMING] {
            let staged: Vec<Staged> = (0..n)
                .map(|i| copy_to(i * 7 % 5, (i * 13 % 41) as u32))
                .collect();
            let mut scratch = Naming::default();
            let (mut by_sort, mut of_sort) = (Vec::new(), Vec::new());
            let (mut by_map, mut of_map) = (Vec::new(), Vec::new());
            assert!(name_by_sort(
                &staged,
                &mut scratch.packed,
                &mut by_sort,
                &mut of_sort
            ));
            name_by_map(&staged, &mut scratch, &mut by_map, &mut of_map);
            assert_eq!(by_sort, by_map, "{n} packets");
            assert_eq!(of_sort, of_map, "{n} packets");
            assert!(by_sort.windows(2).all(|w| w[0] < w[1]), "sorted, each once");
            let (mut keys, mut context_of) = (Vec::new(), Vec::new());
            name_contexts(&staged, &mut scratch, &mut keys, &mut context_of);
            assert_eq!((keys, context_of), (by_sort, of_sort));
        }
    }

    #[test]
    fn a_slot_past_32_bits_is_named_through_the_map() {
        let far = usize::try_from(u64::from(u32::MAX) + 1).unwrap_or(usize::MAX);
        let staged = vec![copy_to(far, 1), copy_to(3, 2), copy_to(far, 1)];
        let mut scratch = Naming::default();
        let (mut keys, mut context_of) = (Vec::new(), Vec::new());
        assert!(!name_by_sort(
            &staged,
            &mut scratch.packed,
            &mut keys,
            &mut context_of
        ));
        name_contexts(&staged, &mut scratch, &mut keys, &mut context_of);
        let slots: Vec<usize> = keys.iter().map(|k| k.0).collect();
        assert_eq!(slots, vec![3, far]);
        assert_eq!(context_of, vec![1, 0, 1]);
    }
}
