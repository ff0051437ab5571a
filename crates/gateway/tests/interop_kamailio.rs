//! A real SIP proxy drives secrelay: Kamailio (Debian's package, its `rtpengine` module pointed
//! at secrelay's ng socket on loopback) proxies calls between SIP user agents nobody here
//! wrote. Once with plain RTP on both sides (SIPp from Debian's `sip-tester`: the caller plays
//! a recorded G.711 stream, the callee echoes every RTP packet back), once with the callee's
//! side turned into SDES-SRTP by the offer's flags (`RTP/SAVP`) and baresip answering it with
//! SRTP of its own. Each call is answered, the SDPs are rewritten to secrelay's address and
//! ports, the media goes through secrelay both ways, and the BYE's `delete` gives the ports
//! back. Scenarios and the proxy's configuration: `interop/sip/`.
//!
//! Kamailio, SIPp and baresip are installed by `scripts/setup`; with `CI` set their absence
//! fails the test, elsewhere it is skipped with the reason.

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

/// secrelay with its ng socket, and Kamailio pointed at it, forwarding INVITEs to
/// `callee` with `offer_flags`.
struct Proxy {
    server: Server,
    _kamailio: Reap,
    dir: tempfile::TempDir,
    sip: u16,
    range: (u16, u16),
}

impl Proxy {
    fn start(kamailio: &Path, callee: u16, offer_flags: &str, range: (u16, u16)) -> Proxy {
        let server = Server::start(ServeConfig {
            http: Some("127.0.0.1:0".parse().unwrap()),
            udp: "127.0.0.1:0".parse().unwrap(),
            ng: Some("127.0.0.1:0".parse().unwrap()),
            workers: 2,
            rtp_ports: format!("{}-{}", range.0, range.1),
            drain_secs: 0.1,
            ..ServeConfig::default()
        })
        .unwrap();
        let ng_port = server.ng_addr().unwrap().port();
        let dir = tempfile::tempdir().unwrap();
        let sip = free_port();
        let cfg = std::fs::read_to_string(repo().join("interop/sip/kamailio.cfg.in"))
            .unwrap()
            .replace("@SIP_PORT@", &sip.to_string())
            .replace("@CALLEE_PORT@", &callee.to_string())
            .replace("@NG_PORT@", &ng_port.to_string())
            .replace("@OFFER_FLAGS@", offer_flags);
        let cfg_path = dir.path().join("kamailio.cfg");
        std::fs::write(&cfg_path, cfg).unwrap();
        let kam_log = std::fs::File::create(dir.path().join("kamailio.log")).unwrap();
        let kamailio = spawn(
            Command::new(kamailio)
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
        Proxy {
            server,
            _kamailio: kamailio,
            dir,
            sip,
            range,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("kamailio.log")).unwrap_or_default()
    }

    /// The SIPp caller's call through the proxy: plays g711a.pcap, hangs up after 4 s.
    fn call(&self, sipp: &Path, msg_log: &Path) {
        let out = Command::new(sipp)
            .arg("-sf")
            .arg(repo().join("interop/sip/uac.xml"))
            .args(["-i", "127.0.0.1", "-p", &free_port().to_string()])
            .args(["-mp", &(free_port() & !1).to_string()])
            .args(["-s", "callee", &format!("127.0.0.1:{}", self.sip)])
            .args(["-m", "1", "-nostdin", "-timeout", "40", "-timeout_error"])
            .args(["-trace_msg", "-message_file"])
            .arg(msg_log)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "the SIPp caller's call failed: {}\n{}\nKamailio:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            self.log()
        );
    }

    /// What every call must show: the media relayed both ways (at least `both_ways` packets
    /// routed and forwarded), nothing dropped for codecs, sources or authentication, every
    /// ng request answered, the ports given back after the BYE.
    fn check(&self, both_ways: u64) {
        let t = self.server.gateway().stats().totals();
        assert!(t.media_routed >= both_ways, "{t:?}");
        assert!(t.media_forwarded >= both_ways, "{t:?}");
        for reason in [
            "no_codec",
            "unlatched_source",
            "receiver_not_ready",
            "auth_failed",
        ] {
            assert!(
                !t.drops_by_reason
                    .iter()
                    .any(|(r, n)| *r == reason && *n > 0),
                "{reason}: {t:?}"
            );
        }
        let stats = self.server.gateway().stats();
        assert_eq!(
            stats.ng_errors.load(std::sync::atomic::Ordering::Relaxed),
            0,
            "Kamailio's requests all answered: {}",
            self.log()
        );
        let end = Instant::now() + Duration::from_secs(5);
        while self.server.gateway().rtp_ports_in_use() > 0 {
            assert!(Instant::now() < end, "ports given back after the BYE");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn in_range(&self, port: u16) -> bool {
        (self.range.0..=self.range.1).contains(&port)
    }
}

/// The tools, or `None` after [`missing`] said why.
fn tools(test: &str) -> Option<(PathBuf, PathBuf)> {
    let Some(kamailio) = find("kamailio", &["/usr/sbin/kamailio"]) else {
        missing(test, "no kamailio (Debian package kamailio)");
        return None;
    };
    let Some(sipp) = find("sipp", &[]) else {
        missing(test, "no sipp (Debian package sip-tester)");
        return None;
    };
    if !Path::new("/usr/share/sip-tester/g711a.pcap").is_file() {
        missing(
            test,
            "no /usr/share/sip-tester/g711a.pcap (Debian package sip-tester)",
        );
        return None;
    }
    Some((kamailio, sipp))
}

#[test]
fn kamailio_relays_a_sipp_call_through_secrelay_both_ways() {
    let test = "kamailio_relays_a_sipp_call_through_secrelay_both_ways";
    let Some((kamailio, sipp)) = tools(test) else {
        return;
    };
    let callee = free_port();
    let proxy = Proxy::start(
        &kamailio,
        callee,
        "replace-origin replace-session-connection ICE=remove",
        (49000, 49199),
    );
    let dir = proxy.dir.path().to_path_buf();
    let uas_log = dir.join("uas.msg");
    let uac_log = dir.join("uac.msg");
    let _uas = spawn(
        Command::new(&sipp)
            .arg("-sf")
            .arg(repo().join("interop/sip/uas.xml"))
            .args(["-i", "127.0.0.1", "-p", &callee.to_string()])
            .args(["-mi", "127.0.0.1", "-mp", &(free_port() & !1).to_string()])
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
    proxy.call(&sipp, &uac_log);

    // Both sides' SDP pointed at secrelay: the callee's INVITE and the caller's 200 OK.
    let uas = std::fs::read_to_string(&uas_log).unwrap();
    let uac = std::fs::read_to_string(&uac_log).unwrap();
    let announce = proxy.server.gateway().candidate().ip().to_string();
    let (c, port) = sdp_in(&uas, "INVITE sip:").expect("the INVITE's SDP");
    assert_eq!(c, announce);
    assert!(proxy.in_range(port), "the callee sends to secrelay: {port}");
    let (c, port) = sdp_in(&uac, "SIP/2.0 200 OK").expect("the 200 OK's SDP");
    assert_eq!(c, announce);
    assert!(proxy.in_range(port), "the caller sends to secrelay: {port}");
    // The caller's stream to the callee and the callee's echo of it back (g711a.pcap is
    // about 130 packets).
    proxy.check(200);
    proxy.server.shutdown();
}

#[test]
fn kamailio_turns_the_callee_side_into_sdes_and_baresip_talks_srtp_through_secrelay() {
    let test = "kamailio_turns_the_callee_side_into_sdes_and_baresip_talks_srtp_through_secrelay";
    let Some((kamailio, sipp)) = tools(test) else {
        return;
    };
    let Some(baresip) = find("baresip", &[]) else {
        return missing(test, "no baresip (Debian package baresip-core)");
    };
    let callee = free_port();
    let proxy = Proxy::start(
        &kamailio,
        callee,
        "replace-origin replace-session-connection ICE=remove RTP/SAVP",
        (49200, 49399),
    );
    // baresip as the callee: answers at once, SRTP (SDES) mandatory, G.711 A-law, sending a
    // 660 Hz tone from a WAV file.
    let dir = proxy.dir.path().to_path_buf();
    let bs = dir.join("baresip");
    std::fs::create_dir_all(&bs).unwrap();
    let tone = bs.join("tone.wav");
    write_tone(&tone);
    let rtp = free_port() & !1;
    std::fs::write(
        bs.join("config"),
        format!(
            "poll_method epoll\nsip_listen 127.0.0.1:{callee}\nsip_trans_def udp\n\
             audio_player aufile,/dev/null\naudio_source aufile,{}\naudio_alert aufile,/dev/null\n\
             audio_srate 8000\naudio_channels 1\nrtp_ports {rtp}-{}\n\
             module_path /usr/lib/baresip/modules\nmodule g711.so\nmodule aufile.so\n\
             module srtp.so\nmodule stdio.so\nmodule_app account.so\nmodule_app menu.so\n",
            tone.display(),
            rtp + 20
        ),
    )
    .unwrap();
    std::fs::write(
        bs.join("accounts"),
        format!(
            "<sip:callee@127.0.0.1:{callee}>;regint=0;answermode=auto;mediaenc=srtp-mand;audio_codecs=PCMA\n"
        ),
    )
    .unwrap();
    std::fs::write(bs.join("contacts"), "").unwrap();
    let bs_log_path = dir.join("baresip.log");
    let bs_log = std::fs::File::create(&bs_log_path).unwrap();
    let _baresip = spawn(
        Command::new(&baresip)
            .arg("-f")
            .arg(&bs)
            .args(["-t", "30"])
            .stdout(bs_log.try_clone().unwrap())
            .stderr(bs_log),
    );
    let ready = Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(&bs_log_path)
        .unwrap_or_default()
        .contains("baresip is ready")
    {
        assert!(Instant::now() < ready, "baresip did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    proxy.call(&sipp, &dir.join("uac.msg"));
    std::thread::sleep(Duration::from_millis(300));
    let log = std::fs::read_to_string(&bs_log_path).unwrap();
    // baresip negotiated SDES with secrelay, and decoded what secrelay protected for it:
    // its receive bit rate (the second figure of "audio=tx/rx") went above zero.
    assert!(log.contains("SRTP is Enabled"), "{log}");
    let rx_max = log
        .split("audio=")
        .skip(1)
        .filter_map(|r| r.split_whitespace().next())
        .filter_map(|r| r.split('/').nth(1)?.parse::<u64>().ok())
        .max()
        .unwrap_or(0);
    assert!(
        rx_max > 10_000,
        "baresip received no media it could decrypt:\n{log}"
    );
    // The caller's 130-odd packets one way, baresip's 4 s of tone (200 packets) the other.
    proxy.check(300);
    proxy.server.shutdown();
}

/// 10 s of a 660 Hz tone, 8 kHz mono 16-bit WAV.
fn write_tone(path: &Path) {
    let n = 8000 * 10;
    let mut w = Vec::with_capacity(44 + 2 * n);
    let data_len = (2 * n) as u32;
    w.extend_from_slice(b"RIFF");
    w.extend_from_slice(&(36 + data_len).to_le_bytes());
    w.extend_from_slice(b"WAVEfmt ");
    w.extend_from_slice(&16u32.to_le_bytes());
    w.extend_from_slice(&1u16.to_le_bytes());
    w.extend_from_slice(&1u16.to_le_bytes());
    w.extend_from_slice(&8000u32.to_le_bytes());
    w.extend_from_slice(&16000u32.to_le_bytes());
    w.extend_from_slice(&2u16.to_le_bytes());
    w.extend_from_slice(&16u16.to_le_bytes());
    w.extend_from_slice(b"data");
    w.extend_from_slice(&data_len.to_le_bytes());
    for i in 0..n {
        let v = (8000.0 * (2.0 * std::f64::consts::PI * 660.0 * i as f64 / 8000.0).sin()) as i16;
        w.extend_from_slice(&v.to_le_bytes());
    }
    std::fs::write(path, w).unwrap();
}
