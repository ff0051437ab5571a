//! Interop with WebRTC clients nobody here wrote, through `secrelay serve` as a user starts it:
//! aiortc (Python) publishes a tone with WHIP that a WHEP subscriber and a room participant
//! decode, and headless Chromium publishes its fake camera and microphone with WHIP to a page
//! that plays them through WHEP; an aiortc participant, an SDES-SRTP phone whose SRTP is
//! libsrtp's and a plain RTP phone share a room, and each hears the others' tones; and headless
//! Chromium calls a plain RTP phone through secrelay's ng socket, as a SIP proxy sets such a
//! call up, with audio both ways. The clients are the scripts in `interop/webrtc/`; this test
//! starts the gateway, runs each script with a time limit, checks what it measured, then checks
//! that the gateway kept no session (`GET /api/rooms`) and counted the handshakes (`/metrics`).
//!
//! The Python environment comes from `scripts/setup` (a venv at `interop/webrtc/.venv`, or
//! `$SECRELAY_INTEROP_PYTHON`), Chromium from Debian's package (or `$SECRELAY_CHROMIUM`). Where
//! one is missing the test says SKIPPED, except under CI (`CI` set), where it fails
//! (`lab_support::missing`).

// scripts/run-tests: alone (headless Chromium plays media here; a second heavy test
// executable beside it would disturb the browser's timing)

mod lab_support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lab_support::{chromium, firefox, missing};
use serde_json::Value;

/// The two tests share two cores with everything else: one at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn script(name: &str) -> PathBuf {
    repo().join("interop/webrtc").join(name)
}

/// The Python with aiortc and numpy: `$SECRELAY_INTEROP_PYTHON`, else scripts/setup's venv.
fn python(test: &str) -> Option<PathBuf> {
    let p = std::env::var_os("SECRELAY_INTEROP_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("interop/webrtc/.venv/bin/python"));
    let ok = Command::new(&p)
        .args(["-c", "import aiortc, numpy"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        Some(p)
    } else {
        missing(
            test,
            &format!("no Python with aiortc and numpy at {}", p.display()),
        );
        None
    }
}

/// The host's first global IPv4 address (`ip -4 -o addr show scope global`).
fn host_ipv4() -> Option<String> {
    let out = Command::new("ip")
        .args(["-4", "-o", "addr", "show", "scope", "global"])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace()
        .skip_while(|w| *w != "inet")
        .nth(1)
        .and_then(|a| a.split('/').next())
        .map(str::to_owned)
}

/// `secrelay serve` on loopback, killed on drop; keeps what it logs for failure messages.
struct Gateway {
    child: Child,
    base: String,
    /// The ng control socket's address, when one was asked for.
    ng: Option<String>,
    log: Arc<Mutex<String>>,
    /// Over HTTPS: the private CA's certificate (DER) the gateway's certificate is checked
    /// against.
    ca: Option<Vec<u8>>,
    /// Its admin key (`/api/…` and `/metrics`).
    admin: secrelay_testkit::AdminKeyFile,
}

impl Gateway {
    fn start() -> Gateway {
        Gateway::start_with(&[])
    }

    /// `secrelay serve` over HTTPS, its certificate issued by the private CA in `ca_dir`.
    fn start_https(ca_dir: &Path) -> Gateway {
        let admin = secrelay_testkit::AdminKeyFile::new().unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_secrelay"))
            .args(["serve", "--https", "127.0.0.1:0", "--tls-ca"])
            .arg(ca_dir)
            .arg("--admin-key-file")
            .arg(admin.path())
            .args(["--cors-origin", "*"])
            .args([
                "--udp",
                "127.0.0.1:0",
                "--announce",
                "127.0.0.1",
                "--log",
                "info",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("secrelay serve starts");
        let (banner, log) = lab_support::serve_banner(&mut child);
        let base = banner.and_then(|b| b.url()).unwrap_or_else(|| {
            panic!(
                "secrelay serve printed no HTTPS address:\n{}",
                log.lock().unwrap()
            )
        });
        let pem = std::fs::read_to_string(ca_dir.join("ca.pem")).unwrap();
        let ca = secrelay_dtls::cert::chain_from_pem(&pem).unwrap().remove(0);
        Gateway {
            child,
            base,
            ng: None,
            log,
            ca: Some(ca),
            admin,
        }
    }

    /// `secrelay serve` with `extra` flags.
    fn start_with(extra: &[&str]) -> Gateway {
        Gateway::spawn("127.0.0.1:0", "127.0.0.1", extra)
    }

    /// `secrelay serve` with its media on `udp`, announced as `announce`.
    fn spawn(udp: &str, announce: &str, extra: &[&str]) -> Gateway {
        let admin = secrelay_testkit::AdminKeyFile::new().unwrap();
        let mut serve = Command::new(env!("CARGO_BIN_EXE_secrelay"));
        serve
            .args([
                "serve",
                "--http",
                "127.0.0.1:0",
                "--udp",
                udp,
                "--announce",
                announce,
                "--log",
                "info",
            ])
            .arg("--admin-key-file")
            .arg(admin.path())
            // The drivers' pages are served from an origin of their own (CORS as any web
            // application sees it): this gateway lets any origin call it.
            .args(["--cors-origin", "*"])
            .args(extra);
        let (child, banner, log) = lab_support::spawn_serve(serve);
        let ng = banner.as_ref().and_then(|b| b.ng).map(|a| a.to_string());
        let base = banner.and_then(|b| b.url()).unwrap_or_else(|| {
            panic!(
                "secrelay serve printed no HTTP address:\n{}",
                log.lock().unwrap()
            )
        });
        Gateway {
            child,
            base,
            ng,
            log,
            ca: None,
            admin,
        }
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// GET a path; returns the status and the body.
    fn get(&self, path: &str) -> (u16, String) {
        if let Some(ca) = &self.ca {
            let addr = self.base.trim_start_matches("https://").parse().unwrap();
            return match secrelay_lab::handshake::tls_servers::https_get(
                addr,
                ca,
                path,
                Some(self.admin.key()),
            ) {
                Ok(body) => (200, body),
                Err(e) => (0, format!("{e:#}")),
            };
        }
        let authority = self.base.trim_start_matches("http://");
        let mut s = TcpStream::connect(authority).expect("connect to the gateway's HTTP port");
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: {authority}\r\nAuthorization: Bearer {}\r\nConnection: close\r\n\r\n",
            self.admin.key()
        )
        .unwrap();
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).expect("read the response");
        let text = String::from_utf8_lossy(&raw).into_owned();
        let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP response");
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .expect("a status code");
        let body = if head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked")
        {
            dechunk(body)
        } else {
            body.to_owned()
        };
        (status, body)
    }

    fn json(&self, path: &str) -> Value {
        let (status, body) = self.get(path);
        assert_eq!(status, 200, "GET {path}: {body}");
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: {e}: {body}"))
    }

    /// A counter or gauge from /metrics (the sample whose name and labels start the line).
    fn metric(&self, sample: &str) -> f64 {
        let (status, body) = self.get("/metrics");
        assert_eq!(status, 200, "GET /metrics");
        body.lines()
            .find_map(|l| {
                l.strip_prefix(sample)?
                    .strip_prefix(' ')?
                    .trim()
                    .parse()
                    .ok()
            })
            .unwrap_or_else(|| panic!("no {sample} in /metrics:\n{body}"))
    }

    /// Waits until no room is left (participants that left are removed once their last
    /// datagrams are sent), for at most 10 s; returns what /api/rooms shows then.
    fn rooms_when_empty(&self) -> Value {
        let end = Instant::now() + Duration::from_secs(10);
        loop {
            let v = self.json("/api/rooms");
            if v["rooms"].as_array().is_some_and(|r| r.is_empty()) || Instant::now() > end {
                return v;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn dechunk(body: &str) -> String {
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, after)) = rest.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || after.len() < n {
            break;
        }
        out.push_str(&after[..n]);
        rest = after[n..].trim_start_matches("\r\n");
    }
    out
}

/// Runs `python SCRIPT ARGS` under coreutils' `timeout` (which kills it and what it started
/// past the limit); returns its JSON line and whether it exited 0.
fn run_script(python: &Path, name: &str, args: &[&str], gw: &Gateway) -> (Value, bool) {
    let out = Command::new("timeout")
        .args(["--kill-after=5", "90"])
        .arg(python)
        .arg(script(name))
        .args(args)
        .env("SECRELAY_ADMIN_KEY", gw.admin.key())
        .output()
        .expect("running timeout(1) with python");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = stdout.lines().rev().find(|l| l.starts_with('{'));
    let v: Value = match line.map(serde_json::from_str) {
        Some(Ok(v)) => v,
        _ => panic!(
            "{name} printed no JSON ({}; 124 means it was killed):\nstdout: {stdout}\nstderr: {stderr}\ngateway:\n{}",
            out.status,
            gw.log()
        ),
    };
    eprintln!("{name}: {v}");
    let ok = out.status.success();
    if !ok {
        eprintln!("{name} stderr: {stderr}\ngateway log:\n{}", gw.log());
    }
    (v, ok)
}

/// Runs a Chromium driver that needs only Python's standard library (any python3 does)
/// against a gateway of its own: `--base` and `--chromium` first, then `args`. The script's JSON
/// and the gateway (for its metrics); `None` when Chromium is missing outside CI.
fn chromium_script(test: &str, script: &str, args: &[&str]) -> Option<(Value, Gateway)> {
    let chromium = chromium(test)?;
    let python = std::env::var_os("SECRELAY_INTEROP_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("python3"));
    Some(chromium_driver(&python, &chromium, script, args))
}

/// [`chromium_script`] for a driver that needs the interop venv (the DevTools protocol over
/// `websocket-client`).
fn chromium_venv_script(test: &str, script: &str, args: &[&str]) -> Option<(Value, Gateway)> {
    let chromium = chromium(test)?;
    let python = python(test)?;
    Some(chromium_driver(&python, &chromium, script, args))
}

fn chromium_driver(
    python: &Path,
    chromium: &Path,
    script: &str,
    args: &[&str],
) -> (Value, Gateway) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let gw = Gateway::start();
    let chromium = chromium.to_string_lossy().into_owned();
    let mut all = vec!["--base", gw.base.as_str(), "--chromium", chromium.as_str()];
    all.extend_from_slice(args);
    let (v, ok) = run_script(python, script, &all, &gw);
    assert!(ok, "{script} failed: {v}");
    (v, gw)
}

#[test]
fn aiortc_hears_the_tone_through_whip_whep_and_a_room_join() {
    let test = "aiortc_hears_the_tone_through_whip_whep_and_a_room_join";
    let Some(python) = python(test) else { return };
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let gw = Gateway::start();
    let (v, ok) = run_script(
        &python,
        "aiortc_tone.py",
        &["--base", &gw.base, "--room", "tone"],
        &gw,
    );
    assert!(ok, "aiortc_tone.py failed: {v}");
    for (who, hz) in [
        ("whep", 440.0),
        ("join", 440.0),
        ("whep_from_joiner", 660.0),
    ] {
        let r = &v[who];
        assert_eq!(r["detected"], true, "{who}: {r}");
        let peak = r["peak_hz"].as_f64().expect("peak_hz");
        assert!((peak - hz).abs() <= 5.0, "{who}: peak at {peak} Hz");
        assert!(r["frames"].as_u64().unwrap_or(0) > 0, "{who}: frames");
    }
    // Two talkers at once reach a listener with two receive slots, each on its own track.
    let mut tones: Vec<f64> = v["slots"]
        .as_array()
        .expect("slots")
        .iter()
        .map(|s| s["tone_hz"].as_f64().unwrap_or(0.0))
        .collect();
    tones.sort_by(f64::total_cmp);
    assert_eq!(tones, [660.0, 880.0], "one tone per receive slot: {v}");
    let parts = v["participants"].as_array().expect("participants");
    let mut kinds: Vec<&str> = parts.iter().filter_map(|p| p["kind"].as_str()).collect();
    kinds.sort_unstable();
    assert_eq!(kinds, ["join", "whep", "whip"], "{v}");
    for p in parts {
        assert_eq!(p["state"], "connected", "{p}");
        assert!(p["srtp_profile"].is_string(), "negotiated profile: {p}");
    }
    for (who, status) in v["delete"].as_object().expect("delete") {
        assert_eq!(status, 200, "DELETE of {who}");
    }
    let rooms = gw.rooms_when_empty();
    assert_eq!(rooms["rooms"], serde_json::json!([]), "rooms left behind");
    assert_eq!(gw.metric("secrelay_participants"), 0.0);
    assert!(gw.metric("secrelay_handshakes_total{result=\"ok\"}") >= 3.0);
    // The WHEP subscriber has one slot: while the participant held it, the second talker
    // found none. aiortc agreed on `mid` (it binds tracks by section), so the gateway kept that
    // talker from taking the occupied section over, and counted it.
    assert!(gw.metric("secrelay_drops_total{reason=\"no_slot\"}") > 0.0);
    assert_eq!(
        gw.metric("secrelay_handshakes_total{result=\"failed\"}"),
        0.0
    );
}

/// Firefox ESR (headless, fake devices) publishes with WHIP and plays with WHEP through the
/// gateway's defaults: its ECDSA certificate and its DTLS as Firefox makes it. Firefox gathers
/// no loopback candidates, so this gateway listens on the host's own address.
#[test]
fn firefox_esr_publishes_and_plays_through_whip_and_whep() {
    let test = "firefox_esr_publishes_and_plays_through_whip_and_whep";
    let Some(firefox) = firefox(test) else {
        return;
    };
    let Some(ip) = host_ipv4() else {
        missing(
            test,
            "the host has no global IPv4 address for Firefox's candidates",
        );
        return;
    };
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let gw = Gateway::spawn(&format!("{ip}:0"), &ip, &[]);
    let firefox = firefox.to_string_lossy().into_owned();
    let args = [
        "--base",
        &gw.base,
        "--chromium",
        &firefox,
        "--room",
        "firefox",
        "--timeout",
        "40",
    ];
    let (v, ok) = run_script(Path::new("python3"), "chromium_av.py", &args, &gw);
    assert!(ok, "chromium_av.py with Firefox failed: {v}");
    assert!(
        v["chromium"].as_str().unwrap_or("").contains("Firefox"),
        "{v}"
    );
    let play = &v["play"];
    let video = &play["inbound"]["video"];
    assert!(video["framesDecoded"].as_u64().unwrap_or(0) > 0, "{play}");
    assert!(play["videoWidth"].as_u64().unwrap_or(0) > 0, "{play}");
    let audio = &play["inbound"]["audio"];
    assert!(
        audio["packetsReceived"].as_u64().unwrap_or(0) > 0,
        "{audio}"
    );
    assert_eq!(play["transport"]["dtlsState"], "connected", "{play}");
    assert_eq!(v["play_delete"], 200);
    assert_eq!(v["publish_delete"], 200);
    assert_eq!(
        gw.metric("secrelay_handshakes_total{result=\"failed\"}"),
        0.0
    );
    let rooms = gw.rooms_when_empty();
    assert_eq!(rooms["rooms"], serde_json::json!([]), "rooms left behind");
}

/// A decoded video frame reached the screen: `requestVideoFrameCallback` fired for it, or the
/// element's playback quality counts it. Chromium updates that count a little after the
/// callback, so a page that reads both at once on a busy machine can see 1 callback and
/// 0 frames.
fn assert_frame_shown(play: &serde_json::Value) {
    let n = |k: &str| play[k].as_u64().unwrap_or(0);
    assert!(
        play["inbound"]["video"]["framesDecoded"]
            .as_u64()
            .unwrap_or(0)
            > 0,
        "no video frame decoded: {play}"
    );
    assert!(
        n("totalVideoFrames") > 0 || n("frameCallbacks") > 0,
        "no video frame shown: {play}"
    );
}

#[test]
fn chromium_plays_what_chromium_publishes_through_whip_and_whep() {
    let test = "chromium_plays_what_chromium_publishes_through_whip_and_whep";
    let Some((v, gw)) = chromium_script(test, "chromium_av.py", &["--room", "av"]) else {
        return;
    };
    let play = &v["play"];
    assert_frame_shown(play);
    assert!(play["videoWidth"].as_u64().unwrap_or(0) > 0, "{play}");
    let audio = &play["inbound"]["audio"];
    assert!(
        audio["packetsReceived"].as_u64().unwrap_or(0) > 0,
        "{audio}"
    );
    assert!(
        play["inbound"]["video"]["framesDecoded"]
            .as_u64()
            .unwrap_or(0)
            > 0,
        "{play}"
    );
    assert_eq!(v["publish_delete"], 200);
    assert_eq!(v["play_delete"], 200);
    let rooms = gw.rooms_when_empty();
    assert_eq!(rooms["rooms"], serde_json::json!([]), "rooms left behind");
    assert_eq!(gw.metric("secrelay_participants"), 0.0);
    assert!(gw.metric("secrelay_handshakes_total{result=\"ok\"}") >= 2.0);
    assert_eq!(
        gw.metric("secrelay_handshakes_total{result=\"failed\"}"),
        0.0
    );
}

/// `aiortc_data.py` against a gateway of its own (`secrelay serve` with `serve_args`), in
/// `room`, with `args`: its JSON, once it passed, and the gateway; `None` when aiortc is
/// missing outside CI.
fn aiortc_data(
    test: &str,
    serve_args: &[&str],
    room: &str,
    args: &[&str],
) -> Option<(Value, Gateway)> {
    let python = python(test)?;
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let gw = Gateway::start_with(serve_args);
    let mut all = vec!["--base", gw.base.as_str(), "--room", room];
    all.extend_from_slice(args);
    let (v, ok) = run_script(&python, "aiortc_data.py", &all, &gw);
    assert!(ok, "aiortc_data.py failed: {v}");
    Some((v, gw))
}

/// What `aiortc_data.py` says its peers exchanged on their `chat` channels: `n` messages each
/// way, complete and in order, and the binary message intact.
fn assert_chat_exchanged(v: &Value, n: u64) {
    assert_eq!(v["received"], serde_json::json!([n, n]), "{v}");
    assert_eq!(v["in_order"], serde_json::json!([true, true]), "{v}");
    assert_eq!(v["binary_ok"], true, "{v}");
}

/// Data channels with aiortc (an SCTP stack nobody here wrote) on both ends, joined with data
/// channels and no media: 500 messages each way in order, a 60 kB binary message intact, and
/// an unordered channel without retransmissions that the receiver never opened reaches it on
/// a channel the gateway opened with the sender's settings.
#[test]
fn aiortc_peers_exchange_data_channel_messages_through_the_room() {
    let test = "aiortc_peers_exchange_data_channel_messages_through_the_room";
    let Some((v, gw)) = aiortc_data(test, &[], "aiortc-data", &[]) else {
        return;
    };
    assert_chat_exchanged(&v, 500);
    assert_eq!(
        v["lossy_channel_at_b"],
        serde_json::json!({"ordered": false, "max_retransmits": 0}),
        "{v}"
    );
    assert_eq!(gw.metric("secrelay_participants"), 0.0);
}

/// Data channels agreed on out of band (`negotiated: true`), with aiortc on both ends: the
/// gateway configured with the channel (`[[data_negotiated]]`, its stream id 100) opens it on
/// each participant's association without DCEP, and 100 messages each way on it reach the
/// other peer's channel of that id in order, beside the channels opened by DCEP.
#[test]
fn aiortc_negotiated_data_channels_carry_messages_through_the_room() {
    let test = "aiortc_negotiated_data_channels_carry_messages_through_the_room";
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("negotiated.toml");
    std::fs::write(
        &config,
        "[[data_negotiated]]\nid = 100\nlabel = \"agreed\"\n",
    )
    .unwrap();
    let serve = ["--config", config.to_str().unwrap()];
    let args = ["--negotiated", "100", "--messages", "100"];
    let Some((v, gw)) = aiortc_data(test, &serve, "negotiated", &args) else {
        return;
    };
    let agreed = &v["negotiated"];
    assert_eq!(agreed["received"], serde_json::json!([100, 100]), "{v}");
    assert_eq!(agreed["in_order"], serde_json::json!([true, true]), "{v}");
    assert_chat_exchanged(&v, 100);
    assert_eq!(
        gw.metric("secrelay_data_discarded_total{reason=\"unknown_channel\"}"),
        0.0
    );
}

/// Data channels in a room spread over two workers, with aiortc on both ends: a member joins
/// (the room's worker) and a WHEP viewer with data channels joins on the other worker; their
/// messages cross between the workers both ways, complete and in order, a 60 kB binary message
/// intact; and a message the API sends to the room reaches both.
#[test]
fn aiortc_data_channels_cross_between_the_workers_of_a_spread_room() {
    let test = "aiortc_data_channels_cross_between_the_workers_of_a_spread_room";
    let args = ["--b-whep", "--server-message"];
    let Some((v, gw)) = aiortc_data(test, &["--workers", "2"], "spread-data", &args) else {
        return;
    };
    assert_eq!(
        v["worker_participants"],
        serde_json::json!([1, 1]),
        "the viewer joined on the other worker: {v}"
    );
    assert_chat_exchanged(&v, 500);
    let to_room = &v["server_message"]["received"];
    assert_eq!(to_room, &serde_json::json!([true, true]), "{v}");
    assert_eq!(gw.metric("secrelay_participants"), 0.0);
}

/// Data channels through a room, between two pages of the gateway's own room page (each
/// page's chat channel): 1,000 text messages each way arrive complete and in order, a 200 kB
/// binary message arrives intact, and a page that joins late gets what is sent after it
/// joined and nothing from before; the server's messages through the API reach the room or
/// one participant; the gateway's metrics count what it relayed.
#[test]
fn chromium_pages_exchange_data_channel_messages_through_the_room() {
    let test = "chromium_pages_exchange_data_channel_messages_through_the_room";
    let Some((v, gw)) = chromium_venv_script(
        test,
        "chromium_data.py",
        &["--room", "data", "--messages", "1000", "--binary", "200000"],
    ) else {
        return;
    };
    assert_eq!(v["sent"], serde_json::json!([1000, 1000]), "{v}");
    assert_eq!(v["in_order"], serde_json::json!([true, true]), "{v}");
    assert_eq!(v["binary"]["size"], 200000, "{v}");
    assert_eq!(v["late"]["earlier"], 0, "{v}");
    // The server's own messages: to the room (all three pages), to one participant (one page);
    // a body without text or binary is refused.
    assert_eq!(v["api_room"], serde_json::json!([200, {"sent": 3}]), "{v}");
    assert_eq!(v["api_bad"], 400, "{v}");
    assert_eq!(v["api_one"], serde_json::json!([200]), "{v}");
    assert_eq!(v["api_one_received"], 1, "{v}");
    // Both pages' 1,000 and the binary one, then 10 to the two others: relayed, none dropped.
    let relayed = gw.metric("secrelay_data_messages_total{event=\"in\"}");
    assert!(relayed >= 2011.0, "messages relayed: {relayed}");
    assert!(gw.metric("secrelay_data_messages_total{event=\"out\"}") >= 2025.0);
    assert_eq!(
        gw.metric("secrelay_data_messages_total{event=\"rate_limited\"}"),
        0.0
    );
    assert!(gw.metric("secrelay_data_bytes_total{direction=\"in\"}") >= 200_000.0);
}

/// The same over HTTPS: the gateway's certificate from a private CA, which is the one trust
/// anchor added to Chromium's NSS database; the pages come over HTTPS too.
#[test]
fn chromium_publishes_and_plays_over_https_with_the_private_ca_trusted() {
    let test = "chromium_publishes_and_plays_over_https_with_the_private_ca_trusted";
    let Some(chromium) = chromium(test) else {
        return;
    };
    if Command::new("certutil").arg("-H").output().is_err() {
        missing(test, "no certutil (Debian package libnss3-tools)");
        return;
    }
    let python = std::env::var_os("SECRELAY_INTEROP_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("python3"));
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let ok = |c: &mut Command| {
        let out = c.output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    ok(Command::new(env!("CARGO_BIN_EXE_secrelay"))
        .args(["ca", "init", "--dir"])
        .arg(dir.path()));
    ok(Command::new(env!("CARGO_BIN_EXE_secrelay"))
        .args(["ca", "issue", "--dir"])
        .arg(dir.path())
        .args(["--name", "127.0.0.1", "--server"]));
    let gw = Gateway::start_https(dir.path());
    assert!(gw.base.starts_with("https://"), "{}", gw.base);
    let chromium = chromium.to_string_lossy().into_owned();
    let ca = dir.path().join("ca.pem");
    let page_cert = dir.path().join("127.0.0.1.pem");
    let page_key = dir.path().join("127.0.0.1.key");
    let (v, ok) = run_script(
        &python,
        "chromium_av.py",
        &[
            "--base",
            &gw.base,
            "--ca",
            ca.to_str().unwrap(),
            "--page-cert",
            page_cert.to_str().unwrap(),
            "--page-key",
            page_key.to_str().unwrap(),
            "--room",
            "av-https",
            "--chromium",
            &chromium,
        ],
        &gw,
    );
    assert!(ok, "chromium_av.py failed: {v}");
    assert_eq!(v["page_origin"], "https", "{v}");
    let play = &v["play"];
    assert_frame_shown(play);
    assert!(
        play["inbound"]["audio"]["packetsReceived"]
            .as_u64()
            .unwrap_or(0)
            > 0,
        "{play}"
    );
    assert_eq!(v["publish_delete"], 200);
    assert_eq!(v["play_delete"], 200);
    let rooms = gw.rooms_when_empty();
    assert_eq!(rooms["rooms"], serde_json::json!([]), "rooms left behind");
    // The signaling really went over TLS: the browsers' handshakes are counted, and none failed.
    let (_, metrics) = gw.get("/metrics");
    let handshakes: f64 = metrics
        .lines()
        .filter(|l| l.starts_with("secrelay_tls_handshakes_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert!(handshakes >= 2.0, "{metrics}");
    for reason in ["alert_received", "incompatible", "malformed"] {
        assert_eq!(
            gw.metric(&format!(
                "secrelay_tls_handshake_failures_total{{reason=\"{reason}\"}}"
            )),
            0.0,
            "Chromium refused something: {reason}"
        );
    }
}

/// The gateway's own room page (`/room/{name}`) in five tabs of one headless Chromium: each
/// publishes its fake camera and microphone when it loads, and the gateway's new offers (the
/// page's events channel) give every page sections for those who come after it, so each plays
/// the other four videos and four audios; a screenshot shows a remote video that is not black.
/// The gateway offers ICE-TCP too, and every page's media takes UDP (the API says so).
#[test]
fn five_room_pages_each_play_the_other_four_and_show_video() {
    let test = "five_room_pages_each_play_the_other_four_and_show_video";
    let Some(chromium) = chromium(test) else {
        return;
    };
    // The driver needs websocket-client (DevTools protocol) and pillow (the screenshot), from
    // scripts/setup's venv.
    let Some(python) = python(test) else {
        return;
    };
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let gw = Gateway::start_with(&["--ice-tcp", "127.0.0.1:0"]);
    let chromium = chromium.to_string_lossy().into_owned();
    let (v, ok) = run_script(
        &python,
        "chromium_room.py",
        &[
            "--base",
            &gw.base,
            "--pages",
            "5",
            "--room",
            "five",
            "--chromium",
            &chromium,
            "--timeout",
            "60",
        ],
        &gw,
    );
    assert!(ok, "chromium_room.py failed: {v}");
    let pages = v["pages"].as_array().expect("pages");
    assert_eq!(pages.len(), 5, "{v}");
    for p in pages {
        assert_eq!(p["videos_decoding"], 4, "{p}");
        assert_eq!(p["audios_playing"], 4, "{p}");
        assert!(p["error"].is_null(), "{p}");
        // Each remote tile is labelled with who is on it: every other participant's video
        // and audio, and never the page's own name.
        let me = p["me"].as_str().expect("the page knows its name");
        let mut want: Vec<String> = p["members"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|m| m.as_str())
            .filter(|m| *m != me)
            .flat_map(|m| [format!("{m} audio"), format!("{m} video")])
            .collect();
        want.sort();
        assert_eq!(p["tiles"], serde_json::json!(want), "{p}");
    }
    // The first page joined alone and was offered sections as the others came.
    assert!(pages[0]["offers"].as_u64().unwrap_or(0) >= 1, "{v}");
    // Offered both, each browser nominated UDP (the TCP candidate's priority is lower).
    assert_eq!(
        v["transports"],
        serde_json::json!(["udp", "udp", "udp", "udp", "udp"]),
        "{v}"
    );
    assert!(
        v["screenshot"]["mean"].as_f64().unwrap_or(0.0) > 20.0,
        "{v}"
    );
    let rooms = gw.rooms_when_empty();
    assert_eq!(rooms["rooms"], serde_json::json!([]), "rooms left behind");
}

/// The room page in a room that needs a token: three headless Chromium pages given an access
/// token in their address's fragment each play the other two (renegotiating as the others
/// arrive), list the others by the token's identity, and keep the token out of the address.
#[test]
fn three_room_pages_in_a_token_room_each_play_the_other_two() {
    let test = "three_room_pages_in_a_token_room_each_play_the_other_two";
    let Some(chromium) = chromium(test) else {
        return;
    };
    let Some(python) = python(test) else {
        return;
    };
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("gw.toml");
    std::fs::write(
        &config,
        "[api_keys]\npages = \"0123456789abcdef0123456789abcdef-pages\"\n",
    )
    .unwrap();
    let config = config.to_str().unwrap().to_owned();
    let out = Command::new(env!("CARGO_BIN_EXE_secrelay"))
        .args(["token", "create", "--config", &config, "--key", "pages"])
        .args([
            "--identity",
            "page",
            "--room",
            "locked",
            "--publish",
            "--subscribe",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let token = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    let gw = Gateway::start_with(&["--config", &config]);
    let chromium = chromium.to_string_lossy().into_owned();
    let (v, ok) = run_script(
        &python,
        "chromium_room.py",
        &[
            "--base",
            &gw.base,
            "--pages",
            "3",
            "--room",
            "locked",
            "--token",
            &token,
            "--chromium",
            &chromium,
            "--timeout",
            "60",
        ],
        &gw,
    );
    assert!(ok, "chromium_room.py failed: {v}");
    let pages = v["pages"].as_array().expect("pages");
    assert_eq!(pages.len(), 3, "{v}");
    for p in pages {
        assert_eq!(p["videos_decoding"], 2, "{p}");
        assert_eq!(p["audios_playing"], 2, "{p}");
        assert!(p["error"].is_null(), "{p}");
        assert_eq!(p["token_in_address"], false, "{p}");
        assert_eq!(
            p["members"],
            serde_json::json!(["page", "page", "page"]),
            "{p}"
        );
    }
    assert!(
        pages[0]["offers"].as_u64().unwrap_or(0) >= 1,
        "renegotiated: {v}"
    );
    // Without the token the room refuses a join.
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let r = agent
        .post(&format!("{}/rooms/locked/join", gw.base))
        .header("Content-Type", "application/sdp")
        .send("v=0\r\n")
        .unwrap();
    assert_eq!(r.status().as_u16(), 401);
}

/// Viewers that come late and lose packets (issue 17): Chromium publishes; 5 s later one
/// WHEP viewer joins directly and another through a relay that drops 5 % of the media the
/// gateway sends it. Both must decode their first frame quickly (the gateway asks the publisher
/// for a keyframe when a viewer takes the stream: the late viewer's within 1 s of connecting),
/// and keep decoding for 8 s; the lossy one NACKs what it lost and gets it retransmitted from
/// the gateway's buffer, with at most 2 freezes.
/// A simulcast publisher (three layers from a 1280x720 camera) and a viewer behind a link
/// limited to 300 kbit/s (a token-bucket relay, drop-tail): the viewer is sent the low layer
/// while limited (its estimate from transport-cc feedback, probes that fail), and a higher
/// one once the limit is lifted (a probe delivered cleanly raises the estimate); it decodes
/// throughout.
#[test]
fn chromium_simulcast_viewer_behind_a_narrow_link_gets_the_low_layer_then_a_higher_one() {
    let test =
        "chromium_simulcast_viewer_behind_a_narrow_link_gets_the_low_layer_then_a_higher_one";
    let args = [
        "--limit",
        "300",
        "--limited",
        "12",
        "--after",
        "30",
        "--timeout",
        "20",
    ];
    let Some((v, gw)) = chromium_script(test, "chromium_simulcast.py", &args) else {
        return;
    };
    let checks = &v["checks"];
    for check in [
        "low_layer_while_limited",
        "higher_layer_after_lift",
        "decoding_throughout",
        "left",
    ] {
        assert_eq!(checks[check], true, "{check}: {v}");
    }
    let timeline = v["timeline"].as_array().expect("timeline");
    // The gateway's side of it: the low layer chosen while limited, probes sent, one
    // delivered after the lift, and a higher layer chosen.
    let limited_end = timeline
        .iter()
        .rfind(|x| x["limited"] == true)
        .expect("a limited sample");
    assert_eq!(limited_end["gateway"]["current"], "q", "{v}");
    let last = timeline.last().expect("samples");
    assert_ne!(last["gateway"]["current"], "q", "{v}");
    assert!(
        last["gateway"]["probes_delivered"].as_u64().unwrap_or(0) >= 1,
        "{v}"
    );
    assert!(gw.metric("secrelay_feedback_total{event=\"probe_packets\"}") > 0.0);
    let rooms = gw.rooms_when_empty();
    assert_eq!(rooms["rooms"], serde_json::json!([]), "rooms left behind");
}

#[test]
fn chromium_viewers_that_join_late_and_lose_packets_keep_decoding() {
    let test = "chromium_viewers_that_join_late_and_lose_packets_keep_decoding";
    let args = [
        "--room",
        "late",
        "--late",
        "5",
        "--lossy-viewer",
        "5",
        "--watch",
        "8",
        "--timeout",
        "30",
    ];
    let Some((v, gw)) = chromium_script(test, "chromium_av.py", &args) else {
        return;
    };
    let first = v["play"]["firstFrameAfterConnectMs"].as_f64();
    assert!(
        first.is_some_and(|ms| ms <= 1000.0),
        "the late viewer's first frame {first:?} ms after connecting: {v}"
    );
    for page in ["play", "lossy"] {
        let w = &v[format!("{page}_watched")];
        let per_second: Vec<u64> = w["framesDecodedPerSecond"]
            .as_array()
            .unwrap_or_else(|| panic!("{page}: no samples: {v}"))
            .iter()
            .map(|x| x.as_u64().unwrap_or(0))
            .collect();
        assert_eq!(per_second.len(), 8, "{v}");
        assert!(
            per_second.windows(2).all(|p| p[1] > p[0]),
            "{page} kept decoding every second: {per_second:?}"
        );
        let end = &w["end"];
        assert!(
            end["freezeCount"].as_u64().unwrap_or(99) <= 2,
            "{page}: {w}"
        );
        assert!(
            end["totalFreezesDuration"].as_f64().unwrap_or(99.0) <= 2.0,
            "{page}: {w}"
        );
    }
    let lossy = &v["lossy_watched"]["end"];
    assert!(v["relay"]["dropped"].as_u64().unwrap_or(0) > 0, "{v}");
    assert!(lossy["nackCount"].as_u64().unwrap_or(0) > 0, "{lossy}");
    assert!(
        lossy["retransmittedPacketsReceived"].as_u64().unwrap_or(0) > 0,
        "the gateway answered the NACKs: {lossy}"
    );
    assert!(gw.metric("secrelay_feedback_total{event=\"retransmitted\"}") > 0.0);
    assert!(gw.metric("secrelay_feedback_total{event=\"keyframe_requests_out\"}") >= 1.0);
    assert_eq!(v["play_delete"], 200);
    assert_eq!(v["lossy_delete"], 200);
    let rooms = gw.rooms_when_empty();
    assert_eq!(rooms["rooms"], serde_json::json!([]), "rooms left behind");
}

/// A SIP-style phone on a real socket for the aiortc room test: G.711 μ-law 20 ms frames of a
/// sine, SDES-SRTP by libsrtp or plain RTP, and the PCM of what it hears, by stream.
struct TonePhone {
    socket: std::net::UdpSocket,
    gateway: std::net::SocketAddr,
    tx: Option<secrelay_peers::libsrtp::LibSrtp>,
    rx: Option<secrelay_peers::libsrtp::LibSrtp>,
    ssrc: u32,
    seq: u16,
    hz: f64,
    phase: usize,
    location: String,
    /// Decoded audio by SSRC.
    heard: std::collections::BTreeMap<u32, Vec<i16>>,
    failed: usize,
}

impl TonePhone {
    fn join(base: &str, room: &str, sdes: bool, ssrc: u32, hz: f64) -> TonePhone {
        use secrelay_peers::libsrtp::{Direction, LibSrtp, LibsrtpProfile};
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        socket.set_nonblocking(true).unwrap();
        let port = socket.local_addr().unwrap().port();
        let profile = LibsrtpProfile::AesCm128HmacSha1_80;
        let suite = secrelay_srtp::Profile::AesCm128HmacSha1_80;
        let mut raw = [0u8; 30];
        getrandom::fill(&mut raw).unwrap();
        let key = secrelay_srtp::MasterKey::from_concatenated(suite, &raw).unwrap();
        let mut sdp = format!(
            "v=0\r\no=phone 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n\
             m=audio {port} {} 0\r\na=rtpmap:0 PCMU/8000\r\na=ptime:20\r\na=sendrecv\r\n",
            if sdes { "RTP/SAVP" } else { "RTP/AVP" }
        );
        if sdes {
            sdp.push_str(&format!(
                "a=crypto:1 AES_CM_128_HMAC_SHA1_80 {}\r\n",
                key.to_sdes_inline()
            ));
        }
        let mut r = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .new_agent()
            .post(&format!("{base}/rooms/{room}/rtp"))
            .header("Content-Type", "application/sdp")
            .send(&sdp)
            .unwrap();
        let location = r
            .headers()
            .get("location")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let answer = r.body_mut().read_to_string().unwrap();
        assert_eq!(r.status().as_u16(), 201, "{answer}");
        let d = secrelay_wire::sdp_rtp::parse_rtp(&answer).unwrap();
        let a = &d.sections[0];
        let gateway = std::net::SocketAddr::new(a.address.unwrap(), a.port);
        let (tx, rx) = if sdes {
            let theirs =
                secrelay_srtp::MasterKey::from_sdes_inline(suite, &a.crypto[0].keys[0].inline())
                    .unwrap();
            let session = |dir, k: &secrelay_srtp::MasterKey| {
                LibSrtp::new(profile, dir, k.key(), k.salt(), 1024, false).unwrap()
            };
            (
                Some(session(Direction::Outbound, &key)),
                Some(session(Direction::Inbound, &theirs)),
            )
        } else {
            (None, None)
        };
        TonePhone {
            socket,
            gateway,
            tx,
            rx,
            ssrc,
            seq: 1,
            hz,
            phase: 0,
            location: location.unwrap(),
            heard: Default::default(),
            failed: 0,
        }
    }

    fn send_frame(&mut self) {
        use secrelay_media::Codec as _;
        let pcm: Vec<i16> = (0..160)
            .map(|i| {
                let t = (self.phase + i) as f64 / 8000.0;
                (0.5 * 32767.0 * (2.0 * std::f64::consts::PI * self.hz * t).sin()) as i16
            })
            .collect();
        self.phase += 160;
        let mut pkt = vec![0x80, 0];
        pkt.extend_from_slice(&self.seq.to_be_bytes());
        pkt.extend_from_slice(&(u32::from(self.seq) * 160).to_be_bytes());
        pkt.extend_from_slice(&self.ssrc.to_be_bytes());
        secrelay_media::g711::Pcmu.from_pcm(&pcm, &mut pkt).unwrap();
        self.seq = self.seq.wrapping_add(1);
        let len = pkt.len();
        pkt.resize(len + 16, 0);
        let n = match self.tx.as_mut() {
            Some(tx) => tx.protect(&mut pkt, len).unwrap(),
            None => len,
        };
        let _ = self.socket.send_to(&pkt[..n], self.gateway);
    }

    fn read(&mut self) {
        use secrelay_media::Codec as _;
        let mut buf = [0u8; 2048];
        while let Ok((n, from)) = self.socket.recv_from(&mut buf) {
            if from != self.gateway || n < 12 || (200..=207).contains(&buf[1]) {
                continue; // RTCP (with rtcp-mux off it would not come here) or strays
            }
            let n = match self.rx.as_mut() {
                Some(rx) => match rx.unprotect(&mut buf, n) {
                    Ok(n) => n,
                    Err(_) => {
                        self.failed += 1;
                        continue;
                    }
                },
                None => n,
            };
            let Ok(h) = secrelay_wire::RtpHeader::parse(&buf[..n]) else {
                continue;
            };
            if h.payload_type() != 0 {
                continue;
            }
            let pcm = self.heard.entry(h.ssrc()).or_default();
            secrelay_media::g711::Pcmu.to_pcm(h.payload(), pcm).unwrap();
        }
    }

    /// The share of the last second's energy at `hz` (±15 Hz) in the loudest stream that holds
    /// it best, with that stream's sample count.
    fn tone_share(&self, hz: f64) -> (f64, usize) {
        self.heard
            .values()
            .map(|pcm| {
                let x = &pcm[pcm.len().saturating_sub(8000)..];
                (band_share(x, hz), pcm.len())
            })
            .fold((0.0, 0), |a, b| if b.0 > a.0 { b } else { a })
    }
}

/// The share of `x`'s energy (8 kHz samples) within ±15 Hz of `hz`, by a direct DFT over the
/// band against the total (Parseval).
fn band_share(x: &[i16], hz: f64) -> f64 {
    if x.len() < 800 {
        return 0.0;
    }
    let n = x.len() as f64;
    let mean = x.iter().map(|v| f64::from(*v)).sum::<f64>() / n;
    let total: f64 = x
        .iter()
        .map(|v| (f64::from(*v) - mean).powi(2))
        .sum::<f64>()
        * n;
    let step = 8000.0 / n;
    let mut band = 0.0;
    let mut f = (hz - 15.0).max(step);
    while f <= hz + 15.0 {
        let (mut re, mut im) = (0.0, 0.0);
        for (i, v) in x.iter().enumerate() {
            let a = 2.0 * std::f64::consts::PI * f * i as f64 / 8000.0;
            re += (f64::from(*v) - mean) * a.cos();
            im -= (f64::from(*v) - mean) * a.sin();
        }
        // A real signal's energy sits in two mirrored bins.
        band += 2.0 * (re * re + im * im);
        f += step;
    }
    if total > 0.0 {
        band / total
    } else {
        0.0
    }
}

/// Two phones in `room` that talk (and listen) every 20 ms on a thread of their own until
/// `stop` is set: an SDES one on libsrtp at 1,000 Hz and a plain one at 1,400 Hz. The thread
/// hands the phones back when it ends.
fn talking_phones(
    base: &str,
    room: &str,
) -> (
    Arc<std::sync::atomic::AtomicBool>,
    std::thread::JoinHandle<Vec<TonePhone>>,
) {
    talking(vec![
        TonePhone::join(base, room, true, 0x5de5, 1000.0),
        TonePhone::join(base, room, false, 0x9a1e, 1400.0),
    ])
}

/// `phones` sending a frame each and reading every 20 ms on a thread of their own, until the
/// flag is set; the thread gives them back.
fn talking(
    mut phones: Vec<TonePhone>,
) -> (
    Arc<std::sync::atomic::AtomicBool>,
    std::thread::JoinHandle<Vec<TonePhone>>,
) {
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop2 = stop.clone();
    let talker = std::thread::spawn(move || {
        let mut next = Instant::now();
        while !stop2.load(std::sync::atomic::Ordering::Relaxed) {
            for p in &mut phones {
                p.send_frame();
                p.read();
            }
            next += Duration::from_millis(20);
            std::thread::sleep(next.saturating_duration_since(Instant::now()));
        }
        phones
    });
    (stop, talker)
}

#[test]
fn aiortc_an_sdes_phone_on_libsrtp_and_a_plain_phone_hear_each_other_in_one_room() {
    let test = "aiortc_an_sdes_phone_on_libsrtp_and_a_plain_phone_hear_each_other_in_one_room";
    let Some(python) = python(test) else { return };
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let gw = Gateway::start();
    let (stop, talker) = talking_phones(&gw.base, "mixed");
    let (v, ok) = run_script(
        &python,
        "aiortc_phones.py",
        &[
            "--base",
            &gw.base,
            "--room",
            "mixed",
            "--expect",
            "1000,1400",
        ],
        &gw,
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let phones = talker.join().expect("the phones' thread");
    assert!(ok, "aiortc_phones.py failed: {v}");
    assert_eq!(v["codecs"][0], "PCMU", "{v}");
    for (p, name, other_hz) in [(&phones[0], "sdes", 1400.0), (&phones[1], "plain", 1000.0)] {
        assert_eq!(
            p.failed, 0,
            "{name}: libsrtp opens everything the gateway sends it"
        );
        let (share, samples) = p.tone_share(660.0);
        assert!(
            share >= 0.5,
            "{name} phone: aiortc's 660 Hz holds {share:.2} of the energy of the best of {} streams ({samples} samples)",
            p.heard.len()
        );
        let (share, _) = p.tone_share(other_hz);
        assert!(
            share >= 0.5,
            "{name} phone: the other phone's {other_hz} Hz: {share:.2}"
        );
    }
    for p in &phones {
        let r = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .new_agent()
            .delete(&format!("{}{}", gw.base, p.location))
            .call()
            .unwrap();
        assert_eq!(r.status().as_u16(), 200);
    }
    let rooms = gw.rooms_when_empty();
    assert_eq!(rooms["rooms"], serde_json::json!([]), "rooms left behind");
}

#[test]
fn an_ice_phone_on_aioice_and_a_plain_phone_hear_each_other_in_one_room() {
    let test = "an_ice_phone_on_aioice_and_a_plain_phone_hear_each_other_in_one_room";
    let Some(python) = python(test) else { return };
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let gw = Gateway::start();
    // The plain phone talks (1000 Hz) and listens while aioice's phone does ICE and talks.
    let (stop, talker) = talking(vec![TonePhone::join(
        &gw.base, "ice", false, 0x1ce0, 1000.0,
    )]);
    let (v, ok) = run_script(
        &python,
        "aioice_phone.py",
        &[
            "--base", &gw.base, "--room", "ice", "--expect", "1000", "--sends", "500",
        ],
        &gw,
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let plain = talker.join().expect("the plain phone's thread").remove(0);
    assert!(ok, "aioice_phone.py failed: {v}");
    assert_eq!(
        v["ice_lite"], true,
        "the gateway's answer says a=ice-lite: {v}"
    );
    let candidate = v["gateway_candidates"][0].as_str().unwrap_or_default();
    let port = candidate.split_whitespace().nth(5).unwrap_or_default();
    assert_eq!(
        v["nominated"].as_str(),
        Some(format!("127.0.0.1:{port}").as_str()),
        "the pair nominated is the leg's own port: {v}"
    );
    assert!(v["expect_share"].as_f64().unwrap() >= 0.5, "{v}");
    let (share, samples) = plain.tone_share(500.0);
    assert!(
        share >= 0.5,
        "the plain phone: aioice's 500 Hz holds {share:.2} of the energy ({samples} samples)"
    );
    assert!(
        gw.metric("secrelay_drops_total{reason=\"stun_rejected\"}") == 0.0,
        "every check aioice sent was answered"
    );
}

#[test]
fn aiortc_speaking_only_opus_and_pcmu_phones_hear_each_other_transcoded() {
    let test = "aiortc_speaking_only_opus_and_pcmu_phones_hear_each_other_transcoded";
    let Some(python) = python(test) else { return };
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let gw = Gateway::start();
    // Phones that offer PCMU only: an SDES one whose SRTP is libsrtp's, and a plain one.
    let (stop, talker) = talking_phones(&gw.base, "transcoded");
    // aiortc offers Opus only: it hears the phones' PCMU as Opus, they hear its Opus as PCMU.
    let (v, ok) = run_script(
        &python,
        "aiortc_phones.py",
        &[
            "--base",
            &gw.base,
            "--room",
            "transcoded",
            "--expect",
            "1000,1400",
            "--codec",
            "opus",
        ],
        &gw,
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let phones = talker.join().expect("the phones' thread");
    assert!(ok, "aiortc_phones.py failed: {v}");
    assert_eq!(v["codecs"][0], "opus", "{v}");
    for (p, name) in [(&phones[0], "sdes"), (&phones[1], "plain")] {
        assert_eq!(
            p.failed, 0,
            "{name}: libsrtp opens everything the gateway sends it"
        );
        let (share, samples) = p.tone_share(660.0);
        assert!(
            share >= 0.5,
            "{name} phone: aiortc's 660 Hz, sent as Opus, holds {share:.2} of the energy of the best of {} PCMU streams ({samples} samples)",
            p.heard.len()
        );
    }
    assert!(gw.metric("secrelay_media_transcoded_total") > 100.0);
    assert!(gw.metric("secrelay_media_decoded_total") > 100.0);
    for p in &phones {
        let r = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .new_agent()
            .delete(&format!("{}{}", gw.base, p.location))
            .call()
            .unwrap();
        assert_eq!(r.status().as_u16(), 200);
    }
    let rooms = gw.rooms_when_empty();
    assert_eq!(rooms["rooms"], serde_json::json!([]), "rooms left behind");
}

/// Chromium calls a plain phone through the ng protocol (chromium_ng.py in the SIP proxy's
/// place); then each side offers again in the answered call: the browser restarts ICE, the
/// phone re-INVITEs and the page answers our new offer ([`reinvited`]).
#[test]
fn chromium_calls_a_plain_rtp_phone_through_the_ng_protocol() {
    ng_call_between_chromium_and_a_phone(
        "chromium_calls_a_plain_rtp_phone_through_the_ng_protocol",
        false,
    );
}

/// The other way: the phone calls, and secrelay offers WebRTC (ICE-lite, DTLS actpass) to the
/// browser, which answers it.
#[test]
fn a_plain_rtp_phone_calls_chromium_through_the_ng_protocol() {
    ng_call_between_chromium_and_a_phone(
        "a_plain_rtp_phone_calls_chromium_through_the_ng_protocol",
        true,
    );
}

/// What the browser's and the phone's re-INVITEs left: the browser's ICE restart gave it new
/// credentials of ours, and after it and after our new offer to the page (the phone's
/// re-INVITE) audio went on both ways on the call's first DTLS association.
fn reinvited(v: &serde_json::Value) {
    let r = &v["restart"];
    assert_ne!(r["remote_ufrag_before"], r["remote_ufrag_after"], "{v}");
    assert!(r["remote_ufrag_after"].is_string(), "{v}");
    for step in [r, &v["reinvite"]] {
        let heard = |at: &str, way: &str, n: &str| step[at][way][n].as_u64().unwrap_or(0);
        for (way, n) in [("inbound", "packetsReceived"), ("outbound", "packetsSent")] {
            assert!(
                heard("after", way, n) > heard("before", way, n) + 100,
                "{way} {n}: {v}"
            );
        }
        assert_eq!(step["after"]["transport"]["dtlsState"], "connected", "{v}");
    }
    assert_eq!(v["reinvite"]["signaling"], "stable", "{v}");
    assert!(
        v["reinvite"]["phone_heard_since_restart"]
            .as_u64()
            .unwrap_or(0)
            >= 100,
        "{v}"
    );
}

fn ng_call_between_chromium_and_a_phone(test: &str, callee: bool) {
    let Some(chromium) = chromium(test) else {
        return;
    };
    // The driver (the SIP proxy's part and the phone) needs only Python's standard library.
    let python = std::env::var_os("SECRELAY_INTEROP_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("python3"));
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let gw = Gateway::start_with(&["--ng", "127.0.0.1:0"]);
    let ng = gw.ng.clone().expect("serve printed its ng address");
    let chromium = chromium.to_string_lossy().into_owned();
    let mut args = vec!["--ng", &ng, "--chromium", &chromium];
    if callee {
        args.push("--callee");
    } else {
        args.push("--reinvite");
    }
    let (v, ok) = run_script(&python, "chromium_ng.py", &args, &gw);
    assert!(ok, "chromium_ng.py failed: {v}");
    if !callee {
        reinvited(&v);
    }
    // The callee's side was plain RTP; the browser's DTLS-SRTP, both on PCMU (the codec the
    // phone took), and audio went both ways.
    assert_eq!(v["sdp_to_phone_transport"], "RTP/AVP", "{v}");
    let b = &v["browser"];
    assert_eq!(b["inbound"]["codec"], "audio/PCMU", "{v}");
    assert_eq!(b["outbound"]["codec"], "audio/PCMU", "{v}");
    assert!(
        b["inbound"]["packetsReceived"].as_u64().unwrap_or(0) > 100,
        "{v}"
    );
    assert!(
        b["inbound"]["totalAudioEnergy"].as_f64().unwrap_or(0.0) > 0.0,
        "{v}"
    );
    assert_eq!(b["transport"]["dtlsState"], "connected", "{v}");
    let phone = &v["phone"];
    assert!(phone["received"].as_u64().unwrap_or(0) > 100, "{v}");
    assert!(phone["loudest_rms"].as_f64().unwrap_or(0.0) >= 300.0, "{v}");
    assert_eq!(phone["other_payload_types"], 0, "{v}");
    assert_eq!(
        v["query_tags"],
        serde_json::json!(["browser", "phone"]),
        "{v}"
    );
    assert_eq!(v["delete"], "ok");
    let rooms = gw.rooms_when_empty();
    assert_eq!(rooms["rooms"], serde_json::json!([]), "rooms left behind");
    assert!(gw.metric("secrelay_ng_requests_total{result=\"ok\"}") >= 4.0);
    assert_eq!(
        gw.metric("secrelay_ng_requests_total{result=\"error\"}"),
        0.0
    );
}

/// Nodes of a cluster named `names`, in this process, one worker each, sharing `redis`, with
/// pipes authenticated by certificates of a private CA made here (its directory is the first
/// value: it must outlive the nodes), once every node is registered; and their signaling, with
/// each one's admin key.
fn piped_nodes(
    redis: &secrelay_testkit::redis::RedisServer,
    names: &[&str],
) -> (
    tempfile::TempDir,
    Vec<secrelay_gateway::server::Server>,
    Vec<secrelay_testkit::Signaling>,
) {
    use secrelay_dtls::ca::{CaDir, Role};
    use secrelay_dtls::KeyType;
    use secrelay_gateway::server::{ServeConfig, Server};
    use secrelay_testkit::{wait_for, Signaling};

    let certs = tempfile::tempdir().unwrap();
    let ca = CaDir::init(certs.path(), KeyType::EcdsaP256, false).unwrap();
    let nodes: Vec<Server> = names
        .iter()
        .map(|name| {
            ca.issue(name, Role::Both, KeyType::EcdsaP256, false)
                .unwrap();
            Server::start(ServeConfig {
                http: Some("127.0.0.1:0".parse().unwrap()),
                udp: "127.0.0.1:0".parse().unwrap(),
                workers: 1,
                drain_secs: 0.1,
                cors_origins: vec!["*".into()],
                cluster_redis: Some(redis.url()),
                cluster_node: Some((*name).into()),
                // The default lease (6 s): nothing here waits for a node to drop out, and a
                // short one can lapse while the browsers load both cores.
                cluster_pipe: Some("127.0.0.1:0".parse().unwrap()),
                cluster_pipe_ca: Some(certs.path().join("ca.pem")),
                cluster_pipe_cert: Some(certs.path().join(format!("{name}.pem"))),
                cluster_pipe_key: Some(certs.path().join(format!("{name}.key"))),
                ..ServeConfig::default()
            })
            .unwrap()
        })
        .collect();
    let sig: Vec<Signaling> = nodes
        .iter()
        .map(|n| Signaling::new(n.url()).with_admin(n.admin_key().expose()))
        .collect();
    wait_for("every node registered", Duration::from_secs(5), || {
        sig[0].cluster_nodes().unwrap() == names
    });
    (certs, nodes, sig)
}

/// Data channels in a room across two nodes of a cluster, with aiortc on both ends: a member
/// joins at the room's node a, and a WHEP viewer with data channels is served at node b (not
/// redirected); their messages cross the link between the nodes both ways, complete and in
/// order, a 60 kB binary message intact; and a message the API at a sends to the room reaches
/// the viewer at b.
#[test]
fn aiortc_data_channels_cross_between_the_nodes_of_a_room() {
    use secrelay_testkit::redis::RedisServer;

    let test = "aiortc_data_channels_cross_between_the_nodes_of_a_room";
    let Some(python) = python(test) else { return };
    let Some(redis) = RedisServer::start(0) else {
        return;
    };
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (_certs, nodes, sig) = piped_nodes(&redis, &["a", "b"]);
    let out = Command::new("timeout")
        .args(["--kill-after=5", "90"])
        .arg(&python)
        .arg(script("aiortc_data.py"))
        .args(["--base", &nodes[0].url(), "--base-b", &nodes[1].url()])
        .args(["--room", "nodes-data", "--b-whep", "--server-message"])
        .env("SECRELAY_ADMIN_KEY", nodes[0].admin_key().expose())
        .output()
        .expect("running timeout(1) with python");
    let v = lab_support::script_json("aiortc_data.py", &out, "");
    eprintln!("aiortc_data.py across nodes: {v}");
    assert!(out.status.success(), "{v}");
    let b_location = v["b_location"].as_str().unwrap_or_default();
    assert!(
        b_location.starts_with(&nodes[1].url()),
        "the viewer was served at b: {v}"
    );
    assert_chat_exchanged(&v, 500);
    let to_room = &v["server_message"]["received"];
    assert_eq!(to_room, &serde_json::json!([true, true]), "{v}");
    let data = |n: usize, event: &str| {
        sig[n]
            .metric(&format!(
                "secrelay_cluster_pipe_data_messages_total{{event=\"{event}\"}}"
            ))
            .unwrap()
    };
    // a's 500 chat messages, its binary one, its 10 unreliable ones and the server's; b's 500.
    assert!(data(0, "sent") >= 512, "a sent {}", data(0, "sent"));
    assert!(
        data(1, "received") >= 512,
        "b received {}",
        data(1, "received")
    );
    assert!(data(1, "sent") >= 500 && data(0, "received") >= 500);
    assert_eq!(data(0, "dropped") + data(1, "dropped"), 0);
    for n in nodes {
        n.shutdown();
    }
}

/// A room across three nodes of a cluster (a real Redis; the nodes' pipes authenticated by
/// certificates of a private CA made here): Chromium publishes its fake camera and microphone
/// at node a, and three Chromium pages play them, one from a and one each from b and c, where
/// each is served (not redirected): what they decode crossed to b and c through the pipes,
/// once per node, and their keyframe requests went back through them.
#[test]
fn chromium_viewers_at_two_other_nodes_play_what_chromium_publishes_at_the_rooms_node() {
    use secrelay_testkit::redis::RedisServer;

    let test = "chromium_viewers_at_two_other_nodes_play_what_chromium_publishes_at_the_rooms_node";
    let Some(chromium) = chromium(test) else {
        return;
    };
    let Some(redis) = RedisServer::start(0) else {
        return;
    };
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (_certs, nodes, sig) = piped_nodes(&redis, &["a", "b", "c"]);
    let out = Command::new("timeout")
        .args(["--kill-after=5", "120"])
        .arg("python3")
        .arg(script("chromium_av.py"))
        .args(["--base", &nodes[0].url()])
        .args(["--viewer-base", &nodes[1].url()])
        .args(["--viewer-base", &nodes[2].url()])
        .args(["--room", "spread", "--publisher-first", "--timeout", "30"])
        .args(["--watch", "3"])
        .arg("--chromium")
        .arg(&chromium)
        .env("SECRELAY_ADMIN_KEY", nodes[0].admin_key().expose())
        .output()
        .expect("running timeout(1) with python3");
    let v = lab_support::script_json("chromium_av.py", &out, "");
    eprintln!("chromium_av.py across nodes: {v}");
    assert!(out.status.success(), "{v}");
    for page in ["play", "far1", "far2"] {
        assert_frame_shown(&v[page]);
        assert_eq!(v[format!("{page}_delete")], 200, "{v}");
        // Decoding went on while it watched for 3 s.
        let w = &v[format!("{page}_watched")];
        let decoded = |at: &str| w[at]["framesDecoded"].as_u64().unwrap_or(0);
        assert!(decoded("end") >= decoded("start") + 30, "{page}: {w}");
    }
    let metric = |n: usize, series: &str| sig[n].metric(series).unwrap();
    // Each far viewer was a participant of its own node, fed through a pipe from a.
    for n in [1, 2] {
        assert!(metric(n, "secrelay_handshakes_total{result=\"ok\"}") >= 1);
        assert!(metric(n, "secrelay_cluster_pipe_received_total") > 100);
        assert!(
            metric(n, "secrelay_cluster_pipe_sent_total") > 0,
            "no feedback went back"
        );
    }
    assert!(metric(0, "secrelay_cluster_pipe_sent_total") > 200);
    for n in nodes {
        n.shutdown();
    }
}
