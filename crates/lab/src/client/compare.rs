//! `secrelay lab relay-compare`: secrelay's gateway and rtpengine relaying SRTP→SRTP with
//! re-encryption at the same offered packet rates on this machine, one worker thread each,
//! with each relay's CPU per relayed packet read from `/proc`.
//!
//! rtpengine gets SDES calls through its ng protocol (two legs on different suites, so every
//! packet is decrypted and encrypted again); secrelay gets WebRTC participants in rooms of two
//! (DTLS-SRTP keys, a different key per leg, so every packet is decrypted and encrypted
//! again). Both load generators send G.711 20 ms packets from one UDP socket per leg and
//! unprotect what comes back, so the relays see the same packet sizes, rates and socket
//! counts; only the keying differs, and it is done before the window is measured.

use std::io::{BufRead, BufReader};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};
use serde::Serialize;

use super::load::{self, proc_sample, LoadOptions};
use super::rtpengine::{create_calls, delete_calls, drive, Ng};
use secrelay_srtp::Profile;
use secrelay_testkit::fleet::{FleetConfig, FleetProgress};
use secrelay_testkit::{Leg, Signaling};

/// One relay at one offered rate.
#[derive(Debug, Clone, Serialize)]
pub struct RelayRow {
    /// `secrelay` or `rtpengine`.
    pub relay: String,
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
    /// Relay CPU seconds over the window.
    pub cpu_secs: f64,
    /// Relay CPU per relayed packet, µs.
    pub cpu_us_per_relayed: f64,
}

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The HTTP base URL in `secrelay serve`'s start-up line (`… HTTP on http://ip:port, …`).
pub fn serve_banner_url(line: &str) -> Option<String> {
    let rest = line.split("HTTP on ").nth(1)?;
    rest.split(',').next().map(str::to_owned)
}

fn free_udp_port() -> anyhow::Result<u16> {
    Ok(std::net::UdpSocket::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Runs rtpengine at one rate.
pub fn rtpengine_row(binary: &Path, pps: u64, secs: f64) -> anyhow::Result<RelayRow> {
    let ng_port = free_udp_port()?;
    let child = Command::new(binary)
        .args([
            "--config-file=none",
            "--interface=127.0.0.1",
            &format!("--listen-ng=127.0.0.1:{ng_port}"),
            "--foreground",
            "--log-stderr",
            "--log-level=3",
            "--table=-1",
            "--num-threads=1",
            "--port-min=20000",
            "--port-max=29999",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("starting {}", binary.display()))?;
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
            bail!("rtpengine did not answer ping on its ng port");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let calls = (pps / 100).max(1) as usize;
    let mut legs = create_calls(
        &mut ng,
        calls,
        Profile::AesCm128HmacSha1_80,
        Profile::AesCm128HmacSha1_32,
    )?;
    let mut before = None;
    let (measured, received_at_start) = drive(&mut legs, Duration::from_secs_f64(secs), || {
        before = proc_sample(pid).ok();
    })?;
    let after = proc_sample(pid)?;
    let before = before.ok_or_else(|| anyhow!("rtpengine's /proc could not be read"))?;
    delete_calls(&mut ng, calls);
    let relayed: u64 = legs.iter().map(|l| l.stream.received).sum();
    let lost: u64 = legs.iter().map(|l| l.stream.lost()).sum();
    let sent: u64 = legs.iter().map(|l| l.sent).sum();
    let rx_errors: u64 = legs.iter().map(|l| l.rx_errors).sum();
    let cpu = after.cpu_secs - before.cpu_secs;
    let in_window = relayed.saturating_sub(received_at_start) as f64;
    Ok(RelayRow {
        relay: "rtpengine".into(),
        offered_pps: pps,
        secs: measured,
        relayed,
        lost,
        sent,
        rx_errors,
        cpu_secs: cpu,
        cpu_us_per_relayed: cpu * 1e6 / in_window.max(1.0),
    })
}

/// Runs `secrelay serve` (one worker) at one rate.
pub fn secrelay_row(exe: &Path, pps: u64, secs: f64) -> anyhow::Result<RelayRow> {
    let mut child = Command::new(exe)
        .args([
            "serve",
            "--http",
            "127.0.0.1:0",
            "--udp",
            "127.0.0.1:0",
            "--workers",
            "1",
            "--log",
            "warn",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {} serve", exe.display()))?;
    let stderr = child.stderr.take().context("serve's stderr")?;
    let child = KillOnDrop(child);
    let mut url = None;
    for line in BufReader::new(stderr).lines() {
        url = serve_banner_url(&line?);
        if url.is_some() {
            break;
        }
    }
    let url = url.ok_or_else(|| anyhow!("secrelay serve did not print its HTTP address"))?;
    let participants = (pps / 50).max(2) as usize;
    let o = LoadOptions {
        fleet: FleetConfig {
            signaling: Signaling {
                base_url: url,
                token: None,
            },
            rooms: participants / 2,
            per_room: 2,
            legs: vec![Leg::Join],
            room_prefix: "cmp-".into(),
            duration: Duration::from_secs_f64(secs),
            threads: 1,
            bind_ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
            connect_timeout: Duration::from_secs(60),
            inject_bad: false,
        },
        server_pid: Some(child.0.id()),
    };
    let r = load::run(&o, Arc::new(FleetProgress::default()))?;
    Ok(RelayRow {
        relay: "secrelay".into(),
        offered_pps: pps,
        secs: r.media_secs,
        relayed: r.received,
        lost: r.lost,
        sent: r.sent,
        rx_errors: 0,
        cpu_secs: r.gateway_cpu_secs.unwrap_or(0.0),
        cpu_us_per_relayed: r.gateway_cpu_us_per_relayed.unwrap_or(f64::NAN),
    })
}
