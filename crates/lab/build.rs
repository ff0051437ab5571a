//! Records the versions of the libraries the lab compares, read from the workspace's
//! Cargo.lock, so every report can say exactly what was measured.
use std::fmt::Write as _;
use std::path::PathBuf;

const WATCHED: &[&str] = &[
    "aws-lc-rs",
    "aws-lc-sys",
    "openssl",
    "openssl-sys",
    "srtp2-sys",
    "ring",
    "p192",
    "p224",
    "p256",
    "p384",
    "p521",
    "k256",
    "bp256",
    "bp384",
    "rsa",
    "ed25519-dalek",
    "ed448-goldilocks",
    "x25519-dalek",
    "aes",
    "ctr",
    "cbc",
    "cfb-mode",
    "ofb",
    "ecb",
    "aes-gcm",
    "chacha20",
    "chacha20poly1305",
    "des",
    "rc4",
    "sha1",
    "hmac",
    "dimpl",
    "webrtc-srtp",
    "webrtc-dtls",
    "opus",
    "audiopus_sys",
];

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let lock = manifest.join("../../Cargo.lock");
    println!("cargo:rerun-if-changed={}", lock.display());
    let text = std::fs::read_to_string(&lock).unwrap_or_default();
    let mut found: Vec<(String, String)> = Vec::new();
    let mut name: Option<String> = None;
    for line in text.lines() {
        if line == "[[package]]" {
            name = None;
        } else if let Some(v) = line.strip_prefix("name = ") {
            name = Some(v.trim_matches('"').to_string());
        } else if let Some(v) = line.strip_prefix("version = ") {
            if let Some(n) = name.take() {
                if WATCHED.contains(&n.as_str()) && !found.iter().any(|(f, _)| *f == n) {
                    found.push((n, v.trim_matches('"').to_string()));
                }
            }
        }
    }
    found.sort();
    let mut out = String::from("/// Crate versions from Cargo.lock (name, version).\npub const LOCKED: &[(&str, &str)] = &[\n");
    for (n, v) in &found {
        writeln!(out, "    ({n:?}, {v:?}),").expect("write to String");
    }
    out.push_str("];\n");
    let dest = PathBuf::from(std::env::var("OUT_DIR").expect("set by cargo")).join("versions.rs");
    std::fs::write(dest, out).expect("write versions.rs");
}
