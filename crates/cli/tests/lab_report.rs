//! `secrelay lab srtp --quick --out DIR` writes the HTML report: the srtp section with its
//! table and its plots inline, the PNG copies, results.json; and the page renders in
//! headless Chromium when it is installed.

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

    let Some(chromium) = support::chromium("lab_srtp_writes_the_report (browser part)") else {
        return;
    };
    let (check, _) = support::render_check(&chromium, &out.join("report.html"));
    support::assert_rendered(&check, plots.len());
}
