//! Builds the small Go programs in the repository's `peers/` folder (pion/srtp, pion/dtls)
//! with `go build`, once per process, so the lab can measure the Go stacks beside ours.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Where the Go peers' sources are: `$SECRELAY_PEERS_DIR`, else the checkout this binary was
/// built from.
pub fn peers_dir() -> PathBuf {
    std::env::var_os("SECRELAY_PEERS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let lab = Path::new(env!("CARGO_MANIFEST_DIR"));
            // crates/lab sits two levels below the checkout.
            lab.ancestors().nth(2).unwrap_or(lab).join("peers")
        })
}

static BUILT: Mutex<Vec<(String, Result<PathBuf, String>)>> = Mutex::new(Vec::new());

/// Bound on one `go build` (a cold module cache downloads from the Go proxy).
const BUILD_TIMEOUT: Duration = Duration::from_secs(300);

/// Builds `peers/<name>` and returns the binary, or why it cannot be had here (no Go
/// toolchain, no sources, modules not downloadable). The result is cached per process.
pub fn build(name: &str) -> Result<PathBuf, String> {
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, r)) = built.iter().find(|(n, _)| n == name) {
        return r.clone();
    }
    let r = build_uncached(name);
    built.push((name.to_string(), r.clone()));
    r
}

fn build_uncached(name: &str) -> Result<PathBuf, String> {
    let src = peers_dir().join(name);
    if !src.join("go.mod").is_file() {
        return Err(format!(
            "the {name} sources are not at {} (set SECRELAY_PEERS_DIR)",
            src.display()
        ));
    }
    let go = go_toolchain()?;
    let out_dir = std::env::temp_dir().join(format!("secrelay-peers-{}", users_id()));
    std::fs::create_dir_all(&out_dir)
        .map_err(|e| format!("creating {}: {e}", out_dir.display()))?;
    let bin = out_dir.join(name);
    let mut child = Command::new(go)
        .arg("build")
        .arg("-o")
        .arg(&bin)
        .arg(".")
        .current_dir(&src)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run go build: {e}"))?;
    let started = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => return Ok(bin),
            Ok(Some(status)) => {
                let mut err = String::new();
                if let Some(mut s) = child.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut s, &mut err);
                }
                return Err(format!(
                    "go build of {name} failed ({status}): {}",
                    err.trim()
                ));
            }
            Ok(None) if started.elapsed() > BUILD_TIMEOUT => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "go build of {name} took longer than {BUILD_TIMEOUT:?}"
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => return Err(format!("waiting for go build: {e}")),
        }
    }
}

/// The Go toolchain: `$SECRELAY_GO`, else `.tools/go/bin/go` beside the peers' folder (where
/// `scripts/setup` puts Go 1.24 when the `go` on `PATH` is older), else `go` on `PATH`.
pub fn go_toolchain() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("SECRELAY_GO") {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(format!("SECRELAY_GO={} is not a file", p.display()))
        };
    }
    let peers = peers_dir();
    let local = peers
        .parent()
        .unwrap_or(&peers)
        .join(".tools")
        .join("go")
        .join("bin")
        .join("go");
    if local.is_file() {
        return Ok(local);
    }
    which("go").ok_or_else(|| {
        format!(
            "Go toolchain not found (no $SECRELAY_GO, no {}, no go on PATH; scripts/setup installs one)",
            local.display()
        )
    })
}

fn users_id() -> String {
    std::env::var("USER").unwrap_or_else(|_| "user".into())
}

fn which(cmd: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join(cmd))
            .find(|p| p.is_file())
    })
}
