//! The binary operators deploy (`serve`, `srtp`, `ca`, `token`) builds without the lab and the
//! demo, and links none of the weak or pre-release crypto the lab measures, nor its plotting
//! or peer stacks, nor the test kit's simulated clients.

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

/// The package names in `cargo tree -p secrelay` (normal dependencies) with these flags.
fn tree(flags: &[&str]) -> Vec<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "tree", "-p", "secrelay", "-e", "normal", "--prefix", "none", "--locked",
        ])
        .args(flags)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo runs");
    assert!(
        out.status.success(),
        "cargo tree {flags:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
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
