//! Chromium behind a firewall that lets no UDP out still reaches the media: over ICE-TCP
//! (`ice_tcp`: the answer's passive TCP candidate), or, where only TCP port 443 is open,
//! through secrelay's TURN server over TLS on the HTTPS port (`turn_tls`). The browser runs in
//! a network namespace of its own, joined to this one by a veth pair, with iptables rules in it
//! that drop every outgoing UDP datagram (or everything but TCP to port 443);
//! the gateway serves HTTPS (its certificate from a private CA that Chromium's NSS database
//! trusts) and its media on the veth's address. Two room pages
//! (`interop/webrtc/chromium_room.py`) join one room and must each play the other's video and
//! audio: ICE to the gateway's UDP host candidate cannot succeed, so every packet went over the
//! pages' TCP connections (the API reports `tcp` for both while they play), or through `turns:`
//! allocations (the gateway's TURN counters: allocations made, packets relayed both ways).
//! And with nothing dropped, through the gateway's AF_XDP path on this end of the pair.
//!
//! Needs root (a network namespace, a veth pair, iptables), `ip` and `iptables`, Chromium,
//! certutil and the interop venv (`scripts/setup`). Where one is missing the test says
//! SKIPPED, except under CI (`CI` set), where it fails (`lab_support::missing`).

// scripts/run-tests: alone (headless Chromium plays media here; a second heavy test
// executable beside it would disturb the browser's timing)

mod lab_support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use lab_support::missing;
use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs a command; its stderr when it fails.
fn sh(args: &[&str]) -> Result<(), String> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(|e| format!("{}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// What the browser's network lets through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Net {
    /// IPv4, every outgoing UDP datagram dropped.
    NoUdp,
    /// IPv4, everything dropped but TCP to port 443 (an office or hotel network).
    Tcp443Only,
    /// IPv6 only: no IPv4 address but loopback.
    Ipv6Only,
    /// IPv4, nothing dropped, and the namespace's end of the pair computes its UDP checksums:
    /// for the gateway's AF_XDP path on this end (veth's checksum offload would leave them
    /// unfinished, which that path refuses).
    Open,
}

/// A network namespace joined to this one by a veth pair (`host` here, the next address in
/// it), with `Net`'s rules; removed when dropped.
struct Firewalled {
    name: String,
    veth: String,
    host: String,
}

impl Firewalled {
    fn new(net: Net) -> Result<Firewalled, String> {
        static MADE: AtomicU32 = AtomicU32::new(0);
        let k = MADE.fetch_add(1, Ordering::Relaxed) % 60;
        let id = std::process::id();
        // IPv4: a /30 of its own, this process's /24, the k-th namespace's four addresses in
        // it. IPv6: a /64 of its own under a unique-local prefix.
        let v4 = format!("10.{}.{}", 200 + id % 50, (id / 50) % 250);
        let v6 = format!("fd5e:{:x}:{k:x}:", id % 0xffff);
        let (host, inner_addr) = match net {
            Net::NoUdp | Net::Tcp443Only | Net::Open => (
                format!("{v4}.{}", 4 * k + 1),
                format!("{v4}.{}/30", 4 * k + 2),
            ),
            Net::Ipv6Only => (format!("{v6}:1"), format!("{v6}:2/64")),
        };
        let ns = Firewalled {
            name: format!("secrelay-fw-{id}-{k}"),
            veth: format!("srt{}x{k}", id % 100_000),
            host,
        };
        let inner = format!("{}n", ns.veth);
        sh(&["ip", "netns", "add", &ns.name])?;
        let inside = |args: &[&str]| {
            let mut all = vec!["ip", "netns", "exec", ns.name.as_str()];
            all.extend_from_slice(args);
            sh(&all)
        };
        // No address may appear once Chromium runs: a link-local address coming up a moment
        // after the link would be a network change to it, which aborts the requests in
        // flight. IPv4 only: no IPv6 at all; IPv6 only: no link-local address and no
        // duplicate address detection (addresses usable at once).
        let sysctls: &[&str] = match net {
            Net::NoUdp | Net::Tcp443Only | Net::Open => &[
                "net.ipv6.conf.all.disable_ipv6=1",
                "net.ipv6.conf.default.disable_ipv6=1",
            ],
            Net::Ipv6Only => &[
                "net.ipv6.conf.all.accept_dad=0",
                "net.ipv6.conf.default.accept_dad=0",
                "net.ipv6.conf.default.addr_gen_mode=1",
            ],
        };
        for k in sysctls {
            inside(&["sysctl", "-qw", k])?;
        }
        sh(&[
            "ip", "link", "add", &ns.veth, "type", "veth", "peer", "name", &inner,
        ])?;
        if net == Net::Open {
            secrelay_xsk::set_tx_checksum_offload(&inner, false).map_err(|e| e.to_string())?;
        }
        sh(&["ip", "link", "set", &inner, "netns", &ns.name])?;
        let host_prefix = match net {
            Net::NoUdp | Net::Tcp443Only | Net::Open => format!("{}/30", ns.host),
            Net::Ipv6Only => {
                for k in ["addr_gen_mode=1", "accept_dad=0"] {
                    sh(&["sysctl", "-qw", &format!("net.ipv6.conf.{}.{k}", ns.veth)])?;
                    inside(&["sysctl", "-qw", &format!("net.ipv6.conf.{inner}.{k}")])?;
                }
                format!("{}/64", ns.host)
            }
        };
        sh(&["ip", "addr", "add", &host_prefix, "dev", &ns.veth, "nodad"])?;
        sh(&["ip", "link", "set", &ns.veth, "up"])?;
        inside(&["ip", "addr", "add", &inner_addr, "dev", &inner, "nodad"])?;
        inside(&["ip", "link", "set", &inner, "up"])?;
        inside(&["ip", "link", "set", "lo", "up"])?;
        // Loopback stays open (DevTools); then what the network lets out.
        match net {
            Net::NoUdp => {
                inside(&["iptables", "-A", "OUTPUT", "-o", "lo", "-j", "ACCEPT"])?;
                inside(&["iptables", "-A", "OUTPUT", "-p", "udp", "-j", "DROP"])?;
            }
            Net::Tcp443Only => {
                inside(&["iptables", "-A", "OUTPUT", "-o", "lo", "-j", "ACCEPT"])?;
                inside(&[
                    "iptables", "-A", "OUTPUT", "-p", "tcp", "--dport", "443", "-j", "ACCEPT",
                ])?;
                inside(&["iptables", "-A", "OUTPUT", "-j", "DROP"])?;
            }
            Net::Ipv6Only | Net::Open => {}
        }
        Ok(ns)
    }

    /// `host:port` (with brackets around an IPv6 host).
    fn host_port(&self, port: u16) -> String {
        if self.host.contains(':') {
            format!("[{}]:{port}", self.host)
        } else {
            format!("{}:{port}", self.host)
        }
    }

    /// Packets the rules dropped.
    fn dropped(&self) -> u64 {
        let out = Command::new("ip")
            .args([
                "netns", "exec", &self.name, "iptables", "-L", "OUTPUT", "-v", "-x", "-n",
            ])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        out.lines()
            .filter(|l| l.contains("DROP"))
            .filter_map(|l| l.split_whitespace().next()?.parse::<u64>().ok())
            .sum()
    }
}

impl Drop for Firewalled {
    fn drop(&mut self) {
        let _ = sh(&["ip", "netns", "del", &self.name]);
        let _ = sh(&["ip", "link", "del", &self.veth]);
    }
}

/// `secrelay serve` with `config`; its HTTPS URL, its metrics listener and its log.
struct Gateway {
    child: Child,
    base: String,
    metrics: SocketAddr,
    log: Arc<Mutex<String>>,
}

impl Gateway {
    fn start(config: &Path) -> Gateway {
        // The banner does not name the metrics listener: a port free a moment ago.
        let metrics = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .unwrap();
        let (child, banner, log) =
            lab_support::serve_config(config, &["--metrics", &metrics.to_string()]);
        let base = banner
            .and_then(|b| b.url())
            .unwrap_or_else(|| panic!("no HTTPS address:\n{}", log.lock().unwrap()));
        Gateway {
            child,
            base,
            metrics,
            log,
        }
    }

    /// A sample's value from `/metrics` (0 when absent).
    fn metric(&self, sample: &str) -> f64 {
        let mut s = TcpStream::connect(self.metrics).expect("metrics listener");
        write!(
            s,
            "GET /metrics HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            self.metrics
        )
        .unwrap();
        let mut body = String::new();
        s.read_to_string(&mut body).unwrap();
        body.lines()
            .find_map(|l| l.strip_prefix(sample)?.trim().parse().ok())
            .unwrap_or(0.0)
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One test at a time: two Chromiums would share this machine's cores and slow each other.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static ONE: Mutex<()> = Mutex::new(());
    ONE.lock().unwrap_or_else(|e| e.into_inner())
}

/// What the test needs: Chromium, the venv's Python with the driver's modules, certutil, and
/// a firewalled namespace.
fn needs(test: &str, net: Net) -> Option<(PathBuf, PathBuf, Firewalled)> {
    let chromium = std::env::var_os("SECRELAY_CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    let python = std::env::var_os("SECRELAY_INTEROP_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("interop/webrtc/.venv/bin/python"));
    let py_ok = Command::new(&python)
        .args(["-c", "import websocket, PIL"])
        .output()
        .is_ok_and(|o| o.status.success());
    let why = if !chromium.exists() {
        format!("no Chromium at {}", chromium.display())
    } else if !py_ok {
        format!(
            "no Python with websocket-client and Pillow at {}",
            python.display()
        )
    } else if Command::new("certutil").arg("-H").output().is_err() {
        "no certutil (Debian package libnss3-tools)".into()
    } else {
        match Firewalled::new(net) {
            Ok(ns) => return Some((chromium, python, ns)),
            Err(e) => format!("no network namespace with iptables (needs root): {e}"),
        }
    };
    missing(test, &why);
    None
}

/// Writes a private CA into `dir` and a configuration of the gateway on the namespace's
/// veth address, HTTPS from that CA, with `extra` lines; the configuration's path.
fn configure(dir: &Path, ns: &Firewalled, https_port: u16, extra: &str) -> PathBuf {
    let ca = dir.join("ca");
    let out = Command::new(env!("CARGO_BIN_EXE_secrelay"))
        .args(["ca", "init", "--dir"])
        .arg(&ca)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let config = dir.join("secrelay.toml");
    std::fs::write(
        &config,
        format!(
            "https = \"{hp}\"\ntls_ca_dir = {ca:?}\nadmin_key = \"{ADMIN_KEY}\"\n{extra}",
            hp = ns.host_port(https_port),
            ca = ca.to_str().unwrap()
        ),
    )
    .unwrap();
    config
}

const ADMIN_KEY: &str = "the admin key of the firewalled Chromium tests";

/// Runs two room pages in the namespace against `gw`; the script's JSON, after checking it
/// passed.
fn two_pages(ns: &Firewalled, gw: &Gateway, python: &Path, chromium: &Path, ca: &Path) -> Value {
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            &ns.name,
            "timeout",
            "--kill-after=5",
            "150",
        ])
        .arg(python)
        .arg(repo().join("interop/webrtc/chromium_room.py"))
        .args([
            "--base",
            &gw.base,
            "--pages",
            "2",
            "--room",
            "behind-firewall",
        ])
        .args(["--timeout", "90", "--chromium"])
        .arg(chromium)
        .arg("--ca")
        .arg(ca)
        .env("SECRELAY_ADMIN_KEY", ADMIN_KEY)
        .output()
        .expect("ip netns exec runs");
    let log = format!("gateway:\n{}", gw.log.lock().unwrap());
    let v = lab_support::script_json("chromium_room.py", &out, &log);
    eprintln!("chromium_room.py: {v}");
    assert!(
        out.status.success(),
        "the pages did not play each other: {v}\ngateway:\n{}",
        gw.log.lock().unwrap()
    );
    v
}

#[test]
fn chromium_on_an_ipv6_only_network_plays_through_a_dual_stack_gateway() {
    let test = "chromium_on_an_ipv6_only_network_plays_through_a_dual_stack_gateway";
    let _one = one_at_a_time();
    let Some((chromium, python, ns)) = needs(test, Net::Ipv6Only) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // One dual-stack socket; the IPv4 candidate (this machine's default address) is out of
    // the namespace's reach, the IPv6 one is the veth's.
    let media = format!("udp = \"[::]:0\"\nannounce_ipv6 = \"{}\"\n", ns.host);
    let config = configure(dir.path(), &ns, 0, &media);
    let gw = Gateway::start(&config);
    let v = two_pages(&ns, &gw, &python, &chromium, &dir.path().join("ca/ca.pem"));
    assert_eq!(v["transports"], serde_json::json!(["udp", "udp"]), "{v}");
    for r in v["remotes"].as_array().expect("remotes") {
        let remote: SocketAddr = r.as_str().unwrap().parse().unwrap();
        assert!(remote.is_ipv6(), "{v}");
    }
}

#[test]
fn chromium_that_can_send_no_udp_plays_over_ice_tcp() {
    let test = "chromium_that_can_send_no_udp_plays_over_ice_tcp";
    let _one = one_at_a_time();
    let Some((chromium, python, ns)) = needs(test, Net::NoUdp) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let media = format!(
        "udp = \"{h}\"\nannounce = \"{}\"\nice_tcp = \"{h}\"\n",
        ns.host,
        h = ns.host_port(0)
    );
    let config = configure(dir.path(), &ns, 0, &media);
    let gw = Gateway::start(&config);
    let v = two_pages(&ns, &gw, &python, &chromium, &dir.path().join("ca/ca.pem"));
    assert!(ns.dropped() > 0, "the firewall dropped no UDP");
    // Both pages' media over their TCP connections, as the API reported while they played.
    assert_eq!(v["transports"], serde_json::json!(["tcp", "tcp"]), "{v}");
    assert!(gw.metric("secrelay_ice_tcp_connections_accepted_total") >= 2.0);
}

#[test]
fn chromium_with_only_tcp_443_open_plays_through_turn_over_tls_on_the_https_port() {
    let test = "chromium_with_only_tcp_443_open_plays_through_turn_over_tls_on_the_https_port";
    let _one = one_at_a_time();
    let Some((chromium, python, ns)) = needs(test, Net::Tcp443Only) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // Every way in is offered: the UDP host candidate, an ICE-TCP one on another port, and
    // TURN over TLS on the HTTPS port, 443.
    let media = format!(
        "udp = \"{h}\"\nannounce = \"{}\"\nice_tcp = \"{h}\"\nturn_tls = true\n\
         turn_secret = \"a secret of this test only, 32 bytes\"\n",
        ns.host,
        h = ns.host_port(0)
    );
    let config = configure(dir.path(), &ns, 443, &media);
    let gw = Gateway::start(&config);
    two_pages(&ns, &gw, &python, &chromium, &dir.path().join("ca/ca.pem"));
    assert!(ns.dropped() > 0, "the firewall dropped nothing");
    // Only TURN over TLS on 443 could carry it: the browser's UDP and its TCP to the ICE-TCP
    // port were dropped, and the gateway offers no other TURN.
    assert_eq!(
        gw.metric("secrelay_ice_tcp_connections_accepted_total"),
        0.0,
        "an ICE-TCP connection got through the firewall"
    );
    assert!(gw.metric("secrelay_turn_allocations_made_total") >= 2.0);
    for direction in ["to_peer", "to_client"] {
        let n = gw.metric(&format!(
            "secrelay_turn_relayed_packets_total{{direction=\"{direction}\"}}"
        ));
        assert!(n > 100.0, "{direction}: {n} packets relayed");
    }
}

/// Chromium plays through the gateway's AF_XDP path: the XDP filter and the gateway's XDP
/// sockets on this end of the pair, so every ICE check, DTLS record and SRTP packet of the two
/// pages reaches the gateway as a raw frame past the kernel's UDP layer, and leaves as one
/// the gateway wrote.
#[test]
fn chromium_plays_through_the_af_xdp_media_path() {
    let test = "chromium_plays_through_the_af_xdp_media_path";
    let _one = one_at_a_time();
    let Some((chromium, python, ns)) = needs(test, Net::Open) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let media = format!(
        "udp = \"{}\"\nannounce = \"{}\"\nxdp = \"{}\"\nmedia_io = \"af_xdp\"\n",
        ns.host_port(20000),
        ns.host,
        ns.veth
    );
    let config = configure(dir.path(), &ns, 0, &media);
    let gw = Gateway::start(&config);
    assert!(
        gw.log.lock().unwrap().contains("XDP socket open"),
        "{}",
        gw.log.lock().unwrap()
    );
    let v = two_pages(&ns, &gw, &python, &chromium, &dir.path().join("ca/ca.pem"));
    assert_eq!(v["transports"], serde_json::json!(["udp", "udp"]), "{v}");
    // Worker 0 has the pair's one queue; what it read was handed to the others' members.
    assert_eq!(gw.metric("secrelay_media_io_workers{path=\"af_xdp\"}"), 1.0);
    let redirected = gw.metric("secrelay_xdp_redirected_total");
    assert!(
        redirected > 500.0,
        "{redirected} datagrams through the XDP socket"
    );
    assert_eq!(gw.metric("secrelay_drops_total{reason=\"bad_frame\"}"), 0.0);
}
