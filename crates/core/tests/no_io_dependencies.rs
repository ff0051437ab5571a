//! The core stays sans-IO: nothing it links (its normal dependencies, all the way down) is a
//! runtime, a poll loop, an HTTP or TLS server, a metrics exporter, or the server or test kit
//! built on it. Read with `cargo tree` from the lock file, offline.

use std::process::Command;

/// Crates the core must never link.
const IO: &[&str] = &[
    "tokio",
    "mio",
    "axum",
    "hyper",
    "hyper-util",
    "tower",
    "tower-http",
    "rustls",
    "tokio-rustls",
    "prometheus-client",
    "secrelay-gateway",
    "secrelay-testkit",
];

#[test]
fn the_core_links_no_runtime_socket_loop_http_tls_or_metrics_crate() {
    let out = Command::new(env!("CARGO"))
        .args([
            "tree",
            "-p",
            "secrelay-core",
            "-e",
            "normal",
            "--prefix",
            "none",
            "-f",
            "{p}",
            "--offline",
            "--locked",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo tree runs");
    assert!(
        out.status.success(),
        "cargo tree: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tree = String::from_utf8_lossy(&out.stdout);
    let names: Vec<&str> = tree
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(
        names.contains(&"secrelay-wire"),
        "the tree lists the core's dependencies:\n{tree}"
    );
    let linked: Vec<&&str> = IO.iter().filter(|c| names.contains(c)).collect();
    assert!(linked.is_empty(), "the core links {linked:?}:\n{tree}");
}
