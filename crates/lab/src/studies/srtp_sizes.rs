//! The batch engines by packet size in `lab srtp` (issue 17): every engine against the serial
//! engine at 100, 172 and 1,200 bytes and a video-like mix, every profile, protect and
//! unprotect, batches of 64 over 64 contexts (warm) and over 4,096 (cold, each batch naming 64
//! others in a scattered walk), and batches of 1,024 over 4,096 contexts (the threaded engine
//! splits those). No engine may be slower than the serial engine at any size: each row gives
//! the serial engine's time over the engine's, measured in the same interleaved runs.

use std::cell::RefCell;
use std::hint::black_box;
use std::rc::Rc;

use secrelay_srtp::batch::PacketResult;
use secrelay_srtp::{
    Context, Engine, MasterKey, Op, Packet, Policy, Profile, SerialEngine, SimdEngine,
    ThreadedEngine,
};

use crate::frame::{Cell, Plot, PlotKind, Series, Table};
use crate::measure::{Bench, Chunked};
use crate::{Ctx, Timing};

/// The sizes of a batch's RTP packets (header included).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sizes {
    /// Every packet this long.
    Fixed(usize),
    /// The video-like mix ([`Sizes::of`]).
    Video,
}

/// The packet sizes swept: Opus, G.711, a full video packet, and the video-like mix.
pub const SIZES: [Sizes; 4] = [
    Sizes::Fixed(100),
    Sizes::Fixed(172),
    Sizes::Fixed(1200),
    Sizes::Video,
];

/// (packets per batch, contexts the batches are spread over).
pub const SETUPS: [(usize, usize); 3] = [(64, 64), (64, 4096), (1024, 4096)];

impl Sizes {
    /// The row label: "100 B", …, "video mix".
    pub fn label(self) -> String {
        match self {
            Sizes::Fixed(n) => format!("{n} B"),
            Sizes::Video => "video mix".into(),
        }
    }

    /// Packet `i`'s length. The video-like mix, in a fixed pseudo-random order: of every 16
    /// packets, 12 of 1,100–1,200 bytes (an encoder's packetizer filling the path MTU), 2
    /// frame tails of 200–1,100 and 2 small ones of 60–200 (padding probes, a bundled audio
    /// stream, retransmissions of short packets); ~960 bytes on average.
    pub fn of(self, i: usize) -> usize {
        match self {
            Sizes::Fixed(n) => n,
            Sizes::Video => {
                let h = (i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                let r = (h >> 32) as usize;
                match (h >> 16) % 16 {
                    0 | 1 => 60 + r % 141,
                    2 | 3 => 200 + r % 901,
                    _ => 1100 + r % 101,
                }
            }
        }
    }
}

/// A master key of its own per context.
fn key(profile: Profile, seed: usize) -> MasterKey {
    let mut raw = vec![0u8; profile.key_len() + profile.salt_len()];
    let mut x = (seed as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    for b in &mut raw {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    MasterKey::from_concatenated(profile, &raw).expect("lengths come from the profile")
}

/// One engine's contexts, shared by its cells of every size (one context count): senders
/// (protect: the engine's; unprotect: the serial senders that make its input) and receivers.
struct Party {
    tx: Vec<Context>,
    rx: Vec<Context>,
    seqs: Vec<u16>,
    /// Packets filled so far: where the scattered walk over the contexts is.
    walked: usize,
}

impl Party {
    fn new(profile: Profile, contexts: usize, protect: bool) -> Party {
        let make = |i: usize, inbound: bool| {
            let p = Policy::new(key(profile, i));
            let p = if inbound {
                p.any_inbound()
            } else {
                p.any_outbound()
            };
            Context::new(p).expect("valid policy")
        };
        Party {
            tx: (0..contexts).map(|i| make(i, false)).collect(),
            rx: if protect {
                Vec::new()
            } else {
                (0..contexts).map(|i| make(i, true)).collect()
            },
            seqs: vec![0; contexts],
            walked: 0,
        }
    }
}

/// One measured cell: an engine, a size, a batch, its party's contexts.
struct Run {
    engine: Rc<dyn Engine>,
    party: Rc<RefCell<Party>>,
    sizes: Sizes,
    protect: bool,
    bufs: Vec<Vec<u8>>,
    lens: Vec<usize>,
    of: Vec<usize>,
    results: Vec<PacketResult>,
    /// Packets the engine refused (there must be none).
    failures: usize,
}

impl Run {
    /// The next batch: each packet to the next context of a walk over them with a stride
    /// coprime with their number (every context once per pass), rising sequence numbers;
    /// plaintext (protect) or protected by the party's senders one by one (unprotect).
    fn fill(&mut self) {
        let mut party = self.party.borrow_mut();
        let party = &mut *party;
        let n = party.tx.len();
        for (i, b) in self.bufs.iter_mut().enumerate() {
            let at = party.walked;
            party.walked += 1;
            let c = at.wrapping_mul(7_919) % n;
            let len = self.sizes.of(at);
            b[0] = 0x80;
            b[1] = 96;
            b[2..4].copy_from_slice(&party.seqs[c].to_be_bytes());
            b[4..8].copy_from_slice(&(at as u32).wrapping_mul(960).to_be_bytes());
            b[8..12].copy_from_slice(&(0x5EC0_0000 + c as u32).to_be_bytes());
            for (k, x) in b[12..len].iter_mut().enumerate() {
                *x = k as u8;
            }
            party.seqs[c] = party.seqs[c].wrapping_add(1);
            self.of[i] = c;
            self.lens[i] = if self.protect {
                len
            } else {
                party.tx[c]
                    .protect_rtp(b, len)
                    .expect("the serial sender protects a fresh packet")
            };
        }
    }

    /// One `Engine::process` call on the whole batch.
    fn process(&mut self) {
        let op = if self.protect {
            Op::ProtectRtp
        } else {
            Op::UnprotectRtp
        };
        let mut party = self.party.borrow_mut();
        let contexts = if self.protect {
            &mut party.tx
        } else {
            &mut party.rx
        };
        let mut packets: Vec<Packet<'_>> = self
            .bufs
            .iter_mut()
            .zip(self.of.iter().zip(&self.lens))
            .map(|(b, (&context, &len))| Packet {
                context,
                op,
                buf: &mut b[..],
                len,
            })
            .collect();
        self.engine
            .process(contexts, &mut packets, &mut self.results);
        self.failures += self.results.iter().filter(|r| r.is_err()).count();
        black_box(&self.results);
    }
}

/// An engine measured: its name, the engine or why it could not be made, and whether it runs
/// only for AEAD profiles.
type Named = (String, Result<Rc<dyn Engine>, String>, bool);

/// The engines measured.
fn engines() -> Vec<Named> {
    let simd = if SimdEngine::accelerated() {
        "simd (AVX-512)"
    } else {
        "simd (scalar lanes)"
    };
    let mut v: Vec<Named> = vec![
        ("serial".into(), Ok(Rc::new(SerialEngine)), false),
        (simd.into(), Ok(Rc::new(SimdEngine::all_lanes())), false),
        (
            "simd, GCM kernel off".into(),
            Ok(Rc::new(SimdEngine::all_lanes().with_gcm_kernel(false))),
            true,
        ),
    ];
    match ThreadedEngine::with_default_workers() {
        Ok(e) => {
            let lanes = e.config().worker_count();
            v.push((format!("threaded×{lanes} simd"), Ok(Rc::new(e)), false));
        }
        Err(e) => v.push(("threaded simd".into(), Err(e.to_string()), false)),
    }
    v
}

/// One row's coordinates: profile, protect, sizes, (batch, contexts), engine.
type Key = (Profile, bool, Sizes, (usize, usize), String);

/// What the sweep adds to `lab srtp`.
pub struct SizeSweep {
    /// One row per profile × operation × size × batch and contexts × engine.
    pub table: Table,
    /// Throughput over the serial engine's by size, per engine (two profiles, both
    /// operations).
    pub plots: Vec<Plot>,
    /// Each engine's lowest ratio to the serial engine over all rows, in words.
    pub notes: Vec<String>,
}

/// Steps the sweep reports to the progress bar (one per profile and operation).
pub const STEPS: usize = super::SWEPT_PROFILES.len() * 2;

/// The timing settings of the sweep: the study's, with at most nine runs and half its warm-up
/// (it times several hundred cells; the method says so).
fn bench(ctx: &Ctx) -> Bench {
    let mut b = ctx.bench.clone();
    b.runs = b.runs.min(9);
    b.warmup /= 2;
    b
}

/// Measures every engine at every size, batch and context count, per profile and operation:
/// all their runs interleaved, so that a machine whose speed drifts weighs on all alike.
pub fn sweep(ctx: &Ctx) -> SizeSweep {
    let engines = engines();
    let bench = bench(ctx);
    let mut measured: Vec<(Key, Result<Timing, String>)> = Vec::new();
    for profile in super::SWEPT_PROFILES {
        for protect in [true, false] {
            let op = if protect { "protect" } else { "unprotect" };
            ctx.step(format!("engines by size, {} {op}", profile.sdp_name()));
            let mut live: Vec<(Key, Rc<RefCell<Run>>)> = Vec::new();
            for (name, engine, aead_only) in &engines {
                if *aead_only && !profile.is_aead() {
                    continue;
                }
                let engine = match engine {
                    Ok(e) => e,
                    Err(why) => {
                        for setup in SETUPS {
                            for sizes in SIZES {
                                let k = (profile, protect, sizes, setup, name.clone());
                                measured.push((k, Err(why.clone())));
                            }
                        }
                        continue;
                    }
                };
                // One party per context count, shared by the engine's cells.
                let mut parties: Vec<(usize, Rc<RefCell<Party>>)> = Vec::new();
                for setup @ (batch, contexts) in SETUPS {
                    let party = match parties.iter().find(|p| p.0 == contexts) {
                        Some(p) => p.1.clone(),
                        None => {
                            let p = Rc::new(RefCell::new(Party::new(profile, contexts, protect)));
                            parties.push((contexts, p.clone()));
                            p
                        }
                    };
                    for sizes in SIZES {
                        let run = Run {
                            engine: engine.clone(),
                            party: party.clone(),
                            sizes,
                            protect,
                            bufs: (0..batch).map(|_| vec![0u8; 1300]).collect(),
                            lens: vec![0; batch],
                            of: vec![0; batch],
                            results: vec![Ok(0); batch],
                            failures: 0,
                        };
                        live.push((
                            (profile, protect, sizes, setup, name.clone()),
                            Rc::new(RefCell::new(run)),
                        ));
                    }
                }
            }
            live.sort_by_key(|(k, _)| {
                let size = SIZES.iter().position(|s| *s == k.2);
                let setup = SETUPS.iter().position(|s| *s == k.3);
                let engine = engines.iter().position(|e| e.0 == k.4);
                (setup, size, engine)
            });
            let mut ops: Vec<Chunked<'_>> = live
                .iter()
                .map(|(k, run)| {
                    let (fill, work) = (run.clone(), run.clone());
                    Chunked {
                        chunk: k.3 .0,
                        prepare: Box::new(move || fill.borrow_mut().fill()),
                        process: Box::new(move || work.borrow_mut().process()),
                    }
                })
                .collect();
            // Each engine's cell right after the serial engine's of the same size and setup
            // (the interleaving keeps neighbours together), so that their ratio is taken over
            // seconds of the machine's drift rather than minutes.
            let timings = bench.time_chunked_interleaved(&mut ops);
            drop(ops);
            for ((k, run), t) in live.into_iter().zip(timings) {
                let failures = run.borrow().failures;
                let r = if failures == 0 {
                    Ok(t)
                } else {
                    Err(format!("{failures} packets failed"))
                };
                measured.push((k, r));
            }
            ctx.done();
        }
    }
    report(&engines, &measured)
}

fn report(engines: &[Named], m: &[(Key, Result<Timing, String>)]) -> SizeSweep {
    let mut table = Table::new(
        "srtp_engine_sizes",
        "SRTP batch engines by packet size: every engine against the serial engine, same runs",
    )
    .col("profile", "profile")
    .col("op", "operation")
    .col("packet", "packet")
    .col_unit("batch", "batch", "packets")
    .col_unit("contexts", "contexts", "")
    .col("engine", "engine")
    .col_unit("ns_per_packet", "per packet", "ns")
    .col_unit("spread_pct", "spread", "%")
    .col_unit("vs_serial", "throughput vs serial", "×");
    let serial = |k: &Key| {
        m.iter()
            .find(|(s, _)| s.0 == k.0 && s.1 == k.1 && s.2 == k.2 && s.3 == k.3 && s.4 == "serial")
            .and_then(|(_, t)| t.as_ref().ok())
            .map(|t| t.ns)
    };
    // Per engine: its lowest ratio to serial, and where.
    let mut worst: Vec<(String, f64, String)> = Vec::new();
    for (k, r) in m {
        let (profile, protect, sizes, (batch, contexts), name) = k;
        let op = if *protect { "protect" } else { "unprotect" };
        let mut row: Vec<(&str, Cell)> = vec![
            ("profile", Cell::text(profile.sdp_name())),
            ("op", Cell::text(op)),
            ("packet", Cell::text(sizes.label())),
            ("batch", Cell::num(*batch as f64)),
            ("contexts", Cell::num(*contexts as f64)),
            ("engine", Cell::text(name.clone())),
        ];
        match r {
            Ok(t) => {
                row.push(("ns_per_packet", Cell::num(t.ns)));
                row.push(("spread_pct", Cell::num(t.spread_pct)));
                if let Some(s) = serial(k) {
                    let ratio = s / t.ns;
                    row.push(("vs_serial", Cell::num(ratio)));
                    let at = format!(
                        "{} {op} {}, batches of {batch} over {contexts} contexts",
                        profile.sdp_name(),
                        sizes.label()
                    );
                    match worst.iter_mut().find(|w| w.0 == *name) {
                        Some(w) if ratio < w.1 => (w.1, w.2) = (ratio, at),
                        Some(_) => {}
                        None => worst.push((name.clone(), ratio, at)),
                    }
                }
            }
            Err(why) => {
                row.push(("ns_per_packet", Cell::not_offered(why.clone())));
                row.push(("vs_serial", Cell::not_offered(why.clone())));
            }
        }
        table.push(row);
    }
    let notes = worst
        .iter()
        .filter(|w| w.0 != "serial")
        .map(|(name, ratio, at)| {
            format!(
                "{name} ÷ serial throughput, lowest over every profile, operation, size, batch and context count: {ratio:.2}× ({at})"
            )
        })
        .collect();

    let categories: Vec<String> = SIZES.iter().map(|s| s.label()).collect();
    let mut plots = Vec::new();
    for profile in [Profile::AesCm128HmacSha1_80, Profile::AeadAes128Gcm] {
        for protect in [true, false] {
            let op = if protect { "protect" } else { "unprotect" };
            let mut series = Vec::new();
            for (name, _, aead_only) in engines {
                if name == "serial" || (*aead_only && !profile.is_aead()) {
                    continue;
                }
                for setup @ (batch, contexts) in SETUPS {
                    let points = SIZES
                        .iter()
                        .enumerate()
                        .filter_map(|(i, &sizes)| {
                            let k = (profile, protect, sizes, setup, name.clone());
                            let t = m.iter().find(|x| x.0 == k)?.1.as_ref().ok()?;
                            Some((i as f64, serial(&k)? / t.ns))
                        })
                        .collect();
                    series.push(Series {
                        name: format!("{}, {batch}/{contexts}", short(name)),
                        points,
                    });
                }
            }
            plots.push(Plot {
                id: format!(
                    "srtp_engine_sizes_{}_{op}",
                    profile.sdp_name().to_lowercase()
                ),
                title: format!(
                    "{}, {op}: throughput over the serial engine's by packet size (batch/contexts)",
                    profile.sdp_name()
                ),
                kind: PlotKind::Bars,
                x_label: "RTP packet".into(),
                y_label: "× serial".into(),
                log_y: false,
                categories: categories.clone(),
                series,
            });
        }
    }
    SizeSweep {
        table,
        plots,
        notes,
    }
}

/// An engine's name short enough for a legend with its setup after it (the legend cuts
/// entries past 28 characters: "threaded×2 simd, 1024/4096" is 26).
fn short(name: &str) -> String {
    name.replace(" (AVX-512)", "")
        .replace(" (scalar lanes)", " scalar")
        .replace(", GCM kernel off", " GCM off")
}
