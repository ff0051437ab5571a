//! Interop with the `openssl` command line (OpenSSL 3.0's `s_server` and `s_client`) over real
//! UDP sockets on 127.0.0.1: DTLS 1.2 handshakes with DTLS-SRTP in both roles, the exported
//! `EXTRACTOR-dtls_srtp` block compared byte for byte with what openssl prints, the negotiated
//! profile, the certificates each side saw, and fingerprint mismatches.
//!
//! Without `openssl` on `PATH` each test fails under CI (`CI` set) and says `SKIPPED <test>:
//! <reason>` elsewhere. Every child is killed when its guard drops; every wait is bounded by
//! [`PEER_WAIT`].

mod interop_support;

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use interop_support::{
    assert_keys_match_peer_block, bind_loopback, free_udp_port, identity_of, ChildGuard,
    DriveResult, Identity, UdpDriver, LOCALHOST, PEER_WAIT,
};
use secrelay_dtls::keying::{keying_material_len, EXPORTER_LABEL};
use secrelay_dtls::{
    Certificate, DtlsVersion, Endpoint, EndpointConfig, EngineChoice, FailReason, Fingerprint,
    KeyType, LocalCertificate, PeerAuth, Role,
};
use secrelay_srtp::Profile;

/// "connected", or the failure, for the summary lines.
fn outcome(result: &interop_support::DriveResult) -> String {
    result
        .connected
        .as_ref()
        .map(|_| "connected".to_string())
        .unwrap_or_else(|| format!("{:?}", result.failed))
}

/// `openssl` on `PATH`; else the test fails under CI and returns elsewhere (SKIPPED).
macro_rules! require_openssl {
    () => {
        match interop_support::openssl() {
            Some(p) => p,
            None => return,
        }
    };
}

/// OpenSSL's name for a DTLS-SRTP profile (`SRTP_AES128_CM_SHA1_80`, ...).
fn openssl_name(p: Profile) -> &'static str {
    p.dtls_profile().expect("a DTLS-SRTP profile").0
}

/// The first PEM certificate printed after the line `heading` (s_server's "Client
/// certificate", s_client's "Server certificate").
fn printed_certificate(lines: &[String], heading: &str) -> Option<String> {
    let start = lines.iter().position(|l| l.trim() == heading)?;
    let mut pem = String::new();
    let mut inside = false;
    for l in &lines[start + 1..] {
        if l.starts_with("-----BEGIN CERTIFICATE-----") {
            inside = true;
        }
        // stdout and stderr arrive merged line by line: openssl's verify-callback lines
        // (stderr) can land inside the PEM block (stdout). Keep only PEM lines.
        let pem_line = l.starts_with("-----")
            || (!l.is_empty()
                && l.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/' || b == b'='));
        if inside && pem_line {
            pem.push_str(l);
            pem.push('\n');
            if l.starts_with("-----END CERTIFICATE-----") {
                return Some(pem);
            }
        }
    }
    None
}

/// What openssl reported about the association.
#[derive(Debug)]
struct OpensslView {
    keying_hex: String,
    srtp_profile: Option<String>,
    cipher: Option<String>,
    peer_cert_pem: Option<String>,
}

/// Waits (bounded) for openssl's keying material line, then reads the rest of what it printed.
fn openssl_view(child: &ChildGuard, peer_cert_heading: &str) -> OpensslView {
    let line = child
        .wait_for_line(PEER_WAIT, |l| {
            l.trim_start().starts_with("Keying material:")
        })
        .unwrap_or_else(|| panic!("no keying material printed\n{}", child.transcript()));
    let keying_hex = line
        .trim_start()
        .trim_start_matches("Keying material:")
        .trim()
        .to_string();
    let lines = child.lines.snapshot();
    OpensslView {
        keying_hex,
        srtp_profile: child
            .lines
            .value_after("SRTP Extension negotiated, profile="),
        cipher: child
            .lines
            .value_after("CIPHER is")
            .or_else(|| child.lines.value_after("Cipher    :")),
        peer_cert_pem: printed_certificate(&lines, peer_cert_heading),
    }
}

/// Checks our endpoint's outcome against openssl's view: same profile, same keying block
/// (case-insensitive hex), keys split from it the RFC 5764 way for `role`, and each side saw
/// the other's certificate.
fn assert_agree(
    role: Role,
    ours: &DriveResult,
    theirs: &OpensslView,
    expected: Profile,
    our_identity: &Identity,
    peer_identity: &Identity,
    transcript: &str,
) {
    assert_eq!(ours.profile(), expected, "{transcript}");
    assert_eq!(
        theirs.srtp_profile.as_deref(),
        Some(openssl_name(expected)),
        "{transcript}"
    );
    assert_keys_match_peer_block(ours.keys(), expected, role, &theirs.keying_hex, transcript);
    // Certificates: we saw openssl's, openssl printed ours.
    assert_eq!(
        ours.peer_certificate_der(),
        peer_identity.cert.der(),
        "peer certificate"
    );
    assert_eq!(
        theirs.peer_cert_pem.as_deref(),
        Some(our_identity.cert_pem.as_str()),
        "openssl did not print our certificate\n{transcript}"
    );
}

/// Prints the child's transcript when `INTEROP_TRACE` is set.
fn trace(child: &ChildGuard) {
    trace_after(child, Duration::ZERO);
}

/// Prints the child's transcript when `INTEROP_TRACE` is set, after letting it run for up to
/// `wait` (less if its output ends).
fn trace_after(child: &ChildGuard, wait: Duration) {
    if std::env::var_os("INTEROP_TRACE").is_some() {
        let _ = child.wait_for_line(wait, |_| false);
        eprintln!("{}", child.transcript());
    }
}

// ---------------------------------------------------------------------------------------------
// openssl s_server

/// `openssl s_server` for one DTLS 1.2 connection, asking for a client certificate, offering
/// `srtp` (colon-separated OpenSSL names) and printing the `EXTRACTOR-dtls_srtp` block of
/// `export_len` bytes. Retries on another port if the one picked was taken in the meantime.
fn s_server(
    openssl: &Path,
    server: &Identity,
    srtp: &str,
    export_len: usize,
) -> (ChildGuard, SocketAddr) {
    for _ in 0..3 {
        let port = free_udp_port();
        let accept = format!("{LOCALHOST}:{port}");
        let mut cmd = Command::new(openssl);
        cmd.arg("s_server")
            .arg("-dtls1_2")
            .args(["-accept", &accept])
            .arg("-cert")
            .arg(&server.cert_path)
            .arg("-key")
            .arg(&server.key_path)
            .args(["-use_srtp", srtp])
            .args(["-keymatexport", EXPORTER_LABEL])
            .args(["-keymatexportlen", &export_len.to_string()])
            .args(["-verify", "1"])
            .args(["-naccept", "1"]);
        eprintln!("running: {cmd:?}");
        let child = ChildGuard::spawn("openssl s_server", cmd).expect("spawn openssl s_server");
        // s_server prints ACCEPT once its socket is bound (flushed at once).
        match child.wait_for_line(PEER_WAIT, |l| l.trim() == "ACCEPT") {
            Some(_) => return (child, accept.parse().unwrap()),
            None => eprintln!("s_server did not start on {accept}\n{}", child.transcript()),
        }
    }
    panic!("openssl s_server did not start");
}

/// Our client against `openssl s_server -use_srtp <srtp>`: returns our outcome, openssl's view
/// and the timings.
fn our_client_vs_s_server(
    openssl: &Path,
    srtp: &str,
    export_len: usize,
    version: DtlsVersion,
    peer_auth: impl FnOnce(&Identity) -> PeerAuth,
) -> (DriveResult, ChildGuard, Identity, Identity) {
    our_client_vs_s_server_with(
        openssl,
        srtp,
        export_len,
        version,
        peer_auth,
        (KeyType::EcdsaP256, KeyType::EcdsaP256),
        |_| {},
    )
}

/// [`our_client_vs_s_server`] with the (client, server) key types and a last say on our config
/// (the engine, suites, profiles).
fn our_client_vs_s_server_with(
    openssl: &Path,
    srtp: &str,
    export_len: usize,
    version: DtlsVersion,
    peer_auth: impl FnOnce(&Identity) -> PeerAuth,
    keys: (KeyType, KeyType),
    tweak: impl FnOnce(&mut EndpointConfig),
) -> (DriveResult, ChildGuard, Identity, Identity) {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = identity_of(dir.path(), "openssl-s-server", keys.1);
    let client = identity_of(dir.path(), "secrelay-client", keys.0);
    let (child, addr) = s_server(openssl, &server, srtp, export_len);

    let mut config = EndpointConfig::new(
        Role::Client,
        LocalCertificate::from(&client.cert),
        peer_auth(&server),
    );
    config.version = version;
    tweak(&mut config);
    let start = Instant::now();
    let ep = Endpoint::new(config, start).expect("client config");
    let mut driver = UdpDriver::new(bind_loopback(), ep, Some(addr));
    driver.run_until_done(PEER_WAIT);
    let handshake = start.elapsed();
    if driver.result().connected.is_some() {
        // close_notify: s_server ends the connection and, with -naccept 1, exits.
        driver.close();
    }
    let (result, _ep) = driver.into_result();
    eprintln!(
        "client vs s_server [{srtp}]: {:?} in {handshake:?} ({} datagrams out, {} in, largest {} B)",
        outcome(&result),
        result.sent,
        result.received,
        result.max_sent,
    );
    (result, child, client, server)
}

fn client_handshake_matches_s_server(srtp: &str, expected: Profile, version: DtlsVersion) {
    client_handshake_matches_s_server_with(
        srtp,
        expected,
        version,
        (KeyType::EcdsaP256, KeyType::EcdsaP256),
        |_| {},
    );
}

/// Returns what openssl reported (`None` when the test is skipped: no openssl).
fn client_handshake_matches_s_server_with(
    srtp: &str,
    expected: Profile,
    version: DtlsVersion,
    keys: (KeyType, KeyType),
    tweak: impl FnOnce(&mut EndpointConfig),
) -> Option<OpensslView> {
    let openssl = interop_support::openssl()?;
    let len = keying_material_len(expected);
    let (result, mut child, client, server) = our_client_vs_s_server_with(
        &openssl,
        srtp,
        len,
        version,
        |s| PeerAuth::Fingerprint(s.cert.fingerprint()),
        keys,
        tweak,
    );
    assert!(
        result.connected.is_some(),
        "{result:?}\n{}",
        child.transcript()
    );
    let view = openssl_view(&child, "Client certificate");
    assert_agree(
        Role::Client,
        &result,
        &view,
        expected,
        &client,
        &server,
        &child.transcript(),
    );
    eprintln!("  openssl cipher: {:?}", view.cipher);
    // Our close_notify ends s_server's only connection; it exits by itself.
    let code = child.wait_exit(PEER_WAIT);
    assert_eq!(code, Some(0), "s_server exit\n{}", child.transcript());
    Some(view)
}

#[test]
fn client_vs_s_server_aes128_cm_sha1_80() {
    client_handshake_matches_s_server(
        "SRTP_AES128_CM_SHA1_80",
        Profile::AesCm128HmacSha1_80,
        DtlsVersion::Dtls12,
    );
}

#[test]
fn client_vs_s_server_aead_aes_128_gcm() {
    client_handshake_matches_s_server(
        "SRTP_AEAD_AES_128_GCM",
        Profile::AeadAes128Gcm,
        DtlsVersion::Dtls12,
    );
}

#[test]
fn client_vs_s_server_aead_aes_256_gcm() {
    client_handshake_matches_s_server(
        "SRTP_AEAD_AES_256_GCM",
        Profile::AeadAes256Gcm,
        DtlsVersion::Dtls12,
    );
}

/// OpenSSL's server picks by its own preference order, not the client's (dimpl offers
/// AEAD_AES_256_GCM first).
#[test]
fn client_vs_s_server_server_preference_wins() {
    client_handshake_matches_s_server(
        "SRTP_AES128_CM_SHA1_80:SRTP_AEAD_AES_128_GCM:SRTP_AEAD_AES_256_GCM",
        Profile::AesCm128HmacSha1_80,
        DtlsVersion::Dtls12,
    );
}

/// dimpl never offers SRTP_AES128_CM_SHA1_32, so an s_server with only that profile completes
/// the handshake without use_srtp and our client refuses the association.
#[test]
fn client_vs_s_server_cm_sha1_32_only_has_no_common_profile() {
    let openssl = require_openssl!();
    let (result, mut child, _, _) = our_client_vs_s_server(
        &openssl,
        "SRTP_AES128_CM_SHA1_32",
        60,
        DtlsVersion::Dtls12,
        |s| PeerAuth::Fingerprint(s.cert.fingerprint()),
    );
    assert_eq!(
        result.failed,
        Some(FailReason::NoCommonSrtpProfile),
        "{result:?}\n{}",
        child.transcript()
    );
    assert!(result.connected.is_none());
    // s_server finished its side of the handshake without use_srtp, then got our close_notify.
    let code = child.wait_exit(PEER_WAIT);
    trace(&child);
    assert_eq!(code, Some(0), "s_server exit\n{}", child.transcript());
    assert_eq!(
        child
            .lines
            .value_after("SRTP Extension negotiated, profile="),
        None
    );
}

/// A client in `Auto` mode (DTLS 1.2 or 1.3) follows OpenSSL 3.0, which speaks 1.2 only.
#[test]
fn auto_client_vs_s_server_falls_back_to_dtls12() {
    client_handshake_matches_s_server(
        "SRTP_AES128_CM_SHA1_80",
        Profile::AesCm128HmacSha1_80,
        DtlsVersion::Auto,
    );
}

#[test]
fn client_with_wrong_fingerprint_fails_against_s_server() {
    let openssl = require_openssl!();
    let other = Certificate::self_signed(KeyType::EcdsaP256, "someone-else").unwrap();
    let expected = Profile::AesCm128HmacSha1_80;
    let (result, child, _, _) = our_client_vs_s_server(
        &openssl,
        openssl_name(expected),
        keying_material_len(expected),
        DtlsVersion::Dtls12,
        |_| PeerAuth::Fingerprint(other.fingerprint()),
    );
    assert_eq!(
        result.failed,
        Some(FailReason::FingerprintMismatch),
        "{result:?}\n{}",
        child.transcript()
    );
    assert!(result.connected.is_none());
    assert!(!result.timed_out, "{result:?}");
    // With INTEROP_TRACE: give openssl a moment, then show what it made of our failure.
    trace_after(&child, Duration::from_millis(500));
}

// ---------------------------------------------------------------------------------------------
// openssl s_client

/// `openssl s_client` connecting to `addr` over DTLS 1.2 with its certificate, offering `srtp`
/// and printing the `EXTRACTOR-dtls_srtp` block of `export_len` bytes. Its stdin stays an open
/// pipe so it does not quit before the handshake.
fn s_client(
    openssl: &Path,
    client: &Identity,
    addr: SocketAddr,
    srtp: &str,
    export_len: usize,
) -> ChildGuard {
    let mut cmd = Command::new(openssl);
    cmd.arg("s_client")
        .arg("-dtls1_2")
        .args(["-connect", &addr.to_string()])
        .arg("-cert")
        .arg(&client.cert_path)
        .arg("-key")
        .arg(&client.key_path)
        .args(["-use_srtp", srtp])
        .args(["-keymatexport", EXPORTER_LABEL])
        .args(["-keymatexportlen", &export_len.to_string()]);
    eprintln!("running: {cmd:?}");
    ChildGuard::spawn("openssl s_client", cmd).expect("spawn openssl s_client")
}

/// Our server (cookies on) against `openssl s_client -use_srtp <srtp>`. After connecting, keeps
/// serving (retransmissions) until s_client has printed its keying material, then closes.
fn s_client_vs_our_server(
    openssl: &Path,
    srtp: &str,
    export_len: usize,
    version: DtlsVersion,
    peer_auth: impl FnOnce(&Identity) -> PeerAuth,
) -> (DriveResult, ChildGuard, Identity, Identity) {
    s_client_vs_our_server_with(
        openssl,
        srtp,
        export_len,
        version,
        peer_auth,
        (KeyType::EcdsaP256, KeyType::EcdsaP256),
        |_| {},
    )
}

/// [`s_client_vs_our_server`] with the (client, server) key types and a last say on our config.
fn s_client_vs_our_server_with(
    openssl: &Path,
    srtp: &str,
    export_len: usize,
    version: DtlsVersion,
    peer_auth: impl FnOnce(&Identity) -> PeerAuth,
    keys: (KeyType, KeyType),
    tweak: impl FnOnce(&mut EndpointConfig),
) -> (DriveResult, ChildGuard, Identity, Identity) {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = identity_of(dir.path(), "secrelay-server", keys.1);
    let client = identity_of(dir.path(), "openssl-s-client", keys.0);
    let socket = bind_loopback();
    let addr = socket.local_addr().unwrap();

    let mut config = EndpointConfig::new(
        Role::Server,
        LocalCertificate::from(&server.cert),
        peer_auth(&client),
    );
    config.version = version;
    assert!(config.server_cookies);
    tweak(&mut config);
    let start = Instant::now();
    let ep = Endpoint::new(config, start).expect("server config");
    let mut driver = UdpDriver::new(socket, ep, None);
    let child = s_client(openssl, &client, addr, srtp, export_len);
    driver.run_until_done(PEER_WAIT);
    let handshake = start.elapsed();
    if driver.result().connected.is_some() {
        let deadline = Instant::now() + PEER_WAIT;
        while Instant::now() < deadline
            && child
                .wait_for_line(Duration::ZERO, |l| {
                    l.trim_start().starts_with("Keying material:")
                })
                .is_none()
        {
            driver.run_for(Duration::from_millis(20));
        }
        driver.close();
    }
    let (result, _ep) = driver.into_result();
    eprintln!(
        "s_client [{srtp}] vs server: {:?} in {handshake:?} ({} datagrams out, {} in, largest {} B, from {:?})",
        outcome(&result),
        result.sent,
        result.received,
        result.max_sent,
        result.peer,
    );
    (result, child, client, server)
}

fn server_handshake_matches_s_client(srtp: &str, expected: Profile, version: DtlsVersion) {
    server_handshake_matches_s_client_with(
        srtp,
        expected,
        version,
        (KeyType::EcdsaP256, KeyType::EcdsaP256),
        |_| {},
    );
}

/// Returns what openssl reported (`None` when the test is skipped: no openssl).
fn server_handshake_matches_s_client_with(
    srtp: &str,
    expected: Profile,
    version: DtlsVersion,
    keys: (KeyType, KeyType),
    tweak: impl FnOnce(&mut EndpointConfig),
) -> Option<OpensslView> {
    let openssl = interop_support::openssl()?;
    let len = keying_material_len(expected);
    let (result, mut child, client, server) = s_client_vs_our_server_with(
        &openssl,
        srtp,
        len,
        version,
        |c| PeerAuth::Fingerprint(c.cert.fingerprint()),
        keys,
        tweak,
    );
    assert!(
        result.connected.is_some(),
        "{result:?}\n{}",
        child.transcript()
    );
    let view = openssl_view(&child, "Server certificate");
    assert_agree(
        Role::Server,
        &result,
        &view,
        expected,
        &server,
        &client,
        &child.transcript(),
    );
    eprintln!("  openssl cipher: {:?}", view.cipher);
    trace(&child);
    // s_client prints the session: DTLS 1.2 with the extended master secret (RFC 7627).
    assert_eq!(
        child.lines.value_after("Protocol  :").as_deref(),
        Some("DTLSv1.2"),
        "{}",
        child.transcript()
    );
    assert_eq!(
        child
            .lines
            .value_after("Extended master secret:")
            .as_deref(),
        Some("yes"),
        "{}",
        child.transcript()
    );
    // s_client reads our close_notify and exits by itself.
    let code = child.wait_exit(PEER_WAIT);
    eprintln!("  s_client exit code {code:?}");
    assert!(
        code.is_some(),
        "s_client did not exit\n{}",
        child.transcript()
    );
    Some(view)
}

#[test]
fn s_client_vs_server_aes128_cm_sha1_80() {
    server_handshake_matches_s_client(
        "SRTP_AES128_CM_SHA1_80",
        Profile::AesCm128HmacSha1_80,
        DtlsVersion::Dtls12,
    );
}

#[test]
fn s_client_vs_server_aead_aes_128_gcm() {
    server_handshake_matches_s_client(
        "SRTP_AEAD_AES_128_GCM",
        Profile::AeadAes128Gcm,
        DtlsVersion::Dtls12,
    );
}

/// dimpl's server picks AEAD_AES_256_GCM, then AEAD_AES_128_GCM, then SRTP_AES128_CM_SHA1_80,
/// whatever order the client offers them in.
#[test]
fn s_client_vs_server_dimpl_preference_wins() {
    server_handshake_matches_s_client(
        "SRTP_AES128_CM_SHA1_80:SRTP_AEAD_AES_128_GCM:SRTP_AEAD_AES_256_GCM",
        Profile::AeadAes256Gcm,
        DtlsVersion::Dtls12,
    );
}

/// A server in `Auto` mode takes DTLS 1.2 from OpenSSL's ClientHello.
#[test]
fn s_client_vs_auto_server() {
    server_handshake_matches_s_client(
        "SRTP_AES128_CM_SHA1_80",
        Profile::AesCm128HmacSha1_80,
        DtlsVersion::Auto,
    );
}

#[test]
fn server_with_wrong_fingerprint_fails_against_s_client() {
    let openssl = require_openssl!();
    let other = Certificate::self_signed(KeyType::EcdsaP256, "someone-else").unwrap();
    let expected = Profile::AesCm128HmacSha1_80;
    let (result, child, _, _) = s_client_vs_our_server(
        &openssl,
        openssl_name(expected),
        keying_material_len(expected),
        DtlsVersion::Dtls12,
        |_| PeerAuth::Fingerprint(other.fingerprint()),
    );
    assert_eq!(
        result.failed,
        Some(FailReason::FingerprintMismatch),
        "{result:?}\n{}",
        child.transcript()
    );
    assert!(result.connected.is_none());
    assert!(!result.timed_out, "{result:?}");
    // With INTEROP_TRACE: give openssl a moment, then show what it made of our failure.
    trace_after(&child, Duration::from_millis(500));
}

// ---------------------------------------------------------------------------------------------
// The OpenSSL engine against the openssl command line

fn openssl_engine(c: &mut EndpointConfig) {
    c.engine = EngineChoice::Openssl;
}

#[test]
fn s_client_vs_openssl_engine_server_with_rsa_2048() {
    // `Auto` picks the OpenSSL engine for an RSA certificate.
    server_handshake_matches_s_client_with(
        "SRTP_AES128_CM_SHA1_80",
        Profile::AesCm128HmacSha1_80,
        DtlsVersion::Dtls12,
        (KeyType::EcdsaP256, KeyType::Rsa2048),
        |c| assert_eq!(c.resolved_engine(), EngineChoice::Openssl),
    );
}

#[test]
fn s_client_vs_openssl_engine_server_with_rsa_3072_and_rsa_client() {
    server_handshake_matches_s_client_with(
        "SRTP_AEAD_AES_128_GCM",
        Profile::AeadAes128Gcm,
        DtlsVersion::Dtls12,
        (KeyType::Rsa2048, KeyType::Rsa3072),
        |_| {},
    );
}

/// The OpenSSL engine's server takes its own preference order (CM_SHA1_32 first here), which
/// dimpl cannot.
#[test]
fn s_client_vs_openssl_engine_server_prefers_cm_sha1_32() {
    server_handshake_matches_s_client_with(
        "SRTP_AES128_CM_SHA1_80:SRTP_AEAD_AES_128_GCM:SRTP_AES128_CM_SHA1_32",
        Profile::AesCm128HmacSha1_32,
        DtlsVersion::Dtls12,
        (KeyType::EcdsaP256, KeyType::EcdsaP256),
        |c| {
            c.srtp_profiles = vec![
                Profile::AesCm128HmacSha1_32,
                Profile::AeadAes128Gcm,
                Profile::AesCm128HmacSha1_80,
            ];
            assert_eq!(c.resolved_engine(), EngineChoice::Openssl);
        },
    );
}

#[test]
fn openssl_engine_client_vs_s_server_ecdsa() {
    client_handshake_matches_s_server_with(
        "SRTP_AEAD_AES_128_GCM",
        Profile::AeadAes128Gcm,
        DtlsVersion::Dtls12,
        (KeyType::EcdsaP256, KeyType::EcdsaP256),
        openssl_engine,
    );
}

/// An RSA s_server offering SRTP_AES128_CM_SHA1_32 only, which dimpl cannot negotiate: the
/// OpenSSL engine can.
#[test]
fn openssl_engine_client_vs_rsa_s_server_with_cm_sha1_32() {
    client_handshake_matches_s_server_with(
        "SRTP_AES128_CM_SHA1_32",
        Profile::AesCm128HmacSha1_32,
        DtlsVersion::Dtls12,
        (KeyType::EcdsaP256, KeyType::Rsa2048),
        openssl_engine,
    );
}

#[test]
fn openssl_engine_server_with_wrong_fingerprint_fails_against_s_client() {
    let openssl = require_openssl!();
    let other = Certificate::self_signed(KeyType::EcdsaP256, "someone-else").unwrap();
    let expected = Profile::AesCm128HmacSha1_80;
    let (result, child, _, _) = s_client_vs_our_server_with(
        &openssl,
        openssl_name(expected),
        keying_material_len(expected),
        DtlsVersion::Dtls12,
        |_| PeerAuth::Fingerprint(other.fingerprint()),
        (KeyType::EcdsaP256, KeyType::Rsa2048),
        |_| {},
    );
    assert_eq!(
        result.failed,
        Some(FailReason::FingerprintMismatch),
        "{result:?}\n{}",
        child.transcript()
    );
    assert!(result.connected.is_none());
}

// ---------------------------------------------------------------------------------------------
// RSA-2048 peers offering only SRTP_AES128_CM_SHA1_80 (GStreamer's webrtcbin, on OpenSSL, is
// so by default) against the default configuration: dimpl in both roles.

fn on_dimpl(c: &mut EndpointConfig) {
    assert_eq!(c.resolved_engine(), EngineChoice::Dimpl);
}

/// s_client with an RSA-2048 certificate: our default server (dimpl) asks for RSA as well as
/// ECDSA client certificates and verifies the RSA CertificateVerify; the keys and certificates
/// agree with what s_client printed.
#[test]
fn rsa_2048_s_client_offering_cm_sha1_80_only_vs_default_server() {
    let Some(view) = server_handshake_matches_s_client_with(
        "SRTP_AES128_CM_SHA1_80",
        Profile::AesCm128HmacSha1_80,
        DtlsVersion::Dtls12,
        (KeyType::Rsa2048, KeyType::EcdsaP256),
        on_dimpl,
    ) else {
        return;
    };
    // Our certificate is ECDSA: the suite is ECDHE-ECDSA whatever the client's key.
    let cipher = view.cipher.unwrap_or_default();
    assert!(cipher.starts_with("ECDHE-ECDSA-"), "{cipher}");
}

/// s_server with an RSA-2048 certificate: our default client (dimpl) offers the ECDHE-RSA
/// suites, verifies the RSA-signed ServerKeyExchange, and answers the CertificateRequest with
/// its ECDSA certificate.
#[test]
fn default_client_vs_rsa_2048_s_server_offering_cm_sha1_80_only() {
    let Some(view) = client_handshake_matches_s_server_with(
        "SRTP_AES128_CM_SHA1_80",
        Profile::AesCm128HmacSha1_80,
        DtlsVersion::Dtls12,
        (KeyType::EcdsaP256, KeyType::Rsa2048),
        on_dimpl,
    ) else {
        return;
    };
    let cipher = view.cipher.unwrap_or_default();
    assert!(
        cipher == "ECDHE-RSA-AES256-GCM-SHA384" || cipher == "ECDHE-RSA-AES128-GCM-SHA256",
        "{cipher}"
    );
}

/// s_client with an RSA-2048 certificate against a server expecting another fingerprint: our
/// server (dimpl) refuses it with a fatal `bad_certificate` alert, which s_client reports,
/// instead of leaving it to retransmit.
#[test]
fn default_server_refuses_a_wrong_rsa_client_certificate_with_an_alert() {
    let openssl = require_openssl!();
    let other = Certificate::self_signed(KeyType::Rsa2048, "someone-else").unwrap();
    let expected = Profile::AesCm128HmacSha1_80;
    let (result, child, _, _) = s_client_vs_our_server_with(
        &openssl,
        openssl_name(expected),
        keying_material_len(expected),
        DtlsVersion::Dtls12,
        |_| PeerAuth::Fingerprint(other.fingerprint()),
        (KeyType::Rsa2048, KeyType::EcdsaP256),
        on_dimpl,
    );
    assert_eq!(
        result.failed,
        Some(FailReason::FingerprintMismatch),
        "{result:?}\n{}",
        child.transcript()
    );
    let heard = child.wait_for_line(PEER_WAIT, |l| l.contains("alert bad certificate"));
    assert!(
        heard.is_some(),
        "s_client did not report our alert\n{}",
        child.transcript()
    );
}

#[test]
fn fingerprints_differ_between_fresh_certificates() {
    // Guards the wrong-fingerprint tests: a fresh certificate never hashes like another.
    let a = Certificate::self_signed(KeyType::EcdsaP256, "a").unwrap();
    let b = Certificate::self_signed(KeyType::EcdsaP256, "b").unwrap();
    let fa: Fingerprint = a.fingerprint();
    assert!(fa.matches(a.der()));
    assert!(!fa.matches(b.der()));
}
