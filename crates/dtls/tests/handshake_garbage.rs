//! Garbage, truncated, mutated and replayed datagrams never crash an endpoint: it keeps making
//! progress or ends with `Failed`. dimpl panics are caught by the endpoint; these tests also
//! count them, so a dimpl panic reachable from the network shows up as a failure here.

mod handshake_support;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use handshake_support::{configs, drain, exchange, Outcome};
use proptest::prelude::*;
use secrelay_dtls::engine::{DtlsEngine, EngineOutput};
use secrelay_dtls::{
    Discard, DtlsVersion, Endpoint, EndpointConfig, Event, FailReason, Output, State, Verdict,
};

fn cfgs() -> &'static (EndpointConfig, EndpointConfig) {
    static C: OnceLock<(EndpointConfig, EndpointConfig)> = OnceLock::new();
    C.get_or_init(configs)
}

/// A client that has sent its with-cookie ClientHello and holds the server's flight 4 (not yet
/// delivered), plus the server that sent it.
struct MidHandshake {
    client: Endpoint,
    server: Endpoint,
    server_flight: Vec<Vec<u8>>,
    client_hellos: Vec<Vec<u8>>,
    now: Instant,
}

fn mid_handshake(version: DtlsVersion) -> MidHandshake {
    let now = Instant::now();
    let (mut cc, mut sc) = cfgs().clone();
    cc.version = version;
    sc.version = version;
    let mut client = Endpoint::new(cc, now).unwrap();
    let mut server = Endpoint::new(sc, now).unwrap();
    let (mut co, mut so) = (Outcome::default(), Outcome::default());
    let ch1 = drain(&mut client, &mut co).0;
    let _ = drain(&mut server, &mut so);
    let mut hvr = Vec::new();
    for d in &ch1 {
        server.handle_datagram(now, d);
        hvr.extend(drain(&mut server, &mut so).0);
    }
    let mut ch2 = Vec::new();
    for d in &hvr {
        client.handle_datagram(now, d);
        ch2.extend(drain(&mut client, &mut co).0);
    }
    let mut server_flight = Vec::new();
    for d in &ch2 {
        server.handle_datagram(now, d);
        server_flight.extend(drain(&mut server, &mut so).0);
    }
    assert!(!server_flight.is_empty());
    let mut client_hellos = ch1;
    client_hellos.extend(ch2);
    MidHandshake {
        client,
        server,
        server_flight,
        client_hellos,
        now,
    }
}

fn fresh_server(cookies: bool, version: DtlsVersion) -> Endpoint {
    let mut sc = cfgs().1.clone();
    sc.server_cookies = cookies;
    sc.version = version;
    let mut s = Endpoint::new(sc, Instant::now()).unwrap();
    let _ = drain(&mut s, &mut Outcome::default());
    s
}

fn assert_alive_or_failed(ep: &Endpoint, out: &Outcome) {
    assert_eq!(ep.counters().panics_caught, 0, "dimpl panicked");
    match ep.state() {
        State::Handshaking => assert!(out.failed.is_none()),
        State::Finished => assert!(out.failed.is_some() || out.closed),
        State::Connected => {}
        s => panic!("{s:?}"),
    }
}

#[test]
fn server_without_cookies_survives_a_client_hello_before_any_timeout_call() {
    // dimpl 0.9's Server12 unwraps a random that only handle_timeout sets: the endpoint calls
    // handle_timeout at construction, so this must just work.
    let now = Instant::now();
    let (cc, mut sc) = cfgs().clone();
    sc.server_cookies = false;
    let mut c = Endpoint::new(cc, now).unwrap();
    let mut s = Endpoint::new(sc, now).unwrap();
    let ch = drain(&mut c, &mut Outcome::default()).0;
    let (co, so) = exchange(&mut c, &mut s, now, ch, vec![]);
    assert!(
        co.connected.is_some() && so.connected.is_some(),
        "{co:?} {so:?}"
    );
    assert_eq!(s.counters().panics_caught, 0);
}

#[test]
fn replayed_and_truncated_handshake_datagrams_do_not_break_the_handshake() {
    for version in [DtlsVersion::Dtls12, DtlsVersion::Dtls13] {
        let mut m = mid_handshake(version);
        let now = m.now;
        let mut co = Outcome::default();
        // Replays of old ClientHellos to the server, truncations of its flight to the client.
        for d in &m.client_hellos {
            m.server.handle_datagram(now, d);
        }
        for d in &m.server_flight {
            for cut in [0, 1, 5, 13, 25, d.len() / 2, d.len() - 1] {
                m.client.handle_datagram(now, &d[..cut]);
            }
        }
        let mut so = Outcome::default();
        let to_client = {
            let mut v = drain(&mut m.server, &mut so).0;
            v.extend(m.server_flight.clone());
            v.extend(m.server_flight.clone()); // duplicated
            v
        };
        let to_server = drain(&mut m.client, &mut co).0;
        let (co2, so2) = exchange(&mut m.client, &mut m.server, now, to_server, to_client);
        assert!(co2.connected.is_some(), "{version:?}: {co2:?}");
        assert!(so2.connected.is_some(), "{version:?}: {so2:?}");
        assert_eq!(m.client.counters().panics_caught, 0);
        assert_eq!(m.server.counters().panics_caught, 0);
    }
}

/// An engine that panics on its first datagram: the endpoint reports `Failed(Internal)`.
#[derive(Debug)]
struct PanickyEngine;

impl DtlsEngine for PanickyEngine {
    fn name(&self) -> &'static str {
        "panicky"
    }
    fn handle_timeout(&mut self, _now: Instant) -> Result<(), FailReason> {
        Ok(())
    }
    fn handle_datagram(&mut self, _d: &[u8]) -> Result<(), FailReason> {
        panic!("engine bug");
    }
    fn poll_output(&mut self) -> Result<EngineOutput, FailReason> {
        Ok(EngineOutput::Timeout(
            Instant::now() + Duration::from_secs(1),
        ))
    }
    fn close(&mut self) -> Result<(), FailReason> {
        Ok(())
    }
    fn protocol_version(&self) -> Option<&'static str> {
        None
    }
}

#[test]
fn a_panicking_engine_becomes_failed_internal() {
    let now = Instant::now();
    let mut ep = Endpoint::with_engine(&cfgs().1, Box::new(PanickyEngine), now);
    assert!(matches!(ep.poll_output(), Some(Output::Timeout(_))));
    // Bytes that are not DTLS records never reach the engine.
    assert_eq!(
        ep.handle_datagram(now, b"boom"),
        Verdict::Discarded(Discard::Malformed)
    );
    assert_eq!(ep.state(), State::Handshaking);
    // A record does.
    let record = [
        22, 0xfe, 0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, b'b', b'o', b'o', b'm',
    ];
    ep.handle_datagram(now, &record);
    assert!(matches!(
        ep.poll_output(),
        Some(Output::Event(Event::Failed(FailReason::Internal)))
    ));
    assert!(ep.poll_output().is_none());
    assert_eq!(ep.state(), State::Finished);
    assert_eq!(ep.counters().panics_caught, 1);
    assert_eq!(ep.counters().failures(FailReason::Internal), 1);
    // Dead: further input is ignored, not fed to the engine.
    assert_eq!(
        ep.handle_datagram(now, &record),
        Verdict::Discarded(Discard::Finished)
    );
    ep.handle_timeout(now + Duration::from_secs(5));
    assert!(ep.poll_output().is_none());
    assert_eq!(ep.counters().datagrams_ignored, 1);
}

/// Real first ClientHellos (DTLS 1.2, 1.3, auto), made once.
fn real_hellos() -> &'static [Vec<u8>] {
    static H: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    H.get_or_init(|| {
        [DtlsVersion::Dtls12, DtlsVersion::Dtls13, DtlsVersion::Auto]
            .into_iter()
            .flat_map(|v| {
                let mut c = cfgs().0.clone();
                c.version = v;
                let mut ep = Endpoint::new(c, Instant::now()).unwrap();
                drain(&mut ep, &mut Outcome::default()).0
            })
            .collect()
    })
}

fn datagrams() -> impl Strategy<Value = Vec<Vec<u8>>> {
    let record_like = (
        prop::sample::select(vec![20u8, 21, 22, 23, 25, 0x2f, 0x30, 0x3f]),
        any::<[u8; 12]>(),
        prop::collection::vec(any::<u8>(), 0..300),
    )
        .prop_map(|(t, hdr, body)| {
            let mut d = vec![t, 0xfe, 0xfd];
            d.extend_from_slice(&hdr[..8]);
            d.extend_from_slice(&(body.len() as u16).to_be_bytes());
            d.extend(body);
            d
        });
    let raw = prop::collection::vec(any::<u8>(), 0..1500);
    prop::collection::vec(prop_oneof![raw, record_like], 1..8)
}

/// Mutates a real datagram: truncate, flip bytes.
fn mutate(d: &[u8], cut: usize, flips: &[(usize, u8)]) -> Vec<u8> {
    let mut v = d[..cut.min(d.len())].to_vec();
    for &(i, x) in flips {
        if !v.is_empty() {
            let n = v.len();
            v[i % n] ^= x | 1;
        }
    }
    v
}

proptest! {
    // 48 cases by default; PROPTEST_CASES=2000 for a longer hunt.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(48),
        ..ProptestConfig::default()
    })]

    #[test]
    fn fresh_server_never_panics_on_garbage(
        dgrams in datagrams(),
        cookies in any::<bool>(),
        v in 0usize..3,
    ) {
        let version = [DtlsVersion::Dtls12, DtlsVersion::Dtls13, DtlsVersion::Auto][v];
        let mut s = fresh_server(cookies, version);
        let mut out = Outcome::default();
        let now = Instant::now();
        let r = catch_unwind(AssertUnwindSafe(|| {
            for d in &dgrams {
                s.handle_datagram(now, d);
                let _ = drain(&mut s, &mut out);
            }
            s.handle_timeout(now + Duration::from_secs(2));
            let _ = drain(&mut s, &mut out);
        }));
        prop_assert!(r.is_ok(), "the endpoint itself panicked");
        assert_alive_or_failed(&s, &out);
    }

    #[test]
    fn mid_handshake_client_survives_garbage_and_mutations(
        dgrams in datagrams(),
        cut in 0usize..1200,
        flips in prop::collection::vec((any::<usize>(), any::<u8>()), 0..4),
        v in 0usize..2,
    ) {
        let version = [DtlsVersion::Dtls12, DtlsVersion::Dtls13][v];
        let mut m = mid_handshake(version);
        let now = m.now;
        let mut co = Outcome::default();
        for d in &dgrams {
            m.client.handle_datagram(now, d);
            let _ = drain(&mut m.client, &mut co);
        }
        for d in &m.server_flight {
            m.client.handle_datagram(now, &mutate(d, cut, &flips));
            let _ = drain(&mut m.client, &mut co);
        }
        assert_alive_or_failed(&m.client, &co);
        if m.client.state() == State::Handshaking {
            // Still alive: the genuine flight must still complete the handshake.
            let flight = m.server_flight.clone();
            let (co2, so2) = exchange(&mut m.client, &mut m.server, now, vec![], flight);
            prop_assert!(
                co2.connected.is_some() || co2.failed.is_some(),
                "client neither progressed nor failed: {:?} (server {:?}, {:?})",
                co2, so2, m.server.state()
            );
            assert_alive_or_failed(&m.client, &co2);
            assert_alive_or_failed(&m.server, &so2);
        }
    }
}

/// An engine that always wants to be woken at once and sends a datagram each time — what dimpl
/// 0.9's DTLS 1.3 client was seen doing (AwaitCertificateVerify) after a corrupted server flight
/// in `mid_handshake_client_survives_garbage_and_mutations`.
#[derive(Debug)]
struct RunawayEngine {
    now: Instant,
    send: bool,
}

impl DtlsEngine for RunawayEngine {
    fn name(&self) -> &'static str {
        "runaway"
    }
    fn handle_timeout(&mut self, now: Instant) -> Result<(), FailReason> {
        self.now = now;
        self.send = true;
        Ok(())
    }
    fn handle_datagram(&mut self, _d: &[u8]) -> Result<(), FailReason> {
        Ok(())
    }
    fn poll_output(&mut self) -> Result<EngineOutput, FailReason> {
        if std::mem::take(&mut self.send) {
            return Ok(EngineOutput::Transmit(vec![0x1a; 20]));
        }
        Ok(EngineOutput::Timeout(self.now))
    }
    fn close(&mut self) -> Result<(), FailReason> {
        Ok(())
    }
    fn protocol_version(&self) -> Option<&'static str> {
        None
    }
}

#[test]
fn an_engine_that_keeps_asking_to_be_woken_at_once_is_stopped() {
    let start = Instant::now();
    let engine = RunawayEngine {
        now: start,
        send: false,
    };
    let mut ep = Endpoint::with_engine(&cfgs().0, Box::new(engine), start);
    let mut out = Outcome::default();
    let mut fired = 0;
    loop {
        let (_, timer) = drain(&mut ep, &mut out);
        let Some(t) = timer else { break };
        assert!(t > start, "deadlines are floored after the input's time");
        ep.handle_timeout(t);
        fired += 1;
        assert!(fired < 1000, "not stopped");
    }
    assert_eq!(out.failed, Some(FailReason::Internal));
    assert_eq!(ep.counters().runaway_timers, 1);
    assert!(ep.counters().transmits <= 40, "{:?}", ep.counters());
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(48),
        ..ProptestConfig::default()
    })]

    /// Mutated genuine ClientHellos (any version) to fresh servers of every kind, cookies on and
    /// off — the path where dimpl 0.9 was seen to panic.
    #[test]
    fn fresh_server_never_panics_on_mutated_client_hellos(
        which in 0usize..3,
        cut in 0usize..2000,
        flips in prop::collection::vec((any::<usize>(), any::<u8>()), 0..6),
        cookies in any::<bool>(),
        v in 0usize..3,
    ) {
        let version = [DtlsVersion::Dtls12, DtlsVersion::Dtls13, DtlsVersion::Auto][v];
        let hellos = real_hellos();
        let ch = &hellos[which % hellos.len()];
        let mut s = fresh_server(cookies, version);
        let mut out = Outcome::default();
        let now = Instant::now();
        s.handle_datagram(now, &mutate(ch, cut, &flips));
        let _ = drain(&mut s, &mut out);
        s.handle_datagram(now, ch);
        let _ = drain(&mut s, &mut out);
        s.handle_timeout(now + Duration::from_secs(3));
        let _ = drain(&mut s, &mut out);
        assert_alive_or_failed(&s, &out);
    }
}

/// The dimpl 0.9 bug the endpoint guards against, shown on the bare engine: a DTLS 1.2 server
/// with cookies off that gets a ClientHello before its first `handle_timeout` panics
/// (`server.random.unwrap()`). The endpoint never lets that happen (it calls `handle_timeout`
/// at construction and before every datagram) and would catch the panic anyway.
#[test]
fn bare_dimpl_server_panics_on_a_hello_before_its_first_timeout() {
    use secrelay_dtls::engine::DimplEngine;
    let mut sc = cfgs().1.clone();
    sc.server_cookies = false;
    let ch = real_hellos()[0].clone();
    let mut engine = DimplEngine::new(&sc, Instant::now()).unwrap();
    let r = catch_unwind(AssertUnwindSafe(|| engine.handle_datagram(&ch)));
    assert!(
        r.is_err(),
        "dimpl no longer panics here: the guard stays, but update this note"
    );
}
