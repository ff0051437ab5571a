//! `secrelay lab handshake --tls` (study `tls`; seeds `001_…` and `004_…`): TLS handshakes
//! per second and their latency for secrelay's HTTPS signaling server beside nginx and
//! OpenSSL's `s_server -www`, in one run, with the same certificate files, the same client
//! ([`super::tls_load`]) and one core per server; the same client against secrelay's DTLS
//! server beside them; where each server's time goes (its crypto floor, measured in the same
//! run, against the CPU it spent per handshake, and instructions per handshake under
//! callgrind); what a handshake puts on the wire; what a half-open handshake costs a server in
//! memory.
//!
//! Each server runs as a process of its own pinned to one core (`taskset`), the load tool's
//! thread pinned to another; each measurement takes the server's CPU time (user + system, all
//! its processes and threads) from `/proc` before and after, so rates are given per wall
//! second and per server CPU-second. The load tool does not verify certificates (as tls-perf),
//! so that the client stays cheaper than the servers; its own CPU is reported too.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use secrelay_dtls::ca::{issue_certificate_for, CaDir, Role};
use secrelay_dtls::{Certificate, CipherSuite, EcdheGroup, KeyType};

use super::flights;
use super::tls_load::{self, TlsLoadOptions, TlsLoadReport, TlsVersion};
use super::tls_servers::{self, CertFiles, ServerKind, ServerProc};
use crate::count::CountedOp;
use crate::frame::{Cell, Plot, PlotKind, Series, StudyReport, Table};
use crate::measure::Pace;
use crate::{Ctx, Study};

/// The study.
pub struct TlsStudy;

/// The message a TLS 1.3 server signs in CertificateVerify: 64 spaces, the context string,
/// a zero byte and the transcript hash (SHA-256): 130 bytes.
fn certificate_verify_message() -> Vec<u8> {
    let mut m = vec![0x20u8; 64];
    m.extend_from_slice(b"TLS 1.3, server CertificateVerify\0");
    m.extend_from_slice(&[0x5a; 32]);
    m
}

/// One public-key operation of a floor, for a library.
struct FloorOps {
    sign_p256: Box<dyn FnMut()>,
    sign_rsa2048: Box<dyn FnMut()>,
    x25519: Box<dyn FnMut()>,
}

/// aws-lc-rs, as rustls uses it: ECDSA P-256 SHA-256 signing, RSA-2048 PSS SHA-256 signing,
/// an X25519 key pair made and agreed with a peer's public key.
fn aws_lc_ops() -> anyhow::Result<FloorOps> {
    use aws_lc_rs::agreement::{agree_ephemeral, EphemeralPrivateKey, UnparsedPublicKey, X25519};
    use aws_lc_rs::rand::SystemRandom;
    use aws_lc_rs::signature::{
        EcdsaKeyPair, RsaKeyPair, ECDSA_P256_SHA256_ASN1_SIGNING, RSA_PSS_SHA256,
    };
    let rng = SystemRandom::new();
    let msg = certificate_verify_message();
    let p256 = Certificate::self_signed(KeyType::EcdsaP256, "floor")?;
    let ec = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, p256.private_key_der())
        .map_err(|e| anyhow::anyhow!("P-256 key: {e}"))?;
    let rsa_cert = Certificate::self_signed(KeyType::Rsa2048, "floor")?;
    let rsa = RsaKeyPair::from_pkcs8(rsa_cert.private_key_der())
        .map_err(|e| anyhow::anyhow!("RSA key: {e}"))?;
    let peer = EphemeralPrivateKey::generate(&X25519, &rng)
        .and_then(|k| k.compute_public_key())
        .map_err(|_| anyhow::anyhow!("X25519 key"))?
        .as_ref()
        .to_vec();
    let (r1, r2, r3) = (rng.clone(), rng.clone(), rng);
    let m1 = msg.clone();
    let mut sig = vec![0u8; rsa.public_modulus_len()];
    Ok(FloorOps {
        sign_p256: Box::new(move || {
            black_box(ec.sign(&r1, &m1).expect("P-256 signing works"));
        }),
        sign_rsa2048: Box::new(move || {
            rsa.sign(&RSA_PSS_SHA256, &r2, &msg, &mut sig)
                .expect("RSA signing works");
            black_box(&sig);
        }),
        x25519: Box::new(move || {
            let k =
                EphemeralPrivateKey::generate(&X25519, &r3).expect("X25519 key generation works");
            black_box(k.compute_public_key().expect("a public key"));
            let n = agree_ephemeral(k, UnparsedPublicKey::new(&X25519, &peer), (), |s| {
                Ok::<usize, ()>(s.len())
            })
            .expect("X25519 agreement works");
            black_box(n);
        }),
    })
}

/// OpenSSL (the system's libcrypto, as nginx and s_server use it): the same operations.
fn openssl_ops() -> anyhow::Result<FloorOps> {
    use openssl::derive::Deriver;
    use openssl::hash::MessageDigest;
    use openssl::pkey::PKey;
    use openssl::rsa::Padding;
    use openssl::sign::{RsaPssSaltlen, Signer};
    let msg = certificate_verify_message();
    let p256 = Certificate::self_signed(KeyType::EcdsaP256, "floor")?;
    let ec = PKey::private_key_from_pkcs8(p256.private_key_der())?;
    let rsa_cert = Certificate::self_signed(KeyType::Rsa2048, "floor")?;
    let rsa = PKey::private_key_from_pkcs8(rsa_cert.private_key_der())?;
    let peer = PKey::public_key_from_raw_bytes(
        &PKey::generate_x25519()?.raw_public_key()?,
        openssl::pkey::Id::X25519,
    )?;
    let m1 = msg.clone();
    Ok(FloorOps {
        sign_p256: Box::new(move || {
            let mut s = Signer::new(MessageDigest::sha256(), &ec).expect("a signer");
            black_box(s.sign_oneshot_to_vec(&m1).expect("P-256 signing works"));
        }),
        sign_rsa2048: Box::new(move || {
            let mut s = Signer::new(MessageDigest::sha256(), &rsa).expect("a signer");
            s.set_rsa_padding(Padding::PKCS1_PSS).expect("PSS");
            s.set_rsa_pss_saltlen(RsaPssSaltlen::DIGEST_LENGTH)
                .expect("salt length");
            black_box(s.sign_oneshot_to_vec(&msg).expect("RSA signing works"));
        }),
        x25519: Box::new(move || {
            let k = PKey::generate_x25519().expect("X25519 key generation works");
            black_box(k.raw_public_key().expect("a public key"));
            let mut d = Deriver::new(&k).expect("a deriver");
            d.set_peer(&peer).expect("the peer's key");
            black_box(d.derive_to_vec().expect("X25519 agreement works"));
        }),
    })
}

/// One floor operation, by id.
type FloorOp = (String, Box<dyn FnMut()>);

/// A server's memory per half-open handshake (KiB, clients answered), or why there is none.
type MemoryRow = (String, Result<(f64, usize), String>);

/// What [`load_runs`] measured: every run, and the servers that could not run, with why.
type LoadRuns = (Vec<Run>, BTreeMap<&'static str, String>);

/// The load runs: per certificate, the three servers up at once (an idle one costs nothing)
/// on the server core, the client on the other; each scenario measured in rounds that take
/// the servers in turn, each round in another order, so that load from elsewhere on the
/// machine weighs on all of them alike.
fn load_runs(
    ctx: &Ctx,
    exe: &Path,
    files: &[CertFiles],
    server_core: Option<usize>,
    load: &Load,
) -> anyhow::Result<LoadRuns> {
    let servers = [ServerKind::Secrelay, ServerKind::Nginx, ServerKind::SServer];
    let scenarios = [
        (TlsVersion::Tls13, false),
        (TlsVersion::Tls13, true),
        (TlsVersion::Tls12, false),
        (TlsVersion::Tls12, true),
    ];
    let mut runs: Vec<Run> = Vec::new();
    let mut unavailable: BTreeMap<&'static str, String> = BTreeMap::new();
    // The three servers run at once (an idle one costs nothing), and each scenario is
    // measured in rounds that take the servers in turn, each round in another order, so
    // that load from elsewhere on the machine weighs on all of them alike.
    for f in files {
        let mut up = Vec::new();
        for kind in servers {
            ctx.step(format!("{} with {}", kind.name(), f.key_type));
            if let Some(why) = tls_servers::unavailable(kind) {
                unavailable.insert(kind.name(), why);
                ctx.done();
                continue;
            }
            let server = match kind {
                ServerKind::Secrelay => ServerProc::secrelay(exe, f, server_core),
                ServerKind::Nginx => ServerProc::nginx(f, server_core, None),
                _ => ServerProc::s_server(f, server_core, None),
            }
            .with_context(|| format!("starting {}", kind.name()))?;
            warm(&server, load);
            up.push(server);
            ctx.done();
        }
        for (version, resume) in scenarios {
            let mut rounds: Vec<Vec<Run>> = up.iter().map(|_| Vec::new()).collect();
            for round in 0..load.rounds {
                for k in 0..up.len() {
                    let i = (k + round) % up.len();
                    rounds[i].push(measure(&up[i], load, &f.key_type, version, resume)?);
                }
            }
            for r in rounds {
                runs.extend(Run::merge(r));
            }
        }
    }
    Ok((runs, unavailable))
}

/// The load client against secrelay's DTLS server (full handshakes: the engine does not
/// resume) after a warm-up: its result, the server's CPU seconds and the handshakes it
/// counted.
fn dtls_run(
    exe: &Path,
    server_core: Option<usize>,
    load: &Load,
) -> anyhow::Result<(super::load::LoadReport, f64, u64)> {
    let server = ServerProc::dtls(exe, "ecdsa-p256", server_core)?;
    let mk = |d: Duration| {
        let mut o = super::load::LoadOptions::new(server.addr);
        o.duration = Some(d);
        o.connections = load.connections;
        o.threads = 1;
        o.progress = false;
        o
    };
    let _ = super::load::run(mk(load.warmup), Arc::new(AtomicBool::new(false)));
    // The server prints its counters once a second: let the warm-up's be printed.
    std::thread::sleep(Duration::from_millis(1200));
    let c0 = server.counted().map(|c| c.0).unwrap_or(0);
    let cpu0 = server.cpu_s();
    let r = super::load::run(mk(load.duration), Arc::new(AtomicBool::new(false)))?;
    // The server prints its counters once a second.
    std::thread::sleep(Duration::from_millis(1200));
    let cpu = server.cpu_s() - cpu0;
    let c1 = server.counted().map(|c| c.0).unwrap_or(0);
    Ok((r, cpu, c1.saturating_sub(c0)))
}

/// Memory per half-open handshake, each server alone on its core (`f`'s certificate).
fn memory_rows(
    exe: &Path,
    f: &CertFiles,
    server_core: Option<usize>,
    n_half: usize,
) -> anyhow::Result<Vec<MemoryRow>> {
    let mut memory: Vec<MemoryRow> = Vec::new();
    for kind in [
        ServerKind::Secrelay,
        ServerKind::Nginx,
        ServerKind::SServer,
        ServerKind::SecrelayDtls,
    ] {
        if let Some(why) = tls_servers::unavailable(kind) {
            memory.push((kind.name().into(), Err(why)));
            continue;
        }
        let server = match kind {
            ServerKind::Secrelay => ServerProc::secrelay(exe, f, server_core),
            ServerKind::Nginx => ServerProc::nginx(f, server_core, None),
            ServerKind::SServer => ServerProc::s_server(f, server_core, None),
            ServerKind::SecrelayDtls => ServerProc::dtls(exe, "ecdsa-p256", server_core),
        }?;
        std::thread::sleep(Duration::from_millis(300));
        memory.push((
            kind.name().into(),
            half_open_kib(&server, n_half, kind == ServerKind::SecrelayDtls)
                .map_err(|e| format!("{e:#}")),
        ));
    }
    Ok(memory)
}

fn floor_ops() -> anyhow::Result<Vec<FloorOp>> {
    let mut out: Vec<FloorOp> = Vec::new();
    for (lib, ops) in [("aws-lc-rs", aws_lc_ops()?), ("OpenSSL", openssl_ops()?)] {
        out.push((format!("{lib}/sign-p256"), ops.sign_p256));
        out.push((format!("{lib}/sign-rsa2048"), ops.sign_rsa2048));
        out.push((format!("{lib}/x25519"), ops.x25519));
    }
    Ok(out)
}

/// This thread's CPU time, ns.
fn thread_cpu_ns() -> f64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID)
        .map(|t| t.tv_sec() as f64 * 1e9 + t.tv_nsec() as f64)
        .unwrap_or(f64::NAN)
}

/// CPU time per call of `op` on this thread (not wall time: the servers' figures are CPU time
/// from /proc, and on a shared machine other processes' time on the core must not count),
/// median of runs of about 100 ms (20 ms with `--quick`, 1 ms with `--smoke`) after a warm-up.
fn cpu_ns_per_op(op: &mut dyn FnMut(), pace: Pace) -> f64 {
    for _ in 0..20 {
        op();
    }
    let (runs, target) = match pace {
        Pace::Full => (11, 100e6),
        Pace::Quick => (5, 20e6),
        Pace::Smoke => (3, 1e6),
    };
    let mut per = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t0 = thread_cpu_ns();
        let mut n = 0u64;
        loop {
            op();
            n += 1;
            if thread_cpu_ns() - t0 >= target {
                break;
            }
        }
        per.push((thread_cpu_ns() - t0) / n as f64);
    }
    per.sort_by(f64::total_cmp);
    per[per.len() / 2]
}

/// The library a server does its crypto with.
fn library(kind: ServerKind) -> &'static str {
    match kind {
        ServerKind::Secrelay | ServerKind::SecrelayDtls => "aws-lc-rs",
        ServerKind::Nginx | ServerKind::SServer => "OpenSSL",
    }
}

/// A scenario's public-key floor per handshake, server side: (sign, key exchange) ids.
fn floor_parts(cert: &str, version: TlsVersion, resumed: bool) -> Vec<&'static str> {
    match (version, resumed) {
        // TLS 1.2 resumption: no public-key operation at all.
        (TlsVersion::Tls12, true) => vec![],
        // TLS 1.3 resumption (psk_dhe_ke): the key exchange, no signature.
        (TlsVersion::Tls13, true) => vec!["x25519"],
        _ if cert.starts_with("rsa") => vec!["sign-rsa2048", "x25519"],
        _ => vec!["sign-p256", "x25519"],
    }
}

fn floor_of(by_id: &BTreeMap<String, f64>, lib: &str, parts: &[&str]) -> f64 {
    parts
        .iter()
        .map(|p| {
            by_id
                .get(&format!("{lib}/{p}"))
                .copied()
                .unwrap_or(f64::NAN)
        })
        .sum()
}

/// One load measurement against a server.
struct Run {
    server: ServerKind,
    cert: String,
    version: TlsVersion,
    resume: bool,
    report: TlsLoadReport,
    server_cpu_s: f64,
    /// The server's own count of full and resumed handshakes over the run (nginx: connections).
    counted: Option<(u64, u64)>,
}

impl Run {
    /// One run of a server's rounds: the reports merged, CPU and counts summed.
    fn merge(rounds: Vec<Run>) -> Option<Run> {
        let first = rounds.first()?;
        let (server, cert, version, resume) = (
            first.server,
            first.cert.clone(),
            first.version,
            first.resume,
        );
        let server_cpu_s = rounds.iter().map(|r| r.server_cpu_s).sum();
        let counted = rounds.iter().try_fold((0u64, 0u64), |acc, r| {
            r.counted.map(|(f, s)| (acc.0 + f, acc.1 + s))
        });
        let report = TlsLoadReport::merge(rounds.into_iter().map(|r| r.report).collect())?;
        Some(Run {
            server,
            cert,
            version,
            resume,
            report,
            server_cpu_s,
            counted,
        })
    }

    fn per_cpu_s(&self) -> f64 {
        self.report.completed as f64 / self.server_cpu_s
    }
    fn cpu_us(&self) -> f64 {
        self.server_cpu_s * 1e6 / self.report.completed.max(1) as f64
    }
    fn scenario(&self) -> String {
        format!(
            "TLS {} {} {}",
            self.version.name(),
            if self.resume { "resumed" } else { "full" },
            self.cert
        )
    }
    fn counts_match(&self) -> Cell {
        let Some((full, resumed)) = self.counted else {
            return Cell::not_offered("the server's counters could not be read");
        };
        let ok = match self.server {
            // nginx counts connections, not handshakes: every connection was a handshake or a
            // failure.
            ServerKind::Nginx => full == self.report.completed + self.report.failed,
            _ => full == self.report.full && resumed == self.report.resumed,
        };
        Cell::text(if ok {
            format!("yes ({full} + {resumed})")
        } else {
            format!(
                "NO: server {full} + {resumed}, client {} + {}",
                self.report.full, self.report.resumed
            )
        })
    }
}

/// Settings of the load runs.
struct Load {
    /// Rounds per scenario (each server once per round).
    rounds: usize,
    /// Length of one server's turn in a round.
    duration: Duration,
    warmup: Duration,
    connections: usize,
    client_core: Option<usize>,
}

fn measure(
    server: &ServerProc,
    load: &Load,
    cert: &str,
    version: TlsVersion,
    resume: bool,
) -> anyhow::Result<Run> {
    let before = server.counted().ok();
    let cpu0 = server.cpu_s();
    let mut o = TlsLoadOptions::new(server.addr);
    o.duration = Some(load.duration);
    o.connections = load.connections;
    o.threads = 1;
    o.version = version;
    o.resume = resume;
    o.progress = false;
    o.cpus = load.client_core.into_iter().collect();
    let report = tls_load::run(o, Arc::new(AtomicBool::new(false)), false)
        .with_context(|| format!("{} against {}", version.name(), server.kind.name()))?;
    // Let the last closes land before reading the server's CPU and counters.
    std::thread::sleep(Duration::from_millis(100));
    let server_cpu_s = server.cpu_s() - cpu0;
    let after = server.counted().ok();
    let counted = match (before, after) {
        (Some(b), Some(a)) => Some((
            a.0.saturating_sub(b.0)
                .saturating_sub(server.reading_cost()),
            a.1.saturating_sub(b.1),
        )),
        _ => None,
    };
    Ok(Run {
        server: server.kind,
        cert: cert.to_string(),
        version,
        resume,
        report,
        server_cpu_s,
        counted,
    })
}

fn warm(server: &ServerProc, load: &Load) {
    let mut o = TlsLoadOptions::new(server.addr);
    o.duration = Some(load.warmup);
    o.connections = load.connections;
    o.progress = false;
    o.cpus = load.client_core.into_iter().collect();
    let _ = tls_load::run(o, Arc::new(AtomicBool::new(false)), false);
}

/// The certificate files for one key type, issued by the study's CA for 127.0.0.1 and
/// localhost (the leaf alone in the PEM file, as servers are usually given it).
fn cert_files(dir: &Path, ca: &CaDir, key_type: KeyType) -> anyhow::Result<CertFiles> {
    let cert = issue_certificate_for(
        ca.certificate(),
        &["127.0.0.1", "localhost"],
        Role::Server,
        key_type,
    )?;
    let (pem, key) = cert.to_pem();
    let leaf_end = pem
        .find("-----END CERTIFICATE-----")
        .map(|i| i + "-----END CERTIFICATE-----\n".len())
        .context("a PEM certificate")?;
    let cert_path = dir.join(format!("{}.pem", key_type.name()));
    let key_path = dir.join(format!("{}.key", key_type.name()));
    std::fs::write(&cert_path, &pem[..leaf_end.min(pem.len())])?;
    std::fs::write(&key_path, key.as_bytes())?;
    Ok(CertFiles {
        cert: cert_path,
        key: key_path,
        ca_der: ca.certificate().der().to_vec(),
        key_type: key_type.name().into(),
    })
}

/// The cores this process may run on.
fn allowed_cores() -> Vec<usize> {
    match nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)) {
        Ok(set) => (0..nix::sched::CpuSet::count())
            .filter(|&i| set.is_set(i).unwrap_or(false))
            .collect(),
        Err(_) => Vec::new(),
    }
}

fn pin_self(core: Option<usize>) {
    let mut set = nix::sched::CpuSet::new();
    match core {
        Some(c) => {
            let _ = set.set(c);
        }
        None => {
            for c in allowed_cores() {
                let _ = set.set(c);
            }
        }
    }
    let _ = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set);
}

/// Instructions per full TLS 1.3 handshake of a server run under callgrind: warm up, zero the
/// counters (`callgrind_control -z`), `n` handshakes one at a time, dump, read the total.
fn instructions_per_handshake(
    kind: ServerKind,
    exe: &Path,
    files: &CertFiles,
    n: u64,
) -> Result<f64, String> {
    if let Some(r) = crate::count::unavailable_reason() {
        return Err(format!("not counted: {r}"));
    }
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let out = dir.path().join("cg.out");
    let valgrind: Vec<String> = vec![
        "valgrind".into(),
        "--tool=callgrind".into(),
        format!("--callgrind-out-file={}", out.display()),
        "--dump-instr=no".into(),
        "--compress-strings=no".into(),
        "--compress-pos=no".into(),
    ];
    let server = match kind {
        ServerKind::Secrelay => ServerProc::secrelay_under(exe, files, None, Some(&valgrind)),
        ServerKind::Nginx => ServerProc::nginx(files, None, Some(&valgrind)),
        ServerKind::SServer => ServerProc::s_server(files, None, Some(&valgrind)),
        ServerKind::SecrelayDtls => return Err("not counted here".into()),
    }
    .map_err(|e| format!("not counted: starting under valgrind: {e:#}"))?;
    let run = |count: u64| -> Result<u64, String> {
        let mut o = TlsLoadOptions::new(server.addr);
        o.handshakes = Some(count);
        o.progress = false;
        o.timeout = Duration::from_secs(30);
        let r = tls_load::run(o, Arc::new(AtomicBool::new(false)), false)
            .map_err(|e| format!("{e:#}"))?;
        Ok(r.completed)
    };
    run(20)?;
    let control = |flag: &str| -> Result<(), String> {
        let o = Command::new("callgrind_control")
            .arg(flag)
            .arg(server.pid().to_string())
            .output()
            .map_err(|e| format!("callgrind_control: {e}"))?;
        if o.status.success() {
            Ok(())
        } else {
            Err(format!(
                "callgrind_control {flag}: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            ))
        }
    };
    control("-z")?;
    let done = run(n)?;
    control("-d")?;
    let mut total = None;
    for e in std::fs::read_dir(dir.path())
        .map_err(|e| e.to_string())?
        .flatten()
    {
        // The dump `-d` asked for (`cg.out.1`, "Trigger: dump"); the file of the final dump
        // at exit is still empty while the server runs.
        let text = std::fs::read_to_string(e.path()).unwrap_or_default();
        if !text.contains("Trigger:") {
            continue;
        }
        for l in text.lines() {
            if let Some(v) = l
                .strip_prefix("summary:")
                .or_else(|| l.strip_prefix("totals:"))
            {
                if let Some(ir) = v
                    .split_whitespace()
                    .next()
                    .and_then(|x| x.parse::<f64>().ok())
                {
                    total = Some(ir);
                }
            }
        }
    }
    drop(server);
    let total = total.ok_or("no callgrind dump with a total")?;
    Ok(total / done.max(1) as f64)
}

/// Resident memory per handshake held half-open: `n` clients send a ClientHello (TLS) or
/// get as far as the server's flight (DTLS) and then say nothing; the server's RSS before
/// and while they wait, after a few complete handshakes; ÷ the clients it answered.
fn half_open_kib(server: &ServerProc, n: usize, dtls: bool) -> anyhow::Result<(f64, usize)> {
    // A few complete handshakes first, so that what is made once (tables, buffers' first
    // growth) is not counted per handshake.
    if dtls {
        let mut o = super::load::LoadOptions::new(server.addr);
        o.handshakes = Some(20);
        o.progress = false;
        let _ = super::load::run(o, Arc::new(AtomicBool::new(false)));
    } else {
        let mut o = TlsLoadOptions::new(server.addr);
        o.handshakes = Some(20);
        o.progress = false;
        let _ = tls_load::run(o, Arc::new(AtomicBool::new(false)), false);
    }
    std::thread::sleep(Duration::from_millis(200));
    let before = server.rss_kib();
    let (held, count): (Vec<Box<dyn std::any::Any>>, usize) = if dtls {
        let (s, n) = half_open_dtls(server.addr, n)?;
        (
            s.into_iter()
                .map(|x| Box::new(x) as Box<dyn std::any::Any>)
                .collect(),
            n,
        )
    } else {
        let (s, n) = half_open_tls(server.addr, n)?;
        (
            s.into_iter()
                .map(|x| Box::new(x) as Box<dyn std::any::Any>)
                .collect(),
            n,
        )
    };
    let during = server.rss_kib();
    drop(held);
    Ok(((during - before) / count.max(1) as f64, count))
}

/// `n` TCP connections that each sent a ClientHello and read the server's first flight (or
/// waited half a second for it); the sockets, and how many got an answer.
fn half_open_tls(
    addr: std::net::SocketAddr,
    n: usize,
) -> anyhow::Result<(Vec<std::net::TcpStream>, usize)> {
    use std::io::{Read as _, Write as _};
    let provider = tls_load::client_provider(TlsVersion::Tls13, &[], &["x25519".into()])?;
    let config = Arc::new(
        rustls::ClientConfig::builder_with_provider(Arc::new(provider))
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth(),
    );
    let mut socks = Vec::new();
    for _ in 0..n {
        let mut c = rustls::ClientConnection::new(
            config.clone(),
            rustls::pki_types::ServerName::IpAddress(addr.ip().into()),
        )?;
        let mut hello = Vec::new();
        c.write_tls(&mut hello)?;
        let mut s = std::net::TcpStream::connect(addr)?;
        s.write_all(&hello)?;
        socks.push(s);
    }
    let mut answered = 0;
    let end = Instant::now() + Duration::from_millis(1500);
    for s in &mut socks {
        let left = end
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1));
        s.set_read_timeout(Some(left))?;
        let mut buf = [0u8; 16_384];
        if matches!(s.read(&mut buf), Ok(k) if k > 0) {
            answered += 1;
        }
    }
    Ok((socks, answered))
}

/// `n` DTLS clients driven until the server's flight with its ServerHello arrives, then left
/// silent; their sockets, and how many got that far.
fn half_open_dtls(
    addr: std::net::SocketAddr,
    n: usize,
) -> anyhow::Result<(Vec<std::net::UdpSocket>, usize)> {
    use secrelay_dtls::{Endpoint, EndpointConfig, LocalCertificate, Output, PeerAuth};
    let cert = Certificate::self_signed(KeyType::EcdsaP256, "half-open")?;
    let config = EndpointConfig::new(
        secrelay_dtls::Role::Client,
        LocalCertificate::from(&cert),
        PeerAuth::AnyCertificate,
    );
    let mut socks = Vec::new();
    let mut answered = 0;
    for _ in 0..n {
        let s = std::net::UdpSocket::bind("127.0.0.1:0")?;
        s.connect(addr)?;
        s.set_read_timeout(Some(Duration::from_millis(500)))?;
        let now = Instant::now();
        let mut ep = Endpoint::new(config.clone(), now).map_err(|e| anyhow::anyhow!("{e}"))?;
        let mut buf = [0u8; 2048];
        // ClientHello, HelloVerifyRequest, ClientHello with the cookie, then the server's
        // flight (ServerHello first): stop there.
        let mut got_hello = false;
        for _ in 0..4 {
            while let Some(o) = ep.poll_output() {
                match o {
                    Output::Transmit(d) => {
                        let _ = s.send(&d);
                    }
                    _ => break,
                }
            }
            match s.recv(&mut buf) {
                // A handshake record carrying a ServerHello (type 2) at its first fragment.
                Ok(k) if k > 13 && buf[0] == 22 && buf[13] == 2 => {
                    got_hello = true;
                    break;
                }
                Ok(k) => {
                    ep.handle_datagram(Instant::now(), &buf[..k]);
                }
                Err(_) => break,
            }
        }
        if got_hello {
            answered += 1;
        }
        socks.push(s);
    }
    Ok((socks, answered))
}

fn ratio(a: f64, b: f64) -> Cell {
    if a.is_finite() && b.is_finite() && b > 0.0 {
        Cell::num(a / b)
    } else {
        Cell::not_offered("no figure to compare")
    }
}

impl Study for TlsStudy {
    fn name(&self) -> &'static str {
        "tls"
    }

    fn title(&self) -> &'static str {
        "TLS handshakes: secrelay's HTTPS server beside nginx and openssl s_server, and beside its DTLS server (001, 004)"
    }

    fn counted_ops(&self, _pace: Pace) -> anyhow::Result<Vec<CountedOp>> {
        Ok(floor_ops()?
            .into_iter()
            .map(|(id, op)| CountedOp::new(format!("floor/{id}"), 20, op))
            .collect())
    }

    fn run(&self, ctx: &mut Ctx) -> anyhow::Result<StudyReport> {
        let quick = ctx.quick();
        let exe = ctx
            .opts
            .self_exe
            .clone()
            .context("the TLS study starts `secrelay serve` and needs the secrelay binary")?;
        let cores = allowed_cores();
        let (server_core, client_core) = if cores.len() >= 2 {
            (Some(cores[0]), Some(cores[1]))
        } else {
            (None, None)
        };
        let load = load_settings(ctx, client_core);
        let key_types: Vec<KeyType> = if quick {
            vec![KeyType::EcdsaP256]
        } else {
            vec![KeyType::EcdsaP256, KeyType::Rsa2048]
        };
        let servers = [ServerKind::Secrelay, ServerKind::Nginx, ServerKind::SServer];
        ctx.steps((key_types.len() * servers.len() + 5) as u64);
        let dir = tempfile::tempdir()?;
        let ca = CaDir::init(dir.path().join("ca"), KeyType::EcdsaP256, false)?;
        let files: Vec<CertFiles> = key_types
            .iter()
            .map(|kt| cert_files(dir.path(), &ca, *kt))
            .collect::<anyhow::Result<_>>()?;
        let mut notes = Vec::new();

        // The crypto floors, on the servers' core while nothing else runs there.
        ctx.step("crypto floors");
        let floor_us = crypto_floors(ctx, server_core)?;
        ctx.done();

        // The load runs: each server on the server core, the client on the other.
        pin_self(client_core);
        let (runs, unavailable) = load_runs(ctx, &exe, &files, server_core, &load)?;

        // The same client against secrelay's DTLS server (full handshakes; no resumption in
        // the engine), for TLS and DTLS side by side.
        ctx.step("secrelay's DTLS server");
        let dtls = dtls_run(&exe, server_core, &load)?;
        ctx.done();

        // Memory per half-open handshake, each server alone on its core.
        ctx.step("memory per half-open handshake");
        let n_half = if quick { 200 } else { 1000 };
        let memory = memory_rows(&exe, &files[0], server_core, n_half)?;
        ctx.done();
        pin_self(None);

        // Instructions per handshake under callgrind, and the floors' instructions.
        ctx.step("instructions per handshake (callgrind)");
        let n_counted = if quick { 40 } else { 200 };
        let mut instructions: BTreeMap<&'static str, Result<f64, String>> = BTreeMap::new();
        for kind in servers {
            let r = match tls_servers::unavailable(kind) {
                Some(why) => Err(why),
                None => instructions_per_handshake(kind, &exe, &files[0], n_counted),
            };
            instructions.insert(kind.name(), r);
        }
        let floor_instr = ctx.count_instructions();
        ctx.done();

        // What a handshake puts on the wire, in memory.
        ctx.step("bytes and packets per flight");
        let wire = wire_table(&ca, quick)?;
        ctx.done();

        // secrelay's TLS stack alone (rustls with the gateway's configuration, over memory):
        // what the server does per handshake without sockets or a runtime.
        ctx.step("secrelay's TLS stack in memory");
        pin_self(server_core);
        let stack = stack_rows(&ca, quick)?;
        pin_self(None);
        ctx.done();

        // Tables.
        let rates = rates_table(&runs);
        let (ratio_t, ratio_notes) = ratios_table(&runs);
        notes.extend(ratio_notes);
        let mut floor_t = floor_table(&runs, &floor_us, &instructions, &floor_instr, &dtls);
        notes.extend(push_stack_rows(&mut floor_t, &stack, &floor_us));
        let side = side_by_side(&runs, &dtls, &floor_us);
        let mem_t = memory_table(&memory, n_half);
        for (name, why) in &unavailable {
            notes.push(format!("{name}: {why}"));
        }
        notes.push(setup_note(server_core, client_core, &load));
        notes.push(
            "openssl s_server serves one connection at a time: the other connections in flight wait in its accept queue, so its latency is mostly queueing; its rate per CPU-second is the figure to read.".into(),
        );
        let plots = plots(&runs);
        let instr_note = match &floor_instr {
            Ok(_) => format!("servers' instructions per full TLS 1.3 handshake (P-256) counted under valgrind's callgrind over {n_counted} handshakes after a warm-up (callgrind_control zero and dump); floors per op in a child under callgrind"),
            Err(e) => e.clone(),
        };
        Ok(StudyReport {
            study: self.name().into(),
            title: self.title().into(),
            seeds: vec!["001_…".into(), "004_…".into()],
            method: ctx.method(
                "Each row: the load tool (rustls on aws-lc-rs, one thread) against one server process, in turns interleaved with the other servers' (rounds, each in another order), handshakes/s sampled every second \
                 (tls-perf's max / avg / 95th percentile / min), latency from connect() to the client's end of the handshake, the server's CPU time \
                 (user + system, from /proc) over the same window; the server's own counters read before and after. Crypto floors: the public-key \
                 operations one server-side handshake needs, timed in this process on the servers' core (median of runs).",
                instr_note,
            ),
            tables: vec![rates, ratio_t, floor_t, side, wire, mem_t],
            plots,
            notes,
        })
    }
}

/// secrelay's TLS stack alone (in memory) in the floor table, scenario by scenario, against
/// its crypto floor; the note on the full TLS 1.3 handshake with P-256 against its target.
fn push_stack_rows(
    floor_t: &mut Table,
    stack: &[(String, f64)],
    floor_us: &BTreeMap<String, f64>,
) -> Option<String> {
    let mut note = None;
    for (scenario, us) in stack {
        let (cert, version, resume) = scenario_parts(scenario);
        let parts = floor_parts(cert, version, resume);
        let floor = floor_of(floor_us, "aws-lc-rs", &parts);
        let none = parts.is_empty();
        floor_t.push([
            (
                "server",
                Cell::text("secrelay's TLS stack alone (rustls, in memory)"),
            ),
            ("scenario", Cell::text(scenario.clone())),
            (
                "floor_ops",
                Cell::text(if none {
                    "none (symmetric crypto only)".to_string()
                } else {
                    format!("aws-lc-rs: {}", parts.join(" + "))
                }),
            ),
            ("server_us", Cell::num(*us)),
            ("floor_us", Cell::num(if none { 0.0 } else { floor })),
            ("rest_us", Cell::num(us - if none { 0.0 } else { floor })),
            (
                "ratio",
                if none {
                    Cell::not_offered("not applicable: no public-key operation")
                } else {
                    ratio(*us, floor)
                },
            ),
            (
                "instr",
                Cell::not_offered("not applicable: timed, not counted"),
            ),
            ("floor_instr", Cell::not_offered("not applicable")),
            ("instr_ratio", Cell::not_offered("not applicable")),
        ]);
        if scenario == "TLS 1.3 full ecdsa-p256" {
            note = Some(format!(
                "secrelay's TLS stack alone (rustls + aws-lc-rs, the gateway's configuration, in memory): {us:.0} µs of server time per full TLS 1.3 handshake = {:.2}× its crypto floor ({floor:.0} µs; target ≤ 1.3×: {}); the whole server over TCP: see the rows above.",
                us / floor,
                if us / floor <= 1.3 { "met" } else { "NOT met" }
            ));
        }
    }
    note
}

/// How the load ran: the cores, connections, turns, warm-up, the client's settings and the
/// versions of OpenSSL and nginx.
fn setup_note(server_core: Option<usize>, client_core: Option<usize>, load: &Load) -> String {
    format!(
        "Cores: servers pinned to {}, the load tool's thread to {} (taskset / sched_setaffinity); {} connections in flight, one client thread; each row is {} turns of {:.2} s, the servers taking turns in a different order each round, after a {:.1} s warm-up per server; X25519 offered (P-256 listed too). The client does not verify certificates (tls-perf's practice; a verifying client spends an ECDSA verify per handshake). {}; nginx {}.",
        server_core.map_or("any core".into(), |c| format!("core {c}")),
        client_core.map_or("any core".into(), |c| format!("core {c}")),
        load.connections,
        load.rounds,
        load.duration.as_secs_f64(),
        load.warmup.as_secs_f64(),
        openssl::version::version(),
        nginx_version().unwrap_or_else(|| "not installed".into()),
    )
}

/// The load's settings at the study's pace: rounds, each turn's and warm-up's length, the
/// connections in flight, the client's core.
fn load_settings(ctx: &Ctx, client_core: Option<usize>) -> Load {
    // (rounds, seconds of each turn, seconds of its warm-up)
    let (rounds, secs, warmup) = match ctx.pace() {
        Pace::Full => (4, 1.25, 1.0),
        Pace::Quick => (2, 0.75, 0.5),
        Pace::Smoke => (1, 0.3, 0.2),
    };
    Load {
        rounds,
        duration: Duration::from_secs_f64(secs),
        warmup: Duration::from_secs_f64(warmup),
        connections: if ctx.quick() { 8 } else { 32 },
        client_core,
    }
}

/// The crypto floors (µs per operation), on the servers' core while nothing else runs there.
fn crypto_floors(ctx: &Ctx, server_core: Option<usize>) -> anyhow::Result<BTreeMap<String, f64>> {
    pin_self(server_core);
    let mut floor_ns = BTreeMap::new();
    for (id, mut op) in floor_ops()? {
        floor_ns.insert(id, cpu_ns_per_op(&mut op, ctx.pace()));
    }
    Ok(floor_ns.iter().map(|(k, v)| (k.clone(), v / 1e3)).collect())
}

/// `TLS 1.3 full ecdsa-p256` → its parts.
fn scenario_parts(s: &str) -> (&str, TlsVersion, bool) {
    let v = if s.starts_with("TLS 1.2") {
        TlsVersion::Tls12
    } else {
        TlsVersion::Tls13
    };
    (s.rsplit(' ').next().unwrap_or(""), v, s.contains("resumed"))
}

/// Server-side µs per handshake of secrelay's TLS stack over memory, by scenario.
fn stack_rows(ca: &CaDir, quick: bool) -> anyhow::Result<Vec<(String, f64)>> {
    let cert = issue_certificate_for(
        ca.certificate(),
        &["localhost"],
        Role::Server,
        KeyType::EcdsaP256,
    )?;
    let server = flights::secrelay_server_config(&cert).map_err(|e| anyhow::anyhow!(e))?;
    let n = if quick { 100 } else { 1000 };
    let mut out = Vec::new();
    for (version, suite) in [
        (TlsVersion::Tls13, "TLS13_AES_128_GCM_SHA256"),
        (TlsVersion::Tls12, "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"),
    ] {
        let resuming = flights::tls_client(ca.certificate().der(), version, suite, "x25519")?;
        let mut fresh = (*resuming).clone();
        fresh.resumption = rustls::client::Resumption::disabled();
        let fresh = Arc::new(fresh);
        for (client, resume) in [(&fresh, false), (&resuming, true)] {
            let ns = flights::tls_server_ns(&server, client, n, resume)
                .map_err(|e| anyhow::anyhow!("TLS {} in memory: {e}", version.name()))?;
            out.push((
                format!(
                    "TLS {} {} ecdsa-p256",
                    version.name(),
                    if resume { "resumed" } else { "full" }
                ),
                ns / 1e3,
            ));
        }
    }
    Ok(out)
}

fn nginx_version() -> Option<String> {
    let bin = tls_servers::nginx_binary()?;
    let o = Command::new(bin).arg("-v").output().ok()?;
    let text = String::from_utf8_lossy(&o.stderr).into_owned();
    text.split('/').nth(1).map(|v| v.trim().to_string())
}

fn rates_table(runs: &[Run]) -> Table {
    let mut t = Table::new(
        "tls_rates",
        "TLS handshakes per second and latency, one core per server (same client, same certificates)",
    )
    .col("server", "server")
    .col("scenario", "handshakes")
    .col_unit("max", "max", "/s")
    .col_unit("avg", "avg", "/s")
    .col_unit("p95", "95P", "/s")
    .col_unit("min", "min", "/s")
    .col_unit("p50_ms", "latency p50", "ms")
    .col_unit("p95_ms", "p95", "ms")
    .col_unit("p99_ms", "p99", "ms")
    .col_unit("per_cpu_s", "per server CPU-second", "/s")
    .col_unit("server_us", "server CPU per handshake", "µs")
    .col_unit("client_us", "client CPU per handshake", "µs")
    .col_unit("resumed_pct", "resumed", "%")
    .col("failed", "failed")
    .col("counted", "server's count matches");
    for r in runs {
        let rep = &r.report;
        t.push([
            ("server", Cell::text(r.server.name())),
            ("scenario", Cell::text(r.scenario())),
            ("max", Cell::num(rep.handshakes_per_s.max)),
            ("avg", Cell::num(rep.handshakes_per_s.avg)),
            ("p95", Cell::num(rep.handshakes_per_s.p95)),
            ("min", Cell::num(rep.handshakes_per_s.min)),
            ("p50_ms", Cell::num(rep.latency_ms.p50)),
            ("p95_ms", Cell::num(rep.latency_ms.p95)),
            ("p99_ms", Cell::num(rep.latency_ms.p99)),
            ("per_cpu_s", Cell::num(r.per_cpu_s())),
            ("server_us", Cell::num(r.cpu_us())),
            (
                "client_us",
                Cell::num(rep.client_cpu_s * 1e6 / rep.completed.max(1) as f64),
            ),
            (
                "resumed_pct",
                Cell::num(rep.resumed as f64 * 100.0 / rep.completed.max(1) as f64),
            ),
            ("failed", Cell::num(rep.failed as f64)),
            ("counted", r.counts_match()),
        ]);
    }
    t
}

/// The scenarios of the runs, each once, in the order they ran.
fn unique_scenarios(runs: &[Run]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for r in runs {
        let sc = r.scenario();
        if !out.contains(&sc) {
            out.push(sc);
        }
    }
    out
}

fn find<'a>(runs: &'a [Run], server: ServerKind, scenario: &str) -> Option<&'a Run> {
    runs.iter()
        .find(|r| r.server == server && r.scenario() == scenario)
}

fn ratios_table(runs: &[Run]) -> (Table, Vec<String>) {
    let mut t = Table::new(
        "tls_ratios",
        "secrelay ÷ peer, same run (target for TLS 1.3 full, P-256: ≥ 2× nginx's handshakes/s, ≤ ½ its p95 latency; resumptions ≥ 2×)",
    )
    .col("scenario", "handshakes")
    .col("peer", "peer")
    .col_unit("rate", "handshakes/s (avg)", "×")
    .col_unit("p95_rate", "95P handshakes/s", "×")
    .col_unit("per_cpu", "per server CPU-second", "×")
    .col_unit("p95_latency", "p95 latency", "×");
    let mut notes = Vec::new();
    let scenarios = unique_scenarios(runs);
    for sc in &scenarios {
        let Some(ours) = find(runs, ServerKind::Secrelay, sc) else {
            continue;
        };
        for peer in [ServerKind::Nginx, ServerKind::SServer] {
            let Some(p) = find(runs, peer, sc) else {
                continue;
            };
            t.push([
                ("scenario", Cell::text(sc.clone())),
                ("peer", Cell::text(peer.name())),
                (
                    "rate",
                    ratio(
                        ours.report.handshakes_per_s.avg,
                        p.report.handshakes_per_s.avg,
                    ),
                ),
                (
                    "p95_rate",
                    ratio(
                        ours.report.handshakes_per_s.p95,
                        p.report.handshakes_per_s.p95,
                    ),
                ),
                ("per_cpu", ratio(ours.per_cpu_s(), p.per_cpu_s())),
                (
                    "p95_latency",
                    ratio(ours.report.latency_ms.p95, p.report.latency_ms.p95),
                ),
            ]);
            if peer == ServerKind::Nginx && sc.ends_with("ecdsa-p256") && sc.starts_with("TLS 1.3")
            {
                let rate = ours.report.handshakes_per_s.avg / p.report.handshakes_per_s.avg;
                let cpu = ours.per_cpu_s() / p.per_cpu_s();
                let lat = ours.report.latency_ms.p95 / p.report.latency_ms.p95;
                let (target, met) = if sc.contains("resumed") {
                    ("≥ 2×", rate >= 2.0)
                } else {
                    ("≥ 2× and p95 ≤ ½", rate >= 2.0 && lat <= 0.5)
                };
                notes.push(format!(
                    "{sc}: secrelay {:.0}/s vs nginx {:.0}/s = {rate:.2}× per wall second, {cpu:.2}× per server CPU-second, p95 latency {lat:.2}× (target {target}: {}).",
                    ours.report.handshakes_per_s.avg,
                    p.report.handshakes_per_s.avg,
                    if met { "met" } else { "NOT met" }
                ));
            }
        }
    }
    (t, notes)
}

fn floor_table(
    runs: &[Run],
    floor_us: &BTreeMap<String, f64>,
    instructions: &BTreeMap<&'static str, Result<f64, String>>,
    floor_instr: &Result<BTreeMap<String, f64>, String>,
    dtls: &(super::load::LoadReport, f64, u64),
) -> Table {
    let mut t = Table::new(
        "tls_floor",
        "Where a server's time goes per handshake: its CPU per handshake against the public-key crypto it must do (its own library, measured in the same run)",
    )
    .col("server", "server")
    .col("scenario", "handshakes")
    .col("floor_ops", "crypto floor")
    .col_unit("server_us", "server CPU", "µs")
    .col_unit("floor_us", "crypto floor", "µs")
    .col_unit("rest_us", "everything else", "µs")
    .col_unit("ratio", "server ÷ floor", "×")
    .col_unit("instr", "instructions (user space)", "")
    .col_unit("floor_instr", "floor instructions", "")
    .col_unit("instr_ratio", "instructions ÷ floor", "×");
    for r in runs {
        let lib = library(r.server);
        let parts = floor_parts(&r.cert, r.version, r.resume);
        let floor = floor_of(floor_us, lib, &parts);
        let server_us = r.cpu_us();
        let counted = r.scenario() == "TLS 1.3 full ecdsa-p256";
        let instr = if counted {
            match instructions.get(r.server.name()) {
                Some(Ok(v)) => Cell::num(*v),
                Some(Err(e)) => Cell::not_offered(e.clone()),
                None => Cell::not_offered("not counted"),
            }
        } else {
            Cell::not_offered("not applicable: counted for TLS 1.3 full P-256 only")
        };
        let fi = match (counted, floor_instr) {
            (true, Ok(m)) => {
                let v: f64 = parts
                    .iter()
                    .map(|p| {
                        m.get(&format!("floor/{lib}/{p}"))
                            .copied()
                            .unwrap_or(f64::NAN)
                    })
                    .sum();
                Cell::num(v)
            }
            (true, Err(e)) => Cell::not_offered(e.clone()),
            (false, _) => Cell::not_offered("not applicable: counted for TLS 1.3 full P-256 only"),
        };
        let ir = match (instr.as_f64(), fi.as_f64()) {
            (Some(a), Some(b)) => ratio(a, b),
            _ => Cell::not_offered("not counted"),
        };
        t.push([
            ("server", Cell::text(r.server.name())),
            ("scenario", Cell::text(r.scenario())),
            (
                "floor_ops",
                Cell::text(if parts.is_empty() {
                    "none (symmetric crypto only)".to_string()
                } else {
                    format!("{lib}: {}", parts.join(" + "))
                }),
            ),
            ("server_us", Cell::num(server_us)),
            (
                "floor_us",
                if parts.is_empty() {
                    Cell::num(0.0)
                } else {
                    Cell::num(floor)
                },
            ),
            (
                "rest_us",
                Cell::num(server_us - if parts.is_empty() { 0.0 } else { floor }),
            ),
            (
                "ratio",
                if parts.is_empty() {
                    Cell::not_offered("not applicable: no public-key operation")
                } else {
                    ratio(server_us, floor)
                },
            ),
            ("instr", instr),
            ("floor_instr", fi),
            ("instr_ratio", ir),
        ]);
    }
    let (report, cpu, _) = dtls;
    let dtls_us = cpu * 1e6 / report.completed.max(1) as f64;
    // The DTLS server signs, verifies the client's certificate signature, and does the key
    // exchange: its floor has a verify more than TLS's.
    let floor = floor_of(floor_us, "aws-lc-rs", &["sign-p256", "x25519"]);
    t.push([
        ("server", Cell::text(ServerKind::SecrelayDtls.name())),
        ("scenario", Cell::text("DTLS 1.2 full ecdsa-p256 (mutual)")),
        (
            "floor_ops",
            Cell::text("aws-lc-rs: sign-p256 + x25519 (+ the client certificate's verify, not in this floor)"),
        ),
        ("server_us", Cell::num(dtls_us)),
        ("floor_us", Cell::num(floor)),
        ("rest_us", Cell::num(dtls_us - floor)),
        ("ratio", ratio(dtls_us, floor)),
        ("instr", Cell::not_offered("not counted for DTLS here (lab handshake --in-memory counts it)")),
        ("floor_instr", Cell::not_offered("not counted")),
        ("instr_ratio", Cell::not_offered("not counted")),
    ]);
    t
}

fn side_by_side(
    runs: &[Run],
    dtls: &(super::load::LoadReport, f64, u64),
    floor_us: &BTreeMap<String, f64>,
) -> Table {
    let mut t = Table::new(
        "tls_beside_dtls",
        "The same client against secrelay's HTTPS server and its DTLS-SRTP server (ECDSA P-256, X25519, full handshakes)",
    )
    .col("server", "server")
    .col("protocol", "protocol")
    .col_unit("avg", "handshakes/s (avg)", "/s")
    .col_unit("p95", "95P", "/s")
    .col_unit("p50_ms", "latency p50", "ms")
    .col_unit("p95_ms", "p95", "ms")
    .col_unit("server_us", "server CPU per handshake", "µs")
    .col_unit("per_cpu_s", "per server CPU-second", "/s")
    .col("counted", "server's count")
    .col_unit("floor_us", "crypto floor (sign + X25519)", "µs");
    let floor = floor_of(floor_us, "aws-lc-rs", &["sign-p256", "x25519"]);
    if let Some(r) = find(runs, ServerKind::Secrelay, "TLS 1.3 full ecdsa-p256") {
        t.push([
            ("server", Cell::text("secrelay HTTPS")),
            (
                "protocol",
                Cell::text("TLS 1.3 over TCP, server certificate only"),
            ),
            ("avg", Cell::num(r.report.handshakes_per_s.avg)),
            ("p95", Cell::num(r.report.handshakes_per_s.p95)),
            ("p50_ms", Cell::num(r.report.latency_ms.p50)),
            ("p95_ms", Cell::num(r.report.latency_ms.p95)),
            ("server_us", Cell::num(r.cpu_us())),
            ("per_cpu_s", Cell::num(r.per_cpu_s())),
            ("counted", r.counts_match()),
            ("floor_us", Cell::num(floor)),
        ]);
    }
    let (report, cpu, counted) = dtls;
    t.push([
        ("server", Cell::text("secrelay DTLS (lab handshake-server)")),
        (
            "protocol",
            Cell::text("DTLS 1.2 over UDP, mutual certificates, use_srtp, cookie exchange"),
        ),
        ("avg", Cell::num(report.handshakes_per_s.avg)),
        ("p95", Cell::num(report.handshakes_per_s.p95)),
        ("p50_ms", Cell::num(report.latency_ms.p50)),
        ("p95_ms", Cell::num(report.latency_ms.p95)),
        (
            "server_us",
            Cell::num(cpu * 1e6 / report.completed.max(1) as f64),
        ),
        ("per_cpu_s", Cell::num(report.completed as f64 / cpu)),
        (
            "counted",
            // The DTLS load tool leaves the handshakes in flight at the end unfinished; the
            // server may have finished some of them.
            Cell::text(
                if (report.completed..=report.completed + report.unfinished_at_end)
                    .contains(counted)
                {
                    format!(
                        "yes ({counted}; client {} + {} left in flight)",
                        report.completed, report.unfinished_at_end
                    )
                } else {
                    format!(
                        "NO: server {counted}, client {} + {} left in flight",
                        report.completed, report.unfinished_at_end
                    )
                },
            ),
        ),
        ("floor_us", Cell::num(floor)),
    ]);
    t
}

fn memory_table(memory: &[MemoryRow], n: usize) -> Table {
    let mut t = Table::new(
        "half_open_memory",
        format!("Server memory per handshake held half-open ({n} clients that send their first flight and then nothing; the server's resident memory while they wait, less before, ÷ those it answered)"),
    )
    .col("server", "server")
    .col_unit("kib", "per half-open handshake", "KiB")
    .col("answered", "answered");
    for (name, r) in memory {
        match r {
            Ok((kib, answered)) if *answered > 1 => t.push([
                ("server", Cell::text(name.clone())),
                ("kib", Cell::num(kib.max(0.0))),
                ("answered", Cell::num(*answered as f64)),
            ]),
            Ok((_, answered)) => t.push([
                ("server", Cell::text(name.clone())),
                (
                    "kib",
                    Cell::not_offered(
                        "not applicable: it answers one connection at a time; the others wait in the kernel's accept queue",
                    ),
                ),
                ("answered", Cell::num(*answered as f64)),
            ]),
            Err(e) => t.push([
                ("server", Cell::text(name.clone())),
                ("kib", Cell::not_offered(e.clone())),
                ("answered", Cell::not_offered(e.clone())),
            ]),
        }
    }
    t
}

fn wire_table(ca: &CaDir, quick: bool) -> anyhow::Result<Table> {
    let mtu = 1500;
    let mut t = Table::new(
        "wire",
        format!("Bytes on the wire per handshake and per flight, and packets per flight at MTU {mtu} (TCP segments at MSS {} for TLS; DTLS datagrams at the endpoint's MTU {})", flights::mss(mtu), secrelay_dtls::endpoint::DEFAULT_MTU),
    )
    .col("protocol", "protocol")
    .col("suite", "suite")
    .col("cert", "certificate")
    .col("kind", "handshake")
    .col_unit("client_bytes", "client → server", "B")
    .col_unit("server_bytes", "server → client", "B")
    .col("flights", "flights: bytes (packets)");
    let types: &[KeyType] = if quick {
        &[KeyType::EcdsaP256, KeyType::Rsa2048]
    } else {
        &[
            KeyType::EcdsaP256,
            KeyType::EcdsaP384,
            KeyType::Rsa2048,
            KeyType::Rsa3072,
        ]
    };
    for kt in types {
        let cert = issue_certificate_for(ca.certificate(), &["localhost"], Role::Server, *kt)?;
        let server = flights::secrelay_server_config(&cert).map_err(|e| anyhow::anyhow!(e))?;
        let suites13 = [
            "TLS13_AES_128_GCM_SHA256",
            "TLS13_AES_256_GCM_SHA384",
            "TLS13_CHACHA20_POLY1305_SHA256",
        ];
        let sig = if kt.is_rsa() { "RSA" } else { "ECDSA" };
        let suites12 = [
            format!("TLS_ECDHE_{sig}_WITH_AES_128_GCM_SHA256"),
            format!("TLS_ECDHE_{sig}_WITH_AES_256_GCM_SHA384"),
        ];
        let mut cases: Vec<(TlsVersion, String, &str)> = Vec::new();
        for s in suites13.iter().take(if quick { 1 } else { 3 }) {
            cases.push((TlsVersion::Tls13, s.to_string(), "x25519"));
        }
        if !quick {
            cases.push((TlsVersion::Tls13, suites13[0].to_string(), "secp256r1"));
            cases.push((TlsVersion::Tls13, suites13[0].to_string(), "x25519mlkem768"));
        }
        for s in suites12.iter().take(if quick { 1 } else { 2 }) {
            cases.push((TlsVersion::Tls12, s.clone(), "x25519"));
        }
        for (version, suite, group) in cases {
            let client = flights::tls_client(ca.certificate().der(), version, &suite, group)?;
            for kind in ["full", "resumed"] {
                let (resumed, f) = flights::tls_handshake(&server, &client, mtu)
                    .map_err(|e| anyhow::anyhow!("{suite} {group} with {kt}: {e}"))?;
                if (kind == "resumed") != resumed {
                    bail!("{suite} {group} with {kt}: expected a {kind} handshake");
                }
                t.push([
                    ("protocol", Cell::text(format!("TLS {}", version.name()))),
                    ("suite", Cell::text(format!("{suite} + {group}"))),
                    ("cert", Cell::text(kt.name())),
                    ("kind", Cell::text(kind)),
                    ("client_bytes", Cell::num(f.client_bytes() as f64)),
                    ("server_bytes", Cell::num(f.server_bytes() as f64)),
                    ("flights", Cell::text(f.describe())),
                ]);
            }
        }
    }
    // DTLS 1.2, mutual certificates (both ends of the same type), one full handshake each.
    let dtls_cases: Vec<(KeyType, CipherSuite)> = if quick {
        vec![(KeyType::EcdsaP256, CipherSuite::EcdheEcdsaAes128GcmSha256)]
    } else {
        vec![
            (KeyType::EcdsaP256, CipherSuite::EcdheEcdsaAes128GcmSha256),
            (KeyType::EcdsaP256, CipherSuite::EcdheEcdsaAes256GcmSha384),
            (KeyType::EcdsaP384, CipherSuite::EcdheEcdsaAes128GcmSha256),
            (KeyType::Rsa2048, CipherSuite::EcdheRsaAes128GcmSha256),
        ]
    };
    for (kt, suite) in dtls_cases {
        let a = Certificate::self_signed(kt, "client")?;
        let b = Certificate::self_signed(kt, "server")?;
        let f = flights::dtls_handshake(
            &a,
            &b,
            suite,
            EcdheGroup::X25519,
            secrelay_dtls::endpoint::DEFAULT_MTU,
        )
        .map_err(|e| anyhow::anyhow!("DTLS {} with {kt}: {e}", suite.openssl_name()))?;
        t.push([
            (
                "protocol",
                Cell::text("DTLS 1.2 (mutual, use_srtp, cookie)"),
            ),
            (
                "suite",
                Cell::text(format!("{} + x25519", suite.openssl_name())),
            ),
            ("cert", Cell::text(kt.name())),
            ("kind", Cell::text("full")),
            ("client_bytes", Cell::num(f.client_bytes() as f64)),
            ("server_bytes", Cell::num(f.server_bytes() as f64)),
            ("flights", Cell::text(f.describe())),
        ]);
    }
    Ok(t)
}

fn plots(runs: &[Run]) -> Vec<Plot> {
    let scenarios = unique_scenarios(runs);
    let series = |f: &dyn Fn(&Run) -> f64| -> Vec<Series> {
        [ServerKind::Secrelay, ServerKind::Nginx, ServerKind::SServer]
            .iter()
            .filter_map(|k| {
                let points: Vec<(f64, f64)> = scenarios
                    .iter()
                    .enumerate()
                    .filter_map(|(i, sc)| find(runs, *k, sc).map(|r| (i as f64, f(r))))
                    .filter(|(_, y)| y.is_finite())
                    .collect();
                (!points.is_empty()).then(|| Series {
                    name: k.name().into(),
                    points,
                })
            })
            .collect()
    };
    vec![
        Plot {
            id: "tls_handshakes_per_s".into(),
            title: "TLS handshakes per second (avg), one core per server".into(),
            kind: PlotKind::Bars,
            x_label: "handshakes".into(),
            y_label: "handshakes/s".into(),
            log_y: false,
            categories: scenarios.clone(),
            series: series(&|r| r.report.handshakes_per_s.avg),
        },
        Plot {
            id: "tls_handshakes_per_cpu_s".into(),
            title: "TLS handshakes per server CPU-second".into(),
            kind: PlotKind::Bars,
            x_label: "handshakes".into(),
            y_label: "handshakes per CPU-second".into(),
            log_y: false,
            categories: scenarios.clone(),
            series: series(&|r| r.per_cpu_s()),
        },
        Plot {
            id: "tls_p95_latency".into(),
            title: "TLS handshake latency, 95th percentile".into(),
            kind: PlotKind::Bars,
            x_label: "handshakes".into(),
            y_label: "ms".into(),
            log_y: true,
            categories: scenarios.clone(),
            series: series(&|r| r.report.latency_ms.p95),
        },
    ]
}
