//! Test helpers for the HTML report: PNG decoding and headless Chromium (render check and
//! screenshot). Shared by `crates/lab/tests/report_chromium.rs` and
//! `crates/cli/tests/lab_srtp.rs` (included there by path).

#![allow(dead_code)]

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Width, height and number of distinct pixel values of a PNG file.
pub fn png_stats(path: &Path) -> (u32, u32, usize) {
    let file =
        std::fs::File::open(path).unwrap_or_else(|e| panic!("opening {}: {e}", path.display()));
    let mut reader = png::Decoder::new(std::io::BufReader::new(file))
        .read_info()
        .unwrap_or_else(|e| panic!("decoding {}: {e}", path.display()));
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader
        .next_frame(&mut buf)
        .unwrap_or_else(|e| panic!("decoding {}: {e}", path.display()));
    let bytes = &buf[..info.buffer_size()];
    let px = info.color_type.samples()
        * if info.bit_depth == png::BitDepth::Sixteen {
            2
        } else {
            1
        };
    let distinct: HashSet<&[u8]> = bytes.chunks(px.max(1)).collect();
    (info.width, info.height, distinct.len())
}

/// A peer or tool the test needs is missing. Under CI (`CI` set, to any value), where
/// `scripts/setup` has installed every peer, the test fails with the reason; elsewhere it
/// prints `SKIPPED <test>: <reason>` and the caller returns.
pub fn missing(test: &str, why: &str) {
    if std::env::var_os("CI").is_some() {
        panic!("{test}: {why} (CI is set, and scripts/setup installs it)");
    }
    eprintln!("SKIPPED {test}: {why} (run scripts/setup)");
}

/// The Chromium binary: `$SECRELAY_CHROMIUM`, else `/usr/bin/chromium` (Debian's package,
/// installed by scripts/setup). None when there is none (after [`missing`]).
pub fn chromium(test: &str) -> Option<PathBuf> {
    let path = std::env::var_os("SECRELAY_CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    if path.exists() {
        Some(path)
    } else {
        missing(
            test,
            &format!(
                "no Chromium at {} (Debian package chromium, or set SECRELAY_CHROMIUM)",
                path.display()
            ),
        );
        None
    }
}

/// Runs headless Chromium on `page` with `extra` flags, killed (with every process it
/// started) after 60 s by coreutils' `timeout`. Returns stdout.
fn run_chromium(chromium: &Path, page: &Path, extra: &[String]) -> String {
    let profile = tempfile::tempdir().expect("temp dir for the Chromium profile");
    let url = format!(
        "file://{}",
        page.canonicalize().expect("page path").display()
    );
    let out = Command::new("timeout")
        .args(["--kill-after=5", "60"])
        .arg(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--no-default-browser-check",
            "--hide-scrollbars",
            "--virtual-time-budget=5000",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(extra)
        .arg(&url)
        .output()
        .expect("running timeout(1) with chromium");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "chromium on {url} failed ({}; 124 means it hung and was killed): {stderr}",
        out.status
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// What the page's script wrote into `<pre id="render-check">` after loading, as JSON.
pub fn render_check(chromium: &Path, page: &Path) -> (serde_json::Value, String) {
    let dom = run_chromium(chromium, page, &["--dump-dom".to_string()]);
    let start = dom
        .find("id=\"render-check\">")
        .unwrap_or_else(|| panic!("no #render-check in the DOM:\n{dom}"));
    let text = &dom[start + "id=\"render-check\">".len()..];
    let text = &text[..text.find("</pre>").expect("#render-check is closed")];
    let text = text
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&amp;", "&");
    let value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("#render-check is not JSON ({e}): {text}"));
    (value, dom)
}

/// Asserts the render check saw `svgs` SVGs, all with a non-zero size, and no script error.
pub fn assert_rendered(check: &serde_json::Value, svgs: usize) {
    assert_eq!(
        check["svgs"].as_u64(),
        Some(svgs as u64),
        "SVG count in {check}"
    );
    assert_eq!(
        check["nonzero"].as_u64(),
        Some(svgs as u64),
        "SVGs with a non-zero size in {check}"
    );
    assert_eq!(
        check["errors"].as_array().map(Vec::len),
        Some(0),
        "script errors in {check}"
    );
}

/// Takes a 1280×2000 screenshot of `page` into `png`.
pub fn screenshot(chromium: &Path, page: &Path, png: &Path) {
    run_chromium(
        chromium,
        page,
        &[
            format!("--screenshot={}", png.display()),
            "--window-size=1280,2000".to_string(),
        ],
    );
    assert!(
        png.exists(),
        "chromium wrote no screenshot at {}",
        png.display()
    );
}
