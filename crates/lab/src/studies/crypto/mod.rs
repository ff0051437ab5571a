//! `lab crypto` (`000_…`, `001_…`, `004_…`): the asymmetric crypto behind a DTLS handshake,
//! per algorithm and operation, in aws-lc-rs, OpenSSL and RustCrypto side by side: RSA
//! 1024–4096 (key generation, PKCS#1 v1.5 and PSS sign and verify), ECDSA on the NIST,
//! Koblitz and Brainpool curves, Ed25519 and Ed448, and key exchange on those curves and
//! X25519/X448, where an ECDHE exchange counts the ephemeral key generation (`001`'s
//! fairness point) and the bare ECDH beside it shows what that costs.

pub mod algs;
mod awslc;
pub mod mem;
mod ossl;
mod rc;

use std::cell::RefCell;
use std::collections::BTreeMap;

use crate::count::CountedOp;
use crate::frame::{Cell, Plot, PlotKind, Series, StudyReport, Table};
use crate::measure::{Pace, Timing};
use crate::{Ctx, Study};

use algs::{row_id, rows, Alg, Curve, Lib, Op, Prep};

/// RSA keys made once per study run (by OpenSSL) and imported by every library for the
/// sign and verify rows: RSA key generation takes up to seconds, and the key's origin does
/// not change what signing with it costs.
#[derive(Default)]
pub struct Keys {
    rsa: RefCell<BTreeMap<u32, Vec<u8>>>,
}

impl Keys {
    /// The PKCS#8 DER of the shared RSA key of `bits`, made on first use.
    pub fn rsa_pkcs8(&self, bits: u32) -> Result<Vec<u8>, String> {
        if let Some(k) = self.rsa.borrow().get(&bits) {
            return Ok(k.clone());
        }
        let der = openssl::rsa::Rsa::generate(bits)
            .and_then(openssl::pkey::PKey::from_rsa)
            .and_then(|k| k.private_key_to_pkcs8())
            .map_err(|e| format!("OpenSSL: generating the shared RSA-{bits} key: {e}"))?;
        self.rsa.borrow_mut().insert(bits, der.clone());
        Ok(der)
    }

    /// Writes the keys made so far into `dir` (`rsaBITS.der`), for child processes.
    pub fn save(&self, dir: &std::path::Path) -> std::io::Result<()> {
        for (bits, der) in self.rsa.borrow().iter() {
            std::fs::write(dir.join(format!("rsa{bits}.der")), der)?;
        }
        Ok(())
    }

    /// Reads the keys [`Keys::save`] wrote into `dir`.
    pub fn load(&self, dir: &std::path::Path) -> std::io::Result<()> {
        for bits in algs::RSA_BITS {
            match std::fs::read(dir.join(format!("rsa{bits}.der"))) {
                Ok(der) => {
                    self.rsa.borrow_mut().insert(bits, der);
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// The operations whose peak heap is measured: (library, algorithm, operation).
fn memory_set(quick: bool) -> Vec<(Lib, Alg, Op)> {
    let mut v = Vec::new();
    if quick {
        for lib in Lib::ALL {
            v.push((lib, Alg::Ecdsa(Curve::P256), Op::Sign));
        }
        v.push((Lib::OpenSsl, Alg::Rsa(2048), Op::Sign));
        return v;
    }
    for lib in [Lib::AwsLc, Lib::OpenSsl] {
        v.push((lib, Alg::Rsa(2048), Op::Keygen));
    }
    for lib in Lib::ALL {
        v.push((lib, Alg::Rsa(2048), Op::Sign));
        v.push((lib, Alg::Rsa(2048), Op::Verify));
        for op in [Op::Keygen, Op::Sign, Op::Verify] {
            v.push((lib, Alg::Ecdsa(Curve::P256), op));
        }
        for op in [Op::Sign, Op::Verify] {
            v.push((lib, Alg::Ecdsa(Curve::P384), op));
            v.push((lib, Alg::Ed25519, op));
        }
        for c in [Curve::P256, Curve::X25519] {
            for op in [Op::Ecdhe, Op::Ecdh] {
                v.push((lib, Alg::Kex(c), op));
            }
        }
    }
    v
}

/// Prepares one operation in one library.
pub fn prepare(lib: Lib, alg: Alg, op: Op, keys: &Keys) -> Prep {
    match lib {
        Lib::AwsLc => awslc::prepare(alg, op, keys),
        Lib::OpenSsl => ossl::prepare(alg, op, keys),
        Lib::RustCrypto => rc::prepare(alg, op, keys),
    }
}

/// Runs for slow operations (RSA key generation), or None for the calibrated default;
/// Err: not measured in this run, with the reason.
/// (`--smoke` times one key where `--quick` times a few.)
fn slow_runs(lib: Lib, alg: Alg, op: Op, pace: Pace) -> Result<Option<usize>, String> {
    let Alg::Rsa(bits) = alg else { return Ok(None) };
    if op != Op::Keygen {
        return Ok(None);
    }
    let rc = lib == Lib::RustCrypto;
    let quick = pace != Pace::Full;
    Ok(Some(match (quick, rc, bits) {
        (true, true, 3072 | 4096) | (true, false, 4096) => {
            return Err(format!(
                "not measured: skipped in --quick (RSA-{bits} key generation takes seconds per key in {}; run without --quick)",
                lib.name()
            ))
        }
        _ if pace == Pace::Smoke => 1,
        (true, true, _) => 2,
        (true, false, 1024 | 2048) => 5,
        (true, false, _) => 1,
        (false, true, 1024 | 2048) => 7,
        (false, true, _) => 3,
        (false, false, 1024 | 2048) => 21,
        (false, false, 3072) => 11,
        (false, false, _) => 7,
    }))
}

/// One measured cell.
struct Measured {
    timing: Result<Timing, String>,
    deterministic: Option<bool>,
}

fn measure(ctx: &Ctx, lib: Lib, alg: Alg, op: Op, keys: &Keys) -> Measured {
    let runs = match slow_runs(lib, alg, op, ctx.pace()) {
        Ok(r) => r,
        Err(why) => {
            return Measured {
                timing: Err(why),
                deterministic: None,
            }
        }
    };
    match prepare(lib, alg, op, keys) {
        Err(why) => Measured {
            timing: Err(why),
            deterministic: None,
        },
        Ok(mut p) => {
            let timing = match runs {
                Some(n) => ctx.bench.time_runs(n, &mut p.run),
                None => ctx.bench.time(&mut p.run),
            };
            Measured {
                timing: Ok(timing),
                deterministic: p.deterministic,
            }
        }
    }
}

/// The operations whose instructions are counted: (library, algorithm, operation, iterations).
fn counted_set(quick: bool) -> Vec<(Lib, Alg, Op, u64)> {
    let mut v = Vec::new();
    let both = [Lib::AwsLc, Lib::OpenSsl];
    if quick {
        v.push((Lib::AwsLc, Alg::Rsa(2048), Op::Keygen, 1));
        for lib in both {
            v.push((lib, Alg::Rsa(2048), Op::Sign, 2));
            v.push((lib, Alg::Rsa(2048), Op::Verify, 8));
            for op in [Op::Keygen, Op::Sign, Op::Verify] {
                v.push((lib, Alg::Ecdsa(Curve::P256), op, 8));
            }
            v.push((lib, Alg::Ed25519, Op::Sign, 8));
            v.push((lib, Alg::Kex(Curve::P256), Op::Ecdhe, 8));
            v.push((lib, Alg::Kex(Curve::X25519), Op::Ecdhe, 8));
        }
        return v;
    }
    for lib in both {
        for bits in [2048, 3072] {
            v.push((
                lib,
                Alg::Rsa(bits),
                Op::Keygen,
                if bits == 2048 { 3 } else { 1 },
            ));
            for op in [Op::Sign, Op::Verify, Op::SignPss, Op::VerifyPss] {
                v.push((lib, Alg::Rsa(bits), op, 4));
            }
        }
    }
    for lib in Lib::ALL {
        for alg in [Alg::Ecdsa(Curve::P256), Alg::Ed25519] {
            for op in [Op::Keygen, Op::Sign, Op::Verify] {
                v.push((lib, alg, op, 16));
            }
        }
        for c in [Curve::P256, Curve::X25519] {
            for op in [Op::Ecdhe, Op::Ecdh] {
                v.push((lib, Alg::Kex(c), op, 16));
            }
        }
    }
    v.push((Lib::RustCrypto, Alg::Rsa(2048), Op::Sign, 4));
    v.push((Lib::RustCrypto, Alg::Rsa(2048), Op::Verify, 4));
    v
}

fn counted_id(lib: Lib, alg: Alg, op: Op) -> String {
    format!("{}|{}", lib.key(), row_id(alg, op))
}

/// The `lab crypto` study.
pub struct CryptoStudy;

impl Study for CryptoStudy {
    fn name(&self) -> &'static str {
        "crypto"
    }
    fn title(&self) -> &'static str {
        "Asymmetric crypto per operation: RSA, ECDSA, EdDSA, ECDH(E) in aws-lc-rs, OpenSSL, RustCrypto (000, 001, 004)"
    }

    fn counted_ops(&self, pace: Pace) -> anyhow::Result<Vec<CountedOp>> {
        let quick = pace != Pace::Full;
        let keys = Keys::default();
        let mut ops = Vec::new();
        for (lib, alg, op, iters) in counted_set(quick) {
            if let Ok(mut p) = prepare(lib, alg, op, &keys) {
                ops.push(CountedOp::new(counted_id(lib, alg, op), iters, move || {
                    (p.run)()
                }));
            }
        }
        Ok(ops)
    }

    fn run(&self, ctx: &mut Ctx) -> anyhow::Result<StudyReport> {
        let rows = rows();
        ctx.steps(rows.len() as u64 + 2);
        let keys = Keys::default();
        let mut results: Vec<RowResult> = Vec::new();
        for &(alg, op) in &rows {
            ctx.step(format!("{} {}", alg.name(), op.id()));
            let cells = Lib::ALL
                .iter()
                .map(|&lib| (lib, measure(ctx, lib, alg, op, &keys)))
                .collect();
            results.push(((alg, op), cells));
            ctx.done();
        }
        let (counts, instructions_method) = match ctx.count_instructions() {
            Ok(c) => (Ok(c), "callgrind, instructions per operation (a region of 1–16 operations, the empty region subtracted), \
                 keys and inputs made outside the region; RSA key generation is one sample of a random prime search, so its count \
                 varies from key to key; under valgrind AVX-512 paths are not taken (AVX2 is)"
                .to_string()),
            Err(why) => (Err(why.clone()), why),
        };
        ctx.done();
        ctx.step("peak heap per operation under DHAT");
        let mem_set = memory_set(ctx.quick());
        let memory = match &ctx.opts.self_exe {
            None => {
                Err("not measured: the lab was not started from the secrelay binary".to_string())
            }
            Some(exe) => {
                let ids: Vec<String> = mem_set
                    .iter()
                    .filter(|&&(lib, alg, op)| {
                        results.iter().any(|(k, cells)| {
                            *k == (alg, op)
                                && cells.iter().any(|(l, m)| *l == lib && m.timing.is_ok())
                        })
                    })
                    .map(|&(lib, alg, op)| counted_id(lib, alg, op))
                    .collect();
                mem::measure(exe, &ids, &keys)
            }
        };
        ctx.done();

        let mut tables = vec![main_table(&results)];
        tables.push(instructions_table(&counts, counted_set(ctx.quick())));
        tables.push(memory_table(&memory, &mem_set, &results));
        tables.push(ratio_table(
            "crypto_verify_vs_sign",
            "Verify ÷ sign, time (004: sign vs verify per curve; below 1: verify is cheaper)",
            &results,
            |alg| matches!(alg, Alg::Rsa(_) | Alg::Ecdsa(_) | Alg::Ed25519 | Alg::Ed448),
            Op::Verify,
            Op::Sign,
        ));
        tables.push(ratio_table(
            "crypto_ecdhe_vs_ecdh",
            "ECDHE ÷ ECDH, time (001: what generating the ephemeral key adds to the exchange)",
            &results,
            |alg| matches!(alg, Alg::Kex(_)),
            Op::Ecdhe,
            Op::Ecdh,
        ));
        tables.push(nonce_table(&results));

        let plots = vec![
            bars(&results, "crypto_keygen", "Key generation", |_, o| {
                o == Op::Keygen
            }),
            bars(
                &results,
                "crypto_sign",
                "Sign (RSA: PKCS#1 v1.5)",
                |_, o| o == Op::Sign,
            ),
            bars(
                &results,
                "crypto_verify",
                "Verify (RSA: PKCS#1 v1.5)",
                |_, o| o == Op::Verify,
            ),
            bars(
                &results,
                "crypto_ecdhe",
                "ECDHE (ephemeral key generation + shared secret)",
                |_, o| o == Op::Ecdhe,
            ),
        ];

        let mut notes = notes(&results, counts.as_ref().ok());
        notes.push(memory_note(&memory));
        let method = ctx.method(
            "one operation on a 64-byte message (hashing included) or one key exchange, one thread; keys, peer public keys and the \
             signature to verify are made outside the timing, and one dry run checks each operation (signatures verify, both sides \
             of an exchange derive the same secret) before it is timed. Key generation makes a private key and its public key. \
             ECDHE = generate an ephemeral key pair + encode its public key (OpenSSL: SubjectPublicKeyInfo DER for EC, raw for \
             X25519/X448; aws-lc-rs: compute_public_key; RustCrypto: the affine point, not serialized) + compute the shared secret \
             with the peer's public key; ECDH = the shared secret only, from a static key. ECDSA hashes with SHA-256 (P-192, P-224, \
             P-256, secp256k1, brainpoolP256r1), SHA-384 (P-384, brainpoolP384r1) or SHA-512 (P-521, brainpoolP512r1); aws-lc-rs \
             and OpenSSL signatures are DER, RustCrypto's DER too (ecdsa::der::Signature). OpenSSL goes through EVP with a fresh \
             EVP_MD_CTX per signature (as a TLS stack does); RSA sign and verify rows of every library use one RSA key per size made \
             by OpenSSL and imported (PKCS#8); RSA key generation rows each make their own keys, with a fixed number of runs \
             (a run is one key; the median of a random prime search). RustCrypto rsa 0.9 signs with blinding (sign_with_rng) and \
             carries RUSTSEC-2023-0071 (Marvin timing side channel); p192 and p224 0.14 and ed448-goldilocks 0.14 are \
             pre-releases; bp256/bp384 use their default fiat-crypto field backend.",
            instructions_method,
        );
        Ok(StudyReport {
            study: self.name().into(),
            title: self.title().into(),
            seeds: vec!["000".into(), "001".into(), "004".into()],
            method,
            tables,
            plots,
            notes,
        })
    }
}

/// One row's measurements: the (algorithm, operation) and each library's cell.
type RowResult = ((Alg, Op), Vec<(Lib, Measured)>);
type Results = [RowResult];

fn main_table(results: &Results) -> Table {
    let mut t = Table::new(
        "crypto_ops",
        "Asymmetric operations, one core: median ns per operation, operations per second, and time relative to the fastest library on the row",
    )
    .col("id", "id")
    .col("algorithm", "algorithm")
    .col("operation", "operation");
    for lib in Lib::ALL {
        let k = lib.key();
        t = t
            .col_unit(&format!("{k}_ns"), &format!("{} ns/op", lib.name()), "ns")
            .col_unit(&format!("{k}_ops"), &format!("{} ops/s", lib.name()), "1/s")
            .col_unit(&format!("{k}_x"), &format!("{} × fastest", lib.name()), "×")
            .col_unit(
                &format!("{k}_spread"),
                &format!("{} spread", lib.name()),
                "%",
            );
    }
    for ((alg, op), cells) in results {
        let fastest = cells
            .iter()
            .filter_map(|(_, m)| m.timing.as_ref().ok().map(|t| t.ns))
            .fold(f64::INFINITY, f64::min);
        let mut row = row_head(*alg, *op);
        for (lib, m) in cells {
            let k = lib.key();
            match &m.timing {
                Ok(t) => {
                    row.push((format!("{k}_ns"), Cell::num(t.ns)));
                    row.push((format!("{k}_ops"), Cell::num(t.ops_per_s())));
                    row.push((format!("{k}_x"), Cell::num(t.ns / fastest)));
                    row.push((format!("{k}_spread"), Cell::num(t.spread_pct)));
                }
                Err(why) => {
                    for col in ["ns", "ops", "x"] {
                        row.push((format!("{k}_{col}"), Cell::not_offered(why.clone())));
                    }
                }
            }
        }
        t.push(row);
    }
    t
}

fn instructions_table(
    counts: &Result<BTreeMap<String, f64>, String>,
    set: Vec<(Lib, Alg, Op, u64)>,
) -> Table {
    let mut t = Table::new(
        "crypto_instructions",
        "Instructions per operation (callgrind)",
    )
    .col("id", "id")
    .col("algorithm", "algorithm")
    .col("operation", "operation");
    for lib in Lib::ALL {
        t = t.col_unit(
            &format!("{}_instr", lib.key()),
            &format!("{} instructions", lib.name()),
            "instr",
        );
    }
    for (alg, op) in distinct(set.iter().map(|&(_, a, o, _)| (a, o))) {
        let mut row = row_head(alg, op);
        for lib in Lib::ALL {
            let key = format!("{}_instr", lib.key());
            let in_set = set.iter().any(|&(l, a, o, _)| (l, a, o) == (lib, alg, op));
            let cell = match counts {
                Err(why) => Cell::not_offered(why.clone()),
                Ok(_) if !in_set => {
                    Cell::not_offered("not in this run's counted set (the full run counts more)")
                }
                Ok(c) => match c.get(&counted_id(lib, alg, op)) {
                    Some(n) => Cell::num(*n),
                    None => Cell::not_offered("not offered by this library (no counted operation)"),
                },
            };
            row.push((key, cell));
        }
        t.push(row);
    }
    t
}

fn memory_table(
    memory: &Result<BTreeMap<String, Result<mem::Heap, String>>, String>,
    set: &[(Lib, Alg, Op)],
    results: &Results,
) -> Table {
    let mut t = Table::new(
        "crypto_memory",
        "Heap per operation (valgrind DHAT): bytes live at the operation's peak, bytes and blocks it allocated",
    )
    .col("id", "id")
    .col("algorithm", "algorithm")
    .col("operation", "operation");
    for lib in Lib::ALL {
        let k = lib.key();
        t = t
            .col_unit(
                &format!("{k}_peak"),
                &format!("{} peak heap", lib.name()),
                "B",
            )
            .col_unit(
                &format!("{k}_alloc"),
                &format!("{} allocated", lib.name()),
                "B",
            )
            .col_unit(
                &format!("{k}_blocks"),
                &format!("{} allocations", lib.name()),
                "",
            );
    }
    for (alg, op) in distinct(set.iter().map(|&(_, a, o)| (a, o))) {
        let mut row = row_head(alg, op);
        for lib in Lib::ALL {
            let k = lib.key();
            let timing = results
                .iter()
                .find(|(key, _)| *key == (alg, op))
                .and_then(|(_, cells)| cells.iter().find(|(l, _)| *l == lib))
                .map(|(_, m)| &m.timing);
            let figures: Result<mem::Heap, String> = match (memory, timing) {
                (_, Some(Err(why))) => Err(why.clone()),
                (Err(why), _) => Err(why.clone()),
                (Ok(_), _) if !set.contains(&(lib, alg, op)) => {
                    Err("not in this run's measured set (the full run measures more)".into())
                }
                (Ok(m), _) => m
                    .get(&counted_id(lib, alg, op))
                    .cloned()
                    .unwrap_or_else(|| Err("not measured".into())),
            };
            match figures {
                Ok(h) => {
                    row.push((format!("{k}_peak"), Cell::num(h.peak)));
                    row.push((format!("{k}_alloc"), Cell::num(h.allocated)));
                    row.push((format!("{k}_blocks"), Cell::num(h.blocks)));
                }
                Err(why) => {
                    for col in ["peak", "alloc", "blocks"] {
                        row.push((format!("{k}_{col}"), Cell::not_offered(why.clone())));
                    }
                }
            }
        }
        t.push(row);
    }
    t
}

fn memory_note(memory: &Result<BTreeMap<String, Result<mem::Heap, String>>, String>) -> String {
    let method = "Heap per operation (valgrind DHAT, one child process per operation): bytes requested from malloc (C and Rust \
                  alike) by the operation itself and live at its peak, with the bytes and blocks it allocated; measured on the \
                  operation's second run (one-time set-up and lazily built tables are outside), excluding the keys and contexts \
                  made beforehand, the stack, malloc's own overhead and static tables";
    let Ok(m) = memory else {
        return format!(
            "{method}. {}",
            memory
                .as_ref()
                .err()
                .map(String::as_str)
                .unwrap_or_default()
        );
    };
    let p256: Vec<String> = Lib::ALL
        .iter()
        .filter_map(|&lib| {
            let h = m
                .get(&counted_id(lib, Alg::Ecdsa(Curve::P256), Op::Sign))?
                .as_ref()
                .ok()?;
            Some(format!(
                "{} {:.0} B at peak in {:.0} allocations",
                lib.name(),
                h.peak,
                h.blocks
            ))
        })
        .collect();
    if p256.is_empty() {
        format!("{method}.")
    } else {
        format!("{method}. ECDSA P-256 signing: {}.", p256.join(", "))
    }
}

fn ratio_table(
    id: &str,
    title: &str,
    results: &Results,
    pick: impl Fn(Alg) -> bool,
    num: Op,
    den: Op,
) -> Table {
    let mut t = Table::new(id, title).col("algorithm", "algorithm");
    for lib in Lib::ALL {
        t = t.col_unit(&format!("{}_ratio", lib.key()), lib.name(), "×");
    }
    let find = |alg: Alg, op: Op, lib: Lib| -> Result<f64, String> {
        let cells = &results
            .iter()
            .find(|(k, _)| *k == (alg, op))
            .ok_or("no such row")?
            .1;
        let m = &cells
            .iter()
            .find(|(l, _)| *l == lib)
            .ok_or("no such library")?
            .1;
        m.timing.as_ref().map(|t| t.ns).map_err(Clone::clone)
    };
    let mut algs: Vec<Alg> = Vec::new();
    for ((alg, _), _) in results {
        if pick(*alg) && !algs.contains(alg) {
            algs.push(*alg);
        }
    }
    for alg in algs {
        let mut row: Vec<(String, Cell)> = vec![("algorithm".into(), Cell::text(alg.name()))];
        for lib in Lib::ALL {
            let cell = match (find(alg, num, lib), find(alg, den, lib)) {
                (Ok(a), Ok(b)) => Cell::num(a / b),
                (Err(why), _) | (_, Err(why)) => Cell::not_offered(why),
            };
            row.push((format!("{}_ratio", lib.key()), cell));
        }
        t.push(row);
    }
    t
}

fn nonce_table(results: &Results) -> Table {
    let mut t = Table::new(
        "crypto_signing_nonces",
        "Deterministic or randomized signing: the same message signed twice under the same key (RFC 6979 / EdDSA: equal)",
    )
    .col("id", "id")
    .col("algorithm", "algorithm");
    for lib in Lib::ALL {
        t = t.col(&format!("{}_signing", lib.key()), lib.name());
    }
    for ((alg, op), cells) in results {
        if !matches!(op, Op::Sign | Op::SignPss) {
            continue;
        }
        let mut row: Vec<(String, Cell)> = vec![
            ("id".into(), Cell::text(row_id(*alg, *op))),
            (
                "algorithm".into(),
                Cell::text(format!("{} {}", alg.name(), op.label(*alg))),
            ),
        ];
        for (lib, m) in cells {
            let cell = match (&m.timing, m.deterministic) {
                (Err(why), _) => Cell::not_offered(why.clone()),
                (Ok(_), Some(true)) => Cell::text("deterministic"),
                (Ok(_), Some(false)) => Cell::text("randomized"),
                (Ok(_), None) => Cell::not_offered("not checked"),
            };
            row.push((format!("{}_signing", lib.key()), cell));
        }
        t.push(row);
    }
    t
}

fn bars(results: &Results, id: &str, title: &str, pick: impl Fn(Alg, Op) -> bool) -> Plot {
    let picked: Vec<&RowResult> = results.iter().filter(|((a, o), _)| pick(*a, *o)).collect();
    let categories: Vec<String> = picked.iter().map(|((a, _), _)| a.name()).collect();
    let series = Lib::ALL
        .iter()
        .map(|&lib| Series {
            name: lib.name().into(),
            points: picked
                .iter()
                .enumerate()
                .filter_map(|(i, (_, cells))| {
                    let t = cells
                        .iter()
                        .find(|(l, _)| *l == lib)?
                        .1
                        .timing
                        .as_ref()
                        .ok()?;
                    Some((i as f64, t.ops_per_s()))
                })
                .collect(),
        })
        .collect();
    Plot {
        id: id.into(),
        title: format!("{title}: operations per second per library (log scale)"),
        kind: PlotKind::Bars,
        x_label: "algorithm".into(),
        y_label: "operations per second".into(),
        log_y: true,
        categories,
        series,
    }
}

fn notes(results: &Results, counts: Option<&BTreeMap<String, f64>>) -> Vec<String> {
    let mut n = Vec::new();
    let ns = |alg: Alg, op: Op, lib: Lib| -> Option<f64> {
        let cells = &results.iter().find(|(k, _)| *k == (alg, op))?.1;
        cells
            .iter()
            .find(|(l, _)| *l == lib)?
            .1
            .timing
            .as_ref()
            .ok()
            .map(|t| t.ns)
    };
    let rsa_kg = Alg::Rsa(2048);
    let p256 = Alg::Ecdsa(Curve::P256);
    for lib in [Lib::OpenSsl, Lib::AwsLc] {
        if let (Some(r), Some(e)) = (ns(rsa_kg, Op::Keygen, lib), ns(p256, Op::Keygen, lib)) {
            let mut s = format!(
                "{}: RSA-2048 key generation takes {:.0}× the time of P-256 key generation",
                lib.name(),
                r / e
            );
            if let Some(c) = counts {
                if let (Some(ri), Some(ei)) = (
                    c.get(&counted_id(lib, rsa_kg, Op::Keygen)),
                    c.get(&counted_id(lib, p256, Op::Keygen)),
                ) {
                    s.push_str(&format!(
                        " and {:.0}× its instructions ({:.3e} vs {:.3e})",
                        ri / ei,
                        ri,
                        ei
                    ));
                }
            }
            if let (Some(rs), Some(es)) = (ns(rsa_kg, Op::Sign, lib), ns(p256, Op::Sign, lib)) {
                s.push_str(&format!(
                    "; RSA-2048 signing takes {:.1}× ECDSA P-256 signing",
                    rs / es
                ));
            }
            n.push(format!(
                "{s} (000 saw ~1680× and ~32× in cycles with OpenSSL 1.0.2)."
            ));
        }
    }
    for lib in Lib::ALL {
        let mut parts = Vec::new();
        for c in [Curve::P256, Curve::X25519] {
            if let (Some(e), Some(s)) = (
                ns(Alg::Kex(c), Op::Ecdhe, lib),
                ns(Alg::Kex(c), Op::Ecdh, lib),
            ) {
                let mut p = format!("{} ECDHE costs {:.2}× the bare ECDH", c.name(), e / s);
                if let Some(cn) = counts {
                    if let (Some(ei), Some(si)) = (
                        cn.get(&counted_id(lib, Alg::Kex(c), Op::Ecdhe)),
                        cn.get(&counted_id(lib, Alg::Kex(c), Op::Ecdh)),
                    ) {
                        p.push_str(&format!(" in time, {:.2}× in instructions", ei / si));
                    }
                }
                parts.push(p);
            }
        }
        if !parts.is_empty() {
            n.push(format!("{}: {} (the ephemeral key generation that benchmarks of the bare exchange leave out).", lib.name(), parts.join(", ")));
        }
    }
    // Sign vs verify: ECDSA verifies slower than it signs, RSA the other way round.
    let (mut slower, mut total) = (0, 0);
    for c in Curve::ECDSA {
        for lib in Lib::ALL {
            if let (Some(v), Some(s)) = (
                ns(Alg::Ecdsa(c), Op::Verify, lib),
                ns(Alg::Ecdsa(c), Op::Sign, lib),
            ) {
                total += 1;
                if v > s {
                    slower += 1;
                }
            }
        }
    }
    if total > 0 {
        let rsa = ns(Alg::Rsa(2048), Op::Sign, Lib::OpenSsl).zip(ns(
            Alg::Rsa(2048),
            Op::Verify,
            Lib::OpenSsl,
        ));
        n.push(format!(
            "ECDSA verify is slower than sign in {slower} of {total} (curve, library) pairs (004 saw the same on Cortex-M){}.",
            rsa.map(|(s, v)| format!("; RSA-2048 verify is {:.0}× faster than sign (OpenSSL)", s / v)).unwrap_or_default()
        ));
    }
    for lib in [Lib::OpenSsl, Lib::RustCrypto] {
        if let (Some(b), Some(p)) = (
            ns(Alg::Ecdsa(Curve::Bp256), Op::Sign, lib),
            ns(p256, Op::Sign, lib),
        ) {
            n.push(format!(
                "{}: brainpoolP256r1 signing takes {:.1}× P-256 signing (random primes get no special reduction; 004 saw Brainpool slower too).",
                lib.name(),
                b / p
            ));
        }
    }
    if let (Some(rc), Some(o)) = (
        ns(p256, Op::Sign, Lib::RustCrypto),
        ns(p256, Op::Sign, Lib::OpenSsl),
    ) {
        n.push(format!(
            "RustCrypto p256 signs {:.1}× slower than OpenSSL (pure Rust, no assembly).",
            rc / o
        ));
    }
    n
}

/// The (algorithm, operation) pairs in first-seen order, each once.
fn distinct(pairs: impl Iterator<Item = (Alg, Op)>) -> Vec<(Alg, Op)> {
    let mut seen: Vec<(Alg, Op)> = Vec::new();
    for p in pairs {
        if !seen.contains(&p) {
            seen.push(p);
        }
    }
    seen
}

/// The first cells of a per-operation row: id, algorithm, operation.
fn row_head(alg: Alg, op: Op) -> Vec<(String, Cell)> {
    vec![
        ("id".into(), Cell::text(row_id(alg, op))),
        ("algorithm".into(), Cell::text(alg.name())),
        ("operation".into(), Cell::text(op.label(alg))),
    ]
}
