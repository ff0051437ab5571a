//! `secrelay demo`: the gateway in-process and simulated participants that use it exactly as
//! outside clients would: room joins over HTTPS (a throw-away private CA as the one trust
//! anchor) with SDP offers, ICE checks, DTLS-SRTP handshakes,
//! then G.711 20 ms audio over SRTP on real UDP sockets, relayed and re-protected for each
//! receiver with that receiver's own keys. Once a second each sender also injects a replayed
//! and a forged packet, which the gateway must drop and count. Each room also has two SIP-style
//! phones on ports of their own, joined with `POST /rooms/{room}/rtp`: one SDES-SRTP (a key of
//! its own in `a=crypto`) and one plain RTP, so the three kinds of leg are at work together.

use std::collections::BTreeSet;
use std::io::IsTerminal;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use secrelay_gateway::server::Totals;
use secrelay_gateway::server::{ServeConfig, Server};
use secrelay_srtp::Profile;
use secrelay_testkit::fleet::{self, FleetConfig, FleetProgress, FleetReport};
use secrelay_testkit::phone::SocketPhone;
use secrelay_testkit::{Leg, Signaling};
use secrelay_wire::RtpHeader;

/// Flags of `secrelay demo`.
#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Seconds of media once everybody is connected.
    #[arg(long, default_value_t = 15)]
    pub duration: u64,
    /// Rooms.
    #[arg(long, default_value_t = 3)]
    pub rooms: usize,
    /// Participants per room (each sends its audio and receives everybody else's).
    #[arg(long, default_value_t = 4)]
    pub per_room: usize,
    /// Gateway packet workers (0: one per core).
    #[arg(long, default_value_t = 0)]
    pub workers: usize,
    /// Write the summary as JSON to this file.
    #[arg(long)]
    pub json: Option<std::path::PathBuf>,
    /// The gateway's logs, on stderr (`--log trace`, `--log secrelay_core=debug`, …).
    #[command(flatten)]
    pub logs: crate::logs::LogArgs,
    /// Append the simulated clients' SRTP keys to this file, a line per secret (their address,
    /// the secret's label, profile and hex), as browsers write SSLKEYLOGFILE: to decrypt a
    /// capture of the demo. The clients write it; the gateway never writes a key.
    #[arg(long, value_name = "FILE")]
    pub keylog: Option<std::path::PathBuf>,
}

fn us(d: Option<Duration>) -> String {
    d.map_or("-".into(), |d| format!("{} µs", d.as_micros()))
}

fn progress_line(t: &Totals, p: &FleetProgress, total: usize) -> String {
    let since = &t.relay_latency;
    format!(
        "participants {}/{} up · handshakes {} · relayed {} · drops {} · relay latency p50 {} p99 {}",
        p.connected.load(Ordering::Relaxed),
        total,
        t.handshakes_ok,
        t.media_forwarded,
        t.drops,
        us(since.quantile(0.5)),
        us(since.quantile(0.99)),
    )
}

/// What the phones of one kind did.
#[derive(Debug, Default, serde::Serialize)]
struct PhoneTally {
    /// `sdes` or `plain`.
    leg: &'static str,
    phones: usize,
    sent: u64,
    received: u64,
    /// Distinct streams each phone heard, summed.
    streams: usize,
}

/// One SDES-SRTP and one plain RTP phone in each room, joined over HTTP, each sending G.711
/// 20 ms frames and reading what the gateway sends it until `stop`; then they leave.
fn run_phones(
    sig: &Signaling,
    rooms: usize,
    stop: &AtomicBool,
    keylog: Option<&std::path::Path>,
) -> Result<Vec<PhoneTally>> {
    let mut phones = Vec::new();
    for r in 1..=rooms {
        for (k, sdes) in [Some(Profile::AesCm128HmacSha1_80), None]
            .into_iter()
            .enumerate()
        {
            let ssrc = 0x7e1e_0000 | (r as u32) << 4 | k as u32;
            let mut p = SocketPhone::bind(IpAddr::V4(Ipv4Addr::LOCALHOST), sdes, ssrc)?;
            let path = format!("/rooms/room-{r}/rtp");
            let (status, location, answer) = sig.post_offer(&path, &p.phone.offer())?;
            if status != 201 {
                bail!("POST {path}: {status} {answer}");
            }
            p.phone
                .accept_answer(&answer)
                .map_err(|e| anyhow!("POST {path}: the answer: {e}"))?;
            let location = location.ok_or_else(|| anyhow!("POST {path}: no Location"))?;
            if let Some(file) = keylog {
                secrelay_testkit::keylog::append(file, &p.phone.key_log())
                    .map_err(|e| anyhow!("--keylog {}: {e}", file.display()))?;
            }
            phones.push((p, location));
        }
    }
    let mut next = Instant::now();
    let mut sent = vec![0u64; phones.len()];
    while !stop.load(Ordering::Relaxed) {
        for (i, (p, _)) in phones.iter_mut().enumerate() {
            // μ-law silence, one 20 ms frame.
            p.send(&[0xff; 160])?;
            sent[i] += 1;
            p.read();
        }
        next += Duration::from_millis(20);
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
    std::thread::sleep(Duration::from_millis(50));
    let mut tallies = vec![
        PhoneTally {
            leg: "sdes",
            ..PhoneTally::default()
        },
        PhoneTally {
            leg: "plain",
            ..PhoneTally::default()
        },
    ];
    for (i, (p, location)) in phones.iter_mut().enumerate() {
        p.read();
        let _ = sig.delete(location);
        let t = &mut tallies[if p.phone.sdes.is_some() { 0 } else { 1 }];
        t.phones += 1;
        t.sent += sent[i];
        t.received += p.phone.received.len() as u64;
        let ssrcs: BTreeSet<u32> = p
            .phone
            .received
            .iter()
            .filter_map(|r| RtpHeader::parse(r).ok().map(|h| h.ssrc()))
            .collect();
        t.streams += ssrcs.len();
    }
    Ok(tallies)
}

/// The participants' access token: publish and subscribe in the demo's rooms (`room-…`), for
/// the run and a minute more.
fn demo_token(secret: &secrelay_gateway::server::auth::Secret, secs: u64) -> Result<String> {
    use secrelay_gateway::server::auth::{mint, unix_now, Claims, Grants};
    let now = unix_now();
    let claims = Claims {
        iss: None,
        sub: "demo-participant".into(),
        exp: now + secs + 60,
        nbf: None,
        iat: Some(now),
        grants: Grants {
            room_prefix: Some("room-".into()),
            publish: true,
            subscribe: true,
            ..Grants::default()
        },
    };
    mint("demo", secret.expose().as_bytes(), &claims).map_err(|e| anyhow!("the demo's token: {e}"))
}

/// Shows the gateway's and the participants' progress until `runner` ends: a spinner on a
/// terminal, else a line every 2 s.
fn show_progress<T>(
    runner: &std::thread::JoinHandle<T>,
    g: &secrelay_gateway::server::Gateway,
    progress: &FleetProgress,
    total: usize,
) {
    let tty = std::io::stderr().is_terminal();
    let bar = if tty {
        let b = ProgressBar::new_spinner();
        b.set_style(
            ProgressStyle::with_template("{spinner} [{elapsed_precise}] {msg}")
                .expect("a valid template"),
        );
        Some(b)
    } else {
        None
    };
    let started = Instant::now();
    let mut last_line = Instant::now();
    while !runner.is_finished() {
        std::thread::sleep(Duration::from_millis(250));
        let line = progress_line(&g.stats().totals(), progress, total);
        match &bar {
            Some(b) => {
                b.set_message(line);
                b.tick();
            }
            None if last_line.elapsed() >= Duration::from_secs(2) => {
                last_line = Instant::now();
                eprintln!("[{:>5.1} s] {line}", started.elapsed().as_secs_f64());
            }
            None => {}
        }
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
}

/// Fails the demo when a participant did not connect, nothing was relayed, a kind of phone
/// heard nothing, or sessions were left behind.
fn check_outcome(report: &FleetReport, phones: &[PhoneTally], sessions_left: u64) -> Result<()> {
    if report.connected < report.participants {
        bail!(
            "{} of {} participants did not connect: {}",
            report.participants - report.connected,
            report.participants,
            report.failures.join("; ")
        );
    }
    if report.received == 0 {
        bail!("no media was relayed");
    }
    if let Some(t) = phones.iter().find(|t| t.received == 0) {
        bail!("the {} phones heard nothing", t.leg);
    }
    if sessions_left > 0 {
        bail!("{sessions_left} sessions were left behind after every participant left");
    }
    Ok(())
}

/// The simulated participants: `--rooms` rooms of `--per-room` browsers speaking G.711,
/// some forged datagrams among their media.
fn fleet_config(a: &DemoArgs, signaling: Signaling) -> FleetConfig {
    FleetConfig {
        signaling,
        rooms: a.rooms,
        per_room: a.per_room,
        legs: vec![Leg::Join],
        room_prefix: "room-".into(),
        duration: Duration::from_secs(a.duration),
        threads: 1,
        bind_ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
        connect_timeout: Duration::from_secs(20),
        inject_bad: true,
        media: secrelay_testkit::Media::Pcmu,
        transcode: false,
        mix: None,
        ice_tcp: false,
        publish_at: None,
    }
}

/// Runs the demo.
pub fn run(a: &DemoArgs) -> Result<()> {
    if a.rooms == 0 || a.per_room < 2 {
        bail!("--rooms must be at least 1 and --per-room at least 2 (someone to talk to)");
    }
    if a.duration == 0 {
        bail!("--duration must be at least 1 second");
    }
    a.logs.init("warn")?;
    // Rooms closed to anonymous callers, as a deployment's are: the participants join with an
    // access token minted here with a key made for this run.
    let secret = secrelay_gateway::server::auth::Secret::random();
    let config = ServeConfig {
        api_keys: [("demo".to_owned(), secret.clone())].into(),
        // HTTPS, with a certificate from a throw-away private CA made at start: the
        // participants trust that CA and nothing else.
        https: Some("127.0.0.1:0".parse().expect("a valid literal address")),
        udp: "127.0.0.1:0".parse().expect("a valid literal address"),
        workers: a.workers,
        drain_secs: 0.2,
        ..ServeConfig::default()
    };
    let server = Server::start(config).map_err(|e| anyhow!("starting the gateway: {e}"))?;
    let g = server.gateway().clone();
    let total = a.rooms * a.per_room;
    let ca = server
        .tls()
        .and_then(|t| t.trust_anchor())
        .ok_or_else(|| anyhow!("the gateway has no throw-away CA to trust"))?;
    let tls = server.tls().map(|t| t.info());
    eprintln!(
        "secrelay demo: gateway on {} ({}) and UDP {} with {} worker(s); {} rooms × {} participants, G.711 20 ms, {} s of media",
        server.url(),
        tls.map_or_else(|| "HTTP".into(), |t| format!("HTTPS, {t}")),
        g.udp_addr(),
        g.config().worker_count(),
        a.rooms,
        a.per_room,
        a.duration
    );
    let mut signaling = Signaling::new(server.url()).with_ca_file(&ca)?;
    signaling.token = Some(demo_token(&secret, a.duration)?);
    let fleet_config = fleet_config(a, signaling);
    let progress = Arc::new(FleetProgress::default());
    let p2 = progress.clone();
    let phone_sig = fleet_config.signaling.clone();
    let keylog = a.keylog.clone();
    let runner = std::thread::spawn(move || -> Result<FleetReport> {
        let group = fleet::join_all(&fleet_config, &p2, Instant::now())?;
        let (done, media_secs) = fleet::run_media(&fleet_config, group, p2)?;
        if let Some(path) = &keylog {
            let lines: Vec<_> = done.iter().flat_map(|p| p.key_log()).collect();
            secrelay_testkit::keylog::append(path, &lines)
                .map_err(|e| anyhow!("--keylog {}: {e}", path.display()))?;
        }
        fleet::leave_all(&fleet_config, &done);
        Ok(fleet::summarize(&done, media_secs))
    });
    let stop_phones = Arc::new(AtomicBool::new(false));
    let stop = stop_phones.clone();
    let rooms = a.rooms;
    let keylog = a.keylog.clone();
    let phones =
        std::thread::spawn(move || run_phones(&phone_sig, rooms, &stop, keylog.as_deref()));
    show_progress(&runner, &g, &progress, total);
    let report = runner
        .join()
        .map_err(|_| anyhow!("the simulated participants' thread panicked"))??;
    stop_phones.store(true, Ordering::Relaxed);
    let phones = phones.join().map_err(|_| {
        anyhow!("the phones' thread panicked (SRTP from the gateway that did not open?)")
    })??;
    // Give the DELETEs' close_notify a moment, then read the gateway's view.
    std::thread::sleep(Duration::from_millis(100));
    let totals = g.stats().totals();
    let sessions_left = totals.participants;
    server.shutdown();
    print_summary(&report, &totals, sessions_left, &phones);
    if let Some(path) = &a.json {
        let v = summary_json(&report, &totals, &phones);
        std::fs::write(path, serde_json::to_string_pretty(&v)?)
            .map_err(|e| anyhow!("--json {}: {e}", path.display()))?;
    }
    check_outcome(&report, &phones, sessions_left)?;
    Ok(())
}

fn print_summary(r: &FleetReport, t: &Totals, left: u64, phones: &[PhoneTally]) {
    let q = |p: f64| us(t.relay_latency.quantile(p));
    println!("secrelay demo: summary");
    println!(
        "  participants      {} started, {} connected, {} failed",
        r.participants,
        r.connected,
        r.failures.len()
    );
    if let Some([p50, p99]) = r.setup_ms {
        println!("  call setup        p50 {p50:.1} ms, p99 {p99:.1} ms (HTTP offer to SRTP keys)");
    }
    println!(
        "  handshakes        {} ok, {} failed; gateway-side p50 {}",
        t.handshakes_ok,
        t.handshakes_failed,
        us(t.handshake_time.quantile(0.5))
    );
    println!(
        "  media             {} packets sent over {:.1} s, {} received by the other members, {} lost of {} expected",
        r.sent, r.media_secs, r.received, r.lost, r.expected
    );
    println!(
        "  gateway           {} packets in, {} copies re-protected and relayed",
        t.media_routed, t.media_forwarded
    );
    println!(
        "  relay latency     p50 {}, p99 {}, p99.9 {} (gateway socket read to socket write)",
        q(0.5),
        q(0.99),
        q(0.999)
    );
    if let Some([p50, p90, p99, max]) = r.delay_us {
        println!(
            "  end-to-end delay  p50 {p50} µs, p90 {p90} µs, p99 {p99} µs, max {max} µs (sender to receiver, both SRTP ends included)"
        );
    }
    for p in phones {
        println!(
            "  {:<17} {} phones: {} packets sent, {} received from {} streams ({})",
            format!("{} legs", p.leg),
            p.phones,
            p.sent,
            p.received,
            p.streams,
            if p.leg == "sdes" {
                "SRTP with keys of their own in a=crypto"
            } else {
                "RTP in the clear"
            }
        );
    }
    let by_leg: Vec<String> = t
        .by_leg
        .iter()
        .map(|l| format!("{} {} in / {} out", l.leg, l.packets_in, l.packets_out))
        .collect();
    println!("  by kind of leg    {}", by_leg.join(", "));
    let drops: Vec<String> = t
        .drops_by_reason
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    println!(
        "  attack packets    {} replayed/forged sent; gateway drops: {}",
        r.bad_sent,
        if drops.is_empty() {
            "none".into()
        } else {
            drops.join(", ")
        }
    );
    let closed: Vec<String> = t
        .closed_by_reason
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    println!(
        "  sessions          closed: {}; left behind: {left}",
        if closed.is_empty() {
            "none".into()
        } else {
            closed.join(", ")
        }
    );
}

fn summary_json(r: &FleetReport, t: &Totals, phones: &[PhoneTally]) -> serde_json::Value {
    let q = |p: f64| t.relay_latency.quantile(p).map(|d| d.as_secs_f64() * 1e6);
    serde_json::json!({
        "participants": r.participants,
        "connected": r.connected,
        "failures": r.failures,
        "sent": r.sent,
        "received": r.received,
        "expected": r.expected,
        "lost": r.lost,
        "rx_errors": r.rx_errors,
        "missing_streams": r.missing_streams,
        "bad_sent": r.bad_sent,
        "media_secs": r.media_secs,
        "end_to_end_delay_us": r.delay_us.map(|d| serde_json::json!({"p50": d[0], "p90": d[1], "p99": d[2], "max": d[3]})),
        "setup_ms": r.setup_ms.map(|s| serde_json::json!({"p50": s[0], "p99": s[1]})),
        "phones": phones,
        "gateway": {
            "handshakes_ok": t.handshakes_ok,
            "handshakes_failed": t.handshakes_failed,
            "media_routed": t.media_routed,
            "media_forwarded": t.media_forwarded,
            "handed_off": t.handed_off,
            "drops": t.drops_by_reason.iter().map(|(k, v)| (k.to_string(), serde_json::json!(v))).collect::<serde_json::Map<_, _>>(),
            "closed": t.closed_by_reason.iter().map(|(k, v)| (k.to_string(), serde_json::json!(v))).collect::<serde_json::Map<_, _>>(),
            "relay_latency_us": {"p50": q(0.5), "p99": q(0.99), "p999": q(0.999)},
            "by_leg": t.by_leg.iter().map(|l| (l.leg.to_string(), serde_json::json!({"participants": l.participants, "packets_in": l.packets_in, "packets_out": l.packets_out, "drops": l.drops}))).collect::<serde_json::Map<_, _>>(),
        },
    })
}
