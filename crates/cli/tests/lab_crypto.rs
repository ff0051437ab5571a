//! `secrelay lab crypto --smoke`: every row is there, every figure is finite and positive,
//! every missing cell says why, and the facts that hold on any machine hold.

mod lab_support;

use serde_json::Value;

const LIBS: [&str; 3] = ["awslc", "openssl", "rustcrypto"];

fn table<'a>(study: &'a Value, id: &str) -> &'a Value {
    study["tables"]
        .as_array()
        .expect("tables")
        .iter()
        .find(|t| t["id"] == id)
        .unwrap_or_else(|| panic!("table {id} missing"))
}

fn row<'a>(t: &'a Value, id: &str) -> &'a Value {
    t["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .find(|r| r["id"] == id)
        .unwrap_or_else(|| panic!("row {id} missing in {}", t["id"]))
}

fn num(r: &Value, key: &str) -> Option<f64> {
    r.get(key).and_then(Value::as_f64)
}

/// Checks a cell: a finite positive number, or not offered with a reason.
fn check_cell(table: &str, key: &str, v: &Value) {
    if let Some(x) = v.as_f64() {
        if key.ends_with("_spread")
            || key.ends_with("_peak")
            || key.ends_with("_alloc")
            || key.ends_with("_blocks")
        {
            assert!(x.is_finite() && x >= 0.0, "{table}.{key} = {x}");
        } else {
            assert!(x.is_finite() && x > 0.0, "{table}.{key} = {x}");
        }
    } else if let Some(o) = v.get("not_offered") {
        let reason = o.as_str().expect("reason is text");
        assert!(
            reason.len() > 10,
            "{table}.{key}: a not-offered cell without a real reason: {reason:?}"
        );
    } else {
        assert!(v.is_string(), "{table}.{key}: unexpected cell {v}");
    }
}

#[test]
fn lab_crypto_quick() {
    let (study, _) = lab_support::run_study("crypto");
    let study = &study;

    // Every cell of every table: a figure, text, or not offered with its reason.
    for t in study["tables"].as_array().expect("tables") {
        for r in t["rows"].as_array().expect("rows") {
            for (k, c) in r.as_object().expect("row is an object") {
                check_cell(t["id"].as_str().unwrap_or("?"), k, c);
            }
        }
    }

    // Every expected row, and every library has a cell on it.
    let ops = table(study, "crypto_ops");
    let mut expected: Vec<String> = Vec::new();
    for bits in [1024, 2048, 3072, 4096] {
        for op in ["keygen", "sign", "verify", "sign-pss", "verify-pss"] {
            expected.push(format!("rsa{bits}/{op}"));
        }
    }
    for c in [
        "p192",
        "p224",
        "p256",
        "p384",
        "p521",
        "secp256k1",
        "bp256",
        "bp384",
        "bp512",
    ] {
        for op in ["keygen", "sign", "verify"] {
            expected.push(format!("ecdsa-{c}/{op}"));
        }
    }
    for a in ["ed25519", "ed448"] {
        for op in ["keygen", "sign", "verify"] {
            expected.push(format!("{a}/{op}"));
        }
    }
    for c in [
        "p192",
        "p224",
        "p256",
        "p384",
        "p521",
        "secp256k1",
        "bp256",
        "bp384",
        "bp512",
        "x25519",
        "x448",
    ] {
        for op in ["ecdhe", "ecdh"] {
            expected.push(format!("ecdh-{c}/{op}"));
        }
    }
    for id in &expected {
        let r = row(ops, id);
        for lib in LIBS {
            assert!(r.get(format!("{lib}_ns")).is_some(), "{id}: no {lib} cell");
        }
    }
    assert_eq!(
        ops["rows"].as_array().map(Vec::len),
        Some(expected.len()),
        "unexpected extra rows"
    );

    // What every library offers is measured (not silently not offered).
    for id in [
        "rsa2048/sign",
        "rsa2048/verify",
        "ecdsa-p256/keygen",
        "ecdsa-p256/sign",
        "ecdsa-p256/verify",
        "ed25519/sign",
        "ecdh-p256/ecdhe",
        "ecdh-x25519/ecdhe",
    ] {
        for lib in LIBS {
            assert!(
                num(row(ops, id), &format!("{lib}_ns")).is_some(),
                "{id}: {lib} not measured"
            );
        }
    }
    // The fastest library on a row is at 1×.
    let r = row(ops, "ecdsa-p256/sign");
    let min = LIBS
        .iter()
        .filter_map(|l| num(r, &format!("{l}_x")))
        .fold(f64::INFINITY, f64::min);
    assert!((min - 1.0).abs() < 1e-9, "fastest ratio {min}");

    // Structural facts. RSA-2048 key generation takes longer than P-256 key generation …
    for lib in ["awslc", "openssl"] {
        let rsa = num(row(ops, "rsa2048/keygen"), &format!("{lib}_ns"))
            .expect("RSA-2048 keygen measured");
        let ec = num(row(ops, "ecdsa-p256/keygen"), &format!("{lib}_ns"))
            .expect("P-256 keygen measured");
        assert!(rsa > ec, "{lib}: RSA-2048 keygen {rsa} ns vs P-256 {ec} ns");
        // … and RSA verifies more cheaply than it signs (public exponent 65537).
        let s = num(row(ops, "rsa2048/sign"), &format!("{lib}_ns")).expect("sign");
        let v = num(row(ops, "rsa2048/verify"), &format!("{lib}_ns")).expect("verify");
        assert!(v < s, "{lib}: RSA-2048 verify {v} ns vs sign {s} ns");
    }

    // Instructions: counted when valgrind is here, else the reason is stated (a failure under
    // CI).
    let instr = table(study, "crypto_instructions");
    let method = study["method"]["instructions"]
        .as_str()
        .expect("instructions method");
    let rsa_kg = row(instr, "rsa2048/keygen");
    let ec_kg = row(instr, "ecdsa-p256/keygen");
    match (num(rsa_kg, "awslc_instr"), num(ec_kg, "awslc_instr")) {
        (Some(rsa), Some(ec)) => {
            assert!(rsa > ec, "RSA-2048 keygen {rsa} instructions vs P-256 {ec}");
            let s = num(row(instr, "rsa2048/sign"), "openssl_instr").expect("counted");
            let v = num(row(instr, "rsa2048/verify"), "openssl_instr").expect("counted");
            assert!(v < s, "RSA-2048 verify {v} instructions vs sign {s}");
        }
        _ => {
            assert!(
                method.starts_with("not counted"),
                "no counts and no reason: {method}"
            );
            assert!(rsa_kg["awslc_instr"]["not_offered"]
                .as_str()
                .is_some_and(|r| r.starts_with("not counted")));
            lab_support::missing("lab_crypto_quick (instruction counts)", method);
        }
    }

    // Heap per operation: measured when valgrind is here, else the reason is stated (a failure
    // under CI). OpenSSL
    // allocates while it signs (contexts, big numbers); a peak never exceeds what was allocated.
    let memory = table(study, "crypto_memory");
    for id in ["ecdsa-p256/sign", "rsa2048/sign"] {
        let r = row(memory, id);
        match (
            num(r, "openssl_peak"),
            num(r, "openssl_alloc"),
            num(r, "openssl_blocks"),
        ) {
            (Some(peak), Some(alloc), Some(blocks)) => {
                assert!(
                    peak > 0.0 && blocks > 0.0,
                    "{id}: OpenSSL peak {peak} B in {blocks} blocks"
                );
                assert!(
                    peak <= alloc,
                    "{id}: peak {peak} B above the {alloc} B allocated"
                );
            }
            _ => {
                let why = r["openssl_peak"]["not_offered"].as_str().expect("a reason");
                assert!(why.starts_with("not measured"), "{id}: {why}");
                lab_support::missing(&format!("lab_crypto_quick (heap per {id})"), why);
            }
        }
    }
    for lib in LIBS {
        let r = row(memory, "ecdsa-p256/sign");
        if let (Some(peak), Some(alloc)) = (
            num(r, &format!("{lib}_peak")),
            num(r, &format!("{lib}_alloc")),
        ) {
            assert!(
                peak <= alloc,
                "{lib}: peak {peak} B above the {alloc} B allocated"
            );
        }
    }

    // Signing nonces: RustCrypto ECDSA is RFC 6979, Ed25519 is deterministic everywhere,
    // PSS is randomized (salt) everywhere.
    let nonces = table(study, "crypto_signing_nonces");
    assert_eq!(
        row(nonces, "ecdsa-p256/sign")["rustcrypto_signing"],
        "deterministic"
    );
    for lib in LIBS {
        assert_eq!(
            row(nonces, "ed25519/sign")[format!("{lib}_signing")],
            "deterministic"
        );
        assert_eq!(
            row(nonces, "rsa2048/sign-pss")[format!("{lib}_signing")],
            "randomized"
        );
    }

    // Plots: bars with positive values.
    let plots = study["plots"].as_array().expect("plots");
    assert!(plots.len() >= 4);
    for p in plots {
        for s in p["series"].as_array().expect("series") {
            for pt in s["points"].as_array().expect("points") {
                assert!(
                    pt[1].as_f64().is_some_and(|y| y.is_finite() && y > 0.0),
                    "plot {} point {pt}",
                    p["id"]
                );
            }
        }
    }
    assert!(!study["notes"].as_array().expect("notes").is_empty());
}
