//! Next-hop MAC addresses from the kernel's tables: for IPv4 destinations `/proc/net/route`
//! (the main table's routes) and `/proc/net/arp` (neighbours); for IPv6 destinations
//! `/proc/net/ipv6_route` and the neighbour table over rtnetlink ([`crate::netlink`]), read only
//! once an IPv6 destination was asked for.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Route flag: the route is up.
const RTF_UP: u32 = 0x0001;
/// ARP flag: the entry is complete (the MAC address is resolved).
const ATF_COM: u32 = 0x0002;
/// How often the tables are re-read by default.
const DEFAULT_REFRESH: Duration = Duration::from_secs(1);
/// After a lookup whose next hop is on the interface but not resolved yet, the tables are
/// re-read after this at first, then after twice as long each time it is still unresolved,
/// up to the refresh interval.
const MISS_REFRESH: Duration = Duration::from_millis(100);

/// What the tables last read say of a destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// Its next hop's MAC address.
    Mac([u8; 6]),
    /// Its next hop is on the interface but has no complete neighbour entry (the kernel
    /// resolves it once something is sent there): worth a sooner re-read.
    Unresolved,
    /// No route, or its route goes out another interface: nothing a sooner re-read changes.
    Elsewhere,
}

/// One IPv4 route of /proc/net/route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// The interface the route goes out of (`*` for reject routes).
    pub iface: String,
    /// The destination network.
    pub dest: Ipv4Addr,
    /// The destination network's mask.
    pub mask: Ipv4Addr,
    /// The gateway, or 0.0.0.0 when the destination is on-link.
    pub gateway: Ipv4Addr,
    /// The route's metric (lower is preferred).
    pub metric: u32,
}

/// Parses a /proc/net/route address: eight hex digits of the 32-bit value the
/// kernel stores in network byte order, printed with `%08X` as a host-order
/// integer. The address's bytes are therefore the value's bytes in host
/// order: on a little-endian host (x86, arm64) "0100000A" is 10.0.0.1.
fn route_addr(hex: &str) -> Option<Ipv4Addr> {
    let value = u32::from_str_radix(hex, 16).ok()?;
    Some(Ipv4Addr::from(value.to_ne_bytes()))
}

/// Parses one data line of /proc/net/route; None if it does not parse.
///
/// Columns: Iface Destination Gateway Flags RefCnt Use Metric Mask MTU Window IRTT.
fn parse_route(line: &str) -> Option<(Route, u32)> {
    let mut fields = line.split_whitespace();
    let iface = fields.next()?;
    let dest = route_addr(fields.next()?)?;
    let gateway = route_addr(fields.next()?)?;
    let flags = u32::from_str_radix(fields.next()?, 16).ok()?;
    let metric = fields.nth(2)?.parse().ok()?;
    let mask = route_addr(fields.next()?)?;
    let route = Route {
        iface: iface.to_owned(),
        dest,
        mask,
        gateway,
        metric,
    };
    Some((route, flags))
}

/// Parses /proc/net/route's text (header line first; addresses are hex in host
/// order — little-endian on x86, i.e. the 32-bit value as the kernel stores it
/// in network byte order printed with %08X, so "0100000A" is 10.0.0.1).
/// Skips lines that do not parse, and routes without the RTF_UP flag (0x0001).
pub fn parse_routes(text: &str) -> Vec<Route> {
    text.lines()
        .skip(1)
        .filter_map(parse_route)
        .filter(|(_, flags)| flags & RTF_UP != 0)
        .map(|(route, _)| route)
        .collect()
}

/// One entry of /proc/net/arp.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arp {
    /// The neighbour's IPv4 address.
    pub ip: Ipv4Addr,
    /// The interface the neighbour is reached through.
    pub iface: String,
    /// The neighbour's MAC address (all zero while unresolved).
    pub mac: [u8; 6],
    /// ATF_COM (0x2) set: the address is resolved
    pub complete: bool,
}

/// Parses a MAC address written as six colon-separated pairs of hex digits.
fn parse_mac(text: &str) -> Option<[u8; 6]> {
    let mut mac = [0u8; 6];
    let mut parts = text.split(':');
    for byte in &mut mac {
        let part = parts.next()?;
        if part.len() != 2 {
            return None;
        }
        *byte = u8::from_str_radix(part, 16).ok()?;
    }
    parts.next().is_none().then_some(mac)
}

/// Parses one data line of /proc/net/arp; None if it does not parse.
///
/// Columns: IP address, HW type, Flags, HW address, Mask, Device.
fn parse_arp_line(line: &str) -> Option<Arp> {
    let mut fields = line.split_whitespace();
    let ip = fields.next()?.parse().ok()?;
    let _hw_type = fields.next()?;
    let flags = fields.next()?;
    let flags = u32::from_str_radix(flags.strip_prefix("0x").unwrap_or(flags), 16).ok()?;
    let mac = parse_mac(fields.next()?)?;
    let _mask = fields.next()?;
    let iface = fields.next()?.to_owned();
    Some(Arp {
        ip,
        iface,
        mac,
        complete: flags & ATF_COM != 0,
    })
}

/// Parses /proc/net/arp's text (header line first). Skips lines that do not
/// parse, including hardware addresses that are not 6-byte MAC addresses;
/// keeps incomplete entries (with `complete` false).
pub fn parse_arp(text: &str) -> Vec<Arp> {
    text.lines().skip(1).filter_map(parse_arp_line).collect()
}

/// One IPv6 route of /proc/net/ipv6_route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route6 {
    /// The interface the route goes out of.
    pub iface: String,
    /// The destination network and its prefix length.
    pub dest: Ipv6Addr,
    /// The destination prefix's length in bits.
    pub prefix: u8,
    /// The next hop, or `::` when the destination is on-link.
    pub gateway: Ipv6Addr,
    /// The route's metric (lower is preferred).
    pub metric: u32,
}

/// 32 hex digits as an IPv6 address (/proc/net/ipv6_route writes them in network order).
fn hex_v6(hex: &str) -> Option<Ipv6Addr> {
    if hex.len() != 32 {
        return None;
    }
    u128::from_str_radix(hex, 16).ok().map(Ipv6Addr::from)
}

/// Parses one line of /proc/net/ipv6_route; None if it does not parse or the route is not up.
///
/// Columns: destination, its prefix length, source, its prefix length, next hop, metric,
/// reference count, use count, flags, interface (numbers in hex).
fn parse_route6(line: &str) -> Option<Route6> {
    let f: Vec<&str> = line.split_whitespace().collect();
    let [dest, prefix, _, _, gateway, metric, _, _, flags, iface] = f.as_slice() else {
        return None;
    };
    let flags = u32::from_str_radix(flags, 16).ok()?;
    let prefix = u8::from_str_radix(prefix, 16).ok().filter(|&p| p <= 128)?;
    (flags & RTF_UP != 0).then_some(())?;
    Some(Route6 {
        iface: (*iface).to_owned(),
        dest: hex_v6(dest)?,
        prefix,
        gateway: hex_v6(gateway)?,
        metric: u32::from_str_radix(metric, 16).ok()?,
    })
}

/// Parses /proc/net/ipv6_route's text (no header line). Skips lines that do not parse and
/// routes without the RTF_UP flag.
pub fn parse_routes6(text: &str) -> Vec<Route6> {
    text.lines().filter_map(parse_route6).collect()
}

/// The next hop for `dst` by longest prefix (then lowest metric) in `routes`: (interface,
/// next-hop address: the gateway, or `dst` itself when the route has none). None: no route.
pub fn next_hop6(routes: &[Route6], dst: Ipv6Addr) -> Option<(&str, Ipv6Addr)> {
    let mask = |p: u8| u128::MAX.checked_shl(128 - u32::from(p)).unwrap_or(0);
    let bits = u128::from(dst);
    let route = routes
        .iter()
        .filter(|r| bits & mask(r.prefix) == u128::from(r.dest) & mask(r.prefix))
        .min_by_key(|r| (std::cmp::Reverse(r.prefix), r.metric))?;
    let hop = if route.gateway.is_unspecified() {
        dst
    } else {
        route.gateway
    };
    Some((route.iface.as_str(), hop))
}

/// Parses the lines of a test's IPv6 neighbour file: `ADDRESS MAC` each.
fn parse_neigh6(text: &str) -> Vec<(Ipv6Addr, [u8; 6])> {
    text.lines()
        .filter_map(|l| {
            let (ip, mac) = l.trim().split_once(char::is_whitespace)?;
            Some((ip.parse().ok()?, parse_mac(mac.trim())?))
        })
        .collect()
}

/// Where the IPv6 neighbours come from.
#[derive(Debug)]
enum Neigh6Source {
    /// The kernel's table, over rtnetlink.
    Netlink,
    /// A file of `ADDRESS MAC` lines (tests).
    File(PathBuf),
}

/// The next hop for `dst` by longest prefix (then lowest metric) in `routes`:
/// (interface, next-hop address: the gateway, or dst itself when the route has
/// none). None: no route. Of equal routes, the first in `routes` wins.
pub fn next_hop(routes: &[Route], dst: Ipv4Addr) -> Option<(&str, Ipv4Addr)> {
    let dst_bits = u32::from(dst);
    let route = routes
        .iter()
        .filter(|r| dst_bits & u32::from(r.mask) == u32::from(r.dest) & u32::from(r.mask))
        .min_by_key(|r| (std::cmp::Reverse(u32::from(r.mask).count_ones()), r.metric))?;
    let hop = if route.gateway.is_unspecified() {
        dst
    } else {
        route.gateway
    };
    Some((route.iface.as_str(), hop))
}

/// Next-hop MAC addresses for destinations reached through one interface, from
/// the kernel's tables, re-read at most every `refresh` (default 1 s) and,
/// while a next hop on the interface is unresolved, after 100 ms, then 200 ms,
/// 400 ms, … up to `refresh` (a destination routed elsewhere, or not at all,
/// waits for the regular refresh).
///
/// Answers, positive and negative, are cached per destination until the next
/// re-read; tables are re-read lazily inside [`Neighbours::resolve`].
#[derive(Debug)]
pub struct Neighbours {
    /// The interface frames are sent through.
    iface: String,
    /// Path of the routes table.
    route_path: PathBuf,
    /// Path of the neighbours table.
    arp_path: PathBuf,
    /// Path of the IPv6 routes table, and where the IPv6 neighbours come from.
    route6_path: PathBuf,
    neigh6: Neigh6Source,
    /// Whether an IPv6 destination was asked for (its tables are read from then on).
    wants_v6: bool,
    /// The IPv6 routes and resolved neighbours on `iface`, last read.
    routes6: Vec<Route6>,
    ndisc: HashMap<Ipv6Addr, [u8; 6]>,
    /// How often the tables are re-read.
    refresh: Duration,
    /// The routes last read.
    routes: Vec<Route>,
    /// Resolved neighbours on `iface`, last read.
    arp: HashMap<Ipv4Addr, [u8; 6]>,
    /// Answers given since the last read, by destination.
    cache: HashMap<IpAddr, Answer>,
    /// How long after the last read an unresolved next hop has the tables re-read (doubled
    /// by each such re-read that resolves nothing, back to [`MISS_REFRESH`] once one does).
    miss_wait: Duration,
    /// When the tables were last read; None before the first read.
    read_at: Option<Instant>,
    /// Lookups that gave no MAC address.
    misses: u64,
    /// Times the tables were read.
    reads: u64,
}

impl Neighbours {
    /// For destinations through `iface`, tables read from /proc/net (and IPv6 neighbours
    /// from the kernel over rtnetlink).
    pub fn new(iface: &str) -> Neighbours {
        let mut n = Neighbours::with_dir(iface, "/proc/net");
        n.neigh6 = Neigh6Source::Netlink;
        n
    }

    /// The same with the tables read from `dir` (a directory holding files named `route`,
    /// `arp`, `ipv6_route`, and `neigh6` with a line `ADDRESS MAC` per IPv6 neighbour), for
    /// tests.
    pub fn with_dir(iface: &str, dir: impl Into<PathBuf>) -> Neighbours {
        let dir = dir.into();
        Neighbours {
            iface: iface.to_owned(),
            route_path: dir.join("route"),
            arp_path: dir.join("arp"),
            route6_path: dir.join("ipv6_route"),
            neigh6: Neigh6Source::File(dir.join("neigh6")),
            wants_v6: false,
            routes6: Vec::new(),
            ndisc: HashMap::new(),
            refresh: DEFAULT_REFRESH,
            routes: Vec::new(),
            arp: HashMap::new(),
            cache: HashMap::new(),
            miss_wait: MISS_REFRESH,
            read_at: None,
            misses: 0,
            reads: 0,
        }
    }

    /// The same with the tables re-read at most every `refresh` instead of every second.
    pub fn with_refresh(mut self, refresh: Duration) -> Neighbours {
        self.refresh = refresh;
        self
    }

    /// The MAC address to send a frame to `dst` with: None when the route goes
    /// out another interface, there is no route, or the next hop is not (yet)
    /// resolved — the caller then sends through the kernel's socket, which
    /// resolves it.
    pub fn resolve(&mut self, dst: Ipv4Addr, now: Instant) -> Option<[u8; 6]> {
        self.resolve_ip(IpAddr::V4(dst), now)
    }

    /// [`Neighbours::resolve`] for an IPv6 destination: its route from /proc/net/ipv6_route,
    /// its next hop's MAC address from the kernel's neighbour table (read over rtnetlink).
    pub fn resolve_v6(&mut self, dst: Ipv6Addr, now: Instant) -> Option<[u8; 6]> {
        if !self.wants_v6 {
            // The tables read so far had no IPv6 in them.
            self.wants_v6 = true;
            self.read_at = None;
        }
        self.resolve_ip(IpAddr::V6(dst), now)
    }

    fn resolve_ip(&mut self, dst: IpAddr, now: Instant) -> Option<[u8; 6]> {
        if self.due(now, self.refresh) {
            self.read(now);
        }
        let mut answer = match self.cache.get(&dst) {
            Some(&cached) => cached,
            None => self.look_up(dst),
        };
        if answer == Answer::Unresolved && self.due(now, self.miss_wait) {
            self.read(now);
            answer = self.look_up(dst);
            self.miss_wait = match answer {
                Answer::Mac(_) => MISS_REFRESH,
                _ => (self.miss_wait * 2).min(self.refresh),
            };
        }
        match answer {
            Answer::Mac(mac) => Some(mac),
            Answer::Unresolved | Answer::Elsewhere => {
                self.misses += 1;
                None
            }
        }
    }

    /// How many lookups missed (no MAC) so far.
    pub fn misses(&self) -> u64 {
        self.misses
    }

    /// How many times the tables were read.
    pub fn reads(&self) -> u64 {
        self.reads
    }

    /// Whether at least `interval` has passed since the last read (or there was none).
    fn due(&self, now: Instant, interval: Duration) -> bool {
        self.read_at
            .is_none_or(|at| now.saturating_duration_since(at) >= interval)
    }

    /// Re-reads both tables and forgets the cached answers. A file that cannot
    /// be read counts as empty.
    fn read(&mut self, now: Instant) {
        let routes = std::fs::read_to_string(&self.route_path).unwrap_or_default();
        let arp = std::fs::read_to_string(&self.arp_path).unwrap_or_default();
        self.routes = parse_routes(&routes);
        self.arp.clear();
        let usable = parse_arp(&arp)
            .into_iter()
            .filter(|a| a.complete && a.mac != [0; 6] && a.iface == self.iface);
        self.arp.extend(usable.map(|a| (a.ip, a.mac)));
        if self.wants_v6 {
            self.read_v6();
        }
        self.cache.clear();
        self.read_at = Some(now);
        self.reads += 1;
    }

    /// Re-reads the IPv6 tables. A table that cannot be read counts as empty (the error of
    /// the neighbours' dump is logged by nobody here: the lookups miss, counted, and the
    /// caller's socket resolves).
    fn read_v6(&mut self) {
        let routes = std::fs::read_to_string(&self.route6_path).unwrap_or_default();
        self.routes6 = parse_routes6(&routes);
        let neighbours = match &self.neigh6 {
            Neigh6Source::Netlink => {
                crate::netlink::ipv6_neighbours(&self.iface).unwrap_or_default()
            }
            Neigh6Source::File(path) => {
                parse_neigh6(&std::fs::read_to_string(path).unwrap_or_default())
            }
        };
        self.ndisc.clear();
        self.ndisc
            .extend(neighbours.into_iter().filter(|(_, mac)| *mac != [0; 6]));
    }

    /// Answers for `dst` from the tables last read, and caches the answer.
    fn look_up(&mut self, dst: IpAddr) -> Answer {
        let mac = |found: Option<&[u8; 6]>| found.map_or(Answer::Unresolved, |&m| Answer::Mac(m));
        let answer = match dst {
            IpAddr::V4(v4) => match next_hop(&self.routes, v4) {
                Some((iface, hop)) if iface == self.iface => mac(self.arp.get(&hop)),
                _ => Answer::Elsewhere,
            },
            IpAddr::V6(v6) => match next_hop6(&self.routes6, v6) {
                Some((iface, hop)) if iface == self.iface => mac(self.ndisc.get(&hop)),
                _ => Answer::Elsewhere,
            },
        };
        self.cache.insert(dst, answer);
        answer
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    const ROUTE_HEADER: &str = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT                                                       ";

    /// One /proc/net/route line in the kernel's format.
    fn route_line(
        iface: &str,
        dest: [u8; 4],
        gw: [u8; 4],
        flags: u16,
        metric: u32,
        mask: [u8; 4],
    ) -> String {
        let hex = |a: [u8; 4]| format!("{:08X}", u32::from_ne_bytes(a));
        format!(
            "{iface}\t{}\t{}\t{flags:04X}\t0\t0\t{metric}\t{}\t0\t0\t0                                                                               ",
            hex(dest),
            hex(gw),
            hex(mask)
        )
    }

    /// A routes table: default via 192.0.2.1 and 192.0.2.0/24 on eth0, a host
    /// route via eth1, a route that is down, and a malformed line.
    fn sample_routes() -> String {
        [
            ROUTE_HEADER.to_owned(),
            route_line(
                "eth0",
                [0, 0, 0, 0],
                [192, 0, 2, 1],
                0x0003,
                0,
                [0, 0, 0, 0],
            ),
            route_line(
                "eth0",
                [192, 0, 2, 0],
                [0, 0, 0, 0],
                0x0001,
                0,
                [255, 255, 255, 0],
            ),
            route_line("eth1", [198, 51, 100, 9], [0, 0, 0, 0], 0x0005, 0, [255; 4]),
            route_line(
                "eth0",
                [203, 0, 113, 0],
                [192, 0, 2, 254],
                0x0002,
                0,
                [255, 255, 255, 0],
            ),
            "eth0\tnot-hex\t00000000\t0001\t0\t0\t0\t00000000\t0\t0\t0".to_owned(),
        ]
        .join("\n")
    }

    const ARP_HEADER: &str =
        "IP address       HW type     Flags       HW address            Mask     Device";

    fn arp_text(lines: &[&str]) -> String {
        std::iter::once(ARP_HEADER)
            .chain(lines.iter().copied())
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn ip(a: [u8; 4]) -> Ipv4Addr {
        Ipv4Addr::from(a)
    }

    #[test]
    #[cfg(target_endian = "little")]
    fn route_addresses_are_in_host_order() {
        assert_eq!(route_addr("0100000A"), Some(ip([10, 0, 0, 1])));
        assert_eq!(route_addr("00FFFFFF"), Some(ip([255, 255, 255, 0])));
        assert_eq!(route_addr("010200C0"), Some(ip([192, 0, 2, 1])));
        assert_eq!(route_addr("xyz"), None);
    }

    #[test]
    fn parses_routes() {
        let routes = parse_routes(&sample_routes());
        let expected = |iface: &str, dest, mask, gateway| Route {
            iface: iface.to_owned(),
            dest: ip(dest),
            mask: ip(mask),
            gateway: ip(gateway),
            metric: 0,
        };
        assert_eq!(
            routes,
            vec![
                expected("eth0", [0, 0, 0, 0], [0, 0, 0, 0], [192, 0, 2, 1]),
                expected("eth0", [192, 0, 2, 0], [255, 255, 255, 0], [0, 0, 0, 0]),
                expected("eth1", [198, 51, 100, 9], [255; 4], [0, 0, 0, 0]),
            ]
        );
        assert!(parse_routes("").is_empty());
        assert!(parse_routes(ROUTE_HEADER).is_empty());
    }

    #[test]
    fn parses_arp() {
        let text = arp_text(&[
            "192.0.2.1        0x1         0x2         02:fc:00:00:00:05     *        eth0",
            "192.0.2.9        0x1         0x0         00:00:00:00:00:00     *        eth0",
            "192.0.2.10       0x1         0x6         02:FC:00:00:00:0a     *        eth1",
            "192.0.2.11       0x1         0x2         02:fc:00:00:00        *        eth0",
            "not an arp line",
        ]);
        let arp = parse_arp(&text);
        let entry = |last: [u8; 4], mac, iface: &str, complete| Arp {
            ip: ip(last),
            iface: iface.to_owned(),
            mac,
            complete,
        };
        assert_eq!(
            arp,
            vec![
                entry([192, 0, 2, 1], [2, 0xfc, 0, 0, 0, 5], "eth0", true),
                entry([192, 0, 2, 9], [0; 6], "eth0", false),
                entry([192, 0, 2, 10], [2, 0xfc, 0, 0, 0, 0x0a], "eth1", true),
            ]
        );
    }

    #[test]
    fn longest_prefix_wins() {
        let routes = parse_routes(&sample_routes());
        assert_eq!(
            next_hop(&routes, ip([192, 0, 2, 77])),
            Some(("eth0", ip([192, 0, 2, 77])))
        );
        assert_eq!(
            next_hop(&routes, ip([8, 8, 8, 8])),
            Some(("eth0", ip([192, 0, 2, 1])))
        );
        assert_eq!(
            next_hop(&routes, ip([198, 51, 100, 9])),
            Some(("eth1", ip([198, 51, 100, 9])))
        );
        // The route to 203.0.113.0/24 is down, so the default route applies.
        assert_eq!(
            next_hop(&routes, ip([203, 0, 113, 5])),
            Some(("eth0", ip([192, 0, 2, 1])))
        );
        assert_eq!(next_hop(&[], ip([8, 8, 8, 8])), None);
    }

    #[test]
    fn lowest_metric_breaks_ties() {
        let text = [
            ROUTE_HEADER.to_owned(),
            route_line("eth0", [0; 4], [192, 0, 2, 1], 0x0003, 200, [0; 4]),
            route_line("eth1", [0; 4], [198, 51, 100, 1], 0x0003, 100, [0; 4]),
            route_line("eth0", [0; 4], [192, 0, 2, 2], 0x0003, 300, [0; 4]),
        ]
        .join("\n");
        let routes = parse_routes(&text);
        assert_eq!(
            next_hop(&routes, ip([8, 8, 8, 8])),
            Some(("eth1", ip([198, 51, 100, 1])))
        );
    }

    /// A fresh directory for one test's tables.
    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("xskframe-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn write_tables(dir: &Path, arp_lines: &[&str]) {
        std::fs::write(dir.join("route"), sample_routes()).unwrap();
        std::fs::write(dir.join("arp"), arp_text(arp_lines)).unwrap();
    }

    const GW_A: &str =
        "192.0.2.1        0x1         0x2         02:fc:00:00:00:05     *        eth0";
    const GW_B: &str =
        "192.0.2.1        0x1         0x2         02:fc:00:00:00:06     *        eth0";
    const MAC_A: [u8; 6] = [2, 0xfc, 0, 0, 0, 5];
    const MAC_B: [u8; 6] = [2, 0xfc, 0, 0, 0, 6];

    #[test]
    fn resolve_rereads_after_refresh() {
        let dir = temp_dir("refresh");
        write_tables(&dir, &[GW_A]);
        let mut n = Neighbours::with_dir("eth0", &dir);
        let t0 = Instant::now();
        let dst = ip([8, 8, 8, 8]);
        assert_eq!(n.resolve(dst, t0), Some(MAC_A));
        write_tables(&dir, &[GW_B]);
        assert_eq!(n.resolve(dst, t0 + Duration::from_millis(999)), Some(MAC_A));
        assert_eq!(n.reads(), 1);
        assert_eq!(n.resolve(dst, t0 + Duration::from_secs(1)), Some(MAC_B));
        assert_eq!((n.reads(), n.misses()), (2, 0));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn miss_rereads_after_100ms_but_not_before() {
        let dir = temp_dir("miss");
        let incomplete =
            "192.0.2.1        0x1         0x0         00:00:00:00:00:00     *        eth0";
        write_tables(&dir, &[incomplete]);
        let mut n = Neighbours::with_dir("eth0", &dir);
        let t0 = Instant::now();
        let dst = ip([8, 8, 8, 8]);
        assert_eq!(n.resolve(dst, t0), None);
        assert_eq!((n.reads(), n.misses()), (1, 1));
        write_tables(&dir, &[GW_A]);
        assert_eq!(n.resolve(dst, t0 + Duration::from_millis(99)), None);
        assert_eq!((n.reads(), n.misses()), (1, 2));
        assert_eq!(n.resolve(dst, t0 + Duration::from_millis(100)), Some(MAC_A));
        assert_eq!((n.reads(), n.misses()), (2, 2));
        // A hit needs no re-read until the refresh interval has passed.
        assert_eq!(n.resolve(dst, t0 + Duration::from_millis(900)), Some(MAC_A));
        assert_eq!(n.reads(), 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_unresolved_hop_rereads_ever_later_and_a_route_elsewhere_waits_for_the_refresh() {
        let dir = temp_dir("backoff");
        let incomplete =
            "192.0.2.1        0x1         0x0         00:00:00:00:00:00     *        eth0";
        write_tables(&dir, &[incomplete]);
        let mut n = Neighbours::with_dir("eth0", &dir);
        let t0 = Instant::now();
        let ms = |m: u64| t0 + Duration::from_millis(m);
        let dst = ip([8, 8, 8, 8]);
        assert_eq!(n.resolve(dst, t0), None);
        // Still unresolved: re-read after 100 ms, then 200 ms after that, then 400 ms.
        for (at, reads) in [(99, 1), (100, 2), (299, 2), (300, 3), (699, 3), (700, 4)] {
            assert_eq!(n.resolve(dst, ms(at)), None);
            assert_eq!(n.reads(), reads, "at {at} ms");
        }
        // Resolved meanwhile: found at the next re-read, 800 ms after the last.
        write_tables(&dir, &[GW_A]);
        assert_eq!(n.resolve(dst, ms(1499)), None);
        assert_eq!(n.reads(), 4);
        assert_eq!(n.resolve(dst, ms(1500)), Some(MAC_A));
        assert_eq!(n.reads(), 5);
        // Another unresolved hop starts again at 100 ms.
        let far = ip([192, 0, 2, 200]);
        assert_eq!(n.resolve(far, ms(1500)), None);
        assert_eq!(n.resolve(far, ms(1600)), None);
        assert_eq!(n.reads(), 6);
        // A destination routed out of another interface re-reads nothing before the refresh.
        let mut other = Neighbours::with_dir("eth1", &dir);
        assert_eq!(other.resolve(dst, t0), None);
        for at in [100, 500, 999] {
            assert_eq!(other.resolve(dst, ms(at)), None);
        }
        assert_eq!(other.reads(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn other_interface_or_no_route_is_none() {
        let dir = temp_dir("other");
        let neighbour =
            "198.51.100.9     0x1         0x2         02:fc:00:00:00:09     *        eth1";
        write_tables(&dir, &[GW_A, neighbour]);
        let mut n = Neighbours::with_dir("eth0", &dir);
        let t0 = Instant::now();
        assert_eq!(n.resolve(ip([198, 51, 100, 9]), t0), None);
        let mut n1 = Neighbours::with_dir("eth1", &dir);
        assert_eq!(
            n1.resolve(ip([198, 51, 100, 9]), t0),
            Some([2, 0xfc, 0, 0, 0, 9])
        );
        // eth1 has no default route: 8.8.8.8 goes out eth0.
        assert_eq!(n1.resolve(ip([8, 8, 8, 8]), t0), None);
        std::fs::write(dir.join("route"), ROUTE_HEADER).unwrap();
        let mut empty = Neighbours::with_dir("eth0", &dir);
        assert_eq!(empty.resolve(ip([8, 8, 8, 8]), t0), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn unreadable_tables_count_as_empty() {
        let dir = std::env::temp_dir().join(format!("xskframe-{}-absent", std::process::id()));
        let mut n = Neighbours::with_dir("eth0", dir);
        let t0 = Instant::now();
        assert_eq!(n.resolve(ip([192, 0, 2, 1]), t0), None);
        assert_eq!((n.reads(), n.misses()), (1, 1));
        // An earlier `now` than the last read does not panic or re-read.
        let earlier = t0.checked_sub(Duration::from_secs(5)).unwrap_or(t0);
        assert_eq!(n.resolve(ip([192, 0, 2, 1]), earlier), None);
        assert_eq!(n.reads(), 1);
    }

    #[test]
    fn on_link_destination_resolves_itself() {
        let dir = temp_dir("onlink");
        let host = "192.0.2.50       0x1         0x2         02:fc:00:00:00:32     *        eth0";
        write_tables(&dir, &[GW_A, host]);
        let mut n = Neighbours::with_dir("eth0", &dir).with_refresh(Duration::from_secs(5));
        let t0 = Instant::now();
        assert_eq!(
            n.resolve(ip([192, 0, 2, 50]), t0),
            Some([2, 0xfc, 0, 0, 0, 0x32])
        );
        assert_eq!(n.resolve(ip([192, 0, 2, 51]), t0), None);
        // With a 5 s refresh, a hit two seconds later is still answered from the cache.
        let later = t0 + Duration::from_secs(2);
        assert_eq!(
            n.resolve(ip([192, 0, 2, 50]), later),
            Some([2, 0xfc, 0, 0, 0, 0x32])
        );
        assert_eq!(n.reads(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// /proc/net/ipv6_route lines: a default route via fe80::1 and fd00:1::/64 on eth0, a
    /// /128 route on eth1, a route that is down, and a malformed line.
    const ROUTES6: &str = "\
00000000000000000000000000000000 00 00000000000000000000000000000000 00 fe800000000000000000000000000001 00000400 00000001 00000000 00000003     eth0
fd000001000000000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001     eth0
fd000002000000000000000000000009 80 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001     eth1
fd000003000000000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000000     eth0
not a route line
";

    fn v6(s: &str) -> Ipv6Addr {
        s.parse().unwrap()
    }

    #[test]
    fn parses_ipv6_routes_and_finds_the_longest_prefix() {
        let routes = parse_routes6(ROUTES6);
        assert_eq!(routes.len(), 3, "{routes:?}");
        assert_eq!(
            routes[0],
            Route6 {
                iface: "eth0".into(),
                dest: Ipv6Addr::UNSPECIFIED,
                prefix: 0,
                gateway: v6("fe80::1"),
                metric: 0x400,
            }
        );
        assert_eq!(
            next_hop6(&routes, v6("fd00:1::5")),
            Some(("eth0", v6("fd00:1::5")))
        );
        assert_eq!(
            next_hop6(&routes, v6("2001:db8::1")),
            Some(("eth0", v6("fe80::1")))
        );
        assert_eq!(
            next_hop6(&routes, v6("fd00:2::9")),
            Some(("eth1", v6("fd00:2::9")))
        );
        assert_eq!(next_hop6(&routes[1..], v6("2001:db8::1")), None);
    }

    #[test]
    fn ipv6_destinations_resolve_from_their_tables_read_once_asked_for() {
        let dir = temp_dir("v6");
        write_tables(&dir, &[GW_A]);
        std::fs::write(dir.join("ipv6_route"), ROUTES6).unwrap();
        std::fs::write(
            dir.join("neigh6"),
            "fd00:1::5 02:fc:00:00:00:05\nfe80::1 02:fc:00:00:00:01\nnot a line\n",
        )
        .unwrap();
        let mut n = Neighbours::with_dir("eth0", &dir);
        let t0 = Instant::now();
        // An IPv4 lookup first: the IPv6 tables are not read until an IPv6 one.
        let _ = n.resolve(ip([192, 0, 2, 1]), t0);
        assert_eq!(n.reads(), 1);
        assert_eq!(
            n.resolve_v6(v6("fd00:1::5"), t0),
            Some([2, 0xfc, 0, 0, 0, 5])
        );
        assert_eq!(n.reads(), 2, "asked for IPv6: read again with its tables");
        // Off-link: the default route's next hop.
        assert_eq!(
            n.resolve_v6(v6("2001:db8::7"), t0),
            Some([2, 0xfc, 0, 0, 0, 1])
        );
        // On the link but unresolved, and routed elsewhere.
        assert_eq!(n.resolve_v6(v6("fd00:1::6"), t0), None);
        assert_eq!(n.resolve_v6(v6("fd00:2::9"), t0), None);
        // The neighbour appears: the unresolved one is read again after 100 ms.
        std::fs::write(dir.join("neigh6"), "fd00:1::6 02:fc:00:00:00:06\n").unwrap();
        let later = t0 + Duration::from_millis(100);
        assert_eq!(
            n.resolve_v6(v6("fd00:1::6"), later),
            Some([2, 0xfc, 0, 0, 0, 6])
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
