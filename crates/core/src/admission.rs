//! Admission control, sans-IO: how loaded a worker is, and what the gateway sheds as the load
//! rises, in a stated order.
//!
//! A worker measures its **load**: the CPU time its thread used over each publishing
//! interval, as a share of that interval's wall time, smoothed ([`LoadMeter`]). CPU time, not
//! "time not waiting in poll": a worker that other processes keep off its core is not doing
//! more work, and shedding the gateway's calls would not give it the core back (on a machine
//! shared with busy neighbours the wall-clock measure read 97 % for a worker relaying 2,000
//! packets/s). As the load crosses thresholds, [`Admission`] sheds, in this order:
//!
//! 1. **new DTLS handshakes** ([`Shed::Handshakes`], from `shed_handshakes_at`): a ClientHello
//!    for a participant whose handshake has not started is dropped and counted (`overload`);
//!    the peer retransmits it (DTLS doubles its timer from 1 s), and it is taken once the load
//!    falls. A handshake costs a worker far more than a media packet (a signature and a key
//!    agreement), so this is what a reconnect storm is shed by first. Handshakes in progress
//!    go on (their work is half done).
//! 2. **new rooms and legs** ([`Shed::Joins`], from `shed_joins_at`): joins over HTTP(S)
//!    (WHIP, WHEP, room joins, telephony legs) get `503` with `Retry-After`, and a SIP proxy's
//!    ng `offer` for a new call an `error` saying so; new handshakes are still shed.
//! 3. **established media: never.** Members already connected keep their media whatever the
//!    load; that is what the shedding above protects.
//!
//! Each level is left only when the load falls below its threshold by [`HYSTERESIS`], so that
//! admission does not flap around a threshold.

use std::time::{Duration, Instant};

/// How far below a threshold the load must fall before that level of shedding ends.
pub const HYSTERESIS: f64 = 0.10;

/// Weight of the newest interval in the smoothed load (the rest is the previous value).
const NEWEST: f64 = 0.5;

/// What is being shed, in order: each level includes the ones before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum Shed {
    /// Nothing: every join and handshake is taken.
    #[default]
    Nothing,
    /// New DTLS handshakes are deferred.
    Handshakes,
    /// New handshakes deferred, and new rooms and legs refused.
    Joins,
}

impl Shed {
    /// Its name in the API and metrics.
    pub fn name(self) -> &'static str {
        match self {
            Shed::Nothing => "nothing",
            Shed::Handshakes => "handshakes",
            Shed::Joins => "joins",
        }
    }

    /// From its index (0, 1, 2), as stored in an atomic.
    pub fn from_index(i: u8) -> Shed {
        match i {
            0 => Shed::Nothing,
            1 => Shed::Handshakes,
            _ => Shed::Joins,
        }
    }
}

/// The thresholds, as shares of a worker's time (0.0–1.0; above 1.0: never).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdmissionConfig {
    /// Load from which new handshakes are deferred.
    pub shed_handshakes_at: f64,
    /// Load from which new rooms and legs are refused.
    pub shed_joins_at: f64,
}

impl Default for AdmissionConfig {
    fn default() -> Self {
        AdmissionConfig {
            shed_handshakes_at: 0.85,
            shed_joins_at: 0.95,
        }
    }
}

/// A worker's load: the share of each interval's wall time its thread spent on a CPU,
/// smoothed.
#[derive(Debug, Clone)]
pub struct LoadMeter {
    since: Instant,
    cpu: Duration,
    load: f64,
}

impl LoadMeter {
    /// A meter starting at `now`, when the thread had used `cpu`; unloaded.
    pub fn new(now: Instant, cpu: Duration) -> LoadMeter {
        LoadMeter {
            since: now,
            cpu,
            load: 0.0,
        }
    }

    /// Ends the interval at `now`, when the thread has used `cpu` in all: the smoothed load
    /// (0.0–1.0) including it.
    pub fn sample(&mut self, now: Instant, cpu: Duration) -> f64 {
        let wall = now.saturating_duration_since(self.since);
        if wall.is_zero() {
            return self.load;
        }
        let used = cpu.saturating_sub(self.cpu);
        let busy = (used.as_secs_f64() / wall.as_secs_f64()).min(1.0);
        self.load = NEWEST * busy + (1.0 - NEWEST) * self.load;
        self.since = now;
        self.cpu = cpu;
        self.load
    }

    /// The smoothed load as of the last interval.
    pub fn load(&self) -> f64 {
        self.load
    }
}

/// What a worker sheds, from its load ([`Admission::update`]).
#[derive(Debug, Clone)]
pub struct Admission {
    config: AdmissionConfig,
    shed: Shed,
}

impl Admission {
    /// Shedding nothing yet.
    pub fn new(config: AdmissionConfig) -> Admission {
        Admission {
            config,
            shed: Shed::Nothing,
        }
    }

    /// What is shed now.
    pub fn shed(&self) -> Shed {
        self.shed
    }

    /// Takes a new load; what is shed from now on. A level starts when the load reaches its
    /// threshold and ends when the load falls [`HYSTERESIS`] below it.
    pub fn update(&mut self, load: f64) -> Shed {
        let c = self.config;
        let level = |at: f64, on: bool| {
            if on {
                load >= at - HYSTERESIS
            } else {
                load >= at
            }
        };
        self.shed = if level(c.shed_joins_at, self.shed >= Shed::Joins) {
            Shed::Joins
        } else if level(c.shed_handshakes_at, self.shed >= Shed::Handshakes) {
            Shed::Handshakes
        } else {
            Shed::Nothing
        };
        self.shed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_meter_is_the_cpu_share_of_each_interval_smoothed() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut m = LoadMeter::new(t0, ms(1000));
        // 150 ms of CPU in 200: 0.75, half-weighted against 0.
        let l = m.sample(t0 + ms(200), ms(1150));
        assert!((l - 0.375).abs() < 1e-9, "{l}");
        // A whole interval on the CPU pulls it halfway to 1 (more than the wall time, from a
        // clock's granularity, counts as 1).
        let l = m.sample(t0 + ms(400), ms(1360));
        assert!((l - 0.6875).abs() < 1e-9, "{l}");
        // No CPU at all: halfway down.
        let l = m.sample(t0 + ms(600), ms(1360));
        assert!((l - 0.34375).abs() < 1e-9, "{l}");
        assert_eq!(m.sample(t0 + ms(600), ms(1360)), l);
    }

    #[test]
    fn shedding_goes_up_in_order_and_down_with_hysteresis() {
        let mut a = Admission::new(AdmissionConfig::default());
        assert_eq!(a.update(0.5), Shed::Nothing);
        assert_eq!(a.update(0.86), Shed::Handshakes);
        // Still above 0.85 − 0.10: handshakes stay shed.
        assert_eq!(a.update(0.80), Shed::Handshakes);
        assert_eq!(a.update(0.96), Shed::Joins);
        assert_eq!(a.update(0.90), Shed::Joins);
        // Below 0.95 − 0.10, above 0.85 − 0.10: joins taken again, handshakes still shed.
        assert_eq!(a.update(0.84), Shed::Handshakes);
        assert_eq!(a.update(0.74), Shed::Nothing);
        // Straight to the top from nothing.
        assert_eq!(a.update(1.0), Shed::Joins);
        // Thresholds above 1: never.
        let mut never = Admission::new(AdmissionConfig {
            shed_handshakes_at: 1.5,
            shed_joins_at: 1.5,
        });
        assert_eq!(never.update(1.0), Shed::Nothing);
        // Thresholds of 0: always (an operator closing the doors, or a test).
        let mut always = Admission::new(AdmissionConfig {
            shed_handshakes_at: 0.0,
            shed_joins_at: 0.0,
        });
        assert_eq!(always.update(0.0), Shed::Joins);
    }
}
