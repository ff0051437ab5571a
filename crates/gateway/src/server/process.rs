//! What `/metrics` says about the process rather than the gateway: the build
//! (`secrelay_build_info{version,commit,profile}`) and the process figures every Prometheus
//! exporter gives under the same names (`process_cpu_seconds_total`,
//! `process_resident_memory_bytes`, `process_open_fds`, `process_max_fds`,
//! `process_start_time_seconds`, `process_threads`), read from `/proc/self` at each scrape.

use std::fmt;
use std::sync::OnceLock;

use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Unit;

/// The build a gateway runs, as `secrelay --version` and `secrelay_build_info` name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildInfo {
    /// The crate version (`0.1.0`).
    pub version: String,
    /// The git commit it was built from (`unknown` outside a checkout).
    pub commit: String,
    /// The cargo profile (`release`, `debug`).
    pub profile: String,
}

static BUILD: OnceLock<BuildInfo> = OnceLock::new();

impl BuildInfo {
    /// Sets the process's build, once (the binary, at start); later calls are ignored.
    pub fn set(info: BuildInfo) {
        let _ = BUILD.set(info);
    }

    /// The process's build: what [`BuildInfo::set`] was given, else this crate's version with
    /// an unknown commit (an embedder that never said).
    pub fn get() -> &'static BuildInfo {
        BUILD.get_or_init(|| BuildInfo {
            version: env!("CARGO_PKG_VERSION").into(),
            commit: "unknown".into(),
            profile: if cfg!(debug_assertions) {
                "debug"
            } else {
                "release"
            }
            .into(),
        })
    }
}

/// The process's figures, as far as `/proc` gives them (none elsewhere).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProcessFigures {
    /// User and system CPU seconds.
    pub cpu_seconds: Option<f64>,
    /// Resident memory in bytes (`VmRSS`).
    pub resident_bytes: Option<u64>,
    /// Open file descriptors.
    pub open_fds: Option<u64>,
    /// The soft limit on open file descriptors.
    pub max_fds: Option<u64>,
    /// When the process started, in seconds since the Unix epoch.
    pub start_time_seconds: Option<f64>,
    /// Threads.
    pub threads: Option<u64>,
}

/// Clock ticks per second of `/proc/*/stat`'s times (`USER_HZ`).
fn user_hz() -> f64 {
    match nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK) {
        Ok(Some(n)) if n > 0 => n as f64,
        _ => 100.0,
    }
}

impl ProcessFigures {
    /// Reads them now.
    pub fn now() -> ProcessFigures {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse::<u64>().ok())
        };
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
        // Fields after the command name (in parentheses, which may hold spaces): state is
        // field 3, utime 14, stime 15, starttime 22.
        let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
        let f: Vec<&str> = after.split_whitespace().collect();
        let num = |i: usize| f.get(i - 3).and_then(|v| v.parse::<u64>().ok());
        let hz = user_hz();
        let cpu_seconds = match (num(14), num(15)) {
            (Some(u), Some(s)) => Some((u + s) as f64 / hz),
            _ => None,
        };
        let boot = std::fs::read_to_string("/proc/stat").ok().and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("btime "))
                .and_then(|v| v.trim().parse::<u64>().ok())
        });
        let start_time_seconds = match (boot, num(22)) {
            (Some(b), Some(t)) => Some(b as f64 + t as f64 / hz),
            _ => None,
        };
        ProcessFigures {
            cpu_seconds,
            resident_bytes: field("VmRSS:").map(|kib| kib * 1024),
            open_fds: std::fs::read_dir("/proc/self/fd")
                .ok()
                .map(|d| d.count() as u64),
            max_fds: nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
                .ok()
                .map(|(soft, _)| soft),
            start_time_seconds,
            threads: field("Threads:"),
        }
    }
}

/// `secrelay_build_info` and the `process_*` metrics.
pub(crate) fn encode(e: &mut DescriptorEncoder<'_>) -> Result<(), fmt::Error> {
    let b = BuildInfo::get();
    let g = ConstGauge::new(1i64);
    g.encode(
        e.encode_descriptor(
            "secrelay_build_info",
            "The build the gateway runs: its version, git commit and cargo profile (always 1)",
            None,
            g.metric_type(),
        )?
        .encode_family(&[
            ("version", b.version.as_str()),
            ("commit", b.commit.as_str()),
            ("profile", b.profile.as_str()),
        ])?,
    )?;
    let p = ProcessFigures::now();
    if let Some(v) = p.cpu_seconds {
        let c = ConstCounter::new(v);
        c.encode(e.encode_descriptor(
            "process_cpu",
            "User and system CPU time the process spent",
            Some(&Unit::Seconds),
            c.metric_type(),
        )?)?;
    }
    let gauges: [(&str, &str, Option<Unit>, Option<f64>); 5] = [
        (
            "process_resident_memory",
            "Resident memory size",
            Some(Unit::Bytes),
            p.resident_bytes.map(|v| v as f64),
        ),
        (
            "process_open_fds",
            "Open file descriptors",
            None,
            p.open_fds.map(|v| v as f64),
        ),
        (
            "process_max_fds",
            "The limit on open file descriptors (soft)",
            None,
            p.max_fds.map(|v| v as f64),
        ),
        (
            "process_start_time",
            "When the process started, in seconds since the Unix epoch",
            Some(Unit::Seconds),
            p.start_time_seconds,
        ),
        (
            "process_threads",
            "Threads of the process",
            None,
            p.threads.map(|v| v as f64),
        ),
    ];
    for (name, help, unit, value) in gauges {
        if let Some(v) = value {
            let g = ConstGauge::new(v);
            g.encode(e.encode_descriptor(name, help, unit.as_ref(), g.metric_type())?)?;
        }
    }
    Ok(())
}

/// One socket of the kernel's UDP tables (`/proc/net/udp`, `udp6`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpSocketRow {
    /// Its local port.
    pub port: u16,
    /// Its inode (what `/proc/PID/fd` links name it by).
    pub inode: u64,
    /// Datagrams the kernel dropped at it (a full receive buffer).
    pub drops: u64,
}

/// The sockets of one UDP table's text (a header line, then `sl local rem st tx:rx tr:when
/// retrnsmt uid timeout inode ref pointer drops`, addresses as hex `ADDR:PORT`); a line it
/// cannot read is passed over.
pub fn udp_table(text: &str) -> impl Iterator<Item = UdpSocketRow> + '_ {
    text.lines().skip(1).filter_map(|line| {
        let mut fields = line.split_whitespace();
        let (_, port) = fields.nth(1)?.rsplit_once(':')?;
        let port = u16::from_str_radix(port, 16).ok()?;
        let inode = fields.nth(7)?.parse().ok()?;
        let drops = fields.nth(2)?.parse().ok()?;
        Some(UdpSocketRow { port, inode, drops })
    })
}

/// Each socket of this process's network namespace, from `/proc/self/net/udp` and `udp6` as
/// they read now (a table that cannot be read gives none). The kernel walks its table afresh
/// as it is read, so a socket may be passed over while others open and close.
pub(crate) fn each_udp_socket(mut f: impl FnMut(UdpSocketRow)) {
    for path in ["/proc/self/net/udp", "/proc/self/net/udp6"] {
        if let Ok(text) = std::fs::read_to_string(path) {
            udp_table(&text).for_each(&mut f);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drops_are_read_from_the_lines_of_the_sockets_named() {
        let table = "   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n\
            \x20 1: 0100007F:985D 00000000:0000 07 00000000:007F6F80 00:00000000 00000000     0        0 4242 2 0000000000000000 17803\n\
            \x20 2: 0100007F:D7AA 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 4343 2 0000000000000000 5\n\
            \x20 3: 0100007F:D7AB 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 4444 2 0000000000000000 9\n\
            a line the kernel never writes\n\
            \x20 4: 0100007F:D7AC 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 4545 2\n";
        let drops_in = |text: &str, inodes: &[u64]| -> u64 {
            udp_table(text)
                .filter(|r| inodes.contains(&r.inode))
                .map(|r| r.drops)
                .sum()
        };
        assert_eq!(drops_in(table, &[4242, 4444]), 17803 + 9);
        assert_eq!(drops_in(table, &[4545, 1]), 0);
        assert_eq!(drops_in("", &[4242]), 0);
        assert_eq!(udp_table(table).next().map(|r| r.port), Some(0x985D));
    }

    #[test]
    fn a_socket_whose_buffer_overflowed_has_its_drops_read_and_kept_once_closed() {
        use std::net::UdpSocket;
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        socket2::SockRef::from(&rx)
            .set_recv_buffer_size(4096)
            .unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        for _ in 0..200 {
            tx.send_to(&[0u8; 1000], rx.local_addr().unwrap()).unwrap();
        }
        let inode = super::super::udp::inode(&rx).unwrap();
        let mut dropped = 0;
        each_udp_socket(|r| {
            if r.inode == inode {
                dropped += r.drops;
            }
        });
        assert!(dropped > 0 && dropped < 200, "{dropped} dropped");
        let none = super::super::stats::GatewayStats::default();
        assert_eq!(none.media_socket_drops(), 0);
        // As a worker's telephony leg's socket, its drops are the gateway's, and stay counted
        // once it closed.
        let worker = std::sync::Arc::new(super::super::stats::WorkerStats::default());
        let stats = super::super::stats::GatewayStats {
            workers: vec![worker.clone()],
            ..Default::default()
        };
        worker.socket_opened(inode);
        assert_eq!(stats.media_socket_drops(), dropped);
        worker.socket_closed(inode);
        drop(rx);
        assert_eq!(stats.media_socket_drops(), dropped);
        worker.socket_opened(inode + 1);
        assert_eq!(stats.media_socket_drops(), dropped);
    }

    #[test]
    fn the_process_figures_are_read_and_plausible() {
        let p = ProcessFigures::now();
        assert!(p.cpu_seconds.is_some_and(|s| s >= 0.0), "{p:?}");
        assert!(p.resident_bytes.is_some_and(|b| b > 1 << 20), "{p:?}");
        assert!(p.open_fds.is_some_and(|n| n >= 3), "{p:?}");
        assert!(p.max_fds.is_some_and(|n| n >= p.open_fds.unwrap()), "{p:?}");
        assert!(p.threads.is_some_and(|n| n >= 1), "{p:?}");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let started = p.start_time_seconds.unwrap();
        assert!(
            started <= now + 1.0 && started > now - 86_400.0,
            "{started} vs {now}"
        );
    }

    #[test]
    fn build_info_and_process_metrics_encode_under_their_usual_names() {
        #[derive(Debug)]
        struct Only;
        impl prometheus_client::collector::Collector for Only {
            fn encode(&self, mut e: DescriptorEncoder<'_>) -> Result<(), fmt::Error> {
                encode(&mut e)
            }
        }
        let mut reg = prometheus_client::registry::Registry::default();
        reg.register_collector(Box::new(Only));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &reg).unwrap();
        let b = BuildInfo::get();
        assert!(
            text.contains(&format!(
                "secrelay_build_info{{version=\"{}\",commit=\"{}\",profile=\"{}\"}} 1",
                b.version, b.commit, b.profile
            )),
            "{text}"
        );
        for name in [
            "process_cpu_seconds_total ",
            "process_resident_memory_bytes ",
            "process_open_fds ",
            "process_max_fds ",
            "process_start_time_seconds ",
            "process_threads ",
        ] {
            assert!(text.contains(name), "{name}: {text}");
        }
    }
}
