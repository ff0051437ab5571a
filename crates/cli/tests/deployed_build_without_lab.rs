//! The workspace's builds. The binary operators deploy (`serve`, `srtp`, `ca`, `token`) builds
//! without the lab and the demo, and links none of the weak or pre-release crypto the lab
//! measures, nor its plotting or peer stacks, nor the test kit's simulated clients. Each of the
//! workspace's crates names its own optimization level for test builds.

use std::process::Command;

/// The crates the lab and the demo bring that a deployed gateway must not link.
const LAB_ONLY: [&str; 9] = [
    "des",
    "rc4",
    "p192",
    "p224",
    "ed448-goldilocks",
    "plotters",
    "webrtc-srtp",
    "secrelay-lab",
    "secrelay-testkit",
];

/// What `cargo ARGS` prints, run from this crate's folder; the test fails with cargo's
/// message if it does not succeed.
fn cargo(args: &[&str]) -> Vec<u8> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo runs");
    assert!(
        out.status.success(),
        "cargo {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// The package names in `cargo tree -p secrelay` (normal dependencies) with these flags.
fn tree(flags: &[&str]) -> Vec<String> {
    let mut args = vec![
        "tree", "-p", "secrelay", "-e", "normal", "--prefix", "none", "--locked",
    ];
    args.extend_from_slice(flags);
    String::from_utf8_lossy(&cargo(&args))
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect()
}

#[test]
fn without_default_features_no_lab_crate_is_linked() {
    let deployed = tree(&["--no-default-features"]);
    assert!(
        deployed.iter().any(|c| c == "secrelay-gateway"),
        "{deployed:?}"
    );
    for c in LAB_ONLY {
        assert!(
            !deployed.iter().any(|d| d == c),
            "{c} is linked into the build without the lab"
        );
    }
    // And the default build has them: the list above names what the feature really gates.
    let full = tree(&[]);
    for c in LAB_ONLY {
        assert!(
            full.iter().any(|d| d == c),
            "{c} is not in the default build"
        );
    }
}

/// The workspace's test builds: every crate of the workspace names its own optimization level
/// in the root `Cargo.toml`, so that which of ours are optimized in test builds (those whose
/// loops the tests run at length) is a decision written down, not the profile's default.
#[test]
fn every_workspace_crate_names_its_test_build_opt_level() {
    let out = cargo(&["metadata", "--no-deps", "--format-version", "1", "--locked"]);
    let meta: serde_json::Value = serde_json::from_slice(&out).expect("metadata is JSON");
    let root = meta["workspace_root"].as_str().expect("workspace_root");
    let manifest = std::fs::read_to_string(std::path::Path::new(root).join("Cargo.toml"))
        .expect("the root Cargo.toml reads");
    let packages = meta["packages"].as_array().expect("packages");
    assert!(packages.len() > 10, "{packages:?}");
    for p in packages {
        let name = p["name"].as_str().expect("a package has a name");
        let section = format!("[profile.dev.package.{name}]\nopt-level = ");
        assert!(
            manifest.contains(&section),
            "{name} has no `{}` section in the root Cargo.toml",
            section.lines().next().unwrap_or_default()
        );
    }
}
