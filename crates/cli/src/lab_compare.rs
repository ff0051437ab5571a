//! `secrelay lab relay-compare`: secrelay and rtpengine relaying SRTP→SRTP at the same rates.

use std::path::PathBuf;

use anyhow::{anyhow, Result};
use clap::Args;
use secrelay_lab::client::compare::{rtpengine_row, secrelay_row, RelayRow};

/// Flags of `secrelay lab relay-compare`.
#[derive(Args, Debug)]
pub struct RelayCompareArgs {
    /// Offered packet rates (packets/s into the relay), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "50000,100000")]
    pub rates: Vec<u64>,
    /// Seconds measured per relay and rate.
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// The rtpengine binary (Debian's rtpengine-daemon).
    #[arg(long, default_value = "/usr/bin/rtpengine")]
    pub rtpengine: PathBuf,
    /// Write the rows as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// Runs both relays at each rate and prints the comparison.
pub fn run(a: &RelayCompareArgs) -> Result<()> {
    if !a.rtpengine.exists() {
        return Err(anyhow!(
            "--rtpengine {}: not found (apt-get install rtpengine-daemon)",
            a.rtpengine.display()
        ));
    }
    let exe = std::env::current_exe()?;
    let mut rows: Vec<RelayRow> = Vec::new();
    for &pps in &a.rates {
        eprintln!("relay-compare: rtpengine at {pps} packets/s …");
        rows.push(rtpengine_row(&a.rtpengine, pps, a.duration)?);
        eprintln!("relay-compare: secrelay at {pps} packets/s …");
        rows.push(secrelay_row(&exe, pps, a.duration)?);
    }
    println!(
        "{:<10} {:>12} {:>8} {:>10} {:>10} {:>8} {:>9} {:>9} {:>16} {:>12}",
        "relay",
        "offered/s",
        "secs",
        "sent",
        "relayed",
        "lost",
        "rx errors",
        "CPU s",
        "CPU µs/relayed",
        "÷ rtpengine"
    );
    for r in &rows {
        let base = rows
            .iter()
            .find(|x| x.relay == "rtpengine" && x.offered_pps == r.offered_pps)
            .map(|x| x.cpu_us_per_relayed);
        println!(
            "{:<10} {:>12} {:>8.1} {:>10} {:>10} {:>8} {:>9} {:>9.2} {:>16.2} {:>12}",
            r.relay,
            r.offered_pps,
            r.secs,
            r.sent,
            r.relayed,
            r.lost,
            r.rx_errors,
            r.cpu_secs,
            r.cpu_us_per_relayed,
            base.map_or("-".into(), |b| format!("{:.2}", r.cpu_us_per_relayed / b))
        );
    }
    if let Some(p) = &a.json {
        std::fs::write(p, serde_json::to_string_pretty(&rows)?)
            .map_err(|e| anyhow!("--json {}: {e}", p.display()))?;
    }
    Ok(())
}
