//! `secrelay lab srtp --quick --json`: every profile × size × stack has a row, figures are
//! finite and positive (or the cell says why the stack lacks the profile), and the method is
//! recorded.

use std::process::Command;

use serde_json::Value;

fn run_lab(study: &str) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("out.json");
    let out = Command::new(env!("CARGO_BIN_EXE_secrelay"))
        .args(["lab", study, "--quick", "--no-progress", "--json"])
        .arg(&json)
        .output()
        .expect("run secrelay");
    assert!(
        out.status.success(),
        "lab {study} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("SRTP cost per RTP packet"),
        "table printed:\n{text}"
    );
    serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap()
}

#[test]
fn lab_srtp_quick_has_every_row_with_finite_figures() {
    let v = run_lab("srtp");
    let study = &v["studies"][0];
    assert_eq!(study["study"], "srtp");
    let method = &study["method"];
    for key in [
        "timed",
        "runs",
        "warmup_ms",
        "harness_overhead_ns",
        "machine",
        "versions",
        "date",
        "instructions",
    ] {
        assert!(!method[key].is_null(), "method lacks {key}");
    }
    assert!(method["versions"]["libsrtp (runtime)"]
        .as_str()
        .unwrap()
        .contains("2.3"));
    let rows = study["tables"][0]["rows"].as_array().unwrap();
    let profiles = [
        "AES_CM_128_HMAC_SHA1_80",
        "AES_CM_128_HMAC_SHA1_32",
        "AES_256_CM_HMAC_SHA1_80",
        "AES_256_CM_HMAC_SHA1_32",
        "AEAD_AES_128_GCM",
        "AEAD_AES_256_GCM",
        "NULL_HMAC_SHA1_80",
    ];
    let stacks = [
        "secrelay",
        "secrelay/rustcrypto",
        "secrelay/aws-lc",
        "libsrtp 2 + OpenSSL",
        "webrtc-srtp (webrtc-rs)",
        "pion/srtp (Go)",
    ];
    for p in profiles {
        for size in ["opus 100 B", "audio 172 B", "video 1200 B"] {
            for s in stacks {
                let row = rows
                    .iter()
                    .find(|r| r["profile"] == p && r["packet"] == size && r["stack"] == s)
                    .unwrap_or_else(|| panic!("no row for {p} {size} {s}"));
                for key in ["protect_ns", "unprotect_ns"] {
                    let cell = &row[key];
                    match cell.as_f64() {
                        Some(x) => assert!(x.is_finite() && x > 0.0, "{p} {size} {s} {key} = {x}"),
                        None => {
                            let why = cell["not_offered"]
                                .as_str()
                                .unwrap_or_else(|| panic!("{p} {size} {s} {key}: {cell}"));
                            assert!(!why.is_empty());
                            // Only the peers may lack a profile; secrelay and libsrtp have all of them.
                            assert!(
                                !s.starts_with("secrelay") && !s.starts_with("libsrtp"),
                                "{s} {p}: {why}"
                            );
                        }
                    }
                }
            }
        }
    }
    // Instruction counts are present when valgrind is, else the method says why not.
    let instr = method["instructions"].as_str().unwrap();
    if instr.starts_with("callgrind") {
        let r = rows
            .iter()
            .find(|r| {
                r["profile"] == "AES_CM_128_HMAC_SHA1_80"
                    && r["packet"] == "audio 172 B"
                    && r["stack"] == "secrelay"
            })
            .unwrap();
        assert!(r["instructions"].as_f64().unwrap() > 100.0);
    } else {
        assert!(instr.starts_with("not counted"), "{instr}");
    }
    assert!(study["plots"].as_array().unwrap().len() >= 4);
}
