//! The handshake lab end to end: `secrelay lab handshake-server` against `secrelay lab
//! handshake` over loopback UDP with the keys of both sides compared, the load generator
//! against `openssl s_server` with the keys compared to what s_server prints, `lab handshake
//! --in-memory --smoke`, and bad flags. A missing peer (openssl, pion, valgrind) is a failure
//! under CI and SKIPPED elsewhere (`lab_support::missing`).
//!
//! Every wait is bounded; every child is killed when its guard drops.

mod lab_support;

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

const WAIT: Duration = Duration::from_secs(20);

fn secrelay() -> Command {
    Command::new(env!("CARGO_BIN_EXE_secrelay"))
}

/// `secrelay lab handshake --target TARGET`, the load tool, to which a test adds its flags.
fn load_tool(target: &str) -> Command {
    let mut cmd = secrelay();
    cmd.args(["lab", "handshake", "--target", target]);
    cmd
}

fn run(args: &[&str]) -> Output {
    secrelay().args(args).output().expect("run secrelay")
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A child killed and reaped on drop, whose stdout lines arrive on a channel.
struct Guard {
    child: Child,
    lines: mpsc::Receiver<String>,
    stderr_path: PathBuf,
}

impl Guard {
    fn spawn(mut cmd: Command, stderr_path: &Path, keep_stdin: bool) -> Guard {
        let stderr = std::fs::File::create(stderr_path).expect("stderr file");
        cmd.stdout(Stdio::piped())
            .stderr(stderr)
            .stdin(if keep_stdin {
                Stdio::piped()
            } else {
                Stdio::null()
            });
        let mut child = cmd.spawn().expect("spawn");
        let out = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Guard {
            child,
            lines: rx,
            stderr_path: stderr_path.to_path_buf(),
        }
    }

    /// The first stdout line satisfying `pred`, waiting at most `WAIT`.
    fn line(&self, pred: impl Fn(&str) -> bool) -> Option<String> {
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.checked_duration_since(Instant::now())?;
            match self.lines.recv_timeout(left) {
                Ok(l) if pred(&l) => return Some(l),
                Ok(_) => {}
                Err(_) => return None,
            }
        }
    }

    /// Every stdout line that arrived so far or arrives within `wait`.
    fn rest(&self, wait: Duration) -> Vec<String> {
        let deadline = Instant::now() + wait;
        let mut v = Vec::new();
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.lines.recv_timeout(left) {
                Ok(l) => v.push(l),
                Err(_) => break,
            }
        }
        v
    }

    fn wait_exit(&mut self, wait: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + wait;
        while Instant::now() < deadline {
            if let Ok(Some(s)) = self.child.try_wait() {
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// Sends `signal` (e.g. "-TERM") and waits for the exit.
    fn stop(&mut self, signal: &str) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        assert!(Command::new("kill")
            .args([signal, &pid])
            .status()
            .expect("kill")
            .success());
        self.wait_exit(WAIT)
            .unwrap_or_else(|| panic!("no exit after kill {signal}\n{}", self.stderr()))
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn read_jsonl(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("keylog line {l:?}: {e}")))
        .collect()
}

fn s(v: &Value, key: &str) -> String {
    v[key]
        .as_str()
        .unwrap_or_else(|| panic!("no {key} in {v}"))
        .to_string()
}

/// Bytes of the EXTRACTOR-dtls_srtp block for a profile (RFC 5764 §4.2, RFC 7714).
fn block_len(profile: &str) -> usize {
    match profile {
        "SRTP_AES128_CM_SHA1_80" | "SRTP_AES128_CM_SHA1_32" => 60,
        "SRTP_AEAD_AES_128_GCM" => 56,
        "SRTP_AEAD_AES_256_GCM" => 88,
        p => panic!("unexpected profile {p}"),
    }
}

/// Starts `secrelay lab handshake-server --listen 127.0.0.1:0 --duration 60 EXTRA…` and returns
/// it with the address it prints first.
fn start_server(dir: &Path, extra: &[&OsStr]) -> (Guard, String) {
    let mut cmd = secrelay();
    cmd.args([
        "lab",
        "handshake-server",
        "--listen",
        "127.0.0.1:0",
        "--duration",
        "60",
    ])
    .args(extra);
    let server = Guard::spawn(cmd, &dir.join("server.err"), false);
    let first = server
        .line(|_| true)
        .unwrap_or_else(|| panic!("server printed nothing\n{}", server.stderr()));
    let addr = first
        .strip_prefix("listening ")
        .unwrap_or_else(|| panic!("first line {first:?}"))
        .to_string();
    assert!(
        addr.starts_with("127.0.0.1:") && !addr.ends_with(":0"),
        "{addr}"
    );
    (server, addr)
}

/// The load generator's `--json` report.
fn read_report(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn load_generator_against_handshake_server_keys_match() {
    let dir = tempfile::tempdir().unwrap();
    let server_log = dir.path().join("server.keylog");
    let client_log = dir.path().join("client.keylog");
    let report = dir.path().join("load.json");
    let (mut server, addr) = start_server(
        dir.path(),
        &[OsStr::new("--keylog"), server_log.as_os_str()],
    );

    let out = load_tool(&addr)
        .args([
            "--handshakes",
            "50",
            "--connections",
            "8",
            "--threads",
            "2",
            "--no-progress",
            "--keylog",
        ])
        .arg(&client_log)
        .arg("--json")
        .arg(&report)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("95P") && stdout.contains("p99"), "{stdout}");
    assert!(
        stdout.contains("not offered by the engine"),
        "resumption must be stated: {stdout}"
    );

    // SIGTERM: the server stops cleanly and says so.
    let status = server.stop("-TERM");
    assert!(
        status.success(),
        "server exit {status:?}\n{}",
        server.stderr()
    );
    assert!(
        server.stderr().contains("stopped after"),
        "{}",
        server.stderr()
    );

    let r = read_report(&report);
    assert_eq!(r["completed"], 50, "{r}");
    assert_eq!(r["failed"], 0, "{r}");
    for key in ["max", "avg", "p95", "min"] {
        let v = r["handshakes_per_s"][key]
            .as_f64()
            .unwrap_or_else(|| panic!("handshakes_per_s.{key} in {r}"));
        assert!(v.is_finite() && v > 0.0, "{key} = {v}");
    }
    let lat = &r["latency_ms"];
    let p: Vec<f64> = ["p50", "p95", "p99", "max"]
        .iter()
        .map(|k| lat[k].as_f64().unwrap())
        .collect();
    assert!(
        p[0] > 0.0 && p.windows(2).all(|w| w[0] <= w[1]),
        "latency percentiles {p:?}"
    );
    assert!(r["method"]["timed"]
        .as_str()
        .unwrap()
        .contains("ClientHello"));
    assert!(r["method"]["machine"]["cores"].as_u64().unwrap() >= 1);

    let server_lines = read_jsonl(&server_log);
    let client_lines = read_jsonl(&client_log);
    assert_eq!(server_lines.len(), 50);
    assert_eq!(client_lines.len(), 50);
    // A client's address can come back for a later handshake (the OS reuses an ephemeral port
    // once a socket is closed), so the server's lines are kept per address, all of them.
    let mut by_peer: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    for l in &server_lines {
        by_peer
            .entry(s(l, "peer"))
            .or_default()
            .push((s(l, "srtp_profile"), s(l, "keying_material")));
    }
    for c in &client_lines {
        assert_eq!(s(c, "peer"), addr);
        let (km, profile) = (s(c, "keying_material"), s(c, "srtp_profile"));
        let theirs = by_peer
            .get(&s(c, "local"))
            .unwrap_or_else(|| panic!("server has no line for {c}"));
        assert!(
            theirs.iter().any(|(p, k)| *p == profile && *k == km),
            "keys differ for {}: client {profile} {km}, server {theirs:?}",
            s(c, "local")
        );
        assert_eq!(km.len(), 2 * block_len(&profile));
    }
    let distinct: BTreeSet<&String> = by_peer.values().flatten().map(|(_, km)| km).collect();
    assert_eq!(distinct.len(), 50, "every handshake has its own keys");
}

/// RSA certificates on both ends: `--engine auto` puts them on OpenSSL, and the keys of both
/// sides still match.
#[test]
fn rsa_certificates_run_on_the_openssl_engine_and_keys_match() {
    let dir = tempfile::tempdir().unwrap();
    let server_log = dir.path().join("server.keylog");
    let client_log = dir.path().join("client.keylog");
    let report = dir.path().join("load.json");
    let (_server, addr) = start_server(
        dir.path(),
        &[
            OsStr::new("--cert-type"),
            OsStr::new("rsa-2048"),
            OsStr::new("--keylog"),
            server_log.as_os_str(),
        ],
    );
    let out = load_tool(&addr)
        .args([
            "--handshakes",
            "6",
            "--connections",
            "2",
            "--cert-type",
            "rsa-2048",
            "--engine",
            "auto",
            "--no-progress",
            "--keylog",
        ])
        .arg(&client_log)
        .arg("--json")
        .arg(&report)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let r = read_report(&report);
    assert_eq!(r["completed"], 6, "{r}");
    assert_eq!(r["engine"], "openssl", "{r}");
    assert!(r["method"]["timed"]
        .as_str()
        .unwrap()
        .contains("OpenSSL engine"));
    let by_local: BTreeMap<String, String> = read_jsonl(&server_log)
        .iter()
        .map(|l| (s(l, "peer"), s(l, "keying_material")))
        .collect();
    let clients = read_jsonl(&client_log);
    assert_eq!(clients.len(), 6);
    for c in &clients {
        assert_eq!(
            by_local.get(&s(c, "local")),
            Some(&s(c, "keying_material")),
            "{c}"
        );
    }
}

#[test]
fn server_with_a_fingerprint_refuses_other_clients_and_counts_why() {
    let dir = tempfile::tempdir().unwrap();
    let other =
        secrelay_dtls::Certificate::self_signed(secrelay_dtls::KeyType::EcdsaP256, "someone-else")
            .unwrap();
    let (mut server, addr) = start_server(
        dir.path(),
        &[
            OsStr::new("--fingerprint"),
            OsStr::new(&other.fingerprint().to_string()),
        ],
    );
    let report = dir.path().join("load.json");
    let out = load_tool(&addr)
        .args([
            "--handshakes",
            "2",
            "--connections",
            "2",
            "--timeout",
            "1",
            "--no-progress",
            "--json",
        ])
        .arg(&report)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let r = read_report(&report);
    assert_eq!(r["completed"], 0, "{r}");
    assert_eq!(r["failed"], 2, "{r}");
    let status = server.stop("-INT");
    assert!(status.success());
    assert!(
        server.stderr().contains("fingerprint mismatch: 2"),
        "{}",
        server.stderr()
    );
}

/// `--groups` on both commands: a P-256-only server takes P-256 clients and fails X25519-only
/// ones (no common ECDHE group) instead of falling back.
#[test]
fn groups_flags_narrow_the_key_exchange_on_both_ends() {
    let dir = tempfile::tempdir().unwrap();
    let (mut server, addr) =
        start_server(dir.path(), &[OsStr::new("--groups"), OsStr::new("p-256")]);
    let load = |groups: &str, handshakes: &str, report: &Path| {
        let out = load_tool(&addr)
            .args([
                "--handshakes",
                handshakes,
                "--groups",
                groups,
                "--timeout",
                "1",
                "--no-progress",
                "--json",
            ])
            .arg(report)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out));
        read_report(report)
    };
    let r = load("p-256", "3", &dir.path().join("p256.json"));
    assert_eq!(r["completed"], 3, "{r}");
    let r = load("x25519", "2", &dir.path().join("x25519.json"));
    assert_eq!(r["completed"], 0, "{r}");
    assert_eq!(r["failed"], 2, "{r}");
    assert!(server.stop("-INT").success());
}

#[test]
fn server_with_a_private_ca_takes_clients_it_issued() {
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca");
    let ca_s = ca.to_str().unwrap();
    let o = run(&["ca", "init", "--dir", ca_s]);
    assert!(o.status.success(), "{}", text(&o));
    let o = run(&[
        "ca", "issue", "--dir", ca_s, "--name", "loadgen", "--client",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let (mut server, addr) = start_server(dir.path(), &[OsStr::new("--ca"), OsStr::new(ca_s)]);
    let report = dir.path().join("load.json");
    let out = load_tool(&addr)
        .args([
            "--handshakes",
            "3",
            "--connections",
            "3",
            "--no-progress",
            "--cert",
        ])
        .arg(ca.join("loadgen.pem"))
        .arg("--key")
        .arg(ca.join("loadgen.key"))
        .arg("--json")
        .arg(&report)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let r = read_report(&report);
    assert_eq!(r["completed"], 3, "{r}\n{}", server.stderr());
    assert_eq!(r["failed"], 0, "{r}");
    // A self-signed client is refused by the CA check.
    let out = load_tool(&addr)
        .args([
            "--handshakes",
            "1",
            "--timeout",
            "1",
            "--no-progress",
            "--json",
        ])
        .arg(&report)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let r = read_report(&report);
    assert_eq!(r["completed"], 0, "{r}");
    assert!(server.stop("-TERM").success());
    assert!(
        server.stderr().contains("not trusted by the CA: 1"),
        "{}",
        server.stderr()
    );
}

/// secrelay's client endpoint, for peers driven by hand.
fn client_endpoint() -> secrelay_dtls::Endpoint {
    let cert = secrelay_dtls::Certificate::self_signed(secrelay_dtls::KeyType::EcdsaP256, "storm")
        .unwrap();
    let config = secrelay_dtls::EndpointConfig::new(
        secrelay_dtls::Role::Client,
        secrelay_dtls::LocalCertificate::from(&cert),
        secrelay_dtls::PeerAuth::AnyCertificate,
    );
    secrelay_dtls::Endpoint::new(config, Instant::now()).unwrap()
}

/// The next datagram the endpoint sends (its queue drained up to it).
fn next_transmit(ep: &mut secrelay_dtls::Endpoint) -> Vec<u8> {
    loop {
        match ep.poll_output().expect("a flight") {
            secrelay_dtls::Output::Transmit(d) => return d,
            secrelay_dtls::Output::Timeout(_) => panic!("nothing to send"),
            _ => {}
        }
    }
}

/// A peer that sends its first ClientHello, answers the server's HelloVerifyRequest with the
/// cookie, and then goes silent.
fn cookie_then_silence(s: &UdpSocket, addr: &str) {
    let mut ep = client_endpoint();
    s.send_to(&next_transmit(&mut ep), addr).unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    let mut buf = [0u8; 2048];
    let n = s.recv(&mut buf).expect("a HelloVerifyRequest");
    assert_eq!(buf[13], 3, "hello_verify_request");
    while ep.poll_output().is_some() {}
    ep.handle_datagram(Instant::now(), &buf[..n]);
    s.send_to(&next_transmit(&mut ep), addr).unwrap();
}

/// Peers that never answer the HelloVerifyRequest make no endpoint; of those that do and then
/// fall silent, `--max-in-flight` get one, the others are refused at the cap, and the silent
/// endpoints are dropped after `--idle-timeout`.
#[test]
fn server_makes_endpoints_only_for_returned_cookies_caps_them_and_drops_silent_ones() {
    let dir = tempfile::tempdir().unwrap();
    let (mut server, addr) = start_server(
        dir.path(),
        &[
            OsStr::new("--max-in-flight"),
            OsStr::new("4"),
            OsStr::new("--idle-timeout"),
            OsStr::new("0.3"),
        ],
    );
    // 20 peers send a ClientHello and never answer the HelloVerifyRequest; one sends junk.
    let mut ep = client_endpoint();
    let hello = next_transmit(&mut ep);
    let spoofed: Vec<UdpSocket> = (0..20)
        .map(|_| UdpSocket::bind("127.0.0.1:0").unwrap())
        .collect();
    for s in &spoofed {
        s.send_to(&hello, &addr).unwrap();
    }
    spoofed[0].send_to(b"not dtls", &addr).unwrap();
    // 20 more return the cookie, then fall silent: 4 endpoints, 16 refused at the cap.
    let returning: Vec<UdpSocket> = (0..20)
        .map(|_| UdpSocket::bind("127.0.0.1:0").unwrap())
        .collect();
    for s in &returning {
        cookie_then_silence(s, &addr);
    }
    // Stats every second: wait for a line showing the silent ones dropped.
    let deadline = Instant::now() + WAIT;
    while !server.stderr().contains("endpoints 0  refused at cap 16") {
        assert!(Instant::now() < deadline, "{}", server.stderr());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(server.stop("-TERM").success());
    let err = server.stderr();
    assert!(err.contains("(idle timeout): 4"), "{err}");
    assert!(err.contains("completed 0"), "{err}");
    assert!(
        err.contains("hello-verify 40  endpoints made 4"),
        "a HelloVerifyRequest for each of the 40 first ClientHellos, an endpoint for the 4 \
         returned cookies under the cap and none for the rest\n{err}"
    );
}

fn find_on_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

#[test]
fn load_generator_against_openssl_s_server_keys_match() {
    let Some(openssl) = find_on_path("openssl") else {
        lab_support::missing(
            "load_generator_against_openssl_s_server_keys_match",
            "no openssl command on PATH (Debian package openssl)",
        );
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let cert = secrelay_dtls::Certificate::self_signed(
        secrelay_dtls::KeyType::EcdsaP256,
        "openssl-s-server",
    )
    .unwrap();
    let (cert_pem, key_pem) = cert.to_pem();
    let (cert_path, key_path) = (dir.path().join("s.crt.pem"), dir.path().join("s.key.pem"));
    std::fs::write(&cert_path, cert_pem).unwrap();
    std::fs::write(&key_path, key_pem.as_bytes()).unwrap();
    const N: usize = 4;
    // s_server takes one client at a time and quits at stdin EOF: stdin stays an open pipe.
    let mut started = None;
    for attempt in 0..3 {
        let port = UdpSocket::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let accept = format!("127.0.0.1:{port}");
        let mut cmd = Command::new(&openssl);
        cmd.args(["s_server", "-dtls1_2", "-accept", &accept])
            .arg("-cert")
            .arg(&cert_path)
            .arg("-key")
            .arg(&key_path)
            .args([
                "-use_srtp",
                "SRTP_AES128_CM_SHA1_80",
                "-keymatexport",
                "EXTRACTOR-dtls_srtp",
                "-keymatexportlen",
                "60",
            ])
            .args(["-verify", "1", "-naccept", &N.to_string()]);
        let g = Guard::spawn(
            cmd,
            &dir.path().join(format!("s_server{attempt}.err")),
            true,
        );
        if g.line(|l| l.trim() == "ACCEPT").is_some() {
            started = Some((g, accept));
            break;
        }
    }
    let (mut s_server, accept) = started.expect("openssl s_server did not start");
    let client_log = dir.path().join("client.keylog");
    let out = load_tool(&accept)
        .args([
            "--handshakes",
            &N.to_string(),
            "--connections",
            "1",
            "--no-progress",
            "--keylog",
        ])
        .arg(&client_log)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    // With -naccept N, s_server exits after the N-th client's close_notify.
    s_server.wait_exit(WAIT);
    let printed: BTreeSet<String> = s_server
        .rest(Duration::from_millis(200))
        .iter()
        .filter_map(|l| {
            l.trim()
                .strip_prefix("Keying material:")
                .map(|h| h.trim().to_ascii_lowercase())
        })
        .collect();
    let ours: BTreeSet<String> = read_jsonl(&client_log)
        .iter()
        .map(|l| s(l, "keying_material"))
        .collect();
    assert_eq!(ours.len(), N, "{}", text(&out));
    assert!(read_jsonl(&client_log)
        .iter()
        .all(|l| s(l, "srtp_profile") == "SRTP_AES128_CM_SHA1_80"));
    assert_eq!(
        printed,
        ours,
        "s_server printed other keys\n{}",
        s_server.stderr()
    );
}

/// Runs `secrelay ARGS`, which must fail with `says` in its error output.
fn refused(args: &[&str], says: &str) {
    let o = run(args);
    assert!(!o.status.success(), "{args:?} succeeded");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains(says),
        "{args:?}: {}",
        text(&o)
    );
}

#[test]
fn bad_flags_are_named() {
    refused(
        &[
            "lab",
            "handshake-server",
            "--listen",
            "127.0.0.1:0",
            "--groups",
            "p-521",
        ],
        "--groups",
    );
    refused(
        &["lab", "handshake", "--in-memory", "--groups", "p-256"],
        "--groups belongs to the load mode",
    );
    refused(
        &[
            "lab",
            "handshake",
            "--target",
            "not-an-address",
            "--handshakes",
            "1",
        ],
        "--target",
    );
    refused(
        &[
            "lab",
            "handshake",
            "--target",
            "127.0.0.1:9",
            "--handshakes",
            "1",
            "--cert-type",
            "rsa-2048",
            "--engine",
            "dimpl",
        ],
        "not offered by the engine",
    );
    refused(
        &[
            "lab",
            "handshake",
            "--target",
            "127.0.0.1:9",
            "--handshakes",
            "1",
            "--engine",
            "boringssl",
        ],
        "--engine",
    );
    refused(
        &[
            "lab",
            "handshake-server",
            "--listen",
            "127.0.0.1:0",
            "--engine",
            "nope",
        ],
        "--engine",
    );
    refused(
        &["lab", "handshake", "--in-memory", "--engine", "x"],
        "--engine",
    );
    refused(
        &[
            "lab",
            "handshake-server",
            "--listen",
            "127.0.0.1:0",
            "--srtp-profiles",
            "SRTP_BOGUS",
        ],
        "--srtp-profiles",
    );
    refused(
        &["lab", "handshake", "--target", "127.0.0.1:9"],
        "--handshakes",
    );
}

fn num(row: &Value, key: &str) -> f64 {
    let v = row[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} is no number in {row}"));
    assert!(v.is_finite() && v > 0.0, "{key} = {v} in {row}");
    v
}

#[test]
fn in_memory_study_quick_has_every_stack() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("hs.json");
    let out = secrelay()
        .args([
            "lab",
            "handshake",
            "--in-memory",
            "--smoke",
            "--no-progress",
            "--json",
        ])
        .arg(&json)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let study = &v["studies"][0];
    assert_eq!(study["study"], "handshake");
    assert!(study["method"]["timed"]
        .as_str()
        .unwrap()
        .contains("rounds"));
    let tables = study["tables"].as_array().unwrap();
    let table = |id: &str| {
        tables
            .iter()
            .find(|t| t["id"] == id)
            .unwrap_or_else(|| panic!("no table {id}"))
    };
    sizing_from_the_phase_rows(&v["sizing"], table("handshake_phases"));
    let rows = table("handshake_in_memory")["rows"].as_array().unwrap();
    let find = |stack: &str, cert: &str, cookies: &str| -> Vec<&Value> {
        rows.iter()
            .filter(|r| {
                r["stack"].as_str().unwrap().starts_with(stack)
                    && r["cert"] == cert
                    && r["cookies"] == cookies
            })
            .collect()
    };
    // secrelay both sides, P-256 and P-384 certificates, ECDHE on X25519 (dimpl's default) and
    // on P-256 (the reference profile): measured, with the ratios.
    for (cert, cookies, kx) in [
        ("ECDSA P-256", "yes", "X25519"),
        ("ECDSA P-256", "no", "X25519"),
        ("ECDSA P-384", "yes", "X25519"),
        ("ECDSA P-256", "yes", "P-256"),
    ] {
        let r: Vec<&Value> = find("secrelay (dimpl", cert, cookies)
            .into_iter()
            .filter(|r| r["kx"].as_str().unwrap().starts_with(kx))
            .collect();
        assert_eq!(r.len(), 1, "{cert} {cookies} {kx}");
        for k in [
            "handshakes_per_s",
            "server_us",
            "client_us",
            "server_vs_floor",
            "vs_openssl",
        ] {
            num(r[0], k);
        }
    }
    // The engine's refusals are rows, not gaps.
    for cert in ["ed25519", "rsa-2048", "rsa-3072"] {
        let r = find("secrelay (dimpl", cert, "yes");
        assert!(
            r[0]["server_us"]["not_offered"]
                .as_str()
                .unwrap()
                .contains("not offered by the engine"),
            "{}",
            r[0]
        );
    }
    // OpenSSL with ECDSA P-256, RSA-2048 and RSA-3072 server certificates.
    for cert in ["ECDSA P-256", "RSA-2048", "RSA-3072"] {
        let r = find("OpenSSL", cert, "no");
        assert_eq!(r.len(), 1, "OpenSSL {cert}");
        num(r[0], "handshakes_per_s");
        num(r[0], "server_us");
    }
    // secrelay's server under an OpenSSL client, per SRTP profile.
    let profiles: Vec<&str> = rows
        .iter()
        .filter(|r| r["stack"] == "secrelay server, OpenSSL client")
        .filter_map(|r| r["srtp_profile"].as_str())
        .collect();
    for p in [
        "SRTP_AES128_CM_SHA1_80",
        "SRTP_AEAD_AES_128_GCM",
        "SRTP_AEAD_AES_256_GCM",
    ] {
        assert!(profiles.contains(&p), "{profiles:?}");
    }
    // pion: measured, or not offered with the reason (a failure under CI).
    let pion: Vec<&Value> = rows.iter().filter(|r| r["client"] == "pion").collect();
    assert!(!pion.is_empty());
    let mut pion_missing = None;
    for r in pion {
        if r["server_us"].is_number() {
            num(r, "server_us");
            num(r, "handshakes_per_s");
        } else {
            let why = r["server_us"]["not_offered"].as_str().unwrap();
            assert!(why.starts_with("not offered"), "{r}");
            pion_missing = Some(why);
        }
    }
    if let Some(why) = pion_missing {
        lab_support::missing("in_memory_study_quick_has_every_stack (pion rows)", why);
    }
    // Instruction counts: present when valgrind is, else the reason is in the method (a
    // failure under CI).
    let instructions = study["method"]["instructions"].as_str().unwrap();
    if instructions.starts_with("callgrind") {
        num(
            find("secrelay (dimpl", "ECDSA P-256", "yes")[0],
            "instructions",
        );
        num(find("OpenSSL", "ECDSA P-256", "no")[0], "instructions");
    } else {
        assert!(instructions.starts_with("not counted"), "{instructions}");
        lab_support::missing(
            "in_memory_study_quick_has_every_stack (instruction counts)",
            instructions,
        );
    }
    let floor = table("crypto_floor")["rows"].as_array().unwrap();
    assert_eq!(floor.len(), 3);
    for r in floor {
        for k in ["sign_us", "verify_us", "keygen_us", "ecdh_us", "sum_us"] {
            num(r, k);
        }
    }
    // The back-to-back server's time split, one row per ECDHE group: every part measured (a
    // positive number), and the public-key column made of its four parts (a median of sums
    // against a sum of medians: checked loosely).
    let split = table("server_split")["rows"].as_array().unwrap();
    assert_eq!(split.len(), 2, "{split:?}");
    for r in split {
        let parts = [
            "sign_us",
            "verify_us",
            "key_pair_us",
            "ecdh_us",
            "hmac_us",
            "hash_us",
            "aead_us",
        ];
        for k in parts {
            num(r, k);
        }
        let public_key = num(r, "public_key_us");
        let sum: f64 = parts[..4].iter().map(|k| num(r, k)).sum();
        assert!((public_key / sum - 1.0).abs() < 0.25, "{r}");
        for k in ["symmetric_us", "floor_us", "rest_us"] {
            num(r, k);
        }
        assert!(num(r, "timed_us") > public_key, "{r}");
    }
    phase_tables_hold(
        &table("handshake_phases")["rows"],
        &table("handshake_links")["rows"],
    );
    assert!(study["method"]["timed"]
        .as_str()
        .unwrap()
        .contains("simulated"));
    let links_plot = study["plots"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["id"] == "handshake_links")
        .expect("the per-link plot");
    let measured = table("handshake_links")["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["status"] == "measured")
        .count();
    assert_eq!(
        links_plot["categories"].as_array().unwrap().len(),
        measured,
        "{links_plot}"
    );
    let plot = &study["plots"][0];
    let categories = plot["categories"].as_array().unwrap().len();
    assert!(categories >= 8, "{plot}");
    for s in plot["series"].as_array().unwrap() {
        assert_eq!(s["points"].as_array().unwrap().len(), categories);
    }
}

const SUITES: [&str; 5] = [
    "ECDHE-ECDSA-AES128-GCM-SHA256",
    "ECDHE-ECDSA-AES256-GCM-SHA384",
    "ECDHE-RSA-AES128-GCM-SHA256",
    "ECDHE-ECDSA-AES128-CCM8",
    "DHE-RSA-AES128-GCM-SHA256",
];
const CERTS: [&str; 4] = ["rsa-2048", "rsa-3072", "ecdsa-p256", "ecdsa-p384"];

/// The 002 d tables: every suite × certificate row in both, each either measured or carrying
/// its reason; facts that hold on any machine.
fn phase_tables_hold(phases: &Value, links: &Value) {
    let (phases, links) = (phases.as_array().unwrap(), links.as_array().unwrap());
    let row = |rows: &[Value], suite: &str, cert: &str| -> Value {
        let found: Vec<&Value> = rows
            .iter()
            .filter(|r| r["suite"] == suite && r["cert"] == cert)
            .collect();
        assert_eq!(found.len(), 1, "{suite} × {cert}");
        found[0].clone()
    };
    for suite in SUITES {
        for cert in CERTS {
            let ecdsa_suite = suite.starts_with("ECDHE-ECDSA");
            let applicable = ecdsa_suite == cert.starts_with("ecdsa");
            for (r, key) in [
                (row(phases, suite, cert), "handshake_us"),
                (row(links, suite, cert), "wan_handshake_ms"),
            ] {
                let status = r["status"].as_str().unwrap();
                if !applicable {
                    assert_eq!(status, "not applicable", "{r}");
                }
                if status == "measured" {
                    num(&r, key);
                } else {
                    let why = r[key]["not_offered"].as_str().unwrap_or_default();
                    assert!(
                        why.starts_with(status) || why.starts_with("refused"),
                        "{status} without its reason: {r}"
                    );
                    assert!(why.len() > status.len() + 10, "{r}");
                }
            }
        }
    }
    // The defaults run every applicable combination (auto: dimpl for ECDSA GCM, OpenSSL else).
    let p256 = row(phases, "ECDHE-ECDSA-AES128-GCM-SHA256", "ecdsa-p256");
    let rsa3072 = row(phases, "ECDHE-RSA-AES128-GCM-SHA256", "rsa-3072");
    for r in [&p256, &rsa3072] {
        assert_eq!(r["status"], "measured", "{r}");
        for k in [
            "validate_us",
            "fingerprint_us",
            "sign_us",
            "verify_us",
            "keygen_us",
            "shared_us",
            "server_us",
        ] {
            num(r, k);
        }
    }
    assert!(p256["engine"].as_str().unwrap().starts_with("dimpl"));
    assert!(rsa3072["engine"].as_str().unwrap().starts_with("OpenSSL"));
    // An RSA-3072 handshake costs more than a P-256 one (its private-key operation alone is
    // several times a whole P-256 handshake).
    assert!(
        num(&rsa3072, "handshake_us") > num(&p256, "handshake_us")
            || num(&rsa3072, "validate_us") > num(&p256, "validate_us"),
        "{rsa3072}\n{p256}"
    );
    for r in links.iter().filter(|r| r["status"] == "measured") {
        // Simulated time: the cookie exchange and the full handshake are three round trips.
        let (lan, wan) = (num(r, "lan_handshake_ms"), num(r, "wan_handshake_ms"));
        assert!(wan >= 80.0, "WAN handshake under two RTTs: {r}");
        assert!(lan < wan, "{r}");
        assert!(num(r, "wan_first_rt_ms") >= 40.0, "{r}");
        assert_eq!(r["lan_retransmissions"].as_f64(), Some(0.0), "{r}");
        for k in ["wan_retransmissions_median", "wan_retransmissions_max"] {
            assert!(r[k].as_f64().is_some_and(|x| x >= 0.0), "{k}: {r}");
        }
        assert!(
            r["wan_retransmissions_max"].as_f64() >= r["wan_retransmissions_median"].as_f64(),
            "{r}"
        );
    }
}

/// The sizing summary of a `lab handshake --in-memory` run: per certificate type, the cheapest
/// measured ECDHE suite's server CPU → handshakes per second per core and reconnect storms.
fn sizing_from_the_phase_rows(sizing: &Value, phases: &Value) {
    let dtls = sizing["sections"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == "dtls_handshakes")
        .expect("the DTLS section");
    let rows = phases["rows"].as_array().unwrap();
    for cert in ["ecdsa-p256", "ecdsa-p384", "rsa-2048", "rsa-3072"] {
        let least = rows
            .iter()
            .filter(|r| {
                r["cert"] == cert
                    && r["status"] == "measured"
                    && r["kx"].as_str().unwrap().starts_with("ECDHE")
            })
            .map(|r| r["server_us"].as_f64().unwrap())
            .min_by(f64::total_cmp)
            .unwrap_or_else(|| panic!("a measured ECDHE row for {cert}"));
        let line = dtls["lines"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["label"] == cert)
            .unwrap_or_else(|| panic!("no sizing line for {cert}: {dtls}"));
        let f = &line["figures"];
        assert_eq!(f["server_us"]["value"].as_f64(), Some(least));
        let per_s = f["per_s"]["value"].as_f64().unwrap();
        assert!((per_s - 1e6 / least).abs() <= 1e-9 * per_s);
        let storm = f["storm_10000_s"]["value"].as_f64().unwrap();
        assert!((storm - 10_000.0 * least / 1e6).abs() <= 1e-9 * storm);
    }
    assert!(sizing["verdict"]["missing"][0]
        .as_str()
        .unwrap()
        .contains("secrelay lab codec"));
}
