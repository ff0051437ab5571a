//! The HTML report renders: tables, both plot kinds (with awkward data: empty series, single
//! points, many series, long and hostile names), PNG copies that decode, and, in headless
//! Chromium, every inline SVG with a non-zero size, no script error and a non-blank page.

mod support;

use secrelay_lab::frame::Method;
use secrelay_lab::machine::Machine;
use secrelay_lab::{Cell, LabOutput, Plot, PlotKind, Series, StudyReport, Table};

/// A name that would inject an element if it were not escaped.
const HOSTILE: &str = "AES </td><b id=\"injected\">&amp; \"x\"</b>";

fn method() -> Method {
    Method {
        timed: "one synthetic operation <of> nothing".into(),
        quick: true,
        smoke: false,
        warmup_ms: 20.0,
        runs: 5,
        run_ms: 40.0,
        harness_overhead_ns: 0.71,
        spread: "interquartile range of the runs, % of the median".into(),
        instructions: "not counted: synthetic data".into(),
        machine: Machine::detect(),
        versions: secrelay_lab::versions(),
        date: "2026-01-01T00:00:00Z".into(),
        elapsed_s: 1.25,
    }
}

fn bars(id: &str, log_y: bool, categories: Vec<String>, series: Vec<Series>) -> Plot {
    Plot {
        id: id.into(),
        title: format!("bars {id}"),
        kind: PlotKind::Bars,
        x_label: "algorithm".into(),
        y_label: "ns per op".into(),
        log_y,
        categories,
        series,
    }
}

fn lines(id: &str, log_y: bool, series: Vec<Series>) -> Plot {
    Plot {
        id: id.into(),
        title: format!("lines {id}"),
        kind: PlotKind::Lines,
        x_label: "bytes".into(),
        y_label: "ns per packet".into(),
        log_y,
        categories: Vec::new(),
        series,
    }
}

fn series(name: &str, points: Vec<(f64, f64)>) -> Series {
    Series {
        name: name.into(),
        points,
    }
}

fn synthetic() -> LabOutput {
    let mut table = Table::new("costs", "Cost per operation")
        .col("lib", "Library")
        .col_unit("ns", "Time", "ns")
        .col_unit("big", "Instructions", "instr")
        .col("verdict", "Verdict");
    table.push([
        ("lib", Cell::text("secrelay")),
        ("ns", 123.456.into()),
        ("big", 1234567.0.into()),
        ("verdict", "ok".into()),
    ]);
    table.push([
        ("lib", Cell::text(HOSTILE)),
        ("ns", Cell::not_offered("OpenSSL 3 refuses <RC4> & friends")),
        ("big", 0.5.into()),
    ]);
    let wide: Vec<(String, Cell)> = (0..30)
        .map(|i| (format!("c{i}"), Cell::num(i as f64 * 1000.5)))
        .collect();
    let mut wide_table = Table::new("wide", "A wide table");
    for i in 0..30 {
        wide_table = wide_table.col_unit(&format!("c{i}"), &format!("column {i}"), "ns");
    }
    wide_table.push(wide);

    let short: Vec<String> = ["AES-128-CM", "AES-256-CM", "GCM-128", HOSTILE]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let long: Vec<String> = (0..14)
        .map(|i| format!("a rather long category name number {i} that needs rotating"))
        .collect();
    let many: Vec<Series> = (0..13)
        .map(|j| {
            series(
                &format!("library {j}"),
                (0..14)
                    .map(|i| (i as f64, (1 + i + j) as f64 * 10.0))
                    .collect(),
            )
        })
        .collect();
    let plots = vec![
        bars(
            "bars_log",
            true,
            short.clone(),
            vec![
                series(
                    "secrelay",
                    vec![(0.0, 120.0), (1.0, 150.0), (2.0, 90.0), (3.0, 5000.0)],
                ),
                // By category index, skipping one it has no figure for.
                series("libsrtp", vec![(0.0, 140.0), (2.0, 100.0), (3.0, 6000.0)]),
                // By position, x ignored.
                series(
                    "openssl",
                    vec![(0.0, 130.0), (0.0, 160.0), (0.0, 95.0), (0.0, 5500.0)],
                ),
                series("empty", vec![]),
            ],
        ),
        bars("bars_many", false, long, many),
        lines(
            "lines_linear",
            false,
            vec![
                series(
                    "secrelay",
                    vec![(20.0, 90.0), (172.0, 120.0), (1200.0, 600.0)],
                ),
                series(
                    HOSTILE,
                    vec![(20.0, 110.0), (172.0, 150.0), (1200.0, 800.0)],
                ),
                series("one point", vec![(172.0, 300.0)]),
                series("nothing", vec![]),
            ],
        ),
        lines(
            "lines_log",
            true,
            vec![
                series("fast", vec![(1.0, 0.5), (10.0, 5.0), (100.0, 50.0)]),
                series(
                    "slow",
                    vec![
                        (1.0, 50.0),
                        (10.0, 5000.0),
                        (100.0, 500000.0),
                        (1000.0, 0.0),
                    ],
                ),
            ],
        ),
        lines("empty_plot", false, vec![]),
    ];
    let first = StudyReport {
        study: "synthetic".into(),
        title: "Synthetic study <one>".into(),
        seeds: vec!["000".into()],
        method: method(),
        tables: vec![table, wide_table],
        plots,
        notes: vec![format!("a note naming {HOSTILE}")],
    };
    let second = StudyReport {
        study: "second".into(),
        title: "Second study".into(),
        seeds: Vec::new(),
        method: method(),
        tables: Vec::new(),
        // Same id as a plot of the first study: the PNG must not overwrite it.
        plots: vec![lines(
            "lines_log",
            false,
            vec![series("x", vec![(0.0, 1.0), (1.0, 2.0)])],
        )],
        notes: Vec::new(),
    };
    LabOutput {
        secrelay: "0.0.0-test".into(),
        studies: vec![first, second],
        sizing: None,
    }
}

#[test]
fn report_renders_in_headless_chromium() {
    let dir = tempfile::tempdir().unwrap();
    let output = synthetic();
    secrelay_lab::report::write(dir.path(), &output).expect("report written");
    let page = dir.path().join("report.html");
    let html = std::fs::read_to_string(&page).unwrap();

    // Every plot has a PNG that decodes, is at least 800×400 and is not blank; the
    // duplicate id got its own file.
    let pngs = [
        "bars_log",
        "bars_many",
        "lines_linear",
        "lines_log",
        "empty_plot",
        "lines_log-2",
    ];
    for name in pngs {
        let (w, h, colors) = support::png_stats(&dir.path().join(format!("{name}.png")));
        assert!(w >= 800 && h >= 400, "{name}.png is {w}×{h}");
        assert!(colors > 2, "{name}.png has {colors} distinct pixel values");
    }
    // 13 series and rotated labels make a taller image.
    assert!(support::png_stats(&dir.path().join("bars_many.png")).1 > 400);

    // Structure: one inline SVG per plot, no external resource, escaped data, "not offered"
    // with its reason, the method in a details block, a table of contents.
    assert_eq!(html.matches("<svg").count(), pngs.len());
    assert!(
        !html.contains("<b id=\"injected\""),
        "a data string went into the page unescaped"
    );
    assert!(
        html.contains("&lt;/td&gt;&lt;b id="),
        "the hostile name is shown escaped"
    );
    assert!(
        html.contains("title=\"OpenSSL 3 refuses &lt;RC4&gt; &amp; friends\""),
        "not-offered reason as a tooltip"
    );
    assert!(html.contains("class=\"na\""));
    assert!(
        !html.contains("src=\"http") && !html.contains("href=\"http") && !html.contains("<link")
    );
    assert!(html.contains("<details class=\"method\""));
    for anchor in [
        "study-synthetic",
        "table-synthetic-costs",
        "plot-synthetic-bars_log",
        "study-second",
        "plot-second-lines_log",
    ] {
        assert!(
            html.contains(&format!("href=\"#{anchor}\"")),
            "table of contents links {anchor}"
        );
        assert!(
            html.contains(&format!("id=\"{anchor}\"")),
            "{anchor} exists"
        );
    }
    assert!(
        html.contains("1,234,567") && html.contains("123"),
        "numbers formatted like format_num"
    );

    let Some(chromium) = support::chromium("report_renders_in_headless_chromium (browser part)")
    else {
        return;
    };
    let (check, dom) = support::render_check(&chromium, &page);
    support::assert_rendered(&check, pngs.len());
    assert!(
        !dom.contains("<b id=\"injected\""),
        "an injected element exists in the rendered DOM"
    );

    let shot = dir.path().join("screenshot.png");
    support::screenshot(&chromium, &page, &shot);
    let (w, h, colors) = support::png_stats(&shot);
    assert!(w > 0 && h > 0);
    assert!(
        colors > 16,
        "the screenshot is nearly blank: {colors} distinct pixel values"
    );
}

#[test]
fn report_of_nothing_is_still_a_page() {
    let dir = tempfile::tempdir().unwrap();
    let output = LabOutput {
        secrelay: "0.0.0-test".into(),
        studies: Vec::new(),
        sizing: None,
    };
    secrelay_lab::report::write(dir.path(), &output).expect("report written");
    let html = std::fs::read_to_string(dir.path().join("report.html")).unwrap();
    assert!(html.contains("No study ran."));
    assert!(html.contains("id=\"render-check\""));
}

#[test]
fn a_report_is_made_again_from_saved_results() {
    // As from a GPU machine's `lab gpu --json`: two files, their studies in the order given.
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.json"), dir.path().join("b.json"));
    let mut first = synthetic();
    first.studies.truncate(1);
    secrelay_lab::write_json(&a, &first).unwrap();
    secrelay_lab::write_json(&b, &synthetic()).unwrap();
    let out = dir.path().join("report");
    let made = secrelay_lab::report_from(&[a.clone(), b], &out).expect("report made");
    assert_eq!(made.studies.len(), 1 + synthetic().studies.len());
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("Cost per operation"));
    let saved: LabOutput =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    assert_eq!(saved.studies.len(), made.studies.len());
    // A file that is not the lab's results is named in the error.
    std::fs::write(&a, "{}").unwrap();
    let err = secrelay_lab::report_from(std::slice::from_ref(&a), &out).unwrap_err();
    assert!(format!("{err:#}").contains("a.json"), "{err:#}");
}
