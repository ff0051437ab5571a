//! A receiver's side of transport-wide congestion control (transport-cc), sans-IO: what a
//! browser does with the transport-wide sequence numbers on the packets it receives. Each
//! arrival is noted with its instant; every [`FEEDBACK_EVERY`] the arrivals since the last
//! message go back as RTCP transport-cc feedback (an empty RR, then RTPFB FMT 15 messages
//! written with [`secrelay_wire::twcc::write_feedback`]), gaps reported as not received. The
//! sender (the gateway) estimates from them what it can send this receiver.

use std::time::{Duration, Instant};

use secrelay_wire::rtcp::write_empty_rr;
use secrelay_wire::twcc::{arrival_list, write_feedback};

/// The transport-cc header extension's URI.
pub const TWCC_URI: &str =
    "http://www.ietf.org/id/draft-holmer-rmcat-transport-wide-cc-extensions-01";
/// How often feedback is sent (Chrome sends it about every 100 ms, more often at high rates).
pub const FEEDBACK_EVERY: Duration = Duration::from_millis(100);

/// The receiver's transport-cc state.
#[derive(Debug)]
pub struct TwccReceiver {
    /// The extension id agreed on.
    pub ext_id: u8,
    arrivals: Vec<(u16, Instant)>,
    next: Instant,
    fb_count: u8,
    media: u32,
    epoch: Instant,
    /// Feedback messages written.
    pub feedbacks: u64,
}

impl TwccReceiver {
    /// A receiver of extension `ext_id`, its clock counted from `epoch`, its first feedback
    /// due [`FEEDBACK_EVERY`] after `now`.
    pub fn new(ext_id: u8, now: Instant, epoch: Instant) -> TwccReceiver {
        TwccReceiver {
            ext_id,
            arrivals: Vec::new(),
            next: now + FEEDBACK_EVERY,
            fb_count: 0,
            media: 0,
            epoch,
            feedbacks: 0,
        }
    }

    /// A packet of stream `ssrc` carrying transport-wide sequence number `seq` arrived at `at`.
    pub fn on_packet(&mut self, ssrc: u32, seq: u16, at: Instant) {
        self.media = ssrc;
        self.arrivals.push((seq, at));
    }

    /// When the next feedback is due.
    pub fn deadline(&self) -> Instant {
        self.next
    }

    /// The feedback due at `now` (plain RTCP from `sender`, to protect and send), if any
    /// arrivals were noted since the last.
    pub fn poll(&mut self, now: Instant, sender: u32) -> Option<Vec<u8>> {
        if now < self.next {
            return None;
        }
        self.next = now + FEEDBACK_EVERY;
        if self.arrivals.is_empty() {
            return None;
        }
        let epoch = self.epoch;
        let list = arrival_list(&mut self.arrivals, |at: Instant| {
            at.saturating_duration_since(epoch).as_micros() as i64
        });
        let mut out = Vec::with_capacity(64 + 2 * list.len());
        write_empty_rr(&mut out, sender);
        let mut at = 0;
        while at < list.len() {
            let n = write_feedback(&mut out, sender, self.media, self.fb_count, &list[at..]);
            if n == 0 {
                break;
            }
            self.fb_count = self.fb_count.wrapping_add(1);
            self.feedbacks += 1;
            at += n;
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use secrelay_wire::rtcp::{compound, Feedback};
    use secrelay_wire::twcc::parse_feedback;

    #[test]
    fn arrivals_come_back_in_order_with_gaps_as_losses() {
        let t0 = Instant::now();
        let mut r = TwccReceiver::new(3, t0, t0);
        assert!(r.poll(t0, 7).is_none(), "not due yet");
        for (seq, ms) in [(10u16, 1u64), (12, 3), (11, 2), (14, 5)] {
            r.on_packet(99, seq, t0 + Duration::from_millis(ms));
        }
        let out = r.poll(t0 + FEEDBACK_EVERY, 7).expect("feedback due");
        let c = compound(&out).unwrap();
        let fci = c
            .feedback
            .iter()
            .find_map(|f| match f {
                Feedback::TransportCc {
                    sender: 7,
                    media: 99,
                    fci,
                } => Some(fci.clone()),
                _ => None,
            })
            .expect("a transport-cc message");
        let (count, arrivals) = parse_feedback(&fci).unwrap();
        assert_eq!(count, 0);
        let seqs: Vec<(u16, bool)> = arrivals
            .iter()
            .map(|a| (a.seq, a.at_us.is_some()))
            .collect();
        assert_eq!(
            seqs,
            vec![(10, true), (11, true), (12, true), (13, false), (14, true)]
        );
        assert_eq!(r.feedbacks, 1);
        // Nothing new: nothing sent.
        assert!(r.poll(t0 + 3 * FEEDBACK_EVERY, 7).is_none());
    }
}
