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
//! - **Probes**: the rate control grows only up to 1.5× what the receiver was seen to receive,
//!   so a receiver sent a low simulcast layer would never be seen able to take a higher one.
//!   The caller sends more for a short while (a probe: retransmissions of what it forwards) and
//!   marks it ([`Bwe::begin_probe`], [`Bwe::end_probe`]); when the feedback on the probe's
//!   packets is in, the rate they were delivered at (bytes over the longer of their send and
//!   arrival spans, as GCC's probe estimator does) raises the estimate to 90 % of it if the
//!   path neither queued (no overuse) nor lost more than 10 % of them ([`ProbeOutcome`]).
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

/// Packets of a probe, and what the feedback said of them so far.
#[derive(Debug, Clone, Copy)]
struct Probe {
    /// The first transport-wide sequence number sent in it (extended).
    first: u64,
    /// The last one, once it has ended.
    last: Option<u64>,
    /// Bytes of the packets that arrived, but the first to arrive.
    bytes: u64,
    got: u32,
    lost: u32,
    /// Send instants of the first and last packets that arrived.
    sent: Option<(Instant, Instant)>,
    /// Arrival instants (µs) of the first and last packets that arrived.
    arrived: Option<(i64, i64)>,
}

/// What a probe found, once the feedback on all its packets was in.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ProbeOutcome {
    /// Delivered at this rate (bits per second) without queueing or loss: the estimate was
    /// raised to 90 % of it (if it was lower).
    Delivered(f64),
    /// The path queued or lost packets (or too few arrived to say): the estimate stays.
    Failed,
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
    probe: Option<Probe>,
    outcome: Option<ProbeOutcome>,
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
            probe: None,
            outcome: None,
        }
    }

    /// What is sent from now on is a probe (until [`Bwe::end_probe`]). A probe still waiting
    /// for its feedback is given up.
    pub fn begin_probe(&mut self) {
        let first = self.last_seq.map_or(0, |l| l + 1);
        self.probe = Some(Probe {
            first,
            last: None,
            bytes: 0,
            got: 0,
            lost: 0,
            sent: None,
            arrived: None,
        });
    }

    /// The probe ends with what was sent so far; its outcome comes with the feedback.
    pub fn end_probe(&mut self) {
        if let Some(p) = self.probe.as_mut() {
            if p.last.is_none() {
                p.last = Some(self.last_seq.unwrap_or(0));
            }
        }
    }

    /// Whether a probe is being sent or waits for its feedback.
    pub fn probing(&self) -> bool {
        self.probe.is_some()
    }

    /// The outcome of the last probe, once (then `None` until the next one ends).
    pub fn take_probe_outcome(&mut self) -> Option<ProbeOutcome> {
        self.outcome.take()
    }

    /// Gives up a probe whose feedback never came (the receiver stopped reporting).
    pub fn cancel_probe(&mut self) {
        self.probe = None;
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
            if let Some(p) = self
                .probe
                .as_mut()
                .filter(|p| seq >= p.first && p.last.is_none_or(|l| seq <= l))
            {
                match a.at_us {
                    None => p.lost += 1,
                    Some(at) => {
                        p.got += 1;
                        match (p.sent.as_mut(), p.arrived.as_mut()) {
                            (Some(s), Some(r)) => {
                                p.bytes += u64::from(sent.size);
                                s.0 = s.0.min(sent.at);
                                s.1 = s.1.max(sent.at);
                                r.0 = r.0.min(at);
                                r.1 = r.1.max(at);
                            }
                            _ => {
                                p.sent = Some((sent.at, sent.at));
                                p.arrived = Some((at, at));
                            }
                        }
                    }
                }
            }
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
        // A probe whose packets have all been reported on.
        let reported = arrivals.iter().map(|a| extend(last, a.seq)).max();
        if let (Some(p), Some(max)) = (self.probe, reported) {
            if p.last.is_some_and(|l| max >= l) {
                self.probe = None;
                self.outcome = Some(self.conclude(&p));
            }
        }
    }

    /// A probe's outcome, the estimate raised when it was delivered cleanly.
    fn conclude(&mut self, p: &Probe) -> ProbeOutcome {
        let (Some(sent), Some(arrived)) = (p.sent, p.arrived) else {
            return ProbeOutcome::Failed;
        };
        let send_span = sent.1.saturating_duration_since(sent.0).as_secs_f64();
        let arrival_span = (arrived.1 - arrived.0) as f64 / 1e6;
        let span = send_span.max(arrival_span);
        let clean = p.got >= 5
            && u64::from(p.lost) * 10 <= u64::from(p.got + p.lost)
            && self.usage != Usage::Overusing;
        if !clean || span < 0.01 {
            return ProbeOutcome::Failed;
        }
        let rate = p.bytes as f64 * 8.0 / span;
        let (lo, hi) = (Self::MIN_BPS as f64, Self::MAX_BPS as f64);
        self.delay_rate = self.delay_rate.max(0.9 * rate).clamp(lo, hi);
        self.loss_rate = self.loss_rate.max(0.9 * rate).clamp(lo, hi);
        ProbeOutcome::Delivered(rate)
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

/// When to probe a receiver that is sent less than a publisher's best layer, and how hard:
/// sans-IO, driven by the caller's forwarding (see [`Prober::consider`] and [`Prober::copies`]).
///
/// A probe lasts [`Prober::LENGTH`]; the caller sends `copies` retransmissions of each video
/// packet it forwards meanwhile, enough for about 1.25× what the next layer up needs. After a
/// probe that was delivered cleanly the next may come [`Prober::MIN_BACKOFF`] later; each
/// failure doubles the wait, up to [`Prober::MAX_BACKOFF`] (a receiver behind a narrow link is
/// not flooded every other second).
#[derive(Debug, Clone)]
pub struct Prober {
    until: Option<Instant>,
    ended: Option<Instant>,
    next_at: Option<Instant>,
    backoff: Duration,
    copies: u32,
    /// Probes started.
    pub started: u64,
    /// Probes delivered cleanly (the estimate raised to what they showed).
    pub delivered: u64,
}

impl Default for Prober {
    fn default() -> Self {
        Prober {
            until: None,
            ended: None,
            next_at: None,
            backoff: Self::MIN_BACKOFF,
            copies: 0,
            started: 0,
            delivered: 0,
        }
    }
}

impl Prober {
    /// How long a probe sends.
    pub const LENGTH: Duration = Duration::from_millis(500);
    /// The wait after a clean probe.
    pub const MIN_BACKOFF: Duration = Duration::from_secs(2);
    /// The longest wait after failures.
    pub const MAX_BACKOFF: Duration = Duration::from_secs(8);
    /// A probe whose feedback has not all come this long after it ended is given up.
    const FEEDBACK_WAIT: Duration = Duration::from_millis(1500);
    /// Retransmissions per forwarded packet, at most.
    const MAX_COPIES: f64 = 8.0;

    /// Takes the outcome of a finished probe, and starts one at `now` if the receiver is sent
    /// `current_bps` (its layer's rate) and the next layer up needs `wanted_bps` (its margin
    /// included; `None`: nothing higher to go to) that the estimate does not reach, the path is
    /// clean (no overuse, under 2 % loss, feedback flowing) and the wait since the last probe
    /// is over. `true` if a probe started.
    pub fn consider(
        &mut self,
        bwe: &mut Bwe,
        current_bps: f64,
        wanted_bps: Option<f64>,
        now: Instant,
    ) -> bool {
        if let Some(outcome) = bwe.take_probe_outcome() {
            self.ended = None;
            match outcome {
                ProbeOutcome::Delivered(_) => {
                    self.delivered += 1;
                    self.backoff = Self::MIN_BACKOFF;
                }
                ProbeOutcome::Failed => self.backoff = (self.backoff * 2).min(Self::MAX_BACKOFF),
            }
            self.next_at = Some(now + self.backoff);
        }
        if self.until.is_some() {
            return false;
        }
        if bwe.probing() {
            if self
                .ended
                .is_some_and(|t| now.saturating_duration_since(t) > Self::FEEDBACK_WAIT)
            {
                bwe.cancel_probe();
                self.ended = None;
                self.backoff = (self.backoff * 2).min(Self::MAX_BACKOFF);
                self.next_at = Some(now + self.backoff);
            }
            return false;
        }
        let Some(want) = wanted_bps else {
            return false;
        };
        if bwe.estimate_bps() as f64 >= want
            || self.next_at.is_some_and(|t| now < t)
            || bwe.usage() != Usage::Normal
            || bwe.loss() > 0.02
            || bwe.feedbacks() < 10
            || current_bps < 1.0
        {
            return false;
        }
        let copies = (want * 1.25 / current_bps - 1.0).ceil();
        self.copies = copies.clamp(1.0, Self::MAX_COPIES) as u32;
        self.until = Some(now + Self::LENGTH);
        bwe.begin_probe();
        self.started += 1;
        true
    }

    /// Retransmissions to send now of each video packet forwarded (0 when no probe is
    /// sending); ends the probe when its time is up.
    pub fn copies(&mut self, bwe: &mut Bwe, now: Instant) -> u32 {
        match self.until {
            Some(t) if now < t => self.copies,
            Some(_) => {
                self.until = None;
                self.ended = Some(now);
                bwe.end_probe();
                0
            }
            None => 0,
        }
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

    /// A probe of `n` packets of 1,200 bytes sent `spacing_us` apart after a second of clean
    /// traffic at 200 kbit/s, through a link of `capacity` bits per second (arrivals no closer
    /// than it allows); the outcome and the estimate after it.
    fn probe_through(capacity: f64, n: u16, spacing_us: u64) -> (ProbeOutcome, u64) {
        let mut b = Bwe::new();
        let t0 = Instant::now();
        let mut seq: u16 = 0;
        let mut arrivals = Vec::new();
        // A second of packets at 200 kbit/s (1,200 bytes every 48 ms), reported every 100 ms.
        let mut t_us = 0u64;
        let mut link_free = 0f64;
        let mut send = |b: &mut Bwe, seq: &mut u16, t_us: u64, arrivals: &mut Vec<Arrival>| {
            b.on_sent(*seq, t0 + Duration::from_micros(t_us), 1200);
            let service = 1200.0 * 8.0 / capacity * 1e6;
            let begin = link_free.max(t_us as f64);
            link_free = begin + service;
            arrivals.push(Arrival {
                seq: *seq,
                at_us: Some(link_free as i64 + 20_000),
            });
            *seq = seq.wrapping_add(1);
        };
        while t_us < 1_000_000 {
            send(&mut b, &mut seq, t_us, &mut arrivals);
            t_us += 48_000;
            if arrivals.len() >= 2 {
                b.on_feedback(&arrivals, t0 + Duration::from_micros(t_us));
                arrivals.clear();
            }
        }
        let before = b.estimate_bps();
        b.begin_probe();
        for _ in 0..n {
            send(&mut b, &mut seq, t_us, &mut arrivals);
            t_us += spacing_us;
        }
        b.end_probe();
        assert!(b.probing());
        b.on_feedback(&arrivals, t0 + Duration::from_micros(t_us + 200_000));
        assert!(!b.probing(), "all reported: concluded");
        let outcome = b.take_probe_outcome().expect("an outcome");
        assert!(b.take_probe_outcome().is_none(), "once");
        assert!(b.estimate_bps() >= before);
        (outcome, b.estimate_bps())
    }

    #[test]
    fn a_probe_on_a_clean_path_raises_the_estimate_to_what_it_delivered() {
        // 40 packets 4 ms apart: 2.4 Mbit/s through a 10 Mbit/s link.
        let (outcome, estimate) = probe_through(10_000_000.0, 40, 4_000);
        match outcome {
            ProbeOutcome::Delivered(rate) => {
                assert!((2_000_000.0..2_600_000.0).contains(&rate), "{rate}")
            }
            ProbeOutcome::Failed => panic!("failed on a clean path"),
        }
        assert!(estimate >= 1_800_000, "{estimate}");
    }

    #[test]
    fn a_probe_through_a_narrow_link_does_not_raise_the_estimate_past_it() {
        // The same probe through a 400 kbit/s link: it queues.
        let (outcome, estimate) = probe_through(400_000.0, 40, 4_000);
        if let ProbeOutcome::Delivered(rate) = outcome {
            assert!(rate <= 420_000.0, "{rate}");
        }
        assert!(estimate <= 420_000, "{estimate}");
    }

    #[test]
    fn the_prober_probes_for_a_higher_layer_and_backs_off_after_failures() {
        let mut b = Bwe::new();
        let mut p = Prober::default();
        let t0 = Instant::now();
        // No feedback yet: no probe.
        assert!(!p.consider(&mut b, 150_000.0, Some(600_000.0), t0));
        for k in 0..20u16 {
            b.on_sent(k, t0 + Duration::from_millis(u64::from(k) * 50), 1000);
            b.on_feedback(
                &[Arrival {
                    seq: k,
                    at_us: Some(i64::from(k) * 50_000 + 20_000),
                }],
                t0 + Duration::from_millis(u64::from(k) * 50 + 30),
            );
        }
        let now = t0 + Duration::from_secs(1);
        assert!(!p.consider(&mut b, 150_000.0, None, now), "nothing higher");
        assert!(p.consider(&mut b, 150_000.0, Some(600_000.0), now));
        // 600k × 1.25 / 150k − 1 = 4 copies per packet, for the probe's length.
        assert_eq!(p.copies(&mut b, now), 4);
        assert!(
            !p.consider(&mut b, 150_000.0, Some(600_000.0), now),
            "one at a time"
        );
        let end = now + Prober::LENGTH;
        assert_eq!(p.copies(&mut b, end), 0, "over");
        // Its feedback never comes: given up, and the next waits twice the backoff.
        let later = end + Duration::from_secs(2);
        assert!(!p.consider(&mut b, 150_000.0, Some(600_000.0), later));
        assert!(!b.probing());
        assert!(!p.consider(
            &mut b,
            150_000.0,
            Some(600_000.0),
            later + Prober::MIN_BACKOFF
        ));
        assert!(p.consider(
            &mut b,
            150_000.0,
            Some(600_000.0),
            later + 2 * Prober::MIN_BACKOFF
        ));
        assert_eq!(p.started, 2);
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
