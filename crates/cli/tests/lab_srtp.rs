//! `secrelay lab srtp --smoke`, run once as a user runs it with `--json` and `--out DIR`
//! (the study takes a while, so one run serves every check):
//! - the JSON: every profile × size × stack has a row, figures are finite and positive (or the
//!   cell says why the stack lacks the profile), and the method is recorded; the batch
//!   engines' sweeps by batch size and by packet size have their rows, and the GPU rows say why
//!   there are no figures where no GPU opens;
//! - the HTML report: the sizing summary first (calls per core per SRTP profile from this run,
//!   linked to the rows they come from, and the studies to run for the rest), then the srtp
//!   section with its table and its plots inline, the PNG copies, results.json (with the same
//!   summary); and the page renders in headless Chromium when it is installed.

mod lab_support;
#[path = "../../lab/tests/support/mod.rs"]
mod support;

use std::path::Path;

use lab_support::{lab_json, rows, PROFILES};

#[test]
fn lab_srtp_quick_has_every_row_with_finite_figures_and_writes_the_report() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("report");
    let (results, stdout) = lab_json(&[
        "srtp",
        "--smoke",
        "--no-progress",
        "--out",
        out.to_str().expect("a UTF-8 temporary path"),
    ]);
    assert_eq!(results["studies"].as_array().map(Vec::len), Some(1));
    let study = &results["studies"][0];
    assert_eq!(study["study"], "srtp");
    assert!(
        stdout.contains("SRTP cost per RTP packet"),
        "table printed:\n{stdout}"
    );
    let method = &study["method"];
    for key in [
        "timed",
        "runs",
        "warmup_ms",
        "harness_overhead_ns",
        "machine",
        "versions",
        "date",
        "instructions",
    ] {
        assert!(!method[key].is_null(), "method lacks {key}");
    }
    assert!(method["versions"]["libsrtp (runtime)"]
        .as_str()
        .unwrap()
        .contains("2.3"));
    let rows = rows(study, "srtp_per_packet");
    let stacks = [
        "secrelay",
        "secrelay/rustcrypto",
        "secrelay/aws-lc",
        "libsrtp 2 + OpenSSL",
        "webrtc-srtp (webrtc-rs)",
        "pion/srtp (Go)",
    ];
    // Why pion/srtp did not run at all (its Go peer not built), as opposed to a profile it
    // lacks ("pion/srtp: …", what the peer itself answered).
    let mut pion_missing = None;
    for p in PROFILES {
        for size in ["opus 100 B", "audio 172 B", "video 1200 B"] {
            let ring = p.starts_with("AEAD").then_some("secrelay/ring");
            for s in stacks.into_iter().chain(ring) {
                let row = rows
                    .iter()
                    .find(|r| r["profile"] == p && r["packet"] == size && r["stack"] == s)
                    .unwrap_or_else(|| panic!("no row for {p} {size} {s}"));
                for key in ["protect_ns", "unprotect_ns"] {
                    let cell = &row[key];
                    match cell.as_f64() {
                        Some(x) => assert!(x.is_finite() && x > 0.0, "{p} {size} {s} {key} = {x}"),
                        None => {
                            let why = cell["not_offered"]
                                .as_str()
                                .unwrap_or_else(|| panic!("{p} {size} {s} {key}: {cell}"));
                            assert!(!why.is_empty());
                            // Only the peers may lack a profile; secrelay and libsrtp have all of them.
                            assert!(
                                !s.starts_with("secrelay") && !s.starts_with("libsrtp"),
                                "{s} {p}: {why}"
                            );
                            if s.starts_with("pion") && !why.starts_with("pion/srtp:") {
                                pion_missing = Some(why.to_string());
                            }
                        }
                    }
                }
            }
        }
    }
    if let Some(why) = pion_missing {
        lab_support::missing("lab_srtp_quick… (pion/srtp)", &why);
    }
    // Instruction counts are present when valgrind is, else the method says why not (a failure
    // under CI).
    let instr = method["instructions"].as_str().unwrap();
    if instr.starts_with("callgrind") {
        let r = rows
            .iter()
            .find(|r| {
                r["profile"] == "AES_CM_128_HMAC_SHA1_80"
                    && r["packet"] == "audio 172 B"
                    && r["stack"] == "secrelay"
            })
            .unwrap();
        assert!(r["instructions"].as_f64().unwrap() > 100.0);
    } else {
        assert!(instr.starts_with("not counted"), "{instr}");
        lab_support::missing("lab_srtp_quick… (instruction counts)", instr);
    }
    assert!(study["plots"].as_array().unwrap().len() >= 4);
    check_engine_sweep(study, &stdout);
    check_gpu_rows(study);
    check_size_sweep(study, &stdout);
    check_report(&out);
}

/// The report `--out` wrote: results.json, report.html with the sizing summary and every
/// plot inline, the PNGs; rendered in Chromium.
fn check_report(out: &Path) {
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

    let Some(chromium) = support::chromium("lab_srtp_quick… (the report in a browser)") else {
        return;
    };
    let (check, _) = support::render_check(&chromium, &out.join("report.html"));
    support::assert_rendered(&check, plots.len());
}

/// The engines by packet size (issue 17): a row per profile × operation × packet size (100,
/// 172, 1,200 bytes, the video-like mix) × batch and context count × engine (serial, simd,
/// threaded, and simd with its GCM kernel off for the AEAD profiles), each with a finite,
/// positive time per packet and ratio to the serial engine of the same runs; the plots and
/// the lowest ratio per engine in the notes. Structure only: no figure is judged here.
fn check_size_sweep(study: &serde_json::Value, stdout: &str) {
    assert!(
        stdout.contains("SRTP batch engines by packet size"),
        "table printed:\n{stdout}"
    );
    let sweep = rows(study, "srtp_engine_sizes");
    let setups = [(64.0, 64.0), (64.0, 4096.0), (1024.0, 4096.0)];
    for p in PROFILES {
        let aead = p.starts_with("AEAD");
        for op in ["protect", "unprotect"] {
            for packet in ["100 B", "172 B", "1200 B", "video mix"] {
                for (batch, contexts) in setups {
                    let mut engines = vec!["serial", "simd (", "threaded"];
                    if aead {
                        engines.push("simd, GCM kernel off");
                    }
                    for engine in engines {
                        let row = sweep
                            .iter()
                            .find(|r| {
                                r["profile"] == p
                                    && r["op"] == op
                                    && r["packet"] == packet
                                    && r["batch"].as_f64() == Some(batch)
                                    && r["contexts"].as_f64() == Some(contexts)
                                    && r["engine"].as_str().unwrap().starts_with(engine)
                            })
                            .unwrap_or_else(|| {
                                panic!("no row for {p} {op} {packet} {batch}/{contexts} {engine}")
                            });
                        for key in ["ns_per_packet", "vs_serial"] {
                            let x = row[key].as_f64().unwrap_or_else(|| {
                                panic!("{p} {op} {packet} {batch}/{contexts} {engine} {key}: {row}")
                            });
                            assert!(x.is_finite() && x > 0.0, "{row}");
                        }
                        if engine == "serial" {
                            assert_eq!(row["vs_serial"].as_f64(), Some(1.0));
                        }
                    }
                }
            }
        }
        // The GCM kernel switch is measured for the AEAD profiles only.
        if !aead {
            assert!(
                !sweep
                    .iter()
                    .any(|r| r["profile"] == p && r["engine"] == "simd, GCM kernel off"),
                "{p}"
            );
        }
    }
    let plots: Vec<&str> = study["plots"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_str().unwrap())
        .collect();
    for id in [
        "srtp_engine_sizes_aes_cm_128_hmac_sha1_80_protect",
        "srtp_engine_sizes_aes_cm_128_hmac_sha1_80_unprotect",
        "srtp_engine_sizes_aead_aes_128_gcm_protect",
        "srtp_engine_sizes_aead_aes_128_gcm_unprotect",
    ] {
        assert!(plots.contains(&id), "no plot {id}: {plots:?}");
        // Every engine and setup has its bars, under a legend entry the report draws whole
        // (it cuts entries past 28 characters).
        let plot = study["plots"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["id"] == id)
            .unwrap();
        let series = plot["series"].as_array().unwrap();
        assert!(series.len() >= 6, "{id}: {series:?}");
        for s in series {
            let name = s["name"].as_str().unwrap();
            assert!(name.chars().count() <= 28, "{id}: legend entry {name:?}");
            assert_eq!(s["points"].as_array().unwrap().len(), 4, "{id}: {name}");
        }
    }
    let notes = study["notes"].as_array().unwrap();
    for engine in ["simd (", "threaded"] {
        assert!(
            notes.iter().any(|n| {
                let n = n.as_str().unwrap();
                n.starts_with(engine) && n.contains("lowest over every profile")
            }),
            "no lowest-ratio note for {engine}: {notes:?}"
        );
    }
    assert!(study["method"]["timed"]
        .as_str()
        .unwrap()
        .contains("srtp_engine_sizes"));
}

/// The batch engines' sweep: a row per engine (serial, simd, threaded) × batch size × profile, with
/// finite, positive throughput, time per batch and ratio to the serial engine; its plots and
/// the scaling note are there. No figure is compared with a threshold (timings are the
/// lab's to report, not a test's to judge).
fn check_engine_sweep(study: &serde_json::Value, stdout: &str) {
    assert!(
        stdout.contains("SRTP batch engines"),
        "table printed:\n{stdout}"
    );
    let sweep = rows(study, "srtp_engines");
    for p in ["AES_CM_128_HMAC_SHA1_80", "AEAD_AES_128_GCM"] {
        for batch in [1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0] {
            for engine in ["serial", "simd", "threaded"] {
                let row = sweep
                    .iter()
                    .find(|r| {
                        r["profile"] == p
                            && r["batch"].as_f64() == Some(batch)
                            && r["engine"].as_str().unwrap().starts_with(engine)
                    })
                    .unwrap_or_else(|| panic!("no row for {p} batch {batch} {engine}"));
                for key in ["packets_per_s", "ns_per_packet", "batch_us", "vs_serial"] {
                    let x = row[key]
                        .as_f64()
                        .unwrap_or_else(|| panic!("{p} {batch} {engine} {key}: {}", row[key]));
                    assert!(x.is_finite() && x > 0.0, "{p} {batch} {engine} {key} = {x}");
                }
                if engine == "serial" {
                    assert_eq!(row["vs_serial"].as_f64(), Some(1.0));
                }
            }
        }
    }
    let plots: Vec<&str> = study["plots"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_str().unwrap())
        .collect();
    for id in [
        "srtp_engines_throughput_aes_cm_128_hmac_sha1_80",
        "srtp_engines_throughput_aead_aes_128_gcm",
        "srtp_engines_batch_latency",
    ] {
        assert!(plots.contains(&id), "no plot {id}: {plots:?}");
    }
    // On a machine with several cores, what it gave several threads during the run.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let ceiling = rows(study, "srtp_engine_ceiling");
    // Per profile, independent serial engines and independent multi-buffer engines.
    assert_eq!(ceiling.len(), if cores > 1 { 4 } else { 0 });
    for r in ceiling {
        let x = r["vs_one"].as_f64().unwrap();
        assert!(x.is_finite() && x > 0.0, "{r}");
    }
    let notes = study["notes"].as_array().unwrap();
    assert!(
        notes
            .iter()
            .any(|n| n.as_str().unwrap().contains("÷ serial throughput")),
        "{notes:?}"
    );
}

/// The GPU rows (issue 18): where a GPU opens (the device machine), every profile, operation
/// and quick batch size for the GPU and the threaded engine with finite figures; elsewhere one
/// row per profile saying why not, and no settings rows.
fn check_gpu_rows(study: &serde_json::Value) {
    let gpu = rows(study, "srtp_gpu");
    let variants = rows(study, "srtp_gpu_variants");
    assert!(
        variants.is_empty(),
        "--quick (and --smoke) time no settings: {variants:?}"
    );
    let unavailable: Vec<&serde_json::Value> = gpu
        .iter()
        .filter(|r| r["packets_per_s"]["not_offered"].is_string())
        .collect();
    if !unavailable.is_empty() {
        assert_eq!(gpu.len(), 2, "one row per profile: {gpu:?}");
        for r in unavailable {
            let why = r["packets_per_s"]["not_offered"].as_str().unwrap();
            assert!(why.starts_with("GPU engine unavailable: "), "{why}");
        }
        return;
    }
    for p in ["AES_CM_128_HMAC_SHA1_80", "AEAD_AES_128_GCM"] {
        for op in ["protect", "unprotect"] {
            for batch in [1024.0, 65536.0] {
                for engine in ["gpu", "threaded"] {
                    let row = gpu
                        .iter()
                        .find(|r| {
                            r["profile"] == p
                                && r["op"] == op
                                && r["batch"].as_f64() == Some(batch)
                                && r["engine"].as_str().unwrap().starts_with(engine)
                        })
                        .unwrap_or_else(|| panic!("no row for {p} {op} {batch} {engine}"));
                    for key in ["packets_per_s", "batch_p50_us", "batch_p99_us"] {
                        let x = row[key].as_f64().unwrap_or_else(|| panic!("{row}"));
                        assert!(x.is_finite() && x > 0.0, "{row}");
                    }
                }
            }
        }
    }
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

/// `lab gpu`'s engine settings: the run takes them (with or without a GPU) and its method says
/// which were used; a setting the GPU engine cannot take is refused with the flag named.
#[test]
fn lab_gpu_takes_engine_settings_and_names_them_in_the_method() {
    let (results, _) = lab_json(&[
        "gpu",
        "--smoke",
        "--no-progress",
        "--host-threads",
        "3",
        "--lanes",
        "2",
        "--chunk",
        "2048",
        "--block",
        "128",
        "--max-registers",
        "80",
        "--cpu-below",
        "512",
    ]);
    let study = &results["studies"][0];
    assert_eq!(study["study"], "gpu");
    let timed = study["method"]["timed"]
        .as_str()
        .expect("the method's timing");
    assert!(
        timed.contains("3 host × 2 lanes × 2048, block 128, ≤80 regs")
            && timed.contains("in calls_srtp, batches under 512 packets on the CPU"),
        "{timed}"
    );
    for (flag, value) in [
        ("--block", "100"),
        ("--lanes", "0"),
        ("--chunk", "40000"),
        ("--max-registers", "8"),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_secrelay"))
            .args(["lab", "gpu", "--smoke", flag, value])
            .output()
            .expect("the secrelay binary runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains(flag),
            "{flag} {value}: {}\n{stderr}",
            out.status
        );
    }
}
