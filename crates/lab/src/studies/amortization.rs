//! `lab amortization` (`000_…`): what one certificate key generation and one signature cost,
//! expressed as SRTP packets and seconds of media. The seed's question: moving a WebRTC
//! endpoint from RSA to ECDSA certificates, how many audio or video packets does each call's
//! key generation and handshake signature "cost"?
//!
//! Everything is measured in this run: key generation and signing (RSA-2048, RSA-3072,
//! ECDSA P-256) with aws-lc-rs and OpenSSL, and protecting one AES_CM_128_HMAC_SHA1_80
//! audio (172 B) and video (1200 B) packet with secrelay and with libsrtp. Both wall time and,
//! where valgrind is present, instructions (the seed's measure).

use std::collections::BTreeMap;
use std::hint::black_box;

use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::rsa::{KeyPair as RsaKeyPair, KeySize};
use aws_lc_rs::signature::{EcdsaKeyPair, ECDSA_P256_SHA256_ASN1_SIGNING, RSA_PKCS1_SHA256};
use openssl::ec::{EcGroup, EcKey};
use openssl::hash::MessageDigest;
use openssl::nid::Nid;
use openssl::pkey::{PKey, Private};
use openssl::rsa::Rsa;
use openssl::sign::Signer;
use secrelay_srtp::Profile;

use super::srtp::{self as srtp_study, Chunk};
use crate::count::CountedOp;
use crate::frame::{Cell, Plot, PlotKind, Series, StudyReport, Table};
use crate::{Ctx, Study};

/// Audio: G.711 20 ms packets, 50 per second.
const AUDIO_PPS: f64 = 50.0;
/// Video: 500 kbit/s in 1200-byte packets.
const VIDEO_PPS: f64 = 500_000.0 / 8.0 / 1200.0;
/// The message signed (a handshake's signed parameters are about this long).
const MESSAGE: &[u8] = &[0x5a; 100];

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Alg {
    Rsa2048,
    Rsa3072,
    P256,
}

impl Alg {
    const ALL: [Alg; 3] = [Alg::Rsa2048, Alg::Rsa3072, Alg::P256];
    fn name(self) -> &'static str {
        match self {
            Alg::Rsa2048 => "RSA-2048",
            Alg::Rsa3072 => "RSA-3072",
            Alg::P256 => "ECDSA P-256",
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Lib {
    AwsLc,
    OpenSsl,
}

impl Lib {
    const ALL: [Lib; 2] = [Lib::AwsLc, Lib::OpenSsl];
    fn name(self) -> &'static str {
        match self {
            Lib::AwsLc => "aws-lc-rs",
            Lib::OpenSsl => "OpenSSL",
        }
    }
}

/// A signing key of either library.
enum Key {
    AwsRsa(RsaKeyPair),
    AwsEc(EcdsaKeyPair),
    Ossl(PKey<Private>),
}

fn keygen(lib: Lib, alg: Alg) -> Key {
    match (lib, alg) {
        (Lib::AwsLc, Alg::Rsa2048) => {
            Key::AwsRsa(RsaKeyPair::generate(KeySize::Rsa2048).expect("aws-lc RSA-2048 keygen"))
        }
        (Lib::AwsLc, Alg::Rsa3072) => {
            Key::AwsRsa(RsaKeyPair::generate(KeySize::Rsa3072).expect("aws-lc RSA-3072 keygen"))
        }
        (Lib::AwsLc, Alg::P256) => Key::AwsEc(
            EcdsaKeyPair::generate(&ECDSA_P256_SHA256_ASN1_SIGNING).expect("aws-lc P-256 keygen"),
        ),
        (Lib::OpenSsl, Alg::Rsa2048 | Alg::Rsa3072) => {
            let bits = if alg == Alg::Rsa2048 { 2048 } else { 3072 };
            Key::Ossl(
                PKey::from_rsa(Rsa::generate(bits).expect("OpenSSL RSA keygen"))
                    .expect("PKey from RSA"),
            )
        }
        (Lib::OpenSsl, Alg::P256) => {
            let group = EcGroup::from_curve_name(Nid::X9_62_PRIME256V1).expect("P-256 group");
            Key::Ossl(
                PKey::from_ec_key(EcKey::generate(&group).expect("OpenSSL P-256 keygen"))
                    .expect("PKey from EC"),
            )
        }
    }
}

fn sign(key: &Key, rng: &SystemRandom, out: &mut [u8]) -> usize {
    match key {
        Key::AwsRsa(k) => {
            let n = k.public_modulus_len();
            k.sign(&RSA_PKCS1_SHA256, rng, MESSAGE, &mut out[..n])
                .expect("aws-lc RSA sign");
            n
        }
        Key::AwsEc(k) => {
            let sig = k.sign(rng, MESSAGE).expect("aws-lc ECDSA sign");
            sig.as_ref().len()
        }
        Key::Ossl(k) => {
            let mut s = Signer::new(MessageDigest::sha256(), k).expect("OpenSSL signer");
            s.update(MESSAGE).expect("OpenSSL sign update");
            s.sign(out).expect("OpenSSL sign")
        }
    }
}

fn op_id(lib: Lib, alg: Alg, what: &str) -> String {
    format!("{}|{}|{what}", lib.name(), alg.name())
}

/// The index of `cat` in the plot's categories, appending it when new.
fn category_index(categories: &mut Vec<String>, cat: String) -> usize {
    match categories.iter().position(|c| *c == cat) {
        Some(i) => i,
        None => {
            categories.push(cat);
            categories.len() - 1
        }
    }
}

/// The `lab amortization` study.
pub struct AmortizationStudy;

/// SRTP cost per packet (protect, AES_CM_128_HMAC_SHA1_80) of secrelay and libsrtp at the
/// audio and the video size: the unit everything is expressed in.
fn packet_costs(ctx: &mut Ctx) -> anyhow::Result<BTreeMap<(String, usize), f64>> {
    let mut packet_ns: BTreeMap<(String, usize), f64> = BTreeMap::new();
    let (names, makers): (Vec<String>, Vec<srtp_study::StackFactory>) =
        srtp_study::stacks(Profile::AesCm128HmacSha1_80)
            .into_iter()
            .filter(|(stack, _)| stack == "secrelay" || stack.starts_with("libsrtp"))
            .unzip();
    for size in [172usize, 1200] {
        for (stack, r) in names
            .iter()
            .zip(srtp_study::measure_all(ctx, &makers, size))
        {
            let (p, _) = r.map_err(anyhow::Error::msg)?;
            packet_ns.insert((stack.clone(), size), p.ns);
        }
    }
    Ok(packet_ns)
}

/// Each library's key generation and signature per algorithm (ns).
fn key_costs(ctx: &mut Ctx) -> Vec<(Lib, Alg, f64, f64)> {
    let rng = SystemRandom::new();
    let mut costs: Vec<(Lib, Alg, f64, f64)> = Vec::new();
    for lib in Lib::ALL {
        for alg in Alg::ALL {
            ctx.step(format!("{} {} keygen and sign", lib.name(), alg.name()));
            let runs = if alg == Alg::P256 {
                ctx.bench.runs
            } else if ctx.quick() {
                2
            } else {
                9
            };
            let kg = ctx.bench.time_runs(runs, || {
                black_box(keygen(lib, alg));
            });
            let key = keygen(lib, alg);
            let mut out = vec![0u8; 512];
            let sg = ctx.bench.time(|| {
                black_box(sign(&key, &rng, &mut out));
            });
            costs.push((lib, alg, kg.ns, sg.ns));
            ctx.done();
        }
    }
    costs
}

/// Seconds of audio per operation, by library: the plot's series (points by category).
type SecondsPlot = BTreeMap<String, Vec<(usize, f64)>>;

/// Operations' costs as packets and seconds of media: the table, and the plot's categories
/// and series (secrelay's SRTP; one call's key generation and signature together too).
fn cost_table(
    costs: &[(Lib, Alg, f64, f64)],
    packet_ns: &BTreeMap<(String, usize), f64>,
    counts: &BTreeMap<String, f64>,
) -> (Table, Vec<String>, SecondsPlot) {
    let mut table = Table::new(
        "amortization",
        "One key generation or signature, as SRTP packets and seconds of media",
    )
    .col("operation", "operation")
    .col("library", "library")
    .col("srtp_stack", "SRTP stack")
    .col_unit("cost_us", "cost", "µs")
    .col_unit("audio_packets", "= audio packets (172 B)", "packets")
    .col_unit("audio_seconds", "= audio", "s")
    .col_unit("video_packets", "= video packets (1200 B)", "packets")
    .col_unit("video_seconds", "= video (500 kbit/s)", "s")
    .col_unit("instructions", "instructions", "instr")
    .col_unit(
        "audio_packets_instr",
        "= audio packets, by instructions",
        "packets",
    );
    let mut seconds_plot: BTreeMap<String, Vec<(usize, f64)>> = BTreeMap::new();
    let mut categories = Vec::new();
    for (lib, alg, kg, sg) in costs {
        for (what, ns) in [("key generation", *kg), ("signature", *sg)] {
            let op = format!("{} {what}", alg.name());
            let what_id = if what == "signature" {
                "sign"
            } else {
                "keygen"
            };
            let instr = counts.get(&op_id(*lib, *alg, what_id)).copied();
            for stack in ["secrelay", "libsrtp 2 + OpenSSL"] {
                let (Some(a), Some(v)) = (
                    packet_ns.get(&(stack.to_string(), 172)),
                    packet_ns.get(&(stack.to_string(), 1200)),
                ) else {
                    continue;
                };
                let mut row: Vec<(&str, Cell)> = vec![
                    ("operation", Cell::text(op.clone())),
                    ("library", Cell::text(lib.name())),
                    ("srtp_stack", Cell::text(stack)),
                    ("cost_us", Cell::num(ns / 1e3)),
                    ("audio_packets", Cell::num(ns / a)),
                    ("audio_seconds", Cell::num(ns / a / AUDIO_PPS)),
                    ("video_packets", Cell::num(ns / v)),
                    ("video_seconds", Cell::num(ns / v / VIDEO_PPS)),
                ];
                if let (Some(i), Some(ia)) = (instr, counts.get(&format!("{stack}|srtp|172"))) {
                    row.push(("instructions", Cell::num(i)));
                    row.push(("audio_packets_instr", Cell::num(i / ia)));
                }
                table.push(row);
                if stack == "secrelay" {
                    let cat = format!(
                        "{} {}",
                        alg.name(),
                        if what == "signature" {
                            "sign"
                        } else {
                            "keygen"
                        }
                    );
                    let idx = category_index(&mut categories, cat);
                    seconds_plot
                        .entry(lib.name().to_string())
                        .or_default()
                        .push((idx, ns / a / AUDIO_PPS));
                }
            }
        }
    }
    // One call's certificate and handshake signature together (what moving a WebRTC
    // endpoint from RSA to ECDSA saves per call in 000's set-up).
    for (lib, alg, kg, sg) in costs {
        let Some(a) = packet_ns.get(&("secrelay".to_string(), 172)) else {
            break;
        };
        let cat = format!("{} keygen + sign", alg.name());
        let idx = category_index(&mut categories, cat);
        seconds_plot
            .entry(lib.name().to_string())
            .or_default()
            .push((idx, (kg + sg) / a / AUDIO_PPS));
    }
    (table, categories, seconds_plot)
}

impl Study for AmortizationStudy {
    fn name(&self) -> &'static str {
        "amortization"
    }
    fn title(&self) -> &'static str {
        "Key generation and signing, in SRTP packets and seconds of media (000)"
    }

    fn counted_ops(&self, pace: crate::measure::Pace) -> anyhow::Result<Vec<CountedOp>> {
        let quick = pace != crate::measure::Pace::Full;
        let mut ops = Vec::new();
        for lib in Lib::ALL {
            for alg in Alg::ALL {
                // RSA key generation time varies with the primes found: average a few
                // (one in --quick, where valgrind's slowness weighs most).
                let n = if alg == Alg::P256 {
                    16
                } else if quick {
                    1
                } else {
                    4
                };
                // Under valgrind an RSA key generation takes tens of seconds: not in --quick.
                if !(quick && alg != Alg::P256) {
                    ops.push(CountedOp::new(op_id(lib, alg, "keygen"), n, move || {
                        black_box(keygen(lib, alg));
                    }));
                }
                // The signing key is made under valgrind too: for RSA, tens of seconds that a
                // smoke run (a check that the study runs) does without.
                if pace == crate::measure::Pace::Smoke && alg != Alg::P256 {
                    continue;
                }
                let key = keygen(lib, alg);
                let rng = SystemRandom::new();
                let mut out = vec![0u8; 512];
                ops.push(CountedOp::new(op_id(lib, alg, "sign"), 8, move || {
                    black_box(sign(&key, &rng, &mut out));
                }));
            }
        }
        for (stack, make) in srtp_study::stacks(Profile::AesCm128HmacSha1_80) {
            if stack != "secrelay" && !stack.starts_with("libsrtp") {
                continue;
            }
            for size in [172usize, 1200] {
                let Ok(mut s) = make() else { continue };
                let mut c = Chunk::new(size);
                ops.push(CountedOp::new(
                    format!("{stack}|srtp|{size}"),
                    32,
                    move || {
                        c.fill_first();
                        c.protect_first(s.as_mut());
                    },
                ));
            }
        }
        Ok(ops)
    }

    fn run(&self, ctx: &mut Ctx) -> anyhow::Result<StudyReport> {
        ctx.steps((Lib::ALL.len() * Alg::ALL.len()) as u64 + 2);
        // SRTP packet costs first: the unit everything is expressed in.
        ctx.step("SRTP packet costs");
        let packet_ns = packet_costs(ctx)?;
        ctx.done();
        let costs = key_costs(ctx);
        let (counts, instructions) = match ctx.count_instructions() {
            Ok(c) => (c, if ctx.smoke() {
                "callgrind instructions of one operation (--smoke: RSA not counted; SRTP one packet); the packet-equivalents in the instruction columns divide instruction counts"
            } else if ctx.quick() {
                "callgrind instructions per operation (RSA key generation not counted in --quick; SRTP over 32 packets); the packet-equivalents in the instruction columns divide instruction counts"
            } else {
                "callgrind instructions per operation (RSA key generation averaged over 4 keys; SRTP over 32 packets); the packet-equivalents in the instruction columns divide instruction counts"
            }.to_string().to_string()),
            Err(why) => (BTreeMap::new(), why),
        };
        ctx.done();

        let (table, categories, seconds_plot) = cost_table(&costs, &packet_ns, &counts);
        let mut notes = Vec::new();
        let find =
            |lib: Lib, alg: Alg| costs.iter().find(|c| c.0 == lib && c.1 == alg).map(|c| c.2);
        if let (Some(rsa), Some(ec), Some(a)) = (
            find(Lib::AwsLc, Alg::Rsa2048),
            find(Lib::AwsLc, Alg::P256),
            packet_ns.get(&("secrelay".to_string(), 172)),
        ) {
            notes.push(format!(
                "With aws-lc-rs, one RSA-2048 key generation costs as much as protecting {:.0} audio packets ({:.1} s of a G.711 call); one P-256 key generation as much as {:.0} packets ({:.2} s): RSA key generation is {:.0}× the ECDSA one.",
                rsa / a,
                rsa / a / AUDIO_PPS,
                ec / a,
                ec / a / AUDIO_PPS,
                rsa / ec
            ));
        }
        let plot = Plot {
            id: "amortization_audio_seconds".into(),
            title: "Seconds of G.711 audio (secrelay SRTP) that one operation costs".into(),
            kind: PlotKind::Bars,
            x_label: "operation".into(),
            y_label: "seconds of audio".into(),
            log_y: true,
            categories,
            series: seconds_plot
                .into_iter()
                .map(|(name, pts)| Series {
                    name,
                    points: pts.into_iter().map(|(i, y)| (i as f64, y)).collect(),
                })
                .collect(),
        };
        let method = ctx.method(
            "key generation: one fresh key pair per operation; signature: PKCS#1 v1.5 SHA-256 (RSA) or ECDSA SHA-256 over a 100-byte message with a key made beforehand; \
             SRTP: protecting one AES_CM_128_HMAC_SHA1_80 RTP packet in place (as in lab srtp); audio = 50 packets/s, video = 500 kbit/s in 1200-byte packets",
            instructions,
        );
        Ok(StudyReport {
            study: self.name().into(),
            title: self.title().into(),
            seeds: vec!["000".into()],
            method,
            tables: vec![table],
            plots: vec![plot],
            notes,
        })
    }
}
