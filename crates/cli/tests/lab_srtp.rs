//! `secrelay lab srtp --quick --json`: every profile × size × stack has a row, figures are
//! finite and positive (or the cell says why the stack lacks the profile), and the method is
//! recorded.

mod lab_support;

use lab_support::{rows, run_study, PROFILES};

#[test]
fn lab_srtp_quick_has_every_row_with_finite_figures() {
    let (study, stdout) = run_study("srtp");
    let study = &study;
    assert!(
        stdout.contains("SRTP cost per RTP packet"),
        "table printed:\n{stdout}"
    );
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
    let rows = rows(study, "srtp_per_packet");
    let stacks = [
        "secrelay",
        "secrelay/rustcrypto",
        "secrelay/aws-lc",
        "libsrtp 2 + OpenSSL",
        "webrtc-srtp (webrtc-rs)",
        "pion/srtp (Go)",
    ];
    for p in PROFILES {
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
