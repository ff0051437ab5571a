//! Deterministic cost: instructions per operation, counted by valgrind's callgrind
//! (`--collect-atstart=no`, collection toggled on only inside [`callgrind_region`], one
//! profile dump per region). Time depends on load, locks and context switches; the
//! instruction count does not, which is why `000_…` used it.
//!
//! The lab re-runs its own binary under valgrind (`secrelay lab __count STUDY`); the child
//! builds the study's [`CountedOp`]s, runs each once outside collection (lazy set-up,
//! tables), then an empty region (the harness baseline) and one region per op. The parent
//! reads the dumps in order.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context as _};

/// An operation whose instructions are counted.
pub struct CountedOp {
    /// Id, unique within the study (the study maps counts back by it).
    pub id: String,
    /// How many times the region runs it (counts are divided by this).
    pub iters: u64,
    /// The operation. It must `black_box` what it produces.
    pub run: Box<dyn FnMut()>,
}

impl CountedOp {
    /// A counted operation.
    pub fn new(id: impl Into<String>, iters: u64, run: impl FnMut() + 'static) -> CountedOp {
        CountedOp {
            id: id.into(),
            iters: iters.max(1),
            run: Box::new(run),
        }
    }
}

/// The only function callgrind collects in. Not inlined, not generic: its symbol name is
/// what `--toggle-collect` matches.
#[inline(never)]
pub fn callgrind_region(op: &mut dyn FnMut(), iters: u64) {
    for _ in 0..iters {
        op();
    }
}

/// Child side: runs the ops in regions and prints one id per line on stdout, in region
/// order (the first line is the empty baseline, `__empty`). With `once`, each region runs its
/// op once whatever its `iters` (a smoke run: the count is then of one operation).
pub fn run_child(ops: Vec<CountedOp>, once: bool) {
    let mut empty = || std::hint::black_box(());
    empty();
    callgrind_region(&mut empty, 1);
    println!("__empty 1");
    for mut op in ops {
        let iters = if once { 1 } else { op.iters };
        (op.run)();
        callgrind_region(&mut *op.run, iters);
        println!("{} {}", op.id, iters);
    }
}

/// Why instruction counts are not available here, if they are not.
pub fn unavailable_reason() -> Option<String> {
    match Command::new("valgrind").arg("--version").output() {
        Ok(o) if o.status.success() => None,
        Ok(_) => Some("valgrind --version failed".into()),
        Err(_) => Some("valgrind is not installed (apt install valgrind)".into()),
    }
}

/// The valgrind version string.
pub fn valgrind_version() -> Option<String> {
    let o = Command::new("valgrind").arg("--version").output().ok()?;
    Some(String::from_utf8_lossy(&o.stdout).trim().to_string())
}

/// Parent side: runs `exe args…` under callgrind and returns instructions per op by id
/// (baseline subtracted, divided by the op's iterations).
pub fn count(exe: &Path, args: &[&str]) -> anyhow::Result<BTreeMap<String, f64>> {
    let dir = tempfile::tempdir().context("temporary directory for callgrind output")?;
    let out_pattern = dir.path().join("cg.out");
    let output = Command::new("valgrind")
        .arg("--tool=callgrind")
        .arg("--collect-atstart=no")
        .arg("--toggle-collect=secrelay_lab::count::callgrind_region")
        .arg("--dump-after=secrelay_lab::count::callgrind_region")
        .arg(format!("--callgrind-out-file={}", out_pattern.display()))
        .arg(exe)
        .args(args)
        .output()
        .with_context(|| format!("running {} under valgrind", exe.display()))?;
    if !output.status.success() {
        bail!(
            "{} {} under callgrind failed: {}",
            exe.display(),
            args.join(" "),
            String::from_utf8_lossy(&output.stderr)
                .lines()
                .rev()
                .take(5)
                .collect::<Vec<_>>()
                .join(" | ")
        );
    }
    let ids: Vec<(String, u64)> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|l| {
            let (id, n) = l.rsplit_once(' ')?;
            Some((id.to_string(), n.parse().ok()?))
        })
        .collect();
    // Dumps are cg.out.N (N = 1, 2, …) in region order; cg.out itself is the final dump.
    let mut dumps: Vec<(u64, u64)> = Vec::new();
    for entry in std::fs::read_dir(dir.path())? {
        let path = entry?.path();
        let Some(n) = path
            .extension()
            .and_then(|e| e.to_str())
            .and_then(|e| e.parse::<u64>().ok())
        else {
            continue;
        };
        let text = std::fs::read_to_string(&path)?;
        let total = text
            .lines()
            .find_map(|l| {
                l.strip_prefix("summary:")
                    .or_else(|| l.strip_prefix("totals:"))
            })
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
            .with_context(|| format!("no totals in {}", path.display()))?;
        dumps.push((n, total));
    }
    dumps.sort();
    if dumps.len() != ids.len() {
        bail!(
            "callgrind wrote {} region dumps for {} regions",
            dumps.len(),
            ids.len()
        );
    }
    let baseline = dumps.first().map(|d| d.1).unwrap_or(0) as f64;
    let mut counts = BTreeMap::new();
    for ((id, iters), (_, total)) in ids.iter().zip(&dumps).skip(1) {
        counts.insert(
            id.clone(),
            ((*total as f64 - baseline) / *iters as f64).max(0.0),
        );
    }
    Ok(counts)
}
