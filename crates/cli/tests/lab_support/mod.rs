//! Shared by the lab tests: run one study the way a user would (`secrelay lab STUDY --smoke
//! --json F`: every measurement as short as it can be, the study and its report whole) and
//! hand back its report; and, for every test of the `secrelay` binary that needs a peer or tool
//! (openssl, pion, valgrind, aiortc, Chromium, rtpengine), what to do when it is missing
//! ([`missing`]).

#![allow(dead_code)]

pub mod veth;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use secrelay_gateway::server::BannerReader;
use serde_json::Value;

/// A peer or tool the test needs is missing. Under CI (`CI` set, to any value), where
/// `scripts/setup` has installed every peer, the test fails with the reason; elsewhere it
/// prints `SKIPPED <test>: <reason>` and the caller returns (or, for a part of a test, goes on
/// without checking that part).
pub fn missing(test: &str, why: &str) {
    if std::env::var_os("CI").is_some() {
        panic!("{test}: {why} (CI is set, and scripts/setup installs it)");
    }
    eprintln!("SKIPPED {test}: {why} (run scripts/setup)");
}

/// Chromium (`SECRELAY_CHROMIUM`, else `/usr/bin/chromium`), or `None` after [`missing`] said
/// why.
pub fn chromium(test: &str) -> Option<std::path::PathBuf> {
    browser(
        test,
        "Chromium",
        "SECRELAY_CHROMIUM",
        "/usr/bin/chromium",
        "chromium",
    )
}

/// Firefox (`SECRELAY_FIREFOX`, else `/usr/bin/firefox-esr`), or `None` after [`missing`] said
/// why.
pub fn firefox(test: &str) -> Option<std::path::PathBuf> {
    browser(
        test,
        "Firefox",
        "SECRELAY_FIREFOX",
        "/usr/bin/firefox-esr",
        "firefox-esr",
    )
}

/// Browser `name` at `$var`, else at `default` (Debian's `package`), or `None` after
/// [`missing`] said why.
fn browser(
    test: &str,
    name: &str,
    var: &str,
    default: &str,
    package: &str,
) -> Option<std::path::PathBuf> {
    let p = std::env::var_os(var)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from(default));
    if p.exists() {
        return Some(p);
    }
    missing(
        test,
        &format!(
            "no {name} at {} (Debian package {package}, or set {var})",
            p.display()
        ),
    );
    None
}

/// Debian's rtpengine daemon (`SECRELAY_RTPENGINE`, else `/usr/bin/rtpengine`), or `None`
/// after [`missing`] said why.
pub fn rtpengine(test: &str) -> Option<std::path::PathBuf> {
    let path = std::env::var_os("SECRELAY_RTPENGINE")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from("/usr/bin/rtpengine"));
    if path.is_file() {
        return Some(path);
    }
    missing(
        test,
        &format!(
            "no rtpengine at {} (Debian package rtpengine-daemon, or set SECRELAY_RTPENGINE)",
            path.display()
        ),
    );
    None
}

/// rtpengine running on a loopback ng port of its own for a test, its media on `ports`
/// (first, last): its ng client, and the daemon killed when this is dropped.
pub struct Rtpengine {
    child: Child,
    pub ng: secrelay_testkit::ng::Ng,
}

impl Drop for Rtpengine {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts [`rtpengine`] for test `test` on one worker thread, 127.0.0.1 its interface, and
/// waits until it answers `ping`; `None` after [`missing`] said why there is none.
pub fn start_rtpengine(test: &str, ports: (u16, u16)) -> Option<Rtpengine> {
    start_rtpengine_with(test, ports, &[])
}

/// [`start_rtpengine`] with `extra` options.
pub fn start_rtpengine_with(test: &str, ports: (u16, u16), extra: &[String]) -> Option<Rtpengine> {
    use std::os::unix::process::CommandExt;
    let path = rtpengine(test)?;
    let ng_port = std::net::UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .map(|a| a.port())
        .expect("a free UDP port");
    let child = Command::new(&path)
        .args([
            "--config-file=none",
            "--interface=127.0.0.1",
            &format!("--listen-ng=127.0.0.1:{ng_port}"),
            "--foreground",
            "--log-stderr",
            "--log-level=3",
            "--table=-1",
            "--num-threads=1",
            &format!("--port-min={}", ports.0),
            &format!("--port-max={}", ports.1),
        ])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("rtpengine starts");
    let ng = secrelay_testkit::ng::Ng::new(([127, 0, 0, 1], ng_port).into()).unwrap();
    let mut r = Rtpengine { child, ng };
    let up = Instant::now() + Duration::from_secs(10);
    let ping = || {
        vec![(
            "command".to_owned(),
            secrelay_wire::bencode::Bencode::str("ping"),
        )]
    };
    while r.ng.call(ping()).is_err() {
        assert!(Instant::now() < up, "rtpengine does not answer ping");
        std::thread::sleep(Duration::from_millis(100));
    }
    Some(r)
}

/// Every SRTP profile, by SDP name.
pub const PROFILES: [&str; 7] = [
    "AES_CM_128_HMAC_SHA1_80",
    "AES_CM_128_HMAC_SHA1_32",
    "AES_256_CM_HMAC_SHA1_80",
    "AES_256_CM_HMAC_SHA1_32",
    "AEAD_AES_128_GCM",
    "AEAD_AES_256_GCM",
    "NULL_HMAC_SHA1_80",
];

/// Runs `secrelay lab STUDY --quick --no-progress --json F`, asserts it succeeded and that the
/// JSON holds this one study; returns the study's report and what it printed on stdout.
pub fn run_study(study: &str) -> (Value, String) {
    let (v, stdout) = run_lab(study);
    (v["studies"][0].clone(), stdout)
}

/// [`run_study`], returning the whole JSON (the study and the run's `sizing` summary).
pub fn run_lab(study: &str) -> (Value, String) {
    let (v, stdout) = lab_json(&[study, "--smoke", "--no-progress"]);
    assert_eq!(v["studies"][0]["study"], study);
    assert_eq!(v["studies"].as_array().map(Vec::len), Some(1));
    (v, stdout)
}

/// Runs `secrelay lab ARGS… --json F` as a user would, asserts that it succeeded (its output
/// in the message if not), and returns the JSON report and what it printed on stdout.
pub fn lab_json(args: &[&str]) -> (Value, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("report.json");
    let out = Command::new(env!("CARGO_BIN_EXE_secrelay"))
        .arg("lab")
        .args(args)
        .arg("--json")
        .arg(&json)
        .output()
        .expect("the secrelay binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "lab {}: {}\n{stdout}\n{}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let v = serde_json::from_slice(&std::fs::read(&json).expect("the JSON report written"))
        .expect("the report is JSON");
    (v, stdout)
}

/// The last JSON line `script` printed (`out`, from `Command::output`); a panic that shows
/// what it printed, its exit status and `context` (a gateway's log, say) when there is none.
pub fn script_json(script: &str, out: &std::process::Output, context: &str) -> Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| {
            panic!(
                "{script} printed no JSON ({}):\n{stdout}\n{}\n{context}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            )
        })
}

/// The rows of the study's table with this id.
pub fn rows<'a>(study: &'a Value, id: &str) -> &'a [Value] {
    study["tables"]
        .as_array()
        .expect("tables")
        .iter()
        .find(|t| t["id"] == id)
        .unwrap_or_else(|| panic!("no table {id}"))["rows"]
        .as_array()
        .expect("rows")
}

/// Stops the server however the test ends; its admin key (`--admin-key-file` for the lab
/// tools aimed at it).
pub struct Server(pub Child, pub secrelay_testkit::AdminKeyFile);

impl Server {
    /// The file holding its admin key, for a lab tool's `--admin-key-file`.
    pub fn admin_key_file(&self) -> &str {
        self.1.path().to_str().expect("a UTF-8 temporary path")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `secrelay serve` on loopback with one worker, and its HTTP base URL.
pub fn serve() -> (Server, String) {
    serve_with(&[])
}

/// The same with more arguments (a `--config` file).
pub fn serve_with(extra: &[&str]) -> (Server, String) {
    let admin = secrelay_testkit::AdminKeyFile::new().expect("an admin key file");
    let mut child = Command::new(env!("CARGO_BIN_EXE_secrelay"))
        .args(["serve", "--http", "127.0.0.1:0", "--udp", "127.0.0.1:0"])
        .args(["--workers", "1", "--log", "warn"])
        .arg("--admin-key-file")
        .arg(admin.path())
        .args(extra)
        .stderr(Stdio::piped())
        .spawn()
        .expect("the secrelay binary runs");
    let mut lines = BufReader::new(child.stderr.take().expect("piped stderr")).lines();
    let server = Server(child, admin);
    let mut url = None;
    let end = Instant::now() + Duration::from_secs(30);
    while url.is_none() && Instant::now() < end {
        let Some(Ok(line)) = lines.next() else { break };
        url = secrelay_lab::client::compare::serve_banner_url(&line);
    }
    let url = url.expect("serve printed its HTTP address");
    // Keep reading its log so that it never blocks on a full pipe.
    std::thread::spawn(move || lines.for_each(drop));
    (server, url)
}

/// `secrelay serve --config CONFIG EXTRA…` as a child process (logging at info), and its
/// banner and log ([`serve_banner`]); `None` for the banner when it printed none.
pub fn serve_config(
    config: &std::path::Path,
    extra: &[&str],
) -> (Child, Option<BannerReader>, Arc<Mutex<String>>) {
    let mut serve = Command::new(env!("CARGO_BIN_EXE_secrelay"));
    serve
        .args(["serve", "--log", "info", "--config"])
        .arg(config)
        .args(extra);
    spawn_serve(serve)
}

/// `serve` (a `secrelay serve` command) started with its stderr piped and no stdin or stdout,
/// and its banner and log ([`serve_banner`]).
pub fn spawn_serve(mut serve: Command) -> (Child, Option<BannerReader>, Arc<Mutex<String>>) {
    let mut child = serve
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("secrelay serve starts");
    let (banner, log) = serve_banner(&mut child);
    (child, banner, log)
}

/// The banner of a `secrelay serve` spawned with its stderr piped, and its log: what it printed
/// so far and, from a thread that keeps reading (so that the pipe never fills), all it prints
/// after.
pub fn serve_banner(child: &mut Child) -> (Option<BannerReader>, Arc<Mutex<String>>) {
    secrelay_gateway::server::banner::read_child_banner(child)
}
