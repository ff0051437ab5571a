//! `secrelay lab amortization --smoke --json`: every operation × library × SRTP stack row,
//! finite positive figures, the facts that hold on any machine (RSA key generation costs more
//! packets than ECDSA P-256 key generation, by orders of magnitude), and the arithmetic between
//! the columns.

mod lab_support;

use lab_support::{rows, run_study};

#[test]
fn amortization_quick_rows_and_facts() {
    let (study, _) = run_study("amortization");
    let rows = rows(&study, "amortization");
    let get = |op: &str, lib: &str, stack: &str, key: &str| -> f64 {
        let r = rows
            .iter()
            .find(|r| r["operation"] == op && r["library"] == lib && r["srtp_stack"] == stack)
            .unwrap_or_else(|| panic!("no row {op} {lib} {stack}"));
        let x = r[key]
            .as_f64()
            .unwrap_or_else(|| panic!("{op} {lib} {stack} {key}: {}", r[key]));
        assert!(x.is_finite() && x > 0.0, "{op} {lib} {stack} {key} = {x}");
        x
    };
    for lib in ["aws-lc-rs", "OpenSSL"] {
        for stack in ["secrelay", "libsrtp 2 + OpenSSL"] {
            for alg in ["RSA-2048", "RSA-3072", "ECDSA P-256"] {
                for what in ["key generation", "signature"] {
                    let op = format!("{alg} {what}");
                    for key in [
                        "cost_us",
                        "audio_packets",
                        "audio_seconds",
                        "video_packets",
                        "video_seconds",
                    ] {
                        get(&op, lib, stack, key);
                    }
                    // Seconds of media follow from packets at 50 packets/s (audio).
                    let p = get(&op, lib, stack, "audio_packets");
                    let s = get(&op, lib, stack, "audio_seconds");
                    assert!((p / 50.0 - s).abs() <= 1e-9 * p.max(1.0));
                }
            }
            assert!(
                get("RSA-2048 key generation", lib, stack, "audio_packets")
                    > get("ECDSA P-256 key generation", lib, stack, "audio_packets")
            );
            assert!(
                get("RSA-3072 signature", lib, stack, "audio_packets")
                    > get("ECDSA P-256 signature", lib, stack, "audio_packets")
            );
            // Every operation is divided by the same two per-packet costs of this stack, so
            // video packets / audio packets is one ratio for all of them. (Which packet costs
            // more is a timing, and a quick run on a loaded machine can flip it: not asserted.)
            let ratio = |op: &str| {
                get(op, lib, stack, "video_packets") / get(op, lib, stack, "audio_packets")
            };
            let r = ratio("RSA-2048 signature");
            for op in ["RSA-3072 key generation", "ECDSA P-256 signature"] {
                assert!(
                    (ratio(op) / r - 1.0).abs() < 1e-9,
                    "{op}: {} vs {r}",
                    ratio(op)
                );
            }
        }
    }
    assert_eq!(study["plots"][0]["kind"], "bars");
    assert!(!study["notes"].as_array().unwrap().is_empty());
}
