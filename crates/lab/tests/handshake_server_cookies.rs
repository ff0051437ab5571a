//! `lab handshake-server` behind its stateless cookie responder, in process on loopback UDP:
//! a storm of ClientHellos from many source addresses (never answering, or answering with a
//! forged cookie) makes no endpoint at all, while real clients — secrelay's load generator on
//! the dimpl and OpenSSL engines, OpenSSL's `s_client` and pion/dtls — complete, one endpoint
//! each, with the keys of both sides equal.
//!
//! Every wait is bounded; `s_client` and pion are skipped (with a line saying so) when the
//! `openssl` program or a Go toolchain is missing.

use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use secrelay_dtls::cookie::{CookieResponder, CookieVerdict};
use secrelay_dtls::{Certificate, Endpoint, EndpointConfig, KeyType, LocalCertificate, Output};
use secrelay_dtls::{EngineChoice, PeerAuth, Role};
use secrelay_lab::handshake::keylog::KeylogLine;
use secrelay_lab::handshake::load::{self, LoadOptions};
use secrelay_lab::handshake::server::{self, ServerCounters, ServerOptions};

const WAIT: Duration = Duration::from_secs(20);

/// The server on 127.0.0.1, in a thread, until `stop`.
struct Running {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: JoinHandle<anyhow::Result<ServerCounters>>,
}

impl Running {
    fn start(keylog: &Path) -> Running {
        let mut opts = ServerOptions::new("127.0.0.1:0".parse().unwrap());
        opts.keylog = Some(keylog.to_path_buf());
        opts.print_stats = false;
        opts.duration = Some(Duration::from_secs(120));
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel();
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            server::run(opts, s, move |a| {
                let _ = tx.send(a);
            })
        });
        let addr = rx.recv_timeout(WAIT).expect("the server bound its socket");
        Running { addr, stop, thread }
    }

    fn stop(self) -> ServerCounters {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .join()
            .expect("the server thread")
            .expect("the server ran")
    }
}

fn read_keylog(path: &Path) -> Vec<KeylogLine> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("a keylog line"))
        .collect()
}

/// A first ClientHello of secrelay's client, and (`forged`) its second one carrying a cookie
/// from a responder the server never knew.
fn client_hellos(forged: bool) -> Vec<u8> {
    let cert = Certificate::self_signed(KeyType::EcdsaP256, "storm").unwrap();
    let config = EndpointConfig::new(
        Role::Client,
        LocalCertificate::from(&cert),
        PeerAuth::AnyCertificate,
    );
    let now = Instant::now();
    let mut ep = Endpoint::new(config, now).unwrap();
    let Some(Output::Transmit(ch1)) = ep.poll_output() else {
        panic!("a first flight")
    };
    if !forged {
        return ch1;
    }
    while ep.poll_output().is_some() {}
    let other = CookieResponder::new(&[0x42; 32]);
    let CookieVerdict::HelloVerifyRequest(hvr) = other.check("127.0.0.1:1".parse().unwrap(), &ch1)
    else {
        panic!("a HelloVerifyRequest")
    };
    ep.handle_datagram(now, &hvr);
    let Some(Output::Transmit(ch2)) = ep.poll_output() else {
        panic!("a second ClientHello")
    };
    ch2
}

/// `hosts` sockets on 127.0.0.2, 127.0.0.3, … each sending `per_host` ClientHellos (every
/// fourth with a forged cookie) and never answering, a host every millisecond. Returns how many
/// were sent.
fn storm(target: SocketAddr, hosts: u8, per_host: usize) -> usize {
    let hellos: Vec<Vec<u8>> = (0..8).map(|i| client_hellos(i % 4 == 3)).collect();
    let mut sent = 0;
    for h in 0..hosts {
        let ip = std::net::Ipv4Addr::new(127, 0, 0, 2 + h);
        let s = UdpSocket::bind((ip, 0)).expect("loopback addresses beyond 127.0.0.1");
        for i in 0..per_host {
            s.send_to(&hellos[(usize::from(h) + i) % hellos.len()], target)
                .unwrap();
            sent += 1;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    sent
}

fn load_run(target: SocketAddr, engine: EngineChoice, handshakes: u64) -> load::LoadReport {
    let mut o = LoadOptions::new(target);
    o.handshakes = Some(handshakes);
    o.connections = 4;
    o.engine = engine;
    o.progress = false;
    load::run(o, Arc::new(AtomicBool::new(false))).expect("the load run")
}

#[test]
fn a_spoofed_storm_makes_no_endpoint_while_real_clients_complete() {
    let dir = tempfile::tempdir().unwrap();
    let keylog = dir.path().join("server.keylog");
    let server = Running::start(&keylog);
    let target = server.addr;
    let storm = std::thread::spawn(move || storm(target, 200, 5));
    let dimpl = load_run(target, EngineChoice::Dimpl, 20);
    let openssl = load_run(target, EngineChoice::Openssl, 10);
    let spoofed = storm.join().unwrap();
    // Let the last spoofed datagrams be read before stopping.
    std::thread::sleep(Duration::from_millis(200));
    let c = server.stop();
    eprintln!("{c:?}");
    assert_eq!(spoofed, 1000);
    assert_eq!((dimpl.completed, dimpl.failed), (20, 0), "{dimpl:?}");
    assert_eq!((openssl.completed, openssl.failed), (10, 0), "{openssl:?}");
    assert_eq!(c.completed, 30);
    assert_eq!(c.total_failed(), 0, "{:?}", c.failed);
    // One endpoint per real handshake, none for the 1,000 spoofed ClientHellos (a quarter of
    // them with a forged cookie): each one the server read was answered with a
    // HelloVerifyRequest instead. (Some may be lost in the socket's receive buffer while the
    // server works on real handshakes; most are read.)
    assert_eq!(c.endpoints_made, 30);
    assert!(c.peak_endpoints <= 8, "{}", c.peak_endpoints);
    assert!(c.hello_verify_requests >= 30 + 500, "{c:?}");
    assert_eq!(c.dropped_not_dtls, 0);
    assert_eq!(c.refused_at_cap, 0);
    assert_eq!(read_keylog(&keylog).len(), 30);
}

// ---------------------------------------------------------------------------------------------
// OpenSSL's s_client and pion/dtls through the responder.

fn find_on_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

/// A child killed when dropped, its stdout and stderr merged into a file.
struct Kid(Child, PathBuf);

impl Kid {
    fn spawn(mut cmd: Command, out: PathBuf) -> Kid {
        let f = std::fs::File::create(&out).unwrap();
        cmd.stdin(Stdio::piped())
            .stdout(f.try_clone().unwrap())
            .stderr(f);
        Kid(cmd.spawn().expect("spawn"), out)
    }

    fn output(&self) -> String {
        std::fs::read_to_string(&self.1).unwrap_or_default()
    }

    /// Waits (bounded) until the output holds a line satisfying `pred`.
    fn line(&self, pred: impl Fn(&str) -> bool) -> Option<String> {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(l) = self.output().lines().find(|l| pred(l)) {
                return Some(l.to_string());
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Kid {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn client_identity(dir: &Path) -> (PathBuf, PathBuf) {
    let cert = Certificate::self_signed(KeyType::EcdsaP256, "peer-client").unwrap();
    let (c, k) = cert.to_pem();
    let (cp, kp) = (dir.join("client.crt.pem"), dir.join("client.key.pem"));
    std::fs::write(&cp, c).unwrap();
    std::fs::write(&kp, k.as_bytes()).unwrap();
    (cp, kp)
}

/// The server's keylog line for the client whose exported block is `hex`.
fn server_has(keylog: &Path, hex: &str) -> bool {
    read_keylog(keylog)
        .iter()
        .any(|l| l.keying_material.eq_ignore_ascii_case(hex))
}

#[test]
fn openssl_s_client_completes_through_the_responder() {
    let Some(openssl) = find_on_path("openssl") else {
        println!("skipped: openssl not found");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let keylog = dir.path().join("server.keylog");
    let server = Running::start(&keylog);
    let (cert, key) = client_identity(dir.path());
    let mut cmd = Command::new(openssl);
    cmd.args(["s_client", "-dtls1_2", "-connect", &server.addr.to_string()])
        .arg("-cert")
        .arg(&cert)
        .arg("-key")
        .arg(&key)
        .args([
            "-use_srtp",
            "SRTP_AEAD_AES_128_GCM",
            "-keymatexport",
            "EXTRACTOR-dtls_srtp",
            "-keymatexportlen",
            "56",
        ]);
    let kid = Kid::spawn(cmd, dir.path().join("s_client.out"));
    let line = kid
        .line(|l| l.trim_start().starts_with("Keying material:"))
        .unwrap_or_else(|| panic!("s_client did not connect\n{}", kid.output()));
    let hex = line.trim().trim_start_matches("Keying material:").trim();
    let deadline = Instant::now() + WAIT;
    while !server_has(&keylog, hex) {
        assert!(Instant::now() < deadline, "server keylog lacks {hex}");
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(kid);
    let c = server.stop();
    assert_eq!((c.completed, c.endpoints_made), (1, 1), "{c:?}");
    assert!(c.hello_verify_requests >= 1, "{c:?}");
}

#[test]
fn pion_client_completes_through_the_responder() {
    let pion = match secrelay_lab::handshake::study::pion_binary() {
        Ok(p) => p,
        Err(why) => {
            if std::env::var_os("SECRELAY_REQUIRE_PION").is_some() {
                panic!("pion-dtls unavailable and SECRELAY_REQUIRE_PION is set: {why}");
            }
            println!("skipped: {why}");
            return;
        }
    };
    let dir = tempfile::tempdir().unwrap();
    let keylog = dir.path().join("server.keylog");
    let server = Running::start(&keylog);
    let (cert, key) = client_identity(dir.path());
    let mut cmd = Command::new(pion);
    cmd.args(["client", "--connect", &server.addr.to_string()])
        .arg("--cert")
        .arg(&cert)
        .arg("--key")
        .arg(&key)
        .args(["--srtp", "SRTP_AEAD_AES_128_GCM"]);
    let kid = Kid::spawn(cmd, dir.path().join("pion.out"));
    let line = kid
        .line(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("pion printed no result\n{}", kid.output()));
    let v: serde_json::Value = serde_json::from_str(&line).expect("pion's JSON line");
    let hex = v["keying_material"]
        .as_str()
        .unwrap_or_else(|| panic!("pion failed: {line}"));
    assert_eq!(v["srtp_profile"], "SRTP_AEAD_AES_128_GCM", "{line}");
    let deadline = Instant::now() + WAIT;
    while !server_has(&keylog, hex) {
        assert!(Instant::now() < deadline, "server keylog lacks {hex}");
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(kid);
    let c = server.stop();
    assert_eq!((c.completed, c.endpoints_made), (1, 1), "{c:?}");
    assert!(c.hello_verify_requests >= 1, "{c:?}");
}
