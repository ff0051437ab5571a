//! Application data over an established association (WebRTC data channels carry SCTP this
//! way): with `application_data` on, each engine pair (dimpl and OpenSSL, either role, DTLS 1.2
//! and dimpl's 1.3) carries records both ways intact and in order; with it off, what arrives is
//! discarded and counted, and nothing can be sent; nothing is sent before the handshake ends.

mod handshake_support;

use std::time::{Duration, Instant};

use handshake_support::{drain, run, Link, Outcome};
use secrelay_dtls::{
    Certificate, Discard, DtlsVersion, Endpoint, EndpointConfig, EngineChoice, KeyType,
    LocalCertificate, Role, SendError, Verdict,
};

const OSSL: EngineChoice = EngineChoice::Openssl;
const DIMPL: EngineChoice = EngineChoice::Dimpl;

fn configs(
    client: EngineChoice,
    server: EngineChoice,
    on: bool,
) -> (EndpointConfig, EndpointConfig) {
    let cc = Certificate::self_signed(KeyType::EcdsaP256, "app-data-client").unwrap();
    let sc = Certificate::self_signed(KeyType::EcdsaP256, "app-data-server").unwrap();
    let mut c = EndpointConfig::new(Role::Client, LocalCertificate::from(&cc), sc.fingerprint());
    let mut s = EndpointConfig::new(Role::Server, LocalCertificate::from(&sc), cc.fingerprint());
    c.engine = client;
    s.engine = server;
    c.application_data = on;
    s.application_data = on;
    (c, s)
}

/// Sends `records` from `from` to `to` one datagram at a time; returns what `to` handed out
/// and the verdicts of the datagrams it was fed.
fn carry(
    from: &mut Endpoint,
    to: &mut Endpoint,
    records: &[Vec<u8>],
    now: Instant,
) -> (Vec<Vec<u8>>, Vec<Verdict>) {
    let mut sent = Outcome::default();
    for r in records {
        from.send_application_data(now, r)
            .expect("send once connected");
    }
    let (tx, _) = drain(from, &mut sent);
    assert_eq!(tx.len(), records.len(), "one datagram per record");
    let mut got = Outcome::default();
    let mut verdicts = Vec::new();
    for d in &tx {
        verdicts.push(to.handle_datagram(now, d));
        drain(to, &mut got);
    }
    (got.app_data, verdicts)
}

fn records() -> Vec<Vec<u8>> {
    vec![
        b"first".to_vec(),
        (0..1200u32).map(|i| (i % 251) as u8).collect(),
        vec![0],
        b"last".to_vec(),
    ]
}

#[test]
fn records_cross_both_ways_on_every_engine_pair() {
    let cases = [
        (DIMPL, DIMPL, DtlsVersion::Dtls12),
        (DIMPL, DIMPL, DtlsVersion::Dtls13),
        (OSSL, DIMPL, DtlsVersion::Dtls12),
        (DIMPL, OSSL, DtlsVersion::Dtls12),
        (OSSL, OSSL, DtlsVersion::Dtls12),
    ];
    for (client, server, version) in cases {
        let what = format!("{client:?} client, {server:?} server, {version:?}");
        let (mut c, mut s) = configs(client, server, true);
        c.version = version;
        s.version = version;
        let mut r = run(c, s, Link::perfect(), Duration::from_secs(30));
        assert!(
            r.client.failed.is_none() && r.server.failed.is_none(),
            "{what}: {:?} {:?}",
            r.client.failed,
            r.server.failed
        );
        let now = Instant::now() + Duration::from_secs(1);
        let (got, verdicts) = carry(&mut r.client_ep, &mut r.server_ep, &records(), now);
        assert_eq!(got, records(), "{what}: client to server");
        assert!(
            verdicts.iter().all(|v| *v == Verdict::Taken),
            "{what}: {verdicts:?}"
        );
        let back: Vec<Vec<u8>> = records().into_iter().rev().collect();
        let (got, _) = carry(&mut r.server_ep, &mut r.client_ep, &back, now);
        assert_eq!(got, back, "{what}: server to client");
        assert_eq!(r.server_ep.counters().app_data_in, 4, "{what}");
        assert_eq!(r.server_ep.counters().app_data_out, 4, "{what}");
        assert_eq!(r.client_ep.counters().app_data_discarded, 0, "{what}");
    }
}

#[test]
fn without_application_data_records_are_discarded_and_counted_and_none_can_be_sent() {
    for (client, server) in [(DIMPL, DIMPL), (OSSL, DIMPL), (DIMPL, OSSL)] {
        let what = format!("{client:?} client, {server:?} server");
        // The client may send; the server did not ask for application data.
        let (c, mut s) = configs(client, server, true);
        s.application_data = false;
        let mut r = run(c, s, Link::perfect(), Duration::from_secs(30));
        let now = Instant::now() + Duration::from_secs(1);
        let (got, verdicts) = carry(&mut r.client_ep, &mut r.server_ep, &records(), now);
        assert!(got.is_empty(), "{what}");
        assert!(
            verdicts
                .iter()
                .all(|v| *v == Verdict::Discarded(Discard::ApplicationData)),
            "{what}: {verdicts:?}"
        );
        assert_eq!(r.server_ep.counters().app_data_discarded, 4, "{what}");
        assert_eq!(
            r.server_ep.send_application_data(now, b"x"),
            Err(SendError::NotEnabled),
            "{what}"
        );
    }
}

#[test]
fn nothing_is_sent_before_the_handshake_completes() {
    let (c, _) = configs(DIMPL, DIMPL, true);
    let mut ep = Endpoint::new(c, Instant::now()).unwrap();
    assert_eq!(
        ep.send_application_data(Instant::now(), b"early"),
        Err(SendError::NotConnected)
    );
    assert_eq!(ep.counters().app_data_out, 0);
}
