//! Handshakes over a bad simulated link — loss, reordering, duplication, a 300 ms RTT — finish
//! through the retransmission timers. All on simulated time, deterministic seeds.

mod handshake_support;

use std::time::Duration;

use handshake_support::{configs, run, Link, Rng};
use secrelay_dtls::DtlsVersion;

fn link(rtt_ms: u64, jitter_ms: u64, loss: f64, duplicate: f64, seed: u64) -> Link {
    Link {
        delay: Duration::from_millis(rtt_ms / 2),
        jitter: Duration::from_millis(jitter_ms),
        loss,
        duplicate,
        rng: Rng::new(seed),
    }
}

fn assert_connected(r: &handshake_support::Run, what: &str) {
    assert_eq!(r.client.failed, None, "{what}: client failed");
    assert_eq!(r.server.failed, None, "{what}: server failed");
    assert_eq!(
        r.client.keys().local.key(),
        r.server.keys().remote.key(),
        "{what}"
    );
    assert_eq!(
        r.client.keys().remote.key(),
        r.server.keys().local.key(),
        "{what}"
    );
}

#[test]
fn rtt_300ms_without_loss_needs_no_retransmission() {
    for version in [DtlsVersion::Dtls12, DtlsVersion::Dtls13] {
        let (mut c, mut s) = configs();
        c.version = version;
        s.version = version;
        let r = run(c, s, link(300, 0, 0.0, 0.0, 1), Duration::from_secs(60));
        assert_connected(&r, "300ms");
        // DTLS 1.2 with a cookie: 3 round trips; 1.3 with HRR: about as many.
        assert!(r.elapsed < Duration::from_millis(1000), "{:?}", r.elapsed);
        assert_eq!(r.dropped, 0);
    }
}

/// 300 ms RTT, 120 ms jitter (reordering), 20% loss and 15% duplication each way, default
/// timers. Nearly all handshakes complete through retransmission; the odd one whose final
/// flights are lost again and again hits the 30 s deadline and must say so. dimpl jitters its
/// timers with its own RNG, so a seed does not pin a run: the test counts.
#[test]
fn rtt_300ms_with_loss_reordering_and_duplicates_completes() {
    let mut worst = Duration::ZERO;
    let mut total_dropped = 0;
    let mut ok = 0;
    for version in [DtlsVersion::Dtls12, DtlsVersion::Dtls13] {
        for seed in 0..25 {
            let (mut c, mut s) = configs();
            c.version = version;
            s.version = version;
            let r = run(
                c,
                s,
                link(300, 120, 0.2, 0.15, seed),
                Duration::from_secs(60),
            );
            total_dropped += r.dropped;
            if r.client.connected.is_some() && r.server.connected.is_some() {
                assert_connected(&r, &format!("{version:?} seed {seed}"));
                worst = worst.max(r.elapsed);
                ok += 1;
            } else {
                for f in [r.client.failed, r.server.failed].into_iter().flatten() {
                    assert_eq!(
                        f,
                        secrelay_dtls::FailReason::HandshakeTimeout,
                        "{version:?} seed {seed}"
                    );
                }
            }
        }
    }
    assert!(ok >= 45, "only {ok}/50 completed");
    assert!(total_dropped > 20, "the link should have lost datagrams");
    assert!(worst < Duration::from_secs(30), "worst {worst:?}");
}

/// 35% loss each way: most handshakes still finish through backoff; the rest must end with
/// `HandshakeTimeout`, not hang. (dimpl jitters its timers with its own RNG, so runs are not
/// bit-for-bit repeatable; hence a rate, not "all".)
#[test]
fn heavy_loss_mostly_completes_via_backoff() {
    let mut ok = 0;
    for seed in 100..120 {
        let (mut c, mut s) = configs();
        for cfg in [&mut c, &mut s] {
            cfg.timers.handshake_timeout = Duration::from_secs(60);
            cfg.timers.max_retransmissions = 8;
        }
        let r = run(
            c,
            s,
            link(100, 50, 0.35, 0.0, seed),
            Duration::from_secs(120),
        );
        if r.client.connected.is_some() && r.server.connected.is_some() {
            assert_connected(&r, &format!("seed {seed}"));
            ok += 1;
        } else {
            for f in [r.client.failed, r.server.failed].into_iter().flatten() {
                assert_eq!(
                    f,
                    secrelay_dtls::FailReason::HandshakeTimeout,
                    "seed {seed}"
                );
            }
        }
    }
    assert!(ok >= 16, "only {ok}/20 completed");
}

#[test]
fn total_loss_times_out_with_a_reason() {
    let (c, s) = configs();
    let r = run(c, s, link(100, 0, 1.0, 0.0, 7), Duration::from_secs(120));
    assert_eq!(
        r.client.failed,
        Some(secrelay_dtls::FailReason::HandshakeTimeout)
    );
    assert!(r.client.transmits >= 2, "the client retransmitted");
    // The server never heard anything: it is still waiting, with no state beyond itself.
    assert!(r.server.failed.is_none() && r.server.connected.is_none());
}
