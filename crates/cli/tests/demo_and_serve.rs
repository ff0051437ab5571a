//! `secrelay demo` (the README's main job) and `secrelay serve` as a user runs them.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn secrelay() -> Command {
    Command::new(env!("CARGO_BIN_EXE_secrelay"))
}

#[test]
fn demo_relays_every_participant_and_drops_the_attacks() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("demo.json");
    let out = secrelay()
        .args([
            "demo",
            "--duration",
            "2",
            "--rooms",
            "2",
            "--per-room",
            "3",
            "--json",
        ])
        .arg(&json)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "demo failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("relay latency"), "{stdout}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["participants"], 6);
    assert_eq!(v["connected"], 6);
    assert_eq!(v["missing_streams"], 0, "{v}");
    assert_eq!(v["rx_errors"], 0, "{v}");
    let received = v["received"].as_u64().unwrap();
    let expected = v["expected"].as_u64().unwrap();
    // Two seconds at 50 packets/s, each heard by the two others: ~600 copies.
    assert!(received >= 300, "{v}");
    // Loopback on a shared 2-core machine: loss must stay negligible (it is counted, not hidden).
    assert!(v["lost"].as_u64().unwrap() * 100 <= expected, "{v}");
    let g = &v["gateway"];
    assert_eq!(g["handshakes_ok"], 6);
    assert!(g["media_forwarded"].as_u64().unwrap() >= received, "{v}");
    // Once a second each sender sends a replay and a forgery: both kinds dropped and counted.
    assert!(g["drops"]["replayed"].as_u64().unwrap() >= 6, "{v}");
    assert!(g["drops"]["auth_failed"].as_u64().unwrap() >= 6, "{v}");
    assert!(v["end_to_end_delay_us"]["p50"].as_u64().unwrap() > 0);
    // An SDES and a plain phone in each room: each hears the three browsers and the other
    // phone, and the gateway counts each kind of leg apart.
    for (i, leg) in ["sdes", "plain"].into_iter().enumerate() {
        let p = &v["phones"][i];
        assert_eq!(p["leg"], leg, "{v}");
        assert_eq!(p["phones"], 2, "{v}");
        assert_eq!(p["streams"], 8, "{v}");
        assert!(p["received"].as_u64().unwrap() >= 200, "{v}");
        assert!(
            g["by_leg"][leg]["packets_in"].as_u64().unwrap() >= 100,
            "{v}"
        );
    }
    assert!(
        stdout.contains("sdes legs") && stdout.contains("plain legs"),
        "{stdout}"
    );
}

/// Standard base64 with padding (RFC 4648 §4), as SDES writes inline keys.
fn base64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in bytes.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The demo with every kind of leg (WebRTC on DTLS-SRTP, SDES-SRTP, plain RTP) at the most
/// verbose log level, every crate's: none of the secrets the clients' key log holds (SRTP
/// master keys and salts both ways, the DTLS exporter's output, the SDES inline keys of both
/// sides) appears in the logs in any usual spelling (hex either case, base64, key or salt
/// alone, a byte list), and no client's address appears at the default level (info) or
/// above.
#[test]
fn the_demo_logs_no_secret_at_trace_and_no_client_address_at_info() {
    let dir = tempfile::tempdir().unwrap();
    let keylog = dir.path().join("keys.log");
    let out = secrelay()
        .args(["demo", "--duration", "2", "--rooms", "1", "--per-room", "3"])
        .args(["--log", "trace", "--keylog"])
        .arg(&keylog)
        .output()
        .unwrap();
    let logs = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "demo failed:\n{logs}");
    // The logs are really the most verbose ones, from the gateway and its DTLS and TLS stacks.
    let level = |l: &str| l.split_whitespace().nth(1).unwrap_or("").to_owned();
    let count = |lv: &str| logs.lines().filter(|l| level(l) == lv).count();
    assert!(count("TRACE") > 100 && count("DEBUG") > 20, "{logs}");
    let lines = secrelay_testkit::keylog::read(&keylog).unwrap();
    // Three WebRTC participants (send, receive, exporter) and the SDES phone (both keys).
    assert_eq!(lines.len(), 3 * 3 + 2, "{lines:?}");
    let lower = logs.to_lowercase();
    for line in &lines {
        let secret: &[u8] = &line.secret;
        let hex: String = secret.iter().map(|b| format!("{b:02x}")).collect();
        let mut spellings = vec![hex.clone(), base64(secret)];
        let list: Vec<String> = secret[..8].iter().map(|b| b.to_string()).collect();
        spellings.push(list.join(", "));
        if let Some(k) = line.as_master_key() {
            for part in [k.key(), k.salt()] {
                spellings.push(part.iter().map(|b| format!("{b:02x}")).collect());
                spellings.push(base64(part));
            }
        }
        for s in &spellings {
            let found = if s.chars().all(|c| c.is_ascii_hexdigit()) {
                lower.contains(s.as_str())
            } else {
                logs.contains(s.as_str())
            };
            assert!(
                !found,
                "{:?} of {} appears in the logs",
                line.label, line.addr
            );
        }
        // Not even part of it: the first 8 bytes in hex.
        assert!(
            !lower.contains(&hex[..16]),
            "{:?} of {}",
            line.label,
            line.addr
        );
    }
    for l in logs
        .lines()
        .filter(|l| ["INFO", "WARN", "ERROR"].contains(&level(l).as_str()))
    {
        for line in &lines {
            assert!(
                !l.contains(&line.addr.to_string()),
                "a client's address at the default level: {l}"
            );
        }
    }
}

#[test]
fn demo_refuses_bad_flags_by_name() {
    let out = secrelay()
        .args(["demo", "--per-room", "1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--per-room"));
}

#[test]
fn serve_names_a_bad_config_key_and_file() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("gw.toml");
    std::fs::write(&cfg, "wrokers = 2\n").unwrap();
    let out = secrelay()
        .arg("serve")
        .arg("--config")
        .arg(&cfg)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("wrokers") && err.contains("gw.toml"), "{err}");
    let out = secrelay()
        .args(["serve", "--config", "/nonexistent/gw.toml"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/gw.toml"));
}

#[test]
fn serve_answers_health_and_stops_cleanly_on_sigterm() {
    let mut child = secrelay()
        .args([
            "serve",
            "--http",
            "127.0.0.1:0",
            "--udp",
            "127.0.0.1:0",
            "--log",
            "warn",
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut url = None;
    let end = Instant::now() + Duration::from_secs(30);
    while url.is_none() && Instant::now() < end {
        let Some(Ok(line)) = lines.next() else { break };
        url = secrelay_lab::client::compare::serve_banner_url(&line);
    }
    let url = url.expect("serve printed its HTTP address");
    let body = ureq::get(&format!("{url}/healthz"))
        .call()
        .unwrap()
        .body_mut()
        .read_to_string()
        .unwrap();
    assert_eq!(body.trim(), "ok");
    let pid = child.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "serve exited with {status}");
            break;
        }
        assert!(Instant::now() < end, "serve did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    }
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert!(rest.iter().any(|l| l.contains("stopped")), "{rest:?}");
}

/// A second `secrelay serve` on the media port a first one holds does not start (the kernel
/// would let it share the port and take half the first one's flows): it exits at once with an
/// error that names the port. The first one goes on serving.
#[test]
fn a_second_serve_on_the_same_udp_port_refuses_to_start() {
    let mut first = secrelay()
        .args(["serve", "--http", "127.0.0.1:0", "--udp", "127.0.0.1:0"])
        .args(["--workers", "2", "--log", "warn"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(first.stderr.take().unwrap()).lines();
    let banner = secrelay_gateway::server::BannerReader::read(&mut lines, |_| {});
    std::thread::spawn(move || lines.for_each(drop));
    let (udp, url) = banner
        .and_then(|b| Some((b.udp?, b.url()?)))
        .expect("the first gateway's banner");
    let out = secrelay()
        .args(["serve", "--http", "127.0.0.1:0", "--udp", &udp.to_string()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a second gateway started: {err}");
    assert!(
        err.contains(&udp.to_string()) && err.contains("already in use"),
        "{err}"
    );
    let ok = ureq::get(&format!("{url}/healthz"))
        .call()
        .unwrap()
        .body_mut()
        .read_to_string()
        .unwrap();
    assert_eq!(ok.trim(), "ok");
    let _ = first.kill();
    let _ = first.wait();
}
