//! `secrelay lab soak --quick` as a user runs it: it starts its own gateway (`secrelay serve`
//! with HTTPS, ng, short timeouts) and, for 20 s, calls of every kind (two WebRTC participants,
//! a WHIP publisher and a WHEP viewer, two SDES phones, two plain phones, an ng call from a phone
//! to a phone or a browser) join, talk and leave or vanish, a dozen live at once. The run must
//! succeed (its verdict: after every call left, nothing remains), and the JSON must show it:
//! every kind of call talked, both endings happened, the gateway held participants of every
//! kind of leg while the calls were live, and at the end no participant, room, telephony port,
//! ng call or routing entry, and as many file descriptors as before the first call. Bad flags
//! are refused by name.

use std::process::Command;

use serde_json::Value;

mod lab_support;
use lab_support::lab_json;

fn n(v: &Value, k: &str) -> f64 {
    v[k].as_f64().unwrap_or_else(|| panic!("{k}: {v}"))
}

#[test]
fn a_quick_soak_exercises_every_kind_of_call_and_leaves_nothing_behind() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out_dir = dir.path().join("report");
    let (v, stdout) = lab_json(&[
        "soak",
        "--quick",
        "--no-progress",
        "--out",
        out_dir.to_str().expect("a UTF-8 temporary path"),
    ]);
    let soak = &v["soak"];
    assert_eq!(v["studies"][0]["study"], "soak", "{v}");

    // The verdict: every check held, and the checks are the ones that say nothing remains.
    assert_eq!(soak["pass"], true, "{soak}");
    let checks = soak["checks"].as_array().expect("checks");
    for c in checks {
        assert_eq!(c["pass"], true, "{c}");
    }
    for what in [
        "participants left",
        "rooms left",
        "telephony ports in use",
        "ng calls held",
        "routing entries (ufrags, addresses)",
        "HTTP resources (Location URLs) held",
        "open file descriptors",
        "resident memory after every call left",
        "failed offers, answers, DELETEs and ng commands",
    ] {
        assert!(
            checks.iter().any(|c| c["what"] == what),
            "no check {what:?}: {soak}"
        );
    }

    // Every kind of call was set up and talked; both endings happened.
    let (mut left, mut vanished) = (0.0, 0.0);
    for kind in ["webrtc", "whip-whep", "sdes", "plain", "ng"] {
        let t = &soak["kinds"][kind];
        assert!(n(t, "started") >= 5.0, "{kind}: {t}");
        assert_eq!(n(t, "setup_failed"), 0.0, "{kind}: {t}");
        assert!(n(t, "calls_talked") >= 1.0, "{kind}: {t}");
        assert!(n(t, "legs_heard") >= 2.0, "{kind}: {t}");
        assert!(n(t, "received") > 0.0, "{kind}: {t}");
        left += n(t, "left");
        vanished += n(t, "vanished");
    }
    assert!(
        left >= 1.0 && vanished >= 1.0,
        "{left} left, {vanished} vanished"
    );
    assert_eq!(left + vanished, n(soak, "calls"), "{soak}");

    // The samples: the gateway held participants of every kind of leg under load, and at the
    // end nothing, with the descriptors it had before the first call.
    let samples = soak["samples"].as_array().expect("samples");
    let phase = |p: &'static str| samples.iter().filter(move |s| s["phase"] == p);
    let baseline = phase("baseline").next_back().expect("a baseline sample");
    for leg in ["webrtc", "sdes", "plain"] {
        assert!(
            phase("load").any(|s| s["by_leg"][leg].as_f64().unwrap_or(0.0) > 0.0),
            "no {leg} participant seen under load"
        );
    }
    assert!(phase("load").any(|s| n(s, "ng_calls") > 0.0 && n(s, "rtp_ports") > 0.0));
    let end = samples.last().expect("samples");
    assert_eq!(end["phase"], "settle", "{end}");
    for k in [
        "participants",
        "rooms",
        "rtp_ports",
        "ng_calls",
        "routes",
        "http_resources",
    ] {
        assert_eq!(n(end, k), 0.0, "{k} at the end: {end}");
    }
    assert_eq!(end["fds"], baseline["fds"], "{end} vs {baseline}");
    assert!(n(end, "rss_mib") > 0.0, "{end}");

    // The report: the tables and the plots over time.
    assert!(stdout.contains("Verdict: after every call has left, nothing remains"));
    let html = std::fs::read_to_string(out_dir.join("report.html")).expect("report.html");
    for plot in ["soak_state", "soak_by_leg", "soak_memory", "soak_fds"] {
        assert!(out_dir.join(format!("{plot}.png")).is_file(), "{plot}.png");
        assert!(html.contains(plot), "{plot} in report.html");
    }
}

#[test]
fn bad_soak_flags_are_refused_by_name() {
    for (args, named) in [
        (&["--vanish", "2"][..], "--vanish"),
        (&["--target", "ftp://x"][..], "--target"),
        (&["--duration", "0"][..], "--duration"),
        (&["--duration", "10", "--hold", "9"][..], "--hold"),
        (&["--target", "https://127.0.0.1:1"][..], "--ca"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_secrelay"))
            .args(["lab", "soak", "--no-progress"])
            .args(args)
            .output()
            .expect("the secrelay binary runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} was accepted");
        assert!(stderr.contains(named), "{args:?}: {stderr}");
    }
}
