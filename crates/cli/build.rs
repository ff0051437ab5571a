//! The build `secrelay --version` and `/metrics` (`secrelay_build_info`) name: the git commit
//! of the checkout (`git rev-parse`), or `SECRELAY_COMMIT` when set (a build from a source
//! archive that knows its commit), else `unknown`; and the cargo profile.

use std::path::PathBuf;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (!s.is_empty()).then_some(s)
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=SECRELAY_COMMIT");
    let from_env = std::env::var("SECRELAY_COMMIT")
        .ok()
        .filter(|c| !c.trim().is_empty());
    let commit = from_env.or_else(|| {
        let c = git(&["rev-parse", "--short=12", "HEAD"])?;
        // Build again when HEAD moves: its file, and the branch refs it may point at.
        for dir in [
            git(&["rev-parse", "--git-dir"]),
            git(&["rev-parse", "--git-common-dir"]),
        ]
        .into_iter()
        .flatten()
        {
            let dir = PathBuf::from(dir);
            for f in ["HEAD", "packed-refs", "refs/heads"] {
                if dir.join(f).exists() {
                    println!("cargo:rerun-if-changed={}", dir.join(f).display());
                }
            }
        }
        Some(c)
    });
    println!(
        "cargo:rustc-env=SECRELAY_COMMIT={}",
        commit.unwrap_or_else(|| "unknown".into())
    );
    let profile = std::env::var("PROFILE").unwrap_or_else(|_| "unknown".into());
    println!("cargo:rustc-env=SECRELAY_PROFILE={profile}");
}
