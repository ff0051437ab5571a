//! The OpenSSL engine's retransmissions on the injected clock are new records: every epoch-0
//! record it sends carries a sequence number it never sent before (RFC 6347 §4.2.4), so a peer
//! that saw and dropped an original (OpenSSL drops a ChangeCipherSpec that arrives before the
//! handshake messages it follows) takes the retransmission instead of discarding it as a replay.
//! And handshakes finish over lossy, reordering links for every engine pairing and suite family,
//! over many seeds, on simulated time.

mod handshake_support;

use std::collections::HashMap;
use std::time::Duration;

use std::time::Instant;

use handshake_support::{drain, run, Link, Outcome, Rng, Run};
use secrelay_dtls::{
    Certificate, CipherSuite, Endpoint, EndpointConfig, EngineChoice, KeyType, LocalCertificate,
    Role,
};

const OSSL: EngineChoice = EngineChoice::Openssl;
const DIMPL: EngineChoice = EngineChoice::Dimpl;

/// Seeds per pairing.
const SEEDS: u64 = 200;

/// One DTLS record header: content type, epoch, sequence number; and the whole record.
struct Rec<'a> {
    content_type: u8,
    epoch: u16,
    seq: u64,
    bytes: &'a [u8],
}

fn records(d: &[u8]) -> Vec<Rec<'_>> {
    let mut out = Vec::new();
    let mut rest = d;
    while rest.len() >= 13 {
        let len = 13 + usize::from(u16::from_be_bytes([rest[11], rest[12]]));
        let len = len.min(rest.len());
        out.push(Rec {
            content_type: rest[0],
            epoch: u16::from_be_bytes([rest[3], rest[4]]),
            seq: u64::from_be_bytes([0, 0, rest[5], rest[6], rest[7], rest[8], rest[9], rest[10]]),
            bytes: &rest[..len],
        });
        rest = &rest[len..];
    }
    out
}

/// Whether a record is a HelloVerifyRequest (its number echoes the ClientHello's).
fn is_hello_verify_request(r: &Rec<'_>) -> bool {
    r.epoch == 0 && r.content_type == 22 && r.bytes.get(13) == Some(&3)
}

/// What one side's datagrams show about its record numbers.
#[derive(Debug, Default)]
struct Numbering {
    /// Epoch-0 records sent under a number already used for another epoch-0 record.
    epoch0_reused: usize,
    /// Epoch-0 records sent.
    epoch0_records: usize,
    /// Epoch-1 records resent as byte copies (same number): the engine cannot re-encrypt them.
    epoch1_copies: usize,
    /// Epoch-1 records sent under a number already used for a different record (never
    /// allowed: that would be a nonce reuse).
    epoch1_conflicts: usize,
}

/// Checks every record `sent` (one side's datagrams, in order) for reused numbers.
fn numbering(sent: &[Vec<u8>]) -> Numbering {
    let mut n = Numbering::default();
    let mut seen: HashMap<(u16, u64), &[u8]> = HashMap::new();
    for d in sent {
        for r in records(d) {
            if r.epoch == 0 {
                n.epoch0_records += 1;
            }
            // A HelloVerifyRequest takes the ClientHello's number by rule (RFC 6347 §4.2.1),
            // which the client may repeat; it is not one of our own numbers.
            if is_hello_verify_request(&r) {
                continue;
            }
            match seen.insert((r.epoch, r.seq), r.bytes) {
                None => {}
                Some(_) if r.epoch == 0 => n.epoch0_reused += 1,
                Some(before) if before == r.bytes => n.epoch1_copies += 1,
                Some(_) => n.epoch1_conflicts += 1,
            }
        }
    }
    n
}

/// A lossy, reordering link: 10–30 % loss each way (by seed), 40 ms RTT with up to 60 ms of
/// jitter (so datagrams overtake each other), 5 % duplicated.
fn lossy(seed: u64) -> Link {
    Link {
        delay: Duration::from_millis(20),
        jitter: Duration::from_millis(60),
        loss: 0.10 + 0.05 * (seed % 5) as f64,
        duplicate: 0.05,
        rng: Rng::new(seed),
    }
}

/// One engine pairing with one suite family.
struct Case {
    name: &'static str,
    client: EndpointConfig,
    server: EndpointConfig,
}

fn case(
    name: &'static str,
    kind: KeyType,
    client: EngineChoice,
    server: EngineChoice,
    suites: &[CipherSuite],
) -> Case {
    let cc = Certificate::self_signed(kind, "secrelay-retransmission-client").unwrap();
    let sc = Certificate::self_signed(kind, "secrelay-retransmission-server").unwrap();
    let mut c = EndpointConfig::new(Role::Client, LocalCertificate::from(&cc), sc.fingerprint());
    let mut s = EndpointConfig::new(Role::Server, LocalCertificate::from(&sc), cc.fingerprint());
    for (cfg, engine) in [(&mut c, client), (&mut s, server)] {
        cfg.engine = engine;
        cfg.cipher_suites = suites.to_vec();
        // Enough retries that a run of bad luck at 30 % loss does not exhaust them: a failure
        // here is a stall, not the link.
        cfg.timers.max_retransmissions = 12;
        cfg.timers.handshake_timeout = Duration::from_secs(600);
    }
    Case {
        name,
        client: c,
        server: s,
    }
}

/// What `SEEDS` runs of one case came to.
struct Tally {
    /// Handshakes that did not finish, with their seeds.
    failures: Vec<String>,
    /// Records an OpenSSL side sent under a number it had used before (epoch 0), or under the
    /// number of a different record (epoch 1), with their seeds.
    reused_numbers: Vec<String>,
}

/// Runs `SEEDS` handshakes of `case` over `lossy` links, checking the OpenSSL sides' record
/// numbers.
fn run_case(case: &Case) -> Tally {
    let mut failures = Vec::new();
    let mut reused_numbers = Vec::new();
    let (mut lost, mut copies) = (0, 0);
    for seed in 0..SEEDS {
        let r: Run = run(
            case.client.clone(),
            case.server.clone(),
            lossy(seed),
            Duration::from_secs(1200),
        );
        lost += r.dropped;
        match (&r.client.connected, &r.server.connected) {
            (Some(_), Some(_)) => {
                assert_eq!(
                    r.client.keys().exported().as_bytes(),
                    r.server.keys().exported().as_bytes(),
                    "{} seed {seed}: keys differ",
                    case.name
                );
            }
            _ => failures.push(format!(
                "seed {seed}: client {:?}, server {:?}",
                r.client.failed, r.server.failed
            )),
        }
        for (side, cfg, outcome) in [
            ("client", &case.client, &r.client),
            ("server", &case.server, &r.server),
        ] {
            if cfg.engine != OSSL && cfg.resolved_engine() != OSSL {
                continue;
            }
            let n = numbering(&outcome.sent);
            if n.epoch0_reused > 0 || n.epoch1_conflicts > 0 {
                reused_numbers.push(format!("seed {seed} {side}: {n:?}"));
            }
            copies += n.epoch1_copies;
        }
    }
    eprintln!(
        "{}: {} of {SEEDS} failed, {} with reused record numbers, {lost} datagrams lost, \
         {copies} epoch-1 Finished copies",
        case.name,
        failures.len(),
        reused_numbers.len(),
    );
    assert!(lost > 0, "{}: the link lost nothing", case.name);
    Tally {
        failures,
        reused_numbers,
    }
}

fn assert_all_finish(case: Case) {
    let t = run_case(&case);
    assert!(
        t.failures.is_empty() && t.reused_numbers.is_empty(),
        "{}: {} of {SEEDS} handshakes failed: {}\nrecord numbers sent twice in {} runs: {}",
        case.name,
        t.failures.len(),
        t.failures.join("; "),
        t.reused_numbers.len(),
        t.reused_numbers.join("; ")
    );
}

/// `d` with the sequence number of every record zeroed: what a retransmission must repeat.
fn without_numbers(d: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for r in records(d) {
        let mut b = r.bytes.to_vec();
        b[5..11].fill(0);
        out.extend(b);
    }
    out
}

/// Checks one side's datagrams: its epoch-0 record numbers rise strictly (so none was sent
/// before), HelloVerifyRequests aside, and every datagram sent more than once repeats the same
/// records under new epoch-0 numbers. Returns how many datagrams were retransmissions.
fn assert_fresh_numbers(side: &str, sent: &[Vec<u8>]) -> usize {
    let mut last: Option<u64> = None;
    let mut originals: Vec<Vec<u8>> = Vec::new();
    let mut resent = 0;
    for d in sent {
        for r in records(d) {
            if r.epoch != 0 || is_hello_verify_request(&r) {
                continue;
            }
            assert!(
                last.is_none_or(|l| r.seq > l),
                "{side}: epoch-0 record number {} after {last:?}",
                r.seq
            );
            last = Some(r.seq);
        }
        let shape = without_numbers(d);
        if originals.contains(&shape) {
            resent += 1;
        } else {
            originals.push(shape);
        }
    }
    resent
}

/// Every flight is lost `drops` times, then delivered: each retransmitted datagram carries the
/// same records under epoch-0 numbers never sent before, and the handshake then finishes.
/// Covers the client's ClientHello (before and after the cookie), the server's flight 4 and
/// the client's flight 5, for ECDSA and RSA (two-datagram flights), with OpenSSL on both sides.
#[test]
fn every_retransmitted_datagram_carries_numbers_never_sent_before() {
    for kind in [KeyType::EcdsaP256, KeyType::Rsa2048] {
        let Case {
            mut client,
            mut server,
            ..
        } = case("fresh numbers", kind, OSSL, OSSL, &[]);
        // Every timer is let run past the largest RTO below: no overall deadline in the way.
        client.timers.handshake_timeout = Duration::from_secs(24 * 3600);
        server.timers.handshake_timeout = Duration::from_secs(24 * 3600);
        let mut now = Instant::now();
        let mut c = Endpoint::new(client, now).unwrap();
        let mut s = Endpoint::new(server, now).unwrap();
        let (mut co, mut so) = (Outcome::default(), Outcome::default());
        let (mut to_server, _) = drain(&mut c, &mut co);
        drain(&mut s, &mut so);
        let mut to_client: Vec<Vec<u8>> = Vec::new();
        // Each step: the flight in the air is lost twice (both sides' timers fire), then
        // delivered.
        for _ in 0..8 {
            if co.connected.is_some() && so.connected.is_some() {
                break;
            }
            for _ in 0..2 {
                now += Duration::from_secs(61);
                for (ep, out) in [(&mut c, &mut co), (&mut s, &mut so)] {
                    ep.handle_timeout(now);
                    drain(ep, out);
                }
            }
            now += Duration::from_millis(10);
            let mut next_to_client = Vec::new();
            for d in std::mem::take(&mut to_server) {
                s.handle_datagram(now, &d);
                next_to_client.extend(drain(&mut s, &mut so).0);
            }
            for d in std::mem::take(&mut to_client) {
                c.handle_datagram(now, &d);
                to_server.extend(drain(&mut c, &mut co).0);
            }
            to_client = next_to_client;
        }
        assert!(
            co.connected.is_some() && so.connected.is_some(),
            "{kind:?}: client {:?}, server {:?}",
            co.failed,
            so.failed
        );
        assert_eq!(
            co.keys().exported().as_bytes(),
            so.keys().exported().as_bytes()
        );
        let resent_c = assert_fresh_numbers("client", &co.sent);
        let resent_s = assert_fresh_numbers("server", &so.sent);
        assert!(
            resent_c >= 4 && resent_s >= 2,
            "{kind:?}: retransmissions client {resent_c}, server {resent_s}"
        );
    }
}

#[test]
fn ecdhe_ecdsa_openssl_to_openssl_finishes_under_loss() {
    assert_all_finish(case(
        "ECDHE-ECDSA openssl->openssl",
        KeyType::EcdsaP256,
        OSSL,
        OSSL,
        &[],
    ));
}

#[test]
fn ecdhe_ecdsa_openssl_client_dimpl_server_finishes_under_loss() {
    assert_all_finish(case(
        "ECDHE-ECDSA openssl->dimpl",
        KeyType::EcdsaP256,
        OSSL,
        DIMPL,
        &[],
    ));
}

#[test]
fn ecdhe_ecdsa_dimpl_client_openssl_server_finishes_under_loss() {
    assert_all_finish(case(
        "ECDHE-ECDSA dimpl->openssl",
        KeyType::EcdsaP256,
        DIMPL,
        OSSL,
        &[],
    ));
}

#[test]
fn ecdhe_rsa_openssl_to_openssl_finishes_under_loss() {
    assert_all_finish(case(
        "ECDHE-RSA openssl->openssl",
        KeyType::Rsa2048,
        OSSL,
        OSSL,
        &[CipherSuite::EcdheRsaAes128GcmSha256],
    ));
}

#[test]
fn dhe_rsa_openssl_to_openssl_finishes_under_loss() {
    assert_all_finish(case(
        "DHE-RSA openssl->openssl",
        KeyType::Rsa2048,
        OSSL,
        OSSL,
        &[CipherSuite::DheRsaAes128GcmSha256],
    ));
}

/// The stall itself, without a random link: the client's last flight spans several datagrams,
/// the first is lost, so OpenSSL's server sees the ChangeCipherSpec before the handshake messages
/// it follows and drops it. The client's retransmission (its timer fires) must bring a
/// ChangeCipherSpec the server takes, for either client engine.
#[test]
fn a_change_cipher_spec_dropped_early_is_taken_from_the_retransmission() {
    for client_engine in [OSSL, DIMPL] {
        let Case {
            mut client,
            mut server,
            ..
        } = case("early CCS", KeyType::EcdsaP256, client_engine, OSSL, &[]);
        // Small datagrams: every flight spans several.
        client.mtu = 400;
        server.mtu = 400;
        server.server_cookies = false;
        let mut now = Instant::now();
        let mut c = Endpoint::new(client, now).unwrap();
        let mut s = Endpoint::new(server, now).unwrap();
        let (mut co, mut so) = (Outcome::default(), Outcome::default());
        let deliver = |ep: &mut Endpoint, out: &mut Outcome, now, ds: &[Vec<u8>]| {
            let mut tx = Vec::new();
            for d in ds {
                ep.handle_datagram(now, d);
                tx.extend(drain(ep, out).0);
            }
            tx
        };
        let hello = drain(&mut c, &mut co).0;
        drain(&mut s, &mut so);
        let flight4 = deliver(&mut s, &mut so, now, &hello);
        let flight5 = deliver(&mut c, &mut co, now, &flight4);
        assert!(
            flight5.len() >= 2,
            "{client_engine:?}: flight 5 in one datagram"
        );
        let ccs_at = flight5
            .iter()
            .position(|d| records(d).iter().any(|r| r.content_type == 20))
            .expect("a ChangeCipherSpec in flight 5");
        assert!(
            ccs_at > 0,
            "{client_engine:?}: the CCS is in the first datagram"
        );
        // The first datagram is lost: the server takes the later ones, CCS included, early.
        let answer = deliver(&mut s, &mut so, now, &flight5[1..]);
        assert!(answer.is_empty() && so.connected.is_none() && so.failed.is_none());
        // The client's timer fires; its retransmission arrives whole.
        let mut last = Vec::new();
        for _ in 0..6 {
            if so.connected.is_some() {
                break;
            }
            now += Duration::from_secs(61);
            c.handle_timeout(now);
            let again = drain(&mut c, &mut co).0;
            last = deliver(&mut s, &mut so, now, &again);
        }
        assert!(
            so.connected.is_some(),
            "{client_engine:?}: the server never took the retransmitted flight: {so:?}"
        );
        deliver(&mut c, &mut co, now, &last);
        assert!(co.connected.is_some(), "{client_engine:?}: client {co:?}");
        assert_eq!(
            co.keys().exported().as_bytes(),
            so.keys().exported().as_bytes()
        );
    }
}

#[test]
fn ecdhe_ecdsa_ccm8_openssl_to_openssl_finishes_under_loss() {
    assert_all_finish(case(
        "ECDHE-ECDSA-CCM8 openssl->openssl",
        KeyType::EcdsaP256,
        OSSL,
        OSSL,
        &[CipherSuite::EcdheEcdsaAes128Ccm8],
    ));
}
