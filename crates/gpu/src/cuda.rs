//! The CUDA device: the driver and NVRTC loaded at run time (`cudarc` with dynamic loading),
//! so building and testing need no CUDA; without a driver or a GPU the engine reports itself
//! unavailable.
//!
//! Each lane is a CUDA stream with a staging buffer in page-locked host memory (ordinary
//! cached pinned memory, not write-combined: the host reads the results back from it) and a
//! device buffer of the same size. A lane's launch queues, in order on its stream: the copy of
//! the staging's used bytes to the device, the packet kernel, the copy back. Lanes run
//! concurrently, so one lane's copies overlap another's kernel. The AES tables and the key
//! slots live on the device for the engine's life; key sets are expanded there once each
//! (`srtp_keys_setup`), and wiped (zeroed) when the engine is dropped.

#![allow(unsafe_code)]

use std::sync::Arc;

use cudarc::driver::{
    CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, LaunchConfig, PinnedHostSlice,
    PushKernelArg,
};
use cudarc::nvrtc::CompileOptions;

use crate::abi::{KEY_SLOT_BYTES, TABLE_WORDS};
use crate::device::{Device, DeviceError};

/// The kernels' source, compiled by NVRTC when a device is opened.
pub const KERNEL_SOURCE: &str = include_str!("../kernels/srtp.cu");

/// Threads per block of the packet kernel.
pub const PACKET_BLOCK: u32 = 256;

fn err(what: &str) -> impl Fn(cudarc::driver::DriverError) -> DeviceError + '_ {
    move |e| DeviceError(format!("{what}: {e}"))
}

/// Whether the CUDA driver library can be loaded on this machine.
pub fn driver_present() -> bool {
    // SAFETY: only tries to open the library (dlopen); nothing is called through it.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

/// Whether NVRTC can be loaded on this machine.
pub fn nvrtc_present() -> bool {
    // SAFETY: as for `driver_present`.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

/// Compiles the kernels with NVRTC for the virtual architecture `compute_{major}{minor}`,
/// returning the PTX (needs NVRTC, not a GPU).
pub fn compile_kernels(major: i32, minor: i32) -> Result<cudarc::nvrtc::Ptx, DeviceError> {
    if !nvrtc_present() {
        return Err(DeviceError("NVRTC (libnvrtc) not found".into()));
    }
    let opts = CompileOptions {
        options: vec![
            format!("--gpu-architecture=compute_{major}{minor}"),
            "--std=c++17".into(),
            "-default-device".into(),
        ],
        name: Some("srtp.cu".into()),
        ..Default::default()
    };
    cudarc::nvrtc::compile_ptx_with_opts(KERNEL_SOURCE, opts).map_err(|e| match e {
        cudarc::nvrtc::CompileError::CompileError { log, .. } => DeviceError(format!(
            "NVRTC could not compile the kernels: {}",
            log.to_string_lossy()
        )),
        other => DeviceError(format!("NVRTC: {other}")),
    })
}

struct Lane {
    stream: Arc<CudaStream>,
    host: PinnedHostSlice<u8>,
    dev: CudaSlice<u8>,
}

/// A CUDA GPU with the kernels loaded.
pub(crate) struct CudaDevice {
    ctx: Arc<CudaContext>,
    _module: Arc<CudaModule>,
    packets: CudaFunction,
    setup: CudaFunction,
    tables: CudaSlice<u32>,
    slots: CudaSlice<u8>,
    lanes: Vec<Lane>,
    name: String,
}

/// Page-locked host memory, cached (flags 0: not write-combined), zeroed.
fn pinned(ctx: &Arc<CudaContext>, bytes: usize) -> Result<PinnedHostSlice<u8>, DeviceError> {
    // SAFETY: the memory is uninitialised after the call; it is zeroed below before any read.
    let mut h = unsafe { ctx.alloc_pinned_with_flags::<u8>(bytes.max(1), 0) }
        .map_err(err("page-locked host memory"))?;
    h.as_mut_slice()
        .map_err(err("page-locked host memory"))?
        .fill(0);
    Ok(h)
}

impl CudaDevice {
    /// Opens GPU `ordinal`, compiles and loads the kernels, fills the tables, makes `lanes`
    /// streams.
    pub(crate) fn open(ordinal: usize, lanes: usize) -> Result<Self, DeviceError> {
        if !driver_present() {
            return Err(DeviceError(
                "the CUDA driver (libcuda) was not found".into(),
            ));
        }
        let ctx = CudaContext::new(ordinal).map_err(err("no usable CUDA device"))?;
        // Every buffer is used on one stream only (a lane's), or written before the work
        // that reads it and synchronised (tables, key slots): no per-buffer events needed.
        // SAFETY: see above; nothing was allocated in this context yet.
        unsafe { ctx.disable_event_tracking() };
        let (major, minor) = ctx
            .compute_capability()
            .map_err(err("compute capability"))?;
        let name = ctx.name().unwrap_or_else(|_| "CUDA device".into());
        let ptx = compile_kernels(major, minor)?;
        let module = ctx.load_module(ptx).map_err(err("loading the kernels"))?;
        let f = |n: &str| module.load_function(n).map_err(err("a kernel is missing"));
        let (packets, setup, init) = (
            f("srtp_packets")?,
            f("srtp_keys_setup")?,
            f("srtp_tables_init")?,
        );
        let s0 = ctx.default_stream();
        let mut tables = s0
            .alloc_zeros::<u32>(TABLE_WORDS)
            .map_err(err("device memory"))?;
        let mut b = s0.launch_builder(&init);
        b.arg(&mut tables);
        // SAFETY: `srtp_tables_init(u32*)` fills `SRTP_TABLE_WORDS` words, one block of 256.
        unsafe {
            b.launch(LaunchConfig {
                grid_dim: (1, 1, 1),
                block_dim: (256, 1, 1),
                shared_mem_bytes: 0,
            })
        }
        .map_err(err("the table kernel"))?;
        let slots = s0
            .alloc_zeros::<u8>(KEY_SLOT_BYTES)
            .map_err(err("device memory"))?;
        s0.synchronize().map_err(err("the table kernel"))?;
        let mut v = Vec::new();
        for _ in 0..lanes.max(1) {
            let stream = ctx.new_stream().map_err(err("a CUDA stream"))?;
            let dev = stream
                .alloc_zeros::<u8>(1 << 16)
                .map_err(err("device memory"))?;
            v.push(Lane {
                host: pinned(&ctx, 1 << 16)?,
                dev,
                stream,
            });
        }
        Ok(CudaDevice {
            ctx,
            _module: module,
            packets,
            setup,
            tables,
            slots,
            lanes: v,
            name: format!("{name} (compute {major}.{minor})"),
        })
    }
}

impl Device for CudaDevice {
    fn describe(&self) -> String {
        self.name.clone()
    }

    fn lanes(&self) -> usize {
        self.lanes.len()
    }

    fn slot_capacity(&self) -> usize {
        self.slots.len() / KEY_SLOT_BYTES
    }

    fn reserve_slots(&mut self, slots: usize) -> Result<(), DeviceError> {
        if slots <= self.slot_capacity() {
            return Ok(());
        }
        let s0 = self.ctx.default_stream();
        let mut bigger = s0
            .alloc_zeros::<u8>(slots * KEY_SLOT_BYTES)
            .map_err(err("device memory for key slots"))?;
        let old = self.slots.len();
        s0.memcpy_dtod(&self.slots, &mut bigger.slice_mut(..old))
            .map_err(err("moving key slots"))?;
        s0.memset_zeros(&mut self.slots)
            .map_err(err("wiping key slots"))?;
        s0.synchronize().map_err(err("moving key slots"))?;
        self.slots = bigger;
        Ok(())
    }

    fn upload_keys(&mut self, raw: &[u8], ids: &[u32]) -> Result<(), DeviceError> {
        if ids.is_empty() {
            return Ok(());
        }
        let s0 = self.ctx.default_stream();
        let mut raw_dev = s0.clone_htod(raw).map_err(err("uploading keys"))?;
        let ids_dev = s0.clone_htod(ids).map_err(err("uploading keys"))?;
        let n = ids.len() as u32;
        let mut b = s0.launch_builder(&self.setup);
        b.arg(&self.tables)
            .arg(&raw_dev)
            .arg(&ids_dev)
            .arg(&n)
            .arg(&mut self.slots);
        // SAFETY: `srtp_keys_setup(tables, raw, ids, n, slots)`: `raw` holds n raw key sets,
        // `ids` n slot numbers below the slot count (the engine's cache hands out no other).
        unsafe {
            b.launch(LaunchConfig {
                grid_dim: (n.div_ceil(128), 1, 1),
                block_dim: (128, 1, 1),
                shared_mem_bytes: 0,
            })
        }
        .map_err(err("the key kernel"))?;
        // The raw keys leave no copy on the device, and every lane sees the slots.
        s0.memset_zeros(&mut raw_dev)
            .map_err(err("wiping raw keys"))?;
        s0.synchronize().map_err(err("the key kernel"))?;
        Ok(())
    }

    fn staging(&mut self, lane: usize, bytes: usize) -> Result<&mut [u8], DeviceError> {
        let l = &mut self.lanes[lane];
        // The engine waits for a lane before filling it again; this makes sure of it, at the
        // cost of a query when the stream is idle.
        l.stream.synchronize().map_err(err("the packet kernel"))?;
        if l.host.len() < bytes {
            let size = bytes.next_power_of_two();
            l.host = pinned(&self.ctx, size)?;
            l.dev = l
                .stream
                .alloc_zeros::<u8>(size)
                .map_err(err("device memory"))?;
        }
        l.host.as_mut_slice().map_err(err("staging"))
    }

    fn launch(
        &mut self,
        lane: usize,
        packets: u32,
        data_at: usize,
        bytes: usize,
    ) -> Result<(), DeviceError> {
        let l = &mut self.lanes[lane];
        if bytes > l.host.len() || data_at > bytes {
            return Err(DeviceError("launch refused: outside the staging".into()));
        }
        {
            let host = l.host.as_slice().map_err(err("staging"))?;
            l.stream
                .memcpy_htod(&host[..bytes], &mut l.dev.slice_mut(..bytes))
                .map_err(err("copy to the device"))?;
        }
        {
            let (mut descs, mut data) = l.dev.split_at_mut(data_at);
            let mut b = l.stream.launch_builder(&self.packets);
            b.arg(&self.tables)
                .arg(&self.slots)
                .arg(&mut descs)
                .arg(&packets)
                .arg(&mut data);
            let blocks = packets.div_ceil(PACKET_BLOCK).max(1);
            // SAFETY: `srtp_packets(tables, slots, descs, n, data)`; the engine wrote `packets`
            // descriptors whose packets (with tag room) lie inside the data area, with slots
            // it uploaded.
            unsafe {
                b.launch(LaunchConfig {
                    grid_dim: (blocks, 1, 1),
                    block_dim: (PACKET_BLOCK, 1, 1),
                    shared_mem_bytes: 0,
                })
            }
            .map_err(err("the packet kernel"))?;
        }
        let host = l.host.as_mut_slice().map_err(err("staging"))?;
        l.stream
            .memcpy_dtoh(&l.dev.slice(..bytes), &mut host[..bytes])
            .map_err(err("copy from the device"))?;
        Ok(())
    }

    fn wait(&mut self, lane: usize) -> Result<(), DeviceError> {
        self.lanes[lane]
            .stream
            .synchronize()
            .map_err(err("the packet kernel"))
    }
}

impl Drop for CudaDevice {
    fn drop(&mut self) {
        // Key schedules do not outlive the engine in device memory. Nothing to do on failure:
        // the context is going away.
        for l in &self.lanes {
            let _ = l.stream.synchronize();
        }
        let s0 = self.ctx.default_stream();
        let _ = s0.memset_zeros(&mut self.slots);
        let _ = s0.synchronize();
    }
}
