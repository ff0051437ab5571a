//! Shared helpers for interop tests against real DTLS peers (the `openssl` command line today;
//! pion and aiortc later): a blocking UDP driver for an [`Endpoint`] on loopback, a child
//! process guard that always kills its child, and a line collector for the child's output.
//!
//! Every wait here is bounded by an explicit deadline, so a peer that never answers makes a
//! test fail within seconds rather than hang. A peer that is not installed makes the test fail
//! under CI and skip elsewhere ([`missing`]).
#![allow(dead_code)]

use std::io::{BufRead, BufReader, ErrorKind, Read};
use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use secrelay_dtls::{Endpoint, Event, FailReason, Output, SrtpKeys};
use secrelay_srtp::Profile;

/// Loopback only.
pub const LOCALHOST: &str = "127.0.0.1";

/// Bound on every wait for a peer (handshake, process output, process exit).
pub const PEER_WAIT: Duration = Duration::from_secs(10);

/// Largest datagram we read.
const MAX_DATAGRAM: usize = 65_535;

/// Longest a single blocking `recv_from` waits, so deadlines are checked often.
const MAX_RECV_WAIT: Duration = Duration::from_millis(50);

/// A peer or tool the running test needs is missing. Under CI (`CI` set, to any value), where
/// `scripts/setup` has installed every peer, the test fails with the reason; elsewhere it
/// prints `SKIPPED <test>: <reason>` and the caller returns.
pub fn missing(test: &str, why: &str) {
    if std::env::var_os("CI").is_some() {
        panic!("{test}: {why} (CI is set, and scripts/setup installs it)");
    }
    eprintln!("SKIPPED {test}: {why} (run scripts/setup)");
}

/// The name of the running test: libtest runs each test on a thread named after it.
pub fn test_name() -> String {
    std::thread::current()
        .name()
        .unwrap_or("this test")
        .to_string()
}

/// `openssl` on `PATH`, or `None` after [`missing`] said why.
pub fn openssl() -> Option<PathBuf> {
    let p = find_on_path("openssl");
    if p.is_none() {
        missing(
            &test_name(),
            "no openssl command on PATH (Debian package openssl)",
        );
    }
    p
}

/// The Go toolchain for the pion peers: `$SECRELAY_GO`, else `.tools/go/bin/go` (where
/// `scripts/setup` puts Go 1.24 when the `go` on `PATH` is older), else `go` on `PATH`. Err:
/// what was looked for.
pub fn find_go() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("SECRELAY_GO") {
        let p = PathBuf::from(p);
        return if is_executable(&p) {
            Ok(p)
        } else {
            Err(format!(
                "SECRELAY_GO={} is not an executable file",
                p.display()
            ))
        };
    }
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("crates/dtls sits two levels below the repository root");
    let local = repo.join(".tools/go/bin/go");
    if is_executable(&local) {
        return Ok(local);
    }
    find_on_path("go").ok_or_else(|| {
        format!(
            "no Go toolchain: no $SECRELAY_GO, no {}, no go on PATH",
            local.display()
        )
    })
}

/// The path of `program` if it is an executable file on `PATH`.
pub fn find_on_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// A UDP port on 127.0.0.1 that was free a moment ago (bound, then released). Another process
/// may take it in between; callers that can should bind and keep the socket instead.
pub fn free_udp_port() -> u16 {
    let s = UdpSocket::bind((LOCALHOST, 0)).expect("bind 127.0.0.1:0");
    s.local_addr().expect("local_addr").port()
}

/// A UDP socket bound to an ephemeral port on 127.0.0.1.
pub fn bind_loopback() -> UdpSocket {
    UdpSocket::bind((LOCALHOST, 0)).expect("bind 127.0.0.1:0")
}

/// Output lines of a child process (stdout and stderr interleaved as they arrive), collected by
/// reader threads.
#[derive(Clone, Default)]
pub struct Lines {
    inner: Arc<(Mutex<LinesState>, Condvar)>,
}

#[derive(Default)]
struct LinesState {
    lines: Vec<String>,
    /// Streams that reached EOF.
    closed: usize,
}

impl Lines {
    fn push(&self, line: String) {
        let (m, cv) = &*self.inner;
        m.lock().unwrap().lines.push(line);
        cv.notify_all();
    }

    fn close_one(&self) {
        let (m, cv) = &*self.inner;
        m.lock().unwrap().closed += 1;
        cv.notify_all();
    }

    /// Everything collected so far.
    pub fn snapshot(&self) -> Vec<String> {
        self.inner.0.lock().unwrap().lines.clone()
    }

    /// Everything collected so far, one string.
    pub fn text(&self) -> String {
        self.snapshot().join("\n")
    }

    /// Waits until a line satisfies `pred` (returning it), until `streams` streams are closed
    /// without one (`None`), or until `timeout` passes (`None`).
    pub fn wait_for(
        &self,
        streams: usize,
        timeout: Duration,
        pred: impl Fn(&str) -> bool,
    ) -> Option<String> {
        let deadline = Instant::now() + timeout;
        let (m, cv) = &*self.inner;
        let mut st = m.lock().unwrap();
        loop {
            if let Some(l) = st.lines.iter().find(|l| pred(l)) {
                return Some(l.clone());
            }
            if st.closed >= streams {
                return None;
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            st = cv.wait_timeout(st, deadline - now).unwrap().0;
        }
    }

    /// The first line starting (after leading blanks) with `prefix`, without the prefix.
    pub fn value_after(&self, prefix: &str) -> Option<String> {
        self.snapshot().iter().find_map(|l| {
            l.trim_start()
                .strip_prefix(prefix)
                .map(|v| v.trim().to_string())
        })
    }
}

/// A child process that is killed and reaped whenever the guard is dropped (test failure and
/// panic included), with its stdout/stderr collected into [`Lines`] and its stdin held open as
/// a pipe until [`ChildGuard::close_stdin`] (openssl's s_client/s_server quit at stdin EOF).
pub struct ChildGuard {
    name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    readers: Vec<JoinHandle<()>>,
    /// The child's output lines.
    pub lines: Lines,
}

impl ChildGuard {
    /// Spawns `cmd` with piped stdin, stdout and stderr.
    pub fn spawn(name: &str, mut cmd: Command) -> std::io::Result<ChildGuard> {
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn()?;
        let lines = Lines::default();
        let stdin = child.stdin.take();
        let mut readers = Vec::new();
        let stdout = child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>);
        let stderr = child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>);
        for stream in [stdout, stderr].into_iter().flatten() {
            let lines = lines.clone();
            readers.push(std::thread::spawn(move || {
                let mut r = BufReader::new(stream);
                let mut buf = Vec::new();
                loop {
                    buf.clear();
                    match r.read_until(b'\n', &mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {
                            let l = String::from_utf8_lossy(&buf);
                            lines.push(l.trim_end_matches(['\r', '\n']).to_string());
                        }
                    }
                }
                lines.close_one();
            }));
        }
        Ok(ChildGuard {
            name: name.to_string(),
            child,
            stdin,
            readers,
            lines,
        })
    }

    /// Closes the child's stdin (EOF).
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Waits up to `timeout` for the child to exit by itself, then for its output streams to
    /// close. `Some(exit code)` (`-1` for a signal) if it exited in time.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<i32> {
        let deadline = Instant::now() + timeout;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    self.lines.wait_for(self.readers.len(), left, |_| false);
                    return Some(status.code().unwrap_or(-1));
                }
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                _ => return None,
            }
        }
    }

    /// Waits until a line satisfies `pred`, the child's output ends, or `timeout` passes.
    pub fn wait_for_line(&self, timeout: Duration, pred: impl Fn(&str) -> bool) -> Option<String> {
        self.lines.wait_for(self.readers.len(), timeout, pred)
    }

    /// A description for assertion messages: the name and everything it printed.
    pub fn transcript(&self) -> String {
        format!(
            "--- {} output ---\n{}\n--- end ---",
            self.name,
            self.lines.text()
        )
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        self.stdin = None;
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
        // The pipes close with the child; the readers end on EOF.
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
    }
}

/// What a drive ended with.
#[derive(Debug, Default)]
pub struct DriveResult {
    /// `Event::Connected`, if it came.
    pub connected: Option<Event>,
    /// The failure, if any.
    pub failed: Option<FailReason>,
    /// Whether the endpoint reported `Closed`.
    pub closed: bool,
    /// Whether the deadline passed first.
    pub timed_out: bool,
    /// The peer's address (given, or learnt from the first datagram).
    pub peer: Option<SocketAddr>,
    /// Datagrams sent.
    pub sent: usize,
    /// Datagrams received from the peer and fed in.
    pub received: usize,
    /// Datagrams from other addresses, dropped.
    pub strangers: usize,
    /// Largest datagram sent.
    pub max_sent: usize,
    /// Time from the start of the drive to the end.
    pub elapsed: Duration,
}

impl DriveResult {
    /// The negotiated profile; panics with the outcome if not connected.
    pub fn profile(&self) -> Profile {
        match &self.connected {
            Some(Event::Connected { profile, .. }) => *profile,
            _ => panic!("not connected: {self:?}"),
        }
    }

    /// The SRTP keys; panics with the outcome if not connected.
    pub fn keys(&self) -> &SrtpKeys {
        match &self.connected {
            Some(Event::Connected { keys, .. }) => keys,
            _ => panic!("not connected: {self:?}"),
        }
    }

    /// The peer's certificate (DER); panics with the outcome if not connected.
    pub fn peer_certificate_der(&self) -> &[u8] {
        match &self.connected {
            Some(Event::Connected {
                peer_certificate_der,
                ..
            }) => peer_certificate_der,
            _ => panic!("not connected: {self:?}"),
        }
    }

    fn done(&self) -> bool {
        self.connected.is_some() || self.failed.is_some() || self.closed
    }
}

/// Drives one [`Endpoint`] over a blocking UDP socket.
///
/// A client is given its peer's address up front; a server learns it from the first datagram
/// and answers that address only (datagrams from any other address are counted and dropped).
/// Real time (`Instant::now()`) is fed in; `handle_timeout` is called when the endpoint's
/// deadline passes.
pub struct UdpDriver {
    /// The socket (bound; not connected, so a server can learn its peer).
    pub socket: UdpSocket,
    /// The endpoint.
    pub endpoint: Endpoint,
    /// Where datagrams go.
    pub peer: Option<SocketAddr>,
    timer: Option<Instant>,
    finished: bool,
    result: DriveResult,
}

impl UdpDriver {
    /// A driver for `endpoint` on `socket`. Drains the endpoint's first outputs at once
    /// (a client's ClientHello goes out here when `peer` is known).
    pub fn new(socket: UdpSocket, endpoint: Endpoint, peer: Option<SocketAddr>) -> UdpDriver {
        let mut d = UdpDriver {
            socket,
            endpoint,
            peer,
            timer: None,
            finished: false,
            result: DriveResult {
                peer,
                ..DriveResult::default()
            },
        };
        d.drain();
        d
    }

    /// Drains the endpoint per the drive contract: sends datagrams, records events, keeps the
    /// next deadline.
    fn drain(&mut self) {
        // Bounded: an endpoint never queues more than a few thousand outputs per input.
        for _ in 0..100_000 {
            let Some(out) = self.endpoint.poll_output() else {
                self.timer = None;
                self.finished = true;
                return;
            };
            match out {
                Output::Transmit(d) => {
                    if let Some(peer) = self.peer {
                        self.result.max_sent = self.result.max_sent.max(d.len());
                        match self.socket.send_to(&d, peer) {
                            Ok(_) => self.result.sent += 1,
                            // Treat a refused or failed send as loss; the endpoint retransmits.
                            Err(e) => eprintln!("send_to {peer}: {e}"),
                        }
                    }
                }
                Output::Timeout(at) => {
                    self.timer = Some(at);
                    return;
                }
                Output::Event(e @ Event::Connected { .. }) => {
                    assert!(self.result.connected.is_none(), "two Connected events");
                    self.result.connected = Some(e);
                }
                Output::Event(Event::Failed(r)) => {
                    assert!(self.result.failed.is_none(), "two Failed events");
                    self.result.failed = Some(r);
                }
                Output::Event(Event::Closed) => self.result.closed = true,
                Output::Event(e) => panic!("unexpected event {e:?}"),
            }
        }
        panic!("endpoint produced outputs without end");
    }

    /// Runs until the endpoint connects, fails or closes, or `timeout` passes.
    pub fn run_until_done(&mut self, timeout: Duration) -> &DriveResult {
        self.run_while(timeout, |r| !r.done())
    }

    /// Keeps servicing the socket and timers for `duration` (e.g. to answer a peer's
    /// retransmissions after connecting), or until the endpoint finishes.
    pub fn run_for(&mut self, duration: Duration) -> &DriveResult {
        self.run_while(duration, |_| true)
    }

    fn run_while(
        &mut self,
        timeout: Duration,
        go_on: impl Fn(&DriveResult) -> bool,
    ) -> &DriveResult {
        let start = Instant::now();
        let deadline = start + timeout;
        let mut buf = vec![0u8; MAX_DATAGRAM];
        while go_on(&self.result) && !self.finished {
            let now = Instant::now();
            if now >= deadline {
                self.result.timed_out = true;
                break;
            }
            if let Some(t) = self.timer {
                if t <= now {
                    self.endpoint.handle_timeout(now);
                    self.drain();
                    continue;
                }
            }
            let wake = self.timer.unwrap_or(deadline).min(deadline);
            let wait = wake
                .saturating_duration_since(now)
                .clamp(Duration::from_millis(1), MAX_RECV_WAIT);
            self.socket
                .set_read_timeout(Some(wait))
                .expect("set_read_timeout");
            match self.socket.recv_from(&mut buf) {
                Ok((n, from)) => {
                    match self.peer {
                        None => {
                            self.peer = Some(from);
                            self.result.peer = Some(from);
                        }
                        Some(p) if p != from => {
                            self.result.strangers += 1;
                            continue;
                        }
                        Some(_) => {}
                    }
                    self.result.received += 1;
                    self.endpoint.handle_datagram(Instant::now(), &buf[..n]);
                    self.drain();
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                    ) => {}
                // ICMP port unreachable surfaces on some systems; the endpoint retransmits.
                Err(e) if e.kind() == ErrorKind::ConnectionRefused => {
                    std::thread::sleep(Duration::from_millis(5))
                }
                Err(e) => panic!("recv_from: {e}"),
            }
        }
        self.result.elapsed += start.elapsed();
        &self.result
    }

    /// Closes the association (close_notify when connected) and sends what that produces.
    pub fn close(&mut self) {
        self.endpoint.close(Instant::now());
        self.drain();
    }

    /// The outcome so far.
    pub fn result(&self) -> &DriveResult {
        &self.result
    }

    /// The outcome, taking the driver apart.
    pub fn into_result(self) -> (DriveResult, Endpoint) {
        (self.result, self.endpoint)
    }
}

/// Bytes from hex (test data: panics on malformed input).
pub fn decode_hex(s: &str) -> Vec<u8> {
    assert!(s.len().is_multiple_of(2), "odd hex length {}", s.len());
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

/// Checks our SRTP keys against the EXTRACTOR-dtls_srtp block a peer printed (hex): the same
/// block, and our local/remote keys equal to the peer's block split by hand (client key, server
/// key, client salt, server salt: RFC 5764 §4.2) for our `role`.
pub fn assert_keys_match_peer_block(
    keys: &SrtpKeys,
    expected: Profile,
    role: secrelay_dtls::Role,
    peer_hex: &str,
    transcript: &str,
) {
    assert_eq!(keys.profile, expected);
    let ours_hex = keys.exported().to_hex();
    assert_eq!(
        ours_hex.len(),
        2 * secrelay_dtls::keying::keying_material_len(expected)
    );
    assert!(
        ours_hex.eq_ignore_ascii_case(peer_hex),
        "keying material differs ({} vs {} hex digits)\n{transcript}",
        ours_hex.len(),
        peer_hex.len()
    );
    let block = decode_hex(peer_hex);
    let (k, s) = (expected.key_len(), expected.salt_len());
    let (client_key, server_key) = (&block[..k], &block[k..2 * k]);
    let (client_salt, server_salt) = (&block[2 * k..2 * k + s], &block[2 * k + s..]);
    let (local, remote) = match role {
        secrelay_dtls::Role::Client => ((client_key, client_salt), (server_key, server_salt)),
        secrelay_dtls::Role::Server => ((server_key, server_salt), (client_key, client_salt)),
    };
    assert_eq!((keys.local.key(), keys.local.salt()), local);
    assert_eq!((keys.remote.key(), keys.remote.salt()), remote);
}

/// A fresh ECDSA P-256 self-signed certificate with its PEM files in a directory, for a peer
/// process to load.
pub struct Identity {
    /// The certificate and key.
    pub cert: secrelay_dtls::Certificate,
    /// The certificate as PEM.
    pub cert_pem: String,
    /// Where the certificate PEM was written.
    pub cert_path: PathBuf,
    /// Where the private key PEM was written.
    pub key_path: PathBuf,
}

/// Makes an [`Identity`] named `name`, writing `name.crt.pem` and `name.key.pem` into `dir`.
pub fn identity(dir: &Path, name: &str) -> Identity {
    identity_of(dir, name, secrelay_dtls::KeyType::EcdsaP256)
}

/// Like [`identity`], with a key of the given type (RSA for the OpenSSL engine).
pub fn identity_of(dir: &Path, name: &str, key: secrelay_dtls::KeyType) -> Identity {
    let cert = secrelay_dtls::Certificate::self_signed(key, name).expect("self-signed cert");
    let (cert_pem, key_pem) = cert.to_pem();
    let cert_path = dir.join(format!("{name}.crt.pem"));
    let key_path = dir.join(format!("{name}.key.pem"));
    std::fs::write(&cert_path, &cert_pem).expect("write cert");
    std::fs::write(&key_path, key_pem.as_bytes()).expect("write key");
    Identity {
        cert,
        cert_pem,
        cert_path,
        key_path,
    }
}
