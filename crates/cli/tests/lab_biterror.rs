//! `secrelay lab biterror --smoke --json`: every cipher, mode and SRTP profile is there, and
//! one flipped bit does what each mode's structure says (seed 002's table), while the
//! authenticated modes and SRTP refuse the tampered data.

mod lab_support;

use lab_support::{run_study, PROFILES};
use serde_json::Value;

fn num(row: &Value, key: &str) -> f64 {
    row[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} is not a number in {row}"))
}

fn text<'a>(row: &'a Value, key: &str) -> &'a str {
    row[key]
        .as_str()
        .unwrap_or_else(|| panic!("{key} is not text in {row}"))
}

const STREAMS: [&str; 3] = ["raw", "ulaw", "opus"];

#[test]
fn biterror_quick_json() {
    let (study, stdout) = run_study("biterror");
    let study = &study;
    assert!(stdout.contains("rejected (AuthFailed)"), "{stdout}");
    let table = |id: &str| -> Vec<Value> {
        study["tables"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["id"] == id)
            .unwrap_or_else(|| panic!("no table {id}"))["rows"]
            .as_array()
            .unwrap()
            .clone()
    };
    let rows = table("biterror");
    let row = |cipher: &str, mode: &str| -> Value {
        rows.iter()
            .find(|r| r["cipher"] == cipher && r["mode"] == mode)
            .unwrap_or_else(|| panic!("no row {cipher} {mode}"))
            .clone()
    };

    // The seed's table: (cipher, mode, bytes the mode puts at risk).
    let mut expected: Vec<(&str, &str, Option<f64>)> = Vec::new();
    for aes in ["AES-128", "AES-256"] {
        for (mode, n) in [
            ("ECB", 16.0),
            ("CBC", 17.0),
            ("CFB-128", 17.0),
            ("CFB-8", 17.0),
            ("OFB", 1.0),
            ("CTR", 1.0),
        ] {
            expected.push((aes, mode, Some(n)));
        }
        expected.push((aes, "GCM", None));
    }
    for (mode, n) in [("ECB", 8.0), ("CBC", 9.0), ("CFB-64", 9.0), ("OFB", 1.0)] {
        expected.push(("3DES (EDE3)", mode, Some(n)));
    }
    expected.push(("RC4-128", "stream", Some(1.0)));
    expected.push(("ChaCha20", "stream", Some(1.0)));
    expected.push(("ChaCha20-Poly1305", "AEAD", None));

    for (cipher, mode, at_risk) in &expected {
        let r = row(cipher, mode);
        assert!(!text(&r, "verdict").contains("UNEXPECTED"), "{r}");
        match at_risk {
            Some(n) => {
                assert_eq!(num(&r, "predicted"), *n, "{cipher} {mode}");
                for s in STREAMS {
                    let b = num(&r, &format!("{s}_bytes"));
                    // A garbled byte equals the plaintext by chance 1 time in 256.
                    assert!(
                        b == *n || b == n - 1.0,
                        "{cipher} {mode} {s}: {b} bytes of {n}"
                    );
                    let samples = num(&r, &format!("{s}_samples"));
                    assert!(
                        samples >= 1.0,
                        "{cipher} {mode} {s}: the damage reaches the decoded audio"
                    );
                }
                if *cipher == "RC4-128" {
                    assert!(r["openssl_agrees"]["not_offered"].is_string(), "{r}");
                } else {
                    assert_eq!(text(&r, "openssl_agrees"), "yes", "{cipher} {mode}");
                }
            }
            None => {
                for s in STREAMS {
                    assert_eq!(
                        text(&r, &format!("{s}_bytes")),
                        "rejected",
                        "{cipher} {mode}"
                    );
                }
                assert!(text(&r, "verdict").starts_with("rejected"));
                assert_eq!(text(&r, "openssl_agrees"), "yes");
            }
        }
    }
    // The structural facts, exactly: a whole block for ECB, a block and a byte for CBC (raw
    // PCM, the same on every machine), one byte for OFB and CTR on every stream, and one
    // decoded sample for one G.711 byte.
    for aes in ["AES-128", "AES-256"] {
        assert_eq!(num(&row(aes, "ECB"), "raw_bytes"), 16.0);
        assert_eq!(num(&row(aes, "CBC"), "raw_bytes"), 17.0);
        for mode in ["CTR", "OFB"] {
            for s in STREAMS {
                assert_eq!(
                    num(&row(aes, mode), &format!("{s}_bytes")),
                    1.0,
                    "{aes} {mode} {s}"
                );
            }
            assert_eq!(num(&row(aes, mode), "ulaw_samples"), 1.0);
        }
    }

    // SRTP: every profile rejects the tampered packet, and only it.
    let profiles = PROFILES;
    let srtp = table("biterror_srtp");
    assert_eq!(srtp.len(), profiles.len() * STREAMS.len());
    for p in profiles {
        let r = rows
            .iter()
            .find(|r| r["cipher"] == format!("SRTP {p}"))
            .unwrap_or_else(|| panic!("no SRTP row {p}"));
        assert_eq!(text(r, "verdict"), "packet rejected (AuthFailed)");
        for s in STREAMS {
            assert_eq!(text(r, &format!("{s}_bytes")), "rejected");
        }
        let per_stream: Vec<&Value> = srtp.iter().filter(|r| r["profile"] == p).collect();
        assert_eq!(per_stream.len(), 3, "{p}");
        for r in per_stream {
            assert_eq!(num(r, "rejected"), 1.0, "{r}");
            assert_eq!(text(r, "error"), "rejected (AuthFailed)");
            assert_eq!(text(r, "others_intact"), "yes");
            assert!(num(r, "packets") >= 500.0);
            // Without the tag check the counter-mode keystream passes one byte through.
            assert_eq!(num(r, "untagged_bytes"), 1.0, "{r}");
            assert!(num(r, "dropped_samples") >= 160.0, "{r}");
        }
    }
    assert_eq!(rows.len(), expected.len() + profiles.len());

    // The conclusions are read from the table: every decrypting row is named in the group of
    // its measured byte count, every refusing row among the refusals, and the SRTP line
    // counts the profiles.
    let notes: Vec<&str> = study["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    let note = |starts: &str| -> &str {
        notes
            .iter()
            .find(|n| n.starts_with(starts))
            .unwrap_or_else(|| panic!("no note {starts:?} in {notes:#?}"))
    };
    let groups = note("Plaintext bytes changed by one flipped ciphertext bit");
    let refused = note("Refused the whole tampered stream");
    for (cipher, mode, at_risk) in &expected {
        let r = row(cipher, mode);
        if at_risk.is_none() {
            assert!(
                refused.contains(mode) && refused.contains(cipher.split(' ').next().unwrap()),
                "{cipher} {mode} missing from {refused}"
            );
            continue;
        }
        let counts: Vec<u64> = STREAMS
            .iter()
            .map(|s| num(&r, &format!("{s}_bytes")) as u64)
            .collect();
        let (lo, hi) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
        let label = if lo == hi {
            format!("{lo} byte")
        } else {
            format!("{lo}–{hi} byte")
        };
        // "… 1 byte: AES-128/AES-256 OFB, RC4-128/ChaCha20 stream; 8 bytes: …"
        let (_, body) = groups.split_once("differ): ").expect("the groups");
        let named = body
            .trim_end_matches('.')
            .split("; ")
            .filter_map(|g| g.split_once(": "))
            .filter(|(l, _)| *l == label || *l == format!("{label}s"))
            .flat_map(|(_, items)| items.split(", "))
            .filter_map(|item| item.rsplit_once(' '))
            .any(|(ciphers, m)| m == *mode && ciphers.split('/').any(|c| c == *cipher));
        assert!(
            named,
            "{cipher} {mode} ({counts:?}) not under {label} in {groups}"
        );
    }
    assert!(
        note("SRTP:").starts_with(&format!(
            "SRTP: all {} profiles rejected exactly the tampered packet",
            profiles.len()
        )),
        "{notes:#?}"
    );
}
