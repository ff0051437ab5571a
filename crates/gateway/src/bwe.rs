//! Bandwidth estimation towards one receiver, sans-IO: a send-side estimator fed with what
//! the gateway sent the receiver (transport-wide sequence numbers, send instants, sizes) and
//! the receiver's transport-cc feedback (which of them arrived, and when).
//!
//! The shape is Google Congestion Control's (draft-ietf-rmcat-gcc-02), reduced to its parts:
//! - **Delay-based**: packets sent within 5 ms form a group; the growth of one-way delay
//!   between consecutive groups (arrival spacing minus send spacing) is accumulated,
//!   smoothed, and its trend over the last 20 groups fitted by least squares. A trend above an
//!   adaptive threshold means a queue is building (overuse), below its negative that one is
//!   draining (underuse).
//! - **Rate control** (AIMD): on overuse the rate drops to 85 % of what the receiver was seen
//!   to receive; in the normal state it grows 8 % a second (bounded by 1.5× the received rate
//!   plus 10 kbit/s, so it does not run away from what is really delivered); on underuse it
//!   holds.
//! - **Loss-based**: over each feedback, above 10 % loss the rate drops by half the loss
//!   fraction; under 2 % it may grow 8 % a second; between, it holds.
//!
//! The estimate is the smaller of the two. It starts at [`Bwe::START_BPS`] and stays within
//! [`Bwe::MIN_BPS`]..[`Bwe::MAX_BPS`]. What it is used for is the caller's business (the room
//! picks a simulcast layer that fits it).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use secrelay_wire::twcc::Arrival;

/// Packets sent and not yet reported on, kept at most (older ones are forgotten).
const HISTORY: usize = 4096;
/// Send instants within this of a group's first are one group.
const GROUP: Duration = Duration::from_millis(5);
/// Groups in the trend's window.
const WINDOW: usize = 20;
/// Smoothing of the accumulated delay.
const SMOOTHING: f64 = 0.9;
/// Gain on the trend before it is compared to the threshold.
const TREND_GAIN: f64 = 4.0;

/// What the delay trend says of the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Usage {
    /// Neither filling nor draining a queue.
    Normal,
    /// A queue is building.
    Overusing,
    /// A queue is draining.
    Underusing,
}

#[derive(Debug, Clone, Copy)]
struct Sent {
    seq: u64,
    at: Instant,
    size: u32,
}

#[derive(Debug, Clone, Copy)]
struct Group {
    first_send: Instant,
    last_send: Instant,
    last_arrival_us: i64,
}

/// A send-side bandwidth estimator for one receiver. See the [module documentation](self).
#[derive(Debug)]
pub struct Bwe {
    history: VecDeque<Sent>,
    /// The highest transport-wide sequence number sent, extended.
    last_seq: Option<u64>,
    group: Option<Group>,
    prev_group: Option<Group>,
    accumulated_ms: f64,
    smoothed_ms: f64,
    first_arrival_us: Option<i64>,
    window: VecDeque<(f64, f64)>,
    deltas: u32,
    threshold: f64,
    last_threshold_update: Option<i64>,
    overuse_since: Option<i64>,
    usage: Usage,
    delay_rate: f64,
    loss_rate: f64,
    /// (arrival µs, bytes) of packets the receiver got, for the received rate.
    acked: VecDeque<(i64, u32)>,
    last_update: Option<Instant>,
    /// Feedback messages read, for the API.
    feedbacks: u64,
    /// Loss fraction of the last feedback.
    last_loss: f64,
}

impl Default for Bwe {
    fn default() -> Self {
        Bwe::new()
    }
}

fn extend(last: u64, seq: u16) -> u64 {
    let base = last & !0xffff;
    [
        base.wrapping_sub(0x1_0000) | u64::from(seq),
        base | u64::from(seq),
        (base + 0x1_0000) | u64::from(seq),
    ]
    .into_iter()
    .filter(|c| *c < u64::MAX / 2)
    .min_by_key(|c| c.abs_diff(last))
    .unwrap_or(u64::from(seq))
}

impl Bwe {
    /// Where the estimate starts, bits per second (what WebRTC stacks start video at).
    pub const START_BPS: u64 = 300_000;
    /// The lowest estimate.
    pub const MIN_BPS: u64 = 30_000;
    /// The highest estimate.
    pub const MAX_BPS: u64 = 20_000_000;

    /// A new estimator at [`Bwe::START_BPS`].
    pub fn new() -> Bwe {
        Bwe {
            history: VecDeque::with_capacity(256),
            last_seq: None,
            group: None,
            prev_group: None,
            accumulated_ms: 0.0,
            smoothed_ms: 0.0,
            first_arrival_us: None,
            window: VecDeque::with_capacity(WINDOW),
            deltas: 0,
            threshold: 12.5,
            last_threshold_update: None,
            overuse_since: None,
            usage: Usage::Normal,
            delay_rate: Self::START_BPS as f64,
            loss_rate: Self::START_BPS as f64,
            acked: VecDeque::with_capacity(256),
            last_update: None,
            feedbacks: 0,
            last_loss: 0.0,
        }
    }

    /// A packet of `size` bytes sent at `at` under transport-wide sequence number `seq`.
    pub fn on_sent(&mut self, seq: u16, at: Instant, size: usize) {
        let ext = match self.last_seq {
            None => (1 << 32) | u64::from(seq),
            Some(l) => extend(l, seq),
        };
        if self.last_seq.is_none_or(|l| ext > l) {
            self.last_seq = Some(ext);
        }
        if self.history.len() >= HISTORY {
            self.history.pop_front();
        }
        self.history.push_back(Sent {
            seq: ext,
            at,
            size: u32::try_from(size).unwrap_or(u32::MAX),
        });
    }

    /// The receiver's feedback, read at `now`: arrivals matched to what was sent, the delay
    /// trend and the loss updated, and the estimate with them.
    pub fn on_feedback(&mut self, arrivals: &[Arrival], now: Instant) {
        let Some(last) = self.last_seq else {
            return;
        };
        self.feedbacks += 1;
        let mut lost = 0u32;
        let mut got = 0u32;
        for a in arrivals {
            let seq = extend(last, a.seq);
            let Some(k) = self.history.iter().position(|s| s.seq == seq) else {
                continue;
            };
            let sent = self.history[k];
            match a.at_us {
                None => lost += 1,
                Some(at) => {
                    got += 1;
                    self.on_arrival(sent, at);
                }
            }
        }
        // What was reported on is not needed again.
        if let Some(max) = arrivals.iter().map(|a| extend(last, a.seq)).max() {
            while self.history.front().is_some_and(|s| s.seq <= max) {
                self.history.pop_front();
            }
        }
        if got + lost > 0 {
            self.last_loss = f64::from(lost) / f64::from(got + lost);
        }
        self.update(now);
    }

    fn on_arrival(&mut self, sent: Sent, arrival_us: i64) {
        self.acked.push_back((arrival_us, sent.size));
        while self
            .acked
            .front()
            .is_some_and(|(t, _)| arrival_us - *t > 1_000_000)
        {
            self.acked.pop_front();
        }
        match self.group.as_mut() {
            Some(g) if sent.at.saturating_duration_since(g.first_send) <= GROUP => {
                g.last_send = g.last_send.max(sent.at);
                g.last_arrival_us = g.last_arrival_us.max(arrival_us);
                return;
            }
            _ => {}
        }
        // A new group: the one that ends here is compared with the one before it.
        if let (Some(done), Some(prev)) = (self.group, self.prev_group) {
            let send_delta = done.last_send.saturating_duration_since(prev.last_send);
            let arrival_delta_ms = (done.last_arrival_us - prev.last_arrival_us) as f64 / 1000.0;
            let d = arrival_delta_ms - send_delta.as_secs_f64() * 1000.0;
            self.delay_sample(d, done.last_arrival_us);
        }
        if self.group.is_some() {
            self.prev_group = self.group;
        }
        self.group = Some(Group {
            first_send: sent.at,
            last_send: sent.at,
            last_arrival_us: arrival_us,
        });
    }

    fn delay_sample(&mut self, d_ms: f64, arrival_us: i64) {
        let first = *self.first_arrival_us.get_or_insert(arrival_us);
        self.deltas = self.deltas.saturating_add(1);
        self.accumulated_ms += d_ms;
        self.smoothed_ms = SMOOTHING * self.smoothed_ms + (1.0 - SMOOTHING) * self.accumulated_ms;
        let x = (arrival_us - first) as f64 / 1000.0;
        if self.window.len() >= WINDOW {
            self.window.pop_front();
        }
        self.window.push_back((x, self.smoothed_ms));
        if self.window.len() < WINDOW {
            return;
        }
        let n = self.window.len() as f64;
        let mx = self.window.iter().map(|p| p.0).sum::<f64>() / n;
        let my = self.window.iter().map(|p| p.1).sum::<f64>() / n;
        let num: f64 = self.window.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
        let den: f64 = self.window.iter().map(|p| (p.0 - mx).powi(2)).sum();
        let slope = if den > 0.0 { num / den } else { 0.0 };
        let trend = f64::from(self.deltas.min(60)) * slope * TREND_GAIN;
        // The threshold follows the trend's size, slowly up and quickly down (GCC §5.4),
        // unless the trend is far outside it (a spike, not a drift).
        if let Some(t0) = self.last_threshold_update {
            let dt = ((arrival_us - t0) as f64 / 1000.0).clamp(0.0, 100.0);
            let diff = trend.abs() - self.threshold;
            if diff < 15.0 {
                let k = if trend.abs() < self.threshold {
                    0.039
                } else {
                    0.0087
                };
                self.threshold = (self.threshold + k * diff * dt).clamp(6.0, 600.0);
            }
        }
        self.last_threshold_update = Some(arrival_us);
        self.usage = if trend > self.threshold {
            // Overuse must last 10 ms before it counts.
            let since = *self.overuse_since.get_or_insert(arrival_us);
            if arrival_us - since >= 10_000 {
                Usage::Overusing
            } else {
                self.usage
            }
        } else {
            self.overuse_since = None;
            if trend < -self.threshold {
                Usage::Underusing
            } else {
                Usage::Normal
            }
        };
    }

    /// The rate the receiver was seen to receive over the last second, bits per second.
    pub fn received_bps(&self) -> Option<f64> {
        let (first, last) = (self.acked.front()?.0, self.acked.back()?.0);
        let span = (last - first) as f64 / 1e6;
        if span < 0.1 {
            return None;
        }
        let bytes: u64 = self.acked.iter().map(|(_, b)| u64::from(*b)).sum();
        Some(bytes as f64 * 8.0 / span)
    }

    fn update(&mut self, now: Instant) {
        let dt = self.last_update.map_or(0.0, |t| {
            now.saturating_duration_since(t).as_secs_f64().min(1.0)
        });
        self.last_update = Some(now);
        let received = self.received_bps();
        let grow = 1.08f64.powf(dt);
        match self.usage {
            Usage::Overusing => {
                if let Some(r) = received {
                    self.delay_rate = self.delay_rate.min(0.85 * r);
                }
            }
            Usage::Underusing => {}
            Usage::Normal => {
                let mut next = self.delay_rate * grow;
                if let Some(r) = received {
                    next = next.min((1.5 * r + 10_000.0).max(self.delay_rate));
                }
                self.delay_rate = next;
            }
        }
        let loss = self.last_loss;
        if loss > 0.10 {
            self.loss_rate *= 1.0 - 0.5 * loss;
        } else if loss < 0.02 {
            // The loss controller does not hold the estimate down on a clean path.
            self.loss_rate = (self.loss_rate * grow).max(self.delay_rate.min(self.loss_rate * 2.0));
        }
        let (lo, hi) = (Self::MIN_BPS as f64, Self::MAX_BPS as f64);
        self.delay_rate = self.delay_rate.clamp(lo, hi);
        self.loss_rate = self.loss_rate.clamp(lo, hi);
    }

    /// The estimate, bits per second.
    pub fn estimate_bps(&self) -> u64 {
        self.delay_rate.min(self.loss_rate) as u64
    }

    /// What the delay trend says now.
    pub fn usage(&self) -> Usage {
        self.usage
    }

    /// Feedback messages read.
    pub fn feedbacks(&self) -> u64 {
        self.feedbacks
    }

    /// The loss fraction of the last feedback.
    pub fn loss(&self) -> f64 {
        self.last_loss
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sender that follows the estimate through a bottleneck of `capacity` bits per second
    /// (a FIFO queue, dropping what would wait more than 400 ms), feedback every 100 ms, for
    /// `secs` seconds of simulated time; the estimates at each second, and the loss.
    fn run(capacity: f64, secs: u32, start: &mut Bwe) -> Vec<u64> {
        let t0 = Instant::now();
        let size = 1200usize;
        let mut seq: u16 = 0;
        let mut next_send = 0.0f64; // seconds
        let mut link_free = 0.0f64;
        let mut pending: Vec<Arrival> = Vec::new();
        let mut next_feedback = 0.1;
        let mut out = Vec::new();
        let mut next_second = 1.0;
        while next_send < f64::from(secs) {
            let now = next_send;
            let at = t0 + Duration::from_secs_f64(now);
            start.on_sent(seq, at, size);
            let service = size as f64 * 8.0 / capacity;
            let begin = link_free.max(now);
            let arrival = if begin - now > 0.4 {
                None
            } else {
                link_free = begin + service;
                Some((link_free * 1e6) as i64 + 20_000)
            };
            pending.push(Arrival {
                seq,
                at_us: arrival,
            });
            seq = seq.wrapping_add(1);
            let rate = start.estimate_bps() as f64;
            next_send += size as f64 * 8.0 / rate;
            if next_send >= next_feedback {
                // Only what has arrived by then is reported (the rest next time).
                let cutoff = (next_feedback * 1e6) as i64 + 20_000;
                let (now_done, later): (Vec<Arrival>, Vec<Arrival>) = pending
                    .drain(..)
                    .partition(|a| a.at_us.is_none_or(|t| t <= cutoff));
                pending = later;
                start.on_feedback(&now_done, t0 + Duration::from_secs_f64(next_feedback));
                next_feedback += 0.1;
            }
            if next_send >= next_second {
                out.push(start.estimate_bps());
                next_second += 1.0;
            }
        }
        out
    }

    #[test]
    fn on_a_clean_path_the_estimate_grows() {
        let mut b = Bwe::new();
        let e = run(10_000_000.0, 10, &mut b);
        assert!(e.last().copied().unwrap() > 2 * Bwe::START_BPS, "{e:?}");
        assert!(e.windows(2).all(|w| w[1] >= w[0] * 95 / 100), "{e:?}");
    }

    #[test]
    fn a_bottleneck_holds_the_estimate_near_its_capacity() {
        let mut b = Bwe::new();
        let e = run(600_000.0, 30, &mut b);
        let tail = &e[e.len() - 10..];
        for x in tail {
            assert!(
                (200_000..=900_000).contains(x),
                "the estimate {x} near a 600 kbit/s bottleneck: {e:?}"
            );
        }
    }

    #[test]
    fn heavy_loss_brings_the_estimate_down() {
        let mut b = Bwe::new();
        let t0 = Instant::now();
        for k in 0..200u16 {
            b.on_sent(k, t0 + Duration::from_millis(u64::from(k) * 5), 1200);
        }
        let before = b.estimate_bps();
        for round in 0..10u16 {
            let arrivals: Vec<Arrival> = (round * 20..round * 20 + 20)
                .map(|k| Arrival {
                    seq: k,
                    // Every third packet lost.
                    at_us: (k % 3 != 0).then_some(i64::from(k) * 5_000 + 30_000),
                })
                .collect();
            b.on_feedback(
                &arrivals,
                t0 + Duration::from_millis(100 * u64::from(round + 1)),
            );
        }
        assert!(b.loss() > 0.3);
        assert!(
            b.estimate_bps() < before / 2,
            "{} from {before}",
            b.estimate_bps()
        );
    }
}
