//! Interop with pion/dtls (Go) over real UDP sockets on 127.0.0.1: DTLS 1.2 handshakes with
//! DTLS-SRTP in both roles against the small peer program in `peers/pion-dtls`, the exported
//! `EXTRACTOR-dtls_srtp` block compared byte for byte with what pion exports, the negotiated
//! profile, the certificate each side saw, and fingerprint mismatches.
//!
//! The peer is built once per test process with `go build` into `CARGO_TARGET_TMPDIR`
//! (`SECRELAY_PION_DTLS=/path/to/pion-dtls` uses a prebuilt binary instead), with the Go that
//! `scripts/setup` provides (`$SECRELAY_GO`, `.tools/go/bin/go`, or `go` on `PATH`). When there
//! is no Go, the Go modules cannot be downloaded, or the Go is too old, each test fails under
//! CI (`CI` set) and says `SKIPPED <test>: <reason>` elsewhere. Every child is killed when its
//! guard drops; every wait is bounded.

mod interop_support;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use interop_support::{
    assert_keys_match_peer_block, bind_loopback, find_go, identity, identity_of, missing,
    test_name, ChildGuard, DriveResult, Identity, UdpDriver, PEER_WAIT,
};
use secrelay_dtls::{
    Certificate, Endpoint, EndpointConfig, EngineChoice, FailReason, KeyType, LocalCertificate,
    PeerAuth, Role,
};
use secrelay_srtp::Profile;

/// Bound on `go build` (a cold module and build cache takes well under a minute on 2 cores).
const BUILD_TIMEOUT: Duration = Duration::from_secs(300);

/// What became of the attempt to get a `pion-dtls` binary.
#[derive(Debug)]
enum PionBinary {
    Ready(PathBuf),
    /// No Go, no network for the modules, or a Go too old: skip.
    Unavailable(String),
    /// The build failed for another reason: a real failure.
    BuildFailed(String),
}

static PION: OnceLock<PionBinary> = OnceLock::new();

/// The repository root (the workspace above `crates/dtls`).
fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Output of a failed `go build` that means "could not fetch modules or toolchain" rather
/// than "the program does not compile".
fn is_unavailable(output: &str) -> bool {
    const MARKERS: &[&str] = &[
        "module lookup disabled",
        "dial tcp",
        "no such host",
        "i/o timeout",
        "TLS handshake timeout",
        "connection refused",
        "network is unreachable",
        "proxyconnect",
        "Get \"http",
        "requires go >=",
        "toolchain not available",
        "downloading go1.",
    ];
    MARKERS.iter().any(|m| output.contains(m))
}

fn build_pion() -> PionBinary {
    if let Some(p) = std::env::var_os("SECRELAY_PION_DTLS") {
        let p = PathBuf::from(p);
        return if p.is_file() {
            PionBinary::Ready(p)
        } else {
            PionBinary::BuildFailed(format!("SECRELAY_PION_DTLS={} is not a file", p.display()))
        };
    }
    let go = match find_go() {
        Ok(go) => go,
        Err(why) => return PionBinary::Unavailable(why),
    };
    let source = repo_root().join("peers/pion-dtls");
    let out_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("pion-dtls");
    std::fs::create_dir_all(&out_dir).expect("create build dir");
    let binary = out_dir.join("pion-dtls");
    // Built under a name of its own, then renamed into place: test processes running side by
    // side (nextest) never see a half-written binary nor overwrite one that is running.
    let partial = out_dir.join(format!("pion-dtls.{}.partial", std::process::id()));
    let mut cmd = Command::new(go);
    // The module lives in peers/pion-dtls (its own go.mod), so build from there.
    cmd.current_dir(&source)
        .args(["build", "-buildvcs=false", "-o"])
        .arg(&partial)
        .arg(".");
    let start = Instant::now();
    let mut child = match ChildGuard::spawn("go build", cmd) {
        Ok(c) => c,
        Err(e) => return PionBinary::Unavailable(format!("cannot run go: {e}")),
    };
    // The guard keeps stdin open; go build does not read it.
    child.close_stdin();
    let code = child.wait_exit(BUILD_TIMEOUT);
    let output = child.lines.text();
    eprintln!(
        "go build ./peers/pion-dtls: exit {code:?} in {:?}",
        start.elapsed()
    );
    match code {
        Some(0) if partial.is_file() => match std::fs::rename(&partial, &binary) {
            Ok(()) => PionBinary::Ready(binary),
            Err(e) => PionBinary::BuildFailed(format!("rename to {}: {e}", binary.display())),
        },
        Some(_) if is_unavailable(&output) => {
            PionBinary::Unavailable(format!("go build could not fetch what it needs:\n{output}"))
        }
        Some(c) => PionBinary::BuildFailed(format!("go build exited with {c}:\n{output}")),
        None if output.contains("go: downloading") => PionBinary::Unavailable(format!(
            "go build did not finish within {BUILD_TIMEOUT:?} while downloading modules:\n{output}"
        )),
        None => PionBinary::BuildFailed(format!(
            "go build did not finish within {BUILD_TIMEOUT:?}:\n{output}"
        )),
    }
}

/// The pion peer binary, built on first use; `None` when it cannot be had on this machine
/// (after [`missing`] failed the test under CI, or said SKIPPED).
fn pion() -> Option<PathBuf> {
    match PION.get_or_init(build_pion) {
        PionBinary::Ready(p) => Some(p.clone()),
        PionBinary::Unavailable(why) => {
            missing(&test_name(), &format!("pion-dtls cannot be built: {why}"));
            None
        }
        PionBinary::BuildFailed(why) => panic!("{why}"),
    }
}

macro_rules! require_pion {
    () => {
        match pion() {
            Some(p) => p,
            None => return,
        }
    };
}

/// The OpenSSL-style name pion-dtls uses for a profile (`SRTP_AES128_CM_SHA1_80`, ...).
fn srtp_name(p: Profile) -> &'static str {
    p.dtls_profile().expect("a DTLS-SRTP profile").0
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The string value of `"key":"…"` in a JSON line as Go's encoding/json writes it (no blanks;
/// escapes are kept as the escaped character, enough for our hex and error strings).
fn json_str(line: &str, key: &str) -> Option<String> {
    let start = line.find(&format!("\"{key}\":\""))? + key.len() + 4;
    let mut out = String::new();
    let mut chars = line[start..].chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => return Some(out),
            '\\' => out.push(chars.next()?),
            c => out.push(c),
        }
    }
    None
}

/// One result line of pion-dtls.
#[derive(Debug)]
struct PionView {
    srtp_profile: String,
    keying_hex: String,
    peer_cert_sha256: String,
}

fn parse_pion_line(line: &str) -> Result<PionView, String> {
    if let Some(e) = json_str(line, "error") {
        return Err(e);
    }
    let field = |k: &str| json_str(line, k).ok_or_else(|| format!("no {k} in {line:?}"));
    Ok(PionView {
        srtp_profile: field("srtp_profile")?,
        keying_hex: field("keying_material")?,
        peer_cert_sha256: field("peer_certificate_sha256")?,
    })
}

/// pion-dtls's JSON lines so far (result or error).
fn json_lines(child: &ChildGuard) -> Vec<String> {
    child
        .lines
        .snapshot()
        .into_iter()
        .filter(|l| l.starts_with('{'))
        .collect()
}

/// JSON line `i` (from 0) printed so far; panics with the transcript if there is none.
fn nth_json(child: &ChildGuard, i: usize) -> String {
    json_lines(child).into_iter().nth(i).unwrap_or_else(|| {
        panic!(
            "pion-dtls printed no result line {i}\n{}",
            child.transcript()
        )
    })
}

/// The `n`th (from 1) JSON line, waiting for it (bounded) while `driver` keeps answering
/// retransmissions.
fn wait_json(child: &ChildGuard, n: usize, driver: &mut UdpDriver) -> String {
    let deadline = Instant::now() + PEER_WAIT;
    loop {
        if let Some(l) = json_lines(child).into_iter().nth(n - 1) {
            return l;
        }
        if Instant::now() >= deadline {
            panic!(
                "pion-dtls printed no result line {n}\n{}",
                child.transcript()
            );
        }
        driver.run_for(Duration::from_millis(20));
    }
}

fn pion_command(pion: &Path, role: &str, me: &Identity, srtp: &str) -> Command {
    let mut cmd = Command::new(pion);
    cmd.arg(role)
        .arg("--cert")
        .arg(&me.cert_path)
        .arg("--key")
        .arg(&me.key_path)
        .args(["--srtp", srtp]);
    cmd
}

/// `pion-dtls server` on an ephemeral loopback port (it prints `listening ADDR` once bound).
fn pion_server(
    pion: &Path,
    me: &Identity,
    srtp: &str,
    handshakes: usize,
) -> (ChildGuard, SocketAddr) {
    let mut cmd = pion_command(pion, "server", me, srtp);
    cmd.args(["--listen", "127.0.0.1:0"])
        .args(["--handshakes", &handshakes.to_string()]);
    eprintln!("running: {cmd:?}");
    let child = ChildGuard::spawn("pion-dtls server", cmd).expect("spawn pion-dtls server");
    let line = child
        .wait_for_line(PEER_WAIT, |l| l.starts_with("listening "))
        .unwrap_or_else(|| panic!("pion-dtls server did not start\n{}", child.transcript()));
    let addr = line["listening ".len()..]
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("bad address in {line:?}: {e}"));
    (child, addr)
}

fn pion_client(pion: &Path, me: &Identity, srtp: &str, server: SocketAddr) -> ChildGuard {
    let mut cmd = pion_command(pion, "client", me, srtp);
    cmd.args(["--connect", &server.to_string()]);
    eprintln!("running: {cmd:?}");
    ChildGuard::spawn("pion-dtls client", cmd).expect("spawn pion-dtls client")
}

fn outcome(result: &DriveResult) -> String {
    result
        .connected
        .as_ref()
        .map(|_| "connected".to_string())
        .unwrap_or_else(|| format!("{:?}", result.failed))
}

/// Our endpoint in `role` with `me`'s certificate, expecting `peer_auth`.
/// [`endpoint`] with a last say on the config (the engine, the SRTP profiles).
fn endpoint_with(
    role: Role,
    me: &Identity,
    peer_auth: PeerAuth,
    tweak: &dyn Fn(&mut EndpointConfig),
) -> Endpoint {
    let mut config = EndpointConfig::new(role, LocalCertificate::from(&me.cert), peer_auth);
    if role == Role::Server {
        assert!(config.server_cookies);
    }
    tweak(&mut config);
    Endpoint::new(config, Instant::now()).expect("endpoint config")
}

/// Drives our client against a pion server at `addr` until it connects or fails; once
/// connected, waits for pion's result line number `nth`, then sends close_notify.
fn our_client_run(
    child: &ChildGuard,
    addr: SocketAddr,
    me: &Identity,
    peer_auth: PeerAuth,
    nth: usize,
) -> DriveResult {
    our_client_run_with(child, addr, me, peer_auth, nth, &|_| {})
}

/// [`our_client_run`] with a last say on our config.
fn our_client_run_with(
    child: &ChildGuard,
    addr: SocketAddr,
    me: &Identity,
    peer_auth: PeerAuth,
    nth: usize,
    tweak: &dyn Fn(&mut EndpointConfig),
) -> DriveResult {
    let start = Instant::now();
    let mut driver = UdpDriver::new(
        bind_loopback(),
        endpoint_with(Role::Client, me, peer_auth, tweak),
        Some(addr),
    );
    driver.run_until_done(PEER_WAIT);
    let handshake = start.elapsed();
    if driver.result().connected.is_some() {
        wait_json(child, nth, &mut driver);
        driver.close();
    }
    let (result, _ep) = driver.into_result();
    eprintln!(
        "client vs pion server: {} in {handshake:?} ({} datagrams out, {} in, largest {} B)",
        outcome(&result),
        result.sent,
        result.received,
        result.max_sent,
    );
    result
}

/// Checks our outcome against pion's line: same profile, same keying block, keys split the
/// RFC 5764 way for `role`, and each side saw the other's certificate.
fn assert_agree(
    role: Role,
    ours: &DriveResult,
    line: &str,
    expected: Profile,
    me: &Identity,
    peer: &Identity,
    transcript: &str,
) {
    let theirs =
        parse_pion_line(line).unwrap_or_else(|e| panic!("pion-dtls failed: {e}\n{transcript}"));
    assert_eq!(ours.profile(), expected, "{transcript}");
    assert_eq!(theirs.srtp_profile, srtp_name(expected), "{transcript}");
    assert_keys_match_peer_block(ours.keys(), expected, role, &theirs.keying_hex, transcript);
    // Certificates: we saw pion's, pion saw ours.
    assert_eq!(
        ours.peer_certificate_der(),
        peer.cert.der(),
        "peer certificate"
    );
    assert_eq!(
        theirs.peer_cert_sha256,
        hex(me.cert.fingerprint().bytes()),
        "pion saw another certificate\n{transcript}"
    );
}

// ---------------------------------------------------------------------------------------------
// Our client, pion server

fn client_matches_pion_server(srtp: &str, expected: Profile) {
    let pion = require_pion!();
    let dir = tempfile::tempdir().expect("tempdir");
    let server = identity(dir.path(), "pion-server");
    let client = identity(dir.path(), "secrelay-client");
    let (mut child, addr) = pion_server(&pion, &server, srtp, 1);
    let result = our_client_run(
        &child,
        addr,
        &client,
        PeerAuth::Fingerprint(server.cert.fingerprint()),
        1,
    );
    assert!(
        result.connected.is_some(),
        "{result:?}\n{}",
        child.transcript()
    );
    let line = nth_json(&child, 0);
    assert_agree(
        Role::Client,
        &result,
        &line,
        expected,
        &client,
        &server,
        &child.transcript(),
    );
    // Our close_notify ends the server's only connection; it exits by itself.
    let code = child.wait_exit(PEER_WAIT);
    assert_eq!(code, Some(0), "pion server exit\n{}", child.transcript());
}

#[test]
fn client_vs_pion_server_aes128_cm_sha1_80() {
    client_matches_pion_server("SRTP_AES128_CM_SHA1_80", Profile::AesCm128HmacSha1_80);
}

#[test]
fn client_vs_pion_server_aead_aes_128_gcm() {
    client_matches_pion_server("SRTP_AEAD_AES_128_GCM", Profile::AeadAes128Gcm);
}

#[test]
fn client_vs_pion_server_aead_aes_256_gcm() {
    client_matches_pion_server("SRTP_AEAD_AES_256_GCM", Profile::AeadAes256Gcm);
}

/// pion's server picks by its own preference order, not the client's.
#[test]
fn client_vs_pion_server_server_preference_wins() {
    client_matches_pion_server(
        "SRTP_AES128_CM_SHA1_80,SRTP_AEAD_AES_128_GCM,SRTP_AEAD_AES_256_GCM",
        Profile::AesCm128HmacSha1_80,
    );
}

/// `--handshakes 2`: one pion server serves two of our clients one after another (the mode
/// the load lab uses), each with its own keys.
#[test]
fn pion_server_serves_clients_in_turn() {
    let pion = require_pion!();
    let dir = tempfile::tempdir().expect("tempdir");
    let server = identity(dir.path(), "pion-server");
    let clients = [
        identity(dir.path(), "secrelay-client-1"),
        identity(dir.path(), "secrelay-client-2"),
    ];
    let expected = Profile::AeadAes128Gcm;
    let (mut child, addr) = pion_server(&pion, &server, srtp_name(expected), 2);
    let mut blocks = Vec::new();
    for (i, client) in clients.iter().enumerate() {
        let result = our_client_run(
            &child,
            addr,
            client,
            PeerAuth::Fingerprint(server.cert.fingerprint()),
            i + 1,
        );
        assert!(
            result.connected.is_some(),
            "{result:?}\n{}",
            child.transcript()
        );
        let line = nth_json(&child, i);
        assert_agree(
            Role::Client,
            &result,
            &line,
            expected,
            client,
            &server,
            &child.transcript(),
        );
        blocks.push(result.keys().exported().to_hex());
    }
    assert_ne!(blocks[0], blocks[1], "two handshakes, one key");
    let code = child.wait_exit(PEER_WAIT);
    assert_eq!(code, Some(0), "pion server exit\n{}", child.transcript());
}

#[test]
fn client_with_wrong_fingerprint_fails_against_pion_server() {
    let pion = require_pion!();
    let dir = tempfile::tempdir().expect("tempdir");
    let server = identity(dir.path(), "pion-server");
    let client = identity(dir.path(), "secrelay-client");
    let other = Certificate::self_signed(KeyType::EcdsaP256, "someone-else").unwrap();
    let (mut child, addr) = pion_server(&pion, &server, "SRTP_AES128_CM_SHA1_80", 1);
    let result = our_client_run(
        &child,
        addr,
        &client,
        PeerAuth::Fingerprint(other.fingerprint()),
        1,
    );
    assert_eq!(
        result.failed,
        Some(FailReason::FingerprintMismatch),
        "{result:?}\n{}",
        child.transcript()
    );
    assert!(result.connected.is_none());
    assert!(!result.timed_out, "{result:?}");
    // What pion made of it (it may have finished its side before our check): for the record.
    let code = child.wait_exit(Duration::from_secs(1));
    eprintln!("pion server exit {code:?}\n{}", child.transcript());
}

// ---------------------------------------------------------------------------------------------
// pion client, our server

/// Our server (cookies on) against a pion client offering `srtp`: after connecting, keeps
/// serving (retransmissions) until pion has printed its result line, then closes.
fn pion_client_vs_our_server(
    pion: &Path,
    srtp: &str,
    peer_auth: impl FnOnce(&Identity) -> PeerAuth,
) -> (
    DriveResult,
    ChildGuard,
    Identity,
    Identity,
    tempfile::TempDir,
) {
    pion_client_vs_our_server_with(
        pion,
        srtp,
        peer_auth,
        (KeyType::EcdsaP256, KeyType::EcdsaP256),
        &|_| {},
    )
}

/// [`pion_client_vs_our_server`] with the (pion, our) key types and a last say on our config.
fn pion_client_vs_our_server_with(
    pion: &Path,
    srtp: &str,
    peer_auth: impl FnOnce(&Identity) -> PeerAuth,
    (pion_key, our_key): (KeyType, KeyType),
    tweak: &dyn Fn(&mut EndpointConfig),
) -> (
    DriveResult,
    ChildGuard,
    Identity,
    Identity,
    tempfile::TempDir,
) {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = identity_of(dir.path(), "secrelay-server", our_key);
    let client = identity_of(dir.path(), "pion-client", pion_key);
    let socket = bind_loopback();
    let addr = socket.local_addr().unwrap();
    let start = Instant::now();
    let mut driver = UdpDriver::new(
        socket,
        endpoint_with(Role::Server, &server, peer_auth(&client), tweak),
        None,
    );
    let child = pion_client(pion, &client, srtp, addr);
    driver.run_until_done(PEER_WAIT);
    let handshake = start.elapsed();
    if driver.result().connected.is_some() {
        wait_json(&child, 1, &mut driver);
        driver.close();
    }
    let (result, _ep) = driver.into_result();
    eprintln!(
        "pion client [{srtp}] vs server: {} in {handshake:?} (process start included; {} datagrams out, {} in, largest {} B, from {:?})",
        outcome(&result),
        result.sent,
        result.received,
        result.max_sent,
        result.peer,
    );
    (result, child, client, server, dir)
}

fn server_matches_pion_client(srtp: &str, expected: Profile) {
    let pion = require_pion!();
    let (result, mut child, client, server, _dir) =
        pion_client_vs_our_server(&pion, srtp, |c| PeerAuth::Fingerprint(c.cert.fingerprint()));
    assert!(
        result.connected.is_some(),
        "{result:?}\n{}",
        child.transcript()
    );
    let line = nth_json(&child, 0);
    assert_agree(
        Role::Server,
        &result,
        &line,
        expected,
        &server,
        &client,
        &child.transcript(),
    );
    // pion reads our close_notify and exits by itself.
    let code = child.wait_exit(PEER_WAIT);
    assert_eq!(code, Some(0), "pion client exit\n{}", child.transcript());
}

#[test]
fn pion_client_vs_server_aes128_cm_sha1_80() {
    server_matches_pion_client("SRTP_AES128_CM_SHA1_80", Profile::AesCm128HmacSha1_80);
}

#[test]
fn pion_client_vs_server_aead_aes_128_gcm() {
    server_matches_pion_client("SRTP_AEAD_AES_128_GCM", Profile::AeadAes128Gcm);
}

#[test]
fn pion_client_vs_server_aead_aes_256_gcm() {
    server_matches_pion_client("SRTP_AEAD_AES_256_GCM", Profile::AeadAes256Gcm);
}

/// dimpl's server picks AEAD_AES_256_GCM first, whatever order pion offers.
#[test]
fn pion_client_vs_server_dimpl_preference_wins() {
    server_matches_pion_client(
        "SRTP_AES128_CM_SHA1_80,SRTP_AEAD_AES_128_GCM,SRTP_AEAD_AES_256_GCM",
        Profile::AeadAes256Gcm,
    );
}

#[test]
fn server_with_wrong_fingerprint_fails_against_pion_client() {
    let pion = require_pion!();
    let other = Certificate::self_signed(KeyType::EcdsaP256, "someone-else").unwrap();
    let (result, mut child, _, _, _dir) =
        pion_client_vs_our_server(&pion, "SRTP_AES128_CM_SHA1_80", |_| {
            PeerAuth::Fingerprint(other.fingerprint())
        });
    assert_eq!(
        result.failed,
        Some(FailReason::FingerprintMismatch),
        "{result:?}\n{}",
        child.transcript()
    );
    assert!(result.connected.is_none());
    assert!(!result.timed_out, "{result:?}");
    let code = child.wait_exit(Duration::from_secs(1));
    eprintln!("pion client exit {code:?}\n{}", child.transcript());
}

#[test]
fn json_str_reads_go_output() {
    let line = r#"{"srtp_profile":"SRTP_AEAD_AES_128_GCM","keying_material":"00ff","peer_certificate_sha256":"ab"}"#;
    let v = parse_pion_line(line).unwrap();
    assert_eq!(v.srtp_profile, "SRTP_AEAD_AES_128_GCM");
    assert_eq!(v.keying_hex, "00ff");
    assert_eq!(v.peer_cert_sha256, "ab");
    assert_eq!(
        parse_pion_line(r#"{"error":"handshake: \"x\""}"#).unwrap_err(),
        "handshake: \"x\""
    );
}

/// dimpl never offers SRTP_AES128_CM_SHA1_32, so a pion server with only that profile has no
/// common profile and refuses the ClientHello with a fatal alert.
#[test]
fn client_vs_pion_server_cm_sha1_32_only_has_no_common_profile() {
    let pion = require_pion!();
    let dir = tempfile::tempdir().expect("tempdir");
    let server = identity(dir.path(), "pion-server");
    let client = identity(dir.path(), "secrelay-client");
    let (mut child, addr) = pion_server(&pion, &server, "SRTP_AES128_CM_SHA1_32", 1);
    let result = our_client_run(
        &child,
        addr,
        &client,
        PeerAuth::Fingerprint(server.cert.fingerprint()),
        1,
    );
    let code = child.wait_exit(PEER_WAIT);
    eprintln!("pion server exit {code:?}\n{}", child.transcript());
    // We only see pion's fatal alert, and report it as such.
    assert!(
        matches!(
            result.failed,
            Some(FailReason::PeerAlert(_) | FailReason::NoCommonSrtpProfile)
        ),
        "{result:?}\n{}",
        child.transcript()
    );
    assert!(!result.timed_out, "{result:?}");
    assert_eq!(code, Some(1), "pion server exit\n{}", child.transcript());
    let line = nth_json(&child, 0);
    let err = parse_pion_line(&line).expect_err("pion reported success");
    assert!(err.contains("no matching profiles"), "{err}");
}

/// The same the other way: a pion client offering only SRTP_AES128_CM_SHA1_32.
#[test]
fn pion_client_cm_sha1_32_only_has_no_common_profile() {
    let pion = require_pion!();
    let (result, mut child, _, _, _dir) =
        pion_client_vs_our_server(&pion, "SRTP_AES128_CM_SHA1_32", |c| {
            PeerAuth::Fingerprint(c.cert.fingerprint())
        });
    let code = child.wait_exit(PEER_WAIT);
    eprintln!("pion client exit {code:?}\n{}", child.transcript());
    // Our server answers without use_srtp; pion aborts with a fatal alert, which we see.
    assert!(
        matches!(
            result.failed,
            Some(FailReason::PeerAlert(_) | FailReason::NoCommonSrtpProfile)
        ),
        "{result:?}\n{}",
        child.transcript()
    );
    assert!(!result.timed_out, "{result:?}");
    assert_eq!(code, Some(1), "pion client exit\n{}", child.transcript());
    let line = nth_json(&child, 0);
    let err = parse_pion_line(&line).expect_err("pion reported success");
    assert!(err.contains("use_srtp"), "{err}");
}

// ---------------------------------------------------------------------------------------------
// The OpenSSL engine against pion

fn openssl_engine(c: &mut EndpointConfig) {
    c.engine = EngineChoice::Openssl;
}

/// A pion server offering only SRTP_AES128_CM_SHA1_32, which dimpl cannot negotiate: the
/// OpenSSL engine can.
#[test]
fn openssl_engine_client_vs_pion_server_cm_sha1_32() {
    let pion = require_pion!();
    let dir = tempfile::tempdir().expect("tempdir");
    let server = identity(dir.path(), "pion-server");
    let client = identity(dir.path(), "secrelay-client");
    let (mut child, addr) = pion_server(&pion, &server, "SRTP_AES128_CM_SHA1_32", 1);
    let result = our_client_run_with(
        &child,
        addr,
        &client,
        PeerAuth::Fingerprint(server.cert.fingerprint()),
        1,
        &openssl_engine,
    );
    assert!(
        result.connected.is_some(),
        "{result:?}\n{}",
        child.transcript()
    );
    let line = nth_json(&child, 0);
    assert_agree(
        Role::Client,
        &result,
        &line,
        Profile::AesCm128HmacSha1_32,
        &client,
        &server,
        &child.transcript(),
    );
    let code = child.wait_exit(PEER_WAIT);
    assert_eq!(code, Some(0), "pion server exit\n{}", child.transcript());
}

fn pion_client_matches_openssl_engine_server(srtp: &str, expected: Profile, our_key: KeyType) {
    let pion = require_pion!();
    let (result, mut child, client, server, _dir) = pion_client_vs_our_server_with(
        &pion,
        srtp,
        |c| PeerAuth::Fingerprint(c.cert.fingerprint()),
        (KeyType::EcdsaP256, our_key),
        &|c| {
            c.engine = EngineChoice::Openssl;
            c.srtp_profiles = vec![
                Profile::AesCm128HmacSha1_32,
                Profile::AesCm128HmacSha1_80,
                Profile::AeadAes128Gcm,
            ];
        },
    );
    assert!(
        result.connected.is_some(),
        "{result:?}\n{}",
        child.transcript()
    );
    let line = nth_json(&child, 0);
    assert_agree(
        Role::Server,
        &result,
        &line,
        expected,
        &server,
        &client,
        &child.transcript(),
    );
    let code = child.wait_exit(PEER_WAIT);
    assert_eq!(code, Some(0), "pion client exit\n{}", child.transcript());
}

/// The OpenSSL engine's server picks by its own order (CM_SHA1_32 first).
#[test]
fn pion_client_vs_openssl_engine_server_prefers_cm_sha1_32() {
    pion_client_matches_openssl_engine_server(
        "SRTP_AEAD_AES_128_GCM,SRTP_AES128_CM_SHA1_80,SRTP_AES128_CM_SHA1_32",
        Profile::AesCm128HmacSha1_32,
        KeyType::EcdsaP256,
    );
}

/// An RSA server certificate (dimpl has none) against pion.
#[test]
fn pion_client_vs_openssl_engine_server_with_rsa_2048() {
    pion_client_matches_openssl_engine_server(
        "SRTP_AEAD_AES_128_GCM,SRTP_AES128_CM_SHA1_80",
        Profile::AesCm128HmacSha1_80,
        KeyType::Rsa2048,
    );
}

// ---------------------------------------------------------------------------------------------
// pion with an RSA-2048 certificate offering only SRTP_AES128_CM_SHA1_80, against the default
// configuration: dimpl in both roles.

fn on_dimpl(c: &mut EndpointConfig) {
    assert_eq!(c.resolved_engine(), EngineChoice::Dimpl);
}

/// A pion client with an RSA-2048 certificate: our default server (dimpl) asks for RSA client
/// certificates too and verifies pion's RSA CertificateVerify.
#[test]
fn rsa_2048_pion_client_offering_cm_sha1_80_only_vs_default_server() {
    let pion = require_pion!();
    let (result, mut child, client, server, _dir) = pion_client_vs_our_server_with(
        &pion,
        "SRTP_AES128_CM_SHA1_80",
        |c| PeerAuth::Fingerprint(c.cert.fingerprint()),
        (KeyType::Rsa2048, KeyType::EcdsaP256),
        &on_dimpl,
    );
    assert!(
        result.connected.is_some(),
        "{result:?}\n{}",
        child.transcript()
    );
    let line = nth_json(&child, 0);
    assert_agree(
        Role::Server,
        &result,
        &line,
        Profile::AesCm128HmacSha1_80,
        &server,
        &client,
        &child.transcript(),
    );
    let code = child.wait_exit(PEER_WAIT);
    assert_eq!(code, Some(0), "pion client exit\n{}", child.transcript());
}

/// A pion server with an RSA-2048 certificate: our default client (dimpl) takes an ECDHE-RSA
/// suite and verifies pion's RSA-signed ServerKeyExchange.
#[test]
fn default_client_vs_rsa_2048_pion_server_offering_cm_sha1_80_only() {
    let pion = require_pion!();
    let dir = tempfile::tempdir().expect("tempdir");
    let server = identity_of(dir.path(), "pion-server", KeyType::Rsa2048);
    let client = identity(dir.path(), "secrelay-client");
    let (mut child, addr) = pion_server(&pion, &server, "SRTP_AES128_CM_SHA1_80", 1);
    let result = our_client_run_with(
        &child,
        addr,
        &client,
        PeerAuth::Fingerprint(server.cert.fingerprint()),
        1,
        &on_dimpl,
    );
    assert!(
        result.connected.is_some(),
        "{result:?}\n{}",
        child.transcript()
    );
    let line = nth_json(&child, 0);
    assert_agree(
        Role::Client,
        &result,
        &line,
        Profile::AesCm128HmacSha1_80,
        &client,
        &server,
        &child.transcript(),
    );
    let code = child.wait_exit(PEER_WAIT);
    assert_eq!(code, Some(0), "pion server exit\n{}", child.transcript());
}
