//! The server's figures as `/metrics`, the JSON API and the demo read them: each worker's I/O
//! counters and latency histograms, and its shard's counters (the one counter model of
//! [`crate::counters`]) as the worker last published them.
//!
//! Each worker owns one [`WorkerStats`]: only that worker writes it, readers sum over workers.
//! Nothing on the packet path takes a lock.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::config::MediaIo;
use super::worker::TcpClose;
use crate::admission::Shed;
use crate::counters::ShardCounters;
use crate::leg::LegKind;

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

/// What one worker counts: its I/O here, its shard's counters as last published, and the
/// latency histograms. Written by that worker only (relaxed atomic adds on cache lines no
/// other writer touches; the shard's counters under a lock taken when they are published,
/// every 200 ms, and its census (participants, rooms, members by kind, sessions ended,
/// handshakes) after each control command, never per packet); readers sum over workers.
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
    /// Datagrams received here but owned by another worker's shard (handed over).
    pub handed_off: AtomicU64,
    /// Packets handed to another worker through a spread room's pipes (a publisher's packet
    /// to each worker with viewers of it; their feedback back).
    pub piped: AtomicU64,
    /// ICE-TCP connections accepted (by the listening worker).
    pub ice_tcp_accepted: AtomicU64,
    /// ICE-TCP connections closed (or refused at accept), by reason (`TcpClose::ALL`'s order).
    ice_tcp_closed: [AtomicU64; TcpClose::ALL.len()],
    /// The shard's counters, as last published.
    shard: Mutex<ShardCounters>,
    /// Handshake duration (first DTLS flight to keys).
    pub handshake_time: LatencyHistogram,
    /// From the socket read that brought a packet in to the socket write that sent its copies
    /// out, per copy.
    pub relay_latency: LatencyHistogram,
    /// Time to process one media packet: its share of the batch's unprotect call, its routing
    /// and its copies' protect call, per packet received.
    pub media_processing: LatencyHistogram,
    /// The worker's load (share of time busy, smoothed), in thousandths.
    load_permille: AtomicU32,
    /// What the worker sheds ([`Shed`]'s index).
    shed: AtomicU8,
    /// How its sockets are read and written ([`MediaIo::code`]).
    media_io: AtomicU8,
    /// On the AF_XDP path: datagrams sent through the socket instead (their next hop not
    /// resolved from the kernel's tables, IPv6, or every transmit frame in flight).
    pub xsk_socket_sends: AtomicU64,
    /// On the AF_XDP path: frames the kernel dropped at the worker's XDP socket (a full
    /// receive ring, an empty fill ring), as the kernel last reported them.
    pub xsk_kernel_drops: AtomicU64,
    /// The worker's media sockets (its shared one, its telephony legs' own) and what the
    /// kernel dropped at each, read from its UDP tables at each scrape (a lock taken as a
    /// socket opens and closes, and at each scrape).
    sockets: Mutex<SocketDrops>,
}

/// What the kernel dropped at a worker's media sockets: each open socket's last reading by
/// inode (the name the kernel's UDP tables give it; kept when a reading passes the socket
/// over), and the last readings of those closed since, so the sum never falls (what a socket
/// dropped after the last scrape before it closed is not seen).
#[derive(Debug, Default)]
struct SocketDrops {
    open: std::collections::HashMap<u64, u64>,
    closed: u64,
}

impl SocketDrops {
    fn total(&self) -> u64 {
        self.closed + self.open.values().sum::<u64>()
    }
}

impl WorkerStats {
    /// Counts an ICE-TCP connection closed (or refused) for `why`.
    pub(crate) fn ice_tcp_closed(&self, why: TcpClose) {
        self.ice_tcp_closed[why.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// Says that a media socket (its inode: the shared one, a telephony leg's) is this
    /// worker's from now on.
    pub(crate) fn socket_opened(&self, inode: u64) {
        self.sockets().open.insert(inode, 0);
    }

    /// Says that a media socket (its inode) was closed: its last reading is kept.
    pub(crate) fn socket_closed(&self, inode: u64) {
        let mut l = self.sockets();
        if let Some(d) = l.open.remove(&inode) {
            l.closed += d;
        }
    }

    fn sockets(&self) -> std::sync::MutexGuard<'_, SocketDrops> {
        self.sockets.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Says how the worker's sockets are read and written.
    pub fn set_media_io(&self, io: MediaIo) {
        self.media_io.store(io.code(), Ordering::Relaxed);
    }

    /// How the worker's sockets are read and written.
    pub fn media_io(&self) -> MediaIo {
        MediaIo::from_code(self.media_io.load(Ordering::Relaxed))
    }

    /// Publishes the worker's load and what it sheds for it.
    pub fn set_load(&self, load: f64, shed: Shed) {
        self.load_permille.store(
            (load.clamp(0.0, 1.0) * 1000.0).round() as u32,
            Ordering::Relaxed,
        );
        self.shed.store(shed as u8, Ordering::Relaxed);
    }

    /// The worker's load as last published (0.0–1.0).
    pub fn load(&self) -> f64 {
        f64::from(self.load_permille.load(Ordering::Relaxed)) / 1000.0
    }

    /// What the worker sheds, as last published.
    pub fn shed(&self) -> Shed {
        Shed::from_index(self.shed.load(Ordering::Relaxed))
    }

    /// Publishes the shard's counters.
    pub fn publish(&self, c: ShardCounters) {
        *self.shard.lock().unwrap_or_else(|e| e.into_inner()) = c;
    }

    /// Publishes the shard's census now ([`Shard::census`]: participants, rooms, members by
    /// kind, sessions ended, handshakes), the rest of its counters as last published.
    ///
    /// [`Shard::census`]: secrelay_core::shard::Shard::census
    pub fn publish_census(&self, census: secrelay_core::shard::Census) {
        census.write_into(&mut self.shard.lock().unwrap_or_else(|e| e.into_inner()));
    }

    /// The shard's counters as last published.
    pub fn shard(&self) -> ShardCounters {
        *self.shard.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What one finished TLS handshake on the HTTPS port is counted under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TlsHandshakeLabels {
    /// `1.3` or `1.2`.
    pub version: &'static str,
    /// Whether the session was resumed (a ticket or a session id).
    pub resumed: bool,
    /// The cipher suite (IANA name, e.g. `TLS13_AES_128_GCM_SHA256`).
    pub suite: &'static str,
    /// The key exchange group (`X25519`, `secp256r1`, …; `none` for a TLS 1.2 resumption).
    pub group: &'static str,
    /// The protocol ALPN chose (`h2`, `http/1.1`, or `none`).
    pub alpn: &'static str,
}

/// The HTTPS port's counters (written by the signaling runtime, read by `/metrics` and tests).
#[derive(Debug, Default)]
pub struct TlsStats {
    /// Handshakes in progress now.
    pub in_flight: AtomicU64,
    /// HTTP and HTTPS connections open now (handshakes included).
    pub connections_open: AtomicU64,
    /// Finished handshakes by what they negotiated.
    pub handshakes: Mutex<BTreeMap<TlsHandshakeLabels, u64>>,
    /// Handshakes that did not finish, by [`crate::server::TlsFailure::index`].
    pub failures: [AtomicU64; 9],
    /// Plain HTTP connections refused at accept (`max_connections` open).
    pub http_refused_busy: AtomicU64,
    /// HTTP and HTTPS connections refused at accept because their source held
    /// `max_connections_per_source`.
    pub source_connections_refused: AtomicU64,
    /// Requests answered `429` because their source spent its `requests_per_source`.
    pub source_requests_limited: AtomicU64,
    /// HTTP and HTTPS connections closed because no request began within
    /// `http_request_timeout_secs` of the connection (or of its TLS handshake).
    pub http_idle_closed: AtomicU64,
    /// Certificate reloads that took effect.
    pub reloads_ok: AtomicU64,
    /// Certificate reloads that failed (the certificate in use stayed).
    pub reloads_failed: AtomicU64,
    /// Handshake durations, accepted connection to the client's Finished.
    pub handshake_time: LatencyHistogram,
}

/// A copy of [`TlsStats`]' counters.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TlsTotals {
    /// Full handshakes finished.
    pub full: u64,
    /// Resumed handshakes finished.
    pub resumed: u64,
    /// Finished handshakes by what they negotiated.
    pub by_labels: Vec<(TlsHandshakeLabels, u64)>,
    /// Failures by reason name (every reason, zeros included).
    pub failures: Vec<(&'static str, u64)>,
    /// Handshakes in progress.
    pub in_flight: u64,
    /// Connections open.
    pub connections_open: u64,
    /// Reloads that took effect, and that failed.
    pub reloads: (u64, u64),
}

impl TlsTotals {
    /// Failures with this reason (`timeout`, `not_tls`, …).
    pub fn failed(&self, reason: &str) -> u64 {
        self.failures
            .iter()
            .find(|(r, _)| *r == reason)
            .map_or(0, |(_, n)| *n)
    }
}

impl TlsStats {
    /// Counts a finished handshake.
    pub fn finished(&self, labels: TlsHandshakeLabels, took: Duration) {
        *self
            .handshakes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(labels)
            .or_default() += 1;
        self.handshake_time.record(took);
    }

    /// Counts a handshake that did not finish.
    pub fn failed(&self, why: crate::server::TlsFailure) {
        self.failures[why.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// The counters now.
    pub fn totals(&self) -> TlsTotals {
        let by_labels: Vec<(TlsHandshakeLabels, u64)> = self
            .handshakes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(k, v)| (*k, *v))
            .collect();
        TlsTotals {
            full: by_labels
                .iter()
                .filter(|(k, _)| !k.resumed)
                .map(|(_, n)| n)
                .sum(),
            resumed: by_labels
                .iter()
                .filter(|(k, _)| k.resumed)
                .map(|(_, n)| n)
                .sum(),
            by_labels,
            failures: crate::server::TlsFailure::ALL
                .iter()
                .map(|r| (r.name(), self.failures[r.index()].load(Ordering::Relaxed)))
                .collect(),
            in_flight: self.in_flight.load(Ordering::Relaxed),
            connections_open: self.connections_open.load(Ordering::Relaxed),
            reloads: (
                self.reloads_ok.load(Ordering::Relaxed),
                self.reloads_failed.load(Ordering::Relaxed),
            ),
        }
    }
}

/// Stats of every worker, plus the control plane's own counters.
#[derive(Debug, Default)]
pub struct GatewayStats {
    /// The HTTPS port's counters.
    pub tls: TlsStats,
    /// One per worker.
    pub workers: Vec<Arc<WorkerStats>>,
    /// HTTP requests refused, by status class.
    pub http_refused: AtomicU64,
    /// Offers accepted (participants created).
    pub joins: AtomicU64,
    /// ng requests received (the ng control socket).
    pub ng_requests: AtomicU64,
    /// Of those, answered with an error.
    pub ng_errors: AtomicU64,
    /// ng datagrams from sources outside `ng_allow`, dropped unanswered (not in `ng_requests`).
    pub ng_not_allowed: AtomicU64,
    /// Calls the ng control socket holds (from `offer` until `delete`, or until the next
    /// sweep after all their members ended).
    pub ng_calls: AtomicU64,
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
    /// Media copies transcoded (or mixed) for their receivers.
    pub media_transcoded: u64,
    /// Audio packets decoded for transcoding or mixing.
    pub media_decoded: u64,
    /// Audio packets encoded for transcoding or mixing.
    pub media_encoded: u64,
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
    /// By kind of participant (`webrtc`, `sdes`, `plain`, in that order).
    pub by_leg: Vec<LegTotals>,
    /// Relay latency.
    pub relay_latency: HistogramSnapshot,
    /// Handshake durations.
    pub handshake_time: HistogramSnapshot,
}

impl GatewayStats {
    /// Participants alive, summed over workers as last published (the workers publish after
    /// every join and leave).
    pub fn participants(&self) -> u64 {
        self.workers.iter().map(|w| w.shard().members).sum()
    }

    /// The shards' counters summed.
    pub fn shards(&self) -> ShardCounters {
        let mut c = ShardCounters::default();
        for w in &self.workers {
            c.add(&w.shard());
        }
        c
    }

    /// Datagrams the kernel dropped at the workers' media sockets, the shared ones and the
    /// telephony legs' own: each socket's figure raised to what the kernel's UDP tables say now
    /// ([`super::process::each_udp_socket`]).
    pub(crate) fn media_socket_drops(&self) -> u64 {
        let mut rows = Vec::new();
        super::process::each_udp_socket(|row| rows.push(row));
        let mut sockets: Vec<_> = self.workers.iter().map(|w| w.sockets()).collect();
        for row in rows {
            if let Some(d) = sockets.iter_mut().find_map(|l| l.open.get_mut(&row.inode)) {
                *d = (*d).max(row.drops);
            }
        }
        sockets.iter().map(|l| l.total()).sum()
    }

    fn io(&self, f: fn(&WorkerStats) -> &AtomicU64) -> u64 {
        self.workers
            .iter()
            .map(|w| f(w).load(Ordering::Relaxed))
            .sum()
    }

    /// ICE-TCP connections closed (or refused) for `why`, all workers.
    fn ice_tcp_closed(&self, why: TcpClose) -> u64 {
        self.workers
            .iter()
            .map(|w| w.ice_tcp_closed[why.index()].load(Ordering::Relaxed))
            .sum()
    }

    fn encode_ice_tcp(&self, e: &mut DescriptorEncoder<'_>) -> Result<(), fmt::Error> {
        let accepted = self.io(|w| &w.ice_tcp_accepted);
        let closed: Vec<(&'static str, u64)> = TcpClose::ALL
            .iter()
            .map(|w| (w.name(), self.ice_tcp_closed(*w)))
            .collect();
        let ended: u64 = closed
            .iter()
            .filter(|(n, _)| *n != TcpClose::Refused.name())
            .map(|(_, v)| v)
            .sum();
        counter(
            e,
            "secrelay_ice_tcp_connections_accepted",
            "ICE-TCP connections accepted (browsers that reach the media over TCP)",
            accepted,
        )?;
        labelled_counters(
            e,
            "secrelay_ice_tcp_connections_closed",
            "ICE-TCP connections closed: by the browser or failed (peer), first datagram not a check naming a participant (no_check), no check validated within 10 s (unvalidated), silent for 30 s (idle), participant ended (ended); or refused at accept over the limits (refused)",
            "reason",
            &closed,
        )?;
        gauge(
            e,
            "secrelay_ice_tcp_connections_open",
            "ICE-TCP connections open now",
            accepted.saturating_sub(ended),
        )
    }

    /// The sums over workers.
    pub fn totals(&self) -> Totals {
        let s = self.shards();
        let mut relay_latency = HistogramSnapshot::default();
        let mut handshake_time = HistogramSnapshot::default();
        for w in &self.workers {
            relay_latency.add(&w.relay_latency);
            handshake_time.add(&w.handshake_time);
        }
        Totals {
            datagrams_in: self.io(|w| &w.datagrams_in),
            datagrams_out: self.io(|w| &w.datagrams_out),
            media_routed: s.media.routed,
            media_forwarded: s.media.forwarded,
            media_unslotted: s.media.unslotted,
            media_transcoded: s.media.transcoded,
            media_decoded: s.media.decoded,
            media_encoded: s.media.encoded,
            handed_off: self.io(|w| &w.handed_off),
            srtp_batches: s.srtp_batches,
            srtp_batched: s.srtp_batched,
            drops: s.media.drops.total(),
            drops_by_reason: s
                .media
                .drops
                .iter()
                .filter(|e| e.1 > 0)
                .map(|(r, n)| (r.name(), n))
                .collect(),
            handshakes_ok: s.handshakes_ok,
            handshakes_failed: s.handshakes_failed,
            participants: s.members,
            connected: s.connected,
            rooms: s.rooms,
            closed_by_reason: s
                .ended
                .iter()
                .filter(|e| e.1 > 0)
                .map(|(r, n)| (r.name(), n))
                .collect(),
            relay_latency,
            handshake_time,
            by_leg: LegKind::ALL
                .iter()
                .map(|k| {
                    let c = &s.by_leg[k.index()];
                    LegTotals {
                        leg: k.name(),
                        participants: c.members,
                        packets_in: c.media.packets_in,
                        packets_out: c.media.packets_out,
                        drops: c.media.drops.total(),
                    }
                })
                .collect(),
        }
    }
}

/// Exposes [`GatewayStats`] to a Prometheus registry, read on each scrape.
#[derive(Debug)]
pub struct StatsCollector(pub Arc<GatewayStats>);

pub(super) fn counter(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    value: u64,
) -> Result<(), fmt::Error> {
    let c = ConstCounter::new(value);
    c.encode(encoder.encode_descriptor(name, help, None, c.metric_type())?)
}

pub(super) fn gauge(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    value: u64,
) -> Result<(), fmt::Error> {
    let g = ConstGauge::new(value as i64);
    g.encode(encoder.encode_descriptor(name, help, None, g.metric_type())?)
}

pub(super) fn labelled_counters(
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

/// One kind of participant's figures.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LegTotals {
    /// `webrtc`, `sdes` or `plain`.
    pub leg: &'static str,
    /// Participants of this kind now.
    pub participants: u64,
    /// Packets received from them and sent to them.
    pub packets_in: u64,
    /// Packets sent to them.
    pub packets_out: u64,
    /// Drops at them, all reasons.
    pub drops: u64,
}

/// A counter family with several labels per series.
fn counters_labelled<const N: usize>(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    values: &[([(&'static str, &'static str); N], u64)],
) -> Result<(), fmt::Error> {
    let mut m = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (labels, n) in values {
        let c = ConstCounter::new(*n);
        c.encode(m.encode_family(labels)?)?;
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

/// The gateway's state that is not a counter of the workers: telephony ports held and the
/// routing directory's entries (what must come back to zero once every participant left);
/// and the process's (`secrelay_build_info`, `process_*`: [`super::process`]).
#[derive(Debug)]
pub(crate) struct StateCollector(pub Arc<super::Gateway>);

impl Collector for StateCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), fmt::Error> {
        let e = &mut encoder;
        let mut g = e.encode_descriptor(
            "secrelay_media_io_workers",
            "Packet workers by the way they read and write their media (io_uring; mmsg: recvmmsg/sendmmsg; af_xdp: raw frames through an XDP socket, their sockets for what it does not take)",
            None,
            MetricType::Gauge,
        )?;
        for path in MediaIo::ALL {
            let n = self
                .0
                .stats
                .workers
                .iter()
                .filter(|w| w.media_io() == path)
                .count();
            ConstGauge::new(n as i64).encode(g.encode_family(&[("path", path.name())])?)?;
        }
        counter(
            e,
            "secrelay_media_socket_drops",
            "Datagrams the kernel dropped at the workers' media sockets (the shared one and each telephony leg's own) before the gateway read them (a full receive buffer: the workers fell behind, or net.core.rmem_max kept the buffer small), as the kernel's UDP tables say at the scrape",
            self.0.stats.media_socket_drops(),
        )?;
        gauge(
            e,
            "secrelay_rtp_ports_in_use",
            "Local UDP ports held by telephony legs (RTP and RTCP; none once every telephony leg ended)",
            self.0.rtp_ports_in_use() as u64,
        )?;
        let (ufrags, addrs) = self.0.directory_sizes();
        let mut g = e.encode_descriptor(
            "secrelay_routes",
            "Entries of the routing directory that maps a datagram to its worker, by key (ICE ufrag, remote address)",
            None,
            MetricType::Gauge,
        )?;
        for (key, n) in [("ufrag", ufrags), ("address", addrs)] {
            ConstGauge::new(n as i64).encode(g.encode_family(&[("key", key)])?)?;
        }
        super::process::encode(e)
    }
}

impl StatsCollector {
    /// Datagrams, bytes and SRTP packets through the media path, and what was routed,
    /// forwarded, transcoded.
    fn encode_media(
        &self,
        e: &mut DescriptorEncoder<'_>,
        shards: &ShardCounters,
    ) -> Result<(), fmt::Error> {
        let s = &self.0;
        let m = &shards.media;
        labelled_counters(
            e,
            "secrelay_datagrams",
            "UDP datagrams through the media socket, by direction",
            "direction",
            &[
                ("in", s.io(|w| &w.datagrams_in)),
                ("out", s.io(|w| &w.datagrams_out)),
            ],
        )?;
        labelled_counters(
            e,
            "secrelay_bytes",
            "UDP payload bytes through the media socket, by direction",
            "direction",
            &[
                ("in", s.io(|w| &w.bytes_in)),
                ("out", s.io(|w| &w.bytes_out)),
            ],
        )?;
        labelled_counters(
            e,
            "secrelay_srtp_packets",
            "SRTP/SRTCP packets unprotected (in) and protected (out)",
            "direction",
            &[("in", m.packets_in), ("out", m.packets_out)],
        )?;
        counter(
            e,
            "secrelay_media_routed",
            "Media packets received from publishers and routed to their rooms",
            m.routed,
        )?;
        counter(
            e,
            "secrelay_media_forwarded",
            "Media copies routed to receivers (re-protected and sent unless counted as dropped)",
            m.forwarded,
        )?;
        counter(
            e,
            "secrelay_media_unslotted",
            "Media copies sent outside a receive slot, under an SSRC the receiver's answer does not announce (it offered fewer receiving sections of the kind than the room has senders)",
            m.unslotted,
        )?;
        counter(
            e,
            "secrelay_media_transcoded",
            "Media copies transcoded or mixed for their receivers (audio of a codec the receiver did not take, decoded and encoded again)",
            m.transcoded,
        )?;
        counter(
            e,
            "secrelay_media_decoded",
            "Audio packets decoded for transcoding or mixing (once per packet, however many receivers)",
            m.decoded,
        )?;
        counter(
            e,
            "secrelay_media_encoded",
            "Audio packets encoded for transcoding or mixing (once per receiving format of a stream, not per receiver)",
            m.encoded,
        )?;
        Ok(())
    }

    /// Video feedback, data channels, hand-offs between workers, AF_XDP and node pipes, SRTP
    /// batches and drops.
    fn encode_feedback_data_pipes(
        &self,
        e: &mut DescriptorEncoder<'_>,
        shards: &ShardCounters,
    ) -> Result<(), fmt::Error> {
        let s = &self.0;
        let m = &shards.media;
        let f = &m.feedback;
        labelled_counters(
            e,
            "secrelay_feedback",
            "RTCP feedback: keyframe requests from receivers (requests_in), sent to publishers (requests_out) or merged into one sent within the interval (requests_merged); packets receivers NACKed (nacked), retransmitted from the buffer (retransmitted), no longer buffered (nack_misses), asked of publishers because the gateway never got them (nacks_upstream); retransmissions received from publishers (rtx_in); retransmissions sent as bandwidth probes for a higher simulcast layer (probe_packets)",
            "event",
            &[
                ("keyframe_requests_in", f.keyframe_requests_in),
                ("keyframe_requests_out", f.keyframe_requests_out),
                ("keyframe_requests_merged", f.keyframe_requests_merged),
                ("nacked", f.nacked),
                ("retransmitted", f.retransmitted),
                ("nack_misses", f.nack_misses),
                ("nacks_upstream", f.nacks_upstream),
                ("rtx_in", f.rtx_in),
                ("probe_packets", f.probe_packets),
            ],
        )?;
        let d = &m.data;
        labelled_counters(
            e,
            "secrelay_data_messages",
            "Data-channel messages: sent by participants and relayed to their rooms (in), sent to participants (out), dropped over a participant's rate limit (rate_limited), not delivered to a participant (its channel's buffer full, its association gone, or too many waiting for it: undelivered)",
            "event",
            &[
                ("in", d.messages_in),
                ("out", d.messages_out),
                ("rate_limited", d.rate_limited),
                ("undelivered", d.dropped_out),
            ],
        )?;
        labelled_counters(
            e,
            "secrelay_data_bytes",
            "Bytes of data-channel messages relayed from participants (in) and sent to them (out)",
            "direction",
            &[("in", d.bytes_in), ("out", d.bytes_out)],
        )?;
        let discarded: Vec<(&str, u64)> = secrelay_datachannel::Discard::ALL
            .into_iter()
            .map(|r| (r.name(), d.discarded.get(r)))
            .collect();
        labelled_counters(
            e,
            "secrelay_data_discarded",
            "What participants' SCTP associations dropped of what they sent, by reason: packets that do not parse or belong to no association (malformed_packet), an INIT past the handshake (stray_init), packets after the association ended (after_disconnect), DCEP messages that break RFC 8832 (malformed_dcep) or answer nothing (unexpected_dcep), channel opens refused (refused_open), messages over the size limit (too_large), on no open channel (unknown_channel) or of an unknown payload protocol (unknown_ppid)",
            "reason",
            &discarded,
        )?;
        s.encode_ice_tcp(e)?;
        counter(
            e,
            "secrelay_worker_handoffs",
            "Datagrams received on one worker's socket and handed to the worker that owns the participant",
            s.io(|w| &w.handed_off),
        )?;
        counter(
            e,
            "secrelay_xsk_socket_sends",
            "On the AF_XDP path: datagrams sent through the worker's socket instead of its XDP socket (next hop not in the kernel's neighbour table yet, a destination routed out of an interface without an XDP socket, a destination of the other IP family than the socket's, or every transmit frame in flight)",
            s.io(|w| &w.xsk_socket_sends),
        )?;
        counter(
            e,
            "secrelay_xsk_kernel_drops",
            "On the AF_XDP path: frames the kernel dropped at the workers' XDP sockets (a full receive ring or an empty fill ring: the worker fell behind)",
            s.io(|w| &w.xsk_kernel_drops),
        )?;
        counter(
            e,
            "secrelay_pipe_packets",
            "Packets of rooms spread over workers handed from one worker to another: a publisher's packet once to each worker with viewers of the room, and their keyframe requests and NACKs back",
            s.io(|w| &w.piped),
        )?;
        gauge(
            e,
            "secrelay_pipe_mirrors",
            "Publishers mirrored on workers other than their room's, one per publisher and worker with viewers of the room",
            shards.by_leg[LegKind::Pipe.index()].members,
        )?;
        counter(
            e,
            "secrelay_srtp_batches",
            "SRTP engine calls that unprotected a receive batch's media (the copies routed from each are protected in one more call)",
            shards.srtp_batches,
        )?;
        counter(
            e,
            "secrelay_srtp_batched_packets",
            "SRTP media datagrams unprotected in those batch calls",
            shards.srtp_batched,
        )?;
        let drops: Vec<(&'static str, u64)> = m.drops.iter().map(|(r, n)| (r.name(), n)).collect();
        labelled_counters(
            e,
            "secrelay_drops",
            "Datagrams dropped, by reason",
            "reason",
            &drops,
        )?;
        Ok(())
    }

    /// Handshakes, closed sessions, refusals, joins and ng requests.
    fn encode_sessions(
        &self,
        e: &mut DescriptorEncoder<'_>,
        shards: &ShardCounters,
    ) -> Result<(), fmt::Error> {
        let s = &self.0;
        labelled_counters(
            e,
            "secrelay_handshakes",
            "DTLS-SRTP handshakes, by result",
            "result",
            &[
                ("ok", shards.handshakes_ok),
                ("failed", shards.handshakes_failed),
            ],
        )?;
        let closed: Vec<(&'static str, u64)> =
            shards.ended.iter().map(|(r, n)| (r.name(), n)).collect();
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
        let (ng, ng_errors) = (
            s.ng_requests.load(Ordering::Relaxed),
            s.ng_errors.load(Ordering::Relaxed),
        );
        labelled_counters(
            e,
            "secrelay_ng_requests",
            "Datagrams on the ng control socket (SIP proxies), by result: ok, error (answered with result: error), not_allowed (from outside ng_allow, dropped unanswered)",
            "result",
            &[
                ("ok", ng.saturating_sub(ng_errors)),
                ("error", ng_errors),
                ("not_allowed", s.ng_not_allowed.load(Ordering::Relaxed)),
            ],
        )?;
        Ok(())
    }

    /// Participants, rooms, each worker's load, ng calls, retransmission buffers and
    /// participants by leg kind.
    fn encode_participants(
        &self,
        e: &mut DescriptorEncoder<'_>,
        shards: &ShardCounters,
    ) -> Result<(), fmt::Error> {
        let s = &self.0;
        gauge(
            e,
            "secrelay_participants",
            "Participants alive",
            shards.members,
        )?;
        gauge(
            e,
            "secrelay_participants_connected",
            "Participants whose security is up (WebRTC: DTLS-SRTP connected; telephony legs: from their start)",
            shards.connected,
        )?;
        gauge(e, "secrelay_rooms", "Rooms", shards.rooms)?;
        {
            let mut m = e.encode_descriptor(
                "secrelay_worker_load",
                "CPU time each packet worker's thread used, as a share of wall time (smoothed, 0 to 1): what admission control sheds by",
                None,
                MetricType::Gauge,
            )?;
            for (i, w) in s.workers.iter().enumerate() {
                let labels = [("worker", i.to_string())];
                ConstGauge::new(w.load()).encode(m.encode_family(&labels)?)?;
            }
        }
        {
            let mut m = e.encode_descriptor(
                "secrelay_worker_participants",
                "Participants on each packet worker (a room's spread viewers on the workers they joined; mirrored publishers are not participants)",
                None,
                MetricType::Gauge,
            )?;
            for (i, w) in s.workers.iter().enumerate() {
                let labels = [("worker", i.to_string())];
                ConstGauge::new(w.shard().members as i64).encode(m.encode_family(&labels)?)?;
            }
        }
        {
            let mut m = e.encode_descriptor(
                "secrelay_worker_shedding",
                "What each packet worker sheds for its load (admission control): 0 nothing, 1 new DTLS handshakes, 2 new handshakes and new rooms and legs",
                None,
                MetricType::Gauge,
            )?;
            for (i, w) in s.workers.iter().enumerate() {
                let labels = [("worker", i.to_string())];
                ConstGauge::new(w.shed() as i64).encode(m.encode_family(&labels)?)?;
            }
        }
        gauge(
            e,
            "secrelay_ng_calls",
            "Calls the ng control socket holds (from offer until delete, or until the sweep after all their members ended)",
            s.ng_calls.load(Ordering::Relaxed),
        )?;
        gauge(
            e,
            "secrelay_retransmit_buffer_streams",
            "Video streams received with a retransmission buffer (one per publisher stream, whatever the number of receivers)",
            shards.retransmit_streams,
        )?;
        gauge(
            e,
            "secrelay_retransmit_buffer_bytes",
            "Bytes held by all retransmission buffers (slots and packet buffers)",
            shards.retransmit_bytes,
        )?;
        {
            let mut g = e.encode_descriptor(
                "secrelay_participants_by_leg",
                "Participants alive, by the kind each joined as (webrtc, sdes, plain)",
                None,
                MetricType::Gauge,
            )?;
            for k in LegKind::ALL {
                let v = ConstGauge::new(shards.by_leg[k.index()].members as i64);
                v.encode(g.encode_family(&[("leg", k.name())])?)?;
            }
        }
        Ok(())
    }

    /// Packets, bytes, copies and drops by the kind of leg each participant joined as.
    fn encode_legs(
        &self,
        e: &mut DescriptorEncoder<'_>,
        shards: &ShardCounters,
    ) -> Result<(), fmt::Error> {
        let per_leg = |f: fn(&crate::counters::Counters) -> u64| -> Vec<([(&'static str, &'static str); 1], u64)> {
            LegKind::ALL
                .iter()
                .map(|k| ([("leg", k.name())], f(&shards.by_leg[k.index()].media)))
                .collect()
        };
        let mut packets = Vec::new();
        let mut bytes = Vec::new();
        for k in LegKind::ALL {
            let c = &shards.by_leg[k.index()].media;
            packets.push(([("leg", k.name()), ("direction", "in")], c.packets_in));
            packets.push(([("leg", k.name()), ("direction", "out")], c.packets_out));
            bytes.push(([("leg", k.name()), ("direction", "in")], c.bytes_in));
            bytes.push(([("leg", k.name()), ("direction", "out")], c.bytes_out));
        }
        counters_labelled(
            e,
            "secrelay_leg_packets",
            "Media and RTCP packets received from (in) and sent to (out) participants, by the kind each joined as",
            &packets,
        )?;
        counters_labelled(
            e,
            "secrelay_leg_bytes",
            "Their bytes, as on the wire",
            &bytes,
        )?;
        counters_labelled(
            e,
            "secrelay_leg_forwarded",
            "Media copies routed to participants, by the kind each joined as",
            &per_leg(|c| c.forwarded),
        )?;
        counters_labelled(
            e,
            "secrelay_leg_drops",
            "Drops at participants (all reasons), by the kind each joined as",
            &per_leg(|c| c.drops.total()),
        )?;
        Ok(())
    }

    /// The HTTPS front: TLS handshakes and their failures, connections open, refused, limited
    /// and closed idle, certificate reloads.
    fn encode_tls_http(&self, e: &mut DescriptorEncoder<'_>) -> Result<(), fmt::Error> {
        let s = &self.0;
        let tls = s.tls.totals();
        {
            let mut f = e.encode_descriptor(
                "secrelay_tls_handshakes",
                "TLS handshakes finished on the HTTPS port, by version, full or resumed, cipher suite, key exchange group and ALPN protocol",
                None,
                MetricType::Counter,
            )?;
            for (l, n) in &tls.by_labels {
                let labels = [
                    ("version", l.version),
                    ("kind", if l.resumed { "resumed" } else { "full" }),
                    ("suite", l.suite),
                    ("group", l.group),
                    ("alpn", l.alpn),
                ];
                ConstCounter::new(*n).encode(f.encode_family(&labels)?)?;
            }
        }
        labelled_counters(
            e,
            "secrelay_tls_handshake_failures",
            "TLS handshakes on the HTTPS port that did not finish, by reason (not_tls: not a TLS record; malformed: a record or message that does not parse; incompatible: nothing in common; alert_received; protocol_violation; closed_early: closed or reset mid-handshake; timeout: not finished in tls_handshake_timeout_secs; busy: refused at accept, tls_max_handshakes or max_connections open; other)",
            "reason",
            &tls.failures,
        )?;
        gauge(
            e,
            "secrelay_tls_handshakes_in_flight",
            "TLS handshakes in progress on the HTTPS port",
            tls.in_flight,
        )?;
        gauge(
            e,
            "secrelay_http_connections_open",
            "HTTP and HTTPS connections open (TLS handshakes in progress included)",
            tls.connections_open,
        )?;
        counter(
            e,
            "secrelay_http_connections_refused",
            "Plain HTTP connections closed at accept because max_connections were open",
            s.tls.http_refused_busy.load(Ordering::Relaxed),
        )?;
        labelled_counters(
            e,
            "secrelay_http_source_limited",
            "Refused for their source's limits: connections closed at accept (max_connections_per_source open from the source) and requests answered 429 (requests_per_source spent)",
            "what",
            &[
                (
                    "connection",
                    s.tls.source_connections_refused.load(Ordering::Relaxed),
                ),
                (
                    "request",
                    s.tls.source_requests_limited.load(Ordering::Relaxed),
                ),
            ],
        )?;
        counter(
            e,
            "secrelay_http_connections_idle_closed",
            "HTTP and HTTPS connections closed because no request began within http_request_timeout_secs of the connection (or of its TLS handshake)",
            s.tls.http_idle_closed.load(Ordering::Relaxed),
        )?;
        labelled_counters(
            e,
            "secrelay_tls_certificate_reloads",
            "Reloads of the HTTPS certificate (SIGHUP), by result (a failed one keeps the certificate in use)",
            "result",
            &[("ok", tls.reloads.0), ("failed", tls.reloads.1)],
        )?;
        Ok(())
    }

    /// The duration histograms: TLS and DTLS handshakes, relay latency, media processing.
    fn encode_histograms(&self, e: &mut DescriptorEncoder<'_>) -> Result<(), fmt::Error> {
        let s = &self.0;
        let mut handshake_time = HistogramSnapshot::default();
        let mut relay_latency = HistogramSnapshot::default();
        let mut processing = HistogramSnapshot::default();
        for w in &s.workers {
            handshake_time.add(&w.handshake_time);
            relay_latency.add(&w.relay_latency);
            processing.add(&w.media_processing);
        }
        let mut tls_time = HistogramSnapshot::default();
        tls_time.add(&s.tls.handshake_time);
        histogram(
            e,
            "secrelay_tls_handshake_duration_seconds",
            "TLS handshake duration on the HTTPS port, accepted connection to the client's Finished",
            &tls_time,
        )?;
        histogram(
            e,
            "secrelay_handshake_duration_seconds",
            "DTLS-SRTP handshake duration, first flight to keys",
            &handshake_time,
        )?;
        histogram(
            e,
            "secrelay_relay_latency_seconds",
            "Socket read to socket write, per forwarded media copy",
            &relay_latency,
        )?;
        histogram(
            e,
            "secrelay_media_processing_seconds",
            "Per media packet received: its share of the batch's SRTP unprotect call, its routing and its copies' protect call",
            &processing,
        )?;
        Ok(())
    }
}

impl Collector for StatsCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), fmt::Error> {
        let shards = self.0.shards();
        let e = &mut encoder;
        self.encode_media(e, &shards)?;
        self.encode_feedback_data_pipes(e, &shards)?;
        self.encode_sessions(e, &shards)?;
        self.encode_participants(e, &shards)?;
        self.encode_legs(e, &shards)?;
        self.encode_tls_http(e)?;
        self.encode_histograms(e)?;
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
