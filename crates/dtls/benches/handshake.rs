//! DTLS 1.2 handshakes per second, both ends in one process over memory, on one core.
//!
//! Every handshake: DTLS 1.2, mutual authentication with ECDSA P-256 self-signed certificates
//! (generated once, outside the timed region, and shared by both implementations), ECDHE on
//! P-256, `use_srtp`, and the `EXTRACTOR-dtls_srtp` block exported on both sides and compared
//! (in full once before timing, and with a cheap 60-byte compare inside every timed handshake).
//! Endpoint construction is inside the timed region for both stacks (secrelay's `Endpoint::new`
//! from a prepared `EndpointConfig`; OpenSSL's `SSL_new` from a prepared `SSL_CTX`).
//!
//! Groups (time per element = time per handshake):
//! - `handshake/*`: a whole handshake, both sides, datagrams moved between them in memory.
//!   `secrelay-dimpl` runs with server cookies off (OpenSSL's in-memory set-up has none),
//!   `secrelay-dimpl-cookies` with dimpl's own cookie exchange on (one more round trip; the
//!   endpoint is made at the first ClientHello), and `secrelay-dimpl-responder` behind the
//!   stateless `CookieResponder` as `lab handshake-server` runs it (the responder answers the
//!   first ClientHello; the endpoint is made with `Endpoint::new_admitted` at the second and
//!   takes the handshake over).
//! - `handshake-server-side/*`: only the time spent inside the server's calls (construction,
//!   datagram handling, draining; the responder's checks for `secrelay-dimpl-responder`),
//!   summed with `Instant` around each call.
//! - `crypto-floor/*`: aws-lc-rs directly, one side's crypto for a mutual-auth ECDHE-ECDSA
//!   handshake: one ECDSA P-256 sign, one ECDSA P-256 verify (the peer's
//!   ServerKeyExchange/CertificateVerify; the peer's certificate signature is not verified —
//!   self-signed, authenticated by fingerprint), one ephemeral P-256 key generation (with its
//!   public point) and one ECDH agreement.
//!
//! - `handshake-engines/*`: secrelay's endpoint on each engine, with raw OpenSSL beside it:
//!   `secrelay-dimpl` and `secrelay-openssl-engine` (ECDSA P-256 both sides, cookies off),
//!   `openssl` (the same over `secrelay-peers`' wrapper), and with an RSA-2048 server certificate
//!   (ECDHE-RSA; dimpl cannot be an RSA server) `secrelay-openssl-engine-rsa2048` and `openssl-rsa2048`. The
//!   difference between the engine and raw OpenSSL is the engine's own cost (datagram copies,
//!   the endpoint's checks and key split).
//!
//! - `rsa-peer-server-side/*`: the server's calls only (as `handshake-server-side`), our server
//!   with its ECDSA P-256 certificate and cookies off, the client secrelay's OpenSSL engine:
//!   `dimpl-rsa2048-client` (the default: dimpl takes the RSA-2048 client certificate and
//!   verifies its RSASSA-PKCS1-v1_5 CertificateVerify), `openssl-engine-rsa2048-client` (the
//!   same client on an OpenSSL-engine server, the alternative of running RSA peers on OpenSSL),
//!   and `dimpl-ecdsa-client` (an ECDSA P-256 client, for the difference RSA makes).
//!
//! - `setup-overhead/*`: constructing one endpoint (no datagrams) — `dimpl::Config` building
//!   alone, secrelay's `Endpoint::new`, OpenSSL's `SSL_new` + BIO.
//!
//! - `dhe-ffdhe2048/*`: OpenSSL's DH operations on the OpenSSL engine's RFC 7919 ffdhe2048 group:
//!   `keygen` (a key pair with its public value), `agree-unchecked` (one agreement, the peer's
//!   public value not validated) and `agree-validated` (the same with
//!   `EVP_PKEY_derive_set_peer`'s full validation, y^q mod p = 1 with the 2047-bit q of a
//!   safe-prime group). A DHE-RSA handshake on OpenSSL 3.0 validates three times (the client
//!   twice, the server once): that, not the key generation or agreement, is what DHE adds to
//!   the handshake (`docs/benchmarks.md`, the 002 d phase tables).
//!
//! Run: `cargo bench -p secrelay-dtls --bench handshake`. Read ratios, not absolute times
//! (docs: `PERFORMANCE.md`, "side by side, one run, ratios").

use std::hint::black_box;
use std::time::{Duration, Instant};

use aws_lc_rs::agreement::{self, EphemeralPrivateKey, UnparsedPublicKey as AgreePublicKey};
use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{self, EcdsaKeyPair, KeyPair, UnparsedPublicKey};
use criterion::{criterion_group, criterion_main, Criterion, SamplingMode, Throughput};
use secrelay_dtls::cookie::{CookieResponder, CookieVerdict};
use secrelay_dtls::keying::keying_material_len;
use secrelay_dtls::{
    Certificate, Endpoint, EndpointConfig, EngineChoice, Event, KeyType, LocalCertificate, Output,
    Role,
};
use secrelay_peers::openssl_dtls::{DtlsRole, DtlsSettings, OpensslDtls, OpensslDtlsContext, Step};
use secrelay_srtp::Profile;

/// One side of an in-memory handshake.
trait Side {
    /// Called once after construction; a client queues its first flight.
    fn start(&mut self, out: &mut Vec<Vec<u8>>);
    /// Handles one flight from the peer (drained), appending what it sends to `out`.
    fn feed(&mut self, flight: &mut Vec<Vec<u8>>, out: &mut Vec<Vec<u8>>);
    /// The exported keying block, once connected.
    fn block(&self) -> Option<&[u8]>;
}

/// secrelay's sans-IO endpoint (dimpl engine).
struct Dimpl {
    ep: Endpoint,
    now: Instant,
    block: Option<Vec<u8>>,
}

impl Dimpl {
    fn new(config: &EndpointConfig) -> Self {
        let now = Instant::now();
        let ep = Endpoint::new(config.clone(), now).expect("endpoint config");
        Dimpl {
            ep,
            now,
            block: None,
        }
    }

    fn drain(&mut self, out: &mut Vec<Vec<u8>>) {
        while let Some(o) = self.ep.poll_output() {
            match o {
                Output::Transmit(d) => out.push(d),
                Output::Timeout(_) => break,
                Output::Event(Event::Connected { keys, .. }) => {
                    self.block = Some(keys.exported().as_bytes().to_vec())
                }
                Output::Event(e) => panic!("unexpected event {e:?}"),
            }
        }
    }
}

impl Side for Dimpl {
    fn start(&mut self, out: &mut Vec<Vec<u8>>) {
        self.drain(out);
    }

    fn feed(&mut self, flight: &mut Vec<Vec<u8>>, out: &mut Vec<Vec<u8>>) {
        for d in flight.drain(..) {
            self.ep.handle_datagram(self.now, &d);
            self.drain(out);
        }
    }

    fn block(&self) -> Option<&[u8]> {
        self.block.as_deref()
    }
}

/// secrelay's server behind the stateless cookie responder, as `lab handshake-server` runs it:
/// no endpoint until a ClientHello returns a valid cookie, then `Endpoint::new_admitted`.
struct Fronted<'a> {
    responder: &'a CookieResponder,
    config: &'a EndpointConfig,
    ep: Option<Dimpl>,
}

impl<'a> Fronted<'a> {
    /// The client's address, as the responder binds cookies to it.
    const PEER: std::net::SocketAddr = std::net::SocketAddr::V4(std::net::SocketAddrV4::new(
        std::net::Ipv4Addr::new(192, 0, 2, 7),
        40_000,
    ));

    fn new(s: &'a Setup) -> Self {
        Fronted {
            responder: &s.responder,
            config: &s.dimpl_server_cookies,
            ep: None,
        }
    }
}

impl Side for Fronted<'_> {
    fn start(&mut self, _out: &mut Vec<Vec<u8>>) {}

    fn feed(&mut self, flight: &mut Vec<Vec<u8>>, out: &mut Vec<Vec<u8>>) {
        for d in flight.drain(..) {
            if let Some(ep) = self.ep.as_mut() {
                ep.ep.handle_datagram(ep.now, &d);
                ep.drain(out);
                continue;
            }
            match self.responder.check(Self::PEER, &d) {
                CookieVerdict::HelloVerifyRequest(hvr) => out.push(hvr),
                CookieVerdict::Admit(a) => {
                    let now = Instant::now();
                    let ep = Endpoint::new_admitted(self.config.clone(), now, &a)
                        .expect("endpoint config");
                    let mut ep = Dimpl {
                        ep,
                        now,
                        block: None,
                    };
                    ep.drain(out);
                    self.ep = Some(ep);
                }
                v => panic!("the responder answered {v:?}"),
            }
        }
    }

    fn block(&self) -> Option<&[u8]> {
        self.ep.as_ref().and_then(|e| e.block())
    }
}

/// OpenSSL 3.0 through the `openssl` crate, in-memory transport.
struct Ossl {
    conn: OpensslDtls,
    block: Option<Vec<u8>>,
}

impl Ossl {
    fn new(ctx: &OpensslDtlsContext) -> Self {
        Ossl {
            conn: ctx.endpoint().expect("openssl endpoint"),
            block: None,
        }
    }

    fn step(&mut self, out: &mut Vec<Vec<u8>>) {
        let step = self.conn.handshake_step().expect("openssl handshake");
        self.conn.drain_outgoing_into(out);
        if step == Step::Done && self.block.is_none() {
            let profile = self
                .conn
                .srtp_profile_id()
                .and_then(Profile::from_dtls_id)
                .expect("negotiated SRTP profile");
            let mut block = vec![0u8; keying_material_len(profile)];
            self.conn
                .keying_material_into(&mut block)
                .expect("export keying material");
            self.block = Some(block);
        }
    }
}

impl Side for Ossl {
    fn start(&mut self, out: &mut Vec<Vec<u8>>) {
        if self.conn.role() == DtlsRole::Client {
            self.step(out);
        }
    }

    fn feed(&mut self, flight: &mut Vec<Vec<u8>>, out: &mut Vec<Vec<u8>>) {
        // A whole flight is queued, then OpenSSL runs once over it.
        for d in flight.drain(..) {
            self.conn.push_incoming(d);
        }
        self.step(out);
    }

    fn block(&self) -> Option<&[u8]> {
        self.block.as_deref()
    }
}

/// One handshake; returns both sides and the time spent inside the server's calls.
fn handshake<C: Side, S: Side>(
    make_client: impl FnOnce() -> C,
    make_server: impl FnOnce() -> S,
) -> (C, S, Duration) {
    let t = Instant::now();
    let mut server = make_server();
    let mut to_client = Vec::new();
    server.start(&mut to_client);
    let mut server_time = t.elapsed();

    let mut client = make_client();
    let mut to_server = Vec::new();
    client.start(&mut to_server);
    client.feed(&mut to_client, &mut to_server);
    for _ in 0..16 {
        if !to_server.is_empty() {
            let t = Instant::now();
            server.feed(&mut to_server, &mut to_client);
            server_time += t.elapsed();
        }
        if !to_client.is_empty() {
            client.feed(&mut to_client, &mut to_server);
        }
        if to_server.is_empty()
            && to_client.is_empty()
            && client.block().is_some()
            && server.block().is_some()
        {
            return (client, server, server_time);
        }
    }
    panic!(
        "handshake did not finish: client connected {}, server connected {}",
        client.block().is_some(),
        server.block().is_some()
    );
}

/// A timed handshake with the cheap in-loop key check.
fn checked<C: Side, S: Side>(
    make_client: impl FnOnce() -> C,
    make_server: impl FnOnce() -> S,
) -> Duration {
    let (c, s, server_time) = handshake(make_client, make_server);
    assert!(c.block() == s.block(), "keying blocks differ");
    black_box((c, s));
    server_time
}

/// Shared identities and prepared configurations.
struct Setup {
    dimpl_client: EndpointConfig,
    dimpl_server: EndpointConfig,
    dimpl_server_cookies: EndpointConfig,
    responder: CookieResponder,
    ossl_client: OpensslDtlsContext,
    ossl_server: OpensslDtlsContext,
    client_cert: Certificate,
    server_cert: Certificate,
}

fn setup() -> Setup {
    let client_cert = Certificate::self_signed(KeyType::EcdsaP256, "bench-client").unwrap();
    let server_cert = Certificate::self_signed(KeyType::EcdsaP256, "bench-server").unwrap();
    let dimpl_client = EndpointConfig::new(
        Role::Client,
        LocalCertificate::from(&client_cert),
        server_cert.fingerprint(),
    );
    let mut dimpl_server = EndpointConfig::new(
        Role::Server,
        LocalCertificate::from(&server_cert),
        client_cert.fingerprint(),
    );
    let dimpl_server_cookies = dimpl_server.clone();
    dimpl_server.server_cookies = false;
    let ossl_client = OpensslDtlsContext::from_der(
        DtlsRole::Client,
        client_cert.der(),
        client_cert.private_key_der(),
    )
    .expect("openssl client context");
    let ossl_server = OpensslDtlsContext::from_der(
        DtlsRole::Server,
        server_cert.der(),
        server_cert.private_key_der(),
    )
    .expect("openssl server context");
    Setup {
        dimpl_client,
        dimpl_server,
        dimpl_server_cookies,
        responder: CookieResponder::random().expect("randomness"),
        ossl_client,
        ossl_server,
        client_cert,
        server_cert,
    }
}

/// Full checks once, outside timing: every pairing completes, blocks match, the OpenSSL side saw
/// the right certificate, and the secrelay side's profile is what OpenSSL reports.
fn verify_once(s: &Setup) {
    let (c, sv, _) = handshake(
        || Dimpl::new(&s.dimpl_client),
        || Dimpl::new(&s.dimpl_server),
    );
    assert_eq!(c.block(), sv.block());
    assert!(c.block().is_some_and(|b| b.iter().any(|&x| x != 0)));
    let (c, sv, _) = handshake(
        || Dimpl::new(&s.dimpl_client),
        || Dimpl::new(&s.dimpl_server_cookies),
    );
    assert_eq!(c.block(), sv.block());
    let (c, sv, _) = handshake(|| Dimpl::new(&s.dimpl_client), || Fronted::new(s));
    assert_eq!(c.block(), sv.block());
    assert!(c.block().is_some());
    let (c, sv, _) = handshake(|| Ossl::new(&s.ossl_client), || Ossl::new(&s.ossl_server));
    assert_eq!(c.block(), sv.block());
    assert_eq!(sv.conn.version(), "DTLSv1.2");
    assert_eq!(sv.conn.cipher_name(), Some("ECDHE-ECDSA-AES128-GCM-SHA256"));
    let (c, sv, _) = handshake(|| Dimpl::new(&s.dimpl_client), || Ossl::new(&s.ossl_server));
    assert_eq!(c.block(), sv.block());
    assert_eq!(
        sv.conn.peer_certificate_der().as_deref(),
        Some(s.client_cert.der())
    );
    eprintln!(
        "secrelay client <-> openssl server: {} / {}",
        sv.conn.version(),
        sv.conn.srtp_profile_name().unwrap_or_default()
    );
    let (c, sv, _) = handshake(|| Ossl::new(&s.ossl_client), || Dimpl::new(&s.dimpl_server));
    assert_eq!(c.block(), sv.block());
    assert_eq!(
        c.conn.peer_certificate_der().as_deref(),
        Some(s.server_cert.der())
    );
    eprintln!(
        "openssl client <-> secrelay server: {} / {}",
        c.conn.version(),
        c.conn.srtp_profile_name().unwrap_or_default()
    );
}

/// Interleaved medians, printed before the criterion groups: every round runs one handshake of
/// each pairing and one crypto floor, so that the machine's speed drift (large on these shared
/// machines: ±30% between groups run a minute apart) cancels out of the ratios.
fn interleaved(s: &Setup, floor: &dyn Fn(), rounds: usize) {
    fn time<C: Side, S: Side>(
        mc: impl FnOnce() -> C,
        ms: impl FnOnce() -> S,
        total: &mut Vec<f64>,
        server: &mut Vec<f64>,
    ) {
        let t = Instant::now();
        let sv = checked(mc, ms);
        total.push(t.elapsed().as_secs_f64() * 1e6);
        server.push(sv.as_secs_f64() * 1e6);
    }
    fn median(v: &mut [f64]) -> f64 {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    }
    const NAMES: [&str; 6] = [
        "secrelay-dimpl",
        "openssl",
        "secrelay-client-openssl-server",
        "openssl-client-secrelay-server",
        "secrelay-dimpl-cookies",
        "secrelay-dimpl-responder",
    ];
    let mut total: Vec<Vec<f64>> = (0..6).map(|_| Vec::with_capacity(rounds)).collect();
    let mut server: Vec<Vec<f64>> = (0..6).map(|_| Vec::with_capacity(rounds)).collect();
    let mut floor_us = Vec::with_capacity(rounds);
    let mut new_us = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let (t, sv) = (&mut total, &mut server);
        let (t0, t1) = t.split_at_mut(1);
        let (s0, s1) = sv.split_at_mut(1);
        time(
            || Dimpl::new(&s.dimpl_client),
            || Dimpl::new(&s.dimpl_server),
            &mut t0[0],
            &mut s0[0],
        );
        time(
            || Ossl::new(&s.ossl_client),
            || Ossl::new(&s.ossl_server),
            &mut t1[0],
            &mut s1[0],
        );
        time(
            || Dimpl::new(&s.dimpl_client),
            || Ossl::new(&s.ossl_server),
            &mut t1[1],
            &mut s1[1],
        );
        time(
            || Ossl::new(&s.ossl_client),
            || Dimpl::new(&s.dimpl_server),
            &mut t1[2],
            &mut s1[2],
        );
        time(
            || Dimpl::new(&s.dimpl_client),
            || Dimpl::new(&s.dimpl_server_cookies),
            &mut t1[3],
            &mut s1[3],
        );
        time(
            || Dimpl::new(&s.dimpl_client),
            || Fronted::new(s),
            &mut t1[4],
            &mut s1[4],
        );
        let t = Instant::now();
        floor();
        floor_us.push(t.elapsed().as_secs_f64() * 1e6);
        let t = Instant::now();
        black_box(Endpoint::new(s.dimpl_server.clone(), Instant::now()).unwrap());
        new_us.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let new = median(&mut new_us);
    let fl = median(&mut floor_us);
    let med: Vec<(f64, f64)> = (0..6)
        .map(|i| (median(&mut total[i]), median(&mut server[i])))
        .collect();
    eprintln!("interleaved medians over {rounds} rounds (us per handshake):");
    for (name, (t, sv)) in NAMES.iter().zip(&med) {
        eprintln!(
            "  {name:<32} total {t:8.1}  server side {sv:8.1}  client side+driver {:8.1}",
            t - sv
        );
    }
    eprintln!("  crypto floor per side (aws-lc-rs)  {fl:8.1}");
    eprintln!(
        "  secrelay Endpoint::new (server)    {new:8.1}  -> server side without it {:8.1} ({:.2}x floor)",
        med[0].1 - new,
        (med[0].1 - new) / fl
    );
    eprintln!(
        "  handshakes/s secrelay / openssl: {:.2}x;  server side openssl / secrelay: {:.2}x",
        med[1].0 / med[0].0,
        med[1].1 / med[0].1
    );
    eprintln!(
        "  server side / crypto floor: secrelay {:.2}x, openssl {:.2}x",
        med[0].1 / fl,
        med[1].1 / fl
    );
}

fn configure<'a>(
    c: &'a mut Criterion,
    name: &str,
) -> criterion::BenchmarkGroup<'a, criterion::measurement::WallTime> {
    let mut g = c.benchmark_group(name);
    g.throughput(Throughput::Elements(1));
    g.sampling_mode(SamplingMode::Flat);
    g.sample_size(50);
    g.warm_up_time(Duration::from_secs(1));
    g.measurement_time(Duration::from_secs(3));
    g
}

fn bench_handshakes(c: &mut Criterion) {
    let s = setup();
    verify_once(&s);
    let floor = Floor::new();
    interleaved(
        &s,
        &|| {
            floor.all();
        },
        500,
    );

    let mut g = configure(c, "handshake");
    g.bench_function("secrelay-dimpl", |b| {
        b.iter(|| {
            checked(
                || Dimpl::new(&s.dimpl_client),
                || Dimpl::new(&s.dimpl_server),
            )
        })
    });
    g.bench_function("secrelay-dimpl-cookies", |b| {
        b.iter(|| {
            checked(
                || Dimpl::new(&s.dimpl_client),
                || Dimpl::new(&s.dimpl_server_cookies),
            )
        })
    });
    g.bench_function("secrelay-dimpl-responder", |b| {
        b.iter(|| checked(|| Dimpl::new(&s.dimpl_client), || Fronted::new(&s)))
    });
    g.bench_function("openssl", |b| {
        b.iter(|| checked(|| Ossl::new(&s.ossl_client), || Ossl::new(&s.ossl_server)))
    });
    g.bench_function("secrelay-client-openssl-server", |b| {
        b.iter(|| checked(|| Dimpl::new(&s.dimpl_client), || Ossl::new(&s.ossl_server)))
    });
    g.bench_function("openssl-client-secrelay-server", |b| {
        b.iter(|| checked(|| Ossl::new(&s.ossl_client), || Dimpl::new(&s.dimpl_server)))
    });
    g.finish();

    let mut g = configure(c, "handshake-server-side");
    g.bench_function("secrelay-dimpl", |b| {
        b.iter_custom(|iters| {
            (0..iters)
                .map(|_| {
                    checked(
                        || Dimpl::new(&s.dimpl_client),
                        || Dimpl::new(&s.dimpl_server),
                    )
                })
                .sum()
        })
    });
    g.bench_function("secrelay-dimpl-cookies", |b| {
        b.iter_custom(|iters| {
            (0..iters)
                .map(|_| {
                    checked(
                        || Dimpl::new(&s.dimpl_client),
                        || Dimpl::new(&s.dimpl_server_cookies),
                    )
                })
                .sum()
        })
    });
    g.bench_function("secrelay-dimpl-responder", |b| {
        b.iter_custom(|iters| {
            (0..iters)
                .map(|_| checked(|| Dimpl::new(&s.dimpl_client), || Fronted::new(&s)))
                .sum()
        })
    });
    g.bench_function("openssl", |b| {
        b.iter_custom(|iters| {
            (0..iters)
                .map(|_| checked(|| Ossl::new(&s.ossl_client), || Ossl::new(&s.ossl_server)))
                .sum()
        })
    });
    // The same server with the other implementation as client: the server's cost should not
    // depend much on who the client is.
    g.bench_function("secrelay-dimpl-vs-openssl-client", |b| {
        b.iter_custom(|iters| {
            (0..iters)
                .map(|_| checked(|| Ossl::new(&s.ossl_client), || Dimpl::new(&s.dimpl_server)))
                .sum()
        })
    });
    g.bench_function("openssl-vs-secrelay-client", |b| {
        b.iter_custom(|iters| {
            (0..iters)
                .map(|_| checked(|| Dimpl::new(&s.dimpl_client), || Ossl::new(&s.ossl_server)))
                .sum()
        })
    });
    g.finish();
}

/// secrelay on the OpenSSL engine beside raw OpenSSL, ECDSA and RSA-2048 servers.
fn bench_engines(c: &mut Criterion) {
    let s = setup();
    let openssl_engine = |mut c: EndpointConfig| {
        c.engine = EngineChoice::Openssl;
        c.server_cookies = false;
        c
    };
    let eng_client = openssl_engine(s.dimpl_client.clone());
    let eng_server = openssl_engine(s.dimpl_server.clone());
    let rsa = Certificate::self_signed(KeyType::Rsa2048, "bench-rsa-server").unwrap();
    let eng_client_rsa = {
        let mut c = eng_client.clone();
        c.peer_auth = rsa.fingerprint().into();
        c
    };
    let eng_server_rsa = {
        let mut c = eng_server.clone();
        c.certificate = LocalCertificate::from(&rsa);
        c
    };
    let rsa_settings = DtlsSettings {
        cipher_list: "ECDHE-RSA-AES128-GCM-SHA256".into(),
        ..DtlsSettings::default()
    };
    let ossl_server_rsa = OpensslDtlsContext::from_der_with(
        DtlsRole::Server,
        rsa.der(),
        rsa.private_key_der(),
        &rsa_settings,
    )
    .expect("openssl RSA server context");
    let ossl_client_rsa = OpensslDtlsContext::from_der_with(
        DtlsRole::Client,
        s.client_cert.der(),
        s.client_cert.private_key_der(),
        &rsa_settings,
    )
    .expect("openssl client context for RSA");
    // Every pairing completes with matching blocks before timing.
    checked(|| Dimpl::new(&eng_client), || Dimpl::new(&eng_server));
    checked(
        || Dimpl::new(&eng_client_rsa),
        || Dimpl::new(&eng_server_rsa),
    );
    checked(
        || Ossl::new(&ossl_client_rsa),
        || Ossl::new(&ossl_server_rsa),
    );

    let mut g = configure(c, "handshake-engines");
    g.bench_function("secrelay-dimpl", |b| {
        b.iter(|| {
            checked(
                || Dimpl::new(&s.dimpl_client),
                || Dimpl::new(&s.dimpl_server),
            )
        })
    });
    g.bench_function("secrelay-openssl-engine", |b| {
        b.iter(|| checked(|| Dimpl::new(&eng_client), || Dimpl::new(&eng_server)))
    });
    g.bench_function("openssl", |b| {
        b.iter(|| checked(|| Ossl::new(&s.ossl_client), || Ossl::new(&s.ossl_server)))
    });
    g.bench_function("secrelay-openssl-engine-rsa2048", |b| {
        b.iter(|| {
            checked(
                || Dimpl::new(&eng_client_rsa),
                || Dimpl::new(&eng_server_rsa),
            )
        })
    });
    g.bench_function("openssl-rsa2048", |b| {
        b.iter(|| {
            checked(
                || Ossl::new(&ossl_client_rsa),
                || Ossl::new(&ossl_server_rsa),
            )
        })
    });
    g.finish();
}

/// What an RSA peer costs our server: dimpl (the default) against the OpenSSL engine.
fn bench_rsa_peers(c: &mut Criterion) {
    let s = setup();
    let rsa = Certificate::self_signed(KeyType::Rsa2048, "bench-rsa-client").unwrap();
    let client = |cert: &Certificate| {
        let mut c = EndpointConfig::new(
            Role::Client,
            LocalCertificate::from(cert),
            s.server_cert.fingerprint(),
        );
        c.engine = EngineChoice::Openssl;
        c
    };
    let (rsa_client, ecdsa_client) = (client(&rsa), client(&s.client_cert));
    let server = |peer: &Certificate, engine: EngineChoice| {
        let mut c = s.dimpl_server.clone();
        c.peer_auth = peer.fingerprint().into();
        c.engine = engine;
        c
    };
    let dimpl_rsa = server(&rsa, EngineChoice::Auto);
    assert_eq!(dimpl_rsa.resolved_engine(), EngineChoice::Dimpl);
    let ossl_rsa = server(&rsa, EngineChoice::Openssl);
    let dimpl_ecdsa = server(&s.client_cert, EngineChoice::Auto);
    let pairs = [
        ("dimpl-rsa2048-client", &rsa_client, &dimpl_rsa),
        ("openssl-engine-rsa2048-client", &rsa_client, &ossl_rsa),
        ("dimpl-ecdsa-client", &ecdsa_client, &dimpl_ecdsa),
    ];
    // Every pairing completes with matching blocks before timing.
    for (_, c, srv) in pairs {
        checked(|| Dimpl::new(c), || Dimpl::new(srv));
    }
    // Interleaved medians first (one handshake of each pairing per round, so that a busy
    // machine slows all three alike), then criterion's one-pairing runs.
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); pairs.len()];
    for _ in 0..300 {
        for (i, (_, c, srv)) in pairs.iter().enumerate() {
            let t = checked(|| Dimpl::new(c), || Dimpl::new(srv));
            times[i].push(t.as_secs_f64() * 1e6);
        }
    }
    eprintln!("rsa-peer-server-side, interleaved medians over 300 rounds (server side, µs):");
    let med: Vec<f64> = times
        .iter_mut()
        .map(|v| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        })
        .collect();
    for ((name, _, _), m) in pairs.iter().zip(&med) {
        eprintln!("  {name:32} {m:8.1}");
    }
    eprintln!(
        "  RSA-2048 client: OpenSSL engine / dimpl {:.2}x; dimpl RSA-2048 / dimpl ECDSA {:.2}x",
        med[1] / med[0],
        med[0] / med[2]
    );
    let mut g = configure(c, "rsa-peer-server-side");
    for (name, c, srv) in pairs {
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| checked(|| Dimpl::new(c), || Dimpl::new(srv)))
                    .sum()
            })
        });
    }
    g.finish();
}

/// One side's crypto for a mutual-auth ECDHE-ECDSA P-256 handshake, with aws-lc-rs.
struct Floor {
    rng: SystemRandom,
    ours: EcdsaKeyPair,
    peer_public: Vec<u8>,
    ske: Vec<u8>,
    transcript: Vec<u8>,
    peer_sig: Vec<u8>,
    peer_eph_pub: Vec<u8>,
}

impl Floor {
    fn new() -> Self {
        let rng = SystemRandom::new();
        let ours_cert = Certificate::self_signed(KeyType::EcdsaP256, "floor-ours").unwrap();
        let peer_cert = Certificate::self_signed(KeyType::EcdsaP256, "floor-peer").unwrap();
        let key = |c: &Certificate| {
            EcdsaKeyPair::from_pkcs8(
                &signature::ECDSA_P256_SHA256_ASN1_SIGNING,
                c.private_key_der(),
            )
            .expect("P-256 key")
        };
        let ours = key(&ours_cert);
        let peer = key(&peer_cert);
        let peer_public = peer.public_key().as_ref().to_vec();
        // ServerKeyExchange signs randoms + ECDH params (~135 B); CertificateVerify signs the
        // handshake transcript (~1.5 KB in DTLS 1.2 with two certificates).
        let ske = vec![0x5a_u8; 32 + 32 + 4 + 65];
        let transcript = vec![0xa5_u8; 1500];
        let peer_sig = peer.sign(&rng, &transcript).expect("peer signature");
        let peer_sig = peer_sig.as_ref().to_vec();
        let peer_eph = EphemeralPrivateKey::generate(&agreement::ECDH_P256, &rng).unwrap();
        let peer_eph_pub = peer_eph.compute_public_key().unwrap().as_ref().to_vec();
        Floor {
            rng,
            ours,
            peer_public,
            ske,
            transcript,
            peer_sig,
            peer_eph_pub,
        }
    }

    fn sign(&self) -> usize {
        let sig = self.ours.sign(&self.rng, &self.ske).expect("sign");
        black_box(sig.as_ref().len())
    }

    fn verify(&self) {
        UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_ASN1, &self.peer_public)
            .verify(&self.transcript, &self.peer_sig)
            .expect("verify")
    }

    fn keygen(&self) -> EphemeralPrivateKey {
        let k = EphemeralPrivateKey::generate(&agreement::ECDH_P256, &self.rng).unwrap();
        let public = k.compute_public_key().unwrap();
        black_box(public.as_ref().len());
        k
    }

    fn agree(&self, k: EphemeralPrivateKey) -> u8 {
        agreement::agree_ephemeral(
            k,
            AgreePublicKey::new(&agreement::ECDH_P256, &self.peer_eph_pub),
            (),
            |secret| Ok(black_box(secret[0])),
        )
        .expect("agree")
    }

    /// Sign + verify + keygen + ECDH: the per-side floor.
    fn all(&self) -> u8 {
        self.sign();
        self.verify();
        self.agree(self.keygen())
    }
}

fn bench_crypto_floor(c: &mut Criterion) {
    let f = Floor::new();
    let mut g = configure(c, "crypto-floor");
    g.bench_function("p256", |b| b.iter(|| f.all()));
    g.bench_function("p256-ecdsa-sign", |b| b.iter(|| f.sign()));
    g.bench_function("p256-ecdsa-verify", |b| b.iter(|| f.verify()));
    g.bench_function("p256-keygen", |b| b.iter(|| f.keygen()));
    g.bench_function("p256-keygen+ecdh", |b| b.iter(|| f.agree(f.keygen())));
    g.finish();
}

/// Per-endpoint set-up costs: where secrelay's handshake time goes beyond the crypto floor.
/// `dimpl::Config::builder().build()` runs `CryptoProvider::validate()`, which does test key
/// exchanges for every group (X25519, P-256, P-384) and test signature verifications for every
/// cipher suite; `DimplEngine::new` builds a fresh `Config` for every `Endpoint`.
fn bench_overhead(c: &mut Criterion) {
    let s = setup();
    let mut g = configure(c, "setup-overhead");
    g.bench_function("dimpl-config-build", |b| {
        b.iter(|| {
            black_box(
                dimpl::Config::builder()
                    .use_server_cookie(false)
                    .require_client_certificate(true)
                    .build()
                    .expect("dimpl config"),
            )
        })
    });
    g.bench_function("secrelay-endpoint-new-server", |b| {
        b.iter(|| black_box(Endpoint::new(s.dimpl_server.clone(), Instant::now()).unwrap()))
    });
    g.bench_function("openssl-ssl-new-server", |b| {
        b.iter(|| black_box(s.ossl_server.endpoint().unwrap()))
    });
    g.finish();
}

/// OpenSSL's ffdhe2048 operations, with and without validating the peer's public value.
fn bench_dhe(c: &mut Criterion) {
    use openssl::derive::Deriver;
    use openssl::dh::Dh;
    use openssl::pkey::PKey;
    let pem = secrelay_dtls::engine_openssl::FFDHE2048_PEM.as_bytes();
    let params = Dh::params_from_pem(pem).expect("ffdhe2048 parameters");
    let key = || {
        let dh = Dh::from_pqg(
            params.prime_p().to_owned().expect("p"),
            params.prime_q().map(|q| q.to_owned().expect("q")),
            params.generator().to_owned().expect("g"),
        )
        .and_then(|p| p.generate_key())
        .expect("DH key");
        PKey::from_dh(dh).expect("DH PKey")
    };
    let ours = key();
    let peer = key();
    let mut g = configure(c, "dhe-ffdhe2048");
    g.bench_function("keygen", |b| b.iter(|| black_box(key())));
    for (name, validate) in [("agree-unchecked", false), ("agree-validated", true)] {
        g.bench_function(name, |b| {
            b.iter(|| {
                let mut d = Deriver::new(&ours).expect("deriver");
                d.set_peer_ex(&peer, validate).expect("peer");
                black_box(d.derive_to_vec().expect("derive"))
            })
        });
    }
    g.finish();
}

criterion_group!(
    benches,
    bench_dhe,
    bench_crypto_floor,
    bench_overhead,
    bench_handshakes,
    bench_engines,
    bench_rsa_peers
);
criterion_main!(benches);
