//! Shared helpers for the handshake tests: certificates, and a simulated link on simulated time.
#![allow(dead_code, unused_imports)]

use std::time::{Duration, Instant};

use secrelay_dtls::{
    Certificate, Endpoint, EndpointConfig, Event, FailReason, Fingerprint, KeyType,
    LocalCertificate, Output, Role,
};
use secrelay_srtp::Profile;

/// A fresh ECDSA P-256 self-signed certificate and its SHA-256 fingerprint.
pub fn cert() -> (LocalCertificate, Fingerprint) {
    let c = Certificate::self_signed(KeyType::EcdsaP256, "secrelay-test").unwrap();
    (LocalCertificate::from(&c), c.fingerprint())
}

/// Client and server configs that trust each other.
pub fn configs() -> (EndpointConfig, EndpointConfig) {
    let (cc, cfp) = cert();
    let (sc, sfp) = cert();
    (
        EndpointConfig::new(Role::Client, cc, sfp),
        EndpointConfig::new(Role::Server, sc, cfp),
    )
}

/// The test kit's simulated link and its seeded generator.
pub use secrelay_testkit::link::{Air, Link, Rng};

/// What one side ended with.
#[derive(Default)]
pub struct Outcome {
    pub connected: Option<Event>,
    pub failed: Option<FailReason>,
    pub closed: bool,
    pub transmits: usize,
    pub max_datagram: usize,
    /// Every datagram this side sent, in order.
    pub sent: Vec<Vec<u8>>,
    /// Application data handed out, in order.
    pub app_data: Vec<Vec<u8>>,
}

impl std::fmt::Debug for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outcome")
            .field("connected", &self.connected)
            .field("failed", &self.failed)
            .field("closed", &self.closed)
            .field("transmits", &self.transmits)
            .field("max_datagram", &self.max_datagram)
            .field("sent", &format_args!("{} datagrams", self.sent.len()))
            .finish()
    }
}

impl Outcome {
    pub fn keys(&self) -> &secrelay_dtls::SrtpKeys {
        match &self.connected {
            Some(Event::Connected { keys, .. }) => keys,
            other => panic!("not connected: {other:?} / {:?}", self.failed),
        }
    }
    pub fn profile(&self) -> Profile {
        match &self.connected {
            Some(Event::Connected { profile, .. }) => *profile,
            other => panic!("not connected: {other:?} / {:?}", self.failed),
        }
    }
    pub fn peer_cert(&self) -> &[u8] {
        match &self.connected {
            Some(Event::Connected {
                peer_certificate_der,
                ..
            }) => peer_certificate_der,
            other => panic!("not connected: {other:?}"),
        }
    }
}

/// Drains one endpoint per the drive contract; returns its datagrams and its next timer.
pub fn drain(ep: &mut Endpoint, outcome: &mut Outcome) -> (Vec<Vec<u8>>, Option<Instant>) {
    let mut tx = Vec::new();
    let mut timer = None;
    while let Some(o) = ep.poll_output() {
        match o {
            Output::Transmit(d) => {
                outcome.transmits += 1;
                outcome.max_datagram = outcome.max_datagram.max(d.len());
                outcome.sent.push(d.clone());
                tx.push(d)
            }
            Output::Timeout(t) => {
                timer = Some(t);
                break;
            }
            Output::Event(e @ Event::Connected { .. }) => {
                assert!(outcome.connected.is_none(), "two Connected events");
                outcome.connected = Some(e)
            }
            Output::Event(Event::Failed(r)) => {
                assert!(outcome.failed.is_none(), "two Failed events");
                outcome.failed = Some(r)
            }
            Output::Event(Event::Closed) => outcome.closed = true,
            Output::Event(Event::ApplicationData(d)) => outcome.app_data.push(d),
            Output::Event(e) => panic!("unexpected event {e:?}"),
        }
    }
    (tx, timer)
}

pub struct Run {
    pub client: Outcome,
    pub server: Outcome,
    pub client_ep: Endpoint,
    pub server_ep: Endpoint,
    pub elapsed: Duration,
    pub delivered: usize,
    pub dropped: usize,
}

/// Runs a handshake over `link` on simulated time until both sides are connected or finished,
/// or `limit` passes.
pub fn run(client: EndpointConfig, server: EndpointConfig, mut link: Link, limit: Duration) -> Run {
    let start = Instant::now();
    let mut now = start;
    let mut c = Endpoint::new(client, now).expect("client config");
    let mut s = Endpoint::new(server, now).expect("server config");
    let mut co = Outcome::default();
    let mut so = Outcome::default();
    // Datagrams in flight, by destination: `true` for the server.
    let mut air: Air<Instant, bool> = Air::new();
    let trace = std::env::var_os("LINK_TRACE").is_some();

    let mut send = |air: &mut Air<Instant, bool>, now: Instant, to_server: bool, d: Vec<u8>| {
        let what = if trace { describe(&d) } else { String::new() };
        let lost = air.send(&mut link, now, to_server, d);
        if trace {
            eprintln!(
                "{:>8.3}s {} {what}{}",
                (now - start).as_secs_f64(),
                if to_server { "C->S" } else { "S->C" },
                if lost { "  LOST" } else { "" }
            );
        }
    };

    let (tx, mut ct) = drain(&mut c, &mut co);
    for d in tx {
        send(&mut air, now, true, d);
    }
    let (tx, mut st) = drain(&mut s, &mut so);
    for d in tx {
        send(&mut air, now, false, d);
    }

    let done = |o: &Outcome| o.connected.is_some() || o.failed.is_some() || o.closed;
    while !(done(&co) && done(&so) && air.is_empty()) && now - start < limit {
        // next thing to happen
        let mut next = start + limit;
        if let Some(t) = air.next_arrival() {
            next = next.min(t);
        }
        for t in [ct, st].into_iter().flatten() {
            next = next.min(t);
        }
        now = now.max(next);
        if now - start >= limit {
            break;
        }
        if let Some((_, to_server, d)) = air.pop_due(now) {
            if trace {
                eprintln!(
                    "{:>8.3}s   deliver to {} {}",
                    (now - start).as_secs_f64(),
                    if to_server { "server" } else { "client" },
                    describe(&d)
                );
            }
            let (ep, out, timer) = if to_server {
                (&mut s, &mut so, &mut st)
            } else {
                (&mut c, &mut co, &mut ct)
            };
            ep.handle_datagram(now, &d);
            let (tx, t2) = drain(ep, out);
            *timer = t2;
            for d in tx {
                send(&mut air, now, !to_server, d);
            }
            continue;
        }
        for to_server in [false, true] {
            let (ep, out, timer) = if to_server {
                (&mut s, &mut so, &mut st)
            } else {
                (&mut c, &mut co, &mut ct)
            };
            if timer.is_some_and(|t| t <= now) {
                if trace {
                    eprintln!(
                        "{:>8.3}s   timer {}",
                        (now - start).as_secs_f64(),
                        if to_server { "server" } else { "client" }
                    );
                }
                ep.handle_timeout(now);
                let (tx, t2) = drain(ep, out);
                *timer = t2;
                for d in tx {
                    send(&mut air, now, !to_server, d);
                }
            }
        }
    }
    let (delivered, dropped) = (air.delivered, air.lost);
    Run {
        client: co,
        server: so,
        client_ep: c,
        server_ep: s,
        elapsed: now - start,
        delivered,
        dropped,
    }
}

/// Delivers datagrams between the two (instantly) until both are quiet, then fires their
/// timers, until both are finished or connected or two simulated minutes pass.
pub fn exchange(
    c: &mut Endpoint,
    s: &mut Endpoint,
    mut now: Instant,
    mut to_server: Vec<Vec<u8>>,
    mut to_client: Vec<Vec<u8>>,
) -> (Outcome, Outcome) {
    let (mut co, mut so) = (Outcome::default(), Outcome::default());
    let (mut ct, mut st) = (None, None);
    let end = now + Duration::from_secs(120);
    let done = |o: &Outcome| o.connected.is_some() || o.failed.is_some() || o.closed;
    let mut rounds = 0;
    while now < end {
        rounds += 1;
        assert!(
            rounds < 10_000,
            "timers do not advance: now {now:?} client {ct:?} {c:?} server {st:?} {s:?}"
        );
        for _ in 0..50 {
            if to_server.is_empty() && to_client.is_empty() {
                break;
            }
            for d in std::mem::take(&mut to_server) {
                s.handle_datagram(now, &d);
                let (tx, t) = drain(s, &mut so);
                to_client.extend(tx);
                st = t.or(st);
            }
            for d in std::mem::take(&mut to_client) {
                c.handle_datagram(now, &d);
                let (tx, t) = drain(c, &mut co);
                to_server.extend(tx);
                ct = t.or(ct);
            }
        }
        if done(&co) && done(&so) {
            break;
        }
        // Fire the earliest timer.
        let next = [ct, st].into_iter().flatten().min();
        let Some(next) = next else { break };
        now = now.max(next);
        if ct.is_some_and(|t| t <= now) {
            c.handle_timeout(now);
            let (tx, t) = drain(c, &mut co);
            to_server.extend(tx);
            ct = t;
        }
        if st.is_some_and(|t| t <= now) {
            s.handle_timeout(now);
            let (tx, t) = drain(s, &mut so);
            to_client.extend(tx);
            st = t;
        }
    }
    (co, so)
}

/// A one-line summary of a DTLS datagram's records, for `LINK_TRACE=1` runs.
pub fn describe(d: &[u8]) -> String {
    let mut out = format!("{}B:", d.len());
    let mut rest = d;
    while rest.len() >= 13 {
        let ctype = rest[0];
        let epoch = u16::from_be_bytes([rest[3], rest[4]]);
        let len = usize::from(u16::from_be_bytes([rest[11], rest[12]]));
        let body = &rest[13..(13 + len).min(rest.len())];
        let what = match ctype {
            20 => "CCS".to_string(),
            21 => "alert".to_string(),
            22 if epoch == 0 && !body.is_empty() => format!(
                "hs{}#{}",
                body[0],
                body.get(4..6)
                    .map(|b| u16::from_be_bytes([b[0], b[1]]))
                    .unwrap_or(0)
            ),
            22 => "hs(enc)".to_string(),
            23 => "app".to_string(),
            26 => "ack".to_string(),
            t => format!("ct{t}"),
        };
        let seq = u64::from_be_bytes([0, 0, rest[5], rest[6], rest[7], rest[8], rest[9], rest[10]]);
        out.push_str(&format!(" [e{epoch}.{seq} {what}]"));
        rest = &rest[(13 + len).min(rest.len())..];
    }
    if !rest.is_empty() && d.len() >= 13 && (d[0] & 0xe0) == 0x20 {
        out.push_str(" [dtls13 unified hdr]");
    }
    out
}
