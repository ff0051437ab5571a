//! RTCP of the gateway's own, per member (RFC 3550 §6.4, A.1, A.3, A.8): what the gateway
//! really received from a member (packets, loss from sequence numbers, interarrival jitter
//! from arrival times and RTP timestamps) and really sent it (packets, octets, timestamps),
//! reported to it every few seconds in an SR (when we sent it media) or RR; and what the member
//! reports back: its loss and jitter for our streams, and the round-trip time from the LSR and
//! DLSR of its report blocks. Sans-IO: arrival instants come in as arguments, and NTP time is
//! counted from an epoch the caller gives ([`RtcpConfig`]).

use std::time::{Duration, Instant};

use secrelay_wire::demux::RtpFacts;
use secrelay_wire::rtcp::{write_report, Report, ReportBlock, SenderInfo};

/// How members' RTCP is made.
#[derive(Debug, Clone)]
pub struct RtcpConfig {
    /// Mean interval between reports (RFC 3550: 5 s for small sessions); each is randomized
    /// to 0.5–1.5 of it.
    pub interval: Duration,
    /// The CNAME in our SDES.
    pub cname: String,
    /// An instant and the NTP time (seconds since 1900, 32.32 fixed point) it corresponds to:
    /// the reports' NTP timestamps are counted from it.
    pub epoch: (Instant, u64),
    /// Keyframe requests sent to a publisher stream at most this often, however many
    /// receivers ask (the others are merged into the last one sent).
    pub keyframe_interval: Duration,
}

impl Default for RtcpConfig {
    /// Reports every 5 s, NTP time read from the system clock now.
    fn default() -> RtcpConfig {
        let unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        // NTP counts from 1900; Unix from 1970, 2,208,988,800 s later.
        let secs = unix.as_secs() + 2_208_988_800;
        let frac = (u64::from(unix.subsec_nanos()) << 32) / 1_000_000_000;
        RtcpConfig::new((Instant::now(), (secs << 32) | frac))
    }
}

impl RtcpConfig {
    /// Reports every 5 s, NTP time counted from `epoch`.
    pub fn new(epoch: (Instant, u64)) -> RtcpConfig {
        RtcpConfig {
            interval: Duration::from_secs(5),
            cname: "secrelay".into(),
            epoch,
            keyframe_interval: Duration::from_millis(500),
        }
    }

    fn ntp(&self, now: Instant) -> u64 {
        let d = now.saturating_duration_since(self.epoch.0);
        let frac = (u64::from(d.subsec_nanos()) << 32) / 1_000_000_000;
        self.epoch.1.wrapping_add((d.as_secs() << 32) | frac)
    }
}

/// The middle 32 bits of an NTP timestamp (LSR, RFC 3550 §6.4.1).
fn middle(ntp: u64) -> u32 {
    (ntp >> 16) as u32
}

/// A stream received from a member.
#[derive(Debug, Clone)]
struct RecvStream {
    ssrc: u32,
    clock_rate: u32,
    base_seq: u32,
    max_seq: u16,
    cycles: u32,
    received: u64,
    expected_prior: u64,
    received_prior: u64,
    /// Jitter in timestamp units, times 16 (RFC 3550 A.8's integer form).
    jitter16: u64,
    last_transit: Option<i64>,
    /// The last SR from this source: its LSR and when it arrived.
    last_sr: Option<(u32, Instant)>,
}

impl RecvStream {
    fn new(facts: &RtpFacts, clock_rate: u32) -> RecvStream {
        RecvStream {
            ssrc: facts.ssrc,
            clock_rate: clock_rate.max(1),
            base_seq: u32::from(facts.sequence),
            max_seq: facts.sequence,
            cycles: 0,
            received: 0,
            expected_prior: 0,
            received_prior: 0,
            jitter16: 0,
            last_transit: None,
            last_sr: None,
        }
    }

    fn on_rtp(&mut self, facts: &RtpFacts, arrival: Instant, epoch: Instant) {
        let seq = facts.sequence;
        let delta = seq.wrapping_sub(self.max_seq);
        if self.received == 0 {
            self.max_seq = seq;
        } else if delta < 0x8000 {
            if seq < self.max_seq {
                self.cycles = self.cycles.wrapping_add(1 << 16);
            }
            self.max_seq = seq;
        }
        self.received += 1;
        // Interarrival jitter (A.8): transit = arrival (in timestamp units) - timestamp.
        let d = arrival.saturating_duration_since(epoch);
        let arrival_ts =
            (d.as_secs_f64() * f64::from(self.clock_rate)).round() as i64 & 0xffff_ffff;
        let transit = (arrival_ts - i64::from(facts.timestamp)) as i32 as i64;
        if let Some(last) = self.last_transit {
            let dd = (transit - last).unsigned_abs();
            // J += (|D| - J) / 16, kept times 16.
            self.jitter16 = self.jitter16 + dd - ((self.jitter16 + 8) >> 4);
        }
        self.last_transit = Some(transit);
    }

    fn extended_max(&self) -> u32 {
        self.cycles.wrapping_add(u32::from(self.max_seq))
    }

    fn expected(&self) -> u64 {
        u64::from(self.extended_max().wrapping_sub(self.base_seq)) + 1
    }

    fn lost(&self) -> i64 {
        self.expected() as i64 - self.received as i64
    }

    fn jitter(&self) -> u32 {
        (self.jitter16 >> 4) as u32
    }

    /// The report block for this stream, and the interval counters moved on.
    fn block(&mut self, now: Instant) -> ReportBlock {
        let expected = self.expected();
        let expected_interval = expected.saturating_sub(self.expected_prior);
        let received_interval = self.received.saturating_sub(self.received_prior);
        self.expected_prior = expected;
        self.received_prior = self.received;
        let lost_interval = expected_interval.saturating_sub(received_interval);
        let fraction_lost = (lost_interval << 8)
            .checked_div(expected_interval)
            .map_or(0, |f| f.min(255) as u8);
        let (lsr, dlsr) = match self.last_sr {
            Some((lsr, at)) => {
                let d = now.saturating_duration_since(at);
                (lsr, (d.as_secs_f64() * 65536.0) as u32)
            }
            None => (0, 0),
        };
        ReportBlock {
            ssrc: self.ssrc,
            fraction_lost,
            cumulative_lost: self.lost().clamp(-(1 << 23), (1 << 23) - 1) as i32,
            highest_seq: self.extended_max(),
            jitter: self.jitter(),
            lsr,
            dlsr,
        }
    }
}

/// A stream sent to a member (a copy of someone's media under the SSRC the member sees).
#[derive(Debug, Clone, Copy)]
struct SendStream {
    ssrc: u32,
    clock_rate: u32,
    packets: u32,
    octets: u32,
    last_ts: u32,
    last_at: Instant,
}

/// What the member reported about one of our streams.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct PeerReport {
    /// Our stream's SSRC.
    pub ssrc: u32,
    /// Fraction lost in the member's last interval, in percent.
    pub fraction_lost_pct: u32,
    /// Packets of ours the member lost in all.
    pub cumulative_lost: i32,
    /// The member's interarrival jitter for our stream, in milliseconds.
    pub jitter_ms: f64,
}

/// One received stream as the API shows it.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct StreamFigures {
    /// Its SSRC.
    pub ssrc: u32,
    /// Packets received.
    pub received: u64,
    /// Packets expected from its sequence numbers.
    pub expected: u64,
    /// Packets lost (expected − received; negative with duplicates).
    pub lost: i64,
    /// Interarrival jitter, in milliseconds.
    pub jitter_ms: f64,
}

/// A member's RTCP figures as the API shows them.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct RtcpFigures {
    /// What we received from the member, per stream.
    pub received: Vec<StreamFigures>,
    /// What the member reported about what we sent it, per stream.
    pub reported: Vec<PeerReport>,
    /// The round-trip time to the member from its last report block about one of our
    /// streams, in milliseconds.
    pub rtt_ms: Option<f64>,
    /// Reports we sent the member.
    pub reports_sent: u64,
    /// Reports we received from it (SR and RR packets).
    pub reports_received: u64,
}

/// A member's side of RTCP.
#[derive(Debug, Clone)]
pub(crate) struct MemberRtcp {
    /// Our SSRC as the reporter towards this member.
    reporter: u32,
    recv: Vec<RecvStream>,
    send: Vec<SendStream>,
    next_report: Option<Instant>,
    rtt: Option<Duration>,
    peer: Vec<PeerReport>,
    reports_sent: u64,
    reports_received: u64,
}

fn random_u32() -> u32 {
    let mut b = [0u8; 4];
    getrandom::fill(&mut b).expect("the OS random source works");
    u32::from_be_bytes(b)
}

impl MemberRtcp {
    /// A member's RTCP, its first report due about one interval after `now`.
    pub fn new(config: &RtcpConfig, now: Instant) -> MemberRtcp {
        let mut m = MemberRtcp {
            reporter: random_u32().max(1),
            recv: Vec::new(),
            send: Vec::new(),
            next_report: None,
            rtt: None,
            peer: Vec::new(),
            reports_sent: 0,
            reports_received: 0,
        };
        m.schedule(config, now);
        m
    }

    fn schedule(&mut self, config: &RtcpConfig, now: Instant) {
        // 0.5 to 1.5 of the interval (RFC 3550 §6.3.1), so reports do not synchronize.
        let k = 0.5 + f64::from(random_u32() % 1000) / 1000.0;
        self.next_report = Some(now + config.interval.mul_f64(k));
    }

    /// Our SSRC as the reporter towards this member (the sender of feedback we send it too).
    pub fn reporter(&self) -> u32 {
        self.reporter
    }

    /// When the next report is due.
    pub fn next_report(&self) -> Option<Instant> {
        self.next_report
    }

    /// An RTP packet received from the member (admitted and, on a secure leg, authenticated).
    pub fn on_rtp(
        &mut self,
        config: &RtcpConfig,
        facts: &RtpFacts,
        clock_rate: u32,
        arrival: Instant,
    ) {
        let i = match self.recv.iter().position(|s| s.ssrc == facts.ssrc) {
            Some(i) => i,
            None => {
                if self.recv.len() >= 32 {
                    return;
                }
                self.recv.push(RecvStream::new(facts, clock_rate));
                self.recv.len() - 1
            }
        };
        self.recv[i].on_rtp(facts, arrival, config.epoch.0);
    }

    /// Asks the CPU to start loading what [`MemberRtcp::on_sent`] looks through.
    pub fn prefetch_sent(&self) {
        secrelay_srtp::simd::prefetch::line(self.send.as_ptr().cast());
    }

    /// Asks the CPU to start loading what [`MemberRtcp::on_rtp`] looks through.
    pub fn prefetch_received(&self) {
        secrelay_srtp::simd::prefetch::line(self.recv.as_ptr().cast());
    }

    /// A copy sent to the member under `ssrc`, with this RTP timestamp and payload length.
    pub fn on_sent(
        &mut self,
        ssrc: u32,
        clock_rate: u32,
        timestamp: u32,
        payload: usize,
        now: Instant,
    ) {
        let i = match self.send.iter().position(|s| s.ssrc == ssrc) {
            Some(i) => i,
            None => {
                if self.send.len() >= 32 {
                    return;
                }
                self.send.push(SendStream {
                    ssrc,
                    clock_rate: clock_rate.max(1),
                    packets: 0,
                    octets: 0,
                    last_ts: timestamp,
                    last_at: now,
                });
                self.send.len() - 1
            }
        };
        let s = &mut self.send[i];
        s.packets = s.packets.wrapping_add(1);
        s.octets = s.octets.wrapping_add(payload as u32);
        s.last_ts = timestamp;
        s.last_at = now;
    }

    /// The SRs and RRs of a compound received from the member (read once by the caller): its
    /// SRs note the LSR of the member's streams, its report blocks about our streams give
    /// their loss, jitter and the round-trip time.
    pub fn on_reports(&mut self, config: &RtcpConfig, reports: &[Report], now: Instant) {
        let now_mid = middle(config.ntp(now));
        for r in reports {
            self.reports_received += 1;
            if let Some(info) = r.sender {
                if let Some(s) = self.recv.iter_mut().find(|s| s.ssrc == r.ssrc) {
                    s.last_sr = Some((middle(info.ntp), now));
                }
            }
            for b in &r.blocks {
                let Some(ours) = self.send.iter().find(|s| s.ssrc == b.ssrc) else {
                    continue;
                };
                if b.lsr != 0 {
                    // RFC 3550 §6.4.1: RTT = A - LSR - DLSR, in 1/65536 s.
                    let rtt = now_mid.wrapping_sub(b.lsr).wrapping_sub(b.dlsr);
                    if rtt < 0x8000_0000 {
                        self.rtt = Some(Duration::from_secs_f64(f64::from(rtt) / 65536.0));
                    }
                }
                let report = PeerReport {
                    ssrc: b.ssrc,
                    fraction_lost_pct: u32::from(b.fraction_lost) * 100 / 256,
                    cumulative_lost: b.cumulative_lost,
                    jitter_ms: f64::from(b.jitter) * 1000.0 / f64::from(ours.clock_rate),
                };
                match self.peer.iter().position(|p| p.ssrc == b.ssrc) {
                    Some(k) => self.peer[k] = report,
                    None if self.peer.len() < 32 => self.peer.push(report),
                    None => {}
                }
            }
        }
    }

    /// If a report is due at `now`: the compound to send (an SR if we sent the member media,
    /// else an RR, with a report block per stream received from it, and our CNAME), and the
    /// next one scheduled. While the member cannot be sent to (`can_send` false: not keyed,
    /// no address yet) a due report is skipped and the next one scheduled.
    pub fn report_due(
        &mut self,
        config: &RtcpConfig,
        now: Instant,
        can_send: bool,
    ) -> Option<Vec<u8>> {
        if self.next_report.is_none_or(|t| now < t) {
            return None;
        }
        self.schedule(config, now);
        if !can_send {
            return None;
        }
        let blocks: Vec<ReportBlock> = self.recv.iter_mut().map(|s| s.block(now)).collect();
        let ntp = config.ntp(now);
        // One SR per compound: the stream we sent most recently speaks for the reporter.
        let sender = self.send.iter().max_by_key(|s| s.last_at).map(|s| {
            let since = now.saturating_duration_since(s.last_at);
            SenderInfo {
                ntp,
                rtp_timestamp: s
                    .last_ts
                    .wrapping_add((since.as_secs_f64() * f64::from(s.clock_rate)) as u32),
                packets: self
                    .send
                    .iter()
                    .map(|s| s.packets)
                    .fold(0, u32::wrapping_add),
                octets: self
                    .send
                    .iter()
                    .map(|s| s.octets)
                    .fold(0, u32::wrapping_add),
            }
        });
        // The SR's SSRC is the stream's, so the member matches LSR to what it receives; an RR
        // comes from our reporter SSRC.
        let ssrc = match (&sender, self.send.iter().max_by_key(|s| s.last_at)) {
            (Some(_), Some(s)) => s.ssrc,
            _ => self.reporter,
        };
        let mut out = Vec::with_capacity(64 + 24 * blocks.len());
        write_report(&mut out, ssrc, sender.as_ref(), &blocks, &config.cname);
        self.reports_sent += 1;
        Some(out)
    }

    /// The figures, for the API.
    pub fn figures(&self) -> RtcpFigures {
        RtcpFigures {
            received: self
                .recv
                .iter()
                .map(|s| StreamFigures {
                    ssrc: s.ssrc,
                    received: s.received,
                    expected: s.expected(),
                    lost: s.lost(),
                    jitter_ms: f64::from(s.jitter()) * 1000.0 / f64::from(s.clock_rate),
                })
                .collect(),
            reported: self.peer.clone(),
            rtt_ms: self.rtt.map(|d| d.as_secs_f64() * 1000.0),
            reports_sent: self.reports_sent,
            reports_received: self.reports_received,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use secrelay_wire::rtcp::reports;

    fn facts(seq: u16, ts: u32) -> RtpFacts {
        RtpFacts {
            ssrc: 9,
            payload_type: 0,
            marker: false,
            sequence: seq,
            timestamp: ts,
            header_len: 12,
            ..RtpFacts::default()
        }
    }

    #[test]
    fn loss_and_jitter_follow_what_arrived() {
        let t0 = Instant::now();
        let cfg = RtcpConfig::new((t0, 0));
        let mut m = MemberRtcp::new(&cfg, t0);
        // 100 packets of 20 ms at 8 kHz, every 10th lost, arrivals alternating 0 and 10 ms
        // late: |D| is 80 timestamp units (10 ms) between neighbours and 0 across a lost
        // packet (both neighbours on time), 80 of 89 transitions: J tends to 9 ms.
        for i in 0..100u16 {
            if i % 10 == 9 {
                continue;
            }
            let late = if i % 2 == 0 { 0 } else { 10 };
            let arrival = t0 + Duration::from_millis(u64::from(i) * 20 + late);
            m.on_rtp(&cfg, &facts(1000 + i, u32::from(i) * 160), 8000, arrival);
        }
        let f = m.figures();
        assert_eq!(f.received[0].expected, 99, "1000..=1098 seen");
        assert_eq!(f.received[0].lost, 9);
        assert!((f.received[0].jitter_ms - 9.0).abs() < 0.5, "{f:?}");
        let report = m
            .report_due(&cfg, t0 + Duration::from_secs(10), true)
            .unwrap();
        let r = reports(&report).unwrap();
        assert_eq!(r[0].sender, None, "nothing sent to it: an RR");
        let b = r[0].blocks[0];
        assert_eq!(b.cumulative_lost, 9);
        assert_eq!(b.highest_seq, 1098);
        assert_eq!(b.fraction_lost, (9 * 256 / 99) as u8);
    }

    #[test]
    fn sequence_numbers_wrap_and_the_rtt_comes_from_lsr_and_dlsr() {
        let t0 = Instant::now();
        let cfg = RtcpConfig::new((t0, 0x0000_1000_0000_0000));
        let mut m = MemberRtcp::new(&cfg, t0);
        for (k, seq) in [65534u16, 65535, 0, 1].into_iter().enumerate() {
            m.on_rtp(
                &cfg,
                &facts(seq, k as u32 * 160),
                8000,
                t0 + Duration::from_millis(k as u64 * 20),
            );
        }
        assert_eq!(m.figures().received[0].lost, 0);
        assert_eq!(m.figures().received[0].expected, 4);
        // We send the member a stream; our SR goes out at t1; its RR about that stream comes
        // back 120 ms after t1 having waited 20 ms (DLSR): RTT 100 ms.
        let t1 = t0 + Duration::from_secs(8);
        m.on_sent(0x77, 8000, 1600, 160, t1);
        let sr = m.report_due(&cfg, t1, true).unwrap();
        let info = reports(&sr).unwrap()[0].sender.unwrap();
        let mut rr = Vec::new();
        write_report(
            &mut rr,
            9,
            None,
            &[ReportBlock {
                ssrc: 0x77,
                fraction_lost: 64,
                cumulative_lost: 3,
                highest_seq: 10,
                jitter: 40,
                lsr: middle(info.ntp),
                dlsr: (0.020 * 65536.0) as u32,
            }],
            "phone",
        );
        m.on_reports(
            &cfg,
            &reports(&rr).unwrap(),
            t1 + Duration::from_millis(120),
        );
        let f = m.figures();
        let rtt = f.rtt_ms.unwrap();
        assert!((rtt - 100.0).abs() < 1.0, "{rtt}");
        assert_eq!(f.reported[0].fraction_lost_pct, 25);
        assert_eq!(f.reported[0].cumulative_lost, 3);
        assert!((f.reported[0].jitter_ms - 5.0).abs() < 0.01);
        assert_eq!((f.reports_sent, f.reports_received), (1, 1));
    }
}
