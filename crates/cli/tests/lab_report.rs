//! `secrelay lab srtp --quick --out DIR` writes the HTML report: the sizing summary first
//! (calls per core per SRTP profile from this run, linked to the rows they come from, and the
//! studies to run for the rest), then the srtp section with its table and its plots inline,
//! the PNG copies, results.json (with the same summary); and the page renders in headless
//! Chromium when it is installed.

#[path = "../../lab/tests/support/mod.rs"]
mod support;

use std::process::Command;

#[test]
fn lab_srtp_writes_the_report() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("report");
    let run = Command::new(env!("CARGO_BIN_EXE_secrelay"))
        .args(["lab", "srtp", "--quick", "--no-progress", "--out"])
        .arg(&out)
        .output()
        .expect("the secrelay binary runs");
    assert!(
        run.status.success(),
        "lab srtp failed: {}",
        String::from_utf8_lossy(&run.stderr)
    );

    let results: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    let study = &results["studies"][0];
    assert_eq!(study["study"], "srtp");
    let plots = study["plots"].as_array().expect("plots");
    // Cost against size and per stack for two profiles, the raw ciphers, the batch-engine
    // sweep's three (packets/s per batch size for two profiles, the machine's ceiling), and
    // the sweep by packet size's four (two profiles, protect and unprotect).
    assert_eq!(plots.len(), 12, "lab srtp's plots");

    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("id=\"study-srtp\""), "the srtp section");
    assert!(
        html.contains(&format!(">{}", study["title"].as_str().unwrap())),
        "the study's title"
    );
    assert!(html.contains("id=\"table-srtp-"), "the srtp table");
    assert!(
        html.contains("<details class=\"method\""),
        "the method block"
    );
    assert_eq!(
        html.matches("<svg").count(),
        plots.len(),
        "every plot inline"
    );
    for p in plots {
        let id = p["id"].as_str().unwrap();
        assert!(
            html.contains(&format!("id=\"plot-srtp-{id}\"")),
            "plot {id} in the page"
        );
        assert!(
            html.contains(&format!("href=\"{id}.png\"")),
            "plot {id} links its PNG"
        );
        let (w, h, colors) = support::png_stats(&out.join(format!("{id}.png")));
        assert!(
            w >= 800 && h >= 400 && colors > 2,
            "{id}.png: {w}×{h}, {colors} distinct pixel values"
        );
        // Every series the study measured is drawn: its name is in the SVG legend.
        for s in p["series"].as_array().unwrap() {
            assert!(
                !s["points"].as_array().unwrap().is_empty(),
                "{id}: series {} has points",
                s["name"]
            );
            assert!(
                html.contains(&format!(">\n{}\n</text>", s["name"].as_str().unwrap())),
                "{id}: legend entry {}",
                s["name"]
            );
        }
    }

    sizing_opens_the_page(&results, &html);

    let Some(chromium) = support::chromium("lab_srtp_writes_the_report (browser part)") else {
        return;
    };
    let (check, _) = support::render_check(&chromium, &out.join("report.html"));
    support::assert_rendered(&check, plots.len());
}

/// The sizing summary: in results.json and at the top of the page, its SRTP figures from
/// this run's rows (each link an id of the page), the other lines naming the study to run.
fn sizing_opens_the_page(results: &serde_json::Value, html: &str) {
    let sizing = &results["sizing"];
    let at = |needle: &str| {
        html.find(needle)
            .unwrap_or_else(|| panic!("{needle:?} is in the page"))
    };
    assert!(
        at("id=\"sizing\"") < at("class=\"toc\""),
        "the summary precedes the contents"
    );
    assert!(at("id=\"sizing\"") < at("id=\"study-srtp\""));
    // The verdict (here: which studies it needs; commands in backticks are set as code).
    for part in sizing["verdict"]["sentence"].as_str().unwrap().split('`') {
        assert!(
            html.contains(part),
            "{part:?} of the verdict is in the page"
        );
    }

    let sections = sizing["sections"].as_array().expect("sections");
    let section = |id: &str| {
        sections
            .iter()
            .find(|s| s["id"] == id)
            .unwrap_or_else(|| panic!("section {id}"))
    };
    // Relay: one line per profile lab srtp measured, each with calls per core.
    let profiles: std::collections::BTreeSet<&str> = results["studies"][0]["tables"][0]["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["profile"].as_str().unwrap())
        .collect();
    let relay = section("relay");
    assert!(relay.get("missing").is_none());
    let lines = relay["lines"].as_array().unwrap();
    assert_eq!(lines.len(), profiles.len(), "one line per profile");
    for l in lines {
        let calls = l["figures"]["calls_g711"]["value"]
            .as_f64()
            .unwrap_or_else(|| panic!("{}: calls per core", l["label"]));
        let ns = l["figures"]["relay_ns"]["value"].as_f64().unwrap();
        // 50 packets/s each way, unprotect + protect per packet.
        assert!((calls - 1e9 / (100.0 * ns)).abs() < 1e-6 * calls);
        let engine = l["figures"]["engine"]["text"].as_str().unwrap();
        assert!(
            engine.starts_with("secrelay") || engine.contains(" engine (batches of 64"),
            "{engine}: one of secrelay's stacks or single-core engines"
        );
    }
    // The studies this run did not have are named, with no figure.
    for (id, command) in [
        ("transcoding", "secrelay lab codec"),
        ("mixing", "secrelay lab codec"),
        ("dtls_handshakes", "secrelay lab handshake --in-memory"),
        ("tls_handshakes", "secrelay lab handshake --tls"),
    ] {
        let s = section(id);
        assert!(
            s["lines"].as_array().unwrap().is_empty(),
            "{id}: no figures"
        );
        assert!(
            s["missing"].as_str().unwrap().contains(command),
            "{id} names {command}"
        );
        assert!(html.contains(command), "the page names {command}");
    }
    assert!(sizing["verdict"].get("dominant").is_none());

    // Every link of the summary points at an element of the page.
    let mut links = 0;
    for l in lines {
        for f in l["figures"].as_object().unwrap().values() {
            for src in f["sources"].as_array().unwrap() {
                let anchor = src["anchor"].as_str().unwrap();
                assert!(!anchor.is_empty(), "{src} has an anchor");
                assert!(
                    html.contains(&format!("href=\"#{anchor}\"")),
                    "{anchor} is linked"
                );
                assert!(
                    html.contains(&format!(" id=\"{anchor}\"")),
                    "{anchor} is an id"
                );
                links += 1;
            }
        }
    }
    assert!(links >= 4 * profiles.len());
    let summary = &html[at("id=\"sizing\"")..at("class=\"toc\"")];
    for href in summary.split("href=\"#").skip(1) {
        let id = &href[..href.find('"').unwrap()];
        assert!(html.contains(&format!(" id=\"{id}\"")), "#{id} resolves");
    }
}
