//! `secrelay lab handshake --tls`: the TLS load tool against nginx, `openssl s_server -www` and
//! secrelay's own HTTPS server completes full handshakes and resumptions in TLS 1.3 and 1.2,
//! verifying each server against the private CA, and what it counts matches each server's own
//! counters (secrelay's /metrics, s_server's session statistics, nginx's stub_status and
//! access log); the study (`--tls` without a target) runs the three side by side with the DTLS
//! server and writes every table.
//!
//! nginx and openssl come from Debian's packages (scripts/setup); where one is missing the
//! test says SKIPPED, except under CI, where it fails.

mod lab_support;

use std::path::Path;
use std::process::Command;

use lab_support::missing;
use secrelay_dtls::ca::{issue_certificate_for, CaDir, Role};
use secrelay_dtls::KeyType;
use secrelay_lab::handshake::tls_servers::{self, CertFiles, ServerKind, ServerProc};
use serde_json::Value;

fn cert_files(dir: &Path) -> CertFiles {
    let ca = CaDir::init(dir.join("ca"), KeyType::EcdsaP256, false).unwrap();
    let cert = issue_certificate_for(
        ca.certificate(),
        &["127.0.0.1", "localhost"],
        Role::Server,
        KeyType::EcdsaP256,
    )
    .unwrap();
    let (pem, key) = cert.to_pem();
    let end = pem.find("-----END CERTIFICATE-----").unwrap() + "-----END CERTIFICATE-----\n".len();
    std::fs::write(dir.join("leaf.pem"), &pem[..end]).unwrap();
    std::fs::write(dir.join("leaf.key"), key.as_bytes()).unwrap();
    CertFiles {
        cert: dir.join("leaf.pem"),
        key: dir.join("leaf.key"),
        ca_der: ca.certificate().der().to_vec(),
        key_type: "ecdsa-p256".into(),
    }
}

/// `secrelay lab handshake --tls --target ADDR …`; its JSON report.
fn load(addr: std::net::SocketAddr, ca: &Path, extra: &[&str]) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("load.json");
    let out = Command::new(env!("CARGO_BIN_EXE_secrelay"))
        .args(["lab", "handshake", "--tls", "--target", &addr.to_string()])
        .args(["--ca"])
        .arg(ca)
        .args(["--connections", "4", "--no-progress", "--json"])
        .arg(&json)
        .args(extra)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "lab handshake --tls {extra:?}: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("handshakes/s") || stdout.contains("/s"),
        "{stdout}"
    );
    serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap()
}

fn n(v: &Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or_else(|| panic!("{key} in {v}"))
}

#[test]
fn the_load_tool_matches_each_servers_own_counters() {
    let test = "the_load_tool_matches_each_servers_own_counters";
    let mut kinds = vec![ServerKind::Secrelay];
    for k in [ServerKind::Nginx, ServerKind::SServer] {
        match tls_servers::unavailable(k) {
            Some(why) => missing(test, &why),
            None => kinds.push(k),
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let files = cert_files(dir.path());
    let ca_pem = dir.path().join("ca").join("ca.pem");
    let exe = Path::new(env!("CARGO_BIN_EXE_secrelay"));
    for kind in kinds {
        let server = match kind {
            ServerKind::Secrelay => ServerProc::secrelay(exe, &files, None),
            ServerKind::Nginx => ServerProc::nginx(&files, None, None),
            _ => ServerProc::s_server(&files, None, None),
        }
        .unwrap_or_else(|e| panic!("starting {}: {e:#}", kind.name()));
        for (version, resume) in [("1.3", false), ("1.3", true), ("1.2", false), ("1.2", true)] {
            let before = server.counted().unwrap();
            let mut extra = vec!["--tls-version", version, "--handshakes", "60"];
            if resume {
                extra.push("--resume");
            }
            let v = load(server.addr, &ca_pem, &extra);
            let after = server.counted().unwrap();
            let what = format!("{} TLS {version} resume {resume}: {v}", kind.name());
            assert_eq!(n(&v, "completed"), 60, "{what}");
            assert_eq!(n(&v, "failed"), 0, "{what}");
            assert_eq!(v["server_certificate"], "ecdsa-p256", "{what}");
            let (full, resumed) = (n(&v, "full"), n(&v, "resumed"));
            if resume {
                // The first connections on each slot have no session yet.
                assert!(resumed >= 50, "{what}");
            } else {
                assert_eq!(resumed, 0, "{what}");
            }
            let delta_full = after.0 - before.0 - server.reading_cost();
            let delta_resumed = after.1 - before.1;
            match kind {
                // nginx counts connections accepted, not handshakes.
                ServerKind::Nginx => assert_eq!(delta_full, 60, "{what}"),
                _ => assert_eq!((delta_full, delta_resumed), (full, resumed), "{what}"),
            }
        }
        if kind == ServerKind::Nginx {
            // With a request per connection, nginx's access log says which were resumed.
            let before = server.access_log().unwrap_or_default().lines().count();
            let v = load(
                server.addr,
                &ca_pem,
                &["--handshakes", "40", "--resume", "--request", "/"],
            );
            assert_eq!(v["responses"]["200"], 40, "{v}");
            let log = server.access_log().unwrap();
            let lines: Vec<&str> = log.lines().skip(before).collect();
            let reused = lines.iter().filter(|l| l.contains("TLSv1.3 r 200")).count() as u64;
            let fresh = lines.iter().filter(|l| l.contains("TLSv1.3 . 200")).count() as u64;
            assert_eq!((fresh, reused), (n(&v, "full"), n(&v, "resumed")), "{log}");
        }
    }
}

#[test]
fn bad_tls_load_flags_name_themselves() {
    for (args, flag) in [
        (vec!["--tls-version", "1.1"], "--tls-version"),
        (vec!["--suites", "TLS_RSA_WITH_RC4_128_SHA"], "--suites"),
        (vec!["--groups", "ffdhe2048"], "--groups"),
        (vec!["--fingerprint", "sha-256 00"], "--fingerprint"),
        (vec!["--cpus", "x"], "--cpus"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_secrelay"))
            .args([
                "lab",
                "handshake",
                "--tls",
                "--target",
                "127.0.0.1:9",
                "--handshakes",
                "1",
            ])
            .args(&args)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(flag), "{args:?}: {err}");
    }
    // Nobody listening: every handshake fails, by reason, and the run still reports.
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = Command::new(env!("CARGO_BIN_EXE_secrelay"))
        .args([
            "lab",
            "handshake",
            "--tls",
            "--target",
            &format!("127.0.0.1:{port}"),
        ])
        .args(["--handshakes", "5", "--no-progress", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["failed"], 5, "{v}");
    let reasons = v["failures"].as_object().unwrap();
    assert!(reasons.keys().all(|k| k.contains("connect")), "{v}");
}

#[test]
fn the_tls_study_runs_the_three_servers_and_the_dtls_server_side_by_side() {
    let test = "the_tls_study_runs_the_three_servers_and_the_dtls_server_side_by_side";
    for k in [ServerKind::Nginx, ServerKind::SServer] {
        if let Some(why) = tls_servers::unavailable(k) {
            missing(test, &why);
            return;
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("tls.json");
    let out = Command::new(env!("CARGO_BIN_EXE_secrelay"))
        .args([
            "lab",
            "handshake",
            "--tls",
            "--smoke",
            "--no-progress",
            "--json",
        ])
        .arg(&json)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let study = &v["studies"][0];
    assert_eq!(study["study"], "tls");
    let table = |id: &str| -> Vec<Value> {
        study["tables"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["id"] == id)
            .unwrap_or_else(|| panic!("table {id}"))["rows"]
            .as_array()
            .unwrap()
            .clone()
    };
    let rates = table("tls_rates");
    // Three servers × (TLS 1.3, 1.2) × (full, resumed), P-256 in --quick.
    assert_eq!(rates.len(), 12, "{rates:?}");
    for r in &rates {
        assert!(r["avg"].as_f64().unwrap() > 0.0, "{r}");
        assert_eq!(r["failed"], 0.0, "{r}");
        let counted = r["counted"].as_str().unwrap_or("");
        assert!(counted.starts_with("yes"), "the server's count: {r}");
    }
    assert!(!table("tls_ratios").is_empty());
    let beside = table("tls_beside_dtls");
    assert_eq!(beside.len(), 2, "{beside:?}");
    assert!(beside[1]["avg"].as_f64().unwrap() > 0.0, "{beside:?}");
    let wire = table("wire");
    assert!(wire
        .iter()
        .any(|r| r["protocol"] == "TLS 1.3" && r["kind"] == "resumed"));
    assert!(wire
        .iter()
        .any(|r| r["protocol"].as_str().unwrap().starts_with("DTLS")));
    let memory = table("half_open_memory");
    assert_eq!(memory.len(), 4, "{memory:?}");
    assert!(
        stdout.contains("tls_rates") || stdout.contains("handshakes per second"),
        "{stdout}"
    );
}
