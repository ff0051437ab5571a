//! Peak heap per operation (`004`'s speed vs memory trade-off), measured with valgrind's
//! DHAT, one child process per operation (`secrelay lab __mem crypto LIB|ROW`).
//!
//! The child prepares the operation, runs it once (one-time set-up, lazily built tables),
//! then allocates a ballast larger than anything the process held so far and runs the
//! operation once more inside [`crate::count::callgrind_region`]. Everything else stays
//! put while the operation runs, and the ballast makes the process's global heap peak fall
//! inside the operation, so the bytes DHAT reports live at that peak from allocations whose
//! stack passes through the region are the operation's own peak. C (OpenSSL, AWS-LC) and
//! Rust allocations are both seen: both go through `malloc`.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context as _};
use serde::Deserialize;

use super::algs::{row_id, rows, Lib};
use super::{prepare, Keys};

/// Where the child finds the parent's RSA keys (PKCS#8 DER files `rsaBITS.der`).
pub const KEYS_ENV: &str = "SECRELAY_LAB_RSA_KEYS";

const BALLAST: usize = 256 << 20;
const MAX_CALLERS: usize = 250;

/// One operation's heap figures.
#[derive(Debug, Clone, Copy)]
pub struct Heap {
    /// Bytes live at the operation's peak, from allocations it made.
    pub peak: f64,
    /// Bytes it allocated in all.
    pub allocated: f64,
    /// Allocations it made.
    pub blocks: f64,
}

/// Child side: prepares `id` (`LIB|ROW`), runs it once, then once more in the region with
/// the ballast held.
pub fn child(id: &str) -> anyhow::Result<()> {
    let (lib_key, row) = id
        .split_once('|')
        .with_context(|| format!("operation id {id:?} is not LIB|ROW"))?;
    let lib = Lib::ALL
        .into_iter()
        .find(|l| l.key() == lib_key)
        .with_context(|| format!("unknown library {lib_key:?}"))?;
    let (alg, op) = rows()
        .into_iter()
        .find(|&(a, o)| row_id(a, o) == row)
        .with_context(|| format!("unknown row {row:?}"))?;
    let keys = Keys::default();
    if let Some(dir) = std::env::var_os(KEYS_ENV) {
        keys.load(Path::new(&dir))
            .context("loading the parent's RSA keys")?;
    }
    let mut p = prepare(lib, alg, op, &keys).map_err(|why| anyhow::anyhow!("{id}: {why}"))?;
    (p.run)();
    let ballast: Vec<u8> = Vec::with_capacity(BALLAST);
    black_box(&ballast);
    crate::count::callgrind_region(&mut *p.run, 1);
    drop(black_box(ballast));
    Ok(())
}

#[derive(Deserialize)]
struct Dhat {
    pps: Vec<Pp>,
    ftbl: Vec<String>,
}

#[derive(Deserialize)]
struct Pp {
    tb: u64,
    tbk: u64,
    gb: u64,
    fs: Vec<usize>,
}

fn parse(path: &Path) -> anyhow::Result<Heap> {
    let d: Dhat = serde_json::from_slice(&std::fs::read(path)?)
        .with_context(|| format!("parsing {}", path.display()))?;
    let region: Vec<bool> = d
        .ftbl
        .iter()
        .map(|f| f.contains("secrelay_lab::count::callgrind_region"))
        .collect();
    let mut h = Heap {
        peak: 0.0,
        allocated: 0.0,
        blocks: 0.0,
    };
    for pp in &d.pps {
        if pp.fs.len() >= MAX_CALLERS {
            bail!("an allocation stack is deeper than {MAX_CALLERS} frames: cannot tell whether the operation made it");
        }
        if pp
            .fs
            .iter()
            .any(|&f| region.get(f).copied().unwrap_or(false))
        {
            h.peak += pp.gb as f64;
            h.allocated += pp.tb as f64;
            h.blocks += pp.tbk as f64;
        }
    }
    if h.blocks > 0.0 && h.peak == 0.0 {
        bail!("the heap peak fell outside the operation (the ballast did not work)");
    }
    Ok(h)
}

/// Parent side: runs each operation in its own DHAT child. Returns figures by id, or
/// the reason there are none (per id, or for all).
pub fn measure(
    exe: &Path,
    ids: &[String],
    keys: &Keys,
) -> Result<BTreeMap<String, Result<Heap, String>>, String> {
    if let Some(reason) = crate::count::unavailable_reason() {
        return Err(format!("not measured: {reason}"));
    }
    let dir = tempfile::tempdir().map_err(|e| format!("not measured: temporary directory: {e}"))?;
    keys.save(dir.path())
        .map_err(|e| format!("not measured: saving the RSA keys for the children: {e}"))?;
    let mut out = BTreeMap::new();
    for (i, id) in ids.iter().enumerate() {
        let file: PathBuf = dir.path().join(format!("dhat{i}.json"));
        let r = Command::new("valgrind")
            .arg("--tool=dhat")
            .arg(format!("--num-callers={MAX_CALLERS}"))
            .arg(format!("--dhat-out-file={}", file.display()))
            .arg(exe)
            .args(["lab", "__mem", "crypto", id])
            .env(KEYS_ENV, dir.path())
            .output()
            .map_err(|e| format!("running valgrind: {e}"))
            .and_then(|o| {
                if o.status.success() {
                    parse(&file).map_err(|e| format!("{e:#}"))
                } else {
                    let err = String::from_utf8_lossy(&o.stderr);
                    Err(format!(
                        "the DHAT child failed: {}",
                        err.lines().rev().take(3).collect::<Vec<_>>().join(" | ")
                    ))
                }
            });
        out.insert(id.clone(), r);
    }
    Ok(out)
}
