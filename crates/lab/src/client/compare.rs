//! `secrelay lab relay-compare`: secrelay's gateway and rtpengine relaying SRTP→SRTP with
//! re-encryption at the same offered packet rates on this machine, one worker thread each,
//! with each relay's CPU per relayed packet read from `/proc`.
//!
//! Both relays get the same calls through the same ng protocol from the same load generator:
//! SDES-SRTP calls with the two legs on different suites (so every packet is decrypted and
//! encrypted again), and plain RTP calls. secrelay also gets WebRTC participants in rooms of
//! two (DTLS-SRTP keys, a different key per leg). Every load generator sends G.711 20 ms
//! packets from one UDP socket per leg and opens what comes back, so the relays see the same
//! packet sizes, rates and socket counts; keying is done before the window is measured.

use std::io::{BufRead, BufReader};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};
use serde::Serialize;

use super::load::{self, proc_sample, LoadOptions};
use super::rtpengine::{create_calls, delete_calls, drive, Keying, Ng};
use secrelay_testkit::fleet::{FleetConfig, FleetProgress};
use secrelay_testkit::{Leg, Signaling};

/// One relay at one offered rate.
#[derive(Debug, Clone, Serialize)]
pub struct RelayRow {
    /// `secrelay` or `rtpengine`.
    pub relay: String,
    /// How secrelay's worker read and wrote its sockets (`io_uring`, `mmsg`, `auto`);
    /// `None` for rtpengine.
    pub media_io: Option<String>,
    /// The legs: `sdes` (SDES-SRTP on different suites, through ng), `plain` (plain RTP,
    /// through ng) or `webrtc` (DTLS-SRTP participants over HTTP; secrelay only).
    pub legs: String,
    /// Packets per second offered to the relay.
    pub offered_pps: u64,
    /// Seconds measured.
    pub secs: f64,
    /// Packets the legs received back (relayed).
    pub relayed: u64,
    /// Packets lost (from sequence numbers at the receiving legs).
    pub lost: u64,
    /// Packets the legs sent.
    pub sent: u64,
    /// Packets that reached a leg and failed to unprotect.
    pub rx_errors: u64,
    /// RTCP packets of the relay's own that reached the legs (secrelay's reports; rtpengine
    /// sends none of its own). Not counted as relayed.
    pub rtcp_from_relay: u64,
    /// Relay CPU seconds over the window.
    pub cpu_secs: f64,
    /// Relay CPU per relayed packet, µs.
    pub cpu_us_per_relayed: f64,
    /// Of that, in user space (`utime`), µs.
    pub user_us_per_relayed: f64,
    /// Of that, in the kernel on the relay's behalf (`stime`), µs.
    pub kernel_us_per_relayed: f64,
}

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The plain HTTP base URL (`http://ip:port`) in one line of `secrelay serve`'s start-up
/// banner (its `HTTP` line), or `None` for any other line.
pub fn serve_banner_url(line: &str) -> Option<String> {
    secrelay_gateway::server::BannerReader::of_line(line)
        .http
        .map(|a| format!("http://{a}"))
}

fn free_udp_port() -> anyhow::Result<u16> {
    Ok(std::net::UdpSocket::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// `secrelay serve` on loopback with one worker, quiet.
const SERVE_ONE_WORKER: [&str; 9] = [
    "serve",
    "--http",
    "127.0.0.1:0",
    "--udp",
    "127.0.0.1:0",
    "--workers",
    "1",
    "--log",
    "warn",
];

/// A configuration file for a gateway under measurement: `extra`, and no call refused for load
/// while the calls are set up (rtpengine refuses none either: at 100 k packets/s on one worker
/// the load of the calls already flowing would otherwise refuse the last ones).
fn measuring_config(extra: &str) -> anyhow::Result<tempfile::NamedTempFile> {
    use std::io::Write as _;
    let mut config = tempfile::NamedTempFile::new().context("the gateway's config file")?;
    write!(config, "shed_joins_at = 2.0\n{extra}").context("writing the gateway's config file")?;
    Ok(config)
}

/// Which relay an ng row runs.
#[derive(Debug, Clone, Copy)]
pub enum NgRelay<'a> {
    /// rtpengine (Debian's rtpengine-daemon), userspace forwarding, one thread.
    Rtpengine(&'a Path),
    /// `secrelay serve --ng` (this executable), one worker, its sockets read and written as
    /// `media_io` says (`auto`, `io_uring`, `mmsg`).
    Secrelay {
        /// The executable.
        exe: &'a Path,
        /// Its `--media-io`.
        media_io: &'a str,
    },
}

/// Runs one relay at one rate with calls set up through its ng socket, keyed as `keying`
/// says; the relay's CPU (user and kernel) over the media window from `/proc`.
pub fn ng_row(relay: NgRelay<'_>, pps: u64, secs: f64, keying: Keying) -> anyhow::Result<RelayRow> {
    let ng_port = free_udp_port()?;
    let ng_listen = format!("127.0.0.1:{ng_port}");
    let config = measuring_config("")?;
    let (name, mut command) = match relay {
        NgRelay::Rtpengine(binary) => {
            let mut c = Command::new(binary);
            c.args([
                "--config-file=none",
                "--interface=127.0.0.1",
                &format!("--listen-ng={ng_listen}"),
                "--foreground",
                "--log-stderr",
                "--log-level=3",
                "--table=-1",
                "--num-threads=1",
                "--port-min=20000",
                "--port-max=29999",
            ]);
            ("rtpengine", c)
        }
        NgRelay::Secrelay { exe, media_io } => {
            let mut c = Command::new(exe);
            c.args(SERVE_ONE_WORKER)
                .args(["--ng", &ng_listen, "--rtp-ports", "30000-39999"])
                .args(["--media-io", media_io])
                .arg("--config")
                .arg(config.path());
            ("secrelay", c)
        }
    };
    let child = command
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("starting {name}"))?;
    let child = KillOnDrop(child);
    let pid = child.0.id();
    let mut ng = Ng::new(SocketAddr::from(([127, 0, 0, 1], ng_port)))?;
    let up = Instant::now() + Duration::from_secs(10);
    while ng
        .call(vec![(
            "command".into(),
            super::rtpengine::Bencode::Str("ping".into()),
        )])
        .is_err()
    {
        if Instant::now() > up {
            bail!("{name} did not answer ping on its ng port");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let calls = (pps / 100).max(1) as usize;
    let mut legs = create_calls(&mut ng, calls, keying)?;
    let mut before = None;
    let (measured, received_at_start) = drive(&mut legs, Duration::from_secs_f64(secs), || {
        before = proc_sample(pid).ok();
    })?;
    let after = proc_sample(pid)?;
    let before = before.ok_or_else(|| anyhow!("{name}'s /proc could not be read"))?;
    delete_calls(&mut ng, calls);
    let relayed: u64 = legs.iter().map(|l| l.stream.received).sum();
    let lost: u64 = legs.iter().map(|l| l.stream.lost()).sum();
    let sent: u64 = legs.iter().map(|l| l.sent).sum();
    let rx_errors: u64 = legs.iter().map(|l| l.rx_errors).sum();
    let rtcp_from_relay: u64 = legs.iter().map(|l| l.rtcp_received).sum();
    let in_window = relayed.saturating_sub(received_at_start) as f64;
    let per = |secs: f64| secs * 1e6 / in_window.max(1.0);
    let cpu = after.cpu_secs - before.cpu_secs;
    let media_io = match relay {
        NgRelay::Secrelay { media_io, .. } => Some(media_io.to_string()),
        NgRelay::Rtpengine(_) => None,
    };
    Ok(RelayRow {
        relay: name.into(),
        media_io,
        legs: keying.name().into(),
        offered_pps: pps,
        secs: measured,
        relayed,
        lost,
        sent,
        rx_errors,
        rtcp_from_relay,
        cpu_secs: cpu,
        cpu_us_per_relayed: per(cpu),
        user_us_per_relayed: per(after.user_secs - before.user_secs),
        kernel_us_per_relayed: per(after.system_secs - before.system_secs),
    })
}

/// Runs `secrelay serve` (one worker, `--media-io media_io`) at one rate.
pub fn secrelay_row(exe: &Path, pps: u64, secs: f64, media_io: &str) -> anyhow::Result<RelayRow> {
    let admin = secrelay_testkit::AdminKeyFile::new()?;
    // The load's participants all offer from this host, without a credential: the cap on
    // unconnected anonymous sessions per source is lifted for it.
    let config = measuring_config("max_pending_offers_per_source = 1000000\n")?;
    let mut child = Command::new(exe)
        .args(SERVE_ONE_WORKER)
        .arg("--admin-key-file")
        .arg(admin.path())
        .arg("--config")
        .arg(config.path())
        .args(["--media-io", media_io])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {} serve", exe.display()))?;
    let stderr = child.stderr.take().context("serve's stderr")?;
    let child = KillOnDrop(child);
    let mut url = None;
    let mut lines = BufReader::new(stderr).lines();
    for line in lines.by_ref() {
        url = serve_banner_url(&line?);
        if url.is_some() {
            break;
        }
    }
    let url = url.ok_or_else(|| anyhow!("secrelay serve did not print its HTTP address"))?;
    // The rest of its output is read as it comes (a closed pipe would fail its writes), the
    // last lines kept to say why, should the gateway fail during the run.
    let tail = std::thread::spawn(move || {
        let mut last = std::collections::VecDeque::new();
        for line in lines.map_while(Result::ok) {
            if last.len() == 40 {
                last.pop_front();
            }
            last.push_back(line);
        }
        last.into_iter().collect::<Vec<_>>().join("\n")
    });
    let participants = (pps / 50).max(2) as usize;
    let o = LoadOptions {
        fleet: FleetConfig {
            signaling: Signaling::new(url).with_admin(admin.key()),
            rooms: participants / 2,
            per_room: 2,
            legs: vec![Leg::Join],
            room_prefix: "cmp-".into(),
            duration: Duration::from_secs_f64(secs),
            threads: 1,
            bind_ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
            connect_timeout: Duration::from_secs(60),
            inject_bad: false,
            media: secrelay_testkit::Media::Pcmu,
            transcode: false,
            mix: None,
            ice_tcp: false,
        },
        server_pid: Some(child.0.id()),
        slow_viewer: None,
    };
    let r = match load::run(&o, Arc::new(FleetProgress::default())) {
        Ok(r) => r,
        Err(e) => {
            drop(child);
            let said = tail.join().unwrap_or_default();
            return Err(e.context(format!("secrelay serve's last words:\n{said}")));
        }
    };
    let [user, kernel] = r.gateway_cpu_us_per_relayed_split.unwrap_or([f64::NAN; 2]);
    Ok(RelayRow {
        relay: "secrelay".into(),
        media_io: Some(media_io.into()),
        legs: "webrtc".into(),
        offered_pps: pps,
        secs: r.media_secs,
        relayed: r.received,
        lost: r.lost,
        sent: r.sent,
        rx_errors: 0,
        rtcp_from_relay: 0,
        cpu_secs: r.gateway_cpu_secs.unwrap_or(0.0),
        cpu_us_per_relayed: r.gateway_cpu_us_per_relayed.unwrap_or(f64::NAN),
        user_us_per_relayed: user,
        kernel_us_per_relayed: kernel,
    })
}
