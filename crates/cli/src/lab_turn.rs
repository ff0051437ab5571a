//! `secrelay lab turn`: secrelay's TURN server beside coturn's in the same run (allocations and
//! relayed packets per CPU-second), and the hidden `lab __turn-server` that runs secrelay's
//! server in a process of its own for it.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{anyhow, Context as _, Result};
use clap::Args;
use secrelay_lab::client::turn::{TurnOptions, TurnReport, GATHER_US};

/// Flags of `secrelay lab turn`.
#[derive(Args, Debug)]
pub struct TurnArgs {
    /// Allocations made per server (each a challenge and a signed Allocate, from a loopback
    /// address and with a credential of its own).
    #[arg(long, default_value_t = 4000)]
    pub allocations: usize,
    /// Allocations in flight at once.
    #[arg(long, default_value_t = 64)]
    pub window: usize,
    /// Clients relaying (each an allocation with a channel to the echo peer).
    #[arg(long, default_value_t = 100)]
    pub clients: usize,
    /// ChannelData packets per second the clients send in all (each relayed twice: to the
    /// peer and its echo back).
    #[arg(long, default_value_t = 20_000)]
    pub rate: u64,
    /// Seconds the clients send, per server.
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Bytes of payload per packet (160: 20 ms of G.711).
    #[arg(long, default_value_t = 160)]
    pub payload: usize,
    /// Relay ports, `LOW-HIGH`, in three: coturn's, secrelay's (io_uring), secrelay's (epoll).
    #[arg(long, default_value = "20000-34999")]
    pub relay_ports: String,
    /// secrelay's `turn_gather_us`: how long its io_uring thread lets datagrams gather, in µs
    /// (0 to 10,000).
    #[arg(long, default_value_t = GATHER_US, value_parser = clap::value_parser!(u64).range(0..=10_000))]
    pub gather_us: u64,
    /// coturn's TURN server (Debian's coturn package).
    #[arg(long, default_value = "/usr/bin/turnserver")]
    pub coturn: PathBuf,
    /// Write the report as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// Flags of `secrelay lab __turn-server`.
#[derive(Args, Debug)]
pub struct TurnServerArgs {
    /// The UDP listener.
    #[arg(long)]
    pub udp: SocketAddr,
    /// The only peer relayed to.
    #[arg(long)]
    pub peer: SocketAddr,
    /// The REST API secret.
    #[arg(long)]
    pub secret: String,
    /// Relay ports, `LOW-HIGH`.
    #[arg(long)]
    pub relay_ports: String,
    /// The UDP sockets through epoll and a system call per datagram, not an io_uring.
    #[arg(long)]
    pub epoll: bool,
    /// How long the io_uring thread lets datagrams gather, in µs.
    #[arg(long, default_value_t = GATHER_US)]
    pub gather_us: u64,
}

fn ports(flag: &str, s: &str) -> Result<(u16, u16)> {
    let (l, h) = s
        .split_once('-')
        .ok_or_else(|| anyhow!("{flag} {s}: LOW-HIGH"))?;
    let p = |v: &str| {
        v.trim()
            .parse::<u16>()
            .with_context(|| format!("{flag} {s}"))
    };
    Ok((p(l)?, p(h)?))
}

/// `lab __turn-server`.
pub fn server(a: &TurnServerArgs) -> Result<()> {
    secrelay_lab::client::turn::serve_child(
        a.udp,
        a.peer,
        &a.secret,
        ports("--relay-ports", &a.relay_ports)?,
        !a.epoll,
        std::time::Duration::from_micros(a.gather_us),
    )
}

fn print(r: &TurnReport) {
    println!(
        "{:<16} {:>7} {:>6} {:>9} {:>7} {:>10} {:>7} {:>9} {:>9} {:>9} {:>7} {:>7} {:>11}",
        "server",
        "allocs",
        "failed",
        "allocs/s",
        "CPU s",
        "allocs/CPUs",
        "clients",
        "offered/s",
        "sent",
        "relayed",
        "lost",
        "CPU s",
        "relayed/CPUs"
    );
    for w in &r.rows {
        println!(
            "{:<16} {:>7} {:>6} {:>9.0} {:>7.3} {:>10.0} {:>7} {:>9} {:>9} {:>9} {:>7} {:>7.3} {:>11.0}",
            w.server,
            w.allocations,
            w.allocation_failures,
            w.allocations_per_sec,
            w.allocation_cpu_secs,
            w.allocations_per_cpu_sec,
            w.relay_clients,
            w.offered_pps,
            w.sent,
            w.relayed,
            w.lost,
            w.relay_cpu_secs,
            w.relayed_per_cpu_sec
        );
    }
    println!(
        "secrelay ÷ coturn ({}): allocations per CPU-second {:.2}, relayed packets per CPU-second {:.2} (io_uring, {} µs gather; with epoll: {:.2})",
        r.coturn_version, r.allocations_ratio, r.relayed_ratio, r.gather_us, r.relayed_ratio_epoll
    );
}

/// Runs both servers and prints the comparison.
pub fn run(a: &TurnArgs) -> Result<()> {
    if !a.coturn.is_file() {
        return Err(anyhow!(
            "--coturn {}: not found (apt-get install coturn)",
            a.coturn.display()
        ));
    }
    let o = TurnOptions {
        allocations: a.allocations,
        window: a.window,
        clients: a.clients,
        rate: a.rate,
        secs: a.duration,
        payload: a.payload,
        gather_us: a.gather_us,
        relay_ports: ports("--relay-ports", &a.relay_ports)?,
        coturn: a.coturn.clone(),
        exe: std::env::current_exe()?,
    };
    let r = secrelay_lab::client::turn::run(&o)?;
    print(&r);
    if let Some(p) = &a.json {
        std::fs::write(p, serde_json::to_string_pretty(&r)?)
            .map_err(|e| anyhow!("--json {}: {e}", p.display()))?;
    }
    Ok(())
}
