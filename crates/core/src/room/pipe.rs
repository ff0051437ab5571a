//! A room's pipes (see [`crate::leg::pipe`]): at its home, the replicas on other workers its
//! publishers' packets are handed to, each with the number of viewers it holds; what a
//! replica's mirror says about a stream (keyframe requests, NACKs) answered for the
//! publisher; at a replica, the layer a mirrored packet's home gave it.

use std::time::Instant;

use secrelay_wire::demux::RtpFacts;
use secrelay_wire::rtcp::{compound, Feedback};

use crate::leg::{LegKind, NegotiatedMedia};
use crate::room::out::{Out, RoomOut};
use crate::room::rtcp_in::nack_upstream;
use crate::room::{MemberAt, Room, Session};

/// A publisher's packet as the home read it, for a replica: its header's fields (the replica
/// does not parse it again), its simulcast section and layer when it is one's, and when the
/// home received it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PipedPacket {
    /// Its header's fields.
    pub facts: RtpFacts,
    /// Its simulcast section and layer.
    pub layer: Option<(usize, usize)>,
    /// When the home received it.
    pub received: Instant,
}

/// A replica of the room: the worker that holds it and how many of its viewers are there (the
/// home hands it packets while there is one).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pipe {
    pub worker: usize,
    pub viewers: u32,
}

/// A publisher of the room as its replicas mirror it.
#[derive(Debug)]
pub struct Publisher<'a> {
    /// Where it is.
    pub at: MemberAt,
    /// What the signaling knows of it.
    pub session: &'a Session,
    /// Its media sections.
    pub media: &'a [NegotiatedMedia],
}

impl Room {
    /// One more viewer of the room on `worker`'s replica: the room hands its publishers'
    /// packets there from now on.
    pub fn attach_pipe(&mut self, worker: usize) {
        match self.pipes.iter_mut().find(|p| p.worker == worker) {
            Some(p) => p.viewers += 1,
            None => self.pipes.push(Pipe { worker, viewers: 1 }),
        }
    }

    /// One viewer fewer on `worker`'s replica; `true` when that was its last (its pipe is
    /// closed: nothing more goes there).
    pub fn detach_pipe(&mut self, worker: usize) -> bool {
        let Some(k) = self.pipes.iter().position(|p| p.worker == worker) else {
            return false;
        };
        self.pipes[k].viewers = self.pipes[k].viewers.saturating_sub(1);
        if self.pipes[k].viewers > 0 {
            return false;
        }
        self.pipes.swap_remove(k);
        true
    }

    /// Closes the pipes to the workers `lost` names whatever their viewers (those workers are
    /// gone: another node whose link was lost); whether there were any.
    pub fn cut_pipes(&mut self, lost: impl Fn(usize) -> bool) -> bool {
        let before = self.pipes.len();
        self.pipes.retain(|p| !lost(p.worker));
        self.pipes.len() != before
    }

    /// The workers holding replicas of the room.
    pub fn pipe_workers(&self) -> impl Iterator<Item = usize> + '_ {
        self.pipes.iter().map(|p| p.worker)
    }

    /// Viewers on other workers (the replicas' together).
    pub fn piped_viewers(&self) -> usize {
        self.pipes.iter().map(|p| p.viewers as usize).sum()
    }

    /// The participants (mirrored publishers are not).
    pub fn participants(&self) -> usize {
        self.members
            .iter()
            .filter(|(_, m)| m.kind != LegKind::Pipe)
            .count()
    }

    /// The room's publishers that are participants here (not mirrors), for its replicas.
    pub fn publishers(&self) -> impl Iterator<Item = Publisher<'_>> + '_ {
        self.order.iter().filter_map(|&ix| {
            let m = &self.members[ix];
            (m.role.publishes && m.kind != LegKind::Pipe).then(|| Publisher {
                at: m.at,
                session: &m.session,
                media: m.leg.media(),
            })
        })
    }

    /// Hands a packet of the publisher at place `ix` (`rtp`, plain, as `packet` says it was
    /// read) to every replica, each in a buffer of its own.
    pub(super) fn pipe_out(&self, ix: u32, rtp: &[u8], packet: PipedPacket, out: &mut RoomOut) {
        let publisher = self.members[ix].at;
        for p in &self.pipes {
            crate::copy_count::count();
            let mut buf = out.buffer();
            buf.extend_from_slice(rtp);
            out.push(Out::Pipe {
                worker: p.worker,
                publisher,
                packet: Box::new(packet),
                buf,
            });
        }
    }

    /// RTCP a replica's mirror of the publisher at `publisher` sent about its streams (their
    /// SSRCs are the publisher's own): keyframe requests passed on through the publisher's
    /// gate (one per interval, however many replicas and viewers ask), NACKs asked of it. Its
    /// reports are not read (the replica's viewers' figures stay at the replica). `false` if
    /// there is no such member.
    pub fn pipe_feedback(
        &mut self,
        publisher: MemberAt,
        rtcp: &[u8],
        now: Instant,
        out: &mut RoomOut,
    ) -> bool {
        out.begin(self.tag);
        if self.member_at(publisher).is_none() {
            return false;
        }
        let Ok(c) = compound(rtcp) else {
            return true;
        };
        for f in c.feedback {
            match f {
                Feedback::Pli { media, .. } => self.request_keyframe(publisher, media, now, out),
                Feedback::Fir { requests, .. } => {
                    for (media, _) in requests {
                        self.request_keyframe(publisher, media, now, out);
                    }
                }
                Feedback::Nack { media, lost, .. } => {
                    // Not agreed on by the publisher: the replica's viewers counted the misses.
                    nack_upstream(&mut self.members[publisher.ix], media, &lost, out);
                }
                _ => {}
            }
        }
        true
    }

    /// Binds the mirrored publisher at `at`'s stream `ssrc` to simulcast layer `layer` (its
    /// section and layer, as the home read them) before its packet is routed.
    pub fn bind_layer(&mut self, at: MemberAt, ssrc: u32, (g, k): (usize, usize)) {
        if let Some(layers) = self.member_at(at).and_then(|m| m.simulcast.get_mut(g)) {
            layers.bind(k, ssrc);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pipe_stays_while_its_replica_has_a_viewer_and_closes_with_the_last() {
        let mut room = Room::new();
        room.attach_pipe(1);
        room.attach_pipe(1);
        room.attach_pipe(2);
        assert_eq!(room.piped_viewers(), 3);
        assert_eq!(room.pipe_workers().collect::<Vec<_>>(), vec![1, 2]);
        assert!(!room.detach_pipe(1), "one viewer is left on worker 1");
        assert!(room.detach_pipe(1), "the last one on worker 1 left");
        assert!(!room.detach_pipe(1), "no pipe to worker 1 any more");
        assert_eq!(room.pipe_workers().collect::<Vec<_>>(), vec![2]);
        assert!(room.detach_pipe(2));
        assert_eq!(room.piped_viewers(), 0);
    }

    #[test]
    fn cut_pipes_close_those_to_lost_workers_whatever_their_viewers() {
        let mut room = Room::new();
        for w in [1, 1, 1, 7, 9] {
            room.attach_pipe(w);
        }
        assert!(!room.cut_pipes(|w| w == 4), "no pipe to worker 4");
        assert!(room.cut_pipes(|w| w >= 7));
        assert_eq!(room.pipe_workers().collect::<Vec<_>>(), vec![1]);
        assert_eq!(room.piped_viewers(), 3);
        assert!(room.cut_pipes(|_| true));
        assert_eq!(room.piped_viewers(), 0);
        assert!(room.is_empty());
    }

    #[test]
    fn a_pipe_key_reads_back_from_its_encoded_form() {
        let key = crate::leg::PipeKey {
            home: 3,
            slot: 70_000,
            room_gen: u64::MAX - 5,
            member: MemberAt {
                ix: 12,
                id: crate::room::MemberId(99),
            },
        };
        assert_eq!(crate::leg::PipeKey::decode(&key.encode()), key);
    }
}
