//! The signaling over HTTPS as clients meet it: TLS 1.3 and 1.2 with the private CA as the one
//! trust anchor, ALPN, resumption with tickets and session ids, the certificate reloaded
//! without a restart, and bad input on the TLS port (not TLS, garbage records, truncated and
//! slow handshakes, a flood of half-open ones) cut off, bounded and counted by reason.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::client::Resumption;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, HandshakeKind, RootCertStore, StreamOwned};
use secrelay_dtls::ca::{CaDir, Role};
use secrelay_dtls::KeyType;
use secrelay_gateway::server::{ServeConfig, Server};

/// The admin key of the tests' gateways (`/metrics` needs it).
const ADMIN_KEY: &str = "admin-key-of-the-https-tests-0123456789";

fn https_config() -> ServeConfig {
    ServeConfig {
        https: Some("127.0.0.1:0".parse().unwrap()),
        udp: "127.0.0.1:0".parse().unwrap(),
        workers: 1,
        drain_secs: 0.0,
        admin_key: Some(ADMIN_KEY.into()),
        ..ServeConfig::default()
    }
}

fn ca_der(pem_path: &std::path::Path) -> Vec<u8> {
    let pem = std::fs::read_to_string(pem_path).unwrap();
    secrelay_dtls::cert::chain_from_pem(&pem).unwrap().remove(0)
}

fn client(ca: &[u8], version: &'static rustls::SupportedProtocolVersion) -> ClientConfig {
    let mut roots = RootCertStore::empty();
    roots.add(CertificateDer::from(ca.to_vec())).unwrap();
    let mut c = ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_protocol_versions(&[version])
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    c.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    c
}

/// One connection: the handshake (the certificate verified against the CA, the name
/// `localhost`), then `GET path` over HTTP/1.1 when ALPN did not choose h2. Returns the
/// connection's state and the response (empty for h2).
fn get(
    addr: SocketAddr,
    config: &Arc<ClientConfig>,
    path: &str,
) -> Result<(ClientConnection, String), String> {
    let tcp = TcpStream::connect(addr).map_err(|e| e.to_string())?;
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let conn = ClientConnection::new(config.clone(), ServerName::try_from("localhost").unwrap())
        .map_err(|e| e.to_string())?;
    let mut s = StreamOwned::new(conn, tcp);
    while s.conn.is_handshaking() {
        s.conn
            .complete_io(&mut s.sock)
            .map_err(|e| format!("handshake: {e}"))?;
    }
    if s.conn.alpn_protocol() == Some(b"h2") {
        // The HTTP/2 connection preface and an empty SETTINGS frame; the server's SETTINGS
        // come back.
        s.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
            .map_err(|e| e.to_string())?;
        let mut frame = [0u8; 9];
        s.read_exact(&mut frame).map_err(|e| e.to_string())?;
        if frame[3] != 0x04 {
            return Err(format!("expected a SETTINGS frame, got type {}", frame[3]));
        }
        return Ok((s.conn, String::new()));
    }
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {ADMIN_KEY}\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    match s.read_to_end(&mut out) {
        Ok(_) => {}
        // A server that closes without close_notify after `Connection: close`: what was read
        // is the response.
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {}
        Err(e) => return Err(e.to_string()),
    }
    Ok((s.conn, String::from_utf8_lossy(&out).into_owned()))
}

#[test]
fn tls13_and_tls12_with_the_private_ca_as_the_trust_anchor() {
    let server = Server::start(https_config()).unwrap();
    assert!(server.url().starts_with("https://"), "{}", server.url());
    assert_eq!(server.http_addr(), None, "plain HTTP only when asked for");
    let addr = server.https_addr().unwrap();
    let ca = ca_der(&server.tls().unwrap().trust_anchor().unwrap());
    for (version, name) in [
        (&rustls::version::TLS13, "1.3"),
        (&rustls::version::TLS12, "1.2"),
    ] {
        let mut c = client(&ca, version);
        c.alpn_protocols = vec![b"http/1.1".to_vec()];
        let (conn, resp) = get(addr, &Arc::new(c), "/healthz").unwrap();
        assert!(resp.starts_with("HTTP/1.1 200"), "TLS {name}: {resp}");
        assert!(resp.ends_with("ok\n"), "TLS {name}: {resp}");
        assert_eq!(
            conn.negotiated_key_exchange_group().map(|g| g.name()),
            Some(rustls::NamedGroup::X25519)
        );
        assert_eq!(
            conn.peer_certificates().unwrap().len(),
            1,
            "the leaf only: the CA is the client's to have"
        );
    }
    // ALPN: h2 when offered first, and the server speaks HTTP/2 on it.
    let (conn, _) = get(addr, &Arc::new(client(&ca, &rustls::version::TLS13)), "/").unwrap();
    assert_eq!(conn.alpn_protocol(), Some(&b"h2"[..]));
    // A client that trusts another CA refuses the certificate.
    let other = secrelay_dtls::ca::generate_ca(KeyType::EcdsaP256).unwrap();
    let e = get(
        addr,
        &Arc::new(client(other.der(), &rustls::version::TLS13)),
        "/healthz",
    )
    .unwrap_err();
    assert!(e.contains("UnknownIssuer") || e.contains("issuer"), "{e}");
    let stats = server.gateway().stats().clone();
    wait_for("the alert to be counted", || {
        stats.tls.totals().failed("alert_received") == 1
    });
    let t = stats.tls.totals();
    assert_eq!(t.full, 3, "{t:?}");
    assert_eq!(t.failed("alert_received"), 1, "{t:?}");
    let by_version = |v: &str| -> u64 {
        t.by_labels
            .iter()
            .filter(|(l, _)| l.version == v)
            .map(|(_, n)| n)
            .sum()
    };
    assert_eq!((by_version("1.3"), by_version("1.2")), (2, 1), "{t:?}");
    assert!(t
        .by_labels
        .iter()
        .any(|(l, _)| l.alpn == "h2" && l.group == "X25519"));
    // And /metrics says so, by label.
    let (_, metrics) = get(
        addr,
        &Arc::new({
            let mut c = client(&ca, &rustls::version::TLS13);
            c.alpn_protocols = vec![b"http/1.1".to_vec()];
            c
        }),
        "/metrics",
    )
    .unwrap();
    assert!(
        metrics.contains("secrelay_tls_handshakes_total{version=\"1.2\",kind=\"full\",suite=\"TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384\",group=\"X25519\",alpn=\"http/1.1\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("secrelay_tls_handshake_failures_total{reason=\"alert_received\"} 1"),
        "{metrics}"
    );
    server.shutdown();
}

#[test]
fn sessions_resume_with_tickets_and_session_ids() {
    let server = Server::start(https_config()).unwrap();
    let addr = server.https_addr().unwrap();
    let ca = ca_der(&server.tls().unwrap().trust_anchor().unwrap());
    for version in [&rustls::version::TLS13, &rustls::version::TLS12] {
        for tickets in [true, false] {
            let mut c = client(&ca, version);
            c.alpn_protocols = vec![b"http/1.1".to_vec()];
            c.resumption = Resumption::in_memory_sessions(8);
            if !tickets {
                // TLS 1.2 without the ticket extension: a session id from the server's cache.
                c.resumption = c
                    .resumption
                    .tls12_resumption(rustls::client::Tls12Resumption::SessionIdOnly);
            }
            let c = Arc::new(c);
            let (first, _) = get(addr, &c, "/healthz").unwrap();
            assert_eq!(first.handshake_kind(), Some(HandshakeKind::Full));
            let (second, resp) = get(addr, &c, "/healthz").unwrap();
            assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
            assert_eq!(
                second.handshake_kind(),
                Some(HandshakeKind::Resumed),
                "{version:?}, tickets {tickets}"
            );
        }
    }
    let t = server.gateway().stats().tls.totals();
    assert_eq!((t.full, t.resumed), (4, 4), "{t:?}");
    // TLS 1.3 resumption still runs a key exchange (psk_dhe_ke); TLS 1.2's does not.
    assert!(t
        .by_labels
        .iter()
        .any(|(l, n)| l.version == "1.3" && l.resumed && l.group == "X25519" && *n == 2));
    assert!(t
        .by_labels
        .iter()
        .any(|(l, n)| l.version == "1.2" && l.resumed && l.group == "none" && *n == 2));
    server.shutdown();
}

/// The fingerprint of the certificate a fresh connection is shown.
fn presented(addr: SocketAddr, ca: &[u8]) -> Result<String, String> {
    let mut c = client(ca, &rustls::version::TLS13);
    c.alpn_protocols = vec![b"http/1.1".to_vec()];
    let (conn, _) = get(addr, &Arc::new(c), "/healthz")?;
    let leaf = conn.peer_certificates().unwrap()[0].to_vec();
    Ok(secrelay_dtls::Fingerprint::of(&leaf, secrelay_dtls::HashAlgorithm::Sha256).to_string())
}

#[test]
fn the_certificate_reloads_without_a_restart_and_a_bad_one_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let ca = CaDir::init(dir.path().join("ca"), KeyType::EcdsaP256, false).unwrap();
    let (first, files) = ca
        .issue("localhost", Role::Server, KeyType::EcdsaP256, false)
        .unwrap();
    let config = ServeConfig {
        tls_cert: Some(files.cert.clone()),
        tls_key: Some(files.key.clone()),
        ..https_config()
    };
    let server = Server::start(config).unwrap();
    let addr = server.https_addr().unwrap();
    let anchor = ca.certificate().der().to_vec();
    assert_eq!(
        presented(addr, &anchor).unwrap(),
        first.fingerprint().to_string()
    );
    // A renewed certificate (RSA this time) in the same files: SIGHUP's work.
    let (second, _) = ca
        .issue("localhost", Role::Server, KeyType::Rsa2048, true)
        .unwrap();
    let fp = server.reload_tls().unwrap();
    assert_eq!(fp, second.fingerprint().to_string());
    assert_eq!(presented(addr, &anchor).unwrap(), fp);
    // A key that does not match the certificate: refused, the one in use stays.
    let (_, other) = ca
        .issue("other.example", Role::Server, KeyType::EcdsaP256, false)
        .unwrap();
    std::fs::copy(&other.key, &files.key).unwrap();
    let e = server.reload_tls().unwrap_err();
    assert!(
        e.0.contains("does not belong") && e.0.contains("tls_key"),
        "{e}"
    );
    std::fs::write(&files.cert, "not a certificate").unwrap();
    let e = server.reload_tls().unwrap_err();
    assert!(e.0.contains(&files.cert.display().to_string()), "{e}");
    assert_eq!(presented(addr, &anchor).unwrap(), fp);
    assert_eq!(server.gateway().stats().tls.totals().reloads, (1, 2));
    server.shutdown();
}

#[test]
fn the_certificate_issued_by_a_ca_directory_names_every_address() {
    let dir = tempfile::tempdir().unwrap();
    let ca = CaDir::init(dir.path(), KeyType::EcdsaP256, false).unwrap();
    let config = ServeConfig {
        tls_ca_dir: Some(dir.path().to_path_buf()),
        tls_names: vec!["media.example.org".into(), "127.0.0.1".into()],
        ..https_config()
    };
    let server = Server::start(config).unwrap();
    let addr = server.https_addr().unwrap();
    let mut c = client(ca.certificate().der(), &rustls::version::TLS13);
    c.alpn_protocols = vec![b"http/1.1".to_vec()];
    let c = Arc::new(c);
    for name in ["media.example.org", "127.0.0.1"] {
        let tcp = TcpStream::connect(addr).unwrap();
        let conn = ClientConnection::new(c.clone(), ServerName::try_from(name).unwrap()).unwrap();
        let mut s = StreamOwned::new(conn, tcp);
        while s.conn.is_handshaking() {
            s.conn.complete_io(&mut s.sock).unwrap();
        }
    }
    // `localhost` was not asked for: the name check refuses it.
    let e = get(addr, &c, "/healthz").unwrap_err();
    assert!(
        e.contains("NotValidForName") || e.contains("not valid for name"),
        "{e}"
    );
    // A fresh certificate from the same CA on reload.
    let before = server.tls().unwrap().info().fingerprint;
    let after = server.reload_tls().unwrap();
    assert_ne!(before, after);
    server.shutdown();
}

/// A valid ClientHello, as bytes on the wire.
fn client_hello() -> Vec<u8> {
    let c = client(
        secrelay_dtls::ca::generate_ca(KeyType::EcdsaP256)
            .unwrap()
            .der(),
        &rustls::version::TLS13,
    );
    let mut conn =
        ClientConnection::new(Arc::new(c), ServerName::try_from("localhost").unwrap()).unwrap();
    let mut out = Vec::new();
    conn.write_tls(&mut out).unwrap();
    out
}

/// Whether the server closed the connection within `within` (EOF or reset on read).
fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    s.set_read_timeout(Some(within)).unwrap();
    let mut buf = [0u8; 4096];
    let end = Instant::now() + within;
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {
                if Instant::now() >= end {
                    return false;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

fn wait_for(what: &str, mut ok: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(10);
    while !ok() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn bad_input_on_the_tls_port_is_cut_off_bounded_and_counted() {
    let config = ServeConfig {
        tls_handshake_timeout_secs: 2.0,
        tls_max_handshakes: 4,
        ..https_config()
    };
    let server = Server::start(config).unwrap();
    let addr = server.https_addr().unwrap();
    let stats = server.gateway().stats().clone();
    let hello = client_hello();

    // Plain HTTP to the HTTPS port.
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    assert!(closed_within(&mut s, Duration::from_secs(5)));
    // A handshake record whose contents are garbage.
    let mut s = TcpStream::connect(addr).unwrap();
    // A ClientHello whose session id claims 255 bytes of the 27 left.
    let mut junk = vec![
        0x16, 0x03, 0x01, 0x00, 0x40, 0x01, 0x00, 0x00, 0x3c, 0x03, 0x03,
    ];
    junk.extend((0..32u8).map(|i| i.wrapping_mul(37)));
    junk.push(0xff);
    junk.resize(5 + 0x40, 0x5a);
    s.write_all(&junk).unwrap();
    assert!(closed_within(&mut s, Duration::from_secs(5)));
    // A record header that announces more than a record may hold.
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(&[0x16, 0x03, 0x03, 0xff, 0xff]).unwrap();
    assert!(closed_within(&mut s, Duration::from_secs(5)));
    // Half a ClientHello, then the client goes away: a truncated handshake.
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(&hello[..hello.len() / 2]).unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    assert!(closed_within(&mut s, Duration::from_secs(5)));
    wait_for("the four failures", || {
        let t = stats.tls.totals();
        t.failed("not_tls") + t.failed("malformed") + t.failed("closed_early") >= 4
    });
    let t = stats.tls.totals();
    assert_eq!(t.failed("not_tls"), 1, "{t:?}");
    assert_eq!(t.failed("malformed"), 2, "{t:?}");
    assert_eq!(t.failed("closed_early"), 1, "{t:?}");

    // Slowloris: the ClientHello a byte at a time, too slowly to finish within the deadline.
    let started = Instant::now();
    let mut slow = TcpStream::connect(addr).unwrap();
    let mut cut_off = false;
    for b in &hello {
        if slow.write_all(std::slice::from_ref(b)).is_err() {
            cut_off = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
        if started.elapsed() > Duration::from_secs(5) {
            break;
        }
    }
    assert!(
        cut_off || closed_within(&mut slow, Duration::from_secs(3)),
        "a slow handshake was not cut off"
    );
    assert!(started.elapsed() < Duration::from_secs(9));
    wait_for("the timeout", || stats.tls.totals().failed("timeout") == 1);

    // A flood of half-open handshakes: four hold the slots until their deadline, the others
    // are refused at once; never more than four in flight.
    let mut held = Vec::new();
    for _ in 0..12 {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(&hello).unwrap();
        held.push(s);
        assert!(stats.tls.totals().in_flight <= 4);
    }
    wait_for("the refusals", || stats.tls.totals().failed("busy") == 8);
    assert_eq!(stats.tls.totals().in_flight, 4);
    // The held ones got the server's flight and are dropped at their deadline.
    for s in &mut held {
        assert!(closed_within(s, Duration::from_secs(5)));
    }
    wait_for("the slots to free", || {
        let t = stats.tls.totals();
        t.in_flight == 0 && t.connections_open == 0
    });
    let t = stats.tls.totals();
    assert_eq!(t.failed("timeout"), 5, "{t:?}");
    assert_eq!(t.full, 0, "{t:?}");
    // The port still serves a real client.
    let ca = ca_der(&server.tls().unwrap().trust_anchor().unwrap());
    let mut c = client(&ca, &rustls::version::TLS13);
    c.alpn_protocols = vec![b"http/1.1".to_vec()];
    let (_, resp) = get(addr, &Arc::new(c), "/healthz").unwrap();
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    server.shutdown();
}

#[test]
fn plain_http_only_when_asked_for() {
    let server = Server::start(ServeConfig {
        http: Some("127.0.0.1:0".parse().unwrap()),
        https: None,
        ..https_config()
    })
    .unwrap();
    assert!(server.url().starts_with("http://"));
    assert_eq!(server.https_addr(), None);
    assert!(server.tls().is_none());
    assert!(server.reload_tls().is_err());
    server.shutdown();
    // Both, when both are asked for.
    let server = Server::start(ServeConfig {
        http: Some("127.0.0.1:0".parse().unwrap()),
        ..https_config()
    })
    .unwrap();
    assert!(server.url().starts_with("https://"));
    assert!(server.http_url().is_some());
    server.shutdown();
}
