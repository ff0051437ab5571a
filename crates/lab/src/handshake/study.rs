//! `lab handshake --in-memory` (`001_…`, `002_…` d): DTLS-SRTP handshakes with both sides in
//! one process over memory (as rustls-bench does for TLS), the client's and the server's work
//! timed apart, for secrelay (dimpl + aws-lc-rs) beside OpenSSL 3 (through the `openssl` crate)
//! and pion/dtls (a Go program in `peers/pion-dtls`, run in the same study), with the crypto
//! floor (aws-lc-rs) measured in the same run.
//!
//! Every handshake: DTLS 1.2, mutual certificate authentication with self-signed certificates
//! (generated before timing), ECDHE, `use_srtp`, and the `EXTRACTOR-dtls_srtp` block exported
//! on both sides and compared inside the timing. Endpoint construction is inside each side's
//! time. The pairings run interleaved, one handshake of each per round, so that the machine's
//! drift falls out of the ratios; medians over the rounds are reported.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use aws_lc_rs::agreement::{self, EphemeralPrivateKey, UnparsedPublicKey as AgreeKey};
use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{
    self, EcdsaKeyPair, EcdsaSigningAlgorithm, EcdsaVerificationAlgorithm, KeyPair as _,
    UnparsedPublicKey,
};
use secrelay_dtls::crypto_time::{self, CryptoTime};
use secrelay_dtls::keying::keying_material_len;
use secrelay_dtls::{
    Certificate, EcdheGroup, Endpoint, EndpointConfig, Event, KeyType, LocalCertificate, Output,
    PeerAuth, Role,
};
use secrelay_peers::openssl_dtls::{DtlsRole, DtlsSettings, OpensslDtls, OpensslDtlsContext, Step};
use secrelay_srtp::Profile;
use serde::Deserialize;

use crate::count::CountedOp;
use crate::frame::{Cell, Plot, PlotKind, Series, StudyReport, Table};
use crate::{Ctx, Study};

/// One side of an in-memory handshake.
trait Side {
    /// Queues the first flight (a client's ClientHello; nothing for a server).
    fn start(&mut self, out: &mut Vec<Vec<u8>>) -> Result<(), String>;
    /// Handles a flight from the peer, appending what it sends.
    fn feed(&mut self, flight: &mut Vec<Vec<u8>>, out: &mut Vec<Vec<u8>>) -> Result<(), String>;
    /// The exported keying block and the profile's name, once connected.
    fn keys(&self) -> Option<(&[u8], &'static str)>;
}

/// secrelay's endpoint (dimpl engine).
struct Ours {
    ep: Endpoint,
    now: Instant,
    keys: Option<(Vec<u8>, &'static str)>,
}

impl Ours {
    fn new(config: &EndpointConfig) -> Result<Ours, String> {
        let now = Instant::now();
        let ep = Endpoint::new(config.clone(), now).map_err(|e| e.to_string())?;
        Ok(Ours {
            ep,
            now,
            keys: None,
        })
    }

    fn drain(&mut self, out: &mut Vec<Vec<u8>>) -> Result<(), String> {
        while let Some(o) = self.ep.poll_output() {
            match o {
                Output::Transmit(d) => out.push(d),
                Output::Timeout(_) => break,
                Output::Event(Event::Connected { keys, profile, .. }) => {
                    self.keys = Some((
                        keys.exported().as_bytes().to_vec(),
                        super::dtls_name(profile),
                    ))
                }
                Output::Event(Event::Failed(r)) => {
                    return Err(format!("secrelay endpoint failed: {r}"))
                }
                Output::Event(e) => return Err(format!("secrelay endpoint: unexpected {e:?}")),
            }
        }
        Ok(())
    }
}

impl Side for Ours {
    fn start(&mut self, out: &mut Vec<Vec<u8>>) -> Result<(), String> {
        self.drain(out)
    }
    fn feed(&mut self, flight: &mut Vec<Vec<u8>>, out: &mut Vec<Vec<u8>>) -> Result<(), String> {
        for d in flight.drain(..) {
            self.ep.handle_datagram(self.now, &d);
            self.drain(out)?;
        }
        Ok(())
    }
    fn keys(&self) -> Option<(&[u8], &'static str)> {
        self.keys.as_ref().map(|(k, p)| (k.as_slice(), *p))
    }
}

/// OpenSSL over memory BIOs.
struct Ossl {
    conn: OpensslDtls,
    keys: Option<(Vec<u8>, &'static str)>,
}

impl Ossl {
    fn new(ctx: &OpensslDtlsContext) -> Result<Ossl, String> {
        Ok(Ossl {
            conn: ctx.endpoint().map_err(|e| e.to_string())?,
            keys: None,
        })
    }

    fn step(&mut self, out: &mut Vec<Vec<u8>>) -> Result<(), String> {
        let step = self.conn.handshake_step().map_err(|e| e.to_string())?;
        self.conn.drain_outgoing_into(out);
        if step == Step::Done && self.keys.is_none() {
            let profile = self
                .conn
                .srtp_profile_id()
                .and_then(Profile::from_dtls_id)
                .ok_or("OpenSSL negotiated no SRTP profile")?;
            let mut block = vec![0u8; keying_material_len(profile)];
            self.conn
                .keying_material_into(&mut block)
                .map_err(|e| e.to_string())?;
            self.keys = Some((block, super::dtls_name(profile)));
        }
        Ok(())
    }
}

impl Side for Ossl {
    fn start(&mut self, out: &mut Vec<Vec<u8>>) -> Result<(), String> {
        if self.conn.role() == DtlsRole::Client {
            self.step(out)?;
        }
        Ok(())
    }
    fn feed(&mut self, flight: &mut Vec<Vec<u8>>, out: &mut Vec<Vec<u8>>) -> Result<(), String> {
        for d in flight.drain(..) {
            self.conn.push_incoming(d);
        }
        self.step(out)
    }
    fn keys(&self) -> Option<(&[u8], &'static str)> {
        self.keys.as_ref().map(|(k, p)| (k.as_slice(), *p))
    }
}

type MakeSide = Box<dyn Fn() -> Result<Box<dyn Side>, String>>;

/// A pairing measured back to back: per-handshake samples (ns) and its floor's.
#[derive(Debug, Default)]
struct Storm {
    kx: String,
    server: Vec<f64>,
    total: Vec<f64>,
    floor: Vec<f64>,
    /// The same server with its provider's calls timed (`crypto_time`): its whole time (ns)
    /// and what it spent inside the provider, per handshake.
    timed_server: Vec<f64>,
    parts: Vec<CryptoTime>,
}

/// One handshake's figures, ns.
#[derive(Debug, Clone, Copy)]
struct Sample {
    total: f64,
    client: f64,
    server: f64,
}

/// Runs one handshake, each side's calls (construction included) timed apart. Returns the
/// figures and the negotiated profile; fails if it does not finish or the keys differ.
fn handshake(
    make_client: &MakeSide,
    make_server: &MakeSide,
) -> Result<(Sample, &'static str), String> {
    let t0 = Instant::now();
    let mut server = make_server()?;
    let mut to_client = Vec::new();
    server.start(&mut to_client)?;
    let mut server_ns = t0.elapsed();
    let t = Instant::now();
    let mut client = make_client()?;
    let mut to_server = Vec::new();
    client.start(&mut to_server)?;
    client.feed(&mut to_client, &mut to_server)?;
    let mut client_ns = t.elapsed();
    for _ in 0..32 {
        if !to_server.is_empty() {
            let t = Instant::now();
            server.feed(&mut to_server, &mut to_client)?;
            server_ns += t.elapsed();
        }
        if !to_client.is_empty() {
            let t = Instant::now();
            client.feed(&mut to_client, &mut to_server)?;
            client_ns += t.elapsed();
        }
        if to_server.is_empty() && to_client.is_empty() {
            if let (Some((c, profile)), Some((s, _))) = (client.keys(), server.keys()) {
                if c != s {
                    return Err("the two sides exported different keying material".into());
                }
                let total = t0.elapsed();
                black_box((client, server));
                let ns = |d: Duration| d.as_secs_f64() * 1e9;
                return Ok((
                    Sample {
                        total: ns(total),
                        client: ns(client_ns),
                        server: ns(server_ns),
                    },
                    profile,
                ));
            }
            break;
        }
    }
    Err(format!(
        "the handshake did not finish (client connected: {}, server connected: {})",
        client.keys().is_some(),
        server.keys().is_some()
    ))
}

/// The crypto one side of a mutual-auth ECDHE-ECDSA handshake does, with aws-lc-rs: one ECDSA
/// sign (ServerKeyExchange or CertificateVerify), one verify (the peer's), one ephemeral key
/// pair with its public point, one ECDH agreement. The peer's self-signed certificate is
/// authenticated by fingerprint (a hash), so no certificate signature is verified.
struct Floor {
    rng: SystemRandom,
    ours: EcdsaKeyPair,
    verify_alg: &'static EcdsaVerificationAlgorithm,
    kx: &'static agreement::Algorithm,
    peer_public: Vec<u8>,
    ske: Vec<u8>,
    transcript: Vec<u8>,
    peer_sig: Vec<u8>,
    peer_eph_pub: Vec<u8>,
}

impl Floor {
    fn new(
        sign: &'static EcdsaSigningAlgorithm,
        verify_alg: &'static EcdsaVerificationAlgorithm,
        kx: &'static agreement::Algorithm,
    ) -> anyhow::Result<Floor> {
        let rng = SystemRandom::new();
        let gen = || -> anyhow::Result<EcdsaKeyPair> {
            let pkcs8 = EcdsaKeyPair::generate_pkcs8(sign, &rng)
                .map_err(|_| anyhow::anyhow!("ECDSA key generation failed"))?;
            EcdsaKeyPair::from_pkcs8(sign, pkcs8.as_ref())
                .map_err(|_| anyhow::anyhow!("ECDSA key did not load"))
        };
        let ours = gen()?;
        let peer = gen()?;
        // ServerKeyExchange signs the randoms and the ECDH parameters (~135 B); CertificateVerify
        // signs the transcript (~1.5 KB in DTLS 1.2 with two certificates).
        let ske = vec![0x5a_u8; 32 + 32 + 4 + 97];
        let transcript = vec![0xa5_u8; 1500];
        let peer_sig = peer
            .sign(&rng, &transcript)
            .map_err(|_| anyhow::anyhow!("ECDSA sign failed"))?
            .as_ref()
            .to_vec();
        let peer_eph = EphemeralPrivateKey::generate(kx, &rng)
            .map_err(|_| anyhow::anyhow!("ECDH key generation failed"))?;
        let peer_eph_pub = peer_eph
            .compute_public_key()
            .map_err(|_| anyhow::anyhow!("ECDH public key"))?
            .as_ref()
            .to_vec();
        Ok(Floor {
            rng,
            ours,
            verify_alg,
            kx,
            peer_public: peer.public_key().as_ref().to_vec(),
            ske,
            transcript,
            peer_sig,
            peer_eph_pub,
        })
    }

    fn sign(&self) {
        let sig = self
            .ours
            .sign(&self.rng, &self.ske)
            .expect("signing with a valid key");
        black_box(sig.as_ref().len());
    }

    fn verify(&self) {
        let ok = UnparsedPublicKey::new(self.verify_alg, &self.peer_public)
            .verify(&self.transcript, &self.peer_sig)
            .is_ok();
        assert!(black_box(ok), "the peer's signature verifies");
    }

    fn keygen(&self) -> EphemeralPrivateKey {
        let k =
            EphemeralPrivateKey::generate(self.kx, &self.rng).expect("ephemeral key generation");
        black_box(k.compute_public_key().expect("public key").as_ref().len());
        k
    }

    fn agree(&self, k: EphemeralPrivateKey) {
        let r =
            agreement::agree_ephemeral(k, AgreeKey::new(self.kx, &self.peer_eph_pub), (), |s| {
                Ok(black_box(s[0]))
            });
        black_box(r.expect("agreement with a valid public key"));
    }

    /// The four operations, each timed (ns): sign, verify, key pair, agreement.
    fn timed(&self) -> [f64; 4] {
        let ns = |t: Instant| t.elapsed().as_secs_f64() * 1e9;
        let t = Instant::now();
        self.sign();
        let sign = ns(t);
        let t = Instant::now();
        self.verify();
        let verify = ns(t);
        let t = Instant::now();
        let k = self.keygen();
        let keygen = ns(t);
        let t = Instant::now();
        self.agree(k);
        [sign, verify, keygen, ns(t)]
    }
}

/// What the pion program printed.
#[derive(Debug, Deserialize)]
struct PionResult {
    version: String,
    go: String,
    handshakes: usize,
    srtp_profile: String,
    total_us_median: f64,
    server_us_median: f64,
    client_us_median: f64,
    total_us_p25: f64,
    total_us_p75: f64,
}

/// The pion-dtls program: `SECRELAY_PION_DTLS`, or built from `peers/pion-dtls` with `go build`
/// (Go's build cache makes a rebuild of unchanged sources cheap). Err: why it is not there.
pub fn pion_binary() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("SECRELAY_PION_DTLS") {
        return Ok(PathBuf::from(p));
    }
    crate::go_peer::build("pion-dtls").map_err(|e| format!("not offered: {e}"))
}

fn run_pion(bin: &Path, handshakes: usize, cookies: bool) -> Result<PionResult, String> {
    let o = Command::new(bin)
        .args([
            "--bench-in-memory",
            "--handshakes",
            &handshakes.to_string(),
            &format!("--cookies={cookies}"),
            "--srtp",
            "SRTP_AES128_CM_SHA1_80",
        ])
        .output()
        .map_err(|e| format!("running {}: {e}", bin.display()))?;
    let stdout = String::from_utf8_lossy(&o.stdout);
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or("");
    if !o.status.success() {
        return Err(format!(
            "pion-dtls --bench-in-memory failed: {line} {}",
            String::from_utf8_lossy(&o.stderr).trim()
        ));
    }
    serde_json::from_str(line).map_err(|e| format!("pion-dtls printed {line:?}: {e}"))
}

/// What [`time_rounds`] measured: per pairing, the protection profile it agreed or why it
/// failed, and its samples; per floor, its timings.
type Rounds = (
    Vec<Result<&'static str, String>>,
    Vec<Vec<Sample>>,
    Vec<Vec<[f64; 4]>>,
);

/// Every pairing once outside timing (one that fails becomes a "not offered" row with the
/// reason instead of a number), then `warmup + rounds` interleaved rounds of every pairing
/// and every crypto floor, the first `warmup` not kept.
fn time_rounds(pairings: &[Pairing], floors: &[Floor], warmup: usize, rounds: usize) -> Rounds {
    let mut ok: Vec<Result<&'static str, String>> = pairings
        .iter()
        .map(|p| handshake(&p.make_client, &p.make_server).map(|(_, prof)| prof))
        .collect();
    let mut samples: Vec<Vec<Sample>> = pairings
        .iter()
        .map(|_| Vec::with_capacity(rounds))
        .collect();
    let mut floor_ns: Vec<Vec<[f64; 4]>> =
        floors.iter().map(|_| Vec::with_capacity(rounds)).collect();
    for round in 0..warmup + rounds {
        // Each round runs the pairings in another order (a fixed pseudo-random shuffle),
        // so that no pairing always follows the same one. Rotating the start was not
        // enough: the first pairing then always came right after OpenSSL's RSA-3072
        // handshake and paid for its cold caches and heap (~+100 µs on its server side).
        for i in round_order(pairings.len(), round) {
            let p = &pairings[i];
            if ok[i].is_err() {
                continue;
            }
            match handshake(&p.make_client, &p.make_server) {
                Ok((s, _)) if round >= warmup => samples[i].push(s),
                Ok(_) => {}
                Err(e) => ok[i] = Err(format!("failed in round {round}: {e}")),
            }
        }
        for (i, f) in floors.iter().enumerate() {
            let o = f.timed();
            if round >= warmup {
                floor_ns[i].push(o);
            }
        }
    }
    (ok, samples, floor_ns)
}

/// The crypto floor's table (per side, the median of each operation over the rounds, with
/// its instructions where counted) and each floor's sum of the four, in µs.
fn floor_table(
    floor_ns: &[Vec<[f64; 4]>],
    counts: &std::collections::BTreeMap<String, f64>,
) -> (Table, Vec<f64>) {
    let mut floor_us: Vec<f64> = Vec::new();
    let mut floor_table = Table::new(
        "crypto_floor",
        "Crypto floor per side, aws-lc-rs (µs per operation, median over the rounds)",
    )
    .col("ops", "one side's crypto")
    .col_unit("sign_us", "ECDSA sign", "µs")
    .col_unit("verify_us", "ECDSA verify", "µs")
    .col_unit("keygen_us", "ECDHE key pair", "µs")
    .col_unit("ecdh_us", "ECDH", "µs")
    .col_unit("sum_us", "all four", "µs")
    .col_unit("instructions", "instructions, all four", "instr");
    for (i, per_round) in floor_ns.iter().enumerate() {
        let op = |k: usize| median(&mut per_round.iter().map(|r| r[k]).collect::<Vec<_>>()) / 1e3;
        let (sign, verify, keygen, ecdh) = (op(0), op(1), op(2), op(3));
        let sum = median(
            &mut per_round
                .iter()
                .map(|r| r.iter().sum::<f64>())
                .collect::<Vec<_>>(),
        ) / 1e3;
        floor_us.push(sum);
        floor_table.push([
            ("ops", Cell::text(FLOOR_NAMES[i])),
            ("sign_us", Cell::num(sign)),
            ("verify_us", Cell::num(verify)),
            ("keygen_us", Cell::num(keygen)),
            ("ecdh_us", Cell::num(ecdh)),
            ("sum_us", Cell::num(sum)),
        ]);
        if let Some(n) = counts.get(&format!("floor|{i}")) {
            if let Some(row) = floor_table.rows.last_mut() {
                row.insert("instructions".into(), Cell::num(*n));
            }
        }
    }
    (floor_table, floor_us)
}

/// A row per pairing (its medians, or why it has none), then the key types secrelay's engine
/// refuses, each with the reason.
fn pairing_rows(
    pairings: &[Pairing],
    ok: &[Result<&'static str, String>],
    samples: &mut [Vec<Sample>],
) -> Vec<Row> {
    let mut rows: Vec<Row> = Vec::new();
    for (i, p) in pairings.iter().enumerate() {
        let result = match &ok[i] {
            Err(e) => Err(e.clone()),
            Ok(profile) => {
                let s = &mut samples[i];
                let mut total: Vec<f64> = s.iter().map(|x| x.total).collect();
                let mut server: Vec<f64> = s.iter().map(|x| x.server).collect();
                let mut client: Vec<f64> = s.iter().map(|x| x.client).collect();
                Ok(Figures {
                    profile: (*profile).into(),
                    total_us: median(&mut total) / 1e3,
                    server_us: median(&mut server) / 1e3,
                    client_us: median(&mut client) / 1e3,
                    spread_pct: iqr_pct(&mut total),
                    runs: total.len(),
                })
            }
        };
        let result = match result {
            Err(e) if p.client == "OpenSSL" && p.server == "secrelay" && e.contains("SRTP") => {
                Err(format!(
                    "not offered by the engine: dimpl 0.9 never negotiates this SRTP profile ({e})"
                ))
            }
            r => r,
        };
        rows.push(Row {
            stack: p.stack.clone(),
            client: p.client.clone(),
            server: p.server.clone(),
            cert: p.cert.clone(),
            kx: p.kx.clone(),
            cookies: p.cookies,
            offered: p.offered,
            floor: Some(p.floor),
            count_id: match (i, p.stack.as_str(), p.cert.as_str()) {
                (0, _, _) => Some(COUNT_SECRELAY_COOKIES),
                (1, _, _) => Some(COUNT_SECRELAY),
                (_, "OpenSSL", "ECDSA P-256") => Some(COUNT_OPENSSL),
                _ => None,
            },
            result,
        });
    }
    for kt in [KeyType::Ed25519, KeyType::Rsa2048, KeyType::Rsa3072] {
        let why =
            super::engine_refuses(secrelay_dtls::EngineChoice::Dimpl, kt).unwrap_or("refused");
        rows.push(Row {
            stack: "secrelay (dimpl + aws-lc-rs)".into(),
            client: "secrelay".into(),
            server: "secrelay".into(),
            cert: kt.name().into(),
            kx: "-".into(),
            cookies: true,
            offered: None,
            floor: None,
            count_id: None,
            result: Err(why.into()),
        });
    }
    rows
}

/// pion/dtls's rows (with and without cookies), or one saying why it did not run; how it was
/// measured.
fn pion_rows(pion: &Result<(PionResult, PionResult), String>, rows: &mut Vec<Row>) -> String {
    let pion_method;
    match pion {
        Ok((with, without)) => {
            pion_method = format!(
                "pion/dtls {} ({}), --bench-in-memory: {} handshakes after a warm-up, GOMAXPROCS=1, both ends in one Go process over a memory pipe; a side is charged from the moment it receives a datagram until the other side does (construction charged to its own side)",
                with.version, with.go, with.handshakes
            );
            for (r, cookies) in [(with, true), (without, false)] {
                rows.push(Row {
                    stack: format!("pion/dtls {}", r.version),
                    client: "pion".into(),
                    server: "pion".into(),
                    cert: "ECDSA P-256".into(),
                    kx: "P-256".into(),
                    cookies,
                    offered: Some("SRTP_AES128_CM_SHA1_80"),
                    floor: Some(0),
                    count_id: None,
                    result: Ok(Figures {
                        profile: r.srtp_profile.clone(),
                        total_us: r.total_us_median,
                        server_us: r.server_us_median,
                        client_us: r.client_us_median,
                        spread_pct: (r.total_us_p75 - r.total_us_p25) / r.total_us_median * 100.0,
                        runs: r.handshakes,
                    }),
                });
            }
        }
        Err(why) => {
            pion_method = format!("pion/dtls: {why}");
            rows.push(Row {
                stack: "pion/dtls".into(),
                client: "pion".into(),
                server: "pion".into(),
                cert: "ECDSA P-256".into(),
                kx: "P-256".into(),
                cookies: true,
                offered: Some("SRTP_AES128_CM_SHA1_80"),
                floor: None,
                count_id: None,
                result: Err(why.clone()),
            });
        }
    }
    pion_method
}

/// The figures of the row `pred` picks, if it has any.
fn reference(rows: &[Row], pred: impl Fn(&Row) -> bool) -> Option<Figures> {
    rows.iter()
        .find(|r| pred(r))
        .and_then(|r| r.result.as_ref().ok())
        .cloned()
}

/// The reference of the ratios against OpenSSL: its ECDSA P-256 row.
fn openssl_reference(rows: &[Row]) -> Option<Figures> {
    reference(rows, |r| r.stack == "OpenSSL" && r.cert == "ECDSA P-256")
}

/// The reference of the ratios against pion: its row with the same cookie setting.
fn pion_reference(rows: &[Row], cookies: bool) -> Option<Figures> {
    reference(rows, |r| r.client == "pion" && r.cookies == cookies)
}

/// The main table: every row's medians, rates and ratios (to its crypto floor, OpenSSL's and
/// pion's rows), spread and instructions; a row without figures says why.
fn main_table(
    rows: &[Row],
    floor_us: &[f64],
    counts: &std::collections::BTreeMap<String, f64>,
) -> Table {
    let openssl_ref = openssl_reference(rows);
    let pion_ref = |cookies: bool| pion_reference(rows, cookies);
    let mut table = Table::new(
        "handshake_in_memory",
        "DTLS 1.2 handshakes, both sides in one thread over memory (median per handshake)",
    )
    .col("stack", "stack")
    .col("client", "client")
    .col("server", "server")
    .col("cert", "certificates")
    .col("kx", "ECDHE")
    .col("cookies", "cookie exchange")
    .col("srtp_profile", "SRTP profile")
    .col_unit(
        "handshakes_per_s",
        "handshakes/s (one core, both sides)",
        "/s",
    )
    .col_unit("server_us", "server", "µs")
    .col_unit("server_per_s", "server handshakes/s per core", "/s")
    .col_unit("client_us", "client", "µs")
    .col_unit("server_vs_floor", "server ÷ crypto floor", "×")
    .col_unit("vs_openssl", "handshakes/s vs OpenSSL", "×")
    .col_unit("vs_pion", "handshakes/s vs pion", "×")
    .col_unit("server_vs_openssl", "server speed vs OpenSSL", "×")
    .col_unit("server_vs_pion", "server speed vs pion", "×")
    .col_unit("spread_pct", "spread", "%")
    .col("runs", "handshakes timed")
    .col_unit(
        "instructions",
        "instructions per handshake, both sides",
        "instr",
    );
    for r in rows {
        let mut cells: Vec<(&str, Cell)> = vec![
            ("stack", Cell::text(r.stack.clone())),
            ("client", Cell::text(r.client.clone())),
            ("server", Cell::text(r.server.clone())),
            ("cert", Cell::text(r.cert.clone())),
            ("kx", Cell::text(r.kx.clone())),
            ("cookies", Cell::text(if r.cookies { "yes" } else { "no" })),
        ];
        match &r.result {
            Ok(f) => {
                cells.push(("srtp_profile", Cell::text(f.profile.clone())));
                cells.push(("handshakes_per_s", Cell::num(1e6 / f.total_us)));
                cells.push(("server_us", Cell::num(f.server_us)));
                cells.push(("server_per_s", Cell::num(1e6 / f.server_us)));
                cells.push(("client_us", Cell::num(f.client_us)));
                if let Some(fl) = r.floor {
                    cells.push(("server_vs_floor", Cell::num(f.server_us / floor_us[fl])));
                }
                if let Some(o) = &openssl_ref {
                    cells.push(("vs_openssl", Cell::num(o.total_us / f.total_us)));
                    cells.push(("server_vs_openssl", Cell::num(o.server_us / f.server_us)));
                }
                if let Some(p) = pion_ref(r.cookies) {
                    cells.push(("vs_pion", Cell::num(p.total_us / f.total_us)));
                    cells.push(("server_vs_pion", Cell::num(p.server_us / f.server_us)));
                }
                cells.push(("spread_pct", Cell::num(f.spread_pct)));
                cells.push(("runs", Cell::text(f.runs.to_string())));
                if let Some(n) = r.count_id.and_then(|id| counts.get(id)) {
                    cells.push(("instructions", Cell::num(*n)));
                }
            }
            Err(why) => {
                if let Some(o) = r.offered {
                    cells.push(("srtp_profile", Cell::text(format!("{o} offered"))));
                } else {
                    cells.push(("srtp_profile", Cell::not_offered(why.clone())));
                }
                for k in ["handshakes_per_s", "server_us", "client_us"] {
                    cells.push((k, Cell::not_offered(why.clone())));
                }
            }
        }
        table.push(cells);
    }
    table
}

/// Bars: handshakes/s per stack (both sides on one core), and server-only handshakes/s.
fn rate_plot(rows: &[Row]) -> Plot {
    let bar_rows: Vec<(String, &Figures)> = rows
        .iter()
        .filter_map(|r| {
            let f = r.result.as_ref().ok()?;
            let who = if r.client == r.server {
                r.stack.clone()
            } else {
                format!("{} → {}", r.client, r.server)
            };
            Some((
                format!(
                    "{who}, {}, {}{}",
                    r.cert,
                    f.profile,
                    if r.cookies { ", cookies" } else { "" }
                ),
                f,
            ))
        })
        .collect();
    Plot {
        id: "handshake_rate_per_stack".into(),
        title: "DTLS-SRTP handshakes per second, one core, in memory".into(),
        kind: PlotKind::Bars,
        x_label: "stack, certificates, SRTP profile".into(),
        y_label: "handshakes/s".into(),
        log_y: false,
        categories: bar_rows.iter().map(|(n, _)| n.clone()).collect(),
        series: vec![
            Series {
                name: "both sides on one core".into(),
                points: bar_rows
                    .iter()
                    .enumerate()
                    .map(|(i, (_, f))| (i as f64, 1e6 / f.total_us))
                    .collect(),
            },
            Series {
                name: "server side alone (1 / server µs)".into(),
                points: bar_rows
                    .iter()
                    .enumerate()
                    .map(|(i, (_, f))| (i as f64, 1e6 / f.server_us))
                    .collect(),
            },
        ],
    }
}

/// What the table alone does not say: the profiles and key exchange negotiated, cookies,
/// resumption, secrelay's server against its crypto floor, and the back-to-back storms.
fn notes(rows: &[Row], floor_us: &[f64], storms: &mut [Storm]) -> Vec<String> {
    let openssl_ref = openssl_reference(rows);
    let pion_ref = |cookies: bool| pion_reference(rows, cookies);
    let mut notes = vec![
        "secrelay ↔ secrelay negotiates SRTP_AEAD_AES_256_GCM (dimpl 0.9 prefers it and the endpoint cannot narrow its SRTP offer) and, by default, ECDHE on X25519; \
         the P-256 row restricts both ends to ECDHE P-256 (EndpointConfig::ecdhe_groups), the issue's reference profile, as do the OpenSSL-client rows, which also pin one SRTP profile."
            .to_string(),
        "Cookie exchange: secrelay's server deploys with it (one more round trip); OpenSSL over memory BIOs has none, pion does it by default. \
         The pion ratio compares rows with the same setting."
            .to_string(),
        format!("Session resumption: {}", super::load::RESUMPTION_NOT_OFFERED),
    ];
    if let (Some(o), Some(s)) = (
        &openssl_ref,
        rows.first().and_then(|r| r.result.as_ref().ok()),
    ) {
        notes.push(format!(
            "secrelay's server (P-256, cookies on): {:.0} µs per handshake = {:.2}× its crypto floor ({:.0} µs); OpenSSL's server {:.0} µs.",
            s.server_us, s.server_us / floor_us[1], floor_us[1], o.server_us
        ));
    }
    for st in storms.iter_mut() {
        let (sv, fl) = (median(&mut st.server) / 1e3, median(&mut st.floor) / 1e3);
        let total = median(&mut st.total) / 1e3;
        // pion/dtls runs back to back too (its own process), so this is its like-for-like.
        let vs_pion = pion_ref(true)
            .map(|p| format!("; {:.2}× pion/dtls's handshakes/s with cookies ({:.0} µs, measured back to back in its own process)", p.total_us / total, p.total_us))
            .unwrap_or_default();
        notes.push(format!(
            "Back to back (a reconnect storm: {} handshakes in blocks of ten, alternating with blocks of the floor), ECDHE {}: secrelay's server (P-256 certificates, cookies on) \
             {sv:.0} µs per handshake = {:.2}× its crypto floor run the same way ({fl:.0} µs); whole handshake {total:.0} µs = {:.0} handshakes/s on one core{vs_pion}. \
             The table's rounds interleave every stack, so each handshake starts with caches another stack left; back to back is a server's steady state in a storm.",
            st.server.len(),
            st.kx,
            sv / fl,
            1e6 / total
        ));
    }
    notes
}

/// Back-to-back handshakes of pairing `p` as a server meets a reconnect storm: blocks of
/// its handshakes, of the same with its server's crypto timed in place (`timed`), and of its
/// crypto floor, one after another; the first of each block is dropped (it follows the other
/// kind of work).
fn storm(p: &Pairing, timed: &MakeSide, floors: &[Floor], rounds: usize) -> anyhow::Result<Storm> {
    const BLOCK: usize = 10;
    let mut st = Storm {
        kx: p.kx.clone(),
        ..Storm::default()
    };
    let storm_failed = |e: String| anyhow::anyhow!("back-to-back handshakes: {e}");
    // Builds the timed server's configuration (dimpl validates its provider then).
    handshake(&p.make_client, timed).map_err(storm_failed)?;
    for _ in 0..rounds.div_ceil(BLOCK - 1) {
        for k in 0..BLOCK {
            let (s, _) = handshake(&p.make_client, &p.make_server).map_err(storm_failed)?;
            if k > 0 {
                st.server.push(s.server);
                st.total.push(s.total);
            }
        }
        crypto_time::take();
        for k in 0..BLOCK {
            let (s, _) = handshake(&p.make_client, timed).map_err(storm_failed)?;
            let parts = crypto_time::take();
            if k > 0 {
                st.timed_server.push(s.server);
                st.parts.push(parts);
            }
        }
        for k in 0..BLOCK {
            let o = floors[p.floor].timed();
            if k > 0 {
                st.floor.push(o.iter().sum());
            }
        }
    }
    Ok(st)
}

/// The servers of the two back-to-back rows with their crypto timed in place, each with its
/// row.
type TimedServers = [(usize, MakeSide); 2];

/// The pairings the study times, each a client and a server of a stack with a certificate, a
/// key exchange and cookies on or off: secrelay's (ECDSA P-256 with and without cookies,
/// P-384, ECDHE on P-256 only), secrelay's server against OpenSSL clients offering one SRTP
/// profile each and its client against OpenSSL's server, OpenSSL's own with ECDSA and RSA
/// certificates; and the servers of the two back-to-back rows again with their crypto timed
/// in place (each with its row).
fn pairings() -> anyhow::Result<(Vec<Pairing>, TimedServers)> {
    let p256 = |cn: &str| Certificate::self_signed(KeyType::EcdsaP256, cn);
    let (c256, s256) = (p256("lab-client")?, p256("lab-server")?);
    let (c384, s384) = (
        Certificate::self_signed(KeyType::EcdsaP384, "lab-client")?,
        Certificate::self_signed(KeyType::EcdsaP384, "lab-server")?,
    );
    let rsa2048 = Certificate::self_signed(KeyType::Rsa2048, "lab-server-rsa2048")?;
    let rsa3072 = Certificate::self_signed(KeyType::Rsa3072, "lab-server-rsa3072")?;
    let all_profiles = secrelay_dtls::endpoint::DEFAULT_SRTP_PROFILES;
    let cm80 = "SRTP_AES128_CM_SHA1_80";
    let ossl_client_ecdsa = |srtp: &str| ossl_ctx(DtlsRole::Client, &c256, ECDSA_SUITE, srtp);
    let ossl_client_any = ossl_ctx(
        DtlsRole::Client,
        &c256,
        &format!("{ECDSA_SUITE}:{RSA_SUITE}"),
        cm80,
    )?;

    let mut pairings: Vec<Pairing> = Vec::new();
    let secrelay =
        |cert: &str, cookies: bool, floor: usize, c: &Certificate, s: &Certificate| Pairing {
            stack: "secrelay (dimpl + aws-lc-rs)".into(),
            client: "secrelay".into(),
            server: "secrelay".into(),
            cert: cert.into(),
            kx: DIMPL_KX.into(),
            cookies,
            offered: None,
            floor,
            make_client: ours(ours_config(Role::Client, c, false, &all_profiles)),
            make_server: ours(ours_config(Role::Server, s, cookies, &all_profiles)),
        };
    pairings.push(secrelay("ECDSA P-256", true, 1, &c256, &s256));
    pairings.push(secrelay("ECDSA P-256", false, 1, &c256, &s256));
    pairings.push(secrelay("ECDSA P-384", true, 2, &c384, &s384));
    // The reference profile: ECDHE on P-256 (both ends restricted to it).
    let p256_only = |role: Role, cert: &Certificate, cookies: bool| {
        let mut c = ours_config(role, cert, cookies, &all_profiles);
        c.ecdhe_groups = vec![EcdheGroup::P256];
        ours(c)
    };
    pairings.push(Pairing {
        kx: "P-256".into(),
        floor: 0,
        make_client: p256_only(Role::Client, &c256, false),
        make_server: p256_only(Role::Server, &s256, true),
        ..secrelay("ECDSA P-256", true, 0, &c256, &s256)
    });
    const P256_ECDHE_ROW: usize = 3;
    // The two back-to-back rows' servers again, with every call into the crypto provider
    // timed in place (`secrelay_dtls::crypto_time`).
    let timed_server = |groups: Vec<EcdheGroup>| {
        let mut c = ours_config(Role::Server, &s256, true, &all_profiles);
        c.ecdhe_groups = groups;
        c.time_crypto = true;
        ours(c)
    };
    let timed_servers = [
        (0, timed_server(Vec::new())),
        (P256_ECDHE_ROW, timed_server(vec![EcdheGroup::P256])),
    ];
    // secrelay's server with an OpenSSL client offering one SRTP profile (and P-256 only),
    // then secrelay's client against OpenSSL's server.
    for p in [
        Profile::AesCm128HmacSha1_80,
        Profile::AeadAes128Gcm,
        Profile::AeadAes256Gcm,
        Profile::AesCm128HmacSha1_32,
    ] {
        pairings.push(Pairing {
            stack: "secrelay server, OpenSSL client".into(),
            client: "OpenSSL".into(),
            server: "secrelay".into(),
            cert: "ECDSA P-256".into(),
            kx: "P-256".into(),
            cookies: true,
            offered: Some(super::dtls_name(p)),
            floor: 0,
            make_client: ossl(ossl_client_ecdsa(super::dtls_name(p))?),
            make_server: ours(ours_config(Role::Server, &s256, true, &all_profiles)),
        });
    }
    pairings.push(Pairing {
        stack: "secrelay client, OpenSSL server".into(),
        client: "secrelay".into(),
        server: "OpenSSL".into(),
        cert: "ECDSA P-256".into(),
        kx: "P-256".into(),
        cookies: false,
        offered: Some(cm80),
        floor: 0,
        make_client: ours(ours_config(Role::Client, &c256, false, &all_profiles)),
        make_server: ossl(ossl_ctx(DtlsRole::Server, &s256, ECDSA_SUITE, cm80)?),
    });
    for (cert, server_cert, suite) in [
        ("ECDSA P-256", &s256, ECDSA_SUITE),
        ("RSA-2048", &rsa2048, RSA_SUITE),
        ("RSA-3072", &rsa3072, RSA_SUITE),
    ] {
        pairings.push(Pairing {
            stack: "OpenSSL".into(),
            client: "OpenSSL".into(),
            server: "OpenSSL".into(),
            cert: cert.into(),
            kx: "P-256".into(),
            cookies: false,
            offered: Some(cm80),
            floor: 0,
            make_client: ossl(ossl_client_any.clone()),
            make_server: ossl(ossl_ctx(DtlsRole::Server, server_cert, suite, cm80)?),
        });
    }
    Ok((pairings, timed_servers))
}

/// A pairing measured in the rounds.
struct Pairing {
    stack: String,
    client: String,
    server: String,
    cert: String,
    kx: String,
    cookies: bool,
    /// The SRTP profiles offered, when one side narrows them.
    offered: Option<&'static str>,
    /// Which floor its server side is compared with.
    floor: usize,
    make_client: MakeSide,
    make_server: MakeSide,
}

/// A row of the main table.
struct Row {
    stack: String,
    client: String,
    server: String,
    cert: String,
    kx: String,
    cookies: bool,
    offered: Option<&'static str>,
    floor: Option<usize>,
    /// Id of its instruction count, if counted.
    count_id: Option<&'static str>,
    result: Result<Figures, String>,
}

#[derive(Debug, Clone)]
struct Figures {
    profile: String,
    total_us: f64,
    server_us: f64,
    client_us: f64,
    spread_pct: f64,
    runs: usize,
}

/// The pairings' order in round `round`: a Fisher–Yates shuffle of `0..n` driven by a
/// xorshift generator seeded with the round (reproducible; not for anything secret).
fn round_order(n: usize, round: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    let mut x = (round as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for i in (1..n).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        order.swap(i, (x % (i as u64 + 1)) as usize);
    }
    order
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    super::quantile(v, 0.5)
}

fn iqr_pct(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let m = super::quantile(v, 0.5);
    (super::quantile(v, 0.75) - super::quantile(v, 0.25)) / m * 100.0
}

fn ours_config(
    role: Role,
    cert: &Certificate,
    cookies: bool,
    profiles: &[Profile],
) -> EndpointConfig {
    let mut c = EndpointConfig::new(role, LocalCertificate::from(cert), PeerAuth::AnyCertificate);
    c.server_cookies = cookies;
    c.srtp_profiles = profiles.to_vec();
    c
}

fn ours(config: EndpointConfig) -> MakeSide {
    Box::new(move || Ok(Box::new(Ours::new(&config)?) as Box<dyn Side>))
}

fn ossl(ctx: OpensslDtlsContext) -> MakeSide {
    Box::new(move || Ok(Box::new(Ossl::new(&ctx)?) as Box<dyn Side>))
}

fn ossl_ctx(
    role: DtlsRole,
    cert: &Certificate,
    ciphers: &str,
    srtp: &str,
) -> anyhow::Result<OpensslDtlsContext> {
    let settings = DtlsSettings {
        cipher_list: ciphers.into(),
        groups: "P-256".into(),
        srtp_profiles: srtp.into(),
    };
    OpensslDtlsContext::from_der_with(role, cert.der(), cert.private_key_der(), &settings)
        .map_err(|e| anyhow::anyhow!("OpenSSL context: {e}"))
}

const ECDSA_SUITE: &str = "ECDHE-ECDSA-AES128-GCM-SHA256";
const RSA_SUITE: &str = "ECDHE-RSA-AES128-GCM-SHA256";
const FLOOR_NAMES: [&str; 3] = [
    "ECDSA P-256 + ECDHE P-256",
    "ECDSA P-256 + ECDHE X25519",
    "ECDSA P-384 + ECDHE X25519",
];
const DIMPL_KX: &str = "X25519 (dimpl's first choice)";

/// The three floors, in [`FLOOR_NAMES`] order.
fn floors() -> anyhow::Result<Vec<Floor>> {
    Ok(vec![
        Floor::new(
            &signature::ECDSA_P256_SHA256_ASN1_SIGNING,
            &signature::ECDSA_P256_SHA256_ASN1,
            &agreement::ECDH_P256,
        )?,
        Floor::new(
            &signature::ECDSA_P256_SHA256_ASN1_SIGNING,
            &signature::ECDSA_P256_SHA256_ASN1,
            &agreement::X25519,
        )?,
        Floor::new(
            &signature::ECDSA_P384_SHA384_ASN1_SIGNING,
            &signature::ECDSA_P384_SHA384_ASN1,
            &agreement::X25519,
        )?,
    ])
}

/// Medians (µs) of one part of the timed server's handshakes.
fn part_us(st: &Storm, f: impl Fn(&CryptoTime) -> Duration) -> f64 {
    median(
        &mut st
            .parts
            .iter()
            .map(|p| f(p).as_secs_f64() * 1e6)
            .collect::<Vec<_>>(),
    )
}

/// One back-to-back row's split (µs per handshake, medians), computed once for the table and
/// the note.
struct Split {
    server: f64,
    timed: f64,
    floor: f64,
    public_key: f64,
    symmetric: f64,
    /// What the timed server spent outside the provider (median of the per-handshake rest).
    rest: f64,
}

impl Split {
    fn of(st: &mut Storm) -> Split {
        let mut rest = st
            .timed_server
            .iter()
            .zip(&st.parts)
            .map(|(total, p)| total / 1e3 - (p.public_key() + p.symmetric()).as_secs_f64() * 1e6)
            .collect::<Vec<_>>();
        Split {
            server: median(&mut st.server) / 1e3,
            timed: median(&mut st.timed_server) / 1e3,
            floor: median(&mut st.floor) / 1e3,
            public_key: part_us(st, CryptoTime::public_key),
            symmetric: part_us(st, CryptoTime::symmetric),
            rest: median(&mut rest),
        }
    }
}

/// The back-to-back server's time split by where it goes, one row per ECDHE group, and what
/// the first (default) row says about the ≤ 1.15× target.
fn server_split(storms: &mut [Storm]) -> (Table, Option<String>) {
    let mut t = Table::new(
        "server_split",
        "Where secrelay's server time goes, back to back (P-256 certificates, cookies on; µs per handshake, medians; provider calls timed in place)",
    )
    .col("kx", "ECDHE")
    .col_unit("server_us", "server", "µs")
    .col_unit("timed_us", "server, calls timed", "µs")
    .col_unit("sign_us", "sign", "µs")
    .col_unit("verify_us", "verify", "µs")
    .col_unit("key_pair_us", "key pair", "µs")
    .col_unit("ecdh_us", "ECDH", "µs")
    .col_unit("public_key_us", "public-key ops", "µs")
    .col_unit("hmac_us", "HMAC (PRF, cookie)", "µs")
    .col_unit("hash_us", "transcript hash", "µs")
    .col_unit("aead_us", "record AEAD", "µs")
    .col_unit("symmetric_us", "symmetric crypto", "µs")
    .col_unit("rest_us", "everything else", "µs")
    .col_unit("floor_us", "crypto floor", "µs")
    .col_unit("in_place_ratio", "public-key ops ÷ floor", "×")
    .col_unit("server_ratio", "server ÷ floor", "×");
    let mut note = None;
    for st in storms.iter_mut().filter(|st| !st.parts.is_empty()) {
        let sp = Split::of(st);
        t.push([
            ("kx", Cell::text(st.kx.clone())),
            ("server_us", Cell::num(sp.server)),
            ("timed_us", Cell::num(sp.timed)),
            ("sign_us", Cell::num(part_us(st, |p| p.sign))),
            ("verify_us", Cell::num(part_us(st, |p| p.verify))),
            ("key_pair_us", Cell::num(part_us(st, |p| p.key_pair))),
            ("ecdh_us", Cell::num(part_us(st, |p| p.shared_secret))),
            ("public_key_us", Cell::num(sp.public_key)),
            ("hmac_us", Cell::num(part_us(st, |p| p.hmac))),
            ("hash_us", Cell::num(part_us(st, |p| p.hash))),
            ("aead_us", Cell::num(part_us(st, |p| p.aead))),
            ("symmetric_us", Cell::num(sp.symmetric)),
            ("rest_us", Cell::num(sp.rest)),
            ("floor_us", Cell::num(sp.floor)),
            ("in_place_ratio", Cell::num(sp.public_key / sp.floor)),
            ("server_ratio", Cell::num(sp.server / sp.floor)),
        ]);
        if note.is_none() {
            let Split {
                floor,
                public_key,
                symmetric,
                rest,
                ..
            } = sp;
            note = Some(format!(
                "Where the server's time goes (ECDHE {}, table server_split): the four public-key operations cost {public_key:.0} µs where the handshake does them \
                 ({:.2}× the floor's {floor:.0} µs run on their own), the symmetric crypto a DTLS 1.2 handshake cannot skip (PRF HMACs, transcript hash, record AEAD) {symmetric:.1} µs, \
                 and everything else (dimpl's parsing, flights, buffers, the endpoint, and the clocks themselves) {rest:.1} µs. \
                 A server at 1.15× its floor would have {:.1} µs above the floor for all of it; the symmetric crypto and the public-key operations' own excess in place take {:.1} µs of that before any protocol code runs.",
                st.kx,
                public_key / floor,
                0.15 * floor,
                symmetric + (public_key - floor).max(0.0),
            ));
        }
    }
    (t, note)
}

const COUNT_SECRELAY_COOKIES: &str = "secrelay|p256|cookies";
const COUNT_SECRELAY: &str = "secrelay|p256";
const COUNT_OPENSSL: &str = "openssl|p256";

/// The `lab handshake` study (in-memory mode).
pub struct HandshakeStudy;

impl Study for HandshakeStudy {
    fn name(&self) -> &'static str {
        "handshake"
    }
    fn title(&self) -> &'static str {
        "DTLS-SRTP handshakes in memory: handshakes/s per core, server and client µs apart, beside OpenSSL and pion/dtls (001, 002 d)"
    }

    fn counted_ops(&self, _pace: crate::measure::Pace) -> anyhow::Result<Vec<CountedOp>> {
        let (c, sv) = (
            Certificate::self_signed(KeyType::EcdsaP256, "count-client")?,
            Certificate::self_signed(KeyType::EcdsaP256, "count-server")?,
        );
        let profiles = secrelay_dtls::endpoint::DEFAULT_SRTP_PROFILES;
        let mut ops = Vec::new();
        for (id, cookies) in [(COUNT_SECRELAY_COOKIES, true), (COUNT_SECRELAY, false)] {
            let (mc, ms) = (
                ours(ours_config(Role::Client, &c, false, &profiles)),
                ours(ours_config(Role::Server, &sv, cookies, &profiles)),
            );
            ops.push(CountedOp::new(id, 2, move || {
                black_box(handshake(&mc, &ms).expect("worked in the timed study"));
            }));
        }
        let mc = ossl(ossl_ctx(
            DtlsRole::Client,
            &c,
            ECDSA_SUITE,
            "SRTP_AES128_CM_SHA1_80",
        )?);
        let ms = ossl(ossl_ctx(
            DtlsRole::Server,
            &sv,
            ECDSA_SUITE,
            "SRTP_AES128_CM_SHA1_80",
        )?);
        ops.push(CountedOp::new(COUNT_OPENSSL, 2, move || {
            black_box(handshake(&mc, &ms).expect("worked in the timed study"));
        }));
        for (i, f) in floors()?.into_iter().enumerate() {
            ops.push(CountedOp::new(format!("floor|{i}"), 4, move || {
                black_box(f.timed());
            }));
        }
        Ok(ops)
    }

    fn run(&self, ctx: &mut Ctx) -> anyhow::Result<StudyReport> {
        let rounds = if ctx.quick() { 20 } else { 600 };
        ctx.steps(5);
        ctx.step("certificates and contexts");
        let (pairings, timed_servers) = pairings()?;
        let floors = floors()?;
        ctx.done();

        // A dry run: every pairing once, outside timing; one that fails becomes a "not offered"
        // row with the reason instead of a number.
        ctx.step(format!(
            "{rounds} interleaved rounds of {} pairings",
            pairings.len()
        ));
        let warmup = if ctx.quick() { 2 } else { 20 };
        let (ok, mut samples, floor_ns) = time_rounds(&pairings, &floors, warmup, rounds);
        // Back to back, as a server meets a reconnect storm: blocks of secrelay's deployed
        // pairing (P-256 certificates, cookies on; ECDHE on X25519, then on P-256) one after
        // another, alternating with blocks of its crypto floor run the same way; the first of
        // each block is dropped (it follows the other kind of work).
        // A third kind of block runs the same server with its crypto timed in place.
        let mut storms: Vec<Storm> = Vec::new();
        for (row, timed) in &timed_servers {
            if ok[*row].is_ok() {
                storms.push(storm(&pairings[*row], timed, &floors, rounds)?);
            }
        }
        ctx.done();

        ctx.step("pion/dtls (Go), both ends in one process");
        let pion = pion_binary().and_then(|bin| {
            Ok((
                run_pion(&bin, rounds.max(50), true)?,
                run_pion(&bin, rounds.max(50), false)?,
            ))
        });
        ctx.done();

        let (counts, instructions_method) = match ctx.count_instructions() {
            Ok(c) => (
                c,
                "callgrind: instructions per whole handshake (both sides, construction and key comparison included; 2 per region, baseline region subtracted) \
                 for secrelay and OpenSSL with ECDSA P-256, and per side for the crypto floor (4 per region); under valgrind AVX-512 paths are not taken"
                    .to_string(),
            ),
            Err(why) => (Default::default(), why),
        };
        ctx.step("crypto floor");
        let (floor_table, floor_us) = floor_table(&floor_ns, &counts);
        ctx.done();

        // Rows.
        let mut rows = pairing_rows(&pairings, &ok, &mut samples);
        let pion_method = pion_rows(&pion, &mut rows);
        // References for the ratios: OpenSSL with an ECDSA P-256 server, pion with the same
        // cookie setting as the row.
        let table = main_table(&rows, &floor_us, &counts);

        // Bars: handshakes/s per stack (both sides on one core), and server-only handshakes/s.
        let plots = vec![rate_plot(&rows)];

        let mut notes = notes(&rows, &floor_us, &mut storms);
        let (split_table, split_note) = server_split(&mut storms);
        notes.extend(split_note);
        let phase_report = super::phases::run(ctx, ctx.opts.engine)?;
        ctx.done();
        notes.extend(phase_report.notes);
        let method = ctx.method(
            format!(
                "one whole DTLS 1.2 handshake, both sides in one thread over memory, with mutual ECDSA (or RSA server) certificate authentication, ECDHE, use_srtp, \
                 and the EXTRACTOR-dtls_srtp block exported on both sides and compared; endpoint construction included. Each side's calls are timed apart \
                 (Instant around every call); the total includes moving datagrams between them. {warmup} warm-up rounds, then {rounds} rounds, each running every \
                 pairing once in its own shuffled order (so that no pairing always follows the same one), and the crypto floor once (interleaved, so drift cancels in the ratios); medians reported, spread = IQR of the totals. \
                 Crypto floor: aws-lc-rs, one side's ECDSA sign + verify + ephemeral key pair + ECDH, each operation timed once per round (medians over the rounds, so that preemption on a busy machine does not inflate them). {pion_method}. \
                 Ratios vs OpenSSL use its ECDSA P-256 row. {}",
                phase_report.method
            ),
            instructions_method,
        );
        // This study times rounds of whole handshakes, not the bench's calibrated runs.
        let mut method = method;
        method.runs = rounds;
        method.warmup_ms = 0.0;
        method.run_ms = 0.0;
        method.spread = "interquartile range of the per-handshake totals, % of the median".into();
        Ok(StudyReport {
            study: self.name().into(),
            title: self.title().into(),
            seeds: vec!["001".into(), "002".into()],
            method,
            tables: [vec![table, floor_table, split_table], phase_report.tables].concat(),
            plots: [plots, phase_report.plots].concat(),
            notes,
        })
    }
}
