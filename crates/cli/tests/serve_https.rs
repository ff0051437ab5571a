//! `secrelay serve` over HTTPS as tools nobody here wrote see it: curl completes TLS 1.3 and
//! 1.2 and HTTP/2 with the private CA as its only trust anchor; `openssl s_client` resumes TLS
//! 1.3 and TLS 1.2 sessions (`-sess_out` then `-sess_in` says "Reused"); SIGHUP swaps the
//! certificate without a restart; with no flags, `secrelay serve` serves HTTPS on
//! 127.0.0.1:8443.
//!
//! curl and openssl come from Debian's packages (scripts/setup); where one is missing the test
//! says SKIPPED, except under CI, where it fails.

mod lab_support;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lab_support::missing;
use secrelay_gateway::server::BannerReader;

fn secrelay() -> Command {
    Command::new(env!("CARGO_BIN_EXE_secrelay"))
}

fn have(test: &str, tool: &str, arg: &str) -> bool {
    let ok = Command::new(tool)
        .arg(arg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        missing(test, &format!("no {tool} (Debian package {tool})"));
    }
    ok
}

/// `secrelay serve` over HTTPS, killed on drop; what it logs is kept.
struct Serve {
    child: Child,
    https: String,
    log: Arc<Mutex<String>>,
    /// Its admin key (`/metrics`).
    admin: secrelay_testkit::AdminKeyFile,
}

impl Serve {
    fn start(extra: &[&str]) -> Serve {
        let admin = secrelay_testkit::AdminKeyFile::new().unwrap();
        let mut serve = secrelay();
        serve
            .args(["serve", "--udp", "127.0.0.1:0", "--log", "info"])
            .arg("--admin-key-file")
            .arg(admin.path())
            .args(extra);
        let (child, banner, log) = lab_support::spawn_serve(serve);
        let https = banner.and_then(|b| b.https).map(|a| a.to_string());
        let https = https.unwrap_or_else(|| {
            panic!(
                "secrelay serve printed no HTTPS address:\n{}",
                log.lock().unwrap()
            )
        });
        Serve {
            child,
            https,
            log,
            admin,
        }
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn ca_init(dir: &Path) {
    let out = secrelay()
        .args(["ca", "init", "--dir"])
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn curl(args: &[&str]) -> (bool, String, String) {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "20"])
        .args(args)
        .output()
        .expect("curl runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `openssl s_client` against `addr` with `args`, an HTTP request on stdin (so that it stays
/// until the server closes, having read the TLS 1.3 tickets on the way); its output.
fn s_client(addr: &str, ca: &Path, args: &[&str]) -> String {
    let mut child = Command::new("openssl")
        .args([
            "s_client",
            "-connect",
            addr,
            "-servername",
            "localhost",
            "-CAfile",
        ])
        .arg(ca)
        .args(["-verify_return_error", "-ign_eof"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("openssl runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .unwrap();
    wait_output(child, Duration::from_secs(20))
}

fn wait_output(mut child: Child, limit: Duration) -> String {
    let end = Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > end {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A counter from /metrics, read with curl over HTTPS.
fn metric(serve: &Serve, ca: &Path, sample_prefix: &str) -> u64 {
    let (ok, body, err) = curl(&[
        "--cacert",
        ca.to_str().unwrap(),
        "-H",
        &format!("Authorization: Bearer {}", serve.admin.key()),
        &format!("https://{}/metrics", serve.https),
    ]);
    assert!(ok, "{err}");
    body.lines()
        .filter(|l| l.starts_with(sample_prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

#[test]
fn curl_and_openssl_complete_tls13_and_tls12_and_resume_sessions() {
    let test = "curl_and_openssl_complete_tls13_and_tls12_and_resume_sessions";
    if !have(test, "curl", "--version") || !have(test, "openssl", "version") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    ca_init(dir.path());
    let ca: PathBuf = dir.path().join("ca.pem");
    let serve = Serve::start(&[
        "--https",
        "127.0.0.1:0",
        "--tls-ca",
        dir.path().to_str().unwrap(),
    ]);
    let https = serve.https.clone();
    let url = format!("https://{https}/healthz");
    for (min, max, want) in [
        ("--tlsv1.3", "1.3", "TLSv1.3"),
        ("--tlsv1.2", "1.2", "TLSv1.2"),
    ] {
        let (ok, body, err) = curl(&[
            "-v",
            "--cacert",
            ca.to_str().unwrap(),
            min,
            "--tls-max",
            max,
            "--http1.1",
            &url,
        ]);
        assert!(ok, "curl {min}: {err}");
        assert_eq!(body.trim(), "ok");
        assert!(
            err.contains(&format!("SSL connection using {want}")),
            "{err}"
        );
    }
    // HTTP/2 through ALPN.
    let (ok, body, err) = curl(&[
        "--cacert",
        ca.to_str().unwrap(),
        "--http2",
        "-w",
        "http/%{http_version}",
        &url,
    ]);
    assert!(ok, "{err}");
    assert_eq!(body, "ok\nhttp/2", "{err}");
    // No trust anchor, no connection: the CA is what makes it trusted.
    let (ok, _, err) = curl(&[&url]);
    assert!(
        !ok,
        "curl accepted a certificate it has no anchor for: {err}"
    );

    // Resumption with openssl s_client: a session saved, then offered.
    for version in ["-tls1_3", "-tls1_2"] {
        let sess = dir.path().join(format!("session{version}.pem"));
        let first = s_client(&https, &ca, &[version, "-sess_out", sess.to_str().unwrap()]);
        assert!(first.contains("Verify return code: 0 (ok)"), "{first}");
        assert!(first.contains("HTTP/1.1 200"), "{first}");
        assert!(first.contains("New, TLSv1."), "{first}");
        let second = s_client(&https, &ca, &[version, "-sess_in", sess.to_str().unwrap()]);
        assert!(
            second.contains(&format!(
                "Reused, TLSv1.{}",
                if version == "-tls1_3" { 3 } else { 2 }
            )),
            "{version}: {second}"
        );
        assert!(second.contains("HTTP/1.1 200"), "{second}");
    }
    // The server counted the resumptions as such.
    let resumed = metric(
        &serve,
        &ca,
        "secrelay_tls_handshakes_total{version=\"1.3\",kind=\"resumed\"",
    ) + metric(
        &serve,
        &ca,
        "secrelay_tls_handshakes_total{version=\"1.2\",kind=\"resumed\"",
    );
    assert_eq!(resumed, 2, "{}", serve.log());
    assert_eq!(
        metric(
            &serve,
            &ca,
            "secrelay_tls_handshake_failures_total{reason=\"alert_received\"}"
        ),
        1,
        "curl without the CA sends an alert"
    );
}

#[test]
fn sighup_swaps_the_certificate_without_a_restart() {
    let test = "sighup_swaps_the_certificate_without_a_restart";
    if !have(test, "openssl", "version") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    ca_init(dir.path());
    let issue = |force: bool| {
        let mut c = secrelay();
        c.args(["ca", "issue", "--dir"])
            .arg(dir.path())
            .args(["--name", "localhost", "--server"]);
        if force {
            c.arg("--force");
        }
        let out = c.output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    issue(false);
    let cert = dir.path().join("localhost.pem");
    let key = dir.path().join("localhost.key");
    let ca = dir.path().join("ca.pem");
    let serve = Serve::start(&[
        "--https",
        "127.0.0.1:0",
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
    ]);
    let presented = || -> String {
        let out = s_client(&serve.https, &ca, &["-tls1_3"]);
        assert!(out.contains("Verify return code: 0 (ok)"), "{out}");
        let start = out
            .find("-----BEGIN CERTIFICATE-----")
            .expect("the certificate");
        let end = out.find("-----END CERTIFICATE-----").expect("its end");
        out[start..end].to_owned()
    };
    let before = presented();
    issue(true);
    let pid = serve.child.id().to_string();
    assert!(Command::new("kill")
        .args(["-HUP", &pid])
        .status()
        .unwrap()
        .success());
    let end = Instant::now() + Duration::from_secs(10);
    while !serve.log().contains("HTTPS certificate reloaded") {
        assert!(Instant::now() < end, "no reload logged:\n{}", serve.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    let after = presented();
    assert_ne!(before, after, "the same certificate after SIGHUP");
    // A broken file: the reload fails, says why, and the certificate in use stays.
    std::fs::write(&key, "not a key").unwrap();
    assert!(Command::new("kill")
        .args(["-HUP", &pid])
        .status()
        .unwrap()
        .success());
    let end = Instant::now() + Duration::from_secs(10);
    while !serve.log().contains("reload failed") {
        assert!(Instant::now() < end, "no failure logged:\n{}", serve.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        serve.log().contains(key.to_str().unwrap()),
        "{}",
        serve.log()
    );
    assert_eq!(presented(), after);
}

#[test]
fn serve_without_flags_serves_https_on_8443() {
    // The port is fixed: when something else holds it, the default is checked by the
    // configuration's unit test only.
    if std::net::TcpListener::bind("127.0.0.1:8443").is_err() {
        eprintln!("127.0.0.1:8443 is taken on this machine: not started");
        return;
    }
    let serve = Serve::start(&[]);
    assert_eq!(serve.https, "127.0.0.1:8443");
    let log = serve.log();
    let mut banner = BannerReader::default();
    for line in log.lines() {
        banner.feed(line);
    }
    assert!(banner.done(), "{log}");
    assert_eq!(banner.http, None, "plain HTTP was not asked for: {log}");
    assert!(log.contains("throw-away private CA"), "{log}");
    // The banner says where the room page is, and how to trust the CA.
    for want in [
        "https://127.0.0.1:8443/room/NAME",
        "https://127.0.0.1:8443/whip/NAME",
        "https://127.0.0.1:8443/whep/NAME",
        "curl --cacert ",
    ] {
        assert!(log.contains(want), "{want}: {log}");
    }
    // The throw-away CA's certificate is where the banner says, and it verifies the server.
    let anchor = banner
        .ca
        .expect("the CA certificate's path")
        .display()
        .to_string();
    assert!(Path::new(&anchor).exists(), "{anchor}");
    if Command::new("curl").arg("--version").output().is_ok() {
        let (ok, body, err) = curl(&["--cacert", &anchor, "https://127.0.0.1:8443/healthz"]);
        assert!(ok, "{err}");
        assert_eq!(body.trim(), "ok");
    }
}

#[test]
fn bad_tls_flags_name_themselves() {
    let out = secrelay()
        .args([
            "serve",
            "--tls-cert",
            "/nonexistent/cert.pem",
            "--tls-key",
            "/nonexistent/key.pem",
            "--https",
            "127.0.0.1:0",
            "--udp",
            "127.0.0.1:0",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/nonexistent/cert.pem"), "{err}");
    let out = secrelay()
        .args([
            "serve",
            "--tls-cert-type",
            "dsa",
            "--https",
            "127.0.0.1:0",
            "--udp",
            "127.0.0.1:0",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("tls_cert_type"));
}
