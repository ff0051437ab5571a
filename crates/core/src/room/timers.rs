//! The room's timer: each member on it at its earliest deadline (its leg's, its next RTCP
//! report's, its next transport-wide feedback's), earliest first. The room's next deadline is
//! the top, and the members due by a time are taken off the top: neither is a pass over
//! every member (with hundreds of viewers, their RTCP reports alone made a pass every few
//! milliseconds, and every STUN check made another).
//!
//! A deadline that moved later is found stale when its time comes, and the member is put on
//! again at its new one. A change that can make one earlier puts the member on again when it
//! is made ([`Timers::arm`]): what a call into its leg made taken off it, the packet that
//! opens a feedback interval, its joining.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Instant;

use super::member::{Member, MemberId};
use crate::slab::Slab;

/// The members' deadlines, earliest first: (when, place, id). A member may have entries
/// that are stale (a later one of its own came first, or it left); only the one at its
/// [`Member::due`] is live.
#[derive(Debug, Default)]
pub(crate) struct Timers {
    heap: BinaryHeap<Reverse<(Instant, u32, MemberId)>>,
}

impl Timers {
    /// Puts `m` on the timer at its deadline, when it is on it for none or a later one.
    pub fn arm(&mut self, m: &mut Member) {
        let Some(d) = deadline(m) else { return };
        if m.due.is_none_or(|t| d < t) {
            m.due = Some(d);
            self.heap.push(Reverse((d, m.at.ix, m.at.id)));
        }
    }

    /// The earliest entry: no later than any member's deadline (it may be a stale one, which
    /// costs a call that finds nothing due).
    pub fn next(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse((t, _, _))| *t)
    }

    /// The place of the next member whose entry's time is `now` or earlier, taken off the
    /// timer (its [`Member::due`] cleared: [`Timers::arm`] puts it on again once its due
    /// work is done). Stale entries on the way are dropped.
    pub fn pop_due(&mut self, now: Instant, members: &mut Slab<Member>) -> Option<u32> {
        while let Some(&Reverse((t, ix, id))) = self.heap.peek() {
            if t > now {
                return None;
            }
            self.heap.pop();
            if let Some(m) = members
                .get_mut(ix)
                .filter(|m| m.at.id == id && m.due == Some(t))
            {
                m.due = None;
                return Some(ix);
            }
        }
        None
    }
}

/// Member `m`'s earliest deadline: its leg's, its next RTCP report's, its next
/// transport-wide feedback's.
pub(crate) fn deadline(m: &Member) -> Option<Instant> {
    [
        m.leg.poll_timeout(),
        m.rtcp.next_report(),
        m.cc.as_ref().and_then(|c| c.next_feedback),
    ]
    .into_iter()
    .flatten()
    .min()
}
