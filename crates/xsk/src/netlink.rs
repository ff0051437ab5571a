//! IPv6 neighbours from the kernel's neighbour table, read over rtnetlink (one `RTM_GETNEIGH`
//! dump): IPv6 has no `/proc/net/arp`. [`parse_neighbours`] reads the answer's bytes (every
//! length checked: nothing in them can make it read out of bounds or panic); the socket calls
//! around it are the kernel interface.

// The kernel interface: every `unsafe` block says why it is sound (`// SAFETY:`).
#![allow(unsafe_code)]

use std::io;
use std::net::Ipv6Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// `struct nlmsghdr`'s length.
const NLMSG_HDRLEN: usize = 16;
/// `struct ndmsg`'s length.
const NDMSG_LEN: usize = 12;
/// `NLMSG_ERROR`, `NLMSG_DONE`.
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
/// `RTM_NEWNEIGH`, `RTM_GETNEIGH`.
const RTM_NEWNEIGH: u16 = 28;
const RTM_GETNEIGH: u16 = 30;
/// `NLM_F_REQUEST | NLM_F_DUMP`.
const DUMP_REQUEST: u16 = 0x1 | 0x300;
/// `NDA_DST`, `NDA_LLADDR`.
const NDA_DST: u16 = 1;
const NDA_LLADDR: u16 = 2;
/// Neighbour states whose link-layer address can be used: `NUD_REACHABLE`, `NUD_STALE`,
/// `NUD_DELAY`, `NUD_PROBE`, `NUD_PERMANENT` (not `INCOMPLETE`, `FAILED` or `NOARP`).
const NUD_USABLE: u16 = 0x02 | 0x04 | 0x08 | 0x10 | 0x80;
/// How long a read of the answer may wait (the kernel answers at once; this bounds a worker's
/// stall if it ever does not).
const RECV_TIMEOUT_US: libc::suseconds_t = 100_000;
/// The most answer bytes read (a table of a few thousand neighbours).
const MAX_ANSWER: usize = 4 << 20;

/// What one buffer of a dump said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parsed {
    /// More messages follow.
    More,
    /// The dump ended.
    Done,
    /// The kernel answered with this error (a negative errno), or the bytes do not walk.
    Failed(i32),
}

/// Reads one buffer of an `RTM_GETNEIGH` dump: each IPv6 neighbour on interface `ifindex`
/// whose state makes its MAC address usable is added to `out`. Messages of other kinds,
/// families or interfaces, and attributes of other types, are skipped.
pub fn parse_neighbours(buf: &[u8], ifindex: u32, out: &mut Vec<(Ipv6Addr, [u8; 6])>) -> Parsed {
    let mut at = 0;
    while at + NLMSG_HDRLEN <= buf.len() {
        let len = u32_at(buf, at) as usize;
        let kind = u16_at(buf, at + 4);
        if len < NLMSG_HDRLEN || at + len > buf.len() {
            return Parsed::Failed(-libc::EBADMSG);
        }
        let body = &buf[at + NLMSG_HDRLEN..at + len];
        match kind {
            NLMSG_DONE => return Parsed::Done,
            NLMSG_ERROR => {
                let errno = body.get(..4).map_or(-libc::EBADMSG, |b| {
                    i32::from_ne_bytes([b[0], b[1], b[2], b[3]])
                });
                return Parsed::Failed(errno);
            }
            RTM_NEWNEIGH => {
                if let Some(n) = neighbour(body, ifindex) {
                    out.push(n);
                }
            }
            _ => {}
        }
        at += align(len);
    }
    Parsed::More
}

/// One `RTM_NEWNEIGH` message's body: the neighbour, when it is an IPv6 one on `ifindex` in a
/// usable state with a 6-byte link-layer address.
fn neighbour(body: &[u8], ifindex: u32) -> Option<(Ipv6Addr, [u8; 6])> {
    let head = body.get(..NDMSG_LEN)?;
    let family = i32::from(head[0]);
    let index = u32_at(head, 4);
    let state = u16_at(head, 8);
    if family != libc::AF_INET6 || index != ifindex || state & NUD_USABLE == 0 {
        return None;
    }
    let (mut dst, mut mac) = (None, None);
    let mut at = NDMSG_LEN;
    while at + 4 <= body.len() {
        let len = usize::from(u16_at(body, at));
        let kind = u16_at(body, at + 2) & 0x3fff;
        if len < 4 || at + len > body.len() {
            return None;
        }
        let value = &body[at + 4..at + len];
        match kind {
            NDA_DST => dst = <[u8; 16]>::try_from(value).ok().map(Ipv6Addr::from),
            NDA_LLADDR => mac = <[u8; 6]>::try_from(value).ok(),
            _ => {}
        }
        at += align(len);
    }
    Some((dst?, mac?))
}

fn align(len: usize) -> usize {
    (len + 3) & !3
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_ne_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// The kernel's usable IPv6 neighbours on `interface`, in this thread's network namespace.
/// Err: no such interface, or the kernel refused the dump (naming what failed).
pub fn ipv6_neighbours(interface: &str) -> io::Result<Vec<(Ipv6Addr, [u8; 6])>> {
    let ifindex = interface_index(interface)?;
    let socket = route_socket()?;
    send_request(&socket)?;
    let mut buf = vec![0u8; 64 << 10];
    let (mut out, mut read) = (Vec::new(), 0);
    loop {
        // SAFETY: `buf` is valid for writes of its whole length, which is what is passed.
        let n = unsafe { libc::recv(socket.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 0 {
            return Err(named(
                io::Error::last_os_error(),
                "reading the neighbour table",
            ));
        }
        let n = n as usize;
        read += n;
        match parse_neighbours(&buf[..n], ifindex, &mut out) {
            Parsed::Done => return Ok(out),
            Parsed::Failed(errno) => {
                let e = io::Error::from_raw_os_error(-errno);
                return Err(named(e, "the neighbour table's dump"));
            }
            Parsed::More if n == 0 || read > MAX_ANSWER => {
                return Err(io::Error::other("the neighbour table's dump did not end"));
            }
            Parsed::More => {}
        }
    }
}

fn named(e: io::Error, what: &str) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// `interface`'s index (`if_nametoindex`). Err: there is none of that name, naming it.
pub fn interface_index(interface: &str) -> io::Result<u32> {
    nix::net::if_::if_nametoindex(interface)
        .map_err(|e| named(e.into(), &format!("interface {interface}")))
}

/// A `NETLINK_ROUTE` socket whose reads wait at most [`RECV_TIMEOUT_US`].
fn route_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2) call; the result is checked before use.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::NETLINK_ROUTE,
        )
    };
    if fd < 0 {
        return Err(named(io::Error::last_os_error(), "a netlink socket"));
    }
    // SAFETY: `fd` was just opened and is owned by nothing else.
    let socket = unsafe { OwnedFd::from_raw_fd(fd) };
    let timeout = libc::timeval {
        tv_sec: 0,
        tv_usec: RECV_TIMEOUT_US,
    };
    // SAFETY: `timeout` is a valid `timeval` for the length passed, read during the call.
    let r = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&raw const timeout).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(named(
            io::Error::last_os_error(),
            "a netlink socket's timeout",
        ));
    }
    Ok(socket)
}

/// The dump request: an `nlmsghdr` and an `ndmsg` asking for IPv6 neighbours.
fn request() -> [u8; NLMSG_HDRLEN + NDMSG_LEN] {
    let mut r = [0u8; NLMSG_HDRLEN + NDMSG_LEN];
    r[..4].copy_from_slice(&((NLMSG_HDRLEN + NDMSG_LEN) as u32).to_ne_bytes());
    r[4..6].copy_from_slice(&RTM_GETNEIGH.to_ne_bytes());
    r[6..8].copy_from_slice(&DUMP_REQUEST.to_ne_bytes());
    r[8..12].copy_from_slice(&1u32.to_ne_bytes());
    r[NLMSG_HDRLEN] = libc::AF_INET6 as u8;
    r
}

fn send_request(socket: &OwnedFd) -> io::Result<()> {
    let r = request();
    // SAFETY: `r` is valid for reads of its whole length, which is what is passed; the
    // kernel is the destination of an unbound netlink socket's send.
    let n = unsafe { libc::send(socket.as_raw_fd(), r.as_ptr().cast(), r.len(), 0) };
    if n < 0 {
        return Err(named(
            io::Error::last_os_error(),
            "asking for the neighbour table",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interface_index_finds_loopback_and_names_a_missing_interface() {
        assert!(interface_index("lo").expect("every namespace has lo") > 0);
        let e = interface_index("no-such-if0").unwrap_err();
        assert!(e.to_string().contains("interface no-such-if0"), "{e}");
        assert!(interface_index("l\0o").is_err());
    }

    /// One netlink message of `kind` with `body`, padded.
    fn message(kind: u16, body: &[u8]) -> Vec<u8> {
        let len = NLMSG_HDRLEN + body.len();
        let mut m = Vec::new();
        m.extend_from_slice(&(len as u32).to_ne_bytes());
        m.extend_from_slice(&kind.to_ne_bytes());
        m.extend_from_slice(&[0; 10]);
        m.extend_from_slice(body);
        m.resize(align(len), 0);
        m
    }

    fn attr(kind: u16, value: &[u8]) -> Vec<u8> {
        let len = 4 + value.len();
        let mut a = Vec::new();
        a.extend_from_slice(&(len as u16).to_ne_bytes());
        a.extend_from_slice(&kind.to_ne_bytes());
        a.extend_from_slice(value);
        a.resize(align(len), 0);
        a
    }

    fn neigh(family: u8, ifindex: u32, state: u16, dst: &[u8], mac: &[u8]) -> Vec<u8> {
        let mut b = vec![family, 0, 0, 0];
        b.extend_from_slice(&ifindex.to_ne_bytes());
        b.extend_from_slice(&state.to_ne_bytes());
        b.extend_from_slice(&[0, 0]);
        b.extend(attr(NDA_DST, dst));
        b.extend(attr(9, &[1, 2, 3, 4])); // NDA_CACHEINFO-like: skipped
        b.extend(attr(NDA_LLADDR, mac));
        message(RTM_NEWNEIGH, &b)
    }

    const MAC: [u8; 6] = [2, 0xfc, 0, 0, 0, 7];

    #[test]
    fn usable_ipv6_neighbours_of_the_interface_are_read_and_the_rest_skipped() {
        let a: Ipv6Addr = "fd00::7".parse().unwrap();
        let v6 = libc::AF_INET6 as u8;
        let mut buf = Vec::new();
        buf.extend(neigh(v6, 3, 0x02, &a.octets(), &MAC));
        buf.extend(neigh(v6, 4, 0x02, &a.octets(), &MAC)); // another interface
        buf.extend(neigh(v6, 3, 0x01, &a.octets(), &MAC)); // incomplete
        buf.extend(neigh(v6, 3, 0x20, &a.octets(), &MAC)); // failed
        buf.extend(neigh(libc::AF_INET as u8, 3, 0x02, &[10, 0, 0, 1], &MAC));
        buf.extend(neigh(
            v6,
            3,
            0x80,
            &Ipv6Addr::LOCALHOST.octets(),
            &[1, 2, 3],
        )); // no MAC
        buf.extend(neigh(v6, 3, 0x04, &Ipv6Addr::LOCALHOST.octets(), &MAC)); // stale: usable
        let mut out = Vec::new();
        assert_eq!(parse_neighbours(&buf, 3, &mut out), Parsed::More);
        assert_eq!(out, [(a, MAC), (Ipv6Addr::LOCALHOST, MAC)]);
        let done = message(NLMSG_DONE, &[0; 4]);
        assert_eq!(parse_neighbours(&done, 3, &mut out), Parsed::Done);
        let err = message(NLMSG_ERROR, &(-libc::EPERM).to_ne_bytes());
        assert_eq!(
            parse_neighbours(&err, 3, &mut out),
            Parsed::Failed(-libc::EPERM)
        );
    }

    #[test]
    fn lengths_that_do_not_walk_are_refused_without_reading_past_the_end() {
        let v6 = libc::AF_INET6 as u8;
        let good = neigh(v6, 3, 0x02, &[0; 16], &MAC);
        for cut in 0..good.len() {
            let mut out = Vec::new();
            let _ = parse_neighbours(&good[..cut], 3, &mut out);
        }
        let mut long = good.clone();
        long[..4].copy_from_slice(&9999u32.to_ne_bytes());
        assert_eq!(
            parse_neighbours(&long, 3, &mut Vec::new()),
            Parsed::Failed(-libc::EBADMSG)
        );
        let mut bad_attr = good;
        // The first attribute claims to run past the message: the neighbour is skipped.
        let at = NLMSG_HDRLEN + NDMSG_LEN;
        bad_attr[at..at + 2].copy_from_slice(&500u16.to_ne_bytes());
        let mut out = Vec::new();
        assert_eq!(parse_neighbours(&bad_attr, 3, &mut out), Parsed::More);
        assert!(out.is_empty());
    }

    #[test]
    fn the_loopback_table_reads_and_a_missing_interface_is_named() {
        // The thread's own namespace has a loopback interface; its table may be empty.
        assert!(ipv6_neighbours("lo").is_ok());
        let e = ipv6_neighbours("no-such-if0").unwrap_err();
        assert!(e.to_string().contains("no-such-if0"), "{e}");
    }
}
