//! Where the kernels run: a CUDA device ([`crate::cuda`]) or, for tests on machines without
//! one, the same kernel source compiled for the host ([`HostDevice`]).
//!
//! The engine sees a device as a few *lanes*, each a staging area in host memory (pinned, on a
//! CUDA device) and a queue of work (a CUDA stream): it fills a lane's staging with packet
//! descriptors and packets, [`Device::launch`]es it (copy in, kernel, copy out, in order on
//! the lane's stream) and moves on to fill the next lane while that one runs, then
//! [`Device::wait`]s for each in turn and reads the results back from its staging.

use zeroize::Zeroizing;

use crate::abi::{self, DESC_BYTES, KEY_SLOT_BYTES, RAW_KEY_BYTES, TABLE_WORDS};

/// A device failed (a driver error, an out-of-memory, a kernel that did not finish).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceError(pub String);

impl core::fmt::Display for DeviceError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for DeviceError {}

/// What the engine needs from the place the kernels run: what every caller shares (the
/// tables, the key slots), and lanes of its own for each host thread working at once.
pub(crate) trait Device: Send + Sync {
    /// A description for reports (the GPU's name, or the host emulation).
    fn describe(&self) -> String;
    /// Key slots the device holds (fixed when it is opened).
    fn slot_capacity(&self) -> usize;
    /// Expands the raw key sets `raw` (`ids.len()` of [`RAW_KEY_BYTES`]) into the slots `ids`;
    /// done when it returns, so work launched afterwards, on any lane, sees them.
    fn upload_keys(&self, raw: &[u8], ids: &[u32]) -> Result<(), DeviceError>;
    /// `n` new lanes, for one host thread.
    fn new_lanes(&self, n: usize) -> Result<Box<dyn Lanes>, DeviceError>;
}

/// One host thread's lanes: staging areas and queues of work on the device.
pub(crate) trait Lanes: Send {
    /// How many.
    fn count(&self) -> usize;
    /// Lane `lane`'s staging, at least `bytes` long (grown if needed, contents then lost).
    /// Waits for the lane's earlier work first.
    fn staging(&mut self, lane: usize, bytes: usize) -> Result<&mut [u8], DeviceError>;
    /// Starts lane `lane`: its staging's first `bytes` go to the device, the kernel does
    /// `packets` packets (descriptors at 0, data at `data_at`), and the bytes come back.
    fn launch(
        &mut self,
        lane: usize,
        packets: u32,
        data_at: usize,
        bytes: usize,
    ) -> Result<(), DeviceError>;
    /// Waits for lane `lane`'s work and returns its staging, which then holds the results.
    fn wait(&mut self, lane: usize) -> Result<&[u8], DeviceError>;
    /// Queues the kernel `times` more on what lane `lane`'s last launch left on the device
    /// (the same `packets`, `data_at` and `bytes`), with no copy either way; [`Lanes::wait`]
    /// waits for it. For timing the kernels alone: the packets are processed again as they
    /// stand (a protect encrypts its own output), so what they hold afterwards is of no use.
    fn relaunch(
        &mut self,
        lane: usize,
        packets: u32,
        data_at: usize,
        bytes: usize,
        times: u32,
    ) -> Result<(), DeviceError> {
        let _ = (lane, packets, data_at, bytes, times);
        Err(DeviceError(
            "this device cannot run the kernels alone".into(),
        ))
    }
}

/// Checks a key upload before it runs: one raw key set per slot id, every id below the
/// device's slot count.
pub(crate) fn check_upload(raw: &[u8], ids: &[u32], capacity: usize) -> Result<(), DeviceError> {
    if raw.len() != ids.len() * RAW_KEY_BYTES || ids.iter().any(|&i| i as usize >= capacity) {
        return Err(DeviceError("key upload refused: bad slot or length".into()));
    }
    Ok(())
}

/// Checks what a launch hands the kernel before it runs where a wrong offset would write
/// outside the staging (the host emulation runs in this process): every packet's room inside
/// the data area, every slot uploaded.
pub(crate) fn check_launch(
    staging: &[u8],
    packets: u32,
    data_at: usize,
    bytes: usize,
    slots: usize,
) -> Result<(), DeviceError> {
    let bad = |what: &str| Err(DeviceError(format!("launch refused: {what}")));
    let descs = packets as usize * DESC_BYTES;
    if descs > data_at || bytes > staging.len() || data_at > bytes {
        return bad("descriptors or data outside the staging");
    }
    let data_len = bytes - data_at;
    for d in staging[..descs].chunks_exact(DESC_BYTES) {
        let (offset, slot, len, hdr) = abi::desc_place(d);
        if !offset.is_multiple_of(abi::ALIGN) || offset + abi::packet_room(len) > data_len {
            return bad("a packet outside the data area");
        }
        if slot >= slots || hdr > len {
            return bad("a packet with an unknown key slot or a header past its end");
        }
    }
    Ok(())
}

/// The kernels compiled for the host (`kernels/host_shim.cpp`, built by `build.rs`).
#[allow(unsafe_code)]
mod ffi {
    extern "C" {
        pub fn srtp_host_tables_init(tables: *mut u32);
        pub fn srtp_host_keys_setup(
            tables: *const u32,
            raw: *const u8,
            slot_ids: *const u32,
            n: u32,
            slots: *mut u8,
        );
        pub fn srtp_host_packets(
            tables: *const u32,
            slots: *const u8,
            descs: *mut u8,
            n: u32,
            data: *mut u8,
        );
        pub fn srtp_host_abi(which: u32) -> u32;
    }
}

/// The layout constants the host build of the kernels was compiled with:
/// (`SRTP_TABLE_WORDS`, `SRTP_KEY_SLOT_BYTES`, descriptor bytes, raw key bytes).
#[allow(unsafe_code)]
pub fn host_kernel_abi() -> [u32; 4] {
    // SAFETY: `srtp_host_abi` reads nothing and returns a constant for each argument.
    [0, 1, 2, 3].map(|w| unsafe { ffi::srtp_host_abi(w) })
}

/// The device's kernels run on the calling thread, compiled for the host from the same
/// source: slow, but what a test on a machine without a GPU can check the engine and the
/// kernels' arithmetic with.
pub(crate) struct HostDevice {
    shared: std::sync::Arc<HostShared>,
}

struct HostShared {
    tables: Vec<u32>,
    /// Slots the device offers.
    capacity: usize,
    /// Written by uploads, read by every lane's kernels; grown to the highest slot uploaded
    /// (a GPU allocates them all at once, but a test's emulated device need not hold 64 MiB).
    slots: std::sync::RwLock<Zeroizing<Vec<u8>>>,
}

impl HostShared {
    fn slots(&self) -> std::sync::RwLockReadGuard<'_, Zeroizing<Vec<u8>>> {
        self.slots.read().unwrap_or_else(|p| p.into_inner())
    }
}

impl HostDevice {
    /// A host device with `slots` key slots.
    #[allow(unsafe_code)]
    pub(crate) fn new(slots: usize) -> Result<Self, DeviceError> {
        let abi = host_kernel_abi();
        let want = [TABLE_WORDS, KEY_SLOT_BYTES, DESC_BYTES, RAW_KEY_BYTES].map(|v| v as u32);
        if abi != want {
            return Err(DeviceError(format!(
                "the host kernels' layout {abi:?} is not the engine's {want:?}"
            )));
        }
        let mut tables = vec![0u32; TABLE_WORDS];
        // SAFETY: `tables` holds `SRTP_TABLE_WORDS` words (checked just above), all the
        // function writes.
        unsafe { ffi::srtp_host_tables_init(tables.as_mut_ptr()) };
        Ok(HostDevice {
            shared: std::sync::Arc::new(HostShared {
                tables,
                capacity: slots.max(1),
                slots: std::sync::RwLock::new(Zeroizing::new(Vec::new())),
            }),
        })
    }
}

impl Device for HostDevice {
    fn describe(&self) -> String {
        "host emulation of the GPU kernels (on the calling threads)".into()
    }

    fn slot_capacity(&self) -> usize {
        self.shared.capacity
    }

    #[allow(unsafe_code)]
    fn upload_keys(&self, raw: &[u8], ids: &[u32]) -> Result<(), DeviceError> {
        let mut slots = self.shared.slots.write().unwrap_or_else(|p| p.into_inner());
        check_upload(raw, ids, self.shared.capacity)?;
        let need = ids.iter().map(|&i| i as usize + 1).max().unwrap_or(0) * KEY_SLOT_BYTES;
        if need > slots.len() {
            // A new buffer and a copy: growing in place could free the old one unwiped.
            let mut bigger = Zeroizing::new(vec![0u8; need.next_power_of_two()]);
            bigger[..slots.len()].copy_from_slice(&slots);
            *slots = bigger;
        }
        // SAFETY: `raw` holds `ids.len()` raw key sets, every id names a slot inside `slots`
        // (checked above), and the tables hold `SRTP_TABLE_WORDS` words.
        unsafe {
            ffi::srtp_host_keys_setup(
                self.shared.tables.as_ptr(),
                raw.as_ptr(),
                ids.as_ptr(),
                ids.len() as u32,
                slots.as_mut_ptr(),
            )
        };
        Ok(())
    }

    fn new_lanes(&self, n: usize) -> Result<Box<dyn Lanes>, DeviceError> {
        Ok(Box::new(HostLanes {
            shared: self.shared.clone(),
            staging: (0..n.max(1)).map(|_| Vec::new()).collect(),
        }))
    }
}

/// A host thread's lanes on the host emulation: staging buffers, each run at launch.
struct HostLanes {
    shared: std::sync::Arc<HostShared>,
    staging: Vec<Vec<u8>>,
}

impl Lanes for HostLanes {
    fn count(&self) -> usize {
        self.staging.len()
    }

    fn staging(&mut self, lane: usize, bytes: usize) -> Result<&mut [u8], DeviceError> {
        let s = &mut self.staging[lane];
        if s.len() < bytes {
            s.resize(bytes.next_power_of_two(), 0);
        }
        Ok(&mut s[..])
    }

    #[allow(unsafe_code)]
    fn launch(
        &mut self,
        lane: usize,
        packets: u32,
        data_at: usize,
        bytes: usize,
    ) -> Result<(), DeviceError> {
        let slots = self.shared.slots();
        let s = &mut self.staging[lane];
        check_launch(s, packets, data_at, bytes, slots.len() / KEY_SLOT_BYTES)?;
        let (descs, data) = s.split_at_mut(data_at);
        // SAFETY: `check_launch` found every descriptor's packet, with its tag room, inside
        // `data`, and every slot inside `slots`; the tables hold `SRTP_TABLE_WORDS` words.
        // The slots are only read (the read guard keeps uploads out meanwhile).
        unsafe {
            ffi::srtp_host_packets(
                self.shared.tables.as_ptr(),
                slots.as_ptr(),
                descs.as_mut_ptr(),
                packets,
                data.as_mut_ptr(),
            )
        };
        Ok(())
    }

    fn wait(&mut self, lane: usize) -> Result<&[u8], DeviceError> {
        Ok(&self.staging[lane])
    }

    fn relaunch(
        &mut self,
        lane: usize,
        packets: u32,
        data_at: usize,
        bytes: usize,
        times: u32,
    ) -> Result<(), DeviceError> {
        // The host's "device memory" is the staging itself: a launch is the kernel alone.
        for _ in 0..times {
            self.launch(lane, packets, data_at, bytes)?;
        }
        Ok(())
    }
}
