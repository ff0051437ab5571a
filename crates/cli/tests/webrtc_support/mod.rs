//! Shared by the interop tests with WebRTC clients nobody here wrote (`interop_webrtc`: the
//! browsers; `interop_aiortc`: aiortc and aioice in Python): `secrelay serve` started as a user
//! starts it ([`Gateway`]), the client scripts in `interop/webrtc/` run with a time limit
//! ([`run_script`], [`chromium_script`]), RTP phones that send and measure tones
//! ([`TonePhone`]), and two gateways whose rooms are piped together ([`piped_nodes`]).
//!
//! The Python environment comes from `scripts/setup` (a venv at `interop/webrtc/.venv`, or
//! `$SECRELAY_INTEROP_PYTHON`), Chromium from Debian's package (or `$SECRELAY_CHROMIUM`). Where
//! one is missing the test says SKIPPED, except under CI (`CI` set), where it fails
//! (`lab_support::missing`).

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::lab_support::{self, chromium, missing};

/// The two tests share two cores with everything else: one at a time.
pub static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub fn script(name: &str) -> PathBuf {
    repo().join("interop/webrtc").join(name)
}

/// The Python with aiortc and numpy: `$SECRELAY_INTEROP_PYTHON`, else scripts/setup's venv.
pub fn python(test: &str) -> Option<PathBuf> {
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
pub fn host_ipv4() -> Option<String> {
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
pub struct Gateway {
    pub child: Child,
    pub base: String,
    /// The ng control socket's address, when one was asked for.
    pub ng: Option<String>,
    pub log: Arc<Mutex<String>>,
    /// Over HTTPS: the private CA's certificate (DER) the gateway's certificate is checked
    /// against.
    pub ca: Option<Vec<u8>>,
    /// Its admin key (`/api/…` and `/metrics`).
    pub admin: secrelay_testkit::AdminKeyFile,
}

impl Gateway {
    pub fn start() -> Gateway {
        Gateway::start_with(&[])
    }

    /// `secrelay serve` over HTTPS, its certificate issued by the private CA in `ca_dir`.
    pub fn start_https(ca_dir: &Path) -> Gateway {
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
    pub fn start_with(extra: &[&str]) -> Gateway {
        Gateway::spawn("127.0.0.1:0", "127.0.0.1", extra)
    }

    /// `secrelay serve` with its media on `udp`, announced as `announce`.
    pub fn spawn(udp: &str, announce: &str, extra: &[&str]) -> Gateway {
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

    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// GET a path; returns the status and the body.
    pub fn get(&self, path: &str) -> (u16, String) {
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

    pub fn json(&self, path: &str) -> Value {
        let (status, body) = self.get(path);
        assert_eq!(status, 200, "GET {path}: {body}");
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: {e}: {body}"))
    }

    /// A counter or gauge from /metrics (the sample whose name and labels start the line).
    pub fn metric(&self, sample: &str) -> f64 {
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
    pub fn rooms_when_empty(&self) -> Value {
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

pub fn dechunk(body: &str) -> String {
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
pub fn run_script(python: &Path, name: &str, args: &[&str], gw: &Gateway) -> (Value, bool) {
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
pub fn chromium_script(test: &str, script: &str, args: &[&str]) -> Option<(Value, Gateway)> {
    let chromium = chromium(test)?;
    let python = std::env::var_os("SECRELAY_INTEROP_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("python3"));
    Some(chromium_driver(&python, &chromium, script, args))
}

/// [`chromium_script`] for a driver that needs the interop venv (the DevTools protocol over
/// `websocket-client`).
pub fn chromium_venv_script(test: &str, script: &str, args: &[&str]) -> Option<(Value, Gateway)> {
    let chromium = chromium(test)?;
    let python = python(test)?;
    Some(chromium_driver(&python, &chromium, script, args))
}

pub fn chromium_driver(
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

/// `aiortc_data.py` against a gateway of its own (`secrelay serve` with `serve_args`), in
/// `room`, with `args`: its JSON, once it passed, and the gateway; `None` when aiortc is
/// missing outside CI.
pub fn aiortc_data(
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
pub fn assert_chat_exchanged(v: &Value, n: u64) {
    assert_eq!(v["received"], serde_json::json!([n, n]), "{v}");
    assert_eq!(v["in_order"], serde_json::json!([true, true]), "{v}");
    assert_eq!(v["binary_ok"], true, "{v}");
}

/// A SIP-style phone on a real socket for the aiortc room test: G.711 μ-law 20 ms frames of a
/// sine, SDES-SRTP by libsrtp or plain RTP, and the PCM of what it hears, by stream.
pub struct TonePhone {
    pub socket: std::net::UdpSocket,
    pub gateway: std::net::SocketAddr,
    pub tx: Option<secrelay_peers::libsrtp::LibSrtp>,
    pub rx: Option<secrelay_peers::libsrtp::LibSrtp>,
    pub ssrc: u32,
    pub seq: u16,
    pub hz: f64,
    pub phase: usize,
    pub location: String,
    /// Decoded audio by SSRC.
    pub heard: std::collections::BTreeMap<u32, Vec<i16>>,
    pub failed: usize,
}

impl TonePhone {
    pub fn join(base: &str, room: &str, sdes: bool, ssrc: u32, hz: f64) -> TonePhone {
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

    pub fn send_frame(&mut self) {
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

    pub fn read(&mut self) {
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
    pub fn tone_share(&self, hz: f64) -> (f64, usize) {
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
pub fn band_share(x: &[i16], hz: f64) -> f64 {
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
pub fn talking_phones(
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
pub fn talking(
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

/// Nodes of a cluster named `names`, in this process, one worker each, sharing `redis`, with
/// pipes authenticated by certificates of a private CA made here (its directory is the first
/// value: it must outlive the nodes), once every node is registered; and their signaling, with
/// each one's admin key.
pub fn piped_nodes(
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

/// Each phone leaves (`DELETE` of its session: 200), then the gateway keeps no room.
pub fn leave_and_check_empty(gw: &Gateway, phones: &[TonePhone]) {
    for p in phones {
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
