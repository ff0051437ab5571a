//! secrelay's lab: the studies of `STUDIES.md`, re-measured on this machine side by side
//! with the libraries people use, as tables, JSON and an HTML report.
//!
//! A study implements [`Study`]: it measures through the [`Ctx`] it is given (wall time with
//! [`measure::Bench`], instruction counts with [`Ctx::count_instructions`]) and returns a
//! [`frame::StudyReport`]. [`run`] runs studies, prints their tables, writes JSON and the
//! report.

pub mod client;
pub mod count;
pub mod failover;
pub mod frame;
pub mod go_peer;
pub mod handshake;
pub mod machine;
pub mod measure;
pub mod report;
pub mod sizing;
pub mod soak;
pub mod studies;

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use indicatif::{ProgressBar, ProgressStyle};

pub use count::CountedOp;
pub use frame::{Cell, LabOutput, Method, Plot, PlotKind, Series, StudyReport, Table};
pub use measure::{Bench, Timing};

mod versions {
    include!(concat!(env!("OUT_DIR"), "/versions.rs"));
}

/// A study of the lab.
pub trait Study: Sync {
    /// Name on the command line.
    fn name(&self) -> &'static str;
    /// One-line description.
    fn title(&self) -> &'static str;
    /// Runs the study.
    fn run(&self, ctx: &mut Ctx) -> anyhow::Result<StudyReport>;
    /// The operations whose instructions are counted under callgrind (run in a child
    /// process; ids are the study's own).
    fn counted_ops(&self, _pace: crate::measure::Pace) -> anyhow::Result<Vec<CountedOp>> {
        Ok(Vec::new())
    }
}

/// Every study, in the order `lab all` runs them.
pub fn studies() -> Vec<&'static dyn Study> {
    studies::all()
}

/// Looks a study up by name.
pub fn study(name: &str) -> Option<&'static dyn Study> {
    studies()
        .into_iter()
        .chain(studies::by_name_only())
        .find(|s| s.name() == name)
}

/// Options shared by every study.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Fewer, shorter runs: for first looks.
    pub quick: bool,
    /// Every measurement as short as it can be (see [`measure::Pace::Smoke`]) and instruction
    /// counts over one operation: a check that the study runs end to end, for tests. Implies
    /// `quick` for what a study sweeps.
    pub smoke: bool,
    /// Write the results as JSON here.
    pub json: Option<PathBuf>,
    /// Write the report (report.html, PNG plots, results.json) into this folder.
    pub out: Option<PathBuf>,
    /// The `secrelay` binary, re-run under valgrind for instruction counts (None: no counts).
    pub self_exe: Option<PathBuf>,
    /// No progress bars (they also hide themselves when stderr is not a terminal).
    pub no_progress: bool,
    /// The DTLS engine secrelay's endpoints run on in the handshake study's phase table
    /// (`Auto`: per row, as [`secrelay_dtls::EndpointConfig::resolved_engine`] picks).
    pub engine: secrelay_dtls::EngineChoice,
    /// The GPU engine's settings where they differ from the lab's defaults
    /// ([`studies::srtp_gpu::lab_config`]).
    pub gpu: GpuSettings,
}

/// GPU engine settings a run asks for (`lab gpu`'s flags); `None` keeps the lab's default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GpuSettings {
    /// Host threads a batch is split over.
    pub host_threads: Option<usize>,
    /// Lanes (CUDA streams) per host thread.
    pub lanes: Option<usize>,
    /// Packets per lane launch.
    pub chunk: Option<usize>,
    /// Threads per block of the packet kernel.
    pub block: Option<u32>,
    /// Register cap of the packet kernel.
    pub max_registers: Option<u32>,
    /// Batches of fewer packets run on the CPU.
    pub cpu_below: Option<usize>,
}

/// What a study gets to measure with.
pub struct Ctx {
    /// The options.
    pub opts: Options,
    /// Wall-time settings, overhead already measured.
    pub bench: Bench,
    study: &'static str,
    bar: ProgressBar,
}

impl Ctx {
    fn new(opts: &Options, study: &'static str) -> Ctx {
        let bar = if opts.no_progress {
            ProgressBar::hidden()
        } else {
            ProgressBar::new(0)
        };
        bar.set_style(
            ProgressStyle::with_template(
                "{prefix:>10} [{bar:30}] {pos}/{len} {elapsed:>4} {wide_msg}",
            )
            .expect("static template is valid")
            .progress_chars("=> "),
        );
        bar.set_prefix(study.to_string());
        bar.enable_steady_tick(Duration::from_millis(250));
        Ctx {
            bench: Bench::new(measure::Pace::of(opts.quick, opts.smoke)),
            opts: opts.clone(),
            study,
            bar,
        }
    }

    /// Whether this is a `--quick` run (also true of a `--smoke` one).
    pub fn quick(&self) -> bool {
        self.opts.quick
    }

    /// Whether this is a `--smoke` run: a check that the study runs, not a measurement.
    pub fn smoke(&self) -> bool {
        self.opts.smoke
    }

    /// The run's pace.
    pub fn pace(&self) -> measure::Pace {
        measure::Pace::of(self.opts.quick, self.opts.smoke)
    }

    /// Sets how many steps the study has (for the progress bar).
    pub fn steps(&self, total: u64) {
        self.bar.set_length(total);
    }

    /// Marks the start of a step.
    pub fn step(&self, msg: impl Into<String>) {
        self.bar.set_message(msg.into());
    }

    /// Marks a step done.
    pub fn done(&self) {
        self.bar.inc(1);
    }

    /// Instructions per op for the study's [`Study::counted_ops`], by id, or the reason
    /// there are none (no valgrind, no binary to re-run).
    pub fn count_instructions(&self) -> Result<BTreeMap<String, f64>, String> {
        let Some(exe) = &self.opts.self_exe else {
            return Err("not counted: the lab was not started from the secrelay binary".into());
        };
        if let Some(reason) = count::unavailable_reason() {
            return Err(format!("not counted: {reason}"));
        }
        self.step("counting instructions under callgrind");
        let mut args = vec!["lab", "__count", self.study];
        if self.opts.quick {
            args.push("--quick");
        }
        if self.opts.smoke {
            args.push("--smoke");
        }
        count::count(exe, &args).map_err(|e| format!("not counted: {e:#}"))
    }

    /// A method block with the machine, versions and date filled in.
    pub fn method(&self, timed: impl Into<String>, instructions: impl Into<String>) -> Method {
        Method {
            timed: timed.into(),
            quick: self.opts.quick,
            smoke: self.opts.smoke,
            warmup_ms: self.bench.warmup.as_secs_f64() * 1e3,
            runs: self.bench.runs,
            run_ms: self.bench.run_time.as_secs_f64() * 1e3,
            harness_overhead_ns: self.bench.overhead_ns,
            spread: "interquartile range of the runs, % of the median".into(),
            instructions: instructions.into(),
            machine: machine::Machine::detect(),
            versions: versions(),
            date: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
            elapsed_s: 0.0,
        }
    }
}

/// Versions of what the lab measures: crate versions from Cargo.lock and the runtime
/// version strings of the C libraries.
pub fn versions() -> BTreeMap<String, String> {
    let mut v: BTreeMap<String, String> = versions::LOCKED
        .iter()
        .map(|(n, ver)| ((*n).to_string(), (*ver).to_string()))
        .collect();
    v.insert("secrelay".into(), env!("CARGO_PKG_VERSION").into());
    v.insert(
        "OpenSSL (runtime)".into(),
        openssl::version::version().to_string(),
    );
    v.insert(
        "libsrtp (runtime)".into(),
        secrelay_peers::libsrtp::LibSrtp::version_string(),
    );
    if let Some(vg) = count::valgrind_version() {
        v.insert("valgrind".into(), vg);
    }
    v
}

/// The child side of instruction counting: `secrelay lab __count STUDY [--quick]
/// [--smoke]` (with `smoke`, every region runs its operation once).
pub fn count_child(study_name: &str, quick: bool, smoke: bool) -> anyhow::Result<()> {
    let Some(s) = study(study_name) else {
        bail!("unknown study {study_name:?}")
    };
    count::run_child(s.counted_ops(measure::Pace::of(quick, smoke))?, smoke);
    Ok(())
}

/// The child side of per-operation heap measurement: `secrelay lab __mem STUDY ID`
/// (run under valgrind's DHAT; only `crypto` has one).
pub fn mem_child(study_name: &str, id: &str) -> anyhow::Result<()> {
    match study_name {
        "crypto" => studies::crypto::mem::child(id),
        _ => bail!("study {study_name:?} measures no heap per operation"),
    }
}

/// Runs the named studies (all of them for `["all"]`), prints their tables (and, for
/// `["all"]`, the sizing summary), writes JSON and, with `out`, the report. Returns what was
/// measured, with its sizing summary.
pub fn run(names: &[String], opts: &Options) -> anyhow::Result<LabOutput> {
    let chosen: Vec<&'static dyn Study> = if names.iter().any(|n| n == "all") {
        studies()
    } else {
        names
            .iter()
            .map(|n| {
                study(n).with_context(|| {
                    let known: Vec<&str> = studies().iter().map(|s| s.name()).collect();
                    format!("unknown study {n:?} (known: {}, all)", known.join(", "))
                })
            })
            .collect::<anyhow::Result<_>>()?
    };
    let mut output = LabOutput {
        secrelay: env!("CARGO_PKG_VERSION").into(),
        studies: Vec::new(),
        sizing: None,
    };
    let every = names.iter().any(|n| n == "all");
    for s in chosen {
        let started = Instant::now();
        let mut ctx = Ctx::new(opts, s.name());
        let mut report = s
            .run(&mut ctx)
            .with_context(|| format!("study {}", s.name()))?;
        ctx.bar.finish_and_clear();
        report.method.elapsed_s = started.elapsed().as_secs_f64();
        if let Some(note) = overhead_note(&report) {
            report.notes.push(note);
        }
        let mut stdout = std::io::stdout().lock();
        let _ = writeln!(stdout, "{}", report.render_text());
        output.studies.push(report);
    }
    let sizing = sizing::summarize(&output);
    if every {
        let _ = writeln!(std::io::stdout().lock(), "{}", sizing.render_text());
    }
    output.sizing = Some(sizing);
    if let Some(path) = &opts.json {
        write_json(path, &output)?;
    }
    if let Some(dir) = &opts.out {
        write_out(dir, &output)?;
        eprintln!("report: {}", dir.join("report.html").display());
    }
    Ok(output)
}

/// `dir` made if need be, with `results.json` and the HTML report (report.html, its plots).
fn write_out(dir: &Path, output: &LabOutput) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating --out {}", dir.display()))?;
    write_json(&dir.join("results.json"), output)?;
    report::write(dir, output).context("writing the HTML report")
}

/// The report (report.html, its plots, results.json) in `dir` from results that `--json` or
/// `--out` wrote earlier, here or on another machine (a GPU machine's run): the files'
/// studies in the order given, the sizing summary computed again from them.
pub fn report_from(files: &[PathBuf], dir: &Path) -> anyhow::Result<LabOutput> {
    let mut output = LabOutput {
        secrelay: env!("CARGO_PKG_VERSION").into(),
        studies: Vec::new(),
        sizing: None,
    };
    for f in files {
        let text =
            std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
        let one: LabOutput = serde_json::from_str(&text)
            .with_context(|| format!("{}: not the lab's JSON results", f.display()))?;
        output.studies.extend(one.studies);
    }
    output.sizing = Some(sizing::summarize(&output));
    write_out(dir, &output)?;
    Ok(output)
}

/// States the harness's own per-op cost against the smallest time the study reports (the
/// lab must not be what it measures).
fn overhead_note(report: &StudyReport) -> Option<String> {
    let smallest = report
        .tables
        .iter()
        .flat_map(|t| {
            t.columns
                .iter()
                .filter(|c| c.unit.as_deref() == Some("ns"))
                .flat_map(move |c| {
                    t.rows
                        .iter()
                        .filter_map(move |r| r.get(&c.key).and_then(Cell::as_f64))
                })
        })
        .filter(|v| *v > 0.0)
        .min_by(f64::total_cmp)?;
    let o = report.method.harness_overhead_ns;
    Some(format!(
        "Harness overhead: {o:.2} ns per operation, measured with an empty operation and subtracted; {:.2}% of the smallest time reported ({} ns).",
        o / smallest * 100.0,
        frame::format_num(smallest)
    ))
}

/// Writes JSON through a temporary file and a rename, so a reader never sees half a file.
pub fn write_json(path: &Path, value: &impl serde::Serialize) -> anyhow::Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir)
        .with_context(|| format!("writing {}", path.display()))?;
    serde_json::to_writer_pretty(&mut tmp, value)?;
    tmp.write_all(b"\n")?;
    tmp.persist(path)
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}
