//! Batched UDP I/O for the workers: one SO_REUSEPORT socket per worker on the shared media
//! port, `recvmmsg` into fixed buffers and `sendmmsg` from the buffers the datagrams were
//! written in (nix's safe wrappers; no allocation per call, and no copy on the way out).

use std::io::{self, IoSlice, IoSliceMut};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;

use nix::sys::socket::{recvmmsg, sendmmsg, MsgFlags, MultiHeaders, SockaddrStorage};
use socket2::{Domain, Protocol, Socket, Type};

use super::config::MediaIo;
// One definition of the dual-stack address rules for both media paths.
pub(crate) use secrelay_uring::{canonical, on_family};

/// The path the workers take for `setting` (`None`: auto) on this kernel, and why io_uring is
/// not used where it is not. io_uring is checked end to end (a datagram through a loopback
/// socket armed on a ring); asked for by name and refused, it is an error naming the reason.
pub(crate) fn choose_media_io(
    setting: Option<MediaIo>,
) -> Result<(MediaIo, Option<String>), String> {
    if let Some(io @ (MediaIo::Mmsg | MediaIo::AfXdp)) = setting {
        // AF_XDP: each worker opens its XDP socket, and says so when it cannot.
        return Ok((io, None));
    }
    // On a thread of its own: the ring's completions are run as task work of the thread that
    // armed it, whose next blocking call with a timeout (a socket read, say) the kernel's
    // notification could interrupt with EINTR. The thread ends with the probe.
    let probed = std::thread::Builder::new()
        .name("secrelay-io-probe".into())
        .spawn(|| secrelay_uring::Ring::<()>::probe(secrelay_uring::Config::default()).map(drop))
        .map_err(|e| format!("media_io: a thread for the io_uring probe: {e}"))?
        .join()
        .map_err(|_| "media_io: the io_uring probe panicked".to_string())?;
    match probed {
        Ok(()) => Ok((MediaIo::IoUring, None)),
        Err(e) if setting.is_none() => Ok((MediaIo::Mmsg, Some(e.to_string()))),
        Err(e) => Err(format!(
            "media_io = \"io_uring\": this kernel does not allow it ({e}); use \"auto\" or \"mmsg\""
        )),
    }
}

/// Datagrams per `recvmmsg`/`sendmmsg` call.
pub(crate) const BATCH: usize = 32;
/// Receive buffer size: any Ethernet-MTU datagram, with room to tell an oversized one.
pub(crate) const DATAGRAM_MAX: usize = 2048;

/// Fails with `AddrInUse` when any socket already holds `addr` (a specific port): bound
/// without SO_REUSEPORT, the probe cannot join another process's SO_REUSEPORT group, as the
/// workers' sockets could (the kernel lets every socket of the same user share the port, and
/// a second gateway would silently take half of the first one's flows). Port 0 is always free.
pub(crate) fn ensure_free(addr: SocketAddr) -> io::Result<()> {
    if addr.port() == 0 {
        return Ok(());
    }
    UdpSocket::bind(addr).map(drop)
}

/// A non-blocking UDP socket bound with SO_REUSEPORT (so every worker can bind the same port
/// and the kernel spreads flows across them), with large kernel buffers. No SO_REUSEADDR: on
/// UDP it would let any process that sets it too bind the same port. On `[::]` it is
/// dual-stack: IPv4 peers reach it too (their addresses read as IPv4 ones, see [`to_std`]).
pub(crate) fn bind_reuseport(addr: SocketAddr) -> io::Result<UdpSocket> {
    let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if addr.is_ipv6() && addr.ip().is_unspecified() {
        s.set_only_v6(false)?;
    }
    s.set_reuse_port(true)?;
    s.set_nonblocking(true)?;
    // Bursts from many participants at once: keep them in the kernel rather than drop them.
    let _ = s.set_recv_buffer_size(SHARED_BUFFER);
    let _ = s.set_send_buffer_size(SHARED_BUFFER);
    s.bind(&addr.into())?;
    Ok(s.into())
}

/// The inode the kernel's socket tables name `s` by (the one `/proc/self/fd` links to), where
/// it can be read.
pub(crate) fn inode(s: &UdpSocket) -> Option<u64> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::MetadataExt;
    let link = format!("/proc/self/fd/{}", s.as_raw_fd());
    std::fs::metadata(link).ok().map(|m| m.ino())
}

/// The kernel buffers each worker's shared socket asks for, each way.
pub(crate) const SHARED_BUFFER: usize = 8 << 20;

/// What the kernel gave `s` of the [`SHARED_BUFFER`] it asked to receive into, when less:
/// Linux caps the request at `net.core.rmem_max` (and reports twice what it keeps, for its
/// overhead). `None` when it gave all of it, or the size cannot be read.
pub(crate) fn capped_receive_buffer(s: &UdpSocket) -> Option<usize> {
    let kept = socket2::SockRef::from(s).recv_buffer_size().ok()? / 2;
    (kept < SHARED_BUFFER).then_some(kept)
}

/// A non-blocking UDP socket of a telephony leg's own (no SO_REUSEPORT: the port is this
/// leg's alone), with the same kernel buffers as the shared one; dual-stack on `[::]` too.
pub(crate) fn bind_leg(addr: SocketAddr) -> io::Result<UdpSocket> {
    let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if addr.is_ipv6() && addr.ip().is_unspecified() {
        s.set_only_v6(false)?;
    }
    s.set_nonblocking(true)?;
    let _ = s.set_recv_buffer_size(1 << 20);
    let _ = s.set_send_buffer_size(1 << 20);
    s.bind(&addr.into())?;
    Ok(s.into())
}

/// A source address as the gateway keeps it: an IPv4 peer of a dual-stack socket (which the
/// kernel names `::ffff:a.b.c.d`) as the IPv4 address it is, so that it is one peer whichever
/// socket it reached, and ICE answers it with its IPv4 address.
fn to_std(a: &SockaddrStorage) -> Option<SocketAddr> {
    if let Some(v4) = a.as_sockaddr_in() {
        return Some(SocketAddr::from(*v4));
    }
    a.as_sockaddr_in6()
        .map(|v6| canonical(SocketAddr::V6(std::net::SocketAddrV6::from(*v6))))
}

/// Receive side: `BATCH` buffers and the headers `recvmmsg` fills.
pub(crate) struct RecvBatch {
    headers: MultiHeaders<SockaddrStorage>,
    bufs: Box<[[u8; DATAGRAM_MAX]; BATCH]>,
    meta: [(usize, Option<SocketAddr>); BATCH],
    count: usize,
}

impl Default for RecvBatch {
    fn default() -> Self {
        RecvBatch {
            headers: MultiHeaders::preallocate(BATCH, None),
            bufs: Box::new([[0u8; DATAGRAM_MAX]; BATCH]),
            meta: [(0, None); BATCH],
            count: 0,
        }
    }
}

impl std::fmt::Debug for RecvBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecvBatch")
            .field("count", &self.count)
            .finish()
    }
}

impl RecvBatch {
    /// Reads up to `BATCH` datagrams without blocking; `Ok(0)` when none are waiting.
    pub fn recv(&mut self, socket: &impl AsRawFd) -> io::Result<usize> {
        self.count = 0;
        let mut it = self.bufs.iter_mut();
        let mut slices: [[IoSliceMut<'_>; 1]; BATCH] = std::array::from_fn(|_| {
            [IoSliceMut::new(
                it.next()
                    .expect("one buffer per slice: both have BATCH entries"),
            )]
        });
        let results = match recvmmsg(
            socket.as_raw_fd(),
            &mut self.headers,
            slices.iter_mut(),
            MsgFlags::MSG_DONTWAIT,
            None,
        ) {
            Ok(r) => r,
            Err(nix::errno::Errno::EAGAIN) => return Ok(0),
            Err(e) => return Err(io::Error::from(e)),
        };
        for (i, r) in results.enumerate() {
            self.meta[i] = (r.bytes, r.address.as_ref().and_then(to_std));
            self.count = i + 1;
        }
        Ok(self.count)
    }

    /// The datagrams of the last `recv`: (source, contents). A datagram whose source could not
    /// be read (not IP) has no source.
    pub fn get(&self, i: usize) -> (Option<SocketAddr>, &[u8]) {
        let (len, from) = self.meta[i];
        (from, &self.bufs[i][..len.min(DATAGRAM_MAX)])
    }
}

/// Send side: datagrams in the buffers they were written in (handed over, not copied), sent
/// `BATCH` at a time; the buffers are given back once sent.
pub(crate) struct SendBatch {
    headers: MultiHeaders<SockaddrStorage>,
    items: Vec<(SocketAddr, Vec<u8>)>,
    /// The socket it is flushed to is IPv6 (IPv4 peers are sent to by mapped address).
    v6: bool,
}

impl Default for SendBatch {
    fn default() -> Self {
        SendBatch {
            headers: MultiHeaders::preallocate(BATCH, None),
            items: Vec::with_capacity(BATCH),
            v6: false,
        }
    }
}

impl std::fmt::Debug for SendBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendBatch")
            .field("queued", &self.items.len())
            .finish()
    }
}

/// What a flush did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Flushed {
    /// Datagrams the kernel took.
    pub sent: usize,
    /// Their bytes.
    pub bytes: usize,
    /// Datagrams it refused (buffer full, unreachable, …): dropped.
    pub failed: usize,
}

impl SendBatch {
    /// A batch for `socket`, sent to by the addresses its family takes.
    pub fn for_socket(socket: &impl AsRawFd) -> SendBatch {
        let v6 = nix::sys::socket::getsockname::<SockaddrStorage>(socket.as_raw_fd())
            .is_ok_and(|a| a.as_sockaddr_in6().is_some());
        SendBatch {
            v6,
            ..SendBatch::default()
        }
    }

    /// Queues the datagram in `buf` (the buffer itself: its bytes are sent from there).
    pub fn push(&mut self, to: SocketAddr, buf: Vec<u8>) {
        self.items.push((to, buf));
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Whether its socket is IPv6 (an IPv4 peer is then sent to by its mapped address).
    pub fn is_v6(&self) -> bool {
        self.v6
    }

    /// Datagrams queued.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Sends otherwise (the AF_XDP path) each queued datagram `send` takes (returns `true`
    /// for), its buffer then given to `done_with`; the rest stay queued, in order.
    pub fn take_where(
        &mut self,
        mut send: impl FnMut(SocketAddr, &[u8]) -> bool,
        mut done_with: impl FnMut(Vec<u8>),
    ) {
        self.items.retain_mut(|(to, buf)| {
            if send(*to, buf) {
                done_with(std::mem::take(buf));
                false
            } else {
                true
            }
        });
    }

    /// Takes everything queued, in order (for a path that sends it otherwise: io_uring).
    pub fn drain(&mut self) -> std::vec::Drain<'_, (SocketAddr, Vec<u8>)> {
        self.items.drain(..)
    }

    /// Sends everything queued (`sendmmsg`, `BATCH` per call), empties the batch, and gives
    /// each buffer to `done_with` (sent or not).
    pub fn flush(&mut self, socket: &impl AsRawFd, mut done_with: impl FnMut(Vec<u8>)) -> Flushed {
        let mut done = Flushed::default();
        let mut next = 0;
        while next < self.items.len() {
            let chunk = &self.items[next..(next + BATCH).min(self.items.len())];
            let mut it = chunk.iter();
            let slices: [[IoSlice<'_>; 1]; BATCH] = std::array::from_fn(|_| match it.next() {
                Some((_, buf)) => [IoSlice::new(buf)],
                None => [IoSlice::new(&[])],
            });
            let addrs: [Option<SockaddrStorage>; BATCH] = std::array::from_fn(|i| {
                chunk
                    .get(i)
                    .map(|(to, _)| SockaddrStorage::from(on_family(*to, self.v6)))
            });
            let n = chunk.len();
            match sendmmsg(
                socket.as_raw_fd(),
                &mut self.headers,
                slices[..n].iter(),
                &addrs[..n],
                [],
                MsgFlags::MSG_DONTWAIT,
            ) {
                Ok(results) => {
                    let mut sent = 0;
                    for r in results {
                        sent += 1;
                        done.bytes += r.bytes;
                    }
                    done.sent += sent;
                    if sent == 0 {
                        // Nothing taken: drop the head datagram so the loop moves on.
                        done.failed += 1;
                        next += 1;
                    } else {
                        next += sent;
                    }
                }
                Err(_) => {
                    // The first datagram of the chunk failed (EAGAIN with a full buffer, an
                    // ICMP error reported late, …): it is dropped; the rest are retried.
                    done.failed += 1;
                    next += 1;
                }
            }
        }
        for (_, buf) in self.items.drain(..) {
            done_with(buf);
        }
        done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dual_stack_socket_talks_to_ipv4_and_ipv6_peers_by_their_own_addresses() {
        let gw = bind_reuseport("[::]:0".parse().unwrap()).unwrap();
        let port = gw.local_addr().unwrap().port();
        let mut out = SendBatch::for_socket(&gw);
        let mut rx = RecvBatch::default();
        for (peer, gw_addr) in [
            ("127.0.0.1:0", SocketAddr::from(([127, 0, 0, 1], port))),
            (
                "[::1]:0",
                SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, port)),
            ),
        ] {
            let p = UdpSocket::bind(peer).unwrap();
            p.set_read_timeout(Some(std::time::Duration::from_secs(5)))
                .unwrap();
            p.send_to(b"check", gw_addr).unwrap();
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
            let from = loop {
                if rx.recv(&gw).unwrap() > 0 {
                    break rx.get(0).0.unwrap();
                }
                assert!(std::time::Instant::now() < deadline, "nothing from {peer}");
                std::thread::sleep(std::time::Duration::from_millis(1));
            };
            // The peer's own address, of its own family (not `::ffff:127.0.0.1`).
            assert_eq!(from, p.local_addr().unwrap());
            out.push(from, b"answer".to_vec());
            assert_eq!(out.flush(&gw, drop).sent, 1);
            let mut buf = [0u8; 16];
            let (n, src) = p.recv_from(&mut buf).unwrap();
            assert_eq!(&buf[..n], b"answer");
            assert_eq!(src.port(), port);
        }
    }

    #[test]
    fn a_receive_buffer_capped_by_rmem_max_is_told() {
        let s = bind_reuseport("127.0.0.1:0".parse().unwrap()).unwrap();
        let max: usize = std::fs::read_to_string("/proc/sys/net/core/rmem_max")
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert_eq!(
            capped_receive_buffer(&s),
            (max < SHARED_BUFFER).then_some(max),
            "rmem_max {max}"
        );
    }

    #[test]
    fn a_batch_goes_out_and_comes_back_in() {
        let a = bind_reuseport("127.0.0.1:0".parse().unwrap()).unwrap();
        let b = bind_reuseport("127.0.0.1:0".parse().unwrap()).unwrap();
        let to = b.local_addr().unwrap();
        let mut out = SendBatch::default();
        let mut pushed = Vec::new();
        for i in 0..70u8 {
            let buf = vec![i; 10 + usize::from(i)];
            pushed.push(buf.as_ptr());
            out.push(to, buf);
        }
        let mut back = Vec::new();
        let f = out.flush(&a, |b| back.push(b.as_ptr()));
        assert_eq!(f.sent, 70);
        assert_eq!(f.failed, 0);
        assert!(out.is_empty());
        // Sent from the buffers as they were handed over (no copy), and every one given back.
        assert_eq!(back, pushed);
        let mut got = Vec::new();
        let mut rx = RecvBatch::default();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while got.len() < 70 && std::time::Instant::now() < deadline {
            let n = rx.recv(&b).unwrap();
            for i in 0..n {
                let (from, d) = rx.get(i);
                assert_eq!(from, Some(a.local_addr().unwrap()));
                got.push(d.to_vec());
            }
            if n == 0 {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
        assert_eq!(got.len(), 70);
        for (i, d) in got.iter().enumerate() {
            assert_eq!(d.len(), 10 + i);
            assert!(d.iter().all(|x| usize::from(*x) == i));
        }
    }
}
