//! The XDP socket and its memory.
//!
//! # Safety
//!
//! The UMEM is memory this process maps and the kernel reads and writes: received frames land
//! in it, transmitted frames are read from it after `sendto`. The API keeps that sound without
//! `unsafe` in the caller:
//! - the area is mapped here and unmapped only after every ring and the socket are closed
//!   (field order of [`Xsk`]), so the kernel never holds a frame of freed memory;
//! - a received frame is lent to the caller's closure as `&[u8]` and given back to the fill
//!   ring only after the closure returned;
//! - a frame to transmit is lent as `&mut [u8]` while it is in none of the rings, and goes
//!   back to the free list only when the kernel's completion ring returns it.

// The kernel interface: every `unsafe` block says why it is sound (`// SAFETY:`).
#![allow(unsafe_code)]

use std::ffi::CString;
use std::io;
use std::num::NonZeroU32;
use std::os::fd::RawFd;
use std::ptr::NonNull;

use xdpilone::xdp::XdpDesc;
use xdpilone::{DeviceQueue, IfInfo, RingRx, RingTx, Socket, SocketConfig, Umem, UmemConfig, User};

/// The sizes of a socket's memory and rings.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    /// Frames in the UMEM (a power of two): half for receiving, half for transmitting.
    pub frames: u32,
    /// Bytes per frame: 2048 or 4096. The kernel writes a received frame 256 bytes in, so
    /// 2048 holds frames up to 1,792 bytes (an MTU of 1,500 and then some).
    pub frame_size: u32,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            frames: 4096,
            frame_size: 2048,
        }
    }
}

/// How the kernel moves frames between the driver and the UMEM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The driver reads and writes the UMEM itself.
    ZeroCopy,
    /// The kernel copies frames in and out (drivers without zero-copy support, veth).
    Copy,
}

impl Mode {
    /// `zero-copy` or `copy`.
    pub fn name(self) -> &'static str {
        match self {
            Mode::ZeroCopy => "zero-copy",
            Mode::Copy => "copy",
        }
    }
}

/// What the kernel counted on a socket.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Statistics {
    /// Frames dropped on the way in (no fill buffer to copy into, too long for a frame, an
    /// invalid descriptor); a full receive ring is counted apart.
    pub rx_dropped: u64,
    /// Frames lost because the receive ring was full.
    pub rx_ring_full: u64,
    /// Times the fill ring was empty when a frame came.
    pub rx_fill_empty: u64,
    /// Transmit descriptors the kernel refused as invalid.
    pub tx_invalid: u64,
}

/// Why a frame was not queued for transmission.
#[derive(Debug, PartialEq, Eq)]
pub enum TxError<E> {
    /// Every transmit frame is in flight.
    Full,
    /// The writer refused (its error).
    Write(E),
}

/// Anonymous memory of this process, page-aligned, unmapped when dropped.
struct Area {
    ptr: NonNull<u8>,
    len: usize,
}

impl Area {
    fn map(len: usize) -> io::Result<Area> {
        // SAFETY: an anonymous private mapping at an address of the kernel's choice: no
        // existing memory is touched; the result is checked before use.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap gave null"))?;
        Ok(Area { ptr, len })
    }

    fn as_slice_ptr(&self) -> NonNull<[u8]> {
        NonNull::slice_from_raw_parts(self.ptr, self.len)
    }

    /// `len` bytes at `offset`, when within the area.
    fn get(&self, offset: u64, len: u32) -> Option<&[u8]> {
        let (start, end) = bounds(offset, len, self.len)?;
        // SAFETY: the range is within the mapping (checked above), which lives as long as
        // `self`; the kernel does not write a frame while it is in the receive ring on our
        // side (until it is given back to the fill ring, which needs `&mut Xsk`).
        Some(unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(start), end - start) })
    }

    /// `len` bytes at `offset`, writable, when within the area.
    fn get_mut(&mut self, offset: u64, len: u32) -> Option<&mut [u8]> {
        let (start, end) = bounds(offset, len, self.len)?;
        // SAFETY: within the mapping (checked above); the frame is on the free list, in no
        // ring, so neither the kernel nor another borrow touches it while this one lives.
        Some(unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr().add(start), end - start) })
    }
}

fn bounds(offset: u64, len: u32, area: usize) -> Option<(usize, usize)> {
    let start = usize::try_from(offset).ok()?;
    let end = start.checked_add(len as usize)?;
    (end <= area).then_some((start, end))
}

impl Drop for Area {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, unmapped once; the socket that registered it was
        // closed before (field order of `Xsk`).
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

// SAFETY: the area is plain memory owned by one `Xsk`, reached only through it.
unsafe impl Send for Area {}

/// An XDP socket bound to one receive queue of an interface, with its UMEM.
pub struct Xsk {
    // Dropped in this order: the rings and the socket first, the memory last.
    rx: RingRx,
    tx: RingTx,
    device: DeviceQueue,
    _user: User,
    _umem: Umem,
    area: Area,
    frame_size: u32,
    /// Frames free to transmit from.
    free: Vec<u64>,
    /// Frames written, waiting for [`Xsk::flush`].
    pending: Vec<XdpDesc>,
    /// Received frames to give back to the fill ring.
    recycled: Vec<u64>,
    /// Frames in the transmit ring or the kernel, until completed.
    in_flight: u32,
    mode: Mode,
    interface: String,
    queue: u32,
}

impl std::fmt::Debug for Xsk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Xsk")
            .field("interface", &self.interface)
            .field("queue", &self.queue)
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

fn errno(what: &str, e: xdpilone::Errno) -> io::Error {
    let kind = io::Error::from_raw_os_error(e.get_raw()).kind();
    io::Error::new(kind, format!("{what}: {e}"))
}

impl Xsk {
    /// A socket on `interface`'s receive queue `queue`: zero-copy where the driver has it,
    /// copy mode otherwise. Err: the interface or queue does not exist, or the kernel refused,
    /// saying what.
    pub fn open(interface: &str, queue: u32, config: Config) -> io::Result<Xsk> {
        if !config.frames.is_power_of_two() || config.frames < 64 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} frames: give a power of two, at least 64", config.frames),
            ));
        }
        if ![2048, 4096].contains(&config.frame_size) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("frame size {}: give 2048 or 4096", config.frame_size),
            ));
        }
        match Xsk::open_as(interface, queue, config, Mode::ZeroCopy) {
            Ok(x) => Ok(x),
            Err(zc) => Xsk::open_as(interface, queue, config, Mode::Copy).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("AF_XDP on {interface} queue {queue}: zero-copy: {zc}; copy: {e}"),
                )
            }),
        }
    }

    fn open_as(interface: &str, queue: u32, config: Config, mode: Mode) -> io::Result<Xsk> {
        let name = CString::new(interface)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "interface name has NUL"))?;
        let mut info = IfInfo::invalid();
        info.from_name(&name)
            .map_err(|e| errno(&format!("interface {interface}"), e))?;
        info.set_queue(queue);
        let area = Area::map(config.frames as usize * config.frame_size as usize)?;
        let half = config.frames / 2;
        let umem_config = UmemConfig {
            fill_size: half,
            complete_size: half,
            frame_size: config.frame_size,
            headroom: 0,
            flags: 0,
        };
        // SAFETY: the area is page-aligned (mmap), `frames * frame_size` long, and outlives
        // the UMEM and every socket on it (field order of `Xsk`).
        let umem = unsafe { Umem::new(umem_config, area.as_slice_ptr()) }
            .map_err(|e| errno("registering the UMEM", e))?;
        let socket = Socket::with_shared(&info, &umem).map_err(|e| errno("XDP socket", e))?;
        let mut device = umem
            .fq_cq(&socket)
            .map_err(|e| errno("fill and completion rings", e))?;
        let bind = match mode {
            Mode::ZeroCopy => SocketConfig::XDP_BIND_ZEROCOPY,
            Mode::Copy => SocketConfig::XDP_BIND_COPY,
        };
        let user = umem
            .rx_tx(
                &socket,
                &SocketConfig {
                    rx_size: NonZeroU32::new(half),
                    tx_size: NonZeroU32::new(half),
                    bind_flags: bind | SocketConfig::XDP_BIND_NEED_WAKEUP,
                },
            )
            .map_err(|e| errno("receive and transmit rings", e))?;
        let rx = user
            .map_rx()
            .map_err(|e| errno("mapping the receive ring", e))?;
        let tx = user
            .map_tx()
            .map_err(|e| errno("mapping the transmit ring", e))?;
        umem.bind(&user)
            .map_err(|e| errno(&format!("binding to {interface} queue {queue}"), e))?;
        let frame = u64::from(config.frame_size);
        // The first half receives: all of it in the fill ring; the second half transmits.
        let filled = {
            let mut fill = device.fill(half);
            let n = fill.insert((0..u64::from(half)).map(|i| i * frame));
            fill.commit();
            n
        };
        if filled != half {
            return Err(io::Error::other(format!(
                "the fill ring took {filled} of {half} frames"
            )));
        }
        Ok(Xsk {
            rx,
            tx,
            device,
            _user: user,
            _umem: umem,
            area,
            frame_size: config.frame_size,
            free: (u64::from(half)..u64::from(config.frames))
                .map(|i| i * frame)
                .collect(),
            pending: Vec::with_capacity(half as usize),
            recycled: Vec::with_capacity(half as usize),
            in_flight: 0,
            mode,
            interface: interface.to_owned(),
            queue,
        })
    }

    /// How the kernel moves this socket's frames.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The socket's descriptor: readable when received frames wait; for an XSKMAP entry
    /// (`secrelay_xdp::Filter::set_socket`) and a poller. Not to be closed.
    pub fn as_raw_fd(&self) -> RawFd {
        self.rx.as_raw_fd()
    }

    /// Whether received frames wait.
    pub fn readable(&self) -> bool {
        self.rx.available() > 0
    }

    /// Hands up to `max` received frames to `f`, one at a time, and gives them back to the
    /// kernel after: how many.
    pub fn receive(&mut self, max: u32, mut f: impl FnMut(&[u8])) -> u32 {
        let mask = !(u64::from(self.frame_size) - 1);
        let mut reader = self.rx.receive(max);
        let mut n = 0;
        while let Some(desc) = reader.read() {
            if let Some(frame) = self.area.get(desc.addr, desc.len) {
                f(frame);
            }
            self.recycled.push(desc.addr & mask);
            n += 1;
        }
        reader.release();
        if !self.recycled.is_empty() {
            let mut fill = self.device.fill(self.recycled.len() as u32);
            let given = fill.insert(self.recycled.iter().copied()) as usize;
            fill.commit();
            // The fill ring holds every receive frame: it always has room for these.
            self.recycled.drain(..given);
        }
        if self.device.needs_wakeup() {
            self.device.wake();
        }
        n
    }

    /// Queues a frame that `write` writes into the buffer it is lent (returning the frame's
    /// length) for the next [`Xsk::flush`].
    pub fn transmit<E>(
        &mut self,
        write: impl FnOnce(&mut [u8]) -> Result<usize, E>,
    ) -> Result<(), TxError<E>> {
        if self.free.is_empty() {
            self.reap();
        }
        let Some(addr) = self.free.pop() else {
            return Err(TxError::Full);
        };
        let Some(buf) = self.area.get_mut(addr, self.frame_size) else {
            return Err(TxError::Full);
        };
        match write(buf) {
            Ok(len) if len <= self.frame_size as usize => {
                self.pending.push(XdpDesc {
                    addr,
                    len: len as u32,
                    options: 0,
                });
                Ok(())
            }
            Ok(_) => {
                self.free.push(addr);
                Err(TxError::Full)
            }
            Err(e) => {
                self.free.push(addr);
                Err(TxError::Write(e))
            }
        }
    }

    /// Hands the queued frames to the kernel (in copy mode the kernel sends them during the
    /// wake-up call, a few dozen per call) and takes back the frames it is done with: how
    /// many were handed over.
    pub fn flush(&mut self) -> usize {
        let mut handed = 0;
        if !self.pending.is_empty() {
            let mut writer = self.tx.transmit(self.pending.len() as u32);
            handed = writer.insert(self.pending.iter().copied()) as usize;
            writer.commit();
            self.pending.drain(..handed);
            self.in_flight += handed as u32;
        }
        // Each wake-up sends a bounded batch: wake until the ring is drained or the kernel
        // stops taking (a full device queue: the next flush goes on).
        let mut left = self.tx.pending();
        for _ in 0..64 {
            if left == 0 || (self.mode == Mode::ZeroCopy && !self.tx.needs_wakeup()) {
                break;
            }
            self.tx.wake();
            let now = self.tx.pending();
            if now == left {
                break;
            }
            left = now;
        }
        self.reap();
        handed
    }

    /// Frames written but not yet handed to the kernel (the transmit ring was full).
    pub fn backlog(&self) -> usize {
        self.pending.len()
    }

    /// Takes back the transmitted frames the kernel completed.
    fn reap(&mut self) {
        if self.in_flight == 0 {
            return;
        }
        let mut done = self.device.complete(self.in_flight);
        while let Some(addr) = done.read() {
            self.free.push(addr);
            self.in_flight -= 1;
        }
        done.release();
    }

    /// What the kernel counted on this socket.
    pub fn statistics(&self) -> io::Result<Statistics> {
        let s = self
            .device
            .statistics_v2()
            .map_err(|e| errno("XDP socket statistics", e))?;
        Ok(Statistics {
            rx_dropped: s.rx_dropped + s.rx_invalid_descs,
            rx_ring_full: s.rx_ring_full,
            rx_fill_empty: s.rx_fill_ring_empty_descs,
            tx_invalid: s.tx_invalid_descs,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_past_the_area_is_refused() {
        assert_eq!(bounds(0, 2048, 4096), Some((0, 2048)));
        assert_eq!(bounds(2048, 2048, 4096), Some((2048, 4096)));
        assert_eq!(bounds(2049, 2048, 4096), None);
        assert_eq!(bounds(u64::MAX, 1, 4096), None);
    }

    #[test]
    fn bad_sizes_are_named() {
        let e = Xsk::open(
            "lo",
            0,
            Config {
                frames: 100,
                frame_size: 2048,
            },
        )
        .unwrap_err();
        assert!(e.to_string().contains("100 frames"), "{e}");
        let e = Xsk::open(
            "lo",
            0,
            Config {
                frames: 128,
                frame_size: 1000,
            },
        )
        .unwrap_err();
        assert!(e.to_string().contains("frame size 1000"), "{e}");
    }

    #[test]
    fn an_unknown_interface_is_named() {
        let e = Xsk::open("nosuchif0", 0, Config::default()).unwrap_err();
        assert!(e.to_string().contains("nosuchif0"), "{e}");
    }
}
