//! `secrelay lab relay-compare`: secrelay and rtpengine relaying the same calls at the same
//! rates: SDES-SRTP↔SDES-SRTP on different suites and plain RTP↔plain RTP, set up through
//! each relay's ng socket; and secrelay's WebRTC participants beside them.

use std::path::PathBuf;

use anyhow::{anyhow, bail, Result};
use clap::Args;
use secrelay_lab::client::compare::{ng_row, secrelay_row, NgRelay, RelayRow, Site};
use secrelay_lab::client::rtpengine::Keying;
use secrelay_srtp::Profile;

/// Flags of `secrelay lab relay-compare`.
#[derive(Args, Debug)]
pub struct RelayCompareArgs {
    /// Offered packet rates (packets/s into the relay), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "50000,100000")]
    pub rates: Vec<u64>,
    /// Seconds measured per relay and rate.
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Which calls: `sdes` (SDES-SRTP on two suites, through ng, both relays), `plain` (plain
    /// RTP through ng, both relays), `webrtc` (DTLS-SRTP participants, secrelay only),
    /// comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "sdes,plain,webrtc")]
    pub legs: Vec<String>,
    /// How secrelay reads and writes its media, each in its own run at every rate and kind
    /// of call, alternated (`auto`, `io_uring`, `mmsg`, and with `--site veth` `af_xdp`),
    /// comma-separated: `io_uring,mmsg` compares two paths in one run.
    #[arg(long, value_delimiter = ',', default_value = "auto")]
    pub media_io: Vec<String>,
    /// Where each relay runs: `loopback` (beside the load) or `veth` (in a network namespace
    /// of its own behind a veth pair, what the AF_XDP path needs; root only).
    #[arg(long, default_value = "loopback")]
    pub site: String,
    /// With `--site veth`: the XDP filter in front of every secrelay run, not only the AF_XDP
    /// path's (which needs it), so that the paths differ by the path alone.
    #[arg(long)]
    pub filter: bool,
    /// The rtpengine binary (Debian's rtpengine-daemon).
    #[arg(long, default_value = "/usr/bin/rtpengine")]
    pub rtpengine: PathBuf,
    /// Write the rows as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// The rtpengine row a row is compared with: the same legs, or SDES for WebRTC (rtpengine
/// gets no WebRTC participants here).
fn baseline<'r>(rows: &'r [RelayRow], r: &RelayRow) -> Option<&'r RelayRow> {
    let legs = if r.legs == "webrtc" { "sdes" } else { &r.legs };
    rows.iter()
        .find(|x| x.relay == "rtpengine" && x.legs == legs && x.offered_pps == r.offered_pps)
}

/// Runs the relays at each rate and prints the comparison.
pub fn run(a: &RelayCompareArgs) -> Result<()> {
    if !a.rtpengine.exists() {
        return Err(anyhow!(
            "--rtpengine {}: not found (apt-get install rtpengine-daemon)",
            a.rtpengine.display()
        ));
    }
    for l in &a.legs {
        if !matches!(l.as_str(), "sdes" | "plain" | "webrtc") {
            bail!("--legs {l}: sdes, plain or webrtc");
        }
    }
    let site = match a.site.as_str() {
        "loopback" => Site::Loopback,
        "veth" => Site::Veth { filter: a.filter },
        other => bail!("--site {other}: loopback or veth"),
    };
    if a.filter && site == Site::Loopback {
        bail!("--filter needs --site veth (an interface to put it on)");
    }
    for m in &a.media_io {
        match m.as_str() {
            "auto" | "io_uring" | "mmsg" => {}
            "af_xdp" if site != Site::Loopback => {}
            "af_xdp" => bail!("--media-io af_xdp needs --site veth (an interface to bind on)"),
            _ => bail!("--media-io {m}: auto, io_uring, mmsg or af_xdp"),
        }
    }
    let exe = std::env::current_exe()?;
    let sdes = Keying::Sdes {
        caller: Profile::AesCm128HmacSha1_80,
        callee: Profile::AesCm128HmacSha1_32,
    };
    let mut rows: Vec<RelayRow> = Vec::new();
    for &pps in &a.rates {
        for legs in &a.legs {
            let keying = match legs.as_str() {
                "sdes" => sdes,
                "plain" => Keying::Plain,
                _ => {
                    for m in &a.media_io {
                        eprintln!("relay-compare: secrelay ({m}), WebRTC, at {pps} packets/s …");
                        rows.push(secrelay_row(&exe, pps, a.duration, m, site)?);
                    }
                    continue;
                }
            };
            let relays = std::iter::once(NgRelay::Rtpengine(&a.rtpengine)).chain(
                a.media_io.iter().map(|m| NgRelay::Secrelay {
                    exe: &exe,
                    media_io: m,
                }),
            );
            for relay in relays {
                let name = match relay {
                    NgRelay::Rtpengine(_) => "rtpengine".to_string(),
                    NgRelay::Secrelay { media_io, .. } => format!("secrelay ({media_io})"),
                };
                eprintln!("relay-compare: {name}, {legs} calls through ng, at {pps} packets/s …");
                rows.push(ng_row(relay, pps, a.duration, keying, site)?);
            }
        }
    }
    println!(
        "{:<10} {:<8} {:<7} {:>10} {:>6} {:>9} {:>9} {:>7} {:>6} {:>7} {:>9} {:>8} {:>8} {:>11} {:>10}",
        "relay",
        "io",
        "legs",
        "offered/s",
        "secs",
        "sent",
        "relayed",
        "lost",
        "rx err",
        "CPU s",
        "µs/pkt",
        "user µs",
        "kern µs",
        "÷ rtpengine",
        "softirq µs"
    );
    for r in &rows {
        println!(
            "{:<10} {:<8} {:<7} {:>10} {:>6.1} {:>9} {:>9} {:>7} {:>6} {:>7.2} {:>9.2} {:>8.2} {:>8.2} {:>11} {:>10.2}",
            r.relay,
            r.media_io.as_deref().unwrap_or("-"),
            r.legs,
            r.offered_pps,
            r.secs,
            r.sent,
            r.relayed,
            r.lost,
            r.rx_errors,
            r.cpu_secs,
            r.cpu_us_per_relayed,
            r.user_us_per_relayed,
            r.kernel_us_per_relayed,
            baseline(&rows, r).map_or("-".into(), |b| format!(
                "{:.2}",
                r.cpu_us_per_relayed / b.cpu_us_per_relayed
            )),
            r.softirq_us_per_relayed
        );
    }
    for r in rows.iter().filter(|r| !r.gateway_drops.is_empty()) {
        let drops: Vec<String> = r
            .gateway_drops
            .iter()
            .map(|(reason, n)| format!("{reason} {n:.0}"))
            .collect();
        println!(
            "  {} ({}) {} at {}/s dropped: {}",
            r.relay,
            r.media_io.as_deref().unwrap_or("-"),
            r.legs,
            r.offered_pps,
            drops.join(", ")
        );
    }
    if let Some(p) = &a.json {
        std::fs::write(p, serde_json::to_string_pretty(&rows)?)
            .map_err(|e| anyhow!("--json {}: {e}", p.display()))?;
    }
    Ok(())
}
