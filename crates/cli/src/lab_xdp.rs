//! `secrelay lab xdp`: what a spoofed flood costs the receiving machine with the XDP filter in
//! front of the media ports (native and generic) and without it (the kernel's socket path), in
//! the same run, runs alternated.
//!
//! Each run makes a network namespace of its own joined to this one by a veth pair (native XDP
//! on veth), starts `secrelay serve` (this executable) in it, and floods the shared media port
//! from 512 spoofed sources (IP_TRANSPARENT sockets here) as fast as the sending threads can,
//! while a plain call through the gateway's ng socket goes on at 50 packets a second each way.
//!
//! What is charged to the receiving side: the kernel's receive path runs in softirq context
//! (on veth, on the sending CPU when the frame is handed over), so the machine's softirq time
//! (`/proc/stat`, sampled by the scheduler's tick) is the receive path's, up to the filter's
//! verdict with XDP and up to the socket without; the gateway process's CPU time is what it
//! spent reading and dropping what reached it. Per datagram: (softirq + gateway) ÷ datagrams
//! sent; per core-second: its inverse. The sending threads' own CPU time is reported beside it,
//! not in it. With the filter, the kernel's BPF statistics give the program's own run time per
//! datagram too. Needs root.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use secrelay_lab::client::load::{proc_sample, relay_quantile, scrape, softirq_secs};
use secrelay_testkit::netns::Netns;
use secrelay_testkit::ng::Ng;
use secrelay_testkit::phone::SocketPhone;
use secrelay_testkit::Signaling;
use serde::Serialize;

/// The shared media port of the gateway in the namespace.
const SHARED_PORT: u16 = 20000;

/// Flags of `secrelay lab xdp`.
#[derive(Args, Debug)]
pub struct XdpArgs {
    /// Which paths, in this order each round: off (the kernel's socket path), native, generic.
    #[arg(long, value_delimiter = ',', default_value = "off,native,generic")]
    pub modes: Vec<String>,
    /// Rounds of every mode (the modes alternate within each).
    #[arg(long, default_value_t = 2)]
    pub rounds: usize,
    /// Seconds each flood lasts.
    #[arg(long, default_value_t = 5.0)]
    pub secs: f64,
    /// Spoofed sources (10.199.0.0/16 addresses, one socket each).
    #[arg(long, default_value_t = 512)]
    pub sources: u16,
    /// Sending threads.
    #[arg(long, default_value_t = 1)]
    pub senders: usize,
    /// Write the report as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// One run's figures.
#[derive(Debug, Clone, Serialize)]
pub struct XdpRow {
    /// `off`, `native` or `generic`.
    pub mode: String,
    /// Where the filter ran, as the gateway reported it (`-` without one).
    pub attached: String,
    /// Spoofed datagrams sent.
    pub sent: u64,
    /// Sent per second.
    pub rate: f64,
    /// Dropped by the filter.
    pub xdp_dropped: u64,
    /// Taken by the gateway's socket and dropped by its code (`unknown_source`).
    pub gateway_dropped: u64,
    /// Dropped by the kernel at the gateway's full socket (`RcvbufErrors`).
    pub socket_overflow: u64,
    /// Sent but counted in none of the above: dropped on the way (a full veth or backlog
    /// queue), before the filter or the socket.
    pub elsewhere: u64,
    /// Softirq CPU seconds, every CPU (the receive path).
    pub softirq_s: f64,
    /// The gateway process's CPU seconds (user + system).
    pub gateway_s: f64,
    /// The sending threads' CPU seconds (this process, user + system; the receive path's
    /// softirq time is in it too when it ran in their context).
    pub senders_s: f64,
    /// Receive-side CPU per spoofed datagram, µs: (softirq + gateway) ÷ sent.
    pub receive_us: f64,
    /// Spoofed datagrams the receive side disposes of per CPU-second: the inverse.
    pub per_core_second: f64,
    /// The filter program's own run time per run, ns (the kernel's BPF statistics).
    pub program_ns: Option<f64>,
    /// The gateway's relay latency p99 for the call's packets, µs (its histogram's bucket
    /// bound): in a second without the flood just before it, and during the flood.
    pub relay_p99_us: [Option<f64>; 2],
    /// The plain call's packets lost during the flood (both ways), of those sent.
    pub call_lost: u64,
    /// The plain call's packets sent during the flood (both ways).
    pub call_sent: u64,
}

/// The report.
#[derive(Debug, Serialize)]
pub struct XdpReport {
    /// Every run, in the order run.
    pub runs: Vec<XdpRow>,
}

/// Runs the study and prints the table.
pub fn run(a: &XdpArgs) -> Result<()> {
    for m in &a.modes {
        if !["off", "native", "generic"].contains(&m.as_str()) {
            bail!("--modes {m:?}: unknown (valid: off, native, generic)");
        }
    }
    if !(a.secs > 0.0 && a.secs <= 600.0) {
        bail!("--secs {}: give seconds between 0 and 600", a.secs);
    }
    if a.senders == 0 || a.sources == 0 || a.rounds == 0 {
        bail!("--senders, --sources and --rounds must be at least 1");
    }
    if a.rounds * a.modes.len() > 250 {
        bail!("--rounds {}: at most 250 runs in all", a.rounds);
    }
    let mut runs = Vec::new();
    for round in 0..a.rounds {
        for (i, mode) in a.modes.iter().enumerate() {
            let index = (round * a.modes.len() + i) as u8;
            let row = run_one(a, mode, index).with_context(|| format!("lab xdp: {mode}"))?;
            print_row(&row, runs.is_empty());
            runs.push(row);
        }
    }
    let report = XdpReport { runs };
    if let Some(p) = &a.json {
        std::fs::write(p, serde_json::to_string_pretty(&report)?)
            .map_err(|e| anyhow!("--json {}: {e}", p.display()))?;
    }
    Ok(())
}

fn print_row(r: &XdpRow, header: bool) {
    if header {
        println!(
            "{:<8} {:>10} {:>10} {:>10} {:>10} {:>9} {:>9} {:>8} {:>8} {:>8} {:>9} {:>10} {:>8} {:>13} {:>9}",
            "path", "sent", "sent/s", "xdp drop", "gw drop", "overflow", "elsewhere", "softirq",
            "gateway", "senders", "recv µs", "per core·s", "prog ns", "p99 µs", "call lost"
        );
    }
    println!(
        "{:<8} {:>10} {:>10.0} {:>10} {:>10} {:>9} {:>9} {:>8.2} {:>8.2} {:>8.2} {:>9.3} {:>10.0} {:>8} {:>13} {:>9}",
        r.mode,
        r.sent,
        r.rate,
        r.xdp_dropped,
        r.gateway_dropped,
        r.socket_overflow,
        r.elsewhere,
        r.softirq_s,
        r.gateway_s,
        r.senders_s,
        r.receive_us,
        r.per_core_second,
        r.program_ns.map_or("-".to_string(), |n| format!("{n:.0}")),
        {
            let us = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.0}"));
            format!("{} → {}", us(r.relay_p99_us[0]), us(r.relay_p99_us[1]))
        },
        format!("{}/{}", r.call_lost, r.call_sent),
    );
}

/// The gateway in its namespace, and how to reach it.
struct Gateway {
    child: Child,
    sig: Signaling,
    ng: SocketAddr,
    log: secrelay_gateway::server::banner::ChildLog,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_gateway(ns: &Netns, ip: Ipv4Addr, xdp: Option<(&str, &str)>) -> Result<Gateway> {
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("gateway.toml");
    let mut text = format!(
        "http = \"{ip}:8080\"\nudp = \"{ip}:{SHARED_PORT}\"\nng = \"{ip}:2223\"\nworkers = 1\n\
         rtp_ports = \"30000-30199\"\nplain_latch = \"first-packets\"\ndrain_secs = 0.2\n"
    );
    if let Some((iface, mode)) = xdp {
        text.push_str(&format!("xdp = \"{iface}\"\nxdp_mode = \"{mode}\"\n"));
    }
    std::fs::write(&config, text)?;
    let mut child = ns
        .command(std::env::current_exe()?)
        .args(["serve", "--log", "info", "--config"])
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting secrelay serve in the namespace")?;
    let (banner, log) = secrelay_gateway::server::banner::read_child_banner(&mut child);
    let mut g = Gateway {
        child,
        sig: Signaling::new(""),
        ng: SocketAddr::from((ip, 2223)),
        log,
    };
    let Some(banner) = banner else {
        bail!("the gateway did not start:\n{}", g.log.lock().unwrap());
    };
    let admin = std::fs::read_to_string(banner.admin_key_file.clone().context("no admin key")?)?;
    g.sig = Signaling::new(banner.url().context("no URL")?).with_admin(admin.trim());
    g.ng = banner.ng.context("no ng socket")?;
    Ok(g)
}

/// A plain call between two phones here through the gateway's ng socket.
fn call(ng: SocketAddr, here: Ipv4Addr) -> Result<(SocketPhone, SocketPhone)> {
    let mut ng = Ng::new(ng)?;
    let mut caller = SocketPhone::bind(IpAddr::V4(here), None, 0x1111)?;
    let mut callee = SocketPhone::bind(IpAddr::V4(here), None, 0x2222)?;
    let cmd = secrelay_testkit::ng::command;
    let to_callee = ng.call(cmd(
        "offer",
        "xdp",
        "caller",
        None,
        Some(&caller.phone.offer()),
    ))?["sdp"]
        .clone();
    let answer = callee
        .phone
        .answer_offer(&to_callee)
        .map_err(|e| anyhow!(e))?;
    let to_caller = ng.call(cmd(
        "answer",
        "xdp",
        "caller",
        Some("callee"),
        Some(&answer),
    ))?["sdp"]
        .clone();
    caller
        .phone
        .accept_answer(&to_caller)
        .map_err(|e| anyhow!(e))?;
    Ok((caller, callee))
}

/// One packet each way, then what came.
fn exchange(caller: &mut SocketPhone, callee: &mut SocketPhone) {
    let _ = caller.send(&[0xc1; 160]);
    let _ = callee.send(&[0xb0; 160]);
    caller.read();
    callee.read();
}

/// The call talking (a packet each way every 20 ms) while `a.senders` threads send forged
/// SRTP from every `flood` socket to `to` as fast as they can, for `a.secs`: the forged
/// datagrams sent, the call's packets sent, and the seconds it took.
fn flood_during_call(
    a: &XdpArgs,
    flood: &[std::net::UdpSocket],
    to: SocketAddr,
    (caller, callee): (&mut SocketPhone, &mut SocketPhone),
) -> (u64, u64, f64) {
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let forged = [
        0x80u8, 0, 0, 1, 0, 0, 0, 1, 0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 0, 0, 0, 0, 0,
    ];
    let started = Instant::now();
    let mut call_sent = 0u64;
    std::thread::scope(|scope| {
        let per = flood.len().div_ceil(a.senders);
        for chunk in flood.chunks(per) {
            let (stop, sent) = (stop.clone(), sent.clone());
            scope.spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    for s in chunk {
                        if s.send_to(&forged, to).is_ok() {
                            n += 1;
                        }
                    }
                }
                sent.fetch_add(n, Ordering::Relaxed);
            });
        }
        let end = started + Duration::from_secs_f64(a.secs);
        while Instant::now() < end {
            exchange(caller, callee);
            call_sent += 2;
            std::thread::sleep(Duration::from_millis(20));
        }
        stop.store(true, Ordering::Relaxed);
    });
    let elapsed = started.elapsed().as_secs_f64();
    (sent.load(Ordering::Relaxed), call_sent, elapsed)
}

/// The call alone, a packet each way every 20 ms, for `d`.
fn talk_for(caller: &mut SocketPhone, callee: &mut SocketPhone, d: Duration) {
    let end = Instant::now() + d;
    while Instant::now() < end {
        exchange(caller, callee);
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn run_one(a: &XdpArgs, mode: &str, index: u8) -> Result<XdpRow> {
    let ns = Netns::new().context("a network namespace (needs root)")?;
    let pid = std::process::id();
    let (outside, inside) = (format!("slx{index}o{pid}"), format!("slx{index}i{pid}"));
    let (outside, inside) = (trim_name(&outside), trim_name(&inside));
    // A subnet per run and per lab process (10.200–249.RUN.0/24): a run's veth pair may
    // linger a moment after its namespace ends, and another lab may be running.
    let net = 200 + (pid % 50) as u8;
    let here = Ipv4Addr::new(10, net, index, 2);
    let ip = Ipv4Addr::new(10, net, index, 1);
    ns.veth(
        &outside,
        &format!("{here}/24"),
        &inside,
        &format!("{ip}/24"),
    )?;
    let xdp = (mode != "off").then_some((inside.as_str(), mode));
    let g = start_gateway(&ns, ip, xdp)?;
    let attached = match xdp {
        None => "-".to_string(),
        Some(_) if g.log.lock().unwrap().contains("mode=\"native\"") => "native".into(),
        Some(_) => "generic".into(),
    };
    let (mut caller, mut callee) = call(g.ng, here)?;
    let flood = secrelay_testkit::netns::spoofed_sockets([10, 199], a.sources)
        .context("spoofed sources")?;
    let stats = if xdp.is_some() {
        Some(secrelay_xdp::RunStats::enable().map_err(|e| anyhow!("{e}"))?)
    } else {
        None
    };
    let metric = |s: &str| g.sig.metric(s).unwrap_or(0);
    let cpu = |pid: u32| proc_sample(pid).map(|p| p.cpu_secs);
    let (gateway_pid, own_pid) = (g.child.id(), std::process::id());

    // A second of the call alone, for its relay latency without the flood.
    let quiet0 = scrape(&g.sig)?;
    talk_for(&mut caller, &mut callee, Duration::from_secs(1));
    std::thread::sleep(Duration::from_millis(250));
    let quiet1 = scrape(&g.sig)?;

    // Before.
    let xdp0 = metric("secrelay_xdp_datagrams_total{verdict=\"dropped\"}");
    let gw0 = metric("secrelay_drops_total{reason=\"unknown_source\"}");
    let udp0 = ns.udp_counters()?;
    let prog0 = stats
        .as_ref()
        .map(|s| s.filters())
        .transpose()
        .map_err(|e| anyhow!("{e}"))?;
    let soft0 = softirq_secs()?;
    let (gcpu0, scpu0) = (cpu(gateway_pid)?, cpu(own_pid)?);
    let heard0 = caller.heard(0xb0) + callee.heard(0xc1);

    // The flood, and the call meanwhile.
    let to = SocketAddr::from((ip, SHARED_PORT));
    let (sent, call_sent, elapsed) = flood_during_call(a, &flood, to, (&mut caller, &mut callee));
    // What is still queued drains.
    std::thread::sleep(Duration::from_millis(300));
    caller.read();
    callee.read();

    // After (the gateway publishes its counters every 200 ms: the sleep above covers it).
    let flood1 = scrape(&g.sig)?;
    let soft1 = softirq_secs()?;
    let (gcpu1, scpu1) = (cpu(gateway_pid)?, cpu(own_pid)?);
    let prog1 = stats
        .as_ref()
        .map(|s| s.filters())
        .transpose()
        .map_err(|e| anyhow!("{e}"))?;
    let udp1 = ns.udp_counters()?;
    let softirq_s = soft1 - soft0;
    let gateway_s = gcpu1 - gcpu0;
    let receive = softirq_s + gateway_s;
    let heard = (caller.heard(0xb0) + callee.heard(0xc1)) as u64 - heard0 as u64;
    let xdp_dropped = metric("secrelay_xdp_datagrams_total{verdict=\"dropped\"}") - xdp0;
    let gateway_dropped = metric("secrelay_drops_total{reason=\"unknown_source\"}") - gw0;
    let socket_overflow = udp1.get("RcvbufErrors").copied().unwrap_or(0)
        - udp0.get("RcvbufErrors").copied().unwrap_or(0);
    Ok(XdpRow {
        mode: mode.to_owned(),
        attached,
        sent,
        rate: sent as f64 / elapsed,
        xdp_dropped,
        gateway_dropped,
        socket_overflow,
        elsewhere: sent.saturating_sub(xdp_dropped + gateway_dropped + socket_overflow),
        softirq_s,
        gateway_s,
        senders_s: scpu1 - scpu0,
        receive_us: receive * 1e6 / sent.max(1) as f64,
        per_core_second: if receive > 0.0 {
            sent as f64 / receive
        } else {
            f64::INFINITY
        },
        program_ns: match (prog0, prog1) {
            (Some(a), Some(b)) if b.1 > a.1 => {
                Some((b.0 - a.0).as_nanos() as f64 / (b.1 - a.1) as f64)
            }
            _ => None,
        },
        relay_p99_us: [
            relay_quantile(&quiet0, &quiet1, 0.99).map(|s| s * 1e6),
            relay_quantile(&quiet1, &flood1, 0.99).map(|s| s * 1e6),
        ],
        call_lost: call_sent.saturating_sub(heard),
        call_sent,
    })
}

/// An interface name the kernel takes (at most 15 bytes).
fn trim_name(name: &str) -> String {
    name.chars().take(15).collect()
}
