//! Network namespaces of a test's own, joined to this one by a veth pair: for what must cross a
//! real network interface (an XDP program sees only what arrives on one), on one machine.
//!
//! A [`Netns`] is held open by a process of its own (`unshare -n sleep`); commands run in it
//! through `nsenter`. Dropping it ends every process in it, and the kernel then removes the
//! namespace and every veth pair with an end in it. Making one needs root (`CAP_SYS_ADMIN`,
//! `CAP_NET_ADMIN`).

use std::io;
use std::process::{Child, Command, Stdio};

/// A network namespace, until dropped.
#[derive(Debug)]
pub struct Netns {
    anchor: Child,
}

impl Netns {
    /// A new namespace with its loopback up. Err: why it could not be made (not root, no
    /// `unshare`).
    pub fn new() -> io::Result<Netns> {
        let anchor = Command::new("unshare")
            .args(["--net", "--", "sleep", "100000"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| io::Error::new(e.kind(), format!("unshare: {e}")))?;
        let ns = Netns { anchor };
        // unshare makes the namespace before it runs sleep: wait until the process is in it.
        let own = std::fs::read_link("/proc/self/ns/net")?;
        let path = format!("/proc/{}/ns/net", ns.pid());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            match std::fs::read_link(&path) {
                Ok(l) if l != own => break,
                _ if std::time::Instant::now() > deadline => {
                    return Err(io::Error::other(
                        "unshare --net made no namespace (not root?)",
                    ))
                }
                _ => std::thread::sleep(std::time::Duration::from_millis(5)),
            }
        }
        ns.run(&["ip", "link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// The pid of the process holding it.
    pub fn pid(&self) -> u32 {
        self.anchor.id()
    }

    /// `program` to run in the namespace.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new("nsenter");
        c.args(["-t", &self.pid().to_string(), "-n", "--"])
            .arg(program);
        c
    }

    /// Runs `args` in the namespace to completion: what it printed. Err: it failed, with what
    /// it said.
    pub fn run(&self, args: &[&str]) -> io::Result<String> {
        let mut c = self.command(args[0]);
        c.args(&args[1..]);
        checked(c, &format!("{} (in a namespace)", args.join(" ")))
    }

    /// A veth pair between this namespace (`outside`, with address `outside_cidr`) and `self`
    /// (`inside`, `inside_cidr`), both ends up. Err: what `ip` said.
    pub fn veth(
        &self,
        outside: &str,
        outside_cidr: &str,
        inside: &str,
        inside_cidr: &str,
    ) -> io::Result<()> {
        self.veth_queues(outside, outside_cidr, inside, inside_cidr, 1)
    }

    /// [`Netns::veth`] with `queues` transmit and receive queues at each end (a datagram
    /// leaves on the queue the kernel picks for its socket, and arrives on the same-numbered
    /// queue at the other end).
    pub fn veth_queues(
        &self,
        outside: &str,
        outside_cidr: &str,
        inside: &str,
        inside_cidr: &str,
        queues: u32,
    ) -> io::Result<()> {
        let pid = self.pid().to_string();
        let q = queues.to_string();
        let each = ["numtxqueues", &q, "numrxqueues", &q];
        let mut args = vec!["ip", "link", "add", outside];
        args.extend(each);
        args.extend(["type", "veth", "peer", "name", inside]);
        args.extend(each);
        args.extend(["netns", &pid]);
        run_here(&args)?;
        run_here(&["ip", "addr", "add", outside_cidr, "dev", outside])?;
        run_here(&["ip", "link", "set", outside, "up"])?;
        self.run(&["ip", "addr", "add", inside_cidr, "dev", inside])?;
        self.run(&["ip", "link", "set", inside, "up"])?;
        Ok(())
    }

    /// The kernel's UDP counters in the namespace (`/proc/net/snmp`'s `Udp:` lines), by name
    /// (`InDatagrams`, `NoPorts`, `InErrors`, `RcvbufErrors`, …).
    pub fn udp_counters(&self) -> io::Result<std::collections::HashMap<String, u64>> {
        let snmp = self.run(&["cat", "/proc/net/snmp"])?;
        let mut lines = snmp.lines().filter(|l| l.starts_with("Udp:"));
        let (Some(names), Some(values)) = (lines.next(), lines.next()) else {
            return Err(io::Error::other("/proc/net/snmp has no Udp lines"));
        };
        Ok(names
            .split_whitespace()
            .skip(1)
            .zip(values.split_whitespace().skip(1))
            .filter_map(|(n, v)| Some((n.to_owned(), v.parse().ok()?)))
            .collect())
    }
}

/// `n` UDP sockets bound to addresses this machine does not have (IP_TRANSPARENT, root only):
/// `PREFIX.x.y`, from `PREFIX.0.0` on, each on port 5000 + its index; what they send leaves with
/// those spoofed sources through whatever route reaches the destination (a veth pair into a
/// [`Netns`]).
pub fn spoofed_sockets(prefix: [u8; 2], n: u16) -> io::Result<Vec<std::net::UdpSocket>> {
    (0..n)
        .map(|i| {
            let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None)?;
            s.set_ip_transparent_v4(true).map_err(|e| {
                io::Error::new(e.kind(), format!("IP_TRANSPARENT (root only): {e}"))
            })?;
            let [a, b] = prefix;
            let from = std::net::SocketAddr::from(([a, b, (i >> 8) as u8, i as u8], 5000 + i));
            s.bind(&from.into())?;
            Ok(s.into())
        })
        .collect()
}

impl Drop for Netns {
    /// Ends every process in the namespace (a process started in it and still running, a
    /// panicking test's gateway say, would keep it and its veth pairs alive), then the one
    /// holding it.
    fn drop(&mut self) {
        let ns = std::fs::read_link(format!("/proc/{}/ns/net", self.pid()));
        if let (Ok(ns), Ok(procs)) = (ns, std::fs::read_dir("/proc")) {
            for pid in procs
                .flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
                .filter(|&p| p != self.pid())
            {
                if std::fs::read_link(format!("/proc/{pid}/ns/net")).is_ok_and(|l| l == ns) {
                    let _ = Command::new("kill")
                        .args(["-KILL", &pid.to_string()])
                        .status();
                }
            }
        }
        let _ = self.anchor.kill();
        let _ = self.anchor.wait();
    }
}

fn run_here(args: &[&str]) -> io::Result<String> {
    let mut c = Command::new(args[0]);
    c.args(&args[1..]);
    checked(c, &args.join(" "))
}

/// Runs `c` to completion: what it printed. Err: it failed, named `what`, with what it said.
fn checked(mut c: Command, what: &str) -> io::Result<String> {
    let out = c.output()?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(io::Error::other(format!(
            "{what}: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}
