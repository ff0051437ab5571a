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

use super::load::{self, proc_sample, softirq_secs, LoadOptions};
use super::rtpengine::{create_calls, delete_calls, drive, Keying, Ng};
use secrelay_testkit::fleet::{FleetConfig, FleetProgress};
use secrelay_testkit::netns::Netns;
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
    /// Where the relay ran: `loopback` or `veth` ([`Site`]).
    pub site: String,
    /// The machine's softirq time per relayed packet over the window, µs: the kernel's
    /// receive paths and deliveries (the load's and the relay's alike), charged to no
    /// process.
    pub softirq_us_per_relayed: f64,
    /// Where secrelay dropped packets during the window (its `/metrics`, non-zero only): its
    /// drop reasons, and `xsk_kernel` for what the kernel dropped at its XDP socket.
    pub gateway_drops: Vec<(String, f64)>,
}

/// Where a relay under measurement runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Site {
    /// On loopback, beside the load.
    Loopback,
    /// In a network namespace of its own, reached from the load over a veth pair (native XDP
    /// on veth: what the XDP filter and the AF_XDP path need); the load's end of the pair
    /// computes its UDP checksums (veth's offload would leave them unfinished). Needs root.
    /// With `filter`, every secrelay run has the XDP filter in front (the AF_XDP path always
    /// has it), so that the socket paths and the AF_XDP path differ by the path alone.
    Veth {
        /// The XDP filter in front of the socket paths too.
        filter: bool,
    },
}

impl Site {
    /// `loopback` or `veth`.
    pub fn name(self) -> &'static str {
        match self {
            Site::Loopback => "loopback",
            Site::Veth { filter: false } => "veth",
            Site::Veth { filter: true } => "veth+filter",
        }
    }
}

/// A relay's place for one run: its address, the load's, and its namespace (dropped after the
/// relay's process).
struct Placed {
    ns: Option<Netns>,
    /// The XDP filter in front of every secrelay run.
    filter: bool,
    relay: Ipv4Addr,
    here: Ipv4Addr,
    /// The relay's end of the veth pair.
    inside: String,
}

impl Placed {
    fn new(site: Site) -> anyhow::Result<Placed> {
        static RUNS: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);
        let Site::Veth { filter } = site else {
            return Ok(Placed {
                ns: None,
                filter: false,
                relay: Ipv4Addr::LOCALHOST,
                here: Ipv4Addr::LOCALHOST,
                inside: String::new(),
            });
        };
        let ns = Netns::new().context("a network namespace (--site veth needs root)")?;
        let (pid, run) = (
            std::process::id(),
            RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 250,
        );
        // A subnet per run and lab process: a veth pair may linger a moment after its
        // namespace ends.
        let net = 200 + (pid % 50) as u8;
        let (here, relay) = (
            Ipv4Addr::new(10, net, run, 2),
            Ipv4Addr::new(10, net, run, 1),
        );
        let name = |side: &str| {
            format!("src{run}{side}{pid}")
                .chars()
                .take(15)
                .collect::<String>()
        };
        let (outside, inside) = (name("o"), name("i"));
        ns.veth(
            &outside,
            &format!("{here}/24"),
            &inside,
            &format!("{relay}/24"),
        )?;
        secrelay_xsk::set_tx_checksum_offload(&outside, false)?;
        Ok(Placed {
            ns: Some(ns),
            filter,
            relay,
            here,
            inside,
        })
    }

    /// `program`, to run where the relay runs.
    fn command(&self, program: &Path) -> Command {
        match &self.ns {
            Some(ns) => ns.command(program),
            None => Command::new(program),
        }
    }

    /// A port for the relay's ng socket: any in its own namespace; on loopback, a free one
    /// for a relay that cannot say which it bound (rtpengine), else 0: secrelay binds one and
    /// names it in its banner (no other process can take it in between).
    fn ng_port(&self, says_its_port: bool) -> anyhow::Result<u16> {
        match (&self.ns, says_its_port) {
            (Some(_), _) => Ok(2223),
            (None, true) => Ok(0),
            (None, false) => free_udp_port(),
        }
    }

    /// `secrelay serve` with one worker, quiet, on the relay's address, its media read and
    /// written as `media_io` says (`af_xdp`: with the XDP filter on the veth pair, which that
    /// path needs).
    fn serve(&self, exe: &Path, media_io: &str, config: &Path, admin: &Path) -> Command {
        let mut c = self.command(exe);
        let at = format!("{}:0", self.relay);
        c.args([
            "serve",
            "--http",
            &at,
            "--udp",
            &at,
            "--workers",
            "1",
            "--log",
            "warn",
        ])
        .args(["--media-io", media_io])
        .arg("--config")
        .arg(config)
        .arg("--admin-key-file")
        .arg(admin);
        if media_io == "af_xdp" || self.filter {
            c.args(["--xdp", &self.inside]);
        }
        c
    }
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
/// says, the relay where `site` says; the relay's CPU (user and kernel) over the media window
/// from `/proc`, and the machine's softirq time.
pub fn ng_row(
    relay: NgRelay<'_>,
    pps: u64,
    secs: f64,
    keying: Keying,
    site: Site,
) -> anyhow::Result<RelayRow> {
    let place = Placed::new(site)?;
    let ng_port = place.ng_port(matches!(relay, NgRelay::Secrelay { .. }))?;
    let ng_listen = format!("{}:{ng_port}", place.relay);
    let config = measuring_config("")?;
    let admin = secrelay_testkit::AdminKeyFile::new()?;
    let (name, command) = match relay {
        NgRelay::Rtpengine(binary) => {
            let mut c = place.command(binary);
            c.args([
                "--config-file=none",
                &format!("--interface={}", place.relay),
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
            let mut c = place.serve(exe, media_io, config.path(), admin.path());
            // Both relays' ranges lie below the kernel's ephemeral ports (32768 on, as a
            // rule), where the load's phones bind theirs: at 200k/s the load holds 8,000 of
            // them, and a range among them would leave the relay too few pairs.
            c.args(["--ng", &ng_listen, "--rtp-ports", "10000-19999"]);
            ("secrelay", c)
        }
    };
    // secrelay's /metrics say where it dropped what it did (rtpengine's output is not read).
    let (child, served) = match relay {
        NgRelay::Rtpengine(_) => {
            let mut command = command;
            let child = command
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .with_context(|| format!("starting {name}"))?;
            (Some(KillOnDrop(child)), None)
        }
        NgRelay::Secrelay { .. } => (None, Some(Served::start(command)?)),
    };
    let pid = child
        .as_ref()
        .or(served.as_ref().map(|s| &s.child))
        .map(|c| c.0.id())
        .context("no relay process")?;
    let sig = served
        .as_ref()
        .map(|s| Signaling::new(s.url.clone()).with_admin(admin.key()));
    let scrape = |sig: &Signaling| -> anyhow::Result<(load::Scrape, u64)> {
        let xsk = sig.metric("secrelay_xsk_kernel_drops_total").unwrap_or(0);
        Ok((load::scrape(sig)?, xsk))
    };
    let ng_addr = served
        .as_ref()
        .and_then(|s| s.ng)
        .unwrap_or(SocketAddr::from((place.relay, ng_port)));
    let mut ng = Ng::new(ng_addr)?;
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
    let mut legs = create_calls(&mut ng, calls, keying, (place.here, place.relay))?;
    let mut before = None;
    let mut scraped_before = None;
    let (measured, received_at_start) = drive(&mut legs, Duration::from_secs_f64(secs), || {
        before = proc_sample(pid).ok().zip(softirq_secs().ok());
        scraped_before = sig.as_ref().and_then(|s| scrape(s).ok());
    })?;
    let (after, soft_after) = (proc_sample(pid)?, softirq_secs()?);
    // The gateway publishes its counters every 200 ms.
    std::thread::sleep(Duration::from_millis(250));
    let gateway_drops = match (&sig, scraped_before) {
        (Some(sig), Some((b, xb))) => {
            let (a, xa) = scrape(sig)?;
            drops_between(&b, &a, [xb, xa])
        }
        _ => Vec::new(),
    };
    let (before, soft_before) =
        before.ok_or_else(|| anyhow!("{name}'s /proc could not be read"))?;
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
        site: site.name().into(),
        softirq_us_per_relayed: per(soft_after - soft_before),
        gateway_drops,
    })
}

/// Runs `secrelay serve` (one worker, `--media-io media_io`, where `site` says) at one rate.
pub fn secrelay_row(
    exe: &Path,
    pps: u64,
    secs: f64,
    media_io: &str,
    site: Site,
) -> anyhow::Result<RelayRow> {
    let place = Placed::new(site)?;
    let admin = secrelay_testkit::AdminKeyFile::new()?;
    // The load's participants all offer from this host, without a credential: the cap on
    // unconnected anonymous sessions per source is lifted for it.
    let config = measuring_config("max_pending_offers_per_source = 1000000\n")?;
    let served = Served::start(place.serve(exe, media_io, config.path(), admin.path()))?;
    let child = &served.child;
    let url = served.url.clone();
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
            bind_ip: IpAddr::V4(place.here),
            connect_timeout: Duration::from_secs(60),
            inject_bad: false,
            media: secrelay_testkit::Media::Pcmu,
            transcode: false,
            mix: None,
            ice_tcp: false,
            publish_at: None,
        },
        server_pid: Some(child.0.id()),
        slow_viewer: None,
    };
    let r = load::run(&o, Arc::new(FleetProgress::default())).map_err(|e| served.fail(e))?;
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
        site: site.name().into(),
        softirq_us_per_relayed: r.softirq_us_per_relayed.unwrap_or(f64::NAN),
        gateway_drops: r.gateway_drops,
    })
}

/// `secrelay serve` started, its HTTP address read from its banner, the rest of its output
/// read as it comes (a closed pipe would fail its writes), the last lines kept to say why,
/// should the gateway fail during the run.
struct Served {
    child: KillOnDrop,
    url: String,
    /// The ng socket its banner names, when it has one.
    ng: Option<SocketAddr>,
    tail: Option<std::thread::JoinHandle<String>>,
}

impl Served {
    fn start(mut command: Command) -> anyhow::Result<Served> {
        let mut child = command
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("starting secrelay serve")?;
        let stderr = child.stderr.take().context("serve's stderr")?;
        let child = KillOnDrop(child);
        let mut banner = secrelay_gateway::server::BannerReader::default();
        let mut said = Vec::new();
        let mut lines = BufReader::new(stderr).lines();
        for line in lines.by_ref() {
            let line = line?;
            let whole = banner.feed(&line);
            said.push(line);
            if whole {
                break;
            }
        }
        let url = banner.http.map(|a| format!("http://{a}")).ok_or_else(|| {
            anyhow!(
                "secrelay serve did not print its HTTP address; it said:\n{}",
                said.join("\n")
            )
        })?;
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
        Ok(Served {
            child,
            url,
            ng: banner.ng,
            tail: Some(tail),
        })
    }

    /// `e`, with the gateway's last words (it is stopped first).
    fn fail(mut self, e: anyhow::Error) -> anyhow::Error {
        let _ = self.child.0.kill();
        let said = self
            .tail
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default();
        e.context(format!("secrelay serve's last words:\n{said}"))
    }
}

/// What the gateway dropped between two scrapes of it: its reasons, and `xsk_kernel` for what
/// the kernel dropped at its XDP socket (`xsk`: that counter before and after).
fn drops_between(before: &load::Scrape, after: &load::Scrape, xsk: [u64; 2]) -> Vec<(String, f64)> {
    let mut drops: Vec<(String, f64)> = after
        .drops
        .iter()
        .map(|(r, n)| (r.clone(), n - before.drops_of(r)))
        .filter(|(_, n)| *n > 0.0)
        .collect();
    if xsk[1] > xsk[0] {
        drops.push(("xsk_kernel".into(), (xsk[1] - xsk[0]) as f64));
    }
    drops
}
