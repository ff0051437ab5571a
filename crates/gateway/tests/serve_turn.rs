//! The embedded TURN server of `secrelay serve`, driven by a TURN client nobody here wrote:
//! coturn's `turnutils_uclient` (Debian's `coturn`, installed by scripts/setup) allocates a
//! relay with a credential it mints the TURN REST API's way from the shared secret (its `-W`),
//! creates a permission and sends to the gateway's own media address (which receives it), over
//! UDP, TCP, and TLS on the HTTPS port; a relay to any other address is refused with 403;
//! expired and forged credentials are refused with 401. Refusals are read back from the TURN
//! server's counters (what `/metrics` exports). A TLS client that offers no ALPN (Chromium's
//! way on `turns:`) is served TURN on the HTTPS port, and HTTPS still answers there. WHIP's
//! answers carry the TURN servers in `Link` headers and `GET /rooms/{room}/ice-servers` hands
//! them out as JSON, with a credential that allocates.
//!
//! Where `turnutils_uclient` is missing the tests that need it say SKIPPED, except under CI
//! (`CI` set), where they fail.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use secrelay_gateway::server::{ServeConfig, Server};
use secrelay_testkit::browser::audio_offer;
use secrelay_turn::auth::Credentials;
use secrelay_turn::client::{self, Reply, Signer};
use secrelay_turn::proto::method;
use secrelay_turn::stats::Refusal;

const SECRET: &str = "the shared TURN secret of these tests";
const ADMIN_KEY: &str = "admin-key-of-the-turn-tests-0123456789";

/// A peer or tool is missing: a failure under CI, a skip elsewhere.
fn missing(test: &str, why: &str) {
    if std::env::var_os("CI").is_some() {
        panic!("{test}: {why} (CI is set, and scripts/setup installs it)");
    }
    eprintln!("SKIPPED {test}: {why} (run scripts/setup)");
}

fn uclient(test: &str) -> Option<PathBuf> {
    let p = PathBuf::from("/usr/bin/turnutils_uclient");
    if p.is_file() {
        Some(p)
    } else {
        missing(
            test,
            "no /usr/bin/turnutils_uclient (Debian package coturn)",
        );
        None
    }
}

/// A gateway with TURN over UDP and TCP, and with `https` over TLS on its HTTPS port.
fn start(https: bool) -> Server {
    let c = ServeConfig {
        http: (!https).then(|| "127.0.0.1:0".parse().unwrap()),
        https: https.then(|| "127.0.0.1:0".parse().unwrap()),
        udp: "127.0.0.1:0".parse().unwrap(),
        workers: 1,
        drain_secs: 0.0,
        admin_key: Some(ADMIN_KEY.into()),
        turn_udp: Some("127.0.0.1:0".parse().unwrap()),
        turn_tcp: Some("127.0.0.1:0".parse().unwrap()),
        turn_tls: https,
        turn_secret: Some(SECRET.into()),
        ..ServeConfig::default()
    };
    Server::start(c).unwrap()
}

/// Runs uclient against the TURN server at `port` (`flags` pick the transport and the way it
/// relays), with 20 messages to `peer` and the credential flags `auth`.
fn run_uclient(
    exe: &PathBuf,
    flags: &[&str],
    port: u16,
    peer: SocketAddr,
    auth: &[&str],
) -> Output {
    Command::new(exe)
        .args(flags)
        .args(["-n", "20", "-l", "120", "-z", "5", "-c", "-m", "1"])
        .args(["-e", &peer.ip().to_string(), "-r", &peer.port().to_string()])
        .args(["-p", &port.to_string()])
        .args(auth)
        .arg("127.0.0.1")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// uclient with `flags` and a credential minted from the secret (`-W`) sends 20 messages to
/// the gateway's media address through the relay; the media socket receives them.
fn relays_to_the_gateway(test: &str, https: bool, flags: &[&str]) {
    let Some(exe) = uclient(test) else { return };
    let s = start(https);
    let turn = s.turn().unwrap();
    let port = match (https, flags.contains(&"-t")) {
        (true, _) => s.https_addr().unwrap().port(),
        (false, true) => turn.tcp_addr().unwrap().port(),
        (false, false) => turn.udp_addr().unwrap().port(),
    };
    let media = s.gateway().candidate();
    let before = s.gateway().stats().totals().datagrams_in;
    // `-s`: Send indications after a CreatePermission (uclient's channel mode also binds
    // the peer's port + 1, its RTCP, which is not a media address of the gateway's).
    let flags = [flags, &["-s"]].concat();
    let o = run_uclient(&exe, &flags, port, media, &["-W", SECRET, "-u", "alice"]);
    let out = text(&o);
    assert!(o.status.success(), "uclient failed:\n{out}");
    assert!(out.contains("tot_send_msgs=20"), "{out}");
    // The default `media_io` (auto): the TURN thread reads through io_uring, which this
    // kernel must allow under CI.
    if std::env::var_os("CI").is_some() {
        assert_eq!(
            turn.io_uring_shards(),
            1,
            "the TURN thread is not on io_uring"
        );
    }
    let st = turn.stats();
    assert!(st.allocations_made.load(Relaxed) >= 1, "{out}");
    assert_eq!(st.to_peer_packets.load(Relaxed), 20, "{:?}", st.drops());
    assert!(
        st.refusals().iter().all(|(_, n)| *n == 0),
        "{:?}",
        st.refusals()
    );
    let got = s.gateway().stats().totals().datagrams_in - before;
    assert!(
        got >= 20,
        "the media socket received {got} of the 20 relayed datagrams"
    );
}

#[test]
fn coturn_client_relays_to_the_gateway_over_udp() {
    relays_to_the_gateway("coturn_client_relays_to_the_gateway_over_udp", false, &[]);
}

#[test]
fn coturn_client_relays_to_the_gateway_over_tcp() {
    relays_to_the_gateway(
        "coturn_client_relays_to_the_gateway_over_tcp",
        false,
        &["-t"],
    );
}

#[test]
fn coturn_client_relays_to_the_gateway_over_tls_on_the_https_port() {
    let test = "coturn_client_relays_to_the_gateway_over_tls_on_the_https_port";
    relays_to_the_gateway(test, true, &["-t", "-S"]);
}

#[test]
fn a_relay_to_an_address_outside_the_gateway_is_refused() {
    let test = "a_relay_to_an_address_outside_the_gateway_is_refused";
    let Some(exe) = uclient(test) else { return };
    let s = start(false);
    let turn = s.turn().unwrap();
    let port = turn.udp_addr().unwrap().port();
    let auth = ["-W", SECRET, "-u", "mallory"];
    // Another host: CreatePermission refused.
    let elsewhere: SocketAddr = "127.0.0.2:9".parse().unwrap();
    let o = run_uclient(&exe, &["-s"], port, elsewhere, &auth);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("403"), "{}", text(&o));
    assert_eq!(turn.stats().refusal(Refusal::ForbiddenPeer), 1);
    // The gateway's own host on another port (uclient binds a channel to the peer's port + 1
    // too): ChannelBind refused.
    let media = s.gateway().candidate();
    let o = run_uclient(&exe, &[], port, media, &auth);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("channel bind: error 403"), "{}", text(&o));
    assert_eq!(turn.stats().refusal(Refusal::ForbiddenPeer), 2);
    assert_eq!(turn.stats().to_peer_packets.load(Relaxed), 0);
}

#[test]
fn expired_and_forged_credentials_are_refused() {
    let Some(exe) = uclient("expired_and_forged_credentials_are_refused") else {
        return;
    };
    let s = start(false);
    let turn = s.turn().unwrap();
    let port = turn.udp_addr().unwrap().port();
    let media = s.gateway().candidate();
    let creds = Credentials::new(SECRET.as_bytes(), "secrelay");
    let expired = creds.mint("alice", 1_000_000_000);
    let forged_user = creds.mint("alice", 4_000_000_000).username;
    let other_secret =
        Credentials::new(b"not the gateway's secret", "secrelay").mint("alice", 4_000_000_000);
    for (user, password, why) in [
        (
            &expired.username,
            expired.password.as_str(),
            Refusal::ExpiredCredential,
        ),
        (&forged_user, "forged-password", Refusal::BadIntegrity),
        (
            &other_secret.username,
            other_secret.password.as_str(),
            Refusal::BadIntegrity,
        ),
    ] {
        let o = run_uclient(&exe, &["-s"], port, media, &["-u", user, "-w", password]);
        assert!(!o.status.success(), "{why:?}: {}", text(&o));
        // uclient tries again after each 401, so each refusal is counted several times.
        let n = turn.stats().refusal(why);
        assert!(n >= 1, "{why:?}: {:?}", turn.stats().refusals());
    }
    assert_eq!(turn.stats().allocations_made.load(Relaxed), 0);
    assert_eq!(turn.stats().refusal(Refusal::BadUsername), 0);
}

/// A TLS client of the HTTPS port offering `alpn`, trusting the gateway's throw-away CA.
fn tls(s: &Server, alpn: &[&[u8]]) -> rustls::StreamOwned<rustls::ClientConnection, TcpStream> {
    let pem = std::fs::read_to_string(s.tls().unwrap().trust_anchor().unwrap()).unwrap();
    let ca = secrelay_dtls::cert::chain_from_pem(&pem).unwrap().remove(0);
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls::pki_types::CertificateDer::from(ca))
        .unwrap();
    let mut c = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    c.alpn_protocols = alpn.iter().map(|a| a.to_vec()).collect();
    let conn = rustls::ClientConnection::new(Arc::new(c), "localhost".try_into().unwrap()).unwrap();
    let tcp = TcpStream::connect(s.https_addr().unwrap()).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    rustls::StreamOwned::new(conn, tcp)
}

/// Chromium offers no ALPN on a `turns:` connection: its first bytes (an Allocate) make it
/// TURN; an HTTP client without ALPN on the same port is still served HTTP.
#[test]
fn tls_without_alpn_is_turn_when_it_speaks_stun_and_https_otherwise() {
    let s = start(true);
    let mut t = tls(&s, &[]);
    let mut buf = [0u8; 512];
    let n =
        client::bare_request(&mut buf, method::ALLOCATE, [1; 12], client::allocate_body).unwrap();
    t.write_all(&buf[..n]).unwrap();
    let mut head = [0u8; 20];
    t.read_exact(&mut head).unwrap();
    let len = usize::from(u16::from_be_bytes([head[2], head[3]]));
    let mut msg = head.to_vec();
    msg.resize(20 + len, 0);
    t.read_exact(&mut msg[20..]).unwrap();
    assert!(
        matches!(
            client::read(&msg, None),
            Some(Reply::Error { code: 401, .. })
        ),
        "the TURN challenge"
    );
    let mut h = tls(&s, &[]);
    h.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    let _ = h.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // Browsers' HTTPS (ALPN h2 or http/1.1) is never read before hyper reads it.
    let mut h = tls(&s, &[b"http/1.1"]);
    h.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    let _ = h.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

/// Allocates over UDP at `turn` with `username`/`password`: the response code (0: success).
fn allocate_with(turn: SocketAddr, username: &str, password: &str) -> u16 {
    let u = UdpSocket::bind("127.0.0.1:0").unwrap();
    u.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    u.connect(turn).unwrap();
    let mut buf = [0u8; 1500];
    let n =
        client::bare_request(&mut buf, method::ALLOCATE, [1; 12], client::allocate_body).unwrap();
    u.send(&buf[..n]).unwrap();
    let n = u.recv(&mut buf).unwrap();
    let Some(Reply::Error {
        realm: Some(realm),
        nonce: Some(nonce),
        ..
    }) = client::read(&buf[..n], None)
    else {
        panic!("a challenge")
    };
    let signer = Signer::new(username, password, &realm, &nonce);
    let n = signer
        .request(&mut buf, method::ALLOCATE, [2; 12], client::allocate_body)
        .unwrap();
    u.send(&buf[..n]).unwrap();
    let n = u.recv(&mut buf).unwrap();
    match client::read(&buf[..n], Some(signer.key())) {
        Some(Reply::Success { .. }) => 0,
        Some(Reply::Error { code, .. }) => code,
        other => panic!("{other:?}"),
    }
}

/// `Link: <url>; rel="ice-server"; username="u"; credential="p"; …` → (url, u, p).
fn parse_link(v: &str) -> (String, String, String) {
    let url = v[v.find('<').unwrap() + 1..v.find('>').unwrap()].to_owned();
    let field = |k: &str| {
        let at = v.find(&format!("{k}=\"")).unwrap() + k.len() + 2;
        v[at..at + v[at..].find('"').unwrap()].to_owned()
    };
    assert!(v.contains("rel=\"ice-server\""), "{v}");
    assert!(v.contains("credential-type=\"password\""), "{v}");
    (url, field("username"), field("credential"))
}

#[test]
fn answers_carry_the_turn_servers_and_the_page_gets_them_as_json() {
    let s = start(false);
    let turn = s.turn().unwrap();
    let base = s.http_url().unwrap();
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let cert =
        secrelay_dtls::Certificate::self_signed(secrelay_dtls::KeyType::EcdsaP256, "turn-test")
            .unwrap();
    let offer = audio_offer(
        secrelay_testkit::Leg::Whip.direction(),
        "abcd",
        "0123456789abcdefghijklmn",
        &cert.fingerprint(),
        1234,
    );
    let r = agent
        .post(&format!("{base}/whip/lobby"))
        .header("Content-Type", "application/sdp")
        .header("Authorization", &format!("Bearer {ADMIN_KEY}"))
        .send(&offer)
        .unwrap();
    assert_eq!(r.status().as_u16(), 201);
    let links: Vec<(String, String, String)> = r
        .headers()
        .get_all("link")
        .iter()
        .map(|v| parse_link(v.to_str().unwrap()))
        .collect();
    let (udp, tcp) = (turn.udp_addr().unwrap(), turn.tcp_addr().unwrap());
    let urls: Vec<&str> = links.iter().map(|l| l.0.as_str()).collect();
    assert_eq!(
        urls,
        [
            format!("turn:127.0.0.1:{}?transport=udp", udp.port()),
            format!("turn:127.0.0.1:{}?transport=tcp", tcp.port()),
        ]
    );
    let (_, username, password) = &links[0];
    let location = r.headers().get("location").unwrap().to_str().unwrap();
    let id = location.rsplit('/').next().unwrap();
    assert!(
        username.ends_with(&format!(":{id}")),
        "minted for the participant: {username}"
    );
    assert_eq!(
        Credentials::new(SECRET.as_bytes(), "secrelay")
            .password(username.as_bytes())
            .as_str(),
        password,
        "base64(HMAC-SHA1(secret, username))"
    );
    assert_eq!(
        allocate_with(udp, username, password),
        0,
        "the answer's credential allocates"
    );
    assert_eq!(allocate_with(udp, username, "not it"), 401);

    let r = agent
        .get(&format!("{base}/rooms/lobby/ice-servers"))
        .header("Authorization", &format!("Bearer {ADMIN_KEY}"))
        .call()
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let v: serde_json::Value = serde_json::from_reader(r.into_body().into_reader()).unwrap();
    let server = &v["iceServers"][0];
    assert_eq!(server["urls"].as_array().unwrap().len(), 2, "{v}");
    let (u, p) = (
        server["username"].as_str().unwrap(),
        server["credential"].as_str().unwrap(),
    );
    assert_eq!(allocate_with(udp, u, p), 0);
    // An anonymous caller (the rooms are open here): a credential of its own identity.
    let r = agent
        .get(&format!("{base}/rooms/lobby/ice-servers"))
        .call()
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let v: serde_json::Value = serde_json::from_reader(r.into_body().into_reader()).unwrap();
    let anon = v["iceServers"][0]["username"].as_str().unwrap();
    assert!(anon.contains(":anon-"), "{anon}");
    assert!(turn.stats().allocations_made.load(Relaxed) >= 2);
}
