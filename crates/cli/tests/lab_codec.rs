//! `secrelay lab codec --smoke --json`: every codec × implementation, pipeline and mixer row
//! with finite positive figures, the arithmetic between the columns (real-time factors,
//! ratios to the peer, SRTP share, legs per core), the plots and the target notes; the run's
//! sizing summary (transcoded calls per core per codec pair from these rows). Structure, never
//! timings.

mod lab_support;

use lab_support::{rows, run_lab};
use serde_json::Value;

fn num(r: &Value, key: &str) -> f64 {
    let x = r[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} is not a number in {r}"));
    assert!(x.is_finite() && x > 0.0, "{key} = {x} in {r}");
    x
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-6 * a.abs().max(b.abs()).max(1.0)
}

#[test]
fn lab_codec_quick_rows_arithmetic_and_plots() {
    let (output, stdout) = run_lab("codec");
    let study = output["studies"][0].clone();
    assert!(
        stdout.contains("Encode and decode per 20 ms frame"),
        "{stdout}"
    );

    let codecs = rows(&study, "codec_per_frame");
    // AMR's rows need its libraries (scripts/setup installs them; CI must have them).
    let amr = secrelay_media::amr::amr_available(secrelay_media::amr::Band::Wide).is_ok()
        && secrelay_media::amr::amr_available(secrelay_media::amr::Band::Narrow).is_ok();
    assert!(
        amr || std::env::var_os("CI").is_none(),
        "CI is set and AMR's libraries do not load"
    );
    let amr_rows = [
        ("AMR 12.2 kbit/s", "", "secrelay"),
        ("AMR 12.2 kbit/s", "", "opencore-amr direct"),
        ("AMR-WB 14.25 kbit/s", "", "secrelay"),
        ("AMR-WB 14.25 kbit/s", "", "opencore-amr/vo-amrwbenc direct"),
    ];
    let expect = [
        ("PCMU", "", "secrelay"),
        ("PCMU", "", "textbook G.711"),
        ("PCMA", "", "secrelay"),
        ("PCMA", "", "audio-codec"),
        ("G.722", "", "secrelay"),
        ("G.722", "", "audio-codec"),
        ("Opus 48 kHz mono", "complexity 10", "secrelay"),
        ("Opus 48 kHz mono", "complexity 10", "libopus direct"),
    ];
    let amr_rows = if amr { &amr_rows[..] } else { &[] };
    for &(codec, setting, imp) in expect.iter().chain(amr_rows) {
        let r = codecs
            .iter()
            .find(|r| r["codec"] == codec && r["setting"] == setting && r["implementation"] == imp)
            .unwrap_or_else(|| panic!("no row {codec} {setting} {imp}"));
        let (e, d) = (num(r, "encode_us"), num(r, "decode_us"));
        assert!(close(num(r, "encode_rt"), 20_000.0 / e));
        assert!(close(num(r, "decode_rt"), 20_000.0 / d));
        if imp == "secrelay" {
            let peer = codecs
                .iter()
                .find(|p| {
                    p["codec"] == codec
                        && p["setting"] == setting
                        && p["implementation"] != "secrelay"
                })
                .unwrap();
            assert!(close(num(r, "encode_vs_peer"), e / num(peer, "encode_us")));
            assert!(close(num(r, "decode_vs_peer"), d / num(peer, "decode_us")));
        }
    }

    let legs = rows(&study, "codec_transcode_per_leg");
    for label in [
        "PCMU → PCMA",
        "PCMA → PCMU",
        "G.722 → PCMU (16 → 8 kHz)",
        "Opus 48 kHz → PCMU (48 → 8 kHz)",
        "PCMU → Opus 48 kHz (8 → 48 kHz)",
        "Opus 48 kHz → G.722 (48 → 16 kHz)",
    ]
    .into_iter()
    .chain(
        ["AMR-WB → PCMA (16 → 8 kHz)", "PCMA → AMR-WB (8 → 16 kHz)"]
            .into_iter()
            .filter(|_| amr),
    ) {
        let r = legs
            .iter()
            .find(|r| r["pipeline"] == label)
            .unwrap_or_else(|| panic!("no pipeline {label}"));
        let (t, s) = (num(r, "transcode_us"), num(r, "srtp_us"));
        assert!(close(num(r, "rt"), 20_000.0 / t));
        let share = num(r, "codec_share_pct");
        assert!(close(share, t / (t + s) * 100.0) && share < 100.0);
        assert!(close(num(r, "legs_per_core"), 20_000.0 / (t + s)));
    }

    let mixes = rows(&study, "codec_mix_per_leg");
    assert_eq!(mixes.len(), 2);
    for r in mixes {
        let n = num(r, "members");
        assert!(close(num(r, "per_leg_us"), num(r, "tick_us") / n));
    }

    let plots = study["plots"].as_array().unwrap();
    for id in ["codec_vs_srtp_per_leg", "codec_realtime_factor"] {
        let p = plots
            .iter()
            .find(|p| p["id"] == id)
            .unwrap_or_else(|| panic!("no plot {id}"));
        assert_eq!(p["kind"], "bars");
        assert!(!p["series"][0]["points"].as_array().unwrap().is_empty());
    }
    let vs = plots
        .iter()
        .find(|p| p["id"] == "codec_vs_srtp_per_leg")
        .unwrap();
    assert_eq!(vs["categories"][0], "relay only (G.711 172 B)");
    // Relay only, then each pipeline.
    assert_eq!(vs["categories"].as_array().unwrap().len(), 1 + legs.len());

    let notes: Vec<&str> = study["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    for start in [
        "Target G.711 transcoding",
        "Target Opus 48 kHz mono encode",
        "Peers:",
        "Which dominates:",
    ] {
        assert!(
            notes.iter().any(|n| n.starts_with(start)),
            "no note {start}: {notes:?}"
        );
    }

    sizing_from_the_codec_rows(&output["sizing"], legs);

    let instr = study["method"]["instructions"].as_str().unwrap();
    if instr.starts_with("callgrind") {
        let r = codecs
            .iter()
            .find(|r| r["codec"] == "G.722" && r["implementation"] == "secrelay")
            .unwrap();
        assert!(num(r, "encode_instructions") > 1000.0);
        assert!(num(&legs[0], "instructions") > 100.0);
        assert!(num(&mixes[0], "instructions_per_leg") > 100.0);
    } else {
        assert!(instr.starts_with("not counted"), "{instr}");
        lab_support::missing(
            "lab_codec_quick_rows_arithmetic_and_plots (instruction counts)",
            instr,
        );
    }
}

/// The sizing summary of a `lab codec` run: a call between two codecs is the two pipelines'
/// transcoding and SRTP per 20 ms; mixing needs lab srtp too and says so, and so does the
/// verdict for lab handshake.
fn sizing_from_the_codec_rows(sizing: &Value, legs: &[Value]) {
    let section = |id: &str| {
        sizing["sections"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == id)
            .unwrap_or_else(|| panic!("no sizing section {id}"))
            .clone()
    };
    let leg = |label: &str| {
        let r = legs.iter().find(|r| r["pipeline"] == label).unwrap();
        num(r, "transcode_us") + num(r, "srtp_us")
    };
    let t = section("transcoding");
    let lines = t["lines"].as_array().unwrap();
    for (pair, a, b) in [
        ("PCMU ↔ PCMA", "PCMU → PCMA", "PCMA → PCMU"),
        (
            "Opus 48 kHz ↔ PCMU",
            "Opus 48 kHz → PCMU (48 → 8 kHz)",
            "PCMU → Opus 48 kHz (8 → 48 kHz)",
        ),
    ] {
        let l = lines
            .iter()
            .find(|l| l["label"] == pair)
            .unwrap_or_else(|| panic!("no line {pair} in {t}"));
        let calls = l["figures"]["calls"]["value"].as_f64().unwrap();
        assert!(
            close(calls, 20_000.0 / (leg(a) + leg(b))),
            "{pair}: {calls}"
        );
        assert_eq!(
            l["figures"]["calls"]["sources"].as_array().unwrap().len(),
            3
        );
    }
    let one_way = lines
        .iter()
        .find(|l| l["label"] == "G.722 → PCMU (one way)")
        .expect("the one-way pipeline");
    assert!(one_way["figures"]["calls"]["value"].is_null());
    assert!(section("mixing")["missing"]
        .as_str()
        .unwrap()
        .contains("secrelay lab srtp"));
    assert!(section("relay")["missing"]
        .as_str()
        .unwrap()
        .contains("secrelay lab srtp"));
    assert!(sizing["verdict"]["missing"][0]
        .as_str()
        .unwrap()
        .contains("secrelay lab handshake --in-memory"));
}
