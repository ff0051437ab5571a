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
    CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, DevicePtr, LaunchConfig,
    PinnedHostSlice, PushKernelArg,
};
use cudarc::nvrtc::CompileOptions;

use crate::abi::{KEY_SLOT_BYTES, TABLE_WORDS};
use crate::device::{Device, DeviceError, Lanes};

/// The kernels' source, compiled by NVRTC when a device is opened.
pub const KERNEL_SOURCE: &str = include_str!("../kernels/srtp.cu");

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
/// returning the PTX (needs NVRTC, not a GPU). `max_registers` caps the registers per thread
/// (`--maxrregcount`): fewer registers let more blocks share an SM, at the cost of spills.
pub fn compile_kernels(
    major: i32,
    minor: i32,
    max_registers: Option<u32>,
) -> Result<cudarc::nvrtc::Ptx, DeviceError> {
    if !nvrtc_present() {
        return Err(DeviceError("NVRTC (libnvrtc) not found".into()));
    }
    let mut options = vec![
        format!("--gpu-architecture=compute_{major}{minor}"),
        "--std=c++17".into(),
        "-default-device".into(),
    ];
    if let Some(r) = max_registers {
        options.push(format!("--maxrregcount={r}"));
    }
    let opts = CompileOptions {
        options,
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

/// A CUDA GPU with the kernels loaded, its tables and its key slots: shared by every host
/// thread's lanes.
pub(crate) struct CudaDevice {
    shared: Arc<CudaShared>,
}

struct CudaShared {
    ctx: Arc<CudaContext>,
    _module: Arc<CudaModule>,
    packets: CudaFunction,
    setup: CudaFunction,
    tables: CudaSlice<u32>,
    /// Written only by the key kernel, on `upload`'s stream, under the lock (which also keeps
    /// uploads one at a time); read by every lane's kernels through its device address.
    slots: std::sync::Mutex<CudaSlice<u8>>,
    /// The slots' device address and size, fixed when the device is opened.
    slots_ptr: u64,
    slot_count: usize,
    upload: Arc<CudaStream>,
    block: u32,
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
    /// Opens GPU `ordinal`, compiles and loads the kernels, fills the tables, allocates
    /// `slots` key slots; the packet kernel runs in blocks of `block` threads.
    pub(crate) fn open(
        ordinal: usize,
        slots: usize,
        block: u32,
        max_registers: Option<u32>,
    ) -> Result<Self, DeviceError> {
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
        let ptx = compile_kernels(major, minor, max_registers)?;
        let module = ctx.load_module(ptx).map_err(err("loading the kernels"))?;
        let f = |n: &str| module.load_function(n).map_err(err("a kernel is missing"));
        let (packets, setup, init) = (
            f("srtp_packets")?,
            f("srtp_keys_setup")?,
            f("srtp_tables_init")?,
        );
        let upload = ctx.new_stream().map_err(err("a CUDA stream"))?;
        let mut tables = upload
            .alloc_zeros::<u32>(TABLE_WORDS)
            .map_err(err("device memory"))?;
        let mut b = upload.launch_builder(&init);
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
        let slots_buf = upload
            .alloc_zeros::<u8>(slots.max(1) * KEY_SLOT_BYTES)
            .map_err(err("device memory for key slots"))?;
        let (slots_ptr, _) = slots_buf.device_ptr(&upload);
        upload.synchronize().map_err(err("the table kernel"))?;
        Ok(CudaDevice {
            shared: Arc::new(CudaShared {
                _module: module,
                packets,
                setup,
                tables,
                slots_ptr,
                slot_count: slots.max(1),
                slots: std::sync::Mutex::new(slots_buf),
                upload,
                block,
                name: format!("{name} (compute {major}.{minor})"),
                ctx,
            }),
        })
    }
}

impl Device for CudaDevice {
    fn describe(&self) -> String {
        self.shared.name.clone()
    }

    fn slot_capacity(&self) -> usize {
        self.shared.slot_count
    }

    fn upload_keys(&self, raw: &[u8], ids: &[u32]) -> Result<(), DeviceError> {
        if ids.is_empty() {
            return Ok(());
        }
        crate::device::check_upload(raw, ids, self.shared.slot_count)?;
        let sh = &self.shared;
        let mut slots = sh.slots.lock().unwrap_or_else(|p| p.into_inner());
        let s = &sh.upload;
        let mut raw_dev = s.clone_htod(raw).map_err(err("uploading keys"))?;
        let ids_dev = s.clone_htod(ids).map_err(err("uploading keys"))?;
        let n = ids.len() as u32;
        let mut b = s.launch_builder(&sh.setup);
        b.arg(&sh.tables)
            .arg(&raw_dev)
            .arg(&ids_dev)
            .arg(&n)
            .arg(&mut *slots);
        // SAFETY: `srtp_keys_setup(tables, raw, ids, n, slots)`: `raw` holds n raw key sets,
        // `ids` n slot numbers below the slot count (checked above).
        let launched = unsafe {
            b.launch(LaunchConfig {
                grid_dim: (n.div_ceil(128), 1, 1),
                block_dim: (128, 1, 1),
                shared_mem_bytes: 0,
            })
        };
        // The raw keys leave no copy on the device (also when the launch failed), and every
        // lane sees the slots.
        let wiped = s.memset_zeros(&mut raw_dev);
        launched.map_err(err("the key kernel"))?;
        wiped.map_err(err("wiping raw keys"))?;
        s.synchronize().map_err(err("the key kernel"))?;
        Ok(())
    }

    fn new_lanes(&self, n: usize) -> Result<Box<dyn Lanes>, DeviceError> {
        let sh = &self.shared;
        let mut lanes = Vec::new();
        for _ in 0..n.max(1) {
            let stream = sh.ctx.new_stream().map_err(err("a CUDA stream"))?;
            let dev = stream
                .alloc_zeros::<u8>(1 << 16)
                .map_err(err("device memory"))?;
            lanes.push(Lane {
                host: pinned(&sh.ctx, 1 << 16)?,
                dev,
                stream,
            });
        }
        Ok(Box::new(CudaLanes {
            shared: sh.clone(),
            lanes,
        }))
    }
}

impl Drop for CudaShared {
    fn drop(&mut self) {
        // Key schedules do not outlive the engine in device memory. Nothing to do on failure:
        // the context is going away.
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        let _ = self.upload.memset_zeros(&mut *slots);
        let _ = self.upload.synchronize();
    }
}

struct Lane {
    stream: Arc<CudaStream>,
    host: PinnedHostSlice<u8>,
    dev: CudaSlice<u8>,
}

/// One host thread's lanes: a CUDA stream each, with page-locked staging and a device buffer.
struct CudaLanes {
    shared: Arc<CudaShared>,
    lanes: Vec<Lane>,
}

/// Queues the packet kernel on lane `l`'s stream over the device copy of its staging:
/// `packets` descriptors at 0, their data at `data_at` (the engine checked both).
fn launch_kernel(
    sh: &CudaShared,
    l: &mut Lane,
    packets: u32,
    data_at: usize,
) -> Result<(), DeviceError> {
    let (mut descs, mut data) = l.dev.split_at_mut(data_at);
    let mut b = l.stream.launch_builder(&sh.packets);
    b.arg(&sh.tables)
        .arg(&sh.slots_ptr)
        .arg(&mut descs)
        .arg(&packets)
        .arg(&mut data);
    let blocks = packets.div_ceil(sh.block).max(1);
    // SAFETY: `srtp_packets(tables, slots, descs, n, data)`; the engine wrote `packets`
    // descriptors whose packets (with tag room) lie inside the data area, with slots
    // it uploaded (below the slot count), for this launch or, relaunched, for the lane's
    // last one (the kernel changes no offset, slot or length, and the buffer was not grown
    // since); `slots_ptr` is the slots' device address, alive as long as `shared`.
    unsafe {
        b.launch(LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (sh.block, 1, 1),
            shared_mem_bytes: 0,
        })
    }
    .map_err(err("the packet kernel"))?;
    Ok(())
}

impl Lanes for CudaLanes {
    fn count(&self) -> usize {
        self.lanes.len()
    }

    fn staging(&mut self, lane: usize, bytes: usize) -> Result<&mut [u8], DeviceError> {
        let l = &mut self.lanes[lane];
        // The engine waits for a lane before filling it again; this makes sure of it, at the
        // cost of a query when the stream is idle.
        l.stream.synchronize().map_err(err("the packet kernel"))?;
        if l.host.len() < bytes {
            let size = bytes.next_power_of_two();
            // The device buffer first: a failure then leaves the two the same size.
            l.dev = l
                .stream
                .alloc_zeros::<u8>(size)
                .map_err(err("device memory"))?;
            l.host = pinned(&self.shared.ctx, size)?;
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
        let sh = &self.shared;
        let l = &mut self.lanes[lane];
        if bytes > l.host.len() || bytes > l.dev.len() || data_at > bytes {
            return Err(DeviceError("launch refused: outside the staging".into()));
        }
        {
            let host = l.host.as_slice().map_err(err("staging"))?;
            l.stream
                .memcpy_htod(&host[..bytes], &mut l.dev.slice_mut(..bytes))
                .map_err(err("copy to the device"))?;
        }
        launch_kernel(sh, l, packets, data_at)?;
        let host = l.host.as_mut_slice().map_err(err("staging"))?;
        l.stream
            .memcpy_dtoh(&l.dev.slice(..bytes), &mut host[..bytes])
            .map_err(err("copy from the device"))?;
        Ok(())
    }

    fn wait(&mut self, lane: usize) -> Result<&[u8], DeviceError> {
        let l = &mut self.lanes[lane];
        l.stream.synchronize().map_err(err("the packet kernel"))?;
        l.host.as_slice().map_err(err("staging"))
    }

    fn relaunch(
        &mut self,
        lane: usize,
        packets: u32,
        data_at: usize,
        bytes: usize,
        times: u32,
    ) -> Result<(), DeviceError> {
        let sh = &self.shared;
        let l = &mut self.lanes[lane];
        if bytes > l.dev.len() || data_at > bytes {
            return Err(DeviceError(
                "relaunch refused: outside the device buffer".into(),
            ));
        }
        for _ in 0..times {
            launch_kernel(sh, l, packets, data_at)?;
        }
        Ok(())
    }
}

impl Drop for CudaLanes {
    fn drop(&mut self) {
        // Copies in flight read and write the staging: they finish before it is freed.
        for l in &self.lanes {
            let _ = l.stream.synchronize();
        }
    }
}
