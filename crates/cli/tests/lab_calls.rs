//! `secrelay lab calls --smoke --json`: a row per engine and N in the SRTP-only sweep and per N
//! through the gateway, with ordered, positive percentiles; the gateway relays every call's
//! packets to the other party, on each of its SRTP engines.

mod lab_support;

use lab_support::{rows, run_study};

#[test]
fn calls_quick_rows_and_facts() {
    let (study, _) = run_study("calls");
    let srtp = rows(&study, "calls_srtp");
    for (engine, n) in ["serial", "simd", "threaded"]
        .into_iter()
        .flat_map(|e| [10.0, 140.0, 1000.0].map(|n| (e, n)))
    {
        let r = srtp
            .iter()
            .find(|r| r["engine"] == engine && r["calls"].as_f64() == Some(n))
            .unwrap_or_else(|| panic!("no {engine} row for {n} calls"));
        let q: Vec<f64> = ["p50", "p90", "p99", "max"]
            .iter()
            .map(|k| r[*k].as_f64().unwrap_or_else(|| panic!("{k}: {}", r[*k])))
            .collect();
        assert!(q[0] > 0.0 && q.windows(2).all(|w| w[0] <= w[1]), "{r}");
        assert_eq!(r["pps"].as_f64(), Some(n * 100.0));
    }
    let gw = rows(&study, "calls_gateway");
    // Two N (10, 50) for each of the gateway's SRTP engines.
    assert_eq!(gw.len(), 4);
    for engine in ["serial", "simd"] {
        let n = gw
            .iter()
            .filter(|r| r["engine"].as_str().unwrap().starts_with(engine))
            .count();
        assert_eq!(n, 2, "{engine}");
    }
    for r in gw {
        let calls = r["calls"].as_f64().unwrap();
        // Two participants per call, each hears the other: about 50 packets/s each.
        let received = r["received"].as_f64().unwrap();
        assert!(received >= calls * 2.0 * 25.0, "{r}");
        let p50 = r["p50"].as_f64().unwrap();
        let p99 = r["p99"].as_f64().unwrap();
        assert!(p50 > 0.0 && p50 <= p99, "{r}");
    }
    assert!(!study["plots"].as_array().unwrap().is_empty());
}
