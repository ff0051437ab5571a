//! Fixed ports for peers that must be told a number before they start (a SIP proxy, SIPp,
//! baresip, coturn's relay range), handed out so that test processes running side by side never
//! get the same one.
//!
//! A port found free by binding it and letting it go can be taken by anyone before the peer
//! binds it. Two things close that window here:
//!
//! * the ports come from 20000–29999: below the gateway's default `rtp_ports` (30000 and up)
//!   and the kernel's ephemeral range (32768 and up), so that no socket bound to port 0 and no
//!   gateway left at its defaults lands on one;
//! * each block of four ports is claimed by a lock on a file of its own under the system's
//!   temporary directory, held until the [`PortBlock`] is dropped (or, for
//!   [`reserve_for_process`], until the process ends, whichever way it ends), so that every
//!   test process taking its ports here gets different ones.

use std::fs::{File, OpenOptions};
use std::net::{TcpListener, UdpSocket};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

/// The first port handed out.
const FIRST: u16 = 20_000;
/// Ports are claimed in units of this many (an RTP/RTCP pair and the next pair, or a SIP
/// listener's UDP, TCP and TLS ports).
const UNIT: u16 = 4;
/// How many units lie between [`FIRST`] and 30000.
const UNITS: u32 = 2_500;

/// A run of consecutive ports, each free for UDP and TCP on loopback when it was reserved and
/// claimed against every other process reserving here, until it is dropped.
#[derive(Debug)]
pub struct PortBlock {
    /// The first port.
    pub first: u16,
    /// How many ports (a multiple of four).
    pub len: u16,
    _locks: Vec<File>,
}

impl PortBlock {
    /// The last port of the block.
    pub fn last(&self) -> u16 {
        self.first + self.len - 1
    }
}

/// Reserves `len` consecutive ports (rounded up to a multiple of four), the first a multiple of
/// four. Panics, naming what it tried, when no such run is free.
pub fn reserve(len: u16) -> PortBlock {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let units = u32::from(len.max(1).div_ceil(UNIT));
    assert!(
        units <= UNITS,
        "{len} ports are more than 20000-29999 holds"
    );
    let dir = lock_dir();
    let seed = std::process::id()
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
    let starts = UNITS - units + 1;
    for _ in 0..starts.min(4_000) {
        let n = NEXT.fetch_add(units, Ordering::Relaxed).wrapping_add(seed);
        if let Some(block) = try_block(&dir, n % starts, units) {
            return block;
        }
    }
    panic!(
        "no run of {len} free ports between 20000 and 29999 on loopback (locks in {})",
        dir.display()
    );
}

/// Reserves `len` ports as [`reserve`] does and keeps them claimed until the process ends: the
/// first port.
pub fn reserve_for_process(len: u16) -> u16 {
    static HELD: Mutex<Vec<PortBlock>> = Mutex::new(Vec::new());
    let block = reserve(len);
    let first = block.first;
    HELD.lock().unwrap_or_else(|e| e.into_inner()).push(block);
    first
}

fn lock_dir() -> PathBuf {
    let dir = std::env::temp_dir().join("secrelay-test-ports");
    if let Err(e) = std::fs::create_dir_all(&dir) {
        panic!("cannot make the port lock folder {}: {e}", dir.display());
    }
    dir
}

/// The block of `units` units from unit `start`, if every unit's lock is free here and every
/// port binds.
fn try_block(dir: &std::path::Path, start: u32, units: u32) -> Option<PortBlock> {
    let mut locks = Vec::with_capacity(units as usize);
    for u in start..start + units {
        let path = dir.join(format!("unit-{u}"));
        let f = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .unwrap_or_else(|e| panic!("cannot open the port lock {}: {e}", path.display()));
        // Released when `locks` drops (a unit taken by another process ends this try).
        f.try_lock().ok()?;
        locks.push(f);
    }
    let first = FIRST + (start as u16) * UNIT;
    let len = (units as u16) * UNIT;
    let free = (first..first + len).all(|p| {
        UdpSocket::bind(("127.0.0.1", p)).is_ok() && TcpListener::bind(("127.0.0.1", p)).is_ok()
    });
    free.then_some(PortBlock {
        first,
        len,
        _locks: locks,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_held_at_once_never_overlap_and_bind() {
        let blocks: Vec<PortBlock> = [4, 2, 200, 8, 4].into_iter().map(reserve).collect();
        for (i, a) in blocks.iter().enumerate() {
            assert!(a.first >= 20_000 && a.last() < 30_000, "{a:?}");
            assert_eq!(a.first % 4, 0);
            assert_eq!(a.len % 4, 0);
            for b in &blocks[i + 1..] {
                assert!(a.last() < b.first || b.last() < a.first, "{a:?} {b:?}");
            }
        }
        assert_eq!(blocks[1].len, 4);
        assert_eq!(blocks[2].len, 200);
    }

    #[test]
    fn a_claimed_unit_is_not_handed_out_again_while_held() {
        let dir = lock_dir();
        let a = reserve(4);
        let unit = u32::from((a.first - FIRST) / UNIT);
        assert!(try_block(&dir, unit, 1).is_none(), "claimed twice");
    }
}
