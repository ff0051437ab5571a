//! Rooms spread over workers (see [`crate::leg::pipe`]): the shard's side of a room's pipes.
//!
//! At the home (the worker that owns the room by its name): [`Shard::attach_pipe`] before a
//! viewer joins on another worker (its replica is opened there with the publishers' mirrors),
//! [`Shard::detach_pipe`] when it left; every packet a publisher sends goes out once per
//! replica ([`Output::Pipe`]); a publisher that joins or leaves is told to the replicas
//! ([`PipeEvent`]); what a replica's mirror sends back is answered
//! ([`Shard::handle_pipe_feedback`]).
//!
//! At a replica: [`Shard::open_replica`] with the mirrors (before the viewer's join, in the
//! same command), [`Shard::add_mirror`] and [`Shard::remove_mirror`] as publishers come and
//! go, [`Shard::handle_piped`] for each packet, [`Shard::close_replica`] when the home says the
//! last viewer here left. A replica is no room of the signaling's: it starts and finishes
//! without lifecycle events, its mirrors are no participants (not in the API, the sessions or
//! the members counted), and what came through them is counted apart
//! ([`crate::leg::LegKind::Pipe`]).
//!
//! Ordering: the home posts everything a replica must do (open, mirror, close) from its own
//! thread to the replica's one queue, so the replica does it in the order the home decided it;
//! a viewer's join at the replica is posted by the home too, in the same command that opens the
//! replica. The home counts the replica's viewers (attached minus detached): it closes the
//! replica only when none is left and no join is on its way.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use secrelay_wire::demux::Class;

use super::{Bytes, Event, Handled, Head, JoinError, MemberKey, Queued, RoomSlot, Shard, Who};
use crate::counters::EndReason;
use crate::leg::{DataMessage, Leg, MirrorSpec, PipeKey, PipeLeg, Via};
use crate::room::{MemberAt, MemberRole, PipedPacket, Session};

/// Where a piped packet "comes from" (no address: the pipe says whose it is).
const NOWHERE: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0);

/// What a pipe carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Piped {
    /// A publisher's packet (plain RTP), home to replica, as the home read it.
    Media(PipedPacket),
    /// A mirror's RTCP about its publisher's streams, replica to home.
    Feedback,
}

/// A packet for another worker's shard.
#[derive(Debug, Clone, Copy)]
pub struct PipeTransmit<'a> {
    /// The worker.
    pub worker: usize,
    /// The publisher it is of, or about.
    pub key: PipeKey,
    /// What it is.
    pub what: Piped,
    /// The packet.
    pub contents: &'a [u8],
}

/// What another worker's shard must do about a room spread over workers (the caller posts it
/// there: see the ordering in the [module documentation](self)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PipeEvent {
    /// A publisher joined a room with replicas: the workers `to` mirror it
    /// ([`Shard::add_mirror`]).
    Publisher {
        /// The room.
        room: String,
        /// The replicas' workers.
        to: Vec<usize>,
        /// The publisher.
        spec: MirrorSpec,
    },
    /// A publisher of a room with replicas left: its mirrors on `to` go
    /// ([`Shard::remove_mirror`]).
    PublisherLeft {
        /// The replicas' workers.
        to: Vec<usize>,
        /// The publisher.
        key: PipeKey,
    },
    /// The last viewer of the room's replica on `to` left: it closes
    /// ([`Shard::close_replica`]).
    Closed {
        /// The room.
        room: String,
        /// The replica's worker.
        to: usize,
    },
    /// A viewer of a replica left (or its join failed): its home counts one fewer there
    /// ([`Shard::detach_pipe`]).
    ViewerLeft {
        /// The room.
        room: String,
        /// The home's worker.
        home: usize,
    },
    /// Data-channel messages of `room` for the workers `to` (the home, or replicas), which
    /// send them to their members ([`Shard::handle_piped_data`]).
    Data {
        /// The room.
        room: String,
        /// The workers.
        to: Vec<usize>,
        /// The messages, in the order they were sent (shared by every worker they go to).
        msgs: Arc<[DataMessage]>,
    },
}

impl Shard {
    /// One more viewer of `room` joins on `worker` (not this one): the room's publishers as the
    /// replica there mirrors them, the room handing their packets there from now on. `None`
    /// when the viewer joins here instead: the room is not here (it starts here with its
    /// first member), it mixes (the mix is made here), or `worker` is this one. Err when the
    /// room is full for `who` (its participants here and its viewers elsewhere count).
    pub fn attach_pipe(
        &mut self,
        room: &str,
        worker: usize,
        who: &Who,
    ) -> Result<Option<Vec<MirrorSpec>>, JoinError> {
        let Some(&slot) = self.room_index.get(room) else {
            return Ok(None);
        };
        let Some(s) = self.rooms[slot].as_ref() else {
            return Ok(None);
        };
        if worker == self.index || s.replica_of.is_some() || s.room.is_mixing() {
            return Ok(None);
        }
        self.admit_member(room, who)?;
        let s = self.rooms[slot].as_mut().expect("found above");
        s.room.attach_pipe(worker);
        let home = self.index;
        Ok(Some(
            s.room
                .publishers()
                .map(|p| spec(home, slot, s.room_gen, p))
                .collect(),
        ))
    }

    /// Whether a viewer of `room` may join on another worker or node (through a pipe): the
    /// room lives here, has a publisher and does not mix.
    pub fn pipes_viewers(&self, room: &str) -> bool {
        self.room_index
            .get(room)
            .and_then(|&slot| self.rooms[slot].as_ref())
            .is_some_and(|s| {
                s.replica_of.is_none()
                    && !s.room.is_mixing()
                    && s.room.publishers().next().is_some()
            })
    }

    /// Data-channel messages a member of the room in `slot` sent (or the server sent to the
    /// whole room) go to the room's other workers: from a replica to its home, from the home
    /// to every replica but `except` (the one they came from).
    pub(super) fn pipe_data(
        &mut self,
        slot: usize,
        msgs: Arc<[DataMessage]>,
        except: Option<usize>,
    ) {
        let Some(s) = self.rooms.get(slot).and_then(Option::as_ref) else {
            return;
        };
        let mut to: Vec<usize> = match s.replica_of {
            Some(home) => vec![home],
            None => s.room.pipe_workers().collect(),
        };
        to.retain(|&w| Some(w) != except);
        if to.is_empty() || msgs.is_empty() {
            return;
        }
        self.queue
            .push_back(super::queued_event(Event::Pipe(PipeEvent::Data {
                room: s.name.clone(),
                to,
                msgs,
            })));
    }

    /// Data-channel messages a member of `room` on worker `from` sent, piped here: sent to
    /// every member here with data channels, and, at the room's home, on to its other
    /// replicas. How many members here were sent them (0 when the room is not here).
    pub fn handle_piped_data(
        &mut self,
        now: Instant,
        room: &str,
        from: usize,
        msgs: Arc<[DataMessage]>,
    ) -> usize {
        let Some(&slot) = self.room_index.get(room) else {
            return 0;
        };
        let Shard { rooms, out, .. } = self;
        let Some(s) = rooms[slot].as_mut() else {
            return 0;
        };
        let sent = s.room.deliver_data(&msgs, now, out);
        self.pipe_data(slot, msgs, Some(from));
        self.settle(slot);
        sent
    }

    /// A viewer of `room` on `worker`'s replica left: when it was the last, the replica is
    /// told to close ([`PipeEvent::Closed`]), and the room goes if nobody is left here either.
    pub fn detach_pipe(&mut self, room: &str, worker: usize) {
        let Some(&slot) = self.room_index.get(room) else {
            return;
        };
        let Some(s) = self.rooms[slot].as_mut() else {
            return;
        };
        if !s.room.detach_pipe(worker) {
            return;
        }
        self.queue
            .push_back(super::queued_event(Event::Pipe(PipeEvent::Closed {
                room: room.to_owned(),
                to: worker,
            })));
        if s.room.is_empty() {
            self.finish_room(slot);
        }
    }

    /// Opens the replica of `room`, whose home is worker `home`, with the mirrors of `specs`
    /// (those it has already are kept): a viewer's join follows.
    pub fn open_replica(&mut self, now: Instant, room: &str, home: usize, specs: &[MirrorSpec]) {
        let slot = match self.room_index.get(room) {
            Some(&slot) => slot,
            None => self.make_room(room, Some(home)),
        };
        if self.rooms[slot].as_ref().and_then(|s| s.replica_of) != Some(home) {
            // A room of this name lives here: not a replica (cannot be: one home per name).
            tracing::error!(room, home, "a replica asked of a room that lives here");
            return;
        }
        for spec in specs {
            self.mirror_in(now, slot, spec);
        }
    }

    /// A publisher of `room`'s home, mirrored in the replica here (if the replica is open).
    pub fn add_mirror(&mut self, now: Instant, room: &str, spec: &MirrorSpec) {
        let Some(&slot) = self.room_index.get(room) else {
            return;
        };
        if self.rooms[slot]
            .as_ref()
            .is_some_and(|s| s.replica_of == Some(spec.key.home))
        {
            self.mirror_in(now, slot, spec);
        }
    }

    fn mirror_in(&mut self, now: Instant, slot: usize, spec: &MirrorSpec) {
        if let Some(k) = self.mirrors.get(&spec.key).copied() {
            return self.update_mirror(k, spec);
        }
        let Some(s) = self.rooms[slot].as_mut() else {
            return;
        };
        let session = Session {
            id: spec.id.clone(),
            name: spec.name.clone(),
            kind: crate::room::JoinKind::Whip,
            ufrags: Vec::new(),
            addrs: Vec::new(),
            ports: Vec::new(),
            profile: None,
            connected: true,
            closing: None,
            created: now,
            events: false,
            publishing: true,
            kept: false,
        };
        let member = self.tally.track(&mut s.room, |r| {
            r.add(PipeLeg::new(spec), MemberRole::PUBLISHER, session, now)
        });
        let key = MemberKey {
            slot,
            room_gen: s.room_gen,
            member,
        };
        self.mirrors.insert(spec.key, key);
        tracing::debug!(room = %s.name, publisher = %spec.id, "publisher mirrored");
        self.settle(slot);
        // The replica's viewers that listen for new offers may lack a section for it.
        self.renegotiate(slot);
    }

    /// A mirror's publisher renegotiated at home: the mirror sends what the publisher sends
    /// now, and the replica's viewers that listen for new offers get sections for it (nothing
    /// when what it sends did not change).
    fn update_mirror(&mut self, k: MemberKey, spec: &MirrorSpec) {
        let Shard { rooms, out, .. } = self;
        let Some(s) = rooms[k.slot].as_mut().filter(|s| s.room_gen == k.room_gen) else {
            return;
        };
        let changed = s.room.with_leg(k.member, out, |leg| {
            leg.as_pipe_mut().is_some_and(|p| p.set_media(spec))
        });
        if changed != Some(true) {
            return;
        }
        s.room.media_changed(k.member.id());
        tracing::debug!(room = %s.name, publisher = %spec.id, "mirror renegotiated");
        self.settle(k.slot);
        self.renegotiate(k.slot);
    }

    /// The mirror of `key` goes (its publisher left the home room).
    pub fn remove_mirror(&mut self, now: Instant, key: PipeKey) {
        if let Some(k) = self.mirrors.get(&key).copied() {
            self.close_member(now, k.slot, k.member, EndReason::Deleted);
        }
    }

    /// The replica of `room` closes: its mirrors go, and so does the room once its last viewer
    /// has (the home says so only then).
    pub fn close_replica(&mut self, now: Instant, room: &str) {
        let Some(&slot) = self.room_index.get(room) else {
            return;
        };
        let mirrors: Vec<MemberKey> = self
            .mirrors
            .values()
            .filter(|k| k.slot == slot)
            .copied()
            .collect();
        for k in mirrors {
            self.close_member(now, k.slot, k.member, EndReason::Deleted);
        }
    }

    /// The workers `lost` names are out of reach (another node, whose link was lost): the
    /// rooms here stop piping to them (and go when nobody is left), and the replicas here whose
    /// home is one of them close with their viewers (`source_lost`, with close_notify: their
    /// clients join again, through a new link or at the room's new node).
    pub fn cut_pipes(&mut self, now: Instant, lost: impl Fn(usize) -> bool) {
        let mut replicas = Vec::new();
        for slot in 0..self.rooms.len() {
            let Some(s) = self.rooms[slot].as_mut() else {
                continue;
            };
            match s.replica_of {
                Some(home) if lost(home) => replicas.push(s.name.clone()),
                Some(_) => {}
                None => {
                    if s.room.cut_pipes(&lost) && s.room.is_empty() {
                        self.finish_room(slot);
                    }
                }
            }
        }
        for room in replicas {
            self.close_replica(now, &room);
            let Some(&slot) = self.room_index.get(&room) else {
                continue;
            };
            let viewers: Vec<MemberAt> = self.rooms[slot]
                .as_ref()
                .map(|s| s.room.members().filter_map(|m| s.room.at(m)).collect())
                .unwrap_or_default();
            for at in viewers {
                self.close_member(now, slot, at, EndReason::SourceLost);
            }
        }
    }

    /// A packet its home piped for the mirror of `key` (`buf`, read at home as `packet` says:
    /// not parsed again), routed to the replica's viewers as the mirror's; `buf` is taken (a
    /// buffer of the shard's goes in its place) when routing keeps it. [`Handled::NotOurs`]
    /// when there is no such mirror (it went since).
    pub fn handle_piped(
        &mut self,
        now: Instant,
        key: PipeKey,
        packet: PipedPacket,
        buf: &mut Vec<u8>,
    ) -> Handled {
        let Some(k) = self.mirrors.get(&key).copied() else {
            return Handled::NotOurs;
        };
        if let Some(layer) = packet.layer {
            if let Some(s) = self.room_of(k) {
                s.room.bind_layer(k.member, packet.facts.ssrc, layer);
            }
        }
        let head = Head {
            via: Via::Pipe,
            from: NOWHERE,
            class: Class::Rtp(packet.facts),
            received: packet.received,
        };
        self.handle_keyed(now, k, head, Bytes::Owned(buf))
    }

    /// RTCP a replica's mirror sent about the publisher `key` names (here): its keyframe
    /// requests and NACKs passed on to the publisher ([`crate::room::Room::pipe_feedback`]).
    pub fn handle_pipe_feedback(&mut self, now: Instant, key: PipeKey, rtcp: &[u8]) -> Handled {
        let k = MemberKey {
            slot: key.slot,
            room_gen: key.room_gen,
            member: key.member,
        };
        let Shard { rooms, out, .. } = self;
        let Some(s) = rooms
            .get_mut(k.slot)
            .and_then(Option::as_mut)
            .filter(|s| s.room_gen == k.room_gen)
        else {
            return Handled::NotOurs;
        };
        if !s.room.pipe_feedback(k.member, rtcp, now, out) {
            return Handled::NotOurs;
        }
        self.dispatch(k.slot);
        Handled::Taken
    }

    /// What a member's removal from the room in `s` tells other workers: a publisher of a home
    /// room with replicas is gone from them; a viewer of a replica is one fewer at its home.
    pub(super) fn tell_pipes(
        queue: &mut std::collections::VecDeque<Queued>,
        s: &RoomSlot,
        at: MemberAt,
        publishes: bool,
        home: usize,
        slot: usize,
    ) {
        if let Some(home) = s.replica_of {
            queue.push_back(super::queued_event(Event::Pipe(PipeEvent::ViewerLeft {
                room: s.name.clone(),
                home,
            })));
            return;
        }
        let to: Vec<usize> = s.room.pipe_workers().collect();
        if publishes && !to.is_empty() {
            let key = PipeKey {
                home,
                slot,
                room_gen: s.room_gen,
                member: at,
            };
            queue.push_back(super::queued_event(Event::Pipe(PipeEvent::PublisherLeft {
                to,
                key,
            })));
        }
    }

    /// What a member's joining the room in `slot` tells other workers: a publisher of a home
    /// room with replicas is mirrored there.
    pub(super) fn tell_pipes_joined(&mut self, slot: usize, at: MemberAt) {
        let Some(s) = self.rooms[slot].as_ref() else {
            return;
        };
        let to: Vec<usize> = s.room.pipe_workers().collect();
        if to.is_empty() {
            return;
        }
        let Some(p) = s.room.publishers().find(|p| p.at == at) else {
            return;
        };
        let spec = spec(self.index, slot, s.room_gen, p);
        self.queue
            .push_back(super::queued_event(Event::Pipe(PipeEvent::Publisher {
                room: s.name.clone(),
                to,
                spec,
            })));
    }

    /// What a renegotiation of member `at` of the room in `slot` (which `published` before it)
    /// tells the replicas: its mirrors take what it sends now (its sections, codecs and layers),
    /// or go when it sends nothing any more.
    pub(super) fn tell_pipes_changed(&mut self, slot: usize, at: MemberAt, published: bool) {
        let Some(s) = self.rooms[slot].as_ref() else {
            return;
        };
        let publishes = s.room.publishers().any(|p| p.at == at);
        if publishes {
            // A mirror taken for the first time or again: the replica adds or updates it.
            self.tell_pipes_joined(slot, at);
        } else if published {
            Self::tell_pipes(&mut self.queue, s, at, true, self.index, slot);
        }
    }

    /// Whether `leg`, just removed from its room, is a mirror (its key forgotten then).
    pub(super) fn forget_mirror(&mut self, leg: &Leg) -> bool {
        match leg.as_pipe() {
            Some(p) => {
                self.mirrors.remove(&p.key());
                true
            }
            None => false,
        }
    }
}

/// A publisher of the room in `slot` (generation `room_gen`) of worker `home`, for a replica.
fn spec(home: usize, slot: usize, room_gen: u64, p: crate::room::Publisher<'_>) -> MirrorSpec {
    MirrorSpec {
        key: PipeKey {
            home,
            slot,
            room_gen,
            member: p.at,
        },
        id: p.session.id.clone(),
        name: p.session.name.clone(),
        media: p.media.to_vec(),
    }
}
