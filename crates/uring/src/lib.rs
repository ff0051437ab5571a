//! io_uring media I/O for secrelay's workers.
//!
//! A worker's UDP sockets (the shared WebRTC socket and every telephony leg's own port) each
//! get one *multishot* `recvmsg` that stays armed: the kernel picks a buffer from a ring of
//! buffers this crate provides ([`Ring::new`]), writes the datagram and its source there, and
//! posts a completion, with no system call per socket or per datagram. Sends are `sendmsg`
//! entries queued with [`Ring::send`] and handed to the kernel together by [`Ring::submit`]:
//! one `io_uring_enter` for a whole batch, whatever the number of sockets it goes out of.
//!
//! The worker keeps its own event loop: the ring's descriptor ([`Ring::as_raw_fd`]) becomes
//! readable when completions wait, and [`Ring::reap`] turns them into [`Completion`]s.
//!
//! The kernel makes a ring's completions as task work of the thread that armed its receives
//! and submitted its sends, and tells that thread by a notification that interrupts its
//! blocking system calls: one with a timeout (a socket read with `SO_RCVTIMEO`, say) may then
//! fail with `EINTR`. A ring belongs on a thread whose blocking calls retry on `Interrupted`,
//! such as an event loop's; a short check belongs on a thread of its own.
//!
//! # Safety
//!
//! This is the one place the kernel writes into and reads from memory that Rust code also
//! owns; the API keeps that sound without `unsafe` in the caller:
//! - receive buffers are owned by the ring and lent out only as `&[u8]` borrows of the
//!   [`Ring`]; a buffer goes back to the kernel only through [`Ring::recycle`], which needs
//!   `&mut Ring` (so no borrow of it is alive) and refuses a buffer it did not lend;
//! - a sent datagram's `Vec<u8>`, its address and its `msghdr` live in a slot of the ring
//!   until the kernel's completion for it is seen; only then is the `Vec` handed back;
//! - dropping a [`Ring`] cancels everything in flight and waits for the kernel to let go
//!   before the memory is freed (and leaks it rather than free it if the kernel does not).

// The kernel interface: every `unsafe` block says why it is sound (`// SAFETY:`).
#![allow(unsafe_code)]

use std::collections::{HashMap, VecDeque};
use std::io;
use std::mem::size_of;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::Duration;

use io_uring::{cqueue, opcode, squeue, types, IoUring};

/// Largest datagram payload a receive buffer holds; a longer one is cut to this and
/// reported [`Received::truncated`].
pub const DATAGRAM_MAX: usize = 2048;

/// The buffer group of the receive buffers (one ring, one group).
const GROUP: u16 = 0;
/// `recvmsg` output header (`struct io_uring_recvmsg_out`) before the name.
const OUT_HEADER: usize = 16;
/// Room for the source address: a `sockaddr_in6` (an IPv4 one is smaller).
const NAME_LEN: usize = size_of::<libc::sockaddr_in6>();
/// What the kernel may fill of a receive buffer: header, name, payload.
const BUF_FILL: usize = OUT_HEADER + NAME_LEN + DATAGRAM_MAX;
/// Each receive buffer's stride: its fill rounded to a cache line.
const BUF_SIZE: usize = BUF_FILL.div_ceil(64) * 64;
const PAGE: usize = 4096;

/// What a completion's `user_data` says: the operation in the top byte, the rest its key.
const RECV: u64 = 1 << 56;
const SEND: u64 = 2 << 56;
const CANCEL: u64 = 3 << 56;
const KIND: u64 = 0xff << 56;

/// How many receive buffers a ring gives the kernel at first ([`Config::buffers`]): a
/// worker's datagrams between two reaps, many times over.
pub const FIRST_GIVEN: u16 = 256;

/// Sizes of a [`Ring`].
#[derive(Debug, Clone, Copy)]
pub struct Config {
    /// Receive buffers shared by every socket (a power of two, at most 32768): how many the
    /// ring may give the kernel. It gives [`FIRST_GIVEN`] of them (or all, when fewer) at
    /// first, and doubles what it gave at the next hand-over after a receive ends for want
    /// of one, so that only buffers traffic has needed are ever written (and resident).
    pub buffers: u16,
    /// Sends in flight at once; a send beyond them first waits for earlier ones to complete.
    pub send_slots: usize,
    /// Submission queue entries.
    pub entries: u32,
    /// Completions are made only when the ring's thread enters the kernel to wait for or reap
    /// them (`IORING_SETUP_DEFER_TASKRUN`, Linux 6.1): no notification interrupts the thread
    /// meanwhile, and a wait for several completions ([`Ring::wait_batch`]) is woken once, not
    /// once per datagram. For a thread that waits in the ring itself, not on its descriptor
    /// with epoll (whose readiness the deferred completions do not make).
    pub defer_taskrun: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            buffers: 2048,
            send_slots: 8192,
            entries: 4096,
            defer_taskrun: false,
        }
    }
}

/// A completion. Datagrams come in the order the kernel posted them; a send's completion may
/// come before datagrams posted ahead of it.
#[derive(Debug)]
pub enum Completion<T> {
    /// A datagram, in a buffer lent until [`Ring::recycle`].
    Received(Received),
    /// A send finished: the bytes the kernel took, or its error, and the datagram's buffer.
    Sent {
        /// What [`Ring::send`] was given with the datagram.
        meta: T,
        /// Bytes sent, or why not.
        result: io::Result<usize>,
        /// The datagram's buffer, back.
        buf: Vec<u8>,
    },
}

/// A received datagram: where it came from, on which socket, and which buffer holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Received {
    /// The key its socket was armed with ([`Ring::arm`]).
    pub key: u32,
    /// Its source, `None` when it was not IPv4 or IPv6. An IPv4 peer of a dual-stack socket
    /// reads as the IPv4 address it is (not `::ffff:a.b.c.d`).
    pub from: Option<SocketAddr>,
    /// Longer than [`DATAGRAM_MAX`]: only the first bytes were kept.
    pub truncated: bool,
    bid: u16,
    payload: (u32, u32),
}

/// One send in flight: what the kernel reads until its completion.
struct Slot<T> {
    msg: libc::msghdr,
    iov: libc::iovec,
    name: socket2::SockAddr,
    buf: Vec<u8>,
    meta: Option<T>,
}

/// The receive buffers and the ring that hands them to the kernel.
struct Pool {
    /// Page-aligned `io_uring_buf` entries the kernel takes buffers from.
    entries: *mut types::BufRingEntry,
    entries_layout: std::alloc::Layout,
    mask: u16,
    tail: u16,
    /// `BUF_SIZE` bytes per buffer.
    memory: Box<[u8]>,
    /// Buffers the kernel filled and this side has not given back.
    lent: Vec<bool>,
    /// How many buffers are not the kernel's: filled (their completion seen, handled or not)
    /// and not given back, or never given yet.
    held: usize,
    /// Buffers given to the kernel at least once (those numbered below it); the rest have
    /// never been written.
    given: u16,
}

/// An io_uring with its receive buffers and its sends in flight; `T` travels with each send
/// to its completion (a receive instant, say).
pub struct Ring<T> {
    ring: IoUring,
    pool: Pool,
    /// The `msghdr` every multishot receive was armed with (only its lengths matter).
    recv_msg: Box<libc::msghdr>,
    /// Armed sockets by key: descriptor, and whether the receive must be armed again.
    armed: HashMap<u32, Armed>,
    /// Keys disarmed whose receive has not ended yet, with how many such receives each.
    closing_keys: HashMap<u32, u32>,
    slots: Vec<Box<Slot<T>>>,
    free_slots: Vec<usize>,
    /// Completions other than sends' taken from the kernel's queue before [`Ring::reap`]
    /// asked, in order.
    stash: VecDeque<cqueue::Entry>,
    /// Sends completed before [`Ring::reap`] or [`Ring::reap_sent`] asked.
    sent: VecDeque<Completion<T>>,
    /// Receives armed and not yet finished (multishot: until cancelled or failed).
    recvs_in_flight: usize,
    /// Keys whose receive is to be armed at the next submit (so that a submit looks at
    /// those only, not through every socket; a key disarmed since is passed over).
    to_arm: Vec<u32>,
    /// Sockets disarmed whose receive has not ended yet.
    closing: usize,
    /// A receive ended for want of a buffer since the buffers were last handed over.
    short: bool,
}

#[derive(Debug, Clone, Copy)]
struct Armed {
    fd: RawFd,
    /// No receive in flight (never armed yet, or it ended: no buffer, an error): armed
    /// (again) at the next submit.
    rearm: bool,
}

// SAFETY: the raw pointer is the pool's own allocation, used only through `&mut Ring`;
// nothing else aliases it on this side, so the pool may move to another thread.
unsafe impl Send for Pool {}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("buffers", &(usize::from(self.mask) + 1))
            .finish()
    }
}

impl<T> std::fmt::Debug for Ring<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ring")
            .field("pool", &self.pool)
            .field("armed", &self.armed.len())
            .field(
                "sends_in_flight",
                &(self.slots.len() - self.free_slots.len()),
            )
            .finish()
    }
}

impl Pool {
    fn new(buffers: u16) -> io::Result<Pool> {
        if !buffers.is_power_of_two() || buffers > 32768 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "receive buffers: a power of two up to 32768",
            ));
        }
        let n = usize::from(buffers);
        let entries_layout =
            std::alloc::Layout::from_size_align(n * size_of::<types::BufRingEntry>(), PAGE)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        // SAFETY: the layout has a non-zero size; the memory is zeroed (a valid, empty ring
        // whose tail reads 0) and freed in `Drop` with the same layout.
        let entries: *mut types::BufRingEntry =
            unsafe { std::alloc::alloc_zeroed(entries_layout) }.cast();
        if entries.is_null() {
            return Err(io::Error::from(io::ErrorKind::OutOfMemory));
        }
        Ok(Pool {
            entries,
            entries_layout,
            mask: buffers - 1,
            tail: 0,
            memory: vec![0u8; n * BUF_SIZE].into_boxed_slice(),
            lent: vec![true; n],
            held: n,
            given: 0,
        })
    }

    /// Gives the kernel `more` buffers it never had (fewer where the pool has no more).
    fn give_more(&mut self, more: u16) {
        let total = u16::try_from(self.lent.len()).unwrap_or(u16::MAX);
        let to = self.given.saturating_add(more).min(total);
        let first = std::mem::replace(&mut self.given, to);
        for bid in first..to {
            self.give(bid);
        }
    }

    /// Buffers the kernel may use: those it was ever given.
    fn in_play(&self) -> usize {
        usize::from(self.given)
    }

    /// Gives buffer `bid` to the kernel; `false` when it was not lent (never given twice).
    fn give(&mut self, bid: u16) -> bool {
        match self.lent.get_mut(usize::from(bid)) {
            Some(l) if *l => *l = false,
            _ => return false,
        }
        self.held -= 1;
        let addr = self.memory.as_ptr() as u64 + u64::from(bid) * BUF_SIZE as u64;
        // SAFETY: `tail & mask` indexes the pool's own entry array (mask + 1 entries); the
        // kernel only reads entries between its head and the published tail, and this one is
        // past the tail until `publish`.
        unsafe {
            let e = &mut *self.entries.add(usize::from(self.tail & self.mask));
            e.set_addr(addr);
            e.set_len(BUF_FILL as u32);
            e.set_bid(bid);
        }
        self.tail = self.tail.wrapping_add(1);
        true
    }

    /// An empty pool that frees nothing (what a leaked one is replaced with).
    fn leaked() -> Pool {
        Pool {
            entries: std::ptr::null_mut(),
            entries_layout: std::alloc::Layout::new::<()>(),
            mask: 0,
            tail: 0,
            memory: Box::new([]),
            lent: Vec::new(),
            held: 0,
            given: 0,
        }
    }

    /// Buffers the kernel has to fill, as far as the completions seen say.
    fn in_kernel(&self) -> usize {
        self.lent.len() - self.held
    }

    /// Makes the buffers given so far visible to the kernel.
    fn publish(&self) {
        // SAFETY: `tail` points into the first entry of the pool's own page-aligned ring
        // (where the kernel reads the tail); it is a u16 the kernel reads with acquire order,
        // written here with release order after the entries it covers.
        unsafe {
            let tail = types::BufRingEntry::tail(self.entries).cast::<AtomicU16>();
            (*tail).store(self.tail, Ordering::Release);
        }
    }

    fn buffer(&self, bid: u16) -> &[u8] {
        let at = usize::from(bid) * BUF_SIZE;
        &self.memory[at..at + BUF_SIZE]
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        if self.entries.is_null() {
            return;
        }
        // SAFETY: allocated in `Pool::new` with this layout; the ring that read it is gone
        // (`Ring::drop` leaks the pool instead when the kernel may still use it).
        unsafe { std::alloc::dealloc(self.entries.cast(), self.entries_layout) };
    }
}

impl<T> Ring<T> {
    /// A ring with `config`'s sizes, its receive buffers registered. Fails where the kernel
    /// has no io_uring, refuses it (`io_uring_disabled`, a seccomp filter) or lacks provided
    /// buffer rings (before 5.19); [`Ring::probe`] also checks multishot receives work.
    pub fn new(config: Config) -> io::Result<Ring<T>> {
        // Completions are made by the thread that reaps them, when it enters the kernel, not
        // by interrupting it while it works (COOP_TASKRUN), or only when it enters to wait or
        // reap (DEFER_TASKRUN); the ring says when some wait to be made (TASKRUN_FLAG), and
        // only the thread that made it submits (SINGLE_ISSUER).
        let mut builder = IoUring::builder();
        builder
            .setup_cqsize(config.entries.saturating_mul(8))
            .setup_clamp()
            .setup_taskrun_flag()
            .setup_single_issuer();
        if config.defer_taskrun {
            builder.setup_defer_taskrun();
        } else {
            builder.setup_coop_taskrun();
        }
        let ring = builder.build(config.entries)?;
        let mut pool = Pool::new(config.buffers)?;
        // SAFETY: the entries are page aligned, `buffers` long, and outlive the registration
        // (`Ring::drop` waits for the kernel to let go before the pool is freed, or leaks it).
        unsafe {
            ring.submitter().register_buf_ring_with_flags(
                pool.entries as u64,
                config.buffers,
                GROUP,
                0,
            )?;
        }
        pool.give_more(FIRST_GIVEN);
        pool.publish();
        let mut recv_msg: Box<libc::msghdr> = Box::new(zeroed_msghdr());
        recv_msg.msg_namelen = NAME_LEN as libc::socklen_t;
        let slots = (0..config.send_slots)
            .map(|_| {
                Box::new(Slot {
                    msg: zeroed_msghdr(),
                    iov: libc::iovec {
                        iov_base: std::ptr::null_mut(),
                        iov_len: 0,
                    },
                    name: socket2::SockAddr::from(SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0))),
                    buf: Vec::new(),
                    meta: None,
                })
            })
            .collect();
        Ok(Ring {
            ring,
            pool,
            recv_msg,
            armed: HashMap::new(),
            closing_keys: HashMap::new(),
            slots,
            free_slots: (0..config.send_slots).rev().collect(),
            stash: VecDeque::new(),
            sent: VecDeque::new(),
            recvs_in_flight: 0,
            to_arm: Vec::new(),
            closing: 0,
            short: false,
        })
    }

    /// A ring, checked end to end: a datagram sent to a loopback socket armed on it must come
    /// back as a completion within a second. Fails with why where it does not (old kernels
    /// refuse multishot `recvmsg`; sandboxes refuse io_uring altogether).
    pub fn probe(config: Config) -> io::Result<Ring<T>> {
        const KEY: u32 = u32::MAX;
        let mut ring = Ring::new(config)?;
        let socket = std::net::UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))?;
        socket.set_nonblocking(true)?;
        ring.arm(KEY, &socket);
        ring.submit()?;
        socket.send_to(b"probe", socket.local_addr()?)?;
        let deadline = std::time::Instant::now() + Duration::from_secs(1);
        let mut seen = Vec::new();
        let outcome = loop {
            ring.wait(Duration::from_millis(50))?;
            ring.reap(&mut seen, usize::MAX);
            if let Some(Completion::Received(r)) = seen.first() {
                let r = *r;
                let ok = ring.payload(&r) == b"probe" && r.from == socket.local_addr().ok();
                ring.recycle(&r);
                break if ok {
                    Ok(())
                } else {
                    Err(io::Error::other("the probe datagram came back wrong"))
                };
            }
            if ring.armed.values().any(|a| a.rearm) {
                break Err(io::Error::other(
                    "the kernel ended the multishot receive at once (no multishot recvmsg?)",
                ));
            }
            if std::time::Instant::now() > deadline {
                break Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "no completion for the probe datagram within 1 s",
                ));
            }
        };
        ring.disarm(KEY);
        ring.submit()?;
        outcome.map(|()| ring)
    }

    /// Arms a multishot receive on `socket` under `key` (armed at the next [`Ring::submit`]).
    /// The socket must stay open until [`Ring::disarm`] and its submit; were it closed
    /// earlier, the kernel would keep its port bound until then.
    /// A key names one socket at a time: arming it again disarms the socket it named (what
    /// that socket received and was not reaped yet still comes under the key).
    pub fn arm(&mut self, key: u32, socket: &impl AsRawFd) {
        self.disarm(key);
        let fd = socket.as_raw_fd();
        self.armed.insert(key, Armed { fd, rearm: true });
        self.to_arm.push(key);
    }

    /// Stops receiving on `key`'s socket: the receive is cancelled at the next
    /// [`Ring::submit`], which returns once the kernel let go of the socket (so its port can
    /// be bound again right after).
    pub fn disarm(&mut self, key: u32) {
        let Some(a) = self.armed.remove(&key) else {
            return;
        };
        if a.rearm {
            // Not in flight: nothing to cancel (its place in `to_arm` is passed over).
            return;
        }
        *self.closing_keys.entry(key).or_insert(0) += 1;
        self.closing += 1;
        let cancel = opcode::AsyncCancel::new(RECV | u64::from(key))
            .build()
            .user_data(CANCEL | u64::from(key));
        // Were the queue to refuse it, the receive would be forgotten when it ends on its own.
        let _ = self.push(&cancel);
    }

    /// Whether `key` can name another socket without what its last socket received coming
    /// out under it: no receive disarmed under it is still running (its last completion taken
    /// from the kernel), and nothing received under it waits in this side's queue to be
    /// reaped. (Completions the caller reaped but has not handled are the caller's to drop.)
    pub fn settled(&self, key: u32) -> bool {
        !self.closing_keys.contains_key(&key)
            && !self
                .stash
                .iter()
                .any(|c| c.user_data() == RECV | u64::from(key))
    }

    /// Queues `buf` for `to` on `socket` (sent at the next [`Ring::submit`]); `v6`: the socket
    /// is IPv6, so an IPv4 peer is sent to by its IPv4-mapped address. When every send slot is
    /// in flight, earlier sends are submitted and their completions awaited first; the datagram
    /// comes back only when none completes within a second.
    pub fn send(
        &mut self,
        socket: &impl AsRawFd,
        to: SocketAddr,
        v6: bool,
        buf: Vec<u8>,
        meta: T,
    ) -> Result<(), (Vec<u8>, T)> {
        if self.free_slots.is_empty() {
            self.make_room();
        }
        let Some(i) = self.free_slots.pop() else {
            return Err((buf, meta));
        };
        let slot = &mut *self.slots[i];
        slot.name = socket2::SockAddr::from(on_family(to, v6));
        slot.msg.msg_namelen = slot.name.len();
        slot.buf = buf;
        slot.meta = Some(meta);
        slot.iov = libc::iovec {
            iov_base: slot.buf.as_mut_ptr().cast(),
            iov_len: slot.buf.len(),
        };
        slot.msg.msg_name = slot.name.as_ptr().cast_mut().cast();
        slot.msg.msg_iov = std::ptr::addr_of_mut!(slot.iov);
        slot.msg.msg_iovlen = 1;
        let entry = opcode::SendMsg::new(types::Fd(socket.as_raw_fd()), &slot.msg)
            .flags(libc::MSG_DONTWAIT as u32)
            .build()
            .user_data(SEND | i as u64);
        if self.push(&entry).is_err() {
            let slot = &mut *self.slots[i];
            let back = (std::mem::take(&mut slot.buf), slot.meta.take());
            self.free_slots.push(i);
            return match back {
                (buf, Some(meta)) => Err((buf, meta)),
                (_, None) => Ok(()),
            };
        }
        Ok(())
    }

    /// Hands everything queued (sends, receives to arm or re-arm, cancels) to the kernel in
    /// one system call; returns once every cancelled receive has ended.
    pub fn submit(&mut self) -> io::Result<()> {
        self.replenish();
        if !self.to_arm.is_empty() {
            self.arm_pending();
        }
        if !self.ring.submission().is_empty() {
            self.enter()?;
        }
        // A cancel completes in the call that submits it, and so does the receive's last
        // completion, as a rule; wait for any that did not, so the socket is let go.
        let mut tries = 0;
        while self.closing > 0 && tries < 100 {
            self.collect();
            if self.closing > 0 {
                self.wait_one(Duration::from_millis(10))?;
            }
            tries += 1;
        }
        Ok(())
    }

    /// Waits up to `timeout` for a completion (for callers without an event loop of their
    /// own); submits what is queued.
    pub fn wait(&mut self, timeout: Duration) -> io::Result<()> {
        self.wait_batch(1, Duration::ZERO, timeout)
    }

    /// Waits up to `timeout` for `want` completions, returning early once `min_wait` has passed
    /// with at least one (where the kernel has that, Linux 6.12; elsewhere, or with a zero
    /// `min_wait`, as soon as there is one): a busy ring's thread then wakes once per batch of datagrams, not per datagram, at
    /// the cost of up to `min_wait` of delay. Submits what is queued. Meant for a ring made
    /// with [`Config::defer_taskrun`], where datagrams do not wake the thread one by one.
    pub fn wait_batch(
        &mut self,
        want: usize,
        min_wait: Duration,
        timeout: Duration,
    ) -> io::Result<()> {
        self.replenish();
        if self.pending() {
            return self.enter();
        }
        // Without a short wait (zero, or a kernel without it) the wait is for one: a wait for
        // more would last until they all came or the timeout.
        let us = u32::try_from(min_wait.as_micros()).unwrap_or(u32::MAX);
        let (want, min_wait_us) = if us > 0 && self.ring.params().is_feature_min_timeout() {
            (want.max(1), us)
        } else {
            (1, 0)
        };
        self.wait_for(want, min_wait_us, timeout)
    }

    /// Whether completions wait to be reaped, or to be made by entering the kernel (which
    /// [`Ring::reap`] then does).
    pub fn pending(&mut self) -> bool {
        !self.sent.is_empty()
            || !self.stash.is_empty()
            || !self.ring.completion().is_empty()
            || self.ring.submission().taskrun()
    }

    /// Moves up to `max` completions into `out`. Receives that ended (out of buffers, an
    /// error) are armed again at the next [`Ring::submit`].
    pub fn reap(&mut self, out: &mut Vec<Completion<T>>, max: usize) {
        if self.ring.submission().taskrun() {
            // Receives and sends finished that wait for this thread to post them.
            let _ = self.enter();
        }
        let mut taken = 0;
        while taken < max {
            if let Some(c) = self.sent.pop_front() {
                out.push(c);
                taken += 1;
                continue;
            }
            let cqe = match self.stash.pop_front() {
                Some(c) => c,
                None => {
                    let next = self.ring.completion().next();
                    match next {
                        Some(c) => {
                            self.note(&c);
                            c
                        }
                        None => break,
                    }
                }
            };
            if let Some(c) = self.complete(&cqe) {
                out.push(c);
                taken += 1;
            }
        }
    }

    /// Moves the completions of the sends that finished into `out`, leaving every other
    /// completion for [`Ring::reap`], in order. A UDP send finishes within the submit that
    /// hands it over, as a rule, so a caller that takes them right after [`Ring::submit`] has
    /// its datagrams' buffers back while they are still in cache, as after a `sendmmsg`,
    /// rather than a batch later.
    pub fn reap_sent(&mut self, out: &mut Vec<Completion<T>>) {
        if self.ring.submission().taskrun() {
            // Sends finished that wait for this thread to post them.
            let _ = self.enter();
        }
        self.collect();
        out.extend(self.sent.drain(..));
    }

    /// The datagram `r` received.
    pub fn payload(&self, r: &Received) -> &[u8] {
        let (at, len) = r.payload;
        &self.pool.buffer(r.bid)[at as usize..(at + len) as usize]
    }

    /// Gives `r`'s buffer back to the kernel (at the next submit or wait). A buffer that is not
    /// lent (recycled already) is left alone.
    pub fn recycle(&mut self, r: &Received) {
        self.pool.give(r.bid);
    }

    /// Receive buffers given to the kernel so far ([`Config::buffers`] says how they grow).
    pub fn buffers_given(&self) -> usize {
        self.pool.in_play()
    }

    /// Hands the kernel the buffers given back since the last time, and, if a receive ended
    /// for want of one meanwhile, as many new ones again as were given so far (up to
    /// [`Config::buffers`]): once per hand-over, however many receives ended together.
    fn replenish(&mut self) {
        if std::mem::take(&mut self.short) {
            let given = self.pool.given;
            self.pool.give_more(given);
        }
        self.pool.publish();
    }

    /// Sends in flight.
    pub fn sends_in_flight(&self) -> usize {
        self.slots.len() - self.free_slots.len()
    }

    /// Queues the receives of the sockets armed (or whose receive ended) since the last
    /// submit.
    ///
    /// A receive armed where datagrams wait takes a buffer at once, and one armed with every
    /// buffer out (held by datagrams not handled yet) ends again at once for want of one: with
    /// thousands of sockets, re-arming them would be all the kernel did. So receives are armed
    /// only while more than an eighth of the buffers are the kernel's, one buffer counted per
    /// receive; the rest wait for buffers to come back, their datagrams in their sockets.
    fn arm_pending(&mut self) {
        // Completions still in the kernel's queue took buffers too.
        self.collect();
        self.replenish();
        let mut budget = self
            .pool
            .in_kernel()
            .saturating_sub(self.pool.in_play() / 8);
        if budget == 0 {
            // Every key waits, not looked at: thousands may.
            return;
        }
        let mut keys = std::mem::take(&mut self.to_arm);
        let mut left = Vec::new();
        let mut looked = 0;
        while budget > 0 && looked < keys.len() {
            let key = keys[looked];
            looked += 1;
            let Some(a) = self.armed.get(&key).copied().filter(|a| a.rearm) else {
                // Disarmed since, or armed already (a key queued twice).
                continue;
            };
            let entry = opcode::RecvMsgMulti::new(types::Fd(a.fd), &*self.recv_msg, GROUP)
                .build()
                .flags(squeue::Flags::BUFFER_SELECT)
                .user_data(RECV | u64::from(key));
            if self.push(&entry).is_ok() {
                if let Some(a) = self.armed.get_mut(&key) {
                    a.rearm = false;
                }
                self.recvs_in_flight += 1;
                budget -= 1;
            } else {
                left.push(key);
            }
        }
        // Those the queue did not take go at the next submit, and so do those the budget left
        // unlooked at, and the receives that ended while the queue was being made room in
        // (`push` may reap: they were queued in `self.to_arm` meanwhile); the vector keeps its
        // room.
        keys.drain(..looked);
        left.append(&mut keys);
        keys.append(&mut left);
        keys.append(&mut self.to_arm);
        self.to_arm = keys;
    }

    fn push(&mut self, entry: &squeue::Entry) -> io::Result<()> {
        for _ in 0..100 {
            // SAFETY: every pointer in the entries this crate builds points into memory the
            // ring owns and keeps until the entry's completion: the receive `msghdr` (boxed,
            // for the ring's life), a send slot (boxed, reused only after its completion), or
            // nothing (cancels).
            if unsafe { self.ring.submission().push(entry) }.is_ok() {
                return Ok(());
            }
            // Queue full: hand what is there to the kernel and go on.
            self.enter()?;
        }
        Err(io::Error::other("the submission queue stays full"))
    }

    fn enter(&mut self) -> io::Result<()> {
        loop {
            match self.ring.submit() {
                Ok(_) => return Ok(()),
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                // The completion queue overflowed: take its entries, then go on.
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => self.collect(),
                Err(e) => return Err(e),
            }
        }
    }

    fn wait_one(&mut self, timeout: Duration) -> io::Result<()> {
        self.wait_for(1, 0, timeout)
    }

    /// Submits, then waits up to `timeout` for `want` completions (after `min_wait_us`, for
    /// one; 0: no such wait).
    fn wait_for(&mut self, want: usize, min_wait_us: u32, timeout: Duration) -> io::Result<()> {
        let ts = types::Timespec::from(timeout);
        let args = types::SubmitArgs::new()
            .timespec(&ts)
            .min_wait_usec(min_wait_us);
        match self.ring.submitter().submit_with_args(want, &args) {
            Ok(_) => Ok(()),
            Err(e) if matches!(e.raw_os_error(), Some(libc::ETIME | libc::EINTR)) => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                self.collect();
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Takes the kernel's completions, noting what they end: sends are completed now (their
    /// slots freed) and kept for [`Ring::reap`] in `sent`, the rest in the stash, in order.
    /// (Sorting them here keeps the stash free of sends, so that taking the sends back never
    /// walks past the datagrams waiting.)
    fn collect(&mut self) {
        loop {
            let next = self.ring.completion().next();
            let Some(cqe) = next else {
                return;
            };
            self.note(&cqe);
            if cqe.user_data() & KIND != SEND {
                self.stash.push_back(cqe);
            } else if let Some(c) = self.complete(&cqe) {
                self.sent.push_back(c);
            }
        }
    }

    /// Frees send slots: submits, then waits (up to a second) for sends to complete. Their
    /// completions are kept for [`Ring::reap`], their slots freed now.
    fn make_room(&mut self) {
        if self.enter().is_err() {
            return;
        }
        for _ in 0..1000 {
            self.collect();
            if !self.free_slots.is_empty() || self.wait_one(Duration::from_millis(1)).is_err() {
                return;
            }
        }
    }

    /// What a completion ends, noted once as it leaves the kernel's queue.
    fn note(&mut self, cqe: &cqueue::Entry) {
        if cqe.user_data() & KIND != RECV {
            return;
        }
        if cqueue::buffer_select(cqe.flags()).is_some() {
            self.pool.held += 1;
        }
        if cqueue::more(cqe.flags()) {
            return;
        }
        self.recvs_in_flight = self.recvs_in_flight.saturating_sub(1);
        if cqe.result() == -libc::ENOBUFS {
            // Every buffer given was out: more are given before the kernel is next handed
            // any ([`Ring::replenish`]).
            self.short = true;
        }
        let key = (cqe.user_data() & !KIND) as u32;
        // A receive disarmed under this key ends before one armed under it since.
        if let Some(n) = self.closing_keys.get_mut(&key) {
            *n -= 1;
            if *n == 0 {
                self.closing_keys.remove(&key);
            }
            self.closing -= 1;
        } else if let Some(a) = self.armed.get_mut(&key) {
            a.rearm = true;
            self.to_arm.push(key);
        }
    }

    /// One completion turned into what the caller sees (`None`: bookkeeping only).
    fn complete(&mut self, cqe: &cqueue::Entry) -> Option<Completion<T>> {
        let data = cqe.user_data();
        match data & KIND {
            SEND => {
                let i = (data & !KIND) as usize;
                let slot = &mut *self.slots[i];
                let buf = std::mem::take(&mut slot.buf);
                let meta = slot.meta.take()?;
                self.free_slots.push(i);
                let result = usize::try_from(cqe.result())
                    .map_err(|_| io::Error::from_raw_os_error(-cqe.result()));
                Some(Completion::Sent { meta, result, buf })
            }
            RECV => {
                let bid = cqueue::buffer_select(cqe.flags())?;
                // The kernel filled this buffer: it is lent to this side until recycled.
                if let Some(l) = self.pool.lent.get_mut(usize::from(bid)) {
                    *l = true;
                }
                let parsed = usize::try_from(cqe.result()).ok().and_then(|len| {
                    let buf = &self.pool.buffer(bid)[..len.min(BUF_SIZE)];
                    let out = types::RecvMsgOut::parse(buf, &self.recv_msg).ok()?;
                    let payload = out.payload_data();
                    let at = payload.as_ptr() as usize - buf.as_ptr() as usize;
                    Some((
                        read_name(out.name_data()),
                        out.is_payload_truncated(),
                        (at as u32, payload.len() as u32),
                    ))
                });
                let Some((from, truncated, payload)) = parsed else {
                    self.pool.give(bid);
                    return None;
                };
                Some(Completion::Received(Received {
                    key: (data & !KIND) as u32,
                    from,
                    truncated,
                    bid,
                    payload,
                }))
            }
            _ => None,
        }
    }
}

impl<T> AsRawFd for Ring<T> {
    /// Readable when completions wait (register it with the worker's poll).
    fn as_raw_fd(&self) -> RawFd {
        self.ring.as_raw_fd()
    }
}

impl<T> Drop for Ring<T> {
    fn drop(&mut self) {
        // Cancel every receive and wait for every send, so the kernel touches none of the
        // memory freed below.
        let cancel = opcode::AsyncCancel2::new(types::CancelBuilder::any().all())
            .build()
            .user_data(CANCEL);
        let _ = self.push(&cancel);
        for _ in 0..200 {
            let _ = self.enter();
            self.collect();
            while let Some(cqe) = self.stash.pop_front() {
                if cqe.user_data() & KIND == SEND {
                    let i = (cqe.user_data() & !KIND) as usize;
                    self.slots[i].meta = None;
                    self.free_slots.push(i);
                }
            }
            if self.recvs_in_flight == 0 && self.free_slots.len() == self.slots.len() {
                return;
            }
            let _ = self.wait_one(Duration::from_millis(5));
        }
        // The kernel has not let go: leak what it may still use rather than free it.
        std::mem::forget(std::mem::take(&mut self.slots));
        std::mem::forget(std::mem::replace(&mut self.pool, Pool::leaked()));
        std::mem::forget(std::mem::replace(
            &mut self.recv_msg,
            Box::new(zeroed_msghdr()),
        ));
    }
}

fn zeroed_msghdr() -> libc::msghdr {
    // SAFETY: all-zero is a valid `msghdr` (null pointers, zero lengths).
    unsafe { std::mem::zeroed() }
}

/// `to` as a socket of the family `v6` says sends to it: an IPv4 peer of an IPv6 (dual-stack)
/// socket by its IPv4-mapped address.
pub fn on_family(to: SocketAddr, v6: bool) -> SocketAddr {
    match to {
        SocketAddr::V4(a) if v6 => {
            SocketAddr::V6(SocketAddrV6::new(a.ip().to_ipv6_mapped(), a.port(), 0, 0))
        }
        other => other,
    }
}

/// A source address as the kernel wrote it (`sockaddr_in` or `sockaddr_in6` bytes); an
/// IPv4-mapped IPv6 one reads as IPv4.
pub fn read_name(b: &[u8]) -> Option<SocketAddr> {
    let family = libc::sa_family_t::from_ne_bytes([*b.first()?, *b.get(1)?]);
    let port = u16::from_be_bytes([*b.get(2)?, *b.get(3)?]);
    match i32::from(family) {
        libc::AF_INET => {
            let ip: [u8; 4] = b.get(4..8)?.try_into().ok()?;
            Some(SocketAddr::V4(SocketAddrV4::new(ip.into(), port)))
        }
        libc::AF_INET6 => {
            let ip: [u8; 16] = b.get(8..24)?.try_into().ok()?;
            let scope = u32::from_ne_bytes(b.get(24..28)?.try_into().ok()?);
            Some(canonical(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(ip),
                port,
                0,
                scope,
            ))))
        }
        _ => None,
    }
}

/// `addr` with an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) read as the IPv4 one: an IPv4
/// peer of a dual-stack socket is one peer whichever socket it reached.
pub fn canonical(addr: SocketAddr) -> SocketAddr {
    match addr {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(v4.into(), v6.port()),
            None => addr,
        },
        v4 => v4,
    }
}
