//! The server's counters and histograms, written by the workers and read by `/metrics`, the
//! JSON API and the demo.
//!
//! Each worker owns one [`WorkerStats`]: only that worker writes it (relaxed atomic adds on
//! cache lines no other writer touches), readers sum over workers. Nothing on the packet path
//! takes a lock.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

/// Number of histogram buckets: upper bounds 1 µs × 1.25^i, i = 0 … N-1 (1 µs to ~5 min),
/// then +Inf.
const BUCKETS: usize = 88;

fn bucket_bound_ns(i: usize) -> f64 {
    1_000.0 * 1.25f64.powi(i as i32)
}

/// A latency histogram with geometric buckets (25 % wide), written by one thread.
pub struct LatencyHistogram {
    buckets: [AtomicU64; BUCKETS + 1],
    sum_ns: AtomicU64,
    count: AtomicU64,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        LatencyHistogram {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            sum_ns: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }
}

impl fmt::Debug for LatencyHistogram {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LatencyHistogram")
            .field("count", &self.count.load(Ordering::Relaxed))
            .finish()
    }
}

impl LatencyHistogram {
    /// Records `n` observations of `d`.
    pub fn record_n(&self, d: Duration, n: u64) {
        if n == 0 {
            return;
        }
        let ns = d.as_nanos().min(u128::from(u64::MAX)) as u64;
        let i = if ns <= 1_000 {
            0
        } else {
            // ceil(log_1.25(ns / 1000)), clamped to the +Inf bucket.
            let x = ((ns as f64 / 1_000.0).ln() / 1.25f64.ln()).ceil() as usize;
            x.min(BUCKETS)
        };
        self.buckets[i].fetch_add(n, Ordering::Relaxed);
        self.sum_ns
            .fetch_add(ns.saturating_mul(n), Ordering::Relaxed);
        self.count.fetch_add(n, Ordering::Relaxed);
    }

    /// Records one observation.
    pub fn record(&self, d: Duration) {
        self.record_n(d, 1);
    }
}

/// A point-in-time copy of one or more histograms, summed.
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramSnapshot {
    /// Count per bucket (the last one is +Inf).
    pub buckets: Vec<u64>,
    /// Sum of the observations in nanoseconds.
    pub sum_ns: u64,
    /// Number of observations.
    pub count: u64,
}

impl Default for HistogramSnapshot {
    fn default() -> Self {
        HistogramSnapshot {
            buckets: vec![0; BUCKETS + 1],
            sum_ns: 0,
            count: 0,
        }
    }
}

impl HistogramSnapshot {
    /// Adds `h`'s current contents.
    pub fn add(&mut self, h: &LatencyHistogram) {
        for (a, b) in self.buckets.iter_mut().zip(&h.buckets) {
            *a += b.load(Ordering::Relaxed);
        }
        self.sum_ns += h.sum_ns.load(Ordering::Relaxed);
        self.count += h.count.load(Ordering::Relaxed);
    }

    /// The observations since `earlier` (a snapshot of the same histograms).
    pub fn since(&self, earlier: &HistogramSnapshot) -> HistogramSnapshot {
        HistogramSnapshot {
            buckets: self
                .buckets
                .iter()
                .zip(&earlier.buckets)
                .map(|(a, b)| a.saturating_sub(*b))
                .collect(),
            sum_ns: self.sum_ns.saturating_sub(earlier.sum_ns),
            count: self.count.saturating_sub(earlier.count),
        }
    }

    /// The `q` quantile (0 < q ≤ 1) as the upper bound of the bucket that holds it (so at most
    /// 25 % above the true value); `None` without observations.
    pub fn quantile(&self, q: f64) -> Option<Duration> {
        if self.count == 0 {
            return None;
        }
        let rank = ((q * self.count as f64).ceil() as u64).clamp(1, self.count);
        let mut seen = 0;
        for (i, n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                let ns = if i == BUCKETS {
                    bucket_bound_ns(BUCKETS - 1)
                } else {
                    bucket_bound_ns(i)
                };
                return Some(Duration::from_nanos(ns as u64));
            }
        }
        None
    }

    /// The mean, `None` without observations.
    pub fn mean(&self) -> Option<Duration> {
        (self.count > 0).then(|| Duration::from_nanos(self.sum_ns / self.count))
    }

    /// (upper bound in seconds, count in that bucket alone): the encoder accumulates.
    fn prometheus_buckets(&self) -> Vec<(f64, u64)> {
        self.buckets
            .iter()
            .enumerate()
            .map(|(i, n)| {
                // prometheus-client writes `le="+Inf"` for f64::MAX (and "inf" for infinity).
                let bound = if i == BUCKETS {
                    f64::MAX
                } else {
                    bucket_bound_ns(i) / 1e9
                };
                (bound, *n)
            })
            .collect()
    }
}

macro_rules! counters {
    ($(#[$meta:meta])* pub struct $name:ident { $($(#[$fmeta:meta])* $field:ident,)* }) => {
        $(#[$meta])*
        #[derive(Debug, Default)]
        pub struct $name {
            $($(#[$fmeta])* pub $field: AtomicU64,)*
        }
        impl $name {
            /// The field names and their current values.
            pub fn values(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($field), self.$field.load(Ordering::Relaxed)),)*]
            }
        }
    };
}

counters! {
    /// Why datagrams were dropped at the edge or inside a participant.
    pub struct Drops {
        /// From an address no participant owns, and not a STUN check naming one.
        unknown_source,
        /// SRTP/SRTCP with a wrong authentication tag.
        auth_failed,
        /// SRTP/SRTCP replayed or too old.
        replayed,
        /// Malformed SRTP/SRTCP.
        malformed,
        /// DTLS or SRTP from an address ICE has not validated.
        unvalidated_source,
        /// SRTP before the DTLS handshake finished.
        before_keys,
        /// STUN refused by the ICE agent (bad credentials or integrity).
        stun_rejected,
        /// Datagrams of an unknown kind.
        unknown_kind,
        /// Arrived for a participant that had closed.
        after_close,
        /// Copies not forwarded: the receiver did not negotiate the codec.
        no_codec,
        /// Copies not forwarded: the receiver was not connected yet.
        receiver_not_ready,
        /// Handed to another worker whose queue was full.
        handoff_queue_full,
        /// `sendmmsg` failed for the datagram.
        send_failed,
        /// Dropped because the gateway's own code panicked on them (a bug; the worker goes on).
        internal_error,
    }
}

/// What one worker counts. Written by that worker only.
#[derive(Debug, Default)]
pub struct WorkerStats {
    /// Datagrams received from the socket.
    pub datagrams_in: AtomicU64,
    /// Bytes received.
    pub bytes_in: AtomicU64,
    /// Datagrams sent.
    pub datagrams_out: AtomicU64,
    /// Bytes sent.
    pub bytes_out: AtomicU64,
    /// SRTP/SRTCP packets unprotected (all participants of this worker).
    pub srtp_in: AtomicU64,
    /// SRTP/SRTCP packets protected.
    pub srtp_out: AtomicU64,
    /// Media packets received from publishers and routed to their rooms.
    pub media_routed: AtomicU64,
    /// Copies of media sent to receivers.
    pub media_forwarded: AtomicU64,
    /// Of those, copies sent outside a receive slot (the receiver offered too few sections).
    pub media_unslotted: AtomicU64,
    /// Datagrams received here but owned by another worker (handed over).
    pub handed_off: AtomicU64,
    /// Engine calls that unprotected a receive batch's SRTP media.
    pub srtp_batches: AtomicU64,
    /// SRTP media datagrams unprotected in those calls.
    pub srtp_batched: AtomicU64,
    /// Drops by reason.
    pub drops: Drops,
    /// Handshakes that finished.
    pub handshakes_ok: AtomicU64,
    /// Handshakes that failed (DTLS failure or fingerprint mismatch before keys).
    pub handshakes_failed: AtomicU64,
    /// Sessions ended, by reason.
    pub closed: Closed,
    /// Handshake duration (first DTLS flight to keys).
    pub handshake_time: LatencyHistogram,
    /// From the socket read that brought a packet in to the socket write that sent its copies
    /// out, per copy.
    pub relay_latency: LatencyHistogram,
    /// Time to process one media packet: its share of the receive batch's unprotect call and
    /// its routing in its room (the copies' protect call runs with the send), per packet.
    pub media_processing: LatencyHistogram,
    /// Participants alive on this worker.
    pub participants: AtomicU64,
    /// Participants whose DTLS-SRTP is up.
    pub connected: AtomicU64,
    /// Rooms on this worker.
    pub rooms: AtomicU64,
}

counters! {
    /// Sessions ended, by reason.
    pub struct Closed {
        /// ICE consent expired.
        consent_expired,
        /// DTLS failed (timeout, alert, bad records).
        dtls_failed,
        /// The peer's certificate did not match its fingerprint.
        fingerprint_mismatch,
        /// The peer sent close_notify.
        close_notify,
        /// Removed through HTTP (DELETE).
        deleted,
        /// Closed by the server's shutdown.
        shutdown,
        /// Abandoned with its room after a panic in the gateway's own code (a bug).
        internal_error,
    }
}

/// Stats of every worker, plus the control plane's own counters.
#[derive(Debug, Default)]
pub struct GatewayStats {
    /// One per worker.
    pub workers: Vec<Arc<WorkerStats>>,
    /// HTTP requests refused, by status class.
    pub http_refused: AtomicU64,
    /// Offers accepted (participants created).
    pub joins: AtomicU64,
}

/// Sums of the workers' figures, for the demo and tests.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Totals {
    /// Datagrams received.
    pub datagrams_in: u64,
    /// Datagrams sent.
    pub datagrams_out: u64,
    /// Media packets routed in.
    pub media_routed: u64,
    /// Media copies forwarded.
    pub media_forwarded: u64,
    /// Media copies forwarded outside a receive slot.
    pub media_unslotted: u64,
    /// Datagrams handed between workers.
    pub handed_off: u64,
    /// Engine calls that unprotected receive batches.
    pub srtp_batches: u64,
    /// SRTP media datagrams unprotected in them.
    pub srtp_batched: u64,
    /// Drops, all reasons.
    pub drops: u64,
    /// Drops by reason (only the non-zero ones).
    pub drops_by_reason: Vec<(&'static str, u64)>,
    /// Handshakes finished.
    pub handshakes_ok: u64,
    /// Handshakes failed.
    pub handshakes_failed: u64,
    /// Participants alive.
    pub participants: u64,
    /// Participants connected.
    pub connected: u64,
    /// Rooms.
    pub rooms: u64,
    /// Sessions closed by reason (only the non-zero ones).
    pub closed_by_reason: Vec<(&'static str, u64)>,
    /// Relay latency.
    pub relay_latency: HistogramSnapshot,
    /// Handshake durations.
    pub handshake_time: HistogramSnapshot,
}

fn sum_named(rows: impl Iterator<Item = Vec<(&'static str, u64)>>) -> Vec<(&'static str, u64)> {
    let mut out: Vec<(&'static str, u64)> = Vec::new();
    for row in rows {
        for (name, v) in row {
            match out.iter_mut().find(|(n, _)| *n == name) {
                Some(e) => e.1 += v,
                None => out.push((name, v)),
            }
        }
    }
    out
}

impl GatewayStats {
    /// Participants alive, summed over workers (one atomic each: cheap enough per request).
    pub fn participants(&self) -> u64 {
        self.workers
            .iter()
            .map(|w| w.participants.load(Ordering::Relaxed))
            .sum()
    }

    /// The sums over workers.
    pub fn totals(&self) -> Totals {
        let load = |f: fn(&WorkerStats) -> &AtomicU64| -> u64 {
            self.workers
                .iter()
                .map(|w| f(w).load(Ordering::Relaxed))
                .sum()
        };
        let drops_by_reason = sum_named(self.workers.iter().map(|w| w.drops.values()));
        let closed_by_reason = sum_named(self.workers.iter().map(|w| w.closed.values()));
        let mut relay_latency = HistogramSnapshot::default();
        let mut handshake_time = HistogramSnapshot::default();
        for w in &self.workers {
            relay_latency.add(&w.relay_latency);
            handshake_time.add(&w.handshake_time);
        }
        Totals {
            datagrams_in: load(|w| &w.datagrams_in),
            datagrams_out: load(|w| &w.datagrams_out),
            media_routed: load(|w| &w.media_routed),
            media_forwarded: load(|w| &w.media_forwarded),
            media_unslotted: load(|w| &w.media_unslotted),
            handed_off: load(|w| &w.handed_off),
            srtp_batches: load(|w| &w.srtp_batches),
            srtp_batched: load(|w| &w.srtp_batched),
            drops: drops_by_reason.iter().map(|e| e.1).sum(),
            drops_by_reason: drops_by_reason.into_iter().filter(|e| e.1 > 0).collect(),
            handshakes_ok: load(|w| &w.handshakes_ok),
            handshakes_failed: load(|w| &w.handshakes_failed),
            participants: load(|w| &w.participants),
            connected: load(|w| &w.connected),
            rooms: load(|w| &w.rooms),
            closed_by_reason: closed_by_reason.into_iter().filter(|e| e.1 > 0).collect(),
            relay_latency,
            handshake_time,
        }
    }
}

/// Exposes [`GatewayStats`] to a Prometheus registry, read on each scrape.
#[derive(Debug)]
pub struct StatsCollector(pub Arc<GatewayStats>);

fn counter(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    value: u64,
) -> Result<(), fmt::Error> {
    let c = ConstCounter::new(value);
    c.encode(encoder.encode_descriptor(name, help, None, c.metric_type())?)
}

fn gauge(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    value: u64,
) -> Result<(), fmt::Error> {
    let g = ConstGauge::new(value as i64);
    g.encode(encoder.encode_descriptor(name, help, None, g.metric_type())?)
}

fn labelled_counters(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    label: &'static str,
    values: &[(&'static str, u64)],
) -> Result<(), fmt::Error> {
    let mut m = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (v, n) in values {
        let labels = [(label, *v)];
        let c = ConstCounter::new(*n);
        c.encode(m.encode_family(&labels)?)?;
    }
    Ok(())
}

fn histogram(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    h: &HistogramSnapshot,
) -> Result<(), fmt::Error> {
    let mut m = encoder.encode_descriptor(name, help, None, MetricType::Histogram)?;
    m.encode_histogram::<prometheus_client::encoding::NoLabelSet>(
        h.sum_ns as f64 / 1e9,
        h.count,
        &h.prometheus_buckets(),
        None,
    )
}

impl Collector for StatsCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), fmt::Error> {
        let s = &self.0;
        let t = s.totals();
        let e = &mut encoder;
        let sum = |f: fn(&WorkerStats) -> &AtomicU64| -> u64 {
            s.workers.iter().map(|w| f(w).load(Ordering::Relaxed)).sum()
        };
        labelled_counters(
            e,
            "secrelay_datagrams",
            "UDP datagrams through the media socket, by direction",
            "direction",
            &[("in", t.datagrams_in), ("out", t.datagrams_out)],
        )?;
        labelled_counters(
            e,
            "secrelay_bytes",
            "UDP payload bytes through the media socket, by direction",
            "direction",
            &[("in", sum(|w| &w.bytes_in)), ("out", sum(|w| &w.bytes_out))],
        )?;
        labelled_counters(
            e,
            "secrelay_srtp_packets",
            "SRTP/SRTCP packets unprotected (in) and protected (out)",
            "direction",
            &[("in", sum(|w| &w.srtp_in)), ("out", sum(|w| &w.srtp_out))],
        )?;
        counter(
            e,
            "secrelay_media_routed",
            "Media packets received from publishers and routed to their rooms",
            t.media_routed,
        )?;
        counter(
            e,
            "secrelay_media_forwarded",
            "Media copies re-protected and sent to receivers",
            t.media_forwarded,
        )?;
        counter(
            e,
            "secrelay_media_unslotted",
            "Media copies sent outside a receive slot, under an SSRC the receiver's answer does not announce (it offered fewer receiving sections of the kind than the room has senders)",
            t.media_unslotted,
        )?;
        counter(
            e,
            "secrelay_worker_handoffs",
            "Datagrams received on one worker's socket and handed to the worker that owns the participant",
            t.handed_off,
        )?;
        counter(
            e,
            "secrelay_srtp_batches",
            "SRTP engine calls that unprotected a receive batch's media (the copies routed from each are protected in one more call)",
            t.srtp_batches,
        )?;
        counter(
            e,
            "secrelay_srtp_batched_packets",
            "SRTP media datagrams unprotected in those batch calls",
            t.srtp_batched,
        )?;
        let drops = sum_named(s.workers.iter().map(|w| w.drops.values()));
        labelled_counters(
            e,
            "secrelay_drops",
            "Datagrams dropped, by reason",
            "reason",
            &drops,
        )?;
        labelled_counters(
            e,
            "secrelay_handshakes",
            "DTLS-SRTP handshakes, by result",
            "result",
            &[("ok", t.handshakes_ok), ("failed", t.handshakes_failed)],
        )?;
        let closed = sum_named(s.workers.iter().map(|w| w.closed.values()));
        labelled_counters(
            e,
            "secrelay_sessions_closed",
            "Sessions ended, by reason",
            "reason",
            &closed,
        )?;
        counter(
            e,
            "secrelay_http_refused",
            "HTTP requests answered with an error status",
            s.http_refused.load(Ordering::Relaxed),
        )?;
        counter(
            e,
            "secrelay_joins",
            "Offers accepted (participants created)",
            s.joins.load(Ordering::Relaxed),
        )?;
        gauge(
            e,
            "secrelay_participants",
            "Participants alive",
            t.participants,
        )?;
        gauge(
            e,
            "secrelay_participants_connected",
            "Participants with DTLS-SRTP up",
            t.connected,
        )?;
        gauge(e, "secrelay_rooms", "Rooms", t.rooms)?;
        histogram(
            e,
            "secrelay_handshake_duration_seconds",
            "DTLS-SRTP handshake duration, first flight to keys",
            &t.handshake_time,
        )?;
        histogram(
            e,
            "secrelay_relay_latency_seconds",
            "Socket read to socket write, per forwarded media copy",
            &t.relay_latency,
        )?;
        let mut processing = HistogramSnapshot::default();
        for w in &s.workers {
            processing.add(&w.media_processing);
        }
        histogram(
            e,
            "secrelay_media_processing_seconds",
            "Per media packet received: its share of the receive batch's SRTP unprotect call, and its routing (the copies' protect call runs with the send)",
            &processing,
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_fall_in_the_right_bucket() {
        let h = LatencyHistogram::default();
        for us in 1..=100u64 {
            h.record(Duration::from_micros(us));
        }
        let mut s = HistogramSnapshot::default();
        s.add(&h);
        let p50 = s.quantile(0.5).unwrap();
        assert!(
            p50 >= Duration::from_micros(50) && p50 <= Duration::from_micros(63),
            "{p50:?}"
        );
        let p99 = s.quantile(0.99).unwrap();
        assert!(
            p99 >= Duration::from_micros(99) && p99 <= Duration::from_micros(124),
            "{p99:?}"
        );
        assert_eq!(s.count, 100);
        assert_eq!(s.mean().unwrap(), Duration::from_nanos(50_500));
        assert_eq!(HistogramSnapshot::default().quantile(0.5), None);
    }

    #[test]
    fn exposition_buckets_are_cumulative_once() {
        let w = Arc::new(WorkerStats::default());
        for us in [5u64, 50, 500, 5000] {
            w.relay_latency.record(Duration::from_micros(us));
        }
        let stats = Arc::new(GatewayStats {
            workers: vec![w],
            ..GatewayStats::default()
        });
        let mut reg = prometheus_client::registry::Registry::default();
        reg.register_collector(Box::new(StatsCollector(stats)));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &reg).unwrap();
        let value = |prefix: &str| -> u64 {
            text.lines()
                .find(|l| l.starts_with(prefix))
                .and_then(|l| l.rsplit(' ').next())
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{prefix} in\n{text}"))
        };
        assert_eq!(value("secrelay_relay_latency_seconds_count"), 4);
        assert_eq!(
            value("secrelay_relay_latency_seconds_bucket{le=\"+Inf\"}"),
            4
        );
        // 1 µs × 1.25^11 ≈ 11.6 µs: only the 5 µs observation is below.
        assert_eq!(
            value("secrelay_relay_latency_seconds_bucket{le=\"0.000011641532182693482\"}"),
            1
        );
    }

    #[test]
    fn huge_values_land_in_the_last_bucket() {
        let h = LatencyHistogram::default();
        h.record(Duration::from_secs(100_000));
        let mut s = HistogramSnapshot::default();
        s.add(&h);
        assert_eq!(s.buckets[BUCKETS], 1);
        assert_eq!(s.prometheus_buckets().last().unwrap().0, f64::MAX);
    }
}
