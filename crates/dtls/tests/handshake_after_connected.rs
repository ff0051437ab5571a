//! What an endpoint does with datagrams once its handshake is done, on either engine as the
//! server: every one is taken or dropped with a reason (`Verdict`), forged alerts and records
//! and ClientHellos change nothing and are never answered, a retransmission trigger is
//! answered at most once per retransmission interval, and the association goes on (it still
//! closes on the peer's close_notify).

mod handshake_support;

use std::time::{Duration, Instant};

use handshake_support::{configs, drain, run, Link, Outcome, Run};
use secrelay_dtls::record::inspect;
use secrelay_dtls::{Discard, Endpoint, EngineChoice, State, Timers, Verdict};
use secrelay_testkit::forged_dtls::{forgeries, Forged};

/// A handshake between a dimpl client and a server on `engine`, both connected; and an
/// instant after it.
fn connected(engine: EngineChoice) -> (Run, Instant) {
    let (c, mut s) = configs();
    s.engine = engine;
    let r = run(c, s, Link::perfect(), Duration::from_secs(30));
    assert!(r.client.connected.is_some() && r.server.connected.is_some());
    assert_eq!(r.server_ep.state(), State::Connected);
    let now = Instant::now() + r.elapsed + Duration::from_secs(1);
    (r, now)
}

/// Feeds `d` and drains: (verdict, datagrams sent).
fn feed(ep: &mut Endpoint, now: Instant, d: &[u8]) -> (Verdict, usize) {
    let v = ep.handle_datagram(now, d);
    let (tx, _) = drain(ep, &mut Outcome::default());
    (v, tx.len())
}

fn engines() -> Vec<EngineChoice> {
    let mut v = vec![EngineChoice::Dimpl];
    if cfg!(feature = "openssl") {
        v.push(EngineChoice::Openssl);
    }
    v
}

#[test]
fn forged_records_and_client_hellos_after_the_handshake_are_dropped_by_reason() {
    for engine in engines() {
        let (mut r, now) = connected(engine);
        let hellos: Vec<Vec<u8>> = r
            .client
            .sent
            .iter()
            .filter(|d| inspect(d).is_ok_and(|s| s.client_hello))
            .cloned()
            .collect();
        assert!(!hellos.is_empty());
        // A ClientHello of a client that knows nothing of this association.
        let (stranger, _) = configs();
        let mut stranger = Endpoint::new(stranger, now).unwrap();
        let (fresh, _) = drain(&mut stranger, &mut Outcome::default());
        let mut kinds: Vec<(String, Vec<u8>, Discard)> = forgeries()
            .into_iter()
            .map(|(f, d)| {
                let reason = match f {
                    Forged::PlainAlert | Forged::ProtectedHandshake => Discard::AfterHandshake,
                    Forged::ProtectedAlert | Forged::ProtectedData => Discard::Unauthenticated,
                    Forged::NotRecords | Forged::Dtls13Header => Discard::Malformed,
                };
                (format!("{f:?}"), d, reason)
            })
            .collect();
        for (what, hello) in [
            ("its own ClientHello", &hellos[0]),
            ("another's", &fresh[0]),
        ] {
            kinds.push((
                what.into(),
                hello.clone(),
                Discard::ClientHelloAfterHandshake,
            ));
        }
        let s = &mut r.server_ep;
        let mut answered = 0;
        for (what, d, reason) in &kinds {
            for k in 0..5 {
                let (v, sent) = feed(s, now + Duration::from_millis(k), d);
                assert_eq!(s.state(), State::Connected, "{engine:?}: {what}");
                if v == Verdict::Discarded(*reason) {
                    assert_eq!(sent, 0, "{engine:?}: {what} is not answered");
                    continue;
                }
                // OpenSSL answers a protected handshake record, authentic or not, with its
                // last flight (it cannot know the peer did not miss it): once, then held back.
                assert_eq!(
                    *reason,
                    Discard::AfterHandshake,
                    "{engine:?}: {what}: {v:?}"
                );
                assert_eq!(engine, EngineChoice::Openssl, "{what}: {v:?}");
                match v {
                    Verdict::Taken => answered += 1,
                    Verdict::Discarded(Discard::RetransmitLimited) => assert_eq!(sent, 0),
                    other => panic!("{engine:?}: {what}: {other:?}"),
                }
            }
        }
        assert!(answered <= 1, "{engine:?}: answered {answered} times");
        for (what, _, reason) in &kinds {
            let want = 5 * kinds.iter().filter(|k| k.2 == *reason).count() as u64;
            let held = s.counters().discarded(Discard::RetransmitLimited);
            let got = s.counters().discarded(*reason);
            match reason {
                Discard::AfterHandshake => {
                    assert_eq!(got + held + answered, want, "{engine:?}: {what}")
                }
                _ => assert_eq!(got, want, "{engine:?}: {what}"),
            }
        }
        assert_eq!(s.counters().total_failures(), 0, "{engine:?}");
        // The association is whole: the client's close_notify ends it.
        r.client_ep.close(now);
        let (bye, _) = drain(&mut r.client_ep, &mut Outcome::default());
        let mut closed = Outcome::default();
        for d in &bye {
            assert_eq!(s.handle_datagram(now, d), Verdict::Taken, "{engine:?}");
            drain(s, &mut closed);
        }
        assert!(closed.closed, "{engine:?}");
        // And a finished endpoint drops what comes after.
        assert_eq!(
            s.handle_datagram(now, &bye[0]),
            Verdict::Discarded(Discard::Finished)
        );
    }
}

/// The client's last flight again and again (a replay, or a client that did not get our last
/// flight): our last flight goes out at most once per retransmission interval, however many
/// copies come in; every copy is taken once or dropped with a reason.
#[test]
fn a_retransmission_trigger_is_answered_at_most_once_per_interval() {
    let rto = Timers::default().initial_rto;
    for engine in engines() {
        let (mut r, t0) = connected(engine);
        let flight: Vec<Vec<u8>> = r
            .client
            .sent
            .iter()
            .filter(|d| inspect(d).is_ok_and(|s| !s.client_hello))
            .cloned()
            .collect();
        assert!(!flight.is_empty());
        let s = &mut r.server_ep;
        let mut answers_per_interval = Vec::new();
        for interval in 0..3u32 {
            let start = t0 + rto * interval;
            let (mut taken, mut sent) = (0, 0);
            for k in 0..20u32 {
                for d in &flight {
                    let (v, n) = feed(s, start + Duration::from_millis(u64::from(k) * 10), d);
                    match v {
                        Verdict::Taken => taken += 1,
                        Verdict::Discarded(
                            Discard::AfterHandshake
                            | Discard::Unauthenticated
                            | Discard::RetransmitLimited,
                        ) => {}
                        other => panic!("{engine:?}: {other:?}"),
                    }
                    sent += n;
                }
            }
            assert!(
                taken <= 1,
                "{engine:?}: answered {taken} times in one interval"
            );
            assert!(sent <= r.server.sent.len(), "{engine:?}: {sent} datagrams");
            answers_per_interval.push(taken);
            assert_eq!(s.state(), State::Connected, "{engine:?}");
        }
        if engine == EngineChoice::Dimpl {
            // dimpl answers a stale flight with its last one (the client may have missed it):
            // once in the first interval, never more than once in any.
            assert_eq!(answers_per_interval[0], 1, "{engine:?}");
        }
        eprintln!(
            "{engine:?}: answered {answers_per_interval:?}, {} held back",
            s.counters().discarded(Discard::RetransmitLimited)
        );
    }
}
