//! `002_…` d: the DTLS handshake broken into phases, per cipher suite × certificate, on three
//! links (part of `lab handshake --in-memory` and `lab all`).
//!
//! Rows: ECDHE-ECDSA-AES128-GCM-SHA256, ECDHE-ECDSA-AES256-GCM-SHA384,
//! ECDHE-RSA-AES128-GCM-SHA256, ECDHE-ECDSA-AES128-CCM8 and DHE-RSA-AES128-GCM-SHA256, each
//! with RSA-2048, RSA-3072, ECDSA P-256 and ECDSA P-384 certificates. A suite that cannot go
//! with a certificate (an ECDSA suite with an RSA key) is a "not applicable" row with the
//! reason; a combination the stack refuses is a "refused" row with the stack's reason. No row
//! is dropped.
//!
//! Every handshake is secrelay's endpoint against secrelay's endpoint (both on the engine the
//! row resolves to: `--engine auto` takes dimpl for ECDSA certificates and its two GCM suites,
//! OpenSSL for RSA, CCM_8 and DHE), DTLS 1.2, both sides with a self-signed certificate of the
//! row's type checked against its SHA-256 fingerprint (mutual authentication, as in WebRTC),
//! the server's cookie exchange on, `use_srtp`, and the exported keys compared.
//!
//! # Time
//! The endpoints are sans-IO and take the time as an argument, so the links are simulated: a
//! discrete-event loop hands each datagram to its receiver at `sent + RTT/2` of *simulated*
//! time (nobody sleeps), drops datagrams with the link's loss rate from a seeded generator, and
//! fires each side's retransmission timer when the simulated clock reaches it. Each call into
//! an endpoint is timed with the real clock and that *measured CPU time* is added to the side's
//! simulated clock (a busy side answers later), so a simulated handshake time is link delays
//! plus the CPU time on the critical path. In memory (no delay) the whole handshake is reported
//! as the two sides' CPU time added up (one core running both, as the rest of the study does).
//!
//! # Phases
//! Certificate validation, fingerprint, handshake signature and verification, ephemeral key
//! generation and the shared secret are timed with the lab's [`Bench`] as the crypto operation
//! of that suite and certificate in the library the row's engine uses: aws-lc-rs for dimpl,
//! OpenSSL for the OpenSSL engine.

use std::cell::RefCell;
use std::hint::black_box;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use secrelay_dtls::{
    Certificate, CipherSuite, Endpoint, EndpointConfig, EngineChoice, Event, KeyType,
    LocalCertificate, Output, Role,
};

use crate::frame::{Cell, Plot, PlotKind, Series, Table};
use crate::measure::{Bench, Timing};

/// The suites of the table, in its order.
pub const SUITES: [CipherSuite; 5] = [
    CipherSuite::EcdheEcdsaAes128GcmSha256,
    CipherSuite::EcdheEcdsaAes256GcmSha384,
    CipherSuite::EcdheRsaAes128GcmSha256,
    CipherSuite::EcdheEcdsaAes128Ccm8,
    CipherSuite::DheRsaAes128GcmSha256,
];

/// The certificates of the table, in its order.
pub const CERTS: [KeyType; 4] = [
    KeyType::Rsa2048,
    KeyType::Rsa3072,
    KeyType::EcdsaP256,
    KeyType::EcdsaP384,
];

/// A simulated link between the two endpoints.
#[derive(Debug, Clone, Copy)]
pub struct Link {
    /// Name in the tables.
    pub name: &'static str,
    /// Round trip time (each datagram takes half of it).
    pub rtt: Duration,
    /// Probability that a datagram is lost, each direction.
    pub loss: f64,
}

/// No delay, no loss.
pub const IN_MEMORY: Link = Link {
    name: "in memory",
    rtt: Duration::ZERO,
    loss: 0.0,
};
/// An emulated LAN: 0.2 ms RTT, no loss.
pub const LAN: Link = Link {
    name: "LAN",
    rtt: Duration::from_micros(200),
    loss: 0.0,
};
/// An emulated WAN: 40 ms RTT, 1 % loss each way.
pub const WAN: Link = Link {
    name: "WAN",
    rtt: Duration::from_millis(40),
    loss: 0.01,
};

/// Whether a suite authenticates with an RSA certificate.
fn needs_rsa(s: CipherSuite) -> bool {
    matches!(
        s,
        CipherSuite::EcdheRsaAes128GcmSha256
            | CipherSuite::EcdheRsaAes256GcmSha384
            | CipherSuite::DheRsaAes128GcmSha256
    )
}

/// Why a suite and a certificate cannot go together, if they cannot.
pub fn not_applicable(suite: CipherSuite, cert: KeyType) -> Option<String> {
    let name = suite.openssl_name();
    if needs_rsa(suite) && !cert.is_rsa() {
        Some(format!(
            "not applicable: {name} signs its key exchange with an RSA key (RFC 5246 §7.4.3); a {cert} certificate holds none"
        ))
    } else if !needs_rsa(suite) && cert.is_rsa() {
        Some(format!(
            "not applicable: {name} needs an ECDSA-capable certificate (RFC 8422 §5.1); an {cert} certificate is RSA"
        ))
    } else {
        None
    }
}

/// One simulated handshake.
#[derive(Debug, Clone, Copy)]
pub struct SimRun {
    /// Simulated time from the start until both sides reported the keys (link delays plus
    /// the CPU time on the critical path).
    pub handshake: Duration,
    /// Simulated time until the client received the server's first datagram (the
    /// HelloVerifyRequest): the transport round trip plus the cookie's cost.
    pub first_round_trip: Duration,
    /// Datagrams both sides sent (lost ones included).
    pub datagrams: u64,
    /// The client's CPU time, endpoint construction included.
    pub client_cpu: Duration,
    /// The server's CPU time, endpoint construction included.
    pub server_cpu: Duration,
}

/// One side of the simulation.
struct Node {
    ep: Endpoint,
    /// Simulated time at which it is done with its last input.
    busy: Duration,
    timer: Option<Duration>,
    cpu: Duration,
    /// When it reported the keys, and the exported block.
    connected: Option<(Duration, Vec<u8>)>,
}

/// Runs one handshake between a client and a server built from these configurations over
/// `link`, on simulated time, with `seed` deciding the losses. Err: why it failed.
pub fn simulate(
    client: &EndpointConfig,
    server: &EndpointConfig,
    link: Link,
    seed: u64,
) -> Result<SimRun, String> {
    /// Simulated time after which a handshake counts as hung (the endpoints' own deadline is 30 s).
    const LIMIT: Duration = Duration::from_secs(120);
    let base = Instant::now();
    let one_way = link.rtt / 2;
    // The test kit's link: each datagram takes half the round trip, or is lost.
    let mut wire = secrelay_testkit::Link::lossy(one_way, link.loss, seed);
    let mut air: secrelay_testkit::Air<Duration, usize> = secrelay_testkit::Air::new();
    let mut datagrams = 0u64;
    let mut first_round_trip = None;

    // The server exists first (it waits for ClientHellos); both are built at time zero, each
    // charged its construction.
    let mut nodes: Vec<Node> = Vec::with_capacity(2);
    for config in [client.clone(), server.clone()] {
        let role = config.role;
        let t = Instant::now();
        let ep = Endpoint::new(config, base).map_err(|e| format!("{role:?}: {e}"))?;
        let cpu = t.elapsed();
        nodes.push(Node {
            ep,
            busy: cpu,
            timer: None,
            cpu,
            connected: None,
        });
    }
    // Outputs of the construction (the client's ClientHello), then of every input.
    let mut pending: Vec<(usize, Vec<Output>)> = Vec::new();
    for (i, n) in nodes.iter_mut().enumerate() {
        pending.push((i, drain(&mut n.ep)));
    }
    loop {
        for (i, outs) in pending.drain(..) {
            let node = &mut nodes[i];
            for o in outs {
                match o {
                    Output::Transmit(d) => {
                        datagrams += 1;
                        air.send(&mut wire, node.busy, 1 - i, d);
                    }
                    Output::Timeout(at) => node.timer = Some(at.saturating_duration_since(base)),
                    Output::Event(Event::Connected { keys, .. }) => {
                        node.connected = Some((node.busy, keys.exported().as_bytes().to_vec()));
                    }
                    Output::Event(Event::Failed(r)) => {
                        return Err(format!(
                            "the {} failed: {r}",
                            if i == 0 { "client" } else { "server" }
                        ))
                    }
                    Output::Event(e) => return Err(format!("unexpected {e:?}")),
                }
            }
        }
        if let (Some((tc, kc)), Some((ts, ks))) = (&nodes[0].connected, &nodes[1].connected) {
            if kc != ks {
                return Err("the two sides exported different keying material".into());
            }
            return Ok(SimRun {
                handshake: (*tc).max(*ts),
                first_round_trip: first_round_trip.unwrap_or_default(),
                datagrams,
                client_cpu: nodes[0].cpu,
                server_cpu: nodes[1].cpu,
            });
        }
        // The next event: the earliest arrival or timer (arrivals first on a tie).
        let arrival = air.next_arrival();
        let timer = (0..2).filter_map(|i| nodes[i].timer.map(|t| (t, i))).min();
        let (who, start, datagram) = match (arrival, timer) {
            (Some(at), t) if t.is_none_or(|(tt, _)| at <= tt) => {
                let (at, to, d) = air.pop().expect("an arrival was just seen");
                if to == 0 && first_round_trip.is_none() {
                    first_round_trip = Some(at);
                }
                (to, at, Some(d))
            }
            (_, Some((at, i))) => {
                nodes[i].timer = None;
                (i, at, None)
            }
            _ => return Err("both sides went quiet before connecting".into()),
        };
        if start > LIMIT {
            return Err(format!(
                "not done after {} s of simulated time",
                LIMIT.as_secs()
            ));
        }
        let node = &mut nodes[who];
        let start = start.max(node.busy);
        let now = base + start;
        let t = Instant::now();
        match &datagram {
            Some(d) => {
                node.ep.handle_datagram(now, d);
            }
            None => node.ep.handle_timeout(now),
        }
        let outs = drain(&mut node.ep);
        let cpu = t.elapsed();
        node.cpu += cpu;
        node.busy = start + cpu;
        pending.push((who, outs));
    }
}

/// Drains an endpoint's outputs up to (and with) its timer deadline.
fn drain(ep: &mut Endpoint) -> Vec<Output> {
    let mut outs = Vec::new();
    while let Some(o) = ep.poll_output() {
        let last = matches!(o, Output::Timeout(_));
        outs.push(o);
        if last {
            break;
        }
    }
    outs
}

/// The crypto library a row's phases are measured in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Lib {
    /// aws-lc-rs (under dimpl).
    AwsLc,
    /// OpenSSL (the OpenSSL engine).
    Openssl,
}

impl Lib {
    fn of(engine: EngineChoice) -> Lib {
        match engine {
            EngineChoice::Openssl => Lib::Openssl,
            _ => Lib::AwsLc,
        }
    }
}

/// The ephemeral key exchange of a suite.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kx {
    /// ECDHE on X25519 (the first group of both engines).
    X25519,
    /// DHE on RFC 7919 ffdhe2048 (the OpenSSL engine's DH group).
    Ffdhe2048,
}

impl Kx {
    fn of(suite: CipherSuite) -> Kx {
        match suite {
            CipherSuite::DheRsaAes128GcmSha256 => Kx::Ffdhe2048,
            _ => Kx::X25519,
        }
    }
    fn name(self) -> &'static str {
        match self {
            Kx::X25519 => "ECDHE X25519",
            Kx::Ffdhe2048 => "DHE ffdhe2048",
        }
    }
}

/// The signature phases of one certificate in one library, ns: certificate validation (the
/// certificate's signature checked with its issuer's key), fingerprint (SHA-256 of the DER),
/// handshake signature, its verification.
#[derive(Debug, Clone, Copy)]
struct SigPhases {
    validate: Timing,
    fingerprint: Timing,
    sign: Timing,
    verify: Timing,
}

/// The key exchange phases of one group in one library, ns.
#[derive(Debug, Clone, Copy)]
struct KxPhases {
    keygen: Timing,
    shared: Timing,
}

/// What a ServerKeyExchange signs: both randoms and the ECDH parameters (~165 bytes; the
/// CertificateVerify's transcript hash is signed the same way).
fn signed_message() -> Vec<u8> {
    (0..32 + 32 + 4 + 97).map(|i| (i * 7 + 3) as u8).collect()
}

/// Operations per chunk for the operations that consume their input (key agreement).
const CHUNK: usize = 16;

fn sig_phases(bench: &Bench, lib: Lib, cert: &Certificate) -> anyhow::Result<SigPhases> {
    let der = cert.der();
    let msg = signed_message();
    match lib {
        Lib::AwsLc => {
            use aws_lc_rs::rand::SystemRandom;
            use aws_lc_rs::signature::{self, EcdsaKeyPair, KeyPair as _, UnparsedPublicKey};
            let (sign_alg, verify_alg) = match cert.key_type() {
                KeyType::EcdsaP256 => (
                    &signature::ECDSA_P256_SHA256_ASN1_SIGNING,
                    &signature::ECDSA_P256_SHA256_ASN1,
                ),
                KeyType::EcdsaP384 => (
                    &signature::ECDSA_P384_SHA384_ASN1_SIGNING,
                    &signature::ECDSA_P384_SHA384_ASN1,
                ),
                other => bail!("dimpl signs with ECDSA only, not {other}"),
            };
            let rng = SystemRandom::new();
            let key = EcdsaKeyPair::from_pkcs8(sign_alg, cert.private_key_der()).map_err(|e| {
                anyhow::anyhow!("aws-lc-rs refused the {} key: {e}", cert.key_type())
            })?;
            let sig = key
                .sign(&rng, &msg)
                .map_err(|_| anyhow::anyhow!("aws-lc-rs ECDSA sign failed"))?;
            let public = UnparsedPublicKey::new(verify_alg, key.public_key().as_ref().to_vec());
            public
                .verify(&msg, sig.as_ref())
                .map_err(|_| anyhow::anyhow!("aws-lc-rs: own signature does not verify"))?;
            let (tbs, cert_sig, spki) = cert_parts(der)?;
            let issuer = UnparsedPublicKey::new(verify_alg, spki);
            issuer.verify(&tbs, &cert_sig).map_err(|_| {
                anyhow::anyhow!("aws-lc-rs: the certificate's signature does not verify")
            })?;
            Ok(SigPhases {
                validate: bench.time(|| {
                    black_box(issuer.verify(black_box(&tbs), black_box(&cert_sig)).is_ok());
                }),
                fingerprint: bench.time(|| {
                    black_box(aws_lc_rs::digest::digest(
                        &aws_lc_rs::digest::SHA256,
                        black_box(der),
                    ));
                }),
                sign: bench.time(|| {
                    black_box(key.sign(&rng, black_box(&msg)).is_ok());
                }),
                verify: bench.time(|| {
                    black_box(
                        public
                            .verify(black_box(&msg), black_box(sig.as_ref()))
                            .is_ok(),
                    );
                }),
            })
        }
        Lib::Openssl => {
            use openssl::hash::MessageDigest;
            use openssl::pkey::PKey;
            use openssl::rsa::Padding;
            use openssl::sign::{RsaPssSaltlen, Signer, Verifier};
            use openssl::x509::X509;
            let kt = cert.key_type();
            let md = if kt == KeyType::EcdsaP384 {
                MessageDigest::sha384()
            } else {
                MessageDigest::sha256()
            };
            let key = PKey::private_key_from_der(cert.private_key_der())
                .context("OpenSSL: the private key")?;
            let public = PKey::public_key_from_der(&key.public_key_to_der()?)?;
            // TLS 1.2 with OpenSSL 3 on both ends signs with rsa_pss_rsae_sha256 (its first RSA
            // signature scheme), and with ECDSA over the curve's hash.
            let sign = |m: &[u8]| -> anyhow::Result<Vec<u8>> {
                let mut s = Signer::new(md, &key)?;
                if kt.is_rsa() {
                    s.set_rsa_padding(Padding::PKCS1_PSS)?;
                    s.set_rsa_pss_saltlen(RsaPssSaltlen::DIGEST_LENGTH)?;
                }
                Ok(s.sign_oneshot_to_vec(m)?)
            };
            let verify = |m: &[u8], sig: &[u8]| -> anyhow::Result<bool> {
                let mut v = Verifier::new(md, &public)?;
                if kt.is_rsa() {
                    v.set_rsa_padding(Padding::PKCS1_PSS)?;
                    v.set_rsa_pss_saltlen(RsaPssSaltlen::DIGEST_LENGTH)?;
                }
                Ok(v.verify_oneshot(sig, m)?)
            };
            let sig = sign(&msg)?;
            if !verify(&msg, &sig)? {
                bail!("OpenSSL: own signature does not verify");
            }
            let x509 = X509::from_der(der).context("OpenSSL: the certificate")?;
            let issuer = x509.public_key()?;
            if !x509.verify(&issuer)? {
                bail!("OpenSSL: the certificate's signature does not verify");
            }
            Ok(SigPhases {
                validate: bench.time(|| {
                    black_box(x509.verify(black_box(&issuer)).is_ok());
                }),
                fingerprint: bench.time(|| {
                    black_box(openssl::sha::sha256(black_box(der)));
                }),
                sign: bench.time(|| {
                    black_box(sign(black_box(&msg)).is_ok());
                }),
                verify: bench.time(|| {
                    black_box(verify(black_box(&msg), black_box(&sig)).is_ok());
                }),
            })
        }
    }
}

/// A certificate's to-be-signed bytes, signature and public key (the issuer's key: the
/// certificates here are self-signed).
fn cert_parts(der: &[u8]) -> anyhow::Result<(Vec<u8>, Vec<u8>, Vec<u8>)> {
    use x509_parser::prelude::{FromDer, X509Certificate};
    let (_, c) = X509Certificate::from_der(der)
        .map_err(|e| anyhow::anyhow!("the certificate does not parse: {e}"))?;
    Ok((
        c.tbs_certificate.as_ref().to_vec(),
        c.signature_value.data.to_vec(),
        c.public_key().subject_public_key.data.to_vec(),
    ))
}

fn kx_phases(bench: &Bench, lib: Lib, kx: Kx) -> anyhow::Result<KxPhases> {
    let chunk = |f: &mut dyn FnMut() -> anyhow::Result<()>| -> anyhow::Result<()> {
        for _ in 0..CHUNK {
            f()?;
        }
        Ok(())
    };
    match (lib, kx) {
        (Lib::AwsLc, Kx::X25519) => {
            use aws_lc_rs::agreement::{self, EphemeralPrivateKey, UnparsedPublicKey};
            use aws_lc_rs::rand::SystemRandom;
            let rng = SystemRandom::new();
            let gen = || -> anyhow::Result<EphemeralPrivateKey> {
                EphemeralPrivateKey::generate(&agreement::X25519, &rng)
                    .map_err(|_| anyhow::anyhow!("aws-lc-rs X25519 key generation failed"))
            };
            let peer = gen()?
                .compute_public_key()
                .map_err(|_| anyhow::anyhow!("aws-lc-rs X25519 public key"))?;
            let peer = UnparsedPublicKey::new(&agreement::X25519, peer.as_ref().to_vec());
            let keygen = bench.time(|| {
                if let Ok(k) = EphemeralPrivateKey::generate(&agreement::X25519, &rng) {
                    black_box(k.compute_public_key().is_ok());
                }
            });
            let keys: RefCell<Vec<EphemeralPrivateKey>> = RefCell::new(Vec::new());
            chunk(&mut || {
                keys.borrow_mut().push(gen()?);
                Ok(())
            })?;
            let shared = bench.time_chunked(
                CHUNK,
                || {
                    let mut k = keys.borrow_mut();
                    while k.len() < CHUNK {
                        if let Ok(x) = EphemeralPrivateKey::generate(&agreement::X25519, &rng) {
                            k.push(x);
                        }
                    }
                },
                || {
                    for k in keys.borrow_mut().drain(..) {
                        black_box(
                            agreement::agree_ephemeral(k, &peer, (), |s| Ok(s.len())).is_ok(),
                        );
                    }
                },
            );
            Ok(KxPhases { keygen, shared })
        }
        (Lib::Openssl, Kx::X25519) => {
            use openssl::derive::Deriver;
            use openssl::pkey::{PKey, Private};
            let peer = PKey::generate_x25519()?;
            let peer = PKey::public_key_from_raw_bytes(
                &peer.raw_public_key()?,
                openssl::pkey::Id::X25519,
            )?;
            let keygen = bench.time(|| {
                if let Ok(k) = PKey::generate_x25519() {
                    black_box(k.raw_public_key().is_ok());
                }
            });
            let keys: RefCell<Vec<PKey<Private>>> = RefCell::new(Vec::new());
            let shared = bench.time_chunked(
                CHUNK,
                || {
                    let mut k = keys.borrow_mut();
                    while k.len() < CHUNK {
                        if let Ok(x) = PKey::generate_x25519() {
                            k.push(x);
                        }
                    }
                },
                || {
                    for k in keys.borrow_mut().drain(..) {
                        let s = Deriver::new(&k)
                            .and_then(|mut d| d.set_peer(&peer).and_then(|()| d.derive_to_vec()));
                        black_box(s.is_ok());
                    }
                },
            );
            Ok(KxPhases { keygen, shared })
        }
        (Lib::Openssl, Kx::Ffdhe2048) => {
            use openssl::dh::Dh;
            use openssl::pkey::{Params, Private};
            let pem = secrelay_dtls::engine_openssl::FFDHE2048_PEM.as_bytes();
            let params = || Dh::params_from_pem(pem);
            let peer = params()?.generate_key()?;
            let peer_pub = peer.public_key().to_owned()?;
            let fresh: RefCell<Vec<Dh<Params>>> = RefCell::new(Vec::new());
            let keygen = bench.time_chunked(
                CHUNK,
                || {
                    let mut v = fresh.borrow_mut();
                    while v.len() < CHUNK {
                        if let Ok(p) = params() {
                            v.push(p);
                        }
                    }
                },
                || {
                    for p in fresh.borrow_mut().drain(..) {
                        black_box(p.generate_key().is_ok());
                    }
                },
            );
            let keys: RefCell<Vec<Dh<Private>>> = RefCell::new(Vec::new());
            let shared = bench.time_chunked(
                CHUNK,
                || {
                    let mut v = keys.borrow_mut();
                    while v.len() < CHUNK {
                        if let Ok(k) = params().and_then(|p| p.generate_key()) {
                            v.push(k);
                        }
                    }
                },
                || {
                    for k in keys.borrow_mut().drain(..) {
                        black_box(k.compute_key(&peer_pub).is_ok());
                    }
                },
            );
            Ok(KxPhases { keygen, shared })
        }
        (Lib::AwsLc, Kx::Ffdhe2048) => bail!("dimpl has no DHE"),
    }
}

/// One row of the table: a suite and a certificate.
struct Row {
    suite: CipherSuite,
    cert: KeyType,
    /// The engine it runs on, once resolved.
    engine: Option<EngineChoice>,
    /// Err: "not applicable: …" or "refused …", with the reason.
    state: Result<Configs, String>,
    mem: Vec<SimRun>,
    lan: Vec<SimRun>,
    wan: Vec<SimRun>,
    wan_failed: Vec<String>,
}

/// The two endpoints' configurations of a row.
struct Configs {
    client: EndpointConfig,
    server: EndpointConfig,
}

fn configs(
    engine: EngineChoice,
    suite: CipherSuite,
    client: &Certificate,
    server: &Certificate,
) -> Configs {
    let mut c = EndpointConfig::new(
        Role::Client,
        LocalCertificate::from(client),
        server.fingerprint(),
    );
    let mut s = EndpointConfig::new(
        Role::Server,
        LocalCertificate::from(server),
        client.fingerprint(),
    );
    for x in [&mut c, &mut s] {
        x.engine = engine;
        x.cipher_suites = vec![suite];
    }
    s.server_cookies = true;
    Configs {
        client: c,
        server: s,
    }
}

fn engine_label(e: EngineChoice) -> &'static str {
    match e {
        EngineChoice::Openssl => "OpenSSL (phases: OpenSSL)",
        _ => "dimpl (phases: aws-lc-rs)",
    }
}

fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(f64::total_cmp);
    v
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// What the phase tables add to the study: the tables, a paragraph of method and notes.
pub struct PhaseReport {
    /// `handshake_phases` and `handshake_links`.
    pub tables: Vec<Table>,
    /// The phases per measured row, and the handshake per link.
    pub plots: Vec<Plot>,
    /// How they were measured.
    pub method: String,
    /// Findings.
    pub notes: Vec<String>,
}

/// The phase table and the links table, with their columns.
fn empty_tables() -> (Table, Table) {
    let phases = Table::new(
        "handshake_phases",
        "DTLS 1.2 handshake phases per cipher suite and certificate (mutual authentication, both certificates of the row's type; 002 d)",
    )
    .col("suite", "cipher suite")
    .col("cert", "certificate")
    .col("engine", "engine")
    .col("kx", "key exchange")
    .col("status", "status")
    .col_unit("validate_us", "certificate validation (signature check)", "µs")
    .col_unit("fingerprint_us", "fingerprint (SHA-256)", "µs")
    .col_unit("sign_us", "handshake signature", "µs")
    .col_unit("verify_us", "signature verification", "µs")
    .col_unit("keygen_us", "ephemeral key generation", "µs")
    .col_unit("shared_us", "shared secret", "µs")
    .col_unit(
        "side_crypto_us",
        "one side's handshake crypto (fingerprint, sign, verify, key pair, secret)",
        "µs",
    )
    .col_unit("handshake_us", "whole handshake in memory, both sides", "µs")
    .col_unit("server_us", "server CPU", "µs")
    .col_unit("server_vs_crypto", "server ÷ its crypto phases", "×");
    let links = Table::new(
        "handshake_links",
        "The same handshakes over simulated links: RTT, first round trip, whole handshake (simulated time: link delays + measured CPU) and retransmissions",
    )
    .col("suite", "cipher suite")
    .col("cert", "certificate")
    .col("status", "status")
    .col_unit("mem_rtt_ms", "in memory: RTT", "ms")
    .col_unit("mem_handshake_ms", "in memory: handshake", "ms")
    .col_unit("lan_rtt_ms", "LAN: RTT", "ms")
    .col_unit("lan_first_rt_ms", "LAN: first round trip", "ms")
    .col_unit("lan_handshake_ms", "LAN: handshake", "ms")
    .col_unit("lan_retransmissions", "LAN: retransmissions (max)", "datagrams")
    .col_unit("wan_rtt_ms", "WAN: RTT", "ms")
    .col_unit("wan_loss_pct", "WAN: loss", "%")
    .col_unit("wan_first_rt_ms", "WAN: first round trip", "ms")
    .col_unit("wan_handshake_ms", "WAN: handshake, median", "ms")
    .col_unit("wan_handshake_p95_ms", "WAN: handshake, p95", "ms")
    .col_unit("wan_retransmissions_median", "WAN: retransmissions, median", "datagrams")
    .col_unit("wan_retransmissions_max", "WAN: retransmissions, max", "datagrams")
    .col_unit("wan_retransmitted_pct", "WAN: handshakes with a retransmission", "%")
    .col("runs", "handshakes per link")
    .col("wan_failed", "WAN failures");
    (phases, links)
}

/// The cells every row of both tables starts with: its suite, certificate and `status`.
fn row_head(row: &Row, status: String) -> Vec<(&'static str, Cell)> {
    vec![
        ("suite", Cell::text(row.suite.openssl_name())),
        ("cert", Cell::text(row.cert.name())),
        ("status", Cell::text(status)),
    ]
}

/// A row that was not measured, in both tables, with the reason.
fn push_refused(phases: &mut Table, links: &mut Table, row: &Row, why: &str) {
    let status = if why.starts_with("not applicable") {
        "not applicable"
    } else {
        "refused"
    };
    let mut p = row_head(row, status.into());
    p.push((
        "engine",
        row.engine
            .map(|e| Cell::text(engine_label(e)))
            .unwrap_or_else(|| Cell::text("-")),
    ));
    p.push(("kx", Cell::text(Kx::of(row.suite).name())));
    for k in ["validate_us", "keygen_us", "shared_us", "handshake_us"] {
        p.push((k, Cell::not_offered(why.to_string())));
    }
    phases.push(p);
    let mut l = row_head(row, status.into());
    for k in [
        "mem_handshake_ms",
        "lan_handshake_ms",
        "wan_handshake_ms",
        "wan_retransmissions_median",
    ] {
        l.push((k, Cell::not_offered(why.to_string())));
    }
    links.push(l);
}

/// A measured row's cells in the phase table: its library's crypto phases, one side's sum,
/// and the whole handshake in memory against it.
fn phase_cells(
    row: &Row,
    e: EngineChoice,
    sig: &SigPhases,
    kxp: &KxPhases,
) -> Vec<(&'static str, Cell)> {
    let q = |v: &[f64], p: f64| super::quantile(v, p);
    let kx = Kx::of(row.suite);
    // What one side of this handshake computes: the peer's certificate is checked by
    // its fingerprint, so the certificate's own signature is not part of it.
    let side_ns = sig.fingerprint.ns + sig.sign.ns + sig.verify.ns + kxp.keygen.ns + kxp.shared.ns;
    let mem_total = sorted(
        row.mem
            .iter()
            .map(|r| us(r.client_cpu + r.server_cpu))
            .collect(),
    );
    let server = sorted(row.mem.iter().map(|r| us(r.server_cpu)).collect());
    let mut p = row_head(row, "measured".into());
    p.extend([
        ("engine", Cell::text(engine_label(e))),
        ("kx", Cell::text(kx.name())),
        ("validate_us", Cell::num(sig.validate.ns / 1e3)),
        ("fingerprint_us", Cell::num(sig.fingerprint.ns / 1e3)),
        ("sign_us", Cell::num(sig.sign.ns / 1e3)),
        ("verify_us", Cell::num(sig.verify.ns / 1e3)),
        ("keygen_us", Cell::num(kxp.keygen.ns / 1e3)),
        ("shared_us", Cell::num(kxp.shared.ns / 1e3)),
        ("side_crypto_us", Cell::num(side_ns / 1e3)),
        ("handshake_us", Cell::num(q(&mem_total, 0.5))),
        ("server_us", Cell::num(q(&server, 0.5))),
        (
            "server_vs_crypto",
            Cell::num(q(&server, 0.5) / (side_ns / 1e3)),
        ),
    ]);
    p
}

/// A measured row's cells in the links table: round trips, handshake times and
/// retransmissions (datagrams beyond those of the same handshake in memory) per link.
fn link_cells(row: &Row) -> Vec<(&'static str, Cell)> {
    let q = |v: &[f64], p: f64| super::quantile(v, p);
    // Retransmissions: datagrams beyond those of the same handshake in memory.
    let baseline = row.mem.iter().map(|r| r.datagrams).min().unwrap_or(0);
    let extra = |v: &[SimRun]| -> Vec<f64> {
        sorted(
            v.iter()
                .map(|r| r.datagrams.saturating_sub(baseline) as f64)
                .collect(),
        )
    };
    let sim = |v: &[SimRun]| sorted(v.iter().map(|r| ms(r.handshake)).collect());
    let first = |v: &[SimRun]| sorted(v.iter().map(|r| ms(r.first_round_trip)).collect());
    let (lan_x, wan_x) = (extra(&row.lan), extra(&row.wan));
    let wan_t = sim(&row.wan);
    let mut l = row_head(row, "measured".into());
    l.extend([
        ("mem_rtt_ms", Cell::num(ms(IN_MEMORY.rtt))),
        ("mem_handshake_ms", Cell::num(q(&sim(&row.mem), 0.5))),
        ("lan_rtt_ms", Cell::num(ms(LAN.rtt))),
        ("lan_first_rt_ms", Cell::num(q(&first(&row.lan), 0.5))),
        ("lan_handshake_ms", Cell::num(q(&sim(&row.lan), 0.5))),
        (
            "lan_retransmissions",
            Cell::num(lan_x.last().copied().unwrap_or(0.0)),
        ),
        ("wan_rtt_ms", Cell::num(ms(WAN.rtt))),
        ("wan_loss_pct", Cell::num(WAN.loss * 100.0)),
        ("wan_first_rt_ms", Cell::num(q(&first(&row.wan), 0.5))),
        ("wan_handshake_ms", Cell::num(q(&wan_t, 0.5))),
        ("wan_handshake_p95_ms", Cell::num(q(&wan_t, 0.95))),
        ("wan_retransmissions_median", Cell::num(q(&wan_x, 0.5))),
        (
            "wan_retransmissions_max",
            Cell::num(wan_x.last().copied().unwrap_or(0.0)),
        ),
        (
            "wan_retransmitted_pct",
            Cell::num(
                wan_x.iter().filter(|x| **x > 0.0).count() as f64 / wan_x.len().max(1) as f64
                    * 100.0,
            ),
        ),
        ("runs", Cell::text(row.mem.len().to_string())),
        (
            "wan_failed",
            Cell::text(match row.wan_failed.first() {
                None => "0".to_string(),
                Some(e) => format!("{} ({e})", row.wan_failed.len()),
            }),
        ),
    ]);
    l
}

/// A row per cipher suite and certificate type: refused or not applicable with the reason,
/// or the configurations of its two sides (a dry run, untimed, checks the stack takes them).
fn make_rows(certs: &[(KeyType, Certificate, Certificate)], engine: EngineChoice) -> Vec<Row> {
    let mut rows: Vec<Row> = Vec::new();
    for suite in SUITES {
        for (kt, cc, sc) in certs {
            let mut row = Row {
                suite,
                cert: *kt,
                engine: None,
                state: Err(String::new()),
                mem: Vec::new(),
                lan: Vec::new(),
                wan: Vec::new(),
                wan_failed: Vec::new(),
            };
            row.state = match not_applicable(suite, *kt) {
                Some(why) => Err(why),
                None => {
                    let cfg = configs(engine, suite, cc, sc);
                    let resolved = cfg.client.resolved_engine();
                    row.engine = Some(resolved);
                    if let Some(why) = super::engine_refuses(resolved, *kt) {
                        Err(format!("refused by the engine: {why}"))
                    } else {
                        // A dry run, untimed: a combination the stack refuses fails here.
                        match simulate(&cfg.client, &cfg.server, IN_MEMORY, 0) {
                            Ok(_) => Ok(cfg),
                            Err(e) => Err(format!(
                                "refused by the {} engine: {e}",
                                super::engine_name(resolved)
                            )),
                        }
                    }
                }
            };
            rows.push(row);
        }
    }
    rows
}

/// `rounds` rounds, each running every measurable row once per link (in memory, LAN, WAN)
/// after one untimed handshake of it, starting at another row each round.
fn time_rows(rows: &mut [Row], rounds: usize) {
    let n = rows.len();
    for round in 0..rounds {
        // Each round starts at another row, so that none always runs first (with caches cold
        // from the previous round's RSA and DHE work).
        for i in (0..n).map(|k| (k + round) % n) {
            let row = &mut rows[i];
            let Ok(cfg) = &row.state else { continue };
            // One untimed handshake first, so that no row pays for the previous row's
            // different work (caches, allocator state): without it the row after the DHE
            // rows measured ~1.7× its own cost.
            let _ = simulate(&cfg.client, &cfg.server, IN_MEMORY, 0);
            let seed = round as u64;
            let mem = simulate(&cfg.client, &cfg.server, IN_MEMORY, seed);
            let lan = simulate(&cfg.client, &cfg.server, LAN, seed);
            let wan = simulate(&cfg.client, &cfg.server, WAN, 0x5eed_0000 + seed);
            match (mem, lan) {
                (Ok(m), Ok(l)) => {
                    row.mem.push(m);
                    row.lan.push(l);
                }
                (Err(e), _) | (_, Err(e)) => {
                    row.state = Err(format!("failed in round {round} without loss: {e}"));
                    continue;
                }
            }
            match wan {
                Ok(w) => row.wan.push(w),
                Err(e) => row.wan_failed.push(e),
            }
        }
    }
}

/// Signature phases measured, by library and certificate type.
type SigCache = Vec<((Lib, KeyType), SigPhases)>;
/// Key-exchange phases measured, by library and key exchange.
type KxCache = Vec<((Lib, Kx), KxPhases)>;

/// The crypto phases each measurable row's library computes: its certificate type's
/// signature phases and its suite's key exchange, each measured once per library.
fn crypto_phases(
    bench: &Bench,
    rows: &[Row],
    certs: &[(KeyType, Certificate, Certificate)],
) -> anyhow::Result<(SigCache, KxCache)> {
    let mut sig_cache: Vec<((Lib, KeyType), SigPhases)> = Vec::new();
    let mut kx_cache: Vec<((Lib, Kx), KxPhases)> = Vec::new();
    for row in rows.iter().filter(|r| r.state.is_ok()) {
        let Some(e) = row.engine else { continue };
        let lib = Lib::of(e);
        if !sig_cache.iter().any(|(k, _)| *k == (lib, row.cert)) {
            let cert = &certs
                .iter()
                .find(|(kt, _, _)| *kt == row.cert)
                .context("certificate generated above")?
                .2;
            sig_cache.push(((lib, row.cert), sig_phases(bench, lib, cert)?));
        }
        let kx = Kx::of(row.suite);
        if !kx_cache.iter().any(|(k, _)| *k == (lib, kx)) {
            kx_cache.push(((lib, kx), kx_phases(bench, lib, kx)?));
        }
    }
    Ok((sig_cache, kx_cache))
}

/// Measures the phase tables with secrelay's endpoints on `engine` (`Auto`: per row).
pub fn run(ctx: &crate::Ctx, engine: EngineChoice) -> anyhow::Result<PhaseReport> {
    let quick = ctx.quick();
    let rounds = if quick { 7 } else { 201 };
    ctx.step("phase table: certificates");
    let mut certs: Vec<(KeyType, Certificate, Certificate)> = Vec::new();
    for kt in CERTS {
        certs.push((
            kt,
            Certificate::self_signed(kt, "lab-phases-client")
                .with_context(|| format!("a {kt} certificate"))?,
            Certificate::self_signed(kt, "lab-phases-server")
                .with_context(|| format!("a {kt} certificate"))?,
        ));
    }
    let mut rows = make_rows(&certs, engine);
    ctx.step(format!(
        "phase table: {rounds} rounds × 3 links × {} rows",
        rows.iter().filter(|r| r.state.is_ok()).count()
    ));
    time_rows(&mut rows, rounds);

    ctx.step("phase table: crypto phases");
    // The lab's Bench with many short runs: on a shared machine a 2 ms run is rarely preempted,
    // so the median run is the operation's own cost (100 ms runs would carry the other
    // processes' time slices).
    let bench = Bench {
        warmup: Duration::from_millis(if quick { 5 } else { 20 }),
        runs: if quick { 9 } else { 41 },
        run_time: Duration::from_millis(if quick { 1 } else { 2 }),
        overhead_ns: ctx.bench.overhead_ns,
    };
    let (sig_cache, kx_cache) = crypto_phases(&bench, &rows, &certs)?;

    let (mut phases, mut links) = empty_tables();
    for row in &rows {
        match &row.state {
            Err(why) => push_refused(&mut phases, &mut links, row, why),
            Ok(_) => {
                let e = row.engine.unwrap_or(EngineChoice::Dimpl);
                let lib = Lib::of(e);
                let sig = sig_cache
                    .iter()
                    .find(|(k, _)| *k == (lib, row.cert))
                    .map(|(_, s)| *s)
                    .context("measured above")?;
                let kxp = kx_cache
                    .iter()
                    .find(|(k, _)| *k == (lib, Kx::of(row.suite)))
                    .map(|(_, s)| *s)
                    .context("measured above")?;
                phases.push(phase_cells(row, e, &sig, &kxp));
                links.push(link_cells(row));
            }
        }
    }

    let plots = plots(&phases, &links);
    let method = format!(
        "Phase tables (002 d): each cipher suite × certificate (RSA-2048/3072, ECDSA P-256/P-384), secrelay's endpoint against secrelay's endpoint on the engine the row resolves to \
         (--engine {}: auto takes dimpl for ECDSA certificates with its two GCM suites, OpenSSL for RSA certificates, CCM_8 and DHE), DTLS 1.2 restricted to the row's suite, \
         both sides with a self-signed certificate of the row's type checked against its SHA-256 fingerprint, ECDHE on X25519 (both engines' first group) or DHE on ffdhe2048, \
         server cookie exchange on, use_srtp, the exported keys compared. Links are simulated on the endpoints' injected clock (nothing sleeps): a datagram arrives RTT/2 of simulated time after it is sent, \
         losses are drawn from a seeded SplitMix64 (seed = round), retransmission timers fire when the simulated clock reaches them (engines' defaults: 1 s initial RTO, doubling). \
         Each call into an endpoint is timed with the real clock and that CPU time is added to its side's simulated clock, so a link's handshake time = simulated link delays + measured CPU on the critical path; \
         'first round trip' = simulated time until the client receives the server's HelloVerifyRequest. In memory, the whole handshake = both sides' CPU added up (one core). \
         {rounds} rounds, each running every row once per link after one untimed handshake of that row, starting at another row each round (in memory, LAN 0.2 ms RTT, WAN 40 ms RTT with 1% loss each way); medians reported, WAN also p95. \
         Retransmissions = datagrams sent beyond those of the same row's lossless in-memory handshake. \
         Phases, timed with the lab's Bench ({} ms warm-up, then {} runs of about {} ms, median; short runs so that a shared machine's preemption rarely falls inside one) as the crypto operation of that suite and certificate in the engine's own library (aws-lc-rs under dimpl, OpenSSL under the OpenSSL engine): \
         certificate validation = the certificate's signature checked with its issuer's key (self-signed here, so the issuer's key has the row's type and size, as with a private CA of that type); \
         fingerprint = SHA-256 of the certificate's DER (what WebRTC's check costs); handshake signature / verification = one ServerKeyExchange-sized signature (ECDSA with the curve's hash; RSA-PSS SHA-256, OpenSSL's first RSA scheme in TLS 1.2); \
         ephemeral key generation = key pair with its public value; shared secret = one X25519 or ffdhe2048 agreement (keys prepared outside the timing). \
         Each side of a mutual-auth handshake does each phase once; 'one side's handshake crypto' leaves certificate validation out, as a fingerprint-authenticated handshake does not check the certificate's signature.",
        super::engine_name(engine),
        bench.warmup.as_millis(),
        bench.runs,
        bench.run_time.as_millis(),
    );
    let notes = notes(&rows, &phases, &links);
    Ok(PhaseReport {
        tables: vec![phases, links],
        plots,
        method,
        notes,
    })
}

/// What the tables alone do not say: rows not applicable or refused, each suite's cost
/// against ECDHE-ECDSA with P-256, the WAN handshakes and those that failed.
fn notes(rows: &[Row], phases: &Table, links: &Table) -> Vec<String> {
    let mut notes = Vec::new();
    let na = rows
        .iter()
        .filter(|r| matches!(&r.state, Err(w) if w.starts_with("not applicable")))
        .count();
    let refused: Vec<String> = rows
        .iter()
        .filter_map(|r| match &r.state {
            Err(w) if !w.starts_with("not applicable") => Some(format!(
                "{} with {}: {w}",
                r.suite.openssl_name(),
                r.cert.name()
            )),
            _ => None,
        })
        .collect();
    notes.push(format!(
        "Phase table: {} suite × certificate rows, {} not applicable (suite and key type cannot go together), {} refused by the stack{}.",
        rows.len(),
        na,
        refused.len(),
        if refused.is_empty() {
            String::new()
        } else {
            format!(" ({})", refused.join("; "))
        }
    ));
    let fig = |t: &Table, suite: CipherSuite, cert: KeyType, key: &str| -> Option<f64> {
        t.rows_where("suite", suite.openssl_name())
            .find(|r| r.get("cert") == Some(&Cell::text(cert.name())))
            .and_then(|r| r.get(key)?.as_f64())
    };
    let p256 = fig(
        phases,
        CipherSuite::EcdheEcdsaAes128GcmSha256,
        KeyType::EcdsaP256,
        "handshake_us",
    );
    for (suite, cert) in [
        (CipherSuite::EcdheRsaAes128GcmSha256, KeyType::Rsa2048),
        (CipherSuite::EcdheRsaAes128GcmSha256, KeyType::Rsa3072),
        (CipherSuite::DheRsaAes128GcmSha256, KeyType::Rsa2048),
        (CipherSuite::EcdheEcdsaAes128Ccm8, KeyType::EcdsaP256),
    ] {
        if let (Some(base), Some(x)) = (p256, fig(phases, suite, cert, "handshake_us")) {
            notes.push(format!(
                "In memory, {} with {cert} costs {:.1}× the CPU of ECDHE-ECDSA-AES128-GCM-SHA256 with ECDSA P-256 ({:.0} vs {base:.0} µs, both sides).",
                suite.openssl_name(),
                x / base,
                x
            ));
        }
    }
    let wan: Vec<f64> = links
        .rows_where("status", "measured")
        .filter_map(|r| r.get("wan_handshake_ms")?.as_f64())
        .collect();
    let retx: Vec<f64> = links
        .rows_where("status", "measured")
        .filter_map(|r| r.get("wan_retransmitted_pct")?.as_f64())
        .collect();
    if !wan.is_empty() {
        let (lo, hi) = wan
            .iter()
            .fold((f64::MAX, f64::MIN), |(a, b), x| (a.min(*x), b.max(*x)));
        notes.push(format!(
            "WAN (40 ms RTT, 1 % loss): median handshakes {lo:.0}–{hi:.0} ms of simulated time, three round trips (cookie exchange, then the two-round-trip handshake) plus CPU; \
             {:.0} % of handshakes lost a datagram and waited out at least one 1 s retransmission timeout (they are the retransmission maxima; at this share they sit above the p95).",
            retx.iter().sum::<f64>() / retx.len().max(1) as f64
        ));
    }
    let failed: Vec<String> = rows
        .iter()
        .filter(|r| !r.wan_failed.is_empty())
        .map(|r| {
            format!(
                "{} with {} on {}: {} of {} ({})",
                r.suite.openssl_name(),
                r.cert.name(),
                r.engine.map(super::engine_name).unwrap_or("-"),
                r.wan_failed.len(),
                r.wan_failed.len() + r.wan.len(),
                r.wan_failed[0]
            )
        })
        .collect();
    if !failed.is_empty() {
        notes.push(format!(
            "WAN handshakes that failed (left out of the WAN medians): {}.",
            failed.join("; ")
        ));
    }
    notes
}

/// Bars over the measured rows: each phase (µs, log scale), and the handshake per link (ms).
fn plots(phases: &Table, links: &Table) -> Vec<Plot> {
    let measured = |t: &Table| -> Vec<(String, std::collections::BTreeMap<String, Cell>)> {
        t.rows_where("status", "measured")
            .map(|r| {
                let name = |k: &str| match r.get(k) {
                    Some(Cell::Text(s)) => s.clone(),
                    _ => String::new(),
                };
                (format!("{} {}", name("suite"), name("cert")), r.clone())
            })
            .collect()
    };
    let bars = |id: &str,
                title: &str,
                y: &str,
                log_y: bool,
                rows: &[(String, std::collections::BTreeMap<String, Cell>)],
                series: &[(&str, &str)]| Plot {
        id: id.into(),
        title: title.into(),
        kind: PlotKind::Bars,
        x_label: "cipher suite, certificate".into(),
        y_label: y.into(),
        log_y,
        categories: rows.iter().map(|(n, _)| n.clone()).collect(),
        series: series
            .iter()
            .map(|(key, name)| Series {
                name: (*name).into(),
                points: rows
                    .iter()
                    .enumerate()
                    .filter_map(|(i, (_, r))| Some((i as f64, r.get(*key)?.as_f64()?)))
                    .collect(),
            })
            .collect(),
    };
    vec![
        bars(
            "handshake_phases",
            "DTLS handshake phases per cipher suite and certificate (one side, in the engine's library)",
            "µs per operation (log)",
            true,
            &measured(phases),
            &[
                ("validate_us", "certificate validation"),
                ("sign_us", "handshake signature"),
                ("verify_us", "signature verification"),
                ("keygen_us", "ephemeral key generation"),
                ("shared_us", "shared secret"),
            ],
        ),
        bars(
            "handshake_links",
            "Whole DTLS handshake per link (simulated time: link delays + measured CPU; median)",
            "ms (log)",
            true,
            &measured(links),
            &[
                ("mem_handshake_ms", "in memory"),
                ("lan_handshake_ms", "LAN, 0.2 ms RTT"),
                ("wan_handshake_ms", "WAN, 40 ms RTT, 1 % loss"),
            ],
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use secrelay_dtls::PeerAuth;

    fn pair(kt: KeyType) -> Configs {
        let c = Certificate::self_signed(kt, "c").unwrap();
        let s = Certificate::self_signed(kt, "s").unwrap();
        configs(
            EngineChoice::Auto,
            CipherSuite::EcdheEcdsaAes128GcmSha256,
            &c,
            &s,
        )
    }

    #[test]
    fn simulated_handshake_takes_three_round_trips_with_a_cookie() {
        let cfg = pair(KeyType::EcdsaP256);
        let rtt = Duration::from_millis(100);
        let link = Link {
            name: "test",
            rtt,
            loss: 0.0,
        };
        let r = simulate(&cfg.client, &cfg.server, link, 1).unwrap();
        // Cookie, then the full handshake: three round trips of simulated delay at least, and
        // well below four (CPU time is microseconds).
        assert!(r.handshake >= 3 * rtt, "{r:?}");
        assert!(r.handshake < 4 * rtt, "{r:?}");
        assert!(
            r.first_round_trip >= rtt && r.first_round_trip < 2 * rtt,
            "{r:?}"
        );
        let mem = simulate(&cfg.client, &cfg.server, IN_MEMORY, 1).unwrap();
        assert_eq!(mem.datagrams, r.datagrams, "no loss, same datagrams");
    }

    #[test]
    fn losses_cost_retransmissions_and_the_run_still_finishes() {
        let cfg = pair(KeyType::EcdsaP256);
        let base = simulate(&cfg.client, &cfg.server, IN_MEMORY, 0)
            .unwrap()
            .datagrams;
        let link = Link {
            name: "lossy",
            rtt: Duration::from_millis(40),
            loss: 0.3,
        };
        let mut extra = 0;
        for seed in 0..10 {
            if let Ok(r) = simulate(&cfg.client, &cfg.server, link, seed) {
                extra += r.datagrams.saturating_sub(base);
                if r.datagrams > base {
                    // A lost datagram costs at least one initial RTO (1 s).
                    assert!(r.handshake >= Duration::from_millis(700), "{r:?}");
                }
            }
        }
        assert!(extra > 0);
    }

    #[test]
    fn a_wrong_fingerprint_is_an_error_not_a_hang() {
        let mut cfg = pair(KeyType::EcdsaP256);
        let other = Certificate::self_signed(KeyType::EcdsaP256, "x").unwrap();
        cfg.client.peer_auth = PeerAuth::Fingerprint(other.fingerprint());
        let e = simulate(&cfg.client, &cfg.server, LAN, 0).unwrap_err();
        assert!(e.contains("fingerprint"), "{e}");
    }

    /// On `--engine dimpl`, what only OpenSSL covers is refused with dimpl's reason, never
    /// dropped; dimpl's own suites are measured.
    #[test]
    fn dimpl_engine_refuses_rsa_ccm8_and_dhe_with_reasons() {
        let opts = crate::Options {
            quick: true,
            no_progress: true,
            ..Default::default()
        };
        let ctx = crate::Ctx::new(&opts, "handshake");
        let r = run(&ctx, EngineChoice::Dimpl).unwrap();
        let phases = &r.tables[0];
        assert_eq!(phases.rows.len(), SUITES.len() * CERTS.len());
        let cell = |suite: &str, cert: &str, key: &str| -> Cell {
            phases
                .rows_where("suite", suite)
                .find(|row| row.get("cert") == Some(&Cell::text(cert)))
                .and_then(|row| row.get(key).cloned())
                .unwrap_or_else(|| panic!("{suite} {cert} {key}"))
        };
        let why = |c: Cell| match c {
            Cell::NotOffered { not_offered } => not_offered,
            other => panic!("expected a reason, got {other:?}"),
        };
        assert!(why(cell(
            "ECDHE-RSA-AES128-GCM-SHA256",
            "rsa-2048",
            "handshake_us"
        ))
        .contains("dimpl 0.9 signs with ECDSA only"));
        assert!(why(cell(
            "ECDHE-ECDSA-AES128-CCM8",
            "ecdsa-p256",
            "handshake_us"
        ))
        .contains("dimpl does not implement ECDHE-ECDSA-AES128-CCM8"));
        assert!(why(cell(
            "ECDHE-ECDSA-AES128-GCM-SHA256",
            "rsa-2048",
            "handshake_us"
        ))
        .starts_with("not applicable"));
        assert_eq!(
            cell("DHE-RSA-AES128-GCM-SHA256", "rsa-3072", "status"),
            Cell::text("refused")
        );
        for suite in [
            "ECDHE-ECDSA-AES128-GCM-SHA256",
            "ECDHE-ECDSA-AES256-GCM-SHA384",
        ] {
            for cert in ["ecdsa-p256", "ecdsa-p384"] {
                assert_eq!(cell(suite, cert, "status"), Cell::text("measured"));
                assert!(cell(suite, cert, "handshake_us").as_f64().unwrap() > 0.0);
            }
        }
    }

    #[test]
    fn applicability_follows_the_key_type() {
        assert!(not_applicable(CipherSuite::EcdheRsaAes128GcmSha256, KeyType::EcdsaP256).is_some());
        assert!(not_applicable(CipherSuite::EcdheEcdsaAes128Ccm8, KeyType::Rsa2048).is_some());
        assert!(not_applicable(CipherSuite::DheRsaAes128GcmSha256, KeyType::Rsa3072).is_none());
        assert!(
            not_applicable(CipherSuite::EcdheEcdsaAes256GcmSha384, KeyType::EcdsaP384).is_none()
        );
    }
}

/// The WAN case that used to strand the OpenSSL engine (the phase tables counted it as a failure).
#[cfg(test)]
mod wan_retransmission {
    use super::*;

    /// On the WAN link, a DHE-RSA handshake between two OpenSSL engines whose client flight
    /// loses its first datagram (seed 51): OpenSSL's server takes the second datagram
    /// (ClientKeyExchange, CertificateVerify, ChangeCipherSpec, Finished) early and drops the
    /// early ChangeCipherSpec. OpenSSL's own retransmission timer runs on the real clock, which
    /// barely moves on simulated time, so the engine retransmits; its copies used to keep the
    /// original record numbers, were replays to OpenSSL, and the handshake never finished. The
    /// engine now numbers every epoch-0 record it sends afresh (`engine_openssl`'s module docs),
    /// so the resent ChangeCipherSpec is taken.
    #[test]
    fn openssl_engine_finishes_when_the_first_datagram_of_the_client_flight_is_lost() {
        let c = Certificate::self_signed(KeyType::Rsa2048, "c").unwrap();
        let s = Certificate::self_signed(KeyType::Rsa2048, "s").unwrap();
        let cfg = configs(
            EngineChoice::Auto,
            CipherSuite::DheRsaAes128GcmSha256,
            &c,
            &s,
        );
        simulate(&cfg.client, &cfg.server, WAN, 0x5eed_0000 + 51).unwrap();
    }

    /// Every WAN seed of a full phase-table run (201 rounds) finishes for the rows that used to
    /// count failures there: ECDHE-RSA with RSA-3072, DHE-RSA with RSA-2048 and RSA-3072.
    #[test]
    fn the_phase_table_wan_seeds_all_finish_on_the_openssl_engine() {
        for (suite, kt) in [
            (CipherSuite::EcdheRsaAes128GcmSha256, KeyType::Rsa3072),
            (CipherSuite::DheRsaAes128GcmSha256, KeyType::Rsa2048),
            (CipherSuite::DheRsaAes128GcmSha256, KeyType::Rsa3072),
        ] {
            let c = Certificate::self_signed(kt, "lab-phases-client").unwrap();
            let s = Certificate::self_signed(kt, "lab-phases-server").unwrap();
            let cfg = configs(EngineChoice::Auto, suite, &c, &s);
            let failed: Vec<String> = (0..201u64)
                .filter_map(|round| {
                    simulate(&cfg.client, &cfg.server, WAN, 0x5eed_0000 + round)
                        .err()
                        .map(|e| format!("round {round}: {e}"))
                })
                .collect();
            assert!(
                failed.is_empty(),
                "{} with {kt}: {} of 201 failed: {}",
                suite.openssl_name(),
                failed.len(),
                failed.join("; ")
            );
        }
    }
}
