//! `secrelay lab failover --quick` as a user runs it: it starts a Redis of its own, a standby
//! node and, per run, a node it kills with SIGKILL; every call (plain, SDES, and from a phone
//! to a simulated browser that restarts ICE through the standby) must be heard again on the
//! standby, the figures must be there and finite, and steady calls must have cost the
//! directory no write. Bad flags are refused by name.

use std::process::Command;

mod lab_support;
use lab_support::{lab_json, rows};

#[test]
fn a_quick_failover_study_takes_every_call_over_and_writes_nothing_while_calls_are_steady() {
    if secrelay_testkit::redis::RedisServer::start(0).is_none() {
        return;
    }
    let (v, stdout) = lab_json(&[
        "failover",
        "--quick",
        "--runs",
        "2",
        "--calls",
        "3",
        "--webrtc-calls",
        "2",
        "--no-progress",
    ]);
    let study = &v["studies"][0];
    assert_eq!(study["study"], "failover", "{v}");
    assert!(
        stdout.contains("From the kill to both sides hearing each other again"),
        "{stdout}"
    );
    let silence = rows(study, "failover_silence");
    let kinds: Vec<&str> = silence.iter().filter_map(|r| r["kind"].as_str()).collect();
    assert_eq!(
        kinds,
        [
            "plain",
            "SDES AES_CM_128_HMAC_SHA1_80",
            "SDES AEAD_AES_128_GCM",
            "WebRTC (ICE restart)",
            "all"
        ]
    );
    for r in silence {
        for k in ["p50", "p99", "max", "lost_mean", "lost_max"] {
            let x = r[k].as_f64().unwrap_or_else(|| panic!("{k}: {r}"));
            assert!(x.is_finite() && x >= 0.0, "{k}: {r}");
        }
        assert_eq!(r["not_taken"], 0.0, "{r}");
        // Silent at least until the lease could have run out: the node renews its 1 s lease
        // every third of it, so its record is gone between 667 ms and 1 s after the kill.
        assert!(r["p50"].as_f64().unwrap() >= 600.0, "{r}");
    }
    let writes = rows(study, "failover_writes");
    assert_eq!(writes.len(), 2);
    assert!(
        writes[0]["writes"].as_f64().unwrap() >= 6.0,
        "an offer and an answer per call: {writes:?}"
    );
    assert_eq!(writes[1]["writes"], 0.0, "steady calls wrote: {writes:?}");
    let runs = v["failover"]["runs"]
        .as_array()
        .expect("every run in the JSON");
    assert_eq!(runs.len(), 2);
    for r in runs {
        assert_eq!(r["calls"].as_array().map(Vec::len), Some(5), "{r}");
    }
}

#[test]
fn bad_failover_flags_name_themselves() {
    for (args, flag) in [
        (vec!["--lease", "0.1"], "--lease"),
        (vec!["--steady", "0"], "--steady"),
        (vec!["--runs", "0"], "--runs"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_secrelay"))
            .args(["lab", "failover", "--no-progress"])
            .args(&args)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?} was taken");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(flag), "{args:?}: {err}");
    }
}
