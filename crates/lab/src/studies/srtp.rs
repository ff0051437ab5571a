//! `lab srtp` (`000_…`, `002_…` a): protect and unprotect cost per packet, every SRTP
//! profile, audio (G.711 20 ms, 172 B), Opus (100 B) and video (1200 B) RTP packets, for
//! secrelay (each crypto provider) and the SRTP stacks people use, in one run; then secrelay's
//! batch engines against its serial engine by batch size ([`super::srtp_engines`]) and by
//! packet size ([`super::srtp_sizes`]).

use std::hint::black_box;

use secrelay_peers::libsrtp::{Direction as LDir, LibSrtp, LibsrtpProfile};
use secrelay_srtp::provider::{self, CryptoProvider};
use secrelay_srtp::{Context, MasterKey, Policy, Profile};

use crate::count::CountedOp;
use crate::frame::{Cell, Plot, PlotKind, Series, StudyReport, Table};
use crate::{Ctx, Study};

/// Packet sizes measured: (name, RTP packet length in bytes, payload description).
pub const SIZES: [(&str, usize); 3] = [("opus", 100), ("audio", 172), ("video", 1200)];

const CHUNK: usize = 64;
const SSRC: u32 = 0x5EC2_E1A7;

/// An SRTP stack under test: protects and unprotects RTP packets in place.
pub trait SrtpStack {
    /// Protects `buf[..len]`, returns the new length.
    fn protect(&mut self, buf: &mut [u8], len: usize) -> Result<usize, String>;
    /// Unprotects `buf[..len]`, returns the new length.
    fn unprotect(&mut self, buf: &mut [u8], len: usize) -> Result<usize, String>;
}

struct Ours {
    tx: Context,
    rx: Context,
}

impl Ours {
    fn new(profile: Profile, p: &'static dyn CryptoProvider) -> Ours {
        let mk = MasterKey::new(
            profile,
            &vec![0x42; profile.key_len()],
            &vec![0x17; profile.salt_len()],
        )
        .expect("key and salt lengths come from the profile");
        Ours {
            tx: Context::new(Policy::new(mk.clone()).any_outbound().provider(p))
                .expect("valid policy"),
            rx: Context::new(Policy::new(mk).any_inbound().provider(p)).expect("valid policy"),
        }
    }
}

impl SrtpStack for Ours {
    fn protect(&mut self, buf: &mut [u8], len: usize) -> Result<usize, String> {
        self.tx.protect_rtp(buf, len).map_err(|e| e.to_string())
    }
    fn unprotect(&mut self, buf: &mut [u8], len: usize) -> Result<usize, String> {
        self.rx.unprotect_rtp(buf, len).map_err(|e| e.to_string())
    }
}

struct Lib {
    tx: LibSrtp,
    rx: LibSrtp,
}

impl Lib {
    fn new(profile: Profile) -> Option<Lib> {
        let lp = LibsrtpProfile::ALL
            .into_iter()
            .find(|l| l.sdp_name() == profile.sdp_name())?;
        let key = vec![0x42; profile.key_len()];
        let salt = vec![0x17; profile.salt_len()];
        Some(Lib {
            tx: LibSrtp::new(lp, LDir::Outbound, &key, &salt, 1024, false).ok()?,
            rx: LibSrtp::new(lp, LDir::Inbound, &key, &salt, 1024, false).ok()?,
        })
    }
}

impl SrtpStack for Lib {
    fn protect(&mut self, buf: &mut [u8], len: usize) -> Result<usize, String> {
        self.tx.protect(buf, len).map_err(|e| e.to_string())
    }
    fn unprotect(&mut self, buf: &mut [u8], len: usize) -> Result<usize, String> {
        self.rx.unprotect(buf, len).map_err(|e| e.to_string())
    }
}

/// Makes a fresh sender/receiver pair, or says why the stack cannot.
pub type StackFactory = Box<dyn Fn() -> Result<Box<dyn SrtpStack>, String>>;

/// The stacks measured in-process for a profile: (name, factory).
pub fn stacks(profile: Profile) -> Vec<(String, StackFactory)> {
    let mut v: Vec<(String, StackFactory)> = Vec::new();
    let aead = matches!(profile, Profile::AeadAes128Gcm | Profile::AeadAes256Gcm);
    for p in provider::all() {
        // ring's provider differs from RustCrypto's only in AES-GCM.
        if p.name() == "ring" && !aead {
            continue;
        }
        let name = if p.name().starts_with("default") {
            "secrelay".to_string()
        } else {
            format!("secrelay/{}", p.name())
        };
        v.push((
            name,
            Box::new(move || Ok(Box::new(Ours::new(profile, p)) as Box<dyn SrtpStack>)),
        ));
    }
    v.push((
        "libsrtp 2 + OpenSSL".into(),
        Box::new(move || {
            Lib::new(profile)
                .map(|l| Box::new(l) as Box<dyn SrtpStack>)
                .ok_or_else(|| "libsrtp 2.3 lacks this profile".to_string())
        }),
    ));
    v.push((
        "webrtc-srtp (webrtc-rs)".into(),
        Box::new(move || {
            super::srtp_peers::WebrtcSrtp::new(profile).map(|s| Box::new(s) as Box<dyn SrtpStack>)
        }),
    ));
    v
}

/// An RTP packet of `size` bytes (12-byte header, counting payload).
pub fn template(size: usize) -> Vec<u8> {
    let mut p = vec![0u8; size];
    p[0] = 0x80;
    p[8..12].copy_from_slice(&SSRC.to_be_bytes());
    for (i, b) in p[12..].iter_mut().enumerate() {
        *b = i as u8;
    }
    p
}

/// A chunk of packet buffers with rising sequence numbers.
pub struct Chunk {
    bufs: Vec<Vec<u8>>,
    lens: Vec<usize>,
    seq: u16,
    plain: Vec<u8>,
}

impl Chunk {
    /// Buffers for `size`-byte packets (room for any profile's tag).
    pub fn new(size: usize) -> Chunk {
        Chunk {
            bufs: (0..CHUNK).map(|_| vec![0u8; size + 64]).collect(),
            lens: vec![0; CHUNK],
            seq: 0,
            plain: template(size),
        }
    }
    /// Fills every buffer with the plaintext packet and the next sequence number.
    pub fn fill_plain(&mut self) {
        for b in self.bufs.iter_mut() {
            b[..self.plain.len()].copy_from_slice(&self.plain);
            b[2..4].copy_from_slice(&self.seq.to_be_bytes());
            self.seq = self.seq.wrapping_add(1);
        }
        self.lens.fill(self.plain.len());
    }
    /// Refills the first buffer only, with the next sequence number.
    pub fn fill_first(&mut self) {
        let n = self.plain.len();
        self.bufs[0][..n].copy_from_slice(&self.plain);
        self.bufs[0][2..4].copy_from_slice(&self.seq.to_be_bytes());
        self.seq = self.seq.wrapping_add(1);
        self.lens[0] = n;
    }
    /// Protects the first buffer only (one packet per call, for instruction counts).
    pub fn protect_first(&mut self, s: &mut dyn SrtpStack) {
        black_box(
            s.protect(&mut self.bufs[0], self.lens[0])
                .expect("the stack protected in the dry run"),
        );
    }
    /// Protects every buffer (outside any timing).
    pub fn protect_all(&mut self, s: &mut dyn SrtpStack) -> Result<(), String> {
        for (b, l) in self.bufs.iter_mut().zip(self.lens.iter_mut()) {
            *l = s.protect(b, *l)?;
        }
        Ok(())
    }
}

/// A dry run proves a stack works before it is timed (a failure inside the timing would be a
/// panic, not a cell saying why); returns a fresh pair for the timing.
fn checked(make: &StackFactory, size: usize) -> Result<Box<dyn SrtpStack>, String> {
    let mut stack = make()?;
    let mut c = Chunk::new(size);
    c.fill_plain();
    c.protect_all(stack.as_mut())?;
    for (b, l) in c.bufs.iter_mut().zip(c.lens.iter()) {
        stack.unprotect(b, *l)?;
    }
    make()
}

/// Protect and unprotect timings for several stacks at one size, their runs interleaved so
/// that their ratios survive a machine whose speed drifts.
pub(crate) fn measure_all(
    ctx: &Ctx,
    makers: &[StackFactory],
    size: usize,
) -> Vec<Result<(crate::Timing, crate::Timing), String>> {
    use std::cell::RefCell;
    use std::rc::Rc;

    use crate::measure::Chunked;

    type Shared = Rc<RefCell<(Box<dyn SrtpStack>, Chunk)>>;
    let mut results: Vec<Result<(crate::Timing, crate::Timing), String>> = Vec::new();
    let mut live: Vec<(usize, Shared)> = Vec::new();
    for (i, make) in makers.iter().enumerate() {
        match checked(make, size) {
            Ok(stack) => {
                live.push((i, Rc::new(RefCell::new((stack, Chunk::new(size))))));
                results.push(Err(String::new()));
            }
            Err(why) => results.push(Err(why)),
        }
    }
    let process = |state: Shared, protect: bool| -> Box<dyn FnMut()> {
        Box::new(move || {
            let mut st = state.borrow_mut();
            let (s, c) = &mut *st;
            for (b, l) in c.bufs.iter_mut().zip(c.lens.iter()) {
                if protect {
                    black_box(s.protect(b, *l).expect("worked in the dry run"));
                } else {
                    black_box(s.unprotect(b, *l).expect("worked in the dry run"));
                }
            }
        })
    };
    let mut protect_ops: Vec<Chunked<'_>> = live
        .iter()
        .map(|(_, st)| {
            let fill = st.clone();
            Chunked {
                chunk: CHUNK,
                prepare: Box::new(move || fill.borrow_mut().1.fill_plain()),
                process: process(st.clone(), true),
            }
        })
        .collect();
    let protect = ctx.bench.time_chunked_interleaved(&mut protect_ops);
    drop(protect_ops);
    // Fresh pairs for unprotect: the senders above ran far ahead of any receiver.
    for (i, st) in &live {
        match makers[*i]() {
            Ok(fresh) => st.borrow_mut().0 = fresh,
            Err(why) => results[*i] = Err(why),
        }
    }
    let mut unprotect_ops: Vec<Chunked<'_>> = live
        .iter()
        .map(|(_, st)| {
            let fill = st.clone();
            Chunked {
                chunk: CHUNK,
                prepare: Box::new(move || {
                    let mut g = fill.borrow_mut();
                    let (s, c) = &mut *g;
                    c.fill_plain();
                    c.protect_all(s.as_mut()).expect("worked in the dry run");
                }),
                process: process(st.clone(), false),
            }
        })
        .collect();
    let unprotect = ctx.bench.time_chunked_interleaved(&mut unprotect_ops);
    for (k, (i, _)) in live.iter().enumerate() {
        if results[*i].as_ref().err().is_some_and(|e| e.is_empty()) {
            results[*i] = Ok((protect[k], unprotect[k]));
        }
    }
    results
}

/// (profile, size label, size, stack, (protect ns, unprotect ns, spread %) or why not).
type ResultRow = (
    Profile,
    &'static str,
    usize,
    String,
    Result<(f64, f64, f64), String>,
);

/// The `lab srtp` study.
pub struct SrtpStudy;

/// Every stack's protect and unprotect of every profile at every size, pion/srtp's (a Go
/// child process) after them.
fn measure_stacks(ctx: &mut Ctx, profiles: &[Profile]) -> Vec<ResultRow> {
    let mut results: Vec<ResultRow> = Vec::new();
    for &profile in profiles {
        for (label, size) in SIZES {
            ctx.step(format!("{} {size} B", profile.sdp_name()));
            let (names, makers): (Vec<String>, Vec<StackFactory>) =
                stacks(profile).into_iter().unzip();
            for (name, r) in names.into_iter().zip(measure_all(ctx, &makers, size)) {
                results.push((
                    profile,
                    label,
                    size,
                    name,
                    r.map(|(p, u)| (p.ns, u.ns, p.spread_pct)),
                ));
            }
            ctx.done();
        }
    }
    ctx.step("pion/srtp (Go)");
    let sizes: Vec<usize> = SIZES.iter().map(|s| s.1).collect();
    let pion = super::srtp_peers::pion(&ctx.bench, profiles, &sizes);
    for &profile in profiles {
        for (label, size) in SIZES {
            let r = match &pion {
                Err(why) => Err(why.clone()),
                Ok(m) => m
                    .get(&(profile.sdp_name().to_string(), size))
                    .cloned()
                    .unwrap_or_else(|| Err("pion-srtp printed no result".into())),
            };
            results.push((profile, label, size, "pion/srtp (Go)".into(), r));
        }
    }
    results
}

/// The table of every stack's cost per packet, with its ratios to libsrtp and to the best
/// peer, and instructions at the G.711 size.
fn per_packet_table(
    results: &[ResultRow],
    counts: &std::collections::BTreeMap<String, f64>,
) -> Table {
    let mut table = Table::new(
        "srtp_per_packet",
        "SRTP cost per RTP packet, one core (ns per packet, median)",
    )
    .col("profile", "profile")
    .col("packet", "packet")
    .col("stack", "stack")
    .col_unit("protect_ns", "protect", "ns")
    .col_unit("unprotect_ns", "unprotect", "ns")
    .col_unit("protect_spread_pct", "spread", "%")
    .col_unit("protect_vs_libsrtp", "protect vs libsrtp", "×")
    .col_unit("protect_vs_best_peer", "protect vs best peer", "×")
    .col_unit("instructions", "instructions/protect", "instr");
    for (profile, label, size, name, r) in results {
        let best_peer = results
            .iter()
            .filter(|x| x.0 == *profile && x.2 == *size && !x.3.starts_with("secrelay"))
            .filter_map(|x| x.4.as_ref().ok().map(|r| r.0))
            .min_by(f64::total_cmp);
        let lib = results
            .iter()
            .find(|x| x.0 == *profile && x.2 == *size && x.3.starts_with("libsrtp"))
            .and_then(|x| x.4.as_ref().ok());
        let mut row: Vec<(&str, Cell)> = vec![
            ("profile", Cell::text(profile.sdp_name())),
            ("packet", Cell::text(format!("{label} {size} B"))),
            ("stack", Cell::text(name.clone())),
        ];
        match r {
            Ok((p, u, spread)) => {
                row.push(("protect_ns", Cell::num(*p)));
                row.push(("unprotect_ns", Cell::num(*u)));
                row.push(("protect_spread_pct", Cell::num(*spread)));
                if let Some((lp, _, _)) = lib {
                    row.push(("protect_vs_libsrtp", Cell::num(p / lp)));
                }
                if let Some(best) = best_peer {
                    row.push(("protect_vs_best_peer", Cell::num(p / best)));
                }
            }
            Err(why) => {
                row.push(("protect_ns", Cell::not_offered(why.clone())));
                row.push(("unprotect_ns", Cell::not_offered(why.clone())));
            }
        }
        if *size == 172 {
            if let Some(n) = counts.get(&format!("{name}|{}|172", profile.sdp_name())) {
                row.push(("instructions", Cell::num(*n)));
            }
        }
        table.push(row);
    }
    table
}

/// Per profile (AES_CM_128_HMAC_SHA1_80, AEAD_AES_128_GCM): protect cost against packet
/// size per stack, and every stack side by side at the G.711 size.
fn stack_plots(results: &[ResultRow]) -> Vec<Plot> {
    let mut plots = Vec::new();
    for profile in [Profile::AesCm128HmacSha1_80, Profile::AeadAes128Gcm] {
        let mut series: Vec<Series> = Vec::new();
        for (profile_r, _, size, name, r) in results {
            if *profile_r != profile {
                continue;
            }
            let Ok((p, _, _)) = r else { continue };
            match series.iter_mut().find(|s| s.name == *name) {
                Some(s) => s.points.push((*size as f64, *p)),
                None => series.push(Series {
                    name: name.clone(),
                    points: vec![(*size as f64, *p)],
                }),
            }
        }
        for s in &mut series {
            s.points.sort_by(|a, b| a.0.total_cmp(&b.0));
        }
        plots.push(Plot {
            id: format!("srtp_cost_vs_size_{}", profile.sdp_name().to_lowercase()),
            title: format!("{}: protect cost vs packet size", profile.sdp_name()),
            kind: PlotKind::Lines,
            x_label: "RTP packet (bytes)".into(),
            y_label: "ns per packet".into(),
            log_y: false,
            categories: Vec::new(),
            series,
        });
    }
    // Every stack side by side at the G.711 size, protect and unprotect.
    for profile in [Profile::AesCm128HmacSha1_80, Profile::AeadAes128Gcm] {
        let rows: Vec<_> = results
            .iter()
            .filter(|r| r.0 == profile && r.2 == 172)
            .collect();
        let categories: Vec<String> = rows.iter().map(|r| r.3.clone()).collect();
        let pick = |f: fn(&(f64, f64, f64)) -> f64| -> Vec<(f64, f64)> {
            rows.iter()
                .enumerate()
                .filter_map(|(i, r)| r.4.as_ref().ok().map(|v| (i as f64, f(v))))
                .collect()
        };
        plots.push(Plot {
            id: format!("srtp_stacks_172_{}", profile.sdp_name().to_lowercase()),
            title: format!(
                "{}, 172-byte packet: ns per packet by stack",
                profile.sdp_name()
            ),
            kind: PlotKind::Bars,
            x_label: "stack".into(),
            y_label: "ns per packet".into(),
            log_y: false,
            categories,
            series: vec![
                Series {
                    name: "protect".into(),
                    points: pick(|v| v.0),
                },
                Series {
                    name: "unprotect".into(),
                    points: pick(|v| v.1),
                },
            ],
        });
    }
    plots
}

/// How the study and the sweeps it runs measure.
const METHOD: &str = "one protect (or unprotect) of one RTP packet in place, in chunks of 64 packets with rising sequence numbers; \
     filling the chunk with plaintext (protect) or protecting it with the same stack (unprotect) is outside the timing; \
     one context per direction, one SSRC, replay window 1024; webrtc-srtp's API returns a new buffer per packet \
     (its allocation and the copy back are timed); pion/srtp runs as a Go child process with the same method \
     (chunks of 64, median of the runs) and its own timer; \
     symmetric_per_packet: one encryption of one packet in place with a fresh IV or nonce, the key schedule set up once, \
     CBC with PKCS#7 padding, AEAD tags over the packet, RC4 one keystream across packets; \
     srtp_engines: one Engine::process call protecting a whole batch of 172-byte RTP packets spread over 64 \
     contexts (packet i to context i mod 64, one SSRC each), refilling the batch with plaintext outside the timing \
     and building its packet list inside; every engine and batch size of a profile interleaved run by run; \
     the threaded engine has one lane per available core on pinned pool threads, each lane running the \
     multi-buffer engine (threaded×N simd) or the scalar code (threaded×N scalar); \
     per batch = per packet × batch size; vs serial = serial time per packet ÷ the engine's; \
     srtp_engine_ceiling: N serial (or multi-buffer) engines on N threads at once (own contexts, batches of 4,096, \
     each thread filling its own) against one, alternating, median ratio: what the machine gave N threads during the run; \
     srtp_engine_sizes: one Engine::process call on a batch of RTP packets of 100, 172 or 1,200 bytes or the video-like \
     mix (of every 16 packets, 12 of 1,100–1,200 bytes, 2 of 200–1,100, 2 of 60–200, in a fixed pseudo-random order; \
     ~960 bytes on average), protect or unprotect, batches of 64 over 64 contexts, of 64 over 4,096 and of 1,024 over \
     4,096 (each context its own master key; packet i of the run to context 7,919·i mod N, so a batch over 4,096 \
     contexts names contexts whose state has left the caches), every engine, size and setup of a profile and \
     operation interleaved run by run, each engine's cell next to the serial engine's of the same size and setup \
     (at most 9 runs, half the warm-up), refilling the \
     batch outside the timing (unprotect: protected one by one by the serial senders, outside the timing); \
     vs serial = serial time per packet ÷ the engine's in the same runs; \
     srtp_gpu: one Engine::process call over a batch of 172-byte RTP packets spread over min(batch, 65,536) \
     contexts (packet i to context i mod N, each context its own master key), host memory to host memory: \
     the packets' copies to and from the GPU, the checks before the crypto and the commits after it are timed; \
     the GPU engine with a host thread per core (the batch split by context), 4 lanes each, 1,024 packets per launch, \
     524,288 key slots (every key set of the sweep's cells fits); \
     refilling the batch, making its packet list, checking the results (and, for unprotect, protecting it with the \
     same engine) are outside the timing; \
     batches for about 4× the run time per cell (3 at least) after one untimed batch, and for the GPU after untimed \
     batches until one uploads no key and sends no packet to the CPU (at most 8); a GPU cell whose timed batches \
     still did either fails with the counts; throughput = packets ÷ the batches' summed \
     time, batch time percentiles over the batches (with few batches p99 is their slowest); \
     the worker-thread engine on every core in the same run; \
     vs threaded = the GPU's throughput ÷ the threaded engine's; \
     srtp_gpu_variants: the same at batches of 65,536, protect, one GPU engine per setting (host threads, lanes × packets per launch, \
     threads per block, a register cap given to NVRTC), vs the first setting that ran (the defaults, \
     unless they failed) in the same run";

impl Study for SrtpStudy {
    fn name(&self) -> &'static str {
        "srtp"
    }
    fn title(&self) -> &'static str {
        "SRTP protect/unprotect cost per packet (000, 002 a)"
    }

    fn counted_ops(&self, _pace: crate::measure::Pace) -> anyhow::Result<Vec<CountedOp>> {
        let mut ops = Vec::new();
        for profile in super::SWEPT_PROFILES {
            for (name, make) in stacks(profile) {
                let Ok(mut stack) = make() else { continue };
                let mut c = Chunk::new(172);
                ops.push(CountedOp::new(
                    format!("{name}|{}|172", profile.sdp_name()),
                    16,
                    move || {
                        // One protect per call; refilling the packet is part of the op.
                        c.fill_first();
                        c.protect_first(stack.as_mut());
                    },
                ));
            }
        }
        Ok(ops)
    }

    fn run(&self, ctx: &mut Ctx) -> anyhow::Result<StudyReport> {
        // A quick run keeps to the swept profiles: the SDES-only suites add five profiles'
        // worth of cells to a run meant as a first look.
        let profiles: Vec<Profile> = if ctx.opts.quick {
            super::SWEPT_PROFILES.to_vec()
        } else {
            Profile::ALL.to_vec()
        };
        ctx.steps(
            (profiles.len() * SIZES.len()
                + super::srtp_engines::PROFILES.len()
                + super::srtp_sizes::STEPS) as u64
                + 3,
        );
        let mut results = measure_stacks(ctx, &profiles);
        let (counts, instructions_method) = match ctx.count_instructions() {
            Ok(c) => (c, "callgrind, instructions per protect of one 172-byte packet (16 per region, baseline region subtracted), refilling the plaintext packet (one copy) included; under valgrind AVX-512 and SHA-NI paths are not taken".to_string()),
            Err(why) => (Default::default(), why),
        };
        ctx.done();
        results.sort_by_key(|r| (Profile::ALL.iter().position(|p| *p == r.0), r.2));
        let table = per_packet_table(&results, &counts);

        // Per-packet cost against packet size, AES_CM_128_HMAC_SHA1_80 and AEAD_AES_128_GCM.
        let mut plots = stack_plots(&results);
        // The batch engines (issue 5): serial against worker threads, batch sizes 1 to 4,096.
        let engines = super::srtp_engines::sweep(ctx);
        plots.extend(engines.plots);
        // The GPU engine (issue 18): batches of 1,024 to 262,144 over up to 65,536 contexts.
        let (gpu, gpu_variants, _, _, _) = super::srtp_gpu::sweep(ctx);
        // The engines by packet size (issue 17): 100, 172, 1,200 bytes and a video-like mix.
        let sizes = super::srtp_sizes::sweep(ctx);
        plots.extend(sizes.plots);
        // The raw ciphers beside SRTP's (002 a): what one packet's encryption costs per library.
        let cipher_table = super::symmetric::cipher_table(ctx);
        plots.push(super::symmetric::cipher_plot(&cipher_table, 172));
        ctx.done();
        let method = ctx.method(METHOD, instructions_method);
        Ok(StudyReport {
            study: self.name().into(),
            title: self.title().into(),
            seeds: vec!["000".into(), "002".into()],
            method,
            tables: vec![
                table,
                engines.table,
                engines.ceiling,
                gpu,
                gpu_variants,
                sizes.table,
                cipher_table,
            ],
            plots,
            notes: engines.notes.into_iter().chain(sizes.notes).collect(),
        })
    }
}
