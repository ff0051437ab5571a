//! secrelay's XDP filter: datagrams to the gateway's media ports from sources it has not
//! admitted are dropped in the network driver (or, where the driver has no XDP, at the start of
//! the kernel's receive path), before the socket layer spends anything on them.
//!
//! The program (`bpf/filter.bpf.c`, compiled by `scripts/build-bpf` and committed as
//! `bpf/filter.bpf.o`) judges every UDP datagram by its destination port:
//!
//! | port's policy | passes |
//! |---|---|
//! | not a media port | everything |
//! | [`Policy::Closed`] (a telephony port) | admitted sources only ([`Filter::set_port`]) |
//! | [`Policy::Open`] (a leg that takes any source) | everything |
//! | [`Policy::Shared`] (the WebRTC port) | STUN from anyone (the gateway authenticates ICE checks), the rest from admitted sources ([`Filter::admit`]) |
//!
//! and counts what it passed and dropped per CPU ([`Filter::counts`]). The gateway owns a
//! [`Filter`] and keeps it current as legs come, latch and go.
//!
//! Loading needs `CAP_BPF` and `CAP_NET_ADMIN` (root); [`Filter::load`] and [`Filter::attach`]
//! say what the kernel refused.

use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;

use aya::maps::{Array, HashMap as BpfHashMap, MapData, PerCpuArray, XskMap};
use aya::programs::{TestRun, TestRunOptions, Xdp, XdpMode};
use aya::Ebpf;

/// The compiled program (see `bpf/filter.bpf.c`).
static PROGRAM: &[u8] = aya::include_bytes_aligned!("../bpf/filter.bpf.o");

/// A key of the `allowed` map: source address (IPv6 or IPv4-mapped), source port, destination
/// port, the ports in network byte order.
type SourceKey = [u8; 20];

/// How the filter treats a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// Not a media port: everything passes.
    None,
    /// A media port: datagrams from admitted sources pass, the rest are dropped.
    Closed,
    /// A media port whose leg takes datagrams from any source: everything passes.
    Open,
    /// The shared WebRTC port: STUN passes from anyone, the rest from admitted sources.
    Shared,
}

impl Policy {
    fn code(self) -> u8 {
        match self {
            Policy::None => 0,
            Policy::Closed => 1,
            Policy::Open => 2,
            Policy::Shared => 3,
        }
    }
}

/// Where the program runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// In the network driver (native XDP): before any socket buffer is made.
    Native,
    /// At the start of the kernel's receive path (generic XDP), for drivers without XDP.
    Generic,
}

impl Mode {
    /// `native` or `generic`.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Native => "native",
            Mode::Generic => "generic",
        }
    }
}

/// Which modes [`Filter::attach`] may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Attach {
    /// Native where the driver has it, generic otherwise.
    #[default]
    Auto,
    /// Native only.
    Native,
    /// Generic only.
    Generic,
}

/// What the program counted since it was attached (summed over the CPUs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Dropped: to a media port, from a source not admitted.
    pub dropped: u64,
    /// Passed: from an admitted source.
    pub admitted: u64,
    /// Passed: to an open port.
    pub open: u64,
    /// Passed: STUN to the shared port.
    pub stun: u64,
    /// Passed: a fragment after the first (no UDP header to judge).
    pub fragment: u64,
    /// Of those passed, how many went to an AF_XDP socket ([`Filter::set_socket`]) rather
    /// than to the socket layer.
    pub xsk: u64,
}

/// Why the filter could not be attached or changed.
#[derive(Debug)]
pub struct Error(String);

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

fn err(what: &str, e: impl fmt::Display) -> Error {
    Error(format!("{what}: {e}"))
}

struct Maps {
    allowed: BpfHashMap<MapData, SourceKey, u8>,
    ports: Array<MapData, u8>,
    /// The slot of each interface the program is attached to, by interface index.
    ifaces: BpfHashMap<MapData, u32, u32>,
    /// The AF_XDP sockets, by interface slot and receive queue (slot * MAX_QUEUES + queue).
    xsks: XskMap<MapData>,
    /// The queue whose AF_XDP socket reads a port (queue + 1; 0: any).
    owners: Array<MapData, u32>,
    /// The sources admitted to each port, as the `allowed` map holds them, with how many
    /// admissions hold each (an address two owners admitted stays until both revoke it).
    by_port: HashMap<u16, HashMap<SocketAddr, u32>>,
}

/// The filter, attached to the interfaces it was given until dropped (one program and one
/// set of maps for all of them).
pub struct Filter {
    maps: Mutex<Maps>,
    counts: PerCpuArray<MapData, u64>,
    attached: Vec<(String, Mode)>,
    // Holds the program and its attachment: dropping it detaches the program.
    ebpf: Ebpf,
}

impl fmt::Debug for Filter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Filter")
            .field("attached", &self.attached)
            .finish_non_exhaustive()
    }
}

impl Filter {
    /// Loads the program into the kernel, every port's policy [`Policy::None`], attached
    /// nowhere yet ([`Filter::attach`]). Err: the kernel refused it, saying why.
    pub fn load() -> Result<Filter, Error> {
        let mut ebpf = Ebpf::load(PROGRAM).map_err(|e| err("loading the XDP filter", e))?;
        program_mut(&mut ebpf)?
            .load()
            .map_err(|e| err("the kernel refused the XDP filter", e))?;
        let map = |ebpf: &mut Ebpf, name: &str| {
            ebpf.take_map(name)
                .ok_or_else(|| Error(format!("the XDP filter object has no map {name}")))
        };
        let allowed = BpfHashMap::try_from(map(&mut ebpf, "allowed")?)
            .map_err(|e| err("the allowed map", e))?;
        let ports =
            Array::try_from(map(&mut ebpf, "ports")?).map_err(|e| err("the ports map", e))?;
        let counts = PerCpuArray::try_from(map(&mut ebpf, "counts")?)
            .map_err(|e| err("the counts map", e))?;
        let ifaces = BpfHashMap::try_from(map(&mut ebpf, "ifaces")?)
            .map_err(|e| err("the ifaces map", e))?;
        let xsks = XskMap::try_from(map(&mut ebpf, "xsks")?).map_err(|e| err("the xsks map", e))?;
        let owners =
            Array::try_from(map(&mut ebpf, "owners")?).map_err(|e| err("the owners map", e))?;
        Ok(Filter {
            maps: Mutex::new(Maps {
                allowed,
                ports,
                ifaces,
                xsks,
                owners,
                by_port: HashMap::new(),
            }),
            counts,
            attached: Vec::new(),
            ebpf,
        })
    }

    /// Attaches the program to `interface` (once per interface, at most [`MAX_INTERFACES`];
    /// several interfaces share the program, its policies and admissions): where it runs
    /// there. Err: the interface does not exist, it has the filter already, there are too
    /// many, or the kernel refused the mode, saying which.
    pub fn attach(&mut self, interface: &str, attach: Attach) -> Result<Mode, Error> {
        if self.attached.iter().any(|(on, _)| on == interface) {
            return Err(Error(format!(
                "the XDP filter is attached to {interface} already"
            )));
        }
        let slot = u32::try_from(self.attached.len())
            .ok()
            .filter(|s| *s < MAX_INTERFACES)
            .ok_or_else(|| {
                Error(format!(
                    "{interface}: the XDP filter takes at most {MAX_INTERFACES} interfaces"
                ))
            })?;
        let ifindex = nix::net::if_::if_nametoindex(interface)
            .map_err(|e| err(&format!("no interface {interface}"), e))?;
        // Its AF_XDP sockets' slot, set before the program runs there.
        self.maps()
            .ifaces
            .insert(ifindex, slot, 0)
            .map_err(|e| err(&format!("{interface}'s slot"), e))?;
        let mode = match attach_program(&mut self.ebpf, (interface, ifindex), attach) {
            Ok(mode) => mode,
            Err(e) => {
                // No slot for an interface the program does not run on.
                let _ = self.maps().ifaces.remove(&ifindex);
                return Err(e);
            }
        };
        self.attached.push((interface.to_owned(), mode));
        Ok(mode)
    }

    /// The interfaces the program is attached to, in order, and where it runs on each.
    pub fn attached(&self) -> impl Iterator<Item = (&str, Mode)> + '_ {
        self.attached.iter().map(|(i, m)| (i.as_str(), *m))
    }

    /// Runs the program on `frame` (an Ethernet frame) `repeat` times in the kernel
    /// (`BPF_PROG_TEST_RUN`), attached or not, counting as for a received frame: whether it
    /// passed, and the kernel's mean time per run. For tests and measurements.
    pub fn run(&self, frame: &[u8], repeat: u32) -> Result<(bool, std::time::Duration), Error> {
        let program: &Xdp = self
            .ebpf
            .program("secrelay_filter")
            .ok_or_else(|| Error("the XDP filter object has no program".into()))?
            .try_into()
            .map_err(|e| err("the XDP filter object", e))?;
        let r = program
            .test_run(TestRunOptions {
                data_in: Some(frame),
                repeat: repeat.max(1),
                ..TestRunOptions::default()
            })
            .map_err(|e| err("running the XDP filter", e))?;
        // XDP_DROP is 1, XDP_PASS 2.
        Ok((r.return_value == 2, r.duration))
    }

    fn maps(&self) -> std::sync::MutexGuard<'_, Maps> {
        // Each change below leaves the maps consistent before it can panic.
        self.maps.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets `port`'s policy.
    pub fn set_policy(&self, port: u16, policy: Policy) -> Result<(), Error> {
        self.maps()
            .ports
            .set(u32::from(port), policy.code(), 0)
            .map_err(|e| err(&format!("port {port}'s policy"), e))
    }

    /// Sets the policy of every port of `first..=last`.
    pub fn set_policies(&self, first: u16, last: u16, policy: Policy) -> Result<(), Error> {
        let mut m = self.maps();
        for port in first..=last {
            m.ports
                .set(u32::from(port), policy.code(), 0)
                .map_err(|e| err(&format!("port {port}'s policy"), e))?;
        }
        Ok(())
    }

    /// Admits `source` to `port` (one more admission of it there).
    pub fn admit(&self, port: u16, source: SocketAddr) -> Result<(), Error> {
        let mut m = self.maps();
        let n = m
            .by_port
            .entry(port)
            .or_default()
            .entry(source)
            .or_insert(0);
        *n += 1;
        if *n > 1 {
            return Ok(());
        }
        let inserted = m.allowed.insert(key(source, port), 1, 0);
        if let Err(e) = inserted {
            // Not in the kernel's map (full, say): not counted here either.
            if let Some(sources) = m.by_port.get_mut(&port) {
                sources.remove(&source);
                if sources.is_empty() {
                    m.by_port.remove(&port);
                }
            }
            return Err(err(&format!("admitting {source} to port {port}"), e));
        }
        Ok(())
    }

    /// Takes back one admission of `source` to `port`; the last one removes it.
    pub fn revoke(&self, port: u16, source: SocketAddr) -> Result<(), Error> {
        let mut m = self.maps();
        let Some(sources) = m.by_port.get_mut(&port) else {
            return Ok(());
        };
        let Some(n) = sources.get_mut(&source) else {
            return Ok(());
        };
        *n -= 1;
        if *n > 0 {
            return Ok(());
        }
        sources.remove(&source);
        if sources.is_empty() {
            m.by_port.remove(&port);
        }
        remove(&mut m.allowed, source, port)
    }

    /// Makes `port` take datagrams from `sources` only ([`Policy::Closed`]), or from anyone
    /// (`None`: [`Policy::Open`]), replacing what it admitted before.
    pub fn set_port(&self, port: u16, sources: Option<&[SocketAddr]>) -> Result<(), Error> {
        let mut m = self.maps();
        let old = m.by_port.remove(&port).unwrap_or_default();
        for s in old.keys() {
            if !sources.is_some_and(|new| new.contains(s)) {
                remove(&mut m.allowed, *s, port)?;
            }
        }
        let policy = match sources {
            None => Policy::Open,
            Some(new) => {
                // What the kernel's map holds for the port is recorded here even when an
                // insert fails part way, so that the next change removes it.
                let mut kept = HashMap::new();
                let mut failed = None;
                for s in new {
                    if !old.contains_key(s) {
                        if let Err(e) = m.allowed.insert(key(*s, port), 1, 0) {
                            failed = Some(err(&format!("admitting {s} to port {port}"), e));
                            continue;
                        }
                    }
                    kept.insert(*s, 1);
                }
                if !kept.is_empty() {
                    m.by_port.insert(port, kept);
                }
                if let Some(e) = failed {
                    return Err(e);
                }
                Policy::Closed
            }
        };
        m.ports
            .set(u32::from(port), policy.code(), 0)
            .map_err(|e| err(&format!("port {port}'s policy"), e))
    }

    /// How many (source, port) admissions the program holds.
    pub fn admitted(&self) -> usize {
        self.maps().by_port.values().map(HashMap::len).sum()
    }

    /// What the program counted since it was attached.
    pub fn counts(&self) -> Result<Counts, Error> {
        let sum = |i: u32| -> Result<u64, Error> {
            let v = self
                .counts
                .get(&i, 0)
                .map_err(|e| err("the XDP filter's counters", e))?;
            Ok(v.iter().sum())
        };
        Ok(Counts {
            dropped: sum(0)?,
            admitted: sum(1)?,
            open: sum(2)?,
            stun: sum(3)?,
            fragment: sum(4)?,
            xsk: sum(5)?,
        })
    }

    /// Datagrams to a media port that pass and came in on receive queue `queue` of
    /// `interface` (one the program is attached to) go to the AF_XDP socket `socket` (bound to
    /// that queue of that interface) from now on, rather than to the socket layer; at most
    /// [`MAX_QUEUES`] queues per interface.
    pub fn set_socket(
        &self,
        interface: &str,
        queue: u32,
        socket: impl std::os::fd::AsRawFd,
    ) -> Result<(), Error> {
        let at = self.xsk_index(interface, queue)?;
        self.maps().xsks.set(at, socket, 0).map_err(|e| {
            err(
                &format!("the AF_XDP socket of {interface} queue {queue}"),
                e,
            )
        })
    }

    /// Queue `queue` of `interface`: its datagrams go to the socket layer again.
    pub fn unset_socket(&self, interface: &str, queue: u32) -> Result<(), Error> {
        let at = self.xsk_index(interface, queue)?;
        match self.maps().xsks.unset(at) {
            Ok(()) | Err(aya::maps::MapError::KeyNotFound) => Ok(()),
            Err(e) => Err(err(
                &format!("the AF_XDP socket of {interface} queue {queue}"),
                e,
            )),
        }
    }

    /// Where the AF_XDP socket of `interface`'s queue `queue` sits in the `xsks` map.
    fn xsk_index(&self, interface: &str, queue: u32) -> Result<u32, Error> {
        let slot = self
            .attached
            .iter()
            .position(|(on, _)| on == interface)
            .ok_or_else(|| Error(format!("the XDP filter is not attached to {interface}")))?;
        xsk_key(slot, queue).ok_or_else(|| {
            Error(format!(
                "{interface} queue {queue}: the XDP filter holds AF_XDP sockets for queues 0 to {}",
                MAX_QUEUES - 1
            ))
        })
    }

    /// `port`'s datagrams go to the AF_XDP socket of queue `queue` only (`None`: of whichever
    /// queue they come in on); on another queue, to the socket layer.
    pub fn set_owner(&self, port: u16, queue: Option<u32>) -> Result<(), Error> {
        self.maps()
            .owners
            .set(u32::from(port), queue.map_or(0, |q| q + 1), 0)
            .map_err(|e| err(&format!("port {port}'s AF_XDP queue"), e))
    }
}

/// The `xsks` map's key of the AF_XDP socket on receive queue `queue` of the interface in
/// slot `slot` (as the program computes it: slot × [`MAX_QUEUES`] + queue); `None` past the
/// map.
fn xsk_key(slot: usize, queue: u32) -> Option<u32> {
    let slot = u32::try_from(slot).ok().filter(|s| *s < MAX_INTERFACES)?;
    (queue < MAX_QUEUES).then_some(slot * MAX_QUEUES + queue)
}

/// How many receive queues' AF_XDP sockets the program can hold per interface.
pub const MAX_QUEUES: u32 = 64;

/// How many interfaces the program can be attached to.
pub const MAX_INTERFACES: u32 = 8;

/// The kernel's run-time statistics of BPF programs (`BPF_ENABLE_STATS`), on while this is
/// held: what the filter itself costs per datagram, measured by the kernel around each run.
#[derive(Debug)]
pub struct RunStats {
    _on: std::os::fd::OwnedFd,
}

impl RunStats {
    /// Turns the statistics on (every program on the machine; a few nanoseconds per run)
    /// until dropped. Err: the kernel refused (not root, or older than 5.8).
    pub fn enable() -> Result<RunStats, Error> {
        let fd = aya::sys::enable_stats(aya::sys::Stats::RunTime)
            .map_err(|e| err("BPF_ENABLE_STATS", e))?;
        Ok(RunStats { _on: fd })
    }

    /// The time every loaded secrelay filter (any process's) ran and how many times, since it
    /// was loaded, counted while statistics were on.
    pub fn filters(&self) -> Result<(std::time::Duration, u64), Error> {
        let mut total = (std::time::Duration::ZERO, 0);
        for info in aya::programs::loaded_programs() {
            let info = info.map_err(|e| err("listing BPF programs", e))?;
            if info.name_as_str() == Some("secrelay_filter") {
                total.0 += info.run_time();
                total.1 += info.run_count();
            }
        }
        Ok(total)
    }
}

/// Attaches the program to `interface` (index `ifindex`, the one its slot was set under) in the
/// mode `attach` asks for: the mode it runs in.
fn attach_program(
    ebpf: &mut Ebpf,
    (interface, ifindex): (&str, u32),
    attach: Attach,
) -> Result<Mode, Error> {
    let program = program_mut(ebpf)?;
    Ok(match attach {
        Attach::Native => {
            program
                .attach_to_if_index(ifindex, XdpMode::Driver)
                .map_err(|e| err(&format!("native XDP on {interface}"), e))?;
            Mode::Native
        }
        Attach::Generic => {
            program
                .attach_to_if_index(ifindex, XdpMode::Skb)
                .map_err(|e| err(&format!("generic XDP on {interface}"), e))?;
            Mode::Generic
        }
        Attach::Auto => match program.attach_to_if_index(ifindex, XdpMode::Driver) {
            Ok(_) => Mode::Native,
            Err(native) => {
                program
                    .attach_to_if_index(ifindex, XdpMode::Skb)
                    .map_err(|e| {
                        Error(format!(
                            "XDP on {interface}: native: {native}; generic: {e}"
                        ))
                    })?;
                Mode::Generic
            }
        },
    })
}

fn program_mut(ebpf: &mut Ebpf) -> Result<&mut Xdp, Error> {
    ebpf.program_mut("secrelay_filter")
        .ok_or_else(|| Error("the XDP filter object has no program".into()))?
        .try_into()
        .map_err(|e| err("the XDP filter object", e))
}

fn remove(
    allowed: &mut BpfHashMap<MapData, SourceKey, u8>,
    source: SocketAddr,
    port: u16,
) -> Result<(), Error> {
    match allowed.remove(&key(source, port)) {
        Ok(()) | Err(aya::maps::MapError::KeyNotFound) => Ok(()),
        Err(e) => Err(err(&format!("revoking {source} from port {port}"), e)),
    }
}

/// The `allowed` map's key for `source` sending to `port`.
fn key(source: SocketAddr, port: u16) -> SourceKey {
    let mut k = [0u8; 20];
    let v6 = match source.ip() {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    };
    k[..16].copy_from_slice(&v6.octets());
    k[16..18].copy_from_slice(&source.port().to_be_bytes());
    k[18..20].copy_from_slice(&port.to_be_bytes());
    k
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_holds_the_address_as_ipv6_and_the_ports_as_on_the_wire() {
        let k = key("192.0.2.7:5004".parse().unwrap(), 30000);
        assert_eq!(&k[..10], &[0; 10]);
        assert_eq!(&k[10..16], &[0xff, 0xff, 192, 0, 2, 7]);
        assert_eq!(&k[16..], &[0x13, 0x8c, 0x75, 0x30]);
        let k6 = key("[2001:db8::1]:9".parse().unwrap(), 1);
        assert_eq!(k6[0..2], [0x20, 0x01]);
        assert_eq!(k6[15], 1);
        assert_eq!(&k6[16..], &[0, 9, 0, 1]);
    }

    #[test]
    fn each_interface_has_its_own_run_of_socket_keys() {
        assert_eq!(xsk_key(0, 0), Some(0));
        assert_eq!(xsk_key(0, 63), Some(63));
        assert_eq!(xsk_key(1, 0), Some(64));
        assert_eq!(xsk_key(1, 1), Some(65));
        assert_eq!(xsk_key(7, 63), Some(511));
        assert_eq!(
            xsk_key(0, 64),
            None,
            "queue 64 would be the next interface's queue 0"
        );
        assert_eq!(xsk_key(8, 0), None);
        // The program's map holds every key there is.
        let source = include_str!("../bpf/filter.bpf.c");
        assert!(
            source.contains("#define MAX_QUEUES 64") && source.contains("#define MAX_IFACES 8")
        );
        assert!(source.contains("__uint(max_entries, MAX_IFACES * MAX_QUEUES);"));
        assert!(source.contains("*slot * MAX_QUEUES + queue"));
    }

    #[test]
    fn the_committed_object_is_what_the_source_compiles_to() {
        // scripts/setup installs clang-14; without it (and without CI) this says so and passes.
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("bpf");
        let out = std::env::temp_dir().join(format!("secrelay-xdp-{}.o", std::process::id()));
        // The flags of scripts/build-bpf.
        let status = std::process::Command::new(clang())
            .current_dir(&dir)
            .args([
                "-O2",
                "-g",
                "-target",
                "bpf",
                "-I/usr/include/x86_64-linux-gnu",
            ])
            .arg(format!("-fdebug-prefix-map={}=.", dir.display()))
            .args(["-c", "filter.bpf.c", "-o"])
            .arg(&out)
            .status();
        match status {
            Ok(s) => assert!(s.success(), "clang failed on bpf/filter.bpf.c"),
            Err(e) => {
                assert!(
                    std::env::var_os("CI").is_none(),
                    "{}: {e} (scripts/setup installs it)",
                    clang()
                );
                eprintln!("skipped: {}: {e}", clang());
                return;
            }
        }
        let built = std::fs::read(&out).unwrap();
        let _ = std::fs::remove_file(&out);
        assert!(
            built == PROGRAM,
            "bpf/filter.bpf.o is not what bpf/filter.bpf.c compiles to: run scripts/build-bpf"
        );
    }

    fn clang() -> String {
        std::env::var("CLANG").unwrap_or_else(|_| "clang-14".into())
    }
}
