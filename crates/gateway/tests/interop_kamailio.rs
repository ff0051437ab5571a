//! A real SIP proxy drives secrelay: Kamailio (Debian's package, its `rtpengine` module pointed
//! at secrelay's ng socket on loopback) proxies calls between SIP user agents nobody here
//! wrote. Once with plain RTP on both sides (SIPp from Debian's `sip-tester`: the caller plays
//! a recorded G.711 stream, the callee echoes every RTP packet back), once with the callee's
//! side turned into SDES-SRTP by the offer's flags (`RTP/SAVP`) and baresip answering it with
//! SRTP of its own. Each call is answered, the SDPs are rewritten to secrelay's address and
//! ports, the media goes through secrelay both ways, and the BYE's `delete` gives the ports
//! back. A third call transcodes: baresip offering only Opus calls a baresip that answers only
//! PCMA, Kamailio asking for `codec-mask=opus codec-transcode=PCMA` as rtpengine's users do, and
//! each side hears the other's tone (decoded by baresip, dumped to WAV, found by Goertzel). A
//! fourth call is G.729, which secrelay cannot decode: relayed both ways untouched. A fifth is
//! put on hold by a re-INVITE (`a=sendonly`) and taken back (`a=sendrecv`), each re-INVITE
//! offered through secrelay and reaching the callee as the caller wrote it. In a sixth, the
//! caller sends a digit in a SIP INFO; Kamailio's `play_dtmf()` has secrelay play it into the
//! caller's audio, and baresip, the callee, hears it.
//! Scenarios and the proxy's configuration: `interop/sip/`.
//!
//! Kamailio, SIPp and baresip are installed by `scripts/setup`; with `CI` set their absence
//! fails the test, elsewhere it is skipped with the reason.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use secrelay_gateway::server::{ServeConfig, Server};
use secrelay_wire::pcap::Capture;

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

/// A free port on loopback for a SIP listener or an RTP range: UDP and TCP both free on it and
/// on the three ports after it (baresip listens for SIP over UDP and TCP on its port and for SIP
/// over TLS on the next one; RTP takes an even port and RTCP the odd one after it; SIPp's video
/// takes the pair after its audio), claimed until the process ends against every other test
/// process (SIPp once failed to bind a port another test's peer had taken).
fn free_port() -> u16 {
    secrelay_testkit::ports::reserve_for_process(4)
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
    fn start(
        kamailio: &Path,
        callee: u16,
        offer_flags: &str,
        range: (u16, u16),
        plain_latch: &str,
    ) -> Proxy {
        Proxy::with(
            kamailio,
            callee,
            offer_flags,
            range,
            ServeConfig {
                plain_latch: plain_latch.into(),
                ..ServeConfig::default()
            },
        )
    }

    /// [`Proxy::start`] with secrelay's media `interfaces` (`NAME/LOCAL`, rtpengine's form).
    fn start_on(
        kamailio: &Path,
        callee: u16,
        offer_flags: &str,
        range: (u16, u16),
        interfaces: Vec<String>,
    ) -> Proxy {
        Proxy::with(
            kamailio,
            callee,
            offer_flags,
            range,
            ServeConfig {
                interfaces,
                ..ServeConfig::default()
            },
        )
    }

    /// secrelay made from `config` (its sockets and ports this proxy's), and Kamailio.
    fn with(
        kamailio: &Path,
        callee: u16,
        offer_flags: &str,
        range: (u16, u16),
        config: ServeConfig,
    ) -> Proxy {
        let server = Server::start(ServeConfig {
            http: Some("127.0.0.1:0".parse().unwrap()),
            udp: "127.0.0.1:0".parse().unwrap(),
            ng: Some("127.0.0.1:0".parse().unwrap()),
            workers: 2,
            rtp_ports: format!("{}-{}", range.0, range.1),
            drain_secs: 0.1,
            ..config
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
        self.call_with(sipp, &repo().join("interop/sip/uac.xml"), msg_log, &[]);
    }

    /// The SIPp caller's call of `scenario` through the proxy.
    fn call_with(&self, sipp: &Path, scenario: &Path, msg_log: &Path, keys: &[(&str, &str)]) {
        let mut cmd = Command::new(sipp);
        for (k, v) in keys {
            cmd.args(["-key", k, v]);
        }
        let out = cmd
            .arg("-sf")
            .arg(scenario)
            .args(["-i", "127.0.0.1", "-p", &free_port().to_string()])
            .args(["-mp", &free_port().to_string()])
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
    /// routed and forwarded), nothing dropped for codecs, sources or authentication (but up to
    /// `unlatched` from sources a NAT-latching leg did not latch to), every ng request
    /// answered, the ports given back after the BYE.
    fn check(&self, both_ways: u64, unlatched: u64) {
        let t = self.server.gateway().stats().totals();
        assert!(t.media_routed >= both_ways, "{t:?}");
        assert!(t.media_forwarded >= both_ways, "{t:?}");
        for (reason, most) in [
            ("no_codec", 0),
            ("unlatched_source", unlatched),
            ("receiver_not_ready", 0),
            ("auth_failed", 0),
            ("undecodable", 0),
        ] {
            assert!(
                !t.drops_by_reason
                    .iter()
                    .any(|(r, n)| *r == reason && *n > most),
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
        "signalled",
    );
    let dir = proxy.dir.path().to_path_buf();
    let uas_log = dir.join("uas.msg");
    let uac_log = dir.join("uac.msg");
    let _uas = echo_callee(&sipp, &repo().join("interop/sip/uas.xml"), callee, &uas_log);
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
    proxy.check(200, 0);
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
        "signalled",
    );
    // baresip as the callee: answers at once, SRTP (SDES) mandatory, G.711 A-law, sending a
    // 660 Hz tone from a WAV file.
    let dir = proxy.dir.path().to_path_buf();
    let bs = dir.join("baresip");
    std::fs::create_dir_all(&bs).unwrap();
    let tone = bs.join("tone.wav");
    write_tone(&tone);
    let rtp = free_port();
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
    proxy.check(300, 0);
    proxy.server.shutdown();
}

/// A baresip user agent in `dir` (its user name the folder's) listening on `sip`: `codec` only
/// (its module and the account's `audio_codecs`, whose channels it runs its audio with),
/// sending `tone` Hz from a WAV file at `rate`, dumping what it decodes to a WAV file in `dir`
/// (its `sndfile` module: see [`heard`]); answering calls at once. Its log is `dir/log`.
fn baresip_ua(
    baresip: &Path,
    dir: &Path,
    sip: u16,
    codec: (&str, &str),
    tone: (f64, u32),
    extra: &[&str],
) -> Reap {
    std::fs::create_dir_all(dir).unwrap();
    let source = dir.join("tone.wav");
    let channels: u16 = if codec.1.ends_with("/2") { 2 } else { 1 };
    write_wav(&source, tone.0, tone.1, channels);
    let rtp = free_port();
    std::fs::write(
        dir.join("config"),
        format!(
            "poll_method epoll\nsip_listen 127.0.0.1:{sip}\nsip_trans_def udp\n\
             audio_player aubridge,heard\naudio_source aufile,{src}\naudio_alert aufile,/dev/null\n\
             audio_srate {rate}\naudio_channels {channels}\nrtp_ports {rtp}-{rtp_end}\n\
             snd_path {dir}\n\
             module_path /usr/lib/baresip/modules\nmodule {module}\nmodule aufile.so\n\
             module aubridge.so\nmodule sndfile.so\n\
             module stdio.so\nmodule_app account.so\nmodule_app menu.so\n",
            dir = dir.display(),
            src = source.display(),
            rate = tone.1,
            rtp_end = rtp + 20,
            module = codec.0,
        ),
    )
    .unwrap();
    std::fs::write(
        dir.join("accounts"),
        format!(
            "<sip:{user}@127.0.0.1:{sip}>;regint=0;answermode=auto;audio_codecs={}\n",
            codec.1,
            user = dir.file_name().and_then(|n| n.to_str()).unwrap_or("ua"),
        ),
    )
    .unwrap();
    std::fs::write(dir.join("contacts"), "").unwrap();
    let log = std::fs::File::create(dir.join("log")).unwrap();
    spawn(
        Command::new(baresip)
            .arg("-f")
            .arg(dir)
            .args(extra)
            .stdout(log.try_clone().unwrap())
            .stderr(log),
    )
}

/// Waits (10 s at most) until the baresip user agent in `dir` says it is ready.
fn wait_ready(dir: &Path) {
    let start = Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(dir.join("log"))
        .unwrap_or_default()
        .contains("baresip is ready")
    {
        assert!(
            Instant::now() < start,
            "baresip in {} did not start",
            dir.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// [`heard`] once the user agent in `dir` wrote its dump out (it does when the BYE ends its
/// call: 10 s at most for more than 2 s of audio).
fn dumped(dir: &Path) -> (Vec<i16>, u32) {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let (pcm, rate) = heard(dir);
        if pcm.len() > rate as usize * 2 || Instant::now() > until {
            return (pcm, rate);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// What the baresip user agent in `dir` decoded in its call (the `sndfile` module's dump of
/// the decoder's side).
fn heard(dir: &Path) -> (Vec<i16>, u32) {
    let dump = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("dump-") && n.ends_with("-dec.wav"))
        });
    dump.map_or((Vec::new(), 0), |p| read_wav(&p))
}

/// The samples of a 16-bit WAV file (its `data` chunk; the first channel), and its rate.
fn read_wav(path: &Path) -> (Vec<i16>, u32) {
    let b = std::fs::read(path).unwrap_or_default();
    let rate = b
        .get(24..28)
        .map_or(0, |r| u32::from_le_bytes([r[0], r[1], r[2], r[3]]));
    let channels = b
        .get(22..24)
        .map_or(1, |c| usize::from(u16::from_le_bytes([c[0], c[1]])).max(1));
    let mut at = 12;
    while at + 8 <= b.len() {
        let len = u32::from_le_bytes([b[at + 4], b[at + 5], b[at + 6], b[at + 7]]) as usize;
        if &b[at..at + 4] == b"data" {
            let end = (at + 8 + len).min(b.len());
            let pcm = b[at + 8..end]
                .chunks_exact(2 * channels)
                .map(|c| i16::from_le_bytes([c[0], c[1]]))
                .collect();
            return (pcm, rate);
        }
        at += 8 + len;
    }
    (Vec::new(), rate)
}

#[test]
fn kamailio_transcodes_an_opus_only_caller_to_a_pcma_only_callee_and_back() {
    let test = "kamailio_transcodes_an_opus_only_caller_to_a_pcma_only_callee_and_back";
    let Some(kamailio) = find("kamailio", &["/usr/sbin/kamailio"]) else {
        return missing(test, "no kamailio (Debian package kamailio)");
    };
    let Some(baresip) = find("baresip", &[]) else {
        return missing(test, "no baresip (Debian package baresip-core)");
    };
    for module in ["opus.so", "g711.so", "aufile.so"] {
        if !Path::new("/usr/lib/baresip/modules").join(module).is_file() {
            return missing(
                test,
                &format!("no baresip module {module} (Debian package baresip-core)"),
            );
        }
    }
    let callee = free_port();
    // As rtpengine's users write it: the callee is offered PCMA instead of Opus.
    let proxy = Proxy::start(
        &kamailio,
        callee,
        "replace-origin replace-session-connection ICE=remove codec-mask=opus codec-transcode=PCMA",
        (49400, 49599),
        // baresip's SDP names its interface's address and it sends from loopback, as a phone
        // behind NAT does: latched to the first source.
        "first-packets",
    );
    let dir = proxy.dir.path().to_path_buf();
    // The callee: PCMA only, a 450 Hz tone at 8 kHz.
    let _callee = baresip_ua(
        &baresip,
        &dir.join("callee"),
        callee,
        ("g711.so", "PCMA"),
        (450.0, 8000),
        &["-t", "30"],
    );
    wait_ready(&dir.join("callee"));
    // The caller: Opus only, a 1 kHz tone at 48 kHz; dials through the proxy, quits after 8 s.
    let dial = format!("/dial sip:callee@127.0.0.1:{}", proxy.sip);
    let mut caller = baresip_ua(
        &baresip,
        &dir.join("caller"),
        free_port(),
        ("opus.so", "opus/48000/2"),
        (1000.0, 48_000),
        &["-e", &dial, "-t", "8"],
    );
    let end = Instant::now() + Duration::from_secs(30);
    while caller.0.try_wait().unwrap().is_none() {
        assert!(Instant::now() < end, "the caller's baresip did not end");
        std::thread::sleep(Duration::from_millis(100));
    }
    let logs = || {
        format!(
            "secrelay: {:?}\ncaller:\n{}\ncallee:\n{}\nKamailio:\n{}",
            proxy.server.gateway().stats().totals(),
            std::fs::read_to_string(dir.join("caller/log")).unwrap_or_default(),
            std::fs::read_to_string(dir.join("callee/log")).unwrap_or_default(),
            proxy.log()
        )
    };
    // Each heard the other's tone, in its own codec.
    for (who, want, other) in [("callee", 1000.0, 450.0), ("caller", 450.0, 1000.0)] {
        let (pcm, rate) = dumped(&dir.join(who));
        assert!(
            pcm.len() > rate as usize * 2,
            "the {who} heard {} samples at {rate} Hz\n{}",
            pcm.len(),
            logs()
        );
        // The loudest second of it.
        let second = rate as usize;
        let best = pcm
            .chunks_exact(second)
            .max_by_key(|c| c.iter().map(|s| i64::from(*s).abs()).sum::<i64>())
            .unwrap();
        let p = secrelay_media::tone::goertzel_power(best, rate, want);
        let q = secrelay_media::tone::goertzel_power(best, rate, other);
        let share = secrelay_media::tone::tone_share(best, rate, want);
        assert!(
            share > 0.5 && p > 100.0 * q,
            "the {who} heard {want} Hz as {share:.2} of its signal (power {p:.0}, {other} Hz {q:.0})"
        );
    }
    let t = proxy.server.gateway().stats().totals();
    assert!(t.media_transcoded > 200 && t.media_decoded > 200, "{t:?}");
    // baresip's RTCP goes out from its RTP port + 1 before a packet latched that port: one or
    // two such drops under first-packets latching.
    proxy.check(400, 2);
    proxy.server.shutdown();
}

/// 10 s of a `hz` tone at `rate`, 16-bit WAV of `channels` (the same in each).
fn write_wav(path: &Path, hz: f64, rate: u32, channels: u16) {
    let tone = secrelay_media::tone::sine(rate, hz, 8000.0, rate as usize * 10);
    let samples: Vec<i16> = tone
        .iter()
        .flat_map(|&v| std::iter::repeat_n(v, usize::from(channels)))
        .collect();
    std::fs::write(
        path,
        secrelay_media::clip::wav_pcm16(rate, channels, &samples),
    )
    .unwrap();
}

/// 10 s of a 660 Hz tone, 8 kHz mono 16-bit WAV.
fn write_tone(path: &Path) {
    write_wav(path, 660.0, 8000, 1);
}

/// A SIPp callee of `scenario` on `port`, echoing the media it receives.
fn echo_callee(sipp: &Path, scenario: &Path, port: u16, log: &Path) -> Reap {
    echo_callee_at(sipp, scenario, port, log, "127.0.0.1")
}

#[test]
fn kamailio_relays_a_g729_call_it_cannot_decode_without_touching_it() {
    let test = "kamailio_relays_a_g729_call_it_cannot_decode_without_touching_it";
    let Some((kamailio, sipp)) = tools(test) else {
        return;
    };
    let callee = free_port();
    let proxy = Proxy::start(
        &kamailio,
        callee,
        "replace-origin replace-session-connection ICE=remove",
        (49400, 49599),
        "signalled",
    );
    let dir = proxy.dir.path().to_path_buf();
    // SIPp's A-law recording relabelled G.729 (payload type 18): to a relay, payload is bytes.
    let mut capture =
        Capture::parse(&std::fs::read("/usr/share/sip-tester/g711a.pcap").unwrap()).unwrap();
    for p in &mut capture.packets {
        let Some(mut rtp) = p.udp_payload().map(<[u8]>::to_vec) else {
            continue;
        };
        if rtp.len() > 12 {
            rtp[1] = (rtp[1] & 0x80) | 18;
            p.replace_udp_payload(&rtp).unwrap();
        }
    }
    let pcap = dir.join("g729.pcap");
    std::fs::write(&pcap, capture.to_bytes().unwrap()).unwrap();
    let g729 = |name: &str| {
        let xml = std::fs::read_to_string(repo().join("interop/sip").join(name))
            .unwrap()
            .replace("RTP/AVP 8", "RTP/AVP 18")
            .replace("a=rtpmap:8 PCMA/8000", "a=rtpmap:18 G729/8000")
            .replace("/usr/share/sip-tester/g711a.pcap", pcap.to_str().unwrap());
        let path = dir.join(name);
        std::fs::write(&path, xml).unwrap();
        path
    };
    let uas_log = dir.join("uas.msg");
    let _uas = echo_callee(&sipp, &g729("uas.xml"), callee, &uas_log);
    proxy.call_with(&sipp, &g729("uac.xml"), &dir.join("uac.msg"), &[]);
    let uas = std::fs::read_to_string(&uas_log).unwrap();
    assert!(
        uas.contains("m=audio") && uas.contains("RTP/AVP 18"),
        "{uas}"
    );
    // Relayed both ways, and never decoded or encoded on the way.
    proxy.check(200, 0);
    let t = proxy.server.gateway().stats().totals();
    assert_eq!((t.media_decoded, t.media_transcoded), (0, 0), "{t:?}");
    proxy.server.shutdown();
}

#[test]
fn kamailio_puts_a_call_on_hold_through_secrelay_and_takes_it_back() {
    let test = "kamailio_puts_a_call_on_hold_through_secrelay_and_takes_it_back";
    let Some((kamailio, sipp)) = tools(test) else {
        return;
    };
    let callee = free_port();
    let proxy = Proxy::start(
        &kamailio,
        callee,
        "replace-origin replace-session-connection ICE=remove",
        (49600, 49799),
        "signalled",
    );
    let dir = proxy.dir.path().to_path_buf();
    let uas_log = dir.join("uas.msg");
    let _uas = echo_callee(
        &sipp,
        &repo().join("interop/sip/uas_hold.xml"),
        callee,
        &uas_log,
    );
    proxy.call_with(
        &sipp,
        &repo().join("interop/sip/uac_hold.xml"),
        &dir.join("uac.msg"),
        &[],
    );
    // The hold reached the callee as the caller wrote it, through secrelay's ports, and so
    // did the resume.
    let uas = std::fs::read_to_string(&uas_log).unwrap();
    let invites: Vec<&str> = uas.split("INVITE sip:").skip(1).collect();
    assert_eq!(invites.len(), 3, "{uas}");
    assert!(invites[1].contains("a=sendonly"), "{}", invites[1]);
    assert!(invites[2].contains("a=sendrecv"), "{}", invites[2]);
    let announce = proxy.server.gateway().candidate().ip().to_string();
    for i in &invites {
        assert!(i.contains(&format!("c=IN IP4 {announce}")), "{i}");
    }
    // The recording played twice, before the hold and after it, and echoed: both relayed.
    proxy.check(400, 0);
    proxy.server.shutdown();
}

/// A SIPp callee whose media socket is on `media_ip` (IPv4 or IPv6), echoing what it receives.
fn echo_callee_at(sipp: &Path, scenario: &Path, port: u16, log: &Path, media_ip: &str) -> Reap {
    let r = spawn(
        Command::new(sipp)
            .arg("-sf")
            .arg(scenario)
            .args(["-i", "127.0.0.1", "-p", &port.to_string()])
            .args(["-mi", media_ip, "-mp", &free_port().to_string()])
            .args([
                "-rtp_echo",
                "-m",
                "1",
                "-nostdin",
                "-trace_msg",
                "-message_file",
            ])
            .arg(log)
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    std::thread::sleep(Duration::from_millis(300));
    r
}

/// A call through `proxy` to a SIPp callee on `callee` whose media socket is on `media_ip`,
/// echoing the recording the caller plays: the `c=` lines of the INVITE the callee got and of
/// the 200 OK the caller got, once the media went both ways and the ports came back.
fn echoed_call(proxy: &Proxy, sipp: &Path, callee: u16, media_ip: &str) -> (String, String) {
    let dir = proxy.dir.path();
    let (uas_log, uac_log) = (dir.join("uas.msg"), dir.join("uac.msg"));
    let scenario = repo().join("interop/sip/uas.xml");
    let _uas = echo_callee_at(sipp, &scenario, callee, &uas_log, media_ip);
    proxy.call(sipp, &uac_log);
    let uas = std::fs::read_to_string(&uas_log).unwrap();
    let uac = std::fs::read_to_string(&uac_log).unwrap();
    proxy.check(200, 0);
    let offered = connection_after(&uas, "INVITE sip:").unwrap_or_else(|| panic!("{uas}"));
    let answered = connection_after(&uac, "SIP/2.0 200 OK").unwrap_or_else(|| panic!("{uac}"));
    (offered, answered)
}

/// The `c=` line of the first SDP after `first_line` in a SIPp message log.
fn connection_after(log: &str, first_line: &str) -> Option<String> {
    let at = log.find(first_line)?;
    log[at..]
        .lines()
        .find(|l| l.trim().starts_with("c=IN "))
        .map(|l| l.trim().to_owned())
}

#[test]
fn kamailio_bridges_two_named_interfaces_through_secrelay() {
    let test = "kamailio_bridges_two_named_interfaces_through_secrelay";
    let Some((kamailio, sipp)) = tools(test) else {
        return;
    };
    let callee = free_port();
    // The caller's side on `internal`, the callee's on `external` (two loopback addresses).
    let proxy = Proxy::start_on(
        &kamailio,
        callee,
        "replace-origin replace-session-connection ICE=remove direction=internal direction=external",
        (49800, 49899),
        vec!["internal/127.0.0.1".into(), "external/127.0.0.2".into()],
    );
    let (offered, answered) = echoed_call(&proxy, &sipp, callee, "127.0.0.1");
    assert_eq!(offered, "c=IN IP4 127.0.0.2");
    assert_eq!(answered, "c=IN IP4 127.0.0.1");
    proxy.server.shutdown();
}

#[test]
fn kamailio_reaches_an_ipv6_callee_through_secrelay() {
    let test = "kamailio_reaches_an_ipv6_callee_through_secrelay";
    let Some((kamailio, sipp)) = tools(test) else {
        return;
    };
    let callee = free_port();
    // One interface of each family; `address-family=IP6` puts the callee's side on IPv6.
    let proxy = Proxy::start_on(
        &kamailio,
        callee,
        "replace-origin replace-session-connection ICE=remove address-family=IP6",
        (49900, 49999),
        vec!["127.0.0.1".into(), "::1".into()],
    );
    let (offered, answered) = echoed_call(&proxy, &sipp, callee, "::1");
    assert_eq!(offered, "c=IN IP6 ::1");
    assert_eq!(answered, "c=IN IP4 127.0.0.1");
    proxy.server.shutdown();
}

/// A call through `proxy` from a SIPp caller (A-law) that sends a SIP INFO of `info` (its
/// Content-Type and one-line body) to baresip on port `callee` (A-law, sending a 450 Hz tone):
/// what baresip heard, 8 kHz PCM from its decoder's dump.
fn heard_around_an_info(
    proxy: &Proxy,
    (sipp, baresip): (&Path, &Path),
    callee: u16,
    info: (&str, &str),
) -> Vec<i16> {
    let dir = proxy.dir.path().to_path_buf();
    let _callee = baresip_ua(
        baresip,
        &dir.join("callee"),
        callee,
        ("g711.so", "PCMA"),
        (450.0, 8000),
        &["-t", "30"],
    );
    wait_ready(&dir.join("callee"));
    proxy.call_with(
        sipp,
        &repo().join("interop/sip/uac_info.xml"),
        &dir.join("uac.msg"),
        &[("info_type", info.0), ("info_body", info.1)],
    );
    let (pcm, rate) = dumped(&dir.join("callee"));
    assert_eq!(rate, 8000, "the callee's dump");
    pcm
}

/// A digit sent out of band reaches the callee in its audio: a SIPp caller (A-law, no
/// telephone-event) sends a SIP INFO with `Signal=5` (application/dtmf-relay) in its call;
/// Kamailio answers it after its `play_dtmf()` had secrelay play the digit into the caller's
/// media; baresip, the callee, decodes the caller's audio and hears the digit's two tones in
/// it (found by Goertzel in its dump).
#[test]
fn kamailio_plays_a_sip_info_digit_into_the_callers_audio_through_secrelay() {
    let test = "kamailio_plays_a_sip_info_digit_into_the_callers_audio_through_secrelay";
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
        "replace-origin replace-session-connection ICE=remove",
        (49800, 49999),
        "first-packets",
    );
    let pcm = heard_around_an_info(
        &proxy,
        (&sipp, &baresip),
        callee,
        ("application/dtmf-relay", "Signal=5"),
    );
    assert_eq!(
        secrelay_media::inband::digits_heard(&pcm, 8000),
        "5",
        "the digits the callee heard; Kamailio:\n{}",
        proxy.log()
    );
    proxy.check(100, 0);
    proxy.server.shutdown();
}

/// An announcement played to the callee from a SIP proxy: the SIPp caller's INFO names a file
/// (an operator's trigger, `application/x-announce`); Kamailio's `play_media()` (configuration
/// in `interop/sip/kamailio.cfg.in`, the callee's tag as `from-tag`) has secrelay play it from
/// its `media_dir` to the callee; baresip, the callee, hears the file's 1 kHz tone in place of
/// the caller's speech for as long as the file lasts (Goertzel in its dump), and the caller's
/// speech before and after it.
#[test]
fn kamailio_plays_a_file_to_the_callee_through_secrelay() {
    let test = "kamailio_plays_a_file_to_the_callee_through_secrelay";
    let Some((kamailio, sipp)) = tools(test) else {
        return;
    };
    let Some(baresip) = find("baresip", &[]) else {
        return missing(test, "no baresip (Debian package baresip-core)");
    };
    let media = tempfile::tempdir().unwrap();
    let tone = secrelay_media::tone::sine(16_000, 1000.0, 8000.0, 16_000);
    std::fs::write(
        media.path().join("announce.wav"),
        secrelay_media::clip::wav_pcm16(16_000, 1, &tone),
    )
    .unwrap();
    let callee = free_port();
    let proxy = Proxy::with(
        &kamailio,
        callee,
        "replace-origin replace-session-connection ICE=remove",
        (48600, 48799),
        ServeConfig {
            plain_latch: "first-packets".into(),
            media_dir: Some(media.path().to_owned()),
            ..ServeConfig::default()
        },
    );
    let pcm = heard_around_an_info(
        &proxy,
        (&sipp, &baresip),
        callee,
        ("application/x-announce", "File=announce.wav"),
    );
    // 100 ms windows: those the file's tone fills, and those of the caller's speech.
    let windows: Vec<f64> = pcm
        .chunks_exact(800)
        .map(|w| secrelay_media::tone::tone_share(w, 8000, 1000.0))
        .collect();
    let toned = windows.iter().filter(|&&s| s > 0.9).count();
    let first = windows.iter().position(|&s| s > 0.9);
    let last = windows.iter().rposition(|&s| s > 0.9);
    assert!(
        (8..=11).contains(&toned),
        "{toned} windows of the 1 s file's tone ({windows:.2?}); Kamailio:\n{}",
        proxy.log()
    );
    let (first, last) = (first.unwrap(), last.unwrap());
    assert!(last - first < 12, "one stretch: {windows:.2?}");
    let speech = |w: &[f64]| w.iter().filter(|&&s| s < 0.5).count();
    assert!(
        speech(&windows[..first]) >= 5,
        "the caller before it: {windows:.2?}"
    );
    assert!(
        speech(&windows[last + 1..]) >= 5,
        "the caller after it: {windows:.2?}"
    );
    let played_over = proxy
        .server
        .gateway()
        .stats()
        .totals()
        .drops_by_reason
        .iter()
        .find(|(r, _)| *r == "played_over")
        .map_or(0, |(_, n)| *n);
    assert!(
        played_over >= 30,
        "the caller's speech not sent meanwhile: {played_over}"
    );
    proxy.check(100, 0);
    proxy.server.shutdown();
}
