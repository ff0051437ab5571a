//! RTCP from a member, read once: its reports for its figures, its feedback about what it is
//! sent answered through its subscriptions (keyframe requests passed to the publishers, NACKs
//! answered from their buffers or asked of them), its transport-wide feedback for its
//! bandwidth estimate. And the keyframe requests the room sends publishers.

use std::time::Instant;

use secrelay_wire::rtcp::{compound, write_empty_rr, write_fir, write_nack, write_pli, Feedback};
use secrelay_wire::sdp::MediaKind;
use secrelay_wire::twcc::parse_feedback;

use crate::room::member::Member;
use crate::room::out::RoomOut;
use crate::room::source::abs_send_time;
use crate::room::{rtcp_to, MemberAt, Room};

impl Room {
    /// An RTCP compound received from the member at `at`, authenticated and unprotected, read
    /// once: its reports for the member's figures, its feedback about what it receives
    /// answered (see [Feedback](crate::room#feedback)): keyframe requests passed to the
    /// publishers, NACKs answered with retransmissions or asked of the publishers, all on
    /// `out`. A compound that does not frame is ignored (it authenticated: the member's own
    /// error). `false` if there is no such member.
    pub fn note_rtcp(
        &mut self,
        at: MemberAt,
        compound_bytes: &[u8],
        received: Instant,
        out: &mut RoomOut,
    ) -> bool {
        out.begin(self.tag);
        if self.member_at(at).is_none() {
            return false;
        }
        let Ok(c) = compound(compound_bytes) else {
            return true;
        };
        let r = at.ix;
        self.members[r]
            .rtcp
            .on_reports(&self.rtcp, &c.reports, received);
        for f in c.feedback {
            match f {
                Feedback::Pli { media, .. } => self.keyframe_asked(r, media, received, out),
                Feedback::Fir { requests, .. } => {
                    for (media, _) in requests {
                        self.keyframe_asked(r, media, received, out);
                    }
                }
                Feedback::Nack { media, lost, .. } => self.nacked(r, media, &lost, received, out),
                Feedback::TransportCc { fci, .. } => {
                    if let (Ok((_, arrivals)), Some(cc)) =
                        (parse_feedback(&fci), self.members[r].cc.as_mut())
                    {
                        cc.bwe.on_feedback(&arrivals, received);
                    }
                }
                _ => {}
            }
        }
        true
    }

    /// The receiver at place `r` asked for a keyframe of the stream it knows as `ssrc`.
    fn keyframe_asked(&mut self, r: u32, ssrc: u32, now: Instant, out: &mut RoomOut) {
        let m = &mut self.members[r];
        m.leg.counters_mut().feedback.keyframe_requests_in += 1;
        let Some(&(s, _)) = m.seen.get(&ssrc) else {
            return;
        };
        if let Some((publisher, stream)) = self.subs.get(s).and_then(|s| s.on_keyframe_request()) {
            self.request_keyframe(publisher, stream, now, out);
        }
    }

    /// The receiver at place `r` lost `lost` of the stream it knows as `ssrc`: its
    /// subscription sends each packet the publisher stream's buffer holds again, and the ones
    /// the gateway never received are asked of the publisher.
    fn nacked(&mut self, r: u32, ssrc: u32, lost: &[u16], now: Instant, out: &mut RoomOut) {
        let Room {
            members,
            subs,
            scratch,
            rtcp,
            ..
        } = self;
        let n = lost.len() as u64;
        let m = &mut members[r];
        m.leg.counters_mut().feedback.nacked += n;
        let sub = m
            .seen
            .get(&ssrc)
            .and_then(|&(s, slot)| Some((subs.get(s)?, slot)));
        let Some((sub, on_slot)) = sub else {
            m.leg.counters_mut().feedback.nack_misses += n;
            return;
        };
        let (Some(publisher), Some(target)) = (sub.publisher(), m.leg.copy_target()) else {
            return;
        };
        let Some((recv, p)) = members.pair_mut(r, publisher.ix) else {
            return;
        };
        if p.at != publisher {
            return;
        }
        let upstream = &mut scratch.upstream;
        upstream.clear();
        let reply = (target, now, abs_send_time(rtcp.epoch.0, now));
        let (resent, misses) = sub.on_nack(lost, (ssrc, on_slot), (recv, p), reply, out, upstream);
        let f = &mut recv.leg.counters_mut().feedback;
        f.retransmitted += resent;
        f.nack_misses += misses;
        if !upstream.is_empty() && !nack_upstream(p, sub.source_ssrc, upstream, out) {
            recv.leg.counters_mut().feedback.nack_misses += upstream.len() as u64;
        }
    }

    /// Asks the publishers for the keyframes routing (or a layer choice) found wanting.
    pub(super) fn ask_keyframes(&mut self, now: Instant, out: &mut RoomOut) {
        let mut wanted = std::mem::take(&mut self.scratch.keyframes);
        for &(publisher, ssrc) in &wanted {
            self.request_keyframe(publisher, ssrc, now, out);
        }
        wanted.clear();
        self.scratch.keyframes = wanted;
    }

    /// Asks `publisher` for a keyframe of its stream `ssrc`, in the form its section agreed on
    /// (PLI, else FIR), unless one went less than the keyframe interval ago (then merged).
    pub(super) fn request_keyframe(
        &mut self,
        publisher: MemberAt,
        ssrc: u32,
        now: Instant,
        out: &mut RoomOut,
    ) {
        let interval = self.rtcp.keyframe_interval;
        let Some(p) = self.member_at(publisher) else {
            return;
        };
        let (pli, fir) = p
            .leg
            .media()
            .iter()
            .find(|m| m.peer_sends && m.kind == MediaKind::Video)
            .map_or((false, false), |m| (m.feedback.pli, m.feedback.fir));
        if !pli && !fir {
            // The publisher agreed on no way to be asked.
            return;
        }
        let Some(k) = p.stream_index(ssrc) else {
            return;
        };
        let Some(v) = p.streams[k].video.as_mut() else {
            return;
        };
        if !v.keyframes.admit(now, interval) {
            p.leg.counters_mut().feedback.keyframe_requests_merged += 1;
            return;
        }
        let fir_seq = v.keyframes.fir_seq();
        let sender = p.rtcp.reporter();
        let mut req = Vec::with_capacity(32);
        write_empty_rr(&mut req, sender);
        if pli {
            write_pli(&mut req, sender, ssrc);
        } else {
            write_fir(&mut req, sender, ssrc, fir_seq);
        }
        p.leg.counters_mut().feedback.keyframe_requests_out += 1;
        rtcp_to(p, &req, out);
    }
}

/// Asks publisher `p` again for the packets `seqs` of its stream `ssrc` it sent (a NACK), when
/// it agreed on NACKs; `false` if it did not (nothing sent).
pub(super) fn nack_upstream(p: &mut Member, ssrc: u32, seqs: &[u16], out: &mut RoomOut) -> bool {
    if !p
        .leg
        .media()
        .iter()
        .any(|m| m.peer_sends && m.feedback.nack)
    {
        return false;
    }
    let sender = p.rtcp.reporter();
    let mut nack = Vec::with_capacity(16 + 4 * seqs.len());
    write_empty_rr(&mut nack, sender);
    write_nack(&mut nack, sender, ssrc, seqs);
    p.leg.counters_mut().feedback.nacks_upstream += seqs.len() as u64;
    rtcp_to(p, &nack, out);
    true
}
