//! A real SIP proxy drives secrelay: Kamailio (Debian's package, its `rtpengine` module pointed
//! at secrelay's ng socket on loopback) proxies a call between two SIP user agents nobody here
//! wrote (SIPp from Debian's `sip-tester`: the caller plays a recorded G.711 stream, the callee
//! echoes every RTP packet back). The call is answered, both sides' SDP is rewritten to
//! secrelay's address and ports, the media goes through secrelay both ways, and the BYE's
//! `delete` gives the ports back. Scenarios and the proxy's configuration: `interop/sip/`.
//!
//! Kamailio and SIPp are installed by `scripts/setup`; with `CI` set their absence fails the
//! test, elsewhere it is skipped with the reason.

use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use secrelay_gateway::server::{ServeConfig, Server};

/// A peer or tool is missing: a failure under CI, a skip elsewhere.
fn missing(test: &str, why: &str) {
    if std::env::var_os("CI").is_some() {
        panic!("{test}: {why} (CI is set, and scripts/setup installs it)");
    }
    eprintln!("SKIPPED {test}: {why} (run scripts/setup)");
}

fn find(program: &str, also: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .chain(also.iter().map(PathBuf::from))
        .find(|p| p.is_file())
}

/// A free UDP port on loopback (bound and released: the caller binds it next).
fn free_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Kills a child (and its process group) when dropped.
struct Reap(Child);

impl Drop for Reap {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.0.id())])
            .status();
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn(cmd: &mut Command) -> Reap {
    use std::os::unix::process::CommandExt;
    Reap(
        cmd.stdin(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("{cmd:?}: {e}")),
    )
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("crates/gateway sits two levels below the repository root")
        .to_path_buf()
}

/// The `c=` address and `m=audio` port of the SDP in the first message of a SIPp message log
/// that starts with `first_line`.
fn sdp_in(log: &str, first_line: &str) -> Option<(String, u16)> {
    let at = log.find(first_line)?;
    let rest = &log[at..];
    let c = rest
        .lines()
        .find_map(|l| l.trim().strip_prefix("c=IN IP4 "))?;
    let m = rest
        .lines()
        .find_map(|l| l.trim().strip_prefix("m=audio "))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some((c.trim().to_owned(), m))
}

#[test]
fn kamailio_relays_a_sipp_call_through_secrelay_both_ways() {
    let test = "kamailio_relays_a_sipp_call_through_secrelay_both_ways";
    let Some(kamailio) = find("kamailio", &["/usr/sbin/kamailio"]) else {
        return missing(test, "no kamailio (Debian package kamailio)");
    };
    let Some(sipp) = find("sipp", &[]) else {
        return missing(test, "no sipp (Debian package sip-tester)");
    };
    let pcap = Path::new("/usr/share/sip-tester/g711a.pcap");
    if !pcap.is_file() {
        return missing(
            test,
            "no /usr/share/sip-tester/g711a.pcap (Debian package sip-tester)",
        );
    }
    let (lo, hi) = (49000u16, 49199u16);
    let server = Server::start(ServeConfig {
        http: "127.0.0.1:0".parse().unwrap(),
        udp: "127.0.0.1:0".parse().unwrap(),
        ng: Some("127.0.0.1:0".parse().unwrap()),
        workers: 2,
        rtp_ports: format!("{lo}-{hi}"),
        drain_secs: 0.1,
        ..ServeConfig::default()
    })
    .unwrap();
    let ng_port = server.ng_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    let (sip, callee, caller) = (free_port(), free_port(), free_port());
    let (callee_media, caller_media) = (free_port() & !1, free_port() & !1);
    let cfg = std::fs::read_to_string(repo().join("interop/sip/kamailio.cfg.in"))
        .unwrap()
        .replace("@SIP_PORT@", &sip.to_string())
        .replace("@CALLEE_PORT@", &callee.to_string())
        .replace("@NG_PORT@", &ng_port.to_string())
        .replace(
            "@OFFER_FLAGS@",
            "replace-origin replace-session-connection ICE=remove",
        );
    let cfg_path = dir.path().join("kamailio.cfg");
    std::fs::write(&cfg_path, cfg).unwrap();
    let kam_log = std::fs::File::create(dir.path().join("kamailio.log")).unwrap();
    let _kamailio = spawn(
        Command::new(&kamailio)
            .arg("-f")
            .arg(&cfg_path)
            .args(["-DD", "-E", "-m", "64", "-M", "8", "-Y"])
            .arg(dir.path())
            .stdout(kam_log.try_clone().unwrap())
            .stderr(kam_log),
    );
    // Kamailio's rtpengine module pings the relay once it is up.
    let stats = server.gateway().stats().clone();
    let up = Instant::now() + Duration::from_secs(20);
    while stats.ng_requests.load(std::sync::atomic::Ordering::Relaxed) == 0 {
        let log = std::fs::read_to_string(dir.path().join("kamailio.log")).unwrap_or_default();
        assert!(
            Instant::now() < up,
            "Kamailio did not reach the ng socket:\n{log}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(300));

    let scenarios = repo().join("interop/sip");
    let uas_log = dir.path().join("uas.msg");
    let uac_log = dir.path().join("uac.msg");
    let _uas = spawn(
        Command::new(&sipp)
            .arg("-sf")
            .arg(scenarios.join("uas.xml"))
            .args(["-i", "127.0.0.1", "-p", &callee.to_string()])
            .args(["-mi", "127.0.0.1", "-mp", &callee_media.to_string()])
            .args([
                "-rtp_echo",
                "-m",
                "1",
                "-nostdin",
                "-trace_msg",
                "-message_file",
            ])
            .arg(&uas_log)
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    std::thread::sleep(Duration::from_millis(300));
    let out = Command::new(&sipp)
        .arg("-sf")
        .arg(scenarios.join("uac.xml"))
        .args(["-i", "127.0.0.1", "-p", &caller.to_string()])
        .args(["-mp", &caller_media.to_string()])
        .args(["-s", "callee", &format!("127.0.0.1:{sip}")])
        .args(["-m", "1", "-nostdin", "-timeout", "40", "-timeout_error"])
        .args(["-trace_msg", "-message_file"])
        .arg(&uac_log)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let kam = std::fs::read_to_string(dir.path().join("kamailio.log")).unwrap_or_default();
    assert!(
        out.status.success(),
        "the SIPp caller's call failed: {}\n{}\nKamailio:\n{kam}",
        out.status,
        String::from_utf8_lossy(&out.stdout)
    );

    // Both sides' SDP pointed at secrelay: the callee's INVITE and the caller's 200 OK.
    let uas = std::fs::read_to_string(&uas_log).unwrap();
    let uac = std::fs::read_to_string(&uac_log).unwrap();
    let announce = server.gateway().candidate().ip().to_string();
    let (c, port) = sdp_in(&uas, "INVITE sip:").expect("the INVITE's SDP");
    assert_eq!(c, announce);
    assert!(
        (lo..=hi).contains(&port),
        "the callee sends to secrelay: {port}"
    );
    let (c, port) = sdp_in(&uac, "SIP/2.0 200 OK").expect("the 200 OK's SDP");
    assert_eq!(c, announce);
    assert!(
        (lo..=hi).contains(&port),
        "the caller sends to secrelay: {port}"
    );

    // The media went through secrelay both ways: the caller's stream to the callee, and the
    // callee's echo of it back (g711a.pcap is about 130 packets).
    let t = server.gateway().stats().totals();
    assert!(t.media_routed >= 200, "{t:?}");
    assert!(t.media_forwarded >= 200, "{t:?}");
    for reason in ["no_codec", "unlatched_source", "receiver_not_ready"] {
        assert!(
            !t.drops_by_reason
                .iter()
                .any(|(r, n)| *r == reason && *n > 0),
            "{reason}: {t:?}"
        );
    }
    assert_eq!(
        stats.ng_errors.load(std::sync::atomic::Ordering::Relaxed),
        0,
        "Kamailio's requests all answered: {kam}"
    );
    // The BYE's delete gave the ports back.
    let end = Instant::now() + Duration::from_secs(5);
    while server.gateway().rtp_ports_in_use() > 0 {
        assert!(Instant::now() < end, "ports given back after the BYE");
        std::thread::sleep(Duration::from_millis(20));
    }
    server.shutdown();
}
